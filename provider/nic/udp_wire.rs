//! The udp wire as the endpoint drives it (`nic::wire::Wire`): the sans-IO
//! `proto::Engine` (VCs, reliability, eager and rendezvous messages) and
//! the executor that moves its datagrams through the endpoint's sockets
//! (`nic::udp::UdpSockets`): batches out, GRO runs and placed receives in.
//!
//! The engine names its messages by its own ids; this layer maps them to
//! the endpoint's operations (`OpId`) and lends arrived messages to the
//! endpoint (`Upcall::arrived`) as the engine surfaces them.

use crate::ffi::*;
use crate::nic::iov::{IovSource, IovView};
use crate::nic::onesided;
use crate::nic::shm;
use crate::nic::udp::{KernelNews, RecvBatch, TxBatch, UdpSockets};
use crate::nic::wire::{Arrival, Body, Credit, Held, OpId, SendOp, Sent, Take, Upcall, Wire, WireEvent, WireKind};
use crate::proto::MemRanges;
use crate::proto::{
    Engine, EngineConfig, EngineError, Event, MsgBody, MsgHdr, MsgId, Payload, Placement, RecvSink, Refusal, RndvId,
    SendMode, SendPayload, SendSource, Transmit, TxOut,
};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::fd::RawFd;

/// Datagrams taken from the socket per syscall.
const RX_BATCH: usize = 16;
/// Eager payloads up to this size are copied into the datagram when sent
/// at once (`Engine::send_now`); larger ones leave from the application's
/// buffer through the flush's gather I/O.
const DIRECT_COPY_MAX: usize = 4096;

type IdMap<V> = HashMap<u64, V, crate::hash::KeyedState>;

/// Where `feed` stopped: the rest of the receive batch, from byte `at` of
/// slot `slot` (none if that is past its end), and the sockets after it,
/// wait for a later pass.
#[derive(Clone, Copy, Debug)]
struct RxLeft {
    slot: usize,
    at: usize,
    /// The peer whose message no receive had taken.
    from: SocketAddr,
    /// A pass went by with the message still unclaimed (`progress_timers`
    /// leaves the application one).
    waited: bool,
}

pub(crate) struct UdpWire {
    pub(crate) sockets: UdpSockets,
    pub(crate) engine: Engine,
    /// Datagrams on their way out, and those the socket had no room for.
    txbuf: TxBatch,
    rx: RecvBatch,
    /// The engine's send ids and accepted rendezvous ids, by operation.
    sends: IdMap<OpId>,
    recvs: IdMap<OpId>,
    /// The engine sent or received something: it may have timers and
    /// queued datagrams (until then `progress` skips them).
    hot: bool,
    /// Monotonic ns of the last datagram in or out.
    pub(crate) last_active: u64,
    /// Where `feed` left the receive batch: the next passes take the rest
    /// first, and read the sockets only after it.
    rx_left: Option<RxLeft>,
    /// Completions of sends and receives handed to the endpoint, counted
    /// (`feed` looks whether a datagram brought one).
    completions: u64,
    /// `look_again_before_sending`'s record: looks still worth making on
    /// the strength of the last one that found a datagram (each miss
    /// spends one), and, while none are, the chances passed since it last
    /// looked on trial. (The wire's, not a peer's: the pattern is the
    /// application's.)
    looks_left: u8,
    looks_skipped: u8,
}

/// Looks a hit of `look_again_before_sending` buys; while none are left,
/// one chance in this many looks anyway, to find the pattern again.
const LOOKS_PER_HIT: u8 = 4;
const LOOK_TRIAL_EVERY: u8 = 32;

