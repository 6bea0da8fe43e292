//! The shm wire's protocol as a machine: per-peer and per-operation state,
//! with no system calls, no shared memory and no clock inside. Inputs are
//! method calls (a send submitted, a frame arrived from ring r, a CMA copy
//! done or refused, a peer gone, the time); outputs are queued `Action`s
//! for the executor (post a control frame, copy across processes, arm or
//! revoke a grant, give credit back, free a ring), `WireEvent`s for the
//! endpoint, and the frames the executor pulls out with `poll_post` when
//! a ring has room (the way a sans-IO connection hands out transmits).
//!
//! The executor (`exec/`) runs actions in order and feeds their results
//! back (`cma_done`, `grant_armed`) before the next input; the machine
//! keeps the state in between explicit, so a test may as well delay them.
//!
//! The protocol, per operation:
//!
//! ```text
//! eager   sender: EAGER into the ring (or its backlog),           complete when published,
//!                 spanning slots beyond one slot's payload        or taken (delivery complete)
//! rndv    sender: RTS{key, iov} ──► receiver matches it
//!           pull:  receiver CMA-reads everything ──► FIN{key}     send complete at FIN
//!           split: ≥ 32 KiB: receiver arms a grant, CTW{key, rid, at, grant, iov} ──►
//!                  sender CMA-writes the tail under the grant ──► WDONE{rid}
//!                  while the receiver reads the head; then ──► FIN{key}
//!                  (with every grant word of the sender's ring armed, the
//!                  receive waits for the next one to come back)
//!           push:  CMA refused: CTS{key, rid} ──► sender pushes DATA{rid, off}
//!                  frames; the receiver answers FIN{key} once all arrived
//! ```
//!
//! Credits: each ring of our mailbox lends its producer `loan` bytes; an
//! EAGER or RTS costs its payload + 128 until the endpoint gives it back
//! (`free_credit`), and a producer that overdraws is cut off. As a sender
//! we keep a peer's loan: an eager send short of credit goes by RTS (the
//! last quarter of the loan is kept for those), an inject waits for credit.

#![forbid(unsafe_code)]

mod recv;
mod send;
#[cfg(test)]
mod tests;

use super::frame::Frame;
use super::mailbox::{self, SLOT_HDR};
use super::{ShmCredit, ShmStats};
use crate::hash::KeyedState;
use crate::nic::wire::{OpId, WireEvent};
use crate::proto::MemRanges;
use crate::proto::{MsgHdr, RecvSink, SendSource};
use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;

pub(crate) use send::EagerStep;

/// Our ring in a peer's mailbox, as the executor numbers it.
pub(crate) type PeerIx = usize;
/// A ring of our own mailbox.
pub(crate) type RingIx = usize;

/// Our ring in a peer's mailbox, as `Port::connect` claimed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Connected {
    pub ix: PeerIx,
    /// Credit bytes its owner lends (0: no limit).
    pub loan: u64,
    /// Bytes of one of its slots, header included.
    pub slot_size: usize,
    /// Slots one message may span there.
    pub span: usize,
}

/// How often the liveness of peers with operations in flight is checked.
pub(crate) const CHECK_EVERY_NS: u64 = 20_000_000;
/// Shm rendezvous at least this long are copied by both processes: the
/// receiver pulls the first half while the sender writes the second
/// (unless the sender is reading a rendezvous of ours: `pulled_by`).
pub(crate) const SPLIT_MIN: usize = 32 << 10;
/// How soon progress must come back while frames wait for ring space or
/// a delivery: a consumer that frees slots rings no bell.
const RETRY_NS: u64 = 50_000;
/// How long a split receive waits for a grant word of its sender's ring
/// before reading the message all by itself: a sender that writes its
/// share gives one back within microseconds; one that does not (not
/// scheduled, or not calling into the provider) must not hold the
/// receive up.
pub(crate) const GRANT_WAIT_NS: u64 = 200_000;

