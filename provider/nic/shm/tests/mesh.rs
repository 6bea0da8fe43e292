//! Two or three simulated processes sending to each other at once (an MPI
//! collective's traffic: every ring of every mailbox busy both ways, each
//! side's rendezvous waiting on the other's progress), with shrinking
//! (proptest): ring depth, spanning, credit loan, message sizes and flags,
//! who sends, posts and polls when, whether cross-memory attach is refused.
//! `model.rs` covers one direction with deaths; this covers the crossing
//! traffic without them. What must hold whatever the schedule:
//!
//! * once every message is sent and every receive posted, the nodes
//!   settle with every send done and every receive full: no schedule
//!   leaves two nodes waiting on each other;
//! * every message arrives once, intact, and a source's messages in the
//!   order it sent them;
//! * no node holds more of a producer's credit than it lent, and all of
//!   it is given back at the end.

use super::{pattern, sim_node_spanning, Node, SimMem};
use crate::nic::shm::machine::CHECK_EVERY_NS;
use crate::nic::shm::mailbox::credit_cost;
use crate::nic::shm::sim::{SimPort, World};
use crate::nic::wire::{OpId, SendFlags};
use proptest::prelude::*;

type SimNode = Node<SimPort, SimMem>;

const PAYLOAD: usize = 512;
/// Every receive is posted this large: it takes whichever message comes.
const CAP: usize = 150_000;

#[derive(Clone, Copy, Debug)]
enum Step {
    /// Node `n` sends its next message.
    Send(usize),
    /// Node `n` posts its next receive.
    Post(usize),
    Progress(usize),
    /// Time passes (liveness checks and grant waits come due).
    Tick,
    /// Cross-memory attach is refused from now on (or allowed again).
    ToggleCma,
}

#[derive(Clone, Debug)]
struct Msg {
    /// Index among the other nodes (0 or 1), not a node number.
    to: usize,
    len: usize,
    delivery: bool,
    inject: bool,
}

#[derive(Clone, Debug)]
struct Case {
    nodes: usize,
    depth: usize,
    span: usize,
    /// Credit per ring, in slots' worth (None: no limit).
    loan_slots: Option<u64>,
    /// Each node's messages, in the order it sends them.
    out: Vec<Vec<Msg>>,
    steps: Vec<Step>,
}

fn msg() -> impl Strategy<Value = Msg> {
    let len = prop_oneof![
        3 => 0..=64usize,
        3 => 65..=PAYLOAD,
        2 => PAYLOAD + 1..=20_000,
        1 => 32_768..=CAP,
    ];
    (0..2usize, len, any::<bool>(), any::<bool>()).prop_map(|(to, len, delivery, inject)| Msg {
        to,
        len,
        delivery,
        inject: inject && len <= PAYLOAD,
    })
}

fn case() -> impl Strategy<Value = Case> {
    (
        2..=3usize,
        2..7usize,
        prop_oneof![Just(1usize), Just(4)],
        prop_oneof![Just(None), (4..24u64).prop_map(Some)],
    )
        .prop_flat_map(|(nodes, depth, span, loan_slots)| {
            let step = prop_oneof![
                4 => (0..nodes).prop_map(Step::Send),
                3 => (0..nodes).prop_map(Step::Post),
                6 => (0..nodes).prop_map(Step::Progress),
                1 => Just(Step::Tick),
                1 => Just(Step::ToggleCma),
            ];
            (
                prop::collection::vec(prop::collection::vec(msg(), 0..12), nodes),
                prop::collection::vec(step, 0..120),
            )
                .prop_map(move |(out, steps)| Case {
                    nodes,
                    depth,
                    span,
                    loan_slots,
                    out,
                    steps,
                })
        })
}

struct Run {
    world: World,
    nodes: Vec<SimNode>,
    loan: u64,
    /// Per node: its sends' ops, in order.
    sent: Vec<Vec<OpId>>,
    /// Per node: its receives' ops, in the order posted.
    posted: Vec<Vec<OpId>>,
    refused: bool,
}

/// The node a message of node `from` goes to (`to` counts the others).
fn dest(from: usize, to: usize, nodes: usize) -> usize {
    (from + 1 + to % (nodes - 1)) % nodes
}

/// Tags say who sent a message and which of its messages it is.
fn tag(from: usize, i: usize) -> u64 {
    (from as u64) << 32 | i as u64
}

impl Run {
    fn new(c: &Case) -> Run {
        let world = World::default();
        let loan = c.loan_slots.map_or(0, |n| n * credit_cost(PAYLOAD));
        let nodes = (0..c.nodes)
            .map(|k| sim_node_spanning(&world, 20 + k as u16, c.depth, PAYLOAD, c.span, loan))
            .collect();
        Run {
            world,
            nodes,
            loan,
            sent: vec![Vec::new(); c.nodes],
            posted: vec![Vec::new(); c.nodes],
            refused: false,
        }
    }

