//! The handshake against forgery (conn.rs), in virtual time: CONN_REQs
//! forged from a live peer's address change nothing, a real restart of the
//! peer is still recognised at once, a flood of challenges keeps no state,
//! and connection ids come from the injected entropy, afresh for each VC.

use super::*;
use crate::rng::SplitMix;
use std::cell::RefCell;

/// A CONN_REQ datagram.
fn conn_req(nonce: u64, cookie: u64, isn: u32, window: u32) -> Vec<u8> {
    wire::Packet::ConnReq {
        nonce,
        cookie,
        isn,
        window,
    }
    .to_vec()
}

/// The CONN_REQs node `from` sent to node `to` so far, in order.
fn reqs_sent(sim: &Sim, from: usize, to: usize) -> Vec<Vec<u8>> {
    sim.record
        .as_ref()
        .expect("recording")
        .iter()
        .filter(|r| r.0 == from && r.1 == addr(to) && r.2[3] == wire::kind::CONN_REQ)
        .map(|r| r.2.clone())
        .collect()
}

/// The connection id `to` holds for its VC with `from`: what `from`'s
/// latest segment or ACK to it carries.
fn live_conn_id(sim: &Sim, from: usize, to: usize) -> u64 {
    sim.record
        .as_ref()
        .expect("recording")
        .iter()
        .rev()
        .find_map(|r| match wire::Packet::parse(&r.2) {
            Ok(wire::Packet::Seg { conn, .. } | wire::Packet::Ack { conn, .. }) if r.0 == from && r.1 == addr(to) => {
                Some(conn)
            }
            _ => None,
        })
        .expect("a datagram of the live VC")
}

fn nonce_of(req: &[u8]) -> u64 {
    match wire::Packet::parse(req) {
        Ok(wire::Packet::ConnReq { nonce, .. }) => nonce,
        other => panic!("not a CONN_REQ: {other:?}"),
    }
}