#[derive(Clone, Copy, Debug)]
pub(crate) struct Config {
    /// Payload bytes of a slot of our mailbox: the most a control frame,
    /// an RTS or a pushed DATA frame carries (peers' slots are taken to
    /// hold as much: made with the same tunables).
    pub payload_max: usize,
    /// Slots one eager message may span in our mailbox.
    pub span: usize,
    /// Rings of our mailbox.
    pub nrings: usize,
    /// Credit bytes each ring of our mailbox lends its producer (0: no
    /// limit).
    pub loan: u64,
    /// Whether we read peers' memory (FI_GNIX_CMA); without, peers push.
    pub cma: bool,
    /// Messages longer than this go by rendezvous even if a slot holds
    /// them (FI_GNIX_RNDV_THRESHOLD).
    pub rndv_threshold: usize,
}

/// Ring `ring`'s producer has `freed` credit bytes back (cumulative): what
/// `Machine::free_credit` asks the executor to publish.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct GiveCredit {
    pub ring: RingIx,
    pub freed: u64,
}

/// What the executor must do, in order.
#[derive(Debug)]
pub(crate) enum Action {
    /// A control frame (FIN, CTS, CTW, WDONE) for the local peer at `to`:
    /// route it and `enqueue` it there (dropped if `to` has no mailbox).
    Post { to: SocketAddr, frame: Frame },
    /// Copy `remote` of process `pid` into `local` of ours, as far as both
    /// go; then `cma_done(token, ..)`.
    CmaRead {
        token: Token,
        pid: u32,
        local: MemRanges,
        remote: MemRanges,
    },
    /// Take grant word `grant` of our ring in `peer`'s mailbox for `rid`
    /// (refused if it was revoked), copy `local` of ours into `remote` of
    /// the peer's process, release the grant; then `cma_done(token, ..)`.
    CmaWrite {
        token: Token,
        peer: PeerIx,
        grant: usize,
        rid: u64,
        local: MemRanges,
        remote: MemRanges,
    },
    /// Arm a free grant word of ring `ring` for `rid`; then
    /// `grant_armed(rid, ..)`.
    ArmGrant { ring: RingIx, rid: u64 },
    /// Take grant `grant` of ring `ring` back from `rid`, waiting for a
    /// write under it that already runs (or for its writer to die):
    /// afterwards nothing is written under it.
    RevokeGrant { ring: RingIx, grant: usize, rid: u64 },
    /// Ring `ring` goes back to the pool of free rings.
    FreeRing { ring: RingIx },
}

/// Which copy a `cma_done` reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Token {
    /// All of receive `rid`.
    Pull(u64),
    /// The first part of a split receive `rid`.
    Head(u64),
    /// The rest of a split receive whose sender did not write it.
    Tail(u64),
    /// Our share of send `key` into the peer's receive `rid`: `n` bytes.
    Write { key: u64, rid: u64, n: u64 },
}

/// Why a cross-memory copy did not happen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CmaErr {
    /// The kernel does not let us (Yama, containers, seccomp, another
    /// user): errno EPERM, EACCES or ENOSYS.
    Refused(i32),
    /// The other process is gone (ESRCH).
    Gone,
    /// Anything else: bad addresses (EFAULT), ...
    Fault(i32),
    /// A write whose grant the receiver took back first.
    Revoked,
}

/// A cross-memory copy's outcome: bytes copied, or why not.
pub(crate) type Copied = Result<usize, CmaErr>;

/// What the executor does with a frame it handed to `on_frame`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum OnFrame {
    /// A message in the slot: lend it to the endpoint, then release the
    /// slot. (Its producer is `Machine::ring_peer` of the ring.)
    Eager { hdr: MsgHdr, credit: ShmCredit },
    /// A rendezvous message, kept here as `held` until accepted or
    /// discarded.
    Rndv {
        peer: SocketAddr,
        hdr: MsgHdr,
        held: u64,
        credit: ShmCredit,
    },
    /// Taken care of (control frame, pushed data).
    Handled,
    /// The producer broke the rules: its ring is no longer read (the set
    /// of active rings changed).
    Rejected(&'static str),
}

/// What the executor saw of its ring in a peer's mailbox.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RingView {
    /// The next slot is free.
    pub room: bool,
    /// The credit word: bytes the owner gave back, cumulative; `None`:
    /// not read (the word sits on a line its owner writes for every
    /// message it takes, so each read is a cache miss): the last value
    /// read stands, which only understates the credit.
    pub freed: Option<u64>,
}

