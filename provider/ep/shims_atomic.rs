//! The `extern "C"` shims of `fi_ops_atomic`: each converts its arguments
//! and calls the safe one-sided path (`rma.rs`), which carries atomics as
//! it carries RMA. Operands and compare values are copied at the call (at
//! most `MAX_ATOMIC_BYTES` per remote iov), so only the result buffers
//! stay the application's until completion.

use super::from_fid;
use super::rma::{AtomicSpec, RmaArgs, RmaDir};
use super::shims::one;
use crate::ffi::*;
use crate::fid::Table;
use crate::nic::atomic::{self, AtomicClass};
use crate::nic::iov::{Iov, IovSource};
use crate::nic::wire::RemoteMem;
use crate::proto::SendSource;
use std::ffi::{c_int, c_void};

/// The operation, if libfabric defines it for this class and datatype.
fn spec(class: AtomicClass, op: fi_op, dt: fi_datatype) -> Result<AtomicSpec, isize> {
    atomic::valid(class, op, dt).map_err(|e| {
        crate::warn!(
            FI_LOG_EP_DATA,
            "atomic: op {} on datatype {} ({:?}) is not offered",
            op,
            dt,
            class
        );
        e as isize
    })?;
    Ok(AtomicSpec {
        class,
        op,
        datatype: dt,
        size: atomic::datatype_size(dt).unwrap_or(1),
    })
}

/// An `fi_ioc` array of `size`-byte elements as an `Iov` (None: NULL with
/// a count).
///
/// # Safety
/// `v` must be NULL or hold `count` readable `fi_ioc`s, whose buffers meet
/// `Iov::from_raw`'s contract (fi_atomic(3)).
unsafe fn iocs(v: *const fi_ioc, count: usize, size: usize) -> Option<Iov> {
    // SAFETY: the caller's contract: `v` is NULL or holds `count` entries.
    let v = unsafe { crate::abi::app_array(v, count) }?;
    // SAFETY: the caller's contract: the application's buffers, valid until
    // the operation completes (results) or the call returns (operands).
    Some(unsafe { Iov::from_raw(v.iter().map(|c| (c.addr as usize, c.count.saturating_mul(size)))) })
}

/// The application's `fi_rma_ioc` array, lengths in bytes.
///
/// # Safety
/// `v` must be NULL or hold `count` readable `fi_rma_ioc`s.
unsafe fn rma_iocs(v: *const fi_rma_ioc, count: usize, size: usize) -> Option<Vec<RemoteMem>> {
    // SAFETY: the caller's contract: `v` is NULL or holds `count` entries.
    let v = unsafe { crate::abi::app_array(v, count) }?;
    Some(
        v.iter()
            .map(|r| RemoteMem {
                key: r.key,
                addr: r.addr,
                len: r.count.saturating_mul(size) as u64,
            })
            .collect(),
    )
}

/// Copies an operand Iov (read once, at the call).
fn gather(iov: Iov) -> Vec<u8> {
    let src = IovSource::new(iov);
    let mut v = vec![0u8; src.len()];
    src.read_at(0, &mut v);
    v
}

/// The buffers of one atomic call.
struct Bufs {
    operand: Option<Iov>,
    compare: Option<Iov>,
    result: Option<Iov>,
    remote: Option<Vec<RemoteMem>>,
}

