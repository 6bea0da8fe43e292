//! Codec tests: every kind round-trips through emit and parse, a
//! datagram cut short is refused as truncated (or, cut in its payload,
//! parses as the shorter frame or a bad field), bad fields are refused,
//! and an RDATA head names its kind.

use super::*;

/// `p` emitted: exactly `buffer_len()` bytes.
fn emit(p: &Packet<'_>) -> Vec<u8> {
    let mut b = vec![0u8; p.buffer_len() + 64];
    let n = p.emit(&mut b);
    assert_eq!(n, p.buffer_len(), "{p:?}");
    b.truncate(n);
    b
}

/// A segment of `head` and `payload`, emitted. (Kept apart from
/// `Packet::emit`'s own path: the header the sender writes before
/// the payload goes behind it, as the engine does.)
fn seg(head: FrameHead, payload: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; 256];
    let at = head.emit_seg(&mut b, 0xabcdef, 7, 0b101, u32::MAX);
    b[at..at + payload.len()].copy_from_slice(payload);
    b.truncate(at + payload.len());
    let frame = head.with_payload(payload);
    if frame.split().1.len() == payload.len() {
        // (Not a frame without payload given one: a malformed datagram.)
        let p = Packet::Seg {
            conn: 0xabcdef,
            ack: 7,
            sack: 0b101,
            seq: u32::MAX,
            frame,
        };
        assert_eq!(emit(&p), b, "Packet::emit and FrameHead::emit_seg agree");
    }
    b
}

