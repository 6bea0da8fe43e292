//! An endpoint's port on the software NIC: its two wires, which peer goes
//! over which, the pool of transaction descriptors its sends take (the
//! wires know a send only by its `TxDesc`), and how one progress pass
//! shares its time between the wires.
#![forbid(unsafe_code)]

use crate::ffi::FI_EAGAIN;
use crate::nic::iov::{IovSource, IovView};
use crate::nic::shm::ShmWire;
use crate::nic::txdesc::{TxDesc, TxPool};
use crate::nic::udp_wire::UdpWire;
use crate::nic::wire::{
    Arrival, Credit, Held, OpId, Range, SendFlags, SendOp, Sent, Take, Upcall, Wire, WireEvent, WireKind, Wires,
};
use crate::proto::{MsgHdr, RecvSink};
use std::net::SocketAddr;
use std::os::fd::RawFd;

/// The UDP side counts as active this long after its last datagram.
const UDP_HOT_NS: u64 = 1_000_000;
/// While only local peers talk to us over shm, the UDP socket is read at
/// most this often (a recvfrom costs more than a whole shm message).
const UDP_IDLE_POLL_NS: u64 = 50_000;

pub(crate) struct Port {
    pub(crate) udp: UdpWire,
    /// `None` with FI_GNIX_SHM=0 or when no mailbox could be made.
    pub(crate) shm: Option<ShmWire>,
    /// Descriptors of the sends the wires have in flight.
    txds: TxPool,
    /// Next time the UDP socket is due while only shm peers are active.
    udp_next: u64,
}

/// A wire's upcall seen through the port: the wire names its sends by
/// descriptor, the endpoint by operation. Of the endpoint's own upcall
/// type in a progress pass, so that an arrival is one call into it.
struct TxMap<'a, U: Upcall + ?Sized> {
    up: &'a mut U,
    txds: &'a mut TxPool,
}

impl<U: Upcall + ?Sized> Upcall for TxMap<'_, U> {
    fn arrived(&mut self, a: Arrival<'_>) -> Take {
        self.up.arrived(a)
    }

    fn event(&mut self, e: WireEvent) {
        let e = match e {
            WireEvent::SendDone { op: tx } => match self.txds.put(tx) {
                Some(d) => WireEvent::SendDone { op: d.op },
                None => return,
            },
            WireEvent::SendFailed { op: tx, err } => match self.txds.put(tx) {
                Some(d) => WireEvent::SendFailed { op: d.op, err },
                None => return,
            },
            e => e,
        };
        self.up.event(e);
    }
}

impl Port {
    /// `txds`: the most sends the wires may have in flight at once.
    pub(crate) fn new(udp: UdpWire, shm: Option<ShmWire>, txds: usize) -> Port {
        Port {
            udp,
            shm,
            txds: TxPool::new(txds),
            udp_next: 0,
        }
    }

    fn wire(&mut self, k: WireKind) -> &mut dyn Wire {
        self.parts(k).0
    }

    /// Wire `k` (udp when there is no shm wire) and the descriptor pool,
    /// borrowed apart.
    fn parts(&mut self, k: WireKind) -> (&mut dyn Wire, &mut TxPool) {
        let Port { udp, shm, txds, .. } = self;
        match (k, shm.as_mut()) {
            (WireKind::Shm, Some(s)) => (s, txds),
            _ => (udp, txds),
        }
    }

    /// The AV learned these addresses: local ones are connected now
    /// (`Exec::connect_ahead`).
    pub(crate) fn connect_ahead(&mut self, addrs: &[SocketAddr]) {
        if let Some(shm) = &mut self.shm {
            shm.connect_ahead(addrs);
        }
    }

    /// One pass over both wires. The udp wire's timers and queued
    /// datagrams first; then the shm wire; then the UDP sockets, unless
    /// the shm wire just produced something (hand that to the application
    /// first) or only local peers are active and the sockets are not due.
    pub(crate) fn progress<U: Upcall>(&mut self, now: u64, up: &mut U) {
        let Port {
            udp,
            shm,
            txds,
            udp_next,
        } = self;
        let up = &mut TxMap { up, txds };
        udp.progress_timers(now, up);
        let shm_active = shm.as_ref().is_some_and(|s| s.in_use());
        if shm.as_mut().is_some_and(|s| s.progress(now, up)) {
            return;
        }
        let shm_only = shm_active && now.saturating_sub(udp.last_active) > UDP_HOT_NS;
        if shm_only && now < *udp_next {
            return;
        }
        udp.progress_rx(now, up);
        *udp_next = now + UDP_IDLE_POLL_NS;
    }

    /// Closing: the ACKs still owed go out now.
    pub(crate) fn flush_acks(&mut self, now: u64) {
        self.udp.flush_acks(now);
    }

