//! The engine's side of the VC handshake (the rules are in conn.rs): what
//! CONN_REQ, CONN_RESP and CHALLENGE do to the VC table, proving and
//! re-keying VCs, and the stateless challenges (to first contacts, and to
//! CONN_REQs with a new id on a live VC).

use super::sched::mark_ready;
use super::source::{Transmit, TxOut};
use super::vc::Vc;
use super::{Engine, Map, Shared};
use crate::proto::conn::{classify_req, Ask, Handshake, ReqVerdict, Unproven};
use crate::proto::wire::Packet;
use crate::proto::{EngineError, Event};
use std::net::SocketAddr;

/// Stateless CHALLENGEs (conn.rs) waiting for the next transmission: a
/// flood beyond this between two transmissions is not answered (first
/// contacts: counted), and its requesters, real ones included, retry.
/// Larger than the endpoint receives between two transmissions.
pub(super) const CHALLENGE_QUEUE: usize = 256;

/// A CHALLENGE to send (`Engine::challenges`): to `to`, echoing the nonce
/// of its CONN_REQ. `live`: a CONN_REQ with a new id from the address of
/// a VC we hold, whose cookie binds that VC's id (worked out when it is
/// sent; none if the VC is gone by then); otherwise a first contact's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct QueuedChallenge {
    pub(super) to: SocketAddr,
    pub(super) echo: u64,
    pub(super) live: bool,
}

impl Vc {
    /// A datagram from the peer passed `live_vc`'s checks (or
    /// `Engine::handle_run`'s, which are the same): the peer is alive,
    /// and proven.
    pub(super) fn heard(&mut self, sh: &mut Shared, now: u64) {
        self.last_heard = now;
        self.prove(sh);
    }

    /// The peer echoed our connection id (or a cookie): it is real, not a
    /// CONN_REQ with a forged source address (which costs nothing to
    /// send). PeerUp goes out once per incarnation of the VC (`establish`
    /// resets it).
    pub(super) fn prove(&mut self, sh: &mut Shared) {
        if self.unproven.is_some() {
            self.unproven = None;
            sh.unproven -= 1;
        }
        if !self.up_announced {
            self.up_announced = true;
            sh.events.push_back(Event::PeerUp { peer: self.peer });
        }
    }

    /// The peer at an unproven VC's address answered with another nonce
    /// than the CONN_REQ that created the VC (conn.rs): the VC is re-keyed
    /// to it, proven, and every segment sent so far goes again under the
    /// new id (the peer dropped them: they named an id it never had).
    pub(super) fn rekey(&mut self, sh: &mut Shared, nonce: u64, isn: u32, window: u32, now: u64) {
        // Nothing can have been received or acknowledged: a datagram with
        // our id would have proven the VC.
        debug_assert!(self.unproven.is_some() && self.rcv.ooo.is_empty() && self.reasm.is_none());
        self.establish(&sh.cfg, nonce, isn, window, now);
        // Its CONN_REQ may have been challenged before: it gets its
        // answer now (a peer that needs none ignores it).
        self.resp_pending = true;
        // The first transmission under the new id counts as the first.
        self.snd.resend_all(&sh.cfg, now);
        // Our credit header went to the wrong id too.
        self.credit_due |= sh.bank.is_some();
        sh.stats.unproven_rekeyed += 1;
        self.prove(sh);
    }

    /// Our CONN_REQ (with the peer's cookie, if it challenged us).
    pub(super) fn conn_req(&self, sh: &mut Shared, cookie: u64, buf: &mut [u8]) -> usize {
        sh.stats.conn_reqs_sent += 1;
        Packet::ConnReq {
            nonce: self.local_nonce,
            cookie,
            isn: self.snd_isn,
            window: self.rcv.window,
        }
        .emit(buf)
    }
}

/// The VC a post-handshake datagram (ACK, CREDIT, segment) belongs to:
/// from a peer we have a VC with, carrying our connection id for it, after
/// the handshake. Anything else is counted and dropped.
pub(super) fn live_vc<'a>(
    vcs: &'a mut Map<SocketAddr, Vc>,
    sh: &mut Shared,
    from: SocketAddr,
    conn: u64,
    now: u64,
) -> Option<&'a mut Vc> {
    let Some(vc) = vcs.get_mut(&from) else {
        sh.stats.dropped_unknown_peer += 1;
        return None;
    };
    if conn != vc.local_nonce {
        sh.stats.dropped_stale += 1;
        return None;
    }
    if !vc.established() {
        sh.stats.dropped_early += 1;
        return None;
    }
    vc.heard(sh, now);
    Some(vc)
}

