//! The shm wire end to end in the simulated host, in virtual time: two
//! (or three) processes whose executors and machines talk through rings
//! in plain memory, driven through `nic::Wire` by a stand-in endpoint.

use super::{flags, pattern, sim_node, sim_node_shaped, sim_node_spanning, Node, SimMem, Unposted, PLAIN};
use crate::ffi::{FI_EHOSTUNREACH, FI_EIO};
use crate::nic::shm::exec::{BATCH, LEAVE_PASSES};
use crate::nic::shm::frame::Frame;
use crate::nic::shm::machine::CHECK_EVERY_NS;
use crate::nic::shm::mailbox::{credit_cost, Fields, SlotHead};
use crate::nic::shm::sim::{SimPort, World};
use crate::nic::wire::Wire;
use crate::proto::MsgHdr;
use smallvec::smallvec;

type SimNode = Node<SimPort, SimMem>;

const A: u16 = 10;
const B: u16 = 11;

fn pair(depth: usize, payload: usize, loan: u64) -> (World, SimNode, SimNode) {
    let w = World::default();
    let a = sim_node(&w, A, depth, payload, loan);
    let b = sim_node(&w, B, depth, payload, loan);
    (w, a, b)
}

/// Two processes whose mailboxes have rings of 8 slots of 256 bytes, a
/// message spanning up to `a_span` and `b_span` of them.
fn spanning_pair(a_span: usize, b_span: usize) -> (World, SimNode, SimNode) {
    let w = World::default();
    let a = sim_node_spanning(&w, A, 8, 256, a_span, 0);
    let b = sim_node_spanning(&w, B, 8, 256, b_span, 0);
    (w, a, b)
}

/// Progresses both until neither does anything for a few rounds, with a
/// bound.
fn settle(a: &mut SimNode, b: &mut SimNode) {
    let mut quiet = 0;
    for _ in 0..10_000 {
        let any = a.progress() | b.progress();
        quiet = if any { 0 } else { quiet + 1 };
        if quiet > 3 && !a.w.m.in_flight() && !b.w.m.in_flight() {
            return;
        }
    }
}

#[test]
fn eager_sends_complete_in_order_and_only_once_in_the_ring() {
    let (_w, mut a, mut b) = pair(4, 256, 0);
    let ops: Vec<_> = (0..10u64)
        .map(|i| a.send(b.addr, i, &pattern(i, 100 + i as usize), PLAIN))
        .collect();
    // Four fit the ring; the other six wait, incomplete.
    let done = |a: &SimNode| ops.iter().filter(|&&op| a.send_result(op).is_some()).count();
    assert_eq!(done(&a), 4);
    assert_eq!(a.w.m.backlogged(), 6);
    assert_eq!(a.w.backlog(), 0, "eager sends count as the endpoint's own");
    a.progress();
    assert_eq!(done(&a), 4, "nothing left the queue yet");
    // The receiver takes the four in its ring (two matched, two kept):
    // exactly the next four sends complete, in order.
    let r1 = [b.post(300), b.post(300)];
    b.progress();
    assert!(r1.iter().all(|&r| b.recv_result(r).is_some()));
    assert_eq!(b.unexpected(), 2);
    a.progress();
    assert_eq!(done(&a), 8);
    assert!(ops[..8].iter().all(|&op| a.send_result(op) == Some(Ok(()))));
    let rest: Vec<_> = (0..8).map(|_| b.post(300)).collect();
    settle(&mut a, &mut b);
    assert_eq!(done(&a), 10);
    for (i, r) in r1.iter().chain(&rest).enumerate() {
        assert_eq!(b.recv_result(*r), Some(Ok(100 + i)));
        assert_eq!(b.up.hdrs[r].tag, i as u64);
        assert_eq!(b.data(*r)[..100 + i], pattern(i as u64, 100 + i)[..]);
    }
}

/// Sends made one after another with no progress pass between them (a
/// window of MPI_Isend) tell the port that more follow, from the second
/// on; the first send after a pass (a ping-pong's) does not. The hint
/// changes nothing the receiver sees.
#[test]
fn a_burst_of_sends_hints_the_port_and_a_lone_send_does_not() {
    let (w, mut a, mut b) = pair(8, 256, 0);
    let send = |a: &mut SimNode, i: u64| {
        let hdr = MsgHdr {
            tag: i,
            data: 0,
            len: 8,
            flags: MsgHdr::TAGGED,
        };
        assert!(a.w.send_now(&b.addr, &hdr, flags(|f| f.inject = true), &pattern(i, 8)));
    };
    send(&mut a, 0);
    assert_eq!(w.post_ahead_hints(), 0, "a lone send");
    send(&mut a, 1);
    send(&mut a, 2);
    assert_eq!(w.post_ahead_hints(), 2, "the second and third of a burst");
    a.progress();
    send(&mut a, 3);
    assert_eq!(w.post_ahead_hints(), 2, "the first after a pass");
    send(&mut a, 4);
    assert_eq!(w.post_ahead_hints(), 3);
    let r: Vec<_> = (0..5).map(|_| b.post(8)).collect();
    settle(&mut a, &mut b);
    for (i, op) in r.iter().enumerate() {
        assert_eq!(b.recv_result(*op), Some(Ok(8)));
        assert_eq!((b.up.hdrs[op].tag, b.data(*op)), (i as u64, pattern(i as u64, 8)));
    }
}

