/*
 * fitest - libfabric RDM scenarios for the gnix integration tests.
 * See fitest.h for the protocol with the harness.
 *
 *   single-process:  getinfo classes cq_wait cq_signal av mr cntr eq cancel bad_input
 *   two-process (rank 0 receives, rank 1 sends unless noted): see table at the end.
 */
#include "fitest.h"
#include <rdma/fi_rma.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_collective.h>
#include <rdma/fi_trigger.h>

static struct opts defopts(void)
{
	struct opts o;
	memset(&o, 0, sizeof o);
	return o;
}

/* ================================================================ getinfo */

static int count_infos(struct fi_info *i)
{
	int n = 0;
	for (; i; i = i->next)
		n++;
	return n;
}

static void scn_getinfo(void)
{
	struct fi_info *list, *h, *fi;
	int ret;

	/* no hints at all (FI_PROVIDER in the environment filters) */
	CHK(fi_getinfo(FT_VERSION, NULL, NULL, 0, NULL, &list));
	int rdm = 0;
	uint64_t caps_union = 0;
	for (fi = list; fi; fi = fi->next) {
		if (fi->ep_attr->type == FI_EP_RDM) {
			rdm++;
			caps_union |= fi->caps;
		}
		/* fi_getinfo(3): tx/rx caps are endpoint capabilities; the domain
		 * ones (FI_LOCAL_COMM, FI_REMOTE_COMM, FI_SHARED_AV) belong in
		 * info->caps and domain_attr->caps (fabtests getinfo_caps2). */
		uint64_t dom_caps = FI_LOCAL_COMM | FI_REMOTE_COMM | FI_SHARED_AV;
		DEVIATE(!(fi->tx_attr->caps & dom_caps) && !(fi->rx_attr->caps & dom_caps),
			"domain caps in tx/rx caps: tx %#" PRIx64 " rx %#" PRIx64,
			fi->tx_attr->caps & dom_caps, fi->rx_attr->caps & dom_caps);
	}
	EXPECT(rdm > 0, "fi_getinfo without hints lists no RDM info (%d infos)", count_infos(list));
	info("%d infos, %d RDM, first %s / %s", count_infos(list), rdm,
	     list->fabric_attr->prov_name, list->fabric_attr->name);
	fi_freeinfo(list);

	/* unsupported endpoint type */
	h = fi_allocinfo();
	h->ep_attr->type = FI_EP_SOCK_STREAM;
	h->caps = FI_MSG;
	EXPECT_RET(fi_getinfo(FT_VERSION, NULL, NULL, 0, h, &list), -FI_ENODATA);
	fi_freeinfo(h);

	/* primary caps that no RDM info advertises must be refused */
	uint64_t cands[] = { FI_ATOMIC, FI_RMA, FI_COLLECTIVE };
	const char *names[] = { "FI_ATOMIC", "FI_RMA", "FI_COLLECTIVE" };
	for (int i = 0; i < 3; i++) {
		if (caps_union & cands[i])
			continue;
		h = fi_allocinfo();
		h->ep_attr->type = FI_EP_RDM;
		h->caps = FI_MSG | cands[i];
		ret = fi_getinfo(FT_VERSION, NULL, NULL, 0, h, &list);
		if (ret == 0)
			fi_freeinfo(list);
		DEVIATE(ret == -FI_ENODATA, "caps %s not listed without hints, but fi_getinfo(caps=%s) = %d",
			names[i], names[i], ret);
		fi_freeinfo(h);
		info("unadvertised %s refused", names[i]);
	}

	/* unknown fabric name */
	h = fi_allocinfo();
	h->ep_attr->type = FI_EP_RDM;
	h->caps = FI_MSG;
	h->fabric_attr->name = strdup("no-such-fabric-xyzzy");
	ret = fi_getinfo(FT_VERSION, NULL, NULL, 0, h, &list);
	DEVIATE(ret == -FI_ENODATA, "unknown fabric name: fi_getinfo = %d", ret);
	if (ret == 0)
		fi_freeinfo(list);
	fi_freeinfo(h);

	/* attributes honour the hints: output >= requested (fi_getinfo(3)) */
	h = fi_allocinfo();
	h->ep_attr->type = FI_EP_RDM;
	h->caps = FI_MSG | FI_TAGGED;
	h->mode = FI_CONTEXT;
	h->tx_attr->size = 64;
	h->rx_attr->size = 64;
	h->tx_attr->inject_size = 32;
	h->domain_attr->threading = FI_THREAD_SAFE;
	h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	CHK(fi_getinfo(FT_VERSION, NULL, NULL, 0, h, &list));
	for (fi = list; fi; fi = fi->next) {
		EXPECT(fi->ep_attr->type == FI_EP_RDM, "ep type");
		EXPECT((fi->caps & (FI_MSG | FI_TAGGED)) == (FI_MSG | FI_TAGGED), "caps 0x%" PRIx64, fi->caps);
		EXPECT(fi->tx_attr->size >= 64, "tx size %zu < 64", fi->tx_attr->size);
		EXPECT(fi->rx_attr->size >= 64, "rx size %zu < 64", fi->rx_attr->size);
		EXPECT(fi->tx_attr->inject_size >= 32, "inject_size %zu < 32", fi->tx_attr->inject_size);
		EXPECT(fi->domain_attr->threading == FI_THREAD_SAFE, "threading %d", fi->domain_attr->threading);
		EXPECT(!(fi->mode & ~(FI_CONTEXT | FI_CONTEXT2 | FI_BUFFERED_RECV)) || 1, "mode");
		EXPECT((fi->mode & ~h->mode) == 0 || (fi->mode & ~h->mode) == FI_BUFFERED_RECV,
		       "mode 0x%" PRIx64 " requires bits the app did not offer", fi->mode);
		EXPECT((fi->domain_attr->mr_mode & ~h->domain_attr->mr_mode) == 0,
		       "mr_mode 0x%x exceeds hints", fi->domain_attr->mr_mode);
	}
	info("attrs: tx size %zu rx size %zu inject %zu max_msg %zu", list->tx_attr->size,
	     list->rx_attr->size, list->tx_attr->inject_size, list->ep_attr->max_msg_size);
	fi_freeinfo(list);

	/* tx size far beyond anything sane -> no match */
	h->tx_attr->size = (size_t)1 << 62;
	ret = fi_getinfo(FT_VERSION, NULL, NULL, 0, h, &list);
	if (ret == 0) {
		DEVIATE(list->tx_attr->size >= h->tx_attr->size,
			"asked tx size 2^62, got info with size %zu", list->tx_attr->size);
		fi_freeinfo(list);
	}
	h->tx_attr->size = 64;

	/* node/service + FI_SOURCE -> src_addr */
	CHK(fi_getinfo(FT_VERSION, NULL, NULL, 0, h, &list));
	uint32_t fmt = list->addr_format;
	fi_freeinfo(list);
	if (fmt == FI_SOCKADDR_IN || fmt == FI_SOCKADDR_IN6 || fmt == FI_SOCKADDR) {
		ret = fi_getinfo(FT_VERSION, "127.0.0.1", "47593", FI_SOURCE, h, &list);
		if (ret == -FI_ENODATA) { /* maybe only non-loopback interfaces */
			DEVIATE(0, "fi_getinfo(127.0.0.1, FI_SOURCE) = ENODATA");
		} else {
			CHK(ret);
			EXPECT(list->src_addr && list->src_addrlen >= sizeof(struct sockaddr_in), "no src_addr");
			struct sockaddr_in *sin = list->src_addr;
			EXPECT(sin->sin_family == AF_INET, "family %d", sin->sin_family);
			EXPECT(ntohs(sin->sin_port) == 47593, "port %d", ntohs(sin->sin_port));
			EXPECT(sin->sin_addr.s_addr == htonl(INADDR_LOOPBACK), "addr");
			fi_freeinfo(list);
		}
		/* node/service without FI_SOURCE -> dest_addr */
		ret = fi_getinfo(FT_VERSION, "127.0.0.1", "47594", 0, h, &list);
		CHK(ret);
		EXPECT(list->dest_addr && list->dest_addrlen >= sizeof(struct sockaddr_in), "no dest_addr");
		EXPECT(ntohs(((struct sockaddr_in *)list->dest_addr)->sin_port) == 47594, "dest port");
		fi_freeinfo(list);
	} else {
		info("addr_format %u: node/service checks skipped", fmt);
	}

	/* Hints the provider cannot meet: -FI_ENODATA, never a weaker info.
	 * Each case changes one attribute of a copy of the good hints. */
	for (int k = 0;; k++) {
		struct fi_info *c = fi_dupinfo(h);
		const char *what = NULL;
		const char *node = NULL;
		uint64_t flags = 0;
		switch (k) {
		case 0: what = "addr_format FI_ADDR_PSMX2"; c->addr_format = FI_ADDR_PSMX2; break;
		case 1: what = "FI_NUMERICHOST with a host name"; node = "localhost"; flags = FI_NUMERICHOST; break;
		case 2: what = "unknown domain name"; c->domain_attr->name = strdup("no-such-domain-xyzzy"); break;
		case 3: what = "inject_size 2^40"; c->tx_attr->inject_size = (size_t)1 << 40; break;
		case 4: what = "tx iov_limit 2^20"; c->tx_attr->iov_limit = 1 << 20; break;
		case 5: what = "rx iov_limit 2^20"; c->rx_attr->iov_limit = 1 << 20; break;
		case 6: what = "comp_order FI_ORDER_STRICT"; c->tx_attr->comp_order = FI_ORDER_STRICT; break;
		case 7: what = "resource_mgmt 99"; c->domain_attr->resource_mgmt = 99; break;
		case 8: what = "mr_key_size 64"; c->domain_attr->mr_key_size = 64; break;
		case 9: what = "max_err_data 2^30"; c->domain_attr->max_err_data = 1 << 30; break;
		case 10: what = "threading 99"; c->domain_attr->threading = 99; break;
		case 11: what = "av_type 99"; c->domain_attr->av_type = 99; break;
		case 12: what = "max_msg_size 2^62"; c->ep_attr->max_msg_size = (size_t)1 << 62; break;
		case 13: what = "msg_prefix_size 64 (FI_MSG_PREFIX not offered)"; c->ep_attr->msg_prefix_size = 64; break;
		default: break;
		}
		if (!what) {
			fi_freeinfo(c);
			break;
		}
		ret = fi_getinfo(FT_VERSION, node, node ? "47595" : NULL, flags, c, &list);
		if (ret == 0)
			fi_freeinfo(list);
		DEVIATE(ret == -FI_ENODATA, "hints %s: fi_getinfo = %d, want -FI_ENODATA", what, ret);
		fi_freeinfo(c);
	}

	/* A traffic class is a service request, not a requirement: the ones
	 * fabtests' benchmarks ask for are met (as well as the fabric can). */
	uint32_t tcs[] = { FI_TC_LOW_LATENCY, FI_TC_BULK_DATA, FI_TC_BEST_EFFORT };
	for (int k = 0; k < 3; k++) {
		struct fi_info *c = fi_dupinfo(h);
		c->tx_attr->tclass = tcs[k];
		ret = fi_getinfo(FT_VERSION, NULL, NULL, 0, c, &list);
		DEVIATE(ret == 0, "tx tclass %#x refused: fi_getinfo = %d", tcs[k], ret);
		if (ret == 0)
			fi_freeinfo(list);
		fi_freeinfo(c);
	}

	/* A destination given by name resolves in the family the hints ask
	 * for, IPv6 included (where this host has ::1). */
	struct fi_info *c6 = fi_dupinfo(h);
	c6->addr_format = FI_SOCKADDR_IN6;
	if (fi_getinfo(FT_VERSION, "::1", "47596", FI_SOURCE, c6, &list) == 0) {
		fi_freeinfo(list);
		ret = fi_getinfo(FT_VERSION, "::1", "47597", 0, c6, &list);
		DEVIATE(ret == 0, "fi_getinfo(::1, 47597) = %d", ret);
		if (ret == 0) {
			struct sockaddr_in6 *d6 = list->dest_addr;
			EXPECT(list->addr_format == FI_SOCKADDR_IN6 && d6 && d6->sin6_family == AF_INET6 &&
			       ntohs(d6->sin6_port) == 47597, "IPv6 dest_addr");
			fi_freeinfo(list);
		}
		ret = fi_getinfo(FT_VERSION, "::1", "47598", 0, h, &list);
		DEVIATE(ret == 0, "fi_getinfo(::1) without an addr_format = %d", ret);
		if (ret == 0)
			fi_freeinfo(list);
	} else {
		info("no ::1 here: IPv6 destination check skipped");
	}
	fi_freeinfo(c6);
	fi_freeinfo(h);
	pass();
}

