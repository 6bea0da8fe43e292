//! One-sided operations at the target (the initiator's side is
//! `rma.rs`).
//!
//! A request is checked against the domain's registrations
//! (`Face::resolve`) before any memory is touched; the answer is queued
//! (`Onesided::replies`) and sent after the progress pass, since the wires
//! are busy calling us while requests arrive. A request holds its
//! message's credit until its answer leaves, so what peers can make us
//! queue is bounded by what the wires lend them. Ordered requests of one
//! initiator take effect in arrival order (`Lane`).
#![forbid(unsafe_code)]

use super::rma::{let_go, AtomicSpec};
use super::rx::{Handler, Req};
use crate::ffi::*;
use crate::mr::MrEvent;
use crate::nic::atomic;
use crate::nic::fabreq::{Dir, NOBODY};
use crate::nic::iov::{Iov, IovSink, IovSource};
use crate::nic::onesided::{self, AtomicClass, Head, ReqKind, HEAD_LEN};
use crate::nic::wire::{Body, Credit, Held, OpId, SendFlags, SendOp, Take, Wires};
use crate::proto::{MsgHdr, RecvSink, SendSource};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

/// Answers queued beyond this are dropped and counted: honest peers are
/// held back by credits long before (each request holds its credit until
/// answered); only requests that came by rendezvous are not.
const MAX_REPLIES: usize = 1 << 16;

/// Atomics on this process's memory run one at a time, whichever
/// endpoint they came to.
static EXECUTOR: Mutex<()> = Mutex::new(());

/// Target: a request that came by rendezvous (a wire may choose that for
/// a small message), staged whole before its head can be read.
pub(crate) struct Staged {
    peer: SocketAddr,
    hdr: MsgHdr,
    buf: Arc<Mutex<Vec<u8>>>,
}

/// Target: a large write's data on its way into our memory.
pub(crate) struct Landing {
    peer: SocketAddr,
    cookie: u64,
    data: Option<u64>,
    len: usize,
    ev: MrEvent,
    /// An ordered write: its peer's lane waits for it.
    ordered: bool,
    /// A WRITE_HEAD's data, answered by a response; a direct write's end
    /// of rendezvous answers for itself.
    answer: bool,
}

/// Target: one initiator's one-sided messages while an ordered request of
/// its is still being applied (its data is on its way: a request a wire
/// brought by rendezvous, an ordered write's data). What arrives behind
/// it waits here, in arrival order, and is handled once it is done, so
/// ordered requests take effect in the order they were sent.
#[derive(Default)]
pub(super) struct Lane {
    /// Requests of this peer being applied that the rest waits for.
    busy: usize,
    waiting: VecDeque<Waiting>,
}

/// A one-sided message waiting in its peer's lane, with its credit.
struct Waiting {
    hdr: MsgHdr,
    body: WaitingBody,
    credit: Credit,
}

enum WaitingBody {
    /// An eager message's bytes, copied.
    Bytes(Box<[u8]>),
    /// A rendezvous message its wire keeps.
    Rndv(Held),
}

pub(super) struct Reply {
    peer: SocketAddr,
    cookie: u64,
    /// 0, or the positive libfabric error the initiator's part fails with.
    status: i32,
    body: ReplyBody,
    /// The request's credit, given back once the answer leaves.
    credit: Option<Credit>,
}

enum ReplyBody {
    Empty,
    /// An unordered read: straight from our registered memory, when the
    /// answer leaves (or the initiator pulls it).
    Mem(Iov),
    /// An atomic's values before the operation; an ordered read's data,
    /// copied when the request was applied.
    Bytes(Box<[u8]>),
}

/// A WRITE_HEAD whose data is still to come.
pub(super) struct Expect {
    cookie: u64,
    mem: Result<(Iov, MrEvent), i32>,
    data: Option<u64>,
    len: u64,
    credit: Option<Credit>,
    ordered: bool,
}

