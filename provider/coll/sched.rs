//! Collective schedules: which messages a member of a group sends and
//! receives, in which rounds, and what it computes between them.
//!
//! A schedule is pure data, computed from the group's size, the member's
//! rank and the collective; the endpoint's collective engine
//! (`ep/coll.rs`) runs it. Nothing here does I/O, so every collective is
//! checked below by running all members' schedules against each other in a
//! simulated group.
//!
//! Running a schedule: rounds in order; a round first does its local steps
//! (`Copy`, `Reduce`) in order, then starts its messages (`Send`, `Recv`),
//! and ends when all of them have ended. A message is named by the
//! collective's sequence number in the group, its `phase` and its sender's
//! rank: every schedule sends at most one message per phase from one
//! member to another, so sender and receiver agree on the name without
//! talking (`every_message_has_a_unique_name`).
//!
//! Buffers: `In` is a copy of the application's input taken at the call,
//! `Acc` a scratch accumulator, `Tmp(k)` the landing buffer of the k-th
//! `Recv` of the schedule; the application's result buffer (`Out`) is only
//! ever written. So a member's messages come from and go to memory of the
//! engine's own, and the application's buffers are touched once each.
//!
//! The algorithms (n members, `v` a member's rank relative to the root):
//! binomial trees for broadcast and reduce (parent: `v` without its lowest
//! set bit; children: `v + 2^k` below that bit), reduce + broadcast for
//! allreduce and barrier (an allreduce of nothing), direct messages for
//! gather, scatter and all-to-all, gather + broadcast for allgather, and
//! reduce + scatter for reduce-scatter. The root of the all-collectives is
//! rank 0.
#![forbid(unsafe_code)]

/// A collective, as the engine runs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Barrier,
    Broadcast { root: usize },
    AllToAll,
    AllReduce,
    AllGather,
    ReduceScatter,
    Reduce { root: usize },
    Scatter { root: usize },
    Gather { root: usize },
}

/// A buffer a step reads or writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Buf {
    /// The application's input, copied at the call.
    In,
    /// Scratch, `Schedule::acc` bytes.
    Acc,
    /// The landing buffer of the schedule's k-th receive.
    Tmp(usize),
    /// The application's result buffer (written only).
    Out,
}

/// `len` bytes of `buf` from `off`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Region {
    pub buf: Buf,
    pub off: usize,
    pub len: usize,
}

impl Region {
    fn new(buf: Buf, off: usize, len: usize) -> Region {
        Region { buf, off, len }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Copies `src` into `dst` (same length).
    Copy { src: Region, dst: Region },
    /// `dst = dst op src`, element-wise (the collective's op and datatype).
    Reduce { src: Region, dst: Region },
    /// Sends `src` to member `to`.
    Send { to: usize, phase: u8, src: Region },
    /// Receives `len` bytes from member `from` into `Tmp(tmp)`.
    Recv {
        from: usize,
        phase: u8,
        tmp: usize,
        len: usize,
    },
}

impl Step {
    pub(crate) fn is_message(&self) -> bool {
        matches!(self, Step::Send { .. } | Step::Recv { .. })
    }
}

/// What one member does for one collective.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Schedule {
    pub rounds: Vec<Vec<Step>>,
    /// Bytes of `Buf::Acc`.
    pub acc: usize,
    /// Bytes of each `Buf::Tmp`, by index.
    pub tmp: Vec<usize>,
}

