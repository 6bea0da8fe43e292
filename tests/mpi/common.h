/* Shared helpers for the gnix MPI test programs (header-only). */
#ifndef GNIX_MPI_COMMON_H
#define GNIX_MPI_COMMON_H
#include <mpi.h>
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

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
/*
 * Message sizes either side of every protocol switch a libfabric provider
 * under test may have (gnix: inject_size 4096; FI_GNIX_SHM_EAGER 8192 and
 * the one shm slot's payload, 8208; messages spanning two slots up to 16464
 * and four up to 32976, the most the mailbox carries; the shm wire's split
 * pull from 32 KiB; the rendezvous threshold 65536; the udp wire's pushed
 * rendezvous head 131072), then a few MiB.
 */
static const size_t proto_sizes[] __attribute__((unused)) = {
	0,      1,      8,      4095,   4096,   4097,   8191,   8192,
	8193,   8208,   8209,   16464,  16465,  32767,  32768,  32769,
	32976,  32977,  65535,  65536,  65537,  131071, 131072, 131073,
	1 << 20, (4 << 20) + 3,
};
#define N_PROTO_SIZES ((int)(sizeof(proto_sizes) / sizeof(proto_sizes[0])))
#define MAX_PROTO_SIZE ((size_t)(4 << 20) + 3)

/*
 * Phase watchdog.  Every program names what it is doing with PHASE("...");
 * each PHASE re-arms a per-rank alarm (GNIX_MPI_PHASE_SECS, default 20 s).
 * A rank whose phase outlives it prints
 *     TIMEOUT rank <r> in phase <name> after <n> s
 * and a backtrace of its main thread (the blocked MPI call and the
 * libfabric/provider frames under it) to stderr, then exits with 124: a hang
 * fails fast and says where, instead of waiting for the harness's hard
 * timeout to kill the job silently.
 */
static const char *volatile wd_phase = "MPI_Init";
static volatile int wd_rank = -1;
static volatile unsigned wd_secs;
static volatile pid_t wd_main_tid;

static __attribute__((unused)) void wd_write(const char *s)
{
	ssize_t r = write(2, s, strlen(s));
	(void)r;
}

static __attribute__((unused)) void wd_fire(int sig)
{
	(void)sig;
	pid_t tid = (pid_t)syscall(SYS_gettid);
	if (tid != wd_main_tid) {
		/* report from the main thread: that is where the MPI call is */
		syscall(SYS_tgkill, getpid(), wd_main_tid, SIGALRM);
		return;
	}
	char msg[512];
	snprintf(msg, sizeof msg, "TIMEOUT rank %d in phase %s after %u s (pid %d); backtrace:\n",
		 wd_rank, wd_phase, wd_secs, (int)getpid());
	wd_write(msg);
	void *bt[64];
	int n = backtrace(bt, 64);
	backtrace_symbols_fd(bt, n, 2);
	_exit(124);
}

/* Call right after MPI_Init/MPI_Init_thread. */
static inline void watchdog_start(void)
{
	int rk = -1;
	MPI_Comm_rank(MPI_COMM_WORLD, &rk);
	wd_rank = rk;
	wd_main_tid = (pid_t)syscall(SYS_gettid);
	const char *e = getenv("GNIX_MPI_PHASE_SECS");
	wd_secs = e && atoi(e) > 0 ? (unsigned)atoi(e) : 20;
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = wd_fire;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGALRM, &sa, NULL);
	/* load libgcc's unwinder now: backtrace() in the handler must not
	 * be the first call (it may allocate then) */
	void *bt[2];
	backtrace(bt, 2);
	alarm(wd_secs);
}

/* Name the phase about to run (printf format) and re-arm the alarm; main
 * thread only.  GNIX_MPI_TRACE=1 makes rank 0 print every phase. */
static char wd_buf[256] __attribute__((unused));
#define PHASE(...)                                                             \
	do {                                                                   \
		snprintf(wd_buf, sizeof wd_buf, __VA_ARGS__);                  \
		wd_phase = wd_buf;                                             \
		alarm(wd_secs);                                                \
		if (wd_rank == 0 && getenv("GNIX_MPI_TRACE"))                  \
			fprintf(stderr, "phase %s\n", wd_buf);                 \
	} while (0)

/* Stop the watchdog before MPI_Finalize returns control to the harness. */
#define PHASE_DONE() alarm(0)
#endif
