//! One-sided operations between two fake endpoints: what the initiator
//! sends, what the target does to its memory and answers, and what
//! completes (`ep/rma.rs`, `nic/onesided.rs`).

use super::*;
use crate::ep::rma::{RmaArgs, RmaDir};
use crate::nic::onesided::{self, Head, HEAD_LEN};
use crate::nic::wire::RemoteMem;

const KEY: u64 = 7;
const A: u8 = 1;
const B: u8 = 2;

/// An initiator and a target, each with its own fake endpoint.
struct Pair {
    a: T,
    b: T,
}

impl Pair {
    fn new() -> Pair {
        let mut p = Pair {
            a: T::new(FI_RMA, 64, 64),
            b: T::new(FI_RMA, 64, 64),
        };
        // The fake wires finish every send at once: a part then waits only
        // for its answer.
        p.a.wires.udp.answer = Some(Ok(Sent::Done));
        p.b.wires.udp.answer = Some(Ok(Sent::Done));
        p
    }

    /// `buf` is the target's region `KEY` with `access`.
    fn register(&mut self, buf: &mut [u8], access: u64) {
        self.b
            .face
            .mem
            .borrow_mut()
            .insert(KEY, (buf.as_mut_ptr() as usize, buf.len(), access));
    }

    /// Starts an operation at the initiator.
    fn start(&mut self, dir: RmaDir, local: Iov, remote: Vec<RemoteMem>, data: Option<u64>, flags: u64) -> bool {
        let a = RmaArgs {
            dir,
            local,
            operand: Vec::new(),
            compare: Vec::new(),
            remote,
            dest: 0,
            data,
            ctx: 77,
            flags,
            silent: false,
        };
        self.a.with(|h, w| h.start_rma(w, 64, peer(B), a, 0)).is_ok()
    }

    /// Everything `from` sent is delivered to `to` (eager), with a credit
    /// each; what `to` made of each message.
    fn deliver(from: &mut T, to: &mut T, from_addr: SocketAddr) -> Vec<Take> {
        let sends = std::mem::take(&mut from.wires.udp.sends);
        let mut takes = Vec::new();
        for (s, data) in sends {
            let credit = Credit::Udp {
                peer: from_addr,
                bytes: data.len() as u64,
            };
            takes.push(to.arrive(from_addr, s.hdr, Body::Bytes(&data), credit));
        }
        takes
    }

    /// Requests to the target, its answers back; the target's takes.
    fn round_trip(&mut self) -> Vec<Take> {
        let takes = Pair::deliver(&mut self.a, &mut self.b, peer(A));
        self.b.with(|h, w| h.send_replies(w, 0));
        Pair::deliver(&mut self.b, &mut self.a, peer(B));
        takes
    }

    fn completions(&self) -> Vec<(usize, u64, Option<i32>)> {
        self.a.face.rma.borrow().clone()
    }
}

/// `b` as an operation's local buffers.
fn local(b: &mut [u8]) -> Iov {
    // SAFETY: each test keeps its buffers alive until the operation is
    // over and reads them only then.
    unsafe { iov(b) }
}

fn remote(addr: u64, len: usize) -> Vec<RemoteMem> {
    vec![RemoteMem {
        key: KEY,
        addr,
        len: len as u64,
    }]
}

#[test]
fn a_small_write_lands_and_completes_on_the_targets_answer() {
    let mut p = Pair::new();
    let mut region = vec![0u8; 32];
    p.register(&mut region, FI_REMOTE_WRITE);
    let mut src = *b"abcdefgh";
    assert!(p.start(RmaDir::Write, local(&mut src), remote(4, 8), None, 0));
    let (s, data) = &p.a.wires.udp.sends[0];
    assert_eq!(s.hdr.flags, onesided::REQ, "one request, the data inside");
    assert_eq!(data.len(), HEAD_LEN + 8);
    assert_eq!(p.completions(), vec![], "not before the answer");
    let takes = p.round_trip();
    assert!(
        matches!(takes[..], [Take::Kept]),
        "its credit is held until the answer leaves"
    );
    assert_eq!(p.b.wires.udp.credits.len(), 1, "and then goes back");
    assert_eq!(&region[4..12], b"abcdefgh");
    assert_eq!(*p.b.face.remote.borrow(), vec![(FI_REMOTE_WRITE, None, 8)]);
    assert_eq!(p.completions(), vec![(77, FI_RMA | FI_WRITE, None)]);
    assert_eq!(
        (p.a.reqs.len(Dir::Tx), p.b.reqs.len(Dir::Tx)),
        (0, 0),
        "nothing left behind"
    );
}

