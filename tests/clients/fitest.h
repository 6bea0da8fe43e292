/*
 * fitest.h - shared infrastructure of the gnix integration-test clients.
 *
 * A client process is started by the Rust harness (tests/common/mod.rs) as
 *
 *     fitest <scenario> <rank> <nprocs> [arg]
 *
 * and talks to the harness over stdin/stdout, one line per message:
 *
 *   stdout  "ADDR <hex>"        my fi_getname address (after setup)
 *   stdin   "ADDRS <hex0> ..."  every rank's address, in rank order
 *   stdout  "OOB <dst> <word>"  relay <word> to rank <dst>
 *   stdin   "<src> <word>"      a relayed word (src -1 = the harness)
 *   stdout  "KILLME"            the harness SIGKILLs this process
 *   stdout  "KILLPEER <r>"      the harness SIGKILLs rank r, then sends
 *                               "-1 killed" to this process
 *   stdout  "DEVIATION <text>"  a non-strict spec violation (reported)
 *   stdout  "INFO <text>"       anything worth printing in the test log
 *   stdout  "PASS" / "SKIP <why>"  outcome, then exit(0)
 *   stderr  diagnostics; a failure prints "FAIL ..." and exits 1.
 *
 * Nothing here sleeps to synchronise: ordering between processes goes
 * through the OOB words; every wait has a deadline (FITEST_TIMEOUT_MS).
 *
 * FITEST_STRICT=1 (set by the harness for gnix) turns every DEVIATE()
 * into a failure; for reference providers it only reports.
 */
#ifndef FITEST_H
#define FITEST_H

#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <poll.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <rdma/fi_ext_gnix.h>

#define FT_VERSION FI_VERSION(1, 17)
#define MAXP 32

static const char *g_scn = "?";
static const char *g_arg = "";
static int g_rank, g_nprocs;
static int g_strict;
static long g_timeout_ms = 30000;
static int g_in_child; /* inside a CHECK_CONTAINED child */

/* Peers of the same host talk over gnix's shm wire (not FI_GNIX_SHM=0). */
static int gnix_shm_wire(void)
{
	const char *p = getenv("FI_PROVIDER"), *s = getenv("FI_GNIX_SHM");
	return p && !strcmp(p, "gnix") && !(s && !strcmp(s, "0"));
}

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* This thread's id (the main thread's is the process id). */
static pid_t my_tid(void)
{
	return (pid_t)syscall(SYS_gettid);
}

/* How many times the calling thread has gone to sleep in the kernel
 * (voluntary context switches): a thread blocked in a wait sleeps once
 * and wakes when there is something to do; one that polls its way
 * through the wait goes to sleep never, or once per poll interval. */
static long thread_sleeps(void)
{
	struct rusage ru;
	getrusage(RUSAGE_THREAD, &ru);
	return ru.ru_nvcsw;
}

/* Whether thread `tid` of this process is asleep in the kernel now
 * (state S in /proc/self/task/<tid>/stat). */
static int thread_is_asleep(pid_t tid)
{
	char path[64], buf[512];
	snprintf(path, sizeof path, "/proc/self/task/%d/stat", (int)tid);
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = 0;
	char *p = strrchr(buf, ')'); /* the command name may hold anything */
	return p && p[1] == ' ' && p[2] == 'S';
}

/* Waits until thread `tid` is asleep (a blocking call it made went to
 * sleep, so whatever happens next must wake it), at most half the
 * client's deadline; 0 if it never slept (it polls, or returned). */
static int wait_thread_asleep(pid_t tid)
{
	uint64_t dl = now_ms() + g_timeout_ms / 2;
	while (!thread_is_asleep(tid)) {
		if (now_ms() > dl)
			return 0;
		usleep(1000); /* polling a state, not synchronising */
	}
	return 1;
}

#define FAIL(...) do { \
	fprintf(stderr, "FAIL [%s rank %d] %s:%d: ", g_scn, g_rank, __FILE__, __LINE__); \
	fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); fflush(stderr); \
	if (!g_in_child) { printf("FAILED\n"); fflush(stdout); } exit(1); } while (0)

