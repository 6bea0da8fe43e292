/*
 * gnix provider extensions, reached through fi_open_ops() in the tradition
 * of the Cray GNI provider's fi_ext_gni.h.
 *
 *   struct fi_gnix_ops_domain *ops;
 *   fi_open_ops(&domain->fid, FI_GNIX_DOMAIN_OPS_1, 0, (void **) &ops, NULL);
 *   size_t thr = 16384;
 *   ops->set_val(&domain->fid, GNIX_RNDV_THRESHOLD, &thr);
 *
 * Values set on a domain apply to endpoints opened on it afterwards.
 * fi_open_ops returns -FI_ENOSYS for an ops name other than
 * FI_GNIX_DOMAIN_OPS_1.
 */
#ifndef FI_EXT_GNIX_H
#define FI_EXT_GNIX_H

#include <stddef.h>
#include <stdint.h>
#include <rdma/fabric.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FI_GNIX_DOMAIN_OPS_1 "domain ops 1"

typedef enum gnix_dom_ops_val {
	GNIX_RNDV_THRESHOLD = 0,   /* size_t: messages longer than this use rendezvous
	                            * (at most 1 GiB; on the shm wire, messages longer
	                            * than a mailbox slot go rendezvous in any case) */
	GNIX_PEER_TIMEOUT_MS,      /* uint64_t: silence before a peer is declared dead */
	GNIX_MAX_RETRANS,          /* uint32_t: retransmissions before a peer is declared dead */
	GNIX_NUM_DOM_OPS
} gnix_dom_ops_val_t;

struct fi_gnix_ops_domain {
	/* Return 0, or -FI_EINVAL for an unknown value, a NULL pointer or a
	 * value out of range (a zero timeout or retransmission limit). */
	int (*set_val)(struct fid *fid, gnix_dom_ops_val_t t, void *val);
	int (*get_val)(struct fid *fid, gnix_dom_ops_val_t t, void *val);
};

#ifdef __cplusplus
}
#endif

#endif /* FI_EXT_GNIX_H */
