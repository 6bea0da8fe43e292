//! Completion queues (fi_cq(3)).
//!
//! One ordered queue per CQ holds successes and errors together, so an
//! error is reported exactly where it happened among the successes:
//! `fi_cq_read` returns the successes before it, then -FI_EAVAIL until
//! `fi_cq_readerr` takes it. The queue never drops an entry: the attribute
//! size is only the preallocation, beyond it the queue grows (libfabric lets
//! a provider either grow or report overrun; losing a completion would hang
//! the application, so we grow).
//!
//! Manual progress: a read that finds the queue empty drives the bound
//! endpoints (`Progress`) once and looks again; blocking reads sleep on the
//! CQ's wait object (see wait.rs) between rounds. `progress()` is never
//! called with the queue lock held, because it pushes into this queue.
//!
//! The completions such a pass makes for the CQ being read, on the reading
//! thread, go straight back to the caller (`Handoff`): a ping-pong's every
//! message would otherwise take the queue's lock twice, in and out.
//!
//! The read after one whose pass handed completions back makes no pass
//! (`handed`): it returns what is queued, or -FI_EAGAIN. Open MPI reads
//! its CQ until it finds nothing before it answers a message
//! (`ompi_mtl_ofi_progress`), so that read lay between every message and
//! its answer; a pass there, even one that only looks at the rings, cost
//! the message more than the rest of the read.

use crate::domain::Domain;
use crate::ffi::*;
use crate::fid::{base_ops, fid_header, FidObj, ParentRef, Refs, Table};
use crate::gate::{gate_mutex, GateMutex};
use crate::progress::{Progress, Spin};
use crate::wait::{check_wait_attr, control_wait, deadline_ms, Sources, Wait, WaitSet, Waitable};
use std::cell::Cell;
use std::collections::VecDeque;
use std::ffi::{c_char, c_void};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering, Ordering::SeqCst};
use std::sync::{Arc, Weak};

/// Successes a read's own progress pass hands back without the queue: a
/// whole shm receive batch (32 messages a pass), so that a window of
/// messages read 100 at a time (Open MPI) queues none of them. With 8,
/// three of every four went through the queue's lock both ways:
/// `bench/pollbench-callgrind`'s window-of-64 path 1844 → 1773
/// instructions a message.
const HANDOFF: usize = 32;

/// The completions a `Cq::read` pass made for that CQ on this thread,
/// while the queue was empty: handed back to the read directly, in the
/// order they came. Once one must queue (an error, or more than the read
/// takes), those held go to the queue first and the rest behind them, so
/// the order of a CQ's entries is kept. Other threads' completions, and
/// other CQs', queue as usual; if another thread queued for this CQ while
/// the pass ran (the progress thread's pass may end just before ours
/// begins, with older completions), what the pass holds goes behind them.
/// Cells, not a RefCell: the thread's own, never borrowed across a call,
/// and every message checks it (a borrow flag cost more than the fields).
struct Handoff {
    /// The CQ being read (its address, only compared), or 0.
    cq: Cell<usize>,
    /// Entries the read takes.
    room: Cell<usize>,
    /// Something of this CQ was queued during the pass: no more handoff.
    queued: Cell<bool>,
    /// Entries this pass queued for this CQ (`Cq::pushed` counts them
    /// with everyone else's).
    own: Cell<u64>,
    got: [Cell<CqEntry>; HANDOFF],
    n: Cell<usize>,
}

/// Ends a `Cq::progress_handoff` pass, even one a panic cuts short: what
/// it holds then goes to the queue rather than being lost.
struct HandoffPass<'a>(&'a Cq);

impl Drop for HandoffPass<'_> {
    fn drop(&mut self) {
        // Normally the read took everything (n = 0): nothing is queued.
        // (Queueing does not come back to the handoff.)
        HANDOFF_TO.with(|h| {
            h.cq.set(0);
            for e in &h.got[..h.n.replace(0)] {
                self.0.enqueue_ok(&e.get());
            }
        });
    }
}

thread_local! {
    static HANDOFF_TO: Handoff = const {
        Handoff {
            cq: Cell::new(0),
            room: Cell::new(0),
            queued: Cell::new(false),
            own: Cell::new(0),
            got: [const { Cell::new(CqEntry::EMPTY) }; HANDOFF],
            n: Cell::new(0),
        }
    };
}

/// Default queue preallocation when the application asks for size 0.
pub const DEFAULT_CQ_SIZE: usize = 1024;
/// Cap on the preallocation, whatever size is asked for: the queue grows on
/// demand anyway.
const MAX_PREALLOC: usize = 1 << 16;

/// One completion, in the widest (tagged) format plus the source address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqEntry {
    pub op_context: *mut c_void,
    pub flags: u64,
    pub len: usize,
    pub buf: *mut c_void,
    pub data: u64,
    pub tag: u64,
    /// fi_addr_t of the sender, FI_ADDR_NOTAVAIL when unknown.
    pub src: u64,
}
// SAFETY: the pointers are the application's opaque tokens (its context and
// its receive buffer), carried back to it and never dereferenced by gnix.
unsafe impl Send for CqEntry {}

impl CqEntry {
    const EMPTY: CqEntry = CqEntry {
        op_context: std::ptr::null_mut(),
        flags: 0,
        len: 0,
        buf: std::ptr::null_mut(),
        data: 0,
        tag: 0,
        src: FI_ADDR_NOTAVAIL,
    };

