/*
 * nullprov: a libfabric provider that does no work, to price the layers
 * above a provider (Open MPI's pml cm and mtl ofi, fabtests) on their
 * own. Every tagged or untagged send and receive completes at once, in
 * the caller's thread: a send's entry goes into the CQ, a receive's entry
 * says it filled its buffer (untouched) with a message of the tag it
 * asked for (its ignored bits cleared) and remote data 0. No byte moves between processes, no rank
 * ever waits for another, so a rate measured over it is what the
 * client's own layers allow each rank alone: the ceiling no provider can
 * pass under that client (bench/README.md, "Open MPI's own ceiling").
 *
 * Only what such a run calls is there: fabric, domain, an RDM endpoint,
 * an AV (any address is accepted), a CQ of any format; the rest of every
 * ops table answers -FI_ENOSYS. It advertises the attributes gnix does
 * for the paths it has (caps, 8 bytes of CQ data, inject size, tag
 * format), so that Open MPI chooses the same protocol over it as over
 * gnix.
 *
 *   cc -O2 -shared -fPIC -o DIR/libnullprov-fi.so bench/nullprov.c
 *   FI_PROVIDER_PATH=DIR mpirun ... --mca mtl_ofi_provider_include nullprov
 *
 * Built with -DLINE (as liblineprov-fi.so, provider "lineprov") it moves
 * messages after all, in the least a shared-memory provider can do: a
 * tagged message of up to 32 bytes is one 64-byte line in a ring the
 * receiver polls (the sequence word written last, the consumer's head
 * read back only when the ring looks full; vader's fast boxes are such a
 * stream), matched on arrival against a list of posted receives (tag and
 * ignore bits; the source is not looked at) or kept as unexpected, and
 * completed through the same CQ. Two processes at most, one endpoint
 * each; no larger messages, no probe: the floor of a real provider's
 * small-message path under a client, not a provider. With -DSTRIDE=N
 * (a multiple of 64) its lines sit N bytes apart instead of one after
 * the other: -DSTRIDE=8192 lays them out as gnix's ring lays out the
 * first lines of its 8 KiB slots (bench/README.md, "What is left of the
 * 8-byte gap"). With -DPACK two messages share a line: a 32-byte slot
 * (a 32-bit sequence word, length, tag, 32 bits of CQ data, up to 12
 * payload bytes; longer messages are refused), as vader's fast boxes
 * pack small messages one after the other (bench/README.md, "The
 * message rate in the host's two states"). With -DPREFETCH the consumer,
 * reading a line, asks for the next one (PREFETCHT0) and the producer,
 * writing one, for the one two ahead for writing (PREFETCHW, built with
 * -mprfchw), as gnix's rings do (`Mailbox::peek`,
 * `Outbox::prefetch_ahead`). With -DSPIN every message costs its
 * receiver SPIN_RX and its sender SPIN_TX turns of an empty loop more
 * (environment variables, read at endpoint opening; 0 if unset): what a
 * longer path on either side does to a client's rate (bench/README.md,
 * "What the message rate asks of the receiving rank").
 *
 * Built with -DDGRAM (as libdgramprov-fi.so, provider "dgramprov") it is
 * the same between two hosts: a tagged message of up to 32 bytes is one
 * UDP datagram (tag, CQ data, length, payload) sent with one send() on a
 * socket connected to the peer, as the udp wire sends to a busy peer, and
 * taken by the receiver's fi_cq_read, one recv() a read (none in the read
 * right after one that returned entries); the same match and CQ as
 * lineprov. No sequence numbers, acknowledgements, retransmissions or
 * flow control: what any provider over UDP sockets adds to the socket
 * calls at least, under a client (bench/README.md, "The least a provider
 * does across hosts"). It binds the first IPv4
 * address that is not a loopback one, so each "host" of the namespace pair
 * names its veth.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <netinet/in.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_tagged.h>
#include <rdma/providers/fi_prov.h>

#if defined(LINE) && defined(DGRAM)
#error "-DLINE or -DDGRAM, not both"
#endif
#if defined(LINE) || defined(DGRAM)
#define MOVES /* messages move between processes after all */
#endif
#ifdef LINE
#define NAME "lineprov"
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#elif defined(DGRAM)
#define NAME "dgramprov"
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <sys/socket.h>
#else
#define NAME "nullprov"
#endif
#define CAPS (FI_MSG | FI_TAGGED | FI_SEND | FI_RECV | FI_SOURCE | FI_DIRECTED_RECV | \
	      FI_LOCAL_COMM | FI_REMOTE_COMM)
#define CQ_DEPTH 65536 /* a power of two */

/*
 * Every entry of an ops table this provider does not serve. Called
 * through pointers of other types: on x86-64 and aarch64 a callee that
 * reads no arguments and returns in the integer register answers any of
 * them alike (a measuring instrument, not a provider to ship).
 */
static long nosys(void)
{
	return -FI_ENOSYS;
}
#define NOSYS ((void *)nosys)

struct cq {
	struct fid_cq cq;
	size_t size; /* of one entry in the CQ's format */
	uint64_t head, tail;
	int found; /* the last read returned entries */
	struct fi_cq_tagged_entry e[CQ_DEPTH];
};

