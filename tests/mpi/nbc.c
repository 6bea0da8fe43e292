/*
 * Nonblocking collectives.
 *
 *  1. MPI_Ibarrier: no rank completes it before rank 0 has entered (rank 0
 *     first polls for "I left" messages, which must not come), then all
 *     complete.
 *  2. Every nonblocking collective started back to back on one
 *     communicator and completed together (MPI_Waitall), with point to point
 *     traffic (a ring of Isend/Irecv of 70 KB) in flight at the same time:
 *     Ibcast, Igather, Igatherv, Iscatter, Iscatterv, Iallgather,
 *     Iallgatherv, Ialltoall, Ialltoallv, Ialltoallw, Ireduce, Iallreduce,
 *     Ireduce_scatter, Ireduce_scatter_block, Iscan, Iexscan; zero counts
 *     in the v/w variants and MPI_IN_PLACE where allowed; large and small.
 *  3. MPI_Testall polling instead of waiting; MPI_Waitany over a mix.
 *  4. Iallreduce on two duplicated communicators started in opposite
 *     orders on even and odd ranks.
 * Any number of ranks.
 */
#include "common.h"

static int rank, nprocs;

static void ibarrier(void)
{
	PHASE("MPI_Ibarrier: nobody leaves before rank 0 enters");
	MPI_Request req;
	if (rank == 0) {
		MPI_Request *left = malloc(sizeof(MPI_Request) * nprocs);
		int *dummy = malloc(sizeof(int) * nprocs);
		for (int r = 1; r < nprocs; r++)
			MPI_CHK(MPI_Irecv(&dummy[r], 1, MPI_INT, r, 77, MPI_COMM_WORLD, &left[r]));
		/* polling a while: a bounded number of progress calls */
		for (int i = 0; i < 2000; i++) {
			int idx, flag;
			MPI_CHK(MPI_Testany(nprocs - 1, left + 1, &idx, &flag, MPI_STATUS_IGNORE));
			if (flag && idx != MPI_UNDEFINED)
				FAIL("rank %d left MPI_Ibarrier before rank 0 entered it", idx + 1);
		}
		MPI_CHK(MPI_Ibarrier(MPI_COMM_WORLD, &req));
		MPI_CHK(MPI_Wait(&req, MPI_STATUS_IGNORE));
		MPI_CHK(MPI_Waitall(nprocs - 1, left + 1, MPI_STATUSES_IGNORE));
		free(left);
		free(dummy);
	} else {
		MPI_CHK(MPI_Ibarrier(MPI_COMM_WORLD, &req));
		MPI_CHK(MPI_Wait(&req, MPI_STATUS_IGNORE));
		MPI_CHK(MPI_Send(&rank, 1, MPI_INT, 0, 77, MPI_COMM_WORLD));
	}
	PHASE("MPI_Ibarrier x50 completed by MPI_Test");
	for (int i = 0; i < 50; i++) {
		int flag = 0;
		MPI_CHK(MPI_Ibarrier(MPI_COMM_WORLD, &req));
		while (!flag)
			MPI_CHK(MPI_Test(&req, &flag, MPI_STATUS_IGNORE));
	}
}

#define V(r, p, i) ((r) * 1000000 + (p) * 30000 + (i))