/// Bytes of the application's input and result buffers a member passes
/// for `kind` with `block` bytes per member (`count` elements): what the
/// shims check the application's buffers against. A broadcast's one
/// buffer is the root's input and everyone else's result.
pub(crate) fn buffer_lens(kind: Kind, n: usize, me: usize, block: usize) -> (usize, usize) {
    let all = n.saturating_mul(block);
    match kind {
        Kind::Barrier => (0, 0),
        Kind::Broadcast { root } if me == root => (block, 0),
        Kind::Broadcast { .. } => (0, block),
        Kind::AllToAll => (all, all),
        Kind::AllReduce => (block, block),
        Kind::AllGather => (block, all),
        Kind::ReduceScatter => (all, block),
        Kind::Reduce { root } => (block, if me == root { block } else { 0 }),
        Kind::Scatter { root } => (if me == root { all } else { 0 }, block),
        Kind::Gather { root } => (block, if me == root { all } else { 0 }),
    }
}

/// Binomial tree over ranks relative to a root: `v`'s parent.
fn parent(v: usize) -> usize {
    v & (v - 1)
}

/// `v`'s children in a binomial tree of `n`, nearest first.
fn children(v: usize, n: usize) -> Vec<usize> {
    let limit = if v == 0 {
        n.next_power_of_two()
    } else {
        v & v.wrapping_neg()
    };
    let mut out = Vec::new();
    let mut bit = 1;
    while bit < limit && v + bit < n {
        out.push(v + bit);
        bit <<= 1;
    }
    out
}

/// A schedule under construction.
struct Builder {
    s: Schedule,
    n: usize,
    me: usize,
}

impl Builder {
    fn new(n: usize, me: usize) -> Builder {
        Builder {
            s: Schedule::default(),
            n,
            me,
        }
    }

    fn round(&mut self) -> usize {
        self.s.rounds.push(Vec::new());
        self.s.rounds.len() - 1
    }

    fn push(&mut self, round: usize, step: Step) {
        while self.s.rounds.len() <= round {
            self.s.rounds.push(Vec::new());
        }
        self.s.rounds[round].push(step);
    }

    /// A receive into a new Tmp buffer; its index.
    fn recv(&mut self, round: usize, from: usize, phase: u8, len: usize) -> usize {
        let tmp = self.s.tmp.len();
        self.s.tmp.push(len);
        self.push(round, Step::Recv { from, phase, tmp, len });
        tmp
    }

    fn send(&mut self, round: usize, to: usize, phase: u8, src: Region) {
        self.push(round, Step::Send { to, phase, src });
    }

    fn copy(&mut self, round: usize, src: Region, dst: Region) {
        if src.len > 0 {
            self.push(round, Step::Copy { src, dst });
        }
    }

    /// Absolute rank of `v` relative to `root`.
    fn abs(&self, v: usize, root: usize) -> usize {
        (v + root) % self.n
    }

    fn rel(&self, root: usize) -> usize {
        (self.me + self.n - root) % self.n
    }

    /// Binomial-tree reduction of `len` bytes of `Acc` (which the caller
    /// filled) to `root`, in phase `phase`, from round `r`: children's
    /// contributions land in Tmp buffers (round r) and are reduced into
    /// Acc (round r + 1), which a non-root then sends to its parent (round
    /// r + 1). The round after which Acc holds the root's result.
    fn reduce_to(&mut self, r: usize, root: usize, phase: u8, len: usize) -> usize {
        let v = self.rel(root);
        let kids: Vec<usize> = children(v, self.n).into_iter().map(|c| self.abs(c, root)).collect();
        let tmps: Vec<usize> = kids.iter().map(|&c| self.recv(r, c, phase, len)).collect();
        // Nothing to reduce in a barrier (and no datatype to do it in).
        for t in tmps.into_iter().filter(|_| len > 0) {
            self.push(
                r + 1,
                Step::Reduce {
                    src: Region::new(Buf::Tmp(t), 0, len),
                    dst: Region::new(Buf::Acc, 0, len),
                },
            );
        }
        if v != 0 {
            let to = self.abs(parent(v), root);
            self.send(r + 1, to, phase, Region::new(Buf::Acc, 0, len));
        }
        r + 1
    }