/* ================================================================ classes */

static struct fi_info *basic_info(uint64_t caps)
{
	struct opts o = defopts();
	o.caps = caps;
	struct fi_info *h = mkhints(&o), *fi;
	CHK(fi_getinfo(FT_VERSION, NULL, NULL, 0, h, &fi));
	fi_freeinfo(h);
	return fi;
}

static int enable_without_av(struct fi_info *fi)
{
	struct fid_fabric *fab;
	struct fid_domain *dom;
	struct fid_cq *cq;
	struct fid_ep *ep;
	struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_TAGGED };
	CHK(fi_fabric(fi->fabric_attr, &fab, NULL));
	CHK(fi_domain(fab, fi, &dom, NULL));
	CHK(fi_cq_open(dom, &cq_attr, &cq, NULL));
	CHK(fi_endpoint(dom, fi, &ep, NULL));
	CHK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
	int r = fi_enable(ep);
	CHK(fi_close(&ep->fid));
	CHK(fi_close(&cq->fid));
	CHK(fi_close(&dom->fid));
	CHK(fi_close(&fab->fid));
	return r < 0;
}

static void scn_classes(void)
{
	struct fi_info *fi = basic_info(FI_MSG | FI_TAGGED | FI_MULTI_RECV);
	for (int order = 0; order < 4; order++) {
		struct fid_fabric *fab;
		struct fid_domain *dom;
		struct fid_av *av;
		struct fid_cq *cq;
		struct fid_cntr *cntr;
		struct fid_eq *eq;
		struct fid_ep *ep;
		struct fid_mr *mr;
		struct fi_av_attr av_attr = { .type = FI_AV_UNSPEC, .count = 16 };
		struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_NONE };
		struct fi_cntr_attr cntr_attr = { .events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_NONE };
		struct fi_eq_attr eq_attr = { .wait_obj = FI_WAIT_NONE };
		static char buf[4096];

		CHK(fi_fabric(fi->fabric_attr, &fab, NULL));
		CHK(fi_domain(fab, fi, &dom, NULL));
		CHECK_CONTAINED("fi_close(fab) with live children returns -FI_EBUSY", fi_close(&fab->fid) == -FI_EBUSY);
		if (order & 1) { /* ep first, then its resources */
			CHK(fi_endpoint(dom, fi, &ep, NULL));
			CHK(fi_cq_open(dom, &cq_attr, &cq, NULL));
			CHK(fi_av_open(dom, &av_attr, &av, NULL));
			CHK(fi_cntr_open(dom, &cntr_attr, &cntr, NULL));
		} else {
			CHK(fi_cntr_open(dom, &cntr_attr, &cntr, NULL));
			CHK(fi_av_open(dom, &av_attr, &av, NULL));
			CHK(fi_cq_open(dom, &cq_attr, &cq, NULL));
			CHK(fi_endpoint(dom, fi, &ep, NULL));
		}
		CHK(fi_eq_open(fab, &eq_attr, &eq, NULL));
		CHK(fi_mr_reg(dom, buf, sizeof buf, FI_SEND | FI_RECV, 0, 7, 0, &mr, NULL));
		CHECK_CONTAINED("fi_close(dom) with live children returns -FI_EBUSY", fi_close(&dom->fid) == -FI_EBUSY);
		CHECK_CONTAINED("fi_close(fab) with live children returns -FI_EBUSY", fi_close(&fab->fid) == -FI_EBUSY);

		CHK(fi_ep_bind(ep, &av->fid, 0));
		if (order == 0 && !strcmp(fi->fabric_attr->prov_name, "gnix") &&
		    fi->domain_attr->threading == FI_THREAD_DOMAIN) {
			/* gnix refuses a CQ of another FI_THREAD_DOMAIN domain: each
			 * domain's locks exclude only its own callers (fi_gnix(7),
			 * Threading); shm and tcp;ofi_rxm accept it. */
			struct fid_domain *dom2;
			struct fid_cq *cq2;
			CHK(fi_domain(fab, fi, &dom2, NULL));
			CHK(fi_cq_open(dom2, &cq_attr, &cq2, NULL));
			EXPECT_RET(fi_ep_bind(ep, &cq2->fid, FI_TRANSMIT | FI_RECV), -FI_EINVAL);
			CHK(fi_close(&cq2->fid));
			CHK(fi_close(&dom2->fid));
		}
		CHK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
		CHK(fi_ep_bind(ep, &cntr->fid, FI_SEND | FI_RECV));
		int eq_bound = fi_ep_bind(ep, &eq->fid, 0);
		DEVIATE(eq_bound == 0, "fi_ep_bind(ep, eq) = %d", eq_bound);

		size_t v = 0, vl = sizeof v;
		int getopt_ok = 1;
		CHECK_CONTAINED("fi_getopt(FI_OPT_MIN_MULTI_RECV) works",
				(getopt_ok = fi_getopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &v, &vl) == 0));
		if (!g_strict) { /* the contained check ran in a child: learn its verdict */
			pid_t p = fork();
			if (p == 0) _exit(fi_getopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &v, &vl) == 0 ? 0 : 1);
			int st; waitpid(p, &st, 0);
			getopt_ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
		}
		if (getopt_ok) {
		CHK(fi_getopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &v, &vl));
		EXPECT(vl == sizeof(size_t), "optlen %zu", vl);
		v = 3000 + order;
		CHK(fi_setopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &v, sizeof v));
		v = 0;
		vl = sizeof v;
		CHK(fi_getopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &v, &vl));
		EXPECT(v == (size_t)(3000 + order), "MIN_MULTI_RECV reads back %zu", v);
		}

		CHK(fi_enable(ep));

		/* getname: too small -> -FI_ETOOSMALL and the needed length */
		uint8_t name[256], name2[256];
		size_t len = 1;
		EXPECT_RET(fi_getname(&ep->fid, name, &len), -FI_ETOOSMALL);
		EXPECT(len > 1 && len <= sizeof name, "needed len %zu", len);
		size_t need = len;
		len = sizeof name;
		CHK(fi_getname(&ep->fid, name, &len));
		EXPECT(len == need, "getname len %zu vs %zu", len, need);
		EXPECT(len == fi->src_addrlen || fi->src_addrlen == 0 || 1, "len");

		/* setname on a fresh (not yet enabled) ep, then getname returns it */
		struct fid_ep *ep2;
		CHK(fi_endpoint(dom, fi, &ep2, NULL));
		if (fi->addr_format == FI_SOCKADDR_IN) {
			struct sockaddr_in sin = *(struct sockaddr_in *)name;
			sin.sin_port = 0;
			int r = fi_setname(&ep2->fid, &sin, sizeof sin);
			DEVIATE(r == 0, "fi_setname(ep2, ip:0) = %d", r);
			if (r == 0) {
				CHK(fi_ep_bind(ep2, &av->fid, 0));
				CHK(fi_ep_bind(ep2, &cq->fid, FI_TRANSMIT | FI_RECV));
				CHK(fi_enable(ep2));
				size_t l2 = sizeof name2;
				CHK(fi_getname(&ep2->fid, name2, &l2));
				struct sockaddr_in *s2 = (struct sockaddr_in *)name2;
				EXPECT(s2->sin_addr.s_addr == sin.sin_addr.s_addr, "setname ip not honoured");
				EXPECT(memcmp(name, name2, l2) != 0, "two eps share an address");
			}
		}
		/* closing bound resources while the ep lives */
		CHECK_CONTAINED("fi_close(cq) with live children returns -FI_EBUSY", fi_close(&cq->fid) == -FI_EBUSY);
		CHECK_CONTAINED("fi_close(av) with live children returns -FI_EBUSY", fi_close(&av->fid) == -FI_EBUSY);
		CHECK_CONTAINED("fi_close(cntr) bound to an ep returns -FI_EBUSY", fi_close(&cntr->fid) == -FI_EBUSY);
		if (eq_bound == 0)
			CHECK_CONTAINED("fi_close(eq) bound to an ep returns -FI_EBUSY", fi_close(&eq->fid) == -FI_EBUSY);
		CHK(fi_close(&ep2->fid));
		CHK(fi_close(&ep->fid));
		CHK(fi_close(&mr->fid));
		switch (order) { /* children in different orders */
		case 0: CHK(fi_close(&cq->fid)); CHK(fi_close(&av->fid)); CHK(fi_close(&cntr->fid)); break;
		case 1: CHK(fi_close(&av->fid)); CHK(fi_close(&cntr->fid)); CHK(fi_close(&cq->fid)); break;
		case 2: CHK(fi_close(&cntr->fid)); CHK(fi_close(&cq->fid)); CHK(fi_close(&av->fid)); break;
		default: CHK(fi_close(&av->fid)); CHK(fi_close(&cq->fid)); CHK(fi_close(&cntr->fid)); break;
		}
		if (order & 2) {
			CHK(fi_close(&dom->fid));
			CHECK_CONTAINED("fi_close(fab) with live children returns -FI_EBUSY", fi_close(&fab->fid) == -FI_EBUSY); /* eq still open */
			CHK(fi_close(&eq->fid));
		} else {
			CHK(fi_close(&eq->fid));
			CHK(fi_close(&dom->fid));
		}
		CHK(fi_close(&fab->fid));
	}

	/* enable without an AV bound: an RDM ep needs one (fi_endpoint(3)) */
	CHECK_CONTAINED("fi_enable of an RDM ep without an AV fails (and the ep closes)", enable_without_av(fi));
	fi_freeinfo(fi);

	/* A send-only endpoint needs no receive CQ, and refuses receives. */
	fi = basic_info(FI_MSG | FI_SEND);
	if (!(fi->caps & FI_RECV)) {
		struct fid_fabric *fab;
		struct fid_domain *dom;
		struct fid_av *av;
		struct fid_cq *cq;
		struct fid_ep *ep;
		struct fi_av_attr av_attr = { .type = FI_AV_UNSPEC, .count = 4 };
		struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_CONTEXT };
		static char rb[64];
		CHK(fi_fabric(fi->fabric_attr, &fab, NULL));
		CHK(fi_domain(fab, fi, &dom, NULL));
		CHK(fi_av_open(dom, &av_attr, &av, NULL));
		CHK(fi_cq_open(dom, &cq_attr, &cq, NULL));
		CHK(fi_endpoint(dom, fi, &ep, NULL));
		CHK(fi_ep_bind(ep, &av->fid, 0));
		CHK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT));
		int r = fi_enable(ep);
		DEVIATE(r == 0, "fi_enable of a send-only ep with only a transmit CQ = %d", r);
		if (r == 0)
			CHECK_CONTAINED("fi_recv on a send-only ep returns -FI_EOPNOTSUPP",
					fi_recv(ep, rb, sizeof rb, NULL, FI_ADDR_UNSPEC, NULL) == -FI_EOPNOTSUPP);
		CHK(fi_close(&ep->fid));
		CHK(fi_close(&cq->fid));
		CHK(fi_close(&av->fid));
		CHK(fi_close(&dom->fid));
		CHK(fi_close(&fab->fid));
	} else {
		info("caps FI_MSG|FI_SEND answered with FI_RECV: send-only check skipped");
	}
	fi_freeinfo(fi);
	pass();
}

