//! The executor over real mailboxes (`/dev/shm`) and real cross-memory
//! attach, two endpoints in this process: through `nic::Wire` with a
//! stand-in endpoint, and through the calls the endpoint makes today
//! (legacy.rs). Each test uses its own ports so tests can run in parallel.

use super::{pattern, Node, RealMem, Shared};
use crate::ffi::{FI_EHOSTUNREACH, FI_EIO};
use crate::nic::shm::frame::Frame;
use crate::nic::shm::mailbox::{credit_cost, Geometry, SlotHead};
use crate::nic::shm::port::MailboxPort;
use crate::nic::shm::{test_addr, Eager, Incoming, Pull, ShmConfig, ShmEvent, ShmWire};
use crate::nic::wire::{SendFlags, Wire};
use crate::proto::MsgHdr;
use std::sync::{Arc, Mutex};

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

/// Two endpoints of this process, A sending to B.
fn pair(port: u16, geo: Geometry, cma: bool) -> (ShmWire, ShmWire, usize) {
    pair_with(port, geo, cma, 0)
}

/// `pair` whose mailboxes lend `loan` credit bytes per ring.
fn pair_with(port: u16, geo: Geometry, cma: bool, loan: u64) -> (ShmWire, ShmWire, usize) {
    let mut a = wire(port, geo, cma, loan);
    let b = wire(port + 1, geo, cma, loan);
    let ix = a.route(b.me()).expect("loopback peer with a mailbox");
    (a, b, ix)
}

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

const PLAIN: SendFlags = SendFlags {
    inject: false,
    inject_complete: false,
    delivery: false,
    more: false,
};

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

/// Runs both sides until `b` yields a message.
fn next_msg(a: &mut ShmWire, b: &mut ShmWire) -> Incoming {
    for _ in 0..1000 {
        a.pump(0);
        if let Some(m) = b.poll_msg() {
            return m;
        }
    }
    panic!("no message");
}

fn hdr(len: usize, tag: u64) -> MsgHdr {
    MsgHdr {
        tag,
        data: 7,
        len: len as u64,
        flags: MsgHdr::TAGGED,
    }
}

#[test]
fn legacy_eager_messages_in_order_through_a_full_ring() {
    let (mut a, mut b, ix) = pair(41000, Geometry::new(4, 4, 256), true);
    let mut pending = Vec::new();
    for i in 0..10u64 {
        let data = vec![i as u8; 100 + i as usize];
        match a.send_eager(ix, &hdr(data.len(), i), &data, false, false) {
            Eager::Done => assert!(i < 4, "send {i} done with a full ring"),
            Eager::Pending(id) => pending.push(id),
            Eager::NoCredit => panic!("no credit limit here"),
        }
    }
    assert_eq!((a.backlogged(), a.backlogged_untracked()), (6, 0));
    let mut done = Vec::new();
    for i in 0..10u64 {
        match next_msg(&mut a, &mut b) {
            Incoming::Eager { slot, peer, hdr, .. } => {
                assert_eq!((peer, hdr.tag), (a.me(), i));
                assert_eq!(b.payload(&slot).to_vec(), vec![i as u8; 100 + i as usize]);
                b.release(slot);
            }
            Incoming::Rts(_) => panic!("eager expected"),
        }
        a.pump(0);
        done.extend(std::iter::from_fn(|| a.poll_event()));
    }
    let all: Vec<_> = pending.iter().map(|&id| ShmEvent::SendDone { id }).collect();
    assert_eq!(done, all);
    assert_eq!(a.backlogged(), 0);
}

/// A receive buffer a peer writes by cross-memory attach, and the sink
/// over it.
fn buffer(len: usize) -> (Shared, [(usize, usize); 1]) {
    let s = Shared(Arc::new(Mutex::new(vec![0u8; len])));
    let r = s.0.lock().unwrap().as_ptr() as usize;
    (s, [(r, len)])
}

