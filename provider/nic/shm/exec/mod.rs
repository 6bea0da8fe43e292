//! The shm wire's executor: the protocol machine (`machine/`) run against
//! a `Port` (real mailboxes, or the tests' plain memory). It routes peers
//! to rings, polls the rings of our mailbox and hands their frames to the
//! machine, does the machine's actions in order and feeds their results
//! back at once, publishes what the machine offers while rings have room,
//! checks on peers' liveness, rings doorbells, and implements
//! `nic::wire::Wire` for the endpoint. The receive side (polling the
//! rings, handing their messages on) is `recv.rs`.
//!
//! Nothing here decides anything about the protocol; nothing here touches
//! memory other than through the port.

#![forbid(unsafe_code)]

mod recv;

use super::choice::{CopyOrPull, Way};
use super::frame::Frame;
use super::machine;
use super::machine::{Action, EagerStep, Machine, PeerIx, RingView};
use super::mailbox::{SlotHead, LINE_PAYLOAD};
use super::port::{Claim, MailboxPort, Port};
use super::ShmConfig;
use super::{ShmCredit, ShmStats};
use crate::ffi::{FI_EHOSTUNREACH, FI_LOG_EP_CTRL, FI_LOG_EP_DATA};
use crate::hash::KeyedState;
use crate::nic::fabreq::NOBODY;
use crate::nic::iov::IovSource;
use crate::nic::wire::{Credit, Held, OpId, SendFlags, SendOp, Sent, Upcall, Wire, WireEvent, WireKind};
use crate::proto::MemRanges;
use crate::proto::{MsgHdr, RecvSink, SendSource};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

/// Messages one `progress` takes from the rings at most, so that one call
/// stays short under a flood.
pub(in crate::nic::shm) const BATCH: usize = 32;
/// How soon progress must come back for a doorbell the socket refused.
const BELL_RETRY_NS: u64 = 50_000;
/// Rendezvous receives timed at once (`Exec::pulls`).
const TIMED_PULLS: usize = 8;

/// What became of an eager send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EagerOutcome {
    /// In the peer's ring: complete.
    Done,
    /// Completes later (`SendDone`/`SendFailed` for its op).
    Pending,
    /// The peer's loan would not cover it: send it by rendezvous.
    NoCredit,
}

pub(crate) struct Exec<P: Port> {
    me: SocketAddr,
    local_ips: Vec<IpAddr>,
    pub(crate) port: P,
    pub(crate) m: Machine,
    /// Per peer address: our ring in its mailbox, or `None` (not local,
    /// or no mailbox: UDP). The decision sticks, so messages to one peer
    /// stay on one wire, hence in order, until the peer goes away.
    routes: HashMap<SocketAddr, Option<PeerIx>, KeyedState>,
    /// Where the next pass over the machine's active rings starts (fair
    /// among peers).
    next_ring: usize,
    claims: Vec<Claim>,
    /// Peers whose sleeping receiver wants a doorbell.
    pub bells: Vec<SocketAddr>,
    /// Doorbells rung (the machine counts the rest; see `stats`).
    doorbells: u64,
    /// The peer `reaches` just routed, for the `send` that follows it
    /// (one route lookup per send, not two).
    routed: Option<(SocketAddr, PeerIx)>,
    /// The last peer `route` decided (our ring, or `None`: UDP): a stream
    /// of sends to one peer hashes its address once, and a UDP peer's
    /// sends ask twice (`send_now`, then `Port::send`) for one hash.
    /// Cleared with its ring's entry in `routes`.
    last_route: Option<(SocketAddr, Option<PeerIx>)>,
    /// Bumped whenever a peer is forgotten: a `PeerIx` that `route_ref`
    /// gave is good while this stays (`routes_gen`).
    routes_gen: u64,
    /// Peers found gone with frames of theirs still unread in our
    /// mailbox: forgotten at the next check whatever is left then
    /// (`check_peers`).
    going: smallvec::SmallVec<[PeerIx; 2]>,
    /// Peers `connect_ahead` connected.
    ahead: usize,
    /// `connect_ahead` met more local peers than it takes: the peers it
    /// connected to need not connect to us.
    crowded: bool,
    /// `connect_ahead` warms pulls from the peers it connects to: we may
    /// pull (FI_GNIX_CMA), and the kernel did not refuse it.
    warm_pulls: bool,
    /// A send went straight into a ring since the last progress pass: the
    /// next one is the second of a burst (a window of MPI_Isend), not an
    /// answer the application waited for (a ping-pong).
    sent_since_pass: bool,
    /// What copies and pulls cost here, and the longest message we want
    /// copied through our rings (`choice.rs`).
    choice: CopyOrPull,
    /// Rendezvous receives being timed: (op, length, when accepted).
    pulls: Vec<(OpId, usize, u64)>,
    /// Receive passes so far (`progress`, `take_arrivals`, `take_left`).
    pass: u64,
    /// The message the endpoint left in its slot (`Take::Later`).
    left: Option<Left>,
    /// `ShmStats::left`, `ShmStats::left_kept`.
    left_count: u64,
    left_kept: u64,
}

