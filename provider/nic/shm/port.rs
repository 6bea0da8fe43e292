//! What the shm executor needs of the world, as one trait: our rings in
//! peers' mailboxes (post, room, credit word, deliveries, grant-guarded
//! writes), the rings of our own mailbox (claims, slots, credit, grants,
//! liveness of their producers), cross-memory reads, and doorbells.
//!
//! `MailboxPort` does it for real, over `mailbox.rs`, `mapping.rs` and
//! `cma.rs` (the places that touch shared memory and other processes'
//! memory) and a UDP socket of its own for doorbells. The tests' `SimPort` (`sim.rs`) does it with
//! plain memory, so the executor and the machine run unchanged in virtual
//! time.

// One `unsafe` call, `cma_read`, whose contract the machine's bookkeeping
// carries (see there); nothing else here may use unsafe.
#![deny(unsafe_code)]

use super::cache;
use super::cma::{self, Range};
use super::machine::{CmaErr, Connected, Copied, PeerIx, RingIx};
use super::mailbox::{self, Geometry, InSlot, Liveness, Mailbox, Outbox, SlotHead};
use super::mapping::SharedBytes;
use super::DOORBELL;
use std::io;
use std::net::{SocketAddr, UdpSocket};

/// A ring of our mailbox that a peer claimed.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Claim {
    pub ring: RingIx,
    pub peer: SocketAddr,
    pub pid: u32,
}

pub(crate) trait Port {
    /// A published slot of our mailbox, until it is released.
    type Slot: Copy;

    // Our rings in peers' mailboxes (we produce).

    /// Opens the mailbox of the endpoint at `peer` and claims a ring in
    /// it. `None`: no usable mailbox there.
    fn connect(&mut self, peer: SocketAddr) -> Option<Connected>;
    /// Pays the kernel's first-read cost of the owner's process ahead of
    /// the first pull from it (`cma::cma_warm_peer`). `Err`: the kernel
    /// refuses reading it, or it is gone.
    fn warm_pulls(&mut self, _ix: PeerIx) -> Result<(), CmaErr> {
        Ok(())
    }
    /// Gives the ring up (its owner frees it once drained).
    fn disconnect(&mut self, ix: PeerIx);
    /// The owner closed its mailbox (cheap: for every send).
    fn owner_closed(&self, ix: PeerIx) -> bool;
    /// The owner closed its mailbox or died.
    fn owner_gone(&self, ix: PeerIx) -> bool;
    /// The slots a message of `len` payload bytes takes are free.
    fn room(&self, ix: PeerIx, len: usize) -> bool;
    /// The credit word: bytes the owner gave back, cumulative.
    fn freed(&self, ix: PeerIx) -> u64;
    /// Publishes the next slot with `head`, its payload filled by `fill`
    /// (`head.len` bytes, on through the slots after it if they are more
    /// than a slot holds). `None`: no room. `Some(true)`: the owner
    /// sleeps and wants a doorbell.
    fn post(&mut self, ix: PeerIx, head: &SlotHead, fill: impl FnOnce(&mut [u8])) -> Option<bool>;
    /// `post` of `len` payload bytes whose header `stamp` makes once
    /// `fill` wrote them, from the nanoseconds that took (0 where nothing
    /// is timed): the owner learns what copies into its ring cost.
    fn post_stamped(
        &mut self,
        ix: PeerIx,
        len: usize,
        fill: impl FnOnce(&mut [u8]),
        stamp: impl FnOnce(u64) -> SlotHead,
    ) -> Option<bool> {
        let head = stamp(0);
        debug_assert_eq!(head.len, len);
        self.post(ix, &head, fill)
    }
    /// A hint: more posts to peer `ix` follow soon; the slots after the
    /// next may be made ready for writing. Changes nothing a peer sees.
    fn post_ahead(&self, _ix: PeerIx) {}
    /// A hint: a post of `len` bytes to peer `ix` went out, and the next
    /// may well be as long; the lines it would fill in the next slot may
    /// be made ready for writing. Changes nothing a peer sees.
    fn post_body_ahead(&mut self, _ix: PeerIx, _len: usize) {}
    /// The owner took the slot published at `pos` out of its ring.
    fn consumed(&self, ix: PeerIx, pos: u64) -> bool;
    /// The longest message the owner wants copied through its rings
    /// (`choice.rs`; 0 until it says: pull what spans slots;
    /// `usize::MAX`: any a ring holds).
    fn copy_max(&self, ix: PeerIx) -> usize;
    /// Takes grant `grant` for `rid` (refused: `Revoked`), writes `local`
    /// of ours into `remote` of the owner's process, releases the grant.
    fn write_granted(&mut self, ix: PeerIx, grant: usize, rid: u64, local: &[Range], remote: &[Range]) -> Copied;

