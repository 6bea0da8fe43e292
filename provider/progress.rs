//! What completion objects need from the things that produce completions.
//!
//! A CQ or counter bound to an endpoint drives that endpoint's progress when
//! the application reads or waits on it (FI_PROGRESS_MANUAL), and sleeps on
//! the endpoint's file descriptors and timer deadline instead of spinning.

use std::os::fd::RawFd;

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
/// does not read it again. Anything else that takes the endpoint ends it
/// (`end`): the next poll makes a pass.
#[derive(Default)]
pub struct Quiet {
    until: u64,
    polls: u32,
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

    /// A poll: the time to make a pass at, or `None` to skip it.
    /// `arrived` looks at the rings. A slot found by a poll that reads no
    /// clock is taken on the last time read: a read there would be on
    /// every message's way.
    #[inline]
    pub fn poll(&mut self, clock: &mut impl PollClock, arrived: impl Fn() -> bool) -> Option<u64> {
        if self.polls > 0 {
            if arrived() {
                return Some(clock.last());
            }
            self.polls -= 1;
            return None;
        }
        let now = clock.now();
        if now >= self.until || arrived() {
            return Some(now);
        }
        self.polls = QUIET_POLLS;
        None
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

    #[test]
    fn quiet_polls_read_the_clock_once_in_so_many_and_still_see_arrivals() {
        let mut c = TestClock::at(1_000);
        let mut q = Quiet::default();
        let ring = Cell::new(false);
        // Not quiet: every poll passes, at a fresh time.
        assert_eq!(q.poll(&mut c, || ring.get()), Some(1_000));
        assert_eq!(c.reads, 1);
        // A pass that went quiet until 5 000: the next QUIET_POLLS polls
        // read no clock and skip.
        q.set(5_000, 1_000);
        for _ in 0..QUIET_POLLS {
            assert_eq!(q.poll(&mut c, || ring.get()), None);
        }
        assert_eq!(c.reads, 1);
        // Then one reads it, finds the quiet time on, and skips again.
        c.t = 2_000;
        assert_eq!(q.poll(&mut c, || ring.get()), None);
        assert_eq!(c.reads, 2);
        // A slot comes: the next poll passes at once, on the time last
        // read (2 000), reading none.
        ring.set(true);
        c.t = 2_500;
        assert_eq!(q.poll(&mut c, || ring.get()), Some(2_000));
        assert_eq!(c.reads, 2);
        // That pass found it (no quiet time): the next poll reads the
        // clock again.
        q.set(0, 2_000);
        ring.set(false);
        assert_eq!(q.poll(&mut c, || ring.get()), Some(2_500));
        assert_eq!(c.reads, 3);
    }

    #[test]
    fn a_quiet_time_ends_at_its_time_or_when_the_endpoint_is_taken() {
        let mut c = TestClock::at(1_000);
        let mut q = Quiet::default();
        q.set(5_000, 1_000);
        for _ in 0..QUIET_POLLS {
            assert_eq!(q.poll(&mut c, || false), None);
        }
        // Its time is up: the first poll that reads the clock passes.
        c.t = 5_000;
        assert_eq!(q.poll(&mut c, || false), Some(5_000));
        // A pass that found something leaves no quiet time.
        q.set(0, 5_000);
        assert_eq!(q.poll(&mut c, || false), Some(5_000));
        // Taken (a send, a post): the next poll passes.
        q.set(9_000, 5_000);
        q.end();
        assert_eq!(q.poll(&mut c, || false), Some(5_000));
    }
}