/// A message left in its slot: the head of `ring`, left by pass `pass`
/// and by `times` passes in a row. (Its ring cannot move past it: the
/// next slot of `ring` is this message until it is taken, which `mark`,
/// the ring's `Machine::taken_mark` then, tells.) Or, once such a
/// message was kept after all (`keeping`), the ring whose messages are
/// coming faster than their receives: the ones behind it are kept
/// without waiting, while each pass keeps one.
#[derive(Clone, Copy, Debug)]
pub(super) struct Left {
    ring: usize,
    pass: u64,
    times: u32,
    keeping: bool,
    mark: (u64, u64),
}

/// Passes in a row that may leave one message in its slot before the
/// next takes it in, receive or not: what bounds the wait of a peek, a
/// sleeper about to sleep, and the ring behind it.
pub(in crate::nic::shm) const LEAVE_PASSES: u32 = 2;

/// Spanning messages longer than this are copied into a ring with
/// streaming stores (`publish_timed`), shorter ones plainly. At 12 KiB the
/// two cost the same on the EPYC guest of 2026-12-05 (a two-thread round
/// trip of copies 3.5-3.7 us plain, 3.6-5.0 streamed), and the streamed
/// copy out, read from memory, left copies of 12 KiB short of beating a
/// pull's floor: `fi_pingpong -S all` ran 12 KiB at 4.00 us one-way
/// against 1.75-2.25 with plain copies. From 24 KiB on streaming saves a
/// fifth (`bench/README.md`, "Copies into a ring that stream past the
/// cache").
const STREAM_MIN: usize = 16 << 10;

impl Exec<MailboxPort> {
    /// The mailbox of the endpoint at `me`; `Err` if it cannot be made
    /// (the endpoint then uses UDP for everyone).
    pub fn new(me: SocketAddr, cfg: ShmConfig, seed: u64) -> std::io::Result<Self> {
        let port = MailboxPort::new(me, cfg.geo, cfg.loan)?;
        let geo = port.geometry();
        let m = Machine::new(
            machine::Config {
                payload_max: geo.payload(),
                span: geo.span,
                nrings: geo.nrings,
                loan: cfg.loan,
                cma: cfg.cma,
                rndv_threshold: usize::MAX,
            },
            seed,
        );
        let mut e = Exec::with_port(me, cfg.local_ips, port, m, seed);
        if cfg.cma {
            // Nothing is timed yet, so `copy_max` stays as it is; told to
            // the producers all the same if it did not.
            if let Some(floor) = super::cma::pull_floor() {
                if e.choice.set_pull_floor(floor) {
                    e.port.set_copy_max(e.choice.copy_max());
                }
            }
        }
        Ok(e)
    }
}

impl<P: Port> Exec<P> {
    pub fn with_port(me: SocketAddr, local_ips: Vec<IpAddr>, port: P, m: Machine, seed: u64) -> Exec<P> {
        let cma = m.cma();
        let choice = CopyOrPull::new(m.payload_max());
        let mut e = Exec {
            me,
            local_ips,
            port,
            m,
            routes: HashMap::with_hasher(KeyedState(seed ^ 4)),
            next_ring: 0,
            claims: Vec::new(),
            bells: Vec::new(),
            doorbells: 0,
            routed: None,
            last_route: None,
            routes_gen: 0,
            going: smallvec::SmallVec::new(),
            ahead: 0,
            crowded: false,
            warm_pulls: cma,
            sent_since_pass: false,
            choice,
            pulls: Vec::new(),
            pass: 0,
            left: None,
            left_count: 0,
            left_kept: 0,
        };
        if !cma {
            e.cannot_pull();
        }
        e
    }

    #[cfg(test)]
    pub fn me(&self) -> SocketAddr {
        self.me
    }

    /// Messages longer than `t` go by rendezvous (FI_GNIX_RNDV_THRESHOLD
    /// applies here too, below the slot size).
    pub fn set_rndv_threshold(&mut self, t: usize) {
        self.m.set_rndv_threshold(t);
    }

    /// What this endpoint knows of the ways of spanning messages.
    #[cfg(test)]
    pub fn choice(&self) -> &CopyOrPull {
        &self.choice
    }

    /// What the wire carried.
    pub fn stats(&self) -> ShmStats {
        ShmStats {
            doorbells: self.doorbells,
            left: self.left_count,
            left_kept: self.left_kept,
            ..self.m.stats
        }
    }

    /// Whether any local peer talks to us over shm, or we to it (the
    /// endpoint then polls its UDP socket less eagerly).
    pub fn in_use(&self) -> bool {
        self.m.in_use()
    }

    /// Whether the endpoint at `addr` is reached over shm (deciding it on
    /// first use).
    pub fn reaches(&mut self, addr: SocketAddr) -> bool {
        let r = self.route(addr);
        self.routed = r.map(|ix| (addr, ix));
        r.is_some()
    }