/// A staged request's buffer, written by the wire (also a collective's
/// landing buffer, `coll.rs`).
pub(super) struct StageSink(Arc<Mutex<Vec<u8>>>);

impl StageSink {
    pub(super) fn new(buf: Arc<Mutex<Vec<u8>>>) -> StageSink {
        StageSink(buf)
    }
}

impl RecvSink for StageSink {
    fn capacity(&self) -> usize {
        self.0.lock().unwrap().len()
    }
    fn write_at(&mut self, offset: usize, src: &[u8]) {
        let mut b = self.0.lock().unwrap();
        if let Some(d) = offset.checked_add(src.len()).and_then(|end| b.get_mut(offset..end)) {
            d.copy_from_slice(src);
        }
    }
}

impl<F: super::Face> Handler<'_, F> {
    /// What a failed peer left half done here is let go: the large writes
    /// it announced, its lane, the answers owed to it.
    pub(super) fn target_peer_failed(&mut self, peer: SocketAddr) {
        if let Some(q) = self.os.expect.remove(&peer) {
            self.os.credits.extend(q.into_iter().filter_map(|e| e.credit));
        }
        if let Some(lane) = self.os.lanes.remove(&peer) {
            for w in lane.waiting {
                self.os.credits.push(w.credit);
                if let WaitingBody::Rndv(h) = w.body {
                    self.os.discards.push(h);
                }
            }
        }
        let (gone, keep): (VecDeque<Reply>, VecDeque<Reply>) = std::mem::take(&mut self.os.replies)
            .into_iter()
            .partition(|r| r.peer == peer);
        self.os.replies = keep;
        self.os.credits.extend(gone.into_iter().filter_map(|r| r.credit));
    }

    /// A request or a write's data: waits in its peer's lane behind an
    /// ordered request still being applied, else is handled now.
    pub(super) fn target_arrived(&mut self, peer: SocketAddr, hdr: MsgHdr, body: Body<'_>, credit: Credit) -> Take {
        if !self.os.lanes.is_empty() && self.os.lanes.contains_key(&peer) {
            // Behind an ordered request still being applied: waits its turn.
            let body = match body {
                Body::Bytes(b) => WaitingBody::Bytes(b.into()),
                Body::Shared(s) => WaitingBody::Bytes(s.to_vec().into()),
                Body::Rndv(h) => WaitingBody::Rndv(h),
            };
            let lane = self.os.lanes.get_mut(&peer).expect("checked above");
            lane.waiting.push_back(Waiting { hdr, body, credit });
            return Take::Kept;
        }
        self.target_msg(peer, hdr, body, credit)
    }

    /// Target: a request or a write's data, in its turn.
    fn target_msg(&mut self, peer: SocketAddr, hdr: MsgHdr, body: Body<'_>, credit: Credit) -> Take {
        if hdr.flags & onesided::BODY != 0 {
            return self.write_body(peer, hdr, body);
        }
        if hdr.flags & onesided::WRITE != 0 {
            return self.direct_write(peer, hdr, body);
        }
        match body {
            Body::Bytes(b) => self.request(peer, hdr, b, Some(credit)),
            Body::Shared(s) => self.request(peer, hdr, &s.to_vec(), Some(credit)),
            Body::Rndv(_) => {
                let len = hdr.len as usize;
                if len > onesided::MAX_REQUEST {
                    self.drop_msg(peer, "an oversized one-sided request", None);
                    self.reply(Reply {
                        peer,
                        cookie: hdr.tag,
                        status: FI_EMSGSIZE,
                        body: ReplyBody::Empty,
                        credit: None,
                    });
                    return Take::Discard;
                }
                let buf = Arc::new(Mutex::new(vec![0u8; len]));
                let ranges = smallvec::smallvec![(buf.lock().unwrap().as_ptr() as u64, len as u64)];
                let staged = Staged {
                    peer,
                    hdr,
                    buf: buf.clone(),
                };
                let op = self.reqs.insert_part(Dir::Rx, Req::Staged(Box::new(staged)));
                // Its head is still at the sender: whatever this peer
                // sends next waits until it is in and applied (it is
                // small: most likely ordered).
                self.lane_enter(peer);
                Take::Accept {
                    op,
                    sink: Box::new(StageSink(buf)),
                    ranges,
                }
            }
        }
    }

    /// A staged request is in (or failed to come).
    pub(super) fn staged_received(&mut self, op: OpId, err: Option<i32>) {
        let Some(Req::Staged(s)) = self.reqs.remove(op) else {
            return;
        };
        if err.is_none() {
            let bytes = std::mem::take(&mut *s.buf.lock().unwrap());
            self.request(s.peer, s.hdr, &bytes, None);
        }
        self.lane_leave(s.peer);
    }

    /// Target: an ordered request of `peer`'s is being applied; what the
    /// peer sends next waits for it.
    fn lane_enter(&mut self, peer: SocketAddr) {
        self.os.lanes.entry(peer).or_default().busy += 1;
    }

    /// Target: one of `peer`'s ordered requests is applied; once none is
    /// left, what waited behind them is handled (after the progress pass:
    /// `send_replies`).
    fn lane_leave(&mut self, peer: SocketAddr) {
        let Some(lane) = self.os.lanes.get_mut(&peer) else {
            return;
        };
        lane.busy = lane.busy.saturating_sub(1);
        if lane.busy == 0 {
            if lane.waiting.is_empty() {
                self.os.lanes.remove(&peer);
            } else {
                self.os.lanes_free = true;
            }
        }
    }

    /// Handles the messages that waited in lanes whose wait is over, in
    /// arrival order, until one of them makes its lane wait again.
    #[cold]
    fn run_lanes(&mut self, wires: &mut dyn Wires, now: u64) {
        self.os.lanes_free = false;
        let free: Vec<SocketAddr> = self
            .os
            .lanes
            .iter()
            .filter(|(_, l)| l.busy == 0)
            .map(|(&p, _)| p)
            .collect();
        for peer in free {
            while let Some(lane) = self.os.lanes.get_mut(&peer) {
                if lane.busy > 0 {
                    break;
                }
                let Some(w) = lane.waiting.pop_front() else {
                    self.os.lanes.remove(&peer);
                    break;
                };
                let (held, take) = match &w.body {
                    WaitingBody::Bytes(b) => (None, self.target_msg(peer, w.hdr, Body::Bytes(b), w.credit)),
                    WaitingBody::Rndv(h) => (Some(*h), self.target_msg(peer, w.hdr, Body::Rndv(*h), w.credit)),
                };
                // As a wire would after its upcall: the credit goes back
                // unless the request keeps it until its answer leaves.
                match take {
                    Take::Kept => {}
                    // (`target_msg` never leaves a request.)
                    Take::Done | Take::Later => wires.give_back(w.credit),
                    Take::Accept { op, sink, ranges } => {
                        wires.give_back(w.credit);
                        if let Some(h) = held {
                            wires.accept(h, op, sink, ranges, self, now);
                        }
                    }
                    Take::Discard => {
                        wires.give_back(w.credit);
                        if let Some(h) = held {
                            wires.discard(h, now);
                        }
                    }
                    Take::Refuse { err } => {
                        wires.give_back(w.credit);
                        if let Some(h) = held {
                            wires.refuse(h, err, now);
                        }
                    }
                }
            }
        }
    }

    /// Target: a request, whole in `b`. Kept (its credit held until the
    /// answer leaves) when a credit came with it.
    fn request(&mut self, peer: SocketAddr, hdr: MsgHdr, b: &[u8], credit: Option<Credit>) -> Take {
        let taken = if credit.is_some() { Take::Kept } else { Take::Done };
        let cookie = hdr.tag;
        let Some(head) = Head::parse(b) else {
            self.drop_msg(peer, "a malformed one-sided request", credit);
            return taken;
        };
        let payload = &b[HEAD_LEN..];
        let data = head.has_data.then_some(hdr.data);
        let answer = match head.kind {
            ReqKind::Write => match self.face.resolve(head.key, head.addr, head.len, FI_REMOTE_WRITE) {
                Ok(_) if payload.len() as u64 != head.len => Err(FI_EINVAL),
                Ok((mem, ev)) => {
                    IovSink::new(mem).write_at(0, payload);
                    self.face.remote_done(FI_REMOTE_WRITE, data, payload.len(), ev);
                    Ok(ReplyBody::Empty)
                }
                Err(e) => Err(e),
            },
            ReqKind::WriteHead => {
                let mem = self.face.resolve(head.key, head.addr, head.len, FI_REMOTE_WRITE);
                self.os.expect.entry(peer).or_default().push_back(Expect {
                    cookie,
                    mem,
                    data,
                    len: head.len,
                    credit,
                    ordered: head.ordered,
                });
                return taken;
            }
            ReqKind::Read => self
                .face
                .resolve(head.key, head.addr, head.len, FI_REMOTE_READ)
                .map(|(mem, ev)| {
                    self.face.remote_done(FI_REMOTE_READ, None, head.len as usize, ev);
                    if head.ordered {
                        // Read now, in its turn: writes that follow it
                        // are applied before the answer leaves.
                        let mut v = vec![0u8; mem.total_len()];
                        IovSource::new(mem).read_at(0, &mut v);
                        ReplyBody::Bytes(v.into())
                    } else {
                        ReplyBody::Mem(mem)
                    }
                }),
            ReqKind::Atomic => self.atomic(&head, payload).map(|(fetched, access, ev)| {
                self.face.remote_done(access, None, head.len as usize, ev);
                ReplyBody::Bytes(fetched.into())
            }),
        };
        let (status, body) = match answer {
            Ok(body) => (0, body),
            Err(e) => (e, ReplyBody::Empty),
        };
        self.reply(Reply {
            peer,
            cookie,
            status,
            body,
            credit,
        });
        taken
    }

    /// Target: runs an atomic on our memory, atomically with respect to
    /// every other atomic of this process (whichever endpoint and wire it
    /// came over). The values before it (fetching forms), what it needed
    /// (for the counters) and the region's counter; or the error.
    fn atomic(&mut self, head: &Head, payload: &[u8]) -> Result<(Vec<u8>, u64, MrEvent), i32> {
        let (op, dt) = (u32::from(head.op), u32::from(head.datatype));
        let size = atomic::datatype_size(dt).ok_or(FI_EINVAL)?;
        atomic::valid(head.class, op, dt).map_err(|e| -e)?;
        let n = head.len as usize;
        let operands = match head.class {
            AtomicClass::Compare => 2,
            AtomicClass::Fetch if op == FI_ATOMIC_READ => 0,
            _ => 1,
        };
        if n > atomic::MAX_ATOMIC_BYTES
            || !n.is_multiple_of(size)
            || payload.len() != n * operands
            || head.count as usize * size != n
        {
            return Err(FI_EINVAL);
        }
        let spec = AtomicSpec {
            class: head.class,
            op,
            datatype: dt,
            size,
        };
        let access = spec.access();
        let (mem, ev) = self.face.resolve(head.key, head.addr, head.len, access)?;
        // Naturally aligned (up to 8 bytes): what the application's own
        // atomics on the same memory would need.
        if mem.addr().is_some_and(|a| a % size.min(8) != 0) {
            crate::warn!(
                FI_LOG_EP_DATA,
                "atomic on a misaligned address {:#x}",
                mem.addr().unwrap_or(0)
            );
            return Err(FI_EINVAL);
        }
        let (operand, compare) = payload.split_at(if operands == 2 { n } else { payload.len() });
        let mut fetched = vec![0u8; if head.class == AtomicClass::Plain { 0 } else { n }];
        let mut sink = IovSink::new(mem);
        let _one_at_a_time = EXECUTOR.lock().unwrap_or_else(|p| p.into_inner());
        let mut target = vec![0u8; n];
        let mut got = 0;
        while got < n {
            let Some(r) = sink.region(got, n - got) else { break };
            let k = r.len();
            target[got..got + k].copy_from_slice(r);
            got += k;
        }
        atomic::apply(head.class, op, dt, &mut target, operand, compare, &mut fetched).map_err(|e| -e)?;
        sink.write_at(0, &target);
        Ok((fetched, access, ev))
    }

    /// Target: a large write's data, for the WRITE_HEAD before it.
    fn write_body(&mut self, peer: SocketAddr, hdr: MsgHdr, body: Body<'_>) -> Take {
        let gone = let_go(&body);
        let queue = self.os.expect.entry(peer).or_default();
        // A head whose body never came (its sender's send failed between
        // the two) is let go; then the body's own head.
        let e = loop {
            match queue.pop_front() {
                None => {
                    self.drop_msg(peer, "write data without its head", None);
                    return gone;
                }
                Some(e) if e.cookie == hdr.tag => break e,
                Some(e) => self.os.credits.extend(e.credit),
            }
        };
        let (data, cookie, credit, ordered) = (e.data, e.cookie, e.credit, e.ordered);
        let mem = match e.mem {
            Ok(_) if e.len != hdr.len => Err(FI_EINVAL),
            m => m,
        };
        let (mem, ev) = match mem {
            Ok(m) => m,
            Err(status) => {
                self.reply(Reply {
                    peer,
                    cookie,
                    status,
                    body: ReplyBody::Empty,
                    credit,
                });
                return gone;
            }
        };
        let len = hdr.len as usize;
        let ranges = mem.mem_ranges();
        let mut sink = IovSink::new(mem);
        match body {
            Body::Bytes(b) => sink.write_at(0, b),
            Body::Shared(s) => sink.write_shared(&s, s.len()),
            Body::Rndv(_) => {
                let landing = Landing {
                    peer,
                    cookie,
                    data,
                    len,
                    ev,
                    ordered,
                    answer: true,
                };
                if ordered {
                    // Lands later: what the peer sends next waits for it.
                    self.lane_enter(peer);
                }
                self.os.credits.extend(credit);
                let op = self.reqs.insert_part(Dir::Rx, Req::Landing(Box::new(landing)));
                return Take::Accept {
                    op,
                    sink: Box::new(sink),
                    ranges,
                };
            }
        }
        self.face.remote_done(FI_REMOTE_WRITE, data, len, ev);
        self.reply(Reply {
            peer,
            cookie,
            status: 0,
            body: ReplyBody::Empty,
            credit,
        });
        Take::Done
    }

    /// Target: a direct write (`onesided::WRITE`): checked, then pulled
    /// straight into our memory; refused with the error otherwise (its
    /// sender's send fails with it). It always comes by rendezvous.
    fn direct_write(&mut self, peer: SocketAddr, hdr: MsgHdr, body: Body<'_>) -> Take {
        if !matches!(body, Body::Rndv(_)) {
            self.drop_msg(peer, "a direct write not sent by rendezvous", None);
            return Take::Done;
        }
        let len = hdr.len as usize;
        let (mem, ev) = match self.face.resolve(hdr.tag, hdr.data, hdr.len, FI_REMOTE_WRITE) {
            Ok(m) => m,
            Err(err) => return Take::Refuse { err },
        };
        let ranges = mem.mem_ranges();
        let landing = Landing {
            peer,
            cookie: 0,
            data: None,
            len,
            ev,
            ordered: false,
            answer: false,
        };
        let op = self.reqs.insert_part(Dir::Rx, Req::Landing(Box::new(landing)));
        Take::Accept {
            op,
            sink: Box::new(IovSink::new(mem)),
            ranges,
        }
    }

    /// Target: a large write's data is in (or failed to come).
    pub(super) fn landed(&mut self, op: OpId, err: Option<i32>) {
        let Some(Req::Landing(l)) = self.reqs.remove(op) else {
            return;
        };
        if err.is_none() {
            self.face.remote_done(FI_REMOTE_WRITE, l.data, l.len, l.ev);
        }
        if l.answer {
            self.reply(Reply {
                peer: l.peer,
                cookie: l.cookie,
                status: err.unwrap_or(0),
                body: ReplyBody::Empty,
                credit: None,
            });
        }
        if l.ordered {
            self.lane_leave(l.peer);
        }
    }

    fn reply(&mut self, r: Reply) {
        if self.os.replies.len() >= MAX_REPLIES {
            self.drop_msg(r.peer, "an answer (too many queued)", r.credit);
            return;
        }
        self.os.replies.push_back(r);
    }

    fn drop_msg(&mut self, peer: SocketAddr, what: &str, credit: Option<Credit>) {
        self.os.dropped += 1;
        self.os.credits.extend(credit);
        crate::warn!(FI_LOG_EP_DATA, "{} from {}: dropped", what, peer);
    }

    /// After a progress pass: the answers owed go out while descriptors
    /// last, and the credits held by answered requests go back.
    #[inline]
    pub(super) fn send_replies(&mut self, wires: &mut dyn Wires, now: u64) {
        if self.os.lanes_free {
            self.run_lanes(wires, now);
        }
        if self.os.owes_nothing() {
            return;
        }
        self.send_replies_now(wires, now)
    }

    /// What every progress pass ends with: answers to peers' one-sided
    /// requests, queued while the wires were calling us, and collectives'
    /// next rounds.
    #[inline]
    pub(super) fn end_pass(&mut self, wires: &mut dyn Wires, now: u64) {
        self.send_replies(wires, now);
        self.coll_advance(wires, now);
    }

    /// Nothing for the end of a pass to do: no answer, credit or discard
    /// owed for one-sided requests, no lane to run, no collective round
    /// (`end_pass` would return at once).
    pub(super) fn idle(&self) -> bool {
        !self.os.lanes_free && self.os.owes_nothing() && self.coll.idle()
    }

    #[cold]
    fn send_replies_now(&mut self, wires: &mut dyn Wires, now: u64) {
        for c in self.os.credits.drain(..) {
            wires.give_back(c);
        }
        for h in self.os.discards.drain(..) {
            wires.discard(h, now);
        }
        while wires.tx_free() > 0 {
            let Some(r) = self.os.replies.pop_front() else { break };
            let (len, src) = match r.body {
                ReplyBody::Empty => (0, IovSource::new(Iov::empty())),
                ReplyBody::Mem(m) => (m.total_len(), IovSource::new(m)),
                ReplyBody::Bytes(b) => (b.len(), IovSource::with_head(b, Iov::empty())),
            };
            let hdr = MsgHdr {
                tag: r.cookie,
                data: r.status as u32 as u64,
                len: len as u64,
                flags: onesided::RESP,
            };
            // Nobody's operation, outside the application's transmit
            // budget: answers must leave even when both sides' budgets are
            // full of requests waiting for them (the port keeps descriptors
            // for them, `ANSWER_DESCS`).
            let s = SendOp {
                peer: r.peer,
                op: NOBODY,
                hdr,
                flags: SendFlags::default(),
            };
            if let Err(e) = wires.send(s, src, self, now) {
                self.os.dropped += 1;
                crate::warn!(FI_LOG_EP_DATA, "answer to {}: {}", r.peer, e);
            }
            if let Some(c) = r.credit {
                wires.give_back(c);
            }
        }
    }
}
