//! The sending half of a VC's reliability: the window of sequence numbers
//! sent and not yet acknowledged, cumulative and selective ACKs, SACK-based
//! fast retransmit and the retransmission timer.
//!
//! The window knows nothing of what a sequence number carries: it holds
//! a frame of type `F` per segment (the engine's `SegFrame`, which refers
//! to the data instead of holding it) and hands it back when the segment
//! is delivered or must go again.

use super::{seq_delta, Rtt};
use crate::proto::{EngineConfig, EngineStats};
use std::collections::VecDeque;

/// Sacked segments sent after a hole that make it count as lost.
const DUP_THRESH: usize = 3;
/// Segments one RTO expiry resends. A timeout says little about which
/// segments are lost (a long queue looks the same as a dead link), so resend
/// the oldest few, enough to repair a lost tail, and let the SACKs that
/// come back point at the other holes. Resending the whole window instead
/// floods exactly the queue that made the timer fire.
const RTO_BURST: usize = 8;
/// ... and at most about this many bytes (but at least one segment): with
/// loopback-sized 64 KiB segments eight would be half a megabyte resent
/// every time a descheduled peer lets the timer fire for nothing.
const RTO_BURST_BYTES: usize = 128 << 10;

/// One sequence number in flight.
pub struct SentSeg<F> {
    pub frame: F,
    pub bytes: u32,
    sent_at: u64,
    /// Transmission order; a hole counts as lost once DUP_THRESH segments
    /// transmitted after it are known to have arrived.
    txn: u64,
    xmits: u32,
    pub sacked: bool,
    /// Queued for retransmission.
    lost: bool,
}

/// What the retransmission timer says (`SendWindow::on_rto`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RtoTick {
    Idle,
    /// Segments were queued for retransmission.
    Resend,
    /// A segment went more than `max_retrans` times: the peer failed.
    GiveUp,
}

pub struct SendWindow<F> {
    /// Segments in flight at once (capped by the peer's receive window).
    pub window: u32,
    /// Oldest unacknowledged sequence number, and the next one to use.
    pub una: u64,
    pub nxt: u64,
    /// `una..nxt`, oldest first.
    pub unacked: VecDeque<SentSeg<F>>,
    /// Bytes of unacked segments that are not sacked either.
    pub bytes_in_flight: usize,
    /// Sequence numbers queued for retransmission (stale entries are skipped).
    pub rtx: VecDeque<u64>,
    pub rtt: Rtt,
    pub rto_deadline: Option<u64>,
    /// Transmission counter (`SentSeg::txn`).
    txn: u64,
    /// When `unacked` last became non-empty, or last moved.
    pub waiting_since: u64,
}

impl<F: Copy> SendWindow<F> {
    pub fn new(cfg: &EngineConfig, first_seq: u64, now: u64) -> SendWindow<F> {
        SendWindow {
            window: 1,
            una: first_seq,
            nxt: first_seq,
            unacked: VecDeque::new(),
            bytes_in_flight: 0,
            rtx: VecDeque::new(),
            rtt: Rtt::new(cfg),
            rto_deadline: None,
            txn: 0,
            waiting_since: now,
        }
    }

    fn arm_rto(&mut self, cfg: &EngineConfig, now: u64) {
        if self.rto_deadline.is_none() {
            self.rto_deadline = Some(now + self.rtt.rto(cfg));
        }
    }

    /// The next segment queued for retransmission, marked as sent again:
    /// its sequence number and frame.
    pub fn next_retransmit(&mut self, cfg: &EngineConfig, stats: &mut EngineStats, now: u64) -> Option<(u64, F)> {
        while let Some(seq) = self.rtx.pop_front() {
            if seq < self.una {
                continue;
            }
            let idx = (seq - self.una) as usize;
            let Some(s) = self.unacked.get_mut(idx) else {
                continue;
            };
            if s.sacked || !s.lost {
                continue;
            }
            s.lost = false;
            s.xmits += 1;
            s.sent_at = now;
            self.txn += 1;
            s.txn = self.txn;
            let frame = s.frame;
            stats.retransmits += 1;
            self.arm_rto(cfg, now);
            return Some((seq, frame));
        }
        None
    }

    /// Whether a new segment may go: the window has room and the bytes in
    /// flight are under their cap.
    pub fn has_room(&self, cfg: &EngineConfig) -> bool {
        self.unacked.len() < self.window as usize && self.bytes_in_flight < cfg.window_bytes
    }

    /// A new segment of `bytes` bytes carrying `frame` was just sent with
    /// sequence number `nxt`.
    pub fn sent(&mut self, cfg: &EngineConfig, frame: F, bytes: usize, now: u64) {
        self.nxt += 1;
        if self.unacked.is_empty() {
            self.waiting_since = now;
        }
        self.txn += 1;
        self.unacked.push_back(SentSeg {
            frame,
            bytes: bytes as u32,
            sent_at: now,
            txn: self.txn,
            xmits: 1,
            sacked: false,
            lost: false,
        });
        self.bytes_in_flight += bytes;
        self.arm_rto(cfg, now);
    }

    /// The frame of the one segment a cumulative `ack` newly
    /// acknowledges, if it acknowledges exactly one (a ping-pong's).
    pub fn acks_one(&self, ack: u32) -> Option<&F> {
        if seq_delta(ack, self.una) != 1 {
            return None;
        }
        self.unacked.front().filter(|s| !s.sacked).map(|s| &s.frame)
    }

