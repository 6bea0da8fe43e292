//! The per-endpoint engine: VCs, reliability windows and the message layer.
//!
//! Every datagram after the handshake is either a standalone ACK or one
//! *segment*: one sequence number carrying one frame (see `wire.rs`). The
//! reliable stream of a VC carries eager messages (MSG + MSG_CONT), RTS,
//! and the rendezvous traffic (PDATA, GET, RDATA, FIN), so loss recovery is
//! the same for all of it.
//!
//! A rendezvous send pushes its first bytes (PDATA) right behind its RTS.
//! Whether the receiver can take them is decided once, when the RTS is
//! delivered: if the application has a receive posted for it, the
//! endpoint accepts it before the next datagram is handled
//! (`Engine::wants_match_now`), the pushed bytes land in the receive
//! buffer and the receiver GETs only the rest; otherwise every pushed
//! segment is dropped (but acknowledged, so the window moves on) and the
//! receive, once posted, pulls the whole message. So pushed data never
//! waits in receiver memory, and costs no credits.
//!
//! Sender queues per VC, in transmit priority order: retransmissions, then
//! control frames (GET/FIN/keepalive), then messages in send order, then
//! rendezvous data. Messages go before bulk data so a small send is not
//! stuck behind a large pull.

use super::conn::{classify_req, Ask, AskTick, CookieKey, Handshake, ReqVerdict, Unproven};
use super::credit::{Admit, Borrower, CreditBank, Lender, STALLED};
use super::entropy::Entropy;
use super::rel::{seq_delta, Rtt, SEQ_BASE};
use super::wire::{self, Frame, FrameHead, Packet};
use super::{
    EngineConfig, EngineError, EngineStats, Event, MsgBody, MsgHdr, MsgId, Payload, RecvSink, RndvId, SendMode,
    SendPayload, SendSource,
};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;

/// Reassembly of an eager message never reserves more than this up front,
/// whatever total length the first segment claims.
const REASM_RESERVE_MAX: u64 = 1 << 20;
/// Largest eager message we agree to reassemble.
pub const MAX_EAGER_LEN: u64 = 1 << 30;
/// Acknowledge at once after this many in-order segments, so a sender with
/// a small window does not stall for the ACK delay.
const ACK_EVERY_SEGS: u32 = 16;
/// Serial arithmetic on 32-bit sequence numbers needs windows well below 2^31.
const MAX_WINDOW: u32 = 1 << 30;
/// Sacked segments sent after a hole that make it count as lost.
const DUP_THRESH: usize = 3;
/// Segments one RTO expiry resends. A timeout says little about which
/// segments are lost (a long queue looks the same as a dead link), so resend
/// the oldest few, enough to repair a lost tail, and let the SACKs that
/// come back point at the other holes. Resending the whole window instead
/// floods exactly the queue that made the timer fire.
const RTO_BURST: usize = 8;
/// ... and at most about this many bytes (but at least one segment): with
/// loopback-sized 64 KiB segments eight would be half a megabyte resent
/// every time a descheduled peer lets the timer fire for nothing.
const RTO_BURST_BYTES: usize = 128 << 10;

/// Longest tail an RTS carries (`rts_tail`). Up to this size the receiver
/// would not have received the tail's RDATA segment in place anyway
/// (PLACEMENT_MIN_SEG), so holding it with the RTS costs no extra copy
/// worth counting, and an unexpected RTS never holds more than this.
const RTS_TAIL_MAX: usize = 16 << 10;

/// Rendezvous sends to a peer that dropped pushed data (its receive was not
/// posted yet) that go without a push, before pushing is tried again.
pub(crate) const PUSH_BACKOFF: u32 = 8;

/// Segments smaller than this are not received in place: the copy saved
/// is small, and receiving one datagram per call would forgo recvmmsg
/// batches and GRO (which coalesces small-MTU bulk into 64 KiB receives).
const PLACEMENT_MIN_SEG: usize = 16 << 10;

use crate::hash::KeyedState;

type Map<K, V> = HashMap<K, V, KeyedState>;

/// Engine state the VCs share; split from the VC map so a VC method can
/// borrow both.
struct Shared {
    cfg: EngineConfig,
    zc: Zc,
    local: SocketAddr,
    stats: EngineStats,
    events: VecDeque<Event>,
    rx: Map<RndvId, RxRndv>,
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
    /// While `handle_datagram_placed` runs: (rid, offset, len) of RDATA
    /// whose payload the wire already put into the sink.
    in_place: Option<(RndvId, u64, usize)>,
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
        if quiet {
            self.quiet_in_flight -= 1;
        } else {
            self.events.push_back(Event::SendDone { id });
        }
    }
}

/// Where the payload of the next datagram goes if it is the RDATA (or
/// PDATA) segment the engine expects next (`Engine::rdata_placement`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    pub rid: RndvId,
    /// The guess is pushed data, named by the sender's key.
    pub pushed: bool,
    pub key: MsgId,
    pub offset: u64,
    /// Length of the region handed out.
    pub len: usize,
}

impl Placement {
    /// Bytes of header the wire receives apart from the payload.
    pub const HEAD_LEN: usize = wire::RDATA_HEAD_LEN;

    /// Whether a datagram whose first `HEAD_LEN` bytes are `head`, followed
    /// by `len` bytes received into the region, is the guessed segment.
    pub fn matches(&self, head: &[u8], len: usize) -> Option<wire::RDataHead> {
        let h = wire::decode_rdata_head(head)?;
        let id = if self.pushed { self.key } else { self.rid };
        (h.pushed == self.pushed && h.id == id && h.offset == self.offset && len > 0 && len <= self.len).then_some(h)
    }
}

/// `poll_transmit_burst`: segments leave their payload in the source
/// and say where it is instead of copying it behind the header.
#[derive(Default)]
struct Zc {
    on: bool,
    deferred: Option<Deferred>,
    /// The rendezvous source of the segment being built, set afresh in
    /// every poll (never trusted across polls: after its FIN a source must
    /// not be read again), so bulk data is not looked up twice per segment.
    src: Option<(MsgId, Arc<dyn SendSource>)>,
}

#[derive(Clone, Copy)]
struct Deferred {
    id: MsgId,
    off: usize,
    hdr_len: usize,
}

/// One datagram from `poll_transmit_burst`: `buf[..hdr_len]`, then (if
/// `payload` is set) `len - hdr_len` bytes of the source from the offset.
pub struct Transmit<'a> {
    pub to: SocketAddr,
    pub len: usize,
    pub hdr_len: usize,
    pub payload: Option<(&'a dyn SendSource, usize)>,
}

impl Transmit<'_> {
    /// Copies the payload, if any, behind the header already in `buf`:
    /// the whole datagram in `buf[..len]`.
    pub fn gather_into(&self, buf: &mut [u8]) {
        if let Some((src, off)) = self.payload {
            src.read_at(off, &mut buf[self.hdr_len..self.len]);
        }
    }
}

/// `Engine::poll_transmit`'s output: one datagram, copied whole into `buf`.
struct OneOut<'b> {
    buf: &'b mut [u8],
    sent: Option<(SocketAddr, usize)>,
}

impl TxOut for OneOut<'_> {
    fn slot(&mut self) -> Option<&mut [u8]> {
        match self.sent {
            None => Some(&mut *self.buf),
            Some(_) => None,
        }
    }

    fn commit(&mut self, t: Transmit<'_>) -> bool {
        t.gather_into(self.buf);
        self.sent = Some((t.to, t.len));
        false
    }
}

/// Where `Engine::poll_transmit_burst` puts the datagrams it builds.
pub trait TxOut {
    /// Where the next datagram is built (room for the largest segment of
    /// any VC), or None to stop.
    fn slot(&mut self) -> Option<&mut [u8]>;
    /// Takes the datagram just built in the slot; false to stop.
    fn commit(&mut self, t: Transmit<'_>) -> bool;
}

/// Datagrams one VC sends in a row before the next ready VC's turn.
const BURST: usize = 64;

/// Stateless CHALLENGEs to first contacts (conn.rs) waiting for the next
/// transmission: a flood beyond this between two transmissions is not
/// answered (counted), and its requesters, real ones included, retry.
/// Larger than the endpoint receives between two transmissions.
const FIRST_CONTACT_QUEUE: usize = 256;

/// An announced rendezvous receive.
struct RxRndv {
    peer: SocketAddr,
    /// The sender's message id.
    key: MsgId,
    total: u64,
    /// The message's last bytes, carried by the RTS; the rest is pulled.
    tail: Vec<u8>,
    /// Bytes from offset 0 the sender pushes behind the RTS, while they
    /// can still be taken: 0 once one was dropped (the receive pulls them).
    push: u64,
    accepted: Option<Accepted>,
}

struct Accepted {
    sink: Box<dyn RecvSink>,
    /// Bytes to pull (GET): the receive's length, or less if the RTS's
    /// tail covers the end of it.
    want: u64,
    /// Bytes of the RTS's tail written into the sink at accept.
    from_tail: u64,
    /// Bytes below this come pushed (PDATA), unasked.
    push_end: u64,
    /// Bytes below this have been pushed or asked for with GET (GETs start
    /// at `push_end`, so none went out if everything wanted came pushed).
    requested: u64,
    received: u64,
    /// End of the highest range received: nothing at or above it has been
    /// written, so the wire may receive straight into it on a guess.
    high: u64,
    /// RDATA payload per segment we expect (our own segment size for the peer).
    seg_room: usize,
}

enum TxBody {
    Eager {
        /// Read again for each (re)transmission: the caller keeps it valid
        /// until SendDone (a copy when it cannot, e.g. for an inject).
        payload: SendPayload,
        next_off: usize,
        started: bool,
        segmented: bool,
        unacked: u32,
    },
    Rndv {
        /// Shared with the GETs being served (`RDataJob`).
        src: Arc<dyn SendSource>,
        len: u64,
        /// The receiver's GET_LAST came: once every RDATA segment is
        /// acknowledged, it holds all it asked for and the send is done.
        last_get: bool,
        /// RDATA segments sent and not yet acknowledged.
        unacked: u32,
        /// Last bytes sent with the RTS (`rts_tail`), never pulled.
        tail: u32,
        /// First bytes pushed behind the RTS (`push_len`).
        push: u32,
    },
}

struct TxMsg {
    hdr: MsgHdr,
    body: TxBody,
    /// Completed to the application when it was sent (its payload is the
    /// engine's own copy): no SendDone or SendFailed event.
    quiet: bool,
}

/// What a sequence number carries, by reference to the data it came from,
/// so a retransmission re-reads the source instead of keeping a copy.
#[derive(Clone, Copy, Debug)]
enum SegFrame {
    Msg {
        id: MsgId,
        off: u64,
        len: u32,
        first: bool,
    },
    Rts {
        id: MsgId,
    },
    Get {
        key: MsgId,
        rid: RndvId,
        offset: u64,
        len: u64,
        last: bool,
    },
    /// Rendezvous data: asked for by the receiver's `rid`, or pushed
    /// (`None`: PDATA, named by our key).
    RData {
        key: MsgId,
        rid: Option<RndvId>,
        offset: u64,
        len: u32,
    },
    Fin {
        key: MsgId,
    },
    Nop,
}

struct SentSeg {
    frame: SegFrame,
    bytes: u32,
    sent_at: u64,
    /// Transmission order; a hole counts as lost once DUP_THRESH segments
    /// transmitted after it are known to have arrived.
    txn: u64,
    xmits: u32,
    sacked: bool,
    /// Queued for retransmission.
    lost: bool,
}

enum Ooo {
    /// Rendezvous data is placed into its sink on arrival even out of order
    /// (it carries its offset); only the sequence number is remembered.
    Consumed,
    Stored {
        kind: u8,
        body: Vec<u8>,
    },
}

struct RDataJob {
    key: MsgId,
    /// None: a push, not a GET.
    rid: Option<RndvId>,
    next: u64,
    end: u64,
    src: Arc<dyn SendSource>,
}

struct Reasm {
    hdr: MsgHdr,
    buf: Vec<u8>,
}

struct Vc {
    peer: SocketAddr,
    local_nonce: u64,
    /// Known once the handshake completed (from the peer's REQ or RESP).
    peer_nonce: Option<u64>,
    hs: Handshake,
    resp_pending: bool,
    /// Fixed at creation, so segments already built always fit a retransmission.
    seg_limit: usize,
    rcv_window: u32,
    snd_window: u32,
    snd_isn: u32,

