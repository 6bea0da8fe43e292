//! The shm wire: peers on this host exchange messages through mailboxes
//! (SMSG-style rings in shared memory, see `mailbox.rs`) and pull large
//! payloads from each other's memory with cross-memory attach.
//!
//! One `ShmWire` per endpoint. It owns the endpoint's mailbox (where local
//! peers write to us) and the rings it claimed in peers' mailboxes (where
//! we write to them). Message frames (EAGER, RTS) surface to the endpoint,
//! which matches them against posted receives and copies eager payloads
//! straight from the slot into the application's buffer. The rendezvous
//! frames (CTS, DATA, FIN) are handled here and surface as `ShmEvent`s.
//!
//! Rendezvous: the sender's RTS carries its buffer addresses; the receiver
//! reads them with `process_vm_readv` (one copy) and answers FIN. Where the
//! kernel refuses cross-memory attach (Yama ptrace_scope, containers, other
//! users, or `FI_GNIX_CMA=0`) the receiver answers CTS instead, and the
//! sender pushes the data through its ring in DATA slots (two copies,
//! pipelined by the ring); refusal is remembered per peer.
//!
//! Completion: a send completes once its data no longer depends on the
//! sender: an eager message once it is in the peer's ring (or, with
//! FI_DELIVERY_COMPLETE, once the peer took it out), a rendezvous once the
//! peer has read it (FIN). A frame that finds the ring full waits in the
//! sender's backlog, and its send is not complete until it is published.
//!
//! Credits (`mailbox.rs`): a peer may have at most the owner's loan of
//! eager and RTS bytes charged and not given back. A sender short of
//! credit for an eager message sends an RTS instead (the receiver keeps
//! only its header and reads the data once a receive takes it), so what a
//! receiver holds for unexpected messages stays bounded however many local
//! peers flood it, while every message still gets through.
//!
//! Wakeups: a receiver about to sleep sets the mailbox's sleeping flag
//! (`arm`); the next producer to publish clears it and asks the endpoint to
//! ring a doorbell: one tiny datagram to the receiver's UDP socket, which
//! its sleeper already polls. An endpoint that keeps polling never arms,
//! and its peers never pay for a syscall.

pub mod mailbox;

use crate::ffi::{FI_ECANCELED, FI_EHOSTUNREACH, FI_EIO};
use crate::hash::KeyedState;
use crate::proto::{MsgHdr, RecvSink, SendSource};
use mailbox::{credit_cost, kind, ranges_len, sub_ranges, InSlot, Liveness, Mailbox, Outbox, Range, SharedBytes};
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};

pub use mailbox::Geometry;

/// A shm datagram on the UDP socket that means "look at your mailbox".
pub const DOORBELL: &[u8] = b"GNIXBELL";

pub fn is_doorbell(d: &[u8]) -> bool {
    d == DOORBELL
}

/// How often the liveness of peers with operations in flight is checked.
const CHECK_EVERY_NS: u64 = 20_000_000;
/// Shm rendezvous at least this long are copied by both processes: the
/// receiver pulls the first half while the sender writes the second.
const SPLIT_MIN: usize = 32 << 10;
/// Send and rendezvous ids of this wire have the top bit set, so they
/// share the endpoint's maps with the udp engine's ids.
const SHM_IDS: u64 = 1 << 63;

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
/// message (`ShmWire::free_credit`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShmCredit {
    ring: usize,
    /// The ring's claim generation: credit of a ring that has since been
    /// retired (and perhaps claimed by someone else) is not given back.
    gen: u64,
    cost: u64,
}

/// Credit accounting of one ring of our mailbox.
#[derive(Clone, Copy, Default)]
struct RingCredit {
    gen: u64,
    held: u64,
    freed: u64,
}

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

#[derive(Debug)]
pub struct ShmRts {
    pub peer: SocketAddr,
    pub pid: u32,
    pub key: u64,
    pub hdr: MsgHdr,
    pub iov: Vec<Range>,
    pub credit: ShmCredit,
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

/// A frame that found its ring full, kept (with its own copy of the
/// payload) until the consumer frees a slot.
struct Frame {
    kind: u8,
    f: [u8; 32],
    payload: Vec<u8>,
    /// Credit bytes it is charged when published.
    cost: u64,
    /// The send it completes once published (or, delivery complete, once
    /// the peer took it).
    done: Option<Done>,
}

/// The send a published frame completes: at once, or once the peer has
/// taken the slot out of its ring (FI_DELIVERY_COMPLETE).
#[derive(Clone, Copy)]
struct Done {
    id: u64,
    delivery: bool,
}

struct Peer {
    out: Outbox,
    addr: SocketAddr,
    backlog: VecDeque<Frame>,
    /// Credit bytes of the frames in `backlog`.
    backlog_cost: u64,
    /// Published slots whose sends complete once the peer took them:
    /// (position, send id), oldest first.
    delivery: VecDeque<(u64, u64)>,
}

impl Peer {
    /// Credit for a new frame once the backlog ahead of it is published.
    fn credit_ahead(&self) -> u64 {
        self.out.credit().saturating_sub(self.backlog_cost)
    }
}

/// A rendezvous send waiting for its FIN (or a CTS, then pushing).
struct TxRndv {
    peer: usize,
    src: Box<dyn SendSource>,
    /// Where `src`'s bytes are in our memory (what the RTS advertised).
    addrs: Vec<Range>,
    /// Pushing: the receiver's rid and the next offset to push.
    push: Option<(u64, usize)>,
}

/// A large receive split between both processes: we pulled the part
/// before `at`; the sender writes the rest into our buffers and says
/// WDONE.
struct RxSplit {
    key: u64,
    from: SocketAddr,
    pid: u32,
    /// The ring of our mailbox the sender owns, and the grant word there
    /// that permits its write (see mailbox.rs).
    ring: usize,
    grant: usize,
    at: usize,
    total: usize,
    local: Vec<Range>,
    remote: Vec<Range>,
}

/// A receive the sender pushes into (no cross-memory attach).
struct RxPush {
    sink: Box<dyn RecvSink>,
    len: usize,
    got: usize,
    from: SocketAddr,
    key: u64,
}

#[derive(Default, Debug, Clone, Copy)]
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
}

pub struct ShmWire {
    me: SocketAddr,
    uid: u32,
    cfg: ShmConfig,
    mb: Mailbox,
    /// Rings of our mailbox that peers claimed, and their producers.
    active: Vec<usize>,
    senders: Vec<Option<Liveness>>,
    credit: Vec<RingCredit>,
    /// Rings whose producer broke the rules: no longer read, and not
    /// handed to anyone else while that producer may still write them.
    banned: Vec<usize>,
    next_ring: usize,
    routes: HashMap<SocketAddr, Option<usize>, KeyedState>,
    peers: Vec<Option<Peer>>,
    /// Peers whose memory the kernel refused to let us read.
    no_cma: HashMap<SocketAddr, (), KeyedState>,
    tx: HashMap<u64, TxRndv, KeyedState>,
    rx: HashMap<u64, RxPush, KeyedState>,
    split: HashMap<u64, RxSplit, KeyedState>,
    next_id: u64,
    /// Frames in backlogs (those that complete a send, and the others),
    /// sends pushing data, sends awaiting delivery (to skip idle work).
    queued: usize,
    queued_sends: usize,
    pushing: usize,
    delivering: usize,
    events: VecDeque<ShmEvent>,
    /// Peers whose sleeping receiver wants a doorbell.
    pub bells: Vec<SocketAddr>,
    last_check: u64,
    pub stats: ShmStats,
}

/// Whether a cross-memory attach error means "not allowed here" (Yama,
/// containers, seccomp, another user), as opposed to a bad address.
fn cma_refused(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EPERM | libc::EACCES | libc::ENOSYS))
}

