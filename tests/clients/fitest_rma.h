/* One-sided scenarios (FI_RMA, FI_ATOMIC, FI_RMA_EVENT): rank 0 is the
 * target, whose registered region the other ranks read, write and update;
 * every byte is checked against what the scenario computed on its own.
 * Included by fitest.c after fitest_pair.h. */

/* A registered region and how peers name it. */
struct region {
	uint8_t *buf;
	size_t len;
	struct fid_mr *mr;
	uint64_t key, addr; /* what a peer puts in its fi_rma_iov */
};

static void region_open(struct ctx *c, struct region *r, size_t len, uint64_t access, uint64_t key)
{
	r->len = len;
	if (posix_memalign((void **)&r->buf, 64, len))
		FAIL("posix_memalign");
	memset(r->buf, 0, len);
	CHK(fi_mr_reg(c->dom, r->buf, len, access, 0, key, 0, &r->mr, NULL));
	r->key = fi_mr_key(r->mr);
	r->addr = (c->info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)r->buf : 0;
}

static void region_close(struct region *r)
{
	CHK(fi_close(&r->mr->fid));
	free(r->buf);
}

/* Tells `dst` how to name region `name`. */
static void region_publish(int dst, const char *name, const struct region *r)
{
	char w[128];
	snprintf(w, sizeof w, "R%s:%" PRIx64 ":%" PRIx64, name, r->key, r->addr);
	oob_send(dst, w);
}

/* Learns from `src` how to name its region `name` (driving progress). */
static void region_learn(int src, const char *name, uint64_t *key, uint64_t *addr)
{
	char pre[64];
	snprintf(pre, sizeof pre, "R%s:", name);
	uint64_t dl = now_ms() + g_timeout_ms;
	for (;;) {
		for (int i = 0; i < g_nbacklog; i++) {
			int s;
			char w[256];
			if (sscanf(g_backlog[i], "%d %255s", &s, w) == 2 && s == src && !strncmp(w, pre, strlen(pre))) {
				if (sscanf(w + strlen(pre), "%" SCNx64 ":%" SCNx64, key, addr) != 2)
					FAIL("bad region word %s", w);
				free(g_backlog[i]);
				g_backlog[i] = g_backlog[--g_nbacklog];
				return;
			}
		}
		if (try_line(0)) {
			g_backlog[g_nbacklog++] = strdup(g_line);
			continue;
		}
		progress_all();
		if (now_ms() > dl)
			FAIL("no region %s from %d", name, src);
	}
}

static struct opts rma_opts(uint64_t caps)
{
	struct opts o = defopts();
	o.caps = FI_MSG | FI_TAGGED | caps;
	return o;
}

/* Polls (driving progress) until `len` bytes at `p` hold pattern `seed`. */
static void wait_pattern(const char *what, const uint8_t *p, size_t len, uint32_t seed)
{
	uint64_t dl = now_ms() + g_timeout_ms;
	while (!matches(p, len, seed)) {
		progress_all();
		if (now_ms() > dl)
			check(what, p, len, seed);
	}
}

/* ============================================================ rma_ops */

/* Every fi_rma call: writes of 8 B, 3000 B (beyond one message), 1 MiB
 * (rendezvous), iovs on both sides, inject, remote CQ data; reads of the
 * same sizes and shapes. Rank 0 checks what landed in its region, rank 1
 * what its reads brought back. */
enum { RMA_REGION = 4 << 20, RMA_RD = 2 << 20, MIB = 1 << 20 };

static void scn_rma_ops(void)
{
	struct ctx c;
	struct opts o = rma_opts(FI_RMA);
	pair_open(&c, &o, "FI_RMA");
	if (g_rank == 0) {
		struct region r;
		region_open(&c, &r, RMA_REGION, FI_REMOTE_READ | FI_REMOTE_WRITE, 0xC0DE);
		fill(r.buf + RMA_RD, MIB, 50);
		region_publish(1, "t", &r);
		/* fi_writedata's remote CQ data arrives as an entry here. */
		struct comp e = cqw_ok(&c.rx);
		EXPECT(e.flags & FI_REMOTE_CQ_DATA, "writedata entry flags %#" PRIx64, e.flags);
		EXPECT(e.data == 0xD00D, "writedata data %#" PRIx64, e.data);
		wait_pattern("inject_write", r.buf + 40, 16, 7);
		oob_wait_progress(1, "done");
		check("write 8", r.buf, 8, 1);
		check("write 3000", r.buf + 64, 3000, 2);
		check("write 1 MiB", r.buf + MIB, MIB, 3);
		check("writev", r.buf + 4096, 300, 4);
		check("writemsg piece 1", r.buf + 8192, 100, 5);
		check_at("writemsg piece 2", r.buf + 12288, 200, 5, 100);
		check("writedata", r.buf + 16384, 64, 6);
		barrier();
		region_close(&r);
		ctx_close(&c);
		pass();
	}
	uint64_t key, base;
	region_learn(0, "t", &key, &base);
	fi_addr_t t = c.addr[0];
	uint8_t *src = xmalloc(MIB), *dst = xmalloc(MIB), *dst2 = xmalloc(MIB);
	void *d = reg(&c, src, MIB), *dd = reg(&c, dst, MIB), *dd2 = reg(&c, dst2, MIB);
	struct fi_context2 x;
	struct comp e;
#define DONE(what) do { e = cqw_ok(&c.tx); EXPECT(e.ctx == &x, "%s: context", what); } while (0)
	fill(src, 8, 1);
	POST(fi_write(c.ep, src, 8, d, t, base, key, &x));
	DONE("write 8");
	EXPECT((e.flags & (FI_RMA | FI_WRITE)) == (FI_RMA | FI_WRITE), "write flags %#" PRIx64, e.flags);
	fill(src, 3000, 2);
	POST(fi_write(c.ep, src, 3000, d, t, base + 64, key, &x));
	DONE("write 3000");
	fill(src, MIB, 3);
	POST(fi_write(c.ep, src, MIB, d, t, base + MIB, key, &x));
	DONE("write 1 MiB");
	fill(src, 300, 4);
	struct iovec v[2] = { { src, 100 }, { src + 100, 200 } };
	void *dv[2] = { d, d };
	POST(fi_writev(c.ep, v, dv, 2, t, base + 4096, key, &x));
	DONE("writev");
	fill(src, 300, 5);
	struct iovec mv[1] = { { src, 300 } };
	struct fi_rma_iov rv[2] = { { base + 8192, 100, key }, { base + 12288, 200, key } };
	struct fi_msg_rma m = { .msg_iov = mv, .desc = dv, .iov_count = 1, .addr = t,
				.rma_iov = rv, .rma_iov_count = 2, .context = &x };
	POST(fi_writemsg(c.ep, &m, FI_COMPLETION));
	DONE("writemsg");
	fill(src, 64, 6);
	POST(fi_writedata(c.ep, src, 64, d, 0xD00D, t, base + 16384, key, &x));
	DONE("writedata");
	static uint8_t inj[16];
	fill(inj, 16, 7);
	POST(fi_inject_write(c.ep, inj, 16, t, base + 40, key));
	memset(inj, 0, sizeof inj); /* the buffer is ours again at once */
	/* Reads: from the pattern rank 0 put at RMA_RD. */
	POST(fi_read(c.ep, dst, 8, dd, t, base + RMA_RD, key, &x));
	DONE("read 8");
	check("read 8", dst, 8, 50);
	POST(fi_read(c.ep, dst, 5000, dd, t, base + RMA_RD, key, &x));
	DONE("read 5000");
	check("read 5000", dst, 5000, 50);
	memset(dst, 0, MIB);
	POST(fi_read(c.ep, dst, MIB, dd, t, base + RMA_RD, key, &x));
	DONE("read 1 MiB");
	EXPECT((e.flags & (FI_RMA | FI_READ)) == (FI_RMA | FI_READ), "read flags %#" PRIx64, e.flags);
	check("read 1 MiB", dst, MIB, 50);
	memset(dst, 0, 4096);
	memset(dst2, 0, 4096);
	struct iovec rdv[2] = { { dst, 1000 }, { dst2, 3000 } };
	void *rdd[2] = { dd, dd2 };
	POST(fi_readv(c.ep, rdv, rdd, 2, t, base + RMA_RD, key, &x));
	DONE("readv");
	check("readv piece 1", dst, 1000, 50);
	check_at("readv piece 2", dst2, 3000, 50, 1000);
	struct fi_rma_iov rr[2] = { { base + RMA_RD + 500, 10, key }, { base + RMA_RD, 20, key } };
	struct iovec rm[1] = { { dst, 30 } };
	struct fi_msg_rma mr = { .msg_iov = rm, .desc = rdd, .iov_count = 1, .addr = t,
				 .rma_iov = rr, .rma_iov_count = 2, .context = &x };
	POST(fi_readmsg(c.ep, &mr, FI_COMPLETION));
	DONE("readmsg");
	check_at("readmsg piece 1", dst, 10, 50, 500);
	check("readmsg piece 2", dst + 10, 20, 50);
#undef DONE
	oob_send(0, "done");
	barrier();
	ctx_close(&c);
	pass();
}