impl UdpWire {
    pub(crate) fn new(sockets: UdpSockets, cfg: EngineConfig, seed: u64) -> UdpWire {
        let engine = Engine::new(cfg, sockets.local_addr(), Box::new(crate::proto::OsEntropy));
        UdpWire {
            sockets,
            engine,
            txbuf: TxBatch::default(),
            rx: RecvBatch::new(RX_BATCH),
            sends: IdMap::with_hasher(crate::hash::KeyedState(seed)),
            recvs: IdMap::with_hasher(crate::hash::KeyedState(seed ^ 1)),
            hot: false,
            last_active: 0,
            rx_left: None,
            completions: 0,
            // Looking from the start: a few misses turn it off.
            looks_left: LOOKS_PER_HIT,
            looks_skipped: 0,
        }
    }

    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.sockets.local_addr()
    }

    /// Whether a datagram ever went out or came in (a shm doorbell does
    /// not count): a job on one host never uses its socket.
    pub(crate) fn talked(&self) -> bool {
        self.hot
    }

    pub(crate) fn wait_fd(&self) -> RawFd {
        self.sockets.wait_fd()
    }

    /// Until when a pass has nothing to do here but read the socket (which
    /// `Port`'s turn schedules): the engine's next timer (an ACK owed, a
    /// retransmission, a peer's silence), `u64::MAX` when it has none or
    /// the wire was never used, 0 while an event or a datagram waits. So a
    /// process that once talked to a remote peer polls as quietly as one
    /// that never did, once that exchange has settled.
    pub(crate) fn quiet_until(&self) -> u64 {
        if !self.hot {
            return u64::MAX;
        }
        if self.engine.has_events() || !self.send_idle() || self.rx_left.is_some() || self.sockets.has_news() {
            return 0;
        }
        self.engine.poll_timeout().unwrap_or(u64::MAX)
    }

    /// Nothing to send: the engine has no datagram ready and no batch
    /// waits for room in the socket.
    #[inline]
    fn send_idle(&self) -> bool {
        self.engine.transmit_idle() && !self.txbuf.stalled()
    }

    /// Timers due, events, and what the engine queued (a datagram the
    /// socket refused, sends held back with FI_MORE, an accepted receive's
    /// first GET).
    #[inline]
    pub(crate) fn progress_timers(&mut self, now: u64, up: &mut dyn Upcall) -> bool {
        if !self.hot {
            return false;
        }
        self.progress_timers_hot(now, up)
    }

    fn progress_timers_hot(&mut self, now: u64, up: &mut dyn Upcall) -> bool {
        let mut any = false;
        // What the last pass's arrivals left for later (engine/later.rs).
        self.engine.settle();
        if let Some(left) = self.rx_left {
            if !left.waited && self.engine.holds_unclaimed(left.from) {
                // One pass for the application to answer the completion it
                // was just handed: Open MPI reads its CQ until it finds
                // nothing before its `MPI_Send` returns and it posts the
                // receive that takes the rest in place.
                self.rx_left = Some(RxLeft { waited: true, ..left });
            } else {
                self.rx_left = None;
                any = self.feed_from(left.slot, left.at, now, up);
            }
        }
        if self.sockets.has_news() {
            self.kernel_news();
        }
        if self.engine.poll_timeout().is_some_and(|t| t <= now) {
            self.engine.handle_timeout(now);
        }
        any |= self.handle_events(now, up);
        self.flush(now);
        any
    }

    /// Refusals the sockets read off their error queues (a peer's port is
    /// closed: nic/udp/errqueue.rs) to the engine, which believes those
    /// that name a VC (engine/refused.rs). The caller hands out the events.
    #[cold]
    fn kernel_news(&mut self) {
        for news in self.sockets.take_news() {
            let KernelNews::Refused { to, .. } = news else { continue };
            match self.engine.on_refused(to, news.quote()) {
                // `Event::PeerFailed` lets go of the peer's socket.
                Refusal::Failed => {}
                Refusal::Closed => {
                    crate::info!(FI_LOG_EP_CTRL, "peer {} closed its endpoint", to);
                    self.sockets.disconnect(to);
                    self.sockets.set_peer_count(self.engine.peer_count());
                }
                Refusal::Ignored => {
                    crate::debug!(FI_LOG_EP_CTRL, "a refusal from {} named none of our connections", to)
                }
            }
        }
    }

    /// Receives what the sockets hold (a few batches at most) and answers.
    /// First one datagram with a plain recvfrom: a polling application
    /// finds the socket empty almost every time, and that is the cheapest
    /// way to find out. Once something arrived, batches of recvmmsg, a few
    /// at most so one call stays short under a flood.
    pub(crate) fn progress_rx(&mut self, mut now: u64, up: &mut dyn Upcall) -> bool {
        let mut first = true;
        let mut placed = 0;
        let mut any = false;
        for _ in 0..8 {
            // The batch is not done with (`feed`): nothing new until it is.
            if self.rx_left.is_some() {
                break;
            }
            // Rendezvous data is being pulled: receive the next datagram
            // with its payload straight into the receive buffer it is
            // probably for (see Engine::rdata_placement), one per call.
            if placed < 16 && self.engine.pulling() {
                match self.recv_placed(now, up) {
                    Some(true) => {
                        any = true;
                        placed += 1;
                        now = crate::progress::now_ns();
                        let produced = self.handle_events(now, up);
                        self.flush(now);
                        if produced {
                            break;
                        }
                        continue;
                    }
                    Some(false) => break,
                    None => {}
                }
            }
            let r = if first {
                self.sockets.recv_one(&mut self.rx).map(usize::from)
            } else {
                self.sockets.recv_batch(&mut self.rx)
            };
            let n = match r {
                Ok(n) => n,
                Err(e) => {
                    crate::debug!(FI_LOG_EP_DATA, "recv: {}", e);
                    0
                }
            };
            if n == 0 {
                break;
            }
            any = true;
            if !first {
                now = crate::progress::now_ns();
            }
            self.sockets.tune_gro(&self.rx, n);
            let mut produced = self.feed_from(0, 0, now, up);
            produced |= self.handle_events(now, up);
            if first && produced && !self.send_idle() {
                self.look_again_before_sending(up);
            }
            self.flush(now);
            // A completion for the application: hand it over now rather
            // than spend another syscall between it and the application.
            if produced || (!first && n < RX_BATCH) {
                break;
            }
            first = false;
        }
        if self.sockets.has_news() {
            self.kernel_news();
            any |= self.handle_events(now, up);
            self.flush(now);
        }
        any
    }

    /// Engine events to the endpoint: arrivals matched on the spot,
    /// completions by operation. Whether there was any.
    fn handle_events(&mut self, now: u64, up: &mut dyn Upcall) -> bool {
        let mut any = false;
        while let Some(ev) = self.engine.poll_event() {
            any = true;
            match ev {
                Event::Msg { peer, hdr, body } => self.arrived(peer, hdr, body, now, up),
                Event::RecvDone { rid, written, .. } => {
                    if let Some(op) = self.recvs.remove(&rid) {
                        self.completions += 1;
                        up.event(WireEvent::RecvDone { op, written });
                    }
                }
                Event::RecvFailed { rid, err, .. } => {
                    crate::warn!(FI_LOG_EP_DATA, "receive failed: {}", err);
                    if let Some(op) = self.recvs.remove(&rid) {
                        up.event(WireEvent::RecvFailed {
                            op,
                            err: engine_errno(err),
                        });
                    }
                }
                Event::SendDone { id } => {
                    if let Some(op) = self.sends.remove(&id) {
                        self.completions += 1;
                        up.event(WireEvent::SendDone { op });
                    }
                }
                Event::SendFailed { id, err } => {
                    crate::warn!(FI_LOG_EP_DATA, "send failed: {}", err);
                    if let Some(op) = self.sends.remove(&id) {
                        up.event(WireEvent::SendFailed {
                            op,
                            err: engine_errno(err),
                        });
                    }
                }
                Event::PeerFailed { peer } => {
                    crate::warn!(
                        FI_LOG_EP_DATA,
                        "peer {} is unreachable; its operations completed in error",
                        peer
                    );
                    self.sockets.disconnect(peer);
                    self.sockets.set_peer_count(self.engine.peer_count());
                    up.event(WireEvent::PeerFailed { peer });
                }
                Event::PeerUp { peer } => {
                    if let Err(e) = self.sockets.connect(peer) {
                        // The main socket carries this peer instead.
                        crate::info!(FI_LOG_EP_CTRL, "no connected socket for {}: {}", peer, e);
                    }
                    self.sockets.set_peer_count(self.engine.peer_count());
                    up.event(WireEvent::PeerUp { peer });
                }
            }
        }
        any
    }

    /// A message's credits go back to its sender.
    fn release(&mut self, credit: Credit, now: u64) {
        release(&mut self.engine, credit, now);
    }

    /// A message the engine surfaced, lent to the endpoint. What the
    /// engine charged its sender's credits goes with it: an RTS holds
    /// only its tail (releasing its whole length would hand the peer back
    /// credits still held by its unexpected eager messages).
    fn arrived(&mut self, peer: SocketAddr, hdr: MsgHdr, body: MsgBody, now: u64, up: &mut dyn Upcall) {
        match body {
            MsgBody::Eager(data) => eager_arrived(&mut self.engine, peer, hdr, &data, now, up),
            MsgBody::Rndv(rid) => {
                answer_heard(&mut self.engine, peer, &hdr);
                let credit = Credit::Udp {
                    peer,
                    bytes: self.engine.rts_charge(rid),
                };
                let held = Held {
                    wire: WireKind::Udp,
                    id: rid,
                };
                let take = up.arrived(Arrival {
                    peer: &peer,
                    hdr,
                    body: Body::Rndv(held),
                    credit,
                    may_leave: false,
                });
                match take {
                    Take::Kept => {}
                    Take::Done | Take::Later => {
                        debug_assert!(false, "a rendezvous message is accepted, kept or discarded");
                        self.release(credit, now);
                    }
                    Take::Accept { op, sink, .. } => {
                        self.release(credit, now);
                        self.accept_rid(rid, op, sink, now);
                    }
                    // The udp FIN carries no status: a refusal is a discard.
                    Take::Discard | Take::Refuse { .. } => {
                        self.release(credit, now);
                        self.engine.discard(rid, now);
                    }
                }
            }
        }
    }

    fn accept_rid(&mut self, rid: RndvId, op: OpId, sink: Box<dyn RecvSink>, now: u64) {
        self.recvs.insert(rid, op);
        self.engine.accept(rid, sink, now);
    }

    /// A datagram brought a completion and something is to be sent at
    /// once: most often an ACK that its peer waits for before it goes on
    /// (both ranks of an exchange, each waiting for the other's ACKs,
    /// `RecvWindow::in_order_arrived`). One more look at the socket first:
    /// a second message already there (`MPI_Isend` twice, then the
    /// receives: IMB's Exchange) is then answered by the same ACK, where
    /// each had one of its own, and a `send()` across hosts costs several
    /// times the `recv()` that finds nothing. (Not in a ping-pong: its ACK
    /// waits for the answer, and nothing is due at once.) Where the looks
    /// find nothing (`MPI_Sendrecv`: one message each way), they stop but
    /// for one chance in `LOOK_TRIAL_EVERY`, until one finds something
    /// again.
    fn look_again_before_sending(&mut self, up: &mut dyn Upcall) {
        if self.rx_left.is_some() {
            return;
        }
        if self.looks_left == 0 {
            self.looks_skipped += 1;
            if self.looks_skipped < LOOK_TRIAL_EVERY {
                return;
            }
            self.looks_skipped = 0;
        }
        // One datagram, the cheapest call (as the pass's first look).
        let n = usize::from(self.sockets.recv_one(&mut self.rx).unwrap_or(false));
        if n == 0 {
            self.looks_left = self.looks_left.saturating_sub(1);
            return;
        }
        self.looks_left = LOOKS_PER_HIT;
        let now = crate::progress::now_ns();
        self.sockets.tune_gro(&self.rx, n);
        self.feed_from(0, 0, now, up);
        self.handle_events(now, up);
    }

    /// Sends what the engine has queued, as long as the socket takes it.
    /// Runs of equal-sized datagrams to one peer (bulk data on a small-MTU
    /// path) leave as one GSO send; payloads go from the send buffers
    /// straight into the socket.
    pub(crate) fn flush(&mut self, now: u64) {
        // The common case of a polling application: nothing to send.
        if self.send_idle() {
            return;
        }
        let UdpWire {
            engine, sockets, txbuf, ..
        } = self;
        if txbuf.stalled() {
            if !sockets.send_batch(txbuf) {
                return;
            }
            txbuf.rewind();
        }
        let mut out = FlushOut {
            wire: sockets,
            txbuf,
            refused: false,
        };
        engine.poll_transmit_burst(now, &mut out);
        if out.refused {
            return;
        }
        if txbuf.building() && sockets.send_batch(txbuf) {
            txbuf.rewind();
        }
    }

    /// One datagram received by guess (`Engine::rdata_placement`): None if
    /// there is no guess to make, else whether a datagram arrived.
    fn recv_placed(&mut self, now: u64, up: &mut dyn Upcall) -> Option<bool> {
        let UdpWire {
            engine, sockets, rx, ..
        } = self;
        let (p, region) = engine.rdata_placement()?;
        let (n, from) = match sockets.recv_split(rx, Placement::HEAD_LEN, region) {
            Ok(Some(r)) => r,
            Ok(None) => return Some(false),
            Err(e) => {
                crate::debug!(FI_LOG_EP_DATA, "recv: {}", e);
                return Some(false);
            }
        };
        let len = n.saturating_sub(Placement::HEAD_LEN);
        if !rx.split_coalesced() && p.matches(rx.head(), len).is_some() {
            engine.handle_datagram_placed(from, rx.head(), &p, len, now);
        } else {
            rx.gather(region);
            engine.placement_missed();
            self.feed_from(0, 0, now, up);
        }
        Some(true)
    }

    /// Hands the engine what slot `i` of the receive batch holds from byte
    /// `at` on (one datagram, or a GRO run of equal-sized ones). Right
    /// after an RTS with pushed data behind it, or the first segment of a
    /// long eager message, the engine's events are handled, so the message
    /// is matched, and its receive accepted, before the data behind it is
    /// handled (`Engine::wants_match_now`). Whether events were handled,
    /// and where it stopped early (what is left, for `rx_left`): there, if
    /// that handed the application a completion and no receive took the
    /// message (`Engine::holds_unclaimed`). The application, told (say)
    /// that its send is done, may post that receive before the next pass,
    /// and the rest of the message then lands in place rather than being
    /// kept and copied again. That is Open MPI's ping-pong across hosts: a blocking
    /// `MPI_Send` completes when the answer's first segment brings its
    /// ACK, and only then is the receive for the answer posted.
    fn feed(&mut self, i: usize, mut at: usize, now: u64, up: &mut dyn Upcall) -> (bool, Option<RxLeft>) {
        let mut handled = false;
        loop {
            let Some((bytes, from, seg)) = self.rx.get(i) else {
                return (handled, None);
            };
            let len = bytes.len();
            // (An empty datagram is the engine's to count, once.)
            if (at > 0 && at >= bytes.len()) || (at == 0 && shm::is_doorbell(bytes)) {
                return (handled, None);
            }
            self.hot = true;
            self.last_active = now;
            if at == 0 && seg >= bytes.len() {
                // One datagram: a message it brings in order is handed
                // over from the receive buffer (Engine::handle_one).
                if let Some((hdr, data)) = self.engine.handle_one(from, bytes, now) {
                    eager_arrived(&mut self.engine, from, hdr, data, now, up);
                    return (true, None);
                }
                at = bytes.len();
            } else {
                at += self.engine.handle_run(from, &bytes[at..], seg, now);
            }
            if !self.engine.wants_match_now() {
                return (handled, None);
            }
            let done = self.completions;
            handled |= self.handle_events(now, up);
            if self.completions != done && self.engine.holds_unclaimed(from) {
                let (slot, at) = if at < len { (i, at) } else { (i + 1, 0) };
                let left = RxLeft {
                    slot,
                    at,
                    from,
                    waited: false,
                };
                return (handled, Some(left));
            }
        }
    }

    /// `feed` from slot `i`, byte `at`, to the end of the batch, or to
    /// where `feed` stops: what is left then, in the batch and in the
    /// sockets, waits (`rx_left`). Whether events were handled.
    fn feed_from(&mut self, mut i: usize, mut at: usize, now: u64, up: &mut dyn Upcall) -> bool {
        let mut handled = false;
        while i < self.rx.filled() {
            let (h, left) = self.feed(i, at, now, up);
            handled |= h;
            if left.is_some() {
                self.rx_left = left;
                return handled;
            }
            i += 1;
            at = 0;
        }
        handled
    }

    /// A quiet send (an inject, or inject-complete: complete once the
    /// engine has its copy) of `src` to `peer`, if it goes now in one
    /// segment with nothing ahead of it (engine/express.rs): sent, and
    /// complete, as `send` would make it, by a shorter way (the endpoint's small-send
    /// path, which knows the peer from its lane table). False: nothing
    /// was done; `send` takes it.
    pub(crate) fn inject_now(&mut self, peer: SocketAddr, hdr: &MsgHdr, src: &IovView<'_>) -> bool {
        let len = src.len();
        if len > DIRECT_COPY_MAX || self.txbuf.stalled() {
            return false;
        }
        let UdpWire {
            engine, sockets, txbuf, ..
        } = self;
        let Some(x) = engine.prepare(peer, hdr, len, false, |b| src.read_at(0, b), txbuf.slot()) else {
            return false;
        };
        sockets.send_slot(txbuf, peer, x.datagram_len());
        // The clock after the send, not before: a read costs some 30 ns
        // here (a fine one), and the datagram is the answer a peer waits
        // for. The send's time is then late by the `send()` itself, a few
        // microseconds against a retransmission timeout of milliseconds.
        let now = crate::progress::now_ns();
        // The engine's own copy, for a retransmission.
        engine.commit(x, *hdr, copied(src), now);
        self.hot = true;
        self.last_active = now;
        self.flush(now);
        // As `send`: what the peer's last message left for later, now.
        self.engine.settle();
        true
    }

    /// Closing: the ACKs still owed go out now.
    pub(crate) fn flush_acks(&mut self, now: u64) {
        self.engine.flush_acks();
        self.flush(now);
    }

    /// Our own sends not yet acknowledged (closing waits for them).
    pub(crate) fn has_unacked(&self) -> bool {
        self.engine.has_unacked() || self.txbuf.stalled()
    }

    /// The sockets' epoll set, once something sleeps on it.
    pub(crate) fn watch(&self) -> std::io::Result<()> {
        self.sockets.watch()
    }

    /// The sockets out of their epoll set, once nothing sleeps on it.
    pub(crate) fn unwatch(&self) {
        self.sockets.unwatch()
    }

    /// Whether the sockets are in their epoll set.
    pub(crate) fn watched(&self) -> bool {
        self.sockets.watched()
    }
}

