//! gnix: a libfabric provider over a software NIC with two wires
//! (shared memory for on-node peers, UDP for off-node peers).
//! See ../shared/DESIGN.md and README.md for the architecture.

pub mod ffi;
#[macro_use]
pub mod log;
pub mod core;
pub mod fid;
pub mod params;
pub mod progress;
pub mod proto;
pub mod tme;

pub mod av;
pub mod cntr;
pub mod cq;
pub mod domain;
pub mod ep;
pub mod eq;
pub mod fabric;
pub mod getinfo;
pub mod mr;
pub mod nic;
pub mod wait;

use ffi::*;
use std::cell::UnsafeCell;

/// The libfabric API version gnix implements (the headers it was built with).
pub const FI_API_VERSION: u32 = (1 << 16) | 17;
/// gnix's own version, as `fi_info` prints it.
pub const PROVIDER_VERSION: u32 = (0 << 16) | 1;

struct ProviderCell(UnsafeCell<fi_provider>);
// SAFETY: the core writes `context` once at registration, before any other
// thread can reach the provider; afterwards everyone only reads.
unsafe impl Sync for ProviderCell {}

static PROVIDER: ProviderCell = ProviderCell(UnsafeCell::new(fi_provider {
    version: PROVIDER_VERSION,
    fi_version: FI_API_VERSION,
    context: fi_context { internal: [std::ptr::null_mut(); 4] },
    name: c"gnix".as_ptr(),
    getinfo: Some(getinfo::gnix_getinfo),
    fabric: Some(fabric::gnix_fabric),
    cleanup: Some(cleanup),
}));

pub fn provider_ptr() -> *const fi_provider {
    PROVIDER.0.get()
}

unsafe extern "C" fn cleanup() {}

/// The entry point libfabric looks for in `lib*-fi.so` DSO providers.
#[no_mangle]
pub extern "C" fn fi_prov_ini() -> *mut fi_provider {
    params::define_all();
    PROVIDER.0.get()
}
