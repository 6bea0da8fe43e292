//! Eager messages over the simulated network: streams both ways under
//! loss (exactly once, in order), sequence-number wrap, crossing
//! handshakes, piggybacked ACKs, `send_now`, sending to ourselves, many
//! peers served round robin, short flushes.

use super::*;

/// Lengths of an eager stream: mostly small, some multi-segment, zero
/// included.
fn eager_len() -> impl Strategy<Value = usize> {
    prop_oneof![1 => Just(0usize), 6 => 0..200usize, 3 => 0..6000usize]
}

/// `count` lengths each way from `eager_len`'s distribution, drawn from `seed`.
fn eager_sizes(seed: u64, count: usize) -> [Vec<usize>; 2] {
    let mut rng = Rng::new(seed);
    let mut sizes = [Vec::new(), Vec::new()];
    for _ in 0..count {
        for s in &mut sizes {
            s.push(match rng.below(10) {
                0 => 0,
                1..=6 => rng.below(200) as usize,
                _ => rng.below(6000) as usize,
            });
        }
    }
    sizes
}

/// Node 0 sends messages of `sizes[0]`'s lengths to node 1 and node 1 of
/// `sizes[1]`'s to node 0, all at once, over a link losing `loss` %
/// (and duplicating and reordering when lossy): each arrives exactly
/// once, in order, intact, and each send completes.
fn eager_stream(loss: f64, seed: u64, sizes: &[Vec<usize>; 2], isn: Option<u32>) {
    let mut sim = Sim::new(2, test_config(), Link::lossy(loss), seed);
    if loss == 0.0 {
        sim.link = Link::clean();
    }
    sim.eng(0).force_isn(isn);
    sim.eng(1).force_isn(isn);
    let mut ids = [Vec::new(), Vec::new()];
    for s in 0..2 {
        for (k, &len) in sizes[s].iter().enumerate() {
            let p = payload(seed + s as u64, k as u64, len);
            let id = sim
                .eng(s)
                .send(addr(1 - s), hdr(k as u64), Box::new(p), SendMode::Eager, 0)
                .unwrap();
            ids[s].push(id);
        }
    }
    let mut log = logs(2);
    // Runs until the network is idle: nothing in flight, no timer armed.
    sim.run(60_000_000_000, |_, i, ev| log[i].record(ev), |_| false);
    for r in 0..2 {
        let s = 1 - r;
        let l = &log[r];
        assert!(
            l.peer_failed.is_empty() && l.send_failed.is_empty(),
            "failures at loss {loss}"
        );
        let count = sizes[s].len();
        assert_eq!(
            l.msgs.len(),
            count,
            "node {r} got {} of {count} (loss {loss} seed {seed})",
            l.msgs.len()
        );
        for (k, (peer, h, v)) in l.msgs.iter().enumerate() {
            assert_eq!(*peer, addr(s));
            assert_eq!(h.tag, k as u64, "out of order");
            assert_eq!(h.data, (k as u64).wrapping_mul(3));
            assert_eq!(h.flags, MsgHdr::TAGGED);
            assert_eq!(h.len as usize, sizes[s][k]);
            assert!(
                *v == payload(seed + s as u64, k as u64, sizes[s][k]),
                "payload {k} corrupt"
            );
        }
        let mut done = log[s].send_done.clone();
        done.sort_unstable();
        assert_eq!(done, ids[s]);
    }
    for n in &sim.nodes {
        assert!(!n.engine.has_pending_work());
    }
}

proptest! {
    #![proptest_config(prop_config(64))]

    /// A failure shrinks to the fewest, shortest messages, the lowest
    /// loss and the smallest seed that still fail.
    #[test]
    fn eager_exactly_once_in_order_under_loss(
        loss in prop_oneof![Just(0.0), Just(1.0), Just(10.0), Just(30.0)],
        seed in any::<u64>(),
        sizes in [vec(eager_len(), 0..250), vec(eager_len(), 0..250)],
    ) {
        eager_stream(loss, seed, &sizes, None);
    }

    #[test]
    fn simultaneous_connect(seed in any::<u64>(), loss in prop_oneof![Just(0.0), 0.0..30.0]) {
        simultaneous_connect_run(seed, loss);
    }
}

#[test]
fn sequence_numbers_wrap() {
    // Both directions start 40 segments short of the 32-bit wrap.
    eager_stream(0.0, 7, &eager_sizes(7, 200), Some(u32::MAX - 40));
    eager_stream(10.0, 8, &eager_sizes(8, 200), Some(u32::MAX - 40));
}

