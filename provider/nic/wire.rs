//! The one interface between an endpoint and a wire (DESIGN.md §1, §7).
//!
//! gnix's software NIC has two wires: shared memory for peers on this host
//! (`nic::shm`) and UDP for the others (`nic::udp`). Each is a sans-IO
//! protocol machine (frames and time in, frames and events out) run by a
//! thin executor that does its I/O. The endpoint sees both through this
//! trait only, so an operation (a send, a receive, later RMA and atomics)
//! is written once, above the wires.
//!
//! Operations are named by the endpoint's `OpId` (its `FabReq`'s id, one
//! id space for both wires); the wire reports their ends through the
//! `Upcall` it is handed, by the same id. A message that arrives is lent to
//! the endpoint through `Upcall::arrived`, which matches it right there and
//! says what becomes of it (`Take`): its bytes copied out (eager), its data
//! pulled into a posted receive (rendezvous), or kept for a receive posted
//! later (`Held`), or discarded.
//!
//! ```text
//!   fi_tsend ─► Ep (validate, FabReq) ─► Wire::send(op) ──► peer
//!   peer ──► Wire::progress ─► Upcall::arrived ─► Tme match ─► Take
//!   Wire ─► Upcall::event(SendDone{op} | RecvDone{op} | ...) ─► CQ entry
//! ```
#![forbid(unsafe_code)]

use crate::nic::iov::{IovSource, IovView};
use crate::nic::shm::mapping::SharedBytes;
use crate::proto::MemRanges;
use crate::proto::{MsgHdr, RecvSink};
use std::net::SocketAddr;

/// An operation of the endpoint: the id of its `FabReq` (one id space for
/// both wires).
pub(crate) type OpId = u64;

/// Which wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WireKind {
    Shm,
    Udp,
}

/// How a send completes, and what it may assume of its buffer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SendFlags {
    /// The buffer is the application's again once `send` returns
    /// (`FI_INJECT`): the wire keeps its own copy.
    pub inject: bool,
    /// The send completes once the wire holds its own copy
    /// (`FI_INJECT_COMPLETE`, and `fi_inject`): `Sent::Done` is fine.
    pub inject_complete: bool,
    /// The send completes only once the receiver took the message in
    /// (`FI_DELIVERY_COMPLETE`): matched, or queued as unexpected.
    pub delivery: bool,
    /// More sends follow at once (`FI_MORE`): the wire may hold this one
    /// back to batch it with them.
    pub more: bool,
}

/// A send as a wire takes it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SendOp {
    pub peer: SocketAddr,
    pub op: OpId,
    pub hdr: MsgHdr,
    pub flags: SendFlags,
}

/// What `Wire::send` made of a send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sent {
    /// Complete already (no event follows): in the peer's mailbox, or the
    /// wire holds a copy and the send asked for no more.
    Done,
    /// `Upcall::event` reports `SendDone` or `SendFailed` for it later.
    Pending,
}

/// A message a wire lends the endpoint in `Upcall::arrived`.
pub(crate) struct Arrival<'a> {
    /// Lent, not moved: most arrivals never read it (only a kept message,
    /// a source asked for, or an error report does).
    pub peer: &'a SocketAddr,
    pub hdr: MsgHdr,
    pub body: Body<'a>,
    /// The receive budget the message holds at the wire (credits) until
    /// the endpoint gives it back with `Wire::give_back`: at once for a
    /// matched message, once the application takes it for a kept one.
    pub credit: Credit,
    /// The wire can offer the message again at a later pass (an eager
    /// message in a mailbox slot): with no receive posted for it, the
    /// endpoint may answer `Take::Later` rather than keep a copy.
    pub may_leave: bool,
}

/// An arrived message's payload.
pub(crate) enum Body<'a> {
    /// Eager, reassembled by the wire: valid during the upcall only.
    Bytes(&'a [u8]),
    /// Eager, in a mailbox slot another process writes: copy it out,
    /// during the upcall only (never borrowed as `&[u8]`).
    Shared(SharedBytes<'a>),
    /// Rendezvous: the data is still at the sender. Accept it into a
    /// receive (`Take::Accept`, or later `Wire::accept` with the `Held`),
    /// or discard it.
    Rndv(Held),
}

/// A rendezvous message a wire keeps for the endpoint until a receive
/// takes it (`Wire::accept`) or it is discarded (`Wire::discard`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Held {
    pub wire: WireKind,
    pub id: u64,
}

