/*
 * fi_rma_bench: two-process one-sided (RMA, atomic) benchmark for libfabric
 * providers, the companion of fi_bench.c (same conventions, fi_common.h).
 *
 * Modelled on fabtests' fi_rdm_rma_bw (fi_write / fi_read, a window of
 * operations, then wait for all their completions):
 *   - write bandwidth: windows of 64 fi_write of one size to the same
 *     remote region, each window waited for before the next
 *   - read bandwidth: the same with fi_read
 *   - fetch-and-add latency: 8-byte FI_UINT64 FI_SUM fi_fetch_atomic, one
 *     at a time, mean latency (the whole round trip: the result is needed)
 *
 * Build:  cc -O2 -o fi_rma_bench fi_rma_bench.c -lfabric
 *
 * Rank 0 is the passive target: it registers one region (FI_REMOTE_READ |
 * FI_REMOTE_WRITE; remote address = the buffer's address with
 * FI_MR_VIRT_ADDR, else 0; key = fi_mr_key with FI_MR_PROV_KEY, else
 * chosen), sends its address and key to rank 1 in a tagged message, and
 * then only drives progress (fi_cq_read) until rank 1 sends a tagged
 * "done". It then checks that its region holds what rank 1 last wrote and
 * answers "done" (so rank 1 knows the check passed).
 *
 * Rank 1 measures. Per size it first verifies: fi_write of a pattern, then
 * fi_read into a cleared buffer, compared. The fetch-and-add target is an
 * 8-byte word of the region past the data, zero at the start; every
 * fetched value is checked (0, 1, 2, ...).
 *
 * Address exchange over stdin/stdout as fi_bench's: "ADDR <hex>" out, one
 * "PEER <hex>" line in (bench/run brokers it).
 *
 * The info asks caps FI_RMA | FI_ATOMIC | FI_MSG | FI_TAGGED; a provider
 * that offers no match with FI_ATOMIC is asked again without it, and the
 * atomic row is skipped (as it is when fi_fetch_atomicvalid refuses
 * FI_UINT64 FI_SUM).
 *
 * Output (rank 1 only, one record per line, "key=value" fields):
 *     INFO prov=... fabric=... domain=... mr_mode=... atomic=1 ...
 *     WR   size=65536 window=64 windows=128 ops=8192 mbps=... mops=...
 *     RD   size=65536 window=64 windows=128 ops=8192 mbps=... mops=...
 *     FADD size=8 iters=10000 usec=... med=... p90=... max=...
 *     SKIP what=fadd reason=...
 *     SKIP size=... reason=max_msg_size
 *     DONE
 * MB/s = 1e6 B/s. Errors go to stderr as "ERROR ..." and the exit status
 * is non-zero.
 *
 * Options:
 *   -p PROV      provider name as in fi_info; default: $FI_PROVIDER / any
 *   -r RANK      0 (target) or 1 (initiator, measures); required
 *   -S LIST      comma-separated sizes (bytes; k/m suffixes allowed)
 *   -t TEST      wr, rd, fadd or all, comma-separated (default all)
 *   -w WINDOW    bandwidth window (default 64)
 *   -q           quick: 10x fewer iterations
 *   -s ADDR      local source address (node passed with FI_SOURCE)
 *   -T SECONDS   hard timeout (default 120); the process aborts after it
 */
#include "fi_common.h"

#include <rdma/fi_atomic.h>
#include <rdma/fi_rma.h>

#define TAG_KEY 0x3333ULL
#define TAG_DONE 0x4444ULL
#define MAX_WINDOW 1024
#define REGION_KEY 0xC0DEULL

/* What rank 0 tells rank 1 about its region (TAG_KEY). */
struct region_msg {
	uint64_t addr;      /* remote address of byte 0 of the region */
	uint64_t key;       /* its key */
	uint64_t len;       /* data bytes (the largest size) */
	uint64_t fadd_off;  /* offset of the fetch-and-add word */
};

/* rank 1's "done" (TAG_DONE): the last size written and its pattern seed,
 * for rank 0 to check its memory against; rank 0 answers with ok = 1. */
struct done_msg {
	uint64_t size;
	uint64_t seed;
	uint64_t ok;
};

