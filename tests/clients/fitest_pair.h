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
	/* "polled": manual progress, and another thread polls the endpoint
	 * while the first sleeps. */
	int polled = !strcmp(g_arg, "polled");
	o.wait = !strcmp(g_arg, "unspec") ? FI_WAIT_UNSPEC : FI_WAIT_FD;
	if (polled)
		o.progress = FI_PROGRESS_MANUAL;
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
		if (polled) {
			/* The main thread polls the same endpoint (through its
			 * transmit CQ) while the sleeper sleeps, long enough to make
			 * many passes, then stops: with manual progress nothing but
			 * the sleeper is left to notice the message, so what wakes it
			 * must still be armed (gnix: the sockets stay in their epoll
			 * set while a sleeper is out). */
			struct fi_cq_tagged_entry te;
			uint64_t until = now_ms() + 100;
			while (now_ms() < until)
				EXPECT(fi_cq_read(c.tx.cq, &te, 1) == -FI_EAGAIN, "a transmit completion from nowhere");
		}
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
