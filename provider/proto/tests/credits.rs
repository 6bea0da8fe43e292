//! Credit flow control of eager and unexpected traffic (credit.rs).

use super::*;

// ---------------------------------------------------------------- credits

fn credit_config(total: u32, min_loan: u32) -> EngineConfig {
    EngineConfig {
        credits: Some(super::credit::CreditConfig {
            unit: 1024,
            total,
            min_loan,
            max_loan: total / 2,
            low_water: total / 4,
            epoch_ns: 1_000_000,
        }),
        ..test_config()
    }
}

/// What a message holds of its sender's credits until the application
/// takes it: an eager one its length, an RTS only its tail (`rts_charge`;
/// the rest is still at the sender), so giving back a taken RTS leaves the
/// credits of the peer's other unexpected messages held.
#[test]
fn rts_holds_its_tail_not_its_length() {
    let mut sim = Sim::new(2, credit_config(4096, 2048), Link::lossy(0.0), 7);
    let (eager_len, rndv_len) = (10_000usize, 1usize << 20);
    sim.eng(0)
        .send(addr(1), hdr(0), Box::new(vec![1u8; eager_len]), SendMode::Eager, 0)
        .unwrap();
    sim.eng(0)
        .send(
            addr(1),
            hdr(1),
            Box::new(PatternSource { len: rndv_len, salt: 1 }),
            SendMode::Rendezvous,
            0,
        )
        .unwrap();
    let arrived = std::cell::RefCell::new(Vec::new());
    sim.run(
        1_000_000_000,
        |_, i, ev| {
            if let Event::Msg { hdr, body, .. } = ev {
                assert_eq!(i, 1);
                let rid = match body {
                    MsgBody::Rndv(rid) => Some(rid),
                    MsgBody::Eager(_) => None,
                };
                arrived.borrow_mut().push((hdr.len, rid));
            }
        },
        // Both unexpected (nobody takes them yet): stop once they are in.
        |_| arrived.borrow().len() == 2,
    );
    let arrived = arrived.into_inner();
    assert_eq!(arrived.len(), 2);
    assert_eq!(arrived[0], (eager_len as u64, None));
    assert_eq!(arrived[1].0, rndv_len as u64);
    let rid = arrived[1].1.expect("the 1 MiB message came by rendezvous");
    // 1 MiB in 1428-byte RDATA payloads leaves 424 bytes for the RTS.
    let tail = sim.eng(1).rts_charge(rid);
    assert_eq!(tail, 424);
    let cost = |len: usize| credit_config(4096, 2048).credits.unwrap().cost(len);
    let held = |sim: &Sim| sim.nodes[1].engine.credit_usage().unwrap().0;
    assert_eq!(held(&sim), cost(eager_len) + cost(tail as usize));
    // The application takes the RTS first: the eager message keeps its
    // credits. (A release waits for the engine's next entry point, or
    // `settle`: engine/later.rs.)
    let now = sim.now;
    sim.eng(1).release(addr(0), tail, now);
    assert_eq!(held(&sim), cost(eager_len) + cost(tail as usize));
    sim.eng(1).settle();
    assert_eq!(held(&sim), cost(eager_len));
    sim.eng(1).release(addr(0), eager_len as u64, now);
    sim.eng(1).settle();
    assert_eq!(held(&sim), 0);
}

/// With credit flow control on, a stream both ways under loss still
/// arrives exactly once and in order (the receiver takes each message as
/// it arrives).
#[test]
fn credits_exactly_once_in_order_under_loss() {
    for (loss, seed) in [(0.0, 1u64), (5.0, 2), (20.0, 3)] {
        let mut sim = Sim::new(2, credit_config(256, 16), Link::lossy(loss), seed);
        let count = 400u64;
        let mut ids = [Vec::new(), Vec::new()];
        for k in 0..count {
            for (s, ids) in ids.iter_mut().enumerate() {
                let len = (k as usize * 37) % 5000;
                let id = sim
                    .eng(s)
                    .send(
                        addr(1 - s),
                        hdr(k),
                        Box::new(payload(seed + s as u64, k, len)),
                        SendMode::Eager,
                        0,
                    )
                    .unwrap();
                ids.push(id);
            }
        }
        let mut log = logs(2);
        sim.run(
            120_000_000_000,
            |sim, i, ev| {
                if let Event::Msg { peer, hdr, .. } = &ev {
                    let (p, l, now) = (*peer, hdr.len, sim.now);
                    sim.eng(i).release(p, l, now);
                }
                log[i].record(ev)
            },
            |_| false,
        );
        for r in 0..2 {
            let s = 1 - r;
            assert_eq!(log[r].msgs.len() as u64, count, "loss {loss}: node {r}");
            for (k, (_, h, v)) in log[r].msgs.iter().enumerate() {
                assert_eq!(h.tag, k as u64, "out of order at loss {loss}");
                assert!(*v == payload(seed + s as u64, k as u64, (k * 37) % 5000));
            }
            let mut done = log[s].send_done.clone();
            done.sort_unstable();
            assert_eq!(done, ids[s]);
        }
        assert!(
            sim.nodes[0].engine.stats().credit_stalls > 0,
            "a budget of 256 KiB must stall these senders"
        );
    }
}