/// A message that fills more than a slot's first line tells the port the
/// next may be as long (`Port::post_body_ahead`, a prefetch of the next
/// slot's lines), whether it goes out with no operation of its own or as
/// one waiting for delivery; one that fits the first line does not, nor
/// one that waits in the queue. The hint changes nothing the receiver
/// sees.
#[test]
fn a_send_past_the_first_line_hints_the_next_slots_lines() {
    let (w, mut a, mut b) = pair(8, 256, 0);
    let hdr = |i: u64, len: usize| MsgHdr {
        tag: i,
        data: 0,
        len: len as u64,
        flags: MsgHdr::TAGGED,
    };
    let lens = [8, 16, 17, 200];
    for (i, &len) in lens.iter().enumerate() {
        let i = i as u64;
        assert!(a
            .w
            .send_now(&b.addr, &hdr(i, len), flags(|f| f.inject = true), &pattern(i, len)));
    }
    assert_eq!(
        w.post_body_ahead_hints(),
        vec![17, 200],
        "past the first line's 16 bytes"
    );
    let delivered = a.send(b.addr, 4, &pattern(4, 100), flags(|f| f.delivery = true));
    assert_eq!(
        w.post_body_ahead_hints(),
        vec![17, 200, 100],
        "a send that waits for delivery"
    );
    // Every message in the order sent: the four, then the delivered one.
    let all: Vec<usize> = lens.iter().copied().chain([100]).collect();
    let r: Vec<_> = all.iter().map(|&len| b.post(len)).collect();
    settle(&mut a, &mut b);
    for (i, (op, &len)) in r.iter().zip(&all).enumerate() {
        assert_eq!(b.recv_result(*op), Some(Ok(len)));
        assert_eq!((b.up.hdrs[op].tag, b.data(*op)), (i as u64, pattern(i as u64, len)));
    }
    assert_eq!(a.send_result(delivered), Some(Ok(())));
}

/// Messages longer than a slot span several: they go eagerly (nothing
/// is pulled), wait for room like any eager message when the ring has too
/// few slots free, and arrive whole and in order among shorter ones; a
/// send that asks for delivery completes once all its slots are taken.
#[test]
fn spanning_eager_messages_arrive_whole_and_in_order() {
    let (_w, mut a, mut b) = spanning_pair(4, 4);
    let max = 4 * (256 + 48) - 48;
    assert_eq!(a.w.eager_max(), max);
    // Slots: 4, 1, 3 (the ring of 8 is full), then 2, 4, 2 wait.
    let lens = [max, 10, 600, 300, max, 257];
    let ops: Vec<_> = lens
        .iter()
        .enumerate()
        .map(|(i, &n)| a.send(b.addr, i as u64, &pattern(i as u64, n), PLAIN))
        .collect();
    let done = |a: &SimNode| ops.iter().filter(|&&op| a.send_result(op).is_some()).count();
    assert_eq!(done(&a), 3);
    assert_eq!(a.w.m.backlogged(), 3);
    let recvs: Vec<_> = (0..lens.len()).map(|_| b.post(max)).collect();
    settle(&mut a, &mut b);
    assert_eq!(done(&a), lens.len());
    for (i, (&r, &n)) in recvs.iter().zip(&lens).enumerate() {
        assert_eq!(b.recv_result(r), Some(Ok(n)));
        assert_eq!(b.up.hdrs[&r].tag, i as u64);
        assert_eq!(b.data(r)[..n], pattern(i as u64, n)[..]);
    }
    // Published, not complete until the receiver took it (kept whole
    // as unexpected).
    let dc = a.send(b.addr, 9, &pattern(9, max), flags(|f| f.delivery = true));
    a.progress();
    assert_eq!(a.send_result(dc), None);
    b.progress();
    assert_eq!(b.unexpected(), 1);
    a.progress();
    assert_eq!(a.send_result(dc), Some(Ok(())));
    let r = b.post(max);
    settle(&mut a, &mut b);
    assert_eq!(b.data(r)[..max], pattern(9, max)[..]);
    assert_eq!(b.w.stats().pulled, 0, "all went eagerly");
}

/// A receiver whose mailbox has smaller spans than the sender's: what its
/// ring cannot hold goes by rendezvous instead.
#[test]
fn spanning_is_bounded_by_the_receivers_mailbox() {
    let (_w, mut a, mut b) = spanning_pair(4, 2);
    let two = 2 * (256 + 48) - 48;
    let short = a.send(b.addr, 1, &pattern(1, two), PLAIN);
    let long = a.send(b.addr, 2, &pattern(2, two + 1), PLAIN);
    assert_eq!(a.send_result(short), Some(Ok(())), "eager: complete in the ring");
    let r1 = b.post(4096);
    let r2 = b.post(4096);
    settle(&mut a, &mut b);
    assert_eq!(a.send_result(long), Some(Ok(())));
    assert_eq!(b.data(r1)[..two], pattern(1, two)[..]);
    assert_eq!(b.data(r2)[..two + 1], pattern(2, two + 1)[..]);
    assert_eq!(b.w.stats().pulled, 1, "the longer one was pulled");
}