/* ======================================================= rma_refused */

/* Wrong key, rights and ranges: error completions with nothing written
 * (gnix's codes: FI_EINVAL for an unknown key, FI_EACCES otherwise), and
 * the endpoint works afterwards. */
static void scn_rma_refused(void)
{
	struct ctx c;
	struct opts o = rma_opts(FI_RMA);
	pair_open(&c, &o, "FI_RMA");
	if (g_rank == 0) {
		struct region ro, wo;
		region_open(&c, &ro, 4096, FI_REMOTE_READ, 0xA1);
		region_open(&c, &wo, 4096, FI_REMOTE_WRITE, 0xA2);
		memset(ro.buf, 0x11, 4096);
		region_publish(1, "ro", &ro);
		region_publish(1, "wo", &wo);
		oob_wait_progress(1, "done");
		for (size_t i = 0; i < 4096; i++)
			if (ro.buf[i] != 0x11 || (i >= 16 && wo.buf[i] != 0))
				FAIL("byte %zu was written (%#x %#x)", i, ro.buf[i], wo.buf[i]);
		check("the allowed write", wo.buf, 16, 9);
		barrier();
		region_close(&ro);
		region_close(&wo);
		ctx_close(&c);
		pass();
	}
	uint64_t rok, roa, wok, woa;
	region_learn(0, "ro", &rok, &roa);
	region_learn(0, "wo", &wok, &woa);
	fi_addr_t t = c.addr[0];
	static uint8_t b[8192];
	void *d = reg(&c, b, sizeof b);
	struct fi_context2 x;
	memset(b, 0xEE, sizeof b);
	struct {
		const char *what;
		int read;
		uint64_t addr, key;
		size_t len;
		int err;
	} cases[] = {
		{ "write, unknown key", 0, woa, 0xBAD, 8, FI_EINVAL },
		{ "write to a read-only region", 0, roa, rok, 8, FI_EACCES },
		{ "read of a write-only region", 1, woa, wok, 8, FI_EACCES },
		{ "write beyond the region", 0, woa + 4000, wok, 200, FI_EACCES },
		{ "large write beyond the region", 0, woa + 8, wok, 8192, FI_EACCES },
		{ "large write, unknown key", 0, woa, 0xBAD, 8192, FI_EINVAL },
		{ "large write to a read-only region", 0, roa, rok, 8192, FI_EACCES },
		{ "read beyond the region", 1, roa + 4095, rok, 2, FI_EACCES },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		if (cases[i].read)
			POST(fi_read(c.ep, b, cases[i].len, d, t, cases[i].addr, cases[i].key, &x));
		else
			POST(fi_write(c.ep, b, cases[i].len, d, t, cases[i].addr, cases[i].key, &x));
		struct comp e = cqw_get(&c.tx);
		EXPECT(e.err, "%s: completed without an error", cases[i].what);
		DEVIATE(e.err == cases[i].err, "%s: error %d (%s), gnix gives %d", cases[i].what, e.err,
			fi_strerror(e.err), cases[i].err);
	}
	fill(b, 16, 9);
	POST(fi_write(c.ep, b, 16, d, t, woa, wok, &x));
	cqw_ok(&c.tx);
	oob_send(0, "done");
	barrier();
	ctx_close(&c);
	pass();
}

/* ========================================================= rma_event */

/* FI_RMA_EVENT: peers' writes and reads count on the target's
 * FI_REMOTE_WRITE / FI_REMOTE_READ counters (bound to the endpoint) and on
 * a counter bound to the region (fi_mr_bind); the initiator's on its
 * FI_WRITE / FI_READ counters. Arg "manual": FI_PROGRESS_MANUAL, and the
 * target waits on the region's counter first, bound to no endpoint (as
 * fabtests' fi_multi_mr does): that wait must progress the endpoint the
 * writes arrive at. */
static void scn_rma_event(void)
{
	struct ctx c;
	struct opts o = rma_opts(FI_RMA | FI_RMA_EVENT);
	o.rmacntr = 1;
	int manual = !strcmp(g_arg, "manual");
	if (manual)
		o.progress = FI_PROGRESS_MANUAL;
	pair_open(&c, &o, "FI_RMA | FI_RMA_EVENT");
	enum { W = 5, R = 3 };
	if (g_rank == 0) {
		struct fi_cntr_attr ca = { .events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_UNSPEC };
		struct fid_cntr *mrc;
		CHK(fi_cntr_open(c.dom, &ca, &mrc, NULL));
		struct region r;
		region_open(&c, &r, 4096, FI_REMOTE_READ | FI_REMOTE_WRITE, 0xE1);
		int bound = fi_mr_bind(r.mr, &mrc->fid, FI_REMOTE_WRITE);
		DEVIATE(bound == 0, "fi_mr_bind(counter) = %d (%s)", bound, fi_strerror(-bound));
		region_publish(1, "e", &r);
		if (bound == 0 && manual)
			wait_cntr(mrc, W, "region write counter, waited on first");
		/* The endpoint's counter sees every write and read of ours. */
		wait_cntr(c.rmacntr, W + R, "remote write/read counter");
		if (bound == 0)
			wait_cntr(mrc, W, "region write counter");
		oob_wait_progress(1, "done");
		EXPECT(bound || fi_cntr_read(mrc) == W, "region counter %" PRIu64, fi_cntr_read(mrc));
		EXPECT(fi_cntr_read(c.rmacntr) == W + R, "endpoint counter %" PRIu64, fi_cntr_read(c.rmacntr));
		barrier();
		region_close(&r);
		CHK(fi_close(&mrc->fid));
		ctx_close(&c);
		pass();
	}
	uint64_t key, addr;
	region_learn(0, "e", &key, &addr);
	static uint8_t b[64];
	void *d = reg(&c, b, sizeof b);
	struct fi_context2 x;
	for (int i = 0; i < W; i++) {
		POST(fi_write(c.ep, b, 8, d, c.addr[0], addr + 8 * i, key, &x));
		cqw_ok(&c.tx);
	}
	for (int i = 0; i < R; i++) {
		POST(fi_read(c.ep, b, 8, d, c.addr[0], addr, key, &x));
		cqw_ok(&c.tx);
	}
	wait_cntr(c.rmacntr, W + R, "local write/read counter");
	oob_send(0, "done");
	barrier();
	ctx_close(&c);
	pass();
}

