/*
 * Every blocking collective on MPI_COMM_WORLD, results checked element by
 * element:
 *   Barrier; Bcast (every root, 0 B .. 4 MiB + 3); Gather / Gatherv /
 *   Scatter / Scatterv (every root, zero counts, MPI_IN_PLACE at the root);
 *   Allgather / Allgatherv (MPI_IN_PLACE, zero counts, large); Alltoall /
 *   Alltoallv / Alltoallw (MPI_IN_PLACE, zero counts, 64 KiB+ blocks);
 *   Reduce (every root, MPI_IN_PLACE) and Allreduce with MPI_SUM, PROD,
 *   MAX, MIN, LAND, BOR, BXOR, MAXLOC, MINLOC, a user-defined commutative
 *   op and a non-commutative one (2x2 matrix product: rank order matters);
 *   MPI_Reduce_local; Reduce_scatter (zero counts, MPI_IN_PLACE) and
 *   Reduce_scatter_block; Scan / Exscan (MPI_IN_PLACE).
 * Any number of ranks.
 */
#include "common.h"

static int rank, nprocs;

static void barrier_bcast(void)
{
	PHASE("MPI_Barrier x100");
	for (int i = 0; i < 100; i++)
		MPI_CHK(MPI_Barrier(MPI_COMM_WORLD));
	static const size_t sizes[] = {0, 1, 4097, 65537, 131073, 1 << 20, (4 << 20) + 3};
	char *b = malloc(MAX_PROTO_SIZE);
	for (int k = 0; k < 7; k++)
		for (int root = 0; root < nprocs; root++) {
			size_t sz = sizes[k];
			PHASE("MPI_Bcast %zu B from %d", sz, root);
			if (rank == root)
				fill_pattern(b, sz, (unsigned)(k * 16 + root));
			else
				memset(b, 0, sz);
			MPI_CHK(MPI_Bcast(sz ? b : NULL, (int)sz, MPI_BYTE, root, MPI_COMM_WORLD));
			long bad = check_pattern(b, sz, (unsigned)(k * 16 + root));
			if (bad >= 0)
				FAIL("Bcast %zu B from %d: byte %ld", sz, root, bad);
		}
	free(b);
}

static int gv(int r, int i) { return r * 100000 + i; }

