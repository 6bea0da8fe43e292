//! Peers that die, restart, go quiet or are forgotten: every operation
//! completes (with an error where it must), nothing hangs.

use super::*;

#[test]
fn peer_death_fails_everything() {
    let cfg = EngineConfig {
        peer_timeout_ns: 200_000_000,
        max_retrans: 8,
        ..test_config()
    };
    let mut sim = Sim::new(2, cfg.clone(), Link::clean(), 31);
    let mut ids = Vec::new();
    for k in 0..20 {
        ids.push(
            sim.eng(0)
                .send(addr(1), hdr(k), Box::new(vec![1u8; 5000]), SendMode::Eager, 0)
                .unwrap(),
        );
    }
    // A big pull the receiver accepts, and one it leaves pending.
    ids.push(
        sim.eng(0)
            .send(
                addr(1),
                hdr(100),
                Box::new(PatternSource { len: 50 << 20, salt: 3 }),
                SendMode::Eager,
                0,
            )
            .unwrap(),
    );
    ids.push(
        sim.eng(0)
            .send(
                addr(1),
                hdr(101),
                Box::new(PatternSource { len: 1 << 20, salt: 3 }),
                SendMode::Eager,
                0,
            )
            .unwrap(),
    );
    let mut log = logs(2);
    let mut cut_at = None;
    sim.run(
        5_000_000_000,
        |sim, i, ev| {
            if let Event::Msg {
                body: MsgBody::Rndv(rid),
                hdr: h,
                ..
            } = &ev
            {
                if h.tag == 100 {
                    let now = sim.now;
                    sim.eng(i).accept(
                        *rid,
                        Box::new(PatternSink {
                            cap: 50 << 20,
                            salt: 3,
                            written: 0,
                        }),
                        now,
                    );
                }
            }
            if let Event::RecvDone { .. } = ev {
                panic!("transfer should not finish");
            }
            log[i].record(ev);
        },
        |sim| {
            // Cut the cable once the pull is under way.
            if cut_at.is_none() && sim.nodes[1].engine.stats().bytes_in > 5 << 20 {
                cut_at = Some(sim.now);
            }
            cut_at.is_some()
        },
    );
    sim.nodes[1].down = true;
    let t0 = sim.now;
    // Later sends also fail (they queue on the dying VC).
    let ids_more = vec![sim
        .eng(0)
        .send(addr(1), hdr(200), Box::new(vec![0u8; 8]), SendMode::Eager, t0)
        .unwrap()];
    sim.run(10_000_000_000, |_, i, ev| log[i].record(ev), |_| false);
    let bound = cfg.peer_timeout_ns + cfg.peer_timeout_ns / 4 + 10_000_000;
    assert!(sim.now - t0 <= bound, "took {} ns", sim.now - t0);
    for (i, l) in log.iter().enumerate() {
        assert_eq!(l.peer_failed, vec![addr(1 - i)], "node {i}");
    }
    let failed: Vec<MsgId> = log[0].send_failed.iter().map(|f| f.0).collect();
    let done = &log[0].send_done;
    let mut all: Vec<MsgId> = failed.iter().chain(done.iter()).copied().collect();
    all.sort_unstable();
    ids.extend(ids_more);
    assert_eq!(all, ids);
    assert!(failed.contains(&ids[20]) && failed.contains(&ids[21]) && failed.contains(&ids[22]));
    assert!(log[0].send_failed.iter().all(|f| f.1 == EngineError::PeerUnreachable));
    assert_eq!(log[1].recv_failed.len(), 1);
    for n in &sim.nodes {
        assert!(!n.engine.has_pending_work());
        assert_eq!(n.engine.peer_count(), 0);
    }
    // The peer comes back: a new send handshakes afresh and works.
    sim.nodes[1].down = false;
    let now = sim.now;
    let id = sim
        .eng(0)
        .send(addr(1), hdr(300), Box::new(vec![9u8; 9]), SendMode::Eager, now)
        .unwrap();
    let mut log = logs(2);
    sim.run(10_000_000_000, |_, i, ev| log[i].record(ev), |_| false);
    assert_eq!(log[0].send_done, vec![id]);
    assert_eq!(log[1].msgs.len(), 1);
}

