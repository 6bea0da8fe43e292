//! Test support: a seeded PRNG and a simulated network of engines in
//! virtual time, with a link that drops, duplicates, delays and reorders.

use super::{Engine, EngineConfig, Event, MsgBody, MsgHdr, Payload, Placement, RecvSink, SendSource, Transmit, TxOut};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

pub use crate::rng::SplitMix as Rng;

#[derive(Clone, Copy, Debug)]
pub struct Link {
    pub loss_pct: f64,
    pub dup_pct: f64,
    /// Base one-way latency.
    pub latency_ns: u64,
    /// Extra uniform random delay; anything larger than the spacing of
    /// datagrams reorders them.
    pub jitter_ns: u64,
    /// Time a datagram occupies the link per byte (0: infinite bandwidth).
    pub ns_per_kib: u64,
}

impl Link {
    pub fn clean() -> Link {
        Link {
            loss_pct: 0.0,
            dup_pct: 0.0,
            latency_ns: 10_000,
            jitter_ns: 0,
            ns_per_kib: 0,
        }
    }
    pub fn lossy(loss_pct: f64) -> Link {
        Link {
            loss_pct,
            dup_pct: 2.0,
            latency_ns: 10_000,
            jitter_ns: 20_000,
            ns_per_kib: 0,
        }
    }
}

pub struct Node {
    pub engine: Engine,
    pub addr: SocketAddr,
    /// Unplugged: everything to and from this node is lost.
    pub down: bool,
    /// Messages `Engine::handle_one` handed back, as the `Event::Msg`
    /// the general way would have queued (`poll_event` hands them out
    /// first: the engine hands one back only with no event queued).
    handed: VecDeque<Event>,
}

impl Node {
    /// The node's next event: what it was handed back, then the engine's.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.handed.pop_front().or_else(|| self.engine.poll_event())
    }

    /// One datagram, the way the endpoint hands a slot of one over
    /// (`Engine::handle_one`).
    fn take_one(&mut self, from: SocketAddr, bytes: &[u8], now: u64) {
        if let Some((hdr, payload)) = self.engine.handle_one(from, bytes, now) {
            self.handed.push_back(handed_msg(from, hdr, payload));
        }
    }
}

/// The event of a message `handle_one` handed back.
fn handed_msg(peer: SocketAddr, hdr: MsgHdr, payload: &[u8]) -> Event {
    Event::Msg {
        peer,
        hdr,
        body: MsgBody::Eager(Payload::from_slice(payload)),
    }
}

pub struct Sim {
    pub now: u64,
    pub nodes: Vec<Node>,
    pub link: Link,
    pub rng: Rng,
    queue: BinaryHeap<Reverse<InFlight>>,
    counter: u64,
    buf: Vec<u8>,
    /// Every datagram emitted, as (source node, destination, bytes), when recording.
    pub record: Option<Vec<(usize, SocketAddr, Vec<u8>)>>,
    /// Bytes of datagrams injected by `inject`, delivered like real ones.
    pub wire_free_at: Vec<u64>,
    /// Receive the way the endpoint does while it pulls rendezvous data:
    /// header apart, payload straight into the guessed region
    /// (`Engine::rdata_placement`), whether the guess is right or not.
    pub placed: bool,
    /// Datagrams due together from one sender to one node, of one size
    /// (the last may be shorter), arrive as one run (`Engine::handle_run`),
    /// the way GRO hands a peer's GSO run to the endpoint.
    pub gro: bool,
    /// A loss takes this many consecutive datagrams of its sender (a
    /// firewall dropping one GSO packet drops every datagram in it).
    pub burst: usize,
    burst_left: Vec<usize>,
    /// Most datagrams a node hands over per flush (0: no limit), the way a
    /// full socket buffer stops the endpoint: alternately by refusing a
    /// slot and by refusing a datagram already built.
    pub tx_cap: usize,
    flushes: u64,
    /// Drops the datagrams of node `src` to `to` for which it returns true
    /// (before the link's own loss): targeted losses.
    pub drop_if: Option<DropFilter>,
}

/// `Sim::drop_if`: (source node, destination, bytes) -> lose it.
pub type DropFilter = Box<dyn FnMut(usize, SocketAddr, &[u8]) -> bool>;

/// (arrival time, tie-break, destination node, source address, bytes)
type InFlight = (u64, u64, usize, SocketAddr, Vec<u8>);

pub fn addr(i: usize) -> SocketAddr {
    SocketAddr::from(([10, 0, 0, (i + 1) as u8], 7000 + i as u16))
}

