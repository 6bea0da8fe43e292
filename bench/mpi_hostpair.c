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
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	int rank, nprocs, iters = 20000;
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
	for (int i = 1; i + 1 < argc; i += 2)
		if (!strcmp(argv[i], "-i"))
			iters = atoi(argv[i + 1]);
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
	char buf[8] = {0};
	if (rank >= 2) {
		int flag = 0;
		while (!flag) {
			MPI_Iprobe(0, 9, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
			if (!flag)
				usleep(1000);
		}
		MPI_Recv(buf, 8, MPI_CHAR, 0, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		MPI_Finalize();
		return 0;
	}
	int peer = 1 - rank;
	double t0 = 0;
	for (int i = -iters / 10; i < iters; i++) {
		if (i == 0)
			t0 = MPI_Wtime();
		if (rank == 0) {
			buf[0] = (char)i;
			MPI_Send(buf, 8, MPI_CHAR, peer, 1, MPI_COMM_WORLD);
			MPI_Recv(buf, 8, MPI_CHAR, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			if (buf[0] != (char)(i + 1)) {
				fprintf(stderr, "mpi_hostpair: round %d came back as %d\n", i, buf[0]);
				MPI_Abort(MPI_COMM_WORLD, 1);
			}
		} else {
			MPI_Recv(buf, 8, MPI_CHAR, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			buf[0]++;
			MPI_Send(buf, 8, MPI_CHAR, peer, 1, MPI_COMM_WORLD);
		}
	}
	double usec = (MPI_Wtime() - t0) / iters / 2 * 1e6;
	if (rank == 0) {
		MPI_Send(buf, 8, MPI_CHAR, 2, 9, MPI_COMM_WORLD);
		MPI_Send(buf, 8, MPI_CHAR, 3, 9, MPI_COMM_WORLD);
		printf("MPI_LAT size=8 iters=%d usec=%.3f\n", iters, usec);
	}
	MPI_Finalize();
	return 0;
}
