//! The data path's `extern "C"` shims (`fi_ops_msg`, `fi_ops_tagged`):
//! each converts its arguments and calls the safe transmit (`tx.rs`) or
//! receive (`rx.rs`) path. No protocol logic lives here.

use super::from_fid;
use super::rx::RecvArgs;
use super::tx::SendArgs;
use crate::ffi::*;
use crate::fid::Table;
use crate::nic::iov::Iov;
use std::ffi::c_void;

/// The application's iovec array as an `Iov` (None: NULL with a count).
///
/// # Safety
/// `iov` must be NULL or point to `count` readable iovecs, and the buffers
/// they name must meet `Iov::from_raw`'s contract: libfabric's, that they
/// stay valid (readable for a send, writable and untouched for a receive)
/// until the operation's completion (fi_msg(3), fi_tagged(3)).
pub(super) unsafe fn iov_of(iov: *const iovec, count: usize) -> Option<Iov> {
    // SAFETY: the caller's contract: `iov` is NULL or holds `count` iovecs.
    let iov = unsafe { crate::abi::app_array(iov, count) }?;
    // SAFETY: the caller's contract: the application keeps these buffers
    // valid until the operation completes (fi_msg(3), fi_tagged(3)).
    Some(unsafe { Iov::from_raw(iov.iter().map(|v| (v.iov_base as usize, v.iov_len))) })
}

/// `len` bytes at `buf` as an `Iov` (empty when `len` is 0).
///
/// # Safety
/// As for `iov_of`: `buf` holds `len` bytes that stay valid until the
/// operation's completion (fi_msg(3), fi_tagged(3)); for an inject, until
/// the call returns (the data is copied or sent by then).
pub(super) unsafe fn one(buf: *const c_void, len: usize) -> Iov {
    if len == 0 {
        Iov::empty()
    } else {
        // SAFETY: the caller's contract: the application's buffer, valid
        // until the operation completes (fi_msg(3), fi_tagged(3)).
        unsafe { Iov::from_raw_parts(buf as usize, len) }
    }
}

macro_rules! ep_or_inval {
    ($e:expr) => {
        // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
        match unsafe { from_fid($e as *const c_void) } {
            Some(ep) => ep,
            None => return -FI_EINVAL as isize,
        }
    };
}

/// A send of `iov` on the endpoint behind `e`.
///
/// # Safety
/// `e` must be NULL or a readable fid. (The buffers' contract travels
/// with the `Iov`: whoever made it vouched for them.)
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn do_send(
    e: *mut fid_ep,
    iov: Option<Iov>,
    dest: u64,
    tag: u64,
    data: Option<u64>,
    ctx: *mut c_void,
    flags: Option<u64>,
    tagged: bool,
) -> isize {
    let ep = ep_or_inval!(e);
    let Some(iov) = iov else {
        crate::warn!(FI_LOG_EP_DATA, "send: NULL iov with a non-zero count");
        return -FI_EINVAL as isize;
    };
    let flags = flags.unwrap_or_else(|| ep.flags_at(e, true));
    // Most small sends, by the short way (`Ep::send_small`, which leaves
    // the rest, and any error, to `send`).
    if flags & FI_TRIGGER == 0 {
        if let Some(r) = ep.send_small(&iov, dest, tag, data, ctx as usize, flags, tagged, false) {
            return r;
        }
    }
    let a = SendArgs {
        iov,
        dest,
        tag,
        data,
        ctx: ctx as usize,
        flags: flags & !FI_TRIGGER,
        tagged,
        silent: false,
    };
    if flags & FI_TRIGGER != 0 {
        // SAFETY: FI_TRIGGER: `ctx` is the application's fi_triggered_context (fi_trigger(3)).
        let t = unsafe { crate::trigger::threshold_of(ctx as usize) };
        return super::deferred::defer(ep, t, super::deferred::Op::Send(a));
    }
    ep.send(a)
}

/// fi_inject, fi_injectdata, fi_tinject, fi_tinjectdata: the op flags do
/// not apply (fi_msg(3)), and no completion is written.
///
/// # Safety
/// `e` must be NULL or a readable fid, and `buf` hold `len` readable bytes
/// for the duration of the call.
unsafe fn do_inject(
    e: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    dest: u64,
    tag: Option<u64>,
    data: Option<u64>,
) -> isize {
    let ep = ep_or_inval!(e);
    let data_flag = if data.is_some() { FI_REMOTE_CQ_DATA } else { 0 };
    // SAFETY: our contract: `buf` holds `len` bytes for this call,
    // which is as long as an inject holds them (fi_msg(3)).
    let iov = unsafe { one(buf, len) };
    let flags = FI_INJECT | data_flag;
    if let Some(r) = ep.send_small(&iov, dest, tag.unwrap_or(0), data, 0, flags, tag.is_some(), true) {
        return r;
    }
    ep.send(SendArgs {
        iov,
        dest,
        tag: tag.unwrap_or(0),
        data,
        ctx: 0,
        flags,
        tagged: tag.is_some(),
        silent: true,
    })
}