/* ================================================================ CQ wait */

static void scn_cq_wait(void)
{
	struct fi_info *fi = basic_info(FI_MSG | FI_TAGGED);
	struct fid_fabric *fab;
	struct fid_domain *dom;
	CHK(fi_fabric(fi->fabric_attr, &fab, NULL));
	CHK(fi_domain(fab, fi, &dom, NULL));
	enum fi_wait_obj objs[] = { FI_WAIT_FD, FI_WAIT_UNSPEC };
	for (int i = 0; i < 2; i++) {
		struct fi_cq_attr attr = { .format = FI_CQ_FORMAT_TAGGED, .wait_obj = objs[i] };
		struct fid_cq *cq;
		struct fi_cq_tagged_entry e;
		int r0 = fi_cq_open(dom, &attr, &cq, NULL);
		if (r0) {
			DEVIATE(0, "fi_cq_open(wait_obj %s) = %d", i ? "FI_WAIT_UNSPEC" : "FI_WAIT_FD", r0);
			continue;
		}
		if (objs[i] == FI_WAIT_FD) {
			int fd = -1;
			r0 = fi_control(&cq->fid, FI_GETWAIT, &fd);
			DEVIATE(r0 == 0 && fd >= 0, "FI_GETWAIT on a FI_WAIT_FD CQ = %d, fd %d", r0, fd);
		}
		uint64_t t0 = now_ms();
		ssize_t r = fi_cq_sread(cq, &e, 1, NULL, 300);
		uint64_t dt = now_ms() - t0;
		EXPECT(r == -FI_EAGAIN, "sread on empty CQ = %zd (%s)", r, fi_strerror((int)-r));
		EXPECT(dt >= 250, "sread(300 ms) returned after %" PRIu64 " ms", dt);
		r = fi_cq_read(cq, &e, 1);
		EXPECT(r == -FI_EAGAIN, "read on empty CQ = %zd", r);
		struct fi_cq_err_entry ee;
		memset(&ee, 0, sizeof ee);
		r = fi_cq_readerr(cq, &ee, 0);
		EXPECT(r == -FI_EAGAIN, "readerr on empty CQ = %zd", r);
		char sb[128];
		CHECK_CONTAINED("fi_cq_strerror(cq, 0, NULL, buf, len) returns a string",
				fi_cq_strerror(cq, 0, NULL, sb, sizeof sb) != NULL);
		CHK(fi_close(&cq->fid));
	}
	/* a CQ without a wait object cannot sread */
	struct fi_cq_attr attr = { .format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_NONE };
	struct fid_cq *cq;
	struct fi_cq_tagged_entry e;
	CHK(fi_cq_open(dom, &attr, &cq, NULL));
	CHECK_CONTAINED("fi_cq_sread on a FI_WAIT_NONE CQ fails (not -FI_EAGAIN)",
			({ ssize_t r = fi_cq_sread(cq, &e, 1, NULL, 10); r < 0 && r != -FI_EAGAIN; }));
	CHK(fi_close(&cq->fid));
	CHK(fi_close(&dom->fid));
	CHK(fi_close(&fab->fid));
	fi_freeinfo(fi);
	pass();
}

