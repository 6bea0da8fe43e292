//! The executor's receive side: the rings of our mailbox polled, their
//! messages handed to the endpoint (eager ones straight from the slot,
//! rendezvous ones through the machine), rings claimed since the last
//! pass taken, and what a poll that finds nothing reads (`arrived`,
//! `quiet_until`). The send side, the machine's actions and the pass
//! itself are `mod.rs`'s.
//!
//! A message nobody waits for may stay in its slot. Kept, it is copied
//! out, filed in the tag-matching engine, found by the receive posted
//! later, taken out and completed outside a pass (some 1 000 instructions
//! more than an expected message, `bench/pollbench-callgrind` UNEXP=1);
//! and in an exchange (IMB-MPI1's PingPing, Exchange) most messages come
//! just before their receive, taken in by the pass of the read that
//! found the last one. So an endpoint with no receive posted answers
//! `Take::Later` (the arrival `may_leave`), and the message stays the
//! head of its ring, its credit its sender's, until the pass after the
//! receive is posted takes it as any expected one. Bounds: one message
//! is left at a time, by at most `LEAVE_PASSES` passes in a row (then it
//! is kept, and so are the ones behind it while each pass keeps one);
//! a peek takes it in first (`take_left`); a sleeper does not sleep
//! while it waits (`arm` reads the rings as they are); a pass's last
//! look (`any_ready`) passes over it, and while it waits there is no
//! quiet time (what its sender wrote behind it waits too: each poll
//! makes a pass, `quiet_until`).

#![forbid(unsafe_code)]

use super::{Exec, Left, BATCH, LEAVE_PASSES};
use crate::ffi::FI_LOG_EP_DATA;
use crate::nic::shm::choice::Way;
use crate::nic::shm::frame::{self, Frame};
use crate::nic::shm::machine::OnFrame;
use crate::nic::shm::port::Port;
use crate::nic::shm::ShmCredit;
use crate::nic::wire::{Arrival, Body, Credit, Held, Take, Upcall, WireKind};
use crate::proto::MsgHdr;
use std::net::SocketAddr;

/// A message `poll_one` found.
pub(crate) enum Msg<S> {
    /// In `slot`, which the caller releases once it copied it out.
    Eager {
        slot: S,
        /// The ring it came in (`Machine::ring_peer` names its producer).
        ring: usize,
        hdr: MsgHdr,
        credit: ShmCredit,
        /// What its sender says writing it took (`Frame::copy_ns`).
        copy_ns: u32,
    },
    /// A rendezvous message the machine holds as `held`.
    Rndv {
        peer: SocketAddr,
        hdr: MsgHdr,
        held: u64,
        credit: ShmCredit,
    },
}

impl<P: Port> Exec<P> {
    /// Rings local peers claimed in our mailbox since we last looked
    /// (every receive pass asks: inlined).
    #[inline(always)]
    pub(super) fn take_claims(&mut self) {
        self.port.claims(&mut self.claims);
        if !self.claims.is_empty() {
            for c in self.claims.drain(..) {
                self.m.ring_claimed(c.ring, c.peer, c.pid);
            }
        }
    }

    /// The next message from a local peer, if any. Control frames met on
    /// the way are handled (their ends come as events). (Rings claimed
    /// since the last pass are `take_claims`'s, once a pass.) Inlined into
    /// both passes that call `receive` (the whole one and the one for the
    /// rings): with two callers the compiler put it out of line, some 60
    /// instructions more a message (bench/pollbench-callgrind).
    #[inline(always)]
    pub(crate) fn poll_one(&mut self) -> Option<Msg<P::Slot>> {
        // The polling loop of every receiver: no division, no allocation.
        let len = self.m.active().len();
        let mut k = self.next_ring;
        for _ in 0..len {
            if k >= len {
                k = 0;
            }
            let r = self.m.active()[k];
            k += 1;
            let Some((slot, head)) = self.port.peek(r) else {
                continue;
            };
            // Fair among peers: the next call starts with the next ring.
            self.next_ring = k;
            // The slot of every small message skips the generic frame, and
            // leaves here with its parts (`eager_credit`): built into an
            // `OnFrame` and matched out of it, its header was stored in
            // pieces and read back whole, a store-forwarding miss a
            // message. Its payload is made once, by `receive`.
            let step = if head.kind == frame::kind::EAGER && self.port.fits(&slot) {
                match self.m.eager_credit(r, head.len) {
                    Ok(credit) => {
                        return Some(Msg::Eager {
                            slot,
                            ring: r,
                            hdr: Frame::eager_hdr(&head, head.len),
                            credit,
                            copy_ns: Frame::copy_ns(&head),
                        })
                    }
                    Err(why) => self.m.reject(r, why),
                }
            } else {
                let p = self.port.payload(&slot);
                self.m.on_frame(r, Frame::parse(&head, p.as_ref()), p.as_ref())
            };
            match step {
                OnFrame::Eager { hdr, credit } => {
                    return Some(Msg::Eager {
                        slot,
                        ring: r,
                        hdr,
                        credit,
                        copy_ns: 0,
                    })
                }
                OnFrame::Rndv {
                    peer,
                    hdr,
                    held,
                    credit,
                } => {
                    self.port.release(slot);
                    return Some(Msg::Rndv {
                        peer,
                        hdr,
                        held,
                        credit,
                    });
                }
                OnFrame::Handled => {
                    self.port.release(slot);
                    self.run();
                }
                OnFrame::Rejected(why) => {
                    self.port.release(slot);
                    crate::warn!(FI_LOG_EP_DATA, "shm: {} in ring {}; dropping its ring", why, r);
                    self.run();
                    // The active rings changed under our index: start over
                    // next call.
                    self.next_ring = 0;
                    return None;
                }
            }
        }
        None
    }

