/*
 * mpi_manypeers: the 8-byte ping-pong of two ranks on different hosts
 * inside a job whose every rank has talked to every other: what a rank
 * pays for its small messages across hosts when it has many remote peers
 * rather than one. Any even number of ranks, placed alternately on two
 * hosts (mpirun --map-by node): ranks 0 and 1 are on different hosts.
 * Every rank first takes part in an MPI_Alltoall (each pair of ranks
 * exchanges a message directly) and a few allreduces; then ranks 0 and 1
 * ping-pong while the others sleep, looking for rank 0's word that it is
 * done ten times a second (MPI_Iprobe), so that on a small machine
 * neither they nor their transport's threads take the measured pair's
 * CPUs, as on hosts with a core a rank.
 *
 * Usage: mpi_manypeers [-i iters]
 * Prints (rank 0): MPI_LAT size=8 iters=<n> usec=<one-way> ranks=<n>
 */
#include "mpi_pair.h"

int main(int argc, char **argv)
{
	int rank, nprocs;
	int iters = pair_init(&argc, &argv, &rank, &nprocs);
	if (nprocs < 2 || nprocs % 2 || iters < 1) {
		if (rank == 0)
			fprintf(stderr, "mpi_manypeers: an even number of ranks, -i >= 1\n");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	int *out = malloc(sizeof(int) * nprocs), *in = malloc(sizeof(int) * nprocs);
	for (int r = 0; r < nprocs; r++)
		out[r] = rank * nprocs + r;
	MPI_Alltoall(out, 1, MPI_INT, in, 1, MPI_INT, MPI_COMM_WORLD);
	for (int r = 0; r < nprocs; r++)
		if (in[r] != r * nprocs + rank) {
			fprintf(stderr, "mpi_manypeers: alltoall gave %d from %d\n", in[r], r);
			MPI_Abort(MPI_COMM_WORLD, 1);
		}
	int v = rank, sum = 0;
	for (int i = 0; i < 10; i++)
		MPI_Allreduce(&v, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	if (sum != nprocs * (nprocs - 1) / 2) {
		fprintf(stderr, "mpi_manypeers: allreduce gave %d\n", sum);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	if (rank >= 2) {
		pair_sleep_until_done(100000);
		free(out);
		free(in);
		MPI_Finalize();
		return 0;
	}
	double usec = pair_pingpong(rank, nprocs, iters, "mpi_manypeers");
	if (rank == 0)
		printf("MPI_LAT size=8 iters=%d usec=%.3f ranks=%d\n", iters, usec, nprocs);
	free(out);
	free(in);
	MPI_Finalize();
	return 0;
}