/* ========================================================= atomic_ops */

/* A reference for every op libfabric defines on a C type, computed here,
 * element by element: what the target holds afterwards (t), and what a
 * fetching form returns (f). 0 if the op is not defined for the type. */
#define COMMON_CASES                                                                     \
	case FI_SUM: t[i] = old + v; break;                                              \
	case FI_PROD: t[i] = old * v; break;                                             \
	case FI_LOR: t[i] = (old != 0) || (v != 0); break;                               \
	case FI_LAND: t[i] = (old != 0) && (v != 0); break;                              \
	case FI_LXOR: t[i] = (old != 0) != (v != 0); break;                              \
	case FI_ATOMIC_WRITE: t[i] = v; break;                                           \
	case FI_ATOMIC_READ: break;                                                      \
	case FI_CSWAP: if (c[i] == old) t[i] = v; break;                                 \
	case FI_CSWAP_NE: if (c[i] != old) t[i] = v; break;
#define ORDERED_CASES                                                                    \
	case FI_MIN: t[i] = v < old ? v : old; break;                                    \
	case FI_MAX: t[i] = v > old ? v : old; break;                                    \
	case FI_CSWAP_LE: if (c[i] <= old) t[i] = v; break;                              \
	case FI_CSWAP_LT: if (c[i] < old) t[i] = v; break;                               \
	case FI_CSWAP_GE: if (c[i] >= old) t[i] = v; break;                              \
	case FI_CSWAP_GT: if (c[i] > old) t[i] = v; break;
#define BIT_CASES                                                                        \
	case FI_BOR: t[i] = old | v; break;                                              \
	case FI_BAND: t[i] = old & v; break;                                             \
	case FI_BXOR: t[i] = old ^ v; break;                                             \
	case FI_MSWAP: t[i] = (v & c[i]) | (old & ~c[i]); break;

#define TYPE_FNS(N, T, CASES)                                                            \
	static int model_##N(enum fi_op op, void *tv, const void *ov, const void *cv, void *fv, size_t n) \
	{                                                                                \
		T *t = tv, *f = fv;                                                      \
		const T *o = ov, *c = cv;                                                \
		for (size_t i = 0; i < n; i++) {                                         \
			T old = t[i], v = o[i];                                          \
			f[i] = old;                                                      \
			switch ((int)op) {                                               \
				COMMON_CASES CASES                                       \
			default:                                                         \
				return 0;                                                \
			}                                                                \
		}                                                                        \
		return 1;                                                                \
	}                                                                                \
	static int eq_##N(const void *a, const void *b, size_t n)                        \
	{                                                                                \
		for (size_t i = 0; i < n; i++)                                           \
			if (((const T *)a)[i] != ((const T *)b)[i])                      \
				return 0;                                                \
		return 1;                                                                \
	}                                                                                \
	static void set_##N(void *p, size_t i, int k)                                    \
	{                                                                                \
		((T *)p)[i] = (T)k;                                                      \
	}

TYPE_FNS(i8, int8_t, ORDERED_CASES BIT_CASES)
TYPE_FNS(u8, uint8_t, ORDERED_CASES BIT_CASES)
TYPE_FNS(i16, int16_t, ORDERED_CASES BIT_CASES)
TYPE_FNS(u16, uint16_t, ORDERED_CASES BIT_CASES)
TYPE_FNS(i32, int32_t, ORDERED_CASES BIT_CASES)
TYPE_FNS(u32, uint32_t, ORDERED_CASES BIT_CASES)
TYPE_FNS(i64, int64_t, ORDERED_CASES BIT_CASES)
TYPE_FNS(u64, uint64_t, ORDERED_CASES BIT_CASES)
TYPE_FNS(i128, __int128, ORDERED_CASES BIT_CASES)
TYPE_FNS(u128, unsigned __int128, ORDERED_CASES BIT_CASES)
TYPE_FNS(flt, float, ORDERED_CASES)
TYPE_FNS(dbl, double, ORDERED_CASES)
TYPE_FNS(ld, long double, ORDERED_CASES)
TYPE_FNS(cflt, float _Complex, )
TYPE_FNS(cdbl, double _Complex, )
TYPE_FNS(cld, long double _Complex, )

static const struct atype {
	enum fi_datatype dt;
	const char *name;
	size_t size;
	int (*model)(enum fi_op, void *, const void *, const void *, void *, size_t);
	int (*eq)(const void *, const void *, size_t);
	void (*set)(void *, size_t, int);
} atypes[] = {
#define T(dt, n, ty) { dt, #dt, sizeof(ty), model_##n, eq_##n, set_##n }
	T(FI_INT8, i8, int8_t), T(FI_UINT8, u8, uint8_t), T(FI_INT16, i16, int16_t),
	T(FI_UINT16, u16, uint16_t), T(FI_INT32, i32, int32_t), T(FI_UINT32, u32, uint32_t),
	T(FI_INT64, i64, int64_t), T(FI_UINT64, u64, uint64_t), T(FI_INT128, i128, __int128),
	T(FI_UINT128, u128, unsigned __int128), T(FI_FLOAT, flt, float), T(FI_DOUBLE, dbl, double),
	T(FI_LONG_DOUBLE, ld, long double), T(FI_FLOAT_COMPLEX, cflt, float _Complex),
	T(FI_DOUBLE_COMPLEX, cdbl, double _Complex), T(FI_LONG_DOUBLE_COMPLEX, cld, long double _Complex),
#undef T
};

enum { ACOUNT = 4, ASLOT = ACOUNT * 32 };

/* Every op on every datatype in every family the endpoint says it does
 * (fi_atomicvalid and kin), each on a slot of its own holding known
 * values: the target's values afterwards (read back) and the fetched ones
 * must be what the reference above computes. Also: the v/msg/inject
 * forms, and -FI_EOPNOTSUPP for what is not defined. */
