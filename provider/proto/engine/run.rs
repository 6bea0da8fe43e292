//! Bulk runs: the segments of one eager message, or of one rendezvous
//! range, framed in a row.
//!
//! Bulk data over a 1500-byte MTU is 46 segments per 64 KiB, and the
//! general way (`Vc::transmit`, one datagram a call) pays for each of them
//! the whole priority walk, two or three lookups of the message, the
//! payload's hand-over through `TxScratch` and the ACK fields computed
//! afresh: about 750 instructions a segment, most of the engine's work on
//! bulk data. A run is taken only when `transmit` would send exactly these
//! segments next (nothing of the handshake, credits, retransmissions or
//! control frames waits), so the datagrams are the same, byte for byte;
//! it looks the message up once, computes the ACK fields once (nothing
//! arrives during a transmission call) and hands each payload straight
//! from its source.

use super::msg::{SegFrame, TxBody, TxMsg};
use super::rndv::data_room;
use super::source::{Transmit, TxOut, TxScratch};
use super::vc::Vc;
use super::Shared;
use crate::proto::conn::Handshake;
use crate::proto::wire::{self, FrameHead};
use crate::proto::{MsgId, SendSource};

/// What a run handed out: how many segments, and whether the output
/// stopped taking them (the burst ends).
pub(super) struct Run {
    pub(super) sent: usize,
    pub(super) stop: bool,
}

impl Vc {
    /// Up to `max` segments of the eager message under way at the head of
    /// the message queue, or of the rendezvous range at the head of the
    /// data queue, when those are what `transmit` would send next. None
    /// when it would send something else first, or nothing of a run could
    /// go: the general way then takes one datagram.
    pub(super) fn transmit_run(
        &mut self,
        sh: &mut Shared,
        scratch: &mut TxScratch,
        now: u64,
        out: &mut dyn TxOut,
        max: usize,
    ) -> Option<Run> {
        let conn = self.run_ready(sh)?;
        let run = match self.msgs.front() {
            Some(&id) => self.eager_run(sh, conn, id, now, out, max)?,
            // Messages go before rendezvous data.
            None => self.rdata_run(sh, scratch, conn, now, out, max)?,
        };
        if run.sent > 0 {
            self.rcv.clear_ack();
        }
        Some(run)
    }

    /// The peer's connection id, if nothing `transmit` sends ahead of new
    /// segments is pending and the window has room.
    fn run_ready(&self, sh: &Shared) -> Option<u64> {
        let ahead = !matches!(self.hs, Handshake::Established)
            || self.challenge_due.is_some()
            || self.resp_pending
            || self.unproven.is_some()
            || (self.credit_due && sh.bank.is_some())
            || !self.snd.rtx.is_empty()
            || !self.ctrl.is_empty();
        if ahead || !self.snd.has_room(&sh.cfg) {
            return None;
        }
        self.peer_nonce
    }

    /// The continuation segments of eager message `id`, once its first
    /// segment went (that one spends the credits and carries the header).
    fn eager_run(
        &mut self,
        sh: &mut Shared,
        conn: u64,
        id: MsgId,
        now: u64,
        out: &mut dyn TxOut,
        max: usize,
    ) -> Option<Run> {
        let Vc {
            peer,
            seg_limit,
            snd,
            rcv,
            msgs,
            tx,
            ..
        } = self;
        let Some(TxMsg {
            body:
                TxBody::Eager {
                    payload,
                    next_off,
                    started: true,
                    segmented,
                    unacked,
                },
            ..
        }) = tx.get_mut(&id)
        else {
            return None;
        };
        let room = *seg_limit - wire::SEG_HDR_LEN - wire::MSG_CONT_BODY_LEN;
        // Once: a source's length may be a walk over its pieces.
        let total = payload.len();
        let (ack, sack) = rcv.ack_fields();
        let mut run = Run { sent: 0, stop: false };
        while run.sent < max && *next_off < total && snd.has_room(&sh.cfg) {
            let Some(buf) = out.slot() else {
                run.stop = true;
                break;
            };
            if buf.len() < *seg_limit {
                break;
            }
            let off = *next_off;
            let len = (total - off).min(room);
            let hdr_len = FrameHead::MsgCont { offset: off as u64 }.emit_seg(buf, conn, ack, sack, snd.nxt as u32);
            let frame = SegFrame::Msg {
                id,
                off: off as u64,
                len: len as u32,
                first: false,
            };
            let n = hdr_len + len;
            snd.sent(&sh.cfg, frame, n, now);
            count_segment(sh, n);
            *next_off += len;
            *unacked += 1;
            run.sent += 1;
            if *next_off == total {
                *segmented = true;
                msgs.pop_front();
            }
            let src: &dyn SendSource = &*payload;
            let t = Transmit {
                to: *peer,
                len: n,
                hdr_len,
                payload: Some((src, off)),
            };
            if !out.commit(t) {
                run.stop = true;
                break;
            }
        }
        (run.sent > 0 || run.stop).then_some(run)
    }

    /// The segments of the rendezvous range at the head of the data queue
    /// (RDATA the receiver asked for, or PDATA pushed behind an RTS).
    fn rdata_run(
        &mut self,
        sh: &mut Shared,
        scratch: &mut TxScratch,
        conn: u64,
        now: u64,
        out: &mut dyn TxOut,
        max: usize,
    ) -> Option<Run> {
        let Vc {
            peer,
            seg_limit,
            snd,
            rcv,
            rdata,
            tx,
            ..
        } = self;
        let job = rdata.front_mut()?;
        let room = data_room(*seg_limit) as u64;
        // The scratch keeps the source alive for the whole call, past the
        // job's end below (the batch sends from it after this returns).
        let src = scratch.hold(job.key, &job.src);
        let (ack, sack) = rcv.ack_fields();
        let mut run = Run { sent: 0, stop: false };
        while run.sent < max && job.next < job.end && snd.has_room(&sh.cfg) {
            let Some(buf) = out.slot() else {
                run.stop = true;
                break;
            };
            if buf.len() < *seg_limit {
                break;
            }
            let (offset, len) = (job.next, (job.end - job.next).min(room));
            let head = match job.rid {
                Some(rid) => FrameHead::RData { rid, offset },
                None => FrameHead::PData { key: job.key, offset },
            };
            let hdr_len = head.emit_seg(buf, conn, ack, sack, snd.nxt as u32);
            let frame = SegFrame::RData {
                key: job.key,
                rid: job.rid,
                offset,
                len: len as u32,
            };
            let n = hdr_len + len as usize;
            snd.sent(&sh.cfg, frame, n, now);
            count_segment(sh, n);
            job.next += len;
            run.sent += 1;
            let t = Transmit {
                to: *peer,
                len: n,
                hdr_len,
                payload: (len > 0).then_some((src, offset as usize)),
            };
            if !out.commit(t) {
                run.stop = true;
                break;
            }
        }
        let key = job.key;
        if job.next == job.end {
            rdata.pop_front();
        }
        if let Some(TxMsg {
            body: TxBody::Rndv { unacked, .. },
            ..
        }) = tx.get_mut(&key)
        {
            *unacked += run.sent as u32;
        }
        (run.sent > 0 || run.stop).then_some(run)
    }
}

/// A new segment of `n` bytes, in the engine's statistics (as
/// `transmit_counted` counts one).
fn count_segment(sh: &mut Shared, n: usize) {
    sh.stats.segments_sent += 1;
    sh.stats.datagrams_out += 1;
    sh.stats.bytes_out += n as u64;
}
