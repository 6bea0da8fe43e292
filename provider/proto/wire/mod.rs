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
//!   MSG       tag u64, data u64, flags u32, bits u32, total u64 | payload   (first segment of an eager message)
//!             `bits`: MSG_AWAITED (1), the sender's completion waits for
//!             the message's ACK; the others zero, ignored
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
//!
//! In the manner of smoltcp: the byte ranges of every field are named in
//! `field`, and each kind is a typed value with `parse` and `emit`:
//! `Packet` is a whole datagram, `Frame` what a segment carries, and
//! `FrameHead` a frame without its payload, which the sender emits
//! before the payload goes behind it straight from its source (or is left
//! there for gather I/O). `emit` is the only encoder: the engine, the
//! tests and the fuzzers all build datagrams with it.

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

/// Byte ranges of the fields (the table above). Datagram fields count from
/// the start of the datagram; frame body fields from the end of the
/// segment header (`SEG_HDR_LEN`).
pub mod field {
    pub type Field = core::ops::Range<usize>;

    pub const MAGIC: Field = 0..2;
    pub const VERSION: usize = 2;
    pub const KIND: usize = 3;

    /// CONN_REQ and CONN_RESP.
    pub const NONCE: Field = 4..12;
    /// CONN_REQ's cookie, CONN_RESP's echo.
    pub const COOKIE_OR_ECHO: Field = 12..20;
    pub const ISN: Field = 20..24;
    pub const WINDOW: Field = 24..28;

    /// CHALLENGE.
    pub const CHALLENGE_ECHO: Field = 4..12;
    pub const CHALLENGE_COOKIE: Field = 12..20;

    /// ACK, CREDIT and every segment: the receiver's connection id.
    pub const CONN: Field = 4..12;
    /// ACK and every segment.
    pub const ACK: Field = 12..16;
    pub const SACK: Field = 16..24;
    /// Segments.
    pub const SEQ: Field = 24..28;

    /// CREDIT.
    pub const GRANTED: Field = 12..16;
    pub const RETURNED: Field = 16..20;
    pub const CREDIT_BYTE: usize = 20;

    /// MSG and RTS bodies.
    pub const TAG: Field = 0..8;
    pub const DATA: Field = 8..16;
    pub const FLAGS: Field = 16..20;
    /// MSG: bits (`MSG_AWAITED`); RTS: push.
    pub const PUSH: Field = 20..24;
    pub const TOTAL: Field = 24..32;
    /// RTS.
    pub const RTS_KEY: Field = 32..40;
    /// MSG_CONT.
    pub const CONT_OFFSET: Field = 0..8;
    /// GET and GET_LAST.
    pub const GET_KEY: Field = 0..8;
    pub const GET_RID: Field = 8..16;
    pub const GET_OFFSET: Field = 16..24;
    pub const GET_LEN: Field = 24..32;
    /// RDATA (rid) and PDATA (key).
    pub const DATA_ID: Field = 0..8;
    pub const DATA_OFFSET: Field = 8..16;
    /// FIN.
    pub const FIN_KEY: Field = 0..8;
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
/// MSG bits: the sender's completion of this message waits for its ACK
/// (not an inject): the receiver acknowledges it as soon as it has it all
/// when it cannot count on being called again (manual progress).
pub const MSG_AWAITED: u32 = 1 << 0;

pub const MIN_DATAGRAM: usize = SEG_HDR_LEN + RTS_BODY_LEN + 1;

/// Bytes of an RDATA (or PDATA) segment before its payload.
pub const RDATA_HEAD_LEN: usize = SEG_HDR_LEN + RDATA_BODY_LEN;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    Truncated,
    BadMagic,
    BadVersion,
    BadKind,
    /// A length or offset field that cannot be right.
    BadField,
}

/// One datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(any(test, feature = "fuzz"), derive(arbitrary::Arbitrary))]
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