/// A frame waiting for ring space (or credit), with its own copy of an
/// eager payload.
struct Queued {
    frame: Frame,
    bytes: Vec<u8>,
    /// Credit bytes it is charged when published.
    cost: u64,
    /// The send it completes once published (or, delivery complete, once
    /// the peer took it).
    done: Option<Done>,
}

#[derive(Clone, Copy)]
struct Done {
    op: OpId,
    delivery: bool,
}

/// Our ring in a peer's mailbox.
struct PeerOut {
    addr: SocketAddr,
    /// Bytes of one of its slots, header included.
    slot_size: usize,
    /// The longest eager message it holds (spanning slots).
    msg_max: usize,
    /// Credit bytes the owner lends us (0: no limit).
    loan: u64,
    /// Credit bytes charged by what we published (cumulative).
    charged: u64,
    /// Credit bytes the owner gave back (cumulative), as last seen.
    freed: u64,
    /// Position of the next slot we publish.
    tail: u64,
    /// Sends whose way was chosen (`copies_to`), by size class, for the
    /// exploring ones.
    chosen: [u32; super::choice::CLASSES],
    /// Control frames (FIN, CTS, CTW, WDONE) waiting for room: they go
    /// before any queued message. They cost no credit and belong to
    /// rendezvous already under way, which the peer may be waiting for
    /// before it takes (and gives credit back for) what we queued: behind
    /// a queue of requests in a full ring they would stall both ways.
    ctrlq: VecDeque<Frame>,
    outq: VecDeque<Queued>,
    /// Credit bytes of the frames in `outq`.
    outq_cost: u64,
    /// Published slots whose sends complete once the peer took them:
    /// (position, op), oldest first.
    delivery: VecDeque<(u64, OpId)>,
    /// Sends pushing data to this peer (it answered CTS), by key, oldest
    /// first; their DATA frames go when `outq` is empty, or its head waits
    /// for credit.
    pushes: VecDeque<u64>,
}

impl PeerOut {
    /// Ring positions a frame of `len` payload bytes takes.
    fn span_of(&self, len: usize) -> u64 {
        mailbox::span_of(len, self.slot_size) as u64
    }

    /// Credit bytes we may still charge.
    fn credit(&self) -> u64 {
        if self.loan == 0 {
            return u64::MAX;
        }
        self.loan.saturating_sub(self.charged.saturating_sub(self.freed))
    }

    /// Credit for a new frame once the queue ahead of it is published.
    fn credit_ahead(&self) -> u64 {
        self.credit().saturating_sub(self.outq_cost)
    }

    /// Whether an eager message costing `cost` may go eagerly at all: an
    /// inject (its buffer is the application's again on return) always
    /// may; any other send rather goes by rendezvous than spend the last
    /// quarter of the loan, which stays for RTS frames.
    fn eager_allowed(&self, cost: u64, inject: bool) -> bool {
        inject || self.credit_ahead() >= cost.saturating_add(self.loan / 4)
    }

    /// Whether a message costing `cost` can be published before anything
    /// else: nothing queued ahead, and the credit known covers it.
    fn goes_first(&self, cost: u64) -> bool {
        self.outq.is_empty() && self.credit() >= cost
    }

    /// Whether an eager send costing `cost` goes out at once on the credit
    /// known: first, and eagerly at all.
    #[inline]
    fn sends_now(&self, cost: u64, inject: bool) -> bool {
        self.goes_first(cost) && self.eager_allowed(cost, inject)
    }
}

/// A rendezvous send waiting for its FIN (pushing data after a CTS).
struct TxRndv {
    op: OpId,
    peer: PeerIx,
    src: Box<dyn SendSource>,
    /// Where `src`'s bytes are in our memory (what the RTS advertised).
    addrs: MemRanges,
    /// Pushing: the receiver's rid and the next offset to push.
    push: Option<(u64, u64)>,
}

