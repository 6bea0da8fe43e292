//! Completion counters (fi_cntr(3)).
//!
//! Two atomics (successes, errors); reads drive the bound endpoints'
//! progress like CQ reads do, and fi_cntr_wait sleeps on the counter's wait
//! object between rounds instead of spinning.

use crate::domain::Domain;
use crate::ffi::*;
use crate::fid::{base_ops, fid_header, FidObj, ParentRef, Refs, Table};
use crate::progress::{Progress, Spin};
use crate::wait::{check_wait_attr, control_wait, deadline_ms, lock, Sources, Wait, WaitSet, Waitable};
use std::ffi::c_void;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::{Arc, Mutex, Weak};

pub struct Cntr {
    /// Bound endpoints and memory regions hold a count: fi_close is
    /// -FI_EBUSY until they let go. Take it with `ParentRef::new(&cntr)`.
    pub refs: Refs,
    value: AtomicU64,
    err: AtomicU64,
    wait_obj: fi_wait_obj,
    context: usize,
    ops_flags: AtomicU64,
    sources: Sources,
    wait: Wait,
    /// (value, err) last reported by fi_poll, or last set by the
    /// application: fi_poll reports a counter when it moved since.
    poll_seen: Mutex<(u64, u64)>,
    /// Same for fi_trywait / fi_wait on a wait set.
    wait_seen: Mutex<(u64, u64)>,
    /// The value the application's last read saw; reads that see it again
    /// are a wait's polls (`Spin`).
    last_read: AtomicU64,
    spin: Spin,
    _domain: Option<ParentRef<Domain>>,
}

impl AsRef<Refs> for Cntr {
    fn as_ref(&self) -> &Refs {
        &self.refs
    }
}

impl Cntr {
    pub fn new(
        wait_obj: fi_wait_obj,
        context: *mut c_void,
        waitset: Option<Arc<WaitSet>>,
        domain: Option<ParentRef<Domain>>,
    ) -> Result<Arc<Cntr>, i32> {
        let gate = domain.as_ref().and_then(|d| d.gate.clone());
        let c = Arc::new(Cntr {
            refs: Refs::default(),
            value: AtomicU64::new(0),
            err: AtomicU64::new(0),
            wait_obj,
            context: context as usize,
            ops_flags: AtomicU64::new(0),
            sources: Sources::new(gate),
            wait: Wait::new(waitset, wait_obj)?,
            poll_seen: Mutex::new((0, 0)),
            wait_seen: Mutex::new((0, 0)),
            last_read: AtomicU64::new(0),
            spin: Spin::of(FI_LOG_CNTR, "counter"),
            _domain: domain,
        });
        if let Some(ws) = c.wait.set() {
            ws.add_member(Arc::downgrade(&c) as Weak<dyn Waitable>);
        }
        Ok(c)
    }

    pub fn context(&self) -> *mut c_void {
        self.context as *mut c_void
    }

    // The SeqCst RMW on the value pairs with the waiter's SeqCst arm + load
    // (WaitObj::arm): either the waiter sees the new value or we see it
    // armed.

    /// One successful completion.
    #[inline]
    pub fn inc(&self) {
        self.value.fetch_add(1, SeqCst);
        self.wait.notify();
    }
    /// One failed completion.
    pub fn inc_err(&self) {
        self.err.fetch_add(1, SeqCst);
        self.wait.notify();
    }

    pub fn add_source(&self, p: Weak<dyn Progress>) {
        self.sources.add(p);
    }
    pub fn remove_source(&self, p: &Weak<dyn Progress>) {
        self.sources.remove(p);
    }
    pub fn progress_sources(&self) {
        self.sources.progress();
    }

    /// fi_cntr_read: drives progress first (manual progress applications
    /// spin on this).
    pub fn read(&self) -> u64 {
        self.sources.progress();
        let v = self.value.load(SeqCst);
        if self.last_read.load(Relaxed) == v {
            self.spin.empty();
        } else {
            self.last_read.store(v, Relaxed);
            self.spin.found();
        }
        v
    }

    pub fn read_err(&self) -> u64 {
        self.sources.progress();
        self.err.load(SeqCst)
    }
    /// Current values without driving progress.
    pub fn peek(&self) -> (u64, u64) {
        (self.value.load(SeqCst), self.err.load(SeqCst))
    }

