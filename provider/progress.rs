//! What completion objects need from the things that produce completions.
//!
//! A CQ or counter bound to an endpoint drives that endpoint's progress when
//! the application reads or waits on it (FI_PROGRESS_MANUAL), and sleeps on
//! the endpoint's file descriptors and timer deadline instead of spinning.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

pub trait Progress: Send + Sync {
    /// Drive the wires once: receive, run protocol timers, transmit. New
    /// completions are pushed into the bound CQs and counters.
    fn progress(&self);
    /// Descriptors that become readable when `progress` has work (sockets).
    fn wait_fds(&self, out: &mut Vec<RawFd>);
    /// Earliest monotonic time (`now_ns` clock) at which `progress` must run
    /// even without descriptor activity (retransmission, delayed ACK), if any.
    fn next_deadline(&self) -> Option<u64>;
    /// The caller is about to sleep on `wait_fds`: ask peers whose writes
    /// are otherwise silent (shm) to make a descriptor readable. False if
    /// work is already waiting (do not sleep). The next `progress` undoes it.
    fn arm_wakeup(&self) -> bool {
        true
    }
    /// The sleeper that called `arm_wakeup` is awake again. Every sleep a
    /// sleeper of ours armed for is paired with one `disarm` after it; an
    /// arming without one (a thread that sleeps on a descriptor outside
    /// our calls, fi_trywait) holds for good. While none is outstanding, a
    /// source whose application polls may stop arranging wake-ups
    /// (`Ep::progress`: its sockets leave their epoll set).
    fn disarm(&self) {}
}

/// Monotonic nanoseconds; the one clock all protocol timers use.
pub fn now_ns() -> u64 {
    clock_ns(rustix::time::ClockId::Monotonic)
}

#[inline]
fn clock_ns(id: rustix::time::ClockId) -> u64 {
    let ts = rustix::time::clock_gettime(id);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The time of the kernel's last tick, on the `now_ns` clock (it moves
/// every few ms); a few ns to read, against 20-70 ns for `now_ns` on the
/// VMs this runs on.
fn tick_ns() -> u64 {
    clock_ns(rustix::time::ClockId::MonotonicCoarse)
}

/// Passes that may share one reading of `now_ns` (`PassClock`).
const PASSES: u32 = 16;

/// The time for one endpoint's progress passes. A pass needs it (timers,
/// how often the UDP socket is read), but an application polling a CQ
/// makes a pass per poll, and a fresh `now_ns` would cost it more than the
/// rest of an empty pass. The clock is read afresh once the kernel's tick
/// moved or after `PASSES` passes: the time a pass sees is late by less
/// than a tick and at most `PASSES` passes, never early, so timers fire
/// that much later at worst.
pub struct PassClock {
    fine: u64,
    tick: u64,
    left: u32,
}

impl Default for PassClock {
    fn default() -> Self {
        PassClock {
            fine: 0,
            tick: u64::MAX,
            left: 0,
        }
    }
}

impl PassClock {
    /// The time for this pass.
    #[inline]
    pub fn now(&mut self) -> u64 {
        let tick = tick_ns();
        if tick == self.tick && self.left > 0 {
            self.left -= 1;
            return self.fine;
        }
        self.tick = tick;
        self.left = PASSES;
        self.fine = now_ns();
        self.fine
    }
}

/// A clock as the polls see it: `now` reads it (at a cost), `last` says
/// what the last read gave. `PassClock`, or the tests' counting clock.
pub trait PollClock {
    fn now(&mut self) -> u64;
    fn last(&self) -> u64;
}

impl PollClock for PassClock {
    #[inline]
    fn now(&mut self) -> u64 {
        PassClock::now(self)
    }
    #[inline]
    fn last(&self) -> u64 {
        self.fine
    }
}

/// Polls of a quiet time that look at the shm rings without reading the
/// clock, between looks that read it: the UDP socket's turn and the
/// timers come up to this many polls late (where a pass's own clock,
/// `PassClock`, may already be sixteen passes late). Reading the coarse
/// clock was a fifth of such a poll on the VMs this runs on
/// (bench/README.md, "A poll that reads no clock").
pub const QUIET_POLLS: u32 = 8;

/// When an endpoint's polls may skip the progress pass. A pass that found
/// nothing and left nothing to do says until when that holds (`set`);
/// until then a poll only looks whether something arrived in the shm
/// rings, and for `QUIET_POLLS` polls after a look that read the clock it
/// does not read it again; a look that finds something asks for a pass
/// for the rings only (`Pass::Rings`). Anything else that takes the
/// endpoint ends it (`end`): the next poll makes the whole pass.
#[derive(Default)]
pub struct Quiet {
    until: u64,
    polls: u32,
}

/// What a poll asks for (`Quiet::poll`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pass {
    /// Nothing: the quiet time holds and no slot came.
    Skip,
    /// The whole pass, at this time.
    Whole(u64),
    /// A pass for what came in the rings only, at this time: a look of the
    /// quiet time found a slot before anything else was due (the timers,
    /// the UDP socket's turn). It takes the messages and leaves the rest
    /// to the next poll, which is whole: a message's way to the
    /// application does not go through the rest of a pass.
    Rings(u64),
}