/// A receive into `iov` on the endpoint behind `e`.
///
/// # Safety
/// `e` must be NULL or a readable fid. (The buffers' contract travels
/// with the `Iov`: whoever made it vouched for them.)
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn do_recv(
    e: *mut fid_ep,
    iov: Option<Iov>,
    src: u64,
    tag: u64,
    ignore: u64,
    ctx: *mut c_void,
    flags: Option<u64>,
    tagged: bool,
) -> isize {
    let ep = ep_or_inval!(e);
    let Some(iov) = iov else {
        crate::warn!(FI_LOG_EP_DATA, "recv: NULL iov with a non-zero count");
        return -FI_EINVAL as isize;
    };
    let flags = flags.unwrap_or_else(|| ep.flags_at(e, false));
    let iov = match ep.recv_one(iov, src, tag, ignore, ctx as usize, flags, tagged) {
        Ok(r) => return r,
        Err(iov) => iov,
    };
    let a = RecvArgs {
        iov,
        src,
        tag,
        ignore,
        ctx: ctx as usize,
        flags: flags & !FI_TRIGGER,
        tagged,
    };
    if flags & FI_TRIGGER != 0 {
        // SAFETY: FI_TRIGGER: `ctx` is the application's fi_triggered_context (fi_trigger(3)).
        let t = unsafe { crate::trigger::threshold_of(ctx as usize) };
        return super::deferred::defer(ep, t, super::deferred::Op::Recv(a));
    }
    ep.recv(a)
}

