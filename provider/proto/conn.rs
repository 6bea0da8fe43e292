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
//! So it never changes a proven VC by itself, and what it may create is
//! bounded. A VC is *proven* once the peer has shown that it receives what
//! we send to its address: it echoed our nonce (a CONN_RESP, or any later
//! datagram, which carries our id), or a cookie of ours. A VC we open
//! ourselves is proven by the CONN_RESP that establishes it. A VC created
//! by a CONN_REQ is established (we know the peer's nonce and ISN, so its
//! data can arrive at once) but *unproven* until the peer's first datagram
//! carrying our id, which a real requester sends one round trip later.
//!
//! What a CONN_REQ does, by the state of the VC we hold with its source:
//!
//! ```text
//!  our VC with the address    CONN_REQ(nonce n, cookie c)        we answer
//!  none, c a first-contact    create it, proven, peer n          CONN_RESP(ours, echo n)
//!    cookie of ours
//!  none, fewer than           create it, unproven, peer n        CONN_RESP(ours, echo n)
//!    max_unproven unproven
//!  none, otherwise            nothing (stateless, bounded queue) CHALLENGE(echo n, first-contact cookie)
//!  connecting (ours: m)       unchanged (simultaneous connect:   CONN_RESP(m, echo n)
//!                             the peer's CONN_RESP to our
//!                             CONN_REQ establishes it)
//!  established, peer's id n   unchanged (our answer was lost)    CONN_RESP again
//!  established, peer's id     c == cookie(addr, n, our id)
//!    p != n                   (unproven VC: or c a first-contact
//!                             cookie of ours):
//!                               proven VC: the peer restarted:   old VC fails (PeerRestarted);
//!                                                                new VC, CONN_RESP(new id, echo n)
//!                               unproven VC: p was not the       re-keyed to n, proven; its
//!                               peer's (forged, or an old        queued sends go on:
//!                               incarnation's): nothing was      CONN_RESP(our id, echo n)
//!                               exchanged with p
//!                             otherwise unchanged                CHALLENGE(echo n, cookie(addr, n, our id))
//!
//!  the requester, connecting with n (and an unproven VC we send on, below):
//!    CONN_RESP(m, echo n)  -> established with m (proven)
//!    CHALLENGE(echo n, c)  -> CONN_REQ(n, c) now, and in every retransmission
//! ```
//!
//! Why the hybrid (SYN-cookie style) rather than always challenging a first
//! contact, or a table of unproven VCs that evicts the oldest: a challenge
//! costs the requester's first message a round trip, which latency-bound
//! applications pay on every new peer (issue 18); eviction lets a flood
//! throw out a real requester's VC between our CONN_RESP and its first
//! data, after which its data finds no VC until it times out. So a first
//! contact costs nothing while fewer than `EngineConfig::max_unproven` VCs
//! are unproven, and beyond that bound it is challenged statelessly: the
//! cookie is recomputed, not stored, and only a bounded queue of answers
//! waits for the next transmission. A real requester echoes the cookie one
//! round trip later and gets a proven VC whatever the flood; a forger
//! never can. An unproven VC that stays unproven for `peer_timeout_ns`
//! (a real requester would have given up by then) is dropped silently and
//! counted, so a flood holds at most `max_unproven` VCs, for a while.
//!
//! Sending on an unproven VC: its peer nonce may be a forger's, planted
//! for an address we send to later. Our data goes out at once anyway (it
//! is addressed to where the application wants it; a real requester takes
//! it, so the common case pays nothing), and alongside it our own CONN_REQ
//! (`Ask`), as if we were connecting. The real peer's answer settles it:
//! a CONN_RESP (or any datagram) echoing our nonce proves the VC; one whose
//! nonce differs from the planted one re-keys the VC to it, and every
//! segment sent so far is sent again under the new id (the peer dropped
//! them: they named an id it never had; none can have been acknowledged).
//!
//! The cookies are MACs (SipHash-2-4 under a key from the OS). A live VC's
//! binds the requester's address, its new nonce and our live VC's nonce;
//! a first contact's binds address, nonce and a coarse clock epoch (current
//! or previous one valid, so it expires within two epochs). Either is sent
//! only to the address, so only the address's owner can echo it: a peer
//! that really restarted gets a fresh VC one round trip later, and someone
//! who can forge the peer's address but not read what is sent to it cannot
//! touch the live VC, nor make us keep anything per request beyond the
//! bounded queue of challenges to send. Binding our live nonce makes a
//! cookie useless once that VC is gone, and the requester's nonce makes
//! it useless for any other incarnation.
//!
//! Every CONN_REQ with a new nonce on a live VC is challenged, from the
//! same bounded queue as first contacts (its cookie worked out when it is
//! sent), not only the latest per VC: with one challenge per VC, a forger
//! who sent a CONN_REQ with another nonce from the peer's address after
//! each of the peer's own had its nonce challenged instead of the peer's,
//! every time, and the peer's connection attempt timed out (found by the
//! long fuzz run, 2026-12-06). Now a forger must outpace the queue's
//! draining between two transmissions, not merely follow the peer.
//!
//! Simultaneous connect needs no tie-break: each side answers the other's
//! CONN_REQ with a CONN_RESP carrying the nonce and ISN its own CONN_REQ
//! carried, and each becomes established when the answer to its own
//! request arrives. Both sides end with the same pair of nonces whatever
//! order the four datagrams arrive in, and nothing queued on either side is
//! thrown away.