    fn app_update(&self, f: impl FnOnce()) {
        f();
        *lock(&self.poll_seen) = self.peek();
        self.wait.notify();
        // The application moved the counter (no endpoint lock held):
        // operations triggered on it may fire.
        if let Some(d) = &self._domain {
            d.triggers.run();
        }
    }
    pub fn add(&self, v: u64) {
        self.app_update(|| {
            self.value.fetch_add(v, SeqCst);
        });
    }
    pub fn set(&self, v: u64) {
        self.app_update(|| self.value.store(v, SeqCst));
    }
    pub fn add_err(&self, v: u64) {
        self.app_update(|| {
            self.err.fetch_add(v, SeqCst);
        });
    }
    pub fn set_err(&self, v: u64) {
        self.app_update(|| self.err.store(v, SeqCst));
    }

    /// fi_cntr_wait: 0 once value >= threshold, -FI_EAVAIL if the error
    /// count moves first, -FI_ETIMEDOUT after `timeout` ms (negative: none).
    pub fn wait(&self, threshold: u64, timeout: i32) -> i32 {
        let w = match &self.wait {
            Wait::Own(w) => w.clone(),
            // fi_cntr(3) calls this invalid, but libfabric's own providers
            // (util counters) poll instead, and fabtests rely on it
            // (fi_multi_mr): so do we, driving progress as a read does.
            Wait::None => return self.spin(threshold, timeout),
            Wait::Set(..) => {
                crate::warn!(
                    FI_LOG_CNTR,
                    "fi_cntr_wait: the counter belongs to a wait set; use fi_wait"
                );
                return -FI_EINVAL;
            }
        };
        let err0 = self.err.load(SeqCst);
        let r = w.block(
            || self.sources.progress(),
            |fds: &mut Vec<RawFd>, next: &mut Option<u64>| self.sources.collect(fds, next),
            |gen| self.sources.disarm(gen),
            || {
                if self.value.load(SeqCst) >= threshold {
                    Some(0)
                } else if self.err.load(SeqCst) != err0 {
                    Some(-FI_EAVAIL)
                } else {
                    None
                }
            },
            deadline_ms(timeout),
            || false,
        );
        r.unwrap_or(-FI_ETIMEDOUT)
    }

    /// fi_cntr_wait without a wait object: polls.
    fn spin(&self, threshold: u64, timeout: i32) -> i32 {
        let err0 = self.err.load(SeqCst);
        let deadline = deadline_ms(timeout);
        loop {
            self.sources.progress();
            if self.value.load(SeqCst) >= threshold {
                return 0;
            }
            if self.err.load(SeqCst) != err0 {
                return -FI_EAVAIL;
            }
            if deadline.is_some_and(|d| crate::progress::now_ns() >= d) {
                return -FI_ETIMEDOUT;
            }
            std::thread::yield_now();
        }
    }

    /// For fi_poll: moved since last reported (or set by the application)?
    pub fn poll_changed(&self) -> bool {
        let now = self.peek();
        let mut s = lock(&self.poll_seen);
        std::mem::replace(&mut *s, now) != now
    }

    fn wait_changed(&self) -> bool {
        let now = self.peek();
        let mut s = lock(&self.wait_seen);
        std::mem::replace(&mut *s, now) != now
    }

    /// fi_trywait on this counter: -FI_EAGAIN if it moved since the last
    /// trywait/fi_wait looked.
    pub(crate) fn trywait(&self) -> i32 {
        self.wait
            .trywait(&self.sources, FI_LOG_CNTR, "counter", || self.wait_changed())
    }
}

impl Waitable for Cntr {
    fn progress_sources(&self) {
        self.sources.progress();
    }
    fn has_event(&self) -> bool {
        self.wait_changed()
    }
    fn collect(&self, fds: &mut Vec<RawFd>, next: &mut Option<u64>) -> u64 {
        self.sources.collect(fds, next)
    }
}

// ---------------------------------------------------------------------------
// The C face

type Obj = FidObj<fid_cntr, Cntr>;