    /// Its fields in the order of the widest entry format (each format
    /// writes a prefix of them).
    #[inline(always)]
    fn words(&self) -> [u64; 6] {
        [
            self.op_context as u64,
            self.flags,
            self.len as u64,
            self.buf as u64,
            self.data,
            self.tag,
        ]
    }

    /// The entry of an operation that has only its context and flags (a
    /// send's, an RMA's).
    #[inline(always)]
    fn op(ctx: usize, flags: u64) -> CqEntry {
        CqEntry {
            op_context: ctx as *mut c_void,
            flags,
            ..CqEntry::EMPTY
        }
    }
}

impl Default for CqEntry {
    fn default() -> Self {
        CqEntry::EMPTY
    }
}

/// An operation that completed in error.
#[derive(Clone, Debug, Default)]
pub struct CqError {
    pub entry: CqEntry,
    /// Positive FI_E* code.
    pub err: i32,
    /// gnix detail code, shown by fi_cq_strerror.
    pub prov_errno: i32,
    /// Bytes of a truncated receive that did not fit.
    pub olen: usize,
    /// E.g. the raw source address for FI_EADDRNOTAVAIL (FI_SOURCE_ERR).
    pub err_data: Vec<u8>,
}

impl CqError {
    /// An error completion with no overflow length and no error data, the
    /// provider errno equal to the libfabric one.
    pub fn new(entry: CqEntry, err: i32) -> CqError {
        CqError {
            entry,
            err,
            prov_errno: err,
            olen: 0,
            err_data: Vec::new(),
        }
    }
}

enum Slot {
    Ok(CqEntry),
    Err(Box<CqError>),
}

struct Queue {
    q: VecDeque<Slot>,
    nerr: usize,
    /// Backs the err_data pointer handed out when the application gave no
    /// buffer; valid until the next readerr replaces it (fi_cq(3)).
    err_buf: Vec<u8>,
    size: usize,
    grew: bool,
}

impl Queue {
    /// The queue went past the CQ's size: said once.
    #[cold]
    fn grown(&mut self) {
        self.grew = true;
        crate::info!(
            FI_LOG_CQ,
            "CQ holds more than its size ({}) entries; growing rather than dropping",
            self.size
        );
    }
}

/// Validated fi_cq_attr.
#[derive(Clone, Copy, Debug)]
pub struct CqConfig {
    pub size: usize,
    pub format: fi_cq_format,
    pub wait_obj: fi_wait_obj,
    pub wait_cond: fi_cq_wait_cond,
}

impl Default for CqConfig {
    fn default() -> Self {
        CqConfig {
            size: DEFAULT_CQ_SIZE,
            format: FI_CQ_FORMAT_CONTEXT,
            wait_obj: FI_WAIT_NONE,
            wait_cond: FI_CQ_COND_NONE,
        }
    }
}

pub struct Cq {
    /// Bound endpoints (and anything else that pushes here) hold a count:
    /// fi_close is -FI_EBUSY until they let go. Take it with
    /// `ParentRef::new(&cq)`.
    pub refs: Refs,
    /// Every completion that is not handed to its reader directly goes
    /// through it: a gate lock under FI_THREAD_DOMAIN (`gate.rs`), else
    /// parking_lot's mutex (uncontended lock and unlock one atomic each).
    q: GateMutex<Queue>,
    cfg: CqConfig,
    /// Bytes per entry of `cfg.format`.
    entry_size: usize,
    context: usize,
    sources: Sources,
    wait: Wait,
    /// fi_cq_signal count, so a blocked sread can tell it was signaled.
    signals: AtomicU64,
    /// A signal no sread has seen yet: fi_cq_signal before fi_cq_sread
    /// still makes that sread return at once (fabtests cq_signal).
    signal_pending: AtomicBool,
    /// Entries queued, as of the last change under the queue lock: lets a
    /// polling fi_cq_read find out the queue is empty without the lock.
    queued: AtomicUsize,
    /// The last read handed completions back from its own pass: the next
    /// makes none (module comment). Loaded and stored, never swapped: a
    /// read-modify-write would cost every poll a locked instruction, and
    /// two threads reading at once only move which read skips.
    handed: AtomicBool,
    /// The application's empty reads in a row (`Spin`).
    spin: Spin,
    /// Entries ever queued, stored after `queued` under the queue lock: a
    /// read's pass tells by it whether another thread queued meanwhile.
    pushed: AtomicU64,
    domain: Option<ParentRef<Domain>>,
}

// The entry formats are prefixes of one another, eight bytes per field.
const _: () = assert!(std::mem::size_of::<fi_cq_entry>() == 8);
const _: () = assert!(std::mem::size_of::<fi_cq_msg_entry>() == 24);
const _: () = assert!(std::mem::size_of::<fi_cq_data_entry>() == 40);
const _: () = assert!(std::mem::size_of::<fi_cq_tagged_entry>() == 48);

pub fn entry_size(format: fi_cq_format) -> usize {
    match format {
        FI_CQ_FORMAT_MSG => 24,
        FI_CQ_FORMAT_DATA => 40,
        FI_CQ_FORMAT_TAGGED => 48,
        _ => 8,
    }
}

