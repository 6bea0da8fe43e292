//! Locks that cost a domain's application thread no atomic instruction,
//! when the application serialises its calls into the domain
//! (`FI_THREAD_DOMAIN`, what Open MPI and MPICH ask for).
//!
//! Under that model the only thread that competes with the application
//! for an endpoint's or a CQ's state is gnix's own progress thread
//! (`nic/mod.rs`), and it only steps in for endpoints the application has
//! left alone for milliseconds. An ordinary mutex makes every call pay for
//! that rare visitor: a locked compare-and-swap to take it and another to
//! let go, each a full barrier that also waits for the caller's pending
//! stores (the ring slot just written to another core) to drain. Here the
//! application side only counts, with plain loads and stores, how many of
//! the domain's locks it is inside (`Gate::depth`); the progress thread
//! takes the whole domain at once (`Gate::steal`), and only when that
//! count is zero. Deciding who goes first is Dekker's problem, and its
//! store-then-load order costs a barrier on both sides; the barrier is
//! made asymmetric: the application issues only a compiler fence, and the
//! thread issues `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`, which
//! runs a full barrier on every CPU that is running one of the process's
//! threads at that moment (and a thread not running has passed one in the
//! context switch). The same pattern as liburcu's and folly's asymmetric
//! fences; libfabric's own util providers go further and drop the lock
//! altogether under `FI_THREAD_DOMAIN` (`ofi_genlock` with no lock), as
//! they have no progress thread.
//!
//! The argument, with the application's `enter` as store `depth`, compiler
//! fence, load `thief`, and `steal` as store `thief`, membarrier, load
//! `depth`: let P be the point at which the membarrier's barrier ran on
//! the application's CPU. If P came before the application's store of
//! `depth`, its load of `thief` is after a full barrier that follows the
//! thread's store, and sees it. If P came after, the store of `depth` is
//! visible when membarrier returns, and the thread's load sees it. So at
//! least one of them sees the other and backs off (the thread) or waits
//! (the application).
//!
//! The price is the thread's: a system call and an interrupt of the
//! application's CPU per pass it needs the domain for, which it only does
//! for endpoints idle for milliseconds. Without membarrier (an old kernel,
//! a seccomp filter) or under any other threading model every lock is an
//! ordinary parking_lot mutex.
//!
//! A program that breaks its `FI_THREAD_DOMAIN` promise and calls into one
//! domain from two threads at once races on the provider's state, as it
//! would with libfabric's util providers.

