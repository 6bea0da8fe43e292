//! Fabric class: the root object; opens domains, EQs and wait sets.

use crate::ffi::*;
use crate::fid::{base_ops, fid_header, FidObj, ParentRef, Refs, Table};
use std::ffi::c_void;
use std::sync::Arc;

#[derive(Default)]
pub struct Fabric {
    pub refs: Refs,
}
impl AsRef<Refs> for Fabric {
    fn as_ref(&self) -> &Refs {
        &self.refs
    }
}

type Obj = FidObj<fid_fabric, Fabric>;

/// The fabric behind an application-supplied fid: checks class and magic.
///
/// # Safety
/// `p` must be NULL or point to readable memory of at least a `struct fid`.
pub unsafe fn from_fid<'a>(p: *const c_void) -> Option<&'a Arc<Fabric>> {
    // SAFETY: the caller's contract (`p` NULL or a readable fid).
    unsafe { Obj::get(p, FI_CLASS_FABRIC) }
}

unsafe extern "C" fn close(f: *mut fid) -> i32 {
    abi_guard!("close", -FI_EOTHER, || {
        // SAFETY: `f` is the application's fid, or NULL (fi_close(3)).
        unsafe {
            crate::fid::close_unless_busy::<fid_fabric, Fabric>(
                f,
                FI_CLASS_FABRIC,
                FI_LOG_FABRIC,
                "domains, EQs or wait sets",
            )
        }
    })
}

unsafe extern "C" fn domain_open(
    f: *mut fid_fabric,
    info: *mut fi_info,
    dom: *mut *mut fid_domain,
    ctx: *mut c_void,
) -> i32 {
    abi_guard!("domain_open", -FI_EOTHER, || {
        // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
        let Some(fab) = (unsafe { from_fid(f as *const c_void) }) else {
            return -FI_EINVAL;
        };
        if dom.is_null() || info.is_null() {
            return -FI_EINVAL;
        }
        // SAFETY: fi_domain(3): `info` is NULL or the application's fi_info.
        match unsafe { crate::domain::open(ParentRef::new(fab), info, ctx) } {
            Ok(d) => {
                // SAFETY: `dom` is the application's result slot (non-NULL, checked above).
                unsafe { *dom = d };
                0
            }
            Err(e) => e,
        }
    })
}

unsafe extern "C" fn domain2(
    f: *mut fid_fabric,
    info: *mut fi_info,
    dom: *mut *mut fid_domain,
    flags: u64,
    ctx: *mut c_void,
) -> i32 {
    abi_guard!("domain2", -FI_EOTHER, || {
        if flags != 0 {
            crate::warn!(FI_LOG_FABRIC, "fi_domain2: flags {:#x} not supported", flags);
            return -FI_EINVAL;
        }
        // SAFETY: the caller's arguments, under the same contract.
        unsafe { domain_open(f, info, dom, ctx) }
    })
}

unsafe extern "C" fn eq_open(f: *mut fid_fabric, attr: *mut fi_eq_attr, eq: *mut *mut fid_eq, ctx: *mut c_void) -> i32 {
    abi_guard!("eq_open", -FI_EOTHER, || {
        // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
        let Some(fab) = (unsafe { from_fid(f as *const c_void) }) else {
            return -FI_EINVAL;
        };
        if eq.is_null() || attr.is_null() {
            return -FI_EINVAL;
        }
        // SAFETY: fi_eq_open(3): `attr` is NULL or the application's fi_eq_attr.
        match unsafe { crate::eq::open(attr, ctx, Box::new(ParentRef::new(fab))) } {
            Ok(e) => {
                // SAFETY: `eq` is the application's result slot (non-NULL, checked above).
                unsafe { *eq = e };
                0
            }
            Err(e) => e,
        }
    })
}

unsafe extern "C" fn wait_open(f: *mut fid_fabric, attr: *mut fi_wait_attr, w: *mut *mut fid_wait) -> i32 {
    abi_guard!("wait_open", -FI_EOTHER, || {
        // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
        let Some(fab) = (unsafe { from_fid(f as *const c_void) }) else {
            return -FI_EINVAL;
        };
        if w.is_null() || attr.is_null() {
            return -FI_EINVAL;
        }
        // SAFETY: fi_wait_open(3): `attr` is NULL or the application's fi_wait_attr.
        match unsafe { crate::wait::open(attr, Box::new(ParentRef::new(fab))) } {
            Ok(p) => {
                // SAFETY: `w` is the application's result slot (non-NULL, checked above).
                unsafe { *w = p };
                0
            }
            Err(e) => e,
        }
    })
}

unsafe extern "C" fn trywait(_f: *mut fid_fabric, fids: *mut *mut fid, count: i32) -> i32 {
    abi_guard!("trywait", -FI_EOTHER, || {
        // SAFETY: fi_trywait(3): `fids` holds `count` fids of the application.
        unsafe { crate::wait::trywait(fids, count) }
    })
}

unsafe extern "C" fn passive_ep(_: *mut fid_fabric, _: *mut fi_info, _: *mut *mut fid_pep, _: *mut c_void) -> i32 {
    abi_guard!("passive_ep", -FI_EOTHER, || {
        crate::warn!(FI_LOG_FABRIC, "passive endpoints (FI_EP_MSG) are not supported yet");
        -FI_ENOSYS
    })
}

static FABRIC_FI_OPS: Table<fi_ops> = Table(base_ops(close, None, None, None));
static FABRIC_OPS: Table<fi_ops_fabric> = Table(fi_ops_fabric {
    size: std::mem::size_of::<fi_ops_fabric>(),
    domain: Some(domain_open),
    passive_ep: Some(passive_ep),
    eq_open: Some(eq_open),
    wait_open: Some(wait_open),
    trywait: Some(trywait),
    domain2: Some(domain2),
});

/// The provider's `fabric` entry point.
pub unsafe extern "C" fn gnix_fabric(attr: *mut fi_fabric_attr, fabric: *mut *mut fid_fabric, ctx: *mut c_void) -> i32 {
    abi_guard!("gnix_fabric", -FI_EOTHER, || {
        if attr.is_null() || fabric.is_null() {
            return -FI_EINVAL;
        }
        // SAFETY: the caller's contract: `attr` is readable (and not NULL here).
        let a = unsafe { &*attr };
        // SAFETY: the attribute's name is NULL or a NUL-terminated string.
        let name = (!a.name.is_null()).then(|| unsafe { std::ffi::CStr::from_ptr(a.name) });
        if let Some(name) = name.filter(|n| !crate::getinfo::is_fabric_name(&n.to_string_lossy())) {
            crate::warn!(FI_LOG_FABRIC, "unknown fabric name {:?}", name);
            return -FI_ENODATA;
        }
        let c = fid_fabric {
            fid: fid_header(FI_CLASS_FABRIC, ctx, FABRIC_FI_OPS.ptr()),
            ops: FABRIC_OPS.ptr(),
            api_version: a.api_version,
        };
        // SAFETY: `fabric` is the core's result slot, non-NULL (checked above).
        unsafe { *fabric = Obj::create(c, Arc::new(Fabric::default())) };
        0
    })
}
