//! The shm wire's frames: what one slot of a mailbox ring carries, typed.
//! This is the one place that encodes and decodes a slot's kind fields
//! (`SlotHead::f`) and its iov payloads; `mailbox.rs` moves the bytes,
//! `machine.rs` only ever sees `Frame`s.
//!
//! ```text
//! kind   fields (bytes of SlotHead::f)                  payload
//! EAGER  0 tag u64  8 data u64  16 flags u32            the message
//!        20 copy_ns u32 (what writing a spanning payload took its
//!        sender, for our copy-or-pull choice; 0: not timed)
//! RTS    0 tag  8 data  16 flags  20 niov u32  24 key   niov × (addr u64, len u64);
//!                                                       the message is their sum
//! CTS    0 key u64  8 rid u64                           none: "push `key` to me as rid"
//! DATA   0 rid u64  8 offset u64                        bytes of rid from offset
//! FIN    0 key u64  8 status i64 (0 or -errno)          none: the rendezvous is over
//! CTW    0 key  8 rid  16 offset u64  24 grant u64      niov × (addr, len): "write
//!                                                       your bytes from offset on here"
//! WDONE  0 rid u64  8 status i64 (0 or -errno)          none: the sender's share is written
//! ```
//!
//! Everything in a slot is written by another process and is checked here
//! before anything else sees it: an unknown kind, a payload longer than a
//! slot, an iov list that does not match its count or whose lengths
//! overflow, a payload on a frame that has none, a grant index beyond the
//! ring's, a status that is no error number: each is `Malformed`, and the
//! machine cuts the ring's producer off.

#![forbid(unsafe_code)]

use super::cma::Range;
use super::mailbox::{Fields, SlotHead, GRANTS};
use super::mapping::SharedBytes;
use crate::proto::MemRanges;
use crate::proto::MsgHdr;

/// Slot kinds.
pub mod kind {
    pub const EAGER: u8 = 1;
    pub const RTS: u8 = 2;
    pub const CTS: u8 = 3;
    pub const DATA: u8 = 4;
    pub const FIN: u8 = 5;
    pub const CTW: u8 = 6;
    pub const WDONE: u8 = 7;
}

/// One frame of the shm protocol. `key` names a rendezvous send (chosen by
/// its sender), `rid` a rendezvous receive (chosen by its receiver).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Frame {
    /// A message in the slot; `hdr.len` is its payload length.
    Eager { hdr: MsgHdr },
    /// A rendezvous request: the message is at `iov` in the sender's
    /// memory; `hdr.len` is their total length.
    Rts { hdr: MsgHdr, key: u64, iov: MemRanges },
    /// Push `key`'s data to me through your ring (no cross-memory attach).
    Cts { key: u64, rid: u64 },
    /// `len` bytes of `rid`'s data from `off` on, in the slot.
    Data { rid: u64, off: u64, len: usize },
    /// The rendezvous of `key` is over: 0, or the receiver's -errno.
    Fin { key: u64, status: i32 },
    /// Write your bytes of `key` from `at` on into `iov` of mine, under
    /// grant word `grant` of your ring, for receive `rid`.
    Ctw {
        key: u64,
        rid: u64,
        at: u64,
        grant: usize,
        iov: MemRanges,
    },
    /// The sender's share of `rid` is written (0) or not (-errno).
    Wdone { rid: u64, status: i64 },
}

/// Why a slot is not a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Malformed {
    Kind(u8),
    /// The payload length exceeds the slot.
    TooLong,
    /// An iov payload that does not match its count (RTS) or is not a
    /// whole number of entries (CTW).
    IovList,
    /// Iov lengths whose sum overflows.
    IovSum,
    /// A payload on a frame that carries none.
    Payload,
    Grant,
    Status,
}

impl Malformed {
    pub fn why(&self) -> &'static str {
        match self {
            Malformed::Kind(_) => "unknown slot kind",
            Malformed::TooLong => "payload longer than a slot",
            Malformed::IovList => "bad iov list",
            Malformed::IovSum => "iov lengths overflow",
            Malformed::Payload => "payload on a control frame",
            Malformed::Grant => "grant index out of range",
            Malformed::Status => "status is no error number",
        }
    }
}

fn hdr_fields(hdr: &MsgHdr) -> Fields {
    Fields([hdr.tag, hdr.data, hdr.flags as u64, 0])
}

fn hdr_of(f: &Fields, len: u64) -> MsgHdr {
    MsgHdr {
        tag: f.u64(0),
        data: f.u64(8),
        flags: f.u32(16),
        len,
    }
}

/// Bytes an iov list takes in a payload.
pub(crate) fn iov_bytes(n: usize) -> usize {
    n * 16
}

