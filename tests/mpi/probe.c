/*
 * Probes, status queries, completion calls and cancellation, between the
 * pairs (rank 2k <-> 2k+1; an odd last rank takes part only in barriers).
 *
 *  1. For every size in proto_sizes the lower rank of a pair sends, and the
 *     higher one finds the message with MPI_Probe(MPI_ANY_SOURCE,
 *     MPI_ANY_TAG) then MPI_Recv, MPI_Iprobe then MPI_Recv, MPI_Mprobe then
 *     MPI_Mrecv, and MPI_Improbe then MPI_Imrecv completed by polling
 *     MPI_Request_get_status (then MPI_Wait).  After each probe and each
 *     receive: source, tag, MPI_Get_count, MPI_Get_elements (MPI_BYTE, and
 *     MPI_INT where the size is not a multiple of 4: MPI_UNDEFINED),
 *     MPI_Test_cancelled (false); every byte checked.  MPI_Mprobe of
 *     MPI_PROC_NULL gives MPI_MESSAGE_NO_PROC.
 *  2. MPI_Testall / Testany / Testsome / Waitall / Waitany / Waitsome and
 *     MPI_Request_get_status over arrays mixing pending receives,
 *     MPI_REQUEST_NULL and an inactive persistent request; the tests must
 *     say "not done" while the sender provably has not sent yet.
 *  3. MPI_Cancel of receives: unmatched (specific and wildcard source/tag,
 *     persistent, which is then restarted and used), and matched (a
 *     synchronous send to it completed): the first must report cancelled,
 *     the second not, with its data intact.  A message sent after a
 *     receive for it was cancelled goes to the next receive.
 *  4. MPI_Cancel of sends (eager and rendezvous sizes; standard,
 *     synchronous and persistent): cancelled before the receiver posted
 *     anything, where either outcome is allowed but the receiver must see
 *     the message exactly when the sender says it was not cancelled; and
 *     after the receiver got the message, where MPI_Test_cancelled must be
 *     false.  (Open MPI's mtl ofi never cancels sends; MPICH may.)
 */
#include "common.h"

static int rank, nprocs, partner;

#define T_GO 1000
#define T_CALLED 1001
#define T_FLAG 1002
#define T_ACK 1003

/* MPI_Test_cancelled is defined only for the status of a completed request,
 * not for a probe's: probe statuses are checked with check_probe_st. */
static void check_st_of(MPI_Status *st, int src, int tag, size_t sz, const char *what,
			int completed)
{
	int cnt = -1, el = -1, c = 0;
	MPI_CHK(MPI_Get_count(st, MPI_BYTE, &cnt));
	MPI_CHK(MPI_Get_elements(st, MPI_BYTE, &el));
	if (completed)
		MPI_CHK(MPI_Test_cancelled(st, &c));
	if (st->MPI_SOURCE != src || st->MPI_TAG != tag || (size_t)cnt != sz || (size_t)el != sz || c)
		FAIL("%s: source %d tag %d count %d elements %d cancelled %d, want %d %d %zu", what,
		     st->MPI_SOURCE, st->MPI_TAG, cnt, el, c, src, tag, sz);
	int icnt = -2;
	MPI_CHK(MPI_Get_count(st, MPI_INT, &icnt));
	int want = sz % sizeof(int) ? MPI_UNDEFINED : (int)(sz / sizeof(int));
	if (icnt != want)
		FAIL("%s: MPI_Get_count(MPI_INT) %d, want %d", what, icnt, want);
}

static void check_st(MPI_Status *st, int src, int tag, size_t sz, const char *what)
{
	check_st_of(st, src, tag, sz, what, 1);
}

static void check_probe_st(MPI_Status *st, int src, int tag, size_t sz, const char *what)
{
	check_st_of(st, src, tag, sz, what, 0);
}

/* ---- 1: probes ---- */

enum { P_PROBE, P_IPROBE, P_MPROBE, P_IMPROBE, NPROBES };
static const char *probe_name[] = {"MPI_Probe", "MPI_Iprobe", "MPI_Mprobe", "MPI_Improbe"};