pub fn test_config() -> EngineConfig {
    EngineConfig {
        max_datagram: 1472,
        rto_init_ns: 1_000_000,
        rto_min_ns: 200_000,
        rto_max_ns: 50_000_000,
        max_retrans: 30,
        peer_timeout_ns: 5_000_000_000,
        // Eager messages reassembled whole, as most tests expect them
        // (tests/eager.rs turns the held way on).
        eager_place_min: u64::MAX,
        ..EngineConfig::default()
    }
}

impl Sim {
    pub fn new(n: usize, cfg: EngineConfig, link: Link, seed: u64) -> Sim {
        let nodes = (0..n)
            .map(|i| Node {
                engine: Engine::seeded(cfg.clone(), addr(i), seed.wrapping_mul(31).wrapping_add(i as u64)),
                addr: addr(i),
                down: false,
                handed: VecDeque::new(),
            })
            .collect();
        Sim {
            now: 0,
            nodes,
            link,
            rng: Rng::new(seed ^ 0xD1CE),
            queue: BinaryHeap::new(),
            counter: 0,
            buf: vec![0u8; 70_000],
            record: None,
            wire_free_at: vec![0; n],
            placed: false,
            gro: true,
            burst: 1,
            burst_left: vec![0; n],
            tx_cap: 0,
            flushes: 0,
            drop_if: None,
        }
    }

    pub fn index_of(&self, a: SocketAddr) -> Option<usize> {
        self.nodes.iter().position(|n| n.addr == a)
    }

    /// Replaces node `i`'s engine with a fresh one at the same address.
    pub fn restart(&mut self, i: usize, cfg: EngineConfig, seed: u64) {
        self.nodes[i].engine = Engine::seeded(cfg, self.nodes[i].addr, seed);
    }

    pub fn eng(&mut self, i: usize) -> &mut Engine {
        &mut self.nodes[i].engine
    }

    /// Puts `bytes` on the wire from `from` to node `to`, subject to the link.
    pub fn inject(&mut self, from: SocketAddr, to: usize, bytes: Vec<u8>, delay: u64) {
        self.counter += 1;
        self.queue
            .push(Reverse((self.now + delay, self.counter, to, from, bytes)));
    }

    /// A datagram node `src` sends outside `flush` (`Engine::send_now`
    /// hands it to its caller), subject to the link like any other.
    pub fn emit_from(&mut self, src: usize, to: SocketAddr, bytes: &[u8]) {
        self.buf[..bytes.len()].copy_from_slice(bytes);
        self.emit(src, to, bytes.len());
    }

    fn emit(&mut self, src: usize, to: SocketAddr, n: usize) {
        if let Some(r) = &mut self.record {
            r.push((src, to, self.buf[..n].to_vec()));
        }
        let Some(dst) = self.index_of(to) else { return };
        if self.nodes[src].down || self.nodes[dst].down {
            return;
        }
        if let Some(f) = &mut self.drop_if {
            if f(src, to, &self.buf[..n]) {
                return;
            }
        }
        if self.burst_left[src] > 0 {
            self.burst_left[src] -= 1;
            return;
        }
        if self.rng.chance(self.link.loss_pct) {
            self.burst_left[src] = self.burst.max(1) - 1;
            return;
        }
        let copies = if self.rng.chance(self.link.dup_pct) { 2 } else { 1 };
        // Serialisation delay models a finite link so bulk tests see queues.
        let start = self.wire_free_at[src].max(self.now);
        let ser = self.link.ns_per_kib * n as u64 / 1024;
        self.wire_free_at[src] = start + ser;
        for _ in 0..copies {
            let jitter = if self.link.jitter_ns > 0 {
                self.rng.below(self.link.jitter_ns)
            } else {
                0
            };
            let at = start + ser + self.link.latency_ns + jitter;
            self.counter += 1;
            let from = self.nodes[src].addr;
            self.queue
                .push(Reverse((at, self.counter, dst, from, self.buf[..n].to_vec())));
        }
    }

    /// Drains every node's transmit queue onto the link.
    pub fn flush(&mut self) {
        for i in 0..self.nodes.len() {
            // The burst path, as the endpoint uses it; the payload is
            // gathered behind the header the way the socket would.
            self.flushes += 1;
            let cap = match self.tx_cap {
                0 => 1_000_000,
                c => c,
            };
            let mut out = SimOut {
                buf: std::mem::take(&mut self.buf),
                datagrams: Vec::new(),
                cap,
                refuse_built: self.flushes.is_multiple_of(2),
            };
            self.nodes[i].engine.poll_transmit_burst(self.now, &mut out);
            assert!(out.datagrams.len() < 1_000_000, "node {i} transmits without end");
            self.buf = out.buf;
            for (to, d) in out.datagrams {
                self.emit_from(i, to, &d);
            }
        }
    }

