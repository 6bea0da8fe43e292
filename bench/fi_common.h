/*
 * fi_common.h: what bench/fi_bench.c, bench/fi_pair.c and
 * bench/fi_rma_bench.c share. Each is still one C file built with
 * `cc -O2 file.c -lfabric`; this header holds static helpers only and is
 * included once by each.
 */
#ifndef GNIX_BENCH_FI_COMMON_H
#define GNIX_BENCH_FI_COMMON_H

#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include "timing.h"

/* -r: 0 (server) or 1 (client); die() prints it. */
static int rank = -1;

static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "ERROR rank=%d ", rank);
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	fflush(stdout);
	_exit(2);
}

#define CHK(call)                                                              \
	do {                                                                   \
		int _r = (int)(call);                                          \
		if (_r)                                                        \
			die("%s:%d %s = %d (%s)", __FILE__, __LINE__, #call,   \
			    _r, fi_strerror(-_r));                             \
	} while (0)

static void on_alarm(int sig)
{
	(void)sig;
	static const char msg[] = "ERROR timeout\n";
	if (write(2, msg, sizeof(msg) - 1) < 0) {
	}
	_exit(3);
}

static void fill(char *buf, size_t len, unsigned seed)
{
	for (size_t i = 0; i < len; i++)
		buf[i] = (char)(seed + i * 7);
}

static void check(const char *buf, size_t len, unsigned seed, const char *what)
{
	for (size_t i = 0; i < len; i++)
		if (buf[i] != (char)(seed + i * 7))
			die("%s: data mismatch at byte %zu of %zu", what, i, len);
}

static size_t parse_size(const char *s)
{
	char *end;
	double v = strtod(s, &end);
	if (*end == 'k' || *end == 'K')
		v *= 1024;
	else if (*end == 'm' || *end == 'M')
		v *= 1024 * 1024;
	return (size_t)v;
}

/*
 * fi_getinfo for an RDM endpoint with capabilities caps on provider prov
 * (any if NULL or empty), bound to the source address src if given: manual
 * progress if the provider offers it, else whatever it offers. Returns
 * NULL when nothing matches (-FI_ENODATA); dies on any other error.
 *
 * FI_BENCH_ATTRS=mpi asks instead what Open MPI 4.1's mtl ofi asks (its
 * hints, read off with an fi_getinfo shim): FI_THREAD_DOMAIN, progress
 * left to the provider (gnix: automatic, with its progress thread),
 * FI_AV_MAP, no mr_mode bits, FI_DIRECTED_RECV and FI_COMPLETION in the
 * op flags.
 */
static struct fi_info *rdm_info(const char *prov, const char *src, uint64_t caps)
{
	struct fi_info *hints = fi_allocinfo(), *info = NULL;
	const char *attrs = getenv("FI_BENCH_ATTRS");
	int mpi = attrs && !strcmp(attrs, "mpi");
	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = caps;
	hints->mode = FI_CONTEXT | FI_CONTEXT2;
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_ENDPOINT |
				      FI_MR_ALLOCATED | FI_MR_PROV_KEY |
				      FI_MR_VIRT_ADDR;
	hints->domain_attr->threading = FI_THREAD_DOMAIN;
	hints->domain_attr->data_progress = FI_PROGRESS_MANUAL;
	hints->domain_attr->control_progress = FI_PROGRESS_UNSPEC;
	hints->tx_attr->op_flags = 0;
	if (mpi) {
		hints->caps |= FI_DIRECTED_RECV | FI_LOCAL_COMM | FI_REMOTE_COMM;
		hints->domain_attr->mr_mode = 0;
		hints->domain_attr->data_progress = FI_PROGRESS_UNSPEC;
		hints->domain_attr->av_type = FI_AV_MAP;
		hints->tx_attr->op_flags = FI_COMPLETION;
		hints->rx_attr->op_flags = FI_COMPLETION;
	}
	if (prov && *prov)
		hints->fabric_attr->prov_name = strdup(prov);
	int ret = fi_getinfo(FI_VERSION(1, 17), src, NULL, src ? FI_SOURCE : 0,
			     hints, &info);
	if (ret == -FI_ENODATA) {
		/* provider only offers auto progress: accept it */
		hints->domain_attr->data_progress = FI_PROGRESS_UNSPEC;
		ret = fi_getinfo(FI_VERSION(1, 17), src, NULL,
				 src ? FI_SOURCE : 0, hints, &info);
	}
	fi_freeinfo(hints);
	if (ret == -FI_ENODATA)
		return NULL;
	if (ret)
		die("fi_getinfo(prov=%s): %d (%s)", prov && *prov ? prov : "any",
		    ret, fi_strerror(-ret));
	return info;
}

/* rdm_info for tagged messages; dies when nothing matches. */
static inline struct fi_info *rdm_tagged_info(const char *prov, const char *src)
{
	struct fi_info *info = rdm_info(prov, src, FI_TAGGED);
	if (!info)
		die("fi_getinfo(prov=%s): %d (%s)", prov && *prov ? prov : "any",
		    -FI_ENODATA, fi_strerror(FI_ENODATA));
	return info;
}

/* A page-aligned, zeroed buffer of `size` bytes (at least one). */
static inline void *alloc_buf(size_t size)
{
	void *p = NULL;
	if (posix_memalign(&p, 4096, size ? size : 1))
		die("posix_memalign");
	memset(p, 0, size);
	return p;
}

/* The address exchange bench/run brokers: print "ADDR <hex of
 * fi_getname(ep)>", read "PEER <hex>" from stdin and insert it into `av`
 * as `*peer`. */
static inline void exchange_peer(struct fid_ep *ep, struct fid_av *av, fi_addr_t *peer)
{
	char name[512];
	size_t len = sizeof(name);
	CHK(fi_getname(&ep->fid, name, &len));
	printf("ADDR ");
	for (size_t i = 0; i < len; i++)
		printf("%02x", (unsigned char)name[i]);
	printf("\n");
	fflush(stdout);

	char line[2048];
	if (!fgets(line, sizeof(line), stdin))
		die("no PEER line on stdin");
	if (strncmp(line, "PEER ", 5))
		die("bad PEER line: %s", line);
	char peer_name[512];
	size_t plen = 0;
	for (char *p = line + 5; p[0] && p[1] && p[0] != '\n'; p += 2) {
		unsigned v;
		if (sscanf(p, "%2x", &v) != 1 || plen >= sizeof(peer_name))
			die("bad hex in PEER line");
		peer_name[plen++] = (char)v;
	}
	int n = fi_av_insert(av, peer_name, 1, peer, 0, NULL);
	if (n != 1)
		die("fi_av_insert returned %d", n);
}

#endif
