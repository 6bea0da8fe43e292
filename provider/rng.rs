//! splitmix64: the one small seeded generator of the crate — the schedules
//! of the simulated-network, fuzz and model tests, and the engine's entropy
//! under test. Not for secrets: one output gives its state away (the
//! engine's connection ids come from the OS, see proto/entropy.rs).

#[derive(Clone, Debug)]

pub struct SplitMix(pub u64);

impl SplitMix {
    #[cfg(test)]
    pub fn new(seed: u64) -> SplitMix {
        SplitMix(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, n); 0 when n is 0.
    #[cfg(test)]
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }

    /// True with probability `pct` percent.
    pub fn chance(&mut self, pct: f64) -> bool {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * 100.0 < pct
    }

    pub fn fill(&mut self, b: &mut [u8]) {
        for chunk in b.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
}