/// A spanning message goes the way its receiver asks (`choice.rs`):
/// copied up to the length the receiver published, pulled beyond; and one
/// in `EXPLORE` the other way, so the receiver keeps learning both costs
/// (and, where it asks for pulls, the first `FIRST_COPIES` of a size
/// class: it learns both costs after a few messages).
/// Injects are copied whatever it asks.
#[test]
fn spanning_messages_go_the_way_the_receiver_asks() {
    use crate::nic::shm::choice::{EXPLORE, FIRST_COPIES};
    use crate::nic::shm::port::Port;
    let (_w, mut a, mut b) = spanning_pair(4, 4);
    let (one, two) = (256, 2 * (256 + 48) - 48);
    b.w.port.set_copy_max(one);
    let n = EXPLORE as usize;
    for i in 0..n {
        let r = b.post(4096);
        let op = a.send(b.addr, i as u64, &pattern(i as u64, two), PLAIN);
        settle(&mut a, &mut b);
        assert_eq!(a.send_result(op), Some(Ok(())));
        assert_eq!(b.data(r)[..two], pattern(i as u64, two)[..]);
    }
    assert_eq!(
        b.w.stats().pulled,
        n as u64 - u64::from(FIRST_COPIES) - 1,
        "all pulled but the first ones and the one exploring"
    );
    // Asked to copy two slots' worth: copied, but one.
    b.w.port.set_copy_max(two);
    for i in 0..n {
        let r = b.post(4096);
        a.send(b.addr, i as u64, &pattern(i as u64, two), PLAIN);
        settle(&mut a, &mut b);
        assert_eq!(b.data(r)[..two], pattern(i as u64, two)[..]);
    }
    assert_eq!(
        b.w.stats().pulled,
        n as u64 - u64::from(FIRST_COPIES),
        "one more pulled, exploring"
    );
    // An inject is copied even where pulls are asked for.
    b.w.port.set_copy_max(one);
    for i in 0..n {
        let r = b.post(4096);
        a.send(b.addr, i as u64, &pattern(i as u64, two), flags(|f| f.inject = true));
        settle(&mut a, &mut b);
        assert_eq!(b.data(r)[..two], pattern(i as u64, two)[..]);
    }
    assert_eq!(
        b.w.stats().pulled,
        n as u64 - u64::from(FIRST_COPIES),
        "injects are never pulled"
    );
}

/// A receiver the kernel does not let read its senders' memory asks for
/// every message its rings hold to be copied: a rendezvous would be
/// pushed through the ring after a round trip.
#[test]
fn a_receiver_that_cannot_pull_asks_for_copies() {
    use crate::nic::shm::port::Port;
    let (w, mut a, mut b) = spanning_pair(4, 4);
    let two = 2 * (256 + 48) - 48;
    b.w.port.set_copy_max(256);
    w.refuse_cma(true);
    let mut pushed = Vec::new();
    for i in 0..4u64 {
        let r = b.post(4096);
        let op = a.send(b.addr, i, &pattern(i, two), PLAIN);
        settle(&mut a, &mut b);
        assert_eq!(a.send_result(op), Some(Ok(())));
        assert_eq!(b.data(r)[..two], pattern(i, two)[..]);
        pushed.push(a.w.stats().pushed);
    }
    assert_eq!(a.w.port.copy_max(0), usize::MAX);
    assert_eq!(
        pushed[..2],
        [0, 0],
        "the first two of their size were copied, exploring"
    );
    assert!(pushed[2] > 0, "the third was pushed after the refused pull");
    assert_eq!(pushed[3], pushed[2], "the fourth was copied");
}

#[test]
fn delivery_complete_waits_until_the_receiver_took_the_message() {
    let (_w, mut a, mut b) = pair(4, 256, 0);
    let op = a.send(b.addr, 1, &[1, 2, 3], flags(|f| f.delivery = true));
    a.progress();
    assert_eq!(a.send_result(op), None, "published, not yet taken");
    // Taken as unexpected counts: the receiver holds it.
    b.progress();
    assert_eq!(b.unexpected(), 1);
    a.progress();
    assert_eq!(a.send_result(op), Some(Ok(())));
}

#[test]
fn a_pass_for_the_rings_takes_messages_and_leaves_the_rest() {
    let (_w, mut a, mut b) = pair(4, 512, 0);
    // Eager messages: one matched, one kept for later, by that pass alone.
    let r = b.post(300);
    let s1 = a.send(b.addr, 1, &pattern(1, 100), PLAIN);
    a.send(b.addr, 2, &pattern(2, 50), PLAIN);
    b.take_arrivals();
    assert_eq!(b.recv_result(r), Some(Ok(100)));
    assert_eq!(b.data(r)[..100], pattern(1, 100)[..]);
    assert_eq!(b.unexpected(), 1);
    assert_eq!(a.send_result(s1), Some(Ok(())));
    // (The kept one goes to the next receive posted.)
    let ru = b.post(300);
    b.take_arrivals();
    assert_eq!(b.recv_result(ru), Some(Ok(50)));
    // A rendezvous: the receiver's passes for the rings take it, pull it
    // and complete its receive.
    let r2 = b.post(5000);
    let s3 = a.send(b.addr, 3, &pattern(3, 5000), PLAIN);
    for _ in 0..100 {
        if b.recv_result(r2).is_some() {
            break;
        }
        a.progress();
        b.take_arrivals();
    }
    assert_eq!(b.recv_result(r2), Some(Ok(5000)));
    assert_eq!(b.data(r2), pattern(3, 5000));
    a.progress();
    assert_eq!(a.send_result(s3), Some(Ok(())));
    // What it leaves to the whole pass: a delivery-complete send ends when
    // its sender's pass sees the slot taken, not in a pass for the rings.
    let s4 = a.send(b.addr, 4, &[4, 4], flags(|f| f.delivery = true));
    b.take_arrivals();
    assert_eq!(b.unexpected(), 1);
    a.take_arrivals();
    assert_eq!(a.send_result(s4), None);
    a.progress();
    assert_eq!(a.send_result(s4), Some(Ok(())));
}

/// Messages `b` left in their slots, and those of them it kept after all.
fn left(b: &SimNode) -> (usize, usize) {
    let s = b.w.stats();
    (s.left as usize, s.left_kept as usize)
}

