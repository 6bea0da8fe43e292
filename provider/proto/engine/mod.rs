//! The per-endpoint engine: a thin façade over the VCs it holds.
//!
//! Every datagram after the handshake is either a standalone ACK, a CREDIT
//! or one *segment*: one sequence number carrying one frame (see
//! `wire/mod.rs`). The reliable stream of a VC carries eager messages (MSG +
//! MSG_CONT), RTS, and the rendezvous traffic (PDATA, GET, RDATA, FIN), so
//! loss recovery is the same for all of it.
//!
//! Where each concern lives:
//!
//! | file | what |
//! |---|---|
//! | `mod.rs` | `Engine`: the public entry points, the VC table, timers, failure |
//! | `vc.rs` | one VC: its parts, timers, transmit priority, receive dispatch |
//! | `handshake.rs` | CONN_REQ / CONN_RESP / CHALLENGE against the VC table (rules in `conn.rs`) |
//! | `../rel/` | reliability: send window (SACK, fast retransmit, RTO), receive window and ACK policy |
//! | `msg.rs` | messages: segment frames, eager segmentation and reassembly (or holding from the first segment), RTS, push, credits glue |
//! | `rndv.rs` | rendezvous: accept (of held eager messages too), pull (GETs), serving GETs, placement of data and the in-place guess |
//! | `source.rs` | transmit sources: segments encoded by reference, payload copied or left for gather I/O |
//! | `sched.rs` | scheduling: the ready queue and the burst loop |
//! | `express.rs` | a one-segment message sent before it is recorded, and one received without being queued |
//! | `later.rs` | what an arriving message leaves until it is handed out (its ACK, its credits) |
//! | `refused.rs` | the kernel's word that the peer's port is closed (ICMP port unreachable), checked against the VC's ids |
//!
//! Mode flags are arguments: whether a payload is copied or gathered
//! (`PayloadMode`) is passed down from `poll_transmit_burst` and
//! `send_now`, and whether rendezvous data is already in its sink
//! (`SegIn::Placed`) from `handle_datagram_placed`.

mod express;
mod handshake;
mod later;
mod msg;
mod refused;
mod rndv;
mod run;
mod sched;
mod source;
mod timers;
mod vc;

pub use msg::MAX_EAGER_LEN;
#[cfg(test)]
pub(crate) use msg::PUSH_BACKOFF;
pub use refused::Refusal;
pub use rndv::Placement;
pub use source::{Transmit, TxOut};

use super::conn::CookieKey;
use super::credit::{CreditBank, STALLED};
use super::entropy::Entropy;
use super::wire::{self, Frame, Packet};
use super::{EngineConfig, EngineError, EngineStats, Event, MsgHdr, MsgId, RndvId, SendMode, SendPayload};
use handshake::{live_vc, vc_for_send, QueuedChallenge};
use later::{Later, LaterAck};
use msg::{RxEager, TxMsg};
use rndv::RxRndv;
use sched::mark_ready;
use source::{PayloadMode, TxScratch};
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use timers::Timers;
use vc::{SegIn, Tick, Vc};

use crate::hash::KeyedState;

type Map<K, V> = HashMap<K, V, KeyedState>;

/// How long news of a quarter of a peer's loan coming free may wait for
/// something else going to the peer to follow (`Engine::release`).
pub(crate) const CREDIT_NEWS_NS: u64 = 200_000;

