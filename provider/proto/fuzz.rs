//! Fuzz targets for CI on stable Rust (no cargo-fuzz here): a seeded
//! mutation driver over valid datagrams captured from a real exchange
//! between two engines, plus synthetic ones from the encoders.
//!
//! * `fuzz_wire_decoder`: `wire::decode` on mutated and random bytes never
//!   panics, and whatever it accepts re-encodes to a datagram that decodes
//!   to the same packet.
//! * `fuzz_engine_datagrams`: `Engine::handle_datagram` (with timers,
//!   transmits and events driven around it) never panics, and every
//!   datagram that is invalid on its face is counted as dropped: it does
//!   not decode, or it is not a CONN_REQ and comes from an address with no
//!   VC, or it names a connection id that is not the receiver's; and the
//!   receiver's unproven VCs and queued first-contact challenges stay
//!   within their bounds whatever arrives. Rounds alternate between chaos
//!   (any mutation, including ones that carry the right connection id,
//!   with lossy real traffic in between) and checked rounds (only junk
//!   that must be dropped or must change nothing for good, from the peer's
//!   address and from strangers, while real messages flow: forged
//!   CONN_REQs from the peer's address, also before its first one, and
//!   strangers' first contacts among it; every other one starts with the
//!   table of unproven VCs full): there every real message, eager and
//!   rendezvous, arrives exactly once, in order, intact, and the VC is
//!   never restarted.
//!
//! Under `cargo test` both run a fixed number of rounds from fixed seeds (a
//! second or two in release). The long randomised runs are `#[ignore]`d:
//!
//! ```text
//! GNIX_FUZZ_SECS=600 cargo test --release --lib fuzz -- --ignored --nocapture
//! ```
//!
//! `GNIX_FUZZ_SECS` (default 60: a quarter for the decoder, the rest for
//! the engine, the two in parallel) and `GNIX_FUZZ_SEED` (default: from the
//! clock, printed). A failure prints the seed, round and input; rerun with
//! that `GNIX_FUZZ_SEED` to replay it.

use super::wire::{self, FrameHead, Packet};
use super::{Engine, EngineConfig, EngineStats, Event, MsgBody, MsgHdr, RecvSink, SendMode};
use std::collections::{HashSet, VecDeque};
use std::net::SocketAddr;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::rng::SplitMix as Rng;

/// How long a fuzzer runs: a fixed number of rounds (the `cargo test`
/// run: reproducible, bounded), or until a deadline (the long runs).
#[derive(Clone, Copy)]
enum Budget {
    Rounds(u64),
    Until(Instant),
}

impl Budget {
    /// Whether another round is due after `done` rounds.
    fn more(&self, done: u64) -> bool {
        match *self {
            Budget::Rounds(n) => done < n,
            Budget::Until(t) => Instant::now() < t,
        }
    }