    /// Each member's `len` input bytes reduced at `root` (phase 0): into
    /// Acc, then up the tree. The round after which the root's Acc holds
    /// the result.
    fn reduce_input(&mut self, root: usize, len: usize) -> usize {
        self.s.acc = self.s.acc.max(len);
        let r = self.round();
        self.copy(r, Region::new(Buf::In, 0, len), Region::new(Buf::Acc, 0, len));
        self.reduce_to(r, root, 0, len)
    }

    /// Binomial-tree broadcast of `len` bytes from `root` in phase `phase`:
    /// the root sends `src` in round `r`; another member receives from its
    /// parent in round `r` and, in round `r + 1`, copies what came into
    /// `out` and passes it on to its children.
    fn broadcast_from(&mut self, r: usize, root: usize, phase: u8, src: Region, out: Region) {
        let v = self.rel(root);
        let kids: Vec<usize> = children(v, self.n).into_iter().map(|c| self.abs(c, root)).collect();
        if v == 0 {
            for c in kids {
                self.send(r, c, phase, src);
            }
            return;
        }
        let from = self.abs(parent(v), root);
        let t = self.recv(r, from, phase, src.len);
        let got = Region::new(Buf::Tmp(t), 0, src.len);
        self.copy(r + 1, got, out);
        for c in kids {
            self.send(r + 1, c, phase, got);
        }
    }
}