static volatile int g_stop;

static void *signaller(void *arg)
{
	struct fid_cq *cq = arg;
	while (!g_stop) {
		fi_cq_signal(cq);
		usleep(20000); /* repeat: a signal before the sread starts may be lost */
	}
	return NULL;
}

static void scn_cq_signal(void)
{
	struct fi_info *fi = basic_info(FI_MSG | FI_TAGGED);
	struct fid_fabric *fab;
	struct fid_domain *dom;
	CHK(fi_fabric(fi->fabric_attr, &fab, NULL));
	CHK(fi_domain(fab, fi, &dom, NULL));
	struct fi_cq_attr attr = { .format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_UNSPEC };
	struct fid_cq *cq;
	CHK(fi_cq_open(dom, &attr, &cq, NULL));
	pthread_t t;
	pthread_create(&t, NULL, signaller, cq);
	struct fi_cq_tagged_entry e;
	uint64_t t0 = now_ms();
	ssize_t r = fi_cq_sread(cq, &e, 1, NULL, 20000);
	uint64_t dt = now_ms() - t0;
	g_stop = 1;
	pthread_join(t, NULL);
	EXPECT(r < 0, "sread returned %zd entries on an empty CQ", r);
	EXPECT(dt < 10000, "fi_cq_signal did not wake fi_cq_sread (%" PRIu64 " ms, ret %zd)", dt, r);
	info("sread woken after %" PRIu64 " ms with %zd (%s)", dt, r, fi_strerror((int)-r));
	CHK(fi_close(&cq->fid));
	CHK(fi_close(&dom->fid));
	CHK(fi_close(&fab->fid));
	fi_freeinfo(fi);
	pass();
}

/* ================================================================ AV */

static void av_one(struct fi_info *fi, enum fi_av_type type)
{
	struct fid_fabric *fab;
	struct fid_domain *dom;
	struct fid_av *av;
	struct fid_cq *cq;
	struct fid_ep *ep;
	CHK(fi_fabric(fi->fabric_attr, &fab, NULL));
	CHK(fi_domain(fab, fi, &dom, NULL));
	struct fi_av_attr attr = { .type = type, .count = 32 };
	CHK(fi_av_open(dom, &attr, &av, NULL));
	struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_TAGGED };
	CHK(fi_cq_open(dom, &cq_attr, &cq, NULL));
	CHK(fi_endpoint(dom, fi, &ep, NULL));
	CHK(fi_ep_bind(ep, &av->fid, 0));
	CHK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
	CHK(fi_enable(ep));

	uint8_t me[256], got[256];
	size_t len = sizeof me;
	CHK(fi_getname(&ep->fid, me, &len));

	/* insert self + (for sockaddr formats) two other addresses */
	uint8_t addrs[3][256];
	int n = 1;
	memcpy(addrs[0], me, len);
	if (fi->addr_format == FI_SOCKADDR_IN) {
		for (int i = 1; i < 3; i++) {
			memcpy(addrs[i], me, len);
			struct sockaddr_in *s = (void *)addrs[i];
			s->sin_port = htons((uint16_t)(ntohs(s->sin_port) + 1000 * i));
		}
		n = 3;
	}
	fi_addr_t fa[3];
	for (int i = 0; i < n; i++)
		EXPECT_RET(fi_av_insert(av, addrs[i], 1, &fa[i], 0, NULL), 1);
	if (type == FI_AV_TABLE)
		for (int i = 0; i < n; i++)
			EXPECT(fa[i] == (fi_addr_t)i, "FI_AV_TABLE: insert %d gave fi_addr %" PRIu64, i, fa[i]);
	for (int i = 0; i < n; i++) {
		size_t gl = sizeof got;
		int rl = fi_av_lookup(av, fa[i], got, &gl);
		DEVIATE(rl == 0, "fi_av_lookup(%d) = %d", i, rl);
		if (rl)
			continue;
		EXPECT(gl == len && !memcmp(got, addrs[i], len), "lookup(%d) does not return the inserted address", i);
		size_t small = 2;
		int r = fi_av_lookup(av, fa[i], got, &small);
		EXPECT(small == len, "lookup with short buffer: addrlen %zu want %zu (ret %d)", small, len, r);
	}
	char str[256];
	size_t sl = sizeof str;
	const char *s = fi_av_straddr(av, me, str, &sl);
	EXPECT(s && strlen(s) > 0, "fi_av_straddr");
	info("straddr: %s", s);

	if (n == 3) {
		CHK(fi_av_remove(av, &fa[1], 1, 0));
		size_t gl = sizeof got;
		int r = fi_av_lookup(av, fa[1], got, &gl);
		DEVIATE(r < 0, "lookup of a removed fi_addr = %d", r);
		gl = sizeof got;
		CHK(fi_av_lookup(av, fa[2], got, &gl)); /* others stay */
		EXPECT(!memcmp(got, addrs[2], len), "remove disturbed another entry");

		/* insertsvc: ip + port string */
		struct sockaddr_in *sin = (void *)me;
		char ip[64], port[16];
		inet_ntop(AF_INET, &sin->sin_addr, ip, sizeof ip);
		snprintf(port, sizeof port, "%u", (unsigned)ntohs(sin->sin_port) + 5);
		fi_addr_t fsvc;
		int r2 = fi_av_insertsvc(av, ip, port, &fsvc, 0, NULL);
		DEVIATE(r2 == 1, "fi_av_insertsvc(%s, %s) = %d", ip, port, r2);
		if (r2 != 1)
			goto out;
		gl = sizeof got;
		CHK(fi_av_lookup(av, fsvc, got, &gl));
		struct sockaddr_in *g = (void *)got;
		EXPECT(g->sin_family == AF_INET && g->sin_addr.s_addr == sin->sin_addr.s_addr &&
		       ntohs(g->sin_port) == ntohs(sin->sin_port) + 5, "insertsvc address wrong");

		/* insertsym: 1 node x 3 services */
		fi_addr_t fsym[3];
		snprintf(port, sizeof port, "%u", (unsigned)ntohs(sin->sin_port) + 10);
		r2 = fi_av_insertsym(av, ip, 1, port, 3, fsym, 0, NULL);
		DEVIATE(r2 == 3, "fi_av_insertsym(1 node, 3 svcs) = %d", r2);
		if (r2 == 3)
			for (int i = 0; i < 3; i++) {
				gl = sizeof got;
				CHK(fi_av_lookup(av, fsym[i], got, &gl));
				EXPECT(ntohs(g->sin_port) == ntohs(sin->sin_port) + 10 + i, "insertsym port %d", i);
			}
	}
out:
	/* a bad address length / NULL address list */
	CHECK_CONTAINED("fi_av_insert(NULL addr) fails cleanly",
			({ int r = fi_av_insert(av, NULL, 1, fa, 0, NULL); r <= 0; }));

	CHK(fi_close(&ep->fid));
	CHK(fi_close(&cq->fid));
	CHK(fi_close(&av->fid));
	CHK(fi_close(&dom->fid));
	CHK(fi_close(&fab->fid));
}

static void scn_av(void)
{
	struct opts o = defopts();
	enum fi_av_type types[] = { FI_AV_MAP, FI_AV_TABLE };
	for (int i = 0; i < 2; i++) {
		o.av_type = types[i];
		struct fi_info *h = mkhints(&o), *fi;
		int r = fi_getinfo(FT_VERSION, NULL, NULL, 0, h, &fi);
		fi_freeinfo(h);
		if (r == -FI_ENODATA) {
			DEVIATE(0, "av_type %s not supported", i ? "FI_AV_TABLE" : "FI_AV_MAP");
			continue;
		}
		CHK(r);
		av_one(fi, types[i]);
		fi_freeinfo(fi);
	}
	pass();
}

/* ================================================================ MR */

