//! The message layer of a VC: what its sequence numbers carry (`SegFrame`),
//! eager segmentation and reassembly (a long eager message is held from
//! its first segment instead, `RxEager`), the RTS that announces a rendezvous
//! message (with its tail), the push of a rendezvous message's first bytes
//! behind its RTS, completion of sends as their segments are acknowledged,
//! and the credit glue of both sides.
//!
//! A rendezvous send pushes its first bytes (PDATA) right behind its RTS.
//! Whether the receiver can take them is decided once, when the RTS is
//! delivered: if the application has a receive posted for it, the
//! endpoint accepts it before the next datagram is handled
//! (`Engine::wants_match_now`), the pushed bytes land in the receive
//! buffer and the receiver GETs only the rest; otherwise every pushed
//! segment is dropped (but acknowledged, so the window moves on) and the
//! receive, once posted, pulls the whole message. So pushed data never
//! waits in receiver memory, and costs no credits.

use super::rndv::{cont_room, data_room, msg_room, RDataJob, RxRndv};
use super::vc::Vc;
use super::{Map, Shared};
use crate::proto::credit::{Admit, Borrower, Lender};
use crate::proto::wire;
use crate::proto::{
    EngineConfig, EngineError, Event, MsgBody, MsgHdr, MsgId, Payload, RecvSink, RndvId, SendPayload, SendSource,
};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;

/// Reassembly of an eager message never reserves more than this up front,
/// whatever total length the first segment claims.
const REASM_RESERVE_MAX: u64 = 1 << 20;
/// A held eager message (`RxEager`) reserves at most this for the rest of
/// it at once, however long it says it is: the default eager maximum.
/// A forged header followed by one more segment costs us no more; a
/// longer message grows from there as any Vec does.
const HELD_RESERVE_MAX: u64 = 64 << 10;
/// Largest eager message we agree to reassemble.
pub const MAX_EAGER_LEN: u64 = 1 << 30;

/// Longest tail an RTS carries (`rts_tail`). Up to this size the receiver
/// would not have received the tail's RDATA segment in place anyway
/// (PLACEMENT_MIN_SEG), so holding it with the RTS costs no extra copy
/// worth counting, and an unexpected RTS never holds more than this.
const RTS_TAIL_MAX: usize = 16 << 10;

/// Rendezvous sends to a peer that dropped pushed data (its receive was not
/// posted yet) that go without a push, before pushing is tried again.
pub(crate) const PUSH_BACKOFF: u32 = 8;

/// What a sequence number carries, by reference to the data it came from,
/// so a retransmission re-reads the source instead of keeping a copy.
#[derive(Clone, Copy, Debug)]
pub(super) enum SegFrame {
    Msg {
        id: MsgId,
        off: u64,
        len: u32,
        first: bool,
    },
    Rts {
        id: MsgId,
    },
    Get {
        key: MsgId,
        rid: RndvId,
        offset: u64,
        len: u64,
        last: bool,
    },
    /// Rendezvous data: asked for by the receiver's `rid`, or pushed
    /// (`None`: PDATA, named by our key).
    RData {
        key: MsgId,
        rid: Option<RndvId>,
        offset: u64,
        len: u32,
    },
    Fin {
        key: MsgId,
    },
    Nop,
}

impl SegFrame {
    /// The message whose data the segment carries (an eager message's
    /// segment, or rendezvous data): its acknowledgement counts toward
    /// that message's completion.
    pub(super) fn data_of(&self) -> Option<MsgId> {
        match *self {
            SegFrame::Msg { id, .. } | SegFrame::RData { key: id, .. } => Some(id),
            _ => None,
        }
    }
}