#define CHK(call) do { long _r = (long)(call); if (_r < 0) \
	FAIL("%s = %ld (%s)", #call, _r, fi_strerror((int)-_r)); } while (0)

#define EXPECT(cond, ...) do { if (!(cond)) { \
	fprintf(stderr, "expected: %s\n", #cond); FAIL(__VA_ARGS__); } } while (0)

#define EXPECT_RET(call, want) do { long _r = (long)(call); if (_r != (long)(want)) \
	FAIL("%s = %ld (%s), expected %ld (%s)", #call, _r, fi_strerror((int)-_r), \
	     (long)(want), fi_strerror((int)-(long)(want))); } while (0)

/* Spec requirement that reference providers are known to miss: fails for
 * gnix (strict), reported as a DEVIATION line otherwise. */
#define DEVIATE(cond, ...) do { if (!(cond)) { \
	char _b[512]; snprintf(_b, sizeof _b, __VA_ARGS__); \
	if (g_strict) FAIL("spec: %s (%s)", _b, #cond); \
	printf("DEVIATION %s: %s\n", g_scn, _b); fflush(stdout); } } while (0)

static void info(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	printf("INFO ");
	vprintf(fmt, ap);
	printf("\n");
	fflush(stdout);
	va_end(ap);
}

static void skip(const char *why)
{
	printf("SKIP %s: %s\n", g_scn, why);
	fflush(stdout);
	exit(0);
}

static void pass(void)
{
	printf("PASS\n");
	fflush(stdout);
	exit(0);
}

/* Run a check that may crash a non-conforming provider.  For gnix
 * (strict) it runs in-process; otherwise in a forked child so that a crash
 * becomes a reported DEVIATION instead of killing the scenario.  fn returns
 * 1 when the spec holds. */
#define CHECK_CONTAINED(desc, expr) do { \
	if (g_strict) { DEVIATE((expr), "%s", desc); break; } \
	fflush(stdout); fflush(stderr); \
	pid_t _p = fork(); \
	if (_p == 0) { g_in_child = 1; _exit((expr) ? 0 : 1); } \
	int _st = 0; waitpid(_p, &_st, 0); \
	if (WIFSIGNALED(_st)) { DEVIATE(0, "%s: provider crashed (signal %d)", desc, WTERMSIG(_st)); } \
	else DEVIATE(WEXITSTATUS(_st) == 0, "%s", desc); } while (0)

/* ---------------------------------------------------------------- OOB */

static char *g_backlog[256];
static int g_nbacklog;

static char g_in[1 << 16];
static size_t g_inlen;
static char g_line[1 << 16];

/* next line from the harness into g_line; timeout_ms < 0 blocks.
 * Returns 0 on timeout. */
static int try_line(int timeout_ms)
{
	for (;;) {
		char *nl = memchr(g_in, '\n', g_inlen);
		if (nl) {
			size_t n = (size_t)(nl - g_in);
			memcpy(g_line, g_in, n);
			g_line[n] = 0;
			memmove(g_in, nl + 1, g_inlen - n - 1);
			g_inlen -= n + 1;
			return 1;
		}
		struct pollfd p = { .fd = 0, .events = POLLIN };
		int r = poll(&p, 1, timeout_ms);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return 0;
		ssize_t n = read(0, g_in + g_inlen, sizeof g_in - g_inlen);
		if (n <= 0)
			FAIL("harness closed stdin");
		g_inlen += (size_t)n;
	}
}

static char *read_line(void)
{
	try_line(-1);
	return g_line;
}

static void oob_send(int dst, const char *word)
{
	printf("OOB %d %s\n", dst, word);
	fflush(stdout);
}

static void oob_send_all(const char *word)
{
	for (int r = 0; r < g_nprocs; r++)
		if (r != g_rank)
			oob_send(r, word);
}

