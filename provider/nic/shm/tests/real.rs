//! The executor over real mailboxes (`/dev/shm`) and real cross-memory
//! attach, two endpoints in this process, driven through `nic::Wire` by
//! the stand-in endpoint. Each test uses its own ports so tests can run
//! in parallel; the mailboxes go when their wires are dropped.

use super::{flags, pattern, Node, RealMem, PLAIN};
use crate::ffi::{FI_EHOSTUNREACH, FI_EIO};
use crate::nic::shm::choice::Way;
use crate::nic::shm::frame::Frame;
use crate::nic::shm::machine::SPLIT_MIN;
use crate::nic::shm::mailbox::{credit_cost, Geometry, SlotHead};
use crate::nic::shm::port::MailboxPort;
use crate::nic::shm::{test_addr, ShmConfig, ShmWire};
use crate::nic::wire::Wire;
use crate::proto::MemRanges;
use crate::proto::{MsgHdr, SendSource};

type RealNode = Node<MailboxPort, RealMem>;

fn wire(port: u16, geo: Geometry, cma: bool, loan: u64) -> ShmWire {
    let cfg = ShmConfig {
        geo,
        cma,
        local_ips: vec![],
        loan,
    };
    ShmWire::new(test_addr(port), cfg, port as u64).unwrap()
}

/// Two endpoints of this process (A at `port`, B at `port + 1`) whose
/// mailboxes lend `loan` credit bytes per ring.
fn nodes(port: u16, geo: Geometry, cma: bool, loan: u64) -> (RealNode, RealNode) {
    let a = Node::new(wire(port, geo, cma, loan), RealMem);
    let b = Node::new(wire(port + 1, geo, cma, loan), RealMem);
    (a, b)
}

fn settle(a: &mut RealNode, b: &mut RealNode) {
    for _ in 0..1000 {
        a.progress();
        b.progress();
    }
}

#[test]
fn through_the_wire_interface() {
    let geo = Geometry::new(4, 8, 512);
    let (mut a, mut b) = nodes(41200, geo, true, 64 * credit_cost(512));
    // Eager, matched on arrival.
    let r = b.post(100);
    let s = a.send(b.addr, 1, &pattern(1, 100), PLAIN);
    assert_eq!(a.send_result(s), Some(Ok(())), "complete once in the ring");
    b.progress();
    assert_eq!((b.recv_result(r), b.data(r)), (Some(Ok(100)), pattern(1, 100)));
    // Rendezvous, read (5000) and split with the sender (100 000).
    for (tag, len) in [(2u64, 5000usize), (3, 100_000)] {
        let r = b.post(len);
        let s = a.send(b.addr, tag, &pattern(tag, len), PLAIN);
        settle(&mut a, &mut b);
        assert_eq!((a.send_result(s), b.recv_result(r)), (Some(Ok(())), Some(Ok(len))));
        assert_eq!(b.data(r), pattern(tag, len));
    }
    assert_eq!((b.w.stats().pulled, a.w.stats().pushed_cma), (2, 1));
    // Unexpected: kept (eager copied, rendezvous held), then taken.
    let s1 = a.send(b.addr, 4, &pattern(4, 300), PLAIN);
    let s2 = a.send(b.addr, 5, &pattern(5, 60_000), PLAIN);
    settle(&mut a, &mut b);
    assert_eq!((b.unexpected(), a.send_result(s2)), (2, None));
    let held = b.w.m.held_credit(0);
    assert_eq!(held, credit_cost(300) + credit_cost(16), "kept messages hold credit");
    let (r1, r2) = (b.post(300), b.post(60_000));
    settle(&mut a, &mut b);
    assert_eq!((a.send_result(s1), a.send_result(s2)), (Some(Ok(())), Some(Ok(()))));
    assert_eq!((b.data(r1), b.data(r2)), (pattern(4, 300), pattern(5, 60_000)));
    assert_eq!(b.w.m.held_credit(0), 0, "credit given back as they were taken");
    // Discarded: the sender completes.
    b.up.unposted = super::Unposted::Discard;
    let s = a.send(b.addr, 6, &pattern(6, 20_000), PLAIN);
    settle(&mut a, &mut b);
    assert_eq!((a.send_result(s), b.up.discarded), (Some(Ok(())), 1));
    // Cancelled while the sender's write is outstanding: nothing lands.
    let r = b.post(100_000);
    let s = a.send(b.addr, 7, &pattern(7, 100_000), PLAIN);
    b.progress();
    assert!(b.w.cancel_recv(r));
    settle(&mut a, &mut b);
    let got = b.data(r);
    assert_eq!(got[..49_152], pattern(7, 100_000)[..49_152]);
    assert!(got[49_152..].iter().all(|&x| x == 0), "written after the cancel");
    assert_eq!((a.send_result(s), b.recv_result(r)), (Some(Ok(())), None));
    assert_eq!((a.w.stats().pushed_cma, b.w.stats().revoked), (2, 1));
    // Nothing owed, nothing left.
    assert!(!a.w.busy() && !b.w.busy());
    assert!(!a.w.m.in_flight() && !b.w.m.in_flight());
}