static void gather_scatter(void)
{
	int n = 70000; /* 280 KB per rank: rendezvous */
	int *mine = malloc(sizeof(int) * n), *all = malloc(sizeof(int) * n * nprocs);
	int *cnt = malloc(sizeof(int) * nprocs), *dsp = malloc(sizeof(int) * nprocs);
	for (int root = 0; root < nprocs; root++) {
		for (int small = 0; small < 2; small++) {
			int c = small ? 3 : n;
			PHASE("MPI_Gather %d ints to %d", c, root);
			for (int i = 0; i < c; i++)
				mine[i] = gv(rank, i);
			memset(all, 0xff, sizeof(int) * c * nprocs);
			MPI_CHK(MPI_Gather(mine, c, MPI_INT, all, c, MPI_INT, root, MPI_COMM_WORLD));
			if (rank == root)
				for (int r = 0; r < nprocs; r++)
					for (int i = 0; i < c; i++)
						if (all[r * c + i] != gv(r, i))
							FAIL("Gather to %d: rank %d element %d", root, r, i);

			PHASE("MPI_Gather MPI_IN_PLACE %d ints to %d", c, root);
			if (rank == root) {
				for (int i = 0; i < c; i++)
					all[root * c + i] = gv(root, i) + 1;
				MPI_CHK(MPI_Gather(MPI_IN_PLACE, c, MPI_INT, all, c, MPI_INT, root, MPI_COMM_WORLD));
				for (int r = 0; r < nprocs; r++)
					for (int i = 0; i < c; i++)
						if (all[r * c + i] != gv(r, i) + (r == root))
							FAIL("Gather in place to %d: rank %d element %d", root, r, i);
			} else {
				MPI_CHK(MPI_Gather(mine, c, MPI_INT, NULL, 0, MPI_INT, root, MPI_COMM_WORLD));
			}

			PHASE("MPI_Scatter %d ints from %d", c, root);
			if (rank == root)
				for (int r = 0; r < nprocs; r++)
					for (int i = 0; i < c; i++)
						all[r * c + i] = gv(r, i) * 2;
			memset(mine, 0, sizeof(int) * c);
			MPI_CHK(MPI_Scatter(all, c, MPI_INT, rank == root && small ? MPI_IN_PLACE : mine, c,
					    MPI_INT, root, MPI_COMM_WORLD));
			if (!(rank == root && small))
				for (int i = 0; i < c; i++)
					if (mine[i] != gv(rank, i) * 2)
						FAIL("Scatter from %d: element %d", root, i);
		}

		PHASE("MPI_Gatherv / Scatterv with zero counts to %d", root);
		/* rank r contributes (r % 3) * 1000 elements: rank 0 none */
		int tot = 0;
		for (int r = 0; r < nprocs; r++) {
			cnt[r] = (r % 3) * 1000;
			dsp[r] = tot + r; /* gaps between blocks */
			tot += cnt[r] + r;
		}
		int *vbuf = malloc(sizeof(int) * (tot + 1));
		for (int i = 0; i < cnt[rank]; i++)
			mine[i] = gv(rank, i);
		for (int i = 0; i <= tot; i++)
			vbuf[i] = -1;
		MPI_CHK(MPI_Gatherv(mine, cnt[rank], MPI_INT, vbuf, cnt, dsp, MPI_INT, root, MPI_COMM_WORLD));
		if (rank == root)
			for (int r = 0; r < nprocs; r++) {
				for (int i = 0; i < cnt[r]; i++)
					if (vbuf[dsp[r] + i] != gv(r, i))
						FAIL("Gatherv to %d: rank %d element %d", root, r, i);
				if (r > 0 && vbuf[dsp[r] - 1] != -1)
					FAIL("Gatherv wrote into a gap");
			}
		if (rank == root)
			for (int r = 0; r < nprocs; r++)
				for (int i = 0; i < cnt[r]; i++)
					vbuf[dsp[r] + i] = gv(r, i) + 7;
		memset(mine, 0, sizeof(int) * n);
		MPI_CHK(MPI_Scatterv(vbuf, cnt, dsp, MPI_INT, rank == root ? MPI_IN_PLACE : mine, cnt[rank],
				     MPI_INT, root, MPI_COMM_WORLD));
		if (rank != root)
			for (int i = 0; i < cnt[rank]; i++)
				if (mine[i] != gv(rank, i) + 7)
					FAIL("Scatterv from %d: element %d", root, i);
		free(vbuf);
	}
	free(mine);
	free(all);
	free(cnt);
	free(dsp);
}

static void allgather_alltoall(void)
{
	int n = 40000;
	int *mine = malloc(sizeof(int) * n), *all = malloc(sizeof(int) * n * nprocs);
	int *cnt = malloc(sizeof(int) * nprocs), *dsp = malloc(sizeof(int) * nprocs);
	for (int small = 0; small < 2; small++) {
		int c = small ? 2 : n;
		PHASE("MPI_Allgather %d ints", c);
		for (int i = 0; i < c; i++)
			mine[i] = gv(rank, i);
		MPI_CHK(MPI_Allgather(mine, c, MPI_INT, all, c, MPI_INT, MPI_COMM_WORLD));
		for (int r = 0; r < nprocs; r++)
			for (int i = 0; i < c; i++)
				if (all[r * c + i] != gv(r, i))
					FAIL("Allgather: rank %d element %d", r, i);
		PHASE("MPI_Allgather MPI_IN_PLACE %d ints", c);
		for (int r = 0; r < nprocs; r++)
			for (int i = 0; i < c; i++)
				all[r * c + i] = r == rank ? gv(r, i) + 3 : -1;
		MPI_CHK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, all, c, MPI_INT, MPI_COMM_WORLD));
		for (int r = 0; r < nprocs; r++)
			for (int i = 0; i < c; i++)
				if (all[r * c + i] != gv(r, i) + 3)
					FAIL("Allgather in place: rank %d element %d", r, i);
	}
	PHASE("MPI_Allgatherv zero counts, MPI_IN_PLACE");
	int tot = 0;
	for (int r = 0; r < nprocs; r++) {
		cnt[r] = r % 2 ? 0 : 20000 + r;
		dsp[r] = tot;
		tot += cnt[r];
	}
	int *vb = malloc(sizeof(int) * (tot + 1));
	for (int i = 0; i < cnt[rank]; i++)
		mine[i] = gv(rank, i);
	MPI_CHK(MPI_Allgatherv(mine, cnt[rank], MPI_INT, vb, cnt, dsp, MPI_INT, MPI_COMM_WORLD));
	for (int r = 0; r < nprocs; r++)
		for (int i = 0; i < cnt[r]; i++)
			if (vb[dsp[r] + i] != gv(r, i))
				FAIL("Allgatherv: rank %d element %d", r, i);
	for (int i = 0; i < tot; i++)
		vb[i] = -1;
	for (int i = 0; i < cnt[rank]; i++)
		vb[dsp[rank] + i] = gv(rank, i) + 5;
	MPI_CHK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, vb, cnt, dsp, MPI_INT, MPI_COMM_WORLD));
	for (int r = 0; r < nprocs; r++)
		for (int i = 0; i < cnt[r]; i++)
			if (vb[dsp[r] + i] != gv(r, i) + 5)
				FAIL("Allgatherv in place: rank %d element %d", r, i);
	free(vb);

	/* alltoall: block for peer p from rank r holds av(r, p, i) */
