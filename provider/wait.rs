//! Wait objects, wait sets (`fi_wait_open`), poll sets (`fi_poll_open`) and
//! `fi_trywait`.
//!
//! Every CQ, counter and EQ that may block owns (or, with FI_WAIT_SET, shares)
//! a `WaitObj`: an epoll descriptor holding an eventfd, a timerfd and the
//! descriptors of the endpoints that feed the queue. A blocked reader sleeps
//! in `ppoll` on that single epoll descriptor, which is also the descriptor
//! `FI_GETWAIT` hands to the application (the libfabric util way), so the
//! application's own `poll`/`epoll` sees the same readiness we do.
//!
//! Pushers only pay for a wake-up (an eventfd write) when somebody declared
//! it is about to sleep (`arm`): a reader that progresses the endpoint itself
//! never needs one, which keeps the ping-pong path free of syscalls.

use crate::ffi::*;
use crate::fid::{base_ops, fid_header, FidObj, ParentRef, Refs, Table};
use crate::gate::{gate_mutex, Gate, GateMutex};
use crate::progress::{now_ns, Progress};
use rustix::event::{epoll, eventfd, EventfdFlags, PollFd, PollFlags};
use rustix::io::Errno;
use rustix::time::{Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags, Timespec};
use std::any::Any;
use std::ffi::c_void;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// A poisoned lock only means another thread panicked while holding it; the
/// queues stay structurally valid, and panicking in turn would cross FFI.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Absolute `now_ns` deadline of a libfabric millisecond timeout (negative:
/// none).
pub(crate) fn deadline_ms(timeout: i32) -> Option<u64> {
    (timeout >= 0).then(|| now_ns().saturating_add(timeout as u64 * 1_000_000))
}

fn min_opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

// ---------------------------------------------------------------------------
// Sources: the endpoints that feed a CQ, counter or EQ.

/// Copy-on-write list, so a reader can walk it and call `progress()` without
/// holding a lock an endpoint might need while it binds or closes. The
/// polling path (`progress`) walks it under a read lock it only tries to
/// take (an Arc clone and drop would cost two more atomics per poll).
///
/// The list holds its sources strongly, so a poll calls them without an
/// upgrade (two more atomics): an endpoint takes itself out when it closes
/// (`remove`, from ep/ctl.rs), and a CQ or counter an endpoint is bound to
/// cannot close before it (-FI_EBUSY), so the cycle endpoint -> CQ ->
/// endpoint never outlives the endpoint's fi_close.
pub(crate) struct Sources {
    /// Taken by every poll of the CQ or counter (`progress`): under
    /// FI_THREAD_DOMAIN a gate lock of the domain (`gate.rs`), which costs
    /// the poll no atomic instruction, as the CQ's own queue lock does;
    /// else a mutex. Read under the lock, replaced whole on a change.
    list: GateMutex<Arc<[Arc<dyn Progress>]>>,
    /// Bumped on every change so the epoll set gets rebuilt even when a new
    /// endpoint happens to reuse a closed one's descriptor number.
    gen: AtomicU64,
}

impl Default for Sources {
    fn default() -> Self {
        Self::new(None)
    }
}