    /// Flushes, then advances virtual time to the next arrival or timer and
    /// processes it. Returns false when nothing at all is left to happen.
    pub fn step(&mut self) -> bool {
        self.flush();
        let arrival = self.queue.peek().map(|Reverse(e)| e.0);
        let timer = self.nodes.iter().filter_map(|n| n.engine.poll_timeout()).min();
        let next = match (arrival, timer) {
            (None, None) => return false,
            (Some(a), None) => a,
            (None, Some(t)) => t,
            (Some(a), Some(t)) => a.min(t),
        };
        self.now = self.now.max(next);
        while let Some(Reverse(e)) = self.queue.peek() {
            if e.0 > self.now {
                break;
            }
            let Reverse(first) = self.queue.pop().expect("peeked");
            let (dst, from) = (first.2, first.3);
            if !self.nodes[dst].down {
                let now = self.now;
                if self.placed {
                    deliver_split(&mut self.nodes[dst], from, &first.4, now);
                } else if self.gro {
                    let run = self.take_run(first);
                    self.deliver_run(run);
                } else {
                    self.nodes[dst].take_one(from, &first.4, now);
                }
                let e = &mut self.nodes[dst].engine;
                // As the endpoint does: the message is matched (`run`
                // hands out the events) before the next datagram.
                if e.wants_match_now() {
                    break;
                }
            }
        }
        for n in &mut self.nodes {
            if n.engine.poll_timeout().is_some_and(|t| t <= self.now) {
                n.engine.handle_timeout(self.now);
            }
        }
        true
    }

    /// `first` and the datagrams due now right behind it in the queue
    /// that GRO would coalesce with it: same sender and destination, the
    /// same size (a shorter one ends the run), 64 at most.
    fn take_run(&mut self, first: InFlight) -> Vec<InFlight> {
        let size = first.4.len();
        let mut run = vec![first];
        while run.len() < 64 && run.last().is_some_and(|d| d.4.len() == size) {
            match self.queue.peek() {
                Some(Reverse(e)) if e.0 <= self.now && e.2 == run[0].2 && e.3 == run[0].3 && e.4.len() <= size => {
                    let Reverse(e) = self.queue.pop().expect("peeked");
                    run.push(e);
                }
                _ => break,
            }
        }
        run
    }

    /// Hands a run to its node in one piece; what it did not take (it
    /// stopped to have a message matched) goes back to the queue as it was.
    fn deliver_run(&mut self, run: Vec<InFlight>) {
        let (dst, from, seg) = (run[0].2, run[0].3, run[0].4.len());
        let bytes: Vec<u8> = run.iter().flat_map(|d| d.4.iter().copied()).collect();
        let used = self.nodes[dst].engine.handle_run(from, &bytes, seg, self.now);
        let taken = used.div_ceil(seg.max(1)).max(1);
        for d in run.into_iter().skip(taken) {
            self.queue.push(Reverse(d));
        }
    }

    /// Steps for `dur` ns of virtual time (or until idle).
    pub fn run_for<F: FnMut(&mut Sim, usize, Event)>(&mut self, dur: u64, on_event: F) {
        let end = self.now + dur;
        self.run(dur + 1, on_event, |s| s.now >= end);
    }

    /// Steps until `done` holds or the network is idle (nothing in flight,
    /// no timer armed), handing each node's events to `on_event` after
    /// every step; panics past `limit_ns` of virtual time.
    pub fn run<F, D>(&mut self, limit_ns: u64, mut on_event: F, mut done: D)
    where
        F: FnMut(&mut Sim, usize, Event),
        D: FnMut(&Sim) -> bool,
    {
        let deadline = self.now + limit_ns;
        loop {
            for i in 0..self.nodes.len() {
                while let Some(ev) = self.nodes[i].poll_event() {
                    on_event(self, i, ev);
                }
            }
            if done(self) {
                return;
            }
            assert!(
                self.now <= deadline,
                "simulation did not finish within {limit_ns} ns of virtual time"
            );
            if !self.step() {
                for i in 0..self.nodes.len() {
                    while let Some(ev) = self.nodes[i].poll_event() {
                        on_event(self, i, ev);
                    }
                }
                return;
            }
        }
    }
}

