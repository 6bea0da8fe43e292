//! The receive and transmit paths against a fake endpoint face and fake
//! wires: what a posted receive, an arrival, a wire event or a send does
//! to the operations, the wires and the completions, with no libfabric
//! objects, sockets or shared memory.

mod coll;
mod rma;

use super::coll::Colls;
use super::rma::{Onesided, RmaReq};
use super::rx::{Full, Handler, RecvArgs, Req, Rx, SendReq};
use super::tx::Busy;
use super::Face;
use crate::cq::CqEntry;
use crate::ffi::*;
use crate::mr::MrEvent;
use crate::nic::fabreq::{Dir, FabReqs};
use crate::nic::iov::{Iov, IovSource};
use crate::nic::wire::{
    Arrival, Body, Credit, Held, OpId, SendFlags, SendOp, Sent, Take, Upcall, Wire, WireEvent, WireKind, Wires,
};
use crate::proto::MemRanges;
use crate::proto::{MsgHdr, RecvSink, SendSource};
use crate::tme::{MatchSpec, ADDR_UNSPEC};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::net::SocketAddr;

/// The fake wires' eager limit.
const FAKE_EAGER: usize = 2048;

/// What a message from the udp wire holds when its sender needs no credit.
const NO_CREDIT: Credit = Credit::Udp {
    peer: SocketAddr::V4(std::net::SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, 0)),
    bytes: 0,
};

/// A completion as the fake face saw it.
#[derive(Clone, Debug, PartialEq)]
struct Done {
    ctx: usize,
    flags: u64,
    len: usize,
    tag: u64,
    data: u64,
    src: u64,
    err: Option<i32>,
    olen: usize,
}

impl Done {
    fn of(e: &CqEntry, err: Option<i32>, olen: usize) -> Done {
        Done {
            ctx: e.op_context as usize,
            flags: e.flags,
            len: e.len,
            tag: e.tag,
            data: e.data,
            src: e.src,
            err,
            olen,
        }
    }
}

#[derive(Default)]
struct FakeFace {
    caps: u64,
    av: RefCell<HashMap<SocketAddr, u64>>,
    gen: Cell<u64>,
    tx: RefCell<Vec<(usize, Option<i32>)>>,
    rx: RefCell<Vec<Done>>,
    peeks: RefCell<Vec<Done>>,
    /// Registered memory: key -> (address, length, access).
    mem: RefCell<HashMap<u64, (usize, usize, u64)>>,
    /// One-sided completions: (context, flags, error).
    rma: RefCell<Vec<(usize, u64, Option<i32>)>>,
    /// Peers' accesses: (access, remote CQ data, length).
    remote: RefCell<Vec<(u64, Option<u64>, usize)>>,
    /// Collective completions: (context, flags, error).
    colls: RefCell<Vec<(usize, u64, Option<i32>)>>,
    /// Join completions: (group address, context, error).
    joins: RefCell<Vec<(u64, usize, Option<i32>)>>,
}

impl FakeFace {
    fn insert(&self, peer: SocketAddr, a: u64) {
        self.av.borrow_mut().insert(peer, a);
        self.gen.set(self.gen.get() + 1);
    }
}

impl Face for FakeFace {
    fn caps(&self) -> u64 {
        self.caps
    }
    fn reverse(&self, peer: &SocketAddr) -> Option<u64> {
        self.av.borrow().get(peer).copied()
    }
    fn av_generation(&self) -> u64 {
        self.gen.get()
    }
    fn tx_complete(&self, r: &SendReq, err: Option<i32>) {
        self.tx.borrow_mut().push((r.ctx, err));
    }
    fn rx_complete(&self, _op_flags: u64, e: CqEntry, err: Option<i32>, olen: usize, _peer: Option<&SocketAddr>) {
        self.rx.borrow_mut().push(Done::of(&e, err, olen));
    }
    fn rx_peek(&self, e: CqEntry, err: Option<i32>) {
        self.peeks.borrow_mut().push(Done::of(&e, err, 0));
    }
    fn rma_complete(&self, r: &RmaReq, err: Option<i32>) {
        self.rma.borrow_mut().push((r.ctx, r.flags, err));
    }
    fn resolve(&self, key: u64, addr: u64, len: u64, access: u64) -> Result<(Iov, MrEvent), i32> {
        // Offsets into the region, as without FI_MR_VIRT_ADDR.
        let Some(&(base, size, rights)) = self.mem.borrow().get(&key) else {
            return Err(FI_EINVAL);
        };
        if rights & access != access || addr.checked_add(len).is_none_or(|end| end > size as u64) {
            return Err(FI_EACCES);
        }
        // SAFETY: the tests register buffers that outlive the endpoint's
        // use of them and touch them only once the operation is over.
        Ok((unsafe { Iov::from_raw_parts(base + addr as usize, len as usize) }, None))
    }
    fn remote_done(&self, access: u64, data: Option<u64>, len: usize, _ev: MrEvent) {
        self.remote.borrow_mut().push((access, data, len));
    }
    fn coll_complete(&self, ctx: usize, flags: u64, err: Option<i32>) {
        self.colls.borrow_mut().push((ctx, flags, err));
    }
    fn join_complete(&self, mc: u64, ctx: usize, err: Option<i32>) {
        self.joins.borrow_mut().push((mc, ctx, err));
    }
}

