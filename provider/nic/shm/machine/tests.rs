//! The machine alone: inputs by hand, outputs checked one by one. The
//! races that a synchronous executor never shows (a copy's result after a
//! frame that should have come later) are fed here in that order.

use super::*;
use crate::ffi::{FI_ECANCELED, FI_EHOSTUNREACH, FI_EINVAL, FI_EIO};
use crate::nic::shm::frame::Malformed;
use crate::nic::shm::mailbox::credit_cost;
use crate::nic::shm::mapping::SharedBytes;
use crate::nic::shm::test_addr;
use crate::proto::MemRanges;
use smallvec::smallvec;

const PAYLOAD: usize = 256;

fn machine(loan: u64, cma: bool) -> Machine {
    spanning_machine(loan, cma, 1)
}

/// `machine` whose messages may span `span` slots.
fn spanning_machine(loan: u64, cma: bool, span: usize) -> Machine {
    Machine::new(
        Config {
            payload_max: PAYLOAD,
            span,
            nrings: 4,
            loan,
            cma,
            rndv_threshold: usize::MAX,
        },
        7,
    )
}

fn hdr(len: u64, tag: u64) -> MsgHdr {
    MsgHdr {
        tag,
        data: 0,
        len,
        flags: MsgHdr::TAGGED,
    }
}

fn actions(m: &mut Machine) -> Vec<Action> {
    std::iter::from_fn(|| m.poll_action()).collect()
}

fn events(m: &mut Machine) -> Vec<WireEvent> {
    std::iter::from_fn(|| m.poll_event()).collect()
}

/// The frames of `Post` actions, with their destination.
fn posts(a: &[Action]) -> Vec<(SocketAddr, Frame)> {
    a.iter()
        .filter_map(|a| match a {
            Action::Post { to, frame } => Some((*to, frame.clone())),
            _ => None,
        })
        .collect()
}

fn room(freed: u64) -> RingView {
    RingView {
        room: true,
        freed: Some(freed),
    }
}

/// Sends an eager message of `len` bytes through an empty ring.
fn eager_now(m: &mut Machine, ix: PeerIx, op: OpId, len: usize, freed: u64, inject: bool) -> EagerStep {
    let src = vec![op as u8; len];
    let step = m.send_eager(ix, op, &hdr(len as u64, op), &src, inject, false, room(freed));
    if let EagerStep::Now(_) = step {
        assert!(m.eager_posted(ix, op, len, false));
    }
    step
}

/// Frames the machine offers for `ix`, published as long as `room` slots
/// are free, confirmed one by one.
fn drain(m: &mut Machine, ix: PeerIx, freed: u64, mut room: usize) -> Vec<SlotHeadOf> {
    let mut out = Vec::new();
    while room > 0 {
        let Some(o) = m.poll_post(ix, || freed) else { break };
        let mut payload = vec![0u8; o.head.len];
        o.bytes.fill(&mut payload);
        let next = o.next;
        out.push((o.head, payload));
        m.posted(ix, next);
        room -= 1;
    }
    out
}

type SlotHeadOf = (crate::nic::shm::mailbox::SlotHead, Vec<u8>);

fn parse(h: &SlotHeadOf) -> Frame {
    Frame::parse(&h.0, Some(&SharedBytes::of_slice(&h.1))).unwrap()
}

#[test]
fn a_sender_keeps_within_its_loan_and_sends_rendezvous_when_short() {
    let cost = credit_cost(200);
    let loan = 8 * cost;
    let mut m = machine(0, true);
    m.connect(0, test_addr(2), loan);
    let mut sent = 0;
    while let EagerStep::Now(_) = eager_now(&mut m, 0, sent, 200, 0, false) {
        sent += 1;
    }
    // A quarter of the loan stays for RTS frames.
    assert_eq!((sent, m.stats.no_credit), (6, 1));
    // An inject does not fall back: it waits for credit, queued with its
    // own copy, and completes once published.
    for op in [100, 101] {
        let now = EagerStep::Now(Frame::Eager { hdr: hdr(200, op) }.head());
        assert_eq!(eager_now(&mut m, 0, op, 200, 0, true), now);
    }
    assert_eq!(eager_now(&mut m, 0, 102, 200, 0, true), EagerStep::Queued);
    assert_eq!(m.backlogged(), 1);
    assert!(drain(&mut m, 0, 0, 10).is_empty(), "no credit, nothing offered");
    assert!(events(&mut m).is_empty());
    // The owner gives one message's credit back.
    let out = drain(&mut m, 0, cost, 10);
    assert_eq!(out.len(), 1);
    assert_eq!(parse(&out[0]), Frame::Eager { hdr: hdr(200, 102) });
    assert_eq!(out[0].1, vec![102u8; 200]);
    assert_eq!(events(&mut m), vec![WireEvent::SendDone { op: 102 }]);
    assert_eq!(m.backlogged(), 0);
}

