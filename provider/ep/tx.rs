//! The transmit path: a send is checked against the endpoint's attributes
//! and the libfabric rules, becomes a `FabReq` (or `-FI_EAGAIN` when the
//! transmit budget is used up), goes to the wire that reaches its peer,
//! and completes when the wire says so (or at once, when the data is
//! already out of the sender's hands).
#![forbid(unsafe_code)]

use super::lanes::Lane;
use super::rx::{Handler, Req, SendReq};
use super::{Bindings, Ep};
use crate::ffi::*;
use crate::nic::fabreq::{Dir, FabReqs};
use crate::nic::iov::{Iov, IovSource, IovView};
use crate::nic::wire::{OpId, SendFlags, SendOp, Sent, Wires};
use crate::progress::now_ns;
use crate::proto::MsgHdr;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;

/// One send call after argument conversion.
pub(super) struct SendArgs {
    pub(super) iov: Iov,
    pub(super) dest: u64,
    pub(super) tag: u64,
    pub(super) data: Option<u64>,
    pub(super) ctx: usize,
    pub(super) flags: u64,
    pub(super) tagged: bool,
    /// fi_inject and kin: no completion entry, ever. (The FI_INJECT flag
    /// of fi_sendmsg or of the op flags only lets the buffer go at once;
    /// its completion is written as for any send.)
    pub(super) silent: bool,
}

/// The flags a send may carry and still take `send_small`: none that asks
/// more of its completion than a message in the peer's ring gives.
const SMALL_FLAGS: u64 = FI_COMPLETION | FI_INJECT | FI_INJECT_COMPLETE | FI_TRANSMIT_COMPLETE | FI_REMOTE_CQ_DATA;
/// The longest message `send_small` tries: the inject size. Whether it
/// fits the peer's slots (or ring, or credit) is `Exec::send_to`'s to
/// say; what it refuses goes `send`'s way. Up to 64 bytes (what any slot
/// holds) only, the medium sizes took `send`'s longer way, some 120
/// instructions more a message (`fi_tinject` of 512 bytes 654 -> 532).
const SMALL_MAX: usize = crate::getinfo::MAX_INJECT;

const SEND_FLAGS: u64 = FI_COMPLETION
    | FI_INJECT
    | FI_INJECT_COMPLETE
    | FI_TRANSMIT_COMPLETE
    | FI_DELIVERY_COMPLETE
    | FI_REMOTE_CQ_DATA
    | FI_MORE;

impl Ep {
    /// FI_SEND / FI_RECV: an endpoint that names neither does both.
    pub(super) fn sends(&self) -> bool {
        self.caps & FI_SEND != 0 || self.caps & (FI_SEND | FI_RECV) == 0
    }
    pub(super) fn receives(&self) -> bool {
        self.caps & FI_RECV != 0 || self.caps & (FI_SEND | FI_RECV) == 0
    }

