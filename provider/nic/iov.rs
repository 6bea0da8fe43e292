//! The application's buffers as the wires see them: a send's source
//! (`IovSource`) and a receive's sink (`IovSink`), read and written in
//! place, never copied up front.
//!
//! An `Iov` is a permission, not just a list of numbers: whoever builds
//! one from raw addresses (`unsafe`) vouches for the memory, so that the
//! source and the sink made from it can read and write there soundly. The
//! rest of the crate only moves Iovs around and splits them, in safe code.

use crate::nic::shm::mapping::SharedBytes;
use crate::proto::MemRanges;
use crate::proto::{RecvSink, SendSource};

/// The buffers of one operation, as (address, length) ranges in order.
///
/// The only constructors that take addresses are `unsafe`
/// ([`Iov::from_raw`], [`Iov::from_raw_parts`]); their contract is what
/// makes reading (`IovSource`) and writing (`IovSink`) through an Iov
/// sound. Not `Clone`: one Iov, one user of its memory; splitting it
/// ([`Iov::take_front`]) hands out disjoint parts.
#[derive(Default)]
pub(crate) struct Iov(Ranges);

/// One range inline, the usual single-buffer send or receive, which
/// allocates nothing; any other number boxed. Three words: an Iov rides
/// in every posted receive and every send's arguments, and is moved
/// several times on the way (a `SmallVec` of two inline ranges was six).
enum Ranges {
    One((usize, usize)),
    /// Never exactly one range (`Ranges::of` keeps that inline); none is
    /// an empty boxed slice, which allocates nothing either.
    Many(Box<[(usize, usize)]>),
}

impl Default for Ranges {
    fn default() -> Self {
        Ranges::Many(Box::default())
    }
}

impl Ranges {
    fn of(v: Vec<(usize, usize)>) -> Ranges {
        match v[..] {
            [r] => Ranges::One(r),
            _ => Ranges::Many(v.into_boxed_slice()),
        }
    }

    #[inline(always)]
    fn as_slice(&self) -> &[(usize, usize)] {
        match self {
            Ranges::One(r) => std::slice::from_ref(r),
            Ranges::Many(v) => v,
        }
    }
}

impl Iov {
    /// No buffers (a zero-length operation, or a peek).
    pub(crate) fn empty() -> Iov {
        Iov::default()
    }

    /// An Iov of `ranges` (address, length), in order.
    ///
    /// # Safety
    /// For as long as the operation that holds this Iov is in flight (until
    /// its completion is reported or it is cancelled), every range must be
    /// valid for reads, and for a receive also for writes, and must not be
    /// read or written by anything but this Iov's operation meanwhile (for
    /// a send: not written). Ranges of one Iov do not overlap each other
    /// (for a receive) nor memory that Rust code holds references to.
    /// Zero-length ranges may have any address. This is what libfabric asks
    /// of the application for the buffers it passes to fi_send/fi_recv and
    /// kin (fi_msg(3), fi_tagged(3)).
    pub(crate) unsafe fn from_raw(ranges: impl IntoIterator<Item = (usize, usize)>) -> Iov {
        Iov(Ranges::of(ranges.into_iter().collect()))
    }

    /// One range of `len` bytes at `addr`.
    ///
    /// # Safety
    /// As for [`Iov::from_raw`].
    pub(crate) unsafe fn from_raw_parts(addr: usize, len: usize) -> Iov {
        Iov(Ranges::One((addr, len)))
    }