/// `idle` (a pass that may stop after looking at the rings) is false
/// whenever one of the pass's steps would find something: a frame to
/// post, a delivery to settle, an event to hand up, a check due.
#[test]
fn a_machine_is_idle_only_when_no_step_of_a_pass_has_work() {
    let mut m = machine(0, true);
    assert!(m.idle(0));
    assert!(!m.idle(CHECK_EVERY_NS), "a liveness check is due");
    assert!(m.check_due(CHECK_EVERY_NS));
    assert!(m.idle(CHECK_EVERY_NS + 1), "checked");
    m.connect(0, test_addr(2), 0);
    let src = vec![1u8; 3];
    let full = RingView {
        room: false,
        freed: Some(0),
    };
    // Waiting for ring space: the pass posts it.
    assert_eq!(
        m.send_eager(0, 5, &hdr(3, 5), &src, false, false, full),
        EagerStep::Queued
    );
    assert!(!m.idle(1));
    drain(&mut m, 0, 0, 1);
    // Published: its completion waits for the pass to hand it up.
    assert!(!m.idle(1));
    assert_eq!(events(&mut m), vec![WireEvent::SendDone { op: 5 }]);
    assert!(m.idle(1));
    // Waiting for the peer to take it (FI_DELIVERY_COMPLETE).
    let EagerStep::Now(_) = m.send_eager(0, 6, &hdr(3, 6), &src, false, true, room(0)) else {
        panic!()
    };
    assert!(!m.eager_posted(0, 6, 3, true));
    assert!(!m.idle(1));
    m.delivered(0);
    assert!(!m.idle(1), "its event");
    events(&mut m);
    assert!(m.idle(1));
}

#[test]
fn an_rts_waits_for_credit_behind_the_queue_and_does_not_complete_its_send() {
    let cost = credit_cost(16);
    let mut m = machine(0, true);
    m.connect(0, test_addr(2), 4 * cost);
    let src: Box<dyn SendSource> = Box::new(vec![9u8; 5000]);
    m.send_rts(0, 1, &hdr(5000, 1), src, smallvec![(0x1000, 5000)]).unwrap();
    // RTS frames complete no send of their own; the endpoint counts them
    // against its transmit slots.
    assert_eq!((m.backlogged(), m.backlogged_untracked()), (1, 1));
    let out = drain(&mut m, 0, 0, 10);
    let Frame::Rts { hdr: h, key, iov } = parse(&out[0]) else {
        panic!("{out:?}")
    };
    assert_eq!((h.len, iov), (5000, smallvec![(0x1000, 5000)]));
    assert!(events(&mut m).is_empty(), "complete only at FIN");
    // Too many pieces for one RTS.
    let many: MemRanges = (0..PAYLOAD as u64 / 16 + 1).map(|i| (i * 8, 8)).collect();
    let src: Box<dyn SendSource> = Box::new(vec![0u8; many.len() * 8]);
    assert_eq!(m.send_rts(0, 2, &hdr(0, 2), src, many), Err(FI_EINVAL));
    // The FIN of that RTS, from its receiver.
    m.ring_claimed(0, test_addr(2), 42);
    let r = m.on_frame(0, Ok(Frame::Fin { key, status: 0 }), None);
    assert_eq!(
        (r, events(&mut m)),
        (OnFrame::Handled, vec![WireEvent::SendDone { op: 1 }])
    );
}

#[test]
fn delivery_complete_waits_for_the_peer_to_take_the_slot() {
    let mut m = machine(0, true);
    m.connect(0, test_addr(2), 0);
    let src = vec![1u8; 3];
    let EagerStep::Now(_) = m.send_eager(0, 5, &hdr(3, 5), &src, false, true, room(0)) else {
        panic!()
    };
    assert!(!m.eager_posted(0, 5, 3, true), "published, not yet taken");
    assert_eq!((m.delivering(), m.delivery_front(0)), (1, Some(0)));
    assert!(events(&mut m).is_empty());
    m.delivered(0);
    assert_eq!(events(&mut m), vec![WireEvent::SendDone { op: 5 }]);
    // A queued one: complete once published and taken, not before.
    let EagerStep::Queued = m.send_eager(
        0,
        6,
        &hdr(3, 6),
        &src,
        false,
        true,
        RingView {
            room: false,
            freed: Some(0),
        },
    ) else {
        panic!()
    };
    drain(&mut m, 0, 0, 1);
    assert!(events(&mut m).is_empty());
    assert_eq!(m.delivery_front(0), Some(1));
    m.delivered(0);
    assert_eq!(events(&mut m), vec![WireEvent::SendDone { op: 6 }]);
}

#[test]
fn a_receiver_charges_credit_gives_it_back_and_bans_an_overdraft() {
    let cost = credit_cost(100);
    let mut m = machine(2 * cost, true);
    let a = test_addr(1);
    m.ring_claimed(0, a, 42);
    let eager = || Ok(Frame::Eager { hdr: hdr(100, 0) });
    let c1 = match m.on_frame(0, eager(), None) {
        OnFrame::Eager { credit, .. } => credit,
        r => panic!("{r:?}"),
    };
    assert!(matches!(m.on_frame(0, eager(), None), OnFrame::Eager { .. }));
    assert_eq!(m.held_credit(0), 2 * cost);
    // The application takes the first: its credit goes back (cumulative).
    assert_eq!(m.free_credit(c1), Some(GiveCredit { ring: 0, freed: cost }));
    assert!(matches!(m.on_frame(0, eager(), None), OnFrame::Eager { .. }));
    // A third message in flight is beyond the loan: the producer is cut off.
    assert!(matches!(m.on_frame(0, eager(), None), OnFrame::Rejected(_)));
    assert_eq!((m.active(), m.banned(), m.stats.rejected), (&[][..], &[0][..], 1));
    // Credit of the banned generation is not given back any more.
    assert_eq!(m.free_credit(c1), None);
    // Once its producer let go, the ring is free again.
    m.unban(0);
    assert!(matches!(actions(&mut m)[..], [Action::FreeRing { ring: 0 }]));
    assert!(m.banned().is_empty());
}