struct ep {
	struct fid_ep ep;
	struct cq *tx, *rx;
	int tx_selective, rx_selective;
};

#ifdef MOVES
#include <stdatomic.h>
static void move_progress(void);
static int move_insert(const struct sockaddr_in *a, fi_addr_t *out);
static int move_open(struct ep *ep);
static void move_close(void);
#endif

static int close_free(struct fid *f)
{
	free(f);
	return 0;
}

/* The fid ops of every class but the endpoint: closing frees it. */
static struct fi_ops plain_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = close_free,
	.bind = NOSYS,
	.control = NOSYS,
	.ops_open = NOSYS,
};

/* --- the CQ --- */

static void cq_push(struct cq *cq, void *ctx, uint64_t flags, size_t len, void *buf, uint64_t data,
		    uint64_t tag)
{
	/* A CQ that overflows loses its oldest entries: a run that reads its
	 * CQ never has 65536 of them waiting. */
	struct fi_cq_tagged_entry *e = &cq->e[cq->tail++ & (CQ_DEPTH - 1)];
	e->op_context = ctx;
	e->flags = flags;
	e->len = len;
	e->buf = buf;
	e->data = data;
	e->tag = tag;
}

static ssize_t cq_read(struct fid_cq *f, void *buf, size_t count)
{
	struct cq *cq = (struct cq *)f;
	size_t n = 0;
#if defined(DGRAM)
	/* A read right after one that returned entries does not look at the
	 * socket: a client that reads its CQ until it is empty (Open MPI's
	 * mtl ofi) then answers without a recv() that finds nothing, as
	 * gnix's reads do. */
	if (!cq->found)
		move_progress();
#elif defined(MOVES)
	move_progress();
#endif
	while (n < count && cq->head != cq->tail) {
		memcpy((char *)buf + n * cq->size, &cq->e[cq->head++ & (CQ_DEPTH - 1)], cq->size);
		n++;
	}
	cq->found = n > 0;
	return n ? (ssize_t)n : -FI_EAGAIN;
}

static ssize_t cq_readfrom(struct fid_cq *f, void *buf, size_t count, fi_addr_t *src)
{
	ssize_t n = cq_read(f, buf, count);
	for (ssize_t i = 0; i < n; i++)
		src[i] = FI_ADDR_NOTAVAIL;
	return n;
}

static ssize_t cq_readerr(struct fid_cq *f, struct fi_cq_err_entry *e, uint64_t flags)
{
	return -FI_EAGAIN;
}

static const char *cq_strerror(struct fid_cq *f, int prov_errno, const void *err_data, char *buf,
			       size_t len)
{
	return "nullprov: no errors";
}

static struct fi_ops_cq cq_ops = {
	.size = sizeof(struct fi_ops_cq),
	.read = cq_read,
	.readfrom = cq_readfrom,
	.readerr = cq_readerr,
	.sread = NOSYS,
	.sreadfrom = NOSYS,
	.signal = NOSYS,
	.strerror = cq_strerror,
};

static int cq_open(struct fid_domain *d, struct fi_cq_attr *attr, struct fid_cq **out, void *ctx)
{
	size_t size;
	switch (attr->format) {
	case FI_CQ_FORMAT_UNSPEC:
	case FI_CQ_FORMAT_CONTEXT:
		size = sizeof(struct fi_cq_entry);
		break;
	case FI_CQ_FORMAT_MSG:
		size = sizeof(struct fi_cq_msg_entry);
		break;
	case FI_CQ_FORMAT_DATA:
		size = sizeof(struct fi_cq_data_entry);
		break;
	case FI_CQ_FORMAT_TAGGED:
		size = sizeof(struct fi_cq_tagged_entry);
		break;
	default:
		return -FI_ENOSYS;
	}
	if (attr->wait_obj != FI_WAIT_NONE && attr->wait_obj != FI_WAIT_UNSPEC)
		return -FI_ENOSYS;
	struct cq *cq = calloc(1, sizeof *cq);
	if (!cq)
		return -FI_ENOMEM;
	cq->cq.fid.fclass = FI_CLASS_CQ;
	cq->cq.fid.context = ctx;
	cq->cq.fid.ops = &plain_fi_ops;
	cq->cq.ops = &cq_ops;
	cq->size = size;
	*out = &cq->cq;
	return 0;
}

/* --- the AV: any address, its index --- */

static int av_insert(struct fid_av *av, const void *addr, size_t count, fi_addr_t *fi_addr,
		     uint64_t flags, void *ctx)
{
	static fi_addr_t next;
	for (size_t i = 0; i < count; i++) {
		fi_addr_t a = next++;
#ifdef MOVES
		int err = move_insert((const struct sockaddr_in *)addr + i, &a);
		if (err)
			return err;
#endif
		if (fi_addr)
			fi_addr[i] = a;
	}
	return (int)count;
}

static int av_remove(struct fid_av *av, fi_addr_t *fi_addr, size_t count, uint64_t flags)
{
	return 0;
}