impl Quiet {
    /// The next poll makes a pass.
    #[inline]
    pub fn end(&mut self) {
        self.until = 0;
        self.polls = 0;
    }

    /// A pass at `now` left nothing to do until `until` (0: it did).
    #[inline]
    pub fn set(&mut self, until: u64, now: u64) {
        self.until = until;
        self.polls = if until > now { QUIET_POLLS } else { 0 };
    }

    /// A poll: the pass to make, and the time to make it at.
    /// `arrived` looks at the rings. A slot found by a poll that reads no
    /// clock is taken on the last time read: a read there would be on
    /// every message's way.
    #[inline]
    pub fn poll(&mut self, clock: &mut impl PollClock, arrived: impl Fn() -> bool) -> Pass {
        if self.polls > 0 {
            if arrived() {
                return Pass::Rings(clock.last());
            }
            self.polls -= 1;
            return Pass::Skip;
        }
        let now = clock.now();
        if now >= self.until {
            return Pass::Whole(now);
        }
        if arrived() {
            return Pass::Rings(now);
        }
        self.polls = QUIET_POLLS;
        Pass::Skip
    }
}

/// Fruitless polls between two looks at how long an application has
/// waited (`Spin`): a clock read costs about what an empty poll of the
/// shm rings does, 20-70 ns.
pub const SPIN_LOOK_EVERY: u64 = 64;
/// Most polls between two yields, once yields come back at once.
pub const SPIN_GAP_MAX: u64 = 64 * SPIN_LOOK_EVERY;
/// A `sched_yield` that took this long let something else run: the CPU
/// is shared. On this host a yield with nothing else to run takes 0.8 us
/// (1.4-1.7 us at the 99.9th percentile), and one that switches to
/// another process doing nothing but yield back 4.4 us (a switch each
/// way). 20 us, before, missed a peer that ran briefly: in a ping-pong on
/// one CPU the peer answers and yields within a few microseconds.
pub const YIELD_RAN_NS: u64 = 3_000;