    // The rings of our mailbox (we consume).

    /// Rings claimed since the last call, appended to `out`.
    fn claims(&mut self, out: &mut Vec<Claim>);
    /// Whether `claims` would find a ring; reads nothing else.
    fn claims_waiting(&self) -> bool;
    /// Our mapping of claimed rings faults in all their pages (at claim
    /// time only a ring's first pages are). Not on a data path.
    fn warm(&mut self) {}
    /// Our mapping faults in the rings `n` more producers will claim
    /// (`Mailbox::warm_spares`). Not on a data path.
    fn warm_spares(&mut self, _n: usize) {}
    /// The next published slot of ring `ring` and its header.
    fn peek(&mut self, ring: RingIx) -> Option<(Self::Slot, SlotHead)>;
    /// Whether `peek` would find a slot in ring `ring`; reads nothing else.
    fn ready(&self, ring: RingIx) -> bool;
    /// A slot's payload; `None` if its length does not fit a slot.
    fn payload(&self, slot: &Self::Slot) -> Option<SharedBytes<'_>>;
    /// Whether `payload` is `Some` (without making it: a small message's
    /// slot is looked at this way once, and its payload made once).
    fn fits(&self, slot: &Self::Slot) -> bool {
        self.payload(slot).is_some()
    }
    /// Hands a slot back to its producer.
    fn release(&mut self, slot: Self::Slot);
    /// Tells our producers the longest message we want copied through
    /// our rings (`choice.rs`).
    fn set_copy_max(&mut self, bytes: usize);
    /// Ring `ring`'s producer has `freed` credit bytes back (cumulative).
    fn give_credit(&mut self, ring: RingIx, freed: u64);
    /// Arms a free grant word of ring `ring` for `rid`.
    fn arm_grant(&mut self, ring: RingIx, rid: u64) -> Option<usize>;
    /// Takes grant `grant` back, waiting for a write under it that runs
    /// (or for its writer to die).
    fn revoke_grant(&mut self, ring: RingIx, grant: usize, rid: u64);
    /// The producer closed ring `ring` (call once it is drained).
    fn ring_closed(&self, ring: RingIx) -> bool;
    /// The producer of ring `ring` lives.
    fn sender_alive(&self, ring: RingIx) -> bool;
    /// Ring `ring` goes back to the pool.
    fn free_ring(&mut self, ring: RingIx);
    /// About to sleep: asks producers for a doorbell. False if a slot is
    /// already waiting in one of `active`.
    fn arm(&mut self, active: &[RingIx]) -> bool;
    /// Awake again.
    fn disarm(&mut self);

    // Other processes.

    /// Reads `remote` of process `pid` into `local` of ours.
    fn cma_read(&mut self, pid: u32, local: &[Range], remote: &[Range]) -> Copied;
    /// Wakes the sleeping endpoint at `to`.
    fn ring_bell(&mut self, to: SocketAddr) -> io::Result<()>;
    /// The time, to learn what copies and pulls cost (`choice.rs`).
    fn now(&self) -> u64 {
        crate::progress::now_ns()
    }
}