static struct fi_ops_av av_ops = {
	.size = sizeof(struct fi_ops_av),
	.insert = av_insert,
	.insertsvc = NOSYS,
	.insertsym = NOSYS,
	.remove = av_remove,
	.lookup = NOSYS,
	.straddr = NOSYS,
	.av_set = NOSYS,
};

static int av_open(struct fid_domain *d, struct fi_av_attr *attr, struct fid_av **out, void *ctx)
{
	struct fid_av *av = calloc(1, sizeof *av);
	if (!av)
		return -FI_ENOMEM;
	av->fid.fclass = FI_CLASS_AV;
	av->fid.context = ctx;
	av->fid.ops = &plain_fi_ops;
	av->ops = &av_ops;
	*out = av;
	return 0;
}

/* --- the endpoint: everything completes at once --- */

static inline void tx_done(struct ep *ep, void *ctx, uint64_t flags, size_t len, uint64_t op_flags)
{
	if (ep->tx && (!ep->tx_selective || (op_flags & FI_COMPLETION)))
		cq_push(ep->tx, ctx, flags | FI_SEND, 0, NULL, 0, 0);
}

static inline void rx_done(struct ep *ep, void *ctx, uint64_t flags, void *buf, size_t len,
			   uint64_t tag, uint64_t ignore, uint64_t op_flags)
{
	if (ep->rx && (!ep->rx_selective || (op_flags & FI_COMPLETION)))
		cq_push(ep->rx, ctx, flags | FI_RECV, len, buf, 0, tag & ~ignore);
}

static size_t iov_len(const struct iovec *iov, size_t count)
{
	size_t n = 0;
	for (size_t i = 0; i < count; i++)
		n += iov[i].iov_len;
	return n;
}

#ifdef MOVES
/* --- what lineprov and dgramprov share: the match, a message's life --- */

#define MSG_MAX 32
#define POOL 16384
#define SELF ((fi_addr_t)-2)

/* A posted receive or an unexpected message. */
struct node {
	struct node *next;
	void *buf, *ctx;
	size_t len;
	uint64_t tag, ignore, data;
	char payload[MSG_MAX];
};

struct list {
	struct node *head, *tail;
};

static struct {
	struct ep *ep;
	struct list posted, unexpected, free;
	struct node pool[POOL];
} G;

static void list_push(struct list *l, struct node *n)
{
	n->next = NULL;
	if (l->tail)
		l->tail->next = n;
	else
		l->head = n;
	l->tail = n;
}

static struct node *list_pop(struct list *l)
{
	struct node *n = l->head;
	if (n && !(l->head = n->next))
		l->tail = NULL;
	return n;
}

/* The first node whose tag matches, unlinked. */
static struct node *list_take(struct list *l, uint64_t tag, int by_node_ignore, uint64_t ignore)
{
	struct node *prev = NULL;
	for (struct node *n = l->head; n; prev = n, n = n->next) {
		uint64_t ig = by_node_ignore ? n->ignore : ignore;
		if (((n->tag ^ tag) & ~ig) == 0) {
			if (prev)
				prev->next = n->next;
			else
				l->head = n->next;
			if (l->tail == n)
				l->tail = prev;
			return n;
		}
	}
	return NULL;
}

#ifdef SPIN
/* Turns of an empty loop a message costs its receiver and its sender. */
static unsigned spin_rx, spin_tx;

static inline void spin(unsigned n)
{
	for (unsigned i = n; i; i--)
		__asm__ volatile("");
}
#endif

static void msg_arrived(uint64_t tag, uint64_t data, uint32_t len, const char *payload)
{
#ifdef SPIN
	spin(spin_rx);
#endif
	struct node *r = list_take(&G.posted, tag, 1, 0);
	if (r) {
		size_t n = len < r->len ? len : r->len;
		memcpy(r->buf, payload, n);
		if (G.ep->rx)
			cq_push(G.ep->rx, r->ctx, FI_RECV | FI_TAGGED, n, r->buf, data, tag);
		list_push(&G.free, r);
		return;
	}
	struct node *u = list_pop(&G.free);
	if (!u)
		abort(); /* more unexpected messages than the pool: an instrument's limit */
	u->tag = tag;
	u->data = data;
	u->len = len;
	memcpy(u->payload, payload, len);
	list_push(&G.unexpected, u);
}

static ssize_t move_recv(void *buf, size_t len, uint64_t tag, uint64_t ignore, void *ctx)
{
	struct node *u = list_take(&G.unexpected, tag, 0, ignore);
	if (u) {
		size_t n = u->len < len ? u->len : len;
		memcpy(buf, u->payload, n);
		if (G.ep->rx)
			cq_push(G.ep->rx, ctx, FI_RECV | FI_TAGGED, n, buf, u->data, u->tag);
		list_push(&G.free, u);
		return 0;
	}
	struct node *r = list_pop(&G.free);
	if (!r)
		return -FI_EAGAIN;
	r->buf = buf;
	r->len = len;
	r->tag = tag;
	r->ignore = ignore;
	r->ctx = ctx;
	list_push(&G.posted, r);
	return 0;
}

/* The transport's part: a message to the one peer, and the arrivals. */
static ssize_t xport_send(const void *buf, size_t len, uint64_t data, uint64_t tag);
static int xport_open(void);

