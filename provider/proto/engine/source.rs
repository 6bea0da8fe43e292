//! Transmit sources: how a segment is encoded by reference to the data it
//! carries, and where its payload comes from when it leaves. A payload is
//! either copied behind its header (`PayloadMode::Copy`) or left in its
//! source and named in the `Transmit` (`PayloadMode::Gather`), so that the
//! wire sends it from the application's buffer with gather I/O: every byte
//! of bulk data is then copied once, by the kernel.

use super::msg::{SegFrame, TxBody, TxMsg};
use super::vc::Vc;
use crate::proto::wire::FrameHead;
use crate::proto::{MsgId, SendSource};
use std::net::SocketAddr;
use std::sync::Arc;

/// Whether a segment's payload is copied behind its header or left in its
/// source for the wire to gather (`Transmit::payload`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum PayloadMode {
    Copy,
    Gather,
}

/// What one transmission call keeps between building a segment and handing
/// it out: the payload left in its source, and the rendezvous source of the
/// segment being built (set afresh in every call, never trusted across
/// calls: after its FIN a source must not be read again), so bulk data is
/// not looked up twice per segment.
#[derive(Default)]
pub(super) struct TxScratch {
    deferred: Option<Deferred>,
    src: Option<(MsgId, Arc<dyn SendSource>)>,
}

#[derive(Clone, Copy)]
struct Deferred {
    id: MsgId,
    off: usize,
    hdr_len: usize,
}

impl TxScratch {
    /// Forgets everything: at the start and end of every transmission call.
    pub(super) fn reset(&mut self) {
        self.deferred = None;
        self.src = None;
    }

    /// Remembers the source of message `key` for the segment being built
    /// (one clone per burst of its segments, not per segment).
    pub(super) fn remember(&mut self, key: MsgId, src: &Arc<dyn SendSource>) {
        if !matches!(&self.src, Some((k, _)) if *k == key) {
            self.src = Some((key, src.clone()));
        }
    }

    /// `remember`, and the source itself, borrowed from the scratch (which
    /// keeps it alive for the rest of the call).
    pub(super) fn hold(&mut self, key: MsgId, src: &Arc<dyn SendSource>) -> &dyn SendSource {
        self.remember(key, src);
        &*self.src.as_ref().expect("just remembered").1
    }

    /// The segment just built by `vc` into a datagram of `len` bytes: its
    /// header length and, if its payload was left in its source, where.
    /// Clears the deferred payload for the next segment.
    pub(super) fn take_payload<'a>(
        &'a mut self,
        vc: &'a Vc,
        len: usize,
    ) -> (usize, Option<(&'a dyn SendSource, usize)>) {
        let Some(d) = self.deferred.take() else {
            return (len, None);
        };
        let src: &dyn SendSource = match &self.src {
            // Rendezvous data: no lookup (bulk data pays this per segment).
            Some((k, src)) if *k == d.id => &**src,
            _ => match &vc
                .tx
                .get(&d.id)
                .expect("a deferred payload's message is in its VC")
                .body
            {
                TxBody::Eager { payload, .. } => payload,
                TxBody::Rndv { src, .. } => &**src,
            },
        };
        (d.hdr_len, Some((src, d.off)))
    }

    /// Puts `len` bytes of message `id`'s `src` from `off` behind the
    /// header that ends at `at`: left in the source (`Gather`) or copied
    /// into `buf`. Returns the segment's length.
    #[allow(clippy::too_many_arguments)] // one segment's payload, wherever it goes
    fn attach(
        &mut self,
        mode: PayloadMode,
        id: MsgId,
        src: &dyn SendSource,
        off: usize,
        len: usize,
        buf: &mut [u8],
        at: usize,
    ) -> usize {
        if mode == PayloadMode::Gather && len > 0 {
            self.deferred = Some(Deferred { id, off, hdr_len: at });
        } else {
            src.read_at(off, &mut buf[at..at + len]);
        }
        at + len
    }
}

/// One datagram from `poll_transmit_burst`: `buf[..hdr_len]`, then (if
/// `payload` is set) `len - hdr_len` bytes of the source from the offset.
pub struct Transmit<'a> {
    pub to: SocketAddr,
    pub len: usize,
    pub hdr_len: usize,
    pub payload: Option<(&'a dyn SendSource, usize)>,
}

impl Transmit<'_> {
    /// Copies the payload, if any, behind the header already in `buf`:
    /// the whole datagram in `buf[..len]`.
    #[cfg(any(test, feature = "fuzz"))]
    pub fn gather_into(&self, buf: &mut [u8]) {
        if let Some((src, off)) = self.payload {
            src.read_at(off, &mut buf[self.hdr_len..self.len]);
        }
    }
}

