/*
 * Multi-process scenarios (included by fitest.c).  Rank 0 receives, rank 1
 * sends, unless a scenario says otherwise.
 */

#define MIN(a, b) ((a) < (b) ? (a) : (b))

static void pair_open(struct ctx *c, struct opts *o, const char *what)
{
	ctx_open_or_skip(c, o, what);
	exchange(c, o->no_insert);
}

static void wait_cntr(struct fid_cntr *cn, uint64_t v, const char *what)
{
	uint64_t dl = now_ms() + g_timeout_ms;
	for (;;) {
		int r = fi_cntr_wait(cn, v, 100);
		if (r == 0)
			return;
		if (r != -FI_ETIMEDOUT && r != -FI_EAGAIN)
			FAIL("fi_cntr_wait(%s, %" PRIu64 ") = %d (%s), value %" PRIu64 " err %" PRIu64,
			     what, v, r, fi_strerror(-r), fi_cntr_read(cn), fi_cntr_readerr(cn));
		if (now_ms() > dl)
			FAIL("counter %s stuck at %" PRIu64 " (want %" PRIu64 ")", what, fi_cntr_read(cn), v);
	}
}

static void check_flags(const struct comp *e, uint64_t want, const char *what)
{
	DEVIATE((e->flags & want) == want, "%s: completion flags 0x%" PRIx64 " lack 0x%" PRIx64,
		what, e->flags, want);
}

/* ================================================================ msg_ops */

static void scn_msg_ops(void)
{
	struct ctx c;
	struct opts o = defopts();
	pair_open(&c, &o, "msg|tagged");
	size_t inj = MIN(c.info->tx_attr->inject_size, 48);
	enum { N = 6 };
	size_t lens[N] = { 1000, 1000, 1000, inj, 1000, inj };
	static char b[N][1024];
	struct fi_context2 x[N];
	void *d = reg(&c, b, sizeof b);
	void *ds[4] = { d, d, d, d };
	if (g_rank == 0) {
		POST(fi_recv(c.ep, b[0], 1024, d, FI_ADDR_UNSPEC, &x[0]));
		size_t niov = MIN(3, c.info->rx_attr->iov_limit);
		struct iovec iov[3] = { { b[1], 300 }, { b[1] + 300, 300 }, { b[1] + 600, 424 } };
		if (niov < 3)
			iov[niov - 1].iov_len = 1024 - 300 * (niov - 1);
		POST(fi_recvv(c.ep, iov, ds, niov, FI_ADDR_UNSPEC, &x[1]));
		struct iovec iov2[2] = { { b[2], 512 }, { b[2] + 512, 512 } };
		struct fi_msg m = { .msg_iov = iov2, .desc = ds, .iov_count = MIN(2, niov),
				    .addr = FI_ADDR_UNSPEC, .context = &x[2] };
		if (m.iov_count == 1)
			iov2[0].iov_len = 1024;
		POST(fi_recvmsg(c.ep, &m, FI_COMPLETION));
		for (int i = 3; i < N; i++)
			POST(fi_recv(c.ep, b[i], 1024, d, FI_ADDR_UNSPEC, &x[i]));
		oob_send(1, "posted");
		int seen[N] = { 0 };
		for (int k = 0; k < N; k++) {
			struct comp e = cqw_ok(&c.rx);
			int i = ctx_index_once(&e, x, N, seen);
			EXPECT(e.len == lens[i], "recv %d: len %zu want %zu", i, e.len, lens[i]);
			check_flags(&e, FI_RECV | FI_MSG, "recv");
			EXPECT(!(e.flags & FI_TAGGED), "untagged recv %d flagged FI_TAGGED", i);
			check("msg", b[i], lens[i], 100 + i);
			if (i == 4 || i == 5) {
				EXPECT(e.flags & FI_REMOTE_CQ_DATA, "recv %d: no FI_REMOTE_CQ_DATA", i);
				EXPECT(e.data == 0xdead0000u + i, "recv %d: data 0x%" PRIx64, i, e.data);
			} else {
				EXPECT(!(e.flags & FI_REMOTE_CQ_DATA), "recv %d: spurious FI_REMOTE_CQ_DATA", i);
			}
		}
	} else {
		for (int i = 0; i < N; i++)
			fill(b[i], lens[i], 100 + i);
		size_t niov = MIN(3, c.info->tx_attr->iov_limit);
		oob_wait_progress(0, "posted");
		POST(fi_send(c.ep, b[0], 1000, d, c.addr[0], &x[0]));
		struct iovec iov[3] = { { b[1], 100 }, { b[1] + 100, 400 }, { b[1] + 500, 500 } };
		if (niov < 3)
			iov[niov - 1].iov_len = 1000 - 100 * (niov == 2);
		POST(fi_sendv(c.ep, iov, ds, niov, c.addr[0], &x[1]));
		struct iovec iov2[2] = { { b[2], 500 }, { b[2] + 500, 500 } };
		struct fi_msg m = { .msg_iov = iov2, .desc = ds, .iov_count = MIN(2, niov),
				    .addr = c.addr[0], .context = &x[2] };
		if (m.iov_count == 1)
			iov2[0].iov_len = 1000;
		POST(fi_sendmsg(c.ep, &m, FI_COMPLETION));
		POST(fi_inject(c.ep, b[3], inj, c.addr[0]));
		POST(fi_senddata(c.ep, b[4], 1000, d, 0xdead0004u, c.addr[0], &x[4]));
		POST(fi_injectdata(c.ep, b[5], inj, 0xdead0005u, c.addr[0]));
		int seen[N] = { 0 };
		for (int k = 0; k < 4; k++) {
			struct comp e = cqw_ok(&c.tx);
			int i = ctx_index_once(&e, x, N, seen);
			EXPECT(i != 3 && i != 5, "inject %d produced a completion", i);
			check_flags(&e, FI_SEND | FI_MSG, "send");
		}
		cqw_none(&c.tx, 30); /* inject never completes */
	}
	finish(&c);
}

/* ================================================================ tagged_ops */

static void scn_tagged_ops(void)
{
	struct ctx c;
	struct opts o = defopts();
	pair_open(&c, &o, "msg|tagged");
	size_t inj = MIN(c.info->tx_attr->inject_size, 40);
	enum { N = 7 };
	size_t lens[N] = { 1000, 2000, 1500, inj, 1000, inj, 3000 };
	uint64_t stag[N] = { 0x1000, 0x1010, 0x102b, 0x1030, 0x1040, 0x1050, 0xffff000000001060ull };
	static char b[N][4096];
	struct fi_context2 x[N];
	void *d = reg(&c, b, sizeof b);
	void *ds[4] = { d, d, d, d };
	if (g_rank == 0) {
		size_t niov = MIN(3, c.info->rx_attr->iov_limit);
		for (int i = N - 1; i >= 0; i--) { /* post in reverse tag order */
			uint64_t tag = stag[i], ign = 0;
			if (i == 2) { tag = 0x1020; ign = 0xf; }
			if (i == 1) {
				struct iovec iov[3] = { { b[1], 1000 }, { b[1] + 1000, 1000 }, { b[1] + 2000, 2096 } };
				if (niov < 3)
					iov[niov - 1].iov_len = 4096 - 1000 * (niov - 1);
				POST(fi_trecvv(c.ep, iov, ds, niov, FI_ADDR_UNSPEC, tag, ign, &x[i]));
			} else if (i == 4 || i == 6) {
				struct iovec iov = { b[i], 4096 };
				struct fi_msg_tagged m = { .msg_iov = &iov, .desc = ds, .iov_count = 1,
							   .addr = FI_ADDR_UNSPEC, .tag = tag, .ignore = ign,
							   .context = &x[i] };
				POST(fi_trecvmsg(c.ep, &m, FI_COMPLETION));
			} else {
				POST(fi_trecv(c.ep, b[i], 4096, d, FI_ADDR_UNSPEC, tag, ign, &x[i]));
			}
		}
		oob_send(1, "posted");
		int seen[N] = { 0 };
		for (int k = 0; k < N; k++) {
			struct comp e = cqw_ok(&c.rx);
			int i = ctx_index_once(&e, x, N, seen);
			EXPECT(e.len == lens[i], "trecv %d: len %zu want %zu", i, e.len, lens[i]);
			EXPECT(e.tag == stag[i], "trecv %d: tag 0x%" PRIx64 " want 0x%" PRIx64, i, e.tag, stag[i]);
			check_flags(&e, FI_RECV | FI_TAGGED, "trecv");
			check("tagged", b[i], lens[i], 300 + i);
			if (i == 4 || i == 5) {
				EXPECT(e.flags & FI_REMOTE_CQ_DATA, "trecv %d: no FI_REMOTE_CQ_DATA", i);
				EXPECT(e.data == 0xbeef0000u + i, "trecv %d: data 0x%" PRIx64, i, e.data);
			} else {
				EXPECT(!(e.flags & FI_REMOTE_CQ_DATA), "trecv %d: spurious FI_REMOTE_CQ_DATA", i);
			}
		}
	} else {
		for (int i = 0; i < N; i++)
			fill(b[i], lens[i], 300 + i);
		size_t niov = MIN(3, c.info->tx_attr->iov_limit);
		oob_wait_progress(0, "posted");
		POST(fi_tsend(c.ep, b[0], lens[0], d, c.addr[0], stag[0], &x[0]));
		struct iovec iov[3] = { { b[1], 700 }, { b[1] + 700, 700 }, { b[1] + 1400, 600 } };
		if (niov < 3)
			iov[niov - 1].iov_len = 2000 - 700 * (niov - 1);
		POST(fi_tsendv(c.ep, iov, ds, niov, c.addr[0], stag[1], &x[1]));
		struct iovec iov2 = { b[2], lens[2] };
		struct fi_msg_tagged m = { .msg_iov = &iov2, .desc = ds, .iov_count = 1,
					   .addr = c.addr[0], .tag = stag[2], .context = &x[2] };
		POST(fi_tsendmsg(c.ep, &m, FI_COMPLETION));
		POST(fi_tinject(c.ep, b[3], inj, c.addr[0], stag[3]));
		POST(fi_tsenddata(c.ep, b[4], lens[4], d, 0xbeef0004u, c.addr[0], stag[4], &x[4]));
		POST(fi_tinjectdata(c.ep, b[5], inj, 0xbeef0005u, c.addr[0], stag[5]));
		POST(fi_tsend(c.ep, b[6], lens[6], d, c.addr[0], stag[6], &x[6]));
		int seen[N] = { 0 };
		for (int k = 0; k < 5; k++) {
			struct comp e = cqw_ok(&c.tx);
			int i = ctx_index_once(&e, x, N, seen);
			EXPECT(i != 3 && i != 5, "inject %d produced a completion", i);
			check_flags(&e, FI_SEND | FI_TAGGED, "tsend");
		}
		cqw_none(&c.tx, 30);
	}
	finish(&c);
}

/* ================================================================ cq_format */

static void scn_cq_format(void)
{
	struct ctx c;
	struct opts o = defopts();
	const char *a = g_arg;
	o.fmt = !strcmp(a, "context") ? FI_CQ_FORMAT_CONTEXT : !strcmp(a, "msg") ? FI_CQ_FORMAT_MSG
	      : !strcmp(a, "data") ? FI_CQ_FORMAT_DATA : FI_CQ_FORMAT_TAGGED;
	pair_open(&c, &o, "cq format");
	enum { N = 8 };
	static char b[N][256];
	struct fi_context2 x[N];
	void *d = reg(&c, b, sizeof b);
	size_t sz = fmt_size(o.fmt);
	char raw[N * sizeof(struct fi_cq_tagged_entry)];
	struct fid_cq *cq = g_rank == 0 ? c.rx.cq : c.tx.cq;
	if (g_rank == 0) {
		for (int i = 0; i < N; i++)
			POST(fi_trecv(c.ep, b[i], 256, d, FI_ADDR_UNSPEC, 0x70 + i, 0, &x[i]));
		oob_send(1, "posted");
	} else {
		oob_wait_progress(0, "posted");
		for (int i = 0; i < N; i++) {
			fill(b[i], 100 + i, 40 + i);
			POST(fi_tsenddata(c.ep, b[i], 100 + i, d, 0xd0 + i, c.addr[0], 0x70 + i, &x[i]));
		}
	}
	/* read all N with count > 1 */
	int got = 0, maxbatch = 0;
	uint64_t dl = now_ms() + g_timeout_ms;
	while (got < N) {
		ssize_t n = fi_cq_read(cq, raw + got * sz, N - got);
		if (n == -FI_EAGAIN) {
			if (now_ms() > dl)
				FAIL("timeout: %d of %d completions", got, N);
			continue;
		}
		if (n < 0)
			FAIL("fi_cq_read = %zd (%s)", n, fi_strerror((int)-n));
		got += (int)n;
		if (n > maxbatch)
			maxbatch = (int)n;
	}
	EXPECT_RET(fi_cq_read(cq, raw, 1), -FI_EAGAIN);
	int seen[N] = { 0 };
	for (int k = 0; k < N; k++) {
		struct comp e;
		raw_to_comp(o.fmt, raw + k * sz, &e);
		int i = ctx_index_once(&e, x, N, seen);
		if (o.fmt == FI_CQ_FORMAT_CONTEXT)
			continue;
		if (g_rank == 0) {
			check_flags(&e, FI_RECV | FI_TAGGED | FI_REMOTE_CQ_DATA, "recv");
			EXPECT(e.len == (size_t)(100 + i), "len %zu", e.len);
			check("cq_format", b[i], 100 + i, 40 + i);
			if (o.fmt != FI_CQ_FORMAT_MSG)
				EXPECT(e.data == (uint64_t)(0xd0 + i), "data 0x%" PRIx64, e.data);
			if (o.fmt == FI_CQ_FORMAT_TAGGED)
				EXPECT(e.tag == (uint64_t)(0x70 + i), "tag 0x%" PRIx64, e.tag);
		} else {
			check_flags(&e, FI_SEND | FI_TAGGED, "send");
			EXPECT(!(e.flags & (FI_RECV | FI_REMOTE_CQ_DATA)), "send flags 0x%" PRIx64, e.flags);
		}
	}
	info("format %s: max entries per fi_cq_read %d", a, maxbatch);
	finish(&c);
}

