//! The shm wire as the endpoint drives it (`nic::wire::Wire`), over
//! `nic::shm::ShmWire`: maps the wire's send and receive ids to the
//! endpoint's operations, keeps the rendezvous requests the endpoint holds,
//! and rings the doorbells of sleeping peers from a socket of its own.

use crate::ffi::*;
use crate::nic::iov::IovSource;
use crate::nic::shm::{self, Eager, Incoming, Pull, ShmConfig, ShmEvent, ShmRts, ShmWire};
use crate::nic::wire::{
    Arrival, Body, Credit, Held, OpId, Range, SendOp, Sent, Take, Upcall, Wire, WireEvent, WireKind,
};
use crate::proto::{RecvSink, SendSource};
use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};

/// Mailbox slots handled per progress pass.
const SHM_BATCH: usize = 32;

type IdMap<V> = HashMap<u64, V, crate::hash::KeyedState>;

pub(crate) struct ShmPort {
    pub(crate) wire: ShmWire,
    /// The wire's send and receive ids, by operation.
    sends: IdMap<OpId>,
    recvs: IdMap<OpId>,
    /// Rendezvous requests the endpoint keeps (`Take::Kept`).
    held: IdMap<Box<ShmRts>>,
    next_held: u64,
    /// Doorbells leave from here (a datagram to the sleeping peer's socket).
    bell: UdpSocket,
    /// Messages longer than this go by rendezvous (FI_GNIX_RNDV_THRESHOLD
    /// applies here too, below the slot size).
    pub(crate) threshold: usize,
    /// The peer `reaches` just routed, for the `send` that follows it
    /// under the same lock (one route lookup per send, not two).
    routed: Option<(SocketAddr, usize)>,
}

impl ShmPort {
    /// The mailbox of the endpoint at `me`; `Err` if it cannot be made.
    pub(crate) fn new(me: SocketAddr, cfg: ShmConfig, seed: u64) -> std::io::Result<ShmPort> {
        let wire = ShmWire::new(me, cfg, seed)?;
        let bell = UdpSocket::bind(SocketAddr::new(me.ip(), 0))?;
        bell.set_nonblocking(true)?;
        Ok(ShmPort {
            wire,
            sends: IdMap::with_hasher(crate::hash::KeyedState(seed)),
            recvs: IdMap::with_hasher(crate::hash::KeyedState(seed ^ 1)),
            held: IdMap::with_hasher(crate::hash::KeyedState(seed ^ 2)),
            next_held: 1,
            bell,
            threshold: usize::MAX,
            routed: None,
        })
    }

    /// Whether `peer` is reached over this wire (decided on first use).
    pub(crate) fn reaches(&mut self, peer: SocketAddr) -> bool {
        let r = self.wire.route(peer);
        self.routed = r.map(|ix| (peer, ix));
        r.is_some()
    }

    /// Whether any local peer talks to us (the endpoint then polls its
    /// UDP socket less eagerly).
    pub(crate) fn in_use(&self) -> bool {
        self.wire.in_use()
    }

    /// Doorbells for sleeping local peers. One that the socket cannot take
    /// now stays queued (a sleeper must not miss it); `next_deadline`
    /// brings us back soon.
    fn ring_bells(&mut self) {
        if self.wire.bells.is_empty() {
            return;
        }
        let ShmPort { wire, bell, .. } = self;
        let stats = &mut wire.stats;
        wire.bells.retain(|&a| match bell.send_to(shm::DOORBELL, a) {
            Ok(_) => {
                stats.doorbells += 1;
                false
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => true,
            Err(e) => {
                crate::debug!(FI_LOG_EP_DATA, "doorbell to {}: {}", a, e);
                false
            }
        });
    }

    /// Pulls a matched RTS into a receive; the end goes to `up`.
    fn pull(&mut self, rts: &ShmRts, op: OpId, sink: Box<dyn RecvSink>, ranges: &[Range], up: &mut dyn Upcall) {
        let local: Vec<(usize, usize)> = ranges.iter().map(|&(a, l)| (a as usize, l as usize)).collect();
        match self.wire.pull(rts, &local, sink) {
            Pull::Done(written) => up.event(WireEvent::RecvDone { op, written }),
            Pull::Pending(rid) => {
                self.recvs.insert(rid, op);
            }
            Pull::Failed(err) => {
                crate::warn!(FI_LOG_EP_DATA, "receive from {}: sender is gone", rts.peer);
                up.event(WireEvent::RecvFailed { op, err });
            }
        }
    }

    fn events(&mut self, up: &mut dyn Upcall) -> bool {
        let mut any = false;
        while let Some(ev) = self.wire.poll_event() {
            any = true;
            match ev {
                ShmEvent::SendDone { id } => {
                    if let Some(op) = self.sends.remove(&id) {
                        up.event(WireEvent::SendDone { op });
                    }
                }
                ShmEvent::SendFailed { id, err } => {
                    crate::warn!(FI_LOG_EP_DATA, "shm send failed: {}", err);
                    if let Some(op) = self.sends.remove(&id) {
                        up.event(WireEvent::SendFailed { op, err });
                    }
                }
                ShmEvent::RecvDone { rid, written } => {
                    if let Some(op) = self.recvs.remove(&rid) {
                        up.event(WireEvent::RecvDone { op, written });
                    }
                }
                ShmEvent::RecvFailed { rid, err } => {
                    crate::warn!(FI_LOG_EP_DATA, "shm receive failed: {}", err);
                    if let Some(op) = self.recvs.remove(&rid) {
                        up.event(WireEvent::RecvFailed { op, err });
                    }
                }
            }
        }
        any
    }
}

impl Wire for ShmPort {
    fn kind(&self) -> WireKind {
        WireKind::Shm
    }