#[test]
fn malformed_frames_cut_their_producer_off_and_fail_its_receives() {
    let mut m = machine(0, false);
    let a = test_addr(1);
    m.ring_claimed(0, a, 42);
    m.ring_claimed(1, test_addr(3), 43);
    // A receive that the producer of ring 0 pushes into.
    let Frame::Rts { .. } = rts_frame(7, 5000) else {
        unreachable!()
    };
    let OnFrame::Rndv { held, .. } = m.on_frame(0, Ok(rts_frame(7, 5000)), None) else {
        panic!()
    };
    m.accept(held, 1, Box::new(vec![0u8; 5000]), smallvec![(0x2000, 5000)]);
    assert!(matches!(&posts(&actions(&mut m))[..], [(to, Frame::Cts { key: 7, .. })] if *to == a));
    for bad in [
        Malformed::Kind(99),
        Malformed::TooLong,
        Malformed::IovList,
        Malformed::IovSum,
        Malformed::Payload,
        Malformed::Grant,
        Malformed::Status,
    ] {
        let r = m.on_frame(0, Err(bad), None);
        assert_eq!(r, OnFrame::Rejected(bad.why()));
    }
    assert_eq!(m.stats.rejected, 7);
    assert_eq!((m.active(), m.banned()), (&[1][..], &[0][..]));
    assert_eq!(events(&mut m), vec![WireEvent::RecvFailed { op: 1, err: FI_EIO }]);
    // The other producer is not affected.
    assert!(matches!(
        m.on_frame(1, Ok(Frame::Eager { hdr: hdr(3, 1) }), None),
        OnFrame::Eager { .. }
    ));
}

fn rts_frame(key: u64, len: u64) -> Frame {
    Frame::Rts {
        hdr: hdr(len, key),
        key,
        iov: smallvec![(0x7000_0000, len)],
    }
}

/// A machine with our ring 0 in `peer`'s mailbox and a rendezvous send
/// of `len` bytes to it (op 1), its RTS published: the machine and the
/// RTS's key.
fn sending_rts(peer: SocketAddr, len: u64) -> (Machine, u64) {
    let mut m = machine(0, true);
    m.connect(0, peer, 0);
    let src: Box<dyn SendSource> = Box::new(vec![1u8; len as usize]);
    m.send_rts(0, 1, &hdr(len, 1), src, smallvec![(0x1000, len)]).unwrap();
    match parse(&drain(&mut m, 0, 0, 1)[0]) {
        Frame::Rts { key, .. } => (m, key),
        f => panic!("{f:?}"),
    }
}

#[test]
fn rendezvous_frames_from_a_third_process_are_ignored() {
    let (b, c) = (test_addr(2), test_addr(3));
    let (mut m, key) = sending_rts(b, 100_000);
    // C, in ring 0 of our mailbox, forges B's answers.
    m.ring_claimed(0, c, 43);
    for f in [
        Frame::Fin { key, status: 0 },
        Frame::Cts { key, rid: 1 },
        Frame::Ctw {
            key,
            rid: 1,
            at: 0,
            grant: 0,
            iov: smallvec![(8, 16)],
        },
    ] {
        assert_eq!(m.on_frame(0, Ok(f), None), OnFrame::Handled);
    }
    assert!(events(&mut m).is_empty(), "a forged FIN completed the send");
    assert!(actions(&mut m).is_empty(), "a forged CTW made us write");
    assert!(!m.wants_post(), "a forged CTS made us push");
    // B's own FIN completes it.
    m.ring_claimed(1, b, 42);
    m.on_frame(1, Ok(Frame::Fin { key, status: 0 }), None);
    assert_eq!(events(&mut m), vec![WireEvent::SendDone { op: 1 }]);
}

#[test]
fn a_ctw_beyond_the_message_is_answered_with_eio() {
    let b = test_addr(2);
    let (mut m, _) = sending_rts(b, 50_000);
    m.ring_claimed(0, b, 42);
    let ctw = |at, len| Frame::Ctw {
        key: 1,
        rid: 9,
        at,
        grant: 2,
        iov: smallvec![(0x9000, len)],
    };
    m.on_frame(0, Ok(ctw(40_000, 20_000)), None);
    assert!(matches!(
        &posts(&actions(&mut m))[..],
        [(_, Frame::Wdone { rid: 9, status })] if *status == -(FI_EIO as i64)
    ));
    // In bounds: a write under grant 2, of our bytes from `at` on.
    m.on_frame(0, Ok(ctw(40_000, 10_000)), None);
    let a = actions(&mut m);
    let [Action::CmaWrite {
        token,
        peer: 0,
        grant: 2,
        rid: 9,
        local,
        remote,
    }] = &a[..]
    else {
        panic!("{a:?}")
    };
    assert_eq!(
        (local, remote),
        (&smallvec![(0x1000 + 40_000, 10_000)], &smallvec![(0x9000, 10_000)])
    );
    // Revoked by the receiver first: the WDONE says so.
    m.cma_done(*token, Err(CmaErr::Revoked));
    assert!(matches!(
        &posts(&actions(&mut m))[..],
        [(_, Frame::Wdone { rid: 9, status })] if *status == -(FI_ECANCELED as i64)
    ));
    assert_eq!(m.stats.pushed_cma, 0);
}