    /// What the endpoint made of an arrived rendezvous message. Its
    /// credit goes back unless the endpoint keeps the message (then the
    /// endpoint gives it back once the application takes it).
    fn take(&mut self, held: u64, credit: ShmCredit, take: Take) {
        match take {
            Take::Accept { op, sink, ranges } => {
                self.free_credit(credit);
                self.m.accept(held, op, sink, ranges)
            }
            Take::Kept => {}
            // `Done` is for eager messages, and `Later` for those in a
            // slot; a rendezvous nobody takes is let go rather than kept
            // forever.
            Take::Discard | Take::Done | Take::Later => {
                self.free_credit(credit);
                self.m.discard(held)
            }
            Take::Refuse { err } => {
                self.free_credit(credit);
                self.m.refuse(held, err)
            }
        }
    }

    /// Whether one of our active rings has a published slot.
    #[inline(always)]
    pub(super) fn rings_ready(&self) -> bool {
        self.m.active().iter().any(|&r| self.port.ready(r))
    }

    /// `rings_ready`, but for a message this pass left.
    #[inline(always)]
    pub(super) fn any_ready(&self) -> bool {
        self.rings_ready() && (self.left.is_none() || self.ready_past_left())
    }

    /// `any_ready` while a message may be left: a ring whose published
    /// slot is not the one this pass left. (Out of line: the empty poll's
    /// loop above stays as short as it was.)
    #[inline(never)]
    fn ready_past_left(&self) -> bool {
        let now = self.live_left(None).filter(|l| !l.keeping && l.pass == self.pass);
        self.m
            .active()
            .iter()
            .any(|&r| self.port.ready(r) && now.is_none_or(|l| l.ring != r))
    }

    /// The record of `left`, if it still says something: a message left
    /// by this pass or the last one that is still the head of its ring
    /// (nothing was taken from the ring since: `Machine::taken_mark`,
    /// less the credit of the message being looked at, `looking`, if it
    /// is that ring's), or a ring in keeping that kept one then. (Kept up
    /// to date here, off the path of the messages taken at once; a record
    /// older than the last pass is gone already, `Exec::next_pass`.)
    pub(super) fn live_left(&self, looking: Option<&ShmCredit>) -> Option<Left> {
        self.left.filter(|l| {
            debug_assert!(l.pass + 1 >= self.pass, "next_pass drops older records");
            let (gen, mut taken) = self.m.taken_mark(l.ring);
            if let Some(c) = looking.filter(|c| c.ring == l.ring) {
                taken = taken.wrapping_sub(c.cost);
            }
            l.keeping || (gen, taken) == l.mark
        })
    }

    /// Whether this pass may leave the message at the head of ring `r`
    /// in its slot: none is left, or this one was, fewer than
    /// `LEAVE_PASSES` times in a row, and its ring is not keeping.
    #[cold]
    fn may_leave(&self, credit: &ShmCredit) -> bool {
        let r = credit.ring;
        match self.live_left(Some(credit)) {
            None => true,
            Some(l) => l.ring == r && !l.keeping && l.times < LEAVE_PASSES,
        }
    }

    /// The head message of ring `credit.ring` is left in its slot by
    /// this pass.
    #[cold]
    fn leave(&mut self, credit: ShmCredit) {
        let r = credit.ring;
        // Where it is, as if not yet looked at: its slot stays the
        // ring's head, its credit the sender's.
        self.m.unhold(credit);
        let before = self.live_left(None).filter(|l| l.ring == r && !l.keeping);
        // (A pass's last look may offer it again: one pass, one time.)
        let again = before.is_some_and(|l| l.pass == self.pass);
        let times = before.map_or(0, |l| l.times) + u32::from(!again);
        if !again {
            self.left_count += 1;
        }
        self.left = Some(Left {
            ring: r,
            pass: self.pass,
            times,
            keeping: false,
            mark: self.m.taken_mark(r),
        });
    }