#[test]
fn refused_writes_fail_at_the_initiator_and_touch_nothing() {
    for (key, addr, access, err) in [
        (KEY + 1, 0, FI_REMOTE_WRITE, FI_EINVAL),
        (KEY, 0, FI_REMOTE_READ, FI_EACCES),
        (KEY, 30, FI_REMOTE_WRITE, FI_EACCES),
    ] {
        let mut p = Pair::new();
        let mut region = vec![0u8; 32];
        p.register(&mut region, access);
        let mut src = [9u8; 8];
        let r = vec![RemoteMem { key, addr, len: 8 }];
        assert!(p.start(RmaDir::Write, local(&mut src), r, Some(5), 0));
        p.round_trip();
        assert_eq!(region, vec![0u8; 32], "key {key} addr {addr}");
        assert_eq!(p.completions(), vec![(77, FI_RMA | FI_WRITE, Some(err))]);
        assert!(p.b.face.remote.borrow().is_empty(), "no event at the target");
    }
}

#[test]
fn a_large_write_sends_its_data_behind_its_head() {
    let mut p = Pair::new();
    let n = FAKE_EAGER + 100;
    let mut region = vec![0u8; n + 10];
    p.register(&mut region, FI_REMOTE_WRITE);
    let mut src: Vec<u8> = (0..n).map(|i| i as u8).collect();
    assert!(p.start(RmaDir::Write, local(&mut src), remote(10, n), Some(0xDA7A), 0));
    let flags: Vec<u32> = p.a.wires.udp.sends.iter().map(|s| s.0.hdr.flags).collect();
    assert_eq!(flags, [onesided::REQ, onesided::BODY]);
    p.round_trip();
    assert_eq!(&region[10..], &src[..]);
    assert_eq!(*p.b.face.remote.borrow(), vec![(FI_REMOTE_WRITE, Some(0xDA7A), n)]);
    assert_eq!(p.completions(), vec![(77, FI_RMA | FI_WRITE, None)]);
}

#[test]
fn a_large_writes_data_by_rendezvous_goes_straight_into_the_region() {
    let mut p = Pair::new();
    let n = FAKE_EAGER * 4;
    let mut region = vec![0u8; n];
    p.register(&mut region, FI_REMOTE_WRITE);
    let mut src = vec![0x5Au8; n];
    assert!(p.start(RmaDir::Write, local(&mut src), remote(0, n), None, 0));
    let mut sends = std::mem::take(&mut p.a.wires.udp.sends);
    let (body, data) = sends.pop().unwrap();
    let (head, hdata) = sends.pop().unwrap();
    let credit = Credit::Udp {
        peer: peer(A),
        bytes: 1,
    };
    assert!(matches!(
        p.b.arrive(peer(A), head.hdr, Body::Bytes(&hdata), credit),
        Take::Kept
    ));
    let Take::Accept { op, mut sink, ranges } = p.b.arrive(peer(A), body.hdr, rndv(3), credit) else {
        panic!("the data is accepted into the region")
    };
    assert_eq!(
        ranges[..],
        [(region.as_ptr() as u64, n as u64)],
        "for cross-memory attach"
    );
    sink.write_at(0, &data);
    drop(sink);
    p.b.event(WireEvent::RecvDone { op, written: n });
    p.b.with(|h, w| h.send_replies(w, 0));
    Pair::deliver(&mut p.b, &mut p.a, peer(B));
    assert_eq!(region, src);
    assert_eq!(p.completions(), vec![(77, FI_RMA | FI_WRITE, None)]);
}

