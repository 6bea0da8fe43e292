//! Rendezvous: the receiver pulls an announced message (RTS) with GETs,
//! windowed, and the sender serves them as RDATA; the data is placed into
//! the receive's sink on arrival, in or out of order, or received straight
//! into it by the wire on a guess (`Engine::rdata_placement`). The ACK of
//! the last data segment completes the send; a FIN does when the receiver
//! wanted no data or discarded the message.

use super::msg::{SegFrame, TxBody, TxMsg};
use super::sched::mark_ready;
use super::vc::{SegIn, Vc};
use super::{Engine, Shared};
use crate::proto::wire::{self, Frame};
use crate::proto::{EngineConfig, EngineError, Event, MsgId, RecvSink, RndvId, SendSource};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;

/// Segments smaller than this are not received in place: the copy saved
/// is small, and receiving one datagram per call would forgo recvmmsg
/// batches and GRO (which coalesces small-MTU bulk into 64 KiB receives).
const PLACEMENT_MIN_SEG: usize = 16 << 10;

/// An announced rendezvous receive.
pub(super) struct RxRndv {
    pub(super) peer: SocketAddr,
    /// The sender's message id.
    pub(super) key: MsgId,
    pub(super) total: u64,
    /// The message's last bytes, carried by the RTS; the rest is pulled.
    pub(super) tail: Vec<u8>,
    /// Bytes from offset 0 the sender pushes behind the RTS, while they
    /// can still be taken: 0 once one was dropped (the receive pulls them).
    pub(super) push: u64,
    pub(super) accepted: Option<Accepted>,
}

pub(super) struct Accepted {
    sink: Box<dyn RecvSink>,
    /// Bytes to pull (GET): the receive's length, or less if the RTS's
    /// tail covers the end of it.
    want: u64,
    /// Bytes of the RTS's tail written into the sink at accept.
    from_tail: u64,
    /// Bytes below this come pushed (PDATA), unasked.
    push_end: u64,
    /// Bytes below this have been pushed or asked for with GET (GETs start
    /// at `push_end`, so none went out if everything wanted came pushed).
    requested: u64,
    received: u64,
    /// End of the highest range received: nothing at or above it has been
    /// written, so the wire may receive straight into it on a guess.
    high: u64,
    /// RDATA payload per segment we expect (our own segment size for the peer).
    seg_room: usize,
}

impl Accepted {
    /// (wanted, requested, received) bytes, for `Engine::debug_state`.
    #[cfg(test)]
    pub(super) fn progress(&self) -> (u64, u64, u64) {
        (self.want, self.requested, self.received)
    }
}

/// Rendezvous data being sent: a GET being served, or a push.
pub(super) struct RDataJob {
    pub(super) key: MsgId,
    /// None: a push, not a GET.
    pub(super) rid: Option<RndvId>,
    pub(super) next: u64,
    pub(super) end: u64,
    pub(super) src: Arc<dyn SendSource>,
}

/// Rendezvous data that arrived (RDATA, or PDATA: `pushed`, `id` the
/// sender's key instead of our rid).
pub(super) struct Data<'a> {
    pub(super) pushed: bool,
    pub(super) id: u64,
    pub(super) offset: u64,
    pub(super) bytes: DataBytes<'a>,
}

pub(super) enum DataBytes<'a> {
    /// The payload, to be copied into the sink.
    Copy(&'a [u8]),
    /// `len` bytes the wire already received into the sink of receive
    /// `rid` (the guess of `Engine::rdata_placement`).
    InPlace { rid: RndvId, len: usize },
}

impl<'a> Data<'a> {
    /// The data an RDATA or PDATA frame carries; None for other frames.
    pub(super) fn of_frame(frame: &Frame<'a>) -> Option<Data<'a>> {
        match *frame {
            Frame::RData { rid, offset, payload } => Some(Data {
                pushed: false,
                id: rid,
                offset,
                bytes: DataBytes::Copy(payload),
            }),
            Frame::PData { key, offset, payload } => Some(Data {
                pushed: true,
                id: key,
                offset,
                bytes: DataBytes::Copy(payload),
            }),
            _ => None,
        }
    }
}

/// Where the payload of the next datagram goes if it is the RDATA (or
/// PDATA) segment the engine expects next (`Engine::rdata_placement`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    pub rid: RndvId,
    /// The guess is pushed data, named by the sender's key.
    pub pushed: bool,
    pub key: MsgId,
    pub offset: u64,
    /// Length of the region handed out.
    pub len: usize,
}

