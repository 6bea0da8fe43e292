/* The exchange over an intercommunicator shared by the dynamic-process
 * programs (spawn.c, connect.c): every local rank sends to and receives
 * from every remote rank at eager and rendezvous sizes, then the
 * intercommunicator is merged and runs collectives. Header-only. */
#ifndef GNIX_MPI_INTERCOMM_H
#define GNIX_MPI_INTERCOMM_H
#include "common.h"

static const size_t sizes[] = {1, 4097, 65543, 1 << 20};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

/* seed of the message from (side, rank) to remote rank `to`, size k */
static unsigned seed_of(int side, int from, int to, int k)
{
	return (unsigned)(side * 100000 + from * 1000 + to * 10 + k);
}

/* Every local rank sends to and receives from every remote rank, each size,
 * all at once (nonblocking), then checks every byte and status. */
static void exchange(MPI_Comm inter, int side)
{
	int rank, rsize;
	MPI_Comm_rank(inter, &rank);
	MPI_Comm_remote_size(inter, &rsize);
	int n = rsize * (int)NSIZES;
	char **sbuf = calloc(n, sizeof(char *)), **rbuf = calloc(n, sizeof(char *));
	MPI_Request *req = calloc(2 * n, sizeof(MPI_Request));
	MPI_Status *st = calloc(2 * n, sizeof(MPI_Status));
	for (int r = 0; r < rsize; r++)
		for (int k = 0; k < (int)NSIZES; k++) {
			int i = r * NSIZES + k;
			sbuf[i] = malloc(sizes[k]);
			rbuf[i] = calloc(1, sizes[k]);
			fill_pattern(sbuf[i], sizes[k], seed_of(side, rank, r, k));
			MPI_CHK(MPI_Irecv(rbuf[i], (int)sizes[k], MPI_BYTE, r, 10 + k, inter, &req[i]));
			MPI_CHK(MPI_Isend(sbuf[i], (int)sizes[k], MPI_BYTE, r, 10 + k, inter, &req[n + i]));
		}
	MPI_CHK(MPI_Waitall(2 * n, req, st));
	for (int r = 0; r < rsize; r++)
		for (int k = 0; k < (int)NSIZES; k++) {
			int i = r * NSIZES + k, cnt;
			MPI_Get_count(&st[i], MPI_BYTE, &cnt);
			if ((size_t)cnt != sizes[k] || st[i].MPI_SOURCE != r || st[i].MPI_TAG != 10 + k)
				FAIL("side %d: from remote %d size %zu: count %d source %d tag %d", side, r,
				     sizes[k], cnt, st[i].MPI_SOURCE, st[i].MPI_TAG);
			long bad = check_pattern(rbuf[i], sizes[k], seed_of(1 - side, r, rank, k));
			if (bad >= 0)
				FAIL("side %d: from remote %d size %zu: mismatch at byte %ld", side, r,
				     sizes[k], bad);
			free(sbuf[i]);
			free(rbuf[i]);
		}
	free(sbuf);
	free(rbuf);
	free(req);
	free(st);
}

/* Merge (low side first), then an allreduce and a broadcast on the result. */
static void merged_collectives(MPI_Comm inter, int side)
{
	int lsize, rsize, lrank;
	MPI_Comm_size(inter, &lsize);
	MPI_Comm_remote_size(inter, &rsize);
	MPI_Comm_rank(inter, &lrank);
	MPI_Comm merged;
	MPI_CHK(MPI_Intercomm_merge(inter, side, &merged));
	int msize, mrank;
	MPI_Comm_size(merged, &msize);
	MPI_Comm_rank(merged, &mrank);
	int want_rank = side ? rsize + lrank : lrank;
	if (msize != lsize + rsize || mrank != want_rank)
		FAIL("side %d: merged size %d rank %d, want %d and %d", side, msize, mrank,
		     lsize + rsize, want_rank);

	enum { N = 4096 };
	long *v = malloc(N * sizeof(long)), *sum = malloc(N * sizeof(long));
	for (int i = 0; i < N; i++)
		v[i] = (long)(mrank + 1) * (i + 1);
	MPI_CHK(MPI_Allreduce(v, sum, N, MPI_LONG, MPI_SUM, merged));
	long ranks = (long)msize * (msize + 1) / 2;
	for (int i = 0; i < N; i++)
		if (sum[i] != ranks * (i + 1))
			FAIL("side %d: allreduce[%d] = %ld, want %ld", side, i, sum[i], ranks * (i + 1));

	size_t blen = 200000;
	char *b = malloc(blen);
	int root = msize - 1; /* a rank of the high side (child, connecting rank) */
	if (mrank == root)
		fill_pattern(b, blen, 4242);
	else
		memset(b, 0, blen);
	MPI_CHK(MPI_Bcast(b, (int)blen, MPI_BYTE, root, merged));
	long bad = check_pattern(b, blen, 4242);
	if (bad >= 0)
		FAIL("side %d: bcast mismatch at byte %ld", side, bad);
	MPI_CHK(MPI_Barrier(merged));
	free(v);
	free(sum);
	free(b);
	MPI_CHK(MPI_Comm_free(&merged));
}
#endif