fn encode_iov(iov: &[Range], dst: &mut [u8]) {
    for (c, &(a, l)) in dst.chunks_mut(16).zip(iov) {
        c[0..8].copy_from_slice(&a.to_le_bytes());
        c[8..16].copy_from_slice(&l.to_le_bytes());
    }
}

fn decode_iov(p: &[u8]) -> Vec<Range> {
    p.chunks_exact(16)
        .map(|c| {
            (
                u64::from_le_bytes(c[0..8].try_into().unwrap()),
                u64::from_le_bytes(c[8..16].try_into().unwrap()),
            )
        })
        .collect()
}

fn put(f: &mut [u8; 32], at: usize, v: u64) {
    f[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

fn hdr_fields(hdr: &MsgHdr) -> [u8; 32] {
    let mut f = [0u8; 32];
    put(&mut f, 0, hdr.tag);
    put(&mut f, 8, hdr.data);
    f[16..20].copy_from_slice(&hdr.flags.to_le_bytes());
    f
}

fn hdr_of(s: &InSlot, len: u64) -> MsgHdr {
    MsgHdr {
        tag: s.u64(0),
        data: s.u64(8),
        flags: s.u32(16),
        len,
    }
}

impl ShmWire {
    /// The mailbox of the endpoint at `me`; `Err` if it cannot be made
    /// (the endpoint then uses UDP for everyone).
    pub fn new(me: SocketAddr, cfg: ShmConfig, seed: u64) -> std::io::Result<ShmWire> {
        // SAFETY: geteuid has no preconditions.
        let uid = unsafe { libc::geteuid() };
        let mb = Mailbox::create(uid, &me, cfg.geo, cfg.loan)?;
        let nrings = mb.geometry().nrings;
        Ok(ShmWire {
            me,
            uid,
            cfg,
            mb,
            active: Vec::new(),
            senders: (0..nrings).map(|_| None).collect(),
            credit: vec![RingCredit::default(); nrings],
            banned: Vec::new(),
            next_ring: 0,
            routes: HashMap::with_hasher(KeyedState(seed)),
            peers: Vec::new(),
            no_cma: HashMap::with_hasher(KeyedState(seed)),
            tx: HashMap::with_hasher(KeyedState(seed)),
            rx: HashMap::with_hasher(KeyedState(seed)),
            split: HashMap::with_hasher(KeyedState(seed)),
            next_id: SHM_IDS,
            queued: 0,
            queued_sends: 0,
            pushing: 0,
            delivering: 0,
            events: VecDeque::new(),
            bells: Vec::new(),
            last_check: 0,
            stats: ShmStats::default(),
        })
    }

    /// Whether `id` (a send or receive id) belongs to this wire.
    pub fn owns(id: u64) -> bool {
        id & SHM_IDS != 0
    }

    pub fn eager_max(&self) -> usize {
        self.cfg.geo.payload()
    }

    /// Whether any local peer talks to us over shm (the endpoint then
    /// polls its UDP socket less eagerly).
    pub fn in_use(&self) -> bool {
        !self.active.is_empty() || self.peers.iter().any(Option::is_some)
    }

    /// The shm peer for `addr`, deciding on first use: local address and a
    /// live mailbox with a free ring. The decision sticks (messages to one
    /// peer stay on one wire, hence in order) until the peer goes away.
    pub fn route(&mut self, addr: SocketAddr) -> Option<usize> {
        if let Some(&r) = self.routes.get(&addr) {
            match r {
                // One load of a line the owner writes once: a peer that
                // closed (or restarted at this address) is noticed on the
                // next send, not after the next liveness check.
                Some(ix) if self.peers[ix].as_ref().is_some_and(|p| p.out.owner_closed()) => self.forget(ix),
                r => return r,
            }
        }
        let r = self.connect(addr);
        self.routes.insert(addr, r);
        r
    }

    fn connect(&mut self, addr: SocketAddr) -> Option<usize> {
        if !self.cfg.local_ips.contains(&addr.ip()) && !addr.ip().is_loopback() {
            return None;
        }
        let out = match Outbox::connect(self.uid, &addr, &self.me) {
            Ok(Some(o)) => o,
            Ok(None) => return None,
            Err(e) => {
                crate::warn!(crate::ffi::FI_LOG_EP_CTRL, "shm mailbox of {}: {}; using UDP", addr, e);
                return None;
            }
        };
        crate::info!(crate::ffi::FI_LOG_EP_CTRL, "{} -> {}: shm wire", self.me, addr);
        let p = Peer {
            out,
            addr,
            backlog: VecDeque::new(),
            backlog_cost: 0,
            delivery: VecDeque::new(),
        };
        let ix = match self.peers.iter().position(Option::is_none) {
            Some(i) => {
                self.peers[i] = Some(p);
                i
            }
            None => {
                self.peers.push(Some(p));
                self.peers.len() - 1
            }
        };
        Some(ix)
    }

    /// Frames waiting for ring space, over all peers.
    pub fn backlogged(&self) -> usize {
        self.queued
    }

    /// Backlogged frames that complete no send of their own (control
    /// frames, RTS): the endpoint counts the others as its sends.
    pub fn backlogged_untracked(&self) -> usize {
        self.queued - self.queued_sends
    }

    /// Writes one frame into the peer's ring, or queues it behind the ones
    /// already waiting (or for credit). `payload(dst)` fills the first
    /// `len` payload bytes; `cost` is its credit charge. Whether the send
    /// it completes (`done`) is complete now.
    #[allow(clippy::too_many_arguments)]
    fn post(
        &mut self,
        ix: usize,
        kind: u8,
        f: &[u8; 32],
        len: usize,
        cost: u64,
        done: Option<Done>,
        payload: impl FnOnce(&mut [u8]),
    ) -> bool {
        let Some(p) = self.peers[ix].as_mut() else {
            // The peer went away: the send fails at once.
            if let Some(d) = done {
                self.events.push_back(ShmEvent::SendFailed {
                    id: d.id,
                    err: FI_EHOSTUNREACH,
                });
            }
            return false;
        };
        self.stats.sent += 1;
        if p.backlog.is_empty() && p.out.credit() >= cost {
            let pos = p.out.tail();
            if let Some(mut s) = p.out.slot() {
                s.fields(kind, len, f);
                payload(s.payload(len));
                if s.publish() {
                    self.bells.push(p.addr);
                }
                p.out.charge(cost);
                return match done {
                    Some(d) if d.delivery => {
                        p.delivery.push_back((pos, d.id));
                        self.delivering += 1;
                        false
                    }
                    _ => true,
                };
            }
        }
        let mut v = vec![0u8; len];
        payload(&mut v);
        self.queued += 1;
        self.stats.backlog_peak = self.stats.backlog_peak.max(self.queued as u64);
        self.queued_sends += done.is_some() as usize;
        p.backlog_cost += cost;
        p.backlog.push_back(Frame {
            kind,
            f: *f,
            payload: v,
            cost,
            done,
        });
        false
    }

    /// An eager message (`src.len() <= eager_max()`). An injected one
    /// (`inject`: its buffer is the application's again on return) is
    /// always sent eagerly, waiting for credit if need be; any other falls
    /// back to rendezvous (`Eager::NoCredit`) rather than spend the last
    /// quarter of the peer's loan, which stays for RTS frames.
    pub fn send_eager(&mut self, ix: usize, hdr: &MsgHdr, src: &dyn SendSource, inject: bool, delivery: bool) -> Eager {
        let len = src.len();
        let cost = credit_cost(len);
        if let Some(p) = self.peers[ix].as_ref() {
            let reserve = p.out.loan() / 4;
            if !inject && p.credit_ahead() < cost.saturating_add(reserve) {
                self.stats.no_credit += 1;
                return Eager::NoCredit;
            }
        }
        let id = self.next_id;
        self.next_id += 1;
        let f = hdr_fields(hdr);
        let done = Done { id, delivery };
        if self.post(ix, kind::EAGER, &f, len, cost, Some(done), |dst| src.read_at(0, dst)) {
            Eager::Done
        } else {
            Eager::Pending(id)
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
        let need = remote.len() * 16;
        if need > self.eager_max() {
            crate::warn!(
                crate::ffi::FI_LOG_EP_DATA,
                "shm: {} iovs do not fit an RTS",
                remote.len()
            );
            return Err(crate::ffi::FI_EINVAL);
        }
        let id = self.next_id;
        self.next_id += 1;
        let mut f = hdr_fields(hdr);
        f[20..24].copy_from_slice(&(remote.len() as u32).to_le_bytes());
        put(&mut f, 24, id);
        self.post(ix, kind::RTS, &f, need, credit_cost(need), None, |dst| {
            encode_iov(remote, dst)
        });
        self.tx.insert(
            id,
            TxRndv {
                peer: ix,
                src,
                addrs: remote.to_vec(),
                push: None,
            },
        );
        Ok(id)
    }

    /// Sends a rendezvous control frame (FIN, CTS, WDONE) to `to`, if we
    /// can reach it over shm at all.
    fn control(&mut self, to: SocketAddr, kind: u8, a: u64, b: u64) {
        self.control_iov(to, kind, a, b, 0, 0, &[]);
    }

    #[allow(clippy::too_many_arguments)]
    fn control_iov(&mut self, to: SocketAddr, kind: u8, a: u64, b: u64, c: u64, d: u64, iov: &[Range]) {
        let Some(ix) = self.route(to) else {
            crate::warn!(
                crate::ffi::FI_LOG_EP_DATA,
                "shm: cannot answer {} (its mailbox is gone)",
                to
            );
            return;
        };
        let mut f = [0u8; 32];
        put(&mut f, 0, a);
        put(&mut f, 8, b);
        put(&mut f, 16, c);
        put(&mut f, 24, d);
        self.post(ix, kind, &f, iov.len() * 16, 0, None, |dst| encode_iov(iov, dst));
    }

    /// The next message from a local peer, if any. Rendezvous control
    /// frames met on the way are handled (see `poll_event`).
    pub fn poll_msg(&mut self) -> Option<Incoming> {
        if self.mb.rings.is_empty() {
            return None;
        }
        if self.mb.claims_changed() {
            let mut fresh = Vec::new();
            self.mb.scan_claims(&mut fresh);
            for &r in &fresh {
                let pid = self.mb.rings[r].expect("claimed ring has a peer").pid;
                self.senders[r] = Some(Liveness::watch(pid));
                let gen = self.credit[r].gen + 1;
                self.credit[r] = RingCredit { gen, held: 0, freed: 0 };
            }
            self.active.extend(fresh);
        }
        // The polling loop of every receiver: no division, no allocation.
        let len = self.active.len();
        let mut k = self.next_ring;
        for _ in 0..len {
            if k >= len {
                k = 0;
            }
            let r = self.active[k];
            k += 1;
            let Some(s) = self.mb.peek(r) else { continue };
            let info = self.mb.rings[r].expect("active ring has a peer");
            self.stats.received += 1;
            // Fair among peers: the next call starts with the next ring.
            self.next_ring = k;
            // Messages (not the rendezvous control frames, which keep
            // nothing) are charged to their producer's loan.
            let credit = match s.kind {
                kind::EAGER | kind::RTS => match self.take_credit(r, credit_cost(s.len)) {
                    Some(c) => Some(c),
                    None => {
                        self.mb.release(s);
                        self.reject(r, "message beyond the peer's credit");
                        return None;
                    }
                },
                _ => None,
            };
            match s.kind {
                kind::EAGER if self.mb.payload(&s).is_some() => {
                    return Some(Incoming::Eager {
                        slot: s,
                        peer: info.peer,
                        hdr: hdr_of(&s, s.len as u64),
                        credit: credit.expect("charged above"),
                    });
                }
                kind::RTS => {
                    let niov = s.u32(20) as usize;
                    let iov = self
                        .mb
                        .payload(&s)
                        .filter(|p| p.len() == niov * 16)
                        .map(|p| decode_iov(&p.to_vec()));
                    let key = s.u64(24);
                    let total = iov
                        .as_ref()
                        .and_then(|v| v.iter().try_fold(0u64, |a, x| a.checked_add(x.1)));
                    let hdr = hdr_of(&s, total.unwrap_or(0));
                    self.mb.release(s);
                    match iov {
                        Some(iov) if total.is_some() => {
                            return Some(Incoming::Rts(Box::new(ShmRts {
                                peer: info.peer,
                                pid: info.pid,
                                key,
                                hdr,
                                iov,
                                credit: credit.expect("charged above"),
                            })));
                        }
                        _ => {
                            self.reject(r, "RTS with a bad iov list");
                            return None;
                        }
                    }
                }
                kind::CTS => {
                    self.mb.release(s);
                    self.on_cts(info.peer, s.u64(0), s.u64(8));
                }
                kind::FIN => {
                    self.mb.release(s);
                    self.on_fin(info.peer, s.u64(0), s.u64(8) as i64 as i32);
                }
                kind::CTW if self.mb.payload(&s).is_some_and(|p| p.len() % 16 == 0) => {
                    let iov = decode_iov(&self.mb.payload(&s).unwrap().to_vec());
                    self.mb.release(s);
                    self.on_ctw(info.peer, s.u64(0), s.u64(8), s.u64(16), s.u64(24), &iov);
                }
                kind::WDONE => {
                    self.mb.release(s);
                    self.on_wdone(info.peer, s.u64(0), s.u64(8) as i64);
                }
                kind::DATA if self.mb.payload(&s).is_some() => {
                    self.on_data(info.peer, &s);
                    self.mb.release(s);
                }
                _ => {
                    self.mb.release(s);
                    if let Some(c) = credit {
                        self.free_credit(c);
                    }
                    self.reject(r, "bad slot");
                    // `active` changed under our index: start over next call.
                    return None;
                }
            }
        }
        None
    }

    /// A slot that breaks the rules: counted, and the sender is cut off.
    fn reject(&mut self, r: usize, why: &str) {
        self.stats.rejected += 1;
        let peer = self.mb.rings[r].map(|i| i.peer);
        crate::warn!(
            crate::ffi::FI_LOG_EP_DATA,
            "shm: {} from {:?}; dropping its ring",
            why,
            peer
        );
        if let Some(k) = self.active.iter().position(|&x| x == r) {
            self.active.swap_remove(k);
            self.next_ring = 0;
            self.banned.push(r);
        }
        // Credit its messages still hold is not given back to that ring.
        self.credit[r].gen += 1;
        if let Some(p) = peer {
            self.fail_rx_from(p, FI_EIO);
        }
    }

    fn retire_ring(&mut self, k: usize) {
        let r = self.active.swap_remove(k);
        self.credit[r].gen += 1;
        self.senders[r] = None;
        self.mb.free_ring(r);
        self.next_ring = 0;
    }

    /// Charges `cost` credit bytes to ring `r`'s producer; `None` if that
    /// would take it beyond its loan (it broke the rules).
    fn take_credit(&mut self, r: usize, cost: u64) -> Option<ShmCredit> {
        let c = &mut self.credit[r];
        if self.cfg.loan != 0 && c.held.saturating_add(cost) > self.cfg.loan {
            return None;
        }
        c.held += cost;
        Some(ShmCredit {
            ring: r,
            gen: c.gen,
            cost,
        })
    }

    /// The application took the message holding `c` (or it was matched on
    /// arrival): its producer may send that much more.
    pub fn free_credit(&mut self, c: ShmCredit) {
        let rc = &mut self.credit[c.ring];
        if rc.gen != c.gen {
            return;
        }
        rc.held -= c.cost;
        rc.freed += c.cost;
        self.mb.give_credit(c.ring, rc.freed);
    }

    /// Credit bytes held for messages of ring `r`'s producer (tests).
    #[cfg(test)]
    fn held(&self, r: usize) -> u64 {
        self.credit[r].held
    }

    /// The payload of an eager message from `poll_msg`: bytes the peer's
    /// process can write, to be copied out (never borrowed).
    pub fn payload(&self, s: &InSlot) -> SharedBytes<'_> {
        self.mb.payload(s).expect("checked by poll_msg")
    }

    pub fn release(&mut self, s: InSlot) {
        self.mb.release(s);
    }

    /// Whether `from` is the peer send `key` went to: rendezvous frames
    /// from anyone else (another local process guessing ids) are ignored.
    fn tx_from(&self, key: u64, from: SocketAddr) -> bool {
        self.tx
            .get(&key)
            .is_some_and(|t| self.peers[t.peer].as_ref().is_some_and(|p| p.addr == from))
    }

    fn on_fin(&mut self, from: SocketAddr, key: u64, status: i32) {
        if !self.tx_from(key, from) {
            return;
        }
        if let Some(t) = self.tx.remove(&key) {
            self.pushing -= t.push.is_some() as usize;
            self.events.push_back(if status == 0 {
                ShmEvent::SendDone { id: key }
            } else {
                // FIN carries a negative errno; completions want it positive.
                ShmEvent::SendFailed {
                    id: key,
                    err: status.saturating_abs(),
                }
            });
        }
    }

    fn on_cts(&mut self, from: SocketAddr, key: u64, rid: u64) {
        if !self.tx_from(key, from) {
            return;
        }
        if let Some(t) = self.tx.get_mut(&key) {
            if t.push.is_none() {
                t.push = Some((rid, 0));
                self.pushing += 1;
            }
        }
    }

    fn on_data(&mut self, from: SocketAddr, s: &InSlot) {
        let (rid, off) = (s.u64(0), s.u64(8) as usize);
        let Some(data) = self.mb.payload(s) else { return };
        let Some(rx) = self.rx.get_mut(&rid).filter(|rx| rx.from == from) else {
            return;
        };
        // Writes past the buffer are cut off by the sink (truncation).
        if off == rx.got {
            let room = rx.sink.capacity().saturating_sub(off);
            let mut bounce = vec![0u8; data.len().min(room)];
            data.copy_to(0, &mut bounce);
            rx.sink.write_at(off, &bounce);
            rx.got += data.len();
        }
        if rx.got >= rx.len {
            let rx = self.rx.remove(&rid).unwrap();
            self.events.push_back(ShmEvent::RecvDone {
                rid,
                written: rx.len.min(rx.sink.capacity()),
            });
            self.control(rx.from, kind::FIN, rx.key, 0);
        }
    }

    /// A matched RTS: pull its data into `local` (the posted buffers).
    pub fn pull(&mut self, rts: &ShmRts, local: &[(usize, usize)], sink: Box<dyn RecvSink>) -> Pull {
        let local: Vec<Range> = local.iter().map(|&(a, l)| (a as u64, l as u64)).collect();
        let cap = local.iter().map(|l| l.1 as usize).sum::<usize>();
        if cap == 0 || rts.hdr.len == 0 {
            self.control(rts.peer, kind::FIN, rts.key, 0);
            return Pull::Done(0);
        }
        if self.cfg.cma && !self.no_cma.contains_key(&rts.peer) {
            let total = cap.min(rts.hdr.len as usize);
            if total >= SPLIT_MIN {
                if let Some(p) = self.pull_split(rts, &local, total) {
                    return p;
                }
            }
            match mailbox::cma_read(rts.pid, &local, &rts.iov) {
                Ok(n) => {
                    self.stats.pulled += 1;
                    self.control(rts.peer, kind::FIN, rts.key, 0);
                    return Pull::Done(n);
                }
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Pull::Failed(FI_EHOSTUNREACH),
                Err(e) if !cma_refused(&e) => {
                    // Bad addresses in the RTS (the sender freed its buffer,
                    // or lied): this message fails, at both ends.
                    crate::warn!(crate::ffi::FI_LOG_EP_DATA, "shm: reading from {}: {}", rts.peer, e);
                    self.control(rts.peer, kind::FIN, rts.key, (-(FI_EIO as i64)) as u64);
                    return Pull::Failed(FI_EIO);
                }
                Err(e) => {
                    crate::info!(
                        crate::ffi::FI_LOG_EP_DATA,
                        "shm: cannot read the memory of {} ({}); it pushes instead",
                        rts.peer,
                        e
                    );
                    self.no_cma.insert(rts.peer, ());
                }
            }
        }
        let rid = self.next_id;
        self.next_id += 1;
        self.rx.insert(
            rid,
            RxPush {
                sink,
                len: rts.hdr.len as usize,
                got: 0,
                from: rts.peer,
                key: rts.key,
            },
        );
        self.control(rts.peer, kind::CTS, rts.key, rid);
        Pull::Pending(rid)
    }

    /// Two cores copy a large message: we ask the sender to write the
    /// second half into our buffers (CTW) and pull the first half
    /// meanwhile. `None`: not possible here (too many buffer pieces for
    /// one slot); pull it all.
    fn pull_split(&mut self, rts: &ShmRts, local: &[Range], total: usize) -> Option<Pull> {
        let at = (total / 2) & !4095;
        let theirs = sub_ranges(local, at as u64, (total - at) as u64);
        if theirs.len() * 16 > self.eager_max() {
            return None;
        }
        let rid = self.next_id;
        self.next_id += 1;
        // The sender may write into our buffers only while this grant
        // stands (see mailbox.rs): cancel and close take it back.
        let ring = rts.credit.ring;
        let grant = self.mb.grant(ring, rid)?;
        self.control_iov(rts.peer, kind::CTW, rts.key, rid, at as u64, grant as u64, &theirs);
        let (mine, head) = (sub_ranges(local, 0, at as u64), sub_ranges(&rts.iov, 0, at as u64));
        match mailbox::cma_read(rts.pid, &mine, &head) {
            Ok(_) => {
                self.stats.pulled += 1;
                self.split.insert(
                    rid,
                    RxSplit {
                        key: rts.key,
                        from: rts.peer,
                        pid: rts.pid,
                        ring,
                        grant,
                        at,
                        total,
                        local: local.to_vec(),
                        remote: rts.iov.clone(),
                    },
                );
                Some(Pull::Pending(rid))
            }
            // The sender is gone: it writes nothing any more.
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {
                self.fence_grant(ring, grant, rid);
                Some(Pull::Failed(FI_EHOSTUNREACH))
            }
            // Not ours to read (then the caller pushes), or bad addresses
            // (then the whole pull fails the same way): the sender's write
            // is revoked (or waited for) before the buffers change hands,
            // its WDONE finds no split.
            Err(_) => {
                self.fence_grant(ring, grant, rid);
                None
            }
        }
    }

    /// Takes back the grant of receive `rid` and, if its sender is writing
    /// right now, waits for the write to end (one process_vm_writev) or
    /// for the sender to die. Afterwards nothing of that sender lands in
    /// the receive's buffers any more.
    fn fence_grant(&mut self, ring: usize, grant: usize, rid: u64) {
        let mut revoked_first = true;
        while !self.mb.revoke(ring, grant, rid) {
            revoked_first = false;
            if self.senders[ring].as_ref().is_none_or(|l| !l.alive()) {
                break;
            }
            std::thread::yield_now();
        }
        let _ = revoked_first;
    }

    /// Cancels a receive that is being pulled or written (`Pull::Pending`):
    /// the sender's write is revoked or waited for, the sender's send
    /// completes (its message was matched). Whether `rid` was such a
    /// receive.
    pub fn cancel_rx(&mut self, rid: u64) -> bool {
        if let Some(sp) = self.split.remove(&rid) {
            self.fence_grant(sp.ring, sp.grant, rid);
            self.stats.revoked += 1;
            self.control(sp.from, kind::FIN, sp.key, 0);
            return true;
        }
        if let Some(rx) = self.rx.remove(&rid) {
            self.control(rx.from, kind::FIN, rx.key, 0);
            return true;
        }
        false
    }

    /// Revokes every write a sender may still make into our receives
    /// (closing): see `fence_grant`.
    fn fence_all(&mut self) {
        let splits: Vec<(u64, usize, usize)> = self.split.iter().map(|(&rid, sp)| (rid, sp.ring, sp.grant)).collect();
        for (rid, ring, grant) in splits {
            self.fence_grant(ring, grant, rid);
            self.stats.revoked += 1;
        }
        self.split.clear();
    }

    /// The sender's half of a split receive: write it where the receiver
    /// said, then tell it.
    /// `grant` is the receiver's grant word for this write: taken before
    /// writing, released after, and if the receiver revoked it (the
    /// receive was cancelled, its endpoint closed) nothing is written.
    fn on_ctw(&mut self, from: SocketAddr, key: u64, rid: u64, at: u64, grant: u64, theirs: &[Range]) {
        if !self.tx_from(key, from) {
            return;
        }
        let Some(t) = self.tx.get(&key) else { return };
        let Some(p) = self.peers[t.peer].as_ref() else { return };
        let (to, pid) = (p.addr, p.out.owner_pid());
        let n = ranges_len(theirs);
        let g = usize::try_from(grant).unwrap_or(usize::MAX);
        let status = match at.checked_add(n) {
            Some(end) if end <= t.src.len() as u64 => {
                if !p.out.begin_write(g, rid) {
                    -(FI_ECANCELED as i64)
                } else {
                    let r = mailbox::cma_write(pid, &sub_ranges(&t.addrs, at, n), theirs);
                    p.out.end_write(g, rid);
                    match r {
                        Ok(w) if w as u64 == n => {
                            self.stats.pushed_cma += 1;
                            0
                        }
                        Ok(_) => -(FI_EIO as i64),
                        Err(e) => -(e.raw_os_error().unwrap_or(libc::EIO) as i64),
                    }
                }
            }
            _ => -(FI_EIO as i64),
        };
        self.control(to, kind::WDONE, rid, status as u64);
    }

    /// The sender wrote its half (or could not: then we pull it too).
    fn on_wdone(&mut self, from: SocketAddr, rid: u64, status: i64) {
        if self.split.get(&rid).is_none_or(|sp| sp.from != from) {
            return;
        }
        let Some(sp) = self.split.remove(&rid) else { return };
        // Normally DONE already (or never taken): this only waits on a
        // sender that says WDONE while still writing.
        self.fence_grant(sp.ring, sp.grant, rid);
        let ok = status == 0 || {
            let n = (sp.total - sp.at) as u64;
            let (mine, tail) = (
                sub_ranges(&sp.local, sp.at as u64, n),
                sub_ranges(&sp.remote, sp.at as u64, n),
            );
            mailbox::cma_read(sp.pid, &mine, &tail).is_ok()
        };
        self.events.push_back(if ok {
            ShmEvent::RecvDone { rid, written: sp.total }
        } else {
            ShmEvent::RecvFailed {
                rid,
                err: FI_EHOSTUNREACH,
            }
        });
        self.control(sp.from, kind::FIN, sp.key, 0);
    }

    /// An RTS nobody will read (FI_DISCARD, cancelled): release the sender.
    pub fn discard(&mut self, rts: &ShmRts) {
        self.control(rts.peer, kind::FIN, rts.key, 0);
    }

    pub fn poll_event(&mut self) -> Option<ShmEvent> {
        self.events.pop_front()
    }

    /// Moves backlogged frames and pushed data into rings that have room,
    /// and checks on peers that have operations in flight.
    pub fn pump(&mut self, now: u64) {
        if self.queued > 0 {
            for p in self.peers.iter_mut().flatten() {
                while let Some(fr) = p.backlog.front() {
                    if p.out.credit() < fr.cost {
                        break;
                    }
                    let pos = p.out.tail();
                    let Some(mut s) = p.out.slot() else { break };
                    s.fields(fr.kind, fr.payload.len(), &fr.f);
                    s.payload(fr.payload.len()).copy_from_slice(&fr.payload);
                    if s.publish() {
                        self.bells.push(p.addr);
                    }
                    p.out.charge(fr.cost);
                    p.backlog_cost -= fr.cost;
                    let done = fr.done;
                    p.backlog.pop_front();
                    self.queued -= 1;
                    if let Some(d) = done {
                        self.queued_sends -= 1;
                        if d.delivery {
                            p.delivery.push_back((pos, d.id));
                            self.delivering += 1;
                        } else {
                            self.events.push_back(ShmEvent::SendDone { id: d.id });
                        }
                    }
                }
            }
        }
        if self.delivering > 0 {
            for p in self.peers.iter_mut().flatten() {
                while let Some(&(pos, id)) = p.delivery.front() {
                    if !p.out.consumed(pos) {
                        break;
                    }
                    p.delivery.pop_front();
                    self.delivering -= 1;
                    self.events.push_back(ShmEvent::SendDone { id });
                }
            }
        }
        if self.pushing > 0 {
            let pushing: Vec<u64> = self
                .tx
                .iter()
                .filter(|(_, t)| t.push.is_some())
                .map(|(&k, _)| k)
                .collect();
            for key in pushing {
                self.push_data(key);
            }
        }
        if now >= self.last_check + CHECK_EVERY_NS {
            self.last_check = now;
            self.check_peers();
        }
    }

    fn push_data(&mut self, key: u64) {
        let t = self.tx.get_mut(&key).unwrap();
        let Some(p) = self.peers[t.peer].as_mut() else { return };
        let (rid, mut off) = t.push.unwrap();
        let len = t.src.len();
        let chunk = p.out.payload_max();
        while off < len && p.backlog.is_empty() {
            let Some(mut s) = p.out.slot() else { break };
            let n = chunk.min(len - off);
            let mut f = [0u8; 32];
            put(&mut f, 0, rid);
            put(&mut f, 8, off as u64);
            s.fields(kind::DATA, n, &f);
            t.src.read_at(off, s.payload(n));
            if s.publish() {
                self.bells.push(p.addr);
            }
            off += n;
            self.stats.pushed += 1;
        }
        t.push = Some((rid, off));
    }

    /// Peers that died or closed: their sends in flight fail, their routes
    /// are forgotten (a restarted peer gets a fresh ring), rings they
    /// claimed in our mailbox are freed once drained.
    fn check_peers(&mut self) {
        for ix in 0..self.peers.len() {
            let gone = self.peers[ix].as_ref().is_some_and(|p| p.out.owner_gone());
            if !gone {
                continue;
            }
            self.forget(ix);
        }
        self.banned.retain(|&r| {
            let dead = self.senders[r].as_ref().is_none_or(|l| !l.alive());
            if dead || self.mb.ring_closed(r) {
                self.senders[r] = None;
                self.mb.free_ring(r);
                return false;
            }
            true
        });
        // Rings whose producer closed them or died, once drained.
        let mut k = 0;
        while k < self.active.len() {
            let r = self.active[k];
            let info = self.mb.rings[r].expect("active ring has a peer");
            let drained = self.mb.peek(r).is_none();
            let dead = self.senders[r].as_ref().is_some_and(|l| !l.alive());
            if drained && (dead || self.mb.ring_closed(r)) {
                self.retire_ring(k);
                if dead {
                    self.fail_rx_from(info.peer, FI_EHOSTUNREACH);
                }
            } else {
                k += 1;
            }
        }
    }

    /// Drops our ring in a peer's mailbox that went away: its sends in
    /// flight fail; the next message to that address decides afresh.
    fn forget(&mut self, ix: usize) {
        let Some(p) = self.peers[ix].take() else { return };
        crate::warn!(crate::ffi::FI_LOG_EP_DATA, "shm peer {} went away", p.addr);
        self.routes.remove(&p.addr);
        self.queued -= p.backlog.len();
        // Sends still waiting for its ring fail; those it took out of its
        // ring before it went are complete.
        for fr in &p.backlog {
            if let Some(d) = fr.done {
                self.queued_sends -= 1;
                self.events.push_back(ShmEvent::SendFailed {
                    id: d.id,
                    err: FI_EHOSTUNREACH,
                });
            }
        }
        for &(pos, id) in &p.delivery {
            self.delivering -= 1;
            self.events.push_back(if p.out.consumed(pos) {
                ShmEvent::SendDone { id }
            } else {
                ShmEvent::SendFailed {
                    id,
                    err: FI_EHOSTUNREACH,
                }
            });
        }
        let dead: Vec<u64> = self.tx.iter().filter(|(_, t)| t.peer == ix).map(|(&k, _)| k).collect();
        for id in dead {
            let t = self.tx.remove(&id).unwrap();
            self.pushing -= t.push.is_some() as usize;
            self.events.push_back(ShmEvent::SendFailed {
                id,
                err: FI_EHOSTUNREACH,
            });
        }
    }

    fn fail_rx_from(&mut self, peer: SocketAddr, err: i32) {
        let events = &mut self.events;
        let mut fail = |rid: u64, from: SocketAddr| {
            let dead = from == peer;
            if dead {
                events.push_back(ShmEvent::RecvFailed { rid, err });
            }
            !dead
        };
        self.split.retain(|&rid, r| fail(rid, r.from));
        self.rx.retain(|&rid, r| fail(rid, r.from));
    }

    /// Anything in flight that needs `pump` to run.
    pub fn busy(&self) -> bool {
        !self.tx.is_empty()
            || !self.rx.is_empty()
            || !self.split.is_empty()
            || self.backlogged() > 0
            || self.delivering > 0
    }

    /// When `pump` must run even if nothing arrives: soon while frames wait
    /// for ring space (a consumer freeing slots rings no bell), at the next
    /// liveness check while operations wait on peers.
    pub fn next_deadline(&self, now: u64) -> Option<u64> {
        if self.queued > 0 || self.pushing > 0 || self.delivering > 0 || !self.bells.is_empty() {
            Some(now + 50_000)
        } else if self.busy() {
            Some(self.last_check + CHECK_EVERY_NS)
        } else {
            None
        }
    }

    /// About to sleep: false if a message is already waiting.
    pub fn arm(&mut self) -> bool {
        self.mb.arm(&self.active)
    }

    pub fn disarm(&self) {
        self.mb.disarm();
    }
}

impl Drop for ShmWire {
    /// No sender may write into our receives' buffers once we are gone:
    /// the application may free them as soon as the endpoint is closed.
    fn drop(&mut self) {
        self.fence_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    /// Two endpoints of this process, A sending to B. Each test uses its
    /// own ports so tests can run in parallel.
    fn pair(port: u16, geo: Geometry, cma: bool) -> (ShmWire, ShmWire, usize) {
        pair_with(port, geo, cma, 0)
    }

    /// `pair` whose mailboxes lend `loan` credit bytes per ring.
    fn pair_with(port: u16, geo: Geometry, cma: bool, loan: u64) -> (ShmWire, ShmWire, usize) {
        let a_addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 99)), port);
        let b_addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 99)), port + 1);
        let cfg = || ShmConfig {
            geo,
            cma,
            local_ips: vec![],
            loan,
        };
        let a = ShmWire::new(a_addr, cfg(), 1).unwrap();
        let b = ShmWire::new(b_addr, cfg(), 2).unwrap();
        let mut a = a;
        let ix = a.route(b_addr).expect("loopback peer with a mailbox");
        (a, b, ix)
    }

    fn hdr(len: usize, tag: u64) -> MsgHdr {
        MsgHdr {
            tag,
            data: 7,
            len: len as u64,
            flags: MsgHdr::TAGGED,
        }
    }

    /// Runs both sides until `b` yields a message.
    fn next_msg(a: &mut ShmWire, b: &mut ShmWire) -> Incoming {
        for _ in 0..1000 {
            a.pump(0);
            if let Some(m) = b.poll_msg() {
                return m;
            }
        }
        panic!("no message");
    }

    #[test]
    fn eager_messages_in_order_through_a_full_ring() {
        let (mut a, mut b, ix) = pair(41000, Geometry::new(4, 4, 256), true);
        // Ten messages into a ring of four: six wait in the backlog.
        for i in 0..10u64 {
            let data = vec![i as u8; 100 + i as usize];
            a.send_eager(ix, &hdr(data.len(), i), &data, false, false);
        }
        assert_eq!(a.backlogged(), 6);
        for i in 0..10u64 {
            match next_msg(&mut a, &mut b) {
                Incoming::Eager { slot, peer, hdr, .. } => {
                    assert_eq!(peer, a.me);
                    assert_eq!(hdr.tag, i);
                    assert_eq!(b.payload(&slot).to_vec(), vec![i as u8; 100 + i as usize]);
                    b.release(slot);
                }
                Incoming::Rts(_) => panic!("eager expected"),
            }
        }
        assert_eq!(a.backlogged(), 0);
    }

    fn rendezvous(port: u16, cma: bool) {
        let (mut a, mut b, ix) = pair(port, Geometry::new(4, 4, 512), cma);
        let src: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
        let remote = [(src.as_ptr() as u64, src.len() as u64)];
        let id = a
            .send_rts(ix, &hdr(src.len(), 5), Box::new(src.clone()), &remote)
            .unwrap();
        let Incoming::Rts(rts) = next_msg(&mut a, &mut b) else {
            panic!("RTS expected")
        };
        assert_eq!((rts.hdr.len, rts.key, rts.peer), (100_000, id, a.me));
        let mut dst = vec![0u8; 100_000];
        let local = [(dst.as_mut_ptr() as usize, dst.len())];
        // The sink writes where `local` points: the receiver's buffer.
        struct Raw(usize, usize);
        impl RecvSink for Raw {
            fn capacity(&self) -> usize {
                self.1
            }
            fn write_at(&mut self, off: usize, src: &[u8]) {
                let n = src.len().min(self.1.saturating_sub(off));
                // SAFETY (test): the buffer outlives the transfer, bounds checked above.
                unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), (self.0 + off) as *mut u8, n) };
            }
        }
        let pull = b.pull(&rts, &local, Box::new(Raw(local[0].0, local[0].1)));
        let mut recv_done = false;
        match pull {
            Pull::Done(n) => {
                assert!(cma);
                assert_eq!(n, 100_000);
                recv_done = true;
            }
            Pull::Pending(_) => {}
            Pull::Failed(e) => panic!("pull failed: {e}"),
        }
        let mut send_done = false;
        for _ in 0..10_000 {
            a.pump(0);
            while a.poll_msg().is_some() {}
            b.pump(0);
            while b.poll_msg().is_some() {}
            while let Some(ev) = b.poll_event() {
                assert!(matches!(ev, ShmEvent::RecvDone { written: 100_000, .. }), "{ev:?}");
                recv_done = true;
            }
            while let Some(ev) = a.poll_event() {
                assert_eq!(ev, ShmEvent::SendDone { id });
                send_done = true;
            }
            if send_done && recv_done {
                break;
            }
        }
        assert!(send_done && recv_done);
        assert_eq!(dst, src);
        assert_eq!((b.stats.pulled > 0, a.stats.pushed > 0), (cma, !cma));
    }

    #[test]
    fn rendezvous_by_cross_memory_attach() {
        rendezvous(41010, true);
    }

    #[test]
    fn rendezvous_pushed_through_the_mailbox() {
        rendezvous(41020, false);
    }

    #[test]
    fn garbage_slots_are_rejected_and_cut_off_their_sender() {
        let geo = Geometry::new(4, 8, 128);
        let (mut a, mut b, ix) = pair(41030, geo, true);
        let hostile: [(u8, usize, [u8; 32]); 4] = [
            (99, 0, [0; 32]),               // unknown kind
            (kind::DATA, 1 << 20, [0; 32]), // data longer than a slot
            (kind::RTS, 16, {
                let mut f = hdr_fields(&hdr(1000, 0));
                f[20] = 5; // five iovs announced, one sent
                f
            }),
            (kind::EAGER, 1 << 20, hdr_fields(&hdr(1 << 20, 0))), // longer than a slot
        ];
        for (i, (k, len, f)) in hostile.into_iter().enumerate() {
            if i > 0 {
                // The last ring was banned: claim another.
                a.peers[ix] = None;
                a.routes.clear();
                assert_eq!(a.route(b.me), Some(ix));
            }
            let p = a.peers[ix].as_mut().unwrap();
            let mut s = p.out.slot().unwrap();
            s.fields(k, 0, &f);
            s.set_len(len);
            s.publish();
            assert!(b.poll_msg().is_none());
        }
        assert_eq!(b.stats.rejected, 4);
        assert_eq!(b.banned.len(), 4);
        // Banned rings are not handed out again while their producer may
        // still write them.
        a.routes.clear();
        assert_eq!(a.route(b.me), None, "all four rings banned");
        a.peers[ix] = None;
        // Closed by their producer, banned rings return to the pool.
        b.pump(u64::MAX / 2);
        assert!(b.banned.is_empty());
        a.routes.clear();
        let ix = a.route(b.me).expect("a ring again");
        // A well-behaved message still gets through.
        a.send_eager(ix, &hdr(3, 1), &vec![1u8, 2, 3], false, false);
        let Incoming::Eager { slot, .. } = next_msg(&mut a, &mut b) else {
            panic!()
        };
        assert_eq!(b.payload(&slot).to_vec(), [1, 2, 3]);
    }

    #[test]
    fn restarted_peer_gets_a_fresh_ring_at_once() {
        let geo = Geometry::new(2, 4, 128);
        let (mut a, b, ix) = pair(41050, geo, true);
        let b_addr = b.me;
        drop(b);
        let mut b2 = ShmWire::new(
            b_addr,
            ShmConfig {
                geo,
                cma: true,
                local_ips: vec![],
                loan: 0,
            },
            3,
        )
        .unwrap();
        // The very next send notices the old mailbox closed.
        let ix2 = a.route(b_addr).expect("the new mailbox");
        a.send_eager(ix2, &hdr(2, 9), &vec![4u8, 2], false, false);
        let Incoming::Eager { slot, hdr, .. } = next_msg(&mut a, &mut b2) else {
            panic!()
        };
        assert_eq!((hdr.tag, b2.payload(&slot).to_vec()), (9, vec![4u8, 2]));
        let _ = ix;
    }

    #[test]
    fn rts_with_bad_addresses_fails_both_ends() {
        let (mut a, mut b, ix) = pair(41060, Geometry::new(2, 4, 256), true);
        // An RTS pointing at memory that is not mapped.
        let remote = [(8u64, 4096u64)];
        let id = a
            .send_rts(ix, &hdr(4096, 1), Box::new(vec![0u8; 4096]), &remote)
            .unwrap();
        let Incoming::Rts(rts) = next_msg(&mut a, &mut b) else {
            panic!()
        };
        let mut dst = vec![0u8; 4096];
        let local = [(dst.as_mut_ptr() as usize, dst.len())];
        let sink: Box<dyn RecvSink> = Box::new(Vec::<u8>::new());
        assert!(matches!(b.pull(&rts, &local, sink), Pull::Failed(e) if e == FI_EIO));
        for _ in 0..100 {
            a.pump(0);
            while a.poll_msg().is_some() {}
        }
        assert_eq!(a.poll_event(), Some(ShmEvent::SendFailed { id, err: FI_EIO }));
    }

    #[test]
    fn rendezvous_frames_from_a_third_process_are_ignored() {
        let geo = Geometry::new(4, 4, 256);
        let (mut a, mut b, ix) = pair(41070, geo, true);
        let src = vec![7u8; 100_000];
        let id = a
            .send_rts(
                ix,
                &hdr(src.len(), 1),
                Box::new(src.clone()),
                &[(src.as_ptr() as u64, src.len() as u64)],
            )
            .unwrap();
        let Incoming::Rts(_) = next_msg(&mut a, &mut b) else {
            panic!()
        };
        // A third local process forges FIN, CTS and CTW for that send.
        let c_addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 99)), 41072);
        let cfg = ShmConfig {
            geo,
            cma: true,
            local_ips: vec![],
            loan: 0,
        };
        let mut c = ShmWire::new(c_addr, cfg, 4).unwrap();
        c.control(a.me, kind::FIN, id, 0);
        c.control(a.me, kind::CTS, id, 1);
        c.control_iov(a.me, kind::CTW, id, 1, 0, 0, &[(8, 16)]);
        for _ in 0..10 {
            a.pump(0);
            while a.poll_msg().is_some() {}
        }
        assert_eq!(a.poll_event(), None, "a forged FIN completed the send");
        assert_eq!((a.pushing, a.stats.pushed_cma), (0, 0));
        assert!(a.tx.contains_key(&id));
    }

    /// All events `w` has now, after a pump.
    fn events(w: &mut ShmWire) -> Vec<ShmEvent> {
        w.pump(0);
        std::iter::from_fn(|| w.poll_event()).collect()
    }

    #[test]
    fn sends_that_wait_for_ring_space_complete_only_once_in_the_ring() {
        let (mut a, mut b, ix) = pair(41100, Geometry::new(2, 4, 256), true);
        let mut pending = Vec::new();
        for i in 0..10u64 {
            match a.send_eager(ix, &hdr(8, i), &vec![i as u8; 8], false, false) {
                Eager::Done => assert!(i < 4, "send {i} done with a full ring"),
                Eager::Pending(id) => pending.push(id),
                Eager::NoCredit => panic!("no credit limit here"),
            }
        }
        assert_eq!(pending.len(), 6);
        assert!(events(&mut a).is_empty(), "nothing left the backlog yet");
        // The receiver takes two: exactly the next two sends complete.
        for _ in 0..2 {
            let Incoming::Eager { slot, .. } = b.poll_msg().unwrap() else {
                panic!()
            };
            b.release(slot);
        }
        let done: Vec<_> = pending[..2].iter().map(|&id| ShmEvent::SendDone { id }).collect();
        assert_eq!(events(&mut a), done);
        // Then all of them, in order, each once.
        let mut tags = vec![];
        let mut completed = done;
        while let Some(m) = b.poll_msg() {
            let Incoming::Eager { slot, hdr, .. } = m else { panic!() };
            tags.push(hdr.tag);
            b.release(slot);
            completed.extend(events(&mut a));
        }
        let all: Vec<_> = pending.iter().map(|&id| ShmEvent::SendDone { id }).collect();
        assert_eq!((tags, completed), ((2..10).collect::<Vec<u64>>(), all));
    }

    #[test]
    fn delivery_complete_waits_until_the_receiver_took_the_message() {
        let (mut a, mut b, ix) = pair(41110, Geometry::new(2, 4, 256), true);
        let Eager::Pending(id) = a.send_eager(ix, &hdr(3, 1), &vec![1u8, 2, 3], false, true) else {
            panic!("delivery complete cannot be complete at once")
        };
        assert!(events(&mut a).is_empty());
        let Incoming::Eager { slot, .. } = b.poll_msg().unwrap() else {
            panic!()
        };
        assert!(events(&mut a).is_empty(), "published, not yet taken");
        b.release(slot);
        assert_eq!(events(&mut a), vec![ShmEvent::SendDone { id }]);
    }

    #[test]
    fn credit_bounds_what_the_receiver_keeps_and_comes_back() {
        let cost = credit_cost(200);
        let loan = 8 * cost;
        let (mut a, mut b, ix) = pair_with(41120, Geometry::new(2, 64, 256), true, loan);
        // Eager until only the RTS reserve (a quarter of the loan) is left.
        let mut eager = 0;
        while a.send_eager(ix, &hdr(200, eager), &vec![7u8; 200], false, false) == Eager::Done {
            eager += 1;
        }
        assert_eq!(eager, 6, "8 credits, a quarter kept back for RTS");
        assert_eq!(a.stats.no_credit, 1);
        // The receiver keeps them all (unexpected): it holds what it lent.
        let mut kept = Vec::new();
        while let Some(m) = b.poll_msg() {
            kept.push(m.credit());
            if let Incoming::Eager { slot, .. } = m {
                b.release(slot);
            }
        }
        assert_eq!((kept.len(), b.held(0)), (6, 6 * cost));
        // An RTS still goes (the reserve), and an inject as long as credit
        // covers it; the next inject waits for credit.
        let src = vec![1u8; 200];
        a.send_rts(ix, &hdr(200, 99), Box::new(src.clone()), &[(src.as_ptr() as u64, 200)])
            .unwrap();
        assert_eq!(
            a.send_eager(ix, &hdr(200, 100), &vec![2u8; 200], true, false),
            Eager::Done
        );
        let inj = a.send_eager(ix, &hdr(200, 101), &vec![3u8; 200], true, false);
        let Eager::Pending(inj) = inj else { panic!("{inj:?}") };
        assert!(matches!(b.poll_msg(), Some(Incoming::Rts(_))));
        let Some(Incoming::Eager { slot, .. }) = b.poll_msg() else {
            panic!()
        };
        b.release(slot);
        assert!(b.poll_msg().is_none(), "the second inject waits for credit");
        assert!(b.held(0) <= loan);
        // The application takes a message: its credit goes back, the
        // inject goes out and completes.
        b.free_credit(kept[0]);
        assert_eq!(events(&mut a), vec![ShmEvent::SendDone { id: inj }]);
        let Some(Incoming::Eager { hdr, .. }) = b.poll_msg() else {
            panic!()
        };
        assert_eq!(hdr.tag, 101);
        assert!(b.held(0) <= loan);
    }

    #[test]
    fn a_producer_beyond_its_loan_is_cut_off() {
        let loan = 2 * credit_cost(100);
        let (mut a, mut b, ix) = pair_with(41130, Geometry::new(2, 8, 256), true, loan);
        // A producer that ignores the loan: three slots published directly.
        for i in 0..3 {
            let p = a.peers[ix].as_mut().unwrap();
            let mut s = p.out.slot().unwrap();
            s.fields(kind::EAGER, 100, &hdr_fields(&hdr(100, i)));
            s.publish();
        }
        let mut got = 0;
        while let Some(Incoming::Eager { slot, .. }) = b.poll_msg() {
            b.release(slot);
            got += 1;
        }
        assert_eq!((got, b.stats.rejected), (2, 1));
        assert!(b.held(0) <= loan);
    }

    /// A large receive split with its sender (CTW), cancelled (or its
    /// endpoint closed) before the sender got to its write: the sender
    /// writes nothing, and its send still completes.
    fn revoked_write(port: u16, close: bool) {
        let (mut a, mut b, ix) = pair(port, Geometry::new(4, 4, 512), true);
        let src = vec![0xabu8; 100_000];
        let id = a
            .send_rts(
                ix,
                &hdr(src.len(), 5),
                Box::new(src.clone()),
                &[(src.as_ptr() as u64, 100_000)],
            )
            .unwrap();
        let Incoming::Rts(rts) = next_msg(&mut a, &mut b) else {
            panic!()
        };
        let mut dst = vec![0u8; 100_000];
        let local = [(dst.as_mut_ptr() as usize, dst.len())];
        let sink: Box<dyn RecvSink> = Box::new(Vec::<u8>::new());
        let Pull::Pending(rid) = b.pull(&rts, &local, sink) else {
            panic!("a split pull")
        };
        let at = dst.iter().position(|&x| x != 0xab).unwrap();
        assert!(at > 0 && at < 100_000, "the first part was pulled");
        let mut b = Some(b);
        if close {
            b = None;
        } else {
            let b = b.as_mut().unwrap();
            assert!(b.cancel_rx(rid));
            assert_eq!(b.stats.revoked, 1);
        }
        // Only now does the sender see the CTW (and the FIN, if cancelled).
        for _ in 0..10 {
            a.pump(0);
            while a.poll_msg().is_some() {}
        }
        assert!(
            dst[at..].iter().all(|&x| x == 0),
            "the sender wrote after the revocation"
        );
        assert_eq!(a.stats.pushed_cma, 0);
        if close {
            // The receiver is gone: the send fails once that is noticed.
            a.forget(ix);
            assert_eq!(
                a.poll_event(),
                Some(ShmEvent::SendFailed {
                    id,
                    err: FI_EHOSTUNREACH
                })
            );
        } else {
            assert_eq!(a.poll_event(), Some(ShmEvent::SendDone { id }));
            let b = b.as_mut().unwrap();
            while b.poll_msg().is_some() {}
            assert_eq!(b.poll_event(), None, "the refused write's WDONE completes nothing");
        }
    }

    #[test]
    fn cancel_revokes_the_senders_write() {
        revoked_write(41140, false);
    }

    #[test]
    fn close_revokes_the_senders_write() {
        revoked_write(41150, true);
    }

    #[test]
    fn mailbox_is_private_to_its_user() {
        let (_a, b, _) = pair(41040, Geometry::new(1, 2, 64), true);
        let path = b.mb.path().to_string();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            // Only root can try as another user. CI runs as root (it also
            // needs network namespaces): there this cannot be skipped.
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "mailbox_is_private_to_its_user needs root to try as user nobody"
            );
            eprintln!("SKIPPED: mailbox_is_private_to_its_user: not root, only the 0600 mode was checked");
            return;
        }
        // Another user (nobody) cannot open it.
        let o = std::process::Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "dd",
                "count=1",
                "status=none",
            ])
            .arg(format!("if={path}"))
            .arg("of=/dev/null")
            .output()
            .expect("setpriv (util-linux) runs");
        assert!(!o.status.success(), "user nobody read {path}");
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("Permission denied"),
            "{o:?}"
        );
    }
}