static void scn_mr(void)
{
	struct fi_info *fi = basic_info(FI_MSG | FI_TAGGED);
	struct fid_fabric *fab;
	struct fid_domain *dom;
	CHK(fi_fabric(fi->fabric_attr, &fab, NULL));
	CHK(fi_domain(fab, fi, &dom, NULL));
	size_t len = 1 << 20;
	char *buf = xmalloc(len);
	struct fid_mr *mr1, *mr2, *mr3;
	CHK(fi_mr_reg(dom, buf, 4096, FI_SEND | FI_RECV, 0, 111, 0, &mr1, NULL));
	uint64_t k1 = fi_mr_key(mr1);
	if (!(fi->domain_attr->mr_mode & FI_MR_PROV_KEY))
		EXPECT(k1 == 111, "requested key 111, got %" PRIu64, k1);
	(void)fi_mr_desc(mr1);

	struct iovec iov[2] = { { buf + 8192, 4096 }, { buf + 65536, 8192 } };
	size_t niov = fi->domain_attr->mr_iov_limit >= 2 ? 2 : 1;
	CHK(fi_mr_regv(dom, iov, niov, FI_SEND | FI_RECV, 0, 222, 0, &mr2, NULL));
	if (niov < 2) {
		struct fid_mr *bad;
		int r = fi_mr_regv(dom, iov, 2, FI_SEND | FI_RECV, 0, 223, 0, &bad, NULL);
		DEVIATE(r < 0, "regv beyond mr_iov_limit %zu accepted", fi->domain_attr->mr_iov_limit);
		if (r == 0)
			CHK(fi_close(&bad->fid));
	}
	struct iovec iov3 = { buf + 200000, 100000 };
	struct fi_mr_attr attr = { .mr_iov = &iov3, .iov_count = 1, .access = FI_SEND | FI_RECV,
				   .requested_key = 333, .context = (void *)0x1234 };
	CHK(fi_mr_regattr(dom, &attr, 0, &mr3));
	EXPECT(mr3->fid.context == (void *)0x1234, "mr context %p", mr3->fid.context);
	if (!(fi->domain_attr->mr_mode & FI_MR_PROV_KEY)) {
		EXPECT(fi_mr_key(mr3) == 333, "regattr key");
		EXPECT(fi_mr_key(mr2) == 222, "regv key");
	}
	CHECK_CONTAINED("fi_close(dom) with live children returns -FI_EBUSY", fi_close(&dom->fid) == -FI_EBUSY);
	CHK(fi_close(&mr2->fid));
	CHK(fi_close(&mr1->fid));
	CHK(fi_close(&mr3->fid));
	CHK(fi_close(&dom->fid));
	CHK(fi_close(&fab->fid));
	free(buf);
	fi_freeinfo(fi);
	pass();
}

/* ================================================================ counters */

struct cntr_adder {
	struct fid_cntr *c;
	pid_t waiter;
};

/* Adds once the waiter sleeps in fi_cntr_wait: the add must wake it. */
static void *cntr_adder(void *arg)
{
	struct cntr_adder *a = arg;
	DEVIATE(wait_thread_asleep(a->waiter), "fi_cntr_wait never went to sleep");
	fi_cntr_add(a->c, 5);
	return NULL;
}

static void scn_cntr(void)
{
	struct fi_info *fi = basic_info(FI_MSG | FI_TAGGED);
	struct fid_fabric *fab;
	struct fid_domain *dom;
	struct fid_cntr *c;
	CHK(fi_fabric(fi->fabric_attr, &fab, NULL));
	CHK(fi_domain(fab, fi, &dom, NULL));
	struct fi_cntr_attr attr = { .events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_UNSPEC };
	CHK(fi_cntr_open(dom, &attr, &c, NULL));
	EXPECT(fi_cntr_read(c) == 0, "initial value");
	EXPECT(fi_cntr_readerr(c) == 0, "initial err");
	CHK(fi_cntr_add(c, 5));
	EXPECT(fi_cntr_read(c) == 5, "after add: %" PRIu64, fi_cntr_read(c));
	CHK(fi_cntr_set(c, 10));
	EXPECT(fi_cntr_read(c) == 10, "after set");
	CHK(fi_cntr_adderr(c, 2));
	EXPECT(fi_cntr_readerr(c) == 2, "adderr: %" PRIu64, fi_cntr_readerr(c));
	CHK(fi_cntr_seterr(c, 0));
	EXPECT(fi_cntr_readerr(c) == 0, "seterr");
	EXPECT_RET(fi_cntr_wait(c, 10, 100), 0);
	uint64_t t0 = now_ms();
	EXPECT_RET(fi_cntr_wait(c, 11, 300), -FI_ETIMEDOUT);
	uint64_t dt = now_ms() - t0;
	EXPECT(dt >= 250, "wait(300ms) returned after %" PRIu64 " ms", dt);
	EXPECT(fi_cntr_read(c) == 10, "value changed by a timed-out wait");
	/* another thread adds while we sleep in the wait; running into the
	 * timeout (the client's deadline) is the failure */
	pthread_t t;
	struct cntr_adder a = { c, my_tid() };
	pthread_create(&t, NULL, cntr_adder, &a);
	EXPECT_RET(fi_cntr_wait(c, 15, (int)g_timeout_ms), 0);
	pthread_join(t, NULL);
	EXPECT(fi_cntr_read(c) == 15, "after thread add");
	CHECK_CONTAINED("fi_close(dom) with live children returns -FI_EBUSY", fi_close(&dom->fid) == -FI_EBUSY);
	CHK(fi_close(&c->fid));
	CHK(fi_close(&dom->fid));
	CHK(fi_close(&fab->fid));
	fi_freeinfo(fi);
	pass();
}

/* ================================================================ EQ */

static void scn_eq(void)
{
	struct fi_info *fi = basic_info(FI_MSG | FI_TAGGED);
	struct fid_fabric *fab;
	struct fid_eq *eq;
	CHK(fi_fabric(fi->fabric_attr, &fab, NULL));
	struct fi_eq_attr attr = { .size = 16, .wait_obj = FI_WAIT_UNSPEC };
	CHK(fi_eq_open(fab, &attr, &eq, NULL));
	uint32_t ev;
	struct fi_eq_entry e, got;
	EXPECT_RET(fi_eq_read(eq, &ev, &got, sizeof got, 0), -FI_EAGAIN);
	uint64_t t0 = now_ms();
	EXPECT_RET(fi_eq_sread(eq, &ev, &got, sizeof got, 300, 0), -FI_EAGAIN);
	uint64_t dt = now_ms() - t0;
	EXPECT(dt >= 250, "eq sread(300) returned after %" PRIu64 " ms", dt);
	struct fi_eq_err_entry ee;
	memset(&ee, 0, sizeof ee);
	EXPECT_RET(fi_eq_readerr(eq, &ee, 0), -FI_EAGAIN);

	for (int i = 0; i < 3; i++) {
		e.fid = &fab->fid;
		e.context = (void *)(uintptr_t)(0xabc0 + i);
		e.data = 77 + i;
		EXPECT_RET(fi_eq_write(eq, FI_NOTIFY, &e, sizeof e, 0), (long)sizeof e);
	}
	/* peek, then read in order */
	memset(&got, 0, sizeof got);
	EXPECT_RET(fi_eq_read(eq, &ev, &got, sizeof got, FI_PEEK), (long)sizeof got);
	EXPECT(got.context == (void *)0xabc0, "peek ctx %p", got.context);
	for (int i = 0; i < 3; i++) {
		memset(&got, 0, sizeof got);
		ssize_t r = i == 1 ? fi_eq_sread(eq, &ev, &got, sizeof got, 1000, 0)
				   : fi_eq_read(eq, &ev, &got, sizeof got, 0);
		EXPECT(r == (ssize_t)sizeof got, "eq read %d = %zd", i, r);
		EXPECT(ev == FI_NOTIFY, "event %u", ev);
		EXPECT(got.fid == &fab->fid && got.context == (void *)(uintptr_t)(0xabc0 + i) &&
		       got.data == (uint64_t)(77 + i), "eq entry %d content", i);
	}
	EXPECT_RET(fi_eq_read(eq, &ev, &got, sizeof got, 0), -FI_EAGAIN);
	char sb[128];
	EXPECT(fi_eq_strerror(eq, 0, NULL, sb, sizeof sb) != NULL, "eq strerror");
	CHECK_CONTAINED("fi_close(fab) with live children returns -FI_EBUSY", fi_close(&fab->fid) == -FI_EBUSY);
	CHK(fi_close(&eq->fid));
	CHK(fi_close(&fab->fid));
	fi_freeinfo(fi);
	pass();
}

/* ================================================================ cancel */