/// An atomic on the endpoint behind `e`.
///
/// # Safety
/// `e` must be NULL or a readable fid. (The buffers' contract travels with
/// the `Iov`s.)
#[allow(clippy::too_many_arguments)]
unsafe fn do_atomic(
    e: *mut fid_ep,
    spec: Result<AtomicSpec, isize>,
    b: Bufs,
    dest: u64,
    data: Option<u64>,
    ctx: *mut c_void,
    flags: Option<u64>,
    silent: bool,
) -> isize {
    // SAFETY: a fid the application holds, or NULL; `from_fid` checks class and magic.
    let Some(ep) = (unsafe { from_fid(e as *const c_void) }) else {
        return -FI_EINVAL as isize;
    };
    let s = match spec {
        Ok(s) => s,
        Err(e) => return e,
    };
    let reads_only = s.class == AtomicClass::Fetch && s.op == FI_ATOMIC_READ;
    let (Some(operand), Some(compare), Some(result), Some(remote)) = (
        if reads_only { Some(Iov::empty()) } else { b.operand },
        b.compare,
        b.result,
        b.remote,
    ) else {
        crate::warn!(FI_LOG_EP_DATA, "atomic: NULL iov with a non-zero count");
        return -FI_EINVAL as isize;
    };
    if [&operand, &compare]
        .iter()
        .any(|i| i.iter().any(|(p, l)| p == 0 && l != 0))
    {
        crate::warn!(FI_LOG_EP_DATA, "atomic: NULL buffer with non-zero length");
        return -FI_EINVAL as isize;
    }
    let flags = flags.unwrap_or_else(|| ep.flags_at(e, true)) | if data.is_some() { FI_REMOTE_CQ_DATA } else { 0 };
    let a = RmaArgs {
        dir: RmaDir::Atomic(s),
        local: result,
        operand: gather(operand),
        compare: gather(compare),
        remote,
        dest,
        data,
        ctx: ctx as usize,
        flags: flags & !FI_TRIGGER,
        silent,
    };
    if flags & FI_TRIGGER != 0 {
        // SAFETY: FI_TRIGGER: `ctx` is the application's fi_triggered_context (fi_trigger(3)).
        let t = unsafe { crate::trigger::threshold_of(ctx as usize) };
        return super::deferred::defer(ep, t, super::deferred::Op::Rma(a));
    }
    ep.rma(a)
}

fn remote(addr: u64, count: usize, key: u64, size: usize) -> Option<Vec<RemoteMem>> {
    Some(vec![RemoteMem {
        key,
        addr,
        len: count.saturating_mul(size) as u64,
    }])
}

fn size_of(dt: fi_datatype) -> usize {
    atomic::datatype_size(dt).unwrap_or(1)
}

unsafe extern "C" fn write(
    e: *mut fid_ep,
    buf: *const c_void,
    count: usize,
    _desc: *mut c_void,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    dt: fi_datatype,
    op: fi_op,
    ctx: *mut c_void,
) -> isize {
    abi_guard!("write", -FI_EOTHER as isize, || {
        let size = size_of(dt);
        let b = Bufs {
            // SAFETY: `buf` holds `count` elements for this call (copied here).
            operand: Some(unsafe { one(buf, count.saturating_mul(size)) }),
            compare: Some(Iov::empty()),
            result: Some(Iov::empty()),
            remote: remote(addr, count, key, size),
        };
        // SAFETY: `e` is an endpoint fid or NULL.
        unsafe { do_atomic(e, spec(AtomicClass::Plain, op, dt), b, dest, None, ctx, None, false) }
    })
}

unsafe extern "C" fn writev(
    e: *mut fid_ep,
    iov: *const fi_ioc,
    _desc: *mut *mut c_void,
    count: usize,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    dt: fi_datatype,
    op: fi_op,
    ctx: *mut c_void,
) -> isize {
    abi_guard!("writev", -FI_EOTHER as isize, || {
        let size = size_of(dt);
        // SAFETY: fi_atomic(3): `iov` holds `count` fi_iocs.
        let operand = unsafe { iocs(iov, count, size) };
        let n = operand.as_ref().map_or(0, |o| o.total_len() / size);
        let b = Bufs {
            operand,
            compare: Some(Iov::empty()),
            result: Some(Iov::empty()),
            remote: remote(addr, n, key, size),
        };
        // SAFETY: `e` is an endpoint fid or NULL.
        unsafe { do_atomic(e, spec(AtomicClass::Plain, op, dt), b, dest, None, ctx, None, false) }
    })
}

