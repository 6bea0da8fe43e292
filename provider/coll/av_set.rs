//! AV sets (fi_av_set(3)): an ordered subset of an AV's addresses, the
//! membership of a collective group. Creating and changing one is local;
//! every member builds the same set in the same order (as MPI builds a
//! group), and a member's rank is its position in it.
//!
//! The set's address (`fi_av_set_addr`) is the set's own fid pointer: it
//! names the set to `fi_join_collective`, which takes the membership from
//! the set itself, so the address is only ever compared, never followed.

use crate::av::Av;
use crate::ffi::*;
use crate::fid::{base_ops, fid_header, FidObj, ParentRef, Table};
use std::ffi::c_void;
use std::sync::{Arc, Mutex, MutexGuard};

pub struct AvSet {
    /// Holds the AV open (fi_close of the AV is -FI_EBUSY meanwhile).
    pub av: ParentRef<Av>,
    members: Mutex<Vec<u64>>,
}

impl AvSet {
    fn lock(&self) -> MutexGuard<'_, Vec<u64>> {
        self.members.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The members' fi_addrs, in set order.
    pub fn members(&self) -> Vec<u64> {
        self.lock().clone()
    }
}

type Obj = FidObj<fid_av_set, AvSet>;

/// The AV set behind an application-supplied fid: checks class and magic.
///
/// # Safety
/// `p` must be NULL or point to readable memory of at least a `struct fid`.
pub unsafe fn from_fid<'a>(p: *const c_void) -> Option<&'a Arc<AvSet>> {
    // SAFETY: the caller's contract (`p` NULL or a readable fid).
    unsafe { Obj::get(p, FI_CLASS_AV_SET) }
}

/// What the set operations may name as creation flags.
const SET_FLAGS: u64 = FI_UNIVERSE
    | FI_BARRIER_SET
    | FI_BROADCAST_SET
    | FI_ALLTOALL_SET
    | FI_ALLREDUCE_SET
    | FI_ALLGATHER_SET
    | FI_REDUCE_SCATTER_SET
    | FI_REDUCE_SET
    | FI_SCATTER_SET
    | FI_GATHER_SET;

/// The initial members `attr` names (fi_av_set(3)): all of the AV's
/// addresses (FI_UNIVERSE: `universe`), none (start and end
/// FI_ADDR_NOTAVAIL), or those from start to end, inclusive, `stride`
/// apart, that are in the AV (`present`).
fn initial_members(
    attr: &fi_av_set_attr,
    universe: impl FnOnce() -> Vec<u64>,
    present: impl Fn(u64) -> bool,
) -> Result<Vec<u64>, i32> {
    if attr.flags & !SET_FLAGS != 0 {
        crate::warn!(FI_LOG_AV, "fi_av_set: unknown flags {:#x}", attr.flags & !SET_FLAGS);
        return Err(-FI_EINVAL);
    }
    if attr.comm_key_size != 0 {
        crate::warn!(
            FI_LOG_AV,
            "fi_av_set: communication keys (application-managed memberships) are not supported"
        );
        return Err(-FI_ENOSYS);
    }
    let members: Vec<u64> = if attr.flags & FI_UNIVERSE != 0 {
        universe()
    } else if attr.start_addr == FI_ADDR_NOTAVAIL || attr.end_addr == FI_ADDR_NOTAVAIL {
        if attr.start_addr != attr.end_addr {
            crate::warn!(
                FI_LOG_AV,
                "fi_av_set: only one of start_addr and end_addr is FI_ADDR_NOTAVAIL"
            );
            return Err(-FI_EINVAL);
        }
        Vec::new()
    } else {
        if attr.stride == 0 || attr.start_addr > attr.end_addr {
            crate::warn!(
                FI_LOG_AV,
                "fi_av_set: no members from {} to {} with stride {}",
                attr.start_addr,
                attr.end_addr,
                attr.stride
            );
            return Err(-FI_EINVAL);
        }
        let span = (attr.end_addr - attr.start_addr) / attr.stride + 1;
        if span > super::MAX_MEMBERS as u64 {
            crate::warn!(FI_LOG_AV, "fi_av_set: {} members, more than a group holds", span);
            return Err(-FI_EINVAL);
        }
        (0..span)
            .map(|i| attr.start_addr + i * attr.stride)
            .filter(|&a| present(a))
            .collect()
    };
    if attr.count != 0 && members.len() > attr.count {
        crate::warn!(
            FI_LOG_AV,
            "fi_av_set: {} members, more than the count of {}",
            members.len(),
            attr.count
        );
        return Err(-FI_EINVAL);
    }
    Ok(members)
}

