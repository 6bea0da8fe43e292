/*
 * One-sided communication (over whatever the MPI library builds it from:
 * Open MPI's osc pt2pt over the pml, MPICH's active messages when the
 * provider has no FI_RMA).
 *
 *  1. Fence epochs on an MPI_Win_create window: MPI_Put to the right
 *     neighbour and MPI_Get from the left (8 B and 280 KB), MPI_Accumulate
 *     (SUM, and REPLACE) into rank 0, MPI_Get_accumulate, MPI_Fetch_and_op
 *     on one counter (the old values seen are a permutation), and
 *     MPI_Compare_and_swap on one slot (exactly one rank wins).
 *  2. PSCW: MPI_Win_post / start / complete / wait with group-restricted
 *     exposure (left neighbour) and access (right neighbour).
 *  3. Passive target on an MPI_Win_allocate window: MPI_Win_lock
 *     exclusive read-modify-write (Get, flush, Put) of a counter at rank 0
 *     by every rank in turn; shared locks with Accumulate; MPI_Win_lock_all
 *     with MPI_Fetch_and_op, MPI_Win_flush / flush_local / flush_all,
 *     MPI_Rput / MPI_Rget; a 1 MiB Put and Get under a lock.
 * Any number of ranks (2 or more).
 *
 * Usage: rma [-max-op BYTES]: move the large Puts and Gets in operations of
 * at most BYTES each (same data, more operations). For MPICH over a
 * provider without FI_RMA: MPICH 5.0.2 then carries a Put or Get of more
 * than one 16 KiB active message through its AM "pipeline", which crashes
 * in MPI_Win_fence (a header read from payload bytes) over libfabric's own
 * tcp and shm providers too once MPICH's RMA is switched off
 * (MPIR_CVAR_CH4_OFI_ENABLE_RMA=0: tcp 6 of 6 runs, shm 5 of 6, for a
 * 24 KB Put and Get in one fence epoch), i.e. an MPICH bug on the path
 * every provider without FI_RMA takes. gnix offers FI_RMA and FI_ATOMIC
 * now, so the harness no longer passes it: MPICH uses fi_write, fi_read
 * and fi_atomic.
 */
#include "common.h"

static int rank, nprocs, left, right;
/* Largest Put or Get issued at once, in ints (see the usage above). */
static int max_op_ints = 1 << 30;

/* MPI_Put / MPI_Get of n ints as operations of at most max_op_ints. */
static void put_ints(const int *src, int n, int target, MPI_Aint disp, MPI_Win win)
{
	for (int at = 0; at < n; at += max_op_ints) {
		int k = n - at < max_op_ints ? n - at : max_op_ints;
		MPI_CHK(MPI_Put(src + at, k, MPI_INT, target, disp + at, k, MPI_INT, win));
	}
}

static void get_ints(int *dst, int n, int target, MPI_Aint disp, MPI_Win win)
{
	for (int at = 0; at < n; at += max_op_ints) {
		int k = n - at < max_op_ints ? n - at : max_op_ints;
		MPI_CHK(MPI_Get(dst + at, k, MPI_INT, target, disp + at, k, MPI_INT, win));
	}
}

#define NBIG 70000 /* ints: 280 KB */

