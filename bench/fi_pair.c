/*
 * fi_pair: two providers' ping-pong latency, interleaved in one pair of
 * processes, so that both are measured under the same conditions.
 *
 * Why: on a shared virtual machine the speed of the kernel's copies changes
 * by up to 5x over seconds (bench/README.md, Caveats). Two providers run one
 * after the other can land in different spells, and a ratio of their
 * results then says more about the spell than about the providers. Here
 * each process opens an RDM endpoint on both providers, and the ping-pong
 * alternates between them in short blocks (A B, B A, A B, ...): every block
 * of A has a block of B next to it, milliseconds apart, and the ratio is
 * taken block by block.
 *
 * Build:  cc -O2 -o fi_pair fi_pair.c -lfabric
 *
 * Run: two processes, rank 0 and rank 1, with the same options. Address
 * exchange goes over stdin/stdout as in fi_bench.c: each prints
 *     ADDR <hex of provider A's name> <hex of provider B's name>
 * and then reads
 *     PEER <hex A> <hex B>
 * Environment applies to both providers of a process (FI_GNIX_SHM=0 for
 * gnix's udp wire is ignored by the others).
 *
 * Output (rank 1 only):
 *     INFO a=<prov> b=<prov> inject_a=... inject_b=...
 *     PAIR size=1048576 blocks=64 per_block=1 a_med=230.1 b_med=240.2
 *          ratio=0.96 ratio_q1=0.90 ratio_q3=1.03 a_min=... b_min=...
 *     DONE
 * a_med / b_med: median one-way latency (RTT / 2, microseconds) over all
 * timed iterations of each provider; ratio: median over blocks of
 * (A's block median / B's block median), with its quartiles.
 *
 * Options:
 *   -r RANK     0 or 1 (required)
 *   -p PROV     provider A (e.g. gnix)           -P PROV  provider B
 *   -S LIST     sizes (k/m suffixes), default 8,1m
 *   -b BLOCKS   blocks per provider and size (default 64)
 *   -q          quick: a quarter of the iterations
 *   -s ADDR     local source address (FI_SOURCE), e.g. 127.0.0.1
 *   -n          never use fi_tinject
 *   -T SECONDS  hard timeout (default 120)
 */
#include "fi_common.h"

#define TAG_DATA 0x3333ULL

/* One provider's endpoint and its bookkeeping. */
struct side {
	const char *prov;
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_ep *ep;
	struct fid_av *av;
	struct fid_cq *cq;
	struct fid_mr *tx_mr, *rx_mr;
	void *tx_desc, *rx_desc;
	fi_addr_t peer;
	struct fi_context2 tx_ctx, rx_ctx;
	uint64_t tx_done, rx_done, tx_posted, rx_posted;
};

static struct side sides[2];
static char *tx_buf, *rx_buf;
static size_t buf_size;
static int use_inject = 1;

static void progress(struct side *s)
{
	struct fi_cq_tagged_entry comp[8];
	ssize_t n = fi_cq_read(s->cq, comp, 8);
	if (n > 0) {
		for (ssize_t i = 0; i < n; i++) {
			if (comp[i].op_context == &s->tx_ctx)
				s->tx_done++;
			else if (comp[i].op_context == &s->rx_ctx)
				s->rx_done++;
			else
				die("%s: completion with unknown context %p", s->prov,
				    comp[i].op_context);
		}
		return;
	}
	if (n == -FI_EAGAIN)
		return;
	if (n == -FI_EAVAIL) {
		struct fi_cq_err_entry err = {0};
		if (fi_cq_readerr(s->cq, &err, 0) < 0)
			die("%s: fi_cq_readerr failed", s->prov);
		die("%s: cq error %d (%s)", s->prov, err.err, fi_strerror(err.err));
	}
	die("%s: fi_cq_read: %zd (%s)", s->prov, n, fi_strerror((int)-n));
}