#[inline(always)]
fn encode(e: &CqEntry, out: &mut [u8]) {
    let words = e.words();
    // One arm a format, each a fixed number of stores: a loop over
    // `out`'s words cost every entry read about 20 instructions
    // (bench/pollbench-callgrind).
    match out.len() {
        48 => put_words::<6>(&words, out),
        40 => put_words::<5>(&words, out),
        24 => put_words::<3>(&words, out),
        _ => put_words::<1>(&words, out),
    }
}

/// The first `N` of `words` into `out` (at least `8 * N` bytes).
#[inline(always)]
fn put_words<const N: usize>(words: &[u64; 6], out: &mut [u8]) {
    for (i, w) in words[..N].iter().enumerate() {
        out[8 * i..8 * i + 8].copy_from_slice(&w.to_ne_bytes());
    }
}

/// `Cq::put_run` for a format of `W` words.
#[inline(always)]
fn put_run<const W: usize>(
    slots: &[Slot],
    max: usize,
    out: &mut [u8],
    mut src: Option<&mut [u64]>,
    at: usize,
) -> usize {
    let mut n = 0;
    for (s, o) in slots.iter().take(max).zip(out[at * 8 * W..].chunks_exact_mut(8 * W)) {
        let Slot::Ok(e) = s else { break };
        put_words::<W>(&e.words(), o);
        if let Some(s) = src.as_deref_mut() {
            s[at + n] = e.src;
        }
        n += 1;
    }
    n
}

impl Cq {
    pub fn new(
        cfg: CqConfig,
        context: *mut c_void,
        waitset: Option<Arc<WaitSet>>,
        domain: Option<ParentRef<Domain>>,
    ) -> Result<Arc<Cq>, i32> {
        let size = if cfg.size == 0 { DEFAULT_CQ_SIZE } else { cfg.size };
        let format = if cfg.format == FI_CQ_FORMAT_UNSPEC {
            FI_CQ_FORMAT_CONTEXT
        } else {
            cfg.format
        };
        let cfg = CqConfig { size, format, ..cfg };
        let gate = domain.as_ref().and_then(|d| d.gate.clone());
        let cq = Arc::new(Cq {
            refs: Refs::default(),
            q: gate_mutex(
                gate.clone(),
                Queue {
                    q: VecDeque::with_capacity(size.min(MAX_PREALLOC)),
                    nerr: 0,
                    err_buf: Vec::new(),
                    size,
                    grew: false,
                },
            ),
            entry_size: entry_size(format),
            cfg,
            context: context as usize,
            sources: Sources::new(gate),
            wait: Wait::new(waitset, cfg.wait_obj)?,
            signals: AtomicU64::new(0),
            signal_pending: AtomicBool::new(false),
            queued: AtomicUsize::new(0),
            handed: AtomicBool::new(false),
            spin: Spin::of(FI_LOG_CQ, "CQ"),
            pushed: AtomicU64::new(0),
            domain,
        });
        if let Some(ws) = cq.wait.set() {
            ws.add_member(Arc::downgrade(&cq) as Weak<dyn Waitable>);
        }
        Ok(cq)
    }

    /// The context given to fi_cq_open (what fi_poll reports).
    pub fn context(&self) -> *mut c_void {
        self.context as *mut c_void
    }

    #[inline(never)]
    fn enqueue(&self, s: Slot) {
        self.enqueue_in(s)
    }

    /// `enqueue` of a success, which is built in the queue, not moved
    /// through the call.
    #[inline(never)]
    fn enqueue_ok(&self, e: &CqEntry) {
        self.enqueue_in(Slot::Ok(*e))
    }

    #[inline(always)]
    fn enqueue_in(&self, s: Slot) {
        {
            let mut q = self.q.lock();
            if let Slot::Err(_) = s {
                q.nerr += 1;
            }
            q.q.push_back(s);
            self.queued.store(q.q.len(), Ordering::Release);
            // After `queued`: whoever sees this count sees the entry too.
            self.pushed
                .store(self.pushed.load(Ordering::Relaxed) + 1, Ordering::Release);
            if !q.grew && q.q.len() > q.size {
                q.grown();
            }
        }
        // After the unlock: the queue lock orders this against a sleeper's
        // arm + check (see WaitObj::arm).
        self.wait.notify();
    }

    /// Queues a successful completion. Never fails, never drops.
    pub fn push(&self, e: CqEntry) {
        self.push_made(move || e)
    }

    /// `push` of a success that has only its operation's context and
    /// flags (a send's, an RMA's). The entry is built where it goes, not
    /// by the caller: one built in the caller's frame and copied whole in
    /// the queue's (with wider loads than its stores) is a
    /// store-forwarding miss, which waits for every store before it (on a
    /// sender, the ring slot just written for another core).
    #[inline]
    pub fn push_op(&self, ctx: usize, flags: u64) {
        self.push_made(move || CqEntry::op(ctx, flags))
    }

    /// `push_op` from the application's own call into the provider (a
    /// send that completed as it was posted), which is never inside a
    /// `read`'s pass on this thread: straight to the queue, without
    /// looking up the thread's handoff (a thread-local through
    /// `__tls_get_addr` in a shared library, some 20 instructions a send).
    #[inline]
    pub fn push_op_in_call(&self, ctx: usize, flags: u64) {
        self.enqueue_made(move || CqEntry::op(ctx, flags))
    }

