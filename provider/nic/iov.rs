//! The application's buffers as the wires see them: a send's source
//! (`IovSource`) and a receive's sink (`IovSink`), read and written in
//! place, never copied up front.

use crate::nic::shm::mailbox::SharedBytes;
use crate::proto::{RecvSink, SendSource};

/// A list of application buffers, as (address, length).
/// Buffer list of one operation: inline up to two entries, so the usual
/// single-buffer send or receive allocates nothing.
pub(crate) type Iov = smallvec::SmallVec<[(usize, usize); 2]>;

pub(crate) fn iov_len(iov: &[(usize, usize)]) -> usize {
    iov.iter().map(|v| v.1).sum()
}

/// Reads a send's payload straight from the application's buffers.
/// Rendezvous sends keep it until the send completes, which is exactly as
/// long as libfabric lets us rely on the buffers.
pub(crate) struct IovSource {
    pub(crate) iov: Iov,
    pub(crate) len: usize,
}

impl SendSource for IovSource {
    fn len(&self) -> usize {
        self.len
    }
    fn read_at(&self, mut offset: usize, mut dst: &mut [u8]) {
        for &(base, len) in &self.iov {
            if dst.is_empty() {
                break;
            }
            if offset >= len {
                offset -= len;
                continue;
            }
            let n = (len - offset).min(dst.len());
            // SAFETY: (base, len) is an application buffer it promised to
            // keep valid and unmodified until the send completes; offset+n <= len.
            unsafe { std::ptr::copy_nonoverlapping((base + offset) as *const u8, dst.as_mut_ptr(), n) };
            dst = &mut dst[n..];
            offset = 0;
        }
    }
    fn ranges(&self) -> Option<Vec<(u64, u64)>> {
        Some(self.iov.iter().map(|&(p, l)| (p as u64, l as u64)).collect())
    }
    fn contiguous(&self, mut offset: usize, len: usize) -> Option<&[u8]> {
        for &(base, l) in &self.iov {
            if offset < l {
                if l - offset < len {
                    return None;
                }
                // SAFETY: as for read_at: [base, base+l) is a buffer the
                // application keeps valid and unmodified until the send
                // completes, which outlives this borrow of the source;
                // offset+len <= l.
                return Some(unsafe { std::slice::from_raw_parts((base + offset) as *const u8, len) });
            }
            offset -= l;
        }
        None
    }
}

/// Writes a receive's payload straight into the application's buffers.
pub(crate) struct IovSink {
    iov: Iov,
    cap: usize,
}

impl IovSink {
    pub(crate) fn new(iov: Iov) -> Self {
        let cap = iov_len(&iov);
        IovSink { iov, cap }
    }

    /// Copies the first `n` bytes of a mailbox slot's payload straight
    /// into the buffers (the slot is never borrowed: another process
    /// can write it).
    pub(crate) fn write_shared(&mut self, data: &SharedBytes<'_>, n: usize) {
        let mut off = 0;
        while off < n {
            let Some(dst) = self.region(off, n - off) else { break };
            let k = dst.len();
            data.copy_to(off, dst);
            off += k;
        }
    }
}

impl RecvSink for IovSink {
    fn capacity(&self) -> usize {
        self.cap
    }
    fn write_at(&mut self, mut offset: usize, mut src: &[u8]) {
        for &(base, len) in &self.iov {
            if src.is_empty() {
                break;
            }
            if offset >= len {
                offset -= len;
                continue;
            }
            let n = (len - offset).min(src.len());
            // SAFETY: (base, len) is a posted receive buffer the application
            // keeps valid until the receive completes; offset+n <= len.
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), (base + offset) as *mut u8, n) };
            src = &src[n..];
            offset = 0;
        }
    }
    fn region(&mut self, mut offset: usize, len: usize) -> Option<&mut [u8]> {
        for &(base, l) in &self.iov {
            if offset < l {
                // SAFETY: [base, base+l) is a posted receive buffer the
                // application keeps valid until the receive completes, which
                // outlives this borrow of the sink (the engine holds the sink
                // until then); offset + the returned length <= l, and the
                // &mut self borrow keeps us from handing out another.
                return Some(unsafe {
                    std::slice::from_raw_parts_mut((base + offset) as *mut u8, len.min(l - offset))
                });
            }
            offset -= l;
        }
        None
    }
}

/// (address, length) pieces of an iov as the wires' memory ranges.
pub(crate) fn ranges(iov: &[(usize, usize)]) -> Vec<(u64, u64)> {
    iov.iter().map(|&(p, l)| (p as u64, l as u64)).collect()
}