/// The schedule of member `me` of `n` for `kind`, `block` bytes per
/// member (`count` elements of the datatype).
pub(crate) fn schedule(kind: Kind, n: usize, me: usize, block: usize) -> Schedule {
    assert!(me < n, "a member's rank is below the group's size");
    let mut b = Builder::new(n, me);
    let all = n * block;
    let out = |off, len| Region::new(Buf::Out, off, len);
    let input = |off, len| Region::new(Buf::In, off, len);
    let acc = |off, len| Region::new(Buf::Acc, off, len);
    match kind {
        Kind::Broadcast { root } => {
            b.round();
            b.broadcast_from(0, root, 0, input(0, block), out(0, block));
        }
        Kind::Reduce { root } => {
            let r = b.reduce_input(root, block);
            if me == root {
                b.copy(r, acc(0, block), out(0, block));
            }
        }
        Kind::Barrier | Kind::AllReduce => {
            let block = if kind == Kind::Barrier { 0 } else { block };
            let r = b.reduce_input(0, block);
            if me == 0 {
                b.copy(r, acc(0, block), out(0, block));
            }
            b.broadcast_from(r, 0, 1, acc(0, block), out(0, block));
        }
        Kind::Gather { root } => {
            let r = b.round();
            if me != root {
                b.send(r, root, 0, input(0, block));
            } else {
                b.copy(r, input(0, block), out(me * block, block));
                for from in (0..n).filter(|&f| f != root) {
                    let t = b.recv(r, from, 0, block);
                    b.copy(r + 1, Region::new(Buf::Tmp(t), 0, block), out(from * block, block));
                }
            }
        }
        Kind::AllGather => {
            // Gather at 0 into Acc, then broadcast Acc from 0.
            b.s.acc = all;
            let r = b.round();
            if me != 0 {
                b.send(r, 0, 0, input(0, block));
            } else {
                b.copy(r, input(0, block), acc(0, block));
                for from in 1..n {
                    let t = b.recv(r, from, 0, block);
                    b.copy(r + 1, Region::new(Buf::Tmp(t), 0, block), acc(from * block, block));
                }
                b.copy(r + 1, acc(0, all), out(0, all));
            }
            b.broadcast_from(r + 1, 0, 1, acc(0, all), out(0, all));
        }
        Kind::Scatter { root } => {
            let r = b.round();
            if me == root {
                b.copy(r, input(me * block, block), out(0, block));
                for to in (0..n).filter(|&t| t != root) {
                    b.send(r, to, 0, input(to * block, block));
                }
            } else {
                let t = b.recv(r, root, 0, block);
                b.copy(r + 1, Region::new(Buf::Tmp(t), 0, block), out(0, block));
            }
        }
        Kind::AllToAll => {
            let r = b.round();
            b.copy(r, input(me * block, block), out(me * block, block));
            for peer in (0..n).filter(|&p| p != me) {
                b.send(r, peer, 0, input(peer * block, block));
                let t = b.recv(r, peer, 0, block);
                b.copy(r + 1, Region::new(Buf::Tmp(t), 0, block), out(peer * block, block));
            }
        }
        Kind::ReduceScatter => {
            // Reduce everything at 0, then 0 scatters the blocks.
            let r = b.reduce_input(0, all);
            if me == 0 {
                b.copy(r, acc(0, block), out(0, block));
                for to in 1..n {
                    b.send(r, to, 1, acc(to * block, block));
                }
            } else {
                let t = b.recv(r, 0, 1, block);
                b.copy(r + 1, Region::new(Buf::Tmp(t), 0, block), out(0, block));
            }
        }
    }
    // A round with nothing in it would only cost a pass.
    b.s.rounds.retain(|r| !r.is_empty());
    b.s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{HashMap, HashSet, VecDeque};

    /// Every kind with every root, for a group of `n`.
    fn kinds(n: usize) -> Vec<Kind> {
        let mut v = vec![
            Kind::Barrier,
            Kind::AllToAll,
            Kind::AllReduce,
            Kind::AllGather,
            Kind::ReduceScatter,
        ];
        for root in 0..n {
            v.extend([
                Kind::Broadcast { root },
                Kind::Reduce { root },
                Kind::Scatter { root },
                Kind::Gather { root },
            ]);
        }
        v
    }

    /// One member's state while the simulated group runs.
    struct Member {
        s: Schedule,
        round: usize,
        /// Messages of the current round not ended yet.
        waiting: usize,
        started: bool,
        input: Vec<u8>,
        acc: Vec<u8>,
        tmp: Vec<Vec<u8>>,
        out: Vec<u8>,
        /// (from, phase) -> tmp index, receives posted this round.
        posted: HashMap<(usize, u8), usize>,
    }

    type Net = HashMap<(usize, usize, u8), VecDeque<Vec<u8>>>;

    fn read(m: &Member, r: Region) -> Vec<u8> {
        let b = match r.buf {
            Buf::In => &m.input,
            Buf::Acc => &m.acc,
            Buf::Tmp(t) => &m.tmp[t],
            Buf::Out => panic!("the result buffer is never read"),
        };
        b[r.off..r.off + r.len].to_vec()
    }

    fn write(m: &mut Member, r: Region, data: &[u8]) {
        let b = match r.buf {
            Buf::In => panic!("the input is never written"),
            Buf::Acc => &mut m.acc,
            Buf::Tmp(t) => &mut m.tmp[t],
            Buf::Out => &mut m.out,
        };
        b[r.off..r.off + r.len].copy_from_slice(data);
    }

    /// Starts member `me`'s rounds as far as its messages allow: local
    /// steps (the reduction is a wrapping u64 sum), then its sends into
    /// `net` and its receives posted.
    fn start_rounds(me: usize, m: &mut Member, net: &mut Net) {
        while m.round < m.s.rounds.len() {
            if !m.started {
                m.started = true;
                let round = m.s.rounds[m.round].clone();
                for st in &round {
                    match *st {
                        Step::Copy { src, dst } => {
                            let d = read(m, src);
                            write(m, dst, &d);
                        }
                        Step::Reduce { src, dst } => {
                            let a = read(m, src);
                            let mut t = read(m, dst);
                            for (x, y) in t.chunks_mut(8).zip(a.chunks(8)) {
                                let s = u64::from_ne_bytes(x.try_into().unwrap())
                                    .wrapping_add(u64::from_ne_bytes(y.try_into().unwrap()));
                                x.copy_from_slice(&s.to_ne_bytes());
                            }
                            write(m, dst, &t);
                        }
                        _ => {}
                    }
                }
                for st in &round {
                    match *st {
                        Step::Send { to, phase, src } => {
                            let d = read(m, src);
                            net.entry((me, to, phase)).or_default().push_back(d);
                        }
                        Step::Recv { from, phase, tmp, .. } => {
                            assert!(m.posted.insert((from, phase), tmp).is_none());
                            m.waiting += 1;
                        }
                        _ => {}
                    }
                }
            }
            if m.waiting > 0 {
                return;
            }
            m.round += 1;
            m.started = false;
        }
    }

    /// Runs all members' schedules to the end, delivering messages in an
    /// order `pick` chooses; the members' result buffers. The reduction is
    /// a wrapping u64 sum.
    fn run(
        kind: Kind,
        n: usize,
        block: usize,
        inputs: &[Vec<u8>],
        mut pick: impl FnMut(usize) -> usize,
    ) -> Vec<Vec<u8>> {
        let mut ms: Vec<Member> = (0..n)
            .map(|me| {
                let s = schedule(kind, n, me, block);
                let (_, out_len) = buffer_lens(kind, n, me, block);
                Member {
                    acc: vec![0; s.acc],
                    tmp: s.tmp.iter().map(|&l| vec![0; l]).collect(),
                    s,
                    round: 0,
                    waiting: 0,
                    started: false,
                    input: inputs[me].clone(),
                    out: vec![0xEE; out_len],
                    posted: HashMap::new(),
                }
            })
            .collect();
        let mut net: Net = HashMap::new();
        let mut steps = 0;
        loop {
            steps += 1;
            assert!(steps < 100_000, "the group does not finish");
            // Start rounds that can start.
            for (me, m) in ms.iter_mut().enumerate() {
                start_rounds(me, m, &mut net);
            }
            // Deliver one message a member is waiting for.
            let ready: Vec<(usize, usize, u8)> = net
                .iter()
                .filter(|(k, q)| !q.is_empty() && ms[k.1].posted.contains_key(&(k.0, k.2)))
                .map(|(k, _)| *k)
                .collect();
            if ready.is_empty() {
                let left: Vec<usize> = net.values().map(|q| q.len()).collect();
                assert!(left.iter().all(|&l| l == 0), "messages nobody receives: {left:?}");
                for m in &ms {
                    assert_eq!(m.round, m.s.rounds.len(), "a member is stuck in {kind:?}");
                }
                return ms.into_iter().map(|m| m.out).collect();
            }
            let mut ready = ready;
            ready.sort();
            let (from, to, phase) = ready[pick(ready.len()) % ready.len()];
            let data = net.get_mut(&(from, to, phase)).unwrap().pop_front().unwrap();
            let m = &mut ms[to];
            let tmp = m.posted.remove(&(from, phase)).unwrap();
            assert_eq!(data.len(), m.tmp[tmp].len(), "{kind:?}: a message of the wrong length");
            m.tmp[tmp].copy_from_slice(&data);
            m.waiting -= 1;
        }
    }

    fn word(v: u64) -> [u8; 8] {
        v.to_ne_bytes()
    }

    /// What each member's result buffer must hold, computed directly.
    fn expected(kind: Kind, n: usize, block: usize, inputs: &[Vec<u8>]) -> Vec<Vec<u8>> {
        let sum = |range: std::ops::Range<usize>| -> Vec<u8> {
            let mut acc = vec![0u64; range.len() / 8];
            for inp in inputs {
                for (i, a) in acc.iter_mut().enumerate() {
                    let off = range.start + i * 8;
                    *a = a.wrapping_add(u64::from_ne_bytes(inp[off..off + 8].try_into().unwrap()));
                }
            }
            acc.iter().flat_map(|v| word(*v)).collect()
        };
        (0..n)
            .map(|me| {
                let (_, out_len) = buffer_lens(kind, n, me, block);
                let v = match kind {
                    Kind::Barrier => vec![],
                    Kind::Broadcast { root } => {
                        if me == root {
                            vec![]
                        } else {
                            inputs[root][..block].to_vec()
                        }
                    }
                    Kind::AllReduce => sum(0..block),
                    Kind::Reduce { root } => {
                        if me == root {
                            sum(0..block)
                        } else {
                            vec![]
                        }
                    }
                    Kind::AllGather => inputs.iter().flat_map(|i| i[..block].to_vec()).collect(),
                    Kind::Gather { root } => {
                        if me == root {
                            inputs.iter().flat_map(|i| i[..block].to_vec()).collect()
                        } else {
                            vec![]
                        }
                    }
                    Kind::Scatter { root } => inputs[root][me * block..(me + 1) * block].to_vec(),
                    Kind::AllToAll => (0..n)
                        .flat_map(|p| inputs[p][me * block..(me + 1) * block].to_vec())
                        .collect(),
                    Kind::ReduceScatter => sum(me * block..(me + 1) * block),
                };
                assert_eq!(v.len(), out_len);
                v
            })
            .collect()
    }

    fn inputs(kind: Kind, n: usize, block: usize, seed: u64) -> Vec<Vec<u8>> {
        let mut rng = crate::rng::SplitMix::new(seed);
        (0..n)
            .map(|me| {
                let (in_len, _) = buffer_lens(kind, n, me, block);
                (0..in_len / 8).flat_map(|_| word(rng.next_u64())).collect()
            })
            .collect()
    }

    #[test]
    fn every_collective_computes_its_result_in_groups_of_one_to_twelve() {
        let mut rng = crate::rng::SplitMix::new(7);
        for n in 1..=12 {
            for kind in kinds(n) {
                for words in [0, 1, 3] {
                    let block = words * 8;
                    let inp = inputs(kind, n, block, n as u64 * 131 + words as u64);
                    let want = expected(kind, n, block, &inp);
                    // Deliveries in a random order each time.
                    let got = run(kind, n, block, &inp, |k| (rng.next_u64() % k as u64) as usize);
                    assert_eq!(got, want, "{kind:?} with {n} members, {block} bytes each");
                }
            }
        }
    }

    /// Sender and receiver name a message by (sender, receiver, phase)
    /// alone: it must be unique in a collective.
    #[test]
    fn every_message_has_a_unique_name() {
        for n in 1..=17 {
            for kind in kinds(n) {
                let mut sent = HashSet::new();
                let mut received = HashSet::new();
                for me in 0..n {
                    for st in schedule(kind, n, me, 8).rounds.iter().flatten() {
                        match *st {
                            Step::Send { to, phase, .. } => {
                                assert_ne!(to, me);
                                assert!(sent.insert((me, to, phase)), "{kind:?} n={n}: sent twice");
                            }
                            Step::Recv { from, phase, .. } => {
                                assert!(received.insert((from, me, phase)), "{kind:?} n={n}: received twice");
                            }
                            _ => {}
                        }
                    }
                }
                assert_eq!(sent, received, "{kind:?} n={n}: sends and receives pair up");
            }
        }
    }

    #[test]
    fn binomial_tree_covers_every_member_once() {
        for n in 1..=40 {
            let mut seen = vec![0; n];
            seen[0] += 1;
            for v in 0..n {
                for c in children(v, n) {
                    assert_eq!(parent(c), v);
                    seen[c] += 1;
                }
            }
            assert!(seen.iter().all(|&k| k == 1), "n={n}: {seen:?}");
        }
    }

    #[test]
    fn a_group_of_one_only_copies() {
        for kind in kinds(1) {
            let s = schedule(kind, 1, 0, 16);
            assert!(s.rounds.iter().flatten().all(|st| !st.is_message()), "{kind:?}");
        }
    }
}
