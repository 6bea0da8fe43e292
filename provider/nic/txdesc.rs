//! `TxDesc`: one per wire transaction (the GNI provider's
//! `gnix_tx_descriptor`), taken from a bounded pool per port. A wire
//! knows a send only by its descriptor; the port maps the descriptor back
//! to the operation (`FabReq`) when the wire reports its end. One
//! operation may need several transactions (an RMA split in pieces, a
//! message and its acknowledgement), so the pool, not the operation
//! table, bounds what the wires have in flight: when it runs dry the
//! operation waits (`-FI_EAGAIN`).

#![forbid(unsafe_code)]

use crate::nic::slab::Slab;
use crate::nic::wire::{OpId, WireKind};

/// Names a transaction on its wire (where a wire takes an `OpId` for a
/// send, it gets this).
pub(crate) type TxId = u64;

/// A transaction in flight on a wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TxDesc {
    /// The operation it is part of.
    pub op: OpId,
    pub wire: WireKind,
}

pub(crate) struct TxPool {
    slab: Slab<TxDesc>,
    cap: usize,
}

impl TxPool {
    pub(crate) fn new(cap: usize) -> TxPool {
        TxPool { slab: Slab::new(), cap }
    }

    /// A descriptor's id, unless the pool is dry. Taken before the
    /// transaction is known to need one (the wire may finish it at once):
    /// `fill` or `unreserve` it.
    pub(crate) fn reserve(&mut self) -> Option<TxId> {
        (self.slab.len() < self.cap).then(|| self.slab.reserve())
    }

    pub(crate) fn fill(&mut self, tx: TxId, d: TxDesc) {
        self.slab.fill(tx, d)
    }

    pub(crate) fn unreserve(&mut self, tx: TxId) {
        self.slab.unreserve(tx)
    }

    /// Descriptors left.
    pub(crate) fn free(&self) -> usize {
        self.cap.saturating_sub(self.slab.len())
    }

    /// The transaction ended: its descriptor goes back to the pool.
    pub(crate) fn put(&mut self, tx: TxId) -> Option<TxDesc> {
        self.slab.remove(tx)
    }

    #[cfg(test)]
    pub(crate) fn in_use(&self) -> usize {
        self.slab.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pool_is_bounded_and_descriptors_come_back() {
        let mut p = TxPool::new(2);
        let d = |op| TxDesc {
            op,
            wire: WireKind::Udp,
        };
        let take = |p: &mut TxPool, op| {
            let tx = p.reserve()?;
            p.fill(tx, d(op));
            Some(tx)
        };
        let a = take(&mut p, 7).unwrap();
        let r = p.reserve().unwrap();
        assert_eq!(p.reserve(), None, "dry: a reserved descriptor counts");
        p.unreserve(r);
        let b = take(&mut p, 8).unwrap();
        assert_eq!(take(&mut p, 9), None, "dry");
        assert_ne!(a, b);
        assert_eq!(p.put(a), Some(d(7)));
        assert_eq!(p.put(a), None, "once");
        assert_eq!(p.put(r), None, "an unreserved id is dead");
        assert!(take(&mut p, 9).is_some());
        assert_eq!(p.in_use(), 2);
    }
}
