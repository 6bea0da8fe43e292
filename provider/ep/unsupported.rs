//! The ops table of what gnix endpoints do not offer: collectives
//! (FI_COLLECTIVE is not in any `fi_info` gnix returns).
//!
//! libfabric's inline wrappers (`fi_write`, `fi_atomicvalid`, `fi_barrier`,
//! ...) call straight through `ep->collective`:
//! a NULL table is a segmentation fault in the application. Every entry
//! here answers `-FI_ENOSYS` with a warning instead, so a program that
//! probes for a feature (as MPI libraries do with `fi_atomicvalid`) gets a
//! clear refusal.

use crate::ffi::*;
use crate::fid::Table;
use std::ffi::c_void;

/// An entry that refuses: logs which call was made, returns -FI_ENOSYS.
macro_rules! refuse {
    ($class:literal, $name:ident ( $($t:ty),* $(,)? ) -> $ret:ty $(,)?) => {
        pub(super) unsafe extern "C" fn $name($(_: $t),*) -> $ret {
            crate::warn!(
                FI_LOG_EP_DATA,
                "{} {}: not supported by gnix endpoints",
                $class,
                stringify!($name)
            );
            -(FI_ENOSYS as $ret)
        }
    };
}

mod coll {
    use super::*;

    refuse!("fi_collective", barrier(*mut fid_ep, fi_addr_t, *mut c_void) -> isize);
    refuse!(
        "fi_collective",
        broadcast(
            *mut fid_ep,
            *mut c_void,
            usize,
            *mut c_void,
            fi_addr_t,
            fi_addr_t,
            fi_datatype,
            u64,
            *mut c_void,
        ) -> isize
    );
    refuse!(
        "fi_collective",
        alltoall(
            *mut fid_ep,
            *const c_void,
            usize,
            *mut c_void,
            *mut c_void,
            *mut c_void,
            fi_addr_t,
            fi_datatype,
            u64,
            *mut c_void,
        ) -> isize
    );
    refuse!(
        "fi_collective",
        allreduce(
            *mut fid_ep,
            *const c_void,
            usize,
            *mut c_void,
            *mut c_void,
            *mut c_void,
            fi_addr_t,
            fi_datatype,
            fi_op,
            u64,
            *mut c_void,
        ) -> isize
    );
    refuse!(
        "fi_collective",
        allgather(
            *mut fid_ep,
            *const c_void,
            usize,
            *mut c_void,
            *mut c_void,
            *mut c_void,
            fi_addr_t,
            fi_datatype,
            u64,
            *mut c_void,
        ) -> isize
    );
    refuse!(
        "fi_collective",
        reduce_scatter(
            *mut fid_ep,
            *const c_void,
            usize,
            *mut c_void,
            *mut c_void,
            *mut c_void,
            fi_addr_t,
            fi_datatype,
            fi_op,
            u64,
            *mut c_void,
        ) -> isize
    );
    refuse!(
        "fi_collective",
        reduce(
            *mut fid_ep,
            *const c_void,
            usize,
            *mut c_void,
            *mut c_void,
            *mut c_void,
            fi_addr_t,
            fi_addr_t,
            fi_datatype,
            fi_op,
            u64,
            *mut c_void,
        ) -> isize
    );
    refuse!(
        "fi_collective",
        scatter(
            *mut fid_ep,
            *const c_void,
            usize,
            *mut c_void,
            *mut c_void,
            *mut c_void,
            fi_addr_t,
            fi_addr_t,
            fi_datatype,
            u64,
            *mut c_void,
        ) -> isize
    );
    refuse!(
        "fi_collective",
        gather(
            *mut fid_ep,
            *const c_void,
            usize,
            *mut c_void,
            *mut c_void,
            *mut c_void,
            fi_addr_t,
            fi_addr_t,
            fi_datatype,
            u64,
            *mut c_void,
        ) -> isize
    );
    refuse!(
        "fi_collective",
        msg(*mut fid_ep, *const fi_msg_collective, *mut fi_ioc, *mut *mut c_void, usize, u64) -> isize
    );
    refuse!(
        "fi_collective",
        barrier2(*mut fid_ep, fi_addr_t, u64, *mut c_void) -> isize
    );
}

pub(super) static COLLECTIVE_OPS: Table<fi_ops_collective> = Table(fi_ops_collective {
    size: std::mem::size_of::<fi_ops_collective>(),
    barrier: Some(coll::barrier),
    broadcast: Some(coll::broadcast),
    alltoall: Some(coll::alltoall),
    allreduce: Some(coll::allreduce),
    allgather: Some(coll::allgather),
    reduce_scatter: Some(coll::reduce_scatter),
    reduce: Some(coll::reduce),
    scatter: Some(coll::scatter),
    gather: Some(coll::gather),
    msg: Some(coll::msg),
    barrier2: Some(coll::barrier2),
});
