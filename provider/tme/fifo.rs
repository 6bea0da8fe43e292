//! The posted-receive list's storage: a ring of slots, oldest first, with
//! the few operations of `VecDeque` that `PostedQ` uses.
//!
//! Why not `VecDeque` itself: its `push_back` goes through a function the
//! compiler keeps out of line, which takes the new entry (80 bytes) by
//! reference to the caller's copy and reads it back with 16-byte loads,
//! where the caller had just written it field by field. A load that spans
//! two pending stores cannot be forwarded from them and waits until they
//! reach the cache: on every posted receive (`perf annotate` of Open MPI's
//! receiving rank in a message-rate run: 64 % of `push_back_mut`'s samples
//! on the one store behind that load, some 5 % of the rank's time). Here
//! `push_back_with` is inlined into the post and makes the entry after
//! the room for it, so its fields go straight into their slot (with
//! `Tme::post_with` and `Ep::recv_one` above it, the one-process
//! ping-pong of `bench/pollbench.c` went from 112 to 101 ns a message).

/// A first-in first-out queue that also removes and searches by position
/// (0 the oldest).
pub(super) struct Fifo<T> {
    /// A power of two slots (or none); those of positions `0..len`,
    /// starting at `head` and wrapping, are `Some`.
    slots: Vec<Option<T>>,
    head: usize,
    len: usize,
}

impl<T> Default for Fifo<T> {
    fn default() -> Self {
        Fifo {
            slots: Vec::new(),
            head: 0,
            len: 0,
        }
    }
}

impl<T> Fifo<T> {
    /// The slot of position `i` (`slots` not empty).
    #[inline(always)]
    fn slot(&self, i: usize) -> usize {
        (self.head + i) & (self.slots.len() - 1)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    #[cfg(test)]
    pub fn push_back(&mut self, v: T) {
        self.push_back_with(|| v)
    }

    /// Appends the entry `make` builds, once there is room for it: made
    /// after the room is, its fields are stored into the slot itself (a
    /// value made before a branch that may call `grow` is kept in a copy
    /// on the stack and read back whole, the stall this type is for).
    #[inline(always)]
    pub fn push_back_with(&mut self, make: impl FnOnce() -> T) {
        if self.len == self.slots.len() {
            self.grow();
        }
        let s = self.slot(self.len);
        // The slot past the last is empty: nothing to drop, and no drop
        // call between the entry's making and its store either.
        let old = self.slots[s].replace(make());
        debug_assert!(old.is_none(), "fifo: the slot past the last was taken");
        std::mem::forget(old);
        self.len += 1;
    }

    #[cold]
    #[inline(never)]
    fn grow(&mut self) {
        let cap = (self.slots.len() * 2).max(8);
        let mut slots = Vec::with_capacity(cap);
        for i in 0..self.len {
            let s = self.slot(i);
            slots.push(self.slots[s].take());
        }
        slots.resize_with(cap, || None);
        self.slots = slots;
        self.head = 0;
    }

    #[inline(always)]
    pub fn pop_front(&mut self) -> Option<T> {
        if self.len == 0 {
            return None;
        }
        let v = self.slots[self.head].take();
        self.head = self.slot(1);
        self.len -= 1;
        v
    }

    #[inline(always)]
    pub fn front(&self) -> Option<&T> {
        self.get(0)
    }

    #[inline]
    pub fn get(&self, i: usize) -> Option<&T> {
        if i >= self.len {
            return None;
        }
        self.slots[self.slot(i)].as_ref()
    }

    #[inline]
    pub fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        if i >= self.len {
            return None;
        }
        let s = self.slot(i);
        self.slots[s].as_mut()
    }

