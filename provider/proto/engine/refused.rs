//! A peer's host refused one of our datagrams: no socket holds the port
//! any more (the peer's process closed its endpoint or died), which the
//! kernel learns from an ICMP port unreachable and the wire reads from
//! the socket's error queue (nic/udp/errqueue.rs). Without this news a
//! dead peer is known only by its silence, after the peer timeout.
//!
//! The news is believed only when the quoted datagram names the VC: the
//! ICMP message quotes our datagram's first bytes, which carry a
//! connection id of the VC's (the peer's id on ACK, CREDIT and segments,
//! ours on CONN_REQ and CONN_RESP; wire/mod.rs). An off-path forger knows
//! neither; a refusal of a datagram sent to an earlier incarnation of the
//! peer at the same address names an old id. Either is counted and
//! changes nothing.
//!
//! A believed refusal ends the VC. If it had operations under way (our
//! messages, receives pulling from the peer, answers awaited from it)
//! they fail and the peer is announced failed, as after a timeout. If it
//! had none, it is dropped without a word: that is a peer that closed its
//! endpoint after its last exchange with us (the end of a job), and an
//! announcement would fail collectives it has finished its part of.

use super::super::wire::{field, kind, MAGIC, VERSION};
use super::super::EngineError;
use super::vc::Vc;
use super::Engine;
use std::net::SocketAddr;

/// What a refusal did (`Engine::on_refused`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The VC failed: its operations completed in error and
    /// `Event::PeerFailed` went out.
    Failed,
    /// The VC had nothing under way and was dropped quietly; the wire
    /// lets go of what it held for the peer (its connected socket).
    Closed,
    /// The quote names no VC of ours: counted, nothing changed.
    Ignored,
}

impl Engine {
    /// A datagram we sent to `peer` was refused (ICMP port unreachable);
    /// `quote` is what the ICMP message quoted of it, its first bytes.
    pub fn on_refused(&mut self, peer: SocketAddr, quote: &[u8]) -> Refusal {
        self.settle();
        let Some(vc) = self.vcs.get(&peer) else {
            self.sh.stats.refusals_unverified += 1;
            return Refusal::Ignored;
        };
        if !quote_names(vc, quote) {
            self.sh.stats.refusals_unverified += 1;
            return Refusal::Ignored;
        }
        self.sh.stats.peers_refused += 1;
        // What keeps its silence watched (our messages, pulls from it,
        // answers awaited from it), and what it sent us that waits for a
        // receive.
        let busy = vc.awaiting_peer()
            || self.sh.rx.values().any(|r| r.peer == peer)
            || self.sh.rx_eager.values().any(|e| e.peer == peer);
        self.fail_vc(peer, EngineError::PeerRefused, busy);
        if busy {
            Refusal::Failed
        } else {
            Refusal::Closed
        }
    }
}

/// Whether `quote`, the start of a datagram we sent, carries a connection
/// id of `vc`'s (see the module).
fn quote_names(vc: &Vc, quote: &[u8]) -> bool {
    if quote.len() < field::CONN.end || quote[field::MAGIC] != MAGIC.to_le_bytes() || quote[field::VERSION] != VERSION {
        return false;
    }
    let mut id = [0u8; 8];
    id.copy_from_slice(&quote[field::CONN]);
    let id = u64::from_le_bytes(id);
    match quote[field::KIND] {
        // Our connection id, at the same place as the peer's elsewhere.
        kind::CONN_REQ | kind::CONN_RESP => id == vc.local_nonce,
        // Stateless: sent for the requester's id, proves nothing.
        kind::CHALLENGE => false,
        _ => vc.peer_nonce == Some(id),
    }
}