/* ================================================================ FI_SOURCE */

static void scn_source(void)
{
	struct ctx c;
	struct opts o = defopts();
	o.caps = FI_MSG | FI_TAGGED | FI_SOURCE;
	o.from = 1;
	pair_open(&c, &o, "FI_SOURCE");
	static char b[3][2048];
	struct fi_context2 x[3];
	void *d = reg(&c, b, sizeof b);
	if (g_rank == 0) {
		POST(fi_recv(c.ep, b[0], 2048, d, FI_ADDR_UNSPEC, &x[0]));
		POST(fi_trecv(c.ep, b[1], 2048, d, FI_ADDR_UNSPEC, 9, 0, &x[1]));
		oob_send(1, "posted");
		fi_addr_t back = FI_ADDR_NOTAVAIL;
		for (int k = 0; k < 2; k++) {
			struct comp e = cqw_ok(&c.rx);
			EXPECT(e.src == c.addr[1], "fi_cq_readfrom src %" PRIu64 " want %" PRIu64, e.src, c.addr[1]);
			back = e.src;
		}
		check("src msg", b[0], 1000, 1);
		check("src tmsg", b[1], 2000, 2);
		fill(b[2], 500, 3); /* reply through the fi_addr readfrom gave */
		POST(fi_send(c.ep, b[2], 500, d, back, &x[2]));
		(void)cqw_ok(&c.tx);
	} else {
		POST(fi_recv(c.ep, b[2], 2048, d, FI_ADDR_UNSPEC, &x[2]));
		fill(b[0], 1000, 1);
		fill(b[1], 2000, 2);
		oob_wait_progress(0, "posted");
		POST(fi_send(c.ep, b[0], 1000, d, c.addr[0], &x[0]));
		POST(fi_tsend(c.ep, b[1], 2000, d, c.addr[0], 9, &x[1]));
		(void)cqw_ok(&c.tx);
		(void)cqw_ok(&c.tx);
		struct comp e = cqw_ok(&c.rx);
		EXPECT(e.ctx == &x[2] && e.len == 500, "reply");
		EXPECT(e.src == c.addr[0], "reply src %" PRIu64, e.src);
		check("reply", b[2], 500, 3);
	}
	finish(&c);
}

static void scn_source_err(void)
{
	struct ctx c;
	struct opts o = defopts();
	o.caps = FI_MSG | FI_TAGGED | FI_SOURCE | FI_SOURCE_ERR;
	o.from = 1;
	o.no_insert = g_rank == 0; /* the receiver does not know the sender */
	pair_open(&c, &o, "FI_SOURCE_ERR not advertised");
	static char b[2][2048];
	struct fi_context2 x[2];
	void *d = reg(&c, b, sizeof b);
	if (g_rank == 0) {
		POST(fi_recv(c.ep, b[0], 2048, d, FI_ADDR_UNSPEC, &x[0]));
		oob_send(1, "posted");
		struct comp e = cqw_get(&c.rx);
		EXPECT(e.err == FI_EADDRNOTAVAIL, "err %d (%s), want FI_EADDRNOTAVAIL", e.err, fi_strerror(e.err));
		EXPECT(e.ctx == &x[0], "op_context %p", e.ctx);
		EXPECT(e.err_data_size == c.namelen[1] && !memcmp(e.err_data, c.name[1], c.namelen[1]),
		       "err_data (%zu bytes) is not the sender's address (%zu bytes)", e.err_data_size, c.namelen[1]);
		DEVIATE(e.len == 700, "len %zu", e.len);
		check("source_err data", b[0], 700, 5);
		fi_addr_t fa;
		EXPECT_RET(fi_av_insert(c.av, e.err_data, 1, &fa, 0, NULL), 1);
		fill(b[1], 300, 6);
		POST(fi_send(c.ep, b[1], 300, d, fa, &x[1]));
		(void)cqw_ok(&c.tx);
	} else {
		POST(fi_recv(c.ep, b[1], 2048, d, FI_ADDR_UNSPEC, &x[1]));
		fill(b[0], 700, 5);
		oob_wait_progress(0, "posted");
		POST(fi_send(c.ep, b[0], 700, d, c.addr[0], &x[0]));
		(void)cqw_ok(&c.tx);
		struct comp e = cqw_ok(&c.rx);
		EXPECT(e.len == 300 && e.src == c.addr[0], "reply");
		check("reply", b[1], 300, 6);
	}
	finish(&c);
}

/* ================================================================ directed (3 procs) */

static void scn_directed(void)
{
	struct ctx c;
	struct opts o = defopts();
	o.caps = FI_MSG | FI_TAGGED | FI_DIRECTED_RECV;
	pair_open(&c, &o, "FI_DIRECTED_RECV");
	EXPECT(g_nprocs == 3, "needs 3 processes");
	static char b[6][1024];
	struct fi_context2 x[6];
	void *d = reg(&c, b, sizeof b);
	if (g_rank == 0) {
		/* expected path: directed receives posted before anything is sent */
		POST(fi_trecv(c.ep, b[0], 1024, d, c.addr[2], 8, 0, &x[0]));
		POST(fi_trecv(c.ep, b[1], 1024, d, c.addr[1], 8, 0, &x[1]));
		oob_send_all("go");
		oob_wait_progress(-2, "sent");
		oob_wait_progress(-2, "sent");
		/* unexpected path: both senders' messages are out; take rank 2's first */
		POST(fi_trecv(c.ep, b[2], 1024, d, c.addr[2], 7, 0, &x[2]));
		POST(fi_recv(c.ep, b[3], 1024, d, c.addr[2], &x[3]));
		POST(fi_trecv(c.ep, b[4], 1024, d, c.addr[1], 7, 0, &x[4]));
		POST(fi_recv(c.ep, b[5], 1024, d, c.addr[1], &x[5]));
		int from[6] = { 2, 1, 2, 2, 1, 1 };
		int kind[6] = { 8, 8, 7, 0, 7, 0 };
		int seen[6] = { 0 };
		for (int k = 0; k < 6; k++) {
			struct comp e = cqw_ok(&c.rx);
			int i = ctx_index_once(&e, x, 6, seen);
			size_t want = 100 + from[i] * 10 + kind[i];
			EXPECT(e.len == want, "recv %d (directed to rank %d): len %zu want %zu -> matched the wrong sender",
			       i, from[i], e.len, want);
			check("directed", b[i], want, from[i] * 100 + kind[i]);
		}
	} else {
		int kinds[3] = { 8, 7, 0 };
		for (int k = 0; k < 3; k++)
			fill(b[k], 100 + g_rank * 10 + kinds[k], g_rank * 100 + kinds[k]);
		oob_wait_progress(0, "go");
		POST(fi_tsend(c.ep, b[0], 100 + g_rank * 10 + 8, d, c.addr[0], 8, &x[0]));
		POST(fi_tsend(c.ep, b[1], 100 + g_rank * 10 + 7, d, c.addr[0], 7, &x[1]));
		POST(fi_send(c.ep, b[2], 100 + g_rank * 10, d, c.addr[0], &x[2]));
		oob_send(0, "sent");
		for (int k = 0; k < 3; k++)
			(void)cqw_ok(&c.tx);
	}
	finish(&c);
}

/* ================================================================ selective completion */

static void scn_selective(void)
{
	struct ctx c;
	struct opts o = defopts();
	o.txcq_flags = FI_SELECTIVE_COMPLETION;
	o.rxcq_flags = FI_SELECTIVE_COMPLETION;
	o.txcntr = o.rxcntr = 1;
	pair_open(&c, &o, "selective completion + counters");
	enum { N = 6 };
	static char b[N][1024];
	struct fi_context2 x[N];
	void *d = reg(&c, b, sizeof b);
	if (g_rank == 0) {
		for (int i = 0; i < N; i++) {
			struct iovec iov = { b[i], 1024 };
			struct fi_msg m = { .msg_iov = &iov, .desc = &d, .iov_count = 1,
					    .addr = FI_ADDR_UNSPEC, .context = &x[i] };
			if (i == 0)
				POST(fi_recv(c.ep, b[i], 1024, d, FI_ADDR_UNSPEC, &x[i]));
			else
				POST(fi_recvmsg(c.ep, &m, i == N - 1 ? FI_COMPLETION : 0));
		}
		oob_send(1, "posted");
		wait_cntr(c.rxcntr, N, "rxcntr");
		struct comp e = cqw_ok(&c.rx);
		EXPECT(e.ctx == &x[N - 1], "the one FI_COMPLETION recv should complete, got ctx %p", e.ctx);
		EXPECT(e.len == 10 * (N - 1) + 10, "len");
		cqw_none(&c.rx, 100);
		EXPECT(fi_cntr_read(c.rxcntr) == N && fi_cntr_readerr(c.rxcntr) == 0, "rx counter");
		for (int i = 0; i < N; i++)
			check("selective", b[i], 10 * i + 10, 60 + i);
	} else {
		for (int i = 0; i < N; i++)
			fill(b[i], 10 * i + 10, 60 + i);
		oob_wait_progress(0, "posted");
		POST(fi_send(c.ep, b[0], 10, d, c.addr[0], &x[0]));
		POST(fi_send(c.ep, b[1], 20, d, c.addr[0], &x[1]));
		for (int i = 2; i < 5; i++) {
			struct iovec iov = { b[i], 10 * i + 10 };
			struct fi_msg m = { .msg_iov = &iov, .desc = &d, .iov_count = 1,
					    .addr = c.addr[0], .context = &x[i] };
			POST(fi_sendmsg(c.ep, &m, i == 3 ? FI_COMPLETION : 0));
		}
		POST(fi_inject(c.ep, b[5], 60, c.addr[0]));
		wait_cntr(c.txcntr, N, "txcntr");
		struct comp e = cqw_ok(&c.tx);
		EXPECT(e.ctx == &x[3], "the one FI_COMPLETION send should complete, got ctx %p", e.ctx);
		cqw_none(&c.tx, 100);
		EXPECT(fi_cntr_read(c.txcntr) == N && fi_cntr_readerr(c.txcntr) == 0, "tx counter");
	}
	finish(&c);
}

/* ================================================================ op flags */

static void scn_op_flags(void)
{
	struct ctx c;
	struct opts o = defopts();
	pair_open(&c, &o, "msg|tagged");
	/* The last two: FI_INJECT as a flag lets the buffer go when the call
	 * returns, but (unlike fi_inject) still completes like any send. */
	enum { N = 8 };
	uint64_t fl[N] = { FI_INJECT_COMPLETE, FI_TRANSMIT_COMPLETE, FI_DELIVERY_COMPLETE,
			   FI_INJECT_COMPLETE, FI_TRANSMIT_COMPLETE, FI_DELIVERY_COMPLETE,
			   FI_INJECT, FI_INJECT | FI_TRANSMIT_COMPLETE };
	size_t len[N] = { 100, 100, 100, 1 << 20, 1 << 20, 1 << 20, 64, 64 };
	char *b[N];
	void *d[N];
	struct fi_context2 x[N];
	for (int i = 0; i < N; i++) {
		b[i] = xmalloc(len[i]);
		d[i] = reg(&c, b[i], len[i]);
	}
	if (g_rank == 0) {
		for (int i = 0; i < N; i++)
			POST(fi_trecv(c.ep, b[i], len[i], d[i], FI_ADDR_UNSPEC, i, 0, &x[i]));
		oob_send(1, "posted");
		oob_wait_progress(1, "dc"); /* the first delivery-complete send completed */
		DEVIATE(b[2][0] == (char)pat(82, 0) && b[2][99] == (char)pat(82, 99),
			"FI_DELIVERY_COMPLETE: data not at the target when the sender completed");
		oob_wait_progress(1, "dc");
		DEVIATE(b[5][0] == (char)pat(85, 0) && b[5][len[5] - 1] == (char)pat(85, len[5] - 1),
			"FI_DELIVERY_COMPLETE (large): data not at the target when the sender completed");
		for (int k = 0; k < N; k++) {
			struct comp e = cqw_ok(&c.rx);
			int i = (int)((struct fi_context2 *)e.ctx - x);
			EXPECT(i >= 0 && i < N && e.len == len[i], "ctx/len");
			check("op_flags", b[i], len[i], 80 + i);
		}
	} else {
		for (int i = 0; i < N; i++)
			fill(b[i], len[i], 80 + i);
		oob_wait_progress(0, "posted");
		for (int i = 0; i < N; i++) {
			struct iovec iov = { b[i], len[i] };
			struct fi_msg_tagged m = { .msg_iov = &iov, .desc = &d[i], .iov_count = 1,
						   .addr = c.addr[0], .tag = i, .context = &x[i] };
			POST(fi_tsendmsg(c.ep, &m, fl[i] | FI_COMPLETION));
			if (fl[i] & FI_INJECT)
				memset(b[i], 0xee, len[i]); /* reusable on return */
			struct comp e = cqw_ok(&c.tx);
			EXPECT(e.ctx == &x[i], "ctx");
			memset(b[i], 0xee, len[i]); /* buffer reusable once completed */
			if (fl[i] == FI_DELIVERY_COMPLETE)
				oob_send(0, "dc");
		}
	}
	finish(&c);
}

