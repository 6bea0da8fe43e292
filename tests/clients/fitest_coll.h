/*
 * fitest_coll.h - collectives (fi_collective(3), fi_av_set(3)) between all
 * ranks of a scenario, included by fitest.c.
 *
 *   coll [manual|auto]   AV sets, joins, every collective with data checked
 *                        against a result computed here (datatypes, ops,
 *                        sizes either side of the wires' eager limits, every
 *                        root), several collectives in flight at once, a
 *                        subgroup, a group in a set order of its own, and a
 *                        barrier that waits for its last member.
 *
 * A reference provider runs what fi_query_collective says it offers (the
 * rest is reported, not failed); gnix must offer all of it (strict).
 */

/* One value per (rank, element): small integers, so sums, minima and
 * maxima are exact in every datatype used here. */
static int64_t coll_val(int rank, size_t i, enum fi_datatype dt)
{
	int64_t v = (int64_t)((rank * 7 + (int)(i % 11) * 3) % 17) - 3;
	switch (dt) {
	case FI_UINT8: case FI_UINT16: case FI_UINT32: case FI_UINT64:
		return v + 3;
	default:
		return v;
	}
}

static size_t coll_size(enum fi_datatype dt)
{
	switch (dt) {
	case FI_INT8: case FI_UINT8: return 1;
	case FI_INT16: case FI_UINT16: return 2;
	case FI_INT32: case FI_UINT32: case FI_FLOAT: return 4;
	default: return 8;
	}
}

static void coll_put(void *buf, size_t i, enum fi_datatype dt, int64_t v)
{
	switch (dt) {
	case FI_INT8: ((int8_t *)buf)[i] = (int8_t)v; break;
	case FI_UINT8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
	case FI_INT16: ((int16_t *)buf)[i] = (int16_t)v; break;
	case FI_UINT16: ((uint16_t *)buf)[i] = (uint16_t)v; break;
	case FI_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
	case FI_UINT32: ((uint32_t *)buf)[i] = (uint32_t)v; break;
	case FI_INT64: ((int64_t *)buf)[i] = v; break;
	case FI_UINT64: ((uint64_t *)buf)[i] = (uint64_t)v; break;
	case FI_FLOAT: ((float *)buf)[i] = (float)v; break;
	case FI_DOUBLE: ((double *)buf)[i] = (double)v; break;
	default: FAIL("datatype %d", dt);
	}
}

static int64_t coll_get(const void *buf, size_t i, enum fi_datatype dt)
{
	switch (dt) {
	case FI_INT8: return ((const int8_t *)buf)[i];
	case FI_UINT8: return ((const uint8_t *)buf)[i];
	case FI_INT16: return ((const int16_t *)buf)[i];
	case FI_UINT16: return ((const uint16_t *)buf)[i];
	case FI_INT32: return ((const int32_t *)buf)[i];
	case FI_UINT32: return ((const uint32_t *)buf)[i];
	case FI_INT64: return ((const int64_t *)buf)[i];
	case FI_UINT64: return (int64_t)((const uint64_t *)buf)[i];
	case FI_FLOAT: return (int64_t)((const float *)buf)[i];
	case FI_DOUBLE: return (int64_t)((const double *)buf)[i];
	default: FAIL("datatype %d", dt);
	}
}

static int64_t coll_fold(enum fi_op op, int64_t a, int64_t b)
{
	switch (op) {
	case FI_SUM: return a + b;
	case FI_MIN: return a < b ? a : b;
	case FI_MAX: return a > b ? a : b;
	case FI_BOR: return a | b;
	case FI_BAND: return a & b;
	case FI_BXOR: return a ^ b;
	default: FAIL("op %d", op);
	}
}

/* A joined group: its members' world ranks in group order, our rank. */
struct cgroup {
	struct fid_av_set *set;
	struct fid_mc *mc;
	fi_addr_t addr;
	int members[MAXP];
	int n, me;
};

static const char *coll_name(enum fi_collective_op coll)
{
	static const char *names[] = { "barrier", "broadcast", "alltoall", "allreduce", "allgather",
				       "reduce_scatter", "reduce", "scatter", "gather" };
	return coll <= FI_GATHER ? names[coll] : "?";
}

/* Whether a collective moving `bytes` per member runs here: libfabric
 * 1.17's util collectives (tcp;ofi_rxm) hang past rxm's eager size (an
 * allreduce of 20,000 bytes never completes), so a reference provider
 * runs the smaller ones only; gnix runs all. */
