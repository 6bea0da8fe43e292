//! One virtual connection: its parts (handshake, the reliability windows,
//! the message and rendezvous queues, credits), its timers, the priority
//! order in which it transmits, and how an arriving segment reaches the
//! message layer.
//!
//! Sender queues per VC, in transmit priority order: retransmissions, then
//! control frames (GET/FIN/keepalive), then messages in send order, then
//! rendezvous data. Messages go before bulk data so a small send is not
//! stuck behind a large pull.

use super::msg::{segs_delivered, Reasm, SegFrame, TxMsg};
use super::rndv::{Data, DataBytes, RDataJob};
use super::source::{PayloadMode, TxScratch};
use super::{Map, Shared};
use crate::proto::conn::{AskTick, Handshake, Unproven};
use crate::proto::credit::{Borrower, CreditBank, Lender};
use crate::proto::rel::{Ooo, RecvWindow, RtoTick, SendWindow, Slot, SEQ_BASE};
use crate::proto::wire::{Frame, Packet};
use crate::proto::{EngineConfig, MsgId, RndvId};
use std::cell::Cell;
use std::collections::VecDeque;
use std::net::SocketAddr;

/// Serial arithmetic on 32-bit sequence numbers needs windows well below 2^31.
const MAX_WINDOW: u32 = 1 << 30;

pub(super) struct Vc {
    pub(super) peer: SocketAddr,

    // Handshake (conn.rs, handshake.rs).
    pub(super) local_nonce: u64,
    /// Known once the handshake completed (from the peer's REQ or RESP).
    pub(super) peer_nonce: Option<u64>,
    pub(super) hs: Handshake,
    pub(super) resp_pending: bool,
    pub(super) snd_isn: u32,
    /// `Event::PeerUp` was emitted for this incarnation of the VC.
    pub(super) up_announced: bool,
    /// Created by the peer's CONN_REQ alone, which anyone can forge; None
    /// once the peer has echoed our id or a cookie (conn.rs), and for VCs
    /// we opened.
    pub(super) unproven: Option<Unproven>,

    /// Fixed at creation, so segments already built always fit a retransmission.
    pub(super) seg_limit: usize,
    /// Reliability (rel/).
    pub(super) snd: SendWindow<SegFrame>,
    pub(super) rcv: RecvWindow,

    // Transmit queues (msg.rs, rndv.rs).
    pub(super) ctrl: VecDeque<SegFrame>,
    pub(super) msgs: VecDeque<MsgId>,
    pub(super) rdata: VecDeque<RDataJob>,
    pub(super) tx: Map<MsgId, TxMsg>,
    pub(super) keepalive_queued: bool,
    /// Sending side: rendezvous sends left to go without a push, after the
    /// peer dropped pushed data.
    pub(super) push_backoff: u32,

    // Receiving side of the message layer (msg.rs, rndv.rs).
    pub(super) reasm: Option<Reasm>,
    /// Accepted rendezvous receives still pulling from this peer.
    pub(super) rx_active: u32,
    /// Answers the caller awaits from this peer to messages it sent (a
    /// one-sided request's response: `Engine::answer_due`).
    pub(super) answers_due: u32,
    /// The announced rendezvous receives whose sender pushes data, by its
    /// key (PDATA names the key, not our rid).
    pub(super) pushes: Map<MsgId, RndvId>,
    /// Key of the last RTS delivered (keys grow in send order).
    pub(super) last_rts_key: Option<MsgId>,
    /// Keys of PDATA dropped because it overtook its RTS (loss or
    /// reorder): an RTS with a key in this range has lost pushed bytes,
    /// so its receive pulls everything.
    pub(super) push_gap: Option<(MsgId, MsgId)>,

    // Credits (credit.rs): what we lent the peer (receiving side) and
    // borrowed from it (sending side); a CREDIT datagram is due; when a
    // stalled request is repeated (CREDIT datagrams are not retransmitted).
    pub(super) lender: Lender,
    pub(super) borrower: Borrower,
    pub(super) credit_due: bool,
    pub(super) credit_retry_at: u64,
    /// News for the peer that is not urgent (`Lender::has_news`): sent
    /// behind the next segments that go to it, or at this time if none
    /// do before.
    pub(super) credit_news: Option<u64>,

