//! Work an arriving message leaves for later, so that the message reaches
//! the application first.
//!
//! In a ping-pong every datagram that brings a message also acknowledges
//! the last one we sent, and the message, once the endpoint has copied it
//! out, frees the credits it held. When the message acknowledged was an
//! inject (a quiet send, complete already), both are ours to account for,
//! not the application's: done between the datagram's arrival and its
//! completion, they lay some 400 instructions on each side's part of
//! every round trip (callgrind of fabtests' ping-pong across hosts;
//! `on_ack` about 350 of them: the acknowledged segment out of the send
//! window, its message out of the VC's table). So such
//! an ACK, on the last datagram of a run that delivers a message
//! (`Vc::ack_frees_only`), and the credits the endpoint frees, wait in
//! `Later` until the next entry point that may read them: the
//! application's next send after its datagram is out (`UdpWire::send`,
//! `UdpWire::inject_now`), the next pass (`UdpWire::progress_timers_hot`),
//! or any other entry but the send itself and the ones that hand events
//! out (`handle_one` hands its message out, and settles before it takes
//! the next datagram). An ACK that
//! completes a send the application may be waiting for (Open MPI's
//! blocking `MPI_Send` of a message past the inject size) is applied at
//! once.
//!
//! What the delay can change: a send made meanwhile sees the send window
//! as it was (fuller, never wrongly open), and a retransmission queued
//! before the ACK came may go once more (the peer drops the duplicate);
//! `poll_timeout` says "now" while anything waits, so a progress thread
//! that would sleep makes the pass first; `has_unacked` counts a waiting
//! ACK as data in flight. The ACK keeps its arrival time, for the RTT.

use super::sched::mark_ready;
use super::vc::Vc;
use super::{Engine, Shared, CREDIT_NEWS_NS};
use std::net::SocketAddr;

#[derive(Default)]
pub(super) struct Later {
    ack: Option<LaterAck>,
    /// Credits of messages the endpoint took, by peer: one peer's at a
    /// time (another's first settles the one waiting).
    freed: Option<Freed>,
}

/// The ACK fields of a datagram from the VC `peer` knew as `conn`.
#[derive(Clone, Copy)]
pub(super) struct LaterAck {
    pub(super) peer: SocketAddr,
    pub(super) conn: u64,
    pub(super) ack: u32,
    pub(super) sack: u64,
    pub(super) at: u64,
}

#[derive(Clone, Copy)]
struct Freed {
    peer: SocketAddr,
    credits: u64,
    at: u64,
}

impl LaterAck {
    pub(super) fn of(peer: SocketAddr, conn: u64, ack: u32, sack: u64, at: u64) -> LaterAck {
        LaterAck {
            peer,
            conn,
            ack,
            sack,
            at,
        }
    }
}

impl Vc {
    /// A segment datagram of `len` bytes from this VC's peer (its
    /// connection id checked) with the ACK fields `a`: counted, the peer
    /// heard from, the ACK applied, or held when the segment brings a
    /// message that ends its run (`msg_last`) and the ACK completes no
    /// send the application waits for: the ACK waits until the message
    /// is on its way to the application (the module; the caller settled
    /// what waited before).
    pub(super) fn seg_heard(&mut self, sh: &mut Shared, later: &mut Later, a: LaterAck, len: usize, msg_last: bool) {
        sh.stats.datagrams_in += 1;
        sh.stats.bytes_in += len as u64;
        self.heard(sh, a.at);
        if msg_last && self.ack_frees_only(a.ack, a.sack) {
            sh.stats.acks_held += 1;
            later.hold_ack(a);
        } else {
            self.on_ack(sh, a.ack, a.sack, a.at);
        }
    }
}

impl Later {
    pub(super) fn is_empty(&self) -> bool {
        self.ack.is_none() && self.freed.is_none()
    }

    pub(super) fn has_ack(&self) -> bool {
        self.ack.is_some()
    }

    /// Holds `a` (the caller settled what waited before: one at a time).
    fn hold_ack(&mut self, a: LaterAck) {
        debug_assert!(self.ack.is_none());
        self.ack = Some(a);
    }
}

impl Engine {
    /// Applies what arrivals left for later (see the module): every
    /// `&mut self` entry point calls this first but the sending ones
    /// (`send_now`, `send_now_general`, `prepare`, `commit`), `release`,
    /// the ones that hand events out and the rendezvous placement guess
    /// (`rdata_placement`, `placement_missed`); so may the caller, once
    /// what the application waited for is on its way.
    #[inline]
    pub fn settle(&mut self) {
        if !self.later.is_empty() {
            self.settle_now();
        }
    }

    #[inline(never)]
    fn settle_now(&mut self) {
        if let Some(a) = self.later.ack.take() {
            let sh = &mut self.sh;
            if let Some(vc) = self
                .vcs
                .get_mut(&a.peer)
                .filter(|vc| vc.established() && vc.local_nonce == a.conn)
            {
                vc.on_ack(sh, a.ack, a.sack, a.at);
                self.timers.rearm(vc, &sh.cfg);
                if vc.may_transmit(a.at) {
                    mark_ready(&mut self.ready, vc);
                }
            }
        }
        if let Some(f) = self.later.freed.take() {
            self.release_now(f.peer, f.credits, f.at);
        }
    }

    /// The application took a message from `peer` (matched on arrival, or
    /// later out of the unexpected queue) that was charged `len` bytes
    /// (an eager message's length, a rendezvous one's `rts_charge`): its
    /// credits go back to the peer, at the next `settle`.
    ///
    /// News of a quarter of the peer's loan waits up to `CREDIT_NEWS_NS`
    /// for something else going to the peer (a ping-pong's answer) and
    /// goes behind it; half the loan, or a stalled peer, is told at once.
    pub fn release(&mut self, peer: SocketAddr, len: u64, now: u64) {
        let Some(bank) = &self.sh.bank else { return };
        let credits = bank.cfg.cost(len.min(usize::MAX as u64) as usize) as u64;
        if let Some(f) = &mut self.later.freed {
            if f.peer == peer {
                f.credits = f.credits.saturating_add(credits);
                return;
            }
        }
        if let Some(f) = self.later.freed.replace(Freed { peer, credits, at: now }) {
            self.release_now(f.peer, f.credits, f.at);
        }
    }

    fn release_now(&mut self, peer: SocketAddr, credits: u64, now: u64) {
        let Some(bank) = &mut self.sh.bank else { return };
        let Some(vc) = self.vcs.get_mut(&peer) else { return };
        bank.on_freed(&mut vc.lender, credits.min(u32::MAX as u64) as u32);
        if vc.credit_due {
            return;
        }
        if vc.lender.wants_news() {
            vc.credit_news = None;
            vc.credit_due = true;
            mark_ready(&mut self.ready, vc);
        } else if vc.lender.has_news() && vc.credit_news.is_none() {
            vc.credit_news = Some(now.saturating_add(CREDIT_NEWS_NS));
        }
        self.timers.rearm(vc, &self.sh.cfg);
    }
}