/// An eager message delivered at node 0 (the incast receiver): its
/// sender, header and payload.
fn eager_at_receiver(node: usize, ev: Event) -> Option<(SocketAddr, MsgHdr, Vec<u8>)> {
    match (node, ev) {
        (
            0,
            Event::Msg {
                peer,
                hdr,
                body: MsgBody::Eager(v),
            },
        ) => Some((peer, hdr, v.into_vec())),
        _ => None,
    }
}

/// Incast: 16 senders to one receiver that takes nothing for a while. The
/// receiver's held messages never exceed its budget whatever the number of
/// senders; the senders queue (they neither drop nor spin); once the
/// receiver takes what it holds, every message arrives exactly once.
#[test]
fn credits_bound_incast_memory() {
    let n = 17;
    let total = 512u32; // 512 KiB
    let mut sim = Sim::new(n, credit_config(total, 16), Link::lossy(1.0), 7);
    let per = 200u64;
    for s in 1..n {
        for k in 0..per {
            let len = 1000 + (k as usize % 7) * 700;
            sim.eng(s)
                .send(addr(0), hdr(k), Box::new(payload(s as u64, k, len)), SendMode::Eager, 0)
                .unwrap();
        }
    }
    let mut got: Vec<Vec<(MsgHdr, Vec<u8>)>> = vec![Vec::new(); n];
    let mut held: Vec<(SocketAddr, u64)> = Vec::new();
    let mut peak = 0u32;
    // 50 ms during which the application takes nothing ...
    sim.run_for(50_000_000, |sim, i, ev| {
        if let Some((peer, hdr, v)) = eager_at_receiver(i, ev) {
            got[sim.index_of(peer).unwrap()].push((hdr, v));
            held.push((peer, hdr.len));
        }
        peak = peak.max(sim.eng(0).credit_usage().unwrap().0);
    });
    if std::env::var("GNIX_DEBUG_INCAST").is_ok() {
        eprintln!(
            "after phase 1: usage {:?} held {}",
            sim.eng(0).credit_usage(),
            held.len()
        );
        for (s, got) in got.iter().enumerate().skip(1) {
            eprintln!(
                "sender {s}: got {} stalls {} credits_sent {}",
                got.len(),
                sim.nodes[s].engine.stats().credit_stalls,
                sim.nodes[s].engine.stats().credits_sent
            );
        }
        eprintln!("receiver credits_sent {}", sim.nodes[0].engine.stats().credits_sent);
    }
    // ... then it takes what it holds, and each message as it arrives.
    let now = sim.now;
    for (p, l) in held.drain(..) {
        sim.eng(0).release(p, l, now);
    }
    sim.run(
        300_000_000_000,
        |sim, i, ev| {
            if let Some((peer, hdr, v)) = eager_at_receiver(i, ev) {
                got[sim.index_of(peer).unwrap()].push((hdr, v));
                let now = sim.now;
                sim.eng(0).release(peer, hdr.len, now);
            }
            peak = peak.max(sim.eng(0).credit_usage().unwrap().0);
        },
        |_| false,
    );
    assert!(peak <= total, "held {peak} credits of a {total} budget");
    assert!(
        peak >= total / 2,
        "the budget was hardly used ({peak}): is the test idle?"
    );
    for (s, got) in got.iter().enumerate().skip(1) {
        assert_eq!(got.len() as u64, per, "sender {s}");
        for (k, (h, v)) in got.iter().enumerate() {
            assert_eq!(h.tag, k as u64);
            assert!(*v == payload(s as u64, k as u64, 1000 + (k % 7) * 700));
        }
    }
    let stalls: u64 = (1..n).map(|s| sim.nodes[s].engine.stats().credit_stalls).sum();
    assert!(stalls > 0);
    assert_eq!(sim.nodes[0].engine.stats().dropped_over_credit, 0);
}

