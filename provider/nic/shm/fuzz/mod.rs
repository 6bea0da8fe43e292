//! The shm wire's fuzz target, in the ecosystem's form (as the udp wire's
//! in `proto/fuzz/`): `ShmFrameCase` implements `arbitrary::Arbitrary`, so
//! a coverage-guided fuzzer (cargo-fuzz, `fuzz/fuzz_targets/
//! shm_frame_decoder.rs`) mutates the bytes it is built from, and
//! `cargo test` runs the same target on inputs from fixed seeds
//! (`tests.rs`).
//!
//! `shm_frame_decoder`: a slot (a typed frame of any kind with any fields,
//! emitted by `Frame::emit`, or a raw header and payload), then edited
//! the way a broken or hostile producer could write it (bit flips,
//! interesting values in the header's fields, another kind, a payload cut
//! or extended, a length field that disagrees with what was written), is
//! read the way the mailbox reads it (a length beyond the slot yields no
//! payload; "the slot" is the longest message, which may span up to four
//! of a ring's slots) and given to `Frame::parse`. It asserts:
//! * parsing never panics;
//! * a length beyond the slot is `Malformed::TooLong`, and nothing
//!   longer than the slot is ever accepted;
//! * whatever is accepted has no bad field (what `bad_field` checks), and
//!   re-emits to a slot of the same kind, length and payload bytes with
//!   the same header fields (each byte of them the decoder reads emitted
//!   as it came, each it ignores as 0), which parses to the same frame;
//! * a typed frame emitted unedited parses back to itself, or is refused
//!   for a field that is really bad (a grant index beyond the ring's, a
//!   status that is no error number, iov lengths that overflow) or for a
//!   payload too long for the slot; never for its framing.
//!
//! The slot's bytes in shared memory (`mailbox.rs`) are outside it: the
//! header here is the `SlotHead` that `Mailbox::peek` makes of them.
//!
//! Compiled for the tests and, with the `fuzz` feature, for `fuzz/`
//! (re-exported as `gnix_fi::fuzz`).

#![forbid(unsafe_code)]

#[cfg(test)]
mod tests;

use super::frame::{kind, Frame, Malformed};
use super::mailbox::{Fields, Geometry, SlotHead, GRANTS};
use super::mapping::SharedBytes;
use crate::proto::MemRanges;
use crate::proto::MsgHdr;
use arbitrary::Arbitrary;

/// One slot of a ring: what its producer wrote, then edited.
#[derive(Arbitrary, Clone, Debug)]
pub struct ShmFrameCase<'a> {
    /// The ring's slot size: one of `SLOT_PAYLOADS` (the low two bits),
    /// and the slots a message may span, 1 to 4 (the next two).
    slot: u8,
    /// What the slot holds beyond the bytes written (an older frame's).
    stale: u8,
    base: Base<'a>,
    edits: Vec<SlotEdit<'a>>,
}

/// Payload sizes a mailbox may be created with (`Geometry::new` rounds
/// them up to whole slots: 80, 144, 1040 and 8208 bytes).
const SLOT_PAYLOADS: [usize; 4] = [64, 100, 1024, 8192];

/// Every kind the decoder knows, and some it does not.
const KINDS: [u8; 10] = [
    kind::EAGER,
    kind::RTS,
    kind::CTS,
    kind::DATA,
    kind::FIN,
    kind::CTW,
    kind::WDONE,
    0,
    8,
    255,
];

const INTERESTING32: [u32; 8] = [0, 1, 2, 0x7fff_ffff, 0x8000_0000, u32::MAX, u32::MAX - 1, 4096];
const INTERESTING64: [u64; 10] = [
    0,
    1,
    u64::MAX,
    1 << 63,
    1 << 32,
    GRANTS as u64,
    GRANTS as u64 - 1,
    -(i32::MAX as i64) as u64,
    i32::MIN as i64 as u64,
    u64::MAX >> 1,
];

#[derive(Arbitrary, Clone, Debug)]
enum Base<'a> {
    Typed(TypedFrame<'a>),
    /// A header and payload as any producer may write them (the length
    /// field is the payload's; edits may change it).
    Raw {
        kind: KindByte,
        f: [u8; 32],
        payload: &'a [u8],
    },
}

/// A kind byte: mostly one of `KINDS`, so that raw slots reach the
/// decoder of each kind.
#[derive(Arbitrary, Clone, Copy, Debug)]
enum KindByte {
    Known(u8),
    Any(u8),
}

