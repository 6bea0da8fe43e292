//! The endpoint's control operations (`fi_ops`, `fi_ops_ep`, `fi_ops_cm`):
//! close, bind, enable, control (op flags), cancel, options, the size
//! queries, names. The data path is in `shims.rs`.

use super::{from_fid, new_state, Ep, Obj};
use crate::ffi::*;
use crate::fid::{base_ops, fid_header, Table};
use crate::getinfo::std_to_sockaddr;
use crate::nic::AutoProgress;
use crate::progress::Progress;
use std::ffi::c_void;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

unsafe extern "C" fn close(f: *mut fid) -> i32 {
    abi_guard!("close", -FI_EOTHER, || {
        // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
        let Some(ep) = (unsafe { from_fid(f as *const c_void) }) else {
            return -FI_EINVAL;
        };
        let me: Weak<Ep> = ep.me.clone();
        let prog: Weak<dyn Progress> = me.clone();
        let auto: Weak<dyn AutoProgress> = me;
        ep.domain.nic.remove(&auto);
        if ep.binds.get().is_some() {
            ep.linger();
        }
        if let Some(b) = ep
            .binds
            .get()
            .cloned()
            .or_else(|| Some(ep.pending_binds.lock().unwrap().clone()))
        {
            for cq in [&b.tx_cq, &b.rx_cq].into_iter().flatten() {
                cq.remove_source(&prog);
                cq.refs.put();
            }
            for c in b.cntrs() {
                c.remove_source(&prog);
                c.refs.put();
            }
            if let Some(av) = &b.av {
                av.refs.put();
            }
            if let Some(eq) = &b.eq {
                eq.refs.put();
            }
        }
        // SAFETY: `f` is a live object of this class (checked above), which the application gives up (fi_close(3)).
        unsafe { Obj::destroy(f as *mut c_void) };
        0
    })
}

