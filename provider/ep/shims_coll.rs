//! The `extern "C"` shims of `fi_ops_collective`: each converts its
//! arguments, sizes the application's buffers from the group (a gather's
//! result holds a block per member) and calls the collective engine
//! (`coll.rs`). No protocol logic lives here.

use super::coll::CollArgs;
use super::from_fid;
use super::shims::one;
use crate::coll::sched::buffer_lens;
use crate::coll::{self, Spec};
use crate::ffi::*;
use crate::fid::Table;
use std::ffi::c_void;

/// Flags a collective call may carry; none changes what it does (its
/// completion already means the data moved).
const COLL_FLAGS: u64 = FI_COMPLETION | FI_MORE | FI_INJECT_COMPLETE | FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE;

/// One collective call.
struct Call {
    coll: fi_collective_op,
    buf: *const c_void,
    count: usize,
    result: *mut c_void,
    coll_addr: fi_addr_t,
    root: Option<fi_addr_t>,
    datatype: fi_datatype,
    op: fi_op,
    flags: u64,
    ctx: *mut c_void,
}

/// Runs a collective call on the endpoint behind `e`.
///
/// # Safety
/// `e` must be NULL or a readable fid; `c.buf` and `c.result` must hold
/// the bytes fi_collective(3) says for the call, `buf` readable during
/// the call and `result` writable and untouched until the completion.
unsafe fn run(e: *mut fid_ep, c: Call) -> isize {
    // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
    let Some(ep) = (unsafe { from_fid(e as *const c_void) }) else {
        return -FI_EINVAL as isize;
    };
    if c.flags & !COLL_FLAGS != 0 {
        crate::warn!(
            FI_LOG_EP_DATA,
            "collective: unsupported flags {:#x}",
            c.flags & !COLL_FLAGS
        );
        return -FI_EBADFLAGS as isize;
    }
    let size = match coll::check(c.coll, c.datatype, c.op) {
        Ok(s) => s,
        Err(e) => {
            crate::warn!(
                FI_LOG_EP_DATA,
                "collective {}: op {} on datatype {} is not offered",
                c.coll,
                c.op,
                c.datatype
            );
            return e as isize;
        }
    };
    let shape = match ep.coll_shape(c.coll_addr, c.root) {
        Ok(s) => s,
        Err(e) => return e,
    };
    let Some(kind) = coll::kind(c.coll, shape.root) else {
        return -FI_EINVAL as isize;
    };
    let count = if size == 0 { 0 } else { c.count };
    let Some(block) = count.checked_mul(size).filter(|b| b.checked_mul(shape.n).is_some()) else {
        crate::warn!(FI_LOG_EP_DATA, "collective: count {} is too large", c.count);
        return -FI_EMSGSIZE as isize;
    };
    let (in_len, out_len) = buffer_lens(kind, shape.n, shape.me, block);
    if (in_len > 0 && c.buf.is_null()) || (out_len > 0 && c.result.is_null()) {
        crate::warn!(FI_LOG_EP_DATA, "collective: NULL buffer for {} elements", c.count);
        return -FI_EINVAL as isize;
    }
    let spec = Spec {
        kind,
        size,
        count,
        datatype: c.datatype,
        op: c.op,
    };
    // SAFETY: the caller's contract: `buf` holds `in_len` bytes readable
    // during this call (the engine copies them before returning), and
    // `result` `out_len` bytes the application leaves to us until the
    // completion (fi_collective(3)). A broadcast passes one buffer for
    // both: the root reads it, the others write it, never both.
    let (input, out) = unsafe { (one(c.buf, in_len), one(c.result, out_len)) };
    ep.collective(CollArgs {
        spec,
        coll_addr: c.coll_addr,
        input,
        out,
        flags: c.flags,
        ctx: c.ctx as usize,
    })
}

unsafe extern "C" fn barrier(e: *mut fid_ep, coll_addr: fi_addr_t, ctx: *mut c_void) -> isize {
    abi_guard!("barrier", -FI_EOTHER as isize, || {
        // SAFETY: the application's arguments (fi_barrier(3)): no buffers.
        unsafe { barrier2(e, coll_addr, 0, ctx) }
    })
}

