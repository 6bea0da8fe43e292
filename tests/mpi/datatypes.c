/*
 * Derived datatypes on the wire, between pairs (rank 2k <-> 2k+1) and in
 * collectives over all ranks.
 *
 *  1. For each type: contiguous, vector, hvector, indexed, hindexed,
 *     indexed_block, hindexed_block, struct (with gaps), resized (a matrix
 *     column, extent one element: sending n of them transposes), subarray
 *     (3-d, C and Fortran order) and a vector of structs; small and large
 *     counts (the large ones cross the rendezvous threshold):
 *       a. derived -> derived: elements the type selects arrive, the gaps
 *          of the receive buffer keep their sentinel;
 *       b. derived -> contiguous (the packed order) and back.
 *  2. A receive type larger than the message: MPI_Get_count is
 *     MPI_UNDEFINED, MPI_Get_elements counts the basic elements received.
 *  3. MPI_Pack / MPI_Unpack with MPI_Pack_size, sent as MPI_PACKED.
 *  4. Absolute addresses: a struct type over three separate allocations
 *     (displacements from MPI_Get_address) sent from and received to
 *     MPI_BOTTOM.
 *  5. MPI_Alltoallw from and to MPI_BOTTOM: per peer an hindexed type whose
 *     displacements are the absolute addresses (from MPI_Get_address) of
 *     the two separate allocations holding that peer's block, all
 *     displacements 0; some peers' counts are zero.
 *     Then MPI_Alltoallw with byte displacements and a different datatype
 *     per peer (MPI_INT, a double vector, MPI_CHAR, zero counts).
 *  6. MPI_Bcast of a large vector type and MPI_Gather of a struct type.
 */
#include "common.h"
#include <stddef.h>

static int rank, nprocs, partner;

/* ---- 1: a registry of types over a double buffer ---- */

struct rec {
	int a;
	double b[3];
	char c;
}; /* gaps after a and after c */

typedef struct {
	const char *name;
	MPI_Datatype type;
	int count;	  /* elements of `type` sent */
	size_t span;	  /* bytes of buffer the elements cover */
} tcase;

static MPI_Datatype struct_type(void)
{
	int bl[3] = {1, 3, 1};
	MPI_Aint d[3] = {offsetof(struct rec, a), offsetof(struct rec, b), offsetof(struct rec, c)};
	MPI_Datatype t[3] = {MPI_INT, MPI_DOUBLE, MPI_CHAR}, st, rs;
	MPI_CHK(MPI_Type_create_struct(3, bl, d, t, &st));
	/* resized to the C struct's size, so arrays of it line up */
	MPI_CHK(MPI_Type_create_resized(st, 0, sizeof(struct rec), &rs));
	MPI_CHK(MPI_Type_free(&st));
	return rs;
}

