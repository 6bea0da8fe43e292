//! The sending side of the machine: eager sends (at once, or from the
//! per-peer queue), rendezvous sends and what their receiver asks of them
//! (CTS: push, CTW: write, FIN: done), delivery completion, and a peer
//! that went away.

use super::{Action, CmaErr, Connected, Copied, Done, Machine, PeerIx, PeerOut, Queued, RingView, Token, TxRndv};
use crate::ffi::{FI_ECANCELED, FI_EHOSTUNREACH, FI_EINVAL, FI_EIO};
use crate::nic::shm::cma::{ranges_len, sub_ranges};
use crate::nic::shm::frame::{iov_bytes, Frame};
use crate::nic::shm::mailbox::{credit_cost, msg_max, SlotHead};
use crate::nic::wire::{OpId, WireEvent};
use crate::proto::MemRanges;
use crate::proto::{MsgHdr, SendSource};
use std::collections::VecDeque;
use std::net::SocketAddr;

/// What to do with an eager send (`Machine::send_eager`).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum EagerStep {
    /// Publish it now with this header and the send's bytes, then say
    /// `eager_posted` (or, if the ring had no room after all,
    /// `eager_queue`).
    Now(SlotHead),
    /// Queued with a copy of its bytes: `SendDone` (or `SendFailed`) later.
    Queued,
    /// The peer's loan would not cover it: send it by rendezvous.
    NoCredit,
}

/// `Machine::eager_step`'s answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Now,
    Queue,
    NoCredit,
}

/// A frame `poll_post` offers for a peer's ring.
pub(crate) struct Outgoing<'a> {
    pub head: SlotHead,
    pub bytes: OutBytes<'a>,
    /// Hand back to `posted` once it is published.
    pub next: Next,
}

/// Where an outgoing frame's payload comes from.
pub(crate) enum OutBytes<'a> {
    /// The frame's own (an iov list; nothing for control frames).
    Frame(&'a Frame),
    /// A queued eager message's copy.
    Copy(&'a [u8]),
    /// A pushing send's bytes from this offset.
    Source(&'a dyn SendSource, usize),
}

impl OutBytes<'_> {
    /// Fills the slot's payload (`dst.len()` is the header's length).
    pub fn fill(&self, dst: &mut [u8]) {
        match self {
            OutBytes::Frame(f) => f.write_payload(dst),
            OutBytes::Copy(b) => dst.copy_from_slice(&b[..dst.len()]),
            OutBytes::Source(s, off) => s.read_at(*off, dst),
        }
    }
}

/// Which frame `posted` confirms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// The head of the peer's control frames.
    Ctrl,
    /// The head of the peer's queue.
    Queued,
    /// `n` bytes of send `key`'s pushed data.
    Data { key: u64, n: u64 },
}

impl Machine {
    /// A new ring in the mailbox of the peer at `addr`, numbered `ix` by
    /// the executor and shaped like ours; its owner lends it `loan` credit
    /// bytes (0: no limit).
    #[cfg(test)]
    pub fn connect(&mut self, ix: PeerIx, addr: SocketAddr, loan: u64) {
        let c = Connected {
            ix,
            loan,
            slot_size: self.cfg.payload_max + crate::nic::shm::mailbox::SLOT_HDR,
            span: self.cfg.span,
        };
        self.connect_ring(c, addr);
    }

    /// A new ring in the mailbox of the peer at `addr`, as the executor
    /// claimed it.
    pub fn connect_ring(&mut self, c: Connected, addr: SocketAddr) {
        let Connected {
            ix,
            loan,
            slot_size,
            span,
        } = c;
        if self.peers.len() <= ix {
            self.peers.resize_with(ix + 1, || None);
        }
        debug_assert!(self.peers[ix].is_none());
        self.peers[ix] = Some(PeerOut {
            addr,
            slot_size,
            msg_max: msg_max(span, slot_size),
            loan,
            charged: 0,
            freed: 0,
            tail: 0,
            chosen: [0; crate::nic::shm::choice::CLASSES],
            ctrlq: VecDeque::new(),
            outq: VecDeque::new(),
            outq_cost: 0,
            delivery: VecDeque::new(),
            pushes: VecDeque::new(),
        });
    }

