/*
 * MPI_Open_port / MPI_Comm_accept on one side, MPI_Comm_connect on the
 * other; over the intercommunicator every rank of each side exchanges
 * messages with every rank of the other both ways (eager and rendezvous
 * sizes, contents checked), the intercommunicator is merged (accepting
 * side low), the merged communicator runs an allreduce and a broadcast,
 * and both sides disconnect.
 *
 *   connect                   one job, MPI_COMM_WORLD split in two halves
 *                             (even number of ranks); the port name goes
 *                             over MPI_COMM_WORLD. Both sides already know
 *                             each other's addresses (one AV).
 *   connect accept FILE       two separate jobs: this one opens the port
 *   connect connect FILE      and writes its name to FILE (atomically, by
 *                             rename), the other waits up to 60 s for FILE
 *                             and connects; neither knows the other's
 *                             addresses until the connection brings them.
 *
 * Prints "PASS connect" from rank 0 of the accepting side (and "PASS
 * connect (connecting side)" from the other job's rank 0); exits non-zero
 * (MPI_Abort) on any mismatch.
 *
 * exchange() and merged_collectives() are the same as in spawn.c.
 */
#include "common.h"
#include <errno.h>
#include <time.h>
#include <unistd.h>

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
	int root = msize - 1; /* a connecting rank */
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

/* Waits (bounded) for the accepting job to publish its port name. */
static void read_port(const char *file, char *port)
{
	struct timespec pause = {0, 10 * 1000 * 1000};
	for (int waited = 0; waited < 6000; waited++) {
		FILE *f = fopen(file, "r");
		if (f) {
			int ok = fgets(port, MPI_MAX_PORT_NAME, f) != NULL;
			fclose(f);
			if (!ok)
				FAIL("%s: empty", file);
			port[strcspn(port, "\n")] = 0;
			return;
		}
		if (errno != ENOENT)
			FAIL("%s: %s", file, strerror(errno));
		nanosleep(&pause, NULL);
	}
	FAIL("no port name in %s after 60 s", file);
}

static void write_port(const char *file, const char *port)
{
	char tmp[4096];
	snprintf(tmp, sizeof tmp, "%s.tmp", file);
	FILE *f = fopen(tmp, "w");
	if (!f || fprintf(f, "%s\n", port) < 0 || fclose(f) != 0)
		FAIL("%s: %s", tmp, strerror(errno));
	if (rename(tmp, file) != 0)
		FAIL("rename %s: %s", file, strerror(errno));
}

int main(int argc, char **argv)
{
	int rank, nprocs;
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nprocs);

	const char *mode = argc > 1 ? argv[1] : "split";
	const char *file = argc > 2 ? argv[2] : NULL;
	int two_jobs = strcmp(mode, "split") != 0;
	if (two_jobs && (!file || (strcmp(mode, "accept") && strcmp(mode, "connect"))))
		FAIL("usage: connect [accept FILE | connect FILE]");
	if (!two_jobs && (nprocs < 2 || nprocs % 2))
		FAIL("one-job mode needs an even number of ranks, got %d", nprocs);

	/* side 0 accepts, side 1 connects */
	int side;
	MPI_Comm group;
	if (two_jobs) {
		side = !strcmp(mode, "connect");
		MPI_CHK(MPI_Comm_dup(MPI_COMM_WORLD, &group));
	} else {
		side = rank >= nprocs / 2;
		MPI_CHK(MPI_Comm_split(MPI_COMM_WORLD, side, rank, &group));
	}
	int grank, gsize;
	MPI_Comm_rank(group, &grank);
	MPI_Comm_size(group, &gsize);

	char port[MPI_MAX_PORT_NAME] = "";
	if (side == 0 && grank == 0) {
		MPI_CHK(MPI_Open_port(MPI_INFO_NULL, port));
		if (two_jobs)
			write_port(file, port);
		else
			MPI_CHK(MPI_Send(port, MPI_MAX_PORT_NAME, MPI_CHAR, nprocs / 2, 0, MPI_COMM_WORLD));
	}
	if (side == 1 && grank == 0) {
		if (two_jobs)
			read_port(file, port);
		else
			MPI_CHK(MPI_Recv(port, MPI_MAX_PORT_NAME, MPI_CHAR, 0, 0, MPI_COMM_WORLD,
					 MPI_STATUS_IGNORE));
	}

	MPI_Comm inter;
	if (side == 0)
		MPI_CHK(MPI_Comm_accept(port, MPI_INFO_NULL, 0, group, &inter));
	else
		MPI_CHK(MPI_Comm_connect(port, MPI_INFO_NULL, 0, group, &inter));
	int rsize;
	MPI_Comm_remote_size(inter, &rsize);
	if (!two_jobs && rsize != nprocs / 2)
		FAIL("side %d: remote size %d, want %d", side, rsize, nprocs / 2);

	exchange(inter, side);
	merged_collectives(inter, side);
	MPI_CHK(MPI_Comm_disconnect(&inter));
	if (side == 0 && grank == 0) {
		MPI_CHK(MPI_Close_port(port));
		if (two_jobs)
			unlink(file);
	}
	MPI_CHK(MPI_Comm_free(&group));
	if (rank == 0 && (side == 0 || two_jobs)) {
		printf("PASS connect%s (%s, %d + %d ranks)\n", side ? " (connecting side)" : "",
		       two_jobs ? "two jobs" : "one job split", side ? rsize : gsize,
		       side ? gsize : rsize);
		fflush(stdout);
	}
	MPI_Finalize();
	return 0;
}
