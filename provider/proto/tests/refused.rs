//! The kernel's word that a peer's port is closed (engine/refused.rs): a
//! refusal ends the VC only when the datagram it quotes carries one of
//! the VC's connection ids.

use super::*;

/// The first datagram `e` sends to `addr(1)` for a fresh eager send of
/// `len` bytes, not delivered: its id, and the bytes an ICMP message
/// would quote of it (its first 20).
fn sent_and_quoted(e: &mut Engine, tag: u64, len: usize, now: u64) -> (MsgId, Vec<u8>) {
    let id = e
        .send(addr(1), hdr(tag), Box::new(vec![7u8; len]), SendMode::Eager, now)
        .unwrap();
    let mut buf = vec![0u8; 2048];
    let (to, n) = e.poll_transmit(now, &mut buf).expect("a datagram");
    assert_eq!(to, addr(1));
    (id, buf[..n.min(20)].to_vec())
}

fn events(e: &mut Engine) -> Log {
    let mut log = Log::default();
    while let Some(ev) = e.poll_event() {
        log.record(ev);
    }
    log
}

/// A refusal quoting a segment of the VC (the peer's connection id) fails
/// the sends under way with `PeerRefused` and announces the peer failed.
#[test]
fn a_refusal_naming_the_vc_fails_what_is_under_way() {
    let (mut e, now) = connected_pair(test_config());
    let (id, quote) = sent_and_quoted(&mut e[0], 1, 5000, now);
    assert_eq!(e[0].on_refused(addr(1), &quote), Refusal::Failed);
    let log = events(&mut e[0]);
    assert_eq!(log.send_failed, vec![(id, EngineError::PeerRefused)]);
    assert_eq!(log.peer_failed, vec![addr(1)]);
    assert!(!e[0].has_vc(addr(1)));
    assert_eq!(e[0].stats().peers_refused, 1);
}

/// A refusal of our CONN_REQ (our own connection id) fails the sends that
/// waited for the handshake: the peer was gone before we ever reached it.
#[test]
fn a_refused_connection_request_fails_its_sends() {
    let mut e = Engine::seeded(test_config(), addr(0), 5);
    let (id, quote) = sent_and_quoted(&mut e, 1, 100, 0);
    assert_eq!(quote[wire::field::KIND], wire::kind::CONN_REQ);
    assert_eq!(e.on_refused(addr(1), &quote), Refusal::Failed);
    let log = events(&mut e);
    assert_eq!(log.send_failed, vec![(id, EngineError::PeerRefused)]);
    assert!(!e.has_vc(addr(1)));
}

/// A VC with nothing under way (its peer closed its endpoint after our
/// last exchange) is dropped without an event: announcing it would fail
/// the collectives that peer finished its part of.
#[test]
fn an_idle_vc_refused_is_dropped_without_a_word() {
    let (mut e, now) = connected_pair(test_config());
    let (id, quote) = sent_and_quoted(&mut e[0], 1, 8, now);
    // Delivered after all, and acknowledged: the VC is idle again.
    assert_eq!(deliver_late(&mut e, &quote, now), vec![id]);
    assert_eq!(e[0].on_refused(addr(1), &quote), Refusal::Closed);
    let log = events(&mut e[0]);
    assert!(log.peer_failed.is_empty() && log.send_failed.is_empty());
    assert!(!e[0].has_vc(addr(1)));
}

/// The same VC awaiting an answer (a one-sided request's response,
/// `Engine::answer_due`) is not idle: the refusal fails it and announces
/// the peer, which fails what waits for the answer.
#[test]
fn a_vc_awaiting_an_answer_refused_announces_its_peer() {
    let (mut e, now) = connected_pair(test_config());
    let (id, quote) = sent_and_quoted(&mut e[0], 1, 8, now);
    e[0].answer_due(addr(1));
    assert_eq!(deliver_late(&mut e, &quote, now), vec![id]);
    assert_eq!(e[0].on_refused(addr(1), &quote), Refusal::Failed);
    let log = events(&mut e[0]);
    assert_eq!(log.peer_failed, vec![addr(1)]);
    assert!(!e[0].has_vc(addr(1)));
}