    /// Longest one-sided request sent in one message to `addr`
    /// (`Machine::request_max_to`), if this wire reaches it (`reaches`,
    /// whose route the send that follows takes).
    pub fn eager_max_to(&mut self, addr: SocketAddr) -> Option<usize> {
        if !self.reaches(addr) {
            return None;
        }
        let (_, ix) = self.routed?;
        Some(self.m.request_max_to(ix))
    }

    /// Connects to local peers ahead of their first message (the AV
    /// learned their addresses): the mapping, the ring claim and the
    /// ring's pages are then paid for before the application times
    /// anything, as libfabric's shm maps its peers at `fi_av_insert`. At
    /// most a quarter of a mailbox's rings' worth of peers per endpoint,
    /// so that a large job's idle pairs do not take every ring (the rest
    /// connect on first use). A peer without a mailbox yet is decided on
    /// first use, as before: nothing is remembered for it here.
    pub fn connect_ahead(&mut self, addrs: &[SocketAddr]) {
        let ahead = self.ahead;
        for &addr in addrs {
            if addr == self.me || self.routes.contains_key(&addr) {
                continue;
            }
            if self.ahead >= self.m.nrings().div_ceil(4) {
                self.crowded = true;
                break;
            }
            if let Some(ix) = self.connect(addr) {
                self.ahead += 1;
                self.routes.insert(addr, Some(ix));
                // The first pull from a process costs the kernel extra
                // (`cma::cma_warm_peer`): paid here, not in the first
                // rendezvous the application times. A refusal is left for
                // that first pull to learn, as without this, and not asked
                // again of the next peer.
                if self.warm_pulls && matches!(self.port.warm_pulls(ix), Err(machine::CmaErr::Refused(_))) {
                    self.warm_pulls = false;
                }
            }
        }
        // The rings of peers that connected to us first are taken, and
        // their pages mapped, now too: this is no data call.
        self.take_claims();
        self.port.warm();
        // A peer we connected to will likely send to us too, claiming a
        // ring of ours once it learns our address: a spare for each. In a
        // crowd (more local peers than we connect to ahead, and so as
        // many for each of them) it may well not, and a spare it does not
        // claim is a ring's pages for nothing: one, as a guess.
        if self.ahead > ahead {
            self.port.warm_spares(if self.crowded { 1 } else { self.ahead - ahead });
        }
    }

    /// Our ring for `addr`, deciding on first use: a local address and a
    /// live mailbox with a free ring. A peer that closed (or restarted at
    /// this address) is noticed here, on the next send, not only at the
    /// next liveness check.
    #[inline(always)]
    pub fn route(&mut self, addr: SocketAddr) -> Option<PeerIx> {
        self.route_ref(&addr)
    }

    /// `route` of an address the caller keeps: the send path's, which
    /// then copies no address (a copy stored in pieces and loaded whole
    /// waits for every store before it, the ring's included).
    #[inline(always)]
    pub fn route_ref(&mut self, addr: &SocketAddr) -> Option<PeerIx> {
        if let Some((a, r)) = &self.last_route {
            // A closed owner falls through: `forget` clears this. (A peer
            // decided to be UDP's stays so, as in `routes`.)
            if a == addr && r.is_none_or(|ix| !self.port.owner_closed(ix)) {
                return *r;
            }
        }
        self.route_slow(*addr)
    }

    /// Changes whenever a peer index `route_ref` gave may have lost its
    /// meaning (a peer was forgotten).
    pub(crate) fn routes_gen(&self) -> u64 {
        self.routes_gen
    }

    #[inline(never)]
    fn route_slow(&mut self, addr: SocketAddr) -> Option<PeerIx> {
        if let Some(&r) = self.routes.get(&addr) {
            match r {
                Some(ix) if self.port.owner_closed(ix) => self.forget(ix),
                r => {
                    self.last_route = Some((addr, r));
                    return r;
                }
            }
        }
        let r = self.connect(addr);
        self.routes.insert(addr, r);
        self.last_route = Some((addr, r));
        r
    }

    fn connect(&mut self, addr: SocketAddr) -> Option<PeerIx> {
        if !self.local_ips.contains(&addr.ip()) && !addr.ip().is_loopback() {
            return None;
        }
        let c = self.port.connect(addr)?;
        self.m.connect_ring(c, addr);
        let ix = c.ix;
        crate::info!(FI_LOG_EP_CTRL, "{} -> {}: shm wire", self.me, addr);
        Some(ix)
    }

    /// Drops our ring in a peer's mailbox that went away: its sends in
    /// flight fail (those it took out of its ring before it went are
    /// complete); the next message to that address decides afresh.
    pub(crate) fn forget(&mut self, ix: PeerIx) {
        self.routes_gen += 1;
        self.going.retain(|g| *g != ix);
        if self.last_route.is_some_and(|(_, i)| i == Some(ix)) {
            self.last_route = None;
        }
        let Some(addr) = self.m.peer_addr(ix) else { return };
        crate::warn!(FI_LOG_EP_DATA, "shm peer {} went away", addr);
        self.settle_deliveries(ix);
        self.m.peer_gone(ix);
        self.port.disconnect(ix);
        self.routes.remove(&addr);
    }