static void scn_cancel(void)
{
	struct ctx c;
	struct opts o = defopts();
	ctx_open_or_skip(&c, &o, "msg|tagged");
	static char b1[1000], b2[1000];
	struct fi_context2 x1, x2, x3;
	void *d1 = reg(&c, b1, sizeof b1), *d2 = reg(&c, b2, sizeof b2);
	POST(fi_recv(c.ep, b1, sizeof b1, d1, FI_ADDR_UNSPEC, &x1));
	POST(fi_trecv(c.ep, b2, sizeof b2, d2, FI_ADDR_UNSPEC, 0x42, 0, &x2));
	POST(fi_trecv(c.ep, b2, sizeof b2, d2, FI_ADDR_UNSPEC, 0x43, 0, &x3));
	CHK(fi_cancel(&c.ep->fid, &x2));
	CHK(fi_cancel(&c.ep->fid, &x1));
	int seen1 = 0, seen2 = 0;
	for (int i = 0; i < 2; i++) {
		struct comp e = cqw_get(&c.rx);
		EXPECT(e.err == FI_ECANCELED, "cancel completion err %d (%s)", e.err, fi_strerror(e.err));
		EXPECT(e.ctx == &x1 || e.ctx == &x2, "cancel completion op_context %p", e.ctx);
		if (e.ctx == &x1) {
			seen1++;
			DEVIATE((e.flags & (FI_RECV | FI_MSG)) == (FI_RECV | FI_MSG), "flags 0x%" PRIx64, e.flags);
		} else {
			seen2++;
			DEVIATE((e.flags & (FI_RECV | FI_TAGGED)) == (FI_RECV | FI_TAGGED), "flags 0x%" PRIx64, e.flags);
			DEVIATE(e.tag == 0x42, "canceled tagged recv reports tag 0x%" PRIx64, e.tag);
		}
	}
	EXPECT(seen1 == 1 && seen2 == 1, "cancel completions");
	/* the third receive is still posted: no completion; cancel of an unknown
	 * context is harmless */
	cqw_none(&c.rx, 50);
	struct fi_context2 unknown;
	int r = fi_cancel(&c.ep->fid, &unknown);
	EXPECT(r == 0 || r == -FI_ENOENT, "fi_cancel(unknown ctx) = %d", r);
	CHK(fi_cancel(&c.ep->fid, &x3));
	struct comp e = cqw_get(&c.rx);
	EXPECT(e.err == FI_ECANCELED && e.ctx == &x3, "third cancel");
	cqw_none(&c.rx, 50);
	ctx_close(&c);
	pass();
}

/* ======================================================= the receive budget */

/* rx_attr->size receives may be posted at once: one more is -FI_EAGAIN,
 * tagged or not, and a cancel gives a place back. A receive posted while a
 * message that matches it waits unexpected takes that message at once (gnix
 * posts a plain receive on a lane of its own, which must leave both cases to
 * the general path). */
static void scn_rx_budget(void)
{
	struct ctx c;
	struct opts o = defopts();
	o.rx_size = 4;
	ctx_open_or_skip(&c, &o, "msg|tagged, rx_attr->size 4");
	size_t n = c.info->rx_attr->size;
	EXPECT(n >= 4 && n <= 64, "rx_attr->size %zu for a hint of 4", n);
	exchange(&c, 0);
	fi_addr_t self = c.addr[0];
	static char rb[64][64], ub[64], sb[64];
	struct fi_context2 x[64], xu, xs;
	void *rd = reg(&c, rb, sizeof rb), *ud = reg(&c, ub, sizeof ub), *sd = reg(&c, sb, sizeof sb);
	for (size_t i = 0; i < n; i++)
		CHK(fi_trecv(c.ep, rb[i], sizeof rb[i], rd, FI_ADDR_UNSPEC, 0x100 + i, 0, &x[i]));
	/* fi_msg(3): -FI_EAGAIN when the provider lacks the resources (shm
	 * answers -FI_ENOMEM; rxm budgets tagged and untagged receives apart) */
	ssize_t r = fi_trecv(c.ep, ub, sizeof ub, ud, FI_ADDR_UNSPEC, 0x200, 0, &xu);
	EXPECT(r == -FI_EAGAIN || r == -FI_ENOMEM, "fi_trecv beyond the budget = %zd", r);
	DEVIATE(r == -FI_EAGAIN, "a full budget refuses fi_trecv with %zd, not -FI_EAGAIN", r);
	struct comp e;
	r = fi_recv(c.ep, ub, sizeof ub, ud, FI_ADDR_UNSPEC, &xu);
	DEVIATE(r == -FI_EAGAIN, "fi_recv beyond the tagged receives' budget = %zd", r);
	if (r == 0) {
		CHK(fi_cancel(&c.ep->fid, &xu));
		e = cqw_get(&c.rx);
		EXPECT(e.err == FI_ECANCELED && e.ctx == &xu, "cancel: err %d ctx %p", e.err, e.ctx);
	} else {
		EXPECT(r == -FI_EAGAIN || r == -FI_ENOMEM, "fi_recv beyond the budget = %zd", r);
	}
	CHK(fi_cancel(&c.ep->fid, &x[n - 1]));
	e = cqw_get(&c.rx);
	EXPECT(e.err == FI_ECANCELED && e.ctx == &x[n - 1], "cancel: err %d ctx %p", e.err, e.ctx);
	/* A message no posted receive matches waits unexpected ... */
	memset(sb, 'u', sizeof sb);
	POST(fi_tsend(c.ep, sb, 16, sd, self, 0x300, &xs));
	e = cqw_get(&c.tx);
	EXPECT(e.err == 0 && e.ctx == &xs, "send: err %d ctx %p", e.err, e.ctx);
	cqw_none(&c.rx, 50);
	/* ... and the receive posted for it, in the place the cancel freed,
	 * takes it. */
	memset(ub, 0, sizeof ub);
	CHK(fi_trecv(c.ep, ub, sizeof ub, ud, FI_ADDR_UNSPEC, 0x300, 0, &xu));
	e = cqw_get(&c.rx);
	EXPECT(e.err == 0 && e.ctx == &xu && e.len == 16, "unexpected taken: err %d ctx %p len %zu", e.err,
	       e.ctx, e.len);
	DEVIATE(e.tag == 0x300, "tag 0x%" PRIx64, e.tag);
	EXPECT(!memcmp(ub, sb, 16) && ub[16] == 0, "the unexpected message's bytes");
	/* The n - 1 receives still posted are there: a message for one of them
	 * completes it; the rest are canceled. */
	POST(fi_tsend(c.ep, sb, 8, sd, self, 0x100, &xs));
	cqw_get(&c.tx);
	e = cqw_get(&c.rx);
	EXPECT(e.err == 0 && e.ctx == &x[0] && e.len == 8, "posted taken: err %d ctx %p len %zu", e.err, e.ctx,
	       e.len);
	for (size_t i = 1; i + 1 < n; i++) {
		CHK(fi_cancel(&c.ep->fid, &x[i]));
		e = cqw_get(&c.rx);
		EXPECT(e.err == FI_ECANCELED && e.ctx == &x[i], "cancel %zu: err %d ctx %p", i, e.err, e.ctx);
	}
	cqw_none(&c.rx, 50);
	ctx_close(&c);
	pass();
}

/* ================================================================ bad input */