unsafe extern "C" fn bind(f: *mut fid, bf: *mut fid, flags: u64) -> i32 {
    abi_guard!("bind", -FI_EOTHER, || {
        // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
        let Some(ep) = (unsafe { from_fid(f as *const c_void) }) else {
            return -FI_EINVAL;
        };
        if bf.is_null() {
            return -FI_EINVAL;
        }
        if ep.enabled.load(Ordering::Acquire) {
            crate::warn!(FI_LOG_EP_CTRL, "fi_ep_bind after fi_enable");
            return -FI_EOPBADSTATE;
        }
        let mut b = ep.pending_binds.lock().unwrap();
        // SAFETY: `bf` is a fid the application holds, non-NULL (checked above).
        let class = unsafe { (*bf).fclass } as u32;
        match class {
            FI_CLASS_AV => {
                // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
                let Some(av) = (unsafe { crate::av::from_fid(bf as *const c_void) }) else {
                    return -FI_EINVAL;
                };
                if b.av.is_some() {
                    crate::warn!(FI_LOG_EP_CTRL, "endpoint already has an AV");
                    return -FI_EINVAL;
                }
                if !Arc::ptr_eq(&av.domain.0, &ep.domain.0) {
                    return -FI_EINVAL;
                }
                av.refs.get();
                b.av = Some(av.clone());
            }
            FI_CLASS_CQ => {
                // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
                let Some(cq) = (unsafe { crate::cq::from_fid(bf as *const c_void) }) else {
                    return -FI_EINVAL;
                };
                if flags & !(FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION) != 0
                    || flags & (FI_TRANSMIT | FI_RECV) == 0
                {
                    crate::warn!(FI_LOG_EP_CTRL, "fi_ep_bind(cq): flags {:#x}", flags);
                    return -FI_EBADFLAGS;
                }
                if !cq.of_domain(&ep.domain.0) && (ep.domain.gate.is_some() || cq.gated()) {
                    // A domain's gate (FI_THREAD_DOMAIN) excludes only its
                    // own callers: a CQ shared with another domain would be
                    // written from two threads at once.
                    crate::warn!(
                        FI_LOG_EP_CTRL,
                        "fi_ep_bind(cq): under FI_THREAD_DOMAIN an endpoint's CQ must be of its domain"
                    );
                    return -FI_EINVAL;
                }
                if (flags & FI_TRANSMIT != 0 && b.tx_cq.is_some()) || (flags & FI_RECV != 0 && b.rx_cq.is_some()) {
                    crate::warn!(FI_LOG_EP_CTRL, "fi_ep_bind(cq): already bound");
                    return -FI_EINVAL;
                }
                let sel = flags & FI_SELECTIVE_COMPLETION != 0;
                if flags & FI_TRANSMIT != 0 {
                    cq.refs.get();
                    b.tx_cq = Some(cq.clone());
                    b.tx_selective = sel;
                }
                if flags & FI_RECV != 0 {
                    cq.refs.get();
                    b.rx_cq = Some(cq.clone());
                    b.rx_selective = sel;
                }
            }
            FI_CLASS_CNTR => {
                // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
                let Some(c) = (unsafe { crate::cntr::from_fid(bf as *const c_void) }) else {
                    return -FI_EINVAL;
                };
                let known = FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
                if flags & !known != 0 || flags & known == 0 {
                    return -FI_EBADFLAGS;
                }
                let b: &mut super::Bindings = &mut b;
                let mut slots = [
                    (FI_SEND, &mut b.send_cntr),
                    (FI_RECV, &mut b.recv_cntr),
                    (FI_READ, &mut b.read_cntr),
                    (FI_WRITE, &mut b.write_cntr),
                    (FI_REMOTE_READ, &mut b.rem_read_cntr),
                    (FI_REMOTE_WRITE, &mut b.rem_write_cntr),
                ];
                // One counter per role: nothing is bound if a role has one.
                if slots.iter().any(|(bit, slot)| flags & bit != 0 && slot.is_some()) {
                    crate::warn!(
                        FI_LOG_EP_CTRL,
                        "fi_ep_bind(cntr): a counter is bound for {:#x} already",
                        flags
                    );
                    return -FI_EINVAL;
                }
                for (bit, slot) in slots.iter_mut() {
                    if flags & *bit != 0 {
                        c.refs.get();
                        **slot = Some(c.clone());
                    }
                }
            }
            FI_CLASS_EQ => {
                // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
                let Some(eq) = (unsafe { crate::eq::from_fid(bf as *const c_void) }) else {
                    return -FI_EINVAL;
                };
                if b.eq.is_some() {
                    crate::warn!(FI_LOG_EP_CTRL, "endpoint already has an EQ");
                    return -FI_EINVAL;
                }
                eq.refs.get();
                b.eq = Some(eq);
            }
            c => {
                crate::warn!(FI_LOG_EP_CTRL, "fi_ep_bind: cannot bind class {}", c);
                return -FI_EINVAL;
            }
        }
        0
    })
}

fn enable(ep: &Arc<Ep>) -> i32 {
    if ep.enabled.load(Ordering::Acquire) {
        return 0;
    }
    let b = ep.pending_binds.lock().unwrap().clone();
    if b.av.is_none() {
        crate::warn!(FI_LOG_EP_CTRL, "fi_enable: an RDM endpoint needs an AV");
        return -FI_ENOAV;
    }
    if ep.sends() && b.tx_cq.is_none() && b.send_cntr.is_none()
        || ep.receives() && b.rx_cq.is_none() && b.recv_cntr.is_none()
    {
        crate::warn!(
            FI_LOG_EP_CTRL,
            "fi_enable: bind a CQ (or counter) for each direction the endpoint has (FI_SEND, FI_RECV)"
        );
        return -FI_ENOCQ;
    }
    let me: Weak<Ep> = ep.me.clone();
    let prog: Weak<dyn Progress> = me.clone();
    for cq in [&b.tx_cq, &b.rx_cq].into_iter().flatten() {
        cq.add_source(prog.clone());
    }
    let cntrs: Vec<_> = b.cntrs().collect();
    for (i, c) in cntrs.iter().enumerate() {
        // Once per counter, however many roles it has here.
        if !cntrs[..i].iter().any(|d| Arc::ptr_eq(c, d)) {
            c.add_source(prog.clone());
        }
    }
    let av = b.av.clone();
    let _ = ep.binds.set(b);
    ep.enabled.store(true, Ordering::Release);
    if let Some(av) = av {
        let l: Weak<dyn crate::av::AvListener> = me.clone();
        av.listen(l);
        // Peers inserted before the endpoint was enabled.
        crate::av::AvListener::learned(&**ep, &av.peers());
    }
    let auto: Weak<dyn AutoProgress> = me;
    ep.domain.nic.add(auto);
    0
}

