//! The engine's datagram fuzz target (module doc of `fuzz`): a pair of
//! engines in virtual time, real traffic from A to B, and fuzzed
//! datagrams at B.

use super::{hex, Edit};
use crate::proto::wire::Packet;
use crate::proto::{Engine, EngineConfig, EngineStats, Event, MsgBody, MsgHdr, RecvSink, Refusal, SendMode};
use crate::rng::SplitMix as Rng;
use arbitrary::Arbitrary;
use std::collections::{HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

/// Most real messages a case sends.
const MAX_MSGS: usize = 16;
/// Most steps of a script (a longer input is cut): bounds a case's cost.
const MAX_STEPS: usize = 400;

/// One round: a fresh pair of engines and a script. (Fixed-size arrays
/// rather than vectors where a count matters: `arbitrary` makes a vector
/// from uniform random bytes about one element long, and the `cargo test`
/// run feeds uniform random bytes.)
#[derive(Arbitrary, Clone, Debug)]
pub struct EngineCase<'a> {
    /// Checked (only junk that must be dropped or change nothing; every
    /// message must arrive) or chaos (anything; only no panic, bounds).
    pub checked: bool,
    /// Checked: fill B's table of unproven VCs before A's first contact,
    /// which B then challenges (conn.rs).
    pub fill_unproven: bool,
    /// The engines' entropy and the link's losses.
    pub seed: u64,
    /// Real messages A sends: the first `1 + n_msgs % MAX_MSGS` of `lens`.
    pub n_msgs: u8,
    pub lens: [MsgLen; MAX_MSGS],
    /// Played in a loop until every message arrived (checked) or for at
    /// most 3000 steps (chaos); no junk at all if empty.
    pub steps: Vec<Step<'a>>,
}

/// A real message's length, by size class.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum MsgLen {
    Empty,
    Tiny(u8),
    OneSegment(u16),
    FewSegments(u16),
    /// Around the rendezvous threshold.
    NearThreshold(u16),
    Rendezvous(u32),
}

impl MsgLen {
    fn len(self) -> usize {
        match self {
            MsgLen::Empty => 0,
            MsgLen::Tiny(n) => n as usize % 64,
            MsgLen::OneSegment(n) => n as usize % 1400,
            MsgLen::FewSegments(n) => 1000 + n as usize % 3000,
            MsgLen::NearThreshold(n) => 60_000 + n as usize % 10_000,
            MsgLen::Rendezvous(n) => 100_000 + n as usize % 200_000,
        }
    }
}

/// One step of virtual time: maybe the next real message is sent, the
/// junk arrives at B, then both engines transmit, receive and tick.
#[derive(Arbitrary, Clone, Debug)]
pub struct Step<'a> {
    pub send: bool,
    pub junk: [Option<Junk<'a>>; 8],
}

/// A fuzzed datagram for B.
#[derive(Arbitrary, Clone, Debug)]
pub enum Junk<'a> {
    /// A datagram of the real exchange so far (A's to B), edited.
    Replay {
        pick: u16,
        edits: Vec<Edit<'a>>,
        from: From,
        aim: Aim,
    },
    /// A packet of any kind with any fields, edited.
    Forged {
        packet: Packet<'a>,
        edits: Vec<Edit<'a>>,
        from: From,
        aim: Aim,
    },
    /// A stranger's first contact: a CONN_REQ, with or without a cookie
    /// (fills B's table of unproven VCs).
    FirstContact {
        stranger: u8,
        nonce: u64,
        cookie: u64,
        window: u8,
    },
    /// The kernel's word (ICMP port unreachable) that a datagram B sent to
    /// `to` was refused, quoting `quote` (engine/refused.rs). Checked
    /// cases: only quotes that name none of the connection's ids, which
    /// must be ignored; chaos cases with `aim`: B's live ids spliced in.
    Refusal { quote: &'a [u8], to: From, aim: bool },
}

/// Where a fuzzed datagram claims to come from.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum From {
    /// A's address (the live peer).
    Peer,
    /// B's own address.
    Itself,
    /// One of 16 addresses that are neither.
    Stranger(u8),
}

/// Chaos cases: aim a datagram at the live connection.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub struct Aim {
    /// Carry B's connection id (as A last used it).
    pub conn: bool,
    /// A sequence number this far from A's last one.
    pub seq: Option<i8>,
    /// Checked cases, a CONN_REQ from A's address: carry B's live
    /// connection id as its cookie (a forgery that must still fail).
    pub live_cookie: bool,
}

