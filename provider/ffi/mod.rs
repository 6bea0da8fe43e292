//! The libfabric ABI: bindings generated from the installed 1.17 headers
//! (`scripts/gen-bindings.sh`), checked in, with bindgen's layout tests.
//! libfabric only grows its structs at the end, so writing the 1.17 fields
//! of a struct allocated by a newer core is sound.

#[rustfmt::skip]
mod bindings;
pub use bindings::*;