/// An application polling a completion object that gives it nothing. On
/// a host with more busy processes than CPUs the peer it waits for may be
/// queued behind it on its own CPU, and a poller that spins through its
/// time slice keeps it there: on the udp wire a send completes on its
/// receiver's ACK, so every such wait cost a slice of several ms (fabtests
/// `fi_multinode -n 3` on two CPUs took 43 s over the udp wire where
/// tcp;ofi_rxm took 23; bench/README.md, "Three ranks on two CPUs").
///
/// Once polls have found nothing for `yield_after_ns`, a poll gives the
/// CPU away (`sched_yield`) every `SPIN_LOOK_EVERY` polls. A yield that
/// comes back at once found nothing else to run, and the gap to the next
/// one doubles, up to `SPIN_GAP_MAX` polls: an application that polls us
/// in a loop that has other work (MPICH's progress over its own shared
/// memory while our CQ stays empty) pays one system call in thousands of
/// polls. A yield that let something run brings the gap back to
/// `SPIN_LOOK_EVERY`, and tells the waits after it that the CPU is
/// shared: each of them yields at its first look at the clock (its 64th
/// poll, a microsecond or two), not after `yield_after_ns`, until a yield
/// comes back at once. Two processes ping-ponging on one CPU otherwise
/// paid the whole threshold on every message (`fi_pingpong` with both
/// ends on one CPU: 56 us a transfer). A ping-pong's waits on CPUs of
/// their own (microseconds) never reach a yield. Relaxed atomics: a CQ
/// read by several threads only shares a heuristic.
pub struct Spin {
    /// Empty polls in a row.
    empty: AtomicU64,
    /// The empty poll that looks at the clock next.
    next: AtomicU64,
    /// Polls from a yield to the next.
    gap: AtomicU64,
    /// When the wait was first looked at (its `SPIN_LOOK_EVERY`th poll).
    since: AtomicU64,
    /// The last yield let something else run: the CPU is shared, and a
    /// wait yields at its first look.
    shared: AtomicBool,
    /// 0: never yield (FI_GNIX_YIELD_AFTER_US=0).
    yield_after_ns: u64,
    yields: AtomicU64,
    /// Whose polls these are, for the closing log line.
    owner: (crate::ffi::fi_log_subsys, &'static str),
}

impl Drop for Spin {
    fn drop(&mut self) {
        let n = self.yields();
        if n > 0 {
            let (subsys, what) = self.owner;
            crate::info!(
                subsys,
                "{} closed: its readers gave the CPU away {} times (FI_GNIX_YIELD_AFTER_US)",
                what,
                n
            );
        }
    }
}

/// What an empty poll does (`Spin::look`).
#[derive(Debug, PartialEq, Eq)]
enum Look {
    Nothing,
    /// Yield the CPU; the clock read `now` before it.
    Yield(u64),
}

impl Spin {
    /// The polls of a `what` (logged under `subsys`), with the yield
    /// threshold FI_GNIX_YIELD_AFTER_US sets.
    pub fn of(subsys: crate::ffi::fi_log_subsys, what: &'static str) -> Spin {
        Spin::new(
            crate::params::params().yield_after_us.saturating_mul(1000),
            (subsys, what),
        )
    }

