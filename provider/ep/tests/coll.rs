//! Collectives between fake endpoints (`ep/coll.rs`): a group's members
//! run their schedules with messages carried by the test, eager or by
//! rendezvous, in orders that park messages before their receives.

use super::*;
use crate::coll::sched::Kind;
use crate::coll::{Spec, COLL};
use crate::ep::coll::{Member, Work};
use std::sync::Arc;

const GROUP: u64 = 0x0067_726f_7570;

/// A group of fake endpoints, and the rendezvous messages in flight.
struct Group {
    eps: Vec<T>,
    addrs: Vec<SocketAddr>,
    /// Messages above this size travel by rendezvous.
    rndv_over: usize,
    /// Rendezvous data by held id: (bytes, sender, sender's op).
    held: HashMap<u64, (Vec<u8>, usize, OpId)>,
    next_held: u64,
    /// Members that died: what is sent to them fails.
    dead: Vec<usize>,
}

impl Group {
    fn new(n: usize, rndv_over: usize) -> Group {
        let mut eps: Vec<T> = (0..n).map(|_| T::new(FI_COLLECTIVE, 64, 64)).collect();
        for t in &mut eps {
            // Sends wait for the test to end them (SendDone).
            t.wires.udp.answer = Some(Ok(Sent::Pending));
        }
        Group {
            eps,
            addrs: (0..n).map(|i| peer(i as u8 + 1)).collect(),
            rndv_over,
            held: HashMap::new(),
            next_held: 1,
            dead: Vec::new(),
        }
    }

    fn member(&self, me: usize, seq: u32) -> Member {
        Member {
            group: GROUP,
            seq,
            members: Arc::from(self.addrs.clone()),
            me,
        }
    }

    /// Starts `spec` at member `me` with `input`, its result into `out`.
    ///
    /// # Safety
    /// `out` stays alive and untouched until the member's completion.
    unsafe fn start(&mut self, me: usize, seq: u32, spec: Spec, input: Vec<u8>, out: &mut [u8]) {
        let m = self.member(me, seq);
        // SAFETY: the caller's contract.
        let out = unsafe { iov(out) };
        let work = Work {
            ctx: 100 + me,
            flags: 0,
            input,
            out,
        };
        self.eps[me].with(|h, w| h.coll_begin(w, m, spec, work, 0));
    }

    /// The pull of rendezvous message `held` into `sink` for receive `op`
    /// of member `to`: the data, then both ends' events.
    fn pull(&mut self, to: usize, held: u64, op: OpId, mut sink: Box<dyn RecvSink>) {
        let (data, from, sop) = self.held.remove(&held).expect("a held message");
        sink.write_at(0, &data);
        self.eps[to].event(WireEvent::RecvDone {
            op,
            written: data.len(),
        });
        self.eps[from].event(WireEvent::SendDone { op: sop });
    }

    /// Carries every message sent so far, and what the members send in
    /// answer, until nothing moves. Whether anything was carried.
    fn run(&mut self) -> bool {
        let mut any = false;
        loop {
            let mut moved = false;
            for i in 0..self.eps.len() {
                let sends = std::mem::take(&mut self.eps[i].wires.udp.sends);
                for (s, data) in sends {
                    moved = true;
                    assert_eq!(s.hdr.flags, COLL);
                    let to = self.addrs.iter().position(|a| *a == s.peer).expect("a member");
                    if self.dead.contains(&to) {
                        self.eps[i].event(WireEvent::SendFailed {
                            op: s.op,
                            err: FI_EHOSTUNREACH,
                        });
                        continue;
                    }
                    let credit = Credit::Udp {
                        peer: self.addrs[i],
                        bytes: data.len() as u64,
                    };
                    if data.len() <= self.rndv_over {
                        let take = self.eps[to].arrive(self.addrs[i], s.hdr, Body::Bytes(&data), credit);
                        assert!(matches!(take, Take::Done | Take::Kept));
                        self.eps[i].event(WireEvent::SendDone { op: s.op });
                        continue;
                    }
                    let id = self.next_held;
                    self.next_held += 1;
                    self.held.insert(id, (data, i, s.op));
                    let body = Body::Rndv(Held {
                        wire: WireKind::Udp,
                        id,
                    });
                    match self.eps[to].arrive(self.addrs[i], s.hdr, body, credit) {
                        Take::Accept { op, sink, .. } => self.pull(to, id, op, sink),
                        Take::Kept => {}
                        _ => panic!("a collective message is taken or kept"),
                    }
                }
                let accepted = std::mem::take(&mut self.eps[i].wires.udp.accepted);
                for (h, op, sink) in accepted {
                    moved = true;
                    self.pull(i, h.id, op, sink);
                }
            }
            for (i, t) in self.eps.iter_mut().enumerate() {
                if !self.dead.contains(&i) {
                    t.with(|h, w| h.coll_advance(w, 0));
                }
                // What the pass sent is carried next.
                moved |= !t.wires.udp.sends.is_empty();
            }
            if !moved {
                return any;
            }
            any = true;
        }
    }

