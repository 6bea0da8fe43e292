/*
 * Communicators, groups, intercommunicators and topologies.
 *
 *  1. MPI_Comm_dup / MPI_Comm_idup / MPI_Comm_dup_with_info: the same
 *     (source, tag) on two communicators never cross; MPI_Comm_compare.
 *  2. MPI_Comm_split (rank % 2, reversed keys; one color MPI_UNDEFINED),
 *     MPI_Comm_split_type(MPI_COMM_TYPE_SHARED).
 *  3. Groups: incl/excl/range_incl/union/intersection/difference,
 *     translate_ranks, compare; MPI_Comm_create (members get a
 *     communicator, the others MPI_COMM_NULL) and MPI_Comm_create_group.
 *  4. MPI_Intercomm_create between the two halves of the rank % 2 split
 *     (local leader 0, remote leader the other half's lowest world rank,
 *     tag 7), then point to point across it (local rank i <-> remote rank i).
 *  5. Collectives on the intercommunicator: Barrier, Bcast (MPI_ROOT /
 *     MPI_PROC_NULL), Allreduce, Allgather, Allgatherv, Alltoall,
 *     Alltoallv, Gather, Scatter, Reduce, Reduce_scatter_block, and
 *     Ibarrier / Ibcast / Iallreduce; MPI_Comm_dup of the intercommunicator.
 *  6. MPI_Intercomm_merge (the rank % 2 == 1 half high): rank order and an
 *     Allreduce on the merged communicator.
 *  7. Topologies: a periodic 1-d Cartesian ring (MPI_Cart_shift + Sendrecv,
 *     MPI_Neighbor_allgather, MPI_Neighbor_alltoall, MPI_Ineighbor_alltoall)
 *     and MPI_Dist_graph_create_adjacent with MPI_Neighbor_alltoallv.
 * Needs at least 2 ranks.
 */
#include "common.h"

static int rank, nprocs;

static void dups(void)
{
	PHASE("MPI_Comm_dup / idup / dup_with_info");
	MPI_Comm d1, d2, d3;
	MPI_Request req;
	MPI_CHK(MPI_Comm_dup(MPI_COMM_WORLD, &d1));
	MPI_CHK(MPI_Comm_idup(MPI_COMM_WORLD, &d2, &req));
	MPI_CHK(MPI_Wait(&req, MPI_STATUS_IGNORE));
	MPI_CHK(MPI_Comm_dup_with_info(d1, MPI_INFO_NULL, &d3));
	int res;
	MPI_CHK(MPI_Comm_compare(MPI_COMM_WORLD, d1, &res));
	if (res != MPI_CONGRUENT)
		FAIL("compare(world, dup) = %d, want MPI_CONGRUENT", res);
	MPI_CHK(MPI_Comm_compare(d2, d2, &res));
	if (res != MPI_IDENT)
		FAIL("compare(c, c) = %d, want MPI_IDENT", res);
	/* same peer, same tag on four communicators: each receive gets the
	 * message of its own communicator although they are received in the
	 * opposite order of sending */
	MPI_Comm comms[4] = {MPI_COMM_WORLD, d1, d2, d3};
	int right = (rank + 1) % nprocs, left = (rank + nprocs - 1) % nprocs;
	MPI_Request reqs[8];
	int out[4], in[4];
	for (int i = 0; i < 4; i++) {
		out[i] = rank * 10 + i;
		MPI_CHK(MPI_Isend(&out[i], 1, MPI_INT, right, 5, comms[i], &reqs[i]));
	}
	for (int i = 3; i >= 0; i--)
		MPI_CHK(MPI_Irecv(&in[i], 1, MPI_INT, left, 5, comms[i], &reqs[4 + i]));
	MPI_CHK(MPI_Waitall(8, reqs, MPI_STATUSES_IGNORE));
	for (int i = 0; i < 4; i++)
		if (in[i] != left * 10 + i)
			FAIL("communicator %d received %d, want %d (crossed communicators)", i, in[i],
			     left * 10 + i);
	MPI_CHK(MPI_Comm_free(&d1));
	MPI_CHK(MPI_Comm_free(&d2));
	MPI_CHK(MPI_Comm_free(&d3));
}