/// Writes `iov` as (addr u64, len u64) pairs.
pub(crate) fn encode_iov(iov: &[Range], dst: &mut [u8]) {
    for (c, &(a, l)) in dst.chunks_mut(16).zip(iov) {
        c[0..8].copy_from_slice(&a.to_le_bytes());
        c[8..16].copy_from_slice(&l.to_le_bytes());
    }
}

/// An iov list from a payload of whole entries, and its total length.
fn decode_iov(p: &SharedBytes<'_>) -> Result<(MemRanges, u64), Malformed> {
    if !p.len().is_multiple_of(16) {
        return Err(Malformed::IovList);
    }
    let mut v = MemRanges::with_capacity(p.len() / 16);
    let mut total = 0u64;
    let mut e = [0u8; 16];
    for i in 0..p.len() / 16 {
        p.copy_to(i * 16, &mut e);
        let a = u64::from_le_bytes(e[0..8].try_into().unwrap());
        let l = u64::from_le_bytes(e[8..16].try_into().unwrap());
        total = total.checked_add(l).ok_or(Malformed::IovSum)?;
        v.push((a, l));
    }
    Ok((v, total))
}

/// A status field: 0 or a negative error number.
fn status_of(v: u64) -> Result<i64, Malformed> {
    let s = v as i64;
    if (-(i32::MAX as i64)..=0).contains(&s) {
        Ok(s)
    } else {
        Err(Malformed::Status)
    }
}

impl Frame {
    /// The frame in a slot with header `h` and payload `payload` (`None`
    /// when the header's length does not fit the slot).
    pub fn parse(h: &SlotHead, payload: Option<&SharedBytes<'_>>) -> Result<Frame, Malformed> {
        let f = &h.f;
        let p = payload.ok_or(Malformed::TooLong)?;
        let none = || if p.is_empty() { Ok(()) } else { Err(Malformed::Payload) };
        Ok(match h.kind {
            kind::EAGER => Frame::Eager {
                hdr: hdr_of(f, p.len() as u64),
            },
            kind::RTS => {
                let niov = f.u32(20) as usize;
                if p.len() != iov_bytes(niov) {
                    return Err(Malformed::IovList);
                }
                let (iov, total) = decode_iov(p)?;
                Frame::Rts {
                    hdr: hdr_of(f, total),
                    key: f.u64(24),
                    iov,
                }
            }
            kind::CTS => {
                none()?;
                Frame::Cts {
                    key: f.u64(0),
                    rid: f.u64(8),
                }
            }
            kind::DATA => Frame::Data {
                rid: f.u64(0),
                off: f.u64(8),
                len: p.len(),
            },
            kind::FIN => {
                none()?;
                Frame::Fin {
                    key: f.u64(0),
                    status: status_of(f.u64(8))? as i32,
                }
            }
            kind::CTW => {
                let grant = usize::try_from(f.u64(24)).map_err(|_| Malformed::Grant)?;
                if grant >= GRANTS {
                    return Err(Malformed::Grant);
                }
                let (iov, _) = decode_iov(p)?;
                Frame::Ctw {
                    key: f.u64(0),
                    rid: f.u64(8),
                    at: f.u64(16),
                    grant,
                    iov,
                }
            }
            kind::WDONE => {
                none()?;
                Frame::Wdone {
                    rid: f.u64(0),
                    status: status_of(f.u64(8))?,
                }
            }
            k => return Err(Malformed::Kind(k)),
        })
    }

    /// `parse` of an EAGER slot (`h.kind == kind::EAGER`) with a payload
    /// of `len` bytes, which fits its slot: the frame's header, without
    /// the frame.
    pub fn eager_hdr(h: &SlotHead, len: usize) -> MsgHdr {
        debug_assert_eq!(h.kind, kind::EAGER);
        hdr_of(&h.f, len as u64)
    }

    /// The slot header of `Frame::Eager { hdr }` (`head`), without the
    /// frame: the send path's, which has the header in hand.
    pub fn eager_head(hdr: &MsgHdr) -> SlotHead {
        SlotHead {
            kind: kind::EAGER,
            len: hdr.len as usize,
            f: hdr_fields(hdr),
        }
    }

    /// An EAGER slot header `h` that says its payload took its sender
    /// `ns` to write (`copy_ns`; beyond four seconds counted as four).
    pub fn stamped(h: &SlotHead, ns: u64) -> SlotHead {
        debug_assert_eq!(h.kind, kind::EAGER);
        let mut h = *h;
        h.f.set_u32(20, u32::try_from(ns).unwrap_or(u32::MAX));
        h
    }