pub(super) enum TxBody {
    Eager {
        /// Read again for each (re)transmission: the caller keeps it valid
        /// until SendDone (a copy when it cannot, e.g. for an inject).
        payload: SendPayload,
        next_off: usize,
        started: bool,
        segmented: bool,
        unacked: u32,
    },
    Rndv {
        /// Shared with the GETs being served (`RDataJob`).
        src: Arc<dyn SendSource>,
        len: u64,
        /// The receiver's GET_LAST came: once every RDATA segment is
        /// acknowledged, it holds all it asked for and the send is done.
        last_get: bool,
        /// RDATA segments sent and not yet acknowledged.
        unacked: u32,
        /// Last bytes sent with the RTS (`rts_tail`), never pulled.
        tail: u32,
        /// First bytes pushed behind the RTS (`push_len`).
        push: u32,
    },
}

pub(super) struct TxMsg {
    pub(super) hdr: MsgHdr,
    pub(super) body: TxBody,
    /// Completed to the application when it was sent (its payload is the
    /// engine's own copy): no SendDone or SendFailed event.
    pub(super) quiet: bool,
}

impl TxMsg {
    /// A message of `src.len()` bytes for a VC whose segments are at most
    /// `seg_limit` bytes: eager if `mode` allows and it is short enough,
    /// rendezvous otherwise, with its RTS's tail and the bytes pushed
    /// behind it (none while `push_backoff` lasts).
    pub(super) fn new(
        cfg: &EngineConfig,
        hdr: MsgHdr,
        src: SendPayload,
        eager: bool,
        seg_limit: usize,
        push_backoff: &mut u32,
    ) -> TxMsg {
        let quiet = matches!(src, SendPayload::Copied(_));
        let len = src.len();
        let body = if eager && len <= eager_max(cfg) {
            TxBody::Eager {
                payload: src,
                next_off: 0,
                started: false,
                segmented: false,
                unacked: 0,
            }
        } else {
            let len = len as u64;
            let tail = rts_tail(len, seg_limit);
            let push = if *push_backoff > 0 {
                *push_backoff -= 1;
                0
            } else {
                push_len(len - tail as u64, data_room(seg_limit), cfg.rndv_push)
            };
            TxBody::Rndv {
                src: match src {
                    SendPayload::Source(b) => Arc::from(b),
                    SendPayload::Copied(p) => Arc::new(p.into_vec()),
                },
                len,
                last_get: false,
                unacked: 0,
                tail,
                push,
            }
        };
        TxMsg {
            hdr: MsgHdr { len: len as u64, ..hdr },
            body,
            quiet,
        }
    }
}

/// An eager message on its way in, segment by segment (the sender never
/// interleaves two on a VC, and the VC hands them over in order).
/// `awaited`: its sender waits for the ACK (wire::MSG_AWAITED).
pub(super) enum Reasm {
    /// Reassembled here, surfaced whole at its last segment.
    Whole { hdr: MsgHdr, buf: Vec<u8>, awaited: bool },
    /// Surfaced at its first segment as held message `rid` (`RxEager`,
    /// `EngineConfig::eager_place_min`): the next byte due, of `total`.
    Held {
        rid: RndvId,
        next: u64,
        total: u64,
        awaited: bool,
    },
}

/// A long eager message surfaced at its first segment, as a rendezvous
/// message is at its RTS (`MsgBody::Rndv`): until a receive takes it
/// (`Engine::accept`) the engine keeps what arrives; once one has, the
/// rest goes straight into that receive's buffer, one copy fewer than
/// reassembling it first. Nothing goes back to the sender: it completes
/// on the ACKs of its segments, as for any eager message.
pub(super) struct RxEager {
    pub(super) peer: SocketAddr,
    pub(super) total: u64,
    /// Bytes arrived so far (in order).
    pub(super) received: u64,
    /// What arrived before a receive took it.
    pub(super) buf: Vec<u8>,
    /// The receive that took it, and how much of the message it holds.
    pub(super) sink: Option<(Box<dyn RecvSink>, u64)>,
}