    #[inline(always)]
    fn push_made(&self, make: impl FnOnce() -> CqEntry + Copy) {
        let id = self as *const Cq as usize;
        let kept = HANDOFF_TO.with(|h| {
            if h.cq.get() != id {
                return false;
            }
            let n = h.n.get();
            if h.queued.get() || n >= h.room.get() {
                self.pass_queues_one(h);
                return false;
            }
            h.got[n].set(make());
            h.n.set(n + 1);
            true
        });
        if !kept {
            self.enqueue_made(make);
        }
    }

    /// `enqueue_ok` of an entry `make` builds, in the queue.
    #[inline(never)]
    fn enqueue_made(&self, make: impl FnOnce() -> CqEntry) {
        self.enqueue_in(Slot::Ok(make()))
    }

    /// Queues an error completion, in order with the successes.
    pub fn push_err(&self, e: CqError) {
        let id = self as *const Cq as usize;
        HANDOFF_TO.with(|h| {
            if h.cq.get() == id {
                self.pass_queues_one(h);
            }
        });
        self.enqueue(Slot::Err(Box::new(e)));
    }

    /// This CQ's pass is about to queue one entry of its own (the caller
    /// queues it): the handoff goes first, and `own` counts it.
    fn pass_queues_one(&self, h: &Handoff) {
        self.handoff_to_queue(h);
        h.own.set(h.own.get() + 1);
    }

    /// This CQ's pass must queue something: what the handoff holds came
    /// before it and goes first; the rest of the pass queues.
    fn handoff_to_queue(&self, h: &Handoff) {
        if !h.queued.replace(true) {
            let n = h.n.replace(0);
            for e in &h.got[..n] {
                self.enqueue_ok(&e.get());
            }
            h.own.set(h.own.get() + n as u64);
        }
    }

    /// One progress pass of this CQ's sources for a read of up to `room`
    /// entries (the queue was empty): the successes it made for this CQ on
    /// this thread, before anything of this CQ had to be queued.
    /// Returns how many it wrote to `got`.
    fn progress_handoff(&self, room: usize, mut put: impl FnMut(usize, &CqEntry)) -> usize {
        let id = self as *const Cq as usize;
        // Entries queued so far; and none waiting, or the pass's would go
        // before them (a push after the first load counts as another
        // thread's, below).
        let start = self.pushed.load(Ordering::Acquire);
        let empty = self.queued.load(Ordering::Acquire) == 0;
        let mine = empty
            && HANDOFF_TO.with(|h| {
                // A read within another read's pass (none does today) leaves
                // the handoff to the outer one.
                if h.cq.get() != 0 {
                    return false;
                }
                h.cq.set(id);
                h.room.set(room.min(HANDOFF));
                h.queued.set(false);
                h.own.set(0);
                h.n.set(0);
                true
            });
        if !mine {
            self.sources.progress();
            return 0;
        }
        let pass = HandoffPass(self);
        self.sources.progress();
        // Straight into the reader's buffer: an empty poll copies nothing.
        let n = HANDOFF_TO.with(|h| {
            if self.pushed.load(Ordering::Acquire) - start != h.own.get() {
                // Another thread queued for this CQ during the pass: its
                // entries may be older than ours; ours go behind them.
                self.handoff_to_queue(h);
            }
            let n = h.n.replace(0);
            // One entry, a ping-pong's every read: no loop (as the longer
            // array made it, it cost such a read 20 instructions).
            if n == 1 {
                put(0, &h.got[0].get());
                return 1;
            }
            for (i, e) in h.got[..n].iter().enumerate() {
                put(i, &e.get());
            }
            n
        });
        drop(pass);
        n
    }

    /// An endpoint bound to this CQ: reads and blocking reads drive its
    /// progress and sleep on its `wait_fds`/`next_deadline`.
    pub fn add_source(&self, p: Weak<dyn Progress>) {
        self.sources.add(p);
    }
    pub fn remove_source(&self, p: &Weak<dyn Progress>) {
        self.sources.remove(p);
    }
    pub fn progress_sources(&self) {
        self.sources.progress();
    }

    /// Anything to read, success or error.
    pub fn has_entries(&self) -> bool {
        !self.q.lock().q.is_empty()
    }

    /// Moves up to `count` successes into `out`, stopping before an error.
    /// Takes nothing unless `min` successes are ready or an error follows
    /// the ready ones (a threshold cannot be reached past an error).
    /// Entry `i` of a read: its bytes in `out`, its source in `src`
    /// (fi_cq_readfrom).
    #[inline(always)]
    fn put(&self, i: usize, e: &CqEntry, out: &mut [u8], src: Option<&mut [u64]>) {
        let sz = self.entry_size;
        encode(e, &mut out[i * sz..(i + 1) * sz]);
        if let Some(s) = src {
            s[i] = e.src;
        }
    }

    /// The successes at the front of `slots`, at most `max`, written out
    /// as entries `at..` of `out` (and their sources into `src`): how
    /// many. One loop a format, chosen once: each entry is then its
    /// stores and little more (`put`, with its slicing and its format's
    /// arm, cost a read of 64 some 48 instructions an entry).
    fn put_run(&self, slots: &[Slot], max: usize, out: &mut [u8], src: Option<&mut [u64]>, at: usize) -> usize {
        match self.entry_size {
            48 => put_run::<6>(slots, max, out, src, at),
            40 => put_run::<5>(slots, max, out, src, at),
            24 => put_run::<3>(slots, max, out, src, at),
            _ => put_run::<1>(slots, max, out, src, at),
        }
    }