    /// The ranges `(address, length)`, in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.0.as_slice().iter().copied()
    }

    /// The one range of an Iov of one range.
    #[inline]
    pub(crate) fn single(&self) -> Option<(usize, usize)> {
        match self.0 {
            Ranges::One(r) => Some(r),
            Ranges::Many(_) => None,
        }
    }

    /// How many ranges (what `iov_limit` bounds).
    pub(crate) fn count(&self) -> usize {
        self.0.as_slice().len()
    }

    /// Bytes in all ranges.
    #[inline]
    pub(crate) fn total_len(&self) -> usize {
        match self.0 {
            Ranges::One((_, len)) => len,
            Ranges::Many(ref ranges) => ranges.iter().map(|r| r.1).sum(),
        }
    }

    /// The first range's address (what a completion reports as `buf`).
    pub(crate) fn addr(&self) -> Option<usize> {
        self.0.as_slice().first().map(|r| r.0)
    }

    /// Copies `dst.len()` bytes from `offset` on out of the buffers (a
    /// send's: its maker vouched they are readable and not written while
    /// the send is in flight).
    #[inline]
    pub(crate) fn read_at(&self, offset: usize, mut dst: &mut [u8]) {
        if let Ranges::One((base, len)) = self.0 {
            // One buffer, the common case: no loop.
            let n = len.saturating_sub(offset).min(dst.len());
            // SAFETY: as below, for the one range of the Iov.
            unsafe { std::ptr::copy_nonoverlapping((base + offset) as *const u8, dst.as_mut_ptr(), n) };
            return;
        }
        for (at, n) in self.pieces(offset, dst.len()) {
            // SAFETY: [at, at+n) lies in a range of the Iov (`pieces`),
            // which its maker vouched is readable and not written while
            // the send it is the source of is in flight (Iov::from_raw),
            // and its sources (`IovSource`, `IovView`) live no longer than
            // the send; n <= dst.len(), and `dst` is our own memory.
            unsafe { std::ptr::copy_nonoverlapping(at as *const u8, dst.as_mut_ptr(), n) };
            dst = &mut dst[n..];
        }
    }

    /// `read_at` into memory another core reads next (a peer's ring),
    /// with streaming stores (`nic::stream`), fenced before it returns.
    pub(crate) fn stream_at(&self, offset: usize, mut dst: &mut [u8]) {
        for (at, n) in self.pieces(offset, dst.len()) {
            // SAFETY: as in `read_at`: [at, at+n) lies in a range of the
            // Iov, readable and not written while the send is in flight.
            let src = unsafe { std::slice::from_raw_parts(at as *const u8, n) };
            let (now, rest) = dst.split_at_mut(n);
            super::stream::copy(now, src);
            dst = rest;
        }
        super::stream::fence();
    }

    /// Where bytes `offset..offset + n` of the buffers are, in order, as
    /// (address, length) pieces of the ranges (fewer bytes if the buffers
    /// end first): what a copy into or out of them walks.
    pub(crate) fn pieces(&self, mut offset: usize, mut n: usize) -> impl Iterator<Item = (usize, usize)> + '_ {
        let mut ranges = self.iter();
        std::iter::from_fn(move || {
            while n > 0 {
                let (base, len) = ranges.next()?;
                if offset >= len {
                    offset -= len;
                    continue;
                }
                let k = (len - offset).min(n);
                let piece = (base + offset, k);
                offset = 0;
                n -= k;
                return Some(piece);
            }
            None
        })
    }

    /// The ranges as the wires' memory ranges.
    pub(crate) fn mem_ranges(&self) -> MemRanges {
        self.iter().map(|(p, l)| (p as u64, l as u64)).collect()
    }

    /// Splits off the first `n` bytes (all of them, if there are fewer):
    /// `self` keeps the rest (at least an empty range where the part ends,
    /// unless `self` had no ranges). Safe: the part and the rest are within the
    /// original ranges and do not overlap, so each inherits its contract.
    ///
    /// The range the cut falls in (or ends at) is split in two, even into
    /// an empty piece: the part always starts where `self` did, and the
    /// rest where the part ends, including when `n` is 0 (an FI_MULTI_RECV
    /// slice names its place in the buffer even when it is empty).
    pub(crate) fn take_front(&mut self, n: usize) -> Iov {
        if let Ranges::One((base, len)) = self.0 {
            let k = n.min(len);
            self.0 = Ranges::One((base + k, len - k));
            return Iov(Ranges::One((base, k)));
        }
        let mut part = Vec::new();
        let mut rest = self.0.as_slice().to_vec();
        let mut left = n;
        let mut whole = 0;
        let last = rest.len().saturating_sub(1);
        for (i, r) in rest.iter_mut().enumerate() {
            let (base, len) = *r;
            if len < left && i < last {
                part.push((base, len));
                left -= len;
                whole += 1;
                continue;
            }
            let k = left.min(len);
            part.push((base, k));
            *r = (base + k, len - k);
            break;
        }
        rest.drain(..whole);
        self.0 = Ranges::of(rest);
        Iov(Ranges::of(part))
    }
}

/// Reads a send's payload straight from the application's buffers.
/// Built only from an `Iov`, whose contract makes the reads sound.
/// Rendezvous sends keep it until the send completes, which is exactly as
/// long as libfabric lets us rely on the buffers.
pub(crate) struct IovSource {
    /// Bytes of our own the source reads before `iov` (a one-sided
    /// request's header, a reply's values), kept here so they live as
    /// long as the send.
    head: Option<Box<[u8]>>,
    iov: Iov,
    len: usize,
}