/// Engine state the VCs share; split from the VC map so a VC method can
/// borrow both.
struct Shared {
    cfg: EngineConfig,
    local: SocketAddr,
    stats: EngineStats,
    events: VecDeque<Event>,
    /// Announced and accepted rendezvous receives (rndv.rs).
    rx: Map<RndvId, RxRndv>,
    /// Long eager messages held from their first segment (msg.rs), by
    /// the rendezvous ids they are surfaced with.
    rx_eager: Map<RndvId, RxEager>,
    hasher: KeyedState,
    next_rid: RndvId,
    next_msg_id: MsgId,
    /// Connection ids and ISNs, drawn per VC (`entropy.rs`).
    entropy: Box<dyn Entropy>,
    cookie_key: CookieKey,
    forced_isn: Option<u32>,
    /// Receive budget for eager and unexpected messages (credit flow control).
    bank: Option<CreditBank>,
    /// Accepted rendezvous receives in the order their GETs went out, which
    /// is the order their data comes back in: what `rdata_placement` guesses from.
    pull_order: VecDeque<RndvId>,
    /// Quiet messages (`SendPayload::Copied`) not yet acknowledged.
    quiet_in_flight: usize,
    /// An RTS with pushed data was just delivered (`Engine::wants_match_now`).
    match_now: bool,
    /// VCs whose `unproven` is set (at most `cfg.max_unproven`).
    unproven: usize,
}

impl Shared {
    /// A message left the engine, acknowledged (eager) or finished (FIN).
    fn send_done(&mut self, id: MsgId, quiet: bool) {
        send_done(&mut self.events, &mut self.quiet_in_flight, id, quiet);
    }
}

/// `Shared::send_done` on the two fields it needs (for a caller that
/// holds other parts of `Shared` borrowed).
fn send_done(events: &mut VecDeque<Event>, quiet_in_flight: &mut usize, id: MsgId, quiet: bool) {
    if quiet {
        *quiet_in_flight -= 1;
    } else {
        events.push_back(Event::SendDone { id });
    }
}

pub struct Engine {
    sh: Shared,
    /// What a transmission call keeps between building a segment and
    /// handing it out (source.rs).
    scratch: TxScratch,
    vcs: Map<SocketAddr, Vc>,
    /// VCs that may have something to transmit, served round robin.
    ready: VecDeque<SocketAddr>,
    /// CONN_REQs to be answered with a stateless CHALLENGE: from new
    /// addresses, and with a new id from a live VC's (at most
    /// `CHALLENGE_QUEUE`; handshake.rs).
    challenges: VecDeque<QueuedChallenge>,
    /// VCs that timed out in `handle_timeout`: failed, or (true) unproven
    /// ones expired.
    failing: Vec<(SocketAddr, bool)>,
    /// Each VC's next deadline, in a heap (timers.rs): `poll_timeout`
    /// without a walk of every VC. Every `&mut self` entry point rearms
    /// the VCs it changed (or all, `changed`); the unit tests check every
    /// answer against a walk.
    timers: Timers,
    /// Bulk segments go in runs (run.rs); off only in the tests that
    /// compare runs with the general way, datagram for datagram.
    runs: bool,
    /// What an arriving message left for later (later.rs).
    later: Later,
}

impl Engine {
    /// An engine that draws its connection ids, ISNs and keys from
    /// `entropy` (the endpoint: `OsEntropy`; see entropy.rs).
    pub fn new(cfg: EngineConfig, local: SocketAddr, mut entropy: Box<dyn Entropy>) -> Engine {
        let hasher = KeyedState(entropy.next_u64() | 1);
        let cookie_key = CookieKey::new(&mut *entropy);
        let bank = cfg.credits.map(CreditBank::new);
        Engine {
            sh: Shared {
                cfg,
                local,
                stats: EngineStats::default(),
                events: VecDeque::new(),
                rx: Map::with_hasher(hasher),
                rx_eager: Map::with_hasher(hasher),
                hasher,
                next_rid: 1,
                next_msg_id: 1,
                entropy,
                cookie_key,
                forced_isn: None,
                bank,
                pull_order: VecDeque::new(),
                quiet_in_flight: 0,
                match_now: false,
                unproven: 0,
            },
            scratch: TxScratch::default(),
            vcs: Map::with_hasher(hasher),
            ready: VecDeque::new(),
            challenges: VecDeque::new(),
            failing: Vec::new(),
            timers: Timers::default(),
            runs: true,
            later: Later::default(),
        }
    }