/* Fills `n` cases; `big` picks element counts that cross 64 KiB. */
static int make_cases(tcase *c, int big)
{
	int n = 0;
	MPI_Datatype t;
	int k = big ? 40000 : 10;

	MPI_CHK(MPI_Type_contiguous(5, MPI_INT, &t));
	c[n++] = (tcase){"contiguous(5,int)", t, k, (size_t)k * 5 * sizeof(int)};

	MPI_CHK(MPI_Type_vector(k, 3, 7, MPI_DOUBLE, &t));
	c[n++] = (tcase){"vector(k,3,7,double)", t, 1, (size_t)(k * 7) * sizeof(double)};

	MPI_CHK(MPI_Type_create_hvector(k, 2, 5 * sizeof(double) + 4, MPI_DOUBLE, &t));
	c[n++] = (tcase){"hvector(k,2,5d+4,double)", t, 1, (size_t)k * (5 * sizeof(double) + 4)};

	{
		int bl[4] = {1, 3, 2, 5}, di[4] = {0, 4, 11, 17}; /* unit: int */
		MPI_CHK(MPI_Type_indexed(4, bl, di, MPI_INT, &t));
		MPI_Datatype r;
		MPI_CHK(MPI_Type_create_resized(t, 0, 24 * sizeof(int), &r));
		MPI_CHK(MPI_Type_free(&t));
		c[n++] = (tcase){"indexed(resized 24 ints)", r, k * 4, (size_t)k * 4 * 24 * sizeof(int)};
	}
	{
		int bl[3] = {2, 1, 4};
		MPI_Aint di[3] = {40, 0, 100}; /* bytes, not monotonic */
		MPI_CHK(MPI_Type_create_hindexed(3, bl, di, MPI_DOUBLE, &t));
		MPI_Datatype r;
		MPI_CHK(MPI_Type_create_resized(t, 0, 160, &r));
		MPI_CHK(MPI_Type_free(&t));
		c[n++] = (tcase){"hindexed(resized 160 B)", r, k * 4, (size_t)k * 4 * 160};
	}
	{
		int di[4] = {1, 5, 6, 12};
		MPI_CHK(MPI_Type_create_indexed_block(4, 2, di, MPI_FLOAT, &t));
		MPI_Datatype r;
		MPI_CHK(MPI_Type_create_resized(t, 0, 16 * sizeof(float), &r));
		MPI_CHK(MPI_Type_free(&t));
		c[n++] = (tcase){"indexed_block(4,2,float)", r, k * 4, (size_t)k * 4 * 16 * sizeof(float)};
	}
	{
		MPI_Aint di[3] = {0, 24, 64};
		MPI_CHK(MPI_Type_create_hindexed_block(3, 1, di, MPI_LONG_LONG, &t));
		MPI_Datatype r;
		MPI_CHK(MPI_Type_create_resized(t, 0, 80, &r));
		MPI_CHK(MPI_Type_free(&t));
		c[n++] = (tcase){"hindexed_block(3,1,long long)", r, k * 4, (size_t)k * 4 * 80};
	}
	t = struct_type();
	c[n++] = (tcase){"struct{int;double[3];char}", t, k * 4, (size_t)k * 4 * sizeof(struct rec)};
	{
		/* one column of a rows x cols matrix of doubles, extent one
		 * double: `cols` of them are the whole matrix, transposed */
		int rows = big ? 300 : 6, cols = big ? 100 : 5;
		MPI_Datatype col;
		MPI_CHK(MPI_Type_vector(rows, 1, cols, MPI_DOUBLE, &col));
		MPI_CHK(MPI_Type_create_resized(col, 0, sizeof(double), &t));
		MPI_CHK(MPI_Type_free(&col));
		c[n++] = (tcase){"resized column (transpose)", t, cols, (size_t)rows * cols * sizeof(double)};
	}
	{
		int s = big ? 40 : 8;
		int sizes[3] = {s, s + 2, s + 4}, sub[3] = {s / 2, s / 2 + 1, s / 2 + 2}, st[3] = {1, 0, 2};
		MPI_CHK(MPI_Type_create_subarray(3, sizes, sub, st, MPI_ORDER_C, MPI_DOUBLE, &t));
		c[n++] = (tcase){"subarray 3-d C order", t, 1, (size_t)s * (s + 2) * (s + 4) * sizeof(double)};
		MPI_CHK(MPI_Type_create_subarray(3, sizes, sub, st, MPI_ORDER_FORTRAN, MPI_INT, &t));
		c[n++] = (tcase){"subarray 3-d Fortran order", t, 1, (size_t)s * (s + 2) * (s + 4) * sizeof(int)};
	}
	{
		MPI_Datatype rec = struct_type();
		MPI_CHK(MPI_Type_vector(k, 2, 3, rec, &t));
		MPI_CHK(MPI_Type_free(&rec));
		c[n++] = (tcase){"vector of structs", t, 1, (size_t)(k * 3) * sizeof(struct rec)};
	}
	for (int i = 0; i < n; i++)
		MPI_CHK(MPI_Type_commit(&c[i].type));
	return n;
}

/*
 * The bytes a type selects, in order, are found by packing; a buffer is
 * checked against a reference by unpacking the received packed bytes into
 * a copy of the sentinel-filled buffer.
 */
static void fill_bytes(unsigned char *b, size_t n, unsigned seed)
{
	fill_pattern(b, n, seed);
}