impl IovSource {
    pub(crate) fn new(iov: Iov) -> Self {
        let len = iov.total_len();
        IovSource { head: None, iov, len }
    }

    /// `new` of buffers whose total length (`iov.total_len()`) the caller
    /// has counted already.
    pub(crate) fn sized(iov: Iov, len: usize) -> Self {
        debug_assert_eq!(len, iov.total_len());
        IovSource { head: None, iov, len }
    }

    /// `head`, then `iov`: a message whose first bytes are ours (a
    /// one-sided operation's header) and the rest the application's.
    pub(crate) fn with_head(head: Box<[u8]>, iov: Iov) -> Self {
        let len = head.len() + iov.total_len();
        IovSource {
            head: Some(head),
            iov,
            len,
        }
    }

    /// The head's bytes (none without one).
    fn head(&self) -> &[u8] {
        self.head.as_deref().unwrap_or_default()
    }

    /// The part of a read from `offset` into `dst` that the head holds,
    /// copied; what is left of `dst`, and where in the iov it reads from.
    fn read_head<'d>(&self, offset: usize, dst: &'d mut [u8]) -> (usize, &'d mut [u8]) {
        let head = self.head();
        if offset >= head.len() {
            return (offset - head.len(), dst);
        }
        let k = (head.len() - offset).min(dst.len());
        dst[..k].copy_from_slice(&head[offset..offset + k]);
        (0, &mut dst[k..])
    }
}

/// A send's buffers read where they are, without taking them: the source
/// of a send that ends within the call (`Wires::send_now`), which then
/// needs no `IovSource` of its own.
pub(crate) struct IovView<'a> {
    iov: &'a Iov,
    len: usize,
}

impl<'a> IovView<'a> {
    /// `len`: `iov.total_len()`, counted by the caller.
    pub(crate) fn new(iov: &'a Iov, len: usize) -> Self {
        debug_assert_eq!(len, iov.total_len());
        IovView { iov, len }
    }
}

impl SendSource for IovView<'_> {
    fn len(&self) -> usize {
        self.len
    }
    fn read_at(&self, offset: usize, dst: &mut [u8]) {
        self.iov.read_at(offset, dst)
    }
    fn stream_at(&self, offset: usize, dst: &mut [u8]) {
        self.iov.stream_at(offset, dst)
    }
}

impl SendSource for IovSource {
    fn len(&self) -> usize {
        self.len
    }
    fn read_at(&self, offset: usize, dst: &mut [u8]) {
        let (offset, dst) = self.read_head(offset, dst);
        self.iov.read_at(offset, dst)
    }
    fn stream_at(&self, offset: usize, dst: &mut [u8]) {
        // The head (a few bytes a protocol put in front) plainly; the
        // application's bytes streamed, and the whole fenced.
        let (offset, dst) = self.read_head(offset, dst);
        self.iov.stream_at(offset, dst)
    }
    fn ranges(&self) -> Option<MemRanges> {
        // The head is a heap allocation of this source, never written
        // after it was made and freed only with the source, which lives as
        // long as the send: a peer may read it where it is as well.
        let mut ranges = self.iov.mem_ranges();
        if let Some(h) = &self.head {
            ranges.insert(0, (h.as_ptr() as u64, h.len() as u64));
        }
        Some(ranges)
    }
    fn contiguous(&self, mut offset: usize, len: usize) -> Option<&[u8]> {
        let head = self.head();
        if offset < head.len() {
            return head.get(offset..offset.checked_add(len)?);
        }
        offset -= head.len();
        for (base, l) in self.iov.iter() {
            if offset < l {
                if l - offset < len {
                    return None;
                }
                // SAFETY: as for read_at: [base, base+l) is a range of the
                // Iov, readable and not written while the send is in flight
                // (Iov::from_raw), which outlives this borrow of the source;
                // offset+len <= l.
                return Some(unsafe { std::slice::from_raw_parts((base + offset) as *const u8, len) });
            }
            offset -= l;
        }
        None
    }
}

/// Writes a receive's payload straight into the application's buffers.
/// Built only from an `Iov`, whose contract makes the writes sound.
pub(crate) struct IovSink {
    iov: Iov,
    cap: usize,
}

impl IovSink {
    pub(crate) fn new(iov: Iov) -> Self {
        let cap = iov.total_len();
        IovSink { iov, cap }
    }

    /// `new` of buffers whose total length (`iov.total_len()`) the caller
    /// has counted already.
    pub(crate) fn sized(iov: Iov, cap: usize) -> Self {
        debug_assert_eq!(cap, iov.total_len());
        IovSink { iov, cap }
    }