    /// What an EAGER slot's payload took its sender to write, if it says
    /// (`stamped`). A peer could say anything here: it moves only which
    /// way we ask for spanning messages, both of which deliver them.
    pub fn copy_ns(h: &SlotHead) -> u32 {
        h.f.u32(20)
    }

    /// The slot header that carries this frame.
    pub fn head(&self) -> SlotHead {
        let mut f = Fields::default();
        let (kind, len) = match self {
            Frame::Eager { hdr } => return Frame::eager_head(hdr),
            Frame::Rts { hdr, key, iov } => {
                f = hdr_fields(hdr);
                f.set_u32(20, iov.len() as u32);
                f.set_u64(24, *key);
                (kind::RTS, iov_bytes(iov.len()))
            }
            Frame::Cts { key, rid } => {
                f.set_u64(0, *key);
                f.set_u64(8, *rid);
                (kind::CTS, 0)
            }
            Frame::Data { rid, off, len } => {
                f.set_u64(0, *rid);
                f.set_u64(8, *off);
                (kind::DATA, *len)
            }
            Frame::Fin { key, status } => {
                f.set_u64(0, *key);
                f.set_u64(8, *status as i64 as u64);
                (kind::FIN, 0)
            }
            Frame::Ctw {
                key,
                rid,
                at,
                grant,
                iov,
            } => {
                f.set_u64(0, *key);
                f.set_u64(8, *rid);
                f.set_u64(16, *at);
                f.set_u64(24, *grant as u64);
                (kind::CTW, iov_bytes(iov.len()))
            }
            Frame::Wdone { rid, status } => {
                f.set_u64(0, *rid);
                f.set_u64(8, *status as u64);
                (kind::WDONE, 0)
            }
        };
        SlotHead { kind, len, f }
    }

    /// Writes the payload the frame itself carries (the iov list of an RTS
    /// or CTW; an EAGER's or DATA's bytes come from the message).
    pub fn write_payload(&self, dst: &mut [u8]) {
        match self {
            Frame::Rts { iov, .. } | Frame::Ctw { iov, .. } => encode_iov(iov, dst),
            _ => {}
        }
    }