static ssize_t move_send(struct ep *ep, const void *buf, size_t len, uint64_t data, fi_addr_t dst,
			 uint64_t tag, void *ctx, int complete)
{
	if (len > MSG_MAX)
		return -FI_ENOSYS;
	if (dst == SELF) {
		msg_arrived(tag, data, len, buf);
	} else {
		ssize_t err = xport_send(buf, len, data, tag);
		if (err)
			return err;
	}
	if (complete)
		tx_done(ep, ctx, FI_TAGGED, len, FI_COMPLETION);
	return 0;
}

static int move_open(struct ep *ep)
{
	if (G.ep)
		return -FI_ENOSYS; /* one endpoint a process */
	int err = xport_open();
	if (err)
		return err;
	G.ep = ep;
#ifdef SPIN
	spin_rx = getenv("SPIN_RX") ? (unsigned)atoi(getenv("SPIN_RX")) : 0;
	spin_tx = getenv("SPIN_TX") ? (unsigned)atoi(getenv("SPIN_TX")) : 0;
#endif
	for (int i = 0; i < POOL; i++)
		list_push(&G.free, &G.pool[i]);
	return 0;
}

#ifdef LINE
/* --- lineprov: one line a message --- */

#ifdef PACK
#define NLINES 512 /* slots, a power of two: the same 16 KiB */
#define STRIDE 32
#define LINE_PAYLOAD 12
#else
#define NLINES 256 /* a power of two */
#ifndef STRIDE
#define STRIDE 64
#endif
#define LINE_PAYLOAD MSG_MAX
#endif
#define RING_AT(r, i) ((struct line *)((r)->ring + ((i) & (NLINES - 1)) * STRIDE))

#ifdef PACK
typedef uint32_t seq_t;
struct line {
	_Atomic seq_t seq; /* its position + 1 (mod 2^32), written last */
	uint32_t len;
	uint64_t tag;
	uint32_t data; /* Open MPI's CQ data is a 32-bit rank */
	char payload[LINE_PAYLOAD];
};

_Static_assert(sizeof(struct line) == STRIDE, "two slots a line");
#else
typedef uint64_t seq_t;
struct line {
	_Atomic seq_t seq; /* its position + 1, written last */
	uint64_t tag, data;
	uint32_t len, pad;
	char payload[MSG_MAX];
};

_Static_assert(STRIDE % 64 == 0 && STRIDE >= sizeof(struct line), "STRIDE: a multiple of 64, a line at least");
#endif

struct region {
	_Alignas(64) _Atomic uint64_t consumed; /* the consumer's head, now and then */
	char pad[56];
	_Alignas(64) char ring[NLINES * STRIDE];
};

static struct {
	struct region *mine, *peer;
	pid_t peer_pid;
	uint64_t head, tail, room_until;
	char name[64];
} L;

static void move_progress(void)
{
	if (!L.mine)
		return;
	uint64_t h = L.head;
	for (;;) {
		struct line *l = RING_AT(L.mine, h);
		if (atomic_load_explicit(&l->seq, memory_order_acquire) != (seq_t)(h + 1))
			break;
#ifdef PREFETCH
		__builtin_prefetch(RING_AT(L.mine, h + 1), 0, 3);
#endif
		msg_arrived(l->tag, l->data, l->len, l->payload);
		h++;
		if ((h & 31) == 0)
			atomic_store_explicit(&L.mine->consumed, h, memory_order_release);
	}
	if (h != L.head) {
		L.head = h;
		atomic_store_explicit(&L.mine->consumed, h, memory_order_release);
	}
}

static ssize_t xport_send(const void *buf, size_t len, uint64_t data, uint64_t tag)
{
	if (!L.peer)
		return -FI_EINVAL;
	if (len > LINE_PAYLOAD)
		return -FI_ENOSYS;
#ifdef SPIN
	spin(spin_tx);
#endif
	while (L.tail >= L.room_until) {
		L.room_until = atomic_load_explicit(&L.peer->consumed, memory_order_acquire) + NLINES;
		if (L.tail >= L.room_until)
			move_progress(); /* both full: take ours in meanwhile */
	}
	struct line *l = RING_AT(L.peer, L.tail);
#ifdef PREFETCH
	__builtin_prefetch(RING_AT(L.peer, L.tail + 2), 1, 3);
#endif
	l->tag = tag;
	l->data = data;
	l->len = len;
	memcpy(l->payload, buf, len);
	atomic_store_explicit(&l->seq, (seq_t)++L.tail, memory_order_release);
	return 0;
}

static struct region *region_map(pid_t pid, int create);

static int move_insert(const struct sockaddr_in *a, fi_addr_t *out)
{
	pid_t pid = (pid_t)ntohl(a->sin_addr.s_addr);
	if (pid == getpid()) {
		*out = SELF;
		return 0;
	}
	if (L.peer && pid != L.peer_pid)
		return -FI_ENOSYS; /* one peer at most */
	if (!L.peer) {
		L.peer = region_map(pid, 0);
		if (!L.peer)
			return -FI_EADDRNOTAVAIL;
		L.peer_pid = pid;
		L.room_until = NLINES;
	}
	*out = 0;
	return 0;
}

