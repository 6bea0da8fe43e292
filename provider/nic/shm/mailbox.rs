//! The shm wire's memory: mailboxes in shared mappings, and typed views of
//! their rings and slots. The mapping itself, and every access to its
//! bytes, is `mapping.rs`'s; reading and writing another process's memory
//! is `cma.rs`'s. This file is the layout, the file's life and the
//! consumer's side (`Mailbox`); the producer's (`Outbox`) is `outbox.rs`.
//!
//! An endpoint owns one mailbox, a file in `/dev/shm` named after its user
//! and its address, mode 0600 (other users cannot open it). It holds a
//! header page and `nrings` rings; a local peer that wants to send claims a
//! free ring, initialises it and from then on is its only producer, the
//! owner its only consumer.
//!
//! ```text
//! header  0 magic u64  8 version u32  12 nrings u32  16 depth u32
//!         20 slot_size u32  24 owner_pid u32  28 state u32 (OPEN/CLOSED)
//!         32 claims u64 (bumped by every claim)  40 loan u64 (credit
//!         bytes per ring)  48 span u32  52 cache u32 (the owner's
//!         last-level cache, `cache.rs`; 0 not known)  56 copy_max u32
//!         (the longest message the owner wants copied through its
//!         rings, `choice.rs`; 0 until it says)  64 sleeping u32
//!         68 fenceless u32 (the owner arms with a global membarrier,
//!         see "Doorbells" below)  72 pid_ns u64 (the owner's pid
//!         namespace, `pid_ns`; 0 not known)
//!         128 owner[nrings] u64 (0 = free, else claimant pid)
//! ring    0 state u32 (FREE/ACTIVE/CLOSED)  4 sender_pid u32
//!         8 sender address (family u16, port u16, ip 16 B)  28 used u32
//!         32 freed u64 (credit bytes the consumer gave back, cumulative)
//!         40 head u64 (positions the consumer handed back)
//!         64 grants[8] u64 (write permissions, see below)
//!         128 slots[depth], slot_size bytes each, then span - 1 slots
//!         of overflow
//! slot    0 seq u64  8 kind u8  12 len u32  16 32 bytes of kind fields
//!         48 payload (len bytes)
//! ```
//!
//! Slots are a bounded SPSC queue: the slot for position `p` (slot
//! `p % depth`) is published when its `seq` is `p + 1`. The consumer hands
//! slots back by raising the ring's `head` to the position after them, so
//! the slot of `p` is free for the producer once `head + depth > p`. The
//! producer keeps the last `head` it read and reads the word again only
//! when that does not show the next slot free: once a lap, not once a
//! message. Neither side reads a line the other just wrote except the
//! slot being passed: a producer that read the slot's own word (as a
//! `seq == p` "free" mark would have it) would wait for that line from
//! the consumer's core before writing it, and a consumer that wrote the
//! mark would take the line back; each is a transfer between cores on
//! every message. On the first lap of a claimed ring every slot is free
//! by construction (zeros never read as published), so claiming touches
//! no slot pages.
//!
//! Spanning messages: a message longer than a slot's payload takes the
//! next `k = span_of(len)` positions at once (at most `span`): the
//! producer checks all `k` slots free, writes the header into the first
//! and the payload on through the ones after it (their sequence words
//! included), and publishes the first. The consumer reads `k` from the
//! length, takes the payload as one contiguous piece, overwrites the
//! payload bytes that sit where the other `k - 1` slots' `seq` words are
//! (a later lap must not read them as published) and hands all `k` slots
//! back. A message that starts in one of the last `k - 1` slots
//! runs on into the overflow slots behind the ring instead of wrapping,
//! so the payload is contiguous wherever it starts; the slots at the
//! ring's start that its positions wrap onto carry nothing and are only
//! taken and handed back. So copies of up to `span` slots go through
//! the ring without making every slot that large.
//!
//! Credits: the messages a consumer may have to keep (unexpected ones) are
//! bounded per ring by the owner's `loan`. The producer charges each
//! EAGER or RTS slot it publishes (`credit_cost`) and may have at most
//! `loan` bytes charged and not yet given back (`freed`); the consumer
//! gives credit back once the application took the message, and cuts off
//! a producer that overdraws.
//!
//! Doorbells: an owner about to sleep sets `sleeping`, then looks at its
//! rings once more; a producer publishes a slot, then reads `sleeping`,
//! and rings (a datagram to the owner's socket) if it is set. Each side's
//! store must be visible before its load (else both miss the other: a
//! lost wakeup), which takes a full barrier on both sides, the producer's
//! on every message (and it waits there for the slot's line to arrive
//! from the consumer's core). When the kernel has
//! `MEMBARRIER_CMD_GLOBAL_EXPEDITED` and the producer's process is
//! registered for it, the barrier is asymmetric: the producer issues a
//! compiler fence only, and the owner, when it sets `sleeping` (not when
//! it finds it still set: the barrier that followed the setting still
//! covers every later load), issues that membarrier, which runs a full
//! barrier on every CPU running a registered process (a process not
//! running passed one when it was switched out). Either the producer's
//! slot is visible to the owner's second look, or the producer's load
//! comes after that barrier and sees the flag (gate.rs has the argument).
//! The owner says it does this in `fenceless`; a producer whose own
//! registration failed, or whose owner does not say so, keeps its fence.
//!
//! Grants: a receiver that asks its sender to write into its memory (CTW)
//! first arms a grant word of the sender's ring with the receive's id. The
//! sender moves it ARMED -> WRITING before it writes and to DONE after;
//! the receiver revokes (ARMED -> free) before the memory may go back to
//! the application (cancel, close) and, if the write already started,
//! waits for DONE. So no write lands after the receiver let go.
//!
//! A peer is trusted with nothing: every field read from a slot is checked
//! against the mapping's geometry before use, and the geometry itself is
//! ours (kept in this process, never re-read from the file). Bytes a peer
//! may write are never seen through a Rust reference: they are copied out
//! through raw pointers (`SharedBytes`).