#[test]
fn the_wire_pushes_where_cma_is_refused() {
    let geo = Geometry::new(4, 4, 512);
    let (mut a, mut b) = nodes(41210, geo, false, 0);
    let r = b.post(70_000);
    let s = a.send(b.addr, 1, &pattern(1, 70_000), PLAIN);
    settle(&mut a, &mut b);
    assert_eq!((a.send_result(s), b.recv_result(r)), (Some(Ok(())), Some(Ok(70_000))));
    assert_eq!(b.data(r), pattern(1, 70_000));
    assert_eq!(
        (b.w.stats().pulled, a.w.stats().pushed),
        (0, 70_000usize.div_ceil(geo.payload()) as u64)
    );
}

#[test]
fn eager_messages_in_order_through_a_full_ring() {
    let (mut a, mut b) = nodes(41000, Geometry::new(4, 4, 256), true, 0);
    let data = |i: u64| vec![i as u8; 100 + i as usize];
    let ops: Vec<_> = (0..10u64).map(|i| a.send(b.addr, i, &data(i), PLAIN)).collect();
    // Four fit the ring; the other six wait in A's queue, incomplete.
    assert_eq!(a.up.send_order, ops[..4]);
    assert_eq!((a.w.m.backlogged(), a.w.backlog()), (6, 0));
    let rs: Vec<_> = (0..10).map(|_| b.post(200)).collect();
    // Each time B empties its ring, exactly the next sends complete, in
    // the order sent.
    for round in 1..=3 {
        b.progress();
        assert_eq!(a.up.send_order, ops[..(4 * round).min(10)], "round {round}");
        a.progress();
        assert_eq!(a.up.send_order, ops[..(4 + 4 * round).min(10)], "round {round}");
    }
    assert!(ops.iter().all(|&s| a.send_result(s) == Some(Ok(()))));
    assert_eq!(a.w.m.backlogged(), 0);
    for (i, &r) in rs.iter().enumerate() {
        let i = i as u64;
        assert_eq!(b.recv_result(r), Some(Ok(100 + i as usize)));
        assert_eq!((b.up.from[&r], b.up.hdrs[&r].tag), (a.addr, i));
        assert_eq!(b.data(r)[..100 + i as usize], data(i)[..]);
    }
}

