//! Cross-memory attach: `process_vm_readv` and `process_vm_writev` between
//! this process and a local peer, over lists of address ranges (the
//! rendezvous's buffers, as RTS and CTW frames carry them).

use super::choice::PullFloor;
use crate::proto::MemRanges;
use std::io;

/// A piece of memory, (address, length), in this process or another.
pub type Range = (u64, u64);

/// Bytes in all of `v` (saturating: the lengths may come from a peer).
pub fn ranges_len(v: &[Range]) -> u64 {
    v.iter().fold(0u64, |a, r| a.saturating_add(r.1))
}

/// The pieces covering bytes `off..off + n` of the concatenation of `v`.
pub fn sub_ranges(v: &[Range], off: u64, n: u64) -> MemRanges {
    sub_ranges_iter(v, off, n).collect()
}

/// `sub_ranges` without collecting them (the CMA path builds its iovecs
/// from it with no allocation).
fn sub_ranges_iter(v: &[Range], mut off: u64, mut n: u64) -> impl Iterator<Item = Range> + '_ {
    v.iter()
        .map_while(move |&(a, l)| {
            if n == 0 {
                return None;
            }
            if off >= l {
                off -= l;
                return Some(None);
            }
            let take = (l - off).min(n);
            let r = (a + off, take);
            n -= take;
            off = 0;
            Some(Some(r))
        })
        .flatten()
}

/// Reads `remote` ranges of process `pid` into `local` ranges of ours
/// (cross-memory attach), as far as both go. Returns the bytes read.
///
/// # Safety
/// The kernel writes into `local` like any store of ours: every range must
/// be memory of this process that is writable and that nothing else reads
/// or writes meanwhile (a posted receive's buffers, which the application
/// lent us until the receive completes or is cancelled; fi_msg(3)), and
/// that no Rust reference points into.
pub unsafe fn cma_read(pid: u32, local: &[Range], remote: &[Range]) -> io::Result<usize> {
    cma(pid, local, remote, false)
}

/// Writes `local` ranges of ours into `remote` ranges of process `pid`.
/// Safe: it only reads our memory (an unreadable range is the kernel's
/// EFAULT, not a fault), and what it writes is the other process's, under
/// the grant protocol that process controls.
pub fn cma_write(pid: u32, local: &[Range], remote: &[Range]) -> io::Result<usize> {
    cma(pid, local, remote, true)
}

/// A process's first `process_vm_readv` costs the kernel some 15-30 µs
/// more than the later ones (measured on the 2-core VM of the benchmarks,
/// Linux 6.x); without a read of our own first, the first rendezvous a
/// benchmark times pays it (libfabric's shm pays it in its CMA check at
/// start-up). An 8-byte read of our own memory pays it here, once per
/// process; eight more are timed, and the least of them is the floor's
/// fixed part (the system call, the kernel's look at the process): about
/// 1.1-1.3 µs on the VMs of 2026-12-04, where a system call is dear.
/// Eight reads of 16 KiB of our own heap, less eight copies of it, give
/// the part per page (the least of each, a quarter of what is left of
/// the read after the fixed part and the copy): 170-190 ns there, where
/// a 16 KiB read of our own memory took 2.1 µs against 1.2 for 8 bytes
/// (`bench/README.md`). `CopyOrPull::set_pull_floor` weighs copies
/// against it before a pull of their size was timed. Some 50 µs in all,
/// once. `None` if the kernel refuses the read (best effort: a refusal is
/// learnt again, and handled, at the first real pull).
pub fn pull_floor() -> Option<PullFloor> {
    static FLOOR: std::sync::OnceLock<Option<PullFloor>> = std::sync::OnceLock::new();
    *FLOOR.get_or_init(|| {
        // The least time of eight `f`s.
        let least = |f: &mut dyn FnMut() -> io::Result<usize>| -> Option<u64> {
            let mut least = u64::MAX;
            for _ in 0..8 {
                let t0 = crate::progress::now_ns();
                f().ok()?;
                least = least.min(crate::progress::now_ns() - t0);
            }
            Some(least)
        };
        let src = [0u8; 8];
        let mut dst = [0u8; 8];
        let local = [(dst.as_mut_ptr() as u64, 8)];
        let remote = [(src.as_ptr() as u64, 8)];
        // Reading our own stack into our own stack: nothing else is touched.
        let mut read = || cma(std::process::id(), &local, &remote, false);
        // The first pays the process's first read, untimed.
        let _ = read();
        let ns = least(&mut read)?;
        // Four pages of our heap (written, so that they are there) read
        // into four more, and copied.
        const LEN: usize = 16 << 10;
        let from = vec![1u8; LEN + 4096];
        let mut to = vec![0u8; LEN + 4096];
        let a = from.as_ptr().align_offset(4096);
        let b = to.as_ptr().align_offset(4096);
        let local = [(to[b..].as_mut_ptr() as u64, LEN as u64)];
        let remote = [(from[a..].as_ptr() as u64, LEN as u64)];
        let pull = least(&mut || cma(std::process::id(), &local, &remote, false))?;
        let copy = least(&mut || {
            to[b..b + LEN].copy_from_slice(&from[a..a + LEN]);
            std::hint::black_box(&to);
            Ok(LEN)
        })?;
        let page_ns = pull.saturating_sub(ns + copy) / (LEN as u64 / 4096);
        Some(PullFloor { ns, page_ns })
    })
}