#[test]
fn ping_pong_piggybacks_acks() {
    let mut sim = Sim::new(2, test_config(), Link::clean(), 5);
    let rounds = 200;
    let mut got = 0;
    sim.eng(0)
        .send(addr(1), hdr(0), Box::new(vec![1u8; 8]), SendMode::Eager, 0)
        .unwrap();
    sim.run(
        1_000_000_000,
        |sim, i, ev| {
            if let Event::Msg {
                body: MsgBody::Eager(v),
                hdr: h,
                ..
            } = ev
            {
                assert_eq!(v.len(), 8);
                got += 1;
                if i == 0 && h.tag + 1 >= rounds {
                    return;
                }
                let now = sim.now;
                sim.eng(i)
                    .send(
                        addr(1 - i),
                        hdr(h.tag + (i == 0) as u64),
                        Box::new(vec![2u8; 8]),
                        SendMode::Eager,
                        now,
                    )
                    .unwrap();
            }
        },
        |_| false,
    );
    assert_eq!(got, 2 * rounds);
    // Every message carried the ACK of the previous one; only the very last
    // message's ACK had nothing to ride on.
    let acks: u64 = sim.nodes.iter().map(|n| n.engine.stats().acks_sent).sum();
    assert!(acks <= 1, "standalone ACKs: {acks}");
    for n in &sim.nodes {
        let s = n.engine.stats();
        assert_eq!(s.retransmits, 0);
        // One datagram per message (plus handshake and the final ACK).
        assert!(s.datagrams_out <= rounds + 2, "{s:?}");
    }
}

/// A ping-pong's answer brings a message and the ACK of ours: when ours
/// was an inject (quiet, complete already) the message is handed out
/// first, and the ACK applied at the next entry point or `settle`
/// (engine/later.rs); until then our message counts as in flight and
/// `poll_timeout` says that work is due now. An ACK that completes a send
/// the application waits for is applied at once, before the message.
#[test]
fn an_answers_ack_waits_until_its_message_is_out_unless_it_completes_a_send() {
    for quiet in [true, false] {
        let (a, b) = (addr(0), addr(1));
        let (mut e, mut now) = connected_pair(test_config());
        let mut buf = vec![0u8; 2048];

        // A sends; B takes the message and answers.
        now += 1_000;
        let body = vec![1u8; 8];
        let src = if quiet {
            SendPayload::Copied(Payload::from_vec(body))
        } else {
            SendPayload::Source(Box::new(body))
        };
        let (id, n) = e[0].send_now(b, hdr(1), src, SendMode::Eager, now, &mut buf).unwrap();
        let n = n.expect("A's message goes at once");
        e[1].handle_run(a, &buf[..n], n, now);
        assert!(matches!(e[1].poll_event(), Some(Event::Msg { .. })));
        e[1].send(a, hdr(2), Box::new(vec![2u8; 8]), SendMode::Eager, now)
            .unwrap();
        let (_, n) = e[1].poll_transmit(now, &mut buf).expect("B's answer");
        assert!(
            e[1].poll_transmit(now, &mut buf).is_none(),
            "the ACK rode on the answer"
        );

        now += 1_000;
        e[0].handle_run(b, &buf[..n], n, now);
        let tags = |e: &mut Engine| {
            std::iter::from_fn(|| e.poll_event())
                .map(|ev| match ev {
                    Event::Msg { hdr: h, .. } => format!("msg {}", h.tag),
                    Event::SendDone { id: done } if done == id => "done".to_string(),
                    other => format!("{other:?}"),
                })
                .collect::<Vec<_>>()
        };
        if !quiet {
            // Completed at once, before the answer is handed out.
            assert_eq!(tags(&mut e[0]), ["done", "msg 2"]);
            assert!(!e[0].has_unacked());
            continue;
        }
        // The answer is out; the ACK it carried waits.
        assert_eq!(tags(&mut e[0]), ["msg 2"]);
        assert_eq!(e[0].quiet_in_flight(), 1);
        assert!(e[0].has_unacked());
        assert_eq!(e[0].poll_timeout(), Some(0));
        e[0].settle();
        assert!(tags(&mut e[0]).is_empty());
        assert_eq!(e[0].quiet_in_flight(), 0);
        assert!(!e[0].has_unacked());
        assert!(e[0].poll_timeout().is_none_or(|t| t > now));
        assert_eq!(e[0].stats().retransmits, 0);
    }
}

