//! Address vector: `fi_addr_t` <-> peer socket address.
//!
//! Both FI_AV_MAP and FI_AV_TABLE hand out table indices (a map address is
//! opaque to the application, so an index serves both). The reverse map
//! answers FI_SOURCE and directed receives: which fi_addr sent this
//! datagram.
//!
//! An address is held once: inserting it again returns the fi_addr it
//! already has and takes a reference, which `fi_av_remove` gives back (the
//! entry goes with its last reference). fi_av(3) leaves duplicate inserts
//! undefined; libfabric's util AV (tcp, rxm, shm) answers them this way and
//! MPICH relies on it: `MPI_Comm_connect`/`accept` between ranks of one job
//! insert each other a second time and post directed receives naming the
//! second fi_addr, which a second table entry would never match (the
//! messages' source resolves to one fi_addr per peer).

use crate::domain::Domain;
use crate::ffi::*;
use crate::fid::{base_ops, fid_header, FidObj, ParentRef, Refs, Table};
use crate::getinfo::{sockaddr_to_std, std_to_sockaddr};
use std::ffi::{c_char, c_void, CStr};
use std::net::{IpAddr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};

pub struct Av {
    pub domain: ParentRef<Domain>,
    pub refs: Refs,
    /// Bytes of one address in insert/lookup buffers.
    pub addrlen: usize,
    inner: RwLock<AvInner>,
    /// Bumped by every insert and remove, so endpoints can cache lookups.
    generation: AtomicU64,
    /// The enabled endpoints bound to this AV, told of new addresses.
    listeners: Mutex<Vec<Weak<dyn AvListener>>>,
}

/// An endpoint told of the addresses its AV learns (it connects to local
/// peers ahead of their first message).
pub trait AvListener: Send + Sync {
    fn learned(&self, addrs: &[SocketAddr]);
}
impl AsRef<Refs> for Av {
    fn as_ref(&self) -> &Refs {
        &self.refs
    }
}

/// The peers of an AV, compact: what an AV costs before any VC exists is
/// what a 10,000-peer job pays on every rank (DESIGN.md §3: a few dozen
/// bytes per peer, as in the GASNet design). An IPv4 peer is one u64 in the
/// table plus ~5 bytes of index (one u32 slot at most 3/4 full); `bench/run
/// --av` measures it.
struct AvInner {
    slots: Slots,
    /// FI_SOURCE's reverse map: an open-addressing index (linear probing,
    /// load at most 3/4) of table positions, keyed by the address stored
    /// there.
    index: Vec<u32>,
    indexed: usize,
    /// References beyond the first, per fi_addr inserted more than once
    /// (rare: empty in a job that inserts every peer once).
    extra_refs: std::collections::HashMap<usize, u32>,
}

/// One entry per fi_addr ever handed out (removed ones stay as holes).
enum Slots {
    /// `1 << 48 | ip << 16 | port` while present, 0 once removed.
    V4(Vec<u64>),
    V6(Vec<Option<SocketAddrV6>>),
}

const EMPTY: u32 = u32::MAX;
const V4_PRESENT: u64 = 1 << 48;

fn pack_v4(a: &SocketAddrV4) -> u64 {
    V4_PRESENT | (u32::from(*a.ip()) as u64) << 16 | a.port() as u64
}

fn unpack_v4(v: u64) -> Option<SocketAddr> {
    (v & V4_PRESENT != 0).then(|| SocketAddr::V4(SocketAddrV4::new(((v >> 16) as u32).into(), v as u16)))
}