    snd_una: u64,
    snd_nxt: u64,
    unacked: VecDeque<SentSeg>,
    bytes_in_flight: usize,
    rtx: VecDeque<u64>,
    rtt: Rtt,
    rto_deadline: Option<u64>,
    txn: u64,
    ctrl: VecDeque<SegFrame>,
    msgs: VecDeque<MsgId>,
    rdata: VecDeque<RDataJob>,
    tx: Map<MsgId, TxMsg>,

    rcv_nxt: u64,
    ooo: BTreeMap<u64, Ooo>,
    /// Payload bytes parked in `ooo`.
    ooo_bytes: usize,
    ack_pending: bool,
    ack_now: bool,
    ack_deadline: Option<u64>,
    segs_since_ack: u32,
    bytes_since_ack: usize,
    reasm: Option<Reasm>,

    last_heard: u64,
    /// When `unacked` last became non-empty.
    waiting_since: u64,
    /// Accepted rendezvous receives still pulling from this peer.
    rx_active: u32,
    keepalive_queued: bool,
    in_ready: bool,
    /// Credits we lent the peer (receiving side) and borrowed from it
    /// (sending side); a CREDIT datagram is due; when a stalled request is
    /// repeated (CREDIT datagrams are not retransmitted).
    lender: Lender,
    borrower: Borrower,
    credit_due: bool,
    credit_retry_at: u64,
    /// `Event::PeerUp` was emitted for this incarnation of the VC.
    up_announced: bool,
    /// Created by the peer's CONN_REQ alone, which anyone can forge; None
    /// once the peer has echoed our id or a cookie (conn.rs), and for VCs
    /// we opened.
    unproven: Option<Unproven>,
    /// Established: the nonce of a CONN_REQ with a new connection id, to
    /// be answered with a CHALLENGE (the latest one only: see conn.rs).
    challenge_due: Option<u64>,
    /// Sending side: rendezvous sends left to go without a push, after the
    /// peer dropped pushed data.
    push_backoff: u32,
    /// Receiving side: the announced rendezvous receives whose sender
    /// pushes data, by its key (PDATA names the key, not our rid).
    pushes: Map<MsgId, RndvId>,
    /// Key of the last RTS delivered (keys grow in send order).
    last_rts_key: Option<MsgId>,
    /// Keys of PDATA dropped because it overtook its RTS (loss or
    /// reorder): an RTS with a key in this range has lost pushed bytes,
    /// so its receive pulls everything.
    push_gap: Option<(MsgId, MsgId)>,
}

enum Tick {
    Idle,
    Ready,
    Fail,
    /// An unproven VC nobody proved in time: dropped without a word.
    Expire,
}

impl Vc {
    fn new(sh: &mut Shared, peer: SocketAddr, now: u64) -> Vc {
        let local_nonce = loop {
            let n = sh.entropy.next_u64();
            if n != 0 {
                break n;
            }
        };
        let isn = sh.entropy.next_u64() as u32;
        let snd_isn = sh.forced_isn.unwrap_or(isn);
        let first_seq = SEQ_BASE + snd_isn as u64;
        Vc {
            peer,
            local_nonce,
            peer_nonce: None,
            hs: Handshake::connecting(now),
            resp_pending: false,
            seg_limit: if sh.cfg.local_ips.contains(&peer.ip()) {
                sh.cfg.local_max_datagram.max(sh.cfg.max_datagram)
            } else {
                sh.cfg.max_datagram
            },
            rcv_window: sh.cfg.window_segments.clamp(1, MAX_WINDOW),
            snd_window: 1,
            snd_isn,
            snd_una: first_seq,
            snd_nxt: first_seq,
            unacked: VecDeque::new(),
            bytes_in_flight: 0,
            rtx: VecDeque::new(),
            rtt: Rtt::new(&sh.cfg),
            rto_deadline: None,
            txn: 0,
            ctrl: VecDeque::new(),
            msgs: VecDeque::new(),
            rdata: VecDeque::new(),
            tx: Map::with_hasher(sh.hasher),
            rcv_nxt: 0,
            ooo: BTreeMap::new(),
            ooo_bytes: 0,
            ack_pending: false,
            ack_now: false,
            ack_deadline: None,
            segs_since_ack: 0,
            bytes_since_ack: 0,
            reasm: None,
            last_heard: now,
            waiting_since: now,
            rx_active: 0,
            keepalive_queued: false,
            in_ready: false,
            lender: sh.bank.as_mut().map(CreditBank::open).unwrap_or_default(),
            borrower: Borrower::new(sh.cfg.credits.map_or(0, |c| c.min_loan)),
            // The first CREDIT tells the peer what it may send us.
            credit_due: sh.bank.is_some(),
            credit_retry_at: 0,
            up_announced: false,
            unproven: None,
            challenge_due: None,
            push_backoff: 0,
            pushes: Map::with_hasher(sh.hasher),
            last_rts_key: None,
            push_gap: None,
        }
    }

    fn establish(&mut self, cfg: &EngineConfig, nonce: u64, isn: u32, window: u32, now: u64) {
        self.up_announced = false;
        self.peer_nonce = Some(nonce);
        self.rcv_nxt = SEQ_BASE + isn as u64;
        self.snd_window = cfg.window_segments.min(window).clamp(1, MAX_WINDOW);
        self.hs = Handshake::Established;
        self.last_heard = now;
    }

    fn established(&self) -> bool {
        self.hs == Handshake::Established
    }