static void splits(void)
{
	PHASE("MPI_Comm_split");
	MPI_Comm half, some;
	MPI_CHK(MPI_Comm_split(MPI_COMM_WORLD, rank % 2, -rank, &half));
	int hr, hs;
	MPI_Comm_rank(half, &hr);
	MPI_Comm_size(half, &hs);
	int want_size = (nprocs + 1 - rank % 2) / 2;
	/* keys are -rank: the highest world rank of the half is its rank 0 */
	int want_rank = want_size - 1 - rank / 2;
	if (hs != want_size || hr != want_rank)
		FAIL("split: rank %d size %d, want %d %d", hr, hs, want_rank, want_size);
	int sum = 0;
	MPI_CHK(MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, half));
	int want = 0;
	for (int r = rank % 2; r < nprocs; r += 2)
		want += r;
	if (sum != want)
		FAIL("Allreduce on split half: %d, want %d", sum, want);
	MPI_CHK(MPI_Comm_free(&half));

	MPI_CHK(MPI_Comm_split(MPI_COMM_WORLD, rank == 0 ? MPI_UNDEFINED : 1, 0, &some));
	if ((rank == 0) != (some == MPI_COMM_NULL))
		FAIL("split with MPI_UNDEFINED: communicator %s", some == MPI_COMM_NULL ? "null" : "set");
	if (some != MPI_COMM_NULL) {
		MPI_CHK(MPI_Barrier(some));
		MPI_CHK(MPI_Comm_free(&some));
	}

	PHASE("MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)");
	MPI_Comm node;
	MPI_CHK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node));
	int ns;
	MPI_Comm_size(node, &ns);
	if (ns < 1 || ns > nprocs)
		FAIL("split_type: size %d", ns);
	MPI_CHK(MPI_Barrier(node));
	MPI_CHK(MPI_Comm_free(&node));
}

static void groups(void)
{
	PHASE("groups and MPI_Comm_create");
	MPI_Group world, even, odd, un, in, diff, rng;
	MPI_CHK(MPI_Comm_group(MPI_COMM_WORLD, &world));
	int *ev = malloc(sizeof(int) * nprocs), ne = 0;
	for (int r = 0; r < nprocs; r += 2)
		ev[ne++] = r;
	MPI_CHK(MPI_Group_incl(world, ne, ev, &even));
	MPI_CHK(MPI_Group_excl(world, ne, ev, &odd));
	int range[1][3] = {{0, nprocs - 1, 2}};
	MPI_CHK(MPI_Group_range_incl(world, 1, range, &rng));
	int res;
	MPI_CHK(MPI_Group_compare(even, rng, &res));
	if (res != MPI_IDENT)
		FAIL("range_incl(0..n-1 step 2) vs incl(evens): %d", res);
	MPI_CHK(MPI_Group_union(odd, even, &un));
	MPI_CHK(MPI_Group_compare(un, world, &res));
	if (res != MPI_SIMILAR)
		FAIL("union(odd, even) vs world: %d, want MPI_SIMILAR", res);
	MPI_CHK(MPI_Group_intersection(even, odd, &in));
	int sz;
	MPI_Group_size(in, &sz);
	if (sz != 0)
		FAIL("even ∩ odd has %d members", sz);
	MPI_CHK(MPI_Group_difference(world, odd, &diff));
	MPI_CHK(MPI_Group_compare(diff, even, &res));
	if (res != MPI_IDENT)
		FAIL("world - odd vs even: %d", res);
	int tr[2] = {0, 1}, out[2];
	MPI_CHK(MPI_Group_translate_ranks(odd, 1, tr, world, out));
	if (out[0] != 1)
		FAIL("translate odd rank 0 -> world %d", out[0]);

	MPI_Comm ce;
	MPI_CHK(MPI_Comm_create(MPI_COMM_WORLD, even, &ce));
	if ((rank % 2 == 0) != (ce != MPI_COMM_NULL))
		FAIL("Comm_create: membership wrong");
	if (ce != MPI_COMM_NULL) {
		int s = 0, one = 1;
		MPI_CHK(MPI_Allreduce(&one, &s, 1, MPI_INT, MPI_SUM, ce));
		if (s != ne)
			FAIL("Allreduce on created comm: %d, want %d", s, ne);
		MPI_CHK(MPI_Comm_free(&ce));
	}
	PHASE("MPI_Comm_create_group");
	if (rank % 2 == 1) {
		MPI_Comm co;
		MPI_CHK(MPI_Comm_create_group(MPI_COMM_WORLD, odd, 99, &co));
		int r2;
		MPI_Comm_rank(co, &r2);
		if (r2 != rank / 2)
			FAIL("create_group: rank %d, want %d", r2, rank / 2);
		MPI_CHK(MPI_Barrier(co));
		MPI_CHK(MPI_Comm_free(&co));
	}
	MPI_Group gs[7] = {world, even, odd, un, in, diff, rng};
	for (int i = 0; i < 7; i++)
		MPI_CHK(MPI_Group_free(&gs[i]));
	free(ev);
}

