//! The posted-receive queue of a `Tme`.
//!
//! The receives sit in one deque in post order. Up to `INDEX_FROM` of
//! them, an incoming message walks it from the oldest; the match is nearly
//! always the first entry (messages come in the order their receives were
//! posted), so posting is a push at the back and matching a pop at the
//! front, with nothing hashed and nothing linked. The slab with intrusive
//! lists this replaced cost a tenth of an 8 B ping-pong's instructions.
//!
//! A longer queue is indexed: every receive is also in its bucket, keyed
//! by `(ignore, tag & !ignore, src filter)`, which holds the post numbers
//! (`seq`) of its receives in order. A receive matched or cancelled while
//! indexed leaves a hole in the deque (so the others stay where a search
//! by `seq` finds them); holes go once they reach the front or outnumber
//! the receives, and all of them when the index is dropped.
#![forbid(unsafe_code)]

use super::fifo::Fifo;
use super::{HashMap, MatchSpec, RecvKey, SrcAddr};
use std::collections::VecDeque;

/// (ignore, tag & !ignore, src filter): entries of one bucket are
/// interchangeable for matching, so only the head is ever examined.
type BucketKey = (u64, u64, Option<SrcAddr>);

fn bucket_key(spec: &MatchSpec) -> BucketKey {
    (spec.ignore, spec.masked_tag(), spec.src)
}

/// A bucket: the `seq`s of its receives, oldest first.
type Bucket = VecDeque<u64>;

struct PEntry<R> {
    seq: u64,
    spec: MatchSpec,
    /// `None`: a hole (indexed only).
    recv: Option<R>,
}

/// Multiset of the ignore masks currently posted, iterable in O(#masks).
/// (A HashMap alone would iterate in O(capacity), which stays large after a
/// burst of odd masks.)
pub(super) struct MaskSet {
    masks: Vec<(u64, usize)>,
    pos: HashMap<u64, usize>,
}

/// Exact tags (mask 0) are nearly every receive: their count lives in
/// `masks[0]` for good, so posting and matching one touch no map.
impl MaskSet {
    fn new() -> Self {
        MaskSet {
            masks: vec![(0, 0)],
            pos: HashMap::default(),
        }
    }

    /// No receive with ignore bits is posted.
    fn only_exact(&self) -> bool {
        self.masks.len() == 1
    }

    /// The masks in use.
    pub(super) fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        self.masks.iter().filter(|m| m.1 > 0).map(|m| m.0)
    }

    fn add(&mut self, mask: u64) {
        if mask == 0 {
            self.masks[0].1 += 1;
            return;
        }
        match self.pos.get(&mask) {
            Some(&i) => self.masks[i].1 += 1,
            None => {
                self.pos.insert(mask, self.masks.len());
                self.masks.push((mask, 1));
            }
        }
    }

    fn remove(&mut self, mask: u64) {
        if mask == 0 {
            self.masks[0].1 -= 1;
            return;
        }
        // i >= 1: the swap below never moves the exact-tag entry.
        let i = self.pos[&mask];
        self.masks[i].1 -= 1;
        if self.masks[i].1 == 0 {
            self.masks.swap_remove(i);
            self.pos.remove(&mask);
            if let Some(&(moved, _)) = self.masks.get(i) {
                self.pos.insert(moved, i);
            }
        }
    }

    fn clear(&mut self) {
        self.masks.truncate(1);
        self.masks[0].1 = 0;
        self.pos.clear();
    }
}

/// Posted receives beyond which matching looks in buckets: up to this
/// many, the posted list is walked from its oldest entry, which in a
/// stream of messages that arrive in the order their receives were posted
/// (a ping-pong, a window of receives: fabtests' bandwidth tests keep 65
/// posted) is the match at once, and posting and matching hash nothing.
/// Out of order, a match steps over at most this many. A longer queue is
/// indexed until it is down to a quarter of this, so that a queue around
/// the limit is not indexed afresh all the time.
pub(super) const INDEX_FROM: usize = 128;

/// Holes kept in the indexed deque before it is compacted, at the least.
const HOLES_MIN: usize = 64;