    /// Frames bulk segments one at a time, the general way (run.rs): the
    /// tests' reference for the runs.
    #[cfg(test)]
    pub fn no_runs(&mut self) {
        self.runs = false;
    }

    /// An engine whose randomness replays from `seed` (the simulated
    /// network, the fuzzers).
    #[cfg(any(test, feature = "fuzz"))]
    pub fn seeded(cfg: EngineConfig, local: SocketAddr, seed: u64) -> Engine {
        Engine::new(cfg, local, Box::new(crate::rng::SplitMix(seed ^ 0x6E69_7867_5F70_726F)))
    }

    pub fn stats(&self) -> &EngineStats {
        &self.sh.stats
    }

    /// Every VC created from now on starts its sequence numbers at `isn`
    /// (tests use it to exercise wrap-around).
    #[doc(hidden)]
    #[cfg(test)]
    pub fn force_isn(&mut self, isn: Option<u32>) {
        self.sh.forced_isn = isn;
    }

    /// One line per VC and per rendezvous receive, for debugging.
    #[cfg(test)]
    pub fn debug_state(&self) -> String {
        let mut out = String::new();
        for v in self.vcs.values() {
            out += &format!(
                "vc {} {:?} una={} nxt={} unacked={} sacked={} lost_q={} inflight={} ctrl={} msgs={} rdata={} tx={} rcv_nxt={} ooo={} ack_pending={} rto={:?} rx_active={} ready={}\n",
                v.peer,
                v.hs,
                v.snd.una,
                v.snd.nxt,
                v.snd.unacked.len(),
                v.snd.unacked.iter().filter(|s| s.sacked).count(),
                v.snd.rtx.len(),
                v.snd.bytes_in_flight,
                v.ctrl.len(),
                v.msgs.len(),
                v.rdata.len(),
                v.tx.len(),
                v.rcv.nxt,
                v.rcv.ooo.len(),
                v.rcv.ack_pending,
                v.snd.rto_deadline,
                v.rx_active,
                v.in_ready
            );
        }
        for (rid, r) in &self.sh.rx {
            let acc = r.accepted.as_ref().map(rndv::Accepted::progress);
            out += &format!(
                "rx {rid} from {} key={} total={} accepted={:?}\n",
                r.peer, r.key, r.total, acc
            );
        }
        out
    }

    /// Quiet messages (`SendPayload::Copied`) still in flight: the caller
    /// hears nothing more of them, but they hold memory until acknowledged.
    pub fn quiet_in_flight(&self) -> usize {
        self.sh.quiet_in_flight
    }

    /// Number of VCs (connecting or established).
    pub fn peer_count(&self) -> usize {
        self.vcs.len()
    }

    /// CHALLENGEs to CONN_REQs with a new id on a live VC waiting for a
    /// transmission: at most `CHALLENGE_QUEUE` with the first contacts',
    /// whatever number of CONN_REQs asked for one.
    #[cfg(test)]
    pub fn challenges_pending(&self) -> usize {
        self.challenges.iter().filter(|c| c.live).count()
    }

    /// Established and proven (conn.rs): the peer has shown it receives
    /// what we send to it.
    #[cfg(test)]
    pub fn is_connected(&self, peer: SocketAddr) -> bool {
        self.vcs
            .get(&peer)
            .is_some_and(|v| v.established() && v.unproven.is_none())
    }

    /// VCs created by a CONN_REQ alone whose peer has not proven itself
    /// yet: at most `EngineConfig::max_unproven`, whatever peers send.
    #[cfg(any(test, feature = "fuzz"))]
    pub fn unproven_count(&self) -> usize {
        self.sh.unproven
    }

    /// Stateless CHALLENGEs to first contacts waiting for a transmission:
    /// at most `CHALLENGE_QUEUE` with the live VCs'.
    #[cfg(any(test, feature = "fuzz"))]
    pub fn first_contacts_pending(&self) -> usize {
        self.challenges.iter().filter(|c| !c.live).count()
    }