/* ---- intercommunicator ---- */

static MPI_Comm local, inter;
static int color, lrank, lsize, rsize;

static void make_inter(void)
{
	PHASE("MPI_Comm_split for the intercommunicator");
	color = rank % 2;
	MPI_CHK(MPI_Comm_split(MPI_COMM_WORLD, color, rank, &local));
	PHASE("MPI_Intercomm_create");
	/* the other half's leader: its lowest world rank */
	int remote_leader = color == 0 ? 1 : 0;
	MPI_CHK(MPI_Intercomm_create(local, 0, MPI_COMM_WORLD, remote_leader, 7, &inter));
	int flag = 0;
	MPI_CHK(MPI_Comm_test_inter(inter, &flag));
	MPI_Comm_rank(inter, &lrank);
	MPI_Comm_size(inter, &lsize);
	MPI_CHK(MPI_Comm_remote_size(inter, &rsize));
	int want_l = (nprocs + 1 - color) / 2, want_r = nprocs - want_l;
	if (!flag || lrank != rank / 2 || lsize != want_l || rsize != want_r)
		FAIL("intercomm: inter %d rank %d size %d remote %d, want 1 %d %d %d", flag, lrank, lsize,
		     rsize, rank / 2, want_l, want_r);
	MPI_Group rg;
	MPI_CHK(MPI_Comm_remote_group(inter, &rg));
	int zero = 0, w;
	MPI_Group wg;
	MPI_Comm_group(MPI_COMM_WORLD, &wg);
	MPI_CHK(MPI_Group_translate_ranks(rg, 1, &zero, wg, &w));
	if (w != 1 - color)
		FAIL("remote group rank 0 is world %d, want %d", w, 1 - color);
	MPI_Group_free(&rg);
	MPI_Group_free(&wg);
}

/* world rank of remote rank r */
static int remote_world(int r) { return 2 * r + (1 - color); }

static void inter_p2p(void)
{
	PHASE("point to point across the intercommunicator");
	static const size_t sizes[] = {0, 8, 4097, 65537, 1 << 20};
	char *sb = malloc(1 << 20), *rb = malloc(1 << 20);
	for (int k = 0; k < 5; k++) {
		size_t sz = sizes[k];
		int peer = lrank < rsize ? lrank : -1;
		if (peer < 0)
			continue;
		MPI_Status st;
		fill_pattern(sb, sz, (unsigned)(rank * 10 + k));
		MPI_CHK(MPI_Sendrecv(sb, (int)sz, MPI_BYTE, peer, k, rb, (int)sz, MPI_BYTE, peer, k, inter,
				     &st));
		int cnt;
		MPI_Get_count(&st, MPI_BYTE, &cnt);
		if (st.MPI_SOURCE != peer || (size_t)cnt != sz)
			FAIL("intercomm sendrecv: source %d count %d, want %d %zu", st.MPI_SOURCE, cnt,
			     peer, sz);
		if (check_pattern(rb, sz, (unsigned)(remote_world(peer) * 10 + k)) >= 0)
			FAIL("intercomm sendrecv %zu B: data differs", sz);
	}
	free(sb);
	free(rb);
}