/// A rendezvous of `len` bytes, A to B: the RTS arrives before its
/// receive, which then takes it.
fn rendezvous(port: u16, cma: bool, len: usize) {
    let (mut a, mut b) = nodes(port, Geometry::new(4, 4, 512), cma, 0);
    let data = pattern(3, len);
    let s = a.send(b.addr, 5, &data, PLAIN);
    assert_eq!(a.send_result(s), None);
    b.progress();
    assert_eq!(b.unexpected(), 1, "the RTS is kept");
    let r = b.post(len);
    assert_eq!((b.up.hdrs[&r].len, b.up.from[&r]), (len as u64, a.addr));
    // Read by B alone (small, CMA), at once; else B waits for A's part.
    let at_once = cma && len < SPLIT_MIN;
    assert_eq!(b.recv_result(r).is_some(), at_once);
    settle(&mut a, &mut b);
    assert_eq!((a.send_result(s), b.recv_result(r)), (Some(Ok(())), Some(Ok(len))));
    assert_eq!(b.data(r), data);
    assert_eq!((b.w.stats().pulled > 0, a.w.stats().pushed > 0), (cma, !cma));
    assert!(!a.w.m.in_flight() && !b.w.m.in_flight());
}

#[test]
fn rendezvous_by_cross_memory_attach() {
    rendezvous(41010, true, 10_000);
    rendezvous(41014, true, 100_000);
}

#[test]
fn rendezvous_pushed_through_the_mailbox() {
    rendezvous(41020, false, 100_000);
}

/// Bytes that claim to be somewhere they are not.
struct Lying(Vec<u8>, MemRanges);

impl SendSource for Lying {
    fn len(&self) -> usize {
        self.0.len()
    }
    fn read_at(&self, offset: usize, dst: &mut [u8]) {
        dst.copy_from_slice(&self.0[offset..offset + dst.len()]);
    }
    fn ranges(&self) -> Option<MemRanges> {
        Some(self.1.clone())
    }
}

#[test]
fn rts_with_bad_addresses_fails_both_ends() {
    let (mut a, mut b) = nodes(41060, Geometry::new(2, 4, 256), true, 0);
    let s = a.send_from(
        b.addr,
        1,
        Box::new(Lying(vec![0; 4096], smallvec::smallvec![(8, 4096)])),
        PLAIN,
    );
    b.progress();
    assert_eq!(b.unexpected(), 1);
    let r = b.post(4096);
    assert_eq!(b.recv_result(r), Some(Err(FI_EIO)), "the read failed at once");
    for _ in 0..100 {
        a.progress();
    }
    assert_eq!(a.send_result(s), Some(Err(FI_EIO)));
    assert!(!a.w.m.in_flight() && !b.w.m.in_flight());
}

#[test]
fn credit_bounds_what_the_receiver_keeps_and_comes_back() {
    let cost = credit_cost(200);
    let loan = 8 * cost;
    let (mut a, mut b) = nodes(41120, Geometry::new(2, 64, 256), true, loan);
    // Eager while the loan lasts, a quarter kept back for RTS: six. The
    // seventh goes by rendezvous (its header only).
    let mut ops = Vec::new();
    while a.w.stats().no_credit == 0 {
        let i = ops.len() as u64;
        ops.push(a.send(b.addr, i, &pattern(i, 200), PLAIN));
    }
    let done: Vec<_> = ops.iter().map(|&s| a.send_result(s).is_some()).collect();
    assert_eq!(done, [true, true, true, true, true, true, false]);
    b.progress();
    assert_eq!(b.unexpected(), 7);
    let rts = credit_cost(16);
    assert_eq!(b.w.m.held_credit(0), 6 * cost + rts, "kept messages hold credit");
    // One inject fits what is left; the next waits for credit (injects
    // never go by rendezvous).
    let inject = flags(|f| f.inject = true);
    let inj = [
        a.send(b.addr, 100, &pattern(100, 200), inject),
        a.send(b.addr, 101, &pattern(101, 200), inject),
    ];
    assert_eq!((a.send_result(inj[0]), a.send_result(inj[1])), (Some(Ok(())), None));
    for _ in 0..10 {
        a.progress();
        b.progress();
        assert!(b.w.m.held_credit(0) <= loan, "the receiver holds more than it lent");
    }
    assert_eq!((b.unexpected(), a.send_result(inj[1])), (8, None));
    // B takes the first message: its credit comes back, the inject goes.
    let r = b.post(200);
    assert_eq!(b.data(r), pattern(0, 200));
    a.progress();
    assert_eq!(a.send_result(inj[1]), Some(Ok(())));
    b.progress();
    assert_eq!(b.unexpected(), 8);
    assert!(b.w.m.held_credit(0) <= loan);
    let rs: Vec<_> = (0..8).map(|_| b.post(200)).collect();
    settle(&mut a, &mut b);
    let tags = [1, 2, 3, 4, 5, 6, 100, 101];
    for (&r, t) in rs.iter().zip(tags) {
        assert_eq!(b.up.hdrs[&r].tag, t, "in order");
        assert_eq!((b.recv_result(r), b.data(r)), (Some(Ok(200)), pattern(t, 200)));
    }
    assert!(ops.iter().all(|&s| a.send_result(s) == Some(Ok(()))));
    assert_eq!(b.w.m.held_credit(0), 0, "all given back");
}