/// The fi_msg_atomic forms.
///
/// # Safety
/// `m` NULL or the application's `fi_msg_atomic`; `comparev`/`resultv` NULL
/// or holding their counts of fi_iocs (fi_atomic(3)).
#[allow(clippy::too_many_arguments)]
unsafe fn do_msg(
    e: *mut fid_ep,
    class: AtomicClass,
    m: *const fi_msg_atomic,
    comparev: *const fi_ioc,
    compare_count: usize,
    resultv: *const fi_ioc,
    result_count: usize,
    flags: u64,
) -> isize {
    // SAFETY: the caller's contract.
    let Some(m) = (unsafe { m.as_ref() }) else {
        crate::warn!(FI_LOG_EP_DATA, "NULL message descriptor");
        return -FI_EINVAL as isize;
    };
    let size = size_of(m.datatype);
    let data = (flags & FI_REMOTE_CQ_DATA != 0).then_some(m.data);
    // SAFETY: the caller's contract: the arrays are as the descriptor says.
    let b = unsafe {
        Bufs {
            operand: iocs(m.msg_iov, m.iov_count, size),
            compare: iocs(comparev, compare_count, size),
            result: iocs(resultv, result_count, size),
            remote: rma_iocs(m.rma_iov, m.rma_iov_count, size),
        }
    };
    // SAFETY: `e` is an endpoint fid or NULL.
    unsafe {
        do_atomic(
            e,
            spec(class, m.op, m.datatype),
            b,
            m.addr,
            data,
            m.context,
            Some(flags),
            false,
        )
    }
}

unsafe extern "C" fn writemsg(e: *mut fid_ep, m: *const fi_msg_atomic, flags: u64) -> isize {
    abi_guard!("writemsg", -FI_EOTHER as isize, || {
        // SAFETY: `m` is NULL or the application's descriptor (fi_atomic(3)).
        unsafe {
            do_msg(
                e,
                AtomicClass::Plain,
                m,
                std::ptr::null(),
                0,
                std::ptr::null(),
                0,
                flags,
            )
        }
    })
}

unsafe extern "C" fn inject(
    e: *mut fid_ep,
    buf: *const c_void,
    count: usize,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    dt: fi_datatype,
    op: fi_op,
) -> isize {
    abi_guard!("inject", -FI_EOTHER as isize, || {
        let size = size_of(dt);
        let b = Bufs {
            // SAFETY: `buf` holds `count` elements for this call (copied here).
            operand: Some(unsafe { one(buf, count.saturating_mul(size)) }),
            compare: Some(Iov::empty()),
            result: Some(Iov::empty()),
            remote: remote(addr, count, key, size),
        };
        let s = spec(AtomicClass::Plain, op, dt);
        // SAFETY: `e` is an endpoint fid or NULL.
        unsafe { do_atomic(e, s, b, dest, None, std::ptr::null_mut(), Some(FI_INJECT), true) }
    })
}

unsafe extern "C" fn readwrite(
    e: *mut fid_ep,
    buf: *const c_void,
    count: usize,
    _desc: *mut c_void,
    result: *mut c_void,
    _result_desc: *mut c_void,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    dt: fi_datatype,
    op: fi_op,
    ctx: *mut c_void,
) -> isize {
    abi_guard!("readwrite", -FI_EOTHER as isize, || {
        let size = size_of(dt);
        let n = count.saturating_mul(size);
        // SAFETY: `buf` holds `count` elements for this call (copied here);
        // `result` is writable until completion (fi_atomic(3)).
        let (operand, result) = unsafe { (one(buf, n), one(result, n)) };
        let b = Bufs {
            operand: Some(operand),
            compare: Some(Iov::empty()),
            result: Some(result),
            remote: remote(addr, count, key, size),
        };
        // SAFETY: `e` is an endpoint fid or NULL.
        unsafe { do_atomic(e, spec(AtomicClass::Fetch, op, dt), b, dest, None, ctx, None, false) }
    })
}