use parking_lot::lock_api::{self, GuardNoSend, RawMutex as _};
use rustix::thread::{membarrier, membarrier_query, MembarrierCommand};
use std::sync::atomic::{compiler_fence, AtomicU32, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// A lock of a domain's state: a gate lock when the domain has a `Gate`,
/// else an ordinary mutex.
pub type GateMutex<T> = lock_api::Mutex<GateLock, T>;
pub type GateGuard<'a, T> = lock_api::MutexGuard<'a, GateLock, T>;

/// A domain the application serialises, shared by the locks of its
/// endpoints and CQs and by its progress thread.
#[derive(Debug, Default)]
pub struct Gate {
    /// How many of the domain's locks the application is inside. Only the
    /// application writes it (one call at a time, by its promise), so a
    /// load and a store, never a read-modify-write.
    depth: AtomicUsize,
    /// The progress thread (its `pthread_self`) while it holds the
    /// domain, or trying to; 0 otherwise.
    thief: AtomicUsize,
}

/// Who holds a gate lock.
const FREE: u8 = 0;
const APP: u8 = 1;
const THIEF: u8 = 2;

impl Gate {
    /// A gate, if this process can have the progress thread's barrier:
    /// `membarrier` with the private expedited command, registered once.
    pub fn new() -> Option<Arc<Gate>> {
        heavy_barrier_ready().then(|| Arc::new(Gate::default()))
    }

    /// The application enters one of the domain's locks; returns who it
    /// is (`THIEF` when the progress thread, which holds the domain,
    /// takes a lock inside its pass).
    #[inline]
    fn enter(&self) -> u8 {
        let t = self.thief.load(Ordering::Relaxed);
        if t != 0 && t == this_thread() {
            return THIEF;
        }
        let d = self.depth.load(Ordering::Relaxed);
        self.depth.store(d + 1, Ordering::Relaxed);
        // The light half of the barrier (module comment): the store above
        // must not move after the load below in the compiled code; the
        // progress thread's membarrier supplies the CPU's half.
        compiler_fence(Ordering::SeqCst);
        if self.thief.load(Ordering::Acquire) != 0 {
            self.wait_for_thief();
        }
        APP
    }

    #[inline]
    fn leave(&self, side: u8) {
        if side == APP {
            let d = self.depth.load(Ordering::Relaxed);
            self.depth.store(d - 1, Ordering::Release);
        }
    }

    /// The progress thread holds the domain (or is about to find that we
    /// are inside, and let go): wait, still counted inside, so that a new
    /// attempt of the thread sees us.
    #[cold]
    fn wait_for_thief(&self) {
        let mut spins = 0u32;
        while self.thief.load(Ordering::Acquire) != 0 {
            if spins < 64 {
                std::hint::spin_loop();
                spins += 1;
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// The progress thread takes the whole domain, if the application is
    /// in none of its locks; every lock the thread then takes is its
    /// without a barrier, until the `Stolen` drops. None: the application
    /// is inside (it is busy: the thread comes back later).
    pub fn steal(&self) -> Option<Stolen<'_>> {
        self.thief.store(this_thread(), Ordering::Relaxed);
        // The heavy half: with the store above visible to all, every CPU
        // running one of our threads passes a full barrier.
        // Refused only in a child of the process that registered (fork):
        // it registers, and tries again.
        let ok = membarrier(MembarrierCommand::PrivateExpedited).is_ok()
            || (PRIVATE.ready() && membarrier(MembarrierCommand::PrivateExpedited).is_ok());
        if !ok || self.depth.load(Ordering::Acquire) != 0 {
            self.thief.store(0, Ordering::Release);
            return None;
        }
        Some(Stolen(self))
    }
}

/// The progress thread's hold on a domain (`Gate::steal`).
pub struct Stolen<'a>(&'a Gate);

impl Drop for Stolen<'_> {
    fn drop(&mut self) {
        self.0.thief.store(0, Ordering::Release);
    }
}

fn this_thread() -> usize {
    // SAFETY: pthread_self has no preconditions; glibc reads it from the
    // thread pointer (no system call, no TLS lookup).
    (unsafe { libc::pthread_self() }) as usize
}

/// A membarrier command this process registers for before it may
/// issue it (or, for the global one, be reached by it).
pub(crate) struct Registration {
    cmd: MembarrierCommand,
    register: MembarrierCommand,
    /// The process that registered (0: none yet). A child after fork is
    /// another process to the kernel, unregistered: it registers again.
    pid: AtomicU32,
    /// Whether the kernel runs `cmd`, asked once.
    offered: OnceLock<bool>,
}

impl Registration {
    pub(crate) const fn new(cmd: MembarrierCommand, register: MembarrierCommand) -> Registration {
        Registration {
            cmd,
            register,
            pid: AtomicU32::new(0),
            offered: OnceLock::new(),
        }
    }

    /// Whether the kernel runs the command (issuing it needs no
    /// registration for the global one).
    pub(crate) fn offered(&self) -> bool {
        *self
            .offered
            .get_or_init(|| membarrier_query().contains_command(self.cmd))
    }

    /// Whether this process is registered for the command (registering
    /// it now if the kernel has it). The first registration of a process
    /// with threads takes milliseconds (the kernel waits for an RCU grace
    /// period): made at setup, not on a data path.
    pub(crate) fn ready(&self) -> bool {
        let me = std::process::id();
        if self.pid.load(Ordering::Relaxed) == me {
            return true;
        }
        if !self.offered() {
            return false;
        }
        match membarrier(self.register) {
            Ok(()) => {
                self.pid.store(me, Ordering::Relaxed);
                true
            }
            Err(e) => {
                crate::info!(crate::ffi::FI_LOG_DOMAIN, "membarrier {:?}: {}", self.register, e);
                false
            }
        }
    }
}

/// The progress thread's half of the gate.
static PRIVATE: Registration = Registration::new(
    MembarrierCommand::PrivateExpedited,
    MembarrierCommand::RegisterPrivateExpedited,
);

/// Whether `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)` works in this
/// process: the kernel offers it and the process is registered for it.
fn heavy_barrier_ready() -> bool {
    let ok = PRIVATE.ready();
    if !ok {
        crate::info!(
            crate::ffi::FI_LOG_DOMAIN,
            "no private expedited membarrier: domain locks are mutexes"
        );
    }
    ok
}

/// The raw lock behind `GateMutex`: the domain's gate plus who holds this
/// lock, or a parking_lot mutex when there is no gate.
pub struct GateLock {
    gate: Option<Arc<Gate>>,
    /// FREE, APP or THIEF. Written only by whoever holds the domain (the
    /// application inside the gate, or the thread that stole it), so
    /// plain loads and stores; it catches a lock taken again by its
    /// holder (`try_lock` fails, as a mutex's would).
    held: AtomicU8,
    plain: parking_lot::RawMutex,
}

impl GateLock {
    pub fn new(gate: Option<Arc<Gate>>) -> GateLock {
        GateLock {
            gate,
            held: AtomicU8::new(FREE),
            plain: parking_lot::RawMutex::INIT,
        }
    }

    /// Takes the lock through the domain's gate, unless its holder (who
    /// else could, inside the gate?) has it already.
    #[inline]
    fn take(&self, g: &Gate) -> bool {
        let side = g.enter();
        if self.held.load(Ordering::Relaxed) != FREE {
            g.leave(side);
            return false;
        }
        self.held.store(side, Ordering::Relaxed);
        true
    }
}

/// `value` behind a lock of the domain that has `gate` (None: an
/// ordinary mutex).
pub fn gate_mutex<T>(gate: Option<Arc<Gate>>, value: T) -> GateMutex<T> {
    GateMutex::from_raw(GateLock::new(gate), value)
}

// SAFETY: mutual exclusion, as lock_api requires. Without a gate it is
// parking_lot's mutex. With one, two holders at once would need either
// two application threads inside the domain at once, which
// FI_THREAD_DOMAIN rules out, or the application and the progress thread,
// which `Gate::enter` and `Gate::steal` rule out (module comment); and a
// holder taking it again finds `held` set (`try_lock` fails; `lock` is a
// deadlock with a mutex too, and panics here). `unlock` is only called
// by the holder (lock_api's contract), so `held` tells which side to
// release.
unsafe impl lock_api::RawMutex for GateLock {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: GateLock = GateLock {
        gate: None,
        held: AtomicU8::new(FREE),
        plain: parking_lot::RawMutex::INIT,
    };
    type GuardMarker = GuardNoSend;

    #[inline]
    fn lock(&self) {
        match &self.gate {
            None => self.plain.lock(),
            Some(g) => assert!(self.take(g), "gnix: a domain lock taken again by its holder"),
        }
    }

    #[inline]
    fn try_lock(&self) -> bool {
        match &self.gate {
            None => self.plain.try_lock(),
            Some(g) => self.take(g),
        }
    }

    #[inline]
    unsafe fn unlock(&self) {
        match &self.gate {
            // SAFETY: lock_api calls unlock only for the holder of the
            // lock, which is then ours to release.
            None => unsafe { self.plain.unlock() },
            Some(g) => {
                let side = self.held.load(Ordering::Relaxed);
                self.held.store(FREE, Ordering::Relaxed);
                g.leave(side);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    #[test]
    fn no_gate_is_a_mutex() {
        let m = gate_mutex(None, 5);
        let g = m.lock();
        assert!(m.try_lock().is_none());
        drop(g);
        assert_eq!(*m.try_lock().unwrap(), 5);
    }

    #[test]
    fn a_holder_cannot_take_it_again() {
        let Some(gate) = Gate::new() else {
            panic!("membarrier(PRIVATE_EXPEDITED) is not available here");
        };
        let a = gate_mutex(Some(gate.clone()), 1);
        let b = gate_mutex(Some(gate.clone()), 2);
        let ga = a.lock();
        assert!(a.try_lock().is_none(), "taken twice");
        let gb = b.lock();
        assert_eq!(gate.depth.load(Ordering::Relaxed), 2);
        drop(gb);
        drop(ga);
        assert_eq!(gate.depth.load(Ordering::Relaxed), 0);
        assert!(a.try_lock().is_some());
    }

    #[test]
    fn the_thread_steals_only_an_idle_domain() {
        let gate = Gate::new().expect("membarrier");
        let m = gate_mutex(Some(gate.clone()), 0u32);
        let g = m.lock();
        let other = gate.clone();
        assert!(std::thread::spawn(move || other.steal().is_none()).join().unwrap());
        drop(g);
        let other = gate.clone();
        assert!(std::thread::spawn(move || other.steal().is_some()).join().unwrap());
    }

    /// The application and a thief increment one counter through the
    /// domain's locks, the thief only while it holds the domain: no
    /// increment is lost, so they never held it at once.
    #[test]
    fn application_and_thief_exclude_each_other() {
        let gate = Gate::new().expect("membarrier");
        let m = Arc::new(gate_mutex(Some(gate.clone()), (0u64, false)));
        let stop = Arc::new(AtomicBool::new(false));
        let (tm, tg, ts) = (m.clone(), gate.clone(), stop.clone());
        let thief = std::thread::spawn(move || {
            let mut n = 0u64;
            while !ts.load(Ordering::Relaxed) {
                if let Some(_s) = tg.steal() {
                    let mut v = tm.lock();
                    assert!(!v.1, "the application is inside");
                    v.0 += 1;
                    n += 1;
                }
                std::thread::yield_now();
            }
            n
        });
        let mut mine = 0u64;
        for _ in 0..200_000 {
            let mut v = m.lock();
            v.1 = true;
            v.0 += 1;
            mine += 1;
            v.1 = false;
        }
        // The thief gets in once more, now that we only look.
        let before = m.lock().0;
        while m.lock().0 == before {
            std::thread::yield_now();
        }
        stop.store(true, Ordering::Relaxed);
        let stolen = thief.join().unwrap();
        assert_eq!(m.lock().0, mine + stolen);
    }
}
