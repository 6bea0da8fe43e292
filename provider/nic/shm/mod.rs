//! The shm wire: peers on this host exchange messages through mailboxes
//! (SMSG-style rings in shared memory) and copy large payloads straight
//! between each other's memory with cross-memory attach.
//!
//! | file | what |
//! |---|---|
//! | `mailbox.rs` | the shared memory's layout: mailbox files, rings, slots (one message may span several), credit and grant words, liveness of their owners; the consumer's side |
//! | `mailbox/outbox.rs` | the producer's side: `Outbox` (our ring in a peer's mailbox: claiming it, free slots, credits and grants read) and `SlotWriter` (filling and publishing a slot) |
//! | `mapping.rs` | a shared mapping and `SharedBytes`: every access to memory another process may write |
//! | `cache.rs` | which last-level cache this process runs under (a sender spans more slots to a peer under its own) |
//! | `choice.rs` | copy or pull: what spanning copies and rendezvous pulls cost on this host, by size, and the longest message an endpoint wants copied |
//! | `cma.rs` | cross-memory attach (`process_vm_readv/writev`) over lists of address ranges |
//! | `frame.rs` | typed frames (EAGER, RTS, CTS, DATA, FIN, CTW, WDONE): the one encoder and decoder of a slot's fields, which checks everything a peer wrote |
//! | `machine/` | the protocol as a sans-IO machine: sends (eager, queued, delivery complete, credit fallback to rendezvous), rendezvous receives (pull, split with the sender, push), credits, grants, rings that break the rules or whose producer died |
//! | `port.rs` | what the executor needs of the world, as a trait; `MailboxPort` does it over `mailbox.rs` |
//! | `exec/` | the executor (`mod.rs`; its receive side `recv.rs`): routes, polls rings, runs the machine's actions, liveness, doorbells; implements `nic::Wire` |
//! | `fuzz/` | the frame decoder's fuzz target (`Frame::parse` on edited slots), for `cargo test` and cargo-fuzz |
//! | `sim.rs`, `tests/` | a simulated host (rings and address spaces in plain memory) and the tests: the executor in virtual time, the executor over real mailboxes |
//!
//! One wire per endpoint. It owns the endpoint's mailbox (where local peers
//! write to us) and the rings it claimed in peers' mailboxes (where we
//! write to them). Messages (EAGER, RTS) surface to the endpoint, which
//! matches them against posted receives and copies eager payloads
//! straight from the slot into the application's buffer (an eager
//! message longer than a slot spans several, in one contiguous piece:
//! `mailbox.rs`); the rendezvous frames are the machine's.
//!
//! Rendezvous: the sender's RTS carries its buffer addresses; the receiver
//! reads them with `process_vm_readv` (one copy) and answers FIN; from 32
//! KiB on it asks the sender (CTW) to write the second half while it reads
//! the first, under a grant it can revoke. Where the kernel refuses
//! cross-memory attach (Yama ptrace_scope, containers, other users, or
//! `FI_GNIX_CMA=0`) the receiver answers CTS instead, and the sender
//! pushes the data through its ring in DATA slots; refusal is remembered
//! per peer.
//!
//! Completion: a send completes once its data no longer depends on the
//! sender: an eager message once it is in the peer's ring (or, with
//! FI_DELIVERY_COMPLETE, once the peer took it out), a rendezvous once the
//! peer has read it (FIN). A frame that finds the ring full waits in the
//! sender's queue, and its send is not complete until it is published.
//!
//! Credits: a peer may have at most the owner's loan of eager and RTS
//! bytes charged and not given back. A sender short of credit for an eager
//! message sends an RTS instead (the receiver keeps only its header and
//! reads the data once a receive takes it), so what a receiver holds for
//! unexpected messages stays bounded however many local peers flood it,
//! while every message still gets through.
//!
//! Wakeups: a receiver about to sleep sets the mailbox's sleeping flag
//! (`arm`); the next producer to publish clears it and rings a doorbell:
//! one tiny datagram to the receiver's UDP socket, which its sleeper
//! already polls. An endpoint that keeps polling never arms, and its peers
//! never pay for a syscall.

pub mod cache;
pub mod cma;
pub mod mailbox;
pub mod mapping;

mod choice;
mod exec;
mod frame;
// The frame decoder's fuzz target (for `cargo test` and, re-exported as
// `gnix_fi::fuzz`, for fuzz/).
#[cfg(any(test, feature = "fuzz"))]
pub(crate) mod fuzz;
mod machine;
mod port;
#[cfg(test)]
mod sim;
#[cfg(test)]
mod tests;

use std::net::IpAddr;

pub use mailbox::Geometry;

/// The shm wire of an endpoint: the executor over real mailboxes.
pub(crate) type ShmWire = exec::Exec<port::MailboxPort>;
/// A local peer as the shm wire numbers it (`ShmWire::route_ref`).
pub(crate) use machine::PeerIx;

/// A shm datagram on the UDP socket that means "look at your mailbox".
pub const DOORBELL: &[u8] = b"GNIXBELL";

pub fn is_doorbell(d: &[u8]) -> bool {
    d == DOORBELL
}

pub struct ShmConfig {
    pub geo: Geometry,
    pub cma: bool,
    pub local_ips: Vec<IpAddr>,
    /// Credit bytes each ring of our mailbox lends its producer (0: no
    /// limit): what we may have to keep for one local peer's unexpected
    /// messages.
    pub loan: u64,
}

/// Credit a received EAGER or RTS holds until the application takes the
/// message (`Wire::give_back`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShmCredit {
    ring: usize,
    /// The ring's claim generation: credit of a ring that has since been
    /// retired (and perhaps claimed by someone else) is not given back.
    gen: u64,
    cost: u64,
}

#[derive(Default, Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShmStats {
    pub sent: u64,
    pub received: u64,
    pub pulled: u64,
    pub pushed: u64,
    /// Large rendezvous whose second half the sender wrote (CTW).
    pub pushed_cma: u64,
    pub doorbells: u64,
    pub rejected: u64,
    /// Eager-sized sends that went by rendezvous: the peer's loan was used up.
    pub no_credit: u64,
    /// Large receives whose sender's write was revoked (cancel, close).
    pub revoked: u64,
    /// Most frames ever waiting in backlogs at once.
    pub backlog_peak: u64,
    /// Times a message nobody waited for was left in its slot
    /// (`Take::Later`), and times one was taken from it after all (kept,
    /// not matched).
    pub left: u64,
    pub left_kept: u64,
}

/// The peer address a test endpoint uses (loopback, so no interface list
/// is needed).
#[cfg(test)]
pub(crate) fn test_addr(port: u16) -> std::net::SocketAddr {
    std::net::SocketAddr::new(IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 99)), port)
}
