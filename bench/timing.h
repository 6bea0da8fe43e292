/*
 * timing.h: the clock, the sort order and the FLOOR line of the bench
 * programs that time ping-pongs (the socket floors, and fi_common.h's
 * programs). Static inline helpers only (a program need not use them
 * all); each program is still one C file built with one `cc` line.
 */
#ifndef GNIX_BENCH_TIMING_H
#define GNIX_BENCH_TIMING_H
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* Monotonic microseconds. */
static inline double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* qsort order of doubles, ascending. */
static inline int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* The FLOOR line of a ping-pong whose `n` round trips (µs) are in `rt`
 * (sorted here): one-way mean, median and least, half a round trip each.
 * The mean is what to set against a client that reports a mean. */
static inline void print_floor(const char *proto, size_t size, double *rt, int n)
{
	double sum = 0;
	for (int i = 0; i < n; i++)
		sum += rt[i];
	qsort(rt, (size_t)n, sizeof *rt, cmp_double);
	printf("FLOOR proto=%s size=%zu mean=%.2f med=%.2f min=%.2f\n", proto, size, sum / n / 2, rt[n / 2] / 2,
	       rt[0] / 2);
}
#endif
