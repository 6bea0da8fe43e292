//! gnix: a libfabric provider over a software NIC with two wires
//! (shared memory for on-node peers, UDP for off-node peers).
//! See ../shared/DESIGN.md and README.md for the architecture.

#![deny(unsafe_op_in_unsafe_fn)]

#[macro_use]
mod abi;
pub(crate) mod ffi;
#[macro_use]
pub(crate) mod log;
pub(crate) mod core;
pub(crate) mod fid;
pub(crate) mod gate;
pub(crate) mod hash;
pub(crate) mod params;
pub(crate) mod progress;
// The protocol machines are public only to the fuzz targets
// (fuzz/fuzz_targets use gnix_fi::proto::fuzz); the provider's own build
// keeps them crate-private, so dead code in them is reported.
#[cfg(feature = "fuzz")]
pub mod proto;
#[cfg(not(feature = "fuzz"))]
pub(crate) mod proto;
// The fuzz targets of both wires in one place, for fuzz/ (cargo-fuzz):
// the udp wire's (also at proto::fuzz) and the shm wire's, whose module
// (nic) stays crate-private.
#[cfg(feature = "fuzz")]
pub mod fuzz {
    pub use crate::nic::shm::fuzz::{shm_frame_decoder, ShmFrameCase};
    pub use crate::proto::fuzz::{engine_datagrams, wire_decoder, DecoderCase, EngineCase, EngineReport};
}
// Seeded randomness for the simulator, the tests and the fuzz targets.
#[cfg(any(test, feature = "fuzz"))]
mod rng;
pub(crate) mod tme;

pub(crate) mod av;
pub(crate) mod cntr;
pub(crate) mod coll;
pub(crate) mod cq;
pub(crate) mod domain;
pub(crate) mod ep;
pub(crate) mod eq;
pub(crate) mod fabric;
pub(crate) mod getinfo;
pub(crate) mod mr;
pub(crate) mod nic;
pub(crate) mod trigger;
pub(crate) mod wait;

use ffi::*;
use std::cell::UnsafeCell;

/// The libfabric API version gnix implements (the headers it was built with).
pub const FI_API_VERSION: u32 = (1 << 16) | 17;
/// gnix's own version, as `fi_info` prints it.
pub const PROVIDER_VERSION: u32 = 1; // FI_VERSION(0, 1)

struct ProviderCell(UnsafeCell<fi_provider>);
// SAFETY: the core writes `context` once at registration, before any other
// thread can reach the provider; afterwards everyone only reads.
unsafe impl Sync for ProviderCell {}

static PROVIDER: ProviderCell = ProviderCell(UnsafeCell::new(fi_provider {
    version: PROVIDER_VERSION,
    fi_version: FI_API_VERSION,
    context: fi_context {
        internal: [std::ptr::null_mut(); 4],
    },
    name: c"gnix".as_ptr(),
    getinfo: Some(getinfo::gnix_getinfo),
    fabric: Some(fabric::gnix_fabric),
    cleanup: Some(cleanup),
}));

/// The API version declared in `fi_prov_ini`.
pub fn api_version() -> u32 {
    // SAFETY: written once in fi_prov_ini before any other call; read-only after.
    unsafe { (*PROVIDER.0.get()).fi_version }
}

pub fn provider_ptr() -> *const fi_provider {
    PROVIDER.0.get()
}

/// Called by the core's destructor (fi_fini) at process exit: a process
/// that exits without closing its endpoints still removes its mailboxes.
unsafe extern "C" fn cleanup() {
    abi_guard!("cleanup", (), || {
        nic::shm::mailbox::unlink_all_live();
    })
}

/// The API version gnix declares to the core that loads it.
///
/// gnix implements the 1.17 API. A 2.x core keeps the 1.x ABI (structs
/// only grow at the end, and we allocate them through the core) but skips
/// every provider that declares an older version than the application asks
/// for (MPICH asks for 2.x). Under a 2.x core gnix therefore declares the
/// core's version, and stays honest where it matters: getinfo offers and
/// accepts only 1.17 features, so hints naming anything newer (caps bits it
/// does not know) get -FI_ENODATA rather than a silent yes.
fn declared_version(core_version: u32) -> u32 {
    if core_version >> 16 >= 2 {
        core_version
    } else {
        FI_API_VERSION
    }
}

/// The entry point libfabric looks for in `lib*-fi.so` DSO providers.
#[no_mangle]
pub extern "C" fn fi_prov_ini() -> *mut fi_provider {
    abi_guard!("fi_prov_ini", std::ptr::null_mut(), || {
        let p = PROVIDER.0.get();
        if let Some(c) = core::core() {
            // SAFETY: the core calls fi_prov_ini once, before anything else can
            // reach the provider struct.
            unsafe { (*p).fi_version = declared_version(c.version) };
        }
        params::define_all();
        p
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn declares_the_core_version_only_on_2x() {
        assert_eq!(super::declared_version((1 << 16) | 17), super::FI_API_VERSION);
        assert_eq!(super::declared_version((1 << 16) | 22), super::FI_API_VERSION);
        assert_eq!(super::declared_version((2 << 16) | 5), (2 << 16) | 5);
    }
}