impl Placement {
    /// Bytes of header the wire receives apart from the payload.
    pub const HEAD_LEN: usize = wire::RDATA_HEAD_LEN;

    /// Whether a datagram whose first `HEAD_LEN` bytes are `head`, followed
    /// by `len` bytes received into the region, is the guessed segment.
    pub fn matches(&self, head: &[u8], len: usize) -> Option<wire::RDataHead> {
        let h = wire::RDataHead::parse(head)?;
        let id = if self.pushed { self.key } else { self.rid };
        (h.pushed == self.pushed && h.id == id && h.offset == self.offset && len > 0 && len <= self.len).then_some(h)
    }
}

/// Payload bytes of one RDATA (or PDATA) segment of a VC whose segments are
/// at most `seg_limit` bytes.
pub(super) fn data_room(seg_limit: usize) -> usize {
    seg_limit - wire::SEG_HDR_LEN - wire::RDATA_BODY_LEN
}

/// Payload bytes of an eager message's first segment (its MSG) on a VC
/// whose segments are at most `seg_limit` bytes.
pub(super) fn msg_room(seg_limit: usize) -> usize {
    seg_limit.saturating_sub(wire::SEG_HDR_LEN + wire::MSG_BODY_LEN)
}

/// Payload bytes of each later segment of an eager message (MSG_CONT).
pub(super) fn cont_room(seg_limit: usize) -> usize {
    seg_limit - wire::SEG_HDR_LEN - wire::MSG_CONT_BODY_LEN
}

/// Keeps up to `rndv_pull_window` bytes requested ahead of what arrived.
fn pump_gets(ctrl: &mut VecDeque<SegFrame>, cfg: &EngineConfig, rid: RndvId, key: MsgId, acc: &mut Accepted) {
    let chunk = cfg.rndv_get_chunk.max(1);
    let window = cfg.rndv_pull_window.max(chunk);
    while acc.requested < acc.want && acc.requested - acc.received < window {
        let len = chunk.min(acc.want - acc.requested);
        ctrl.push_back(SegFrame::Get {
            key,
            rid,
            offset: acc.requested,
            len,
            last: acc.requested + len == acc.want,
        });
        acc.requested += len;
    }
}

impl Vc {
    /// The next segment of rendezvous data to send (a GET's or a push's),
    /// its source remembered in `scratch` for the segment's encoding.
    pub(super) fn next_rdata_frame(&mut self, scratch: &mut super::source::TxScratch) -> Option<SegFrame> {
        let job = self.rdata.front_mut()?;
        let room = data_room(self.seg_limit) as u64;
        let len = (job.end - job.next).min(room);
        let f = SegFrame::RData {
            key: job.key,
            rid: job.rid,
            offset: job.next,
            len: len as u32,
        };
        // One clone per burst, not per segment: the source stays
        // valid for the whole call (no FIN is handled during it).
        scratch.remember(job.key, &job.src);
        job.next += len;
        if let Some(TxMsg {
            body: TxBody::Rndv { unacked, .. },
            ..
        }) = self.tx.get_mut(&job.key)
        {
            *unacked += 1;
        }
        if job.next == job.end {
            self.rdata.pop_front();
        }
        Some(f)
    }

    /// Sending side: the receiver asks for `len` bytes at `offset`.
    pub(super) fn on_get(&mut self, sh: &mut Shared, key: MsgId, rid: RndvId, offset: u64, len: u64, last: bool) {
        match self.tx.get_mut(&key) {
            Some(TxMsg {
                body:
                    TxBody::Rndv {
                        len: total,
                        src,
                        last_get,
                        tail,
                        push,
                        ..
                    },
                ..
            }) if offset + len <= *total - *tail as u64 && !*last_get => {
                if *push > 0 && offset == 0 {
                    // The receiver pulls what we pushed: it dropped it.
                    self.push_backoff = super::msg::PUSH_BACKOFF;
                }
                *last_get = last;
                self.rdata.push_back(RDataJob {
                    key,
                    rid: Some(rid),
                    next: offset,
                    end: offset + len,
                    src: src.clone(),
                });
            }
            _ => sh.stats.dropped_malformed += 1,
        }
    }