/// What one segment carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(any(test, feature = "fuzz"), derive(arbitrary::Arbitrary))]
pub enum Frame<'a> {
    Msg {
        tag: u64,
        data: u64,
        flags: u32,
        /// MSG_AWAITED.
        awaited: bool,
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
        awaited: bool,
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

#[inline]
fn put_u32(b: &mut [u8], f: field::Field, v: u32) {
    b[f].copy_from_slice(&v.to_le_bytes());
}
#[inline]
fn put_u64(b: &mut [u8], f: field::Field, v: u64) {
    b[f].copy_from_slice(&v.to_le_bytes());
}
#[inline]
fn get_u32(b: &[u8], f: field::Field) -> u32 {
    u32::from_le_bytes(b[f].try_into().unwrap())
}
#[inline]
fn get_u64(b: &[u8], f: field::Field) -> u64 {
    u64::from_le_bytes(b[f].try_into().unwrap())
}

fn put_preamble(b: &mut [u8], kind: u8) {
    b[field::MAGIC].copy_from_slice(&MAGIC.to_le_bytes());
    b[field::VERSION] = VERSION;
    b[field::KIND] = kind;
}

impl<'a> Packet<'a> {
    /// Parses a datagram, checking every field that can be wrong on its
    /// face (lengths, offsets that overflow, zero ids).
    pub fn parse(b: &'a [u8]) -> Result<Packet<'a>, DecodeError> {
        if b.len() < 4 {
            return Err(DecodeError::Truncated);
        }
        if b[field::MAGIC] != MAGIC.to_le_bytes() {
            return Err(DecodeError::BadMagic);
        }
        if b[field::VERSION] != VERSION {
            return Err(DecodeError::BadVersion);
        }
        let k = b[field::KIND];
        match k {
            kind::CONN_REQ | kind::CONN_RESP => {
                if b.len() != CONN_LEN {
                    return Err(DecodeError::Truncated);
                }
                let nonce = get_u64(b, field::NONCE);
                let echo = get_u64(b, field::COOKIE_OR_ECHO);
                let isn = get_u32(b, field::ISN);
                let window = get_u32(b, field::WINDOW);
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
                let (echo, cookie) = (get_u64(b, field::CHALLENGE_ECHO), get_u64(b, field::CHALLENGE_COOKIE));
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
                    conn: get_u64(b, field::CONN),
                    ack: get_u32(b, field::ACK),
                    sack: get_u64(b, field::SACK),
                })
            }
            kind::CREDIT => {
                if b.len() != CREDIT_LEN {
                    return Err(DecodeError::Truncated);
                }
                Ok(Packet::Credit {
                    conn: get_u64(b, field::CONN),
                    granted: get_u32(b, field::GRANTED),
                    returned: get_u32(b, field::RETURNED),
                    byte: b[field::CREDIT_BYTE],
                })
            }
            kind::MSG..=kind::PDATA => {
                if b.len() < SEG_HDR_LEN {
                    return Err(DecodeError::Truncated);
                }
                let frame = Frame::parse(k, &b[SEG_HDR_LEN..])?;
                Ok(Packet::Seg {
                    conn: get_u64(b, field::CONN),
                    ack: get_u32(b, field::ACK),
                    sack: get_u64(b, field::SACK),
                    seq: get_u32(b, field::SEQ),
                    frame,
                })
            }
            _ => Err(DecodeError::BadKind),
        }
    }

    /// The kind byte this packet is sent with.
    pub fn kind(&self) -> u8 {
        match self {
            Packet::ConnReq { .. } => kind::CONN_REQ,
            Packet::ConnResp { .. } => kind::CONN_RESP,
            Packet::Challenge { .. } => kind::CHALLENGE,
            Packet::Ack { .. } => kind::ACK,
            Packet::Credit { .. } => kind::CREDIT,
            Packet::Seg { frame, .. } => frame.split().0.kind(),
        }
    }

    /// Bytes `emit` writes.
    #[cfg(any(test, feature = "fuzz"))]
    pub fn buffer_len(&self) -> usize {
        match self {
            Packet::ConnReq { .. } | Packet::ConnResp { .. } => CONN_LEN,
            Packet::Challenge { .. } => CHALLENGE_LEN,
            Packet::Ack { .. } => ACK_LEN,
            Packet::Credit { .. } => CREDIT_LEN,
            Packet::Seg { frame, .. } => {
                let (head, payload) = frame.split();
                SEG_HDR_LEN + head.body_len() + payload.len()
            }
        }
    }

    /// The datagram, in a buffer of its own.
    #[cfg(any(test, feature = "fuzz"))]
    pub fn to_vec(self) -> Vec<u8> {
        let mut b = vec![0u8; self.buffer_len()];
        self.emit(&mut b);
        b
    }

    /// Writes the datagram at the start of `b` (which must hold
    /// `buffer_len()` bytes; reserved fields are written as zero) and
    /// returns its length.
    pub fn emit(&self, b: &mut [u8]) -> usize {
        use field::*;
        match *self {
            Packet::ConnReq {
                nonce,
                cookie: echo,
                isn,
                window,
            }
            | Packet::ConnResp {
                nonce,
                echo,
                isn,
                window,
            } => {
                put_preamble(b, self.kind());
                put_u64(b, NONCE, nonce);
                put_u64(b, COOKIE_OR_ECHO, echo);
                put_u32(b, ISN, isn);
                put_u32(b, WINDOW, window);
                CONN_LEN
            }
            Packet::Challenge { echo, cookie } => {
                put_preamble(b, kind::CHALLENGE);
                put_u64(b, CHALLENGE_ECHO, echo);
                put_u64(b, CHALLENGE_COOKIE, cookie);
                CHALLENGE_LEN
            }
            Packet::Ack { conn, ack, sack } => {
                put_preamble(b, kind::ACK);
                put_u64(b, CONN, conn);
                put_u32(b, field::ACK, ack);
                put_u64(b, SACK, sack);
                ACK_LEN
            }
            Packet::Credit {
                conn,
                granted,
                returned,
                byte,
            } => {
                put_preamble(b, kind::CREDIT);
                put_u64(b, CONN, conn);
                put_u32(b, GRANTED, granted);
                put_u32(b, RETURNED, returned);
                b[CREDIT_BYTE] = byte;
                CREDIT_LEN
            }
            Packet::Seg {
                conn,
                ack,
                sack,
                seq,
                frame,
            } => {
                let (head, payload) = frame.split();
                let at = head.emit_seg(b, conn, ack, sack, seq);
                b[at..at + payload.len()].copy_from_slice(payload);
                at + payload.len()
            }
        }
    }
}