    /// The eager message in `slot` of ring `r`, lent to the endpoint.
    #[inline(always)]
    fn slot_arrival(&self, slot: &P::Slot, r: usize, hdr: MsgHdr, credit: ShmCredit, may_leave: bool) -> Arrival<'_> {
        Arrival {
            peer: self.m.ring_peer(r).expect("checked by on_eager"),
            hdr,
            body: Body::Shared(self.port.payload(slot).expect("checked by Frame::parse")),
            credit: Credit::Shm(credit),
            may_leave,
        }
    }

    /// The endpoint would leave the message in `slot`, the head of ring
    /// `r`: left (`None`), or, if `may_leave` says no, offered once more
    /// and taken (what the endpoint made of it).
    #[cold]
    #[inline(never)]
    fn later(&mut self, up: &mut dyn Upcall, slot: &P::Slot, r: usize, hdr: MsgHdr, credit: ShmCredit) -> Option<Take> {
        if self.may_leave(&credit) {
            self.leave(credit);
            return None;
        }
        let take = up.arrived(self.slot_arrival(slot, r, hdr, credit, false));
        self.offered_again(&credit, &take);
        Some(take)
    }

    /// The endpoint would have left the head message of ring
    /// `credit.ring`, `may_leave` said no, and offered once more it was
    /// taken as `take`. Kept, its ring's messages are coming faster than
    /// their receives, and the ones behind it are kept without waiting
    /// while each pass keeps one (`Left::keeping`).
    #[cold]
    fn offered_again(&mut self, credit: &ShmCredit, take: &Take) {
        if let (Take::Kept, Some(l)) = (take, self.live_left(Some(credit))) {
            if l.ring == credit.ring {
                if !l.keeping {
                    self.left_kept += 1;
                }
                self.left = Some(Left {
                    keeping: true,
                    pass: self.pass,
                    ..l
                });
            }
        }
    }

    /// Something for a pass in our rings: a published slot, or a ring
    /// claimed since the last pass. Reads one word a ring.
    #[inline]
    pub fn arrived(&self) -> bool {
        self.any_ready() || self.port.claims_waiting()
    }

    /// Until when a pass at `now` that finds nothing `arrived` would do
    /// nothing here: the early return of `progress`, for polls to come
    /// (0: the next pass must run; no later than the next liveness
    /// check). None while a message is left in its slot: it holds back
    /// what comes behind it in its ring (an answer, a FIN), so the polls
    /// make passes until one takes it.
    pub fn quiet_until(&self, now: u64) -> u64 {
        if self.bells.is_empty() && !self.holds_left() {
            self.m.idle_until(now)
        } else {
            0
        }
    }

    /// Whether a message is left in its slot.
    #[inline(always)]
    fn holds_left(&self) -> bool {
        self.left.is_some() && self.left_held()
    }

    #[cold]
    #[inline(never)]
    fn left_held(&self) -> bool {
        self.live_left(None).is_some_and(|l| !l.keeping)
    }

    /// Takes up to `BATCH` messages from the rings to the endpoint.
    /// Whether there were any. (One caller, the pass's loop.)
    #[inline(always)]
    pub(super) fn receive(&mut self, up: &mut dyn Upcall) -> bool {
        let mut any = false;
        for _ in 0..BATCH {
            let Some(msg) = self.poll_one() else { break };
            match msg {
                Msg::Eager {
                    slot,
                    ring,
                    hdr,
                    credit,
                    copy_ns,
                } => {
                    let len = hdr.len as usize;
                    let t0 = if self.choice.chosen(len) { self.port.now() } else { 0 };
                    let mut take = up.arrived(self.slot_arrival(&slot, ring, hdr, credit, true));
                    if let Take::Later = take {
                        // (The others' messages wait for the pass's last
                        // look, `any_ready`, which skips a message left.)
                        let Some(t) = self.later(up, &slot, ring, hdr, credit) else {
                            break;
                        };
                        take = t;
                    }
                    any = true;
                    if t0 != 0 {
                        self.learn(Way::CopyOut, len, t0);
                        if copy_ns != 0 {
                            self.record(Way::CopyIn, len, u64::from(copy_ns));
                        }
                    }
                    // Taken in (matched, or copied for later): the slot goes
                    // back, which completes a delivery-complete send. A
                    // copy kept for later holds its credit until the
                    // application takes it.
                    self.port.release(slot);
                    if !matches!(take, Take::Kept) {
                        self.free_credit(credit);
                    }
                }
                Msg::Rndv {
                    peer,
                    hdr,
                    held,
                    credit,
                } => {
                    any = true;
                    let take = up.arrived(Arrival {
                        peer: &peer,
                        hdr,
                        body: Body::Rndv(Held {
                            wire: WireKind::Shm,
                            id: held,
                        }),
                        credit: Credit::Shm(credit),
                        // Its slot went back: the machine holds it.
                        may_leave: false,
                    });
                    // A receive that takes it at once is timed to its end
                    // (`deliver`): what a pull costs.
                    let len = hdr.len as usize;
                    if let Take::Accept { op, .. } = &take {
                        if self.choice.chosen(len) {
                            self.time_pull(*op, len);
                        }
                    }
                    self.take(held, credit, take);
                    self.run();
                }
            }
        }
        any
    }
}
