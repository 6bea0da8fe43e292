//! A one-segment message sent ahead of its bookkeeping, and one received
//! without being queued.
//!
//! The general way of `send_now` (`Engine::submit`) records a message
//! before it builds its segment: the message into the VC's table and
//! queue, then out of the queue again by `transmit`'s priority walk, two
//! more lookups in the table to build the segment, the segment into the
//! send window. For a message that goes at once in one segment most of
//! that can wait until the datagram is on the wire, which is what a
//! ping-pong's answer waits for. So `prepare` only checks that nothing
//! comes before the message on its VC (as `Vc::transmit` would find:
//! handshake, control frames, retransmissions, other messages, a credit
//! request), takes its credits and builds the datagram (our ACK state,
//! its header, its payload, read by the caller's `read`); the caller sends
//! it, then `commit` records what `submit` would have: the message (what
//! a retransmission reads), the segment in the send window with its RTO,
//! the counts, the VC's readiness and deadline. Between the two the
//! caller calls nothing else of the engine; `Engine::send_now` is the two
//! in one call. (fabtests' 8-byte ping-pong across hosts, callgrind: of
//! `fi_tinject`'s instructions some 1 400 now come before the `send`
//! syscall, against 1 900.)
//!
//! The answer's way in is the same message's: one datagram, one segment,
//! the next in order on its VC. The general way (`handle_run`) queues it
//! as an `Event::Msg` with its payload copied, for the caller to take
//! out again; `handle_one` hands it back instead, its payload still in
//! the caller's receive buffer, once the VC's bookkeeping for it is done,
//! when no event waits before it (an ACK's completions, a PeerUp).

use super::later::LaterAck;
use super::msg::{eager_max, SegFrame, TxBody, TxMsg};
use super::rndv::msg_room;
use super::sched::mark_ready;
use super::vc::SegIn;
use super::Engine;
use crate::proto::wire::{self, Frame, FrameHead, Packet};
use crate::proto::{MsgHdr, MsgId, SendPayload, SendSource};
use std::net::SocketAddr;

/// A datagram `prepare` built, waiting for its `commit`.
#[must_use = "a prepared message must be committed"]
pub struct Express {
    id: MsgId,
    peer: SocketAddr,
    /// The datagram's bytes, and the payload's.
    datagram: usize,
    payload: usize,
}

impl Express {
    pub fn datagram_len(&self) -> usize {
        self.datagram
    }
}

impl Engine {
    /// The datagram of an eager message of `len` bytes for `peer` into
    /// `buf`, if it can go now in one segment with nothing ahead of it;
    /// `read` fills in its payload; `awaited`: the sender's completion
    /// waits for its ACK (not an inject; wire::MSG_AWAITED). None: nothing
    /// was done (the general way takes it).
    pub fn prepare(
        &mut self,
        peer: SocketAddr,
        hdr: &MsgHdr,
        len: usize,
        awaited: bool,
        read: impl FnOnce(&mut [u8]),
        buf: &mut [u8],
    ) -> Option<Express> {
        let sh = &mut self.sh;
        if !self.ready.is_empty() || sh.cfg.max_datagram < wire::MIN_DATAGRAM || len > eager_max(&sh.cfg) {
            return None;
        }
        let vc = self.vcs.get_mut(&peer)?;
        let conn = vc.peer_nonce?;
        let room = msg_room(vc.seg_limit);
        if !vc.established()
            || vc.resp_pending
            || vc.unproven.is_some()
            || vc.credit_due
            || buf.len() < vc.seg_limit
            || len > room
            || !vc.snd.rtx.is_empty()
            || !vc.snd.has_room(&sh.cfg)
            || !vc.ctrl.is_empty()
            || !vc.msgs.is_empty()
        {
            return None;
        }
        if let Some(c) = sh.cfg.credits {
            let cost = c.cost(len);
            // (A failed `try_spend` records a want: checked first, so a
            // message that cannot go this way leaves nothing behind.)
            if vc.borrower.available() < cost || !vc.borrower.try_spend(cost) {
                return None;
            }
        }
        let (ack, sack) = vc.rcv.ack_fields();
        vc.rcv.clear_ack();
        let head = FrameHead::Msg {
            tag: hdr.tag,
            data: hdr.data,
            flags: hdr.flags,
            awaited,
            total: len as u64,
        };
        let at = head.emit_seg(buf, conn, ack, sack, vc.snd.nxt as u32);
        read(&mut buf[at..at + len]);
        let id = sh.next_msg_id;
        sh.next_msg_id += 1;
        Some(Express {
            id,
            peer,
            datagram: at + len,
            payload: len,
        })
    }