impl super::Engine {
    /// Whether `peer` is amid a long eager message surfaced at its first
    /// segment that no receive has taken yet: its next segments would be
    /// kept here, and copied again once a receive takes it. (A caller that
    /// just handed the application a completion may leave them for its
    /// next pass, so that a receive posted in answer takes them in place:
    /// `UdpWire::feed`.)
    pub fn holds_unclaimed(&self, peer: SocketAddr) -> bool {
        let Some(vc) = self.vcs.get(&peer) else { return false };
        match vc.reasm {
            Some(Reasm::Held { rid, .. }) => self.sh.rx_eager.get(&rid).is_some_and(|e| e.sink.is_none()),
            _ => false,
        }
    }
}

/// Longest message sent eagerly: the rendezvous threshold, but never more
/// than a receiver reassembles, nor more credits than a peer may ever hold
/// (such a message would wait for credits forever).
pub(super) fn eager_max(cfg: &EngineConfig) -> usize {
    let credits = cfg
        .credits
        .map_or(usize::MAX, |c| c.max_loan as usize * c.unit as usize);
    cfg.rndv_threshold.min(MAX_EAGER_LEN as usize).min(credits)
}

/// Bytes at the end of a rendezvous message of `len` bytes that its RTS
/// carries: the remainder that would otherwise go in a short RDATA segment
/// of its own after the full ones (one datagram fewer per message), if it
/// fits beside the RTS, is at most RTS_TAIL_MAX, and leaves something to pull.
fn rts_tail(len: u64, seg_limit: usize) -> u32 {
    let room = data_room(seg_limit) as u64;
    let t = len % room;
    let fits = t as usize <= (seg_limit - wire::SEG_HDR_LEN - wire::RTS_BODY_LEN).min(RTS_TAIL_MAX);
    if t < len && fits {
        t as u32
    } else {
        0
    }
}

/// Bytes pushed behind the RTS of a rendezvous message whose pulled part
/// (its length less the RTS's tail) is `pull` bytes: whole segments of
/// `room` payload bytes, at most `max`, and fewer than `pull`, so a GET
/// always follows (the sender completes when its GET_LAST is served).
fn push_len(pull: u64, room: usize, max: u64) -> u32 {
    let room = room as u64;
    let segs = (max / room).min(pull.saturating_sub(1) / room);
    (segs * room).min(u32::MAX as u64) as u32
}

/// `count` segments of message `id` the peer acknowledged (cumulatively or
/// selectively): the message completes once all of it is delivered. (A
/// free function on the parts it needs: it runs while the VC's send window
/// is borrowed.)
pub(super) fn segs_delivered(
    tx: &mut Map<MsgId, TxMsg>,
    rdata: &VecDeque<RDataJob>,
    events: &mut VecDeque<Event>,
    quiet_in_flight: &mut usize,
    id: MsgId,
    count: u32,
) {
    let done = match tx.get_mut(&id).map(|m| &mut m.body) {
        Some(TxBody::Eager { unacked, segmented, .. }) => {
            *unacked -= count;
            *unacked == 0 && *segmented
        }
        // The receiver places RDATA before acknowledging it, so an
        // acknowledged final range means it holds everything: no FIN.
        Some(TxBody::Rndv { unacked, last_get, .. }) => {
            *unacked -= count;
            *unacked == 0 && *last_get && !rdata.iter().any(|j| j.key == id)
        }
        None => false,
    };
    if done {
        if let Some(m) = tx.remove(&id) {
            super::send_done(events, quiet_in_flight, id, m.quiet);
        }
    }
}

/// Sending side: takes the credits a new message of `len` bytes costs, or
/// stalls the VC (a CREDIT datagram asks the peer for more).
fn spend_credits(sh: &mut Shared, b: &mut Borrower, len: usize, due: &mut bool) -> bool {
    let Some(cfg) = sh.cfg.credits else { return true };
    let was = b.stalled();
    if b.try_spend(cfg.cost(len)) {
        return true;
    }
    if !was {
        sh.stats.credit_stalls += 1;
        *due = true;
    }
    false
}