static struct fi_info *info;
static struct fid_fabric *fabric;
static struct fid_domain *domain;
static struct fid_ep *ep;
static struct fid_av *av;
static struct fid_cq *cq;
static fi_addr_t peer = FI_ADDR_UNSPEC;
static int quick;
static int window = 64;
static int have_atomic;

/* rank 0: the region; rank 1: write source, read destination */
static char *region, *wbuf, *rbuf;
static size_t data_len, region_len, fadd_off;
static struct fid_mr *region_mr, *wbuf_mr, *rbuf_mr, *ctrl_mr, *atom_mr;
static void *wdesc, *rdesc, *ctrl_desc, *atom_desc;
/* control messages (tagged) and the atomic's operand/result words */
static char *ctrl; /* [0, 64): send, [64, 128): receive */
static uint64_t *atom; /* [0]: operand, [1]: result */

static struct fi_context2 op_ctx[MAX_WINDOW + 1];
static struct fi_context2 rx_ctx[4];
static uint64_t ops_done, ops_posted, rx_done;

static int progress(void)
{
	struct fi_cq_tagged_entry comp[16];
	ssize_t n = fi_cq_read(cq, comp, 16);
	if (n > 0) {
		for (ssize_t i = 0; i < n; i++) {
			char *c = comp[i].op_context;
			if (c >= (char *)op_ctx && c < (char *)(op_ctx + MAX_WINDOW + 1))
				ops_done++;
			else if (c >= (char *)rx_ctx && c < (char *)(rx_ctx + 4))
				rx_done++;
			else
				die("completion with unknown context %p flags 0x%" PRIx64,
				    (void *)c, (uint64_t)comp[i].flags);
		}
		return (int)n;
	}
	if (n == -FI_EAGAIN)
		return 0;
	if (n == -FI_EAVAIL) {
		struct fi_cq_err_entry err = {0};
		ssize_t r = fi_cq_readerr(cq, &err, 0);
		if (r < 0)
			die("fi_cq_readerr: %zd", r);
		die("cq error: err=%d (%s) prov_errno=%d %s len=%zu flags=0x%" PRIx64,
		    err.err, fi_strerror(err.err), err.prov_errno,
		    fi_cq_strerror(cq, err.prov_errno, err.err_data, NULL, 0),
		    err.len, (uint64_t)err.flags);
	}
	die("fi_cq_read: %zd (%s)", n, fi_strerror((int)-n));
	return -1;
}

static void wait_ops(void)
{
	while (ops_done < ops_posted)
		progress();
}

static void wait_rx(uint64_t target)
{
	while (rx_done < target)
		progress();
}

#define POST(call)                                                             \
	do {                                                                   \
		ssize_t _r;                                                    \
		while ((_r = (call)) == -FI_EAGAIN)                            \
			progress();                                            \
		if (_r)                                                        \
			die("%s:%d %s = %zd (%s)", __FILE__, __LINE__, #call,  \
			    _r, fi_strerror((int)-_r));                        \
		ops_posted++;                                                  \
	} while (0)

static void *next_ctx(void)
{
	return &op_ctx[ops_posted % (MAX_WINDOW + 1)];
}

static uint64_t rx_posted;

static void post_ctrl_recv(uint64_t tag, size_t len)
{
	ssize_t r;
	while ((r = fi_trecv(ep, ctrl + 64, len, ctrl_desc, FI_ADDR_UNSPEC, tag,
			     0, &rx_ctx[rx_posted % 4])) == -FI_EAGAIN)
		progress();
	if (r)
		die("fi_trecv: %zd (%s)", r, fi_strerror((int)-r));
	rx_posted++;
}

static void send_ctrl(uint64_t tag, const void *msg, size_t len)
{
	memcpy(ctrl, msg, len);
	POST(fi_tsend(ep, ctrl, len, ctrl_desc, peer, tag, next_ctx()));
	wait_ops();
}

static long bw_windows(size_t size)
{
	size_t per = (size ? size : 1) * (size_t)window;
	long it = (long)((1UL << 29) / per);
	if (it > 1000)
		it = 1000;
	if (it < 4)
		it = 4;
	if (quick)
		it = it / 10 < 2 ? 2 : it / 10;
	return it;
}