static int coll_sized(size_t bytes)
{
	static int said;
	if (g_strict || bytes <= 16384)
		return 1;
	if (!said++)
		info("collectives above 16 KiB per member are not run on this reference provider");
	return 0;
}

/* Whether the provider runs `coll` with `op` on `dt`; gnix must. */
static int coll_offered(struct ctx *c, enum fi_collective_op coll, enum fi_op op, enum fi_datatype dt)
{
	struct fi_collective_attr a = { .op = op, .datatype = dt };
	int ret = fi_query_collective(c->dom, coll, &a, 0);
	if (ret) {
		DEVIATE(0, "fi_query_collective(%s, op %d, datatype %d) = %d", coll_name(coll), op, dt, ret);
		return 0;
	}
	EXPECT(a.max_members >= (size_t)g_nprocs, "max_members %zu", a.max_members);
	/* libfabric 1.17's util collectives fill it in for reductions only */
	if (dt != FI_VOID)
		DEVIATE(a.datatype_attr.size == coll_size(dt), "fi_query_collective(%s): datatype size %zu",
			coll_name(coll), a.datatype_attr.size);
	return 1;
}

/* Waits (progressing) for FI_JOIN_COMPLETE of `mc` with context `ctx`. */
static void coll_wait_join(struct ctx *c, struct fid_mc *mc, void *ctx)
{
	uint64_t dl = now_ms() + g_timeout_ms;
	for (;;) {
		uint32_t ev;
		struct fi_eq_entry e;
		ssize_t n = fi_eq_read(c->eq, &ev, &e, sizeof e, 0);
		if (n >= 0) {
			EXPECT(ev == FI_JOIN_COMPLETE, "EQ event %u", ev);
			EXPECT(n == (ssize_t)sizeof e, "EQ entry of %zd bytes", n);
			EXPECT(e.context == ctx, "join completion of context %p", e.context);
			/* fi_eq(3): "FI_JOIN_COMPLETE will point to the multicast
			 * descriptor returned as part of the join operation";
			 * libfabric 1.17's util collectives name the group the
			 * join ran over instead. */
			DEVIATE(e.fid == &mc->fid, "FI_JOIN_COMPLETE names fid %p, not the joined group's %p",
				(void *)e.fid, (void *)&mc->fid);
			return;
		}
		if (n == -FI_EAVAIL) {
			struct fi_eq_err_entry ee = { 0 };
			fi_eq_readerr(c->eq, &ee, 0);
			FAIL("join failed: %d (%s)", ee.err, fi_strerror(ee.err));
		}
		EXPECT(n == -FI_EAGAIN, "fi_eq_read = %zd", n);
		progress_all();
		if (now_ms() > dl)
			FAIL("timed out waiting for FI_JOIN_COMPLETE");
	}
}

/* Joins the group of `set` (whose members, in set order, are the world
 * ranks `members[0..n)`); only members call this. */
static void coll_join(struct ctx *c, struct cgroup *g, struct fid_av_set *set, const int *members, int n)
{
	static struct fi_context2 jctx;
	memset(g, 0, sizeof *g);
	g->set = set;
	g->n = n;
	g->me = -1;
	for (int i = 0; i < n; i++) {
		g->members[i] = members[i];
		if (members[i] == g_rank)
			g->me = i;
	}
	EXPECT(g->me >= 0, "joining a group we are not in");
	fi_addr_t set_addr;
	CHK(fi_av_set_addr(set, &set_addr));
	CHK(fi_join_collective(c->ep, set_addr, set, 0, &g->mc, &jctx));
	coll_wait_join(c, g->mc, &jctx);
	g->addr = fi_mc_addr(g->mc);
}

static void coll_leave(struct cgroup *g)
{
	CHK(fi_close(&g->mc->fid));
	CHK(fi_close(&g->set->fid));
}

/* The next completion that is not a leaked internal one: libfabric
 * 1.17's util collectives (tcp;ofi_rxm) write the completions of their
 * own tagged sends (FI_SEND | FI_TAGGED, a context of theirs) into the
 * application's CQ. */
static struct comp coll_next(struct ctx *c)
{
	for (;;) {
		struct comp e = cqw_get(&c->tx);
		if (e.err || (e.flags & FI_COLLECTIVE) || !(e.flags & FI_TAGGED))
			return e;
		DEVIATE(0, "a completion of the provider's own (flags %#" PRIx64 ") in the application's CQ", e.flags);
	}
}