/// Receiving side: a new message of `len` bytes from the peer, within its
/// loan, or dropped and counted.
fn admit(sh: &mut Shared, l: &mut Lender, len: u64) -> bool {
    let Some(bank) = &mut sh.bank else { return true };
    let cost = bank.cfg.cost(len.min(usize::MAX as u64) as usize);
    if bank.on_arrival(l, cost) == Admit::OverLoan {
        sh.stats.dropped_over_credit += 1;
        return false;
    }
    true
}

impl Vc {
    /// The next segment of the oldest message not fully sent: an eager
    /// message's next piece, or a rendezvous message's RTS (its pushed
    /// data queued right behind it). None if there is none, or the next
    /// message waits for credits.
    pub(super) fn next_msg_frame(&mut self, sh: &mut Shared) -> Option<SegFrame> {
        let lim = self.seg_limit;
        while let Some(&id) = self.msgs.front() {
            let Some(m) = self.tx.get_mut(&id) else {
                self.msgs.pop_front();
                continue;
            };
            match &mut m.body {
                TxBody::Eager {
                    payload,
                    next_off,
                    started,
                    segmented,
                    unacked,
                } => {
                    let first = !*started;
                    if first && !spend_credits(sh, &mut self.borrower, payload.len(), &mut self.credit_due) {
                        return None;
                    }
                    let room = if first { msg_room(lim) } else { cont_room(lim) };
                    let len = (payload.len() - *next_off).min(room);
                    let f = SegFrame::Msg {
                        id,
                        off: *next_off as u64,
                        len: len as u32,
                        first,
                    };
                    *started = true;
                    *next_off += len;
                    *unacked += 1;
                    if *next_off == payload.len() {
                        *segmented = true;
                        self.msgs.pop_front();
                    }
                    return Some(f);
                }
                TxBody::Rndv { tail, push, src, .. } => {
                    if !spend_credits(sh, &mut self.borrower, *tail as usize, &mut self.credit_due) {
                        return None;
                    }
                    self.msgs.pop_front();
                    if *push > 0 {
                        // Queued now, so its segments follow the RTS.
                        sh.stats.rndv_pushed += 1;
                        self.rdata.push_back(RDataJob {
                            key: id,
                            rid: None,
                            next: 0,
                            end: *push as u64,
                            src: src.clone(),
                        });
                    }
                    return Some(SegFrame::Rts { id });
                }
            }
        }
        None
    }

    /// The first segment of an eager message: delivered whole, or the start
    /// of a reassembly. True: it was all there, and its sender waits for
    /// the ACK (`awaited`).
    #[allow(clippy::too_many_arguments)] // the MSG's fields, as the wire decodes them
    pub(super) fn on_msg(
        &mut self,
        sh: &mut Shared,
        tag: u64,
        data: u64,
        flags: u32,
        awaited: bool,
        total: u64,
        payload: &[u8],
    ) -> bool {
        if let Some(r) = self.reasm.take() {
            // The sender never interleaves eager messages.
            sh.stats.dropped_malformed += 1;
            if let Reasm::Held { rid, .. } = r {
                if abandon_held(sh, rid) {
                    self.rx_active -= 1;
                }
            }
        }
        let hdr = MsgHdr {
            tag,
            data,
            len: total,
            flags,
        };
        if !admit(sh, &mut self.lender, total) {
            return false;
        }
        if payload.len() as u64 == total {
            sh.events.push_back(Event::Msg {
                peer: self.peer,
                hdr,
                body: MsgBody::Eager(Payload::from_slice(payload)),
            });
            return awaited;
        } else if total > MAX_EAGER_LEN {
            sh.stats.dropped_malformed += 1;
        } else if total >= sh.cfg.eager_place_min {
            let rid = sh.next_rid;
            sh.next_rid += 1;
            sh.stats.eager_held += 1;
            let next = payload.len() as u64;
            sh.rx_eager.insert(
                rid,
                RxEager {
                    peer: self.peer,
                    total,
                    received: next,
                    buf: payload.to_vec(),
                    sink: None,
                },
            );
            self.reasm = Some(Reasm::Held {
                rid,
                next,
                total,
                awaited,
            });
            sh.events.push_back(Event::Msg {
                peer: self.peer,
                hdr,
                body: MsgBody::Rndv(rid),
            });
            // Matched before the next datagram, its segments land in place.
            sh.match_now = true;
        } else {
            let mut buf = Vec::with_capacity(total.min(REASM_RESERVE_MAX) as usize);
            buf.extend_from_slice(payload);
            self.reasm = Some(Reasm::Whole { hdr, buf, awaited });
        }
        false
    }