/// Manual progress (`ack_completions_now`): the ACK that completes a send
/// its sender waits for leaves in the pass that took the message's last
/// segment (eager in one segment or several, or rendezvous), so a
/// receiver that is not called again does not hold the send up; an
/// inject's ACK still waits for an answer to ride on, or its delay.
#[test]
fn an_awaited_message_is_acknowledged_in_the_pass_that_completes_it() {
    let cfg = EngineConfig {
        ack_completions_now: true,
        ..test_config()
    };
    for (len, mode, quiet) in [
        (8, SendMode::Eager, false),
        (8, SendMode::Eager, true),
        (5000, SendMode::Eager, false),
        (5000, SendMode::Eager, true),
        (200_000, SendMode::Rendezvous, false),
    ] {
        let what = format!("{len} B {mode:?}, quiet {quiet}");
        let (mut e, now) = connected_pair(cfg.clone());
        let now = now + 1_000;
        let src = if quiet {
            SendPayload::Copied(Payload::from_vec(vec![1u8; len]))
        } else {
            SendPayload::Source(Box::new(PatternSource { len, salt: 0 }))
        };
        let id = e[0].send(addr(1), hdr(1), src, mode, now).unwrap();
        // B accepts a rendezvous as it is announced.
        let (mut got, mut sent) = (false, false);
        pump_pair(&mut e, now, |_, eng, ev| match ev {
            Event::Msg {
                body: MsgBody::Rndv(rid),
                ..
            } => eng.accept(
                rid,
                Box::new(PatternSink {
                    cap: len,
                    salt: 0,
                    written: 0,
                }),
                now,
            ),
            Event::Msg { .. } | Event::RecvDone { .. } => got = true,
            Event::SendDone { id: done } => sent |= done == id,
            other => panic!("{what}: {other:?}"),
        });
        assert!(got, "{what}: B has the message");
        assert_eq!(sent, !quiet, "{what}: A's send completed at once");
        assert_eq!(e[0].has_unacked(), quiet, "{what}");
        if quiet {
            // The inject's ACK goes with its delay.
            let t = e[1].poll_timeout().expect("B's ACK timer");
            assert!(t > now, "{what}");
            e[1].handle_timeout(t);
            pump_pair(&mut e, t, |_, _, _| {});
            assert!(!e[0].has_unacked(), "{what}");
        }
    }
}

/// Two engines that each send a message the other's sender waits for, both
/// on their way before either arrives (Open MPI's `MPI_Sendrecv`): each
/// receiver waits for an ACK itself, so it acknowledges at once rather
/// than hold its ACK for an answer that only comes once its own send is
/// done. No timer runs: with the ACKs held for their delay, neither send
/// would complete here.
#[test]
fn an_exchange_is_acknowledged_at_once() {
    let (mut e, now) = connected_pair(test_config());
    let now = now + 1_000;
    let mut ids = [0; 2];
    let mut datagrams = Vec::new();
    for s in 0..2 {
        ids[s] = e[s]
            .send(addr(1 - s), hdr(1), Box::new(vec![s as u8; 8]), SendMode::Eager, now)
            .unwrap();
        let mut buf = vec![0u8; 2048];
        let (_, n) = e[s].poll_transmit(now, &mut buf).expect("the message");
        buf.truncate(n);
        datagrams.push(buf);
    }
    for (s, d) in datagrams.iter().enumerate() {
        e[1 - s].handle_run(addr(s), d, d.len(), now);
    }
    let mut done = [false; 2];
    pump_pair(&mut e, now, |s, _, ev| {
        if let Event::SendDone { id } = ev {
            done[s] |= id == ids[s];
        }
    });
    assert_eq!(done, [true, true], "both sends complete without a timer");
}