    /// Whether we hold a VC with `peer`, in whatever state.
    #[cfg(any(test, feature = "fuzz"))]
    pub fn has_vc(&self, peer: SocketAddr) -> bool {
        self.vcs.contains_key(&peer)
    }

    /// Slots of the VC table (what its memory is sized by).
    #[cfg(test)]
    pub fn vc_table_capacity(&self) -> usize {
        self.vcs.capacity()
    }

    pub fn send(
        &mut self,
        peer: SocketAddr,
        hdr: MsgHdr,
        src: impl Into<SendPayload>,
        mode: SendMode,
        now: u64,
    ) -> Result<MsgId, EngineError> {
        self.settle();
        self.submit(peer, hdr, src.into(), mode, now, None).map(|(id, _)| id)
    }

    /// `send`, then, when no other VC is waiting to transmit, one
    /// transmission from the message's VC straight into `buf`, payload
    /// copied (nothing deferred): a latency-bound application's message
    /// leaves without the round trip through the ready queue and the
    /// caller's flush loop. Returns the length of the datagram for `peer`
    /// written into `buf`, if any: usually the message itself, or what was
    /// due ahead of it (a retransmission, a CONN_REQ). What the VC still has
    /// queued is left for `poll_transmit`. Meant for small payloads (the
    /// copy) and rendezvous requests. (The endpoint makes the same two
    /// tries itself, with its syscall between `prepare` and `commit`:
    /// `UdpWire::send`.)
    #[cfg(test)]
    pub fn send_now(
        &mut self,
        peer: SocketAddr,
        hdr: MsgHdr,
        src: impl Into<SendPayload>,
        mode: SendMode,
        now: u64,
        buf: &mut [u8],
    ) -> Result<(MsgId, Option<usize>), EngineError> {
        use super::SendSource;
        let src = src.into();
        if mode == SendMode::Eager {
            // One segment with nothing ahead of it (express.rs).
            let awaited = !matches!(src, SendPayload::Copied(_));
            if let Some(x) = self.prepare(peer, &hdr, src.len(), awaited, |b| src.read_at(0, b), buf) {
                let n = x.datagram_len();
                return Ok((self.commit(x, hdr, src, now), Some(n)));
            }
        }
        self.submit(peer, hdr, src, mode, now, Some(buf))
    }

    /// `send_now` without its try of the express way (express.rs), for a
    /// caller whose own `prepare` of the message just refused it.
    pub fn send_now_general(
        &mut self,
        peer: SocketAddr,
        hdr: MsgHdr,
        src: SendPayload,
        mode: SendMode,
        now: u64,
        buf: &mut [u8],
    ) -> Result<(MsgId, Option<usize>), EngineError> {
        self.submit(peer, hdr, src, mode, now, Some(buf))
    }

    fn submit(
        &mut self,
        peer: SocketAddr,
        hdr: MsgHdr,
        src: SendPayload,
        mode: SendMode,
        now: u64,
        buf: Option<&mut [u8]>,
    ) -> Result<(MsgId, Option<usize>), EngineError> {
        if peer.ip().is_unspecified() || peer.port() == 0 {
            return Err(EngineError::InvalidAddress);
        }
        if self.sh.cfg.max_datagram < wire::MIN_DATAGRAM {
            return Err(EngineError::DatagramTooSmall);
        }
        let sh = &mut self.sh;
        let id = sh.next_msg_id;
        sh.next_msg_id += 1;
        let alone = self.ready.is_empty();
        let vc = vc_for_send(&mut self.vcs, sh, peer, now);
        let m = TxMsg::new(
            &sh.cfg,
            hdr,
            src,
            mode == SendMode::Eager,
            vc.seg_limit,
            &mut vc.push_backoff,
        );
        sh.quiet_in_flight += m.quiet as usize;
        vc.tx.insert(id, m);
        vc.msgs.push_back(id);
        let sent = match buf {
            // The only VC with anything to send: it goes now, its payload
            // copied (the caller sends the datagram as it is).
            Some(buf) if alone => {
                self.scratch.reset();
                vc.transmit_counted(sh, &mut self.scratch, PayloadMode::Copy, now, buf)
            }
            _ => None,
        };
        // As poll_transmit: after a transmission only a VC with more to
        // send is queued.
        if sent.is_none() || vc.may_transmit(now) {
            mark_ready(&mut self.ready, vc);
        }
        self.timers.rearm(vc, &sh.cfg);
        Ok((id, sent))
    }