    /// Records the message `x` carried (its header `hdr`, its payload
    /// `payload`, read again for a retransmission), once its datagram is
    /// sent: what `submit` would have recorded.
    pub fn commit(&mut self, x: Express, hdr: MsgHdr, payload: SendPayload, now: u64) -> MsgId {
        debug_assert_eq!(payload.len(), x.payload);
        let sh = &mut self.sh;
        let Some(vc) = self.vcs.get_mut(&x.peer) else {
            unreachable!("the VC of a prepared message stays until its commit")
        };
        // Its datagram carried our ACK state (`prepare`).
        vc.rcv.ack_left(&sh.cfg, now, true);
        let quiet = matches!(payload, SendPayload::Copied(_));
        sh.quiet_in_flight += quiet as usize;
        let m = TxMsg {
            hdr: MsgHdr {
                len: x.payload as u64,
                ..hdr
            },
            body: TxBody::Eager {
                payload,
                next_off: x.payload,
                started: true,
                segmented: true,
                unacked: 1,
            },
            quiet,
        };
        vc.tx.insert(x.id, m);
        let frame = SegFrame::Msg {
            id: x.id,
            off: 0,
            len: x.payload as u32,
            first: true,
        };
        vc.snd.sent(&sh.cfg, frame, x.datagram, now);
        sh.stats.segments_sent += 1;
        sh.stats.datagrams_out += 1;
        sh.stats.bytes_out += x.datagram as u64;
        if vc.may_transmit(now) {
            mark_ready(&mut self.ready, vc);
        }
        self.timers.rearm(vc, &sh.cfg);
        x.id
    }
}

impl Engine {
    /// One datagram from `from`, handled as `handle_run` handles a run of
    /// one; but an eager message in one segment that comes next in order
    /// on `from`'s established VC, with no event waiting before it, is not
    /// queued as an `Event::Msg`: it is handed back (its header and its
    /// payload, in `bytes`) for the caller to give to the application at
    /// once. Its credits are charged as for `Event::Msg`, for the caller
    /// to `release`.
    pub fn handle_one<'a>(&mut self, from: SocketAddr, bytes: &'a [u8], now: u64) -> Option<(MsgHdr, &'a [u8])> {
        self.settle();
        let parsed = Packet::parse(bytes);
        let sh = &mut self.sh;
        let live = match parsed {
            Ok(Packet::Seg {
                conn,
                ack,
                sack,
                seq,
                frame,
            }) => self
                .vcs
                .get_mut(&from)
                .filter(|vc| vc.established() && conn == vc.local_nonce)
                .map(|vc| (vc, conn, ack, sack, seq, frame)),
            _ => None,
        };
        let Some((vc, conn, ack, sack, seq, frame)) = live else {
            // Not a segment of a live VC: the general way, which counts
            // what it drops.
            self.handle_parsed(from, bytes, parsed, now);
            return None;
        };
        let a = LaterAck::of(from, conn, ack, sack, now);
        vc.seg_heard(sh, &mut self.later, a, bytes.len(), matches!(frame, Frame::Msg { .. }));
        let taken = match frame {
            Frame::Msg {
                tag,
                data,
                flags,
                awaited,
                total,
                payload,
            } if payload.len() as u64 == total
                && sh.events.is_empty()
                && vc.reasm.is_none()
                && vc.rcv.is_next_alone(seq) =>
            {
                let body_len = bytes.len() - wire::SEG_HDR_LEN;
                vc.take_whole(sh, total, awaited, body_len, now).then_some((
                    MsgHdr {
                        tag,
                        data,
                        len: total,
                        flags,
                    },
                    payload,
                ))
            }
            _ => {
                vc.on_seg(sh, seq, SegIn::of_datagram(bytes, frame), now);
                None
            }
        };
        self.timers.rearm(vc, &sh.cfg);
        if vc.may_transmit(now) {
            mark_ready(&mut self.ready, vc);
        }
        taken
    }
}