/// A wire that records what the paths ask of it.
#[derive(Default)]
struct FakeWire {
    kind: Option<WireKind>,
    sends: Vec<(SendOp, Vec<u8>)>,
    /// What the next `send` answers (default: Pending).
    answer: Option<Result<Sent, i32>>,
    accepted: Vec<(Held, OpId, Box<dyn RecvSink>)>,
    discarded: Vec<Held>,
    refused: Vec<(Held, i32)>,
    credits: Vec<Credit>,
    cancellable: bool,
    backlog: usize,
}

impl Wire for FakeWire {
    fn kind(&self) -> WireKind {
        self.kind.unwrap_or(WireKind::Udp)
    }
    fn send(&mut self, s: SendOp, src: IovSource, _up: &mut dyn Upcall, _now: u64) -> Result<Sent, i32> {
        let mut data = vec![0u8; src.len()];
        src.read_at(0, &mut data);
        self.sends.push((s, data));
        self.answer.unwrap_or(Ok(Sent::Pending))
    }
    fn accept(&mut self, held: Held, op: OpId, sink: Box<dyn RecvSink>, _r: MemRanges, _up: &mut dyn Upcall, _n: u64) {
        self.accepted.push((held, op, sink));
    }
    fn discard(&mut self, held: Held, _now: u64) {
        self.discarded.push(held);
    }
    fn give_back(&mut self, credit: Credit) {
        self.credits.push(credit);
    }
    fn cancel_recv(&mut self, _op: OpId) -> bool {
        self.cancellable
    }
    fn progress(&mut self, _now: u64, _up: &mut dyn Upcall) -> bool {
        false
    }
    fn next_deadline(&self, _now: u64) -> Option<u64> {
        None
    }
    fn busy(&self) -> bool {
        false
    }
    fn backlog(&self) -> usize {
        self.backlog
    }
    fn eager_max(&self) -> usize {
        FAKE_EAGER
    }
    fn arm(&mut self) -> bool {
        true
    }
    fn stats_line(&self) -> String {
        String::new()
    }
}

/// Two fake wires: peers in `local` go over "shm".
#[derive(Default)]
struct FakeWires {
    udp: FakeWire,
    shm: FakeWire,
    local: Vec<SocketAddr>,
    /// What `tx_free` answers.
    tx_free: usize,
    /// `flush_acks` calls.
    flushes: usize,
}

impl FakeWires {
    fn wire(&mut self, k: WireKind) -> &mut FakeWire {
        match k {
            WireKind::Shm => &mut self.shm,
            WireKind::Udp => &mut self.udp,
        }
    }
}

