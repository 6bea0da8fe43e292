/*
 * bulkfloor: the floor under a large message's latency between two hosts
 * (the veth pair of `bench/clients --netns`), a bare ping-pong of SIZE-byte
 * messages with no libfabric and no reliability, both sides busy-polling
 * non-blocking sockets as the providers do:
 *
 *   udp     UDP, the way the udp wire moves bulk data: each message sent
 *           with generic segmentation offload (UDP_SEGMENT, runs of at most
 *           64 KiB) and received with UDP_GRO (segments coalesced into one
 *           read), MTU-sized segments of payload only
 *   udphdr  the same, with a 36-byte header in front of every segment's
 *           payload, gathered from two iovecs a segment as the udp wire
 *           gathers its segment headers and the application's buffer
 *   tcp     one TCP stream, TCP_NODELAY: what Open MPI's btl tcp runs on
 *
 * COPIES=N (environment, client and server): the receiver copies each
 * message N more times in user space after it arrived (a reassembly buffer,
 * then the receive), to price those copies beside the kernel's.
 *
 *   bulkfloor MODE server PORT SIZE
 *   bulkfloor MODE client HOST PORT SIZE ITERS
 *       prints "FLOOR proto=MODE size=<bytes> mean=<usec> med=<usec>
 *       min=<usec>", one-way (half the round trip)
 *
 * The segment size is the path MTU of a 1500-byte link less the IP and UDP
 * headers (MTU=bytes overrides the 1500). Exits 3 when a message does not
 * come back within a second (a lost datagram: nothing here retransmits),
 * 2 on bad arguments.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "timing.h"

#ifndef SOL_UDP
#define SOL_UDP 17
#endif
#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

enum { HDR = 36, MAX_UDP = 65507, MAX_IOV = 2 * 64 };

static int tcp, hdrs, copies;
static size_t seg; /* bytes of one datagram, header included */
static char *buf, *spare, hdr[HDR];

/* One GSO run from `off`: the payload bytes it carries, or -1. */
static ssize_t send_run(int s, size_t off, size_t n)
{
	size_t room = hdrs ? seg - HDR : seg;
	size_t len = n - off, max = MAX_UDP / seg * room;
	if (len > max)
		len = max;
	if (!hdrs)
		return send(s, buf + off, len, MSG_DONTWAIT);
	struct iovec iov[MAX_IOV];
	int k = 0;
	for (size_t o = 0; o < len; o += room) {
		iov[k++] = (struct iovec){ hdr, HDR };
		iov[k++] = (struct iovec){ buf + off + o, len - o < room ? len - o : room };
	}
	struct msghdr m = { .msg_iov = iov, .msg_iovlen = (size_t)k };
	ssize_t r = sendmsg(s, &m, MSG_DONTWAIT);
	return r < 0 ? r : (ssize_t)len;
}

/* Sends one message; 0, or -1 on an error other than a full socket. */
static int send_msg(int s, size_t n)
{
	for (size_t off = 0; off < n;) {
		ssize_t r = tcp ? send(s, buf + off, n - off, MSG_DONTWAIT) : send_run(s, off, n);
		if (r < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
				continue;
			return -1;
		}
		off += (size_t)r;
	}
	return 0;
}

/* Busy-polls for one message of n payload bytes (deadline 1 s); 0 or -1. */
static int recv_msg(int s, size_t n)
{
	double dl = now_us() + 1e6;
	size_t got = 0;
	while (got < n) {
		/* A GRO read holds up to 64 KiB of datagrams; with headers, each
		 * segment's header lands in the buffer too and is not counted. */
		ssize_t r = recv(s, buf + got, tcp ? n - got : 65536, MSG_DONTWAIT);
		if (r < 0) {
			if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
				return -1;
			if (now_us() > dl)
				return -1;
			continue;
		}
		if (!tcp && hdrs)
			r -= (ssize_t)((size_t)r + seg - 1) / (ssize_t)seg * HDR;
		got += (size_t)r;
	}
	for (int i = 0; i < copies; i++)
		memcpy(i % 2 ? buf : spare, i % 2 ? spare : buf, n);
	return 0;
}