/* Registers buf for access; local buffers only when the provider asks
 * (FI_MR_LOCAL), the target's region always (force). */
static void reg(void *buf, size_t len, uint64_t access, uint64_t key,
		struct fid_mr **mr, void **desc, int force)
{
	if (desc)
		*desc = NULL;
	if (!force && !(info->domain_attr->mr_mode & FI_MR_LOCAL))
		return;
	CHK(fi_mr_reg(domain, buf, len, access, 0, key, 0, mr, NULL));
	if (info->domain_attr->mr_mode & FI_MR_ENDPOINT) {
		CHK(fi_mr_bind(*mr, &ep->fid, 0));
		CHK(fi_mr_enable(*mr));
	}
	if (desc)
		*desc = fi_mr_desc(*mr);
}

/* ------------------------------------------------------------ rank 0 */

static void run_target(void)
{
	struct region_msg rm = {0};
	struct done_msg dm;

	region = alloc_buf(region_len);
	reg(region, region_len, FI_REMOTE_READ | FI_REMOTE_WRITE, REGION_KEY,
	    &region_mr, NULL, 1);
	rm.addr = (info->domain_attr->mr_mode & FI_MR_VIRT_ADDR)
			  ? (uint64_t)(uintptr_t)region : 0;
	rm.key = fi_mr_key(region_mr);
	if (rm.key == FI_KEY_NOTAVAIL)
		die("fi_mr_key: FI_KEY_NOTAVAIL (FI_MR_RAW is not supported here)");
	rm.len = data_len;
	rm.fadd_off = fadd_off;

	post_ctrl_recv(TAG_DONE, sizeof dm);
	send_ctrl(TAG_KEY, &rm, sizeof rm);
	/* passive: only progress, until rank 1 is done */
	wait_rx(rx_posted);
	memcpy(&dm, ctrl + 64, sizeof dm);
	if (dm.size > data_len)
		die("done message names size %" PRIu64 " > %zu", dm.size, data_len);
	check(region, dm.size, (unsigned)dm.seed, "target region after the writes");
	dm.ok = 1;
	send_ctrl(TAG_DONE, &dm, sizeof dm);
}

/* ------------------------------------------------------------ rank 1 */

static struct region_msg rem;

static void do_write(size_t size, void *desc)
{
	POST(fi_write(ep, wbuf, size, desc, peer, rem.addr, rem.key, next_ctx()));
}

static void do_read(size_t size, void *desc)
{
	POST(fi_read(ep, rbuf, size, desc, peer, rem.addr, rem.key, next_ctx()));
}

/* write a pattern, read it back into a cleared buffer, compare */
static void verify(size_t size, unsigned seed)
{
	fill(wbuf, size, seed);
	do_write(size, wdesc);
	wait_ops();
	memset(rbuf, 0, size);
	do_read(size, rdesc);
	wait_ops();
	check(rbuf, size, seed, "read back after write");
}

static void run_bw(const char *what, size_t size)
{
	long windows = bw_windows(size), warm = windows / 10 < 1 ? 1 : windows / 10;
	int wr = !strcmp(what, "WR");
	double t0 = 0;

	for (long i = 0; i < windows + warm; i++) {
		if (i == warm)
			t0 = now_us();
		for (int j = 0; j < window; j++) {
			if (wr)
				do_write(size, wdesc);
			else
				do_read(size, rdesc);
		}
		wait_ops();
	}
	double dt = now_us() - t0;
	double ops = (double)windows * window;
	printf("%s size=%zu window=%d windows=%ld ops=%.0f mbps=%.2f mops=%.4f\n",
	       what, size, window, windows, ops, ops * size / dt, ops / dt);
	fflush(stdout);
}