    /// Sending side: the receiver wants no more data.
    pub(super) fn on_fin(&mut self, sh: &mut Shared, key: MsgId) {
        match self.tx.get(&key) {
            Some(TxMsg {
                body: TxBody::Rndv { .. },
                ..
            }) => {
                let quiet = self.tx.remove(&key).is_some_and(|m| m.quiet);
                // A receiver that discarded mid-pull leaves GETs we
                // need not answer any more.
                self.rdata.retain(|j| j.key != key);
                sh.send_done(key, quiet);
            }
            _ => sh.stats.dropped_malformed += 1,
        }
    }

    /// Rendezvous data (RDATA or PDATA), in order or not; true if it
    /// completed its receive.
    pub(super) fn on_data(&mut self, sh: &mut Shared, data: Data<'_>) -> bool {
        let rid = if data.pushed {
            match self.pushed_to(sh, data.id) {
                Some(rid) => rid,
                None => return false,
            }
        } else {
            data.id
        };
        self.place(sh, rid, data.offset, data.bytes, data.pushed)
    }

    /// Puts rendezvous data into its accepted receive; true if that
    /// completed it. Pushed data is taken only below the receive's
    /// `push_end` (a push longer than a short receive buffer is cut there).
    fn place(&mut self, sh: &mut Shared, rid: RndvId, offset: u64, bytes: DataBytes<'_>, pushed: bool) -> bool {
        let (payload, placed): (&[u8], Option<usize>) = match bytes {
            DataBytes::Copy(p) => (p, None),
            // Already in the sink: account for it, do not copy.
            DataBytes::InPlace { rid: r, len } if r == rid => (&[], Some(len)),
            // Received into another receive's sink (a guess for another
            // peer's message with the same id): nothing of it is here,
            // and it is dropped as empty below.
            DataBytes::InPlace { .. } => (&[], None),
        };
        let len = placed.unwrap_or(payload.len()) as u64;
        let Some(rx) = sh.rx.get_mut(&rid) else {
            sh.stats.dropped_rndv += 1;
            return false;
        };
        let Some(acc) = rx.accepted.as_mut().filter(|_| rx.peer == self.peer) else {
            sh.stats.dropped_rndv += 1;
            return false;
        };
        let end = if pushed {
            (offset + len).min(acc.push_end)
        } else {
            offset + len
        };
        if offset >= end || end > acc.requested || acc.received + (end - offset) > acc.want {
            sh.stats.dropped_rndv += 1;
            return false;
        }
        if placed.is_none() {
            acc.sink.write_at(offset as usize, &payload[..(end - offset) as usize]);
        }
        acc.received += end - offset;
        acc.high = acc.high.max(end);
        if acc.received == acc.want {
            let rx = sh.rx.remove(&rid).expect("receive just looked up");
            let acc = rx.accepted.expect("receive is accepted");
            self.rx_active -= 1;
            self.pushes.remove(&rx.key);
            if acc.push_end == acc.want {
                // Everything it wanted came pushed: no GET_LAST went out,
                // so nothing for the sender to complete on but this.
                self.ctrl.push_back(SegFrame::Fin { key: rx.key });
            }
            // Otherwise no FIN: the ACK of this segment, which answers the
            // GET_LAST, completes the sender.
            sh.events.push_back(Event::RecvDone {
                rid,
                sink: acc.sink,
                written: (acc.want + acc.from_tail) as usize,
            });
            true
        } else {
            let key = rx.key;
            pump_gets(&mut self.ctrl, &sh.cfg, rid, key, acc);
            false
        }
    }
}

impl Engine {
    /// Bytes an announced rendezvous message was charged to its sender's
    /// credits on arrival (its RTS's tail), for `release`; 0 once accepted
    /// or gone. A held eager message was charged its whole length (asked
    /// for when it is surfaced, as an RTS's charge is).
    pub fn rts_charge(&self, rid: RndvId) -> u64 {
        if let Some(e) = self.sh.rx_eager.get(&rid) {
            return e.total;
        }
        self.sh.rx.get(&rid).map_or(0, |rx| rx.tail.len() as u64)
    }

