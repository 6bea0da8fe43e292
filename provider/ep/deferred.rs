//! Triggered operations of an endpoint (`FI_TRIGGER`): the call's
//! arguments, held by the domain's `Triggers` until the counter reaches
//! the threshold, then posted as if the application made the call then.
//! The completion carries the triggered context, as fi_trigger(3) says.
#![forbid(unsafe_code)]

use super::rma::RmaArgs;
use super::rx::RecvArgs;
use super::tx::SendArgs;
use super::Ep;
use crate::cntr::Cntr;
use crate::ffi::*;
use crate::trigger::Deferred;
use std::sync::Arc;

/// A data call held back.
pub(super) enum Op {
    Send(SendArgs),
    Recv(RecvArgs),
    Rma(RmaArgs),
}

struct Triggered {
    ep: Arc<Ep>,
    op: Op,
}

impl Deferred for Triggered {
    fn ready(&self) -> bool {
        match &self.op {
            Op::Send(_) => self.ep.tx_left() > 0,
            Op::Recv(_) => self.ep.rx_left() > 0,
            // The operation and one part per remote iov.
            Op::Rma(a) => self.ep.tx_left() > a.remote.len(),
        }
    }

    fn fire(self: Box<Self>) {
        let Triggered { ep, op } = *self;
        let (ctx, tx, flags, r) = match op {
            Op::Send(a) => (a.ctx, true, FI_SEND, ep.send(a)),
            Op::Recv(a) => (a.ctx, false, FI_RECV, ep.recv(a)),
            Op::Rma(a) => (a.ctx, true, FI_RMA, ep.rma(a)),
        };
        if r < 0 {
            // Refused now (bad arguments, or room taken since `ready` by
            // another thread): its error completion, never silence.
            crate::warn!(FI_LOG_EP_DATA, "triggered operation failed: {}", r);
            ep.fail_op(ctx, flags, tx, (-r) as i32);
        }
    }
}

/// Holds `op` until `trigger`'s counter reaches its threshold. 0, or the
/// error of a bad trigger.
pub(super) fn defer(ep: &Arc<Ep>, trigger: Result<(Arc<Cntr>, u64), i32>, op: Op) -> isize {
    if ep.caps & FI_TRIGGER == 0 {
        crate::warn!(FI_LOG_EP_DATA, "FI_TRIGGER on an endpoint opened without it");
        return -FI_EOPNOTSUPP as isize;
    }
    let (cntr, threshold) = match trigger {
        Ok(t) => t,
        Err(e) => return e as isize,
    };
    let op = Box::new(Triggered { ep: ep.clone(), op });
    ep.domain.triggers.add(cntr, threshold, op);
    0
}