/// Holding the ACK of a message its sender waits for pays when the answer
/// carries it. A receiver that does not answer (its application went to
/// compute) let its sender wait for the ACK delay: it acknowledges the
/// next such message at once, and holds again once data of its own
/// follows one within the delay, before its peer sends anything else.
#[test]
fn a_receiver_holds_acks_while_answers_carry_them() {
    let (mut e, mut now) = connected_pair(test_config());
    // Sends `tag` from `from` at `now`, everything back and forth: whether
    // A's send `id` completed meanwhile.
    let send = |e: &mut [Engine; 2], from: usize, now: u64, tag: u64, id: Option<MsgId>| -> (MsgId, bool) {
        let sent = e[from]
            .send(addr(1 - from), hdr(tag), Box::new(vec![1u8; 8]), SendMode::Eager, now)
            .unwrap();
        let id = id.unwrap_or(sent);
        let mut done = false;
        pump_pair(e, now, |s, _, ev| {
            if let Event::SendDone { id: d } = ev {
                done |= s == 0 && d == id;
            }
        });
        (sent, done)
    };
    let answer = |e: &mut [Engine; 2], now: u64, id: MsgId| send(e, 1, now, 9, Some(id)).1;
    let send = |e: &mut [Engine; 2], now: u64, tag: u64| send(e, 0, now, tag, None);
    // Held, and no answer: the ACK leaves alone when its delay is up.
    now += 1_000;
    let (_, done) = send(&mut e, now, 1);
    assert!(!done, "the first ACK is held for an answer");
    let t = e[1].poll_timeout().expect("B's ACK timer");
    assert!(t >= now + test_config().ack_delay_ns);
    e[1].handle_timeout(t);
    let mut late = false;
    pump_pair(&mut e, t, |s, _, ev| {
        late |= s == 0 && matches!(ev, Event::SendDone { .. })
    });
    assert!(late, "the held ACK came with its delay");
    // So the next one is acknowledged at once.
    now = t + 1_000;
    let (_, done) = send(&mut e, now, 2);
    assert!(done, "acknowledged at once after an ACK that waited");
    // An answer within the delay: held again, and the answer carries it.
    assert!(!answer(&mut e, now + 1_000, MsgId::MAX));
    now += 2_000;
    let (id, done) = send(&mut e, now, 3);
    assert!(!done, "held again once answers came");
    assert!(answer(&mut e, now + 1_000, id), "the answer carried the ACK");
    assert_eq!(e[1].stats().acks_sent, 2, "{:?}", e[1].stats());
}

/// `Engine::send_now` in a lossy ping-pong: the datagram it hands back is
/// the caller's to send, most messages leave that way, nothing is sent
/// twice by poll_transmit, and delivery stays exactly-once and in order
/// (losses are repaired by the usual retransmission). With another VC
/// waiting to transmit, it queues instead.
#[test]
fn send_now_hands_back_the_datagram() {
    let mut sim = Sim::new(3, test_config(), Link::lossy(5.0), 43);
    let rounds = 300u64;
    let mut got = [Vec::new(), Vec::new()];
    let mut direct = 0;
    let mut buf = vec![0u8; 1 << 16];
    sim.eng(0)
        .send(addr(1), hdr(0), Box::new(payload(43, 0, 8)), SendMode::Eager, 0)
        .unwrap();
    sim.run(
        60_000_000_000,
        |sim, i, ev| {
            let Event::Msg {
                body: MsgBody::Eager(v),
                hdr: h,
                ..
            } = ev
            else {
                return;
            };
            assert_eq!(v.into_vec(), payload(43, h.tag, 8 + h.tag as usize % 50));
            got[i].push(h.tag);
            if h.tag + 1 >= rounds {
                return;
            }
            let (now, k) = (sim.now, h.tag + 1);
            let src = SendPayload::Copied(Payload::from_vec(payload(43, k, 8 + k as usize % 50)));
            let (_, n) = sim
                .eng(i)
                .send_now(addr(1 - i), hdr(k), src, SendMode::Eager, now, &mut buf)
                .unwrap();
            if let Some(n) = n {
                direct += 1;
                sim.emit_from(i, addr(1 - i), &buf[..n]);
            }
        },
        |_| false,
    );
    let want = |first: u64| (first..rounds).step_by(2).collect::<Vec<_>>();
    assert_eq!(got[1], want(0));
    assert_eq!(got[0], want(1));
    assert!(direct > rounds * 8 / 10, "only {direct} sent at once");
    for n in &sim.nodes[..2] {
        // One datagram per message plus handshake, retransmissions and a few ACKs.
        let s = n.engine.stats();
        assert!(s.datagrams_out <= rounds / 2 + s.retransmits + s.acks_sent + 3, "{s:?}");
        assert_eq!(n.engine.quiet_in_flight(), 0);
        // Most answers' ACKs waited until the answer was out (later.rs),
        // losses and all.
        assert!(s.acks_held > rounds / 4, "{s:?}");
    }
    // Node 2 has something queued: node 0's next message waits its turn.
    let now = sim.now;
    sim.eng(0)
        .send(addr(2), hdr(500), Box::new(vec![1u8; 8]), SendMode::Eager, now)
        .unwrap();
    let (_, n) = sim
        .eng(0)
        .send_now(
            addr(1),
            hdr(501),
            Box::new(vec![2u8; 8]),
            SendMode::Eager,
            now,
            &mut buf,
        )
        .unwrap();
    assert_eq!(n, None);
    let mut log = logs(3);
    sim.run(10_000_000_000, |_, i, ev| log[i].record(ev), |_| false);
    assert_eq!(log[1].msgs.len(), 1);
    assert_eq!(log[2].msgs.len(), 1);
}

