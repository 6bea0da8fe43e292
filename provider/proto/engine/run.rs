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
use super::rndv::{cont_room, data_room};
use super::source::{Transmit, TxOut, TxScratch};
use super::vc::Vc;
use super::Shared;
use crate::proto::conn::Handshake;
use crate::proto::rel::SendWindow;
use crate::proto::wire::FrameHead;
use crate::proto::{MsgId, SendSource};
use std::net::SocketAddr;

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
        // Nothing arrives during a transmission call: the ACK fields of
        // the first segment hold for the whole run.
        let (ack, sack) = self.rcv.ack_fields();
        let mut emit = Emit {
            out,
            to: self.peer,
            seg_limit: self.seg_limit,
            conn,
            ack,
            sack,
            max,
            run: Run { sent: 0, stop: false },
        };
        match self.msgs.front() {
            Some(&id) => self.eager_run(sh, id, now, &mut emit),
            // Messages go before rendezvous data.
            None => self.rdata_run(sh, scratch, now, &mut emit),
        }
        let run = emit.run;
        if run.sent > 0 {
            self.rcv.clear_ack();
            self.rcv.ack_left(&sh.cfg, now, true);
        }
        (run.sent > 0 || run.stop).then_some(run)
    }

    /// The peer's connection id, if nothing `transmit` sends ahead of new
    /// segments is pending (the window's room is `Emit::segment`'s to see).
    fn run_ready(&self, sh: &Shared) -> Option<u64> {
        let ahead = !matches!(self.hs, Handshake::Established)
            || self.resp_pending
            || self.unproven.is_some()
            || (self.credit_due && sh.bank.is_some())
            || !self.snd.rtx.is_empty()
            || !self.ctrl.is_empty();
        if ahead {
            return None;
        }
        self.peer_nonce
    }

    /// The continuation segments of eager message `id`, once its first
    /// segment went (that one spends the credits and carries the header).
    fn eager_run(&mut self, sh: &mut Shared, id: MsgId, now: u64, emit: &mut Emit<'_>) {
        let Vc { snd, msgs, tx, .. } = self;
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
            return;
        };
        let room = cont_room(emit.seg_limit);
        // Once: a source's length may be a walk over its pieces.
        let total = payload.len();
        while *next_off < total {
            let (off, len) = (*next_off, (total - *next_off).min(room));
            let frame = SegFrame::Msg {
                id,
                off: off as u64,
                len: len as u32,
                first: false,
            };
            let head = FrameHead::MsgCont { offset: off as u64 };
            if !emit.segment(sh, snd, head, frame, (&*payload, off, len), now) {
                return;
            }
            *next_off += len;
            *unacked += 1;
            if *next_off == total {
                *segmented = true;
                msgs.pop_front();
            }
            if emit.run.stop {
                return;
            }
        }
    }

    /// The segments of the rendezvous range at the head of the data queue
    /// (RDATA the receiver asked for, or PDATA pushed behind an RTS).
    fn rdata_run(&mut self, sh: &mut Shared, scratch: &mut TxScratch, now: u64, emit: &mut Emit<'_>) {
        let Vc { snd, rdata, tx, .. } = self;
        let Some(job) = rdata.front_mut() else { return };
        let room = data_room(emit.seg_limit) as u64;
        // The scratch keeps the source alive for the whole call, past the
        // job's end below (the batch sends from it after this returns).
        let src = scratch.hold(job.key, &job.src);
        while job.next < job.end {
            let (offset, len) = (job.next, (job.end - job.next).min(room));
            let frame = SegFrame::RData {
                key: job.key,
                rid: job.rid,
                offset,
                len: len as u32,
            };
            let head = match job.rid {
                Some(rid) => FrameHead::RData { rid, offset },
                None => FrameHead::PData { key: job.key, offset },
            };
            if !emit.segment(sh, snd, head, frame, (src, offset as usize, len as usize), now) {
                break;
            }
            job.next += len;
            if emit.run.stop {
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
            // The run is this range's alone: every segment it sent.
            *unacked += emit.run.sent as u32;
        }
    }
}

/// What every segment of a run shares: where it goes, what its header
/// repeats, and the run's count so far.
struct Emit<'o> {
    out: &'o mut dyn TxOut,
    to: SocketAddr,
    seg_limit: usize,
    conn: u64,
    ack: u32,
    sack: u64,
    max: usize,
    run: Run,
}

impl Emit<'_> {
    /// One segment: `head` in the next slot with the run's ACK fields and
    /// the next sequence number, then `len` bytes of the source from
    /// `off` (left there for the wire to gather), and `frame` in the send
    /// window, as `transmit` sends a segment. False if it did not go (the
    /// run is at its end, the window full, or the output has no slot);
    /// `run.stop` says whether the output takes no more. Inlined into
    /// both runs: a call per segment cost a seventh more (callgrind).
    #[inline(always)]
    fn segment(
        &mut self,
        sh: &mut Shared,
        snd: &mut SendWindow<SegFrame>,
        head: FrameHead,
        frame: SegFrame,
        (src, off, len): (&dyn SendSource, usize, usize),
        now: u64,
    ) -> bool {
        if self.run.sent == self.max || !snd.has_room(&sh.cfg) {
            return false;
        }
        let Some(buf) = self.out.slot() else {
            self.run.stop = true;
            return false;
        };
        if buf.len() < self.seg_limit {
            return false;
        }
        let hdr_len = head.emit_seg(buf, self.conn, self.ack, self.sack, snd.nxt as u32);
        let n = hdr_len + len;
        snd.sent(&sh.cfg, frame, n, now);
        sh.stats.segments_sent += 1;
        sh.stats.datagrams_out += 1;
        sh.stats.bytes_out += n as u64;
        self.run.sent += 1;
        let t = Transmit {
            to: self.to,
            len: n,
            hdr_len,
            payload: (len > 0).then_some((src, off)),
        };
        self.run.stop = !self.out.commit(t);
        true
    }
}