impl KindByte {
    fn get(self) -> u8 {
        match self {
            KindByte::Known(i) => KINDS[i as usize % KINDS.len()],
            KindByte::Any(k) => k,
        }
    }
}

/// A frame of each kind with any fields, as `Frame` makes them: an EAGER's
/// length is its body's, an RTS's the sum of its iov lengths (wrapping:
/// the sum may overflow, which the decoder must refuse).
#[derive(Arbitrary, Clone, Debug)]
enum TypedFrame<'a> {
    Eager {
        tag: u64,
        data: u64,
        flags: u32,
        body: &'a [u8],
    },
    Rts {
        tag: u64,
        data: u64,
        flags: u32,
        key: u64,
        iov: Vec<(u64, Word)>,
    },
    Cts {
        key: u64,
        rid: u64,
    },
    Data {
        rid: u64,
        off: u64,
        body: &'a [u8],
    },
    Fin {
        key: u64,
        status: Status,
    },
    Ctw {
        key: u64,
        rid: u64,
        at: u64,
        grant: Word,
        iov: Vec<(u64, Word)>,
    },
    Wdone {
        rid: u64,
        status: Status,
    },
}

/// A number where its size matters (iov lengths, grant indices): small
/// ones fit, interesting ones sit on the edges, any may be anything.
#[derive(Arbitrary, Clone, Copy, Debug)]
enum Word {
    Small(u8),
    Interesting(u8),
    Any(u64),
}

impl Word {
    fn get(self) -> u64 {
        match self {
            Word::Small(v) => v as u64 % (GRANTS as u64 + 2),
            Word::Interesting(i) => INTERESTING64[i as usize % INTERESTING64.len()],
            Word::Any(v) => v,
        }
    }
}

/// A completion status: success, an error number, or anything.
#[derive(Arbitrary, Clone, Copy, Debug)]
enum Status {
    Ok,
    Errno(u16),
    Any(i64),
}

impl Status {
    fn get(self) -> i64 {
        match self {
            Status::Ok => 0,
            Status::Errno(e) => -(e as i64),
            Status::Any(v) => v,
        }
    }
}

impl TypedFrame<'_> {
    /// The frame and the message bytes it carries (EAGER, DATA).
    fn frame(&self) -> (Frame, &[u8]) {
        let hdr = |tag, data, flags, len| MsgHdr { tag, data, flags, len };
        let iov = |v: &[(u64, Word)]| v.iter().map(|&(a, l)| (a, l.get())).collect::<MemRanges>();
        match *self {
            TypedFrame::Eager { tag, data, flags, body } => (
                Frame::Eager {
                    hdr: hdr(tag, data, flags, body.len() as u64),
                },
                body,
            ),
            TypedFrame::Rts {
                tag,
                data,
                flags,
                key,
                iov: ref v,
            } => {
                let iov = iov(v);
                let len = iov.iter().fold(0u64, |s, r| s.wrapping_add(r.1));
                (
                    Frame::Rts {
                        hdr: hdr(tag, data, flags, len),
                        key,
                        iov,
                    },
                    &[],
                )
            }
            TypedFrame::Cts { key, rid } => (Frame::Cts { key, rid }, &[]),
            TypedFrame::Data { rid, off, body } => (
                Frame::Data {
                    rid,
                    off,
                    len: body.len(),
                },
                body,
            ),
            TypedFrame::Fin { key, status } => (
                Frame::Fin {
                    key,
                    status: status.get() as i32,
                },
                &[],
            ),
            TypedFrame::Ctw {
                key,
                rid,
                at,
                grant,
                iov: ref v,
            } => (
                Frame::Ctw {
                    key,
                    rid,
                    at,
                    grant: grant.get() as usize,
                    iov: iov(v),
                },
                &[],
            ),
            TypedFrame::Wdone { rid, status } => (
                Frame::Wdone {
                    rid,
                    status: status.get(),
                },
                &[],
            ),
        }
    }
}

