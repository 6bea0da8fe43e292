//! Tests of the shm wire through `nic::Wire`, the way the endpoint will
//! drive it: a small stand-in endpoint (`Node`: posted receives matched in
//! order, unexpected messages kept, credits given back when taken) over
//! an executor, either in the simulated host (`sim.rs`: virtual time, any
//! fault) or over real mailboxes in this process (`real.rs`).

mod mesh;
mod model;
mod real;
mod wire;

use super::cma::Range;
use super::exec::Exec;
use super::port::Port;
use super::sim::{Mem, MemSink, MemSource, SimPort, World};
use crate::nic::wire::{Arrival, Body, Credit, Held, OpId, SendFlags, SendOp, Sent, Take, Upcall, Wire, WireEvent};
use crate::proto::MemRanges;
use crate::proto::{MsgHdr, RecvSink, SendSource};
use smallvec::smallvec;
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

/// Where a node's buffers live: simulated address spaces, or this
/// process's memory.
pub(super) trait Memory {
    type Buf: Clone;
    fn alloc(&mut self, len: usize) -> Self::Buf;
    fn write(&self, b: &Self::Buf, off: usize, bytes: &[u8]);
    fn read(&self, b: &Self::Buf) -> Vec<u8>;
    fn range(&self, b: &Self::Buf) -> Range;
    fn source(&self, b: &Self::Buf) -> Box<dyn SendSource>;
    fn sink(&self, b: &Self::Buf) -> Box<dyn RecvSink>;
}

/// A simulated process's address space.
pub(super) struct SimMem(pub Mem);

impl Memory for SimMem {
    type Buf = (u64, usize);
    fn alloc(&mut self, len: usize) -> (u64, usize) {
        (self.0.lock().unwrap().alloc(len), len)
    }
    fn write(&self, b: &(u64, usize), off: usize, bytes: &[u8]) {
        assert!(self.0.lock().unwrap().write(b.0 + off as u64, bytes));
    }
    fn read(&self, b: &(u64, usize)) -> Vec<u8> {
        self.0.lock().unwrap().read(b.0, b.1 as u64).unwrap()
    }
    fn range(&self, b: &(u64, usize)) -> Range {
        (b.0, b.1 as u64)
    }
    fn source(&self, b: &(u64, usize)) -> Box<dyn SendSource> {
        Box::new(MemSource {
            mem: self.0.clone(),
            addr: b.0,
            len: b.1,
        })
    }
    fn sink(&self, b: &(u64, usize)) -> Box<dyn RecvSink> {
        Box::new(MemSink {
            mem: self.0.clone(),
            addr: b.0,
            cap: b.1,
        })
    }
}

/// A buffer of this process that a peer may read or write by cross-memory
/// attach (its heap block never moves), and the wire through the mutex.
#[derive(Clone)]
pub(super) struct Shared(pub Arc<Mutex<Vec<u8>>>);

impl SendSource for Shared {
    fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }
    fn read_at(&self, offset: usize, dst: &mut [u8]) {
        dst.copy_from_slice(&self.0.lock().unwrap()[offset..offset + dst.len()]);
    }
    fn ranges(&self) -> Option<MemRanges> {
        let v = self.0.lock().unwrap();
        Some(smallvec![(v.as_ptr() as u64, v.len() as u64)])
    }
}

impl RecvSink for Shared {
    fn capacity(&self) -> usize {
        self.0.lock().unwrap().len()
    }
    fn write_at(&mut self, offset: usize, src: &[u8]) {
        let mut v = self.0.lock().unwrap();
        let n = src.len().min(v.len().saturating_sub(offset));
        v[offset..offset + n].copy_from_slice(&src[..n]);
    }
}

/// This process's memory.
#[derive(Default)]
pub(super) struct RealMem;

impl Memory for RealMem {
    type Buf = Shared;
    fn alloc(&mut self, len: usize) -> Shared {
        Shared(Arc::new(Mutex::new(vec![0; len])))
    }
    fn write(&self, b: &Shared, off: usize, bytes: &[u8]) {
        b.0.lock().unwrap()[off..off + bytes.len()].copy_from_slice(bytes);
    }
    fn read(&self, b: &Shared) -> Vec<u8> {
        b.0.lock().unwrap().clone()
    }
    fn range(&self, b: &Shared) -> Range {
        b.ranges().unwrap()[0]
    }
    fn source(&self, b: &Shared) -> Box<dyn SendSource> {
        Box::new(b.clone())
    }
    fn sink(&self, b: &Shared) -> Box<dyn RecvSink> {
        Box::new(b.clone())
    }
}