/// Sends the caller completed at once (`SendPayload::Copied`) are
/// delivered like any other but produce no event at the sender; the engine
/// counts them until acknowledged, and a dead peer drops them from the
/// count without a SendFailed.
#[test]
fn quiet_sends_are_counted_not_reported() {
    let cfg = EngineConfig {
        peer_timeout_ns: 100_000_000,
        ..test_config()
    };
    let mut sim = Sim::new(2, cfg, Link::lossy(10.0), 41);
    let quiet = |k: u64, len: usize| SendPayload::Copied(Payload::from_vec(payload(41, k, len)));
    for k in 0..30u64 {
        // Inline, heap-held, and multi-segment copies.
        let len = [8, 500, 3000][k as usize % 3];
        sim.eng(0)
            .send(addr(1), hdr(k), quiet(k, len), SendMode::Eager, 0)
            .unwrap();
    }
    let loud = sim
        .eng(0)
        .send(addr(1), hdr(99), Box::new(vec![7u8; 10]), SendMode::Eager, 0)
        .unwrap();
    assert_eq!(sim.eng(0).quiet_in_flight(), 30);
    let mut log = logs(2);
    sim.run(
        10_000_000_000,
        |_, i, ev| log[i].record(ev),
        |sim| sim.nodes[0].engine.quiet_in_flight() == 0 && !sim.nodes[0].engine.has_unacked(),
    );
    assert_eq!(sim.eng(0).quiet_in_flight(), 0);
    assert_eq!(log[0].send_done, vec![loud]);
    assert_eq!(log[1].msgs.len(), 31);
    for (k, (_, h, v)) in log[1].msgs.iter().take(30).enumerate() {
        assert_eq!(h.tag, k as u64);
        assert_eq!(*v, payload(41, k as u64, [8, 500, 3000][k % 3]));
    }
    // The peer dies with quiet sends outstanding.
    sim.nodes[1].down = true;
    let now = sim.now;
    for k in 0..3u64 {
        sim.eng(0)
            .send(addr(1), hdr(k), quiet(k, 8), SendMode::Eager, now)
            .unwrap();
    }
    let mut log = logs(2);
    sim.run(1_000_000_000, |_, i, ev| log[i].record(ev), |_| false);
    assert_eq!(log[0].peer_failed, vec![addr(1)]);
    assert!(log[0].send_failed.is_empty() && log[0].send_done.is_empty());
    assert_eq!(sim.eng(0).quiet_in_flight(), 0);
}

#[test]
fn handshake_to_nobody_fails() {
    let cfg = EngineConfig {
        peer_timeout_ns: 100_000_000,
        ..test_config()
    };
    let mut sim = Sim::new(2, cfg, Link::clean(), 3);
    sim.nodes[1].down = true;
    let id = sim
        .eng(0)
        .send(addr(1), hdr(1), Box::new(vec![1u8]), SendMode::Eager, 0)
        .unwrap();
    let mut log = logs(2);
    sim.run(1_000_000_000, |_, i, ev| log[i].record(ev), |_| false);
    assert_eq!(log[0].send_failed, vec![(id, EngineError::PeerUnreachable)]);
    assert_eq!(log[0].peer_failed, vec![addr(1)]);
    assert!(sim.now <= 110_000_000);
}

