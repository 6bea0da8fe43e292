//! The receive path: posting receives (`FabReq`s in the endpoint's table),
//! matching them against what arrives (two `Tme`s, untagged and tagged),
//! placing the data (eager bytes copied now, rendezvous data pulled by the
//! wire), and the receive completions. Also the wires' upcalls
//! (`Handler`): arrivals, and the ends of operations, sends included.
#![forbid(unsafe_code)]

use super::rma::{Onesided, RmaPart, RmaReq};
use super::rma_target::{Landing, Staged};
use super::{Ep, Face};
use crate::cq::CqEntry;
use crate::ffi::*;
use crate::nic::fabreq::{Dir, FabReqs};
use crate::nic::iov::{Iov, IovSink};
use crate::nic::wire::{Arrival, Body, Credit, Held, OpId, Take, Upcall, WireEvent, WireKind, Wires};
use crate::progress::now_ns;
use crate::proto::MemRanges;
use crate::proto::{MsgHdr, Payload, RecvSink};
use crate::tme::{src_filter, Arrived, MatchSpec, PostOutcome, PostedMatch, Tme};
use std::ffi::c_void;
use std::net::SocketAddr;

/// An operation of the endpoint (its `FabReq`).
pub(crate) enum Req {
    Send(SendReq),
    Recv(Box<Incoming>),
    /// An FI_MULTI_RECV buffer: messages are packed into it (each a
    /// receive of its own) until less than the endpoint's minimum is left.
    Multi(MultiBuf),
    /// A one-sided operation of ours, and its parts (`rma.rs`).
    Rma(RmaReq),
    Part(Box<RmaPart>),
    /// A peer's one-sided request or write data on its way in.
    Staged(Box<Staged>),
    Landing(Box<Landing>),
    /// A collective's internal receive and send (`coll.rs`; the send
    /// names its collective operation).
    CollRecv(Box<super::coll::CollRecv>),
    CollSend(u64),
}

/// A send in flight.
pub(crate) struct SendReq {
    pub(crate) ctx: usize,
    pub(crate) flags: u64,
    pub(crate) len: usize,
    /// fi_inject and kin: it only counts (its counter), it writes no
    /// completion entry.
    pub(crate) silent: bool,
}

/// A receive the application posted, or a slice of an FI_MULTI_RECV
/// buffer: what it reports, and its buffers. Small: the posted queue
/// moves it in and out at every receive.
pub(crate) struct RecvReq {
    ctx: usize,
    flags: u64,
    iov: Iov,
}

/// A matched receive whose data a wire is still moving (rendezvous): what
/// it will report, and the wire (which a cancel asks). Boxed in its
/// FabReq, as every FabReq slot is as large as its largest kind.
pub(crate) struct Incoming {
    done: RecvDone,
    wire: WireKind,
}

/// What a completing receive reports.
#[derive(Clone, Copy)]
struct RecvDone {
    ctx: usize,
    flags: u64,
    buf: usize,
    len: usize,
    olen: usize,
    hdr: MsgHdr,
    src: u64,
    peer: SocketAddr,
    multi: Option<OpId>,
}

/// An FI_MULTI_RECV buffer; released (FI_MULTI_RECV on a completion) once
/// consumed and no message into it is still on its way.
pub(crate) struct MultiBuf {
    ctx: usize,
    /// What is left of the buffer, after the slices carved so far.
    rest: Iov,
    pending: usize,
    consumed: bool,
    flags: u64,
}

impl MultiBuf {
    /// The slice of this buffer the next message (`len` bytes, truncated to
    /// what is left) lands in, as a receive of its own; and whether the
    /// buffer is now consumed (less than `min` left).
    fn carve(&mut self, len: usize, min: usize) -> (RecvReq, bool) {
        let iov = self.rest.take_front(len);
        self.pending += 1;
        if self.rest.total_len() < min {
            self.consumed = true;
        }
        let slice = RecvReq {
            ctx: self.ctx,
            flags: self.flags,
            iov,
        };
        (slice, self.consumed)
    }
}

/// A receive handed to the wire that moves its data: its record's id, its
/// buffers as a sink, and where they are (`Take::Accept`, `Wire::accept`).
type Handed = (OpId, Box<dyn RecvSink>, MemRanges);

/// A posted receive, held by the matching engine until a message takes it
/// (as the GNI provider's posted queue holds its `fab_req`s): it gets a
/// record in the FabReq table only if its data then comes by rendezvous.
/// An FI_MULTI_RECV buffer has its record from the start (its slices come
/// and go while it stays posted); the engine holds its id.
pub(crate) enum Posted {
    Recv(RecvReq),
    Multi(OpId),
}