/* The completion of the collective with context `x` (FI_COLLECTIVE set). */
static void coll_done(struct ctx *c, struct fi_context2 *x, const char *what)
{
	struct comp e = coll_next(c);
	if (e.err)
		FAIL("%s: error completion %d (%s)", what, e.err, fi_strerror(e.err));
	EXPECT(e.ctx == x, "%s: completion of context %p (flags %#" PRIx64 "), expected %p", what, e.ctx, e.flags,
	       (void *)x);
	EXPECT(e.flags & FI_COLLECTIVE, "%s: flags %#" PRIx64 " without FI_COLLECTIVE", what, e.flags);
}

static void coll_allreduce(struct ctx *c, struct cgroup *g, enum fi_op op, enum fi_datatype dt, size_t count)
{
	if (!coll_sized(count * coll_size(dt)) || !coll_offered(c, FI_ALLREDUCE, op, dt))
		return;
	size_t sz = coll_size(dt);
	void *in = xmalloc(count * sz), *out = xmalloc(count * sz);
	for (size_t i = 0; i < count; i++)
		coll_put(in, i, dt, coll_val(g_rank, i, dt));
	memset(out, 0xa5, count * sz);
	struct fi_context2 x;
	POST(fi_allreduce(c->ep, in, count, NULL, out, NULL, g->addr, dt, op, 0, &x));
	coll_done(c, &x, "allreduce");
	for (size_t i = 0; i < count; i++) {
		int64_t want = coll_val(g->members[0], i, dt);
		for (int m = 1; m < g->n; m++)
			want = coll_fold(op, want, coll_val(g->members[m], i, dt));
		/* the result as the datatype holds it */
		coll_put(in, i, dt, want);
		EXPECT(coll_get(out, i, dt) == coll_get(in, i, dt),
		       "allreduce op %d datatype %d count %zu: element %zu is %" PRId64 ", expected %" PRId64,
		       op, dt, count, i, coll_get(out, i, dt), coll_get(in, i, dt));
	}
	free(in);
	free(out);
}

static void coll_broadcast(struct ctx *c, struct cgroup *g, int root, size_t count)
{
	if (!coll_sized(count * 8) || !coll_offered(c, FI_BROADCAST, FI_NOOP, FI_UINT64))
		return;
	uint64_t *buf = xmalloc(count * 8);
	for (size_t i = 0; i < count; i++)
		buf[i] = g->me == root ? i * 977 + (uint64_t)root : 0;
	struct fi_context2 x;
	POST(fi_broadcast(c->ep, buf, count, NULL, g->addr, c->addr[g->members[root]], FI_UINT64, 0, &x));
	coll_done(c, &x, "broadcast");
	for (size_t i = 0; i < count; i++)
		EXPECT(buf[i] == i * 977 + (uint64_t)root, "broadcast from %d, %zu elements: element %zu is %" PRIu64,
		       root, count, i, buf[i]);
	free(buf);
}

/* Block of member m (world rank w), element i, in the data movements. */
static uint64_t coll_word(int w, size_t i, int seed)
{
	return (uint64_t)w << 40 | (uint64_t)seed << 32 | i;
}

static void coll_allgather(struct ctx *c, struct cgroup *g, size_t count)
{
	if (!coll_sized(count * 8 * g->n) || !coll_offered(c, FI_ALLGATHER, FI_NOOP, FI_UINT64))
		return;
	uint64_t *in = xmalloc(count * 8), *out = xmalloc(count * 8 * g->n);
	for (size_t i = 0; i < count; i++)
		in[i] = coll_word(g_rank, i, 1);
	struct fi_context2 x;
	POST(fi_allgather(c->ep, in, count, NULL, out, NULL, g->addr, FI_UINT64, 0, &x));
	coll_done(c, &x, "allgather");
	for (int m = 0; m < g->n; m++)
		for (size_t i = 0; i < count; i++)
			EXPECT(out[m * count + i] == coll_word(g->members[m], i, 1),
			       "allgather of %zu: block %d element %zu", count, m, i);
	free(in);
	free(out);
}

/* The group's ranks follow its set's order: an allgather of world ranks
 * comes back in that order (libfabric 1.17's util collectives get it
 * wrong for a set built by inserts). */