static int xport_open(void)
{
	L.mine = region_map(getpid(), 1);
	return L.mine ? 0 : -FI_ENOMEM;
}

/* The process id names the endpoint: its region is mapped by it. */
static void move_name(struct sockaddr_in *a)
{
	a->sin_addr.s_addr = htonl((uint32_t)getpid());
}

static void move_close(void)
{
	shm_unlink(L.name);
	munmap(L.mine, sizeof(struct region));
	if (L.peer)
		munmap(L.peer, sizeof(struct region));
	L.mine = L.peer = NULL;
	G.ep = NULL;
}

static struct region *region_map(pid_t pid, int create)
{
	char name[64];
	snprintf(name, sizeof name, "/lineprov-%d", (int)pid);
	int fd = shm_open(name, create ? O_RDWR | O_CREAT | O_EXCL : O_RDWR, 0600);
	if (fd < 0)
		return NULL;
	if (create && ftruncate(fd, sizeof(struct region)) != 0) {
		close(fd);
		return NULL;
	}
	void *p = mmap(NULL, sizeof(struct region), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (create)
		snprintf(L.name, sizeof L.name, "%s", name);
	return p == MAP_FAILED ? NULL : p;
}
#else
/* --- dgramprov: one datagram a message --- */

/* What one datagram carries: the message, nothing else (no sequence, no
 * acknowledgement, no retransmission: a lost datagram is a lost message). */
struct dgram {
	uint64_t tag, data;
	uint32_t len;
	char payload[MSG_MAX];
} __attribute__((packed));

#define DGRAM_HDR (sizeof(struct dgram) - MSG_MAX)

static struct {
	int fd;
	struct sockaddr_in self, peer;
} D = { .fd = -1 };

/* The next datagram waiting, a message: one receive a read, so that a
 * read that finds one returns without a second call that finds none. */
static void move_progress(void)
{
	struct dgram d;
	ssize_t n;
	while ((n = recv(D.fd, &d, sizeof d, MSG_DONTWAIT)) >= 0) {
		if (n >= (ssize_t)DGRAM_HDR && d.len <= MSG_MAX && (size_t)n == DGRAM_HDR + d.len) {
			msg_arrived(d.tag, d.data, d.len, d.payload);
			return;
		}
	}
}

/* On the socket connected to the peer, as the udp wire sends to a busy
 * peer: no route lookup a send, the arrival demultiplexed early. */
static ssize_t xport_send(const void *buf, size_t len, uint64_t data, uint64_t tag)
{
	if (!D.peer.sin_port)
		return -FI_EINVAL;
	struct dgram d = { .tag = tag, .data = data, .len = (uint32_t)len };
	memcpy(d.payload, buf, len);
	if (send(D.fd, &d, DGRAM_HDR + len, 0) != (ssize_t)(DGRAM_HDR + len))
		return errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS ? -FI_EAGAIN : -FI_EIO;
	return 0;
}

static int move_insert(const struct sockaddr_in *a, fi_addr_t *out)
{
	if (a->sin_addr.s_addr == D.self.sin_addr.s_addr && a->sin_port == D.self.sin_port) {
		*out = SELF;
		return 0;
	}
	if (D.peer.sin_port)
		return a->sin_addr.s_addr == D.peer.sin_addr.s_addr && a->sin_port == D.peer.sin_port
			       ? (*out = 0, 0)
			       : -FI_ENOSYS; /* one peer at most */
	/* Datagrams that came before the connect stay queued. */
	if (connect(D.fd, (const struct sockaddr *)a, sizeof *a) != 0)
		return -FI_EADDRNOTAVAIL;
	D.peer = *a;
	*out = 0;
	return 0;
}

/* The socket, bound to the first IPv4 address that is not a loopback
 * one (the namespace's veth), on a port of the kernel's choice. */
static int xport_open(void)
{
	struct ifaddrs *all, *i;
	if (getifaddrs(&all) != 0)
		return -FI_ENODEV;
	D.self = (struct sockaddr_in){ .sin_family = AF_INET };
	for (i = all; i; i = i->ifa_next)
		if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && !(i->ifa_flags & IFF_LOOPBACK) &&
		    (i->ifa_flags & IFF_UP)) {
			D.self.sin_addr = ((struct sockaddr_in *)i->ifa_addr)->sin_addr;
			break;
		}
	freeifaddrs(all);
	if (!i)
		return -FI_ENODEV;
	socklen_t len = sizeof D.self;
	D.fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (D.fd < 0)
		return -FI_ENOMEM;
	if (bind(D.fd, (struct sockaddr *)&D.self, sizeof D.self) != 0 ||
	    getsockname(D.fd, (struct sockaddr *)&D.self, &len) != 0) {
		close(D.fd);
		D.fd = -1;
		return -FI_EADDRNOTAVAIL;
	}
	return 0;
}

static void move_name(struct sockaddr_in *a)
{
	*a = D.self;
}

static void move_close(void)
{
	if (D.fd >= 0)
		close(D.fd);
	D.fd = -1;
	D.peer = (struct sockaddr_in){ 0 };
	G.ep = NULL;
}
#endif
#endif

