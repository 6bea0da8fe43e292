/*
 * mpi_hostpair: the 8-byte ping-pong of two ranks on one host inside a
 * job that spans two hosts. Four ranks, two on each host (ranks 0 and 1
 * on the first, 2 and 3 on the second: mpirun --map-by slot with two
 * slots a host). Every rank first takes part in a few allreduces, so each
 * has talked across the hosts, as the ranks of a real job have; then
 * ranks 0 and 1 ping-pong while 2 and 3 wait asleep (polling every
 * millisecond, so that on two CPUs only the measured pair spins), until
 * rank 0 tells them it is done.
 *
 * What it shows: what a job across hosts pays for its local traffic. The
 * transport's on-host path, and whatever polling the remote side costs
 * each poll (Open MPI's ob1 polls libevent on every progress call once
 * btl tcp has peers).
 *
 * Usage: mpi_hostpair [-i iters]
 * Prints (rank 0): MPI_LAT size=8 iters=<n> usec=<one-way>
 */
#include "mpi_pair.h"

int main(int argc, char **argv)
{
	int rank, nprocs;
	int iters = pair_init(&argc, &argv, &rank, &nprocs);
	if (nprocs != 4 || iters < 1) {
		if (rank == 0)
			fprintf(stderr, "mpi_hostpair: 4 ranks, -i >= 1\n");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	int v = rank, sum = 0;
	for (int i = 0; i < 10; i++)
		MPI_Allreduce(&v, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	if (sum != 6) {
		fprintf(stderr, "mpi_hostpair: allreduce gave %d\n", sum);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	if (rank >= 2) {
		/* Every millisecond, as it always has (its row's history). */
		pair_sleep_until_done(1000);
		MPI_Finalize();
		return 0;
	}
	double usec = pair_pingpong(rank, nprocs, iters, "mpi_hostpair");
	if (rank == 0)
		printf("MPI_LAT size=8 iters=%d usec=%.3f\n", iters, usec);
	MPI_Finalize();
	return 0;
}