static void coll_order(struct ctx *c, struct cgroup *g)
{
	uint64_t me = (uint64_t)g_rank, out[MAXP];
	struct fi_context2 x;
	POST(fi_allgather(c->ep, &me, 1, NULL, out, NULL, g->addr, FI_UINT64, 0, &x));
	coll_done(c, &x, "allgather");
	for (int m = 0; m < g->n; m++)
		DEVIATE(out[m] == (uint64_t)g->members[m], "group rank %d is world rank %" PRIu64 ", not %d", m,
			out[m], g->members[m]);
}

static void coll_scatter(struct ctx *c, struct cgroup *g, int root, size_t count)
{
	if (!coll_sized(count * 8 * g->n) || !coll_offered(c, FI_SCATTER, FI_NOOP, FI_UINT64))
		return;
	uint64_t *in = xmalloc(count * 8 * g->n), *out = xmalloc(count * 8);
	for (int m = 0; m < g->n; m++)
		for (size_t i = 0; i < count; i++)
			in[m * count + i] = coll_word(g->members[m], i, 2);
	struct fi_context2 x;
	POST(fi_scatter(c->ep, g->me == root ? in : NULL, count, NULL, out, NULL, g->addr,
			c->addr[g->members[root]], FI_UINT64, 0, &x));
	coll_done(c, &x, "scatter");
	for (size_t i = 0; i < count; i++)
		EXPECT(out[i] == coll_word(g_rank, i, 2), "scatter from %d: element %zu", root, i);
	free(in);
	free(out);
}

static void coll_gather(struct ctx *c, struct cgroup *g, int root, size_t count)
{
	if (!coll_sized(count * 8 * g->n) || !coll_offered(c, FI_GATHER, FI_NOOP, FI_UINT64))
		return;
	uint64_t *in = xmalloc(count * 8), *out = xmalloc(count * 8 * g->n);
	for (size_t i = 0; i < count; i++)
		in[i] = coll_word(g_rank, i, 3);
	memset(out, 0, count * 8 * g->n);
	struct fi_context2 x;
	POST(fi_gather(c->ep, in, count, NULL, g->me == root ? out : NULL, NULL, g->addr,
		       c->addr[g->members[root]], FI_UINT64, 0, &x));
	coll_done(c, &x, "gather");
	if (g->me == root)
		for (int m = 0; m < g->n; m++)
			for (size_t i = 0; i < count; i++)
				EXPECT(out[m * count + i] == coll_word(g->members[m], i, 3),
				       "gather to %d: block %d element %zu", root, m, i);
	free(in);
	free(out);
}

static void coll_reduce(struct ctx *c, struct cgroup *g, int root, size_t count)
{
	if (!coll_offered(c, FI_REDUCE, FI_SUM, FI_INT64))
		return;
	int64_t *in = xmalloc(count * 8), *out = xmalloc(count * 8);
	for (size_t i = 0; i < count; i++)
		in[i] = coll_val(g_rank, i, FI_INT64);
	struct fi_context2 x;
	POST(fi_reduce(c->ep, in, count, NULL, g->me == root ? out : NULL, NULL, g->addr,
		       c->addr[g->members[root]], FI_INT64, FI_SUM, 0, &x));
	coll_done(c, &x, "reduce");
	if (g->me == root)
		for (size_t i = 0; i < count; i++) {
			int64_t want = 0;
			for (int m = 0; m < g->n; m++)
				want += coll_val(g->members[m], i, FI_INT64);
			EXPECT(out[i] == want, "reduce to %d: element %zu is %" PRId64 ", expected %" PRId64,
			       root, i, out[i], want);
		}
	free(in);
	free(out);
}

static void coll_alltoall(struct ctx *c, struct cgroup *g, size_t count)
{
	if (!coll_sized(count * 8 * g->n) || !coll_offered(c, FI_ALLTOALL, FI_NOOP, FI_UINT64))
		return;
	uint64_t *in = xmalloc(count * 8 * g->n), *out = xmalloc(count * 8 * g->n);
	/* block m of ours goes to member m: tag it with both ends */
	for (int m = 0; m < g->n; m++)
		for (size_t i = 0; i < count; i++)
			in[m * count + i] = coll_word(g_rank, i, 16 + g->members[m]);
	struct fi_context2 x;
	POST(fi_alltoall(c->ep, in, count, NULL, out, NULL, g->addr, FI_UINT64, 0, &x));
	coll_done(c, &x, "alltoall");
	for (int m = 0; m < g->n; m++)
		for (size_t i = 0; i < count; i++)
			EXPECT(out[m * count + i] == coll_word(g->members[m], i, 16 + g_rank),
			       "alltoall: block from member %d element %zu", m, i);
	free(in);
	free(out);
}

