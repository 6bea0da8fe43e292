//! The `extern "C"` shims of `fi_ops_rma`: each converts its arguments and
//! calls the safe one-sided path (`rma.rs`). No protocol logic lives here.

use super::from_fid;
use super::rma::{RmaArgs, RmaDir};
use super::shims::{iov_of, one};
use crate::ffi::*;
use crate::fid::Table;
use crate::nic::iov::Iov;
use crate::nic::wire::RemoteMem;
use std::ffi::c_void;

/// One remote iov.
fn remote(addr: u64, len: usize, key: u64) -> Vec<RemoteMem> {
    vec![RemoteMem {
        key,
        addr,
        len: len as u64,
    }]
}

/// The application's `fi_rma_iov` array (None: NULL with a count).
///
/// # Safety
/// `v` must be NULL or point to `count` readable `fi_rma_iov`s.
unsafe fn remotes(v: *const fi_rma_iov, count: usize) -> Option<Vec<RemoteMem>> {
    // SAFETY: the caller's contract: `v` is NULL or holds `count` entries.
    let v = unsafe { crate::abi::app_array(v, count) }?;
    Some(
        v.iter()
            .map(|r| RemoteMem {
                key: r.key,
                addr: r.addr,
                len: r.len as u64,
            })
            .collect(),
    )
}