    /// An eager message of `total` bytes in one segment (of `body_len`
    /// bytes after its header) that came next in order with nothing
    /// parked behind it, taken by the caller straight from its datagram
    /// (`Engine::handle_one`): what `on_seg` and `on_msg` do with it but
    /// queue its event. Whether it was admitted (else it is dropped and
    /// counted, as `on_msg` drops it).
    pub(super) fn take_whole(&mut self, sh: &mut Shared, total: u64, awaited: bool, body_len: usize, now: u64) -> bool {
        debug_assert!(self.reasm.is_none());
        let admitted = admit(sh, &mut self.lender, total);
        let filled_hole = self.rcv.advance(body_len);
        debug_assert!(!filled_hole);
        let we_wait = !self.snd.unacked.is_empty();
        self.rcv
            .in_order_arrived(&sh.cfg, false, false, admitted && awaited, we_wait, now);
        admitted
    }

    /// A later segment of the eager message being reassembled. True: it
    /// was the last, and the sender waits for the ACK (`Reasm`'s `awaited`).
    pub(super) fn on_msg_cont(&mut self, sh: &mut Shared, offset: u64, payload: &[u8]) -> bool {
        let len = payload.len() as u64;
        match &mut self.reasm {
            Some(Reasm::Whole { hdr, buf, .. }) if offset == buf.len() as u64 && offset + len <= hdr.len => {
                buf.extend_from_slice(payload);
                if buf.len() as u64 == hdr.len {
                    let Some(Reasm::Whole { hdr, buf, awaited }) = self.reasm.take() else {
                        unreachable!("reassembly in progress")
                    };
                    sh.events.push_back(Event::Msg {
                        peer: self.peer,
                        hdr,
                        body: MsgBody::Eager(Payload::from_vec(buf)),
                    });
                    return awaited;
                }
                false
            }
            Some(Reasm::Held {
                rid,
                next,
                total,
                awaited,
            }) if offset == *next && offset + len <= *total => {
                *next += len;
                let (rid, last, awaited) = (*rid, *next == *total, *awaited);
                if last {
                    self.reasm = None;
                }
                // Gone: discarded, its bytes are not wanted.
                let Some(e) = sh.rx_eager.get_mut(&rid) else {
                    return last && awaited;
                };
                e.received += len;
                match &mut e.sink {
                    Some((sink, want)) => {
                        if offset < *want {
                            sink.write_at(offset as usize, &payload[..len.min(*want - offset) as usize]);
                        }
                    }
                    None => {
                        if e.buf.capacity() - e.buf.len() < payload.len() {
                            // Held past its first segment (its receive was
                            // not posted in time): room for the rest at once.
                            // Grown by doubling, each step copied all that came
                            // before: some 88 KiB more for a 64 KiB message.
                            let rest = e.total - e.buf.len() as u64;
                            e.buf.reserve(rest.min(HELD_RESERVE_MAX) as usize);
                        }
                        e.buf.extend_from_slice(payload);
                    }
                }
                if last && e.sink.is_some() {
                    self.rx_active -= 1;
                    let e = sh.rx_eager.remove(&rid).expect("looked up above");
                    let (sink, want) = e.sink.expect("taken");
                    sh.events.push_back(Event::RecvDone {
                        rid,
                        sink,
                        written: want as usize,
                    });
                }
                last && awaited
            }
            _ => {
                sh.stats.dropped_malformed += 1;
                false
            }
        }
    }