use super::entropy::Entropy;
use super::siphash::SipHash24;
use super::EngineConfig;
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
    /// request is forged (or an old one replayed), or (on an unproven VC)
    /// the request that created the VC was. Accepted only with the cookie
    /// of a CHALLENGE; otherwise challenged.
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
        ask: Ask,
        /// The nonce of a CONN_REQ the peer sent while we connect, to be
        /// answered with a CONN_RESP (the latest one only).
        answer: Option<u64>,
    },
    Established,
}

impl Handshake {
    pub fn connecting(now: u64) -> Handshake {
        Handshake::Connecting {
            ask: Ask::new(now),
            answer: None,
        }
    }
}

/// Our CONN_REQ until the peer answers it: connecting, or asking the peer
/// of an unproven VC we send on to prove itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ask {
    pub since: u64,
    /// When the next CONN_REQ is due.
    pub next_req_at: u64,
    pub attempts: u32,
    /// A CONN_REQ should go out at the next transmit opportunity.
    pub req_due: bool,
    /// The cookie of the peer's CHALLENGE, echoed in our CONN_REQs (0:
    /// none): the peer holds a VC of an earlier incarnation of ours, or
    /// too many unproven ones to take ours without proof.
    pub cookie: u64,
}

/// What the clock means for an `Ask`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AskTick {
    Wait,
    /// Time to send the CONN_REQ again.
    Due,
    /// No answer within the peer timeout or `max_retrans` requests.
    GiveUp,
}

impl Ask {
    pub fn new(now: u64) -> Ask {
        Ask {
            since: now,
            next_req_at: u64::MAX,
            attempts: 0,
            req_due: true,
            cookie: 0,
        }
    }

    /// The cookie for the CONN_REQ that goes out now, if one is due; the
    /// next is due after the backoff.
    pub fn send(&mut self, cfg: &EngineConfig, now: u64) -> Option<u64> {
        if !self.req_due {
            return None;
        }
        self.req_due = false;
        self.next_req_at = now + req_interval(cfg.rto_init_ns, cfg.rto_max_ns, self.attempts);
        Some(self.cookie)
    }

    /// The peer challenged our CONN_REQ: ask again at once, with its cookie.
    pub fn challenged(&mut self, cookie: u64) {
        self.cookie = cookie;
        self.req_due = true;
    }

    pub fn deadline(&self, cfg: &EngineConfig) -> u64 {
        self.next_req_at.min(self.since.saturating_add(cfg.peer_timeout_ns))
    }

    pub fn tick(&mut self, cfg: &EngineConfig, now: u64) -> AskTick {
        if now.saturating_sub(self.since) >= cfg.peer_timeout_ns {
            return AskTick::GiveUp;
        }
        if now < self.next_req_at {
            return AskTick::Wait;
        }
        if self.attempts >= cfg.max_retrans {
            return AskTick::GiveUp;
        }
        self.attempts += 1;
        self.req_due = true;
        self.next_req_at = u64::MAX;
        AskTick::Due
    }
}