/// fi_cntr_open, called by the domain's shim.
///
/// # Safety
/// `attr` must be NULL or point to a readable fi_cntr_attr.
pub unsafe fn open(domain: &Arc<Domain>, attr: *mut fi_cntr_attr, context: *mut c_void) -> Result<*mut fid_cntr, i32> {
    let (wait_obj, ws) = if attr.is_null() {
        (FI_WAIT_NONE, None)
    } else {
        // SAFETY: the caller's contract (`attr` NULL or readable; not NULL here).
        let a = unsafe { &*attr };
        if a.events != FI_CNTR_EVENTS_COMP {
            crate::warn!(
                FI_LOG_CNTR,
                "fi_cntr_open: events {} not supported (only FI_CNTR_EVENTS_COMP)",
                a.events
            );
            return Err(-FI_ENOSYS);
        }
        if a.flags != 0 {
            crate::warn!(FI_LOG_CNTR, "fi_cntr_open: flags {:#x} must be 0", a.flags);
            return Err(-FI_EINVAL);
        }
        (
            a.wait_obj,
            check_wait_attr(a.wait_obj, a.wait_set, FI_LOG_CNTR, "fi_cntr_open")?,
        )
    };
    let c = Cntr::new(wait_obj, context, ws, Some(ParentRef::new(domain)))?;
    Ok(into_fid(c))
}

/// Wraps counter state in the fid_cntr the application holds.
pub(crate) fn into_fid(c: Arc<Cntr>) -> *mut fid_cntr {
    let f = fid_cntr {
        fid: fid_header(FI_CLASS_CNTR, c.context(), CNTR_FI_OPS.ptr()),
        ops: CNTR_OPS.ptr(),
    };
    Obj::create(f, c)
}

/// The counter behind an application-supplied fid (endpoint/MR bind, poll
/// sets): checks class and magic.
///
/// # Safety
/// `p` must be NULL or point to readable memory of at least a `struct fid`.
pub unsafe fn from_fid(p: *const c_void) -> Option<Arc<Cntr>> {
    // SAFETY: the caller's contract (`p` NULL or a readable fid).
    (unsafe { Obj::get(p, FI_CLASS_CNTR) }).cloned()
}

unsafe extern "C" fn close(f: *mut fid) -> i32 {
    abi_guard!("close", -FI_EOTHER, || {
        // SAFETY: `f` is the application's fid, or NULL (fi_close(3)).
        unsafe {
            crate::fid::close_unless_busy::<fid_cntr, Cntr>(
                f,
                FI_CLASS_CNTR,
                FI_LOG_CNTR,
                "endpoints or memory regions bound to the counter",
            )
        }
    })
}

unsafe extern "C" fn control(f: *mut fid, cmd: i32, arg: *mut c_void) -> i32 {
    abi_guard!("control", -FI_EOTHER, || {
        // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
        let Some(c) = (unsafe { Obj::get(f as *const c_void, FI_CLASS_CNTR) }) else {
            return -FI_EINVAL;
        };
        match cmd as u32 {
            FI_GETOPSFLAG | FI_SETOPSFLAG if arg.is_null() => -FI_EINVAL,
            FI_GETOPSFLAG => {
                // SAFETY: fi_cntr(3): FI_GETOPSFLAG takes a uint64_t *.
                unsafe { *(arg as *mut u64) = c.ops_flags.load(SeqCst) };
                0
            }
            FI_SETOPSFLAG => {
                // SAFETY: fi_cntr(3): FI_SETOPSFLAG takes a uint64_t *.
                c.ops_flags.store(unsafe { *(arg as *const u64) }, SeqCst);
                0
            }
            // SAFETY: `arg` is the application's fi_control argument for `cmd`.
            _ => unsafe {
                control_wait(
                    c.wait_obj,
                    c.wait.own(),
                    |w| {
                        let mut fds = Vec::new();
                        let gen = c.sources.collect(&mut fds, &mut None);
                        w.refresh(&mut fds, gen);
                    },
                    cmd,
                    arg,
                    FI_LOG_CNTR,
                )
            },
        }
    })
}

