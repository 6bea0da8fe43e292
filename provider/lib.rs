//! gnix: a libfabric provider over a software NIC with two wires
//! (shared memory for on-node peers, UDP for off-node peers).
//! See ../shared/DESIGN.md and README.md for the architecture.

pub mod ffi;
pub mod proto;
pub mod tme;