unsafe extern "C" fn barrier2(e: *mut fid_ep, coll_addr: fi_addr_t, flags: u64, ctx: *mut c_void) -> isize {
    abi_guard!("barrier2", -FI_EOTHER as isize, || {
        let c = Call {
            coll: FI_BARRIER,
            buf: std::ptr::null(),
            count: 0,
            result: std::ptr::null_mut(),
            coll_addr,
            root: None,
            datatype: FI_VOID,
            op: FI_NOOP,
            flags,
            ctx,
        };
        // SAFETY: the application's arguments (fi_barrier2(3)): no buffers.
        unsafe { run(e, c) }
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn broadcast(
    e: *mut fid_ep,
    buf: *mut c_void,
    count: usize,
    _desc: *mut c_void,
    coll_addr: fi_addr_t,
    root: fi_addr_t,
    datatype: fi_datatype,
    flags: u64,
    ctx: *mut c_void,
) -> isize {
    abi_guard!("broadcast", -FI_EOTHER as isize, || {
        let c = Call {
            coll: FI_BROADCAST,
            buf,
            count,
            result: buf,
            coll_addr,
            root: Some(root),
            datatype,
            op: FI_NOOP,
            flags,
            ctx,
        };
        // SAFETY: fi_broadcast(3): `buf` is the root's data and the others'
        // destination, `count` elements.
        unsafe { run(e, c) }
    })
}

/// The shim of a collective with an input and a result buffer: the
/// parameters after `coll_addr` (some of root, datatype, op) are named at
/// the call, with the root, datatype and op the call passes on.
macro_rules! coll_shim {
    ($name:ident, $coll:expr, ($($p:ident: $t:ty),*), root: $root:expr, datatype: $dt:expr, op: $op:expr) => {
        #[allow(clippy::too_many_arguments)]
        unsafe extern "C" fn $name(
            e: *mut fid_ep,
            buf: *const c_void,
            count: usize,
            _desc: *mut c_void,
            result: *mut c_void,
            _result_desc: *mut c_void,
            coll_addr: fi_addr_t,
            $($p: $t,)*
            flags: u64,
            ctx: *mut c_void,
        ) -> isize {
            abi_guard!(stringify!($name), -FI_EOTHER as isize, || {
                let c = Call {
                    coll: $coll,
                    buf,
                    count,
                    result,
                    coll_addr,
                    root: $root,
                    datatype: $dt,
                    op: $op,
                    flags,
                    ctx,
                };
                // SAFETY: fi_collective(3)'s buffers for this call.
                unsafe { run(e, c) }
            })
        }
    };
}

coll_shim!(alltoall, FI_ALLTOALL, (dt: fi_datatype), root: None, datatype: dt, op: FI_NOOP);
coll_shim!(allgather, FI_ALLGATHER, (dt: fi_datatype), root: None, datatype: dt, op: FI_NOOP);
coll_shim!(allreduce, FI_ALLREDUCE, (dt: fi_datatype, op: fi_op), root: None, datatype: dt, op: op);
coll_shim!(reduce_scatter, FI_REDUCE_SCATTER, (dt: fi_datatype, op: fi_op), root: None, datatype: dt, op: op);
coll_shim!(reduce, FI_REDUCE, (root: fi_addr_t, dt: fi_datatype, op: fi_op), root: Some(root), datatype: dt, op: op);
coll_shim!(scatter, FI_SCATTER, (root: fi_addr_t, dt: fi_datatype), root: Some(root), datatype: dt, op: FI_NOOP);
coll_shim!(gather, FI_GATHER, (root: fi_addr_t, dt: fi_datatype), root: Some(root), datatype: dt, op: FI_NOOP);

/// fi_collective's msg form: one input ioc and one result ioc.
unsafe extern "C" fn msg(
    e: *mut fid_ep,
    m: *const fi_msg_collective,
    resultv: *mut fi_ioc,
    _result_desc: *mut *mut c_void,
    result_count: usize,
    flags: u64,
) -> isize {
    abi_guard!("msg", -FI_EOTHER as isize, || {
        // SAFETY: fi_collective(3): `m` is NULL or the application's message.
        let Some(m) = (unsafe { m.as_ref() }) else {
            return -FI_EINVAL as isize;
        };
        // SAFETY: `m.msg_iov` holds `m.iov_count` iocs and `resultv`
        // `result_count` (the caller's arrays, read during this call).
        let (iov, res) = unsafe {
            (
                crate::abi::app_array(m.msg_iov, m.iov_count),
                crate::abi::app_array(resultv as *const fi_ioc, result_count),
            )
        };
        let (Some(iov), Some(res)) = (iov, res) else {
            return -FI_EINVAL as isize;
        };
        if iov.len() > 1 || res.len() > 1 {
            crate::warn!(
                FI_LOG_EP_DATA,
                "fi_collective msg: one ioc each for the data and the result"
            );
            return -FI_EINVAL as isize;
        }
        let (buf, count) = iov
            .first()
            .map_or((std::ptr::null(), 0), |i| (i.addr as *const c_void, i.count));
        let result = if m.coll == FI_BROADCAST {
            buf as *mut c_void
        } else {
            res.first().map_or(std::ptr::null_mut(), |r| r.addr)
        };
        let c = Call {
            coll: m.coll,
            buf,
            count,
            result,
            coll_addr: m.coll_addr,
            root: coll::rooted(m.coll).then_some(m.root_addr),
            datatype: m.datatype,
            op: if m.coll == FI_BARRIER { FI_NOOP } else { m.op },
            flags,
            ctx: m.context,
        };
        // SAFETY: the buffers the message names, as fi_collective(3) has them.
        unsafe { run(e, c) }
    })
}

pub(super) static COLLECTIVE_OPS: Table<fi_ops_collective> = Table(fi_ops_collective {
    size: std::mem::size_of::<fi_ops_collective>(),
    barrier: Some(barrier),
    broadcast: Some(broadcast),
    alltoall: Some(alltoall),
    allreduce: Some(allreduce),
    allgather: Some(allgather),
    reduce_scatter: Some(reduce_scatter),
    reduce: Some(reduce),
    scatter: Some(scatter),
    gather: Some(gather),
    msg: Some(msg),
    barrier2: Some(barrier2),
});