    /// Applies the cumulative ACK and SACK bitmap a datagram carries;
    /// `delivered` gets the frame of every segment newly known to have
    /// arrived, in the order they are found.
    ///
    /// RTT: only the most recently transmitted of the newly delivered
    /// segments gives a sample, and only if it was sent once. That is the
    /// segment whose arrival made the peer send this ACK; the others may
    /// have waited at the receiver behind a hole, which says nothing about
    /// the path.
    pub fn on_ack(
        &mut self,
        cfg: &EngineConfig,
        stats: &mut EngineStats,
        ack: u32,
        sack: u64,
        now: u64,
        mut delivered: impl FnMut(F),
    ) {
        let d = seq_delta(ack, self.una);
        if d < 0 || d as u64 > self.nxt - self.una {
            // An older ACK overtaken by a newer one, or nonsense.
            return;
        }
        let mut newest: Option<(u64, u32, u64)> = None; // (txn, xmits, sent_at)
        let mut note = |s: &SentSeg<F>| {
            if newest.is_none_or(|n| s.txn > n.0) {
                newest = Some((s.txn, s.xmits, s.sent_at));
            }
        };
        if d > 0 {
            for _ in 0..d {
                let s = self.unacked.pop_front().expect("acked segment is in flight");
                if !s.sacked {
                    self.bytes_in_flight -= s.bytes as usize;
                    note(&s);
                    delivered(s.frame);
                }
            }
            self.una += d as u64;
            self.rtt.reset_backoff();
            self.waiting_since = now;
        }
        if sack != 0 {
            let mut bits = sack;
            while bits != 0 {
                let idx = bits.trailing_zeros() as usize + 1;
                bits &= bits - 1;
                let Some(s) = self.unacked.get_mut(idx) else {
                    break;
                };
                if !s.sacked {
                    // Sacked data has left the network (the receiver never
                    // drops what it sacked), so it no longer counts
                    // against the in-flight cap.
                    s.sacked = true;
                    self.bytes_in_flight -= s.bytes as usize;
                    note(s);
                    delivered(s.frame);
                }
            }
            self.detect_losses(stats);
        }
        if let Some((_, 1, sent_at)) = newest {
            self.rtt.sample(now.saturating_sub(sent_at), cfg);
        }
        if d > 0 {
            self.rto_deadline = if self.unacked.is_empty() {
                None
            } else {
                Some(now + self.rtt.rto(cfg))
            };
        }
    }

    /// SACK-based fast retransmit: an unsacked segment is lost once
    /// DUP_THRESH segments transmitted after it have arrived. Comparing
    /// transmission order rather than sequence numbers keeps a segment that
    /// was just retransmitted from being declared lost again by old news.
    fn detect_losses(&mut self, stats: &mut EngineStats) {
        let n = self.unacked.len().min(65);
        let mut top = [0u64; DUP_THRESH];
        for idx in (0..n).rev() {
            let s = &mut self.unacked[idx];
            if s.sacked {
                if s.txn > top[DUP_THRESH - 1] {
                    top[DUP_THRESH - 1] = s.txn;
                    top.sort_unstable_by(|a, b| b.cmp(a));
                }
            } else if !s.lost && top[DUP_THRESH - 1] > s.txn {
                s.lost = true;
                self.rtx.push_back(self.una + idx as u64);
                stats.fast_retransmits += 1;
            }
        }
    }

    /// The retransmission timer at `now`: the oldest segments whose RTO
    /// passed are queued again (a few: RTO_BURST), and the timer backs off.
    pub fn on_rto(&mut self, cfg: &EngineConfig, stats: &mut EngineStats, now: u64) -> RtoTick {
        let Some(deadline) = self.rto_deadline else {
            return RtoTick::Idle;
        };
        if self.unacked.is_empty() {
            self.rto_deadline = None;
            return RtoTick::Idle;
        }
        if now < deadline {
            return RtoTick::Idle;
        }
        stats.rto_expirations += 1;
        let rto = self.rtt.rto(cfg);
        let mut marked = 0;
        let mut marked_bytes = 0;
        let mut oldest = u64::MAX;
        for (i, s) in self.unacked.iter_mut().enumerate() {
            if s.sacked || s.lost {
                continue;
            }
            if now.saturating_sub(s.sent_at) < rto {
                oldest = oldest.min(s.sent_at);
            } else if marked == 0 || (marked < RTO_BURST && marked_bytes < RTO_BURST_BYTES) {
                if s.xmits > cfg.max_retrans {
                    return RtoTick::GiveUp;
                }
                s.lost = true;
                self.rtx.push_back(self.una + i as u64);
                marked += 1;
                marked_bytes += s.bytes as usize;
            } else {
                break;
            }
        }
        if marked > 0 {
            self.rtt.back_off();
            self.rto_deadline = Some(now + self.rtt.rto(cfg));
            RtoTick::Resend
        } else if oldest != u64::MAX {
            self.rto_deadline = Some(oldest + rto);
            RtoTick::Idle
        } else {
            // Everything unsacked already waits in the retransmit queue;
            // its transmission re-arms the timer.
            self.rto_deadline = Some(now + rto);
            RtoTick::Resend
        }
    }

    /// Every segment in flight goes again, counted as its first
    /// transmission (the VC was re-keyed: the peer dropped them all).
    pub fn resend_all(&mut self, cfg: &EngineConfig, now: u64) {
        debug_assert!(self.unacked.iter().all(|s| !s.sacked));
        for (i, s) in self.unacked.iter_mut().enumerate() {
            s.xmits = 0;
            if !s.lost {
                s.lost = true;
                self.rtx.push_back(self.una + i as u64);
            }
        }
        if !self.unacked.is_empty() {
            self.rtt.reset_backoff();
            self.rto_deadline = Some(now + self.rtt.rto(cfg));
            self.waiting_since = now;
        }
    }
}