static void everything(int big, int poll)
{
	PHASE("all nonblocking collectives at once (%s, %s)", big ? "large" : "small",
	      poll ? "MPI_Testall" : "MPI_Waitall");
	int c = big ? 17000 : 3; /* ints per block: 68 KB is rendezvous */
	int n = nprocs;
	enum { NREQ = 17 };
	MPI_Request rq[NREQ + 2];
	int k = 0;

	/* p2p ring alongside */
	int pn = 17500;
	int *ps = malloc(sizeof(int) * pn), *pr = malloc(sizeof(int) * pn);
	for (int i = 0; i < pn; i++)
		ps[i] = V(rank, 0, i);
	MPI_CHK(MPI_Irecv(pr, pn, MPI_INT, (rank + n - 1) % n, 5, MPI_COMM_WORLD, &rq[NREQ]));
	MPI_CHK(MPI_Isend(ps, pn, MPI_INT, (rank + 1) % n, 5, MPI_COMM_WORLD, &rq[NREQ + 1]));

	/* Ibcast from root 0 */
	int *bc = malloc(sizeof(int) * c);
	for (int i = 0; i < c; i++)
		bc[i] = rank == 0 ? V(0, 9, i) : -1;
	MPI_CHK(MPI_Ibcast(bc, c, MPI_INT, 0, MPI_COMM_WORLD, &rq[k++]));

	/* Igather to n-1, Iscatter from n-1 */
	int root = n - 1;
	int *gs = malloc(sizeof(int) * c), *gr = malloc(sizeof(int) * c * n);
	for (int i = 0; i < c; i++)
		gs[i] = V(rank, 1, i);
	MPI_CHK(MPI_Igather(gs, c, MPI_INT, gr, c, MPI_INT, root, MPI_COMM_WORLD, &rq[k++]));
	int *ss = malloc(sizeof(int) * c * n), *sr = malloc(sizeof(int) * c);
	for (int p = 0; p < n; p++)
		for (int i = 0; i < c; i++)
			ss[p * c + i] = V(p, 2, i);
	MPI_CHK(MPI_Iscatter(ss, c, MPI_INT, sr, c, MPI_INT, root, MPI_COMM_WORLD, &rq[k++]));

	/* v-variants: rank r has (r % 2) * c elements (zero counts) */
	int *cnt = malloc(sizeof(int) * n), *dsp = malloc(sizeof(int) * n), tot = 0;
	for (int p = 0; p < n; p++) {
		cnt[p] = (p % 2) * c;
		dsp[p] = tot;
		tot += cnt[p];
	}
	int *gvs = malloc(sizeof(int) * (c + 1)), *gvr = malloc(sizeof(int) * (tot + 1));
	for (int i = 0; i < cnt[rank]; i++)
		gvs[i] = V(rank, 3, i);
	MPI_CHK(MPI_Igatherv(gvs, cnt[rank], MPI_INT, gvr, cnt, dsp, MPI_INT, 0, MPI_COMM_WORLD, &rq[k++]));
	int *svs = malloc(sizeof(int) * (tot + 1)), *svr = malloc(sizeof(int) * (c + 1));
	for (int p = 0; p < n; p++)
		for (int i = 0; i < cnt[p]; i++)
			svs[dsp[p] + i] = V(p, 4, i);
	MPI_CHK(MPI_Iscatterv(svs, cnt, dsp, MPI_INT, svr, cnt[rank], MPI_INT, 0, MPI_COMM_WORLD, &rq[k++]));

	/* Iallgather in place, Iallgatherv */
	int *ag = malloc(sizeof(int) * c * n);
	for (int i = 0; i < c; i++)
		ag[rank * c + i] = V(rank, 5, i);
	MPI_CHK(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, ag, c, MPI_INT, MPI_COMM_WORLD, &rq[k++]));
	int *agv = malloc(sizeof(int) * (tot + 1)), *agvs = malloc(sizeof(int) * (c + 1));
	for (int i = 0; i < cnt[rank]; i++)
		agvs[i] = V(rank, 6, i);
	MPI_CHK(MPI_Iallgatherv(agvs, cnt[rank], MPI_INT, agv, cnt, dsp, MPI_INT, MPI_COMM_WORLD, &rq[k++]));

	/* Ialltoall, Ialltoallv, Ialltoallw */
	int *a2s = malloc(sizeof(int) * c * n), *a2r = malloc(sizeof(int) * c * n);
	for (int p = 0; p < n; p++)
		for (int i = 0; i < c; i++)
			a2s[p * c + i] = V(rank, p, i);
	MPI_CHK(MPI_Ialltoall(a2s, c, MPI_INT, a2r, c, MPI_INT, MPI_COMM_WORLD, &rq[k++]));
	int *vsc = malloc(sizeof(int) * n), *vsd = malloc(sizeof(int) * n);
	int *vrc = malloc(sizeof(int) * n), *vrd = malloc(sizeof(int) * n);
	int so = 0, ro = 0;
	for (int p = 0; p < n; p++) {
		vsc[p] = ((rank + p) % 3) * c / 2;
		vsd[p] = so;
		so += vsc[p];
		vrc[p] = ((p + rank) % 3) * c / 2;
		vrd[p] = ro;
		ro += vrc[p];
	}
	int *avs = malloc(sizeof(int) * (so + 1)), *avr = malloc(sizeof(int) * (ro + 1));
	for (int p = 0; p < n; p++)
		for (int i = 0; i < vsc[p]; i++)
			avs[vsd[p] + i] = V(rank, p, i) + 1;
	MPI_CHK(MPI_Ialltoallv(avs, vsc, vsd, MPI_INT, avr, vrc, vrd, MPI_INT, MPI_COMM_WORLD, &rq[k++]));
	int *wsd = malloc(sizeof(int) * n), *wrd = malloc(sizeof(int) * n);
	MPI_Datatype *wt = malloc(sizeof(MPI_Datatype) * n);
	for (int p = 0; p < n; p++) {
		wsd[p] = vsd[p] * (int)sizeof(int);
		wrd[p] = vrd[p] * (int)sizeof(int);
		wt[p] = MPI_INT;
	}
	int *aws = malloc(sizeof(int) * (so + 1)), *awr = malloc(sizeof(int) * (ro + 1));
	for (int p = 0; p < n; p++)
		for (int i = 0; i < vsc[p]; i++)
			aws[vsd[p] + i] = V(rank, p, i) + 2;
	MPI_CHK(MPI_Ialltoallw(aws, vsc, wsd, wt, awr, vrc, wrd, wt, MPI_COMM_WORLD, &rq[k++]));

	/* reductions */
	int *rs = malloc(sizeof(int) * c * n), *rr = malloc(sizeof(int) * c * n);
	int *ar = malloc(sizeof(int) * c), *rsb = malloc(sizeof(int) * c), *rsv = malloc(sizeof(int) * (c + 1));
	int *sc_in = malloc(sizeof(int) * c), *sc_out = malloc(sizeof(int) * c);
	int *ex_in = malloc(sizeof(int) * c), *ex_out = malloc(sizeof(int) * c);
	for (int i = 0; i < c * n; i++)
		rs[i] = rank + i;
	for (int i = 0; i < c; i++) {
		ar[i] = rank * 2 + i;
		sc_in[i] = rank + 1 + i;
		ex_in[i] = rank + 1 + i;
	}
	MPI_CHK(MPI_Ireduce(rs, rr, c, MPI_INT, MPI_SUM, root, MPI_COMM_WORLD, &rq[k++]));
	MPI_CHK(MPI_Iallreduce(MPI_IN_PLACE, ar, c, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &rq[k++]));
	MPI_CHK(MPI_Ireduce_scatter_block(rs, rsb, c, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &rq[k++]));
	/* Ireduce_scatter with the Gatherv counts (zero for even ranks) */
	MPI_CHK(MPI_Ireduce_scatter(rs, rsv, cnt, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &rq[k++]));
	MPI_CHK(MPI_Iscan(sc_in, sc_out, c, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &rq[k++]));
	MPI_CHK(MPI_Iexscan(ex_in, ex_out, c, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &rq[k++]));
	if (k != NREQ - 1)
		FAIL("internal: %d requests", k);
	rq[k++] = MPI_REQUEST_NULL;

	if (poll) {
		int flag = 0;
		while (!flag)
			MPI_CHK(MPI_Testall(NREQ + 2, rq, &flag, MPI_STATUSES_IGNORE));
	} else {
		MPI_CHK(MPI_Waitall(NREQ + 2, rq, MPI_STATUSES_IGNORE));
	}

	/* checks */
	int s0 = n * (n - 1) / 2;
	for (int i = 0; i < pn; i++)
		if (pr[i] != V((rank + n - 1) % n, 0, i))
			FAIL("ring message during collectives: element %d", i);
	for (int i = 0; i < c; i++) {
		if (bc[i] != V(0, 9, i))
			FAIL("Ibcast element %d", i);
		if (sr[i] != V(rank, 2, i))
			FAIL("Iscatter element %d", i);
		if (ar[i] != n * (n - 1) + n * i)
			FAIL("Iallreduce element %d: %d", i, ar[i]);
		if (rsb[i] != s0 + n * (rank * c + i))
			FAIL("Ireduce_scatter_block element %d: %d", i, rsb[i]);
		if (sc_out[i] != (rank + 1) * (rank + 2) / 2 + (rank + 1) * i)
			FAIL("Iscan element %d", i);
		if (rank > 0 && ex_out[i] != rank * (rank + 1) / 2 + rank * i)
			FAIL("Iexscan element %d", i);
	}
	if (rank == root)
		for (int p = 0; p < n; p++)
			for (int i = 0; i < c; i++) {
				if (gr[p * c + i] != V(p, 1, i))
					FAIL("Igather from %d element %d", p, i);
				if (p == 0 && rr[i] != s0 + n * i)
					FAIL("Ireduce element %d: %d", i, rr[i]);
			}
	if (rank == 0)
		for (int p = 0; p < n; p++)
			for (int i = 0; i < cnt[p]; i++)
				if (gvr[dsp[p] + i] != V(p, 3, i))
					FAIL("Igatherv from %d element %d", p, i);
	for (int i = 0; i < cnt[rank]; i++)
		if (svr[i] != V(rank, 4, i))
			FAIL("Iscatterv element %d", i);
	for (int p = 0; p < n; p++) {
		for (int i = 0; i < c; i++) {
			if (ag[p * c + i] != V(p, 5, i))
				FAIL("Iallgather in place from %d element %d", p, i);
			if (a2r[p * c + i] != V(p, rank, i))
				FAIL("Ialltoall from %d element %d", p, i);
		}
		for (int i = 0; i < cnt[p]; i++)
			if (agv[dsp[p] + i] != V(p, 6, i))
				FAIL("Iallgatherv from %d element %d", p, i);
		for (int i = 0; i < vrc[p]; i++) {
			if (avr[vrd[p] + i] != V(p, rank, i) + 1)
				FAIL("Ialltoallv from %d element %d", p, i);
			if (awr[vrd[p] + i] != V(p, rank, i) + 2)
				FAIL("Ialltoallw from %d element %d", p, i);
		}
	}
	for (int i = 0; i < cnt[rank]; i++)
		if (rsv[i] != s0 + n * (dsp[rank] + i))
			FAIL("Ireduce_scatter element %d: %d", i, rsv[i]);

	void *all[] = {ps, pr, bc, gs, gr, ss, sr, cnt, dsp, gvs, gvr, svs, svr, ag, agv, agvs,
		       a2s, a2r, vsc, vsd, vrc, vrd, avs, avr, wsd, wrd, wt, aws, awr, rs, rr, ar,
		       rsb, rsv, sc_in, sc_out, ex_in, ex_out};
	for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
		free(all[i]);
}