/// What the engine keeps of a send's payload `src`: its own copy of a
/// quiet one (completed already; inline up to INLINE_PAYLOAD bytes) or of
/// an inject's (the buffer goes back now, the completion comes on
/// delivery), else the source itself, read at each transmission.
/// A message's credits go back to its sender.
fn release(engine: &mut Engine, credit: Credit, now: u64) {
    if let Credit::Udp { peer, bytes } = credit {
        engine.release(peer, bytes, now);
    }
}

/// An eager message to the endpoint, its bytes `data` copied out during
/// the upcall; its credits go back unless the endpoint kept it.
fn eager_arrived(engine: &mut Engine, peer: SocketAddr, hdr: MsgHdr, data: &[u8], now: u64, up: &mut dyn Upcall) {
    answer_heard(engine, peer, &hdr);
    let credit = Credit::Udp { peer, bytes: hdr.len };
    let take = up.arrived(Arrival {
        peer: &peer,
        hdr,
        body: Body::Bytes(data),
        credit,
        may_leave: false,
    });
    if !matches!(take, Take::Kept) {
        release(engine, credit, now);
    }
}

/// A message from `peer` that answers a one-sided request of ours ends
/// the watch `Engine::answer_due` began (a rendezvous answer's RTS
/// included: the pull that follows is watched as any).
#[inline(always)]
fn answer_heard(engine: &mut Engine, peer: SocketAddr, hdr: &MsgHdr) {
    if hdr.flags & onesided::RESP != 0 {
        engine.answer_came(peer);
    }
}