static void coll_reduce_scatter(struct ctx *c, struct cgroup *g, size_t count)
{
	if (!coll_offered(c, FI_REDUCE_SCATTER, FI_SUM, FI_UINT32))
		return;
	uint32_t *in = xmalloc(count * 4 * g->n), *out = xmalloc(count * 4);
	for (size_t i = 0; i < count * g->n; i++)
		in[i] = (uint32_t)coll_val(g_rank, i, FI_UINT32);
	struct fi_context2 x;
	POST(fi_reduce_scatter(c->ep, in, count, NULL, out, NULL, g->addr, FI_UINT32, FI_SUM, 0, &x));
	coll_done(c, &x, "reduce_scatter");
	for (size_t i = 0; i < count; i++) {
		size_t k = (size_t)g->me * count + i;
		int64_t want = 0;
		for (int m = 0; m < g->n; m++)
			want += coll_val(g->members[m], k, FI_UINT32);
		EXPECT(out[i] == (uint32_t)want, "reduce_scatter: element %zu is %u, expected %" PRId64, i, out[i], want);
	}
	free(in);
	free(out);
}

/* A barrier does not complete before its last member enters it: rank 1
 * holds back (told by OOB) while rank 0 polls its barrier. */
static void coll_barrier_waits(struct ctx *c, struct cgroup *g)
{
	if (!coll_offered(c, FI_BARRIER, FI_NOOP, FI_VOID))
		return;
	struct fi_context2 x;
	if (g_rank == 0) {
		POST(fi_barrier(c->ep, g->addr, &x));
		oob_send(1, "posted");
		/* rank 1 has not entered: nothing may complete meanwhile */
		uint64_t dl = now_ms() + g_timeout_ms;
		for (;;) {
			int s = backlog_take(1, "held");
			if (s != -100)
				break;
			if (try_line(0)) {
				g_backlog[g_nbacklog++] = strdup(g_line);
				continue;
			}
			struct comp e;
			if (cqw_try(&c->tx, &e) && (e.flags & FI_COLLECTIVE))
				FAIL("the barrier completed before rank 1 entered it");
			if (now_ms() > dl)
				FAIL("timed out waiting for rank 1");
		}
		oob_send(1, "go");
	} else if (g_rank == 1) {
		oob_wait(0, "posted");
		oob_send(0, "held");
		oob_wait(0, "go");
		POST(fi_barrier(c->ep, g->addr, &x));
	} else {
		POST(fi_barrier(c->ep, g->addr, &x));
	}
	coll_done(c, &x, "barrier");
}

/* Several collectives in flight at once, completed in any order. */
static void coll_many_in_flight(struct ctx *c, struct cgroup *g)
{
	if (!coll_offered(c, FI_ALLREDUCE, FI_SUM, FI_UINT64))
		return;
	enum { K = 6 };
	struct fi_context2 x[K];
	int seen[K] = { 0 };
	uint64_t in[K][64], out[K][64];
	for (int k = 0; k < K; k++) {
		for (int i = 0; i < 64; i++)
			in[k][i] = (uint64_t)(g_rank + 1) * (uint64_t)(k * 100 + i);
		POST(fi_allreduce(c->ep, in[k], 64, NULL, out[k], NULL, g->addr, FI_UINT64, FI_SUM, 0, &x[k]));
	}
	for (int k = 0; k < K; k++) {
		struct comp e = coll_next(c);
		EXPECT(!e.err, "allreduce failed: %d", e.err);
		ctx_index_once(&e, x, K, seen);
	}
	uint64_t ranks = 0;
	for (int m = 0; m < g->n; m++)
		ranks += (uint64_t)g->members[m] + 1;
	for (int k = 0; k < K; k++)
		for (int i = 0; i < 64; i++)
			EXPECT(out[k][i] == ranks * (uint64_t)(k * 100 + i), "allreduce %d element %d", k, i);
}

/* The msg form (no inline wrapper in 1.17: through the table): an
 * allreduce described by a struct fi_msg_collective. */