/// A message that arrived before its receive.
enum Unexpected {
    Eager {
        peer: SocketAddr,
        hdr: MsgHdr,
        bytes: Vec<u8>,
        credit: Credit,
    },
    Rndv {
        peer: SocketAddr,
        hdr: MsgHdr,
        held: Held,
        credit: Credit,
    },
}

/// How a node treats a rendezvous message nobody waits for.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Unposted {
    Keep,
    Discard,
}

/// The endpoint's side of the upcalls: receives matched in the order
/// posted, the rest kept (or discarded).
pub(super) struct Up<M: Memory> {
    pub mem: M,
    posted: VecDeque<(OpId, M::Buf)>,
    unexpected: VecDeque<Unexpected>,
    pub unposted: Unposted,
    /// Whether an eager message nobody waits for is left in its slot
    /// when the wire allows it (`Take::Later`), as the endpoint does.
    pub leave: bool,
    /// Ends of operations, each exactly once: sends, and receives with
    /// their headers.
    pub sends: HashMap<OpId, Result<(), i32>>,
    pub recvs: HashMap<OpId, Result<usize, i32>>,
    pub hdrs: HashMap<OpId, MsgHdr>,
    /// Who sent what each receive got.
    pub from: HashMap<OpId, SocketAddr>,
    /// Sends in the order they ended.
    pub send_order: Vec<OpId>,
    /// Rendezvous receives accepted, waiting for their end.
    waiting: HashMap<OpId, MsgHdr>,
    /// Credit to give back once the upcall is over.
    credits: Vec<Credit>,
    /// Messages discarded.
    pub discarded: usize,
    /// The send being submitted: the wire must report nothing about it
    /// during `send` (the endpoint records it only once `send` returns).
    submitting: Option<OpId>,
}

impl<M: Memory> Up<M> {
    fn new(mem: M) -> Up<M> {
        Up {
            mem,
            posted: VecDeque::new(),
            unexpected: VecDeque::new(),
            unposted: Unposted::Keep,
            leave: false,
            sends: HashMap::new(),
            recvs: HashMap::new(),
            hdrs: HashMap::new(),
            from: HashMap::new(),
            send_order: Vec::new(),
            waiting: HashMap::new(),
            credits: Vec::new(),
            discarded: 0,
            submitting: None,
        }
    }

    fn recv_done(&mut self, op: OpId, r: Result<usize, i32>) {
        assert!(self.recvs.insert(op, r).is_none(), "receive {op} ended twice");
    }

    fn send_done(&mut self, op: OpId, r: Result<(), i32>) {
        assert_ne!(self.submitting, Some(op), "send {op} reported during Wire::send");
        assert!(self.sends.insert(op, r).is_none(), "send {op} ended twice");
        self.send_order.push(op);
    }
}

impl<M: Memory> Upcall for Up<M> {
    fn arrived(&mut self, a: Arrival<'_>) -> Take {
        if self.leave && a.may_leave && self.posted.is_empty() {
            assert!(matches!(a.body, Body::Shared(_)), "only a slot is left");
            return Take::Later;
        }
        match (self.posted.pop_front(), a.body) {
            (Some((op, buf)), Body::Shared(b)) => {
                let n = b.len().min(self.mem.range(&buf).1 as usize);
                let mut copy = vec![0u8; n];
                b.copy_to(0, &mut copy);
                self.mem.write(&buf, 0, &copy);
                self.hdrs.insert(op, a.hdr);
                self.from.insert(op, *a.peer);
                self.recv_done(op, Ok(n));
                Take::Done
            }
            (Some((op, buf)), Body::Rndv(_)) => {
                self.hdrs.insert(op, a.hdr);
                self.from.insert(op, *a.peer);
                self.waiting.insert(op, a.hdr);
                Take::Accept {
                    op,
                    sink: self.mem.sink(&buf),
                    ranges: smallvec![self.mem.range(&buf)],
                }
            }
            (None, Body::Shared(b)) => {
                self.unexpected.push_back(Unexpected::Eager {
                    peer: *a.peer,
                    hdr: a.hdr,
                    bytes: b.to_vec(),
                    credit: a.credit,
                });
                Take::Kept
            }
            (None, Body::Rndv(held)) if self.unposted == Unposted::Keep => {
                self.unexpected.push_back(Unexpected::Rndv {
                    peer: *a.peer,
                    hdr: a.hdr,
                    held,
                    credit: a.credit,
                });
                Take::Kept
            }
            (None, Body::Rndv(_)) => {
                self.discarded += 1;
                Take::Discard
            }
            (_, Body::Bytes(_)) => unreachable!("the shm wire lends slots"),
        }
    }

