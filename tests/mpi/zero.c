/*
 * Zero-length traffic, as MPI libraries generate it internally:
 *   - MPI_Barrier in a loop
 *   - 0-byte MPI_Send/MPI_Recv, MPI_Isend/MPI_Irecv and MPI_Ssend with NULL
 *     buffers, any-source / any-tag receives of them, status checked
 *   - MPI_Sendrecv of 0 bytes
 *   - MPI_Alltoallw where every block is empty, then one where only some
 *     blocks are empty (contents verified)
 *   - MPI_Bcast / MPI_Allreduce of count 0
 */
#include "common.h"

int main(int argc, char **argv)
{
	int rank, nprocs;
	MPI_Init(&argc, &argv);
	watchdog_start();
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nprocs);

	PHASE("MPI_Barrier x1000");
	for (int i = 0; i < 1000; i++)
		MPI_CHK(MPI_Barrier(MPI_COMM_WORLD));
	PHASE("zero-length point to point");

	int peer = rank ^ 1;
	if (peer < nprocs) {
		for (int i = 0; i < 100; i++) {
			MPI_Status st;
			int cnt = -1;
			if (rank & 1) {
				MPI_CHK(MPI_Send(NULL, 0, MPI_BYTE, peer, i, MPI_COMM_WORLD));
				MPI_CHK(MPI_Recv(NULL, 0, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG,
						 MPI_COMM_WORLD, &st));
			} else {
				MPI_CHK(MPI_Recv(NULL, 0, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG,
						 MPI_COMM_WORLD, &st));
				MPI_CHK(MPI_Send(NULL, 0, MPI_BYTE, peer, i, MPI_COMM_WORLD));
			}
			MPI_Get_count(&st, MPI_BYTE, &cnt);
			if (cnt != 0 || st.MPI_SOURCE != peer || st.MPI_TAG != i)
				FAIL("0-byte recv: count %d src %d tag %d (iter %d)", cnt,
				     st.MPI_SOURCE, st.MPI_TAG, i);

			MPI_Request r[2];
			MPI_CHK(MPI_Irecv(NULL, 0, MPI_BYTE, peer, 1000 + i, MPI_COMM_WORLD, &r[0]));
			MPI_CHK(MPI_Isend(NULL, 0, MPI_BYTE, peer, 1000 + i, MPI_COMM_WORLD, &r[1]));
			MPI_CHK(MPI_Waitall(2, r, MPI_STATUSES_IGNORE));

			if (rank & 1)
				MPI_CHK(MPI_Ssend(NULL, 0, MPI_BYTE, peer, 7, MPI_COMM_WORLD));
			else
				MPI_CHK(MPI_Recv(NULL, 0, MPI_BYTE, peer, 7, MPI_COMM_WORLD,
						 MPI_STATUS_IGNORE));

			MPI_CHK(MPI_Sendrecv(NULL, 0, MPI_BYTE, peer, 9, NULL, 0, MPI_BYTE, peer, 9,
					     MPI_COMM_WORLD, MPI_STATUS_IGNORE));
		}
	}

	/* Alltoallw with all blocks empty */
	int *counts = calloc(nprocs, sizeof(int)), *displs = calloc(nprocs, sizeof(int));
	MPI_Datatype *types = malloc(nprocs * sizeof(MPI_Datatype));
	for (int i = 0; i < nprocs; i++)
		types[i] = MPI_INT;
	/* distinct (never dereferenced) buffers: MPI forbids aliasing sendbuf
	 * and recvbuf, and MPICH's error checking rejects NULL == NULL */
	int dummy_s, dummy_r;
	for (int i = 0; i < 50; i++)
		MPI_CHK(MPI_Alltoallw(&dummy_s, counts, displs, types, &dummy_r, counts, displs,
				      types, MPI_COMM_WORLD));

	/* Alltoallw where only blocks to/from odd-numbered partners (and to
	 * self) carry data: rank r sends (r*100+dst) repeated dst+1 times */
	int *scounts = calloc(nprocs, sizeof(int)), *rcounts = calloc(nprocs, sizeof(int));
	int *sdispls = calloc(nprocs, sizeof(int)), *rdispls = calloc(nprocs, sizeof(int));
	int sbytes = 0, rbytes = 0;
	for (int p = 0; p < nprocs; p++) {
		int s_has = (p % 2 == 1) || p == rank;
		int r_has = (rank % 2 == 1) || p == rank;
		scounts[p] = s_has ? p + 1 : 0;
		rcounts[p] = r_has ? rank + 1 : 0;
		sdispls[p] = sbytes;
		rdispls[p] = rbytes;
		sbytes += scounts[p] * (int)sizeof(int);
		rbytes += rcounts[p] * (int)sizeof(int);
	}
	int *sbuf = malloc(sbytes + sizeof(int)), *rbuf = malloc(rbytes + sizeof(int));
	for (int p = 0; p < nprocs; p++)
		for (int k = 0; k < scounts[p]; k++)
			sbuf[sdispls[p] / sizeof(int) + k] = rank * 100 + p;
	MPI_CHK(MPI_Alltoallw(sbuf, scounts, sdispls, types, rbuf, rcounts, rdispls, types,
			      MPI_COMM_WORLD));
	for (int p = 0; p < nprocs; p++)
		for (int k = 0; k < rcounts[p]; k++)
			if (rbuf[rdispls[p] / sizeof(int) + k] != p * 100 + rank)
				FAIL("alltoallw from %d [%d] = %d", p, k,
				     rbuf[rdispls[p] / sizeof(int) + k]);

	MPI_CHK(MPI_Bcast(NULL, 0, MPI_INT, 0, MPI_COMM_WORLD));
	MPI_CHK(MPI_Allreduce(NULL, NULL, 0, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
	MPI_CHK(MPI_Barrier(MPI_COMM_WORLD));
	PHASE("MPI_Finalize");
	MPI_Finalize();
	PHASE_DONE();
	if (rank == 0)
		printf("PASS zero\n");
	return 0;
}