    pub(super) last_heard: u64,
    /// Queued in the engine's ready queue (sched.rs).
    pub(super) in_ready: bool,
    /// The deadline the engine's timer heap holds for this VC (timers.rs).
    pub(super) armed: Cell<Option<u64>>,
}

/// What a VC's timers say (`Vc::on_timeout`).
pub(super) enum Tick {
    Idle,
    Ready,
    Fail,
    /// An unproven VC nobody proved in time: dropped without a word.
    Expire,
}

/// A segment's content as the VC receives it.
pub(super) enum SegIn<'a> {
    /// A decoded frame, with its kind and raw body (what is parked if it
    /// arrives out of order).
    Frame { frame: Frame<'a>, kind: u8, body: &'a [u8] },
    /// Rendezvous data whose payload the wire already received into the
    /// sink of receive `rid` (`Engine::handle_datagram_placed`).
    Placed {
        rid: RndvId,
        pushed: bool,
        id: u64,
        offset: u64,
        len: usize,
    },
}

impl<'a> SegIn<'a> {
    /// A segment datagram `bytes` whose frame decoded as `frame`.
    pub(super) fn of_datagram(bytes: &'a [u8], frame: Frame<'a>) -> SegIn<'a> {
        SegIn::Frame {
            frame,
            kind: bytes[crate::proto::wire::field::KIND],
            body: &bytes[crate::proto::wire::SEG_HDR_LEN..],
        }
    }
}

impl Vc {
    pub(super) fn new(sh: &mut Shared, peer: SocketAddr, now: u64) -> Vc {
        let local_nonce = loop {
            let n = sh.entropy.next_u64();
            if n != 0 {
                break n;
            }
        };
        let isn = sh.entropy.next_u64() as u32;
        let snd_isn = sh.forced_isn.unwrap_or(isn);
        let first_seq = SEQ_BASE + snd_isn as u64;
        Vc {
            peer,
            local_nonce,
            peer_nonce: None,
            hs: Handshake::connecting(now),
            resp_pending: false,
            snd_isn,
            up_announced: false,
            unproven: None,
            seg_limit: if sh.cfg.local_ips.contains(&peer.ip()) {
                sh.cfg.local_max_datagram.max(sh.cfg.max_datagram)
            } else {
                sh.cfg.max_datagram
            },
            snd: SendWindow::new(&sh.cfg, first_seq, now),
            rcv: RecvWindow::new(sh.cfg.window_segments.clamp(1, MAX_WINDOW)),
            ctrl: VecDeque::new(),
            msgs: VecDeque::new(),
            rdata: VecDeque::new(),
            tx: Map::with_hasher(sh.hasher),
            keepalive_queued: false,
            push_backoff: 0,
            reasm: None,
            rx_active: 0,
            answers_due: 0,
            pushes: Map::with_hasher(sh.hasher),
            last_rts_key: None,
            push_gap: None,
            lender: sh.bank.as_mut().map(CreditBank::open).unwrap_or_default(),
            borrower: Borrower::new(sh.cfg.credits.map_or(0, |c| c.min_loan)),
            // The first CREDIT tells the peer what it may send us.
            credit_due: sh.bank.is_some(),
            credit_retry_at: 0,
            credit_news: None,
            last_heard: now,
            in_ready: false,
            armed: Cell::new(None),
        }
    }

    pub(super) fn establish(&mut self, cfg: &EngineConfig, nonce: u64, isn: u32, window: u32, now: u64) {
        self.up_announced = false;
        self.peer_nonce = Some(nonce);
        self.rcv.nxt = SEQ_BASE + isn as u64;
        self.snd.window = cfg.window_segments.min(window).clamp(1, MAX_WINDOW);
        self.hs = Handshake::Established;
        self.last_heard = now;
    }