/// A message that arrived before its receive.
pub(crate) struct Unexpected {
    peer: SocketAddr,
    hdr: MsgHdr,
    body: Kept,
    /// Given back to the sender's wire once the application takes it.
    credit: Credit,
}

/// Where a kept message's data is.
enum Kept {
    /// In our memory.
    Eager(Payload),
    /// Still at the sender; its wire holds the request.
    Rndv(Held),
}

/// The receive state: matching, and how senders are named.
pub(crate) struct Rx {
    tme_msg: Tme<Posted, Unexpected>,
    tme_tag: Tme<Posted, Unexpected>,
    /// The last sender's fi_addr (peer, AV generation, fi_addr): a stream
    /// from one peer then costs no AV lookup per message.
    src_cache: Option<(SocketAddr, u64, u64)>,
    /// AV generation unexpected messages of unknown senders were last
    /// re-filed at (`Ep::resolve_sources`).
    resolved_gen: u64,
    pub(super) min_multi_recv: usize,
}

impl Rx {
    /// Tagged messages kept for a receive to come.
    #[cfg(test)]
    pub(super) fn tagged_kept(&self) -> usize {
        self.tme_tag.unexpected_len()
    }

    pub(super) fn new() -> Rx {
        Rx {
            tme_msg: Tme::new(),
            tme_tag: Tme::new(),
            src_cache: None,
            resolved_gen: 0,
            min_multi_recv: 64,
        }
    }
}

/// The receive and transmit paths at work: the endpoint's face, its
/// receive state and its operations, borrowed apart from the wires (which
/// call it back as their `Upcall`). Of the endpoint's type, not a `dyn
/// Face`, so that the completions of every message inline into its paths
/// (the tests give it a fake endpoint).
pub(super) struct Handler<'a, F: Face> {
    pub(super) face: &'a F,
    /// `face.caps()`, read once (the receive path asks several times per
    /// message).
    pub(super) caps: u64,
    pub(super) rx: &'a mut Rx,
    pub(super) reqs: &'a mut FabReqs<Req>,
    pub(super) os: &'a mut Onesided,
    pub(super) coll: &'a mut super::coll::Colls,
}

impl<F: Face> Upcall for Handler<'_, F> {
    fn arrived(&mut self, a: Arrival<'_>) -> Take {
        // Its fields are read where they are used, in the caller's frame,
        // not moved out at once: that copy read them back wider than the
        // wire had stored them, a store-forwarding miss on every message.
        let (peer, hdr) = (a.peer, &a.hdr);
        if hdr.flags & (crate::nic::onesided::ONESIDED | crate::coll::COLL) != 0 {
            if hdr.flags & crate::coll::COLL != 0 {
                return self.coll_arrived(*peer, a.hdr, a.body, a.credit);
            }
            return self.onesided_arrived(*peer, a.hdr, a.body, a.credit);
        }
        let tagged = hdr.flags & MsgHdr::TAGGED != 0;
        let src = self.source_cached(peer);
        let tag = if tagged { hdr.tag } else { 0 };
        let min = self.rx.min_multi_recv;
        let tme = if tagged {
            &mut self.rx.tme_tag
        } else {
            &mut self.rx.tme_msg
        };
        // The oldest posted receive, a plain one (not a multi-receive
        // buffer, which stays posted): taken at once.
        let (r, multi) = if let Some(Posted::Recv(r)) = tme.take_incoming(src, tag, |p| matches!(p, Posted::Recv(_))) {
            (r, None)
        } else {
            let Some(m) = tme.match_incoming(src, tag) else {
                // With no receive posted at all, it waits in its slot for
                // the one that comes next (IMB's PingPing, an exchange:
                // the message came while the application was done with
                // the last one), taken then as any expected message,
                // rather than copied out, kept and taken again (some 1 000
                // instructions, bench/pollbench-callgrind UNEXP=1). Not
                // past a posted receive: the messages behind it in its
                // ring might be that receive's.
                if a.may_leave && tme.none_posted() {
                    return Take::Later;
                }
                return keep(tme, src, tag, *peer, a.hdr, a.body, a.credit);
            };
            matched(self.reqs, m, hdr.len as usize, min)
        };
        match &a.body {
            Body::Bytes(b) => {
                self.land_eager(r, multi, src, peer, hdr, EagerBytes::Own(b));
                Take::Done
            }
            Body::Shared(s) => {
                self.land_eager(r, multi, src, peer, hdr, EagerBytes::Shared(s));
                Take::Done
            }
            // Rendezvous: the wire moves the data into the receive's
            // buffers, and the receive gets its record until then.
            Body::Rndv(h) => match self.hand_to_wire(r, multi, src, *peer, a.hdr, h.wire) {
                Some((op, sink, ranges)) => Take::Accept { op, sink, ranges },
                None => Take::Discard,
            },
        }
    }

    fn event(&mut self, e: WireEvent) {
        match e {
            WireEvent::SendDone { op } => self.send_finished(op, None),
            WireEvent::SendFailed { op, err } => self.send_finished(op, Some(err)),
            WireEvent::RecvDone { op, written } => self.recv_finished(op, Some(written), None),
            WireEvent::RecvFailed { op, err } => self.recv_finished(op, None, Some(err)),
            WireEvent::PeerUp { .. } => {}
            WireEvent::PeerFailed { peer } => {
                self.onesided_peer_failed(peer);
                self.coll_peer_failed(peer);
            }
        }
    }
}

