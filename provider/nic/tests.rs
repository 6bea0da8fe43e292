//! The progress thread's hold on the domain's endpoints: every strong
//! reference it takes is taken under `Shared::pass`, so that
//! `Nic::remove` (an endpoint's fi_close) returns only once the thread has
//! let go, and never taken again after.

use super::*;
use std::time::{Duration, Instant};

/// An endpoint that only counts the thread's calls, always idle (the
/// thread's to progress), and checks that the thread disarms it only while
/// it holds the domain's `pass` lock.
struct Fake {
    shared: Arc<Shared>,
    arms: AtomicU64,
    disarms: AtomicU64,
    /// Disarms seen while `pass` was free: strong references the thread
    /// held where `remove` does not wait for them.
    unguarded: AtomicU64,
}

impl Fake {
    fn new(nic: &Nic) -> Arc<Fake> {
        Arc::new(Fake {
            shared: nic.shared.clone(),
            arms: AtomicU64::new(0),
            disarms: AtomicU64::new(0),
            unguarded: AtomicU64::new(0),
        })
    }
}

impl Progress for Fake {
    fn progress(&self) {}
    fn wait_fds(&self, _: &mut Vec<RawFd>) {}
    fn next_deadline(&self) -> Option<u64> {
        None
    }
    fn arm_wakeup(&self) -> bool {
        self.arms.fetch_add(1, Ordering::SeqCst);
        true
    }
    fn disarm(&self) {
        if self.shared.pass.try_lock().is_ok() {
            self.unguarded.fetch_add(1, Ordering::SeqCst);
        }
        self.disarms.fetch_add(1, Ordering::SeqCst);
    }
}

impl AutoProgress for Fake {
    fn last_app_activity(&self, _now: u64) -> u64 {
        0
    }
    fn auto_progress(&self) {}
}

/// Waits (bounded) until `done` holds, kicking the thread meanwhile.
fn until(nic: &Nic, what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "the progress thread never {what}");
        nic.kick();
        std::thread::yield_now();
    }
}

fn weak(f: &Arc<Fake>) -> Weak<dyn AutoProgress> {
    let w: Weak<Fake> = Arc::downgrade(f);
    w
}

#[test]
fn a_removed_endpoint_is_not_held_or_disarmed_by_the_thread_after_remove() {
    let nic = Nic::new(true, None);
    let (a, b) = (Fake::new(&nic), Fake::new(&nic));
    nic.add(weak(&a));
    nic.add(weak(&b));
    // Both armed for a sleep, and disarmed after it, more than once.
    until(&nic, "armed and disarmed both endpoints", || {
        a.disarms.load(Ordering::SeqCst) >= 2 && b.disarms.load(Ordering::SeqCst) >= 2
    });
    // `a` leaves while armed for the thread's sleep (or about to be).
    nic.remove(&weak(&a));
    let after_remove = a.disarms.load(Ordering::SeqCst);
    assert_eq!(Arc::strong_count(&a), 1, "the thread holds a removed endpoint");
    // More sleeps of the thread, for `b` alone.
    let b_then = b.disarms.load(Ordering::SeqCst);
    until(&nic, "went on with the other endpoint", || {
        b.disarms.load(Ordering::SeqCst) >= b_then + 3
    });
    assert_eq!(
        a.disarms.load(Ordering::SeqCst),
        after_remove,
        "the thread took hold of an endpoint after its remove had returned"
    );
    for f in [&a, &b] {
        assert_eq!(f.unguarded.load(Ordering::SeqCst), 0, "disarmed without the pass lock");
    }
    nic.stop();
}

#[test]
fn the_thread_looks_less_often_the_longer_the_application_polls() {
    const MS: u64 = 1_000_000;
    assert_eq!(busy_sleep_ms(0), 2, "at first, every busy window");
    assert_eq!(busy_sleep_ms(16 * MS), 2);
    assert_eq!(busy_sleep_ms(40 * MS), 5);
    assert_eq!(busy_sleep_ms(128 * MS), BUSY_SLEEP_MAX_MS);
    assert_eq!(busy_sleep_ms(3_600_000 * MS), BUSY_SLEEP_MAX_MS, "never longer");
}
