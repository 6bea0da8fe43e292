//! One-sided operations at the endpoint, as messages over either wire
//! (`nic::onesided` has the protocol): the initiator's side here, the
//! target's in `rma_target.rs`.
//!
//! Initiator: an fi_read/fi_write is checked, becomes a `FabReq`
//! (`RmaReq`) and one part per remote iov (`RmaPart`, each a `FabReq` of
//! its own, so the wires' events find it by id); a part ends once its
//! request messages are sent and the target's response came back; the
//! operation completes when its last part does.
#![forbid(unsafe_code)]

use super::rma_target::{Expect, Lane, Reply};
use super::rx::{Handler, Req};
use super::tx::{check_iov, Busy};
use super::Ep;
use crate::ffi::*;
use crate::nic::atomic;
use crate::nic::fabreq::Dir;
use crate::nic::iov::{Iov, IovSink, IovSource};
use crate::nic::onesided::{self, AtomicClass, Head, ReqKind, HEAD_LEN};
use crate::nic::wire::{Body, Credit, Held, OpId, RemoteMem, SendFlags, SendOp, Sent, Take, Wires};
use crate::progress::now_ns;
use crate::proto::MemRanges;
use crate::proto::{MsgHdr, RecvSink};
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;

/// Transaction descriptors beyond the application's operations (at most
/// two messages per part, one part per operation slot: 2 x tx_size) that
/// the port keeps for answers to peers, so they always have some.
pub(super) const ANSWER_DESCS: usize = 256;

/// An atomic's counts against its operands, compare values and results.
fn check_atomic(a: &RmaArgs, s: AtomicSpec) -> Result<(), isize> {
    let n: u64 = a.remote.iter().map(|r| r.len).sum();
    let wants_operand = !(s.class == AtomicClass::Fetch && s.op == FI_ATOMIC_READ);
    let bad = if a.remote.iter().any(|r| r.len as usize > atomic::MAX_ATOMIC_BYTES) {
        Some("more elements than fi_atomicvalid allows")
    } else if wants_operand && a.operand.len() as u64 != n {
        Some("operand count differs from the target's")
    } else if s.class == AtomicClass::Compare && a.compare.len() as u64 != n {
        Some("compare count differs from the target's")
    } else if s.class != AtomicClass::Plain && a.local.total_len() as u64 != n {
        Some("result count differs from the target's")
    } else {
        None
    };
    match bad {
        Some(why) => {
            crate::warn!(FI_LOG_EP_DATA, "atomic: {}", why);
            Err(-FI_EINVAL as isize)
        }
        None => Ok(()),
    }
}

/// Which way the data goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum RmaDir {
    Write,
    Read,
    Atomic(AtomicSpec),
}

/// An atomic operation: its family, libfabric's op and datatype, and the
/// datatype's size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct AtomicSpec {
    pub(super) class: AtomicClass,
    pub(super) op: u32,
    pub(super) datatype: u32,
    pub(super) size: usize,
}

impl RmaDir {
    /// What the target must allow.
    fn access(self) -> u64 {
        match self {
            RmaDir::Write => FI_REMOTE_WRITE,
            RmaDir::Read => FI_REMOTE_READ,
            RmaDir::Atomic(a) => a.access(),
        }
    }
}

impl AtomicSpec {
    pub(super) fn access(&self) -> u64 {
        match self.class {
            AtomicClass::Plain => FI_REMOTE_WRITE,
            AtomicClass::Fetch if self.op == FI_ATOMIC_READ => FI_REMOTE_READ,
            _ => FI_REMOTE_READ | FI_REMOTE_WRITE,
        }
    }
}

/// One fi_read/fi_write call after argument conversion.
pub(super) struct RmaArgs {
    pub(super) dir: RmaDir,
    /// Where a write's bytes come from, a read's go, a fetching atomic's
    /// old values go (empty for other atomics).
    pub(super) local: Iov,
    /// An atomic's operands and compare values, copied at the call.
    pub(super) operand: Vec<u8>,
    pub(super) compare: Vec<u8>,
    pub(super) remote: Vec<RemoteMem>,
    pub(super) dest: u64,
    pub(super) data: Option<u64>,
    pub(super) ctx: usize,
    pub(super) flags: u64,
    /// fi_inject_write, fi_inject_writedata: no completion entry.
    pub(super) silent: bool,
}

impl RmaArgs {
    /// Bytes the operation moves: the local buffers', or for an atomic
    /// (whose local buffers hold only fetched values) the target's.
    fn len(&self) -> usize {
        match self.dir {
            RmaDir::Atomic(_) => self.remote.iter().map(|r| r.len as usize).sum(),
            _ => self.local.total_len(),
        }
    }
}