/* ================================================================ truncation */

static void scn_trunc(void)
{
	struct ctx c;
	struct opts o = defopts();
	pair_open(&c, &o, "msg|tagged");
	int eager = strcmp(g_arg, "large") != 0, large = strcmp(g_arg, "eager") != 0;
	size_t big = 1 << 20, half = 512 << 10;
	char *sb = xmalloc(big), *rb = xmalloc(big);
	void *sd = reg(&c, sb, big), *rd = reg(&c, rb, big);
	struct fi_context2 x[4];
	int n = 2 + eager + large;
	if (g_rank == 0) {
		memset(rb, 0, big);
		if (eager)
			POST(fi_recv(c.ep, rb, 100, rd, FI_ADDR_UNSPEC, &x[0]));
		if (large)
			POST(fi_trecv(c.ep, rb + 4096, half, rd, FI_ADDR_UNSPEC, 5, 0, &x[1]));
		POST(fi_recv(c.ep, rb + 1024 * 2, 1000, rd, FI_ADDR_UNSPEC, &x[2]));
		POST(fi_trecv(c.ep, rb + 1024 * 3, 1000, rd, FI_ADDR_UNSPEC, 6, 0, &x[3]));
		oob_send(1, "posted");
		for (int k = 0; k < n; k++) {
			struct comp e = cqw_get(&c.rx);
			int i = (int)((struct fi_context2 *)e.ctx - x);
			EXPECT(i >= 0 && i < 4, "ctx %p", e.ctx);
			if (i == 0) {
				EXPECT(e.err == FI_ETRUNC, "eager truncation: err %d (%s)", e.err, fi_strerror(e.err));
				DEVIATE(e.olen == 900, "eager truncation: olen %zu want 900", e.olen);
				DEVIATE(e.len == 100, "eager truncation: len %zu want 100", e.len);
				check_flags(&e, FI_RECV | FI_MSG, "trunc");
				DEVIATE(matches(rb, 100, 1), "eager truncation: the 100 bytes that fit were not delivered");
				EXPECT(rb[100] == 0, "eager truncation wrote past the buffer");
			} else if (i == 1) {
				EXPECT(e.err == FI_ETRUNC, "large truncation: err %d (%s)", e.err, fi_strerror(e.err));
				DEVIATE(e.olen == big - half, "large truncation: olen %zu want %zu", e.olen, big - half);
				DEVIATE(e.len == half, "large truncation: len %zu want %zu", e.len, half);
				DEVIATE(e.tag == 5, "large truncation: tag 0x%" PRIx64, e.tag);
				check_flags(&e, FI_RECV | FI_TAGGED, "trunc");
				DEVIATE(matches(rb + 4096, half, 2), "large truncation: the bytes that fit were not delivered");
				EXPECT(rb[4096 + half] == 0, "large truncation wrote past the buffer");
			} else {
				EXPECT(!e.err, "message after truncation: err %d", e.err);
				EXPECT(e.len == 500, "len");
				check("after truncation", rb + 1024 * i, 500, 3);
			}
		}
	} else {
		oob_wait_progress(0, "posted");
		fill(sb, 1000, 1);
		if (eager)
			POST(fi_send(c.ep, sb, 1000, sd, c.addr[0], &x[0]));
		char *lb = xmalloc(big);
		void *ld = reg(&c, lb, big);
		fill(lb, big, 2);
		if (large)
			POST(fi_tsend(c.ep, lb, big, ld, c.addr[0], 5, &x[1]));
		fill(sb + 4096, 500, 3);
		POST(fi_send(c.ep, sb + 4096, 500, sd, c.addr[0], &x[2]));
		POST(fi_tsend(c.ep, sb + 4096, 500, sd, c.addr[0], 6, &x[3]));
		for (int k = 0; k < n; k++) {
			struct comp e = cqw_get(&c.tx);
			DEVIATE(!e.err, "sender of a truncated message got err %d", e.err);
		}
	}
	finish(&c);
}

/* ================================================================ unexpected */

static size_t unex_size(int i)
{
	static const size_t s[6] = { 0, 8, 1000, 65536, 1 << 20, 3000 };
	return s[i % 6];
}

static void scn_unexpected(void)
{
	struct ctx c;
	struct opts o = defopts();
	pair_open(&c, &o, "msg|tagged");
	enum { N = 36 };
	size_t total = 0, off[N];
	for (int i = 0; i < N; i++) {
		off[i] = total;
		total += unex_size(i) + 64;
	}
	char *b = xmalloc(total);
	void *d = reg(&c, b, total);
	struct fi_context2 x[N];
	if (g_rank == 0) {
		oob_wait_progress(1, "sent");
		/* let the messages arrive with nothing posted */
		uint64_t until = now_ms() + 100;
		while (now_ms() < until)
			progress_all();
		EXPECT(c.rx.head == c.rx.tail, "completion before any receive was posted");
		for (int i = N - 1; i >= 0; i -= 2) /* tagged ones (odd i) in reverse */
			POST(fi_trecv(c.ep, b + off[i], unex_size(i), d, FI_ADDR_UNSPEC, 0x500 + i, 0, &x[i]));
		for (int i = 0; i < N; i += 2) /* untagged in order */
			POST(fi_recv(c.ep, b + off[i], unex_size(i), d, FI_ADDR_UNSPEC, &x[i]));
		int seen[N] = { 0 };
		for (int k = 0; k < N; k++) {
			struct comp e = cqw_ok(&c.rx);
			int i = ctx_index_once(&e, x, N, seen);
			EXPECT(e.len == unex_size(i), "msg %d: len %zu want %zu", i, e.len, unex_size(i));
			if (i & 1)
				EXPECT(e.tag == (uint64_t)(0x500 + i), "tag");
			check("unexpected", b + off[i], unex_size(i), 500 + i);
		}
	} else {
		for (int i = 0; i < N; i++) {
			fill(b + off[i], unex_size(i), 500 + i);
			if (i & 1)
				POST(fi_tsend(c.ep, b + off[i], unex_size(i), d, c.addr[0], 0x500 + i, &x[i]));
			else
				POST(fi_send(c.ep, b + off[i], unex_size(i), d, c.addr[0], &x[i]));
		}
		oob_send(0, "sent");
		for (int k = 0; k < N; k++)
			(void)cqw_ok(&c.tx);
	}
	finish(&c);
}

/* ================================================================ ordering */

static size_t ord_size(int i)
{
	static const size_t s[12] = { 0, 1, 17, 64, 333, 1024, 4096, 8191, 65536, 100000, 1 << 20, 70000 };
	if (i % 50 == 7)
		return 4 << 20;
	return s[(i * 7 + 3) % 12];
}

static void scn_ordering(void)
{
	struct ctx c;
	struct opts o = defopts();
	pair_open(&c, &o, "msg|tagged");
	int n = g_arg[0] ? atoi(g_arg) : 200;
	size_t total = 0, *off = calloc(n, sizeof *off);
	for (int i = 0; i < n; i++) {
		off[i] = total;
		total += ord_size(i);
	}
	char *b = xmalloc(total);
	void *d = reg(&c, b, total);
	struct fi_context2 *x = calloc(n, sizeof *x);
	if (g_rank == 0) {
		memset(b, 0, total);
		for (int i = 0; i < n / 2; i++) {
			if (i & 1)
				POST(fi_recv(c.ep, b + off[i], ord_size(i), d, FI_ADDR_UNSPEC, &x[i]));
			else
				POST(fi_trecv(c.ep, b + off[i], ord_size(i), d, FI_ADDR_UNSPEC, 0x77, 0, &x[i]));
		}
		oob_send(1, "posted");
		for (int i = n / 2; i < n; i++) { /* races with arrivals */
			if (i & 1)
				POST(fi_recv(c.ep, b + off[i], ord_size(i), d, FI_ADDR_UNSPEC, &x[i]));
			else
				POST(fi_trecv(c.ep, b + off[i], ord_size(i), d, FI_ADDR_UNSPEC, 0x77, 0, &x[i]));
		}
		int *seen = calloc(n, sizeof *seen);
		for (int k = 0; k < n; k++) {
			struct comp e = cqw_get(&c.rx);
			int i = ctx_index_once(&e, x, n, seen);
			EXPECT(!e.err, "recv %d: err %d (%s) olen %zu -> messages matched out of order", i, e.err,
			       fi_strerror(e.err), e.olen);
			EXPECT(e.len == ord_size(i), "recv %d: len %zu want %zu (out of order)", i, e.len, ord_size(i));
			check("ordering", b + off[i], ord_size(i), 1000 + i);
		}
	} else {
		for (int i = 0; i < n; i++)
			fill(b + off[i], ord_size(i), 1000 + i);
		oob_wait_progress(0, "posted");
		for (int i = 0; i < n; i++) {
			if (i & 1)
				POST(fi_send(c.ep, b + off[i], ord_size(i), d, c.addr[0], &x[i]));
			else
				POST(fi_tsend(c.ep, b + off[i], ord_size(i), d, c.addr[0], 0x77, &x[i]));
		}
		for (int k = 0; k < n; k++)
			(void)cqw_ok(&c.tx);
	}
	finish(&c);
}

/* ================================================================ many posted receives */

static void scn_many_recvs(void)
{
	struct ctx c;
	struct opts o = defopts();
	pair_open(&c, &o, "msg|tagged");
	enum { N = 10000 };
	uint64_t *b = xmalloc(N * 8);
	void *d = reg(&c, b, N * 8);
	struct fi_context2 *x = calloc(N, sizeof *x);
	if (g_rank == 0) {
		int posted = 0;
		uint64_t stuck = 0;
		while (posted < N) {
			b[posted] = ~0ull;
			ssize_t r = fi_trecv(c.ep, &b[posted], 8, d, FI_ADDR_UNSPEC, 0x10000 + posted, 0, &x[posted]);
			if (r == -FI_EAGAIN) {
				progress_all();
				if (!stuck)
					stuck = now_ms();
				else if (now_ms() - stuck > 1000)
					break; /* a provider receive-queue limit */
				continue;
			}
			CHK(r);
			stuck = 0;
			posted++;
		}
		DEVIATE(posted == N, "only %d of %d receives could be posted before anything arrived", posted, N);
		EXPECT(c.rx.head == c.rx.tail, "completions before anything was sent");
		oob_send(1, "posted");
		int *seen = calloc(N, sizeof *seen);
		for (int k = 0; k < N; k++) {
			while (posted < N) { /* the rest, as the queue drains */
				b[posted] = ~0ull;
				ssize_t r = fi_trecv(c.ep, &b[posted], 8, d, FI_ADDR_UNSPEC, 0x10000 + posted, 0, &x[posted]);
				if (r == -FI_EAGAIN)
					break;
				CHK(r);
				posted++;
			}
			struct comp e = cqw_ok(&c.rx);
			int i = ctx_index_once(&e, x, N, seen);
			EXPECT(e.tag == (uint64_t)(0x10000 + i) && e.len == 8, "tag/len");
			EXPECT(b[i] == (uint64_t)i * 0x9e3779b97f4a7c15ull, "recv %d: payload", i);
		}
	} else {
		for (int i = 0; i < N; i++)
			b[i] = (uint64_t)i * 0x9e3779b97f4a7c15ull;
		oob_wait_progress(0, "posted");
		for (int i = N - 1; i >= 0; i--)
			POST(fi_tsend(c.ep, &b[i], 8, d, c.addr[0], 0x10000 + i, &x[i]));
		for (int k = 0; k < N; k++)
			(void)cqw_ok(&c.tx);
	}
	finish(&c);
}

/* ================================================================ CQ overrun */

