//! Triggered operations (fi_trigger(3), `FI_TRIGGER`): a data operation
//! held back until a counter reaches a threshold.
//!
//! A domain keeps its pending operations here, in the order they were
//! posted. They fire at safe points, where no endpoint lock is held (an
//! operation takes its endpoint's lock, and counters move under it): after
//! an endpoint's progress pass (`Ep::progress`, the progress thread), after
//! the application changes a counter (`fi_cntr_add`, `fi_cntr_set`), and
//! when one is posted. Each fires once, when its counter has reached the
//! threshold and its endpoint has room for it; otherwise it waits for the
//! next safe point.

use crate::cntr::Cntr;
use crate::ffi::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// An operation waiting for its trigger (`ep::deferred::Triggered`).
pub(crate) trait Deferred: Send {
    /// Its endpoint has room for it now.
    fn ready(&self) -> bool;
    /// Posts it (an error becomes its error completion).
    fn fire(self: Box<Self>);
}

struct Pending {
    cntr: Arc<Cntr>,
    threshold: u64,
    op: Box<dyn Deferred>,
}

/// A domain's triggered operations.
#[derive(Default)]
pub struct Triggers {
    pending: Mutex<Vec<Pending>>,
    /// How many are pending: the common check (none) takes no lock.
    count: AtomicUsize,
}

impl Triggers {
    /// Holds `op` until `cntr` reaches `threshold` (at once if it has).
    pub(crate) fn add(&self, cntr: Arc<Cntr>, threshold: u64, op: Box<dyn Deferred>) {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        p.push(Pending { cntr, threshold, op });
        self.count.store(p.len(), Ordering::Release);
        drop(p);
        self.run();
    }

    /// A safe point: fires every pending operation that is due.
    #[inline]
    pub(crate) fn run(&self) {
        if self.count.load(Ordering::Acquire) != 0 {
            self.run_now();
        }
    }

    #[cold]
    fn run_now(&self) {
        // Firing one may move a counter another waits on: until none is due.
        loop {
            let due: Vec<Pending> = {
                let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
                let (due, keep) = std::mem::take(&mut *p)
                    .into_iter()
                    .partition(|x| x.cntr.peek().0 >= x.threshold && x.op.ready());
                *p = keep;
                self.count.store(p.len(), Ordering::Release);
                due
            };
            if due.is_empty() {
                return;
            }
            for x in due {
                x.op.fire();
            }
        }
    }
}

/// The counter and threshold of a triggered operation's context.
///
/// # Safety
/// `ctx` must point to the application's `struct fi_triggered_context`
/// (fi_trigger(3): the context of an operation posted with FI_TRIGGER).
pub(crate) unsafe fn threshold_of(ctx: usize) -> Result<(Arc<Cntr>, u64), i32> {
    // SAFETY: the caller's contract.
    let Some(t) = (unsafe { (ctx as *const fi_triggered_context).as_ref() }) else {
        crate::warn!(FI_LOG_EP_DATA, "FI_TRIGGER with a NULL context");
        return Err(-FI_EINVAL);
    };
    if t.event_type != FI_TRIGGER_THRESHOLD {
        crate::warn!(FI_LOG_EP_DATA, "FI_TRIGGER event {} not supported", t.event_type);
        return Err(-FI_ENOSYS);
    }
    // SAFETY: event_type says the union holds a threshold.
    let th = unsafe { t.trigger.threshold };
    // SAFETY: a counter fid the application holds, or NULL; `from_fid` checks class and magic.
    let Some(c) = (unsafe { crate::cntr::from_fid(th.cntr as *const std::ffi::c_void) }) else {
        crate::warn!(FI_LOG_EP_DATA, "FI_TRIGGER threshold without a counter");
        return Err(-FI_EINVAL);
    };
    Ok((c, th.threshold as u64))
}