#[test]
fn delivery_complete_waits_until_the_receiver_took_the_message() {
    let (mut a, mut b) = nodes(41110, Geometry::new(2, 4, 256), true, 0);
    let s = a.send(b.addr, 1, &[1, 2, 3], flags(|f| f.delivery = true));
    assert_eq!(a.send_result(s), None, "delivery complete cannot be complete at once");
    a.progress();
    assert_eq!(a.send_result(s), None, "published, not yet taken");
    // Taken as unexpected counts: the receiver holds it.
    b.progress();
    assert_eq!(b.unexpected(), 1);
    a.progress();
    assert_eq!(a.send_result(s), Some(Ok(())));
    let r = b.post(3);
    assert_eq!((b.recv_result(r), b.data(r)), (Some(Ok(3)), vec![1, 2, 3]));
}

#[test]
fn a_real_producer_beyond_its_loan_or_writing_garbage_is_cut_off() {
    let loan = 2 * credit_cost(100);
    let (mut a, mut b) = nodes(41130, Geometry::new(2, 8, 256), true, loan);
    let hdr = MsgHdr {
        tag: 1,
        data: 0,
        len: 100,
        flags: MsgHdr::TAGGED,
    };
    let eager = Frame::Eager { hdr }.head();
    let ix = a.w.route(b.addr).expect("B is local");
    for _ in 0..3 {
        a.w.port.publish_raw(ix, eager, &[7; 100]);
    }
    for _ in 0..3 {
        b.progress();
    }
    assert_eq!((b.unexpected(), b.w.stats().rejected), (2, 1));
    assert!(b.w.m.held_credit(0) <= loan);
    // A length beyond the slot, from another ring.
    a.w.forget(ix);
    let ix = a.w.route(b.addr).expect("another ring");
    a.w.port.publish_raw(ix, SlotHead { len: 1 << 20, ..eager }, &[]);
    b.progress();
    assert_eq!(b.unexpected(), 2);
    assert_eq!((b.w.stats().rejected, b.w.m.banned().len()), (2, 2));
}

#[test]
fn a_copy_into_a_ring_is_timed_for_its_owner() {
    let geo = Geometry::new(2, 16, 512).with_span(8);
    let (mut a, mut b) = nodes(41230, geo, true, 64 * credit_cost(4096));
    // Spanning four slots; the owner knows nothing yet and asks for pulls,
    // but the first of a class is copied (`choice::copies`).
    let len = 2000;
    let r = b.post(len);
    let s = a.send(b.addr, 1, &pattern(1, len), PLAIN);
    settle(&mut a, &mut b);
    assert_eq!((a.send_result(s), b.recv_result(r)), (Some(Ok(())), Some(Ok(len))));
    assert_eq!(b.data(r), pattern(1, len));
    // The slot said what writing it took the sender: the owner weighs
    // copies into its ring with it; the sender keeps nothing of it.
    assert_eq!(b.w.choice().samples(Way::CopyIn, len), 1);
    assert_eq!(b.w.choice().samples(Way::CopyOut, len), 1);
    assert_eq!(a.w.choice().samples(Way::CopyIn, len), 0);
}