unsafe extern "C" fn control(f: *mut fid, cmd: i32, arg: *mut c_void) -> i32 {
    abi_guard!("control", -FI_EOTHER, || {
        // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
        let Some(ep) = (unsafe { from_fid(f as *const c_void) }) else {
            return -FI_EINVAL;
        };
        match cmd as u32 {
            FI_ENABLE => enable(ep),
            FI_GETOPSFLAG | FI_SETOPSFLAG => {
                // SAFETY: FI_GETOPSFLAG/FI_SETOPSFLAG take a uint64_t * (fi_endpoint(3)).
                let Some(flags) = (unsafe { (arg as *mut u64).as_mut() }) else {
                    return -FI_EINVAL;
                };
                let (mut tx, mut rx) = (ep.tx_flags(), ep.rx_flags());
                let r = opsflag(cmd as u32, flags, &mut tx, &mut rx);
                ep.tx_op_flags.store(tx, Ordering::Relaxed);
                ep.rx_op_flags.store(rx, Ordering::Relaxed);
                r
            }
            FI_ALIAS => {
                // SAFETY: FI_ALIAS takes a struct fi_alias * (fi_endpoint(3)).
                let Some(a) = (unsafe { (arg as *mut fi_alias).as_mut() }) else {
                    return -FI_EINVAL;
                };
                if a.fid.is_null() {
                    return -FI_EINVAL;
                }
                let (mut tx, mut rx) = (ep.tx_flags(), ep.rx_flags());
                let mut fl = a.flags;
                if opsflag(FI_SETOPSFLAG, &mut fl, &mut tx, &mut rx) != 0 {
                    return -FI_EINVAL;
                }
                // SAFETY: `f` is the endpoint's own fid_ep (checked above).
                let mut c = unsafe { std::ptr::read(f as *const fid_ep) };
                c.fid = fid_header(FI_CLASS_EP, std::ptr::null_mut(), ALIAS_FI_OPS.ptr());
                let p = Obj::create(c, ep.clone());
                let mut al = ep.aliases.lock().unwrap_or_else(|e| e.into_inner());
                al.push((p as usize, tx, rx));
                ep.aliased.store(true, Ordering::Release);
                // SAFETY: `a.fid` is the application's result slot (non-NULL).
                unsafe { *a.fid = p as *mut fid };
                0
            }
            _ => -FI_ENOSYS,
        }
    })
}

/// FI_GETOPSFLAG / FI_SETOPSFLAG on a pair of op flags: `*flags` names
/// FI_TRANSMIT or FI_RECV (one of them) and the flags (fi_endpoint(3)).
fn opsflag(cmd: u32, flags: &mut u64, tx: &mut u64, rx: &mut u64) -> i32 {
    let (slot, allowed) = if *flags & FI_TRANSMIT != 0 {
        (tx, crate::getinfo::TX_OP_FLAGS)
    } else if *flags & FI_RECV != 0 {
        (rx, crate::getinfo::RX_OP_FLAGS)
    } else {
        return -FI_EINVAL;
    };
    if cmd == FI_GETOPSFLAG {
        *flags = *slot;
        return 0;
    }
    let v = *flags & !(FI_TRANSMIT | FI_RECV);
    if v & !allowed != 0 {
        return -FI_EINVAL;
    }
    *slot = v;
    0
}

