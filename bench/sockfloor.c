/*
 * sockfloor: the kernel's own cost of a 1 MiB ping-pong between CPU 0 and
 * CPU 1 over loopback, with no libfabric in it.
 *
 *   sockfloor udp ITERS   64 KiB datagrams (65,463 payload bytes behind a
 *                         44-byte header, as the udp wire sends them), each
 *                         received straight into its place in the buffer
 *   sockfloor tcp ITERS   one TCP stream, TCP_NODELAY
 *   sockfloor udp|tcp ITERS stream
 *                         streaming instead of ping-pong: ITERS messages of
 *                         1 MiB from CPU 1 to CPU 0, at most WINDOW of them
 *                         unacknowledged (the receiver answers each with a
 *                         1-byte message): the most any protocol over these
 *                         sockets could move one way, the bound a provider's
 *                         one-sided write bandwidth (fi_rma_bench) meets
 *
 * Both sides busy-poll non-blocking sockets, as the providers do under
 * manual progress. On this VM the UDP path runs in modes (about 110, 200
 * and 600 µs one-way for 1 MiB) that change over seconds while TCP's
 * stays put; bench/run measures this beside each fi_pair run, so a
 * verdict comes with the kernel's UDP/TCP ratio of that moment.
 *
 * Prints "FLOOR proto=udp|tcp size=1048576 med=<usec> min=<usec>" (one-way,
 * half the round trip), or with stream "STREAM proto=udp|tcp size=1048576
 * mbps=<MB/s>" (1e6 B/s), and exits 0; exits 2 when it cannot pin to two CPUs
 * or get a socket buffer that holds a whole message, 3 on a timeout (a
 * lost datagram: nothing here retransmits).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "timing.h"

#define MSG (1 << 20)
#define HDR 44
#define DGRAM 65507 /* largest UDP payload over IPv4 */
#define PAYLOAD (DGRAM - HDR)
#define WARMUP 10
#define WINDOW 4 /* messages in flight when streaming */

static int udp;
static pid_t echo_pid; /* the parent's: killed with it on a timeout */

static int pin(int cpu)
{
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    return sched_setaffinity(0, sizeof s, &s);
}

static void on_alarm(int sig)
{
    (void)sig;
    static const char m[] = "sockfloor: timed out (a datagram lost?)\n";
    if (echo_pid > 0)
        kill(echo_pid, SIGKILL);
    if (write(2, m, sizeof m - 1) < 0) {
    }
    _exit(3);
}

static void send_msg(int s, char *buf)
{
    if (udp) {
        static char hdr[HDR];
        for (long off = 0; off < MSG; off += PAYLOAD) {
            size_t l = MSG - off < PAYLOAD ? MSG - off : PAYLOAD;
            struct iovec iov[2] = {{hdr, HDR}, {buf + off, l}};
            struct msghdr m = {.msg_iov = iov, .msg_iovlen = 2};
            while (sendmsg(s, &m, 0) < 0) {
            }
        }
        return;
    }
    for (long off = 0; off < MSG;) {
        long r = send(s, buf + off, MSG - off, MSG_DONTWAIT);
        if (r > 0)
            off += r;
    }
}

static void recv_msg(int s, char *buf)
{
    if (udp) {
        char hdr[HDR];
        for (long off = 0; off < MSG; off += PAYLOAD) {
            size_t l = MSG - off < PAYLOAD ? MSG - off : PAYLOAD;
            struct iovec iov[2] = {{hdr, HDR}, {buf + off, l}};
            struct msghdr m = {.msg_iov = iov, .msg_iovlen = 2};
            while (recvmsg(s, &m, MSG_DONTWAIT) < 0) {
            }
        }
        return;
    }
    for (long off = 0; off < MSG;) {
        long r = recv(s, buf + off, MSG - off, MSG_DONTWAIT);
        if (r > 0)
            off += r;
    }
}