fn legacy_rendezvous(port: u16, cma: bool, len: usize) {
    let (mut a, mut b, ix) = pair(port, Geometry::new(4, 4, 512), cma);
    let src: Vec<u8> = pattern(3, len);
    let remote = [(src.as_ptr() as u64, src.len() as u64)];
    let id = a.send_rts(ix, &hdr(len, 5), Box::new(src.clone()), &remote).unwrap();
    let Incoming::Rts(rts) = next_msg(&mut a, &mut b) else {
        panic!("RTS expected")
    };
    assert_eq!((rts.hdr.len, rts.peer), (len as u64, a.me()));
    let (dst, local) = buffer(len);
    let mut recv_done = match b.pull(&rts, &local, Box::new(dst.clone())) {
        Pull::Done(n) => {
            assert!(cma && n == len);
            true
        }
        Pull::Pending(_) => false,
        Pull::Failed(e) => panic!("pull failed: {e}"),
    };
    let mut send_done = false;
    for _ in 0..10_000 {
        a.pump(0);
        while a.poll_msg().is_some() {}
        b.pump(0);
        while b.poll_msg().is_some() {}
        while let Some(ev) = b.poll_event() {
            assert!(
                matches!(ev, ShmEvent::RecvDone { written, .. } if written == len),
                "{ev:?}"
            );
            recv_done = true;
        }
        while let Some(ev) = a.poll_event() {
            assert_eq!(ev, ShmEvent::SendDone { id });
            send_done = true;
        }
        if send_done && recv_done {
            break;
        }
    }
    assert!(send_done && recv_done);
    assert_eq!(*dst.0.lock().unwrap(), src);
    assert_eq!((b.stats().pulled > 0, a.stats().pushed > 0), (cma, !cma));
}

#[test]
fn legacy_rendezvous_by_cross_memory_attach() {
    legacy_rendezvous(41010, true, 10_000);
    legacy_rendezvous(41014, true, 100_000);
}

#[test]
fn legacy_rendezvous_pushed_through_the_mailbox() {
    legacy_rendezvous(41020, false, 100_000);
}

#[test]
fn legacy_rts_with_bad_addresses_fails_both_ends() {
    let (mut a, mut b, ix) = pair(41060, Geometry::new(2, 4, 256), true);
    let id = a
        .send_rts(ix, &hdr(4096, 1), Box::new(vec![0u8; 4096]), &[(8, 4096)])
        .unwrap();
    let Incoming::Rts(rts) = next_msg(&mut a, &mut b) else {
        panic!()
    };
    let (dst, local) = buffer(4096);
    assert!(matches!(b.pull(&rts, &local, Box::new(dst)), Pull::Failed(e) if e == FI_EIO));
    for _ in 0..100 {
        a.pump(0);
        while a.poll_msg().is_some() {}
    }
    assert_eq!(a.poll_event(), Some(ShmEvent::SendFailed { id, err: FI_EIO }));
}

#[test]
fn legacy_credit_bounds_what_the_receiver_keeps_and_comes_back() {
    let cost = credit_cost(200);
    let loan = 8 * cost;
    let (mut a, mut b, ix) = pair_with(41120, Geometry::new(2, 64, 256), true, loan);
    let mut eager = 0;
    while a.send_eager(ix, &hdr(200, eager), &vec![7u8; 200], false, false) == Eager::Done {
        eager += 1;
    }
    assert_eq!(eager, 6, "8 credits, a quarter kept back for RTS");
    let mut kept = Vec::new();
    while let Some(m) = b.poll_msg() {
        kept.push(m.credit());
        if let Incoming::Eager { slot, .. } = m {
            b.release(slot);
        }
    }
    assert_eq!((kept.len(), b.m.held_credit(0)), (6, 6 * cost));
    // Two injects fit what is left; the third waits for credit.
    for t in [100, 101] {
        assert_eq!(
            a.send_eager(ix, &hdr(200, t), &vec![2u8; 200], true, false),
            Eager::Done
        );
    }
    let Eager::Pending(inj) = a.send_eager(ix, &hdr(200, 102), &vec![3u8; 200], true, false) else {
        panic!()
    };
    while let Some(Incoming::Eager { slot, .. }) = b.poll_msg() {
        b.release(slot);
    }
    assert!(b.m.held_credit(0) <= loan);
    b.free_credit(kept[0]);
    a.pump(0);
    assert_eq!(a.poll_event(), Some(ShmEvent::SendDone { id: inj }));
    let Some(Incoming::Eager { hdr, .. }) = b.poll_msg() else {
        panic!()
    };
    assert_eq!(hdr.tag, 102);
    assert!(b.m.held_credit(0) <= loan);
}

#[test]
fn legacy_delivery_complete_waits_until_the_receiver_took_the_message() {
    let (mut a, mut b, ix) = pair(41110, Geometry::new(2, 4, 256), true);
    let Eager::Pending(id) = a.send_eager(ix, &hdr(3, 1), &vec![1u8, 2, 3], false, true) else {
        panic!("delivery complete cannot be complete at once")
    };
    a.pump(0);
    assert_eq!(a.poll_event(), None);
    let Incoming::Eager { slot, .. } = b.poll_msg().unwrap() else {
        panic!()
    };
    a.pump(0);
    assert_eq!(a.poll_event(), None, "published, not yet taken");
    b.release(slot);
    a.pump(0);
    assert_eq!(a.poll_event(), Some(ShmEvent::SendDone { id }));
}