/// Receive budget held by a message at its wire (see `Arrival::credit`);
/// opaque to the endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Credit {
    /// Udp wire: credits for this many bytes from `peer`.
    Udp { peer: SocketAddr, bytes: u64 },
    /// Shm wire: part of a ring's loan.
    Shm(crate::nic::shm::ShmCredit),
}

/// What the endpoint made of an arrived message.
pub(crate) enum Take {
    /// Eager: its bytes were copied into a posted receive. The wire gives
    /// the message's credit back.
    Done,
    /// The endpoint keeps the message for a receive posted later: its own
    /// copy of an eager message, or (rendezvous) the `Held`, which stays
    /// valid. The credit stays charged until the endpoint gives it back
    /// (`Wire::give_back`) once the application takes the message.
    Kept,
    /// No receive posted at all, and the arrival `may_leave`: the wire
    /// keeps the message where it is (its slot, its credit) and offers
    /// it again at a later pass (or at once with `may_leave` false, if it
    /// will not leave it).
    Later,
    /// Rendezvous: a posted receive takes it; its data goes into `sink`
    /// (at `ranges` of this process, when the sink is plain memory) and
    /// the wire reports `RecvDone` or `RecvFailed` for `op`. The wire gives
    /// the credit back.
    Accept {
        op: OpId,
        sink: Box<dyn RecvSink>,
        ranges: MemRanges,
    },
    /// Rendezvous: nobody will receive it (`FI_DISCARD`); the sender's
    /// send completes. The wire gives the credit back.
    Discard,
    /// Rendezvous: refused (a one-sided write the target does not allow);
    /// the sender's send fails with `err`, a positive libfabric error, on
    /// a wire that `refuses`; elsewhere it is let go as `Discard`. The
    /// wire gives the credit back.
    Refuse { err: i32 },
}

/// The end of an operation, or a change of a peer.
///
/// `SendDone`/`SendFailed` end every send this endpoint started through
/// `Wire::send`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WireEvent {
    SendDone {
        op: OpId,
    },
    /// `err`: a positive libfabric error number (`FI_EHOSTUNREACH`, ...).
    SendFailed {
        op: OpId,
        err: i32,
    },
    /// The receive's data is in its sink: `written` bytes.
    RecvDone {
        op: OpId,
        written: usize,
    },
    RecvFailed {
        op: OpId,
        err: i32,
    },
    /// A peer is reachable (a connection was set up).
    PeerUp {
        peer: SocketAddr,
    },
    /// A peer stopped answering: its operations have failed already.
    PeerFailed {
        peer: SocketAddr,
    },
}

// ---------------------------------------------------------------------------
// One-sided operations travel as messages between endpoints (nic::onesided);
// the wires carry them as they carry any other.

/// The target memory a one-sided operation names: one remote iov
/// (`struct fi_rma_iov`). `addr` is as the application gave it: a virtual
/// address under FI_MR_VIRT_ADDR, an offset into the registration otherwise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RemoteMem {
    pub key: u64,
    pub addr: u64,
    pub len: u64,
}

/// The endpoint's side of a wire's progress.
pub(crate) trait Upcall {
    /// A message arrived (per peer in send order). The endpoint matches it
    /// now and says what becomes of it.
    fn arrived(&mut self, a: Arrival<'_>) -> Take;
    /// An operation ended, or a peer changed.
    fn event(&mut self, e: WireEvent);
}

/// A wire, as the endpoint drives it.
pub(crate) trait Wire {
    fn kind(&self) -> WireKind;

    /// Sends a message to `s.peer` for operation `s.op`. `src` is the
    /// application's buffers (valid until the send completes, an inject's
    /// only during this call: then the wire copies). Eager or rendezvous
    /// is the wire's choice. An error is a negative libfabric error code,
    /// and nothing was sent. A wire reports nothing about `s.op` through
    /// `up` during this call (the endpoint and the port record the
    /// operation only once `send` says `Pending`).
    fn send(&mut self, s: SendOp, src: IovSource, up: &mut dyn Upcall, now: u64) -> Result<Sent, i32>;

    /// A kept rendezvous message is taken by receive `op` (see
    /// `Take::Accept`); the end comes through `up`, possibly at once.
    fn accept(
        &mut self,
        held: Held,
        op: OpId,
        sink: Box<dyn RecvSink>,
        ranges: MemRanges,
        up: &mut dyn Upcall,
        now: u64,
    );