static void coll_msg_allreduce(struct ctx *c, struct cgroup *g)
{
	if (!coll_offered(c, FI_ALLREDUCE, FI_MAX, FI_INT32))
		return;
	int32_t in[5], out[5];
	for (int i = 0; i < 5; i++)
		in[i] = (int32_t)coll_val(g_rank, (size_t)i, FI_INT32);
	struct fi_context2 x;
	struct fi_ioc ioc = { in, 5 }, rioc = { out, 5 };
	void *desc = NULL;
	struct fi_msg_collective m = { .msg_iov = &ioc, .desc = &desc, .iov_count = 1, .coll_addr = g->addr,
				       .coll = FI_ALLREDUCE, .datatype = FI_INT32, .op = FI_MAX, .context = &x };
	ssize_t r = c->ep->collective->msg(c->ep, &m, &rioc, &desc, 1, 0);
	DEVIATE(r == 0, "collective msg (allreduce) = %zd", r);
	if (r)
		return;
	coll_done(c, &x, "msg allreduce");
	for (int i = 0; i < 5; i++) {
		int64_t want = coll_val(g->members[0], (size_t)i, FI_INT32);
		for (int k = 1; k < g->n; k++)
			want = coll_fold(FI_MAX, want, coll_val(g->members[k], (size_t)i, FI_INT32));
		EXPECT(out[i] == (int32_t)want, "msg allreduce element %d is %d, expected %" PRId64, i, out[i], want);
	}
}

/* Every collective on group `g`. */
static void coll_all(struct ctx *c, struct cgroup *g)
{
	static const enum fi_datatype dts[] = { FI_INT8, FI_INT32, FI_UINT64, FI_FLOAT, FI_DOUBLE };
	static const enum fi_op ops[] = { FI_SUM, FI_MIN, FI_MAX };
	/* 1 element, a few, past the shm slot (8 KiB, for elements of 4 bytes
	 * or more), past the udp
	 * rendezvous threshold (64 KiB) */
	static const size_t counts[] = { 1, 9, 2500, 20000 };
	for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
		for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++)
			for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++)
				coll_allreduce(c, g, ops[o], dts[d], counts[k]);
	for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
		coll_allreduce(c, g, FI_BOR, FI_UINT32, counts[k]);
		coll_allreduce(c, g, FI_BXOR, FI_UINT16, counts[k]);
	}
	/* counts that are multiples of the group's size: libfabric 1.17's
	 * util broadcast (tcp;ofi_rxm) scatters the array in equal parts and
	 * reads past its end otherwise */
	for (int root = 0; root < g->n; root++) {
		coll_broadcast(c, g, root, 2 * (size_t)g->n);
		coll_broadcast(c, g, root, 3000 * (size_t)g->n);
	}
	coll_allgather(c, g, 1);
	coll_allgather(c, g, 3000);
	coll_scatter(c, g, g->n - 1, 2);
	coll_scatter(c, g, 0, 9000);
	coll_gather(c, g, 0, 4);
	coll_gather(c, g, g->n - 1, 9000);
	coll_reduce(c, g, 1 % g->n, 33);
	coll_alltoall(c, g, 3);
	coll_alltoall(c, g, 5000);
	coll_reduce_scatter(c, g, 7);
	coll_many_in_flight(c, g);
	struct fi_context2 x;
	if (coll_offered(c, FI_BARRIER, FI_NOOP, FI_VOID)) {
		POST(fi_barrier(c->ep, g->addr, &x));
		coll_done(c, &x, "barrier");
		/* fi_barrier2 with flags goes through the table's barrier2 */
		ssize_t r = fi_barrier2(c->ep, g->addr, FI_COMPLETION, &x);
		DEVIATE(r == 0, "fi_barrier2(FI_COMPLETION) = %zd", r);
		if (r == 0)
			coll_done(c, &x, "barrier2");
	}
	coll_msg_allreduce(c, g);
}

