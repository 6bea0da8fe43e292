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
