//! Address vector: `fi_addr_t` <-> peer socket address.
//!
//! Both FI_AV_MAP and FI_AV_TABLE hand out table indices (a map address is
//! opaque to the application, so an index serves both). The reverse map
//! answers FI_SOURCE: which fi_addr sent this datagram.

use crate::domain::Domain;
use crate::ffi::*;
use crate::fid::{base_ops, fid_header, FidObj, ParentRef, Refs, Table};
use crate::getinfo::{sockaddr_to_std, std_to_sockaddr};
use std::collections::HashMap;
use std::ffi::{c_char, c_void, CStr};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

pub struct Av {
    pub domain: ParentRef<Domain>,
    pub refs: Refs,
    pub av_type: u32,
    /// Bytes of one address in insert/lookup buffers.
    pub addrlen: usize,
    inner: RwLock<AvInner>,
    /// Bumped by every insert and remove, so endpoints can cache lookups.
    generation: AtomicU64,
}
impl AsRef<Refs> for Av {
    fn as_ref(&self) -> &Refs {
        &self.refs
    }
}

#[derive(Default)]
struct AvInner {
    table: Vec<Option<SocketAddr>>,
    rev: HashMap<SocketAddr, u64>,
}

impl Av {
    /// Changes whenever the address table does.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }
    /// The peer behind an fi_addr, or None if unknown/removed.
    pub fn lookup(&self, a: u64) -> Option<SocketAddr> {
        let i = self.inner.read().unwrap();
        i.table.get(a as usize).copied().flatten()
    }
    /// FI_SOURCE: the fi_addr a socket address was inserted as.
    pub fn reverse(&self, s: &SocketAddr) -> Option<u64> {
        self.inner.read().unwrap().rev.get(s).copied()
    }
    pub fn insert_addr(&self, s: SocketAddr) -> u64 {
        let mut i = self.inner.write().unwrap();
        self.generation.fetch_add(1, Ordering::Release);
        let idx = i.table.len() as u64;
        i.table.push(Some(s));
        // The first insertion of an address stays the one FI_SOURCE reports.
        i.rev.entry(s).or_insert(idx);
        idx
    }
    fn remove(&self, a: u64) -> bool {
        let mut i = self.inner.write().unwrap();
        self.generation.fetch_add(1, Ordering::Release);
        let Some(slot) = i.table.get_mut(a as usize) else {
            return false;
        };
        let Some(s) = slot.take() else { return false };
        if i.rev.get(&s) == Some(&a) {
            i.rev.remove(&s);
            // Another fi_addr for the same peer takes over FI_SOURCE reports.
            if let Some(other) = i.table.iter().position(|e| *e == Some(s)) {
                i.rev.insert(s, other as u64);
            }
        }
        true
    }
}

type Obj = FidObj<fid_av, Av>;

pub unsafe fn from_fid<'a>(p: *const c_void) -> Option<&'a Arc<Av>> {
    Obj::get(p, FI_CLASS_AV)
}

pub unsafe fn open(dom: &Arc<Domain>, attr: *mut fi_av_attr, ctx: *mut c_void) -> Result<*mut fid_av, i32> {
    let a = attr.as_ref().ok_or(-FI_EINVAL)?;
    let av_type = match a.type_ {
        FI_AV_UNSPEC => {
            if dom.attr.av_type == FI_AV_UNSPEC {
                FI_AV_MAP
            } else {
                dom.attr.av_type
            }
        }
        t @ (FI_AV_MAP | FI_AV_TABLE) => t,
        t => {
            crate::warn!(FI_LOG_AV, "fi_av_open: av type {} unknown", t);
            return Err(-FI_EINVAL);
        }
    };
    if dom.attr.av_type != FI_AV_UNSPEC && av_type != dom.attr.av_type {
        crate::warn!(
            FI_LOG_AV,
            "fi_av_open: type {} differs from the domain's {}",
            av_type,
            dom.attr.av_type
        );
        return Err(-FI_EINVAL);
    }
    if !a.name.is_null() {
        crate::warn!(FI_LOG_AV, "fi_av_open: named (shared) AVs are not supported");
        return Err(-FI_ENOSYS);
    }
    if a.rx_ctx_bits != 0 {
        crate::warn!(FI_LOG_AV, "fi_av_open: rx_ctx_bits needs scalable endpoints");
        return Err(-FI_EINVAL);
    }
    if a.flags & FI_EVENT != 0 {
        crate::warn!(FI_LOG_AV, "fi_av_open: FI_EVENT (asynchronous AV) is not supported");
        return Err(-FI_ENOSYS);
    }
    if a.flags & !(FI_SYMMETRIC) != 0 {
        crate::warn!(FI_LOG_AV, "fi_av_open: flags {:#x} not supported", a.flags);
        return Err(-FI_EINVAL);
    }
    let addrlen = std_to_sockaddr(&dom.attr.src).len();
    let av = Arc::new(Av {
        domain: ParentRef::new(dom),
        refs: Refs::default(),
        av_type,
        addrlen,
        inner: RwLock::new(AvInner {
            table: Vec::with_capacity(a.count.min(1 << 20)),
            rev: HashMap::new(),
        }),
        generation: AtomicU64::new(0),
    });
    let c = fid_av {
        fid: fid_header(FI_CLASS_AV, ctx, AV_FI_OPS.ptr()),
        ops: AV_OPS.ptr(),
    };
    Ok(Obj::create(c, av))
}

