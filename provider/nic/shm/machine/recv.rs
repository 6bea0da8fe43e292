//! The receiving side of the machine: frames from the rings of our
//! mailbox, credits, rendezvous receives (pull, split with the sender,
//! pushed by the sender), cancel and close, and rings whose producer
//! broke the rules, went away or died.

use super::{
    Action, CmaErr, Copied, GiveCredit, HeldRts, Machine, OnFrame, RingIn, RingIx, RxOp, RxState, Split, Token,
    GRANT_WAIT_NS, SPLIT_MIN,
};
use crate::ffi::{FI_EHOSTUNREACH, FI_EIO};
use crate::nic::shm::cma::{ranges_len, sub_ranges};
use crate::nic::shm::frame::{iov_bytes, Frame, Malformed};
use crate::nic::shm::mailbox::credit_cost;
use crate::nic::shm::mapping::SharedBytes;
use crate::nic::shm::ShmCredit;
use crate::nic::wire::{OpId, WireEvent};
use crate::proto::MemRanges;
use crate::proto::{MsgHdr, RecvSink};
use std::net::SocketAddr;

impl Machine {
    /// A peer (at `peer`, process `pid`) claimed ring `ring` of our mailbox.
    pub fn ring_claimed(&mut self, ring: RingIx, peer: SocketAddr, pid: u32) {
        let gen = self.rings[ring].gen + 1;
        self.rings[ring] = RingIn {
            gen,
            held: 0,
            freed: 0,
            peer: Some((peer, pid)),
        };
        self.active.push(ring);
    }

    /// The next slot of ring `ring`, as `Frame::parse` made it out, with
    /// its payload (data for DATA frames). Every slot is counted.
    pub fn on_frame(
        &mut self,
        ring: RingIx,
        parsed: Result<Frame, Malformed>,
        payload: Option<&SharedBytes<'_>>,
    ) -> OnFrame {
        if let Ok(Frame::Eager { hdr }) = parsed {
            return self.on_eager(ring, hdr);
        }
        self.stats.received += 1;
        let Some((peer, pid)) = self.rings[ring].peer else {
            return self.reject(ring, "a slot in a ring nobody claimed");
        };
        let frame = match parsed {
            Ok(f) => f,
            Err(m) => return self.reject(ring, m.why()),
        };
        match frame {
            Frame::Eager { .. } => unreachable!("taken above"),
            Frame::Rts { hdr, key, iov } => {
                let Some(credit) = self.take_credit(ring, credit_cost(iov_bytes(iov.len()))) else {
                    return self.reject(ring, "message beyond the peer's credit");
                };
                let held = self.next_held;
                self.next_held += 1;
                self.held.insert(
                    held,
                    HeldRts {
                        peer,
                        pid,
                        ring,
                        gen: credit.gen,
                        key,
                        len: hdr.len,
                        iov,
                    },
                );
                OnFrame::Rndv {
                    peer,
                    hdr,
                    held,
                    credit,
                }
            }
            Frame::Cts { key, rid } => {
                self.on_cts(peer, key, rid);
                OnFrame::Handled
            }
            Frame::Fin { key, status } => {
                self.on_fin(peer, key, status);
                OnFrame::Handled
            }
            Frame::Ctw {
                key,
                rid,
                at,
                grant,
                iov,
            } => {
                self.on_ctw(peer, key, rid, at, grant, iov);
                OnFrame::Handled
            }
            Frame::Wdone { rid, status } => {
                self.on_wdone(peer, rid, status);
                OnFrame::Handled
            }
            Frame::Data { rid, off, .. } => {
                if let Some(p) = payload {
                    self.on_data(peer, rid, off, p);
                }
                OnFrame::Handled
            }
        }
    }