    fn done(&self, me: usize) -> Vec<(usize, u64, Option<i32>)> {
        self.eps[me].face.colls.borrow().clone()
    }
}

fn words(v: &[u64]) -> Vec<u8> {
    v.iter().flat_map(|w| w.to_ne_bytes()).collect()
}

fn sum_spec(kind: Kind, count: usize) -> Spec {
    Spec {
        kind,
        size: 8,
        count,
        datatype: FI_UINT64,
        op: FI_SUM,
    }
}

#[test]
fn allreduce_over_eager_messages_gives_every_member_the_sum() {
    let n = 5;
    let mut g = Group::new(n, usize::MAX);
    let mut outs = vec![vec![0u8; 24]; n];
    for (me, out) in outs.iter_mut().enumerate() {
        let input = words(&[me as u64, 10 * me as u64, 1]);
        // SAFETY: `outs` outlives the group's run and is read after it.
        unsafe { g.start(me, 1, sum_spec(Kind::AllReduce, 3), input, out) };
    }
    assert!(g.run());
    for (me, out) in outs.iter().enumerate() {
        assert_eq!(*out, words(&[10, 100, 5]), "member {me}");
        assert_eq!(g.done(me), vec![(100 + me, 0, None)]);
        let t = &g.eps[me];
        assert_eq!((t.reqs.len(Dir::Tx), t.reqs.len(Dir::Rx)), (0, 0), "no FabReq left");
        assert_eq!(t.coll.in_flight(), (0, 0, 0));
    }
}

#[test]
fn late_members_find_their_messages_parked_and_rendezvous_data_pulled() {
    // Members start last to first, so the early ones' messages wait
    // parked (with their credit) for receives posted later; every message
    // above 8 bytes goes by rendezvous.
    let n = 4;
    let mut g = Group::new(n, 8);
    let root = 2;
    let data = words(&[7, 8, 9, 10]);
    let mut bc = vec![vec![0u8; 32]; n];
    let mut ga = vec![vec![0u8; 8 * n]; n];
    let bspec = Spec {
        kind: Kind::Broadcast { root },
        size: 8,
        count: 4,
        datatype: FI_UINT64,
        op: FI_NOOP,
    };
    let gspec = Spec {
        kind: Kind::AllGather,
        size: 8,
        count: 1,
        datatype: FI_UINT64,
        op: FI_NOOP,
    };
    for me in (0..n).rev() {
        let input = if me == root { data.clone() } else { Vec::new() };
        // SAFETY: the buffers outlive the group's run and are read after it.
        unsafe {
            g.start(me, 1, bspec, input, &mut bc[me]);
            g.start(me, 2, gspec, words(&[me as u64 * 3]), &mut ga[me]);
        }
        g.run();
    }
    for me in 0..n {
        if me != root {
            assert_eq!(bc[me], data, "broadcast at {me}");
        }
        assert_eq!(ga[me], words(&[0, 3, 6, 9]), "allgather at {me}");
        assert_eq!(g.done(me).len(), 2);
        assert!(g.done(me).iter().all(|d| d.2.is_none()));
        assert_eq!(g.eps[me].coll.in_flight(), (0, 0, 0));
        assert_eq!(g.eps[me].reqs.len(Dir::Rx), 0);
    }
    assert!(g.held.is_empty(), "every rendezvous was pulled");
    // Parked messages held their credit until taken, then gave it back.
    assert!(g.eps.iter().any(|t| !t.wires.udp.credits.is_empty()));
}

#[test]
fn a_message_naming_a_member_from_another_address_is_dropped() {
    let mut g = Group::new(2, usize::MAX);
    let mut outs = vec![vec![0u8; 8]; 2];
    // SAFETY: the buffers outlive the group's run and are read after it.
    unsafe { g.start(0, 1, sum_spec(Kind::AllReduce, 1), words(&[5]), &mut outs[0]) };
    // Rank 1's contribution, forged from an outsider's address: rank 0
    // posted that receive already.
    let key_word = 1u64 << 32 | 1;
    let hdr = MsgHdr {
        tag: GROUP,
        data: key_word,
        len: 8,
        flags: COLL,
    };
    let forged = words(&[1000]);
    let take = g.eps[0].arrive(peer(99), hdr, Body::Bytes(&forged), NO_CREDIT);
    assert!(matches!(take, Take::Done), "dropped, its credit given back");
    assert_eq!(g.eps[0].coll.dropped, 1);
    // SAFETY: as above.
    unsafe { g.start(1, 1, sum_spec(Kind::AllReduce, 1), words(&[6]), &mut outs[1]) };
    g.run();
    assert_eq!(outs, vec![words(&[11]), words(&[11])]);
}