    /// Sends to peer `ix` that wait for delivery and whose slots the peer
    /// took: complete.
    fn settle_deliveries(&mut self, ix: PeerIx) {
        while let Some(pos) = self.m.delivery_front(ix) {
            if !self.port.consumed(ix, pos) {
                break;
            }
            self.m.delivered(ix);
        }
    }

    fn bell(&mut self, ix: PeerIx) {
        if let Some(a) = self.m.peer_addr(ix) {
            self.bells.push(a);
        }
    }

    /// What an eager send of `len` bytes sees of peer `ix`'s ring: `room`,
    /// and the credit word, read only when the credit last read does not
    /// cover the send.
    #[inline]
    fn ring_view(&self, ix: PeerIx, room: bool, len: usize, inject: bool) -> RingView {
        RingView {
            room,
            freed: (!self.m.credit_known_enough(ix, len, inject)).then(|| self.port.freed(ix)),
        }
    }

    /// Publishes an eager message's slot (`head`, payload from `src`) in
    /// peer `ix`'s ring, and rings its bell if its owner sleeps. False:
    /// the slot was taken after all, and nothing was written.
    #[inline]
    fn publish<S: SendSource + ?Sized>(&mut self, ix: PeerIx, head: &SlotHead, src: &S) -> bool {
        if self.choice.chosen(head.len) {
            return self.publish_timed(ix, head, src);
        }
        self.publish_untimed(ix, head, src)
    }

    /// `publish` of a message longer than a slot: its header says what
    /// the copy into the ring took, for the owner's choice (`choice.rs`:
    /// the owner weighs what copies into its own ring cost, which ours
    /// into other rings need not tell). Apart, so that the small messages'
    /// path stays as short as it was. Beyond `STREAM_MIN`, copied with
    /// streaming stores (`nic::stream`: the lines are the owner's, and
    /// taking each from its core first made this copy the dearest part
    /// of the copy way).
    #[inline(never)]
    fn publish_timed<S: SendSource + ?Sized>(&mut self, ix: PeerIx, head: &SlotHead, src: &S) -> bool {
        let fill = |dst: &mut [u8]| {
            if dst.len() > STREAM_MIN {
                src.stream_at(0, dst)
            } else {
                src.read_at(0, dst)
            }
        };
        let posted = self
            .port
            .post_stamped(ix, head.len, fill, |ns| Frame::stamped(head, ns));
        self.published(ix, posted)
    }

    #[inline(always)]
    fn publish_untimed<S: SendSource + ?Sized>(&mut self, ix: PeerIx, head: &SlotHead, src: &S) -> bool {
        let posted = self.port.post(ix, head, |dst| src.read_at(0, dst));
        self.published(ix, posted)
    }

    /// What a `Port::post` to peer `ix` answered: whether the slot went
    /// out, its owner's doorbell rung if it sleeps.
    #[inline(always)]
    fn published(&mut self, ix: PeerIx, posted: Option<bool>) -> bool {
        let Some(sleeping) = posted else {
            return false;
        };
        if sleeping {
            self.bell(ix);
        }
        true
    }

    /// After a post of `len` bytes to peer `ix`: a message past the
    /// slot's first line has the lines of the next slot that it would
    /// need and no message wrote there yet fetched for writing now, while
    /// the sender waits for an answer, rather than by the next send's
    /// stores (each slot's first transfer of a size; bench/README.md,
    /// "The next slot's lines fetched ahead" and "Cold lines are a
    /// slot's, not the ring's"). The 8-byte path passes by.
    #[inline(always)]
    fn body_ahead(&mut self, ix: PeerIx, len: usize) {
        if len > LINE_PAYLOAD {
            self.port.post_body_ahead(ix, len);
        }
    }

    /// An eager send as operation `op` (`Machine::eager_fits`): straight
    /// from `src` into the peer's ring when it has room and nothing waits
    /// ahead, else queued with a copy.
    pub(crate) fn eager(
        &mut self,
        ix: PeerIx,
        op: OpId,
        hdr: &MsgHdr,
        src: &dyn SendSource,
        inject: bool,
        delivery: bool,
    ) -> EagerOutcome {
        let view = self.ring_view(ix, self.port.room(ix, src.len()), src.len(), inject);
        match self.m.send_eager(ix, op, hdr, src, inject, delivery, view) {
            EagerStep::Now(head) => {
                if !self.publish(ix, &head, src) {
                    // The consumer took the free slot back (it cannot,
                    // unless it breaks the rules): wait like any other.
                    self.m.eager_queue(ix, op, hdr, src, delivery);
                    return EagerOutcome::Pending;
                }
                self.body_ahead(ix, src.len());
                if self.m.eager_posted(ix, op, src.len(), delivery) {
                    EagerOutcome::Done
                } else {
                    EagerOutcome::Pending
                }
            }
            EagerStep::Queued => EagerOutcome::Pending,
            EagerStep::NoCredit => EagerOutcome::NoCredit,
        }
    }