#[test]
fn a_read_brings_the_targets_bytes_back() {
    let mut p = Pair::new();
    let mut region: Vec<u8> = (0..64).collect();
    p.register(&mut region, FI_REMOTE_READ);
    let mut dst = vec![0u8; 16];
    assert!(p.start(RmaDir::Read, local(&mut dst), remote(8, 16), None, 0));
    p.round_trip();
    assert_eq!(dst, (8..24).collect::<Vec<u8>>());
    assert_eq!(p.completions(), vec![(77, FI_RMA | FI_READ, None)]);
    assert_eq!(*p.b.face.remote.borrow(), vec![(FI_REMOTE_READ, None, 16)]);
}

#[test]
fn a_large_reads_answer_by_rendezvous_lands_in_the_buffer() {
    let mut p = Pair::new();
    let mut region = vec![3u8; 100];
    p.register(&mut region, FI_REMOTE_READ);
    let mut dst = vec![0u8; 100];
    assert!(p.start(RmaDir::Read, local(&mut dst), remote(0, 100), None, 0));
    Pair::deliver(&mut p.a, &mut p.b, peer(A));
    p.b.with(|h, w| h.send_replies(w, 0));
    let (s, data) = p.b.wires.udp.sends.pop().unwrap();
    assert_eq!((s.hdr.flags, data.len()), (onesided::RESP, 100));
    let Take::Accept { op, mut sink, .. } = p.a.arrive(peer(B), s.hdr, rndv(9), NO_CREDIT) else {
        panic!("the answer is pulled into the read's buffer")
    };
    sink.write_at(0, &data);
    drop(sink);
    assert_eq!(p.completions(), vec![], "not before the data is in");
    p.a.event(WireEvent::RecvDone { op, written: 100 });
    assert_eq!(dst, region);
    assert_eq!(p.completions(), vec![(77, FI_RMA | FI_READ, None)]);
}

#[test]
fn an_operation_over_several_remote_iovs_completes_once() {
    let mut p = Pair::new();
    let mut region = vec![0u8; 16];
    p.register(&mut region, FI_REMOTE_WRITE);
    let mut src = *b"0123456789";
    let r = vec![
        RemoteMem {
            key: KEY,
            addr: 12,
            len: 4,
        },
        RemoteMem {
            key: KEY,
            addr: 0,
            len: 6,
        },
    ];
    assert!(p.start(RmaDir::Write, local(&mut src), r, Some(1), 0));
    assert_eq!(p.a.wires.udp.sends.len(), 2);
    p.round_trip();
    assert_eq!(&region, b"456789\0\0\0\0\0\x000123");
    assert_eq!(p.completions(), vec![(77, FI_RMA | FI_WRITE, None)]);
    // The remote CQ data goes with the last piece only.
    let remote = p.b.face.remote.borrow();
    assert_eq!(remote[..], [(FI_REMOTE_WRITE, None, 4), (FI_REMOTE_WRITE, Some(1), 6)]);
}

#[test]
fn a_fenced_operation_waits_for_those_before_it() {
    let mut p = Pair::new();
    let mut region = vec![0u8; 8];
    p.register(&mut region, FI_REMOTE_WRITE | FI_REMOTE_READ);
    let mut src = [1u8; 4];
    let mut dst = [0u8; 4];
    assert!(p.start(RmaDir::Write, local(&mut src), remote(0, 4), None, 0));
    assert!(
        !p.start(RmaDir::Read, local(&mut dst), remote(0, 4), None, FI_FENCE),
        "busy"
    );
    p.round_trip();
    assert!(p.start(RmaDir::Read, local(&mut dst), remote(0, 4), None, FI_FENCE));
    p.round_trip();
    assert_eq!(dst, [1u8; 4], "the read saw the write");
    assert_eq!(p.completions().len(), 2);
}

#[test]
fn a_failed_request_fails_its_operation() {
    let mut p = Pair::new();
    p.a.wires.udp.answer = None; // Pending: the wire reports the end.
    let mut src = [1u8; 4];
    assert!(p.start(RmaDir::Write, local(&mut src), remote(0, 4), None, 0));
    let op = p.a.wires.udp.sends[0].0.op;
    p.a.event(WireEvent::SendFailed {
        op,
        err: FI_EHOSTUNREACH,
    });
    assert_eq!(p.completions(), vec![(77, FI_RMA | FI_WRITE, Some(FI_EHOSTUNREACH))]);
    assert_eq!(p.a.reqs.len(Dir::Tx), 0);
}

