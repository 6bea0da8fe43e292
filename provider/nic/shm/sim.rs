//! A simulated host for the shm wire's tests: mailboxes whose rings are
//! plain memory, processes whose address spaces are plain memory, and a
//! `Port` over them. Executors (with their machines) of several
//! "processes" then talk in one thread, in virtual time, and the test
//! decides who runs when, whose memory may be read (CMA refused), who dies,
//! and what a hostile producer writes into a ring.

use super::cma::{ranges_len, sub_ranges, Range};
use super::machine::{CmaErr, Connected, Copied, PeerIx, RingIx};
use super::mailbox::{self, SlotHead, GRANTS, SLOT_HDR};
use super::mapping::SharedBytes;
use super::port::{Claim, Port};
use crate::proto::MemRanges;
use crate::proto::{RecvSink, SendSource};
use smallvec::smallvec;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::{Arc, Mutex};

/// An address space: regions of plain memory at made-up addresses.
#[derive(Default)]
pub(crate) struct Space {
    regions: BTreeMap<u64, Vec<u8>>,
    next: u64,
}

impl Space {
    /// A new region of `len` bytes (zeros), and its address.
    pub fn alloc(&mut self, len: usize) -> u64 {
        let addr = 0x1000_0000 + self.next;
        // Regions never touch: an access that runs off one faults.
        self.next += (len as u64).next_multiple_of(4096) + 4096;
        self.regions.insert(addr, vec![0; len]);
        addr
    }

    fn region(&mut self, addr: u64, len: u64) -> Option<&mut [u8]> {
        let (&base, r) = self.regions.range_mut(..=addr).next_back()?;
        let off = (addr - base) as usize;
        let end = off.checked_add(len as usize)?;
        r.get_mut(off..end)
    }

    pub fn read(&mut self, addr: u64, len: u64) -> Option<Vec<u8>> {
        self.region(addr, len).map(|r| r.to_vec())
    }

    pub fn write(&mut self, addr: u64, b: &[u8]) -> bool {
        match self.region(addr, b.len() as u64) {
            Some(r) => {
                r.copy_from_slice(b);
                true
            }
            None => false,
        }
    }

    /// The bytes of `v`, in order; `None` if any piece is not mapped.
    fn gather(&mut self, v: &[Range]) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        for &(a, l) in v {
            out.extend(self.read(a, l)?);
        }
        Some(out)
    }

    /// Writes `b` over the pieces of `v`, in order.
    fn scatter(&mut self, v: &[Range], mut b: &[u8]) -> bool {
        for &(a, l) in v {
            let n = (l as usize).min(b.len());
            if !self.write(a, &b[..n]) {
                return false;
            }
            b = &b[n..];
        }
        true
    }
}

pub(crate) type Mem = Arc<Mutex<Space>>;

/// A send's bytes in a simulated address space.
pub(crate) struct MemSource {
    pub mem: Mem,
    pub addr: u64,
    pub len: usize,
}

impl SendSource for MemSource {
    fn len(&self) -> usize {
        self.len
    }
    fn read_at(&self, offset: usize, dst: &mut [u8]) {
        let b = self
            .mem
            .lock()
            .unwrap()
            .read(self.addr + offset as u64, dst.len() as u64);
        dst.copy_from_slice(&b.expect("a send's bytes are mapped"));
    }
    fn ranges(&self) -> Option<MemRanges> {
        Some(smallvec![(self.addr, self.len as u64)])
    }
}

/// A receive's buffer in a simulated address space.
pub(crate) struct MemSink {
    pub mem: Mem,
    pub addr: u64,
    pub cap: usize,
}