static ssize_t t_recv(struct fid_ep *e, void *buf, size_t len, void *desc, fi_addr_t src,
		      uint64_t tag, uint64_t ignore, void *ctx)
{
#ifdef MOVES
	return move_recv(buf, len, tag, ignore, ctx);
#endif
	rx_done((struct ep *)e, ctx, FI_TAGGED, buf, len, tag, ignore, FI_COMPLETION);
	return 0;
}

static ssize_t t_recvv(struct fid_ep *e, const struct iovec *iov, void **desc, size_t count,
		       fi_addr_t src, uint64_t tag, uint64_t ignore, void *ctx)
{
#ifdef MOVES
	return count == 1 ? move_recv(iov[0].iov_base, iov[0].iov_len, tag, ignore, ctx) : -FI_ENOSYS;
#endif
	rx_done((struct ep *)e, ctx, FI_TAGGED, count ? iov[0].iov_base : NULL, iov_len(iov, count),
		tag, ignore, FI_COMPLETION);
	return 0;
}

static ssize_t t_recvmsg(struct fid_ep *e, const struct fi_msg_tagged *m, uint64_t flags)
{
	/* A peek finds nothing: nothing ever arrives (lineprov: no probe). */
	if (flags & FI_PEEK)
		return -FI_ENOMSG;
#ifdef MOVES
	return m->iov_count == 1 ? move_recv(m->msg_iov[0].iov_base, m->msg_iov[0].iov_len, m->tag,
					     m->ignore, m->context)
				 : -FI_ENOSYS;
#endif
	rx_done((struct ep *)e, m->context, FI_TAGGED, m->iov_count ? m->msg_iov[0].iov_base : NULL,
		iov_len(m->msg_iov, m->iov_count), m->tag, m->ignore, flags);
	return 0;
}

static ssize_t t_send(struct fid_ep *e, const void *buf, size_t len, void *desc, fi_addr_t dst,
		      uint64_t tag, void *ctx)
{
#ifdef MOVES
	return move_send((struct ep *)e, buf, len, 0, dst, tag, ctx, 1);
#endif
	tx_done((struct ep *)e, ctx, FI_TAGGED, len, FI_COMPLETION);
	return 0;
}

static ssize_t t_sendv(struct fid_ep *e, const struct iovec *iov, void **desc, size_t count,
		       fi_addr_t dst, uint64_t tag, void *ctx)
{
#ifdef MOVES
	return count == 1 ? move_send((struct ep *)e, iov[0].iov_base, iov[0].iov_len, 0, dst, tag, ctx, 1)
			  : -FI_ENOSYS;
#endif
	tx_done((struct ep *)e, ctx, FI_TAGGED, 0, FI_COMPLETION);
	return 0;
}

static ssize_t t_sendmsg(struct fid_ep *e, const struct fi_msg_tagged *m, uint64_t flags)
{
#ifdef MOVES
	if (m->iov_count != 1)
		return -FI_ENOSYS;
	return move_send((struct ep *)e, m->msg_iov[0].iov_base, m->msg_iov[0].iov_len,
			 (flags & FI_REMOTE_CQ_DATA) ? m->data : 0, m->addr, m->tag, m->context,
			 !(flags & FI_INJECT) && (flags & FI_COMPLETION));
#endif
	if (!(flags & FI_INJECT))
		tx_done((struct ep *)e, m->context, FI_TAGGED, 0, flags);
	return 0;
}

static ssize_t t_inject(struct fid_ep *e, const void *buf, size_t len, fi_addr_t dst, uint64_t tag)
{
#ifdef MOVES
	return move_send((struct ep *)e, buf, len, 0, dst, tag, NULL, 0);
#endif
	return 0;
}

static ssize_t t_senddata(struct fid_ep *e, const void *buf, size_t len, void *desc, uint64_t data,
			  fi_addr_t dst, uint64_t tag, void *ctx)
{
#ifdef MOVES
	return move_send((struct ep *)e, buf, len, data, dst, tag, ctx, 1);
#endif
	tx_done((struct ep *)e, ctx, FI_TAGGED, len, FI_COMPLETION);
	return 0;
}

static ssize_t t_injectdata(struct fid_ep *e, const void *buf, size_t len, uint64_t data,
			    fi_addr_t dst, uint64_t tag)
{
#ifdef MOVES
	return move_send((struct ep *)e, buf, len, data, dst, tag, NULL, 0);
#endif
	return 0;
}

static struct fi_ops_tagged tagged_ops = {
	.size = sizeof(struct fi_ops_tagged),
	.recv = t_recv,
	.recvv = t_recvv,
	.recvmsg = t_recvmsg,
	.send = t_send,
	.sendv = t_sendv,
	.sendmsg = t_sendmsg,
	.inject = t_inject,
	.senddata = t_senddata,
	.injectdata = t_injectdata,
};

static ssize_t m_recv(struct fid_ep *e, void *buf, size_t len, void *desc, fi_addr_t src, void *ctx)
{
#ifdef MOVES
	return -FI_ENOSYS;
#endif
	rx_done((struct ep *)e, ctx, FI_MSG, buf, len, 0, 0, FI_COMPLETION);
	return 0;
}