/// What a failed `process_vm_readv/writev` means for the protocol.
fn cma_err(e: io::Error) -> CmaErr {
    match e.raw_os_error() {
        Some(libc::ESRCH) => CmaErr::Gone,
        Some(x @ (libc::EPERM | libc::EACCES | libc::ENOSYS)) => CmaErr::Refused(x),
        Some(x) => CmaErr::Fault(x),
        None => CmaErr::Fault(libc::EIO),
    }
}

/// The real world: this endpoint's mailbox, its rings in local peers'
/// mailboxes, and a socket for doorbells.
pub(crate) struct MailboxPort {
    uid: u32,
    me: SocketAddr,
    mb: Mailbox,
    outs: Vec<Option<Outbox>>,
    /// Producers of the rings of our mailbox, watched for death.
    senders: Vec<Option<Liveness>>,
    /// Doorbells leave from a socket of the wire's own (any source port
    /// does: the sleeper's endpoint drops them before its UDP engine).
    bell_v4: Option<UdpSocket>,
    bell_v6: Option<UdpSocket>,
}

impl MailboxPort {
    /// Rings claimed since the last look (`Port::claims`).
    #[cold]
    fn scan_claims(&mut self, out: &mut Vec<Claim>) {
        let mut fresh = Vec::new();
        self.mb.scan_claims(&mut fresh);
        for ring in fresh {
            let info = self.mb.rings[ring].expect("claimed ring has a peer");
            self.senders[ring] = Some(Liveness::watch(info.pid));
            out.push(Claim {
                ring,
                peer: info.peer,
                pid: info.pid,
            });
        }
    }

    /// Creates the mailbox of the endpoint at `me`.
    pub fn new(me: SocketAddr, geo: Geometry, loan: u64) -> io::Result<MailboxPort> {
        let uid = mailbox::euid();
        let mb = Mailbox::create(uid, &me, geo, loan)?;
        let nrings = mb.geometry().nrings;
        Ok(MailboxPort {
            uid,
            me,
            mb,
            outs: Vec::new(),
            senders: (0..nrings).map(|_| None).collect(),
            bell_v4: None,
            bell_v6: None,
        })
    }

    pub fn geometry(&self) -> Geometry {
        self.mb.geometry()
    }

    #[cfg(test)]
    pub fn path(&self) -> &str {
        self.mb.path()
    }

    fn out(&self, ix: PeerIx) -> Option<&Outbox> {
        self.outs.get(ix)?.as_ref()
    }

    /// A producer that breaks the rules: publishes `head` (whatever its
    /// length says) and `payload` into our ring `ix`.
    #[cfg(test)]
    pub fn publish_raw(&mut self, ix: PeerIx, head: SlotHead, payload: &[u8]) {
        let mut s = self.outs[ix].as_mut().expect("connected").slot().expect("room");
        s.head(&SlotHead {
            len: payload.len(),
            ..head
        });
        s.payload(payload.len()).copy_from_slice(payload);
        s.set_len(head.len);
        s.publish();
    }

    fn bell_socket(&mut self, v6: bool) -> io::Result<&UdpSocket> {
        let (slot, any) = if v6 {
            (&mut self.bell_v6, "[::]:0")
        } else {
            (&mut self.bell_v4, "0.0.0.0:0")
        };
        if slot.is_none() {
            let s = UdpSocket::bind(any)?;
            s.set_nonblocking(true)?;
            *slot = Some(s);
        }
        Ok(slot.as_ref().expect("made above"))
    }
}

impl Port for MailboxPort {
    type Slot = InSlot;

    fn connect(&mut self, peer: SocketAddr) -> Option<Connected> {
        let out = match Outbox::connect(self.uid, &peer, &self.me) {
            Ok(Some(o)) => o,
            Ok(None) => return None,
            Err(e) => {
                crate::warn!(crate::ffi::FI_LOG_EP_CTRL, "shm mailbox of {}: {}; using UDP", peer, e);
                return None;
            }
        };
        let loan = out.loan();
        let geo = out.geometry();
        // Across last-level caches two copies through the ring cost more
        // than a pull from a few slots on (`cache.rs`).
        let span = cache::span_to(geo.span, out.near());
        let ix = match self.outs.iter().position(Option::is_none) {
            Some(i) => {
                self.outs[i] = Some(out);
                i
            }
            None => {
                self.outs.push(Some(out));
                self.outs.len() - 1
            }
        };
        Some(Connected {
            ix,
            loan,
            slot_size: geo.slot_size,
            span,
        })
    }