static int backlog_take(int src, const char *word)
{
	for (int i = 0; i < g_nbacklog; i++) {
		int s;
		char w[256];
		if (sscanf(g_backlog[i], "%d %255s", &s, w) == 2 &&
		    (src < -1 || s == src) && !strcmp(w, word)) {
			free(g_backlog[i]);
			g_backlog[i] = g_backlog[--g_nbacklog];
			return s;
		}
	}
	if (g_nbacklog == 256)
		FAIL("OOB backlog full");
	return -100;
}

/* Wait (blocking, no libfabric calls) for <word> from <src>
 * (src < -1: from anyone; returns the source). */
static int oob_wait(int src, const char *word)
{
	for (;;) {
		int s = backlog_take(src, word);
		if (s != -100)
			return s;
		g_backlog[g_nbacklog++] = strdup(read_line());
	}
}

static void progress_all(void);

/* Whether <word> from <src> has come, reading what stdin already holds
 * (no waiting, no libfabric calls): its source, or -100. */
static int oob_poll(int src, const char *word)
{
	for (;;) {
		int s = backlog_take(src, word);
		if (s != -100 || !try_line(0))
			return s;
		g_backlog[g_nbacklog++] = strdup(g_line);
	}
}

/* oob_wait, but keep driving libfabric progress (all CQs) meanwhile. */
static int oob_wait_progress(int src, const char *word)
{
	uint64_t dl = now_ms() + g_timeout_ms;
	for (;;) {
		int s = oob_poll(src, word);
		if (s != -100)
			return s;
		progress_all();
		if (now_ms() > dl)
			FAIL("timed out waiting for OOB '%s' from %d", word, src);
	}
}

static void barrier(void)
{
	if (g_rank == 0) {
		for (int r = 1; r < g_nprocs; r++)
			oob_wait_progress(r, "bar");
		oob_send_all("bar2");
	} else {
		oob_send(0, "bar");
		oob_wait_progress(0, "bar2");
	}
}

/* ------------------------------------------------------------ patterns */

static inline uint8_t pat(uint32_t seed, size_t i)
{
	return (uint8_t)((i * 131u + (i >> 9) * 7u + seed * 29u + 5u) ^ (seed >> 3));
}

static void fill(void *buf, size_t len, uint32_t seed)
{
	uint8_t *p = buf;
	for (size_t i = 0; i < len; i++)
		p[i] = pat(seed, i);
}

/* byte-by-byte check of buf[0..len) against the pattern starting at off */
static void check_at(const char *what, const void *buf, size_t len, uint32_t seed, size_t off)
{
	const uint8_t *p = buf;
	for (size_t i = 0; i < len; i++)
		if (p[i] != pat(seed, off + i))
			FAIL("%s: data mismatch at byte %zu of %zu (seed %u): got 0x%02x want 0x%02x",
			     what, i, len, seed, p[i], pat(seed, off + i));
}

static int matches(const void *buf, size_t len, uint32_t seed)
{
	const uint8_t *p = buf;
	for (size_t i = 0; i < len; i++)
		if (p[i] != pat(seed, i))
			return 0;
	return 1;
}

static void check(const char *what, const void *buf, size_t len, uint32_t seed)
{
	check_at(what, buf, len, seed, 0);
}

static void *xmalloc(size_t n)
{
	void *p = NULL;
	if (posix_memalign(&p, 4096, n ? n : 1))
		FAIL("out of memory (%zu)", n);
	return p;
}

/* --------------------------------------------------------- CQ wrapper */

struct comp {
	void *ctx;
	uint64_t flags;
	size_t len;
	void *buf;
	uint64_t data, tag;
	fi_addr_t src;
	int err, prov_errno;
	size_t olen;
	uint8_t err_data[256];
	size_t err_data_size;
};

/* Which of the contexts x[0..n) a completion belongs to; fails unless it is
 * one of them and the first completion for it (seen[] records that). */
static inline int ctx_index_once(const struct comp *e, struct fi_context2 *x, int n, int *seen)
{
	int i = (int)((struct fi_context2 *)e->ctx - x);
	EXPECT(i >= 0 && i < n && !seen[i], "bad or repeated op_context %p (index %d of %d)", e->ctx, i, n);
	seen[i] = 1;
	return i;
}