static void one_case(tcase *c, int idx, int big)
{
	PHASE("datatype %s (%s): derived -> derived", c->name, big ? "large" : "small");
	size_t span = c->span + 64;
	unsigned char *src = malloc(span), *dst = malloc(span), *want = malloc(span);
	int psize = 0;
	MPI_CHK(MPI_Pack_size(c->count, c->type, MPI_COMM_WORLD, &psize));
	unsigned char *packed = malloc((size_t)psize + 1);
	int tag = idx * 2 + big;
	unsigned seed = (unsigned)(tag + 11);

	/* the reference: what dst must look like after a correct receive */
	fill_bytes(src, span, seed);
	memset(want, 0xA5, span);
	int pos = 0;
	MPI_CHK(MPI_Pack(src, c->count, c->type, packed, psize, &pos, MPI_COMM_WORLD));
	int packed_len = pos;
	pos = 0;
	MPI_CHK(MPI_Unpack(packed, packed_len, &pos, want, c->count, c->type, MPI_COMM_WORLD));

	MPI_Status st;
	if (rank < partner) {
		MPI_CHK(MPI_Send(src, c->count, c->type, partner, tag, MPI_COMM_WORLD));
	} else {
		memset(dst, 0xA5, span);
		MPI_CHK(MPI_Recv(dst, c->count, c->type, partner, tag, MPI_COMM_WORLD, &st));
		int cnt = -1;
		MPI_CHK(MPI_Get_count(&st, c->type, &cnt));
		if (cnt != c->count)
			FAIL("%s: MPI_Get_count %d, want %d", c->name, cnt, c->count);
		for (size_t i = 0; i < span; i++)
			if (dst[i] != want[i])
				FAIL("%s derived->derived: byte %zu is %#x, want %#x (%s)", c->name, i,
				     dst[i], want[i], want[i] == 0xA5 ? "a gap" : "data");
	}

	PHASE("datatype %s (%s): derived -> contiguous -> derived", c->name, big ? "large" : "small");
	if (rank < partner) {
		MPI_CHK(MPI_Send(src, c->count, c->type, partner, tag, MPI_COMM_WORLD));
		/* and back: contiguous bytes into the derived layout */
		memset(dst, 0xA5, span);
		MPI_CHK(MPI_Recv(dst, c->count, c->type, partner, tag, MPI_COMM_WORLD, &st));
		for (size_t i = 0; i < span; i++)
			if (dst[i] != want[i])
				FAIL("%s contiguous->derived: byte %zu differs", c->name, i);
	} else {
		unsigned char *flat = malloc((size_t)packed_len + 1);
		MPI_CHK(MPI_Recv(flat, packed_len, MPI_BYTE, partner, tag, MPI_COMM_WORLD, &st));
		int cnt = -1;
		MPI_CHK(MPI_Get_count(&st, MPI_BYTE, &cnt));
		/* packed form equals the type's data in order (homogeneous
		 * system: MPI_Pack is a plain gather) */
		if (cnt != packed_len || memcmp(flat, packed, (size_t)packed_len))
			FAIL("%s derived->contiguous: %d bytes, want %d, or contents differ", c->name,
			     cnt, packed_len);
		MPI_CHK(MPI_Send(flat, packed_len, MPI_BYTE, partner, tag, MPI_COMM_WORLD));
		free(flat);
	}
	free(src);
	free(dst);
	free(want);
	free(packed);
}

/* ---- 2: partial receive ---- */

static void partial_receive(void)
{
	PHASE("MPI_Get_elements of a partial receive");
	MPI_Datatype t;
	MPI_CHK(MPI_Type_vector(4, 2, 3, MPI_DOUBLE, &t)); /* 8 doubles */
	MPI_CHK(MPI_Type_commit(&t));
	double b[3 * 12] = {0};
	if (rank < partner) {
		double s[13];
		for (int i = 0; i < 13; i++)
			s[i] = i + 0.5;
		/* 13 doubles: one whole vector (8) and 5 of the next */
		MPI_CHK(MPI_Send(s, 13, MPI_DOUBLE, partner, 1, MPI_COMM_WORLD));
	} else {
		MPI_Status st;
		int cnt = 0, el = 0;
		MPI_CHK(MPI_Recv(b, 3, t, partner, 1, MPI_COMM_WORLD, &st));
		MPI_CHK(MPI_Get_count(&st, t, &cnt));
		MPI_CHK(MPI_Get_elements(&st, t, &el));
		if (cnt != MPI_UNDEFINED || el != 13)
			FAIL("partial receive: count %d (want MPI_UNDEFINED) elements %d (want 13)", cnt, el);
		/* vector extent is (4-1)*3+2 = 11 doubles */
		static const int where[13] = {0, 1, 3, 4, 6, 7, 9, 10, 11, 12, 14, 15, 17};
		for (int i = 0; i < 13; i++)
			if (b[where[i]] != i + 0.5)
				FAIL("partial receive: element %d at %d is %g", i, where[i], b[where[i]]);
	}
	MPI_CHK(MPI_Type_free(&t));
}