#[test]
fn malformed_and_stray_messages_are_dropped_and_counted() {
    let mut t = T::new(FI_RMA, 8, 8);
    t.wires.udp.answer = Some(Ok(Sent::Done));
    let credit = Credit::Udp {
        peer: peer(A),
        bytes: 10,
    };
    // A request too short for its head.
    let hdr = MsgHdr {
        tag: 1,
        data: 0,
        len: 10,
        flags: onesided::REQ,
    };
    assert!(matches!(
        t.arrive(peer(A), hdr, Body::Bytes(&[4; 10]), credit),
        Take::Kept
    ));
    // Write data no head announced, eager and by rendezvous.
    let body = MsgHdr {
        flags: onesided::BODY,
        ..hdr
    };
    assert!(matches!(
        t.arrive(peer(A), body, Body::Bytes(&[0; 10]), credit),
        Take::Done
    ));
    assert!(matches!(t.arrive(peer(A), body, rndv(1), credit), Take::Discard));
    // An answer to nothing of ours.
    let resp = MsgHdr {
        flags: onesided::RESP,
        ..hdr
    };
    assert!(matches!(t.arrive(peer(A), resp, Body::Bytes(&[]), credit), Take::Done));
    assert_eq!(t.os.dropped, 3);
    t.with(|h, w| h.send_replies(w, 0));
    assert_eq!(t.wires.udp.credits, vec![credit], "the kept one's credit went back");
    assert!(t.wires.udp.sends.is_empty(), "no answer to what cannot be named");
    // A well-formed head for an unknown kind is refused the same way.
    let mut b = Head::parse(&[1u8; HEAD_LEN])
        .map(|h| h.emit())
        .unwrap_or([1u8; HEAD_LEN]);
    b[0] = 99;
    assert!(Head::parse(&b).is_none());
}

#[test]
fn an_ordered_read_is_answered_with_the_bytes_of_its_turn() {
    for (order_max, want) in [(64, [1u8; 4]), (0, [2u8; 4])] {
        let mut p = Pair::new();
        p.a.os.order_max = order_max;
        let mut region = vec![0u8; 8];
        p.register(&mut region, FI_REMOTE_WRITE | FI_REMOTE_READ);
        let (mut one, mut two, mut dst) = ([1u8; 4], [2u8; 4], [0u8; 4]);
        assert!(p.start(RmaDir::Write, local(&mut one), remote(0, 4), None, 0));
        assert!(p.start(RmaDir::Read, local(&mut dst), remote(0, 4), None, 0));
        assert!(p.start(RmaDir::Write, local(&mut two), remote(0, 4), None, 0));
        // All three arrive in one pass; the answers leave after it.
        p.round_trip();
        assert_eq!(region[..4], [2u8; 4]);
        assert_eq!(
            dst, want,
            "order_max {order_max}: ordered, the read saw the first write only"
        );
    }
}

