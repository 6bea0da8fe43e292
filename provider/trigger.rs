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
    /// Deferred work counts the counter's errors too (fi_trigger(3)).
    with_errors: bool,
    /// The application's `fi_deferred_work` (FI_CANCEL_WORK finds it by
    /// that), 0 for a triggered operation.
    key: usize,
    op: Box<dyn Deferred>,
}

impl Pending {
    fn due(&self) -> bool {
        let (v, e) = self.cntr.peek();
        let v = if self.with_errors { v + e } else { v };
        v >= self.threshold && self.op.ready()
    }
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
        self.push(Pending {
            cntr,
            threshold,
            with_errors: false,
            key: 0,
            op,
        });
    }

    fn push(&self, x: Pending) {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        p.push(x);
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
                let (due, keep) = std::mem::take(&mut *p).into_iter().partition(|x| x.due());
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

impl Triggers {
    /// FI_CANCEL_WORK: whether work `key` was still waiting (it is gone).
    fn cancel(&self, key: usize) -> bool {
        self.remove(|x| x.key == key) > 0
    }

    /// FI_FLUSH_WORK: every waiting work request, or those on `cntr`.
    fn flush(&self, cntr: Option<*const Cntr>) -> usize {
        self.remove(|x| x.key != 0 && cntr.is_none_or(|c| std::ptr::eq(Arc::as_ptr(&x.cntr), c)))
    }

    fn remove(&self, f: impl Fn(&Pending) -> bool) -> usize {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let n = p.len();
        p.retain(|x| !f(x));
        self.count.store(p.len(), Ordering::Release);
        n - p.len()
    }
}

// ---------------------------------------------------------------------------
// The deferred work queue (fi_trigger(3), "DEFERRED WORK QUEUES"):
// fi_control(domain, FI_QUEUE_WORK / FI_CANCEL_WORK / FI_FLUSH_WORK).

/// A queued `fi_deferred_work`. The application keeps it and the op
/// structure it points to valid until the work completes or is cancelled
/// (fi_trigger(3)).
struct Work {
    work: *const fi_deferred_work,
    /// The endpoint of a data operation (checked at FI_QUEUE_WORK).
    ep: Option<Arc<crate::ep::Ep>>,
    /// Where its completion goes: this counter, and the endpoint's CQ and
    /// counters only with FI_COMPLETION (fi_trigger(3)).
    completion: Option<Arc<Cntr>>,
    at_ep: bool,
    /// The context a data operation completes with (routed by it).
    ctx: usize,
}

// SAFETY: `work` is only read (in `fire`), and the application keeps it
// valid and unchanged until the work completes or is cancelled, from
// whichever thread reaches the safe point.
unsafe impl Send for Work {}

impl Work {
    fn op_type(&self) -> fi_op_type {
        // SAFETY: see `Work`.
        unsafe { (*self.work).op_type }
    }
    fn tx(&self) -> bool {
        !matches!(self.op_type(), FI_OP_RECV | FI_OP_TRECV)
    }
}

impl Deferred for Work {
    fn ready(&self) -> bool {
        self.ep.as_ref().is_none_or(|ep| ep.room(self.tx()) > 0)
    }

    fn fire(self: Box<Self>) {
        // SAFETY: see `Work`: the request and its op structure are valid.
        let w = unsafe { &*self.work };
        if let Some(ep) = &self.ep {
            ep.route_next(self.ctx, self.completion.clone(), self.at_ep);
        }
        // SAFETY: the op union member named by op_type (checked at queueing).
        let r = unsafe { post(w) };
        let Some(ep) = &self.ep else { return };
        if r < 0 {
            crate::warn!(FI_LOG_DOMAIN, "deferred work (op type {}) failed: {}", w.op_type, r);
            // Routed (route_next above), so it counts on the completion
            // counter.
            ep.fail_op(self.ctx, 0, self.tx(), (-r) as i32);
        }
    }
}

/// A deferred data operation's endpoint, op flags and the context it
/// completes with; None for a counter operation or an unknown type.
///
/// # Safety
/// `w.op` holds the member `w.op_type` names, pointing to a valid structure.
unsafe fn op_parts(w: &fi_deferred_work) -> Option<(*mut fid_ep, u64, usize)> {
    // SAFETY: the caller's contract; every data op structure holds the
    // application's endpoint, flags and message.
    unsafe {
        Some(match w.op_type {
            FI_OP_RECV | FI_OP_SEND => {
                let o = &*w.op.msg;
                (o.ep, o.flags, o.msg.context as usize)
            }
            FI_OP_TRECV | FI_OP_TSEND => {
                let o = &*w.op.tagged;
                (o.ep, o.flags, o.msg.context as usize)
            }
            FI_OP_READ | FI_OP_WRITE => {
                let o = &*w.op.rma;
                (o.ep, o.flags, o.msg.context as usize)
            }
            FI_OP_ATOMIC => {
                let o = &*w.op.atomic;
                (o.ep, o.flags, o.msg.context as usize)
            }
            FI_OP_FETCH_ATOMIC => {
                let o = &*w.op.fetch_atomic;
                (o.ep, o.flags, o.msg.context as usize)
            }
            FI_OP_COMPARE_ATOMIC => {
                let o = &*w.op.compare_atomic;
                (o.ep, o.flags, o.msg.context as usize)
            }
            _ => return None,
        })
    }
}

/// Posts deferred work `w` through its endpoint's own ops tables, as the
/// application would have (the *msg calls), or runs its counter op.
///
/// # Safety
/// `w.op` holds the member `w.op_type` names, pointing to a valid
/// structure whose endpoint is a gnix endpoint (checked at queueing).
unsafe fn post(w: &fi_deferred_work) -> isize {
    let no = -FI_ENOSYS as isize;
    // SAFETY: the caller's contract; the tables are gnix's own, filled.
    unsafe {
        match w.op_type {
            FI_OP_CNTR_SET | FI_OP_CNTR_ADD => {
                let o = &*w.op.cntr;
                let Some(c) = crate::cntr::from_fid(o.cntr as *const std::ffi::c_void) else {
                    return -FI_EINVAL as isize;
                };
                if w.op_type == FI_OP_CNTR_SET {
                    c.set(o.value)
                } else {
                    c.add(o.value)
                }
                0
            }
            FI_OP_RECV => {
                let o = &*w.op.msg;
                (*(*o.ep).msg).recvmsg.map_or(no, |f| f(o.ep, &o.msg, o.flags))
            }
            FI_OP_SEND => {
                let o = &*w.op.msg;
                (*(*o.ep).msg).sendmsg.map_or(no, |f| f(o.ep, &o.msg, o.flags))
            }
            FI_OP_TRECV => {
                let o = &*w.op.tagged;
                (*(*o.ep).tagged).recvmsg.map_or(no, |f| f(o.ep, &o.msg, o.flags))
            }
            FI_OP_TSEND => {
                let o = &*w.op.tagged;
                (*(*o.ep).tagged).sendmsg.map_or(no, |f| f(o.ep, &o.msg, o.flags))
            }
            FI_OP_READ => {
                let o = &*w.op.rma;
                (*(*o.ep).rma).readmsg.map_or(no, |f| f(o.ep, &o.msg, o.flags))
            }
            FI_OP_WRITE => {
                let o = &*w.op.rma;
                (*(*o.ep).rma).writemsg.map_or(no, |f| f(o.ep, &o.msg, o.flags))
            }
            FI_OP_ATOMIC => {
                let o = &*w.op.atomic;
                (*(*o.ep).atomic).writemsg.map_or(no, |f| f(o.ep, &o.msg, o.flags))
            }
            FI_OP_FETCH_ATOMIC => {
                let o = &*w.op.fetch_atomic;
                (*(*o.ep).atomic).readwritemsg.map_or(no, |f| {
                    f(o.ep, &o.msg, o.fetch.msg_iov, o.fetch.desc, o.fetch.iov_count, o.flags)
                })
            }
            FI_OP_COMPARE_ATOMIC => {
                let o = &*w.op.compare_atomic;
                (*(*o.ep).atomic).compwritemsg.map_or(no, |f| {
                    f(
                        o.ep,
                        &o.msg,
                        o.compare.msg_iov,
                        o.compare.desc,
                        o.compare.iov_count,
                        o.fetch.msg_iov,
                        o.fetch.desc,
                        o.fetch.iov_count,
                        o.flags,
                    )
                })
            }
            _ => no,
        }
    }
}

/// fi_control(domain, FI_QUEUE_WORK / FI_CANCEL_WORK / FI_FLUSH_WORK).
///
/// # Safety
/// `arg` must be NULL or the application's `struct fi_deferred_work`,
/// its op pointer naming a valid structure of the type it says.
pub(crate) unsafe fn control(t: &Triggers, cmd: u32, arg: *mut std::ffi::c_void) -> i32 {
    let w = arg as *const fi_deferred_work;
    match cmd {
        FI_QUEUE_WORK => {
            // SAFETY: the caller's contract.
            match unsafe { queue(t, w) } {
                Ok(()) => 0,
                Err(e) => e,
            }
        }
        FI_CANCEL_WORK => {
            if t.cancel(w as usize) {
                0
            } else {
                -FI_ENOENT
            }
        }
        FI_FLUSH_WORK => {
            // SAFETY: the caller's contract: NULL, or a request naming a counter.
            let cntr = unsafe { w.as_ref() }
                .filter(|w| !w.triggering_cntr.is_null())
                // SAFETY: a counter fid the application holds; `from_fid` checks it.
                .and_then(|w| unsafe { crate::cntr::from_fid(w.triggering_cntr as *const std::ffi::c_void) });
            t.flush(cntr.as_ref().map(Arc::as_ptr));
            0
        }
        _ => -FI_ENOSYS,
    }
}

/// # Safety
/// As for `control`.
unsafe fn queue(t: &Triggers, w: *const fi_deferred_work) -> Result<(), i32> {
    // SAFETY: the caller's contract.
    let Some(wr) = (unsafe { w.as_ref() }) else {
        return Err(-FI_EINVAL);
    };
    // SAFETY: a counter fid the application holds, or NULL; `from_fid` checks it.
    let Some(trig) = (unsafe { crate::cntr::from_fid(wr.triggering_cntr as *const std::ffi::c_void) }) else {
        crate::warn!(FI_LOG_DOMAIN, "FI_QUEUE_WORK without a triggering counter");
        return Err(-FI_EINVAL);
    };
    // SAFETY: the union member the op type names: none is a null pointer.
    if unsafe { wr.op.msg }.is_null() {
        return Err(-FI_EINVAL);
    }
    // SAFETY: a counter fid the application holds, or NULL; `from_fid` checks it.
    let completion = unsafe { crate::cntr::from_fid(wr.completion_cntr as *const std::ffi::c_void) };
    let (mut at_ep, mut ctx) = (false, 0);
    let ep = match wr.op_type {
        FI_OP_CNTR_SET | FI_OP_CNTR_ADD => {
            if !wr.completion_cntr.is_null() {
                // fi_trigger(3): counter operations take no completion counter.
                return Err(-FI_EINVAL);
            }
            None
        }
        _ => {
            // SAFETY: the member op_type names (a data operation).
            let Some((ep, flags, c)) = (unsafe { op_parts(wr) }) else {
                crate::warn!(FI_LOG_DOMAIN, "FI_QUEUE_WORK: op type {} not supported", wr.op_type);
                return Err(-FI_EINVAL);
            };
            // SAFETY: an endpoint fid the application holds, or NULL; checked.
            let Some(e) = (unsafe { crate::ep::from_fid(ep as *const std::ffi::c_void) }) else {
                return Err(-FI_EINVAL);
            };
            at_ep = flags & FI_COMPLETION != 0;
            ctx = c;
            if let Some(cn) = &completion {
                // The application may wait on that counter alone, bound to
                // no endpoint, and under manual progress its waits and
                // reads must progress the work's endpoint: the domain's
                // endpoints join its sources (`Nic::endpoints`; here, not
                // inside a progress pass, which holds the source list).
                cn.add_source(Arc::downgrade(&e.domain.endpoints));
            }
            Some(e.clone())
        }
    };
    t.push(Pending {
        cntr: trig,
        threshold: wr.threshold,
        with_errors: true,
        key: w as usize,
        op: Box::new(Work {
            work: w,
            ep,
            completion,
            at_ep,
            ctx,
        }),
    });
    t.run();
    Ok(())
}