/// A copy of `src` the engine keeps (a quiet send's).
fn copied(src: &impl SendSource) -> SendPayload {
    let mut copy = Payload::from_elem(0, src.len());
    src.read_at(0, &mut copy);
    SendPayload::Copied(copy)
}

fn send_payload(src: IovSource, quiet: bool, inject: bool) -> SendPayload {
    let len = src.len();
    if quiet {
        copied(&src)
    } else if inject {
        let mut copy = vec![0u8; len];
        src.read_at(0, &mut copy);
        SendPayload::Source(Box::new(copy))
    } else {
        SendPayload::Source(Box::new(src))
    }
}

impl Wire for UdpWire {
    fn kind(&self) -> WireKind {
        WireKind::Udp
    }

    fn send(&mut self, s: SendOp, src: IovSource, _up: &mut dyn Upcall, now: u64) -> Result<Sent, i32> {
        let SendOp { peer, op, hdr, flags } = s;
        self.hot = true;
        self.last_active = now;
        let len = hdr.len as usize;
        let eager = len <= self.engine.eager_max();
        // Complete as soon as the engine has its own copy (inject, and
        // inject-complete eager sends), unless delivery is asked for. The
        // engine reads the payload at transmission time, and again for a
        // retransmission; only a send whose buffer is the application's
        // again before it is acknowledged needs a copy.
        let quiet = !flags.delivery && (flags.inject || (eager && flags.inject_complete));
        // A send that is not batched (FI_MORE) may go to the socket at once
        // (Engine::send_now: if nothing else waits), except bulk eager
        // data, which the flush sends from the application's buffer, and
        // an eager message of several segments: the flush sends them all
        // in one GSO run, where going at once sent the first alone and the
        // rest after it, two system calls (fabtests' 4 KiB ping-pong across
        // hosts, MTU 1500: 21 us one-way against 9-10 at 8 KiB, which went
        // in one run).
        let at_once = !flags.more
            && (!eager || (len <= DIRECT_COPY_MAX && !self.engine.spans_segments(peer, len)))
            && !self.txbuf.stalled();
        // One segment with nothing ahead of it: on the wire first, then
        // recorded (engine/express.rs).
        let express = if at_once && eager {
            let UdpWire {
                engine, sockets, txbuf, ..
            } = self;
            engine
                .prepare(peer, &hdr, len, !quiet, |b| src.read_at(0, b), txbuf.slot())
                .inspect(|x| sockets.send_slot(txbuf, peer, x.datagram_len()))
        } else {
            None
        };
        let r = match express {
            Some(x) => Ok(self.engine.commit(x, hdr, send_payload(src, quiet, flags.inject), now)),
            None if at_once => {
                let UdpWire {
                    engine, sockets, txbuf, ..
                } = self;
                let src = send_payload(src, quiet, flags.inject);
                // (Not the express way again: `prepare` refused the
                // message above, or it is past the eager size.)
                engine
                    .send_now_general(peer, hdr, src, SendMode::Eager, now, txbuf.slot())
                    .map(|(id, n)| {
                        if let Some(n) = n {
                            sockets.send_slot(txbuf, peer, n);
                        }
                        id
                    })
            }
            None => {
                let src = send_payload(src, quiet, flags.inject);
                self.engine.send(peer, hdr, src, SendMode::Eager, now)
            }
        };
        let id: MsgId = match r {
            Ok(id) => id,
            Err(e) => {
                crate::warn!(FI_LOG_EP_DATA, "send to {}: {}", peer, e);
                return Err(-engine_errno(e));
            }
        };
        if hdr.flags & onesided::REQ != 0 {
            // Its response is awaited: the peer's silence is watched
            // until it comes (`Engine::answer_due`).
            self.engine.answer_due(peer);
        }
        if !flags.more {
            self.flush(now);
        }
        // The datagram is out: now what its peer's last message left for
        // later (engine/later.rs), while the answer is on its way.
        self.engine.settle();
        if quiet {
            // The engine counts it until acknowledged (quiet_in_flight).
            return Ok(Sent::Done);
        }
        self.sends.insert(id, op);
        Ok(Sent::Pending)
    }

