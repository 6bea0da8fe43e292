//! Sans-IO protocol machines (DESIGN.md §7).
//!
//! `Engine` is the UDP wire of one endpoint: virtual connections (one per
//! peer address), the reliability layer and the eager/rendezvous message
//! layer, as a deterministic state machine. Datagrams and time go in,
//! datagrams and events come out; nothing here touches a socket, a clock or
//! a thread, so the tests can drive loss, reordering and peer death in
//! virtual time. Randomness (connection ids, ISNs, keys) comes from the
//! `Entropy` the engine is built with: the OS's for the endpoint
//! (`OsEntropy`, the one piece here that makes a system call), a seeded
//! generator for the tests.
//!
//! No `unsafe` anywhere in this tree, and none may come in: the machines
//! are pure state and arithmetic (the wires do the I/O).
#![forbid(unsafe_code)]

mod conn;
pub mod credit;
mod engine;
mod entropy;
mod rel;
mod siphash;
pub mod wire;

#[cfg(any(test, feature = "fuzz"))]
pub mod fuzz;
#[cfg(test)]
mod sim;
#[cfg(test)]
mod tests;

pub use engine::{Engine, Placement, Refusal, Transmit, TxOut, MAX_EAGER_LEN};
pub use entropy::{Entropy, OsEntropy};

use std::fmt;
use std::net::SocketAddr;

/// Tunables of one engine. Both ends are assumed to use similar values;
/// only the receive window is exchanged in the handshake.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Largest datagram we emit, headers included. A VC sizes its segments
    /// with the value in force when it is created, and `poll_transmit`
    /// needs a buffer at least that large.
    pub max_datagram: usize,
    /// Addresses of this host: a peer at one of them is reached through
    /// loopback, whose MTU is far larger than the interface's.
    pub local_ips: Vec<std::net::IpAddr>,
    /// `max_datagram` towards peers at `local_ips` (0: same as `max_datagram`).
    pub local_max_datagram: usize,
    /// Send window in segments (capped by the peer's advertised receive window).
    pub window_segments: u32,
    /// Cap on bytes in flight (sent, neither acknowledged nor selectively
    /// acknowledged), so a burst cannot overrun the receiver's socket buffer.
    pub window_bytes: usize,
    /// Messages longer than this go rendezvous.
    pub rndv_threshold: usize,
    /// Delay of an ACK that has no outgoing data to ride on.
    pub ack_delay_ns: u64,
    /// An ACK that completes a send its peer waits for (a rendezvous
    /// message, or an eager one marked wire::MSG_AWAITED: not an inject)
    /// leaves in the pass that took the segment, rather than wait for the
    /// application's next call, where its answer would carry it. For
    /// manual progress, where there may be no next call: a receiver that
    /// goes on to wait elsewhere (fi_pingpong's control socket, a
    /// computation) would leave its peer's send pending until it came
    /// back, or until the peer gave it up for dead.
    pub ack_completions_now: bool,
    pub rto_init_ns: u64,
    pub rto_min_ns: u64,
    pub rto_max_ns: u64,
    /// A segment retransmitted this many times without being acknowledged
    /// means the peer failed.
    pub max_retrans: u32,
    /// Silence this long while we wait for the peer means the peer failed.
    pub peer_timeout_ns: u64,
    /// While we wait for the peer with nothing unacknowledged (a
    /// rendezvous send waiting for its GETs, a pull waiting for data),
    /// silence this long (or a quarter of `peer_timeout_ns`, if shorter)
    /// sends a keepalive: a live peer acknowledges it, a dead one's host
    /// refuses it (engine/refused.rs) and a silent one lets the peer
    /// timeout fire. `u64::MAX`: a quarter of the peer timeout.
    pub keepalive_ns: u64,
    /// Rendezvous receive: most bytes requested (GET) but not yet received.
    pub rndv_pull_window: u64,
    /// Rendezvous receive: bytes asked for by one GET.
    pub rndv_get_chunk: u64,
    /// Rendezvous send: bytes sent right behind the RTS, before any GET
    /// (rounded down to whole segments, and always less than the message,
    /// so the receiver asks for the rest). A receive that is posted when
    /// the RTS arrives takes them where they belong and the round trip to
    /// the first GET is saved; otherwise they are dropped and pulled
    /// again, and the sender stops pushing to that peer for a while. 0: off.
    pub rndv_push: u64,
    /// An eager message at least this long is surfaced at its first
    /// segment, as a held message (`MsgBody::Rndv`): a receive that takes
    /// it then gets the rest written straight into its buffer as it
    /// arrives, one copy fewer than reassembling it first; until one does,
    /// the engine keeps what arrived. `u64::MAX`: off.
    pub eager_place_min: u64,
    /// Credit flow control of eager and unexpected traffic (credit.rs);
    /// `None` turns it off (both ends must agree).
    pub credits: Option<credit::CreditConfig>,
    /// Most VCs created by a CONN_REQ alone whose peer has not yet shown
    /// that it receives what we send (conn.rs): beyond this, a CONN_REQ
    /// from a new address is answered with a stateless CHALLENGE and
    /// costs its requester one round trip. Bounds what a flood of forged
    /// first contacts can make us hold.
    pub max_unproven: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            max_datagram: 1472,
            local_ips: Vec::new(),
            local_max_datagram: 0,
            window_segments: 4096,
            window_bytes: 4 << 20,
            rndv_threshold: 64 << 10,
            ack_delay_ns: 50_000,
            ack_completions_now: false,
            rto_init_ns: 5_000_000,
            // A floor well above loopback and LAN round trips: on a loaded
            // host a peer is descheduled for a time slice (ms) now and
            // then, and a timer that fires before it runs again resends
            // data that was never lost. Real losses are mostly repaired by
            // SACK-driven fast retransmit, which does not wait for the RTO.
            rto_min_ns: 2_000_000,
            rto_max_ns: 2_000_000_000,
            max_retrans: 25,
            peer_timeout_ns: 20_000_000_000,
            keepalive_ns: u64::MAX,
            rndv_pull_window: 8 << 20,
            rndv_get_chunk: 1 << 20,
            rndv_push: 128 << 10,
            // Below this the copy saved costs less than the held message's
            // bookkeeping.
            eager_place_min: 16 << 10,
            credits: None,
            // A bare VC is under 1 KiB (760 bytes and its slot in the VC
            // table): at most ~1 MiB for a flood, and room for a thousand
            // real peers connecting in the same round trip before any of
            // them is challenged.
            max_unproven: 1024,
        }
    }
}