/* root argument for a rooted intercomm collective whose root is rank 0 of
 * the half `root_color` */
static int root_arg(int root_color)
{
	if (color == root_color)
		return lrank == 0 ? MPI_ROOT : MPI_PROC_NULL;
	return 0;
}

static void inter_coll(void)
{
	int n = 1000;
	int *a = malloc(sizeof(int) * n * nprocs), *b = malloc(sizeof(int) * n * nprocs);
	int *cnts = malloc(sizeof(int) * nprocs), *dsp = malloc(sizeof(int) * nprocs);

	PHASE("intercomm MPI_Barrier");
	MPI_CHK(MPI_Barrier(inter));

	for (int rc = 0; rc < 2; rc++) {
		PHASE("intercomm MPI_Bcast from half %d", rc);
		for (int i = 0; i < n; i++)
			a[i] = color == rc && lrank == 0 ? i * 3 + rc : -1;
		MPI_CHK(MPI_Bcast(a, n, MPI_INT, root_arg(rc), inter));
		if (color != rc || lrank == 0)
			for (int i = 0; i < n; i++)
				if (a[i] != i * 3 + rc)
					FAIL("intercomm Bcast: element %d is %d", i, a[i]);
	}

	PHASE("intercomm MPI_Allreduce");
	int v = rank + 1, s = 0, want = 0;
	MPI_CHK(MPI_Allreduce(&v, &s, 1, MPI_INT, MPI_SUM, inter));
	for (int r = 1 - color; r < nprocs; r += 2)
		want += r + 1; /* the remote half's values */
	if (s != want)
		FAIL("intercomm Allreduce: %d, want %d", s, want);

	PHASE("intercomm MPI_Allgather");
	for (int i = 0; i < 3; i++)
		a[i] = rank * 100 + i;
	MPI_CHK(MPI_Allgather(a, 3, MPI_INT, b, 3, MPI_INT, inter));
	for (int r = 0; r < rsize; r++)
		for (int i = 0; i < 3; i++)
			if (b[r * 3 + i] != remote_world(r) * 100 + i)
				FAIL("intercomm Allgather: remote %d element %d is %d", r, i, b[r * 3 + i]);

	PHASE("intercomm MPI_Allgatherv");
	/* remote rank r contributes r+1 elements (zero-count: none) */
	int tot = 0;
	for (int r = 0; r < rsize; r++) {
		cnts[r] = r + 1;
		dsp[r] = tot;
		tot += r + 1;
	}
	for (int i = 0; i <= lrank; i++)
		a[i] = rank * 100 + i;
	MPI_CHK(MPI_Allgatherv(a, lrank + 1, MPI_INT, b, cnts, dsp, MPI_INT, inter));
	for (int r = 0; r < rsize; r++)
		for (int i = 0; i <= r; i++)
			if (b[dsp[r] + i] != remote_world(r) * 100 + i)
				FAIL("intercomm Allgatherv: remote %d element %d", r, i);

	PHASE("intercomm MPI_Alltoall");
	for (int r = 0; r < rsize; r++)
		for (int i = 0; i < 4; i++)
			a[r * 4 + i] = rank * 1000 + remote_world(r) * 10 + i;
	MPI_CHK(MPI_Alltoall(a, 4, MPI_INT, b, 4, MPI_INT, inter));
	for (int r = 0; r < rsize; r++)
		for (int i = 0; i < 4; i++)
			if (b[r * 4 + i] != remote_world(r) * 1000 + rank * 10 + i)
				FAIL("intercomm Alltoall: from remote %d element %d", r, i);

	PHASE("intercomm MPI_Alltoallv");
	{
		/* to remote r: (lrank + r) % 3 elements (zero counts included) */
		int *sc = malloc(sizeof(int) * rsize), *sd = malloc(sizeof(int) * rsize);
		int *rcn = malloc(sizeof(int) * rsize), *rd = malloc(sizeof(int) * rsize);
		int so = 0, ro = 0;
		for (int r = 0; r < rsize; r++) {
			sc[r] = (lrank + r) % 3;
			sd[r] = so;
			for (int i = 0; i < sc[r]; i++)
				a[so + i] = rank * 1000 + remote_world(r) * 10 + i;
			so += sc[r];
			rcn[r] = (r + lrank) % 3;
			rd[r] = ro;
			ro += rcn[r];
		}
		MPI_CHK(MPI_Alltoallv(a, sc, sd, MPI_INT, b, rcn, rd, MPI_INT, inter));
		for (int r = 0; r < rsize; r++)
			for (int i = 0; i < rcn[r]; i++)
				if (b[rd[r] + i] != remote_world(r) * 1000 + rank * 10 + i)
					FAIL("intercomm Alltoallv: from remote %d element %d", r, i);
		free(sc); free(sd); free(rcn); free(rd);
	}

	for (int rc = 0; rc < 2; rc++) {
		PHASE("intercomm MPI_Gather / Scatter / Reduce to half %d", rc);
		int root = root_arg(rc);
		for (int i = 0; i < 2; i++)
			a[i] = rank * 10 + i;
		MPI_CHK(MPI_Gather(a, 2, MPI_INT, b, 2, MPI_INT, root, inter));
		if (root == MPI_ROOT)
			for (int r = 0; r < rsize; r++)
				for (int i = 0; i < 2; i++)
					if (b[r * 2 + i] != remote_world(r) * 10 + i)
						FAIL("intercomm Gather: remote %d element %d", r, i);
		if (root == MPI_ROOT)
			for (int r = 0; r < rsize; r++)
				for (int i = 0; i < 2; i++)
					a[r * 2 + i] = r * 7 + i + rc;
		MPI_CHK(MPI_Scatter(a, 2, MPI_INT, b, 2, MPI_INT, root, inter));
		if (color != rc)
			for (int i = 0; i < 2; i++)
				if (b[i] != lrank * 7 + i + rc)
					FAIL("intercomm Scatter: element %d is %d", i, b[i]);
		v = rank + 1;
		s = -1;
		MPI_CHK(MPI_Reduce(&v, &s, 1, MPI_INT, MPI_SUM, root, inter));
		if (root == MPI_ROOT) {
			int w = 0;
			for (int r = 0; r < rsize; r++)
				w += remote_world(r) + 1;
			if (s != w)
				FAIL("intercomm Reduce: %d, want %d", s, w);
		}
	}

	/* the reduced vector (n * recvcount) must be as long in both halves:
	 * only when they are of equal size */
	if (lsize == rsize) {
	PHASE("intercomm MPI_Reduce_scatter_block");
	/* each process offers one block of 2 per remote rank */
	for (int r = 0; r < rsize; r++)
		for (int i = 0; i < 2; i++)
			a[r * 2 + i] = rank + r * 10 + i;
	MPI_CHK(MPI_Reduce_scatter_block(a, b, 2, MPI_INT, MPI_SUM, inter));
	for (int i = 0; i < 2; i++) {
		int w = 0;
		for (int r = 0; r < rsize; r++)
			w += remote_world(r) + lrank * 10 + i;
		if (b[i] != w)
			FAIL("intercomm Reduce_scatter_block: element %d is %d, want %d", i, b[i], w);
	}
	}

	PHASE("intercomm MPI_Ibarrier / Ibcast / Iallreduce");
	MPI_Request rq[3];
	int bc[16], bcr = color == 0 && lrank == 0 ? MPI_ROOT : color == 0 ? MPI_PROC_NULL : 0;
	for (int i = 0; i < 16; i++)
		bc[i] = color == 0 ? i * i : -1;
	v = rank + 1;
	s = 0;
	MPI_CHK(MPI_Ibarrier(inter, &rq[0]));
	MPI_CHK(MPI_Ibcast(bc, 16, MPI_INT, bcr, inter, &rq[1]));
	MPI_CHK(MPI_Iallreduce(&v, &s, 1, MPI_INT, MPI_SUM, inter, &rq[2]));
	MPI_CHK(MPI_Waitall(3, rq, MPI_STATUSES_IGNORE));
	for (int i = 0; i < 16; i++)
		if (bc[i] != i * i)
			FAIL("intercomm Ibcast: element %d is %d", i, bc[i]);
	if (s != want)
		FAIL("intercomm Iallreduce: %d, want %d", s, want);

	PHASE("MPI_Comm_dup of the intercommunicator");
	MPI_Comm d;
	MPI_CHK(MPI_Comm_dup(inter, &d));
	int flag = 0;
	MPI_Comm_test_inter(d, &flag);
	if (!flag)
		FAIL("dup of an intercommunicator is not inter");
	s = 0;
	MPI_CHK(MPI_Allreduce(&v, &s, 1, MPI_INT, MPI_SUM, d));
	if (s != want)
		FAIL("Allreduce on dup'd intercomm: %d, want %d", s, want);
	MPI_CHK(MPI_Comm_free(&d));
	free(a); free(b); free(cnts); free(dsp);
}