    fn accept(
        &mut self,
        held: Held,
        op: OpId,
        sink: Box<dyn RecvSink>,
        _ranges: MemRanges,
        up: &mut dyn Upcall,
        now: u64,
    ) {
        debug_assert_eq!(held.wire, WireKind::Udp);
        self.accept_rid(held.id, op, sink, now);
        self.handle_events(now, up);
        self.flush(now);
    }

    fn discard(&mut self, held: Held, now: u64) {
        self.engine.discard(held.id, now);
    }

    fn give_back(&mut self, credit: Credit) {
        // Not within a pass: the last datagram's time stands in for now
        // (earlier, so news that may wait goes no later than it would).
        self.release(credit, self.last_active);
    }

    fn cancel_recv(&mut self, _op: OpId) -> bool {
        // The engine places pulled data itself and cannot take a pull
        // back mid-way: the receive completes.
        false
    }

    fn progress(&mut self, now: u64, up: &mut dyn Upcall) -> bool {
        let a = self.progress_timers(now, up);
        self.progress_rx(now, up) || a
    }

    fn next_deadline(&self, now: u64) -> Option<u64> {
        // The rest of a receive batch waits for the next pass (`feed`),
        // refusals for the engine.
        if self.rx_left.is_some() || self.sockets.has_news() {
            return Some(now);
        }
        // A stalled datagram needs another try soon even without input.
        if self.txbuf.stalled() {
            return Some(now + 50_000);
        }
        self.engine.poll_timeout()
    }

    fn busy(&self) -> bool {
        self.has_unacked()
    }

    fn eager_max(&self) -> usize {
        self.engine.eager_max()
    }

    fn backlog(&self) -> usize {
        self.engine.quiet_in_flight()
    }

    fn arm(&mut self) -> bool {
        // The rest of a receive batch waits (`feed`), or refusals do: no
        // sleeping on them.
        if self.rx_left.is_some() || self.sockets.has_news() {
            return false;
        }
        if let Err(e) = self.sockets.watch() {
            crate::warn!(FI_LOG_EP_CTRL, "cannot watch the endpoint's sockets: {}", e);
            return false;
        }
        true
    }

    fn stats_line(&self) -> String {
        format!(
            "{:?} send_calls: {} connected_sockets: {} other_kernel_errors: {}",
            self.engine.stats(),
            self.sockets.send_calls(),
            self.sockets.connected_count(),
            self.sockets.other_errors()
        )
    }
}

pub(crate) fn engine_errno(e: EngineError) -> i32 {
    match e {
        EngineError::PeerUnreachable => FI_EHOSTUNREACH,
        EngineError::PeerRefused => FI_ECONNREFUSED,
        EngineError::PeerRestarted => FI_ECONNRESET,
        EngineError::PeerForgotten => FI_ECANCELED,
        EngineError::UnknownRndv => FI_EIO,
        EngineError::InvalidAddress => FI_EINVAL,
        EngineError::DatagramTooSmall => FI_EMSGSIZE,
    }
}

/// `UdpWire::flush`'s side of `Engine::poll_transmit_burst`: datagrams
/// join the batch (GSO runs to one peer), which goes to the socket when
/// full.
struct FlushOut<'a> {
    wire: &'a UdpSockets,
    txbuf: &'a mut TxBatch,
    /// The socket refused a batch (it was stashed): stop for this pass.
    refused: bool,
}

