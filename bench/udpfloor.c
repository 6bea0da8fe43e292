/*
 * udpfloor: the floor under the udp wire's small-message latency, a bare
 * UDP ping-pong of SIZE-byte datagrams between two processes (across the
 * veth pair of `bench/run --netns`, each in its namespace), both sides
 * busy-polling a non-blocking socket as the providers do under manual
 * progress. No libfabric, no reliability: a lost datagram ends the run.
 * Both sockets are connected, as the udp wire's sockets to a busy peer
 * are (provider/nic/udp.rs, `Connected`): the kernel then finds the
 * socket and its route without a lookup on either side. Unconnected,
 * this floor read 0.6 us higher on the namespaces' veth (3.9 against
 * 3.3 us one-way, 2026-12-06), a floor the udp wire does not stand on.
 *
 *   udpfloor server PORT                 answers every datagram (forever),
 *                                        connected to the first sender
 *   udpfloor client HOST PORT SIZE ITERS prints, one-way (half the round
 *                                        trip), in microseconds:
 *       FLOOR proto=udp size=<bytes> mean=<usec> med=<usec> min=<usec>
 *   mean is what to set against a client that reports a mean (fabtests'
 *   ping-pong does): on a host that stalls its VM now and then, a median
 *   leaves out the stalls a mean counts, and the difference is the host's.
 *
 * With UDPFLOOR_THREAD=1 each side first starts a second thread that
 * only sleeps, as every Open MPI rank has two besides its main one (the
 * runtime's): a process whose threads share its descriptor table makes
 * the kernel take and drop a reference on the socket's file in every
 * call, which the single-threaded floor does not pay (0.1-0.4 us one-way
 * more on the namespaces' veth, 2026-12-06). gnix's progress thread does
 * the same to a single-threaded application.
 *
 * Exits 3 when a datagram does not come back within a second.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "timing.h"

/* Busy-polls for one datagram (deadline 1 s); its length, or -1. */
static ssize_t recv_spin(int s, char *buf, size_t cap)
{
	double dl = now_us() + 1e6;
	for (;;) {
		ssize_t n = recv(s, buf, cap, MSG_DONTWAIT);
		if (n >= 0)
			return n;
		if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
			return -1;
		if (now_us() > dl)
			return -1;
	}
}

/* The second thread of UDPFLOOR_THREAD: it never touches a descriptor. */
static void *sleeper(void *arg)
{
	(void)arg;
	for (;;)
		pause();
	return NULL;
}

int main(int argc, char **argv)
{
	static char buf[65536];
	const char *th = getenv("UDPFLOOR_THREAD");
	pthread_t t;
	if (th && atoi(th) && pthread_create(&t, NULL, sleeper, NULL)) {
		fprintf(stderr, "udpfloor: no second thread\n");
		return 2;
	}
	int s = socket(AF_INET, SOCK_DGRAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET };
	if (argc == 3 && !strcmp(argv[1], "server")) {
		a.sin_port = htons((unsigned short)atoi(argv[2]));
		a.sin_addr.s_addr = htonl(INADDR_ANY);
		if (bind(s, (struct sockaddr *)&a, sizeof a)) {
			perror("bind");
			return 1;
		}
		printf("READY\n");
		fflush(stdout);
		struct sockaddr_in from;
		socklen_t fl = sizeof from;
		ssize_t n;
		while ((n = recvfrom(s, buf, sizeof buf, MSG_DONTWAIT, (struct sockaddr *)&from, &fl)) < 0)
			;
		if (connect(s, (struct sockaddr *)&from, fl)) {
			perror("connect");
			return 1;
		}
		for (;;) {
			if (n >= 0)
				send(s, buf, (size_t)n, 0);
			n = recv(s, buf, sizeof buf, MSG_DONTWAIT);
		}
	}
	if (argc != 6 || strcmp(argv[1], "client")) {
		fprintf(stderr, "usage: udpfloor server PORT | udpfloor client HOST PORT SIZE ITERS\n");
		return 2;
	}
	a.sin_port = htons((unsigned short)atoi(argv[3]));
	inet_pton(AF_INET, argv[2], &a.sin_addr);
	size_t size = (size_t)atoi(argv[4]);
	int iters = atoi(argv[5]);
	if (size > sizeof buf || iters < 1)
		return 2;
	if (connect(s, (struct sockaddr *)&a, sizeof a)) {
		perror("connect");
		return 1;
	}
	double *rt = malloc(sizeof *rt * (size_t)iters);
	for (int i = -iters / 10 - 1; i < iters; i++) {
		double t = now_us();
		send(s, buf, size, 0);
		if (recv_spin(s, buf, sizeof buf) < 0) {
			fprintf(stderr, "udpfloor: no answer\n");
			return 3;
		}
		if (i >= 0)
			rt[i] = now_us() - t;
	}
	print_floor("udp", size, rt, iters);
	return 0;
}