/// A receiver with an RTS of `len` bytes from the peer of ring 0, accepted
/// into `local`: the machine, the receive's rid (from its first frame),
/// and the actions so far.
fn accepted(len: u64, cma: bool) -> (Machine, Vec<Action>) {
    let mut m = machine(0, cma);
    m.ring_claimed(0, test_addr(1), 42);
    let OnFrame::Rndv { held, credit, .. } = m.on_frame(0, Ok(rts_frame(5, len)), None) else {
        panic!()
    };
    assert!(m.free_credit(credit).is_some());
    actions(&mut m);
    m.accept(
        held,
        77,
        Box::new(vec![0u8; len as usize]),
        smallvec![(0x2000_0000, len)],
    );
    let a = actions(&mut m);
    (m, a)
}

/// `accepted`, split: the grant armed, the CTW posted, the head read
/// asked for. Returns the rid.
fn split(len: u64) -> (Machine, u64) {
    let (mut m, a) = accepted(len, true);
    let [Action::ArmGrant { ring: 0, rid }] = a[..] else {
        panic!("{a:?}")
    };
    m.grant_armed(0, rid, Some(3));
    let a = actions(&mut m);
    let at = (len / 2) & !4095;
    assert!(
        matches!(
            &a[..],
            [Action::Post { frame: Frame::Ctw { key: 5, at: x, grant: 3, iov, .. }, .. },
             Action::CmaRead { token: Token::Head(r), pid: 42, local, remote }]
            if *x == at && *r == rid && iov[..] == [(0x2000_0000 + at, len - at)]
                && local[..] == [(0x2000_0000, at)] && remote[..] == [(0x7000_0000, at)]
        ),
        "{a:?}"
    );
    (m, rid)
}

#[test]
fn a_small_rendezvous_is_read_at_once() {
    let (mut m, a) = accepted(5000, true);
    let [Action::CmaRead { token, .. }] = a[..] else {
        panic!("{a:?}")
    };
    m.cma_done(token, Ok(5000));
    assert!(matches!(
        &posts(&actions(&mut m))[..],
        [(_, Frame::Fin { key: 5, status: 0 })]
    ));
    assert_eq!(events(&mut m), vec![WireEvent::RecvDone { op: 77, written: 5000 }]);
    assert_eq!(m.stats.pulled, 1);
}

#[test]
fn a_large_rendezvous_is_split_with_its_sender() {
    let (mut m, rid) = split(100_000);
    m.cma_done(Token::Head(rid), Ok(49_152));
    assert!(events(&mut m).is_empty(), "the sender's half is outstanding");
    m.on_frame(0, Ok(Frame::Wdone { rid, status: 0 }), None);
    let a = actions(&mut m);
    assert!(matches!(a[0], Action::RevokeGrant { ring: 0, grant: 3, rid: r } if r == rid));
    assert!(matches!(&posts(&a)[..], [(_, Frame::Fin { key: 5, status: 0 })]));
    assert_eq!(
        events(&mut m),
        vec![WireEvent::RecvDone {
            op: 77,
            written: 100_000
        }]
    );
}

/// Both ranks of an exchange send each other a large message: each reads
/// the one it receives whole, and asks its peer, busy reading ours, to
/// write none of it. The split comes back once our send is over.
#[test]
fn a_large_rendezvous_from_a_peer_pulling_ours_is_read_whole() {
    let peer = test_addr(1);
    let (mut m, ours) = sending_rts(peer, 100_000);
    let receive = |m: &mut Machine, key: u64, op: OpId| {
        let OnFrame::Rndv { held, credit, .. } = m.on_frame(0, Ok(rts_frame(key, 100_000)), None) else {
            panic!()
        };
        assert!(m.free_credit(credit).is_some());
        actions(m);
        m.accept(
            held,
            op,
            Box::new(vec![0u8; 100_000]),
            smallvec![(0x2000_0000, 100_000)],
        );
        actions(m)
    };
    m.ring_claimed(0, peer, 42);
    let a = receive(&mut m, 5, 77);
    assert!(
        matches!(&a[..], [Action::CmaRead { token: Token::Pull(_), local, remote, .. }]
            if local[..] == [(0x2000_0000, 100_000)] && remote[..] == [(0x7000_0000, 100_000)]),
        "{a:?}"
    );
    // Our send ends (its FIN): the next one is split again.
    m.on_frame(0, Ok(Frame::Fin { key: ours, status: 0 }), None);
    assert_eq!(events(&mut m), vec![WireEvent::SendDone { op: 1 }]);
    let a = receive(&mut m, 6, 78);
    assert!(matches!(a[..], [Action::ArmGrant { ring: 0, .. }]), "{a:?}");
}

#[test]
fn a_split_whose_sender_did_not_write_reads_the_rest() {
    let (mut m, rid) = split(100_000);
    m.cma_done(Token::Head(rid), Ok(49_152));
    m.on_frame(
        0,
        Ok(Frame::Wdone {
            rid,
            status: -(libc::EFAULT as i64),
        }),
        None,
    );
    let a = actions(&mut m);
    assert!(
        matches!(
            &a[..],
            [Action::RevokeGrant { .. }, Action::CmaRead { token: Token::Tail(r), local, .. }]
            if *r == rid && local[..] == [(0x2000_0000 + 49_152, 100_000 - 49_152)]
        ),
        "{a:?}"
    );
    m.cma_done(Token::Tail(rid), Ok(50_848));
    assert_eq!(
        events(&mut m),
        vec![WireEvent::RecvDone {
            op: 77,
            written: 100_000
        }]
    );
    assert!(matches!(
        &posts(&actions(&mut m))[..],
        [(_, Frame::Fin { status: 0, .. })]
    ));
}