    fn take(&self, out: &mut [u8], count: usize, mut src: Option<&mut [u64]>, min: usize) -> isize {
        let mut q = self.q.lock();
        if min > 1 {
            let ready = q.q.iter().take(min).take_while(|s| matches!(s, Slot::Ok(_))).count();
            if ready < min && ready == q.q.len() {
                return -FI_EAGAIN as isize;
            }
        }
        // The successes up to the first error: written out, then dropped
        // from the queue together.
        let (front, back) = q.q.as_slices();
        let mut n = self.put_run(front, count, out, src.as_deref_mut(), 0);
        if n == front.len() && n < count && !back.is_empty() {
            n += self.put_run(back, count - n, out, src, n);
        }
        if n == 0 && count > 0 && matches!(q.q.front(), Some(Slot::Err(_))) {
            return -FI_EAVAIL as isize;
        }
        // Successes only: nothing to drop. (`drain(..n)` cost a read of
        // one entry some 110 instructions, bench/pollbench-callgrind.)
        if n == q.q.len() {
            q.q.clear();
        } else {
            for _ in 0..n {
                q.q.pop_front();
            }
        }
        self.queued.store(q.q.len(), Ordering::Release);
        if n == 0 {
            -FI_EAGAIN as isize
        } else {
            n as isize
        }
    }

    /// 0 (something to read), -FI_EAVAIL (an error is next) or -FI_EAGAIN.
    fn status(&self) -> isize {
        match self.q.lock().q.front() {
            None => -FI_EAGAIN as isize,
            Some(Slot::Err(_)) => -FI_EAVAIL as isize,
            Some(Slot::Ok(_)) => 0,
        }
    }

    /// fi_cq_read / fi_cq_readfrom. `out` holds at least `count` entries of
    /// this CQ's format; `src`, if given, at least `count` addresses.
    /// Returns the number read, -FI_EAGAIN or -FI_EAVAIL. A long run of
    /// empty reads gives the CPU away now and then (`Spin`).
    pub fn read(&self, out: &mut [u8], count: usize, src: Option<&mut [u64]>) -> isize {
        let r = self.read_once(out, count, src);
        if r == -FI_EAGAIN as isize {
            self.spin.empty();
        } else {
            self.spin.found();
        }
        r
    }

    /// `read`, one poll. The read after one that found completions in its
    /// pass makes no pass (`handed`).
    #[inline(always)]
    fn read_once(&self, out: &mut [u8], count: usize, mut src: Option<&mut [u64]>) -> isize {
        if count == 0 {
            // A zero count is the documented way to just drive progress.
            self.sources.progress();
            return self.status();
        }
        let handed = self.handed.load(Ordering::Relaxed);
        if handed {
            self.handed.store(false, Ordering::Relaxed);
        }
        // Polling an empty CQ is the hot loop of every ping-pong: skip the
        // lock when there is certainly nothing (a push racing this load is
        // found by the take after progress).
        if self.queued.load(Ordering::Acquire) != 0 {
            let r = self.take(out, count, src.as_deref_mut(), 1);
            if r != -FI_EAGAIN as isize {
                return r;
            }
        }
        if handed {
            return -FI_EAGAIN as isize;
        }
        let n = self.progress_handoff(count, |i, e| self.put(i, e, out, src.as_deref_mut()));
        if n > 0 {
            // What the pass queued for this CQ (an error, the overflow)
            // came after these: the next read finds it.
            self.handed.store(true, Ordering::Relaxed);
            return n as isize;
        }
        if self.queued.load(Ordering::Acquire) == 0 {
            return -FI_EAGAIN as isize;
        }
        // More than the handoff held, or another thread's: the next read
        // skips its pass as after a handoff.
        let r = self.take(out, count, src, 1);
        if r > 0 {
            self.handed.store(true, Ordering::Relaxed);
        }
        r
    }

    /// fi_cq_sread / fi_cq_sreadfrom. `threshold` is the FI_CQ_COND_THRESHOLD
    /// value (ignored unless the CQ was opened with that wait_cond);
    /// `timeout` in ms, negative for none. -FI_EAGAIN on timeout or
    /// fi_cq_signal with nothing to read.
    pub fn sread(
        &self,
        out: &mut [u8],
        count: usize,
        mut src: Option<&mut [u64]>,
        threshold: usize,
        timeout: i32,
    ) -> isize {
        let w = match &self.wait {
            Wait::Own(w) => w.clone(),
            Wait::None => {
                crate::warn!(FI_LOG_CQ, "fi_cq_sread: the CQ was opened with FI_WAIT_NONE");
                return -FI_ENOSYS as isize;
            }
            Wait::Set(..) => {
                crate::warn!(FI_LOG_CQ, "fi_cq_sread: the CQ belongs to a wait set; use fi_wait");
                return -FI_EINVAL as isize;
            }
        };
        if count == 0 {
            return self.read(out, 0, src);
        }
        let min = if self.cfg.wait_cond == FI_CQ_COND_THRESHOLD {
            threshold.clamp(1, count)
        } else {
            1
        };
        let sig0 = self.signals.load(SeqCst);
        let r = w.block(
            || self.sources.progress(),
            |fds: &mut Vec<RawFd>, next: &mut Option<u64>| self.sources.collect(fds, next),
            |gen| self.sources.disarm(gen),
            || {
                let r = self.take(out, count, src.as_deref_mut(), min);
                (r != -FI_EAGAIN as isize).then_some(r)
            },
            deadline_ms(timeout),
            || self.signal_pending.swap(false, SeqCst) | (self.signals.load(SeqCst) != sig0),
        );
        // Timed out or signaled: a threshold not reached still returns what
        // is there rather than sitting on it.
        r.unwrap_or_else(|| self.take(out, count, src, 1))
    }