#[test]
fn a_message_nobody_waits_for_stays_in_its_slot_until_its_receive() {
    let (_w, mut a, mut b) = pair(4, 256, 4 * credit_cost(256));
    b.up.leave = true;
    let s = a.send(b.addr, 7, &pattern(7, 100), flags(|f| f.delivery = true));
    b.progress();
    let ring = b.w.m.active()[0];
    assert_eq!((left(&b), b.unexpected()), ((1, 0), 0), "left, not kept");
    assert_eq!(b.w.m.held_credit(ring), 0, "its credit is still the sender's");
    a.progress();
    assert_eq!(a.send_result(s), None, "its slot is not handed back");
    // What is behind it in its ring waits for it: no quiet time, the
    // polls make passes.
    assert_eq!(b.w.quiet_until(b.now), 0);
    // The receive posted next takes it from the slot, as an expected one.
    let r = b.post(300);
    b.progress();
    assert_eq!(b.recv_result(r), Some(Ok(100)));
    assert_eq!(b.data(r)[..100], pattern(7, 100)[..]);
    assert_eq!((left(&b), b.unexpected()), ((1, 0), 0));
    assert!(b.w.quiet_until(b.now) > b.now, "quiet again");
    a.progress();
    assert_eq!(a.send_result(s), Some(Ok(())));
}

#[test]
fn a_message_is_left_a_bounded_number_of_passes_and_holds_its_ring_in_order() {
    let (_w, mut a, mut b) = pair(4, 256, 0);
    b.up.leave = true;
    a.send(b.addr, 1, &pattern(1, 10), PLAIN);
    a.send(b.addr, 2, &pattern(2, 20), PLAIN);
    // Passes in a row leave the first; the one behind it is not looked
    // at (it cannot be taken before it).
    for i in 1..=LEAVE_PASSES as usize {
        b.progress();
        assert_eq!((left(&b), b.unexpected()), ((i, 0), 0));
    }
    // The next pass takes both in, kept in their order.
    b.progress();
    assert_eq!((left(&b), b.unexpected()), ((LEAVE_PASSES as usize, 1), 2));
    let r = [b.post(100), b.post(100)];
    assert_eq!(b.up.hdrs[&r[0]].tag, 1);
    assert_eq!(b.data(r[1])[..20], pattern(2, 20)[..]);
}

#[test]
fn one_message_is_left_at_a_time_and_once_a_pass() {
    let (w, mut a, mut b) = pair(4, 256, 0);
    let mut c = sim_node(&w, 12, 4, 256, 0);
    // Both rings claimed and in use first.
    let warm = [b.post(100), b.post(100)];
    a.send(b.addr, 0, &[0], PLAIN);
    c.send(b.addr, 0, &[0], PLAIN);
    settle(&mut a, &mut b);
    settle(&mut c, &mut b);
    assert!(warm.iter().all(|&r| b.recv_result(r) == Some(Ok(1))));
    b.up.leave = true;
    a.send(b.addr, 1, &pattern(1, 10), PLAIN);
    c.send(b.addr, 2, &pattern(2, 20), PLAIN);
    // One pass sees both rings: one message is left, the other kept
    // (and the first, looked at again by the pass's last look, counts
    // as left by this pass once).
    b.progress();
    assert_eq!((left(&b), b.unexpected()), ((1, 0), 1));
    for i in 2..=LEAVE_PASSES as usize {
        b.progress();
        assert_eq!((left(&b), b.unexpected()), ((i, 0), 1), "left again");
    }
    b.progress();
    assert_eq!(
        (left(&b), b.unexpected()),
        ((LEAVE_PASSES as usize, 1), 2),
        "left enough: kept"
    );
    let r = [b.post(100), b.post(100)];
    let mut tags = r.map(|r| b.up.hdrs[&r].tag);
    tags.sort();
    assert_eq!(tags, [1, 2]);
}

#[test]
fn a_left_message_keeps_a_sleeper_awake_and_a_peek_takes_it_in() {
    let (_w, mut a, mut b) = pair(4, 256, 0);
    b.up.leave = true;
    a.send(b.addr, 3, &pattern(3, 30), PLAIN);
    b.progress();
    assert_eq!(left(&b), (1, 0));
    assert!(!Wire::arm(&mut b.w), "a message waits in a ring: do not sleep");
    // What a peek does first: the message is taken in, kept.
    b.take_left();
    assert_eq!((left(&b), b.unexpected()), ((1, 1), 1));
    let r = b.post(100);
    assert_eq!(b.data(r)[..30], pattern(3, 30)[..]);
}

/// A rendezvous of `len` bytes, A to B, the receive posted first.
fn rendezvous(len: usize, refuse: bool) -> (SimNode, SimNode) {
    let (w, mut a, mut b) = pair(4, 512, 0);
    w.refuse_cma(refuse);
    let r = b.post(len);
    let data = pattern(5, len);
    let s = a.send(b.addr, 5, &data, PLAIN);
    settle(&mut a, &mut b);
    assert_eq!((a.send_result(s), b.recv_result(r)), (Some(Ok(())), Some(Ok(len))));
    assert_eq!(b.data(r), data);
    (a, b)
}

#[test]
fn a_rendezvous_is_read_by_its_receiver() {
    let (a, b) = rendezvous(5000, false);
    assert_eq!(
        (b.w.stats().pulled, a.w.stats().pushed_cma, a.w.stats().pushed),
        (1, 0, 0)
    );
}

#[test]
fn a_large_rendezvous_is_copied_by_both_processes() {
    let (a, b) = rendezvous(100_000, false);
    assert_eq!(
        (b.w.stats().pulled, a.w.stats().pushed_cma, a.w.stats().pushed),
        (1, 1, 0)
    );
}

#[test]
fn cma_refused_makes_the_sender_push_through_its_ring() {
    let (a, b) = rendezvous(100_000, true);
    assert_eq!((b.w.stats().pulled, a.w.stats().pushed_cma), (0, 0));
    assert_eq!(a.w.stats().pushed, 100_000usize.div_ceil(512) as u64);
}