/// fi_av_set, called by the AV's shim.
///
/// # Safety
/// `attr` must be NULL or point to a readable fi_av_set_attr.
pub unsafe fn open(av: &Arc<Av>, attr: *const fi_av_set_attr, ctx: *mut c_void) -> Result<*mut fid_av_set, i32> {
    // SAFETY: the caller's contract (`attr` NULL or readable).
    let Some(attr) = (unsafe { attr.as_ref() }) else {
        crate::warn!(FI_LOG_AV, "fi_av_set: no attributes");
        return Err(-FI_EINVAL);
    };
    let members = initial_members(attr, || av.addrs(), |a| av.lookup(a).is_some())?;
    let set = Arc::new(AvSet {
        av: ParentRef::new(av),
        members: Mutex::new(members),
    });
    let c = fid_av_set {
        fid: fid_header(FI_CLASS_AV_SET, ctx, SET_FI_OPS.ptr()),
        ops: SET_OPS.ptr(),
    };
    Ok(Obj::create(c, set))
}

unsafe extern "C" fn close(f: *mut fid) -> i32 {
    abi_guard!("close", -FI_EOTHER, || {
        // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
        if unsafe { Obj::get(f as *const c_void, FI_CLASS_AV_SET) }.is_none() {
            return -FI_EINVAL;
        }
        // SAFETY: `get` found a live AV set; the application gives it up.
        // A group joined through it keeps a copy of its membership.
        unsafe { Obj::destroy(f as *mut c_void) };
        0
    })
}

/// Two sets of one AV, from the application's fids (None: a bad fid, or
/// sets of different AVs).
///
/// # Safety
/// Each pointer must be NULL or point to readable memory of at least a fid.
unsafe fn pair<'a>(dst: *const fid_av_set, src: *const fid_av_set) -> Option<(&'a Arc<AvSet>, &'a Arc<AvSet>)> {
    // SAFETY: the caller's contract.
    let (d, s) = unsafe { (from_fid(dst as *const c_void)?, from_fid(src as *const c_void)?) };
    if !Arc::ptr_eq(&d.av.0, &s.av.0) {
        crate::warn!(FI_LOG_AV, "fi_av_set: the two sets belong to different AVs");
        return None;
    }
    Some((d, s))
}

/// Runs a set operation `f(dst members, src members)` for the shims.
///
/// # Safety
/// As for `pair`.
unsafe fn combine(dst: *mut fid_av_set, src: *const fid_av_set, f: impl FnOnce(&mut Vec<u64>, &[u64])) -> i32 {
    // SAFETY: the shim's arguments, as `pair` needs them.
    let Some((d, s)) = (unsafe { pair(dst, src) }) else {
        return -FI_EINVAL;
    };
    // A copy first: dst and src may be the same set (one lock).
    let theirs = s.members();
    f(&mut d.lock(), &theirs);
    0
}

unsafe extern "C" fn set_union(dst: *mut fid_av_set, src: *const fid_av_set) -> i32 {
    abi_guard!("set_union", -FI_EOTHER, || {
        // SAFETY: the application's fids, or NULL.
        unsafe {
            combine(dst, src, |d, s| {
                for a in s {
                    if !d.contains(a) {
                        d.push(*a);
                    }
                }
            })
        }
    })
}

unsafe extern "C" fn intersect(dst: *mut fid_av_set, src: *const fid_av_set) -> i32 {
    abi_guard!("intersect", -FI_EOTHER, || {
        // SAFETY: the application's fids, or NULL.
        unsafe { combine(dst, src, |d, s| d.retain(|a| s.contains(a))) }
    })
}

unsafe extern "C" fn diff(dst: *mut fid_av_set, src: *const fid_av_set) -> i32 {
    abi_guard!("diff", -FI_EOTHER, || {
        // SAFETY: the application's fids, or NULL.
        unsafe { combine(dst, src, |d, s| d.retain(|a| !s.contains(a))) }
    })
}