static void fence_epochs(void)
{
	PHASE("MPI_Win_create");
	/* layout: [0, NBIG) put target, [NBIG, 2 NBIG) get source,
	 * [2 NBIG] accumulate slot, +1 counter, +2 CAS slot, +3.. acc array */
	int wn = 2 * NBIG + 16;
	int *base = malloc(sizeof(int) * wn);
	for (int i = 0; i < wn; i++)
		base[i] = -1;
	for (int i = 0; i < NBIG; i++)
		base[NBIG + i] = rank * 1000000 + i;
	base[2 * NBIG] = 0;
	base[2 * NBIG + 1] = 0;
	MPI_Win win;
	MPI_CHK(MPI_Win_create(base, sizeof(int) * wn, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &win));

	for (int big = 0; big < 2; big++) {
		int n = big ? NBIG : 2;
		PHASE("fence: MPI_Put / MPI_Get of %d ints", n);
		int *src = malloc(sizeof(int) * n), *got = malloc(sizeof(int) * n);
		for (int i = 0; i < n; i++)
			src[i] = rank * 7 + i + big;
		MPI_CHK(MPI_Win_fence(0, win));
		put_ints(src, n, right, 0, win);
		get_ints(got, n, left, NBIG, win);
		MPI_CHK(MPI_Win_fence(0, win));
		for (int i = 0; i < n; i++) {
			if (base[i] != left * 7 + i + big)
				FAIL("fence Put from %d: element %d is %d", left, i, base[i]);
			if (got[i] != left * 1000000 + i)
				FAIL("fence Get from %d: element %d is %d", left, i, got[i]);
		}
		free(src);
		free(got);
	}

	PHASE("fence: MPI_Accumulate SUM / REPLACE, MPI_Get_accumulate");
	int one = rank + 1, old = -5;
	int arr[8];
	for (int i = 0; i < 8; i++)
		arr[i] = rank * i;
	MPI_CHK(MPI_Win_fence(0, win));
	MPI_CHK(MPI_Accumulate(&one, 1, MPI_INT, 0, 2 * NBIG, 1, MPI_INT, MPI_SUM, win));
	MPI_CHK(MPI_Accumulate(arr, 8, MPI_INT, 0, 2 * NBIG + 3, 8, MPI_INT, MPI_SUM, win));
	MPI_CHK(MPI_Win_fence(0, win));
	if (rank == 0) {
		if (base[2 * NBIG] != nprocs * (nprocs + 1) / 2)
			FAIL("Accumulate SUM: %d", base[2 * NBIG]);
		for (int i = 0; i < 8; i++)
			if (base[2 * NBIG + 3 + i] != -1 + i * nprocs * (nprocs - 1) / 2)
				FAIL("Accumulate SUM array element %d: %d", i, base[2 * NBIG + 3 + i]);
	}
	/* Get_accumulate with MPI_NO_OP reads; with SUM returns the old value */
	MPI_CHK(MPI_Get_accumulate(&one, 1, MPI_INT, &old, 1, MPI_INT, 0, 2 * NBIG, 1, MPI_INT, MPI_NO_OP,
				   win));
	MPI_CHK(MPI_Win_fence(0, win));
	if (old != nprocs * (nprocs + 1) / 2)
		FAIL("Get_accumulate NO_OP read %d", old);
	if (rank == 1)
		MPI_CHK(MPI_Accumulate(&one, 1, MPI_INT, 0, 2 * NBIG, 1, MPI_INT, MPI_REPLACE, win));
	MPI_CHK(MPI_Win_fence(0, win));
	if (rank == 0 && base[2 * NBIG] != 2)
		FAIL("Accumulate REPLACE: %d", base[2 * NBIG]);

	PHASE("fence: MPI_Fetch_and_op on one counter");
	int inc = 10, prev = -1;
	MPI_CHK(MPI_Fetch_and_op(&inc, &prev, MPI_INT, 0, 2 * NBIG + 1, MPI_SUM, win));
	MPI_CHK(MPI_Win_fence(0, win));
	int *all = malloc(sizeof(int) * nprocs);
	MPI_CHK(MPI_Allgather(&prev, 1, MPI_INT, all, 1, MPI_INT, MPI_COMM_WORLD));
	unsigned long long seen = 0;
	for (int r = 0; r < nprocs; r++) {
		int k = all[r] / 10;
		if (all[r] % 10 || k < 0 || k >= nprocs || (seen >> k & 1))
			FAIL("Fetch_and_op: rank %d saw %d (old values must be 0,10,..)", r, all[r]);
		seen |= 1ull << k;
	}
	if (rank == 0 && base[2 * NBIG + 1] != 10 * nprocs)
		FAIL("Fetch_and_op total %d", base[2 * NBIG + 1]);

	PHASE("fence: MPI_Compare_and_swap, one winner");
	if (rank == 0)
		base[2 * NBIG + 2] = -1;
	MPI_CHK(MPI_Win_fence(0, win));
	int cmp = -1, res = -9;
	MPI_CHK(MPI_Compare_and_swap(&rank, &cmp, &res, MPI_INT, 0, 2 * NBIG + 2, win));
	MPI_CHK(MPI_Win_fence(0, win));
	MPI_CHK(MPI_Allgather(&res, 1, MPI_INT, all, 1, MPI_INT, MPI_COMM_WORLD));
	int winner = -1;
	for (int r = 0; r < nprocs; r++) {
		if (all[r] == -1) {
			if (winner >= 0)
				FAIL("Compare_and_swap: ranks %d and %d both won", winner, r);
			winner = r;
		}
	}
	if (winner < 0)
		FAIL("Compare_and_swap: nobody won");
	for (int r = 0; r < nprocs; r++)
		if (r != winner && all[r] != winner)
			FAIL("Compare_and_swap: rank %d saw %d, want the winner %d", r, all[r], winner);
	if (rank == 0 && base[2 * NBIG + 2] != winner)
		FAIL("Compare_and_swap: slot holds %d, winner %d", base[2 * NBIG + 2], winner);

	PHASE("PSCW");
	MPI_Group world, lg, rg;
	MPI_Comm_group(MPI_COMM_WORLD, &world);
	MPI_Group_incl(world, 1, &left, &lg);
	MPI_Group_incl(world, 1, &right, &rg);
	for (int it = 0; it < 3; it++) {
		int v[4] = {rank, it, rank * it, 42};
		MPI_CHK(MPI_Win_post(lg, 0, win));
		MPI_CHK(MPI_Win_start(rg, 0, win));
		MPI_CHK(MPI_Put(v, 4, MPI_INT, right, 100, 4, MPI_INT, win));
		MPI_CHK(MPI_Win_complete(win));
		MPI_CHK(MPI_Win_wait(win));
		if (base[100] != left || base[101] != it || base[102] != left * it || base[103] != 42)
			FAIL("PSCW iteration %d: %d %d %d %d", it, base[100], base[101], base[102], base[103]);
	}
	MPI_Group_free(&lg);
	MPI_Group_free(&rg);
	MPI_Group_free(&world);
	MPI_CHK(MPI_Win_fence(0, win));
	PHASE("MPI_Win_free (fence window)");
	MPI_CHK(MPI_Win_free(&win));
	free(base);
	free(all);
}

