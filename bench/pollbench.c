/*
 * pollbench: the small-message path's cost, in one process.
 *
 * Two RDM endpoints of one domain, each with its own CQ; N times: a
 * tagged receive posted on B (fi_trecv), an 8-byte (LEN) fi_tinject from
 * A to B, then fi_cq_read on B's CQ until the receive completes. One
 * process and no second core, so that `valgrind --tool=callgrind` counts
 * every instruction of the send, the receive post and the progress pass
 * that delivers it, deterministically (bench/pollbench-callgrind runs it
 * at two N and subtracts, so set-up and teardown cancel). The wall-clock
 * line it prints is only a hint on a shared machine.
 *
 *   pollbench N [LEN] [manual]
 *       manual: FI_PROGRESS_MANUAL and FI_THREAD_DOMAIN; otherwise the
 *       provider's defaults (gnix: FI_PROGRESS_AUTO, FI_THREAD_SAFE).
 *       A LEN past the provider's inject size goes by fi_tsend, and A's
 *       CQ is read until that send completes too (the rendezvous path).
 *   EMPTY=1 pollbench N   N fi_cq_read calls on an empty CQ instead.
 *   WINDOW=W pollbench N  the message-rate path (Open MPI's MPI_Isend /
 *                         MPI_Irecv windows through mtl ofi): N times, W
 *                         fi_trecv on B, W fi_tsend from A (each wants a
 *                         completion), then both CQs read 100 entries at
 *                         a time until all 2W completions are in; the
 *                         cost per message is then per N*W.
 *   WAIT=K pollbench N    the ping-pong with K fi_cq_read calls on B's
 *                         empty CQ before each send, as a receiver of a
 *                         ping-pong between two processes polls while the
 *                         message is on its way: the message is then taken
 *                         by a poll of the quiet time, not by the whole
 *                         pass that follows a delivery. Every count then
 *                         includes the K empty polls.
 *   DRAIN=1 pollbench N   (with or without WAIT) after each delivering
 *                         read, one more fi_cq_read of B's CQ, which finds
 *                         it empty, before the next fi_trecv: Open MPI's
 *                         mtl ofi reads its CQ until it finds nothing
 *                         before MPI_Recv returns and the rank answers,
 *                         so that read lies between each message and its
 *                         answer.
 *   PEERS=K pollbench N   (the ping-pong) K more endpoints of the domain,
 *                         each of which first sends B one message: B then
 *                         has K + 1 peers, K of them idle, as a rank of a
 *                         job has after hearing from the others once. The
 *                         counts (of the main thread: callgrind
 *                         --separate-threads=yes; the progress thread
 *                         serves the idle endpoints on its timer) show
 *                         what an idle peer costs each message. With
 *                         FI_GNIX_SHM=0 in the environment every peer is
 *                         reached over the udp wire (loopback).
 *   UNEXP=1 pollbench N   the ping-pong's message sent before its receive
 *                         is posted (IMB's PingPing and Exchange, where
 *                         two messages in three come first): B's CQ is
 *                         read once, which takes the message in as
 *                         unexpected, then fi_trecv finds it, and the
 *                         next read returns its completion.
 *   DIRECTED=1            the endpoints ask for FI_DIRECTED_RECV, as
 *                         fabtests' tagged tests, MPICH's ch4:ofi and Open
 *                         MPI's mtl ofi do: every receive then names its
 *                         sender (they all do: A's address), and each
 *                         message is matched on it.
 *   PROV=name             another provider (default gnix).
 *   REMOTE=1              both endpoints first send a message to a peer
 *                         over the udp wire (a helper process, this program
 *                         run again natively with FI_GNIX_SHM=0), as a rank
 *                         of a job across hosts has: the counts are then
 *                         those of local traffic in such a process. (gnix
 *                         only; valgrind does not follow the helper's exec.)
 *
 * Build: cc -O2 -g -o pollbench pollbench.c -lfabric
 */
#define _GNU_SOURCE
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