/// Both nodes send to each other at once, so their CONN_REQs cross: both
/// VCs come up (proven, never restarted) and every message arrives.
fn simultaneous_connect_run(seed: u64, loss: f64) {
    {
        let link = if loss == 0.0 { Link::clean() } else { Link::lossy(loss) };
        let mut sim = Sim::new(2, test_config(), link, seed);
        for k in 0..5 {
            sim.eng(0)
                .send(addr(1), hdr(k), Box::new(vec![k as u8; 3000]), SendMode::Eager, 0)
                .unwrap();
            sim.eng(1)
                .send(addr(0), hdr(k), Box::new(vec![k as u8; 10]), SendMode::Eager, 0)
                .unwrap();
        }
        let mut log = logs(2);
        sim.run(10_000_000_000, |_, i, ev| log[i].record(ev), |_| false);
        for (i, l) in log.iter().enumerate() {
            assert_eq!(
                l.msgs.iter().map(|m| m.1.tag).collect::<Vec<_>>(),
                vec![0, 1, 2, 3, 4],
                "seed {seed} loss {loss} node {i}"
            );
            assert_eq!(l.send_done.len(), 5);
            assert!(l.peer_failed.is_empty());
        }
        assert!(sim.nodes[0].engine.is_connected(addr(1)) && sim.nodes[1].engine.is_connected(addr(0)));
        assert_eq!(sim.nodes[0].engine.stats().peers_restarted, 0);
    }
}

#[test]
fn send_to_self() {
    let mut sim = Sim::new(1, test_config(), Link::clean(), 51);
    let me = addr(0);
    let a = sim
        .eng(0)
        .send(me, hdr(1), Box::new(vec![1u8; 3000]), SendMode::Eager, 0)
        .unwrap();
    let b = sim
        .eng(0)
        .send(
            me,
            hdr(2),
            Box::new(PatternSource { len: 300_000, salt: 2 }),
            SendMode::Eager,
            0,
        )
        .unwrap();
    let log = run_accepting(&mut sim, 1_000_000_000, 300_000, 2);
    let mut done = log[0].send_done.clone();
    done.sort_unstable();
    assert_eq!(done, vec![a, b]);
    assert_eq!(log[0].recv_done[0].1, 300_000);
    assert_eq!(log[0].msgs[0].2, vec![1u8; 3000]);
}

/// Queues `count` eager messages (tags 0..count, body `body(sender, k)`)
/// from every node to every other node.
fn send_all_pairs(sim: &mut Sim, count: u64, body: impl Fn(usize, u64) -> Vec<u8>) {
    let n = sim.nodes.len();
    for s in 0..n {
        for d in (0..n).filter(|&d| d != s) {
            for k in 0..count {
                let p = Box::new(body(s, k));
                sim.eng(s).send(addr(d), hdr(k), p, SendMode::Eager, 0).unwrap();
            }
        }
    }
}

#[test]
fn many_peers_round_robin() {
    let n = 5;
    let mut sim = Sim::new(n, test_config(), Link::lossy(3.0), 71);
    send_all_pairs(&mut sim, 20, |s, k| vec![s as u8; 700 * (k as usize % 4)]);
    let mut log = logs(n);
    sim.run(10_000_000_000, |_, i, ev| log[i].record(ev), |_| false);
    for (d, l) in log.iter().enumerate() {
        assert_eq!(l.msgs.len(), 20 * (n - 1));
        for s in 0..n {
            let tags: Vec<u64> = l.msgs.iter().filter(|m| m.0 == addr(s)).map(|m| m.1.tag).collect();
            if s != d {
                assert_eq!(tags, (0..20).collect::<Vec<_>>());
            }
        }
    }
}

