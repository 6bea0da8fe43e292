//! A shared mapping of a file in `/dev/shm` (a mailbox), and `SharedBytes`,
//! the view of bytes in it that another process may be writing. Every
//! access to such memory goes through here: atomics for the words the
//! protocol synchronises on, bounds-checked copies for the rest, never a
//! Rust reference to bytes a peer may write. `mailbox.rs` lays its file
//! out on top of this.

use std::io;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

pub(super) const PAGE: usize = 4096;

/// A shared mapping of a whole mailbox file.
pub(super) struct Mapping {
    base: *mut u8,
    len: usize,
    /// The CPU has PREFETCHW (`has_prefetchw`): asked when the mapping is
    /// made, not at the first prefetch. CPUID leaves a virtual machine
    /// for the hypervisor; lazily, the first message of a `fi_pingpong`
    /// size that prefetched paid that exit on its path, about 0.4 us a
    /// transfer over the size's ten (bench/README.md, "The next slot's
    /// lines fetched ahead").
    prefetchw: bool,
}

// SAFETY: the mapping is plain shared memory; every access to it goes
// through atomics or bounds-checked copies below.
unsafe impl Send for Mapping {}

impl Mapping {
    pub(super) fn map(fd: i32, len: usize) -> io::Result<Mapping> {
        // SAFETY: maps `len` bytes of an open file; the result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping {
            base: p as *mut u8,
            len,
            prefetchw: has_prefetchw(),
        })
    }

    /// Faults in the pages of `off..off + len` now (for writing, or for
    /// reading), so that the messages of a ring's first lap do not each
    /// pay a page fault at both ends: on this 2-core VM a fault costs
    /// about as much as three small messages. Best effort: a kernel
    /// before 5.14 refuses the advice, and the pages then fault in as
    /// they are first used.
    pub(super) fn populate(&self, off: usize, len: usize, write: bool) {
        let page = |x: usize| x / PAGE * PAGE;
        let (start, end) = (
            page(off),
            (off + len).min(self.len).next_multiple_of(PAGE).min(self.len),
        );
        if start >= end {
            return;
        }
        let advice = if write {
            libc::MADV_POPULATE_WRITE
        } else {
            libc::MADV_POPULATE_READ
        };
        // SAFETY: a page-aligned range inside our own mapping; populating
        // changes no byte of it, only which pages are resident.
        let r = unsafe { libc::madvise(self.base.add(start) as *mut libc::c_void, end - start, advice) };
        if r != 0 {
            crate::debug!(
                crate::ffi::FI_LOG_EP_CTRL,
                "madvise(populate) of a ring: {}",
                io::Error::last_os_error()
            );
        }
    }

    /// An aligned word inside the mapping.
    pub(super) fn u32_at(&self, off: usize) -> &AtomicU32 {
        assert!(off + 4 <= self.len && off.is_multiple_of(4));
        // SAFETY: in bounds and aligned (checked above); the mapping lives
        // as long as `self`; AtomicU32 has the layout of u32.
        unsafe { &*(self.base.add(off) as *const AtomicU32) }
    }
    pub(super) fn u64_at(&self, off: usize) -> &AtomicU64 {
        assert!(off + 8 <= self.len && off.is_multiple_of(8));
        // SAFETY: as u32_at.
        unsafe { &*(self.base.add(off) as *const AtomicU64) }
    }

    /// The `N` little-endian words from `off` on (8-aligned), each read as
    /// one 8-byte load; like `read`, garbage (bounded) if the peer is
    /// writing them.
    ///
    /// Words, not a byte copy: the caller takes the header's fields as the
    /// words they are, without a copy on its stack read back wider.
    #[inline(always)]
    pub(super) fn words<const N: usize>(&self, off: usize) -> [u64; N] {
        let run = self.word_run::<N>(off);
        std::array::from_fn(|i| u64::from_le(run[i].load(Ordering::Relaxed)))
    }
    /// Writes `w` at `off` (8-aligned), word by word (`words`).
    #[inline(always)]
    pub(super) fn put_words<const N: usize>(&self, off: usize, w: [u64; N]) {
        for (a, x) in self.word_run::<N>(off).iter().zip(w) {
            a.store(x.to_le(), Ordering::Relaxed);
        }
    }
    /// `N` aligned words from `off` on, with one bounds check for all.
    #[inline(always)]
    fn word_run<const N: usize>(&self, off: usize) -> &[AtomicU64; N] {
        assert!(off.checked_add(N * 8).is_some_and(|e| e <= self.len) && off.is_multiple_of(8));
        // SAFETY: in bounds and aligned (checked above); the mapping lives
        // as long as `self`; AtomicU64 has the layout of u64, so `N` of
        // them that of `[u64; N]`.
        unsafe { &*(self.base.add(off) as *const [AtomicU64; N]) }
    }

    /// Copies bytes out of the mapping. The peer may be writing them at the
    /// same time; what we copy is then garbage, but bounded garbage.
    pub(super) fn read(&self, off: usize, dst: &mut [u8]) {
        assert!(off.checked_add(dst.len()).is_some_and(|e| e <= self.len));
        // SAFETY: the source range is inside the mapping (checked above) and
        // cannot overlap `dst`, which is process-private memory.
        unsafe { std::ptr::copy_nonoverlapping(self.base.add(off), dst.as_mut_ptr(), dst.len()) };
    }
    pub(super) fn write(&self, off: usize, src: &[u8]) {
        assert!(off.checked_add(src.len()).is_some_and(|e| e <= self.len));
        // SAFETY: the destination range is inside the mapping; no Rust
        // reference to it exists (we only hand out atomics and copies).
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.base.add(off), src.len()) };
    }
    /// Asks the CPU to fetch the cache line at `off` for writing, without
    /// waiting for it: a hint, which reads and writes nothing. A no-op on
    /// CPUs without PREFETCHW.
    #[inline]
    pub(super) fn prefetch_write(&self, off: usize) {
        #[cfg(target_arch = "x86_64")]
        if off < self.len && self.prefetchw {
            // SAFETY: PREFETCHW reads and writes no memory, cannot fault
            // and changes no flags; the address is inside the mapping
            // anyway; the CPU has the instruction (`prefetchw`).
            unsafe {
                std::arch::asm!(
                    "prefetchw [{0}]",
                    in(reg) self.base.add(off),
                    options(nostack, preserves_flags, readonly)
                );
            }
        }
    }
    /// Asks the CPU to fetch the cache line at `off` for reading, without
    /// waiting for it: a hint, which reads and writes nothing.
    #[inline]
    pub(super) fn prefetch_read(&self, off: usize) {
        #[cfg(target_arch = "x86_64")]
        if off < self.len {
            // SAFETY: PREFETCHT0 (SSE, in every x86_64) reads and writes
            // no memory, cannot fault and changes no flags; the address
            // is inside the mapping anyway.
            unsafe {
                std::arch::asm!(
                    "prefetcht0 [{0}]",
                    in(reg) self.base.add(off),
                    options(nostack, preserves_flags, readonly)
                );
            }
        }
    }
    /// Mapping bytes a peer may write at any time, to be copied out.
    pub(super) fn shared(&self, off: usize, len: usize) -> SharedBytes<'_> {
        assert!(off.checked_add(len).is_some_and(|e| e <= self.len));
        SharedBytes {
            // SAFETY: in bounds (checked above).
            ptr: unsafe { self.base.add(off) },
            len,
            _map: std::marker::PhantomData,
        }
    }
    pub(super) fn slice_mut(&mut self, off: usize, len: usize) -> &mut [u8] {
        assert!(off.checked_add(len).is_some_and(|e| e <= self.len));
        // SAFETY: in bounds; the slot is the producer's until it publishes
        // it, and `&mut self` keeps this the only view in this process.
        unsafe { std::slice::from_raw_parts_mut(self.base.add(off), len) }
    }
}