static void run_fadd(void)
{
	long iters = quick ? 1000 : 10000, warm = iters / 10;
	double *lat = calloc((size_t)iters, sizeof *lat), t0 = 0, ti = 0;
	if (!lat)
		die("calloc of %ld latencies failed", iters);
	atom[0] = 1;
	for (long i = 0; i < iters + warm; i++) {
		if (i == warm)
			t0 = now_us();
		ti = now_us();
		atom[1] = ~0ULL;
		POST(fi_fetch_atomic(ep, &atom[0], 1, atom_desc, &atom[1], atom_desc,
				     peer, rem.addr + rem.fadd_off, rem.key,
				     FI_UINT64, FI_SUM, next_ctx()));
		wait_ops();
		if (i >= warm)
			lat[i - warm] = now_us() - ti;
		if (atom[1] != (uint64_t)i)
			die("fetch-and-add %ld fetched %" PRIu64 ", expected %ld", i,
			    atom[1], i);
	}
	double dt = now_us() - t0;
	qsort(lat, (size_t)iters, sizeof *lat, cmp_double);
	printf("FADD size=8 iters=%ld usec=%.3f med=%.3f p90=%.3f max=%.3f\n", iters,
	       dt / iters, lat[iters / 2], lat[iters * 9 / 10], lat[iters - 1]);
	fflush(stdout);
	free(lat);
}

static int wants(const char *tests, const char *t)
{
	if (!strcmp(tests, "all"))
		return 1;
	size_t n = strlen(t);
	for (const char *p = tests; (p = strstr(p, t)); p += n)
		if ((p == tests || p[-1] == ',') && (p[n] == ',' || !p[n]))
			return 1;
	return 0;
}

static void run_initiator(const size_t *sizes, int nsizes, const char *tests)
{
	wbuf = alloc_buf(data_len);
	rbuf = alloc_buf(data_len);
	reg(wbuf, data_len, FI_WRITE | FI_READ, 3, &wbuf_mr, &wdesc, 0);
	reg(rbuf, data_len, FI_WRITE | FI_READ, 4, &rbuf_mr, &rdesc, 0);

	post_ctrl_recv(TAG_KEY, sizeof rem);
	wait_rx(rx_posted);
	memcpy(&rem, ctrl + 64, sizeof rem);

	printf("INFO prov=%s fabric=%s domain=%s max_msg=%zu mr_mode=0x%x "
	       "mode=0x%" PRIx64 " progress=%s av=%s atomic=%d remote_addr=%s "
	       "key=0x%" PRIx64 "\n",
	       info->fabric_attr->prov_name, info->fabric_attr->name,
	       info->domain_attr->name, info->ep_attr->max_msg_size,
	       info->domain_attr->mr_mode, (uint64_t)info->mode,
	       info->domain_attr->data_progress == FI_PROGRESS_MANUAL ? "manual"
								      : "auto",
	       info->domain_attr->av_type == FI_AV_TABLE ? "table" : "map",
	       have_atomic, rem.addr ? "virt" : "offset", rem.key);
	fflush(stdout);

	size_t last = 0;
	unsigned last_seed = 0;
	for (int i = 0; i < nsizes; i++) {
		size_t s = sizes[i];
		if (s > info->ep_attr->max_msg_size) {
			printf("SKIP size=%zu reason=max_msg_size\n", s);
			continue;
		}
		unsigned seed = 17 + (unsigned)i * 31;
		verify(s, seed);
		last = s;
		last_seed = seed;
		if (wants(tests, "wr"))
			run_bw("WR", s);
		if (wants(tests, "rd"))
			run_bw("RD", s);
	}
	if (wants(tests, "fadd")) {
		if (!have_atomic) {
			printf("SKIP what=fadd reason=no_FI_ATOMIC\n");
		} else {
			size_t count = 0;
			int r = fi_fetch_atomicvalid(ep, FI_UINT64, FI_SUM, &count);
			if (r || count < 1)
				printf("SKIP what=fadd reason=fi_fetch_atomicvalid(FI_UINT64,FI_SUM)=%d\n", r);
			else
				run_fadd();
		}
	}
	fflush(stdout);

	struct done_msg dm = {last, last_seed, 0};
	post_ctrl_recv(TAG_DONE, sizeof dm);
	send_ctrl(TAG_DONE, &dm, sizeof dm);
	wait_rx(rx_posted);
	memcpy(&dm, ctrl + 64, sizeof dm);
	if (dm.ok != 1)
		die("target did not confirm its memory");
	printf("DONE\n");
	fflush(stdout);
}

