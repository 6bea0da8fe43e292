//! Datagrams that are not what they claim: unknown, stale, mutated and
//! replayed ones among a real transfer.

use super::*;

#[test]
fn unknown_and_stale_datagrams_are_counted() {
    let mut e = Engine::seeded(test_config(), addr(0), 1);
    use wire::Packet;
    let ack = Packet::Ack {
        conn: 5,
        ack: 0,
        sack: 0,
    };
    e.handle_datagram(addr(1), &ack.to_vec(), 0);
    assert_eq!(e.stats().dropped_unknown_peer, 1);
    let resp = Packet::ConnResp {
        nonce: 5,
        echo: 6,
        isn: 0,
        window: 10,
    }
    .to_vec();
    e.handle_datagram(addr(1), &resp, 0);
    assert_eq!(e.stats().dropped_unknown_peer, 2);
    e.handle_datagram(addr(1), &resp[..3], 0);
    assert_eq!(e.stats().dropped_malformed, 1);
    // A CONN_REQ creates a VC; data with a wrong connection id is stale.
    let req = Packet::ConnReq {
        nonce: 77,
        cookie: 0,
        isn: 100,
        window: 64,
    };
    e.handle_datagram(addr(1), &req.to_vec(), 0);
    assert_eq!(e.peer_count(), 1);
    let nop = Packet::Seg {
        conn: 12345,
        ack: 0,
        sack: 0,
        seq: 100,
        frame: wire::Frame::Nop,
    };
    e.handle_datagram(addr(1), &nop.to_vec(), 0);
    assert_eq!(e.stats().dropped_stale, 1);
    // A CONN_REQ proves nothing (its source may be forged): no PeerUp yet.
    assert!(e.poll_event().is_none());
}

/// Random and mutated datagrams, from the real peer's address and from
/// strangers, while a real transfer runs: nothing panics and the transfer
/// completes intact.
#[test]
fn fuzzed_datagrams_do_not_disturb_a_transfer() {
    for seed in 0..4u64 {
        let cfg = EngineConfig {
            max_datagram: 4000,
            ..test_config()
        };
        let mut sim = Sim::new(2, cfg, Link::lossy(5.0), 100 + seed);
        sim.record = Some(Vec::new());
        let mut rng = Rng::new(seed);
        let count = 60u64;
        for k in 0..count {
            let len = rng.below(9000) as usize;
            sim.eng(0)
                .send(addr(1), hdr(k), Box::new(payload(seed, k, len)), SendMode::Eager, 0)
                .unwrap();
        }
        let big = sim
            .eng(0)
            .send(
                addr(1),
                hdr(1000),
                Box::new(PatternSource { len: 2 << 20, salt: 9 }),
                SendMode::Eager,
                0,
            )
            .unwrap();
        let mut log = logs(2);
        let mut injected = 0u32;
        let mut steps = 0u64;
        let stranger = SocketAddr::from(([10, 9, 9, 9], 1));
        loop {
            for (i, l) in log.iter_mut().enumerate() {
                while let Some(ev) = sim.nodes[i].poll_event() {
                    if let Event::Msg {
                        body: MsgBody::Rndv(rid),
                        ..
                    } = &ev
                    {
                        let now = sim.now;
                        sim.eng(i).accept(
                            *rid,
                            Box::new(PatternSink {
                                cap: 2 << 20,
                                salt: 9,
                                written: 0,
                            }),
                            now,
                        );
                    }
                    l.record(ev);
                }
            }
            steps += 1;
            // Inject a few hostile datagrams per step, early and late.
            if steps.is_multiple_of(2) && injected < 6000 {
                for _ in 0..3 {
                    let to = rng.below(2) as usize;
                    let (from, d) = hostile(&mut rng, sim.record.as_ref().unwrap(), to, stranger);
                    sim.inject(from, to, d, rng.below(50_000));
                    injected += 1;
                }
            }
            let finished = log[1].msgs.len() as u64 == count
                && log[0].send_done.len() as u64 == count + 1
                && log[1].recv_done.len() == 1;
            if finished && injected >= 6000 {
                break;
            }
            assert!(sim.now < 120_000_000_000, "transfer stuck (seed {seed})");
            if !sim.step() && !finished {
                panic!(
                    "idle before done (seed {seed})\n{}\n{}\n{:?}\n{:?}",
                    sim.nodes[0].engine.debug_state(),
                    sim.nodes[1].engine.debug_state(),
                    sim.nodes[0].engine.stats(),
                    sim.nodes[1].engine.stats()
                );
            }
        }
        assert!(log[0].send_done.contains(&big));
        assert_eq!(log[1].recv_done[0].1, 2 << 20);
        for (k, m) in log[1].msgs.iter().enumerate() {
            assert_eq!(m.1.tag, k as u64);
            assert!(m.2 == payload(seed, k as u64, m.1.len as usize));
        }
        // Strangers' VCs may come and go; the real pair never fails.
        for (i, l) in log.iter().enumerate() {
            assert!(!l.peer_failed.contains(&addr(1 - i)), "seed {seed}");
        }
        let s = sim.nodes[1].engine.stats();
        assert!(s.dropped_malformed + s.dropped_stale + s.dropped_unknown_peer > 100);
    }
}