#[test]
fn a_wdone_before_the_head_is_read_waits_for_it() {
    let (mut m, rid) = split(100_000);
    m.on_frame(0, Ok(Frame::Wdone { rid, status: 0 }), None);
    assert!(matches!(actions(&mut m)[..], [Action::RevokeGrant { .. }]));
    assert!(events(&mut m).is_empty());
    // A copy in flight cannot be taken back.
    assert!(!m.cancel(77));
    m.cma_done(Token::Head(rid), Ok(49_152));
    assert_eq!(
        events(&mut m),
        vec![WireEvent::RecvDone {
            op: 77,
            written: 100_000
        }]
    );
}

#[test]
fn cancel_of_a_split_revokes_the_grant_and_lets_the_sender_go() {
    let (mut m, rid) = split(100_000);
    m.cma_done(Token::Head(rid), Ok(49_152));
    assert!(m.cancel(77));
    let a = actions(&mut m);
    assert!(matches!(a[0], Action::RevokeGrant { ring: 0, grant: 3, rid: r } if r == rid));
    assert!(matches!(&posts(&a)[..], [(_, Frame::Fin { key: 5, status: 0 })]));
    assert_eq!(m.stats.revoked, 1);
    assert!(events(&mut m).is_empty(), "no event after a cancel");
    // The sender's refused write reports back: nothing happens.
    m.on_frame(
        0,
        Ok(Frame::Wdone {
            rid,
            status: -(FI_ECANCELED as i64),
        }),
        None,
    );
    assert!(actions(&mut m).is_empty() && events(&mut m).is_empty());
    assert!(!m.cancel(77), "cancelled once");
}

#[test]
fn close_revokes_every_grant() {
    let (mut m, rid) = split(100_000);
    m.cma_done(Token::Head(rid), Ok(49_152));
    m.close();
    assert!(matches!(actions(&mut m)[..], [Action::RevokeGrant { ring: 0, grant: 3, rid: r }] if r == rid));
    assert_eq!(m.stats.revoked, 1);
}

#[test]
fn no_grant_word_free_means_reading_it_all() {
    let (mut m, a) = accepted(100_000, true);
    let [Action::ArmGrant { rid, .. }] = a[..] else {
        panic!()
    };
    m.grant_armed(0, rid, None);
    assert!(matches!(
        &actions(&mut m)[..],
        [Action::CmaRead { token: Token::Pull(r), local, .. }] if *r == rid && local[..] == [(0x2000_0000, 100_000)]
    ));
}

#[test]
fn refused_cma_falls_back_to_push_and_is_remembered() {
    let a = test_addr(1);
    let (mut m, acts) = accepted(5000, true);
    let [Action::CmaRead { token, .. }] = acts[..] else {
        panic!()
    };
    m.cma_done(token, Err(CmaErr::Refused(libc::EPERM)));
    let p = posts(&actions(&mut m));
    let [(to, Frame::Cts { key: 5, rid })] = p[..] else {
        panic!("{p:?}")
    };
    assert_eq!(to, a);
    // The sender pushes: in order only, from that sender only.
    let data: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
    let push = |m: &mut Machine, ring, off: usize, n: usize| {
        let p = SharedBytes::of_slice(&data[off..off + n]);
        let f = Frame::Data {
            rid,
            off: off as u64,
            len: n,
        };
        m.on_frame(ring, Ok(f), Some(&p))
    };
    m.ring_claimed(1, test_addr(3), 43);
    push(&mut m, 1, 0, 256);
    push(&mut m, 0, 256, 256);
    push(&mut m, 0, 0, 256);
    for off in (256..5000).step_by(256) {
        push(&mut m, 0, off, 256.min(5000 - off));
    }
    assert_eq!(events(&mut m), vec![WireEvent::RecvDone { op: 77, written: 5000 }]);
    assert!(matches!(
        &posts(&actions(&mut m))[..],
        [(_, Frame::Fin { key: 5, status: 0 })]
    ));
    // The next rendezvous from that peer asks for a push at once.
    let OnFrame::Rndv { held, .. } = m.on_frame(0, Ok(rts_frame(6, 5000)), None) else {
        panic!()
    };
    actions(&mut m);
    m.accept(held, 78, Box::new(vec![0u8; 5000]), smallvec![(0x2000_0000, 5000)]);
    assert!(matches!(&posts(&actions(&mut m))[..], [(_, Frame::Cts { key: 6, .. })]));
}

#[test]
fn bad_addresses_fail_the_message_at_both_ends() {
    let (mut m, acts) = accepted(5000, true);
    let [Action::CmaRead { token, .. }] = acts[..] else {
        panic!()
    };
    m.cma_done(token, Err(CmaErr::Fault(libc::EFAULT)));
    assert!(matches!(
        &posts(&actions(&mut m))[..],
        [(_, Frame::Fin { key: 5, status })] if *status == -FI_EIO
    ));
    assert_eq!(events(&mut m), vec![WireEvent::RecvFailed { op: 77, err: FI_EIO }]);
}

#[test]
fn a_sender_that_died_fails_the_receive() {
    // Before the read: the read finds it gone.
    let (mut m, acts) = accepted(5000, true);
    let [Action::CmaRead { token, .. }] = acts[..] else {
        panic!()
    };
    m.cma_done(token, Err(CmaErr::Gone));
    assert_eq!(
        events(&mut m),
        vec![WireEvent::RecvFailed {
            op: 77,
            err: FI_EHOSTUNREACH
        }]
    );
    assert!(actions(&mut m).is_empty(), "nobody to tell");
    // Mid split: its ring, drained, is retired.
    let (mut m, rid) = split(100_000);
    m.cma_done(Token::Head(rid), Ok(49_152));
    m.retire(0, true);
    assert!(matches!(actions(&mut m)[..], [Action::FreeRing { ring: 0 }]));
    assert_eq!(
        events(&mut m),
        vec![WireEvent::RecvFailed {
            op: 77,
            err: FI_EHOSTUNREACH
        }]
    );
    assert!(m.active().is_empty());
    // A late WDONE (a new producer of that ring) finds nothing.
    m.ring_claimed(0, test_addr(1), 42);
    m.on_frame(0, Ok(Frame::Wdone { rid, status: 0 }), None);
    assert!(events(&mut m).is_empty());
}