static int udp_socket(void)
{
	int s = socket(AF_INET, SOCK_DGRAM, 0), one = 1, big = 8 << 20;
	setsockopt(s, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
	setsockopt(s, SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
	if (setsockopt(s, SOL_UDP, UDP_GRO, &one, sizeof one)) {
		perror("UDP_GRO");
		exit(2);
	}
	return s;
}

static int set_gso(int s)
{
	int g = (int)seg;
	if (setsockopt(s, SOL_UDP, UDP_SEGMENT, &g, sizeof g)) {
		perror("UDP_SEGMENT");
		return -1;
	}
	return 0;
}

/* The server's socket, connected to its client. */
static int serve(struct sockaddr_in *a)
{
	int one = 1;
	if (tcp) {
		int l = socket(AF_INET, SOCK_STREAM, 0);
		setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		if (bind(l, (struct sockaddr *)a, sizeof *a) || listen(l, 1)) {
			perror("bind");
			return -1;
		}
		printf("READY\n");
		fflush(stdout);
		int s = accept(l, NULL, NULL);
		setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		return s;
	}
	int s = udp_socket();
	if (bind(s, (struct sockaddr *)a, sizeof *a)) {
		perror("bind");
		return -1;
	}
	printf("READY\n");
	fflush(stdout);
	struct sockaddr_in from;
	socklen_t fl = sizeof from;
	char c;
	if (recvfrom(s, &c, 1, 0, (struct sockaddr *)&from, &fl) < 0 || connect(s, (struct sockaddr *)&from, fl))
		return -1;
	return set_gso(s) ? -1 : s;
}

/* The client's socket, connected to the server (which knows it then). */
static int dial(struct sockaddr_in *a)
{
	int one = 1;
	if (tcp) {
		int s = socket(AF_INET, SOCK_STREAM, 0);
		double dl = now_us() + 5e6;
		while (connect(s, (struct sockaddr *)a, sizeof *a)) {
			if (now_us() > dl)
				return -1;
			usleep(10000); /* the server is starting: not a measurement */
		}
		setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		return s;
	}
	int s = udp_socket();
	if (connect(s, (struct sockaddr *)a, sizeof *a) || send(s, "x", 1, 0) != 1)
		return -1;
	return set_gso(s) ? -1 : s;
}

int main(int argc, char **argv)
{
	int server = argc == 5 && !strcmp(argv[2], "server");
	if (!server && !(argc == 7 && !strcmp(argv[2], "client"))) {
		fprintf(stderr, "usage: bulkfloor udp|udphdr|tcp server PORT SIZE\n"
				"       bulkfloor udp|udphdr|tcp client HOST PORT SIZE ITERS\n");
		return 2;
	}
	tcp = !strcmp(argv[1], "tcp");
	hdrs = !strcmp(argv[1], "udphdr");
	if (!tcp && !hdrs && strcmp(argv[1], "udp"))
		return 2;
	copies = getenv("COPIES") ? atoi(getenv("COPIES")) : 0;
	seg = (getenv("MTU") ? (size_t)atoi(getenv("MTU")) : 1500) - 28;
	size_t size = (size_t)atol(argv[server ? 4 : 5]);
	if (seg <= HDR || size < 1 || size > (1 << 30))
		return 2;
	buf = calloc(1, size + 65536);
	spare = calloc(1, size + 65536);
	struct sockaddr_in a = { .sin_family = AF_INET };
	a.sin_port = htons((unsigned short)atoi(argv[3 + !server]));
	if (server)
		a.sin_addr.s_addr = htonl(INADDR_ANY);
	else
		inet_pton(AF_INET, argv[3], &a.sin_addr);
	int s = server ? serve(&a) : dial(&a);
	if (s < 0 || !buf || !spare)
		return 1;
	if (server) {
		/* Answers until the client goes: a second without a message. */
		while (recv_msg(s, size) == 0 && send_msg(s, size) == 0)
			;
		return 0;
	}
	int iters = atoi(argv[6]);
	if (iters < 1)
		return 2;
	double *rt = malloc(sizeof *rt * (size_t)iters);
	for (int i = -iters / 10 - 1; i < iters; i++) {
		double t = now_us();
		if (send_msg(s, size) || recv_msg(s, size)) {
			fprintf(stderr, "bulkfloor: no answer\n");
			return 3;
		}
		if (i >= 0)
			rt[i] = now_us() - t;
	}
	print_floor(argv[1], size, rt, iters);
	return 0;
}
