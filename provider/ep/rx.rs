//! The receive path: posting receives (`FabReq`s in the endpoint's table),
//! matching them against what arrives (two `Tme`s, untagged and tagged),
//! placing the data (eager bytes copied now, rendezvous data pulled by the
//! wire), and the receive completions. Also the wires' upcalls
//! (`Handler`): arrivals, and the ends of operations, sends included.

use super::{Bindings, Ep, EpState};
use crate::cq::{CqEntry, CqError};
use crate::ffi::*;
use crate::getinfo::std_to_sockaddr;
use crate::nic::fabreq::{Dir, FabReqs};
use crate::nic::iov::{iov_len, ranges, Iov, IovSink};
use crate::nic::wire::{Arrival, Body, Credit, Held, OpId, Take, Upcall, Wire, WireEvent, WireKind};
use crate::progress::now_ns;
use crate::proto::{MsgHdr, Payload, RecvSink};
use crate::tme::{src_filter, Arrived, MatchSpec, PostOutcome, Tme};
use std::ffi::c_void;
use std::net::SocketAddr;

/// An operation of the endpoint (its `FabReq`).
pub(crate) enum Req {
    Send(SendReq),
    Recv(RecvReq),
    /// An FI_MULTI_RECV buffer: messages are packed into it (each a
    /// `Recv` of its own) until less than the endpoint's minimum is left.
    Multi(MultiBuf),
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

/// A posted receive, or one whose data is on its way (`done` set, and
/// the wire it is coming over).
pub(crate) struct RecvReq {
    ctx: usize,
    flags: u64,
    /// The posted tag, which a cancelled receive reports back.
    tag: u64,
    iov: Iov,
    /// The FI_MULTI_RECV buffer this receive is a slice of.
    multi: Option<OpId>,
    done: Option<(RecvDone, WireKind)>,
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
    base: usize,
    len: usize,
    used: usize,
    pending: usize,
    consumed: bool,
    flags: u64,
}

impl MultiBuf {
    /// The slice of this buffer the next message (`len` bytes, truncated to
    /// what is left) lands in, as a receive of its own; and whether the
    /// buffer is now consumed (less than `min` left).
    fn carve(&mut self, id: OpId, len: usize, min: usize) -> (RecvReq, bool) {
        let off = self.used;
        let n = len.min(self.len - off);
        self.used += n;
        self.pending += 1;
        if self.len - self.used < min {
            self.consumed = true;
        }
        let slice = RecvReq {
            ctx: self.ctx,
            tag: 0,
            iov: smallvec::smallvec![(self.base + off, n)],
            flags: self.flags,
            multi: Some(id),
            done: None,
        };
        (slice, self.consumed)
    }
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
    tme_msg: Tme<OpId, Unexpected>,
    tme_tag: Tme<OpId, Unexpected>,
    /// The last sender's fi_addr (peer, AV generation, fi_addr): a stream
    /// from one peer then costs no AV lookup per message.
    src_cache: Option<(SocketAddr, u64, u64)>,
    /// AV generation unexpected messages of unknown senders were last
    /// re-filed at (`Ep::resolve_sources`).
    resolved_gen: u64,
    pub(super) min_multi_recv: usize,
}

impl Rx {
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

/// The endpoint's side of the wires' progress: the receive state and the
/// operations, borrowed apart from the wires that call it.
pub(super) struct Handler<'a> {
    pub(super) ep: &'a Ep,
    pub(super) rx: &'a mut Rx,
    pub(super) reqs: &'a mut FabReqs<Req>,
}

impl Upcall for Handler<'_> {
    fn arrived(&mut self, a: Arrival<'_>) -> Take {
        let Arrival {
            peer,
            hdr,
            body,
            credit,
        } = a;
        let ep = self.ep;
        let tagged = hdr.flags & MsgHdr::TAGGED != 0;
        let src = ep.source_cached(self.rx, &peer);
        let tag = if tagged { hdr.tag } else { 0 };
        let min = self.rx.min_multi_recv;
        let tme = if tagged {
            &mut self.rx.tme_tag
        } else {
            &mut self.rx.tme_msg
        };
        let Some(m) = tme.match_incoming(src, tag) else {
            // Kept for a receive posted later; an eager message's bytes are
            // copied (a slot goes back to its sender).
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
            return Take::Kept;
        };
        let posted = *m.get();
        let op = match self.reqs.get_mut(posted) {
            Some(Req::Multi(mb)) => {
                let (slice, consumed) = mb.carve(posted, hdr.len as usize, min);
                // Otherwise the buffer stays posted where it is (dropping
                // the match keeps it).
                if consumed {
                    m.consume();
                }
                self.reqs.insert_part(Dir::Rx, Req::Recv(slice))
            }
            _ => m.consume(),
        };
        let done = ep.recv_done(self.reqs, op, src, peer, hdr);
        let Some(Req::Recv(r)) = self.reqs.get_mut(op) else {
            unreachable!("a posted receive is a Recv")
        };
        let cap = iov_len(&r.iov);
        match body {
            Body::Bytes(b) => {
                IovSink::new(r.iov.clone()).write_at(0, &b[..b.len().min(cap)]);
                ep.complete_recv(self.reqs, op, done, None);
                Take::Done
            }
            Body::Shared(s) => {
                IovSink::new(r.iov.clone()).write_shared(&s, s.len().min(cap));
                ep.complete_recv(self.reqs, op, done, None);
                Take::Done
            }
            Body::Rndv(h) => {
                if cap == 0 {
                    ep.complete_recv(self.reqs, op, done, None);
                    return Take::Discard;
                }
                r.done = Some((done, h.wire));
                Take::Accept {
                    op,
                    sink: Box::new(IovSink::new(r.iov.clone())),
                    ranges: ranges(&r.iov),
                }
            }
        }
    }

