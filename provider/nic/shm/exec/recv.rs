//! The executor's receive side: the rings of our mailbox polled, their
//! messages handed to the endpoint (eager ones straight from the slot,
//! rendezvous ones through the machine), rings claimed since the last
//! pass taken, and what a poll that finds nothing reads (`arrived`,
//! `quiet_until`). The send side, the machine's actions and the pass
//! itself are `mod.rs`'s.

#![forbid(unsafe_code)]

use super::Exec;
use super::BATCH;
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
            // `Done` is for eager messages; a rendezvous nobody takes is
            // let go rather than kept forever.
            Take::Discard | Take::Done => {
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
    pub(super) fn any_ready(&self) -> bool {
        self.m.active().iter().any(|&r| self.port.ready(r))
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
    /// check).
    pub fn quiet_until(&self, now: u64) -> u64 {
        if self.bells.is_empty() {
            self.m.idle_until(now)
        } else {
            0
        }
    }

    /// Takes up to `BATCH` messages from the rings to the endpoint.
    /// Whether there were any. (One caller, the pass's loop.)
    #[inline(always)]
    pub(super) fn receive(&mut self, up: &mut dyn Upcall) -> bool {
        let mut any = false;
        for _ in 0..BATCH {
            let Some(msg) = self.poll_one() else { break };
            any = true;
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
                    let payload = self.port.payload(&slot).expect("checked by Frame::parse");
                    let peer = self.m.ring_peer(ring).expect("checked by on_eager");
                    let take = up.arrived(Arrival {
                        peer,
                        hdr,
                        body: Body::Shared(payload),
                        credit: Credit::Shm(credit),
                    });
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
                    let take = up.arrived(Arrival {
                        peer: &peer,
                        hdr,
                        body: Body::Rndv(Held {
                            wire: WireKind::Shm,
                            id: held,
                        }),
                        credit: Credit::Shm(credit),
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