    /// A send that ends in this call, so it needs no operation of its own
    /// (no `FabReq`, no `TxDesc`): eager, not waiting for delivery, into
    /// the ring of a local peer with room and nothing queued ahead, on
    /// credit it has. False: not such a send, and nothing was sent
    /// (`Wire::send` takes it).
    pub(crate) fn send_now<S: SendSource + ?Sized>(
        &mut self,
        peer: &SocketAddr,
        hdr: &MsgHdr,
        flags: SendFlags,
        src: &S,
    ) -> bool {
        match self.route_ref(peer) {
            Some(ix) => self.send_to(ix, hdr, flags, src),
            None => false,
        }
    }

    /// `send_now` to the peer of our ring `ix` (`route_ref`'s answer, which
    /// the caller may keep while `routes_gen` stays). False also when its
    /// owner closed: `route_ref` finds that out and forgets the peer.
    pub(crate) fn send_to<S: SendSource + ?Sized>(
        &mut self,
        ix: PeerIx,
        hdr: &MsgHdr,
        flags: SendFlags,
        src: &S,
    ) -> bool {
        let len = src.len();
        // One whose way is chosen (`goes_eager`) is chosen once: `submit`
        // does it.
        if flags.delivery
            || !self.m.eager_fits(len, flags.inject)
            || self.way_chosen(len, flags.inject)
            || self.port.owner_closed(ix)
        {
            return false;
        }
        // Room is the port's to tell: `post` finds the next slot taken.
        let port = &self.port;
        let Some(head) = self.m.eager_now(ix, hdr, len, flags.inject, || port.freed(ix)) else {
            return false;
        };
        if !self.publish(ix, &head, src) {
            return false;
        }
        // In a burst, the slot after the next is fetched for writing while
        // this send finishes and the next is made, so the sender's stores
        // do not wait for it there. Not for the first send after a pass
        // (a ping-pong's): its consumer, caught up, would only fetch the
        // line back before the message came (bench/README.md, "Open MPI's
        // message rate against its floors").
        if self.sent_since_pass {
            self.port.post_ahead(ix);
        }
        self.body_ahead(ix, len);
        self.sent_since_pass = true;
        let done = self.m.eager_posted(ix, NOBODY, len, false);
        debug_assert!(done, "no delivery asked");
        // As `submit` does after any send: what the machine asks (its
        // events wait for the next progress, which has the upcall).
        self.run();
        self.ring_bells();
        true
    }

    /// A rendezvous send of `src` (read where `addrs` say) as `op`.
    pub(crate) fn rendezvous(
        &mut self,
        ix: PeerIx,
        op: OpId,
        hdr: &MsgHdr,
        src: Box<dyn SendSource>,
        addrs: MemRanges,
    ) -> Result<(), i32> {
        if let Err(e) = self.m.send_rts(ix, op, hdr, src, addrs) {
            crate::warn!(FI_LOG_EP_DATA, "shm: too many iovs for an RTS");
            return Err(e);
        }
        self.drain(ix);
        Ok(())
    }

    /// Publishes what the machine has for peer `ix` while its ring has
    /// room (and the peer's credit covers it).
    fn drain(&mut self, ix: PeerIx) {
        loop {
            let port = &self.port;
            let Some(o) = self.m.poll_post(ix, || port.freed(ix)) else {
                break;
            };
            let next = o.next;
            let Some(sleeping) = self.port.post(ix, &o.head, |dst| o.bytes.fill(dst)) else {
                break;
            };
            self.m.posted(ix, next);
            if sleeping {
                self.bell(ix);
            }
        }
    }

    /// A `way` of `len` bytes that began at `t0` is over: what it cost
    /// goes into the choice, which our producers learn when it changes.
    #[cold]
    fn learn(&mut self, way: Way, len: usize, t0: u64) {
        // A clock that says 0 is the simulated host's: nothing to learn.
        if t0 == 0 {
            return;
        }
        let ns = self.port.now().saturating_sub(t0);
        self.record(way, len, ns);
    }

    /// A `way` of `len` bytes took `ns`: into the choice, which our
    /// producers learn when it changes.
    #[cold]
    fn record(&mut self, way: Way, len: usize, ns: u64) {
        if self.choice.record(way, len, ns) {
            let max = self.choice.copy_max();
            crate::debug!(
                FI_LOG_EP_DATA,
                "shm: copying messages of up to {} bytes through our rings ({:?})",
                max,
                self.choice
            );
            self.port.set_copy_max(max);
        }
    }

