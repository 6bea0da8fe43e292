//! `fi_getinfo`: what gnix offers, matched honestly against the hints.
//!
//! One info per usable network interface (the domain); the endpoint's
//! address is a UDP socket bound to that interface's IP. Anything in the
//! hints that gnix cannot meet rejects that info (`-FI_ENODATA` overall),
//! never a silently weaker answer.

use crate::ffi::*;
use crate::params::params;
use std::ffi::{c_char, CStr};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, ToSocketAddrs, UdpSocket};

/// All 64 tag bits match (the value libfabric calls FI_TAG_GENERIC). MPI
/// libraries size their tag layout from the highest set bit, so 0 ("no
/// format") would tell Open MPI there is no room for a communicator id.
pub const MEM_TAG_FORMAT: u64 = 0xAAAA_AAAA_AAAA_AAAA;

pub const PRIMARY_CAPS: u64 = FI_MSG | FI_TAGGED | FI_RMA | FI_ATOMIC | FI_COLLECTIVE | FI_SEND | FI_RECV;
/// One-sided roles: initiator (FI_READ, FI_WRITE) and target
/// (FI_REMOTE_READ, FI_REMOTE_WRITE); naming none means all four.
pub const RMA_ROLES: u64 = FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
/// FI_RMA_EVENT: peers' accesses count on the endpoint's FI_REMOTE_READ /
/// FI_REMOTE_WRITE counters and on counters bound to the region.
pub const SECONDARY_CAPS: u64 = FI_SOURCE
    | FI_SOURCE_ERR
    | FI_DIRECTED_RECV
    | FI_MULTI_RECV
    | FI_LOCAL_COMM
    | FI_REMOTE_COMM
    | RMA_ROLES
    | FI_RMA_EVENT
    | FI_TRIGGER;
pub const CAPS: u64 = PRIMARY_CAPS | SECONDARY_CAPS;
/// What an info says when the hints name no capabilities (NULL hints, or
/// caps 0): everything but `FI_SOURCE_ERR`. That one changes what the
/// application sees (a message from a peer missing in the AV completes as
/// an `FI_EADDRNOTAVAIL` error instead of a receive), so it must be asked
/// for: applications copy an unhinted info's caps into their hints (MPICH
/// does, `hints->caps = prov->caps` in ch4 ofi's `find_provider`), and its
/// `MPI_Comm_accept` receives from a process not yet in its AV. The cxi
/// provider leaves it out the same way.
pub const UNREQUESTED_CAPS: u64 = CAPS & !FI_SOURCE_ERR;
/// FI_LOCAL_COMM/FI_REMOTE_COMM are domain-level: they belong in info and
/// domain caps, not in tx/rx caps (fabtests getinfo_caps checks this).
pub const TX_CAPS: u64 =
    FI_MSG | FI_TAGGED | FI_RMA | FI_ATOMIC | FI_COLLECTIVE | FI_SEND | FI_READ | FI_WRITE | FI_TRIGGER;
pub const RX_CAPS: u64 = FI_MSG
    | FI_TAGGED
    | FI_RMA
    | FI_ATOMIC
    | FI_COLLECTIVE
    | FI_RECV
    | FI_REMOTE_READ
    | FI_REMOTE_WRITE
    | FI_RMA_EVENT
    | FI_SOURCE
    | FI_SOURCE_ERR
    | FI_DIRECTED_RECV
    | FI_MULTI_RECV;
pub const DOMAIN_CAPS: u64 = FI_LOCAL_COMM | FI_REMOTE_COMM;
/// Operation flags an application may set as endpoint defaults.
pub const TX_OP_FLAGS: u64 =
    FI_COMPLETION | FI_INJECT | FI_INJECT_COMPLETE | FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE | FI_MORE | FI_TRIGGER;
pub const RX_OP_FLAGS: u64 = FI_COMPLETION | FI_MULTI_RECV | FI_TRIGGER;
/// Per peer, messages are delivered in send order (SAS); one-sided
/// operations up to `max_order_size()` bytes take effect at the target in
/// the order they were sent, whether RMA or atomic (the target's lanes,
/// `ep/rma.rs`).
pub const RMA_ORDER: u64 = FI_ORDER_RAR
    | FI_ORDER_RAW
    | FI_ORDER_WAR
    | FI_ORDER_WAW
    | FI_ORDER_RMA_RAR
    | FI_ORDER_RMA_RAW
    | FI_ORDER_RMA_WAR
    | FI_ORDER_RMA_WAW
    | FI_ORDER_ATOMIC_RAR
    | FI_ORDER_ATOMIC_RAW
    | FI_ORDER_ATOMIC_WAR
    | FI_ORDER_ATOMIC_WAW;
pub const MSG_ORDER: u64 = FI_ORDER_SAS | RMA_ORDER;

/// `max_order_raw_size`, `max_order_war_size` and `max_order_waw_size`:
/// the largest one-sided operation that travels in one eager message of
/// either wire with its request head, so that the target applies it on
/// arrival and ordering it costs no wait (larger ones would be ordered
/// too, but would hold the ones behind them until their data is in).
pub fn max_order_size() -> usize {
    let p = params();
    let eager = if p.shm {
        // What goes eagerly to every local peer, under our cache or not.
        let geo = p.shm_geometry();
        let far = crate::nic::shm::cache::span_to(geo.span, false);
        p.rndv_threshold.min(geo.with_span(far).msg_max())
    } else {
        p.rndv_threshold
    };
    eager.saturating_sub(crate::nic::onesided::HEAD_LEN)
}

/// The ordering offered: none of the one-sided kinds when no size is.
fn msg_order() -> u64 {
    if max_order_size() > 0 {
        MSG_ORDER
    } else {
        FI_ORDER_SAS
    }
}

