/* Shared helpers for the gnix MPI test programs (header-only). */
#ifndef GNIX_MPI_COMMON_H
#define GNIX_MPI_COMMON_H
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* dladdr, for the watchdog's backtraces */
#endif
#include <mpi.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
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
 * libfabric/provider frames under it), then of each of its other threads
 * (an MPI_THREAD_MULTIPLE program's workers, the provider's progress
 * thread), to stderr, then exits with 124: a hang fails fast and says
 * where, instead of waiting for the harness's hard timeout to kill the job
 * silently.
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

/* The calling thread's stack, a frame a line, each line tagged with the
 * rank and written at once (the ranks' reports interleave on the
 * launcher's stderr): object, nearest exported symbol and offset, as
 * backtrace_symbols_fd prints them, from dladdr (which does not allocate). */
static __attribute__((unused)) void wd_backtrace(void)
{
	void *bt[64];
	int n = backtrace(bt, 64);
	for (int i = 0; i < n; i++) {
		Dl_info di;
		char line[512];
		if (dladdr(bt[i], &di) && di.dli_fname) {
			const char *sym = di.dli_sname ? di.dli_sname : "";
			char *base = di.dli_sname ? (char *)di.dli_saddr : (char *)di.dli_fbase;
			snprintf(line, sizeof line, "  [rank %d] %s(%s+0x%lx)[%p]\n", wd_rank, di.dli_fname, sym,
				 (unsigned long)((char *)bt[i] - base), bt[i]);
		} else {
			snprintf(line, sizeof line, "  [rank %d] [%p]\n", wd_rank, bt[i]);
		}
		wd_write(line);
	}
}

/* The thread asked to print its stack (SIGURG, see wd_fire) says it did. */
static volatile int wd_dumped;

static __attribute__((unused)) void wd_dump(int sig)
{
	(void)sig;
	char msg[64];
	snprintf(msg, sizeof msg, "rank %d thread %d:\n", wd_rank, (int)syscall(SYS_gettid));
	wd_write(msg);
	wd_backtrace();
	__atomic_store_n(&wd_dumped, 1, __ATOMIC_RELEASE);
}

/* Every thread but the main one prints its stack in turn: each is sent
 * SIGURG and waited for (at most 1 s: a thread blocked with signals masked
 * is skipped). Raw getdents64 on /proc/self/task, since the handler must
 * not allocate. */
struct wd_dirent64 { /* the kernel's linux_dirent64 */
	uint64_t d_ino;
	int64_t d_off;
	unsigned short d_reclen;
	unsigned char d_type;
	char d_name[];
};

static __attribute__((unused)) void wd_dump_others(void)
{
	int fd = open("/proc/self/task", O_RDONLY | O_DIRECTORY);
	if (fd < 0)
		return;
	char buf[4096] __attribute__((aligned(8)));
	long nread;
	while ((nread = syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0) {
		for (long off = 0; off < nread;) {
			struct wd_dirent64 *d = (struct wd_dirent64 *)(buf + off);
			off += d->d_reclen;
			pid_t t = (pid_t)atoi(d->d_name);
			if (t <= 0 || t == wd_main_tid)
				continue;
			__atomic_store_n(&wd_dumped, 0, __ATOMIC_RELEASE);
			if (syscall(SYS_tgkill, getpid(), t, SIGURG) != 0)
				continue;
			for (int i = 0; i < 1000 && !__atomic_load_n(&wd_dumped, __ATOMIC_ACQUIRE); i++) {
				struct timespec ms = {0, 1000000};
				nanosleep(&ms, NULL);
			}
		}
	}
	close(fd);
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
	wd_backtrace();
	wd_dump_others();
	/* The launcher kills the other ranks once one exits: linger, so that
	 * those that timed out too finish their reports first. */
	struct timespec linger = {2, 0};
	nanosleep(&linger, NULL);
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
	sa.sa_handler = wd_dump;
	sigaction(SIGURG, &sa, NULL);
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
