//! The endpoint's collective engine: joins and collective operations
//! (fi_collective(3)) run as schedules (`coll::sched`) of internal
//! messages between the members of a group.
//!
//! * **Groups.** `fi_join_collective` takes an AV set's members (socket
//!   addresses, in set order; a member's rank is its position) and names
//!   the group by a hash of that list and of how many times this endpoint
//!   joined the same list before. Every member joins the same sets in the
//!   same order (fi_collective(3)), so all of them arrive at the same name
//!   without talking. The join itself is a barrier over the new group; it
//!   ends with FI_JOIN_COMPLETE on the endpoint's EQ.
//! * **Messages.** A collective's messages carry `coll::COLL` in their
//!   flags, the group in the tag and (sequence number, phase, sender rank)
//!   in the data word. They are matched here, apart from the application's
//!   tags, by that exact name and by the sender's address (a message that
//!   names a rank from another address is dropped and counted). One that
//!   arrives before its receive is posted is kept (`Parked`) with the
//!   wire's credit, as an unexpected message is, so what peers running
//!   ahead can make us hold stays bounded by the wires' credits.
//! * **Buffers.** The application's input is copied at the call and its
//!   result buffer written only by the schedule's `Copy` steps; messages
//!   go out of and land in the operation's own memory. So the application
//!   buffers are touched once each, and an operation that fails never
//!   leaves a wire writing into them.
//! * **Progress.** Wires report the ends of internal sends and receives
//!   as they report any (`Req::CollSend`, `Req::CollRecv`); the rounds move
//!   on in `coll_advance`, after each progress pass and each call, where
//!   the wires can be driven again.
//! * **Failure.** A member that stops answering (its wire reports
//!   `PeerFailed`) fails the operations of every group it is in: their
//!   receives still unmatched are withdrawn, and each completes with an
//!   error once nothing of it is moving any more. A member whose
//!   operation fails sends the others an abort (phase `ABORT`, the error
//!   as its body), so that a member waiting for it (a tree's child for
//!   its parent's broadcast) fails too instead of waiting forever.
#![forbid(unsafe_code)]

use super::rma::let_go;
use super::rma_target::StageSink;
use super::rx::{Handler, Req};
use super::Ep;
use crate::coll::av_set::AvSet;
use crate::coll::sched::{self, Buf, Kind, Region, Schedule, Step};
use crate::coll::{Spec, COLL};
use crate::ffi::*;
use crate::nic::atomic::{self, AtomicClass};
use crate::nic::fabreq::Dir;
use crate::nic::iov::{Iov, IovSink, IovSource};
use crate::nic::wire::{Body, Credit, Held, OpId, SendFlags, SendOp, Sent, Take, Wires};
use crate::progress::now_ns;
use crate::proto::MemRanges;
use crate::proto::{MsgHdr, RecvSink, SendSource};
use std::collections::HashMap;
use std::ffi::c_void;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

/// A collective message's name: its group, and its sequence number in the
/// group, phase and sender's rank packed in one word
/// (`seq << 32 | phase << 24 | rank`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    group: u64,
    word: u64,
}

impl Key {
    fn new(group: u64, seq: u32, phase: u8, from: usize) -> Key {
        Key {
            group,
            word: (seq as u64) << 32 | (phase as u64) << 24 | from as u64,
        }
    }
    fn of(hdr: &MsgHdr) -> Key {
        Key {
            group: hdr.tag,
            word: hdr.data,
        }
    }
    fn seq(&self) -> u32 {
        (self.word >> 32) as u32
    }
    fn phase(&self) -> u8 {
        (self.word >> 24) as u8
    }
    fn from(&self) -> usize {
        (self.word & 0xff_ffff) as usize
    }
}

/// The phase of an abort: a member whose operation failed tells every
/// other member, so that nobody waits for it forever. Its body is the
/// error (a positive libfabric error number, 4 bytes).
const ABORT: u8 = 0xff;

/// Aborts kept for operations not started here yet.
const MAX_EARLY_ABORTS: usize = 64;

/// What an abort's send is named by: no operation of ours waits for it.
const NO_OP: u64 = u64::MAX;

/// A group this endpoint joined, by its address (`fi_mc_addr`).
struct Group {
    id: u64,
    members: Arc<[SocketAddr]>,
    me: usize,
    /// The next collective's sequence number (the join was 0).
    seq: u32,
    joined: bool,
}

