/*
 * fi_bench: two-process RDM tagged-message benchmark for libfabric providers.
 *
 * Modelled on fabtests' fi_rdm_tagged_pingpong / fi_rdm_tagged_bw:
 *   - ping-pong latency (one-way = RTT / 2)
 *   - streaming bandwidth: the sender keeps a window of outstanding tagged
 *     sends, the receiver pre-posts the window and acks each full window.
 *
 * Build:  cc -O2 -o fi_bench fi_bench.c -lfabric
 *
 * Run: two processes, rank 0 (server, receiver of the bandwidth test) and
 * rank 1 (client, sender; prints the results).  Address exchange goes over
 * stdin/stdout and needs no sleeps: each process prints
 *     ADDR <hex of fi_getname()>
 * on stdout and then reads one line
 *     PEER <hex>
 * from stdin.  bench/run brokers this; by hand, two fifos do it too.
 *
 * Output (rank 1 only, one record per line, "key=value" fields):
 *     INFO prov=... fabric=... domain=... inject=... max_msg=... mr_mode=...
 *     LAT  size=8 iters=10000 usec=0.270 med=0.265 p90=0.281 max=3.100
 *     BW   size=8 window=64 windows=1000 msgs=64000 mbps=123.4 mmsgs=15.4
 *     SKIP size=... reason=...
 *     DONE
 * LAT's usec is the mean one-way latency over all iterations (what bench/run
 * reports, as fabtests does); med, p90 and max are quantiles of the
 * iterations' own round trips / 2, which show whether a mean was pulled up
 * by a few stalls or by a slow spell as a whole.
 * Errors go to stderr as "ERROR ..." and the exit status is non-zero.
 *
 * Options:
 *   -p PROV      provider name as in fi_info (e.g. "tcp;ofi_rxm", "shm",
 *                "udp;ofi_rxd", "gnix"); default: $FI_PROVIDER / any
 *   -r RANK      0 (server) or 1 (client); required
 *   -S LIST      comma-separated sizes (bytes; k/m suffixes allowed)
 *   -t TEST      lat, bw or both (default both)
 *   -w WINDOW    bandwidth window (default 64)
 *   -q           quick: 10x fewer iterations
 *   -s ADDR      local source address (node passed to fi_getinfo with
 *                FI_SOURCE), e.g. 127.0.0.1 or a netns veth address
 *   -n           never use fi_tinject (default: inject when size <= inject_size,
 *                as fabtests does)
 *   -T SECONDS   hard timeout (default 120); the process aborts after it
 */
#include "fi_common.h"

#define TAG_DATA 0x1111ULL
#define TAG_ACK 0x2222ULL
#define ACK_BYTES 4
#define MAX_WINDOW 1024

static struct fi_info *info;
static struct fid_fabric *fabric;
static struct fid_domain *domain;
static struct fid_ep *ep;
static struct fid_av *av;
static struct fid_cq *cq;
static struct fid_mr *tx_mr, *rx_mr;
static void *tx_desc, *rx_desc;
static char *tx_buf, *rx_buf;
static size_t buf_size;
static fi_addr_t peer = FI_ADDR_UNSPEC;
static int quick;
static int use_inject = 1;
static int window = 64;

/* one context per outstanding operation (FI_CONTEXT / FI_CONTEXT2 mode) */
static struct fi_context2 tx_ctx[MAX_WINDOW + 1];
static struct fi_context2 rx_ctx[MAX_WINDOW + 1];
static uint64_t tx_done, rx_done; /* completion counters */