/// What the endpoint's `recv_split` does with a datagram: with a guess
/// outstanding, the bytes after the header land in the guessed region
/// whatever the datagram turns out to be.
fn deliver_split(node: &mut Node, from: SocketAddr, bytes: &[u8], now: u64) {
    let e = &mut node.engine;
    let Some((p, region)) = e.rdata_placement() else {
        node.take_one(from, bytes, now);
        return;
    };
    let h = Placement::HEAD_LEN.min(bytes.len());
    let len = bytes.len() - h;
    let r = len.min(region.len());
    region[..r].copy_from_slice(&bytes[h..h + r]);
    if p.matches(&bytes[..h], len).is_some() {
        e.handle_datagram_placed(from, &bytes[..h], &p, len, now);
    } else {
        e.placement_missed();
        node.take_one(from, bytes, now);
    }
}

/// A sink that is a plain buffer (so it offers regions) and hands its
/// contents to `out` when the engine lets go of it.
pub struct BufSink {
    pub buf: Vec<u8>,
    pub out: Arc<Mutex<Option<Vec<u8>>>>,
}

impl RecvSink for BufSink {
    fn capacity(&self) -> usize {
        self.buf.len()
    }
    fn write_at(&mut self, offset: usize, src: &[u8]) {
        self.buf.write_at(offset, src)
    }
    fn region(&mut self, offset: usize, len: usize) -> Option<&mut [u8]> {
        self.buf.region(offset, len)
    }
}

impl Drop for BufSink {
    fn drop(&mut self) {
        *self.out.lock().unwrap() = Some(std::mem::take(&mut self.buf));
    }
}

/// A rendezvous source that computes its bytes instead of storing them.
pub struct PatternSource {
    pub len: usize,
    pub salt: u8,
}

pub fn pattern_byte(off: usize, salt: u8) -> u8 {
    (off as u8) ^ ((off >> 8) as u8).wrapping_mul(31) ^ ((off >> 20) as u8) ^ salt
}

impl SendSource for PatternSource {
    fn len(&self) -> usize {
        self.len
    }
    fn read_at(&self, offset: usize, dst: &mut [u8]) {
        assert!(offset + dst.len() <= self.len, "read beyond source");
        for (i, b) in dst.iter_mut().enumerate() {
            *b = pattern_byte(offset + i, self.salt);
        }
    }
}

/// A sink that checks each write against the pattern and counts coverage.
pub struct PatternSink {
    pub cap: usize,
    pub salt: u8,
    pub written: usize,
}

impl RecvSink for PatternSink {
    fn capacity(&self) -> usize {
        self.cap
    }
    fn write_at(&mut self, offset: usize, src: &[u8]) {
        assert!(offset + src.len() <= self.cap, "write beyond sink capacity");
        for (i, &b) in src.iter().enumerate() {
            assert_eq!(b, pattern_byte(offset + i, self.salt), "corrupt byte at {}", offset + i);
        }
        self.written += src.len();
    }
}

/// Collects what one node's engine transmits in a flush.
struct SimOut {
    buf: Vec<u8>,
    datagrams: Vec<(SocketAddr, Vec<u8>)>,
    /// Datagrams taken before saying stop (also the bound that makes an
    /// engine transmitting without end fail `flush`'s assertion).
    cap: usize,
    /// Stop by refusing the datagram that reaches the cap once built (it
    /// is kept, as a socket's stash keeps it), not the next slot.
    refuse_built: bool,
}

impl TxOut for SimOut {
    fn slot(&mut self) -> Option<&mut [u8]> {
        (self.datagrams.len() < self.cap).then_some(&mut self.buf[..])
    }

    fn commit(&mut self, t: Transmit<'_>) -> bool {
        t.gather_into(&mut self.buf);
        self.datagrams.push((t.to, self.buf[..t.len].to_vec()));
        !(self.refuse_built && self.datagrams.len() == self.cap)
    }
}

/// The proptest configuration of the simulator and model tests: `cases`
/// cases from a fixed seed, so that `cargo test` is bounded and
/// reproducible, and no regression files (a failure prints its shrunk
/// input). `PROPTEST_CASES` and `PROPTEST_RNG_SEED` override both, for
/// longer runs or other inputs (tests/README.md, "Fuzzing").
pub fn prop_config(cases: u32) -> proptest::test_runner::Config {
    use proptest::test_runner::{contextualize_config, Config, RngSeed};
    contextualize_config(Config {
        cases,
        rng_seed: RngSeed::Fixed(0x676e_6978),
        failure_persistence: None,
        ..Config::default()
    })
}