unsafe extern "C" fn close(f: *mut fid) -> i32 {
    crate::fid::close_unless_busy::<fid_av, Av>(f, FI_CLASS_AV, FI_LOG_AV, "endpoints bound to the AV")
}

const INSERT_FLAGS: u64 = FI_MORE | FI_SYNC_ERR;

/// Records per-address results the way fi_av_insert(3) asks.
unsafe fn insert_all(av: &Av, addrs: &[Option<SocketAddr>], fi_addr: *mut u64, flags: u64, ctx: *mut c_void) -> i32 {
    let mut n = 0;
    for (k, a) in addrs.iter().enumerate() {
        let res = match a {
            Some(s) => {
                n += 1;
                Ok(av.insert_addr(*s))
            }
            None => Err(FI_EINVAL),
        };
        if !fi_addr.is_null() {
            *fi_addr.add(k) = *res.as_ref().unwrap_or(&FI_ADDR_NOTAVAIL);
        }
        if flags & FI_SYNC_ERR != 0 && !ctx.is_null() {
            *(ctx as *mut i32).add(k) = match res {
                Ok(_) => 0,
                Err(e) => e,
            };
        }
    }
    n
}

fn family_ok(av: &Av, s: &SocketAddr) -> bool {
    s.is_ipv4() == (av.addrlen == std::mem::size_of::<libc::sockaddr_in>())
}

unsafe extern "C" fn insert(
    f: *mut fid_av,
    addr: *const c_void,
    count: usize,
    fi_addr: *mut u64,
    flags: u64,
    ctx: *mut c_void,
) -> i32 {
    let Some(av) = from_fid(f as *const c_void) else {
        return -FI_EINVAL;
    };
    if flags & !INSERT_FLAGS != 0 {
        crate::warn!(
            FI_LOG_AV,
            "fi_av_insert: flags {:#x} not supported",
            flags & !INSERT_FLAGS
        );
        return -FI_EBADFLAGS;
    }
    if count > 0 && addr.is_null() {
        crate::warn!(FI_LOG_AV, "fi_av_insert: NULL address buffer");
        return -FI_EINVAL;
    }
    let addrs: Vec<Option<SocketAddr>> = (0..count)
        .map(|k| {
            let p = (addr as *const u8).add(k * av.addrlen);
            let s = sockaddr_to_std(p, av.addrlen)
                .filter(|s| family_ok(av, s) && !s.ip().is_unspecified() && s.port() != 0);
            if s.is_none() {
                crate::warn!(
                    FI_LOG_AV,
                    "fi_av_insert: address {} is not a usable {} address",
                    k,
                    if av.addrlen == 16 { "IPv4" } else { "IPv6" }
                );
            }
            s
        })
        .collect();
    insert_all(av, &addrs, fi_addr, flags, ctx)
}

fn parse_host(node: &str) -> Option<IpAddr> {
    node.parse().ok().or_else(|| {
        use std::net::ToSocketAddrs;
        (node, 0).to_socket_addrs().ok()?.next().map(|a| a.ip())
    })
}

unsafe extern "C" fn insertsvc(
    f: *mut fid_av,
    node: *const c_char,
    service: *const c_char,
    fi_addr: *mut u64,
    flags: u64,
    ctx: *mut c_void,
) -> i32 {
    insertsym(f, node, 1, service, 1, fi_addr, flags, ctx)
}