impl Sources {
    /// The sources of an object of the domain whose gate is `gate`, if it
    /// has one.
    pub fn new(gate: Option<Arc<Gate>>) -> Self {
        Sources {
            list: gate_mutex(gate, Arc::from(Vec::new())),
            gen: AtomicU64::new(0),
        }
    }
    /// `p` joins (if it is still alive), until `remove`.
    pub fn add(&self, p: Weak<dyn Progress>) {
        let Some(p) = p.upgrade() else { return };
        let mut l = self.list.lock();
        // An endpoint bound for both transmit and receive registers twice,
        // a domain's endpoints once per region or deferred work bound to
        // the counter; progressing each once per round is enough, and an
        // unchanged list needs no new generation.
        if l.iter().any(|s| Arc::ptr_eq(s, &p)) {
            return;
        }
        let mut v: Vec<_> = l.to_vec();
        v.push(p);
        *l = Arc::from(v);
        self.gen.fetch_add(1, SeqCst);
    }
    pub fn remove(&self, p: &Weak<dyn Progress>) {
        let mut l = self.list.lock();
        let v: Vec<_> = l
            .iter()
            .filter(|s| !std::ptr::addr_eq(Arc::as_ptr(s), p.as_ptr()))
            .cloned()
            .collect();
        *l = Arc::from(v);
        self.gen.fetch_add(1, SeqCst);
    }
    pub fn snapshot(&self) -> Arc<[Arc<dyn Progress>]> {
        self.list.lock().clone()
    }
    pub fn progress(&self) {
        // Not to be had while another thread progresses these sources or
        // an endpoint binds or closes: the caller polls again. Never
        // waiting here also means a progress that reaches back into this
        // list cannot deadlock.
        let Some(l) = self.list.try_lock() else { return };
        for s in l.iter() {
            s.progress();
        }
    }
    /// Appends the sources' descriptors, folds their deadlines into `next`,
    /// and returns the generation the descriptor list belongs to.
    pub fn collect(&self, fds: &mut Vec<RawFd>, next: &mut Option<u64>) -> u64 {
        let gen = self.gen.load(SeqCst);
        for s in self.snapshot().iter() {
            s.wait_fds(fds);
            *next = min_opt(*next, s.next_deadline());
            if !s.arm_wakeup() {
                *next = Some(0);
            }
        }
        gen
    }
    /// The sleeper that `collect` (which returned `gen`) armed for is
    /// awake: takes the arming back (`Progress::disarm`). If the list
    /// changed in between, the arming holds: a source armed for good only
    /// keeps its wake-ups, where one disarmed without an arming could
    /// lose another sleeper's.
    pub fn disarm(&self, gen: u64) {
        let l = self.snapshot();
        if self.gen.load(SeqCst) == gen {
            for s in l.iter() {
                s.disarm();
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Descriptor helpers (rustix: owned descriptors, checked errors).

/// A libfabric error code (negative errno) for a failed syscall.
fn fi_err(e: Errno) -> i32 {
    -e.raw_os_error()
}

/// Puts `fd` into the epoll set `epfd` for input, with its number as data.
fn epoll_add(epfd: &OwnedFd, fd: BorrowedFd<'_>) -> rustix::io::Result<()> {
    let data = epoll::EventData::new_u64(fd.as_raw_fd() as u64);
    epoll::add(epfd, fd, data, epoll::EventFlags::IN)
}

/// Borrows the descriptor of an endpoint for one epoll_ctl call.
///
/// # Safety
/// `fd` is a number an endpoint reported (`Progress::wait_fds`). It may
/// have been closed since (the endpoint closed while its old number is
/// still in our registration), or even reused. An epoll_ctl on such a
/// number touches no memory: on a closed one it fails (EBADF, ENOENT), on a
/// reused one it adds or removes that file's registration in our own epoll
/// set, which costs at most a spurious wake-up. The caller uses the borrow
/// only for that call.
unsafe fn endpoint_fd<'a>(fd: RawFd) -> BorrowedFd<'a> {
    // SAFETY: see the function's contract; fd is never negative here
    // (`refresh` drops -1 entries first).
    unsafe { BorrowedFd::borrow_raw(fd) }
}

/// Adds one to an eventfd (a wake-up); a full counter is already a wake-up.
fn write_one(fd: impl AsFd) {
    let _ = rustix::io::write(fd, &1u64.to_ne_bytes());
}

/// Clears a non-blocking eventfd or an expired timerfd (nothing to read is fine).
fn read_u64(fd: impl AsFd) {
    let _ = rustix::io::read(fd, &mut [0u8; 8]);
}

/// Nanoseconds as a `Timespec`.
fn timespec(ns: u64) -> Timespec {
    Timespec {
        tv_sec: (ns / 1_000_000_000) as i64,
        tv_nsec: (ns % 1_000_000_000) as _,
    }
}

// ---------------------------------------------------------------------------
// WaitObj

thread_local! {
    /// Each blocking thread's private wake-up eventfd. Sleepers are kicked
    /// one by one through these rather than through one shared eventfd:
    /// whoever drained a shared one could swallow the wake-up meant for a
    /// thread still asleep.
    static WAKE_FD: Option<OwnedFd> = eventfd(0, EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC).ok();
}

fn my_wake_fd() -> Option<RawFd> {
    WAKE_FD.try_with(|w| w.as_ref().map(|f| f.as_raw_fd())).ok().flatten()
}

pub(crate) struct WaitObj {
    /// Written on wake-ups for the application's own poll on `epfd`
    /// (FI_GETWAIT); fi_trywait drains it.
    efd: OwnedFd,
    tfd: OwnedFd,
    epfd: OwnedFd,
    armed: AtomicBool,
    /// Private eventfds of the threads blocked in this object right now
    /// (`WAKE_FD`s: each thread takes its own out before `block` returns,
    /// so every number here is open while it is listed).
    sleepers: Mutex<Vec<RawFd>>,
    reg: Mutex<Reg>,
    /// What the unit tests observe instead of timing: how often a blocked
    /// thread went to sleep, and how many are asleep now.
    #[cfg(test)]
    probe: SleepProbe,
}

/// Counts kept by `WaitObj::sleep` for the tests (see `WaitObj::sleeps`).
#[cfg(test)]
#[derive(Default)]
struct SleepProbe {
    sleeps: std::sync::atomic::AtomicUsize,
    asleep: std::sync::atomic::AtomicUsize,
}

#[derive(Default)]
struct Reg {
    fds: Vec<RawFd>,
    gen: Option<u64>,
    timer: Option<u64>,
}

impl WaitObj {
    pub fn new() -> Result<Arc<WaitObj>, i32> {
        let efd = eventfd(0, EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC).map_err(fi_err)?;
        let tfd = rustix::time::timerfd_create(
            TimerfdClockId::Monotonic,
            TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC,
        )
        .map_err(fi_err)?;
        let epfd = epoll::create(epoll::CreateFlags::CLOEXEC).map_err(fi_err)?;
        epoll_add(&epfd, efd.as_fd()).map_err(fi_err)?;
        epoll_add(&epfd, tfd.as_fd()).map_err(fi_err)?;
        Ok(Arc::new(WaitObj {
            efd,
            tfd,
            epfd,
            armed: AtomicBool::new(false),
            sleepers: Mutex::new(Vec::new()),
            reg: Mutex::new(Reg::default()),
            #[cfg(test)]
            probe: SleepProbe::default(),
        }))
    }

    /// How many times a blocked thread went to sleep in this object so far
    /// (tests: a wait that does not spin sleeps a few times, not thousands).
    #[cfg(test)]
    pub fn sleeps(&self) -> usize {
        self.probe.sleeps.load(SeqCst)
    }

    /// Threads inside the sleep right now: registered as sleepers, armed,
    /// and past their last check of the queue, so whatever happens next
    /// must wake them (tests wait for this before they signal or push).
    #[cfg(test)]
    pub fn asleep(&self) -> usize {
        self.probe.asleep.load(SeqCst)
    }

    /// The descriptor FI_GETWAIT returns: readable when the queue may have
    /// something or an endpoint needs progress.
    pub fn fd(&self) -> RawFd {
        self.epfd.as_raw_fd()
    }

    /// Declares that a thread is about to check the queue and sleep: the
    /// next `notify` will wake it. Must precede that check; a pusher orders
    /// its insertion before its `notify` (the queue lock or a SeqCst RMW),
    /// so either the check sees the entry or the pusher sees the flag.
    pub fn arm(&self) {
        self.armed.store(true, SeqCst);
    }

    /// Called after something became readable. Costs one atomic load unless
    /// somebody armed.
    #[inline]
    pub fn notify(&self) {
        if self.armed.load(SeqCst) && self.armed.swap(false, SeqCst) {
            self.kick();
        }
    }

    /// Unconditional wake-up of every sleeper and of native waiters
    /// (fi_cq_signal uses it directly).
    pub fn kick(&self) {
        write_one(&self.efd);
        for &fd in lock(&self.sleepers).iter() {
            // SAFETY: a sleeper's own eventfd, open while it is listed (see
            // `sleepers`; the list's lock is held).
            write_one(unsafe { BorrowedFd::borrow_raw(fd) });
        }
    }

    /// Clears the shared eventfd and an expired timer so the epoll fd stops
    /// being readable for reasons already handled.
    pub fn drain(&self) {
        read_u64(&self.efd);
        read_u64(&self.tfd);
    }

    /// Makes the epoll set hold exactly `fds` (plus our own two).
    pub fn refresh(&self, fds: &mut Vec<RawFd>, gen: u64) {
        // An endpoint without a socket yet reports -1.
        fds.retain(|&fd| fd >= 0);
        fds.sort_unstable();
        fds.dedup();
        let mut r = lock(&self.reg);
        if r.gen == Some(gen) && r.fds == *fds {
            return;
        }
        for &fd in r.fds.iter().filter(|fd| fds.binary_search(fd).is_err()) {
            // A closed descriptor already left the set on its own.
            // SAFETY: an endpoint's number, used for this call only.
            let _ = epoll::delete(&self.epfd, unsafe { endpoint_fd(fd) });
        }
        for &fd in fds.iter() {
            // SAFETY: an endpoint's number, used for this call only.
            match epoll_add(&self.epfd, unsafe { endpoint_fd(fd) }) {
                // Already watched from an earlier registration.
                Ok(()) | Err(Errno::EXIST) => {}
                Err(e) => crate::warn!(FI_LOG_CQ, "wait object: cannot watch fd {}: {}", fd, e),
            }
        }
        r.fds.clone_from(fds);
        r.gen = Some(gen);
    }

    /// Arms the timerfd at an absolute `now_ns` deadline, so an application
    /// sleeping on the FI_GETWAIT descriptor wakes up when an endpoint's
    /// protocol timer (retransmission, delayed ACK) needs progress.
    pub fn set_timer(&self, deadline: Option<u64>) {
        let mut r = lock(&self.reg);
        if r.timer == deadline {
            return;
        }
        r.timer = deadline;
        // An all-zero it_value disarms; a past deadline fires at once.
        let ns = deadline.map_or(0, |d| d.max(1));
        let spec = Itimerspec {
            it_interval: timespec(0),
            it_value: timespec(ns),
        };
        // Cannot fail on our own timerfd with a valid, absolute time.
        let _ = rustix::time::timerfd_settime(&self.tfd, TimerfdTimerFlags::ABSTIME, &spec);
    }

    /// Sleeps until the epoll set or `wake` is readable, or `until`
    /// (absolute `now_ns`) passes.
    fn sleep(&self, wake: Option<BorrowedFd<'_>>, until: Option<u64>) {
        // Without a private eventfd (descriptor limit reached) a kick cannot
        // reach us: nap in short slices instead of hanging.
        let until = match wake {
            Some(_) => until,
            None => min_opt(until, Some(now_ns() + 1_000_000)),
        };
        let ts = until.map(|u| timespec(u.saturating_sub(now_ns())));
        #[cfg(test)]
        {
            self.probe.sleeps.fetch_add(1, SeqCst);
            self.probe.asleep.fetch_add(1, SeqCst);
        }
        // An interrupted or failed poll returns early; the caller's loop
        // checks again, as after any wake-up.
        let _ = match wake {
            Some(w) => rustix::event::poll(
                &mut [PollFd::new(&self.epfd, PollFlags::IN), PollFd::new(&w, PollFlags::IN)],
                ts.as_ref(),
            ),
            None => rustix::event::poll(&mut [PollFd::new(&self.epfd, PollFlags::IN)], ts.as_ref()),
        };
        #[cfg(test)]
        self.probe.asleep.fetch_sub(1, SeqCst);
    }

    /// One arm/check/sleep loop shared by every blocking call.
    ///
    /// Each round drives the sources (`progress`), tests `check`, and only
    /// then sleeps until a source descriptor fires, a pusher kicks, the
    /// earliest source deadline or the caller's `deadline` passes. Returns
    /// `None` on timeout or when `interrupted()` turns true. `collect`
    /// arms the sources before a sleep and returns their generation;
    /// `disarm` takes that arming back after it (`Sources::disarm`).
    pub fn block<R>(
        &self,
        progress: impl Fn(),
        collect: impl Fn(&mut Vec<RawFd>, &mut Option<u64>) -> u64,
        disarm: impl Fn(u64),
        mut check: impl FnMut() -> Option<R>,
        deadline: Option<u64>,
        interrupted: impl Fn() -> bool,
    ) -> Option<R> {
        let mut fds = Vec::new();
        // SAFETY: this thread's own eventfd (`WAKE_FD`), which stays open
        // until the thread exits, so through this call.
        let wake = my_wake_fd().map(|w| unsafe { BorrowedFd::borrow_raw(w) });
        loop {
            progress();
            if let Some(r) = check() {
                return Some(r);
            }
            if let Some(w) = wake {
                read_u64(w);
                lock(&self.sleepers).push(w.as_raw_fd());
            }
            self.arm();
            self.drain();
            let r = check();
            let stop = r.is_some() || interrupted() || deadline.is_some_and(|d| now_ns() >= d);
            if !stop {
                fds.clear();
                let mut next = None;
                let gen = collect(&mut fds, &mut next);
                self.refresh(&mut fds, gen);
                self.sleep(wake, min_opt(deadline, next));
                disarm(gen);
            }
            if let Some(w) = wake {
                let mut s = lock(&self.sleepers);
                if let Some(i) = s.iter().position(|&x| x == w.as_raw_fd()) {
                    s.swap_remove(i);
                }
            }
            if stop {
                return r;
            }
        }
    }

    /// The descriptor side of fi_trywait: watches the sources, arms the
    /// timer at their next deadline and arms for pushes; the caller then
    /// re-checks its queue.
    pub fn prepare_native_wait(&self, collect: impl Fn(&mut Vec<RawFd>, &mut Option<u64>) -> u64) {
        let mut fds = Vec::new();
        let mut next = None;
        let gen = collect(&mut fds, &mut next);
        self.refresh(&mut fds, gen);
        self.set_timer(next);
        self.arm();
        self.drain();
    }
}

/// FI_GETWAIT / FI_GETWAITOBJ for an object whose wait object is `wobj`
/// (`None` with FI_WAIT_NONE / FI_WAIT_SET members).
///
/// # Safety
/// `arg` must be what fi_control(3) documents for `cmd`.
pub(crate) unsafe fn control_wait(
    wait_obj: fi_wait_obj,
    wobj: Option<&WaitObj>,
    refresh: impl FnOnce(&WaitObj),
    cmd: i32,
    arg: *mut c_void,
    subsys: fi_log_subsys,
) -> i32 {
    if arg.is_null() {
        return -FI_EINVAL;
    }
    match cmd as u32 {
        FI_GETWAITOBJ => {
            // SAFETY: FI_GETWAITOBJ takes an enum fi_wait_obj * (fi_control(3)); non-NULL.
            unsafe { *(arg as *mut fi_wait_obj) = wait_obj };
            0
        }
        FI_GETWAIT => {
            let Some(w) = wobj else {
                crate::warn!(subsys, "FI_GETWAIT: no wait object to return for wait_obj {}", wait_obj);
                return -FI_EINVAL;
            };
            match wait_obj {
                FI_WAIT_FD | FI_WAIT_UNSPEC => {
                    refresh(w);
                    // SAFETY: FI_GETWAIT with FI_WAIT_FD takes an int * (fi_control(3)).
                    unsafe { *(arg as *mut i32) = w.fd() };
                    0
                }
                FI_WAIT_POLLFD => {
                    // SAFETY: FI_GETWAIT with FI_WAIT_POLLFD takes a struct
                    // fi_wait_pollfd * (fi_control(3)).
                    let p = unsafe { &mut *(arg as *mut fi_wait_pollfd) };
                    let n = p.nfds;
                    p.nfds = 1;
                    // The epoll descriptor never changes, so neither does
                    // the list.
                    p.change_index = 1;
                    if n < 1 || p.fd.is_null() {
                        return -FI_ETOOSMALL;
                    }
                    refresh(w);
                    let pfd = pollfd {
                        fd: w.fd(),
                        events: libc::POLLIN,
                        revents: 0,
                    };
                    // SAFETY: `fd` holds `nfds` >= 1 entries (fi_control(3)), non-NULL.
                    unsafe { *p.fd = pfd };
                    0
                }
                _ => {
                    crate::warn!(subsys, "FI_GETWAIT: wait_obj {} has no native wait object", wait_obj);
                    -FI_EINVAL
                }
            }
        }
        _ => -FI_ENOSYS,
    }
}

/// Checks a CQ/counter/EQ `wait_obj` attribute: which of them we implement.
/// FI_WAIT_SET resolves `wait_set` and returns it.
pub(crate) fn check_wait_attr(
    wait_obj: fi_wait_obj,
    wait_set: *mut fid_wait,
    subsys: fi_log_subsys,
    what: &str,
) -> Result<Option<Arc<WaitSet>>, i32> {
    match wait_obj {
        FI_WAIT_NONE | FI_WAIT_UNSPEC | FI_WAIT_FD | FI_WAIT_POLLFD | FI_WAIT_YIELD => Ok(None),
        FI_WAIT_SET => {
            // SAFETY: fid pointers from the application are at least a
            // `struct fid` or NULL, which `get` checks before reading more.
            match unsafe { WaitSetObj::get(wait_set as *const c_void, FI_CLASS_WAIT) } {
                Some(ws) => Ok(Some(ws.clone())),
                None => {
                    crate::warn!(subsys, "{}: FI_WAIT_SET without a valid gnix wait_set", what);
                    Err(-FI_EINVAL)
                }
            }
        }
        FI_WAIT_MUTEX_COND => {
            crate::warn!(
                subsys,
                "{}: FI_WAIT_MUTEX_COND is not supported; use FI_WAIT_FD or FI_WAIT_UNSPEC",
                what
            );
            Err(-FI_ENOSYS)
        }
        w => {
            crate::warn!(subsys, "{}: unknown wait_obj {}", what, w);
            Err(-FI_EINVAL)
        }
    }
}

/// How a CQ/counter/EQ sleeps.
pub(crate) enum Wait {
    /// FI_WAIT_NONE: blocking calls are invalid.
    None,
    Own(Arc<WaitObj>),
    /// Shares the set's wait object; blocking happens in fi_wait.
    Set(Arc<WaitObj>, ParentRef<WaitSet>),
}

impl Wait {
    /// fi_trywait on a CQ, counter or EQ fed by `sources`: drive progress,
    /// arm for a sleep on the native wait object, then -FI_EAGAIN if
    /// `has_event` says there is already something to read.
    pub fn trywait(&self, sources: &Sources, subsys: fi_log_subsys, what: &str, has_event: impl Fn() -> bool) -> i32 {
        sources.progress();
        match self {
            Wait::None => {
                crate::warn!(subsys, "fi_trywait: the {} was opened with FI_WAIT_NONE", what);
                return -FI_EINVAL;
            }
            Wait::Own(w) => w.prepare_native_wait(|fds, next| sources.collect(fds, next)),
            Wait::Set(w, _) => w.arm(),
        }
        if has_event() {
            -FI_EAGAIN
        } else {
            0
        }
    }

    pub fn new(set: Option<Arc<WaitSet>>, wait_obj: fi_wait_obj) -> Result<Wait, i32> {
        Ok(match set {
            Some(ws) => Wait::Set(ws.wobj.clone(), ParentRef::new(&ws)),
            None if wait_obj == FI_WAIT_NONE => Wait::None,
            None => Wait::Own(WaitObj::new()?),
        })
    }
    pub fn obj(&self) -> Option<&WaitObj> {
        match self {
            Wait::None => None,
            Wait::Own(w) | Wait::Set(w, _) => Some(w),
        }
    }
    pub fn own(&self) -> Option<&WaitObj> {
        match self {
            Wait::Own(w) => Some(w),
            _ => None,
        }
    }
    pub fn set(&self) -> Option<&Arc<WaitSet>> {
        match self {
            Wait::Set(_, p) => Some(&p.0),
            _ => None,
        }
    }
    #[inline]
    pub fn notify(&self) {
        if let Some(w) = self.obj() {
            w.notify();
        }
    }
}

// ---------------------------------------------------------------------------
// Wait sets

/// What a wait set (and fi_trywait) needs from a CQ, counter or EQ.
pub(crate) trait Waitable: Send + Sync {
    fn progress_sources(&self);
    /// Something to read: a CQ/EQ entry, or a counter change not yet
    /// reported through this path.
    fn has_event(&self) -> bool;
    fn collect(&self, fds: &mut Vec<RawFd>, next: &mut Option<u64>) -> u64;
}

pub struct WaitSet {
    pub refs: Refs,
    wait_obj: fi_wait_obj,
    pub(crate) wobj: Arc<WaitObj>,
    members: Mutex<Vec<Weak<dyn Waitable>>>,
    members_gen: AtomicU64,
    _keepalive: Box<dyn Any + Send + Sync>,
}
impl AsRef<Refs> for WaitSet {
    fn as_ref(&self) -> &Refs {
        &self.refs
    }
}

type WaitSetObj = FidObj<fid_wait, WaitSet>;

impl WaitSet {
    pub fn new(wait_obj: fi_wait_obj, keepalive: Box<dyn Any + Send + Sync>) -> Result<Arc<WaitSet>, i32> {
        Ok(Arc::new(WaitSet {
            refs: Refs::default(),
            wait_obj,
            wobj: WaitObj::new()?,
            members: Mutex::new(Vec::new()),
            members_gen: AtomicU64::new(0),
            _keepalive: keepalive,
        }))
    }

    pub(crate) fn add_member(&self, m: Weak<dyn Waitable>) {
        let mut l = lock(&self.members);
        l.retain(|w| w.strong_count() > 0);
        l.push(m);
        self.members_gen.fetch_add(1, SeqCst);
    }

    fn live(&self) -> Vec<Arc<dyn Waitable>> {
        lock(&self.members).iter().filter_map(|w| w.upgrade()).collect()
    }

    fn collect(members: &[Arc<dyn Waitable>], gen0: u64, fds: &mut Vec<RawFd>, next: &mut Option<u64>) -> u64 {
        // Any member's source change must change the combined generation.
        members.iter().fold(gen0.wrapping_mul(0x9e37_79b9_7f4a_7c15), |g, m| {
            g.rotate_left(7) ^ m.collect(fds, next)
        })
    }

    /// fi_wait: 0 once a member has something, -FI_ETIMEDOUT otherwise.
    pub fn wait(&self, timeout: i32) -> i32 {
        let deadline = deadline_ms(timeout);
        let members = self.live();
        let gen0 = self.members_gen.load(SeqCst);
        let r = self.wobj.block(
            || members.iter().for_each(|m| m.progress_sources()),
            |fds, next| Self::collect(&members, gen0, fds, next),
            // The members' sources stay armed for good: a wait set's
            // endpoints keep their sockets in their epoll sets.
            |_| {},
            || members.iter().any(|m| m.has_event()).then_some(()),
            deadline,
            || false,
        );
        match r {
            Some(()) => 0,
            None => -FI_ETIMEDOUT,
        }
    }

    fn trywait(&self) -> i32 {
        let members = self.live();
        members.iter().for_each(|m| m.progress_sources());
        let gen0 = self.members_gen.load(SeqCst);
        self.wobj
            .prepare_native_wait(|fds, next| Self::collect(&members, gen0, fds, next));
        if members.iter().any(|m| m.has_event()) {
            -FI_EAGAIN
        } else {
            0
        }
    }
}

/// fi_wait_open (on the fabric). `keepalive` is the fabric shim's
/// `ParentRef<Fabric>`, dropped with the wait set's state so the fabric
/// stays busy while the set exists.
///
/// # Safety
/// `attr` must be NULL or point to a readable `fi_wait_attr`.
pub unsafe fn open(attr: *mut fi_wait_attr, keepalive: Box<dyn Any + Send + Sync>) -> Result<*mut fid_wait, i32> {
    let (wait_obj, flags) = if attr.is_null() {
        (FI_WAIT_UNSPEC, 0)
    } else {
        // SAFETY: the caller's contract (`attr` NULL or readable; not NULL here).
        let a = unsafe { &*attr };
        (a.wait_obj, a.flags)
    };
    if flags != 0 {
        crate::warn!(FI_LOG_FABRIC, "fi_wait_open: flags {:#x} must be 0", flags);
        return Err(-FI_EINVAL);
    }
    match wait_obj {
        FI_WAIT_UNSPEC | FI_WAIT_FD | FI_WAIT_POLLFD | FI_WAIT_YIELD => {}
        FI_WAIT_MUTEX_COND => {
            crate::warn!(FI_LOG_FABRIC, "fi_wait_open: FI_WAIT_MUTEX_COND is not supported");
            return Err(-FI_ENOSYS);
        }
        w => {
            crate::warn!(
                FI_LOG_FABRIC,
                "fi_wait_open: wait_obj {} is not valid for a wait set",
                w
            );
            return Err(-FI_EINVAL);
        }
    }
    Ok(waitset_into_fid(WaitSet::new(wait_obj, keepalive)?))
}

pub(crate) fn waitset_into_fid(ws: Arc<WaitSet>) -> *mut fid_wait {
    let c = fid_wait {
        fid: fid_header(FI_CLASS_WAIT, std::ptr::null_mut(), WAIT_FI_OPS.ptr()),
        ops: WAIT_OPS.ptr(),
    };
    WaitSetObj::create(c, ws)
}

unsafe extern "C" fn wait_close(f: *mut fid) -> i32 {
    abi_guard!("wait_close", -FI_EOTHER, || {
        // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
        let Some(ws) = (unsafe { WaitSetObj::get(f as *const c_void, FI_CLASS_WAIT) }) else {
            return -FI_EINVAL;
        };
        if ws.refs.busy() {
            crate::warn!(FI_LOG_FABRIC, "fi_close(wait set): CQs, counters or EQs still use it");
            return -FI_EBUSY;
        }
        // SAFETY: `f` is a live wait set (checked above) the application gives up.
        unsafe { WaitSetObj::destroy(f as *mut c_void) };
        0
    })
}

unsafe extern "C" fn wait_control(f: *mut fid, cmd: i32, arg: *mut c_void) -> i32 {
    abi_guard!("wait_control", -FI_EOTHER, || {
        // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
        let Some(ws) = (unsafe { WaitSetObj::get(f as *const c_void, FI_CLASS_WAIT) }) else {
            return -FI_EINVAL;
        };
        // SAFETY: `arg` is the application's fi_control argument for `cmd`.
        unsafe {
            control_wait(
                ws.wait_obj,
                Some(&ws.wobj),
                |w| {
                    let members = ws.live();
                    let gen0 = ws.members_gen.load(SeqCst);
                    let mut fds = Vec::new();
                    let gen = WaitSet::collect(&members, gen0, &mut fds, &mut None);
                    w.refresh(&mut fds, gen);
                },
                cmd,
                arg,
                FI_LOG_FABRIC,
            )
        }
    })
}

unsafe extern "C" fn wait_wait(w: *mut fid_wait, timeout: i32) -> i32 {
    abi_guard!("wait_wait", -FI_EOTHER, || {
        // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
        let Some(ws) = (unsafe { WaitSetObj::get(w as *const c_void, FI_CLASS_WAIT) }) else {
            return -FI_EINVAL;
        };
        ws.wait(timeout)
    })
}

static WAIT_FI_OPS: Table<fi_ops> = Table(base_ops(wait_close, None, Some(wait_control), None));
static WAIT_OPS: Table<fi_ops_wait> = Table(fi_ops_wait {
    size: std::mem::size_of::<fi_ops_wait>(),
    wait: Some(wait_wait),
});

// ---------------------------------------------------------------------------
// fi_trywait

/// fi_trywait, called by the fabric shim: -FI_EAGAIN if any of `fids` (CQ,
/// counter, EQ or wait set) already has something to read, else 0 and the
/// application may block on their native wait objects.
///
/// # Safety
/// `fids` must be NULL or point to `count` fid pointers.
pub unsafe fn trywait(fids: *mut *mut fid, count: i32) -> i32 {
    if count < 0 || (count > 0 && fids.is_null()) {
        return -FI_EINVAL;
    }
    let mut busy = false;
    for i in 0..count as usize {
        // SAFETY: fi_trywait(3): `fids` holds `count` fid pointers (non-NULL, checked above).
        let f = unsafe { *fids.add(i) };
        if f.is_null() {
            return -FI_EINVAL;
        }
        // SAFETY: each entry is a fid the application holds (fi_trywait(3)), not NULL here.
        let class = unsafe { (*f).fclass } as u32;
        let r = match class {
            // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
            FI_CLASS_CQ => match unsafe { crate::cq::from_fid(f as *const c_void) } {
                Some(cq) => cq.trywait(),
                None => -FI_EINVAL,
            },
            // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
            FI_CLASS_CNTR => match unsafe { crate::cntr::from_fid(f as *const c_void) } {
                Some(c) => c.trywait(),
                None => -FI_EINVAL,
            },
            // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
            FI_CLASS_EQ => match unsafe { crate::eq::from_fid(f as *const c_void) } {
                Some(eq) => eq.trywait(),
                None => -FI_EINVAL,
            },
            // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
            FI_CLASS_WAIT => match unsafe { WaitSetObj::get(f as *const c_void, FI_CLASS_WAIT) } {
                Some(ws) => ws.trywait(),
                None => -FI_EINVAL,
            },
            c => {
                crate::warn!(FI_LOG_FABRIC, "fi_trywait: fid class {} has no wait object", c);
                -FI_EINVAL
            }
        };
        match r {
            0 => {}
            r if r == -FI_EAGAIN => busy = true,
            r => return r,
        }
    }
    if busy {
        -FI_EAGAIN
    } else {
        0
    }
}

// ---------------------------------------------------------------------------
// Poll sets

enum Member {
    Cq(Arc<crate::cq::Cq>),
    Cntr(Arc<crate::cntr::Cntr>),
}

pub struct PollSet {
    members: Mutex<Vec<Member>>,
    _keepalive: Box<dyn Any + Send + Sync>,
}

type PollObj = FidObj<fid_poll, PollSet>;

impl PollSet {
    pub fn new(keepalive: Box<dyn Any + Send + Sync>) -> Arc<PollSet> {
        Arc::new(PollSet {
            members: Mutex::new(Vec::new()),
            _keepalive: keepalive,
        })
    }
    pub fn add_cq(&self, cq: Arc<crate::cq::Cq>) -> i32 {
        let mut m = lock(&self.members);
        if m.iter().any(|x| matches!(x, Member::Cq(c) if Arc::ptr_eq(c, &cq))) {
            return -FI_EALREADY;
        }
        m.push(Member::Cq(cq));
        0
    }
    pub fn add_cntr(&self, c: Arc<crate::cntr::Cntr>) -> i32 {
        let mut m = lock(&self.members);
        if m.iter().any(|x| matches!(x, Member::Cntr(k) if Arc::ptr_eq(k, &c))) {
            return -FI_EALREADY;
        }
        m.push(Member::Cntr(c));
        0
    }
    fn del(&self, f: impl Fn(&Member) -> bool) -> i32 {
        let mut m = lock(&self.members);
        let n = m.len();
        m.retain(|x| !f(x));
        if m.len() == n {
            -FI_ENOENT
        } else {
            0
        }
    }

    /// fi_poll: progresses every member, then writes the contexts of
    /// non-empty CQs and of counters that changed since they were last
    /// reported (or set/added). Returns how many were written.
    pub fn poll(&self, out: &mut [*mut c_void]) -> i32 {
        // Clone the Arcs out so progress runs without our lock.
        let members: Vec<Member> = lock(&self.members)
            .iter()
            .map(|m| match m {
                Member::Cq(c) => Member::Cq(c.clone()),
                Member::Cntr(c) => Member::Cntr(c.clone()),
            })
            .collect();
        let mut n = 0;
        for m in &members {
            if n == out.len() {
                break;
            }
            let hit = match m {
                Member::Cq(c) => {
                    c.progress_sources();
                    c.has_entries().then(|| c.context())
                }
                Member::Cntr(c) => {
                    c.progress_sources();
                    c.poll_changed().then(|| c.context())
                }
            };
            if let Some(ctx) = hit {
                out[n] = ctx;
                n += 1;
            }
        }
        n as i32
    }
}

/// fi_poll_open (on the domain). `keepalive` is the domain shim's
/// `ParentRef<Domain>`.
///
/// # Safety
/// `attr` must be NULL or point to a readable `fi_poll_attr`.
pub unsafe fn poll_open(attr: *mut fi_poll_attr, keepalive: Box<dyn Any + Send + Sync>) -> Result<*mut fid_poll, i32> {
    // SAFETY: the caller's contract (`attr` NULL or readable).
    let flags = if attr.is_null() { 0 } else { unsafe { (*attr).flags } };
    if flags != 0 {
        crate::warn!(FI_LOG_DOMAIN, "fi_poll_open: flags {:#x} must be 0", flags);
        return Err(-FI_EINVAL);
    }
    Ok(pollset_into_fid(PollSet::new(keepalive)))
}

pub(crate) fn pollset_into_fid(ps: Arc<PollSet>) -> *mut fid_poll {
    let c = fid_poll {
        fid: fid_header(FI_CLASS_POLL, std::ptr::null_mut(), POLL_FI_OPS.ptr()),
        ops: POLL_OPS.ptr(),
    };
    PollObj::create(c, ps)
}

unsafe extern "C" fn poll_close(f: *mut fid) -> i32 {
    abi_guard!("poll_close", -FI_EOTHER, || {
        // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
        if (unsafe { PollObj::get(f as *const c_void, FI_CLASS_POLL) }).is_none() {
            return -FI_EINVAL;
        }
        // Members are only referenced, not bound: closing with members left
        // just forgets them, which is what applications closing in any order
        // expect.
        // SAFETY: `f` is a live poll set (checked above) the application gives up.
        unsafe { PollObj::destroy(f as *mut c_void) };
        0
    })
}

unsafe extern "C" fn poll_poll(p: *mut fid_poll, ctx: *mut *mut c_void, count: i32) -> i32 {
    abi_guard!("poll_poll", -FI_EOTHER, || {
        // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
        let Some(ps) = (unsafe { PollObj::get(p as *const c_void, FI_CLASS_POLL) }) else {
            return -FI_EINVAL;
        };
        if count < 0 || (count > 0 && ctx.is_null()) {
            crate::warn!(FI_LOG_DOMAIN, "fi_poll: NULL context array with count {}", count);
            return -FI_EINVAL;
        }
        let out: &mut [*mut c_void] = if count == 0 {
            &mut []
        } else {
            // SAFETY: the application passes an array of `count` context slots.
            unsafe { std::slice::from_raw_parts_mut(ctx, count as usize) }
        };
        ps.poll(out)
    })
}

unsafe extern "C" fn poll_add(p: *mut fid_poll, f: *mut fid, flags: u64) -> i32 {
    abi_guard!("poll_add", -FI_EOTHER, || {
        // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
        let Some(ps) = (unsafe { PollObj::get(p as *const c_void, FI_CLASS_POLL) }) else {
            return -FI_EINVAL;
        };
        if flags != 0 {
            crate::warn!(FI_LOG_DOMAIN, "fi_poll_add: flags {:#x} must be 0", flags);
            return -FI_EINVAL;
        }
        // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
        if let Some(cq) = unsafe { crate::cq::from_fid(f as *const c_void) } {
            return ps.add_cq(cq);
        }
        // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
        if let Some(c) = unsafe { crate::cntr::from_fid(f as *const c_void) } {
            return ps.add_cntr(c);
        }
        crate::warn!(
            FI_LOG_DOMAIN,
            "fi_poll_add: only gnix CQs and counters can join a poll set"
        );
        -FI_EINVAL
    })
}

unsafe extern "C" fn poll_del(p: *mut fid_poll, f: *mut fid, flags: u64) -> i32 {
    abi_guard!("poll_del", -FI_EOTHER, || {
        // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
        let Some(ps) = (unsafe { PollObj::get(p as *const c_void, FI_CLASS_POLL) }) else {
            return -FI_EINVAL;
        };
        if flags != 0 {
            crate::warn!(FI_LOG_DOMAIN, "fi_poll_del: flags {:#x} must be 0", flags);
            return -FI_EINVAL;
        }
        // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
        if let Some(cq) = unsafe { crate::cq::from_fid(f as *const c_void) } {
            return ps.del(|m| matches!(m, Member::Cq(c) if Arc::ptr_eq(c, &cq)));
        }
        // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
        if let Some(cn) = unsafe { crate::cntr::from_fid(f as *const c_void) } {
            return ps.del(|m| matches!(m, Member::Cntr(c) if Arc::ptr_eq(c, &cn)));
        }
        -FI_EINVAL
    })
}

static POLL_FI_OPS: Table<fi_ops> = Table(base_ops(poll_close, None, None, None));
static POLL_OPS: Table<fi_ops_poll> = Table(fi_ops_poll {
    size: std::mem::size_of::<fi_ops_poll>(),
    poll: Some(poll_poll),
    poll_add: Some(poll_add),
    poll_del: Some(poll_del),
});

#[cfg(test)]
pub(crate) mod testutil {
    //! A fake endpoint for the completion classes' tests.
    use crate::progress::Progress;
    use rustix::event::{PollFd, PollFlags};
    use std::os::fd::{BorrowedFd, OwnedFd, RawFd};
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    use std::sync::Mutex;
    use std::thread::JoinHandle;
    use std::time::{Duration, Instant};

    pub struct FakeSrc {
        pub calls: AtomicUsize,
        pub deadline: Mutex<Option<u64>>,
        pub fds: Vec<RawFd>,
        #[allow(clippy::type_complexity)]
        pub on_progress: Box<dyn Fn(&FakeSrc) + Send + Sync>,
    }
    impl FakeSrc {
        pub fn new(on_progress: impl Fn(&FakeSrc) + Send + Sync + 'static) -> Self {
            FakeSrc {
                calls: AtomicUsize::new(0),
                deadline: Mutex::new(None),
                fds: Vec::new(),
                on_progress: Box::new(on_progress),
            }
        }
    }
    impl Progress for FakeSrc {
        fn progress(&self) {
            self.calls.fetch_add(1, SeqCst);
            (self.on_progress)(self);
        }
        fn wait_fds(&self, out: &mut Vec<RawFd>) {
            out.extend_from_slice(&self.fds);
        }
        fn next_deadline(&self) -> Option<u64> {
            *self.deadline.lock().unwrap()
        }
    }

    /// A non-blocking pipe: (read end, write end).
    pub fn pipe() -> (OwnedFd, OwnedFd) {
        use rustix::pipe::{pipe_with, PipeFlags};
        pipe_with(PipeFlags::NONBLOCK | PipeFlags::CLOEXEC).unwrap()
    }
    pub fn write_byte(fd: &OwnedFd) {
        rustix::io::write(fd, b"x").unwrap();
    }
    /// Drains the pipe; true if anything was there.
    pub fn read_all(fd: RawFd) -> bool {
        let mut b = [0u8; 64];
        let mut any = false;
        // SAFETY: test helper; callers pass a descriptor they hold open.
        let fd = unsafe { BorrowedFd::borrow_raw(fd) };
        while rustix::io::read(fd, &mut b).is_ok_and(|n| n > 0) {
            any = true;
        }
        any
    }
    /// How long a test waits for a state another thread must reach, or for
    /// a blocking call that must be woken: generous for any loaded machine,
    /// it only turns a hang into a failure and says nothing about speed.
    pub const HANG: Duration = Duration::from_secs(30);
    /// `HANG` as a libfabric timeout (ms) for blocking calls that must be
    /// woken long before it: running into it is the failure.
    pub const HANG_MS: i32 = HANG.as_millis() as i32;

    /// Polls `cond` until it holds; fails after `HANG`.
    pub fn wait_until(what: &str, cond: impl Fn() -> bool) {
        let t0 = Instant::now();
        while !cond() {
            assert!(t0.elapsed() < HANG, "gave up after {HANG:?} waiting until {what}");
            std::thread::sleep(Duration::from_millis(1)); // polling a state, not synchronising
        }
    }

    /// Joins `t` once it has finished; fails if it is still running after
    /// `HANG` (a blocked call nobody woke).
    pub fn join_within<T>(t: JoinHandle<T>, what: &str) -> T {
        wait_until(what, || t.is_finished());
        t.join().unwrap()
    }

    pub fn fd_readable(fd: RawFd) -> bool {
        // SAFETY: test helper; callers pass a descriptor they hold open.
        let fd = unsafe { BorrowedFd::borrow_raw(fd) };
        let zero = rustix::time::Timespec { tv_sec: 0, tv_nsec: 0 };
        rustix::event::poll(&mut [PollFd::new(&fd, PollFlags::IN)], Some(&zero)) == Ok(1)
    }
}

#[cfg(test)]
mod tests {
    use super::testutil::*;
    use super::*;
    use crate::cntr::Cntr;
    use crate::cq::{Cq, CqConfig, CqEntry};
    use std::time::{Duration, Instant};

    fn set_member_cq(ws: &Arc<WaitSet>, ctx: usize) -> Arc<Cq> {
        let cfg = CqConfig {
            wait_obj: FI_WAIT_SET,
            ..Default::default()
        };
        Cq::new(cfg, ctx as *mut c_void, Some(ws.clone()), None).unwrap()
    }

    #[test]
    fn wait_set_wakes_on_any_member() {
        let ws = WaitSet::new(FI_WAIT_FD, Box::new(())).unwrap();
        let a = set_member_cq(&ws, 1);
        let b = set_member_cq(&ws, 2);
        let c = Cntr::new(FI_WAIT_SET, std::ptr::null_mut(), Some(ws.clone()), None).unwrap();
        assert!(ws.refs.busy(), "members hold the set");
        // Nothing to report: fi_wait times out, not before its timeout, and
        // sleeps through it rather than polling the members.
        let sleeps0 = ws.wobj.sleeps();
        let t0 = Instant::now();
        assert_eq!(ws.wait(80), -FI_ETIMEDOUT);
        assert!(t0.elapsed() >= Duration::from_millis(80), "{:?}", t0.elapsed());
        let sleeps = ws.wobj.sleeps() - sleeps0;
        assert!((1..=3).contains(&sleeps), "{sleeps} sleeps in one timed-out fi_wait");
        // A CQ member gets an entry while fi_wait sleeps: it wakes with 0.
        let (wobj, b2) = (ws.wobj.clone(), b.clone());
        let t = std::thread::spawn(move || {
            wait_until("fi_wait sleeps", || wobj.asleep() == 1);
            b2.push(CqEntry::default());
        });
        assert_eq!(ws.wait(HANG_MS), 0);
        join_within(t, "the pusher is done");
        assert!(b.has_entries() && !a.has_entries());
        assert_eq!(
            b.sread(&mut [0u8; 8], 1, None, 1, 0),
            -FI_EINVAL as isize,
            "sread is invalid on set members"
        );
        assert_eq!(b.read(&mut [0u8; 8], 1, None), 1);
        // Same for a counter member that moves.
        let (wobj, c2) = (ws.wobj.clone(), c.clone());
        let t = std::thread::spawn(move || {
            wait_until("fi_wait sleeps", || wobj.asleep() == 1);
            c2.inc();
        });
        assert_eq!(ws.wait(HANG_MS), 0);
        join_within(t, "the counter thread is done");
        // trywait on the set, and the set's descriptor.
        let p = waitset_into_fid(ws.clone());
        let mut fd = -1;
        // SAFETY: p is a live fid_wait.
        unsafe {
            let ctl = (*(*p).fid.ops).control.unwrap();
            assert_eq!(
                ctl(p as *mut fid, FI_GETWAIT as i32, &mut fd as *mut i32 as *mut c_void),
                0
            );
            let mut fids = [p as *mut fid];
            assert_eq!(trywait(fids.as_mut_ptr(), 1), 0);
            assert!(!fd_readable(fd));
            a.push(CqEntry::default());
            assert!(fd_readable(fd));
            assert_eq!(trywait(fids.as_mut_ptr(), 1), -FI_EAGAIN);
            assert_eq!((*(*p).ops).wait.unwrap()(p, 0), 0);
            assert_eq!((*(*p).fid.ops).close.unwrap()(p as *mut fid), -FI_EBUSY);
            drop((a, b, c));
            assert!(!ws.refs.busy());
            assert_eq!((*(*p).fid.ops).close.unwrap()(p as *mut fid), 0);
        }
    }

    #[test]
    fn poll_set_reports_nonempty_cqs_and_moved_counters() {
        let ps = PollSet::new(Box::new(()));
        let cq1 = Cq::new(CqConfig::default(), 11 as *mut c_void, None, None).unwrap();
        let cq2 = Cq::new(CqConfig::default(), 22 as *mut c_void, None, None).unwrap();
        let cn = Cntr::new(FI_WAIT_NONE, 33 as *mut c_void, None, None).unwrap();
        assert_eq!(ps.add_cq(cq1.clone()), 0);
        assert_eq!(ps.add_cq(cq1.clone()), -FI_EALREADY);
        assert_eq!(ps.add_cq(cq2.clone()), 0);
        assert_eq!(ps.add_cntr(cn.clone()), 0);
        let mut out = [std::ptr::null_mut(); 4];
        assert_eq!(ps.poll(&mut out), 0);
        cq2.push(CqEntry::default());
        cn.inc();
        assert_eq!(ps.poll(&mut out), 2);
        assert_eq!((out[0] as usize, out[1] as usize), (22, 33));
        assert_eq!(
            ps.poll(&mut out),
            1,
            "the counter was reported already; the CQ is still non-empty"
        );
        assert_eq!(ps.poll(&mut out[..0]), 0);
        assert_eq!(ps.del(|m| matches!(m, Member::Cq(c) if Arc::ptr_eq(c, &cq2))), 0);
        assert_eq!(ps.poll(&mut out), 0);
        // Through the C face.
        let p = pollset_into_fid(ps);
        let f1 = crate::cq::into_fid(cq1.clone());
        // SAFETY: live fids we created.
        unsafe {
            let ops = &*(*p).ops;
            assert_eq!(ops.poll_del.unwrap()(p, f1 as *mut fid, 0), 0);
            assert_eq!(ops.poll_del.unwrap()(p, f1 as *mut fid, 0), -FI_ENOENT);
            assert_eq!(ops.poll_add.unwrap()(p, f1 as *mut fid, 0), 0);
            assert_eq!(ops.poll_add.unwrap()(p, p as *mut fid, 0), -FI_EINVAL);
            cq1.push(CqEntry::default());
            let mut ctx = [std::ptr::null_mut(); 2];
            assert_eq!(ops.poll.unwrap()(p, ctx.as_mut_ptr(), 2), 1);
            assert_eq!(ctx[0] as usize, 11);
            assert_eq!((*(*p).fid.ops).close.unwrap()(p as *mut fid), 0);
            assert_eq!((*(*f1).fid.ops).close.unwrap()(f1 as *mut fid), 0);
        }
    }

    #[test]
    fn trywait_rejects_junk() {
        // SAFETY: NULL and a fake fid of an unsupported class.
        unsafe {
            assert_eq!(trywait(std::ptr::null_mut(), 1), -FI_EINVAL);
            assert_eq!(trywait(std::ptr::null_mut(), 0), 0);
            // Padded so the magic check reads our zeroes, not the stack.
            #[repr(C)]
            struct Fake {
                f: fid,
                pad: [u64; 8],
            }
            let mut f = Fake {
                f: fid {
                    fclass: FI_CLASS_CQ as usize,
                    context: std::ptr::null_mut(),
                    ops: std::ptr::null_mut(),
                },
                pad: [0; 8],
            };
            let mut fids = [&mut f.f as *mut fid];
            assert_eq!(trywait(fids.as_mut_ptr(), 1), -FI_EINVAL, "a CQ fid that is not ours");
        }
    }
}
