/*
 * MPI_THREAD_MULTIPLE: NT threads per rank communicating at once.
 *
 *  A. Thread t of rank 2k ping-pongs with thread t of rank 2k+1 (tag t):
 *     sizes 0, 8, 4097, 65537, 1 MiB, blocking MPI_Send / MPI_Recv, while
 *     the other threads do the same on their tags.
 *  B. Bursts: each thread posts 40 MPI_Irecv and 40 MPI_Isend (mixed
 *     sizes) to its partner thread and completes them with MPI_Waitall.
 *  C. Wildcard source: on rank 0 every thread receives, with
 *     MPI_ANY_SOURCE and its own tag, one message from every other rank's
 *     matching thread.
 *  D. Collectives: each thread runs MPI_Allreduce and MPI_Bcast on its own
 *     duplicate of MPI_COMM_WORLD, all threads at once.
 *  E. Matched probes: on the higher rank of each pair one thread receives
 *     with MPI_Improbe + MPI_Mrecv (MPI_ANY_SOURCE, MPI_ANY_TAG) on a
 *     dedicated communicator while the other threads run phase A traffic.
 * Skips (printing "SKIP threads: ...") only when MPI_THREAD_MULTIPLE is
 * not granted.  Needs at least 2 ranks.
 */
#include "common.h"
#include <pthread.h>

#define NT 4
static int rank, nprocs, partner;
static MPI_Comm tcomm[NT], probe_comm;

typedef struct {
	int t;
	char err[256];
} targ;

#define TFAIL(a, ...)                                                          \
	do {                                                                   \
		snprintf((a)->err, sizeof (a)->err, __VA_ARGS__);              \
		return NULL;                                                   \
	} while (0)

#define TCHK(a, call)                                                          \
	do {                                                                   \
		int _e = (call);                                               \
		if (_e != MPI_SUCCESS)                                         \
			TFAIL(a, "%s returned %d", #call, _e);                 \
	} while (0)

static const size_t tsizes[] = {0, 8, 4097, 65537, 1 << 20};
#define NTS 5

static unsigned tseed(int from, int t, int k, int it) { return (unsigned)(from * 7919 + t * 101 + k * 13 + it); }

static void *pingpong(void *p)
{
	targ *a = p;
	if (partner >= nprocs)
		return NULL;
	char *buf = malloc(1 << 20);
	for (int it = 0; it < 3; it++)
		for (int k = 0; k < NTS; k++) {
			size_t sz = tsizes[k];
			for (int dir = 0; dir < 2; dir++) {
				int sender = (rank < partner) == (dir == 0);
				if (sender) {
					fill_pattern(buf, sz, tseed(rank, a->t, k, it));
					TCHK(a, MPI_Send(sz ? buf : NULL, (int)sz, MPI_BYTE, partner, a->t,
							 MPI_COMM_WORLD));
				} else {
					MPI_Status st;
					int cnt;
					TCHK(a, MPI_Recv(sz ? buf : NULL, (int)sz, MPI_BYTE, partner, a->t,
							 MPI_COMM_WORLD, &st));
					MPI_Get_count(&st, MPI_BYTE, &cnt);
					if ((size_t)cnt != sz || st.MPI_TAG != a->t)
						TFAIL(a, "thread %d: %zu B message: count %d tag %d", a->t, sz,
						      cnt, st.MPI_TAG);
					long bad = check_pattern(buf, sz, tseed(partner, a->t, k, it));
					if (bad >= 0)
						TFAIL(a, "thread %d: %zu B message: byte %ld differs "
							 "(crossed threads?)", a->t, sz, bad);
				}
			}
		}
	free(buf);
	return NULL;
}

#define NB 40
static size_t bsize(int i) { return i % 4 == 3 ? 65537 : (size_t)(i * 97) % 4200; }

static void *bursts(void *p)
{
	targ *a = p;
	if (partner >= nprocs)
		return NULL;
	int tag = 100 + a->t;
	char *sb = malloc((size_t)NB * 65537), *rb = malloc((size_t)NB * 65537);
	MPI_Request rq[2 * NB];
	for (int i = 0; i < NB; i++)
		TCHK(a, MPI_Irecv(rb + (size_t)i * 65537, (int)bsize(i), MPI_BYTE, partner, tag,
				  MPI_COMM_WORLD, &rq[i]));
	for (int i = 0; i < NB; i++) {
		fill_pattern(sb + (size_t)i * 65537, bsize(i), tseed(rank, a->t, i, 50));
		TCHK(a, MPI_Isend(sb + (size_t)i * 65537, (int)bsize(i), MPI_BYTE, partner, tag,
				  MPI_COMM_WORLD, &rq[NB + i]));
	}
	TCHK(a, MPI_Waitall(2 * NB, rq, MPI_STATUSES_IGNORE));
	for (int i = 0; i < NB; i++)
		if (check_pattern(rb + (size_t)i * 65537, bsize(i), tseed(partner, a->t, i, 50)) >= 0)
			TFAIL(a, "thread %d burst message %d differs", a->t, i);
	free(sb);
	free(rb);
	return NULL;
}

static void *wildcard(void *p)
{
	targ *a = p;
	int tag = 200 + a->t;
	if (rank == 0) {
		unsigned seen = 0;
		for (int i = 1; i < nprocs; i++) {
			long v[2];
			MPI_Status st;
			TCHK(a, MPI_Recv(v, 2, MPI_LONG, MPI_ANY_SOURCE, tag, MPI_COMM_WORLD, &st));
			if (st.MPI_SOURCE < 1 || st.MPI_SOURCE >= nprocs || (seen >> st.MPI_SOURCE & 1) ||
			    v[0] != st.MPI_SOURCE || v[1] != a->t)
				TFAIL(a, "thread %d wildcard: source %d value %ld/%ld", a->t, st.MPI_SOURCE,
				      v[0], v[1]);
			seen |= 1u << st.MPI_SOURCE;
		}
	} else {
		long v[2] = {rank, a->t};
		TCHK(a, MPI_Send(v, 2, MPI_LONG, 0, tag, MPI_COMM_WORLD));
	}
	return NULL;
}

static void *collectives(void *p)
{
	targ *a = p;
	MPI_Comm c = tcomm[a->t];
	for (int it = 0; it < 10; it++) {
		int n = 1000 * (a->t + 1);
		int *v = malloc(sizeof(int) * n), *s = malloc(sizeof(int) * n);
		for (int i = 0; i < n; i++)
			v[i] = rank + i + a->t;
		TCHK(a, MPI_Allreduce(v, s, n, MPI_INT, MPI_SUM, c));
		for (int i = 0; i < n; i++)
			if (s[i] != nprocs * (nprocs - 1) / 2 + nprocs * (i + a->t))
				TFAIL(a, "thread %d Allreduce element %d: %d", a->t, i, s[i]);
		int root = (it + a->t) % nprocs;
		for (int i = 0; i < n; i++)
			v[i] = rank == root ? i * a->t + it : -1;
		TCHK(a, MPI_Bcast(v, n, MPI_INT, root, c));
		for (int i = 0; i < n; i++)
			if (v[i] != i * a->t + it)
				TFAIL(a, "thread %d Bcast element %d", a->t, i);
		free(v);
		free(s);
	}
	return NULL;
}

/* phase E: thread 0 of the higher rank of each pair receives by matched probe */
#define NPROBED 60
static void *mprobe_receiver(void *p)
{
	targ *a = p;
	char *buf = malloc(70000);
	int next = 0;
	while (next < NPROBED) {
		int flag = 0;
		MPI_Message m;
		MPI_Status st;
		TCHK(a, MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, probe_comm, &flag, &m, &st));
		if (!flag)
			continue;
		int cnt;
		MPI_Get_count(&st, MPI_BYTE, &cnt);
		if (st.MPI_SOURCE != partner || st.MPI_TAG != next || (size_t)cnt != bsize(next))
			TFAIL(a, "matched probe: source %d tag %d count %d, want %d %d %zu", st.MPI_SOURCE,
			      st.MPI_TAG, cnt, partner, next, bsize(next));
		TCHK(a, MPI_Mrecv(buf, cnt, MPI_BYTE, &m, &st));
		if (check_pattern(buf, (size_t)cnt, tseed(partner, 9, next, 77)) >= 0)
			TFAIL(a, "matched probe message %d differs", next);
		next++;
	}
	free(buf);
	return NULL;
}