    /// The peer echoed our connection id (or a cookie): it is real, not a
    /// CONN_REQ with a forged source address (which costs nothing to
    /// send). PeerUp goes out once per incarnation of the VC (`establish`
    /// resets it).
    fn prove(&mut self, sh: &mut Shared) {
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
    fn rekey(&mut self, sh: &mut Shared, nonce: u64, isn: u32, window: u32, now: u64) {
        // Nothing can have been received or acknowledged: a datagram with
        // our id would have proven the VC.
        debug_assert!(self.unproven.is_some() && self.ooo.is_empty() && self.reasm.is_none());
        debug_assert!(self.unacked.iter().all(|s| !s.sacked));
        self.establish(&sh.cfg, nonce, isn, window, now);
        if self.challenge_due == Some(nonce) {
            // Its CONN_REQ was challenged before: it gets its answer now.
            self.challenge_due = None;
            self.resp_pending = true;
        }
        for (i, s) in self.unacked.iter_mut().enumerate() {
            // The first transmission under the new id counts as the first.
            s.xmits = 0;
            if !s.lost {
                s.lost = true;
                self.rtx.push_back(self.snd_una + i as u64);
            }
        }
        if !self.unacked.is_empty() {
            self.rtt.reset_backoff();
            self.rto_deadline = Some(now + self.rtt.rto(&sh.cfg));
            self.waiting_since = now;
        }
        // Our credit header went to the wrong id too.
        self.credit_due |= sh.bank.is_some();
        sh.stats.unproven_rekeyed += 1;
        self.prove(sh);
    }

    fn has_pending_work(&self) -> bool {
        !self.established()
            || self.resp_pending
            || self.challenge_due.is_some()
            || self.credit_due
            || !self.unacked.is_empty()
            || !self.ctrl.is_empty()
            || !self.msgs.is_empty()
            || !self.rdata.is_empty()
            || !self.tx.is_empty()
            || self.ack_pending
            || self.rx_active > 0
    }

    /// Whether `transmit` could produce a datagram now (conservative:
    /// true may still find the window closed). Whatever makes this true
    /// later (an ACK, a timer, a new send) marks the VC ready again.
    fn may_transmit(&self, now: u64) -> bool {
        match self.hs {
            Handshake::Connecting { ask, answer } => ask.req_due || answer.is_some(),
            Handshake::Established => {
                self.unproven.is_some_and(|u| u.ask.is_some_and(|a| a.req_due))
                    || self.resp_pending
                    || self.challenge_due.is_some()
                    || self.credit_due
                    || (self.ack_pending && (self.ack_now || self.ack_deadline.is_some_and(|d| d <= now)))
                    || !self.rtx.is_empty()
                    || !self.ctrl.is_empty()
                    || !self.msgs.is_empty()
                    || !self.rdata.is_empty()
            }
        }
    }

    fn awaiting_peer(&self) -> bool {
        !self.tx.is_empty() || self.rx_active > 0
    }

    fn keepalive_interval(cfg: &EngineConfig) -> u64 {
        (cfg.peer_timeout_ns / 4).max(1)
    }

    fn next_deadline(&self, cfg: &EngineConfig) -> Option<u64> {
        if let Handshake::Connecting { ask, .. } = self.hs {
            return Some(ask.deadline(cfg));
        }
        let mut t: Option<u64> = None;
        let mut take = |d: u64| t = Some(t.map_or(d, |x| x.min(d)));
        match self.unproven {
            Some(Unproven { ask: Some(ask), .. }) => take(ask.deadline(cfg)),
            Some(Unproven { since, ask: None }) => take(since.saturating_add(cfg.peer_timeout_ns)),
            None => {}
        }
        if self.ack_pending && !self.ack_now {
            if let Some(d) = self.ack_deadline {
                take(d);
            }
        }
        if let Some(d) = self.rto_deadline {
            take(d);
        }
        if !self.unacked.is_empty() {
            take(
                self.last_heard
                    .max(self.waiting_since)
                    .saturating_add(cfg.peer_timeout_ns),
            );
        } else if self.awaiting_peer() && !self.keepalive_queued {
            take(self.last_heard.saturating_add(Self::keepalive_interval(cfg)));
        }
        if self.borrower.stalled() && !self.credit_due {
            take(self.credit_retry_at);
        }
        t
    }

    fn on_timeout(&mut self, sh: &mut Shared, now: u64) -> Tick {
        let cfg = &sh.cfg;
        if let Handshake::Connecting { ask, .. } = &mut self.hs {
            return match ask.tick(cfg, now) {
                AskTick::Wait => Tick::Idle,
                AskTick::Due => Tick::Ready,
                AskTick::GiveUp => Tick::Fail,
            };
        }
        let mut tick = Tick::Idle;
        if let Some(u) = &mut self.unproven {
            match &mut u.ask {
                // A real requester would have given up by now.
                None if now >= u.since.saturating_add(cfg.peer_timeout_ns) => return Tick::Expire,
                None => {}
                Some(ask) => match ask.tick(cfg, now) {
                    AskTick::Wait => {}
                    AskTick::Due => tick = Tick::Ready,
                    AskTick::GiveUp => return Tick::Fail,
                },
            }
        }
        if self.ack_pending && self.ack_deadline.is_some_and(|d| d <= now) {
            self.ack_now = true;
            tick = Tick::Ready;
        }
        if !self.unacked.is_empty()
            && now
                >= self
                    .last_heard
                    .max(self.waiting_since)
                    .saturating_add(cfg.peer_timeout_ns)
        {
            return Tick::Fail;
        }
        if let Some(deadline) = self.rto_deadline {
            if self.unacked.is_empty() {
                self.rto_deadline = None;
            } else if now >= deadline {
                sh.stats.rto_expirations += 1;
                let rto = self.rtt.rto(cfg);
                let mut marked = 0;
                let mut marked_bytes = 0;
                let mut oldest = u64::MAX;
                for (i, s) in self.unacked.iter_mut().enumerate() {
                    if s.sacked || s.lost {
                        continue;
                    }
                    if now.saturating_sub(s.sent_at) < rto {
                        oldest = oldest.min(s.sent_at);
                    } else if marked == 0 || (marked < RTO_BURST && marked_bytes < RTO_BURST_BYTES) {
                        if s.xmits > cfg.max_retrans {
                            return Tick::Fail;
                        }
                        s.lost = true;
                        self.rtx.push_back(self.snd_una + i as u64);
                        marked += 1;
                        marked_bytes += s.bytes as usize;
                    } else {
                        break;
                    }
                }
                if marked > 0 {
                    self.rtt.back_off();
                    self.rto_deadline = Some(now + self.rtt.rto(cfg));
                    tick = Tick::Ready;
                } else if oldest != u64::MAX {
                    self.rto_deadline = Some(oldest + rto);
                } else {
                    // Everything unsacked already waits in the retransmit
                    // queue; its transmission re-arms the timer.
                    self.rto_deadline = Some(now + rto);
                    tick = Tick::Ready;
                }
            }
        }
        if self.unacked.is_empty()
            && self.awaiting_peer()
            && !self.keepalive_queued
            && now >= self.last_heard.saturating_add(Self::keepalive_interval(cfg))
        {
            // A reliable no-op: a live peer acknowledges it; a dead one
            // leaves it unacknowledged and the peer timeout fires.
            self.keepalive_queued = true;
            self.ctrl.push_back(SegFrame::Nop);
            tick = Tick::Ready;
        }
        tick
    }

    fn ack_fields(&self) -> (u32, u64) {
        let mut sack = 0u64;
        if !self.ooo.is_empty() {
            for (&seq, _) in self.ooo.range(self.rcv_nxt + 1..=self.rcv_nxt + 64) {
                sack |= 1 << (seq - self.rcv_nxt - 1);
            }
        }
        (self.rcv_nxt as u32, sack)
    }

    fn clear_ack(&mut self) {
        self.ack_pending = false;
        self.ack_now = false;
        self.ack_deadline = None;
        self.segs_since_ack = 0;
        self.bytes_since_ack = 0;
    }

    /// Our CONN_REQ (with the peer's cookie, if it challenged us).
    fn conn_req(&self, sh: &mut Shared, cookie: u64, buf: &mut [u8]) -> usize {
        sh.stats.conn_reqs_sent += 1;
        wire::encode_conn_req(buf, self.local_nonce, cookie, self.snd_isn, self.rcv_window)
    }

    fn transmit(&mut self, sh: &mut Shared, now: u64, buf: &mut [u8]) -> Option<usize> {
        if let Handshake::Connecting { ask, answer } = &mut self.hs {
            if let Some(cookie) = ask.send(&sh.cfg, now) {
                return Some(self.conn_req(sh, cookie, buf));
            }
            // The peer's CONN_REQ crossed ours: answer it with what ours
            // carried; its answer to ours establishes the VC.
            let echo = answer.take()?;
            sh.stats.conn_resps_sent += 1;
            return Some(wire::encode_conn_resp(
                buf,
                self.local_nonce,
                echo,
                self.snd_isn,
                self.rcv_window,
            ));
        }
        let peer_nonce = self.peer_nonce?;
        if let Some(theirs) = self.challenge_due.take() {
            sh.stats.challenges_sent += 1;
            let cookie = sh.cookie_key.cookie(self.peer, theirs, self.local_nonce);
            return Some(wire::encode_challenge(buf, theirs, cookie));
        }
        if self.resp_pending {
            self.resp_pending = false;
            sh.stats.conn_resps_sent += 1;
            return Some(wire::encode_conn_resp(
                buf,
                self.local_nonce,
                peer_nonce,
                self.snd_isn,
                self.rcv_window,
            ));
        }
        if let Some(Unproven { ask: Some(ask), .. }) = &mut self.unproven {
            // We send on a VC whose peer id only a CONN_REQ vouched for:
            // our own CONN_REQ alongside the data, and the real peer's
            // answer proves or re-keys the VC (conn.rs).
            if let Some(cookie) = ask.send(&sh.cfg, now) {
                return Some(self.conn_req(sh, cookie, buf));
            }
        }
        if self.credit_due && sh.bank.is_some() {
            return Some(self.credit_datagram(sh, peer_nonce, buf));
        }
        if buf.len() < self.seg_limit {
            return None;
        }
        while let Some(seq) = self.rtx.pop_front() {
            if seq < self.snd_una {
                continue;
            }
            let idx = (seq - self.snd_una) as usize;
            let Some(s) = self.unacked.get_mut(idx) else {
                continue;
            };
            if s.sacked || !s.lost {
                continue;
            }
            s.lost = false;
            s.xmits += 1;
            s.sent_at = now;
            self.txn += 1;
            s.txn = self.txn;
            let frame = s.frame;
            sh.stats.retransmits += 1;
            if self.rto_deadline.is_none() {
                self.rto_deadline = Some(now + self.rtt.rto(&sh.cfg));
            }
            return Some(self.write_seg(&mut sh.zc, peer_nonce, seq, &frame, buf));
        }
        if self.unacked.len() < self.snd_window as usize && self.bytes_in_flight < sh.cfg.window_bytes {
            if let Some(frame) = self.next_frame(sh) {
                let seq = self.snd_nxt;
                self.snd_nxt += 1;
                let n = self.write_seg(&mut sh.zc, peer_nonce, seq, &frame, buf);
                if self.unacked.is_empty() {
                    self.waiting_since = now;
                }
                self.txn += 1;
                self.unacked.push_back(SentSeg {
                    frame,
                    bytes: n as u32,
                    sent_at: now,
                    txn: self.txn,
                    xmits: 1,
                    sacked: false,
                    lost: false,
                });
                self.bytes_in_flight += n;
                if self.rto_deadline.is_none() {
                    self.rto_deadline = Some(now + self.rtt.rto(&sh.cfg));
                }
                sh.stats.segments_sent += 1;
                return Some(n);
            }
        }
        // A message that just stalled for credits asks for them now.
        if self.credit_due && sh.bank.is_some() {
            return Some(self.credit_datagram(sh, peer_nonce, buf));
        }
        if self.ack_pending && (self.ack_now || self.ack_deadline.is_some_and(|d| d <= now)) {
            let (ack, sack) = self.ack_fields();
            self.clear_ack();
            sh.stats.acks_sent += 1;
            return Some(wire::encode_ack(buf, peer_nonce, ack, sack));
        }
        None
    }

    /// `transmit`, counted in the engine's statistics.
    fn transmit_counted(&mut self, sh: &mut Shared, now: u64, buf: &mut [u8]) -> Option<usize> {
        let n = self.transmit(sh, now, buf)?;
        sh.stats.datagrams_out += 1;
        sh.stats.bytes_out += n as u64;
        Some(n)
    }

    /// A CREDIT datagram: what we lend the peer, what we give back, and
    /// whether we are stalled or want credits back.
    fn credit_datagram(&mut self, sh: &mut Shared, peer_nonce: u64, buf: &mut [u8]) -> usize {
        self.credit_due = false;
        let Some(bank) = &sh.bank else { return 0 };
        let (granted, give) = bank.header(&self.lender);
        let (returned, want) = self.borrower.header();
        self.lender.announced(granted);
        sh.stats.credits_sent += 1;
        wire::encode_credit(buf, peer_nonce, granted, returned, give | want)
    }

    /// Next new frame, or None when every queue is empty.
    fn next_frame(&mut self, sh: &mut Shared) -> Option<SegFrame> {
        if let Some(f) = self.ctrl.pop_front() {
            if let SegFrame::Nop = f {
                self.keepalive_queued = false;
                sh.stats.keepalives_sent += 1;
            }
            return Some(f);
        }
        let lim = self.seg_limit;
        while let Some(&id) = self.msgs.front() {
            let Some(m) = self.tx.get_mut(&id) else {
                self.msgs.pop_front();
                continue;
            };
            match &mut m.body {
                TxBody::Eager {
                    payload,
                    next_off,
                    started,
                    segmented,
                    unacked,
                } => {
                    let first = !*started;
                    if first && !spend_credits(sh, &mut self.borrower, payload.len(), &mut self.credit_due) {
                        break;
                    }
                    let room = lim
                        - wire::SEG_HDR_LEN
                        - if first {
                            wire::MSG_BODY_LEN
                        } else {
                            wire::MSG_CONT_BODY_LEN
                        };
                    let len = (payload.len() - *next_off).min(room);
                    let f = SegFrame::Msg {
                        id,
                        off: *next_off as u64,
                        len: len as u32,
                        first,
                    };
                    *started = true;
                    *next_off += len;
                    *unacked += 1;
                    if *next_off == payload.len() {
                        *segmented = true;
                        self.msgs.pop_front();
                    }
                    return Some(f);
                }
                TxBody::Rndv { tail, push, src, .. } => {
                    if !spend_credits(sh, &mut self.borrower, *tail as usize, &mut self.credit_due) {
                        break;
                    }
                    self.msgs.pop_front();
                    if *push > 0 {
                        // Queued now, so its segments follow the RTS.
                        sh.stats.rndv_pushed += 1;
                        self.rdata.push_back(RDataJob {
                            key: id,
                            rid: None,
                            next: 0,
                            end: *push as u64,
                            src: src.clone(),
                        });
                    }
                    return Some(SegFrame::Rts { id });
                }
            }
        }
        if let Some(job) = self.rdata.front_mut() {
            let room = data_room(lim) as u64;
            let len = (job.end - job.next).min(room);
            let f = SegFrame::RData {
                key: job.key,
                rid: job.rid,
                offset: job.next,
                len: len as u32,
            };
            // One clone per burst, not per segment: the source stays
            // valid for the whole call (no FIN is handled during it).
            if !matches!(&sh.zc.src, Some((k, _)) if *k == job.key) {
                sh.zc.src = Some((job.key, job.src.clone()));
            }
            job.next += len;
            if let Some(TxMsg {
                body: TxBody::Rndv { unacked, .. },
                ..
            }) = self.tx.get_mut(&job.key)
            {
                *unacked += 1;
            }
            if job.next == job.end {
                self.rdata.pop_front();
            }
            return Some(f);
        }
        None
    }

    /// Encodes one segment, piggybacking our current ACK state on it. A
    /// frame whose source is gone (a rendezvous already completed by FIN,
    /// which proves the receiver holds its data) goes out as NOP so the
    /// sequence number is still filled.
    fn write_seg(&mut self, zc: &mut Zc, conn: u64, seq: u64, frame: &SegFrame, buf: &mut [u8]) -> usize {
        let (ack, sack) = self.ack_fields();
        self.clear_ack();
        let seq = seq as u32;
        let nop = |buf: &mut [u8]| wire::encode_seg_head(buf, conn, ack, sack, seq, &FrameHead::Nop);
        match *frame {
            SegFrame::Msg { id, off, len, first } => {
                let Some(TxMsg {
                    hdr,
                    body: TxBody::Eager { payload, .. },
                    ..
                }) = self.tx.get(&id)
                else {
                    return nop(buf);
                };
                let head = if first {
                    FrameHead::Msg {
                        tag: hdr.tag,
                        data: hdr.data,
                        flags: hdr.flags,
                        total: payload.len() as u64,
                    }
                } else {
                    FrameHead::MsgCont { offset: off }
                };
                let at = wire::encode_seg_head(buf, conn, ack, sack, seq, &head);
                attach_payload(zc, id, payload, off as usize, len as usize, buf, at)
            }
            SegFrame::Rts { id } => {
                let Some(TxMsg {
                    hdr,
                    body: TxBody::Rndv {
                        len, tail, src, push, ..
                    },
                    ..
                }) = self.tx.get(&id)
                else {
                    return nop(buf);
                };
                let head = FrameHead::Rts {
                    tag: hdr.tag,
                    data: hdr.data,
                    flags: hdr.flags,
                    total: *len,
                    key: id,
                    push: *push,
                };
                let at = wire::encode_seg_head(buf, conn, ack, sack, seq, &head);
                let off = (*len - *tail as u64) as usize;
                attach_payload(zc, id, &**src, off, *tail as usize, buf, at)
            }
            SegFrame::RData { key, rid, offset, len } => {
                // Fresh data: next_frame put its GET's source in zc.src. A
                // retransmission looks it up, and finds it gone after FIN.
                if !matches!(&zc.src, Some((k, _)) if *k == key) {
                    match self.tx.get(&key) {
                        Some(TxMsg {
                            body: TxBody::Rndv { src, .. },
                            ..
                        }) => zc.src = Some((key, src.clone())),
                        _ => return nop(buf),
                    }
                }
                let head = match rid {
                    Some(rid) => FrameHead::RData { rid, offset },
                    None => FrameHead::PData { key, offset },
                };
                let at = wire::encode_seg_head(buf, conn, ack, sack, seq, &head);
                let l = len as usize;
                if zc.on && l > 0 {
                    zc.deferred = Some(Deferred {
                        id: key,
                        off: offset as usize,
                        hdr_len: at,
                    });
                } else if let Some((_, src)) = &zc.src {
                    src.read_at(offset as usize, &mut buf[at..at + l]);
                }
                at + l
            }
            SegFrame::Get {
                key,
                rid,
                offset,
                len,
                last,
            } => wire::encode_seg_head(
                buf,
                conn,
                ack,
                sack,
                seq,
                &FrameHead::Get {
                    key,
                    rid,
                    offset,
                    len,
                    last,
                },
            ),
            SegFrame::Fin { key } => wire::encode_seg_head(buf, conn, ack, sack, seq, &FrameHead::Fin { key }),
            SegFrame::Nop => nop(buf),
        }
    }

    fn seg_delivered(&mut self, sh: &mut Shared, frame: SegFrame) {
        let id = match frame {
            SegFrame::Msg { id, .. } | SegFrame::RData { key: id, .. } => id,
            _ => return,
        };
        let done = match self.tx.get_mut(&id).map(|m| &mut m.body) {
            Some(TxBody::Eager { unacked, segmented, .. }) => {
                *unacked -= 1;
                *unacked == 0 && *segmented
            }
            // The receiver places RDATA before acknowledging it, so an
            // acknowledged final range means it holds everything: no FIN.
            Some(TxBody::Rndv { unacked, last_get, .. }) => {
                *unacked -= 1;
                *unacked == 0 && *last_get && !self.rdata.iter().any(|j| j.key == id)
            }
            None => false,
        };
        if done {
            if let Some(m) = self.tx.remove(&id) {
                sh.send_done(id, m.quiet);
            }
        }
    }

    /// Applies the cumulative ACK and SACK bitmap a datagram carries.
    ///
    /// RTT: only the most recently transmitted of the newly delivered
    /// segments gives a sample, and only if it was sent once. That is the
    /// segment whose arrival made the peer send this ACK; the others may
    /// have waited at the receiver behind a hole, which says nothing about
    /// the path.
    fn on_ack(&mut self, sh: &mut Shared, ack: u32, sack: u64, now: u64) {
        let d = seq_delta(ack, self.snd_una);
        if d < 0 || d as u64 > self.snd_nxt - self.snd_una {
            // An older ACK overtaken by a newer one, or nonsense.
            return;
        }
        let mut newest: Option<(u64, u32, u64)> = None; // (txn, xmits, sent_at)
        let mut note = |s: &SentSeg| {
            if newest.is_none_or(|n| s.txn > n.0) {
                newest = Some((s.txn, s.xmits, s.sent_at));
            }
        };
        if d > 0 {
            for _ in 0..d {
                let s = self.unacked.pop_front().expect("acked segment is in flight");
                if !s.sacked {
                    self.bytes_in_flight -= s.bytes as usize;
                    note(&s);
                    self.seg_delivered(sh, s.frame);
                }
            }
            self.snd_una += d as u64;
            self.rtt.reset_backoff();
            self.waiting_since = now;
        }
        if sack != 0 {
            let mut bits = sack;
            while bits != 0 {
                let idx = bits.trailing_zeros() as usize + 1;
                bits &= bits - 1;
                let Some(s) = self.unacked.get_mut(idx) else {
                    break;
                };
                if !s.sacked {
                    // Sacked data has left the network (the receiver never
                    // drops what it sacked), so it no longer counts
                    // against the in-flight cap.
                    s.sacked = true;
                    self.bytes_in_flight -= s.bytes as usize;
                    note(s);
                    let f = s.frame;
                    self.seg_delivered(sh, f);
                }
            }
            self.detect_losses(sh);
        }
        if let Some((_, 1, sent_at)) = newest {
            self.rtt.sample(now.saturating_sub(sent_at), &sh.cfg);
        }
        if d > 0 {
            self.rto_deadline = if self.unacked.is_empty() {
                None
            } else {
                Some(now + self.rtt.rto(&sh.cfg))
            };
        }
    }

    /// SACK-based fast retransmit: an unsacked segment is lost once
    /// DUP_THRESH segments transmitted after it have arrived. Comparing
    /// transmission order rather than sequence numbers keeps a segment that
    /// was just retransmitted from being declared lost again by old news.
    fn detect_losses(&mut self, sh: &mut Shared) {
        let n = self.unacked.len().min(65);
        let mut top = [0u64; DUP_THRESH];
        for idx in (0..n).rev() {
            let s = &mut self.unacked[idx];
            if s.sacked {
                if s.txn > top[DUP_THRESH - 1] {
                    top[DUP_THRESH - 1] = s.txn;
                    top.sort_unstable_by(|a, b| b.cmp(a));
                }
            } else if !s.lost && top[DUP_THRESH - 1] > s.txn {
                s.lost = true;
                self.rtx.push_back(self.snd_una + idx as u64);
                sh.stats.fast_retransmits += 1;
            }
        }
    }

    /// A segment with a valid connection id arrived.
    fn on_seg(&mut self, sh: &mut Shared, seq: u32, frame: Frame<'_>, kind: u8, body: &[u8], now: u64) {
        let d = seq_delta(seq, self.rcv_nxt);
        let window = self.rcv_window as i64;
        if d < 0 {
            if -d > window {
                sh.stats.dropped_out_of_window += 1;
                return;
            }
            // Our ACK got lost: say again what we have.
            sh.stats.dup_segments += 1;
            self.ack_pending = true;
            self.ack_now = true;
            return;
        }
        if d >= window {
            sh.stats.dropped_out_of_window += 1;
            return;
        }
        let abs = self.rcv_nxt + d as u64;
        if d > 0 {
            if self.ooo.contains_key(&abs) {
                sh.stats.dup_segments += 1;
            } else if let Frame::RData { .. } | Frame::PData { .. } = frame {
                sh.stats.ooo_segments += 1;
                // Completing here needs no ACK of its own: the SACK for
                // this segment is sent at once just below.
                self.on_data(sh, frame);
                self.ooo.insert(abs, Ooo::Consumed);
            } else if self.ooo_bytes + body.len() > ooo_budget(&sh.cfg) {
                // Neither stored nor sacked: the sender will resend it.
                sh.stats.dropped_ooo_budget += 1;
                return;
            } else {
                sh.stats.ooo_segments += 1;
                self.ooo_bytes += body.len();
                self.ooo.insert(
                    abs,
                    Ooo::Stored {
                        kind,
                        body: body.to_vec(),
                    },
                );
            }
            // Tell the sender about the hole now rather than after the ACK
            // delay, when the SACK bitmap can show this segment.
            self.ack_pending = true;
            if d <= 64 {
                self.ack_now = true;
            } else if self.ack_deadline.is_none() {
                self.ack_deadline = Some(now + sh.cfg.ack_delay_ns);
            }
            return;
        }
        let filled_hole = !self.ooo.is_empty();
        let completed = match frame {
            Frame::RData { .. } | Frame::PData { .. } => self.on_data(sh, frame),
            f => {
                self.deliver(sh, f);
                false
            }
        };
        self.rcv_nxt += 1;
        self.segs_since_ack += 1;
        self.bytes_since_ack += body.len() + wire::SEG_HDR_LEN;
        while let Some(entry) = self.ooo.remove(&self.rcv_nxt) {
            if let Ooo::Stored { kind, body } = entry {
                self.ooo_bytes -= body.len();
                match wire::decode_frame(kind, &body) {
                    Ok(f) => self.deliver(sh, f),
                    Err(_) => sh.stats.dropped_malformed += 1,
                }
            }
            self.rcv_nxt += 1;
            self.segs_since_ack += 1;
        }
        self.ack_pending = true;
        if filled_hole {
            self.ack_now = true;
        } else if completed {
            // This ACK completes the peer's send. It waits for the next
            // transmission chance rather than go out before the
            // application sees its receive complete: if the application
            // answers, it rides on the answer; otherwise the next progress
            // call sends it (the deadline is already past by then).
            self.ack_deadline = Some(now + 1);
        } else if self.segs_since_ack >= ACK_EVERY_SEGS || self.bytes_since_ack >= sh.cfg.window_bytes / 4 {
            self.ack_now = true;
        } else if self.ack_deadline.is_none() {
            self.ack_deadline = Some(now + sh.cfg.ack_delay_ns);
        }
    }

    /// In-order delivery of one frame to the message layer.
    fn deliver(&mut self, sh: &mut Shared, frame: Frame<'_>) {
        match frame {
            Frame::Msg {
                tag,
                data,
                flags,
                total,
                payload,
            } => {
                if self.reasm.take().is_some() {
                    // The sender never interleaves eager messages.
                    sh.stats.dropped_malformed += 1;
                }
                let hdr = MsgHdr {
                    tag,
                    data,
                    len: total,
                    flags,
                };
                if !admit(sh, &mut self.lender, total) {
                    return;
                }
                if payload.len() as u64 == total {
                    sh.events.push_back(Event::Msg {
                        peer: self.peer,
                        hdr,
                        body: MsgBody::Eager(Payload::from_slice(payload)),
                    });
                } else if total > MAX_EAGER_LEN {
                    sh.stats.dropped_malformed += 1;
                } else {
                    let mut buf = Vec::with_capacity(total.min(REASM_RESERVE_MAX) as usize);
                    buf.extend_from_slice(payload);
                    self.reasm = Some(Reasm { hdr, buf });
                }
            }
            Frame::MsgCont { offset, payload } => match &mut self.reasm {
                Some(r) if offset == r.buf.len() as u64 && offset + payload.len() as u64 <= r.hdr.len => {
                    r.buf.extend_from_slice(payload);
                    if r.buf.len() as u64 == r.hdr.len {
                        let r = self.reasm.take().expect("reassembly in progress");
                        sh.events.push_back(Event::Msg {
                            peer: self.peer,
                            hdr: r.hdr,
                            body: MsgBody::Eager(Payload::from_vec(r.buf)),
                        });
                    }
                }
                _ => sh.stats.dropped_malformed += 1,
            },
            Frame::Rts {
                tag,
                data,
                flags,
                total,
                key,
                push,
                tail,
            } => {
                // What the RTS holds until the application takes it: the tail.
                if !admit(sh, &mut self.lender, tail.len() as u64) {
                    return;
                }
                let rid = sh.next_rid;
                sh.next_rid += 1;
                let mut push = push as u64;
                if push > 0 {
                    self.pushes.insert(key, rid);
                    if self.push_gap.is_some_and(|(lo, hi)| (lo..=hi).contains(&key)) {
                        // Some of its pushed data came first and was dropped.
                        push = 0;
                    } else {
                        // Its PDATA follows: the endpoint should match the
                        // message before handling another datagram.
                        sh.match_now = true;
                    }
                    if self.push_gap.is_some_and(|(_, hi)| key >= hi) {
                        self.push_gap = None;
                    }
                }
                self.last_rts_key = Some(key);
                sh.rx.insert(
                    rid,
                    RxRndv {
                        peer: self.peer,
                        key,
                        total,
                        tail: tail.to_vec(),
                        push,
                        accepted: None,
                    },
                );
                let hdr = MsgHdr {
                    tag,
                    data,
                    len: total,
                    flags,
                };
                sh.events.push_back(Event::Msg {
                    peer: self.peer,
                    hdr,
                    body: MsgBody::Rndv(rid),
                });
            }
            Frame::Get {
                key,
                rid,
                offset,
                len,
                last,
            } => match self.tx.get_mut(&key) {
                Some(TxMsg {
                    body:
                        TxBody::Rndv {
                            len: total,
                            src,
                            last_get,
                            tail,
                            push,
                            ..
                        },
                    ..
                }) if offset + len <= *total - *tail as u64 && !*last_get => {
                    if *push > 0 && offset == 0 {
                        // The receiver pulls what we pushed: it dropped it.
                        self.push_backoff = PUSH_BACKOFF;
                    }
                    *last_get = last;
                    self.rdata.push_back(RDataJob {
                        key,
                        rid: Some(rid),
                        next: offset,
                        end: offset + len,
                        src: src.clone(),
                    });
                }
                _ => sh.stats.dropped_malformed += 1,
            },
            Frame::RData { .. } | Frame::PData { .. } => {
                self.on_data(sh, frame);
            }
            Frame::Fin { key } => match self.tx.get(&key) {
                Some(TxMsg {
                    body: TxBody::Rndv { .. },
                    ..
                }) => {
                    let quiet = self.tx.remove(&key).is_some_and(|m| m.quiet);
                    // A receiver that discarded mid-pull leaves GETs we
                    // need not answer any more.
                    self.rdata.retain(|j| j.key != key);
                    sh.send_done(key, quiet);
                }
                _ => sh.stats.dropped_malformed += 1,
            },
            Frame::Nop => {}
        }
    }

    /// Rendezvous data (RDATA or PDATA), in order or not; true if it
    /// completed its receive.
    fn on_data(&mut self, sh: &mut Shared, frame: Frame<'_>) -> bool {
        match frame {
            Frame::RData { rid, offset, payload } => self.place(sh, rid, offset, payload, false),
            Frame::PData { key, offset, payload } => {
                let Some(&rid) = self.pushes.get(&key) else {
                    if self.last_rts_key.is_none_or(|k| key > k) {
                        // It overtook its RTS: that receive pulls everything.
                        self.push_gap = Some(match self.push_gap {
                            Some((lo, hi)) => (lo.min(key), hi.max(key)),
                            None => (key, key),
                        });
                        sh.stats.push_dropped += 1;
                    } else {
                        // Pushed beyond what a finished receive wanted.
                        sh.stats.dropped_rndv += 1;
                    }
                    return false;
                };
                match sh.rx.get_mut(&rid) {
                    Some(rx) if rx.accepted.is_none() => {
                        // Not posted when its RTS came: it will pull these bytes.
                        rx.push = 0;
                        sh.stats.push_dropped += 1;
                        false
                    }
                    Some(_) => self.place(sh, rid, offset, payload, true),
                    None => {
                        self.pushes.remove(&key);
                        sh.stats.dropped_rndv += 1;
                        false
                    }
                }
            }
            _ => false,
        }
    }

    /// Puts rendezvous data into its accepted receive; true if that
    /// completed it. Pushed data is taken only below the receive's
    /// `push_end` (a push longer than a short receive buffer is cut there).
    fn place(&mut self, sh: &mut Shared, rid: RndvId, offset: u64, payload: &[u8], pushed: bool) -> bool {
        // Already in the sink (`handle_datagram_placed`): account for it, do not copy.
        let placed = match sh.in_place {
            Some((r, o, l)) if r == rid && o == offset && payload.is_empty() => Some(l),
            _ => None,
        };
        let len = placed.unwrap_or(payload.len()) as u64;
        let Some(rx) = sh.rx.get_mut(&rid) else {
            sh.stats.dropped_rndv += 1;
            return false;
        };
        let Some(acc) = rx.accepted.as_mut().filter(|_| rx.peer == self.peer) else {
            sh.stats.dropped_rndv += 1;
            return false;
        };
        let end = if pushed {
            (offset + len).min(acc.push_end)
        } else {
            offset + len
        };
        if offset >= end || end > acc.requested || acc.received + (end - offset) > acc.want {
            sh.stats.dropped_rndv += 1;
            return false;
        }
        if placed.is_none() {
            acc.sink.write_at(offset as usize, &payload[..(end - offset) as usize]);
        }
        acc.received += end - offset;
        acc.high = acc.high.max(end);
        if acc.received == acc.want {
            let rx = sh.rx.remove(&rid).expect("receive just looked up");
            let acc = rx.accepted.expect("receive is accepted");
            self.rx_active -= 1;
            self.pushes.remove(&rx.key);
            if acc.push_end == acc.want {
                // Everything it wanted came pushed: no GET_LAST went out,
                // so nothing for the sender to complete on but this.
                self.ctrl.push_back(SegFrame::Fin { key: rx.key });
            }
            // Otherwise no FIN: the ACK of this segment, which answers the
            // GET_LAST, completes the sender.
            sh.events.push_back(Event::RecvDone {
                rid,
                sink: acc.sink,
                written: (acc.want + acc.from_tail) as usize,
            });
            true
        } else {
            let key = rx.key;
            pump_gets(&mut self.ctrl, &sh.cfg, rid, key, acc);
            false
        }
    }
}

/// Most bytes of out-of-order segments a VC parks. The sender's byte cap
/// counts only unsacked data, so without this bound a window of sacked
/// eager segments could pile up window_segments × max_datagram here.
fn ooo_budget(cfg: &EngineConfig) -> usize {
    cfg.window_bytes.saturating_mul(2)
}

/// Puts `len` bytes of message `id`'s `src` from `off` behind the header
/// that ends at `at`: left in the source for the wire to gather (zero-copy
/// burst) or copied into `buf`. Returns the segment's length.
fn attach_payload(
    zc: &mut Zc,
    id: MsgId,
    src: &dyn SendSource,
    off: usize,
    len: usize,
    buf: &mut [u8],
    at: usize,
) -> usize {
    if zc.on && len > 0 {
        zc.deferred = Some(Deferred { id, off, hdr_len: at });
    } else {
        src.read_at(off, &mut buf[at..at + len]);
    }
    at + len
}

/// Payload bytes of one RDATA (or PDATA) segment of a VC whose segments are
/// at most `seg_limit` bytes.
fn data_room(seg_limit: usize) -> usize {
    seg_limit - wire::SEG_HDR_LEN - wire::RDATA_BODY_LEN
}

/// Longest message sent eagerly: the rendezvous threshold, but never more
/// than a receiver reassembles, nor more credits than a peer may ever hold
/// (such a message would wait for credits forever).
fn eager_max(cfg: &EngineConfig) -> usize {
    let credits = cfg
        .credits
        .map_or(usize::MAX, |c| c.max_loan as usize * c.unit as usize);
    cfg.rndv_threshold.min(MAX_EAGER_LEN as usize).min(credits)
}

/// Bytes at the end of a rendezvous message of `len` bytes that its RTS
/// carries: the remainder that would otherwise go in a short RDATA segment
/// of its own after the full ones (one datagram fewer per message), if it
/// fits beside the RTS, is at most RTS_TAIL_MAX, and leaves something to pull.
fn rts_tail(len: u64, seg_limit: usize) -> u32 {
    let room = data_room(seg_limit) as u64;
    let t = len % room;
    let fits = t as usize <= (seg_limit - wire::SEG_HDR_LEN - wire::RTS_BODY_LEN).min(RTS_TAIL_MAX);
    if t < len && fits {
        t as u32
    } else {
        0
    }
}

/// Bytes pushed behind the RTS of a rendezvous message whose pulled part
/// (its length less the RTS's tail) is `pull` bytes: whole segments of
/// `room` payload bytes, at most `max`, and fewer than `pull`, so a GET
/// always follows (the sender completes when its GET_LAST is served).
fn push_len(pull: u64, room: usize, max: u64) -> u32 {
    let room = room as u64;
    let segs = (max / room).min(pull.saturating_sub(1) / room);
    (segs * room).min(u32::MAX as u64) as u32
}

/// Keeps up to `rndv_pull_window` bytes requested ahead of what arrived.
fn pump_gets(ctrl: &mut VecDeque<SegFrame>, cfg: &EngineConfig, rid: RndvId, key: MsgId, acc: &mut Accepted) {
    let chunk = cfg.rndv_get_chunk.max(1);
    let window = cfg.rndv_pull_window.max(chunk);
    while acc.requested < acc.want && acc.requested - acc.received < window {
        let len = chunk.min(acc.want - acc.requested);
        ctrl.push_back(SegFrame::Get {
            key,
            rid,
            offset: acc.requested,
            len,
            last: acc.requested + len == acc.want,
        });
        acc.requested += len;
    }
}

/// The VC a post-handshake datagram (ACK, CREDIT, segment) belongs to:
/// from a peer we have a VC with, carrying our connection id for it, after
/// the handshake. Anything else is counted and dropped.
fn live_vc<'a>(
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
    vc.last_heard = now;
    vc.prove(sh);
    Some(vc)
}

/// The bank's epoch bookkeeping; the peers it asks to give credits back
/// are told.
fn tick_bank(bank: &mut CreditBank, vcs: &mut Map<SocketAddr, Vc>, ready: &mut VecDeque<SocketAddr>, now: u64) {
    if !bank.tick(now, vcs.values_mut().map(|v| &mut v.lender)) {
        return;
    }
    for v in vcs.values_mut() {
        if v.lender.asked_to_give_back() {
            v.credit_due = true;
            mark_ready(ready, v);
        }
    }
}

/// Sending side: takes the credits a new message of `len` bytes costs, or
/// stalls the VC (a CREDIT datagram asks the peer for more).
fn spend_credits(sh: &mut Shared, b: &mut Borrower, len: usize, due: &mut bool) -> bool {
    let Some(cfg) = sh.cfg.credits else { return true };
    let was = b.stalled();
    if b.try_spend(cfg.cost(len)) {
        return true;
    }
    if !was {
        sh.stats.credit_stalls += 1;
        *due = true;
    }
    false
}

/// Receiving side: a new message of `len` bytes from the peer, within its
/// loan, or dropped and counted.
fn admit(sh: &mut Shared, l: &mut Lender, len: u64) -> bool {
    let Some(bank) = &mut sh.bank else { return true };
    let cost = bank.cfg.cost(len.min(usize::MAX as u64) as usize);
    if bank.on_arrival(l, cost) == Admit::OverLoan {
        sh.stats.dropped_over_credit += 1;
        return false;
    }
    true
}

/// The VC to `peer`, created (connecting) if there is none. An unproven
/// one asks its peer to prove itself (conn.rs).
fn vc_for_send<'a>(vcs: &'a mut Map<SocketAddr, Vc>, sh: &mut Shared, peer: SocketAddr, now: u64) -> &'a mut Vc {
    let vc = vcs.entry(peer).or_insert_with(|| {
        let mut vc = Vc::new(sh, peer, now);
        if peer == sh.local {
            // Talking to ourselves: one VC is both ends, no handshake.
            let (nonce, isn) = (vc.local_nonce, vc.snd_isn);
            vc.establish(&sh.cfg, nonce, isn, vc.rcv_window, now);
        }
        vc
    });
    if let Some(u @ Unproven { ask: None, .. }) = &mut vc.unproven {
        u.ask = Some(Ask::new(now));
    }
    vc
}