/// A VC created by a CONN_REQ whose requester has not yet shown that it
/// receives what we send to its address (module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unproven {
    /// When the CONN_REQ created it: it expires `peer_timeout_ns` later
    /// unless proven or asking.
    pub since: u64,
    /// We send on it: our own CONN_REQ, until the peer answers.
    pub ask: Option<Ask>,
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
        self.mac(LIVE_VC, peer, theirs, ours)
    }

    /// The cookie that gets the CONN_REQ of `peer` with nonce `theirs` a
    /// VC when it is a first contact and too many VCs are unproven: valid
    /// in the clock epoch of `now` and the next one.
    pub fn first_contact(&self, peer: SocketAddr, theirs: u64, now: u64) -> u64 {
        self.mac(FIRST_CONTACT, peer, theirs, now >> COOKIE_EPOCH_SHIFT)
    }

    /// Whether `cookie` is the first-contact cookie of `peer` and `theirs`
    /// of the epoch of `now` or the one before.
    pub fn first_contact_ok(&self, peer: SocketAddr, theirs: u64, cookie: u64, now: u64) -> bool {
        let epoch = now >> COOKIE_EPOCH_SHIFT;
        cookie != 0
            && (cookie == self.mac(FIRST_CONTACT, peer, theirs, epoch)
                || (epoch > 0 && cookie == self.mac(FIRST_CONTACT, peer, theirs, epoch - 1)))
    }

    fn mac(&self, domain: u8, peer: SocketAddr, theirs: u64, bound: u64) -> u64 {
        let mut h = SipHash24::new(self.0, self.1);
        let ip = match peer {
            SocketAddr::V4(a) => a.ip().to_ipv6_mapped(),
            SocketAddr::V6(a) => *a.ip(),
        };
        h.write(&[domain]);
        h.write(&ip.octets());
        h.write(&peer.port().to_le_bytes());
        h.write(&theirs.to_le_bytes());
        h.write(&bound.to_le_bytes());
        h.finish().max(1)
    }
}

/// Domain separation of the two cookies: a live VC's can never pass for a
/// first contact's, whatever the numbers.
const LIVE_VC: u8 = 1;
const FIRST_CONTACT: u8 = 2;
/// A first-contact cookie's epoch: 2^33 ns, about 8.6 s of the engine's
/// clock. A requester answers a CHALLENGE at once, so even a slow or lossy
/// exchange is done well within the two epochs a cookie is valid for.
const COOKIE_EPOCH_SHIFT: u32 = 33;

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

    /// A first-contact cookie is valid for this address and nonce in its
    /// epoch and the next, never before nor after; and it never passes
    /// for a live VC's cookie or the other way round.
    #[test]
    fn first_contact_cookies_expire() {
        let key = CookieKey::new(&mut SplitMix(3));
        let a: SocketAddr = "10.0.0.1:7000".parse().unwrap();
        let epoch = 1u64 << COOKIE_EPOCH_SHIFT;
        let t = 5 * epoch + 17;
        let c = key.first_contact(a, 5, t);
        assert!(key.first_contact_ok(a, 5, c, t));
        assert!(key.first_contact_ok(a, 5, c, 5 * epoch));
        assert!(key.first_contact_ok(a, 5, c, 7 * epoch - 1));
        assert!(!key.first_contact_ok(a, 5, c, 7 * epoch));
        assert!(!key.first_contact_ok(a, 5, c, 5 * epoch - 1));
        assert!(!key.first_contact_ok(a, 6, c, t));
        assert!(!key.first_contact_ok("10.0.0.1:7001".parse().unwrap(), 5, c, t));
        assert!(!key.first_contact_ok(a, 5, 0, t));
        assert!(!CookieKey::new(&mut SplitMix(4)).first_contact_ok(a, 5, c, t));
        // Same numbers, other domain.
        let live = key.cookie(a, 5, 5);
        assert_ne!(key.first_contact(a, 5, 5 << COOKIE_EPOCH_SHIFT), live);
    }

    /// An ask sends at once, backs off, and gives up after the peer
    /// timeout or `max_retrans` requests, whichever comes first.
    #[test]
    fn asks_back_off_and_give_up() {
        let cfg = EngineConfig {
            rto_init_ns: 10,
            rto_max_ns: 1000,
            max_retrans: 3,
            peer_timeout_ns: 1_000_000,
            ..EngineConfig::default()
        };
        let mut a = Ask::new(100);
        assert_eq!(a.send(&cfg, 100), Some(0));
        assert_eq!(a.send(&cfg, 100), None);
        assert_eq!(a.deadline(&cfg), 110);
        assert_eq!(a.tick(&cfg, 109), AskTick::Wait);
        let mut now = 110;
        for next in [130, 170, 250] {
            assert_eq!(a.tick(&cfg, now), AskTick::Due);
            assert_eq!(a.send(&cfg, now), Some(0));
            now = a.deadline(&cfg);
            assert_eq!(now, next);
        }
        assert_eq!(a.tick(&cfg, now), AskTick::GiveUp);
        let mut b = Ask::new(0);
        b.send(&cfg, 0);
        b.challenged(77);
        assert_eq!(b.send(&cfg, 5), Some(77));
        assert_eq!(b.tick(&cfg, 1_000_000), AskTick::GiveUp);
    }
}