/// What takes a message of `len` bytes that matched posted receive `m`
/// (not the oldest plain one, `Tme::take_incoming`'s): the receive, or a
/// slice of a multi-receive buffer (which stays posted while it has `min`
/// bytes left).
#[inline(never)]
fn matched(reqs: &mut FabReqs<Req>, m: PostedMatch<'_, Posted>, len: usize, min: usize) -> (RecvReq, Option<OpId>) {
    match m.get() {
        &Posted::Multi(buf) => {
            let Some(Req::Multi(mb)) = reqs.get_mut(buf) else {
                unreachable!("a posted multi-recv buffer has its record")
            };
            let (slice, consumed) = mb.carve(len, min);
            // Otherwise the buffer stays posted where it is (dropping
            // the match keeps it).
            if consumed {
                m.consume();
            }
            reqs.admit_part(Dir::Rx);
            (slice, Some(buf))
        }
        Posted::Recv(_) => match m.consume() {
            Posted::Recv(r) => (r, None),
            Posted::Multi(_) => unreachable!("matched a receive"),
        },
    }
}

/// One receive call after argument conversion.
pub(super) struct RecvArgs {
    pub(super) iov: Iov,
    pub(super) src: u64,
    pub(super) tag: u64,
    pub(super) ignore: u64,
    pub(super) ctx: usize,
    pub(super) flags: u64,
    pub(super) tagged: bool,
}

const RECV_FLAGS: u64 = FI_COMPLETION | FI_MULTI_RECV | FI_PEEK | FI_CLAIM | FI_DISCARD | FI_MORE;

impl Ep {
    /// A receive of one buffer, with no flags but FI_COMPLETION, posted
    /// where nothing unexpected waits (nearly every `fi_trecv` of Open
    /// MPI's and fabtests'): posted from its arguments as they came, the
    /// way `send_small` sends. `Err` hands the buffer back, untouched, for
    /// `recv`, which takes every other case and gives the same answer
    /// for this one. (Through `RecvArgs`, the arguments were stored
    /// field by field and read back with wider loads, a store-forwarding
    /// stall on every post: `perf annotate` of Open MPI's receiving rank.)
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn recv_one(
        &self,
        iov: Iov,
        src: u64,
        tag: u64,
        ignore: u64,
        ctx: usize,
        flags: u64,
        tagged: bool,
    ) -> Result<isize, Iov> {
        if flags & !FI_COMPLETION != 0
            || !super::tx::check_iov_ok(&iov, self.rx_iov_limit)
            || self.missing_cap(tagged, false).is_some()
            || self.enabled_binds().is_none()
        {
            return Err(iov);
        }
        self.touch();
        let spec = MatchSpec {
            tag: if tagged { tag } else { 0 },
            ignore: if tagged { ignore } else { 0 },
            src: src_filter(src, self.caps & FI_DIRECTED_RECV != 0),
        };
        let op = if tagged { FI_TAGGED } else { FI_MSG };
        let flags = FI_RECV | op | flags;
        let mut st = self.lock();
        let (_, mut h) = st.split(self);
        h.post_one(spec, ctx, flags, iov, tagged)
    }