/// A ring of our mailbox.
#[derive(Clone, Copy, Default)]
struct RingIn {
    /// Bumped by every claim, ban and retirement: credit of an older
    /// generation is not given back to whoever holds the ring now.
    gen: u64,
    /// Credit bytes its messages hold, and those given back (cumulative).
    held: u64,
    freed: u64,
    /// Its producer: address and process.
    peer: Option<(SocketAddr, u32)>,
}

/// A rendezvous message the endpoint has not taken yet.
struct HeldRts {
    peer: SocketAddr,
    pid: u32,
    ring: RingIx,
    gen: u64,
    key: u64,
    len: u64,
    iov: MemRanges,
}

/// A rendezvous receive in progress.
struct RxOp {
    op: OpId,
    peer: SocketAddr,
    pid: u32,
    key: u64,
    /// The message's length.
    len: u64,
    state: RxState,
}

enum RxState {
    /// Only while a handler moves the state out to change it.
    Moving,
    /// Waiting for a grant word, to split the copy with the sender.
    Arming(Split),
    /// Reading all of it.
    Pull { sink: Box<dyn RecvSink> },
    /// Split: we read the head, the sender writes the rest and says WDONE.
    Split {
        s: Split,
        grant: usize,
        head_read: bool,
        wdone: Option<i64>,
    },
    /// The sender did not write its part: we read it.
    Tail { total: u64, sink: Box<dyn RecvSink> },
    /// No cross-memory attach: the sender pushes DATA frames.
    Push { sink: Box<dyn RecvSink>, got: u64 },
}

/// A receive copied by both processes: we read the part before `at`.
struct Split {
    ring: RingIx,
    at: u64,
    total: u64,
    local: MemRanges,
    remote: MemRanges,
    /// For the push fallback, should the read be refused.
    sink: Box<dyn RecvSink>,
}

pub(crate) struct Machine {
    cfg: Config,
    /// The longest message a ring shaped like ours holds (spanning
    /// `cfg.span` slots).
    msg_max: usize,
    peers: Vec<Option<PeerOut>>,
    rings: Vec<RingIn>,
    /// Rings of our mailbox that peers claimed and we read.
    active: Vec<RingIx>,
    /// Rings whose producer broke the rules: no longer read, and not
    /// handed to anyone else while that producer may still write them.
    banned: Vec<RingIx>,
    /// Peers whose memory the kernel refused to let us read.
    no_cma: HashSet<SocketAddr, KeyedState>,
    /// Per ring of our mailbox, split receives waiting for one of its
    /// grant words (all armed for other receives from that sender): (rid,
    /// when the wait was first seen by `expire_grant_waits`, 0 before),
    /// oldest first; and how many over all rings.
    grant_waits: Vec<VecDeque<(u64, u64)>>,
    waiting_grants: usize,
    tx: HashMap<u64, TxRndv, KeyedState>,
    next_key: u64,
    held: HashMap<u64, HeldRts, KeyedState>,
    next_held: u64,
    rx: HashMap<u64, RxOp, KeyedState>,
    next_rid: u64,
    /// Frames in send queues (those that complete a send, and the
    /// others), sends with data left to push, sends awaiting delivery:
    /// counted, so that idle passes skip the walks.
    queued: usize,
    queued_sends: usize,
    pushing: usize,
    delivering: usize,
    actions: VecDeque<Action>,
    events: VecDeque<WireEvent>,
    last_check: u64,
    pub stats: ShmStats,
}

impl Machine {
    /// `seed` keys the hash maps that peers' addresses and ids fill.
    pub fn new(cfg: Config, seed: u64) -> Machine {
        Machine {
            cfg,
            msg_max: mailbox::msg_max(cfg.span, cfg.payload_max + SLOT_HDR),
            peers: Vec::new(),
            rings: vec![RingIn::default(); cfg.nrings],
            active: Vec::new(),
            banned: Vec::new(),
            no_cma: HashSet::with_hasher(KeyedState(seed)),
            grant_waits: vec![VecDeque::new(); cfg.nrings],
            waiting_grants: 0,
            tx: HashMap::with_hasher(KeyedState(seed ^ 1)),
            next_key: 1,
            held: HashMap::with_hasher(KeyedState(seed ^ 2)),
            next_held: 1,
            rx: HashMap::with_hasher(KeyedState(seed ^ 3)),
            // Grant words hold rid << 2: rids stay below 2^62.
            next_rid: 1,
            queued: 0,
            queued_sends: 0,
            pushing: 0,
            delivering: 0,
            actions: VecDeque::new(),
            events: VecDeque::new(),
            last_check: 0,
            stats: ShmStats::default(),
        }
    }