/// Forged CONN_REQs from the peer's address, while a transfer is in flight
/// both ways on a lossy link: random connection ids with and without a
/// cookie, the live VC's own ids as nonce or cookie, and replays of every
/// CONN_REQ of the real handshakes (an earlier incarnation of the peer, and
/// the one that restarted into the live VC, cookie included). None of them
/// fails or restarts anything: every message arrives exactly once, in
/// order, intact, the rendezvous completes, and each one is counted as
/// challenged, forged or duplicate.
#[test]
fn forged_conn_reqs_leave_a_live_vc_alone() {
    for seed in 0..3u64 {
        let cfg = test_config();
        let mut sim = Sim::new(2, cfg.clone(), Link::clean(), 700 + seed);
        sim.record = Some(Vec::new());
        // A first incarnation of node 0, then the restart that made the live VC.
        sim.eng(0)
            .send(addr(1), hdr(0), Box::new(vec![0u8; 10]), SendMode::Eager, 0)
            .unwrap();
        sim.run_for(50_000_000, |_, _, _| {});
        sim.restart(0, cfg.clone(), 800 + seed);
        let now = sim.now;
        sim.eng(0)
            .send(addr(1), hdr(0), Box::new(vec![0u8; 10]), SendMode::Eager, now)
            .unwrap();
        sim.run_for(50_000_000, |_, _, _| {});
        assert_eq!(sim.nodes[1].engine.stats().peers_restarted, 1);
        let reqs = reqs_sent(&sim, 0, 1);
        // old incarnation's; the restarted one's without, then with cookie
        assert!(reqs.len() >= 3, "{} CONN_REQs", reqs.len());
        let old = reqs[0].clone();
        let live_nonce = nonce_of(reqs.last().unwrap());
        let with_cookie = reqs.last().unwrap().clone();
        let (old_nonce, old_cookie) = (
            nonce_of(&old),
            u64::from_le_bytes(with_cookie[12..20].try_into().unwrap()),
        );
        assert_ne!(old_cookie, 0, "the restart went through a challenge");
        let id1 = live_conn_id(&sim, 0, 1); // node 1's id for the live VC
        let id0 = live_conn_id(&sim, 1, 0); // node 0's
        assert_eq!(id0, live_nonce);
        let before = [0, 1].map(|i| sim.nodes[i].engine.stats().clone());

        // The transfer: eager both ways, and one rendezvous each way.
        sim.link = Link::lossy(5.0);
        let count = 40u64;
        let eager_len = |k: u64| 100 + (k as usize * 97) % 4000;
        let mut ids = [Vec::new(), Vec::new()];
        for (s, ids) in ids.iter_mut().enumerate() {
            let now = sim.now;
            let to = addr(1 - s);
            for k in 1..=count {
                let body = Box::new(payload(seed + s as u64, k, eager_len(k)));
                ids.push(sim.eng(s).send(to, hdr(k), body, SendMode::Eager, now).unwrap());
            }
            let src = Box::new(PatternSource { len: 1 << 20, salt: 5 });
            ids.push(sim.eng(s).send(to, hdr(999), src, SendMode::Rendezvous, now).unwrap());
        }

        // The forgeries, to node 1 from node 0's address and the other way
        // round, spread over the transfer.
        let mut rng = Rng::new(seed);
        let mut forged = [0u64; 2]; // challenged (new nonce) per target
        let mut with_cookie_count = [0u64; 2];
        let mut duplicates = [0u64; 2];
        for k in 0..400u64 {
            let to = (k % 2) as usize;
            let (peer_nonce, my_id) = if to == 1 { (live_nonce, id1) } else { (id1, id0) };
            let d = match k / 2 % 8 {
                0 => conn_req(rng.next_u64() | 1, 0, rng.next_u64() as u32, 64),
                1 => conn_req(rng.next_u64() | 1, rng.next_u64() | 1, rng.next_u64() as u32, 64),
                // the live VC's ids: ours as the cookie, or as the nonce
                2 => conn_req(rng.next_u64() | 1, my_id, 7, 64),
                3 => conn_req(my_id, peer_nonce, 7, 64),
                // the live peer's nonce with a bogus cookie: a duplicate
                4 => conn_req(peer_nonce, rng.next_u64() | 1, 7, 64),
                // replays of the real handshakes (to node 1, which saw them)
                5 if to == 1 => old.clone(),
                6 if to == 1 => with_cookie.clone(),
                7 if to == 1 => conn_req(old_nonce, old_cookie, 7, 64),
                _ => conn_req(rng.next_u64() | 1, old_cookie, 7, 64),
            };
            let nonce = nonce_of(&d);
            let cookie = u64::from_le_bytes(d[12..20].try_into().unwrap());
            if nonce == peer_nonce {
                duplicates[to] += 1;
            } else {
                forged[to] += 1;
                with_cookie_count[to] += (cookie != 0) as u64;
            }
            sim.inject(addr(1 - to), to, d, k * 250_000);
        }
        let log = run_accepting(&mut sim, 20_000_000_000, 1 << 20, 5);
        for r in 0..2 {
            let s = 1 - r;
            let l = &log[r];
            assert!(l.peer_failed.is_empty() && l.send_failed.is_empty() && l.recv_failed.is_empty());
            let tags: Vec<u64> = l.msgs.iter().map(|m| m.1.tag).collect();
            assert_eq!(
                tags,
                (1..=count).collect::<Vec<_>>(),
                "seed {seed} node {r}: lost, doubled or reordered"
            );
            for (k, m) in l.msgs.iter().enumerate() {
                let k = k as u64 + 1;
                assert!(
                    m.2 == payload(seed + s as u64, k, eager_len(k)),
                    "seed {seed} node {r}: message {k} corrupt"
                );
            }
            assert_eq!(l.recv_done, vec![(l.rndv[0].2, 1 << 20)]);
            let mut done = log[s].send_done.clone();
            done.sort_unstable();
            assert_eq!(done, ids[s]);
        }
        for i in 0..2 {
            let (b, a) = (&before[i], sim.nodes[i].engine.stats());
            assert_eq!(a.peers_restarted, b.peers_restarted, "seed {seed} node {i}");
            assert_eq!(a.peers_failed, b.peers_failed);
            assert_eq!(a.conn_reqs_challenged - b.conn_reqs_challenged, forged[i]);
            assert_eq!(a.conn_reqs_forged - b.conn_reqs_forged, with_cookie_count[i]);
            assert_eq!(a.conn_reqs_duplicate - b.conn_reqs_duplicate, duplicates[i]);
            assert!(a.challenges_sent > b.challenges_sent);
            assert!(a.challenges_sent - b.challenges_sent <= forged[i]);
            // The challenges went to the real peer, which dropped them.
            assert_eq!(
                sim.nodes[1 - i].engine.stats().challenges_answered,
                before[1 - i].challenges_answered
            );
            assert!(sim.nodes[i].engine.is_connected(addr(1 - i)));
        }
    }
}