    /// A run of datagrams from one sender, each `seg` bytes but the last
    /// (as a GRO read brings a peer's GSO run): `handle_datagram` for each,
    /// in order, with the VC looked up and its readiness checked once for
    /// the segments in a row that are for it (bulk data over a 1500-byte
    /// MTU is 45 segments per 64 KiB, and the lookup was a tenth of what
    /// the engine spends on one). Stops after a datagram that makes
    /// `wants_match_now` true; returns the bytes it handled (a multiple of
    /// `seg`, or all of them).
    pub fn handle_run(&mut self, from: SocketAddr, bytes: &[u8], seg: usize, now: u64) -> usize {
        self.settle();
        if bytes.is_empty() {
            // An empty datagram: counted and dropped as malformed.
            self.handle_datagram(from, bytes, now);
            return 0;
        }
        let seg = seg.max(1);
        // Stops for a datagram of this run only: a caller that let an
        // earlier one's flag stand gets it still set afterwards.
        let earlier = std::mem::take(&mut self.sh.match_now);
        let mut at = 0;
        while at < bytes.len() && !self.sh.match_now {
            at = self.segments_in_a_row(from, bytes, seg, at, now);
            if at < bytes.len() && !self.sh.match_now {
                // Not a segment for a live VC: the general way, which
                // counts what it drops.
                self.handle_datagram(from, &bytes[at..(at + seg).min(bytes.len())], now);
                at = (at + seg).min(bytes.len());
            }
        }
        self.sh.match_now |= earlier;
        at
    }

    /// `handle_run`'s fast way: the segments from `at` on that carry the
    /// connection id of `from`'s established VC, as `handle_datagram`
    /// would handle them. Returns where it stopped: at the end, after a
    /// datagram that wants its events matched now, or at a datagram that
    /// is something else.
    fn segments_in_a_row(&mut self, from: SocketAddr, bytes: &[u8], seg: usize, mut at: usize, now: u64) -> usize {
        let Some(vc) = self.vcs.get_mut(&from).filter(|vc| vc.established()) else {
            return at;
        };
        let sh = &mut self.sh;
        let later = &mut self.later;
        let start = at;
        while at < bytes.len() && !sh.match_now {
            let d = &bytes[at..(at + seg).min(bytes.len())];
            let Ok(Packet::Seg {
                conn,
                ack,
                sack,
                seq,
                frame,
            }) = Packet::parse(d)
            else {
                break;
            };
            if conn != vc.local_nonce {
                break;
            }
            at += d.len();
            // Only the run's last datagram may hold its ACK (`handle_run`
            // settled what waited before).
            let msg_last = at == bytes.len() && matches!(frame, Frame::Msg { .. });
            vc.seg_heard(sh, later, LaterAck::of(from, conn, ack, sack, now), d.len(), msg_last);
            vc.on_seg(sh, seq, SegIn::of_datagram(d, frame), now);
        }
        if at > start {
            self.timers.rearm(vc, &sh.cfg);
            if vc.may_transmit(now) {
                mark_ready(&mut self.ready, vc);
            }
        }
        at
    }

    pub fn handle_datagram(&mut self, from: SocketAddr, bytes: &[u8], now: u64) {
        self.settle();
        self.handle_parsed(from, bytes, Packet::parse(bytes), now);
    }