struct cqw {
	struct fid_cq *cq;
	enum fi_cq_format fmt;
	int from;
	const char *name;
	struct comp *q;
	size_t cap, head, tail; /* ring */
};

static struct cqw *g_cqs[8];
static int g_ncqs;

static size_t fmt_size(enum fi_cq_format f)
{
	switch (f) {
	case FI_CQ_FORMAT_CONTEXT: return sizeof(struct fi_cq_entry);
	case FI_CQ_FORMAT_MSG: return sizeof(struct fi_cq_msg_entry);
	case FI_CQ_FORMAT_DATA: return sizeof(struct fi_cq_data_entry);
	default: return sizeof(struct fi_cq_tagged_entry);
	}
}

static void cqw_push(struct cqw *w, const struct comp *c)
{
	if (w->tail - w->head == w->cap)
		FAIL("completion stash of %s full", w->name);
	w->q[w->tail++ % w->cap] = *c;
}

static void cqw_init(struct cqw *w, struct fid_cq *cq, enum fi_cq_format fmt, int from, const char *name)
{
	w->cq = cq;
	w->fmt = fmt;
	w->from = from;
	w->name = name;
	w->cap = 1 << 15;
	w->q = calloc(w->cap, sizeof(struct comp));
	w->head = w->tail = 0;
	g_cqs[g_ncqs++] = w;
}

static void cqw_forget(struct cqw *w)
{
	for (int i = 0; i < g_ncqs; i++)
		if (g_cqs[i] == w) {
			g_cqs[i] = g_cqs[--g_ncqs];
			break;
		}
	free(w->q);
	w->q = NULL;
}

static void raw_to_comp(enum fi_cq_format f, const void *raw, struct comp *c)
{
	memset(c, 0, sizeof *c);
	c->src = FI_ADDR_NOTAVAIL;
	const struct fi_cq_tagged_entry *t = raw;
	c->ctx = t->op_context;
	if (f == FI_CQ_FORMAT_CONTEXT)
		return;
	c->flags = t->flags;
	c->len = t->len;
	if (f == FI_CQ_FORMAT_MSG)
		return;
	c->buf = t->buf;
	c->data = t->data;
	if (f == FI_CQ_FORMAT_DATA)
		return;
	c->tag = t->tag;
}

/* one read attempt; returns the number of entries stashed */
static int cqw_pump(struct cqw *w)
{
	char raw[16 * sizeof(struct fi_cq_tagged_entry)];
	fi_addr_t src[16];
	ssize_t n = w->from ? fi_cq_readfrom(w->cq, raw, 16, src) : fi_cq_read(w->cq, raw, 16);
	if (n == -FI_EAGAIN)
		return 0;
	if (n == -FI_EAVAIL) {
		struct fi_cq_err_entry e;
		struct comp c;
		memset(&e, 0, sizeof e);
		memset(&c, 0, sizeof c);
		e.err_data = c.err_data;
		e.err_data_size = sizeof c.err_data;
		ssize_t r = fi_cq_readerr(w->cq, &e, 0);
		if (r == -FI_EAGAIN)
			return 0;
		if (r != 1)
			FAIL("fi_cq_readerr(%s) = %zd (%s)", w->name, r, fi_strerror((int)-r));
		c.ctx = e.op_context;
		c.flags = e.flags;
		c.len = e.len;
		c.buf = e.buf;
		c.data = e.data;
		c.tag = e.tag;
		c.olen = e.olen;
		c.err = e.err;
		c.prov_errno = e.prov_errno;
		c.src = FI_ADDR_NOTAVAIL;
		c.err_data_size = e.err_data_size;
		if (e.err_data_size && e.err_data != c.err_data)
			memcpy(c.err_data, e.err_data, e.err_data_size < 256 ? e.err_data_size : 256);
		if (c.err == 0)
			FAIL("fi_cq_readerr(%s) returned an entry with err == 0", w->name);
		cqw_push(w, &c);
		return 1;
	}
	if (n < 0)
		FAIL("fi_cq_read(%s) = %zd (%s)", w->name, n, fi_strerror((int)-n));
	for (ssize_t i = 0; i < n; i++) {
		struct comp c;
		raw_to_comp(w->fmt, raw + i * fmt_size(w->fmt), &c);
		if (w->from)
			c.src = src[i];
		cqw_push(w, &c);
	}
	return (int)n;
}