#[test]
fn a_member_that_fails_fails_the_operation_and_its_receives_are_withdrawn() {
    let mut g = Group::new(3, usize::MAX);
    let mut out = vec![0u8; 8];
    // SAFETY: the buffer outlives the group's run.
    unsafe { g.start(0, 1, sum_spec(Kind::AllReduce, 1), words(&[1]), &mut out) };
    g.run();
    assert_eq!(g.eps[0].coll.in_flight().1, 2, "waiting for both children");
    let gone = g.addrs[2];
    g.eps[0].event(WireEvent::PeerFailed { peer: gone });
    g.eps[0].with(|h, w| h.coll_advance(w, 0));
    assert_eq!(g.done(0), vec![(100, 0, Some(FI_EHOSTUNREACH))]);
    assert_eq!(g.eps[0].coll.in_flight(), (0, 0, 0));
    assert_eq!(
        g.eps[0].reqs.len(Dir::Rx),
        0,
        "nothing will land in the operation's buffers"
    );
    assert_eq!(out, vec![0u8; 8], "the result buffer is untouched");
}

/// Member 2 dies; member 0 notices (its wire says so) and tells member 1,
/// which would otherwise wait for 0's broadcast forever, and member 3,
/// which has not even started the collective yet.
#[test]
fn a_failure_reaches_every_member_through_aborts() {
    let mut g = Group::new(4, usize::MAX);
    g.dead.push(2);
    let mut outs = vec![vec![0u8; 8]; 4];
    // SAFETY: the buffers outlive the group's run.
    unsafe {
        g.start(0, 1, sum_spec(Kind::AllReduce, 1), words(&[1]), &mut outs[0]);
        g.start(1, 1, sum_spec(Kind::AllReduce, 1), words(&[2]), &mut outs[1]);
    }
    g.run();
    assert!(g.done(1).is_empty(), "member 1 waits for the result");
    let gone = g.addrs[2];
    g.eps[0].event(WireEvent::PeerFailed { peer: gone });
    g.run();
    assert_eq!(g.done(0), vec![(100, 0, Some(FI_EHOSTUNREACH))]);
    assert_eq!(g.done(1), vec![(101, 0, Some(FI_EHOSTUNREACH))], "told by member 0");
    // SAFETY: as above.
    unsafe { g.start(3, 1, sum_spec(Kind::AllReduce, 1), words(&[4]), &mut outs[3]) };
    g.run();
    assert_eq!(
        g.done(3),
        vec![(103, 0, Some(FI_EHOSTUNREACH))],
        "told before it started"
    );
    for me in [0, 1, 3] {
        let t = &g.eps[me];
        assert_eq!(t.coll.in_flight(), (0, 0, 0), "member {me}: nothing left over");
        assert_eq!(t.reqs.len(Dir::Rx), 0);
    }
    assert_eq!(outs[1], vec![0u8; 8]);
}

#[test]
fn members_that_disagree_on_the_count_fail_with_emsgsize() {
    let mut g = Group::new(2, usize::MAX);
    let mut outs = [vec![0u8; 16], vec![0u8; 24]];
    // SAFETY: the buffers outlive the group's run.
    unsafe {
        g.start(0, 1, sum_spec(Kind::AllReduce, 2), words(&[1, 2]), &mut outs[0]);
        g.start(1, 1, sum_spec(Kind::AllReduce, 3), words(&[1, 2, 3]), &mut outs[1]);
    }
    g.run();
    assert_eq!(g.done(0), vec![(100, 0, Some(FI_EMSGSIZE))]);
}

#[test]
fn a_join_is_a_barrier_that_completes_on_the_eq() {
    let n = 3;
    let mut g = Group::new(n, usize::MAX);
    for me in 0..n {
        let m = g.member(me, 0);
        g.eps[me].with(|h, w| h.coll_join(w, m, 0xabc, 7, 0));
        if me < n - 1 {
            g.run();
            assert!(g.eps[me].face.joins.borrow().is_empty(), "not before everyone joined");
        }
    }
    g.run();
    for t in &g.eps {
        assert_eq!(*t.face.joins.borrow(), vec![(0xabc, 7, None)]);
    }
}