/// A real restart: the peer loses all state and comes back at the same
/// address with a new connection id. Its first CONN_REQ is challenged,
/// its second (with the cookie) replaces the VC one round trip later: the
/// old VC's outstanding sends fail with PeerRestarted, and the new VC
/// carries traffic both ways. On a clean link the whole exchange takes
/// three one-way trips; on a lossy one it still completes.
#[test]
fn real_restart_is_recognised_promptly() {
    for (seed, loss) in [(1u64, 0.0), (2, 20.0), (3, 20.0), (4, 20.0)] {
        let cfg = test_config();
        let (mut sim, pending) = vc_with_pending_rndv(900 + seed);
        if loss > 0.0 {
            sim.link = Link::lossy(loss);
        }
        sim.restart(1, cfg, 950 + seed);
        let t0 = sim.now;
        sim.eng(1)
            .send(addr(0), hdr(3), Box::new(vec![3u8; 10]), SendMode::Eager, t0)
            .unwrap();
        let log = RefCell::new(logs(2));
        sim.run(
            10_000_000_000,
            |_, i, ev| log.borrow_mut()[i].record(ev),
            |_| {
                let l = &log.borrow()[0];
                !l.send_failed.is_empty() && !l.msgs.is_empty()
            },
        );
        let mut log = log.into_inner();
        assert_eq!(
            log[0].send_failed,
            vec![(pending, EngineError::PeerRestarted)],
            "seed {seed}"
        );
        assert_eq!(log[0].peer_failed, vec![addr(1)]);
        assert_eq!(log[0].msgs[0].1.tag, 3);
        if loss == 0.0 {
            // CONN_REQ, CHALLENGE, CONN_REQ with cookie (10 us each way),
            // then CONN_RESP and the message itself.
            assert!(sim.now - t0 <= 60_000, "took {} ns", sim.now - t0);
        }
        let st = sim.nodes[0].engine.stats();
        assert_eq!(st.peers_restarted, 1);
        assert_eq!(st.conn_reqs_forged, 0);
        assert!(sim.nodes[1].engine.stats().challenges_answered >= 1);
        let now = sim.now;
        let id = sim
            .eng(0)
            .send(addr(1), hdr(4), Box::new(vec![4u8; 10]), SendMode::Eager, now)
            .unwrap();
        sim.run_for(1_000_000_000, |_, i, ev| log[i].record(ev));
        assert_eq!(log[0].send_done, vec![id]);
        assert_eq!(log[1].msgs.last().map(|m| m.1.tag), Some(4));
    }
}

/// A flood of forged CONN_REQs from a live peer's address, each with a new
/// connection id: every one is challenged, none is remembered but in the
/// bounded queue of challenges to send (256, shared with first contacts),
/// no challenge is sent more than once per request, and the transfer in
/// flight completes untouched.
#[test]
fn challenge_flood_keeps_no_state() {
    let (mut sim, pending) = vc_with_pending_rndv(77);
    let mut rng = Rng::new(77);
    let flood = 100_000u64;
    let now = sim.now;
    let id = sim
        .eng(0)
        .send(addr(1), hdr(5), Box::new(vec![5u8; 20_000]), SendMode::Eager, now)
        .unwrap();
    for k in 0..flood {
        let d = conn_req(rng.next_u64() | 1, rng.next_u64() % 2 * rng.next_u64(), 1, 64);
        // Bursts of 1000 in the same instant, so many arrive between two
        // transmit opportunities.
        sim.inject(addr(0), 1, d, k / 1000 * 20_000);
    }
    let mut most_pending = 0;
    let log = RefCell::new(logs(2));
    sim.run(
        10_000_000_000,
        |_, i, ev| log.borrow_mut()[i].record(ev),
        |s| {
            most_pending = most_pending.max(s.nodes[1].engine.challenges_pending());
            !log.borrow()[1].msgs.is_empty() && s.nodes[1].engine.stats().conn_reqs_challenged == flood
        },
    );
    let mut log = log.into_inner();
    let st = sim.nodes[1].engine.stats();
    assert_eq!(st.conn_reqs_challenged, flood);
    assert_eq!(st.peers_restarted, 0);
    assert!(st.challenges_sent <= flood);
    assert!(most_pending <= 256, "challenges held: {most_pending}");
    assert_eq!(sim.nodes[1].engine.peer_count(), 1);
    assert!(log[1].peer_failed.is_empty() && log[0].send_failed.is_empty());
    assert_eq!(log[1].msgs[0].2, vec![5u8; 20_000]);
    sim.run_for(100_000_000, |_, i, ev| log[i].record(ev));
    assert_eq!(log[0].send_done, vec![id]);
    assert_eq!(sim.nodes[1].engine.challenges_pending(), 0);
    // The pending rendezvous is still there to be accepted.
    assert!(!log[0].send_failed.iter().any(|f| f.0 == pending));
    // Node 0, at the flooded address, got only challenges naming no
    // request of its own: dropped, answered by nothing.
    let st0 = sim.nodes[0].engine.stats();
    assert_eq!(st0.challenges_answered, 0);
    assert!(st0.dropped_stale >= sim.nodes[1].engine.stats().challenges_sent);
}

