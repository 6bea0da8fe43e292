/* Shared helpers for the gnix MPI test programs (header-only). */
#ifndef GNIX_MPI_COMMON_H
#define GNIX_MPI_COMMON_H
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAIL(...)                                                              \
	do {                                                                   \
		int _rk = -1;                                                  \
		MPI_Comm_rank(MPI_COMM_WORLD, &_rk);                           \
		fprintf(stderr, "FAIL rank %d %s:%d: ", _rk, __FILE__,         \
			__LINE__);                                             \
		fprintf(stderr, __VA_ARGS__);                                  \
		fprintf(stderr, "\n");                                         \
		fflush(stderr);                                                \
		MPI_Abort(MPI_COMM_WORLD, 1);                                  \
	} while (0)

#define MPI_CHK(call)                                                          \
	do {                                                                   \
		int _e = (call);                                               \
		if (_e != MPI_SUCCESS)                                         \
			FAIL("%s returned %d", #call, _e);                     \
	} while (0)

/* deterministic byte pattern depending on (seed, index) */
static inline unsigned char pattern(unsigned seed, size_t i)
{
	return (unsigned char)((seed * 131u) ^ (i * 7u) ^ (i >> 8));
}

static inline void fill_pattern(void *buf, size_t len, unsigned seed)
{
	unsigned char *b = buf;
	for (size_t i = 0; i < len; i++)
		b[i] = pattern(seed, i);
}

static inline long check_pattern(const void *buf, size_t len, unsigned seed)
{
	const unsigned char *b = buf;
	for (size_t i = 0; i < len; i++)
		if (b[i] != pattern(seed, i))
			return (long)i;
	return -1;
}
#endif
