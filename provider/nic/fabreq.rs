//! `FabReq`: one per libfabric operation in flight at an endpoint (the GNI
//! provider's `gnix_fab_req`), in one table with one id space for both
//! wires. The table is bounded by the endpoint's `tx_size` (sends) and
//! `rx_size` (receives): it is the one place that answers `-FI_EAGAIN`.
//!
//! An `OpId` carries a generation, so an id that outlived its operation
//! (a late event of a cancelled receive, a duplicate completion) finds
//! nothing rather than somebody else's operation.

#![forbid(unsafe_code)]
// Until the endpoint uses it (issue 16).
#![allow(dead_code)]

use crate::nic::wire::OpId;

/// Which budget an operation counts against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dir {
    Tx,
    Rx,
}

/// The table is full for that direction: the caller answers `-FI_EAGAIN`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Full;

struct Slot<R> {
    gen: u32,
    val: Option<(Dir, R)>,
}

/// Operations in flight, `R` each (the endpoint's request record).
pub(crate) struct FabReqs<R> {
    slots: Vec<Slot<R>>,
    free: Vec<u32>,
    cap: [usize; 2],
    used: [usize; 2],
}

fn idx(d: Dir) -> usize {
    match d {
        Dir::Tx => 0,
        Dir::Rx => 1,
    }
}

fn op_id(i: u32, gen: u32) -> OpId {
    (gen as u64) << 32 | i as u64
}

fn split(op: OpId) -> (usize, u32) {
    ((op & 0xffff_ffff) as usize, (op >> 32) as u32)
}

impl<R> FabReqs<R> {
    pub(crate) fn new(tx_size: usize, rx_size: usize) -> Self {
        FabReqs {
            slots: Vec::new(),
            free: Vec::new(),
            cap: [tx_size, rx_size],
            used: [0, 0],
        }
    }

    /// A new operation, unless `dir`'s budget is used up.
    pub(crate) fn insert(&mut self, dir: Dir, r: R) -> Result<OpId, Full> {
        if self.used[idx(dir)] >= self.cap[idx(dir)] {
            return Err(Full);
        }
        Ok(self.insert_part(dir, r))
    }

    /// A part of an operation already admitted (a message landing in an
    /// FI_MULTI_RECV buffer): counted, not refused.
    pub(crate) fn insert_part(&mut self, dir: Dir, r: R) -> OpId {
        self.used[idx(dir)] += 1;
        let i = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(Slot { gen: 0, val: None });
                u32::try_from(self.slots.len() - 1).expect("fabreq: more than 2^32 operations")
            }
        };
        let s = &mut self.slots[i as usize];
        s.val = Some((dir, r));
        op_id(i, s.gen)
    }

    pub(crate) fn get(&self, op: OpId) -> Option<&R> {
        let (i, gen) = split(op);
        let s = self.slots.get(i)?;
        (s.gen == gen).then_some(())?;
        s.val.as_ref().map(|(_, r)| r)
    }

    pub(crate) fn get_mut(&mut self, op: OpId) -> Option<&mut R> {
        let (i, gen) = split(op);
        let s = self.slots.get_mut(i)?;
        (s.gen == gen).then_some(())?;
        s.val.as_mut().map(|(_, r)| r)
    }

    /// Ends an operation; its id is dead from now on.
    pub(crate) fn remove(&mut self, op: OpId) -> Option<R> {
        let (i, gen) = split(op);
        let s = self.slots.get_mut(i)?;
        if s.gen != gen {
            return None;
        }
        let (dir, r) = s.val.take()?;
        s.gen = s.gen.wrapping_add(1);
        self.free.push(i as u32);
        self.used[idx(dir)] -= 1;
        Some(r)
    }

    /// Operations of `dir` in flight.
    pub(crate) fn len(&self, dir: Dir) -> usize {
        self.used[idx(dir)]
    }

    /// Room left in `dir`'s budget (`fi_tx_size_left`, `fi_rx_size_left`).
    pub(crate) fn left(&self, dir: Dir) -> usize {
        self.cap[idx(dir)].saturating_sub(self.used[idx(dir)])
    }

    /// The first operation (in slot order) for which `f` holds.
    pub(crate) fn find(&self, mut f: impl FnMut(&R) -> bool) -> Option<OpId> {
        self.slots.iter().enumerate().find_map(|(i, s)| match &s.val {
            Some((_, r)) if f(r) => Some(op_id(i as u32, s.gen)),
            _ => None,
        })
    }

    /// Every operation, removed (closing the endpoint).
    pub(crate) fn drain(&mut self) -> Vec<(OpId, R)> {
        let mut out = Vec::new();
        for (i, s) in self.slots.iter_mut().enumerate() {
            if let Some((dir, r)) = s.val.take() {
                out.push((op_id(i as u32, s.gen), r));
                s.gen = s.gen.wrapping_add(1);
                self.free.push(i as u32);
                self.used[idx(dir)] -= 1;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_are_separate_and_bound_the_table() {
        let mut t = FabReqs::new(2, 3);
        let a = t.insert(Dir::Tx, 'a').unwrap();
        let b = t.insert(Dir::Tx, 'b').unwrap();
        assert_eq!(t.insert(Dir::Tx, 'c'), Err(Full));
        for k in 0..3 {
            t.insert(Dir::Rx, k as u8 as char).unwrap();
        }
        assert_eq!(t.insert(Dir::Rx, 'x'), Err(Full));
        assert_eq!((t.left(Dir::Tx), t.left(Dir::Rx)), (0, 0));
        assert_eq!(t.remove(a), Some('a'));
        assert_eq!(t.left(Dir::Tx), 1);
        // The slot is reused, under a new id: the old one finds nothing.
        let c = t.insert(Dir::Tx, 'c').unwrap();
        assert_ne!(c, a);
        assert_eq!(t.get(a), None);
        assert_eq!(t.remove(a), None);
        assert_eq!((t.get(b), t.get(c)), (Some(&'b'), Some(&'c')));
        assert_eq!(t.find(|&r| r == 'c'), Some(c));
        let mut all: Vec<char> = t.drain().into_iter().map(|(_, r)| r).collect();
        all.sort();
        assert_eq!(all, vec!['\0', '\u{1}', '\u{2}', 'b', 'c']);
        assert_eq!((t.len(Dir::Tx), t.len(Dir::Rx), t.get(b)), (0, 0, None));
    }
}