int main(int argc, char **argv)
{
	const char *prov = getenv("FI_PROVIDER");
	const char *sizes_arg = "8,4k,64k,1m";
	const char *tests = "all";
	const char *src = NULL;
	int timeout = 120;
	int opt;

	while ((opt = getopt(argc, argv, "p:r:S:t:w:qs:T:")) != -1) {
		switch (opt) {
		case 'p': prov = optarg; break;
		case 'r': rank = atoi(optarg); break;
		case 'S': sizes_arg = optarg; break;
		case 't': tests = optarg; break;
		case 'w': window = atoi(optarg); break;
		case 'q': quick = 1; break;
		case 's': src = optarg; break;
		case 'T': timeout = atoi(optarg); break;
		default:
			fprintf(stderr, "usage: %s -r 0|1 [-p prov] [-S sizes] "
					"[-t wr,rd,fadd|all] [-w window] [-q] "
					"[-s srcaddr] [-T secs]\n", argv[0]);
			return 1;
		}
	}
	if (rank != 0 && rank != 1)
		die("need -r 0 or -r 1");
	if (window < 1 || window > MAX_WINDOW)
		die("window must be 1..%d", MAX_WINDOW);
	signal(SIGALRM, on_alarm);
	alarm(timeout);

	size_t sizes[64];
	int nsizes = 0;
	{
		char *dup = strdup(sizes_arg), *save = NULL;
		for (char *t = strtok_r(dup, ",", &save); t && nsizes < 64;
		     t = strtok_r(NULL, ",", &save))
			sizes[nsizes++] = parse_size(t);
		free(dup);
	}

	info = rdm_info(prov, src, FI_RMA | FI_ATOMIC | FI_MSG | FI_TAGGED);
	have_atomic = info != NULL;
	if (!info)
		info = rdm_info(prov, src, FI_RMA | FI_MSG | FI_TAGGED);
	if (!info)
		die("fi_getinfo(prov=%s): no RDM endpoint with FI_RMA|FI_MSG|FI_TAGGED",
		    prov && *prov ? prov : "any");

	CHK(fi_fabric(info->fabric_attr, &fabric, NULL));
	CHK(fi_domain(fabric, info, &domain, NULL));

	struct fi_cq_attr cq_attr = {0};
	cq_attr.format = FI_CQ_FORMAT_TAGGED;
	cq_attr.size = 4 * MAX_WINDOW;
	cq_attr.wait_obj = FI_WAIT_NONE;
	CHK(fi_cq_open(domain, &cq_attr, &cq, NULL));

	struct fi_av_attr av_attr = {0};
	av_attr.type = info->domain_attr->av_type;
	av_attr.count = 2;
	CHK(fi_av_open(domain, &av_attr, &av, NULL));

	CHK(fi_endpoint(domain, info, &ep, NULL));
	CHK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
	CHK(fi_ep_bind(ep, &av->fid, 0));
	CHK(fi_enable(ep));

	for (int i = 0; i < nsizes; i++)
		if (sizes[i] > data_len)
			data_len = sizes[i];
	if (data_len < 8)
		data_len = 8;
	fadd_off = (data_len + 63) & ~(size_t)63;
	region_len = fadd_off + 64;

	ctrl = alloc_buf(128);
	reg(ctrl, 128, FI_SEND | FI_RECV, 1, &ctrl_mr, &ctrl_desc, 0);
	atom = alloc_buf(64);
	reg(atom, 64, FI_READ | FI_WRITE, 2, &atom_mr, &atom_desc, 0);

	exchange_peer(ep, av, &peer);

	if (rank == 0)
		run_target();
	else
		run_initiator(sizes, nsizes, tests);
	fflush(stdout);

	fi_close(&ep->fid);
	struct fid_mr *mrs[] = {region_mr, wbuf_mr, rbuf_mr, ctrl_mr, atom_mr};
	for (size_t i = 0; i < sizeof mrs / sizeof *mrs; i++)
		if (mrs[i])
			fi_close(&mrs[i]->fid);
	fi_close(&av->fid);
	fi_close(&cq->fid);
	fi_close(&domain->fid);
	fi_close(&fabric->fid);
	fi_freeinfo(info);
	return 0;
}
