/*
 * sysprobe: where a small-message ping-pong over UDP spends its round
 * trip, seen from one process. An LD_PRELOAD library that times the
 * process's send(), its recvfrom()/recv() (libc's, or the raw
 * syscall(SYS_recvfrom) the udp wire makes) and the user-space time from
 * a receive that brought a datagram to the next send() entry: the
 * answer's time, the part of a one-way trip that is the process's own
 * and not the kernel's. At exit (if it sent anything) it prints, in
 * microseconds:
 *
 *   SYSPROBE sends=<n> send=<us> full=<us> empty=<us> empties=<per send> answer=<us>
 *
 * send: the mean send() call (across a veth pair it carries the datagram
 * through the receiving namespace's stack up to the peer's socket);
 * full/empty: the mean receive that found a datagram / found none;
 * empties: receives that found none, per send; answer: the mean
 * datagram-to-send time (answers later than 100 us are left out: the
 * start and the end of a run). bench/clients runs fabtests' ping-pong
 * over gnix and bench/udpfloor with it, across the namespaces.
 *
 * The probe reads the clock twice per call it times (about 50 ns here),
 * so every time it reports, and the ping-pong's own, is a little longer
 * than without it.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static ssize_t (*real_send)(int, const void *, size_t, int);
static ssize_t (*real_recv)(int, void *, size_t, int);
static ssize_t (*real_recvfrom)(int, void *, size_t, int, struct sockaddr *, socklen_t *);
static long (*real_syscall)(long, ...);

/* One thread sends and receives in the ping-pongs this is for; the sums
 * are per process. */
static long long t_data, n_send, t_send, n_full, t_full, n_empty, t_empty, n_answer, t_answer;

static long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void *next(const char *name)
{
	void *f = dlsym(RTLD_NEXT, name);
	if (!f)
		abort();
	return f;
}

static void received(long long t0, long long t1, long r)
{
	if (r > 0) {
		n_full++;
		t_full += t1 - t0;
		t_data = t1;
	} else {
		n_empty++;
		t_empty += t1 - t0;
	}
}

ssize_t recvfrom(int fd, void *buf, size_t len, int flags, struct sockaddr *a, socklen_t *al)
{
	if (!real_recvfrom)
		real_recvfrom = next("recvfrom");
	long long t0 = now_ns();
	ssize_t r = real_recvfrom(fd, buf, len, flags, a, al);
	received(t0, now_ns(), r);
	return r;
}

ssize_t recv(int fd, void *buf, size_t len, int flags)
{
	if (!real_recv)
		real_recv = next("recv");
	long long t0 = now_ns();
	ssize_t r = real_recv(fd, buf, len, flags);
	received(t0, now_ns(), r);
	return r;
}

long syscall(long nr, ...)
{
	if (!real_syscall)
		real_syscall = next("syscall");
	va_list ap;
	va_start(ap, nr);
	long a = va_arg(ap, long), b = va_arg(ap, long), c = va_arg(ap, long);
	long d = va_arg(ap, long), e = va_arg(ap, long), f = va_arg(ap, long);
	va_end(ap);
	if (nr != SYS_recvfrom)
		return real_syscall(nr, a, b, c, d, e, f);
	long long t0 = now_ns();
	long r = real_syscall(nr, a, b, c, d, e, f);
	received(t0, now_ns(), r);
	return r;
}

ssize_t send(int fd, const void *buf, size_t len, int flags)
{
	if (!real_send)
		real_send = next("send");
	long long t0 = now_ns();
	if (t_data) {
		long long d = t0 - t_data;
		t_data = 0;
		if (d < 100000) {
			t_answer += d;
			n_answer++;
		}
	}
	ssize_t r = real_send(fd, buf, len, flags);
	n_send++;
	t_send += now_ns() - t0;
	return r;
}

static double mean_us(long long t, long long n)
{
	return n ? (double)t / n / 1000.0 : 0.0;
}

__attribute__((destructor)) static void report(void)
{
	if (!n_send)
		return;
	fprintf(stderr, "SYSPROBE sends=%lld send=%.3f full=%.3f empty=%.3f empties=%.2f answer=%.3f\n", n_send,
		mean_us(t_send, n_send), mean_us(t_full, n_full), mean_us(t_empty, n_empty),
		(double)n_empty / n_send, mean_us(t_answer, n_answer));
}