    fn peer(&mut self, ix: PeerIx) -> &mut PeerOut {
        self.peers[ix].as_mut().expect("a connected peer")
    }

    /// An eager send (`eager_fits`) of `src` to peer `ix`, as operation
    /// `op` (`eager_step` decides how).
    #[allow(clippy::too_many_arguments)]
    pub fn send_eager(
        &mut self,
        ix: PeerIx,
        op: OpId,
        hdr: &MsgHdr,
        src: &dyn SendSource,
        inject: bool,
        delivery: bool,
        view: RingView,
    ) -> EagerStep {
        let hdr = MsgHdr {
            len: src.len() as u64,
            ..*hdr
        };
        match self.eager_step(ix, src.len(), inject, view) {
            Step::NoCredit => {
                self.stats.no_credit += 1;
                EagerStep::NoCredit
            }
            Step::Now => EagerStep::Now(Frame::eager_head(&hdr)),
            Step::Queue => {
                self.eager_queue(ix, op, &hdr, src, delivery);
                EagerStep::Queued
            }
        }
    }

    /// An eager send of `len` bytes to peer `ix` that goes into the ring at
    /// once (`send_eager` would say `Now`, the ring having room): its slot
    /// header. Publish it, then say `eager_posted`. The credit word is
    /// read (`freed`) only when the credit last read does not cover the
    /// send. `None`: it would not go at once (queued, or by rendezvous),
    /// and nothing changed but the credit word seen: `send_eager` decides.
    pub fn eager_now(
        &mut self,
        ix: PeerIx,
        hdr: &MsgHdr,
        len: usize,
        inject: bool,
        freed: impl FnOnce() -> u64,
    ) -> Option<SlotHead> {
        let cost = credit_cost(len);
        let p = self.peers.get_mut(ix)?.as_mut()?;
        // A peer whose mailbox was made with smaller slots (or spans)
        // than ours cannot hold it.
        if len > p.msg_max {
            return None;
        }
        if !p.sends_now(cost, inject) {
            p.freed = freed();
            if !p.sends_now(cost, inject) {
                return None;
            }
        }
        Some(Frame::eager_head(&MsgHdr {
            len: len as u64,
            ..*hdr
        }))
    }

    /// What becomes of an eager send of `len` bytes to peer `ix`
    /// (`PeerOut::eager_allowed`, waiting for credit if need be).
    fn eager_step(&mut self, ix: PeerIx, len: usize, inject: bool, view: RingView) -> Step {
        let cost = credit_cost(len);
        let p = self.peer(ix);
        if let Some(f) = view.freed {
            p.freed = f;
        }
        // A peer whose mailbox was made with smaller slots (or spans)
        // than ours cannot hold it: by rendezvous, as if short of credit.
        if len > p.msg_max || !p.eager_allowed(cost, inject) {
            return Step::NoCredit;
        }
        if p.goes_first(cost) && view.room {
            return Step::Now;
        }
        Step::Queue
    }

    /// Whether an eager send of `len` bytes to peer `ix` goes out at once
    /// on the credit word last read (`send_eager` may then be given no
    /// fresh `RingView::freed`): nothing waits ahead and the credit known
    /// covers it, with the reserve a non-inject leaves for RTS frames.
    pub fn credit_known_enough(&self, ix: PeerIx, len: usize, inject: bool) -> bool {
        let Some(p) = self.peers.get(ix).and_then(Option::as_ref) else {
            return false;
        };
        p.sends_now(credit_cost(len), inject)
    }

    /// The eager send `EagerStep::Now` offered is published: whether it is
    /// complete (else it waits for the peer to take it: delivery).
    pub fn eager_posted(&mut self, ix: PeerIx, op: OpId, len: usize, delivery: bool) -> bool {
        self.stats.sent += 1;
        let p = self.peer(ix);
        let pos = p.tail;
        p.tail += p.span_of(len);
        p.charged += credit_cost(len);
        if delivery {
            p.delivery.push_back((pos, op));
            self.delivering += 1;
        }
        !delivery
    }

