//! Copies whose stores go past this core's caches (streaming, or
//! non-temporal, stores), for bytes another core reads next: a message
//! copied into the slots of a peer's ring.
//!
//! Why: the lines of a peer's ring were last read by the peer's core. A
//! plain copy into them first takes each 64-byte line from that core (a
//! read for ownership) and only then writes it, and on the hosts this
//! runs on those transfers are what the copy costs. On the EPYC guest of
//! 2026-12-05 (`fi_pingpong -e rdm -S 49152 -I 640`, copies only, both
//! ends timing their copies): a 48 KiB copy into the ring took a median
//! 4.5-5.0 us, the copy out of it 1.2; with streaming stores 1.0-1.1 in
//! and 2.8-3.0 out (the peer now reads from memory), one-way 6.2-6.4 ->
//! 4.6-4.7 us. In the host's slow cross-core state, when a plain copy into
//! a ring crawled (copy in 14-18 us, one-way 21-28), streamed copies
//! stayed at 5.2-5.7 one-way: they do not wait on the other core at all.
//! Below two slots (12 KiB) the two ways cost the same there.
//!
//! glibc's `memcpy` streams only copies larger than a share of the
//! last-level cache (megabytes), and no crate offers a copy that streams
//! at any length; this one is a loop of SSE2 stores, which every x86_64
//! has. Elsewhere it is a plain copy.
//!
//! Streaming stores are weakly ordered: what they wrote may reach memory
//! after a later plain store. `fence` orders them before whatever comes
//! next (the release store that publishes a slot).

/// Below this many bytes a copy is plain: the alignment and the fence
/// would cost more than the lines saved.
const MIN: usize = 256;

/// Copies `src` into `dst` (of the same length) with streaming stores
/// where there are any; call `fence` before another core may look.
#[inline]
pub(crate) fn copy(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len());
    if src.len() < MIN {
        dst.copy_from_slice(src);
        return;
    }
    copy_streaming(dst, src);
}

#[cfg(target_arch = "x86_64")]
fn copy_streaming(dst: &mut [u8], src: &[u8]) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
    let n = dst.len();
    // Plain stores up to the first 16-byte boundary of `dst` (MOVNTDQ
    // needs one), and after the last whole 64 bytes.
    let head = (dst.as_ptr() as usize).wrapping_neg() % 16;
    dst[..head].copy_from_slice(&src[..head]);
    let body = head + (n - head) / 64 * 64;
    let (d, s) = (dst.as_mut_ptr(), src.as_ptr());
    let mut i = head;
    while i < body {
        // SAFETY: `i + 64 <= body <= n`, both slices are `n` long: every
        // load and store is in bounds. `d + i` is 16-byte aligned
        // (`head`, and `i` moves by 64), as MOVNTDQ requires; the loads
        // are unaligned ones. SSE2, which both instructions are, is part
        // of every x86_64. `dst` is a `&mut`, so nothing else in this
        // process reads or writes it meanwhile, and it cannot overlap
        // `src`.
        unsafe {
            let a = _mm_loadu_si128(s.add(i) as *const __m128i);
            let b = _mm_loadu_si128(s.add(i + 16) as *const __m128i);
            let c = _mm_loadu_si128(s.add(i + 32) as *const __m128i);
            let e = _mm_loadu_si128(s.add(i + 48) as *const __m128i);
            _mm_stream_si128(d.add(i) as *mut __m128i, a);
            _mm_stream_si128(d.add(i + 16) as *mut __m128i, b);
            _mm_stream_si128(d.add(i + 32) as *mut __m128i, c);
            _mm_stream_si128(d.add(i + 48) as *mut __m128i, e);
        }
        i += 64;
    }
    dst[body..].copy_from_slice(&src[body..]);
}

#[cfg(not(target_arch = "x86_64"))]
fn copy_streaming(dst: &mut [u8], src: &[u8]) {
    dst.copy_from_slice(src);
}

/// Orders the streaming stores made so far before every store after
/// this (SFENCE; nothing where `copy` makes plain stores).
#[inline]
pub(crate) fn fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SFENCE (SSE, part of every x86_64) reads and writes no
    // memory; it only orders this core's stores.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Whatever the length and the alignment of either end, the copy
        /// is the bytes, and nothing around them is written.
        #[test]
        fn a_streamed_copy_is_the_bytes(len in 0usize..1200, at in 0usize..64, from in 0usize..64) {
            let src: Vec<u8> = (0..from + len).map(|i| (i * 7 + 3) as u8).collect();
            let mut dst = vec![0xEEu8; at + len + 64];
            copy(&mut dst[at..at + len], &src[from..]);
            fence();
            proptest::prop_assert_eq!(&dst[at..at + len], &src[from..]);
            proptest::prop_assert!(dst[..at].iter().chain(&dst[at + len..]).all(|&b| b == 0xEE));
        }
    }

    #[test]
    fn a_long_copy_streams_its_body() {
        // 48 KiB to an odd address: plain stores up to its 16-byte
        // boundary, streamed whole lines, a plain tail.
        let src: Vec<u8> = (0..48 << 10).map(|i| (i % 251) as u8).collect();
        let mut dst = vec![0u8; (48 << 10) + 3];
        copy(&mut dst[3..], &src);
        fence();
        assert_eq!(&dst[3..], &src[..]);
    }
}