static void progress_all(void)
{
	for (int i = 0; i < g_ncqs; i++)
		cqw_pump(g_cqs[i]);
}

static int cqw_try(struct cqw *w, struct comp *out)
{
	if (w->head == w->tail)
		progress_all();
	if (w->head == w->tail)
		return 0;
	*out = w->q[w->head++ % w->cap];
	return 1;
}

static struct comp cqw_get(struct cqw *w)
{
	struct comp c;
	uint64_t dl = now_ms() + g_timeout_ms;
	while (!cqw_try(w, &c))
		if (now_ms() > dl)
			FAIL("timed out waiting for a completion on %s", w->name);
	return c;
}

/* a successful completion (fails on an error entry) */
static struct comp cqw_ok(struct cqw *w)
{
	struct comp c = cqw_get(w);
	if (c.err)
		FAIL("unexpected error completion on %s: err %d (%s) ctx %p olen %zu len %zu",
		     w->name, c.err, fi_strerror(c.err), c.ctx, c.olen, c.len);
	return c;
}

/* poll for ms milliseconds; fail if anything arrives on w */
static void cqw_none(struct cqw *w, unsigned ms)
{
	struct comp c;
	uint64_t dl = now_ms() + ms;
	while (now_ms() < dl)
		if (cqw_try(w, &c))
			FAIL("unexpected completion on %s: ctx %p flags 0x%" PRIx64 " err %d len %zu",
			     w->name, c.ctx, c.flags, c.err, c.len);
}