    fn warm_pulls(&mut self, ix: PeerIx) -> Result<(), CmaErr> {
        match self.out(ix) {
            Some(o) => cma::cma_warm_peer(o.owner_pid()).map_err(cma_err),
            None => Ok(()),
        }
    }

    fn disconnect(&mut self, ix: PeerIx) {
        if let Some(o) = self.outs.get_mut(ix) {
            *o = None;
        }
    }

    fn owner_closed(&self, ix: PeerIx) -> bool {
        self.out(ix).is_none_or(Outbox::owner_closed)
    }

    fn owner_gone(&self, ix: PeerIx) -> bool {
        self.out(ix).is_none_or(Outbox::owner_gone)
    }

    fn room(&self, ix: PeerIx, len: usize) -> bool {
        self.out(ix).is_some_and(|o| o.has_room(len))
    }

    fn freed(&self, ix: PeerIx) -> u64 {
        self.out(ix).map_or(0, Outbox::freed)
    }

    #[inline(always)]
    fn post_body_ahead(&mut self, ix: PeerIx, len: usize) {
        if let Some(o) = self.out(ix) {
            o.prefetch_body(len);
        }
    }

    #[inline(always)]
    fn post_ahead(&self, ix: PeerIx) {
        if let Some(o) = self.out(ix) {
            o.prefetch_ahead();
        }
    }

    // Every small send's path: kept inline (out of line it cost a message
    // 30 instructions, bench/pollbench-callgrind).
    #[inline(always)]
    fn post(&mut self, ix: PeerIx, head: &SlotHead, fill: impl FnOnce(&mut [u8])) -> Option<bool> {
        let mut s = self.outs.get_mut(ix)?.as_mut()?.slot_for(head.len)?;
        s.head(head);
        fill(s.payload(head.len));
        Some(s.publish())
    }

    fn post_stamped(
        &mut self,
        ix: PeerIx,
        len: usize,
        fill: impl FnOnce(&mut [u8]),
        stamp: impl FnOnce(u64) -> SlotHead,
    ) -> Option<bool> {
        let mut s = self.outs.get_mut(ix)?.as_mut()?.slot_for(len)?;
        // The header after the payload: nothing is seen before `publish`.
        let t0 = crate::progress::now_ns();
        fill(s.payload(len));
        let head = stamp(crate::progress::now_ns().saturating_sub(t0));
        debug_assert_eq!(head.len, len);
        s.head(&head);
        Some(s.publish())
    }

    fn consumed(&self, ix: PeerIx, pos: u64) -> bool {
        self.out(ix).is_some_and(|o| o.consumed(pos))
    }

    fn copy_max(&self, ix: PeerIx) -> usize {
        self.out(ix).map_or(0, Outbox::copy_max)
    }

    fn write_granted(&mut self, ix: PeerIx, grant: usize, rid: u64, local: &[Range], remote: &[Range]) -> Copied {
        let Some(o) = self.out(ix) else {
            return Err(CmaErr::Gone);
        };
        if !o.begin_write(grant, rid) {
            return Err(CmaErr::Revoked);
        }
        let r = cma::cma_write(o.owner_pid(), local, remote);
        o.end_write(grant, rid);
        r.map_err(cma_err)
    }

    #[inline]
    fn claims(&mut self, out: &mut Vec<Claim>) {
        // Every progress pass asks; rings are claimed rarely.
        if self.mb.claims_changed() {
            self.scan_claims(out);
        }
    }

    #[inline]
    fn claims_waiting(&self) -> bool {
        self.mb.claims_changed()
    }