impl Wires for FakeWires {
    fn send(&mut self, s: SendOp, src: IovSource, up: &mut dyn Upcall, now: u64) -> Result<Sent, i32> {
        let k = if self.local.contains(&s.peer) {
            WireKind::Shm
        } else {
            WireKind::Udp
        };
        self.wire(k).send(s, src, up, now)
    }
    fn accept(&mut self, held: Held, op: OpId, sink: Box<dyn RecvSink>, r: MemRanges, up: &mut dyn Upcall, now: u64) {
        self.wire(held.wire).accept(held, op, sink, r, up, now);
    }
    fn discard(&mut self, held: Held, now: u64) {
        self.wire(held.wire).discard(held, now);
    }
    fn refuses(&mut self, peer: SocketAddr) -> bool {
        self.local.contains(&peer)
    }
    fn refuse(&mut self, held: Held, err: i32, now: u64) {
        self.wire(held.wire).refused.push((held, err));
        let _ = now;
    }
    fn cancel_recv(&mut self, wire: WireKind, op: OpId) -> bool {
        self.wire(wire).cancel_recv(op)
    }
    fn give_back(&mut self, credit: Credit) {
        match credit {
            Credit::Shm(_) => self.shm.credits.push(credit),
            _ => self.udp.credits.push(credit),
        }
    }
    fn backlog(&self) -> usize {
        self.udp.backlog + self.shm.backlog
    }
    fn tx_free(&self) -> usize {
        self.tx_free
    }
    fn eager_max(&mut self, _peer: SocketAddr) -> usize {
        FAKE_EAGER
    }
    fn flush_acks(&mut self, _now: u64) {
        self.flushes += 1;
    }
}

/// The paths under test, with everything they touch.
struct T {
    face: FakeFace,
    rx: Rx,
    reqs: FabReqs<Req>,
    os: Onesided,
    coll: Colls,
    wires: FakeWires,
}

fn peer(n: u8) -> SocketAddr {
    SocketAddr::from(([10, 0, 0, n], 4000 + n as u16))
}

fn tagged(tag: u64, len: usize) -> MsgHdr {
    MsgHdr {
        tag,
        data: 0,
        len: len as u64,
        flags: MsgHdr::TAGGED,
    }
}

/// `b` as a receive's buffers.
///
/// # Safety
/// `b` must stay alive, and the test must not read or write it, while the
/// receive is in flight (until its completion, or until the test stops
/// driving the endpoint: the fake wires write only when a test makes them).
unsafe fn iov(b: &mut [u8]) -> Iov {
    // SAFETY: the caller's contract, which is Iov::from_raw_parts'.
    unsafe { Iov::from_raw_parts(b.as_mut_ptr() as usize, b.len()) }
}

const RFLAGS: u64 = FI_RECV | FI_TAGGED;

impl T {
    fn new(caps: u64, tx: usize, rx: usize) -> T {
        T {
            face: FakeFace {
                caps,
                ..FakeFace::default()
            },
            rx: Rx::new(),
            reqs: FabReqs::new(tx, rx),
            os: Onesided::default(),
            coll: Colls::default(),
            wires: FakeWires {
                tx_free: 64,
                ..FakeWires::default()
            },
        }
    }

    fn with<R>(&mut self, f: impl FnOnce(&mut Handler<'_, FakeFace>, &mut FakeWires) -> R) -> R {
        let mut h = Handler {
            face: &self.face,
            caps: self.face.caps(),
            rx: &mut self.rx,
            reqs: &mut self.reqs,
            os: &mut self.os,
            coll: &mut self.coll,
        };
        f(&mut h, &mut self.wires)
    }

    /// fi_trecv(buf, tag) from `src` (FI_ADDR_UNSPEC: anyone), context `ctx`.
    ///
    /// # Safety
    /// As for `iov`: `buf` stays alive and untouched while the receive is
    /// in flight.
    unsafe fn trecv(&mut self, buf: &mut [u8], src: u64, tag: u64, ignore: u64, ctx: usize) -> Result<isize, Full> {
        let a = RecvArgs {
            // SAFETY: the caller's contract.
            iov: unsafe { iov(buf) },
            src,
            tag,
            ignore,
            ctx,
            flags: 0,
            tagged: true,
        };
        let directed = self.face.caps & FI_DIRECTED_RECV != 0;
        let spec = MatchSpec::new(tag, ignore, crate::tme::src_filter(src, directed));
        self.with(|h, w| h.post(w, spec, a, RFLAGS))
    }

    /// An arrival over `wire`, as that wire would lend it.
    fn arrive(&mut self, from: SocketAddr, hdr: MsgHdr, body: Body<'_>, credit: Credit) -> Take {
        self.arrive_as(from, hdr, body, credit, false)
    }

    /// `arrive`, from a wire that could offer it again later (`may_leave`).
    fn arrive_as(&mut self, from: SocketAddr, hdr: MsgHdr, body: Body<'_>, credit: Credit, may_leave: bool) -> Take {
        self.with(|h, _| {
            h.arrived(Arrival {
                peer: &from,
                hdr,
                body,
                credit,
                may_leave,
            })
        })
    }

    fn event(&mut self, e: WireEvent) {
        self.with(|h, _| h.event(e));
    }

    fn rx_done(&self) -> Vec<Done> {
        self.face.rx.borrow().clone()
    }
}

fn rndv(id: u64) -> Body<'static> {
    Body::Rndv(Held {
        wire: WireKind::Udp,
        id,
    })
}