#[test]
fn an_unexpected_rendezvous_is_kept_then_accepted_or_discarded() {
    let (_w, mut a, mut b) = pair(4, 512, 0);
    let data = pattern(1, 50_000);
    let s1 = a.send(b.addr, 1, &data, PLAIN);
    settle(&mut a, &mut b);
    assert_eq!((b.unexpected(), a.send_result(s1)), (1, None));
    let r = b.post(50_000);
    settle(&mut a, &mut b);
    assert_eq!((a.send_result(s1), b.recv_result(r)), (Some(Ok(())), Some(Ok(50_000))));
    assert_eq!(b.data(r), data);
    // Nobody will receive the next one: its send completes all the same.
    b.up.unposted = Unposted::Discard;
    let s2 = a.send(b.addr, 2, &data, PLAIN);
    settle(&mut a, &mut b);
    assert_eq!((a.send_result(s2), b.up.discarded), (Some(Ok(())), 1));
}

/// B accepts a large message from A and has its CTW out, A has not seen
/// it yet: B's receive, A's send, B's buffer, and the split point.
fn ctw_outstanding() -> (World, SimNode, SimNode, u64, u64, Vec<u8>) {
    let (w, mut a, mut b) = pair(4, 512, 0);
    let r = b.post(100_000);
    let data = pattern(9, 100_000);
    let s = a.send(b.addr, 9, &data, PLAIN);
    b.progress();
    assert_eq!(w.in_rings(a.addr), 1, "the CTW waits for A");
    (w, a, b, r, s, data)
}

const AT: usize = 49_152;

#[test]
fn cancel_revokes_the_senders_write_and_lets_its_send_complete() {
    let (_w, mut a, mut b, r, s, data) = ctw_outstanding();
    assert_eq!(b.data(r)[..AT], data[..AT], "the head was read");
    assert!(b.w.cancel_recv(r));
    assert_eq!(b.w.stats().revoked, 1);
    settle(&mut a, &mut b);
    assert!(
        b.data(r)[AT..].iter().all(|&x| x == 0),
        "the sender wrote after the revocation"
    );
    assert_eq!(a.w.stats().pushed_cma, 0);
    assert_eq!(a.send_result(s), Some(Ok(())), "the message was matched");
    assert_eq!(b.recv_result(r), None, "no event after a cancel");
    assert!(!b.w.cancel_recv(r));
}

#[test]
fn close_revokes_the_senders_write_and_fails_its_send() {
    let (_w, mut a, b, r, s, _) = ctw_outstanding();
    let (mem, buf) = (b.up.mem.0.clone(), b.bufs[&r]);
    drop(b);
    a.progress();
    let tail = mem
        .lock()
        .unwrap()
        .read(buf.0 + AT as u64, (100_000 - AT) as u64)
        .unwrap();
    assert!(tail.iter().all(|&x| x == 0), "the sender wrote after the close");
    assert_eq!(a.w.stats().pushed_cma, 0);
    // The receiver is gone: noticed when its answer is routed.
    assert_eq!(a.send_result(s), Some(Err(FI_EHOSTUNREACH)));
    assert!(!a.w.m.in_flight());
}

#[test]
fn a_sender_dying_mid_split_fails_the_receive() {
    let (w, _a, mut b, r, _, _) = ctw_outstanding();
    w.kill(A as u32);
    b.progress();
    assert_eq!(b.recv_result(r), None, "noticed at the next liveness check");
    b.progress_after(CHECK_EVERY_NS);
    assert_eq!(b.recv_result(r), Some(Err(FI_EHOSTUNREACH)));
    assert!(b.w.m.active().is_empty(), "its ring went back");
}

#[test]
fn a_sender_dead_before_its_message_is_taken_fails_the_receive() {
    let (w, mut a, mut b) = pair(4, 512, 0);
    a.send(b.addr, 1, &pattern(1, 20_000), PLAIN);
    b.progress();
    assert_eq!(b.unexpected(), 1);
    w.kill(A as u32);
    let r = b.post(20_000);
    assert_eq!(b.recv_result(r), Some(Err(FI_EHOSTUNREACH)));
}

#[test]
fn a_message_kept_past_its_senders_death_fails_when_taken() {
    // The sender pushes (no CMA), so no read would notice its death.
    let (w, mut a, mut b) = pair(4, 512, 0);
    w.refuse_cma(true);
    let r1 = b.post(1000);
    a.send(b.addr, 1, &pattern(1, 1000), PLAIN);
    settle(&mut a, &mut b);
    assert_eq!((b.recv_result(r1), b.unexpected()), (Some(Ok(1000)), 0));
    a.send(b.addr, 2, &pattern(2, 1000), PLAIN);
    b.progress();
    assert_eq!(b.unexpected(), 1);
    w.kill(A as u32);
    b.progress_after(CHECK_EVERY_NS);
    assert!(b.w.m.active().is_empty(), "the dead sender's ring is retired");
    let r2 = b.post(1000);
    assert_eq!(b.recv_result(r2), Some(Err(FI_EHOSTUNREACH)));
    assert!(!b.w.m.in_flight());
}

#[test]
fn a_receiver_dying_fails_what_it_had_not_taken() {
    let (w, mut a, mut b) = pair(2, 256, 0);
    // Published and taken; published, awaiting delivery; a rendezvous;
    // queued behind a full ring.
    let taken = a.send(b.addr, 1, &[1], flags(|f| f.delivery = true));
    b.progress();
    let waiting = a.send(b.addr, 2, &[2], flags(|f| f.delivery = true));
    let rndv = a.send(b.addr, 3, &pattern(3, 10_000), PLAIN);
    let queued = a.send(b.addr, 4, &[4], PLAIN);
    assert_eq!(a.send_result(queued), None);
    w.kill(B as u32);
    a.progress();
    assert_eq!(a.send_result(taken), Some(Ok(())));
    a.progress_after(CHECK_EVERY_NS);
    for op in [waiting, rndv, queued] {
        assert_eq!(a.send_result(op), Some(Err(FI_EHOSTUNREACH)), "op {op}");
    }
    assert!(!a.w.m.in_flight() && !a.w.m.in_use());
}

