//! Random interleavings in the simulated host, with shrinking (proptest):
//! ring depth, credit loan, message sizes and flags, when each side
//! polls and posts, whether cross-memory attach is refused, and whether
//! (and when) one side dies. What must hold whatever the schedule:
//!
//! * every message arrives once, intact, in send order (receives are
//!   matched in the order posted);
//! * every operation ends exactly once (the stand-in endpoint asserts it);
//! * the receiver never holds more credit than it lent;
//! * when a side dies, every operation of the other that depended on it
//!   ends (done, or failed with FI_EHOSTUNREACH) once the death is
//!   noticed, and nothing is left in flight;
//! * without a death, nothing is left in flight or queued at the end.

use super::{pattern, sim_node, turns, Node, SimMem, Turn};
use crate::ffi::FI_EHOSTUNREACH;
use crate::nic::shm::machine::CHECK_EVERY_NS;
use crate::nic::shm::mailbox::credit_cost;
use crate::nic::shm::sim::{SimPort, World};
use crate::nic::wire::SendFlags;
use proptest::prelude::*;

type SimNode = Node<SimPort, SimMem>;

const PAYLOAD: usize = 512;

#[derive(Clone, Copy, Debug)]
enum Step {
    /// A sends its next message.
    Send,
    /// B posts its next receive.
    Post,
    ProgressA,
    ProgressB,
    /// Time passes (liveness checks come due).
    Tick,
    /// Cross-memory attach is refused from now on (or allowed again).
    ToggleCma,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Who {
    Sender,
    Receiver,
}

#[derive(Clone, Debug)]
struct Msg {
    len: usize,
    delivery: bool,
    inject: bool,
}

#[derive(Clone, Debug)]
struct Case {
    depth: usize,
    /// Credit per ring, in slots' worth (None: no limit).
    loan_slots: Option<u64>,
    msgs: Vec<Msg>,
    steps: Vec<Step>,
    /// Who dies, after how many steps.
    death: Option<(Who, usize)>,
}

fn msg() -> impl Strategy<Value = Msg> {
    let len = prop_oneof![
        3 => 0..=64usize,
        3 => 65..=PAYLOAD,
        2 => PAYLOAD + 1..=20_000,
        1 => 32_768..=150_000usize,
    ];
    (len, any::<bool>(), any::<bool>()).prop_map(|(len, delivery, inject)| Msg {
        len,
        delivery,
        inject: inject && len <= PAYLOAD,
    })
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => Just(Step::Send),
        3 => Just(Step::Post),
        4 => Just(Step::ProgressA),
        4 => Just(Step::ProgressB),
        1 => Just(Step::Tick),
        1 => Just(Step::ToggleCma),
    ]
}

fn case(deaths: bool) -> impl Strategy<Value = Case> {
    let death = if deaths {
        prop_oneof![
            Just(None),
            (prop_oneof![Just(Who::Sender), Just(Who::Receiver)], 0..80usize).prop_map(Some),
        ]
        .boxed()
    } else {
        Just(None).boxed()
    };
    (
        2..7usize,
        prop_oneof![Just(None), (4..24u64).prop_map(Some)],
        prop::collection::vec(msg(), 1..24),
        prop::collection::vec(step(), 0..80),
        death,
    )
        .prop_map(|(depth, loan_slots, msgs, steps, death)| Case {
            depth,
            loan_slots,
            msgs,
            steps,
            death,
        })
}

struct Run {
    world: World,
    a: SimNode,
    b: SimNode,
    loan: u64,
    sent: Vec<u64>,
    posted: Vec<u64>,
    refused: bool,
    dead: Option<Who>,
}

impl Run {
    fn new(c: &Case) -> Run {
        let world = World::default();
        let loan = c.loan_slots.map_or(0, |n| n * credit_cost(PAYLOAD));
        let a = sim_node(&world, 10, c.depth, PAYLOAD, loan);
        let b = sim_node(&world, 11, c.depth, PAYLOAD, loan);
        Run {
            world,
            a,
            b,
            loan,
            sent: Vec::new(),
            posted: Vec::new(),
            refused: false,
            dead: None,
        }
    }

    fn send(&mut self, c: &Case) {
        let i = self.sent.len();
        let Some(m) = c.msgs.get(i) else { return };
        let flags = SendFlags {
            inject: m.inject,
            inject_complete: m.inject,
            delivery: m.delivery,
            more: false,
        };
        let op = self.a.send(self.b.addr, i as u64, &pattern(i as u64, m.len), flags);
        self.sent.push(op);
    }

    fn post(&mut self, c: &Case) {
        let i = self.posted.len();
        if let Some(m) = c.msgs.get(i) {
            let op = self.b.post(m.len);
            self.posted.push(op);
        }
    }

