/*
 * mpi_exchange: two ranks that do more than a ping-pong, where a
 * transport's acknowledgements decide how long a send takes.
 *
 *   -m sendrecv  both ranks MPI_Sendrecv SIZE bytes with each other,
 *                ITERS times (after 100 untimed): the time a round, as a
 *                halo exchange pays it. Each rank's blocking send waits
 *                for its peer, which is waiting for its own.
 *   -m compute   rank 0 times a blocking MPI_Send of SIZE bytes to rank 1,
 *                which receives it and then computes for 20 ms without
 *                calling MPI; ITERS times, after a barrier each: the
 *                median time of the send (and the longest, which is often
 *                the first). A send completes once its peer's transport
 *                acknowledged it, whatever the peer's application does
 *                next.
 *
 * Usage: mpi_exchange -m sendrecv|compute [-s size] [-i iters]
 * Prints (rank 0): MPI_LAT size=<size> iters=<n> usec=<time> [max=<usec>]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int by_value(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static void compute(double seconds)
{
	double t = MPI_Wtime();
	while (MPI_Wtime() - t < seconds)
		;
}

int main(int argc, char **argv)
{
	int rank, nprocs, size = 65536, iters = 1000;
	const char *mode = "sendrecv";
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "-m"))
			mode = argv[i + 1];
		else if (!strcmp(argv[i], "-s"))
			size = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "-i"))
			iters = atoi(argv[i + 1]);
	}
	int sendrecv = !strcmp(mode, "sendrecv");
	if (nprocs != 2 || size < 1 || iters < 1 || (!sendrecv && strcmp(mode, "compute"))) {
		if (rank == 0)
			fprintf(stderr, "mpi_exchange: 2 ranks, -m sendrecv|compute, -s >= 1, -i >= 1\n");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	char *out = malloc(size), *in = malloc(size);
	memset(out, rank + 1, size);
	int peer = 1 - rank;
	double usec = 0, *sends = calloc(iters, sizeof(double));
	if (sendrecv) {
		for (int i = 0; i < 100 + iters; i++) {
			if (i == 100) {
				MPI_Barrier(MPI_COMM_WORLD);
				usec = MPI_Wtime();
			}
			MPI_Sendrecv(out, size, MPI_CHAR, peer, 1, in, size, MPI_CHAR, peer, 1, MPI_COMM_WORLD,
				     MPI_STATUS_IGNORE);
		}
		usec = (MPI_Wtime() - usec) / iters * 1e6;
	} else {
		for (int i = 0; i < iters; i++) {
			MPI_Barrier(MPI_COMM_WORLD);
			if (rank == 0) {
				double t = MPI_Wtime();
				MPI_Send(out, size, MPI_CHAR, 1, 7, MPI_COMM_WORLD);
				sends[i] = (MPI_Wtime() - t) * 1e6;
			} else {
				MPI_Recv(in, size, MPI_CHAR, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				compute(0.02);
			}
		}
	}
	if (in[0] != peer + 1 && (sendrecv || rank == 1)) {
		fprintf(stderr, "mpi_exchange: rank %d got %d, not %d\n", rank, in[0], peer + 1);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	if (rank == 0 && sendrecv)
		printf("MPI_LAT size=%d iters=%d usec=%.3f\n", size, iters, usec);
	if (rank == 0 && !sendrecv) {
		qsort(sends, iters, sizeof(double), by_value);
		printf("MPI_LAT size=%d iters=%d usec=%.3f max=%.3f\n", size, iters, sends[iters / 2],
		       sends[iters - 1]);
	}
	free(sends);
	free(out);
	free(in);
	MPI_Finalize();
	return 0;
}