/* Retry a data-transfer call while it returns -FI_EAGAIN, progressing. */
#define POST(call) do { ssize_t _r; uint64_t _dl = now_ms() + g_timeout_ms; \
	while ((_r = (call)) == -FI_EAGAIN) { progress_all(); \
		if (now_ms() > _dl) FAIL("-FI_EAGAIN forever: %s", #call); } \
	if (_r) FAIL("%s = %zd (%s)", #call, _r, fi_strerror((int)-_r)); } while (0)

/* ------------------------------------------------------ endpoint setup */

struct opts {
	uint64_t caps;          /* default FI_MSG|FI_TAGGED */
	uint64_t mode;          /* default FI_CONTEXT */
	enum fi_threading threading;
	enum fi_progress progress;
	enum fi_cq_format fmt;  /* default TAGGED */
	enum fi_av_type av_type;
	size_t cq_size;
	enum fi_wait_obj wait;  /* for both CQs, default FI_WAIT_NONE */
	uint64_t txcq_flags, rxcq_flags; /* extra bind flags */
	int txcntr, rxcntr;
	int rmacntr;            /* one counter for FI_READ|FI_WRITE|FI_REMOTE_READ|FI_REMOTE_WRITE */
	size_t min_multi_recv;
	int no_insert;          /* do not insert peers into the AV */
	int from;               /* use fi_cq_readfrom on the rx CQ */
	size_t tx_size, rx_size;
	size_t rndv_threshold;  /* gnix: set through fi_open_ops before the ep opens */
	int eq;                 /* open an EQ and bind it to the endpoint */
	uint64_t msg_order;     /* tx and rx msg_order asked for */
};

struct ctx {
	struct fi_info *info;
	struct fid_fabric *fab;
	struct fid_domain *dom;
	struct fid_av *av;
	struct fid_ep *ep;
	struct cqw tx, rx;
	struct fid_cntr *txcntr, *rxcntr, *rmacntr;
	struct fid_eq *eq;
	fi_addr_t addr[MAXP];
	uint8_t name[MAXP][256];
	size_t namelen[MAXP];
	struct fid_mr *mrs[64];
	int nmrs;
	uint64_t next_key;
};

static struct fi_info *mkhints(const struct opts *o)
{
	struct fi_info *h = fi_allocinfo();
	h->ep_attr->type = FI_EP_RDM;
	h->caps = o->caps ? o->caps : (FI_MSG | FI_TAGGED);
	h->mode = o->mode ? o->mode : FI_CONTEXT;
	h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	h->domain_attr->threading = o->threading ? o->threading : FI_THREAD_DOMAIN;
	if (o->progress)
		h->domain_attr->data_progress = o->progress;
	if (o->av_type)
		h->domain_attr->av_type = o->av_type;
	if (o->tx_size)
		h->tx_attr->size = o->tx_size;
	if (o->rx_size)
		h->rx_attr->size = o->rx_size;
	h->tx_attr->msg_order = o->msg_order;
	h->rx_attr->msg_order = o->msg_order;
	return h;
}

static void *reg(struct ctx *c, void *buf, size_t len)
{
	if (!(c->info->domain_attr->mr_mode & FI_MR_LOCAL) || !buf || !len)
		return NULL;
	struct fid_mr *mr;
	CHK(fi_mr_reg(c->dom, buf, len, FI_SEND | FI_RECV, 0, c->next_key++, 0, &mr, NULL));
	if (c->nmrs == 64)
		FAIL("too many MRs");
	c->mrs[c->nmrs++] = mr;
	return fi_mr_desc(mr);
}

static void hex(const uint8_t *p, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", p[i]);
	out[2 * n] = 0;
}

static size_t unhex(const char *s, uint8_t *out, size_t max)
{
	size_t n = 0;
	while (s[0] && s[1] && n < max) {
		unsigned v;
		sscanf(s, "%2x", &v);
		out[n++] = (uint8_t)v;
		s += 2;
	}
	return n;
}

/* Open fabric..ep, enable. Returns -FI_ENODATA (without failing) when the
 * provider cannot meet the hints. */
static int ctx_open(struct ctx *c, const struct opts *o)
{
	memset(c, 0, sizeof *c);
	c->next_key = 1;
	struct fi_info *h = mkhints(o);
	int ret = fi_getinfo(FT_VERSION, NULL, NULL, 0, h, &c->info);
	fi_freeinfo(h);
	if (ret == -FI_ENODATA)
		return ret;
	CHK(ret);
	struct fi_info *fi = c->info;
	CHK(fi_fabric(fi->fabric_attr, &c->fab, NULL));
	CHK(fi_domain(c->fab, fi, &c->dom, NULL));

	struct fi_av_attr av_attr = { .type = o->av_type ? o->av_type : FI_AV_UNSPEC, .count = 64 };
	CHK(fi_av_open(c->dom, &av_attr, &c->av, NULL));

	enum fi_cq_format fmt = o->fmt ? o->fmt : FI_CQ_FORMAT_TAGGED;
	struct fi_cq_attr cq_attr = { .format = fmt, .size = o->cq_size,
				      .wait_obj = o->wait ? o->wait : FI_WAIT_NONE };
	struct fid_cq *txcq, *rxcq;
	CHK(fi_cq_open(c->dom, &cq_attr, &txcq, NULL));
	CHK(fi_cq_open(c->dom, &cq_attr, &rxcq, NULL));
	cqw_init(&c->tx, txcq, fmt, 0, "txcq");
	cqw_init(&c->rx, rxcq, fmt, o->from, "rxcq");

	if (o->rndv_threshold) {
		struct fi_gnix_ops_domain *ops;
		CHK(fi_open_ops(&c->dom->fid, FI_GNIX_DOMAIN_OPS_1, 0, (void **)&ops, NULL));
		size_t v = o->rndv_threshold;
		CHK(ops->set_val(&c->dom->fid, GNIX_RNDV_THRESHOLD, &v));
	}
	CHK(fi_endpoint(c->dom, fi, &c->ep, NULL));
	CHK(fi_ep_bind(c->ep, &c->av->fid, 0));
	CHK(fi_ep_bind(c->ep, &txcq->fid, FI_TRANSMIT | o->txcq_flags));
	CHK(fi_ep_bind(c->ep, &rxcq->fid, FI_RECV | o->rxcq_flags));
	struct fi_cntr_attr cntr_attr = { .events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_UNSPEC };
	if (o->txcntr) {
		CHK(fi_cntr_open(c->dom, &cntr_attr, &c->txcntr, NULL));
		CHK(fi_ep_bind(c->ep, &c->txcntr->fid, FI_SEND));
	}
	if (o->rxcntr) {
		CHK(fi_cntr_open(c->dom, &cntr_attr, &c->rxcntr, NULL));
		CHK(fi_ep_bind(c->ep, &c->rxcntr->fid, FI_RECV));
	}
	if (o->rmacntr) {
		CHK(fi_cntr_open(c->dom, &cntr_attr, &c->rmacntr, NULL));
		CHK(fi_ep_bind(c->ep, &c->rmacntr->fid, FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE));
	}
	if (o->eq) {
		struct fi_eq_attr eq_attr = { .size = 64, .wait_obj = FI_WAIT_NONE };
		CHK(fi_eq_open(c->fab, &eq_attr, &c->eq, NULL));
		CHK(fi_ep_bind(c->ep, &c->eq->fid, 0));
	}
	if (o->min_multi_recv) {
		size_t v = o->min_multi_recv;
		CHK(fi_setopt(&c->ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &v, sizeof v));
	}
	CHK(fi_enable(c->ep));
	return 0;
}

static void ctx_open_or_skip(struct ctx *c, const struct opts *o, const char *what)
{
	int ret = ctx_open(c, o);
	if (ret == -FI_ENODATA) {
		char b[256];
		snprintf(b, sizeof b, "provider cannot meet hints (%s)", what);
		skip(b);
	}
}

/* Print ADDR, read ADDRS, insert every rank into the AV (unless no_insert;
 * then only self).  c->addr[r] = fi_addr of rank r. */
static void exchange(struct ctx *c, int no_insert)
{
	uint8_t me[256];
	size_t len = sizeof me;
	char hx[600];
	CHK(fi_getname(&c->ep->fid, me, &len));
	hex(me, len, hx);
	printf("ADDR %s\n", hx);
	fflush(stdout);
	char *line = read_line();
	while (strncmp(line, "ADDRS ", 6)) {
		g_backlog[g_nbacklog++] = strdup(line);
		line = read_line();
	}
	char *save = NULL, *tok = strtok_r(line + 6, " ", &save);
	if (g_nprocs > MAXP)
		FAIL("%d processes, at most %d", g_nprocs, MAXP);
	for (int r = 0; r < g_nprocs; r++) {
		if (!tok)
			FAIL("short ADDRS line");
		c->namelen[r] = unhex(tok, c->name[r], 256);
		tok = strtok_r(NULL, " ", &save);
		c->addr[r] = FI_ADDR_NOTAVAIL;
		if (no_insert && r != g_rank)
			continue;
		int n = fi_av_insert(c->av, c->name[r], 1, &c->addr[r], 0, NULL);
		if (n != 1)
			FAIL("fi_av_insert(rank %d) = %d", r, n);
	}
}

static void ctx_close(struct ctx *c)
{
	CHK(fi_close(&c->ep->fid));
	for (int i = 0; i < c->nmrs; i++)
		CHK(fi_close(&c->mrs[i]->fid));
	if (c->txcntr)
		CHK(fi_close(&c->txcntr->fid));
	if (c->rxcntr)
		CHK(fi_close(&c->rxcntr->fid));
	if (c->rmacntr)
		CHK(fi_close(&c->rmacntr->fid));
	CHK(fi_close(&c->tx.cq->fid));
	CHK(fi_close(&c->rx.cq->fid));
	cqw_forget(&c->tx);
	cqw_forget(&c->rx);
	CHK(fi_close(&c->av->fid));
	if (c->eq)
		CHK(fi_close(&c->eq->fid));
	CHK(fi_close(&c->dom->fid));
	CHK(fi_close(&c->fab->fid));
	fi_freeinfo(c->info);
}

/* the usual two-sided exit: everyone done with traffic, then close */
static void finish(struct ctx *c)
{
	barrier();
	ctx_close(c);
	pass();
}

#endif
