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
 * exchange() and merged_collectives() are in intercomm.h, shared with spawn.c.
 */
#include "intercomm.h"
#include <errno.h>
#include <time.h>
#include <unistd.h>

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