/// An alias (fi_ep_alias): the endpoint under its own op flags. Closing it
/// closes only the alias; it has nothing to bind or enable.
unsafe extern "C" fn alias_close(f: *mut fid) -> i32 {
    abi_guard!("alias_close", -FI_EOTHER, || {
        // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
        let Some(ep) = (unsafe { from_fid(f as *const c_void) }) else {
            return -FI_EINVAL;
        };
        let mut al = ep.aliases.lock().unwrap_or_else(|e| e.into_inner());
        al.retain(|x| x.0 != f as usize);
        ep.aliased.store(!al.is_empty(), Ordering::Release);
        drop(al);
        // SAFETY: `f` is a live alias object (checked above), which the application gives up (fi_close(3)).
        unsafe { Obj::destroy(f as *mut c_void) };
        0
    })
}

unsafe extern "C" fn alias_control(f: *mut fid, cmd: i32, arg: *mut c_void) -> i32 {
    abi_guard!("alias_control", -FI_EOTHER, || {
        // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
        let Some(ep) = (unsafe { from_fid(f as *const c_void) }) else {
            return -FI_EINVAL;
        };
        if !matches!(cmd as u32, FI_GETOPSFLAG | FI_SETOPSFLAG) {
            return -FI_ENOSYS;
        }
        // SAFETY: FI_GETOPSFLAG/FI_SETOPSFLAG take a uint64_t * (fi_endpoint(3)).
        let Some(flags) = (unsafe { (arg as *mut u64).as_mut() }) else {
            return -FI_EINVAL;
        };
        let mut al = ep.aliases.lock().unwrap_or_else(|e| e.into_inner());
        let Some(x) = al.iter_mut().find(|x| x.0 == f as usize) else {
            return -FI_EINVAL;
        };
        let (mut tx, mut rx) = (x.1, x.2);
        let r = opsflag(cmd as u32, flags, &mut tx, &mut rx);
        (x.1, x.2) = (tx, rx);
        r
    })
}

static ALIAS_FI_OPS: Table<fi_ops> = Table(base_ops(alias_close, None, Some(alias_control), None));

// ------------------------------------------------------------------------
// fi_ops_ep, fi_ops_cm

unsafe extern "C" fn cancel(f: fid_t, ctx: *mut c_void) -> isize {
    abi_guard!("cancel", -FI_EOTHER as isize, || {
        // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
        let Some(ep) = (unsafe { from_fid(f as *const c_void) }) else {
            return -FI_EINVAL as isize;
        };
        if ep.binds.get().is_none() {
            return -FI_EOPBADSTATE as isize;
        }
        ep.cancel(ctx as usize)
    })
}

unsafe extern "C" fn getopt(f: fid_t, level: i32, name: i32, val: *mut c_void, len: *mut usize) -> i32 {
    abi_guard!("getopt", -FI_EOTHER, || {
        // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
        let Some(ep) = (unsafe { from_fid(f as *const c_void) }) else {
            return -FI_EINVAL;
        };
        if level != FI_OPT_ENDPOINT as i32 {
            return -FI_ENOPROTOOPT;
        }
        if val.is_null() || len.is_null() {
            return -FI_EINVAL;
        }
        match name as u32 {
            FI_OPT_MIN_MULTI_RECV => {
                let min = ep.lock().rx.min_multi_recv;
                // SAFETY: fi_getopt(3): `len` (non-NULL) is in/out, `val`
                // (non-NULL) holds *len bytes; we write a size_t only if it fits.
                unsafe {
                    let room = *len;
                    *len = std::mem::size_of::<usize>();
                    if room < std::mem::size_of::<usize>() {
                        return -FI_ETOOSMALL;
                    }
                    *(val as *mut usize) = min;
                }
                0
            }
            _ => -FI_ENOPROTOOPT,
        }
    })
}

unsafe extern "C" fn setopt(f: fid_t, level: i32, name: i32, val: *const c_void, len: usize) -> i32 {
    abi_guard!("setopt", -FI_EOTHER, || {
        // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
        let Some(ep) = (unsafe { from_fid(f as *const c_void) }) else {
            return -FI_EINVAL;
        };
        if level != FI_OPT_ENDPOINT as i32 {
            return -FI_ENOPROTOOPT;
        }
        match name as u32 {
            FI_OPT_MIN_MULTI_RECV => {
                if val.is_null() || len != std::mem::size_of::<usize>() {
                    return -FI_EINVAL;
                }
                // SAFETY: fi_setopt(3): `val` holds `len` bytes, a size_t here.
                ep.lock().rx.min_multi_recv = unsafe { *(val as *const usize) };
                0
            }
            _ => -FI_ENOPROTOOPT,
        }
    })
}