    /// How many messages node `k` receives in all.
    fn incoming(c: &Case, k: usize) -> usize {
        (0..c.nodes)
            .filter(|&f| f != k)
            .map(|f| c.out[f].iter().filter(|m| dest(f, m.to, c.nodes) == k).count())
            .sum()
    }

    fn send(&mut self, c: &Case, k: usize) {
        let i = self.sent[k].len();
        let Some(m) = c.out[k].get(i) else { return };
        let flags = SendFlags {
            inject: m.inject,
            inject_complete: m.inject,
            delivery: m.delivery,
            more: false,
        };
        let to = self.nodes[dest(k, m.to, c.nodes)].addr;
        let t = tag(k, i);
        let op = self.nodes[k].send(to, t, &pattern(t, m.len), flags);
        self.sent[k].push(op);
    }

    fn post(&mut self, c: &Case, k: usize) {
        if self.posted[k].len() < Self::incoming(c, k) {
            let op = self.nodes[k].post(CAP);
            self.posted[k].push(op);
        }
    }

    fn step(&mut self, c: &Case, s: Step) {
        match s {
            Step::Send(k) => self.send(c, k),
            Step::Post(k) => self.post(c, k),
            Step::Progress(k) => {
                self.nodes[k].progress();
            }
            Step::Tick => {
                for n in &mut self.nodes {
                    n.now += CHECK_EVERY_NS / 2;
                }
            }
            Step::ToggleCma => {
                self.refused = !self.refused;
                self.world.refuse_cma(self.refused);
            }
        }
        self.check_credit(c);
    }

    fn check_credit(&self, c: &Case) {
        if self.loan == 0 {
            return;
        }
        for n in &self.nodes {
            for ring in 0..c.nodes - 1 {
                assert!(
                    n.w.m.held_credit(ring) <= self.loan,
                    "a node holds more credit than it lent"
                );
            }
        }
    }

    /// Everything left is sent and posted, then the nodes run (time
    /// passing) until nothing happens any more.
    fn finish(&mut self, c: &Case) {
        self.world.refuse_cma(false);
        for k in 0..c.nodes {
            while self.sent[k].len() < c.out[k].len() {
                self.send(c, k);
            }
            while self.posted[k].len() < Self::incoming(c, k) {
                self.post(c, k);
            }
        }
        for round in 0..20_000 {
            let dt = if round % 50 == 49 { CHECK_EVERY_NS } else { 1_000 };
            let mut any = false;
            for n in &mut self.nodes {
                any |= n.progress_after(dt);
            }
            let busy = self.nodes.iter().any(|n| n.w.m.in_flight() || n.w.m.owes());
            if !any && !busy && round > 100 {
                return;
            }
        }
        panic!("the nodes did not settle");
    }

    fn check(&self, c: &Case) {
        for k in 0..c.nodes {
            for (i, &op) in self.sent[k].iter().enumerate() {
                assert_eq!(self.nodes[k].send_result(op), Some(Ok(())), "node {k}'s send {i}");
            }
            // Per source, the next message expected from it.
            let mut next = vec![0usize; c.nodes];
            for (j, &op) in self.posted[k].iter().enumerate() {
                let n = &self.nodes[k];
                let Some(Ok(len)) = n.recv_result(op) else {
                    panic!("node {k}'s receive {j}: {:?}", n.recv_result(op))
                };
                let t = n.up.hdrs[&op].tag;
                let (from, i) = ((t >> 32) as usize, (t & 0xffff_ffff) as usize);
                assert!(from < c.nodes && from != k, "node {k}'s receive {j}: tag {t:#x}");
                // The sender's next message to this node.
                while dest(from, c.out[from][next[from]].to, c.nodes) != k {
                    next[from] += 1;
                }
                assert_eq!(i, next[from], "node {k}'s receive {j}: from {from} out of order");
                next[from] += 1;
                assert_eq!(len, c.out[from][i].len, "node {k}'s receive {j}: length");
                assert_eq!(n.data(op)[..len], pattern(t, len)[..], "node {k}'s receive {j}: data");
            }
        }
        for n in &self.nodes {
            assert!(!n.w.m.in_flight() && !n.w.m.owes() && n.w.m.backlogged() == 0);
            for ring in 0..c.nodes - 1 {
                assert_eq!(n.w.m.held_credit(ring), 0, "credit given back");
            }
        }
    }
}

fn run(c: Case) {
    let mut r = Run::new(&c);
    for &s in &c.steps {
        r.step(&c, s);
    }
    r.finish(&c);
    r.check(&c);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn crossing_traffic_settles_with_every_message_intact_and_in_order(c in case()) {
        run(c);
    }
}