    fn event(&mut self, e: WireEvent) {
        match e {
            WireEvent::SendDone { op } => self.send_done(op, Ok(())),
            WireEvent::SendFailed { op, err } => self.send_done(op, Err(err)),
            WireEvent::RecvDone { op, written } => {
                assert!(self.waiting.remove(&op).is_some(), "RecvDone of {op}, not accepted");
                self.recv_done(op, Ok(written))
            }
            WireEvent::RecvFailed { op, err } => {
                self.waiting.remove(&op);
                self.recv_done(op, Err(err))
            }
            WireEvent::PeerUp { .. } | WireEvent::PeerFailed { .. } => {}
        }
    }
}

/// A stand-in endpoint over one wire.
pub(super) struct Node<P: Port, M: Memory> {
    pub w: Exec<P>,
    pub up: Up<M>,
    pub addr: SocketAddr,
    next_op: OpId,
    /// Every receive buffer, by op.
    pub bufs: HashMap<OpId, M::Buf>,
    pub now: u64,
}

impl<P: Port, M: Memory> Node<P, M> {
    pub fn new(w: Exec<P>, mem: M) -> Node<P, M> {
        Node {
            addr: w.me(),
            w,
            up: Up::new(mem),
            next_op: 1,
            bufs: HashMap::new(),
            now: 1_000_000_000,
        }
    }

    fn op(&mut self) -> OpId {
        self.next_op += 1;
        self.next_op
    }

    /// Sends `data` to `to` with `tag` (from a buffer of the node's
    /// memory): the op, whose end `send_result` tells.
    pub fn send(&mut self, to: SocketAddr, tag: u64, data: &[u8], flags: SendFlags) -> OpId {
        let buf = self.up.mem.alloc(data.len());
        self.up.mem.write(&buf, 0, data);
        let src = self.up.mem.source(&buf);
        self.send_from(to, tag, src, flags)
    }

    /// Sends what `src` holds (and says where it is) to `to` with `tag`.
    pub fn send_from(&mut self, to: SocketAddr, tag: u64, src: Box<dyn SendSource>, flags: SendFlags) -> OpId {
        let op = self.op();
        let hdr = MsgHdr {
            tag,
            data: op,
            len: src.len() as u64,
            flags: MsgHdr::TAGGED,
        };
        let s = SendOp {
            peer: to,
            op,
            hdr,
            flags,
        };
        self.up.submitting = Some(op);
        let r = self.w.submit(s, src, &mut self.up);
        self.up.submitting = None;
        match r {
            Ok(Sent::Done) => self.up.send_done(op, Ok(())),
            Ok(Sent::Pending) => {}
            // A negative error code; completions carry it positive.
            Err(e) => self.up.send_done(op, Err(-e)),
        }
        self.give_back();
        op
    }

    /// Posts a receive of `cap` bytes: it takes the oldest unexpected
    /// message, or waits for the next.
    pub fn post(&mut self, cap: usize) -> OpId {
        let op = self.op();
        let buf = self.up.mem.alloc(cap);
        self.bufs.insert(op, buf.clone());
        match self.up.unexpected.pop_front() {
            None => self.up.posted.push_back((op, buf)),
            Some(Unexpected::Eager {
                peer,
                hdr,
                bytes,
                credit,
            }) => {
                let n = bytes.len().min(cap);
                self.up.mem.write(&buf, 0, &bytes[..n]);
                self.up.hdrs.insert(op, hdr);
                self.up.from.insert(op, peer);
                self.up.recv_done(op, Ok(n));
                self.w.give_back(credit);
            }
            Some(Unexpected::Rndv {
                peer,
                hdr,
                held,
                credit,
            }) => {
                self.up.hdrs.insert(op, hdr);
                self.up.from.insert(op, peer);
                self.up.waiting.insert(op, hdr);
                self.w.give_back(credit);
                let (sink, range) = (self.up.mem.sink(&buf), self.up.mem.range(&buf));
                self.w.accept(held, op, sink, smallvec![range], &mut self.up, self.now);
            }
        }
        op
    }

