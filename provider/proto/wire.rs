//! Datagram codec of the UDP wire. All integers little-endian.
//!
//! ```text
//! every datagram:  0 magic u16 = 0x4E47 ("GN")  2 version u8 = 4  3 kind u8
//! CONN_REQ:        4 nonce u64 (sender's connection id)  12 cookie u64 (the
//!                  cookie of the CHALLENGE it answers; 0: none)
//!                  20 isn u32  24 rcv_window u32                            = 28
//! CONN_RESP:       4 nonce u64 (sender's connection id)  12 echo u64 (the
//!                  requester's nonce)  20 isn u32  24 rcv_window u32         = 28
//! CHALLENGE:       4 echo u64 (the nonce of the CONN_REQ it answers)
//!                  12 cookie u64 (nonzero)                                   = 20
//!                  (the answer to a CONN_REQ with a new nonce from the address
//!                  of an established VC, or to a first contact while too many
//!                  VCs are unproven: only a requester that receives what is
//!                  sent to that address can echo the cookie; see conn.rs)
//! ACK:             4 conn u64 (receiver's connection id)  12 ack u32
//!                  16 sack u64                                               = 24
//! CREDIT:          4 conn u64  12 granted u32 (cumulative credits lent to the
//!                  receiver of this datagram)  16 returned u32 (cumulative
//!                  credits its sender gave back)  20 credit byte u8          = 21
//!                  (unreliable: every field is cumulative; see credit.rs)
//! segment kinds:   ACK fields, then 24 seq u32                               = 28 + body
//!   MSG       tag u64, data u64, flags u32, reserved u32, total u64 | payload   (first segment of an eager message)
//!   MSG_CONT  offset u64 | payload                                             (later segments, in order)
//!   RTS       tag u64, data u64, flags u32, push u32, total u64, key u64
//!             | tail   (the message's last bytes, fewer than total: what
//!             would otherwise take one short RDATA segment of its own).
//!             `push`: the sender sends bytes [0, push) as PDATA right
//!             behind the RTS, without waiting for a GET; less than
//!             total - tail, so the receiver always asks for the rest
//!   GET       key u64, rid u64, offset u64, len u64
//!   GET_LAST  as GET; the last range the receiver asks for: the sender's
//!             message is complete once the data it asks for is acknowledged
//!   RDATA     rid u64, offset u64 | payload
//!   PDATA     key u64, offset u64 | payload   (pushed data: RDATA the
//!             receiver did not ask for, named by the sender's key)
//!   FIN       key u64   (the receiver wants no more data: it wanted none,
//!             or it discarded the message mid-pull)
//!   NOP       (nothing: keepalive, or a retransmission whose content is moot)
//! ```
//! `ack` is the next sequence number the sender of the datagram expects;
//! bit i of `sack` says it holds `ack + 1 + i`. `key` is the sender's
//! message id, `rid` the receiver's rendezvous id.

pub const MAGIC: u16 = 0x4E47;
/// 2: GET_LAST, no FIN after a complete pull, RTS with a tail.
/// 3: PDATA, the RTS's push field.
/// 4: CHALLENGE, and CONN_REQ's cookie (where a zero echo was). A
///    CHALLENGE may also answer a first contact (no format change: a
///    version-4 requester answers it as it answers any CHALLENGE).
pub const VERSION: u8 = 4;

pub mod kind {
    pub const CONN_REQ: u8 = 1;
    pub const CONN_RESP: u8 = 2;
    pub const ACK: u8 = 3;
    pub const CREDIT: u8 = 4;
    pub const CHALLENGE: u8 = 5;
    pub const MSG: u8 = 0x10;
    pub const MSG_CONT: u8 = 0x11;
    pub const RTS: u8 = 0x12;
    pub const GET: u8 = 0x13;
    pub const RDATA: u8 = 0x14;
    pub const FIN: u8 = 0x15;
    pub const NOP: u8 = 0x16;
    pub const GET_LAST: u8 = 0x17;
    pub const PDATA: u8 = 0x18;
}