unsafe extern "C" fn insert(set: *mut fid_av_set, addr: fi_addr_t) -> i32 {
    abi_guard!("insert", -FI_EOTHER, || {
        // SAFETY: the application's fid, or NULL.
        let Some(s) = (unsafe { from_fid(set as *const c_void) }) else {
            return -FI_EINVAL;
        };
        if s.av.lookup(addr).is_none() {
            crate::warn!(FI_LOG_AV, "fi_av_set_insert: fi_addr {:#x} is not in the AV", addr);
            return -FI_EINVAL;
        }
        let mut m = s.lock();
        if m.contains(&addr) {
            crate::warn!(FI_LOG_AV, "fi_av_set_insert: fi_addr {:#x} is a member already", addr);
            return -FI_EINVAL;
        }
        if m.len() >= super::MAX_MEMBERS {
            return -FI_ENOSPC;
        }
        m.push(addr);
        0
    })
}

unsafe extern "C" fn remove(set: *mut fid_av_set, addr: fi_addr_t) -> i32 {
    abi_guard!("remove", -FI_EOTHER, || {
        // SAFETY: the application's fid, or NULL.
        let Some(s) = (unsafe { from_fid(set as *const c_void) }) else {
            return -FI_EINVAL;
        };
        let mut m = s.lock();
        let Some(i) = m.iter().position(|&a| a == addr) else {
            crate::warn!(FI_LOG_AV, "fi_av_set_remove: fi_addr {:#x} is not a member", addr);
            return -FI_EINVAL;
        };
        m.remove(i);
        0
    })
}

unsafe extern "C" fn addr(set: *mut fid_av_set, coll_addr: *mut fi_addr_t) -> i32 {
    abi_guard!("addr", -FI_EOTHER, || {
        // SAFETY: the application's fid, or NULL.
        if unsafe { from_fid(set as *const c_void) }.is_none() || coll_addr.is_null() {
            return -FI_EINVAL;
        }
        // SAFETY: fi_av_set_addr(3): `coll_addr` (non-NULL) is the
        // application's to write.
        unsafe { *coll_addr = set as fi_addr_t };
        0
    })
}

static SET_FI_OPS: Table<fi_ops> = Table(base_ops(close, None, None, None));
static SET_OPS: Table<fi_ops_av_set> = Table(fi_ops_av_set {
    size: std::mem::size_of::<fi_ops_av_set>(),
    set_union: Some(set_union),
    intersect: Some(intersect),
    diff: Some(diff),
    insert: Some(insert),
    remove: Some(remove),
    addr: Some(addr),
});

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(start: u64, end: u64, stride: u64) -> fi_av_set_attr {
        fi_av_set_attr {
            count: 0,
            start_addr: start,
            end_addr: end,
            stride,
            comm_key_size: 0,
            comm_key: std::ptr::null_mut(),
            flags: 0,
        }
    }

    #[test]
    fn initial_members_follow_the_attributes() {
        let m = |a: &fi_av_set_attr| initial_members(a, || (0..6).collect(), |a| a < 6);
        assert_eq!(m(&attr(0, 5, 1)), Ok(vec![0, 1, 2, 3, 4, 5]));
        assert_eq!(m(&attr(1, 5, 2)), Ok(vec![1, 3, 5]));
        // Past the AV's end: only those present.
        assert_eq!(m(&attr(4, 9, 1)), Ok(vec![4, 5]));
        assert_eq!(m(&attr(FI_ADDR_NOTAVAIL, FI_ADDR_NOTAVAIL, 0)), Ok(vec![]));
        let mut u = attr(FI_ADDR_NOTAVAIL, FI_ADDR_NOTAVAIL, 0);
        u.flags = FI_UNIVERSE;
        assert_eq!(m(&u), Ok(vec![0, 1, 2, 3, 4, 5]));
        let mut c = attr(0, 5, 1);
        c.count = 3;
        assert_eq!(m(&c), Err(-FI_EINVAL));
        assert_eq!(m(&attr(0, 5, 0)), Err(-FI_EINVAL));
        assert_eq!(m(&attr(3, 1, 1)), Err(-FI_EINVAL));
        let mut k = attr(FI_ADDR_NOTAVAIL, FI_ADDR_NOTAVAIL, 0);
        k.comm_key_size = 4;
        assert_eq!(m(&k), Err(-FI_ENOSYS));
    }
}