unsafe extern "C" fn readwritev(
    e: *mut fid_ep,
    iov: *const fi_ioc,
    _desc: *mut *mut c_void,
    count: usize,
    resultv: *mut fi_ioc,
    _result_desc: *mut *mut c_void,
    result_count: usize,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    dt: fi_datatype,
    op: fi_op,
    ctx: *mut c_void,
) -> isize {
    abi_guard!("readwritev", -FI_EOTHER as isize, || {
        let size = size_of(dt);
        // SAFETY: fi_atomic(3): the arrays hold their counts of fi_iocs.
        let (operand, result) = unsafe { (iocs(iov, count, size), iocs(resultv, result_count, size)) };
        let n = result.as_ref().map_or(0, |r| r.total_len() / size);
        let b = Bufs {
            operand,
            compare: Some(Iov::empty()),
            result,
            remote: remote(addr, n, key, size),
        };
        // SAFETY: `e` is an endpoint fid or NULL.
        unsafe { do_atomic(e, spec(AtomicClass::Fetch, op, dt), b, dest, None, ctx, None, false) }
    })
}

unsafe extern "C" fn readwritemsg(
    e: *mut fid_ep,
    m: *const fi_msg_atomic,
    resultv: *mut fi_ioc,
    _result_desc: *mut *mut c_void,
    result_count: usize,
    flags: u64,
) -> isize {
    abi_guard!("readwritemsg", -FI_EOTHER as isize, || {
        // SAFETY: the application's descriptor and result array (fi_atomic(3)).
        unsafe {
            do_msg(
                e,
                AtomicClass::Fetch,
                m,
                std::ptr::null(),
                0,
                resultv,
                result_count,
                flags,
            )
        }
    })
}

unsafe extern "C" fn compwrite(
    e: *mut fid_ep,
    buf: *const c_void,
    count: usize,
    _desc: *mut c_void,
    compare: *const c_void,
    _compare_desc: *mut c_void,
    result: *mut c_void,
    _result_desc: *mut c_void,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    dt: fi_datatype,
    op: fi_op,
    ctx: *mut c_void,
) -> isize {
    abi_guard!("compwrite", -FI_EOTHER as isize, || {
        let size = size_of(dt);
        let n = count.saturating_mul(size);
        // SAFETY: `buf` and `compare` hold `count` elements for this call
        // (copied here); `result` is writable until completion (fi_atomic(3)).
        let (operand, cmp, result) = unsafe { (one(buf, n), one(compare, n), one(result, n)) };
        let b = Bufs {
            operand: Some(operand),
            compare: Some(cmp),
            result: Some(result),
            remote: remote(addr, count, key, size),
        };
        // SAFETY: `e` is an endpoint fid or NULL.
        unsafe { do_atomic(e, spec(AtomicClass::Compare, op, dt), b, dest, None, ctx, None, false) }
    })
}