impl RecvSink for MemSink {
    fn capacity(&self) -> usize {
        self.cap
    }
    fn write_at(&mut self, offset: usize, src: &[u8]) {
        let n = src.len().min(self.cap.saturating_sub(offset));
        assert!(self.mem.lock().unwrap().write(self.addr + offset as u64, &src[..n]));
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Grant {
    Free,
    Armed(u64),
    Writing(u64),
    Done(u64),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RingState {
    Free,
    Active,
    Closed,
}

struct Ring {
    state: RingState,
    sender: Option<(SocketAddr, u32)>,
    /// Whether the owner has seen the claim.
    seen: bool,
    /// Published and not yet released, oldest first, with positions (a
    /// message spanning slots takes as many positions).
    slots: VecDeque<(u64, SlotHead, Vec<u8>)>,
    head: u64,
    tail: u64,
    freed: u64,
    grants: [Grant; GRANTS],
}

struct Mailbox {
    owner: u32,
    open: bool,
    loan: u64,
    depth: u64,
    payload_max: usize,
    /// Slots one message may span.
    span: usize,
    /// The longest message the owner wants copied (`Port::set_copy_max`);
    /// every one it holds until a test says otherwise (virtual time
    /// teaches the executor nothing: `SimPort::now`).
    copy_max: usize,
    sleeping: bool,
    rings: Vec<Ring>,
}

struct Proc {
    alive: bool,
    mem: Mem,
}

#[derive(Default)]
struct Host {
    /// Every mailbox ever made (a process that restarts at an address
    /// makes a new one; peers still map the old), and the current one of
    /// each address.
    boxes: Vec<Mailbox>,
    names: HashMap<SocketAddr, usize>,
    procs: HashMap<u32, Proc>,
    refuse_cma: bool,
    bells: Vec<SocketAddr>,
    /// `Port::post_ahead` hints so far.
    hints: u64,
    /// `Port::post_body_ahead` hints so far, with their lengths.
    body_hints: Vec<usize>,
}

/// The simulated host: processes and their mailboxes.
#[derive(Clone, Default)]
pub(crate) struct World(Rc<RefCell<Host>>);

impl Mailbox {
    /// Bytes of a slot, header included (as the real mailbox counts them).
    fn slot_size(&self) -> usize {
        self.payload_max + SLOT_HDR
    }
    /// The longest message: one spanning `span` slots.
    fn msg_max(&self) -> usize {
        mailbox::msg_max(self.span, self.slot_size())
    }
    /// Positions the consumer counts for a slot whose header says `len`
    /// (`mailbox::counted_span`; 0 there, a refused length, is one).
    fn counted_span(&self, len: usize) -> u64 {
        mailbox::counted_span(len, self.span, self.slot_size()).max(1) as u64
    }
}

impl World {
    /// A process at `addr` (pid `pid`) with a mailbox of `nrings` rings of
    /// `depth` slots of `payload_max` bytes, a message spanning up to
    /// `span` of them, each ring lending `loan` credit bytes: its port and
    /// its memory.
    #[allow(clippy::too_many_arguments)]
    pub fn process(
        &self,
        addr: SocketAddr,
        pid: u32,
        nrings: usize,
        depth: usize,
        payload_max: usize,
        span: usize,
        loan: u64,
    ) -> (SimPort, Mem) {
        let mem: Mem = Arc::default();
        let mut h = self.0.borrow_mut();
        h.procs.insert(
            pid,
            Proc {
                alive: true,
                mem: mem.clone(),
            },
        );
        let ring = || Ring {
            state: RingState::Free,
            sender: None,
            seen: false,
            slots: VecDeque::new(),
            head: 0,
            tail: 0,
            freed: 0,
            grants: [Grant::Free; GRANTS],
        };
        let id = h.boxes.len();
        h.names.insert(addr, id);
        h.boxes.push(Mailbox {
            owner: pid,
            open: true,
            loan,
            depth: depth as u64,
            payload_max,
            span,
            copy_max: usize::MAX,
            sleeping: false,
            rings: (0..nrings).map(|_| ring()).collect(),
        });
        let port = SimPort {
            world: self.clone(),
            me: addr,
            mb: id,
            pid,
            outs: Vec::new(),
            peeked: None,
            spares_asked: 0,
        };
        (port, mem)
    }

    /// Process `pid` dies: its memory cannot be read any more, its
    /// mailbox is read by nobody.
    pub fn kill(&self, pid: u32) {
        if let Some(p) = self.0.borrow_mut().procs.get_mut(&pid) {
            p.alive = false;
        }
    }

    /// From now on, cross-memory attach is refused (or allowed again).
    pub fn refuse_cma(&self, refuse: bool) {
        self.0.borrow_mut().refuse_cma = refuse;
    }

    /// Doorbells rung so far, and to whom.
    pub fn bells(&self) -> Vec<SocketAddr> {
        self.0.borrow().bells.clone()
    }

    /// Slots published into `owner`'s mailbox and not yet taken.
    pub fn in_rings(&self, owner: SocketAddr) -> usize {
        let h = self.0.borrow();
        h.boxes[h.names[&owner]].rings.iter().map(|r| r.slots.len()).sum()
    }

    /// How often a producer said more posts follow (`Port::post_ahead`).
    pub fn post_ahead_hints(&self) -> u64 {
        self.0.borrow().hints
    }

    /// The lengths of the posts after which a producer said the next may
    /// be as long (`Port::post_body_ahead`).
    pub fn post_body_ahead_hints(&self) -> Vec<usize> {
        self.0.borrow().body_hints.clone()
    }

    /// Whether `owner`'s mailbox is flagged asleep.
    pub fn sleeping(&self, owner: SocketAddr) -> bool {
        let h = self.0.borrow();
        h.boxes[h.names[&owner]].sleeping
    }
}

/// One simulated process's view: the `Port` its executor runs on.
pub(crate) struct SimPort {
    world: World,
    me: SocketAddr,
    pid: u32,
    /// Our mailbox.
    mb: usize,
    /// Our rings in peers' mailboxes: (mailbox, ring).
    outs: Vec<Option<(usize, RingIx)>>,
    /// The last slot peeked: (ring, position, header length, bytes).
    peeked: Option<(RingIx, u64, usize, Vec<u8>)>,
    /// Spare rings the executor asked to have warm, in all
    /// (`Port::warm_spares`; a simulated mailbox has no pages).
    pub spares_asked: usize,
}

impl SimPort {
    /// A producer that breaks the rules: publishes `head` and `payload`
    /// into our ring `ix` as they are.
    pub fn publish_raw(&mut self, ix: PeerIx, head: SlotHead, payload: Vec<u8>) {
        let (owner, r) = self.outs[ix].expect("connected");
        let mut h = self.world.0.borrow_mut();
        let max = h.boxes[owner].msg_max();
        // Positions as the consumer will count them (`release`).
        let span = h.boxes[owner].counted_span(head.len);
        let ring = &mut h.boxes[owner].rings[r];
        let pos = ring.tail;
        ring.tail += span;
        let mut payload = payload;
        payload.resize(head.len.min(max), 0);
        ring.slots.push_back((pos, head, payload));
    }

    /// A producer that breaks the rules: sets grant `g` of our ring `ix`
    /// to "writing" for `rid` and leaves it so.
    #[allow(dead_code)]
    pub fn hold_grant(&mut self, ix: PeerIx, g: usize, rid: u64) {
        let (owner, r) = self.outs[ix].expect("connected");
        let mut h = self.world.0.borrow_mut();
        h.boxes[owner].rings[r].grants[g] = Grant::Writing(rid);
    }

    fn with_out<T>(&self, ix: PeerIx, f: impl FnOnce(&Mailbox, &Ring) -> T) -> Option<T> {
        let (owner, r) = (*self.outs.get(ix)?)?;
        let h = self.world.0.borrow();
        let b = &h.boxes[owner];
        Some(f(b, &b.rings[r]))
    }

    fn with_ring<T>(&self, r: RingIx, f: impl FnOnce(&mut Ring) -> T) -> T {
        let mut h = self.world.0.borrow_mut();
        f(&mut h.boxes[self.mb].rings[r])
    }

    fn alive(&self, pid: u32) -> bool {
        self.world.0.borrow().procs.get(&pid).is_some_and(|p| p.alive)
    }

    fn mem_of(&self, pid: u32) -> Option<Mem> {
        self.world
            .0
            .borrow()
            .procs
            .get(&pid)
            .filter(|p| p.alive)
            .map(|p| p.mem.clone())
    }

    fn copy(&self, from: u32, from_v: &[Range], to: u32, to_v: &[Range]) -> Copied {
        if self.world.0.borrow().refuse_cma {
            return Err(CmaErr::Refused(libc::EPERM));
        }
        let (Some(src), Some(dst)) = (self.mem_of(from), self.mem_of(to)) else {
            return Err(CmaErr::Gone);
        };
        let n = ranges_len(from_v).min(ranges_len(to_v));
        let take = sub_ranges(from_v, 0, n);
        let bytes = src.lock().unwrap().gather(&take).ok_or(CmaErr::Fault(libc::EFAULT))?;
        let put = sub_ranges(to_v, 0, n);
        if !dst.lock().unwrap().scatter(&put, &bytes) {
            return Err(CmaErr::Fault(libc::EFAULT));
        }
        Ok(n as usize)
    }
}

impl Drop for SimPort {
    /// The endpoint closes: its mailbox, and its rings in peers' mailboxes.
    fn drop(&mut self) {
        self.world.0.borrow_mut().boxes[self.mb].open = false;
        for ix in 0..self.outs.len() {
            self.disconnect(ix);
        }
    }
}

impl Port for SimPort {
    type Slot = (RingIx, u64);

    fn connect(&mut self, peer: SocketAddr) -> Option<Connected> {
        let mut h = self.world.0.borrow_mut();
        let id = *h.names.get(&peer)?;
        let owner_alive = {
            let b = &h.boxes[id];
            h.procs.get(&b.owner).is_some_and(|p| p.alive) && b.open
        };
        if !owner_alive {
            return None;
        }
        let b = &mut h.boxes[id];
        let r = b.rings.iter().position(|r| r.state == RingState::Free)?;
        let ring = &mut b.rings[r];
        ring.state = RingState::Active;
        ring.sender = Some((self.me, self.pid));
        ring.seen = false;
        ring.slots.clear();
        ring.head = 0;
        ring.tail = 0;
        ring.freed = 0;
        ring.grants = [Grant::Free; GRANTS];
        let (loan, slot_size, span) = (b.loan, b.slot_size(), b.span);
        drop(h);
        let ix = match self.outs.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                self.outs.push(None);
                self.outs.len() - 1
            }
        };
        self.outs[ix] = Some((id, r));
        Some(Connected {
            ix,
            loan,
            slot_size,
            span,
        })
    }

    fn disconnect(&mut self, ix: PeerIx) {
        let Some((owner, r)) = self.outs[ix].take() else { return };
        self.world.0.borrow_mut().boxes[owner].rings[r].state = RingState::Closed;
    }

    fn owner_closed(&self, ix: PeerIx) -> bool {
        self.with_out(ix, |b, _| !b.open).unwrap_or(true)
    }

    fn owner_gone(&self, ix: PeerIx) -> bool {
        match self.with_out(ix, |b, _| (b.open, b.owner)) {
            Some((open, owner)) => !open || !self.alive(owner),
            None => true,
        }
    }

    /// As the real port: false for a message the ring cannot carry.
    fn room(&self, ix: PeerIx, len: usize) -> bool {
        self.with_out(ix, |b, r| {
            len <= b.msg_max() && r.tail + b.counted_span(len) - r.head <= b.depth
        })
        .unwrap_or(false)
    }

    fn freed(&self, ix: PeerIx) -> u64 {
        self.with_out(ix, |_, r| r.freed).unwrap_or(0)
    }

    fn post_ahead(&self, _ix: PeerIx) {
        self.world.0.borrow_mut().hints += 1;
    }

    fn post_body_ahead(&mut self, _ix: PeerIx, len: usize) {
        self.world.0.borrow_mut().body_hints.push(len);
    }

    fn post(&mut self, ix: PeerIx, head: &SlotHead, fill: impl FnOnce(&mut [u8])) -> Option<bool> {
        let (owner, r) = (*self.outs.get(ix)?)?;
        let mut h = self.world.0.borrow_mut();
        let b = &mut h.boxes[owner];
        assert!(head.len <= b.msg_max(), "our own frames fit the slots they span");
        let span = b.counted_span(head.len);
        let ring = &mut b.rings[r];
        if ring.tail + span - ring.head > b.depth {
            return None;
        }
        let mut payload = vec![0u8; head.len];
        fill(&mut payload);
        let pos = ring.tail;
        ring.tail += span;
        ring.slots.push_back((pos, *head, payload));
        Some(std::mem::take(&mut b.sleeping))
    }

    fn consumed(&self, ix: PeerIx, pos: u64) -> bool {
        self.with_out(ix, |_, r| r.head > pos).unwrap_or(false)
    }

    fn copy_max(&self, ix: PeerIx) -> usize {
        self.with_out(ix, |b, _| b.copy_max).unwrap_or(usize::MAX)
    }

    fn write_granted(&mut self, ix: PeerIx, grant: usize, rid: u64, local: &[Range], remote: &[Range]) -> Copied {
        let Some((owner, r)) = self.outs.get(ix).copied().flatten() else {
            return Err(CmaErr::Gone);
        };
        let owner_pid = {
            let mut h = self.world.0.borrow_mut();
            let b = &mut h.boxes[owner];
            let g = &mut b.rings[r].grants[grant];
            if *g != Grant::Armed(rid) {
                return Err(CmaErr::Revoked);
            }
            *g = Grant::Writing(rid);
            b.owner
        };
        let res = self.copy(self.pid, local, owner_pid, remote);
        self.world.0.borrow_mut().boxes[owner].rings[r].grants[grant] = Grant::Done(rid);
        res
    }

    fn claims(&mut self, out: &mut Vec<Claim>) {
        let mut h = self.world.0.borrow_mut();
        let mb = self.mb;
        for (ring, r) in h.boxes[mb].rings.iter_mut().enumerate() {
            // A ring claimed and closed again before we looked counts too:
            // what its producer left in it is read.
            if r.state != RingState::Free && !r.seen {
                r.seen = true;
                let (peer, pid) = r.sender.expect("claimed");
                out.push(Claim { ring, peer, pid });
            }
        }
    }

    fn claims_waiting(&self) -> bool {
        let h = self.world.0.borrow();
        h.boxes[self.mb]
            .rings
            .iter()
            .any(|r| r.state != RingState::Free && !r.seen)
    }

    fn warm_spares(&mut self, n: usize) {
        self.spares_asked += n;
    }

    fn peek(&mut self, ring: RingIx) -> Option<((RingIx, u64), SlotHead)> {
        let (pos, head, payload) = self.with_ring(ring, |r| r.slots.front().cloned())?;
        self.peeked = Some((ring, pos, head.len, payload));
        Some(((ring, pos), head))
    }

    fn ready(&self, ring: RingIx) -> bool {
        self.with_ring(ring, |r| !r.slots.is_empty())
    }

    fn payload(&self, slot: &(RingIx, u64)) -> Option<SharedBytes<'_>> {
        let (r, pos, len, bytes) = self.peeked.as_ref().expect("peeked first");
        assert_eq!((*r, *pos), *slot, "the payload of the slot peeked last");
        // The header's length is the producer's word, checked like the
        // real mailbox checks it: against the longest message.
        let max = self.world.0.borrow().boxes[self.mb].msg_max();
        (*len <= max).then(|| SharedBytes::of_slice(&bytes[..*len]))
    }