    /// We cannot read peers' memory: our senders are asked to copy
    /// everything our rings hold (a rendezvous would be pushed through
    /// them after a round trip).
    #[cold]
    fn cannot_pull(&mut self) {
        if self.choice.no_pulls() {
            self.port.set_copy_max(self.choice.copy_max());
        }
    }

    /// Whether a send of `len` bytes is copied or pulled as its peer
    /// asks (`goes_eager`): one that spans slots, unless an inject (its
    /// buffer is the application's again at once: always copied).
    #[inline]
    fn way_chosen(&self, len: usize, inject: bool) -> bool {
        !inject && self.choice.chosen(len)
    }

    /// Whether a send of `len` bytes to peer `ix` goes eagerly: the
    /// machine's limits (`eager_fits`), and for one that spans slots the
    /// peer's wish (`Machine::copies_to`); an inject always when it fits.
    fn goes_eager(&mut self, ix: PeerIx, len: usize, inject: bool) -> bool {
        if !self.m.eager_fits(len, inject) {
            return false;
        }
        if !self.way_chosen(len, inject) {
            return true;
        }
        let copy_max = self.port.copy_max(ix);
        self.m.copies_to(ix, len, copy_max)
    }

    /// A message's credit goes back to its producer.
    fn free_credit(&mut self, c: ShmCredit) {
        if let Some(g) = self.m.free_credit(c) {
            self.port.give_credit(g.ring, g.freed);
        }
    }

    /// Does what the machine asks, feeding results back, until it asks
    /// nothing more. (Called after every input: the check that nothing
    /// is asked stays in the caller.)
    #[inline]
    pub(crate) fn run(&mut self) {
        if self.m.has_actions() {
            self.run_actions();
        }
    }

    fn run_actions(&mut self) {
        while let Some(a) = self.m.poll_action() {
            match a {
                Action::Post { to, frame } => match self.route(to) {
                    Some(ix) => {
                        self.m.enqueue(ix, frame);
                        self.drain(ix);
                    }
                    None => {
                        crate::warn!(FI_LOG_EP_DATA, "shm: cannot answer {} (its mailbox is gone)", to);
                        self.m.unreachable(to);
                    }
                },
                Action::CmaRead {
                    token,
                    pid,
                    local,
                    remote,
                } => {
                    let r = self.port.cma_read(pid, &local, &remote);
                    if let Err(e) = r {
                        crate::info!(FI_LOG_EP_DATA, "shm: reading from process {}: {:?}", pid, e);
                        if matches!(e, machine::CmaErr::Refused(_)) {
                            self.cannot_pull();
                        }
                    }
                    self.m.cma_done(token, r);
                }
                Action::CmaWrite {
                    token,
                    peer,
                    grant,
                    rid,
                    local,
                    remote,
                } => {
                    let r = self.port.write_granted(peer, grant, rid, &local, &remote);
                    self.m.cma_done(token, r);
                }
                Action::ArmGrant { ring, rid } => {
                    let g = self.port.arm_grant(ring, rid);
                    self.m.grant_armed(ring, rid, g);
                }
                Action::RevokeGrant { ring, grant, rid } => self.port.revoke_grant(ring, grant, rid),
                Action::FreeRing { ring } => self.port.free_ring(ring),
            }
        }
    }

    /// A pass for the rings only (`Port::take_arrivals`): the rings
    /// claimed since the last pass, their messages, and what those
    /// finished; the machine's other steps wait for the next whole pass.
    pub(crate) fn take_arrivals(&mut self, up: &mut dyn Upcall) {
        self.sent_since_pass = false;
        self.next_pass();
        self.take_claims();
        self.receive(up);
        self.settle(up);
    }

    /// A receive pass begins. The record of a message left goes once no
    /// pass is looking at it any more (taken, or its ring gone): every
    /// pass that finds it leaves it again, or takes it. So the messages
    /// of a receiver that leaves one now and then do not pay for a record
    /// that says nothing (`any_ready`, `quiet_until` read it).
    #[inline(always)]
    fn next_pass(&mut self) {
        self.pass += 1;
        if self.left.is_some() {
            self.expire_left();
        }
    }

    #[cold]
    #[inline(never)]
    fn expire_left(&mut self) {
        if self.left.is_some_and(|l| l.pass + 1 < self.pass) {
            self.left = None;
        }
    }

    /// The message a pass left in its slot (`Take::Later`), taken in now,
    /// by a receive or kept: a peek must find every message that came.
    pub(crate) fn take_left(&mut self, up: &mut dyn Upcall) {
        let Some(l) = self.live_left(None).filter(|l| !l.keeping) else {
            return;
        };
        // A pass for the rings in which no message may be left: the one
        // left counts as left enough times by the last pass, and another
        // ring's may not be left while it is.
        self.left = Some(Left {
            pass: self.pass,
            times: LEAVE_PASSES,
            ..l
        });
        self.take_arrivals(up);
    }