static void merge(void)
{
	PHASE("MPI_Intercomm_merge");
	MPI_Comm m;
	MPI_CHK(MPI_Intercomm_merge(inter, color == 1, &m));
	int mr, ms;
	MPI_Comm_rank(m, &mr);
	MPI_Comm_size(m, &ms);
	int nlow = (nprocs + 1) / 2; /* color 0 (low) first */
	int want = color == 0 ? lrank : nlow + lrank;
	if (ms != nprocs || mr != want)
		FAIL("merge: rank %d size %d, want %d %d", mr, ms, want, nprocs);
	int *all = malloc(sizeof(int) * nprocs);
	MPI_CHK(MPI_Allgather(&rank, 1, MPI_INT, all, 1, MPI_INT, m));
	for (int i = 0; i < nprocs; i++) {
		int w = i < nlow ? 2 * i : 2 * (i - nlow) + 1;
		if (all[i] != w)
			FAIL("merged rank %d is world %d, want %d", i, all[i], w);
	}
	free(all);
	MPI_CHK(MPI_Comm_free(&m));
}

static int neighbours_ok(const int *r, int src, int dst)
{
	if (src == dst)
		return (r[0] == src * 10 && r[1] == src * 10 + 1) ||
		       (r[0] == src * 10 + 1 && r[1] == src * 10);
	return r[0] == src * 10 + 1 && r[1] == dst * 10;
}