    /// Sends still owed to peers (closing waits, bounded, for them).
    pub(crate) fn busy(&self) -> bool {
        self.udp.busy() || self.shm.as_ref().is_some_and(|w| w.busy())
    }

    pub(crate) fn next_deadline(&self, now: u64) -> Option<u64> {
        let t = self.udp.next_deadline(now);
        match self.shm.as_ref().and_then(|w| w.next_deadline(now)) {
            Some(s) => Some(t.map_or(s, |t| t.min(s))),
            None => t,
        }
    }

    /// About to sleep on `wait_fd`: both wires arrange to wake it (false:
    /// something is waiting already, or the sockets cannot be watched).
    pub(crate) fn arm(&mut self) -> bool {
        if !self.udp.arm() {
            return false;
        }
        // Whatever wakes us may be a doorbell: read the socket next pass.
        self.udp_next = 0;
        self.shm.as_mut().is_none_or(|s| s.arm())
    }

    /// Readable when something arrives on either wire (shm: by doorbell).
    pub(crate) fn wait_fd(&self) -> RawFd {
        self.udp.wait_fd()
    }

    /// The sockets join the wait fd's epoll set (closing polls it).
    pub(crate) fn watch(&self) -> std::io::Result<()> {
        self.udp.watch()
    }

    /// The endpoint's address (its UDP socket's).
    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.udp.local_addr()
    }

    pub(crate) fn stats_line(&self) -> String {
        format!(
            "{} {:?}",
            self.udp.stats_line(),
            self.shm.as_ref().map(|w| w.stats_line())
        )
    }
}

impl Wires for Port {
    /// Over shm when the peer is on this host and has a mailbox (decided
    /// once per peer, so messages to one peer stay on one wire, hence in
    /// order), udp otherwise.
    fn tx_free(&self) -> usize {
        self.txds.free()
    }

    /// The shm wire acknowledges nothing (a message in the peer's ring is
    /// delivered).
    fn flush_acks(&mut self, now: u64) {
        self.udp.flush_acks(now);
    }

    fn eager_max(&mut self, peer: SocketAddr) -> usize {
        let local = self.shm.as_mut().is_some_and(|w| w.reaches(peer));
        match (local, self.shm.as_ref()) {
            (true, Some(w)) => w.eager_max(),
            _ => self.udp.eager_max(),
        }
    }

    fn send_now(&mut self, peer: SocketAddr, hdr: &MsgHdr, flags: SendFlags, src: &IovView<'_>) -> bool {
        self.shm.as_mut().is_some_and(|w| w.send_now(peer, hdr, flags, src))
    }

    fn send(&mut self, s: SendOp, src: IovSource, up: &mut dyn Upcall, now: u64) -> Result<Sent, i32> {
        let local = self.shm.as_mut().is_some_and(|w| w.reaches(s.peer));
        let (wire, txds) = self.parts(if local { WireKind::Shm } else { WireKind::Udp });
        // Most small sends are done when `send` returns: the descriptor is
        // only filled in for one that goes on (a wire reports nothing
        // about a send during `send` itself).
        let Some(tx) = txds.reserve() else {
            return Err(-FI_EAGAIN);
        };
        let r = wire.send(SendOp { op: tx, ..s }, src, &mut TxMap { up, txds }, now);
        if matches!(r, Ok(Sent::Pending)) {
            let wire = wire.kind();
            txds.fill(tx, TxDesc { op: s.op, wire });
        } else {
            txds.unreserve(tx);
        }
        r
    }

    fn accept(
        &mut self,
        held: Held,
        op: OpId,
        sink: Box<dyn RecvSink>,
        ranges: Vec<Range>,
        up: &mut dyn Upcall,
        now: u64,
    ) {
        let (wire, txds) = self.parts(held.wire);
        wire.accept(held, op, sink, ranges, &mut TxMap { up, txds }, now);
    }

    fn discard(&mut self, held: Held, now: u64) {
        self.wire(held.wire).discard(held, now);
    }

    fn refuses(&mut self, peer: SocketAddr) -> bool {
        let local = self.shm.as_mut().is_some_and(|w| w.reaches(peer));
        match (local, self.shm.as_ref()) {
            (true, Some(w)) => w.refuses(),
            _ => self.udp.refuses(),
        }
    }

    fn refuse(&mut self, held: Held, err: i32, now: u64) {
        self.wire(held.wire).refuse(held, err, now);
    }

    fn cancel_recv(&mut self, wire: WireKind, op: OpId) -> bool {
        self.wire(wire).cancel_recv(op)
    }

    fn give_back(&mut self, credit: Credit) {
        match credit {
            Credit::Shm(_) => {
                if let Some(s) = self.shm.as_mut() {
                    s.give_back(credit);
                }
            }
            Credit::Udp { .. } => self.udp.give_back(credit),
        }
    }

    fn backlog(&self) -> usize {
        self.udp.backlog() + self.shm.as_ref().map_or(0, |s| s.backlog())
    }
}