unsafe extern "C" fn insertsym(
    f: *mut fid_av,
    node: *const c_char,
    nodecnt: usize,
    service: *const c_char,
    svccnt: usize,
    fi_addr: *mut u64,
    flags: u64,
    ctx: *mut c_void,
) -> i32 {
    let Some(av) = from_fid(f as *const c_void) else {
        return -FI_EINVAL;
    };
    if node.is_null() || service.is_null() {
        crate::warn!(FI_LOG_AV, "fi_av_insertsvc/insertsym: NULL node or service");
        return -FI_EINVAL;
    }
    if flags & !INSERT_FLAGS != 0 {
        return -FI_EBADFLAGS;
    }
    let node = CStr::from_ptr(node).to_string_lossy();
    let service = CStr::from_ptr(service).to_string_lossy();
    let Some(ip) = parse_host(&node) else {
        crate::warn!(FI_LOG_AV, "fi_av_insertsvc: cannot resolve '{}'", node);
        return -FI_EINVAL;
    };
    let Ok(port) = service.parse::<u16>() else {
        crate::warn!(FI_LOG_AV, "fi_av_insertsvc: service '{}' is not a port", service);
        return -FI_EINVAL;
    };
    // fi_av_insertsym(3): node addresses and ports are incremented, node-major.
    let mut addrs = Vec::with_capacity(nodecnt * svccnt);
    for n in 0..nodecnt {
        let host = match ip {
            IpAddr::V4(v4) => IpAddr::V4((u32::from(v4).wrapping_add(n as u32)).into()),
            IpAddr::V6(v6) => IpAddr::V6((u128::from(v6).wrapping_add(n as u128)).into()),
        };
        for s in 0..svccnt {
            let a = port
                .checked_add(s as u16)
                .map(|p| SocketAddr::new(host, p))
                .filter(|a| family_ok(av, a));
            addrs.push(a);
        }
    }
    insert_all(av, &addrs, fi_addr, flags, ctx)
}

unsafe extern "C" fn remove(f: *mut fid_av, fi_addr: *mut u64, count: usize, flags: u64) -> i32 {
    let Some(av) = from_fid(f as *const c_void) else {
        return -FI_EINVAL;
    };
    if flags != 0 {
        return -FI_EBADFLAGS;
    }
    if count > 0 && fi_addr.is_null() {
        return -FI_EINVAL;
    }
    let mut ret = 0;
    for k in 0..count {
        if !av.remove(*fi_addr.add(k)) {
            crate::warn!(FI_LOG_AV, "fi_av_remove: fi_addr {} is not in the AV", *fi_addr.add(k));
            ret = -FI_EINVAL;
        }
    }
    ret
}

unsafe extern "C" fn lookup(f: *mut fid_av, a: u64, addr: *mut c_void, addrlen: *mut usize) -> i32 {
    let Some(av) = from_fid(f as *const c_void) else {
        return -FI_EINVAL;
    };
    if addrlen.is_null() {
        return -FI_EINVAL;
    }
    let Some(s) = av.lookup(a) else {
        crate::warn!(FI_LOG_AV, "fi_av_lookup: fi_addr {} is not in the AV", a);
        return -FI_EINVAL;
    };
    let bytes = std_to_sockaddr(&s);
    let n = bytes.len().min(*addrlen);
    if n > 0 && !addr.is_null() {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), addr as *mut u8, n);
    }
    *addrlen = bytes.len();
    0
}

/// libfabric's string form of a sockaddr address.
pub fn addr_string(s: &SocketAddr) -> String {
    match s {
        SocketAddr::V4(_) => format!("fi_sockaddr_in://{}", s),
        SocketAddr::V6(_) => format!("fi_sockaddr_in6://{}", s),
    }
}

unsafe extern "C" fn straddr(f: *mut fid_av, addr: *const c_void, buf: *mut c_char, len: *mut usize) -> *const c_char {
    let Some(av) = from_fid(f as *const c_void) else {
        return std::ptr::null();
    };
    if len.is_null() {
        return std::ptr::null();
    }
    let s = match sockaddr_to_std(addr as *const u8, av.addrlen) {
        Some(s) => addr_string(&s),
        None => "fi_addr_format_unknown".to_string(),
    };
    let want = s.len() + 1;
    if !buf.is_null() && *len > 0 {
        let n = s.len().min(*len - 1);
        std::ptr::copy_nonoverlapping(s.as_ptr(), buf as *mut u8, n);
        *buf.add(n) = 0;
    }
    *len = want;
    buf
}

unsafe extern "C" fn bind(_f: *mut fid, _b: *mut fid, _flags: u64) -> i32 {
    crate::warn!(
        FI_LOG_AV,
        "fi_av_bind: only asynchronous (FI_EVENT) AVs bind an EQ; gnix AVs are synchronous"
    );
    -FI_ENOSYS
}

static AV_FI_OPS: Table<fi_ops> = Table(base_ops(close, Some(bind), None, None));
static AV_OPS: Table<fi_ops_av> = Table(fi_ops_av {
    size: std::mem::size_of::<fi_ops_av>(),
    insert: Some(insert),
    insertsvc: Some(insertsvc),
    insertsym: Some(insertsym),
    remove: Some(remove),
    lookup: Some(lookup),
    straddr: Some(straddr),
    av_set: None,
});