    /// `handle_datagram` of `bytes`, which parsed as `parsed` (the
    /// caller settled).
    fn handle_parsed(
        &mut self,
        from: SocketAddr,
        bytes: &[u8],
        parsed: Result<Packet<'_>, wire::DecodeError>,
        now: u64,
    ) {
        self.sh.stats.datagrams_in += 1;
        self.sh.stats.bytes_in += bytes.len() as u64;
        let pkt = match parsed {
            Ok(p) => p,
            Err(_) => {
                self.sh.stats.dropped_malformed += 1;
                return;
            }
        };
        if !matches!(pkt, Packet::Ack { .. } | Packet::Seg { .. }) {
            // A handshake may make or replace a VC, a CREDIT tick the
            // bank for all: every VC's deadline is worked out again.
            self.changed();
        }
        match pkt {
            Packet::ConnReq {
                nonce,
                cookie,
                isn,
                window,
            } => self.on_conn_req(from, nonce, cookie, isn, window, now),
            Packet::ConnResp {
                nonce,
                echo,
                isn,
                window,
            } => self.on_conn_resp(from, nonce, echo, isn, window, now),
            Packet::Challenge { echo, cookie } => self.on_challenge(from, echo, cookie),
            Packet::Ack { conn, ack, sack } => {
                let sh = &mut self.sh;
                let Some(vc) = live_vc(&mut self.vcs, sh, from, conn, now) else {
                    return;
                };
                vc.on_ack(sh, ack, sack, now);
                self.timers.rearm(vc, &sh.cfg);
                if vc.may_transmit(now) {
                    mark_ready(&mut self.ready, vc);
                }
            }
            Packet::Credit {
                conn,
                granted,
                returned,
                byte,
            } => {
                let sh = &mut self.sh;
                let Some(vc) = live_vc(&mut self.vcs, sh, from, conn, now) else {
                    return;
                };
                let was = vc.borrower.available();
                vc.borrower.on_header(granted, byte);
                if let Some(bank) = &mut sh.bank {
                    bank.on_header(&mut vc.lender, returned, byte);
                    // A stalled peer gets an answer even when the bank had
                    // nothing for it (its request is not retransmitted,
                    // so it asks again; meanwhile quiet peers are asked).
                    if byte & STALLED != 0 || vc.lender.wants_news() {
                        vc.credit_due = true;
                        tick_bank(bank, &mut self.vcs, &mut self.ready, now);
                    }
                }
                let Some(vc) = self.vcs.get_mut(&from) else { return };
                if vc.credit_due || vc.borrower.available() > was {
                    mark_ready(&mut self.ready, vc);
                }
            }
            Packet::Seg {
                conn,
                ack,
                sack,
                seq,
                frame,
            } => self.on_seg_packet(from, (conn, ack, sack, seq), SegIn::of_datagram(bytes, frame), now),
        }
    }

    fn on_seg_packet(
        &mut self,
        from: SocketAddr,
        (conn, ack, sack, seq): (u64, u32, u64, u32),
        seg: SegIn<'_>,
        now: u64,
    ) {
        let sh = &mut self.sh;
        let Some(vc) = live_vc(&mut self.vcs, sh, from, conn, now) else {
            return;
        };
        vc.on_ack(sh, ack, sack, now);
        vc.on_seg(sh, seq, seg, now);
        self.timers.rearm(vc, &sh.cfg);
        // Not for a delayed ACK alone: its timer marks the VC when it is due,
        // and a reply sent before then carries it anyway.
        if vc.may_transmit(now) {
            mark_ready(&mut self.ready, vc);
        }
    }

    /// Longest message `send` sends eagerly (`SendMode::Eager`).
    pub fn eager_max(&self) -> usize {
        msg::eager_max(&self.sh.cfg)
    }

    /// Whether an eager message of `len` bytes to `peer` takes more than
    /// one segment on its VC (a peer without one yet: no). No VC's
    /// segments are shorter than `max_datagram`, so a message that fits
    /// one of those (every small send) needs no lookup.
    pub fn spans_segments(&self, peer: SocketAddr, len: usize) -> bool {
        len > rndv::msg_room(self.sh.cfg.max_datagram)
            && self.vcs.get(&peer).is_some_and(|vc| len > rndv::msg_room(vc.seg_limit))
    }