static ssize_t m_send(struct fid_ep *e, const void *buf, size_t len, void *desc, fi_addr_t dst,
		      void *ctx)
{
#ifdef MOVES
	return -FI_ENOSYS;
#endif
	tx_done((struct ep *)e, ctx, FI_MSG, len, FI_COMPLETION);
	return 0;
}

static ssize_t m_inject(struct fid_ep *e, const void *buf, size_t len, fi_addr_t dst)
{
#ifdef MOVES
	return -FI_ENOSYS;
#endif
	return 0;
}

static struct fi_ops_msg msg_ops = {
	.size = sizeof(struct fi_ops_msg),
	.recv = m_recv,
	.recvv = NOSYS,
	.recvmsg = NOSYS,
	.send = m_send,
	.sendv = NOSYS,
	.sendmsg = NOSYS,
	.inject = m_inject,
	.senddata = NOSYS,
	.injectdata = NOSYS,
};

static int ep_getname(fid_t f, void *addr, size_t *len)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
#ifdef MOVES
	move_name(&a);
#else
	a.sin_addr.s_addr = htonl((uint32_t)getpid()); /* any name will do */
#endif
	size_t want = sizeof a;
	if (*len < want) {
		*len = want;
		return -FI_ETOOSMALL;
	}
	memcpy(addr, &a, want);
	*len = want;
	return 0;
}

static struct fi_ops_cm cm_ops = {
	.size = sizeof(struct fi_ops_cm),
	.setname = NOSYS,
	.getname = ep_getname,
	.getpeer = NOSYS,
	.connect = NOSYS,
	.listen = NOSYS,
	.accept = NOSYS,
	.reject = NOSYS,
	.shutdown = NOSYS,
	.join = NOSYS,
};

static ssize_t ep_cancel(fid_t f, void *ctx)
{
	return -FI_ENOENT; /* everything has completed already */
}

static int ep_getopt(fid_t f, int level, int name, void *val, size_t *len)
{
	return -FI_ENOPROTOOPT;
}

static int ep_setopt(fid_t f, int level, int name, const void *val, size_t len)
{
	return -FI_ENOPROTOOPT;
}

static struct fi_ops_ep ep_ops = {
	.size = sizeof(struct fi_ops_ep),
	.cancel = ep_cancel,
	.getopt = ep_getopt,
	.setopt = ep_setopt,
	.tx_ctx = NOSYS,
	.rx_ctx = NOSYS,
	.rx_size_left = NOSYS,
	.tx_size_left = NOSYS,
};

static struct fi_ops_rma rma_ops = {
	.size = sizeof(struct fi_ops_rma),
	.read = NOSYS, .readv = NOSYS, .readmsg = NOSYS, .write = NOSYS, .writev = NOSYS,
	.writemsg = NOSYS, .inject = NOSYS, .writedata = NOSYS, .injectdata = NOSYS,
};

static struct fi_ops_atomic atomic_ops = {
	.size = sizeof(struct fi_ops_atomic),
	.write = NOSYS, .writev = NOSYS, .writemsg = NOSYS, .inject = NOSYS,
	.readwrite = NOSYS, .readwritev = NOSYS, .readwritemsg = NOSYS,
	.compwrite = NOSYS, .compwritev = NOSYS, .compwritemsg = NOSYS,
	.writevalid = NOSYS, .readwritevalid = NOSYS, .compwritevalid = NOSYS,
};

static int ep_bind(struct fid *f, struct fid *bfid, uint64_t flags)
{
	struct ep *ep = (struct ep *)f;
	if (bfid->fclass == FI_CLASS_CQ) {
		struct cq *cq = (struct cq *)bfid;
		if (flags & FI_TRANSMIT) {
			ep->tx = cq;
			ep->tx_selective = !!(flags & FI_SELECTIVE_COMPLETION);
		}
		if (flags & FI_RECV) {
			ep->rx = cq;
			ep->rx_selective = !!(flags & FI_SELECTIVE_COMPLETION);
		}
		return 0;
	}
	if (bfid->fclass == FI_CLASS_AV)
		return 0;
	return -FI_ENOSYS;
}

static int ep_control(struct fid *f, int cmd, void *arg)
{
	return cmd == FI_ENABLE ? 0 : -FI_ENOSYS;
}

static int ep_close(struct fid *f)
{
#ifdef MOVES
	move_close();
#endif
	return close_free(f);
}

static struct fi_ops ep_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = ep_close,
	.bind = ep_bind,
	.control = ep_control,
	.ops_open = NOSYS,
};

static int ep_open(struct fid_domain *d, struct fi_info *info, struct fid_ep **out, void *ctx)
{
	struct ep *ep = calloc(1, sizeof *ep);
	if (!ep)
		return -FI_ENOMEM;
	ep->ep.fid.fclass = FI_CLASS_EP;
	ep->ep.fid.context = ctx;
	ep->ep.fid.ops = &ep_fi_ops;
	ep->ep.ops = &ep_ops;
	ep->ep.cm = &cm_ops;
	ep->ep.msg = &msg_ops;
	ep->ep.rma = &rma_ops;
	ep->ep.tagged = &tagged_ops;
	ep->ep.atomic = &atomic_ops;
#ifdef MOVES
	int err = move_open(ep);
	if (err) {
		free(ep);
		return err;
	}
#endif
	*out = &ep->ep;
	return 0;
}