/// One edit of a slot. Positions in the 32 bytes of kind fields are taken
/// modulo the room; payload edits keep the length field in step (the
/// producer wrote a different payload) except `Len`, which sets it alone
/// (the producer lies about what it wrote).
#[derive(Arbitrary, Clone, Debug)]
enum SlotEdit<'a> {
    FlipBit {
        at: u8,
        bit: u8,
    },
    SetByte {
        at: u8,
        value: u8,
    },
    /// One of `INTERESTING32`, plus 0..=2, at any position.
    Set32 {
        at: u8,
        which: u8,
        plus: u8,
    },
    /// A u64 field of the layout (at 0, 8, 16, 24): an interesting value
    /// or any.
    Field {
        which: u8,
        value: Word,
    },
    /// An RTS's iov count (at 20): the entries written, give or take.
    Count {
        plus: i8,
    },
    /// The kind: one of `KINDS`.
    Kind {
        which: u8,
    },
    /// The length field alone.
    Len {
        which: u8,
        plus: u8,
    },
    Truncate {
        len: u16,
    },
    Extend {
        bytes: &'a [u8],
    },
    PayloadBit {
        at: u16,
        bit: u8,
    },
    /// A whole iov entry (16 bytes) appended.
    AddEntry {
        addr: u64,
        len: Word,
    },
}

/// A slot as its producer left it: the header, and the payload bytes it
/// wrote (which the length field may not match).
struct Slot {
    head: SlotHead,
    written: Vec<u8>,
}

/// More than any slot holds, so that writing past the slot is covered.
const WRITTEN_MAX: usize = 2 * 8192 + 64;

impl SlotEdit<'_> {
    fn apply(&self, s: &mut Slot, slot_payload: usize) {
        // Edited as the slot's bytes.
        let mut f = s.head.f.to_bytes();
        let written = s.written.len();
        match *self {
            SlotEdit::FlipBit { at, bit } => f[at as usize % 32] ^= 1 << (bit % 8),
            SlotEdit::SetByte { at, value } => f[at as usize % 32] = value,
            SlotEdit::Set32 { at, which, plus } => {
                let i = at as usize % 29;
                let v = INTERESTING32[which as usize % INTERESTING32.len()].wrapping_add(plus as u32 % 3);
                f[i..i + 4].copy_from_slice(&v.to_le_bytes());
            }
            SlotEdit::Field { which, value } => {
                let i = 8 * (which as usize % 4);
                f[i..i + 8].copy_from_slice(&value.get().to_le_bytes());
            }
            SlotEdit::Count { plus } => {
                let n = ((written / 16) as i64 + plus as i64 % 3) as u32;
                f[20..24].copy_from_slice(&n.to_le_bytes());
            }
            SlotEdit::Kind { which } => s.head.kind = KINDS[which as usize % KINDS.len()],
            SlotEdit::Len { which, plus } => {
                // The length field is a u32 in the ring.
                let base = [
                    written,
                    written.next_multiple_of(16),
                    slot_payload,
                    0,
                    u32::MAX as usize - 2,
                    16,
                ][which as usize % 6];
                s.head.len = (base + plus as usize % 3).min(u32::MAX as usize);
            }
            SlotEdit::Truncate { len } => {
                s.written.truncate(len as usize % (written + 1));
                s.head.len = s.written.len();
            }
            SlotEdit::Extend { bytes } => {
                s.written
                    .extend_from_slice(&bytes[..bytes.len().min(WRITTEN_MAX - written)]);
                s.head.len = s.written.len();
            }
            SlotEdit::PayloadBit { at, bit } => {
                if written > 0 {
                    s.written[at as usize % written] ^= 1 << (bit % 8);
                }
            }
            SlotEdit::AddEntry { addr, len } => {
                if written + 16 <= WRITTEN_MAX {
                    s.written.extend_from_slice(&addr.to_le_bytes());
                    s.written.extend_from_slice(&len.get().to_le_bytes());
                    s.head.len = s.written.len();
                }
            }
        }
        s.head.f = Fields::from_bytes(f);
    }
}

/// The refusals for a bad field (not for framing).
const FIELD_FAULTS: [Malformed; 3] = [Malformed::Grant, Malformed::Status, Malformed::IovSum];

/// Whether `fr` has the bad field `why` names: a grant index beyond the
/// ring's, a status that is no error number, iov lengths that overflow.
fn bad_field(fr: &Frame, why: Malformed) -> bool {
    let status_ok = |s: i64| (-(i32::MAX as i64)..=0).contains(&s);
    let overflows = |iov: &[(u64, u64)]| iov.iter().try_fold(0u64, |s, r| s.checked_add(r.1)).is_none();
    match (fr, why) {
        (Frame::Ctw { grant, .. }, Malformed::Grant) => *grant >= GRANTS,
        (Frame::Fin { status, .. }, Malformed::Status) => !status_ok(*status as i64),
        (Frame::Wdone { status, .. }, Malformed::Status) => !status_ok(*status),
        (Frame::Rts { iov, .. } | Frame::Ctw { iov, .. }, Malformed::IovSum) => overflows(iov),
        _ => false,
    }
}