#[test]
fn an_eager_arrival_lands_in_the_posted_receive() {
    let mut t = T::new(FI_TAGGED | FI_SOURCE, 4, 4);
    t.face.insert(peer(1), 7);
    let mut buf = vec![0u8; 16];
    // SAFETY: the buffer outlives the receive; the test reads it after completion.
    assert_eq!(unsafe { t.trecv(&mut buf, FI_ADDR_UNSPEC, 5, 0, 100) }.ok(), Some(0));
    let take = t.arrive(peer(1), tagged(5, 3), Body::Bytes(&[1, 2, 3]), NO_CREDIT);
    assert!(matches!(take, Take::Done));
    assert_eq!(&buf[..4], &[1, 2, 3, 0]);
    let d = &t.rx_done()[0];
    assert_eq!((d.ctx, d.len, d.tag, d.src, d.err), (100, 3, 5, 7, None));
    assert_eq!(t.reqs.len(Dir::Rx), 0, "the receive's FabReq is gone");
}

#[test]
fn a_kept_eager_message_is_copied_and_its_credit_goes_back_when_taken() {
    let mut t = T::new(FI_TAGGED, 4, 4);
    let credit = Credit::Udp {
        peer: peer(2),
        bytes: 4,
    };
    let take = t.arrive(peer(2), tagged(9, 4), Body::Bytes(&[9, 8, 7, 6]), credit);
    assert!(matches!(take, Take::Kept));
    assert!(t.wires.udp.credits.is_empty(), "held while unexpected");
    let mut buf = vec![0u8; 2];
    // SAFETY: the buffer outlives the receive; the test reads it after completion.
    unsafe { t.trecv(&mut buf, FI_ADDR_UNSPEC, 9, 0, 1) }.ok().unwrap();
    assert_eq!(buf, [9, 8], "truncated to the receive");
    assert_eq!(t.wires.udp.credits, vec![credit]);
    let d = &t.rx_done()[0];
    assert_eq!((d.len, d.olen, d.err), (2, 2, Some(FI_ETRUNC)));
}

#[test]
fn a_message_nobody_waits_for_is_left_with_its_wire_when_it_may_be() {
    let mut t = T::new(FI_TAGGED, 4, 4);
    // No receive at all: left where it is, nothing kept, no credit back.
    let take = t.arrive_as(peer(2), tagged(9, 4), Body::Bytes(&[9, 8, 7, 6]), NO_CREDIT, true);
    assert!(matches!(take, Take::Later));
    assert_eq!(t.rx.tagged_kept(), 0);
    assert!(t.wires.udp.credits.is_empty());
    // Offered again with a receive for it: taken as expected.
    let mut buf = vec![0u8; 4];
    // SAFETY: the buffer outlives the receive; the test reads it after completion.
    unsafe { t.trecv(&mut buf, FI_ADDR_UNSPEC, 9, 0, 1) }.ok().unwrap();
    let take = t.arrive_as(peer(2), tagged(9, 4), Body::Bytes(&[9, 8, 7, 6]), NO_CREDIT, true);
    assert!(matches!(take, Take::Done));
    assert_eq!(buf, [9, 8, 7, 6]);
    // A receive posted for something else: the messages behind this one
    // might be its, so this one is kept rather than left.
    let mut other = vec![0u8; 4];
    // SAFETY: the buffer outlives the receive.
    unsafe { t.trecv(&mut other, FI_ADDR_UNSPEC, 1, 0, 2) }.ok().unwrap();
    let take = t.arrive_as(peer(2), tagged(9, 4), Body::Bytes(&[5, 5, 5, 5]), NO_CREDIT, true);
    assert!(matches!(take, Take::Kept));
    assert_eq!(t.rx.tagged_kept(), 1);
    // And one the wire cannot offer again is kept whatever is posted.
    let mut t = T::new(FI_TAGGED, 4, 4);
    let take = t.arrive_as(peer(2), tagged(9, 4), Body::Bytes(&[9, 8, 7, 6]), NO_CREDIT, false);
    assert!(matches!(take, Take::Kept));
}