    /// Publishes what waits for ring space, completes deliveries the peers
    /// took, and checks on peers every `CHECK_EVERY_NS`.
    pub(crate) fn pump(&mut self, now: u64) {
        if self.m.wants_post() {
            for ix in self.m.peer_ixs().collect::<smallvec::SmallVec<[PeerIx; 8]>>() {
                self.drain(ix);
            }
        }
        if self.m.delivering() > 0 {
            for ix in self.m.peer_ixs().collect::<smallvec::SmallVec<[PeerIx; 8]>>() {
                self.settle_deliveries(ix);
            }
        }
        if self.m.check_due(now) {
            self.check_peers();
        }
        self.m.expire_grant_waits(now);
        self.run();
    }

    /// Peers that died or closed: our sends to them fail, their routes are
    /// forgotten (a restarted peer gets a fresh ring); rings they claimed
    /// in our mailbox are freed once drained (a dead producer's receives
    /// fail); banned rings are freed once their producer let go.
    fn check_peers(&mut self) {
        for ix in self.m.peer_ixs().collect::<Vec<_>>() {
            if !self.port.owner_gone(ix) {
                continue;
            }
            // What it sent before it went (a FIN for one of our sends) is
            // read first, by the passes until the next check: it may have
            // answered and closed within one of our passes.
            if !self.going.contains(&ix) && self.unread_from(ix) {
                self.going.push(ix);
                continue;
            }
            self.forget(ix);
        }
        for r in self.m.banned().to_vec() {
            if !self.port.sender_alive(r) || self.port.ring_closed(r) {
                self.m.unban(r);
            }
        }
        for r in self.m.active().to_vec() {
            let drained = self.port.peek(r).is_none();
            let dead = !self.port.sender_alive(r);
            if drained && (dead || self.port.ring_closed(r)) {
                self.m.retire(r, dead);
            }
        }
        self.next_ring = 0;
        self.run();
    }

    /// Whether a ring of peer `ix`'s in our mailbox holds frames we have
    /// not read yet.
    fn unread_from(&self, ix: PeerIx) -> bool {
        let Some(addr) = self.m.peer_addr(ix) else {
            return false;
        };
        self.m
            .active()
            .iter()
            .any(|&r| self.m.ring_peer(r) == Some(&addr) && self.port.ready(r))
    }

    /// Doorbells for sleeping local peers, from the wire's own socket. One
    /// the socket cannot take now stays queued (a sleeper must not miss
    /// it); `next_deadline` brings us back soon.
    #[inline]
    fn ring_bells(&mut self) {
        if !self.bells.is_empty() {
            self.ring_bells_now();
        }
    }

    fn ring_bells_now(&mut self) {
        let mut bells = std::mem::take(&mut self.bells);
        bells.retain(|&a| match self.port.ring_bell(a) {
            Ok(()) => {
                self.doorbells += 1;
                false
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => true,
            Err(e) => {
                crate::debug!(FI_LOG_EP_DATA, "doorbell to {}: {}", a, e);
                false
            }
        });
        self.bells = bells;
    }

    /// Hands the machine's events to the endpoint. Whether there were any.
    #[inline(always)]
    fn deliver(&mut self, up: &mut dyn Upcall) -> bool {
        if !self.m.has_events() {
            return false;
        }
        let mut any = false;
        while let Some(e) = self.m.poll_event() {
            any = true;
            if !self.pulls.is_empty() {
                self.pull_ended(&e);
            }
            up.event(e);
        }
        any
    }

    /// Times rendezvous receive `op` of `len` bytes from now to its end
    /// (`pull_ended`). The oldest timing gives way to it when
    /// `TIMED_PULLS` run: one whose end never came (its receive went
    /// another way) does not hold a place for good.
    #[cold]
    fn time_pull(&mut self, op: OpId, len: usize) {
        if self.pulls.len() == TIMED_PULLS {
            self.pulls.remove(0);
        }
        self.pulls.push((op, len, self.port.now()));
    }

    /// A timed rendezvous receive ended (`receive`): a pull's cost, if it
    /// succeeded.
    #[cold]
    fn pull_ended(&mut self, e: &WireEvent) {
        let (WireEvent::RecvDone { op, .. } | WireEvent::RecvFailed { op, .. }) = e else {
            return;
        };
        let Some(k) = self.pulls.iter().position(|p| p.0 == *op) else {
            return;
        };
        let (_, len, t0) = self.pulls.remove(k);
        if matches!(e, WireEvent::RecvDone { .. }) {
            self.learn(Way::Pull, len, t0);
        }
    }

    /// `Wire::send` from any source (the tests' simulated memory too).
    pub(crate) fn submit<S: SendSource + 'static>(
        &mut self,
        s: SendOp,
        src: S,
        up: &mut dyn Upcall,
    ) -> Result<Sent, i32> {
        let SendOp { peer, op, hdr, flags } = s;
        let ix = match self.routed.take() {
            Some((p, ix)) if p == peer => Some(ix),
            _ => self.route(peer),
        };
        let Some(ix) = ix else {
            self.settle(up);
            return Err(-FI_EHOSTUNREACH);
        };
        let mut r = None;
        if self.goes_eager(ix, src.len(), flags.inject) {
            r = match self.eager(ix, op, &hdr, &src, flags.inject, flags.delivery) {
                EagerOutcome::Done => Some(Ok(Sent::Done)),
                EagerOutcome::Pending => Some(Ok(Sent::Pending)),
                // The peer holds its share of unexpected messages: this
                // one waits in our memory until a receive takes it.
                EagerOutcome::NoCredit => None,
            };
        }
        let r = r.unwrap_or_else(|| {
            let (src, addrs) = rndv_source(src, flags.inject);
            self.rendezvous(ix, op, &hdr, src, addrs)
                .map(|()| Sent::Pending)
                .map_err(|e| -e)
        });
        self.settle(up);
        r
    }