static void scn_cq_overrun(void)
{
	struct ctx c;
	struct opts o = defopts();
	o.cq_size = 4;
	o.txcntr = o.rxcntr = 1;
	pair_open(&c, &o, "small CQ");
	enum { N = 500 };
	static char b[N][64];
	struct fi_context2 x[N];
	void *d = reg(&c, b, sizeof b);
	/* Counters drive progress without draining the 4-entry CQs, so
	 * completions pile up far beyond the CQ size before anyone reads. */
	if (g_rank == 0) {
		for (int i = 0; i < N; i++)
			POST(fi_trecv(c.ep, b[i], 64, d, FI_ADDR_UNSPEC, i, 0, &x[i]));
		oob_send(1, "posted");
		wait_cntr(c.rxcntr, N, "rxcntr");
	} else {
		for (int i = 0; i < N; i++)
			fill(b[i], 64, i);
		oob_wait_progress(0, "posted");
		for (int i = 0; i < N; i++) {
			ssize_t r;
			uint64_t dl = now_ms() + g_timeout_ms;
			while ((r = fi_tsend(c.ep, b[i], 64, d, c.addr[0], i, &x[i])) == -FI_EAGAIN) {
				fi_cntr_read(c.txcntr);
				if (now_ms() > dl)
					FAIL("EAGAIN forever");
			}
			CHK(r);
		}
		wait_cntr(c.txcntr, N, "txcntr");
	}
	struct cqw *w = g_rank == 0 ? &c.rx : &c.tx;
	int *seen = calloc(N, sizeof *seen);
	for (int k = 0; k < N; k++) {
		struct comp e = cqw_ok(w);
		int i = ctx_index_once(&e, x, N, seen);
		if (g_rank == 0) {
			EXPECT(e.tag == (uint64_t)i && e.len == 64, "tag/len");
			check("overrun", b[i], 64, i);
		}
	}
	cqw_none(w, 20);
	finish(&c);
}

/* ================================================================ blocking CQ reads */

/* One fi_cq_sread (retried over its 10 s timeouts until the client's
 * deadline), in a thread whose id it publishes first. */
struct sread_one {
	struct fid_cq *cq;
	pid_t tid;
	ssize_t r;
	int timeouts;
	struct fi_cq_tagged_entry e;
};

static void *sread_one_thread(void *p)
{
	struct sread_one *a = p;
	__atomic_store_n(&a->tid, my_tid(), __ATOMIC_RELEASE);
	uint64_t dl = now_ms() + g_timeout_ms;
	while ((a->r = fi_cq_sread(a->cq, &a->e, 1, NULL, 10000)) == -FI_EAGAIN && now_ms() < dl)
		a->timeouts++;
	return NULL;
}

static void scn_cq_sread(void)
{
	struct ctx c;
	struct opts o = defopts();
	o.wait = !strcmp(g_arg, "fd") ? FI_WAIT_FD : FI_WAIT_UNSPEC;
	pair_open(&c, &o, "CQ wait object");
	static char b[2][65536];
	struct fi_context2 x[2];
	void *d = reg(&c, b, sizeof b);
	struct fi_cq_tagged_entry e;
	struct fid_cq *cq = g_rank == 0 ? c.rx.cq : c.tx.cq;
	struct sread_one first = { .cq = cq };
	pthread_t th;
	if (g_rank == 0) {
		POST(fi_trecv(c.ep, b[0], 65536, d, FI_ADDR_UNSPEC, 1, 0, &x[0]));
		POST(fi_recv(c.ep, b[1], 65536, d, FI_ADDR_UNSPEC, &x[1]));
		/* The first fi_cq_sread blocks in a thread of its own: the sender
		 * is told to go only once it is asleep, so the message must wake
		 * it (on shm, with a doorbell), whatever else the machine runs. */
		if (pthread_create(&th, NULL, sread_one_thread, &first))
			FAIL("pthread_create");
		pid_t tid;
		while (!(tid = __atomic_load_n(&first.tid, __ATOMIC_ACQUIRE)))
			sched_yield();
		(void)wait_thread_asleep(tid);
		oob_send(1, "posted");
	} else {
		fill(b[0], 60000, 1);
		fill(b[1], 1000, 2);
		oob_wait_progress(0, "posted");
		POST(fi_tsend(c.ep, b[0], 60000, d, c.addr[0], 1, &x[0]));
		POST(fi_send(c.ep, b[1], 1000, d, c.addr[0], &x[1]));
	}
	uint64_t dl = now_ms() + g_timeout_ms;
	int timeouts = 0;
	for (int got = 0; got < 2;) {
		ssize_t r;
		if (g_rank == 0 && got == 0) {
			pthread_join(th, NULL);
			r = first.r;
			e = first.e;
			timeouts += first.timeouts;
		} else {
			r = fi_cq_sread(cq, &e, 1, NULL, 10000);
		}
		if (r == -FI_EAGAIN) {
			if (now_ms() > dl)
				FAIL("sread: nothing");
			timeouts++;
			continue;
		}
		if (r != 1)
			FAIL("fi_cq_sread = %zd (%s)", r, fi_strerror((int)-r));
		int i = (int)((struct fi_context2 *)e.op_context - x);
		EXPECT(i == 0 || i == 1, "ctx");
		if (g_rank == 0) {
			EXPECT(e.len == (i ? 1000u : 60000u), "len");
			check("sread", b[i], e.len, i + 1);
		}
		got++;
	}
	/* The message wakes the sleeper (a doorbell on shm): it does not
	 * sit out the 10 s timeout, which only a message that failed to wake
	 * it can reach (generous: the sender's delay is not measured). */
	if (g_rank == 0)
		DEVIATE(timeouts == 0, "fi_cq_sread slept through an arriving message %d time(s)", timeouts);
	/* Blocked means asleep, whatever the CPU: this thread goes to sleep
	 * and stays asleep (woken a few times at most, e.g. by the endpoint's
	 * timers), and the whole process (a progress thread included) is
	 * woken at most 20 times in the 200 ms, not every few milliseconds.
	 * Counted in voluntary context switches (getrusage), which do not
	 * depend on the machine's load; measured for gnix: 1-2 and 3-5. */
	struct rusage r0, r1;
	getrusage(RUSAGE_SELF, &r0);
	long s0 = thread_sleeps();
	uint64_t t0 = now_ms();
	EXPECT_RET(fi_cq_sread(cq, &e, 1, NULL, 200), -FI_EAGAIN);
	EXPECT(now_ms() - t0 >= 150, "sread timeout too short");
	long sleeps = thread_sleeps() - s0;
	getrusage(RUSAGE_SELF, &r1);
	long wakeups = r1.ru_nvcsw - r0.ru_nvcsw;
	DEVIATE(sleeps >= 1 && sleeps <= 5, "fi_cq_sread went to sleep %ld times in a 200 ms wait", sleeps);
	DEVIATE(wakeups <= 20, "the process went to sleep %ld times during a 200 ms fi_cq_sread: it polls", wakeups);
	finish(&c);
}

/* ================================================================ counters on an ep */

static void scn_cntr_ep(void)
{
	struct ctx c;
	struct opts o = defopts();
	o.txcntr = o.rxcntr = 1;
	pair_open(&c, &o, "counters");
	enum { N = 10 };
	static char b[N + 1][1024];
	struct fi_context2 x[N + 1];
	void *d = reg(&c, b, sizeof b);
	if (g_rank == 0) {
		for (int i = 0; i < N; i++)
			POST(fi_recv(c.ep, b[i], 1024, d, FI_ADDR_UNSPEC, &x[i]));
		POST(fi_recv(c.ep, b[N], 10, d, FI_ADDR_UNSPEC, &x[N])); /* will truncate */
		oob_send(1, "posted");
		wait_cntr(c.rxcntr, N, "rxcntr");
		uint64_t dl = now_ms() + g_timeout_ms;
		while (fi_cntr_readerr(c.rxcntr) < 1) {
			fi_cntr_read(c.rxcntr);
			if (now_ms() > dl)
				FAIL("truncated receive did not bump the error counter");
		}
		EXPECT(fi_cntr_read(c.rxcntr) == N, "rx counter %" PRIu64, fi_cntr_read(c.rxcntr));
		EXPECT(fi_cntr_readerr(c.rxcntr) == 1, "rx err counter");
		for (int i = 0; i < N; i++)
			check("cntr", b[i], 100 + i, i);
		for (int k = 0; k <= N; k++)
			(void)cqw_get(&c.rx);
	} else {
		for (int i = 0; i <= N; i++)
			fill(b[i], 100 + i, i);
		oob_wait_progress(0, "posted");
		for (int i = 0; i <= N; i++)
			POST(fi_send(c.ep, b[i], 100 + i, d, c.addr[0], &x[i]));
		wait_cntr(c.txcntr, N + 1, "txcntr");
		EXPECT(fi_cntr_readerr(c.txcntr) == 0, "tx err counter");
		for (int k = 0; k <= N; k++)
			(void)cqw_ok(&c.tx);
	}
	finish(&c);
}

/* ================================================================ multi-recv */

static void scn_multi_recv(void)
{
	struct ctx c;
	struct opts o = defopts();
	o.caps = FI_MSG | FI_TAGGED | FI_MULTI_RECV;
	o.min_multi_recv = 1000;
	pair_open(&c, &o, "FI_MULTI_RECV");
	enum { N = 17, L = 4000, M = 16 * L + 500 };
	char *mb = xmalloc(M), *nb = xmalloc(L);
	void *md = reg(&c, mb, M), *nd = reg(&c, nb, L);
	struct fi_context2 xm, xn, xs[N];
	if (g_rank == 0) {
		size_t v = 0, vl = sizeof v;
		CHK(fi_getopt(&c.ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &v, &vl));
		EXPECT(v == 1000, "MIN_MULTI_RECV %zu", v);
		struct iovec iov = { mb, M };
		struct fi_msg m = { .msg_iov = &iov, .desc = &md, .iov_count = 1,
				    .addr = FI_ADDR_UNSPEC, .context = &xm };
		POST(fi_recvmsg(c.ep, &m, FI_MULTI_RECV));
		POST(fi_recv(c.ep, nb, L, nd, FI_ADDR_UNSPEC, &xn));
		oob_send(1, "posted");
		int ndata = 0, released = 0, gotn = 0;
		char used[16] = { 0 };
		while (ndata < 16 || !released || !gotn) {
			struct comp e = cqw_ok(&c.rx);
			if (e.ctx == &xn) {
				EXPECT(e.len == L && !(e.flags & FI_MULTI_RECV), "plain recv");
				check("message after the multi-recv buffer was released", nb, L, 700 + 16);
				gotn = 1;
				continue;
			}
			EXPECT(e.ctx == &xm, "ctx %p", e.ctx);
			EXPECT(!released, "completion on the multi-recv buffer after FI_MULTI_RECV");
			if (e.flags & FI_MULTI_RECV)
				released = 1;
			if (e.len == 0 && released)
				continue; /* a separate release entry */
			EXPECT(e.len == L, "multi-recv entry len %zu", e.len);
			char *p = e.buf;
			EXPECT(p >= mb && p + L <= mb + M, "buf %p outside [%p, %p)", (void *)p, (void *)mb, (void *)(mb + M));
			int k;
			for (k = 0; k < 16; k++)
				if (!used[k] && p[0] == (char)pat(700 + k, 0) && p[1] == (char)pat(700 + k, 1) &&
				    p[2] == (char)pat(700 + k, 2))
					break;
			EXPECT(k < 16, "multi-recv entry data matches no message");
			check("multi-recv", p, L, 700 + k);
			used[k] = 1;
			ndata++;
		}
		EXPECT(released, "no FI_MULTI_RECV flag");
		cqw_none(&c.rx, 30);
	} else {
		char *sb = xmalloc((size_t)N * L);
		void *sd = reg(&c, sb, (size_t)N * L);
		for (int i = 0; i < N; i++)
			fill(sb + (size_t)i * L, L, 700 + i);
		oob_wait_progress(0, "posted");
		for (int i = 0; i < N; i++)
			POST(fi_send(c.ep, sb + (size_t)i * L, L, sd, c.addr[0], &xs[i]));
		for (int i = 0; i < N; i++)
			(void)cqw_ok(&c.tx);
	}
	finish(&c);
}

/* ================================================================ zero length */

