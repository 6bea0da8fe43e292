//! How a Rust object becomes a libfabric `fid`.
//!
//! Every object handed to the application is a `FidObj<C, T>`: the C struct
//! the API exposes (`fid_cq`, `fid_ep`, ...) first, so the pointer the
//! application holds is also a pointer to the `FidObj`, followed by an
//! `Arc<T>` with the Rust state. Internal references (an endpoint's CQ, a
//! CQ's endpoints) are `Arc`/`Weak` clones of that state, so closing the fid
//! frees the C part at once and the state when its last user lets go.

use crate::ffi::*;
use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Guards against a wrong or freed fid: checked before every cast.
const MAGIC: u64 = 0x676e_6978_6669_6421; // "gnixfid!"

#[repr(C)]
pub struct FidObj<C, T> {
    pub c: C,
    magic: u64,
    pub obj: Arc<T>,
}

/// Implemented by each C struct that starts with a `struct fid`.
///
/// # Safety
/// `Self` must be `#[repr(C)]` with a `fid` as its first field.
pub unsafe trait HasFid {}
macro_rules! has_fid {
    ($($t:ty),*) => {$(
        // SAFETY: every libfabric fid_* struct begins with `struct fid fid`.
        unsafe impl HasFid for $t {}
    )*};
}
has_fid!(
    fid_fabric, fid_domain, fid_ep, fid_cq, fid_cntr, fid_eq, fid_av, fid_mr, fid_wait, fid_poll, fid_pep, fid_av_set,
    fid_mc
);

impl<C: HasFid, T> FidObj<C, T> {
    /// Leaks a new object; the caller hands `*mut C` to the application and
    /// reclaims it with `destroy` on close.
    pub fn create(c: C, obj: Arc<T>) -> *mut C {
        let b = Box::new(FidObj { c, magic: MAGIC, obj });
        Box::into_raw(b) as *mut C
    }

    /// Borrows the state behind an application-supplied pointer, after
    /// checking class and magic.
    ///
    /// # Safety
    /// `p` must be NULL or point to readable memory of at least a `fid`.
    pub unsafe fn get<'a>(p: *const c_void, class: u32) -> Option<&'a Arc<T>> {
        if p.is_null() {
            return None;
        }
        // SAFETY: the caller guarantees `p` points to at least a `fid`.
        let f = unsafe { &*(p as *const fid) };
        if f.fclass != class as usize {
            return None;
        }
        // SAFETY: a fid of our class was made by `create` of this type (the
        // magic then confirms it is not freed or foreign), so `p` points to a
        // whole `FidObj<C, T>`.
        let o = unsafe { &*(p as *const FidObj<C, T>) };
        (o.magic == MAGIC).then_some(&o.obj)
    }

    /// # Safety
    /// `p` must come from `create` of this type and not be used afterwards.
    pub unsafe fn destroy(p: *mut c_void) {
        // SAFETY: `p` came from `Box::into_raw` in `create` (caller's contract).
        let mut b = unsafe { Box::from_raw(p as *mut FidObj<C, T>) };
        b.magic = 0;
        drop(b);
    }
}

/// A zeroed C struct whose `fid` is filled in.
pub fn fid_header(class: u32, context: *mut c_void, ops: *const fi_ops) -> fid {
    fid {
        fclass: class as usize,
        context,
        ops: ops as *mut fi_ops,
    }
}

/// `fi_close` of an object that stays open while children hold its `Refs`:
/// -FI_EBUSY with a warning naming `children`, or the object is destroyed.
///
/// # Safety
/// `f` must be NULL or point to readable memory of at least a `fid`; if it
/// is a `FidObj<C, T>`, the application must not use it after success.
pub unsafe fn close_unless_busy<C: HasFid, T: AsRef<Refs>>(
    f: *mut fid,
    class: u32,
    subsys: fi_log_subsys,
    children: &str,
) -> i32 {
    // SAFETY: `f` is NULL or a readable fid (caller's contract).
    let Some(o) = (unsafe { FidObj::<C, T>::get(f as *const c_void, class) }) else {
        return -FI_EINVAL;
    };
    if (**o).as_ref().busy() {
        crate::warn!(subsys, "fi_close: {} still open or bound", children);
        return -FI_EBUSY;
    }
    // SAFETY: `get` found a live `FidObj<C, T>`, and the application gives
    // it up by closing it.
    unsafe { FidObj::<C, T>::destroy(f as *mut c_void) };
    0
}