/// Whether the CPU has PREFETCHW (CPUID 8000_0001h, ECX bit 8; std's
/// feature detection does not know it), asked once.
#[cfg(target_arch = "x86_64")]
fn has_prefetchw() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| std::arch::x86_64::__cpuid(0x8000_0001).ecx & (1 << 8) != 0)
}

#[cfg(not(target_arch = "x86_64"))]
fn has_prefetchw() -> bool {
    false
}

/// Bytes in a shared mapping that another process may be writing: never
/// seen through a Rust reference (that would be a data race), only copied
/// out with `copy_to`. A misbehaving peer writing them meanwhile only
/// garbles what we copy.
#[derive(Clone, Copy)]
pub struct SharedBytes<'a> {
    ptr: *const u8,
    len: usize,
    _map: std::marker::PhantomData<&'a [u8]>,
}

impl<'a> SharedBytes<'a> {
    /// Bytes of this process seen the same way (the protocol machine's
    /// tests, whose rings are plain memory, and the fuzz targets).
    #[cfg(any(test, feature = "fuzz"))]
    pub fn of_slice(s: &'a [u8]) -> SharedBytes<'a> {
        SharedBytes {
            ptr: s.as_ptr(),
            len: s.len(),
            _map: std::marker::PhantomData,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Copies `dst.len()` bytes from `off` on into `dst`.
    pub fn copy_to(&self, off: usize, dst: &mut [u8]) {
        assert!(off.checked_add(dst.len()).is_some_and(|e| e <= self.len));
        // SAFETY: the source range is inside the mapping (or slice), which
        // outlives 'a (checked above and by `Mapping::shared`); `dst` is
        // process-private memory another `&mut` borrow holds, so the
        // ranges cannot overlap. The copy reads
        // through raw pointers only: no reference to shared bytes exists.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.add(off), dst.as_mut_ptr(), dst.len()) };
    }
    /// The bytes, copied out (a message kept for later).
    pub fn to_vec(self) -> Vec<u8> {
        let mut v = vec![0u8; self.len];
        self.copy_to(0, &mut v);
        v
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what map() mapped.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}
