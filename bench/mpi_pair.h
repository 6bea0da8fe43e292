/*
 * What bench/mpi_hostpair.c and bench/mpi_manypeers.c share: ranks 0 and
 * 1 ping-pong 8-byte messages while the others of the job sleep until
 * rank 0 tells them it is done.
 */
#ifndef GNIX_BENCH_MPI_PAIR_H
#define GNIX_BENCH_MPI_PAIR_H
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* MPI_Init, this rank and the job's size; the iterations `-i N` asks for
 * (default 20 000). */
static int pair_init(int *argc, char ***argv, int *rank, int *nprocs)
{
	int iters = 20000;
	MPI_Init(argc, argv);
	MPI_Comm_rank(MPI_COMM_WORLD, rank);
	MPI_Comm_size(MPI_COMM_WORLD, nprocs);
	for (int i = 1; i + 1 < *argc; i += 2)
		if (!strcmp((*argv)[i], "-i"))
			iters = atoi((*argv)[i + 1]);
	return iters;
}

/* A rank left out of the ping-pong: sleeps, looking every `usec` for
 * rank 0's word that it is done (tag 9), and takes it. */
static void pair_sleep_until_done(useconds_t usec)
{
	char buf[8];
	int flag = 0;
	while (!flag) {
		usleep(usec);
		MPI_Iprobe(0, 9, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
	}
	MPI_Recv(buf, 8, MPI_CHAR, 0, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
}

/* Ranks 0 and 1: `iters` timed round trips of 8 bytes after a tenth as
 * many untimed, each answer checked by rank 0 (`prog` names the program
 * in the message of a wrong one). Rank 0 then tells ranks 2 to
 * `nprocs` - 1 it is done. The one-way time in microseconds. */
static double pair_pingpong(int rank, int nprocs, int iters, const char *prog)
{
	char buf[8] = {0};
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
				fprintf(stderr, "%s: round %d came back as %d\n", prog, i, buf[0]);
				MPI_Abort(MPI_COMM_WORLD, 1);
			}
		} else {
			MPI_Recv(buf, 8, MPI_CHAR, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			buf[0]++;
			MPI_Send(buf, 8, MPI_CHAR, peer, 1, MPI_COMM_WORLD);
		}
	}
	double usec = (MPI_Wtime() - t0) / iters / 2 * 1e6;
	if (rank == 0)
		for (int r = 2; r < nprocs; r++)
			MPI_Send(buf, 8, MPI_CHAR, r, 9, MPI_COMM_WORLD);
	return usec;
}
#endif