pub const MAX_INJECT: usize = 4096;
pub const MAX_IOV: usize = 16;
pub const MAX_QUEUE: usize = 1 << 16;
pub const MAX_MSG_SIZE: usize = 1 << 40;
pub const MAX_EP: usize = 1024;
pub const MAX_CQ: usize = 1024;
pub const MAX_CNTR: usize = 1024;
pub const MAX_MR: usize = 1 << 16;
pub const MR_IOV_LIMIT: usize = MAX_IOV;
/// FI_SOURCE_ERR hands the raw source address back as err_data.
pub const MAX_ERR_DATA: usize = std::mem::size_of::<libc::sockaddr_in6>();

/// A network interface gnix can bind endpoints to: one domain each.
#[derive(Clone, Debug)]
pub struct Iface {
    pub name: String,
    pub ip: IpAddr,
    pub prefix: u8,
    pub loopback: bool,
}

impl Iface {
    /// The fabric an interface belongs to is its IP network, as with
    /// libfabric's tcp and udp providers ("192.0.2.0/24"): endpoints in
    /// different fabrics cannot be assumed to reach each other, and
    /// applications that spread ranks over "equivalent" infos (Open MPI)
    /// only treat infos of one fabric as equivalent.
    pub fn fabric_name(&self) -> String {
        let net = match self.ip {
            IpAddr::V4(v4) => {
                let mask = if self.prefix == 0 {
                    0
                } else {
                    u32::MAX << (32 - self.prefix.min(32))
                };
                IpAddr::V4((u32::from(v4) & mask).into())
            }
            IpAddr::V6(v6) => {
                let mask = if self.prefix == 0 {
                    0
                } else {
                    u128::MAX << (128 - self.prefix.min(128) as u32)
                };
                IpAddr::V6((u128::from(v6) & mask).into())
            }
        };
        format!("{}/{}", net, self.prefix)
    }
}

/// Whether `name` is the fabric of one of this host's interfaces.
pub fn is_fabric_name(name: &str) -> bool {
    interfaces().iter().any(|i| i.fabric_name() == name)
}

fn prefix_len(mask: Option<SocketAddr>) -> u8 {
    match mask.map(|m| m.ip()) {
        Some(IpAddr::V4(m)) => u32::from(m).count_ones() as u8,
        Some(IpAddr::V6(m)) => u128::from(m).count_ones() as u8,
        None => 0,
    }
}

/// Interfaces that are up and have an IPv4/IPv6 address, loopback last
/// (a server that names no address should be reachable from other hosts).
pub fn interfaces() -> Vec<Iface> {
    let mut out = Vec::new();
    let mut ifap: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs allocates a list we walk read-only and then free.
    unsafe {
        if libc::getifaddrs(&mut ifap) != 0 {
            return out;
        }
        let mut p = ifap;
        while !p.is_null() {
            let ifa = &*p;
            p = ifa.ifa_next;
            if ifa.ifa_addr.is_null() || ifa.ifa_flags & libc::IFF_UP as u32 == 0 {
                continue;
            }
            let Some(sa) = sockaddr_to_std(ifa.ifa_addr as *const u8, 128) else {
                continue;
            };
            if let IpAddr::V6(v6) = sa.ip() {
                // Link-local addresses need a scope id on every use: skip.
                if v6.segments()[0] & 0xffc0 == 0xfe80 {
                    continue;
                }
            }
            let name = CStr::from_ptr(ifa.ifa_name).to_string_lossy().into_owned();
            let mask = if ifa.ifa_netmask.is_null() {
                None
            } else {
                // The netmask has no family set on some kernels: read it as the address's.
                let mut m = [0u8; 128];
                let len = if sa.is_ipv4() { 16 } else { 28 };
                std::ptr::copy_nonoverlapping(ifa.ifa_netmask as *const u8, m.as_mut_ptr(), len);
                m[..2]
                    .copy_from_slice(&(if sa.is_ipv4() { libc::AF_INET } else { libc::AF_INET6 } as u16).to_ne_bytes());
                sockaddr_to_std(m.as_ptr(), len)
            };
            out.push(Iface {
                name,
                ip: sa.ip(),
                prefix: prefix_len(mask),
                loopback: ifa.ifa_flags & libc::IFF_LOOPBACK as u32 != 0,
            });
        }
        libc::freeifaddrs(ifap);
    }
    if let Some(want) = &params().iface {
        out.retain(|i| &i.name == want);
    }
    // IPv4 first (the default address format), non-loopback first.
    out.sort_by_key(|i| (i.ip.is_ipv6(), i.loopback));
    out
}

