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

pub unsafe fn from_fid<'a>(p: *const c_void) -> Option<&'a Arc<Fabric>> {
    Obj::get(p, FI_CLASS_FABRIC)
}

unsafe extern "C" fn close(f: *mut fid) -> i32 {
    abi_guard!("close", -FI_EOTHER, || {
        crate::fid::close_unless_busy::<fid_fabric, Fabric>(
            f,
            FI_CLASS_FABRIC,
            FI_LOG_FABRIC,
            "domains, EQs or wait sets",
        )
    })
}

unsafe extern "C" fn domain_open(
    f: *mut fid_fabric,
    info: *mut fi_info,
    dom: *mut *mut fid_domain,
    ctx: *mut c_void,
) -> i32 {
    abi_guard!("domain_open", -FI_EOTHER, || {
        let Some(fab) = from_fid(f as *const c_void) else {
            return -FI_EINVAL;
        };
        if dom.is_null() || info.is_null() {
            return -FI_EINVAL;
        }
        match crate::domain::open(ParentRef::new(fab), info, ctx) {
            Ok(d) => {
                *dom = d;
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
        domain_open(f, info, dom, ctx)
    })
}

unsafe extern "C" fn eq_open(f: *mut fid_fabric, attr: *mut fi_eq_attr, eq: *mut *mut fid_eq, ctx: *mut c_void) -> i32 {
    abi_guard!("eq_open", -FI_EOTHER, || {
        let Some(fab) = from_fid(f as *const c_void) else {
            return -FI_EINVAL;
        };
        if eq.is_null() || attr.is_null() {
            return -FI_EINVAL;
        }
        match crate::eq::open(attr, ctx, Box::new(ParentRef::new(fab))) {
            Ok(e) => {
                *eq = e;
                0
            }
            Err(e) => e,
        }
    })
}

unsafe extern "C" fn wait_open(f: *mut fid_fabric, attr: *mut fi_wait_attr, w: *mut *mut fid_wait) -> i32 {
    abi_guard!("wait_open", -FI_EOTHER, || {
        let Some(fab) = from_fid(f as *const c_void) else {
            return -FI_EINVAL;
        };
        if w.is_null() || attr.is_null() {
            return -FI_EINVAL;
        }
        match crate::wait::open(attr, Box::new(ParentRef::new(fab))) {
            Ok(p) => {
                *w = p;
                0
            }
            Err(e) => e,
        }
    })
}

unsafe extern "C" fn trywait(_f: *mut fid_fabric, fids: *mut *mut fid, count: i32) -> i32 {
    abi_guard!("trywait", -FI_EOTHER, || { crate::wait::trywait(fids, count) })
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
        let a = &*attr;
        if !a.name.is_null() && !crate::getinfo::is_fabric_name(&std::ffi::CStr::from_ptr(a.name).to_string_lossy()) {
            crate::warn!(
                FI_LOG_FABRIC,
                "unknown fabric name {:?}",
                std::ffi::CStr::from_ptr(a.name)
            );
            return -FI_ENODATA;
        }
        let c = fid_fabric {
            fid: fid_header(FI_CLASS_FABRIC, ctx, FABRIC_FI_OPS.ptr()),
            ops: FABRIC_OPS.ptr(),
            api_version: a.api_version,
        };
        *fabric = Obj::create(c, Arc::new(Fabric::default()));
        0
    })
}