/* ---- 3: pack / unpack ---- */

static void pack_unpack(void)
{
	PHASE("MPI_Pack / MPI_PACKED / MPI_Unpack");
	int ints[5] = {1, -2, 3, -4, 5};
	double dbl[3] = {1.25, -2.5, 1e300};
	char str[7] = "gnix!!";
	int s1, s2, s3;
	MPI_CHK(MPI_Pack_size(5, MPI_INT, MPI_COMM_WORLD, &s1));
	MPI_CHK(MPI_Pack_size(3, MPI_DOUBLE, MPI_COMM_WORLD, &s2));
	MPI_CHK(MPI_Pack_size(7, MPI_CHAR, MPI_COMM_WORLD, &s3));
	int size = s1 + s2 + s3;
	char *buf = malloc((size_t)size);
	if (rank < partner) {
		int pos = 0;
		MPI_CHK(MPI_Pack(ints, 5, MPI_INT, buf, size, &pos, MPI_COMM_WORLD));
		MPI_CHK(MPI_Pack(dbl, 3, MPI_DOUBLE, buf, size, &pos, MPI_COMM_WORLD));
		MPI_CHK(MPI_Pack(str, 7, MPI_CHAR, buf, size, &pos, MPI_COMM_WORLD));
		MPI_CHK(MPI_Send(buf, pos, MPI_PACKED, partner, 2, MPI_COMM_WORLD));
	} else {
		MPI_Status st;
		int pos = 0, got = 0;
		MPI_CHK(MPI_Recv(buf, size, MPI_PACKED, partner, 2, MPI_COMM_WORLD, &st));
		MPI_CHK(MPI_Get_count(&st, MPI_PACKED, &got));
		int ri[5];
		double rd[3];
		char rs[7];
		MPI_CHK(MPI_Unpack(buf, got, &pos, ri, 5, MPI_INT, MPI_COMM_WORLD));
		MPI_CHK(MPI_Unpack(buf, got, &pos, rd, 3, MPI_DOUBLE, MPI_COMM_WORLD));
		MPI_CHK(MPI_Unpack(buf, got, &pos, rs, 7, MPI_CHAR, MPI_COMM_WORLD));
		if (memcmp(ri, ints, sizeof ints) || memcmp(rd, dbl, sizeof dbl) || strcmp(rs, str))
			FAIL("MPI_Unpack: contents differ");
		if (pos != got)
			FAIL("MPI_Unpack consumed %d of %d bytes", pos, got);
	}
	free(buf);
}

/* ---- 4: MPI_BOTTOM point to point ---- */

static MPI_Datatype absolute_type(int *ia, double *da, char *ca, int n)
{
	MPI_Aint addr[3];
	MPI_CHK(MPI_Get_address(ia, &addr[0]));
	MPI_CHK(MPI_Get_address(da, &addr[1]));
	MPI_CHK(MPI_Get_address(ca, &addr[2]));
	int bl[3] = {n, n, n};
	MPI_Datatype t[3] = {MPI_INT, MPI_DOUBLE, MPI_CHAR}, r;
	MPI_CHK(MPI_Type_create_struct(3, bl, addr, t, &r));
	MPI_CHK(MPI_Type_commit(&r));
	return r;
}

