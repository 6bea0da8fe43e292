//! Engine tests over the simulated network (`sim.rs`), in virtual time.
//! The handshake's defences against forgery are in `tests/handshake.rs`.

use super::sim::{addr, prop_config, test_config, Link, PatternSink, PatternSource, Rng, Sim};
use super::wire;
use super::*;
use proptest::collection::vec;
use proptest::prelude::*;
use std::sync::{Arc, Mutex};

mod credits;
mod eager;
mod failure;
mod first_contact;
mod handshake;
mod junk;
mod many;
mod push;
mod recovery;
mod refused;
mod rndv;
mod run;

#[derive(Default)]
struct Log {
    msgs: Vec<(SocketAddr, MsgHdr, Vec<u8>)>,
    rndv: Vec<(SocketAddr, MsgHdr, RndvId)>,
    send_done: Vec<MsgId>,
    send_failed: Vec<(MsgId, EngineError)>,
    recv_done: Vec<(RndvId, usize)>,
    recv_failed: Vec<(RndvId, EngineError)>,
    peer_failed: Vec<SocketAddr>,
    peer_up: Vec<SocketAddr>,
}

impl Log {
    fn record(&mut self, ev: Event) {
        match ev {
            Event::Msg {
                peer,
                hdr,
                body: MsgBody::Eager(v),
            } => self.msgs.push((peer, hdr, v.into_vec())),
            Event::Msg {
                peer,
                hdr,
                body: MsgBody::Rndv(rid),
            } => self.rndv.push((peer, hdr, rid)),
            Event::SendDone { id } => self.send_done.push(id),
            Event::SendFailed { id, err } => self.send_failed.push((id, err)),
            Event::RecvDone { rid, written, .. } => self.recv_done.push((rid, written)),
            Event::RecvFailed { rid, err, .. } => self.recv_failed.push((rid, err)),
            Event::PeerFailed { peer } => self.peer_failed.push(peer),
            Event::PeerUp { peer } => self.peer_up.push(peer),
        }
    }
}

/// Hands over everything either engine has to send, at `now` (no timer
/// fires unless the caller fired it), as the endpoint does, until
/// neither has more; `on_event` sees each engine's events (its index, the
/// engine, the event).
fn pump_pair(e: &mut [Engine; 2], now: u64, mut on_event: impl FnMut(usize, &mut Engine, Event)) {
    let addrs = [addr(0), addr(1)];
    let mut buf = vec![0u8; 2048];
    loop {
        let mut moved = false;
        for s in 0..2 {
            while let Some((dst, n)) = e[s].poll_transmit(now, &mut buf) {
                assert_eq!(dst, addrs[1 - s]);
                e[1 - s].handle_run(addrs[s], &buf[..n], n, now);
                moved = true;
            }
            while let Some(ev) = e[s].poll_event() {
                on_event(s, &mut e[s], ev);
            }
        }
        if !moved {
            return;
        }
    }
}

/// Two engines at `addr(0)` and `addr(1)`, connected: a message each way,
/// every ACK in (the delayed ones by their timers). Returns them and the
/// time they are at.
fn connected_pair(cfg: EngineConfig) -> ([Engine; 2], u64) {
    let mut e = [Engine::seeded(cfg.clone(), addr(0), 1), Engine::seeded(cfg, addr(1), 2)];
    for (s, d) in [(0, addr(1)), (1, addr(0))] {
        e[s].send(d, hdr(0), Box::new(vec![0u8; 8]), SendMode::Eager, 0)
            .unwrap();
        pump_pair(&mut e, 0, |_, _, _| {});
    }
    let now = 1_000_000_000;
    for x in e.iter_mut() {
        x.handle_timeout(now);
    }
    pump_pair(&mut e, now, |_, _, _| {});
    assert!(!e[0].has_unacked() && !e[1].has_unacked());
    (e, now)
}

fn logs(n: usize) -> Vec<Log> {
    (0..n).map(|_| Log::default()).collect()
}

fn payload(seed: u64, k: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    Rng::new(seed ^ (k << 20) ^ 0xAB).fill(&mut v);
    v
}

fn hdr(tag: u64) -> MsgHdr {
    MsgHdr {
        tag,
        data: tag.wrapping_mul(3),
        len: 0,
        flags: MsgHdr::TAGGED,
    }
}

/// Runs `sim` for up to `deadline_ns` of virtual time, accepting every
/// announced rendezvous, as its RTS arrives, into a `PatternSink` of `cap`
/// bytes and `salt`; returns every node's events.
fn run_accepting(sim: &mut Sim, deadline_ns: u64, cap: usize, salt: u8) -> Vec<Log> {
    run_accepting_into(sim, deadline_ns, |_| Box::new(PatternSink { cap, salt, written: 0 }))
}

/// `run_accepting`, with the sink for the message of tag t made by `sink(t)`.
fn run_accepting_into(sim: &mut Sim, deadline_ns: u64, sink: impl Fn(usize) -> Box<dyn RecvSink>) -> Vec<Log> {
    let mut log = logs(sim.nodes.len());
    sim.run(
        deadline_ns,
        |sim, i, ev| {
            if let Event::Msg {
                body: MsgBody::Rndv(rid),
                hdr: h,
                ..
            } = &ev
            {
                let now = sim.now;
                let sink = sink(h.tag as usize);
                sim.eng(i).accept(*rid, sink, now);
            }
            log[i].record(ev);
        },
        |_| false,
    );
    log
}

#[test]
fn engine_is_send() {
    fn assert_send<T: Send>() {}
    assert_send::<Engine>();
}

/// Two nodes with an established VC (one eager message delivered) and a
/// rendezvous send from node 0 pending at node 1 (announced, never
/// accepted): the simulation and the pending send's id.
fn vc_with_pending_rndv(seed: u64) -> (Sim, MsgId) {
    let mut sim = Sim::new(2, test_config(), Link::clean(), seed);
    sim.eng(0)
        .send(addr(1), hdr(1), Box::new(vec![1u8; 10]), SendMode::Eager, 0)
        .unwrap();
    let mut log = logs(2);
    sim.run_for(100_000_000, |_, i, ev| log[i].record(ev));
    assert_eq!(log[1].msgs.len(), 1);
    // Each end announced the VC once, when the other had echoed its id.
    assert_eq!((&log[0].peer_up, &log[1].peer_up), (&vec![addr(1)], &vec![addr(0)]));
    let now = sim.now;
    let pending = sim
        .eng(0)
        .send(addr(1), hdr(2), Box::new(vec![0u8; 1 << 20]), SendMode::Rendezvous, now)
        .unwrap();
    sim.run_for(100_000_000, |_, i, ev| log[i].record(ev));
    assert_eq!(log[1].rndv.len(), 1);
    (sim, pending)
}

/// A sink that checks content and counts how often each byte is written.
struct Coverage {
    salt: u8,
    marks: Arc<Mutex<Vec<u8>>>,
}

impl RecvSink for Coverage {
    fn capacity(&self) -> usize {
        self.marks.lock().unwrap().len()
    }
    fn write_at(&mut self, offset: usize, src: &[u8]) {
        let mut m = self.marks.lock().unwrap();
        for (i, &b) in src.iter().enumerate() {
            assert_eq!(b, super::sim::pattern_byte(offset + i, self.salt));
            m[offset + i] += 1;
        }
    }
}