    /// Oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &T> + '_ {
        (0..self.len).filter_map(|i| self.slots[self.slot(i)].as_ref())
    }

    /// Takes position `i` out; the later ones move up one.
    pub fn remove(&mut self, i: usize) -> Option<T> {
        if i >= self.len {
            return None;
        }
        let s = self.slot(i);
        let v = self.slots[s].take();
        for j in i..self.len - 1 {
            let (to, from) = (self.slot(j), self.slot(j + 1));
            self.slots[to] = self.slots[from].take();
        }
        self.len -= 1;
        v
    }

    /// Keeps the entries `keep` says yes to, in their order.
    pub fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) {
        let mut kept = 0;
        for i in 0..self.len {
            let s = self.slot(i);
            let v = self.slots[s].take();
            if v.as_ref().is_some_and(&mut keep) {
                let to = self.slot(kept);
                self.slots[to] = v;
                kept += 1;
            }
        }
        self.len = kept;
    }

    /// `slice::binary_search_by_key` over the positions (sorted by `key`).
    pub fn binary_search_by_key<K: Ord>(&self, k: &K, mut key: impl FnMut(&T) -> K) -> Result<usize, usize> {
        let (mut lo, mut hi) = (0, self.len);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let Some(v) = self.get(mid) else { break };
            match key(v).cmp(k) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Ok(mid),
            }
        }
        Err(lo)
    }

    /// Takes everything out, oldest first.
    #[cfg(test)]
    pub fn drain(&mut self) -> impl Iterator<Item = T> + '_ {
        std::iter::from_fn(move || self.pop_front())
    }
}

impl<T> std::ops::Index<usize> for Fifo<T> {
    type Output = T;
    fn index(&self, i: usize) -> &T {
        self.get(i).expect("fifo: position out of range")
    }
}

impl<T> std::ops::IndexMut<usize> for Fifo<T> {
    fn index_mut(&mut self, i: usize) -> &mut T {
        self.get_mut(i).expect("fifo: position out of range")
    }
}

#[cfg(test)]
mod tests {
    use super::Fifo;
    use proptest::prelude::*;
    use std::collections::VecDeque;

    #[derive(Debug, Clone)]
    enum Op {
        Push(u32),
        Pop,
        Remove(usize),
        Retain(u32),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => any::<u32>().prop_map(Op::Push),
            2 => Just(Op::Pop),
            1 => (0usize..40).prop_map(Op::Remove),
            1 => (1u32..5).prop_map(Op::Retain),
        ]
    }

    proptest! {
        /// Every operation does what `VecDeque`'s does, through growth and
        /// wrapping.
        #[test]
        fn behaves_as_a_vecdeque(ops in prop::collection::vec(op(), 0..300)) {
            let (mut f, mut d) = (Fifo::default(), VecDeque::new());
            for o in ops {
                match o {
                    Op::Push(v) => {
                        f.push_back(v);
                        d.push_back(v);
                    }
                    Op::Pop => prop_assert_eq!(f.pop_front(), d.pop_front()),
                    Op::Remove(i) => prop_assert_eq!(f.remove(i), d.remove(i)),
                    Op::Retain(m) => {
                        f.retain(|v| v % m != 0);
                        d.retain(|v| v % m != 0);
                    }
                }
                prop_assert_eq!(f.len(), d.len());
                prop_assert_eq!(f.front(), d.front());
                prop_assert!(f.iter().eq(d.iter()));
                for i in 0..d.len() + 1 {
                    prop_assert_eq!(f.get(i), d.get(i));
                }
            }
            let drained: Vec<u32> = f.drain().collect();
            prop_assert_eq!(drained, d.into_iter().collect::<Vec<_>>());
            prop_assert_eq!(f.len(), 0);
        }

        /// Over sorted contents (pushed in order), the search finds what
        /// the slice's finds, at the same position or insertion point.
        #[test]
        fn searches_as_a_slice(n in 0usize..50, pops in 0usize..20, k in 0u64..120) {
            let mut f = Fifo::default();
            for v in 0..n as u64 {
                f.push_back(v * 2);
            }
            for _ in 0..pops {
                f.pop_front();
            }
            let v: Vec<u64> = f.iter().copied().collect();
            prop_assert_eq!(f.binary_search_by_key(&k, |&x| x), v.binary_search(&k));
        }
    }
}