static void scn_zero_len(void)
{
	struct ctx c;
	struct opts o = defopts();
	pair_open(&c, &o, "msg|tagged");
	static char b[64];
	void *d = reg(&c, b, sizeof b);
	struct fi_context2 x[6];
	if (g_rank == 0) {
		memset(b, 0x5a, sizeof b);
		POST(fi_recv(c.ep, NULL, 0, NULL, FI_ADDR_UNSPEC, &x[0]));
		POST(fi_recv(c.ep, NULL, 0, NULL, FI_ADDR_UNSPEC, &x[1]));
		POST(fi_trecv(c.ep, NULL, 0, NULL, FI_ADDR_UNSPEC, 5, 0, &x[2]));
		POST(fi_trecv(c.ep, NULL, 0, NULL, FI_ADDR_UNSPEC, 5, 0, &x[3]));
		POST(fi_recv(c.ep, b, sizeof b, d, FI_ADDR_UNSPEC, &x[4]));
		struct fi_msg m = { .msg_iov = NULL, .desc = NULL, .iov_count = 0,
				    .addr = FI_ADDR_UNSPEC, .context = &x[5] };
		POST(fi_recvmsg(c.ep, &m, FI_COMPLETION));
		oob_send(1, "posted");
		int seen[6] = { 0 };
		for (int k = 0; k < 6; k++) {
			struct comp e = cqw_ok(&c.rx);
			int i = ctx_index_once(&e, x, 6, seen);
			EXPECT(e.len == 0, "recv %d len %zu", i, e.len);
			check_flags(&e, FI_RECV | (i == 2 || i == 3 ? FI_TAGGED : FI_MSG), "zero");
			if (i == 1)
				EXPECT((e.flags & FI_REMOTE_CQ_DATA) && e.data == 0x77, "zero-length senddata");
			if (i == 2 || i == 3)
				EXPECT(e.tag == 5, "tag");
		}
		for (size_t i = 0; i < sizeof b; i++)
			EXPECT(b[i] == 0x5a, "zero-length message wrote into the buffer");
	} else {
		oob_wait_progress(0, "posted");
		POST(fi_send(c.ep, NULL, 0, NULL, c.addr[0], &x[0]));
		POST(fi_senddata(c.ep, NULL, 0, NULL, 0x77, c.addr[0], &x[1]));
		POST(fi_tsend(c.ep, NULL, 0, NULL, c.addr[0], 5, &x[2]));
		POST(fi_tinject(c.ep, NULL, 0, c.addr[0], 5));
		POST(fi_send(c.ep, NULL, 0, NULL, c.addr[0], &x[4]));
		POST(fi_inject(c.ep, NULL, 0, c.addr[0]));
		for (int k = 0; k < 4; k++) {
			struct comp e = cqw_ok(&c.tx);
			EXPECT(e.ctx == &x[0] || e.ctx == &x[1] || e.ctx == &x[2] || e.ctx == &x[4], "ctx");
		}
		cqw_none(&c.tx, 20);
	}
	finish(&c);
}

/* ================================================================ peek / claim / discard */

static struct comp peek(struct ctx *c, uint64_t tag, uint64_t flags, struct fi_context2 *x, void *buf, size_t len, void *desc)
{
	struct iovec iov = { buf, len };
	struct fi_msg_tagged m = { .msg_iov = buf ? &iov : NULL, .desc = buf ? &desc : NULL,
				   .iov_count = buf ? 1 : 0, .addr = FI_ADDR_UNSPEC, .tag = tag,
				   .context = x };
	POST(fi_trecvmsg(c->ep, &m, flags));
	struct comp e = cqw_get(&c->rx);
	EXPECT(e.ctx == x, "peek/claim completion op_context %p want %p", e.ctx, (void *)x);
	return e;
}

/* peek until the message shows up (FI_ENOMSG until then) */
static struct comp peek_found(struct ctx *c, uint64_t tag, uint64_t flags, struct fi_context2 *x)
{
	uint64_t dl = now_ms() + g_timeout_ms;
	for (;;) {
		struct comp e = peek(c, tag, flags, x, NULL, 0, NULL);
		if (!e.err)
			return e;
		EXPECT(e.err == FI_ENOMSG, "peek err %d (%s)", e.err, fi_strerror(e.err));
		if (now_ms() > dl)
			FAIL("peek never found tag 0x%" PRIx64, tag);
	}
}

static void scn_peek(void)
{
	struct ctx c;
	struct opts o = defopts();
	pair_open(&c, &o, "msg|tagged");
	static char b[5][4096];
	void *d = reg(&c, b, sizeof b);
	struct fi_context2 x[8];
	uint64_t tags[5] = { 0x77, 0x88, 0x99, 0xaa, 0xbb };
	size_t lens[5] = { 4000, 3000, 2000, 1000, 500 };
	if (g_rank == 0) {
		struct comp e = peek(&c, 0x77, FI_PEEK, &x[0], NULL, 0, NULL);
		EXPECT(e.err == FI_ENOMSG, "peek with nothing sent: err %d (%s)", e.err, fi_strerror(e.err));
		oob_send(1, "go");
		oob_wait_progress(1, "sent");

		e = peek_found(&c, 0x77, FI_PEEK, &x[1]);
		EXPECT(e.len == 4000 && e.tag == 0x77, "peek: len %zu tag 0x%" PRIx64, e.len, e.tag);
		EXPECT(e.data == 0x55, "peek: data 0x%" PRIx64, e.data);
		DEVIATE(e.flags & FI_REMOTE_CQ_DATA, "peek completion lacks FI_REMOTE_CQ_DATA (flags 0x%" PRIx64 ")", e.flags);
		e = peek(&c, 0x77, FI_PEEK, &x[1], NULL, 0, NULL); /* still there */
		EXPECT(!e.err && e.len == 4000, "second peek err %d", e.err);
		POST(fi_trecv(c.ep, b[0], 4096, d, FI_ADDR_UNSPEC, 0x77, 0, &x[2]));
		e = cqw_ok(&c.rx);
		EXPECT(e.ctx == &x[2] && e.len == 4000 && e.data == 0x55, "recv after peek");
		check("peeked message", b[0], 4000, 50);
		e = peek(&c, 0x77, FI_PEEK, &x[1], NULL, 0, NULL);
		EXPECT(e.err == FI_ENOMSG, "peek of a consumed message: err %d", e.err);

		/* PEEK|CLAIM, then CLAIM */
		e = peek_found(&c, 0x88, FI_PEEK | FI_CLAIM, &x[3]);
		EXPECT(e.len == 3000 && e.tag == 0x88, "claim peek len %zu", e.len);
		e = peek(&c, 0x88, FI_PEEK, &x[4], NULL, 0, NULL);
		DEVIATE(e.err == FI_ENOMSG, "a claimed message is still visible to peek (err %d)", e.err);
		e = peek(&c, 0x88, FI_CLAIM, &x[3], b[1], 4096, d);
		EXPECT(!e.err && e.len == 3000 && e.tag == 0x88, "claimed recv: err %d len %zu", e.err, e.len);
		check("claimed message", b[1], 3000, 51);

		/* PEEK|DISCARD */
		e = peek_found(&c, 0x99, FI_PEEK | FI_DISCARD, &x[5]);
		e = peek(&c, 0x99, FI_PEEK, &x[5], NULL, 0, NULL);
		EXPECT(e.err == FI_ENOMSG, "discarded message still there (err %d)", e.err);

		/* PEEK|CLAIM, then CLAIM|DISCARD */
		e = peek_found(&c, 0xaa, FI_PEEK | FI_CLAIM, &x[6]);
		EXPECT(e.len == 1000, "claim len");
		e = peek(&c, 0xaa, FI_CLAIM | FI_DISCARD, &x[6], NULL, 0, NULL);
		EXPECT(!e.err, "claim|discard err %d", e.err);
		e = peek(&c, 0xaa, FI_PEEK, &x[6], NULL, 0, NULL);
		EXPECT(e.err == FI_ENOMSG, "claimed+discarded message still there (err %d)", e.err);

		/* matching still works */
		POST(fi_trecv(c.ep, b[4], 4096, d, FI_ADDR_UNSPEC, 0xbb, 0, &x[7]));
		e = cqw_ok(&c.rx);
		EXPECT(e.ctx == &x[7] && e.len == 500, "final recv");
		check("final", b[4], 500, 54);
		cqw_none(&c.rx, 20);
	} else {
		for (int i = 0; i < 5; i++)
			fill(b[i], lens[i], 50 + i);
		oob_wait_progress(0, "go");
		POST(fi_tsenddata(c.ep, b[0], lens[0], d, 0x55, c.addr[0], tags[0], &x[0]));
		for (int i = 1; i < 5; i++)
			POST(fi_tsend(c.ep, b[i], lens[i], d, c.addr[0], tags[i], &x[i]));
		oob_send(0, "sent");
		for (int i = 0; i < 5; i++)
			(void)cqw_ok(&c.tx);
	}
	finish(&c);
}

/* ================================================================ threads */

struct thr {
	struct ctx *c;
	int n;
	char *buf;
	size_t *off;
	struct fi_context2 *x;
	int rx;
	const char *err;
};

static size_t thr_size(int i)
{
	return (i % 97 == 5) ? 65536 : (size_t)((i * 37) % 8192) + 1;
}

static void *thr_main(void *arg)
{
	struct thr *t = arg;
	struct fid_cq *cq = t->rx ? t->c->rx.cq : t->c->tx.cq;
	struct fi_cq_tagged_entry e[16];
	int done = 0;
	uint64_t dl = now_ms() + g_timeout_ms;
	int peer = 1 - g_rank;
	for (int i = 0; i < t->n; i++) {
		ssize_t r;
		for (;;) {
			r = t->rx ? fi_trecv(t->c->ep, t->buf + t->off[i], thr_size(i), NULL, FI_ADDR_UNSPEC, i, 0, &t->x[i])
				  : fi_tsend(t->c->ep, t->buf + t->off[i], thr_size(i), NULL, t->c->addr[peer], i, &t->x[i]);
			if (r != -FI_EAGAIN)
				break;
			ssize_t n = fi_cq_read(cq, e, 16);
			if (n > 0)
				done += (int)n;
			if (now_ms() > dl) {
				t->err = "EAGAIN forever";
				return NULL;
			}
		}
		if (r) {
			t->err = "post failed";
			return NULL;
		}
	}
	while (done < t->n) {
		ssize_t n = fi_cq_read(cq, e, 16);
		if (n > 0) {
			for (ssize_t k = 0; k < n; k++)
				if (t->rx) {
					int i = (int)((struct fi_context2 *)e[k].op_context - t->x);
					if (i < 0 || i >= t->n || e[k].len != thr_size(i) || e[k].tag != (uint64_t)i) {
						t->err = "bad rx completion";
						return NULL;
					}
				}
			done += (int)n;
		} else if (n != -FI_EAGAIN) {
			t->err = "cq error";
			return NULL;
		}
		if (now_ms() > dl) {
			t->err = "timeout";
			return NULL;
		}
	}
	return NULL;
}

static void scn_threads(void)
{
	struct ctx c;
	struct opts o = defopts();
	o.threading = FI_THREAD_SAFE;
	o.mode = FI_CONTEXT;
	pair_open(&c, &o, "FI_THREAD_SAFE");
	if (c.info->domain_attr->mr_mode & FI_MR_LOCAL)
		skip("FI_MR_LOCAL: thread scenario passes NULL descriptors");
	int n = 3000;
	size_t total = 0, *off = calloc(n, sizeof *off);
	for (int i = 0; i < n; i++) {
		off[i] = total;
		total += thr_size(i);
	}
	struct thr ts = { &c, n, xmalloc(total), off, calloc(n, sizeof(struct fi_context2)), 0, NULL };
	struct thr tr = { &c, n, xmalloc(total), off, calloc(n, sizeof(struct fi_context2)), 1, NULL };
	for (int i = 0; i < n; i++)
		fill(ts.buf + off[i], thr_size(i), 2000 + i + g_rank * 5000);
	/* both ranks send to each other and receive at once, one thread each */
	pthread_t a, b;
	pthread_create(&b, NULL, thr_main, &tr);
	pthread_create(&a, NULL, thr_main, &ts);
	pthread_join(a, NULL);
	pthread_join(b, NULL);
	EXPECT(!ts.err, "send thread: %s", ts.err);
	EXPECT(!tr.err, "recv thread: %s", tr.err);
	for (int i = 0; i < n; i++)
		check("threads", tr.buf + off[i], thr_size(i), 2000 + i + (1 - g_rank) * 5000);
	finish(&c);
}

/* ================================================================ progress */

static void scn_progress_auto(void)
{
	struct ctx c;
	struct opts o = defopts();
	o.progress = FI_PROGRESS_AUTO;
	pair_open(&c, &o, "FI_PROGRESS_AUTO");
	EXPECT(c.info->domain_attr->data_progress == FI_PROGRESS_AUTO, "data_progress %d",
	       c.info->domain_attr->data_progress);
	size_t big = 8 << 20;
	char *b = xmalloc(big), *s = xmalloc(128);
	void *d = reg(&c, b, big), *sd = reg(&c, s, 128);
	struct fi_context2 x[2];
	/* phase 1: 0 receives, 1 sends; phase 2: the other way round.  The
	 * receiver posts, then blocks outside libfabric until the sender has
	 * seen its sends complete: only auto progress can get them there. */
	for (int phase = 0; phase < 2; phase++) {
		int recv_rank = phase;
		if (g_rank == recv_rank) {
			POST(fi_trecv(c.ep, b, big, d, FI_ADDR_UNSPEC, 1, 0, &x[0]));
			POST(fi_recv(c.ep, s, 128, sd, FI_ADDR_UNSPEC, &x[1]));
			oob_send(1 - g_rank, "posted");
			oob_wait(1 - g_rank, "done");
			for (int k = 0; k < 2; k++) {
				struct comp e = cqw_ok(&c.rx);
				EXPECT(e.ctx == &x[0] || e.ctx == &x[1], "ctx");
			}
			check("auto big", b, big, 10 + phase);
			check("auto small", s, 100, 20 + phase);
		} else {
			fill(b, big, 10 + phase);
			fill(s, 100, 20 + phase);
			oob_wait_progress(1 - g_rank, "posted");
			POST(fi_tsend(c.ep, b, big, d, c.addr[1 - g_rank], 1, &x[0]));
			POST(fi_send(c.ep, s, 100, sd, c.addr[1 - g_rank], &x[1]));
			(void)cqw_ok(&c.tx);
			(void)cqw_ok(&c.tx);
			oob_send(1 - g_rank, "done");
		}
	}
	/* a counter wait with nobody else polling */
	finish(&c);
}