    /// Messages kept for receives not yet posted.
    pub fn unexpected(&self) -> usize {
        self.up.unexpected.len()
    }

    /// One pass of the wire, `dt` ns after the last.
    pub fn progress_after(&mut self, dt: u64) -> bool {
        self.now += dt;
        let any = self.w.progress(self.now, &mut self.up);
        self.give_back();
        any
    }

    pub fn progress(&mut self) -> bool {
        self.progress_after(1_000)
    }

    /// The message the wire left, taken in (`Exec::take_left`).
    pub fn take_left(&mut self) {
        self.w.take_left(&mut self.up);
        self.give_back();
    }

    /// A pass for the rings only (`Exec::take_arrivals`).
    pub fn take_arrivals(&mut self) {
        self.w.take_arrivals(&mut self.up);
        self.give_back();
    }

    fn give_back(&mut self) {
        for c in std::mem::take(&mut self.up.credits) {
            self.w.give_back(c);
        }
    }

    /// What receive `op`'s buffer holds.
    pub fn data(&self, op: OpId) -> Vec<u8> {
        self.up.mem.read(&self.bufs[&op])
    }

    pub fn send_result(&self, op: OpId) -> Option<Result<(), i32>> {
        self.up.sends.get(&op).copied()
    }

    pub fn recv_result(&self, op: OpId) -> Option<Result<usize, i32>> {
        self.up.recvs.get(&op).copied()
    }
}

/// A simulated process on `world`: port `port` of 127.0.0.99, pid
/// `port` too, with a mailbox of `nrings` rings of `depth` slots of
/// `payload` bytes lending `loan` each.
pub(super) fn sim_node(world: &World, port: u16, depth: usize, payload: usize, loan: u64) -> Node<SimPort, SimMem> {
    sim_node_spanning(world, port, depth, payload, 1, loan)
}

/// The same, a message spanning up to `span` slots.
pub(super) fn sim_node_spanning(
    world: &World,
    port: u16,
    depth: usize,
    payload: usize,
    span: usize,
    loan: u64,
) -> Node<SimPort, SimMem> {
    sim_node_shaped(world, port, 4, depth, payload, span, loan)
}

/// The same, with a mailbox of `nrings` rings.
pub(super) fn sim_node_shaped(
    world: &World,
    port: u16,
    nrings: usize,
    depth: usize,
    payload: usize,
    span: usize,
    loan: u64,
) -> Node<SimPort, SimMem> {
    // As the mailbox's geometry has it (`Geometry::with_span`), which the
    // machine's config takes in `Exec::new`.
    let span = span.clamp(1, depth);
    let addr = super::test_addr(port);
    let (p, mem) = world.process(addr, port as u32, nrings, depth, payload, span, loan);
    let m = super::machine::Machine::new(
        super::machine::Config {
            payload_max: payload,
            span,
            nrings,
            loan,
            cma: true,
            rndv_threshold: usize::MAX,
        },
        port as u64,
    );
    Node::new(Exec::with_port(addr, vec![], p, m, port as u64), SimMem(mem))
}

/// What a model's run does next: a step of its case, or a death.
pub(super) enum Turn<S, W> {
    Step(S),
    Kill(W),
}

/// A model's steps in order, with its death (who, before which step; after
/// the last one, once they are all taken) in its place.
pub(super) fn turns<S: Copy, W: Copy>(steps: &[S], death: Option<(W, usize)>) -> Vec<Turn<S, W>> {
    let mut v: Vec<_> = steps.iter().map(|&s| Turn::Step(s)).collect();
    if let Some((who, at)) = death {
        v.insert(at.min(steps.len()), Turn::Kill(who));
    }
    v
}

/// `len` bytes that differ from message to message (`seed`).
pub(super) fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u64 * 131 + seed * 7 + (i as u64 >> 8)) as u8)
        .collect()
}

/// A send with no special completion semantics.
pub(super) const PLAIN: SendFlags = SendFlags {
    inject: false,
    inject_complete: false,
    delivery: false,
    more: false,
};

/// `PLAIN` with `f` applied.
pub(super) fn flags(f: impl FnOnce(&mut SendFlags)) -> SendFlags {
    let mut x = PLAIN;
    f(&mut x);
    x
}