#[test]
fn peer_restart_at_same_address() {
    let cfg = test_config();
    let (mut sim, pending) = vc_with_pending_rndv(41);
    // Node 1 restarts; a datagram of its old incarnation still in flight.
    let stale = wire::Packet::Ack {
        conn: 0x1234,
        ack: 0,
        sack: 0,
    }
    .to_vec();
    sim.restart(1, cfg, 999);
    sim.inject(addr(1), 0, stale, 0);
    let now = sim.now;
    sim.eng(1)
        .send(addr(0), hdr(3), Box::new(vec![3u8; 10]), SendMode::Eager, now)
        .unwrap();
    let mut log = logs(2);
    sim.run_for(100_000_000, |_, i, ev| log[i].record(ev));
    assert_eq!(log[0].send_failed, vec![(pending, EngineError::PeerRestarted)]);
    assert_eq!(log[0].peer_failed, vec![addr(1)]);
    // The new incarnation is announced too (the endpoint reconnects its socket).
    assert_eq!(log[0].peer_up, vec![addr(1)]);
    assert_eq!(log[0].msgs.len(), 1);
    assert_eq!(log[0].msgs[0].1.tag, 3);
    assert_eq!(sim.nodes[0].engine.stats().peers_restarted, 1);
    assert!(sim.nodes[0].engine.stats().dropped_stale >= 1);
    // Node 0 challenged the new incarnation's CONN_REQ, which answered.
    assert_eq!(sim.nodes[0].engine.stats().conn_reqs_challenged, 1);
    assert_eq!(sim.nodes[1].engine.stats().challenges_answered, 1);
    // And the new VC works the other way too.
    let now = sim.now;
    let id = sim
        .eng(0)
        .send(addr(1), hdr(4), Box::new(vec![4u8; 10]), SendMode::Eager, now)
        .unwrap();
    let mut log = logs(2);
    sim.run_for(100_000_000, |_, i, ev| log[i].record(ev));
    assert_eq!(log[0].send_done, vec![id]);
    assert_eq!(log[1].msgs[0].1.tag, 4);
}

#[test]
fn restarted_receiver_drops_old_incarnation_data() {
    // Node 0 keeps sending to node 1's old incarnation; the new node 1
    // (no VC yet) drops that data as from an unknown peer until node 0
    // gives up; a fresh handshake then works.
    let cfg = EngineConfig {
        peer_timeout_ns: 100_000_000,
        max_retrans: 5,
        ..test_config()
    };
    let mut sim = Sim::new(2, cfg.clone(), Link::clean(), 43);
    sim.eng(0)
        .send(addr(1), hdr(1), Box::new(vec![1u8; 10]), SendMode::Eager, 0)
        .unwrap();
    sim.run(1_000_000_000, |_, _, _| {}, |_| false);
    sim.restart(1, cfg, 4242);
    let now = sim.now;
    let id = sim
        .eng(0)
        .send(addr(1), hdr(2), Box::new(vec![2u8; 10]), SendMode::Eager, now)
        .unwrap();
    let mut log = logs(2);
    sim.run(1_000_000_000, |_, i, ev| log[i].record(ev), |_| false);
    assert_eq!(log[0].send_failed, vec![(id, EngineError::PeerUnreachable)]);
    assert!(log[1].msgs.is_empty());
    assert!(sim.nodes[1].engine.stats().dropped_unknown_peer > 0);
}

#[test]
fn forget_peer_fails_ops_without_peer_failed() {
    let mut sim = Sim::new(2, test_config(), Link::clean(), 61);
    let id = sim
        .eng(0)
        .send(addr(1), hdr(1), Box::new(vec![1u8; 10]), SendMode::Rendezvous, 0)
        .unwrap();
    sim.eng(0).forget_peer(addr(1));
    let ev: Vec<_> = std::iter::from_fn(|| sim.nodes[0].poll_event()).collect();
    assert!(matches!(ev.as_slice(), [Event::SendFailed { id: x, err: EngineError::PeerForgotten }] if *x == id));
    assert!(!sim.nodes[0].engine.has_pending_work());
    assert_eq!(
        sim.eng(0).send(
            addr(1)
                .ip()
                .to_string()
                .parse::<std::net::IpAddr>()
                .map(|ip| SocketAddr::new(ip, 0))
                .unwrap(),
            hdr(0),
            Box::new(Vec::new()),
            SendMode::Eager,
            0
        ),
        Err(EngineError::InvalidAddress)
    );
}

