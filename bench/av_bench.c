/*
 * av_bench: cost of a large address vector.
 *
 *     av_bench <n> [batch]      (provider from FI_PROVIDER, as fi_bench)
 *
 * Opens fabric, domain, CQ, an RDM endpoint and an AV (FI_AV_UNSPEC, count
 * n + 1), binds and enables the endpoint, then inserts n distinct IPv4 peer
 * addresses (10.128.0.0/9, port 1024 + i % 60000; none of them reachable:
 * no connection is set up, nothing is sent) with fi_av_insert, `batch`
 * addresses per call (default n: one call). It then looks every fi_addr up
 * again with fi_av_lookup and checks the address. Prints one line:
 *
 *   AV prov=<name> n=<n> batch=<b> insert_ms=<t> ns_per_insert=<t>
 *      lookup_ns=<t> rss_kb=<delta> heap_bytes=<delta> (open <part>)
 *      rss_per_peer=<B> heap_per_peer=<B>
 *
 * rss: VmRSS delta over fi_av_open(count = n) plus the inserts (page
 * granularity; the heap may already hold free memory); heap: glibc
 * mallinfo2() bytes in use over the same two steps (the provider's
 * allocations, Rust or C, go through malloc). The endpoint, opened between
 * the two steps, is not counted. The caller's own buffers
 * (addresses in, fi_addr_t out) are allocated and touched before the first
 * measurement, so neither figure counts them.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

#define CHK(call) do { int _r = (int)(call); if (_r < 0) { \
	fprintf(stderr, "av_bench: %s = %d (%s)\n", #call, _r, fi_strerror(-_r)); exit(1); } } while (0)

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static long rss_kb(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char l[256];
	long v = -1;
	while (f && fgets(l, sizeof l, f))
		if (!strncmp(l, "VmRSS:", 6))
			v = atol(l + 6);
	if (f)
		fclose(f);
	return v;
}

static long heap_bytes(void)
{
	struct mallinfo2 m = mallinfo2();
	return (long)(m.uordblks + m.hblkhd);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s <n> [batch]\n", argv[0]);
		return 2;
	}
	size_t n = strtoul(argv[1], NULL, 0);
	size_t batch = argc > 2 ? strtoul(argv[2], NULL, 0) : n;
	if (!n || !batch)
		return 2;

	struct fi_info *h = fi_allocinfo(), *fi;
	h->ep_attr->type = FI_EP_RDM;
	h->caps = FI_MSG | FI_TAGGED;
	h->mode = FI_CONTEXT | FI_CONTEXT2;
	h->addr_format = FI_SOCKADDR_IN;
	h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
	const char *node = getenv("AV_BENCH_NODE"); /* source address (FI_SOURCE) */
	CHK(fi_getinfo(FI_VERSION(1, 17), node, NULL, node ? FI_SOURCE : 0, h, &fi));
	fi_freeinfo(h);

	struct fid_fabric *fab;
	struct fid_domain *dom;
	struct fid_av *av;
	struct fid_cq *cq;
	struct fid_ep *ep;
	CHK(fi_fabric(fi->fabric_attr, &fab, NULL));
	CHK(fi_domain(fab, fi, &dom, NULL));
	struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_NONE };
	CHK(fi_cq_open(dom, &ca, &cq, NULL));
	struct sockaddr_in *addrs = calloc(n, sizeof *addrs);
	fi_addr_t *fa = calloc(n, sizeof *fa);
	if (!addrs || !fa)
		return 1;
	for (size_t i = 0; i < n; i++) {
		addrs[i].sin_family = AF_INET;
		addrs[i].sin_addr.s_addr = htonl(0x0a800000u + (uint32_t)(i / 60000) * 256 + (uint32_t)(i % 251) + 1);
		addrs[i].sin_port = htons((uint16_t)(1024 + i % 60000));
		fa[i] = FI_ADDR_NOTAVAIL;
	}
	/* the AV's own cost: what fi_av_open(count = n) allocates, plus the
	 * growth over the inserts (the endpoint opened in between is not
	 * counted) */
	long rss_a = rss_kb(), heap_a = heap_bytes();
	struct fi_av_attr aa = { .type = FI_AV_UNSPEC, .count = n + 1 }; /* + the warm-up address */
	CHK(fi_av_open(dom, &aa, &av, NULL));
	long rss_b = rss_kb(), heap_b = heap_bytes();
	CHK(fi_endpoint(dom, fi, &ep, NULL));
	CHK(fi_ep_bind(ep, &av->fid, 0));
	CHK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
	CHK(fi_enable(ep));

	/* one warm-up insert and removal: lazily allocated per-AV state */
	fi_addr_t w;
	struct sockaddr_in wa = addrs[0];
	wa.sin_port = htons(1);
	if (fi_av_insert(av, &wa, 1, &w, 0, NULL) == 1)
		fi_av_remove(av, &w, 1, 0);

	long rss0 = rss_kb(), heap0 = heap_bytes();
	double t0 = now_s();
	for (size_t i = 0; i < n; i += batch) {
		size_t k = n - i < batch ? n - i : batch;
		int r = fi_av_insert(av, &addrs[i], k, &fa[i], 0, NULL);
		if (r != (int)k) {
			fprintf(stderr, "av_bench: fi_av_insert(%zu at %zu) = %d (%s)\n", k, i, r,
				r < 0 ? fi_strerror(-r) : "short");
			return 1;
		}
	}
	double t1 = now_s();
	long rss1 = rss_kb(), heap1 = heap_bytes();
	long drss = (rss_b - rss_a) + (rss1 - rss0), dheap = (heap_b - heap_a) + (heap1 - heap0);

	double t2 = now_s();
	for (size_t i = 0; i < n; i++) {
		struct sockaddr_in got;
		size_t len = sizeof got;
		CHK(fi_av_lookup(av, fa[i], &got, &len));
		if (got.sin_addr.s_addr != addrs[i].sin_addr.s_addr || got.sin_port != addrs[i].sin_port) {
			fprintf(stderr, "av_bench: fi_av_lookup(%zu) returned another address\n", i);
			return 1;
		}
	}
	double t3 = now_s();

	printf("AV prov=%s n=%zu batch=%zu insert_ms=%.3f ns_per_insert=%.1f lookup_ns=%.1f rss_kb=%ld "
	       "heap_bytes=%ld (open %ld) rss_per_peer=%.1f heap_per_peer=%.1f\n",
	       fi->fabric_attr->prov_name, n, batch, (t1 - t0) * 1e3, (t1 - t0) * 1e9 / n, (t3 - t2) * 1e9 / n,
	       drss, dheap, heap_b - heap_a, drss * 1024.0 / n, (double)dheap / n);
	fflush(stdout);
	/* No fi_close: udp;ofi_rxd spins in fi_close of an endpoint whose AV
	 * holds unreachable peers (libfabric 1.17). The process exit frees all. */
	_exit(0);
}