/// Pieces of memory of this process, (address, length) in order: where a
/// send's bytes are or a receive's go, as a peer on this host reads or
/// writes them. Two inline, since nearly every operation names one buffer
/// (or a copied head and a buffer): the rendezvous path passes such lists
/// from the endpoint through the wire's machine to the frames, and would
/// otherwise allocate for each.
pub type MemRanges = smallvec::SmallVec<[(u64, u64); 2]>;

/// Where a send's payload comes from. The engine reads from it when it
/// builds a segment (eager) or when the receiver pulls (rendezvous),
/// possibly several times for the same range (retransmission), until the
/// send completes; it never copies the payload up front.
pub trait SendSource: Send + Sync {
    fn len(&self) -> usize;
    fn read_at(&self, offset: usize, dst: &mut [u8]);
    /// `read_at` into memory another core reads next (the slots of a
    /// peer's ring): with streaming stores where the source can
    /// (`nic::stream`), all of them fenced before it returns.
    fn stream_at(&self, offset: usize, dst: &mut [u8]) {
        self.read_at(offset, dst)
    }
    /// `len` bytes from `offset` as one slice, if they are contiguous in
    /// memory (lets the wire send them without a copy).
    fn contiguous(&self, _offset: usize, _len: usize) -> Option<&[u8]> {
        None
    }
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Where the bytes are in this process, as (address, length) pieces in
    /// order, if they stay there until the send completes: a peer on this
    /// host may read them from there (the shm wire's cross-memory attach).
    fn ranges(&self) -> Option<MemRanges> {
        None
    }
}

/// A boxed source reads as the source it holds.
impl<T: SendSource + ?Sized> SendSource for Box<T> {
    fn len(&self) -> usize {
        (**self).len()
    }
    fn read_at(&self, offset: usize, dst: &mut [u8]) {
        (**self).read_at(offset, dst)
    }
    fn stream_at(&self, offset: usize, dst: &mut [u8]) {
        (**self).stream_at(offset, dst)
    }
    fn contiguous(&self, offset: usize, len: usize) -> Option<&[u8]> {
        (**self).contiguous(offset, len)
    }
    fn ranges(&self) -> Option<MemRanges> {
        (**self).ranges()
    }
}