unsafe extern "C" fn rx_size_left(e: *mut fid_ep) -> isize {
    abi_guard!("rx_size_left", -FI_EOTHER as isize, || {
        // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
        let Some(ep) = (unsafe { from_fid(e as *const c_void) }) else {
            return -FI_EINVAL as isize;
        };
        ep.rx_left() as isize
    })
}

unsafe extern "C" fn tx_size_left(e: *mut fid_ep) -> isize {
    abi_guard!("tx_size_left", -FI_EOTHER as isize, || {
        // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
        let Some(ep) = (unsafe { from_fid(e as *const c_void) }) else {
            return -FI_EINVAL as isize;
        };
        ep.tx_left() as isize
    })
}

unsafe extern "C" fn getname(f: fid_t, addr: *mut c_void, len: *mut usize) -> i32 {
    abi_guard!("getname", -FI_EOTHER, || {
        // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
        let Some(ep) = (unsafe { from_fid(f as *const c_void) }) else {
            return -FI_EINVAL;
        };
        if len.is_null() {
            return -FI_EINVAL;
        }
        let bytes = std_to_sockaddr(&ep.lock().port.local_addr());
        // SAFETY: fi_getname(3): `len` (non-NULL) is in/out and `addr` is
        // NULL or holds *len bytes; we copy only if the address fits.
        unsafe {
            let room = *len;
            *len = bytes.len();
            if room < bytes.len() || addr.is_null() {
                return -FI_ETOOSMALL;
            }
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), addr as *mut u8, bytes.len());
        }
        0
    })
}

unsafe extern "C" fn setname(f: fid_t, addr: *mut c_void, len: usize) -> i32 {
    abi_guard!("setname", -FI_EOTHER, || {
        // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
        let Some(ep) = (unsafe { from_fid(f as *const c_void) }) else {
            return -FI_EINVAL;
        };
        if ep.enabled.load(Ordering::Acquire) {
            crate::warn!(FI_LOG_EP_CTRL, "fi_setname after fi_enable");
            return -FI_EOPBADSTATE;
        }
        // SAFETY: fi_setname(3): `addr` holds `len` bytes.
        let Some(a) = (unsafe { crate::getinfo::sockaddr_to_std(addr as *const u8, len) }) else {
            crate::warn!(FI_LOG_EP_CTRL, "fi_setname: not a sockaddr_in/in6");
            return -FI_EINVAL;
        };
        if a.ip() != ep.domain.attr.iface.ip {
            crate::warn!(
                FI_LOG_EP_CTRL,
                "fi_setname: {} is not on interface {}",
                a,
                ep.domain.attr.iface.name
            );
            return -FI_EINVAL;
        }
        let mut st = ep.lock();
        if a == st.port.local_addr() {
            return 0;
        }
        match new_state(&ep.domain, a, ep.tx_size, ep.rx_size) {
            Ok(ns) => {
                ep.fd.store(ns.port.wait_fd(), Ordering::Relaxed);
                if ep.watched.load(Ordering::Acquire) {
                    // A sleeper of the old wire may sleep on the new one.
                    let _ = ns.port.watch();
                }
                *st = ns;
                0
            }
            Err(e) => e,
        }
    })
}