    pub(super) fn established(&self) -> bool {
        self.hs == Handshake::Established
    }

    #[cfg(test)]
    pub(super) fn has_pending_work(&self) -> bool {
        !self.established()
            || self.resp_pending
            || self.credit_due
            || self.credit_news.is_some()
            || !self.snd.unacked.is_empty()
            || !self.ctrl.is_empty()
            || !self.msgs.is_empty()
            || !self.rdata.is_empty()
            || !self.tx.is_empty()
            || self.rcv.ack_pending
            || self.rx_active > 0
    }

    /// Whether `transmit` could produce a datagram now (conservative:
    /// true may still find the window closed). Whatever makes this true
    /// later (an ACK, a timer, a new send) marks the VC ready again.
    pub(super) fn may_transmit(&self, now: u64) -> bool {
        match self.hs {
            Handshake::Connecting { ask, answer } => ask.req_due || answer.is_some(),
            Handshake::Established => {
                self.unproven.is_some_and(|u| u.ask.is_some_and(|a| a.req_due))
                    || self.resp_pending
                    || self.credit_due
                    || self.rcv.ack_due(now)
                    || !self.snd.rtx.is_empty()
                    || !self.ctrl.is_empty()
                    || !self.msgs.is_empty()
                    || !self.rdata.is_empty()
            }
        }
    }

    /// Whether something of ours waits on the peer, so that its silence
    /// is watched (keepalives, then the peer timeout) though nothing of
    /// ours is unacknowledged; and a refusal of it is a failure
    /// (`Engine::on_refused`).
    pub(super) fn awaiting_peer(&self) -> bool {
        !self.tx.is_empty() || self.rx_active > 0 || self.answers_due > 0
    }

    fn keepalive_interval(cfg: &EngineConfig) -> u64 {
        (cfg.peer_timeout_ns / 4).min(cfg.keepalive_ns).max(1)
    }

    /// When sent data that nobody acknowledges means the peer failed.
    fn silence_deadline(&self, cfg: &EngineConfig) -> u64 {
        self.last_heard
            .max(self.snd.waiting_since)
            .saturating_add(cfg.peer_timeout_ns)
    }

    pub(super) fn next_deadline(&self, cfg: &EngineConfig) -> Option<u64> {
        if let Handshake::Connecting { ask, .. } = self.hs {
            return Some(ask.deadline(cfg));
        }
        let mut t: Option<u64> = None;
        let mut take = |d: u64| t = Some(t.map_or(d, |x| x.min(d)));
        match self.unproven {
            Some(Unproven { ask: Some(ask), .. }) => take(ask.deadline(cfg)),
            Some(Unproven { since, ask: None }) => take(since.saturating_add(cfg.peer_timeout_ns)),
            None => {}
        }
        if let Some(d) = self.rcv.ack_timer() {
            take(d);
        }
        if let Some(d) = self.snd.rto_deadline {
            take(d);
        }
        if !self.snd.unacked.is_empty() {
            take(self.silence_deadline(cfg));
        } else if self.awaiting_peer() && !self.keepalive_queued {
            take(self.last_heard.saturating_add(Self::keepalive_interval(cfg)));
        }
        if self.borrower.stalled() && !self.credit_due {
            take(self.credit_retry_at);
        }
        if let Some(at) = self.credit_news {
            take(at);
        }
        t
    }

