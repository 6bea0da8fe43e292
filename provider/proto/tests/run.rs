//! Bulk runs (engine/run.rs) against the general way: the same datagrams.

use super::*;

/// What the simulated link carried: (sender, destination, bytes).
type Datagrams = Vec<(usize, SocketAddr, Vec<u8>)>;

/// Everything the link carried in a simulated exchange, with the events
/// of both nodes, when node 0 sends eager messages of several segments
/// and rendezvous messages (pushed and pulled) to node 1 and node 1 answers
/// with eager messages, over a link that loses, duplicates and reorders,
/// with a socket that takes only a few datagrams a call.
fn exchange(runs: bool, seed: u64) -> (Datagrams, Vec<Log>, [EngineStats; 2]) {
    let cfg = EngineConfig {
        max_datagram: 1472,
        ..test_config()
    };
    let link = Link {
        loss_pct: 2.0,
        dup_pct: 1.0,
        latency_ns: 20_000,
        jitter_ns: 30_000,
        ns_per_kib: 100,
    };
    let mut sim = Sim::new(2, cfg, link, seed);
    if !runs {
        sim.eng(0).no_runs();
        sim.eng(1).no_runs();
    }
    sim.record = Some(Vec::new());
    sim.tx_cap = 7;
    for (k, len) in [65_536usize, 40_001, 1, 3000].into_iter().enumerate() {
        let k = k as u64;
        sim.eng(0)
            .send(addr(1), hdr(k), Box::new(payload(seed, k, len)), SendMode::Eager, 0)
            .unwrap();
        sim.eng(1)
            .send(
                addr(0),
                hdr(10 + k),
                Box::new(payload(seed, 10 + k, len / 2)),
                SendMode::Eager,
                0,
            )
            .unwrap();
    }
    for (k, len) in [(1usize << 20) + 5, 300_001].into_iter().enumerate() {
        let src = Box::new(PatternSource {
            len,
            salt: 20 + k as u8,
        });
        sim.eng(0)
            .send(addr(1), hdr(20 + k as u64), src, SendMode::Rendezvous, 0)
            .unwrap();
    }
    // A rendezvous message's tag is its pattern's salt.
    let log = run_accepting_into(&mut sim, 60_000_000_000, |tag| {
        Box::new(PatternSink {
            cap: 2 << 20,
            salt: tag as u8,
            written: 0,
        })
    });
    let stats = [sim.nodes[0].engine.stats().clone(), sim.nodes[1].engine.stats().clone()];
    (sim.record.take().unwrap(), log, stats)
}

/// Runs frame exactly the datagrams the general way frames, in the same
/// order, and everything arrives intact.
#[test]
fn runs_send_what_the_general_way_sends() {
    for seed in [1u64, 2, 3] {
        let (with, log, stats) = exchange(true, seed);
        let (without, log_ref, stats_ref) = exchange(false, seed);
        assert!(stats[0].segments_sent > 1000, "seed {seed}: bulk data went");
        assert!(stats[0].retransmits > 0, "seed {seed}: the link lost some");
        assert_eq!(with.len(), without.len(), "seed {seed}");
        for (i, (a, b)) in with.iter().zip(&without).enumerate() {
            assert_eq!(a, b, "seed {seed}: datagram {i}");
        }
        assert_eq!(format!("{stats:?}"), format!("{stats_ref:?}"), "seed {seed}");
        // Every message arrived whole, and every send completed.
        assert_eq!(log[1].msgs.len(), 4, "seed {seed}");
        assert_eq!(log[0].msgs.len(), 4, "seed {seed}");
        for (_, h, v) in &log[1].msgs {
            assert_eq!(*v, payload(seed, h.tag, v.len()), "seed {seed} tag {}", h.tag);
        }
        assert_eq!(log[0].send_done.len(), 6, "seed {seed}");
        assert_eq!(log[1].recv_done.len(), 2, "seed {seed}");
        assert_eq!(log_ref[1].recv_done, log[1].recv_done, "seed {seed}");
    }
}