    /// The capability a send (or receive), tagged or not, needs that the
    /// endpoint was opened without.
    pub(super) fn missing_cap(&self, tagged: bool, send: bool) -> Option<&'static str> {
        if send && !self.sends() {
            Some("FI_SEND")
        } else if !send && !self.receives() {
            Some("FI_RECV")
        } else if tagged && self.caps & FI_TAGGED == 0 {
            Some("FI_TAGGED")
        } else if !tagged && self.caps & FI_MSG == 0 {
            Some("FI_MSG")
        } else {
            None
        }
    }

    pub(super) fn check_enabled(&self) -> Result<&Bindings, isize> {
        self.enabled_binds().ok_or_else(|| {
            crate::warn!(FI_LOG_EP_DATA, "data transfer on an endpoint that is not enabled");
            -FI_EOPBADSTATE as isize
        })
    }

    /// `check_enabled`'s test, without the warning (the short ways of a
    /// send and a receive leave an endpoint that fails it to the long
    /// ones, which say what is wrong).
    #[inline(always)]
    pub(super) fn enabled_binds(&self) -> Option<&Bindings> {
        if self.enabled.load(Ordering::Acquire) {
            self.binds.get()
        } else {
            None
        }
    }

    pub(super) fn send(&self, a: SendArgs) -> isize {
        self.touch();
        let b = match self.check_enabled() {
            Ok(b) => b,
            Err(e) => return e,
        };
        let len = a.iov.total_len();
        if let Err(e) = self.check_send(&a, len) {
            return e;
        }
        let req = send_req(a.ctx, a.flags, a.tagged, len, a.silent);
        let hdr = msg_hdr(a.tagged, a.tag, a.data, len);
        let flags = send_flags(a.flags);
        let mut st = self.lock();
        let (port, mut h, dests) = st.split_send(self);
        // Borrowed from the cache down to the ring: not copied (see
        // `Exec::route_ref`).
        let Some(peer) = self.dest_addr(b, dests, a.dest) else {
            drop(st);
            crate::warn!(FI_LOG_EP_DATA, "send: fi_addr {:#x} is not in the AV", a.dest);
            return -FI_EINVAL as isize;
        };
        // Most small sends end here, in a local peer's ring: no FabReq,
        // and no clock to read.
        if h.send_now(port, self.tx_size, peer, &hdr, flags, &req, &IovView::new(&a.iov, len)) {
            return 0;
        }
        let peer = *peer;
        self.send_queued(&mut st, peer, hdr, flags, req, a.iov, len)
    }

    /// A small send into a local peer's ring, the message-rate and
    /// latency tests' every send, by a shorter way than `send`'s: no
    /// `SendArgs`, the destination's ring found in the lane table
    /// (`lanes.rs`) rather than by socket address, no trait object on the
    /// way. `None`: not such a send (or it would not go at once), and
    /// nothing was done: `send` takes it, and says what is wrong with it.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn send_small(
        &self,
        iov: &Iov,
        dest: u64,
        tag: u64,
        data: Option<u64>,
        ctx: usize,
        flags: u64,
        tagged: bool,
        silent: bool,
    ) -> Option<isize> {
        let (_, len) = iov.single()?;
        if flags & !SMALL_FLAGS != 0 || len > SMALL_MAX || !self.send_ok(iov, len, flags, tagged) {
            return None;
        }
        let b = self.enabled_binds()?;
        let av = b.av.as_ref()?;
        self.touch();
        let mut guard = self.lock();
        let st = &mut *guard;
        if tx_used(&st.reqs, &st.port) >= self.tx_size {
            return None;
        }
        let hdr = msg_hdr(tagged, tag, data, len);
        let src = IovView::new(iov, len);
        let sf = send_flags(flags);
        match st
            .lanes
            .lookup(av.generation(), |d| av.lookup(d), st.port.shm.as_mut(), dest)
        {
            Lane::Shm(ix) => {
                if !st.port.shm.as_mut()?.send_to(ix, &hdr, sf, &src) {
                    return None;
                }
            }
            // An inject (or inject-complete) send to a remote peer: on the
            // wire in this call, and complete with it, as `UdpWire::send`
            // completes it (`UdpWire::inject_now`).
            Lane::Udp(&peer) if !sf.delivery && (sf.inject || sf.inject_complete) => {
                if !st.port.udp.inject_now(peer, &hdr, &src) {
                    return None;
                }
            }
            Lane::Udp(_) | Lane::General => return None,
        }
        // Completed in the application's call, not in a pass.
        self.tx_complete_at(&send_req(ctx, flags, tagged, len, silent), None, super::Within::Call);
        Some(0)
    }

    /// A send that does not go at once: a FabReq, the wire's queue or a
    /// rendezvous. Out of line, so that the path of most small sends
    /// stays short.
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn send_queued(
        &self,
        st: &mut super::EpState,
        peer: SocketAddr,
        hdr: MsgHdr,
        flags: SendFlags,
        req: SendReq,
        iov: Iov,
        len: usize,
    ) -> isize {
        let (port, mut h) = st.split(self);
        // The wire reads the payload where it is (an inject's only during
        // this call).
        let src = IovSource::sized(iov, len);
        let now = now_ns();
        match h.send(port, self.tx_size, peer, hdr, flags, req, src, now) {
            Ok(r) => r,
            Err(Busy) => {
                // Progress once; the application tries again.
                self.progress_locked(st, now);
                -FI_EAGAIN as isize
            }
        }
    }

    /// What libfabric asks of a send's arguments (`len`: its bytes), as
    /// one test on the data path; which rule was broken is worked out,
    /// and warned about, out of its line.
    #[inline(always)]
    fn check_send(&self, a: &SendArgs, len: usize) -> Result<(), isize> {
        if self.send_ok(&a.iov, len, a.flags, a.tagged) {
            Ok(())
        } else {
            Err(self.send_refused(a, len))
        }
    }

    /// `check_send`'s test, without the warning (`send_small` leaves what
    /// fails it to `send`, which says what is wrong).
    #[inline(always)]
    fn send_ok(&self, iov: &Iov, len: usize, flags: u64, tagged: bool) -> bool {
        flags & !SEND_FLAGS == 0
            && self.missing_cap(tagged, true).is_none()
            && check_iov_ok(iov, self.tx_iov_limit)
            && len <= self.max_msg_size
            && (flags & FI_INJECT == 0 || len <= self.inject_size)
    }

    #[cold]
    fn send_refused(&self, a: &SendArgs, len: usize) -> isize {
        if a.flags & !SEND_FLAGS != 0 {
            crate::warn!(FI_LOG_EP_DATA, "send: unsupported flags {:#x}", a.flags & !SEND_FLAGS);
            return -FI_EBADFLAGS as isize;
        }
        if let Some(cap) = self.missing_cap(a.tagged, true) {
            crate::warn!(FI_LOG_EP_DATA, "send: endpoint was opened without {}", cap);
            return -FI_EOPNOTSUPP as isize;
        }
        if let Err(e) = check_iov(&a.iov, self.tx_iov_limit, "send") {
            return e;
        }
        if len > self.max_msg_size {
            crate::warn!(FI_LOG_EP_DATA, "send: {} bytes > max_msg_size", len);
            return -FI_EMSGSIZE as isize;
        }
        crate::warn!(
            FI_LOG_EP_DATA,
            "inject: {} bytes > inject_size {}",
            len,
            self.inject_size
        );
        -FI_EMSGSIZE as isize
    }

    /// `fi_tx_size_left`.
    pub(super) fn tx_left(&self) -> usize {
        let mut st = self.lock();
        let (port, h) = st.split(self);
        self.tx_size.saturating_sub(h.tx_used(port))
    }
}