    /// A kept rendezvous message nobody will receive: its sender's send
    /// completes.
    fn discard(&mut self, held: Held, now: u64);

    /// Whether a refused rendezvous message (`Take::Refuse`, `refuse`)
    /// fails its sender's send with the receiver's error, so that a sender
    /// may learn the receiver's verdict from its send's end alone.
    fn refuses(&self) -> bool {
        false
    }

    /// A kept rendezvous message refused with `err`: let go, and its
    /// sender's send fails with `err` where the wire `refuses`.
    fn refuse(&mut self, held: Held, err: i32, now: u64) {
        let _ = err;
        self.discard(held, now);
    }

    /// The receive budget a message held goes back to its sender.
    fn give_back(&mut self, credit: Credit);

    /// Cancels receive `op` whose data is still moving (accepted): nothing
    /// lands in its buffers after this returns true, and no event follows.
    /// False if the wire cannot take it back (the receive then completes).
    fn cancel_recv(&mut self, op: OpId) -> bool;

    /// One pass: I/O, timers, transmissions; arrivals and events go to
    /// `up`. Whether anything happened.
    fn progress(&mut self, now: u64, up: &mut dyn Upcall) -> bool;

    /// When `progress` must run even if nothing arrives.
    fn next_deadline(&self, now: u64) -> Option<u64>;

    /// Sends and receives still owed to peers (closing waits, bounded, for
    /// them to finish).
    fn busy(&self) -> bool;

    /// Transmit slots in use that are no operation's: control frames
    /// waiting for room (they count against `tx_size` too).
    fn backlog(&self) -> usize;

    /// Longest message this wire sends eagerly (in one go, no rendezvous).
    fn eager_max(&self) -> usize;

    /// About to sleep on the endpoint's wait fd: arranges to be woken by
    /// what arrives (shm: peers ring a doorbell; udp: the sockets join the
    /// epoll set). False if something is already waiting: do not sleep.
    fn arm(&mut self) -> bool;

    /// What the wire carried and dropped, for the endpoint's closing log.
    fn stats_line(&self) -> String;
}

/// An endpoint's wires, as its receive and transmit paths reach them (the
/// port: `nic::port::Port`). A send goes over the wire that reaches its
/// peer; a kept message goes back to the wire it came over.
pub(crate) trait Wires {
    /// `Wire::send` over the wire that reaches `s.peer`, as a transaction
    /// of its own (a `TxDesc`); `-FI_EAGAIN` when none is left.
    fn send(&mut self, s: SendOp, src: IovSource, up: &mut dyn Upcall, now: u64) -> Result<Sent, i32>;
    /// A send that ends in this call (`Sent::Done` at once), taken without
    /// an operation or a transaction of its own: a small message into a
    /// local peer's ring with room. False: nothing was sent; `send` takes
    /// it.
    fn send_now(&mut self, _peer: &SocketAddr, _hdr: &MsgHdr, _flags: SendFlags, _src: &IovView<'_>) -> bool {
        false
    }
    /// Transaction descriptors left (an operation of several parts starts
    /// only when all of them can).
    fn tx_free(&self) -> usize;
    /// `Wire::eager_max` of the wire that reaches `peer`.
    fn eager_max(&mut self, peer: SocketAddr) -> usize;
    /// `Wire::accept` on the wire `held` came over.
    fn accept(
        &mut self,
        held: Held,
        op: OpId,
        sink: Box<dyn RecvSink>,
        ranges: MemRanges,
        up: &mut dyn Upcall,
        now: u64,
    );
    /// `Wire::discard` on the wire `held` came over.
    fn discard(&mut self, held: Held, now: u64);
    /// `Wire::refuses` of the wire that reaches `peer`.
    fn refuses(&mut self, peer: SocketAddr) -> bool;
    /// `Wire::refuse` on the wire `held` came over.
    fn refuse(&mut self, held: Held, err: i32, now: u64);
    /// `Wire::cancel_recv` of a receive whose data comes over `wire`.
    fn cancel_recv(&mut self, wire: WireKind, op: OpId) -> bool;
    /// A kept message's credit goes back to its wire.
    fn give_back(&mut self, credit: Credit);
    /// Transmit slots the wires hold that are no operation's.
    fn backlog(&self) -> usize;
    /// The acknowledgements the wires would delay go out now: the
    /// application is about to see a completion and may stop progressing
    /// (FI_PROGRESS_MANUAL) while a peer waits for them.
    fn flush_acks(&mut self, now: u64);
}