#define CHK(c)                                                                 \
	do {                                                                   \
		int _r = (int)(c);                                             \
		if (_r) {                                                      \
			fprintf(stderr, "%s:%d %s = %d (%s)\n", __FILE__,      \
				__LINE__, #c, _r, fi_strerror(-_r));           \
			exit(2);                                               \
		}                                                              \
	} while (0)

static double ns_since(const struct timespec *t0)
{
	struct timespec t1;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	return (t1.tv_sec - t0->tv_sec) * 1e9 + (t1.tv_nsec - t0->tv_nsec);
}

/* The fabric, domain and AV (FI_AV_MAP) of an RDM, tagged endpoint of
 * `prov` at 127.0.0.1 (its info returned); `manual`: FI_PROGRESS_MANUAL and FI_THREAD_DOMAIN,
 * else the provider's defaults. */
static struct fi_info *open_domain(const char *prov, int manual, struct fid_fabric **fab, struct fid_domain **dom,
				   struct fid_av **av)
{
	struct fi_info *hints = fi_allocinfo(), *info;
	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_TAGGED;
	if (getenv("DIRECTED"))
		hints->caps |= FI_DIRECTED_RECV;
	hints->mode = FI_CONTEXT;
	hints->fabric_attr->prov_name = strdup(prov);
	if (manual) {
		hints->domain_attr->data_progress = FI_PROGRESS_MANUAL;
		hints->domain_attr->control_progress = FI_PROGRESS_MANUAL;
		hints->domain_attr->threading = FI_THREAD_DOMAIN;
	}
	CHK(fi_getinfo(FI_VERSION(1, 17), "127.0.0.1", NULL, 0, hints, &info));
	fi_freeinfo(hints);
	CHK(fi_fabric(info->fabric_attr, fab, NULL));
	CHK(fi_domain(*fab, info, dom, NULL));
	struct fi_av_attr aa = {.type = FI_AV_MAP};
	CHK(fi_av_open(*dom, &aa, av, NULL));
	return info;
}

/* An enabled endpoint of `dom` with its own CQ (tagged format, `depth`
 * entries) for both directions. */
static void open_ep(struct fid_domain *dom, struct fi_info *info, struct fid_av *av, size_t depth,
		    struct fid_ep **ep, struct fid_cq **cq)
{
	struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_TAGGED, .size = depth};
	CHK(fi_cq_open(dom, &ca, cq, NULL));
	CHK(fi_endpoint(dom, info, ep, NULL));
	CHK(fi_ep_bind(*ep, &av->fid, 0));
	CHK(fi_ep_bind(*ep, &(*cq)->fid, FI_TRANSMIT | FI_RECV));
	CHK(fi_enable(*ep));
}

/* The REMOTE=1 helper: an endpoint without shm (so reached over UDP) that
 * writes its name to fd `out`, takes the two messages that come, and waits
 * (without progressing) until its parent exits and `in` reads end-of-file. */
static int remote_peer(int in, int out)
{
	struct fid_fabric *fab;
	struct fid_domain *dom;
	struct fid_av *av;
	struct fid_ep *ep;
	struct fid_cq *cq;
	struct fi_info *info = open_domain("gnix", 0, &fab, &dom, &av);
	open_ep(dom, info, av, 16, &ep, &cq);
	char name[64], buf[64];
	size_t nl = sizeof(name);
	CHK(fi_getname(&ep->fid, name, &nl));
	struct fi_context ctx[2];
	for (int i = 0; i < 2; i++)
		CHK(fi_trecv(ep, buf, sizeof buf, NULL, FI_ADDR_UNSPEC, 9, 0, &ctx[i]));
	if (write(out, name, nl) != (ssize_t)nl)
		return 2;
	struct fi_cq_tagged_entry e;
	for (int got = 0; got < 2;) {
		int r = (int)fi_cq_read(cq, &e, 1);
		if (r == 1)
			got++;
		else if (r != -FI_EAGAIN)
			return 2;
	}
	/* The ACKs go out from passes and the progress thread meanwhile. */
	while (read(in, buf, 1) > 0)
		;
	return 0;
}

/* PEERS=K: K endpoints more, each sending `b` (whose CQ is `bcq`) one
 * message that it takes; then left idle, open until the process exits. */
static void idle_peers(long k, struct fid_domain *dom, struct fi_info *info, struct fid_av *av, fi_addr_t b,
		       struct fid_ep *bep, struct fid_cq *bcq)
{
	char m[8] = "idle", buf[8];
	struct fi_context rctx, sctx;
	struct fi_cq_tagged_entry e;
	for (long i = 0; i < k; i++) {
		struct fid_ep *ep;
		struct fid_cq *cq;
		open_ep(dom, info, av, 16, &ep, &cq);
		CHK(fi_trecv(bep, buf, sizeof buf, NULL, FI_ADDR_UNSPEC, 9, 0, &rctx));
		CHK(fi_tsend(ep, m, sizeof m, NULL, b, 9, &sctx));
		for (int got = 0; got < 2;) {
			int r = (int)fi_cq_read(cq, &e, 1);
			got += r == 1;
			r = (int)fi_cq_read(bcq, &e, 1);
			got += r == 1;
			if (r < 0 && r != -FI_EAGAIN) {
				fprintf(stderr, "PEERS: fi_cq_read %d\n", r);
				exit(2);
			}
		}
	}
}