#[test]
fn a_rendezvous_is_accepted_on_arrival_and_completes_on_the_wires_word() {
    let mut t = T::new(FI_TAGGED, 4, 4);
    let mut buf = vec![0u8; 1000];
    // SAFETY: the buffer outlives the receive; the test reads it after completion.
    unsafe { t.trecv(&mut buf, FI_ADDR_UNSPEC, 1, 0, 42) }.ok().unwrap();
    let Take::Accept { op, ranges, .. } = t.arrive(peer(1), tagged(1, 5000), rndv(77), NO_CREDIT) else {
        panic!("a posted receive accepts a rendezvous")
    };
    assert_eq!(ranges[..], [(buf.as_ptr() as u64, 1000)]);
    assert!(t.rx_done().is_empty(), "not before the data is in");
    t.event(WireEvent::RecvDone { op, written: 1000 });
    let d = &t.rx_done()[0];
    assert_eq!((d.ctx, d.len, d.olen, d.err), (42, 1000, 4000, Some(FI_ETRUNC)));
    // A late duplicate event finds nothing.
    t.event(WireEvent::RecvDone { op, written: 1000 });
    assert_eq!(t.rx_done().len(), 1);
}

#[test]
fn a_kept_rendezvous_goes_back_to_its_wire_when_a_receive_takes_it() {
    let mut t = T::new(FI_TAGGED, 4, 4);
    let held = Held {
        wire: WireKind::Shm,
        id: 3,
    };
    assert!(matches!(
        t.arrive(peer(1), tagged(1, 100), Body::Rndv(held), NO_CREDIT),
        Take::Kept
    ));
    let mut buf = vec![0u8; 100];
    // SAFETY: the buffer outlives the receive; the test reads it after completion.
    unsafe { t.trecv(&mut buf, FI_ADDR_UNSPEC, 1, 0, 5) }.ok().unwrap();
    let (h, op, _) = &t.wires.shm.accepted[0];
    assert_eq!(*h, held);
    let op = *op;
    assert!(t.wires.udp.accepted.is_empty());
    t.event(WireEvent::RecvFailed {
        op,
        err: FI_EHOSTUNREACH,
    });
    assert_eq!(t.rx_done()[0].err, Some(FI_EHOSTUNREACH));
}

#[test]
fn a_zero_length_receive_discards_a_rendezvous() {
    let mut t = T::new(FI_TAGGED, 4, 4);
    // SAFETY: the buffer outlives the receive; the test reads it after completion.
    unsafe { t.trecv(&mut [], FI_ADDR_UNSPEC, 1, 0, 5) }.ok().unwrap();
    assert!(matches!(
        t.arrive(peer(1), tagged(1, 100), rndv(1), NO_CREDIT),
        Take::Discard
    ));
    let d = &t.rx_done()[0];
    assert_eq!((d.len, d.olen), (0, 100));
}

#[test]
fn receives_beyond_rx_size_are_refused_until_one_completes() {
    let mut t = T::new(FI_TAGGED, 4, 2);
    let mut b = [0u8; 3 * 8];
    let (a, rest) = b.split_at_mut(8);
    let (b1, c1) = rest.split_at_mut(8);
    // SAFETY: the buffer outlives the receive; the test reads it after completion.
    unsafe { t.trecv(a, FI_ADDR_UNSPEC, 1, 0, 1) }.ok().unwrap();
    // SAFETY: the buffer outlives the receive; the test reads it after completion.
    unsafe { t.trecv(b1, FI_ADDR_UNSPEC, 2, 0, 2) }.ok().unwrap();
    // SAFETY: the buffer outlives the receive; the test reads it after completion.
    assert!(unsafe { t.trecv(c1, FI_ADDR_UNSPEC, 3, 0, 3) }.is_err(), "rx_size 2");
    t.arrive(peer(1), tagged(1, 1), Body::Bytes(&[1]), NO_CREDIT);
    // SAFETY: the buffer outlives the receive; the test reads it after completion.
    assert_eq!(unsafe { t.trecv(c1, FI_ADDR_UNSPEC, 3, 0, 3) }.ok(), Some(0));
}