    /// After an input: actions, events, doorbells.
    #[inline(always)]
    fn settle(&mut self, up: &mut dyn Upcall) -> bool {
        self.run();
        let any = self.deliver(up);
        self.ring_bells();
        any
    }
}

/// The bytes a rendezvous send is read from, and where they are: the
/// application's buffers, or a copy when the send's buffer is the
/// application's again at once (inject) or has no address to give.
fn rndv_source<S: SendSource + 'static>(src: S, inject: bool) -> (Box<dyn SendSource>, MemRanges) {
    if !inject {
        if let Some(r) = src.ranges() {
            return (Box::new(src), r);
        }
    }
    let mut v = vec![0u8; src.len()];
    src.read_at(0, &mut v);
    // The vector's heap buffer stays where it is when the box moves.
    let r = v.ranges().expect("a vector has an address");
    (Box::new(v), r)
}

impl<P: Port> Wire for Exec<P> {
    fn kind(&self) -> WireKind {
        WireKind::Shm
    }

    fn send(&mut self, s: SendOp, src: IovSource, up: &mut dyn Upcall, _now: u64) -> Result<Sent, i32> {
        self.submit(s, src, up)
    }

    fn accept(
        &mut self,
        held: Held,
        op: OpId,
        sink: Box<dyn RecvSink>,
        ranges: MemRanges,
        up: &mut dyn Upcall,
        _now: u64,
    ) {
        self.m.accept(held.id, op, sink, ranges);
        self.settle(up);
    }

    fn discard(&mut self, held: Held, _now: u64) {
        self.m.discard(held.id);
        self.run();
        self.ring_bells();
    }

    /// The FIN carries the status: the sender's send fails with it.
    fn refuses(&self) -> bool {
        true
    }

    fn refuse(&mut self, held: Held, err: i32, _now: u64) {
        self.m.refuse(held.id, err);
        self.run();
        self.ring_bells();
    }

    fn give_back(&mut self, credit: Credit) {
        if let Credit::Shm(c) = credit {
            self.free_credit(c);
            self.run();
        }
    }

    fn cancel_recv(&mut self, op: OpId) -> bool {
        let ok = self.m.cancel(op);
        self.run();
        self.ring_bells();
        ok
    }

    fn progress(&mut self, now: u64, up: &mut dyn Upcall) -> bool {
        self.sent_since_pass = false;
        self.next_pass();
        self.port.disarm();
        self.take_claims();
        // The pass of an application waiting for a message, its every poll:
        // no ring has a slot, and neither the machine nor the doorbells
        // have anything to do (the quiet time the endpoint's polls go by
        // reaches past now). It ends here, after one look at each ring,
        // rather than after the whole pass's steps each found nothing
        // (bench/pollbench-callgrind with EMPTY=1).
        // (A message left by the last pass counts: this one looks again.)
        if !self.rings_ready() && self.quiet_until(now) > now {
            return false;
        }
        let mut late = false;
        loop {
            let mut any = self.receive(up);
            if !late {
                self.pump(now);
            }
            any |= self.settle(up);
            // Found nothing: look once more at the end of the pass. An
            // application polling an empty CQ finds a message here that
            // came during the pass rather than one whole poll later (the
            // rings are otherwise looked at once a poll, a third of the
            // way into it).
            if any || late || !self.any_ready() {
                return any;
            }
            late = true;
        }
    }

    fn next_deadline(&self, now: u64) -> Option<u64> {
        let bells = (!self.bells.is_empty()).then_some(now + BELL_RETRY_NS);
        match (self.m.next_deadline(now), bells) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn busy(&self) -> bool {
        self.m.owes()
    }

    fn eager_max(&self) -> usize {
        self.m.eager_max()
    }

    fn backlog(&self) -> usize {
        self.m.backlogged_untracked()
    }

    fn arm(&mut self) -> bool {
        self.port.arm(self.m.active())
    }

    fn stats_line(&self) -> String {
        format!("{:?}", self.stats())
    }
}

impl<P: Port> Drop for Exec<P> {
    /// No sender may write into our receives' buffers once we are gone:
    /// the application may free them as soon as the endpoint is closed.
    fn drop(&mut self) {
        self.m.close();
        self.run();
    }
}