/// A receiver that pulls a message, answers with its FIN and exits at
/// once: the sender's pass may check on its peers before it has read the
/// FIN (here a full batch of B's messages is ahead of it in the ring), and
/// the send must complete all the same, not fail because B is gone. (An
/// MPICH Exscan's last exchange before the peer's finalize, in CI.)
#[test]
fn a_receiver_that_answers_and_exits_completes_the_send() {
    let (w, mut a, mut b) = pair(2 * BATCH, 512, 0);
    let r = b.post(20_000);
    let data = pattern(1, 20_000);
    let s = a.send(b.addr, 1, &data, PLAIN);
    for i in 0..BATCH as u64 {
        b.send(a.addr, 100 + i, &[i as u8], PLAIN);
    }
    b.progress();
    assert_eq!(b.recv_result(r), Some(Ok(20_000)), "B pulled it and answered");
    assert_eq!(b.data(r), data);
    w.kill(B as u32);
    a.progress_after(CHECK_EVERY_NS);
    a.progress();
    assert_eq!(a.send_result(s), Some(Ok(())));
    // B is forgotten once its ring is drained, at a later check.
    a.progress_after(CHECK_EVERY_NS);
    assert!(!a.w.m.in_flight());
}

#[test]
fn full_rings_hold_control_frames_too() {
    let (_w, mut a, mut b) = pair(2, 256, 0);
    let n = 8;
    let ra: Vec<_> = (0..n).map(|_| a.post(5000)).collect();
    let rb: Vec<_> = (0..n).map(|_| b.post(5000)).collect();
    let sa: Vec<_> = (0..n).map(|i| a.send(b.addr, i, &pattern(i, 5000), PLAIN)).collect();
    let sb: Vec<_> = (0..n)
        .map(|i| b.send(a.addr, i, &pattern(100 + i, 5000), PLAIN))
        .collect();
    assert!(a.w.backlog() > 0, "RTS frames wait for room");
    let mut peak = 0;
    for _ in 0..1000 {
        a.progress();
        b.progress();
        peak = peak.max(a.w.backlog()).max(b.w.backlog());
    }
    assert!(peak > 0);
    for i in 0..n as usize {
        assert_eq!(a.send_result(sa[i]), Some(Ok(())));
        assert_eq!(b.send_result(sb[i]), Some(Ok(())));
        assert_eq!(b.data(rb[i]), pattern(i as u64, 5000));
        assert_eq!(a.data(ra[i]), pattern(100 + i as u64, 5000));
    }
    assert_eq!((a.w.backlog(), a.w.m.backlogged()), (0, 0));
}

#[test]
fn credits_bound_what_the_receiver_keeps_and_come_back() {
    let cost = credit_cost(200);
    let loan = 8 * cost;
    let (_w, mut a, mut b) = pair(64, 256, loan);
    let ops: Vec<_> = (0..40u64).map(|i| a.send(b.addr, i, &pattern(i, 200), PLAIN)).collect();
    for _ in 0..200 {
        a.progress();
        b.progress();
        assert!(b.w.m.held_credit(0) <= loan, "the receiver holds more than it lent");
    }
    // Eager while the loan lasted (6, a quarter kept back), rendezvous
    // (the header only) with the rest (4), then the sender waits until
    // the receiver takes something.
    assert!(a.w.stats().no_credit > 0);
    assert_eq!((b.unexpected(), a.w.m.backlogged()), (10, 30));
    assert!(b.w.m.held_credit(0) <= loan);
    let rs: Vec<_> = (0..40).map(|_| b.post(200)).collect();
    settle(&mut a, &mut b);
    for (i, r) in rs.iter().enumerate() {
        assert_eq!(b.up.hdrs[r].tag, i as u64, "in order");
        assert_eq!(b.data(*r), pattern(i as u64, 200));
        assert_eq!(a.send_result(ops[i]), Some(Ok(())));
    }
    assert_eq!(b.w.m.held_credit(0), 0, "all given back");
}

#[test]
fn an_inject_waits_for_credit() {
    let cost = credit_cost(200);
    let (_w, mut a, mut b) = pair(64, 256, 3 * cost);
    let inject = flags(|f| f.inject = true);
    let ops: Vec<_> = (0..4u64).map(|i| a.send(b.addr, i, &pattern(i, 200), inject)).collect();
    assert_eq!(
        ops.iter().map(|&o| a.send_result(o).is_some()).collect::<Vec<_>>(),
        [true, true, true, false]
    );
    settle(&mut a, &mut b);
    assert_eq!(a.send_result(ops[3]), None, "no credit until a message is taken");
    let r = b.post(200);
    settle(&mut a, &mut b);
    assert_eq!((b.recv_result(r), a.send_result(ops[3])), (Some(Ok(200)), Some(Ok(()))));
    assert_eq!(a.w.stats().no_credit, 0, "injects never go by rendezvous");
}

/// A publishes `slots` into its ring at B as they are.
fn hostile(a: &mut SimNode, b: &SimNode, slots: &[(SlotHead, Vec<u8>)]) {
    let ix = a.w.route(b.addr).expect("B is local");
    for (h, p) in slots {
        a.w.port.publish_raw(ix, *h, p.clone());
    }
}

fn eager_head(len: usize) -> SlotHead {
    let hdr = MsgHdr {
        tag: 1,
        data: 0,
        len: len as u64,
        flags: 0,
    };
    Frame::Eager { hdr }.head()
}

#[test]
fn a_producer_beyond_its_loan_is_cut_off() {
    let loan = 2 * credit_cost(100);
    let (_w, mut a, mut b) = pair(8, 256, loan);
    hostile(&mut a, &b, &vec![(eager_head(100), vec![7; 100]); 3]);
    for _ in 0..3 {
        b.progress();
    }
    assert_eq!((b.unexpected(), b.w.stats().rejected), (2, 1));
    assert_eq!(b.w.m.banned(), &[0]);
}