static void probes(char *buf)
{
	for (int p = 0; p < NPROBES; p++)
		for (int si = 0; si < N_PROTO_SIZES; si++) {
			size_t sz = proto_sizes[si];
			unsigned seed = (unsigned)(p * 100 + si + 1);
			PHASE("%s %zu B", probe_name[p], sz);
			if (rank < partner) {
				fill_pattern(buf, sz, seed);
				MPI_CHK(MPI_Send(sz ? buf : NULL, (int)sz, MPI_BYTE, partner, si,
						 MPI_COMM_WORLD));
				continue;
			}
			char what[96];
			snprintf(what, sizeof what, "%s of %zu B", probe_name[p], sz);
			MPI_Status st;
			MPI_Message msg = MPI_MESSAGE_NULL;
			int flag = 0;
			switch (p) {
			case P_PROBE:
				MPI_CHK(MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
				break;
			case P_IPROBE:
				while (!flag)
					MPI_CHK(MPI_Iprobe(partner, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st));
				break;
			case P_MPROBE:
				MPI_CHK(MPI_Mprobe(MPI_ANY_SOURCE, si, MPI_COMM_WORLD, &msg, &st));
				break;
			case P_IMPROBE:
				while (!flag)
					MPI_CHK(MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag,
							    &msg, &st));
				break;
			}
			check_probe_st(&st, partner, si, sz, what);
			/* the probed size is what the receive is given */
			int cnt;
			MPI_Get_count(&st, MPI_BYTE, &cnt);
			memset(buf, 0xEE, sz);
			void *r = cnt ? buf : NULL;
			MPI_Request req;
			switch (p) {
			case P_PROBE:
			case P_IPROBE:
				MPI_CHK(MPI_Recv(r, cnt, MPI_BYTE, st.MPI_SOURCE, st.MPI_TAG, MPI_COMM_WORLD,
						 &st));
				break;
			case P_MPROBE:
				MPI_CHK(MPI_Mrecv(r, cnt, MPI_BYTE, &msg, &st));
				if (msg != MPI_MESSAGE_NULL)
					FAIL("MPI_Mrecv left the message handle set");
				break;
			case P_IMPROBE:
				MPI_CHK(MPI_Imrecv(r, cnt, MPI_BYTE, &msg, &req));
				flag = 0;
				while (!flag)
					MPI_CHK(MPI_Request_get_status(req, &flag, &st));
				check_st(&st, partner, si, sz, "MPI_Request_get_status of MPI_Imrecv");
				MPI_CHK(MPI_Wait(&req, &st));
				break;
			}
			check_st(&st, partner, si, sz, what);
			long bad = check_pattern(buf, sz, seed);
			if (bad >= 0)
				FAIL("%s: byte %ld differs", what, bad);
		}

	PHASE("MPI_Mprobe(MPI_PROC_NULL)");
	MPI_Message msg;
	MPI_Status st;
	MPI_CHK(MPI_Mprobe(MPI_PROC_NULL, 0, MPI_COMM_WORLD, &msg, &st));
	if (msg != MPI_MESSAGE_NO_PROC || st.MPI_SOURCE != MPI_PROC_NULL)
		FAIL("MPI_Mprobe(MPI_PROC_NULL): message %s, source %d",
		     msg == MPI_MESSAGE_NO_PROC ? "NO_PROC" : "other", st.MPI_SOURCE);
	int c = 0;
	MPI_CHK(MPI_Mrecv(&c, 1, MPI_INT, &msg, &st));
	if (st.MPI_SOURCE != MPI_PROC_NULL)
		FAIL("MPI_Mrecv(MPI_MESSAGE_NO_PROC): source %d", st.MPI_SOURCE);
}

/* ---- 2: completion calls ---- */

#define NC 8 /* receives per round; slot NC is MPI_REQUEST_NULL, NC+1 inactive */
static int val(int round, int i) { return round * 1000 + i * 7 + 3; }