/// Parses a `struct sockaddr_in`/`sockaddr_in6` of at most `len` bytes.
///
/// # Safety
/// `p` must point to at least `len` readable bytes.
pub unsafe fn sockaddr_to_std(p: *const u8, len: usize) -> Option<SocketAddr> {
    if p.is_null() || len < std::mem::size_of::<libc::sockaddr_in>() {
        return None;
    }
    // SAFETY: the caller's contract: `p` holds `len` >= sizeof(sockaddr_in) bytes, which cover the family and a sockaddr_in.
    let family = unsafe { std::ptr::read_unaligned(p as *const libc::sa_family_t) } as i32;
    match family {
        libc::AF_INET => {
            let sin = unsafe { std::ptr::read_unaligned(p as *const libc::sockaddr_in) };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)),
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 if len >= std::mem::size_of::<libc::sockaddr_in6>() => {
            // SAFETY: `len` covers a sockaddr_in6 (matched above).
            let sin6 = unsafe { std::ptr::read_unaligned(p as *const libc::sockaddr_in6) };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// The C form of an address, as `fi_getname` and `fi_info` carry it.
pub fn std_to_sockaddr(a: &SocketAddr) -> Vec<u8> {
    match a {
        SocketAddr::V4(v4) => {
            // SAFETY: sockaddr_in is plain old data; all-zero is valid.
            let mut sin: libc::sockaddr_in = unsafe { std::mem::zeroed() };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = v4.port().to_be();
            sin.sin_addr.s_addr = u32::from(*v4.ip()).to_be();
            as_bytes(&sin)
        }
        SocketAddr::V6(v6) => {
            // SAFETY: as above.
            let mut sin6: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = v6.port().to_be();
            sin6.sin6_addr.s6_addr = v6.ip().octets();
            sin6.sin6_flowinfo = v6.flowinfo();
            sin6.sin6_scope_id = v6.scope_id();
            as_bytes(&sin6)
        }
    }
}

fn as_bytes<T>(t: &T) -> Vec<u8> {
    // SAFETY: T is a plain C struct without padding-sensitive invariants;
    // we copy exactly its size.
    unsafe { std::slice::from_raw_parts(t as *const T as *const u8, std::mem::size_of::<T>()).to_vec() }
}

pub fn addr_format_of(a: &SocketAddr) -> u32 {
    match a {
        SocketAddr::V4(_) => FI_SOCKADDR_IN,
        SocketAddr::V6(_) => FI_SOCKADDR_IN6,
    }
}

/// The local address the kernel would use to reach `dest`.
fn route_source(dest: &SocketAddr) -> Option<IpAddr> {
    let bind: SocketAddr = match dest {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let s = UdpSocket::bind(bind).ok()?;
    let mut d = *dest;
    if d.port() == 0 {
        d.set_port(9);
    }
    s.connect(d).ok()?;
    s.local_addr().ok().map(|a| a.ip())
}

fn resolve(node: Option<&str>, service: Option<&str>, numeric: bool, passive: bool) -> Result<Vec<SocketAddr>, i32> {
    let port: u16 = match service {
        None => 0,
        Some(s) => s.parse().map_err(|_| {
            crate::warn!(FI_LOG_CORE, "service '{}' is not a port number", s);
            -FI_ENODATA
        })?,
    };
    let host = match node {
        Some(h) => h.to_string(),
        None if passive => return Ok(vec![]),
        None => "127.0.0.1".to_string(),
    };
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    if numeric {
        crate::warn!(FI_LOG_CORE, "FI_NUMERICHOST but '{}' is not a numeric address", host);
        return Err(-FI_ENODATA);
    }
    (host.as_str(), port)
        .to_socket_addrs()
        .map(|it| it.collect())
        .map_err(|e| {
            crate::warn!(FI_LOG_CORE, "cannot resolve '{}': {}", host, e);
            -FI_ENODATA
        })
}

/// What one returned info will say, before it is written into core memory.
#[derive(Clone, Debug)]
pub struct Offer {
    pub iface: Iface,
    pub src: SocketAddr,
    pub dest: Option<SocketAddr>,
    pub caps: u64,
    pub mode: u64,
    pub tx_op_flags: u64,
    pub rx_op_flags: u64,
    pub msg_order: u64,
    pub comp_order: u64,
    /// max_order_raw/war/waw_size (the endpoint orders up to the largest).
    pub max_order_size: usize,
    pub inject_size: usize,
    pub tx_size: usize,
    pub rx_size: usize,
    pub tx_iov_limit: usize,
    pub rx_iov_limit: usize,
    pub max_msg_size: usize,
    pub mem_tag_format: u64,
    pub threading: u32,
    pub control_progress: u32,
    pub data_progress: u32,
    pub resource_mgmt: u32,
    pub av_type: u32,
    pub mr_mode: i32,
    pub cq_data_size: usize,
}

fn reject(why: std::fmt::Arguments) -> i32 {
    crate::info!(FI_LOG_CORE, "hints not met: {}", why);
    -FI_ENODATA
}
macro_rules! nomatch {
    ($($a:tt)*) => { return Err(reject(format_args!($($a)*))) };
}

/// Narrow an offer by the hints. `Err(-FI_ENODATA)` if it cannot be met.
///
/// # Safety
/// `hints` must be NULL or a valid `fi_info` whose attr pointers are NULL or valid.
unsafe fn apply_hints(o: &mut Offer, h: *const fi_info, version: u32) -> Result<(), i32> {
    // SAFETY: the caller's contract: `hints` NULL or a valid fi_info whose attr pointers are NULL or valid.
    let Some(h) = (unsafe { h.as_ref() }) else {
        return Ok(());
    };
    if h.caps & !CAPS != 0 {
        nomatch!("caps {:#x} not supported", h.caps & !CAPS);
    }
    if h.caps != 0 {
        let mut caps = h.caps;
        if caps & (FI_MSG | FI_TAGGED | FI_RMA | FI_ATOMIC) == 0 {
            // Secondary caps alone: the primary ones come with them.
            caps |= FI_MSG | FI_TAGGED | if caps & RMA_ROLES != 0 { FI_RMA } else { 0 };
        }
        if caps & (FI_SEND | FI_RECV) == 0 {
            caps |= FI_SEND | FI_RECV;
        }
        if caps & FI_SOURCE_ERR != 0 && caps & FI_SOURCE == 0 {
            nomatch!("FI_SOURCE_ERR without FI_SOURCE");
        }
        if caps & (FI_LOCAL_COMM | FI_REMOTE_COMM) == 0 {
            caps |= FI_LOCAL_COMM | FI_REMOTE_COMM;
        }
        o.caps = caps;
    }
    // Modes are what the application agrees to do for us; gnix asks none,
    // so every hints mode is acceptable and we return 0.
    o.mode = 0;
    match h.addr_format {
        FI_FORMAT_UNSPEC | FI_SOCKADDR => {}
        f if f == addr_format_of(&o.src) => {}
        f => nomatch!("addr_format {} (gnix has {})", f, addr_format_of(&o.src)),
    }
    // SAFETY: as for `h`: each attr pointer is NULL or valid.
    if let Some(ep) = unsafe { h.ep_attr.as_ref() } {
        if ep.type_ != FI_EP_UNSPEC && ep.type_ != FI_EP_RDM {
            nomatch!("ep_type {} (gnix offers FI_EP_RDM)", ep.type_);
        }
        if ep.protocol != FI_PROTO_UNSPEC {
            nomatch!("protocol {}", ep.protocol);
        }
        if ep.max_msg_size > MAX_MSG_SIZE {
            nomatch!("max_msg_size {}", ep.max_msg_size);
        }
        if ep.msg_prefix_size != 0 {
            nomatch!("msg_prefix_size");
        }
        if ep.tx_ctx_cnt > 1 || ep.rx_ctx_cnt > 1 {
            if ep.tx_ctx_cnt != FI_SHARED_CONTEXT as usize && ep.rx_ctx_cnt != FI_SHARED_CONTEXT as usize {
                nomatch!("scalable endpoint contexts");
            }
            nomatch!("shared contexts");
        }
        if ep.auth_key_size != 0 {
            nomatch!("auth_key");
        }
        if ep.mem_tag_format != 0 {
            o.mem_tag_format = ep.mem_tag_format;
        }
        let most = ep
            .max_order_raw_size
            .max(ep.max_order_war_size)
            .max(ep.max_order_waw_size);
        if most > o.max_order_size {
            nomatch!("max_order size {} > {}", most, o.max_order_size);
        }
    }
    // SAFETY: as for `h`.
    if let Some(tx) = unsafe { h.tx_attr.as_ref() } {
        if tx.caps & !(TX_CAPS | RX_CAPS | DOMAIN_CAPS) != 0 {
            nomatch!("tx caps {:#x}", tx.caps);
        }
        if tx.op_flags & !TX_OP_FLAGS != 0 {
            nomatch!("tx op_flags {:#x}", tx.op_flags & !TX_OP_FLAGS);
        }
        o.tx_op_flags = tx.op_flags;
        if tx.msg_order & !o.msg_order != 0 {
            nomatch!("tx msg_order {:#x}", tx.msg_order);
        }
        if tx.comp_order & !FI_ORDER_NONE != 0 {
            nomatch!("tx comp_order {:#x}", tx.comp_order);
        }
        if tx.inject_size > MAX_INJECT {
            nomatch!("inject_size {} > {}", tx.inject_size, MAX_INJECT);
        }
        if tx.size > MAX_QUEUE {
            nomatch!("tx size {}", tx.size);
        }
        if tx.size != 0 {
            o.tx_size = tx.size;
        }
        if tx.iov_limit > MAX_IOV {
            nomatch!("tx iov_limit {}", tx.iov_limit);
        }
        if tx.rma_iov_limit > MAX_IOV {
            nomatch!("rma_iov_limit {}", tx.rma_iov_limit);
        }
    }
    // SAFETY: as for `h`.
    if let Some(rx) = unsafe { h.rx_attr.as_ref() } {
        if rx.caps & !(TX_CAPS | RX_CAPS | DOMAIN_CAPS) != 0 {
            nomatch!("rx caps {:#x}", rx.caps);
        }
        if rx.op_flags & !RX_OP_FLAGS != 0 {
            nomatch!("rx op_flags {:#x}", rx.op_flags & !RX_OP_FLAGS);
        }
        o.rx_op_flags = rx.op_flags;
        if rx.msg_order & !o.msg_order != 0 {
            nomatch!("rx msg_order {:#x}", rx.msg_order);
        }
        if rx.comp_order & !FI_ORDER_NONE != 0 {
            nomatch!("rx comp_order {:#x}", rx.comp_order);
        }
        if rx.size > MAX_QUEUE {
            nomatch!("rx size {}", rx.size);
        }
        if rx.size != 0 {
            o.rx_size = rx.size;
        }
        if rx.iov_limit > MAX_IOV {
            nomatch!("rx iov_limit {}", rx.iov_limit);
        }
        // total_buffered_recv only means something with the FI_BUFFERED_RECV
        // mode, which gnix does not use: nothing to match.
    }
    // SAFETY: as for `h`; a non-NULL name is NUL-terminated.
    if let Some(d) = unsafe { h.domain_attr.as_ref() } {
        if !d.name.is_null() && (unsafe { CStr::from_ptr(d.name) }).to_bytes() != o.iface.name.as_bytes() {
            nomatch!("domain name");
        }
        match d.threading {
            FI_THREAD_UNSPEC => {}
            FI_THREAD_SAFE | FI_THREAD_FID | FI_THREAD_DOMAIN | FI_THREAD_COMPLETION | FI_THREAD_ENDPOINT => {
                o.threading = d.threading
            }
            t => nomatch!("threading {}", t),
        }
        for (want, got) in [
            (d.control_progress, &mut o.control_progress),
            (d.data_progress, &mut o.data_progress),
        ] {
            match want {
                FI_PROGRESS_UNSPEC => {}
                FI_PROGRESS_AUTO | FI_PROGRESS_MANUAL => *got = want,
                p => nomatch!("progress {}", p),
            }
        }
        match d.resource_mgmt {
            FI_RM_UNSPEC => {}
            FI_RM_ENABLED | FI_RM_DISABLED => o.resource_mgmt = d.resource_mgmt,
            r => nomatch!("resource_mgmt {}", r),
        }
        match d.av_type {
            FI_AV_UNSPEC => {}
            FI_AV_MAP | FI_AV_TABLE => o.av_type = d.av_type,
            a => nomatch!("av_type {}", a),
        }
        o.mr_mode = mr_mode_answer(d.mr_mode, version)?;
        if d.cq_data_size > 8 {
            nomatch!("cq_data_size {}", d.cq_data_size);
        }
        if d.caps & !DOMAIN_CAPS != 0 {
            nomatch!("domain caps {:#x}", d.caps & !DOMAIN_CAPS);
        }
        if d.auth_key_size != 0 {
            nomatch!("domain auth_key");
        }
        if d.mr_key_size > 8 {
            nomatch!("mr_key_size {} (keys are 8 bytes)", d.mr_key_size);
        }
        if d.max_err_data > MAX_ERR_DATA {
            nomatch!("max_err_data {} > {}", d.max_err_data, MAX_ERR_DATA);
        }
        // A traffic class (tx_attr or domain_attr tclass) selects a service
        // level where the fabric has several: every gnix datagram gets the
        // host's one, so any class is met as well as it can be, as libfabric's
        // own tcp and udp providers treat it (fabtests' ping-pongs ask for
        // FI_TC_LOW_LATENCY, fi_rdm_tagged_bw for FI_TC_BULK_DATA).
        let limits = [
            (d.cq_cnt, MAX_CQ),
            (d.ep_cnt, MAX_EP),
            (d.tx_ctx_cnt, MAX_EP),
            (d.rx_ctx_cnt, MAX_EP),
            (d.max_ep_tx_ctx, 1),
            (d.max_ep_rx_ctx, 1),
            (d.max_ep_stx_ctx, 0),
            (d.max_ep_srx_ctx, 0),
            (d.cntr_cnt, MAX_CNTR),
            (d.mr_iov_limit, MR_IOV_LIMIT),
            (d.mr_cnt, MAX_MR),
        ];
        if limits.iter().any(|&(want, have)| want > have) {
            nomatch!("domain resource counts");
        }
    }
    // SAFETY: as for `h`; non-NULL names are NUL-terminated.
    if let Some(f) = unsafe { h.fabric_attr.as_ref() } {
        if !f.name.is_null() && (unsafe { CStr::from_ptr(f.name) }).to_bytes() != o.iface.fabric_name().as_bytes() {
            nomatch!("fabric name");
        }
        if !f.prov_name.is_null() {
            // The core may hand us "gnix" or a layered "gnix;ofi_xxx" list.
            let pn = (unsafe { CStr::from_ptr(f.prov_name) }).to_string_lossy();
            if !pn.split(';').any(|p| p.eq_ignore_ascii_case("gnix")) {
                nomatch!("provider name {}", pn);
            }
        }
        if f.api_version != 0
            && f.api_version > crate::FI_API_VERSION
            && crate::FI_API_VERSION >> 16 == f.api_version >> 16
        {
            // A newer minor API than ours: the features it names may be unknown to us.
            crate::debug!(FI_LOG_CORE, "hints ask api {:#x}", f.api_version);
        }
    }
    if h.nic.is_null().not() {
        nomatch!("nic attributes");
    }
    Ok(())
}

trait Not {
    fn not(self) -> bool;
}
impl Not for bool {
    fn not(self) -> bool {
        !self
    }
}

/// gnix needs nothing from the application for local buffers and uses
/// application-chosen keys; it accepts any mr_mode the application can do
/// and asks for none of it (answer 0), except the pre-1.5 enum values.
fn mr_mode_answer(hint: i32, version: u32) -> Result<i32, i32> {
    if version < ((1 << 16) | 5) || hint == FI_MR_BASIC as i32 || hint == FI_MR_SCALABLE as i32 {
        return match hint as u32 {
            FI_MR_UNSPEC | FI_MR_SCALABLE => Ok(FI_MR_SCALABLE as i32),
            FI_MR_BASIC => Ok(FI_MR_BASIC as i32),
            _ if version < ((1 << 16) | 5) => Err(reject(format_args!("mr_mode {} for api < 1.5", hint))),
            _ => Ok(0),
        };
    }
    Ok(0)
}

fn base_offer(iface: &Iface, port: u16) -> Offer {
    let p = params();
    Offer {
        iface: iface.clone(),
        src: SocketAddr::new(iface.ip, port),
        dest: None,
        caps: UNREQUESTED_CAPS,
        mode: 0,
        tx_op_flags: 0,
        rx_op_flags: 0,
        msg_order: msg_order(),
        comp_order: FI_ORDER_NONE,
        max_order_size: max_order_size(),
        inject_size: MAX_INJECT,
        tx_size: p.tx_size.min(MAX_QUEUE),
        rx_size: p.rx_size.min(MAX_QUEUE),
        tx_iov_limit: MAX_IOV,
        rx_iov_limit: MAX_IOV,
        max_msg_size: MAX_MSG_SIZE,
        mem_tag_format: MEM_TAG_FORMAT,
        threading: FI_THREAD_SAFE,
        // Auto unless manual is asked for: the udp wire's sends complete
        // on their receiver's ACK, and shm rendezvous on its pull, so
        // without a thread a sender waits for its peer's next call into
        // libfabric, however long the peer computes or blocks elsewhere
        // (bench/README.md, "Manual progress as the default, tried and
        // withdrawn"; the fi_multinode times measured there were mostly
        // ranks spinning on shared CPUs, "Three ranks on two CPUs").
        control_progress: FI_PROGRESS_AUTO,
        data_progress: FI_PROGRESS_AUTO,
        resource_mgmt: FI_RM_ENABLED,
        av_type: FI_AV_UNSPEC,
        mr_mode: 0,
        cq_data_size: 8,
    }
}

/// A C string argument as `&str` (None: NULL or not UTF-8).
///
/// # Safety
/// `p` must be NULL or a NUL-terminated string that outlives `'a`.
unsafe fn opt_str<'a>(p: *const c_char) -> Option<&'a str> {
    if p.is_null() {
        None
    } else {
        // SAFETY: the caller's contract: `p` is NULL or NUL-terminated (not NULL here).
        (unsafe { CStr::from_ptr(p) }).to_str().ok()
    }
}

/// Builds the list of offers for a getinfo call (pure: no core memory).
///
/// # Safety
/// Pointer arguments as for `fi_getinfo`.
pub unsafe fn offers(
    version: u32,
    node: *const c_char,
    service: *const c_char,
    flags: u64,
    hints: *const fi_info,
) -> Result<Vec<Offer>, i32> {
    // SAFETY: fi_getinfo(3): `node` and `service` are NULL or NUL-terminated strings.
    let node = unsafe { opt_str(node) };
    let service = unsafe { opt_str(service) };
    let numeric = flags & FI_NUMERICHOST != 0;
    let ifaces = interfaces();
    if ifaces.is_empty() {
        crate::warn!(FI_LOG_CORE, "no usable network interface");
        return Err(-FI_ENODATA);
    }
    // SAFETY: fi_getinfo(3): `hints` is NULL or a valid fi_info; its addresses hold their addrlen bytes.
    let h = unsafe { hints.as_ref() };
    let hint_src = h.and_then(|h| unsafe { sockaddr_to_std(h.src_addr as *const u8, h.src_addrlen) });
    let hint_dest = h.and_then(|h| unsafe { sockaddr_to_std(h.dest_addr as *const u8, h.dest_addrlen) });
    if let Some(h) = h {
        if (!h.src_addr.is_null() && hint_src.is_none()) || (!h.dest_addr.is_null() && hint_dest.is_none()) {
            crate::info!(
                FI_LOG_CORE,
                "hints carry an address gnix cannot read (format {})",
                h.addr_format
            );
            return Err(-FI_ENODATA);
        }
    }

    // (interface, port, dest) candidates.
    let mut src_ip: Option<IpAddr> = hint_src.map(|a| a.ip());
    let mut src_port: u16 = hint_src.map(|a| a.port()).unwrap_or(0);
    let mut dest: Option<SocketAddr> = hint_dest;
    if node.is_some() || service.is_some() {
        if flags & FI_SOURCE != 0 {
            let addrs = resolve(node, service, numeric, true)?;
            src_port = service.map(|_| 0).unwrap_or(src_port);
            if let Some(s) = service {
                src_port = s.parse().unwrap_or(0);
            }
            if let Some(a) = addrs.first() {
                src_ip = Some(a.ip());
            }
        } else {
            let addrs = resolve(node, service, numeric, false)?;
            // The family the hints ask for; else IPv4 if the name has one.
            let v6 = match h.map_or(FI_FORMAT_UNSPEC, |h| h.addr_format) {
                FI_SOCKADDR_IN6 => Some(true),
                FI_SOCKADDR_IN => Some(false),
                _ => None,
            };
            let pick = match v6 {
                Some(v6) => addrs.iter().find(|a| a.is_ipv6() == v6),
                None => addrs.iter().find(|a| a.is_ipv4()).or(addrs.first()),
            };
            dest = pick.copied().or(dest);
            if dest.is_none() {
                return Err(-FI_ENODATA);
            }
        }
    }
    if src_ip.is_none() {
        if let Some(d) = dest {
            src_ip = route_source(&d);
            if src_ip.is_none() {
                crate::warn!(FI_LOG_CORE, "no route to {}", d);
                return Err(-FI_ENODATA);
            }
        }
    }
    let candidates: Vec<&Iface> = match src_ip {
        Some(ip) if !ip.is_unspecified() => {
            let v: Vec<&Iface> = ifaces.iter().filter(|i| i.ip == ip).collect();
            if v.is_empty() {
                crate::info!(FI_LOG_CORE, "{} is not an address of this host", ip);
                return Err(-FI_ENODATA);
            }
            v
        }
        _ => ifaces.iter().collect(),
    };
    let mut out = Vec::new();
    for iface in candidates {
        let mut o = base_offer(iface, src_port);
        o.dest = dest;
        if let Some(d) = dest {
            if d.is_ipv4() != iface.ip.is_ipv4() {
                continue;
            }
        }
        // SAFETY: `hints` as checked by the caller's contract (fi_getinfo(3)).
        if (unsafe { apply_hints(&mut o, hints, version) }).is_ok() {
            out.push(o);
        }
    }
    if out.is_empty() {
        return Err(-FI_ENODATA);
    }
    Ok(out)
}

/// Writes one offer into a core-allocated `fi_info`.
///
/// # Safety
/// `i` must come from `core::alloc_info` (all attr pointers valid).
unsafe fn fill(i: *mut fi_info, o: &Offer, version: u32) {
    // SAFETY: the caller's contract: `i` comes from alloc_info, with every attr pointer valid and ours to fill.
    let info = unsafe { &mut *i };
    info.caps = o.caps;
    info.mode = o.mode;
    info.addr_format = addr_format_of(&o.src);
    let src = std_to_sockaddr(&o.src);
    info.src_addr = dup_bytes(&src);
    info.src_addrlen = src.len();
    if let Some(d) = &o.dest {
        let dest = std_to_sockaddr(d);
        info.dest_addr = dup_bytes(&dest);
        info.dest_addrlen = dest.len();
    }
    let tx = unsafe { &mut *info.tx_attr };
    tx.caps = o.caps & TX_CAPS;
    tx.mode = o.mode;
    tx.op_flags = o.tx_op_flags;
    tx.msg_order = o.msg_order;
    tx.comp_order = o.comp_order;
    tx.inject_size = o.inject_size;
    tx.size = o.tx_size;
    tx.iov_limit = o.tx_iov_limit;
    tx.rma_iov_limit = if o.caps & FI_RMA != 0 { MAX_IOV } else { 0 };
    let rx = unsafe { &mut *info.rx_attr };
    rx.caps = o.caps & RX_CAPS;
    rx.mode = o.mode;
    rx.op_flags = o.rx_op_flags;
    rx.msg_order = o.msg_order;
    rx.comp_order = o.comp_order;
    rx.total_buffered_recv = 0;
    rx.size = o.rx_size;
    rx.iov_limit = o.rx_iov_limit;
    let ep = unsafe { &mut *info.ep_attr };
    ep.type_ = FI_EP_RDM;
    ep.protocol = FI_PROTO_UNSPEC;
    ep.protocol_version = 1;
    ep.max_msg_size = o.max_msg_size;
    ep.mem_tag_format = o.mem_tag_format;
    ep.tx_ctx_cnt = 1;
    ep.rx_ctx_cnt = 1;
    ep.max_order_raw_size = o.max_order_size;
    ep.max_order_war_size = o.max_order_size;
    ep.max_order_waw_size = o.max_order_size;
    let d = unsafe { &mut *info.domain_attr };
    d.name = crate::core::c_strdup(&o.iface.name);
    d.threading = o.threading;
    d.control_progress = o.control_progress;
    d.data_progress = o.data_progress;
    d.resource_mgmt = o.resource_mgmt;
    d.av_type = o.av_type;
    d.mr_mode = o.mr_mode;
    d.mr_key_size = 8;
    d.cq_data_size = o.cq_data_size;
    d.cq_cnt = MAX_CQ;
    d.ep_cnt = MAX_EP;
    d.tx_ctx_cnt = MAX_EP;
    d.rx_ctx_cnt = MAX_EP;
    d.max_ep_tx_ctx = 1;
    d.max_ep_rx_ctx = 1;
    d.max_ep_stx_ctx = 0;
    d.max_ep_srx_ctx = 0;
    d.cntr_cnt = MAX_CNTR;
    d.mr_iov_limit = MR_IOV_LIMIT;
    d.caps = o.caps & DOMAIN_CAPS;
    d.mode = 0;
    d.max_err_data = MAX_ERR_DATA;
    d.mr_cnt = MAX_MR;
    let f = unsafe { &mut *info.fabric_attr };
    f.name = crate::core::c_strdup(&o.iface.fabric_name());
    f.prov_version = crate::PROVIDER_VERSION;
    f.api_version = version.min(crate::api_version()).max(1 << 16);
}

fn dup_bytes(b: &[u8]) -> *mut std::ffi::c_void {
    // SAFETY: malloc'd so that the core's fi_freeinfo can free() it.
    unsafe {
        let p = libc::malloc(b.len()) as *mut u8;
        if !p.is_null() {
            std::ptr::copy_nonoverlapping(b.as_ptr(), p, b.len());
        }
        p as *mut std::ffi::c_void
    }
}

/// The provider's `getinfo` entry point.
pub unsafe extern "C" fn gnix_getinfo(
    version: u32,
    node: *const c_char,
    service: *const c_char,
    flags: u64,
    hints: *const fi_info,
    info: *mut *mut fi_info,
) -> i32 {
    abi_guard!("gnix_getinfo", -FI_EOTHER, || {
        if info.is_null() {
            return -FI_EINVAL;
        }
        // SAFETY: `info` is the core's result slot, non-NULL (checked above).
        unsafe { *info = std::ptr::null_mut() };
        // SAFETY: the core passes the application's fi_getinfo arguments (fi_getinfo(3)).
        let offers = match unsafe { offers(version, node, service, flags, hints) } {
            Ok(o) => o,
            Err(e) => return e,
        };
        let mut head: *mut fi_info = std::ptr::null_mut();
        let mut tail: *mut fi_info = std::ptr::null_mut();
        for o in &offers {
            let Some(i) = crate::core::alloc_info() else {
                // SAFETY: `head` is NULL or a list we built from alloc_info and nobody else holds.
                unsafe { crate::core::free_info(head) };
                return -FI_ENOMEM;
            };
            // SAFETY: `i` was just allocated by the core's alloc_info.
            unsafe { fill(i, o, version) };
            if tail.is_null() {
                head = i;
            } else {
                // SAFETY: `tail` is the last fi_info of our list, from alloc_info.
                unsafe { (*tail).next = i };
            }
            tail = i;
        }
        // SAFETY: `info` is the application's result slot (non-NULL, checked above).
        unsafe { *info = head };
        0
    })
}

/// Reads the endpoint-relevant attributes back from an info the
/// application passes to fi_domain / fi_endpoint (it may have edited it).
///
/// # Safety
/// `info` must be a valid fi_info.
pub unsafe fn offer_from_info(info: *const fi_info) -> Result<Offer, i32> {
    // SAFETY: the caller's contract: `info` is a valid fi_info (attr pointers NULL or valid, strings NUL-terminated, addresses of their addrlen).
    let i = (unsafe { info.as_ref() }).ok_or(-FI_EINVAL)?;
    let dname = unsafe { i.domain_attr.as_ref() }
        .and_then(|d| unsafe { opt_str(d.name) })
        .map(|s| s.to_string());
    let src = unsafe { sockaddr_to_std(i.src_addr as *const u8, i.src_addrlen) };
    let ifaces = interfaces();
    let iface = match (&dname, &src) {
        (Some(n), _) => ifaces
            .iter()
            .find(|f| &f.name == n && src.is_none_or(|s| s.ip() == f.ip || s.ip().is_unspecified())),
        (None, Some(s)) => ifaces.iter().find(|f| f.ip == s.ip()),
        (None, None) => ifaces.first(),
    };
    let Some(iface) = iface else {
        crate::warn!(
            FI_LOG_CORE,
            "info names domain {:?} / address {:?}, which is not an interface of this host",
            dname,
            src
        );
        return Err(-FI_ENODATA);
    };
    let mut o = base_offer(iface, src.map_or(0, |s| s.port()));
    // SAFETY: as above: `info` is a valid fi_info, so a valid hint.
    (unsafe { apply_hints(&mut o, info, crate::FI_API_VERSION) }).map_err(|_| -FI_ENODATA)?;
    o.dest = unsafe { sockaddr_to_std(i.dest_addr as *const u8, i.dest_addrlen) };
    // The ordering the application kept: an info whose max_order sizes it
    // set to 0 asks none (then no read is copied to keep it).
    if let Some(ep) = unsafe { i.ep_attr.as_ref() } {
        o.max_order_size = ep
            .max_order_raw_size
            .max(ep.max_order_war_size)
            .max(ep.max_order_waw_size);
    }
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The caps of every info `fi_getinfo` would return for `hints`.
    fn offered_caps(hints: Option<&fi_info>) -> Vec<u64> {
        let h = hints.map_or(std::ptr::null(), |h| h as *const fi_info);
        // SAFETY: NULL node and service; `h` is NULL or a live fi_info whose
        // attr pointers are all NULL (a zeroed fi_info).
        let offers = unsafe { offers(crate::FI_API_VERSION, std::ptr::null(), std::ptr::null(), 0, h) };
        offers.expect("gnix offers an info").iter().map(|o| o.caps).collect()
    }

    fn hints_with_caps(caps: u64) -> fi_info {
        // SAFETY: fi_info is a plain C struct; all-zero is "no hints" in
        // every field (NULL attr pointers, 0 caps and modes).
        let mut h: fi_info = unsafe { std::mem::zeroed() };
        h.caps = caps;
        h
    }

    #[test]
    fn source_err_only_when_asked() {
        // Unhinted and caps-0 infos leave FI_SOURCE_ERR out: applications
        // copy them into their hints (MPICH) and would get error
        // completions for messages from peers not yet in their AV.
        let zero = hints_with_caps(0);
        for caps in offered_caps(None).into_iter().chain(offered_caps(Some(&zero))) {
            assert_eq!(caps & FI_SOURCE_ERR, 0, "caps {caps:#x}");
            assert_ne!(caps & FI_SOURCE, 0, "caps {caps:#x}");
        }
        let asked = hints_with_caps(FI_TAGGED | FI_SOURCE | FI_SOURCE_ERR);
        for caps in offered_caps(Some(&asked)) {
            assert_eq!(
                caps & (FI_SOURCE | FI_SOURCE_ERR),
                FI_SOURCE | FI_SOURCE_ERR,
                "caps {caps:#x}"
            );
        }
        let without_source = hints_with_caps(FI_TAGGED | FI_SOURCE_ERR);
        // SAFETY: as in offered_caps.
        let r = unsafe {
            offers(
                crate::FI_API_VERSION,
                std::ptr::null(),
                std::ptr::null(),
                0,
                &without_source,
            )
        };
        assert_eq!(r.err(), Some(-FI_ENODATA));
    }

    /// The RMA and atomic ordering bits are offered with their size; the
    /// send-related ones, and sizes beyond it, are not.
    #[test]
    fn one_sided_ordering_is_offered_up_to_its_size() {
        let size = max_order_size();
        assert!(size > 0, "the eager sizes leave room for ordered operations");
        // SAFETY: zeroed C structs, as in hints_with_caps; the pointers
        // below outlive every call that reads them.
        let (mut tx, mut ep): (fi_tx_attr, fi_ep_attr) = unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
        let mut h = hints_with_caps(FI_RMA | FI_ATOMIC);
        h.tx_attr = &mut tx;
        h.ep_attr = &mut ep;
        let ask = |h: &fi_info| {
            // SAFETY: as in offered_caps; `h`'s attr pointers are live.
            unsafe { offers(crate::FI_API_VERSION, std::ptr::null(), std::ptr::null(), 0, h) }
        };
        for (order, ok) in [
            (
                FI_ORDER_SAS | FI_ORDER_ATOMIC_RAR | FI_ORDER_ATOMIC_RAW | FI_ORDER_ATOMIC_WAR | FI_ORDER_ATOMIC_WAW,
                true,
            ),
            (FI_ORDER_RAW | FI_ORDER_WAR | FI_ORDER_WAW | FI_ORDER_RAR, true),
            (FI_ORDER_SAW, false),
            (FI_ORDER_RAS, false),
        ] {
            tx.msg_order = order;
            h.tx_attr = &mut tx;
            let r = ask(&h);
            assert_eq!(r.is_ok(), ok, "msg_order {order:#x}");
            if let Ok(o) = r {
                assert!(o
                    .iter()
                    .all(|o| o.msg_order & order == order && o.max_order_size == size));
            }
        }
        tx.msg_order = 0;
        h.tx_attr = &mut tx;
        ep.max_order_waw_size = size;
        h.ep_attr = &mut ep;
        assert!(ask(&h).is_ok());
        ep.max_order_waw_size = size + 1;
        h.ep_attr = &mut ep;
        assert_eq!(ask(&h).err(), Some(-FI_ENODATA));
    }
}