pub const CONN_LEN: usize = 28;
pub const ACK_LEN: usize = 24;
pub const CREDIT_LEN: usize = 21;
pub const CHALLENGE_LEN: usize = 20;
pub const SEG_HDR_LEN: usize = 28;
pub const MSG_BODY_LEN: usize = 32;
pub const MSG_CONT_BODY_LEN: usize = 8;
pub const RTS_BODY_LEN: usize = 40;
pub const GET_BODY_LEN: usize = 32;
pub const RDATA_BODY_LEN: usize = 16;
pub const FIN_BODY_LEN: usize = 8;

/// Smallest `max_datagram` that can carry every frame with at least one
/// payload byte.
pub const MIN_DATAGRAM: usize = SEG_HDR_LEN + RTS_BODY_LEN + 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    Truncated,
    BadMagic,
    BadVersion,
    BadKind,
    /// A length or offset field that cannot be right.
    BadField,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Packet<'a> {
    ConnReq {
        nonce: u64,
        /// 0: none.
        cookie: u64,
        isn: u32,
        window: u32,
    },
    ConnResp {
        nonce: u64,
        echo: u64,
        isn: u32,
        window: u32,
    },
    Challenge {
        echo: u64,
        cookie: u64,
    },
    Ack {
        conn: u64,
        ack: u32,
        sack: u64,
    },
    Credit {
        conn: u64,
        granted: u32,
        returned: u32,
        byte: u8,
    },
    Seg {
        conn: u64,
        ack: u32,
        sack: u64,
        seq: u32,
        frame: Frame<'a>,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    Msg {
        tag: u64,
        data: u64,
        flags: u32,
        total: u64,
        payload: &'a [u8],
    },
    MsgCont {
        offset: u64,
        payload: &'a [u8],
    },
    Rts {
        tag: u64,
        data: u64,
        flags: u32,
        total: u64,
        key: u64,
        push: u32,
        tail: &'a [u8],
    },
    Get {
        key: u64,
        rid: u64,
        offset: u64,
        len: u64,
        last: bool,
    },
    RData {
        rid: u64,
        offset: u64,
        payload: &'a [u8],
    },
    PData {
        key: u64,
        offset: u64,
        payload: &'a [u8],
    },
    Fin {
        key: u64,
    },
    Nop,
}

/// A frame without its payload: what the sender encodes before copying the
/// payload straight from its source into the datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameHead {
    Msg {
        tag: u64,
        data: u64,
        flags: u32,
        total: u64,
    },
    MsgCont {
        offset: u64,
    },
    Rts {
        tag: u64,
        data: u64,
        flags: u32,
        total: u64,
        key: u64,
        push: u32,
    },
    Get {
        key: u64,
        rid: u64,
        offset: u64,
        len: u64,
        last: bool,
    },
    RData {
        rid: u64,
        offset: u64,
    },
    PData {
        key: u64,
        offset: u64,
    },
    Fin {
        key: u64,
    },
    Nop,
}

impl FrameHead {
    pub fn kind(&self) -> u8 {
        match self {
            FrameHead::Msg { .. } => kind::MSG,
            FrameHead::MsgCont { .. } => kind::MSG_CONT,
            FrameHead::Rts { .. } => kind::RTS,
            FrameHead::Get { last, .. } => {
                if *last {
                    kind::GET_LAST
                } else {
                    kind::GET
                }
            }
            FrameHead::RData { .. } => kind::RDATA,
            FrameHead::PData { .. } => kind::PDATA,
            FrameHead::Fin { .. } => kind::FIN,
            FrameHead::Nop => kind::NOP,
        }
    }

    pub fn body_len(&self) -> usize {
        match self {
            FrameHead::Msg { .. } => MSG_BODY_LEN,
            FrameHead::MsgCont { .. } => MSG_CONT_BODY_LEN,
            FrameHead::Rts { .. } => RTS_BODY_LEN,
            FrameHead::Get { .. } => GET_BODY_LEN,
            FrameHead::RData { .. } | FrameHead::PData { .. } => RDATA_BODY_LEN,
            FrameHead::Fin { .. } => FIN_BODY_LEN,
            FrameHead::Nop => 0,
        }
    }