/// One hostile datagram for node `to`. A datagram that carries the right
/// connection id and a fresh in-window sequence number is, by design,
/// indistinguishable from genuine traffic (the UDP checksum guards against
/// corruption, the random nonce against blind forgery); so mutations reach
/// the engine either from another address, with a corrupted connection id,
/// as exact replays, or as CONN_REQs from the peer's address, which change
/// nothing without the cookie of a CHALLENGE (tests/handshake.rs).
fn hostile(
    rng: &mut Rng,
    rec: &[(usize, SocketAddr, Vec<u8>)],
    to: usize,
    stranger: SocketAddr,
) -> (SocketAddr, Vec<u8>) {
    let peer = addr(1 - to);
    // Genuine datagrams of the peer to this node: replaying those from the
    // peer's address is what a duplicating, delaying network does. (Replaying
    // what the peer sent to a third address, as if to us, would take an
    // attacker who can both observe and spoof; the handshake does not
    // defend against that.)
    let recorded = |rng: &mut Rng| -> Option<Vec<u8>> {
        let mine: Vec<&Vec<u8>> = rec
            .iter()
            .rev()
            .take(2000)
            .filter(|r| r.0 == 1 - to && r.1 == addr(to))
            .map(|r| &r.2)
            .collect();
        (!mine.is_empty()).then(|| mine[rng.below(mine.len() as u64) as usize].clone())
    };
    match rng.below(10) {
        0..=3 => {
            let mut v = vec![0u8; rng.below(120) as usize];
            rng.fill(&mut v);
            if v.len() >= 4 && rng.below(2) == 0 {
                v[0..2].copy_from_slice(&wire::MAGIC.to_le_bytes());
                v[2] = wire::VERSION;
                v[3] = [1, 2, 3, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17][rng.below(11) as usize];
            }
            (if rng.below(2) == 0 { stranger } else { peer }, v)
        }
        4..=6 => {
            let mut d = recorded(rng).unwrap_or_default();
            mutate(rng, &mut d);
            (if rng.below(2) == 0 { stranger } else { addr(to) }, d)
        }
        7 | 8 => {
            let mut d = recorded(rng).unwrap_or_default();
            if d.len() >= 20 {
                // The receiver's connection id (the echo of a CONN_RESP),
                // or the nonce or cookie of a CONN_REQ.
                let at = match d[3] {
                    wire::kind::CONN_RESP => 12,
                    wire::kind::CONN_REQ => [4, 12][rng.below(2) as usize],
                    _ => 4,
                };
                d[at + rng.below(8) as usize] ^= 1 + rng.below(255) as u8;
                mutate(rng, &mut d);
                (peer, d)
            } else {
                (stranger, d)
            }
        }
        _ => (peer, recorded(rng).unwrap_or_default()),
    }
}

/// Flips bits, truncates, extends, or rewrites one header field.
fn mutate(rng: &mut Rng, d: &mut Vec<u8>) {
    match rng.below(6) {
        0 if !d.is_empty() => {
            let i = rng.below(d.len() as u64) as usize;
            d[i] ^= 1 << rng.below(8);
        }
        1 => {
            let n = rng.below(d.len() as u64 + 1) as usize;
            d.truncate(n);
        }
        2 => {
            let mut extra = vec![0u8; rng.below(32) as usize + 1];
            rng.fill(&mut extra);
            d.extend_from_slice(&extra);
        }
        // Sequence number or ack field somewhere plausible.
        3 if d.len() >= 28 => {
            let at = [12usize, 24][rng.below(2) as usize];
            let v = rng.next_u64() as u32;
            d[at..at + 4].copy_from_slice(&v.to_le_bytes());
        }
        // Offsets and lengths of frame bodies.
        4 if d.len() >= 36 => {
            let at = 28 + 8 * rng.below(((d.len() - 28) / 8).min(4) as u64) as usize;
            let v = match rng.below(3) {
                0 => u64::MAX - rng.below(100),
                1 => 1u64 << rng.below(64),
                _ => rng.next_u64(),
            };
            d[at..at + 8].copy_from_slice(&v.to_le_bytes());
        }
        _ => {} // replay unchanged
    }
}