    /// Whether the CQ belongs to `d` (one opened without a domain, in
    /// tests, belongs to any).
    pub fn of_domain(&self, d: &Arc<Domain>) -> bool {
        self.domain.as_ref().is_none_or(|c| Arc::ptr_eq(&c.0, d))
    }

    /// Its lock is a domain's gate (`gate.rs`).
    pub fn gated(&self) -> bool {
        self.domain.as_ref().is_some_and(|d| d.gate.is_some())
    }

    /// fi_cq_signal: wakes every thread blocked in sread.
    pub fn signal(&self) -> i32 {
        match self.wait.obj() {
            Some(w) => {
                self.signal_pending.store(true, SeqCst);
                self.signals.fetch_add(1, SeqCst);
                w.kick();
                0
            }
            None => {
                crate::warn!(FI_LOG_CQ, "fi_cq_signal: the CQ has no wait object");
                -FI_ENOSYS
            }
        }
    }

    /// fi_cq_readerr: takes the oldest error entry. `user` is the
    /// application's err_data buffer when it gave one (err_data_size > 0):
    /// the data is copied there and err_data_size says how much. Otherwise
    /// err_data points at a CQ-owned copy valid until the next readerr.
    pub fn readerr(&self, user: Option<&mut [u8]>) -> Result<fi_cq_err_entry, i32> {
        let mut q = self.q.lock();
        if q.nerr == 0 {
            return Err(-FI_EAGAIN);
        }
        let Some(i) = q.q.iter().position(|s| matches!(s, Slot::Err(_))) else {
            return Err(-FI_EAGAIN);
        };
        let Some(Slot::Err(e)) = q.q.remove(i) else {
            return Err(-FI_EAGAIN);
        };
        self.queued.store(q.q.len(), Ordering::Release);
        q.nerr -= 1;
        let e = *e;
        let (err_data, err_data_size) = match user {
            Some(b) if !b.is_empty() => {
                let n = b.len().min(e.err_data.len());
                b[..n].copy_from_slice(&e.err_data[..n]);
                (b.as_mut_ptr() as *mut c_void, n)
            }
            _ => {
                q.err_buf = e.err_data;
                let p = if q.err_buf.is_empty() {
                    std::ptr::null_mut()
                } else {
                    q.err_buf.as_mut_ptr() as *mut c_void
                };
                (p, q.err_buf.len())
            }
        };
        Ok(fi_cq_err_entry {
            op_context: e.entry.op_context,
            flags: e.entry.flags,
            len: e.entry.len,
            buf: e.entry.buf,
            data: e.entry.data,
            tag: e.entry.tag,
            olen: e.olen,
            err: e.err,
            prov_errno: e.prov_errno,
            err_data,
            err_data_size,
        })
    }

    /// fi_trywait on this CQ.
    pub(crate) fn trywait(&self) -> i32 {
        self.wait.trywait(&self.sources, FI_LOG_CQ, "CQ", || self.has_entries())
    }
}

impl Waitable for Cq {
    fn progress_sources(&self) {
        self.sources.progress();
    }
    fn has_event(&self) -> bool {
        self.has_entries()
    }
    fn collect(&self, fds: &mut Vec<RawFd>, next: &mut Option<u64>) -> u64 {
        self.sources.collect(fds, next)
    }
}

impl AsRef<Refs> for Cq {
    fn as_ref(&self) -> &Refs {
        &self.refs
    }
}

// ---------------------------------------------------------------------------
// The C face

type Obj = FidObj<fid_cq, Cq>;

/// Reads and checks an application's fi_cq_attr (NULL means defaults).
///
/// # Safety
/// `attr` must be NULL or point to a readable fi_cq_attr.
unsafe fn parse_attr(attr: *const fi_cq_attr) -> Result<(CqConfig, Option<Arc<WaitSet>>), i32> {
    if attr.is_null() {
        return Ok((CqConfig::default(), None));
    }
    // SAFETY: the caller's contract: `attr` is readable (and not NULL here).
    let a = unsafe { &*attr };
    if a.flags & FI_PEER != 0 {
        crate::warn!(FI_LOG_CQ, "fi_cq_open: peer CQs (FI_PEER) are not supported");
        return Err(-FI_ENOSYS);
    }
    if a.flags & !FI_AFFINITY != 0 {
        crate::warn!(FI_LOG_CQ, "fi_cq_open: unknown flags {:#x}", a.flags & !FI_AFFINITY);
        return Err(-FI_EINVAL);
    }
    if a.format > FI_CQ_FORMAT_TAGGED {
        crate::warn!(FI_LOG_CQ, "fi_cq_open: format {} is not supported", a.format);
        return Err(-FI_ENOSYS);
    }
    let ws = check_wait_attr(a.wait_obj, a.wait_set, FI_LOG_CQ, "fi_cq_open")?;
    let wait_cond = if a.wait_obj == FI_WAIT_NONE {
        FI_CQ_COND_NONE
    } else {
        a.wait_cond
    };
    if wait_cond != FI_CQ_COND_NONE && wait_cond != FI_CQ_COND_THRESHOLD {
        crate::warn!(FI_LOG_CQ, "fi_cq_open: unknown wait_cond {}", wait_cond);
        return Err(-FI_EINVAL);
    }
    Ok((
        CqConfig {
            size: a.size,
            format: a.format,
            wait_obj: a.wait_obj,
            wait_cond,
        },
        ws,
    ))
}