    // The endpoint sets it once it drives the wire through `Wire`.
    #[allow(dead_code)]
    pub fn set_rndv_threshold(&mut self, t: usize) {
        self.cfg.rndv_threshold = t;
    }

    /// Longest message sent eagerly (spanning slots).
    pub fn eager_max(&self) -> usize {
        self.msg_max.min(self.cfg.rndv_threshold)
    }

    /// Longest one-sided request sent in one message to peer `ix`: what
    /// its ring holds (`Connected::span`), and never more than a far
    /// peer's slots (`cache::FAR_SPAN`), even under one cache. The target
    /// copies a request out of its slot whole before applying it
    /// (`ep/rma_target.rs`), so a longer one costs more than a head and a
    /// pulled data message: fabtests `fi_rma_bw -o write -S 49152` ran
    /// 3.9-5.3 GB/s in one message against 7.1-7.4 as head and data.
    pub fn request_max_to(&self, ix: PeerIx) -> usize {
        let there = self
            .peers
            .get(ix)
            .and_then(Option::as_ref)
            .map_or(usize::MAX, |p| p.msg_max);
        let far = mailbox::msg_max(
            crate::nic::shm::cache::span_to(self.cfg.span, false),
            self.cfg.payload_max + SLOT_HDR,
        );
        self.eager_max().min(there).min(far)
    }

    /// Whether a message of `len` bytes goes eagerly: up to what `span`
    /// slots hold (and the rendezvous threshold); an inject always when
    /// they hold it, so its copy never has to stay with us.
    pub fn eager_fits(&self, len: usize, inject: bool) -> bool {
        len <= self.eager_max() || inject && len <= self.msg_max
    }

    /// Whether a send of `len` bytes to peer `ix` that `eager_fits` and
    /// spans slots is copied through its ring, its owner wanting at most
    /// `copy_max` copied (`choice.rs`, which also sends one in
    /// `choice::EXPLORE` the other way); else it goes by rendezvous.
    pub fn copies_to(&mut self, ix: PeerIx, len: usize, copy_max: usize) -> bool {
        let Some(p) = self.peers.get_mut(ix).and_then(Option::as_mut) else {
            return true;
        };
        let payload = p.slot_size.saturating_sub(SLOT_HDR);
        // Beyond the classes (more than a ring spans): counted with the
        // last.
        let c = super::choice::class_of(len, payload).unwrap_or(super::choice::CLASSES - 1);
        p.chosen[c] = p.chosen[c].wrapping_add(1);
        super::choice::copies(len, copy_max, p.chosen[c])
    }

    /// Payload bytes of one slot of our mailbox.
    pub fn payload_max(&self) -> usize {
        self.cfg.payload_max
    }

    /// Whether we read peers' memory (FI_GNIX_CMA).
    pub fn cma(&self) -> bool {
        self.cfg.cma
    }

    /// Whether the executor has anything to do (`poll_action`).
    #[inline]
    pub fn has_actions(&self) -> bool {
        !self.actions.is_empty()
    }

    /// Whether an operation ended (`poll_event`).
    #[inline]
    pub fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    /// The next thing the executor must do.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// The next end of an operation.
    pub fn poll_event(&mut self) -> Option<WireEvent> {
        self.events.pop_front()
    }

    /// Rings of our mailbox to read, in no particular order.
    pub fn active(&self) -> &[RingIx] {
        &self.active
    }

    pub fn banned(&self) -> &[RingIx] {
        &self.banned
    }