/// A run of datagrams (as a GRO read brings them, `Engine::handle_run`)
/// with a malformed one and a stale one among its segments: those two are
/// counted and dropped as `handle_datagram` drops them, and the segments
/// around them are taken.
#[test]
fn a_run_takes_its_segments_around_what_it_drops() {
    let mut sim = Sim::new(2, test_config(), Link::clean(), 7);
    sim.eng(0)
        .send(addr(1), hdr(0), Box::new(payload(1, 0, 10)), SendMode::Eager, 0)
        .unwrap();
    let mut log = logs(2);
    sim.run(1_000_000_000, |_, i, ev| log[i].record(ev), |_| false);
    assert_eq!(log[1].msgs.len(), 1, "the handshake and a first message");
    // Node 0's next message, captured instead of delivered.
    sim.record = Some(Vec::new());
    sim.drop_if = Some(Box::new(|src, _, _| src == 0));
    let len = 5000;
    sim.eng(0)
        .send(addr(1), hdr(1), Box::new(payload(1, 1, len)), SendMode::Eager, 0)
        .unwrap();
    sim.flush();
    let segs: Vec<Vec<u8>> = (sim.record.take().unwrap().into_iter())
        .filter(|(s, _, _)| *s == 0)
        .map(|(_, _, d)| d)
        .collect();
    assert_eq!(segs.len(), 4, "5000 bytes in 1472-byte datagrams");
    let size = segs[0].len();
    let junk = vec![0xEE; size];
    let mut stale = segs[1].clone();
    stale[wire::field::CONN][0] ^= 1;
    let mut run = Vec::new();
    for d in [&segs[0], &junk, &segs[1], &stale, &segs[2], &segs[3]] {
        run.extend_from_slice(d);
    }
    let before = sim.eng(1).stats().clone();
    let now = sim.now;
    assert_eq!(sim.eng(1).handle_run(addr(0), &run, size, now), run.len());
    let after = sim.eng(1).stats();
    assert_eq!(after.dropped_malformed, before.dropped_malformed + 1);
    assert_eq!(after.dropped_stale, before.dropped_stale + 1);
    assert_eq!(after.datagrams_in, before.datagrams_in + 6, "each counted in once");
    let mut got = None;
    while let Some(ev) = sim.nodes[1].poll_event() {
        if let Event::Msg {
            hdr,
            body: MsgBody::Eager(v),
            ..
        } = ev
        {
            got = Some((hdr.tag, v.into_vec()));
        }
    }
    assert_eq!(got, Some((1, payload(1, 1, len))));
}

/// The same traffic delivered datagram by datagram and in GRO runs: the
/// same messages arrive, and the engines count the same datagrams, ACKs
/// and drops (a run only saves the per-datagram lookups).
#[test]
fn runs_and_single_datagrams_give_the_same_transfer() {
    let outcome = |gro: bool| {
        let mut sim = Sim::new(2, test_config(), Link::clean(), 11);
        sim.gro = gro;
        for k in 0..20u64 {
            let len = (k as usize * 997) % 9000;
            for s in 0..2 {
                let p = payload(s as u64, k, len);
                sim.eng(s)
                    .send(addr(1 - s), hdr(k), Box::new(p), SendMode::Eager, 0)
                    .unwrap();
            }
        }
        let mut log = logs(2);
        sim.run(10_000_000_000, |_, i, ev| log[i].record(ev), |_| false);
        let msgs: Vec<_> = log.iter().map(|l| l.msgs.clone()).collect();
        let stats: Vec<String> = (0..2).map(|i| format!("{:?}", sim.eng(i).stats())).collect();
        (msgs, stats)
    };
    let (one, one_stats) = outcome(false);
    let (runs, runs_stats) = outcome(true);
    assert_eq!(one[1].len(), 20);
    assert_eq!(one, runs);
    assert_eq!(one_stats, runs_stats);
}