/// What a case verified, for the cargo test run's totals.
#[derive(Clone, Debug, Default)]
pub struct EngineReport {
    pub inputs: u64,
    /// Fuzzed datagrams that had to be dropped (and were).
    pub dropped: u64,
    /// Real messages checked exactly-once and in order (checked cases).
    pub checked_msgs: u64,
    /// B's counters at the end.
    pub b_stats: EngineStats,
}

fn addr_a() -> SocketAddr {
    "10.9.0.1:7001".parse().unwrap()
}
fn addr_b() -> SocketAddr {
    "10.9.0.2:7002".parse().unwrap()
}
fn stranger(k: u8) -> SocketAddr {
    SocketAddr::from(([10, 9, 1, k % 4], 9000 + (k / 4 % 4) as u16))
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

fn drops(s: &EngineStats) -> u64 {
    s.dropped_malformed
        + s.dropped_stale
        + s.dropped_unknown_peer
        + s.dropped_out_of_window
        + s.dropped_early
        + s.dropped_rndv
        + s.dropped_ooo_budget
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
    /// The link's losses.
    rng: Rng,
    /// A->B datagrams not yet delivered.
    to_b: VecDeque<Vec<u8>>,
    to_a: VecDeque<Vec<u8>>,
    /// A->B datagrams delivered so far (what `Junk::Replay` picks from).
    record: Vec<Vec<u8>>,
    /// Nonces B announced in its handshake datagrams (a fuzzer splicing one
    /// of these back would carry a valid connection id).
    b_nonces: HashSet<u64>,
    /// B's connection id as A last used it.
    b_conn: Option<u64>,
    /// A's connection ids as B used them (what a refusal of B's datagram
    /// would quote).
    a_conns: HashSet<u64>,
    last_seq: u32,
    seen: Seen,
}

impl Pair {
    fn new(seed: u64) -> Pair {
        let mut rng = Rng(seed);
        Pair {
            a: Engine::seeded(config(), addr_a(), rng.next_u64()),
            b: Engine::seeded(config(), addr_b(), rng.next_u64()),
            now: 1_000_000,
            buf: vec![0u8; 70_000],
            rng,
            to_b: VecDeque::new(),
            to_a: VecDeque::new(),
            record: Vec::new(),
            b_nonces: HashSet::new(),
            b_conn: None,
            a_conns: HashSet::new(),
            last_seq: 0,
            seen: Seen::default(),
        }
    }

    /// One step: both transmit, up to a few datagrams each way are
    /// delivered (`loss` % lost), timers fire, B's events are handled.
    fn step(&mut self, loss: f64) {
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
                if let Ok(Packet::Ack { conn, .. } | Packet::Seg { conn, .. } | Packet::Credit { conn, .. }) =
                    Packet::parse(&self.buf[..n])
                {
                    self.a_conns.insert(conn);
                }
                self.to_a.push_back(self.buf[..n].to_vec());
            }
        }
        for _ in 0..64 {
            let Some(d) = self.to_b.pop_front() else { break };
            if self.rng.chance(loss) {
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
            self.b_takes(addr_a(), &d);
            if self.record.len() < 4096 {
                self.record.push(d);
            }
        }
        for _ in 0..64 {
            let Some(d) = self.to_a.pop_front() else { break };
            if !self.rng.chance(loss) {
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

    /// B takes one datagram as the udp wire hands a slot of one over
    /// (`Engine::handle_one`): a message it hands back is seen at once.
    fn b_takes(&mut self, from: SocketAddr, d: &[u8]) {
        if let Some((hdr, payload)) = self.b.handle_one(from, d, self.now) {
            self.seen.msgs.push((hdr.tag, Some(payload.to_vec())));
        }
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

    /// Whether `conn` is a connection id B holds or announced.
    fn known_conn(&self, conn: u64) -> bool {
        self.b_conn == Some(conn) || self.b_nonces.contains(&conn)
    }

    fn from(&self, f: From) -> SocketAddr {
        match f {
            From::Peer => addr_a(),
            From::Itself => addr_b(),
            From::Stranger(k) => stranger(k),
        }
    }

    /// The datagram `j` stands for, and who sends it; None when a checked
    /// case must not feed it (it could change the live connection).
    fn junk(&self, j: &Junk<'_>, checked: bool) -> Option<(SocketAddr, Vec<u8>)> {
        let (mut d, edits, from, aim) = match j {
            Junk::FirstContact {
                stranger: k,
                nonce,
                cookie,
                window,
            } => {
                // Zero nonces and windows too: emit writes what it is given.
                let d = Packet::ConnReq {
                    nonce: *nonce,
                    cookie: *cookie,
                    isn: 1,
                    window: *window as u32,
                }
                .to_vec();
                return Some((stranger(*k), d));
            }
            // Not a datagram: `refusal`.
            Junk::Refusal { .. } => return None,
            Junk::Replay { pick, edits, from, aim } => {
                if self.record.is_empty() {
                    return None;
                }
                let d = self.record[*pick as usize % self.record.len()].clone();
                (d, edits, *from, *aim)
            }
            Junk::Forged {
                packet,
                edits,
                from,
                aim,
            } => (packet.to_vec(), edits, *from, *aim),
        };
        for e in edits.iter() {
            e.apply(&mut d);
        }
        let from = self.from(from);
        if !checked {
            // Aim at the live connection: its id, a nearby sequence number.
            if d.len() >= 12 && d[3] >= crate::proto::wire::kind::ACK && aim.conn {
                if let Some(c) = self.b_conn {
                    d[4..12].copy_from_slice(&c.to_le_bytes());
                }
            }
            if let (true, Some(delta)) = (d.len() >= 28 && d[3] != crate::proto::wire::kind::ACK, aim.seq) {
                let s = self.last_seq.wrapping_add(delta as i32 as u32);
                d[24..28].copy_from_slice(&s.to_le_bytes());
            }
            return Some((from, d));
        }
        // Checked: junk that must be dropped whatever the state (no valid
        // connection id), or a handshake that must change nothing for
        // good: any CONN_RESP (it answers no request of B's), any
        // CHALLENGE, CONN_REQs from anyone at any time (replays of A's,
        // forgeries with other nonces, or with B's live connection id as
        // the cookie): challenged, answered as duplicates, or, before A's
        // own arrives, planted as an unproven VC that A's request re-keys.
        let ok = match Packet::parse(&d) {
            Err(_) => true,
            Ok(Packet::ConnReq { .. }) => {
                if let (Some(c), true) = (self.b_conn, aim.live_cookie) {
                    d[12..20].copy_from_slice(&c.to_le_bytes());
                }
                true
            }
            Ok(Packet::ConnResp { .. } | Packet::Challenge { .. }) => true,
            Ok(Packet::Ack { conn, .. } | Packet::Seg { conn, .. } | Packet::Credit { conn, .. }) => {
                from != addr_a() || !self.known_conn(conn)
            }
        };
        ok.then_some((from, d))
    }

    /// Hands B refusal `j` (a `Junk::Refusal`); true if it had to be
    /// ignored (and was). Checked cases skip quotes that carry any id of
    /// the connection's.
    fn refusal(&mut self, j: &Junk<'_>, checked: bool) -> Option<bool> {
        let Junk::Refusal { quote, to, aim } = j else {
            return None;
        };
        let mut q = quote[..quote.len().min(20)].to_vec();
        let id = |q: &[u8]| q.get(4..12).map(|b| u64::from_le_bytes(b.try_into().unwrap()));
        if !checked && *aim && q.len() >= 12 {
            let live = self.a_conns.iter().chain(&self.b_nonces).next().copied();
            if let Some(c) = live {
                q[4..12].copy_from_slice(&c.to_le_bytes());
            }
        }
        let names = id(&q).is_some_and(|c| self.a_conns.contains(&c) || self.known_conn(c));
        if checked && names {
            return None;
        }
        let before = self.b.stats().refusals_unverified;
        let verdict = self.b.on_refused(self.from(*to), &q);
        let ignored = verdict == Refusal::Ignored;
        if !names {
            assert!(
                ignored,
                "a refusal naming no id of the connection ended it: {}",
                hex(&q)
            );
            assert_eq!(self.b.stats().refusals_unverified, before + 1);
        }
        Some(ignored)
    }

    /// Feeds one datagram to B and checks the drop oracle; true if it had
    /// to be dropped.
    fn feed(&mut self, from: SocketAddr, d: &[u8]) -> bool {
        let before = drops(self.b.stats());
        let parsed = Packet::parse(d);
        let must_drop = match &parsed {
            Err(_) => Some("does not parse"),
            Ok(Packet::ConnReq { .. }) => None,
            Ok(Packet::Challenge { echo, .. }) if !self.known_conn(*echo) => {
                Some("challenge of no request of the receiver")
            }
            Ok(_) if !self.b.has_vc(from) => Some("not a CONN_REQ, from an address with no VC"),
            Ok(Packet::ConnResp { .. }) => None,
            Ok(Packet::Ack { conn, .. } | Packet::Seg { conn, .. } | Packet::Credit { conn, .. })
                if !self.known_conn(*conn) =>
            {
                Some("connection id that is not the receiver's")
            }
            Ok(_) => None,
        };
        self.b_takes(from, d);
        // Whatever arrives, B's handshake state stays bounded.
        assert!(self.b.unproven_count() <= config().max_unproven);
        assert!(self.b.first_contacts_pending() <= 256);
        if let Some(why) = must_drop {
            let after = drops(self.b.stats());
            assert_eq!(
                after,
                before + 1,
                "a datagram with {why} was not counted as dropped once: {}",
                hex(d)
            );
            if parsed.is_err() {
                assert!(self.b.stats().dropped_malformed > 0);
            }
        }
        must_drop.is_some()
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

fn payload(seed: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    Rng(seed).fill(&mut v);
    v
}

/// Runs one case (module doc of `fuzz`); panics on a violation.
pub fn engine_datagrams(case: &EngineCase<'_>) -> EngineReport {
    let checked = case.checked;
    let mut p = Pair::new(case.seed);
    let mut report = EngineReport::default();
    let msgs = &case.lens[..1 + case.n_msgs as usize % MAX_MSGS];
    let mut sent: Vec<(u64, Vec<u8>)> = Vec::new();
    if checked && case.fill_unproven {
        // B's table of unproven VCs is full before A's first contact,
        // which B then challenges (conn.rs).
        for k in 0..config().max_unproven as u8 {
            let d = Packet::ConnReq {
                nonce: p.rng.next_u64() | 1,
                cookie: 0,
                isn: 1,
                window: 64,
            }
            .to_vec();
            p.feed(SocketAddr::from(([10, 9, 2, k], 9100)), &d);
        }
        assert_eq!(p.b.unproven_count(), config().max_unproven);
    }
    let script = &case.steps[..case.steps.len().min(MAX_STEPS)];
    let quiet = Step {
        send: true,
        junk: Default::default(),
    };
    let mut steps = 0usize;
    loop {
        let step = match script.len() {
            0 => &quiet,
            n => &script[steps % n],
        };
        // A script that never sends would never end: every 16th step does.
        if sent.len() < msgs.len() && (step.send || steps % 16 == 15) {
            let tag = sent.len() as u64;
            let v = payload(case.seed ^ tag << 32, msgs[sent.len()].len());
            p.a.send(addr_b(), hdr(tag), Box::new(v.clone()), SendMode::Eager, p.now)
                .unwrap();
            sent.push((tag, v));
        }
        for j in step.junk.iter().flatten() {
            if let Junk::Refusal { .. } = j {
                if let Some(ignored) = p.refusal(j, checked) {
                    report.dropped += ignored as u64;
                    report.inputs += 1;
                }
                continue;
            }
            let Some((from, d)) = p.junk(j, checked) else {
                continue;
            };
            report.dropped += p.feed(from, &d) as u64;
            report.inputs += 1;
        }
        p.step(if checked { 3.0 } else { 10.0 });
        steps += 1;
        if sent.len() == msgs.len() && p.idle() && p.seen.complete() >= sent.len() {
            break;
        }
        if !checked && steps > 3000 {
            break; // chaos may have wrecked the connection: fine
        }
        assert!(
            steps < 200_000,
            "checked case stuck: {} of {} messages",
            p.seen.complete(),
            sent.len()
        );
    }
    if checked {
        // Forged CONN_REQs from A's address were challenged, never accepted.
        assert_eq!(p.b.stats().peers_restarted, 0, "a forged CONN_REQ restarted the VC");
        let got: Vec<(u64, Option<usize>)> = p
            .seen
            .msgs
            .iter()
            .map(|(t, v)| (*t, v.as_ref().map(Vec::len)))
            .collect();
        let want: Vec<(u64, Option<usize>)> = sent.iter().map(|(t, v)| (*t, Some(v.len()))).collect();
        assert_eq!(got, want, "messages lost, duplicated or reordered");
        for ((t, v), (_, w)) in p.seen.msgs.iter().zip(&sent) {
            assert!(v.as_ref() == Some(w), "message {t} corrupted");
        }
        report.checked_msgs = sent.len() as u64;
    }
    // The engines keep working after the case.
    p.now += 10_000_000_000;
    p.a.handle_timeout(p.now);
    p.b.handle_timeout(p.now);
    p.step(0.0);
    report.b_stats = p.b.stats().clone();
    report
}