    /// `on_frame` of an EAGER frame (`Frame::parse` made `hdr` of it), the
    /// receive path of every small message: a message, charged (as RTS
    /// frames are, and not the control frames, which keep nothing) to its
    /// producer's loan.
    pub fn on_eager(&mut self, ring: RingIx, hdr: MsgHdr) -> OnFrame {
        match self.eager_credit(ring, hdr.len as usize) {
            Ok(credit) => OnFrame::Eager { hdr, credit },
            Err(why) => self.reject(ring, why),
        }
    }

    /// `on_eager` of a message of `len` bytes, as its parts: the credit it
    /// holds, or why its ring is to be `reject`ed. (The executor's path of
    /// every small message, which keeps the header it has in registers
    /// rather than in an `OnFrame`.)
    #[inline]
    pub fn eager_credit(&mut self, ring: RingIx, len: usize) -> Result<ShmCredit, &'static str> {
        self.stats.received += 1;
        if self.rings[ring].peer.is_none() {
            return Err("a slot in a ring nobody claimed");
        }
        self.take_credit(ring, credit_cost(len))
            .ok_or("message beyond the peer's credit")
    }

    /// A slot that breaks the rules: counted, and its producer is cut off
    /// (its ring is no longer read, its receives fail). (The executor's
    /// for what `eager_credit` refuses.)
    #[cold]
    pub fn reject(&mut self, ring: RingIx, why: &'static str) -> OnFrame {
        self.stats.rejected += 1;
        if let Some(k) = self.active.iter().position(|&x| x == ring) {
            self.active.swap_remove(k);
            self.banned.push(ring);
        }
        // Credit its messages still hold is not given back to that ring.
        self.rings[ring].gen += 1;
        if let Some((peer, _)) = self.rings[ring].peer {
            // Not waiting for its writes: it broke the rules, and might
            // hold a grant forever.
            self.fail_rx_from(peer, FI_EIO, false);
        }
        OnFrame::Rejected(why)
    }

    /// Charges `cost` credit bytes to ring `ring`'s producer; `None` if
    /// that would take it beyond its loan (it broke the rules).
    fn take_credit(&mut self, ring: RingIx, cost: u64) -> Option<ShmCredit> {
        let loan = self.cfg.loan;
        let c = &mut self.rings[ring];
        if loan != 0 && c.held.saturating_add(cost) > loan {
            return None;
        }
        c.held += cost;
        Some(ShmCredit { ring, gen: c.gen, cost })
    }

    /// What has been taken from ring `ring` so far: its generation, and
    /// the credit its taken messages hold or gave back. Every message
    /// charges credit, so this moves with each one taken (and not with
    /// one left, `unhold`).
    pub fn taken_mark(&self, ring: RingIx) -> (u64, u64) {
        let rc = &self.rings[ring];
        (rc.gen, rc.held + rc.freed)
    }

    /// A message whose credit `eager_credit` took was left in its slot
    /// (`Take::Later`): not held, and not given back either (its sender
    /// still has it charged; the slot is still its).
    pub fn unhold(&mut self, c: ShmCredit) {
        if let Some(rc) = self.rings.get_mut(c.ring).filter(|rc| rc.gen == c.gen) {
            rc.held -= c.cost;
        }
    }

    /// The endpoint took the message holding `c` (or it was matched on
    /// arrival): its producer may send that much more, which the executor
    /// publishes at once (what it returns). Not an `Action`: it follows
    /// nearly every message, and the queue costs more than the store.
    #[must_use]
    pub fn free_credit(&mut self, c: ShmCredit) -> Option<GiveCredit> {
        let rc = self.rings.get_mut(c.ring).filter(|rc| rc.gen == c.gen)?;
        rc.held -= c.cost;
        rc.freed += c.cost;
        Some(GiveCredit {
            ring: c.ring,
            freed: rc.freed,
        })
    }

    /// Credit bytes held for messages of ring `ring`'s producer.
    #[cfg(test)]
    pub fn held_credit(&self, ring: RingIx) -> u64 {
        self.rings[ring].held
    }

    /// A rendezvous message nobody will receive: its sender's send
    /// completes.
    pub fn discard(&mut self, held: u64) {
        self.finish_held(held, 0);
    }

    /// A rendezvous message refused with `err` (a positive libfabric
    /// error): its sender's send fails with it (the FIN says -err).
    pub fn refuse(&mut self, held: u64, err: i32) {
        self.finish_held(held, -err.abs());
    }

    fn finish_held(&mut self, held: u64, status: i32) {
        if let Some(h) = self.held.remove(&held) {
            if !self.orphaned(&h) {
                self.post(h.peer, Frame::Fin { key: h.key, status });
            }
        }
    }

    /// Whether the ring a held message came through was retired, banned
    /// or claimed anew since: its sender closed, died or was cut off, and
    /// its send is gone with it.
    fn orphaned(&self, h: &HeldRts) -> bool {
        self.rings[h.ring].gen != h.gen
    }

    /// Receive `op` takes the rendezvous message `held`: its data goes to
    /// `local` (our memory, for cross-memory attach), or through `sink`
    /// when the sender pushes it. Ends with `RecvDone` or `RecvFailed`.
    pub fn accept(&mut self, held: u64, op: OpId, sink: Box<dyn RecvSink>, local: MemRanges) {
        let Some(h) = self.held.remove(&held) else {
            self.event(WireEvent::RecvFailed { op, err: FI_EIO });
            return;
        };
        if self.orphaned(&h) {
            self.event(WireEvent::RecvFailed {
                op,
                err: FI_EHOSTUNREACH,
            });
            return;
        }
        let cap = ranges_len(&local);
        if cap == 0 || h.len == 0 {
            self.post(h.peer, Frame::Fin { key: h.key, status: 0 });
            self.event(WireEvent::RecvDone { op, written: 0 });
            return;
        }
        let rid = self.next_rid;
        self.next_rid += 1;
        let mut rx = RxOp {
            op,
            peer: h.peer,
            pid: h.pid,
            key: h.key,
            len: h.len,
            state: RxState::Moving,
        };
        if !self.cfg.cma || self.no_cma.contains(&h.peer) {
            self.push(rid, rx, sink);
            return;
        }
        let total = cap.min(h.len);
        // The grant word lives in the ring the RTS came through (still its
        // sender's: not orphaned). A split spends the sender's core on our
        // message: not when it is pulling one of ours meanwhile (both
        // ranks of an exchange), where each rank reading its own message
        // whole moves the same bytes with fewer steps between them.
        if total >= SPLIT_MIN as u64 && !self.pulled_by(h.peer) {
            let at = (total / 2) & !4095;
            let theirs = sub_ranges(&local, at, total - at);
            if iov_bytes(theirs.len()) <= self.cfg.payload_max {
                rx.state = RxState::Arming(Split {
                    ring: h.ring,
                    at,
                    total,
                    local,
                    remote: h.iov,
                    sink,
                });
                self.actions.push_back(Action::ArmGrant { ring: h.ring, rid });
                self.rx.insert(rid, rx);
                return;
            }
        }
        self.actions.push_back(Action::CmaRead {
            token: Token::Pull(rid),
            pid: h.pid,
            local,
            remote: h.iov,
        });
        rx.state = RxState::Pull { sink };
        self.rx.insert(rid, rx);
    }

    /// Whether a rendezvous send of ours to `addr` waits for its FIN:
    /// that peer has our message to read. (One look at each such send,
    /// once a rendezvous receive: there are few, and this is no path of
    /// small messages.)
    fn pulled_by(&self, addr: SocketAddr) -> bool {
        self.tx.values().any(|t| {
            self.peers
                .get(t.peer)
                .and_then(Option::as_ref)
                .is_some_and(|p| p.addr == addr)
        })
    }

    /// No cross-memory attach with this sender: it pushes the data through
    /// its ring (CTS).
    fn push(&mut self, rid: u64, mut rx: RxOp, sink: Box<dyn RecvSink>) {
        self.post(rx.peer, Frame::Cts { key: rx.key, rid });
        rx.state = RxState::Push { sink, got: 0 };
        self.rx.insert(rid, rx);
    }

    /// The grant word of ring `ring` that `ArmGrant` got: `None` if all
    /// are in use. Then the receive waits for one of them to come back
    /// (each is armed for a split receive from the same sender, which
    /// ends with its WDONE), so that the sender keeps copying its share
    /// however many of its messages arrive at once; with none of ours in
    /// flight to free one, or after waiting `GRANT_WAIT_NS`
    /// (`expire_grant_waits`), we read it all ourselves.
    pub fn grant_armed(&mut self, ring: RingIx, rid: u64, grant: Option<usize>) {
        if !self
            .rx
            .get(&rid)
            .is_some_and(|rx| matches!(rx.state, RxState::Arming(_)))
        {
            // Armed for a receive that no longer waits for it.
            if let Some(grant) = grant {
                self.revoke_grant(ring, grant, rid);
            }
            return;
        }
        if grant.is_none()
            && self
                .rx
                .values()
                .any(|rx| matches!(&rx.state, RxState::Split { s, .. } if s.ring == ring))
        {
            self.grant_waits[ring].push_back((rid, 0));
            self.waiting_grants += 1;
            return;
        }
        let mut rx = self.rx.remove(&rid).expect("checked above");
        let RxState::Arming(s) = std::mem::replace(&mut rx.state, RxState::Moving) else {
            unreachable!("checked above")
        };
        match grant {
            Some(grant) => {
                // The sender may write into our buffers only while this
                // grant stands: cancel and close take it back.
                let theirs = sub_ranges(&s.local, s.at, s.total - s.at);
                self.post(
                    rx.peer,
                    Frame::Ctw {
                        key: rx.key,
                        rid,
                        at: s.at,
                        grant,
                        iov: theirs,
                    },
                );
                self.actions.push_back(Action::CmaRead {
                    token: Token::Head(rid),
                    pid: rx.pid,
                    local: sub_ranges(&s.local, 0, s.at),
                    remote: sub_ranges(&s.remote, 0, s.at),
                });
                rx.state = RxState::Split {
                    s,
                    grant,
                    head_read: false,
                    wdone: None,
                };
            }
            None => self.pull_whole(rid, &mut rx, s),
        }
        self.rx.insert(rid, rx);
    }

    /// Takes grant `grant` of ring `ring` back from `rid` (waiting for a
    /// write under it that runs), and arms it again for the oldest receive
    /// still waiting for a grant of that ring.
    fn revoke_grant(&mut self, ring: RingIx, grant: usize, rid: u64) {
        self.actions.push_back(Action::RevokeGrant { ring, grant, rid });
        while let Some((next, _)) = self.grant_waits[ring].pop_front() {
            self.waiting_grants -= 1;
            // Receives cancelled or failed meanwhile are skipped.
            if self
                .rx
                .get(&next)
                .is_some_and(|rx| matches!(rx.state, RxState::Arming(_)))
            {
                self.actions.push_back(Action::ArmGrant { ring, rid: next });
                break;
            }
        }
    }

    /// A split receive without its grant word reads the whole message
    /// itself.
    fn pull_whole(&mut self, rid: u64, rx: &mut RxOp, s: Split) {
        self.actions.push_back(Action::CmaRead {
            token: Token::Pull(rid),
            pid: rx.pid,
            local: s.local,
            remote: s.remote,
        });
        rx.state = RxState::Pull { sink: s.sink };
    }

    /// Split receives that waited for a grant word longer than
    /// `GRANT_WAIT_NS` read their message all by themselves (the executor
    /// calls this on every pass; it stamps new waits with `now`).
    #[inline]
    pub fn expire_grant_waits(&mut self, now: u64) {
        if self.waiting_grants != 0 {
            self.expire_grant_waits_now(now);
        }
    }

    #[inline(never)]
    fn expire_grant_waits_now(&mut self, now: u64) {
        for ring in 0..self.grant_waits.len() {
            if self.grant_waits[ring].is_empty() {
                continue;
            }
            // New waits are at the back: stamp them, up to the first one
            // stamped before.
            for w in self.grant_waits[ring].iter_mut().rev() {
                if w.1 != 0 {
                    break;
                }
                w.1 = now.max(1);
            }
            while let Some(&(rid, since)) = self.grant_waits[ring].front() {
                if now.saturating_sub(since) < GRANT_WAIT_NS {
                    break;
                }
                self.grant_waits[ring].pop_front();
                self.waiting_grants -= 1;
                let Some(mut rx) = self.rx.remove(&rid) else { continue };
                match std::mem::replace(&mut rx.state, RxState::Moving) {
                    RxState::Arming(s) => self.pull_whole(rid, &mut rx, s),
                    other => rx.state = other,
                }
                self.rx.insert(rid, rx);
            }
        }
    }

    /// A cross-memory copy (`CmaRead`, `CmaWrite`) is over.
    pub fn cma_done(&mut self, token: Token, r: Copied) {
        let rid = match token {
            Token::Write { key, rid, n } => return self.write_done(key, rid, n, r),
            Token::Pull(rid) | Token::Head(rid) | Token::Tail(rid) => rid,
        };
        let Some(mut rx) = self.rx.remove(&rid) else {
            return;
        };
        let state = std::mem::replace(&mut rx.state, RxState::Moving);
        let (op, peer, key) = (rx.op, rx.peer, rx.key);
        match (token, state, r) {
            (Token::Pull(_), RxState::Pull { .. }, Ok(n)) => {
                self.stats.pulled += 1;
                self.post(peer, Frame::Fin { key, status: 0 });
                self.event(WireEvent::RecvDone { op, written: n });
            }
            (Token::Pull(_), RxState::Pull { sink, .. }, Err(e)) => self.read_failed(rid, rx, sink, e),
            (Token::Head(_), RxState::Split { s, grant, wdone, .. }, Ok(_)) => {
                self.stats.pulled += 1;
                match wdone {
                    // The sender was done first (only where copies are
                    // slower than frames).
                    Some(status) => self.split_over(rid, rx, s, status),
                    None => {
                        rx.state = RxState::Split {
                            s,
                            grant,
                            head_read: true,
                            wdone: None,
                        };
                        self.rx.insert(rid, rx);
                    }
                }
            }
            (Token::Head(_), RxState::Split { s, grant, wdone, .. }, Err(e)) => {
                // The sender's write is revoked (or waited for) before the
                // buffers change hands; its WDONE then finds no split.
                if wdone.is_none() {
                    self.revoke_grant(s.ring, grant, rid);
                }
                self.read_failed(rid, rx, s.sink, e);
            }
            (Token::Tail(_), RxState::Tail { total, .. }, Ok(_)) => {
                self.event(WireEvent::RecvDone {
                    op,
                    written: total as usize,
                });
                self.post(peer, Frame::Fin { key, status: 0 });
            }
            // As any read: the sender gone, our reading refused (then it
            // pushes the whole message after all), or bad addresses.
            (Token::Tail(_), RxState::Tail { sink, .. }, Err(e)) => self.read_failed(rid, rx, sink, e),
            // A copy this receive no longer waits for.
            (_, state, _) => {
                rx.state = state;
                self.rx.insert(rid, rx);
            }
        }
    }

    /// Our read of a sender's memory failed: it is gone (the receive
    /// fails), the kernel refused (it pushes instead, and every later
    /// message from it too), or its addresses were bad (the message fails
    /// at both ends).
    fn read_failed(&mut self, rid: u64, rx: RxOp, sink: Box<dyn RecvSink>, e: CmaErr) {
        match e {
            CmaErr::Gone => self.event(WireEvent::RecvFailed {
                op: rx.op,
                err: FI_EHOSTUNREACH,
            }),
            CmaErr::Refused(_) => {
                self.no_cma.insert(rx.peer);
                self.push(rid, rx, sink);
            }
            CmaErr::Fault(_) | CmaErr::Revoked => {
                self.post(
                    rx.peer,
                    Frame::Fin {
                        key: rx.key,
                        status: -FI_EIO,
                    },
                );
                self.event(WireEvent::RecvFailed { op: rx.op, err: FI_EIO });
            }
        }
    }

    /// The sender wrote its part of `rid` (status 0), or could not: then
    /// we read it ourselves.
    fn on_wdone(&mut self, from: SocketAddr, rid: u64, status: i64) {
        // Only for a split receive from that sender: a refused write's
        // WDONE (the receive was cancelled or fell back) finds none.
        let split = |rx: &RxOp| rx.peer == from && matches!(rx.state, RxState::Split { wdone: None, .. });
        if !self.rx.get(&rid).is_some_and(split) {
            return;
        }
        let mut rx = self.rx.remove(&rid).expect("checked above");
        let RxState::Split {
            s, grant, head_read, ..
        } = std::mem::replace(&mut rx.state, RxState::Moving)
        else {
            unreachable!("checked above")
        };
        // Normally DONE already (or never taken): this only waits on a
        // sender that says WDONE while still writing.
        self.revoke_grant(s.ring, grant, rid);
        if head_read {
            self.split_over(rid, rx, s, status);
        } else {
            rx.state = RxState::Split {
                s,
                grant,
                head_read,
                wdone: Some(status),
            };
            self.rx.insert(rid, rx);
        }
    }

    /// Both parts of a split receive are over: done, or read the part the
    /// sender did not write.
    fn split_over(&mut self, rid: u64, mut rx: RxOp, s: Split, status: i64) {
        if status == 0 {
            self.event(WireEvent::RecvDone {
                op: rx.op,
                written: s.total as usize,
            });
            self.post(rx.peer, Frame::Fin { key: rx.key, status: 0 });
            return;
        }
        let n = s.total - s.at;
        self.actions.push_back(Action::CmaRead {
            token: Token::Tail(rid),
            pid: rx.pid,
            local: sub_ranges(&s.local, s.at, n),
            remote: sub_ranges(&s.remote, s.at, n),
        });
        rx.state = RxState::Tail {
            total: s.total,
            sink: s.sink,
        };
        self.rx.insert(rid, rx);
    }

    /// Pushed data of receive `rid`, from offset `off`.
    fn on_data(&mut self, from: SocketAddr, rid: u64, off: u64, data: &SharedBytes<'_>) {
        let Some(rx) = self.rx.get_mut(&rid).filter(|rx| rx.peer == from) else {
            return;
        };
        let len = rx.len;
        let RxState::Push { sink, got } = &mut rx.state else {
            return;
        };
        // In order only; writes past the buffer are cut off (truncation).
        if off != *got {
            return;
        }
        let cap = sink.capacity() as u64;
        let n = (data.len() as u64).min(cap.saturating_sub(off)) as usize;
        copy_into(sink.as_mut(), off as usize, data, n);
        *got += data.len() as u64;
        if *got < len {
            return;
        }
        let written = len.min(cap) as usize;
        let rx = self.rx.remove(&rid).expect("found above");
        self.event(WireEvent::RecvDone { op: rx.op, written });
        self.post(rx.peer, Frame::Fin { key: rx.key, status: 0 });
    }

    /// Cancels receive `op` whose data is still moving: the sender's write
    /// is revoked (or waited for), and its send completes (its message was
    /// matched). False if `op` is no such receive, or a copy into it is
    /// under way (it then completes).
    pub fn cancel(&mut self, op: OpId) -> bool {
        let Some(rid) = self.rx.iter().find(|(_, rx)| rx.op == op).map(|(&rid, _)| rid) else {
            return false;
        };
        let rx = &self.rx[&rid];
        match &rx.state {
            RxState::Split {
                s,
                grant,
                head_read: true,
                wdone: None,
            } => {
                let (ring, grant) = (s.ring, *grant);
                self.revoke_grant(ring, grant, rid);
                self.stats.revoked += 1;
            }
            RxState::Push { .. } => {}
            _ => return false,
        }
        let rx = self.rx.remove(&rid).expect("found above");
        self.post(rx.peer, Frame::Fin { key: rx.key, status: 0 });
        true
    }

    /// Closing: no sender may write into our receives' buffers once we
    /// are gone (the application may free them as soon as the endpoint is
    /// closed): every grant is revoked.
    pub fn close(&mut self) {
        // Nothing is armed any more: receives waiting for a grant stay
        // where they are.
        for q in &mut self.grant_waits {
            q.clear();
        }
        self.waiting_grants = 0;
        let mut splits: Vec<(u64, RingIx, usize)> = self
            .rx
            .iter()
            .filter_map(|(&rid, rx)| match &rx.state {
                RxState::Split { s, grant, .. } => Some((rid, s.ring, *grant)),
                _ => None,
            })
            .collect();
        splits.sort_unstable();
        for (rid, ring, grant) in splits {
            self.rx.remove(&rid);
            self.actions.push_back(Action::RevokeGrant { ring, grant, rid });
            self.stats.revoked += 1;
        }
    }

    /// Ring `ring`'s producer closed it or died (`died`), and it is
    /// drained: it goes back to the pool; a dead producer's receives fail.
    pub fn retire(&mut self, ring: RingIx, died: bool) {
        if let Some(k) = self.active.iter().position(|&x| x == ring) {
            self.active.swap_remove(k);
        }
        let peer = self.rings[ring].peer.take();
        self.rings[ring].gen += 1;
        self.actions.push_back(Action::FreeRing { ring });
        if let (true, Some((peer, _))) = (died, peer) {
            self.fail_rx_from(peer, FI_EHOSTUNREACH, false);
        }
    }

    /// The peer at `to` has no mailbox any more (an answer to it could not
    /// be routed): receives from it will never end otherwise.
    pub fn unreachable(&mut self, to: SocketAddr) {
        self.fail_rx_from(to, FI_EHOSTUNREACH, true);
    }

    /// A banned ring's producer closed it or died: it may be handed out
    /// again.
    pub fn unban(&mut self, ring: RingIx) {
        self.banned.retain(|&x| x != ring);
        self.rings[ring].peer = None;
        self.actions.push_back(Action::FreeRing { ring });
    }

    /// Receives from `peer` in progress fail; with `revoke`, grants it
    /// holds are taken back first (waiting for a write that runs). A dead
    /// peer writes nothing; one that broke the rules is not waited for.
    fn fail_rx_from(&mut self, peer: SocketAddr, err: i32, revoke: bool) {
        let mut dead: Vec<u64> = self
            .rx
            .iter()
            .filter(|(_, rx)| rx.peer == peer)
            .map(|(&rid, _)| rid)
            .collect();
        dead.sort_unstable();
        for rid in dead {
            let rx = self.rx.remove(&rid).expect("found above");
            if let (true, RxState::Split { s, grant, .. }) = (revoke, &rx.state) {
                let (ring, grant) = (s.ring, *grant);
                self.revoke_grant(ring, grant, rid);
            }
            self.event(WireEvent::RecvFailed { op: rx.op, err });
        }
    }
}

/// Copies `n` bytes of a slot's payload into `sink` at `off`: straight
/// into its memory where it offers a region, else through a bounce buffer.
fn copy_into(sink: &mut dyn RecvSink, off: usize, data: &SharedBytes<'_>, n: usize) {
    let mut k = 0;
    while k < n {
        match sink.region(off + k, n - k) {
            Some(dst) if !dst.is_empty() => {
                let m = dst.len();
                data.copy_to(k, dst);
                k += m;
            }
            _ => {
                let mut bounce = vec![0u8; n - k];
                data.copy_to(k, &mut bounce);
                sink.write_at(off + k, &bounce);
                return;
            }
        }
    }
}