use super::mapping::{Mapping, SharedBytes, PAGE};
use crate::gate::Registration;
use rustix::thread::{membarrier, MembarrierCommand};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{fence, AtomicU64, Ordering};

mod outbox;
pub use outbox::Outbox;

const MAGIC: u64 = 0x314d_4853_5849_4e47; // "GNIXSHM1"
const VERSION: u32 = 5;
/// Slot header: seq, kind, len and 32 bytes of kind fields; the payload
/// follows at once, so the header and the first 16 payload bytes (a small
/// message whole) share the slot's first cache line.
pub const SLOT_HDR: usize = 48;
/// A cache line.
const LINE: usize = 64;
/// Payload bytes in a slot's first line, with its header.
pub const LINE_PAYLOAD: usize = LINE - SLOT_HDR;
const RING_HDR: usize = 128;
const OWNERS_OFF: usize = 128;
const LOAN_OFF: usize = 40;
const RING_FREED: usize = 32;
const RING_HEAD: usize = 40;
const SPAN_OFF: usize = 48;
const CACHE_OFF: usize = 52;
const COPY_MAX_OFF: usize = 56;
const SLEEPING_OFF: usize = 64;
const FENCELESS_OFF: usize = 68;
const PID_NS_OFF: usize = 72;
const RING_GRANTS: usize = 64;
/// Grant words per ring: large receives from one sender that may be
/// written into at once.
pub const GRANTS: usize = 8;
const GRANT_ARMED: u64 = 1;
const GRANT_WRITING: u64 = 2;
const GRANT_DONE: u64 = 3;
/// Credit bytes a slot costs beyond its payload: what the consumer keeps
/// for an unexpected message besides the bytes themselves.
pub const SLOT_CREDIT: u64 = 128;

/// Slots of `slot_size` bytes a message of `len` payload bytes takes.
#[inline]
pub fn span_of(len: usize, slot_size: usize) -> usize {
    // Most messages fit one slot: no division on their way.
    if len + SLOT_HDR <= slot_size {
        1
    } else {
        (len + SLOT_HDR).div_ceil(slot_size)
    }
}

/// Payload bytes of the longest message: one spanning `span` slots of
/// `slot_size` bytes.
pub fn msg_max(span: usize, slot_size: usize) -> usize {
    span * slot_size - SLOT_HDR
}

/// The slots a consumer counts for a slot whose header says `len`: 0 when
/// that is longer than a message may be (the payload is refused, and the
/// slot handed back as one).
#[inline]
pub fn counted_span(len: usize, span: usize, slot_size: usize) -> usize {
    if len + SLOT_HDR <= slot_size {
        1
    } else if len <= msg_max(span, slot_size) {
        span_of(len, slot_size)
    } else {
        0
    }
}

/// Credit bytes of an EAGER or RTS slot with `len` payload bytes.
pub fn credit_cost(len: usize) -> u64 {
    len as u64 + SLOT_CREDIT
}
pub const MAX_RINGS: usize = (PAGE - OWNERS_OFF) / 8;

const OPEN: u32 = 1;
const CLOSED: u32 = 2;
const RING_FREE: u32 = 0;
const RING_ACTIVE: u32 = 1;
const RING_CLOSED: u32 = 2;

/// Shape of a mailbox; the creator chooses it, a peer reads it from the
/// header once when it maps the file and checks it against the file size.
/// Made only by `shaped` (the fields are read, never written): the sizes
/// every message's slot arithmetic needs are worked out once, there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub nrings: usize,
    pub depth: usize,
    pub slot_size: usize,
    /// Slots one message may span (1: every message fits one slot).
    pub span: usize,
    /// `depth * slot_size`: a lap of the ring.
    lap: usize,
    /// Bytes of one ring, header and overflow slots included, in pages.
    ring_bytes: usize,
}

