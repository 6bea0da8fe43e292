//! Memory registration. gnix needs no registration to move messages (the
//! wires copy or use cross-memory attach), so an MR is the record a remote
//! access (RMA, atomics) is checked against: its iovs, access rights and
//! key (`MrTable::resolve`).

use crate::cntr::Cntr;
use crate::domain::Domain;
use crate::ffi::*;
use crate::fid::{base_ops, fid_header, FidObj, ParentRef, Table};
use crate::nic::iov::Iov;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

pub struct Mr {
    pub domain: ParentRef<Domain>,
    pub iov: Vec<(usize, usize)>,
    pub access: u64,
    pub offset: u64,
    pub key: u64,
    /// Counters bound with fi_mr_bind (FI_RMA_EVENT): peers' reads and
    /// writes of this region.
    cntrs: Mutex<MrCntrs>,
}

#[derive(Default)]
struct MrCntrs {
    read: Option<ParentRef<Cntr>>,
    write: Option<ParentRef<Cntr>>,
}

/// The counter a peer's access to a region counts on, if one is bound
/// (`fi_mr_bind`).
pub type MrEvent = Option<Arc<Cntr>>;

impl Drop for Mr {
    fn drop(&mut self) {
        // A later MR may have reused the key once this one was unreachable.
        let mut keys = self.domain.mrs.keys.lock().unwrap();
        if keys.get(&self.key).is_some_and(|w| std::ptr::eq(w.as_ptr(), self)) {
            keys.remove(&self.key);
        }
    }
}

/// The domain's keys. Keys are unique per domain (fi_mr(3): -FI_ENOKEY for a
/// requested key already in use).
pub struct MrTable {
    keys: Mutex<HashMap<u64, Weak<Mr>>>,
    next: AtomicU64,
    prov_key: bool,
    /// Remote addresses are virtual addresses (FI_MR_VIRT_ADDR, FI_MR_BASIC),
    /// else offsets from the registration's `offset` (FI_MR_SCALABLE and
    /// the modern default).
    virt_addr: bool,
}

impl MrTable {
    pub fn new(mr_mode: i32) -> Self {
        let basic = mr_mode == FI_MR_BASIC as i32;
        MrTable {
            keys: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
            prov_key: mr_mode & FI_MR_PROV_KEY != 0 || basic,
            virt_addr: mr_mode & FI_MR_VIRT_ADDR != 0 || basic,
        }
    }

    /// The target side of a one-sided access: `len` bytes at remote address
    /// `addr` of the region registered under `key`, with `access`
    /// (FI_REMOTE_READ, FI_REMOTE_WRITE). The memory as an `Iov`, or the
    /// error the initiator's operation fails with (positive; as
    /// libfabric's own providers answer: FI_EINVAL for an unknown key,
    /// FI_EACCES for rights or a range outside the registration).
    pub fn resolve(&self, key: u64, addr: u64, len: u64, access: u64) -> Result<(Iov, MrEvent), i32> {
        let Some(mr) = self.keys.lock().unwrap().get(&key).and_then(Weak::upgrade) else {
            crate::warn!(FI_LOG_MR, "remote access with unknown key {:#x}", key);
            return Err(FI_EINVAL);
        };
        if mr.access & access != access {
            crate::warn!(
                FI_LOG_MR,
                "remote access {:#x} to key {:#x}, registered for {:#x}",
                access,
                key,
                mr.access
            );
            return Err(FI_EACCES);
        }
        let Some((ranges, skip)) = mr.locate(addr, len, self.virt_addr) else {
            crate::warn!(
                FI_LOG_MR,
                "remote access [{:#x}, +{}) outside the region of key {:#x}",
                addr,
                len,
                key
            );
            return Err(FI_EACCES);
        };
        let cntrs = mr.cntrs.lock().unwrap();
        let cntr = if access & FI_REMOTE_WRITE != 0 {
            &cntrs.write
        } else {
            &cntrs.read
        };
        let ev = cntr.as_ref().map(|c| c.0.clone());
        // SAFETY: the application registered these ranges for remote
        // access with these rights (fi_mr(3)): they stay valid while the
        // registration is open, and libfabric leaves it to the application
        // not to touch memory a peer's operation is reading or writing
        // (fi_rma(3)).
        let mut region = unsafe { Iov::from_raw(ranges) };
        // `locate` checked that skip + len lies within them.
        region.take_front(skip);
        Ok((region.take_front(len as usize), ev))
    }
}