fn hash(s: &SocketAddr) -> u64 {
    let k = match s {
        SocketAddr::V4(a) => pack_v4(a),
        SocketAddr::V6(a) => {
            let ip = u128::from(*a.ip());
            (ip as u64) ^ ((ip >> 64) as u64).rotate_left(29) ^ (a.port() as u64) << 7 ^ (a.scope_id() as u64) << 40
        }
    };
    // Fibonacci hashing: the index takes the top bits.
    k.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

impl AvInner {
    fn new(v4: bool, count: usize) -> AvInner {
        let cap = count.min(1 << 20);
        AvInner {
            slots: if v4 {
                Slots::V4(Vec::with_capacity(cap))
            } else {
                Slots::V6(Vec::with_capacity(cap))
            },
            index: Vec::new(),
            indexed: 0,
            extra_refs: std::collections::HashMap::new(),
        }
    }

    fn len(&self) -> usize {
        match &self.slots {
            Slots::V4(t) => t.len(),
            Slots::V6(t) => t.len(),
        }
    }

    fn get(&self, i: usize) -> Option<SocketAddr> {
        match &self.slots {
            Slots::V4(t) => unpack_v4(*t.get(i)?),
            Slots::V6(t) => t.get(i).copied().flatten().map(SocketAddr::V6),
        }
    }

    /// Appends `s`; its family is the AV's (checked by the callers).
    fn push(&mut self, s: SocketAddr) {
        match (&mut self.slots, s) {
            (Slots::V4(t), SocketAddr::V4(a)) => t.push(pack_v4(&a)),
            (Slots::V6(t), SocketAddr::V6(a)) => t.push(Some(a)),
            // An address of the other family: widen the table (never
            // happens through the C API, which checks the family).
            (Slots::V4(t), SocketAddr::V6(a)) => {
                let mut w: Vec<Option<SocketAddrV6>> = t
                    .iter()
                    .map(|&v| match unpack_v4(v) {
                        Some(SocketAddr::V4(x)) => Some(SocketAddrV6::new(x.ip().to_ipv6_mapped(), x.port(), 0, 0)),
                        _ => None,
                    })
                    .collect();
                w.push(Some(a));
                self.slots = Slots::V6(w);
            }
            (Slots::V6(t), SocketAddr::V4(a)) => {
                t.push(Some(SocketAddrV6::new(a.ip().to_ipv6_mapped(), a.port(), 0, 0)))
            }
        }
    }

    fn take(&mut self, i: usize) -> Option<SocketAddr> {
        match &mut self.slots {
            Slots::V4(t) => unpack_v4(std::mem::take(t.get_mut(i)?)),
            Slots::V6(t) => t.get_mut(i)?.take().map(SocketAddr::V6),
        }
    }

    fn bucket(&self, s: &SocketAddr) -> usize {
        let bits = self.index.len().trailing_zeros();
        (hash(s) >> (64 - bits)) as usize
    }

    /// Position in `index` of the entry for `s`, if indexed.
    fn find(&self, s: &SocketAddr) -> Option<usize> {
        if self.index.is_empty() {
            return None;
        }
        let mask = self.index.len() - 1;
        let mut b = self.bucket(s);
        loop {
            let e = self.index[b];
            if e == EMPTY {
                return None;
            }
            if self.get(e as usize).as_ref() == Some(s) {
                return Some(b);
            }
            b = (b + 1) & mask;
        }
    }

    /// The fi_addr of `s`: the one it already has (taking a reference), or
    /// a new position at the end.
    fn add(&mut self, s: SocketAddr) -> usize {
        if let Some(b) = self.find(&s) {
            let a = self.index[b] as usize;
            *self.extra_refs.entry(a).or_insert(0) += 1;
            return a;
        }
        let idx = self.len();
        self.push(s);
        self.index_insert(idx);
        idx
    }

    /// Drops a reference to position `a`, emptying it with the last one;
    /// false if it held no address.
    fn remove_at(&mut self, a: usize) -> bool {
        let Some(s) = self.get(a) else { return false };
        if let Some(n) = self.extra_refs.get_mut(&a) {
            *n -= 1;
            if *n == 0 {
                self.extra_refs.remove(&a);
            }
            return true;
        }
        // (found while the slot still holds the address the index compares)
        let indexed_here = self.find(&s).filter(|&b| self.index[b] as usize == a);
        self.take(a);
        if let Some(b) = indexed_here {
            self.index_remove(b);
        }
        true
    }

    /// Indexes table position `i` (holding an address not yet indexed).
    fn index_insert(&mut self, i: usize) {
        if i >= EMPTY as usize {
            return; // beyond 4 billion fi_addrs: no FI_SOURCE for the rest
        }
        if (self.indexed + 1) * 4 > self.index.len() * 3 {
            let n = (self.index.len() * 2).max(16);
            let old = std::mem::replace(&mut self.index, vec![EMPTY; n]);
            for e in old.into_iter().filter(|&e| e != EMPTY) {
                self.place(e);
            }
        }
        self.place(i as u32);
        self.indexed += 1;
    }

    fn place(&mut self, e: u32) {
        let s = self.get(e as usize).expect("indexing a present entry");
        let mask = self.index.len() - 1;
        let mut b = self.bucket(&s);
        while self.index[b] != EMPTY {
            b = (b + 1) & mask;
        }
        self.index[b] = e;
    }

    /// Removes index position `b` (backward-shift deletion: no tombstones).
    fn index_remove(&mut self, mut b: usize) {
        let mask = self.index.len() - 1;
        let mut j = b;
        loop {
            j = (j + 1) & mask;
            let e = self.index[j];
            if e == EMPTY {
                break;
            }
            let home = self.bucket(&self.get(e as usize).expect("indexed entry present"));
            // Entry j may move to b unless its home lies cyclically in (b, j].
            let stays = if b <= j {
                b < home && home <= j
            } else {
                b < home || home <= j
            };
            if !stays {
                self.index[b] = e;
                b = j;
            }
        }
        self.index[b] = EMPTY;
        self.indexed -= 1;
    }
}

impl Av {
    /// Changes whenever the address table does.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }
    /// The peer behind an fi_addr, or None if unknown/removed.
    pub fn lookup(&self, a: u64) -> Option<SocketAddr> {
        let i = self.inner.read().unwrap();
        i.get(usize::try_from(a).ok()?)
    }
    /// FI_SOURCE: the fi_addr a socket address was inserted as.
    pub fn reverse(&self, s: &SocketAddr) -> Option<u64> {
        let i = self.inner.read().unwrap();
        i.find(s).map(|b| i.index[b] as u64)
    }
    /// Every fi_addr present, in order (an AV set of FI_UNIVERSE).
    pub fn addrs(&self) -> Vec<u64> {
        let i = self.inner.read().unwrap();
        (0..i.len()).filter(|&a| i.get(a).is_some()).map(|a| a as u64).collect()
    }
    /// Every peer present, in order (one pass under the lock).
    pub fn peers(&self) -> Vec<SocketAddr> {
        let i = self.inner.read().unwrap();
        (0..i.len()).filter_map(|a| i.get(a)).collect()
    }
    pub fn insert_addr(&self, s: SocketAddr) -> u64 {
        let mut i = self.inner.write().unwrap();
        self.generation.fetch_add(1, Ordering::Release);
        i.add(s) as u64
    }
    /// `l` is told of every address inserted from now on.
    pub fn listen(&self, l: Weak<dyn AvListener>) {
        let mut ls = self.listeners.lock().unwrap_or_else(|p| p.into_inner());
        ls.retain(|w| w.strong_count() > 0);
        ls.push(l);
    }
    /// Tells the listeners (without the AV's locks held: they take their
    /// endpoint's).
    fn tell(&self, addrs: &[SocketAddr]) {
        if addrs.is_empty() {
            return;
        }
        let ls: Vec<_> = {
            let ls = self.listeners.lock().unwrap_or_else(|p| p.into_inner());
            ls.iter().filter_map(Weak::upgrade).collect()
        };
        for l in ls {
            l.learned(addrs);
        }
    }
    fn remove(&self, a: u64) -> bool {
        let mut i = self.inner.write().unwrap();
        self.generation.fetch_add(1, Ordering::Release);
        usize::try_from(a).is_ok_and(|a| i.remove_at(a))
    }
}

type Obj = FidObj<fid_av, Av>;

/// The AV behind an application-supplied fid: checks class and magic.
///
/// # Safety
/// `p` must be NULL or point to readable memory of at least a `struct fid`.
pub unsafe fn from_fid<'a>(p: *const c_void) -> Option<&'a Arc<Av>> {
    // SAFETY: the caller's contract (`p` NULL or a readable fid).
    unsafe { Obj::get(p, FI_CLASS_AV) }
}

/// fi_av_open, called by the domain's shim.
///
/// # Safety
/// `attr` must be NULL or point to a readable fi_av_attr.
pub unsafe fn open(dom: &Arc<Domain>, attr: *mut fi_av_attr, ctx: *mut c_void) -> Result<*mut fid_av, i32> {
    // SAFETY: the caller's contract (`attr` NULL or a readable fi_av_attr).
    let a = unsafe { attr.as_ref() }.ok_or(-FI_EINVAL)?;
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
        addrlen,
        inner: RwLock::new(AvInner::new(
            addrlen == std::mem::size_of::<libc::sockaddr_in>(),
            a.count,
        )),
        generation: AtomicU64::new(0),
        listeners: Mutex::new(Vec::new()),
    });
    let c = fid_av {
        fid: fid_header(FI_CLASS_AV, ctx, AV_FI_OPS.ptr()),
        ops: AV_OPS.ptr(),
    };
    Ok(Obj::create(c, av))
}