/// A message that came before its receive was posted.
struct Parked {
    peer: SocketAddr,
    len: u64,
    body: ParkedBody,
    /// Given back to the sender's wire when the message is taken.
    credit: Credit,
}

enum ParkedBody {
    Eager(Vec<u8>),
    Rndv(Held),
}

/// An internal receive (`Req::CollRecv`): which operation, from whom, how
/// much, and where it lands.
pub(crate) struct CollRecv {
    coll: u64,
    peer: SocketAddr,
    len: usize,
    buf: Arc<Mutex<Vec<u8>>>,
}

fn lock(b: &Mutex<Vec<u8>>) -> MutexGuard<'_, Vec<u8>> {
    b.lock().unwrap_or_else(|p| p.into_inner())
}

/// One collective operation of this member.
struct CollOp {
    ctx: usize,
    /// FI_COMPLETION, for a selective CQ.
    flags: u64,
    /// A join: the address of the group it makes (its fid).
    join: Option<u64>,
    group: u64,
    seq: u32,
    members: Arc<[SocketAddr]>,
    me: usize,
    spec: Spec,
    sched: Schedule,
    /// The next round to start.
    round: usize,
    /// Messages of the round started last that have not ended.
    waiting: usize,
    /// Sends of that round that found no transmit descriptor: tried again
    /// at the next pass.
    unsent: Vec<Step>,
    err: Option<i32>,
    /// The error came in an abort (so the other members know already),
    /// or ours went out.
    told: bool,
    input: Vec<u8>,
    acc: Vec<u8>,
    tmp: Vec<Arc<Mutex<Vec<u8>>>>,
    out: IovSink,
}

impl CollOp {
    fn read(&self, r: Region) -> Vec<u8> {
        let range = r.off..r.off + r.len;
        match r.buf {
            Buf::In => self.input[range].to_vec(),
            Buf::Acc => self.acc[range].to_vec(),
            Buf::Tmp(t) => lock(&self.tmp[t])[range].to_vec(),
            Buf::Out => unreachable!("schedules never read the result buffer"),
        }
    }

    /// Runs a local step.
    fn local(&mut self, st: &Step) -> Result<(), i32> {
        match *st {
            Step::Copy { src, dst } => {
                let data = self.read(src);
                match dst.buf {
                    Buf::Acc => self.acc[dst.off..dst.off + dst.len].copy_from_slice(&data),
                    Buf::Out => self.out.write_at(dst.off, &data),
                    _ => unreachable!("schedules copy into Acc or Out"),
                }
                Ok(())
            }
            Step::Reduce { src, dst } => {
                debug_assert_eq!(dst.buf, Buf::Acc);
                let data = self.read(src);
                let target = &mut self.acc[dst.off..dst.off + dst.len];
                atomic::apply(
                    AtomicClass::Plain,
                    self.spec.op,
                    self.spec.datatype,
                    target,
                    &data,
                    &[],
                    &mut [],
                )
            }
            _ => Ok(()),
        }
    }

    fn is_member(&self, peer: &SocketAddr) -> bool {
        self.members.contains(peer)
    }
}

/// The collective state of an endpoint (under its lock).
#[derive(Default)]
pub(crate) struct Colls {
    groups: HashMap<u64, Group>,
    /// Joins so far, by the hash of their member list.
    joins: HashMap<u64, u32>,
    ops: HashMap<u64, CollOp>,
    next_op: u64,
    /// Internal receives waiting for their message, by its name.
    posted: HashMap<Key, OpId>,
    parked: HashMap<Key, Parked>,
    /// Credits of parked messages nobody will take, to give back.
    credits: Vec<Credit>,
    /// Aborts that came before their operation started here: (group,
    /// sequence number, sender, error), the oldest dropped past
    /// `MAX_EARLY_ABORTS`.
    aborts: std::collections::VecDeque<(u64, u32, SocketAddr, i32)>,
    /// Messages dropped: a name nobody could send (wrong sender, twice).
    pub(super) dropped: u64,
}

impl Colls {
    /// No operation under way, no credit to give back: a pass has
    /// nothing of ours to do (`coll_advance`).
    pub(super) fn idle(&self) -> bool {
        self.ops.is_empty() && self.credits.is_empty()
    }

