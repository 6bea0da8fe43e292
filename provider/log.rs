//! Logging through libfabric's `fi_log`, so `FI_LOG_LEVEL` / `FI_LOG_PROV`
//! filter gnix like any other provider.

use crate::ffi::*;
use std::ffi::CString;

#[doc(hidden)]
pub fn enabled(level: fi_log_level, subsys: fi_log_subsys) -> bool {
    match crate::core::core().and_then(|c| c.log_enabled) {
        // SAFETY: the provider pointer is our static provider; the core only reads it.
        Some(f) => unsafe { f(crate::provider_ptr(), level, subsys) != 0 },
        None => false,
    }
}

#[doc(hidden)]
pub fn emit(level: fi_log_level, subsys: fi_log_subsys, func: &str, line: u32, msg: std::fmt::Arguments) {
    let Some(log) = crate::core::core().and_then(|c| c.log) else {
        return;
    };
    let msg = CString::new(msg.to_string().replace('\0', "")).unwrap_or_default();
    let func = CString::new(func).unwrap_or_default();
    // SAFETY: every string is NUL-terminated and outlives the call; the format
    // is a literal "%s\n" consuming exactly one C string argument.
    unsafe {
        log(
            crate::provider_ptr(),
            level,
            subsys,
            func.as_ptr(),
            line as i32,
            c"%s\n".as_ptr(),
            msg.as_ptr(),
        )
    }
}

/// `gnix_log!(FI_LOG_WARN, FI_LOG_EP_DATA, "fmt", args..)`
#[macro_export]
macro_rules! gnix_log {
    ($lvl:expr, $sub:expr, $($arg:tt)*) => {{
        if $crate::log::enabled($lvl, $sub) {
            $crate::log::emit($lvl, $sub, module_path!(), line!(), format_args!($($arg)*));
        }
    }};
}
#[macro_export]
macro_rules! warn { ($sub:expr, $($arg:tt)*) => { $crate::gnix_log!($crate::ffi::FI_LOG_WARN, $sub, $($arg)*) }; }
#[macro_export]
macro_rules! info { ($sub:expr, $($arg:tt)*) => { $crate::gnix_log!($crate::ffi::FI_LOG_INFO, $sub, $($arg)*) }; }
#[macro_export]
macro_rules! debug { ($sub:expr, $($arg:tt)*) => { $crate::gnix_log!($crate::ffi::FI_LOG_DEBUG, $sub, $($arg)*) }; }
