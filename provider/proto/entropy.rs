//! Where the engine's unpredictable numbers come from: connection ids,
//! initial sequence numbers, the cookie key and the hash key.
//!
//! The engine never asks the operating system itself (it stays sans-IO and
//! deterministic under test): whoever builds it hands it an `Entropy`. The
//! endpoint hands it `OsEntropy`; the tests hand it a seeded generator, so
//! a simulated run replays exactly.
//!
//! Connection ids are the only thing that keeps an off-path sender from
//! injecting data into a VC (every datagram after the handshake carries the
//! receiver's id), so they must not be predictable from each other: a
//! seeded generator whose outputs reveal its state (splitmix64 does: its
//! output function is invertible) gives away every later id once one is
//! seen. Each VC therefore draws its id and ISN from the OS afresh.

/// A source of random 64-bit words.
pub trait Entropy: Send {
    fn next_u64(&mut self) -> u64;
}

/// The operating system's random source (getrandom(2), or what the
/// `getrandom` crate falls back to), asked for every word.
pub struct OsEntropy;

impl Entropy for OsEntropy {
    fn next_u64(&mut self) -> u64 {
        match getrandom::u64() {
            Ok(v) => v,
            // Linux has had getrandom(2) since 3.17 and the crate falls back
            // to /dev/urandom before that; should both fail, std's
            // per-process random SipHash keys (also from the OS, taken at
            // start) still give words nobody outside can predict, where a
            // panic would abort the application inside a libfabric call.
            Err(_) => fallback_u64(),
        }
    }
}

fn fallback_u64() -> u64 {
    use std::hash::BuildHasher;
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    std::collections::hash_map::RandomState::new().hash_one(COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// The simulated network's and the fuzzers' source: reproducible from a seed.
#[cfg(any(test, feature = "fuzz"))]
impl Entropy for crate::rng::SplitMix {
    fn next_u64(&mut self) -> u64 {
        crate::rng::SplitMix::next_u64(self)
    }
}