static void topologies(void)
{
	PHASE("Cartesian ring");
	MPI_Comm ring;
	int dims[1] = {nprocs}, periods[1] = {1};
	MPI_CHK(MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, 0, &ring));
	int cr, src, dst;
	MPI_Comm_rank(ring, &cr);
	MPI_CHK(MPI_Cart_shift(ring, 0, 1, &src, &dst));
	if (src != (cr + nprocs - 1) % nprocs || dst != (cr + 1) % nprocs)
		FAIL("Cart_shift: %d %d", src, dst);
	int got = -1;
	MPI_CHK(MPI_Sendrecv(&cr, 1, MPI_INT, dst, 0, &got, 1, MPI_INT, src, 0, ring, MPI_STATUS_IGNORE));
	if (got != src)
		FAIL("Cart ring sendrecv: %d, want %d", got, src);

	PHASE("MPI_Neighbor_allgather / alltoall / Ineighbor_alltoall");
	/* neighbours of a 1-d periodic Cartesian: (left, right); with two
	 * ranks both are the same process */
	int nb[2] = {-1, -1}, sendv[2], recvv[2];
	MPI_CHK(MPI_Neighbor_allgather(&cr, 1, MPI_INT, nb, 1, MPI_INT, ring));
	if (nb[0] != src || nb[1] != dst)
		FAIL("Neighbor_allgather: %d %d, want %d %d", nb[0], nb[1], src, dst);
	sendv[0] = cr * 10; /* to the left */
	sendv[1] = cr * 10 + 1; /* to the right */
	MPI_CHK(MPI_Neighbor_alltoall(sendv, 1, MPI_INT, recvv, 1, MPI_INT, ring));
	/* from the left neighbour: what it sent right; from the right: left.
	 * With 2 ranks left and right are one process and both messages
	 * carry the same (source, tag): which buffer gets which is not
	 * defined, so only the pair is checked */
	if (!neighbours_ok(recvv, src, dst))
		FAIL("Neighbor_alltoall: %d %d", recvv[0], recvv[1]);
	MPI_Request req;
	recvv[0] = recvv[1] = -1;
	MPI_CHK(MPI_Ineighbor_alltoall(sendv, 1, MPI_INT, recvv, 1, MPI_INT, ring, &req));
	MPI_CHK(MPI_Wait(&req, MPI_STATUS_IGNORE));
	if (!neighbours_ok(recvv, src, dst))
		FAIL("Ineighbor_alltoall: %d %d", recvv[0], recvv[1]);
	MPI_CHK(MPI_Comm_free(&ring));

	PHASE("MPI_Dist_graph_create_adjacent + MPI_Neighbor_alltoallv");
	/* each rank sends to everyone else (a complete graph without self) */
	int deg = nprocs - 1;
	int *nbrs = malloc(sizeof(int) * deg), *sc = malloc(sizeof(int) * deg), *sd = malloc(sizeof(int) * deg);
	int *rcn = malloc(sizeof(int) * deg), *rd = malloc(sizeof(int) * deg);
	int *sb = malloc(sizeof(int) * deg * nprocs), *rb = malloc(sizeof(int) * deg * nprocs);
	int so = 0, ro = 0;
	for (int i = 0, p = 0; p < nprocs; p++) {
		if (p == rank)
			continue;
		nbrs[i] = p;
		sc[i] = (rank + p) % 3; /* zero counts too */
		sd[i] = so;
		for (int j = 0; j < sc[i]; j++)
			sb[so + j] = rank * 100 + p * 10 + j;
		so += sc[i];
		rcn[i] = (p + rank) % 3;
		rd[i] = ro;
		ro += rcn[i];
		i++;
	}
	MPI_Comm g;