    fn send(&mut self, s: SendOp, src: IovSource, _up: &mut dyn Upcall, _now: u64) -> Result<Sent, i32> {
        let SendOp { peer, op, hdr, flags } = s;
        let ix = match self.routed.take() {
            Some((p, ix)) if p == peer => Some(ix),
            _ => self.wire.route(peer),
        };
        let Some(ix) = ix else {
            return Err(-FI_EHOSTUNREACH);
        };
        let len = src.len();
        // An inject always fits a slot (inject_size <= the slot payload),
        // so its copy never has to stay with us.
        let max = self.wire.eager_max();
        let eager = len <= max.min(self.threshold) || flags.inject && len <= max;
        if eager {
            match self.wire.send_eager(ix, &hdr, &src, flags.inject, flags.delivery) {
                Eager::Done => {
                    self.ring_bells();
                    return Ok(Sent::Done);
                }
                Eager::Pending(id) => {
                    self.sends.insert(id, op);
                    self.ring_bells();
                    return Ok(Sent::Pending);
                }
                // The peer holds its share of unexpected messages: this one
                // waits in our memory until a receive takes it.
                Eager::NoCredit => {}
            }
        }
        // The receiver reads the payload where it is: in the application's
        // buffers, or in a copy when the buffers are the application's
        // again at once (inject) or have no stable address.
        let (src, remote): (Box<dyn SendSource>, Vec<Range>) = match src.ranges() {
            Some(r) if !flags.inject => (Box::new(src), r),
            _ => {
                let mut v = vec![0u8; len];
                src.read_at(0, &mut v);
                let r = vec![(v.as_ptr() as u64, len as u64)];
                (Box::new(v), r)
            }
        };
        let id = self.wire.send_rts(ix, &hdr, src, &remote).map_err(|e| -e)?;
        self.sends.insert(id, op);
        self.ring_bells();
        Ok(Sent::Pending)
    }

    fn accept(
        &mut self,
        held: Held,
        op: OpId,
        sink: Box<dyn RecvSink>,
        ranges: Vec<Range>,
        up: &mut dyn Upcall,
        _now: u64,
    ) {
        let Some(rts) = self.held.remove(&held.id) else {
            up.event(WireEvent::RecvFailed { op, err: FI_EIO });
            return;
        };
        self.pull(&rts, op, sink, &ranges, up);
        self.ring_bells();
    }

    fn discard(&mut self, held: Held, _now: u64) {
        if let Some(rts) = self.held.remove(&held.id) {
            self.wire.discard(&rts);
            self.ring_bells();
        }
    }

    fn give_back(&mut self, credit: Credit) {
        if let Credit::Shm(c) = credit {
            self.wire.free_credit(c);
        }
    }

    fn cancel_recv(&mut self, op: OpId) -> bool {
        let Some(rid) = self.recvs.iter().find(|(_, &o)| o == op).map(|(&r, _)| r) else {
            return false;
        };
        if !self.wire.cancel_rx(rid) {
            return false;
        }
        self.recvs.remove(&rid);
        self.ring_bells();
        true
    }

    fn progress(&mut self, now: u64, up: &mut dyn Upcall) -> bool {
        self.wire.disarm();
        let mut any = false;
        for _ in 0..SHM_BATCH {
            let Some(m) = self.wire.poll_msg() else { break };
            any = true;
            let credit = Credit::Shm(m.credit());
            match m {
                Incoming::Eager { slot, peer, hdr, .. } => {
                    let data = self.wire.payload(&slot);
                    let take = up.arrived(Arrival {
                        peer,
                        hdr,
                        body: Body::Shared(data),
                        credit,
                    });
                    self.wire.release(slot);
                    if !matches!(take, Take::Kept) {
                        self.give_back(credit);
                    }
                }
                Incoming::Rts(rts) => {
                    let id = self.next_held;
                    self.next_held += 1;
                    let held = Held {
                        wire: WireKind::Shm,
                        id,
                    };
                    let take = up.arrived(Arrival {
                        peer: rts.peer,
                        hdr: rts.hdr,
                        body: Body::Rndv(held),
                        credit,
                    });
                    match take {
                        Take::Kept => {
                            self.held.insert(id, rts);
                        }
                        Take::Done | Take::Discard => {
                            self.give_back(credit);
                            self.wire.discard(&rts);
                        }
                        Take::Accept { op, sink, ranges } => {
                            self.give_back(credit);
                            self.pull(&rts, op, sink, &ranges, up);
                        }
                    }
                }
            }
        }
        self.wire.pump(now);
        any |= self.events(up);
        self.ring_bells();
        any
    }

    fn next_deadline(&self, now: u64) -> Option<u64> {
        self.wire.next_deadline(now)
    }

    fn busy(&self) -> bool {
        self.wire.backlogged() > 0
    }

    fn backlog(&self) -> usize {
        self.wire.backlogged_untracked()
    }

    fn arm(&mut self) -> bool {
        self.wire.arm()
    }

    fn stats_line(&self) -> String {
        format!("{:?}", self.wire.stats)
    }
}