    /// An RTS: a rendezvous message announced (`Event::Msg` with a rid),
    /// holding its tail until the application accepts or discards it.
    #[allow(clippy::too_many_arguments)] // the RTS's fields, as the wire decodes them
    pub(super) fn on_rts(
        &mut self,
        sh: &mut Shared,
        tag: u64,
        data: u64,
        flags: u32,
        total: u64,
        key: MsgId,
        push: u32,
        tail: &[u8],
    ) {
        // What the RTS holds until the application takes it: the tail.
        if !admit(sh, &mut self.lender, tail.len() as u64) {
            return;
        }
        let rid = sh.next_rid;
        sh.next_rid += 1;
        let mut push = push as u64;
        if push > 0 {
            self.pushes.insert(key, rid);
            if self.push_gap.is_some_and(|(lo, hi)| (lo..=hi).contains(&key)) {
                // Some of its pushed data came first and was dropped.
                push = 0;
            } else {
                // Its PDATA follows: the endpoint should match the
                // message before handling another datagram.
                sh.match_now = true;
            }
            if self.push_gap.is_some_and(|(_, hi)| key >= hi) {
                self.push_gap = None;
            }
        }
        self.last_rts_key = Some(key);
        sh.rx.insert(
            rid,
            RxRndv {
                peer: self.peer,
                key,
                total,
                tail: tail.to_vec(),
                push,
                accepted: None,
            },
        );
        let hdr = MsgHdr {
            tag,
            data,
            len: total,
            flags,
        };
        sh.events.push_back(Event::Msg {
            peer: self.peer,
            hdr,
            body: MsgBody::Rndv(rid),
        });
    }

    /// The receive that pushed data with the sender's `key` belongs to, if
    /// it can take it now. Pushed data whose RTS has not arrived (it
    /// overtook it) or whose receive was not posted when the RTS came is
    /// dropped, and that receive pulls those bytes instead.
    pub(super) fn pushed_to(&mut self, sh: &mut Shared, key: MsgId) -> Option<RndvId> {
        let Some(&rid) = self.pushes.get(&key) else {
            if self.last_rts_key.is_none_or(|k| key > k) {
                // It overtook its RTS: that receive pulls everything.
                self.push_gap = Some(match self.push_gap {
                    Some((lo, hi)) => (lo.min(key), hi.max(key)),
                    None => (key, key),
                });
                sh.stats.push_dropped += 1;
            } else {
                // Pushed beyond what a finished receive wanted.
                sh.stats.dropped_rndv += 1;
            }
            return None;
        };
        match sh.rx.get_mut(&rid) {
            Some(rx) if rx.accepted.is_none() => {
                // Not posted when its RTS came: it will pull these bytes.
                rx.push = 0;
                sh.stats.push_dropped += 1;
                None
            }
            Some(_) => Some(rid),
            None => {
                self.pushes.remove(&key);
                sh.stats.dropped_rndv += 1;
                None
            }
        }
    }
}

/// A held eager message that will never be whole (its sender broke the
/// order of its segments): a receive that took it fails (true: it was
/// waiting); one not taken yet finds it gone (`Engine::accept`:
/// `UnknownRndv`).
fn abandon_held(sh: &mut Shared, rid: RndvId) -> bool {
    let Some(RxEager {
        sink: Some((sink, _)), ..
    }) = sh.rx_eager.remove(&rid)
    else {
        return false;
    };
    sh.events.push_back(Event::RecvFailed {
        rid,
        sink,
        err: EngineError::UnknownRndv,
    });
    true
}