#[test]
fn keepalive_tells_a_quiet_peer_from_a_dead_one() {
    let cfg = EngineConfig {
        peer_timeout_ns: 100_000_000,
        ..test_config()
    };
    let mut sim = Sim::new(2, cfg.clone(), Link::clean(), 81);
    // The receiver sits on the RTS without accepting: nothing is unacked,
    // yet the send is outstanding.
    let id = sim
        .eng(0)
        .send(addr(1), hdr(1), Box::new(vec![1u8; 100]), SendMode::Rendezvous, 0)
        .unwrap();
    let mut log = logs(2);
    sim.run_for(5 * cfg.peer_timeout_ns, |_, i, ev| log[i].record(ev));
    assert_eq!(log[1].rndv.len(), 1);
    assert!(
        log[0].send_failed.is_empty() && log[0].peer_failed.is_empty(),
        "a live peer is not declared dead"
    );
    assert!(sim.nodes[0].engine.stats().keepalives_sent >= 10);
    sim.nodes[1].down = true;
    let t0 = sim.now;
    sim.run(10 * cfg.peer_timeout_ns, |_, i, ev| log[i].record(ev), |_| false);
    assert_eq!(log[0].send_failed, vec![(id, EngineError::PeerUnreachable)]);
    assert_eq!(log[0].peer_failed, vec![addr(1)]);
    assert!(sim.now - t0 <= cfg.peer_timeout_ns + cfg.peer_timeout_ns / 4 + 1_000_000);
}

/// A question acknowledged by a peer that then died leaves nothing of ours
/// unacknowledged: without more, the engine never finds the peer dead, and
/// what waits for the answer (an RMA read's response) would wait for ever.
/// An answer the caller awaits (`Engine::answer_due`) keeps the peer
/// watched as an outstanding send does: keepalives while it lives, the
/// peer timeout once it is gone; the answer ends the watch.
#[test]
fn an_awaited_answer_keeps_the_peer_watched() {
    let cfg = EngineConfig {
        peer_timeout_ns: 100_000_000,
        ..test_config()
    };
    let mut sim = Sim::new(2, cfg.clone(), Link::clean(), 83);
    let mut log = logs(2);
    let q = sim
        .eng(0)
        .send(addr(1), hdr(1), Box::new(vec![1u8; 40]), SendMode::Eager, 0)
        .unwrap();
    sim.eng(0).answer_due(addr(1));
    sim.run_for(5 * cfg.peer_timeout_ns, |_, i, ev| log[i].record(ev));
    assert_eq!(log[0].send_done, vec![q], "the question is acknowledged");
    assert!(log[0].peer_failed.is_empty(), "a live peer is not declared dead");
    let kept = sim.nodes[0].engine.stats().keepalives_sent;
    assert!(kept >= 10, "the awaited peer is watched: {kept} keepalives");
    // The answer comes: the watch ends, the idle VC sends nothing more.
    let now = sim.now;
    sim.eng(1)
        .send(addr(0), hdr(2), Box::new(vec![2u8; 40]), SendMode::Eager, now)
        .unwrap();
    sim.run_for(cfg.peer_timeout_ns, |_, i, ev| log[i].record(ev));
    assert_eq!(log[0].msgs.len(), 1);
    sim.eng(0).answer_came(addr(1));
    // (A keepalive already on its way when the answer was taken goes.)
    sim.run_for(cfg.peer_timeout_ns / 2, |_, i, ev| log[i].record(ev));
    let kept = sim.nodes[0].engine.stats().keepalives_sent;
    sim.run_for(5 * cfg.peer_timeout_ns, |_, i, ev| log[i].record(ev));
    assert_eq!(
        sim.nodes[0].engine.stats().keepalives_sent,
        kept,
        "no answer due, no watch"
    );
    // A second question, acknowledged; then the peer dies without a word.
    let now = sim.now;
    sim.eng(0)
        .send(addr(1), hdr(3), Box::new(vec![3u8; 40]), SendMode::Eager, now)
        .unwrap();
    sim.run_for(cfg.peer_timeout_ns / 10, |_, i, ev| log[i].record(ev));
    assert_eq!(log[0].send_done.len(), 2, "the second question is acknowledged");
    sim.nodes[1].down = true;
    sim.run_for(5 * cfg.peer_timeout_ns, |_, i, ev| log[i].record(ev));
    assert!(
        log[0].peer_failed.is_empty(),
        "nothing awaited: the dead peer goes unnoticed"
    );
    // Awaiting its answer finds it dead within the peer timeout.
    let t0 = sim.now;
    sim.eng(0).answer_due(addr(1));
    sim.run(10 * cfg.peer_timeout_ns, |_, i, ev| log[i].record(ev), |_| false);
    assert_eq!(log[0].peer_failed, vec![addr(1)]);
    assert!(sim.now - t0 <= cfg.peer_timeout_ns + cfg.peer_timeout_ns / 4 + 1_000_000);
}