#define AV(r, p, i) ((r) * 1000000 + (p) * 20000 + (i))
	for (int small = 0; small < 2; small++) {
		int c = small ? 1 : 17000; /* 68 KB blocks: rendezvous */
		int *s = malloc(sizeof(int) * c * nprocs), *r = malloc(sizeof(int) * c * nprocs);
		PHASE("MPI_Alltoall %d ints per peer", c);
		for (int p = 0; p < nprocs; p++)
			for (int i = 0; i < c; i++)
				s[p * c + i] = AV(rank, p, i);
		MPI_CHK(MPI_Alltoall(s, c, MPI_INT, r, c, MPI_INT, MPI_COMM_WORLD));
		for (int p = 0; p < nprocs; p++)
			for (int i = 0; i < c; i++)
				if (r[p * c + i] != AV(p, rank, i))
					FAIL("Alltoall: from %d element %d", p, i);
		PHASE("MPI_Alltoall MPI_IN_PLACE %d ints per peer", c);
		MPI_CHK(MPI_Alltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, s, c, MPI_INT, MPI_COMM_WORLD));
		for (int p = 0; p < nprocs; p++)
			for (int i = 0; i < c; i++)
				if (s[p * c + i] != AV(p, rank, i))
					FAIL("Alltoall in place: from %d element %d", p, i);
		free(s);
		free(r);
	}
	PHASE("MPI_Alltoallv zero counts, MPI_IN_PLACE");
	{
		/* to peer p: ((rank + p) % 3) * 9000 ints (0, 36 KB, 72 KB) */
		int *sc = malloc(sizeof(int) * nprocs), *sd = malloc(sizeof(int) * nprocs);
		int *rc = malloc(sizeof(int) * nprocs), *rd = malloc(sizeof(int) * nprocs);
		int so = 0, ro = 0;
		for (int p = 0; p < nprocs; p++) {
			sc[p] = ((rank + p) % 3) * 9000;
			sd[p] = so;
			so += sc[p];
			rc[p] = ((p + rank) % 3) * 9000;
			rd[p] = ro;
			ro += rc[p];
		}
		int *s = malloc(sizeof(int) * (so + 1)), *r = malloc(sizeof(int) * (ro + 1));
		for (int p = 0; p < nprocs; p++)
			for (int i = 0; i < sc[p]; i++)
				s[sd[p] + i] = AV(rank, p, i);
		MPI_CHK(MPI_Alltoallv(s, sc, sd, MPI_INT, r, rc, rd, MPI_INT, MPI_COMM_WORLD));
		for (int p = 0; p < nprocs; p++)
			for (int i = 0; i < rc[p]; i++)
				if (r[rd[p] + i] != AV(p, rank, i))
					FAIL("Alltoallv: from %d element %d", p, i);
		/* in place: the counts are symmetric here, as MPI requires */
		for (int p = 0; p < nprocs; p++)
			for (int i = 0; i < rc[p]; i++)
				r[rd[p] + i] = AV(rank, p, i) + 1;
		MPI_CHK(MPI_Alltoallv(MPI_IN_PLACE, NULL, NULL, MPI_DATATYPE_NULL, r, rc, rd, MPI_INT,
				      MPI_COMM_WORLD));
		for (int p = 0; p < nprocs; p++)
			for (int i = 0; i < rc[p]; i++)
				if (r[rd[p] + i] != AV(p, rank, i) + 1)
					FAIL("Alltoallv in place: from %d element %d", p, i);
		PHASE("MPI_Alltoallw zero counts");
		int *sdb = malloc(sizeof(int) * nprocs), *rdb = malloc(sizeof(int) * nprocs);
		MPI_Datatype *ty = malloc(sizeof(MPI_Datatype) * nprocs);
		for (int p = 0; p < nprocs; p++) {
			sdb[p] = sd[p] * (int)sizeof(int);
			rdb[p] = rd[p] * (int)sizeof(int);
			ty[p] = MPI_INT;
		}
		for (int i = 0; i < ro; i++)
			r[i] = -1;
		MPI_CHK(MPI_Alltoallw(s, sc, sdb, ty, r, rc, rdb, ty, MPI_COMM_WORLD));
		for (int p = 0; p < nprocs; p++)
			for (int i = 0; i < rc[p]; i++)
				if (r[rd[p] + i] != AV(p, rank, i))
					FAIL("Alltoallw: from %d element %d", p, i);
		free(sdb); free(rdb); free(ty);
		free(s); free(r); free(sc); free(sd); free(rc); free(rd);
	}
	free(mine);
	free(all);
	free(cnt);
	free(dsp);
}

