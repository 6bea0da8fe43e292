/*
 * timing.h: the clock and the sort order every bench program that times
 * a ping-pong uses (the socket floors, and fi_common.h's programs). Static
 * helpers only; each program is still one C file built with one `cc` line.
 */
#ifndef GNIX_BENCH_TIMING_H
#define GNIX_BENCH_TIMING_H
#include <time.h>

/* Monotonic microseconds. */
static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* qsort order of doubles, ascending. */
static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}
#endif
