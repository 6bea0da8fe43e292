//! A collective group (`fid_mc`), what `fi_join_collective` makes: the
//! endpoint's membership in an AV set's group. Its address (`fi_mc_addr`,
//! the `coll_addr` of every collective call) is the fid's own pointer,
//! which the endpoint looks up in its table of groups (`ep/coll.rs`) and
//! never follows; closing the fid takes the group out of that table.

use crate::ep::Ep;
use crate::ffi::*;
use crate::fid::{base_ops, fid_header, FidObj, Table};
use std::ffi::c_void;
use std::sync::{Arc, Weak};

pub struct Mc {
    ep: Weak<Ep>,
}

type Obj = FidObj<fid_mc, Mc>;

/// A new group fid of endpoint `ep`; its `fi_addr` is its own address.
pub(crate) fn create(ep: Weak<Ep>, ctx: *mut c_void) -> *mut fid_mc {
    let c = fid_mc {
        fid: fid_header(FI_CLASS_MC, ctx, MC_FI_OPS.ptr()),
        fi_addr: 0,
    };
    let p = Obj::create(c, Arc::new(Mc { ep }));
    // SAFETY: `p` was just made by `create` and is not shared yet.
    unsafe { (*p).fi_addr = p as fi_addr_t };
    p
}

unsafe extern "C" fn close(f: *mut fid) -> i32 {
    abi_guard!("close", -FI_EOTHER, || {
        // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
        let Some(mc) = (unsafe { Obj::get(f as *const c_void, FI_CLASS_MC) }) else {
            return -FI_EINVAL;
        };
        if let Some(ep) = mc.ep.upgrade() {
            ep.coll_leave(f as fi_addr_t);
        }
        // SAFETY: `get` found a live group fid; the application gives it up.
        unsafe { Obj::destroy(f as *mut c_void) };
        0
    })
}

static MC_FI_OPS: Table<fi_ops> = Table(base_ops(close, None, None, None));