/* Read the CQ once; count completions.  Returns number of entries. */
static int progress(void)
{
	struct fi_cq_tagged_entry comp[16];
	ssize_t n = fi_cq_read(cq, comp, 16);
	if (n > 0) {
		for (ssize_t i = 0; i < n; i++) {
			char *c = comp[i].op_context;
			if (c >= (char *)tx_ctx && c < (char *)(tx_ctx + MAX_WINDOW + 1))
				tx_done++;
			else if (c >= (char *)rx_ctx && c < (char *)(rx_ctx + MAX_WINDOW + 1))
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
		die("cq error: err=%d (%s) prov_errno=%d %s len=%zu", err.err,
		    fi_strerror(err.err), err.prov_errno,
		    fi_cq_strerror(cq, err.prov_errno, err.err_data, NULL, 0),
		    err.len);
	}
	die("fi_cq_read: %zd (%s)", n, fi_strerror((int)-n));
	return -1;
}

static void wait_tx(uint64_t target)
{
	while (tx_done < target)
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
	} while (0)

static uint64_t tx_posted, rx_posted;

static void post_recv(size_t len, uint64_t tag, char *buf)
{
	POST(fi_trecv(ep, buf, len, rx_desc, FI_ADDR_UNSPEC, tag, 0,
		      &rx_ctx[rx_posted % (MAX_WINDOW + 1)]));
	rx_posted++;
}

/* returns 1 if a completion is to be expected */
static int post_send(size_t len, uint64_t tag, int may_inject)
{
	if (may_inject && use_inject && len <= info->tx_attr->inject_size) {
		POST(fi_tinject(ep, tx_buf, len, peer, tag));
		return 0;
	}
	POST(fi_tsend(ep, tx_buf, len, tx_desc, peer, tag,
		      &tx_ctx[tx_posted % (MAX_WINDOW + 1)]));
	tx_posted++;
	return 1;
}

static void send_blocking(size_t len, uint64_t tag)
{
	if (post_send(len, tag, 1))
		wait_tx(tx_posted);
}

static long lat_iters(size_t size)
{
	long it = size ? (long)((1UL << 26) / size) : 10000;
	if (it > 10000)
		it = 10000;
	if (it < 20)
		it = 20;
	if (quick)
		it = it / 10 < 10 ? 10 : it / 10;
	return it;
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

/* one round of data verification before timing a size */
static void verify(size_t size)
{
	if (rank == 1) {
		fill(tx_buf, size, 11);
		post_recv(size, TAG_DATA, rx_buf);
		send_blocking(size, TAG_DATA);
		wait_rx(rx_posted);
		check(rx_buf, size, 13, "pong");
	} else {
		post_recv(size, TAG_DATA, rx_buf);
		wait_rx(rx_posted);
		check(rx_buf, size, 11, "ping");
		fill(tx_buf, size, 13);
		send_blocking(size, TAG_DATA);
	}
}

static void run_lat(size_t size)
{
	long iters = lat_iters(size), warm = iters / 10 < 2 ? 2 : iters / 10;
	double t0 = 0;

	double *rtt = calloc((size_t)iters, sizeof *rtt), ti = 0;
	if (!rtt)
		die("calloc of %ld round-trip times failed", iters);
	verify(size);
	for (long i = 0; i < iters + warm; i++) {
		if (i == warm)
			t0 = now_us();
		if (rank == 1) {
			if (i >= warm)
				ti = now_us();
			post_recv(size, TAG_DATA, rx_buf);
			send_blocking(size, TAG_DATA);
			wait_rx(rx_posted);
			if (i >= warm)
				rtt[i - warm] = now_us() - ti;
		} else {
			post_recv(size, TAG_DATA, rx_buf);
			wait_rx(rx_posted);
			send_blocking(size, TAG_DATA);
		}
	}
	double dt = now_us() - t0;
	if (rank == 1) {
		qsort(rtt, (size_t)iters, sizeof *rtt, cmp_double);
		printf("LAT size=%zu iters=%ld usec=%.3f med=%.3f p90=%.3f max=%.3f\n",
		       size, iters, dt / iters / 2.0, rtt[iters / 2] / 2.0,
		       rtt[iters * 9 / 10] / 2.0, rtt[iters - 1] / 2.0);
		fflush(stdout);
	}
	free(rtt);
}

static void run_bw(size_t size)
{
	long windows = bw_windows(size), warm = windows / 10 < 1 ? 1 : windows / 10;
	double t0 = 0;

	if (rank == 0) {
		/* receiver: keep a whole window pre-posted, ack each window */
		for (int j = 0; j < window; j++)
			post_recv(size, TAG_DATA, rx_buf);
		for (long i = 0; i < windows + warm; i++) {
			wait_rx(rx_posted);
			if (i + 1 < windows + warm)
				for (int j = 0; j < window; j++)
					post_recv(size, TAG_DATA, rx_buf);
			send_blocking(ACK_BYTES, TAG_ACK);
		}
		return;
	}
	for (long i = 0; i < windows + warm; i++) {
		if (i == warm)
			t0 = now_us();
		post_recv(ACK_BYTES, TAG_ACK, rx_buf);
		for (int j = 0; j < window; j++)
			post_send(size, TAG_DATA, 0);
		wait_tx(tx_posted);
		wait_rx(rx_posted);
	}
	double dt = now_us() - t0;
	double msgs = (double)windows * window;
	printf("BW size=%zu window=%d windows=%ld msgs=%.0f mbps=%.2f mmsgs=%.4f\n",
	       size, window, windows, msgs, msgs * size / dt, msgs / dt);
	fflush(stdout);
}

/* Barrier over the fabric: 0 B would be the natural choice but some peers
 * mishandle NULL zero-length buffers; use a small message. */
static void fabric_sync(void)
{
	post_recv(ACK_BYTES, TAG_ACK, rx_buf);
	send_blocking(ACK_BYTES, TAG_ACK);
	wait_rx(rx_posted);
}

static void reg_buf(void *buf, uint64_t access, struct fid_mr **mr, void **desc,
		    uint64_t key)
{
	*desc = NULL;
	if (!(info->domain_attr->mr_mode & FI_MR_LOCAL))
		return;
	CHK(fi_mr_reg(domain, buf, buf_size, access, 0, key, 0, mr, NULL));
	if (info->domain_attr->mr_mode & FI_MR_ENDPOINT) {
		CHK(fi_mr_bind(*mr, &ep->fid, 0));
		CHK(fi_mr_enable(*mr));
	}
	*desc = fi_mr_desc(*mr);
}

int main(int argc, char **argv)
{
	const char *prov = getenv("FI_PROVIDER");
	const char *sizes_arg = "8,64,256,1k,4k,16k,64k,256k,1m,4m";
	const char *test = "both";
	const char *src = NULL;
	int timeout = 120;
	int opt;

	while ((opt = getopt(argc, argv, "p:r:S:t:w:qs:nT:")) != -1) {
		switch (opt) {
		case 'p': prov = optarg; break;
		case 'r': rank = atoi(optarg); break;
		case 'S': sizes_arg = optarg; break;
		case 't': test = optarg; break;
		case 'w': window = atoi(optarg); break;
		case 'q': quick = 1; break;
		case 's': src = optarg; break;
		case 'n': use_inject = 0; break;
		case 'T': timeout = atoi(optarg); break;
		default:
			fprintf(stderr, "usage: %s -r 0|1 [-p prov] [-S sizes] "
					"[-t lat|bw|both] [-w window] [-q] [-s srcaddr] "
					"[-n] [-T secs]\n", argv[0]);
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

	info = rdm_tagged_info(prov, src);

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

	size_t max_size = 0;
	for (int i = 0; i < nsizes; i++)
		if (sizes[i] > max_size)
			max_size = sizes[i];
	buf_size = max_size < ACK_BYTES ? ACK_BYTES : max_size;
	tx_buf = alloc_buf(buf_size);
	rx_buf = alloc_buf(buf_size);
	reg_buf(tx_buf, FI_SEND, &tx_mr, &tx_desc, 1);
	reg_buf(rx_buf, FI_RECV, &rx_mr, &rx_desc, 2);

	exchange_peer(ep, av, &peer);

	if (rank == 1) {
		printf("INFO prov=%s fabric=%s domain=%s inject=%zu max_msg=%zu "
		       "mr_mode=0x%x mode=0x%" PRIx64 " progress=%s av=%s "
		       "inject_used=%d\n",
		       info->fabric_attr->prov_name, info->fabric_attr->name,
		       info->domain_attr->name, info->tx_attr->inject_size,
		       info->ep_attr->max_msg_size, info->domain_attr->mr_mode,
		       (uint64_t)info->mode,
		       info->domain_attr->data_progress == FI_PROGRESS_MANUAL
			       ? "manual" : "auto",
		       info->domain_attr->av_type == FI_AV_TABLE ? "table" : "map",
		       use_inject);
		fflush(stdout);
	}

	fabric_sync();
	for (int i = 0; i < nsizes; i++) {
		size_t s = sizes[i];
		if (s > info->ep_attr->max_msg_size) {
			if (rank == 1)
				printf("SKIP size=%zu reason=max_msg_size\n", s);
			continue;
		}
		if (!strcmp(test, "lat") || !strcmp(test, "both"))
			run_lat(s);
		if (!strcmp(test, "bw") || !strcmp(test, "both")) {
			fabric_sync();
			run_bw(s);
		}
		fabric_sync();
	}
	/* make sure the last ack has left before tearing down */
	fabric_sync();
	if (rank == 1)
		printf("DONE\n");
	fflush(stdout);

	fi_close(&ep->fid);
	if (tx_mr)
		fi_close(&tx_mr->fid);
	if (rx_mr)
		fi_close(&rx_mr->fid);
	fi_close(&av->fid);
	fi_close(&cq->fid);
	fi_close(&domain->fid);
	fi_close(&fabric->fid);
	fi_freeinfo(info);
	return 0;
}