/// A slot's payload bytes in the ring: what the producer wrote, as far as
/// the slot goes, then what an older frame left there.
fn in_slot(written: &[u8], slot_payload: usize, stale: u8) -> Vec<u8> {
    let mut slot = written[..written.len().min(slot_payload)].to_vec();
    slot.resize(slot_payload, stale);
    slot
}

/// The slot's payload as the mailbox gives it: the header's length of the
/// slot's bytes, `None` when that is more than the slot holds.
fn payload_of<'s>(head: &SlotHead, slot: &'s [u8]) -> Option<SharedBytes<'s>> {
    (head.len <= slot.len()).then(|| SharedBytes::of_slice(&slot[..head.len]))
}

/// Runs one case: `Ok(kind)` of the frame accepted, or `Err(why)` the slot
/// was refused (the `cargo test` run checks that the inputs reach every
/// kind and every refusal).
pub fn shm_frame_decoder(case: &ShmFrameCase<'_>) -> Result<u8, &'static str> {
    // The most a message may carry: one slot, or several it spans (the
    // mailbox hands the payload over in one piece either way).
    let span = 1 + (case.slot as usize / SLOT_PAYLOADS.len()) % 4;
    let slot_payload = Geometry::new(1, 8, SLOT_PAYLOADS[case.slot as usize % SLOT_PAYLOADS.len()])
        .with_span(span)
        .msg_max();
    let mut s = match case.base {
        Base::Typed(ref t) => {
            let (fr, body) = t.frame();
            let (head, written) = fr.emit(body);
            if case.edits.is_empty() {
                let slot = in_slot(&written, slot_payload, case.stale);
                match Frame::parse(&head, payload_of(&head, &slot).as_ref()) {
                    Ok(back) => assert_eq!(back, fr, "parse(emit(fr)) != fr"),
                    Err(Malformed::TooLong) => assert!(head.len > slot_payload, "{fr:?}: TooLong within the slot"),
                    Err(why) => assert!(bad_field(&fr, why), "{fr:?} emitted is refused: {why:?}"),
                }
            }
            Slot { head, written }
        }
        Base::Raw { kind, f, payload } => Slot {
            head: SlotHead {
                kind: kind.get(),
                len: payload.len(),
                f: Fields::from_bytes(f),
            },
            written: payload[..payload.len().min(WRITTEN_MAX)].to_vec(),
        },
    };
    for e in &case.edits {
        e.apply(&mut s, slot_payload);
    }
    let slot = in_slot(&s.written, slot_payload, case.stale);
    let head = s.head;
    let payload = payload_of(&head, &slot);
    let parsed = Frame::parse(&head, payload.as_ref());
    if head.len > slot_payload {
        assert_eq!(parsed, Err(Malformed::TooLong), "a length beyond the slot");
    }
    let fr = parsed.map_err(|why| why.why())?;
    // What the machine relies on holds of every frame accepted.
    for why in FIELD_FAULTS {
        assert!(!bad_field(&fr, why), "{fr:?} accepted with {why:?}");
    }
    let p = payload.expect("accepted within the slot").to_vec();
    let (again, bytes) = fr.emit(&p);
    assert_eq!((again.kind, again.len), (head.kind, head.len), "{fr:?} re-emitted");
    assert_eq!(bytes, p, "{fr:?} re-emitted: the payload differs");
    // The same header fields: each byte the decoder reads (changing it
    // changes the outcome) is emitted as it came, each it ignores as 0.
    let (came, went) = (head.f.to_bytes(), again.f.to_bytes());
    for i in 0..32 {
        let mut probe = head;
        let mut b = came;
        b[i] ^= 0xff;
        probe.f = Fields::from_bytes(b);
        let read = Frame::parse(&probe, payload.as_ref()).as_ref() != Ok(&fr);
        let want = if read { came[i] } else { 0 };
        assert_eq!(
            went[i], want,
            "{fr:?} re-emitted: byte {i} of the fields (read: {read})"
        );
    }
    let back = Frame::parse(&again, Some(&SharedBytes::of_slice(&bytes)));
    assert_eq!(back.as_ref(), Ok(&fr), "parse(emit(fr)) != fr");
    Ok(head.kind)
}