#[test]
fn restarted_peer_gets_a_fresh_ring_at_once() {
    let geo = Geometry::new(2, 4, 128);
    let (mut a, b) = nodes(41050, geo, true, 0);
    let s = a.send(b.addr, 1, &pattern(1, 10_000), PLAIN);
    let b_addr = b.addr;
    drop(b);
    let mut b2 = Node::new(wire(41051, geo, true, 0), RealMem);
    let r = b2.post(8);
    let s2 = a.send(b_addr, 9, &[4, 2], PLAIN);
    assert_eq!(a.send_result(s), Some(Err(FI_EHOSTUNREACH)), "noticed by the next send");
    assert_eq!(a.send_result(s2), Some(Ok(())), "in the new mailbox's ring");
    b2.progress();
    assert_eq!((b2.recv_result(r), b2.up.hdrs[&r].tag), (Some(Ok(2)), 9));
    assert_eq!(b2.data(r)[..2], [4, 2]);
}

/// A large receive split with its sender (CTW), cancelled (or its
/// endpoint closed) before the sender got to its write: the sender writes
/// nothing, and its send still completes (or fails, the receiver gone).
fn revoked_write(port: u16, close: bool) {
    let (mut a, mut b) = nodes(port, Geometry::new(4, 4, 512), true, 0);
    let r = b.post(100_000);
    let s = a.send(b.addr, 5, &[0xab; 100_000], PLAIN);
    b.progress();
    let dst = b.bufs[&r].clone();
    let at = dst.0.lock().unwrap().iter().position(|&x| x != 0xab).unwrap();
    assert!(at > 0 && at < 100_000, "the first part was pulled");
    let mut b = Some(b);
    if close {
        b = None;
    } else {
        let b = b.as_mut().unwrap();
        assert!(b.w.cancel_recv(r));
        assert_eq!(b.w.stats().revoked, 1);
    }
    // Only now does the sender see the CTW (and the FIN, if cancelled).
    for _ in 0..10 {
        a.progress();
    }
    assert!(
        dst.0.lock().unwrap()[at..].iter().all(|&x| x == 0),
        "the sender wrote after the revocation"
    );
    assert_eq!(a.w.stats().pushed_cma, 0);
    if close {
        // The receiver is gone: its answer found no mailbox, so the send
        // has failed already.
        assert_eq!(a.send_result(s), Some(Err(FI_EHOSTUNREACH)));
    } else {
        assert_eq!(a.send_result(s), Some(Ok(())), "the message was matched");
        let b = b.as_mut().unwrap();
        for _ in 0..10 {
            b.progress();
        }
        assert_eq!(b.recv_result(r), None, "the refused write's WDONE completes nothing");
    }
    assert!(!a.w.m.in_flight());
}

#[test]
fn cancel_revokes_the_senders_write() {
    revoked_write(41140, false);
}

#[test]
fn close_revokes_the_senders_write() {
    revoked_write(41150, true);
}

#[test]
fn mailbox_is_private_to_its_user() {
    let b = wire(41040, Geometry::new(1, 2, 64), true, 0);
    let path = b.port.path().to_string();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
    if crate::nic::shm::mailbox::euid() != 0 {
        // Only root can try as another user. CI runs as root (it also
        // needs network namespaces): there this cannot be skipped.
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "mailbox_is_private_to_its_user needs root to try as user nobody"
        );
        eprintln!("SKIPPED: mailbox_is_private_to_its_user: not root, only the 0600 mode was checked");
        return;
    }
    // Another user (nobody) cannot open it.
    let o = std::process::Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "dd",
            "count=1",
            "status=none",
        ])
        .arg(format!("if={path}"))
        .arg("of=/dev/null")
        .output()
        .expect("setpriv (util-linux) runs");
    assert!(!o.status.success(), "user nobody read {path}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("Permission denied"),
        "{o:?}"
    );
}