/// The header of a send of `len` bytes (`tagged` with `tag`, `data` as
/// its remote CQ data).
#[inline(always)]
fn msg_hdr(tagged: bool, tag: u64, data: Option<u64>, len: usize) -> MsgHdr {
    MsgHdr {
        tag: if tagged { tag } else { 0 },
        data: data.unwrap_or(0),
        len: len as u64,
        flags: if tagged { MsgHdr::TAGGED } else { 0 } | if data.is_some() { MsgHdr::HAS_DATA } else { 0 },
    }
}

/// What a send's op `flags` ask of the wire. FI_DELIVERY_COMPLETE (MPICH
/// and Open MPI's btl ofi set it in their tx op flags) keeps the protocol:
/// an eager message completes once the receiver took it in.
#[inline(always)]
fn send_flags(flags: u64) -> SendFlags {
    SendFlags {
        inject: flags & FI_INJECT != 0,
        inject_complete: flags & FI_INJECT_COMPLETE != 0,
        delivery: flags & FI_DELIVERY_COMPLETE != 0,
        more: flags & FI_MORE != 0,
    }
}

/// What a send's completion reports.
#[inline(always)]
fn send_req(ctx: usize, flags: u64, tagged: bool, len: usize, silent: bool) -> SendReq {
    SendReq {
        ctx,
        flags: FI_SEND | if tagged { FI_TAGGED } else { FI_MSG } | (flags & FI_COMPLETION),
        len,
        silent,
    }
}

/// Transmit slots in use (`Handler::tx_used`).
#[inline(always)]
fn tx_used(reqs: &FabReqs<Req>, wires: &dyn Wires) -> usize {
    reqs.len(Dir::Tx) + wires.backlog()
}