    /// Writes the body fields at the start of `b` (which must hold
    /// `body_len()` bytes).
    fn write_body(&self, b: &mut [u8]) {
        match *self {
            FrameHead::Msg {
                tag,
                data,
                flags,
                total,
            } => {
                put_u64(b, 0, tag);
                put_u64(b, 8, data);
                put_u32(b, 16, flags);
                put_u32(b, 20, 0);
                put_u64(b, 24, total);
            }
            FrameHead::MsgCont { offset } => put_u64(b, 0, offset),
            FrameHead::Rts {
                tag,
                data,
                flags,
                total,
                key,
                push,
            } => {
                put_u64(b, 0, tag);
                put_u64(b, 8, data);
                put_u32(b, 16, flags);
                put_u32(b, 20, push);
                put_u64(b, 24, total);
                put_u64(b, 32, key);
            }
            FrameHead::Get {
                key, rid, offset, len, ..
            } => {
                put_u64(b, 0, key);
                put_u64(b, 8, rid);
                put_u64(b, 16, offset);
                put_u64(b, 24, len);
            }
            FrameHead::RData { rid: id, offset } | FrameHead::PData { key: id, offset } => {
                put_u64(b, 0, id);
                put_u64(b, 8, offset);
            }
            FrameHead::Fin { key } => put_u64(b, 0, key),
            FrameHead::Nop => {}
        }
    }
}

#[inline]
fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
#[inline]
fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}
#[inline]
fn get_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}
#[inline]
fn get_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

fn put_preamble(b: &mut [u8], kind: u8) {
    b[0..2].copy_from_slice(&MAGIC.to_le_bytes());
    b[2] = VERSION;
    b[3] = kind;
}

pub fn encode_conn_req(b: &mut [u8], nonce: u64, cookie: u64, isn: u32, window: u32) -> usize {
    put_preamble(b, kind::CONN_REQ);
    put_u64(b, 4, nonce);
    put_u64(b, 12, cookie);
    put_u32(b, 20, isn);
    put_u32(b, 24, window);
    CONN_LEN
}

pub fn encode_conn_resp(b: &mut [u8], nonce: u64, echo: u64, isn: u32, window: u32) -> usize {
    put_preamble(b, kind::CONN_RESP);
    put_u64(b, 4, nonce);
    put_u64(b, 12, echo);
    put_u32(b, 20, isn);
    put_u32(b, 24, window);
    CONN_LEN
}

pub fn encode_challenge(b: &mut [u8], echo: u64, cookie: u64) -> usize {
    put_preamble(b, kind::CHALLENGE);
    put_u64(b, 4, echo);
    put_u64(b, 12, cookie);
    CHALLENGE_LEN
}

pub fn encode_ack(b: &mut [u8], conn: u64, ack: u32, sack: u64) -> usize {
    put_preamble(b, kind::ACK);
    put_u64(b, 4, conn);
    put_u32(b, 12, ack);
    put_u64(b, 16, sack);
    ACK_LEN
}

pub fn encode_credit(b: &mut [u8], conn: u64, granted: u32, returned: u32, byte: u8) -> usize {
    put_preamble(b, kind::CREDIT);
    put_u64(b, 4, conn);
    put_u32(b, 12, granted);
    put_u32(b, 16, returned);
    b[20] = byte;
    CREDIT_LEN
}

/// Writes segment header and frame body; returns where the payload starts.
/// The caller copies the payload there and sends `start + payload len` bytes.
pub fn encode_seg_head(b: &mut [u8], conn: u64, ack: u32, sack: u64, seq: u32, head: &FrameHead) -> usize {
    // One bounds check for the fixed header instead of one per field: this
    // runs for every segment of bulk data.
    let h: &mut [u8; SEG_HDR_LEN] = (&mut b[..SEG_HDR_LEN]).try_into().expect("slice of SEG_HDR_LEN");
    h[0..2].copy_from_slice(&MAGIC.to_le_bytes());
    h[2] = VERSION;
    h[3] = head.kind();
    h[4..12].copy_from_slice(&conn.to_le_bytes());
    h[12..16].copy_from_slice(&ack.to_le_bytes());
    h[16..24].copy_from_slice(&sack.to_le_bytes());
    h[24..28].copy_from_slice(&seq.to_le_bytes());
    head.write_body(&mut b[SEG_HDR_LEN..]);
    SEG_HDR_LEN + head.body_len()
}

