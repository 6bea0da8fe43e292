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
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