    fn step(&mut self, c: &Case, s: Step) {
        let (a_up, b_up) = (self.dead != Some(Who::Sender), self.dead != Some(Who::Receiver));
        match s {
            Step::Send if a_up => self.send(c),
            Step::Post if b_up => self.post(c),
            Step::ProgressA if a_up => {
                self.a.progress();
            }
            Step::ProgressB if b_up => {
                self.b.progress();
            }
            Step::Tick => {
                self.a.now += CHECK_EVERY_NS / 2;
                self.b.now += CHECK_EVERY_NS / 2;
            }
            Step::ToggleCma => {
                self.refused = !self.refused;
                self.world.refuse_cma(self.refused);
            }
            _ => {}
        }
        if self.loan != 0 {
            assert!(
                self.b.w.m.held_credit(0) <= self.loan,
                "B holds more credit than it lent"
            );
        }
    }

    fn kill(&mut self, who: Who) {
        self.dead = Some(who);
        self.world.kill(match who {
            Who::Sender => 10,
            Who::Receiver => 11,
        });
    }

    /// Everything left: the live sides send and post the rest, then run
    /// (time passing) until nothing happens any more.
    fn finish(&mut self, c: &Case) {
        self.world.refuse_cma(false);
        for _ in 0..c.msgs.len() {
            if self.dead != Some(Who::Sender) {
                self.send(c);
            }
            if self.dead != Some(Who::Receiver) {
                self.post(c);
            }
        }
        for round in 0..20_000 {
            let dt = if round % 50 == 49 { CHECK_EVERY_NS } else { 1_000 };
            let mut any = false;
            if self.dead != Some(Who::Sender) {
                any |= self.a.progress_after(dt);
            }
            if self.dead != Some(Who::Receiver) {
                any |= self.b.progress_after(dt);
            }
            let busy = |n: &SimNode| n.w.m.in_flight() || n.w.m.owes();
            let live_busy = (self.dead != Some(Who::Sender) && busy(&self.a))
                || (self.dead != Some(Who::Receiver) && busy(&self.b));
            if !any && !live_busy && round > 100 {
                return;
            }
        }
        panic!("the wires did not settle");
    }

    fn check(&self, c: &Case) {
        match self.dead {
            None => {
                for (i, &op) in self.sent.iter().enumerate() {
                    assert_eq!(self.a.send_result(op), Some(Ok(())), "send {i}");
                }
                for (i, &op) in self.posted.iter().enumerate() {
                    let len = c.msgs[i].len;
                    assert_eq!(self.b.recv_result(op), Some(Ok(len)), "receive {i}");
                    assert_eq!(self.b.up.hdrs[&op].tag, i as u64, "receive {i} out of order");
                    assert_eq!(self.b.data(op), pattern(i as u64, len), "receive {i}'s data");
                }
                for n in [&self.a, &self.b] {
                    assert!(!n.w.m.in_flight() && !n.w.m.owes() && n.w.m.backlogged() == 0);
                }
                assert_eq!(self.b.w.m.held_credit(0), 0, "credit given back");
            }
            Some(Who::Receiver) => {
                // Every send ended: done (in the ring, taken or read before
                // the death) or failed.
                for (i, &op) in self.sent.iter().enumerate() {
                    let r = self.a.send_result(op);
                    assert!(
                        matches!(r, Some(Ok(())) | Some(Err(FI_EHOSTUNREACH))),
                        "send {i}: {r:?}"
                    );
                }
                assert!(!self.a.w.m.in_flight() && !self.a.w.m.owes());
            }
            Some(Who::Sender) => {
                // Every receive that took a message ended; what it got is
                // that message, intact.
                for (i, &op) in self.posted.iter().enumerate() {
                    match self.b.recv_result(op) {
                        Some(Ok(len)) => {
                            let tag = self.b.up.hdrs[&op].tag;
                            assert_eq!(tag, i as u64, "receive {i} out of order");
                            assert_eq!(self.b.data(op)[..len], pattern(tag, len)[..], "receive {i}'s data");
                        }
                        Some(Err(e)) => assert_eq!(e, FI_EHOSTUNREACH, "receive {i}"),
                        None => assert!(
                            !self.b.up.hdrs.contains_key(&op),
                            "receive {i} took a message and never ended"
                        ),
                    }
                }
                assert!(!self.b.w.m.in_flight() && !self.b.w.m.owes());
            }
        }
    }
}

fn run(c: Case) {
    let mut r = Run::new(&c);
    for t in turns(&c.steps, c.death) {
        match t {
            Turn::Step(s) => r.step(&c, s),
            Turn::Kill(who) => r.kill(who),
        }
    }
    r.finish(&c);
    r.check(&c);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn every_message_arrives_once_intact_and_in_order(c in case(false)) {
        run(c);
    }

    #[test]
    fn a_death_ends_every_operation_of_the_survivor(c in case(true)) {
        run(c);
    }
}