#[test]
fn round_trips() {
    let fixed = [
        Packet::ConnReq {
            nonce: 9,
            cookie: 0,
            isn: 77,
            window: 4096,
        },
        Packet::ConnReq {
            nonce: 9,
            cookie: u64::MAX,
            isn: 77,
            window: 4096,
        },
        Packet::Challenge {
            echo: 9,
            cookie: 0xc00c1e,
        },
        Packet::ConnResp {
            nonce: 9,
            echo: 10,
            isn: 77,
            window: 8,
        },
        Packet::Ack {
            conn: 5,
            ack: 6,
            sack: 7,
        },
        Packet::Credit {
            conn: 5,
            granted: 6,
            returned: 7,
            byte: 0x83,
        },
    ];
    let lens = [CONN_LEN, CONN_LEN, CHALLENGE_LEN, CONN_LEN, ACK_LEN, CREDIT_LEN];
    for (p, len) in fixed.iter().zip(lens) {
        let b = emit(p);
        assert_eq!(b.len(), len, "{p:?}");
        assert_eq!(b[3], p.kind());
        assert_eq!(Packet::parse(&b), Ok(*p));
        // Every strict prefix of a fixed-length datagram is truncated.
        for cut in 0..b.len() {
            assert_eq!(
                Packet::parse(&b[..cut]),
                Err(DecodeError::Truncated),
                "kind {} cut at {cut}",
                b[3]
            );
        }
    }

    let big = 5u64 << 32; // offsets beyond 4 GiB survive the codec
    let cases: Vec<(FrameHead, &[u8], Frame)> = vec![
        (
            FrameHead::Msg {
                tag: 1,
                data: 2,
                flags: 3,
                awaited: true,
                total: 10,
            },
            b"abc",
            Frame::Msg {
                tag: 1,
                data: 2,
                flags: 3,
                awaited: true,
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
        assert_eq!(frame.split(), (head, payload));
        let b = seg(head, payload);
        assert_eq!(
            Packet::parse(&b),
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
    let whole = Packet::parse(b).expect("the whole segment decodes");
    let body_end = SEG_HDR_LEN + head.body_len();
    for cut in 0..b.len() {
        let got = Packet::parse(&b[..cut]);
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
                awaited,
                total,
                payload,
            } => Frame::Msg {
                tag,
                data,
                flags,
                awaited,
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
    assert_eq!(Packet::parse(&b[..3]), Err(DecodeError::Truncated));
    assert_eq!(Packet::parse(&b[..b.len() - 1]), Err(DecodeError::Truncated));
    b[0] ^= 1;
    assert_eq!(Packet::parse(&b), Err(DecodeError::BadMagic));
    b[0] ^= 1;
    b[2] = VERSION + 1;
    assert_eq!(Packet::parse(&b), Err(DecodeError::BadVersion));
    b[2] = VERSION;
    b[3] = 0x7f;
    assert_eq!(Packet::parse(&b), Err(DecodeError::BadKind));
    let m = seg(
        FrameHead::Msg {
            tag: 0,
            data: 0,
            flags: 0,
            awaited: false,
            total: 2,
        },
        b"abc",
    );
    assert_eq!(Packet::parse(&m), Err(DecodeError::BadField));
    // The first segment of a non-empty message carries at least a byte.
    let empty_first = |total| {
        seg(
            FrameHead::Msg {
                tag: 0,
                data: 0,
                flags: 0,
                awaited: false,
                total,
            },
            b"",
        )
    };
    assert_eq!(Packet::parse(&empty_first(1)), Err(DecodeError::BadField));
    assert!(Packet::parse(&empty_first(0)).is_ok());
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
    assert_eq!(Packet::parse(&g), Err(DecodeError::BadField));
    let r = seg(
        FrameHead::RData {
            rid: 0,
            offset: u64::MAX,
        },
        b"ab",
    );
    assert_eq!(Packet::parse(&r), Err(DecodeError::BadField));
    let p = seg(FrameHead::PData { key: 0, offset: 5 }, b"");
    assert_eq!(Packet::parse(&p), Err(DecodeError::BadField));
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
    assert_eq!(Packet::parse(&rts(3, 0)), Err(DecodeError::BadField));
    assert!(Packet::parse(&rts(4, 0)).is_ok());
    assert_eq!(Packet::parse(&rts(10, 7)), Err(DecodeError::BadField));
    assert!(Packet::parse(&rts(10, 6)).is_ok());
    // Zero ids: a CONN_REQ's or CONN_RESP's nonce, a CONN_RESP's echo,
    // a CHALLENGE's echo or cookie; a zero receive window.
    let conn = |req: bool, nonce, echo, window| {
        let isn = 1;
        if req {
            emit(&Packet::ConnReq {
                nonce,
                cookie: echo,
                isn,
                window,
            })
        } else {
            emit(&Packet::ConnResp {
                nonce,
                echo,
                isn,
                window,
            })
        }
    };
    for bad in [
        conn(true, 0, 0, 1),
        conn(false, 1, 0, 1),
        conn(false, 0, 1, 1),
        conn(true, 1, 0, 0),
    ] {
        assert_eq!(Packet::parse(&bad), Err(DecodeError::BadField));
    }
    assert!(Packet::parse(&conn(true, 1, 0, 1)).is_ok());
    for (echo, cookie) in [(0, 1), (1, 0)] {
        let ch = emit(&Packet::Challenge { echo, cookie });
        assert_eq!(Packet::parse(&ch), Err(DecodeError::BadField));
    }
}

#[test]
fn rdata_heads_name_their_kind() {
    for (head, pushed) in [
        (FrameHead::RData { rid: 3, offset: 70_000 }, false),
        (FrameHead::PData { key: 3, offset: 70_000 }, true),
    ] {
        let b = seg(head, b"x");
        let h = RDataHead::parse(&b[..RDATA_HEAD_LEN]).expect("an RDATA/PDATA head");
        assert_eq!((h.pushed, h.id, h.offset, h.seq), (pushed, 3, 70_000, u32::MAX));
    }
    let fin = seg(FrameHead::Fin { key: 1 }, &[0u8; 8]);
    assert_eq!(RDataHead::parse(&fin[..RDATA_HEAD_LEN]), None);
}