    fn new(yield_after_ns: u64, owner: (crate::ffi::fi_log_subsys, &'static str)) -> Spin {
        Spin {
            empty: AtomicU64::new(0),
            next: AtomicU64::new(SPIN_LOOK_EVERY),
            gap: AtomicU64::new(SPIN_LOOK_EVERY),
            since: AtomicU64::new(0),
            shared: AtomicBool::new(false),
            yield_after_ns,
            yields: AtomicU64::new(0),
            owner,
        }
    }

    /// A poll found something: the wait is over.
    #[inline]
    pub fn found(&self) {
        if self.empty.load(Ordering::Relaxed) != 0 {
            self.empty.store(0, Ordering::Relaxed);
            self.next.store(SPIN_LOOK_EVERY, Ordering::Relaxed);
        }
    }

    /// A poll found nothing: yields the CPU if the wait has been long.
    #[inline]
    pub fn empty(&self) {
        self.empty_at(now_ns, |before| {
            std::thread::yield_now();
            now_ns().saturating_sub(before)
        });
    }

    /// `empty` with the clock read by `clock` and the yield made by
    /// `give_away`, which is handed the time read before it and returns
    /// how long it took. Whether this poll yielded (the tests run it in
    /// virtual time).
    #[inline(always)]
    fn empty_at(&self, clock: impl FnOnce() -> u64, give_away: impl FnOnce(u64) -> u64) -> bool {
        let k = self.empty.load(Ordering::Relaxed) + 1;
        self.empty.store(k, Ordering::Relaxed);
        if k < self.next.load(Ordering::Relaxed) || self.yield_after_ns == 0 {
            return false;
        }
        self.looked(k, clock, give_away)
    }

    /// `empty_at` past its count: out of the polls' line (inline, with
    /// the clock and the yield, it made `empty_at` a call of its own, 14
    /// instructions more a poll).
    #[cold]
    #[inline(never)]
    fn looked(&self, k: u64, clock: impl FnOnce() -> u64, give_away: impl FnOnce(u64) -> u64) -> bool {
        let Look::Yield(before) = self.look(k, clock()) else {
            return false;
        };
        self.yielded(k, give_away(before));
        true
    }

    /// The `k`th empty poll in a row looks at the clock (`now`).
    #[cold]
    fn look(&self, k: u64, now: u64) -> Look {
        if k == SPIN_LOOK_EVERY {
            self.since.store(now, Ordering::Relaxed);
            if self.shared.load(Ordering::Relaxed) {
                return Look::Yield(now);
            }
        }
        if now.saturating_sub(self.since.load(Ordering::Relaxed)) < self.yield_after_ns {
            self.next.store(k + SPIN_LOOK_EVERY, Ordering::Relaxed);
            return Look::Nothing;
        }
        Look::Yield(now)
    }

    /// The `k`th empty poll's yield took `took` ns: whether the CPU is
    /// shared sets the gap to the next one.
    #[cold]
    fn yielded(&self, k: u64, took: u64) {
        self.yields.fetch_add(1, Ordering::Relaxed);
        let shared = took >= YIELD_RAN_NS;
        self.shared.store(shared, Ordering::Relaxed);
        let gap = if shared {
            SPIN_LOOK_EVERY
        } else {
            (self.gap.load(Ordering::Relaxed) * 2).min(SPIN_GAP_MAX)
        };
        self.gap.store(gap, Ordering::Relaxed);
        self.next.store(k + gap, Ordering::Relaxed);
    }

    /// How often polls gave the CPU away.
    pub fn yields(&self) -> u64 {
        self.yields.load(Ordering::Relaxed)
    }

    /// Whether the last yield let something else run (a wait then yields
    /// at its first look).
    #[cfg(test)]
    pub fn shared(&self) -> bool {
        self.shared.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// Virtual time `t`, counting its reads and keeping the last.
    struct TestClock {
        t: u64,
        read: u64,
        reads: u32,
    }

    impl TestClock {
        fn at(t: u64) -> TestClock {
            TestClock { t, read: 0, reads: 0 }
        }
    }

    impl PollClock for TestClock {
        fn now(&mut self) -> u64 {
            self.reads += 1;
            self.read = self.t;
            self.t
        }
        fn last(&self) -> u64 {
            self.read
        }
    }

    /// A pass at `now` left `q` quiet until `until`, and the
    /// `QUIET_POLLS` polls after it, which read no clock, found nothing.
    fn quiet_polls(q: &mut Quiet, c: &mut TestClock, until: u64, now: u64) {
        q.set(until, now);
        for _ in 0..QUIET_POLLS {
            assert_eq!(q.poll(c, || false), Pass::Skip);
        }
    }

    #[test]
    fn quiet_polls_read_the_clock_once_in_so_many_and_still_see_arrivals() {
        let mut c = TestClock::at(1_000);
        let mut q = Quiet::default();
        let ring = Cell::new(false);
        // Not quiet: every poll passes, at a fresh time.
        assert_eq!(q.poll(&mut c, || ring.get()), Pass::Whole(1_000));
        assert_eq!(c.reads, 1);
        // A pass that went quiet until 5 000: the next QUIET_POLLS polls
        // read no clock and skip.
        quiet_polls(&mut q, &mut c, 5_000, 1_000);
        assert_eq!(c.reads, 1);
        // Then one reads it, finds the quiet time on, and skips again.
        c.t = 2_000;
        assert_eq!(q.poll(&mut c, || ring.get()), Pass::Skip);
        assert_eq!(c.reads, 2);
        // A slot comes: the next poll passes at once, on the time last
        // read (2 000), reading none, for the rings only.
        ring.set(true);
        c.t = 2_500;
        assert_eq!(q.poll(&mut c, || ring.get()), Pass::Rings(2_000));
        assert_eq!(c.reads, 2);
        // That pass found it (no quiet time): the next poll reads the
        // clock again.
        q.set(0, 2_000);
        ring.set(false);
        assert_eq!(q.poll(&mut c, || ring.get()), Pass::Whole(2_500));
        assert_eq!(c.reads, 3);
    }

    #[test]
    fn a_pass_is_for_the_rings_only_while_nothing_else_is_due() {
        let mut c = TestClock::at(1_000);
        let mut q = Quiet::default();
        let ring = Cell::new(true);
        // Quiet until 5 000: a slot found by a poll that reads the clock,
        // before then, asks for the rings only.
        quiet_polls(&mut q, &mut c, 5_000, 1_000);
        c.t = 4_000;
        assert_eq!(q.poll(&mut c, || ring.get()), Pass::Rings(4_000));
        // Once the quiet time is over the pass is whole, slot or not.
        quiet_polls(&mut q, &mut c, 5_000, 4_000);
        c.t = 5_000;
        assert_eq!(q.poll(&mut c, || ring.get()), Pass::Whole(5_000));
        // And after a pass for the rings, which ends the quiet time
        // (`end`), the next poll is whole too.
        q.set(9_000, 5_000);
        assert_eq!(q.poll(&mut c, || ring.get()), Pass::Rings(5_000));
        q.end();
        assert_eq!(q.poll(&mut c, || ring.get()), Pass::Whole(5_000));
    }

    #[test]
    fn a_quiet_time_ends_at_its_time_or_when_the_endpoint_is_taken() {
        let mut c = TestClock::at(1_000);
        let mut q = Quiet::default();
        quiet_polls(&mut q, &mut c, 5_000, 1_000);
        // Its time is up: the first poll that reads the clock passes.
        c.t = 5_000;
        assert_eq!(q.poll(&mut c, || false), Pass::Whole(5_000));
        // A pass that found something leaves no quiet time.
        q.set(0, 5_000);
        assert_eq!(q.poll(&mut c, || false), Pass::Whole(5_000));
        // Taken (a send, a post): the next poll passes.
        q.set(9_000, 5_000);
        q.end();
        assert_eq!(q.poll(&mut c, || false), Pass::Whole(5_000));
    }
    /// `n` empty polls of `s` at virtual time `t`, each yield taking
    /// `took` ns: the polls (their number in the wait) that yielded.
    fn yielding_polls(s: &Spin, n: u64, t: u64, took: u64) -> Vec<u64> {
        (1..=n)
            .filter(|_| s.empty_at(|| t, |_| took))
            .map(|_| s.empty.load(Ordering::Relaxed))
            .collect()
    }

    fn empty_polls(s: &Spin, n: u64, t: u64, took: u64) -> usize {
        yielding_polls(s, n, t, took).len()
    }

    const SHARED: u64 = YIELD_RAN_NS;
    const TEST: (crate::ffi::fi_log_subsys, &str) = (crate::ffi::FI_LOG_CORE, "test");
    const ALONE: u64 = 1_000;

    #[test]
    fn a_long_wait_yields_once_in_so_many_polls_and_a_short_one_never() {
        let s = Spin::new(50_000, TEST);
        // The wait is first looked at on its 64th poll, at t = 1000.
        assert_eq!(empty_polls(&s, SPIN_LOOK_EVERY, 1_000, SHARED), 0);
        // Under 50 us since: no yield however many polls.
        assert_eq!(empty_polls(&s, 10 * SPIN_LOOK_EVERY, 50_999, SHARED), 0);
        // From then on one poll in SPIN_LOOK_EVERY yields while each
        // yield lets something else run.
        assert_eq!(empty_polls(&s, 10 * SPIN_LOOK_EVERY, 51_000, SHARED), 10);
        assert_eq!(s.yields(), 10);
        // A poll that finds something ends the wait; the next one starts
        // afresh.
        s.found();
        assert_eq!(empty_polls(&s, SPIN_LOOK_EVERY - 1, 60_000, ALONE), 0);
        // (The wait before let something run, so this one yields at its
        // first look; that yield comes back at once: the CPU is free.)
        assert_eq!(empty_polls(&s, 1, 60_000, ALONE), 1);
        s.found();
        assert_eq!(empty_polls(&s, SPIN_LOOK_EVERY, 60_000, SHARED), 0);
        assert_eq!(empty_polls(&s, 4 * SPIN_LOOK_EVERY, 100_000, SHARED), 0);
        assert_eq!(empty_polls(&s, 4 * SPIN_LOOK_EVERY, 110_000, SHARED), 4);
    }

    #[test]
    fn after_a_yield_that_let_another_run_each_wait_yields_at_its_first_look() {
        let s = Spin::new(50_000, TEST);
        // A long wait whose yield let the peer run (one CPU for both).
        assert_eq!(empty_polls(&s, SPIN_LOOK_EVERY, 0, SHARED), 0);
        assert_eq!(
            yielding_polls(&s, SPIN_LOOK_EVERY, 50_000, SHARED),
            [2 * SPIN_LOOK_EVERY]
        );
        // Every wait after it (a ping-pong's, each a microsecond or two
        // of polls) yields at its first look, not 50 us into it.
        for t in [60_000, 61_000, 62_000] {
            s.found();
            assert_eq!(yielding_polls(&s, SPIN_LOOK_EVERY, t, SHARED), [SPIN_LOOK_EVERY]);
        }
        // A yield that comes back at once: the CPU is free again, and the
        // rest of this wait and the next wait spin their 50 us first.
        s.found();
        assert_eq!(yielding_polls(&s, SPIN_LOOK_EVERY, 70_000, ALONE), [SPIN_LOOK_EVERY]);
        assert_eq!(empty_polls(&s, 10 * SPIN_LOOK_EVERY, 119_999, ALONE), 0);
        s.found();
        assert_eq!(empty_polls(&s, 10 * SPIN_LOOK_EVERY, 130_000, SHARED), 0);
        assert_eq!(empty_polls(&s, SPIN_LOOK_EVERY, 180_000, SHARED), 1);
    }

    #[test]
    fn yields_that_come_back_at_once_space_out_until_one_lets_another_run() {
        let s = Spin::new(50_000, TEST);
        assert_eq!(empty_polls(&s, SPIN_LOOK_EVERY, 0, ALONE), 0);
        // Yields that found nothing else to run: the gaps double.
        let at = yielding_polls(&s, 20 * SPIN_GAP_MAX, 50_000, ALONE);
        let gaps: Vec<u64> = at.windows(2).map(|w| w[1] - w[0]).take(8).collect();
        let m = SPIN_LOOK_EVERY;
        assert_eq!(gaps, [2 * m, 4 * m, 8 * m, 16 * m, 32 * m, 64 * m, 64 * m, 64 * m]);
        assert_eq!(SPIN_GAP_MAX, 64 * m);
        // One that let something run: back to every SPIN_LOOK_EVERY polls.
        // (The first comes at the end of the gap then running.)
        let at = yielding_polls(&s, SPIN_GAP_MAX + 4 * m, 50_000, SHARED);
        assert!(at.len() >= 5, "{:?}", at);
        assert!(at.windows(2).all(|w| w[1] - w[0] == m), "{:?}", at);
    }

    #[test]
    fn the_clock_is_read_once_in_so_many_polls() {
        let s = Spin::new(50_000, TEST);
        let reads = Cell::new(0);
        for _ in 0..10 * SPIN_LOOK_EVERY {
            s.empty_at(
                || {
                    reads.set(reads.get() + 1);
                    0
                },
                |_| SHARED,
            );
        }
        assert_eq!(reads.get(), 10);
    }

    #[test]
    fn zero_never_yields() {
        let s = Spin::new(0, TEST);
        assert_eq!(empty_polls(&s, 100 * SPIN_LOOK_EVERY, 1, SHARED), 0);
        assert_eq!(empty_polls(&s, 100 * SPIN_LOOK_EVERY, u64::MAX, SHARED), 0);
    }
}
