//! Completion counters (fi_cntr(3)).
//!
//! Two atomics (successes, errors); reads drive the bound endpoints'
//! progress like CQ reads do, and fi_cntr_wait sleeps on the counter's wait
//! object between rounds instead of spinning.

use crate::domain::Domain;
use crate::ffi::*;
use crate::fid::{base_ops, fid_header, FidObj, ParentRef, Refs, Table};
use crate::progress::Progress;
use crate::wait::{check_wait_attr, control_wait, deadline_ms, lock, Sources, Wait, WaitSet, Waitable};
use std::ffi::c_void;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
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
        let in_set = waitset.is_some();
        let c = Arc::new(Cntr {
            refs: Refs::default(),
            value: AtomicU64::new(0),
            err: AtomicU64::new(0),
            wait_obj,
            context: context as usize,
            ops_flags: AtomicU64::new(0),
            sources: Sources::new(),
            wait: Wait::new(waitset, wait_obj)?,
            poll_seen: Mutex::new((0, 0)),
            wait_seen: Mutex::new((0, 0)),
            _domain: domain,
        });
        if in_set {
            if let Some(ws) = c.wait.set() {
                ws.add_member(Arc::downgrade(&c) as Weak<dyn Waitable>);
            }
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
        self.value.load(SeqCst)
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
            Wait::None => {
                crate::warn!(FI_LOG_CNTR, "fi_cntr_wait: the counter was opened with FI_WAIT_NONE");
                return -FI_ENOSYS;
            }
            Wait::Set(..) => {
                crate::warn!(FI_LOG_CNTR, "fi_cntr_wait: the counter belongs to a wait set; use fi_wait");
                return -FI_EINVAL;
            }
        };
        let err0 = self.err.load(SeqCst);
        let r = w.block(
            || self.sources.progress(),
            |fds: &mut Vec<RawFd>, next: &mut Option<u64>| self.sources.collect(fds, next),
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
        self.sources.progress();
        match &self.wait {
            Wait::None => {
                crate::warn!(FI_LOG_CNTR, "fi_trywait: the counter was opened with FI_WAIT_NONE");
                return -FI_EINVAL;
            }
            Wait::Own(w) => w.prepare_native_wait(|fds, next| self.sources.collect(fds, next)),
            Wait::Set(w, _) => w.arm(),
        }
        if self.wait_changed() {
            -FI_EAGAIN
        } else {
            0
        }
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
        let a = &*attr;
        if a.events != FI_CNTR_EVENTS_COMP {
            crate::warn!(FI_LOG_CNTR, "fi_cntr_open: events {} not supported (only FI_CNTR_EVENTS_COMP)", a.events);
            return Err(-FI_ENOSYS);
        }
        if a.flags != 0 {
            crate::warn!(FI_LOG_CNTR, "fi_cntr_open: flags {:#x} must be 0", a.flags);
            return Err(-FI_EINVAL);
        }
        (a.wait_obj, check_wait_attr(a.wait_obj, a.wait_set, FI_LOG_CNTR, "fi_cntr_open")?)
    };
    let c = Cntr::new(wait_obj, context, ws, Some(ParentRef::new(domain)))?;
    Ok(into_fid(c))
}

/// Wraps counter state in the fid_cntr the application holds.
pub(crate) fn into_fid(c: Arc<Cntr>) -> *mut fid_cntr {
    let f = fid_cntr { fid: fid_header(FI_CLASS_CNTR, c.context(), CNTR_FI_OPS.ptr()), ops: CNTR_OPS.ptr() };
    Obj::create(f, c)
}

/// The counter behind an application-supplied fid (endpoint/MR bind, poll
/// sets): checks class and magic.
///
/// # Safety
/// `p` must be NULL or point to readable memory of at least a `struct fid`.
pub unsafe fn from_fid(p: *const c_void) -> Option<Arc<Cntr>> {
    Obj::get(p, FI_CLASS_CNTR).cloned()
}

unsafe extern "C" fn close(f: *mut fid) -> i32 {
    let Some(c) = Obj::get(f as *const c_void, FI_CLASS_CNTR) else { return -FI_EINVAL };
    if c.refs.busy() {
        crate::warn!(FI_LOG_CNTR, "fi_close(cntr): endpoints or memory regions are still bound to it");
        return -FI_EBUSY;
    }
    Obj::destroy(f as *mut c_void);
    0
}

unsafe extern "C" fn control(f: *mut fid, cmd: i32, arg: *mut c_void) -> i32 {
    let Some(c) = Obj::get(f as *const c_void, FI_CLASS_CNTR) else { return -FI_EINVAL };
    match cmd as u32 {
        FI_GETOPSFLAG | FI_SETOPSFLAG if arg.is_null() => -FI_EINVAL,
        FI_GETOPSFLAG => {
            // SAFETY: fi_cntr(3): FI_GETOPSFLAG takes a uint64_t *.
            *(arg as *mut u64) = c.ops_flags.load(SeqCst);
            0
        }
        FI_SETOPSFLAG => {
            // SAFETY: fi_cntr(3): FI_SETOPSFLAG takes a uint64_t *.
            c.ops_flags.store(*(arg as *const u64), SeqCst);
            0
        }
        // SAFETY: `arg` is the application's fi_control argument for `cmd`.
        _ => control_wait(
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
        ),
    }
}

macro_rules! cntr_shim {
    ($name:ident, |$c:ident| $body:expr, $bad:expr) => {
        unsafe extern "C" fn $name(f: *mut fid_cntr) -> u64 {
            match Obj::get(f as *const c_void, FI_CLASS_CNTR) {
                Some($c) => $body,
                None => $bad,
            }
        }
    };
    ($name:ident, |$c:ident, $v:ident| $body:expr) => {
        unsafe extern "C" fn $name(f: *mut fid_cntr, $v: u64) -> i32 {
            match Obj::get(f as *const c_void, FI_CLASS_CNTR) {
                Some($c) => {
                    $body;
                    0
                }
                None => -FI_EINVAL,
            }
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
    let Some(c) = Obj::get(f as *const c_void, FI_CLASS_CNTR) else { return -FI_EINVAL };
    c.wait(threshold, timeout)
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