unsafe extern "C" fn getpeer(_: *mut fid_ep, _: *mut c_void, _: *mut usize) -> i32 {
    abi_guard!("getpeer", -FI_EOTHER, || -FI_ENOSYS)
}
unsafe extern "C" fn connect(_: *mut fid_ep, _: *const c_void, _: *const c_void, _: usize) -> i32 {
    abi_guard!("connect", -FI_EOTHER, || -FI_ENOSYS)
}
unsafe extern "C" fn listen(_: *mut fid_pep) -> i32 {
    abi_guard!("listen", -FI_EOTHER, || -FI_ENOSYS)
}
unsafe extern "C" fn accept(_: *mut fid_ep, _: *const c_void, _: usize) -> i32 {
    abi_guard!("accept", -FI_EOTHER, || -FI_ENOSYS)
}
unsafe extern "C" fn reject(_: *mut fid_pep, _: fid_t, _: *const c_void, _: usize) -> i32 {
    abi_guard!("reject", -FI_EOTHER, || -FI_ENOSYS)
}
unsafe extern "C" fn shutdown(_: *mut fid_ep, _: u64) -> i32 {
    abi_guard!("shutdown", -FI_EOTHER, || -FI_ENOSYS)
}
/// fi_join: collective groups (`fi_join_collective`, FI_COLLECTIVE in the
/// flags); gnix offers no multicast.
unsafe extern "C" fn join(
    e: *mut fid_ep,
    addr: *const c_void,
    flags: u64,
    mc: *mut *mut fid_mc,
    ctx: *mut c_void,
) -> i32 {
    abi_guard!("join", -FI_EOTHER, || {
        // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
        let Some(ep) = (unsafe { from_fid(e as *const c_void) }) else {
            return -FI_EINVAL;
        };
        if flags & FI_COLLECTIVE == 0 {
            crate::warn!(FI_LOG_EP_CTRL, "fi_join: multicast is not supported (FI_MULTICAST)");
            return -FI_ENOSYS;
        }
        // SAFETY: fi_join_collective(3) passes a struct fi_collective_addr
        // (or the application passed NULL).
        let Some(a) = (unsafe { (addr as *const fi_collective_addr).as_ref() }) else {
            return -FI_EINVAL;
        };
        // SAFETY: `a.set` is the application's AV set fid, or NULL.
        let Some(set) = (unsafe { crate::coll::av_set::from_fid(a.set as *const c_void) }) else {
            crate::warn!(FI_LOG_EP_CTRL, "fi_join_collective: not an AV set");
            return -FI_EINVAL;
        };
        if mc.is_null() {
            return -FI_EINVAL;
        }
        match ep.join_collective(set, a.set as u64, a.coll_addr, ctx) {
            Ok(p) => {
                // SAFETY: `mc` (non-NULL) is the application's out pointer.
                unsafe { *mc = p };
                0
            }
            Err(e) => e,
        }
    })
}
unsafe extern "C" fn tx_ctx(_: *mut fid_ep, _: i32, _: *mut fi_tx_attr, _: *mut *mut fid_ep, _: *mut c_void) -> i32 {
    abi_guard!("tx_ctx", -FI_EOTHER, || -FI_ENOSYS)
}
unsafe extern "C" fn rx_ctx(_: *mut fid_ep, _: i32, _: *mut fi_rx_attr, _: *mut *mut fid_ep, _: *mut c_void) -> i32 {
    abi_guard!("rx_ctx", -FI_EOTHER, || -FI_ENOSYS)
}

pub(super) static EP_FI_OPS: Table<fi_ops> = Table(base_ops(close, Some(bind), Some(control), None));
pub(super) static EP_OPS: Table<fi_ops_ep> = Table(fi_ops_ep {
    size: std::mem::size_of::<fi_ops_ep>(),
    cancel: Some(cancel),
    getopt: Some(getopt),
    setopt: Some(setopt),
    tx_ctx: Some(tx_ctx),
    rx_ctx: Some(rx_ctx),
    rx_size_left: Some(rx_size_left),
    tx_size_left: Some(tx_size_left),
});
pub(super) static CM_OPS: Table<fi_ops_cm> = Table(fi_ops_cm {
    size: std::mem::size_of::<fi_ops_cm>(),
    setname: Some(setname),
    getname: Some(getname),
    getpeer: Some(getpeer),
    connect: Some(connect),
    listen: Some(listen),
    accept: Some(accept),
    reject: Some(reject),
    shutdown: Some(shutdown),
    join: Some(join),
});