/* Starts the REMOTE=1 helper and has each endpoint send it a message and
 * see it acknowledged (the send's completion, on the udp wire). */
static void reach_remote(const char *self, struct fid_av *av, struct fid_ep **ep, struct fid_cq **cq)
{
	int down[2], up[2];
	if (pipe(down) || pipe(up)) {
		perror("pipe");
		exit(2);
	}
	pid_t pid = fork();
	if (pid == 0) {
		char a[16], b[16];
		snprintf(a, sizeof a, "%d", down[0]);
		snprintf(b, sizeof b, "%d", up[1]);
		close(down[1]);
		close(up[0]);
		setenv("FI_GNIX_SHM", "0", 1);
		execl(self, self, "remote-peer", a, b, (char *)NULL);
		_exit(127);
	}
	close(down[0]);
	close(up[1]);
	char name[64];
	ssize_t nl = read(up[0], name, sizeof name);
	fi_addr_t far;
	if (nl <= 0 || fi_av_insert(av, name, 1, &far, 0, NULL) != 1) {
		fprintf(stderr, "REMOTE: no helper\n");
		exit(2);
	}
	char m[8] = "remote";
	struct fi_context ctx[2];
	struct fi_cq_tagged_entry e;
	for (int i = 0; i < 2; i++) {
		CHK(fi_tsend(ep[i], m, sizeof m, NULL, far, 9, &ctx[i]));
		int r;
		while ((r = (int)fi_cq_read(cq[i], &e, 1)) == -FI_EAGAIN)
			;
		if (r != 1) {
			fprintf(stderr, "REMOTE: send %d\n", r);
			exit(2);
		}
	}
	/* The helper's end of `down` stays open while we run; UDP quiet for
	 * over a millisecond (gnix's UDP_HOT_NS) so local traffic is counted
	 * as in a settled job, not just after the remote exchange. */
	struct timespec ms2 = {0, 2000000};
	nanosleep(&ms2, NULL);
}