macro_rules! cntr_shim {
    ($name:ident, |$c:ident| $body:expr, $bad:expr) => {
        unsafe extern "C" fn $name(f: *mut fid_cntr) -> u64 {
            crate::abi::guard(
                concat!(module_path!(), "::", stringify!($name)),
                0,
                // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
                || match unsafe { Obj::get(f as *const c_void, FI_CLASS_CNTR) } {
                    Some($c) => $body,
                    None => $bad,
                },
            )
        }
    };
    ($name:ident, |$c:ident, $v:ident| $body:expr) => {
        unsafe extern "C" fn $name(f: *mut fid_cntr, $v: u64) -> i32 {
            crate::abi::guard(
                concat!(module_path!(), "::", stringify!($name)),
                -FI_EOTHER,
                // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
                || match unsafe { Obj::get(f as *const c_void, FI_CLASS_CNTR) } {
                    Some($c) => {
                        $body;
                        0
                    }
                    None => -FI_EINVAL,
                },
            )
        }
    };
}
// fi_cntr_read has no error return; 0 for a bad fid is what util does too.
cntr_shim!(cntr_read, |c| c.read(), 0);
cntr_shim!(cntr_readerr, |c| c.read_err(), 0);
cntr_shim!(cntr_add, |c, v| c.add(v));
cntr_shim!(cntr_set, |c, v| c.set(v));
cntr_shim!(cntr_adderr, |c, v| c.add_err(v));
cntr_shim!(cntr_seterr, |c, v| c.set_err(v));

unsafe extern "C" fn cntr_wait(f: *mut fid_cntr, threshold: u64, timeout: i32) -> i32 {
    abi_guard!("cntr_wait", -FI_EOTHER, || {
        // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
        let Some(c) = (unsafe { Obj::get(f as *const c_void, FI_CLASS_CNTR) }) else {
            return -FI_EINVAL;
        };
        c.wait(threshold, timeout)
    })
}

