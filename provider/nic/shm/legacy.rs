//! The endpoint's calls into the shm wire from before `nic::Wire`, as thin
//! wrappers over the executor: only the older tests over real mailboxes
//! (`tests/real.rs`) still use them.
//!
//! Ids: the operations of these calls are numbered by the wire, with the
//! top bit set, so they share the endpoint's maps with the udp engine's.

#![forbid(unsafe_code)]

use super::exec::{EagerOutcome, Exec, Msg};
use super::mailbox::{InSlot, Range, SharedBytes};
use super::port::{MailboxPort, Port};
use super::ShmCredit;
use crate::nic::wire::WireEvent;
use crate::proto::{MsgHdr, RecvSink, SendSource};
use std::net::SocketAddr;

pub(crate) const SHM_IDS: u64 = 1 << 63;

/// What became of an eager send.
#[derive(Debug, PartialEq, Eq)]
pub enum Eager {
    /// In the peer's ring: complete.
    Done,
    /// Completes later with `SendDone { id }`: waiting for ring space or
    /// credit, or (delivery complete) for the peer to take it.
    Pending(u64),
    /// The peer's loan would not cover it: send it by rendezvous.
    NoCredit,
}

/// A message that arrived through our mailbox.
pub enum Incoming {
    /// Payload in the slot: copy it out with `payload`, then `release`.
    Eager {
        slot: InSlot,
        peer: SocketAddr,
        hdr: MsgHdr,
        credit: ShmCredit,
    },
    /// Rendezvous request: the data is still in the sender's memory.
    Rts(Box<ShmRts>),
}

impl Incoming {
    pub fn credit(&self) -> ShmCredit {
        match self {
            Incoming::Eager { credit, .. } => *credit,
            Incoming::Rts(r) => r.credit,
        }
    }
}

/// A rendezvous message the wire holds until `pull` or `discard`.
#[derive(Debug)]
pub struct ShmRts {
    pub peer: SocketAddr,
    pub hdr: MsgHdr,
    pub credit: ShmCredit,
    pub(crate) held: u64,
}

#[derive(Debug, PartialEq, Eq)]
pub enum ShmEvent {
    SendDone { id: u64 },
    SendFailed { id: u64, err: i32 },
    RecvDone { rid: u64, written: usize },
    RecvFailed { rid: u64, err: i32 },
}

/// What a receiver's pull of an RTS came to.
pub enum Pull {
    /// All of it (or what fits) is in the buffers; the sender has its FIN.
    Done(usize),
    /// The receive completes later, with `RecvDone { rid }`: the sender
    /// writes its share (large messages), or pushes it all through the
    /// mailbox (cross-memory attach refused).
    Pending(u64),
    /// The sender is gone.
    Failed(i32),
}

impl Exec<MailboxPort> {
    fn next_id(&mut self) -> u64 {
        let id = self.next_op;
        self.next_op += 1;
        id
    }

    /// Frames waiting for ring space, over all peers.
    pub fn backlogged(&self) -> usize {
        self.m.backlogged()
    }

    /// Backlogged frames that complete no send of their own (control
    /// frames, RTS): the endpoint counts the others as its sends.
    pub fn backlogged_untracked(&self) -> usize {
        self.m.backlogged_untracked()
    }

    /// An eager message (`src.len() <= eager_max()`); see
    /// `Machine::send_eager`.
    pub fn send_eager(&mut self, ix: usize, hdr: &MsgHdr, src: &dyn SendSource, inject: bool, delivery: bool) -> Eager {
        let id = self.next_id();
        match self.eager(ix, id, hdr, src, inject, delivery) {
            EagerOutcome::Done => Eager::Done,
            EagerOutcome::Pending => Eager::Pending(id),
            EagerOutcome::NoCredit => Eager::NoCredit,
        }
    }

    /// A rendezvous send: `remote` are the addresses of `src`'s bytes in
    /// this process, which the receiver reads. Completes with SendDone.
    pub fn send_rts(
        &mut self,
        ix: usize,
        hdr: &MsgHdr,
        src: Box<dyn SendSource>,
        remote: &[Range],
    ) -> Result<u64, i32> {
        let id = self.next_id();
        self.rendezvous(ix, id, hdr, src, remote.to_vec())?;
        Ok(id)
    }

    /// The next message from a local peer, if any.
    pub fn poll_msg(&mut self) -> Option<Incoming> {
        Some(match self.poll_one()? {
            Msg::Eager {
                slot,
                peer,
                hdr,
                credit,
            } => Incoming::Eager {
                slot,
                peer,
                hdr,
                credit,
            },
            Msg::Rndv {
                peer,
                hdr,
                held,
                credit,
            } => Incoming::Rts(Box::new(ShmRts {
                peer,
                hdr,
                credit,
                held,
            })),
        })
    }

    /// The payload of an eager message from `poll_msg`: bytes the peer's
    /// process can write, to be copied out (never borrowed).
    pub fn payload(&self, s: &InSlot) -> SharedBytes<'_> {
        self.port.payload(s).expect("checked by Frame::parse")
    }

    pub fn release(&mut self, s: InSlot) {
        self.port.release(s);
    }

    /// A matched RTS: its data goes into `local` (the posted buffers), or
    /// through `sink` if the sender pushes it.
    pub fn pull(&mut self, rts: &ShmRts, local: &[(usize, usize)], sink: Box<dyn RecvSink>) -> Pull {
        let id = self.next_id();
        let local = local.iter().map(|&(a, l)| (a as u64, l as u64)).collect();
        self.m.accept(rts.held, id, sink, local);
        self.run();
        match self.m.take_event_of(id) {
            Some(WireEvent::RecvDone { written, .. }) => Pull::Done(written),
            Some(WireEvent::RecvFailed { err, .. }) => Pull::Failed(err),
            _ => Pull::Pending(id),
        }
    }

    /// The application took the message holding `c` (or it was matched on
    /// arrival): its producer may send that much more.
    pub fn free_credit(&mut self, c: ShmCredit) {
        self.m.free_credit(c);
        self.run();
    }

    /// Cancels a receive whose data is still moving (`Pull::Pending`).
    pub fn cancel_rx(&mut self, rid: u64) -> bool {
        let ok = self.m.cancel(rid);
        self.run();
        ok
    }

    pub fn poll_event(&mut self) -> Option<ShmEvent> {
        Some(match self.m.poll_event()? {
            WireEvent::SendDone { op } => ShmEvent::SendDone { id: op },
            WireEvent::SendFailed { op, err } => ShmEvent::SendFailed { id: op, err },
            WireEvent::RecvDone { op, written } => ShmEvent::RecvDone { rid: op, written },
            WireEvent::RecvFailed { op, err } => ShmEvent::RecvFailed { rid: op, err },
            WireEvent::PeerUp { .. } | WireEvent::PeerFailed { .. } => return self.poll_event(),
        })
    }

    /// When `pump` must run even if nothing arrives.
    pub fn next_deadline(&self, now: u64) -> Option<u64> {
        crate::nic::wire::Wire::next_deadline(self, now)
    }

    /// About to sleep: false if a message is already waiting.
    pub fn arm(&mut self) -> bool {
        self.port.arm(self.m.active())
    }
}