pub(super) struct PostedQ<R> {
    /// The receives in post order (`seq` ascending); holes only while
    /// indexed.
    list: Fifo<PEntry<R>>,
    /// Receives in `list`, holes not counted.
    live: usize,
    /// Whether the receives are in `buckets` (and `hot`): more than
    /// `index_from` were posted, and not a quarter of that since.
    indexed: bool,
    /// `INDEX_FROM`, or what a test sets.
    pub(super) index_from: usize,
    pub(super) buckets: HashMap<BucketKey, Bucket>,
    /// The ignore masks of the indexed entries (empty while walking: Open
    /// MPI posts every receive with its protocol bits ignored, and keeping
    /// the set for a walk would hash each mask at every post and match).
    pub(super) masks: MaskSet,
    next_seq: u64,
    /// Indexed receives with a source filter: without any, a message looks
    /// up one bucket per mask instead of two.
    directed: usize,
    /// Buckets left empty in the map: a stream of a few tags keeps
    /// posting and matching them, and keeping their buckets spares a map
    /// insert and remove per message; they are swept once they are many.
    empty_buckets: usize,
    /// The bucket last posted to while it was the only one posted to, kept
    /// out of the map: a stream of receives on one tag posts and matches
    /// without hashing. A key is here or in `buckets`, never in both.
    hot: Option<(BucketKey, Bucket)>,
}

impl<R> PostedQ<R> {
    pub(super) fn new() -> Self {
        PostedQ {
            list: Fifo::default(),
            live: 0,
            indexed: false,
            index_from: INDEX_FROM,
            buckets: HashMap::default(),
            masks: MaskSet::new(),
            next_seq: 0,
            directed: 0,
            empty_buckets: 0,
            hot: None,
        }
    }