/// fi_cq_open, called by the domain's shim.
///
/// # Safety
/// `attr` must be NULL or point to a readable fi_cq_attr.
pub unsafe fn open(domain: &Arc<Domain>, attr: *mut fi_cq_attr, context: *mut c_void) -> Result<*mut fid_cq, i32> {
    // SAFETY: the caller's contract (`attr` NULL or readable).
    let (cfg, ws) = unsafe { parse_attr(attr) }?;
    let cq = Cq::new(cfg, context, ws, Some(ParentRef::new(domain)))?;
    Ok(into_fid(cq))
}

/// Wraps CQ state in the fid_cq the application holds.
pub(crate) fn into_fid(cq: Arc<Cq>) -> *mut fid_cq {
    let c = fid_cq {
        fid: fid_header(FI_CLASS_CQ, cq.context(), CQ_FI_OPS.ptr()),
        ops: CQ_OPS.ptr(),
    };
    Obj::create(c, cq)
}

/// The CQ behind an application-supplied fid (endpoint bind, poll sets):
/// checks class and magic.
///
/// # Safety
/// `p` must be NULL or point to readable memory of at least a `struct fid`.
pub unsafe fn from_fid(p: *const c_void) -> Option<Arc<Cq>> {
    // SAFETY: the caller's contract (`p` NULL or a readable fid).
    (unsafe { Obj::get(p, FI_CLASS_CQ) }).cloned()
}

unsafe extern "C" fn close(f: *mut fid) -> i32 {
    abi_guard!("close", -FI_EOTHER, || {
        // SAFETY: `f` is the application's fid, or NULL (fi_close(3)).
        unsafe {
            crate::fid::close_unless_busy::<fid_cq, Cq>(
                f,
                FI_CLASS_CQ,
                FI_LOG_CQ,
                "endpoints or counters bound to the CQ",
            )
        }
    })
}

unsafe extern "C" fn control(f: *mut fid, cmd: i32, arg: *mut c_void) -> i32 {
    abi_guard!("control", -FI_EOTHER, || {
        // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
        let Some(cq) = (unsafe { Obj::get(f as *const c_void, FI_CLASS_CQ) }) else {
            return -FI_EINVAL;
        };
        // SAFETY: `arg` is the application's fi_control argument for `cmd`.
        unsafe {
            control_wait(
                cq.cfg.wait_obj,
                cq.wait.own(),
                |w| {
                    let mut fds = Vec::new();
                    let gen = cq.sources.collect(&mut fds, &mut None);
                    w.refresh(&mut fds, gen);
                },
                cmd,
                arg,
                FI_LOG_CQ,
            )
        }
    })
}

/// Borrows the application's entry array and source-address array.
///
/// # Safety
/// `buf` must be writable for `count` entries of `cq`'s format and `src`
/// NULL or writable for `count` addresses.
unsafe fn out_bufs<'a>(
    cq: &Cq,
    buf: *mut c_void,
    count: usize,
    src: *mut fi_addr_t,
) -> Result<(&'a mut [u8], Option<&'a mut [u64]>), isize> {
    if count == 0 {
        return Ok((&mut [], None));
    }
    if buf.is_null() {
        crate::warn!(FI_LOG_CQ, "fi_cq_read: NULL buffer with count {}", count);
        return Err(-FI_EINVAL as isize);
    }
    let Some(bytes) = count.checked_mul(cq.entry_size) else {
        return Err(-FI_EINVAL as isize);
    };
    // SAFETY: the caller's contract: `buf` (non-NULL) holds `count` entries
    // of the CQ's format, `bytes` in all; `src` NULL or `count` addresses.
    let out = unsafe { std::slice::from_raw_parts_mut(buf as *mut u8, bytes) };
    let src = (!src.is_null()).then(|| unsafe { std::slice::from_raw_parts_mut(src, count) });
    Ok((out, src))
}

unsafe extern "C" fn cq_readfrom(c: *mut fid_cq, buf: *mut c_void, count: usize, src: *mut fi_addr_t) -> isize {
    abi_guard!("cq_readfrom", -FI_EOTHER as isize, || {
        // SAFETY: the caller's arguments, under the same contract.
        unsafe { read_from(c, buf, count, src) }
    })
}