    #[inline(always)]
    pub(super) fn recv(&self, a: RecvArgs) -> isize {
        self.touch();
        if let Err(e) = self.check_enabled() {
            return e;
        }
        if a.flags & !RECV_FLAGS != 0 {
            crate::warn!(FI_LOG_EP_DATA, "recv: unsupported flags {:#x}", a.flags & !RECV_FLAGS);
            return -FI_EBADFLAGS as isize;
        }
        if let Some(cap) = self.missing_cap(a.tagged, false) {
            crate::warn!(FI_LOG_EP_DATA, "recv: endpoint was opened without {}", cap);
            return -FI_EOPNOTSUPP as isize;
        }
        if let Err(e) = super::tx::check_iov(&a.iov, self.rx_iov_limit, "recv") {
            return e;
        }
        let multi = a.flags & FI_MULTI_RECV != 0;
        if multi && (a.tagged || a.iov.count() != 1 || self.caps & FI_MULTI_RECV == 0) {
            crate::warn!(
                FI_LOG_EP_DATA,
                "FI_MULTI_RECV needs an untagged receive of one buffer on an FI_MULTI_RECV endpoint"
            );
            return -FI_EINVAL as isize;
        }
        if !a.tagged && a.flags & (FI_PEEK | FI_CLAIM | FI_DISCARD) != 0 {
            crate::warn!(
                FI_LOG_EP_DATA,
                "recv: FI_PEEK/FI_CLAIM/FI_DISCARD apply to tagged receives only"
            );
            return -FI_EBADFLAGS as isize;
        }
        let directed = self.caps & FI_DIRECTED_RECV != 0;
        let spec = MatchSpec {
            tag: if a.tagged { a.tag } else { 0 },
            ignore: if a.tagged { a.ignore } else { 0 },
            src: src_filter(a.src, directed),
        };
        let op = if a.tagged { FI_TAGGED } else { FI_MSG };
        let flags = FI_RECV | op | (a.flags & FI_COMPLETION);
        let mut st = self.lock();
        if a.flags & FI_PEEK != 0 {
            self.take_left(&mut st);
        }
        let (port, mut h) = st.split(self);
        match h.post(port, spec, a, flags) {
            Err(Full) => {
                self.progress_locked(&mut st, now_ns());
                -FI_EAGAIN as isize
            }
            Ok(r) => r,
        }
    }

    /// fi_cancel: a posted receive, or one a local sender is still writing
    /// into.
    pub(super) fn cancel(&self, ctx: usize) -> isize {
        let mut st = self.lock();
        let (port, mut h) = st.split(self);
        h.cancel(port, ctx)
    }

    /// Posted receives (`fi_rx_size_left`).
    pub(super) fn rx_left(&self) -> usize {
        self.lock().reqs.left(Dir::Rx)
    }
}

/// The receive budget (rx_size) is used up: the application tries again.
pub(super) struct Full;