/* ---- reductions ---- */

static void add_op(void *in, void *inout, int *len, MPI_Datatype *dt)
{
	(void)dt;
	for (int i = 0; i < *len; i++)
		((long long *)inout)[i] += ((long long *)in)[i];
}

/* 2x2 integer matrices mod 1000003: inout = in x inout (MPI: in is the
 * earlier ranks' partial result) */
#define MODP 1000003LL
static void matmul_op(void *in, void *inout, int *len, MPI_Datatype *dt)
{
	(void)dt;
	long long *a = in, *b = inout;
	for (int k = 0; k < *len; k++, a += 4, b += 4) {
		long long c[4] = {(a[0] * b[0] + a[1] * b[2]) % MODP, (a[0] * b[1] + a[1] * b[3]) % MODP,
				  (a[2] * b[0] + a[3] * b[2]) % MODP, (a[2] * b[1] + a[3] * b[3]) % MODP};
		memcpy(b, c, sizeof c);
	}
}

static void mat_of(int r, int k, long long *m)
{
	m[0] = r + 1 + k;
	m[1] = 2 * r + 1;
	m[2] = k + 3;
	m[3] = r * r + 1;
}

static void reductions(void)
{
	int n = 300000; /* 1.2 MB of ints */
	int *a = malloc(sizeof(int) * n), *b = malloc(sizeof(int) * n);
	for (int big = 0; big < 2; big++) {
		int c = big ? n : 5;
		for (int root = 0; root < nprocs; root++) {
			PHASE("MPI_Reduce SUM %d ints to %d", c, root);
			for (int i = 0; i < c; i++)
				a[i] = rank + i;
			MPI_CHK(MPI_Reduce(a, b, c, MPI_INT, MPI_SUM, root, MPI_COMM_WORLD));
			if (rank == root)
				for (int i = 0; i < c; i++)
					if (b[i] != nprocs * (nprocs - 1) / 2 + nprocs * i)
						FAIL("Reduce to %d: element %d is %d", root, i, b[i]);
			PHASE("MPI_Reduce MAX MPI_IN_PLACE %d ints to %d", c, root);
			for (int i = 0; i < c; i++)
				a[i] = (rank * 7 + i) % nprocs;
			MPI_CHK(MPI_Reduce(rank == root ? MPI_IN_PLACE : a, a, c, MPI_INT, MPI_MAX, root,
					   MPI_COMM_WORLD));
			if (rank == root)
				for (int i = 0; i < c; i++)
					if (a[i] != nprocs - 1)
						FAIL("Reduce in place to %d: element %d is %d", root, i, a[i]);
		}
		PHASE("MPI_Allreduce SUM / MPI_IN_PLACE %d ints", c);
		for (int i = 0; i < c; i++)
			a[i] = rank * 2 + i;
		MPI_CHK(MPI_Allreduce(a, b, c, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
		MPI_CHK(MPI_Allreduce(MPI_IN_PLACE, a, c, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
		for (int i = 0; i < c; i++)
			if (b[i] != nprocs * (nprocs - 1) + nprocs * i || a[i] != b[i])
				FAIL("Allreduce: element %d is %d / %d", i, b[i], a[i]);
	}

	PHASE("MPI_Allreduce PROD MAX MIN LAND BOR BXOR");
	{
		long long p = rank + 2, pr = 0, want = 1;
		for (int r = 0; r < nprocs; r++)
			want *= r + 2;
		MPI_CHK(MPI_Allreduce(&p, &pr, 1, MPI_LONG_LONG, MPI_PROD, MPI_COMM_WORLD));
		double d = rank * 1.5, dmax = 0, dmin = 0;
		MPI_CHK(MPI_Allreduce(&d, &dmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
		MPI_CHK(MPI_Allreduce(&d, &dmin, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD));
		int t = rank != 0, land = -1, bor = 0, bx = 0, bits = 1 << rank, x = rank + 1, wx = 0;
		MPI_CHK(MPI_Allreduce(&t, &land, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD));
		MPI_CHK(MPI_Allreduce(&bits, &bor, 1, MPI_INT, MPI_BOR, MPI_COMM_WORLD));
		MPI_CHK(MPI_Allreduce(&x, &bx, 1, MPI_INT, MPI_BXOR, MPI_COMM_WORLD));
		for (int r = 0; r < nprocs; r++)
			wx ^= r + 1;
		if (pr != want || dmax != (nprocs - 1) * 1.5 || dmin != 0 || land != 0 ||
		    bor != (1 << nprocs) - 1 || bx != wx)
			FAIL("Allreduce ops: prod %lld/%lld max %g min %g land %d bor %d bxor %d/%d", pr, want,
			     dmax, dmin, land, bor, bx, wx);
	}
	PHASE("MPI_Allreduce MAXLOC / MINLOC");
	{
		struct { double v; int i; } in[2], out[2];
		/* distinct values for up to 101 ranks */
#define LOCV(r) ((double)((((r) + 1) * 37) % 101))
		in[0].v = LOCV(rank);
		in[0].i = rank;
		in[1].v = 3.0; /* all equal: MINLOC/MAXLOC pick the lowest index */
		in[1].i = rank;
		MPI_CHK(MPI_Allreduce(in, out, 2, MPI_DOUBLE_INT, MPI_MAXLOC, MPI_COMM_WORLD));
		int maxi = 0, mini = 0;
		for (int r = 0; r < nprocs; r++) {
			if (LOCV(r) > LOCV(maxi))
				maxi = r;
			if (LOCV(r) < LOCV(mini))
				mini = r;
		}
		if (out[0].v != LOCV(maxi) || out[0].i != maxi || out[1].v != 3.0 || out[1].i != 0)
			FAIL("MAXLOC: (%g,%d) (%g,%d)", out[0].v, out[0].i, out[1].v, out[1].i);
		MPI_CHK(MPI_Allreduce(in, out, 2, MPI_DOUBLE_INT, MPI_MINLOC, MPI_COMM_WORLD));
		if (out[0].v != LOCV(mini) || out[0].i != mini || out[1].i != 0)
			FAIL("MINLOC: (%g,%d) (%g,%d)", out[0].v, out[0].i, out[1].v, out[1].i);
	}
	PHASE("user-defined ops: commutative and non-commutative");
	{
		MPI_Op add3, matmul;
		MPI_CHK(MPI_Op_create(add_op, 1, &add3));
		MPI_CHK(MPI_Op_create(matmul_op, 0, &matmul));
		long long v[1000], s[1000];
		for (int i = 0; i < 1000; i++)
			v[i] = rank + i;
		MPI_CHK(MPI_Allreduce(v, s, 1000, MPI_LONG_LONG, add3, MPI_COMM_WORLD));
		for (int i = 0; i < 1000; i++)
			if (s[i] != (long long)nprocs * (nprocs - 1) / 2 + (long long)nprocs * i)
				FAIL("user-defined sum: element %d is %lld", i, s[i]);
		/* matrix product in rank order */
		long long m[4 * 3], out[4 * 3], want[4 * 3];
		for (int k = 0; k < 3; k++)
			mat_of(rank, k, m + 4 * k);
		for (int k = 0; k < 3; k++) {
			mat_of(0, k, want + 4 * k);
			for (int r = 1; r < nprocs; r++) {
				long long mr[4];
				mat_of(r, k, mr);
				int one = 1;
				long long tmp[4];
				memcpy(tmp, want + 4 * k, sizeof tmp);
				matmul_op(tmp, mr, &one, NULL); /* mr = tmp x mr */
				memcpy(want + 4 * k, mr, sizeof mr);
			}
		}
		MPI_Datatype mat;
		MPI_CHK(MPI_Type_contiguous(4, MPI_LONG_LONG, &mat));
		MPI_CHK(MPI_Type_commit(&mat));
		MPI_CHK(MPI_Allreduce(m, out, 3, mat, matmul, MPI_COMM_WORLD));
		for (int i = 0; i < 12; i++)
			if (out[i] != want[i])
				FAIL("non-commutative Allreduce: element %d is %lld, want %lld", i, out[i], want[i]);
		for (int root = 0; root < nprocs; root++) {
			memset(out, 0, sizeof out);
			MPI_CHK(MPI_Reduce(m, out, 3, mat, matmul, root, MPI_COMM_WORLD));
			if (rank == root)
				for (int i = 0; i < 12; i++)
					if (out[i] != want[i])
						FAIL("non-commutative Reduce to %d: element %d", root, i);
		}
		PHASE("MPI_Reduce_local");
		long long x[4] = {1, 2, 3, 4}, y[4] = {10, 20, 30, 40};
		MPI_CHK(MPI_Reduce_local(x, y, 4, MPI_LONG_LONG, add3));
		if (y[0] != 11 || y[3] != 44)
			FAIL("Reduce_local: %lld %lld", y[0], y[3]);
		MPI_CHK(MPI_Type_free(&mat));
		MPI_CHK(MPI_Op_free(&add3));
		MPI_CHK(MPI_Op_free(&matmul));
	}

	PHASE("MPI_Reduce_scatter zero counts, MPI_IN_PLACE");
	{
		int *rc = malloc(sizeof(int) * nprocs), tot = 0;
		for (int r = 0; r < nprocs; r++) {
			rc[r] = r % 2 ? 0 : 20000 + r;
			tot += rc[r];
		}
		int *s = malloc(sizeof(int) * (tot + 1)), *r = malloc(sizeof(int) * (rc[rank] + 1));
		for (int i = 0; i < tot; i++)
			s[i] = rank + i;
		MPI_CHK(MPI_Reduce_scatter(s, r, rc, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
		int off = 0;
		for (int q = 0; q < rank; q++)
			off += rc[q];
		for (int i = 0; i < rc[rank]; i++)
			if (r[i] != nprocs * (nprocs - 1) / 2 + nprocs * (off + i))
				FAIL("Reduce_scatter: element %d is %d", i, r[i]);
		for (int i = 0; i < tot; i++)
			s[i] = rank + i;
		MPI_CHK(MPI_Reduce_scatter(MPI_IN_PLACE, s, rc, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
		for (int i = 0; i < rc[rank]; i++)
			if (s[i] != nprocs * (nprocs - 1) / 2 + nprocs * (off + i))
				FAIL("Reduce_scatter in place: element %d is %d", i, s[i]);
		free(s);
		free(r);
		free(rc);
	}
	PHASE("MPI_Reduce_scatter_block");
	{
		int c = 17000;
		int *s = malloc(sizeof(int) * c * nprocs), *r = malloc(sizeof(int) * c);
		for (int i = 0; i < c * nprocs; i++)
			s[i] = rank * 3 + i;
		MPI_CHK(MPI_Reduce_scatter_block(s, r, c, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
		for (int i = 0; i < c; i++)
			if (r[i] != 3 * nprocs * (nprocs - 1) / 2 + nprocs * (rank * c + i))
				FAIL("Reduce_scatter_block: element %d is %d", i, r[i]);
		free(s);
		free(r);
	}
	PHASE("MPI_Scan / MPI_Exscan");
	{
		int c = 30000;
		for (int i = 0; i < c; i++)
			a[i] = rank + 1 + i;
		MPI_CHK(MPI_Scan(a, b, c, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
		for (int i = 0; i < c; i++)
			if (b[i] != (rank + 1) * (rank + 2) / 2 + (rank + 1) * i)
				FAIL("Scan: element %d is %d", i, b[i]);
		MPI_CHK(MPI_Scan(MPI_IN_PLACE, a, c, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
		if (memcmp(a, b, sizeof(int) * c))
			FAIL("Scan in place differs");
		for (int i = 0; i < c; i++)
			a[i] = rank + 1 + i;
		MPI_CHK(MPI_Exscan(a, b, c, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
		if (rank > 0)
			for (int i = 0; i < c; i++)
				if (b[i] != rank * (rank + 1) / 2 + rank * i)
					FAIL("Exscan: element %d is %d", i, b[i]);
		MPI_CHK(MPI_Exscan(MPI_IN_PLACE, a, c, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
		if (rank > 0 && memcmp(a, b, sizeof(int) * c))
			FAIL("Exscan in place differs");
	}
	free(a);
	free(b);
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	watchdog_start();
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
	barrier_bcast();
	gather_scatter();
	allgather_alltoall();
	reductions();
	PHASE("MPI_Finalize");
	MPI_Finalize();
	PHASE_DONE();
	if (rank == 0)
		printf("PASS coll\n");
	return 0;
}