    fn event(&mut self, e: WireEvent) {
        let ep = self.ep;
        match e {
            WireEvent::SendDone { op } => ep.send_finished(self.reqs, op, None),
            WireEvent::SendFailed { op, err } => ep.send_finished(self.reqs, op, Some(err)),
            WireEvent::RecvDone { op, written } => ep.recv_finished(self.reqs, op, Some(written), None),
            WireEvent::RecvFailed { op, err } => ep.recv_finished(self.reqs, op, None, Some(err)),
            WireEvent::PeerUp { .. } | WireEvent::PeerFailed { .. } => {}
        }
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
    pub(super) fn recv(&self, a: RecvArgs) -> isize {
        self.touch(now_ns());
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
        if a.iov.len() > self.rx_iov_limit {
            crate::warn!(
                FI_LOG_EP_DATA,
                "recv: {} iovs > iov_limit {}",
                a.iov.len(),
                self.rx_iov_limit
            );
            return -FI_EINVAL as isize;
        }
        if a.iov.iter().any(|&(p, l)| p == 0 && l != 0) {
            crate::warn!(FI_LOG_EP_DATA, "recv: NULL buffer with non-zero length");
            return -FI_EINVAL as isize;
        }
        let multi = a.flags & FI_MULTI_RECV != 0;
        if multi && (a.tagged || a.iov.len() != 1 || self.caps & FI_MULTI_RECV == 0) {
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
        if spec.src.is_some() {
            self.resolve_sources(&mut st.rx);
        }
        if a.flags & (FI_PEEK | FI_CLAIM) != 0 {
            return self.peek_claim(&mut st, spec, a, flags);
        }
        let req = if multi {
            let (base, len) = a.iov[0];
            Req::Multi(MultiBuf {
                ctx: a.ctx,
                base,
                len,
                used: 0,
                pending: 0,
                consumed: false,
                flags,
            })
        } else {
            Req::Recv(RecvReq {
                ctx: a.ctx,
                tag: a.tag,
                iov: a.iov,
                flags,
                multi: None,
                done: None,
            })
        };
        // The receive budget (rx_size) is the one limit: a receive that
        // does not fit waits for the application to try again.
        let id = match st.reqs.insert(Dir::Rx, req) {
            Ok(id) => id,
            Err(_) => {
                self.progress_locked(&mut st, now_ns());
                return -FI_EAGAIN as isize;
            }
        };
        if multi {
            // Unexpected messages first, in arrival order, then post the rest.
            let min = st.rx.min_multi_recv;
            while let Some(m) = st.rx.tme_msg.take_unexpected(&spec) {
                let Some(Req::Multi(mb)) = st.reqs.get_mut(id) else {
                    unreachable!("the multi-recv buffer just inserted")
                };
                let (slice, consumed) = mb.carve(id, m.msg.hdr.len as usize, min);
                let slice = st.reqs.insert_part(Dir::Rx, Req::Recv(slice));
                self.take_kept(&mut st, slice, m);
                if consumed {
                    return 0;
                }
            }
            st.rx.tme_msg.append_posted(spec, id);
            return 0;
        }
        let tme = if a.tagged {
            &mut st.rx.tme_tag
        } else {
            &mut st.rx.tme_msg
        };
        if let PostOutcome::Matched { recv, msg } = tme.post(spec, id) {
            self.take_kept(&mut st, recv, msg);
        }
        0
    }

    /// What receive `op` reports once it completes, for a message of
    /// `hdr.len` bytes from `peer` (`src` as the AV names it).
    fn recv_done(&self, reqs: &FabReqs<Req>, op: OpId, src: u64, peer: SocketAddr, hdr: MsgHdr) -> RecvDone {
        let Some(Req::Recv(r)) = reqs.get(op) else {
            unreachable!("recv_done of a receive")
        };
        let cap = iov_len(&r.iov);
        let mlen = hdr.len as usize;
        RecvDone {
            ctx: r.ctx,
            flags: r.flags,
            buf: r.iov.first().map_or(0, |v| v.0),
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
            multi: r.multi,
        }
    }

    /// A kept message taken by receive `op`: eager bytes copied now,
    /// rendezvous data pulled by its wire.
    fn take_kept(&self, st: &mut EpState, op: OpId, msg: Arrived<Unexpected>) {
        let Arrived { src, msg: u, .. } = msg;
        give_back(st, u.credit);
        let done = self.recv_done(&st.reqs, op, src, u.peer, u.hdr);
        let now = now_ns();
        let (udp, shm, mut h) = st.split(self);
        let Some(Req::Recv(r)) = h.reqs.get_mut(op) else {
            unreachable!("a receive taking a kept message")
        };
        let cap = iov_len(&r.iov);
        match u.body {
            Kept::Eager(data) => {
                IovSink::new(r.iov.clone()).write_at(0, &data[..data.len().min(cap)]);
                self.complete_recv(h.reqs, op, done, None);
            }
            Kept::Rndv(held) => {
                let wire: &mut dyn Wire = match (held.wire, shm) {
                    (WireKind::Shm, Some(s)) => s,
                    _ => udp,
                };
                if cap == 0 {
                    wire.discard(held, now);
                    self.complete_recv(h.reqs, op, done, None);
                    return;
                }
                r.done = Some((done, held.wire));
                let (sink, rg): (Box<dyn RecvSink>, _) = (Box::new(IovSink::new(r.iov.clone())), ranges(&r.iov));
                wire.accept(held, op, sink, rg, &mut h, now);
            }
        }
    }

    /// A kept message nobody will receive (FI_DISCARD): let its sender go.
    fn discard_kept(&self, st: &mut EpState, u: Unexpected) {
        give_back(st, u.credit);
        if let Kept::Rndv(held) = u.body {
            let now = now_ns();
            match (held.wire, st.shm.as_mut()) {
                (WireKind::Shm, Some(s)) => s.discard(held, now),
                _ => st.udp.discard(held, now),
            }
        }
    }

    /// FI_PEEK, FI_PEEK|FI_CLAIM, FI_PEEK|FI_DISCARD, FI_CLAIM, FI_CLAIM|FI_DISCARD.
    fn peek_claim(&self, st: &mut EpState, spec: MatchSpec, a: RecvArgs, flags: u64) -> isize {
        // A peek should see what is already on the wire.
        self.progress_locked(st, now_ns());
        let b = self.binds();
        let src_of = |src: u64| {
            if self.caps & FI_SOURCE != 0 {
                src
            } else {
                FI_ADDR_NOTAVAIL
            }
        };
        if a.flags & FI_PEEK != 0 {
            let found = if a.flags & FI_CLAIM != 0 {
                st.rx
                    .tme_tag
                    .peek_claim(&spec, a.ctx as u64)
                    .map(|m| (m.src, m.msg.hdr))
            } else {
                st.rx.tme_tag.peek(&spec).map(|m| (m.src, m.msg.hdr))
            };
            let Some((src, hdr)) = found else {
                if let Some(cq) = &b.rx_cq {
                    let entry = CqEntry {
                        op_context: a.ctx as *mut c_void,
                        flags,
                        tag: a.tag,
                        ..CqEntry::default()
                    };
                    cq.push_err(CqError::new(entry, FI_ENOMSG));
                }
                return 0;
            };
            if a.flags & FI_DISCARD != 0 {
                if let Some(m) = st.rx.tme_tag.take_unexpected(&spec) {
                    self.discard_kept(st, m.msg);
                }
            }
            self.complete_peek(a.ctx, flags, hdr, hdr.len as usize, src_of(src));
            return 0;
        }
        // FI_CLAIM: the message a previous FI_PEEK|FI_CLAIM set aside.
        let Some(m) = st.rx.tme_tag.take_claimed(a.ctx as u64) else {
            crate::warn!(FI_LOG_EP_DATA, "FI_CLAIM: no message was claimed with this context");
            return -FI_EINVAL as isize;
        };
        if a.flags & FI_DISCARD != 0 {
            let (src, hdr) = (m.src, m.msg.hdr);
            self.discard_kept(st, m.msg);
            self.complete_peek(a.ctx, flags, hdr, 0, src_of(src));
            return 0;
        }
        // A claimed message is the application's already: its receive is
        // a part of the peek that claimed it, not a new posted receive.
        let op = st.reqs.insert_part(
            Dir::Rx,
            Req::Recv(RecvReq {
                ctx: a.ctx,
                tag: a.tag,
                iov: a.iov,
                flags,
                multi: None,
                done: None,
            }),
        );
        self.take_kept(st, op, m);
        0
    }

    /// A peek's answer: the message's size, tag and data, nothing copied.
    fn complete_peek(&self, ctx: usize, flags: u64, hdr: MsgHdr, len: usize, src: u64) {
        let b = self.binds();
        let mut flags = flags & (FI_RECV | FI_TAGGED);
        if hdr.flags & MsgHdr::HAS_DATA != 0 {
            flags |= FI_REMOTE_CQ_DATA;
        }
        if let Some(cq) = &b.rx_cq {
            cq.push(CqEntry {
                op_context: ctx as *mut c_void,
                flags,
                len,
                buf: std::ptr::null_mut(),
                data: if hdr.flags & MsgHdr::HAS_DATA != 0 { hdr.data } else { 0 },
                tag: hdr.tag,
                src,
            });
        }
    }

    /// fi_cancel: a posted receive, or one a local sender is still writing
    /// into (see `cancel_matched`).
    pub(super) fn cancel(&self, ctx: usize) -> isize {
        let mut st = self.lock();
        let EpState { rx, reqs, .. } = &mut *st;
        let has_ctx = |op: &OpId| match reqs.get(*op) {
            Some(Req::Recv(r)) => r.ctx == ctx,
            Some(Req::Multi(m)) => m.ctx == ctx,
            _ => false,
        };
        let found = rx
            .tme_msg
            .cancel_where(|op| has_ctx(op))
            .or_else(|| rx.tme_tag.cancel_where(|op| has_ctx(op)));
        let Some(op) = found else {
            return self.cancel_matched(&mut st, ctx);
        };
        let (flags, tag) = match st.reqs.remove(op) {
            Some(Req::Recv(r)) => (r.flags, r.tag),
            Some(Req::Multi(m)) => (m.flags, 0),
            _ => (0, 0),
        };
        let b = self.binds();
        if let Some(cq) = &b.rx_cq {
            let entry = CqEntry {
                op_context: ctx as *mut c_void,
                flags: flags & (FI_RECV | FI_MSG | FI_TAGGED),
                tag,
                ..CqEntry::default()
            };
            cq.push_err(CqError::new(entry, FI_ECANCELED));
        }
        if let Some(c) = &b.recv_cntr {
            c.inc_err();
        }
        0
    }

    /// fi_cancel of a receive that was matched and whose data a wire is
    /// still placing: the wire takes it back if it can (the shm wire
    /// revokes a local sender's write, or waits for one already running,
    /// so nothing lands in the buffer after this); otherwise -FI_ENOENT
    /// and the receive completes as usual.
    fn cancel_matched(&self, st: &mut EpState, ctx: usize) -> isize {
        let found = st
            .reqs
            .find(|r| matches!(r, Req::Recv(r) if r.ctx == ctx && r.done.is_some()));
        let Some(op) = found else { return -FI_ENOENT as isize };
        let Some(Req::Recv(RecvReq {
            done: Some((done, wire)),
            ..
        })) = st.reqs.get(op)
        else {
            unreachable!("found above")
        };
        let (done, wire) = (*done, *wire);
        let taken = match (wire, st.shm.as_mut()) {
            (WireKind::Shm, Some(s)) => s.cancel_recv(op),
            _ => st.udp.cancel_recv(op),
        };
        if !taken {
            return -FI_ENOENT as isize;
        }
        self.complete_recv(&mut st.reqs, op, done, Some(FI_ECANCELED));
        0
    }

    /// A receive's data is in (or failed to come): its completion.
    fn recv_finished(&self, reqs: &mut FabReqs<Req>, op: OpId, written: Option<usize>, err: Option<i32>) {
        let Some(Req::Recv(RecvReq {
            done: Some((mut d, _)), ..
        })) = reqs.get(op)
        else {
            return;
        };
        if let Some(w) = written {
            d.len = w;
        }
        self.complete_recv(reqs, op, d, err);
    }

    /// Ends receive `op`: its FabReq goes, its completion entry (or error
    /// entry) is written, its counter counts.
    fn complete_recv(&self, reqs: &mut FabReqs<Req>, op: OpId, d: RecvDone, err: Option<i32>) {
        reqs.remove(op);
        let b = self.binds();
        let mut flags = d.flags & (FI_RECV | FI_MSG | FI_TAGGED);
        if d.hdr.flags & MsgHdr::HAS_DATA != 0 {
            flags |= FI_REMOTE_CQ_DATA;
        }
        if let Some(m) = d.multi {
            if let Some(Req::Multi(mb)) = reqs.get_mut(m) {
                mb.pending -= 1;
                if mb.consumed && mb.pending == 0 {
                    flags |= FI_MULTI_RECV;
                    reqs.remove(m);
                }
            }
        }
        let unknown_src = d.src == FI_ADDR_NOTAVAIL && self.caps & FI_SOURCE_ERR != 0;
        let err = err
            .or(if d.olen > 0 { Some(FI_ETRUNC) } else { None })
            .or(if unknown_src { Some(FI_EADDRNOTAVAIL) } else { None });
        let entry = CqEntry {
            op_context: d.ctx as *mut c_void,
            flags,
            len: d.len,
            buf: d.buf as *mut c_void,
            data: if d.hdr.flags & MsgHdr::HAS_DATA != 0 {
                d.hdr.data
            } else {
                0
            },
            tag: if d.flags & FI_TAGGED != 0 { d.hdr.tag } else { 0 },
            src: d.src,
        };
        complete_rx(b, d.flags, entry, err, d.olen, &d.peer);
    }

    /// The fi_addr a peer was inserted as, when the application asked to
    /// know (FI_SOURCE) or to filter on it (FI_DIRECTED_RECV).
    fn source_of(&self, peer: &SocketAddr) -> u64 {
        if self.caps & (FI_SOURCE | FI_DIRECTED_RECV) == 0 {
            return FI_ADDR_NOTAVAIL;
        }
        self.binds()
            .av
            .as_ref()
            .and_then(|av| av.reverse(peer))
            .unwrap_or(FI_ADDR_NOTAVAIL)
    }

    /// `source_of`, remembering the answer for the next message.
    fn source_cached(&self, rx: &mut Rx, peer: &SocketAddr) -> u64 {
        if self.caps & (FI_SOURCE | FI_DIRECTED_RECV) == 0 {
            return FI_ADDR_NOTAVAIL;
        }
        let gen = self.binds().av.as_ref().map_or(0, |av| av.generation());
        if let Some((p, g, a)) = rx.src_cache {
            if p == *peer && g == gen {
                return a;
            }
        }
        let a = self.source_of(peer);
        rx.src_cache = Some((*peer, gen, a));
        a
    }

    /// Unexpected messages whose sender was not in the AV when they arrived
    /// are filed under their fi_addr once it is (MPI's dynamic processes
    /// insert a peer's address after its first message): a directed
    /// receive must find them. Done when the AV changed since the last
    /// time, before a directed receive or peek looks.
    fn resolve_sources(&self, rx: &mut Rx) {
        let Some(av) = self.binds().av.as_ref() else { return };
        let gen = av.generation();
        if gen == rx.resolved_gen {
            return;
        }
        rx.resolved_gen = gen;
        for tme in [&mut rx.tme_tag, &mut rx.tme_msg] {
            tme.resolve_unknown_sources(|u| av.reverse(&u.peer));
        }
    }

    /// Posted receives (`fi_rx_size_left`).
    pub(super) fn rx_left(&self) -> usize {
        self.lock().reqs.left(Dir::Rx)
    }
}

/// A kept message's receive budget goes back to its sender's wire.
fn give_back(st: &mut EpState, credit: Credit) {
    match (credit, st.shm.as_mut()) {
        (Credit::None, _) => {}
        (Credit::Shm(_), Some(s)) => s.give_back(credit),
        (Credit::Shm(_), None) => {}
        (Credit::Udp { .. }, _) => st.udp.give_back(credit),
    }
}

/// Writes a receive's completion: its entry (or, with `err`, its error
/// entry: FI_EADDRNOTAVAIL carries the sender's address), its counter.
fn complete_rx(b: &Bindings, op_flags: u64, entry: CqEntry, err: Option<i32>, olen: usize, peer: &SocketAddr) {
    match err {
        None => {
            if let Some(c) = &b.recv_cntr {
                c.inc();
            }
            if !b.rx_selective || op_flags & FI_COMPLETION != 0 {
                if let Some(cq) = &b.rx_cq {
                    cq.push(entry);
                }
            }
        }
        Some(e) => {
            if let Some(c) = &b.recv_cntr {
                c.inc_err();
            }
            let err_data = if e == FI_EADDRNOTAVAIL {
                std_to_sockaddr(peer)
            } else {
                Vec::new()
            };
            if let Some(cq) = &b.rx_cq {
                cq.push_err(CqError {
                    entry,
                    err: e,
                    prov_errno: e,
                    olen,
                    err_data,
                });
            }
        }
    }
}