impl TxOut for FlushOut<'_> {
    fn slot(&mut self) -> Option<&mut [u8]> {
        if self.txbuf.full() {
            if !self.wire.send_batch(self.txbuf) {
                self.refused = true;
                return None;
            }
            self.txbuf.rewind();
        }
        Some(self.txbuf.slot())
    }

    fn commit(&mut self, t: Transmit<'_>) -> bool {
        let (h, n, to) = (t.hdr_len, t.len, t.to);
        let payload: &[u8] = match t.payload {
            None => &[],
            Some((src, off)) => match src.contiguous(off, n - h) {
                Some(p) => p,
                None => {
                    src.read_at(off, &mut self.txbuf.slot()[h..n]);
                    &[]
                }
            },
        };
        let hdr_len = if payload.is_empty() { n } else { h };
        if !self.txbuf.fits(to, n, self.wire.gso()) && !self.wire.send_batch(self.txbuf) {
            // The socket is full: keep this one too and stop.
            // SAFETY: send_batch below sends or stashes (copies) it.
            unsafe { self.txbuf.push(to, hdr_len, payload) };
            self.wire.send_batch(self.txbuf);
            self.refused = true;
            return false;
        }
        // SAFETY: the payload lives in a send source the engine keeps,
        // unmoved and unchanged, until that send completes, which only an
        // incoming ACK or FIN can do; none is handled before this batch is
        // sent or stashed by send_batch within the same flush.
        unsafe { self.txbuf.push(to, hdr_len, payload) };
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nic::iov::{Iov, IovSink};
    use crate::nic::wire::SendFlags;
    use crate::proto::EngineConfig;
    use rustix::event::{poll, PollFd, PollFlags};
    use std::os::fd::BorrowedFd;

    /// What passes hand up, as an application sees it: eager messages
    /// taken at once, long ones kept for a receive it posts later
    /// (`Take::Kept`), and its operations complete.
    #[derive(Default)]
    struct App {
        held: Vec<Held>,
        eager: usize,
        /// The last eager message's bytes.
        last: Vec<u8>,
        sent: usize,
        recvd: Vec<(OpId, usize)>,
        failed: Vec<SocketAddr>,
    }

    impl Upcall for App {
        fn arrived(&mut self, a: Arrival<'_>) -> Take {
            match a.body {
                Body::Rndv(h) => {
                    self.held.push(h);
                    Take::Kept
                }
                Body::Bytes(b) => {
                    self.eager += 1;
                    self.last = b.to_vec();
                    Take::Done
                }
                Body::Shared(_) => unreachable!("the udp wire reassembles its own"),
            }
        }
        fn event(&mut self, e: WireEvent) {
            match e {
                WireEvent::SendDone { .. } => self.sent += 1,
                WireEvent::RecvDone { op, written } => self.recvd.push((op, written)),
                WireEvent::PeerFailed { peer } => self.failed.push(peer),
                _ => {}
            }
        }
    }

    fn wire(seed: u64) -> UdpWire {
        wire_of(seed, EngineConfig::default())
    }

    fn wire_of(seed: u64, cfg: EngineConfig) -> UdpWire {
        let s = UdpSockets::bind("127.0.0.1:0".parse().unwrap(), "lo", 1 << 20, 0, 0).unwrap();
        s.watch().unwrap();
        let cfg = EngineConfig {
            max_datagram: s.max_datagram.min(cfg.max_datagram),
            ..cfg
        };
        UdpWire::new(s, cfg, seed)
    }

    /// A pass as `Port` makes it: timers, then the socket.
    fn pass(w: &mut UdpWire, now: u64, up: &mut dyn Upcall) {
        w.progress_timers(now, up);
        w.progress_rx(now, up);
    }

    /// Waits (at most a second) until a datagram waits for `a` or `b`.
    fn wait_for_datagram(a: &UdpWire, b: &UdpWire) {
        wait_until(a, b, u64::MAX);
    }

    /// `wait_for_datagram`, or until `deadline` on the real clock
    /// (`progress::now_ns`), whichever comes first.
    fn wait_until(a: &UdpWire, b: &UdpWire, deadline: u64) {
        // SAFETY: the wires' epoll descriptors, open while they live,
        // which they do through this call.
        let (fa, fb) = unsafe { (BorrowedFd::borrow_raw(a.wait_fd()), BorrowedFd::borrow_raw(b.wait_fd())) };
        let mut fds = [PollFd::new(&fa, PollFlags::IN), PollFd::new(&fb, PollFlags::IN)];
        let ns = deadline.saturating_sub(crate::progress::now_ns()).min(1_000_000_000);
        let wait = rustix::time::Timespec {
            tv_sec: (ns / 1_000_000_000) as i64,
            tv_nsec: (ns % 1_000_000_000) as i64,
        };
        let _ = poll(&mut fds, Some(&wait));
    }

    /// `a` sends `data` to `b` as operation 1, and both pass until `b`
    /// has it (the first contact's handshake takes passes of both).
    fn first_message(a: &mut UdpWire, b: &mut UdpWire, ua: &mut App, ub: &mut App, data: &[u8]) {
        let now = crate::progress::now_ns;
        send_bytes(a, b, 1, data, ua, now());
        for _ in 0..50 {
            if ub.eager == 1 {
                break;
            }
            wait_for_datagram(a, b);
            pass(b, now(), ub);
            pass(a, now(), ua);
        }
    }

    /// `from` sends `data` to `to` as operation `op`, which is pending.
    fn send_bytes(from: &mut UdpWire, to: &UdpWire, op: OpId, data: &[u8], up: &mut dyn Upcall, now: u64) {
        send_flagged(from, to, op, data, MsgHdr::TAGGED, up, now)
    }

    /// `send_bytes` with header flags `flags`.
    fn send_flagged(
        from: &mut UdpWire,
        to: &UdpWire,
        op: OpId,
        data: &[u8],
        flags: u32,
        up: &mut dyn Upcall,
        now: u64,
    ) {
        let hdr = MsgHdr {
            tag: 1,
            data: 0,
            len: data.len() as u64,
            flags,
        };
        let send = SendOp {
            peer: to.local_addr(),
            op,
            hdr,
            flags: SendFlags::default(),
        };
        // SAFETY: `data` outlives the send, which completes in the test
        // that calls this.
        let src = IovSource::new(unsafe { Iov::from_raw_parts(data.as_ptr() as usize, data.len()) });
        assert_eq!(from.send(send, src, up, now), Ok(Sent::Pending));
    }

    /// Passes `a` and `b` (while it lives) until `done` holds, waiting for
    /// their datagrams in between; at most 10 s on the real clock.
    fn pass_until(
        what: &str,
        a: &mut UdpWire,
        ua: &mut App,
        mut b: Option<(&mut UdpWire, &mut App)>,
        done: impl Fn(&App) -> bool,
    ) {
        let now = crate::progress::now_ns;
        let deadline = now() + 10_000_000_000;
        while !done(ua) {
            assert!(now() < deadline, "{what}: not within 10 s ({:?})", a.engine.stats());
            match &mut b {
                Some((b, ub)) => {
                    wait_until(a, b, now() + 10_000_000);
                    pass(b, now(), *ub);
                }
                None => wait_until(a, a, now() + 10_000_000),
            }
            pass(a, now(), ua);
        }
    }

    /// A one-sided request keeps its target watched until the response
    /// comes (`Engine::answer_due`): a target that acknowledged a request
    /// and died before it answered (its socket closed: nothing of ours
    /// goes unacknowledged, no refusal comes unasked) is found dead, so
    /// what waits for the answer fails instead of waiting for ever (an
    /// RMA read across hosts whose target was killed, CI 2026-12-07). A
    /// response ends the watch.
    #[test]
    fn a_request_keeps_its_target_watched_until_it_is_answered() {
        let cfg = EngineConfig {
            peer_timeout_ns: 200_000_000,
            ..EngineConfig::default()
        };
        let now = crate::progress::now_ns;
        let (mut a, mut b) = (wire_of(7, cfg.clone()), wire_of(8, cfg));
        let (mut ua, mut ub) = (App::default(), App::default());
        let pb = b.local_addr();
        first_message(&mut a, &mut b, &mut ua, &mut ub, b"hello");
        // A request, answered.
        send_flagged(&mut a, &b, 2, b"q1", onesided::REQ, &mut ua, now());
        assert_eq!(a.engine.answers_due(pb), 1);
        pass_until(
            "the first request acknowledged",
            &mut a,
            &mut ua,
            Some((&mut b, &mut ub)),
            |ua| ua.sent == 2,
        );
        send_flagged(&mut b, &a, 1, b"r1", onesided::RESP, &mut ub, now());
        pass_until("the response", &mut a, &mut ua, Some((&mut b, &mut ub)), |ua| {
            ua.eager == 1
        });
        assert_eq!(a.engine.answers_due(pb), 0, "the response ends the watch");
        assert!(ua.failed.is_empty());
        // Another, acknowledged; then its target dies without a word.
        send_flagged(&mut a, &b, 3, b"q2", onesided::REQ, &mut ua, now());
        pass_until(
            "the second request acknowledged",
            &mut a,
            &mut ua,
            Some((&mut b, &mut ub)),
            |ua| ua.sent == 3,
        );
        assert_eq!(ub.eager, 3, "b took the first message and both requests");
        drop(b);
        pass_until("the dead target found", &mut a, &mut ua, None, |ua| {
            !ua.failed.is_empty()
        });
        assert_eq!(ua.failed, vec![pb]);
    }

    /// Both ranks of an exchange: `b` has a send of its own waiting for
    /// `a`'s ACK, so its ACKs of `a`'s messages leave at once, and two of
    /// `a`'s messages are in `b`'s socket when it passes. The pass that
    /// hands `b` the first looks again before it sends that ACK
    /// (`look_again_before_sending`): it takes the second too, and one ACK
    /// answers both, where each had one of its own. Real sockets on
    /// loopback (a datagram is in its receiver's socket when `send()`
    /// returns).
    #[test]
    fn one_ack_answers_two_messages_already_waiting() {
        let cfg = EngineConfig {
            ack_delay_ns: 10_000_000_000,
            ..EngineConfig::default()
        };
        let now = crate::progress::now_ns;
        let (mut a, mut b) = (wire_of(11, cfg.clone()), wire_of(12, cfg));
        let (mut ua, mut ub) = (App::default(), App::default());
        first_message(&mut a, &mut b, &mut ua, &mut ub, b"hello");
        pass_until(
            "the first message acknowledged",
            &mut a,
            &mut ua,
            Some((&mut b, &mut ub)),
            |ua| ua.sent == 1,
        );
        // b's send to a stays unacknowledged: a does not pass.
        send_bytes(&mut b, &a, 2, b"from b", &mut ub, now());
        send_bytes(&mut a, &b, 3, b"one", &mut ua, now());
        send_bytes(&mut a, &b, 4, b"two", &mut ua, now());
        let acks = b.engine.stats().acks_sent;
        pass(&mut b, now(), &mut ub);
        assert_eq!((ub.eager, &ub.last[..]), (3, &b"two"[..]), "one pass took both");
        pass(&mut b, now(), &mut ub);
        assert_eq!(b.engine.stats().acks_sent - acks, 1, "one ACK for both");
        pass_until("both of a's sends complete", &mut a, &mut ua, None, |ua| ua.sent == 3);
    }

    /// `a`'s send completes on the first segment of `b`'s answer, a long
    /// eager message no receive waits for yet (Open MPI's ping-pong: its
    /// blocking `MPI_Send` returns then, and its `MPI_Recv` is posted
    /// after). The pass that hands `a` the completion stops there; the
    /// next leaves the rest alone while the message is unclaimed; and a
    /// receive posted meanwhile takes the rest in place. Without that
    /// receive, the pass after takes the rest and holds it, and a receive
    /// posted later gets all of it. Real sockets on loopback and the real
    /// clock (the wire reads it between batches); datagrams of an Ethernet
    /// path's size, and an ACK delay long enough that `b`'s ACK of the
    /// ping rides on its answer.
    #[test]
    fn a_completion_is_handed_over_before_the_rest_of_an_unclaimed_message() {
        let answer: Vec<u8> = (0..50_000u32).map(|i| (i * 7 + 3) as u8).collect();
        let cfg = EngineConfig {
            max_datagram: 1472,
            ack_delay_ns: 10_000_000_000,
            ..EngineConfig::default()
        };
        let now = crate::progress::now_ns;
        for post in [true, false] {
            let (mut a, mut b) = (wire_of(5, cfg.clone()), wire_of(6, cfg.clone()));
            let (mut ua, mut ub) = (App::default(), App::default());
            first_message(&mut a, &mut b, &mut ua, &mut ub, b"ping");
            assert_eq!(
                (ub.eager, ua.sent),
                (1, 0),
                "post {post}: b has the ping, a's send waits"
            );
            send_bytes(&mut b, &a, 2, &answer, &mut ub, now());
            wait_for_datagram(&a, &b);
            pass(&mut a, now(), &mut ua);
            assert_eq!(
                (ua.sent, ua.held.len()),
                (1, 1),
                "post {post}: the send done, the answer held"
            );
            assert!(a.rx_left.is_some(), "post {post}: the rest waits");
            let t = now();
            assert_eq!(a.next_deadline(t), Some(t), "post {post}: no sleeping on it");
            assert!(!a.arm(), "post {post}: no sleeping on it");
            let mut buf = vec![0u8; answer.len()];
            if post {
                // SAFETY: `buf` outlives the receive, which completes below.
                let sink = IovSink::new(unsafe { Iov::from_raw_parts(buf.as_mut_ptr() as usize, buf.len()) });
                a.accept(ua.held[0], 9, Box::new(sink), MemRanges::new(), &mut ua, now());
            } else {
                pass(&mut a, now(), &mut ua);
                assert!(a.rx_left.is_some_and(|l| l.waited), "one pass left to the application");
            }
            for _ in 0..200 {
                pass(&mut a, now(), &mut ua);
                pass(&mut b, now(), &mut ub);
                if ub.sent == 1 && (!post || !ua.recvd.is_empty()) {
                    break;
                }
                // Until a datagram comes, or a timer of either is due.
                wait_until(&a, &b, a.quiet_until().min(b.quiet_until()));
            }
            assert_eq!(ub.sent, 1, "post {post}: the answer acknowledged");
            if !post {
                assert!(ua.recvd.is_empty());
                // SAFETY: as above.
                let sink = IovSink::new(unsafe { Iov::from_raw_parts(buf.as_mut_ptr() as usize, buf.len()) });
                a.accept(ua.held[0], 9, Box::new(sink), MemRanges::new(), &mut ua, now());
            }
            assert_eq!(ua.recvd, [(9, answer.len())], "post {post}");
            assert!(buf == answer, "post {post}: the answer's bytes");
            let st = a.engine.stats();
            assert_eq!(
                (st.eager_held, st.eager_placed, st.dropped_malformed),
                (1, u64::from(post), 0),
                "post {post}: in place only when the receive came first"
            );
        }
    }

    /// An eager message of several segments goes in one GSO run, one
    /// system call, not its first segment at once and the rest after it
    /// (over a 1500-byte MTU a 4 KiB message is three segments).
    #[test]
    fn an_eager_message_of_several_segments_is_one_send_call() {
        let cfg = EngineConfig {
            max_datagram: 1472,
            ..EngineConfig::default()
        };
        let now = crate::progress::now_ns;
        let (mut a, mut b) = (wire_of(7, cfg.clone()), wire_of(8, cfg));
        let (mut ua, mut ub) = (App::default(), App::default());
        first_message(&mut a, &mut b, &mut ua, &mut ub, b"hello");
        let msg: Vec<u8> = (0..4096u32).map(|i| (i * 13 + 1) as u8).collect();
        let (calls, out) = (a.sockets.send_calls(), a.engine.stats().datagrams_out);
        send_bytes(&mut a, &b, 2, &msg, &mut ua, now());
        assert_eq!(a.engine.stats().datagrams_out - out, 3, "three segments");
        assert_eq!(a.sockets.send_calls() - calls, 1, "in one call");
        for _ in 0..50 {
            if ub.eager == 2 {
                break;
            }
            wait_for_datagram(&a, &b);
            pass(&mut b, now(), &mut ub);
        }
        assert_eq!(ub.eager, 2, "b has the message");
        assert!(ub.last == msg, "its bytes");
    }

    /// A wire has talked once a datagram went out or came in; a shm
    /// doorbell on its socket does not count (`Port` reads a socket that
    /// never talked less often).
    #[test]
    fn a_doorbell_is_not_talk() {
        let now = crate::progress::now_ns;
        let (mut a, mut b) = (wire(3), wire(4));
        let (mut ua, mut ub) = (App::default(), App::default());
        assert!(!a.talked() && !b.talked());
        let bell = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        bell.send_to(shm::DOORBELL, b.local_addr()).unwrap();
        wait_for_datagram(&a, &b);
        pass(&mut b, now(), &mut ub);
        assert!(!b.talked(), "a doorbell read");
        first_message(&mut a, &mut b, &mut ua, &mut ub, b"hi");
        assert!(a.talked() && b.talked());
    }

    /// A process that talked to a remote peer once polls as quietly as
    /// one that never did once the exchange settled (`Port::quiet_until`
    /// asks this): while its send waits for the ACK, until the engine's
    /// next timer; afterwards, until the socket's turn only.
    #[test]
    fn a_wire_that_talked_goes_quiet_once_the_exchange_settled() {
        let (mut a, mut b) = (wire(1), wire(2));
        assert_eq!(a.quiet_until(), u64::MAX, "never used: no timers");
        let (mut ua, mut ub) = (App::default(), App::default());
        send_bytes(&mut a, &b, 1, b"hello", &mut ua, 0);
        let t = a.quiet_until();
        assert!(
            t > 0 && t < u64::MAX,
            "a send in flight: quiet until its timer, not {t}"
        );
        assert_eq!(Some(t), a.engine.poll_timeout());
        // Virtual time, a millisecond a round (past the ACK delay), over
        // real sockets on loopback.
        let mut now = 0;
        for _ in 0..100 {
            now += 1_000_000;
            pass(&mut b, now, &mut ub);
            pass(&mut a, now, &mut ua);
            if (ub.eager, ua.sent) == (1, 1) && !a.has_unacked() && !b.has_unacked() {
                break;
            }
            // A timer due by the next round moves things on without a
            // datagram; otherwise one is on its way.
            if a.quiet_until().min(b.quiet_until()) > now + 1_000_000 {
                wait_for_datagram(&a, &b);
            }
        }
        assert_eq!((ub.eager, ua.sent), (1, 1), "delivered and acknowledged");
        for (w, who) in [(&a, "sender"), (&b, "receiver")] {
            assert!(w.quiet_until() > now, "the {who}, settled, has nothing due");
        }
    }
}