impl<F: Face> Handler<'_, F> {
    /// `Ep::recv_one`'s post: appended to the posted queue when nothing
    /// unexpected waits in either queue (then `post` would neither match
    /// nor have sources to resolve) and the receive budget has room;
    /// else the buffer goes back for `post`.
    #[inline(always)]
    fn post_one(&mut self, spec: MatchSpec, ctx: usize, flags: u64, iov: Iov, tagged: bool) -> Result<isize, Iov> {
        if self.rx.tme_tag.any_unexpected_open() || self.rx.tme_msg.any_unexpected_open() {
            return Err(iov);
        }
        if self.reqs.admit(Dir::Rx).is_err() {
            return Err(iov);
        }
        let tme = if tagged {
            &mut self.rx.tme_tag
        } else {
            &mut self.rx.tme_msg
        };
        tme.append_posted_with(spec, || Posted::Recv(RecvReq { ctx, flags, iov }));
        Ok(0)
    }

    /// A validated receive: matched against what is kept, or posted.
    #[inline(always)]
    pub(super) fn post(
        &mut self,
        wires: &mut dyn Wires,
        spec: MatchSpec,
        a: RecvArgs,
        flags: u64,
    ) -> Result<isize, Full> {
        if spec.src.is_some() {
            self.resolve_sources();
        }
        if a.flags & (FI_PEEK | FI_CLAIM) != 0 {
            return Ok(self.peek_claim(wires, spec, a, flags));
        }
        // The receive budget (rx_size) is the one limit: a receive that
        // does not fit waits for the application to try again.
        self.reqs.admit(Dir::Rx).map_err(|_| Full)?;
        if a.flags & FI_MULTI_RECV != 0 {
            let id = self.reqs.insert_admitted(
                Dir::Rx,
                Req::Multi(MultiBuf {
                    ctx: a.ctx,
                    rest: a.iov,
                    pending: 0,
                    consumed: false,
                    flags,
                }),
            );
            // Unexpected messages first, in arrival order, then post the rest.
            let min = self.rx.min_multi_recv;
            while let Some(m) = self.rx.tme_msg.take_unexpected(&spec) {
                let Some(Req::Multi(mb)) = self.reqs.get_mut(id) else {
                    unreachable!("the multi-recv buffer just inserted")
                };
                let (slice, consumed) = mb.carve(m.msg.hdr.len as usize, min);
                self.reqs.admit_part(Dir::Rx);
                self.take_kept(wires, slice, Some(id), m);
                if consumed {
                    return Ok(0);
                }
            }
            self.rx.tme_msg.append_posted(spec, Posted::Multi(id));
            return Ok(0);
        }
        let tme = if a.tagged {
            &mut self.rx.tme_tag
        } else {
            &mut self.rx.tme_msg
        };
        let make = || {
            Posted::Recv(RecvReq {
                ctx: a.ctx,
                flags,
                iov: a.iov,
            })
        };
        if let PostOutcome::Matched { recv, msg } = tme.post_with(spec, make) {
            let Posted::Recv(r) = recv else {
                unreachable!("posted a receive")
            };
            self.take_kept(wires, r, None, msg);
        }
        Ok(0)
    }

    /// Admitted receive `r` (a slice of `multi`, if that is set) takes an
    /// eager message of `hdr.len` bytes from `peer` (`src` as the AV names
    /// it), whose `data` lands in its buffers: the receive ends here.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn land_eager(
        &mut self,
        r: RecvReq,
        multi: Option<OpId>,
        src: u64,
        peer: &SocketAddr,
        hdr: &MsgHdr,
        data: EagerBytes<'_>,
    ) {
        self.reqs.dismiss(Dir::Rx);
        let len = hdr.len as usize;
        // Nearly every small message: it fits a receive of one buffer of
        // its own, and nobody asked for its source. Its entry needs no
        // `RecvDone`.
        if let Some((buf, cap)) = r.iov.single() {
            if multi.is_none() && len <= cap && self.caps & (FI_SOURCE | FI_SOURCE_ERR) == 0 {
                data.write(&mut IovSink::sized(r.iov, cap), len);
                let entry = recv_entry(r.ctx, r.flags, buf, len, hdr, FI_ADDR_NOTAVAIL);
                self.face.rx_complete(r.flags, entry, None, 0, None);
                return;
            }
        }
        let cap = r.iov.total_len();
        let done = self.done_with(&r, cap, multi, src, *peer, *hdr);
        data.write(&mut IovSink::sized(r.iov, cap), done.len);
        self.finish_recv(done, None);
    }

    /// Admitted receive `r` (a slice of `multi`, if that is set) takes a
    /// rendezvous message of `hdr.len` bytes from `peer` (`src` as the AV
    /// names it), whose data `wire` moves: the receive's record, which
    /// keeps what it will report, and the sink and where it is. `None`: the
    /// receive has no buffer to move anything into and is complete (the
    /// caller lets the sender go).
    #[allow(clippy::too_many_arguments)]
    fn hand_to_wire(
        &mut self,
        r: RecvReq,
        multi: Option<OpId>,
        src: u64,
        peer: SocketAddr,
        hdr: MsgHdr,
        wire: WireKind,
    ) -> Option<Handed> {
        let cap = r.iov.total_len();
        let done = self.done_with(&r, cap, multi, src, peer, hdr);
        if cap == 0 {
            self.reqs.dismiss(Dir::Rx);
            self.finish_recv(done, None);
            return None;
        }
        let ranges = r.iov.mem_ranges();
        let op = self
            .reqs
            .insert_admitted(Dir::Rx, Req::Recv(Box::new(Incoming { done, wire })));
        Some((op, Box::new(IovSink::sized(r.iov, cap)), ranges))
    }

    /// What receive `r` (a slice of `multi`, if that is set), whose
    /// buffers hold `cap` bytes, reports once it completes, for a message
    /// of `hdr.len` bytes from `peer` (`src` as the AV names it).
    #[inline(always)]
    fn done_with(
        &self,
        r: &RecvReq,
        cap: usize,
        multi: Option<OpId>,
        src: u64,
        peer: SocketAddr,
        hdr: MsgHdr,
    ) -> RecvDone {
        let mlen = hdr.len as usize;
        RecvDone {
            ctx: r.ctx,
            flags: r.flags,
            buf: r.iov.addr().unwrap_or(0),
            len: mlen.min(cap),
            olen: mlen.saturating_sub(cap),
            hdr,
            src: if self.caps & FI_SOURCE == 0 {
                FI_ADDR_NOTAVAIL
            } else if src == FI_ADDR_NOTAVAIL {
                // Unknown when it arrived; perhaps inserted since.
                self.source_of(&peer)
            } else {
                src
            },
            peer,
            multi,
        }
    }

    /// A kept message taken by admitted receive `r` (a slice of `multi`,
    /// if that is set): eager bytes copied now, rendezvous data pulled by
    /// its wire.
    fn take_kept(&mut self, wires: &mut dyn Wires, r: RecvReq, multi: Option<OpId>, msg: Arrived<Unexpected>) {
        let Arrived { src, msg: u, .. } = msg;
        wires.give_back(u.credit);
        match u.body {
            Kept::Eager(data) => {
                self.land_eager(r, multi, src, &u.peer, &u.hdr, EagerBytes::Own(&data));
            }
            Kept::Rndv(held) => {
                let now = now_ns();
                match self.hand_to_wire(r, multi, src, u.peer, u.hdr, held.wire) {
                    Some((op, sink, ranges)) => wires.accept(held, op, sink, ranges, self, now),
                    None => wires.discard(held, now),
                }
            }
        }
    }

    /// A kept message nobody will receive (FI_DISCARD): let its sender go.
    fn discard_kept(&mut self, wires: &mut dyn Wires, u: Unexpected) {
        wires.give_back(u.credit);
        if let Kept::Rndv(held) = u.body {
            wires.discard(held, now_ns());
        }
    }

    /// FI_PEEK, FI_PEEK|FI_CLAIM, FI_PEEK|FI_DISCARD, FI_CLAIM, FI_CLAIM|FI_DISCARD.
    fn peek_claim(&mut self, wires: &mut dyn Wires, spec: MatchSpec, a: RecvArgs, flags: u64) -> isize {
        let src_of = |src: u64, caps: u64| if caps & FI_SOURCE != 0 { src } else { FI_ADDR_NOTAVAIL };
        let caps = self.caps;
        if a.flags & FI_PEEK != 0 {
            let found = if a.flags & FI_CLAIM != 0 {
                self.rx
                    .tme_tag
                    .peek_claim(&spec, a.ctx as u64)
                    .map(|m| (m.src, m.msg.hdr))
            } else {
                self.rx.tme_tag.peek(&spec).map(|m| (m.src, m.msg.hdr))
            };
            let Some((src, hdr)) = found else {
                let entry = CqEntry {
                    op_context: a.ctx as *mut c_void,
                    flags,
                    tag: a.tag,
                    ..CqEntry::default()
                };
                self.face.rx_peek(entry, Some(FI_ENOMSG));
                return 0;
            };
            if a.flags & FI_DISCARD != 0 {
                if let Some(m) = self.rx.tme_tag.take_unexpected(&spec) {
                    self.discard_kept(wires, m.msg);
                }
            }
            self.complete_peek(a.ctx, flags, hdr, hdr.len as usize, src_of(src, caps));
            return 0;
        }
        // FI_CLAIM: the message a previous FI_PEEK|FI_CLAIM set aside.
        let Some(m) = self.rx.tme_tag.take_claimed(a.ctx as u64) else {
            crate::warn!(FI_LOG_EP_DATA, "FI_CLAIM: no message was claimed with this context");
            return -FI_EINVAL as isize;
        };
        if a.flags & FI_DISCARD != 0 {
            let (src, hdr) = (m.src, m.msg.hdr);
            self.discard_kept(wires, m.msg);
            self.complete_peek(a.ctx, flags, hdr, 0, src_of(src, caps));
            return 0;
        }
        // A claimed message is the application's already: its receive is
        // a part of the peek that claimed it, not a new posted receive.
        self.reqs.admit_part(Dir::Rx);
        let r = RecvReq {
            ctx: a.ctx,
            flags,
            iov: a.iov,
        };
        self.take_kept(wires, r, None, m);
        0
    }

    /// A peek's answer: the message's size, tag and data, nothing copied.
    fn complete_peek(&self, ctx: usize, flags: u64, hdr: MsgHdr, len: usize, src: u64) {
        let mut flags = flags & (FI_RECV | FI_TAGGED);
        if hdr.flags & MsgHdr::HAS_DATA != 0 {
            flags |= FI_REMOTE_CQ_DATA;
        }
        self.face.rx_peek(
            CqEntry {
                op_context: ctx as *mut c_void,
                flags,
                len,
                buf: std::ptr::null_mut(),
                data: if hdr.flags & MsgHdr::HAS_DATA != 0 { hdr.data } else { 0 },
                tag: hdr.tag,
                src,
            },
            None,
        );
    }

    /// fi_cancel: a posted receive (it completes with FI_ECANCELED), or
    /// one whose data a wire is still placing (`cancel_matched`).
    pub(super) fn cancel(&mut self, wires: &mut dyn Wires, ctx: usize) -> isize {
        let reqs = &*self.reqs;
        let has_ctx = |p: &Posted| match p {
            Posted::Recv(r) => r.ctx == ctx,
            Posted::Multi(id) => matches!(reqs.get(*id), Some(Req::Multi(m)) if m.ctx == ctx),
        };
        let found = self
            .rx
            .tme_msg
            .cancel_where(has_ctx)
            .or_else(|| self.rx.tme_tag.cancel_where(has_ctx));
        let Some((spec, p)) = found else {
            return self.cancel_matched(wires, ctx);
        };
        let (flags, tag) = match p {
            Posted::Recv(r) => {
                self.reqs.dismiss(Dir::Rx);
                (r.flags, spec.tag)
            }
            Posted::Multi(id) => match self.reqs.remove(id) {
                Some(Req::Multi(m)) => (m.flags, 0),
                _ => (0, 0),
            },
        };
        let entry = CqEntry {
            op_context: ctx as *mut c_void,
            flags: flags & (FI_RECV | FI_MSG | FI_TAGGED),
            tag,
            ..CqEntry::default()
        };
        self.face.rx_complete(flags, entry, Some(FI_ECANCELED), 0, None);
        0
    }

    /// fi_cancel of a receive that was matched and whose data a wire is
    /// still placing: the wire takes it back if it can (the shm wire
    /// revokes a local sender's write, or waits for one already running,
    /// so nothing lands in the buffer after this); otherwise -FI_ENOENT
    /// and the receive completes as usual.
    fn cancel_matched(&mut self, wires: &mut dyn Wires, ctx: usize) -> isize {
        let found = self.reqs.find(|r| matches!(r, Req::Recv(i) if i.done.ctx == ctx));
        let Some(op) = found else { return -FI_ENOENT as isize };
        let Some(Req::Recv(i)) = self.reqs.get(op) else {
            unreachable!("found above")
        };
        let (done, wire) = (i.done, i.wire);
        if !wires.cancel_recv(wire, op) {
            return -FI_ENOENT as isize;
        }
        self.complete_recv(op, done, Some(FI_ECANCELED));
        0
    }

    /// A receive's data is in (or failed to come): its completion.
    fn recv_finished(&mut self, op: OpId, written: Option<usize>, err: Option<i32>) {
        let b = match self.reqs.get(op) {
            Some(Req::Recv(i)) => i,
            Some(Req::Part(_)) => return self.part_received(op, err),
            Some(Req::Staged(_)) => return self.staged_received(op, err),
            Some(Req::Landing(_)) => return self.landed(op, err),
            Some(Req::CollRecv(_)) => return self.coll_received(op, written, err),
            _ => return,
        };
        let mut d = b.done;
        if let Some(w) = written {
            d.len = w;
        }
        self.complete_recv(op, d, err);
    }

    /// Ends receive `op`: its FabReq goes, its completion entry (or error
    /// entry) is written, its counter counts.
    fn complete_recv(&mut self, op: OpId, d: RecvDone, err: Option<i32>) {
        self.reqs.remove(op);
        self.finish_recv(d, err);
    }

    /// `complete_recv` of a receive whose record is gone already.
    fn finish_recv(&mut self, d: RecvDone, err: Option<i32>) {
        let mut entry = recv_entry(d.ctx, d.flags, d.buf, d.len, &d.hdr, d.src);
        if let Some(m) = d.multi {
            if let Some(Req::Multi(mb)) = self.reqs.get_mut(m) {
                mb.pending -= 1;
                if mb.consumed && mb.pending == 0 {
                    entry.flags |= FI_MULTI_RECV;
                    self.reqs.remove(m);
                }
            }
        }
        let unknown_src = d.src == FI_ADDR_NOTAVAIL && self.caps & FI_SOURCE_ERR != 0;
        let err = err
            .or(if d.olen > 0 { Some(FI_ETRUNC) } else { None })
            .or(if unknown_src { Some(FI_EADDRNOTAVAIL) } else { None });
        self.face.rx_complete(d.flags, entry, err, d.olen, Some(&d.peer));
    }

    /// The fi_addr a peer was inserted as, when the application asked to
    /// know (FI_SOURCE) or to filter on it (FI_DIRECTED_RECV).
    fn source_of(&self, peer: &SocketAddr) -> u64 {
        if self.caps & (FI_SOURCE | FI_DIRECTED_RECV) == 0 {
            return FI_ADDR_NOTAVAIL;
        }
        self.face.reverse(peer).unwrap_or(FI_ADDR_NOTAVAIL)
    }

    /// `source_of`, remembering the answer for the next message.
    fn source_cached(&mut self, peer: &SocketAddr) -> u64 {
        if self.caps & (FI_SOURCE | FI_DIRECTED_RECV) == 0 {
            return FI_ADDR_NOTAVAIL;
        }
        let gen = self.face.av_generation();
        if let Some((p, g, a)) = self.rx.src_cache {
            if p == *peer && g == gen {
                return a;
            }
        }
        let a = self.source_of(peer);
        self.rx.src_cache = Some((*peer, gen, a));
        a
    }

    /// Unexpected messages whose sender was not in the AV when they arrived
    /// are filed under their fi_addr once it is (MPI's dynamic processes
    /// insert a peer's address after its first message): a directed
    /// receive must find them. Done when the AV changed since the last
    /// time, before a directed receive or peek looks.
    fn resolve_sources(&mut self) {
        // Nothing unclaimed, nothing to file: the AV is not asked (every
        // directed receive comes here). `resolved_gen` stays behind; the
        // next look with messages waiting resolves once more, harmlessly.
        if !self.rx.tme_tag.any_unexpected_open() && !self.rx.tme_msg.any_unexpected_open() {
            return;
        }
        let gen = self.face.av_generation();
        if gen == self.rx.resolved_gen {
            return;
        }
        self.rx.resolved_gen = gen;
        let face = self.face;
        for tme in [&mut self.rx.tme_tag, &mut self.rx.tme_msg] {
            tme.resolve_unknown_sources(|u| face.reverse(&u.peer));
        }
    }
}