    /// The whole slot that carries this frame: its header and payload, made
    /// by `head` and `write_payload` (the encoder the machine writes rings
    /// with, straight into the slot), with `body` as the message bytes of
    /// an EAGER or DATA frame (its header's length of them; the other
    /// kinds ignore it). For the tests and the fuzz targets, which so carry
    /// no encoder of their own.
    #[cfg(any(test, feature = "fuzz"))]
    pub fn emit(&self, body: &[u8]) -> (SlotHead, Vec<u8>) {
        let h = self.head();
        let mut p = vec![0u8; h.len];
        match self {
            Frame::Eager { .. } | Frame::Data { .. } => p.copy_from_slice(body),
            _ => self.write_payload(&mut p),
        }
        (h, p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix;
    use smallvec::smallvec;

    fn round_trip(fr: &Frame) -> Result<Frame, Malformed> {
        let body: Vec<u8> = (0..fr.head().len).map(|i| i as u8).collect();
        let (h, p) = fr.emit(&body);
        Frame::parse(&h, Some(&SharedBytes::of_slice(&p)))
    }

    fn hdr(len: u64) -> MsgHdr {
        MsgHdr {
            tag: 0x1122_3344_5566_7788,
            data: 99,
            len,
            flags: MsgHdr::TAGGED | MsgHdr::HAS_DATA,
        }
    }

    #[test]
    fn every_frame_parses_back_to_itself() {
        let iov: MemRanges = smallvec![(0x1000, 3000), (0x9000, 5)];
        for fr in [
            Frame::Eager { hdr: hdr(17) },
            Frame::Eager { hdr: hdr(0) },
            Frame::Rts {
                hdr: hdr(3005),
                key: 7,
                iov: iov.clone(),
            },
            Frame::Rts {
                hdr: hdr(0),
                key: 8,
                iov: smallvec![],
            },
            Frame::Cts { key: 1, rid: 2 },
            Frame::Data {
                rid: 3,
                off: 4096,
                len: 100,
            },
            Frame::Fin { key: 5, status: 0 },
            Frame::Fin {
                key: 5,
                status: -(libc::EIO),
            },
            Frame::Ctw {
                key: 6,
                rid: 7,
                at: 8192,
                grant: GRANTS - 1,
                iov: iov.clone(),
            },
            Frame::Wdone {
                rid: 9,
                status: -(libc::ECANCELED as i64),
            },
        ] {
            assert_eq!(round_trip(&fr), Ok(fr.clone()), "{fr:?}");
        }
    }

    /// A header of `kind` with `len` payload bytes, the rest from `f`.
    fn raw(kind: u8, len: usize, f: [u8; 32]) -> (SlotHead, Vec<u8>) {
        (
            SlotHead {
                kind,
                len,
                f: Fields::from_bytes(f),
            },
            vec![0u8; len],
        )
    }

    fn parse_raw(h: &SlotHead, p: &[u8]) -> Result<Frame, Malformed> {
        Frame::parse(h, Some(&SharedBytes::of_slice(p)))
    }

    #[test]
    fn a_stamped_eager_slot_is_the_same_message() {
        let fr = Frame::Eager { hdr: hdr(17) };
        let plain = fr.head();
        assert_eq!(Frame::copy_ns(&plain), 0, "not timed");
        let h = Frame::stamped(&plain, 1234);
        assert_eq!(Frame::copy_ns(&h), 1234);
        assert_eq!(Frame::copy_ns(&Frame::stamped(&plain, u64::MAX)), u32::MAX);
        let body = [5u8; 17];
        assert_eq!(Frame::parse(&h, Some(&SharedBytes::of_slice(&body))), Ok(fr));
        assert_eq!(Frame::eager_hdr(&h, 17), hdr(17));
    }

    #[test]
    fn malformed_slots_are_refused_with_their_reason() {
        let mut f = [0u8; 32];
        // An RTS announcing five iovs with one sent.
        f[20] = 5;
        let (h, p) = raw(kind::RTS, 16, f);
        assert_eq!(parse_raw(&h, &p), Err(Malformed::IovList));
        // Iov lengths that overflow.
        let fr = Frame::Rts {
            hdr: hdr(0),
            key: 1,
            iov: smallvec![(0, u64::MAX), (0, 1)],
        };
        let (h, p) = fr.emit(&[]);
        assert_eq!(parse_raw(&h, &p), Err(Malformed::IovSum));
        // A CTW whose list is not whole entries, or whose grant is beyond
        // the ring's.
        let (h, p) = raw(kind::CTW, 17, [0; 32]);
        assert_eq!(parse_raw(&h, &p), Err(Malformed::IovList));
        let mut f = [0u8; 32];
        f[24] = GRANTS as u8;
        let (h, p) = raw(kind::CTW, 16, f);
        assert_eq!(parse_raw(&h, &p), Err(Malformed::Grant));
        // Control frames carry nothing.
        for k in [kind::CTS, kind::FIN, kind::WDONE] {
            let (h, p) = raw(k, 1, [0; 32]);
            assert_eq!(parse_raw(&h, &p), Err(Malformed::Payload), "kind {k}");
        }
        // A status that is no error number.
        for k in [kind::FIN, kind::WDONE] {
            let mut f = [0u8; 32];
            f[8] = 1;
            let (h, p) = raw(k, 0, f);
            assert_eq!(parse_raw(&h, &p), Err(Malformed::Status), "kind {k}");
        }
        // Unknown kinds, and a length the slot does not hold.
        for k in [0u8, 8, 99, 255] {
            let (h, p) = raw(k, 0, [0; 32]);
            assert_eq!(parse_raw(&h, &p), Err(Malformed::Kind(k)));
        }
        let (h, _) = raw(kind::EAGER, 1 << 20, [0; 32]);
        assert_eq!(Frame::parse(&h, None), Err(Malformed::TooLong));
    }

    /// Random slots: whatever a peer writes, parsing returns (never panics),
    /// and what it accepts re-encodes to the same header.
    #[test]
    fn random_slots_parse_or_are_refused() {
        let mut rng = SplitMix::new(0x5eed_f00d);
        let mut accepted = 0;
        for _ in 0..20_000 {
            let kind = (rng.next_u64() % 9) as u8;
            let len = match rng.next_u64() % 4 {
                0 => 0,
                1 => 16,
                2 => 32,
                _ => (rng.next_u64() % 80) as usize,
            };
            let mut f = [0u8; 32];
            for b in f.iter_mut() {
                // Mostly small values, so that counts and grants sometimes fit.
                *b = if rng.next_u64().is_multiple_of(3) {
                    rng.next_u64() as u8
                } else {
                    0
                };
            }
            if kind == kind::RTS && rng.next_u64().is_multiple_of(2) {
                f[20..24].copy_from_slice(&((len / 16) as u32).to_le_bytes());
            }
            let p: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            let h = SlotHead {
                kind,
                len,
                f: Fields::from_bytes(f),
            };
            if let Ok(fr) = parse_raw(&h, &p) {
                accepted += 1;
                let back = fr.head();
                assert_eq!((back.kind, back.len), (h.kind, h.len), "{fr:?}");
                assert_eq!(round_trip(&fr).map(|_| ()), Ok(()));
            }
        }
        assert!(accepted > 1000, "the generator reaches valid frames: {accepted}");
    }
}