#[test]
fn a_directed_receive_finds_a_message_from_a_sender_inserted_later() {
    let mut t = T::new(FI_TAGGED | FI_DIRECTED_RECV | FI_SOURCE, 4, 4);
    t.arrive(peer(3), tagged(1, 1), Body::Bytes(&[5]), NO_CREDIT);
    t.face.insert(peer(3), 11);
    let mut buf = [0u8; 1];
    // SAFETY: the buffer outlives the receive; the test reads it after completion.
    unsafe { t.trecv(&mut buf, 11, 1, 0, 9) }.ok().unwrap();
    assert_eq!(buf, [5]);
    assert_eq!(t.rx_done()[0].src, 11, "FI_SOURCE names it as inserted");
    // A directed receive for someone else does not take another's message.
    t.arrive(peer(4), tagged(1, 1), Body::Bytes(&[6]), NO_CREDIT);
    // SAFETY: the buffer outlives the receive; the test reads it after completion.
    unsafe { t.trecv(&mut buf, 11, 1, 0, 10) }.ok().unwrap();
    assert_eq!(t.rx_done().len(), 1);
}

#[test]
fn multi_recv_packs_messages_and_is_released_after_the_last_one_lands() {
    let mut t = T::new(FI_MSG | FI_MULTI_RECV, 4, 4);
    t.rx.min_multi_recv = 8;
    let mut buf = vec![0u8; 24];
    let a = RecvArgs {
        // SAFETY: `buf` outlives the receive; the test reads it after completion.
        iov: unsafe { iov(&mut buf) },
        src: FI_ADDR_UNSPEC,
        tag: 0,
        ignore: 0,
        ctx: 7,
        flags: FI_MULTI_RECV,
        tagged: false,
    };
    t.with(|h, w| h.post(w, MatchSpec::untagged(None), a, FI_RECV | FI_MSG))
        .ok()
        .unwrap();
    let untagged = |len| MsgHdr {
        len,
        ..MsgHdr::default()
    };
    t.arrive(peer(1), untagged(4), Body::Bytes(&[1; 4]), NO_CREDIT);
    // A rendezvous into the buffer leaves less than the minimum: consumed,
    // but released only once that message is in.
    let Take::Accept { op, .. } = t.arrive(peer(1), untagged(16), rndv(1), NO_CREDIT) else {
        panic!()
    };
    // The next message finds no buffer.
    assert!(matches!(
        t.arrive(peer(1), untagged(1), Body::Bytes(&[2]), NO_CREDIT),
        Take::Kept
    ));
    assert!(t.rx_done().iter().all(|d| d.flags & FI_MULTI_RECV == 0));
    t.event(WireEvent::RecvDone { op, written: 16 });
    let done = t.rx_done();
    assert_eq!(done.len(), 2);
    assert_eq!(done[1].flags & FI_MULTI_RECV, FI_MULTI_RECV);
    assert_eq!(&buf[..4], &[1; 4]);
    assert_eq!(t.reqs.len(Dir::Rx), 0, "buffer and slices are gone");
}

#[test]
fn peek_claim_and_discard_on_kept_messages() {
    let mut t = T::new(FI_TAGGED, 4, 4);
    t.arrive(peer(1), tagged(1, 2), Body::Bytes(&[1, 2]), NO_CREDIT);
    t.arrive(peer(1), tagged(2, 900), rndv(8), NO_CREDIT);
    let peek = |t: &mut T, tag, flags| {
        let a = RecvArgs {
            iov: Iov::empty(),
            src: ADDR_UNSPEC,
            tag,
            ignore: 0,
            ctx: tag as usize,
            flags,
            tagged: true,
        };
        t.with(|h, w| h.post(w, MatchSpec::exact(tag, None), a, RFLAGS))
    };
    peek(&mut t, 3, FI_PEEK).ok().unwrap();
    assert_eq!(t.face.peeks.borrow()[0].err, Some(FI_ENOMSG));
    peek(&mut t, 2, FI_PEEK | FI_DISCARD).ok().unwrap();
    assert_eq!(t.face.peeks.borrow()[1].len, 900);
    assert_eq!(t.wires.udp.discarded.len(), 1, "the rendezvous' sender is let go");
    peek(&mut t, 1, FI_PEEK | FI_CLAIM).ok().unwrap();
    let mut buf = [0u8; 2];
    let a = RecvArgs {
        // SAFETY: `buf` outlives the receive; the test reads it after completion.
        iov: unsafe { iov(&mut buf) },
        src: ADDR_UNSPEC,
        tag: 1,
        ignore: 0,
        ctx: 1,
        flags: FI_CLAIM,
        tagged: true,
    };
    t.with(|h, w| h.post(w, MatchSpec::exact(1, None), a, RFLAGS))
        .ok()
        .unwrap();
    assert_eq!(buf, [1, 2]);
    assert_eq!(t.rx_done()[0].len, 2);
}