/// Endpoints whose socket takes only a few datagrams per flush (the burst
/// path stopped by a refused slot or a refused datagram, alternately)
/// still deliver every eager message once and in order, and every
/// rendezvous, to every peer, under loss.
#[test]
fn short_flushes_lose_nothing() {
    let n = 3;
    let mut sim = Sim::new(n, test_config(), Link::lossy(2.0), 73);
    sim.tx_cap = 3;
    let big = 200_000;
    send_all_pairs(&mut sim, 10, |s, k| payload(s as u64, k, 2_900 * (k as usize % 3)));
    for s in 0..n {
        for d in (0..n).filter(|&d| d != s) {
            let src = Box::new(PatternSource { len: big, salt: 7 });
            sim.eng(s)
                .send(addr(d), hdr(99), SendPayload::Source(src), SendMode::Rendezvous, 0)
                .unwrap();
        }
    }
    let log = run_accepting(&mut sim, 60_000_000_000, big, 7);
    for (d, l) in log.iter().enumerate() {
        let mut done = l.recv_done.clone();
        done.sort();
        assert_eq!(done, l.rndv.iter().map(|r| (r.2, big)).collect::<Vec<_>>());
        assert_eq!(l.rndv.len(), n - 1);
        assert_eq!(l.send_done.len(), 11 * (n - 1));
        for s in (0..n).filter(|&s| s != d) {
            let got: Vec<(u64, &[u8])> = l
                .msgs
                .iter()
                .filter(|m| m.0 == addr(s))
                .map(|m| (m.1.tag, &m.2[..]))
                .collect();
            let want: Vec<Vec<u8>> = (0..10)
                .map(|k| payload(s as u64, k, 2_900 * (k as usize % 3)))
                .collect();
            assert_eq!(got, (0..10).zip(want.iter().map(|v| &v[..])).collect::<Vec<_>>());
        }
    }
}

#[test]
#[ignore = "timing, run in release"]
fn hot_path_ping_pong() {
    let cfg = test_config();
    let (a, b) = (addr(0), addr(1));
    let mut e = [Engine::seeded(cfg.clone(), a, 1), Engine::seeded(cfg, b, 2)];
    let mut buf = vec![0u8; 2048];
    let mut now = 0u64;
    let rounds = 200_000u64;
    let t = std::time::Instant::now();
    for r in 0..rounds {
        for (s, d) in [(0usize, 1usize), (1, 0)] {
            let to = if d == 1 { b } else { a };
            let from = if s == 0 { a } else { b };
            e[s].send(to, hdr(r), Box::new(vec![7u8; 8]), SendMode::Eager, now)
                .unwrap();
            let mut got = false;
            while !got {
                while let Some((dst, n)) = e[s].poll_transmit(now, &mut buf) {
                    assert_eq!(dst, to);
                    e[d].handle_datagram(from, &buf[..n], now);
                }
                while let Some((_, n)) = e[d].poll_transmit(now, &mut buf) {
                    e[s].handle_datagram(to, &buf[..n], now);
                }
                while let Some(ev) = e[d].poll_event() {
                    got |= matches!(ev, Event::Msg { .. });
                }
                while e[s].poll_event().is_some() {}
            }
            now += 1_000;
        }
    }
    let el = t.elapsed();
    eprintln!(
        "{} ns per one-way message (send + encode + decode + deliver)",
        el.as_nanos() as u64 / (2 * rounds)
    );
    let acks: u64 = e.iter().map(|x| x.stats().acks_sent).sum();
    assert_eq!(acks, 0);
}

// ------------------------------------------------- held eager messages

/// `test_config` with long eager messages held from their first segment
/// (`EngineConfig::eager_place_min`, as the endpoint runs).
fn held_config() -> EngineConfig {
    EngineConfig {
        eager_place_min: 16 << 10,
        ..test_config()
    }
}

/// Node 0 sends one eager message of `len` pattern bytes (salt 9) to
/// node 1 over `link`; returns the simulation and the send's id.
fn send_long_eager(cfg: EngineConfig, link: Link, seed: u64, len: usize) -> (Sim, MsgId) {
    let mut sim = Sim::new(2, cfg, link, seed);
    let src = Box::new(PatternSource { len, salt: 9 });
    let id = sim.eng(0).send(addr(1), hdr(4), src, SendMode::Eager, 0).unwrap();
    (sim, id)
}

/// A receive of `cap` bytes that checks it gets the message's pattern.
fn pattern_sink(cap: usize) -> Box<dyn RecvSink> {
    Box::new(PatternSink {
        cap,
        salt: 9,
        written: 0,
    })
}

