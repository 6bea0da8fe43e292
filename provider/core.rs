//! Calls into the libfabric core that loaded us.
//!
//! We do not link against libfabric. An unversioned reference to a versioned
//! symbol would bind to its *oldest* version (`fi_dupinfo@FABRIC_1.0`, which
//! allocates the 1.0-sized `fi_info`), and a DT_NEEDED on `libfabric.so.1`
//! would drag Debian's copy into a process that runs a bundled libfabric 2.x
//! (the MPICH wheel). `dlsym` returns the *default* version of the copy that
//! is already loaded, so the structs we fill are sized by the running core.

use crate::ffi::*;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::OnceLock;

type DupInfoFn = unsafe extern "C" fn(*const fi_info) -> *mut fi_info;
type FreeInfoFn = unsafe extern "C" fn(*mut fi_info);
type LogEnabledFn = unsafe extern "C" fn(*const fi_provider, fi_log_level, fi_log_subsys) -> c_int;
type LogFn =
    unsafe extern "C" fn(*const fi_provider, fi_log_level, fi_log_subsys, *const c_char, c_int, *const c_char, ...);
type ParamDefineFn =
    unsafe extern "C" fn(*const fi_provider, *const c_char, fi_param_type, *const c_char, ...) -> c_int;
type ParamGetFn = unsafe extern "C" fn(*mut fi_provider, *const c_char, *mut c_void) -> c_int;
type VersionFn = unsafe extern "C" fn() -> u32;

pub struct Core {
    pub dupinfo: DupInfoFn,
    pub freeinfo: FreeInfoFn,
    pub log_enabled: Option<LogEnabledFn>,
    pub log: Option<LogFn>,
    pub param_define: Option<ParamDefineFn>,
    pub param_get: Option<ParamGetFn>,
    /// API version of the running core (`fi_version()`), e.g. 1.17 or 2.x.
    pub version: u32,
}

static CORE: OnceLock<Option<Core>> = OnceLock::new();

fn lookup(handle: *mut c_void, name: &CStr) -> *mut c_void {
    // SAFETY: dlsym with a valid handle (RTLD_DEFAULT or one from dlopen) and a
    // NUL-terminated name has no preconditions beyond those.
    unsafe { libc::dlsym(handle, name.as_ptr()) }
}

fn resolve() -> Option<Core> {
    let mut handle = libc::RTLD_DEFAULT;
    if lookup(handle, c"fi_dupinfo").is_null() {
        // The core was loaded RTLD_LOCAL (e.g. by a language binding): find
        // the already-loaded copy by soname without loading another one.
        // SAFETY: plain dlopen call with a static NUL-terminated name.
        handle = unsafe { libc::dlopen(c"libfabric.so.1".as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
        if handle.is_null() {
            return None;
        }
    }
    let sym = |n: &CStr| {
        let p = lookup(handle, n);
        (!p.is_null()).then_some(p)
    };
    // SAFETY: each pointer comes from dlsym of the named libfabric function,
    // whose C prototype (rdma/fabric.h, rdma/providers/*.h) the type matches.
    unsafe {
        Some(Core {
            dupinfo: std::mem::transmute::<*mut c_void, DupInfoFn>(sym(c"fi_dupinfo")?),
            freeinfo: std::mem::transmute::<*mut c_void, FreeInfoFn>(sym(c"fi_freeinfo")?),
            log_enabled: sym(c"fi_log_enabled").map(|p| std::mem::transmute::<*mut c_void, LogEnabledFn>(p)),
            log: sym(c"fi_log").map(|p| std::mem::transmute::<*mut c_void, LogFn>(p)),
            param_define: sym(c"fi_param_define").map(|p| std::mem::transmute::<*mut c_void, ParamDefineFn>(p)),
            param_get: sym(c"fi_param_get").map(|p| std::mem::transmute::<*mut c_void, ParamGetFn>(p)),
            version: sym(c"fi_version")
                .map(|p| std::mem::transmute::<*mut c_void, VersionFn>(p)())
                .unwrap_or(crate::FI_API_VERSION),
        })
    }
}

/// The core's entry points, or None when no libfabric is loaded in this
/// process (unit tests of the Rust crate).
pub fn core() -> Option<&'static Core> {
    CORE.get_or_init(resolve).as_ref()
}

/// An `fi_info` (with all attribute structs) allocated by the core, zeroed.
pub fn alloc_info() -> Option<*mut fi_info> {
    let c = core()?;
    // SAFETY: fi_dupinfo(NULL) is fi_allocinfo(): returns a zeroed info with
    // zeroed attr structs, or NULL on allocation failure.
    let p = unsafe { (c.dupinfo)(std::ptr::null()) };
    (!p.is_null()).then_some(p)
}

/// # Safety
/// `info` must be NULL or an info chain allocated by the core, not used afterwards.
pub unsafe fn free_info(info: *mut fi_info) {
    if info.is_null() {
        return;
    }
    if let Some(c) = core() {
        // SAFETY: info was allocated by the same core's fi_dupinfo.
        unsafe { (c.freeinfo)(info) }
    }
}

/// strdup through libc, so that the core's fi_freeinfo can free() it.
pub fn c_strdup(s: &str) -> *mut c_char {
    let c = std::ffi::CString::new(s).unwrap_or_default();
    // SAFETY: c is a valid NUL-terminated string.
    unsafe { libc::strdup(c.as_ptr()) }
}