static void two_comms(void)
{
	PHASE("Iallreduce on two communicators started in opposite orders");
	MPI_Comm c1, c2;
	MPI_CHK(MPI_Comm_dup(MPI_COMM_WORLD, &c1));
	MPI_CHK(MPI_Comm_dup(MPI_COMM_WORLD, &c2));
	for (int it = 0; it < 20; it++) {
		int a = rank + it, b = rank * 3 + it, ra = 0, rb = 0;
		MPI_Request rq[2];
		if (rank % 2) {
			MPI_CHK(MPI_Iallreduce(&a, &ra, 1, MPI_INT, MPI_SUM, c1, &rq[0]));
			MPI_CHK(MPI_Iallreduce(&b, &rb, 1, MPI_INT, MPI_SUM, c2, &rq[1]));
		} else {
			MPI_CHK(MPI_Iallreduce(&b, &rb, 1, MPI_INT, MPI_SUM, c2, &rq[1]));
			MPI_CHK(MPI_Iallreduce(&a, &ra, 1, MPI_INT, MPI_SUM, c1, &rq[0]));
		}
		int idx, done = 0;
		while (done < 2) {
			MPI_CHK(MPI_Waitany(2, rq, &idx, MPI_STATUS_IGNORE));
			done++;
		}
		int n = nprocs;
		if (ra != n * (n - 1) / 2 + n * it || rb != 3 * n * (n - 1) / 2 + n * it)
			FAIL("two communicators, iteration %d: %d %d", it, ra, rb);
	}
	MPI_CHK(MPI_Comm_free(&c1));
	MPI_CHK(MPI_Comm_free(&c2));
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	watchdog_start();
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
	if (nprocs < 2)
		FAIL("needs at least 2 ranks");
	ibarrier();
	for (int big = 0; big < 2; big++)
		for (int poll = 0; poll < 2; poll++)
			everything(big, poll);
	two_comms();
	PHASE("MPI_Finalize");
	MPI_Finalize();
	PHASE_DONE();
	if (rank == 0)
		printf("PASS nbc\n");
	return 0;
}
