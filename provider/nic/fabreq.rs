//! `FabReq`: one per libfabric operation in flight at an endpoint (the GNI
//! provider's `gnix_fab_req`), in one table with one id space for both
//! wires. The table is bounded by the endpoint's `tx_size` (sends) and
//! `rx_size` (receives): it is the one place that answers `-FI_EAGAIN`.
//!
//! An `OpId` carries a generation, so an id that outlived its operation
//! (a late event of a cancelled receive, a duplicate completion) finds
//! nothing rather than somebody else's operation.

#![forbid(unsafe_code)]

use crate::nic::slab::Slab;
use crate::nic::wire::OpId;

/// An id no operation ever has (its slab index would be 2^32 - 1): what
/// a transaction of nobody's is named by (a one-sided answer), whose end
/// then finds no record.
pub(crate) const NOBODY: OpId = u64::MAX;

/// Which budget an operation counts against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dir {
    Tx,
    Rx,
}

/// The table is full for that direction: the caller answers `-FI_EAGAIN`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Full;

/// Operations in flight, `R` each (the endpoint's request record).
pub(crate) struct FabReqs<R> {
    slab: Slab<(Dir, R)>,
    cap: [usize; 2],
    used: [usize; 2],
}

fn idx(d: Dir) -> usize {
    match d {
        Dir::Tx => 0,
        Dir::Rx => 1,
    }
}

impl<R> FabReqs<R> {
    pub(crate) fn new(tx_size: usize, rx_size: usize) -> Self {
        FabReqs {
            slab: Slab::new(),
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
        self.slab.insert((dir, r))
    }

    /// Counts an operation that needs no record yet (a posted receive,
    /// which the matching engine holds), unless `dir`'s budget is used up.
    /// It is given a record (`insert_admitted`) or uncounted (`dismiss`).
    pub(crate) fn admit(&mut self, dir: Dir) -> Result<(), Full> {
        if self.used[idx(dir)] >= self.cap[idx(dir)] {
            return Err(Full);
        }
        self.used[idx(dir)] += 1;
        Ok(())
    }

    /// `admit` of a part of an operation already admitted: never refused.
    pub(crate) fn admit_part(&mut self, dir: Dir) {
        self.used[idx(dir)] += 1;
    }

    /// An admitted operation ended without a record.
    pub(crate) fn dismiss(&mut self, dir: Dir) {
        self.used[idx(dir)] -= 1;
    }

    /// The record of an admitted operation that goes on (`remove` ends it).
    pub(crate) fn insert_admitted(&mut self, dir: Dir, r: R) -> OpId {
        self.slab.insert((dir, r))
    }

    /// An id for an operation that may end before it needs a record (a
    /// send the wire completes at once), unless `dir`'s budget is used
    /// up: counted like an operation until `fill` or `unreserve`.
    pub(crate) fn reserve(&mut self, dir: Dir) -> Result<OpId, Full> {
        if self.used[idx(dir)] >= self.cap[idx(dir)] {
            return Err(Full);
        }
        self.used[idx(dir)] += 1;
        Ok(self.slab.reserve())
    }

    /// The record of reserved operation `op`, which goes on.
    pub(crate) fn fill(&mut self, op: OpId, dir: Dir, r: R) {
        self.slab.fill(op, (dir, r));
    }

    /// Reserved operation `op` ended without a record; its id is dead.
    pub(crate) fn unreserve(&mut self, op: OpId, dir: Dir) {
        self.used[idx(dir)] -= 1;
        self.slab.unreserve(op);
    }

    pub(crate) fn get(&self, op: OpId) -> Option<&R> {
        self.slab.get(op).map(|(_, r)| r)
    }

    pub(crate) fn get_mut(&mut self, op: OpId) -> Option<&mut R> {
        self.slab.get_mut(op).map(|(_, r)| r)
    }

    /// Ends an operation; its id is dead from now on.
    pub(crate) fn remove(&mut self, op: OpId) -> Option<R> {
        let (dir, r) = self.slab.remove(op)?;
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
        self.slab.find(|(_, r)| f(r))
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
        assert_eq!((t.len(Dir::Tx), t.len(Dir::Rx)), (2, 3));
        // A part of an admitted operation is counted, never refused.
        t.insert_part(Dir::Rx, 'p');
        assert_eq!((t.len(Dir::Rx), t.left(Dir::Rx)), (4, 0));
    }

    #[test]
    fn an_admitted_operation_counts_with_or_without_a_record() {
        let mut t = FabReqs::new(1, 2);
        t.admit(Dir::Rx).unwrap();
        t.admit(Dir::Rx).unwrap();
        assert_eq!(t.admit(Dir::Rx), Err(Full));
        assert_eq!(t.insert(Dir::Rx, 'x'), Err(Full));
        // A part is counted even past the budget.
        t.admit_part(Dir::Rx);
        assert_eq!((t.len(Dir::Rx), t.left(Dir::Rx)), (3, 0));
        t.dismiss(Dir::Rx);
        // The record of an admitted one counts once, and its removal
        // uncounts it.
        let r = t.insert_admitted(Dir::Rx, 'r');
        assert_eq!(t.len(Dir::Rx), 2);
        assert_eq!(t.remove(r), Some('r'));
        t.dismiss(Dir::Rx);
        assert_eq!((t.len(Dir::Rx), t.left(Dir::Rx), t.left(Dir::Tx)), (0, 2, 1));
    }
}