impl SendSource for Vec<u8> {
    fn len(&self) -> usize {
        Vec::len(self)
    }
    fn read_at(&self, offset: usize, dst: &mut [u8]) {
        dst.copy_from_slice(&self[offset..offset + dst.len()]);
    }
    fn contiguous(&self, offset: usize, len: usize) -> Option<&[u8]> {
        self.get(offset..offset + len)
    }
    fn ranges(&self) -> Option<MemRanges> {
        Some(smallvec::smallvec![(self.as_ptr() as u64, Vec::len(self) as u64)])
    }
}

/// A send's payload as the engine holds it until the send completes.
pub enum SendPayload {
    /// The engine's own copy of the payload (an inject, or a send with
    /// inject-complete semantics), held inline in the message up to
    /// `INLINE_PAYLOAD` bytes. The caller has completed such a send
    /// already: the engine emits no SendDone or SendFailed for it
    /// (`Engine::quiet_in_flight` counts them until acknowledged).
    Copied(Payload),
    /// Read from the source whenever a segment is built or data is pulled.
    Source(Box<dyn SendSource>),
}

impl SendSource for SendPayload {
    fn len(&self) -> usize {
        match self {
            SendPayload::Copied(p) => p.len(),
            SendPayload::Source(s) => s.len(),
        }
    }
    fn read_at(&self, offset: usize, dst: &mut [u8]) {
        match self {
            SendPayload::Copied(p) => dst.copy_from_slice(&p[offset..offset + dst.len()]),
            SendPayload::Source(s) => s.read_at(offset, dst),
        }
    }
    fn stream_at(&self, offset: usize, dst: &mut [u8]) {
        match self {
            // The engine's own short copy: read plainly.
            SendPayload::Copied(_) => self.read_at(offset, dst),
            SendPayload::Source(s) => s.stream_at(offset, dst),
        }
    }
    fn contiguous(&self, offset: usize, len: usize) -> Option<&[u8]> {
        match self {
            SendPayload::Copied(p) => p.get(offset..offset + len),
            SendPayload::Source(s) => s.contiguous(offset, len),
        }
    }
    fn ranges(&self) -> Option<MemRanges> {
        match self {
            // Inline bytes move with the payload: no stable address.
            SendPayload::Copied(_) => None,
            SendPayload::Source(s) => s.ranges(),
        }
    }
}

impl<T: SendSource + 'static> From<Box<T>> for SendPayload {
    fn from(b: Box<T>) -> SendPayload {
        SendPayload::Source(b)
    }
}

/// Where a rendezvous receive's data goes. Each byte below
/// `min(message length, capacity())` is written exactly once, in no
/// particular order.
pub trait RecvSink: Send {
    fn capacity(&self) -> usize;
    fn write_at(&mut self, offset: usize, src: &[u8]);
    /// Up to `len` bytes from `offset` as one writable slice (shorter where
    /// the buffer is not contiguous), so the wire can receive into it
    /// directly; None if the sink cannot offer that.
    fn region(&mut self, _offset: usize, _len: usize) -> Option<&mut [u8]> {
        None
    }
}

impl RecvSink for Vec<u8> {
    fn capacity(&self) -> usize {
        self.len()
    }
    fn write_at(&mut self, offset: usize, src: &[u8]) {
        self[offset..offset + src.len()].copy_from_slice(src);
    }
    fn region(&mut self, offset: usize, len: usize) -> Option<&mut [u8]> {
        let end = offset.checked_add(len)?.min(self.len());
        self.get_mut(offset..end)
    }
}

/// Application-level header carried end to end. `len` is set by the engine
/// on receive (the sender's payload length); `flags` is opaque to the engine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MsgHdr {
    pub tag: u64,
    pub data: u64,
    pub len: u64,
    pub flags: u32,
}

impl MsgHdr {
    pub const TAGGED: u32 = 1 << 0;
    pub const HAS_DATA: u32 = 1 << 1;
}

