//! The producer's side of a mailbox: `Outbox`, our ring in a peer's
//! mailbox, and `SlotWriter`, a slot being filled. The layout, the rules
//! both sides keep and why are the parent module's (`mailbox.rs`); the
//! consumer's side is there too.

use super::{
    cstr, encode_addr, euid, kind_len_word, msg_max, path_for, same_pid_ns, Geometry, Liveness, Mailbox, SlotHead,
    CACHE_OFF, COPY_MAX_OFF, FENCELESS_OFF, GLOBAL, GRANTS, GRANT_ARMED, GRANT_DONE, GRANT_WRITING, LINE, LOAN_OFF,
    MAGIC, MAX_RINGS, OPEN, OWNERS_OFF, PID_NS_OFF, RING_ACTIVE, RING_CLOSED, RING_FREED, RING_GRANTS, RING_HDR,
    RING_HEAD, SLEEPING_OFF, SLOT_HDR, SPAN_OFF, VERSION,
};
use crate::nic::shm::mapping::{Mapping, PAGE};
use std::cell::Cell;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{compiler_fence, fence, AtomicU64, Ordering};

/// Our ring in a peer's mailbox: we produce into it.
pub struct Outbox {
    map: Mapping,
    geo: Geometry,
    ring: usize,
    tail: u64,
    /// Offset of slot `tail % depth` (kept as we go: no division per
    /// message, the producer's hot path), and of the ring's first slot
    /// and its end.
    tail_off: usize,
    first_off: usize,
    /// The consumer's `head` as last read (see the module comment).
    head: Cell<u64>,
    owner: Liveness,
    /// Credit bytes the owner lends this ring (0: no limit).
    loan: u64,
    /// The owner runs under our last-level cache (`cache.rs`).
    near: bool,
    /// Publishing needs no barrier of ours ("Doorbells").
    fenceless: bool,
    /// For each slot, the bytes from its start (header included) that
    /// some message of ours has written there: the lines past them were
    /// never written, and are cold (`prefetch_body`). A slot's first line
    /// counts as written from the start (the consumer polls it; it is
    /// never fetched ahead).
    written: Box<[u32]>,
}

