//! Engines with many peers: past `timers::WALK_MAX` VCs the engine keeps
//! its VCs' deadlines in a heap, and every `poll_timeout` of these tests
//! is checked against a walk of all the VCs (`Engine::poll_timeout`).

use super::*;

/// Twelve nodes over a lossy, duplicating, reordering link, each sending
/// three messages to every other: every message arrives exactly once, in
/// order from each sender, intact, and every send completes.
#[test]
fn all_to_all_among_many_peers_under_loss() {
    let n = 12;
    let mut sim = Sim::new(n, test_config(), Link::lossy(5.0), 23);
    let mut ids: Vec<Vec<MsgId>> = vec![Vec::new(); n];
    for (s, ids) in ids.iter_mut().enumerate() {
        for k in 0..3u64 {
            for r in (0..n).filter(|&r| r != s) {
                let p = payload((s * n + r) as u64, k, 100 + 300 * k as usize);
                ids.push(
                    sim.eng(s)
                        .send(addr(r), hdr(k), Box::new(p), SendMode::Eager, 0)
                        .unwrap(),
                );
            }
        }
    }
    let mut log = logs(n);
    sim.run(60_000_000_000, |_, i, ev| log[i].record(ev), |_| false);
    for r in 0..n {
        let l = &log[r];
        assert!(
            l.peer_failed.is_empty() && l.send_failed.is_empty(),
            "failures at node {r}"
        );
        assert_eq!(l.msgs.len(), 3 * (n - 1), "node {r}");
        for s in (0..n).filter(|&s| s != r) {
            let from: Vec<_> = l.msgs.iter().filter(|(p, ..)| *p == addr(s)).collect();
            assert_eq!(from.len(), 3, "node {r} from {s}");
            for (k, (_, h, v)) in from.iter().enumerate() {
                assert_eq!(h.tag, k as u64, "node {r} from {s}: out of order");
                assert!(*v == payload((s * n + r) as u64, k as u64, 100 + 300 * k), "corrupt");
            }
        }
        let mut done = l.send_done.clone();
        done.sort_unstable();
        assert_eq!(done, ids[r], "node {r}'s sends");
    }
}

/// One of eleven peers goes silent while messages to it are in flight:
/// its timers (retransmissions, then the peer timeout) fail it and its
/// sends alone; the ten others get theirs.
#[test]
fn one_silent_peer_among_many_fails_alone() {
    let n = 12;
    let cfg = EngineConfig {
        peer_timeout_ns: 200_000_000,
        ..test_config()
    };
    let mut sim = Sim::new(n, cfg, Link::clean(), 29);
    let dead = 5;
    sim.nodes[dead].down = true;
    let mut to_dead = Vec::new();
    for r in 1..n {
        let id = sim
            .eng(0)
            .send(addr(r), hdr(0), Box::new(vec![7u8; 2000]), SendMode::Eager, 0)
            .unwrap();
        if r == dead {
            to_dead.push(id);
        }
    }
    let mut log = logs(n);
    sim.run(5_000_000_000, |_, i, ev| log[i].record(ev), |_| false);
    assert_eq!(log[0].peer_failed, vec![addr(dead)]);
    assert_eq!(
        log[0].send_failed.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        to_dead
    );
    assert_eq!(log[0].send_done.len(), n - 2);
    for r in (1..n).filter(|&r| r != dead) {
        assert_eq!(log[r].msgs.len(), 1, "node {r}");
    }
}