impl Geometry {
    pub fn new(nrings: usize, depth: usize, payload: usize) -> Geometry {
        Geometry::shaped(
            nrings.clamp(1, MAX_RINGS),
            depth.max(2),
            (payload + SLOT_HDR).next_multiple_of(64),
            1,
        )
    }
    /// The same, with messages spanning up to `span` slots (at most the
    /// ring's depth).
    pub fn with_span(self, span: usize) -> Geometry {
        Geometry::shaped(self.nrings, self.depth, self.slot_size, span.clamp(1, self.depth))
    }
    fn shaped(nrings: usize, depth: usize, slot_size: usize, span: usize) -> Geometry {
        // Saturating: a peer's header may say anything (`open` checks the
        // shape against the file's size after this).
        Geometry {
            nrings,
            depth,
            slot_size,
            span,
            lap: depth.saturating_mul(slot_size),
            ring_bytes: RING_HDR
                .saturating_add(slots_len(depth, span, slot_size))
                .checked_next_multiple_of(PAGE)
                .unwrap_or(usize::MAX),
        }
    }
    /// Payload bytes of one slot.
    pub fn payload(&self) -> usize {
        self.slot_size - SLOT_HDR
    }
    /// Payload bytes of the longest message (one spanning `span` slots).
    pub fn msg_max(&self) -> usize {
        msg_max(self.span, self.slot_size)
    }
    /// Slots a message of `len` payload bytes takes (at most `span` for
    /// a length up to `msg_max`).
    pub fn span_of(&self, len: usize) -> usize {
        span_of(len, self.slot_size)
    }
    /// Bytes of a ring's slots, overflow included.
    fn slots_bytes(&self) -> usize {
        slots_len(self.depth, self.span, self.slot_size)
    }
    /// Offset of the slot `n` positions after the one at `off`, in the
    /// ring whose first slot is at `first`: wrapped into its `depth`
    /// slots (`n` at most the depth).
    #[inline]
    fn slot_after(&self, first: usize, off: usize, n: usize) -> usize {
        let next = off + n * self.slot_size;
        if next >= first + self.lap {
            next - self.lap
        } else {
            next
        }
    }
    fn ring_off(&self, r: usize) -> usize {
        PAGE + r * self.ring_bytes
    }
    fn file_len(&self) -> usize {
        self.ring_off(self.nrings)
    }
}

/// Bytes of a ring of `depth` slots of `slot_size` whose messages span up
/// to `span` slots: the overflow after the last slot holds the rest of a
/// message that starts there. Saturating (see `Geometry::shaped`).
fn slots_len(depth: usize, span: usize, slot_size: usize) -> usize {
    depth.saturating_add(span).saturating_sub(1).saturating_mul(slot_size)
}

/// `/dev/shm` file of the endpoint at `addr` of user `uid`.
pub fn path_for(uid: u32, addr: &SocketAddr) -> String {
    let ip = match addr.ip() {
        IpAddr::V4(a) => a.to_string(),
        IpAddr::V6(a) => a.to_string().replace(':', "_"),
    };
    format!("/dev/shm/gnix-{}-{}-{}", uid, ip, addr.port())
}

fn cstr(path: &str) -> std::ffi::CString {
    std::ffi::CString::new(path).expect("mailbox paths have no NUL")
}

/// Paths of this process's live mailboxes, for `unlink_all_live`.
static LIVE: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// Removes every mailbox file this process still owns (process exit
/// without fi_close). The mappings stay until the process is gone.
pub fn unlink_all_live() {
    let live = LIVE.lock().unwrap_or_else(|p| p.into_inner());
    for p in live.iter() {
        let c = cstr(p);
        // SAFETY: unlinking our own mailbox file by path.
        unsafe { libc::unlink(c.as_ptr()) };
    }
}

/// Once per process: removes the mailboxes of this user's processes that
/// died without closing them (killed, crashed), so they do not pile up
/// in /dev/shm.
fn sweep_dead(uid: u32) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let prefix = format!("gnix-{uid}-");
        let Ok(dir) = std::fs::read_dir("/dev/shm") else { return };
        for e in dir.flatten() {
            let name = e.file_name();
            if name.to_string_lossy().starts_with(&prefix) {
                Mailbox::reclaim(&format!("/dev/shm/{}", name.to_string_lossy()));
            }
        }
    });
}

/// The effective user of this process (mailboxes are per user).
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// This process's pid namespace (the inode of `/proc/self/ns/pid`; 0 if
/// it cannot be read). Processes of one user may share /dev/shm from
/// different pid namespaces (containers that share the host's shm, or
/// `unshare --pid`): a pid in another's mailbox is not a pid here, so its
/// liveness cannot be judged, nor its memory read, from here.
pub fn pid_ns() -> u64 {
    static NS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *NS.get_or_init(|| {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata("/proc/self/ns/pid").map_or(0, |m| m.ino())
    })
}

/// Whether a mailbox of pid namespace `ns` (its header's word) is of
/// ours: only then are its pids ours. (0 on either side: not known, and
/// taken as ours, as before the word existed.)
pub fn same_pid_ns(ns: u64) -> bool {
    let ours = pid_ns();
    ns == 0 || ours == 0 || ns == ours
}