static void passive(void)
{
	PHASE("MPI_Win_allocate");
	int wn = (1 << 18) + 16; /* 1 MiB of ints + slots */
	int *base = NULL;
	MPI_Win win;
	MPI_CHK(MPI_Win_allocate(sizeof(int) * wn, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win));
	MPI_CHK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, rank, 0, win));
	for (int i = 0; i < wn; i++)
		base[i] = 0;
	MPI_CHK(MPI_Win_unlock(rank, win));
	MPI_CHK(MPI_Barrier(MPI_COMM_WORLD));
	int slot = 1 << 18;

	PHASE("exclusive lock: read-modify-write of a counter");
	for (int it = 0; it < 5; it++) {
		int v = -1;
		MPI_CHK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win));
		MPI_CHK(MPI_Get(&v, 1, MPI_INT, 0, slot, 1, MPI_INT, win));
		MPI_CHK(MPI_Win_flush(0, win));
		v += 1;
		MPI_CHK(MPI_Put(&v, 1, MPI_INT, 0, slot, 1, MPI_INT, win));
		MPI_CHK(MPI_Win_unlock(0, win));
	}
	MPI_CHK(MPI_Barrier(MPI_COMM_WORLD));
	if (rank == 0) {
		int v = -1;
		MPI_CHK(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win));
		MPI_CHK(MPI_Get(&v, 1, MPI_INT, 0, slot, 1, MPI_INT, win));
		MPI_CHK(MPI_Win_unlock(0, win));
		if (v != 5 * nprocs)
			FAIL("exclusive-lock counter: %d, want %d (lost updates)", v, 5 * nprocs);
	}

	PHASE("shared locks: MPI_Accumulate");
	int add = rank + 1;
	MPI_CHK(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win));
	MPI_CHK(MPI_Accumulate(&add, 1, MPI_INT, 0, slot + 1, 1, MPI_INT, MPI_SUM, win));
	MPI_CHK(MPI_Win_unlock(0, win));
	MPI_CHK(MPI_Barrier(MPI_COMM_WORLD));
	if (rank == 0) {
		int v = -1;
		MPI_CHK(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win));
		MPI_CHK(MPI_Get(&v, 1, MPI_INT, 0, slot + 1, 1, MPI_INT, win));
		MPI_CHK(MPI_Win_unlock(0, win));
		if (v != nprocs * (nprocs + 1) / 2)
			FAIL("shared-lock Accumulate: %d", v);
	}

	PHASE("lock_all: Fetch_and_op, flush, Rput / Rget");
	MPI_CHK(MPI_Win_lock_all(0, win));
	int one = 1, prev = -1;
	for (int it = 0; it < 10; it++) {
		MPI_CHK(MPI_Fetch_and_op(&one, &prev, MPI_INT, 0, slot + 2, MPI_SUM, win));
		MPI_CHK(MPI_Win_flush(0, win));
		if (prev < 0 || prev >= 10 * nprocs)
			FAIL("lock_all Fetch_and_op: old value %d", prev);
	}
	int mine[3] = {rank, rank * rank, -rank}, back[3] = {0};
	MPI_Request rq;
	/* slot + 4 + 3*rank on the right neighbour: my own cells there */
	MPI_CHK(MPI_Rput(mine, 3, MPI_INT, right, slot + 4 + 3 * (rank % 4), 3, MPI_INT, win, &rq));
	MPI_CHK(MPI_Wait(&rq, MPI_STATUS_IGNORE)); /* local completion only */
	MPI_CHK(MPI_Win_flush(right, win));
	MPI_CHK(MPI_Rget(back, 3, MPI_INT, right, slot + 4 + 3 * (rank % 4), 3, MPI_INT, win, &rq));
	MPI_CHK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
	if (nprocs <= 4 && (back[0] != mine[0] || back[1] != mine[1] || back[2] != mine[2]))
		FAIL("Rput/Rget round trip: %d %d %d", back[0], back[1], back[2]);
	MPI_CHK(MPI_Win_flush_local_all(win));
	MPI_CHK(MPI_Win_flush_all(win));
	MPI_CHK(MPI_Win_unlock_all(win));
	MPI_CHK(MPI_Barrier(MPI_COMM_WORLD));
	if (rank == 0) {
		int v = -1;
		MPI_CHK(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win));
		MPI_CHK(MPI_Get(&v, 1, MPI_INT, 0, slot + 2, 1, MPI_INT, win));
		MPI_CHK(MPI_Win_unlock(0, win));
		if (v != 10 * nprocs)
			FAIL("lock_all Fetch_and_op total %d", v);
	}

	PHASE("1 MiB Put and Get under an exclusive lock");
	int n = 1 << 18;
	int *big = malloc(sizeof(int) * n), *got = malloc(sizeof(int) * n);
	for (int i = 0; i < n; i++)
		big[i] = rank * 3 + i;
	/* ranks take turns on their right neighbour's array */
	MPI_CHK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, right, 0, win));
	put_ints(big, n, right, 0, win);
	MPI_CHK(MPI_Win_flush(right, win));
	get_ints(got, n, right, 0, win);
	MPI_CHK(MPI_Win_unlock(right, win));
	for (int i = 0; i < n; i++)
		if (got[i] != rank * 3 + i)
			FAIL("1 MiB Put/Get round trip: element %d is %d", i, got[i]);
	MPI_CHK(MPI_Barrier(MPI_COMM_WORLD));
	MPI_CHK(MPI_Win_lock(MPI_LOCK_SHARED, rank, 0, win));
	for (int i = 0; i < n; i++)
		if (base[i] != left * 3 + i)
			FAIL("1 MiB Put from %d: element %d is %d", left, i, base[i]);
	MPI_CHK(MPI_Win_unlock(rank, win));
	free(big);
	free(got);
	MPI_CHK(MPI_Barrier(MPI_COMM_WORLD));
	PHASE("MPI_Win_free (allocated window)");
	MPI_CHK(MPI_Win_free(&win));
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	watchdog_start();
	for (int i = 1; i + 1 < argc; i++)
		if (!strcmp(argv[i], "-max-op"))
			max_op_ints = atoi(argv[i + 1]) / (int)sizeof(int);
	if (max_op_ints < 1)
		FAIL("-max-op needs at least %zu bytes", sizeof(int));
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
	if (nprocs < 2)
		FAIL("needs at least 2 ranks");
	left = (rank + nprocs - 1) % nprocs;
	right = (rank + 1) % nprocs;
	fence_epochs();
	passive();
	PHASE("MPI_Finalize");
	MPI_Finalize();
	PHASE_DONE();
	if (rank == 0)
		printf("PASS rma\n");
	return 0;
}
