//! The receiving half of a VC's reliability: where an arriving sequence
//! number falls in the receive window, the segments parked out of order
//! until the hole before them fills, and the ACK policy (what a datagram
//! acknowledges, and when a standalone ACK is due).

use super::seq_delta;
use crate::proto::{EngineConfig, EngineStats};
use std::collections::BTreeMap;

/// Acknowledge at once after this many in-order segments, so a sender with
/// a small window does not stall for the ACK delay (a quarter of the byte
/// window also triggers one: `in_order_arrived`). More than a 64 KiB
/// message's 46 segments: its receiver acknowledges it on its answer, or
/// after the ACK delay (a rendezvous receive's last segment: at the next
/// transmission chance), rather than with two standalone ACKs on the way,
/// each a `sendto` ahead of the rest of the message (16 until 2026-12-02:
/// `fi_pingpong` 64 KiB across the namespaces 25.4 -> 23.5 µs, 32 KiB
/// 15.3 -> 14.2, medians of 5 alternating rounds).
const ACK_EVERY_SEGS: u32 = 64;

/// The ACK of the last message whose sender waits for it
/// (`in_order_arrived`), while its outcome teaches whether holding such
/// ACKs pays with this peer (`RecvWindow::answers`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Awaited {
    /// Held for the answer that may carry it.
    Held,
    /// Sent at once then: an answer of ours soon after says holding
    /// would have paid.
    Sent(u64),
}

/// A segment that arrived ahead of `nxt`.
pub enum Ooo {
    /// Rendezvous data is placed into its sink on arrival even out of order
    /// (it carries its offset); only the sequence number is remembered.
    Consumed,
    Stored {
        kind: u8,
        body: Vec<u8>,
    },
}

/// Where an arriving sequence number falls (`RecvWindow::classify`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    /// The next one expected.
    Next,
    /// Within the window, `ahead` (> 0) beyond the next one expected;
    /// `dup`: already parked (counted).
    Ahead { seq: u64, ahead: u64, dup: bool },
    /// Already delivered, or outside the window: counted, nothing else to do.
    Done,
}

pub struct RecvWindow {
    /// Segments we accept ahead of `nxt` (advertised in the handshake).
    pub window: u32,
    /// Next sequence number expected.
    pub nxt: u64,
    pub ooo: BTreeMap<u64, Ooo>,
    /// Payload bytes parked in `ooo`.
    pub ooo_bytes: usize,
    pub ack_pending: bool,
    pub ack_now: bool,
    pub ack_deadline: Option<u64>,
    segs_since_ack: u32,
    bytes_since_ack: usize,
    /// Whether the ACK of a message its sender waits for is held for the
    /// answer that may carry it (a ping-pong: the answer goes at once), or
    /// sent at once. It is held while holding pays: a held one that went
    /// without data was waited for, by a sender whose receiver had no
    /// answer (a stream) or went to compute (Open MPI's blocking `MPI_Send`
    /// of 16 KiB across hosts to a rank that received it and computed took
    /// 4.7 ms, the retransmission timer's, against 39 us over ob1 and
    /// TCP); from then on they go at once, until data of ours follows one
    /// within the ACK delay (`ack_left`).
    answers: bool,
    awaited: Option<Awaited>,
}

impl RecvWindow {
    pub fn new(window: u32) -> RecvWindow {
        RecvWindow {
            window,
            nxt: 0,
            ooo: BTreeMap::new(),
            ooo_bytes: 0,
            ack_pending: false,
            ack_now: false,
            ack_deadline: None,
            segs_since_ack: 0,
            bytes_since_ack: 0,
            answers: true,
            awaited: None,
        }
    }