    /// The caller sent `peer` a message it awaits an answer to (a
    /// one-sided request, answered by a response). Until `answer_came`
    /// the VC watches the peer as while a rendezvous is pulled from it:
    /// a peer that acknowledged the request and died before it answered
    /// (its socket closed, so nothing of ours goes unacknowledged and no
    /// refusal comes) would otherwise never be found dead, and what
    /// waits for its answer would wait for ever. No VC: nothing to watch
    /// (the send failed).
    pub fn answer_due(&mut self, peer: SocketAddr) {
        if let Some(vc) = self.vcs.get_mut(&peer) {
            vc.answers_due += 1;
            self.timers.rearm(vc, &self.sh.cfg);
        }
    }

    /// Answers awaited from `peer` (`answer_due`).
    #[cfg(test)]
    pub fn answers_due(&self, peer: SocketAddr) -> u32 {
        self.vcs.get(&peer).map_or(0, |vc| vc.answers_due)
    }

    /// An answer `answer_due` awaited came from `peer`.
    pub fn answer_came(&mut self, peer: SocketAddr) {
        if let Some(vc) = self.vcs.get_mut(&peer) {
            vc.answers_due = vc.answers_due.saturating_sub(1);
            self.timers.rearm(vc, &self.sh.cfg);
        }
    }

    /// Whether an RTS with pushed data was delivered since the last call.
    /// Its `Event::Msg` should then be matched (accepted, or left
    /// unexpected) before the next datagram is handled: its pushed data
    /// follows, and is taken only by a receive accepted before it comes
    /// (otherwise it is dropped and pulled again, so correctness never
    /// depends on the caller's timing, only speed).
    pub fn wants_match_now(&mut self) -> bool {
        std::mem::take(&mut self.sh.match_now)
    }

    pub fn poll_event(&mut self) -> Option<Event> {
        self.sh.events.pop_front()
    }

    /// Events wait for `poll_event`.
    pub fn has_events(&self) -> bool {
        !self.sh.events.is_empty()
    }

    /// The earliest deadline of any VC (timers.rs: no walk of the VCs).
    pub fn poll_timeout(&self) -> Option<u64> {
        let t = self.timers.next(&self.vcs, &self.sh.cfg);
        #[cfg(test)]
        assert_eq!(
            t,
            self.earliest_deadline(),
            "a change left a VC's deadline out of the timer heap"
        );
        // Work left for later (later.rs) is due at once.
        if !self.later.is_empty() {
            return Some(0);
        }
        t
    }

    #[cfg(test)]
    fn earliest_deadline(&self) -> Option<u64> {
        self.vcs.values().filter_map(|v| v.next_deadline(&self.sh.cfg)).min()
    }

    /// Something may have moved any VC's deadline: `poll_timeout` works
    /// them all out afresh (for the changes that may touch many VCs; one
    /// VC's change rearms it alone, `Timers::rearm`).
    fn changed(&mut self) {
        self.timers.rearm_all();
    }

    /// Credits of messages the application has not taken yet, and the
    /// whole budget (credit flow control on).
    #[cfg(test)]
    pub fn credit_usage(&self) -> Option<(u32, u32)> {
        let bank = self.sh.bank.as_ref()?;
        Some((self.vcs.values().map(|v| v.lender.held()).sum(), bank.cfg.total))
    }