impl Outbox {
    /// Opens the mailbox of the endpoint at `peer` and claims a ring in it
    /// for `me`. `Ok(None)`: no usable mailbox (none, its owner is dead, or
    /// all rings taken) — the peer is then reached over UDP.
    pub fn connect(uid: u32, peer: &SocketAddr, me: &SocketAddr) -> io::Result<Option<Outbox>> {
        let path = path_for(uid, peer);
        let c = cstr(&path);
        // SAFETY: plain open of a NUL-terminated path.
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDWR | libc::O_NOFOLLOW | libc::O_CLOEXEC) };
        if fd < 0 {
            return Ok(None);
        }
        let r = Self::connect_fd(fd, &path, me);
        // SAFETY: closing the descriptor opened above; the mapping stays.
        unsafe { libc::close(fd) };
        r
    }

    fn connect_fd(fd: i32, path: &str, me: &SocketAddr) -> io::Result<Option<Outbox>> {
        // SAFETY: fstat into a zeroed stat buffer.
        let mut stb: libc::stat = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstat(fd, &mut stb) } != 0 {
            return Err(io::Error::last_os_error());
        }
        if stb.st_uid != euid() || stb.st_mode & 0o077 != 0 {
            crate::warn!(
                crate::ffi::FI_LOG_EP_CTRL,
                "{}: not a private mailbox of this user; not using it",
                path
            );
            return Ok(None);
        }
        let flen = stb.st_size as usize;
        if flen < PAGE {
            return Ok(None);
        }
        let head = Mapping::map(fd, PAGE)?;
        let mut h = [0u8; 32];
        head.read(0, &mut h);
        let word = |o: usize| u32::from_le_bytes(h[o..o + 4].try_into().unwrap()) as usize;
        if u64::from_le_bytes(h[0..8].try_into().unwrap()) != MAGIC || word(8) != VERSION as usize {
            return Ok(None);
        }
        let geo = Geometry::shaped(
            word(12),
            word(16),
            word(20),
            head.u32_at(SPAN_OFF).load(Ordering::Relaxed) as usize,
        );
        let sane = (1..=MAX_RINGS).contains(&geo.nrings)
            && (2..=1 << 16).contains(&geo.depth)
            && geo.slot_size.is_multiple_of(64)
            && (SLOT_HDR + 64..=(1 << 20)).contains(&geo.slot_size)
            && (1..=geo.depth.min(64)).contains(&geo.span)
            && geo.file_len() == flen;
        if !same_pid_ns(head.u64_at(PID_NS_OFF).load(Ordering::Relaxed)) {
            // Its owner's pid is of another pid namespace: neither its
            // liveness nor cross-memory reads could name it from here.
            crate::info!(
                crate::ffi::FI_LOG_EP_CTRL,
                "{}: a mailbox of another pid namespace; using UDP",
                path
            );
            return Ok(None);
        }
        let owner_pid = word(24) as u32;
        let owner = Liveness::watch(owner_pid);
        if !owner.alive() {
            // Left behind by a process that died: nobody reads it any more.
            drop(head);
            Mailbox::reclaim(path);
            return Ok(None);
        }
        if !sane || head.u32_at(28).load(Ordering::Acquire) != OPEN {
            return Ok(None);
        }
        drop(head);
        let map = Mapping::map(fd, flen)?;
        // SAFETY: getpid has no preconditions.
        let pid = unsafe { libc::getpid() } as u64;
        let Some(ring) = (0..geo.nrings).find(|&r| {
            map.u64_at(OWNERS_OFF + 8 * r)
                .compare_exchange(0, pid, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        }) else {
            crate::info!(
                crate::ffi::FI_LOG_EP_CTRL,
                "{}: all {} rings taken; using UDP",
                path,
                geo.nrings
            );
            return Ok(None);
        };
        let roff = geo.ring_off(ring);
        // A ring never used is all zeros: no slot reads as published, so
        // its pages are not touched (faulted in) before they carry
        // messages. A ring an earlier producer used still holds its
        // published words: each slot gets its own index, which no position
        // that maps to it is published with.
        if map.u32_at(roff + 28).swap(1, Ordering::Relaxed) != 0 {
            for i in 0..geo.depth {
                map.u64_at(roff + RING_HDR + i * geo.slot_size)
                    .store(i as u64, Ordering::Relaxed);
            }
        }
        map.populate(roff, RING_HDR + geo.slots_bytes(), true);
        map.u32_at(roff + 4).store(pid as u32, Ordering::Relaxed);
        map.write(roff + 8, &encode_addr(me));
        map.u64_at(roff + RING_FREED).store(0, Ordering::Relaxed);
        map.u64_at(roff + RING_HEAD).store(0, Ordering::Relaxed);
        for g in 0..GRANTS {
            map.u64_at(roff + RING_GRANTS + 8 * g).store(0, Ordering::Relaxed);
        }
        let loan = map.u64_at(LOAN_OFF).load(Ordering::Relaxed);
        let cache = crate::nic::shm::cache::this_process();
        let near = cache != 0 && map.u32_at(CACHE_OFF).load(Ordering::Relaxed) == cache;
        // Registered (at our own mailbox's making, normally): the owner's
        // membarrier reaches us, and we publish without a fence.
        let fenceless = map.u32_at(FENCELESS_OFF).load(Ordering::Relaxed) == 1 && GLOBAL.ready();
        map.u32_at(roff).store(RING_ACTIVE, Ordering::Release);
        map.u64_at(32).fetch_add(1, Ordering::AcqRel);
        Ok(Some(Outbox {
            map,
            geo,
            ring,
            tail: 0,
            tail_off: geo.ring_off(ring) + RING_HDR,
            first_off: geo.ring_off(ring) + RING_HDR,
            head: Cell::new(0),
            owner,
            loan,
            near,
            fenceless,
            written: vec![LINE as u32; geo.depth].into_boxed_slice(),
        }))
    }

    /// Whether the slot of position `pos` is free: the consumer handed it
    /// back (on the first lap, every slot is).
    #[inline]
    fn free_at(&self, pos: u64) -> bool {
        self.known_free(pos) || pos < self.read_head().saturating_add(self.geo.depth as u64)
    }

    /// Reads the consumer's `head` afresh. Its word is not trusted: a
    /// bogus value only lets us overwrite what the liar has not read.
    #[cold]
    fn read_head(&self) -> u64 {
        let h = self
            .map
            .u64_at(self.geo.ring_off(self.ring) + RING_HEAD)
            .load(Ordering::Acquire);
        self.head.set(h);
        h
    }

    /// The slots a message of `len` payload bytes takes, if the ring
    /// carries such a message and they are all free.
    #[inline]
    fn free_for(&self, len: usize) -> Option<usize> {
        if len + SLOT_HDR > self.geo.slot_size {
            return self.free_spanning(len);
        }
        self.free_at(self.tail).then_some(1)
    }

    #[cold]
    fn free_spanning(&self, len: usize) -> Option<usize> {
        let k = self.geo.span_of(len);
        // The last position free means all before it are: `head` hands
        // positions back in order.
        (k <= self.geo.span && self.free_at(self.tail + k as u64 - 1)).then_some(k)
    }

    /// The next slot if the consumer has handed it back.
    #[cfg(test)]
    pub fn slot(&mut self) -> Option<SlotWriter<'_>> {
        self.slot_for(0)
    }

    /// The next slots for a message of `len` payload bytes (at most
    /// `Geometry::msg_max`), if the consumer has handed them back.
    #[inline]
    pub fn slot_for(&mut self, len: usize) -> Option<SlotWriter<'_>> {
        let span = self.free_for(len)?;
        Some(SlotWriter {
            off: self.tail_off,
            out: self,
            span,
            end: 0,
        })
    }

    /// Whether the slots a message of `len` bytes needs are free (they
    /// stay so: only we take slots). False for one the ring cannot carry.
    pub fn has_room(&self, len: usize) -> bool {
        self.free_for(len).is_some()
    }

    /// The owner's geometry (its slots, and how many a message spans).
    pub fn geometry(&self) -> Geometry {
        self.geo
    }

    pub fn owner_pid(&self) -> u32 {
        self.owner.pid
    }

    /// Credit bytes the owner has given back since the ring was claimed
    /// (cumulative; the producer's own count of what it charged is the
    /// protocol machine's). Not read without a loan: nothing to give back.
    pub fn freed(&self) -> u64 {
        if self.loan == 0 {
            return 0;
        }
        // The owner's word is not trusted: a bogus value only costs us.
        self.map
            .u64_at(self.geo.ring_off(self.ring) + RING_FREED)
            .load(Ordering::Acquire)
    }

    /// Starts fetching, for writing, the first line of the slot after the
    /// next one: a producer in the middle of a burst then finds it owned
    /// when it gets there, rather than stalling on it with its stores piled
    /// up behind. Not for a lone message: its consumer, caught up, would
    /// have to fetch the line back before the message comes (see
    /// `Exec::send_now`).
    #[inline(always)]
    pub fn prefetch_ahead(&self) {
        self.map
            .prefetch_write(self.geo.slot_after(self.first_off, self.tail_off, 1));
    }

    /// After a send of `len` bytes: starts fetching, for writing, the
    /// lines of the next slot that a message as long would fill and that
    /// no message of ours has written in that slot yet (`written`). Such
    /// lines are cold: the next send's stores would wait for them to come
    /// from memory, and its publish behind them. A slot is taken again only
    /// a lap later, so a size the ring has not carried for a lap (every
    /// row of `fi_pingpong -S all`, whose ten round trips a size take ten
    /// of the 64 slots, all last used by shorter messages) meets them in
    /// every send, not only in the first (bench/README.md, "Cold lines
    /// are a slot's, not the ring's"). Not lines written before: those
    /// sit in the consumer's cache, and fetching them away while it reads
    /// the message just sent slowed Open MPI's 1 KiB ping-pong by a fifth
    /// to a third. Never the first line (the consumer polls it), and only
    /// into a slot the last `head` read shows free. A hint: it reads and
    /// writes nothing.
    #[inline]
    pub fn prefetch_body(&self, len: usize) {
        for off in self.body_lines(len) {
            self.map.prefetch_write(off);
        }
    }

    /// Offsets of the lines `prefetch_body` fetches in the next slot for a
    /// message of `len` bytes: its cold lines up to the message's end, at
    /// most `BODY_AHEAD` bytes into the slot; none for a message that
    /// would span slots.
    pub(super) fn body_lines(&self, len: usize) -> std::iter::StepBy<std::ops::Range<usize>> {
        let end = SLOT_HDR + len;
        let (from, end) = if end <= self.geo.slot_size && self.known_free(self.tail) {
            let w = self.written[self.slot_ix(self.tail_off)] as usize;
            (w.next_multiple_of(LINE), end.min(BODY_AHEAD))
        } else {
            (0, 0)
        };
        (self.tail_off + from..self.tail_off + end.max(from)).step_by(LINE)
    }

    /// Which slot starts at `off` (a division: only for messages past a
    /// slot's first line, not on the 8-byte path).
    fn slot_ix(&self, off: usize) -> usize {
        (off - self.first_off) / self.geo.slot_size
    }

    /// A message of `end` bytes (header included) was published from the
    /// start of the `span` slots at `off`: counts what it wrote in each.
    /// A message that starts in the ring's last slots runs on into the
    /// overflow slots; the positions that wrap onto the first ones carry
    /// nothing.
    fn note_written(&mut self, off: usize, span: usize, end: usize) {
        let (ix, size) = (self.slot_ix(off), self.geo.slot_size);
        for (j, w) in self.written.iter_mut().skip(ix).take(span).enumerate() {
            // At most a slot's size, which a u32 holds (`connect`).
            *w = (*w).max(end.saturating_sub(j * size).min(size) as u32);
        }
    }

    /// Whether the last `head` read shows position `pos` free (no read of
    /// the consumer's word: `free_at` reads it when this says no).
    #[inline]
    fn known_free(&self, pos: u64) -> bool {
        pos < self.head.get().saturating_add(self.geo.depth as u64)
    }

    /// Credit bytes the owner lends this ring (0: no limit).
    pub fn loan(&self) -> u64 {
        self.loan
    }

    /// Whether the owner runs under our last-level cache, as far as both
    /// know (`cache.rs`).
    pub fn near(&self) -> bool {
        self.near
    }

    /// The longest message the owner wants copied through its rings
    /// (`choice.rs`; 0 until it says: every message longer than a slot is
    /// pulled). Read for every spanning send: the word shares the
    /// header's first line, which its owner writes only when its choice
    /// changes. Not trusted: a bogus value only makes our messages to it
    /// slower.
    pub fn copy_max(&self) -> usize {
        match self.map.u32_at(COPY_MAX_OFF).load(Ordering::Relaxed) {
            u32::MAX => usize::MAX,
            n => n as usize,
        }
    }

    /// Whether the consumer handed back the slot published at `pos`: it
    /// has taken the message in (matched or kept it), so a send that
    /// asked for delivery completion is complete.
    pub fn consumed(&self, pos: u64) -> bool {
        self.head.get() > pos || self.read_head() > pos
    }

    /// Before writing into the owner's memory for receive `rid`: takes
    /// grant `g` (ARMED -> WRITING). False if the owner revoked it (or
    /// never granted it): then nothing may be written.
    pub fn begin_write(&self, g: usize, rid: u64) -> bool {
        g < GRANTS
            && self
                .grant_word(g)
                .compare_exchange(
                    rid << 2 | GRANT_ARMED,
                    rid << 2 | GRANT_WRITING,
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                )
                .is_ok()
    }

    /// The write under grant `g` is over.
    pub fn end_write(&self, g: usize, rid: u64) {
        self.grant_word(g).store(rid << 2 | GRANT_DONE, Ordering::Release);
    }

    fn grant_word(&self, g: usize) -> &AtomicU64 {
        self.map.u64_at(self.geo.ring_off(self.ring) + RING_GRANTS + 8 * g)
    }

    /// The owner closed its mailbox (cheap: one load).
    pub fn owner_closed(&self) -> bool {
        self.map.u32_at(28).load(Ordering::Relaxed) != OPEN
    }

    /// The owner closed its mailbox (a process that restarts at the same
    /// address creates a new one) or died.
    pub fn owner_gone(&self) -> bool {
        self.map.u32_at(28).load(Ordering::Acquire) != OPEN || !self.owner.alive()
    }
}