/// What becomes of a one-sided message nobody takes: an eager one is
/// done with, a rendezvous one let go at its sender.
pub(super) fn let_go(body: &Body<'_>) -> Take {
    match body {
        Body::Rndv(_) => Take::Discard,
        _ => Take::Done,
    }
}

const RMA_FLAGS: u64 = FI_COMPLETION
    | FI_INJECT
    | FI_INJECT_COMPLETE
    | FI_TRANSMIT_COMPLETE
    | FI_DELIVERY_COMPLETE
    | FI_REMOTE_CQ_DATA
    | FI_FENCE
    | FI_MORE;

/// A one-sided operation in flight (its `FabReq`).
pub(crate) struct RmaReq {
    pub(crate) ctx: usize,
    /// FI_RMA | FI_WRITE or FI_READ, and FI_COMPLETION if asked.
    pub(crate) flags: u64,
    pub(crate) len: usize,
    pub(crate) silent: bool,
    parts: usize,
    err: Option<i32>,
}

/// One remote iov of an operation (a `FabReq` of its own).
pub(crate) struct RmaPart {
    parent: OpId,
    /// The target: a part waiting for its answer fails if it dies.
    peer: SocketAddr,
    /// Its messages the wires still hold (reported by SendDone/SendFailed).
    sends: u8,
    /// The target's response came (or never will: the send failed).
    answered: bool,
    err: Option<i32>,
    /// A read: where the data goes, and where that is for cross-memory
    /// attach, until the response brings it.
    sink: Option<(IovSink, MemRanges)>,
}

/// How a part's request messages go out.
struct PartMsgs {
    /// Largest write whose data rides in its request.
    inline: usize,
    /// Writes larger than this without remote CQ data go as one direct
    /// rendezvous message (`onesided::WRITE`): the peer's wire is one that
    /// `refuses` and sends them by rendezvous (usize::MAX: not that wire).
    direct: usize,
    flags: SendFlags,
    /// Remote CQ data (the last part of a write).
    data: Option<u64>,
    /// The operation is no larger than `Onesided::order_max`.
    ordered: bool,
}

/// What is owed to peers and queued at the endpoint, under its lock.
#[derive(Default)]
pub(crate) struct Onesided {
    pub(super) replies: VecDeque<Reply>,
    /// Per peer, the large writes whose data (BODY) comes next.
    pub(super) expect: HashMap<SocketAddr, VecDeque<Expect>>,
    /// Credits to give back after the progress pass.
    pub(super) credits: Vec<Credit>,
    /// Operations of ours in flight (FI_FENCE waits for none).
    inflight: usize,
    /// Malformed or unexpected one-sided messages, and answers dropped.
    pub(super) dropped: u64,
    /// Our operations up to this many bytes are sent ordered (the
    /// endpoint's `max_order_raw/war/waw_size`).
    pub(super) order_max: usize,
    /// Target: the peers whose ordered requests are being applied (empty
    /// nearly always: only then does an arrival look a peer up).
    pub(super) lanes: HashMap<SocketAddr, Lane>,
    /// Some lane's wait is over: its messages are handled after the
    /// progress pass.
    pub(super) lanes_free: bool,
    /// Rendezvous messages of lanes whose peer failed, let go after the
    /// progress pass.
    pub(super) discards: Vec<Held>,
}

impl Onesided {
    /// No answer, credit or discard waits for the end of a pass
    /// (`Handler::send_replies`).
    pub(super) fn owes_nothing(&self) -> bool {
        self.replies.is_empty() && self.credits.is_empty() && self.discards.is_empty()
    }
}

