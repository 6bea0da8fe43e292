//! VC handshake (DESIGN.md §3, gnix VC over the CmNic channel).
//!
//! Each VC incarnation draws a random nonzero nonce (its connection id) and
//! an initial sequence number from the OS (`entropy.rs`). CONN_REQ carries
//! the requester's; CONN_RESP carries the responder's and echoes the
//! requester's. Every later datagram carries the *receiver's* nonce, so
//! datagrams of an old incarnation (either side restarted at the same
//! address) or forged ones are recognised and dropped.
//!
//! A CONN_REQ proves nothing: its source address costs nothing to forge.
//! So it never changes a VC by itself. A VC becomes established only by a
//! datagram that echoes our nonce, which was sent to the peer's address
//! alone: a CONN_RESP, or (on the side that received the CONN_REQ) the
//! CONN_REQ itself when there was no VC to disturb. What a CONN_REQ does,
//! by the state of the VC we hold with its source address:
//!
//! ```text
//!  our VC with the address    CONN_REQ(nonce n, cookie c)        we answer
//!  none                       create it, established with n      CONN_RESP(ours, echo n)
//!  connecting (ours: m)       unchanged (simultaneous connect:   CONN_RESP(m, echo n)
//!                             the peer's CONN_RESP to our
//!                             CONN_REQ establishes it)
//!  established, peer's id n   unchanged (our answer was lost)    CONN_RESP again
//!  established, peer's id     c == cookie(addr, n, our id):      old VC fails (PeerRestarted);
//!    p != n                     the peer restarted               new VC, CONN_RESP(new id, echo n)
//!                             otherwise unchanged                CHALLENGE(echo n, cookie(addr, n, our id))
//!
//!  the requester, connecting with n:
//!    CONN_RESP(m, echo n)  -> established with m
//!    CHALLENGE(echo n, c)  -> CONN_REQ(n, c) now, and in every retransmission
//! ```
//!
//! The cookie is a MAC (SipHash-2-4 under a key from the OS) of the
//! requester's address, its new nonce and our live VC's nonce. It is sent
//! only to the address, so only the address's owner can echo it: a peer
//! that really restarted gets a fresh VC one round trip later, and someone
//! who can forge the peer's address but not read what is sent to it cannot
//! touch the live VC, nor make us keep anything per request (the cookie is
//! recomputed, not stored; a VC holds at most one challenge to send).
//! Binding our live nonce makes a cookie useless once that VC is gone, and
//! the requester's nonce makes it useless for any other incarnation.
//!
//! Simultaneous connect needs no tie-break: each side answers the other's
//! CONN_REQ with a CONN_RESP carrying the nonce and ISN its own CONN_REQ
//! carried, and each becomes established when the answer to its own
//! request arrives. Both sides end with the same pair of nonces whatever
//! order the four datagrams arrive in, and nothing queued on either side is
//! thrown away.

use super::entropy::Entropy;
use super::siphash::SipHash24;
use std::net::SocketAddr;

/// What an incoming CONN_REQ means for the VC we hold with that address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReqVerdict {
    /// No VC: accept and answer.
    Fresh,
    /// Same nonce as the VC's peer: our CONN_RESP was lost, answer again.
    Duplicate,
    /// We are connecting too: answer with our nonce, change nothing.
    Simultaneous,
    /// A different nonce on an established VC: the peer restarted, or the
    /// request is forged (or an old one replayed). Accepted only with the
    /// cookie of a CHALLENGE; otherwise challenged.
    Restarted,
}

pub fn classify_req(existing: Option<Option<u64>>, nonce: u64) -> ReqVerdict {
    match existing {
        None => ReqVerdict::Fresh,
        Some(None) => ReqVerdict::Simultaneous,
        Some(Some(n)) if n == nonce => ReqVerdict::Duplicate,
        Some(Some(_)) => ReqVerdict::Restarted,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Handshake {
    Connecting {
        since: u64,
        /// When the next CONN_REQ is due.
        next_req_at: u64,
        attempts: u32,
        /// A CONN_REQ should go out at the next transmit opportunity.
        req_due: bool,
        /// The cookie of the peer's CHALLENGE, echoed in our CONN_REQs (0:
        /// none): the peer holds a VC of an earlier incarnation of ours.
        cookie: u64,
        /// The nonce of a CONN_REQ the peer sent while we connect, to be
        /// answered with a CONN_RESP (the latest one only).
        answer: Option<u64>,
    },
    Established,
}

impl Handshake {
    pub fn connecting(now: u64) -> Handshake {
        Handshake::Connecting {
            since: now,
            next_req_at: u64::MAX,
            attempts: 0,
            req_due: true,
            cookie: 0,
            answer: None,
        }
    }
}

/// Retransmission interval of CONN_REQ: the RTO is unknown before the first
/// exchange, so back off from the configured initial value.
pub fn req_interval(rto_init: u64, rto_max: u64, attempts: u32) -> u64 {
    rto_init.saturating_mul(1u64 << attempts.min(20)).min(rto_max)
}

/// The engine's secret for CHALLENGE cookies, drawn once from its entropy.
#[derive(Clone, Copy)]
pub struct CookieKey(u64, u64);

impl CookieKey {
    pub fn new(entropy: &mut dyn Entropy) -> CookieKey {
        CookieKey(entropy.next_u64(), entropy.next_u64())
    }

    /// The cookie that lets the CONN_REQ of `peer` with nonce `theirs`
    /// replace our established VC whose nonce is `ours`. Never 0 (0 in a
    /// CONN_REQ means "no cookie").
    pub fn cookie(&self, peer: SocketAddr, theirs: u64, ours: u64) -> u64 {
        let mut h = SipHash24::new(self.0, self.1);
        let ip = match peer {
            SocketAddr::V4(a) => a.ip().to_ipv6_mapped(),
            SocketAddr::V6(a) => *a.ip(),
        };
        h.write(&ip.octets());
        h.write(&peer.port().to_le_bytes());
        h.write(&theirs.to_le_bytes());
        h.write(&ours.to_le_bytes());
        h.finish().max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix;

    #[test]
    fn verdicts() {
        assert_eq!(classify_req(None, 5), ReqVerdict::Fresh);
        assert_eq!(classify_req(Some(None), 5), ReqVerdict::Simultaneous);
        assert_eq!(classify_req(Some(Some(5)), 5), ReqVerdict::Duplicate);
        assert_eq!(classify_req(Some(Some(6)), 5), ReqVerdict::Restarted);
        assert_eq!(req_interval(10, 1000, 0), 10);
        assert_eq!(req_interval(10, 1000, 3), 80);
        assert_eq!(req_interval(10, 1000, 40), 1000);
    }

    /// A cookie answers one question: this address, this new nonce, this
    /// live VC, under this engine's key. Change any of them and it differs.
    #[test]
    fn cookies_bind_address_nonces_and_key() {
        let key = CookieKey::new(&mut SplitMix(1));
        let a: SocketAddr = "10.0.0.1:7000".parse().unwrap();
        let c = key.cookie(a, 5, 9);
        assert_ne!(c, 0);
        assert_eq!(c, key.cookie(a, 5, 9));
        for other in [
            key.cookie("10.0.0.1:7001".parse().unwrap(), 5, 9),
            key.cookie("10.0.0.2:7000".parse().unwrap(), 5, 9),
            key.cookie(a, 6, 9),
            key.cookie(a, 5, 10),
            key.cookie(a, 9, 5),
            CookieKey::new(&mut SplitMix(2)).cookie(a, 5, 9),
        ] {
            assert_ne!(other, c);
        }
    }
}