/// Where `Engine::poll_transmit_burst` puts the datagrams it builds.
pub trait TxOut {
    /// Where the next datagram is built (room for the largest segment of
    /// any VC), or None to stop.
    fn slot(&mut self) -> Option<&mut [u8]>;
    /// Takes the datagram just built in the slot; false to stop.
    fn commit(&mut self, t: Transmit<'_>) -> bool;
}

/// `Engine::poll_transmit`'s output: one datagram, copied whole into `buf`.
#[cfg(any(test, feature = "fuzz"))]
pub(super) struct OneOut<'b> {
    pub(super) buf: &'b mut [u8],
    pub(super) sent: Option<(SocketAddr, usize)>,
}

#[cfg(any(test, feature = "fuzz"))]
impl TxOut for OneOut<'_> {
    fn slot(&mut self) -> Option<&mut [u8]> {
        match self.sent {
            None => Some(&mut *self.buf),
            Some(_) => None,
        }
    }

    fn commit(&mut self, t: Transmit<'_>) -> bool {
        t.gather_into(self.buf);
        self.sent = Some((t.to, t.len));
        false
    }
}

impl Vc {
    /// Encodes one segment, piggybacking our current ACK state on it. A
    /// frame whose source is gone (a rendezvous already completed by FIN,
    /// which proves the receiver holds its data) goes out as NOP so the
    /// sequence number is still filled.
    pub(super) fn write_seg(
        &mut self,
        scratch: &mut TxScratch,
        mode: PayloadMode,
        conn: u64,
        seq: u64,
        frame: &SegFrame,
        buf: &mut [u8],
    ) -> usize {
        let (ack, sack) = self.rcv.ack_fields();
        self.rcv.clear_ack();
        let seq = seq as u32;
        let nop = |buf: &mut [u8]| FrameHead::Nop.emit_seg(buf, conn, ack, sack, seq);
        match *frame {
            SegFrame::Msg { id, off, len, first } => {
                let Some(TxMsg {
                    hdr,
                    body: TxBody::Eager { payload, .. },
                    quiet,
                }) = self.tx.get(&id)
                else {
                    return nop(buf);
                };
                let head = if first {
                    FrameHead::Msg {
                        tag: hdr.tag,
                        data: hdr.data,
                        flags: hdr.flags,
                        awaited: !quiet,
                        total: payload.len() as u64,
                    }
                } else {
                    FrameHead::MsgCont { offset: off }
                };
                let at = head.emit_seg(buf, conn, ack, sack, seq);
                scratch.attach(mode, id, payload, off as usize, len as usize, buf, at)
            }
            SegFrame::Rts { id } => {
                let Some(TxMsg {
                    hdr,
                    body: TxBody::Rndv {
                        len, tail, src, push, ..
                    },
                    ..
                }) = self.tx.get(&id)
                else {
                    return nop(buf);
                };
                let head = FrameHead::Rts {
                    tag: hdr.tag,
                    data: hdr.data,
                    flags: hdr.flags,
                    total: *len,
                    key: id,
                    push: *push,
                };
                let at = head.emit_seg(buf, conn, ack, sack, seq);
                let off = (*len - *tail as u64) as usize;
                scratch.attach(mode, id, &**src, off, *tail as usize, buf, at)
            }
            SegFrame::RData { key, rid, offset, len } => {
                // Fresh data: next_rdata_frame remembered its source. A
                // retransmission looks it up, and finds it gone after FIN.
                if !matches!(&scratch.src, Some((k, _)) if *k == key) {
                    match self.tx.get(&key) {
                        Some(TxMsg {
                            body: TxBody::Rndv { src, .. },
                            ..
                        }) => scratch.src = Some((key, src.clone())),
                        _ => return nop(buf),
                    }
                }
                let head = match rid {
                    Some(rid) => FrameHead::RData { rid, offset },
                    None => FrameHead::PData { key, offset },
                };
                let at = head.emit_seg(buf, conn, ack, sack, seq);
                let l = len as usize;
                if mode == PayloadMode::Gather && l > 0 {
                    scratch.deferred = Some(Deferred {
                        id: key,
                        off: offset as usize,
                        hdr_len: at,
                    });
                } else if let Some((_, src)) = &scratch.src {
                    src.read_at(offset as usize, &mut buf[at..at + l]);
                }
                at + l
            }
            SegFrame::Get {
                key,
                rid,
                offset,
                len,
                last,
            } => FrameHead::Get {
                key,
                rid,
                offset,
                len,
                last,
            }
            .emit_seg(buf, conn, ack, sack, seq),
            SegFrame::Fin { key } => FrameHead::Fin { key }.emit_seg(buf, conn, ack, sack, seq),
            SegFrame::Nop => nop(buf),
        }
    }
}