static void scn_atomic_ops(void)
{
	struct ctx c;
	struct opts o = rma_opts(FI_RMA | FI_ATOMIC);
	pair_open(&c, &o, "FI_RMA | FI_ATOMIC");
	if (g_rank == 0) {
		struct region r;
		region_open(&c, &r, 1 << 20, FI_REMOTE_READ | FI_REMOTE_WRITE, 0xA7);
		region_publish(1, "a", &r);
		oob_wait_progress(1, "done");
		barrier();
		region_close(&r);
		ctx_close(&c);
		pass();
	}
	uint64_t key, base;
	region_learn(0, "a", &key, &base);
	fi_addr_t t = c.addr[0];
	static _Alignas(64) uint8_t init[ASLOT], op_[ASLOT], cmp[ASLOT], want[ASLOT], wantf[ASLOT], got[ASLOT],
		fetched[ASLOT];
	void *d = reg(&c, got, sizeof got), *dinit = reg(&c, init, sizeof init), *dop = reg(&c, op_, sizeof op_),
	     *dcmp = reg(&c, cmp, sizeof cmp), *df = reg(&c, fetched, sizeof fetched);
	struct fi_context2 x;
	int ran = 0, slot = 0, refused = 0;
	static const char *fams[] = { "atomic", "fetch_atomic", "compare_atomic" };
	for (int fam = 0; fam < 3; fam++)
		for (size_t ti = 0; ti < sizeof atypes / sizeof atypes[0]; ti++)
			for (int op = 0; op < FI_ATOMIC_OP_LAST; op++) {
				const struct atype *a = &atypes[ti];
				size_t cnt = 0;
				int v = fam == 0 ? fi_atomicvalid(c.ep, a->dt, op, &cnt)
					: fam == 1 ? fi_fetch_atomicvalid(c.ep, a->dt, op, &cnt)
						   : fi_compare_atomicvalid(c.ep, a->dt, op, &cnt);
				if (v) {
					EXPECT(v == -FI_EOPNOTSUPP, "%s %s op %d: valid = %d", fams[fam], a->name, op, v);
					refused++;
					continue;
				}
				EXPECT(cnt >= ACOUNT, "%s %s op %d: count %zu", fams[fam], a->name, op, cnt);
				size_t n = ACOUNT, len = n * a->size;
				for (size_t i = 0; i < n; i++) {
					a->set(init, i, 2 + (int)((slot + i) % 3));
					a->set(op_, i, 1 + (int)(i % 3));
					/* half the compares equal the target, half not */
					a->set(cmp, i, i % 2 ? 2 + (int)((slot + i) % 3) : 7);
				}
				memcpy(want, init, len);
				if (!a->model(op, want, op_, cmp, wantf, n))
					FAIL("%s %s op %d: offered, but the reference does not define it", fams[fam], a->name, op);
				uint64_t at = base + (uint64_t)slot * ASLOT;
				/* Delivery complete: what completed is in the target's
				 * memory before the next operation reads it (transmit
				 * complete, the default, would not promise that). */
				struct iovec wv = { init, len };
				struct fi_rma_iov wr = { at, len, key };
				struct fi_msg_rma wm = { .msg_iov = &wv, .desc = &dinit, .iov_count = 1, .addr = t,
							 .rma_iov = &wr, .rma_iov_count = 1, .context = &x };
				POST(fi_writemsg(c.ep, &wm, FI_COMPLETION | FI_DELIVERY_COMPLETE));
				cqw_ok(&c.tx);
				struct fi_ioc av = { op_, n };
				struct fi_rma_ioc ar = { at, n, key };
				struct fi_msg_atomic am = { .msg_iov = &av, .desc = &dop, .iov_count = 1, .addr = t,
							    .rma_iov = &ar, .rma_iov_count = 1, .datatype = a->dt,
							    .op = op, .context = &x };
				if (fam == 0)
					POST(fi_atomicmsg(c.ep, &am, FI_COMPLETION | FI_DELIVERY_COMPLETE));
				else if (fam == 1)
					POST(fi_fetch_atomic(c.ep, op_, n, dop, fetched, df, t, at, key, a->dt, op, &x));
				else
					POST(fi_compare_atomic(c.ep, op_, n, dop, cmp, dcmp, fetched, df, t, at, key, a->dt, op, &x));
				struct comp e = cqw_ok(&c.tx);
				EXPECT(e.flags & FI_ATOMIC, "%s %s op %d: flags %#" PRIx64, fams[fam], a->name, op, e.flags);
				POST(fi_read(c.ep, got, len, d, t, at, key, &x));
				cqw_ok(&c.tx);
				if (!a->eq(got, want, n)) {
					char h1[2 * ASLOT + 1], h2[2 * ASLOT + 1], h3[2 * ASLOT + 1];
					hex(init, len, h1);
					hex(got, len, h2);
					hex(want, len, h3);
					FAIL("%s %s op %d: target was %s, holds %s, want %s", fams[fam], a->name, op, h1, h2, h3);
				}
				if (fam)
					EXPECT(a->eq(fetched, wantf, n), "%s %s op %d: fetched other values", fams[fam], a->name,
					       op);
				ran++;
				slot++;
				if ((size_t)(slot + 1) * ASLOT > (1 << 20))
					FAIL("region too small");
			}
	/* The other forms, on uint64 SUM / READ / CSWAP. */
	uint64_t at = base + (uint64_t)slot * ASLOT;
	static _Alignas(8) uint64_t u[4] = { 10, 20, 30, 40 }, one[4] = { 1, 1, 1, 1 }, res[4], cmpv[4] = { 11, 0, 0, 0 };
	POST(fi_write(c.ep, u, sizeof u, NULL, t, at, key, &x));
	cqw_ok(&c.tx);
	struct fi_ioc iv[2] = { { one, 1 }, { one + 1, 3 } };
	void *dv[2] = { NULL, NULL };
	POST(fi_atomicv(c.ep, iv, dv, 2, t, at, key, FI_UINT64, FI_SUM, &x));
	cqw_ok(&c.tx);
	POST(fi_inject_atomic(c.ep, one, 4, t, at, key, FI_UINT64, FI_SUM));
	struct fi_ioc rv[1] = { { res, 4 } };
	struct fi_rma_ioc tv[1] = { { at, 4, key } };
	struct fi_msg_atomic m = { .msg_iov = iv, .desc = dv, .iov_count = 2, .addr = t, .rma_iov = tv,
				   .rma_iov_count = 1, .datatype = FI_UINT64, .op = FI_ATOMIC_READ, .context = &x };
	/* the inject completes in the background: read until it shows */
	uint64_t dl = now_ms() + g_timeout_ms;
	do {
		POST(fi_fetch_atomicmsg(c.ep, &m, rv, dv, 1, FI_FENCE));
		cqw_ok(&c.tx);
		if (now_ms() > dl)
			FAIL("inject_atomic never landed: %" PRIu64, res[0]);
	} while (res[0] != 12);
	EXPECT(res[1] == 22 && res[2] == 32 && res[3] == 42, "atomicv + inject: %" PRIu64 " %" PRIu64 " %" PRIu64,
	       res[1], res[2], res[3]);
	struct fi_ioc cv[1] = { { cmpv, 1 } }, ov[1] = { { u, 1 } };
	struct fi_rma_ioc t1[1] = { { at, 1, key } };
	struct fi_msg_atomic cm = { .msg_iov = ov, .desc = dv, .iov_count = 1, .addr = t, .rma_iov = t1,
				    .rma_iov_count = 1, .datatype = FI_UINT64, .op = FI_CSWAP, .context = &x };
	cmpv[0] = 12;
	struct fi_ioc rv1[1] = { { res, 1 } };
	POST(fi_compare_atomicmsg(c.ep, &cm, cv, dv, 1, rv1, dv, 1, 0));
	cqw_ok(&c.tx);
	EXPECT(res[0] == 12, "compare_atomicmsg fetched %" PRIu64, res[0]);
	POST(fi_read(c.ep, res, 8, NULL, t, at, key, &x));
	cqw_ok(&c.tx);
	EXPECT(res[0] == 10, "compare_atomicmsg swapped in %" PRIu64, res[0]);
	/* Undefined: a bit op on a double. */
	size_t cnt;
	EXPECT_RET(fi_atomicvalid(c.ep, FI_DOUBLE, FI_BOR, &cnt), -FI_EOPNOTSUPP);
	/* The call itself only where refusing it is the rule under test (gnix):
	 * libfabric 1.17's shm sends it, and its target process exits. */
	if (g_strict)
		EXPECT_RET(fi_atomic(c.ep, one, 1, NULL, t, at, key, FI_DOUBLE, FI_BOR, &x), -FI_EOPNOTSUPP);
	info("%d op/datatype/family combinations checked, %d refused", ran, refused);
	oob_send(0, "done");
	barrier();
	ctx_close(&c);
	pass();
}

