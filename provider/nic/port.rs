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
    Arrival, Credit, Held, OpId, SendFlags, SendOp, Sent, Take, Upcall, Wire, WireEvent, WireKind, Wires,
};
use crate::proto::MemRanges;
use crate::proto::{MsgHdr, RecvSink};
use std::net::SocketAddr;
use std::os::fd::RawFd;

/// The UDP side counts as active this long after its last datagram.
const UDP_HOT_NS: u64 = 1_000_000;
/// While only local peers talk to us over shm, the UDP socket is read at
/// most this often (a recvfrom costs more than a whole shm message).
const UDP_IDLE_POLL_NS: u64 = 50_000;
/// The same while no datagram ever came or went (doorbells aside): a job
/// on one host, or a rank whose remote peers have not spoken yet. An
/// empty recvfrom costs 0.3-0.6 us on the VMs this runs on, and at 50 us
/// it landed in one round trip of 40 of a pinned 8-byte ping-pong
/// (bench/README.md, "The read after a hand-over makes no pass"). A
/// remote peer's first datagram waits up to this long, once; its sender
/// retransmits only after `EngineConfig::rto_init_ns` (5 ms).
const UDP_UNUSED_POLL_NS: u64 = 1_000_000;
/// Passes in a row that found shm work after which the UDP socket is read
/// anyway: a local peer that keeps our rings full must not starve the
/// remote ones (their messages, and the ACKs and credit our own UDP sends
/// wait for). Counted in passes, so that a busy pass pays a counter, not
/// a clock read; the 50 µs rule above still holds while only local
/// peers are active, so a flood from them costs one recvfrom that finds
/// nothing per 50 µs.
const SHM_BUSY_RUN: u32 = 64;

pub(crate) struct Port {
    pub(crate) udp: UdpWire,
    /// `None` with FI_GNIX_SHM=0 or when no mailbox could be made.
    pub(crate) shm: Option<ShmWire>,
    /// Descriptors of the sends the wires have in flight.
    txds: TxPool,
    /// When the UDP socket is read.
    udp_turn: UdpTurn,
}

/// When a progress pass reads the UDP socket: after the shm wire unless
/// that produced something (hand it to the application first), but at
/// least once every `SHM_BUSY_RUN` busy passes; and while only shm peers
/// are active, at most once every `UDP_IDLE_POLL_NS`, or every
/// `UDP_UNUSED_POLL_NS` while the socket has not been used.
#[derive(Default)]
struct UdpTurn {
    /// Passes in a row whose shm wire found work.
    busy_run: u32,
    /// Next time the socket is due while only shm peers are active.
    next: u64,
}

impl UdpTurn {
    /// A pass whose shm wire found work: whether it leaves the socket to
    /// a later pass (`due` is not asked then).
    #[inline]
    fn busy(&mut self) -> bool {
        self.busy_run += 1;
        self.busy_run < SHM_BUSY_RUN
    }

    /// Whether this pass reads the socket, unless `busy` said it leaves
    /// it. `every`: how often at most (`socket_every`), or None: every
    /// pass.
    #[inline]
    fn due(&mut self, every: Option<u64>, now: u64) -> bool {
        if every.is_some() && now < self.next {
            return false;
        }
        self.busy_run = 0;
        self.next = now + every.unwrap_or(UDP_IDLE_POLL_NS);
        true
    }

    /// Read the socket on the next pass.
    fn now(&mut self) {
        self.next = 0;
        self.busy_run = SHM_BUSY_RUN;
    }
}