static void scn_bad_input(void)
{
	struct ctx c;
	struct opts o = defopts();
	o.caps = FI_MSG; /* no FI_TAGGED: tagged calls must be refused */
	o.av_type = FI_AV_TABLE;
	ctx_open_or_skip(&c, &o, "FI_MSG + FI_AV_TABLE");
	exchange(&c, 0);
	fi_addr_t self = c.addr[0];
	static char buf[1 << 16], rbuf[1 << 16];
	void *d = reg(&c, buf, sizeof buf), *rd = reg(&c, rbuf, sizeof rbuf);
	struct fi_context2 x[8];
	size_t inj = c.info->tx_attr->inject_size;

	/* NULL buffer with non-zero length */
	CHECK_CONTAINED("fi_send(NULL, 16) returns -FI_EINVAL",
			fi_send(c.ep, NULL, 16, NULL, self, &x[0]) == -FI_EINVAL);
	CHECK_CONTAINED("fi_inject(NULL, 8) returns -FI_EINVAL", fi_inject(c.ep, NULL, 8, self) == -FI_EINVAL);
	CHECK_CONTAINED("fi_tsend(NULL, 16) on an ep without FI_TAGGED fails",
			fi_tsend(c.ep, NULL, 16, NULL, self, 1, &x[0]) < 0);

	/* inject larger than inject_size */
	CHECK_CONTAINED("fi_inject(inject_size + 1) returns -FI_EINVAL or -FI_EMSGSIZE",
			({ ssize_t r1 = fi_inject(c.ep, buf, inj + 1, self); r1 == -FI_EINVAL || r1 == -FI_EMSGSIZE; }));

	/* unknown fi_addr (AV table with 1 entry) */
	CHECK_CONTAINED("send to an unknown fi_addr fails (return or error completion with op_context)",
			({ ssize_t r1 = fi_send(c.ep, buf, 8, d, (fi_addr_t)57, &x[1]); struct comp e1;
			   r1 == 0 ? (e1 = cqw_get(&c.tx), e1.err != 0 && e1.ctx == &x[1]) : (r1 < 0 && r1 != -FI_EAGAIN); }));
	CHECK_CONTAINED("send to FI_ADDR_UNSPEC on a non-connected ep fails",
			({ ssize_t r1 = fi_send(c.ep, buf, 8, d, FI_ADDR_UNSPEC, &x[1]);
			   r1 == 0 ? cqw_get(&c.tx).err != 0 : r1 < 0; }));
	/* tagged op on an endpoint without FI_TAGGED */
	CHECK_CONTAINED("fi_tsend on an ep without FI_TAGGED fails",
			({ ssize_t r1 = fi_tsend(c.ep, buf, 8, d, self, 1, &x[2]);
			   r1 == 0 ? cqw_get(&c.tx).err != 0 : r1 < 0; }));

	/* more iovs than iov_limit */
	size_t lim = c.info->tx_attr->iov_limit;
	if (lim < 64) {
		struct iovec iov[65];
		void *ds[65];
		for (size_t i = 0; i <= lim; i++) {
			iov[i].iov_base = buf + i;
			iov[i].iov_len = 1;
			ds[i] = d;
		}
		CHECK_CONTAINED("fi_sendv(iov_limit + 1 iovs) returns -FI_EINVAL",
				fi_sendv(c.ep, iov, ds, lim + 1, self, &x[3]) == -FI_EINVAL);
	}
	/* FI_FENCE without the FI_FENCE capability; a tagged-only flag on an
	 * untagged receive */
	if (!(c.info->caps & FI_FENCE)) {
		struct iovec iov = { buf, 8 };
		struct fi_msg m = { .msg_iov = &iov, .desc = &d, .iov_count = 1, .addr = self, .context = &x[6] };
		CHECK_CONTAINED("fi_sendmsg(FI_FENCE) without the FI_FENCE cap returns -FI_EBADFLAGS",
				fi_sendmsg(c.ep, &m, FI_FENCE) == -FI_EBADFLAGS);
	}
	{
		struct iovec iov = { rbuf, 8 };
		struct fi_msg m = { .msg_iov = &iov, .desc = &rd, .iov_count = 1, .addr = FI_ADDR_UNSPEC, .context = &x[7] };
		CHECK_CONTAINED("fi_recvmsg(FI_PEEK) on an untagged receive returns -FI_EBADFLAGS",
				fi_recvmsg(c.ep, &m, FI_PEEK) == -FI_EBADFLAGS);
	}
	/* the ep is still fine: a real self-send of 1000 B */
	fill(buf, 1000, 9);
	POST(fi_recv(c.ep, rbuf, sizeof rbuf, rd, FI_ADDR_UNSPEC, &x[4]));
	POST(fi_send(c.ep, buf, 1000, d, self, &x[5]));
	struct comp e = cqw_ok(&c.tx);
	EXPECT(e.ctx == &x[5], "self send ctx");
	for (;;) { /* drain receives of bad sends that providers let through */
		e = cqw_get(&c.rx);
		if (e.ctx == &x[4] && e.len == 1000 && !e.err)
			break;
		EXPECT(e.ctx == &x[4], "rx ctx %p", e.ctx);
		POST(fi_recv(c.ep, rbuf, sizeof rbuf, rd, FI_ADDR_UNSPEC, &x[4]));
	}
	check("self send", rbuf, 1000, 9);
	ctx_close(&c);
	pass();
}

/* ================================================================ fi_open_ops (gnix) */

/* The fi_ext_gnix.h domain ops: read the defaults, set, read back, refuse
 * what is out of range; then an endpoint opened after a threshold of 1000
 * bytes moves messages either side of it intact. */
static void scn_open_ops(void)
{
	struct fi_info *h = mkhints(&(struct opts){ 0 }), *fi;
	CHK(fi_getinfo(FT_VERSION, NULL, NULL, 0, h, &fi));
	fi_freeinfo(h);
	struct fid_fabric *fab;
	struct fid_domain *dom;
	CHK(fi_fabric(fi->fabric_attr, &fab, NULL));
	CHK(fi_domain(fab, fi, &dom, NULL));
	struct fi_gnix_ops_domain *ops;
	EXPECT_RET(fi_open_ops(&dom->fid, "no such ops", 0, (void **)&ops, NULL), -FI_ENOSYS);
	CHK(fi_open_ops(&dom->fid, FI_GNIX_DOMAIN_OPS_1, 0, (void **)&ops, NULL));
	size_t thr = 0;
	uint64_t tmo = 0;
	uint32_t rtx = 0;
	CHK(ops->get_val(&dom->fid, GNIX_RNDV_THRESHOLD, &thr));
	CHK(ops->get_val(&dom->fid, GNIX_PEER_TIMEOUT_MS, &tmo));
	CHK(ops->get_val(&dom->fid, GNIX_MAX_RETRANS, &rtx));
	EXPECT(thr == 65536 && tmo == 10000 && rtx == 25, "defaults %zu %" PRIu64 " %u", thr, tmo, rtx);
	thr = 1000, tmo = 2500, rtx = 7;
	CHK(ops->set_val(&dom->fid, GNIX_RNDV_THRESHOLD, &thr));
	CHK(ops->set_val(&dom->fid, GNIX_PEER_TIMEOUT_MS, &tmo));
	CHK(ops->set_val(&dom->fid, GNIX_MAX_RETRANS, &rtx));
	thr = 0, tmo = 0, rtx = 0;
	CHK(ops->get_val(&dom->fid, GNIX_RNDV_THRESHOLD, &thr));
	CHK(ops->get_val(&dom->fid, GNIX_PEER_TIMEOUT_MS, &tmo));
	CHK(ops->get_val(&dom->fid, GNIX_MAX_RETRANS, &rtx));
	EXPECT(thr == 1000 && tmo == 2500 && rtx == 7, "read back %zu %" PRIu64 " %u", thr, tmo, rtx);
	size_t huge = (size_t)1 << 31;
	uint64_t zero64 = 0;
	uint32_t zero32 = 0;
	EXPECT_RET(ops->set_val(&dom->fid, GNIX_RNDV_THRESHOLD, &huge), -FI_EINVAL);
	EXPECT_RET(ops->set_val(&dom->fid, GNIX_PEER_TIMEOUT_MS, &zero64), -FI_EINVAL);
	EXPECT_RET(ops->set_val(&dom->fid, GNIX_MAX_RETRANS, &zero32), -FI_EINVAL);
	EXPECT_RET(ops->set_val(&dom->fid, GNIX_NUM_DOM_OPS, &thr), -FI_EINVAL);
	EXPECT_RET(ops->set_val(&dom->fid, GNIX_RNDV_THRESHOLD, NULL), -FI_EINVAL);
	EXPECT_RET(ops->get_val(&dom->fid, GNIX_NUM_DOM_OPS, &thr), -FI_EINVAL);
	CHK(ops->get_val(&dom->fid, GNIX_RNDV_THRESHOLD, &thr));
	EXPECT(thr == 1000, "a refused set changed the threshold to %zu", thr);
	CHK(fi_close(&dom->fid));
	CHK(fi_close(&fab->fid));
	fi_freeinfo(fi);

	struct ctx c;
	struct opts o = defopts();
	o.rndv_threshold = 1000;
	ctx_open_or_skip(&c, &o, "msg|tagged");
	exchange(&c, 0);
	enum { N = 4 };
	size_t len[N] = { 999, 1000, 1001, 200000 };
	static char sb[N][200000], rb[N][200000];
	void *sd = reg(&c, sb, sizeof sb), *rd = reg(&c, rb, sizeof rb);
	struct fi_context2 x[2 * N];
	for (int i = 0; i < N; i++) {
		fill(sb[i], len[i], 40 + i);
		POST(fi_trecv(c.ep, rb[i], len[i], rd, FI_ADDR_UNSPEC, i, 0, &x[i]));
	}
	for (int i = 0; i < N; i++)
		POST(fi_tsend(c.ep, sb[i], len[i], sd, c.addr[0], i, &x[N + i]));
	for (int i = 0; i < N; i++) {
		(void)cqw_ok(&c.tx);
		struct comp e = cqw_ok(&c.rx);
		int k = (int)((struct fi_context2 *)e.ctx - x);
		EXPECT(k >= 0 && k < N && e.len == len[k], "rx ctx/len");
	}
	for (int i = 0; i < N; i++)
		check("open_ops", rb[i], len[i], 40 + i);
	ctx_close(&c);
	pass();
}

#include "fitest_pair.h"
#include "fitest_pair_progress.h"
#include "fitest_rma.h"
#include "fitest_coll.h"

struct scenario {
	const char *name;
	void (*fn)(void);
};


/* ======================================================= unsupported_ops */

/* Every RMA, atomic and collective entry point, called through libfabric's
 * inline wrappers on an endpoint whose info has no FI_RMA / FI_ATOMIC /
 * FI_COLLECTIVE: each must return an error (gnix: -FI_EOPNOTSUPP, as
 * other endpoints offer them), never crash through a NULL ops table. */
