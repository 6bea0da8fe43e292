//! Collectives (fi_collective(3), fi_av_set(3)): AV sets, collective
//! groups (`fid_mc`), and what `fi_query_collective` answers.
//!
//! gnix runs collectives in software over its own messages: each member of
//! a group follows a schedule (`sched.rs`: binomial trees, direct
//! exchanges) that the endpoint's collective engine (`ep/coll.rs`) carries
//! out with internal messages on the same wires as everything else. Those
//! messages carry the `COLL` flag and are matched apart from the
//! application's tags, by (group, sequence number, phase, sender rank), so
//! collectives and the application's own traffic never meet.
//!
//! The rooms: `av_set.rs` (the AV set class and its set operations),
//! `mc.rs` (the collective group a join makes), `sched.rs` (the schedules,
//! pure, checked against a simulated group).

pub(crate) mod av_set;
pub(crate) mod mc;
pub(crate) mod sched;

use crate::ffi::*;
use crate::nic::atomic::{self, AtomicClass};
use sched::Kind;

/// `MsgHdr::flags` of a collective's internal message (apart from the
/// two-sided bits and the one-sided ones in `nic::onesided`).
pub(crate) const COLL: u32 = 1 << 6;
const _: () = assert!(
    COLL & (crate::nic::onesided::ONESIDED | crate::proto::MsgHdr::TAGGED | crate::proto::MsgHdr::HAS_DATA) == 0
);

/// Largest group a collective runs over: the sender's rank travels in 24
/// bits of a message's name.
pub(crate) const MAX_MEMBERS: usize = 1 << 24;

/// Largest element count of one collective (`datatype_attr.count`): as
/// many as fit the largest message.
fn max_count(size: usize) -> usize {
    crate::getinfo::MAX_MSG_SIZE / size.max(1)
}

/// A collective call as the engine takes it: what it computes and on what.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Spec {
    /// The root is a placeholder (0) until the engine resolves it.
    pub kind: Kind,
    /// Bytes of one element (0 for a barrier).
    pub size: usize,
    pub count: usize,
    pub datatype: u32,
    /// The reduction (`FI_NOOP` when there is none).
    pub op: u32,
}

impl Spec {
    /// Bytes each member contributes.
    pub(crate) fn block(&self) -> usize {
        self.size * self.count
    }
}

/// Whether `coll` reduces (takes an atomic op).
fn reduces(coll: u32) -> bool {
    matches!(coll, FI_ALLREDUCE | FI_REDUCE | FI_REDUCE_SCATTER)
}

/// Checks a collective's datatype and operation: Ok(element size), or the
/// error fi_collective(3) gives (-FI_EOPNOTSUPP for a pair gnix does not
/// compute, -FI_EINVAL for values libfabric does not define).
pub(crate) fn check(coll: u32, datatype: u32, op: u32) -> Result<usize, i32> {
    if coll > FI_GATHER {
        return Err(-FI_EINVAL);
    }
    if coll == FI_BARRIER {
        return Ok(0);
    }
    let size = atomic::datatype_size(datatype).ok_or(-FI_EINVAL)?;
    if reduces(coll) {
        // The reductions fi_collective(3) lists that combine values; the
        // atomic executor computes them (libfabric's own software
        // collectives offer the same set).
        if !(FI_MIN..=FI_BXOR).contains(&op) {
            return Err(-FI_EOPNOTSUPP);
        }
        atomic::valid(AtomicClass::Plain, op, datatype)?;
    } else if op != FI_NOOP && op != FI_ATOMIC_WRITE {
        // A data movement names no operation (FI_NOOP); ATOMIC_WRITE
        // says the same thing.
        return Err(-FI_EOPNOTSUPP);
    }
    Ok(size)
}