impl Mr {
    /// Where `len` bytes at remote address `addr` are in this
    /// registration: the registered buffers they lie in, one after the
    /// other, and how far into them they start; None outside it.
    fn locate(&self, addr: u64, len: u64, virt_addr: bool) -> Option<(Vec<(usize, usize)>, usize)> {
        let (a, l) = (addr as usize, len as usize);
        if virt_addr {
            // A virtual address: within one of the registered buffers.
            let end = a.checked_add(l)?;
            let &(b, bl) = self.iov.iter().find(|&&(b, bl)| a >= b && end <= b + bl)?;
            return Some((vec![(b, bl)], a - b));
        }
        // An offset into the registered buffers, one after the other.
        let off = addr.checked_sub(self.offset)? as usize;
        let total: usize = self.iov.iter().map(|r| r.1).sum();
        (off.checked_add(l)? <= total).then(|| (self.iov.clone(), off))
    }
}

type Obj = FidObj<fid_mr, Mr>;

const ACCESS: u64 = FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;

/// Registers `iov` on the domain behind `dom_fid` (keys only: no RMA yet).
///
/// # Safety
/// `dom_fid` must be NULL or point to readable memory of at least a `struct fid`.
unsafe fn register(
    dom_fid: *mut fid,
    iov: &[(usize, usize)],
    access: u64,
    offset: u64,
    requested_key: u64,
    flags: u64,
    ctx: *mut c_void,
) -> Result<*mut fid_mr, i32> {
    // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
    let Some(dom) = (unsafe { crate::domain::from_fid(dom_fid as *const c_void) }) else {
        return Err(-FI_EINVAL);
    };
    if access & !ACCESS != 0 {
        crate::warn!(FI_LOG_MR, "fi_mr_reg: unknown access bits {:#x}", access & !ACCESS);
        return Err(-FI_EINVAL);
    }
    if flags != 0 {
        crate::warn!(FI_LOG_MR, "fi_mr_reg: flags {:#x} not supported", flags);
        return Err(-FI_EBADFLAGS);
    }
    if iov.len() > crate::getinfo::MR_IOV_LIMIT {
        crate::warn!(
            FI_LOG_MR,
            "fi_mr_regv: {} iovs > mr_iov_limit {}",
            iov.len(),
            crate::getinfo::MR_IOV_LIMIT
        );
        return Err(-FI_EINVAL);
    }
    if iov.iter().any(|&(b, l)| b == 0 && l != 0) {
        crate::warn!(FI_LOG_MR, "fi_mr_reg: NULL buffer with non-zero length");
        return Err(-FI_EINVAL);
    }
    let mut keys = dom.mrs.keys.lock().unwrap();
    let key = if dom.mrs.prov_key {
        loop {
            let k = dom.mrs.next.fetch_add(1, Ordering::Relaxed);
            if !keys.contains_key(&k) {
                break k;
            }
        }
    } else {
        if keys.get(&requested_key).is_some_and(|w| w.strong_count() > 0) {
            crate::warn!(FI_LOG_MR, "fi_mr_reg: key {:#x} already in use", requested_key);
            return Err(-FI_ENOKEY);
        }
        requested_key
    };
    let mr = Arc::new(Mr {
        domain: ParentRef::new(dom),
        iov: iov.to_vec(),
        access,
        offset,
        key,
        cntrs: Mutex::new(MrCntrs::default()),
    });
    keys.insert(key, Arc::downgrade(&mr));
    drop(keys);
    let c = fid_mr {
        fid: fid_header(FI_CLASS_MR, ctx, MR_FI_OPS.ptr()),
        mem_desc: std::ptr::null_mut(),
        key,
    };
    let p = Obj::create(c, mr);
    // The descriptor is the MR itself: fi_mr_desc() hands it to data calls.
    // SAFETY: `p` was just made by `create`, and nothing else holds it yet.
    unsafe { (*p).mem_desc = p as *mut c_void };
    Ok(p)
}

