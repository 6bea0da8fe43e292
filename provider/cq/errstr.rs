//! Error strings: what fi_cq_strerror and fi_eq_strerror say for a
//! positive FI_E* code (gnix's prov_errno values are those too).

use crate::ffi::*;
use std::ffi::{c_char, CStr};

/// Text for a positive FI_E* code (gnix's prov_errno values are those too).
fn describe(code: i32) -> &'static CStr {
    match code.unsigned_abs() as i32 {
        0 => c"success",
        FI_EPERM => c"operation not permitted",
        FI_ENOENT => c"no such entry",
        FI_EINTR => c"interrupted",
        FI_EIO => c"I/O error",
        FI_E2BIG => c"argument list too long",
        FI_EBADF => c"bad file descriptor",
        FI_EAGAIN => c"resource temporarily unavailable",
        FI_ENOMEM => c"out of memory",
        FI_EACCES => c"permission denied (memory key, bounds or access rights)",
        FI_EFAULT => c"bad address",
        FI_EBUSY => c"resource busy",
        FI_ENODEV => c"no such device",
        FI_EINVAL => c"invalid argument",
        FI_EMFILE => c"too many open files",
        FI_ENOSPC => c"no space left",
        FI_ENOSYS => c"not implemented",
        FI_ENOMSG => c"no message",
        FI_ENODATA => c"no data available",
        FI_EOVERFLOW => c"value too large",
        FI_EMSGSIZE => c"message too long",
        FI_ENOPROTOOPT => c"protocol not available",
        FI_EOPNOTSUPP => c"operation not supported",
        FI_EADDRINUSE => c"address already in use",
        FI_EADDRNOTAVAIL => c"source address not in the address vector",
        FI_ENETDOWN => c"network is down",
        FI_ENETUNREACH => c"network unreachable",
        FI_ECONNABORTED => c"connection aborted",
        FI_ECONNRESET => c"connection reset by peer",
        FI_ENOBUFS => c"no buffer space",
        FI_EISCONN => c"already connected",
        FI_ENOTCONN => c"not connected",
        FI_ESHUTDOWN => c"peer shut down",
        FI_ETIMEDOUT => c"peer did not answer (retransmission limit or timeout)",
        FI_ECONNREFUSED => c"connection refused",
        FI_EHOSTDOWN => c"host is down",
        FI_EHOSTUNREACH => c"host unreachable",
        FI_EALREADY => c"operation already in progress",
        FI_EINPROGRESS => c"operation in progress",
        FI_EREMOTEIO => c"remote I/O error",
        FI_ECANCELED => c"operation canceled",
        FI_EKEYREJECTED => c"memory key rejected by the target",
        FI_EOTHER => c"unspecified error",
        FI_ETOOSMALL => c"provided buffer too small",
        FI_EOPBADSTATE => c"operation not permitted in the current state",
        FI_EAVAIL => c"error available",
        FI_EBADFLAGS => c"flags not supported",
        FI_ENOEQ => c"missing or unavailable event queue",
        FI_EDOMAIN => c"invalid resource domain",
        FI_ENOCQ => c"missing or unavailable completion queue",
        FI_ECRC => c"CRC error",
        FI_ETRUNC => c"message truncated (receive buffer too small)",
        FI_ENOKEY => c"required key not available",
        FI_ENOAV => c"missing or unavailable address vector",
        FI_EOVERRUN => c"queue overrun",
        FI_ENORX => c"receiver not ready, no receive buffers",
        _ => c"unknown gnix error",
    }
}

/// fi_cq_strerror / fi_eq_strerror: a static string, also copied into
/// `buf` when the application supplies one.
///
/// # Safety
/// `buf` must be NULL or writable for `len` bytes.
pub(crate) unsafe fn strerror(prov_errno: i32, buf: *mut c_char, len: usize) -> *const c_char {
    let s = describe(prov_errno);
    if buf.is_null() || len == 0 {
        return s.as_ptr();
    }
    let text = format!("gnix: {} (prov_errno {})", s.to_string_lossy(), prov_errno);
    let n = text.len().min(len - 1);
    // SAFETY: the caller guarantees `len` writable bytes; we write n + 1 <= len.
    unsafe { std::ptr::copy_nonoverlapping(text.as_ptr(), buf as *mut u8, n) };
    unsafe { *buf.add(n) = 0 };
    buf
}