/* ====================================================== atomic_fadd */

/* Every rank (rank 0 too, through its own endpoint) adds 1 to one word of
 * rank 0's, K times, with fetch-and-add: the word ends at nprocs * K, and
 * each rank sees its fetched values rise. With ranks on different wires
 * (the test sets FI_GNIX_SHM=0 for some), atomics from both are applied
 * by the one executor. */
static void scn_atomic_fadd(void)
{
	struct ctx c;
	struct opts o = rma_opts(FI_RMA | FI_ATOMIC);
	pair_open(&c, &o, "FI_RMA | FI_ATOMIC");
	enum { K = 2000 };
	struct region r;
	if (g_rank == 0) {
		region_open(&c, &r, 64, FI_REMOTE_READ | FI_REMOTE_WRITE, 0xFADD);
		for (int p = 1; p < g_nprocs; p++)
			region_publish(p, "w", &r);
	}
	uint64_t key, addr;
	if (g_rank == 0) {
		key = r.key;
		addr = r.addr;
	} else {
		region_learn(0, "w", &key, &addr);
	}
	barrier();
	static uint64_t one = 1, prev, got;
	struct fi_context2 x;
	for (int i = 0; i < K; i++) {
		POST(fi_fetch_atomic(c.ep, &one, 1, NULL, &got, NULL, c.addr[0], addr, key, FI_UINT64, FI_SUM, &x));
		cqw_ok(&c.tx);
		EXPECT(i == 0 || got > prev, "fetched %" PRIu64 " after %" PRIu64, got, prev);
		prev = got;
	}
	barrier();
	if (g_rank == 0) {
		uint64_t v;
		memcpy(&v, r.buf, 8);
		EXPECT(v == (uint64_t)g_nprocs * K, "the word holds %" PRIu64 ", want %d", v, g_nprocs * K);
		info("%d ranks x %d fetch-and-add: %" PRIu64, g_nprocs, K, v);
	}
	barrier();
	if (g_rank == 0)
		region_close(&r);
	ctx_close(&c);
	pass();
}


/* ============================================================ trigger */

/* FI_TRIGGER: operations held back until a counter reaches a threshold,
 * then posted, completing with their triggered context: a receive (the
 * message it takes waits as unexpected meanwhile), a send, an RMA write,
 * one posted through an alias whose op flags carry FI_TRIGGER
 * (fi_ep_alias), and an atomic. The counters are the application's
 * (fi_cntr_add), so when each fires is known. */
static void scn_trigger(void)
{
	struct ctx c;
	struct opts o = rma_opts(FI_RMA | FI_ATOMIC | FI_TRIGGER);
	pair_open(&c, &o, "FI_RMA | FI_ATOMIC | FI_TRIGGER");
	struct fi_cntr_attr ca = { .events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_UNSPEC };
	struct fid_cntr *tc;
	CHK(fi_cntr_open(c.dom, &ca, &tc, NULL));
	static char msg[64], got[64];
	if (g_rank == 0) {
		struct region r;
		region_open(&c, &r, 4096, FI_REMOTE_READ | FI_REMOTE_WRITE, 0x7E);
		region_publish(1, "g", &r);
		struct fi_triggered_context trc = { .event_type = FI_TRIGGER_THRESHOLD,
						    .trigger.threshold = { .cntr = tc, .threshold = 1 } };
		struct iovec v = { got, sizeof got };
		struct fi_msg_tagged m = { .msg_iov = &v, .iov_count = 1, .addr = FI_ADDR_UNSPEC, .tag = 5,
					   .context = &trc };
		POST(fi_trecvmsg(c.ep, &m, FI_TRIGGER | FI_COMPLETION));
		oob_send(1, "armed");
		oob_wait_progress(1, "sent");
		/* The message is here, unexpected: the receive is not posted yet. */
		EXPECT(got[0] == 0, "the triggered receive took a message before its trigger");
		CHK(fi_cntr_add(tc, 1));
		struct comp e = cqw_ok(&c.rx);
		EXPECT(e.ctx == &trc, "triggered receive's context %p", e.ctx);
		check("triggered receive", got, sizeof got, 21);
		/* The triggered send from rank 1. */
		static char got2[64];
		struct fi_context2 x;
		POST(fi_trecv(c.ep, got2, sizeof got2, NULL, FI_ADDR_UNSPEC, 6, 0, &x));
		oob_send(1, "posted");
		cqw_ok(&c.rx);
		check("triggered send", got2, sizeof got2, 22);
		oob_wait_progress(1, "done");
		barrier();
		region_close(&r);
		CHK(fi_close(&tc->fid));
		ctx_close(&c);
		pass();
	}
	uint64_t key, addr;
	region_learn(0, "g", &key, &addr);
	oob_wait_progress(0, "armed");
	fi_addr_t t = c.addr[0];
	struct fi_context2 x;
	fill(msg, sizeof msg, 21);
	POST(fi_tsend(c.ep, msg, sizeof msg, NULL, t, 5, &x));
	cqw_ok(&c.tx);
	oob_send(0, "sent");
	/* A triggered write (threshold 2) and one through a triggering alias (3). */
	static uint8_t w1[32], w2[32], rd[80];
	fill(w1, 32, 23);
	fill(w2, 32, 24);
	struct fi_triggered_context t1 = { .event_type = FI_TRIGGER_THRESHOLD,
					   .trigger.threshold = { .cntr = tc, .threshold = 2 } };
	struct fi_triggered_context t2 = t1, t3 = t1, t4 = t1;
	t2.trigger.threshold.threshold = 3;
	t3.trigger.threshold.threshold = 4;
	t4.trigger.threshold.threshold = 5;
	struct iovec wv = { w1, 32 };
	struct fi_rma_iov wr = { addr, 32, key };
	struct fi_msg_rma wm = { .msg_iov = &wv, .iov_count = 1, .addr = t, .rma_iov = &wr, .rma_iov_count = 1,
				 .context = &t1 };
	POST(fi_writemsg(c.ep, &wm, FI_TRIGGER | FI_COMPLETION));
	struct fid_ep *alias = NULL;
	CHK(fi_ep_alias(c.ep, &alias, FI_TRANSMIT | FI_TRIGGER));
	POST(fi_write(alias, w2, 32, NULL, t, addr + 32, key, &t2));
	static uint64_t one = 1;
	struct fi_ioc ov = { &one, 1 };
	struct fi_rma_ioc ar = { addr + 64, 1, key };
	struct fi_msg_atomic am = { .msg_iov = &ov, .iov_count = 1, .addr = t, .rma_iov = &ar, .rma_iov_count = 1,
				    .datatype = FI_UINT64, .op = FI_SUM, .context = &t3 };
	POST(fi_atomicmsg(c.ep, &am, FI_TRIGGER | FI_COMPLETION));
	fill(msg, sizeof msg, 22);
	struct iovec sv = { msg, sizeof msg };
	struct fi_msg_tagged sm = { .msg_iov = &sv, .iov_count = 1, .addr = t, .tag = 6, .context = &t4 };
	POST(fi_tsendmsg(c.ep, &sm, FI_TRIGGER | FI_COMPLETION));
	/* Nothing has fired: the region is still zero. */
	POST(fi_read(c.ep, rd, 72, NULL, t, addr, key, &x));
	EXPECT(cqw_ok(&c.tx).ctx == &x, "the read completes first");
	for (int i = 0; i < 72; i++)
		EXPECT(rd[i] == 0, "byte %d written before its trigger", i);
	CHK(fi_cntr_add(tc, 2)); /* 2: the write */
	EXPECT(cqw_ok(&c.tx).ctx == &t1, "triggered write's context");
	CHK(fi_cntr_add(tc, 1)); /* 3: the alias's write */
	EXPECT(cqw_ok(&c.tx).ctx == &t2, "alias write's context");
	CHK(fi_cntr_add(tc, 1)); /* 4: the atomic */
	EXPECT(cqw_ok(&c.tx).ctx == &t3, "triggered atomic's context");
	POST(fi_read(c.ep, rd, 72, NULL, t, addr, key, &x));
	cqw_ok(&c.tx);
	check("triggered write", rd, 32, 23);
	check("alias write", rd + 32, 32, 24);
	uint64_t v;
	memcpy(&v, rd + 64, 8);
	EXPECT(v == 1, "triggered atomic: %" PRIu64, v);
	oob_wait_progress(0, "posted");
	CHK(fi_cntr_add(tc, 1)); /* 5: the send */
	EXPECT(cqw_ok(&c.tx).ctx == &t4, "triggered send's context");
	CHK(fi_close(&alias->fid));
	oob_send(0, "done");
	barrier();
	CHK(fi_close(&tc->fid));
	ctx_close(&c);
	pass();
}