/// Runs `sim` until idle, handing every held message node 1 is offered to
/// `offered` (which takes it, or not); returns every node's events.
fn run_offering(sim: &mut Sim, mut offered: impl FnMut(&mut Sim, RndvId)) -> Vec<Log> {
    let mut log = logs(2);
    sim.run(
        60_000_000_000,
        |sim, i, ev| {
            if let (
                1,
                Event::Msg {
                    body: MsgBody::Rndv(rid),
                    ..
                },
            ) = (i, &ev)
            {
                offered(sim, *rid);
            }
            log[i].record(ev);
        },
        |_| false,
    );
    log
}

/// A long eager message is surfaced at its first segment; the receive
/// that takes it then gets the rest written straight in (one copy fewer
/// than reassembling it), under loss and reordering as on a clean link.
#[test]
fn a_long_eager_message_lands_in_the_receive_that_takes_it_at_once() {
    for (loss, seed) in [(0.0, 1), (5.0, 2), (20.0, 3)] {
        let len = 60_000;
        let link = if loss == 0.0 { Link::clean() } else { Link::lossy(loss) };
        let (mut sim, id) = send_long_eager(held_config(), link, seed, len);
        let log = run_accepting(&mut sim, 60_000_000_000, len, 9);
        assert!(log[1].msgs.is_empty(), "not reassembled whole");
        assert_eq!(log[1].rndv.len(), 1);
        assert_eq!(log[1].rndv[0].1.len, len as u64);
        assert_eq!(log[1].recv_done, vec![(log[1].rndv[0].2, len)]);
        assert_eq!(log[0].send_done, vec![id]);
        let s = sim.nodes[1].engine.stats();
        assert_eq!((s.eager_held, s.eager_placed), (1, 1), "loss {loss}");
    }
}

/// Until a receive takes it, a held eager message is kept whole (and
/// holds its whole length of its sender's credits); a receive that comes
/// later gets it at once. Messages below the threshold are reassembled.
#[test]
fn a_long_eager_message_nobody_takes_is_kept_until_one_does() {
    let len = 40_000;
    let (mut sim, id) = send_long_eager(held_config(), Link::lossy(5.0), 4, len);
    let now = sim.now;
    sim.eng(0)
        .send(addr(1), hdr(5), Box::new(vec![3u8; 10_000]), SendMode::Eager, now)
        .unwrap();
    let mut log = run_offering(&mut sim, |_, _| {});
    assert_eq!(log[1].msgs.len(), 1, "the short one came whole");
    assert_eq!(log[1].msgs[0].2, vec![3u8; 10_000]);
    let rid = log[1].rndv[0].2;
    assert_eq!(sim.eng(1).rts_charge(rid), len as u64);
    assert!(log[1].recv_done.is_empty());
    assert!(log[0].send_done.contains(&id), "the sender completes on its ACKs");
    let now = sim.now;
    sim.eng(1).accept(rid, pattern_sink(len), now);
    sim.run(1_000_000, |_, i, ev| log[i].record(ev), |_| false);
    assert_eq!(log[1].recv_done, vec![(rid, len)]);
    let s = sim.nodes[1].engine.stats();
    assert_eq!((s.eager_held, s.eager_placed), (1, 0));
}

/// A receive shorter than the message takes its start (the rest is
/// dropped as it comes); a discarded one takes nothing, and its sender
/// completes all the same.
#[test]
fn a_held_eager_message_may_be_cut_short_or_discarded() {
    let len = 50_000;
    let (mut sim, _) = send_long_eager(held_config(), Link::lossy(5.0), 5, len);
    let log = run_accepting(&mut sim, 60_000_000_000, 1000, 9);
    assert_eq!(log[1].recv_done, vec![(log[1].rndv[0].2, 1000)]);

    let (mut sim, id) = send_long_eager(held_config(), Link::lossy(5.0), 6, len);
    let mut log = run_offering(&mut sim, |sim, rid| {
        let now = sim.now;
        sim.eng(1).discard(rid, now);
    });
    assert!(log[1].recv_done.is_empty() && log[1].recv_failed.is_empty());
    assert_eq!(log[0].send_done, vec![id]);
    // Gone: a late accept fails.
    let (rid, now) = (log[1].rndv[0].2, sim.now);
    sim.eng(1).accept(rid, pattern_sink(len), now);
    sim.run(1_000_000, |_, i, ev| log[i].record(ev), |_| false);
    assert_eq!(log[1].recv_failed, vec![(rid, EngineError::UnknownRndv)]);
}

