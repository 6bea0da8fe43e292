//! How fast loss is repaired (virtual time, against a clean run).

use super::*;

/// Virtual time of one rendezvous transfer of `len` bytes over a 1472-byte
/// MTU link of about 1 GB/s and 20 µs latency.
fn timed_transfer(len: usize, loss: f64, seed: u64) -> (u64, EngineStats) {
    timed_transfer_burst(len, loss, 1, seed)
}

/// `timed_transfer` where each loss takes `burst` consecutive datagrams.
fn timed_transfer_burst(len: usize, loss: f64, burst: usize, seed: u64) -> (u64, EngineStats) {
    let link = Link {
        loss_pct: loss,
        dup_pct: 0.0,
        latency_ns: 20_000,
        jitter_ns: 2_000,
        ns_per_kib: 1_000,
    };
    let mut sim = Sim::new(2, test_config(), link, seed);
    sim.burst = burst;
    // Connect first so the handshake is not part of the measurement.
    sim.eng(0)
        .send(addr(1), hdr(0), Box::new(Vec::new()), SendMode::Eager, 0)
        .unwrap();
    sim.run(1_000_000_000, |_, _, _| {}, |_| false);
    let t0 = sim.now;
    sim.eng(0)
        .send(
            addr(1),
            hdr(1),
            Box::new(PatternSource { len, salt: 4 }),
            SendMode::Rendezvous,
            t0,
        )
        .unwrap();
    let done = std::cell::Cell::new(false);
    sim.run(
        100_000_000_000,
        |sim, i, ev| match ev {
            Event::Msg {
                body: MsgBody::Rndv(rid),
                ..
            } => {
                let now = sim.now;
                sim.eng(i).accept(
                    rid,
                    Box::new(PatternSink {
                        cap: len,
                        salt: 4,
                        written: 0,
                    }),
                    now,
                );
            }
            Event::SendDone { .. } => done.set(true),
            _ => {}
        },
        |_| done.get(),
    );
    assert!(done.get());
    (sim.now - t0, sim.nodes[0].engine.stats().clone())
}

/// What 1 % loss looks like to a GSO sender behind an iptables DROP rule:
/// one packet in a hundred is a run of 44 datagrams, all lost together.
/// Recovery must still not double the transfer time.
#[test]
fn recovery_from_burst_loss_is_quick() {
    let len = 6 << 20;
    let (clean, _) = timed_transfer(len, 0.0, 1);
    let mut rtx = 0;
    for seed in 1..=4 {
        let (lossy, st) = timed_transfer_burst(len, 1.0 / 44.0, 44, seed);
        eprintln!(
            "6 MiB: clean {clean} ns, 1% of 44-datagram bursts lost {lossy} ns, {} rtx ({} fast, {} rto)",
            st.retransmits, st.fast_retransmits, st.rto_expirations
        );
        rtx += st.retransmits;
        assert!(lossy < 2 * clean, "burst loss: {lossy} ns vs {clean} ns clean");
    }
    assert!(rtx >= 88, "hardly any burst was lost ({rtx} retransmissions)");
}

#[test]
fn recovery_under_loss_is_quick() {
    let len = 6 << 20;
    let (clean, _) = timed_transfer(len, 0.0, 1);
    // Wire time alone is ~6.3 ms at 1 GB/s.
    assert!(clean < 9_000_000, "lossless 6 MiB took {clean} ns");
    for seed in 1..=3 {
        let (lossy, st) = timed_transfer(len, 1.0, seed);
        eprintln!(
            "6 MiB: clean {clean} ns, 1% loss {lossy} ns, {} rtx ({} fast, {} rto)",
            st.retransmits, st.fast_retransmits, st.rto_expirations
        );
        assert!(lossy < 2 * clean, "1% loss: {lossy} ns vs {clean} ns clean");
    }
}