    /// Drops the parked messages `gone` picks (nobody will take them);
    /// the wires' credit they held goes back at the next `coll_advance`.
    fn unpark(&mut self, gone: impl Fn(&Key, &Parked) -> bool) {
        let credits = &mut self.credits;
        self.parked.retain(|k, p| {
            let drop = gone(k, p);
            if drop {
                credits.push(p.credit);
            }
            !drop
        });
    }

    /// (operations, receives posted, messages parked), for the tests.
    #[cfg(test)]
    pub(super) fn in_flight(&self) -> (usize, usize, usize) {
        (self.ops.len(), self.posted.len(), self.parked.len())
    }
}

/// FNV-1a: a group's name must come out the same in every member's
/// process (the provider's keyed hashes are per process on purpose).
fn fnv(words: impl IntoIterator<Item = u64>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for w in words {
        for b in w.to_le_bytes() {
            h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

fn addr_words(a: &SocketAddr) -> [u64; 3] {
    match a {
        SocketAddr::V4(v) => [4, u32::from(*v.ip()) as u64, v.port() as u64],
        SocketAddr::V6(v) => {
            let ip = u128::from(*v.ip());
            [
                ip as u64,
                (ip >> 64) as u64,
                v.port() as u64 | (v.scope_id() as u64) << 16,
            ]
        }
    }
}

/// Who runs an operation: a group's name, the operation's sequence number
/// in it, the members and our rank.
pub(super) struct Member {
    pub(super) group: u64,
    pub(super) seq: u32,
    pub(super) members: Arc<[SocketAddr]>,
    pub(super) me: usize,
}

/// What one member's operation works on: its context and flags
/// (FI_COMPLETION), the application's input (copied) and result buffer.
pub(super) struct Work {
    pub(super) ctx: usize,
    pub(super) flags: u64,
    pub(super) input: Vec<u8>,
    pub(super) out: Iov,
}

/// One collective call after argument conversion (`shims_coll.rs`).
pub(super) struct CollArgs {
    pub(super) spec: Spec,
    pub(super) coll_addr: u64,
    /// The application's input, read at the call.
    pub(super) input: Iov,
    /// The application's result buffer, written until completion.
    pub(super) out: Iov,
    pub(super) flags: u64,
    pub(super) ctx: usize,
}

/// The shape of a group as a call sees it.
pub(super) struct Shape {
    pub(super) n: usize,
    pub(super) me: usize,
    /// The root's rank, when the call named one.
    pub(super) root: usize,
}

impl Ep {
    fn check_coll(&self) -> Result<&super::Bindings, isize> {
        let b = self.check_enabled()?;
        if self.caps & FI_COLLECTIVE == 0 {
            crate::warn!(FI_LOG_EP_DATA, "collective: endpoint was opened without FI_COLLECTIVE");
            return Err(-FI_EOPNOTSUPP as isize);
        }
        Ok(b)
    }

    /// The group `coll_addr` names: its size, our rank and `root`'s (an
    /// fi_addr of the AV) rank in it.
    pub(super) fn coll_shape(&self, coll_addr: u64, root: Option<u64>) -> Result<Shape, isize> {
        let b = self.check_coll()?;
        let root_peer = match root {
            None => None,
            Some(r) => match b.av.as_ref().and_then(|av| av.lookup(r)) {
                Some(p) => Some(p),
                None => {
                    crate::warn!(FI_LOG_EP_DATA, "collective: root fi_addr {:#x} is not in the AV", r);
                    return Err(-FI_EINVAL as isize);
                }
            },
        };
        let st = self.lock();
        let Some(g) = st.coll.groups.get(&coll_addr) else {
            crate::warn!(
                FI_LOG_EP_DATA,
                "collective: {:#x} is not a group this endpoint joined",
                coll_addr
            );
            return Err(-FI_EINVAL as isize);
        };
        let root = match root_peer {
            None => 0,
            Some(p) => match g.members.iter().position(|m| *m == p) {
                Some(r) => r,
                None => {
                    crate::warn!(FI_LOG_EP_DATA, "collective: the root is not a member of the group");
                    return Err(-FI_EINVAL as isize);
                }
            },
        };
        Ok(Shape {
            n: g.members.len(),
            me: g.me,
            root,
        })
    }

    /// A collective call: a new operation on a joined group.
    pub(super) fn collective(&self, a: CollArgs) -> isize {
        let now = now_ns();
        self.touch();
        if let Err(e) = self.check_coll() {
            return e;
        }
        let mut st = self.lock();
        if st.coll.ops.len() >= self.tx_size {
            self.progress_locked(&mut st, now);
            return -FI_EAGAIN as isize;
        }
        let Some(g) = st.coll.groups.get_mut(&a.coll_addr) else {
            crate::warn!(
                FI_LOG_EP_DATA,
                "collective: {:#x} is not a group this endpoint joined",
                a.coll_addr
            );
            return -FI_EINVAL as isize;
        };
        if !g.joined {
            crate::warn!(FI_LOG_EP_DATA, "collective: the group's join has not completed");
            return -FI_EOPBADSTATE as isize;
        }
        let seq = g.seq;
        g.seq = g.seq.wrapping_add(1).max(1);
        let m = Member {
            group: g.id,
            seq,
            members: g.members.clone(),
            me: g.me,
        };
        let src = IovSource::new(a.input);
        let mut input = vec![0u8; src.len()];
        src.read_at(0, &mut input);
        let w = Work {
            ctx: a.ctx,
            flags: a.flags & FI_COMPLETION,
            input,
            out: a.out,
        };
        let (port, mut h) = st.split(self);
        h.coll_begin(port, m, a.spec, w, now);
        0
    }

    /// fi_join_collective: joins the group of `set`'s members (`set_addr`
    /// is the set's address); its completion comes as FI_JOIN_COMPLETE on
    /// the endpoint's EQ.
    pub(crate) fn join_collective(
        &self,
        set: &AvSet,
        set_addr: u64,
        coll_addr: u64,
        ctx: *mut c_void,
    ) -> Result<*mut fid_mc, i32> {
        let now = now_ns();
        let b = self.check_coll().map_err(|e| e as i32)?;
        if b.eq.is_none() {
            crate::warn!(FI_LOG_EP_CTRL, "fi_join_collective: the endpoint has no EQ bound");
            return Err(-FI_ENOEQ);
        }
        let Some(av) = b.av.as_ref().filter(|av| Arc::ptr_eq(av, &set.av.0)) else {
            crate::warn!(
                FI_LOG_EP_CTRL,
                "fi_join_collective: the set is not of the endpoint's AV"
            );
            return Err(-FI_EINVAL);
        };
        let Some(members) = set.members().iter().map(|&a| av.lookup(a)).collect::<Option<Vec<_>>>() else {
            crate::warn!(FI_LOG_EP_CTRL, "fi_join_collective: a member was removed from the AV");
            return Err(-FI_EINVAL);
        };
        let mut seen = std::collections::HashSet::new();
        if members.is_empty() || !members.iter().all(|m| seen.insert(*m)) {
            crate::warn!(
                FI_LOG_EP_CTRL,
                "fi_join_collective: the set is empty or names a peer twice"
            );
            return Err(-FI_EINVAL);
        }
        let mut st = self.lock();
        let local = st.port.local_addr();
        let Some(me) = members.iter().position(|m| *m == local) else {
            crate::warn!(
                FI_LOG_EP_CTRL,
                "fi_join_collective: this endpoint ({}) is not a member of the set",
                local
            );
            return Err(-FI_EINVAL);
        };
        if coll_addr != FI_ADDR_NOTAVAIL && coll_addr != set_addr && !st.coll.groups.contains_key(&coll_addr) {
            crate::warn!(
                FI_LOG_EP_CTRL,
                "fi_join_collective: coll_addr {:#x} names no set or group",
                coll_addr
            );
            return Err(-FI_EINVAL);
        }
        let list = fnv(members.iter().flat_map(addr_words));
        let nth = st.coll.joins.entry(list).or_insert(0);
        let id = fnv([list, *nth as u64]);
        *nth += 1;
        let mc = crate::coll::mc::create(self.me.clone(), ctx);
        let addr = mc as u64;
        let members: Arc<[SocketAddr]> = members.into();
        st.coll.groups.insert(
            addr,
            Group {
                id,
                members: members.clone(),
                me,
                seq: 1,
                joined: false,
            },
        );
        let m = Member {
            group: id,
            seq: 0,
            members,
            me,
        };
        let (port, mut h) = st.split(self);
        h.coll_join(port, m, addr, ctx as usize, now);
        Ok(mc)
    }

    /// fi_close of a group: collectives on it are refused from now on
    /// (those running finish).
    pub(crate) fn coll_leave(&self, addr: u64) {
        self.lock().coll.groups.remove(&addr);
    }
}

fn new_op(m: Member, spec: Spec, w: Work, join: Option<u64>) -> CollOp {
    let Work { ctx, flags, input, out } = w;
    let sched = sched::schedule(spec.kind, m.members.len(), m.me, spec.block());
    CollOp {
        ctx,
        flags,
        join,
        group: m.group,
        seq: m.seq,
        me: m.me,
        spec,
        acc: vec![0; sched.acc],
        tmp: sched.tmp.iter().map(|&l| Arc::new(Mutex::new(vec![0; l]))).collect(),
        sched,
        members: m.members,
        round: 0,
        waiting: 0,
        unsent: Vec::new(),
        err: None,
        told: false,
        input,
        out: IovSink::new(out),
    }
}

impl<F: super::Face> Handler<'_, F> {
    /// A collective `spec` of member `m` on `w`.
    pub(super) fn coll_begin(&mut self, wires: &mut dyn Wires, m: Member, spec: Spec, w: Work, now: u64) {
        let op = new_op(m, spec, w, None);
        self.coll_start(wires, op, now);
    }

    /// The join of member `m` to the group at `addr`: a barrier.
    pub(super) fn coll_join(&mut self, wires: &mut dyn Wires, m: Member, addr: u64, ctx: usize, now: u64) {
        let spec = Spec {
            kind: Kind::Barrier,
            size: 0,
            count: 0,
            datatype: FI_VOID,
            op: FI_NOOP,
        };
        let w = Work {
            ctx,
            flags: 0,
            input: Vec::new(),
            out: Iov::empty(),
        };
        let op = new_op(m, spec, w, Some(addr));
        self.coll_start(wires, op, now);
    }

    /// A new operation: it runs as far as it can at once.
    fn coll_start(&mut self, wires: &mut dyn Wires, mut op: CollOp, now: u64) {
        let early = self
            .coll
            .aborts
            .iter()
            .position(|&(g, seq, peer, _)| g == op.group && seq == op.seq && op.is_member(&peer));
        if let Some(k) = early {
            let (.., err) = self.coll.aborts.remove(k).expect("found above");
            op.err = Some(err);
            op.told = true;
        }
        let id = self.coll.next_op;
        self.coll.next_op += 1;
        self.coll.ops.insert(id, op);
        self.coll_advance(wires, now);
    }

    /// Moves every operation on as far as it goes: sends tried again,
    /// rounds started, operations ended. Every progress pass calls it:
    /// without collectives it is two loads.
    #[inline]
    pub(super) fn coll_advance(&mut self, wires: &mut dyn Wires, now: u64) {
        if self.coll.idle() {
            return;
        }
        self.coll_advance_all(wires, now);
    }

    #[cold]
    fn coll_advance_all(&mut self, wires: &mut dyn Wires, now: u64) {
        for c in std::mem::take(&mut self.coll.credits) {
            wires.give_back(c);
        }
        let before = self.coll.ops.len();
        loop {
            let ids: Vec<u64> = self.coll.ops.keys().copied().collect();
            let mut moved = false;
            for id in ids {
                moved |= self.advance_op(wires, id, now);
            }
            if !moved {
                break;
            }
        }
        if self.coll.ops.len() < before {
            // An operation completed: its last messages' senders wait for
            // our acknowledgements, which must not wait for a next
            // progress pass. Under FI_PROGRESS_MANUAL there may be none
            // for a while (fabtests' fi_multinode_coll sits in an
            // out-of-band barrier after each collective).
            wires.flush_acks(now);
        }
    }

    /// One step of operation `id`; whether anything changed.
    fn advance_op(&mut self, wires: &mut dyn Wires, id: u64, now: u64) -> bool {
        let Some(o) = self.coll.ops.get_mut(&id) else {
            return false;
        };
        let failed = o.err.is_some();
        if failed {
            o.waiting -= o.unsent.len();
            o.unsent.clear();
        }
        let retry = std::mem::take(&mut o.unsent);
        let tell = failed && !o.told;
        if failed {
            o.told = true;
            self.withdraw_recvs(id);
        }
        if tell {
            self.coll_abort(wires, id, now);
        }
        let tried = retry.len();
        for st in retry {
            self.coll_send(wires, id, st, now);
        }
        let Some(o) = self.coll.ops.get_mut(&id) else {
            return false;
        };
        if o.waiting > 0 {
            // Moved if a send that waited for a descriptor went.
            return o.unsent.len() < tried;
        }
        if o.err.is_some() || o.round == o.sched.rounds.len() {
            self.coll_finish(id);
            return true;
        }
        let steps = o.sched.rounds[o.round].clone();
        o.round += 1;
        for st in steps.iter().filter(|s| !s.is_message()) {
            if let Err(e) = o.local(st) {
                o.err = Some(-e);
            }
        }
        if o.err.is_some() {
            return true;
        }
        let msgs: Vec<Step> = steps.into_iter().filter(|s| s.is_message()).collect();
        o.waiting += msgs.len();
        for st in msgs {
            match st {
                Step::Send { .. } => self.coll_send(wires, id, st, now),
                _ => self.coll_post(wires, id, st, now),
            }
        }
        true
    }

    /// The end of operation `id`: its completion (a join's on the EQ).
    fn coll_finish(&mut self, id: u64) {
        let Some(o) = self.coll.ops.remove(&id) else { return };
        if o.err.is_some() {
            // What other members sent this failed operation goes.
            let (group, seq) = (o.group, o.seq);
            self.coll.unpark(|k, _| k.group == group && k.seq() == seq);
        }
        match o.join {
            Some(addr) => {
                if let Some(g) = self.coll.groups.get_mut(&addr) {
                    g.joined = o.err.is_none();
                }
                self.face.join_complete(addr, o.ctx, o.err);
            }
            None => self.face.coll_complete(o.ctx, o.flags, o.err),
        }
    }

    /// One of operation `id`'s messages ended (`err`: how it failed).
    fn step_done(&mut self, id: u64, err: Option<i32>) {
        if let Some(o) = self.coll.ops.get_mut(&id) {
            o.waiting -= 1;
            o.err = o.err.or(err);
        }
    }

    /// Sends a `Step::Send` of operation `id`.
    fn coll_send(&mut self, wires: &mut dyn Wires, id: u64, st: Step, now: u64) {
        let Step::Send { to, phase, src } = st else {
            unreachable!("a send step")
        };
        let o = &self.coll.ops[&id];
        let peer = o.members[to];
        let key = Key::new(o.group, o.seq, phase, o.me);
        let bytes: Box<[u8]> = o.read(src).into();
        match self.send_internal(wires, peer, key, bytes, id, now) {
            Ok(Sent::Pending) => {}
            Ok(Sent::Done) => self.step_done(id, None),
            Err(e) if e == -FI_EAGAIN => {
                if let Some(o) = self.coll.ops.get_mut(&id) {
                    o.unsent.push(st);
                }
            }
            Err(e) => self.step_done(id, Some(-e)),
        }
    }

    /// Sends `bytes` to `peer` as the internal message `key`, a part of
    /// operation `owner` until the wire ends it (the part is gone again
    /// unless the send is pending).
    fn send_internal(
        &mut self,
        wires: &mut dyn Wires,
        peer: SocketAddr,
        key: Key,
        bytes: Box<[u8]>,
        owner: u64,
        now: u64,
    ) -> Result<Sent, i32> {
        let hdr = MsgHdr {
            tag: key.group,
            data: key.word,
            len: bytes.len() as u64,
            flags: COLL,
        };
        let op = self.reqs.insert_part(Dir::Tx, Req::CollSend(owner));
        let s = SendOp {
            peer,
            op,
            hdr,
            flags: SendFlags::default(),
        };
        let r = wires.send(s, IovSource::with_head(bytes, Iov::empty()), self, now);
        if !matches!(r, Ok(Sent::Pending)) {
            self.reqs.remove(op);
        }
        r
    }

    /// Posts a `Step::Recv` of operation `id`: taken from what is parked,
    /// or waiting for its message.
    fn coll_post(&mut self, wires: &mut dyn Wires, id: u64, st: Step, now: u64) {
        let Step::Recv { from, phase, tmp, len } = st else {
            unreachable!("a receive step")
        };
        let o = &self.coll.ops[&id];
        let peer = o.members[from];
        let key = Key::new(o.group, o.seq, phase, from);
        let buf = o.tmp[tmp].clone();
        let op = self.reqs.insert_part(
            Dir::Rx,
            Req::CollRecv(Box::new(CollRecv {
                coll: id,
                peer,
                len,
                buf,
            })),
        );
        if let Some(p) = self.coll.parked.remove(&key) {
            wires.give_back(p.credit);
            if p.peer == peer {
                match p.body {
                    ParkedBody::Eager(b) => self.coll_fill(op, &Body::Bytes(&b)),
                    ParkedBody::Rndv(h) => {
                        if let Some((sink, ranges)) = self.coll_accept(op, p.len) {
                            wires.accept(h, op, sink, ranges, self, now);
                        } else {
                            wires.discard(h, now);
                        }
                    }
                }
                return;
            }
            self.forged(p.peer, "a collective message from a non-member");
            if let ParkedBody::Rndv(h) = p.body {
                wires.discard(h, now);
            }
        }
        self.coll.posted.insert(key, op);
    }

    /// An internal receive takes an eager message now.
    fn coll_fill(&mut self, op: OpId, body: &Body<'_>) {
        let Some(Req::CollRecv(r)) = self.reqs.remove(op) else {
            return;
        };
        let n = match body {
            Body::Bytes(b) => b.len(),
            Body::Shared(s) => s.len(),
            Body::Rndv(_) => unreachable!("an eager message"),
        };
        let err = if n != r.len {
            Some(size_mismatch(n, r.len))
        } else {
            let mut buf = lock(&r.buf);
            match body {
                Body::Bytes(b) => buf.copy_from_slice(b),
                Body::Shared(s) => s.copy_to(0, &mut buf),
                Body::Rndv(_) => {}
            }
            None
        };
        self.step_done(r.coll, err);
    }

    /// An internal receive takes a rendezvous message of `len` bytes: the
    /// sink the wire pulls into, or None when there is nothing to pull
    /// (the receive has ended: empty, or the sizes disagree).
    fn coll_accept(&mut self, op: OpId, len: u64) -> Option<(Box<dyn RecvSink>, MemRanges)> {
        let Some(Req::CollRecv(r)) = self.reqs.get(op) else {
            return None;
        };
        if len as usize != r.len || len == 0 {
            let Some(Req::CollRecv(r)) = self.reqs.remove(op) else {
                unreachable!("just seen")
            };
            let err = (len as usize != r.len).then(|| size_mismatch(len as usize, r.len));
            self.step_done(r.coll, err);
            return None;
        }
        let ranges = smallvec::smallvec![(lock(&r.buf).as_ptr() as u64, len)];
        Some((Box::new(StageSink::new(r.buf.clone())), ranges))
    }

    /// A collective message arrived (`Upcall::arrived` with `COLL`).
    /// Out of line: the tagged receive path's function stays small.
    #[inline(never)]
    pub(super) fn coll_arrived(&mut self, peer: SocketAddr, hdr: MsgHdr, body: Body<'_>, credit: Credit) -> Take {
        let key = Key::of(&hdr);
        if key.phase() == ABORT {
            self.aborted(peer, key, &body);
            return let_go(&body);
        }
        if let Some(&op) = self.coll.posted.get(&key) {
            if !matches!(self.reqs.get(op), Some(Req::CollRecv(r)) if r.peer == peer) {
                self.forged(peer, "a collective message naming another member");
                return let_go(&body);
            }
            self.coll.posted.remove(&key);
            return match body {
                Body::Rndv(_) => match self.coll_accept(op, hdr.len) {
                    Some((sink, ranges)) => Take::Accept { op, sink, ranges },
                    None => Take::Discard,
                },
                _ => {
                    self.coll_fill(op, &body);
                    Take::Done
                }
            };
        }
        if self.coll.parked.contains_key(&key) {
            self.forged(peer, "a collective message sent twice");
            return let_go(&body);
        }
        let body = match body {
            Body::Bytes(b) => ParkedBody::Eager(b.to_vec()),
            Body::Shared(s) => ParkedBody::Eager(s.to_vec()),
            Body::Rndv(h) => ParkedBody::Rndv(h),
        };
        self.coll.parked.insert(
            key,
            Parked {
                peer,
                len: hdr.len,
                body,
                credit,
            },
        );
        Take::Kept
    }

    /// Operation `id` failed here: every other member hears of it (an
    /// abort), so none waits for a message from us that will not come.
    fn coll_abort(&mut self, wires: &mut dyn Wires, id: u64, now: u64) {
        let o = &self.coll.ops[&id];
        let err = o.err.unwrap_or(FI_EIO);
        let key = Key::new(o.group, o.seq, ABORT, o.me);
        let to: Vec<SocketAddr> = o
            .members
            .iter()
            .enumerate()
            .filter(|&(r, _)| r != o.me)
            .map(|(_, p)| *p)
            .collect();
        for peer in to {
            // Best effort: a member we cannot reach cannot wait for us.
            let _ = self.send_internal(wires, peer, key, Box::new(err.to_le_bytes()), NO_OP, now);
        }
    }

    /// An abort from `peer`: the operation it names fails here too (or
    /// will, when it starts).
    fn aborted(&mut self, peer: SocketAddr, key: Key, body: &Body<'_>) {
        let mut b = [0u8; 4];
        match body {
            Body::Bytes(x) if x.len() == 4 => b.copy_from_slice(x),
            Body::Shared(x) if x.len() == 4 => x.copy_to(0, &mut b),
            _ => return self.forged(peer, "a malformed collective abort"),
        }
        // A positive error number (errno's, or libfabric's from 256 on),
        // or EIO for anything else.
        let err = Some(i32::from_le_bytes(b))
            .filter(|e| (1..FI_EOTHER + 64).contains(e))
            .unwrap_or(FI_EIO);
        let op = self
            .coll
            .ops
            .values_mut()
            .find(|o| o.group == key.group && o.seq == key.seq());
        match op {
            Some(o) if o.members.get(key.from()) == Some(&peer) => {
                if o.err.is_none() {
                    o.err = Some(err);
                    o.told = true;
                }
            }
            Some(_) => self.forged(peer, "a collective abort naming another member"),
            None => {
                if self.coll.aborts.len() == MAX_EARLY_ABORTS {
                    self.coll.aborts.pop_front();
                }
                self.coll.aborts.push_back((key.group, key.seq(), peer, err));
            }
        }
    }

    fn forged(&mut self, peer: SocketAddr, what: &str) {
        self.coll.dropped += 1;
        crate::warn!(
            FI_LOG_EP_DATA,
            "dropped {} from {} ({} so far)",
            what,
            peer,
            self.coll.dropped
        );
    }

    /// A wire's RecvDone/RecvFailed of internal receive `op`.
    pub(super) fn coll_received(&mut self, op: OpId, written: Option<usize>, err: Option<i32>) {
        let Some(Req::CollRecv(r)) = self.reqs.remove(op) else {
            return;
        };
        let err = err.or(match written {
            Some(w) if w != r.len => Some(size_mismatch(w, r.len)),
            _ => None,
        });
        self.step_done(r.coll, err);
    }

    /// A wire's SendDone/SendFailed of internal send `op`.
    pub(super) fn coll_sent(&mut self, op: OpId, err: Option<i32>) {
        if let Some(Req::CollSend(id)) = self.reqs.remove(op) {
            self.step_done(id, err);
        }
    }

    /// A peer stopped answering: every operation of a group it is in
    /// fails, and what it parked here goes.
    pub(super) fn coll_peer_failed(&mut self, peer: SocketAddr) {
        for o in self.coll.ops.values_mut() {
            if o.is_member(&peer) {
                o.err = o.err.or(Some(FI_EHOSTUNREACH));
            }
        }
        self.coll.unpark(|_, p| p.peer == peer);
    }

    /// Withdraws operation `id`'s receives whose messages have not come
    /// (it failed): nothing will land in them.
    fn withdraw_recvs(&mut self, id: u64) {
        let reqs = &*self.reqs;
        let mine: Vec<(Key, OpId)> = self
            .coll
            .posted
            .iter()
            .filter(|(_, op)| matches!(reqs.get(**op), Some(Req::CollRecv(r)) if r.coll == id))
            .map(|(k, op)| (*k, *op))
            .collect();
        for (k, op) in mine {
            self.coll.posted.remove(&k);
            self.reqs.remove(op);
            if let Some(o) = self.coll.ops.get_mut(&id) {
                o.waiting -= 1;
            }
        }
    }
}

/// Members disagree on a collective's size (their counts differ).
fn size_mismatch(got: usize, want: usize) -> i32 {
    crate::warn!(
        FI_LOG_EP_DATA,
        "collective: a member sent {} bytes where {} were expected (do the members' counts differ?)",
        got,
        want
    );
    FI_EMSGSIZE
}