#[test]
fn garbage_slots_are_rejected_and_their_rings_freed_once_let_go() {
    let (_w, mut a, mut b) = pair(4, 128, 0);
    let mut rts_short = Frame::Rts {
        hdr: MsgHdr::default(),
        key: 1,
        iov: smallvec![(8, 8)],
    }
    .head();
    rts_short.f.set_u32(20, 5); // five iovs announced, one sent
    let garbage = [
        (
            SlotHead {
                kind: 99,
                len: 0,
                f: Fields::default(),
            },
            vec![],
        ),
        (eager_head(1 << 20), vec![]),
        (rts_short, vec![0; 16]),
        (
            SlotHead {
                len: 8,
                ..Frame::Fin { key: 1, status: 0 }.head()
            },
            vec![0; 8],
        ),
    ];
    for (i, slot) in garbage.iter().enumerate() {
        hostile(&mut a, &b, std::slice::from_ref(slot));
        b.progress();
        assert_eq!(b.w.stats().rejected, i as u64 + 1);
        // A forgets that ring; the next message claims another.
        let ix = a.w.route(b.addr).unwrap();
        a.w.forget(ix);
    }
    assert_eq!(b.w.m.banned().len(), 4);
    let mut c = sim_node(&_w, 12, 4, 128, 0);
    assert_eq!(c.w.route(b.addr), None, "banned rings are not handed out again");
    // Closed by their producer, banned rings return to the pool.
    b.progress_after(CHECK_EVERY_NS);
    assert!(b.w.m.banned().is_empty());
    let s = a.send(b.addr, 3, &[1, 2, 3], PLAIN);
    let r = b.post(3);
    settle(&mut a, &mut b);
    assert_eq!(
        (a.send_result(s), b.recv_result(r), b.data(r)),
        (Some(Ok(())), Some(Ok(3)), vec![1, 2, 3])
    );
}

#[test]
fn rendezvous_frames_from_a_third_process_are_ignored() {
    let (w, mut a, mut b) = pair(4, 512, 0);
    let mut c = sim_node(&w, 12, 4, 512, 0);
    let s = a.send(b.addr, 1, &pattern(1, 100_000), PLAIN);
    b.progress();
    // C forges B's answers to A's first rendezvous (key 1).
    let forged = [
        Frame::Fin { key: 1, status: 0 },
        Frame::Cts { key: 1, rid: 1 },
        Frame::Ctw {
            key: 1,
            rid: 1,
            at: 0,
            grant: 0,
            iov: smallvec![(8, 16)],
        },
    ];
    let slots: Vec<_> = forged
        .iter()
        .map(|f| {
            let mut p = vec![0u8; f.head().len];
            f.write_payload(&mut p);
            (f.head(), p)
        })
        .collect();
    hostile(&mut c, &a, &slots);
    for _ in 0..10 {
        a.progress();
    }
    assert_eq!(a.send_result(s), None, "a forged FIN completed the send");
    assert_eq!(
        (a.w.stats().pushed, a.w.stats().pushed_cma, a.w.stats().rejected),
        (0, 0, 0)
    );
    let r = b.post(100_000);
    settle(&mut a, &mut b);
    assert_eq!((a.send_result(s), b.recv_result(r)), (Some(Ok(())), Some(Ok(100_000))));
}

#[test]
fn a_sleeping_receiver_gets_one_doorbell() {
    let (w, mut a, mut b) = pair(4, 256, 0);
    assert!(Wire::arm(&mut b.w), "nothing waiting");
    a.send(b.addr, 1, &[1], PLAIN);
    assert_eq!(w.bells(), vec![b.addr]);
    a.send(b.addr, 2, &[2], PLAIN);
    assert_eq!(w.bells().len(), 1, "the flag was cleared by the first");
    assert!(!Wire::arm(&mut b.w), "messages wait: do not sleep");
    // A polling receiver costs its senders no doorbell.
    b.progress();
    assert!(!w.sleeping(b.addr));
    a.send(b.addr, 3, &[3], PLAIN);
    assert_eq!(w.bells().len(), 1);
}

#[test]
fn messages_to_one_peer_stay_in_order_whatever_their_size() {
    let (_w, mut a, mut b) = pair(3, 256, 4 * credit_cost(256));
    let sizes = [0usize, 1, 256, 257, 5000, 3, 40_000, 100, 0, 70_000, 12];
    let rs: Vec<_> = sizes.iter().map(|&n| b.post(n)).collect();
    for (i, &n) in sizes.iter().enumerate() {
        a.send(b.addr, i as u64, &pattern(i as u64, n), PLAIN);
        a.progress();
    }
    settle(&mut a, &mut b);
    for (i, (&n, r)) in sizes.iter().zip(&rs).enumerate() {
        assert_eq!(b.recv_result(*r), Some(Ok(n)));
        assert_eq!(b.up.hdrs[r].tag, i as u64);
        assert_eq!(b.data(*r), pattern(i as u64, n));
    }
}

#[test]
fn a_restarted_peer_gets_a_fresh_ring_at_once() {
    let (w, mut a, b) = pair(4, 256, 0);
    let s = a.send(b.addr, 1, &pattern(1, 10_000), PLAIN);
    let b_addr = b.addr;
    drop(b);
    // The same address, a new process.
    let (p, mem) = w.process(b_addr, 77, 4, 4, 256, 1, 0);
    let m = crate::nic::shm::machine::Machine::new(
        crate::nic::shm::machine::Config {
            payload_max: 256,
            span: 1,
            nrings: 4,
            loan: 0,
            cma: true,
            rndv_threshold: usize::MAX,
        },
        77,
    );
    let mut b2 = Node::new(
        crate::nic::shm::exec::Exec::with_port(b_addr, vec![], p, m, 77),
        SimMem(mem),
    );
    let r = b2.post(8);
    let s2 = a.send(b_addr, 2, &[4, 2], PLAIN);
    assert_eq!(a.send_result(s), Some(Err(FI_EHOSTUNREACH)), "noticed by the next send");
    b2.progress();
    assert_eq!(
        (a.send_result(s2), b2.recv_result(r), b2.up.hdrs[&r].tag),
        (Some(Ok(())), Some(Ok(2)), 2)
    );
}