    fn set_copy_max(&mut self, bytes: usize) {
        self.world.0.borrow_mut().boxes[self.mb].copy_max = bytes;
    }

    fn release(&mut self, (ring, pos): (RingIx, u64)) {
        let mut h = self.world.0.borrow_mut();
        let b = &mut h.boxes[self.mb];
        let (p, head, _) = b.rings[ring].slots.pop_front().expect("released a published slot");
        assert_eq!(p, pos, "slots are released in order");
        // As the real consumer: the span is read from the length.
        b.rings[ring].head = pos + b.counted_span(head.len);
    }

    fn give_credit(&mut self, ring: RingIx, freed: u64) {
        self.with_ring(ring, |r| r.freed = freed);
    }

    fn arm_grant(&mut self, ring: RingIx, rid: u64) -> Option<usize> {
        self.with_ring(ring, |r| {
            let g = r.grants.iter().position(|g| *g == Grant::Free)?;
            r.grants[g] = Grant::Armed(rid);
            Some(g)
        })
    }

    fn revoke_grant(&mut self, ring: RingIx, grant: usize, rid: u64) {
        let alive = self.sender_alive(ring);
        self.with_ring(ring, |r| match r.grants[grant] {
            Grant::Armed(x) | Grant::Done(x) if x == rid => r.grants[grant] = Grant::Free,
            // One thread: a write never runs while we look, unless a
            // hostile producer left the word so; a real executor would
            // wait for its death here.
            Grant::Writing(x) if x == rid => assert!(!alive, "revoking a grant a live writer holds"),
            _ => {}
        });
    }