pub fn decode(b: &[u8]) -> Result<Packet<'_>, DecodeError> {
    if b.len() < 4 {
        return Err(DecodeError::Truncated);
    }
    if b[0..2] != MAGIC.to_le_bytes() {
        return Err(DecodeError::BadMagic);
    }
    if b[2] != VERSION {
        return Err(DecodeError::BadVersion);
    }
    let k = b[3];
    match k {
        kind::CONN_REQ | kind::CONN_RESP => {
            if b.len() != CONN_LEN {
                return Err(DecodeError::Truncated);
            }
            let nonce = get_u64(b, 4);
            let echo = get_u64(b, 12);
            let isn = get_u32(b, 20);
            let window = get_u32(b, 24);
            if nonce == 0 || window == 0 {
                return Err(DecodeError::BadField);
            }
            if k == kind::CONN_REQ {
                Ok(Packet::ConnReq {
                    nonce,
                    cookie: echo,
                    isn,
                    window,
                })
            } else {
                if echo == 0 {
                    return Err(DecodeError::BadField);
                }
                Ok(Packet::ConnResp {
                    nonce,
                    echo,
                    isn,
                    window,
                })
            }
        }
        kind::CHALLENGE => {
            if b.len() != CHALLENGE_LEN {
                return Err(DecodeError::Truncated);
            }
            let (echo, cookie) = (get_u64(b, 4), get_u64(b, 12));
            if echo == 0 || cookie == 0 {
                return Err(DecodeError::BadField);
            }
            Ok(Packet::Challenge { echo, cookie })
        }
        kind::ACK => {
            if b.len() != ACK_LEN {
                return Err(DecodeError::Truncated);
            }
            Ok(Packet::Ack {
                conn: get_u64(b, 4),
                ack: get_u32(b, 12),
                sack: get_u64(b, 16),
            })
        }
        kind::CREDIT => {
            if b.len() != CREDIT_LEN {
                return Err(DecodeError::Truncated);
            }
            Ok(Packet::Credit {
                conn: get_u64(b, 4),
                granted: get_u32(b, 12),
                returned: get_u32(b, 16),
                byte: b[20],
            })
        }
        kind::MSG..=kind::PDATA => {
            if b.len() < SEG_HDR_LEN {
                return Err(DecodeError::Truncated);
            }
            let frame = decode_frame(k, &b[SEG_HDR_LEN..])?;
            Ok(Packet::Seg {
                conn: get_u64(b, 4),
                ack: get_u32(b, 12),
                sack: get_u64(b, 16),
                seq: get_u32(b, 24),
                frame,
            })
        }
        _ => Err(DecodeError::BadKind),
    }
}

