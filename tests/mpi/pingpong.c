/*
 * 2-rank ping-pong: sizes 0 B .. 4 MiB, contents verified on every
 * iteration of the verification pass and on the last timed iteration,
 * prints one-way latency per size:
 *     MPI_LAT size=<bytes> iters=<n> usec=<one-way>
 * Usage: pingpong [-q] [-s size,size,...] [-i iters]
 */
#include "common.h"
#include <unistd.h>

int main(int argc, char **argv)
{
	int rank, nprocs, quick = 0, fixed_iters = 0;
	const char *sizes_arg = "0,1,8,64,512,4096,16384,65536,262144,1048576,4194304";
	MPI_Init(&argc, &argv);
	watchdog_start();
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-q"))
			quick = 1;
		else if (!strcmp(argv[i], "-s") && i + 1 < argc)
			sizes_arg = argv[++i];
		else if (!strcmp(argv[i], "-i") && i + 1 < argc)
			fixed_iters = atoi(argv[++i]);
	}
	if (nprocs != 2)
		FAIL("needs exactly 2 ranks, got %d", nprocs);

	size_t sizes[64];
	int n = 0;
	char *dup = strdup(sizes_arg);
	for (char *t = strtok(dup, ","); t && n < 64; t = strtok(NULL, ","))
		sizes[n++] = strtoul(t, NULL, 0);
	free(dup);
	size_t max = 1;
	for (int i = 0; i < n; i++)
		if (sizes[i] > max)
			max = sizes[i];
	char *sbuf = malloc(max), *rbuf = malloc(max);
	int peer = 1 - rank;

	for (int k = 0; k < n; k++) {
		size_t sz = sizes[k];
		PHASE("ping-pong %zu B", sz);
		int iters = fixed_iters ? fixed_iters
			    : sz <= 4096 ? 10000 : (int)((64u << 20) / sz);
		if (iters < 20)
			iters = 20;
		if (quick)
			iters = iters / 20 < 5 ? 5 : iters / 20;
		int warm = iters / 10 < 2 ? 2 : iters / 10;
		/* zero-length messages are sent with a NULL buffer, as MPI
		 * libraries do internally */
		void *s = sz ? sbuf : NULL, *r = sz ? rbuf : NULL;

		/* verification pass: distinct contents each way */
		for (int v = 0; v < 3; v++) {
			unsigned seed = (unsigned)(k * 10 + v);
			if (rank == 0) {
				fill_pattern(sbuf, sz, seed);
				MPI_CHK(MPI_Send(s, (int)sz, MPI_BYTE, peer, 1, MPI_COMM_WORLD));
				memset(rbuf, 0, sz);
				MPI_Status st;
				MPI_CHK(MPI_Recv(r, (int)sz, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &st));
				int cnt;
				MPI_Get_count(&st, MPI_BYTE, &cnt);
				if ((size_t)cnt != sz)
					FAIL("size %zu: got count %d", sz, cnt);
				long bad = check_pattern(rbuf, sz, seed + 1000);
				if (bad >= 0)
					FAIL("size %zu: pong mismatch at %ld", sz, bad);
			} else {
				memset(rbuf, 0, sz);
				MPI_Status st;
				MPI_CHK(MPI_Recv(r, (int)sz, MPI_BYTE, peer, 1, MPI_COMM_WORLD, &st));
				int cnt;
				MPI_Get_count(&st, MPI_BYTE, &cnt);
				if ((size_t)cnt != sz || st.MPI_SOURCE != peer || st.MPI_TAG != 1)
					FAIL("size %zu: bad status count=%d src=%d tag=%d", sz, cnt,
					     st.MPI_SOURCE, st.MPI_TAG);
				long bad = check_pattern(rbuf, sz, seed);
				if (bad >= 0)
					FAIL("size %zu: ping mismatch at %ld", sz, bad);
				fill_pattern(sbuf, sz, seed + 1000);
				MPI_CHK(MPI_Send(s, (int)sz, MPI_BYTE, peer, 2, MPI_COMM_WORLD));
			}
		}

		fill_pattern(sbuf, sz, 77);
		MPI_Barrier(MPI_COMM_WORLD);
		double t0 = 0;
		for (int i = 0; i < iters + warm; i++) {
			if (i == warm)
				t0 = MPI_Wtime();
			if (rank == 0) {
				MPI_CHK(MPI_Send(s, (int)sz, MPI_BYTE, peer, 3, MPI_COMM_WORLD));
				MPI_CHK(MPI_Recv(r, (int)sz, MPI_BYTE, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
			} else {
				MPI_CHK(MPI_Recv(r, (int)sz, MPI_BYTE, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
				MPI_CHK(MPI_Send(s, (int)sz, MPI_BYTE, peer, 3, MPI_COMM_WORLD));
			}
		}
		double dt = MPI_Wtime() - t0;
		long bad = check_pattern(rbuf, sz, 77);
		if (bad >= 0)
			FAIL("size %zu: timed loop mismatch at %ld", sz, bad);
		if (rank == 0) {
			printf("MPI_LAT size=%zu iters=%d usec=%.3f\n", sz, iters,
			       dt * 1e6 / iters / 2);
			fflush(stdout);
		}
	}
	MPI_Barrier(MPI_COMM_WORLD);
	free(sbuf);
	free(rbuf);
	PHASE("MPI_Finalize");
	MPI_Finalize();
	PHASE_DONE();
	if (rank == 0)
		printf("PASS pingpong\n");
	return 0;
}