#define POST(s, call)                                                          \
	do {                                                                   \
		ssize_t _r;                                                    \
		while ((_r = (call)) == -FI_EAGAIN)                            \
			progress(s);                                           \
		if (_r)                                                        \
			die("%s: %s:%d %s = %zd (%s)", (s)->prov, __FILE__,    \
			    __LINE__, #call, _r, fi_strerror((int)-_r));       \
	} while (0)

static void post_recv(struct side *s, size_t len)
{
	POST(s, fi_trecv(s->ep, rx_buf, len, s->rx_desc, FI_ADDR_UNSPEC,
			 TAG_DATA, 0, &s->rx_ctx));
	s->rx_posted++;
}

/* Posts a send; returns without waiting for its completion. */
static void send_post(struct side *s, size_t len)
{
	if (use_inject && len <= s->info->tx_attr->inject_size) {
		POST(s, fi_tinject(s->ep, tx_buf, len, s->peer, TAG_DATA));
		return;
	}
	POST(s, fi_tsend(s->ep, tx_buf, len, s->tx_desc, s->peer, TAG_DATA,
			 &s->tx_ctx));
	s->tx_posted++;
}

static void wait_tx(struct side *s)
{
	while (s->tx_done < s->tx_posted)
		progress(s);
}

static void wait_rx(struct side *s)
{
	while (s->rx_done < s->rx_posted)
		progress(s);
}

/*
 * One round trip on side s; returns its duration (meaningful on rank 1,
 * which sends first and waits for its send to complete, as fi_bench does).
 * Rank 0 waits for its reply's completion at the start of its next round
 * trip on s, or in sync_side at the end of the block.
 */
static double round_trip(struct side *s, size_t len)
{
	double t0 = now_us();
	post_recv(s, len);
	if (rank == 1) {
		send_post(s, len);
		wait_tx(s);
		wait_rx(s);
	} else {
		wait_tx(s);
		wait_rx(s);
		send_post(s, len);
	}
	return now_us() - t0;
}

/*
 * Ends a block on s (untimed): both ranks wait for their own sends and
 * exchange one small message, so that nothing on s needs the peer's
 * progress while the peer runs the other provider's block. Without it a
 * send that completes only when the peer acknowledges it (gnix's eager
 * sends) or reads it (rxm's rendezvous) would wait for a peer that waits
 * on the other provider: a deadlock under manual progress.
 */
static void sync_side(struct side *s)
{
	wait_tx(s);
	post_recv(s, 4);
	send_post(s, 4);
	wait_tx(s);
	wait_rx(s);
}

/* One exchange with contents checked in both directions. */
static void verify(struct side *s, size_t len)
{
	post_recv(s, len);
	if (rank == 1) {
		fill(tx_buf, len, 21);
		send_post(s, len);
		wait_tx(s);
		wait_rx(s);
		check(rx_buf, len, 23, s->prov);
	} else {
		wait_tx(s);
		wait_rx(s);
		check(rx_buf, len, 21, s->prov);
		fill(tx_buf, len, 23);
		send_post(s, len);
	}
}

/* Sorts xs in place; the element at quantile q (0..1). */
static double quantile(double *xs, long n, double q)
{
	qsort(xs, (size_t)n, sizeof *xs, cmp_double);
	long i = (long)(q * (double)(n - 1) + 0.5);
	return xs[i];
}

/* Round trips per provider and size, as fi_bench's latency test. */
static long iterations(size_t size, int quick)
{
	long it = size ? (long)((1UL << 26) / size) : 10000;
	if (it > 10000)
		it = 10000;
	if (it < 64)
		it = 64;
	return quick ? (it / 4 < 16 ? 16 : it / 4) : it;
}

static void run_size(size_t size, long blocks, int quick)
{
	long iters = iterations(size, quick);
	long per = iters / blocks < 1 ? 1 : iters / blocks;
	double *all[2], *blk = calloc((size_t)per, sizeof(double));
	double *ratio = calloc((size_t)blocks, sizeof(double));
	double block_med[2];

	for (int i = 0; i < 2; i++) {
		all[i] = calloc((size_t)(blocks * per), sizeof(double));
		if (!all[i])
			die("calloc");
	}
	if (!blk || !ratio)
		die("calloc");
	for (int i = 0; i < 2; i++) {
		verify(&sides[i], size);
		for (long w = 0; w < per; w++) /* warm-up block */
			round_trip(&sides[i], size);
		sync_side(&sides[i]);
	}
	for (long b = 0; b < blocks; b++) {
		for (int j = 0; j < 2; j++) {
			int i = (b % 2) ? 1 - j : j; /* A B, B A, ... */
			for (long w = 0; w < per; w++) {
				double t = round_trip(&sides[i], size) / 2.0;
				blk[w] = t;
				all[i][b * per + w] = t;
			}
			block_med[i] = quantile(blk, per, 0.5);
			sync_side(&sides[i]);
		}
		ratio[b] = block_med[0] / block_med[1];
	}
	if (rank == 1) {
		long n = blocks * per;
		double a_min = quantile(all[0], n, 0), b_min = quantile(all[1], n, 0);
		double a_med = quantile(all[0], n, 0.5), b_med = quantile(all[1], n, 0.5);
		double q1 = quantile(ratio, blocks, 0.25), q3 = quantile(ratio, blocks, 0.75);
		printf("PAIR size=%zu blocks=%ld per_block=%ld a_med=%.3f b_med=%.3f "
		       "ratio=%.4f ratio_q1=%.4f ratio_q3=%.4f a_min=%.3f b_min=%.3f\n",
		       size, blocks, per, a_med, b_med, quantile(ratio, blocks, 0.5),
		       q1, q3, a_min, b_min);
		fflush(stdout);
	}
	free(all[0]);
	free(all[1]);
	free(blk);
	free(ratio);
}

static void reg_buf(struct side *s, void *buf, uint64_t access, struct fid_mr **mr,
		    void **desc, uint64_t key)
{
	*desc = NULL;
	if (!(s->info->domain_attr->mr_mode & FI_MR_LOCAL))
		return;
	CHK(fi_mr_reg(s->domain, buf, buf_size, access, 0, key, 0, mr, NULL));
	if (s->info->domain_attr->mr_mode & FI_MR_ENDPOINT) {
		CHK(fi_mr_bind(*mr, &s->ep->fid, 0));
		CHK(fi_mr_enable(*mr));
	}
	*desc = fi_mr_desc(*mr);
}

static void open_side(struct side *s, const char *src)
{
	s->info = rdm_tagged_info(s->prov, src);
	CHK(fi_fabric(s->info->fabric_attr, &s->fabric, NULL));
	CHK(fi_domain(s->fabric, s->info, &s->domain, NULL));
	struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_TAGGED, .size = 64,
				     .wait_obj = FI_WAIT_NONE};
	CHK(fi_cq_open(s->domain, &cq_attr, &s->cq, NULL));
	struct fi_av_attr av_attr = {.type = s->info->domain_attr->av_type, .count = 2};
	CHK(fi_av_open(s->domain, &av_attr, &s->av, NULL));
	CHK(fi_endpoint(s->domain, s->info, &s->ep, NULL));
	CHK(fi_ep_bind(s->ep, &s->cq->fid, FI_TRANSMIT | FI_RECV));
	CHK(fi_ep_bind(s->ep, &s->av->fid, 0));
	CHK(fi_enable(s->ep));
	reg_buf(s, tx_buf, FI_SEND, &s->tx_mr, &s->tx_desc, 1);
	reg_buf(s, rx_buf, FI_RECV, &s->rx_mr, &s->rx_desc, 2);
}

