/*
 * MPI_Allreduce with verified sums: MPI_INT / MPI_LONG_LONG / MPI_DOUBLE,
 * MPI_SUM / MPI_MAX, several counts (1 .. 1 Mi elements, which crosses every
 * eager/rendezvous threshold), in-place and out-of-place, repeated.
 */
#include "common.h"

int main(int argc, char **argv)
{
	int rank, nprocs;
	MPI_Init(&argc, &argv);
	watchdog_start();
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
	static const int counts[] = {1, 2, 7, 64, 1000, 4096, 65536, 262144, 1 << 20};
	int ncounts = sizeof(counts) / sizeof(counts[0]);
	int max = counts[ncounts - 1];
	int *ia = malloc(sizeof(int) * max), *ib = malloc(sizeof(int) * max);
	long long *la = malloc(sizeof(long long) * max);
	double *da = malloc(sizeof(double) * max), *db = malloc(sizeof(double) * max);
	long long n = nprocs;

	for (int rep = 0; rep < 3; rep++) {
		for (int c = 0; c < ncounts; c++) {
			int cnt = counts[c];
			PHASE("MPI_Allreduce of %d elements, round %d", cnt, rep);
			for (int i = 0; i < cnt; i++) {
				ia[i] = rank + i + rep;
				la[i] = (long long)rank * 1000003LL + i;
				da[i] = (double)(rank + 1) * 0.5 + i;
			}
			MPI_CHK(MPI_Allreduce(ia, ib, cnt, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
			for (int i = 0; i < cnt; i++) {
				long long want = n * (n - 1) / 2 + n * (i + rep);
				if (ib[i] != (int)want)
					FAIL("int sum count %d [%d]: %d != %lld", cnt, i, ib[i], want);
			}
			/* in place */
			MPI_CHK(MPI_Allreduce(MPI_IN_PLACE, la, cnt, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD));
			for (int i = 0; i < cnt; i++) {
				long long want = 1000003LL * (n * (n - 1) / 2) + n * i;
				if (la[i] != want)
					FAIL("ll sum count %d [%d]: %lld != %lld", cnt, i, la[i], want);
			}
			MPI_CHK(MPI_Allreduce(da, db, cnt, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
			for (int i = 0; i < cnt; i++) {
				double want = 0.5 * (double)(n * (n + 1) / 2) + (double)n * i;
				if (db[i] != want)
					FAIL("double sum count %d [%d]: %f != %f", cnt, i, db[i], want);
			}
			MPI_CHK(MPI_Allreduce(ia, ib, cnt, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
			for (int i = 0; i < cnt; i++)
				if (ib[i] != (int)(n - 1 + i + rep))
					FAIL("int max count %d [%d]: %d", cnt, i, ib[i]);
		}
	}
	/* count 0 is legal too */
	MPI_CHK(MPI_Allreduce(ia, ib, 0, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
	MPI_Barrier(MPI_COMM_WORLD);
	PHASE("MPI_Finalize");
	MPI_Finalize();
	PHASE_DONE();
	if (rank == 0)
		printf("PASS allreduce (%d ranks, %d counts)\n", nprocs, ncounts);
	return 0;
}