/// 0 with the MR stored through `out`, or the error.
///
/// # Safety
/// `out` must be writable for one pointer.
unsafe fn finish(r: Result<*mut fid_mr, i32>, out: *mut *mut fid_mr) -> i32 {
    match r {
        Ok(p) => {
            // SAFETY: `out` is the application's result slot (non-NULL, checked above).
            unsafe { *out = p };
            0
        }
        Err(e) => e,
    }
}

unsafe extern "C" fn reg(
    f: *mut fid,
    buf: *const c_void,
    len: usize,
    access: u64,
    offset: u64,
    key: u64,
    flags: u64,
    mr: *mut *mut fid_mr,
    ctx: *mut c_void,
) -> i32 {
    abi_guard!("reg", -FI_EOTHER, || {
        if mr.is_null() {
            return -FI_EINVAL;
        }
        // SAFETY: `f` is the application's domain fid or NULL, checked by `register`; `mr` is its result slot, non-NULL.
        unsafe { finish(register(f, &[(buf as usize, len)], access, offset, key, flags, ctx), mr) }
    })
}

/// The application's iovec array as (address, length) pairs (None: NULL
/// with a count).
///
/// # Safety
/// `iov` must be NULL or point to `count` readable iovecs.
unsafe fn iovs(iov: *const iovec, count: usize) -> Option<Vec<(usize, usize)>> {
    // SAFETY: the caller's contract: `iov` is NULL or holds `count` iovecs.
    let v = unsafe { crate::abi::app_array(iov, count) }?;
    Some(v.iter().map(|v| (v.iov_base as usize, v.iov_len)).collect())
}

unsafe extern "C" fn regv(
    f: *mut fid,
    iov: *const iovec,
    count: usize,
    access: u64,
    offset: u64,
    key: u64,
    flags: u64,
    mr: *mut *mut fid_mr,
    ctx: *mut c_void,
) -> i32 {
    abi_guard!("regv", -FI_EOTHER, || {
        if mr.is_null() {
            return -FI_EINVAL;
        }
        // SAFETY: fi_mr_regv(3): `iov` holds `count` iovecs.
        let Some(v) = (unsafe { iovs(iov, count) }) else {
            return -FI_EINVAL;
        };
        // SAFETY: `f` is the application's domain fid or NULL, checked by `register`; `mr` is its result slot, non-NULL.
        unsafe { finish(register(f, &v, access, offset, key, flags, ctx), mr) }
    })
}

unsafe extern "C" fn regattr(f: *mut fid, attr: *const fi_mr_attr, flags: u64, mr: *mut *mut fid_mr) -> i32 {
    abi_guard!("regattr", -FI_EOTHER, || {
        // SAFETY: fi_mr_regattr(3): `attr` is NULL or the application's fi_mr_attr.
        let Some(a) = (unsafe { attr.as_ref() }) else {
            return -FI_EINVAL;
        };
        if mr.is_null() {
            return -FI_EINVAL;
        }
        if a.iface != FI_HMEM_SYSTEM {
            crate::warn!(
                FI_LOG_MR,
                "fi_mr_regattr: device memory (iface {}) not supported",
                a.iface
            );
            return -FI_ENOSYS;
        }
        if a.auth_key_size != 0 {
            crate::warn!(FI_LOG_MR, "fi_mr_regattr: auth keys not supported");
            return -FI_EINVAL;
        }
        // SAFETY: the attribute's mr_iov holds iov_count iovecs (fi_mr_regattr(3)).
        let Some(v) = (unsafe { iovs(a.mr_iov, a.iov_count) }) else {
            return -FI_EINVAL;
        };
        // SAFETY: `f` is the application's domain fid or NULL, checked by `register`; `mr` is its result slot, non-NULL.
        unsafe {
            finish(
                register(f, &v, a.access, a.offset, a.requested_key, flags, a.context),
                mr,
            )
        }
    })
}