    /// Copies the first `n` bytes of a mailbox slot's payload straight
    /// into the buffers (the slot is never borrowed: another process
    /// can write it).
    #[inline(always)]
    pub(crate) fn write_shared(&mut self, data: &SharedBytes<'_>, n: usize) {
        // One buffer, nearly every receive: one copy, no walk of the ranges.
        if let Some((base, l)) = self.iov.single() {
            let k = n.min(l);
            // A zero-length buffer may be NULL: no slice of it, nothing to copy.
            if k > 0 {
                // SAFETY: [base, base+k) lies in the sink's one range, of
                // at least k > 0 bytes, which its maker vouched is writable
                // (so not NULL) and used by nothing else while this receive
                // is in flight (Iov::from_raw); the sink owns the Iov and
                // this borrow ends with the copy.
                data.copy_to(0, unsafe { std::slice::from_raw_parts_mut(base as *mut u8, k) });
            }
            return;
        }
        self.write_shared_walk(data, n);
    }

    /// `write_shared` into several buffers: out of the line of the
    /// one-buffer receives.
    #[inline(never)]
    fn write_shared_walk(&mut self, data: &SharedBytes<'_>, n: usize) {
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
    fn write_at(&mut self, offset: usize, mut src: &[u8]) {
        for (at, n) in self.iov.pieces(offset, src.len()) {
            // SAFETY: [at, at+n) lies in a range of the sink's Iov
            // (`pieces`), which its maker vouched is writable and used by
            // nothing else while this receive is in flight
            // (Iov::from_raw); the sink owns the Iov (no other sink has
            // these bytes) and lives no longer than the receive;
            // n <= src.len(), and `src` is not in the range (Rust holds a
            // reference to it).
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), at as *mut u8, n) };
            src = &src[n..];
        }
    }
    fn region(&mut self, mut offset: usize, len: usize) -> Option<&mut [u8]> {
        for (base, l) in self.iov.iter() {
            if offset < l {
                // SAFETY: [base, base+l) is a range of the sink's Iov,
                // writable and used by nothing else while the receive is in
                // flight (Iov::from_raw), which outlives this borrow of the
                // sink (the wire holds the sink until then); the sink owns
                // the Iov, so no other sink reaches these bytes, and the
                // &mut self borrow keeps us from handing out another slice;
                // offset + the returned length <= l.
                return Some(unsafe {
                    std::slice::from_raw_parts_mut((base + offset) as *mut u8, len.min(l - offset))
                });
            }
            offset -= l;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranges(iov: &Iov) -> Vec<(usize, usize)> {
        iov.iter().collect()
    }

    #[test]
    fn take_front_splits_into_disjoint_parts_that_name_their_place() {
        // Addresses only: nothing here reads or writes through them.
        // SAFETY: the Iov is never turned into a source or a sink.
        let mut iov = unsafe { Iov::from_raw([(1000, 10), (2000, 5)]) };
        let a = iov.take_front(4);
        assert_eq!(ranges(&a), [(1000, 4)]);
        assert_eq!(ranges(&iov), [(1004, 6), (2000, 5)]);
        let b = iov.take_front(0);
        assert_eq!(ranges(&b), [(1004, 0)], "an empty part still names its place");
        let c = iov.take_front(8);
        assert_eq!(ranges(&c), [(1004, 6), (2000, 2)]);
        assert_eq!((ranges(&iov), iov.total_len()), (vec![(2002, 3)], 3));
        let d = iov.take_front(3);
        assert_eq!(ranges(&d), [(2002, 3)]);
        assert_eq!(ranges(&iov), [(2005, 0)], "the rest starts where the part ends");
        assert_eq!(iov.total_len(), 0);
        assert_eq!(ranges(&iov.take_front(1)), [(2005, 0)]);
        // SAFETY: as above.
        let mut iov = unsafe { Iov::from_raw_parts(3000, 4) };
        assert_eq!(ranges(&iov.take_front(9)), [(3000, 4)], "no more than there is");
        assert_eq!(ranges(&iov.take_front(9)), [(3004, 0)]);
        assert_eq!(ranges(&Iov::empty().take_front(3)), []);
    }

    #[test]
    fn pieces_name_the_bytes_asked_for_and_stop_where_the_buffers_end() {
        // Addresses only: nothing here reads or writes through them.
        // SAFETY: the Iov is never turned into a source or a sink.
        let iov = unsafe { Iov::from_raw([(100, 3), (200, 0), (300, 4)]) };
        let p = |off, n| iov.pieces(off, n).collect::<Vec<_>>();
        assert_eq!(p(0, 7), [(100, 3), (300, 4)]);
        assert_eq!(p(1, 4), [(101, 2), (300, 2)]);
        assert_eq!(p(3, 2), [(300, 2)]);
        assert_eq!(p(5, 10), [(302, 2)], "no further than the buffers");
        assert_eq!(p(2, 0), []);
        assert_eq!(p(7, 1), []);
    }

    #[test]
    fn a_sink_writes_and_a_source_reads_across_ranges() {
        let mut a = [0u8; 3];
        let mut b = [0u8; 4];
        // SAFETY: `a` and `b` outlive the sink and are not touched until
        // it is dropped.
        let iov = unsafe { Iov::from_raw([(a.as_mut_ptr() as usize, a.len()), (b.as_mut_ptr() as usize, b.len())]) };
        let mut sink = IovSink::new(iov);
        assert_eq!(sink.capacity(), 7);
        sink.write_at(1, &[1, 2, 3, 4, 5]);
        assert_eq!(sink.region(2, 10).map(|r| r.len()), Some(1));
        drop(sink);
        assert_eq!((a, b), ([0, 1, 2], [3, 4, 5, 0]));
        // SAFETY: as above, and the source only reads.
        let iov = unsafe { Iov::from_raw([(a.as_ptr() as usize, a.len()), (b.as_ptr() as usize, b.len())]) };
        let src = IovSource::new(iov);
        let mut out = [9u8; 4];
        src.read_at(2, &mut out);
        assert_eq!(out, [2, 3, 4, 5]);
        assert_eq!(src.contiguous(3, 2), Some(&[3u8, 4][..]));
        assert_eq!(src.contiguous(2, 2), None, "spans two ranges");
    }

    #[test]
    fn a_streamed_read_is_the_read() {
        // Two ranges long enough to stream (`nic::stream`) and a short
        // one, behind a head of the source's own: every offset and
        // length reads the same bytes both ways, and writes no further.
        let a: Vec<u8> = (0..700).map(|i| i as u8).collect();
        let b: Vec<u8> = (0..5).map(|i| 200 + i as u8).collect();
        let c: Vec<u8> = (0..1000).map(|i| (i * 3) as u8).collect();
        // SAFETY: `a`, `b` and `c` outlive the source, which only reads.
        let iov = unsafe {
            Iov::from_raw([
                (a.as_ptr() as usize, a.len()),
                (b.as_ptr() as usize, b.len()),
                (c.as_ptr() as usize, c.len()),
            ])
        };
        let src = IovSource::with_head(Box::new([7, 8, 9]), iov);
        for (off, n) in [(0, 1708), (1, 1707), (3, 1705), (2, 800), (700, 400), (1707, 1)] {
            let (mut read, mut streamed) = (vec![0xAAu8; n + 8], vec![0xAAu8; n + 8]);
            src.read_at(off, &mut read[..n]);
            src.stream_at(off, &mut streamed[..n]);
            assert_eq!(read, streamed, "{off}+{n}");
        }
    }

    #[test]
    fn a_slot_payload_lands_in_one_buffer_or_across_several_and_no_further() {
        let slot = [1u8, 2, 3, 4, 5, 6];
        let bytes = SharedBytes::of_slice(&slot);
        let mut one = [0u8; 4];
        // SAFETY: `one` outlives the sink and is not touched until it is
        // dropped.
        let mut sink = IovSink::new(unsafe { Iov::from_raw_parts(one.as_mut_ptr() as usize, one.len()) });
        sink.write_shared(&bytes, 6);
        drop(sink);
        assert_eq!(one, [1, 2, 3, 4], "truncated at the buffer's end");
        // SAFETY: a zero-length range: nothing is read or written there.
        let mut sink = IovSink::new(unsafe { Iov::from_raw_parts(0, 0) });
        sink.write_shared(&bytes, 6);
        let (mut a, mut b) = ([0u8; 2], [0u8; 3]);
        // SAFETY: as above.
        let iov = unsafe { Iov::from_raw([(a.as_mut_ptr() as usize, a.len()), (b.as_mut_ptr() as usize, b.len())]) };
        let mut sink = IovSink::new(iov);
        sink.write_shared(&bytes, 4);
        drop(sink);
        assert_eq!((a, b), ([1, 2], [3, 4, 0]), "the first n bytes, across the ranges");
    }
}
