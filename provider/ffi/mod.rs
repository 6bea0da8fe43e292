//! The libfabric ABI: bindings generated from the installed 1.17 headers
//! (`scripts/gen-bindings.sh`), checked in, with bindgen's layout tests.
//! libfabric only grows its structs at the end, so writing the 1.17 fields
//! of a struct allocated by a newer core is sound.

// Generated code: bindgen's unsafe helpers (`__IncompleteArrayField`) do
// not wrap their bodies in `unsafe {}`.
#[rustfmt::skip]
#[allow(unsafe_op_in_unsafe_fn)]
mod bindings;
pub use bindings::*;

// Macros bindgen cannot evaluate (casts of -1).
#[cfg(test)]
pub const FI_ADDR_UNSPEC: u64 = u64::MAX;
pub const FI_ADDR_NOTAVAIL: u64 = u64::MAX;
#[allow(non_camel_case_types)]
pub type fi_addr_t = u64;