/// Whether process `pid` exists (a process of another user still counts).
pub fn pid_alive(pid: u32) -> bool {
    if pid == 0 || pid > i32::MAX as u32 {
        return false;
    }
    // SAFETY: kill with signal 0 only checks for existence.
    let r = unsafe { libc::kill(pid as i32, 0) };
    r == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Watches a peer process for its death. A pidfd turns readable when the
/// process exits, even while it is a zombie nobody has reaped yet (which
/// `kill(pid, 0)` still finds), and it cannot be fooled by pid reuse.
pub struct Liveness {
    pid: u32,
    fd: Option<std::os::fd::OwnedFd>,
}

impl Liveness {
    pub fn watch(pid: u32) -> Liveness {
        // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
        let fd = (fd >= 0).then(|| {
            use std::os::fd::FromRawFd;
            // SAFETY: a descriptor the kernel just gave us, owned by nobody else.
            unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) }
        });
        Liveness { pid, fd }
    }

    pub fn alive(&self) -> bool {
        use std::os::fd::AsRawFd;
        match &self.fd {
            Some(fd) => {
                let mut p = libc::pollfd {
                    fd: fd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd, no wait.
                unsafe { libc::poll(&mut p, 1, 0) == 0 }
            }
            None => pid_alive(self.pid),
        }
    }
}

fn encode_addr(a: &SocketAddr) -> [u8; 20] {
    let mut b = [0u8; 20];
    match a {
        SocketAddr::V4(v) => {
            b[0..2].copy_from_slice(&4u16.to_le_bytes());
            b[4..8].copy_from_slice(&v.ip().octets());
        }
        SocketAddr::V6(v) => {
            b[0..2].copy_from_slice(&6u16.to_le_bytes());
            b[4..20].copy_from_slice(&v.ip().octets());
        }
    }
    b[2..4].copy_from_slice(&a.port().to_le_bytes());
    b
}

fn decode_addr(b: &[u8; 20]) -> Option<SocketAddr> {
    let port = u16::from_le_bytes([b[2], b[3]]);
    match u16::from_le_bytes([b[0], b[1]]) {
        4 => Some(SocketAddr::new(IpAddr::V4(Ipv4Addr::new(b[4], b[5], b[6], b[7])), port)),
        6 => {
            let o: [u8; 16] = b[4..20].try_into().unwrap();
            Some(SocketAddr::new(IpAddr::V6(Ipv6Addr::from(o)), port))
        }
        _ => None,
    }
}

/// A slot's header as the ring carries it: its kind, payload length and
/// 32 bytes of kind fields. What they mean is `frame.rs`'s business (the
/// one place that encodes and decodes them); here they are only words.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlotHead {
    pub kind: u8,
    pub len: usize,
    pub f: Fields,
}

/// A slot's 32 bytes of kind fields, as the four little-endian words they
/// are in the slot. Kept and moved as words, not bytes: a header built
/// in byte pieces (a 4-byte flags word beside 8-byte ones) and copied into
/// the slot with 16-byte loads waited for every send's pieces to reach
/// the cache first, since a load spanning two pending stores cannot be
/// forwarded from them (`perf annotate` of Open MPI's sending rank: a
/// quarter of `Exec::send_to`'s samples on that copy).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fields(pub [u64; 4]);

impl Fields {
    /// The 8 bytes at byte `at` (a multiple of 8).
    #[inline(always)]
    pub fn u64(&self, at: usize) -> u64 {
        debug_assert!(at.is_multiple_of(8));
        self.0[at / 8]
    }
    /// The 4 bytes at byte `at` (a multiple of 4).
    #[inline(always)]
    pub fn u32(&self, at: usize) -> u32 {
        debug_assert!(at.is_multiple_of(4));
        (self.0[at / 8] >> (at % 8 * 8)) as u32
    }
    #[inline(always)]
    pub fn set_u64(&mut self, at: usize, v: u64) {
        debug_assert!(at.is_multiple_of(8));
        self.0[at / 8] = v;
    }
    #[inline(always)]
    pub fn set_u32(&mut self, at: usize, v: u32) {
        debug_assert!(at.is_multiple_of(4));
        let shift = at % 8 * 8;
        let w = &mut self.0[at / 8];
        *w = *w & !(0xffff_ffffu64 << shift) | (v as u64) << shift;
    }
    /// The fields as the slot's bytes (tests and fuzz targets poke them).
    #[cfg(any(test, feature = "fuzz"))]
    pub fn to_bytes(self) -> [u8; 32] {
        let mut b = [0u8; 32];
        for (c, w) in b.chunks_exact_mut(8).zip(self.0) {
            c.copy_from_slice(&w.to_le_bytes());
        }
        b
    }
    #[cfg(any(test, feature = "fuzz"))]
    pub fn from_bytes(b: [u8; 32]) -> Fields {
        let mut f = Fields::default();
        for (w, c) in f.0.iter_mut().zip(b.chunks_exact(8)) {
            *w = u64::from_le_bytes(c.try_into().expect("8 bytes"));
        }
        f
    }
}

/// The slot header's first word after `seq`: kind in its low byte, the
/// payload length in its high half.
#[inline(always)]
fn kind_len_word(kind: u8, len: usize) -> u64 {
    kind as u64 | (len as u32 as u64) << 32
}

/// The kind and length `kind_len_word` put in `w`.
#[inline(always)]
fn kind_len_of(w: u64) -> (u8, usize) {
    (w as u8, (w >> 32) as usize)
}

/// The asymmetric doorbell barrier ("Doorbells" in the module comment).
/// Where the kernel offers it, an owner arms with it (and says so in its
/// mailbox); a producer registered for it publishes without a fence.
static GLOBAL: Registration = Registration::new(
    MembarrierCommand::GlobalExpedited,
    MembarrierCommand::RegisterGlobalExpedited,
);