/// The VC to `peer`, created (connecting) if there is none. An unproven
/// one asks its peer to prove itself (conn.rs).
pub(super) fn vc_for_send<'a>(
    vcs: &'a mut Map<SocketAddr, Vc>,
    sh: &mut Shared,
    peer: SocketAddr,
    now: u64,
) -> &'a mut Vc {
    let vc = vcs.entry(peer).or_insert_with(|| {
        let mut vc = Vc::new(sh, peer, now);
        if peer == sh.local {
            // Talking to ourselves: one VC is both ends, no handshake.
            let (nonce, isn) = (vc.local_nonce, vc.snd_isn);
            vc.establish(&sh.cfg, nonce, isn, vc.rcv.window, now);
        }
        vc
    });
    if let Some(u @ Unproven { ask: None, .. }) = &mut vc.unproven {
        u.ask = Some(Ask::new(now));
    }
    vc
}

impl Engine {
    /// A CONN_REQ (see conn.rs for what it may and may not change).
    pub(super) fn on_conn_req(&mut self, from: SocketAddr, nonce: u64, cookie: u64, isn: u32, window: u32, now: u64) {
        let sh = &mut self.sh;
        if from == sh.local {
            // Our own VC to ourselves never handshakes: this is forged or looped.
            sh.stats.dropped_stale += 1;
            return;
        }
        let existing = self.vcs.get_mut(&from);
        let verdict = classify_req(existing.as_ref().map(|v| v.peer_nonce), nonce);
        match (verdict, existing) {
            (ReqVerdict::Fresh, _) => self.on_first_contact(from, nonce, cookie, isn, window, now),
            (ReqVerdict::Simultaneous, Some(vc)) => {
                if let Handshake::Connecting { answer, .. } = &mut vc.hs {
                    *answer = Some(nonce);
                }
                mark_ready(&mut self.ready, vc);
            }
            (ReqVerdict::Duplicate, Some(vc)) => {
                // Not "heard from": anyone can replay a CONN_REQ.
                sh.stats.conn_reqs_duplicate += 1;
                vc.resp_pending = true;
                mark_ready(&mut self.ready, vc);
            }
            (ReqVerdict::Restarted, Some(vc)) => {
                // The requester received our CHALLENGE at the peer's address.
                let live_cookie = cookie != 0 && cookie == sh.cookie_key.cookie(from, nonce, vc.local_nonce);
                if vc.unproven.is_some() && (live_cookie || sh.cookie_key.first_contact_ok(from, nonce, cookie, now)) {
                    // Nothing was exchanged under the nonce that created the
                    // VC: it takes the real peer's, and keeps what we queued.
                    vc.rekey(sh, nonce, isn, window, now);
                    vc.resp_pending = true;
                    mark_ready(&mut self.ready, vc);
                    return;
                }
                if live_cookie {
                    // The peer restarted.
                    sh.stats.peers_restarted += 1;
                    self.fail_vc(from, EngineError::PeerRestarted, true);
                    self.accept_vc(from, nonce, isn, window, now, true);
                    return;
                }
                if cookie != 0 {
                    sh.stats.conn_reqs_forged += 1;
                }
                sh.stats.conn_reqs_challenged += 1;
                // Every such request is challenged, not the latest per VC:
                // a forger who follows each of the peer's requests with
                // one of its own would otherwise have its nonce challenged
                // instead of the peer's, every time (conn.rs).
                let c = QueuedChallenge {
                    to: from,
                    echo: nonce,
                    live: true,
                };
                if self.challenges.len() < CHALLENGE_QUEUE && !self.challenges.contains(&c) {
                    self.challenges.push_back(c);
                }
            }
            (_, None) => unreachable!("only a Fresh verdict has no VC"),
        }
    }

    /// A CONN_REQ from an address we have no VC with: a VC, unproven while
    /// fewer than `max_unproven` are (or proven, if it echoes a
    /// first-contact cookie of ours); otherwise a stateless CHALLENGE.
    fn on_first_contact(&mut self, from: SocketAddr, nonce: u64, cookie: u64, isn: u32, window: u32, now: u64) {
        let sh = &mut self.sh;
        let proven = sh.cookie_key.first_contact_ok(from, nonce, cookie, now);
        if proven || sh.unproven < sh.cfg.max_unproven {
            self.accept_vc(from, nonce, isn, window, now, proven);
            return;
        }
        sh.stats.first_contacts_challenged += 1;
        if self.challenges.len() < CHALLENGE_QUEUE {
            self.challenges.push_back(QueuedChallenge {
                to: from,
                echo: nonce,
                live: false,
            });
        } else {
            sh.stats.first_contacts_dropped += 1;
        }
    }