unsafe extern "C" fn close(f: *mut fid) -> i32 {
    abi_guard!("close", -FI_EOTHER, || {
        // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
        if (unsafe { Obj::get(f as *const c_void, FI_CLASS_MR) }).is_none() {
            return -FI_EINVAL;
        }
        // SAFETY: `f` is a live object of this class (checked above), which the application gives up (fi_close(3)).
        unsafe { Obj::destroy(f as *mut c_void) };
        0
    })
}

unsafe extern "C" fn bind(f: *mut fid, b: *mut fid, flags: u64) -> i32 {
    abi_guard!("bind", -FI_EOTHER, || {
        // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
        let Some(mr) = (unsafe { Obj::get(f as *const c_void, FI_CLASS_MR) }) else {
            return -FI_EINVAL;
        };
        if b.is_null() {
            return -FI_EINVAL;
        }
        // SAFETY: `b` is non-NULL: a fid the application holds.
        match unsafe { (*b).fclass } as u32 {
            FI_CLASS_CNTR => {
                // FI_RMA_EVENT: the counter counts peers' accesses to the region.
                // SAFETY: a fid the application holds; `from_fid` checks class and magic.
                let Some(c) = (unsafe { crate::cntr::from_fid(b as *const c_void) }) else {
                    return -FI_EINVAL;
                };
                if flags & !(FI_REMOTE_READ | FI_REMOTE_WRITE) != 0 || flags == 0 {
                    crate::warn!(FI_LOG_MR, "fi_mr_bind(cntr): flags {:#x}", flags);
                    return -FI_EBADFLAGS;
                }
                // Under manual progress a wait on the counter must move
                // the endpoints the accesses arrive at (`Nic::endpoints`).
                c.add_source(Arc::downgrade(&mr.domain.0.endpoints));
                let mut cntrs = mr.cntrs.lock().unwrap();
                if flags & FI_REMOTE_READ != 0 {
                    cntrs.read = Some(ParentRef::new(&c));
                }
                if flags & FI_REMOTE_WRITE != 0 {
                    cntrs.write = Some(ParentRef::new(&c));
                }
                0
            }
            // FI_MR_ENDPOINT: gnix does not ask for it, so a registration
            // already serves every endpoint of its domain.
            FI_CLASS_EP => 0,
            c => {
                crate::warn!(FI_LOG_MR, "fi_mr_bind: cannot bind a fid of class {}", c);
                -FI_EINVAL
            }
        }
    })
}

/// fi_mr_enable and fi_mr_refresh: a registration is live from fi_mr_reg
/// on (gnix needs no FI_MR_RMA_EVENT step), and gnix caches no pages, so
/// there is nothing to refresh.
unsafe extern "C" fn control(f: *mut fid, command: i32, _arg: *mut c_void) -> i32 {
    abi_guard!("control", -FI_EOTHER, || {
        // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
        if (unsafe { Obj::get(f as *const c_void, FI_CLASS_MR) }).is_none() {
            return -FI_EINVAL;
        }
        match command as u32 {
            FI_ENABLE | FI_REFRESH => 0,
            c => {
                crate::warn!(FI_LOG_MR, "fi_control(mr): command {} not supported", c);
                -FI_ENOSYS
            }
        }
    })
}

static MR_FI_OPS: Table<fi_ops> = Table(base_ops(close, Some(bind), Some(control), None));
pub static MR_OPS: Table<fi_ops_mr> = Table(fi_ops_mr {
    size: std::mem::size_of::<fi_ops_mr>(),
    reg: Some(reg),
    regv: Some(regv),
    regattr: Some(regattr),
});
