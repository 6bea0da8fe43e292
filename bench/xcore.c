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
 *
 * `xcore loop` measures the other thing the host changes: how fast the two
 * CPUs run instructions. Both threads, pinned as above, run the same chain
 * of dependent additions at once (as both ranks of a message-rate test
 * are busy at once), and it prints "XCORE loop_ps=<picoseconds a turn,
 * the slower thread's>". On this VM it moves by up to 1.6x over minutes,
 * and a provider whose path is long in instructions moves with it
 * (bench/README.md, "How fast the CPUs run").
 *
 * `xcore wide` measures what that chain does not see: how many independent
 * instructions each CPU retires. Both threads, pinned as above, run eight
 * independent chains of additions at once, and it prints "XCORE
 * wide_ps=<picoseconds a turn of eight additions, the slower thread's>
 * wide0=<CPU 0's> wide1=<CPU 1's>". On this VM a CPU's rate moves by 2x
 * within seconds while `loop` stays put (as when another tenant on the
 * same core takes issue slots: a chain's latency does not show it), and
 * gnix's own work a message moves with it, one rank at a time
 * (bench/README.md, "Runs of one build that differ").
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

/* Pins this thread to CPU 0 and starts `fn` on CPU 1, born there: under
 * SCHED_FIFO (bench/run --rt) a thread born on CPU 0 would never run there
 * past the spinning one. 0, or -1 (printing why) when it cannot. */
static int start_pair(pthread_t *t, void *(*fn)(void *))
{
	pthread_attr_t attr;
	cpu_set_t one;
	CPU_ZERO(&one);
	CPU_SET(1, &one);
	if (pin(0) || pthread_attr_init(&attr) ||
	    pthread_attr_setaffinity_np(&attr, sizeof one, &one) ||
	    pthread_create(t, &attr, fn, NULL)) {
		printf("XCORE skipped: cannot run on CPU 0 and CPU 1\n");
		return -1;
	}
	return 0;
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

#define TURNS 50000000L
static double turn_s[2];
static _Atomic int pair_ready;
static void (*pair_turns)(int);

/* Each thread of a timed pair waits here for the other: both start
 * together. */
static void pair_start(void)
{
	atomic_fetch_add(&pair_ready, 1);
	while (atomic_load(&pair_ready) < 2)
		;
}

static void *pair_thread(void *arg)
{
	(void)arg;
	pair_turns(1);
	return NULL;
}

/* Runs `turns` on CPU 0 (as thread 0) and CPU 1 (as thread 1) at once;
 * each records its time in turn_s. 0, or -1 when it cannot pin. */
static int time_pair(void (*turns)(int))
{
	pthread_t t;
	pair_turns = turns;
	if (start_pair(&t, pair_thread))
		return -1;
	turns(0);
	pthread_join(t, NULL);
	return 0;
}

/* Picoseconds a turn of thread `who`'s pair run. */
static double turn_ps(int who)
{
	return turn_s[who] / TURNS * 1e12;
}

static double slower_ps(void)
{
	return turn_ps(0) > turn_ps(1) ? turn_ps(0) : turn_ps(1);
}

/* TURNS turns of a chain of dependent additions, timed, as thread `who`. */
static void loop_turns(int who)
{
	volatile unsigned long sink;
	unsigned long x = (unsigned long)who;
	pair_start();
	double t0 = now_s();
	for (long i = 0; i < TURNS; i++) {
		x += (unsigned long)i ^ (x >> 3);
		__asm__ volatile("" : "+r"(x));
	}
	turn_s[who] = now_s() - t0;
	sink = x;
	(void)sink;
}

/* TURNS turns of eight independent additions, timed, as thread `who`. */
static void wide_turns(int who)
{
	unsigned long a = 1, b = 2, c = 3, d = 4, e = 5, f = 6, g = 7, h = (unsigned long)who;
	pair_start();
	double t0 = now_s();
	for (long i = 0; i < TURNS; i++) {
		a += 1; b += 3; c += 5; d += 7; e += 9; f += 11; g += 13; h += 15;
		__asm__ volatile("" : "+r"(a), "+r"(b), "+r"(c), "+r"(d), "+r"(e), "+r"(f), "+r"(g), "+r"(h));
	}
	turn_s[who] = now_s() - t0;
	volatile unsigned long sink = a ^ b ^ c ^ d ^ e ^ f ^ g ^ h;
	(void)sink;
}

static int loop_main(void)
{
	if (time_pair(loop_turns))
		return 2;
	printf("XCORE loop_ps=%.0f\n", slower_ps());
	return 0;
}

static int wide_main(void)
{
	if (time_pair(wide_turns))
		return 2;
	printf("XCORE wide_ps=%.0f wide0=%.0f wide1=%.0f\n", slower_ps(), turn_ps(0), turn_ps(1));
	return 0;
}

int main(int argc, char **argv)
{
	pthread_t t;
	char *src;
	double in_copy = 0;

	if (argc > 1 && strcmp(argv[1], "loop") == 0)
		return loop_main();
	if (argc > 1 && strcmp(argv[1], "wide") == 0)
		return wide_main();
	src = malloc(LEN);

	shared_buf = aligned_alloc(4096, LEN);
	if (!src || !shared_buf)
		return 2;
	memset(src, 1, LEN);
	memset(shared_buf, 0, LEN);
	if (start_pair(&t, reader))
		return 2;
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