unsafe extern "C" fn close(f: *mut fid) -> i32 {
    abi_guard!("close", -FI_EOTHER, || {
        // SAFETY: `f` is the application's fid, or NULL (fi_close(3)).
        unsafe { crate::fid::close_unless_busy::<fid_av, Av>(f, FI_CLASS_AV, FI_LOG_AV, "endpoints bound to the AV") }
    })
}

const INSERT_FLAGS: u64 = FI_MORE | FI_SYNC_ERR;

/// Records per-address results the way fi_av_insert(3) asks.
///
/// # Safety
/// `fi_addr` must be NULL or writable for `addrs.len()` addresses, and with
/// FI_SYNC_ERR `ctx` NULL or writable for `addrs.len()` ints.
unsafe fn insert_all(av: &Av, addrs: &[Option<SocketAddr>], fi_addr: *mut u64, flags: u64, ctx: *mut c_void) -> i32 {
    let mut n = 0;
    let mut learned = Vec::new();
    for (k, a) in addrs.iter().enumerate() {
        let res = match a {
            Some(s) => {
                n += 1;
                learned.push(*s);
                Ok(av.insert_addr(*s))
            }
            None => Err(FI_EINVAL),
        };
        if !fi_addr.is_null() {
            // SAFETY: k < addrs.len(), the caller's bound on `fi_addr`.
            unsafe { *fi_addr.add(k) = *res.as_ref().unwrap_or(&FI_ADDR_NOTAVAIL) };
        }
        if flags & FI_SYNC_ERR != 0 && !ctx.is_null() {
            let code = match res {
                Ok(_) => 0,
                Err(e) => e,
            };
            // SAFETY: with FI_SYNC_ERR, `ctx` is an int array of the
            // addresses' count (fi_av_insert(3)); k < addrs.len().
            unsafe { *(ctx as *mut i32).add(k) = code };
        }
    }
    av.tell(&learned);
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
    abi_guard!("insert", -FI_EOTHER, || {
        // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
        let Some(av) = (unsafe { from_fid(f as *const c_void) }) else {
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
                // SAFETY: fi_av_insert(3): `addr` holds `count` addresses of
                // the AV's address length; k < count.
                let s = unsafe { sockaddr_to_std((addr as *const u8).add(k * av.addrlen), av.addrlen) }
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
        // SAFETY: fi_av_insert(3): `fi_addr` is NULL or holds `count` entries,
        // and so does `ctx` with FI_SYNC_ERR; addrs.len() == count.
        unsafe { insert_all(av, &addrs, fi_addr, flags, ctx) }
    })
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
    abi_guard!("insertsvc", -FI_EOTHER, || {
        // SAFETY: fi_av_insertsvc(3) is fi_av_insertsym with one node and one service.
        unsafe { insertsym(f, node, 1, service, 1, fi_addr, flags, ctx) }
    })
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
    abi_guard!("insertsym", -FI_EOTHER, || {
        // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
        let Some(av) = (unsafe { from_fid(f as *const c_void) }) else {
            return -FI_EINVAL;
        };
        if node.is_null() || service.is_null() {
            crate::warn!(FI_LOG_AV, "fi_av_insertsvc/insertsym: NULL node or service");
            return -FI_EINVAL;
        }
        if flags & !INSERT_FLAGS != 0 {
            return -FI_EBADFLAGS;
        }
        // SAFETY: both are the application's NUL-terminated strings (checked non-NULL above).
        let (node, service) = unsafe { (CStr::from_ptr(node), CStr::from_ptr(service)) };
        let (node, service) = (node.to_string_lossy(), service.to_string_lossy());
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
        // SAFETY: fi_av_insertsym(3): `fi_addr` (and `ctx` with FI_SYNC_ERR)
        // hold nodecnt * svccnt entries, which is addrs.len().
        unsafe { insert_all(av, &addrs, fi_addr, flags, ctx) }
    })
}

unsafe extern "C" fn remove(f: *mut fid_av, fi_addr: *mut u64, count: usize, flags: u64) -> i32 {
    abi_guard!("remove", -FI_EOTHER, || {
        // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
        let Some(av) = (unsafe { from_fid(f as *const c_void) }) else {
            return -FI_EINVAL;
        };
        if flags != 0 {
            return -FI_EBADFLAGS;
        }
        if count > 0 && fi_addr.is_null() {
            return -FI_EINVAL;
        }
        let mut ret = 0;
        // SAFETY: fi_av_remove(3): `fi_addr` holds `count` addresses (non-NULL, checked above).
        let addrs = unsafe { std::slice::from_raw_parts(fi_addr, count) };
        for &a in addrs {
            if !av.remove(a) {
                crate::warn!(FI_LOG_AV, "fi_av_remove: fi_addr {} is not in the AV", a);
                ret = -FI_EINVAL;
            }
        }
        ret
    })
}

unsafe extern "C" fn lookup(f: *mut fid_av, a: u64, addr: *mut c_void, addrlen: *mut usize) -> i32 {
    abi_guard!("lookup", -FI_EOTHER, || {
        // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
        let Some(av) = (unsafe { from_fid(f as *const c_void) }) else {
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
        // SAFETY: fi_av_lookup(3): `addrlen` (non-NULL, checked above) is
        // in/out, and `addr` is NULL or holds *addrlen bytes.
        unsafe {
            let n = bytes.len().min(*addrlen);
            if n > 0 && !addr.is_null() {
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), addr as *mut u8, n);
            }
            *addrlen = bytes.len();
        }
        0
    })
}