/* Two connected sockets on 127.0.0.1: a[0] for the client, a[1] for the echo. */
static int sockets(int a[2])
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof sa;
    if (udp) {
        struct sockaddr_in at[2];
        for (int i = 0; i < 2; i++) {
            int big = (WINDOW + 2) * MSG, got = 0;
            socklen_t gl = sizeof got;
            a[i] = socket(AF_INET, SOCK_DGRAM, 0);
            at[i] = sa;
            if (a[i] < 0 || bind(a[i], (void *)&at[i], sizeof at[i]) < 0 ||
                getsockname(a[i], (void *)&at[i], &len) < 0)
                return -1;
            /* A whole message must fit in the receive buffer: nothing here
             * retransmits. Unprivileged processes may be capped below it. */
            if (setsockopt(a[i], SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big) < 0)
                setsockopt(a[i], SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
            getsockopt(a[i], SOL_SOCKET, SO_RCVBUF, &got, &gl);
            if (got < (WINDOW + 1) * MSG) {
                fprintf(stderr, "sockfloor: receive buffer %d B, need %d\n", got, (WINDOW + 1) * MSG);
                return -2;
            }
        }
        for (int i = 0; i < 2; i++)
            if (connect(a[i], (void *)&at[1 - i], sizeof at[1 - i]) < 0)
                return -1;
        return 0;
    }
    int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    if (l < 0 || bind(l, (void *)&sa, sizeof sa) < 0 || listen(l, 1) < 0 ||
        getsockname(l, (void *)&sa, &len) < 0)
        return -1;
    a[0] = socket(AF_INET, SOCK_STREAM, 0);
    if (a[0] < 0 || connect(a[0], (void *)&sa, sizeof sa) < 0)
        return -1;
    a[1] = accept(l, NULL, NULL);
    close(l);
    if (a[1] < 0)
        return -1;
    for (int i = 0; i < 2; i++)
        setsockopt(a[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return 0;
}

/* One byte each way: the streaming receiver's acknowledgement. */
static void send_ack(int s)
{
    char b = 1;
    while (send(s, &b, 1, MSG_DONTWAIT) != 1) {
    }
}

static void recv_ack(int s)
{
    char b;
    while (recv(s, &b, 1, MSG_DONTWAIT) != 1) {
    }
}

int main(int argc, char **argv)
{
    int stream = argc == 4 && !strcmp(argv[3], "stream");
    if ((argc != 3 && !stream) || (strcmp(argv[1], "udp") && strcmp(argv[1], "tcp")) || atoi(argv[2]) < 1) {
        fprintf(stderr, "usage: sockfloor udp|tcp ITERS [stream]\n");
        return 1;
    }
    udp = !strcmp(argv[1], "udp");
    int iters = atoi(argv[2]), s[2];
    int r = sockets(s);
    if (r < 0) {
        if (r == -1)
            perror("sockfloor: socket set-up");
        return 2;
    }
    char *tx = aligned_alloc(4096, MSG), *rx = aligned_alloc(4096, MSG);
    double *rt = calloc(iters, sizeof *rt);
    if (!tx || !rx || !rt)
        return 1;
    memset(tx, 3, MSG);
    memset(rx, 0, MSG);
    signal(SIGALRM, on_alarm);
    pid_t echo = fork();
    if (echo < 0)
        return 1;
    echo_pid = echo;
    if (echo == 0) {
        /* The parent's alarm does not reach us: our own bound. */
        alarm(30);
        if (pin(0) < 0)
            _exit(2);
        for (int i = 0; i < iters + WARMUP; i++) {
            recv_msg(s[1], rx);
            if (stream)
                send_ack(s[1]);
            else
                send_msg(s[1], tx);
        }
        _exit(0);
    }
    alarm(30);
    if (pin(1) < 0) {
        kill(echo, SIGKILL);
        waitpid(echo, NULL, 0);
        fprintf(stderr, "sockfloor: cannot pin to CPU 1\n");
        return 2;
    }
    if (stream) {
        /* Messages and acknowledgements share one ordered channel each
         * way; the window keeps the receiver's buffer from overflowing
         * (nothing retransmits). */
        double t0 = 0;
        int acked = 0;
        for (int i = 0; i < iters + WARMUP; i++) {
            if (i == WARMUP) {
                while (acked < WARMUP) {
                    recv_ack(s[0]);
                    acked++;
                }
                t0 = now_us();
            }
            while (i - acked >= WINDOW) {
                recv_ack(s[0]);
                acked++;
            }
            send_msg(s[0], tx);
        }
        while (acked < iters + WARMUP) {
            recv_ack(s[0]);
            acked++;
        }
        double t = now_us() - t0;
        int st = 0;
        waitpid(echo, &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            return 2;
        printf("STREAM proto=%s size=%d mbps=%.0f\n", argv[1], MSG, (double)iters * MSG / t);
        return 0;
    }
    for (int i = 0; i < iters + WARMUP; i++) {
        double t0 = now_us();
        send_msg(s[0], tx);
        recv_msg(s[0], rx);
        if (i >= WARMUP)
            rt[i - WARMUP] = now_us() - t0;
    }
    int st = 0;
    waitpid(echo, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return 2;
    qsort(rt, iters, sizeof *rt, cmp_double);
    printf("FLOOR proto=%s size=%d med=%.1f min=%.1f\n", argv[1], MSG, rt[iters / 2] / 2, rt[0] / 2);
    return 0;
}
