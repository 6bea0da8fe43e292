//! Keyed fast hashing for the provider's hot maps (engine, matching, the
//! endpoint's operation ids, the shm wire).

use std::hash::{BuildHasher, Hasher};

/// Keyed multiply-rotate hashing for the engine's maps. SipHash dominated
/// the per-message cost (a third of it, several lookups per message); keys
/// are addresses and counters, and the per-engine random key keeps a sender
/// of spoofed addresses from predicting collisions.
#[derive(Clone, Copy)]
pub struct KeyedState(pub u64);

pub struct KeyedHasher(u64);

impl BuildHasher for KeyedState {
    type Hasher = KeyedHasher;
    fn build_hasher(&self) -> KeyedHasher {
        KeyedHasher(self.0)
    }
}

impl KeyedHasher {
    #[inline]
    fn add(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(26) ^ v).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

impl Hasher for KeyedHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(b));
        }
    }
    fn write_u8(&mut self, v: u8) {
        self.add(v as u64);
    }
    fn write_u16(&mut self, v: u16) {
        self.add(v as u64);
    }
    fn write_u32(&mut self, v: u32) {
        self.add(v as u64);
    }
    fn write_u64(&mut self, v: u64) {
        self.add(v);
    }
    fn write_usize(&mut self, v: usize) {
        self.add(v as u64);
    }
    fn finish(&self) -> u64 {
        // The table indexes with low bits; fold the well-mixed high ones in.
        self.0 ^ (self.0 >> 29)
    }
}

impl Default for KeyedState {
    /// A fresh random key (from std's per-process random source), so
    /// keys a peer chooses (tags, addresses) cannot be aimed at one bucket.
    fn default() -> Self {
        KeyedState(std::collections::hash_map::RandomState::new().hash_one(0x6a09_e667_f3bc_c908u64) | 1)
    }
}