    pub fn accept(&mut self, rid: RndvId, sink: Box<dyn RecvSink>, _now: u64) {
        self.settle();
        let sh = &mut self.sh;
        if let Some(peer) = sh.rx_eager.get(&rid).map(|e| e.peer) {
            // Until its last segment the VC waits for its peer (keepalives:
            // a sender that dies fails the receive).
            if accept_held(sh, rid, sink) {
                if let Some(vc) = self.vcs.get_mut(&peer) {
                    vc.rx_active += 1;
                    self.timers.rearm(vc, &sh.cfg);
                }
            }
            return;
        }
        let Some(rx) = sh.rx.get_mut(&rid).filter(|rx| rx.accepted.is_none()) else {
            sh.events.push_back(Event::RecvFailed {
                rid,
                sink,
                err: EngineError::UnknownRndv,
            });
            return;
        };
        let Some(vc) = self.vcs.get_mut(&rx.peer) else {
            sh.rx.remove(&rid);
            sh.events.push_back(Event::RecvFailed {
                rid,
                sink,
                err: EngineError::PeerUnreachable,
            });
            return;
        };
        let want = rx.total.min(sink.capacity() as u64);
        if want == 0 {
            let key = rx.key;
            sh.rx.remove(&rid);
            vc.pushes.remove(&key);
            vc.ctrl.push_back(SegFrame::Fin { key });
            sh.events.push_back(Event::RecvDone { rid, sink, written: 0 });
        } else {
            let key = rx.key;
            // The tail is [head, total): what the receive wants of it is
            // written now, the rest pulled (head >= 1: wire/mod.rs).
            let head = rx.total - rx.tail.len() as u64;
            let from_tail = want.saturating_sub(head);
            let mut sink = sink;
            if from_tail > 0 {
                sink.write_at(head as usize, &rx.tail[..from_tail as usize]);
            }
            rx.tail = Vec::new();
            // Pushed bytes count as asked for (none if some were dropped).
            let push_end = rx.push.min(want - from_tail);
            let acc = rx.accepted.insert(Accepted {
                sink,
                want: want - from_tail,
                from_tail,
                push_end,
                requested: push_end,
                received: 0,
                high: 0,
                seg_room: data_room(vc.seg_limit),
            });
            vc.rx_active += 1;
            sh.pull_order.push_back(rid);
            pump_gets(&mut vc.ctrl, &sh.cfg, rid, key, acc);
        }
        mark_ready(&mut self.ready, vc);
        self.timers.rearm(vc, &sh.cfg);
    }

    /// Completes the sender (FIN) without moving any more data. Discarding
    /// an already accepted receive (cancel) returns its sink through
    /// `RecvDone` with the bytes written so far; data still in flight for
    /// it is dropped on arrival.
    pub fn discard(&mut self, rid: RndvId, _now: u64) {
        self.settle();
        let sh = &mut self.sh;
        // A held eager message: nothing to tell its sender, whose segments
        // are acknowledged as they come.
        if let Some(e) = sh.rx_eager.remove(&rid) {
            if let Some((sink, want)) = e.sink {
                if let Some(vc) = self.vcs.get_mut(&e.peer) {
                    vc.rx_active -= 1;
                    self.timers.rearm(vc, &sh.cfg);
                }
                sh.events.push_back(Event::RecvDone {
                    rid,
                    sink,
                    written: e.received.min(want) as usize,
                });
            }
            return;
        }
        let Some(rx) = sh.rx.remove(&rid) else { return };
        let Some(vc) = self.vcs.get_mut(&rx.peer) else {
            return;
        };
        vc.pushes.remove(&rx.key);
        vc.ctrl.push_back(SegFrame::Fin { key: rx.key });
        if let Some(acc) = rx.accepted {
            vc.rx_active -= 1;
            sh.events.push_back(Event::RecvDone {
                rid,
                sink: acc.sink,
                written: (acc.received + acc.from_tail) as usize,
            });
        }
        mark_ready(&mut self.ready, vc);
        self.timers.rearm(vc, &sh.cfg);
    }

    /// The accepted receives of `peer`, whose VC failed with `err`: their
    /// sinks go back (`RecvFailed`), in rid order; announced ones vanish.
    pub(super) fn fail_receives(&mut self, peer: SocketAddr, err: EngineError) {
        let sh = &mut self.sh;
        let mut rids: Vec<RndvId> = sh.rx.iter().filter(|(_, r)| r.peer == peer).map(|(&k, _)| k).collect();
        rids.extend(sh.rx_eager.iter().filter(|(_, e)| e.peer == peer).map(|(&k, _)| k));
        rids.sort_unstable();
        for rid in rids {
            let sink = match sh.rx.remove(&rid) {
                Some(rx) => rx.accepted.map(|acc| acc.sink),
                None => sh.rx_eager.remove(&rid).and_then(|e| e.sink.map(|(sink, _)| sink)),
            };
            if let Some(sink) = sink {
                sh.events.push_back(Event::RecvFailed { rid, sink, err });
            }
        }
    }