/* Open MPI's MPI_UNWEIGHTED is a sentinel pointer gcc takes for an empty array */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpragmas"
#pragma GCC diagnostic ignored "-Wstringop-overread"
	MPI_CHK(MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, deg, nbrs, MPI_UNWEIGHTED, deg, nbrs,
					       MPI_UNWEIGHTED, MPI_INFO_NULL, 0, &g));
#pragma GCC diagnostic pop
	MPI_CHK(MPI_Neighbor_alltoallv(sb, sc, sd, MPI_INT, rb, rcn, rd, MPI_INT, g));
	for (int i = 0; i < deg; i++)
		for (int j = 0; j < rcn[i]; j++)
			if (rb[rd[i] + j] != nbrs[i] * 100 + rank * 10 + j)
				FAIL("Neighbor_alltoallv: from %d element %d", nbrs[i], j);
	MPI_CHK(MPI_Comm_free(&g));
	free(nbrs); free(sc); free(sd); free(rcn); free(rd); free(sb); free(rb);
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	watchdog_start();
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
	if (nprocs < 2)
		FAIL("needs at least 2 ranks");
	dups();
	splits();
	groups();
	make_inter();
	inter_p2p();
	inter_coll();
	merge();
	PHASE("MPI_Comm_free of the intercommunicator");
	MPI_CHK(MPI_Comm_free(&inter));
	MPI_CHK(MPI_Comm_free(&local));
	topologies();
	PHASE("final barrier");
	MPI_CHK(MPI_Barrier(MPI_COMM_WORLD));
	PHASE("MPI_Finalize");
	MPI_Finalize();
	PHASE_DONE();
	if (rank == 0)
		printf("PASS comm\n");
	return 0;
}