impl<'a> Frame<'a> {
    /// Parses a segment's frame from its kind and the bytes after the
    /// segment header (also used for segments parked out of order).
    pub fn parse(k: u8, b: &'a [u8]) -> Result<Frame<'a>, DecodeError> {
        use field::*;
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
                let total = get_u64(b, TOTAL);
                let payload = &b[MSG_BODY_LEN..];
                // The first segment carries as much of the message as fits, and
                // at least one byte always fits (MIN_DATAGRAM).
                if (payload.len() as u64) > total || (payload.is_empty() && total > 0) {
                    return Err(DecodeError::BadField);
                }
                Ok(Frame::Msg {
                    tag: get_u64(b, TAG),
                    data: get_u64(b, DATA),
                    flags: get_u32(b, FLAGS),
                    awaited: get_u32(b, PUSH) & MSG_AWAITED != 0,
                    total,
                    payload,
                })
            }
            kind::MSG_CONT => {
                need(MSG_CONT_BODY_LEN)?;
                let offset = get_u64(b, CONT_OFFSET);
                let payload = &b[MSG_CONT_BODY_LEN..];
                if payload.is_empty() || offset.checked_add(payload.len() as u64).is_none() {
                    return Err(DecodeError::BadField);
                }
                Ok(Frame::MsgCont { offset, payload })
            }
            kind::RTS => {
                need(RTS_BODY_LEN)?;
                let total = get_u64(b, TOTAL);
                let tail = &b[RTS_BODY_LEN..];
                let push = get_u32(b, PUSH);
                // At least one byte is left to pull: neither the tail nor the
                // tail and the pushed bytes are ever the whole message.
                if tail.len() as u64 + push as u64 >= total.max(1) {
                    return Err(DecodeError::BadField);
                }
                Ok(Frame::Rts {
                    tag: get_u64(b, TAG),
                    data: get_u64(b, DATA),
                    flags: get_u32(b, FLAGS),
                    total,
                    key: get_u64(b, RTS_KEY),
                    push,
                    tail,
                })
            }
            kind::GET | kind::GET_LAST => {
                exact(GET_BODY_LEN)?;
                let (offset, len) = (get_u64(b, GET_OFFSET), get_u64(b, GET_LEN));
                if len == 0 || offset.checked_add(len).is_none() {
                    return Err(DecodeError::BadField);
                }
                Ok(Frame::Get {
                    key: get_u64(b, GET_KEY),
                    rid: get_u64(b, GET_RID),
                    offset,
                    len,
                    last: k == kind::GET_LAST,
                })
            }
            kind::RDATA | kind::PDATA => {
                need(RDATA_BODY_LEN)?;
                let (id, offset) = (get_u64(b, DATA_ID), get_u64(b, DATA_OFFSET));
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
                Ok(Frame::Fin {
                    key: get_u64(b, FIN_KEY),
                })
            }
            kind::NOP => {
                exact(0)?;
                Ok(Frame::Nop)
            }
            _ => Err(DecodeError::BadKind),
        }
    }

    /// The frame as its head and its payload (an RTS's tail; empty for
    /// frames without one).
    pub fn split(&self) -> (FrameHead, &'a [u8]) {
        match *self {
            Frame::Msg {
                tag,
                data,
                flags,
                awaited,
                total,
                payload,
            } => (
                FrameHead::Msg {
                    tag,
                    data,
                    flags,
                    awaited,
                    total,
                },
                payload,
            ),
            Frame::MsgCont { offset, payload } => (FrameHead::MsgCont { offset }, payload),
            Frame::Rts {
                tag,
                data,
                flags,
                total,
                key,
                push,
                tail,
            } => (
                FrameHead::Rts {
                    tag,
                    data,
                    flags,
                    total,
                    key,
                    push,
                },
                tail,
            ),
            Frame::Get {
                key,
                rid,
                offset,
                len,
                last,
            } => (
                FrameHead::Get {
                    key,
                    rid,
                    offset,
                    len,
                    last,
                },
                &[],
            ),
            Frame::RData { rid, offset, payload } => (FrameHead::RData { rid, offset }, payload),
            Frame::PData { key, offset, payload } => (FrameHead::PData { key, offset }, payload),
            Frame::Fin { key } => (FrameHead::Fin { key }, &[]),
            Frame::Nop => (FrameHead::Nop, &[]),
        }
    }
}

