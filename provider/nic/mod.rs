//! The software NIC of a domain: the wires its endpoints talk through and
//! the progress engine that runs them when the application does not
//! (FI_PROGRESS_AUTO).
//!
//! The progress thread stays out of the way of an application that polls:
//! while any endpoint of the domain was called by the application in the
//! last `BUSY_WINDOW_NS` (as the thread sees it: a call raises a flag the
//! thread takes at its next pass), the thread only sleeps on a timer, so it
//! neither steals datagrams from the polling thread nor adds a wakeup to
//! every packet; the longer the application keeps every endpoint busy, the
//! longer that timer (`busy_sleep_ms`). Once the application goes quiet
//! (blocked in `fi_cq_sread`, computing, or waiting on something else) the
//! thread sleeps in epoll on every endpoint's socket and progresses them
//! as data arrives.

pub(crate) mod atomic;
pub(crate) mod fabreq;
pub(crate) mod iov;
pub(crate) mod onesided;
pub(crate) mod port;
// Being rewritten as a sans-IO machine (issue 16); its dead code is
// reported there, not here.
// (Crate-private, clippy now also sees its `to_*(&self)` on a Copy type.)
pub mod shm;
pub(crate) mod slab;
pub(crate) mod stream;
pub(crate) mod txdesc;
pub mod udp;
pub(crate) mod udp_wire;
pub(crate) mod wire;

use crate::gate::Gate;
use crate::progress::{now_ns, Progress};
use rustix::event::{epoll, eventfd, EventfdFlags};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;

const BUSY_WINDOW_NS: u64 = 2_000_000;
/// The longest the thread sleeps between its looks while the application
/// keeps every endpoint busy (`busy_sleep_ms`).
const BUSY_SLEEP_MAX_MS: u64 = 16;

/// How long the thread sleeps before it looks again whether the
/// application still calls in, when it has called every endpoint for
/// `busy_for` ns: `BUSY_WINDOW_NS`, growing with an eighth of that time
/// up to `BUSY_SLEEP_MAX_MS`. Each look takes a polling rank's CPU for a
/// context switch there and back: on this VM some 480 looks a second,
/// about 20 us of the thread's CPU each, preempted the rank some 500
/// times a second (Open MPI's ping-pong, `/proc/PID/task/*/sched`). An
/// application that has polled for a while is likely to go on, and one
/// that stops after long polling is taken over within twice the sleep
/// (32 ms at most); short phases of polling (a halo exchange between
/// computations) keep the 2 ms. (Tried once before the polls gave their
/// CPU away, 11e3567, and undone, a37900c: three ranks on two cores then
/// spun through their time slices, and the thread's looks were what
/// moved a descheduled rank's UDP traffic.)
fn busy_sleep_ms(busy_for: u64) -> u64 {
    (busy_for / 8 / 1_000_000).clamp((BUSY_WINDOW_NS / 1_000_000).max(1), BUSY_SLEEP_MAX_MS)
}

/// What the progress thread needs from an endpoint.
pub trait AutoProgress: Progress {
    /// Monotonic ns of the application's last call into the endpoint, as
    /// the thread saw it: a call since the thread last asked counts as
    /// `now`. Asked once per endpoint per pass (it consumes that call).
    fn last_app_activity(&self, now: u64) -> u64;
    /// `progress` on behalf of the thread: does not count as application activity.
    fn auto_progress(&self);
}

struct Shared {
    eps: Mutex<Vec<Weak<dyn AutoProgress>>>,
    /// Held by the thread while it holds strong references to endpoints,
    /// so that `remove` returns only once the thread has let go (closing an
    /// endpoint must release its domain before fi_close(domain) looks).
    pass: Mutex<()>,
    stop: AtomicBool,
    /// Bumped when the endpoint list changes, so the thread rebuilds its epoll set.
    generation: AtomicU64,
    /// Wakes the thread (`kick`). None if the process is out of
    /// descriptors: then the thread only wakes on its timeouts (≤ 100 ms).
    wake: Option<OwnedFd>,
    /// The domain's gate (FI_THREAD_DOMAIN, `gate.rs`): the thread takes
    /// it for each pass that progresses endpoints.
    gate: Option<Arc<Gate>>,
}