    /// The long run's share of `GNIX_FUZZ_SECS`.
    fn long_run(share_num: u32, share_den: u32) -> Budget {
        let secs: f64 = std::env::var("GNIX_FUZZ_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(60.0);
        Budget::Until(Instant::now() + Duration::from_secs_f64(secs * share_num as f64 / share_den as f64))
    }
}

/// The long run's seed: `GNIX_FUZZ_SEED`, or from the clock; printed.
fn long_run_seed(what: &str) -> u64 {
    let s = std::env::var("GNIX_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        });
    eprintln!("{what}: GNIX_FUZZ_SEED={s}");
    s
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn drops(s: &EngineStats) -> u64 {
    s.dropped_malformed
        + s.dropped_stale
        + s.dropped_unknown_peer
        + s.dropped_out_of_window
        + s.dropped_early
        + s.dropped_rndv
        + s.dropped_ooo_budget
}

fn addr_a() -> SocketAddr {
    "10.9.0.1:7001".parse().unwrap()
}
fn addr_b() -> SocketAddr {
    "10.9.0.2:7002".parse().unwrap()
}

fn config() -> EngineConfig {
    EngineConfig {
        max_datagram: 1472,
        rto_init_ns: 1_000_000,
        rto_min_ns: 200_000,
        rto_max_ns: 20_000_000,
        peer_timeout_ns: 2_000_000_000,
        // The strangers' CONN_REQs fill it: A's first contact may then
        // be challenged (conn.rs).
        max_unproven: 4,
        ..EngineConfig::default()
    }
}

/// A rendezvous sink of bounded capacity (a forged RTS may announce any
/// size), shared so that the data can be read back after `RecvDone`.
struct Sink(Arc<Mutex<Vec<u8>>>);
impl RecvSink for Sink {
    fn capacity(&self) -> usize {
        self.0.lock().unwrap().len()
    }
    fn write_at(&mut self, offset: usize, src: &[u8]) {
        self.0.lock().unwrap()[offset..offset + src.len()].copy_from_slice(src);
    }
}

/// A rendezvous receive's buffer, shared with its sink.
type RndvBuf = Arc<Mutex<Vec<u8>>>;

/// What B saw of real traffic: messages by tag in arrival (matching)
/// order, with their payload once complete (rendezvous: at `RecvDone`).
#[derive(Default)]
struct Seen {
    msgs: Vec<(u64, Option<Vec<u8>>)>,
    /// accepted rendezvous receives: rid, index in `msgs`, buffer
    rndv: Vec<(u64, usize, RndvBuf)>,
}

impl Seen {
    fn complete(&self) -> usize {
        self.msgs.iter().filter(|m| m.1.is_some()).count()
    }
}

/// Two engines, A (the peer) and B (the target of the fuzzing), joined by
/// a lossy wire in virtual time.
struct Pair {
    a: Engine,
    b: Engine,
    now: u64,
    buf: Vec<u8>,
    /// A->B datagrams not yet delivered.
    to_b: VecDeque<Vec<u8>>,
    to_a: VecDeque<Vec<u8>>,
    /// Nonces B announced in its handshake datagrams (a fuzzer splicing one
    /// of these back would carry a valid connection id).
    b_nonces: HashSet<u64>,
    /// B's connection id as A last used it.
    b_conn: Option<u64>,
    last_seq: u32,
    seen: Seen,
}

impl Pair {
    fn new(rng: &mut Rng) -> Pair {
        Pair {
            a: Engine::seeded(config(), addr_a(), rng.next_u64()),
            b: Engine::seeded(config(), addr_b(), rng.next_u64()),
            now: 1_000_000,
            buf: vec![0u8; 70_000],
            to_b: VecDeque::new(),
            to_a: VecDeque::new(),
            b_nonces: HashSet::new(),
            b_conn: None,
            last_seq: 0,
            seen: Seen::default(),
        }
    }

    /// One step: both transmit, up to a few datagrams each way are delivered
    /// (`loss` % lost), timers fire, B's events are handled. Returns the
    /// A->B datagrams delivered (for the corpus).
    fn step(&mut self, rng: &mut Rng, loss: u64, corpus: &mut Vec<Vec<u8>>) {
        while let Some((to, n)) = self.a.poll_transmit(self.now, &mut self.buf) {
            if to == addr_b() {
                self.to_b.push_back(self.buf[..n].to_vec());
            }
        }
        while let Some((to, n)) = self.b.poll_transmit(self.now, &mut self.buf) {
            if let Ok(Packet::ConnResp { nonce, .. } | Packet::ConnReq { nonce, .. }) = Packet::parse(&self.buf[..n]) {
                self.b_nonces.insert(nonce);
            }
            if to == addr_a() {
                self.to_a.push_back(self.buf[..n].to_vec());
            }
        }
        for _ in 0..64 {
            let Some(d) = self.to_b.pop_front() else { break };
            if rng.chance(loss as f64) {
                continue;
            }
            match Packet::parse(&d) {
                Ok(Packet::Ack { conn, .. }) => self.b_conn = Some(conn),
                Ok(Packet::Seg { conn, seq, .. }) => {
                    self.b_conn = Some(conn);
                    self.last_seq = seq;
                }
                _ => {}
            }
            if corpus.len() < 4096 && rng.chance(30.0) {
                corpus.push(d.clone());
            }
            self.b.handle_datagram(addr_a(), &d, self.now);
        }
        for _ in 0..64 {
            let Some(d) = self.to_a.pop_front() else { break };
            if !rng.chance(loss as f64) {
                self.a.handle_datagram(addr_b(), &d, self.now);
            }
        }
        self.now += 20_000;
        if self.to_a.is_empty() && self.to_b.is_empty() {
            let t = [self.a.poll_timeout(), self.b.poll_timeout()]
                .into_iter()
                .flatten()
                .min();
            if let Some(t) = t {
                self.now = self.now.max(t);
            }
        }
        for e in [&mut self.a, &mut self.b] {
            if e.poll_timeout().is_some_and(|t| t <= self.now) {
                e.handle_timeout(self.now);
            }
        }
        self.events();
    }

    fn events(&mut self) {
        while self.a.poll_event().is_some() {}
        while let Some(ev) = self.b.poll_event() {
            match ev {
                Event::Msg {
                    hdr,
                    body: MsgBody::Eager(v),
                    ..
                } => self.seen.msgs.push((hdr.tag, Some(v.into_vec()))),
                Event::Msg {
                    hdr,
                    body: MsgBody::Rndv(rid),
                    ..
                } => {
                    // Every announced rendezvous is accepted, into at most 1 MiB.
                    let buf = Arc::new(Mutex::new(vec![0u8; hdr.len.min(1 << 20) as usize]));
                    self.seen.rndv.push((rid, self.seen.msgs.len(), buf.clone()));
                    self.seen.msgs.push((hdr.tag, None));
                    self.b.accept(rid, Box::new(Sink(buf)), self.now);
                }
                Event::RecvDone { rid, written, .. } => {
                    if let Some(i) = self.seen.rndv.iter().position(|r| r.0 == rid) {
                        let (_, at, buf) = self.seen.rndv.swap_remove(i);
                        self.seen.msgs[at].1 = Some(buf.lock().unwrap()[..written].to_vec());
                    }
                }
                _ => {}
            }
        }
    }

    fn idle(&self) -> bool {
        self.to_a.is_empty() && self.to_b.is_empty() && !self.a.has_unacked() && !self.b.has_unacked()
    }
}

fn payload(rng_seed: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    Rng(rng_seed).fill(&mut v);
    v
}

fn msg_len(rng: &mut Rng) -> usize {
    match rng.below(6) {
        0 => 0,
        1 => rng.below(64) as usize,
        2 => 1000 + rng.below(3000) as usize,
        3 => 60_000 + rng.below(10_000) as usize, // around the rendezvous threshold
        4 => 100_000 + rng.below(200_000) as usize,
        _ => rng.below(1400) as usize,
    }
}

fn hdr(tag: u64) -> MsgHdr {
    MsgHdr {
        tag,
        data: !tag,
        len: 0,
        flags: MsgHdr::TAGGED,
    }
}

/// Datagrams of every kind from the encoders, with random fields.
fn synthetic(rng: &mut Rng) -> Vec<u8> {
    let mut b = vec![0u8; 2048];
    let conn = rng.next_u64();
    let (ack, sack, seq) = (rng.next_u64() as u32, rng.next_u64(), rng.next_u64() as u32);
    let n = match rng.below(12) {
        0 => Packet::ConnReq {
            nonce: rng.next_u64() | 1,
            cookie: if rng.chance(50.0) { 0 } else { rng.next_u64() },
            isn: rng.next_u64() as u32,
            window: 1 + rng.below(8192) as u32,
        }
        .emit(&mut b),
        11 => Packet::Challenge {
            echo: rng.next_u64() | 1,
            cookie: rng.next_u64() | 1,
        }
        .emit(&mut b),
        1 => Packet::ConnResp {
            nonce: rng.next_u64() | 1,
            echo: rng.next_u64() | 1,
            isn: rng.next_u64() as u32,
            window: 1 + rng.below(8192) as u32,
        }
        .emit(&mut b),
        2 => Packet::Ack { conn, ack, sack }.emit(&mut b),
        k => {
            let head = match k {
                3 => FrameHead::Msg {
                    tag: rng.next_u64(),
                    data: rng.next_u64(),
                    flags: rng.next_u64() as u32,
                    total: rng.below(100_000),
                },
                4 => FrameHead::MsgCont {
                    offset: rng.below(100_000),
                },
                5 => FrameHead::Rts {
                    tag: rng.next_u64(),
                    data: rng.next_u64(),
                    flags: rng.next_u64() as u32,
                    total: rng.next_u64() >> rng.below(64),
                    key: rng.below(64),
                    push: (rng.next_u64() >> rng.below(64)) as u32,
                },
                6 => FrameHead::Get {
                    key: rng.below(64),
                    rid: rng.below(64),
                    offset: rng.below(1 << 20),
                    len: 1 + rng.below(1 << 20),
                    last: rng.below(2) == 0,
                },
                7 => FrameHead::RData {
                    rid: rng.below(64),
                    offset: rng.below(1 << 20),
                },
                8 => FrameHead::Fin { key: rng.below(64) },
                9 => FrameHead::PData {
                    key: rng.below(64),
                    offset: rng.below(1 << 20),
                },
                _ => FrameHead::Nop,
            };
            let h = head.emit_seg(&mut b, conn, ack, sack, seq);
            let pl = match head {
                FrameHead::Msg { .. }
                | FrameHead::MsgCont { .. }
                | FrameHead::RData { .. }
                | FrameHead::PData { .. } => 1 + rng.below(1400) as usize,
                FrameHead::Rts { .. } => rng.below(1400) as usize,
                _ => 0,
            };
            rng.fill(&mut b[h..h + pl]);
            h + pl
        }
    };
    b.truncate(n);
    b
}

/// Every kind byte the decoder knows, and one it does not.
const KINDS: [u8; 15] = [1, 2, 3, 4, 5, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0];

const INTERESTING32: [u32; 8] = [0, 1, 2, 0x7fff_ffff, 0x8000_0000, u32::MAX, u32::MAX - 1, 4096];
const INTERESTING64: [u64; 8] = [0, 1, u64::MAX, 1 << 63, 1 << 32, 65536, 65537, u64::MAX >> 1];

/// One to four mutations of `base` (a corpus datagram).
fn mutate(rng: &mut Rng, base: &[u8], corpus: &[Vec<u8>]) -> Vec<u8> {
    let mut b = base.to_vec();
    for _ in 0..1 + rng.below(4) {
        let len = b.len();
        match rng.below(12) {
            0 if len > 0 => {
                let i = rng.below(len as u64) as usize;
                b[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len as u64) as usize;
                b[i] = [0u8, 0xff, 0x7f, 0x80, 1][rng.below(5) as usize];
            }
            2 if len >= 4 => {
                let i = rng.below(len as u64 - 3) as usize;
                let v = INTERESTING32[rng.below(8) as usize].wrapping_add(rng.below(3) as u32);
                b[i..i + 4].copy_from_slice(&v.to_le_bytes());
            }
            3 if len >= 8 => {
                let i = rng.below(len as u64 - 7) as usize;
                let v = INTERESTING64[rng.below(8) as usize];
                b[i..i + 8].copy_from_slice(&v.to_le_bytes());
            }
            4 => b.truncate(rng.below(len as u64 + 1) as usize),
            5 => {
                let mut extra = vec![0u8; 1 + rng.below(64) as usize];
                rng.fill(&mut extra);
                b.extend_from_slice(&extra);
            }
            6 if len >= 4 => b[3] = KINDS[rng.below(KINDS.len() as u64) as usize],
            7 if !corpus.is_empty() => {
                // splice: our head, another datagram's tail
                let o = &corpus[rng.below(corpus.len() as u64) as usize];
                let cut = rng.below(len.min(o.len()) as u64 + 1) as usize;
                b.truncate(cut);
                b.extend_from_slice(&o[cut.min(o.len())..]);
            }
            8 if len > 0 => {
                // duplicate a chunk in place
                let i = rng.below(len as u64) as usize;
                let n = rng.below((len - i) as u64 + 1) as usize;
                let chunk = b[i..i + n].to_vec();
                b.splice(i..i, chunk);
            }
            9 if len >= 28 => {
                // a segment field by position: ack (12), sack (16), seq (24)
                let at = [12usize, 16, 24][rng.below(3) as usize];
                let v = rng.next_u64() as u32;
                b[at..at + 4].copy_from_slice(&v.to_le_bytes());
            }
            10 => {
                b = vec![0u8; rng.below(200) as usize];
                rng.fill(&mut b);
            }
            _ => {}
        }
    }
    b.truncate(65_507);
    b
}

/// A corpus of real datagrams: one lossy exchange of messages of every size
/// class in both directions (handshake, eager single and multi-segment,
/// rendezvous RTS/GET/RDATA/FIN, ACKs with SACK bits), plus synthetic ones.
fn corpus(rng: &mut Rng) -> Vec<Vec<u8>> {
    let mut c = Vec::new();
    let mut p = Pair::new(rng);
    for k in 0..24u64 {
        let len = msg_len(rng);
        let src = Box::new(payload(k, len));
        p.a.send(addr_b(), hdr(k), src, SendMode::Eager, p.now).unwrap();
        if k % 4 == 0 {
            let src = Box::new(payload(k ^ 99, 3000));
            p.b.send(addr_a(), hdr(k), src, SendMode::Eager, p.now).unwrap();
        }
    }
    let mut steps = 0;
    while (!p.idle() || steps < 10) && steps < 20_000 {
        p.step(rng, 5, &mut c);
        steps += 1;
    }
    // B->A traffic too (the other direction's kinds and fields)
    while let Some((_, n)) = p.b.poll_transmit(p.now, &mut p.buf) {
        c.push(p.buf[..n].to_vec());
    }
    for _ in 0..512 {
        c.push(synthetic(rng));
    }
    c
}

/// Inputs the decoder fuzzer takes per round.
const DECODER_BATCH: u64 = 256;

/// Mutated datagrams through `wire::decode`: no panic, and whatever is
/// accepted re-encodes to the same bytes' length and decodes the same.
/// Returns (inputs, decoded).
fn run_decoder(seed: u64, budget: Budget) -> (u64, u64) {
    let mut rng = Rng(seed);
    let corpus = corpus(&mut rng);
    let (mut n, mut ok, mut rounds) = (0u64, 0u64, 0u64);
    while budget.more(rounds) {
        rounds += 1;
        for _ in 0..DECODER_BATCH {
            let base = &corpus[rng.below(corpus.len() as u64) as usize];
            let input = mutate(&mut rng, base, &corpus);
            let r = catch_unwind(|| {
                let Ok(p) = Packet::parse(&input) else { return false };
                let again = p.to_vec();
                assert_eq!(again.len(), input.len(), "re-encoded length differs");
                assert_eq!(Packet::parse(&again), Ok(p), "decode(encode(p)) != p");
                true
            });
            match r {
                Ok(true) => ok += 1,
                Ok(false) => {}
                Err(e) => {
                    eprintln!(
                        "fuzz_wire_decoder: seed {seed}, input {} ({} bytes)",
                        hex(&input),
                        input.len()
                    );
                    resume_unwind(e);
                }
            }
            n += 1;
        }
    }
    eprintln!(
        "fuzz_wire_decoder: seed {seed}: {n} inputs, {ok} decoded ({} corpus datagrams)",
        corpus.len()
    );
    assert!(
        ok > 0 && ok < n,
        "the mutations should produce both valid and invalid datagrams"
    );
    (n, ok)
}

/// About 150,000 inputs, a few tenths of a second in release.
#[test]
fn fuzz_wire_decoder() {
    for seed in [1, 2, 3] {
        run_decoder(seed, Budget::Rounds(200));
    }
}

#[test]
#[ignore = "long randomised run: GNIX_FUZZ_SECS, GNIX_FUZZ_SEED (tests/README.md)"]
fn fuzz_wire_decoder_long() {
    run_decoder(long_run_seed("fuzz_wire_decoder_long"), Budget::long_run(1, 4));
}

/// Feeds one datagram to B and checks the drop oracle.
fn feed(p: &mut Pair, from: SocketAddr, d: &[u8]) -> bool {
    let before = drops(p.b.stats());
    let decoded = Packet::parse(d);
    let known_conn = |c: u64| p.b_conn == Some(c) || p.b_nonces.contains(&c);
    let must_drop = match &decoded {
        Err(_) => Some("does not decode"),
        Ok(Packet::ConnReq { .. }) => None,
        Ok(Packet::Challenge { echo, .. }) if !known_conn(*echo) => Some("challenge of no request of the receiver"),
        Ok(_) if !p.b.has_vc(from) => Some("not a CONN_REQ, from an address with no VC"),
        Ok(Packet::ConnResp { .. }) => None,
        Ok(Packet::Ack { conn, .. } | Packet::Seg { conn, .. } | Packet::Credit { conn, .. }) if !known_conn(*conn) => {
            Some("connection id that is not the receiver's")
        }
        Ok(_) => None,
    };
    let now = p.now;
    p.b.handle_datagram(from, d, now);
    // Whatever arrives, B's handshake state stays bounded.
    assert!(p.b.unproven_count() <= config().max_unproven);
    assert!(p.b.first_contacts_pending() <= 256);
    if let Some(why) = must_drop {
        let after = drops(p.b.stats());
        assert_eq!(
            after,
            before + 1,
            "a datagram with {why} was not counted as dropped once: {}",
            hex(d)
        );
        if decoded.is_err() {
            assert!(p.b.stats().dropped_malformed > 0);
        }
    }
    must_drop.is_some()
}

fn stranger(rng: &mut Rng) -> SocketAddr {
    SocketAddr::from(([10, 9, 1, rng.below(4) as u8], 9000 + rng.below(4) as u16))
}

/// A junk datagram for a checked round: one that must be dropped whatever
/// the state (no valid connection id), or a handshake that must change
/// nothing for good: any CONN_RESP (it answers no request of B's), any
/// CHALLENGE, CONN_REQs from strangers (they fill B's table of unproven
/// VCs), and CONN_REQs from A's address at any time (replays of A's,
/// forgeries with other nonces, or with B's live connection id as the
/// cookie): challenged, or answered as duplicates, or, before A's own
/// arrives, planted as an unproven VC that A's request re-keys.
fn junk(rng: &mut Rng, p: &Pair, corpus: &[Vec<u8>]) -> (SocketAddr, Vec<u8>) {
    if rng.chance(5.0) {
        // A first contact from a stranger, with or without a (wrong) cookie.
        let cookie = if rng.chance(50.0) { rng.next_u64() } else { 0 };
        // Zero nonces and windows too (Packet::emit writes what it is given).
        let d = Packet::ConnReq {
            nonce: rng.next_u64(),
            cookie,
            isn: rng.next_u64() as u32,
            window: rng.below(100) as u32,
        }
        .to_vec();
        return (stranger(rng), d);
    }
    loop {
        let base = &corpus[rng.below(corpus.len() as u64) as usize];
        let mut d = mutate(rng, base, corpus);
        let from = if rng.chance(70.0) { addr_a() } else { stranger(rng) };
        let ok = match Packet::parse(&d) {
            Err(_) => true,
            Ok(Packet::ConnReq { .. }) => {
                if let (Some(c), true) = (p.b_conn, rng.chance(30.0)) {
                    d[12..20].copy_from_slice(&c.to_le_bytes());
                }
                true
            }
            Ok(Packet::ConnResp { .. }) | Ok(Packet::Challenge { .. }) => true,
            Ok(Packet::Ack { conn, .. }) | Ok(Packet::Seg { conn, .. }) | Ok(Packet::Credit { conn, .. }) => {
                from != addr_a() || (p.b_conn != Some(conn) && !p.b_nonces.contains(&conn))
            }
        };
        if ok {
            return (from, d);
        }
    }
}

/// Rounds of fuzzed datagrams against a live pair of engines (module
/// doc); chaos and checked rounds alternate. Returns the number of real
/// messages the checked rounds verified.
fn run_engine(seed: u64, budget: Budget) -> u64 {
    let mut rng = Rng(seed);
    let mut corpus = corpus(&mut rng);
    let (mut inputs, mut dropped, mut rounds, mut checked_msgs) = (0u64, 0u64, 0u64, 0u64);
    // B's counters summed over the rounds: which paths the inputs reached
    let mut tot = [0u64; 14];
    while budget.more(rounds) {
        let round = rounds;
        rounds += 1;
        let checked = round % 2 == 1;
        let mut p = Pair::new(&mut rng);
        let mut sent: Vec<(u64, Vec<u8>)> = Vec::new();
        let nmsgs = 6 + rng.below(10);
        let r = catch_unwind(AssertUnwindSafe(|| {
            let mut last_input = Vec::new();
            let mut steps = 0u64;
            if checked && round % 4 == 1 {
                // B's table of unproven VCs is full before A's first
                // contact, which B then challenges (conn.rs).
                for k in 0..config().max_unproven as u8 {
                    let d = Packet::ConnReq {
                        nonce: rng.next_u64(),
                        cookie: 0,
                        isn: 1,
                        window: 64,
                    }
                    .to_vec();
                    feed(&mut p, SocketAddr::from(([10, 9, 2, k], 9100)), &d);
                }
                assert_eq!(p.b.unproven_count(), config().max_unproven);
            }
            loop {
                // real traffic A -> B, lossy, plus junk
                if (sent.len() as u64) < nmsgs && rng.chance(10.0) {
                    let tag = sent.len() as u64;
                    let v = payload(seed ^ round << 16 ^ tag, msg_len(&mut rng));
                    p.a.send(addr_b(), hdr(tag), Box::new(v.clone()), SendMode::Eager, p.now)
                        .unwrap();
                    sent.push((tag, v));
                }
                for _ in 0..1 + rng.below(8) {
                    let (from, d) = if checked {
                        junk(&mut rng, &p, &corpus)
                    } else {
                        let base = &corpus[rng.below(corpus.len() as u64) as usize];
                        let mut d = mutate(&mut rng, base, &corpus);
                        // aim at the live connection: its id, a nearby sequence number
                        if d.len() >= 12 && d[3] >= wire::kind::ACK && rng.chance(70.0) {
                            if let Some(c) = p.b_conn {
                                d[4..12].copy_from_slice(&c.to_le_bytes());
                            }
                            if d.len() >= 28 && d[3] != wire::kind::ACK && rng.chance(50.0) {
                                let s = p.last_seq.wrapping_add(rng.below(64) as u32).wrapping_sub(16);
                                d[24..28].copy_from_slice(&s.to_le_bytes());
                            }
                        }
                        let from = match rng.below(10) {
                            0 => stranger(&mut rng),
                            1 => addr_b(),
                            _ => addr_a(),
                        };
                        (from, d)
                    };
                    last_input = d.clone();
                    if feed(&mut p, from, &d) {
                        dropped += 1;
                    }
                    inputs += 1;
                }
                p.step(&mut rng, if checked { 3 } else { 10 }, &mut corpus);
                steps += 1;
                if sent.len() as u64 == nmsgs && p.idle() && p.seen.complete() >= sent.len() {
                    break;
                }
                if !checked && steps > 3000 {
                    break; // chaos may have wrecked the connection: fine
                }
                assert!(
                    steps < 200_000,
                    "checked round stuck: {} of {} messages, last input {}",
                    p.seen.complete(),
                    sent.len(),
                    hex(&last_input)
                );
            }
            if checked {
                // Forged CONN_REQs from A's address were challenged, never accepted.
                assert_eq!(p.b.stats().peers_restarted, 0, "a forged CONN_REQ restarted the VC");
            }
            // the engines keep working after the round
            p.now += 10_000_000_000;
            p.a.handle_timeout(p.now);
            p.b.handle_timeout(p.now);
            p.step(&mut rng, 0, &mut Vec::new());
        }));
        if let Err(e) = r {
            eprintln!(
                "fuzz_engine_datagrams: seed {seed}, round {round} ({})",
                if checked { "checked" } else { "chaos" }
            );
            resume_unwind(e);
        }
        let st = p.b.stats();
        for (t, v) in tot.iter_mut().zip([
            st.dropped_malformed,
            st.dropped_stale,
            st.dropped_unknown_peer,
            st.dropped_out_of_window,
            st.dropped_early,
            st.dropped_rndv,
            st.dup_segments,
            st.ooo_segments,
            st.peers_restarted,
            st.conn_reqs_challenged,
            st.conn_reqs_duplicate,
            st.first_contacts_challenged,
            st.unproven_rekeyed,
            st.unproven_expired,
        ]) {
            *t += v;
        }
        if checked {
            let got: Vec<(u64, Option<usize>)> = p
                .seen
                .msgs
                .iter()
                .map(|(t, v)| (*t, v.as_ref().map(Vec::len)))
                .collect();
            let want: Vec<(u64, Option<usize>)> = sent.iter().map(|(t, v)| (*t, Some(v.len()))).collect();
            assert_eq!(
                got, want,
                "seed {seed} round {round}: messages lost, duplicated or reordered"
            );
            for ((t, v), (_, w)) in p.seen.msgs.iter().zip(&sent) {
                assert!(
                    v.as_ref() == Some(w),
                    "seed {seed} round {round}: message {t} corrupted"
                );
            }
            checked_msgs += sent.len() as u64;
        }
    }
    eprintln!(
        "fuzz_engine_datagrams: {rounds} rounds, {inputs} fuzzed datagrams ({dropped} that had to be dropped were), \
         {checked_msgs} real messages checked exactly-once and in order, corpus {}",
        corpus.len()
    );
    eprintln!(
        "fuzz_engine_datagrams: receiver counters: malformed {} stale {} unknown_peer {} out_of_window {} early {} \
         rndv {} dup_segments {} ooo_segments {} peers_restarted {} conn_reqs_challenged {} conn_reqs_duplicate {} \
         first_contacts_challenged {} unproven_rekeyed {} unproven_expired {}",
        tot[0],
        tot[1],
        tot[2],
        tot[3],
        tot[4],
        tot[5],
        tot[6],
        tot[7],
        tot[8],
        tot[9],
        tot[10],
        tot[11],
        tot[12],
        tot[13]
    );
    assert!(rounds >= 2 && dropped > 0);
    checked_msgs
}

/// 120 rounds, about half a second in release.
#[test]
fn fuzz_engine_datagrams() {
    for seed in [1, 2] {
        let checked = run_engine(seed, Budget::Rounds(60));
        assert!(checked > 0);
    }
}

#[test]
#[ignore = "long randomised run: GNIX_FUZZ_SECS, GNIX_FUZZ_SEED (tests/README.md)"]
fn fuzz_engine_datagrams_long() {
    run_engine(long_run_seed("fuzz_engine_datagrams_long"), Budget::long_run(3, 4));
}