static void close_side(struct side *s)
{
	fi_close(&s->ep->fid);
	if (s->tx_mr)
		fi_close(&s->tx_mr->fid);
	if (s->rx_mr)
		fi_close(&s->rx_mr->fid);
	fi_close(&s->av->fid);
	fi_close(&s->cq->fid);
	fi_close(&s->domain->fid);
	fi_close(&s->fabric->fid);
	fi_freeinfo(s->info);
}

static void print_name(struct side *s)
{
	char name[512];
	size_t len = sizeof(name);
	CHK(fi_getname(&s->ep->fid, name, &len));
	printf(" ");
	for (size_t i = 0; i < len; i++)
		printf("%02x", (unsigned char)name[i]);
}

/* Parses one hex word of the PEER line into side s's AV. */
static char *insert_peer(struct side *s, char *p)
{
	char name[512];
	size_t len = 0;
	while (*p == ' ')
		p++;
	for (; p[0] && p[1] && p[0] != ' ' && p[0] != '\n'; p += 2) {
		unsigned v;
		if (sscanf(p, "%2x", &v) != 1 || len >= sizeof(name))
			die("bad hex in PEER line");
		name[len++] = (char)v;
	}
	if (!len)
		die("PEER line lacks an address for %s", s->prov);
	if (fi_av_insert(s->av, name, 1, &s->peer, 0, NULL) != 1)
		die("%s: fi_av_insert failed", s->prov);
	return p;
}