static CNTR_FI_OPS: Table<fi_ops> = Table(base_ops(close, None, Some(control), None));
static CNTR_OPS: Table<fi_ops_cntr> = Table(fi_ops_cntr {
    size: std::mem::size_of::<fi_ops_cntr>(),
    read: Some(cntr_read),
    readerr: Some(cntr_readerr),
    add: Some(cntr_add),
    set: Some(cntr_set),
    wait: Some(cntr_wait),
    adderr: Some(cntr_adderr),
    seterr: Some(cntr_seterr),
});

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wait::testutil::*;
    use std::time::{Duration, Instant};

    fn cntr(wait_obj: fi_wait_obj) -> Arc<Cntr> {
        Cntr::new(wait_obj, 7 as *mut c_void, None, None).unwrap()
    }

    /// The counter's wait object, where fi_cntr_wait sleeps.
    fn wobj(c: &Cntr) -> &crate::wait::WaitObj {
        c.wait.own().expect("a counter with its own wait object")
    }

    /// Reads that see the same value are a wait's polls: a long run of
    /// them gives the CPU away now and then (`Spin`); a read that sees the
    /// counter move ends the wait.
    #[test]
    fn a_counter_polled_long_without_moving_yields() {
        let c = cntr(FI_WAIT_NONE);
        let mut reads = 0u64;
        while c.spin.yields() == 0 {
            assert_eq!(c.read(), 0);
            reads += 1;
            assert!(reads < 1 << 32, "no yield after {} reads", reads);
        }
        let y = c.spin.yields();
        c.inc();
        for _ in 0..crate::progress::SPIN_LOOK_EVERY {
            assert_eq!(c.read(), 1);
        }
        assert_eq!(c.spin.yields(), y, "the read that saw 1 began a new wait");
    }

    #[test]
    fn wait_reaches_threshold_through_source_progress() {
        let c = cntr(FI_WAIT_UNSPEC);
        let wc = Arc::downgrade(&c);
        // Each progress call completes one operation, but only every 5 ms
        // (the source's timer), so waiting must sleep, not spin.
        let fake = Arc::new(FakeSrc::new(move |s| {
            let now = crate::progress::now_ns();
            let mut d = s.deadline.lock().unwrap();
            if d.is_none_or(|d| now >= d) {
                *d = Some(now + 5_000_000);
                wc.upgrade().unwrap().inc();
            }
        }));
        let src: Arc<dyn Progress> = fake.clone();
        c.add_source(Arc::downgrade(&src));
        assert_eq!(c.wait(5, HANG_MS), 0);
        assert_eq!(c.peek().0, 5);
        // One sleep until each of the four timers that stood between the
        // first operation and the fifth (a few more if a signal interrupts
        // one), one progress call per round: sleeping, not spinning.
        let (sleeps, calls) = (wobj(&c).sleeps(), fake.calls.load(SeqCst));
        assert!(
            (4..=8).contains(&sleeps) && calls <= sleeps + 1,
            "{sleeps} sleeps, {calls} progress calls"
        );
    }

    #[test]
    fn wait_times_out_and_reports_errors() {
        let c = cntr(FI_WAIT_FD);
        let t0 = Instant::now();
        assert_eq!(c.wait(1, 100), -FI_ETIMEDOUT);
        assert!(t0.elapsed() >= Duration::from_millis(100), "{:?}", t0.elapsed());
        let sleeps = wobj(&c).sleeps();
        assert!((1..=3).contains(&sleeps), "{sleeps} sleeps in one timed-out wait");
        // An error completion while the waiter sleeps ends the wait.
        let c2 = c.clone();
        let t = std::thread::spawn(move || {
            wait_until("the waiter sleeps", || wobj(&c2).asleep() == 1);
            c2.inc_err();
        });
        assert_eq!(c.wait(1, HANG_MS), -FI_EAVAIL);
        join_within(t, "the error is counted");
        // Each completion wakes it; below the threshold it sleeps again.
        let c2 = c.clone();
        let mut slept = wobj(&c).sleeps();
        let t = std::thread::spawn(move || {
            for _ in 0..3 {
                wait_until("the waiter sleeps again", || {
                    wobj(&c2).asleep() == 1 && wobj(&c2).sleeps() > slept
                });
                slept = wobj(&c2).sleeps();
                c2.inc();
            }
        });
        assert_eq!(c.wait(3, HANG_MS), 0);
        join_within(t, "the completions are counted");
        assert_eq!((c.read(), c.read_err()), (3, 1));
        // No wait object: fi_cntr_wait polls (as libfabric's util counters do).
        assert_eq!(cntr(FI_WAIT_NONE).wait(0, 0), 0);
        assert_eq!(cntr(FI_WAIT_NONE).wait(1, 0), -FI_ETIMEDOUT);
    }

    #[test]
    fn app_ops_and_poll_checkpoint() {
        let c = cntr(FI_WAIT_NONE);
        assert!(!c.poll_changed());
        c.inc();
        assert!(c.poll_changed());
        assert!(!c.poll_changed());
        c.add(10);
        assert_eq!(c.read(), 11);
        assert!(!c.poll_changed(), "fi_cntr_add resets the poll checkpoint");
        c.set_err(4);
        c.add_err(1);
        assert_eq!(c.read_err(), 5);
        c.set(2);
        assert_eq!(c.peek(), (2, 5));
    }

    #[test]
    fn c_shims() {
        let c = cntr(FI_WAIT_UNSPEC);
        let p = into_fid(c.clone());
        // SAFETY: p is a live fid_cntr.
        unsafe {
            let ops = &*(*p).ops;
            assert_eq!(ops.add.unwrap()(p, 5), 0);
            assert_eq!(ops.read.unwrap()(p), 5);
            assert_eq!(ops.seterr.unwrap()(p, 2), 0);
            assert_eq!(ops.readerr.unwrap()(p), 2);
            assert_eq!(ops.wait.unwrap()(p, 5, 0), 0);
            assert_eq!(ops.wait.unwrap()(p, 6, 10), -FI_ETIMEDOUT);
            let ctl = (*(*p).fid.ops).control.unwrap();
            let mut fl = 0x40u64;
            assert_eq!(
                ctl(p as *mut fid, FI_SETOPSFLAG as i32, &mut fl as *mut u64 as *mut c_void),
                0
            );
            fl = 0;
            assert_eq!(
                ctl(p as *mut fid, FI_GETOPSFLAG as i32, &mut fl as *mut u64 as *mut c_void),
                0
            );
            assert_eq!(fl, 0x40);
            let mut fd = -1i32;
            assert_eq!(
                ctl(p as *mut fid, FI_GETWAIT as i32, &mut fd as *mut i32 as *mut c_void),
                0
            );
            assert!(fd >= 0);
            let mut fids = [p as *mut fid];
            assert_eq!(
                crate::wait::trywait(fids.as_mut_ptr(), 1),
                -FI_EAGAIN,
                "moved since last looked"
            );
            assert_eq!(crate::wait::trywait(fids.as_mut_ptr(), 1), 0);
            assert!(!fd_readable(fd));
            c.inc();
            assert!(fd_readable(fd));
            assert_eq!(crate::wait::trywait(fids.as_mut_ptr(), 1), -FI_EAGAIN);
            assert_eq!((*(*p).fid.ops).close.unwrap()(p as *mut fid), 0);
        }
    }
}