    /// Our rings in peers' mailboxes.
    pub fn peer_ixs(&self) -> impl Iterator<Item = PeerIx> + '_ {
        self.peers
            .iter()
            .enumerate()
            .filter(|(_, p)| p.is_some())
            .map(|(i, _)| i)
    }

    pub fn peer_addr(&self, ix: PeerIx) -> Option<SocketAddr> {
        self.peers.get(ix)?.as_ref().map(|p| p.addr)
    }

    /// The producer of ring `ring` of our mailbox (`None`: unclaimed).
    #[inline]
    pub fn ring_peer(&self, ring: RingIx) -> Option<&SocketAddr> {
        self.rings.get(ring)?.peer.as_ref().map(|(a, _)| a)
    }

    /// Rings in our mailbox.
    pub fn nrings(&self) -> usize {
        self.rings.len()
    }

    /// Any local peer we talk to, or that talks to us.
    pub fn in_use(&self) -> bool {
        !self.active.is_empty() || self.peers.iter().any(Option::is_some)
    }

    #[cfg(test)]
    /// Frames waiting for ring space or credit, over all peers.
    pub fn backlogged(&self) -> usize {
        self.queued
    }

    /// Waiting frames that complete no send of their own (RTS, control
    /// frames): the endpoint counts the others as its sends.
    pub fn backlogged_untracked(&self) -> usize {
        self.queued - self.queued_sends
    }

    /// Frames to post or data to push: `poll_post` has work.
    pub fn wants_post(&self) -> bool {
        self.queued > 0 || self.pushing > 0
    }

    /// Published sends waiting for their peer to take them.
    pub fn delivering(&self) -> usize {
        self.delivering
    }

    /// Anything in flight that waits on a peer.
    pub fn in_flight(&self) -> bool {
        !self.tx.is_empty() || !self.rx.is_empty() || self.queued > 0 || self.delivering > 0
    }

    /// What we still owe peers: frames to post, data to push (closing
    /// waits, bounded, for these).
    pub fn owes(&self) -> bool {
        self.queued > 0 || self.pushing > 0
    }

    /// When progress must run even if nothing arrives: soon while frames
    /// wait for room or deliveries for their reader, at the next liveness
    /// check while operations wait on peers.
    pub fn next_deadline(&self, now: u64) -> Option<u64> {
        if self.queued > 0 || self.pushing > 0 || self.delivering > 0 {
            Some(now + RETRY_NS)
        } else if self.waiting_grants > 0 {
            Some(now + GRANT_WAIT_NS)
        } else if self.in_flight() {
            Some(self.last_check + CHECK_EVERY_NS)
        } else {
            None
        }
    }

    /// Whether a pass at `now` has nothing of the machine's to do but read
    /// the rings: no frame waits to be posted, no send for its delivery,
    /// no action for the executor, no event for the endpoint, no grant
    /// for its timeout, no liveness check due. (`check_due` and
    /// `expire_grant_waits` would say nothing, and `run`, `deliver` and
    /// the posting of queued frames would find nothing.)
    #[inline]
    pub fn idle(&self, now: u64) -> bool {
        !self.wants_post()
            && self.delivering == 0
            && self.waiting_grants == 0
            && !self.has_actions()
            && !self.has_events()
            && !self.check_pending(now)
    }

    /// Until when passes that find no slot have nothing of the machine's
    /// to do: while `idle`, its next liveness check; else 0.
    pub fn idle_until(&self, now: u64) -> u64 {
        if self.idle(now) {
            self.last_check + CHECK_EVERY_NS
        } else {
            0
        }
    }

    /// Whether a liveness check is due at `now` (`check_due`, which also
    /// takes it).
    #[inline]
    fn check_pending(&self, now: u64) -> bool {
        now >= self.last_check + CHECK_EVERY_NS
    }

    /// Whether it is time to check on peers' liveness (then the executor
    /// reports what it finds: `peer_gone`, `retire`, `unban`).
    pub fn check_due(&mut self, now: u64) -> bool {
        if !self.check_pending(now) {
            return false;
        }
        self.last_check = now;
        true
    }

    fn event(&mut self, e: WireEvent) {
        self.events.push_back(e);
    }

    fn post(&mut self, to: SocketAddr, frame: Frame) {
        self.actions.push_back(Action::Post { to, frame });
    }
}