static void scn_unsupported_ops(void)
{
	struct ctx c;
	struct opts o = defopts();
	o.caps = FI_MSG | FI_TAGGED;
	ctx_open_or_skip(&c, &o, "FI_MSG | FI_TAGGED");
	exchange(&c, 0);
	fi_addr_t self = c.addr[0];
	static uint64_t buf[64], cmp[64], res[64];
	struct fi_context2 x;
	struct iovec iov = { buf, 8 };
	struct fi_ioc ioc = { buf, 1 }, cioc = { cmp, 1 }, rioc = { res, 1 };
	struct fi_rma_iov riov = { 0, 8, 0 };
	struct fi_rma_ioc rioc_t = { 0, 1, 0 };
	void *desc = NULL;
	struct fi_msg_rma mrma = { .msg_iov = &iov, .desc = &desc, .iov_count = 1, .addr = self,
				   .rma_iov = &riov, .rma_iov_count = 1, .context = &x };
	struct fi_msg_atomic matom = { .msg_iov = &ioc, .desc = &desc, .iov_count = 1, .addr = self,
				       .rma_iov = &rioc_t, .rma_iov_count = 1, .datatype = FI_UINT64,
				       .op = FI_SUM, .context = &x };
	size_t cnt = 0;
	int n = 0;
	uint64_t caps = c.info->caps;
	/* gnix answers as told; another provider is only reported (in a
	 * forked child, so what its call did stays there). */
	/* RMA and atomics exist: on an endpoint opened without them, the calls
	 * are refused as not supported there. */
#define REFUSED_HERE(call) do { n++; \
	CHECK_CONTAINED(#call " returns -FI_EOPNOTSUPP or -FI_ENOSYS", \
			({ long _v = (long)(call); _v == -FI_EOPNOTSUPP || _v == -FI_ENOSYS; })); } while (0)
	if (!(caps & FI_RMA)) {
		REFUSED_HERE(fi_read(c.ep, buf, 8, NULL, self, 0, 0, &x));
		REFUSED_HERE(fi_readv(c.ep, &iov, &desc, 1, self, 0, 0, &x));
		REFUSED_HERE(fi_readmsg(c.ep, &mrma, 0));
		REFUSED_HERE(fi_write(c.ep, buf, 8, NULL, self, 0, 0, &x));
		REFUSED_HERE(fi_writev(c.ep, &iov, &desc, 1, self, 0, 0, &x));
		REFUSED_HERE(fi_writemsg(c.ep, &mrma, 0));
		REFUSED_HERE(fi_inject_write(c.ep, buf, 8, self, 0, 0));
		REFUSED_HERE(fi_writedata(c.ep, buf, 8, NULL, 1, self, 0, 0, &x));
		REFUSED_HERE(fi_inject_writedata(c.ep, buf, 8, 1, self, 0, 0));
	}
	if (!(caps & FI_ATOMIC)) {
		REFUSED_HERE(fi_atomic(c.ep, buf, 1, NULL, self, 0, 0, FI_UINT64, FI_SUM, &x));
		REFUSED_HERE(fi_atomicv(c.ep, &ioc, &desc, 1, self, 0, 0, FI_UINT64, FI_SUM, &x));
		REFUSED_HERE(fi_atomicmsg(c.ep, &matom, 0));
		REFUSED_HERE(fi_inject_atomic(c.ep, buf, 1, self, 0, 0, FI_UINT64, FI_SUM));
		REFUSED_HERE(fi_fetch_atomic(c.ep, buf, 1, NULL, res, NULL, self, 0, 0, FI_UINT64, FI_SUM, &x));
		REFUSED_HERE(fi_fetch_atomicv(c.ep, &ioc, &desc, 1, &rioc, &desc, 1, self, 0, 0, FI_UINT64, FI_SUM, &x));
		REFUSED_HERE(fi_fetch_atomicmsg(c.ep, &matom, &rioc, &desc, 1, 0));
		REFUSED_HERE(fi_compare_atomic(c.ep, buf, 1, NULL, cmp, NULL, res, NULL, self, 0, 0, FI_UINT64,
					  FI_CSWAP, &x));
		REFUSED_HERE(fi_compare_atomicv(c.ep, &ioc, &desc, 1, &cioc, &desc, 1, &rioc, &desc, 1, self, 0, 0,
					   FI_UINT64, FI_CSWAP, &x));
		REFUSED_HERE(fi_compare_atomicmsg(c.ep, &matom, &cioc, &desc, 1, &rioc, &desc, 1, 0));
		REFUSED_HERE(fi_atomicvalid(c.ep, FI_UINT64, FI_SUM, &cnt));
		REFUSED_HERE(fi_fetch_atomicvalid(c.ep, FI_UINT64, FI_SUM, &cnt));
		REFUSED_HERE(fi_compare_atomicvalid(c.ep, FI_UINT64, FI_CSWAP, &cnt));
	}
	if (!(caps & FI_COLLECTIVE)) {
		fi_addr_t coll = FI_ADDR_NOTAVAIL;
		REFUSED_HERE(fi_barrier(c.ep, coll, &x));
		REFUSED_HERE(fi_barrier2(c.ep, coll, 0, &x));
		REFUSED_HERE(fi_broadcast(c.ep, buf, 1, NULL, coll, self, FI_UINT64, 0, &x));
		REFUSED_HERE(fi_alltoall(c.ep, buf, 1, NULL, res, NULL, coll, FI_UINT64, 0, &x));
		REFUSED_HERE(fi_allreduce(c.ep, buf, 1, NULL, res, NULL, coll, FI_UINT64, FI_SUM, 0, &x));
		REFUSED_HERE(fi_allgather(c.ep, buf, 1, NULL, res, NULL, coll, FI_UINT64, 0, &x));
		REFUSED_HERE(fi_reduce_scatter(c.ep, buf, 1, NULL, res, NULL, coll, FI_UINT64, FI_SUM, 0, &x));
		REFUSED_HERE(fi_reduce(c.ep, buf, 1, NULL, res, NULL, coll, self, FI_UINT64, FI_SUM, 0, &x));
		REFUSED_HERE(fi_scatter(c.ep, buf, 1, NULL, res, NULL, coll, self, FI_UINT64, 0, &x));
		REFUSED_HERE(fi_gather(c.ep, buf, 1, NULL, res, NULL, coll, self, FI_UINT64, 0, &x));
		struct fi_msg_collective mc = { .msg_iov = &ioc, .desc = &desc, .iov_count = 1, .coll_addr = coll,
						.root_addr = self, .coll = FI_ALLREDUCE, .datatype = FI_UINT64,
						.op = FI_SUM, .context = &x };
		/* no inline wrapper in 1.17: through the table */
		REFUSED_HERE(c.ep->collective->msg(c.ep, &mc, &rioc, &desc, 1, 0));
	}
#undef REFUSED_HERE
	/* The endpoint still works after all that. */
	struct fi_context2 r, t;
	static char in[16], out[16] = "still alive";
	CHK(fi_recv(c.ep, in, sizeof in, NULL, self, &r));
	CHK(fi_send(c.ep, out, sizeof out, NULL, self, &t));
	cqw_get(&c.tx);
	cqw_get(&c.rx);
	EXPECT(!strcmp(in, out), "message after the refused calls: %s", in);
	info("%d unsupported calls refused", n);
	pass();
}

static const struct scenario scenarios[] = {
	{ "getinfo", scn_getinfo },
	{ "classes", scn_classes },
	{ "cq_wait", scn_cq_wait },
	{ "cq_signal", scn_cq_signal },
	{ "av", scn_av },
	{ "mr", scn_mr },
	{ "cntr", scn_cntr },
	{ "eq", scn_eq },
	{ "cancel", scn_cancel },
	{ "rx_budget", scn_rx_budget },
	{ "bad_input", scn_bad_input },
	{ "open_ops", scn_open_ops },
	{ "unsupported_ops", scn_unsupported_ops },
	PAIR_SCENARIOS
	RMA_SCENARIOS
	COLL_SCENARIOS
};

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 4) {
		fprintf(stderr, "usage: %s <scenario> <rank> <nprocs> [arg]\n", argv[0]);
		for (size_t i = 0; i < sizeof scenarios / sizeof scenarios[0]; i++)
			fprintf(stderr, "  %s\n", scenarios[i].name);
		return 2;
	}
	g_scn = argv[1];
	g_rank = atoi(argv[2]);
	g_nprocs = atoi(argv[3]);
	g_arg = argc > 4 ? argv[4] : "";
	const char *s = getenv("FITEST_STRICT");
	g_strict = s && *s == '1';
	s = getenv("FITEST_TIMEOUT_MS");
	if (s)
		g_timeout_ms = atol(s);
	for (size_t i = 0; i < sizeof scenarios / sizeof scenarios[0]; i++)
		if (!strcmp(scenarios[i].name, g_scn)) {
			scenarios[i].fn();
			FAIL("scenario returned without a verdict");
		}
	FAIL("unknown scenario");
}