/// The buffers of a send or receive (`what`): at most `limit` pieces, none
/// of them a NULL address with a length.
#[inline(always)]
pub(super) fn check_iov(iov: &Iov, limit: usize, what: &str) -> Result<(), isize> {
    if check_iov_ok(iov, limit) {
        return Ok(());
    }
    bad_iov(iov, limit, what)
}

/// `check_iov`'s test, without the warning.
#[inline(always)]
pub(super) fn check_iov_ok(iov: &Iov, limit: usize) -> bool {
    match iov.single() {
        // One buffer, the usual case, without the iterator.
        Some((p, l)) => limit >= 1 && (p != 0 || l == 0),
        None => iov.count() <= limit && iov.iter().all(|(p, l)| p != 0 || l == 0),
    }
}

#[cold]
fn bad_iov(iov: &Iov, limit: usize, what: &str) -> Result<(), isize> {
    if iov.count() > limit {
        crate::warn!(FI_LOG_EP_DATA, "{}: {} iovs > iov_limit {}", what, iov.count(), limit);
        return Err(-FI_EINVAL as isize);
    }
    if iov.iter().any(|(p, l)| p == 0 && l != 0) {
        crate::warn!(FI_LOG_EP_DATA, "{}: NULL buffer with non-zero length", what);
        return Err(-FI_EINVAL as isize);
    }
    Ok(())
}

/// The transmit budget (tx_size) is used up.
pub(super) struct Busy;

impl<F: super::Face> Handler<'_, F> {
    /// Transmit slots in use: sends in flight, and what the wires hold
    /// that is no operation's (inject-complete sends not yet
    /// acknowledged, shm control frames waiting for ring space). A
    /// receiver that stops reading cannot make us buffer without bound.
    pub(super) fn tx_used(&self, wires: &dyn Wires) -> usize {
        tx_used(self.reqs, wires)
    }

    /// A validated send that a wire finishes in this call
    /// (`Wires::send_now`): it takes no FabReq; its completion is written
    /// now. False: nothing was sent (or the transmit budget is used up);
    /// `send` takes it.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn send_now(
        &mut self,
        wires: &mut dyn Wires,
        tx_size: usize,
        peer: &SocketAddr,
        hdr: &MsgHdr,
        flags: SendFlags,
        req: &SendReq,
        src: &IovView<'_>,
    ) -> bool {
        if self.tx_used(wires) >= tx_size || !wires.send_now(peer, hdr, flags, src) {
            return false;
        }
        self.face.tx_complete(req, None);
        true
    }

    /// A validated send: a FabReq, then the wire that reaches `peer`. The
    /// transmit budget (`tx_size`) is the one limit.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn send(
        &mut self,
        wires: &mut dyn Wires,
        tx_size: usize,
        peer: SocketAddr,
        hdr: MsgHdr,
        flags: SendFlags,
        req: SendReq,
        src: IovSource,
        now: u64,
    ) -> Result<isize, Busy> {
        if self.tx_used(wires) >= tx_size {
            return Err(Busy);
        }
        // The FabReq's record is written only for a send that goes on: a
        // small send is usually done before `send` returns (and a wire
        // reports nothing about a send during `send` itself).
        let op = self.reqs.reserve(Dir::Tx).map_err(|_| Busy)?;
        match wires.send(SendOp { peer, op, hdr, flags }, src, self, now) {
            Ok(Sent::Pending) => {
                self.reqs.fill(op, Dir::Tx, Req::Send(req));
                Ok(0)
            }
            Ok(Sent::Done) => {
                self.reqs.unreserve(op, Dir::Tx);
                self.face.tx_complete(&req, None);
                Ok(0)
            }
            Err(e) => {
                self.reqs.unreserve(op, Dir::Tx);
                Ok(e as isize)
            }
        }
    }

    /// Send `op` ended: its FabReq goes, its completion is written.
    pub(super) fn send_finished(&mut self, op: OpId, err: Option<i32>) {
        match self.reqs.get(op) {
            Some(Req::Send(_)) => {
                if let Some(Req::Send(r)) = self.reqs.remove(op) {
                    self.face.tx_complete(&r, err);
                }
            }
            Some(Req::Part(_)) => self.part_sent(op, err),
            Some(Req::CollSend(_)) => self.coll_sent(op, err),
            _ => {}
        }
    }
}