fn mark_ready(ready: &mut VecDeque<SocketAddr>, vc: &mut Vc) {
    if !vc.in_ready {
        vc.in_ready = true;
        ready.push_back(vc.peer);
    }
}

pub struct Engine {
    sh: Shared,
    vcs: Map<SocketAddr, Vc>,
    /// VCs that may have something to transmit, served round robin.
    ready: VecDeque<SocketAddr>,
    /// (address, nonce) of CONN_REQs from new addresses to be answered
    /// with a stateless CHALLENGE (at most `FIRST_CONTACT_QUEUE`).
    first_contact: VecDeque<(SocketAddr, u64)>,
    /// VCs that timed out in `handle_timeout`: failed, or (true) unproven
    /// ones expired.
    failing: Vec<(SocketAddr, bool)>,
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
                zc: Zc::default(),
                local,
                stats: EngineStats::default(),
                events: VecDeque::new(),
                rx: Map::with_hasher(hasher),
                hasher,
                next_rid: 1,
                next_msg_id: 1,
                entropy,
                cookie_key,
                forced_isn: None,
                bank,
                pull_order: VecDeque::new(),
                in_place: None,
                quiet_in_flight: 0,
                match_now: false,
                unproven: 0,
            },
            vcs: Map::with_hasher(hasher),
            ready: VecDeque::new(),
            first_contact: VecDeque::new(),
            failing: Vec::new(),
        }
    }

    /// An engine whose randomness replays from `seed` (the simulated
    /// network, the fuzzers).
    #[cfg(test)]
    pub fn seeded(cfg: EngineConfig, local: SocketAddr, seed: u64) -> Engine {
        Engine::new(cfg, local, Box::new(crate::rng::SplitMix(seed ^ 0x6E69_7867_5F70_726F)))
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.sh.local
    }

    pub fn config(&self) -> &EngineConfig {
        &self.sh.cfg
    }

    /// Changes apply to later decisions; `max_datagram` applies to VCs
    /// created afterwards (segments already built keep their size).
    pub fn config_mut(&mut self) -> &mut EngineConfig {
        &mut self.sh.cfg
    }

    pub fn stats(&self) -> &EngineStats {
        &self.sh.stats
    }

    /// Every VC created from now on starts its sequence numbers at `isn`
    /// (tests use it to exercise wrap-around).
    #[doc(hidden)]
    pub fn force_isn(&mut self, isn: Option<u32>) {
        self.sh.forced_isn = isn;
    }

    /// One line per VC and per rendezvous receive, for debugging.
    pub fn debug_state(&self) -> String {
        let mut out = String::new();
        for v in self.vcs.values() {
            out += &format!(
                "vc {} {:?} una={} nxt={} unacked={} sacked={} lost_q={} inflight={} ctrl={} msgs={} rdata={} tx={} rcv_nxt={} ooo={} ack_pending={} rto={:?} rx_active={} ready={}\n",
                v.peer,
                v.hs,
                v.snd_una,
                v.snd_nxt,
                v.unacked.len(),
                v.unacked.iter().filter(|s| s.sacked).count(),
                v.rtx.len(),
                v.bytes_in_flight,
                v.ctrl.len(),
                v.msgs.len(),
                v.rdata.len(),
                v.tx.len(),
                v.rcv_nxt,
                v.ooo.len(),
                v.ack_pending,
                v.rto_deadline,
                v.rx_active,
                v.in_ready
            );
        }
        for (rid, r) in &self.sh.rx {
            let acc = r.accepted.as_ref().map(|a| (a.want, a.requested, a.received));
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

    /// VCs holding a CHALLENGE to send: at most one each, whatever number
    /// of CONN_REQs asked for one (the handshake keeps no state per request).
    pub fn challenges_pending(&self) -> usize {
        self.vcs.values().filter(|v| v.challenge_due.is_some()).count()
    }

    /// Established and proven (conn.rs): the peer has shown it receives
    /// what we send to it.
    pub fn is_connected(&self, peer: SocketAddr) -> bool {
        self.vcs
            .get(&peer)
            .is_some_and(|v| v.established() && v.unproven.is_none())
    }

    /// VCs created by a CONN_REQ alone whose peer has not proven itself
    /// yet: at most `EngineConfig::max_unproven`, whatever peers send.
    pub fn unproven_count(&self) -> usize {
        self.sh.unproven
    }

    /// Stateless CHALLENGEs to first contacts waiting for a transmission:
    /// at most `FIRST_CONTACT_QUEUE`.
    pub fn first_contacts_pending(&self) -> usize {
        self.first_contact.len()
    }

    /// Whether we hold a VC with `peer`, in whatever state.
    pub fn has_vc(&self, peer: SocketAddr) -> bool {
        self.vcs.contains_key(&peer)
    }

    /// Slots of the VC table (what its memory is sized by).
    #[cfg(test)]
    pub fn vc_table_capacity(&self) -> usize {
        self.vcs.capacity()
    }

    /// Smoothed RTT to `peer`, once measured.
    pub fn srtt(&self, peer: SocketAddr) -> Option<u64> {
        self.vcs.get(&peer).and_then(|v| v.rtt.srtt())
    }

    pub fn send(
        &mut self,
        peer: SocketAddr,
        hdr: MsgHdr,
        src: impl Into<SendPayload>,
        mode: SendMode,
        now: u64,
    ) -> Result<MsgId, EngineError> {
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
    /// copy) and rendezvous requests.
    pub fn send_now(
        &mut self,
        peer: SocketAddr,
        hdr: MsgHdr,
        src: impl Into<SendPayload>,
        mode: SendMode,
        now: u64,
        buf: &mut [u8],
    ) -> Result<(MsgId, Option<usize>), EngineError> {
        self.submit(peer, hdr, src.into(), mode, now, Some(buf))
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
        let quiet = matches!(src, SendPayload::Copied(_));
        let sh = &mut self.sh;
        let id = sh.next_msg_id;
        sh.next_msg_id += 1;
        let len = src.len();
        let body = if mode == SendMode::Eager && len <= eager_max(&sh.cfg) {
            TxBody::Eager {
                payload: src,
                next_off: 0,
                started: false,
                segmented: false,
                unacked: 0,
            }
        } else {
            TxBody::Rndv {
                src: match src {
                    SendPayload::Source(b) => Arc::from(b),
                    SendPayload::Copied(p) => Arc::new(p.into_vec()),
                },
                len: len as u64,
                last_get: false,
                unacked: 0,
                tail: 0,
                push: 0,
            }
        };
        let hdr = MsgHdr { len: len as u64, ..hdr };
        sh.quiet_in_flight += quiet as usize;
        let alone = self.ready.is_empty();
        let vc = vc_for_send(&mut self.vcs, sh, peer, now);
        let mut body = body;
        if let TxBody::Rndv { len, tail, push, .. } = &mut body {
            *tail = rts_tail(*len, vc.seg_limit);
            if vc.push_backoff > 0 {
                vc.push_backoff -= 1;
            } else {
                *push = push_len(*len - *tail as u64, data_room(vc.seg_limit), sh.cfg.rndv_push);
            }
        }
        vc.tx.insert(id, TxMsg { hdr, body, quiet });
        vc.msgs.push_back(id);
        let sent = match buf {
            // The only VC with anything to send: it goes now.
            Some(buf) if alone => {
                sh.zc.src = None;
                vc.transmit_counted(sh, now, buf)
            }
            _ => None,
        };
        // As poll_transmit: after a transmission only a VC with more to
        // send is queued.
        if sent.is_none() || vc.may_transmit(now) {
            mark_ready(&mut self.ready, vc);
        }
        Ok((id, sent))
    }

    /// Bytes an announced rendezvous message was charged to its sender's
    /// credits on arrival (its RTS's tail), for `release`; 0 once accepted
    /// or gone.
    pub fn rts_charge(&self, rid: RndvId) -> u64 {
        self.sh.rx.get(&rid).map_or(0, |rx| rx.tail.len() as u64)
    }

    pub fn accept(&mut self, rid: RndvId, sink: Box<dyn RecvSink>, _now: u64) {
        let sh = &mut self.sh;
        let Some(rx) = sh.rx.get_mut(&rid).filter(|rx| rx.accepted.is_none()) else {
            sh.events.push_back(Event::RecvFailed {
                rid,
                sink,
                err: EngineError::UnknownRndv,
            });
            return;
        };
        let Some(vc) = self.vcs.get_mut(&rx.peer) else {
            sh.rx.remove(&rid);
            sh.events.push_back(Event::RecvFailed {
                rid,
                sink,
                err: EngineError::PeerUnreachable,
            });
            return;
        };
        let want = rx.total.min(sink.capacity() as u64);
        if want == 0 {
            let key = rx.key;
            sh.rx.remove(&rid);
            vc.pushes.remove(&key);
            vc.ctrl.push_back(SegFrame::Fin { key });
            sh.events.push_back(Event::RecvDone { rid, sink, written: 0 });
        } else {
            let key = rx.key;
            // The tail is [head, total): what the receive wants of it is
            // written now, the rest pulled (head >= 1: wire.rs).
            let head = rx.total - rx.tail.len() as u64;
            let from_tail = want.saturating_sub(head);
            let mut sink = sink;
            if from_tail > 0 {
                sink.write_at(head as usize, &rx.tail[..from_tail as usize]);
            }
            rx.tail = Vec::new();
            // Pushed bytes count as asked for (none if some were dropped).
            let push_end = rx.push.min(want - from_tail);
            let acc = rx.accepted.insert(Accepted {
                sink,
                want: want - from_tail,
                from_tail,
                push_end,
                requested: push_end,
                received: 0,
                high: 0,
                seg_room: data_room(vc.seg_limit),
            });
            vc.rx_active += 1;
            sh.pull_order.push_back(rid);
            pump_gets(&mut vc.ctrl, &sh.cfg, rid, key, acc);
        }
        mark_ready(&mut self.ready, vc);
    }

    /// Completes the sender (FIN) without moving any more data. Discarding
    /// an already accepted receive (cancel) returns its sink through
    /// `RecvDone` with the bytes written so far; data still in flight for
    /// it is dropped on arrival.
    pub fn discard(&mut self, rid: RndvId, _now: u64) {
        let sh = &mut self.sh;
        let Some(rx) = sh.rx.remove(&rid) else { return };
        let Some(vc) = self.vcs.get_mut(&rx.peer) else {
            return;
        };
        vc.pushes.remove(&rx.key);
        vc.ctrl.push_back(SegFrame::Fin { key: rx.key });
        if let Some(acc) = rx.accepted {
            vc.rx_active -= 1;
            sh.events.push_back(Event::RecvDone {
                rid,
                sink: acc.sink,
                written: (acc.received + acc.from_tail) as usize,
            });
        }
        mark_ready(&mut self.ready, vc);
    }

    pub fn handle_datagram(&mut self, from: SocketAddr, bytes: &[u8], now: u64) {
        self.sh.stats.datagrams_in += 1;
        self.sh.stats.bytes_in += bytes.len() as u64;
        let pkt = match wire::decode(bytes) {
            Ok(p) => p,
            Err(_) => {
                self.sh.stats.dropped_malformed += 1;
                return;
            }
        };
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
            } => {
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
            Packet::Challenge { echo, cookie } => {
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
            Packet::Ack { conn, ack, sack } => {
                let sh = &mut self.sh;
                let Some(vc) = live_vc(&mut self.vcs, sh, from, conn, now) else {
                    return;
                };
                vc.on_ack(sh, ack, sack, now);
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
            } => self.on_seg_packet(
                from,
                (conn, ack, sack, seq),
                frame,
                bytes[3],
                &bytes[wire::SEG_HDR_LEN..],
                now,
            ),
        }
    }

    fn on_seg_packet(
        &mut self,
        from: SocketAddr,
        (conn, ack, sack, seq): (u64, u32, u64, u32),
        frame: Frame<'_>,
        kind: u8,
        body: &[u8],
        now: u64,
    ) {
        let sh = &mut self.sh;
        let Some(vc) = live_vc(&mut self.vcs, sh, from, conn, now) else {
            return;
        };
        vc.on_ack(sh, ack, sack, now);
        vc.on_seg(sh, seq, frame, kind, body, now);
        // Not for a delayed ACK alone: its timer marks the VC when it is due,
        // and a reply sent before then carries it anyway.
        if vc.may_transmit(now) {
            mark_ready(&mut self.ready, vc);
        }
    }

    /// A guess at where the payload of the next datagram belongs: the next
    /// unreceived bytes of the oldest rendezvous receive still pulling,
    /// which is what a sender serving our GETs in order sends next. The
    /// wire receives the datagram with its header in a buffer of its own and
    /// its payload straight into the returned slice of the receive buffer,
    /// then calls `handle_datagram_placed`. A wrong guess only ever
    /// scribbles on bytes nobody has received yet (at or above the
    /// receive's high mark), which the right data overwrites later.
    pub fn rdata_placement(&mut self) -> Option<(Placement, &mut [u8])> {
        let sh = &mut self.sh;
        while let Some(&rid) = sh.pull_order.front() {
            if sh.rx.get(&rid).is_some_and(|r| r.accepted.is_some()) {
                break;
            }
            sh.pull_order.pop_front();
        }
        let rid = *sh.pull_order.front()?;
        let rx = sh.rx.get_mut(&rid)?;
        let key = rx.key;
        let acc = rx.accepted.as_mut()?;
        // Pushed data comes first, then what the GETs asked for.
        let pushed = acc.high < acc.push_end;
        let limit = if pushed { acc.push_end } else { acc.requested };
        if acc.high >= limit || acc.seg_room < PLACEMENT_MIN_SEG {
            return None;
        }
        let want = ((limit - acc.high) as usize).min(acc.seg_room);
        let offset = acc.high;
        let region = acc.sink.region(offset as usize, want)?;
        if region.is_empty() {
            return None;
        }
        let p = Placement {
            rid,
            pushed,
            key,
            offset,
            len: region.len(),
        };
        Some((p, region))
    }

    /// The datagram received after `rdata_placement` was not the guessed
    /// segment (counted; the caller hands it to `handle_datagram`).
    pub fn placement_missed(&mut self) {
        self.sh.stats.placement_misses += 1;
    }

    /// A datagram received after `rdata_placement` returned `p`: `head` is
    /// its first `RDATA_HEAD_LEN` bytes, and the `len` bytes after them went
    /// into the region of `p`. Processes it and returns true when it is the
    /// RDATA segment that was guessed (and fitted); false otherwise, in
    /// which case nothing happened and the caller reassembles the datagram
    /// for `handle_datagram`.
    pub fn handle_datagram_placed(
        &mut self,
        from: SocketAddr,
        head: &[u8],
        p: &Placement,
        len: usize,
        now: u64,
    ) -> bool {
        let Some(h) = p.matches(head, len) else {
            return false;
        };
        self.sh.stats.datagrams_in += 1;
        self.sh.stats.bytes_in += (head.len() + len) as u64;
        self.sh.stats.rdata_placed += 1;
        self.sh.in_place = Some((p.rid, h.offset, len));
        let (frame, kind) = if h.pushed {
            let frame = Frame::PData {
                key: h.id,
                offset: h.offset,
                payload: &[],
            };
            (frame, wire::kind::PDATA)
        } else {
            let frame = Frame::RData {
                rid: h.id,
                offset: h.offset,
                payload: &[],
            };
            (frame, wire::kind::RDATA)
        };
        self.on_seg_packet(from, (h.conn, h.ack, h.sack, h.seq), frame, kind, &[], now);
        self.sh.in_place = None;
        true
    }

    /// A CONN_REQ (see conn.rs for what it may and may not change).
    fn on_conn_req(&mut self, from: SocketAddr, nonce: u64, cookie: u64, isn: u32, window: u32, now: u64) {
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
                vc.challenge_due = Some(nonce);
                mark_ready(&mut self.ready, vc);
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
        if self.first_contact.len() < FIRST_CONTACT_QUEUE {
            self.first_contact.push_back((from, nonce));
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

    /// The stateless CHALLENGEs to first contacts, before any VC's
    /// datagrams (they hold no VC to come round again). False if `out`
    /// said stop.
    fn send_first_contact_challenges(&mut self, now: u64, out: &mut dyn TxOut) -> bool {
        while let Some(&(to, echo)) = self.first_contact.front() {
            let Some(buf) = out.slot() else { return false };
            let cookie = self.sh.cookie_key.first_contact(to, echo, now);
            let len = wire::encode_challenge(buf, echo, cookie);
            self.first_contact.pop_front();
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

    /// The next datagram, payload included, in `buf`: `poll_transmit_burst`
    /// taking one datagram at a time (the tests' and the fuzzer's way in).
    pub fn poll_transmit(&mut self, now: u64, buf: &mut [u8]) -> Option<(SocketAddr, usize)> {
        let mut one = OneOut { buf, sent: None };
        self.poll_transmit_burst(now, &mut one);
        one.sent
    }

    /// Builds datagrams into `out` until no VC has anything to send or
    /// `out` says stop. As `poll_transmit`, except that a payload is not
    /// copied behind its header: `out` sends it from the source (gather
    /// I/O), saving a copy of every byte of bulk data; a source is valid
    /// only until `commit` returns. A VC sends up to `BURST` datagrams in
    /// a row, with one lookup, before the next ready VC's turn: bulk data
    /// over a 1500-byte MTU is hundreds of segments per MiB, and the
    /// per-datagram round through the ready queue cost as much as the
    /// segment itself.
    pub fn poll_transmit_burst(&mut self, now: u64, out: &mut dyn TxOut) {
        // A source found in one call is never trusted in the next: after
        // its FIN it must not be read again.
        self.sh.zc.src = None;
        if !self.first_contact.is_empty() && !self.send_first_contact_challenges(now, out) {
            return;
        }
        self.sh.zc.on = true;
        while let Some(&addr) = self.ready.front() {
            let Some(vc) = self.vcs.get_mut(&addr) else {
                self.ready.pop_front();
                continue;
            };
            let (mut sent, mut idle, mut stop) = (0, false, false);
            while sent < BURST {
                let Some(buf) = out.slot() else {
                    stop = true;
                    break;
                };
                self.sh.zc.deferred = None;
                let Some(len) = vc.transmit_counted(&mut self.sh, now, buf) else {
                    idle = true;
                    break;
                };
                sent += 1;
                let (hdr_len, payload) = match self.sh.zc.deferred {
                    None => (len, None),
                    Some(d) => {
                        let src: &dyn SendSource = match &self.sh.zc.src {
                            // Rendezvous data: no lookup (bulk data pays this per segment).
                            Some((k, src)) if *k == d.id => &**src,
                            _ => match &vc
                                .tx
                                .get(&d.id)
                                .expect("a deferred payload's message is in its VC")
                                .body
                            {
                                TxBody::Eager { payload, .. } => payload,
                                TxBody::Rndv { src, .. } => &**src,
                            },
                        };
                        (d.hdr_len, Some((src, d.off)))
                    }
                };
                let t = Transmit {
                    to: addr,
                    len,
                    hdr_len,
                    payload,
                };
                if !out.commit(t) {
                    stop = true;
                    break;
                }
            }
            if stop && sent == 0 {
                break;
            }
            // Only a VC with more queued comes round again: the call that
            // would find nothing cost as much as the one that sent.
            self.ready.pop_front();
            vc.in_ready = !idle && vc.may_transmit(now);
            if vc.in_ready {
                self.ready.push_back(addr);
            }
            if stop {
                break;
            }
        }
        self.sh.zc.on = false;
        self.sh.zc.deferred = None;
        self.sh.zc.src = None;
    }

    /// Longest message `send` sends eagerly (`SendMode::Eager`).
    pub fn eager_max(&self) -> usize {
        eager_max(&self.sh.cfg)
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

    /// Whether a rendezvous receive is pulling data (`rdata_placement` may
    /// have a guess): lets a polling caller skip it cheaply.
    pub fn pulling(&self) -> bool {
        !self.sh.pull_order.is_empty()
    }

    /// Whether `poll_transmit` could return anything (no VC is marked
    /// ready): lets a polling caller skip it cheaply.
    pub fn transmit_idle(&self) -> bool {
        self.ready.is_empty() && self.first_contact.is_empty()
    }

    pub fn poll_event(&mut self) -> Option<Event> {
        self.sh.events.pop_front()
    }

    /// O(number of VCs).
    pub fn poll_timeout(&self) -> Option<u64> {
        self.vcs.values().filter_map(|v| v.next_deadline(&self.sh.cfg)).min()
    }

    /// Credits of messages the application has not taken yet, and the
    /// whole budget (credit flow control on).
    pub fn credit_usage(&self) -> Option<(u32, u32)> {
        let bank = self.sh.bank.as_ref()?;
        Some((self.vcs.values().map(|v| v.lender.held()).sum(), bank.cfg.total))
    }

    /// The application took a message from `peer` (matched on arrival, or
    /// later out of the unexpected queue) that was charged `len` bytes
    /// (an eager message's length, a rendezvous one's `rts_charge`): its
    /// credits go back to the peer.
    pub fn release(&mut self, peer: SocketAddr, len: u64) {
        let Some(bank) = &mut self.sh.bank else { return };
        let Some(vc) = self.vcs.get_mut(&peer) else { return };
        bank.on_freed(&mut vc.lender, bank.cfg.cost(len.min(usize::MAX as u64) as usize));
        if vc.lender.wants_news() && !vc.credit_due {
            vc.credit_due = true;
            mark_ready(&mut self.ready, vc);
        }
    }

    pub fn handle_timeout(&mut self, now: u64) {
        let mut failing = std::mem::take(&mut self.failing);
        if let Some(bank) = &mut self.sh.bank {
            tick_bank(bank, &mut self.vcs, &mut self.ready, now);
        }
        let rto = self.sh.cfg.rto_min_ns;
        for vc in self.vcs.values_mut() {
            // A stalled request is repeated: CREDIT datagrams can be lost.
            if vc.borrower.stalled() && now >= vc.credit_retry_at && vc.established() {
                vc.credit_due = true;
                vc.credit_retry_at = now + rto.max(1_000_000);
                mark_ready(&mut self.ready, vc);
            }
        }
        for vc in self.vcs.values_mut() {
            match vc.on_timeout(&mut self.sh, now) {
                Tick::Idle => {}
                Tick::Ready => mark_ready(&mut self.ready, vc),
                Tick::Fail => failing.push((vc.peer, false)),
                Tick::Expire => failing.push((vc.peer, true)),
            }
        }
        for (addr, expired) in failing.drain(..) {
            // An expired VC never announced anything, and holds nothing.
            self.sh.stats.unproven_expired += expired as u64;
            self.fail_vc(addr, EngineError::PeerUnreachable, !expired);
        }
        self.failing = failing;
    }

    pub fn has_pending_work(&self) -> bool {
        !self.ready.is_empty() || !self.sh.events.is_empty() || self.vcs.values().any(Vc::has_pending_work)
    }

    /// Before closing: acknowledge everything received at once, so no peer
    /// waits for a delayed ACK that would never leave.
    pub fn flush_acks(&mut self) {
        let Engine { vcs, ready, .. } = self;
        for vc in vcs.values_mut() {
            if vc.ack_pending {
                vc.ack_now = true;
                mark_ready(ready, vc);
            }
        }
    }

    /// Whether some VC still has sent data its peer has not acknowledged
    /// (what a closing endpoint lingers for).
    pub fn has_unacked(&self) -> bool {
        self.vcs.values().any(|vc| vc.established() && !vc.unacked.is_empty())
    }

    /// Drops the VC; its operations fail with `PeerForgotten` (no
    /// `PeerFailed`: the caller asked for it).
    pub fn forget_peer(&mut self, peer: SocketAddr) {
        self.fail_vc(peer, EngineError::PeerForgotten, false);
    }

    fn fail_vc(&mut self, peer: SocketAddr, err: EngineError, announce: bool) {
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
        let mut rids: Vec<RndvId> = sh.rx.iter().filter(|(_, r)| r.peer == peer).map(|(&k, _)| k).collect();
        rids.sort_unstable();
        for rid in rids {
            let rx = sh.rx.remove(&rid).expect("rid just listed");
            if let Some(acc) = rx.accepted {
                sh.events.push_back(Event::RecvFailed {
                    rid,
                    sink: acc.sink,
                    err,
                });
            }
        }
        if announce {
            sh.stats.peers_failed += 1;
            sh.events.push_back(Event::PeerFailed { peer });
        }
    }
}