/// A slot the consumer found published (its header is copied out by
/// `peek`): where it is, and the payload length its header claims.
#[derive(Clone, Copy, Debug)]
pub struct InSlot {
    pub ring: usize,
    off: usize,
    len: usize,
    /// Slots it takes (from its length); 0 if that is too long for a
    /// message, which `payload` refuses (and `release` counts as 1).
    span: usize,
}

impl InSlot {
    /// Whether its length fits a message (`Mailbox::payload` is `Some`).
    #[inline]
    pub fn fits(&self) -> bool {
        self.span > 0
    }
}

/// A ring of our mailbox that a peer claimed.
#[derive(Clone, Copy, Debug)]
pub struct RingInfo {
    pub peer: SocketAddr,
    pub pid: u32,
}

/// Our own mailbox: we consume from its rings.
pub struct Mailbox {
    map: Mapping,
    geo: Geometry,
    path: String,
    /// Where we are in each ring.
    cursors: Vec<Cursor>,
    /// Claims counter value of the last scan for newly claimed rings.
    seen_claims: u64,
    pub rings: Vec<Option<RingInfo>>,
    /// Rings we took (`rings[r]` is set) whose pages our mapping has not
    /// faulted in yet, as (ring, from, to) offsets; `free_ring` drops
    /// them. A claim seen by a progress pass faults in only the ring's
    /// first pages (`WARM_FIRST_PAGES`): populating all 64 would cost the
    /// message that came with it about 10 µs. The rest fault in one page
    /// per slot as the first lap uses them, and a ring nobody sends much
    /// on never costs more. `warm` does them all where that is free: when
    /// the AV learns an address.
    cold: Vec<(usize, usize, usize)>,
    /// Rings not ours yet (free, or claimed and not yet announced) whose
    /// pages our mapping has faulted in (`warm_spares`), for the producers
    /// that claim them.
    spares: Vec<usize>,
}

/// Where we are in one of our rings: what `peek` and `release` need of
/// it, in one place (one bounds check a message, not one per vector).
#[derive(Clone, Copy, Debug)]
struct Cursor {
    /// Position of the next slot: its sequence word reads `head + 1` once
    /// it is published.
    head: u64,
    /// Offset of the next slot (kept to spare a division per poll).
    next: usize,
    /// Offset of the ring (its header).
    ring: usize,
}

impl Cursor {
    /// At the first slot of the ring at `ring`.
    fn start(ring: usize) -> Cursor {
        Cursor {
            head: 0,
            next: ring + RING_HDR,
            ring,
        }
    }
}

/// Pages of a newly claimed ring faulted in when the claim is seen: the
/// ring's header and its first slots, which its first messages use.
const WARM_FIRST_PAGES: usize = 4;

impl Mailbox {
    /// Creates the mailbox of the endpoint at `me`. A file left there by a
    /// process that died is reclaimed; one whose owner lives is an error
    /// (two endpoints cannot have one address).
    pub fn create(uid: u32, me: &SocketAddr, geo: Geometry, loan: u64) -> io::Result<Mailbox> {
        sweep_dead(uid);
        let path = path_for(uid, me);
        let c = cstr(&path);
        let flags = libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        let mut fd;
        let mut tries = 0;
        loop {
            // SAFETY: plain open of a NUL-terminated path, mode 0600.
            fd = unsafe { libc::open(c.as_ptr(), flags, 0o600 as libc::c_uint) };
            if fd >= 0 || io::Error::last_os_error().raw_os_error() != Some(libc::EEXIST) || tries == 2 {
                break;
            }
            tries += 1;
            if !Self::reclaim(&path) {
                break;
            }
        }
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let r = Self::init(fd, &path, geo, loan);
        // SAFETY: closing the descriptor opened above; the mapping stays.
        unsafe { libc::close(fd) };
        match &r {
            Ok(_) => LIVE.lock().unwrap_or_else(|p| p.into_inner()).push(path),
            // SAFETY: removing the file we just created.
            Err(_) => unsafe {
                libc::unlink(c.as_ptr());
            },
        }
        r
    }

