//! SipHash-2-4 (Aumasson & Bernstein, 2012): a keyed pseudorandom function
//! for short inputs, 128-bit key, 64-bit output. The handshake uses it as
//! the MAC of its stateless cookies (`conn::CookieKey`). std's own SipHash
//! is either unkeyed (`DefaultHasher`) or deprecated (`SipHasher`), and this
//! is 40 lines.

pub struct SipHash24 {
    v: [u64; 4],
    /// Bytes of a word not yet complete, and how many.
    tail: u64,
    ntail: usize,
    len: usize,
}

impl SipHash24 {
    pub fn new(k0: u64, k1: u64) -> SipHash24 {
        SipHash24 {
            v: [
                k0 ^ 0x736f_6d65_7073_6575,
                k1 ^ 0x646f_7261_6e64_6f6d,
                k0 ^ 0x6c79_6765_6e65_7261,
                k1 ^ 0x7465_6462_7974_6573,
            ],
            tail: 0,
            ntail: 0,
            len: 0,
        }
    }

    fn round(&mut self) {
        let v = &mut self.v;
        v[0] = v[0].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(13) ^ v[0];
        v[0] = v[0].rotate_left(32);
        v[2] = v[2].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(16) ^ v[2];
        v[0] = v[0].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(21) ^ v[0];
        v[2] = v[2].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(17) ^ v[2];
        v[2] = v[2].rotate_left(32);
    }

    fn compress(&mut self, m: u64) {
        self.v[3] ^= m;
        self.round();
        self.round();
        self.v[0] ^= m;
    }

    pub fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.tail |= (b as u64) << (8 * self.ntail);
            self.ntail += 1;
            if self.ntail == 8 {
                self.compress(self.tail);
                (self.tail, self.ntail) = (0, 0);
            }
        }
        self.len += bytes.len();
    }

    pub fn finish(mut self) -> u64 {
        self.compress(self.tail | (self.len as u64) << 56);
        self.v[2] ^= 0xff;
        for _ in 0..4 {
            self.round();
        }
        self.v[0] ^ self.v[1] ^ self.v[2] ^ self.v[3]
    }
}

#[cfg(test)]
mod tests {
    use super::SipHash24;

    /// The reference implementation's vectors: key 00 01 .. 0f, message
    /// 00 01 .. (n-1), for a few lengths around the word boundaries.
    #[test]
    fn reference_vectors() {
        let k0 = u64::from_le_bytes([0, 1, 2, 3, 4, 5, 6, 7]);
        let k1 = u64::from_le_bytes([8, 9, 10, 11, 12, 13, 14, 15]);
        let msg: Vec<u8> = (0..64).collect();
        for (n, want) in [
            (0usize, 0x726f_db47_dd0e_0e31u64),
            (1, 0x74f8_39c5_93dc_67fd),
            (7, 0xab02_00f5_8b01_d137),
            (8, 0x93f5_f579_9a93_2462),
            (15, 0xa129_ca61_49be_45e5),
            (63, 0x958a_324c_eb06_4572),
        ] {
            let mut h = SipHash24::new(k0, k1);
            // Fed in two uneven pieces: the split must not matter.
            h.write(&msg[..n / 3]);
            h.write(&msg[n / 3..n]);
            assert_eq!(h.finish(), want, "length {n}");
        }
    }
}