#[test]
fn cancel_of_posted_and_of_matched_receives() {
    let mut t = T::new(FI_TAGGED, 4, 4);
    let mut b1 = [0u8; 8];
    let mut b2 = [0u8; 8];
    // SAFETY: the buffer outlives the receive; the test reads it after completion.
    unsafe { t.trecv(&mut b1, FI_ADDR_UNSPEC, 1, 0, 1) }.ok().unwrap();
    // SAFETY: the buffer outlives the receive; the test reads it after completion.
    unsafe { t.trecv(&mut b2, FI_ADDR_UNSPEC, 2, 0, 2) }.ok().unwrap();
    assert_eq!(t.with(|h, w| h.cancel(w, 1)), 0);
    assert_eq!(t.rx_done()[0].err, Some(FI_ECANCELED));
    // Matched, data on its way: only if the wire can take it back.
    let Take::Accept { .. } = t.arrive(peer(1), tagged(2, 8), rndv(1), NO_CREDIT) else {
        panic!()
    };
    assert_eq!(t.with(|h, w| h.cancel(w, 2)), -(FI_ENOENT as isize));
    t.wires.udp.cancellable = true;
    assert_eq!(t.with(|h, w| h.cancel(w, 2)), 0);
    assert_eq!(t.rx_done()[1].err, Some(FI_ECANCELED));
    assert_eq!(t.with(|h, w| h.cancel(w, 2)), -(FI_ENOENT as isize));
}

fn send(t: &mut T, to: SocketAddr, data: &[u8], ctx: usize) -> Result<isize, Busy> {
    let len = data.len();
    let req = SendReq {
        ctx,
        flags: FI_SEND | FI_TAGGED,
        len,
        silent: false,
    };
    // SAFETY: `data` outlives the send: the fake wires copy it at once.
    let src = IovSource::new(unsafe { Iov::from_raw_parts(data.as_ptr() as usize, len) });
    t.with(|h, w| h.send(w, 2, to, tagged(1, len), SendFlags::default(), req, src, 0))
}

#[test]
fn sends_go_to_the_wire_of_their_peer_and_complete_as_it_says() {
    let mut t = T::new(FI_TAGGED, 2, 4);
    t.wires.local = vec![peer(1)];
    assert_eq!(send(&mut t, peer(1), b"local", 1).ok(), Some(0));
    assert_eq!(send(&mut t, peer(2), b"remote", 2).ok(), Some(0));
    assert_eq!(
        (t.wires.shm.sends[0].1.as_slice(), t.wires.udp.sends[0].1.as_slice()),
        (&b"local"[..], &b"remote"[..])
    );
    // tx_size 2: the third waits.
    assert!(send(&mut t, peer(2), b"x", 3).is_err());
    let (op1, op2) = (t.wires.shm.sends[0].0.op, t.wires.udp.sends[0].0.op);
    t.event(WireEvent::SendDone { op: op1 });
    t.event(WireEvent::SendFailed {
        op: op2,
        err: FI_EHOSTUNREACH,
    });
    assert_eq!(*t.face.tx.borrow(), vec![(1, None), (2, Some(FI_EHOSTUNREACH))]);
    // Complete at once, or refused by the wire: the FabReq goes either way.
    t.wires.udp.answer = Some(Ok(Sent::Done));
    assert_eq!(send(&mut t, peer(2), b"y", 4).ok(), Some(0));
    assert_eq!(t.face.tx.borrow().last(), Some(&(4, None)), "completed from the call");
    // A later report of that (dead) id finds nothing.
    let op = t.wires.udp.sends.last().unwrap().0.op;
    t.event(WireEvent::SendDone { op });
    assert_eq!(t.face.tx.borrow().len(), 3);
    t.wires.udp.answer = Some(Err(-FI_EMSGSIZE));
    assert_eq!(send(&mut t, peer(2), b"z", 5).ok(), Some(-(FI_EMSGSIZE as isize)));
    assert_eq!(t.reqs.len(Dir::Tx), 0);
    // What the wires hold counts against the budget too.
    t.wires.shm.backlog = 2;
    assert!(send(&mut t, peer(2), b"w", 6).is_err());
}
