/*
 * xcore: how fast data moves between CPU 0 and CPU 1 right now.
 *
 * Two threads, pinned to CPUs 0 and 1, hand one 64 KiB buffer back and
 * forth: the writer fills it from its own source, the reader copies it out,
 * then the writer fills it again. Every byte crosses from one core's cache
 * to the other's twice per round, as a message does between two processes
 * on one host (the sender's copy into a socket buffer, the receiver's copy
 * out of it).
 *
 * On this VM the answer changes by up to 30x over seconds: the host moves
 * the two virtual CPUs between cores that share a cache and cores that do
 * not. bench/run runs this before each round so that every round's numbers
 * come with the placement they were measured in.
 *
 * Prints "XCORE mbps=<MB/s of the writer's copies>" and exits 0; exits 2
 * (printing why) when it cannot pin to two CPUs.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LEN (64 * 1024)
#define ROUNDS 2000

static char *shared_buf;
static _Atomic long written, read_back;

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

static int pin(int cpu)
{
	cpu_set_t s;
	CPU_ZERO(&s);
	CPU_SET(cpu, &s);
	return sched_setaffinity(0, sizeof s, &s);
}

static void *reader(void *arg)
{
	char *dst = malloc(LEN);
	(void)arg;
	if (!dst)
		exit(2);
	for (long i = 0; i < ROUNDS; i++) {
		while (atomic_load_explicit(&written, memory_order_acquire) <= i)
			;
		memcpy(dst, shared_buf, LEN);
		atomic_store_explicit(&read_back, i + 1, memory_order_release);
	}
	free(dst);
	return NULL;
}

int main(void)
{
	pthread_t t;
	pthread_attr_t attr;
	cpu_set_t one;
	char *src = malloc(LEN);
	double in_copy = 0;

	shared_buf = aligned_alloc(4096, LEN);
	if (!src || !shared_buf)
		return 2;
	memset(src, 1, LEN);
	memset(shared_buf, 0, LEN);
	/* The reader starts on CPU 1: under SCHED_FIFO (bench/run --rt) a
	 * thread born on CPU 0 would never run there past the spinning writer. */
	CPU_ZERO(&one);
	CPU_SET(1, &one);
	if (pin(0) || pthread_attr_init(&attr) ||
	    pthread_attr_setaffinity_np(&attr, sizeof one, &one) ||
	    pthread_create(&t, &attr, reader, NULL)) {
		printf("XCORE skipped: cannot run on CPU 0 and CPU 1\n");
		return 2;
	}
	for (long i = 0; i < ROUNDS; i++) {
		while (atomic_load_explicit(&read_back, memory_order_acquire) < i)
			;
		double t0 = now_s();
		memcpy(shared_buf, src, LEN);
		in_copy += now_s() - t0;
		atomic_store_explicit(&written, i + 1, memory_order_release);
	}
	pthread_join(t, NULL);
	printf("XCORE mbps=%.0f\n", (double)ROUNDS * LEN / in_copy / 1e6);
	return 0;
}