/// Reading another process for the first time costs the kernel more
/// again, per process read, on top of the once-per-process cost that
/// `pull_floor` pays:
/// a first 12 KiB pull of a peer took 8-11 µs, 3.6-4.0 µs once that peer
/// was read before, 1.2-2 µs in steady state (the Firecracker VM of
/// 2026-12-02, Linux 6.18; most of what is left is the pages read for the
/// first time). `Exec::connect_ahead` pays it here for each peer it
/// connects to before the application times anything, as libfabric's shm
/// pays it in the CMA check it makes on mapping a peer.
///
/// It reads 8 bytes at 4096, below `vm.mmap_min_addr` (65536 unless an
/// administrator lowered it), where no process maps memory: the read fails
/// with EFAULT after the work a first read of the peer costs (measured:
/// it warms as well as reading a mapped word does), and reads nothing of
/// the peer's. Were that page mapped, its 8 bytes would land in a local
/// buffer and be dropped. `Err` only when the kernel refuses reading the
/// peer at all (EPERM under Yama's ptrace scope, ESRCH: gone).
pub fn cma_warm_peer(pid: u32) -> io::Result<()> {
    let mut dst = [0u8; 8];
    let local = [(dst.as_mut_ptr() as u64, 8)];
    let remote = [(4096u64, 8)];
    match cma(pid, &local, &remote, false) {
        Err(e) if e.raw_os_error() != Some(libc::EFAULT) => Err(e),
        _ => Ok(()),
    }
}

/// iovecs of at most this many pieces per syscall (far below IOV_MAX).
const IOV_BATCH: usize = 64;

/// Most transfers have a few pieces: those iovecs stay on the stack.
type Iovecs = smallvec::SmallVec<[libc::iovec; 4]>;

fn iovecs(v: &[Range], skip: u64, max: u64) -> Iovecs {
    sub_ranges_iter(v, skip, max)
        .take(IOV_BATCH)
        .map(|(a, l)| libc::iovec {
            iov_base: a as usize as *mut libc::c_void,
            iov_len: l as usize,
        })
        .collect()
}

fn cma(pid: u32, local: &[Range], remote: &[Range], write: bool) -> io::Result<usize> {
    let want = ranges_len(local).min(ranges_len(remote));
    let mut done = 0u64;
    while done < want {
        let (liov, riov) = (iovecs(local, done, want - done), iovecs(remote, done, want - done));
        // SAFETY: `liov` describes buffers of this process that the caller
        // owns (posted receive buffers to read into, or a send's source to
        // write from); `riov` is memory of the other process, which the
        // kernel checks (EFAULT for bad ranges).
        let n = unsafe {
            let f = if write {
                libc::process_vm_writev
            } else {
                libc::process_vm_readv
            };
            f(
                pid as libc::pid_t,
                liov.as_ptr(),
                liov.len() as libc::c_ulong,
                riov.as_ptr(),
                riov.len() as libc::c_ulong,
                0,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n == 0 {
            return Err(io::Error::from_raw_os_error(libc::EFAULT));
        }
        done += n as u64;
    }
    Ok(done as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cma_reads_own_memory() {
        let src: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
        let mut a = vec![0u8; 3000];
        let mut b = vec![0u8; 7000];
        let local = [
            (a.as_mut_ptr() as u64, a.len() as u64),
            (b.as_mut_ptr() as u64, b.len() as u64),
        ];
        let remote = [(src.as_ptr() as u64, 4000u64), (src.as_ptr() as u64 + 4000, 6000)];
        // SAFETY: `local` is `a` and `b`, alive and not borrowed until the
        // assertions below.
        assert_eq!(
            unsafe { cma_read(std::process::id(), &local, &remote) }.unwrap(),
            10_000
        );
        assert_eq!(&a[..], &src[..3000]);
        assert_eq!(&b[..], &src[3000..]);
    }

    #[test]
    fn the_pull_floor_is_measured_once() {
        let f = pull_floor().expect("reading our own memory is allowed");
        assert!(f.ns > 0);
        assert_eq!(pull_floor(), Some(f), "once a process");
    }

    /// The warm-up's read at an unmapped address is no error (that is
    /// what it expects); a process that does not exist is.
    #[test]
    fn warming_a_peer_is_ok_unless_it_cannot_be_read() {
        cma_warm_peer(std::process::id()).unwrap();
        // Above the kernel's pid_max (at most 2^22): no such process.
        let e = cma_warm_peer(1 << 23).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ESRCH));
    }
}
