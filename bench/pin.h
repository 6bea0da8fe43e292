/*
 * pin.h: pin the calling process to one CPU (the two-CPU floor probes,
 * bench/linefloor.c and bench/ringfloor.c).
 */
#ifndef GNIX_BENCH_PIN_H
#define GNIX_BENCH_PIN_H
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>

static void pin(int cpu)
{
	cpu_set_t s;
	CPU_ZERO(&s);
	CPU_SET(cpu, &s);
	if (sched_setaffinity(0, sizeof s, &s))
		perror("sched_setaffinity");
}
#endif