impl Ep {
    /// fi_read, fi_write and kin.
    pub(super) fn rma(&self, a: RmaArgs) -> isize {
        self.touch();
        let now = now_ns();
        let b = match self.check_enabled() {
            Ok(b) => b,
            Err(e) => return e,
        };
        if a.flags & !RMA_FLAGS != 0 {
            crate::warn!(FI_LOG_EP_DATA, "rma: unsupported flags {:#x}", a.flags & !RMA_FLAGS);
            return -FI_EBADFLAGS as isize;
        }
        let (class, role) = match a.dir {
            RmaDir::Write => (FI_RMA, FI_WRITE),
            RmaDir::Read => (FI_RMA, FI_READ),
            RmaDir::Atomic(AtomicSpec {
                class: AtomicClass::Plain,
                ..
            }) => (FI_ATOMIC, FI_WRITE),
            RmaDir::Atomic(_) => (FI_ATOMIC, FI_READ),
        };
        // An endpoint that names neither FI_READ nor FI_WRITE does both.
        if self.caps & class == 0 || (self.caps & (FI_READ | FI_WRITE) != 0 && self.caps & role == 0) {
            crate::warn!(
                FI_LOG_EP_DATA,
                "rma: endpoint was opened without the caps for {:?}",
                a.dir
            );
            return -FI_EOPNOTSUPP as isize;
        }
        if let RmaDir::Atomic(spec) = a.dir {
            if let Err(e) = check_atomic(&a, spec) {
                return e;
            }
        }
        if let Err(e) = check_iov(&a.local, self.tx_iov_limit, "rma") {
            return e;
        }
        if a.remote.len() > self.rma_iov_limit {
            crate::warn!(
                FI_LOG_EP_DATA,
                "rma: {} remote iovs > rma_iov_limit {}",
                a.remote.len(),
                self.rma_iov_limit
            );
            return -FI_EINVAL as isize;
        }
        let rlen: u64 = a.remote.iter().map(|r| r.len).sum();
        let len = a.len();
        if rlen != len as u64 {
            crate::warn!(FI_LOG_EP_DATA, "rma: {} local bytes, {} remote", len, rlen);
            return -FI_EINVAL as isize;
        }
        if len > self.max_msg_size {
            crate::warn!(FI_LOG_EP_DATA, "rma: {} bytes > max_msg_size", len);
            return -FI_EMSGSIZE as isize;
        }
        let reads = a.dir.access() & FI_REMOTE_READ != 0;
        if a.flags & FI_INJECT != 0 && (reads || len > self.inject_size) {
            crate::warn!(FI_LOG_EP_DATA, "rma: inject of {} bytes ({:?})", len, a.dir);
            return -FI_EINVAL as isize;
        }
        let Some(peer) = b.av.as_ref().and_then(|av| av.lookup(a.dest)) else {
            crate::warn!(FI_LOG_EP_DATA, "rma: fi_addr {:#x} is not in the AV", a.dest);
            return -FI_EINVAL as isize;
        };
        let mut st = self.lock();
        let (port, mut h) = st.split(self);
        match h.start_rma(port, self.tx_size, peer, a, now) {
            Ok(()) => 0,
            Err(Busy) => {
                self.progress_locked(&mut st, now);
                -FI_EAGAIN as isize
            }
        }
    }
}