/// Open children of an object: closing a parent with live children is
/// `-FI_EBUSY` (fi_close(3)).
#[derive(Default)]
pub struct Refs(AtomicUsize);
impl Refs {
    pub fn get(&self) {
        self.0.fetch_add(1, Ordering::AcqRel);
    }
    pub fn put(&self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
    pub fn busy(&self) -> bool {
        self.0.load(Ordering::Acquire) != 0
    }
}

/// A child's hold on its parent's `Refs`, released when the child's state
/// is dropped.
pub struct ParentRef<P: AsRef<Refs>>(pub Arc<P>);
impl<P: AsRef<Refs>> ParentRef<P> {
    pub fn new(p: &Arc<P>) -> Self {
        p.as_ref().as_ref().get();
        ParentRef(p.clone())
    }
}
impl<P: AsRef<Refs>> Drop for ParentRef<P> {
    fn drop(&mut self) {
        self.0.as_ref().as_ref().put();
    }
}
impl<P: AsRef<Refs>> std::ops::Deref for ParentRef<P> {
    type Target = Arc<P>;
    fn deref(&self) -> &Arc<P> {
        &self.0
    }
}

/// Fallback for ops table slots we do not implement.
pub mod nosys {
    use super::*;
    pub unsafe extern "C" fn bind(_: *mut fid, _: *mut fid, _: u64) -> i32 {
        -FI_ENOSYS
    }
    pub unsafe extern "C" fn control(_: *mut fid, _: i32, _: *mut c_void) -> i32 {
        -FI_ENOSYS
    }
    pub unsafe extern "C" fn ops_open(
        _: *mut fid,
        _: *const std::ffi::c_char,
        _: u64,
        _: *mut *mut c_void,
        _: *mut c_void,
    ) -> i32 {
        -FI_ENOSYS
    }
    pub unsafe extern "C" fn tostr(_: *const fid, _: *mut std::ffi::c_char, _: usize) -> i32 {
        -FI_ENOSYS
    }
    pub unsafe extern "C" fn ops_set(
        _: *mut fid,
        _: *const std::ffi::c_char,
        _: u64,
        _: *mut c_void,
        _: *mut c_void,
    ) -> i32 {
        -FI_ENOSYS
    }
}

/// An `fi_ops` table with only `close` (and optionally bind/control).
pub const fn base_ops(
    close: unsafe extern "C" fn(*mut fid) -> i32,
    bind: Option<unsafe extern "C" fn(*mut fid, *mut fid, u64) -> i32>,
    control: Option<unsafe extern "C" fn(*mut fid, i32, *mut c_void) -> i32>,
    ops_open: Option<
        unsafe extern "C" fn(*mut fid, *const std::ffi::c_char, u64, *mut *mut c_void, *mut c_void) -> i32,
    >,
) -> fi_ops {
    fi_ops {
        size: std::mem::size_of::<fi_ops>(),
        close: Some(close),
        bind: match bind {
            Some(b) => Some(b),
            None => Some(nosys::bind),
        },
        control: match control {
            Some(c) => Some(c),
            None => Some(nosys::control),
        },
        ops_open: match ops_open {
            Some(o) => Some(o),
            None => Some(nosys::ops_open),
        },
        tostr: Some(nosys::tostr),
        ops_set: Some(nosys::ops_set),
    }
}

/// Ops tables are immutable statics the core reads; wrapping them lets us
/// keep raw pointers inside a `static`.
#[repr(transparent)]
pub struct Table<T>(pub T);
// SAFETY: tables are never written after construction; the pointers inside
// are function pointers or NULL.
unsafe impl<T> Sync for Table<T> {}
impl<T> Table<T> {
    pub const fn ptr(&'static self) -> *mut T {
        &self.0 as *const T as *mut T
    }
}