/* Manual progress: a receiver that has its messages and then stops calling
 * (it waits elsewhere, as fi_pingpong waits on its control socket) does not
 * hold up the sends it took: an eager send (one segment or several) and a
 * rendezvous send complete while it waits. Each rank receives in turn. */
static void scn_quiet_receiver(void)
{
	struct ctx c;
	struct opts o = defopts();
	o.progress = FI_PROGRESS_MANUAL;
	pair_open(&c, &o, "FI_PROGRESS_MANUAL");
	EXPECT(c.info->domain_attr->data_progress == FI_PROGRESS_MANUAL, "data_progress %d",
	       c.info->domain_attr->data_progress);
	enum { N = 3 };
	const size_t len[N] = { 100, 6000, 8 << 20 };
	char *b[N];
	void *d[N];
	for (int i = 0; i < N; i++) {
		b[i] = xmalloc(len[i]);
		d[i] = reg(&c, b[i], len[i]);
	}
	struct fi_context2 x[N];
	for (int phase = 0; phase < 2; phase++) {
		if (g_rank == phase) {
			for (int i = 0; i < N; i++)
				POST(fi_trecv(c.ep, b[i], len[i], d[i], FI_ADDR_UNSPEC, i, 0, &x[i]));
			oob_send(1 - g_rank, "posted");
			for (int k = 0; k < N; k++) {
				struct comp e = cqw_ok(&c.rx);
				EXPECT(e.tag < N && e.ctx == &x[e.tag] && e.len == len[e.tag], "tag %" PRIu64 " len %zu",
				       e.tag, e.len);
			}
			for (int i = 0; i < N; i++)
				check("quiet receiver", b[i], len[i], 30 + 10 * phase + i);
			/* From here on this rank calls nothing of libfabric's
			 * until the sender has seen its sends complete. */
			oob_wait(1 - g_rank, "done");
		} else {
			for (int i = 0; i < N; i++)
				fill(b[i], len[i], 30 + 10 * phase + i);
			oob_wait_progress(1 - g_rank, "posted");
			for (int i = 0; i < N; i++)
				POST(fi_tsend(c.ep, b[i], len[i], d[i], c.addr[1 - g_rank], i, &x[i]));
			for (int k = 0; k < N; k++)
				(void)cqw_ok(&c.tx);
			oob_send(1 - g_rank, "done");
		}
	}
	finish(&c);
}

/* Manual progress: a process that takes a peer's inject and then stays
 * away from libfabric for longer than FI_GNIX_PEER_TIMEOUT_MS (the test
 * sets 1000 ms), as one that computes or writes a checkpoint does, is not
 * taken for dead by that peer, which polls for its answer meanwhile: the
 * conversation goes on when it comes back. */
static void scn_away(void)
{
	struct ctx c;
	struct opts o = defopts();
	o.progress = FI_PROGRESS_MANUAL;
	pair_open(&c, &o, "FI_PROGRESS_MANUAL");
	int peer = 1 - g_rank;
	uint64_t v = 0, w = 0;
	struct fi_context2 x;
	for (int round = 0; round < 2; round++) {
		if (g_rank == 1) {
			v = 100 + round;
			POST(fi_trecv(c.ep, &w, sizeof w, NULL, c.addr[peer], 2, 0, &x));
			POST(fi_tinject(c.ep, &v, sizeof v, c.addr[peer], 1));
			struct comp e = cqw_ok(&c.rx); /* polls all the while */
			EXPECT(e.ctx == &x && w == 200 + (uint64_t)round, "answer %" PRIu64, w);
		} else {
			POST(fi_trecv(c.ep, &w, sizeof w, NULL, c.addr[peer], 1, 0, &x));
			(void)cqw_ok(&c.rx);
			EXPECT(w == 100 + (uint64_t)round, "got %" PRIu64, w);
			if (round == 0) {
				/* Away, not a synchronisation: the scenario is a
				 * process that does not call in for 2.5 s. */
				usleep(2500 * 1000);
			}
			v = 200 + round;
			POST(fi_tinject(c.ep, &v, sizeof v, c.addr[peer], 2));
		}
	}
	finish(&c);
}

/* arg: "auto", "manual", or "completion" (manual progress with
 * FI_THREAD_COMPLETION): the model asked for is the one granted. */
static void scn_pingpong(void)
{
	struct ctx c;
	struct opts o = defopts();
	o.progress = !strcmp(g_arg, "auto") ? FI_PROGRESS_AUTO : FI_PROGRESS_MANUAL;
	if (!strcmp(g_arg, "completion"))
		o.threading = FI_THREAD_COMPLETION;
	pair_open(&c, &o, g_arg);
	DEVIATE(c.info->domain_attr->data_progress == o.progress, "asked data_progress %d, got %d",
		o.progress, c.info->domain_attr->data_progress);
	DEVIATE(c.info->domain_attr->threading == o.threading || !o.threading, "asked threading %d, got %d",
		o.threading, c.info->domain_attr->threading);
	size_t sizes[5] = { 1, 1000, 65536, 1 << 20, 0 };
	char *b = xmalloc(1 << 20), *r = xmalloc(1 << 20);
	void *d = reg(&c, b, 1 << 20), *rd = reg(&c, r, 1 << 20);
	struct fi_context2 x[2];
	int peer = 1 - g_rank;
	for (int it = 0; it < 100; it++) {
		size_t len = sizes[it % 5];
		POST(fi_trecv(c.ep, r, 1 << 20, rd, c.addr[peer], it, 0, &x[1]));
		if (g_rank == 1 || it > 0 || 1) {
			if (g_rank == 1) {
				fill(b, len, it);
				POST(fi_tsend(c.ep, b, len, d, c.addr[peer], it, &x[0]));
				(void)cqw_ok(&c.tx);
				struct comp e = cqw_ok(&c.rx);
				EXPECT(e.len == len && e.tag == (uint64_t)it, "pong %d", it);
				check("pong", r, len, it + 1000);
			} else {
				struct comp e = cqw_ok(&c.rx);
				EXPECT(e.len == len && e.tag == (uint64_t)it, "ping %d", it);
				check("ping", r, len, it);
				fill(b, len, it + 1000);
				POST(fi_tsend(c.ep, b, len, d, c.addr[peer], it, &x[0]));
				(void)cqw_ok(&c.tx);
			}
		}
	}
	finish(&c);
}

/* ================================================================ idle endpoint */

/* The next out-of-band word from <src>, whatever it is (e.g. an address). */
static void oob_take_any(int src, char *out, size_t max)
{
	for (;;) {
		for (int i = 0; i < g_nbacklog; i++) {
			int s;
			char w[256];
			if (sscanf(g_backlog[i], "%d %255s", &s, w) == 2 && s == src) {
				snprintf(out, max, "%s", w);
				free(g_backlog[i]);
				g_backlog[i] = g_backlog[--g_nbacklog];
				return;
			}
		}
		g_backlog[g_nbacklog++] = strdup(read_line());
	}
}

/* Auto progress, two endpoints in one domain: rank 1 busy-polls the CQ of
 * its first endpoint only, while rank 0 sends to its second. That send
 * completes only if the second endpoint is progressed for it (its ACK),
 * which nobody but the provider does (fabtests' fi_multi_ep does this). */
static void scn_idle_ep(void)
{
	struct ctx c;
	struct opts o = defopts();
	o.progress = FI_PROGRESS_AUTO;
	pair_open(&c, &o, "FI_PROGRESS_AUTO");
	static char b[64];
	struct fi_context2 x[2];
	if (g_rank == 1) {
		struct fid_ep *ep2;
		struct fid_cq *cq2;
		struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_TAGGED };
		CHK(fi_cq_open(c.dom, &cq_attr, &cq2, NULL));
		CHK(fi_endpoint(c.dom, c.info, &ep2, NULL));
		CHK(fi_ep_bind(ep2, &c.av->fid, 0));
		CHK(fi_ep_bind(ep2, &cq2->fid, FI_TRANSMIT | FI_RECV));
		CHK(fi_enable(ep2));
		POST(fi_recv(ep2, b, sizeof b, NULL, FI_ADDR_UNSPEC, &x[0]));
		uint8_t name[256];
		size_t len = sizeof name;
		char hx[600];
		CHK(fi_getname(&ep2->fid, name, &len));
		hex(name, len, hx);
		oob_send(0, hx);
		/* Busy on the first endpoint until rank 0 saw its send complete. */
		struct fi_cq_tagged_entry e;
		for (;;) {
			(void)fi_cq_read(c.rx.cq, &e, 0);
			if (backlog_take(0, "done") != -100)
				break;
			if (try_line(0))
				g_backlog[g_nbacklog++] = strdup(g_line);
		}
		uint64_t dl = now_ms() + g_timeout_ms;
		ssize_t n;
		while ((n = fi_cq_read(cq2, &e, 1)) == -FI_EAGAIN && now_ms() < dl)
			;
		EXPECT(n == 1 && e.op_context == &x[0] && e.len == 40, "ep2 receive: %zd", n);
		check("idle ep", b, 40, 77);
		CHK(fi_close(&ep2->fid));
		CHK(fi_close(&cq2->fid));
	} else {
		char hx[600];
		uint8_t name[256];
		oob_take_any(1, hx, sizeof hx);
		size_t len = unhex(hx, name, sizeof name);
		fi_addr_t a2;
		EXPECT(fi_av_insert(c.av, name, 1, &a2, 0, NULL) == 1, "insert ep2");
		(void)len;
		fill(b, 40, 77);
		POST(fi_send(c.ep, b, 40, NULL, a2, &x[1]));
		/* The send completes, and successfully: without progress of the
		 * endpoint its application does not call, it would fail after
		 * the peer timeout (FI_GNIX_PEER_TIMEOUT_MS, 10 s by default,
		 * below the client's deadline). How soon it completes is a
		 * latency figure, printed, not asserted. */
		uint64_t t0 = now_ms();
		struct comp e = cqw_ok(&c.tx);
		EXPECT(e.ctx == &x[1], "send ctx");
		info("send to an endpoint its application does not poll completed in %" PRIu64 " ms", now_ms() - t0);
		oob_send(1, "done");
	}
	finish(&c);
}

/* ================================================================ 1 GiB */

static void fill64(uint64_t *p, size_t n, uint64_t seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (seed << 48) ^ (i * 0x9e3779b97f4a7c15ull);
}

static void check64(const uint64_t *p, size_t n, uint64_t seed)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != ((seed << 48) ^ (i * 0x9e3779b97f4a7c15ull)))
			FAIL("1 GiB: word %zu of %zu wrong (0x%" PRIx64 ")", i, n, p[i]);
}

static void scn_large(void)
{
	struct ctx c;
	struct opts o = defopts();
	pair_open(&c, &o, "msg|tagged");
	size_t mib = g_arg[0] ? (size_t)atol(g_arg) : 1024;
	size_t len = mib << 20;
	if (c.info->ep_attr->max_msg_size < len)
		skip("max_msg_size below the transfer size");
	uint64_t *b = xmalloc(len);
	void *d = reg(&c, b, len);
	struct fi_context2 x;
	for (int dir = 0; dir < 2; dir++) {
		int sender = dir == 0 ? 1 : 0;
		uint64_t t0 = now_ms();
		if (g_rank == sender) {
			fill64(b, len / 8, 7 + dir);
			oob_wait_progress(1 - g_rank, "posted");
			t0 = now_ms();
			POST(fi_tsend(c.ep, b, len, d, c.addr[1 - g_rank], 0x1000 + dir, &x));
			(void)cqw_ok(&c.tx);
		} else {
			memset(b, 0, len);
			POST(fi_trecv(c.ep, b, len, d, FI_ADDR_UNSPEC, 0x1000 + dir, 0, &x));
			oob_send(1 - g_rank, "posted");
			t0 = now_ms();
			struct comp e = cqw_ok(&c.rx);
			EXPECT(e.len == len && e.tag == (uint64_t)(0x1000 + dir), "len %zu", e.len);
			uint64_t dt = now_ms() - t0;
			check64(b, len / 8, 7 + dir);
			info("%zu MiB rank %d -> %d in %" PRIu64 " ms", mib, 1 - g_rank, g_rank, dt);
		}
	}
	finish(&c);
}

/* ================================================================ peer failure (gnix) */

