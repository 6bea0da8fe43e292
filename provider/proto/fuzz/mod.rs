//! Fuzz targets, in the ecosystem's form: each takes an input type that
//! implements `arbitrary::Arbitrary`, so that a coverage-guided fuzzer
//! (cargo-fuzz, from `fuzz/` at the top of the repository) mutates the
//! bytes the input is built from, and `cargo test` runs the same targets
//! on inputs built from fixed seeds (`tests.rs`: bounded, reproducible,
//! about a second in release).
//!
//! * `wire_decoder`: `Packet::parse` on a datagram (a typed packet of any
//!   kind, emitted, or raw bytes, then edited) never panics; whatever it
//!   accepts emits to a datagram of the same length that parses to the
//!   same packet; and a typed packet emitted unedited either parses back
//!   to itself or is rejected for a bad field, never for its framing.
//! * `engine_datagrams`: two engines, A (the peer) and B (the target),
//!   exchange real messages over a lossy link while fuzzed datagrams hit
//!   B, from A's address and from strangers. B never panics; every
//!   datagram that is invalid on its face is counted as dropped (it does
//!   not parse, or it is not a CONN_REQ and comes from an address with no
//!   VC, or it names a connection id that is not B's); B's unproven VCs
//!   and queued first-contact challenges stay within their bounds. A
//!   *checked* case feeds only junk that must be dropped or must change
//!   nothing for good (forged CONN_REQs from A's address, also before A's
//!   first one, strangers' first contacts, optionally with B's table of
//!   unproven VCs full first): there every real message, eager and
//!   rendezvous, arrives exactly once, in order, intact, and the VC is
//!   never restarted. A *chaos* case may aim at the live connection (its
//!   id, a nearby sequence number) and only must not panic or break the
//!   bounds.
//!
//! Compiled for the tests and, with the `fuzz` feature, for `fuzz/`.

mod decoder;
mod engine;
// Its seeded runner serves the shm wire's target too (nic/shm/fuzz/).
#[cfg(test)]
pub(crate) mod tests;

pub use decoder::{wire_decoder, DecoderCase};
pub use engine::{engine_datagrams, EngineCase, EngineReport};

use arbitrary::Arbitrary;

/// Every kind byte the decoder knows, and one it does not.
const KINDS: [u8; 15] = [1, 2, 3, 4, 5, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0];

const INTERESTING32: [u32; 8] = [0, 1, 2, 0x7fff_ffff, 0x8000_0000, u32::MAX, u32::MAX - 1, 4096];
const INTERESTING64: [u64; 8] = [0, 1, u64::MAX, 1 << 63, 1 << 32, 65536, 65537, u64::MAX >> 1];

/// One edit of a datagram's bytes (positions taken modulo its length).
#[derive(Arbitrary, Clone, Debug)]
pub enum Edit<'a> {
    FlipBit {
        at: u16,
        bit: u8,
    },
    SetByte {
        at: u16,
        value: u8,
    },
    /// One of `INTERESTING32`, plus 0..=2, at any position.
    Set32 {
        at: u16,
        which: u8,
        plus: u8,
    },
    Set64 {
        at: u16,
        which: u8,
    },
    Truncate {
        len: u16,
    },
    Extend {
        bytes: &'a [u8],
    },
    /// The kind byte: one of `KINDS`.
    Kind {
        which: u8,
    },
    /// Our head, other bytes' tail.
    Splice {
        cut: u16,
        tail: &'a [u8],
    },
    /// A chunk duplicated in place.
    DupChunk {
        at: u16,
        len: u16,
    },
    /// A segment field by position: ack (12), sack (16), seq (24).
    SegField {
        which: u8,
        value: u32,
    },
}

impl Edit<'_> {
    pub fn apply(&self, b: &mut Vec<u8>) {
        let len = b.len();
        let pos = |at: u16, room: usize| (len >= room).then(|| at as usize % (len - room + 1));
        match *self {
            Edit::FlipBit { at, bit } => {
                if let Some(i) = pos(at, 1) {
                    b[i] ^= 1 << (bit % 8);
                }
            }
            Edit::SetByte { at, value } => {
                if let Some(i) = pos(at, 1) {
                    b[i] = value;
                }
            }
            Edit::Set32 { at, which, plus } => {
                if let Some(i) = pos(at, 4) {
                    let v = INTERESTING32[which as usize % 8].wrapping_add(plus as u32 % 3);
                    b[i..i + 4].copy_from_slice(&v.to_le_bytes());
                }
            }
            Edit::Set64 { at, which } => {
                if let Some(i) = pos(at, 8) {
                    b[i..i + 8].copy_from_slice(&INTERESTING64[which as usize % 8].to_le_bytes());
                }
            }
            Edit::Truncate { len: n } => b.truncate(n as usize % (len + 1)),
            Edit::Extend { bytes } => b.extend_from_slice(&bytes[..bytes.len().min(64)]),
            Edit::Kind { which } => {
                if len >= 4 {
                    b[3] = KINDS[which as usize % KINDS.len()];
                }
            }
            Edit::Splice { cut, tail } => {
                let cut = cut as usize % (len.min(tail.len()) + 1);
                b.truncate(cut);
                b.extend_from_slice(&tail[cut.min(tail.len())..]);
            }
            Edit::DupChunk { at, len: n } => {
                if let Some(i) = pos(at, 1) {
                    let n = n as usize % (len - i + 1);
                    let chunk = b[i..i + n].to_vec();
                    b.splice(i..i, chunk);
                }
            }
            Edit::SegField { which, value } => {
                if len >= 28 {
                    let at = [12usize, 16, 24][which as usize % 3];
                    b[at..at + 4].copy_from_slice(&value.to_le_bytes());
                }
            }
        }
        // Nothing longer than a UDP datagram.
        b.truncate(65_507);
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