impl<F: super::Face> Handler<'_, F> {
    /// A validated one-sided operation: its FabReq and parts, then their
    /// requests. Starts only if all its requests can (descriptors and the
    /// transmit budget), so it never stops half sent.
    pub(super) fn start_rma(
        &mut self,
        wires: &mut dyn Wires,
        tx_size: usize,
        peer: SocketAddr,
        mut a: RmaArgs,
        now: u64,
    ) -> Result<(), Busy> {
        if a.flags & FI_FENCE != 0 && self.os.inflight > 0 {
            // Fenced: it starts once everything before it completed; the
            // application's retry (FI_EAGAIN) drives progress until then.
            return Err(Busy);
        }
        // Writes that fit one eager message of the peer's wire with their
        // head go in one; larger ones as a head and a data message, or,
        // where the peer's wire refuses a rendezvous with the target's
        // error, as one direct message (without remote CQ data).
        let eager = wires.eager_max(peer);
        let inline = eager.saturating_sub(HEAD_LEN);
        // (An inject may go eagerly whatever its size: never direct.)
        let direct = if wires.refuses(peer) && a.flags & FI_INJECT == 0 {
            eager
        } else {
            usize::MAX
        };
        let last_part = a.remote.len().saturating_sub(1);
        let msgs: usize = a
            .remote
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let n = r.len as usize;
                let plain = i != last_part || a.data.is_none();
                if a.dir == RmaDir::Write && n > inline && !(plain && n > direct) {
                    2
                } else {
                    1
                }
            })
            .sum();
        let len = a.len();
        if self.tx_used(wires) + 1 + a.remote.len() > tx_size || wires.tx_free() < msgs {
            return Err(Busy);
        }
        let req = RmaReq {
            ctx: a.ctx,
            flags: match a.dir {
                RmaDir::Write => FI_RMA | FI_WRITE,
                RmaDir::Read => FI_RMA | FI_READ,
                RmaDir::Atomic(s) if s.class == AtomicClass::Plain => FI_ATOMIC | FI_WRITE,
                RmaDir::Atomic(_) => FI_ATOMIC | FI_READ,
            } | (a.flags & FI_COMPLETION),
            len,
            silent: a.silent,
            parts: a.remote.len(),
            err: None,
        };
        let parent = self.reqs.insert(Dir::Tx, Req::Rma(req)).map_err(|_| Busy)?;
        self.os.inflight += 1;
        if a.remote.is_empty() {
            self.finish_rma(parent);
            return Ok(());
        }
        let flags = SendFlags {
            inject: a.flags & FI_INJECT != 0,
            ..SendFlags::default()
        };
        let last = a.remote.len() - 1;
        // Ordered when both it and what it is ordered against are no larger
        // than max_order_*_size: the target applies such requests of ours
        // in the order they arrive (its lanes).
        let ordered = len <= self.os.order_max;
        let mut off = 0;
        for (i, r) in a.remote.iter().enumerate() {
            let n = r.len as usize;
            let piece = match a.dir {
                RmaDir::Atomic(s) if s.class == AtomicClass::Plain => Iov::empty(),
                _ => a.local.take_front(n),
            };
            let slice = |v: &Vec<u8>| v.get(off..off + n).unwrap_or(&[]).to_vec();
            let operands = (slice(&a.operand), slice(&a.compare));
            off += n;
            let part = RmaPart {
                parent,
                peer,
                sends: 0,
                answered: false,
                err: None,
                sink: None,
            };
            let op = self.reqs.insert_part(Dir::Tx, Req::Part(Box::new(part)));
            let data = if i == last { a.data } else { None };
            let p = PartMsgs {
                inline,
                direct,
                flags,
                data,
                ordered,
            };
            if let Err(e) = self.send_part(wires, peer, op, a.dir, *r, piece, operands, p, now) {
                // Checked above, so only a wire's refusal: the operation
                // completes with the error (no answer will come).
                self.part_received(op, Some(-e));
            }
        }
        Ok(())
    }

    /// The request messages of part `op`.
    #[allow(clippy::too_many_arguments)]
    fn send_part(
        &mut self,
        wires: &mut dyn Wires,
        peer: SocketAddr,
        op: OpId,
        dir: RmaDir,
        r: RemoteMem,
        piece: Iov,
        (operand, compare): (Vec<u8>, Vec<u8>),
        PartMsgs {
            inline,
            direct,
            flags,
            data,
            ordered,
        }: PartMsgs,
        now: u64,
    ) -> Result<(), i32> {
        let len = r.len as usize;
        let mut head = Head {
            kind: ReqKind::Write,
            has_data: data.is_some(),
            ordered,
            class: AtomicClass::Plain,
            op: 0,
            datatype: 0,
            count: 0,
            key: r.key,
            addr: r.addr,
            len: len as u64,
        };
        let req_hdr = |body: usize| MsgHdr {
            tag: op,
            data: data.unwrap_or(0),
            len: (HEAD_LEN + body) as u64,
            flags: onesided::REQ,
        };
        let mut msgs: Vec<(MsgHdr, IovSource)> = Vec::with_capacity(2);
        match dir {
            RmaDir::Write if len <= inline => {
                msgs.push((req_hdr(len), IovSource::with_head(Box::new(head.emit()), piece)));
            }
            RmaDir::Write if len > direct && data.is_none() => {
                // No response comes: the rendezvous' end answers.
                if let Some(Req::Part(p)) = self.reqs.get_mut(op) {
                    p.answered = true;
                }
                let hdr = MsgHdr {
                    tag: r.key,
                    data: r.addr,
                    len: len as u64,
                    flags: onesided::WRITE,
                };
                msgs.push((hdr, IovSource::new(piece)));
            }
            RmaDir::Write => {
                head.kind = ReqKind::WriteHead;
                msgs.push((req_hdr(0), IovSource::with_head(Box::new(head.emit()), Iov::empty())));
                let body = MsgHdr {
                    tag: op,
                    data: 0,
                    len: len as u64,
                    flags: onesided::BODY,
                };
                msgs.push((body, IovSource::new(piece)));
            }
            RmaDir::Read => {
                head.kind = ReqKind::Read;
                self.expect_answer(op, piece);
                msgs.push((req_hdr(0), IovSource::with_head(Box::new(head.emit()), Iov::empty())));
            }
            RmaDir::Atomic(s) => {
                head.kind = ReqKind::Atomic;
                head.class = s.class;
                // Both fit in a byte: libfabric 1.17 has 22 ops, 18 types.
                (head.op, head.datatype) = (s.op as u8, s.datatype as u8);
                head.count = (len / s.size) as u32;
                if s.class != AtomicClass::Plain {
                    self.expect_answer(op, piece);
                }
                let mut m = Vec::with_capacity(HEAD_LEN + operand.len() + compare.len());
                m.extend_from_slice(&head.emit());
                m.extend_from_slice(&operand);
                m.extend_from_slice(&compare);
                msgs.push((
                    req_hdr(m.len() - HEAD_LEN),
                    IovSource::with_head(m.into(), Iov::empty()),
                ));
            }
        }
        for (hdr, src) in msgs {
            match wires.send(SendOp { peer, op, hdr, flags }, src, self, now)? {
                Sent::Pending => self.part_event(op, |p| p.sends += 1),
                Sent::Done => {}
            }
        }
        // A direct write a wire finished at once (none does: it goes by
        // rendezvous) would end here.
        self.part_event(op, |_| {});
        Ok(())
    }

    /// Part `op`'s answer brings data: into `piece`.
    fn expect_answer(&mut self, op: OpId, piece: Iov) {
        let ranges = piece.mem_ranges();
        if let Some(Req::Part(p)) = self.reqs.get_mut(op) {
            p.sink = Some((IovSink::new(piece), ranges));
        }
    }

    /// Applies `f` to part `op`; ends the part once its messages are sent
    /// and answered, and its operation with its last part.
    fn part_event(&mut self, op: OpId, f: impl FnOnce(&mut RmaPart)) {
        let Some(Req::Part(p)) = self.reqs.get_mut(op) else {
            return;
        };
        f(p);
        if p.sends > 0 || !p.answered {
            return;
        }
        let Some(Req::Part(p)) = self.reqs.remove(op) else {
            unreachable!("the part just seen")
        };
        let Some(Req::Rma(r)) = self.reqs.get_mut(p.parent) else {
            return;
        };
        r.err = r.err.or(p.err);
        r.parts -= 1;
        if r.parts == 0 {
            self.finish_rma(p.parent);
        }
    }

    fn finish_rma(&mut self, op: OpId) {
        if let Some(Req::Rma(r)) = self.reqs.remove(op) {
            self.os.inflight -= 1;
            self.face.rma_complete(&r, r.err);
        }
    }

    /// A wire's SendDone/SendFailed for a part's request.
    pub(super) fn part_sent(&mut self, op: OpId, err: Option<i32>) {
        self.part_event(op, |p| {
            p.sends -= 1;
            if err.is_some() {
                // The target will not answer what it never got.
                p.err = p.err.or(err);
                p.answered = true;
            }
        });
    }

    /// Part `op` is answered (`err`: how it failed): the target's answer
    /// came, a read's data was pulled into its buffers (RecvDone/
    /// RecvFailed), or no answer will come.
    pub(super) fn part_received(&mut self, op: OpId, err: Option<i32>) {
        self.part_event(op, |p| {
            p.err = p.err.or(err);
            p.answered = true;
        });
    }

    /// A peer stopped answering (its wire gave up on it, or its process
    /// died): our parts waiting for its answers fail, and what it left
    /// half done here is let go.
    pub(super) fn onesided_peer_failed(&mut self, peer: SocketAddr) {
        while let Some(op) = self
            .reqs
            .find(|r| matches!(r, Req::Part(p) if p.peer == peer && !p.answered))
        {
            self.part_received(op, Some(FI_EHOSTUNREACH));
        }
        self.target_peer_failed(peer);
    }

    /// A one-sided message arrived (not for the tag matching).
    /// Out of line: the tagged receive path's function stays small.
    #[inline(never)]
    pub(super) fn onesided_arrived(&mut self, peer: SocketAddr, hdr: MsgHdr, body: Body<'_>, credit: Credit) -> Take {
        if hdr.flags & onesided::RESP != 0 {
            return self.response(hdr, body);
        }
        self.target_arrived(peer, hdr, body, credit)
    }

    /// Initiator: the target's answer to part `hdr.tag`.
    fn response(&mut self, hdr: MsgHdr, body: Body<'_>) -> Take {
        let op = hdr.tag;
        let status = hdr.data as i32;
        let Some(Req::Part(p)) = self.reqs.get_mut(op) else {
            // A part that failed already (its send did): nothing to do.
            return let_go(&body);
        };
        if status != 0 {
            self.part_received(op, Some(status));
            return let_go(&body);
        }
        let Some((mut sink, ranges)) = p.sink.take() else {
            self.part_received(op, None);
            return Take::Done;
        };
        let n = (hdr.len as usize).min(sink.capacity());
        match body {
            Body::Bytes(b) => sink.write_at(0, &b[..n.min(b.len())]),
            Body::Shared(s) => sink.write_shared(&s, n.min(s.len())),
            Body::Rndv(_) => {
                return Take::Accept {
                    op,
                    sink: Box::new(sink),
                    ranges,
                }
            }
        }
        self.part_received(op, None);
        Take::Done
    }
}