unsafe extern "C" fn msg_send(
    e: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _d: *mut c_void,
    dest: u64,
    ctx: *mut c_void,
) -> isize {
    abi_guard!("msg_send", -FI_EOTHER as isize, || {
        // SAFETY: `e` is an endpoint fid or NULL; the buffers stay readable until completion (fi_msg(3)).
        unsafe { do_send(e, Some(one(buf, len)), dest, 0, None, ctx, None, false) }
    })
}
unsafe extern "C" fn msg_sendv(
    e: *mut fid_ep,
    iov: *const iovec,
    _d: *mut *mut c_void,
    count: usize,
    dest: u64,
    ctx: *mut c_void,
) -> isize {
    abi_guard!("msg_sendv", -FI_EOTHER as isize, || {
        // SAFETY: `e` is an endpoint fid or NULL; the buffers stay readable until completion (fi_msg(3)).
        unsafe { do_send(e, iov_of(iov, count), dest, 0, None, ctx, None, false) }
    })
}
unsafe extern "C" fn msg_sendmsg(e: *mut fid_ep, m: *const fi_msg, flags: u64) -> isize {
    abi_guard!("msg_sendmsg", -FI_EOTHER as isize, || {
        // SAFETY: `m` is NULL or the application's message descriptor.
        let Some(m) = (unsafe { m.as_ref() }) else {
            crate::warn!(FI_LOG_EP_DATA, "NULL message descriptor");
            return -FI_EINVAL as isize;
        };
        let data = (flags & FI_REMOTE_CQ_DATA != 0).then_some(m.data);
        // SAFETY: `e` is an endpoint fid or NULL; the buffers stay readable until completion (fi_msg(3)).
        unsafe {
            do_send(
                e,
                iov_of(m.msg_iov, m.iov_count),
                m.addr,
                0,
                data,
                m.context,
                Some(flags),
                false,
            )
        }
    })
}
unsafe extern "C" fn msg_inject(e: *mut fid_ep, buf: *const c_void, len: usize, dest: u64) -> isize {
    abi_guard!("msg_inject", -FI_EOTHER as isize, || {
        // SAFETY: `e` is an endpoint fid or NULL; `buf` holds `len` bytes for the call (fi_inject(3)).
        unsafe { do_inject(e, buf, len, dest, None, None) }
    })
}
unsafe extern "C" fn msg_senddata(
    e: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _d: *mut c_void,
    data: u64,
    dest: u64,
    ctx: *mut c_void,
) -> isize {
    abi_guard!("msg_senddata", -FI_EOTHER as isize, || {
        // SAFETY: `e` is an endpoint fid or NULL; the buffers stay readable until completion (fi_msg(3)).
        unsafe { do_send(e, Some(one(buf, len)), dest, 0, Some(data), ctx, None, false) }
    })
}
unsafe extern "C" fn msg_injectdata(e: *mut fid_ep, buf: *const c_void, len: usize, data: u64, dest: u64) -> isize {
    abi_guard!("msg_injectdata", -FI_EOTHER as isize, || {
        // SAFETY: `e` is an endpoint fid or NULL; `buf` holds `len` bytes for the call (fi_inject(3)).
        unsafe { do_inject(e, buf, len, dest, None, Some(data)) }
    })
}
unsafe extern "C" fn msg_recv(
    e: *mut fid_ep,
    buf: *mut c_void,
    len: usize,
    _d: *mut c_void,
    src: u64,
    ctx: *mut c_void,
) -> isize {
    abi_guard!("msg_recv", -FI_EOTHER as isize, || {
        // SAFETY: `e` is an endpoint fid or NULL; the buffers stay writable until completion (fi_msg(3)).
        unsafe { do_recv(e, Some(one(buf, len)), src, 0, 0, ctx, None, false) }
    })
}
unsafe extern "C" fn msg_recvv(
    e: *mut fid_ep,
    iov: *const iovec,
    _d: *mut *mut c_void,
    count: usize,
    src: u64,
    ctx: *mut c_void,
) -> isize {
    abi_guard!("msg_recvv", -FI_EOTHER as isize, || {
        // SAFETY: `e` is an endpoint fid or NULL; the buffers stay writable until completion (fi_msg(3)).
        unsafe { do_recv(e, iov_of(iov, count), src, 0, 0, ctx, None, false) }
    })
}
unsafe extern "C" fn msg_recvmsg(e: *mut fid_ep, m: *const fi_msg, flags: u64) -> isize {
    abi_guard!("msg_recvmsg", -FI_EOTHER as isize, || {
        // SAFETY: `m` is NULL or the application's message descriptor.
        let Some(m) = (unsafe { m.as_ref() }) else {
            crate::warn!(FI_LOG_EP_DATA, "NULL message descriptor");
            return -FI_EINVAL as isize;
        };
        // SAFETY: `e` is an endpoint fid or NULL; the buffers stay writable until completion (fi_msg(3)).
        unsafe {
            do_recv(
                e,
                iov_of(m.msg_iov, m.iov_count),
                m.addr,
                0,
                0,
                m.context,
                Some(flags),
                false,
            )
        }
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn tag_send(
    e: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _d: *mut c_void,
    dest: u64,
    tag: u64,
    ctx: *mut c_void,
) -> isize {
    abi_guard!("tag_send", -FI_EOTHER as isize, || {
        // SAFETY: `e` is an endpoint fid or NULL; the buffers stay readable until completion (fi_tagged(3)).
        unsafe { do_send(e, Some(one(buf, len)), dest, tag, None, ctx, None, true) }
    })
}
#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn tag_sendv(
    e: *mut fid_ep,
    iov: *const iovec,
    _d: *mut *mut c_void,
    count: usize,
    dest: u64,
    tag: u64,
    ctx: *mut c_void,
) -> isize {
    abi_guard!("tag_sendv", -FI_EOTHER as isize, || {
        // SAFETY: `e` is an endpoint fid or NULL; the buffers stay readable until completion (fi_tagged(3)).
        unsafe { do_send(e, iov_of(iov, count), dest, tag, None, ctx, None, true) }
    })
}
unsafe extern "C" fn tag_sendmsg(e: *mut fid_ep, m: *const fi_msg_tagged, flags: u64) -> isize {
    abi_guard!("tag_sendmsg", -FI_EOTHER as isize, || {
        // SAFETY: `m` is NULL or the application's message descriptor.
        let Some(m) = (unsafe { m.as_ref() }) else {
            crate::warn!(FI_LOG_EP_DATA, "NULL message descriptor");
            return -FI_EINVAL as isize;
        };
        let data = (flags & FI_REMOTE_CQ_DATA != 0).then_some(m.data);
        // SAFETY: `e` is an endpoint fid or NULL; the buffers stay readable until completion (fi_tagged(3)).
        unsafe {
            do_send(
                e,
                iov_of(m.msg_iov, m.iov_count),
                m.addr,
                m.tag,
                data,
                m.context,
                Some(flags),
                true,
            )
        }
    })
}
unsafe extern "C" fn tag_inject(e: *mut fid_ep, buf: *const c_void, len: usize, dest: u64, tag: u64) -> isize {
    abi_guard!("tag_inject", -FI_EOTHER as isize, || {
        // SAFETY: `e` is an endpoint fid or NULL; `buf` holds `len` bytes for the call (fi_inject(3)).
        unsafe { do_inject(e, buf, len, dest, Some(tag), None) }
    })
}
#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn tag_senddata(
    e: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _d: *mut c_void,
    data: u64,
    dest: u64,
    tag: u64,
    ctx: *mut c_void,
) -> isize {
    abi_guard!("tag_senddata", -FI_EOTHER as isize, || {
        // SAFETY: `e` is an endpoint fid or NULL; the buffers stay readable until completion (fi_tagged(3)).
        unsafe { do_send(e, Some(one(buf, len)), dest, tag, Some(data), ctx, None, true) }
    })
}
unsafe extern "C" fn tag_injectdata(
    e: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest: u64,
    tag: u64,
) -> isize {
    abi_guard!("tag_injectdata", -FI_EOTHER as isize, || {
        // SAFETY: `e` is an endpoint fid or NULL; `buf` holds `len` bytes for the call (fi_inject(3)).
        unsafe { do_inject(e, buf, len, dest, Some(tag), Some(data)) }
    })
}
#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn tag_recv(
    e: *mut fid_ep,
    buf: *mut c_void,
    len: usize,
    _d: *mut c_void,
    src: u64,
    tag: u64,
    ignore: u64,
    ctx: *mut c_void,
) -> isize {
    abi_guard!("tag_recv", -FI_EOTHER as isize, || {
        // SAFETY: `e` is an endpoint fid or NULL; the buffers stay writable until completion (fi_tagged(3)).
        unsafe { do_recv(e, Some(one(buf, len)), src, tag, ignore, ctx, None, true) }
    })
}
#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn tag_recvv(
    e: *mut fid_ep,
    iov: *const iovec,
    _d: *mut *mut c_void,
    count: usize,
    src: u64,
    tag: u64,
    ignore: u64,
    ctx: *mut c_void,
) -> isize {
    abi_guard!("tag_recvv", -FI_EOTHER as isize, || {
        // SAFETY: `e` is an endpoint fid or NULL; the buffers stay writable until completion (fi_tagged(3)).
        unsafe { do_recv(e, iov_of(iov, count), src, tag, ignore, ctx, None, true) }
    })
}
unsafe extern "C" fn tag_recvmsg(e: *mut fid_ep, m: *const fi_msg_tagged, flags: u64) -> isize {
    abi_guard!("tag_recvmsg", -FI_EOTHER as isize, || {
        // SAFETY: `m` is NULL or the application's message descriptor.
        let Some(m) = (unsafe { m.as_ref() }) else {
            crate::warn!(FI_LOG_EP_DATA, "NULL message descriptor");
            return -FI_EINVAL as isize;
        };
        // SAFETY: `e` is an endpoint fid or NULL; the buffers stay writable until completion (fi_tagged(3)).
        unsafe {
            do_recv(
                e,
                iov_of(m.msg_iov, m.iov_count),
                m.addr,
                m.tag,
                m.ignore,
                m.context,
                Some(flags),
                true,
            )
        }
    })
}

pub(super) static MSG_OPS: Table<fi_ops_msg> = Table(fi_ops_msg {
    size: std::mem::size_of::<fi_ops_msg>(),
    recv: Some(msg_recv),
    recvv: Some(msg_recvv),
    recvmsg: Some(msg_recvmsg),
    send: Some(msg_send),
    sendv: Some(msg_sendv),
    sendmsg: Some(msg_sendmsg),
    inject: Some(msg_inject),
    senddata: Some(msg_senddata),
    injectdata: Some(msg_injectdata),
});
pub(super) static TAGGED_OPS: Table<fi_ops_tagged> = Table(fi_ops_tagged {
    size: std::mem::size_of::<fi_ops_tagged>(),
    recv: Some(tag_recv),
    recvv: Some(tag_recvv),
    recvmsg: Some(tag_recvmsg),
    send: Some(tag_send),
    sendv: Some(tag_sendv),
    sendmsg: Some(tag_sendmsg),
    inject: Some(tag_inject),
    senddata: Some(tag_senddata),
    injectdata: Some(tag_injectdata),
});