    /// Where the wire sequence number `seq` falls. An old one means our
    /// ACK got lost: an ACK goes at once. One outside the window is
    /// counted and dropped.
    pub fn classify(&mut self, stats: &mut EngineStats, seq: u32) -> Slot {
        let d = seq_delta(seq, self.nxt);
        let window = self.window as i64;
        if d < 0 {
            if -d > window {
                stats.dropped_out_of_window += 1;
                return Slot::Done;
            }
            // Our ACK got lost: say again what we have.
            stats.dup_segments += 1;
            self.ack_pending = true;
            self.ack_now = true;
            return Slot::Done;
        }
        if d >= window {
            stats.dropped_out_of_window += 1;
            return Slot::Done;
        }
        if d == 0 {
            return Slot::Next;
        }
        let seq = self.nxt + d as u64;
        let dup = self.ooo.contains_key(&seq);
        if dup {
            stats.dup_segments += 1;
        }
        Slot::Ahead {
            seq,
            ahead: d as u64,
            dup,
        }
    }

    /// Whether the wire sequence number `seq` is the next in order with
    /// nothing parked behind it: `classify` would say `Slot::Next`, and
    /// `advance` fill no hole.
    pub fn is_next_alone(&self, seq: u32) -> bool {
        seq_delta(seq, self.nxt) == 0 && self.ooo.is_empty()
    }

    /// Parks an out-of-order segment (`Slot::Ahead`) whose body must wait
    /// for the hole before it; false if the budget for parked bytes is
    /// spent (neither stored nor sacked: the sender resends it).
    pub fn park(&mut self, cfg: &EngineConfig, stats: &mut EngineStats, seq: u64, kind: u8, body: &[u8]) -> bool {
        if self.ooo_bytes + body.len() > ooo_budget(cfg) {
            stats.dropped_ooo_budget += 1;
            return false;
        }
        stats.ooo_segments += 1;
        self.ooo_bytes += body.len();
        self.ooo.insert(
            seq,
            Ooo::Stored {
                kind,
                body: body.to_vec(),
            },
        );
        true
    }

    /// Remembers an out-of-order segment whose content was consumed on
    /// arrival (rendezvous data).
    pub fn consumed(&mut self, stats: &mut EngineStats, seq: u64) {
        stats.ooo_segments += 1;
        self.ooo.insert(seq, Ooo::Consumed);
    }

    /// ACK policy after a segment arrived `ahead` beyond the next expected
    /// one (parked, consumed, or a duplicate of either): tell the sender
    /// about the hole now rather than after the ACK delay, when the SACK
    /// bitmap can show this segment, or when it `completed` a receive
    /// whose ACK is not held (`in_order_arrived`).
    pub fn ahead_arrived(&mut self, cfg: &EngineConfig, ahead: u64, completed: bool, now: u64) {
        self.ack_pending = true;
        if ahead <= 64 || (completed && !self.holds(cfg)) {
            self.ack_now = true;
        } else if self.ack_deadline.is_none() {
            self.ack_deadline = Some(now + cfg.ack_delay_ns);
        }
    }

    /// The next expected segment arrived (its body `body_len` bytes):
    /// returns whether it filled a hole (segments were parked behind it).
    pub fn advance(&mut self, body_len: usize) -> bool {
        let filled_hole = !self.ooo.is_empty();
        self.nxt += 1;
        self.segs_since_ack += 1;
        self.bytes_since_ack += body_len + crate::proto::wire::SEG_HDR_LEN;
        filled_hole
    }

    /// The parked segment that is next in order now, if any (its sequence
    /// number is consumed).
    pub fn pop_parked(&mut self) -> Option<Ooo> {
        let entry = self.ooo.remove(&self.nxt)?;
        if let Ooo::Stored { body, .. } = &entry {
            self.ooo_bytes -= body.len();
        }
        self.nxt += 1;
        self.segs_since_ack += 1;
        Some(entry)
    }