/// fi_query_collective.
pub(crate) fn query(coll: u32, attr: &mut fi_collective_attr, flags: u64) -> i32 {
    if attr.mode != 0 {
        crate::warn!(FI_LOG_DOMAIN, "fi_query_collective: mode must be 0");
        return -FI_EINVAL;
    }
    // FI_SCATTER in the flags asks about reduce-scatter (fi_collective(3)).
    let coll = if flags & FI_SCATTER as u64 != 0 && coll == FI_REDUCE {
        FI_REDUCE_SCATTER
    } else {
        coll
    };
    let (op, dt) = (attr.op, attr.datatype);
    match check(coll, dt, op) {
        Ok(size) => {
            attr.datatype_attr = fi_atomic_attr {
                count: if size == 0 { 0 } else { max_count(size) },
                size,
            };
            attr.max_members = MAX_MEMBERS;
            0
        }
        Err(e) => {
            crate::debug!(
                FI_LOG_DOMAIN,
                "fi_query_collective: collective {} with op {} on datatype {}: {}",
                coll,
                op,
                dt,
                e
            );
            e
        }
    }
}

/// The engine's `Kind` of a libfabric collective (roots as ranks).
pub(crate) fn kind(coll: u32, root: usize) -> Option<Kind> {
    Some(match coll {
        FI_BARRIER => Kind::Barrier,
        FI_BROADCAST => Kind::Broadcast { root },
        FI_ALLTOALL => Kind::AllToAll,
        FI_ALLREDUCE => Kind::AllReduce,
        FI_ALLGATHER => Kind::AllGather,
        FI_REDUCE_SCATTER => Kind::ReduceScatter,
        FI_REDUCE => Kind::Reduce { root },
        FI_SCATTER => Kind::Scatter { root },
        FI_GATHER => Kind::Gather { root },
        _ => return None,
    })
}

/// Whether `coll` names a root.
pub(crate) fn rooted(coll: u32) -> bool {
    matches!(coll, FI_BROADCAST | FI_REDUCE | FI_SCATTER | FI_GATHER)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(op: u32, dt: u32) -> fi_collective_attr {
        fi_collective_attr {
            op,
            datatype: dt,
            datatype_attr: fi_atomic_attr { count: 0, size: 0 },
            max_members: 0,
            mode: 0,
        }
    }

    #[test]
    fn query_answers_what_the_engine_computes() {
        let mut a = attr(FI_NOOP, FI_VOID);
        assert_eq!(query(FI_BARRIER, &mut a, 0), 0);
        assert_eq!(a.max_members, MAX_MEMBERS);
        for coll in [FI_BROADCAST, FI_ALLGATHER, FI_SCATTER, FI_GATHER, FI_ALLTOALL] {
            let mut a = attr(FI_NOOP, FI_UINT64);
            assert_eq!(query(coll, &mut a, 0), 0, "{coll}");
            assert_eq!(a.datatype_attr.size, 8);
            let mut a = attr(FI_SUM, FI_UINT64);
            assert_eq!(query(coll, &mut a, 0), -FI_EOPNOTSUPP, "{coll}");
        }
        for coll in [FI_ALLREDUCE, FI_REDUCE, FI_REDUCE_SCATTER] {
            let mut a = attr(FI_SUM, FI_DOUBLE);
            assert_eq!(query(coll, &mut a, 0), 0);
            assert_eq!(a.datatype_attr.size, 8);
            // Bitwise ops on floats are not defined, nor swaps in a reduction.
            assert_eq!(query(coll, &mut attr(FI_BOR, FI_FLOAT), 0), -FI_EOPNOTSUPP);
            assert_eq!(query(coll, &mut attr(FI_CSWAP, FI_UINT32), 0), -FI_EOPNOTSUPP);
            assert_eq!(query(coll, &mut attr(FI_NOOP, FI_UINT32), 0), -FI_EOPNOTSUPP);
        }
        assert_eq!(query(FI_REDUCE, &mut attr(FI_MAX, FI_INT8), FI_SCATTER as u64), 0);
        assert_eq!(query(99, &mut attr(FI_NOOP, FI_UINT8), 0), -FI_EINVAL);
        assert_eq!(query(FI_BROADCAST, &mut attr(FI_NOOP, 999), 0), -FI_EINVAL);
        let mut a = attr(FI_NOOP, FI_VOID);
        a.mode = 1;
        assert_eq!(query(FI_BARRIER, &mut a, 0), -FI_EINVAL);
    }
}