#[test]
fn bad_rts_addresses_fail_the_message_at_both_ends() {
    let (_w, mut a, mut b) = pair(4, 512, 0);
    let ix = a.w.route(b.addr).unwrap();
    // An RTS whose addresses are not mapped in A (key 1 is A's first).
    let src: Box<dyn crate::proto::SendSource> = Box::new(vec![0u8; 4096]);
    a.w.rendezvous(ix, 500, &MsgHdr::default(), src, smallvec![(0x10, 4096)])
        .unwrap();
    let r = b.post(4096);
    settle(&mut a, &mut b);
    assert_eq!(b.recv_result(r), Some(Err(FI_EIO)));
    assert_eq!(a.up.sends.get(&500), Some(&Err(FI_EIO)));
}

#[test]
fn connect_ahead_claims_rings_before_the_first_message() {
    const C: u16 = 12;
    let w = World::default();
    let mut a = sim_node(&w, A, 4, 256, 0);
    // No mailbox at that address yet: nothing is decided for it.
    let c_addr = crate::nic::shm::test_addr(C);
    a.w.connect_ahead(&[c_addr]);
    assert!(!a.w.m.in_use());
    let mut b = sim_node(&w, B, 4, 256, 0);
    let mut c = sim_node(&w, C, 4, 256, 0);
    // Itself is skipped; B is connected (a quarter of 4 rings: one peer
    // ahead), C is left for its first message.
    a.w.connect_ahead(&[a.addr, b.addr, c.addr]);
    assert!(a.w.m.in_use());
    b.progress();
    c.progress();
    assert!(b.w.m.in_use(), "B took A's ring before any message");
    assert!(!c.w.m.in_use(), "past the cap: no ring yet");
    // Both are reached over shm, C on first use (it was not remembered
    // as a UDP peer while it had no mailbox).
    for n in [&mut b, &mut c] {
        let op = a.send(n.addr, 7, &pattern(7, 100), PLAIN);
        let r = n.post(100);
        for _ in 0..100 {
            a.progress();
            n.progress();
        }
        assert_eq!(n.recv_result(r), Some(Ok(100)));
        assert_eq!(a.send_result(op), Some(Ok(())));
    }
}

/// Each peer `connect_ahead` connects to will likely claim a ring of ours:
/// a spare for each; one only when there were more local peers than it
/// takes (they need not connect to us).
#[test]
fn connect_ahead_asks_a_spare_for_each_peer_unless_crowded() {
    let w = World::default();
    // Eight rings: two peers ahead.
    let mut a = sim_node_shaped(&w, A, 8, 4, 256, 1, 0);
    let b = sim_node(&w, B, 4, 256, 0);
    a.w.connect_ahead(&[a.addr, b.addr]);
    assert_eq!(a.w.port.spares_asked, 1);
    a.w.connect_ahead(&[b.addr]);
    assert_eq!(a.w.port.spares_asked, 1, "b is connected already");
    let mut x = sim_node_shaped(&w, 20, 8, 4, 256, 1, 0);
    let peers: Vec<_> = (21..24).map(|p| sim_node(&w, p, 4, 256, 0)).collect();
    let addrs: Vec<_> = peers.iter().map(|n| n.addr).collect();
    x.w.connect_ahead(&addrs[..2]);
    assert_eq!(x.w.port.spares_asked, 2, "two peers, two spares");
    let mut y = sim_node_shaped(&w, 30, 8, 4, 256, 1, 0);
    y.w.connect_ahead(&addrs);
    assert_eq!(y.w.port.spares_asked, 1, "three peers for two: crowded");
}

/// A pass that finds nothing says how long the polls after it may look
/// only at the rings (`Exec::quiet_until`): until the next liveness check
/// while nothing waits, not at all while frames wait for room. What a
/// poll then looks at (`Exec::arrived`) sees a ring claimed and a slot
/// published since the pass, and nothing else.
#[test]
fn a_quiet_pass_is_bounded_and_its_look_sees_what_comes() {
    let (_w, mut a, mut b) = pair(4, 256, 0);
    assert!(!b.progress());
    assert!(!b.w.arrived());
    let until = b.w.quiet_until(b.now);
    assert!(
        b.now < until && until <= b.now + CHECK_EVERY_NS,
        "the next liveness check"
    );
    // a's first send claims a ring in b's mailbox: one look sees it.
    let first = a.send(b.addr, 1, &pattern(1, 8), PLAIN);
    assert!(b.w.arrived(), "a ring claimed");
    let r = b.post(8);
    b.progress();
    assert_eq!((a.send_result(first), b.recv_result(r)), (Some(Ok(())), Some(Ok(8))));
    assert!(!b.w.arrived(), "taken");
    a.send(b.addr, 2, &pattern(2, 8), PLAIN);
    assert!(b.w.arrived(), "a slot published");
    // Past the liveness check the pass must run.
    assert!(b.progress_after(CHECK_EVERY_NS));
    assert!(b.w.quiet_until(b.now) > b.now);
    // Frames waiting for room in b's ring: a's passes must post them.
    for i in 0..6 {
        a.send(b.addr, 10 + i, &pattern(i, 8), PLAIN);
    }
    assert_eq!(a.w.m.backlogged(), 2);
    assert_eq!(a.w.quiet_until(a.now), 0);
}