    fn warm(&mut self) {
        self.mb.warm();
    }

    fn warm_spares(&mut self, n: usize) {
        self.mb.warm_spares(n);
    }

    #[inline]
    fn peek(&mut self, ring: RingIx) -> Option<(InSlot, SlotHead)> {
        self.mb.peek(ring)
    }

    fn ready(&self, ring: RingIx) -> bool {
        self.mb.ready(ring)
    }

    fn payload(&self, slot: &InSlot) -> Option<SharedBytes<'_>> {
        self.mb.payload(slot)
    }

    #[inline]
    fn fits(&self, slot: &InSlot) -> bool {
        slot.fits()
    }

    fn release(&mut self, slot: InSlot) {
        self.mb.release(slot);
    }

    fn set_copy_max(&mut self, bytes: usize) {
        self.mb.set_copy_max(bytes);
    }

    fn give_credit(&mut self, ring: RingIx, freed: u64) {
        self.mb.give_credit(ring, freed);
    }

    fn arm_grant(&mut self, ring: RingIx, rid: u64) -> Option<usize> {
        self.mb.grant(ring, rid)
    }

    fn revoke_grant(&mut self, ring: RingIx, grant: usize, rid: u64) {
        // A write runs: it is one process_vm_writev; wait it out (or the
        // writer's death).
        while !self.mb.revoke(ring, grant, rid) {
            if !self.sender_alive(ring) {
                break;
            }
            std::thread::yield_now();
        }
    }

    fn ring_closed(&self, ring: RingIx) -> bool {
        self.mb.ring_closed(ring)
    }

    fn sender_alive(&self, ring: RingIx) -> bool {
        self.senders[ring].as_ref().is_some_and(Liveness::alive)
    }

    fn free_ring(&mut self, ring: RingIx) {
        self.senders[ring] = None;
        self.mb.free_ring(ring);
    }

    fn arm(&mut self, active: &[RingIx]) -> bool {
        self.mb.arm(active)
    }

    fn disarm(&mut self) {
        self.mb.disarm();
    }

    #[allow(unsafe_code)]
    fn cma_read(&mut self, pid: u32, local: &[Range], remote: &[Range]) -> Copied {
        // SAFETY: the machine reads only into a receive it holds: `local`
        // is (part of) the ranges the endpoint handed over with the
        // receive's sink (`Take::Accept`, `Wire::accept`: the receive's
        // `Iov`, whose buffers the application lent until completion or
        // cancel), and the machine drops a receive (cancel, close, failure)
        // before its buffers are the application's again.
        unsafe { cma::cma_read(pid, local, remote) }.map_err(cma_err)
    }

    fn ring_bell(&mut self, to: SocketAddr) -> io::Result<()> {
        self.bell_socket(to.is_ipv6())?.send_to(DOORBELL, to).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nic::shm::cache::FAR_SPAN;
    use crate::nic::shm::test_addr;

    /// A sender spans the owner's whole span only when the owner names
    /// the sender's own last-level cache; to any other, at most FAR_SPAN.
    #[test]
    fn a_sender_spans_more_slots_only_to_an_owner_under_its_cache() {
        let geo = Geometry::new(2, 16, 512).with_span(8);
        let mut a = MailboxPort::new(test_addr(41900), geo, 0).unwrap();
        let b = MailboxPort::new(test_addr(41901), geo, 0).unwrap();
        let c = MailboxPort::new(test_addr(41902), geo, 0).unwrap();
        // B names this process's cache, as every mailbox here does; C
        // names another one.
        c.mb.set_cache(cache::this_process() + 1);
        let to_b = a.connect(test_addr(41901)).expect("B's mailbox");
        let to_c = a.connect(test_addr(41902)).expect("C's mailbox");
        let near = if cache::this_process() != 0 { 8 } else { FAR_SPAN };
        assert_eq!((to_b.span, to_c.span), (near, FAR_SPAN));
        drop((b, c));
    }
}