static void scn_peer_fail(void)
{
	struct ctx c;
	struct opts o = defopts();
	pair_open(&c, &o, "msg|tagged");
	int mid = !strcmp(g_arg, "mid");
	enum { N = 32 };
	size_t len = 8 << 20;
	char *b = xmalloc(len);
	void *d = reg(&c, b, len);
	struct fi_context2 x[N + 2];
	if (g_rank == 0) {
		if (mid) {
			/* Over shm the receiver pulls a whole posted message in
			 * one call: with one receive posted, the rest of the
			 * stream is still in flight when it dies. */
			int posts = gnix_shm_wire() ? 1 : N;
			for (int i = 0; i < posts; i++)
				POST(fi_trecv(c.ep, b, len, d, FI_ADDR_UNSPEC, i, 0, &x[i]));
			oob_send(1, "posted");
			(void)cqw_ok(&c.rx);
			printf("KILLME\n"); /* dies mid-stream */
			fflush(stdout);
		} else {
			POST(fi_recv(c.ep, b, len, d, FI_ADDR_UNSPEC, &x[0]));
			(void)cqw_ok(&c.rx);
			oob_send(1, "got");
		}
		for (;;)
			read_line(); /* until killed */
	}
	fill(b, len, 3);
	uint64_t t0;
	int nerr = 0;
	if (mid) {
		oob_wait_progress(0, "posted");
		t0 = now_ms();
		for (int i = 0; i < N; i++)
			POST(fi_tsend(c.ep, b, len, d, c.addr[0], i, &x[i]));
		int seen[N] = { 0 };
		for (int k = 0; k < N; k++) {
			struct comp e = cqw_get(&c.tx);
			int i = ctx_index_once(&e, x, N, seen);
			if (e.err) {
				nerr++;
				char sb[128];
				info("send %d: err %d (%s) / %s", i, e.err, fi_strerror(e.err),
				     fi_cq_strerror(c.tx.cq, e.prov_errno, e.err_data_size ? e.err_data : NULL, sb, sizeof sb));
			}
		}
		EXPECT(nerr > 0, "peer killed mid-stream but all %d sends succeeded", N);
	} else {
		POST(fi_send(c.ep, b, 100, d, c.addr[0], &x[0]));
		(void)cqw_ok(&c.tx);
		oob_wait_progress(0, "got");
		printf("KILLPEER 0\n");
		fflush(stdout);
		oob_wait(-1, "killed");
		t0 = now_ms();
		POST(fi_send(c.ep, b, 1000, d, c.addr[0], &x[0]));
		POST(fi_send(c.ep, b, len, d, c.addr[0], &x[1]));
		/* An eager send over shm completes once it is in the peer's
		 * mailbox (as with libfabric's shm provider): sent before the
		 * death is noticed, it may succeed. The rendezvous cannot. */
		int eager_may_succeed = gnix_shm_wire();
		for (int k = 0; k < 2; k++) {
			struct comp e = cqw_get(&c.tx);
			EXPECT(e.ctx == &x[0] || e.ctx == &x[1], "ctx");
			if (!e.err && eager_may_succeed && e.ctx == &x[0])
				continue;
			EXPECT(e.err, "send to a dead peer completed successfully");
			nerr++;
		}
	}
	uint64_t dt = now_ms() - t0;
	info("%d error completions after %" PRIu64 " ms", nerr, dt);
	EXPECT(dt < 10000, "errors took %" PRIu64 " ms (bound 10 s with FI_GNIX_PEER_TIMEOUT_MS)", dt);
	/* still no hang: a further send to the dead peer fails too */
	ssize_t r = fi_send(c.ep, b, 10, d, c.addr[0], &x[N]);
	if (r == 0) {
		struct comp e = cqw_get(&c.tx);
		EXPECT(e.err, "send after the peer failed succeeded");
	} else {
		EXPECT(r < 0 && r != -FI_EAGAIN, "send after failure = %zd", r);
	}
	ctx_close(&c);
	pass();
}

/* ========================================================= exit_after_send */

/* Rank 1 sends N tagged 64-byte messages (each from its own buffer), waits
 * for all N completions and exits at once, without closing anything: a
 * completed send must not depend on the sender any more (the default
 * FI_TRANSMIT_COMPLETE). Rank 0 posts nothing until rank 1 has posted all
 * its sends, then receives 64 at a time and checks every message. */
static void scn_exit_after_send(void)
{
	struct ctx c;
	struct opts o = defopts();
	pair_open(&c, &o, "msg|tagged");
	enum { N = 200, S = 64, W = 64 };
	static char b[N][S];
	struct fi_context2 x[N];
	void *d = reg(&c, b, sizeof b);
	const uint64_t TAG = 0xe417;
	if (g_rank == 0) {
		oob_wait_progress(1, "posted");
		int got = 0;
		while (got < N) {
			int k = MIN(W, N - got);
			for (int i = 0; i < k; i++)
				POST(fi_trecv(c.ep, b[got + i], S, d, c.addr[1], TAG, 0, &x[got + i]));
			for (int i = 0; i < k; i++) {
				struct comp e = cqw_ok(&c.rx);
				EXPECT(e.ctx == &x[got + i], "message %d out of order (ctx %p)", got + i, e.ctx);
				check("message", b[got + i], S, 500 + got + i);
			}
			got += k;
		}
		info("received all %d messages of a sender that exited after its completions", N);
		cqw_none(&c.rx, 20);
		ctx_close(&c);
		pass();
	}
	for (int i = 0; i < N; i++) {
		fill(b[i], S, 500 + i);
		POST(fi_tsend(c.ep, b[i], S, d, c.addr[0], TAG, &x[i]));
	}
	oob_send(0, "posted");
	for (int i = 0; i < N; i++)
		cqw_ok(&c.tx);
	/* Gone, as a process that is done: nothing closed. */
	printf("PASS\n");
	fflush(stdout);
	exit(0);
}

/* =============================================================== ctw_fence */

/* A receive that a local sender writes into (shm: the receiver pulls the
 * first half of a large message and asks the sender to write the second,
 * CTW) is cancelled (arg "cancel") or its endpoint closed (arg "close")
 * before the sender got to the write. Afterwards nothing may land in the
 * buffer: rank 0 paints it and only then lets rank 1 progress; rank 1
 * (manual progress: nothing happens between its calls) then sees the CTW
 * and its send completes; rank 0 checks the paint. On wires where a matched
 * receive cannot be cancelled (-FI_ENOENT), the receive just completes. */
static void scn_ctw_fence(void)
{
	struct ctx c;
	struct opts o = defopts();
	o.progress = FI_PROGRESS_MANUAL;
	pair_open(&c, &o, "msg|tagged, manual progress");
	int close_ep = !strcmp(g_arg, "close");
	enum { S = 1 << 20 };
	char *b = xmalloc(S);
	void *d = reg(&c, b, S);
	struct fi_context2 x;
	const uint64_t TAG = 0xfe9ce;
	/* gnix's shm wire with cross-memory attach (not FI_GNIX_SHM=0, not
	 * FI_GNIX_CMA=0) is where a sender writes into the receive: there it
	 * must be cancellable. */
	const char *shm = getenv("FI_GNIX_SHM"), *cma = getenv("FI_GNIX_CMA");
	int must_cancel = g_strict && !(shm && !strcmp(shm, "0")) && !(cma && !strcmp(cma, "0"));
	/* A word from rank 0 first, so both directions of the wire are in use
	 * (rank 1 already reads what rank 0 sends) when the large one comes. */
	static char hello[8];
	struct fi_context2 hx;
	if (g_rank == 1) {
		POST(fi_trecv(c.ep, hello, sizeof hello, NULL, c.addr[0], TAG + 1, 0, &hx));
		cqw_ok(&c.rx);
		fill(b, S, 77);
		POST(fi_tsend(c.ep, b, S, d, c.addr[0], TAG, &x));
		/* No provider call until rank 0 has let go of its buffer. */
		oob_wait(0, "go");
		struct comp e = cqw_get(&c.tx);
		info("send completed with err %d (%s)", e.err, e.err ? fi_strerror(e.err) : "ok");
		EXPECT(close_ep || e.err == 0, "send to a cancelled receive: err %d", e.err);
		oob_send(0, "done");
		oob_wait(0, "bye");
		if (!close_ep)
			ctx_close(&c);
		pass();
	}
	POST(fi_tsend(c.ep, hello, sizeof hello, NULL, c.addr[1], TAG + 1, &hx));
	cqw_ok(&c.tx);
	struct comp e;
	memset(b, 0, S);
	POST(fi_trecv(c.ep, b, S, d, c.addr[1], TAG, 0, &x));
	if (!must_cancel) {
		/* Another wire or provider: the data may need the sender to
		 * progress before any of it arrives (udp: the receiver pulls it;
		 * no CMA: the sender pushes it), so let rank 1 go at once; the
		 * receive just completes. Keep progressing until rank 1's send
		 * has completed too (manual progress: it may need our ACK). */
		oob_send(1, "go");
		e = cqw_get(&c.rx);
		EXPECT(e.err == 0, "receive: err %d", e.err);
		check("message", b, S, 77);
		oob_wait_progress(1, "done");
		oob_send(1, "bye");
		info("no receive a sender writes into on this wire; completed");
		pass();
	}
	/* Progress until the data starts to arrive (the first half is pulled
	 * in one go) or the receive completes. */
	int completed = 0;
	uint64_t dl = now_ms() + g_timeout_ms;
	while (!(completed = cqw_try(&c.rx, &e)) && b[0] == 0 && b[1] == 0 && b[2] == 0) {
		if (now_ms() > dl)
			FAIL("the message never started to arrive");
	}
	int fenced = 0;
	if (!completed) {
		if (close_ep) {
			CHK(fi_close(&c.ep->fid));
			fenced = 1;
		} else {
			int r = fi_cancel(&c.ep->fid, &x);
			EXPECT(r == 0 || r == -FI_ENOENT, "fi_cancel = %d", r);
			if (r == 0) {
				e = cqw_get(&c.rx);
				EXPECT(e.err == FI_ECANCELED && e.ctx == &x, "cancelled receive: err %d ctx %p", e.err,
				       e.ctx);
				fenced = 1;
			}
		}
	}
	if (fenced) {
		memset(b, 0x5a, S);
		oob_send(1, "go");
		oob_wait(1, "done");
		for (size_t i = 0; i < S; i++)
			EXPECT(b[i] == 0x5a, "byte %zu written after the receive was %s", i,
			       close_ep ? "closed" : "cancelled");
		info("nothing written after the %s", close_ep ? "close" : "cancel");
	} else {
		/* Not cancellable here: the receive runs to completion. */
		EXPECT(!must_cancel, "gnix's shm wire could not cancel a receive it was writing into");
		oob_send(1, "go");
		if (!completed)
			e = cqw_get(&c.rx);
		EXPECT(e.err == 0, "receive: err %d", e.err);
		check("message", b, S, 77);
		oob_wait(1, "done");
		info("matched receive not cancellable on this wire; completed");
	}
	oob_send(1, "bye");
	pass();
}

/* ============================================================ late_insert */

/* Rank 1 sends before rank 0 has its address in the AV (as when an MPI
 * process connects to another: its first messages come from a stranger);
 * rank 0 inserts the address only then, and directed receives for that
 * fi_addr must find those messages, in order, reporting it as FI_SOURCE.
 * Arg "dup": rank 0 had the address in its AV already, and inserts it a
 * second time (MPI connect/accept between ranks of one job does): the
 * second insert must name the same peer. */
static void scn_late_insert(void)
{
	struct ctx c;
	struct opts o = defopts();
	int dup = !strcmp(g_arg, "dup");
	o.caps = FI_MSG | FI_TAGGED | FI_DIRECTED_RECV | FI_SOURCE;
	o.no_insert = g_rank == 0 && !dup;
	o.from = 1; /* fi_cq_readfrom: the source of each receive */
	pair_open(&c, &o, "FI_DIRECTED_RECV | FI_SOURCE");
	enum { N = 6, S = 100 };
	static char b[N][S];
	struct fi_context2 x[N];
	const uint64_t TAG = 0x1a7e;
	if (g_rank == 1) {
		/* Delivery complete: once they completed, rank 0 has them (as
		 * unexpected messages of an unknown sender). */
		for (int i = 0; i < N; i++) {
			fill(b[i], S, 900 + i);
			struct iovec iov = { b[i], S };
			struct fi_msg_tagged m = { .msg_iov = &iov, .iov_count = 1, .addr = c.addr[0],
						   .tag = TAG + (i % 2), .context = &x[i] };
			POST(fi_tsendmsg(c.ep, &m, FI_DELIVERY_COMPLETE | FI_COMPLETION));
		}
		for (int i = 0; i < N; i++)
			cqw_ok(&c.tx);
		oob_send(0, "sent");
		oob_wait_progress(0, "done");
		ctx_close(&c);
		pass();
	}
	/* Everything is here (unexpected) before the sender is known. */
	oob_wait_progress(1, "sent");
	fi_addr_t peer;
	EXPECT(fi_av_insert(c.av, c.name[1], 1, &peer, 0, NULL) == 1, "fi_av_insert");
	EXPECT(!dup || peer == c.addr[1], "second insert of one address: fi_addr %" PRIu64 ", first %" PRIu64,
	       (uint64_t)peer, (uint64_t)c.addr[1]);
	/* Odd tags first, then even: each in the order sent. */
	for (int k = 0; k < N; k++) {
		int i = k < N / 2 ? 2 * k + 1 : 2 * (k - N / 2);
		POST(fi_trecv(c.ep, b[i], S, NULL, peer, TAG + (i % 2), 0, &x[i]));
		struct comp e = cqw_ok(&c.rx);
		EXPECT(e.ctx == &x[i], "receive %d took another message (ctx %p)", i, e.ctx);
		check("message", b[i], S, 900 + i);
		EXPECT(e.src == peer, "receive %d: src %" PRIu64 ", the sender is %" PRIu64, i, (uint64_t)e.src,
		       (uint64_t)peer);
	}
	oob_send(1, "done");
	ctx_close(&c);
	pass();
}