/// A one-sided operation on the endpoint behind `e`.
///
/// # Safety
/// `e` must be NULL or a readable fid. (The buffers' contract travels with
/// the `Iov`: whoever made it vouched for them.)
#[allow(clippy::too_many_arguments)]
unsafe fn do_rma(
    e: *mut fid_ep,
    dir: RmaDir,
    local: Option<Iov>,
    remote: Option<Vec<RemoteMem>>,
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
    let (Some(local), Some(remote)) = (local, remote) else {
        crate::warn!(FI_LOG_EP_DATA, "rma: NULL iov with a non-zero count");
        return -FI_EINVAL as isize;
    };
    let flags = flags.unwrap_or_else(|| ep.flags_at(e, true)) | if data.is_some() { FI_REMOTE_CQ_DATA } else { 0 };
    let a = RmaArgs {
        dir,
        local,
        operand: Vec::new(),
        compare: Vec::new(),
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

unsafe extern "C" fn read(
    e: *mut fid_ep,
    buf: *mut c_void,
    len: usize,
    _desc: *mut c_void,
    src: fi_addr_t,
    addr: u64,
    key: u64,
    ctx: *mut c_void,
) -> isize {
    abi_guard!("read", -FI_EOTHER as isize, || {
        // SAFETY: `e` is an endpoint fid or NULL; `buf` stays writable until completion (fi_rma(3)).
        let local = unsafe { one(buf, len) };
        // SAFETY: as above.
        unsafe {
            do_rma(
                e,
                RmaDir::Read,
                Some(local),
                Some(remote(addr, len, key)),
                src,
                None,
                ctx,
                None,
                false,
            )
        }
    })
}

unsafe extern "C" fn readv(
    e: *mut fid_ep,
    iov: *const iovec,
    _desc: *mut *mut c_void,
    count: usize,
    src: fi_addr_t,
    addr: u64,
    key: u64,
    ctx: *mut c_void,
) -> isize {
    abi_guard!("readv", -FI_EOTHER as isize, || {
        // SAFETY: `iov` holds `count` iovecs whose buffers stay writable until completion (fi_rma(3)).
        let local = unsafe { iov_of(iov, count) };
        let len = local.as_ref().map_or(0, |l| l.total_len());
        // SAFETY: `e` is an endpoint fid or NULL.
        unsafe {
            do_rma(
                e,
                RmaDir::Read,
                local,
                Some(remote(addr, len, key)),
                src,
                None,
                ctx,
                None,
                false,
            )
        }
    })
}

/// fi_readmsg and fi_writemsg.
///
/// # Safety
/// `m` must be NULL or the application's `fi_msg_rma`, its iov arrays as
/// it says, their buffers valid until completion (fi_rma(3)).
unsafe fn do_msg(e: *mut fid_ep, dir: RmaDir, m: *const fi_msg_rma, flags: u64) -> isize {
    // SAFETY: the caller's contract.
    let Some(m) = (unsafe { m.as_ref() }) else {
        crate::warn!(FI_LOG_EP_DATA, "NULL message descriptor");
        return -FI_EINVAL as isize;
    };
    let data = (flags & FI_REMOTE_CQ_DATA != 0 && dir == RmaDir::Write).then_some(m.data);
    // SAFETY: the caller's contract: the descriptor's arrays are as it says.
    let (local, rem) = unsafe { (iov_of(m.msg_iov, m.iov_count), remotes(m.rma_iov, m.rma_iov_count)) };
    // FI_INJECT here only lets the buffer go at once: the completion is
    // written as for any operation.
    // SAFETY: `e` is an endpoint fid or NULL.
    unsafe { do_rma(e, dir, local, rem, m.addr, data, m.context, Some(flags), false) }
}

unsafe extern "C" fn readmsg(e: *mut fid_ep, m: *const fi_msg_rma, flags: u64) -> isize {
    abi_guard!("readmsg", -FI_EOTHER as isize, || {
        // SAFETY: `m` is NULL or the application's descriptor (fi_rma(3)).
        unsafe { do_msg(e, RmaDir::Read, m, flags) }
    })
}

unsafe extern "C" fn write(
    e: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    ctx: *mut c_void,
) -> isize {
    abi_guard!("write", -FI_EOTHER as isize, || {
        // SAFETY: `e` is an endpoint fid or NULL; `buf` stays readable until completion (fi_rma(3)).
        let local = unsafe { one(buf, len) };
        // SAFETY: as above.
        unsafe {
            do_rma(
                e,
                RmaDir::Write,
                Some(local),
                Some(remote(addr, len, key)),
                dest,
                None,
                ctx,
                None,
                false,
            )
        }
    })
}

unsafe extern "C" fn writev(
    e: *mut fid_ep,
    iov: *const iovec,
    _desc: *mut *mut c_void,
    count: usize,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    ctx: *mut c_void,
) -> isize {
    abi_guard!("writev", -FI_EOTHER as isize, || {
        // SAFETY: `iov` holds `count` iovecs whose buffers stay readable until completion (fi_rma(3)).
        let local = unsafe { iov_of(iov, count) };
        let len = local.as_ref().map_or(0, |l| l.total_len());
        // SAFETY: `e` is an endpoint fid or NULL.
        unsafe {
            do_rma(
                e,
                RmaDir::Write,
                local,
                Some(remote(addr, len, key)),
                dest,
                None,
                ctx,
                None,
                false,
            )
        }
    })
}

unsafe extern "C" fn writemsg(e: *mut fid_ep, m: *const fi_msg_rma, flags: u64) -> isize {
    abi_guard!("writemsg", -FI_EOTHER as isize, || {
        // SAFETY: `m` is NULL or the application's descriptor (fi_rma(3)).
        unsafe { do_msg(e, RmaDir::Write, m, flags) }
    })
}

unsafe extern "C" fn writedata(
    e: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    data: u64,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    ctx: *mut c_void,
) -> isize {
    abi_guard!("writedata", -FI_EOTHER as isize, || {
        // SAFETY: `e` is an endpoint fid or NULL; `buf` stays readable until completion (fi_rma(3)).
        let local = unsafe { one(buf, len) };
        // SAFETY: as above.
        unsafe {
            do_rma(
                e,
                RmaDir::Write,
                Some(local),
                Some(remote(addr, len, key)),
                dest,
                Some(data),
                ctx,
                None,
                false,
            )
        }
    })
}

/// fi_inject_write and fi_inject_writedata: the op flags do not apply, no
/// completion entry is written (fi_rma(3)).
///
/// # Safety
/// `e` must be NULL or a readable fid, and `buf` hold `len` readable bytes
/// for the duration of the call.
unsafe fn do_inject(
    e: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    data: Option<u64>,
    dest: u64,
    r: Vec<RemoteMem>,
) -> isize {
    // SAFETY: our contract: `buf` holds `len` bytes for this call, as long as
    // an inject holds them (the wire copies them before `rma` returns).
    let local = unsafe { one(buf, len) };
    // SAFETY: `e` is an endpoint fid or NULL.
    unsafe {
        do_rma(
            e,
            RmaDir::Write,
            Some(local),
            Some(r),
            dest,
            data,
            std::ptr::null_mut(),
            Some(FI_INJECT),
            true,
        )
    }
}

unsafe extern "C" fn inject(
    e: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
) -> isize {
    abi_guard!("inject", -FI_EOTHER as isize, || {
        // SAFETY: `e` is an endpoint fid or NULL; `buf` holds `len` bytes for this call (fi_rma(3)).
        unsafe { do_inject(e, buf, len, None, dest, remote(addr, len, key)) }
    })
}

unsafe extern "C" fn injectdata(
    e: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
) -> isize {
    abi_guard!("injectdata", -FI_EOTHER as isize, || {
        // SAFETY: `e` is an endpoint fid or NULL; `buf` holds `len` bytes for this call (fi_rma(3)).
        unsafe { do_inject(e, buf, len, Some(data), dest, remote(addr, len, key)) }
    })
}

pub(super) static RMA_OPS: Table<fi_ops_rma> = Table(fi_ops_rma {
    size: std::mem::size_of::<fi_ops_rma>(),
    read: Some(read),
    readv: Some(readv),
    readmsg: Some(readmsg),
    write: Some(write),
    writev: Some(writev),
    writemsg: Some(writemsg),
    inject: Some(inject),
    writedata: Some(writedata),
    injectdata: Some(injectdata),
});