/// libfabric's string form of a sockaddr address.
pub fn addr_string(s: &SocketAddr) -> String {
    match s {
        SocketAddr::V4(_) => format!("fi_sockaddr_in://{}", s),
        SocketAddr::V6(_) => format!("fi_sockaddr_in6://{}", s),
    }
}

unsafe extern "C" fn straddr(f: *mut fid_av, addr: *const c_void, buf: *mut c_char, len: *mut usize) -> *const c_char {
    abi_guard!("straddr", std::ptr::null(), || {
        // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
        let Some(av) = (unsafe { from_fid(f as *const c_void) }) else {
            return std::ptr::null();
        };
        if len.is_null() {
            return std::ptr::null();
        }
        // SAFETY: fi_av_straddr(3): `addr` is an address of the AV's format.
        let s = match unsafe { sockaddr_to_std(addr as *const u8, av.addrlen) } {
            Some(s) => addr_string(&s),
            None => "fi_addr_format_unknown".to_string(),
        };
        let want = s.len() + 1;
        // SAFETY: fi_av_straddr(3): `len` (non-NULL, checked above) is in/out
        // and `buf` is NULL or holds *len bytes; we write n + 1 <= *len.
        unsafe {
            if !buf.is_null() && *len > 0 {
                let n = s.len().min(*len - 1);
                std::ptr::copy_nonoverlapping(s.as_ptr(), buf as *mut u8, n);
                *buf.add(n) = 0;
            }
            *len = want;
        }
        buf
    })
}