#[test]
fn a_request_by_rendezvous_holds_back_what_its_peer_sent_after_it() {
    let mut p = Pair::new();
    p.a.os.order_max = 64;
    let mut region = vec![0u8; 8];
    p.register(&mut region, FI_REMOTE_WRITE);
    let (mut one, mut two) = ([1u8; 8], [2u8; 8]);
    assert!(p.start(RmaDir::Write, local(&mut one), remote(0, 8), None, 0));
    assert!(p.start(RmaDir::Write, local(&mut two), remote(0, 8), None, 0));
    let mut sends = std::mem::take(&mut p.a.wires.udp.sends);
    let (second, second_data) = sends.pop().unwrap();
    let (first, first_data) = sends.pop().unwrap();
    let credit = Credit::Udp {
        peer: peer(A),
        bytes: 1,
    };
    // The first comes by rendezvous (a wire short of credit may send a
    // small message so), the second eagerly behind it.
    let Take::Accept { op, mut sink, .. } = p.b.arrive(peer(A), first.hdr, rndv(4), credit) else {
        panic!("staged")
    };
    assert!(matches!(
        p.b.arrive(peer(A), second.hdr, Body::Bytes(&second_data), credit),
        Take::Kept
    ));
    p.b.with(|h, w| h.send_replies(w, 0));
    assert_eq!(region, [0u8; 8], "the second waits for the first");
    sink.write_at(0, &first_data);
    drop(sink);
    p.b.event(WireEvent::RecvDone {
        op,
        written: first_data.len(),
    });
    assert_eq!(region, [1u8; 8], "the first is applied once in");
    p.b.with(|h, w| h.send_replies(w, 0));
    assert_eq!(region, [2u8; 8], "then the second");
    Pair::deliver(&mut p.b, &mut p.a, peer(B));
    assert_eq!(p.completions().len(), 2);
    // The staged one's went back with its accept (the wire's part); the
    // waiting one's once its answer left.
    assert_eq!(p.b.wires.udp.credits, vec![credit]);
}

#[test]
fn a_large_write_over_a_wire_that_refuses_goes_as_one_message() {
    for (access, err) in [(FI_REMOTE_WRITE, None), (FI_REMOTE_READ, Some(FI_EACCES))] {
        let mut p = Pair::new();
        // The target is local: its wire (shm) refuses with the target's
        // error, so the rendezvous' end answers the write.
        p.a.wires.local = vec![peer(B)];
        let n = FAKE_EAGER * 4;
        let mut region = vec![0u8; n];
        p.register(&mut region, access);
        let mut src = vec![0x77u8; n];
        assert!(p.start(RmaDir::Write, local(&mut src), remote(0, n), None, 0));
        let (s, data) = p.a.wires.shm.sends.pop().unwrap();
        assert!(p.a.wires.shm.sends.is_empty(), "one message");
        assert_eq!(
            (s.hdr.flags, s.hdr.tag, s.hdr.data, s.hdr.len),
            (onesided::WRITE, KEY, 0, n as u64)
        );
        let credit = Credit::Udp {
            peer: peer(A),
            bytes: 1,
        };
        match (p.b.arrive(peer(A), s.hdr, rndv(5), credit), err) {
            (Take::Accept { op, mut sink, ranges }, None) => {
                assert_eq!(ranges[..], [(region.as_ptr() as u64, n as u64)]);
                sink.write_at(0, &data);
                drop(sink);
                p.b.event(WireEvent::RecvDone { op, written: n });
                assert_eq!(region, src);
                assert_eq!(*p.b.face.remote.borrow(), vec![(FI_REMOTE_WRITE, None, n)]);
                p.b.with(|h, w| h.send_replies(w, 0));
                assert!(p.b.wires.udp.sends.is_empty(), "no response: the FIN answers");
                assert_eq!(p.completions(), vec![], "not before the wire's end");
                p.a.event(WireEvent::SendDone { op: s.op });
            }
            (Take::Refuse { err: e }, Some(want)) => {
                assert_eq!(e, want);
                assert_eq!(region, vec![0u8; n], "nothing written");
                p.a.event(WireEvent::SendFailed { op: s.op, err: e });
            }
            _ => panic!("access {access:#x}"),
        }
        assert_eq!(p.completions(), vec![(77, FI_RMA | FI_WRITE, err)]);
        assert_eq!(p.a.reqs.len(Dir::Tx), 0);
    }
}

#[test]
fn an_inject_write_never_goes_direct() {
    // A wire may send an inject eagerly whatever its size: the target
    // could then not refuse it, so it keeps its head and response.
    let mut p = Pair::new();
    p.a.wires.local = vec![peer(B)];
    let n = FAKE_EAGER + 100;
    let mut src = vec![1u8; n];
    assert!(p.start(RmaDir::Write, local(&mut src), remote(0, n), None, FI_INJECT));
    let flags: Vec<u32> = p.a.wires.shm.sends.iter().map(|s| s.0.hdr.flags).collect();
    assert_eq!(flags, [onesided::REQ, onesided::BODY]);
}