unsafe extern "C" fn compwritev(
    e: *mut fid_ep,
    iov: *const fi_ioc,
    _desc: *mut *mut c_void,
    count: usize,
    comparev: *const fi_ioc,
    _compare_desc: *mut *mut c_void,
    compare_count: usize,
    resultv: *mut fi_ioc,
    _result_desc: *mut *mut c_void,
    result_count: usize,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    dt: fi_datatype,
    op: fi_op,
    ctx: *mut c_void,
) -> isize {
    abi_guard!("compwritev", -FI_EOTHER as isize, || {
        let size = size_of(dt);
        // SAFETY: fi_atomic(3): the arrays hold their counts of fi_iocs.
        let (operand, cmp, result) = unsafe {
            (
                iocs(iov, count, size),
                iocs(comparev, compare_count, size),
                iocs(resultv, result_count, size),
            )
        };
        let n = result.as_ref().map_or(0, |r| r.total_len() / size);
        let b = Bufs {
            operand,
            compare: cmp,
            result,
            remote: remote(addr, n, key, size),
        };
        // SAFETY: `e` is an endpoint fid or NULL.
        unsafe { do_atomic(e, spec(AtomicClass::Compare, op, dt), b, dest, None, ctx, None, false) }
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn compwritemsg(
    e: *mut fid_ep,
    m: *const fi_msg_atomic,
    comparev: *const fi_ioc,
    _compare_desc: *mut *mut c_void,
    compare_count: usize,
    resultv: *mut fi_ioc,
    _result_desc: *mut *mut c_void,
    result_count: usize,
    flags: u64,
) -> isize {
    abi_guard!("compwritemsg", -FI_EOTHER as isize, || {
        // SAFETY: the application's descriptor and arrays (fi_atomic(3)).
        unsafe {
            do_msg(
                e,
                AtomicClass::Compare,
                m,
                comparev,
                compare_count,
                resultv,
                result_count,
                flags,
            )
        }
    })
}

/// fi_atomicvalid and kin: the most elements one operation may carry.
///
/// # Safety
/// `e` NULL or a readable fid; `count` NULL or writable.
unsafe fn valid(e: *mut fid_ep, class: AtomicClass, dt: fi_datatype, op: fi_op, count: *mut usize) -> c_int {
    // SAFETY: a fid the application holds, or NULL; `from_fid` checks class and magic.
    let Some(ep) = (unsafe { from_fid(e as *const c_void) }) else {
        return -FI_EINVAL;
    };
    if ep.caps & FI_ATOMIC == 0 {
        return -FI_EOPNOTSUPP;
    }
    match atomic::valid(class, op, dt) {
        Ok(n) => {
            // SAFETY: the caller's contract: NULL or writable.
            if let Some(c) = unsafe { count.as_mut() } {
                *c = n;
            }
            0
        }
        Err(e) => e,
    }
}

unsafe extern "C" fn writevalid(e: *mut fid_ep, dt: fi_datatype, op: fi_op, count: *mut usize) -> c_int {
    abi_guard!("writevalid", -FI_EOTHER, || {
        // SAFETY: fi_atomicvalid(3): an endpoint fid and a writable count.
        unsafe { valid(e, AtomicClass::Plain, dt, op, count) }
    })
}

unsafe extern "C" fn readwritevalid(e: *mut fid_ep, dt: fi_datatype, op: fi_op, count: *mut usize) -> c_int {
    abi_guard!("readwritevalid", -FI_EOTHER, || {
        // SAFETY: fi_fetch_atomicvalid(3): an endpoint fid and a writable count.
        unsafe { valid(e, AtomicClass::Fetch, dt, op, count) }
    })
}

unsafe extern "C" fn compwritevalid(e: *mut fid_ep, dt: fi_datatype, op: fi_op, count: *mut usize) -> c_int {
    abi_guard!("compwritevalid", -FI_EOTHER, || {
        // SAFETY: fi_compare_atomicvalid(3): an endpoint fid and a writable count.
        unsafe { valid(e, AtomicClass::Compare, dt, op, count) }
    })
}

pub(super) static ATOMIC_OPS: Table<fi_ops_atomic> = Table(fi_ops_atomic {
    size: std::mem::size_of::<fi_ops_atomic>(),
    write: Some(write),
    writev: Some(writev),
    writemsg: Some(writemsg),
    inject: Some(inject),
    readwrite: Some(readwrite),
    readwritev: Some(readwritev),
    readwritemsg: Some(readwritemsg),
    compwrite: Some(compwrite),
    compwritev: Some(compwritev),
    compwritemsg: Some(compwritemsg),
    writevalid: Some(writevalid),
    readwritevalid: Some(readwritevalid),
    compwritevalid: Some(compwritevalid),
});