/* ==================================================== rma_peer_killed */

/* The target is SIGKILLed while large reads (arg "read") or writes
 * ("write") to it are in flight: every operation completes, those that
 * did not finish with an error; nothing hangs (the harness's time bound,
 * with FI_GNIX_PEER_TIMEOUT_MS short). */
static void scn_rma_peer_killed(void)
{
	struct ctx c;
	struct opts o = rma_opts(FI_RMA);
	pair_open(&c, &o, "FI_RMA");
	enum { N = 16, LEN = 8 << 20 };
	if (g_rank == 0) {
		struct region r;
		region_open(&c, &r, LEN, FI_REMOTE_READ | FI_REMOTE_WRITE, 0x99);
		region_publish(1, "k", &r);
		for (;;)
			read_line(); /* until killed */
	}
	uint64_t key, addr;
	region_learn(0, "k", &key, &addr);
	int rd = !strcmp(g_arg, "read");
	uint8_t *b = xmalloc(LEN);
	struct fi_context2 x[N];
	for (int i = 0; i < N; i++) {
		if (rd)
			POST(fi_read(c.ep, b, LEN, NULL, c.addr[0], addr, key, &x[i]));
		else
			POST(fi_write(c.ep, b, LEN, NULL, c.addr[0], addr, key, &x[i]));
	}
	printf("KILLPEER 0\n");
	fflush(stdout);
	uint64_t t0 = now_ms();
	int seen[N] = { 0 }, nerr = 0;
	for (int k = 0; k < N; k++) {
		struct comp e = cqw_get(&c.tx);
		(void)ctx_index_once(&e, x, N, seen);
		if (e.err)
			nerr++;
	}
	EXPECT(nerr > 0, "target killed with %d %s in flight, all succeeded", N, rd ? "reads" : "writes");
	info("%d of %d %s failed, all done %" PRIu64 " ms after the kill", nerr, N, rd ? "reads" : "writes",
	     now_ms() - t0);
	ctx_close(&c);
	pass();
}


/* ====================================================== deferred_work */

/* The deferred work queue (fi_control(domain, FI_QUEUE_WORK)): a chain
 * where each step waits for the one before: the application bumps C; a
 * write waits for C and counts its completion on D; a counter add waits
 * for D and bumps E; a send waits for E and counts on F. Deferred data
 * transfers complete on their completion counters only (no CQ entry
 * without FI_COMPLETION). FI_CANCEL_WORK and FI_FLUSH_WORK take back work
 * that has not fired. */
/* arg "manual": FI_PROGRESS_MANUAL, where rank 1's wait on the last
 * completion counter, bound to no endpoint, is all that progresses it. */
static void scn_deferred_work(void)
{
	struct ctx c;
	struct opts o = rma_opts(FI_RMA | FI_TRIGGER);
	if (!strcmp(g_arg, "manual"))
		o.progress = FI_PROGRESS_MANUAL;
	pair_open(&c, &o, "FI_RMA | FI_TRIGGER");
	static char got[64], msg[64];
	if (g_rank == 0) {
		struct region r;
		region_open(&c, &r, 4096, FI_REMOTE_READ | FI_REMOTE_WRITE, 0xDE);
		region_publish(1, "d", &r);
		struct fi_context2 x;
		POST(fi_trecv(c.ep, got, sizeof got, NULL, FI_ADDR_UNSPEC, 9, 0, &x));
		cqw_ok(&c.rx);
		check("deferred send", got, sizeof got, 31);
		check("deferred write", r.buf, 64, 30);
		oob_wait_progress(1, "done");
		barrier();
		region_close(&r);
		ctx_close(&c);
		pass();
	}
	uint64_t key, addr;
	region_learn(0, "d", &key, &addr);
	struct fi_cntr_attr ca = { .events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_UNSPEC };
	struct fid_cntr *C, *D, *E, *F;
	CHK(fi_cntr_open(c.dom, &ca, &C, NULL));
	CHK(fi_cntr_open(c.dom, &ca, &D, NULL));
	CHK(fi_cntr_open(c.dom, &ca, &E, NULL));
	CHK(fi_cntr_open(c.dom, &ca, &F, NULL));
	static uint8_t src[64];
	fill(src, 64, 30);
	fill(msg, sizeof msg, 31);
	struct fi_context2 wx, sx;
	struct iovec wv = { src, 64 }, sv = { msg, sizeof msg };
	struct fi_rma_iov wr = { addr, 64, key };
	struct fi_op_rma orma = { .ep = c.ep, .msg = { .msg_iov = &wv, .iov_count = 1, .addr = c.addr[0],
						     .rma_iov = &wr, .rma_iov_count = 1, .context = &wx } };
	struct fi_op_cntr ocntr = { .cntr = E, .value = 1 };
	struct fi_op_tagged osend = { .ep = c.ep, .msg = { .msg_iov = &sv, .iov_count = 1, .addr = c.addr[0],
							  .tag = 9, .context = &sx } };
	struct fi_deferred_work w1 = { .threshold = 1, .triggering_cntr = C, .completion_cntr = D,
				       .op_type = FI_OP_WRITE, .op.rma = &orma };
	struct fi_deferred_work w2 = { .threshold = 1, .triggering_cntr = D, .op_type = FI_OP_CNTR_ADD,
				       .op.cntr = &ocntr };
	struct fi_deferred_work w3 = { .threshold = 1, .triggering_cntr = E, .completion_cntr = F,
				       .op_type = FI_OP_TSEND, .op.tagged = &osend };
	/* and two that never fire */
	struct fi_deferred_work w4 = w1, w5 = w1;
	w4.threshold = w5.threshold = 100;
	CHK(fi_control(&c.dom->fid, FI_QUEUE_WORK, &w3));
	CHK(fi_control(&c.dom->fid, FI_QUEUE_WORK, &w2));
	CHK(fi_control(&c.dom->fid, FI_QUEUE_WORK, &w1));
	CHK(fi_control(&c.dom->fid, FI_QUEUE_WORK, &w4));
	CHK(fi_control(&c.dom->fid, FI_QUEUE_WORK, &w5));
	EXPECT(fi_cntr_read(D) == 0 && fi_cntr_read(F) == 0, "work fired before its trigger");
	EXPECT_RET(fi_control(&c.dom->fid, FI_CANCEL_WORK, &w4), 0);
	CHK(fi_cntr_add(C, 1));
	wait_cntr(F, 1, "the chain's last completion counter");
	EXPECT(fi_cntr_read(D) == 1 && fi_cntr_read(E) == 1, "D %" PRIu64 " E %" PRIu64, fi_cntr_read(D),
	       fi_cntr_read(E));
	struct comp e;
	EXPECT(!cqw_try(&c.tx, &e), "deferred work wrote a CQ entry (ctx %p) without FI_COMPLETION", e.ctx);
	CHK(fi_control(&c.dom->fid, FI_FLUSH_WORK, NULL));
	EXPECT(fi_control(&c.dom->fid, FI_CANCEL_WORK, &w5) != 0, "w5 was still queued after FI_FLUSH_WORK");
	oob_send(0, "done");
	barrier();
	CHK(fi_close(&C->fid));
	CHK(fi_close(&D->fid));
	CHK(fi_close(&E->fid));
	CHK(fi_close(&F->fid));
	ctx_close(&c);
	pass();
}


