/*
 * Multi-process scenarios, second part (included by fitest.c after
 * fitest_pair.h, whose helpers they use): peeking and claiming, threads,
 * progress models, idle endpoints, a 1 GiB message, peer failure, exit
 * after a send, fences, late AV inserts, incast and mixed wires; and the
 * table of every two- and three-process scenario.  Rank 0 receives, rank 1
 * sends, unless a scenario says otherwise.
 */

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

/* arg "mid" or "idle", with "-manual": FI_PROGRESS_MANUAL, under which
 * gnix's udp wire waits 15 minutes of silence before it calls a peer dead
 * (FI_GNIX_MANUAL_PEER_TIMEOUT_MS): the errors come in time only if the
 * death is learnt from the peer's host (its closed port refuses our
 * datagrams). */
static void scn_peer_fail(void)
{
	struct ctx c;
	struct opts o = defopts();
	int manual = strstr(g_arg, "-manual") != NULL;
	if (manual)
		o.progress = FI_PROGRESS_MANUAL;
	pair_open(&c, &o, "msg|tagged");
	DEVIATE(!manual || c.info->domain_attr->data_progress == FI_PROGRESS_MANUAL, "asked manual progress, got %d",
		c.info->domain_attr->data_progress);
	int mid = !strncmp(g_arg, "mid", 3);
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
	EXPECT(dt < 10000, "errors took %" PRIu64 " ms (bound 10 s: %s)", dt,
	       manual ? "a refused datagram, no timeout" : "FI_GNIX_PEER_TIMEOUT_MS");
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