#[test]
fn a_peer_gone_fails_what_it_had_not_finished() {
    let mut m = machine(0, true);
    m.connect(0, test_addr(2), 0);
    m.connect(1, test_addr(3), 0);
    // Published and taken (reported first), published not taken, queued,
    // a rendezvous waiting for FIN; and one to another peer.
    let src = vec![0u8; 8];
    for op in [1, 2] {
        let EagerStep::Now(_) = m.send_eager(0, op, &hdr(8, op), &src, false, true, room(0)) else {
            panic!()
        };
        m.eager_posted(0, op, 8, true);
    }
    let EagerStep::Queued = m.send_eager(
        0,
        3,
        &hdr(8, 3),
        &src,
        false,
        false,
        RingView {
            room: false,
            freed: Some(0),
        },
    ) else {
        panic!()
    };
    let big: Box<dyn SendSource> = Box::new(vec![0u8; 5000]);
    m.send_rts(0, 4, &hdr(5000, 4), big, smallvec![(0x1000, 5000)]).unwrap();
    let other: Box<dyn SendSource> = Box::new(vec![0u8; 5000]);
    m.send_rts(1, 5, &hdr(5000, 5), other, smallvec![(0x1000, 5000)])
        .unwrap();
    m.delivered(0);
    assert_eq!(events(&mut m), vec![WireEvent::SendDone { op: 1 }]);
    m.peer_gone(0);
    let err = FI_EHOSTUNREACH;
    assert_eq!(
        events(&mut m),
        vec![
            WireEvent::SendFailed { op: 3, err },
            WireEvent::SendFailed { op: 2, err },
            WireEvent::SendFailed { op: 4, err },
            // and the endpoint hears of it (one-sided answers it waits for)
            WireEvent::PeerFailed { peer: test_addr(2) },
        ]
    );
    assert_eq!((m.backlogged(), m.delivering()), (1, 0));
    assert_eq!(m.peer_ixs().collect::<Vec<_>>(), vec![1]);
    assert!(m.in_flight());
}

#[test]
fn pushed_data_goes_when_the_queue_is_empty_and_stops_at_fin() {
    let b = test_addr(2);
    let mut m = machine(0, true);
    m.connect(0, b, 0);
    let data: Vec<u8> = (0..1000u32).map(|i| (i * 3) as u8).collect();
    let src: Box<dyn SendSource> = Box::new(data.clone());
    m.send_rts(0, 1, &hdr(1000, 1), src, smallvec![(0x1000, 1000)]).unwrap();
    drain(&mut m, 0, 0, 1);
    m.ring_claimed(0, b, 42);
    m.on_frame(0, Ok(Frame::Cts { key: 1, rid: 33 }), None);
    // A duplicate CTS changes nothing.
    m.on_frame(0, Ok(Frame::Cts { key: 1, rid: 34 }), None);
    assert!(m.wants_post());
    // A control frame queued meanwhile goes first.
    m.enqueue(0, Frame::Fin { key: 9, status: 0 });
    let out = drain(&mut m, 0, 0, 3);
    assert!(matches!(parse(&out[0]), Frame::Fin { key: 9, .. }));
    assert_eq!(
        parse(&out[1]),
        Frame::Data {
            rid: 33,
            off: 0,
            len: 256
        }
    );
    assert_eq!(out[1].1, data[..256]);
    assert_eq!(
        parse(&out[2]),
        Frame::Data {
            rid: 33,
            off: 256,
            len: 256
        }
    );
    let out = drain(&mut m, 0, 0, 10);
    assert_eq!(out.len(), 2);
    assert_eq!(
        parse(&out[1]),
        Frame::Data {
            rid: 33,
            off: 768,
            len: 232
        }
    );
    assert_eq!(out[1].1, data[768..]);
    assert!(!m.wants_post(), "all pushed");
    assert_eq!(m.stats.pushed, 4);
    m.on_frame(0, Ok(Frame::Fin { key: 1, status: 0 }), None);
    assert_eq!(events(&mut m), vec![WireEvent::SendDone { op: 1 }]);
}

#[test]
fn an_accept_of_nothing_completes_at_once() {
    let mut m = machine(0, true);
    m.ring_claimed(0, test_addr(1), 42);
    let OnFrame::Rndv { held, .. } = m.on_frame(0, Ok(rts_frame(5, 5000)), None) else {
        panic!()
    };
    m.accept(held, 1, Box::new(Vec::<u8>::new()), smallvec![]);
    assert!(matches!(
        &posts(&actions(&mut m))[..],
        [(_, Frame::Fin { key: 5, status: 0 })]
    ));
    assert_eq!(events(&mut m), vec![WireEvent::RecvDone { op: 1, written: 0 }]);
    // Accepting it twice (or one that never was) fails the receive.
    m.accept(held, 2, Box::new(vec![0u8; 8]), smallvec![(0x1000, 8)]);
    assert_eq!(events(&mut m), vec![WireEvent::RecvFailed { op: 2, err: FI_EIO }]);
}