/// fi_cq_read and fi_cq_readfrom, inside their entry point's guard (one
/// guard a call: each costs a call into the unwinding machinery).
///
/// # Safety
/// fi_cq_read(3)'s contract: `c` is a CQ fid or NULL, `buf` holds `count`
/// entries, `src` is NULL or holds `count` addresses.
#[inline(always)]
unsafe fn read_from(c: *mut fid_cq, buf: *mut c_void, count: usize, src: *mut fi_addr_t) -> isize {
    // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
    let Some(cq) = (unsafe { Obj::get(c as *const c_void, FI_CLASS_CQ) }) else {
        return -FI_EINVAL as isize;
    };
    // SAFETY: fi_cq_read(3) contract: `buf` holds `count` entries, `src` NULL or `count` addresses.
    match unsafe { out_bufs(cq, buf, count, src) } {
        Ok((out, src)) => cq.read(out, count, src),
        Err(e) => e,
    }
}

unsafe extern "C" fn cq_read(c: *mut fid_cq, buf: *mut c_void, count: usize) -> isize {
    abi_guard!("cq_read", -FI_EOTHER as isize, || {
        // SAFETY: the caller's arguments, under the same contract.
        unsafe { read_from(c, buf, count, std::ptr::null_mut()) }
    })
}

unsafe extern "C" fn cq_sreadfrom(
    c: *mut fid_cq,
    buf: *mut c_void,
    count: usize,
    src: *mut fi_addr_t,
    cond: *const c_void,
    timeout: i32,
) -> isize {
    abi_guard!("cq_sreadfrom", -FI_EOTHER as isize, || {
        // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
        let Some(cq) = (unsafe { Obj::get(c as *const c_void, FI_CLASS_CQ) }) else {
            return -FI_EINVAL as isize;
        };
        let threshold = if cq.cfg.wait_cond == FI_CQ_COND_THRESHOLD && !cond.is_null() {
            // SAFETY: with FI_CQ_COND_THRESHOLD, `cond` points to a size_t (fi_cq(3)).
            unsafe { *(cond as *const usize) }
        } else {
            1
        };
        // SAFETY: as in cq_readfrom.
        match unsafe { out_bufs(cq, buf, count, src) } {
            Ok((out, src)) => cq.sread(out, count, src, threshold, timeout),
            Err(e) => e,
        }
    })
}

unsafe extern "C" fn cq_sread(
    c: *mut fid_cq,
    buf: *mut c_void,
    count: usize,
    cond: *const c_void,
    timeout: i32,
) -> isize {
    abi_guard!("cq_sread", -FI_EOTHER as isize, || {
        // SAFETY: the caller's arguments, under the same contract.
        unsafe { cq_sreadfrom(c, buf, count, std::ptr::null_mut(), cond, timeout) }
    })
}

unsafe extern "C" fn cq_readerr(c: *mut fid_cq, buf: *mut fi_cq_err_entry, flags: u64) -> isize {
    abi_guard!("cq_readerr", -FI_EOTHER as isize, || {
        // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
        let Some(cq) = (unsafe { Obj::get(c as *const c_void, FI_CLASS_CQ) }) else {
            return -FI_EINVAL as isize;
        };
        if buf.is_null() {
            crate::warn!(FI_LOG_CQ, "fi_cq_readerr: NULL buffer");
            return -FI_EINVAL as isize;
        }
        if flags != 0 {
            crate::warn!(FI_LOG_CQ, "fi_cq_readerr: unknown flags {:#x}", flags);
            return -FI_EINVAL as isize;
        }
        // SAFETY: `buf` points to the application's fi_cq_err_entry; with a
        // nonzero err_data_size, err_data is its buffer of that size (fi_cq(3)).
        let user = unsafe { crate::abi::app_err_data((*buf).err_data, (*buf).err_data_size) };
        match cq.readerr(user) {
            Ok(entry) => {
                // Writes the 1.17 fields only: a newer core's larger struct
                // keeps its tail.
                // SAFETY: `buf` is the application's error entry (non-NULL, checked above); only the 1.17 fields are written.
                unsafe { *buf = entry };
                1
            }
            Err(r) => r as isize,
        }
    })
}

unsafe extern "C" fn cq_signal(c: *mut fid_cq) -> i32 {
    abi_guard!("cq_signal", -FI_EOTHER, || {
        // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
        let Some(cq) = (unsafe { Obj::get(c as *const c_void, FI_CLASS_CQ) }) else {
            return -FI_EINVAL;
        };
        cq.signal()
    })
}

unsafe extern "C" fn cq_strerror(
    _c: *mut fid_cq,
    prov_errno: i32,
    _err_data: *const c_void,
    buf: *mut c_char,
    len: usize,
) -> *const c_char {
    abi_guard!("cq_strerror", std::ptr::null(), || {
        // SAFETY: fi_cq_strerror(3): `buf` is NULL or holds `len` bytes.
        unsafe { strerror(prov_errno, buf, len) }
    })
}

static CQ_FI_OPS: Table<fi_ops> = Table(base_ops(close, None, Some(control), None));
static CQ_OPS: Table<fi_ops_cq> = Table(fi_ops_cq {
    size: std::mem::size_of::<fi_ops_cq>(),
    read: Some(cq_read),
    readfrom: Some(cq_readfrom),
    readerr: Some(cq_readerr),
    sread: Some(cq_sread),
    sreadfrom: Some(cq_sreadfrom),
    signal: Some(cq_signal),
    strerror: Some(cq_strerror),
});

mod errstr;
pub(crate) use errstr::strerror;

#[cfg(test)]
mod tests;