/// A CONN_REQ forged from the address of a peer we are connecting to does
/// not hijack the handshake: it is answered, nothing is adopted, and the
/// real peer's answer establishes the VC (with a peer that connects to us
/// at the same time, too).
#[test]
fn forged_conn_req_while_connecting_is_not_adopted() {
    for simultaneous in [false, true] {
        let mut sim = Sim::new(2, test_config(), Link::clean(), 61);
        let a = sim
            .eng(0)
            .send(addr(1), hdr(1), Box::new(vec![1u8; 10]), SendMode::Eager, 0)
            .unwrap();
        if simultaneous {
            sim.eng(1)
                .send(addr(0), hdr(2), Box::new(vec![2u8; 10]), SendMode::Eager, 0)
                .unwrap();
        }
        // Arrives at node 0 before node 1's answer (10 us away).
        sim.inject(addr(1), 0, conn_req(0xF00D, 0, 1, 64), 1_000);
        let mut log = logs(2);
        sim.run(1_000_000_000, |_, i, ev| log[i].record(ev), |_| false);
        assert_eq!(log[0].send_done, vec![a]);
        assert_eq!(log[1].msgs.len(), 1);
        assert_eq!(log[0].msgs.len(), simultaneous as usize);
        for n in &sim.nodes {
            let st = n.engine.stats();
            assert_eq!(st.peers_restarted + st.peers_failed, 0, "{st:?}");
        }
        assert!(log.iter().all(|l| l.peer_failed.is_empty() && l.send_failed.is_empty()));
    }
}

/// Scripted entropy: hands out 1, 2, 3, ... and counts.
struct Counting(Arc<Mutex<u64>>);

impl Entropy for Counting {
    fn next_u64(&mut self) -> u64 {
        let mut n = self.0.lock().unwrap();
        *n += 1;
        *n
    }
}

/// The (nonce, isn) of the CONN_REQ `e` sends to `to` after `send`.
fn first_req(e: &mut Engine, to: SocketAddr) -> (u64, u32) {
    e.send(to, hdr(1), Box::new(vec![1u8]), SendMode::Eager, 0).unwrap();
    let mut buf = vec![0u8; 2048];
    loop {
        let (dst, n) = e.poll_transmit(0, &mut buf).expect("a CONN_REQ");
        if dst == to {
            match wire::Packet::parse(&buf[..n]) {
                Ok(wire::Packet::ConnReq { nonce, isn, .. }) => return (nonce, isn),
                other => panic!("{other:?}"),
            }
        }
    }
}

/// splitmix64's output function is a bijection: one output gives back the
/// state it came from, and so every output after it.
fn splitmix_state_of(out: u64) -> u64 {
    fn unxorshift(y: u64, k: u32) -> u64 {
        let mut x = y;
        for _ in 0..64 / k + 1 {
            x = y ^ (x >> k);
        }
        x
    }
    fn inverse(a: u64) -> u64 {
        let mut x = a; // Newton's iteration for the inverse mod 2^64 (a odd)
        for _ in 0..6 {
            x = x.wrapping_mul(2u64.wrapping_sub(a.wrapping_mul(x)));
        }
        x
    }
    let mut z = unxorshift(out, 31);
    z = z.wrapping_mul(inverse(0x94D0_49BB_1331_11EB));
    z = unxorshift(z, 27);
    z = z.wrapping_mul(inverse(0xBF58_476D_1CE4_E5B9));
    unxorshift(z, 30)
}

