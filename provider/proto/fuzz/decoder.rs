//! The wire decoder's fuzz target (module doc of `fuzz`).

use super::Edit;
use crate::proto::wire::{DecodeError, Packet};
use arbitrary::Arbitrary;

/// A datagram: a packet of any kind with any fields, emitted, or raw
/// bytes; then edited.
#[derive(Arbitrary, Clone, Debug)]
pub struct DecoderCase<'a> {
    pub base: Base<'a>,
    pub edits: Vec<Edit<'a>>,
}

#[derive(Arbitrary, Clone, Debug)]
pub enum Base<'a> {
    Typed(Packet<'a>),
    Raw(&'a [u8]),
}

/// Whether the datagram was accepted (the cargo test run checks that the
/// inputs reach both outcomes).
pub fn wire_decoder(case: &DecoderCase<'_>) -> bool {
    let mut bytes = match case.base {
        Base::Typed(p) => {
            let b = p.to_vec();
            if case.edits.is_empty() {
                // Emit frames every kind correctly: what comes back is the
                // packet, or a field that cannot be right.
                match Packet::parse(&b) {
                    Ok(q) => assert_eq!(q, p, "parse(emit(p)) != p"),
                    Err(e) => assert_eq!(e, DecodeError::BadField, "{p:?} emitted"),
                }
            }
            b
        }
        Base::Raw(b) => b.to_vec(),
    };
    for e in &case.edits {
        e.apply(&mut bytes);
    }
    let Ok(p) = Packet::parse(&bytes) else {
        return false;
    };
    let again = p.to_vec();
    assert_eq!(again.len(), bytes.len(), "re-emitted length differs");
    assert_eq!(Packet::parse(&again), Ok(p), "parse(emit(p)) != p");
    true
}