#[test]
fn a_discarded_rendezvous_lets_its_sender_go() {
    let mut m = machine(0, true);
    m.ring_claimed(0, test_addr(1), 42);
    let OnFrame::Rndv { held, .. } = m.on_frame(0, Ok(rts_frame(5, 5000)), None) else {
        panic!()
    };
    m.discard(held);
    assert!(matches!(
        &posts(&actions(&mut m))[..],
        [(_, Frame::Fin { key: 5, status: 0 })]
    ));
    m.discard(held);
    assert!(actions(&mut m).is_empty(), "once");
}

#[test]
fn a_held_message_whose_ring_was_retired_fails_when_taken() {
    let mut m = machine(0, false);
    m.ring_claimed(0, test_addr(1), 42);
    let OnFrame::Rndv { held, .. } = m.on_frame(0, Ok(rts_frame(5, 5000)), None) else {
        panic!()
    };
    let OnFrame::Rndv { held: h2, .. } = m.on_frame(0, Ok(rts_frame(6, 5000)), None) else {
        panic!()
    };
    m.retire(0, true);
    actions(&mut m);
    m.accept(held, 1, Box::new(vec![0u8; 5000]), smallvec![(0x2000, 5000)]);
    assert_eq!(
        events(&mut m),
        vec![WireEvent::RecvFailed {
            op: 1,
            err: FI_EHOSTUNREACH
        }]
    );
    // Nobody to answer: no CTS, no FIN.
    m.discard(h2);
    assert!(actions(&mut m).is_empty());
    assert!(!m.in_flight());
}

#[test]
fn an_unreachable_sender_fails_its_receives_and_takes_its_grants_back() {
    let (mut m, rid) = split(100_000);
    m.cma_done(Token::Head(rid), Ok(49_152));
    m.unreachable(test_addr(1));
    assert!(matches!(actions(&mut m)[..], [Action::RevokeGrant { ring: 0, grant: 3, rid: r }] if r == rid));
    assert_eq!(
        events(&mut m),
        vec![WireEvent::RecvFailed {
            op: 77,
            err: FI_EHOSTUNREACH
        }]
    );
}

#[test]
fn what_costs_no_credit_goes_past_a_message_waiting_for_credit() {
    let b = test_addr(2);
    let cost = credit_cost(200);
    let mut m = machine(0, true);
    m.connect(0, b, 4 * cost);
    // A pushed rendezvous, under way.
    let data = vec![5u8; 300];
    let src: Box<dyn SendSource> = Box::new(data.clone());
    m.send_rts(0, 1, &hdr(300, 1), src, smallvec![(0x1000, 300)]).unwrap();
    drain(&mut m, 0, 0, 1);
    m.ring_claimed(0, b, 42);
    m.on_frame(0, Ok(Frame::Cts { key: 1, rid: 33 }), None);
    // Injects beyond the loan wait in the queue.
    let queued: Vec<u64> = (10..16)
        .filter(|&op| eager_now(&mut m, 0, op, 200, 0, true) == EagerStep::Queued)
        .collect();
    assert!(!queued.is_empty());
    // Meanwhile a control frame for the peer: it and the pushed data (the
    // peer may wait for them before it gives any credit back) go past.
    m.enqueue(0, Frame::Fin { key: 9, status: 0 });
    let out = drain(&mut m, 0, 0, 10);
    let kinds: Vec<Frame> = out.iter().map(parse).collect();
    assert!(matches!(kinds[0], Frame::Fin { key: 9, .. }), "{kinds:?}");
    assert!(matches!(kinds[1], Frame::Data { rid: 33, off: 0, .. }), "{kinds:?}");
    assert!(matches!(kinds[2], Frame::Data { rid: 33, off: 256, .. }), "{kinds:?}");
    assert_eq!(out.len(), 3, "the messages still wait for credit");
    // Credit back: the queue goes on in order.
    let out = drain(&mut m, 0, 10 * cost, 10);
    let ops: Vec<u64> = out
        .iter()
        .map(|f| match parse(f) {
            Frame::Eager { hdr } => hdr.tag,
            f => panic!("{f:?}"),
        })
        .collect();
    assert_eq!(ops, queued);
}

/// A second large message from the same sender as `split`'s: its grant
/// word is not to be had while the first holds the last one, so it waits
/// (the sender will copy its share). Its receive's id.
fn second_split_waiting(m: &mut Machine) -> u64 {
    let OnFrame::Rndv { held, credit, .. } = m.on_frame(0, Ok(rts_frame(6, 100_000)), None) else {
        panic!()
    };
    assert!(m.free_credit(credit).is_some());
    m.accept(
        held,
        78,
        Box::new(vec![0u8; 100_000]),
        smallvec![(0x3000_0000, 100_000)],
    );
    let [Action::ArmGrant { ring: 0, rid: second }] = actions(m)[..] else {
        panic!()
    };
    m.grant_armed(0, second, None);
    assert!(actions(m).is_empty(), "it waits: the sender will copy its share");
    second
}