pub type MsgId = u64;
pub type RndvId = u64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendMode {
    /// A hint: a message longer than `rndv_threshold` still goes rendezvous.
    Eager,
    #[cfg_attr(
        not(any(test, feature = "fuzz")),
        expect(dead_code, reason = "the tests force short messages rendezvous")
    )]
    Rendezvous,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineError {
    /// Retransmission limit or silence timeout.
    PeerUnreachable,
    /// The peer's host refused our datagrams: no socket holds its port
    /// (ICMP port unreachable; engine/refused.rs).
    PeerRefused,
    /// The peer came back with a new incarnation at the same address.
    PeerRestarted,
    /// `forget_peer` dropped the VC.
    #[cfg_attr(
        not(any(test, feature = "fuzz")),
        expect(dead_code, reason = "forget_peer has no caller in the provider yet")
    )]
    PeerForgotten,
    /// `accept` of a rendezvous id the engine does not know (already
    /// accepted, discarded, or its peer failed).
    UnknownRndv,
    /// Address the engine cannot send to (unspecified ip or port 0).
    InvalidAddress,
    /// `max_datagram` too small to carry any frame.
    DatagramTooSmall,
}

impl fmt::Display for EngineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

impl std::error::Error for EngineError {}

/// An eager message's bytes: up to `INLINE_PAYLOAD` of them inline, so a
/// small message costs no allocation between the datagram and the
/// receive buffer it is copied into.
pub type Payload = smallvec::SmallVec<[u8; INLINE_PAYLOAD]>;
pub const INLINE_PAYLOAD: usize = 64;

pub enum MsgBody {
    Eager(Payload),
    Rndv(RndvId),
}

impl fmt::Debug for MsgBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MsgBody::Eager(v) => write!(f, "Eager({} bytes)", v.len()),
            MsgBody::Rndv(r) => write!(f, "Rndv({r})"),
        }
    }
}

pub enum Event {
    /// A message arrived; per peer in send order. Eager: payload complete.
    Msg {
        peer: SocketAddr,
        hdr: MsgHdr,
        body: MsgBody,
    },
    /// All wanted data of an accepted rendezvous receive is in its sink (the
    /// ACK that tells the sender follows at the next transmission chance).
    RecvDone {
        rid: RndvId,
        #[cfg_attr(
            not(feature = "fuzz"),
            expect(dead_code, reason = "the sink goes back to its owner, who drops it with the event")
        )]
        sink: Box<dyn RecvSink>,
        written: usize,
    },
    /// Eager: every segment acknowledged. Rendezvous: every RDATA segment
    /// up to the receiver's GET_LAST acknowledged, or its FIN (it wanted
    /// no data, or discarded the message).
    SendDone {
        id: MsgId,
    },
    SendFailed {
        id: MsgId,
        err: EngineError,
    },
    RecvFailed {
        rid: RndvId,
        #[cfg_attr(
            not(any(test, feature = "fuzz")),
            expect(dead_code, reason = "the sink goes back to its owner, who drops it with the event")
        )]
        sink: Box<dyn RecvSink>,
        err: EngineError,
    },
    /// A VC failed; emitted once, after the failures of its operations.
    PeerFailed {
        peer: SocketAddr,
    },
    /// A VC to `peer` was established (or re-established after the peer
    /// restarted).
    PeerUp {
        peer: SocketAddr,
    },
}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::Msg { peer, hdr, body } => write!(f, "Msg({peer}, {hdr:?}, {body:?})"),
            Event::RecvDone { rid, written, .. } => write!(f, "RecvDone({rid}, {written})"),
            Event::SendDone { id } => write!(f, "SendDone({id})"),
            Event::SendFailed { id, err } => write!(f, "SendFailed({id}, {err})"),
            Event::RecvFailed { rid, err, .. } => write!(f, "RecvFailed({rid}, {err})"),
            Event::PeerFailed { peer } => write!(f, "PeerFailed({peer})"),
            Event::PeerUp { peer } => write!(f, "PeerUp({peer})"),
        }
    }
}