    /// ACK policy after in-order delivery: at once when a hole was filled
    /// or enough arrived since the last ACK. When the segment completed a
    /// message its sender waits for (`awaited`), at once if nothing may
    /// call us again (`ack_completions_now`), if we wait for the peer's
    /// ACK ourselves (`we_wait`: two ranks that exchange messages, each
    /// waiting for the other's ACK before it goes on, as Open MPI's
    /// `MPI_Sendrecv` does) or if holding does not pay with this peer
    /// (`answers`); else it is held for the answer: a rendezvous receive's
    /// (`completed`) until the application had its chance to answer, an
    /// eager message's as other segments' are.
    pub fn in_order_arrived(
        &mut self,
        cfg: &EngineConfig,
        filled_hole: bool,
        completed: bool,
        awaited: bool,
        we_wait: bool,
        now: u64,
    ) {
        self.ack_pending = true;
        if let Some(Awaited::Sent(_)) = self.awaited {
            // The peer sent more before our answer: it was not waiting
            // for one (`ack_left`).
            self.awaited = None;
        }
        let at_once = awaited && (we_wait || !self.holds(cfg));
        if awaited && !we_wait {
            self.awaited = Some(if at_once { Awaited::Sent(now) } else { Awaited::Held });
        }
        if filled_hole || at_once {
            self.ack_now = true;
        } else if completed {
            // This ACK completes the peer's send. It waits for the next
            // transmission chance rather than go out before the
            // application sees its receive complete: if the application
            // answers, it rides on the answer; otherwise the next progress
            // call sends it (the deadline is already past by then).
            self.ack_deadline = Some(now + 1);
        } else if self.segs_since_ack >= ACK_EVERY_SEGS || self.bytes_since_ack >= cfg.window_bytes / 4 {
            self.ack_now = true;
        } else if self.ack_deadline.is_none() {
            self.ack_deadline = Some(now + cfg.ack_delay_ns);
        }
    }

    /// Whether a standalone ACK is due at `now`.
    pub fn ack_due(&self, now: u64) -> bool {
        self.ack_pending && (self.ack_now || self.ack_deadline.is_some_and(|d| d <= now))
    }

    /// The delayed ACK's deadline, while one is armed and not yet due at once.
    pub fn ack_timer(&self) -> Option<u64> {
        if self.ack_pending && !self.ack_now {
            self.ack_deadline
        } else {
            None
        }
    }

    /// The ACK fields every datagram after the handshake carries: the next
    /// sequence number expected, and which of the 64 after it we hold.
    pub fn ack_fields(&self) -> (u32, u64) {
        let mut sack = 0u64;
        if !self.ooo.is_empty() {
            for (&seq, _) in self.ooo.range(self.nxt + 1..=self.nxt + 64) {
                sack |= 1 << (seq - self.nxt - 1);
            }
        }
        (self.nxt as u32, sack)
    }

    /// Whether the ACK of a message its sender waits for is held for the
    /// application's answer (`answers`).
    fn holds(&self, cfg: &EngineConfig) -> bool {
        !cfg.ack_completions_now && self.answers
    }

    /// Our ACK state left at `now`, on a segment of ours (`with_data`: an
    /// answer) or standalone: what it says of holding (`answers`). A held
    /// ACK that went standalone had no answer to ride on, and its sender
    /// waited for its delay or longer: hold no more. Data of ours within
    /// the delay after one sent at once, before the peer sent anything
    /// else (`in_order_arrived`), would have carried it: hold again.
    pub fn ack_left(&mut self, cfg: &EngineConfig, now: u64, with_data: bool) {
        match self.awaited {
            None => {}
            Some(Awaited::Held) => {
                self.answers = with_data;
                self.awaited = None;
            }
            Some(Awaited::Sent(at)) if with_data => {
                self.answers |= now.saturating_sub(at) <= cfg.ack_delay_ns;
                self.awaited = None;
            }
            // The ACK sent at once: the answer, if any, is still to come.
            Some(Awaited::Sent(_)) => {}
        }
    }

    /// The current ACK state went out (on a segment or standalone).
    pub fn clear_ack(&mut self) {
        self.ack_pending = false;
        self.ack_now = false;
        self.ack_deadline = None;
        self.segs_since_ack = 0;
        self.bytes_since_ack = 0;
    }
}

/// Most bytes of out-of-order segments a VC parks. The sender's byte cap
/// counts only unsacked data, so without this bound a window of sacked
/// eager segments could pile up window_segments × max_datagram here.
fn ooo_budget(cfg: &EngineConfig) -> usize {
    cfg.window_bytes.saturating_mul(2)
}