/* =========================================================== rma_flood */

/* Both ranks flood each other with inject writes through a small transmit
 * budget (tx_size 64): the targets' answers must still get out while
 * each side's budget is full of its own writes (they once deadlocked). */
static void scn_rma_flood(void)
{
	struct ctx c;
	struct opts o = rma_opts(FI_RMA);
	o.tx_size = 64;
	o.rmacntr = 1;
	pair_open(&c, &o, "FI_RMA, tx_size 64");
	enum { N = 5000, SLOT = 64 };
	struct region r;
	region_open(&c, &r, N * SLOT, FI_REMOTE_WRITE, 0xF100 + g_rank);
	int peer = 1 - g_rank;
	region_publish(peer, "f", &r);
	uint64_t key, addr;
	region_learn(peer, "f", &key, &addr);
	static uint8_t b[SLOT];
	for (int i = 0; i < N; i++) {
		fill(b, SLOT, 1000 * g_rank + i);
		POST(fi_inject_write(c.ep, b, SLOT, c.addr[peer], addr + (uint64_t)i * SLOT, key));
	}
	/* every write of ours completes (the counter counts them, FI_WRITE) */
	wait_cntr(c.rmacntr, N, "writes completed");
	barrier();
	for (int i = 0; i < N; i++)
		wait_pattern("flooded write", r.buf + (size_t)i * SLOT, SLOT, 1000 * peer + i);
	barrier();
	region_close(&r);
	ctx_close(&c);
	pass();
}

/* ========================================================== rma_order */

/* One ordering bit (g_arg: rar, raw, war, waw, rma_rar, ..., atomic_waw),
 * asked for in the hints (a provider that does not offer it skips) and
 * checked where breaking it shows in the target's memory. Rank 1 posts
 * windows of operations without waiting for any, all on one block (a
 * write sets every element of a W-byte block to its round number i + 1,
 * a read takes the block back):
 *   WAW  W0 W1 ... Wn: rank 0, looking at the block between its progress
 *        calls, never sees its value go down, and once a window's writes
 *        completed, a read finds what the last of them wrote;
 *   RAW  W0 R0 W1 R1 ...: Ri sees Wi (or a later write, if WAR is not
 *        asked), never an earlier one;
 *   WAR  the same: Ri does not see W(i+1) (an earlier one, if RAW is not
 *        asked);
 *   RAR  rank 0 bumps a counter word with its own stores all along; two
 *        reads back to back: the second sees no less than the first.
 * Generic bits (rar, raw, war, waw) mix fi_write/fi_read with atomic
 * writes and FI_ATOMIC_READ fetches; rma_* use only the RMA calls,
 * atomic_* only atomics. The operations are no larger than the info's
 * max_order_*_size (else the bit says nothing about their data). gnix
 * runs it with a small credit loan, so that the shm wire sends some of
 * the requests by rendezvous (and, FI_GNIX_CMA=0, has them pushed after
 * later ones), which is where its target used to apply them late. */
enum { ORD_W = 512, ORD_ELEMS = ORD_W / 8, ORD_ROUNDS = 10000, ORD_WINDOW = 128 };