    /// A new VC for the requester of a CONN_REQ, established with its
    /// nonce and ISN, answered with a CONN_RESP; `proven` when the request
    /// echoed a cookie of ours.
    fn accept_vc(&mut self, from: SocketAddr, nonce: u64, isn: u32, window: u32, now: u64, proven: bool) {
        let sh = &mut self.sh;
        let mut vc = Vc::new(sh, from, now);
        vc.establish(&sh.cfg, nonce, isn, window, now);
        vc.resp_pending = true;
        if proven {
            vc.prove(sh);
        } else {
            vc.unproven = Some(Unproven { since: now, ask: None });
            sh.unproven += 1;
        }
        mark_ready(&mut self.ready, self.vcs.entry(from).or_insert(vc));
    }

    /// A CONN_RESP: the answer to our CONN_REQ (or a crossing one's).
    pub(super) fn on_conn_resp(&mut self, from: SocketAddr, nonce: u64, echo: u64, isn: u32, window: u32, now: u64) {
        let sh = &mut self.sh;
        let Some(vc) = self.vcs.get_mut(&from) else {
            sh.stats.dropped_unknown_peer += 1;
            return;
        };
        if echo != vc.local_nonce {
            sh.stats.dropped_stale += 1;
            return;
        }
        // It echoed our connection id, which only the peer at this
        // address can have seen.
        match vc.hs {
            Handshake::Connecting { answer, .. } => {
                vc.establish(&sh.cfg, nonce, isn, window, now);
                // A crossing CONN_REQ of this peer not answered yet
                // is answered as a duplicate now.
                vc.resp_pending = answer == Some(nonce);
                mark_ready(&mut self.ready, vc);
                vc.prove(sh);
            }
            Handshake::Established if vc.peer_nonce == Some(nonce) => vc.prove(sh),
            Handshake::Established if vc.unproven.is_some() => {
                // The CONN_REQ that created the VC was not this peer's.
                vc.rekey(sh, nonce, isn, window, now);
                mark_ready(&mut self.ready, vc);
            }
            Handshake::Established => sh.stats.dropped_stale += 1,
        }
    }

    /// A CHALLENGE to a CONN_REQ of ours: the next one carries its cookie.
    pub(super) fn on_challenge(&mut self, from: SocketAddr, echo: u64, cookie: u64) {
        let sh = &mut self.sh;
        let Some(vc) = self.vcs.get_mut(&from) else {
            sh.stats.dropped_unknown_peer += 1;
            return;
        };
        // Only a VC connecting with the challenged nonce asked for
        // it; anything else is stale, misdirected or forged.
        let ask = match (&mut vc.hs, &mut vc.unproven) {
            (Handshake::Connecting { ask, .. }, _) | (_, Some(Unproven { ask: Some(ask), .. })) => ask,
            _ => {
                sh.stats.dropped_stale += 1;
                return;
            }
        };
        if echo != vc.local_nonce {
            sh.stats.dropped_stale += 1;
            return;
        }
        sh.stats.challenges_answered += 1;
        ask.challenged(cookie);
        mark_ready(&mut self.ready, vc);
    }

    /// The stateless CHALLENGEs, before any VC's datagrams (they hold no
    /// VC to come round again). False if `out` said stop.
    pub(super) fn send_challenges(&mut self, now: u64, out: &mut dyn TxOut) -> bool {
        while let Some(&QueuedChallenge { to, echo, live }) = self.challenges.front() {
            let cookie = if live {
                match self.vcs.get(&to) {
                    Some(vc) if vc.established() => self.sh.cookie_key.cookie(to, echo, vc.local_nonce),
                    // The VC ended meanwhile: the request finds none when
                    // it comes again, and is a first contact then.
                    _ => {
                        self.challenges.pop_front();
                        continue;
                    }
                }
            } else {
                self.sh.cookie_key.first_contact(to, echo, now)
            };
            let Some(buf) = out.slot() else { return false };
            let len = Packet::Challenge { echo, cookie }.emit(buf);
            self.challenges.pop_front();
            let st = &mut self.sh.stats;
            st.challenges_sent += 1;
            st.datagrams_out += 1;
            st.bytes_out += len as u64;
            let t = Transmit {
                to,
                len,
                hdr_len: len,
                payload: None,
            };
            if !out.commit(t) {
                return false;
            }
        }
        true
    }
}