/// The datagram `quote` began, sent by `e[0]` at `now` and never
/// delivered: retransmitted once its timer fires, delivered to `e[1]`,
/// acknowledged. The sends of `e[0]` that completed.
fn deliver_late(e: &mut [Engine; 2], quote: &[u8], now: u64) -> Vec<MsgId> {
    let t = now + 100_000_000;
    e[0].handle_timeout(t);
    let mut buf = vec![0u8; 2048];
    let (_, n) = e[0].poll_transmit(t, &mut buf).expect("a retransmission");
    assert_eq!(&buf[..quote.len()], quote, "the same segment");
    e[1].handle_datagram(addr(0), &buf[..n], t);
    // Its delayed ACK.
    let t = t + 1_000_000;
    e[1].handle_timeout(t);
    let mut done = Vec::new();
    pump_pair(e, t, |s, _, ev| {
        if let (0, Event::SendDone { id }) = (s, ev) {
            done.push(id);
        }
    });
    done
}

/// Refusals that do not name the VC change nothing and are counted:
/// another connection id (an old incarnation's datagram, or a forger who
/// does not know the id), a CHALLENGE (stateless), a quote too short to
/// hold an id or not one of our datagrams, a refusal from an address we
/// have no VC with. The send then completes as if nothing happened.
#[test]
fn refusals_that_do_not_name_the_vc_change_nothing() {
    let (mut e, now) = connected_pair(test_config());
    let (id, quote) = sent_and_quoted(&mut e[0], 1, 8, now);
    let mut other_id = quote.clone();
    other_id[wire::field::CONN.start] ^= 1;
    let mut challenge = quote.clone();
    challenge[wire::field::KIND] = wire::kind::CHALLENGE;
    let mut not_ours = quote.clone();
    not_ours[wire::field::MAGIC.start] ^= 0xff;
    let short = quote[..wire::field::CONN.end - 1].to_vec();
    for q in [&other_id, &challenge, &not_ours, &short] {
        assert_eq!(e[0].on_refused(addr(1), q), Refusal::Ignored, "{q:?}");
    }
    assert_eq!(e[0].on_refused(addr(2), &quote), Refusal::Ignored);
    assert_eq!(e[0].stats().refusals_unverified, 5);
    assert_eq!(e[0].stats().peers_refused, 0);
    assert!(events(&mut e[0]).peer_failed.is_empty());
    assert_eq!(deliver_late(&mut e, &quote, now), vec![id]);
}

/// A rendezvous send whose receiver has not asked for the data waits on
/// its peer with nothing unacknowledged: after `keepalive_ns` of silence
/// the VC sends a keepalive even when the peer timeout is 15 minutes
/// (manual progress), so a dead receiver's host refuses something within
/// a second, and the send fails.
#[test]
fn a_send_waiting_on_a_dead_peer_probes_it_within_the_keepalive() {
    let cfg = EngineConfig {
        peer_timeout_ns: 900_000_000_000,
        max_retrans: u32::MAX,
        keepalive_ns: 1_000_000_000,
        ..test_config()
    };
    let (mut e, now) = connected_pair(cfg);
    let id = e[0]
        .send(addr(1), hdr(9), Box::new(vec![3u8; 1 << 20]), SendMode::Rendezvous, now)
        .unwrap();
    // The RTS arrives and is acknowledged; nobody takes the message.
    pump_pair(&mut e, now, |_, _, _| {});
    let t = now + 1_000_000;
    e[1].handle_timeout(t);
    pump_pair(&mut e, t, |_, _, _| {});
    assert!(!e[0].has_unacked());
    // The receiver dies: silence.
    let t = t + 1_000_000_000;
    assert!(e[0].poll_timeout().is_some_and(|d| d <= t));
    e[0].handle_timeout(t);
    let mut buf = vec![0u8; 2048];
    let (to, n) = e[0].poll_transmit(t, &mut buf).expect("a keepalive");
    assert_eq!((to, e[0].stats().keepalives_sent), (addr(1), 1));
    assert_eq!(e[0].on_refused(addr(1), &buf[..n.min(20)]), Refusal::Failed);
    assert_eq!(events(&mut e[0]).send_failed, vec![(id, EngineError::PeerRefused)]);
}