static void scn_rma_order(void)
{
	static const struct { const char *name; uint64_t bit; int rma, atomic; char kind; } bits[] = {
		{ "rar", FI_ORDER_RAR, 1, 1, 'r' },
		{ "raw", FI_ORDER_RAW, 1, 1, 'a' },
		{ "war", FI_ORDER_WAR, 1, 1, 'b' },
		{ "waw", FI_ORDER_WAW, 1, 1, 'w' },
		{ "rma_rar", FI_ORDER_RMA_RAR, 1, 0, 'r' },
		{ "rma_raw", FI_ORDER_RMA_RAW, 1, 0, 'a' },
		{ "rma_war", FI_ORDER_RMA_WAR, 1, 0, 'b' },
		{ "rma_waw", FI_ORDER_RMA_WAW, 1, 0, 'w' },
		{ "atomic_rar", FI_ORDER_ATOMIC_RAR, 0, 1, 'r' },
		{ "atomic_raw", FI_ORDER_ATOMIC_RAW, 0, 1, 'a' },
		{ "atomic_war", FI_ORDER_ATOMIC_WAR, 0, 1, 'b' },
		{ "atomic_waw", FI_ORDER_ATOMIC_WAW, 0, 1, 'w' },
	};
	int b = -1;
	for (int k = 0; k < (int)(sizeof bits / sizeof bits[0]); k++)
		if (!strcmp(g_arg, bits[k].name))
			b = k;
	if (b < 0)
		FAIL("rma_order: unknown bit '%s'", g_arg);
	struct ctx c;
	struct opts o = rma_opts(bits[b].atomic ? FI_RMA | FI_ATOMIC : FI_RMA);
	o.msg_order = bits[b].bit;
	char what[64];
	snprintf(what, sizeof what, "FI_RMA%s, msg_order %s", bits[b].atomic ? " | FI_ATOMIC" : "", g_arg);
	pair_open(&c, &o, what);
	struct fi_ep_attr *ea = c.info->ep_attr;
	size_t osize = bits[b].kind == 'a' ? ea->max_order_raw_size
		     : bits[b].kind == 'b' ? ea->max_order_war_size
		     : bits[b].kind == 'w' ? ea->max_order_waw_size : SIZE_MAX;
	if (osize < ORD_W) {
		/* The bit is offered for the headers only: data order says nothing. */
		DEVIATE(0, "%s offered with max_order size %zu < %d", g_arg, osize, ORD_W);
		char why[128];
		snprintf(why, sizeof why, "%s offered, but max_order size %zu < %d", g_arg, osize, ORD_W);
		skip(why);
	}
	size_t count = ORD_ELEMS;
	if (bits[b].atomic) {
		size_t n1 = 0, n2 = 0;
		if (fi_atomicvalid(c.ep, FI_UINT64, FI_ATOMIC_WRITE, &n1) ||
		    fi_fetch_atomicvalid(c.ep, FI_UINT64, FI_ATOMIC_READ, &n2) || n1 < ORD_ELEMS || n2 < ORD_ELEMS)
			skip("FI_UINT64 FI_ATOMIC_WRITE / FI_ATOMIC_READ of 64 elements not offered");
	}
	struct region r;
	if (g_rank == 0) {
		/* [0, W): the block; [W, W + 8): the counter rank 0 bumps. */
		region_open(&c, &r, ORD_W + 64, FI_REMOTE_READ | FI_REMOTE_WRITE, 0x0D3D);
		region_publish(1, "o", &r);
		volatile uint64_t *ctr = (volatile uint64_t *)(r.buf + ORD_W);
		volatile uint64_t *blk0 = (volatile uint64_t *)r.buf;
		uint64_t dl = now_ms() + g_timeout_ms, seen = 0, down = 0, down_from = 0, down_to = 0;
		/* Until rank 1 is done: our own stores, a look at the block, and
		 * progress. */
		while (backlog_take(1, "done") == -100) {
			*ctr = *ctr + 1;
			uint64_t v = *blk0;
			if (v < seen && !down++) {
				down_from = seen;
				down_to = v;
			}
			seen = v;
			progress_all();
			if (try_line(0))
				g_backlog[g_nbacklog++] = strdup(g_line);
			if (now_ms() > dl)
				FAIL("rank 1 never said done");
		}
		if (bits[b].kind == 'w') {
			EXPECT(!down, "%s: the block went down %" PRIu64 " times; first from %" PRIu64 " to %" PRIu64,
			       g_arg, down, down_from, down_to);
			const uint64_t *blk = (const uint64_t *)r.buf;
			for (size_t e = 0; e < count; e++)
				EXPECT(blk[e] == ORD_ROUNDS, "%s: element %zu of the block holds %" PRIu64
				       " after writes 1..%d", g_arg, e, blk[e], ORD_ROUNDS);
		}
		barrier();
		region_close(&r);
		ctx_close(&c);
		pass();
	}
	uint64_t key, base;
	region_learn(0, "o", &key, &base);
	fi_addr_t t = c.addr[0];
	/* One source block per round, one result block per read. */
	uint64_t *src = xmalloc((size_t)ORD_WINDOW * ORD_W);
	uint64_t *res = xmalloc((size_t)2 * ORD_WINDOW * ORD_W);
	void *sd = reg(&c, src, (size_t)ORD_WINDOW * ORD_W);
	void *rd = reg(&c, res, (size_t)2 * ORD_WINDOW * ORD_W);
	static struct fi_context2 x[2 * ORD_WINDOW];
	int nx = 0;
	int kind = bits[b].kind;
	uint64_t bad = 0;
	char first[200] = "";
	for (int i0 = 0; i0 < ORD_ROUNDS; i0 += ORD_WINDOW) {
		int n = ORD_ROUNDS - i0 < ORD_WINDOW ? ORD_ROUNDS - i0 : ORD_WINDOW;
		nx = 0;
		memset(res, 0xff, (size_t)2 * ORD_WINDOW * ORD_W);
		for (int j = 0; j < n; j++) {
			int i = i0 + j;
			uint64_t *blk = src + (size_t)j * ORD_ELEMS;
			for (size_t e = 0; e < count; e++)
				blk[e] = (uint64_t)i + 1;
			/* Which calls: RMA or atomic, by round when both apply. */
			int wa = bits[b].atomic && (!bits[b].rma || (i & 1));
			int ra = bits[b].atomic && (!bits[b].rma || (i & 2));
			uint64_t *r1 = res + (size_t)(2 * j) * ORD_ELEMS, *r2 = r1 + ORD_ELEMS;
			if (kind != 'r') {
				/* (POST evaluates its call again on -FI_EAGAIN.) */
				struct fi_context2 *xc = &x[nx++];
				if (wa)
					POST(fi_atomic(c.ep, blk, count, sd, t, base, key, FI_UINT64, FI_ATOMIC_WRITE, xc));
				else
					POST(fi_write(c.ep, blk, ORD_W, sd, t, base, key, xc));
			}
			if (kind == 'w')
				continue;
			/* A read of the block (RAW, WAR), or two of the counter (RAR). */
			uint64_t at = kind == 'r' ? base + ORD_W : base;
			size_t cnt = kind == 'r' ? 1 : count;
			for (int k = 0; k < (kind == 'r' ? 2 : 1); k++) {
				uint64_t *dst = k ? r2 : r1;
				struct fi_context2 *xc = &x[nx++];
				if (ra)
					POST(fi_fetch_atomic(c.ep, src, cnt, sd, dst, rd, t, at, key, FI_UINT64,
							     FI_ATOMIC_READ, xc));
				else
					POST(fi_read(c.ep, dst, cnt * 8, rd, t, at, key, xc));
			}
		}
		for (int k = 0; k < nx; k++)
			cqw_ok(&c.tx);
		if (kind == 'w') {
			/* The window is over: the block holds its last write. */
			POST(fi_read(c.ep, res, ORD_W, rd, t, base, key, &x[0]));
			cqw_ok(&c.tx);
			for (size_t e = 0; e < count; e++)
				if (res[e] != (uint64_t)(i0 + n) && !bad++)
					snprintf(first, sizeof first, "window ending at round %d: element %zu holds %" PRIu64,
						 i0 + n - 1, e, res[e]);
		}
		for (int j = 0; j < n && kind != 'w'; j++) {
			int i = i0 + j;
			const uint64_t *r1 = res + (size_t)(2 * j) * ORD_ELEMS, *r2 = r1 + ORD_ELEMS;
			int ok = 1;
			if (kind == 'r') {
				ok = r2[0] >= r1[0];
			} else {
				for (size_t e = 0; e < count; e++) {
					if (kind == 'a')
						ok &= r1[e] >= (uint64_t)i + 1 && r1[e] <= (uint64_t)ORD_ROUNDS;
					else
						ok &= r1[e] <= (uint64_t)i + 1;
					ok &= r1[e] == r1[0];
				}
			}
			if (!ok && !bad++)
				snprintf(first, sizeof first, "round %d: read %" PRIu64 " (and %" PRIu64 ")", i, r1[0],
					 kind == 'r' ? r2[0] : r1[count - 1]);
		}
	}
	EXPECT(!bad, "%s broken in %" PRIu64 " of %d rounds; first: %s", g_arg, bad, ORD_ROUNDS, first);
	info("%s held over %d rounds (max_order size %zu)", g_arg, ORD_ROUNDS, osize);
	oob_send(0, "done");
	barrier();
	ctx_close(&c);
	pass();
}

#define RMA_SCENARIOS                                  \
	{ "rma_ops", scn_rma_ops },                    \
	{ "rma_refused", scn_rma_refused },            \
	{ "rma_event", scn_rma_event },                \
	{ "atomic_ops", scn_atomic_ops },              \
	{ "atomic_fadd", scn_atomic_fadd },            \
	{ "trigger", scn_trigger },                    \
	{ "rma_peer_killed", scn_rma_peer_killed },    \
	{ "deferred_work", scn_deferred_work },        \
	{ "rma_flood", scn_rma_flood },                \
	{ "rma_order", scn_rma_order },