    pub(super) fn on_timeout(&mut self, sh: &mut Shared, now: u64) -> Tick {
        let cfg = &sh.cfg;
        if let Handshake::Connecting { ask, .. } = &mut self.hs {
            return match ask.tick(cfg, now) {
                AskTick::Wait => Tick::Idle,
                AskTick::Due => Tick::Ready,
                AskTick::GiveUp => Tick::Fail,
            };
        }
        let mut tick = Tick::Idle;
        if let Some(u) = &mut self.unproven {
            match &mut u.ask {
                // A real requester would have given up by now.
                None if now >= u.since.saturating_add(cfg.peer_timeout_ns) => return Tick::Expire,
                None => {}
                Some(ask) => match ask.tick(cfg, now) {
                    AskTick::Wait => {}
                    AskTick::Due => tick = Tick::Ready,
                    AskTick::GiveUp => return Tick::Fail,
                },
            }
        }
        if self.rcv.ack_pending && self.rcv.ack_deadline.is_some_and(|d| d <= now) {
            self.rcv.ack_now = true;
            tick = Tick::Ready;
        }
        if self.credit_news.is_some_and(|at| at <= now) {
            // Nothing went to the peer meanwhile: the news goes alone.
            self.credit_news = None;
            self.credit_due = true;
            tick = Tick::Ready;
        }
        if !self.snd.unacked.is_empty() && now >= self.silence_deadline(cfg) {
            return Tick::Fail;
        }
        match self.snd.on_rto(cfg, &mut sh.stats, now) {
            RtoTick::Idle => {}
            RtoTick::Resend => tick = Tick::Ready,
            RtoTick::GiveUp => return Tick::Fail,
        }
        if self.snd.unacked.is_empty()
            && self.awaiting_peer()
            && !self.keepalive_queued
            && now >= self.last_heard.saturating_add(Self::keepalive_interval(&sh.cfg))
        {
            // A reliable no-op: a live peer acknowledges it; a dead one
            // leaves it unacknowledged and the peer timeout fires.
            self.keepalive_queued = true;
            self.ctrl.push_back(SegFrame::Nop);
            tick = Tick::Ready;
        }
        tick
    }

    /// The next datagram this VC sends, in priority order: handshake,
    /// credits, retransmissions, new segments, a standalone ACK. `mode`
    /// says whether a payload is copied behind its header or left in its
    /// source for the wire to gather (`scratch` says where).
    pub(super) fn transmit(
        &mut self,
        sh: &mut Shared,
        scratch: &mut TxScratch,
        mode: PayloadMode,
        now: u64,
        buf: &mut [u8],
    ) -> Option<usize> {
        if let Handshake::Connecting { ask, answer } = &mut self.hs {
            if let Some(cookie) = ask.send(&sh.cfg, now) {
                return Some(self.conn_req(sh, cookie, buf));
            }
            // The peer's CONN_REQ crossed ours: answer it with what ours
            // carried; its answer to ours establishes the VC.
            let echo = answer.take()?;
            sh.stats.conn_resps_sent += 1;
            let resp = Packet::ConnResp {
                nonce: self.local_nonce,
                echo,
                isn: self.snd_isn,
                window: self.rcv.window,
            };
            return Some(resp.emit(buf));
        }
        let peer_nonce = self.peer_nonce?;
        if self.resp_pending {
            self.resp_pending = false;
            sh.stats.conn_resps_sent += 1;
            let resp = Packet::ConnResp {
                nonce: self.local_nonce,
                echo: peer_nonce,
                isn: self.snd_isn,
                window: self.rcv.window,
            };
            return Some(resp.emit(buf));
        }
        if let Some(Unproven { ask: Some(ask), .. }) = &mut self.unproven {
            // We send on a VC whose peer id only a CONN_REQ vouched for:
            // our own CONN_REQ alongside the data, and the real peer's
            // answer proves or re-keys the VC (conn.rs).
            if let Some(cookie) = ask.send(&sh.cfg, now) {
                return Some(self.conn_req(sh, cookie, buf));
            }
        }
        if self.credit_due && sh.bank.is_some() {
            return Some(self.credit_datagram(sh, peer_nonce, buf));
        }
        if buf.len() < self.seg_limit {
            return None;
        }
        if let Some((seq, frame)) = self.snd.next_retransmit(&sh.cfg, &mut sh.stats, now) {
            self.rcv.ack_left(&sh.cfg, now, true);
            return Some(self.write_seg(scratch, mode, peer_nonce, seq, &frame, buf));
        }
        if self.snd.has_room(&sh.cfg) {
            if let Some(frame) = self.next_frame(sh, scratch) {
                let seq = self.snd.nxt;
                self.rcv.ack_left(&sh.cfg, now, true);
                let n = self.write_seg(scratch, mode, peer_nonce, seq, &frame, buf);
                self.snd.sent(&sh.cfg, frame, n, now);
                sh.stats.segments_sent += 1;
                return Some(n);
            }
        }
        // A message that just stalled for credits asks for them now; news
        // that could wait goes once this turn has no segments left (behind
        // them, or with a standalone ACK, which comes next).
        if (self.credit_due || self.credit_news.is_some()) && sh.bank.is_some() {
            return Some(self.credit_datagram(sh, peer_nonce, buf));
        }
        if self.rcv.ack_due(now) {
            let (ack, sack) = self.rcv.ack_fields();
            self.rcv.clear_ack();
            self.rcv.ack_left(&sh.cfg, now, false);
            sh.stats.acks_sent += 1;
            return Some(
                Packet::Ack {
                    conn: peer_nonce,
                    ack,
                    sack,
                }
                .emit(buf),
            );
        }
        None
    }