#[test]
fn with_every_grant_word_armed_a_split_waits_for_one_to_come_back() {
    let (mut m, first) = split(100_000);
    let second = second_split_waiting(&mut m);
    // The first one's sender wrote its part: its grant word goes back and
    // is armed for the second at once.
    m.cma_done(Token::Head(first), Ok(49_152));
    m.on_frame(0, Ok(Frame::Wdone { rid: first, status: 0 }), None);
    let a = actions(&mut m);
    assert!(
        matches!(
            &a[..],
            [Action::RevokeGrant { ring: 0, grant: 3, rid: f }, Action::ArmGrant { ring: 0, rid: s }, ..]
            if *f == first && *s == second
        ),
        "{a:?}"
    );
    m.grant_armed(0, second, Some(3));
    assert!(matches!(
        &actions(&mut m)[..],
        [Action::Post { frame: Frame::Ctw { key: 6, grant: 3, .. }, .. }, Action::CmaRead { token: Token::Head(r), .. }]
        if *r == second
    ));
}

#[test]
fn control_frames_go_before_messages_waiting_for_room() {
    let mut m = machine(0, true);
    m.connect(0, test_addr(2), 0);
    // Messages that found the ring full wait in the queue, in order.
    for op in 1..4 {
        let src = vec![op as u8; 100];
        m.eager_queue(0, op, &hdr(100, op), &src, false);
    }
    // An answer to the peer's rendezvous, which it may be waiting for
    // before it takes anything of ours out of its ring.
    m.enqueue(0, Frame::Fin { key: 9, status: 0 });
    let out = drain(&mut m, 0, 0, 10);
    let tags: Vec<u64> = out
        .iter()
        .map(|f| match parse(f) {
            Frame::Fin { key, .. } => 1000 + key,
            Frame::Eager { hdr } => hdr.tag,
            f => panic!("{f:?}"),
        })
        .collect();
    assert_eq!(tags, vec![1009, 1, 2, 3]);
    assert_eq!(m.backlogged(), 0);
}

#[test]
fn a_refused_rendezvous_fails_its_sender_with_the_receivers_error() {
    let mut m = machine(0, true);
    m.ring_claimed(0, test_addr(1), 42);
    let OnFrame::Rndv { held, .. } = m.on_frame(0, Ok(rts_frame(5, 9000)), None) else {
        panic!()
    };
    m.refuse(held, crate::ffi::FI_EACCES);
    assert_eq!(
        posts(&actions(&mut m)),
        vec![(
            test_addr(1),
            Frame::Fin {
                key: 5,
                status: -crate::ffi::FI_EACCES
            }
        )]
    );
    // The sender's side of such a FIN.
    let mut s = machine(0, true);
    s.connect(0, test_addr(1), 0);
    let src: Box<dyn SendSource> = Box::new(vec![1u8; 9000]);
    s.send_rts(0, 3, &hdr(9000, 3), src, smallvec![(0x1000, 9000)]).unwrap();
    let out = drain(&mut s, 0, 0, 1);
    let Frame::Rts { key, .. } = parse(&out[0]) else {
        panic!()
    };
    s.ring_claimed(0, test_addr(1), 43);
    s.on_frame(
        0,
        Ok(Frame::Fin {
            key,
            status: -crate::ffi::FI_EACCES,
        }),
        None,
    );
    assert_eq!(
        events(&mut s),
        vec![WireEvent::SendFailed {
            op: 3,
            err: crate::ffi::FI_EACCES
        }]
    );
}

#[test]
fn a_split_waiting_for_a_grant_too_long_reads_it_all() {
    let (mut m, _first) = split(100_000);
    let second = second_split_waiting(&mut m);
    assert_eq!(
        m.next_deadline(1_000),
        Some(1_000 + GRANT_WAIT_NS),
        "progress comes back for it"
    );
    // The sender does not write its share of the first: after a while
    // the second is read whole, without it.
    m.expire_grant_waits(1_000);
    m.expire_grant_waits(1_000 + GRANT_WAIT_NS / 2);
    assert!(actions(&mut m).is_empty(), "not yet");
    m.expire_grant_waits(1_000 + GRANT_WAIT_NS);
    assert!(matches!(
        &actions(&mut m)[..],
        [Action::CmaRead { token: Token::Pull(r), local, .. }] if *r == second && local[..] == [(0x3000_0000, 100_000)]
    ));
    m.cma_done(Token::Pull(second), Ok(100_000));
    assert_eq!(
        events(&mut m),
        vec![WireEvent::RecvDone {
            op: 78,
            written: 100_000
        }]
    );
}

/// A one-sided request is sent in one message up to what the peer's ring
/// holds, which may be less than ours (a peer not under our cache), and
/// never past a far peer's span, even when both rings hold more.
#[test]
fn a_request_goes_in_one_message_up_to_what_the_peers_ring_holds() {
    let slot_size = PAYLOAD + crate::nic::shm::mailbox::SLOT_HDR;
    let msg_max = |span| crate::nic::shm::mailbox::msg_max(span, slot_size);
    let connect = |m: &mut Machine, ix: PeerIx, span: usize| {
        let c = Connected {
            ix,
            loan: 0,
            slot_size,
            span,
        };
        m.connect_ring(c, test_addr(100 + ix as u16));
    };
    let mut m = spanning_machine(0, true, 4);
    connect(&mut m, 0, 4);
    connect(&mut m, 1, 2);
    assert_eq!(m.eager_max(), msg_max(4));
    assert_eq!(m.request_max_to(0), msg_max(4));
    assert_eq!(m.request_max_to(1), msg_max(2));
    assert_eq!(m.request_max_to(3), msg_max(4), "not connected: ours");
    // Eight slots both ways: a message may span them, a request four.
    let far = crate::nic::shm::cache::FAR_SPAN;
    let mut m = spanning_machine(0, true, 8);
    connect(&mut m, 0, 8);
    assert_eq!(m.eager_max(), msg_max(8));
    assert_eq!(m.request_max_to(0), msg_max(far));
}