pub struct Nic {
    auto: bool,
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Nic {
    pub fn new(auto: bool, gate: Option<Arc<Gate>>) -> Nic {
        let wake = eventfd(0, EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC)
            .inspect_err(|e| {
                crate::warn!(
                    crate::ffi::FI_LOG_DOMAIN,
                    "progress thread: no eventfd ({}): it wakes on timeouts only",
                    e
                )
            })
            .ok();
        Nic {
            auto,
            shared: Arc::new(Shared {
                eps: Mutex::new(Vec::new()),
                pass: Mutex::new(()),
                stop: AtomicBool::new(false),
                generation: AtomicU64::new(0),
                wake,
                gate,
            }),
            thread: Mutex::new(None),
        }
    }

    /// Whether the domain has a progress thread (FI_PROGRESS_AUTO).
    pub fn is_auto(&self) -> bool {
        self.auto
    }

    /// An enabled endpoint joins the domain's list (`endpoints`) and the
    /// progress thread (started on first use), if the domain has one.
    pub fn add(&self, ep: Weak<dyn AutoProgress>) {
        self.shared.eps.lock().unwrap().push(ep);
        if !self.auto {
            return;
        }
        self.shared.generation.fetch_add(1, Ordering::Release);
        self.kick();
        let mut t = self.thread.lock().unwrap();
        if t.is_none() {
            let shared = self.shared.clone();
            *t = std::thread::Builder::new()
                .name("gnix-progress".into())
                .spawn(move || run(shared))
                .ok();
        }
    }

    pub fn remove(&self, ep: &Weak<dyn AutoProgress>) {
        self.shared
            .eps
            .lock()
            .unwrap()
            .retain(|e| !Weak::ptr_eq(e, ep) && e.strong_count() > 0);
        self.shared.generation.fetch_add(1, Ordering::Release);
        self.kick();
        drop(self.shared.pass.lock().unwrap());
    }

    /// Every enabled endpoint of the domain as one progress source: what a
    /// counter bound to a memory region (FI_RMA_EVENT) progresses under
    /// manual progress. Peers' accesses to the region arrive at whichever
    /// endpoint they target, and the first one cannot arrive before a
    /// wait on the counter has progressed it.
    pub fn endpoints(&self) -> Arc<dyn Progress> {
        Arc::new(Endpoints(self.shared.clone()))
    }

    /// Wakes the thread to re-evaluate (new endpoint, new work queued).
    pub fn kick(&self) {
        if let Some(w) = &self.shared.wake {
            // A full counter (EAGAIN) is a pending wake-up already.
            let _ = rustix::io::write(w, &1u64.to_ne_bytes());
        }
    }

    pub fn stop(&self) {
        self.shared.stop.store(true, Ordering::Release);
        self.kick();
        if let Some(t) = self.thread.lock().unwrap().take() {
            let _ = t.join();
        }
    }
}

/// `Nic::endpoints`.
struct Endpoints(Arc<Shared>);

impl Endpoints {
    fn live(&self) -> Vec<Arc<dyn AutoProgress>> {
        let eps = self.0.eps.lock().unwrap_or_else(|p| p.into_inner());
        eps.iter().filter_map(Weak::upgrade).collect()
    }
}

impl Progress for Endpoints {
    fn progress(&self) {
        for ep in self.live() {
            ep.progress();
        }
    }
    fn wait_fds(&self, out: &mut Vec<RawFd>) {
        for ep in self.live() {
            ep.wait_fds(out);
        }
    }
    fn next_deadline(&self) -> Option<u64> {
        self.live().iter().filter_map(|ep| ep.next_deadline()).min()
    }
    /// Every one armed for good (no `disarm`): a counter bound to a
    /// region is waited on rarely, and its endpoints keep their sockets in
    /// their epoll sets.
    fn arm_wakeup(&self) -> bool {
        // Every one armed, whatever the others say.
        let mut all = true;
        for ep in self.live() {
            all &= ep.arm_wakeup();
        }
        all
    }
}

impl Drop for Nic {
    fn drop(&mut self) {
        // The eventfd closes with `shared`, once the thread has let go of it.
        self.stop();
    }
}

/// The endpoints `armed` for the sleep just ended, disarmed: under
/// `Shared::pass` (the caller holds it), and only those still in the
/// list. An endpoint `Nic::remove` took out is not woken to be
/// disarmed: the thread would hold it (strongly) after `remove` returned,
/// and its last reference could then go with the thread, after the
/// application's fi_close(domain) found the domain still in use
/// (Open MPI's finalize saw -FI_EBUSY from a job across hosts).
fn disarm_listed(shared: &Shared, armed: &mut Vec<Weak<dyn AutoProgress>>) {
    if armed.is_empty() {
        return;
    }
    let eps = shared.eps.lock().unwrap();
    for w in armed.drain(..) {
        if !eps.iter().any(|e| Weak::ptr_eq(e, &w)) {
            continue;
        }
        if let Some(ep) = w.upgrade() {
            ep.disarm();
        }
    }
}

/// Watches `fd` for input in `set`, with its number as the event's data. A
/// failure (out of memory, or `fd` closed meanwhile) leaves that descriptor
/// to the timeouts.
fn epoll_add(set: &OwnedFd, fd: BorrowedFd<'_>) {
    let _ = epoll::add(
        set,
        fd,
        epoll::EventData::new_u64(fd.as_raw_fd() as u64),
        epoll::EventFlags::IN,
    );
}

/// Sleeps until a descriptor of `set` is readable or `ms` pass, then drains
/// the wake-up eventfd if it fired. Without an epoll set (the process was
/// out of descriptors when the thread started) it naps instead.
fn sleep_in(set: Option<&OwnedFd>, wake: Option<&OwnedFd>, events: &mut [epoll::Event], ms: u64) {
    let Some(set) = set else {
        std::thread::sleep(std::time::Duration::from_millis(ms.clamp(1, 100)));
        return;
    };
    let timeout = rustix::time::Timespec {
        tv_sec: (ms / 1000) as i64,
        tv_nsec: ((ms % 1000) * 1_000_000) as _,
    };
    // EINTR and the like: the loop goes round and sleeps again.
    let n = epoll::wait(set, &mut *events, Some(&timeout)).unwrap_or(0);
    let Some(wake) = wake else { return };
    if events[..n].iter().any(|e| e.data.u64() == wake.as_raw_fd() as u64) {
        let _ = rustix::io::read(wake, &mut [0u8; 8]);
    }
}

fn run(shared: Arc<Shared>) {
    let set = || {
        epoll::create(epoll::CreateFlags::CLOEXEC)
            .inspect_err(|e| {
                crate::warn!(
                    crate::ffi::FI_LOG_DOMAIN,
                    "progress thread: no epoll set ({}): polling every ms",
                    e
                )
            })
            .ok()
    };
    let busy_set = set();
    let timer_set = set();
    let wake = shared.wake.as_ref();
    if let (Some(t), Some(w)) = (&timer_set, wake) {
        epoll_add(t, w.as_fd());
    }
    let mut seen_gen = u64::MAX;
    let mut fds: Vec<RawFd> = Vec::new();
    let empty = epoll::Event {
        flags: epoll::EventFlags::empty(),
        data: epoll::EventData::new_u64(0),
    };
    let mut events = [empty; 16];
    // The endpoints armed for the sleep under way: disarmed after it.
    let mut armed: Vec<Weak<dyn AutoProgress>> = Vec::new();
    // Since when the application has kept every endpoint busy.
    let mut busy_since: Option<u64> = None;
    while !shared.stop.load(Ordering::Acquire) {
        let pass = shared.pass.lock().unwrap();
        disarm_listed(&shared, &mut armed);
        let gen = shared.generation.load(Ordering::Acquire);
        let eps: Vec<Arc<dyn AutoProgress>> = shared.eps.lock().unwrap().iter().filter_map(Weak::upgrade).collect();
        if let (true, Some(busy_set)) = (gen != seen_gen, &busy_set) {
            for fd in fds.drain(..) {
                // SAFETY: a number we added (the wake-up eventfd, or an
                // endpoint's socket), borrowed for this call only; epoll_ctl
                // touches no memory through it. An endpoint's may be closed
                // by now: then it already left the set and the call fails.
                // If the number was reused, the call finds that file in our
                // set only if we added it, and then the rebuild below adds
                // it again.
                let _ = epoll::delete(busy_set, unsafe { BorrowedFd::borrow_raw(fd) });
            }
            if let Some(w) = wake {
                fds.push(w.as_raw_fd());
            }
            for ep in &eps {
                ep.wait_fds(&mut fds);
            }
            // An endpoint without a socket yet reports -1.
            fds.retain(|&fd| fd >= 0);
            for &fd in &fds {
                // SAFETY: the wake-up eventfd, or a descriptor of an
                // endpoint in `eps`, which we hold: open through this call.
                epoll_add(busy_set, unsafe { BorrowedFd::borrow_raw(fd) });
            }
            seen_gen = gen;
        }
        let now = now_ns();
        // The application's calls are seen at the thread's passes (at
        // least every BUSY_WINDOW_NS while it is busy): an endpoint goes
        // idle between one and two windows after its last call.
        let idle: Vec<bool> = eps
            .iter()
            .map(|e| now.saturating_sub(e.last_app_activity(now)) >= BUSY_WINDOW_NS)
            .collect();
        let idle_eps = || eps.iter().zip(&idle).filter(|(_, &i)| i).map(|(e, _)| e);
        // Under FI_THREAD_DOMAIN the endpoints' locks are the domain's
        // gate: the thread takes it for a pass that has endpoints to
        // progress (never while the application polls them all), and
        // only when the application is in none of them; else it comes
        // back in a millisecond.
        let stolen = match (&shared.gate, idle.iter().any(|&i| i)) {
            (Some(g), true) => match g.steal() {
                Some(s) => Some(s),
                None => {
                    drop(eps);
                    drop(pass);
                    sleep_in(timer_set.as_ref(), wake, &mut events, 1);
                    continue;
                }
            },
            _ => None,
        };
        let (set, timeout_ms) = if !idle.iter().all(|&i| i) {
            // The application drives these endpoints itself, so the thread
            // stays off their sockets (a wakeup per datagram would cost the
            // busy poller its CPU). Endpoints of the domain it does not
            // call (a second endpoint whose CQ nobody reads while the first
            // is polled) are still the thread's, on a timer: their ACKs
            // and the data queued on their sockets must not wait for the
            // application to come back to them.
            for ep in idle_eps() {
                ep.auto_progress();
            }
            let now = now_ns();
            let since = if idle.iter().any(|&i| i) {
                busy_since = None;
                now
            } else {
                *busy_since.get_or_insert(now)
            };
            let busy_ms = busy_sleep_ms(now - since);
            let t = match idle_eps().filter_map(|e| e.next_deadline()).min() {
                Some(d) => (d.saturating_sub(now).div_ceil(1_000_000)).clamp(1, busy_ms),
                None => busy_ms,
            };
            (&timer_set, t)
        } else {
            busy_since = None;
            for ep in &eps {
                ep.auto_progress();
            }
            let now = now_ns();
            let mut deadline = eps.iter().filter_map(|e| e.next_deadline()).min();
            // Every one armed (and disarmed after the sleep), whatever the
            // others say.
            let mut all = true;
            for e in &eps {
                all &= e.arm_wakeup();
                armed.push(Arc::downgrade(e));
            }
            if !all {
                deadline = Some(0);
            }
            let t = match deadline {
                Some(d) if d <= now => 0,
                Some(d) => ((d - now).div_ceil(1_000_000)).min(100),
                None => 100,
            };
            (&busy_set, t)
        };
        drop(eps);
        drop(stolen);
        drop(pass);
        sleep_in(set.as_ref(), wake, &mut events, timeout_ms);
    }
}

#[cfg(test)]
mod tests;