    /// A guess at where the payload of the next datagram belongs: the next
    /// unreceived bytes of the oldest rendezvous receive still pulling,
    /// which is what a sender serving our GETs in order sends next. The
    /// wire receives the datagram with its header in a buffer of its own and
    /// its payload straight into the returned slice of the receive buffer,
    /// then calls `handle_datagram_placed`. A wrong guess only ever
    /// scribbles on bytes nobody has received yet (at or above the
    /// receive's high mark), which the right data overwrites later.
    pub fn rdata_placement(&mut self) -> Option<(Placement, &mut [u8])> {
        let sh = &mut self.sh;
        while let Some(&rid) = sh.pull_order.front() {
            if sh.rx.get(&rid).is_some_and(|r| r.accepted.is_some()) {
                break;
            }
            sh.pull_order.pop_front();
        }
        let rid = *sh.pull_order.front()?;
        let rx = sh.rx.get_mut(&rid)?;
        let key = rx.key;
        let acc = rx.accepted.as_mut()?;
        // Pushed data comes first, then what the GETs asked for.
        let pushed = acc.high < acc.push_end;
        let limit = if pushed { acc.push_end } else { acc.requested };
        if acc.high >= limit || acc.seg_room < PLACEMENT_MIN_SEG {
            return None;
        }
        let want = ((limit - acc.high) as usize).min(acc.seg_room);
        let offset = acc.high;
        let region = acc.sink.region(offset as usize, want)?;
        if region.is_empty() {
            return None;
        }
        let p = Placement {
            rid,
            pushed,
            key,
            offset,
            len: region.len(),
        };
        Some((p, region))
    }

    /// The datagram received after `rdata_placement` was not the guessed
    /// segment (counted; the caller hands it to `handle_datagram`).
    pub fn placement_missed(&mut self) {
        self.sh.stats.placement_misses += 1;
    }

    /// A datagram received after `rdata_placement` returned `p`: `head` is
    /// its first `RDATA_HEAD_LEN` bytes, and the `len` bytes after them went
    /// into the region of `p`. Processes it and returns true when it is the
    /// RDATA segment that was guessed (and fitted); false otherwise, in
    /// which case nothing happened and the caller reassembles the datagram
    /// for `handle_datagram`.
    pub fn handle_datagram_placed(
        &mut self,
        from: SocketAddr,
        head: &[u8],
        p: &Placement,
        len: usize,
        now: u64,
    ) -> bool {
        let Some(h) = p.matches(head, len) else {
            return false;
        };
        self.settle();
        // (`on_seg_packet` rearms the VC it changes.)
        self.sh.stats.datagrams_in += 1;
        self.sh.stats.bytes_in += (head.len() + len) as u64;
        self.sh.stats.rdata_placed += 1;
        let seg = SegIn::Placed {
            rid: p.rid,
            pushed: h.pushed,
            id: h.id,
            offset: h.offset,
            len,
        };
        self.on_seg_packet(from, (h.conn, h.ack, h.sack, h.seq), seg, now);
        true
    }

    /// Whether a rendezvous receive is pulling data (`rdata_placement` may
    /// have a guess): lets a polling caller skip it cheaply.
    pub fn pulling(&self) -> bool {
        !self.sh.pull_order.is_empty()
    }
}

/// `Engine::accept` of a held eager message (msg.rs, `RxEager`): what
/// arrived so far goes into the receive's buffer, the rest will as it
/// comes; a receive that takes the whole message is done at once.
/// Returns whether the receive now waits for more segments.
fn accept_held(sh: &mut Shared, rid: RndvId, mut sink: Box<dyn RecvSink>) -> bool {
    let e = sh.rx_eager.get_mut(&rid).expect("the caller looked it up");
    if e.sink.is_some() {
        sh.events.push_back(Event::RecvFailed {
            rid,
            sink,
            err: EngineError::UnknownRndv,
        });
        return false;
    }
    let want = e.total.min(sink.capacity() as u64);
    let have = (e.buf.len() as u64).min(want) as usize;
    if have > 0 {
        sink.write_at(0, &e.buf[..have]);
    }
    e.buf = Vec::new();
    if e.received == e.total {
        sh.rx_eager.remove(&rid);
        sh.events.push_back(Event::RecvDone {
            rid,
            sink,
            written: want as usize,
        });
        false
    } else {
        sh.stats.eager_placed += 1;
        e.sink = Some((sink, want));
        true
    }
}