/// Decodes a segment's frame from its kind and the bytes after the segment
/// header (also used for segments parked out of order).
pub fn decode_frame(k: u8, b: &[u8]) -> Result<Frame<'_>, DecodeError> {
    let need = |n: usize| {
        if b.len() < n {
            Err(DecodeError::Truncated)
        } else {
            Ok(())
        }
    };
    let exact = |n: usize| {
        if b.len() != n {
            Err(DecodeError::Truncated)
        } else {
            Ok(())
        }
    };
    match k {
        kind::MSG => {
            need(MSG_BODY_LEN)?;
            let total = get_u64(b, 24);
            let payload = &b[MSG_BODY_LEN..];
            // The first segment carries as much of the message as fits, and
            // at least one byte always fits (MIN_DATAGRAM).
            if (payload.len() as u64) > total || (payload.is_empty() && total > 0) {
                return Err(DecodeError::BadField);
            }
            Ok(Frame::Msg {
                tag: get_u64(b, 0),
                data: get_u64(b, 8),
                flags: get_u32(b, 16),
                total,
                payload,
            })
        }
        kind::MSG_CONT => {
            need(MSG_CONT_BODY_LEN)?;
            let offset = get_u64(b, 0);
            let payload = &b[MSG_CONT_BODY_LEN..];
            if payload.is_empty() || offset.checked_add(payload.len() as u64).is_none() {
                return Err(DecodeError::BadField);
            }
            Ok(Frame::MsgCont { offset, payload })
        }
        kind::RTS => {
            need(RTS_BODY_LEN)?;
            let total = get_u64(b, 24);
            let tail = &b[RTS_BODY_LEN..];
            let push = get_u32(b, 20);
            // At least one byte is left to pull: neither the tail nor the
            // tail and the pushed bytes are ever the whole message.
            if tail.len() as u64 + push as u64 >= total.max(1) {
                return Err(DecodeError::BadField);
            }
            Ok(Frame::Rts {
                tag: get_u64(b, 0),
                data: get_u64(b, 8),
                flags: get_u32(b, 16),
                total,
                key: get_u64(b, 32),
                push,
                tail,
            })
        }
        kind::GET | kind::GET_LAST => {
            exact(GET_BODY_LEN)?;
            let (offset, len) = (get_u64(b, 16), get_u64(b, 24));
            if len == 0 || offset.checked_add(len).is_none() {
                return Err(DecodeError::BadField);
            }
            Ok(Frame::Get {
                key: get_u64(b, 0),
                rid: get_u64(b, 8),
                offset,
                len,
                last: k == kind::GET_LAST,
            })
        }
        kind::RDATA | kind::PDATA => {
            need(RDATA_BODY_LEN)?;
            let (id, offset) = (get_u64(b, 0), get_u64(b, 8));
            let payload = &b[RDATA_BODY_LEN..];
            if payload.is_empty() || offset.checked_add(payload.len() as u64).is_none() {
                return Err(DecodeError::BadField);
            }
            Ok(if k == kind::RDATA {
                Frame::RData {
                    rid: id,
                    offset,
                    payload,
                }
            } else {
                Frame::PData {
                    key: id,
                    offset,
                    payload,
                }
            })
        }
        kind::FIN => {
            exact(FIN_BODY_LEN)?;
            Ok(Frame::Fin { key: get_u64(b, 0) })
        }
        kind::NOP => {
            exact(0)?;
            Ok(Frame::Nop)
        }
        _ => Err(DecodeError::BadKind),
    }
}

/// Bytes of an RDATA (or PDATA) segment before its payload.
pub const RDATA_HEAD_LEN: usize = SEG_HDR_LEN + RDATA_BODY_LEN;

/// The fields of an RDATA or PDATA segment header received apart from its
/// payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RDataHead {
    pub conn: u64,
    pub ack: u32,
    pub sack: u64,
    pub seq: u32,
    /// PDATA (`id` is the sender's key) rather than RDATA (`id` is our rid).
    pub pushed: bool,
    pub id: u64,
    pub offset: u64,
}

