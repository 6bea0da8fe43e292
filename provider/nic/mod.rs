//! The software NIC of a domain: the wires its endpoints talk through and
//! the progress engine that runs them when the application does not
//! (FI_PROGRESS_AUTO).
//!
//! The progress thread stays out of the way of an application that polls:
//! while any endpoint of the domain was progressed by the application in
//! the last `BUSY_WINDOW_NS`, the thread only sleeps on a timer, so it
//! neither steals datagrams from the polling thread nor adds a wakeup to
//! every packet. Once the application goes quiet (blocked in `fi_cq_sread`,
//! computing, or waiting on something else) the thread sleeps in epoll on
//! every endpoint's socket and progresses them as data arrives.

pub(crate) mod fabreq;
pub(crate) mod iov;
pub(crate) mod port;
pub mod shm;
pub(crate) mod shm_port;
pub(crate) mod slab;
pub(crate) mod txdesc;
pub mod udp;
pub(crate) mod udp_wire;
pub(crate) mod wire;

use crate::progress::{now_ns, Progress};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;

const BUSY_WINDOW_NS: u64 = 2_000_000;

/// What the progress thread needs from an endpoint.
pub trait AutoProgress: Progress {
    /// Monotonic ns of the application's last call into the endpoint.
    fn last_app_activity(&self) -> u64;
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
    wake: RawFd,
}

pub struct Nic {
    auto: bool,
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Nic {
    pub fn new(auto: bool) -> Nic {
        // SAFETY: eventfd has no memory preconditions.
        let wake = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        Nic {
            auto,
            shared: Arc::new(Shared {
                eps: Mutex::new(Vec::new()),
                pass: Mutex::new(()),
                stop: AtomicBool::new(false),
                generation: AtomicU64::new(0),
                wake,
            }),
            thread: Mutex::new(None),
        }
    }

    pub fn auto_progress(&self) -> bool {
        self.auto
    }

    /// An enabled endpoint joins the progress thread (started on first use).
    pub fn add(&self, ep: Weak<dyn AutoProgress>) {
        if !self.auto {
            return;
        }
        self.shared.eps.lock().unwrap().push(ep);
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

    /// Wakes the thread to re-evaluate (new endpoint, new work queued).
    pub fn kick(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a valid u64 to our own eventfd.
        unsafe { libc::write(self.shared.wake, &one as *const u64 as *const libc::c_void, 8) };
    }

    pub fn stop(&self) {
        self.shared.stop.store(true, Ordering::Release);
        self.kick();
        if let Some(t) = self.thread.lock().unwrap().take() {
            let _ = t.join();
        }
    }
}

impl Drop for Nic {
    fn drop(&mut self) {
        self.stop();
        // SAFETY: closing our own eventfd once.
        unsafe { libc::close(self.shared.wake) };
    }
}

fn epoll_add(ep: RawFd, fd: RawFd) {
    let mut ev = libc::epoll_event {
        events: libc::EPOLLIN as u32,
        u64: fd as u64,
    };
    // SAFETY: valid epoll fd and event struct.
    unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut ev) };
}

fn run(shared: Arc<Shared>) {
    // SAFETY: epoll_create1 has no memory preconditions.
    let busy_set = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    let timer_set = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    epoll_add(timer_set, shared.wake);
    let mut seen_gen = u64::MAX;
    let mut fds: Vec<RawFd> = Vec::new();
    let mut events = [libc::epoll_event { events: 0, u64: 0 }; 16];
    while !shared.stop.load(Ordering::Acquire) {
        let pass = shared.pass.lock().unwrap();
        let gen = shared.generation.load(Ordering::Acquire);
        let eps: Vec<Arc<dyn AutoProgress>> = shared.eps.lock().unwrap().iter().filter_map(Weak::upgrade).collect();
        if gen != seen_gen {
            for fd in fds.drain(..) {
                // SAFETY: removing fds we added; a closed fd is already gone from the set.
                unsafe { libc::epoll_ctl(busy_set, libc::EPOLL_CTL_DEL, fd, std::ptr::null_mut()) };
            }
            fds.push(shared.wake);
            for ep in &eps {
                ep.wait_fds(&mut fds);
            }
            for &fd in &fds {
                epoll_add(busy_set, fd);
            }
            seen_gen = gen;
        }
        let now = now_ns();
        let idle = |e: &&Arc<dyn AutoProgress>| now.saturating_sub(e.last_app_activity()) >= BUSY_WINDOW_NS;
        let (set, timeout_ms) = if !eps.iter().all(|e| idle(&e)) {
            // The application drives these endpoints itself, so the thread
            // stays off their sockets (a wakeup per datagram would cost the
            // busy poller its CPU). Endpoints of the domain it does not
            // call (a second endpoint whose CQ nobody reads while the first
            // is polled) are still the thread's, on a timer: their ACKs
            // and the data queued on their sockets must not wait for the
            // application to come back to them.
            for ep in eps.iter().filter(idle) {
                ep.auto_progress();
            }
            let now = now_ns();
            let busy_ms = (BUSY_WINDOW_NS / 1_000_000).max(1);
            let t = match eps.iter().filter(idle).filter_map(|e| e.next_deadline()).min() {
                Some(d) => (d.saturating_sub(now).div_ceil(1_000_000)).clamp(1, busy_ms),
                None => busy_ms,
            };
            (timer_set, t as i32)
        } else {
            for ep in &eps {
                ep.auto_progress();
            }
            let now = now_ns();
            let mut deadline = eps.iter().filter_map(|e| e.next_deadline()).min();
            if !eps.iter().all(|e| e.arm_wakeup()) {
                deadline = Some(0);
            }
            let t = match deadline {
                Some(d) if d <= now => 0,
                Some(d) => ((d - now).div_ceil(1_000_000)).min(100) as i32,
                None => 100,
            };
            (busy_set, t)
        };
        drop(eps);
        drop(pass);
        // SAFETY: events buffer is valid for its length.
        let n = unsafe { libc::epoll_wait(set, events.as_mut_ptr(), events.len() as i32, timeout_ms) };
        for e in events.iter().take(n.max(0) as usize) {
            if e.u64 == shared.wake as u64 {
                let mut v: u64 = 0;
                // SAFETY: drains our eventfd into a valid u64.
                unsafe { libc::read(shared.wake, &mut v as *mut u64 as *mut libc::c_void, 8) };
            }
        }
    }
    // SAFETY: closing the epoll fds this thread created.
    unsafe {
        libc::close(busy_set);
        libc::close(timer_set);
    }
}