static void bottom_p2p(void)
{
	static const int ns[2] = {5, 20000};
	for (int k = 0; k < 2; k++) {
		int n = ns[k];
		PHASE("MPI_BOTTOM with absolute addresses, %d elements each", n);
		int *ia = malloc(sizeof(int) * n);
		double *da = malloc(sizeof(double) * n);
		char *ca = malloc((size_t)n);
		MPI_Datatype t = absolute_type(ia, da, ca, n);
		if (rank < partner) {
			for (int i = 0; i < n; i++) {
				ia[i] = i * 3;
				da[i] = i / 4.0;
				ca[i] = (char)(i * 5);
			}
			MPI_CHK(MPI_Send(MPI_BOTTOM, 1, t, partner, 3, MPI_COMM_WORLD));
		} else {
			memset(ia, 0, sizeof(int) * n);
			memset(da, 0, sizeof(double) * n);
			memset(ca, 0, (size_t)n);
			MPI_CHK(MPI_Recv(MPI_BOTTOM, 1, t, partner, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
			for (int i = 0; i < n; i++)
				if (ia[i] != i * 3 || da[i] != i / 4.0 || ca[i] != (char)(i * 5))
					FAIL("MPI_BOTTOM receive: element %d differs", i);
		}
		MPI_CHK(MPI_Type_free(&t));
		free(ia);
		free(da);
		free(ca);
	}
}

/* ---- 5: alltoallw ---- */

/* elements rank `from` sends to rank `to` (some zero, the others >= 2) */
static int w_count(int from, int to, int big)
{
	if ((from + 2 * to) % 3 == 0)
		return 0;
	return big ? 9000 + from * 7 + to : 2 + from + to;
}
static int w_val(int from, int to, int i) { return from * 1000003 + to * 1009 + i; }

/*
 * Per peer: the block lives in two separate allocations (first and second
 * half), described by an hindexed type of two blocks at their absolute
 * addresses.  (Not one block: Open MPI 4.1.0-4.1.5's pml cm / mtl ofi
 * send a datatype whose layout is contiguous from the user pointer without
 * adding its lower bound, so a one-block absolute type at MPI_BOTTOM is
 * sent from address 0 over every provider: tcp;ofi_rxm segfaults in
 * memcpy.  open-mpi/ompi#11751, fixed in 4.1.6 by 943396e1c6 "pml/cm,
 * mtl/ofi: fix datatype offsetting".)
 */
static MPI_Datatype halves_type(int n, int *lo, int *hi)
{
	int bl[2] = {n / 2, n - n / 2};
	MPI_Aint d[2];
	MPI_CHK(MPI_Get_address(lo, &d[0]));
	MPI_CHK(MPI_Get_address(hi, &d[1]));
	MPI_Datatype t;
	MPI_CHK(MPI_Type_create_hindexed(2, bl, d, MPI_INT, &t));
	MPI_CHK(MPI_Type_commit(&t));
	return t;
}

static void alltoallw_bottom(int big)
{
	PHASE("MPI_Alltoallw MPI_BOTTOM %s", big ? "large" : "small");
	int *sc = malloc(sizeof(int) * nprocs), *rc = malloc(sizeof(int) * nprocs);
	int *zd = calloc((size_t)nprocs, sizeof(int));
	MPI_Datatype *stypes = malloc(sizeof(MPI_Datatype) * nprocs);
	MPI_Datatype *rtypes = malloc(sizeof(MPI_Datatype) * nprocs);
	int **sblk = malloc(sizeof(int *) * nprocs * 2), **rblk = malloc(sizeof(int *) * nprocs * 2);
	for (int p = 0; p < nprocs; p++) {
		int ns = w_count(rank, p, big), nr = w_count(p, rank, big);
		/* separate allocations: only absolute addresses reach them */
		for (int h = 0; h < 2; h++) {
			sblk[2 * p + h] = malloc(sizeof(int) * (ns / 2 + 2));
			rblk[2 * p + h] = malloc(sizeof(int) * (nr / 2 + 2));
		}
		for (int i = 0; i < ns; i++)
			sblk[2 * p + (i >= ns / 2)][i - (i >= ns / 2) * (ns / 2)] = w_val(rank, p, i);
		for (int h = 0; h < 2; h++)
			for (int i = 0; i < nr / 2 + 2; i++)
				rblk[2 * p + h][i] = -1;
		if (ns) {
			stypes[p] = halves_type(ns, sblk[2 * p], sblk[2 * p + 1]);
		} else {
			stypes[p] = MPI_INT; /* a zero count, as applications pass it */
		}
		if (nr) {
			rtypes[p] = halves_type(nr, rblk[2 * p], rblk[2 * p + 1]);
		} else {
			rtypes[p] = MPI_INT;
		}
		sc[p] = ns ? 1 : 0;
		rc[p] = nr ? 1 : 0;
	}
	MPI_CHK(MPI_Alltoallw(MPI_BOTTOM, sc, zd, stypes, MPI_BOTTOM, rc, zd, rtypes, MPI_COMM_WORLD));
	for (int p = 0; p < nprocs; p++) {
		int nr = w_count(p, rank, big), half = nr / 2;
		for (int i = 0; i < nr; i++) {
			int got = rblk[2 * p + (i >= half)][i - (i >= half) * half];
			if (got != w_val(p, rank, i))
				FAIL("Alltoallw MPI_BOTTOM: from %d element %d is %d, want %d", p, i, got,
				     w_val(p, rank, i));
		}
		if (rblk[2 * p][half] != -1 || rblk[2 * p + 1][nr - half] != -1)
			FAIL("Alltoallw MPI_BOTTOM: from %d wrote past a block", p);
		if (w_count(rank, p, big))
			MPI_CHK(MPI_Type_free(&stypes[p]));
		if (nr)
			MPI_CHK(MPI_Type_free(&rtypes[p]));
		for (int h = 0; h < 2; h++) {
			free(sblk[2 * p + h]);
			free(rblk[2 * p + h]);
		}
	}
	free(sc);
	free(rc);
	free(zd);
	free(stypes);
	free(rtypes);
	free(sblk);
	free(rblk);
}

/* Alltoallw with byte displacements and a different type per peer:
 * peer p%3==0: MPI_INT, 1: vector of doubles (every other), 2: MPI_CHAR */
static void alltoallw_mixed(void)
{
	PHASE("MPI_Alltoallw mixed types, byte displacements");
	enum { N = 300 };
	size_t blk = N * 2 * sizeof(double) + 16;
	char *sb = malloc(blk * nprocs), *rb = malloc(blk * nprocs);
	int *sc = malloc(sizeof(int) * nprocs), *rc = malloc(sizeof(int) * nprocs);
	int *sd = malloc(sizeof(int) * nprocs), *rd = malloc(sizeof(int) * nprocs);
	MPI_Datatype *st = malloc(sizeof(MPI_Datatype) * nprocs), *rt = malloc(sizeof(MPI_Datatype) * nprocs);
	MPI_Datatype dv;
	MPI_CHK(MPI_Type_vector(N, 1, 2, MPI_DOUBLE, &dv));
	MPI_CHK(MPI_Type_commit(&dv));
	memset(rb, 0x5A, blk * nprocs);
	for (int p = 0; p < nprocs; p++) {
		/* type by the receiver's rank, so both sides agree */
		int kind_s = p % 3, kind_r = rank % 3;
		sd[p] = (int)(blk * p);
		rd[p] = (int)(blk * p);
		char *s = sb + blk * p;
		int zero_s = (rank + p) % 4 == 3, zero_r = (p + rank) % 4 == 3;
		switch (kind_s) {
		case 0:
			st[p] = MPI_INT;
			sc[p] = zero_s ? 0 : N;
			for (int i = 0; i < N; i++)
				((int *)s)[i] = w_val(rank, p, i);
			break;
		case 1:
			st[p] = dv;
			sc[p] = zero_s ? 0 : 1;
			for (int i = 0; i < 2 * N; i++)
				((double *)s)[i] = i % 2 ? -1.0 : w_val(rank, p, i / 2);
			break;
		default:
			st[p] = MPI_CHAR;
			sc[p] = zero_s ? 0 : N;
			for (int i = 0; i < N; i++)
				s[i] = (char)w_val(rank, p, i);
		}
		switch (kind_r) {
		case 0: rt[p] = MPI_INT; rc[p] = zero_r ? 0 : N; break;
		case 1: rt[p] = MPI_DOUBLE; rc[p] = zero_r ? 0 : N; break; /* contiguous */
		default: rt[p] = MPI_CHAR; rc[p] = zero_r ? 0 : N;
		}
	}
	MPI_CHK(MPI_Alltoallw(sb, sc, sd, st, rb, rc, rd, rt, MPI_COMM_WORLD));
	for (int p = 0; p < nprocs; p++) {
		char *r = rb + blk * p;
		int zero = (p + rank) % 4 == 3;
		for (int i = 0; i < N; i++) {
			int ok;
			switch (rank % 3) {
			case 0: ok = zero ? ((unsigned char)r[0] == 0x5A) : ((int *)r)[i] == w_val(p, rank, i); break;
			case 1: ok = zero ? ((unsigned char)r[0] == 0x5A) : ((double *)r)[i] == w_val(p, rank, i); break;
			default: ok = zero ? ((unsigned char)r[0] == 0x5A) : r[i] == (char)w_val(p, rank, i);
			}
			if (!ok)
				FAIL("Alltoallw mixed: from %d element %d wrong (zero block %d)", p, i, zero);
		}
	}
	MPI_CHK(MPI_Type_free(&dv));
	free(sb); free(rb); free(sc); free(rc); free(sd); free(rd); free(st); free(rt);
}

/* ---- 6: collectives with derived types ---- */

static void coll_derived(void)
{
	PHASE("MPI_Bcast of a large vector type");
	enum { K = 50000 };
	MPI_Datatype v;
	MPI_CHK(MPI_Type_vector(K, 1, 3, MPI_INT, &v));
	MPI_CHK(MPI_Type_commit(&v));
	int *b = malloc(sizeof(int) * 3 * K);
	for (int root = 0; root < nprocs; root++) {
		for (int i = 0; i < 3 * K; i++)
			b[i] = rank == root ? i : -7;
		MPI_CHK(MPI_Bcast(b, 1, v, root, MPI_COMM_WORLD));
		for (int i = 0; i < 3 * K; i++)
			if (b[i] != (i % 3 == 0 || rank == root ? i : -7))
				FAIL("Bcast vector from %d: element %d is %d", root, i, b[i]);
	}
	MPI_CHK(MPI_Type_free(&v));
	free(b);

	PHASE("MPI_Gather of a struct type");
	MPI_Datatype rec = struct_type();
	MPI_CHK(MPI_Type_commit(&rec));
	struct rec mine[3], *all = calloc((size_t)nprocs * 3, sizeof(struct rec));
	for (int i = 0; i < 3; i++)
		mine[i] = (struct rec){rank * 10 + i, {rank + 0.5, i + 0.25, -1.0}, (char)('a' + rank + i)};
	MPI_CHK(MPI_Gather(mine, 3, rec, all, 3, rec, 0, MPI_COMM_WORLD));
	if (rank == 0)
		for (int p = 0; p < nprocs; p++)
			for (int i = 0; i < 3; i++) {
				struct rec *r = &all[p * 3 + i];
				if (r->a != p * 10 + i || r->b[0] != p + 0.5 || r->b[1] != i + 0.25 ||
				    r->b[2] != -1.0 || r->c != (char)('a' + p + i))
					FAIL("Gather struct: rank %d record %d differs", p, i);
			}
	free(all);
	MPI_CHK(MPI_Type_free(&rec));
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	watchdog_start();
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
	if (nprocs < 2)
		FAIL("needs at least 2 ranks");
	partner = rank ^ 1;
	if (partner < nprocs) {
		for (int big = 0; big < 2; big++) {
			tcase cases[16];
			int n = make_cases(cases, big);
			for (int i = 0; i < n; i++) {
				one_case(&cases[i], i, big);
				MPI_CHK(MPI_Type_free(&cases[i].type));
			}
		}
		partial_receive();
		pack_unpack();
		bottom_p2p();
	}
	PHASE("barrier");
	MPI_CHK(MPI_Barrier(MPI_COMM_WORLD));
	alltoallw_bottom(0);
	alltoallw_bottom(1);
	alltoallw_mixed();
	coll_derived();
	PHASE("final barrier");
	MPI_CHK(MPI_Barrier(MPI_COMM_WORLD));
	PHASE("MPI_Finalize");
	MPI_Finalize();
	PHASE_DONE();
	if (rank == 0)
		printf("PASS datatypes\n");
	return 0;
}
