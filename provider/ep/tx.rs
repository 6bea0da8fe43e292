//! The transmit path: a send is checked against the endpoint's attributes
//! and the libfabric rules, becomes a `FabReq` (or `-FI_EAGAIN` when the
//! transmit budget is used up), goes to the wire that reaches its peer,
//! and completes when the wire says so (or at once, when the data is
//! already out of the sender's hands).

use super::rx::{Req, SendReq};
use super::{Bindings, Ep, EpState};
use crate::cq::{CqEntry, CqError};
use crate::ffi::*;
use crate::nic::fabreq::{Dir, FabReqs};
use crate::nic::iov::{iov_len, Iov, IovSource};
use crate::nic::wire::{OpId, SendFlags, SendOp, Sent, Wire};
use crate::progress::now_ns;
use crate::proto::MsgHdr;
use std::ffi::c_void;
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

const SEND_FLAGS: u64 = FI_COMPLETION
    | FI_INJECT
    | FI_INJECT_COMPLETE
    | FI_TRANSMIT_COMPLETE
    | FI_DELIVERY_COMPLETE
    | FI_REMOTE_CQ_DATA
    | FI_MORE;

impl EpState {
    /// Transmit slots in use: sends in flight, and what the wires hold
    /// that is no operation's (inject-complete sends not yet
    /// acknowledged, shm control frames waiting for ring space). A
    /// receiver that stops reading cannot make us buffer without bound.
    fn tx_used(&self) -> usize {
        self.reqs.len(Dir::Tx) + self.udp.backlog() + self.shm.as_ref().map_or(0, |s| s.backlog())
    }
}

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
        match self.binds.get() {
            Some(b) if self.enabled.load(Ordering::Acquire) => Ok(b),
            _ => {
                crate::warn!(FI_LOG_EP_DATA, "data transfer on an endpoint that is not enabled");
                Err(-FI_EOPBADSTATE as isize)
            }
        }
    }

    pub(super) fn send(&self, a: SendArgs) -> isize {
        let now = now_ns();
        self.touch(now);
        let b = match self.check_enabled() {
            Ok(b) => b,
            Err(e) => return e,
        };
        if a.flags & !SEND_FLAGS != 0 {
            crate::warn!(FI_LOG_EP_DATA, "send: unsupported flags {:#x}", a.flags & !SEND_FLAGS);
            return -FI_EBADFLAGS as isize;
        }
        if let Some(cap) = self.missing_cap(a.tagged, true) {
            crate::warn!(FI_LOG_EP_DATA, "send: endpoint was opened without {}", cap);
            return -FI_EOPNOTSUPP as isize;
        }
        if a.iov.len() > self.tx_iov_limit {
            crate::warn!(
                FI_LOG_EP_DATA,
                "send: {} iovs > iov_limit {}",
                a.iov.len(),
                self.tx_iov_limit
            );
            return -FI_EINVAL as isize;
        }
        if a.iov.iter().any(|&(p, l)| p == 0 && l != 0) {
            crate::warn!(FI_LOG_EP_DATA, "send: NULL buffer with non-zero length");
            return -FI_EINVAL as isize;
        }
        let len = iov_len(&a.iov);
        if len > self.max_msg_size {
            crate::warn!(FI_LOG_EP_DATA, "send: {} bytes > max_msg_size", len);
            return -FI_EMSGSIZE as isize;
        }
        let inject = a.flags & FI_INJECT != 0;
        if inject && len > self.inject_size {
            crate::warn!(
                FI_LOG_EP_DATA,
                "inject: {} bytes > inject_size {}",
                len,
                self.inject_size
            );
            return -FI_EMSGSIZE as isize;
        }
        let Some(peer) = b.av.as_ref().and_then(|av| av.lookup(a.dest)) else {
            crate::warn!(FI_LOG_EP_DATA, "send: fi_addr {:#x} is not in the AV", a.dest);
            return -FI_EINVAL as isize;
        };
        let mut st = self.lock();
        // The transmit budget (tx_size) is the one limit: progress once,
        // then the application tries again.
        if st.tx_used() >= self.tx_size {
            self.progress_locked(&mut st, now);
            if st.tx_used() >= self.tx_size {
                return -FI_EAGAIN as isize;
            }
        }
        let mut hflags = if a.tagged { MsgHdr::TAGGED } else { 0 };
        if a.data.is_some() {
            hflags |= MsgHdr::HAS_DATA;
        }
        let hdr = MsgHdr {
            tag: if a.tagged { a.tag } else { 0 },
            data: a.data.unwrap_or(0),
            len: len as u64,
            flags: hflags,
        };
        let op_kind = if a.tagged { FI_TAGGED } else { FI_MSG };
        let req = SendReq {
            ctx: a.ctx,
            flags: FI_SEND | op_kind | (a.flags & FI_COMPLETION),
            len,
            silent: a.silent,
        };
        let Ok(op) = st.reqs.insert(Dir::Tx, Req::Send(req)) else {
            return -FI_EAGAIN as isize;
        };
        // FI_DELIVERY_COMPLETE (MPICH and Open MPI's btl ofi set it in
        // their tx op flags) keeps the protocol: an eager message completes
        // once the receiver took it in.
        let flags = SendFlags {
            inject,
            inject_complete: a.flags & FI_INJECT_COMPLETE != 0,
            delivery: a.flags & FI_DELIVERY_COMPLETE != 0,
            more: a.flags & FI_MORE != 0,
        };
        // The wire reads the payload where it is (an inject's only during
        // this call).
        let src = IovSource { iov: a.iov, len };
        let (udp, shm, mut h) = st.split(self);
        let wire: &mut dyn Wire = match shm {
            Some(s) => {
                if s.reaches(peer) {
                    s
                } else {
                    udp
                }
            }
            None => udp,
        };
        match wire.send(SendOp { peer, op, hdr, flags }, src, &mut h, now) {
            Ok(Sent::Pending) => 0,
            Ok(Sent::Done) => {
                self.send_finished(h.reqs, op, None);
                0
            }
            Err(e) => {
                h.reqs.remove(op);
                e as isize
            }
        }
    }

    /// Send `op` ended: its FabReq goes, its completion is written.
    pub(super) fn send_finished(&self, reqs: &mut FabReqs<Req>, op: OpId, err: Option<i32>) {
        if let Some(Req::Send(r)) = reqs.remove(op) {
            complete_send(self.binds(), &r, err);
        }
    }

    /// `fi_tx_size_left`.
    pub(super) fn tx_left(&self) -> usize {
        self.tx_size.saturating_sub(self.lock().tx_used())
    }
}