impl FrameHead {
    /// The frame with `payload` behind its head (ignored by frames that
    /// carry none).
    #[cfg(test)]
    pub fn with_payload(self, payload: &[u8]) -> Frame<'_> {
        match self {
            FrameHead::Msg {
                tag,
                data,
                flags,
                awaited,
                total,
            } => Frame::Msg {
                tag,
                data,
                flags,
                awaited,
                total,
                payload,
            },
            FrameHead::MsgCont { offset } => Frame::MsgCont { offset, payload },
            FrameHead::Rts {
                tag,
                data,
                flags,
                total,
                key,
                push,
            } => Frame::Rts {
                tag,
                data,
                flags,
                total,
                key,
                push,
                tail: payload,
            },
            FrameHead::Get {
                key,
                rid,
                offset,
                len,
                last,
            } => Frame::Get {
                key,
                rid,
                offset,
                len,
                last,
            },
            FrameHead::RData { rid, offset } => Frame::RData { rid, offset, payload },
            FrameHead::PData { key, offset } => Frame::PData { key, offset, payload },
            FrameHead::Fin { key } => Frame::Fin { key },
            FrameHead::Nop => Frame::Nop,
        }
    }

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

    /// Writes a segment's header and this frame's body at the start of `b`
    /// and returns where the payload starts: the caller puts the payload
    /// there (or has the wire gather it) and sends `start + payload len`
    /// bytes. The sender's hot path: `Packet::emit` for a segment whose
    /// payload is not in one slice yet.
    pub fn emit_seg(&self, b: &mut [u8], conn: u64, ack: u32, sack: u64, seq: u32) -> usize {
        // One bounds check for the fixed header instead of one per field: this
        // runs for every segment of bulk data.
        let h: &mut [u8; SEG_HDR_LEN] = (&mut b[..SEG_HDR_LEN]).try_into().expect("slice of SEG_HDR_LEN");
        h[field::MAGIC].copy_from_slice(&MAGIC.to_le_bytes());
        h[field::VERSION] = VERSION;
        h[field::KIND] = self.kind();
        h[field::CONN].copy_from_slice(&conn.to_le_bytes());
        h[field::ACK].copy_from_slice(&ack.to_le_bytes());
        h[field::SACK].copy_from_slice(&sack.to_le_bytes());
        h[field::SEQ].copy_from_slice(&seq.to_le_bytes());
        self.write_body(&mut b[SEG_HDR_LEN..]);
        SEG_HDR_LEN + self.body_len()
    }

    /// Writes the body fields at the start of `b` (which must hold
    /// `body_len()` bytes).
    fn write_body(&self, b: &mut [u8]) {
        use field::*;
        match *self {
            FrameHead::Msg {
                tag,
                data,
                flags,
                awaited,
                total,
            } => {
                put_u64(b, TAG, tag);
                put_u64(b, DATA, data);
                put_u32(b, FLAGS, flags);
                put_u32(b, PUSH, if awaited { MSG_AWAITED } else { 0 });
                put_u64(b, TOTAL, total);
            }
            FrameHead::MsgCont { offset } => put_u64(b, CONT_OFFSET, offset),
            FrameHead::Rts {
                tag,
                data,
                flags,
                total,
                key,
                push,
            } => {
                put_u64(b, TAG, tag);
                put_u64(b, DATA, data);
                put_u32(b, FLAGS, flags);
                put_u32(b, PUSH, push);
                put_u64(b, TOTAL, total);
                put_u64(b, RTS_KEY, key);
            }
            FrameHead::Get {
                key, rid, offset, len, ..
            } => {
                put_u64(b, GET_KEY, key);
                put_u64(b, GET_RID, rid);
                put_u64(b, GET_OFFSET, offset);
                put_u64(b, GET_LEN, len);
            }
            FrameHead::RData { rid: id, offset } | FrameHead::PData { key: id, offset } => {
                put_u64(b, DATA_ID, id);
                put_u64(b, DATA_OFFSET, offset);
            }
            FrameHead::Fin { key } => put_u64(b, FIN_KEY, key),
            FrameHead::Nop => {}
        }
    }
}

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

impl RDataHead {
    /// Parses `b` as the header of an RDATA or PDATA segment, or None if
    /// it is neither.
    pub fn parse(b: &[u8]) -> Option<RDataHead> {
        if b.len() != RDATA_HEAD_LEN
            || b[field::MAGIC] != MAGIC.to_le_bytes()
            || b[field::VERSION] != VERSION
            || !matches!(b[field::KIND], kind::RDATA | kind::PDATA)
        {
            return None;
        }
        let body = &b[SEG_HDR_LEN..];
        Some(RDataHead {
            conn: get_u64(b, field::CONN),
            ack: get_u32(b, field::ACK),
            sack: get_u64(b, field::SACK),
            seq: get_u32(b, field::SEQ),
            pushed: b[field::KIND] == kind::PDATA,
            id: get_u64(body, field::DATA_ID),
            offset: get_u64(body, field::DATA_OFFSET),
        })
    }
}

#[cfg(test)]
mod tests;