unsafe extern "C" fn bind(_f: *mut fid, _b: *mut fid, _flags: u64) -> i32 {
    abi_guard!("bind", -FI_EOTHER, || {
        crate::warn!(
            FI_LOG_AV,
            "fi_av_bind: only asynchronous (FI_EVENT) AVs bind an EQ; gnix AVs are synchronous"
        );
        -FI_ENOSYS
    })
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
    av_set: Some(av_set),
});

/// fi_av_set: a collective group's membership (`coll::av_set`).
unsafe extern "C" fn av_set(
    f: *mut fid_av,
    attr: *mut fi_av_set_attr,
    set: *mut *mut fid_av_set,
    ctx: *mut c_void,
) -> i32 {
    abi_guard!("av_set", -FI_EOTHER, || {
        // SAFETY: a fid the application holds, or NULL; `from_fid` checks class and magic.
        let Some(av) = (unsafe { from_fid(f as *const c_void) }) else {
            return -FI_EINVAL;
        };
        if set.is_null() {
            return -FI_EINVAL;
        }
        // SAFETY: fi_av_set(3): `attr` is NULL or the application's attributes.
        match unsafe { crate::coll::av_set::open(av, attr, ctx) } {
            Ok(p) => {
                // SAFETY: `set` (non-NULL) is the application's out pointer.
                unsafe { *set = p };
                0
            }
            Err(e) => e,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The compact table and its index against a model, with duplicate
    /// inserts, removals and growth, for both families.
    #[test]
    fn compact_table_matches_model() {
        for v4 in [true, false] {
            let mut t = AvInner::new(v4, 8);
            // position -> (address, references) while present
            let mut model: Vec<Option<(SocketAddr, u32)>> = Vec::new();
            let mut rng = crate::rng::SplitMix::new(0x1234_5678);
            for _ in 0..20_000 {
                let r = rng.next_u64();
                if !r.is_multiple_of(4) || model.is_empty() {
                    let k = (r >> 8) % 3000; // small space: many duplicates
                    let ip = std::net::Ipv4Addr::from(0x0a00_0000 + (k as u32 / 7));
                    let s = if v4 {
                        SocketAddr::from((ip, 1000 + (k % 7) as u16))
                    } else {
                        SocketAddr::from((ip.to_ipv6_mapped(), 1000 + (k % 7) as u16))
                    };
                    match model.iter().position(|e| e.is_some_and(|(a, _)| a == s)) {
                        Some(p) => {
                            assert_eq!(t.add(s), p, "a duplicate insert returns the fi_addr {s} has");
                            model[p].as_mut().unwrap().1 += 1;
                        }
                        None => {
                            assert_eq!(t.add(s), model.len());
                            model.push(Some((s, 1)));
                        }
                    }
                } else {
                    let a = (r >> 8) as usize % model.len();
                    assert_eq!(t.remove_at(a), model[a].is_some());
                    if let Some((_, refs)) = model[a].as_mut() {
                        *refs -= 1;
                        if *refs == 0 {
                            model[a] = None;
                        }
                    }
                }
            }
            for (k, m) in model.iter().enumerate() {
                assert_eq!(t.get(k), m.map(|(s, _)| s));
                if let Some((s, _)) = m {
                    let b = t.find(s).expect("present address indexed");
                    assert_eq!(t.index[b] as usize, k, "FI_SOURCE names the fi_addr of {s}");
                }
            }
            assert_eq!(t.indexed, model.iter().flatten().count());
        }
    }

    #[test]
    fn duplicate_insert_takes_a_reference() {
        let mut t = AvInner::new(true, 4);
        let a: SocketAddr = "10.0.0.1:5000".parse().unwrap();
        let b: SocketAddr = "10.0.0.2:5000".parse().unwrap();
        assert_eq!((t.add(a), t.add(b), t.add(a)), (0, 1, 0));
        assert!(t.remove_at(0), "first of two references");
        assert_eq!(t.get(0), Some(a), "one reference left");
        assert_eq!(t.find(&a).map(|x| t.index[x]), Some(0));
        assert!(t.remove_at(0), "last reference");
        assert_eq!(t.get(0), None);
        assert!(!t.remove_at(0), "nothing left to remove");
        assert_eq!(t.find(&a), None);
        assert_eq!(t.add(a), 2, "re-inserted after removal: a new fi_addr");
        assert_eq!(t.get(1), Some(b));
    }
}