/// A send's completion: its entry (fi_inject: only its counter), or its
/// error entry, which is written whatever the selective flags say.
fn complete_send(b: &Bindings, r: &SendReq, err: Option<i32>) {
    if r.silent {
        if let Some(c) = &b.send_cntr {
            if err.is_none() {
                c.inc();
            } else {
                c.inc_err();
            }
        }
        return;
    }
    let want = !b.tx_selective || r.flags & FI_COMPLETION != 0;
    match err {
        None => {
            if let Some(c) = &b.send_cntr {
                c.inc();
            }
            if want {
                if let Some(cq) = &b.tx_cq {
                    cq.push(CqEntry {
                        op_context: r.ctx as *mut c_void,
                        flags: r.flags & (FI_SEND | FI_MSG | FI_TAGGED),
                        ..CqEntry::default()
                    });
                }
            }
        }
        Some(e) => {
            if let Some(c) = &b.send_cntr {
                c.inc_err();
            }
            // Errors are always reported, selective or not (fi_cq(3)).
            if let Some(cq) = &b.tx_cq {
                let entry = CqEntry {
                    op_context: r.ctx as *mut c_void,
                    flags: r.flags & (FI_SEND | FI_MSG | FI_TAGGED),
                    len: r.len,
                    ..CqEntry::default()
                };
                cq.push_err(CqError::new(entry, e));
            }
        }
    }
}