static void completions(void)
{
	static const char *how[] = {"MPI_Testall", "MPI_Testany", "MPI_Testsome",
				    "MPI_Waitall", "MPI_Waitany", "MPI_Waitsome"};
	for (int round = 0; round < 6; round++) {
		PHASE("%s", how[round]);
		if (rank < partner) {
			MPI_CHK(MPI_Recv(NULL, 0, MPI_BYTE, partner, T_GO, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
			/* sizes alternate eager / rendezvous */
			for (int i = NC - 1; i >= 0; i--) {
				size_t n = i % 2 ? 70000 : 1;
				int *b = malloc(n * sizeof(int));
				for (size_t j = 0; j < n; j++)
					b[j] = val(round, i) + (int)j;
				MPI_CHK(MPI_Send(b, (int)n, MPI_INT, partner, i, MPI_COMM_WORLD));
				free(b);
			}
			continue;
		}
		MPI_Request reqs[NC + 2];
		MPI_Status sts[NC + 2];
		int *bufs[NC];
		for (int i = 0; i < NC; i++) {
			size_t n = i % 2 ? 70000 : 1;
			bufs[i] = malloc(n * sizeof(int));
			MPI_CHK(MPI_Irecv(bufs[i], (int)n, MPI_INT, partner, i, MPI_COMM_WORLD, &reqs[i]));
		}
		reqs[NC] = MPI_REQUEST_NULL;
		int dummy;
		MPI_CHK(MPI_Recv_init(&dummy, 1, MPI_INT, partner, 999, MPI_COMM_WORLD, &reqs[NC + 1]));
		/* nothing was sent yet: nothing may be complete */
		int flag = 1, idx = -5, outc = -5, idxs[NC + 2];
		MPI_CHK(MPI_Testall(NC + 2, reqs, &flag, sts));
		if (flag)
			FAIL("MPI_Testall says done before anything was sent");
		MPI_CHK(MPI_Testany(NC, reqs, &idx, &flag, sts));
		if (flag)
			FAIL("MPI_Testany says request %d done before anything was sent", idx);
		MPI_CHK(MPI_Testsome(NC, reqs, &outc, idxs, sts));
		if (outc != 0)
			FAIL("MPI_Testsome: %d done before anything was sent", outc);
		MPI_CHK(MPI_Request_get_status(reqs[0], &flag, &sts[0]));
		if (flag)
			FAIL("MPI_Request_get_status says done before anything was sent");
		MPI_CHK(MPI_Send(NULL, 0, MPI_BYTE, partner, T_GO, MPI_COMM_WORLD));

		int done[NC] = {0}, ndone = 0;
		MPI_Status one;
		switch (round) {
		case 0:
			for (flag = 0; !flag;)
				MPI_CHK(MPI_Testall(NC + 2, reqs, &flag, sts));
			for (int i = 0; i < NC; i++)
				done[i] = 1;
			ndone = NC;
			break;
		case 1:
			while (ndone < NC) {
				MPI_CHK(MPI_Testany(NC + 2, reqs, &idx, &flag, &one));
				if (flag && idx != MPI_UNDEFINED) {
					if (idx < 0 || idx >= NC || done[idx])
						FAIL("MPI_Testany: index %d", idx);
					done[idx] = 1;
					sts[idx] = one;
					ndone++;
				}
			}
			MPI_CHK(MPI_Testany(NC + 2, reqs, &idx, &flag, &one));
			if (!flag || idx != MPI_UNDEFINED)
				FAIL("MPI_Testany with nothing active: flag %d index %d", flag, idx);
			break;
		case 2:
		case 5:
			while (ndone < NC) {
				MPI_Status tmp[NC + 2];
				if (round == 2)
					MPI_CHK(MPI_Testsome(NC + 2, reqs, &outc, idxs, tmp));
				else
					MPI_CHK(MPI_Waitsome(NC + 2, reqs, &outc, idxs, tmp));
				if (outc == MPI_UNDEFINED)
					FAIL("%s: MPI_UNDEFINED with %d active", how[round], NC - ndone);
				for (int j = 0; j < outc; j++) {
					if (idxs[j] < 0 || idxs[j] >= NC || done[idxs[j]])
						FAIL("%s: index %d", how[round], idxs[j]);
					done[idxs[j]] = 1;
					sts[idxs[j]] = tmp[j];
					ndone++;
				}
			}
			MPI_CHK(MPI_Waitsome(NC + 2, reqs, &outc, idxs, sts + NC));
			if (outc != MPI_UNDEFINED)
				FAIL("MPI_Waitsome with nothing active: %d", outc);
			break;
		case 3:
			/* one request's status first, without freeing it */
			for (flag = 0; !flag;)
				MPI_CHK(MPI_Request_get_status(reqs[3], &flag, &one));
			if (reqs[3] == MPI_REQUEST_NULL)
				FAIL("MPI_Request_get_status freed the request");
			MPI_CHK(MPI_Waitall(NC + 2, reqs, sts));
			ndone = NC;
			break;
		case 4:
			while (ndone < NC) {
				MPI_CHK(MPI_Waitany(NC + 2, reqs, &idx, &one));
				if (idx < 0 || idx >= NC || done[idx])
					FAIL("MPI_Waitany: index %d", idx);
				done[idx] = 1;
				sts[idx] = one;
				ndone++;
			}
			MPI_CHK(MPI_Waitany(NC + 2, reqs, &idx, &one));
			if (idx != MPI_UNDEFINED)
				FAIL("MPI_Waitany with nothing active: index %d", idx);
			break;
		}
		for (int i = 0; i < NC; i++) {
			size_t n = i % 2 ? 70000 : 1;
			if (reqs[i] != MPI_REQUEST_NULL)
				FAIL("%s: request %d not freed", how[round], i);
			char what[64];
			snprintf(what, sizeof what, "%s request %d", how[round], i);
			check_st(&sts[i], partner, i, n * sizeof(int), what);
			for (size_t j = 0; j < n; j++)
				if (bufs[i][j] != val(round, i) + (int)j)
					FAIL("%s: request %d element %zu differs", how[round], i, j);
			free(bufs[i]);
		}
		if (reqs[NC + 1] == MPI_REQUEST_NULL)
			FAIL("%s freed an inactive persistent request", how[round]);
		MPI_CHK(MPI_Request_free(&reqs[NC + 1]));
	}
	/* MPI_Test of MPI_REQUEST_NULL and MPI_Wait of an inactive persistent
	 * request: done at once, empty status */
	PHASE("MPI_Test(MPI_REQUEST_NULL), MPI_Wait(inactive)");
	MPI_Request r = MPI_REQUEST_NULL;
	MPI_Status st;
	int flag = 0;
	MPI_CHK(MPI_Test(&r, &flag, &st));
	if (!flag || st.MPI_SOURCE != MPI_ANY_SOURCE || st.MPI_TAG != MPI_ANY_TAG)
		FAIL("MPI_Test(MPI_REQUEST_NULL): flag %d source %d tag %d", flag, st.MPI_SOURCE,
		     st.MPI_TAG);
	int x;
	MPI_CHK(MPI_Recv_init(&x, 1, MPI_INT, partner, 5, MPI_COMM_WORLD, &r));
	MPI_CHK(MPI_Wait(&r, &st));
	if (r == MPI_REQUEST_NULL || st.MPI_SOURCE != MPI_ANY_SOURCE)
		FAIL("MPI_Wait(inactive persistent): request freed or source %d", st.MPI_SOURCE);
	MPI_CHK(MPI_Request_free(&r));
}

/* ---- 3: cancelling receives ---- */

static void cancel_recv_unmatched(int src, int tag, size_t sz, const char *what)
{
	PHASE("cancel unmatched receive: %s", what);
	char *b = malloc(sz ? sz : 1);
	MPI_Request req;
	MPI_Status st;
	MPI_CHK(MPI_Irecv(b, (int)sz, MPI_BYTE, src, tag, MPI_COMM_WORLD, &req));
	MPI_CHK(MPI_Cancel(&req));
	MPI_CHK(MPI_Wait(&req, &st));
	int c = 0;
	MPI_CHK(MPI_Test_cancelled(&st, &c));
	if (!c)
		FAIL("cancel of an unmatched receive (%s): not cancelled", what);
	free(b);
}

static void cancel_receives(void)
{
	/* nothing is in flight here (barrier before), so wildcards match nothing */
	if (rank >= partner) {
		cancel_recv_unmatched(partner, 77, 8, "source, tag, 8 B");
		cancel_recv_unmatched(partner, 78, 1 << 20, "source, tag, 1 MiB");
		cancel_recv_unmatched(MPI_ANY_SOURCE, 79, 100, "MPI_ANY_SOURCE");
		cancel_recv_unmatched(MPI_ANY_SOURCE, MPI_ANY_TAG, 100, "MPI_ANY_SOURCE, MPI_ANY_TAG");
	}
	MPI_CHK(MPI_Barrier(MPI_COMM_WORLD));
	if (partner >= nprocs)
		return;

	static const size_t sizes[] = {8, 65537};
	for (int k = 0; k < 2; k++) {
		size_t sz = sizes[k];
		PHASE("cancel persistent receive, restart it (%zu B)", sz);
		char *b = malloc(sz);
		if (rank > partner) {
			MPI_Request req;
			MPI_Status st;
			int c = 0;
			MPI_CHK(MPI_Recv_init(b, (int)sz, MPI_BYTE, partner, 80, MPI_COMM_WORLD, &req));
			MPI_CHK(MPI_Start(&req));
			MPI_CHK(MPI_Cancel(&req));
			MPI_CHK(MPI_Wait(&req, &st));
			MPI_CHK(MPI_Test_cancelled(&st, &c));
			if (!c)
				FAIL("cancelled persistent receive: not cancelled");
			/* the sender sends only now: the cancelled receive must
			 * not take it, the restarted one must */
			MPI_CHK(MPI_Start(&req));
			MPI_CHK(MPI_Send(NULL, 0, MPI_BYTE, partner, T_GO, MPI_COMM_WORLD));
			MPI_CHK(MPI_Wait(&req, &st));
			check_st(&st, partner, 80, sz, "restarted persistent receive");
			if (check_pattern(b, sz, 31) >= 0)
				FAIL("restarted persistent receive: data differs");
			MPI_CHK(MPI_Request_free(&req));
		} else {
			MPI_CHK(MPI_Recv(NULL, 0, MPI_BYTE, partner, T_GO, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
			fill_pattern(b, sz, 31);
			MPI_CHK(MPI_Send(b, (int)sz, MPI_BYTE, partner, 80, MPI_COMM_WORLD));
		}

		PHASE("cancel a matched receive (%zu B)", sz);
		if (rank > partner) {
			MPI_Request req;
			MPI_Status st;
			int c = 1;
			memset(b, 0, sz);
			MPI_CHK(MPI_Irecv(b, (int)sz, MPI_BYTE, partner, 81, MPI_COMM_WORLD, &req));
			MPI_CHK(MPI_Send(NULL, 0, MPI_BYTE, partner, T_GO, MPI_COMM_WORLD));
			/* the partner's MPI_Ssend returned: the receive has matched */
			MPI_CHK(MPI_Recv(NULL, 0, MPI_BYTE, partner, T_ACK, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
			MPI_CHK(MPI_Cancel(&req));
			MPI_CHK(MPI_Wait(&req, &st));
			MPI_CHK(MPI_Test_cancelled(&st, &c));
			if (c)
				FAIL("cancel of a matched receive (%zu B) reports cancelled", sz);
			check_st(&st, partner, 81, sz, "matched receive after cancel");
			if (check_pattern(b, sz, 32) >= 0)
				FAIL("matched receive after cancel: data differs");
		} else {
			MPI_CHK(MPI_Recv(NULL, 0, MPI_BYTE, partner, T_GO, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
			fill_pattern(b, sz, 32);
			MPI_CHK(MPI_Ssend(b, (int)sz, MPI_BYTE, partner, 81, MPI_COMM_WORLD));
			MPI_CHK(MPI_Send(NULL, 0, MPI_BYTE, partner, T_ACK, MPI_COMM_WORLD));
		}
		free(b);
	}
}

/* ---- 4: cancelling sends ---- */

enum { S_STD, S_SYNC, S_PERSISTENT, NSENDS };
static const char *send_name[] = {"MPI_Isend", "MPI_Issend", "MPI_Send_init"};

/* Starts a send of `sz` bytes of `b` to the partner in mode `how`. */
static void start_send(int how, char *b, size_t sz, int tag, MPI_Request *req)
{
	if (how == S_STD)
		MPI_CHK(MPI_Isend(b, (int)sz, MPI_BYTE, partner, tag, MPI_COMM_WORLD, req));
	else if (how == S_SYNC)
		MPI_CHK(MPI_Issend(b, (int)sz, MPI_BYTE, partner, tag, MPI_COMM_WORLD, req));
	else {
		MPI_CHK(MPI_Send_init(b, (int)sz, MPI_BYTE, partner, tag, MPI_COMM_WORLD, req));
		MPI_CHK(MPI_Start(req));
	}
}

static void cancel_send_unmatched(int how, size_t sz, int tag)
{
	PHASE("cancel an unmatched %s of %zu B", send_name[how], sz);
	char *b = malloc(sz);
	if (rank < partner) {
		MPI_Request req;
		MPI_Status st;
		fill_pattern(b, sz, (unsigned)tag);
		start_send(how, b, sz, tag, &req);
		MPI_CHK(MPI_Cancel(&req));
		/* only now may the receiver post a receive for it */
		MPI_CHK(MPI_Send(NULL, 0, MPI_BYTE, partner, T_CALLED, MPI_COMM_WORLD));
		MPI_CHK(MPI_Wait(&req, &st));
		int c = -1;
		MPI_CHK(MPI_Test_cancelled(&st, &c));
		if (how == S_PERSISTENT)
			MPI_CHK(MPI_Request_free(&req));
		MPI_CHK(MPI_Send(&c, 1, MPI_INT, partner, T_FLAG, MPI_COMM_WORLD));
	} else {
		MPI_Request rreq;
		MPI_Status st;
		int c = -1, flag = 0;
		MPI_CHK(MPI_Recv(NULL, 0, MPI_BYTE, partner, T_CALLED, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
		memset(b, 0, sz);
		MPI_CHK(MPI_Irecv(b, (int)sz, MPI_BYTE, partner, tag, MPI_COMM_WORLD, &rreq));
		MPI_CHK(MPI_Recv(&c, 1, MPI_INT, partner, T_FLAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
		if (c) {
			/* cancelled: the message must never arrive */
			MPI_CHK(MPI_Test(&rreq, &flag, &st));
			if (flag)
				FAIL("%s of %zu B reported cancelled, but it was received", send_name[how], sz);
			MPI_CHK(MPI_Cancel(&rreq));
			MPI_CHK(MPI_Wait(&rreq, &st));
			MPI_CHK(MPI_Test_cancelled(&st, &c));
			if (!c)
				FAIL("%s of %zu B reported cancelled, but a receive matched it", send_name[how], sz);
		} else {
			MPI_CHK(MPI_Wait(&rreq, &st));
			check_st(&st, partner, tag, sz, "send whose cancel failed");
			if (check_pattern(b, sz, (unsigned)tag) >= 0)
				FAIL("%s of %zu B not cancelled: data differs", send_name[how], sz);
		}
		if (rank == 1 && tag % 10 == 0)
			printf("cancel %s of %zu B before it matched: %s\n", send_name[how], sz,
			       c ? "cancelled" : "delivered");
	}
	free(b);
}

static void cancel_send_matched(int how, size_t sz, int tag)
{
	PHASE("cancel a matched %s of %zu B", send_name[how], sz);
	char *b = malloc(sz);
	if (rank < partner) {
		MPI_Request req;
		MPI_Status st;
		fill_pattern(b, sz, (unsigned)tag);
		start_send(how, b, sz, tag, &req);
		/* the receiver has the message */
		MPI_CHK(MPI_Recv(NULL, 0, MPI_BYTE, partner, T_ACK, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
		MPI_CHK(MPI_Cancel(&req));
		MPI_CHK(MPI_Wait(&req, &st));
		int c = -1;
		MPI_CHK(MPI_Test_cancelled(&st, &c));
		if (c)
			FAIL("%s of %zu B, received before MPI_Cancel, reports cancelled", send_name[how], sz);
		if (how == S_PERSISTENT)
			MPI_CHK(MPI_Request_free(&req));
	} else {
		MPI_Status st;
		MPI_CHK(MPI_Recv(b, (int)sz, MPI_BYTE, partner, tag, MPI_COMM_WORLD, &st));
		check_st(&st, partner, tag, sz, "matched send");
		if (check_pattern(b, sz, (unsigned)tag) >= 0)
			FAIL("matched %s of %zu B: data differs", send_name[how], sz);
		MPI_CHK(MPI_Send(NULL, 0, MPI_BYTE, partner, T_ACK, MPI_COMM_WORLD));
	}
	free(b);
}

/*
 * Open MPI 4.x with pml cm / mtl ofi: ompi_mtl_ofi_cancel() computes the
 * context from ofi_req->comm before looking at the request type, and only
 * the receive path sets that field (v4.1.4 ompi/mca/mtl/ofi/mtl_ofi.h:1212
 * reads it, :834 in irecv is the only writer), so MPI_Cancel of any send
 * dereferences a stale or NULL communicator and segfaults, over every
 * provider (tcp;ofi_rxm too).  Open MPI 5 uses the communicator only for
 * receives.  There the phase is skipped, and says so.
 */
static int send_cancel_crashes_mpi(void)
{
#if defined(OPEN_MPI) && OMPI_MAJOR_VERSION < 5
	const char *pml = getenv("OMPI_MCA_pml");
	return pml && !strcmp(pml, "cm");
#else
	return 0;
#endif
}

static void cancel_sends(void)
{
	if (partner >= nprocs)
		return;
	if (send_cancel_crashes_mpi()) {
		if (rank == 0)
			printf("SKIPPED phase cancel of sends: Open MPI 4 mtl ofi crashes in "
			       "MPI_Cancel of a send on every provider\n");
		return;
	}
	static const size_t sizes[] = {8, 4097, 65537, 1 << 20};
	for (int how = 0; how < NSENDS; how++)
		for (int k = 0; k < 4; k++) {
			cancel_send_unmatched(how, sizes[k], 200 + how * 10 + k);
			cancel_send_matched(how, sizes[k], 300 + how * 10 + k);
		}
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	watchdog_start();
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
	if (nprocs < 2)
		FAIL("needs at least 2 ranks");
	partner = rank ^ 1;
	char *buf = malloc(MAX_PROTO_SIZE);
	if (partner < nprocs) {
		probes(buf);
		completions();
	}
	PHASE("barrier before cancel");
	MPI_CHK(MPI_Barrier(MPI_COMM_WORLD));
	cancel_receives();
	PHASE("barrier before cancel of sends");
	MPI_CHK(MPI_Barrier(MPI_COMM_WORLD));
	cancel_sends();
	free(buf);
	PHASE("final barrier");
	MPI_CHK(MPI_Barrier(MPI_COMM_WORLD));
	PHASE("MPI_Finalize");
	MPI_Finalize();
	PHASE_DONE();
	if (rank == 0)
		printf("PASS probe\n");
	return 0;
}