/// How far into a slot `prefetch_body` fetches: a page, at most 63
/// prefetches a send (bench/README.md: 2 KiB did about as well).
const BODY_AHEAD: usize = 4096;

impl Drop for Outbox {
    fn drop(&mut self) {
        // The consumer frees the ring once it has drained it.
        self.map
            .u32_at(self.geo.ring_off(self.ring))
            .store(RING_CLOSED, Ordering::Release);
    }
}

/// A slot being filled by its producer (with the `span - 1` after it
/// for a spanning message): write the fields, then `publish`.
pub struct SlotWriter<'a> {
    out: &'a mut Outbox,
    off: usize,
    span: usize,
    /// Where the message ends (header included), once `head` said.
    end: usize,
}

impl SlotWriter<'_> {
    pub fn head(&mut self, head: &SlotHead) {
        debug_assert!(head.len <= msg_max(self.span, self.out.geo.slot_size));
        self.end = SLOT_HDR + head.len;
        let [f0, f1, f2, f3] = head.f.0;
        self.out
            .map
            .put_words(self.off + 8, [kind_len_word(head.kind, head.len), f0, f1, f2, f3]);
    }
    /// Overwrites the length field (tests: a producer that lies).
    #[cfg(test)]
    pub fn set_len(&mut self, len: usize) {
        self.out.map.write(self.off + 12, &(len as u32).to_le_bytes());
    }
    pub fn payload(&mut self, len: usize) -> &mut [u8] {
        let off = self.off + SLOT_HDR;
        self.out
            .map
            .slice_mut(off, len.min(msg_max(self.span, self.out.geo.slot_size)))
    }
    /// Makes the slot visible to the consumer. Returns whether the
    /// consumer asked to be woken (it is asleep and wants a doorbell).
    #[inline(always)]
    pub fn publish(self) -> bool {
        let pos = self.out.tail;
        self.out.tail += self.span as u64;
        self.out.tail_off = self.out.geo.slot_after(self.out.first_off, self.off, self.span);
        self.out.map.u64_at(self.off).store(pos + 1, Ordering::Release);
        // Pairs with the barrier in Mailbox::arm: either the sleeper sees
        // this slot when it re-checks, or we see its flag here (module
        // comment, "Doorbells").
        if self.out.fenceless {
            compiler_fence(Ordering::SeqCst);
        } else {
            fence(Ordering::SeqCst);
        }
        // Counted after the slot is out: the consumer need not wait for it.
        // A message within the first line adds nothing (`written`).
        if self.end > LINE {
            self.out.note_written(self.off, self.span, self.end);
        }
        let sleeping = self.out.map.u32_at(SLEEPING_OFF);
        sleeping.load(Ordering::Relaxed) != 0 && sleeping.swap(0, Ordering::Relaxed) != 0
    }
}