static void *mprobe_sender(void *p)
{
	targ *a = p;
	char *buf = malloc(70000);
	for (int i = 0; i < NPROBED; i++) {
		fill_pattern(buf, bsize(i), tseed(rank, 9, i, 77));
		TCHK(a, MPI_Send(buf, (int)bsize(i), MPI_BYTE, partner, i, probe_comm));
	}
	free(buf);
	return NULL;
}

static void run_threads(const char *name, void *(*fn)(void *), void *(*fn0)(void *))
{
	PHASE("threads: %s", name);
	pthread_t th[NT];
	targ args[NT];
	for (int t = 0; t < NT; t++) {
		args[t].t = t;
		args[t].err[0] = 0;
		if (pthread_create(&th[t], NULL, t == 0 && fn0 ? fn0 : fn, &args[t]))
			FAIL("pthread_create");
	}
	for (int t = 0; t < NT; t++)
		pthread_join(th[t], NULL);
	for (int t = 0; t < NT; t++)
		if (args[t].err[0])
			FAIL("%s: %s", name, args[t].err);
	MPI_CHK(MPI_Barrier(MPI_COMM_WORLD));
}

int main(int argc, char **argv)
{
	int provided = -1;
	MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
	watchdog_start();
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
	if (nprocs < 2)
		FAIL("needs at least 2 ranks");
	if (provided < MPI_THREAD_MULTIPLE) {
		if (rank == 0)
			printf("SKIP threads: MPI_Init_thread granted level %d, not MPI_THREAD_MULTIPLE (%d)\n",
			       provided, MPI_THREAD_MULTIPLE);
		MPI_Finalize();
		return 0;
	}
	partner = rank ^ 1;
	for (int t = 0; t < NT; t++)
		MPI_CHK(MPI_Comm_dup(MPI_COMM_WORLD, &tcomm[t]));
	MPI_CHK(MPI_Comm_dup(MPI_COMM_WORLD, &probe_comm));

	run_threads("A ping-pong per thread", pingpong, NULL);
	run_threads("B bursts", bursts, NULL);
	run_threads("C MPI_ANY_SOURCE per thread", wildcard, NULL);
	run_threads("D collectives per thread", collectives, NULL);
	int has_partner = partner < nprocs;
	run_threads("E matched probes next to ping-pongs", pingpong,
		    !has_partner ? NULL : rank > partner ? mprobe_receiver : mprobe_sender);

	for (int t = 0; t < NT; t++)
		MPI_CHK(MPI_Comm_free(&tcomm[t]));
	MPI_CHK(MPI_Comm_free(&probe_comm));
	PHASE("MPI_Finalize");
	MPI_Finalize();
	PHASE_DONE();
	if (rank == 0)
		printf("PASS threads\n");
	return 0;
}