    fn ring_closed(&self, ring: RingIx) -> bool {
        self.world.0.borrow().boxes[self.mb].rings[ring].state == RingState::Closed
    }

    fn sender_alive(&self, ring: RingIx) -> bool {
        let s = self.world.0.borrow().boxes[self.mb].rings[ring].sender;
        s.is_some_and(|(_, pid)| self.alive(pid))
    }

    fn free_ring(&mut self, ring: RingIx) {
        self.with_ring(ring, |r| {
            r.state = RingState::Free;
            r.sender = None;
            r.seen = false;
            r.slots.clear();
        });
    }

    fn arm(&mut self, active: &[RingIx]) -> bool {
        let mut h = self.world.0.borrow_mut();
        let b = &mut h.boxes[self.mb];
        b.sleeping = true;
        let unseen = b.rings.iter().any(|r| r.state != RingState::Free && !r.seen);
        !unseen && active.iter().all(|&r| b.rings[r].slots.is_empty())
    }

    fn disarm(&mut self) {
        self.world.0.borrow_mut().boxes[self.mb].sleeping = false;
    }

    fn cma_read(&mut self, pid: u32, local: &[Range], remote: &[Range]) -> Copied {
        self.copy(pid, remote, self.pid, local)
    }

    fn ring_bell(&mut self, to: SocketAddr) -> std::io::Result<()> {
        self.world.0.borrow_mut().bells.push(to);
        Ok(())
    }

    /// Virtual time does not move while the executor works: every copy
    /// and pull costs nothing, and nothing is learnt (`choice.rs`), so the
    /// tests' frames do not depend on the machine they run on.
    fn now(&self) -> u64 {
        0
    }
}