/// A quarter of a peer's loan coming free is news that may wait: it does
/// not go out ahead of the answer a ping-pong sends next, but right behind
/// its segments; with nothing going to the peer it goes alone within
/// `CREDIT_NEWS_NS`. Half the loan is told at once.
#[test]
fn credit_news_that_may_wait_follows_the_answer() {
    use super::engine::CREDIT_NEWS_NS;
    // Loans of 64 credits (64 KiB): 20 KiB is news, 40 KiB is urgent.
    // Epochs long enough that no quiet peer is asked to give back.
    let mut cfg = credit_config(4096, 64);
    if let Some(c) = cfg.credits.as_mut() {
        c.epoch_ns = 1 << 40;
    }
    let credits_sent = |sim: &Sim| sim.nodes[1].engine.stats().credits_sent;
    let exchange = |sim: &mut Sim, len: usize| -> MsgHdr {
        sim.eng(0)
            .send(addr(1), hdr(0), Box::new(vec![5u8; len]), SendMode::Eager, 0)
            .unwrap();
        let got = std::cell::Cell::new(None);
        sim.run(
            1_000_000_000,
            |_, i, ev| {
                if let (1, Event::Msg { hdr, .. }) = (i, ev) {
                    got.set(Some(hdr));
                }
            },
            |_| got.get().is_some(),
        );
        got.get().expect("the message arrived")
    };
    for (len, urgent) in [(20 << 10, false), (40 << 10, true)] {
        let mut sim = Sim::new(2, cfg.clone(), Link::clean(), 11);
        // A first message each way settles the VC and gets each side a
        // loan (lent on a sender's first request).
        let h = exchange(&mut sim, 100);
        let now = sim.now;
        sim.eng(1).release(addr(0), h.len, now);
        sim.eng(1)
            .send(addr(0), hdr(2), Box::new(vec![7u8; 100]), SendMode::Eager, now)
            .unwrap();
        sim.run_for(10 * CREDIT_NEWS_NS, |sim, i, ev| {
            if let (0, Event::Msg { peer, hdr, .. }) = (i, ev) {
                let now = sim.now;
                sim.eng(0).release(peer, hdr.len, now);
            }
        });
        let h = exchange(&mut sim, len);
        let before = credits_sent(&sim);
        let now = sim.now;
        sim.eng(1).release(addr(0), h.len, now);
        let mut buf = vec![0u8; 65536];
        if urgent {
            let (_, n) = sim
                .eng(1)
                .poll_transmit(now, &mut buf)
                .expect("urgent news goes at once");
            assert_eq!(buf[3], wire::kind::CREDIT, "{n}-byte datagram");
            continue;
        }
        assert!(
            sim.eng(1).poll_transmit(now, &mut buf).is_none(),
            "news that may wait waits"
        );
        assert_eq!(credits_sent(&sim), before);
        // The answer goes first, the news right behind it.
        sim.eng(1)
            .send(addr(0), hdr(1), Box::new(vec![6u8; 8]), SendMode::Eager, now)
            .unwrap();
        let (_, n) = sim.eng(1).poll_transmit(now, &mut buf).expect("the answer");
        assert_ne!(
            buf[3],
            wire::kind::CREDIT,
            "{n}-byte datagram, credit byte {:#x}",
            buf[20]
        );
        let (_, _) = sim.eng(1).poll_transmit(now, &mut buf).expect("the news");
        assert_eq!(buf[3], wire::kind::CREDIT);
        assert_eq!(credits_sent(&sim), before + 1);
        // Nothing going to the peer: the next news goes alone, in time.
        let h = exchange(&mut sim, len);
        let before = credits_sent(&sim);
        let released = sim.now;
        sim.eng(1).release(addr(0), h.len, released);
        sim.run(
            10 * CREDIT_NEWS_NS,
            |_, _, _| {},
            |s| s.nodes[1].engine.stats().credits_sent > before,
        );
        assert_eq!(credits_sent(&sim), before + 1);
        assert!(sim.now <= released + CREDIT_NEWS_NS, "{} ns after", sim.now - released);
    }
}