/// An eager message's bytes: the wire's (reassembled, or a copy kept for
/// a later receive), or a mailbox slot's, copied out without borrowing.
#[derive(Clone, Copy)]
enum EagerBytes<'a> {
    Own(&'a [u8]),
    Shared(&'a crate::nic::shm::mapping::SharedBytes<'a>),
}

impl EagerBytes<'_> {
    /// Its first `n` bytes (at most) into `sink`. Inlined: a call of its
    /// own (a closure's, before) cost a small message some 20
    /// instructions (bench/pollbench-callgrind).
    #[inline(always)]
    fn write(self, sink: &mut IovSink, n: usize) {
        match self {
            EagerBytes::Own(b) => sink.write_at(0, &b[..n.min(b.len())]),
            EagerBytes::Shared(s) => sink.write_shared(s, n.min(s.len())),
        }
    }
}

/// A message no receive is posted for, kept in `tme` for one posted
/// later; an eager message's bytes are copied (a slot goes back to its
/// sender). Out of `arrived`'s line: its matched path is the common one.
#[inline(never)]
fn keep(
    tme: &mut Tme<Posted, Unexpected>,
    src: u64,
    tag: u64,
    peer: SocketAddr,
    hdr: MsgHdr,
    body: Body<'_>,
    credit: Credit,
) -> Take {
    let body = match body {
        Body::Bytes(b) => Kept::Eager(b.into()),
        Body::Shared(s) => {
            let mut copy = Payload::from_elem(0, s.len());
            s.copy_to(0, &mut copy);
            Kept::Eager(copy)
        }
        Body::Rndv(h) => Kept::Rndv(h),
    };
    tme.push_unexpected(
        src,
        tag,
        Unexpected {
            peer,
            hdr,
            body,
            credit,
        },
    );
    Take::Kept
}

/// The completion entry of a receive (posted with op `flags`) of `len`
/// bytes at `buf` of message `hdr` from `src`.
#[inline(always)]
fn recv_entry(ctx: usize, flags: u64, buf: usize, len: usize, hdr: &MsgHdr, src: u64) -> CqEntry {
    let data = hdr.flags & MsgHdr::HAS_DATA != 0;
    CqEntry {
        op_context: ctx as *mut c_void,
        flags: flags & (FI_RECV | FI_MSG | FI_TAGGED) | if data { FI_REMOTE_CQ_DATA } else { 0 },
        len,
        buf: buf as *mut c_void,
        data: if data { hdr.data } else { 0 },
        tag: if flags & FI_TAGGED != 0 { hdr.tag } else { 0 },
        src,
    }
}