    /// Removes a mailbox file whose owner is dead. Whether it did.
    pub fn reclaim(path: &str) -> bool {
        let c = cstr(path);
        // SAFETY: plain open; read-only look at the header.
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC) };
        if fd < 0 {
            return false;
        }
        let mut h = [0u8; PID_NS_OFF + 8];
        // SAFETY: reads at most h.len() bytes into a local buffer.
        let n = unsafe { libc::pread(fd, h.as_mut_ptr() as *mut libc::c_void, h.len(), 0) };
        // SAFETY: fstat into a zeroed stat buffer of our own descriptor.
        let mut stb: libc::stat = unsafe { std::mem::zeroed() };
        let statted = unsafe { libc::fstat(fd, &mut stb) } == 0;
        // SAFETY: closing the descriptor opened above.
        unsafe { libc::close(fd) };
        let pid = u32::from_le_bytes(h[24..28].try_into().unwrap());
        let ns = u64::from_le_bytes(h[PID_NS_OFF..].try_into().unwrap());
        if n == h.len() as isize && !same_pid_ns(ns) {
            // Another pid namespace's: its owner's pid means nothing here,
            // and a live mailbox must not be taken from it.
            return false;
        }
        if n < 28 || pid == 0 {
            // No owner written yet: a mailbox being created right now,
            // unless it has been like that for a while.
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64);
            if !statted || now - stb.st_mtime < 60 {
                return false;
            }
        } else if pid_alive(pid) {
            // Alive, or our own pid on a file of a previous process (pid
            // reuse) — which only `create` of that very address may remove.
            if pid != std::process::id() || LIVE.lock().unwrap_or_else(|p| p.into_inner()).iter().any(|l| l == path) {
                return false;
            }
        }
        crate::info!(
            crate::ffi::FI_LOG_EP_CTRL,
            "{}: reclaiming the mailbox of dead process {}",
            path,
            pid
        );
        // SAFETY: unlinking a path; a racing reclaimer makes this ENOENT.
        unsafe { libc::unlink(c.as_ptr()) };
        true
    }

    fn init(fd: i32, path: &str, geo: Geometry, loan: u64) -> io::Result<Mailbox> {
        // SAFETY: sizing our own new file (sparse: pages appear when touched).
        if unsafe { libc::ftruncate(fd, geo.file_len() as libc::off_t) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let map = Mapping::map(fd, geo.file_len())?;
        let mut h = [0u8; 28];
        h[0..8].copy_from_slice(&MAGIC.to_le_bytes());
        h[8..12].copy_from_slice(&VERSION.to_le_bytes());
        h[12..16].copy_from_slice(&(geo.nrings as u32).to_le_bytes());
        h[16..20].copy_from_slice(&(geo.depth as u32).to_le_bytes());
        h[20..24].copy_from_slice(&(geo.slot_size as u32).to_le_bytes());
        h[24..28].copy_from_slice(&std::process::id().to_le_bytes());
        // The namespace before the pid: a reclaimer of another namespace
        // that reads our pid must not take it for one of its own.
        map.u64_at(PID_NS_OFF).store(pid_ns(), Ordering::Release);
        map.write(0, &h);
        map.u32_at(SPAN_OFF).store(geo.span as u32, Ordering::Relaxed);
        map.u32_at(CACHE_OFF)
            .store(super::cache::this_process(), Ordering::Relaxed);
        map.u64_at(LOAN_OFF).store(loan, Ordering::Relaxed);
        // Registering here, as a producer, spares the first connection
        // the registration's milliseconds.
        if !GLOBAL.ready() {
            crate::info!(
                crate::ffi::FI_LOG_EP_CTRL,
                "shm: no global expedited membarrier: a fence per message published"
            );
        }
        map.u32_at(FENCELESS_OFF)
            .store(GLOBAL.offered() as u32, Ordering::Relaxed);
        map.u32_at(28).store(OPEN, Ordering::Release);
        Ok(Mailbox {
            map,
            geo,
            path: path.to_string(),
            cursors: (0..geo.nrings).map(|r| Cursor::start(geo.ring_off(r))).collect(),
            seen_claims: 0,
            rings: vec![None; geo.nrings],
            cold: Vec::new(),
            spares: Vec::new(),
        })
    }

    /// Names another last-level cache than ours (a peer under another).
    #[cfg(test)]
    pub fn set_cache(&self, cache: u32) {
        self.map.u32_at(CACHE_OFF).store(cache, Ordering::Relaxed);
    }

    pub fn geometry(&self) -> Geometry {
        self.geo
    }

    /// Says which messages we want copied through our rings (`choice.rs`):
    /// up to `bytes` (`usize::MAX`: all a ring holds).
    pub fn set_copy_max(&self, bytes: usize) {
        let word = u32::try_from(bytes).unwrap_or(u32::MAX).max(1);
        self.map.u32_at(COPY_MAX_OFF).store(word, Ordering::Relaxed);
    }

    /// Whether a ring was claimed since the last `scan_claims`.
    #[inline]
    pub fn claims_changed(&self) -> bool {
        self.map.u64_at(32).load(Ordering::Acquire) != self.seen_claims
    }

    /// Picks up rings claimed since the last look. Returns the new ones.
    pub fn scan_claims(&mut self, out: &mut Vec<usize>) {
        let claims = self.map.u64_at(32).load(Ordering::Acquire);
        if claims == self.seen_claims {
            return;
        }
        self.seen_claims = claims;
        for r in 0..self.geo.nrings {
            // The owners' table is on the header page: an unclaimed ring's
            // own page is never touched (each would be a page fault, 64 of
            // them on the first claim).
            if self.rings[r].is_some() || !self.claimed(r) {
                continue;
            }
            let roff = self.geo.ring_off(r);
            // Its producer faulted its pages in (`Outbox::connect`); our
            // mapping of the first ones, too (before the state word below
            // faults alone), unless it was a spare; see `cold` for the
            // rest.
            let end = roff + RING_HDR + self.geo.slots_bytes();
            let first = if let Some(i) = self.spares.iter().position(|&s| s == r) {
                self.spares.swap_remove(i);
                end
            } else {
                let first = (roff + WARM_FIRST_PAGES * PAGE).min(end);
                self.map.populate(roff, first - roff, false);
                first
            };
            // A ring claimed and closed again before we looked counts too
            // (its producer sent something and went): what it left there
            // is read, then the ring is freed like any closed one.
            let state = self.map.u32_at(roff).load(Ordering::Acquire);
            if state != RING_ACTIVE && state != RING_CLOSED {
                continue;
            }
            let pid = self.map.u32_at(roff + 4).load(Ordering::Relaxed);
            let mut a = [0u8; 20];
            self.map.read(roff + 8, &mut a);
            match decode_addr(&a) {
                Some(peer) => {
                    self.rings[r] = Some(RingInfo { peer, pid });
                    self.cursors[r] = Cursor::start(roff);
                    if first < end {
                        self.cold.push((r, first, end));
                    }
                    out.push(r);
                }
                None => {
                    crate::warn!(
                        crate::ffi::FI_LOG_EP_DATA,
                        "shm ring {} claimed with a bad address; freeing it",
                        r
                    );
                    self.free_ring(r);
                }
            }
        }
    }

    /// Faults in the rest of the claimed rings' pages (see `cold`). Not for
    /// a data path: about 10 µs a ring.
    pub fn warm(&mut self) {
        for (_, from, to) in self.cold.drain(..) {
            self.map.populate(from, to - from, false);
        }
    }

    /// Whether a producer claimed ring `r` (its pid in the owners' table).
    fn claimed(&self, r: usize) -> bool {
        self.map.u64_at(OWNERS_OFF + 8 * r).load(Ordering::Acquire) != 0
    }

    /// Faults in the pages of the rings `n` more producers will claim
    /// (each takes the lowest free one, `Outbox::connect`), beside the
    /// spares still waiting for theirs: for peers the AV just learned,
    /// which connect to us after we connected to them (they learn our
    /// address later), so that `scan_claims` has nothing left to fault
    /// in when their first messages come. Without it the first lap of
    /// such a ring faults on every 64 KiB of slots as we read them (the
    /// kernel maps a file's pages 16 around a fault): 3.5-50 µs each,
    /// eight in the first 64 messages of `fi_pingpong -S all`, where a
    /// row is ten round trips of 0.4 µs. Not for a data path: about 10
    /// µs a ring, whose pages its producer's claim allocates anyway.
    ///
    /// The lowest rings not ours yet, claimed or not: a producer takes
    /// the owner's word first and announces the claim (`claims`) only
    /// after faulting the whole ring in for itself, 10-20 µs later. A
    /// peer that learns our address as we learn its (both ends of
    /// `fi_pingpong` insert at once) is in that window as often as not,
    /// and its ring is the one to warm: a free ring above it would be
    /// warmed in vain, and its own left to fault on its first lap.
    pub fn warm_spares(&mut self, n: usize) {
        let want = self.spares.len() + n;
        let next: Vec<usize> = (0..self.geo.nrings)
            .filter(|&r| self.rings[r].is_none())
            .take(want)
            .collect();
        for r in next {
            if !self.spares.contains(&r) {
                let roff = self.geo.ring_off(r);
                self.map.populate(roff, RING_HDR + self.geo.slots_bytes(), false);
                self.spares.push(r);
            }
        }
    }

    /// Whether ring `r` has a published slot (`peek` would find it).
    #[inline]
    pub fn ready(&self, r: usize) -> bool {
        let c = &self.cursors[r];
        self.map.u64_at(c.next).load(Ordering::Acquire) == c.head + 1
    }

    /// The next published slot of ring `r`, if any, and its header.
    /// (Always inlined, as `Exec::poll_one` is.)
    #[inline(always)]
    pub fn peek(&self, r: usize) -> Option<(InSlot, SlotHead)> {
        let c = self.cursors[r];
        let off = c.next;
        if self.map.u64_at(off).load(Ordering::Acquire) != c.head + 1 {
            return None;
        }
        // In a burst the next slot is written already: its line comes
        // from the producer's core while this message is handled, not
        // when the next peek asks for it. (Caught up, it is the line the
        // next peek polls anyway.)
        self.map.prefetch_read(self.geo.slot_after(c.ring + RING_HDR, off, 1));
        let [kl, f0, f1, f2, f3] = self.map.words::<5>(off + 8);
        let (kind, len) = kind_len_of(kl);
        let span = counted_span(len, self.geo.span, self.geo.slot_size);
        Some((
            InSlot {
                ring: r,
                off,
                len,
                span,
            },
            SlotHead {
                kind,
                len,
                f: Fields([f0, f1, f2, f3]),
            },
        ))
    }

    /// The payload of a slot; `None` if its length is longer than a
    /// message may be. (One that spans slots is contiguous: see the
    /// module comment.)
    pub fn payload(&self, s: &InSlot) -> Option<SharedBytes<'_>> {
        s.fits().then(|| self.map.shared(s.off + SLOT_HDR, s.len))
    }

    /// Gives ring `r`'s producer credit back: `freed` is the cumulative
    /// count of credit bytes given back since the ring was claimed.
    pub fn give_credit(&self, r: usize, freed: u64) {
        self.map
            .u64_at(self.geo.ring_off(r) + RING_FREED)
            .store(freed, Ordering::Release);
    }

    /// Arms a grant word of ring `r` for receive `rid` (see the module
    /// comment); `None` if all are in use.
    pub fn grant(&self, r: usize, rid: u64) -> Option<usize> {
        (0..GRANTS).find(|&g| {
            self.grant_word(r, g)
                .compare_exchange(0, rid << 2 | GRANT_ARMED, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        })
    }

    /// Takes grant `g` of ring `r` back from receive `rid`. True once no
    /// write under it can happen any more: it was revoked before the
    /// producer began, or its write is over. False while the write runs.
    pub fn revoke(&self, r: usize, g: usize, rid: u64) -> bool {
        let w = self.grant_word(r, g);
        match w.compare_exchange(rid << 2 | GRANT_ARMED, 0, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => true,
            Err(v) if v == rid << 2 | GRANT_WRITING => false,
            // DONE (or the word moved on): nothing more will be written.
            Err(v) => {
                if v == rid << 2 | GRANT_DONE {
                    w.store(0, Ordering::Release);
                }
                true
            }
        }
    }

    fn grant_word(&self, r: usize, g: usize) -> &AtomicU64 {
        assert!(g < GRANTS);
        self.map.u64_at(self.geo.ring_off(r) + RING_GRANTS + 8 * g)
    }

    /// Hands a consumed slot (and those its message spans) back to its
    /// producer.
    #[inline]
    pub fn release(&mut self, s: InSlot) {
        if s.span > 1 {
            return self.release_spanning(s);
        }
        // A refused length (span 0) was counted as one slot.
        self.advance(s.ring, s.off, 1);
    }

    #[cold]
    fn release_spanning(&mut self, s: InSlot) {
        let pos = self.cursors[s.ring].head;
        // The payload ran over the sequence words of the slots after the
        // first; a value that slot `i` would never be published with (its
        // position modulo depth differs from a published value's) takes
        // their place before the producer may write them again.
        for i in 1..s.span {
            self.map
                .u64_at(self.after(s.ring, s.off, i))
                .store(pos + i as u64, Ordering::Relaxed);
        }
        self.advance(s.ring, s.off, s.span);
    }

    /// Ring `r`'s next message is `n` slots after the one at `off`: the
    /// positions before it are the producer's again (the ring's `head`).
    #[inline]
    fn advance(&mut self, r: usize, off: usize, n: usize) {
        let geo = self.geo;
        let c = &mut self.cursors[r];
        c.head += n as u64;
        c.next = geo.slot_after(c.ring + RING_HDR, off, n);
        let (roff, head) = (c.ring, c.head);
        self.map.u64_at(roff + RING_HEAD).store(head, Ordering::Release);
    }

    /// Offset of the slot `n` positions after the one at `off` in ring
    /// `r` (`Geometry::slot_after`).
    #[inline]
    fn after(&self, r: usize, off: usize, n: usize) -> usize {
        self.geo.slot_after(self.geo.ring_off(r) + RING_HDR, off, n)
    }

    /// Whether the producer of ring `r` closed it (and the ring is drained:
    /// call after `peek` found nothing).
    pub fn ring_closed(&self, r: usize) -> bool {
        self.map.u32_at(self.geo.ring_off(r)).load(Ordering::Acquire) == RING_CLOSED
    }

    /// Returns ring `r` to the pool of free rings.
    pub fn free_ring(&mut self, r: usize) {
        self.rings[r] = None;
        // A free ring's pages are nobody's: faulting them in would only
        // allocate them.
        self.cold.retain(|c| c.0 != r);
        self.map
            .u32_at(self.geo.ring_off(r))
            .store(RING_FREE, Ordering::Relaxed);
        self.map.u64_at(OWNERS_OFF + 8 * r).store(0, Ordering::Release);
    }

    /// About to sleep: asks producers for a doorbell. False if a slot is
    /// already waiting in one of `active` (then do not sleep).
    pub fn arm(&mut self, active: &[usize]) -> bool {
        let sleeping = self.map.u32_at(SLEEPING_OFF);
        let fresh = sleeping.load(Ordering::Relaxed) == 0;
        sleeping.store(1, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        // Producers that publish without a barrier ("Doorbells"): one for
        // them, on every CPU running one, each time the flag goes up.
        if fresh && GLOBAL.offered() && membarrier(MembarrierCommand::GlobalExpedited).is_err() {
            // Cannot happen once the query said yes; a lost doorbell
            // must not, so stay awake.
            sleeping.store(0, Ordering::Relaxed);
            return false;
        }
        let claims = self.map.u64_at(32).load(Ordering::Relaxed);
        claims == self.seen_claims && active.iter().all(|&r| self.peek(r).is_none())
    }

    /// Awake again: producers need not ring.
    pub fn disarm(&self) {
        let s = self.map.u32_at(SLEEPING_OFF);
        if s.load(Ordering::Relaxed) != 0 {
            s.store(0, Ordering::Relaxed);
        }
    }

    #[cfg(test)]
    pub fn path(&self) -> &str {
        &self.path
    }
}

impl Drop for Mailbox {
    fn drop(&mut self) {
        self.map.u32_at(28).store(CLOSED, Ordering::Release);
        LIVE.lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|p| *p != self.path);
        let c = cstr(&self.path);
        // SAFETY: removing our own mailbox file.
        unsafe { libc::unlink(c.as_ptr()) };
    }
}

#[cfg(test)]
mod tests;