/// Decodes `b` as the header of an RDATA or PDATA segment, or None if it
/// is neither.
pub fn decode_rdata_head(b: &[u8]) -> Option<RDataHead> {
    if b.len() != RDATA_HEAD_LEN
        || b[0..2] != MAGIC.to_le_bytes()
        || b[2] != VERSION
        || !matches!(b[3], kind::RDATA | kind::PDATA)
    {
        return None;
    }
    Some(RDataHead {
        conn: get_u64(b, 4),
        ack: get_u32(b, 12),
        sack: get_u64(b, 16),
        seq: get_u32(b, 24),
        pushed: b[3] == kind::PDATA,
        id: get_u64(b, SEG_HDR_LEN),
        offset: get_u64(b, SEG_HDR_LEN + 8),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(head: FrameHead, payload: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; 256];
        let at = encode_seg_head(&mut b, 0xabcdef, 7, 0b101, u32::MAX, &head);
        b[at..at + payload.len()].copy_from_slice(payload);
        b.truncate(at + payload.len());
        b
    }

    #[test]
    fn round_trips() {
        let mut b = [0u8; 64];
        let n = encode_conn_req(&mut b, 9, 0, 77, 4096);
        assert_eq!(
            decode(&b[..n]),
            Ok(Packet::ConnReq {
                nonce: 9,
                cookie: 0,
                isn: 77,
                window: 4096
            })
        );
        let n = encode_conn_req(&mut b, 9, u64::MAX, 77, 4096);
        assert_eq!(
            decode(&b[..n]),
            Ok(Packet::ConnReq {
                nonce: 9,
                cookie: u64::MAX,
                isn: 77,
                window: 4096
            })
        );
        let n = encode_challenge(&mut b, 9, 0xc00c1e);
        assert_eq!(n, CHALLENGE_LEN);
        assert_eq!(
            decode(&b[..n]),
            Ok(Packet::Challenge {
                echo: 9,
                cookie: 0xc00c1e
            })
        );
        let n = encode_conn_resp(&mut b, 9, 10, 77, 8);
        assert_eq!(
            decode(&b[..n]),
            Ok(Packet::ConnResp {
                nonce: 9,
                echo: 10,
                isn: 77,
                window: 8
            })
        );
        let n = encode_ack(&mut b, 5, 6, 7);
        assert_eq!(
            decode(&b[..n]),
            Ok(Packet::Ack {
                conn: 5,
                ack: 6,
                sack: 7
            })
        );

        let n = encode_credit(&mut b, 5, 6, 7, 0x83);
        assert_eq!(
            decode(&b[..n]),
            Ok(Packet::Credit {
                conn: 5,
                granted: 6,
                returned: 7,
                byte: 0x83
            })
        );

        let big = 5u64 << 32; // offsets beyond 4 GiB survive the codec
        let cases: Vec<(FrameHead, &[u8], Frame)> = vec![
            (
                FrameHead::Msg {
                    tag: 1,
                    data: 2,
                    flags: 3,
                    total: 10,
                },
                b"abc",
                Frame::Msg {
                    tag: 1,
                    data: 2,
                    flags: 3,
                    total: 10,
                    payload: b"abc",
                },
            ),
            (
                FrameHead::MsgCont { offset: 3 },
                b"de",
                Frame::MsgCont {
                    offset: 3,
                    payload: b"de",
                },
            ),
            (
                FrameHead::Rts {
                    tag: 1,
                    data: 2,
                    flags: 3,
                    total: big,
                    key: 4,
                    push: u32::MAX,
                },
                b"",
                Frame::Rts {
                    tag: 1,
                    data: 2,
                    flags: 3,
                    total: big,
                    key: 4,
                    push: u32::MAX,
                    tail: b"",
                },
            ),
            (
                FrameHead::Rts {
                    tag: 1,
                    data: 2,
                    flags: 3,
                    total: 4,
                    key: 4,
                    push: 0,
                },
                b"xyz",
                Frame::Rts {
                    tag: 1,
                    data: 2,
                    flags: 3,
                    total: 4,
                    key: 4,
                    push: 0,
                    tail: b"xyz",
                },
            ),
            (
                FrameHead::Get {
                    key: 1,
                    rid: 2,
                    offset: big,
                    len: 4,
                    last: false,
                },
                b"",
                Frame::Get {
                    key: 1,
                    rid: 2,
                    offset: big,
                    len: 4,
                    last: false,
                },
            ),
            (
                FrameHead::Get {
                    key: 1,
                    rid: 2,
                    offset: 3,
                    len: 4,
                    last: true,
                },
                b"",
                Frame::Get {
                    key: 1,
                    rid: 2,
                    offset: 3,
                    len: 4,
                    last: true,
                },
            ),
            (
                FrameHead::RData { rid: 2, offset: big },
                b"xyz",
                Frame::RData {
                    rid: 2,
                    offset: big,
                    payload: b"xyz",
                },
            ),
            (
                FrameHead::PData { key: 9, offset: big },
                b"pq",
                Frame::PData {
                    key: 9,
                    offset: big,
                    payload: b"pq",
                },
            ),
            (FrameHead::Fin { key: 8 }, b"", Frame::Fin { key: 8 }),
            (FrameHead::Nop, b"", Frame::Nop),
        ];
        for (head, payload, frame) in cases {
            let b = seg(head, payload);
            assert_eq!(
                decode(&b),
                Ok(Packet::Seg {
                    conn: 0xabcdef,
                    ack: 7,
                    sack: 0b101,
                    seq: u32::MAX,
                    frame
                })
            );
            assert_prefixes(&b, &head);
        }
        // The fixed-length datagrams: every strict prefix is truncated.
        let mut fixed: Vec<Vec<u8>> = Vec::new();
        for f in [
            |b: &mut [u8]| encode_conn_req(b, 1, 2, 3, 4),
            |b: &mut [u8]| encode_conn_resp(b, 1, 2, 3, 4),
            |b: &mut [u8]| encode_challenge(b, 1, 2),
            |b: &mut [u8]| encode_ack(b, 1, 2, 3),
            |b: &mut [u8]| encode_credit(b, 1, 2, 3, 4),
        ] {
            let n = f(&mut b);
            fixed.push(b[..n].to_vec());
        }
        for d in fixed {
            assert!(decode(&d).is_ok());
            for cut in 0..d.len() {
                assert_eq!(
                    decode(&d[..cut]),
                    Err(DecodeError::Truncated),
                    "kind {} cut at {cut}",
                    d[3]
                );
            }
        }
    }

    /// Every strict prefix of the segment `b` (built from `head`) is
    /// rejected as truncated while it cuts into the header or frame body.
    /// Prefixes that cut into the payload are shorter datagrams of the same
    /// frame: a payload's length is the datagram's (UDP keeps datagram
    /// boundaries, so there is no length field to contradict), and such a
    /// prefix decodes to the same fields with a prefix of the payload,
    /// unless the frame needs a payload and none is left (MSG of a
    /// non-empty message, MSG_CONT, RDATA, PDATA), which is a bad field.
    fn assert_prefixes(b: &[u8], head: &FrameHead) {
        let whole = decode(b).expect("the whole segment decodes");
        let body_end = SEG_HDR_LEN + head.body_len();
        for cut in 0..b.len() {
            let got = decode(&b[..cut]);
            if cut < body_end {
                assert_eq!(got, Err(DecodeError::Truncated), "{head:?} cut at {cut}");
                continue;
            }
            let Packet::Seg {
                conn,
                ack,
                sack,
                seq,
                frame,
            } = whole
            else {
                unreachable!("{whole:?} is a segment")
            };
            let short = cut - body_end;
            let needs_payload = match frame {
                Frame::Msg { total, .. } => total > 0,
                Frame::MsgCont { .. } | Frame::RData { .. } | Frame::PData { .. } => true,
                _ => false,
            };
            if needs_payload && short == 0 {
                assert_eq!(got, Err(DecodeError::BadField), "{head:?} cut at {cut}");
                continue;
            }
            let want = match frame {
                Frame::Msg {
                    tag,
                    data,
                    flags,
                    total,
                    payload,
                } => Frame::Msg {
                    tag,
                    data,
                    flags,
                    total,
                    payload: &payload[..short],
                },
                Frame::MsgCont { offset, payload } => Frame::MsgCont {
                    offset,
                    payload: &payload[..short],
                },
                Frame::Rts {
                    tag,
                    data,
                    flags,
                    total,
                    key,
                    push,
                    tail,
                } => Frame::Rts {
                    tag,
                    data,
                    flags,
                    total,
                    key,
                    push,
                    tail: &tail[..short],
                },
                Frame::RData { rid, offset, payload } => Frame::RData {
                    rid,
                    offset,
                    payload: &payload[..short],
                },
                Frame::PData { key, offset, payload } => Frame::PData {
                    key,
                    offset,
                    payload: &payload[..short],
                },
                // No payload: the body's end is the segment's end.
                Frame::Get { .. } | Frame::Fin { .. } | Frame::Nop => unreachable!("{head:?} cut at {cut}"),
            };
            let want = Packet::Seg {
                conn,
                ack,
                sack,
                seq,
                frame: want,
            };
            assert_eq!(got, Ok(want), "{head:?} cut at {cut}");
        }
    }

    #[test]
    fn rejects_bad_input() {
        let mut b = seg(FrameHead::Fin { key: 1 }, b"");
        assert_eq!(decode(&b[..3]), Err(DecodeError::Truncated));
        assert_eq!(decode(&b[..b.len() - 1]), Err(DecodeError::Truncated));
        b[0] ^= 1;
        assert_eq!(decode(&b), Err(DecodeError::BadMagic));
        b[0] ^= 1;
        b[2] = VERSION + 1;
        assert_eq!(decode(&b), Err(DecodeError::BadVersion));
        b[2] = VERSION;
        b[3] = 0x7f;
        assert_eq!(decode(&b), Err(DecodeError::BadKind));
        let m = seg(
            FrameHead::Msg {
                tag: 0,
                data: 0,
                flags: 0,
                total: 2,
            },
            b"abc",
        );
        assert_eq!(decode(&m), Err(DecodeError::BadField));
        // The first segment of a non-empty message carries at least a byte.
        let empty_first = |total| {
            seg(
                FrameHead::Msg {
                    tag: 0,
                    data: 0,
                    flags: 0,
                    total,
                },
                b"",
            )
        };
        assert_eq!(decode(&empty_first(1)), Err(DecodeError::BadField));
        assert!(decode(&empty_first(0)).is_ok());
        let g = seg(
            FrameHead::Get {
                key: 0,
                rid: 0,
                offset: u64::MAX,
                len: 2,
                last: true,
            },
            b"",
        );
        assert_eq!(decode(&g), Err(DecodeError::BadField));
        let r = seg(
            FrameHead::RData {
                rid: 0,
                offset: u64::MAX,
            },
            b"ab",
        );
        assert_eq!(decode(&r), Err(DecodeError::BadField));
        let p = seg(FrameHead::PData { key: 0, offset: 5 }, b"");
        assert_eq!(decode(&p), Err(DecodeError::BadField));
        // A tail (and pushed bytes) as long as the message would leave
        // nothing to pull.
        let rts = |total, push| {
            seg(
                FrameHead::Rts {
                    tag: 0,
                    data: 0,
                    flags: 0,
                    total,
                    key: 0,
                    push,
                },
                b"abc",
            )
        };
        assert_eq!(decode(&rts(3, 0)), Err(DecodeError::BadField));
        assert!(decode(&rts(4, 0)).is_ok());
        assert_eq!(decode(&rts(10, 7)), Err(DecodeError::BadField));
        assert!(decode(&rts(10, 6)).is_ok());
        let mut c = [0u8; CONN_LEN];
        encode_conn_req(&mut c, 1, 0, 1, 1);
        c[4..12].fill(0);
        assert_eq!(decode(&c), Err(DecodeError::BadField));
        encode_conn_resp(&mut c, 1, 1, 1, 1);
        c[12..20].fill(0);
        assert_eq!(decode(&c), Err(DecodeError::BadField));
        let mut ch = [0u8; CHALLENGE_LEN];
        for (echo, cookie) in [(0, 1), (1, 0)] {
            encode_challenge(&mut ch, echo, cookie);
            assert_eq!(decode(&ch), Err(DecodeError::BadField));
        }
    }

    #[test]
    fn rdata_heads_name_their_kind() {
        for (head, pushed) in [
            (FrameHead::RData { rid: 3, offset: 70_000 }, false),
            (FrameHead::PData { key: 3, offset: 70_000 }, true),
        ] {
            let b = seg(head, b"x");
            let h = decode_rdata_head(&b[..RDATA_HEAD_LEN]).expect("an RDATA/PDATA head");
            assert_eq!((h.pushed, h.id, h.offset, h.seq), (pushed, 3, 70_000, u32::MAX));
        }
        let fin = seg(FrameHead::Fin { key: 1 }, &[0u8; 8]);
        assert_eq!(decode_rdata_head(&fin[..RDATA_HEAD_LEN]), None);
    }
}