/// A receive that took a held eager message whose sender dies before the
/// last segment fails (the VC waits for its peer meanwhile, as for a
/// rendezvous pull), rather than waiting for ever.
#[test]
fn a_held_eager_message_whose_sender_dies_fails_its_receive() {
    let len = 60_000;
    // A window of 4 segments: most of the message is still to be sent
    // when its first segment is taken.
    let cfg = EngineConfig {
        window_segments: 4,
        ..held_config()
    };
    let (mut sim, _) = send_long_eager(cfg, Link::clean(), 7, len);
    let log = run_offering(&mut sim, |sim, rid| {
        let now = sim.now;
        sim.eng(1).accept(rid, pattern_sink(len), now);
        // The sender goes before the rest of its segments.
        sim.nodes[0].down = true;
    });
    assert!(log[1].recv_done.is_empty());
    assert_eq!(log[1].recv_failed.len(), 1);
    assert_eq!(log[1].peer_failed, vec![addr(0)]);
}

/// `handle_one` hands back what `handle_run` queues as an `Event::Msg`
/// (an eager message in one segment, next in order, no event before it)
/// and leaves the engines as `handle_run` leaves them: the same exchange
/// (one side, then the other, quiet and awaited sends, empty, small and
/// multi-segment messages, some sent twice in a row) run twice on
/// identical pairs, receiving datagram by datagram with each, gives the
/// same messages, completions and datagrams, in the same order, and the
/// same states and counts.
#[test]
fn handle_one_is_handle_run_without_the_queue() {
    let mut runs = Vec::new();
    for one in [false, true] {
        let (mut e, mut now) = connected_pair(test_config());
        let mut trace = Vec::new();
        let mut handed = 0;
        let mut buf = vec![0u8; 2048];
        // Everything either engine has to send goes across, one datagram
        // at a time; the receiver's messages and events are traced.
        let mut pump = |e: &mut [Engine; 2], now: u64, trace: &mut Vec<String>, handed: &mut usize| loop {
            let mut moved = false;
            for s in 0..2 {
                while let Some((_, n)) = e[s].poll_transmit(now, &mut buf) {
                    moved = true;
                    trace.push(format!("{s} sent {:?}", &buf[..n]));
                    let r = &mut e[1 - s];
                    if one {
                        if let Some((h, p)) = r.handle_one(addr(s), &buf[..n], now) {
                            *handed += 1;
                            trace.push(format!("msg {} {p:?}", h.tag));
                            r.release(addr(s), h.len, now);
                        }
                    } else {
                        r.handle_run(addr(s), &buf[..n], n, now);
                    }
                    while let Some(ev) = r.poll_event() {
                        match ev {
                            Event::Msg {
                                hdr: h,
                                body: MsgBody::Eager(p),
                                ..
                            } => {
                                trace.push(format!("msg {} {:?}", h.tag, &p[..]));
                                r.release(addr(s), h.len, now);
                            }
                            other => trace.push(format!("{other:?}")),
                        }
                    }
                }
            }
            if !moved {
                return;
            }
        };
        for k in 0..48u64 {
            // Some twice from the same side: the second finds its own
            // first message unacknowledged.
            let s = (k / 3 % 2) as usize;
            now += 1_000;
            let len = [8, 0, 100, 3000][k as usize % 4];
            let body = payload(7, k, len);
            let src = if k % 5 < 2 {
                SendPayload::Copied(Payload::from_vec(body))
            } else {
                SendPayload::Source(Box::new(body))
            };
            e[s].send(addr(1 - s), hdr(k), src, SendMode::Eager, now).unwrap();
            pump(&mut e, now, &mut trace, &mut handed);
            if k % 7 == 6 {
                // Delayed ACKs and what waited for later.
                now += 10_000_000;
                for x in e.iter_mut() {
                    x.handle_timeout(now);
                }
                pump(&mut e, now, &mut trace, &mut handed);
            }
        }
        for x in &e {
            trace.push(format!("{}{:?}", x.debug_state(), x.stats()));
        }
        runs.push((trace, handed));
    }
    assert!(runs[1].1 >= 16, "handle_one handed back {} messages", runs[1].1);
    let (general, one) = (&runs[0].0, &runs[1].0);
    assert_eq!(general.len(), one.len());
    for (g, o) in general.iter().zip(one) {
        assert_eq!(g, o);
    }
}