static void exchange_addresses(void)
{
	char line[4096];
	printf("ADDR");
	print_name(&sides[0]);
	print_name(&sides[1]);
	printf("\n");
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin) || strncmp(line, "PEER ", 5))
		die("no PEER line on stdin");
	insert_peer(&sides[1], insert_peer(&sides[0], line + 5));
}

int main(int argc, char **argv)
{
	const char *sizes_arg = "8,1m", *src = NULL;
	long blocks = 64;
	int quick = 0, timeout = 120, opt;

	while ((opt = getopt(argc, argv, "r:p:P:S:b:qs:nT:")) != -1) {
		switch (opt) {
		case 'r': rank = atoi(optarg); break;
		case 'p': sides[0].prov = optarg; break;
		case 'P': sides[1].prov = optarg; break;
		case 'S': sizes_arg = optarg; break;
		case 'b': blocks = atol(optarg); break;
		case 'q': quick = 1; break;
		case 's': src = optarg; break;
		case 'n': use_inject = 0; break;
		case 'T': timeout = atoi(optarg); break;
		default:
			fprintf(stderr, "usage: %s -r 0|1 -p PROV_A -P PROV_B [-S sizes] "
					"[-b blocks] [-q] [-s srcaddr] [-n] [-T secs]\n",
				argv[0]);
			return 1;
		}
	}
	if (rank != 0 && rank != 1)
		die("need -r 0 or -r 1");
	if (!sides[0].prov || !sides[1].prov)
		die("need -p PROV_A and -P PROV_B");
	if (blocks < 4)
		die("need at least 4 blocks");
	signal(SIGALRM, on_alarm);
	alarm(timeout);

	size_t sizes[32];
	int nsizes = 0;
	char *dup = strdup(sizes_arg), *save = NULL;
	for (char *t = strtok_r(dup, ",", &save); t && nsizes < 32; t = strtok_r(NULL, ",", &save))
		sizes[nsizes++] = parse_size(t);
	free(dup);
	buf_size = 4;
	for (int i = 0; i < nsizes; i++)
		if (sizes[i] > buf_size)
			buf_size = sizes[i];
	if (posix_memalign((void **)&tx_buf, 4096, buf_size) ||
	    posix_memalign((void **)&rx_buf, 4096, buf_size))
		die("posix_memalign");
	memset(tx_buf, 0, buf_size);
	memset(rx_buf, 0, buf_size);

	for (int i = 0; i < 2; i++)
		open_side(&sides[i], src);
	exchange_addresses();
	if (rank == 1) {
		printf("INFO a=%s b=%s inject_a=%zu inject_b=%zu\n",
		       sides[0].info->fabric_attr->prov_name,
		       sides[1].info->fabric_attr->prov_name,
		       sides[0].info->tx_attr->inject_size,
		       sides[1].info->tx_attr->inject_size);
		fflush(stdout);
	}
	for (int i = 0; i < nsizes; i++) {
		if (sizes[i] > sides[0].info->ep_attr->max_msg_size ||
		    sizes[i] > sides[1].info->ep_attr->max_msg_size) {
			if (rank == 1)
				printf("SKIP size=%zu reason=max_msg_size\n", sizes[i]);
			continue;
		}
		run_size(sizes[i], blocks, quick);
	}
	for (int i = 0; i < 2; i++)
		sync_side(&sides[i]);
	if (rank == 1)
		printf("DONE\n");
	fflush(stdout);
	for (int i = 0; i < 2; i++)
		close_side(&sides[i]);
	free(tx_buf);
	free(rx_buf);
	return 0;
}