    /// Receives posted.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.live
    }

    /// No receive posted.
    pub(super) fn is_empty(&self) -> bool {
        self.live == 0
    }

    pub(super) fn append(&mut self, spec: MatchSpec, recv: R) -> RecvKey {
        self.append_with(spec, || recv)
    }

    /// `append` of the receive `make` builds, in its slot (`Tme::post_with`).
    #[inline(always)]
    pub(super) fn append_with(&mut self, spec: MatchSpec, make: impl FnOnce() -> R) -> RecvKey {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.list.push_back_with(|| PEntry {
            seq,
            spec,
            recv: Some(make()),
        });
        self.live += 1;
        if self.indexed {
            self.index_last();
        } else if self.live > self.index_from {
            self.build_index();
        }
        RecvKey { seq }
    }

    /// Files the receive just appended in its bucket. Its spec is read
    /// back from the queue here, out of line, so that the append's
    /// caller need not keep one in memory for it (`fifo.rs` says what
    /// such a copy costs the append).
    #[inline(never)]
    fn index_last(&mut self) {
        let last = self.list.len() - 1;
        let (seq, spec) = (self.list[last].seq, self.list[last].spec);
        self.index(seq, &spec);
    }

    /// Puts every posted receive into its bucket, in post order.
    #[cold]
    fn build_index(&mut self) {
        self.indexed = true;
        for i in 0..self.list.len() {
            let (seq, spec) = (self.list[i].seq, self.list[i].spec);
            self.index(seq, &spec);
        }
    }

    /// Makes `key`'s bucket the hot one, unless another bucket holds
    /// receives there (then `key` stays in the map).
    fn make_hot(&mut self, key: BucketKey) {
        match &self.hot {
            Some((k, _)) if *k == key => return,
            Some((_, b)) if !b.is_empty() => return,
            _ => {}
        }
        let bucket = match self.buckets.is_empty() {
            true => None,
            false => self.buckets.remove(&key),
        };
        // An empty bucket kept in the map leaves it.
        if bucket.as_ref().is_some_and(|b| b.is_empty()) {
            self.empty_buckets -= 1;
        }
        self.hot = Some((key, bucket.unwrap_or_default()));
    }

    /// The bucket of `key`, if it exists.
    fn bucket(&self, key: &BucketKey) -> Option<&Bucket> {
        match &self.hot {
            Some((k, b)) if k == key => Some(b),
            _ => self.buckets.get(key),
        }
    }

    /// Appends receive `seq` to its bucket, and counts its mask and filter.
    fn index(&mut self, seq: u64, spec: &MatchSpec) {
        self.masks.add(spec.ignore);
        self.directed += spec.src.is_some() as usize;
        let key = bucket_key(spec);
        self.make_hot(key);
        let bucket = match &mut self.hot {
            Some((k, b)) if *k == key => b,
            _ => match self.buckets.entry(key) {
                std::collections::hash_map::Entry::Occupied(o) => {
                    let b = o.into_mut();
                    self.empty_buckets -= b.is_empty() as usize;
                    b
                }
                std::collections::hash_map::Entry::Vacant(v) => v.insert(Bucket::new()),
            },
        };
        bucket.push_back(seq);
    }

    /// The position in `list` of the receive posted as `seq`, if it is
    /// still there (or its hole).
    fn pos_of(&self, seq: u64) -> Option<usize> {
        let first = self.list.front()?.seq;
        // Without holes taken out in between, it is where it was posted.
        let guess = usize::try_from(seq.checked_sub(first)?).ok()?;
        if self.list.get(guess).is_some_and(|e| e.seq == seq) {
            return Some(guess);
        }
        self.list.binary_search_by_key(&seq, |e| e.seq).ok()
    }

    /// The position of the earliest posted receive that matches.
    #[inline]
    pub(super) fn find(&self, src: SrcAddr, tag: u64) -> Option<usize> {
        if !self.indexed {
            // The earliest posted that matches: few to walk, no holes.
            // The oldest, nearly always (a ping-pong's or a window's
            // receives match in the order they were posted): looked at
            // without setting up the deque's iterator.
            let walk = |e: &PEntry<R>| {
                #[cfg(test)]
                super::tests::WALKED.with(|w| w.set(w.get() + 1));
                e.spec.matches(src, tag)
            };
            if walk(self.list.front()?) {
                return Some(0);
            }
            return self.list.iter().skip(1).position(walk).map(|p| p + 1);
        }
        self.find_indexed(src, tag)
    }

    fn find_indexed(&self, src: SrcAddr, tag: u64) -> Option<usize> {
        // Exact tags from any source only (a ping-pong, most MPI traffic):
        // one bucket to look at, usually the hot one.
        if self.directed == 0 && self.masks.only_exact() {
            let seq = *self.bucket(&(0, tag, None))?.front()?;
            return self.pos_of(seq);
        }
        let mut best: Option<u64> = None;
        let filters: &[Option<SrcAddr>] = if self.directed > 0 { &[Some(src), None] } else { &[None] };
        for mask in self.masks.iter() {
            for &filter in filters {
                if let Some(&seq) = self.bucket(&(mask, tag & !mask, filter)).and_then(|b| b.front()) {
                    if best.is_none_or(|s| seq < s) {
                        best = Some(seq);
                    }
                }
            }
        }
        self.pos_of(best?)
    }

    /// The receive at `pos` (not a hole).
    pub(super) fn get(&self, pos: usize) -> &R {
        // The oldest, nearly always (`find`): no index arithmetic.
        let e = if pos == 0 {
            self.list.front()
        } else {
            self.list.get(pos)
        };
        e.and_then(|e| e.recv.as_ref()).expect("tme: a hole matched")
    }

    #[cfg(test)]
    pub(super) fn get_mut(&mut self, pos: usize) -> &mut R {
        self.list[pos].recv.as_mut().expect("tme: a hole matched")
    }

    pub(super) fn spec(&self, pos: usize) -> &MatchSpec {
        &self.list[pos].spec
    }

    #[cfg(test)]
    pub(super) fn key(&self, pos: usize) -> RecvKey {
        RecvKey {
            seq: self.list[pos].seq,
        }
    }

    /// The receive posted as `key`, if it still is.
    #[cfg(test)]
    pub(super) fn by_key(&self, key: RecvKey) -> Option<usize> {
        self.pos_of(key.seq).filter(|&p| self.list[p].recv.is_some())
    }

    /// The oldest posted receive, taken out if it matches and `take` says
    /// so of it (`Tme::take_incoming`); `None` leaves the queue as it was.
    /// Only an unindexed queue's head: anything else is `find`'s.
    #[inline(always)]
    pub(super) fn take_front(&mut self, src: SrcAddr, tag: u64, take: impl FnOnce(&R) -> bool) -> Option<R> {
        if self.indexed {
            return None;
        }
        let e = self.list.front()?;
        // A walked queue has no holes.
        if !e.spec.matches(src, tag) || !e.recv.as_ref().is_some_and(take) {
            return None;
        }
        self.live -= 1;
        self.list.pop_front()?.recv
    }

    /// The earliest receive for which `pred` holds.
    pub(super) fn position(&self, mut pred: impl FnMut(&R) -> bool) -> Option<usize> {
        self.list.iter().position(|e| e.recv.as_ref().is_some_and(&mut pred))
    }

    /// The receives in post order.
    #[cfg(test)]
    pub(super) fn iter(&self) -> impl Iterator<Item = (RecvKey, &MatchSpec, &R)> + '_ {
        self.list
            .iter()
            .filter_map(|e| Some((RecvKey { seq: e.seq }, &e.spec, e.recv.as_ref()?)))
    }

    /// Takes the receive at `pos` out.
    #[inline(always)]
    pub(super) fn remove(&mut self, pos: usize) -> R {
        // The oldest of a walked queue, nearly always: the deque moves
        // nothing. The rest out of line, keeping the matching path short.
        if pos == 0 && !self.indexed {
            let e = self.list.pop_front();
            self.live -= 1;
            return e.and_then(|e| e.recv).expect("tme: a walked queue has no holes");
        }
        self.remove_other(pos)
    }

    #[inline(never)]
    fn remove_other(&mut self, pos: usize) -> R {
        if self.indexed {
            return self.remove_indexed(pos);
        }
        let e = self.list.remove(pos);
        self.live -= 1;
        e.and_then(|e| e.recv).expect("tme: removing a vacant entry")
    }

    fn remove_indexed(&mut self, pos: usize) -> R {
        let e = &mut self.list[pos];
        let recv = e.recv.take().expect("tme: removing a hole");
        let (seq, spec) = (e.seq, e.spec);
        self.live -= 1;
        self.unindex(seq, &spec);
        while self.list.front().is_some_and(|e| e.recv.is_none()) {
            self.list.pop_front();
        }
        if self.live <= self.index_from / 4 {
            self.drop_index();
        } else if self.list.len() - self.live > self.live.max(HOLES_MIN) {
            self.list.retain(|e| e.recv.is_some());
        }
        recv
    }

    /// Back to walking the posted list, without holes.
    #[cold]
    fn drop_index(&mut self) {
        self.indexed = false;
        self.list.retain(|e| e.recv.is_some());
        self.buckets.clear();
        self.hot = None;
        self.empty_buckets = 0;
        self.masks.clear();
        self.directed = 0;
    }

    /// Takes receive `seq` out of its bucket, and uncounts its mask and
    /// filter.
    fn unindex(&mut self, seq: u64, spec: &MatchSpec) {
        self.masks.remove(spec.ignore);
        self.directed -= spec.src.is_some() as usize;
        let key = bucket_key(spec);
        let hot = matches!(&self.hot, Some((k, _)) if *k == key);
        let bucket = match &mut self.hot {
            Some((_, b)) if hot => b,
            _ => self.buckets.get_mut(&key).expect("tme: posted entry without a bucket"),
        };
        // A match takes the head; only a cancel looks further.
        if bucket.front() == Some(&seq) {
            bucket.pop_front();
        } else {
            let i = bucket.binary_search(&seq).expect("tme: posted entry not in its bucket");
            bucket.remove(i);
        }
        if !hot && bucket.is_empty() {
            self.empty_buckets += 1;
            if self.empty_buckets > 64 && self.empty_buckets * 2 > self.buckets.len() {
                self.buckets.retain(|_, b| !b.is_empty());
                self.empty_buckets = 0;
            }
        }
    }

    /// Takes every receive out, in post order.
    #[cfg(test)]
    pub(super) fn drain(&mut self) -> Vec<R> {
        let out = self.list.drain().filter_map(|e| e.recv).collect();
        self.live = 0;
        self.drop_index();
        out
    }
}

/// A posted receive that an incoming message matched, borrowed in place.
///
/// Dropping it leaves the receive posted at its position (a multi-receive
/// buffer with room left); [`consume`](Self::consume) removes it.
pub struct PostedMatch<'a, R> {
    pub(super) q: &'a mut PostedQ<R>,
    pub(super) pos: usize,
}

impl<'a, R> PostedMatch<'a, R> {
    #[cfg(test)]
    pub fn key(&self) -> RecvKey {
        self.q.key(self.pos)
    }

    #[cfg(test)]
    pub fn spec(&self) -> &MatchSpec {
        self.q.spec(self.pos)
    }

    pub fn get(&self) -> &R {
        self.q.get(self.pos)
    }

    #[cfg(test)]
    pub fn get_mut(&mut self) -> &mut R {
        self.q.get_mut(self.pos)
    }

    /// Removes the receive from the posted queue.
    #[inline]
    pub fn consume(self) -> R {
        self.q.remove(self.pos)
    }
}
