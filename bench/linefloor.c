/*
 * linefloor: the floor under any shared-memory one-way latency on this
 * machine: two processes, pinned to CPUs 0 and 1, pass a counter back and
 * forth through one cache line each way (one writes, the other spins until
 * it sees the value, then answers in the other line). What is left of a
 * provider's small-message latency above this is its software and any
 * further cache lines it makes cross between the cores.
 *
 *   linefloor [ITERS]    prints  FLOOR proto=line one_way=<usec>
 *
 * Like every two-CPU number on a VM, it moves with where the host puts the
 * two virtual CPUs (see bench/xcore.c).
 */
#include "pin.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 1000000;
	/* Two lines, 128 bytes apart: no false sharing with the adjacent-line
	 * prefetcher either. */
	volatile uint64_t *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED) {
		perror("mmap");
		return 2;
	}
	volatile uint64_t *ping = m, *pong = m + 16;
	pid_t child = fork();
	if (child < 0) {
		perror("fork");
		return 2;
	}
	if (child == 0) {
		pin(1);
		for (long i = 1; i <= n; i++) {
			while (*ping != (uint64_t)i)
				;
			*pong = i;
		}
		_exit(0);
	}
	pin(0);
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (long i = 1; i <= n; i++) {
		*ping = i;
		while (*pong != (uint64_t)i)
			;
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	waitpid(child, NULL, 0);
	double ns = (t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec);
	printf("FLOOR proto=line one_way=%.3f\n", ns / n / 2 / 1000);
	return 0;
}