    /// `transmit`, counted in the engine's statistics.
    pub(super) fn transmit_counted(
        &mut self,
        sh: &mut Shared,
        scratch: &mut TxScratch,
        mode: PayloadMode,
        now: u64,
        buf: &mut [u8],
    ) -> Option<usize> {
        let n = self.transmit(sh, scratch, mode, now, buf)?;
        sh.stats.datagrams_out += 1;
        sh.stats.bytes_out += n as u64;
        Some(n)
    }

    /// A CREDIT datagram: what we lend the peer, what we give back, and
    /// whether we are stalled or want credits back.
    fn credit_datagram(&mut self, sh: &mut Shared, peer_nonce: u64, buf: &mut [u8]) -> usize {
        self.credit_due = false;
        self.credit_news = None;
        let Some(bank) = &sh.bank else { return 0 };
        let (granted, give) = bank.header(&self.lender);
        let (returned, want) = self.borrower.header();
        self.lender.announced(granted);
        sh.stats.credits_sent += 1;
        Packet::Credit {
            conn: peer_nonce,
            granted,
            returned,
            byte: give | want,
        }
        .emit(buf)
    }

    /// Next new frame, or None when every queue is empty: control frames,
    /// then messages, then rendezvous data.
    fn next_frame(&mut self, sh: &mut Shared, scratch: &mut TxScratch) -> Option<SegFrame> {
        if let Some(f) = self.ctrl.pop_front() {
            if let SegFrame::Nop = f {
                self.keepalive_queued = false;
                sh.stats.keepalives_sent += 1;
            }
            return Some(f);
        }
        if let Some(f) = self.next_msg_frame(sh) {
            return Some(f);
        }
        self.next_rdata_frame(scratch)
    }

    /// Whether the ACK fields `ack`, `sack` only free what a quiet message
    /// held (engine/later.rs): they acknowledge one segment, of a message
    /// whose send is complete already, so no send the application may be
    /// waiting for completes by them.
    pub(super) fn ack_frees_only(&self, ack: u32, sack: u64) -> bool {
        sack == 0
            && matches!(self.snd.acks_one(ack), Some(SegFrame::Msg { id, .. })
                if self.tx.get(id).is_some_and(|m| m.quiet))
    }

    /// The ACK fields of a datagram from the peer: the segments they
    /// newly acknowledge complete their messages.
    pub(super) fn on_ack(&mut self, sh: &mut Shared, ack: u32, sack: u64, now: u64) {
        let Vc { snd, tx, rdata, .. } = self;
        let Shared {
            cfg,
            stats,
            events,
            quiet_in_flight,
            ..
        } = sh;
        // The segments of one message in a row (bulk data: all of them)
        // complete it with one lookup.
        let mut run: Option<(MsgId, u32)> = None;
        snd.on_ack(cfg, stats, ack, sack, now, |f| {
            let Some(id) = f.data_of() else { return };
            match &mut run {
                Some((last, n)) if *last == id => *n += 1,
                _ => {
                    if let Some((last, n)) = run.replace((id, 1)) {
                        segs_delivered(tx, rdata, events, quiet_in_flight, last, n);
                    }
                }
            }
        });
        if let Some((id, n)) = run {
            segs_delivered(tx, rdata, events, quiet_in_flight, id, n);
        }
    }

