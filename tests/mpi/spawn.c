/*
 * MPI_Comm_spawn: the parent job starts N children of this executable
 * (argument "child"), then over the intercommunicator every parent rank and
 * every child exchange messages both ways (eager and rendezvous sizes,
 * contents checked), the intercommunicator is merged (parents low, children
 * high), the merged communicator runs an allreduce and a broadcast, and
 * both sides disconnect.
 *
 * The children's addresses are unknown to the parent until MPICH inserts
 * them at run time: the first message the parent's root receives from a
 * child comes from an address not in its AV.
 *
 * Usage: spawn [-n children]      (default 2)
 * Prints "PASS spawn" from the parent's rank 0; exits non-zero (MPI_Abort)
 * on any mismatch.
 */
#include "intercomm.h"

int main(int argc, char **argv)
{
	int rank, nprocs, children = 2, is_child = 0;
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "child"))
			is_child = 1;
		else if (!strcmp(argv[i], "-n") && i + 1 < argc)
			children = atoi(argv[++i]);
	}

	MPI_Comm inter;
	if (is_child) {
		MPI_CHK(MPI_Comm_get_parent(&inter));
		if (inter == MPI_COMM_NULL)
			FAIL("started with \"child\" but has no parent");
		int rsize;
		MPI_Comm_remote_size(inter, &rsize);
		if (nprocs < 1 || rsize < 1)
			FAIL("child: %d children, %d parents", nprocs, rsize);
	} else {
		MPI_Comm parent;
		MPI_CHK(MPI_Comm_get_parent(&parent));
		if (parent != MPI_COMM_NULL)
			FAIL("parent job has a parent");
		if (children < 1)
			FAIL("-n %d", children);
		char *child_argv[] = {"child", NULL};
		int *errs = calloc(children, sizeof(int));
		MPI_CHK(MPI_Comm_spawn(argv[0], child_argv, children, MPI_INFO_NULL, 0,
				       MPI_COMM_WORLD, &inter, errs));
		for (int i = 0; i < children; i++)
			if (errs[i] != MPI_SUCCESS)
				FAIL("child %d: spawn error %d", i, errs[i]);
		free(errs);
		int rsize;
		MPI_Comm_remote_size(inter, &rsize);
		if (rsize != children)
			FAIL("spawned %d children, intercommunicator has %d", children, rsize);
	}

	int side = is_child; /* parents low, children high */
	exchange(inter, side);
	merged_collectives(inter, side);
	MPI_CHK(MPI_Comm_disconnect(&inter));
	if (!is_child && rank == 0) {
		printf("PASS spawn (%d parents, %d children)\n", nprocs, children);
		fflush(stdout);
	}
	MPI_Finalize();
	return 0;
}