/// Counters; monotonic over the engine's life.
#[derive(Clone, Debug, Default)]
pub struct EngineStats {
    pub datagrams_in: u64,
    pub datagrams_out: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// Failed to decode (truncated, bad magic/version/kind, impossible
    /// length) or violated the message protocol.
    pub dropped_malformed: u64,
    /// Wrong connection id (old incarnation or forged), or a handshake
    /// answer that does not match our request.
    pub dropped_stale: u64,
    /// Non-handshake datagram from an address we have no VC with.
    pub dropped_unknown_peer: u64,
    /// Sequence number beyond the receive window, or older than it by more
    /// than a window.
    pub dropped_out_of_window: u64,
    /// Data that arrived before our handshake with its sender completed.
    pub dropped_early: u64,
    /// Rendezvous data for no accepted receive, or outside it.
    pub dropped_rndv: u64,
    /// Out-of-order segments dropped (unsacked) because too many bytes were
    /// already parked waiting for a hole to fill.
    pub dropped_ooo_budget: u64,
    pub segments_sent: u64,
    pub retransmits: u64,
    pub fast_retransmits: u64,
    pub rto_expirations: u64,
    pub dup_segments: u64,
    pub ooo_segments: u64,
    /// Standalone ACK datagrams.
    pub acks_sent: u64,
    /// ACKs a message's datagram brought that waited until the message
    /// was handed out (engine/later.rs).
    pub acks_held: u64,
    pub conn_reqs_sent: u64,
    pub conn_resps_sent: u64,
    pub peers_failed: u64,
    /// Eager messages surfaced at their first segment (`eager_place_min`),
    /// and of those the ones a receive took before their last segment.
    pub eager_held: u64,
    pub eager_placed: u64,
    /// A CONN_REQ echoed the cookie of our CHALLENGE: the old VC failed
    /// (PeerRestarted) and a new one was accepted.
    pub peers_restarted: u64,
    /// CONN_REQs with a new connection id on an established VC that did
    /// not carry the right cookie: answered with a CHALLENGE, VC untouched
    /// (a forgery or a replay, or the first request of a restarted peer).
    /// Of those, the ones that carried a cookie, and a wrong one. And the
    /// CHALLENGE datagrams sent (fewer when requests come faster than we
    /// transmit: the queue of challenges to send is bounded, and a request
    /// already in it is not queued twice).
    pub conn_reqs_challenged: u64,
    pub conn_reqs_forged: u64,
    pub challenges_sent: u64,
    /// CONN_REQs with the connection id of the live VC: answered again,
    /// VC untouched (our answer was lost, or a replay).
    pub conn_reqs_duplicate: u64,
    /// CHALLENGEs of a peer that held a VC of our previous incarnation,
    /// answered with a CONN_REQ carrying the cookie. (Those that do not
    /// name a VC we are connecting count as dropped_stale or
    /// dropped_unknown_peer.)
    pub challenges_answered: u64,
    /// CONN_REQs from an address we had no VC with while `max_unproven`
    /// VCs were unproven: answered with a stateless CHALLENGE, nothing
    /// kept. Of those, the ones not answered because `CHALLENGE_QUEUE`
    /// answers were already waiting (the requester retries).
    pub first_contacts_challenged: u64,
    pub first_contacts_dropped: u64,
    /// Unproven VCs (created by a CONN_REQ alone) dropped silently after
    /// `peer_timeout_ns` without their peer ever echoing our connection id.
    pub unproven_expired: u64,
    /// Unproven VCs whose peer id was replaced by the real peer's, which
    /// answered our own CONN_REQ (or a challenge) with another one: the
    /// CONN_REQ that created them was forged, or an old incarnation's.
    pub unproven_rekeyed: u64,
    pub keepalives_sent: u64,
    /// Refusals of our datagrams (ICMP port unreachable) that named a VC
    /// (engine/refused.rs): the VC ended. And those that named none (an
    /// old incarnation's datagram, or forged): ignored.
    pub peers_refused: u64,
    pub refusals_unverified: u64,
    /// CREDIT datagrams sent (grants, requests, give-backs).
    pub credits_sent: u64,
    /// Times a message waited because its peer had lent us no credits.
    pub credit_stalls: u64,
    /// Messages from a peer beyond the credits we lent it: dropped.
    pub dropped_over_credit: u64,
    /// RDATA payloads the wire received straight into their receive
    /// buffer (`Engine::rdata_placement`), and datagrams that were not the
    /// guessed segment and were reassembled instead.
    pub rdata_placed: u64,
    pub placement_misses: u64,
    /// Rendezvous sends whose first bytes went out right behind the RTS
    /// (`EngineConfig::rndv_push`), and pushed segments a receiver dropped
    /// because the receive was not posted when they came (pulled again).
    pub rndv_pushed: u64,
    pub push_dropped: u64,
}
