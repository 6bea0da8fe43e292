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