/* ================================================================ incast */

/* kB of a /proc/self/status field (VmRSS, VmHWM) */
static long status_kb(const char *field)
{
	FILE *f = fopen("/proc/self/status", "r");
	char l[256];
	long v = -1;
	size_t n = strlen(field);
	if (!f)
		return -1;
	while (fgets(l, sizeof l, f))
		if (!strncmp(l, field, n) && l[n] == ':')
			v = atol(l + n + 1);
	fclose(f);
	return v;
}

/* Every rank but 0 sends N eager messages of S bytes (arg "N,S", default
 * 256 x 16 KiB) to rank 0 as fast as the provider takes them; rank 0 posts
 * no receive until every sender says "sent": all its sends completed, or
 * the provider holds them back (flow control), so everything the provider
 * accepts meanwhile is unexpected at rank 0. Then rank 0 receives through a window of W reposted
 * buffers and checks that each sender's sequence numbers arrive exactly once
 * and in order, with intact payloads. Rank 0 reports its resident memory:
 * INFO incast ... base_kb (VmRSS after set-up, its buffers touched),
 * mid_kb (VmRSS once every sender said "sent"), hwm_kb (VmHWM at the end). */
static void scn_incast(void)
{
	struct ctx c;
	struct opts o = defopts();
	pair_open(&c, &o, "msg|tagged");
	int n = 256;
	size_t sz = 16384;
	if (g_arg[0])
		sscanf(g_arg, "%d,%zu", &n, &sz);
	EXPECT(n > 0 && sz >= 16, "arg %s", g_arg);
	const uint64_t TAG = 0xca57;
	int ns = g_nprocs - 1;
	if (g_rank == 0) {
		enum { W = 64 };
		char *b = xmalloc(W * sz);
		void *d = reg(&c, b, W * sz);
		memset(b, 0, W * sz);
		struct fi_context2 x[W];
		int *next = calloc(g_nprocs, sizeof *next);
		/* The completion stashes (fitest.h) are rings the receive loop
		 * walks through: touch them now, so that base_kb counts them and
		 * the growth measured is the provider's. */
		memset(c.rx.q, 1, c.rx.cap * sizeof *c.rx.q);
		memset(c.tx.q, 1, c.tx.cap * sizeof *c.tx.q);
		long base = status_kb("VmRSS");
		uint64_t t0 = now_ms();
		oob_send_all("go");
		for (int r = 1; r < g_nprocs; r++)
			oob_wait_progress(r, "sent");
		long mid = status_kb("VmRSS");
		long mid_anon = status_kb("RssAnon"), mid_shmem = status_kb("RssShmem");
		long total = (long)ns * n, got = 0, posted = 0;
		for (; posted < W && posted < total; posted++)
			POST(fi_trecv(c.ep, b + posted * sz, sz, d, FI_ADDR_UNSPEC, TAG, 0, &x[posted]));
		while (got < total) {
			struct comp e = cqw_ok(&c.rx);
			int i = (int)((struct fi_context2 *)e.ctx - x);
			EXPECT(i >= 0 && i < W, "bad op_context %p", e.ctx);
			char *p = b + (size_t)i * sz;
			EXPECT(e.len == sz && e.tag == TAG, "len %zu tag %#" PRIx64, e.len, e.tag);
			uint32_t hdr[2];
			memcpy(hdr, p, 8);
			int r = (int)hdr[0];
			EXPECT(r >= 1 && r < g_nprocs, "message names sender %d", r);
			EXPECT((int)hdr[1] == next[r], "sender %d: got sequence number %u, expected %d (%s)", r, hdr[1],
			       next[r], (int)hdr[1] < next[r] ? "duplicate" : "lost or reordered");
			check_at("incast payload", p + 8, sz - 8, (uint32_t)(r * 100000 + hdr[1]), 8);
			next[r]++;
			got++;
			memset(p, 0, 8);
			if (posted < total) {
				POST(fi_trecv(c.ep, p, sz, d, FI_ADDR_UNSPEC, TAG, 0, &x[i]));
				posted++;
			}
		}
		for (int r = 1; r < g_nprocs; r++)
			EXPECT(next[r] == n, "sender %d: %d of %d messages", r, next[r], n);
		cqw_none(&c.rx, 20);
		long hwm = status_kb("VmHWM");
		info("incast senders=%d msgs=%d size=%zu offered_kb=%ld base_kb=%ld mid_kb=%ld hwm_kb=%ld ms=%" PRIu64
		     " (end: anon_kb=%ld shmem_kb=%ld; mid: anon_kb=%ld shmem_kb=%ld)",
		     ns, n, sz, (long)((size_t)ns * n * sz / 1024), base, mid, hwm, now_ms() - t0,
		     status_kb("RssAnon"), status_kb("RssShmem"), mid_anon, mid_shmem);
	} else {
		char *b = xmalloc((size_t)n * sz);
		void *d = reg(&c, b, (size_t)n * sz);
		for (int s = 0; s < n; s++) {
			char *p = b + (size_t)s * sz;
			uint32_t hdr[2] = { (uint32_t)g_rank, (uint32_t)s };
			memcpy(p, hdr, 8);
			for (size_t k = 8; k < sz; k++)
				p[k] = (char)pat((uint32_t)(g_rank * 100000 + s), k);
		}
		struct fi_context2 *x = calloc(n, sizeof *x);
		int *seen = calloc(n, sizeof *seen);
		oob_wait_progress(0, "go");
		/* "sent" once every send completed (the receiver holds it all), or
		 * once the provider holds sends back: no completion for STALL_MS
		 * while sends are outstanding (credit flow control). The fallback
		 * detects back-pressure; it orders nothing. */
		enum { STALL_MS = 2000 };
		int said = 0, done = 0;
		uint64_t dl = now_ms() + g_timeout_ms, last = now_ms();
		struct comp e;
		for (int s = 0; s < n || done < n;) {
			int busy = 0;
			if (s < n) {
				ssize_t r = fi_tsend(c.ep, b + (size_t)s * sz, sz, d, c.addr[0], TAG, &x[s]);
				if (r != -FI_EAGAIN) {
					CHK(r);
					s++;
					busy = 1;
				}
			}
			while (cqw_try(&c.tx, &e)) {
				busy = 1;
				EXPECT(!e.err, "send error %d (%s)", e.err, fi_strerror(e.err));
				(void)ctx_index_once(&e, x, n, seen);
				done++;
				last = now_ms();
			}
			if (!said && done < s && now_ms() - last > STALL_MS) {
				/* (measured from the last completion or the start) */
				info("sender %d: no send completion for %d ms (%d of %d done): held back", g_rank,
				     STALL_MS, done, s);
				oob_send(0, "sent");
				said = 1;
			}
			if (now_ms() > dl)
				FAIL("timed out: %d of %d sends posted, %d completed", s, n, done);
			if (!busy) /* 16 senders share the cores with the receiver */
				sched_yield();
		}
		if (!said)
			oob_send(0, "sent");
	}
	finish(&c);
}

/* ================================================================ wire_mix (3 procs) */

/* A local peer floods rank 0 over shm while a peer on the udp wire (rank
 * 2, FI_GNIX_SHM=0 in its environment) sends one message: that message,
 * and the ACKs its sender waits for, must get through while the flood
 * goes on, not only in a pause of it. Rank 0 keeps a window of receives
 * posted for the flood, reposting each as it completes, and checks that
 * the flood arrives whole and in order. Once 1000 flood messages are in
 * it tells rank 2 to send; when that message is in, it tells the flooder
 * to stop. The flooder gives up after CAP messages, and a udp message
 * that came only then was starved. */
static void scn_wire_mix(void)
{
	struct ctx c;
	struct opts o = defopts();
	o.caps = FI_TAGGED | FI_DIRECTED_RECV;
	pair_open(&c, &o, "FI_DIRECTED_RECV");
	EXPECT(g_nprocs == 3, "needs 3 processes");
	enum { W = 64, START = 1000, CAP = 4000000, LEN = 8 };
	const uint64_t last = ~0ull;
	static char fb[W][LEN], ub[64];
	struct fi_context2 fx[W], ux;
	void *d = reg(&c, fb, sizeof fb);
	void *ud = reg(&c, ub, sizeof ub);
	if (g_rank == 0) {
		POST(fi_trecv(c.ep, ub, sizeof ub, ud, c.addr[2], 2, 0, &ux));
		for (int i = 0; i < W; i++)
			POST(fi_trecv(c.ep, fb[i], LEN, d, c.addr[1], 1, 0, &fx[i]));
		oob_send(1, "go");
		long got = 0, udp_at = -1;
		int ended = 0;
		while (!ended || udp_at < 0) {
			struct comp e = cqw_ok(&c.rx);
			if (e.ctx == &ux) {
				EXPECT(e.len == 40 && e.tag == 2, "udp message: len %zu tag %#lx", e.len,
				       (unsigned long)e.tag);
				check("udp message", ub, 40, 2);
				udp_at = got;
				EXPECT(!ended, "the udp peer's message came only after the flood ended (%ld "
				       "messages): starved", got);
				oob_send(1, "stop");
				continue;
			}
			int i = (int)((struct fi_context2 *)e.ctx - fx);
			EXPECT(i >= 0 && i < W && e.len == LEN, "flood completion: index %d len %zu", i, e.len);
			uint64_t seq;
			memcpy(&seq, fb[i], sizeof seq);
			if (seq == last) {
				ended = 1;
				continue;
			}
			EXPECT(seq == (uint64_t)got, "flood message %ld carries %lu: lost or reordered", got,
			       (unsigned long)seq);
			if (++got == START)
				oob_send(2, "go");
			POST(fi_trecv(c.ep, fb[i], LEN, d, c.addr[1], 1, 0, &fx[i]));
		}
		info("the udp message came after %ld flood messages (asked for after %d), the flood ended "
		     "after %ld", udp_at, START, got);
	} else if (g_rank == 1) {
		oob_wait_progress(0, "go");
		for (uint64_t k = 0; k < CAP; k++) {
			if (k % 256 == 0 && oob_poll(0, "stop") != -100)
				break;
			memcpy(fb[0], &k, sizeof k);
			POST(fi_tinject(c.ep, fb[0], LEN, c.addr[0], 1));
		}
		memcpy(fb[0], &last, sizeof last);
		POST(fi_tinject(c.ep, fb[0], LEN, c.addr[0], 1));
	} else {
		fill(ub, 40, 2);
		oob_wait_progress(0, "go");
		POST(fi_tsend(c.ep, ub, 40, ud, c.addr[0], 2, &ux));
		(void)cqw_ok(&c.tx);
	}
	finish(&c);
}

#define PAIR_SCENARIOS \
	{ "msg_ops", scn_msg_ops }, \
	{ "tagged_ops", scn_tagged_ops }, \
	{ "cq_format", scn_cq_format }, \
	{ "source", scn_source }, \
	{ "source_err", scn_source_err }, \
	{ "directed", scn_directed }, \
	{ "wire_mix", scn_wire_mix }, \
	{ "selective", scn_selective }, \
	{ "op_flags", scn_op_flags }, \
	{ "idle_ep", scn_idle_ep }, \
	{ "trunc", scn_trunc }, \
	{ "unexpected", scn_unexpected }, \
	{ "ordering", scn_ordering }, \
	{ "many_recvs", scn_many_recvs }, \
	{ "cq_overrun", scn_cq_overrun }, \
	{ "cq_sread", scn_cq_sread }, \
	{ "cntr_ep", scn_cntr_ep }, \
	{ "multi_recv", scn_multi_recv }, \
	{ "zero_len", scn_zero_len }, \
	{ "peek", scn_peek }, \
	{ "threads", scn_threads }, \
	{ "progress_auto", scn_progress_auto }, \
	{ "quiet_receiver", scn_quiet_receiver }, \
	{ "away", scn_away }, \
	{ "pingpong", scn_pingpong }, \
	{ "large", scn_large }, \
	{ "peer_fail", scn_peer_fail }, \
	{ "incast", scn_incast }, \
	{ "exit_after_send", scn_exit_after_send }, \
	{ "ctw_fence", scn_ctw_fence }, \
	{ "late_insert", scn_late_insert },