    /// A segment with a valid connection id arrived: its place in the
    /// receive window decides whether it is delivered now, parked, or
    /// dropped; rendezvous data is placed on arrival even out of order.
    pub(super) fn on_seg(&mut self, sh: &mut Shared, seq: u32, seg: SegIn<'_>, now: u64) {
        let slot = self.rcv.classify(&mut sh.stats, seq);
        let (data, body_len) = match &seg {
            SegIn::Frame { frame, body, .. } => (Data::of_frame(frame), body.len()),
            SegIn::Placed {
                rid,
                pushed,
                id,
                offset,
                len,
            } => (
                Some(Data {
                    pushed: *pushed,
                    id: *id,
                    offset: *offset,
                    bytes: DataBytes::InPlace { rid: *rid, len: *len },
                }),
                0,
            ),
        };
        match slot {
            Slot::Done => {}
            Slot::Ahead { seq, ahead, dup } => {
                let mut completed = false;
                if !dup {
                    if let Some(data) = data {
                        // Completing here needs no ACK of its own: the SACK
                        // for this segment is sent at once just below (or
                        // with the delay if it is far ahead, unless nothing
                        // may call us again).
                        completed = self.on_data(sh, data);
                        self.rcv.consumed(&mut sh.stats, seq);
                    } else if let SegIn::Frame { kind, body, .. } = seg {
                        if !self.rcv.park(&sh.cfg, &mut sh.stats, seq, kind, body) {
                            return;
                        }
                    }
                }
                self.rcv.ahead_arrived(&sh.cfg, ahead, completed, now);
            }
            Slot::Next => {
                // A rendezvous receive completed, or an eager message its
                // sender waits for (the rendezvous sender always does).
                let (completed, mut awaited) = match (data, seg) {
                    (Some(data), _) => {
                        let c = self.on_data(sh, data);
                        (c, c)
                    }
                    (None, SegIn::Frame { frame, .. }) => (false, self.deliver(sh, frame)),
                    (None, SegIn::Placed { .. }) => unreachable!("placed segments are data"),
                };
                let filled_hole = self.rcv.advance(body_len);
                while let Some(entry) = self.rcv.pop_parked() {
                    if let Ooo::Stored { kind, body } = entry {
                        match Frame::parse(kind, &body) {
                            Ok(f) => awaited |= self.deliver(sh, f),
                            Err(_) => sh.stats.dropped_malformed += 1,
                        }
                    }
                }
                let we_wait = !self.snd.unacked.is_empty();
                self.rcv
                    .in_order_arrived(&sh.cfg, filled_hole, completed, awaited, we_wait, now);
            }
        }
    }

    /// In-order delivery of one frame to the message layer. True: it
    /// completed an eager message whose sender waits for the ACK, or a
    /// rendezvous receive.
    fn deliver(&mut self, sh: &mut Shared, frame: Frame<'_>) -> bool {
        match frame {
            Frame::Msg {
                tag,
                data,
                flags,
                awaited,
                total,
                payload,
            } => return self.on_msg(sh, tag, data, flags, awaited, total, payload),
            Frame::MsgCont { offset, payload } => return self.on_msg_cont(sh, offset, payload),
            Frame::Rts {
                tag,
                data,
                flags,
                total,
                key,
                push,
                tail,
            } => self.on_rts(sh, tag, data, flags, total, key, push, tail),
            Frame::Get {
                key,
                rid,
                offset,
                len,
                last,
            } => self.on_get(sh, key, rid, offset, len, last),
            Frame::RData { .. } | Frame::PData { .. } => {
                if let Some(data) = Data::of_frame(&frame) {
                    return self.on_data(sh, data);
                }
            }
            Frame::Fin { key } => self.on_fin(sh, key),
            Frame::Nop => {}
        }
        false
    }
}