#[test]
fn a_real_producer_beyond_its_loan_or_writing_garbage_is_cut_off() {
    let loan = 2 * credit_cost(100);
    let (mut a, mut b, ix) = pair_with(41130, Geometry::new(2, 8, 256), true, loan);
    let eager = Frame::Eager { hdr: hdr(100, 1) }.head();
    for _ in 0..3 {
        a.port.publish_raw(ix, eager, &[7; 100]);
    }
    let mut got = 0;
    while let Some(Incoming::Eager { slot, .. }) = b.poll_msg() {
        b.release(slot);
        got += 1;
    }
    assert_eq!((got, b.stats().rejected), (2, 1));
    assert!(b.m.held_credit(0) <= loan);
    // A length beyond the slot, from another ring.
    a.forget(ix);
    let ix = a.route(b.me()).expect("another ring");
    a.port.publish_raw(ix, SlotHead { len: 1 << 20, ..eager }, &[]);
    assert!(b.poll_msg().is_none());
    assert_eq!((b.stats().rejected, b.m.banned().len()), (2, 2));
}

#[test]
fn legacy_restarted_peer_gets_a_fresh_ring_at_once() {
    let geo = Geometry::new(2, 4, 128);
    let (mut a, b, _) = pair(41050, geo, true);
    let b_addr = b.me();
    drop(b);
    let mut b2 = wire(41051, geo, true, 0);
    let ix2 = a.route(b_addr).expect("the new mailbox");
    a.send_eager(ix2, &hdr(2, 9), &vec![4u8, 2], false, false);
    let Incoming::Eager { slot, hdr, .. } = next_msg(&mut a, &mut b2) else {
        panic!()
    };
    assert_eq!((hdr.tag, b2.payload(&slot).to_vec()), (9, vec![4u8, 2]));
}

/// A large receive split with its sender (CTW), cancelled (or its
/// endpoint closed) before the sender got to its write: the sender writes
/// nothing, and its send still completes (or fails, the receiver gone).
fn revoked_write(port: u16, close: bool) {
    let (mut a, mut b, ix) = pair(port, Geometry::new(4, 4, 512), true);
    let src = vec![0xabu8; 100_000];
    let id = a
        .send_rts(
            ix,
            &hdr(src.len(), 5),
            Box::new(src.clone()),
            &[(src.as_ptr() as u64, 100_000)],
        )
        .unwrap();
    let Incoming::Rts(rts) = next_msg(&mut a, &mut b) else {
        panic!()
    };
    let (dst, local) = buffer(100_000);
    let Pull::Pending(rid) = b.pull(&rts, &local, Box::new(dst.clone())) else {
        panic!("a split pull")
    };
    let at = dst.0.lock().unwrap().iter().position(|&x| x != 0xab).unwrap();
    assert!(at > 0 && at < 100_000, "the first part was pulled");
    let mut b = Some(b);
    if close {
        b = None;
    } else {
        let b = b.as_mut().unwrap();
        assert!(b.cancel_rx(rid));
        assert_eq!(b.stats().revoked, 1);
    }
    // Only now does the sender see the CTW (and the FIN, if cancelled).
    for _ in 0..10 {
        a.pump(0);
        while a.poll_msg().is_some() {}
    }
    assert!(
        dst.0.lock().unwrap()[at..].iter().all(|&x| x == 0),
        "the sender wrote after the revocation"
    );
    assert_eq!(a.stats().pushed_cma, 0);
    if close {
        // The receiver is gone: its answer found no mailbox, so the send
        // has failed already.
        assert_eq!(
            a.poll_event(),
            Some(ShmEvent::SendFailed {
                id,
                err: FI_EHOSTUNREACH
            })
        );
    } else {
        assert_eq!(a.poll_event(), Some(ShmEvent::SendDone { id }));
        let b = b.as_mut().unwrap();
        while b.poll_msg().is_some() {}
        assert_eq!(b.poll_event(), None, "the refused write's WDONE completes nothing");
    }
}

#[test]
fn legacy_cancel_revokes_the_senders_write() {
    revoked_write(41140, false);
}

#[test]
fn legacy_close_revokes_the_senders_write() {
    revoked_write(41150, true);
}

#[test]
fn mailbox_is_private_to_its_user() {
    let (_a, b, _) = pair(41040, Geometry::new(1, 2, 64), true);
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