/* --- domain and fabric --- */

static struct fi_ops_domain dom_ops = {
	.size = sizeof(struct fi_ops_domain),
	.av_open = av_open,
	.cq_open = cq_open,
	.endpoint = ep_open,
	.scalable_ep = NOSYS,
	.cntr_open = NOSYS,
	.poll_open = NOSYS,
	.stx_ctx = NOSYS,
	.srx_ctx = NOSYS,
	.query_atomic = NOSYS,
	.query_collective = NOSYS,
};

static struct fi_ops_mr mr_ops = {
	.size = sizeof(struct fi_ops_mr),
	.reg = NOSYS,
	.regv = NOSYS,
	.regattr = NOSYS,
};

static int domain_open(struct fid_fabric *fab, struct fi_info *info, struct fid_domain **out,
		       void *ctx)
{
	struct fid_domain *d = calloc(1, sizeof *d);
	if (!d)
		return -FI_ENOMEM;
	d->fid.fclass = FI_CLASS_DOMAIN;
	d->fid.context = ctx;
	d->fid.ops = &plain_fi_ops;
	d->ops = &dom_ops;
	d->mr = &mr_ops;
	*out = d;
	return 0;
}

static struct fi_ops_fabric fab_ops = {
	.size = sizeof(struct fi_ops_fabric),
	.domain = domain_open,
	.passive_ep = NOSYS,
	.eq_open = NOSYS,
	.wait_open = NOSYS,
	.trywait = NOSYS,
};

static int fabric_open(struct fi_fabric_attr *attr, struct fid_fabric **out, void *ctx)
{
	struct fid_fabric *f = calloc(1, sizeof *f);
	if (!f)
		return -FI_ENOMEM;
	f->fid.fclass = FI_CLASS_FABRIC;
	f->fid.context = ctx;
	f->fid.ops = &plain_fi_ops;
	f->ops = &fab_ops;
	f->api_version = FI_VERSION(1, 17);
	*out = f;
	return 0;
}

static int getinfo(uint32_t version, const char *node, const char *service, uint64_t flags,
		   const struct fi_info *hints, struct fi_info **out)
{
	if (hints) {
		if ((hints->caps & ~CAPS) != 0)
			return -FI_ENODATA;
		if (hints->ep_attr && hints->ep_attr->type != FI_EP_UNSPEC &&
		    hints->ep_attr->type != FI_EP_RDM)
			return -FI_ENODATA;
	}
	struct fi_info *i = fi_allocinfo();
	if (!i)
		return -FI_ENOMEM;
	i->caps = CAPS;
	i->addr_format = FI_SOCKADDR_IN;
	i->tx_attr->caps = CAPS & ~(FI_RECV | FI_SOURCE | FI_DIRECTED_RECV);
	i->tx_attr->msg_order = FI_ORDER_SAS;
	i->tx_attr->inject_size = 4096;
	i->tx_attr->size = 1024;
	i->tx_attr->iov_limit = 16;
	i->rx_attr->caps = CAPS & ~FI_SEND;
	i->rx_attr->msg_order = FI_ORDER_SAS;
	i->rx_attr->size = 16384;
	i->rx_attr->iov_limit = 16;
	i->ep_attr->type = FI_EP_RDM;
	i->ep_attr->max_msg_size = 1ULL << 40;
	i->ep_attr->mem_tag_format = 0xaaaaaaaaaaaaaaaaULL;
	i->ep_attr->tx_ctx_cnt = 1;
	i->ep_attr->rx_ctx_cnt = 1;
	i->domain_attr->name = strdup(NAME);
	i->domain_attr->threading = FI_THREAD_SAFE;
	i->domain_attr->control_progress = FI_PROGRESS_AUTO;
	i->domain_attr->data_progress = FI_PROGRESS_AUTO;
	i->domain_attr->resource_mgmt = FI_RM_ENABLED;
	i->domain_attr->av_type = FI_AV_UNSPEC;
	i->domain_attr->cq_data_size = 8;
	i->domain_attr->cq_cnt = 1024;
	i->domain_attr->ep_cnt = 1024;
	i->domain_attr->tx_ctx_cnt = 1024;
	i->domain_attr->rx_ctx_cnt = 1024;
	i->domain_attr->max_ep_tx_ctx = 1;
	i->domain_attr->max_ep_rx_ctx = 1;
	i->fabric_attr->name = strdup(NAME);
	i->fabric_attr->prov_version = FI_VERSION(0, 1);
	i->fabric_attr->api_version = FI_VERSION(1, 17);
	*out = i;
	return 0;
}

static void cleanup(void)
{
}

static struct fi_provider prov = {
	.version = FI_VERSION(0, 1),
	.fi_version = FI_VERSION(1, 17),
	.name = NAME,
	.getinfo = getinfo,
	.fabric = fabric_open,
	.cleanup = cleanup,
};

struct fi_provider *fi_prov_ini(void)
{
	return &prov;
}