int main(int argc, char **argv)
{
	if (argc == 4 && !strcmp(argv[1], "remote-peer"))
		return remote_peer(atoi(argv[2]), atoi(argv[3]));
	long n = argc > 1 ? atol(argv[1]) : 10000;
	size_t len = argc > 2 ? (size_t)atol(argv[2]) : 8;
	int manual = argc > 3 && !strcmp(argv[3], "manual");
	struct fid_fabric *fab;
	struct fid_domain *dom;
	struct fid_av *av;
	struct fi_info *info = open_domain(getenv("PROV") ? getenv("PROV") : "gnix", manual, &fab, &dom, &av);
	struct fid_ep *ep[2];
	struct fid_cq *cq[2];
	fi_addr_t fa[2];
	for (int i = 0; i < 2; i++) {
		open_ep(dom, info, av, 1024, &ep[i], &cq[i]);
		char name[64];
		size_t nl = sizeof(name);
		CHK(fi_getname(&ep[i]->fid, name, &nl));
		if (fi_av_insert(av, name, 1, &fa[i], 0, NULL) != 1) {
			fprintf(stderr, "fi_av_insert failed\n");
			return 2;
		}
	}
	if (getenv("REMOTE"))
		reach_remote(argv[0], av, ep, cq);
	if (getenv("PEERS"))
		idle_peers(atol(getenv("PEERS")), dom, info, av, fa[1], ep[1], cq[1]);
	char *sbuf = calloc(1, len + 1), *rbuf = calloc(1, len + 1);
	struct fi_context ctx, sctx;
	int rndv = len > info->tx_attr->inject_size;
	struct fi_cq_tagged_entry e;
	struct timespec t0;
	int r;
	if (getenv("EMPTY")) {
		/* one message first: the wire is connected and in use */
		CHK(fi_trecv(ep[1], rbuf, len, NULL, fa[0], 7, 0, &ctx));
		CHK(fi_tinject(ep[0], sbuf, len, fa[1], 7));
		while (fi_cq_read(cq[1], &e, 1) == -FI_EAGAIN)
			;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		for (long i = 0; i < n; i++)
			fi_cq_read(cq[1], &e, 1);
		printf("%.1f ns per empty poll\n", ns_since(&t0) / n);
		return 0;
	}
	if (getenv("WINDOW")) {
		long w = atol(getenv("WINDOW"));
		if (w < 1 || w > 512) {
			fprintf(stderr, "WINDOW: 1..512\n");
			return 2;
		}
		struct fi_context *rc = calloc(w, sizeof *rc), *sc = calloc(w, sizeof *sc);
		char *rb = calloc(w, len + 1);
		struct fi_cq_tagged_entry es[100];
		for (long i = -10; i < n; i++) {
			if (i == 0)
				clock_gettime(CLOCK_MONOTONIC, &t0);
			for (long k = 0; k < w; k++)
				CHK(fi_trecv(ep[1], rb + k * len, len, NULL, fa[0], 7, 0, &rc[k]));
			for (long k = 0; k < w; k++)
				while ((r = fi_tsend(ep[0], sbuf, len, NULL, fa[1], 7, &sc[k])) == -FI_EAGAIN)
					fi_cq_read(cq[0], es, 0);
			long got[2] = {0, 0};
			while (got[0] < w || got[1] < w)
				for (int c = 0; c < 2; c++) {
					r = (int)fi_cq_read(cq[c], es, 100);
					if (r > 0)
						got[c] += r;
					else if (r != -FI_EAGAIN) {
						fprintf(stderr, "fi_cq_read: %d\n", r);
						return 2;
					}
				}
		}
		printf("%.1f ns per message\n", ns_since(&t0) / (n * w));
		return 0;
	}
	int waits = getenv("WAIT") ? atoi(getenv("WAIT")) : 0;
	int drain = getenv("DRAIN") ? atoi(getenv("DRAIN")) : 0;
	int unexp = getenv("UNEXP") ? atoi(getenv("UNEXP")) : 0;
	if (unexp && (rndv || waits)) {
		fprintf(stderr, "UNEXP: an injected message, without WAIT\n");
		return 2;
	}
	/* 100 untimed messages first (connection set-up) */
	for (long i = -100; i < n; i++) {
		if (i == 0)
			clock_gettime(CLOCK_MONOTONIC, &t0);
		if (unexp) {
			/* the message first, taken in by a read that finds no
			 * receive for it; the receive then finds it waiting */
			while ((r = fi_tinject(ep[0], sbuf, len, fa[1], 7)) == -FI_EAGAIN)
				fi_cq_read(cq[0], &e, 1);
			CHK(r);
			if ((r = (int)fi_cq_read(cq[1], &e, 1)) != -FI_EAGAIN) {
				fprintf(stderr, "fi_cq_read before the receive: %d\n", r);
				return 2;
			}
			CHK(fi_trecv(ep[1], rbuf, len, NULL, fa[0], 7, 0, &ctx));
			while ((r = fi_cq_read(cq[1], &e, 1)) == -FI_EAGAIN)
				;
			if (r != 1) {
				fprintf(stderr, "fi_cq_read: %d\n", r);
				return 2;
			}
			continue;
		}
		CHK(fi_trecv(ep[1], rbuf, len, NULL, fa[0], 7, 0, &ctx));
		for (int k = 0; k < waits; k++) {
			if ((r = (int)fi_cq_read(cq[1], &e, 1)) != -FI_EAGAIN) {
				fprintf(stderr, "fi_cq_read of an empty CQ: %d\n", r);
				return 2;
			}
		}
		if (rndv) {
			/* past the inject size: a send, completed by its peer */
			CHK(fi_tsend(ep[0], sbuf, len, NULL, fa[1], 7, &sctx));
		} else {
			while ((r = fi_tinject(ep[0], sbuf, len, fa[1], 7)) == -FI_EAGAIN)
				fi_cq_read(cq[0], &e, 1);
			CHK(r);
		}
		while ((r = fi_cq_read(cq[1], &e, 1)) == -FI_EAGAIN)
			;
		if (r != 1) {
			fprintf(stderr, "fi_cq_read: %d\n", r);
			return 2;
		}
		if (drain && (r = (int)fi_cq_read(cq[1], &e, 1)) != -FI_EAGAIN) {
			fprintf(stderr, "fi_cq_read after the delivery: %d\n", r);
			return 2;
		}
		while (rndv && (r = fi_cq_read(cq[0], &e, 1)) == -FI_EAGAIN)
			;
	}
	printf("%.1f ns per message\n", ns_since(&t0) / n);
	fi_close(&ep[0]->fid);
	fi_close(&ep[1]->fid);
	fi_close(&cq[0]->fid);
	fi_close(&cq[1]->fid);
	fi_close(&av->fid);
	fi_close(&dom->fid);
	fi_close(&fab->fid);
	fi_freeinfo(info);
	return 0;
}
