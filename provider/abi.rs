//! The panic policy at the C ABI: no panic crosses `extern "C"`.
//!
//! A Rust panic that reaches an `extern "C"` frame aborts the process,
//! which would take the application down for what is a bug in gnix. Every
//! entry point the application (or the libfabric core) calls runs its body
//! under `guard`: a panic is caught at the boundary, logged as an FI_WARN
//! line, and the call fails with the entry point's error value instead.
//!
//! The release profile keeps `panic = "unwind"` for this reason (Cargo.toml):
//! with `panic = "abort"` there would be nothing to catch.

use crate::ffi::*;
use std::any::Any;
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// `abi_guard!("name", default, || body)`: `guard` with the entry point
/// named after the calling module (`gnix_fi::cq::cq_readfrom`), so the
/// warning says where the panic was caught.
macro_rules! abi_guard {
    ($name:expr, $default:expr, $f:expr $(,)?) => {
        $crate::abi::guard(concat!(module_path!(), "::", $name), $default, $f)
    };
}

/// Runs `f`; if it panics, logs `what` with the panic message and returns
/// `default` (`-FI_EOTHER` for int and ssize_t entry points, NULL for
/// pointers).
///
/// `AssertUnwindSafe` is sound here in the sense that matters: state a
/// panic leaves half-updated is behind `Mutex`es, which are poisoned, so a
/// later call that touches it fails (and is caught here again) instead of
/// reading a broken invariant.
///
/// Inlined into every shim (the data calls' shims among them, where an
/// outlined guard costs a call and 80 instructions a message); the
/// report of a panic is out of line.
#[inline(always)]
pub(crate) fn guard<R>(what: &str, default: R, f: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => {
            caught(what, payload);
            default
        }
    }
}

#[cold]
#[inline(never)]
fn caught(what: &str, payload: Box<dyn Any + Send>) {
    crate::warn!(
        FI_LOG_CORE,
        "{}: internal error (panic: {}); the call fails",
        what,
        panic_message(&*payload)
    );
}

/// The text of a `panic!` payload (a `&str` or a `String`), if it has one.
fn panic_message(payload: &(dyn Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        "no message"
    }
}

/// An array the application passes as a pointer and a count (iovecs,
/// fi_rma_iov, fi_ioc, ...): empty for a count of 0, whatever the pointer;
/// None for NULL with a count (the caller answers -FI_EINVAL).
///
/// # Safety
/// `p` must be NULL or point to `count` readable, initialised `T`s, left
/// unchanged for `'a` (the call that passed them, in libfabric's API).
pub(crate) unsafe fn app_array<'a, T>(p: *const T, count: usize) -> Option<&'a [T]> {
    if count == 0 {
        return Some(&[]);
    }
    if p.is_null() {
        return None;
    }
    // SAFETY: the caller's contract: `p` (non-NULL) holds `count` `T`s.
    Some(unsafe { std::slice::from_raw_parts(p, count) })
}

/// The buffer an fi_cq_err_entry or fi_eq_err_entry offers for error
/// data (`err_data`, `err_data_size`): None when it offers none (a size
/// of 0 or a NULL pointer; the provider's own buffer is then lent).
///
/// # Safety
/// With a nonzero `size` and a non-NULL `p`, `p` must be the
/// application's writable buffer of `size` bytes, left to us for `'a`
/// (fi_cq(3), fi_eq(3): the readerr call).
pub(crate) unsafe fn app_err_data<'a>(p: *mut c_void, size: usize) -> Option<&'a mut [u8]> {
    (size > 0 && !p.is_null())
        // SAFETY: the caller's contract: `p` (non-NULL) is a writable buffer of `size` bytes.
        .then(|| unsafe { std::slice::from_raw_parts_mut(p as *mut u8, size) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_data_is_offered_only_with_a_buffer_and_a_size() {
        let mut mine = [0u8; 4];
        let p = mine.as_mut_ptr() as *mut c_void;
        // SAFETY: NULL or size 0 is never dereferenced; `mine` holds 4 bytes.
        unsafe {
            assert!(app_err_data(std::ptr::null_mut(), 4).is_none());
            assert!(app_err_data(p, 0).is_none());
            let b = app_err_data(p, 4).expect("a buffer of 4");
            assert_eq!((b.as_ptr(), b.len()), (p as *const u8, 4));
        }
    }

    #[test]
    fn a_panic_becomes_the_default() {
        let r = guard("test_panics", -FI_EOTHER, || -> i32 { panic!("boom") });
        assert_eq!(r, -FI_EOTHER);
        let p = guard("test_panics_ptr", std::ptr::null::<u8>(), || {
            panic!("{}", String::from("boom"))
        });
        assert!(p.is_null());
    }

    #[test]
    fn a_return_passes_through() {
        assert_eq!(guard("test_returns", -FI_EOTHER as isize, || 7isize), 7);
        assert_eq!(guard("test_returns", -FI_EOTHER, || -FI_EAGAIN), -FI_EAGAIN);
    }

    #[test]
    fn the_message_is_recovered() {
        let p = catch_unwind(|| panic!("static text")).unwrap_err();
        assert_eq!(panic_message(&*p), "static text");
        let p = catch_unwind(|| panic!("formatted {}", 3)).unwrap_err();
        assert_eq!(panic_message(&*p), "formatted 3");
    }
}