    /// The timers due at `now`, of the VCs whose deadline has come
    /// (timers.rs): the others have nothing due.
    pub fn handle_timeout(&mut self, now: u64) {
        self.settle();
        let mut failing = std::mem::take(&mut self.failing);
        if let Some(bank) = &mut self.sh.bank {
            if tick_bank(bank, &mut self.vcs, &mut self.ready, now) {
                self.timers.rearm_all();
            }
        }
        let rto = self.sh.cfg.rto_min_ns;
        for addr in self.timers.take_due(&self.vcs, &self.sh.cfg, now) {
            let Some(vc) = self.vcs.get_mut(&addr) else { continue };
            // A stalled request is repeated: CREDIT datagrams can be lost.
            if vc.borrower.stalled() && now >= vc.credit_retry_at && vc.established() {
                vc.credit_due = true;
                vc.credit_retry_at = now + rto.max(1_000_000);
                mark_ready(&mut self.ready, vc);
            }
            match vc.on_timeout(&mut self.sh, now) {
                Tick::Idle => {}
                Tick::Ready => mark_ready(&mut self.ready, vc),
                Tick::Fail => failing.push((vc.peer, false)),
                Tick::Expire => failing.push((vc.peer, true)),
            }
            self.timers.rearm(vc, &self.sh.cfg);
        }
        for (addr, expired) in failing.drain(..) {
            // An expired VC never announced anything, and holds nothing.
            self.sh.stats.unproven_expired += expired as u64;
            self.fail_vc(addr, EngineError::PeerUnreachable, !expired);
        }
        self.failing = failing;
    }

    #[cfg(test)]
    pub fn has_pending_work(&self) -> bool {
        !self.ready.is_empty()
            || !self.sh.events.is_empty()
            || !self.later.is_empty()
            || self.vcs.values().any(Vc::has_pending_work)
    }

    /// Before closing: acknowledge everything received at once, so no peer
    /// waits for a delayed ACK that would never leave.
    pub fn flush_acks(&mut self) {
        self.settle();
        self.changed();
        let Engine { vcs, ready, .. } = self;
        for vc in vcs.values_mut() {
            if vc.rcv.ack_pending {
                vc.rcv.ack_now = true;
                mark_ready(ready, vc);
            }
        }
    }

    /// Whether some VC still has sent data its peer has not acknowledged
    /// (what a closing endpoint lingers for).
    pub fn has_unacked(&self) -> bool {
        // (An ACK left for later may acknowledge all of it: not yet.)
        self.later.has_ack()
            || self
                .vcs
                .values()
                .any(|vc| vc.established() && !vc.snd.unacked.is_empty())
    }

    /// Drops the VC; its operations fail with `PeerForgotten` (no
    /// `PeerFailed`: the caller asked for it).
    #[cfg(test)]
    pub fn forget_peer(&mut self, peer: SocketAddr) {
        self.settle();
        self.fail_vc(peer, EngineError::PeerForgotten, false);
    }

    fn fail_vc(&mut self, peer: SocketAddr, err: EngineError, announce: bool) {
        self.changed();
        let Some(mut vc) = self.vcs.remove(&peer) else {
            return;
        };
        if vc.in_ready {
            self.ready.retain(|a| *a != peer);
        }
        let sh = &mut self.sh;
        if vc.unproven.is_some() {
            sh.unproven -= 1;
        }
        if let Some(bank) = &mut sh.bank {
            bank.close(&mut vc.lender);
        }
        let mut ids = Vec::new();
        for (&id, m) in &vc.tx {
            if m.quiet {
                sh.quiet_in_flight -= 1;
            } else {
                ids.push(id);
            }
        }
        ids.sort_unstable();
        for id in ids {
            sh.events.push_back(Event::SendFailed { id, err });
        }
        self.fail_receives(peer, err);
        let sh = &mut self.sh;
        if announce {
            sh.stats.peers_failed += 1;
            sh.events.push_back(Event::PeerFailed { peer });
        }
    }
}

/// The bank's epoch bookkeeping; the peers it asks to give credits back
/// are told.
/// Whether an epoch passed (VCs may have changed).
fn tick_bank(bank: &mut CreditBank, vcs: &mut Map<SocketAddr, Vc>, ready: &mut VecDeque<SocketAddr>, now: u64) -> bool {
    if !bank.tick(now, vcs.values_mut().map(|v| &mut v.lender)) {
        return false;
    }
    for v in vcs.values_mut() {
        if v.lender.asked_to_give_back() {
            v.credit_due = true;
            mark_ready(ready, v);
        }
    }
    true
}