    /// Queues an eager send with its own copy of the bytes (no room in the
    /// ring, or credit or frames ahead of it).
    pub fn eager_queue(&mut self, ix: PeerIx, op: OpId, hdr: &MsgHdr, src: &dyn SendSource, delivery: bool) {
        let mut bytes = vec![0u8; src.len()];
        src.read_at(0, &mut bytes);
        let hdr = MsgHdr {
            len: src.len() as u64,
            ..*hdr
        };
        let cost = credit_cost(bytes.len());
        self.queue(
            ix,
            Queued {
                frame: Frame::Eager { hdr },
                bytes,
                cost,
                done: Some(Done { op, delivery }),
            },
        );
    }

    /// A rendezvous send: `addrs` are where `src`'s bytes are in this
    /// process, which the receiver reads (or we push, or write). Ends with
    /// `SendDone` at the receiver's FIN. `Err(FI_EINVAL)`: more pieces
    /// than an RTS holds.
    pub fn send_rts(
        &mut self,
        ix: PeerIx,
        op: OpId,
        hdr: &MsgHdr,
        src: Box<dyn SendSource>,
        addrs: MemRanges,
    ) -> Result<(), i32> {
        let need = iov_bytes(addrs.len());
        if need > self.cfg.payload_max {
            return Err(FI_EINVAL);
        }
        let key = self.next_key;
        self.next_key += 1;
        let hdr = MsgHdr {
            len: ranges_len(&addrs),
            ..*hdr
        };
        self.queue(
            ix,
            Queued {
                frame: Frame::Rts {
                    hdr,
                    key,
                    iov: addrs.clone(),
                },
                bytes: Vec::new(),
                cost: credit_cost(need),
                done: None,
            },
        );
        self.tx.insert(
            key,
            TxRndv {
                op,
                peer: ix,
                src,
                addrs,
                push: None,
            },
        );
        Ok(())
    }

    /// A control frame the executor routed to peer `ix` (see
    /// `Action::Post`).
    pub fn enqueue(&mut self, ix: PeerIx, frame: Frame) {
        self.stats.sent += 1;
        self.queued += 1;
        self.stats.backlog_peak = self.stats.backlog_peak.max(self.queued as u64);
        self.peer(ix).ctrlq.push_back(frame);
    }

    fn queue(&mut self, ix: PeerIx, q: Queued) {
        self.stats.sent += 1;
        self.queued += 1;
        self.queued_sends += q.done.is_some() as usize;
        self.stats.backlog_peak = self.stats.backlog_peak.max(self.queued as u64);
        let p = self.peer(ix);
        p.outq_cost += q.cost;
        p.outq.push_back(q);
    }

