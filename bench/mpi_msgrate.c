/*
 * mpi_msgrate: 2-rank message rate, a window of nonblocking sends at a
 * time (the pattern of OSU's osu_mbw_mr): rank 0 posts WINDOW MPI_Isend
 * of SIZE bytes, waits for them, and waits for a 0-byte acknowledgement
 * that rank 1 sends once its WINDOW MPI_Irecv (posted before the
 * acknowledgement of the previous window) have all completed.
 *
 * Usage: mpi_msgrate [-s size] [-w window] [-i windows] [-a 1]
 * Prints: MPI_RATE size=<bytes> window=<n> msgs_per_sec=<rate>
 * With -a 1 every rank prints its own loop's rate too (MPI_RATE_RANK
 * rank=<r> ...): over bench/nullprov.c, where no rank waits for the
 * other, rank 1's is the receiving side's ceiling.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
	int rank, nprocs, size = 1, window = 64, windows = 20000, all = 0;
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "-s"))
			size = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "-w"))
			window = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "-i"))
			windows = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "-a"))
			all = atoi(argv[i + 1]);
	}
	if (nprocs != 2 || window < 1 || window > 1024 || size < 0 || windows < 1) {
		if (rank == 0)
			fprintf(stderr, "mpi_msgrate: 2 ranks, -w 1..1024, -s >= 0, -i >= 1\n");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	char *buf = malloc((size_t)window * (size_t)(size ? size : 1));
	MPI_Request *req = malloc(sizeof *req * (size_t)window);
	int warm = windows / 10 < 10 ? 10 : windows / 10;
	double t0 = 0;
	MPI_Barrier(MPI_COMM_WORLD);
	for (int w = 0; w < warm + windows; w++) {
		if (w == warm)
			t0 = MPI_Wtime();
		for (int k = 0; k < window; k++) {
			char *p = buf + (size_t)k * (size_t)size;
			if (rank == 0)
				MPI_Isend(p, size, MPI_CHAR, 1, 100, MPI_COMM_WORLD, &req[k]);
			else
				MPI_Irecv(p, size, MPI_CHAR, 0, 100, MPI_COMM_WORLD, &req[k]);
		}
		MPI_Waitall(window, req, MPI_STATUSES_IGNORE);
		if (rank == 0)
			MPI_Recv(NULL, 0, MPI_CHAR, 1, 101, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		else
			MPI_Send(NULL, 0, MPI_CHAR, 0, 101, MPI_COMM_WORLD);
	}
	double t = MPI_Wtime() - t0;
	if (all)
		printf("MPI_RATE_RANK rank=%d size=%d window=%d msgs_per_sec=%.0f\n", rank, size,
		       window, (double)windows * window / t);
	if (rank == 0)
		printf("MPI_RATE size=%d window=%d msgs_per_sec=%.0f\n", size, window,
		       (double)windows * window / t);
	free(req);
	free(buf);
	MPI_Finalize();
	return 0;
}