static void scn_coll(void)
{
	struct ctx c;
	struct opts o = defopts();
	o.caps = FI_MSG | FI_COLLECTIVE;
	o.av_type = FI_AV_TABLE;
	o.eq = 1;
	o.progress = !strcmp(g_arg, "auto") ? FI_PROGRESS_AUTO : FI_PROGRESS_MANUAL;
	ctx_open_or_skip(&c, &o, "FI_MSG | FI_COLLECTIVE");
	exchange(&c, 0);
	int world[MAXP];
	for (int r = 0; r < g_nprocs; r++)
		world[r] = r;

	/* The whole world, from start to end. */
	struct fi_av_set_attr all = { .count = (size_t)g_nprocs, .start_addr = c.addr[0],
				      .end_addr = c.addr[g_nprocs - 1], .stride = 1 };
	struct fid_av_set *set;
	CHK(fi_av_set(c.av, &all, &set, NULL));
	struct cgroup g;
	coll_join(&c, &g, set, world, g_nprocs);
	coll_all(&c, &g);
	if (g_nprocs > 1)
		coll_barrier_waits(&c, &g);
	coll_leave(&g);

	/* The odd ranks: start 1, stride 2 (the others skip it). */
	struct fi_av_set_attr odd = { .start_addr = c.addr[1 % g_nprocs], .end_addr = c.addr[g_nprocs - 1],
				      .stride = 2 };
	int odds[MAXP], nodd = 0;
	for (int r = 1; r < g_nprocs; r += 2)
		odds[nodd++] = r;
	if (g_rank % 2 == 1) {
		CHK(fi_av_set(c.av, &odd, &set, NULL));
		coll_join(&c, &g, set, odds, nodd);
		coll_allreduce(&c, &g, FI_SUM, FI_INT32, 9);
		coll_allgather(&c, &g, 2);
		coll_leave(&g);
	}

	/* Sets in orders of their own: ranks follow the set's order. `rev`
	 * is built by inserts, last rank first; `rot` by set operations:
	 * ({} | all-but-0) + 0, then & rev and - {} (which keep its order),
	 * so 1, 2, ..., n-1, 0. */
	struct fi_av_set_attr none = { .start_addr = FI_ADDR_NOTAVAIL, .end_addr = FI_ADDR_NOTAVAIL };
	struct fid_av_set *rev, *rot, *but0, *empty;
	int ret = fi_av_set(c.av, &none, &empty, NULL);
	/* libfabric 1.17's util AV sets cannot be made empty this way
	 * (-FI_ENOMEM); one address then removed is the same set */
	DEVIATE(ret == 0, "fi_av_set of an empty set (start and end FI_ADDR_NOTAVAIL) = %d", ret);
	if (ret == 0)
		CHK(fi_close(&empty->fid));
	struct fi_av_set_attr one = { .count = (size_t)g_nprocs, .start_addr = c.addr[0], .end_addr = c.addr[0],
				      .stride = 1 };
#define EMPTY_SET(s) do { CHK(fi_av_set(c.av, &one, &(s), NULL)); CHK(fi_av_set_remove((s), c.addr[0])); } while (0)
	EMPTY_SET(rev);
	int order[MAXP];
	for (int r = g_nprocs - 1; r >= 0; r--) {
		CHK(fi_av_set_insert(rev, c.addr[r]));
		order[g_nprocs - 1 - r] = r;
	}
	/* a member twice: refused (util AV sets say -FI_ENOMEM when full) */
	ret = fi_av_set_insert(rev, c.addr[0]);
	EXPECT(ret < 0, "a second insert of rank 0 = %d", ret);
	DEVIATE(ret == -FI_EINVAL, "a second insert of rank 0 = %d, not -FI_EINVAL", ret);
	CHK(fi_av_set(c.av, &all, &but0, NULL));
	CHK(fi_av_set_remove(but0, c.addr[0]));
	EXPECT_RET(fi_av_set_remove(but0, c.addr[0]), -FI_EINVAL);
	EMPTY_SET(rot);
	EMPTY_SET(empty);
#undef EMPTY_SET
	CHK(fi_av_set_union(rot, but0));
	CHK(fi_av_set_insert(rot, c.addr[0]));
	CHK(fi_av_set_intersect(rot, rev));
	CHK(fi_av_set_diff(rot, empty));
	CHK(fi_close(&but0->fid));
	CHK(fi_close(&empty->fid));
	coll_join(&c, &g, rev, order, g_nprocs);
	coll_order(&c, &g);
	coll_leave(&g);
	for (int r = 0; r < g_nprocs; r++)
		order[r] = (r + 1) % g_nprocs;
	coll_join(&c, &g, rot, order, g_nprocs);
	coll_order(&c, &g);
	coll_leave(&g);

	finish(&c);
}

#define COLL_SCENARIOS \
	{ "coll", scn_coll },