/// How often at most a pass reads the UDP socket (`UdpTurn`): while local
/// peers are active over shm and UDP has been quiet for a while, every
/// `UDP_IDLE_POLL_NS`, or `UDP_UNUSED_POLL_NS` if it never spoke; else
/// every pass (None).
#[inline]
fn socket_every(shm: Option<&ShmWire>, udp: &UdpWire, now: u64) -> Option<u64> {
    if !shm.is_some_and(|s| s.in_use()) {
        return None;
    }
    if !udp.talked() {
        return Some(UDP_UNUSED_POLL_NS);
    }
    (now.saturating_sub(udp.last_active) > UDP_HOT_NS).then_some(UDP_IDLE_POLL_NS)
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
            udp_turn: UdpTurn::default(),
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
    /// datagrams first; then the shm wire; then the UDP sockets when their
    /// turn says (`UdpTurn`). Inlined into the endpoint's pass (out of
    /// line it costs a message some 30 instructions more:
    /// bench/pollbench-callgrind). Whether either wire found something.
    #[inline]
    pub(crate) fn progress<U: Upcall>(&mut self, now: u64, up: &mut U) -> bool {
        let Port {
            udp,
            shm,
            txds,
            udp_turn,
        } = self;
        let up = &mut TxMap { up, txds };
        let mut any = udp.progress_timers(now, up);
        if shm.as_mut().is_some_and(|s| s.progress(now, up)) {
            if udp_turn.busy() {
                return true;
            }
            any = true;
        }
        if udp_turn.due(socket_every(shm.as_ref(), udp, now), now) {
            any |= udp.progress_rx(now, up);
        }
        any
    }

    /// The messages waiting in the shm rings, taken and handed up, and
    /// nothing else (`Ep::take_arrivals`).
    #[inline]
    pub(crate) fn take_arrivals<U: Upcall>(&mut self, up: &mut U) {
        let Port { shm, txds, .. } = self;
        if let Some(s) = shm {
            s.take_arrivals(&mut TxMap { up, txds });
        }
    }

    /// The message the shm wire left in its slot, if any, taken and handed
    /// up (`Ep::take_left`).
    pub(crate) fn take_left<U: Upcall>(&mut self, up: &mut U) {
        let Port { shm, txds, .. } = self;
        if let Some(s) = shm {
            s.take_left(&mut TxMap { up, txds });
        }
    }

    /// Until when a poll that finds nothing `arrived` has nothing to do:
    /// while only local peers talk to us (the UDP socket read on its own
    /// schedule, `UdpTurn::due`), up to the socket's next turn, the UDP
    /// engine's next timer and the shm wire's `quiet_until`; else 0 (every
    /// pass reads the socket). Asked at the end of a pass.
    pub(crate) fn quiet_until(&self, now: u64) -> u64 {
        let Some(shm) = &self.shm else { return 0 };
        if socket_every(Some(shm), &self.udp, now).is_none() {
            return 0;
        }
        self.udp_turn.next.min(self.udp.quiet_until()).min(shm.quiet_until(now))
    }

    /// Something waits in our shm rings for a pass.
    #[inline]
    pub(crate) fn arrived(&self) -> bool {
        self.shm.as_ref().is_some_and(|s| s.arrived())
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
        self.udp_turn.now();
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

    /// The sockets leave the wait fd's epoll set: nobody sleeps on it, and
    /// the application polls (`Ep::progress`).
    pub(crate) fn unwatch(&self) {
        self.udp.unwatch()
    }

    /// Whether the sockets are in the wait fd's epoll set.
    pub(crate) fn watched(&self) -> bool {
        self.udp.watched()
    }

    /// The endpoint's address (its UDP socket's).
    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.udp.local_addr()
    }

    /// Each wire's counters, one line each (one would outgrow the
    /// 1 KiB libfabric allows a log line).
    pub(crate) fn stats_lines(&self) -> impl Iterator<Item = String> + '_ {
        std::iter::once(self.udp.stats_line()).chain(self.shm.as_ref().map(|w| w.stats_line()))
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
        // A local peer's ring may hold less than ours (not under our cache).
        match self.shm.as_mut().and_then(|w| w.eager_max_to(peer)) {
            Some(n) => n,
            None => self.udp.eager_max(),
        }
    }

    fn send_now(&mut self, peer: &SocketAddr, hdr: &MsgHdr, flags: SendFlags, src: &IovView<'_>) -> bool {
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
        ranges: MemRanges,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The passes of `n` in which the socket is read, the clock
    /// advancing `step` ns a pass.
    fn reads(turn: &mut UdpTurn, n: u64, step: u64, shm_busy: bool, shm_only: bool) -> Vec<u64> {
        let every = shm_only.then_some(UDP_IDLE_POLL_NS);
        reads_every(turn, n, step, shm_busy, every)
    }

    fn reads_every(turn: &mut UdpTurn, n: u64, step: u64, shm_busy: bool, every: Option<u64>) -> Vec<u64> {
        (0..n)
            .filter(|&i| !(shm_busy && turn.busy()) && turn.due(every, 1_000_000 + i * step))
            .collect()
    }

    #[test]
    fn an_idle_shm_wire_leaves_the_socket_to_every_pass() {
        let mut t = UdpTurn::default();
        assert_eq!(reads(&mut t, 5, 10, false, false), vec![0, 1, 2, 3, 4]);
    }

    #[test]
    fn a_busy_shm_wire_yields_to_the_socket_every_run_of_passes() {
        // A local peer that keeps the rings full, a remote one active: the
        // socket is still read, once every SHM_BUSY_RUN passes.
        let mut t = UdpTurn::default();
        let n = 4 * SHM_BUSY_RUN as u64;
        let got = reads(&mut t, n, 10, true, false);
        let want: Vec<u64> = (1..=4).map(|k| k * SHM_BUSY_RUN as u64 - 1).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn with_only_shm_peers_the_socket_waits_for_its_time_even_when_shm_is_busy() {
        let mut t = UdpTurn::default();
        // Idle: once per UDP_IDLE_POLL_NS (here every 10th pass).
        let step = UDP_IDLE_POLL_NS / 10;
        assert_eq!(reads(&mut t, 25, step, false, true), vec![0, 10, 20]);
        // Busy: the run of passes must be over and the time due as well.
        let mut t = UdpTurn::default();
        let got = reads(&mut t, 3 * SHM_BUSY_RUN as u64, 1, true, true);
        assert_eq!(got, vec![SHM_BUSY_RUN as u64 - 1]);
        let mut t = UdpTurn::default();
        let got = reads(&mut t, 2 * SHM_BUSY_RUN as u64, UDP_IDLE_POLL_NS, true, true);
        assert_eq!(got, vec![SHM_BUSY_RUN as u64 - 1, 2 * SHM_BUSY_RUN as u64 - 1]);
    }

    #[test]
    fn a_socket_that_never_spoke_is_read_once_a_millisecond() {
        let mut t = UdpTurn::default();
        let step = UDP_UNUSED_POLL_NS / 10;
        let got = reads_every(&mut t, 25, step, false, Some(UDP_UNUSED_POLL_NS));
        assert_eq!(got, vec![0, 10, 20]);
    }

    #[test]
    fn after_a_sleep_the_next_pass_reads_the_socket_even_when_shm_is_busy() {
        let mut t = UdpTurn::default();
        assert_eq!(reads(&mut t, 2, 1, true, true), vec![]);
        t.now();
        assert_eq!(reads(&mut t, 2, 1, true, true), vec![0]);
    }
}
