//! Two or three simulated processes sending to each other at once (an MPI
//! collective's traffic: every ring of every mailbox busy both ways, each
//! side's rendezvous waiting on the other's progress), with shrinking
//! (proptest): ring depth, spanning, credit loan, message sizes and flags,
//! who sends, posts and polls when, whether cross-memory attach is refused,
//! and whether (and when) one node dies. `model.rs` covers one direction;
//! this covers the crossing traffic. What must hold whatever the schedule:
//!
//! * once every message is sent and every receive posted, the nodes
//!   settle with every send done and every receive full: no schedule
//!   leaves two nodes waiting on each other;
//! * every message arrives once, intact, and a source's messages in the
//!   order it sent them;
//! * no node holds more of a producer's credit than it lent, and all of
//!   it is given back at the end;
//! * when a node dies, the traffic between the others is untouched (all
//!   of it arrives, intact and in order), and each of their operations
//!   with the dead node ends: done, or failed with FI_EHOSTUNREACH.

use super::{pattern, sim_node_spanning, turns, Node, SimMem, Turn};
use crate::ffi::FI_EHOSTUNREACH;
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
    /// Which node dies, before which step (after the last: at the end).
    death: Option<(usize, usize)>,
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

fn case(deaths: bool) -> impl Strategy<Value = Case> {
    (
        2..=3usize,
        2..7usize,
        prop_oneof![Just(1usize), Just(4)],
        prop_oneof![Just(None), (4..24u64).prop_map(Some)],
    )
        .prop_flat_map(move |(nodes, depth, span, loan_slots)| {
            let step = prop_oneof![
                4 => (0..nodes).prop_map(Step::Send),
                3 => (0..nodes).prop_map(Step::Post),
                6 => (0..nodes).prop_map(Step::Progress),
                1 => Just(Step::Tick),
                1 => Just(Step::ToggleCma),
            ];
            let death = if deaths {
                prop_oneof![Just(None), (0..nodes, 0..130usize).prop_map(Some)].boxed()
            } else {
                Just(None).boxed()
            };
            (
                prop::collection::vec(prop::collection::vec(msg(), 0..12), nodes),
                prop::collection::vec(step, 0..120),
                death,
            )
                .prop_map(move |(out, steps, death)| Case {
                    nodes,
                    depth,
                    span,
                    loan_slots,
                    out,
                    steps,
                    death,
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
    dead: Option<usize>,
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
            dead: None,
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

    fn up(&self, k: usize) -> bool {
        self.dead != Some(k)
    }

    fn kill(&mut self, k: usize) {
        self.dead = Some(k);
        self.world.kill(20 + k as u32);
    }

    fn step(&mut self, c: &Case, s: Step) {
        match s {
            Step::Send(k) if self.up(k) => self.send(c, k),
            Step::Post(k) if self.up(k) => self.post(c, k),
            Step::Progress(k) if self.up(k) => {
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
            _ => {}
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
        let dead = self.dead;
        for k in (0..c.nodes).filter(|&k| Some(k) != dead) {
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
            let dead = self.dead;
            for (_, n) in self.nodes.iter_mut().enumerate().filter(|&(k, _)| Some(k) != dead) {
                any |= n.progress_after(dt);
            }
            let busy = (0..c.nodes)
                .filter(|&k| self.up(k))
                .any(|k| self.nodes[k].w.m.in_flight() || self.nodes[k].w.m.owes());
            if !any && !busy && round > 100 {
                return;
            }
        }
        panic!("the nodes did not settle");
    }

    fn check(&self, c: &Case) {
        for k in (0..c.nodes).filter(|&k| self.up(k)) {
            for (i, &op) in self.sent[k].iter().enumerate() {
                let r = self.nodes[k].send_result(op);
                if Some(dest(k, c.out[k][i].to, c.nodes)) == self.dead {
                    assert!(
                        matches!(r, Some(Ok(())) | Some(Err(FI_EHOSTUNREACH))),
                        "node {k}'s send {i}: {r:?}"
                    );
                } else {
                    assert_eq!(r, Some(Ok(())), "node {k}'s send {i}");
                }
            }
            // Per source, the next message expected from it.
            let mut next = vec![0usize; c.nodes];
            let mut unfilled = 0;
            for (j, &op) in self.posted[k].iter().enumerate() {
                let n = &self.nodes[k];
                let r = n.recv_result(op);
                if r.is_none() && self.dead.is_some() {
                    // Left empty: the dead node's messages never came.
                    assert!(
                        !n.up.hdrs.contains_key(&op),
                        "node {k}'s receive {j} took a message and never ended"
                    );
                    unfilled += 1;
                    continue;
                }
                let t = n.up.hdrs[&op].tag;
                let (from, i) = ((t >> 32) as usize, (t & 0xffff_ffff) as usize);
                assert!(from < c.nodes && from != k, "node {k}'s receive {j}: tag {t:#x}");
                // The sender's next message to this node.
                while dest(from, c.out[from][next[from]].to, c.nodes) != k {
                    next[from] += 1;
                }
                assert_eq!(i, next[from], "node {k}'s receive {j}: from {from} out of order");
                next[from] += 1;
                match r {
                    Some(Ok(len)) => {
                        assert_eq!(len, c.out[from][i].len, "node {k}'s receive {j}: length");
                        assert_eq!(n.data(op)[..len], pattern(t, len)[..], "node {k}'s receive {j}: data");
                    }
                    // It took a rendezvous message of the dead node.
                    Some(Err(e)) if Some(from) == self.dead => {
                        assert_eq!(e, FI_EHOSTUNREACH, "node {k}'s receive {j}")
                    }
                    r => panic!("node {k}'s receive {j}: {r:?}"),
                }
            }
            // Every message of a live node arrived: only the dead node's
            // may be missing.
            for from in (0..c.nodes).filter(|&f| f != k && self.up(f)) {
                let to_k = c.out[from].iter().filter(|m| dest(from, m.to, c.nodes) == k).count();
                let got = self.posted[k]
                    .iter()
                    .filter(|op| matches!(self.nodes[k].recv_result(**op), Some(Ok(_))))
                    .filter(|op| (self.nodes[k].up.hdrs[op].tag >> 32) as usize == from)
                    .count();
                assert_eq!(got, to_k, "node {k} got all of node {from}'s messages");
            }
            if let Some(d) = self.dead {
                let from_dead = c.out[d].iter().filter(|m| dest(d, m.to, c.nodes) == k).count();
                assert!(unfilled <= from_dead, "node {k}: {unfilled} receives left empty");
            }
            let n = &self.nodes[k];
            assert!(!n.w.m.in_flight() && !n.w.m.owes(), "node {k} settled");
            if self.dead.is_none() {
                assert_eq!(n.w.m.backlogged(), 0);
                for ring in 0..c.nodes - 1 {
                    assert_eq!(n.w.m.held_credit(ring), 0, "credit given back");
                }
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
    fn crossing_traffic_settles_with_every_message_intact_and_in_order(c in case(false)) {
        run(c);
    }

    #[test]
    fn a_death_leaves_the_others_traffic_whole_and_ends_their_operations_with_it(c in case(true)) {
        run(c);
    }
}
