//! Reliability (DESIGN.md §3, usnic): per-VC sequence numbers, the send
//! window with SACK, fast retransmit and an adaptive RTO (`send.rs`), the
//! receive window with out-of-order parking and the ACK policy
//! (`recv.rs`), and here the serial-number arithmetic and the RTT
//! estimator they share. Nothing here knows what a segment carries: the
//! engine's message layer puts frames in and gets them back.

mod recv;
mod send;

pub use recv::{Ooo, RecvWindow, Slot};
pub use send::{RtoTick, SendWindow};

use super::EngineConfig;

/// Internal sequence numbers are u64 that never wrap; the wire carries the
/// low 32 bits. Starting at 2^32 + isn keeps "one window back" positive.
pub const SEQ_BASE: u64 = 1 << 32;

/// Signed distance from `reference` to the 32-bit wire value `wire`
/// (serial-number arithmetic, RFC 1982): the nearest u64 with those low bits.
#[inline]
pub fn seq_delta(wire: u32, reference: u64) -> i64 {
    wire.wrapping_sub(reference as u32) as i32 as i64
}

/// RFC 6298 round-trip estimator with exponential backoff.
#[derive(Clone, Debug)]
pub struct Rtt {
    srtt: u64,
    rttvar: u64,
    has_sample: bool,
    base_rto: u64,
    backoff: u32,
}

impl Rtt {
    pub fn new(cfg: &EngineConfig) -> Rtt {
        Rtt {
            srtt: 0,
            rttvar: 0,
            has_sample: false,
            base_rto: cfg.rto_init_ns.clamp(cfg.rto_min_ns, cfg.rto_max_ns),
            backoff: 0,
        }
    }

    /// Only samples from segments sent once (Karn): the ACK of a
    /// retransmitted segment cannot tell which transmission it answers.
    pub fn sample(&mut self, r: u64, cfg: &EngineConfig) {
        if !self.has_sample {
            self.srtt = r;
            self.rttvar = r / 2;
            self.has_sample = true;
        } else {
            let err = self.srtt.abs_diff(r);
            self.rttvar = (3 * self.rttvar + err) / 4;
            self.srtt = (7 * self.srtt + r) / 8;
        }
        // The 1 µs granularity term keeps a perfectly steady link from
        // collapsing the variance term to zero.
        self.base_rto = (self.srtt + (4 * self.rttvar).max(1_000)).clamp(cfg.rto_min_ns, cfg.rto_max_ns);
    }

    pub fn rto(&self, cfg: &EngineConfig) -> u64 {
        self.base_rto
            .saturating_mul(1u64 << self.backoff.min(30))
            .min(cfg.rto_max_ns)
    }

    pub fn back_off(&mut self) {
        self.backoff = self.backoff.saturating_add(1);
    }

    /// New data got through: the path works again, forget the backoff.
    pub fn reset_backoff(&mut self) {
        self.backoff = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delta_wraps() {
        let r = SEQ_BASE + u32::MAX as u64; // low bits 0xffff_ffff
        assert_eq!(seq_delta(0, r), 1);
        assert_eq!(seq_delta(u32::MAX, r), 0);
        assert_eq!(seq_delta(u32::MAX - 5, r), -5);
        assert_eq!(seq_delta(10, SEQ_BASE + 5), 5);
    }

    #[test]
    fn rto_adapts_and_backs_off() {
        let cfg = EngineConfig {
            rto_min_ns: 1_000,
            rto_max_ns: 1_000_000,
            rto_init_ns: 500_000,
            ..Default::default()
        };
        let mut r = Rtt::new(&cfg);
        assert_eq!(r.rto(&cfg), 500_000);
        for _ in 0..50 {
            r.sample(10_000, &cfg);
        }
        assert!(r.rto(&cfg) < 20_000, "{}", r.rto(&cfg));
        let base = r.rto(&cfg);
        r.back_off();
        r.back_off();
        assert_eq!(r.rto(&cfg), base * 4);
        for _ in 0..40 {
            r.back_off();
        }
        assert_eq!(r.rto(&cfg), 1_000_000);
        r.reset_backoff();
        assert_eq!(r.rto(&cfg), base);
    }
}