/// Connection ids and ISNs are drawn from the injected entropy for every
/// VC (not from a generator seeded once), and with the OS source one VC's
/// id says nothing about the next: the attack that predicts the next id
/// from one observed id works against a seeded splitmix64, the old design,
/// and fails against `OsEntropy`, which also gives two engines built alike
/// different ids.
#[test]
fn connection_ids_are_drawn_per_vc() {
    let peers: Vec<SocketAddr> = (1..=3).map(addr).collect();
    let drawn = Arc::new(Mutex::new(0u64));
    let mut e = Engine::new(test_config(), addr(0), Box::new(Counting(drawn.clone())));
    let at_start = *drawn.lock().unwrap();
    for (k, &p) in peers.iter().enumerate() {
        let (nonce, isn) = first_req(&mut e, p);
        // Each VC took the next two words: its id, then its ISN.
        let base = at_start + 2 * k as u64;
        assert_eq!((nonce, isn), (base + 1, (base + 2) as u32));
    }
    assert_eq!(*drawn.lock().unwrap(), at_start + 6);

    // Predicting the next VC's id from one observed id.
    let predict = |nonce: u64| {
        let s = splitmix_state_of(nonce);
        // the ISN took the next word, the next VC's id the one after
        SplitMix(s.wrapping_add(0x9E37_79B9_7F4A_7C15)).next_u64()
    };
    let mut seeded = Engine::new(test_config(), addr(0), Box::new(SplitMix(12345)));
    let (n1, _) = first_req(&mut seeded, peers[0]);
    let (n2, _) = first_req(&mut seeded, peers[1]);
    assert_eq!(predict(n1), n2, "the attack works on a seeded generator");
    let mut os = [0, 1].map(|_| Engine::new(test_config(), addr(0), Box::new(OsEntropy)));
    let ids: Vec<[(u64, u32); 2]> = os
        .iter_mut()
        .map(|e| [first_req(e, peers[0]), first_req(e, peers[1])])
        .collect();
    for v in &ids {
        assert_ne!(predict(v[0].0), v[1].0);
        assert_ne!(v[0], v[1]);
    }
    assert_ne!(ids[0], ids[1], "two engines built alike drew the same ids");
}

/// A forger that follows each of the peer's CONN_REQs with one of its own
/// from the peer's address, a new id each time, after planting an unproven
/// VC there: the peer's request is challenged as well as the forger's
/// (every one is, not the latest per VC), the peer echoes its cookie, the
/// VC is re-keyed to it and its message arrives. (With one challenge per
/// VC the forger's always replaced the peer's, and the peer's connection
/// attempt timed out: found by the long fuzz run.)
#[test]
fn a_forger_following_each_request_does_not_keep_the_peer_out() {
    let mut a = Engine::seeded(test_config(), addr(0), 1);
    let mut b = Engine::seeded(test_config(), addr(1), 2);
    let mut rng = Rng::new(9);
    b.handle_datagram(addr(0), &conn_req(0xF00D, 0, 1, 64), 0);
    assert_eq!(b.unproven_count(), 1);
    let id = a
        .send(addr(1), hdr(1), Box::new(vec![1u8; 100]), SendMode::Eager, 0)
        .unwrap();
    let (mut done, mut got) = (false, Vec::new());
    let mut buf = vec![0u8; 2048];
    let mut t = 0;
    while !done || got.is_empty() {
        assert!(t < 1_000_000_000, "not connected after 1 s");
        while let Some((_, n)) = a.poll_transmit(t, &mut buf) {
            b.handle_datagram(addr(0), &buf[..n], t);
            b.handle_datagram(addr(0), &conn_req(rng.next_u64() | 1, 0, 1, 64), t);
        }
        while let Some((_, n)) = b.poll_transmit(t, &mut buf) {
            a.handle_datagram(addr(1), &buf[..n], t);
        }
        while let Some(ev) = a.poll_event() {
            done |= matches!(ev, Event::SendDone { id: i } if i == id);
        }
        while let Some(ev) = b.poll_event() {
            if let Event::Msg {
                body: MsgBody::Eager(v),
                ..
            } = ev
            {
                got.push(v.into_vec());
            }
        }
        t += 1_000_000;
        a.handle_timeout(t);
        b.handle_timeout(t);
    }
    assert_eq!(got, vec![vec![1u8; 100]]);
    assert!(b.stats().unproven_rekeyed == 1 && a.stats().challenges_answered >= 1);
}