    /// The next frame for peer `ix`'s ring: a control frame, else the
    /// head of its queue if its credit covers it, else the next piece of
    /// data a send pushes there. Publish it, then say `posted(ix, next)`.
    ///
    /// `freed` reads what the owner gave back so far, only when the credit
    /// last seen does not cover the queue's head (as `eager_now`): the
    /// owner writes that word as it takes each message in, so reading it
    /// for every frame fetched its line from the other core on the path
    /// of every RTS and FIN.
    ///
    /// What costs no credit never waits for it: control frames go first
    /// (`PeerOut::ctrlq`), and pushed data goes past a head that waits for
    /// credit, which the peer may give back only once that data is in (a
    /// target holding later one-sided requests until an earlier one's
    /// data is in, `ep/rma.rs`).
    pub fn poll_post(&mut self, ix: PeerIx, freed: impl FnOnce() -> u64) -> Option<Outgoing<'_>> {
        let payload_max = self.cfg.payload_max as u64;
        let p = self.peers.get_mut(ix)?.as_mut()?;
        if let Some(f) = p.ctrlq.front() {
            return Some(Outgoing {
                head: f.head(),
                bytes: OutBytes::Frame(f),
                next: Next::Ctrl,
            });
        }
        if let Some(q) = p.outq.front() {
            if p.credit() < q.cost {
                p.freed = freed();
            }
            if p.credit() >= q.cost {
                let bytes = match q.frame {
                    Frame::Eager { .. } => OutBytes::Copy(&q.bytes),
                    _ => OutBytes::Frame(&q.frame),
                };
                return Some(Outgoing {
                    head: q.frame.head(),
                    bytes,
                    next: Next::Queued,
                });
            }
        }
        let &key = p.pushes.front()?;
        let t = self.tx.get(&key).expect("a pushing send is in flight");
        let (rid, off) = t.push.expect("a pushing send has a receiver");
        let n = payload_max.min(t.src.len() as u64 - off);
        Some(Outgoing {
            head: Frame::Data {
                rid,
                off,
                len: n as usize,
            }
            .head(),
            bytes: OutBytes::Source(&*t.src, off as usize),
            next: Next::Data { key, n },
        })
    }

    /// The frame `poll_post` offered is published.
    pub fn posted(&mut self, ix: PeerIx, next: Next) {
        match next {
            Next::Ctrl => {
                let p = self.peer(ix);
                p.ctrlq.pop_front().expect("posted what poll_post offered");
                p.tail += 1;
                self.queued -= 1;
            }
            Next::Queued => {
                let p = self.peer(ix);
                let q = p.outq.pop_front().expect("posted what poll_post offered");
                p.charged += q.cost;
                p.outq_cost -= q.cost;
                let pos = p.tail;
                // An RTS's iov list fits a slot; an eager copy may span.
                p.tail += p.span_of(q.bytes.len());
                if let Some(d) = q.done {
                    if d.delivery {
                        p.delivery.push_back((pos, d.op));
                        self.delivering += 1;
                    } else {
                        self.event(WireEvent::SendDone { op: d.op });
                    }
                    self.queued_sends -= 1;
                }
                self.queued -= 1;
            }
            Next::Data { key, n } => {
                self.peer(ix).tail += 1;
                self.stats.pushed += 1;
                let t = self.tx.get_mut(&key).expect("posted what poll_post offered");
                let (rid, off) = t.push.expect("pushing");
                t.push = Some((rid, off + n));
                if off + n >= t.src.len() as u64 {
                    self.peer(ix).pushes.pop_front();
                    self.pushing -= 1;
                }
            }
        }
    }

    /// The oldest published send of peer `ix` that waits for the peer to
    /// take its slot: its ring position.
    pub fn delivery_front(&self, ix: PeerIx) -> Option<u64> {
        self.peers.get(ix)?.as_ref()?.delivery.front().map(|d| d.0)
    }

    /// The peer took that slot out of its ring: the send is complete.
    pub fn delivered(&mut self, ix: PeerIx) {
        if let Some((_, op)) = self.peer(ix).delivery.pop_front() {
            self.delivering -= 1;
            self.event(WireEvent::SendDone { op });
        }
    }

    /// Our ring in peer `ix`'s mailbox is gone (the peer closed, restarted
    /// or died): sends still waiting for it fail, and so do rendezvous
    /// sends it has not finished and deliveries it did not take (the
    /// executor reported those it took, with `delivered`, first).
    pub fn peer_gone(&mut self, ix: PeerIx) {
        let Some(p) = self.peers.get_mut(ix).and_then(Option::take) else {
            return;
        };
        let err = FI_EHOSTUNREACH;
        self.queued -= p.outq.len() + p.ctrlq.len();
        for q in &p.outq {
            if let Some(d) = q.done {
                self.queued_sends -= 1;
                self.event(WireEvent::SendFailed { op: d.op, err });
            }
        }
        for &(_, op) in &p.delivery {
            self.delivering -= 1;
            self.event(WireEvent::SendFailed { op, err });
        }
        self.pushing -= p.pushes.len();
        let mut dead: Vec<(u64, OpId)> = self
            .tx
            .iter()
            .filter(|(_, t)| t.peer == ix)
            .map(|(&k, t)| (k, t.op))
            .collect();
        // In the order they were sent.
        dead.sort_unstable();
        for (key, op) in dead {
            self.tx.remove(&key);
            self.event(WireEvent::SendFailed { op, err });
        }
        // What the endpoint waits for from it beyond our sends (a one-sided
        // operation's answer) will not come either.
        self.event(WireEvent::PeerFailed { peer: p.addr });
    }

    /// Whether `from` is the peer send `key` went to: rendezvous frames
    /// from anyone else (another local process guessing keys) are ignored.
    fn tx_from(&self, key: u64, from: SocketAddr) -> bool {
        self.tx
            .get(&key)
            .is_some_and(|t| self.peers[t.peer].as_ref().is_some_and(|p| p.addr == from))
    }

    /// The receiver is done with send `key` (status 0 or -errno).
    pub(super) fn on_fin(&mut self, from: SocketAddr, key: u64, status: i32) {
        if !self.tx_from(key, from) {
            return;
        }
        let t = self.tx.remove(&key).expect("checked above");
        if let Some(p) = self.peers[t.peer].as_mut() {
            if let Some(k) = p.pushes.iter().position(|&x| x == key) {
                p.pushes.remove(k);
                self.pushing -= 1;
            }
        }
        self.event(if status == 0 {
            WireEvent::SendDone { op: t.op }
        } else {
            // FIN carries a negative errno; completions want it positive.
            WireEvent::SendFailed {
                op: t.op,
                err: status.saturating_abs(),
            }
        });
    }

    /// The receiver cannot read our memory: push the data of `key` to it
    /// as `rid`.
    pub(super) fn on_cts(&mut self, from: SocketAddr, key: u64, rid: u64) {
        if !self.tx_from(key, from) {
            return;
        }
        let t = self.tx.get_mut(&key).expect("checked above");
        if t.push.is_some() {
            return;
        }
        t.push = Some((rid, 0));
        if t.src.is_empty() {
            return;
        }
        let ix = t.peer;
        self.peer(ix).pushes.push_back(key);
        self.pushing += 1;
    }

    /// The receiver of `key` asks us to write our bytes from `at` on into
    /// `theirs`, under grant `grant` of our ring, for its receive `rid`.
    pub(super) fn on_ctw(&mut self, from: SocketAddr, key: u64, rid: u64, at: u64, grant: usize, theirs: MemRanges) {
        if !self.tx_from(key, from) {
            return;
        }
        let t = &self.tx[&key];
        let n = ranges_len(&theirs);
        match at.checked_add(n) {
            Some(end) if end <= t.src.len() as u64 => {
                let local = sub_ranges(&t.addrs, at, n);
                self.actions.push_back(Action::CmaWrite {
                    token: Token::Write { key, rid, n },
                    peer: t.peer,
                    grant,
                    rid,
                    local,
                    remote: theirs,
                });
            }
            _ => self.post(
                from,
                Frame::Wdone {
                    rid,
                    status: -(FI_EIO as i64),
                },
            ),
        }
    }

    /// Our write into a receiver's memory (`Action::CmaWrite`) is over:
    /// tell the receiver.
    pub(super) fn write_done(&mut self, key: u64, rid: u64, n: u64, r: Copied) {
        let status = match r {
            Ok(w) if w as u64 == n => {
                self.stats.pushed_cma += 1;
                0
            }
            Ok(_) => -(FI_EIO as i64),
            Err(CmaErr::Revoked) => -(FI_ECANCELED as i64),
            Err(CmaErr::Gone) => -(libc::ESRCH as i64),
            Err(CmaErr::Refused(e) | CmaErr::Fault(e)) => -(e as i64),
        };
        let Some(to) = self.tx.get(&key).and_then(|t| self.peer_addr(t.peer)) else {
            return;
        };
        self.post(to, Frame::Wdone { rid, status });
    }
}
