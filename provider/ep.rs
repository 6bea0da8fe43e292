//! RDM endpoint class: the libfabric face of one UDP wire.
//!
//! An endpoint owns its socket, the sans-IO `Engine` (VCs, reliability,
//! eager/rendezvous), and two tag-matching engines (untagged and tagged
//! receives). Every data call and every progress pass runs under the
//! endpoint's one lock, so threads using different endpoints never contend
//! (DESIGN.md §4); completions go to the bound CQs and counters, which have
//! locks of their own (taken after this one, never before).

mod unsupported;

use crate::av::Av;
use crate::cntr::Cntr;
use crate::cq::{Cq, CqEntry, CqError};
use crate::domain::Domain;
use crate::ffi::*;
use crate::fid::{base_ops, fid_header, FidObj, ParentRef, Table};
use crate::getinfo::std_to_sockaddr;
use crate::nic::shm::{self, Eager, Incoming, Pull, ShmConfig, ShmCredit, ShmEvent, ShmRts, ShmWire};
use crate::nic::udp::{RecvBatch, TxBatch, UdpWire};

/// Datagrams taken from the socket per syscall.
const RX_BATCH: usize = 16;
/// Mailbox slots handled per progress pass.
const SHM_BATCH: usize = 32;
/// The UDP side counts as active this long after its last datagram.
const UDP_HOT_NS: u64 = 1_000_000;
const UDP_IDLE_POLL_NS: u64 = 50_000;
/// Eager payloads up to this size are copied into the datagram when sent
/// at once (`Engine::send_now`); larger ones leave from the application's
/// buffer through the flush's gather I/O.
const DIRECT_COPY_MAX: usize = 4096;
use crate::nic::AutoProgress;
use crate::progress::{now_ns, Progress};
use crate::proto::{
    Engine, EngineConfig, EngineError, Event, MsgBody, MsgHdr, Payload, Placement, RecvSink, SendMode, SendPayload,
    SendSource, Transmit, TxOut,
};
use crate::tme::{src_filter, Arrived, MatchSpec, PostOutcome, Tme};
use std::collections::HashMap;
use std::ffi::c_void;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

/// Keys are ids we or the engine hand out: the provider's fast keyed
/// hash (crate::hash), where SipHash cost a visible share of every send and
/// receive.
type IdMap<V> = HashMap<u64, V, crate::hash::KeyedState>;

/// A list of application buffers, as (address, length).
/// Buffer list of one operation: inline up to two entries, so the usual
/// single-buffer send or receive allocates nothing.
type Iov = smallvec::SmallVec<[(usize, usize); 2]>;

fn iov_len(iov: &[(usize, usize)]) -> usize {
    iov.iter().map(|v| v.1).sum()
}

/// Reads a send's payload straight from the application's buffers.
/// Rendezvous sends keep it until the send completes, which is exactly as
/// long as libfabric lets us rely on the buffers.
struct IovSource {
    iov: Iov,
    len: usize,
}

impl SendSource for IovSource {
    fn len(&self) -> usize {
        self.len
    }
    fn read_at(&self, mut offset: usize, mut dst: &mut [u8]) {
        for &(base, len) in &self.iov {
            if dst.is_empty() {
                break;
            }
            if offset >= len {
                offset -= len;
                continue;
            }
            let n = (len - offset).min(dst.len());
            // SAFETY: (base, len) is an application buffer it promised to
            // keep valid and unmodified until the send completes; offset+n <= len.
            unsafe { std::ptr::copy_nonoverlapping((base + offset) as *const u8, dst.as_mut_ptr(), n) };
            dst = &mut dst[n..];
            offset = 0;
        }
    }
    fn ranges(&self) -> Option<Vec<(u64, u64)>> {
        Some(self.iov.iter().map(|&(p, l)| (p as u64, l as u64)).collect())
    }
    fn contiguous(&self, mut offset: usize, len: usize) -> Option<&[u8]> {
        for &(base, l) in &self.iov {
            if offset < l {
                if l - offset < len {
                    return None;
                }
                // SAFETY: as for read_at: [base, base+l) is a buffer the
                // application keeps valid and unmodified until the send
                // completes, which outlives this borrow of the source;
                // offset+len <= l.
                return Some(unsafe { std::slice::from_raw_parts((base + offset) as *const u8, len) });
            }
            offset -= l;
        }
        None
    }
}

/// Writes a receive's payload straight into the application's buffers.
struct IovSink {
    iov: Iov,
    cap: usize,
}

impl IovSink {
    fn new(iov: Iov) -> Self {
        let cap = iov_len(&iov);
        IovSink { iov, cap }
    }

    /// Copies the first `n` bytes of a mailbox slot's payload straight
    /// into the buffers (the slot is never borrowed: another process
    /// can write it).
    fn write_shared(&mut self, data: &shm::mailbox::SharedBytes<'_>, n: usize) {
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
    fn write_at(&mut self, mut offset: usize, mut src: &[u8]) {
        for &(base, len) in &self.iov {
            if src.is_empty() {
                break;
            }
            if offset >= len {
                offset -= len;
                continue;
            }
            let n = (len - offset).min(src.len());
            // SAFETY: (base, len) is a posted receive buffer the application
            // keeps valid until the receive completes; offset+n <= len.
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), (base + offset) as *mut u8, n) };
            src = &src[n..];
            offset = 0;
        }
    }
    fn region(&mut self, mut offset: usize, len: usize) -> Option<&mut [u8]> {
        for &(base, l) in &self.iov {
            if offset < l {
                // SAFETY: [base, base+l) is a posted receive buffer the
                // application keeps valid until the receive completes, which
                // outlives this borrow of the sink (the engine holds the sink
                // until then); offset + the returned length <= l, and the
                // &mut self borrow keeps us from handing out another.
                return Some(unsafe {
                    std::slice::from_raw_parts_mut((base + offset) as *mut u8, len.min(l - offset))
                });
            }
            offset -= l;
        }
        None
    }
}

/// A posted receive (the receive half of a FabReq).
struct Posted {
    ctx: usize,
    /// The posted tag, which a cancelled receive reports back.
    tag: u64,
    iov: Iov,
    flags: u64,
    /// FI_MULTI_RECV buffer this receive stands for.
    multi: Option<u64>,
}

/// Where a message's payload is, on either wire.
enum Body {
    /// In our memory (an eager message, or one that arrived unexpected).
    Eager(crate::proto::Payload),
    /// Rendezvous over UDP: the engine pulls it once accepted.
    Rndv(u64),
    /// Rendezvous over shm: in the sender's memory.
    ShmRts(Box<ShmRts>),
    /// Still in its mailbox slot (only while the slot is being handled;
    /// an unexpected message is copied out into `Eager`).
    ShmSlot(shm::mailbox::InSlot),
}

impl From<MsgBody> for Body {
    fn from(b: MsgBody) -> Body {
        match b {
            MsgBody::Eager(v) => Body::Eager(v),
            MsgBody::Rndv(rid) => Body::Rndv(rid),
        }
    }
}

/// The receive budget a message holds until the application takes it,
/// given back to its sender then (`Ep::give_back`).
enum Credit {
    /// Over the udp wire: credits for this many bytes (`Engine::release`).
    Udp(u64),
    /// Over the shm wire: part of its ring's loan (`ShmWire::free_credit`).
    Shm(ShmCredit),
}

/// A message that arrived before its receive.
struct Unexpected {
    peer: SocketAddr,
    hdr: MsgHdr,
    body: Body,
    credit: Credit,
}

/// An FI_MULTI_RECV buffer: messages are packed into it until less than
/// the endpoint's minimum is left; it is released (FI_MULTI_RECV on a
/// completion) once no rendezvous into it is still running.
struct MultiBuf {
    ctx: usize,
    base: usize,
    len: usize,
    used: usize,
    pending: usize,
    consumed: bool,
    flags: u64,
}

impl MultiBuf {
    /// The slice of this buffer the next message (`len` bytes, truncated to
    /// what is left) lands in, as a receive of its own; and whether the
    /// buffer is now consumed (less than `min` left).
    fn carve(&mut self, id: u64, len: usize, min: usize) -> (Posted, bool) {
        let off = self.used;
        let n = len.min(self.len - off);
        self.used += n;
        self.pending += 1;
        if self.len - self.used < min {
            self.consumed = true;
        }
        let slice = Posted {
            ctx: self.ctx,
            tag: 0,
            iov: smallvec::smallvec![(self.base + off, n)],
            flags: self.flags,
            multi: Some(id),
        };
        (slice, self.consumed)
    }
}

/// What a completing receive reports.
struct RecvDone {
    ctx: usize,
    flags: u64,
    buf: usize,
    len: usize,
    olen: usize,
    hdr: MsgHdr,
    src: u64,
    peer: SocketAddr,
    multi: Option<u64>,
}

/// A send in flight (the send half of a FabReq).
struct SendReq {
    ctx: usize,
    flags: u64,
    len: usize,
    /// fi_inject and kin: it only counts (its counter), it writes no
    /// completion entry.
    silent: bool,
}

#[derive(Clone, Default)]
struct Bindings {
    av: Option<Arc<Av>>,
    tx_cq: Option<Arc<Cq>>,
    rx_cq: Option<Arc<Cq>>,
    tx_selective: bool,
    rx_selective: bool,
    send_cntr: Option<Arc<Cntr>>,
    recv_cntr: Option<Arc<Cntr>>,
    /// Bound for RMA events, which cannot happen yet: held, never counted.
    rma_cntrs: Vec<Arc<Cntr>>,
    /// Held so the EQ cannot close under the endpoint; RDM endpoints have
    /// no asynchronous events to report in it yet.
    eq: Option<Arc<crate::eq::Eq>>,
}

struct EpState {
    wire: UdpWire,
    engine: Engine,
    /// The shm wire to local peers; `None` with FI_GNIX_SHM=0 or when no
    /// mailbox could be made.
    shm: Option<ShmWire>,
    /// While only shm peers are active, the UDP socket is polled at most
    /// this often (a recvfrom costs more than a whole shm message); see
    /// `udp_due`.
    udp_next: u64,
    udp_hot: u64,
    /// The last sender's fi_addr (peer, AV generation, fi_addr): a stream
    /// from one peer then costs no AV lookup per message.
    src_cache: Option<(SocketAddr, u64, u64)>,
    /// AV generation unexpected messages of unknown senders were last
    /// re-filed at (`Ep::resolve_sources`).
    resolved_gen: u64,
    tme_msg: Tme<Posted, Unexpected>,
    tme_tag: Tme<Posted, Unexpected>,
    sends: IdMap<SendReq>,
    rndv: IdMap<RecvDone>,
    multi: IdMap<MultiBuf>,
    next_multi: u64,
    min_multi_recv: usize,
    /// Datagrams on their way out, and those the socket had no room for.
    txbuf: TxBatch,
    rx: RecvBatch,
}

pub struct Ep {
    pub domain: ParentRef<Domain>,
    me: Weak<Ep>,
    caps: u64,
    tx_op_flags: AtomicU64,
    rx_op_flags: AtomicU64,
    inject_size: usize,
    tx_size: usize,
    rx_size: usize,
    tx_iov_limit: usize,
    rx_iov_limit: usize,
    max_msg_size: usize,
    pending_binds: Mutex<Bindings>,
    binds: OnceLock<Bindings>,
    enabled: AtomicBool,
    fd: AtomicI32,
    /// The wire's sockets are in its wait fd's epoll set (`UdpWire::watch`,
    /// done by the first sleeper's `arm_wakeup`).
    watched: AtomicBool,
    last_app: AtomicU64,
    state: Mutex<EpState>,
}

type Obj = FidObj<fid_ep, Ep>;

impl EpState {
    /// Transmit slots in use: sends in flight (those the application still
    /// awaits, and completed ones the engine holds until acknowledged) and
    /// shm frames waiting for ring space.
    fn tx_busy(&self) -> usize {
        self.sends.len() + self.engine.quiet_in_flight() + self.shm.as_ref().map_or(0, ShmWire::backlogged_untracked)
    }
}

pub unsafe fn from_fid<'a>(p: *const c_void) -> Option<&'a Arc<Ep>> {
    Obj::get(p, FI_CLASS_EP)
}

fn engine_config(dom: &Domain, wire: &UdpWire) -> EngineConfig {
    let link = crate::params::LinkFacts {
        max_datagram: wire.max_datagram,
        local_max_datagram: wire.local_max_datagram,
        rcvbuf: wire.rcvbuf,
        local_ips: crate::getinfo::interfaces().iter().map(|i| i.ip).collect(),
    };
    crate::params::engine_config(crate::params::params(), *dom.tunables.lock().unwrap(), link)
}

/// A key for the shm wire's hash maps, which peers' addresses fill: from
/// the operating system's random source, so nobody can aim collisions.
fn seed() -> u64 {
    use crate::proto::Entropy;
    crate::proto::OsEntropy.next_u64()
}

fn new_state(dom: &Domain, addr: SocketAddr) -> Result<EpState, i32> {
    let p = crate::params::params();
    let wire = UdpWire::bind(addr, &dom.attr.iface.name, p.sockbuf, p.udp_mtu, p.udp_connect).map_err(|e| {
        crate::warn!(FI_LOG_EP_CTRL, "cannot bind a UDP socket to {}: {}", addr, e);
        if e.kind() == std::io::ErrorKind::AddrInUse {
            -FI_EADDRINUSE
        } else {
            -FI_EINVAL
        }
    })?;
    let engine = Engine::new(
        engine_config(dom, &wire),
        wire.local_addr(),
        Box::new(crate::proto::OsEntropy),
    );
    let shm = if p.shm {
        let geo = shm::Geometry::new(p.shm_peers, p.shm_depth, p.shm_eager);
        let cfg = ShmConfig {
            // The receive budget (FI_GNIX_CREDIT_BYTES) split among the
            // rings: bounds what local peers' unexpected messages hold
            // here, whatever their number; enough for a few slots each.
            loan: match p.credit_bytes {
                0 => 0,
                b => ((b / geo.nrings) as u64).max(8 * geo.slot_size as u64),
            },
            geo,
            cma: p.cma,
            local_ips: crate::getinfo::interfaces().iter().map(|i| i.ip).collect(),
        };
        ShmWire::new(wire.local_addr(), cfg, seed())
            .inspect_err(|e| {
                crate::warn!(
                    FI_LOG_EP_CTRL,
                    "no shm mailbox for {} ({}): local peers use UDP",
                    wire.local_addr(),
                    e
                )
            })
            .ok()
    } else {
        None
    };
    Ok(EpState {
        engine,
        shm,
        udp_next: 0,
        udp_hot: 0,
        src_cache: None,
        resolved_gen: 0,
        txbuf: TxBatch::default(),
        rx: RecvBatch::new(RX_BATCH),
        wire,
        tme_msg: Tme::new(),
        tme_tag: Tme::new(),
        sends: IdMap::default(),
        rndv: IdMap::default(),
        multi: IdMap::default(),
        next_multi: 1,
        min_multi_recv: 64,
    })
}

pub unsafe fn open(dom: &Arc<Domain>, info: *mut fi_info, ctx: *mut c_void) -> Result<*mut fid_ep, i32> {
    let o = crate::getinfo::offer_from_info(info)?;
    if o.iface.name != dom.attr.iface.name {
        crate::warn!(
            FI_LOG_EP_CTRL,
            "fi_endpoint: info is for domain {}, not {}",
            o.iface.name,
            dom.attr.iface.name
        );
        return Err(-FI_EINVAL);
    }
    let st = new_state(dom, o.src)?;
    let fd = st.wire.wait_fd();
    let ep = Arc::new_cyclic(|me| Ep {
        domain: ParentRef::new(dom),
        me: me.clone(),
        caps: o.caps,
        tx_op_flags: AtomicU64::new(o.tx_op_flags),
        rx_op_flags: AtomicU64::new(o.rx_op_flags),
        inject_size: o.inject_size,
        tx_size: o.tx_size,
        rx_size: o.rx_size,
        tx_iov_limit: o.tx_iov_limit,
        rx_iov_limit: o.rx_iov_limit,
        max_msg_size: o.max_msg_size,
        pending_binds: Mutex::new(Bindings::default()),
        binds: OnceLock::new(),
        enabled: AtomicBool::new(false),
        fd: AtomicI32::new(fd),
        watched: AtomicBool::new(false),
        last_app: AtomicU64::new(0),
        state: Mutex::new(st),
    });
    let c = fid_ep {
        fid: fid_header(FI_CLASS_EP, ctx, EP_FI_OPS.ptr()),
        ops: EP_OPS.ptr(),
        cm: CM_OPS.ptr(),
        msg: MSG_OPS.ptr(),
        rma: unsupported::RMA_OPS.ptr(),
        tagged: TAGGED_OPS.ptr(),
        atomic: unsupported::ATOMIC_OPS.ptr(),
        collective: unsupported::COLLECTIVE_OPS.ptr(),
    };
    Ok(Obj::create(c, ep))
}

// ------------------------------------------------------------------------
// Completions

impl Ep {
    fn binds(&self) -> &Bindings {
        // Only reached after enable (data calls check it).
        self.binds.get().expect("endpoint enabled")
    }

    fn complete_send(&self, b: &Bindings, r: &SendReq, err: Option<i32>) {
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

    fn complete_recv(&self, st: &mut EpState, d: RecvDone, err: Option<i32>) {
        crate::debug!(
            FI_LOG_EP_DATA,
            "DBGRECV ctx={:#x} buf={:#x} len={} olen={} multi={:?} err={:?} peer={}",
            d.ctx,
            d.buf,
            d.len,
            d.olen,
            d.multi,
            err,
            d.peer
        );
        let b = self.binds();
        let mut flags = d.flags & (FI_RECV | FI_MSG | FI_TAGGED);
        if d.hdr.flags & MsgHdr::HAS_DATA != 0 {
            flags |= FI_REMOTE_CQ_DATA;
        }
        if let Some(m) = d.multi {
            if let Some(mb) = st.multi.get_mut(&m) {
                mb.pending -= 1;
                if mb.consumed && mb.pending == 0 {
                    flags |= FI_MULTI_RECV;
                    st.multi.remove(&m);
                }
            }
        }
        let unknown_src = d.src == FI_ADDR_NOTAVAIL && self.caps & FI_SOURCE_ERR != 0;
        let err = err
            .or(if d.olen > 0 { Some(FI_ETRUNC) } else { None })
            .or(if unknown_src { Some(FI_EADDRNOTAVAIL) } else { None });
        let entry = CqEntry {
            op_context: d.ctx as *mut c_void,
            flags,
            len: d.len,
            buf: d.buf as *mut c_void,
            data: if d.hdr.flags & MsgHdr::HAS_DATA != 0 {
                d.hdr.data
            } else {
                0
            },
            tag: if d.flags & FI_TAGGED != 0 { d.hdr.tag } else { 0 },
            src: d.src,
        };
        match err {
            None => {
                if let Some(c) = &b.recv_cntr {
                    c.inc();
                }
                if !b.rx_selective || d.flags & FI_COMPLETION != 0 {
                    if let Some(cq) = &b.rx_cq {
                        cq.push(entry);
                    }
                }
            }
            Some(e) => {
                if let Some(c) = &b.recv_cntr {
                    c.inc_err();
                }
                let err_data = if e == FI_EADDRNOTAVAIL {
                    std_to_sockaddr(&d.peer)
                } else {
                    Vec::new()
                };
                if let Some(cq) = &b.rx_cq {
                    cq.push_err(CqError {
                        entry,
                        err: e,
                        prov_errno: e,
                        olen: d.olen,
                        err_data,
                    });
                }
            }
        }
    }

    /// The fi_addr a peer was inserted as, when the application asked to
    /// know (FI_SOURCE) or to filter on it (FI_DIRECTED_RECV).
    fn source_of(&self, peer: &SocketAddr) -> u64 {
        if self.caps & (FI_SOURCE | FI_DIRECTED_RECV) == 0 {
            return FI_ADDR_NOTAVAIL;
        }
        self.binds()
            .av
            .as_ref()
            .and_then(|av| av.reverse(peer))
            .unwrap_or(FI_ADDR_NOTAVAIL)
    }

    /// Unexpected messages whose sender was not in the AV when they arrived
    /// are filed under their fi_addr once it is (MPI's dynamic processes
    /// insert a peer's address after its first message): a directed
    /// receive must find them. Done when the AV changed since the last
    /// time, before a directed receive or peek looks.
    fn resolve_sources(&self, st: &mut EpState) {
        let Some(av) = self.binds().av.as_ref() else { return };
        let gen = av.generation();
        if gen == st.resolved_gen {
            return;
        }
        st.resolved_gen = gen;
        for tme in [&mut st.tme_tag, &mut st.tme_msg] {
            tme.resolve_unknown_sources(|u| av.reverse(&u.peer));
        }
    }

    /// `source_of`, remembering the answer for the next message.
    fn source_cached(&self, st: &mut EpState, peer: &SocketAddr) -> u64 {
        if self.caps & (FI_SOURCE | FI_DIRECTED_RECV) == 0 {
            return FI_ADDR_NOTAVAIL;
        }
        let gen = self.binds().av.as_ref().map_or(0, |av| av.generation());
        if let Some((p, g, a)) = st.src_cache {
            if p == *peer && g == gen {
                return a;
            }
        }
        let a = self.source_of(peer);
        st.src_cache = Some((*peer, gen, a));
        a
    }

    /// Places a matched message into a posted receive: eager data is copied
    /// now; rendezvous data is pulled by the engine into the buffers.
    fn deliver(&self, st: &mut EpState, p: Posted, msg: Arrived<Unexpected>) {
        let Arrived { src, msg: u, .. } = msg;
        Self::give_back(st, u.peer, u.credit);
        let cap = iov_len(&p.iov);
        let mlen = u.hdr.len as usize;
        let done = RecvDone {
            ctx: p.ctx,
            flags: p.flags,
            buf: p.iov.first().map_or(0, |v| v.0),
            len: mlen.min(cap),
            olen: mlen.saturating_sub(cap),
            hdr: u.hdr,
            src: if self.caps & FI_SOURCE == 0 {
                FI_ADDR_NOTAVAIL
            } else if src == FI_ADDR_NOTAVAIL {
                // Unknown when it arrived; perhaps inserted since.
                self.source_of(&u.peer)
            } else {
                src
            },
            peer: u.peer,
            multi: p.multi,
        };
        match u.body {
            Body::Eager(data) => {
                let mut sink = IovSink::new(p.iov);
                let n = data.len().min(cap);
                sink.write_at(0, &data[..n]);
                self.complete_recv(st, done, None);
            }
            Body::ShmSlot(slot) => {
                let data = st.shm.as_ref().expect("shm slot without shm wire").payload(&slot);
                IovSink::new(p.iov).write_shared(&data, data.len().min(cap));
                self.complete_recv(st, done, None);
            }
            Body::Rndv(rid) => {
                if cap == 0 {
                    st.engine.discard(rid, now_ns());
                    self.complete_recv(st, done, None);
                } else {
                    st.rndv.insert(rid, done);
                    st.engine.accept(rid, Box::new(IovSink::new(p.iov)), now_ns());
                }
            }
            Body::ShmRts(rts) => {
                let w = st.shm.as_mut().expect("shm RTS without shm wire");
                let sink = Box::new(IovSink::new(p.iov.clone()));
                match w.pull(&rts, &p.iov, sink) {
                    Pull::Done(_) => self.complete_recv(st, done, None),
                    Pull::Pending(rid) => {
                        st.rndv.insert(rid, done);
                    }
                    Pull::Failed(e) => {
                        crate::warn!(FI_LOG_EP_DATA, "receive from {}: sender is gone", rts.peer);
                        self.complete_recv(st, done, Some(e));
                    }
                }
                ring_bells(st);
            }
        }
    }

    /// A message nobody will receive (FI_DISCARD): let its sender go.
    fn discard(&self, st: &mut EpState, u: Unexpected) {
        Self::give_back(st, u.peer, u.credit);
        match u.body {
            Body::Rndv(rid) => st.engine.discard(rid, now_ns()),
            Body::ShmRts(rts) => {
                if let Some(w) = st.shm.as_mut() {
                    w.discard(&rts);
                }
                ring_bells(st);
            }
            Body::Eager(_) | Body::ShmSlot(_) => {}
        }
    }

    /// The application took a message (or it was matched on arrival):
    /// its sender gets the receive budget it held back.
    fn give_back(st: &mut EpState, peer: SocketAddr, credit: Credit) {
        match credit {
            Credit::Udp(len) => st.engine.release(peer, len),
            Credit::Shm(c) => {
                if let Some(w) = st.shm.as_mut() {
                    w.free_credit(c);
                }
            }
        }
    }

    /// What the engine charged a message's sender: an RTS holds only its
    /// tail (releasing its whole length would hand the peer back credits
    /// still held by its unexpected eager messages).
    fn udp_credit(st: &EpState, hdr: &MsgHdr, body: &MsgBody) -> Credit {
        Credit::Udp(match body {
            MsgBody::Eager(_) => hdr.len,
            MsgBody::Rndv(rid) => st.engine.rts_charge(*rid),
        })
    }

    /// Handles one message a wire surfaced: match or queue unexpected.
    fn on_msg(&self, st: &mut EpState, peer: SocketAddr, hdr: MsgHdr, body: Body, credit: Credit) {
        let tagged = hdr.flags & MsgHdr::TAGGED != 0;
        let src = self.source_cached(st, &peer);
        let tag = if tagged { hdr.tag } else { 0 };
        let tme = if tagged { &mut st.tme_tag } else { &mut st.tme_msg };
        let Some(m) = tme.match_incoming(src, tag) else {
            // The slot goes back to its sender: keep a copy (its credit
            // stays charged until the application takes it).
            let body = match body {
                Body::ShmSlot(slot) => {
                    let data = st.shm.as_ref().expect("shm wire").payload(&slot);
                    let mut copy = Payload::from_elem(0, data.len());
                    data.copy_to(0, &mut copy);
                    Body::Eager(copy)
                }
                b => b,
            };
            tme.push_unexpected(
                src,
                tag,
                Unexpected {
                    peer,
                    hdr,
                    body,
                    credit,
                },
            );
            return;
        };
        let arrived = Arrived {
            src,
            tag,
            msg: Unexpected {
                peer,
                hdr,
                body,
                credit,
            },
        };
        let Some(mid) = m.get().multi else {
            let p = m.consume();
            self.deliver(st, p, arrived);
            return;
        };
        let min = st.min_multi_recv;
        let mb = st.multi.get_mut(&mid).expect("multi-recv buffer of a posted receive");
        let (slice, consumed) = mb.carve(mid, hdr.len as usize, min);
        // Otherwise the buffer stays posted where it is (dropping the match keeps it).
        if consumed {
            m.consume();
        }
        self.deliver(st, slice, arrived);
    }

    /// Whether there was any event (most put something in a CQ or counter).
    fn handle_events(&self, st: &mut EpState) -> bool {
        let mut any = false;
        while let Some(ev) = st.engine.poll_event() {
            any = true;
            match ev {
                Event::Msg { peer, hdr, body } => {
                    let credit = Self::udp_credit(st, &hdr, &body);
                    self.on_msg(st, peer, hdr, body.into(), credit)
                }
                Event::RecvDone { rid, written, .. } => self.recv_finished(st, rid, written, None),
                Event::RecvFailed { rid, err, .. } => {
                    crate::warn!(FI_LOG_EP_DATA, "receive failed: {}", err);
                    self.recv_finished(st, rid, 0, Some(engine_errno(err)));
                }
                Event::SendDone { id } => self.send_finished(st, id, None),
                Event::SendFailed { id, err } => {
                    crate::warn!(FI_LOG_EP_DATA, "send failed: {}", err);
                    self.send_finished(st, id, Some(engine_errno(err)));
                }
                Event::PeerFailed { peer } => {
                    crate::warn!(
                        FI_LOG_EP_DATA,
                        "peer {} is unreachable; its operations completed in error",
                        peer
                    );
                    st.wire.disconnect(peer);
                    st.wire.set_peer_count(st.engine.peer_count());
                }
                Event::PeerUp { peer } => {
                    if let Err(e) = st.wire.connect(peer) {
                        // The main socket carries this peer instead.
                        crate::info!(FI_LOG_EP_CTRL, "no connected socket for {}: {}", peer, e);
                    }
                    st.wire.set_peer_count(st.engine.peer_count());
                }
            }
        }
        any
    }

    fn send_finished(&self, st: &mut EpState, id: u64, err: Option<i32>) {
        if let Some(r) = st.sends.remove(&id) {
            self.complete_send(self.binds(), &r, err);
        }
    }

    fn recv_finished(&self, st: &mut EpState, rid: u64, written: usize, err: Option<i32>) {
        if let Some(mut d) = st.rndv.remove(&rid) {
            if err.is_none() {
                d.len = written;
            }
            self.complete_recv(st, d, err);
        }
    }

    /// One pass over the shm wire: messages from local peers (matched and
    /// copied straight out of their slots), rendezvous progress, doorbells.
    /// Whether anything arrived.
    fn progress_shm(&self, st: &mut EpState, now: u64) -> bool {
        let Some(w) = st.shm.as_mut() else { return false };
        w.disarm();
        let mut any = false;
        for _ in 0..SHM_BATCH {
            let Some(m) = st.shm.as_mut().and_then(ShmWire::poll_msg) else {
                break;
            };
            any = true;
            let credit = Credit::Shm(m.credit());
            match m {
                Incoming::Eager { slot, peer, hdr, .. } => {
                    self.on_msg(st, peer, hdr, Body::ShmSlot(slot), credit);
                    if let Some(w) = st.shm.as_mut() {
                        w.release(slot);
                    }
                }
                Incoming::Rts(rts) => self.on_msg(st, rts.peer, rts.hdr, Body::ShmRts(rts), credit),
            }
        }
        if let Some(w) = st.shm.as_mut() {
            w.pump(now);
        }
        while let Some(ev) = st.shm.as_mut().and_then(ShmWire::poll_event) {
            any = true;
            match ev {
                ShmEvent::SendDone { id } => self.send_finished(st, id, None),
                ShmEvent::SendFailed { id, err } => {
                    crate::warn!(FI_LOG_EP_DATA, "shm send failed: {}", err);
                    self.send_finished(st, id, Some(err));
                }
                ShmEvent::RecvDone { rid, written } => self.recv_finished(st, rid, written, None),
                ShmEvent::RecvFailed { rid, err } => {
                    crate::warn!(FI_LOG_EP_DATA, "shm receive failed: {}", err);
                    self.recv_finished(st, rid, 0, Some(err));
                }
            }
        }
        ring_bells(st);
        any
    }

    /// Whether this pass should look at the UDP socket. Always, unless
    /// local peers talk to us over shm and the UDP side has been quiet: a
    /// recvfrom costs more than a whole shm message, so then only every
    /// `UDP_IDLE_POLL_NS`.
    fn udp_due(&self, st: &mut EpState, now: u64) -> bool {
        let shm_only = st.shm.as_ref().is_some_and(ShmWire::in_use) && now.saturating_sub(st.udp_hot) > UDP_HOT_NS;
        if shm_only && now < st.udp_next {
            return false;
        }
        st.udp_next = now + UDP_IDLE_POLL_NS;
        true
    }

    /// Sends what the engine has queued, as long as the socket takes it.
    /// Runs of equal-sized datagrams to one peer (bulk data on a small-MTU
    /// path) leave as one GSO send; payloads go from the send buffers
    /// straight into the socket.
    fn flush(&self, st: &mut EpState, now: u64) {
        let EpState {
            engine, wire, txbuf, ..
        } = st;
        // The common case of a polling application: nothing to send.
        if engine.transmit_idle() && !txbuf.stalled() {
            return;
        }
        if txbuf.stalled() {
            if !wire.send_batch(txbuf) {
                return;
            }
            txbuf.rewind();
        }
        let mut out = FlushOut {
            wire,
            txbuf,
            refused: false,
        };
        engine.poll_transmit_burst(now, &mut out);
        if out.refused {
            return;
        }
        if txbuf.building() && wire.send_batch(txbuf) {
            txbuf.rewind();
        }
    }

    /// One pass: run due timers and transmit what is queued, then receive
    /// (and answer). Timers come first so that a datagram that completes
    /// something for the application goes straight back to it, with
    /// nothing between. `now` is the caller's clock reading (one
    /// clock_gettime per pass, not one per step).
    fn progress_locked(&self, st: &mut EpState, mut now: u64) {
        if st.udp_hot != 0 {
            // (udp_hot == 0: the udp engine never sent or received, so it
            // has no timers and nothing queued.)
            if st.engine.poll_timeout().is_some_and(|t| t <= now) {
                st.engine.handle_timeout(now);
            }
            // Also what data calls queued without transmitting (FI_MORE, a
            // rendezvous accepted by fi_recv) and a datagram the socket refused.
            self.handle_events(st);
            self.flush(st, now);
        }
        let shm_any = self.progress_shm(st, now);
        let rounds = if !shm_any && self.udp_due(st, now) { 8 } else { 0 };
        // First one datagram with a plain recvfrom: a polling application
        // finds the socket empty almost every time, and that is the
        // cheapest way to find out. Once something arrived, batches of
        // recvmmsg, a few at most so one call stays short under a flood.
        let mut first = true;
        let mut placed = 0;
        for _ in 0..rounds {
            // Rendezvous data is being pulled: receive the next datagram
            // with its payload straight into the receive buffer it is
            // probably for (see Engine::rdata_placement), one per call.
            if placed < 16 && st.engine.pulling() {
                match self.recv_placed(st, now) {
                    Some(true) => {
                        placed += 1;
                        now = now_ns();
                        let produced = self.handle_events(st);
                        self.flush(st, now);
                        if produced {
                            break;
                        }
                        continue;
                    }
                    Some(false) => break,
                    None => {}
                }
            }
            let EpState { wire, rx, .. } = &mut *st;
            let r = if first {
                wire.recv_one(rx).map(usize::from)
            } else {
                wire.recv_batch(rx)
            };
            let n = match r {
                Ok(n) => n,
                Err(e) => {
                    crate::debug!(FI_LOG_EP_DATA, "recv: {}", e);
                    0
                }
            };
            if n == 0 {
                break;
            }
            if !first {
                now = now_ns();
            }
            wire.tune_gro(rx, n);
            let mut produced = false;
            for i in 0..n {
                produced |= self.feed(st, i, now);
            }
            produced |= self.handle_events(st);
            self.flush(st, now);
            // A completion for the application: hand it over now rather
            // than spend another syscall between it and the application.
            if produced || (!first && n < RX_BATCH) {
                break;
            }
            first = false;
        }
    }

    /// One datagram received by guess (`Engine::rdata_placement`): None if
    /// there is no guess to make, else whether a datagram arrived.
    fn recv_placed(&self, st: &mut EpState, now: u64) -> Option<bool> {
        let EpState { engine, wire, rx, .. } = st;
        let (p, region) = engine.rdata_placement()?;
        let (n, from) = match wire.recv_split(rx, Placement::HEAD_LEN, region) {
            Ok(Some(r)) => r,
            Ok(None) => return Some(false),
            Err(e) => {
                crate::debug!(FI_LOG_EP_DATA, "recv: {}", e);
                return Some(false);
            }
        };
        let len = n.saturating_sub(Placement::HEAD_LEN);
        if !rx.split_coalesced() && p.matches(rx.head(), len).is_some() {
            engine.handle_datagram_placed(from, rx.head(), &p, len, now);
        } else {
            rx.gather(region);
            engine.placement_missed();
            self.feed(st, 0, now);
        }
        Some(true)
    }

    /// Hands the engine what slot `i` of the receive batch holds (one
    /// datagram, or a GRO run of equal-sized ones). Right after an RTS
    /// with pushed data behind it, the engine's events are handled, so
    /// the message is matched, and its receive accepted, before that data
    /// is handled (`Engine::wants_match_now`). Whether events were handled.
    fn feed(&self, st: &mut EpState, i: usize, now: u64) -> bool {
        let mut at = 0;
        let mut handled = false;
        loop {
            let EpState {
                engine, rx, udp_hot, ..
            } = &mut *st;
            let Some((bytes, from, seg)) = rx.get(i) else {
                return handled;
            };
            if at == 0 && shm::is_doorbell(bytes) {
                return handled;
            }
            *udp_hot = now;
            let mut match_now = false;
            while at < bytes.len() && !match_now {
                engine.handle_datagram(from, &bytes[at..(at + seg).min(bytes.len())], now);
                at += seg;
                match_now = engine.wants_match_now();
            }
            if !match_now {
                return handled;
            }
            handled |= self.handle_events(st);
        }
    }

    /// Closing: send the ACKs still owed, then wait (bounded) until what we
    /// sent is acknowledged, so a peer's last message is neither lost nor
    /// left to time out because we went away first.
    fn linger(&self) {
        const LINGER_NS: u64 = 1_000_000_000;
        let mut st = self.lock();
        st.engine.flush_acks();
        self.progress_locked(&mut st, now_ns());
        let deadline = now_ns() + LINGER_NS;
        // Without its sockets the wait fd could not cut a poll short.
        let _ = st.wire.watch();
        while (st.engine.has_unacked() || st.txbuf.stalled() || st.shm.as_ref().is_some_and(|w| w.backlogged() > 0))
            && now_ns() < deadline
        {
            let mut pfd = libc::pollfd {
                fd: st.wire.wait_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd; waits for the peer's ACK (or 1 ms).
            unsafe { libc::poll(&mut pfd, 1, 1) };
            self.progress_locked(&mut st, now_ns());
        }
        crate::info!(
            FI_LOG_EP_CTRL,
            "endpoint {} closing: {:?} {:?} connected_sockets: {}",
            st.wire.local_addr(),
            st.engine.stats(),
            st.shm.as_ref().map(|w| w.stats),
            st.wire.connected_count()
        );
    }

    fn touch(&self, now: u64) {
        self.last_app.store(now, Ordering::Relaxed);
    }

    fn lock(&self) -> MutexGuard<'_, EpState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn engine_errno(e: EngineError) -> i32 {
    match e {
        EngineError::PeerUnreachable => FI_EHOSTUNREACH,
        EngineError::PeerRestarted => FI_ECONNRESET,
        EngineError::PeerForgotten => FI_ECANCELED,
        EngineError::UnknownRndv => FI_EIO,
        EngineError::InvalidAddress => FI_EINVAL,
        EngineError::DatagramTooSmall => FI_EMSGSIZE,
    }
}

impl Progress for Ep {
    fn progress(&self) {
        let now = now_ns();
        self.touch(now);
        if let Ok(mut st) = self.state.try_lock() {
            self.progress_locked(&mut st, now);
        }
    }
    fn wait_fds(&self, out: &mut Vec<RawFd>) {
        out.push(self.fd.load(Ordering::Relaxed));
    }
    fn next_deadline(&self) -> Option<u64> {
        // Contended: whoever holds the lock is progressing; look again soon
        // rather than sleeping past a retransmission.
        let Ok(st) = self.state.try_lock() else {
            return Some(now_ns() + 50_000);
        };
        let t = st.engine.poll_timeout();
        // A stalled datagram needs another try soon even without input.
        if st.txbuf.stalled() {
            return Some(now_ns() + 50_000);
        }
        match st.shm.as_ref().and_then(|w| w.next_deadline(now_ns())) {
            Some(s) => Some(t.map_or(s, |t| t.min(s))),
            None => t,
        }
    }
    fn arm_wakeup(&self) -> bool {
        // Contended: the holder is progressing, and next_deadline said
        // to look again soon; but an epoll set not watching our sockets
        // yet would not wake us at all.
        let Ok(mut st) = self.state.try_lock() else {
            return self.watched.load(Ordering::Acquire);
        };
        if let Err(e) = st.wire.watch() {
            crate::warn!(FI_LOG_EP_CTRL, "cannot watch the endpoint's sockets: {}", e);
            return false;
        }
        self.watched.store(true, Ordering::Release);
        // Whatever woke us may be a doorbell: read the socket next pass.
        st.udp_next = 0;
        st.shm.as_mut().is_none_or(ShmWire::arm)
    }
}

impl AutoProgress for Ep {
    fn last_app_activity(&self) -> u64 {
        self.last_app.load(Ordering::Relaxed)
    }
    fn auto_progress(&self) {
        if let Ok(mut st) = self.state.try_lock() {
            self.progress_locked(&mut st, now_ns());
        }
    }
}

// ------------------------------------------------------------------------
// Data operations (safe core; the shims below convert arguments)

/// One data-path request after argument conversion.
struct SendArgs {
    iov: Iov,
    dest: u64,
    tag: u64,
    data: Option<u64>,
    ctx: usize,
    flags: u64,
    tagged: bool,
    /// fi_inject and kin: no completion entry, ever. (The FI_INJECT flag
    /// of fi_sendmsg or of the op flags only lets the buffer go at once;
    /// its completion is written as for any send.)
    silent: bool,
}

struct RecvArgs {
    iov: Iov,
    src: u64,
    tag: u64,
    ignore: u64,
    ctx: usize,
    flags: u64,
    tagged: bool,
}

const SEND_FLAGS: u64 = FI_COMPLETION
    | FI_INJECT
    | FI_INJECT_COMPLETE
    | FI_TRANSMIT_COMPLETE
    | FI_DELIVERY_COMPLETE
    | FI_REMOTE_CQ_DATA
    | FI_MORE;
const RECV_FLAGS: u64 = FI_COMPLETION | FI_MULTI_RECV | FI_PEEK | FI_CLAIM | FI_DISCARD | FI_MORE;

impl Ep {
    /// FI_SEND / FI_RECV: an endpoint that names neither does both.
    fn sends(&self) -> bool {
        self.caps & FI_SEND != 0 || self.caps & (FI_SEND | FI_RECV) == 0
    }
    fn receives(&self) -> bool {
        self.caps & FI_RECV != 0 || self.caps & (FI_SEND | FI_RECV) == 0
    }

    /// The capability a send (or receive), tagged or not, needs that the
    /// endpoint was opened without.
    fn missing_cap(&self, tagged: bool, send: bool) -> Option<&'static str> {
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

    fn check_enabled(&self) -> Result<&Bindings, isize> {
        match self.binds.get() {
            Some(b) if self.enabled.load(Ordering::Acquire) => Ok(b),
            _ => {
                crate::warn!(FI_LOG_EP_DATA, "data transfer on an endpoint that is not enabled");
                Err(-FI_EOPBADSTATE as isize)
            }
        }
    }

    fn send(&self, a: SendArgs) -> isize {
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
        // Sends in flight and shm frames waiting for ring space both take
        // a transmit slot: a receiver that stops reading cannot make us
        // buffer without bound.
        if st.tx_busy() >= self.tx_size {
            self.progress_locked(&mut st, now);
            if st.tx_busy() >= self.tx_size {
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
        // FI_DELIVERY_COMPLETE (MPICH and Open MPI's btl ofi set it in
        // their tx op flags) keeps the protocol: an eager message completes
        // once the receiver took it in (udp: its ACK, sent after the
        // message was matched or queued; shm: its slot handed back).
        let delivery = a.flags & FI_DELIVERY_COMPLETE != 0;
        let mode = SendMode::Eager;
        let op = if a.tagged { FI_TAGGED } else { FI_MSG };
        let req = SendReq {
            ctx: a.ctx,
            flags: FI_SEND | op | (a.flags & FI_COMPLETION),
            len,
            silent: a.silent,
        };
        if let Some(ix) = st.shm.as_mut().and_then(|w| w.route(peer)) {
            return self.send_shm(&mut st, ix, a, hdr, delivery, req);
        }
        st.udp_hot = now;
        let eager = len <= st.engine.eager_max();
        // Complete as soon as the engine has its own copy (inject, and
        // inject-complete eager sends), unless delivery is asked for.
        let inject_complete = !delivery && (inject || (eager && a.flags & FI_INJECT_COMPLETE != 0));
        // The engine reads the payload at transmission time, and again for
        // a retransmission; only a send whose buffer is the application's
        // again before it is acknowledged needs a copy.
        let src = if inject_complete {
            // Inline in the message up to INLINE_PAYLOAD bytes.
            let mut copy = Payload::from_elem(0, len);
            IovSource { iov: a.iov, len }.read_at(0, &mut copy);
            SendPayload::Copied(copy)
        } else if inject {
            // The buffer goes back now, the completion comes on delivery.
            let mut copy = vec![0u8; len];
            IovSource { iov: a.iov, len }.read_at(0, &mut copy);
            SendPayload::Source(Box::new(copy))
        } else {
            SendPayload::Source(Box::new(IovSource { iov: a.iov, len }))
        };
        // A send that is not batched (FI_MORE) may go to the socket at once
        // (Engine::send_now: if nothing else waits), except bulk eager
        // data, which the flush sends from the application's buffer.
        let now_or_queue = a.flags & FI_MORE == 0 && (!eager || len <= DIRECT_COPY_MAX) && !st.txbuf.stalled();
        let r = if now_or_queue {
            let EpState {
                engine, wire, txbuf, ..
            } = &mut *st;
            engine.send_now(peer, hdr, src, mode, now, txbuf.slot()).map(|(id, n)| {
                if let Some(n) = n {
                    wire.send_slot(txbuf, peer, n);
                }
                id
            })
        } else {
            st.engine.send(peer, hdr, src, mode, now)
        };
        let id = match r {
            Ok(id) => id,
            Err(e) => {
                crate::warn!(FI_LOG_EP_DATA, "send to {}: {}", peer, e);
                return -(engine_errno(e) as isize);
            }
        };
        if inject_complete {
            // The payload is copied into the engine: inject-complete now
            // (fi_inject only counts). The engine counts it until
            // acknowledged (quiet_in_flight).
            self.complete_send(b, &req, None);
        } else {
            st.sends.insert(id, req);
        }
        if a.flags & FI_MORE == 0 {
            self.flush(&mut st, now);
        }
        0
    }

    /// A send to a local peer: eager into its mailbox, or a rendezvous it
    /// pulls. It completes once its data no longer depends on us: in the
    /// peer's ring (at once, or once a full ring or the peer's credit let
    /// it in), taken out of the ring (`delivery`), or pulled (FIN).
    fn send_shm(&self, st: &mut EpState, ix: usize, a: SendArgs, hdr: MsgHdr, delivery: bool, req: SendReq) -> isize {
        let b = self.binds();
        // GNIX_RNDV_THRESHOLD applies here too, below the slot size.
        let threshold = st.engine.config().rndv_threshold;
        let w = st.shm.as_mut().expect("routed to shm");
        let len = req.len;
        let inject = a.flags & FI_INJECT != 0;
        let mut iov = a.iov;
        // An inject always fits a slot (inject_size <= the slot payload),
        // so its copy never has to stay with us.
        if len <= w.eager_max().min(threshold) || inject && len <= w.eager_max() {
            let src = IovSource { iov, len };
            match w.send_eager(ix, &hdr, &src, inject, delivery) {
                Eager::Done => {
                    ring_bells(st);
                    self.complete_send(b, &req, None);
                    return 0;
                }
                Eager::Pending(id) => {
                    ring_bells(st);
                    st.sends.insert(id, req);
                    return 0;
                }
                // The peer holds its share of unexpected messages: this one
                // waits in our memory until a receive takes it.
                Eager::NoCredit => iov = src.iov,
            }
        }
        // The receiver reads the payload where it is: in the application's
        // buffers, or in a copy when the buffers are the application's
        // again at once (inject).
        let (src, remote): (Box<dyn SendSource>, Vec<(u64, u64)>) = if inject {
            let mut v = vec![0u8; len];
            IovSource { iov, len }.read_at(0, &mut v);
            let r = vec![(v.as_ptr() as u64, len as u64)];
            (Box::new(v), r)
        } else {
            let r = iov.iter().map(|&(p, l)| (p as u64, l as u64)).collect();
            (Box::new(IovSource { iov, len }), r)
        };
        let w = st.shm.as_mut().expect("routed to shm");
        let id = match w.send_rts(ix, &hdr, src, &remote) {
            Ok(id) => id,
            Err(e) => return -(e as isize),
        };
        ring_bells(st);
        st.sends.insert(id, req);
        0
    }

    fn recv(&self, a: RecvArgs) -> isize {
        self.touch(now_ns());
        if let Err(e) = self.check_enabled() {
            return e;
        }
        if a.flags & !RECV_FLAGS != 0 {
            crate::warn!(FI_LOG_EP_DATA, "recv: unsupported flags {:#x}", a.flags & !RECV_FLAGS);
            return -FI_EBADFLAGS as isize;
        }
        if let Some(cap) = self.missing_cap(a.tagged, false) {
            crate::warn!(FI_LOG_EP_DATA, "recv: endpoint was opened without {}", cap);
            return -FI_EOPNOTSUPP as isize;
        }
        if a.iov.len() > self.rx_iov_limit {
            crate::warn!(
                FI_LOG_EP_DATA,
                "recv: {} iovs > iov_limit {}",
                a.iov.len(),
                self.rx_iov_limit
            );
            return -FI_EINVAL as isize;
        }
        if a.iov.iter().any(|&(p, l)| p == 0 && l != 0) {
            crate::warn!(FI_LOG_EP_DATA, "recv: NULL buffer with non-zero length");
            return -FI_EINVAL as isize;
        }
        let multi = a.flags & FI_MULTI_RECV != 0;
        if multi && (a.tagged || a.iov.len() != 1 || self.caps & FI_MULTI_RECV == 0) {
            crate::warn!(
                FI_LOG_EP_DATA,
                "FI_MULTI_RECV needs an untagged receive of one buffer on an FI_MULTI_RECV endpoint"
            );
            return -FI_EINVAL as isize;
        }
        if !a.tagged && a.flags & (FI_PEEK | FI_CLAIM | FI_DISCARD) != 0 {
            crate::warn!(
                FI_LOG_EP_DATA,
                "recv: FI_PEEK/FI_CLAIM/FI_DISCARD apply to tagged receives only"
            );
            return -FI_EBADFLAGS as isize;
        }
        let directed = self.caps & FI_DIRECTED_RECV != 0;
        let spec = if a.tagged {
            MatchSpec {
                tag: a.tag,
                ignore: a.ignore,
                src: src_filter(a.src, directed),
            }
        } else {
            MatchSpec {
                tag: 0,
                ignore: 0,
                src: src_filter(a.src, directed),
            }
        };
        let op = if a.tagged { FI_TAGGED } else { FI_MSG };
        let flags = FI_RECV | op | (a.flags & FI_COMPLETION);
        let mut st = self.lock();
        if spec.src.is_some() {
            self.resolve_sources(&mut st);
        }
        if a.flags & (FI_PEEK | FI_CLAIM) != 0 {
            return self.peek_claim(&mut st, spec, a, flags);
        }
        if multi {
            let (base, len) = a.iov[0];
            let id = st.next_multi;
            st.next_multi += 1;
            st.multi.insert(
                id,
                MultiBuf {
                    ctx: a.ctx,
                    base,
                    len,
                    used: 0,
                    pending: 0,
                    consumed: false,
                    flags,
                },
            );
            // Unexpected messages first, in arrival order, then post the rest.
            let min = st.min_multi_recv;
            while let Some(m) = st.tme_msg.take_unexpected(&spec) {
                let mb = st.multi.get_mut(&id).expect("the multi-recv buffer just inserted");
                let (slice, consumed) = mb.carve(id, m.msg.hdr.len as usize, min);
                self.deliver(&mut st, slice, m);
                if consumed {
                    return 0;
                }
            }
            st.tme_msg.append_posted(
                spec,
                Posted {
                    ctx: a.ctx,
                    tag: 0,
                    iov: a.iov,
                    flags,
                    multi: Some(id),
                },
            );
            return 0;
        }
        let posted = Posted {
            ctx: a.ctx,
            tag: a.tag,
            iov: a.iov,
            flags,
            multi: None,
        };
        let tme = if a.tagged { &mut st.tme_tag } else { &mut st.tme_msg };
        if let PostOutcome::Matched { recv, msg } = tme.post(spec, posted) {
            self.deliver(&mut st, recv, msg);
        }
        0
    }

    /// FI_PEEK, FI_PEEK|FI_CLAIM, FI_PEEK|FI_DISCARD, FI_CLAIM, FI_CLAIM|FI_DISCARD.
    fn peek_claim(&self, st: &mut EpState, spec: MatchSpec, a: RecvArgs, flags: u64) -> isize {
        // A peek should see what is already on the wire.
        self.progress_locked(st, now_ns());
        let b = self.binds();
        let peeked = |src: u64, peer: SocketAddr, hdr: MsgHdr| RecvDone {
            ctx: a.ctx,
            flags,
            buf: 0,
            len: hdr.len as usize,
            olen: 0,
            hdr,
            src: if self.caps & FI_SOURCE != 0 {
                src
            } else {
                FI_ADDR_NOTAVAIL
            },
            peer,
            multi: None,
        };
        if a.flags & FI_PEEK != 0 {
            let found = if a.flags & FI_CLAIM != 0 {
                st.tme_tag
                    .peek_claim(&spec, a.ctx as u64)
                    .map(|m| (m.src, m.msg.peer, m.msg.hdr))
            } else {
                st.tme_tag.peek(&spec).map(|m| (m.src, m.msg.peer, m.msg.hdr))
            };
            let Some((src, peer, hdr)) = found else {
                if let Some(cq) = &b.rx_cq {
                    let entry = CqEntry {
                        op_context: a.ctx as *mut c_void,
                        flags,
                        tag: a.tag,
                        ..CqEntry::default()
                    };
                    cq.push_err(CqError::new(entry, FI_ENOMSG));
                }
                return 0;
            };
            if a.flags & FI_DISCARD != 0 {
                if let Some(m) = st.tme_tag.take_unexpected(&spec) {
                    self.discard(st, m.msg);
                }
            }
            self.complete_peek(peeked(src, peer, hdr));
            return 0;
        }
        // FI_CLAIM: the message a previous FI_PEEK|FI_CLAIM set aside.
        let Some(m) = st.tme_tag.take_claimed(a.ctx as u64) else {
            crate::warn!(FI_LOG_EP_DATA, "FI_CLAIM: no message was claimed with this context");
            return -FI_EINVAL as isize;
        };
        if a.flags & FI_DISCARD != 0 {
            let mut d = peeked(m.src, m.msg.peer, m.msg.hdr);
            self.discard(st, m.msg);
            d.len = 0;
            self.complete_peek(d);
            return 0;
        }
        self.deliver(
            st,
            Posted {
                ctx: a.ctx,
                tag: a.tag,
                iov: a.iov,
                flags,
                multi: None,
            },
            m,
        );
        self.flush(st, now_ns());
        0
    }

    /// A peek's answer: the message's size, tag and data, nothing copied.
    fn complete_peek(&self, d: RecvDone) {
        let b = self.binds();
        let mut flags = d.flags & (FI_RECV | FI_TAGGED);
        if d.hdr.flags & MsgHdr::HAS_DATA != 0 {
            flags |= FI_REMOTE_CQ_DATA;
        }
        if let Some(cq) = &b.rx_cq {
            cq.push(CqEntry {
                op_context: d.ctx as *mut c_void,
                flags,
                len: d.len,
                buf: std::ptr::null_mut(),
                data: if d.hdr.flags & MsgHdr::HAS_DATA != 0 {
                    d.hdr.data
                } else {
                    0
                },
                tag: d.hdr.tag,
                src: d.src,
            });
        }
    }

    fn cancel(&self, ctx: usize) -> isize {
        let mut st = self.lock();
        let found = st
            .tme_msg
            .cancel_where(|p| p.ctx == ctx)
            .or_else(|| st.tme_tag.cancel_where(|p| p.ctx == ctx));
        let Some(p) = found else {
            return self.cancel_matched(&mut st, ctx);
        };
        if let Some(m) = p.multi {
            st.multi.remove(&m);
        }
        let b = self.binds();
        if let Some(cq) = &b.rx_cq {
            let entry = CqEntry {
                op_context: ctx as *mut c_void,
                flags: p.flags & (FI_RECV | FI_MSG | FI_TAGGED),
                tag: p.tag,
                ..CqEntry::default()
            };
            cq.push_err(CqError::new(entry, FI_ECANCELED));
        }
        if let Some(c) = &b.recv_cntr {
            c.inc_err();
        }
        0
    }
}

impl Ep {
    /// fi_cancel of a receive that was matched and whose data a local
    /// sender is still writing into it (or pushing): the sender's write is
    /// revoked, or waited for if it already runs, so nothing lands in the
    /// buffer after the cancellation completes. Other matched receives
    /// cannot be cancelled (-FI_ENOENT).
    fn cancel_matched(&self, st: &mut EpState, ctx: usize) -> isize {
        let rid = st
            .rndv
            .iter()
            .find(|(&rid, d)| d.ctx == ctx && ShmWire::owns(rid))
            .map(|(&rid, _)| rid);
        let Some(rid) = rid else { return -FI_ENOENT as isize };
        if !st.shm.as_mut().is_some_and(|w| w.cancel_rx(rid)) {
            return -FI_ENOENT as isize;
        }
        let d = st.rndv.remove(&rid).expect("found above");
        self.complete_recv(st, d, Some(FI_ECANCELED));
        ring_bells(st);
        0
    }
}

// ------------------------------------------------------------------------
// fi_ops: close, bind, control

unsafe extern "C" fn close(f: *mut fid) -> i32 {
    let Some(ep) = from_fid(f as *const c_void) else {
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
        for c in [&b.send_cntr, &b.recv_cntr].into_iter().flatten() {
            c.remove_source(&prog);
            c.refs.put();
        }
        for c in &b.rma_cntrs {
            c.refs.put();
        }
        if let Some(av) = &b.av {
            av.refs.put();
        }
        if let Some(eq) = &b.eq {
            eq.refs.put();
        }
    }
    Obj::destroy(f as *mut c_void);
    0
}

unsafe extern "C" fn bind(f: *mut fid, bf: *mut fid, flags: u64) -> i32 {
    let Some(ep) = from_fid(f as *const c_void) else {
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
    match (*bf).fclass as u32 {
        FI_CLASS_AV => {
            let Some(av) = crate::av::from_fid(bf as *const c_void) else {
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
            let Some(cq) = crate::cq::from_fid(bf as *const c_void) else {
                return -FI_EINVAL;
            };
            if flags & !(FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION) != 0 || flags & (FI_TRANSMIT | FI_RECV) == 0 {
                crate::warn!(FI_LOG_EP_CTRL, "fi_ep_bind(cq): flags {:#x}", flags);
                return -FI_EBADFLAGS;
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
            let Some(c) = crate::cntr::from_fid(bf as *const c_void) else {
                return -FI_EINVAL;
            };
            let known = FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
            if flags & !known != 0 || flags & known == 0 {
                return -FI_EBADFLAGS;
            }
            if flags & (FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE) != 0 {
                // No RMA operation can run on this endpoint (FI_RMA is not
                // offered), so such a counter never counts; MPICH binds one
                // regardless, and refusing would fail its MPI_Init.
                c.refs.get();
                b.rma_cntrs.push(c.clone());
            }
            if flags & FI_SEND != 0 {
                if b.send_cntr.is_some() {
                    return -FI_EINVAL;
                }
                c.refs.get();
                b.send_cntr = Some(c.clone());
            }
            if flags & FI_RECV != 0 {
                if b.recv_cntr.is_some() {
                    return -FI_EINVAL;
                }
                c.refs.get();
                b.recv_cntr = Some(c.clone());
            }
        }
        FI_CLASS_EQ => {
            let Some(eq) = crate::eq::from_fid(bf as *const c_void) else {
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
    for c in [&b.send_cntr, &b.recv_cntr].into_iter().flatten() {
        c.add_source(prog.clone());
    }
    let _ = ep.binds.set(b);
    ep.enabled.store(true, Ordering::Release);
    let auto: Weak<dyn AutoProgress> = me;
    ep.domain.nic.add(auto);
    0
}

unsafe extern "C" fn control(f: *mut fid, cmd: i32, arg: *mut c_void) -> i32 {
    let Some(ep) = from_fid(f as *const c_void) else {
        return -FI_EINVAL;
    };
    match cmd as u32 {
        FI_ENABLE => enable(ep),
        FI_GETOPSFLAG | FI_SETOPSFLAG => {
            let Some(flags) = (arg as *mut u64).as_mut() else {
                return -FI_EINVAL;
            };
            let (slot, allowed) = if *flags & FI_TRANSMIT != 0 {
                (&ep.tx_op_flags, crate::getinfo::TX_OP_FLAGS)
            } else if *flags & FI_RECV != 0 {
                (&ep.rx_op_flags, crate::getinfo::RX_OP_FLAGS)
            } else {
                return -FI_EINVAL;
            };
            if cmd as u32 == FI_GETOPSFLAG {
                *flags = slot.load(Ordering::Relaxed);
            } else {
                let v = *flags & !(FI_TRANSMIT | FI_RECV);
                if v & !allowed != 0 {
                    return -FI_EINVAL;
                }
                slot.store(v, Ordering::Relaxed);
            }
            0
        }
        _ => -FI_ENOSYS,
    }
}

// ------------------------------------------------------------------------
// fi_ops_ep, fi_ops_cm

unsafe extern "C" fn cancel(f: fid_t, ctx: *mut c_void) -> isize {
    let Some(ep) = from_fid(f as *const c_void) else {
        return -FI_EINVAL as isize;
    };
    if ep.binds.get().is_none() {
        return -FI_EOPBADSTATE as isize;
    }
    ep.cancel(ctx as usize)
}

unsafe extern "C" fn getopt(f: fid_t, level: i32, name: i32, val: *mut c_void, len: *mut usize) -> i32 {
    let Some(ep) = from_fid(f as *const c_void) else {
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
            if *len < std::mem::size_of::<usize>() {
                *len = std::mem::size_of::<usize>();
                return -FI_ETOOSMALL;
            }
            *(val as *mut usize) = ep.lock().min_multi_recv;
            *len = std::mem::size_of::<usize>();
            0
        }
        _ => -FI_ENOPROTOOPT,
    }
}

unsafe extern "C" fn setopt(f: fid_t, level: i32, name: i32, val: *const c_void, len: usize) -> i32 {
    let Some(ep) = from_fid(f as *const c_void) else {
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
            ep.lock().min_multi_recv = *(val as *const usize);
            0
        }
        _ => -FI_ENOPROTOOPT,
    }
}

unsafe extern "C" fn rx_size_left(e: *mut fid_ep) -> isize {
    let Some(ep) = from_fid(e as *const c_void) else {
        return -FI_EINVAL as isize;
    };
    let st = ep.lock();
    ep.rx_size
        .saturating_sub(st.tme_msg.posted_len() + st.tme_tag.posted_len()) as isize
}

unsafe extern "C" fn tx_size_left(e: *mut fid_ep) -> isize {
    let Some(ep) = from_fid(e as *const c_void) else {
        return -FI_EINVAL as isize;
    };
    ep.tx_size.saturating_sub(ep.lock().tx_busy()) as isize
}

unsafe extern "C" fn getname(f: fid_t, addr: *mut c_void, len: *mut usize) -> i32 {
    let Some(ep) = from_fid(f as *const c_void) else {
        return -FI_EINVAL;
    };
    if len.is_null() {
        return -FI_EINVAL;
    }
    let bytes = std_to_sockaddr(&ep.lock().wire.local_addr());
    let room = *len;
    *len = bytes.len();
    if room < bytes.len() || addr.is_null() {
        return -FI_ETOOSMALL;
    }
    std::ptr::copy_nonoverlapping(bytes.as_ptr(), addr as *mut u8, bytes.len());
    0
}

unsafe extern "C" fn setname(f: fid_t, addr: *mut c_void, len: usize) -> i32 {
    let Some(ep) = from_fid(f as *const c_void) else {
        return -FI_EINVAL;
    };
    if ep.enabled.load(Ordering::Acquire) {
        crate::warn!(FI_LOG_EP_CTRL, "fi_setname after fi_enable");
        return -FI_EOPBADSTATE;
    }
    let Some(a) = crate::getinfo::sockaddr_to_std(addr as *const u8, len) else {
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
    if a == st.wire.local_addr() {
        return 0;
    }
    match new_state(&ep.domain, a) {
        Ok(ns) => {
            ep.fd.store(ns.wire.wait_fd(), Ordering::Relaxed);
            if ep.watched.load(Ordering::Acquire) {
                // A sleeper of the old wire may sleep on the new one.
                let _ = ns.wire.watch();
            }
            *st = ns;
            0
        }
        Err(e) => e,
    }
}

unsafe extern "C" fn getpeer(_: *mut fid_ep, _: *mut c_void, _: *mut usize) -> i32 {
    -FI_ENOSYS
}
unsafe extern "C" fn connect(_: *mut fid_ep, _: *const c_void, _: *const c_void, _: usize) -> i32 {
    -FI_ENOSYS
}
unsafe extern "C" fn listen(_: *mut fid_pep) -> i32 {
    -FI_ENOSYS
}
unsafe extern "C" fn accept(_: *mut fid_ep, _: *const c_void, _: usize) -> i32 {
    -FI_ENOSYS
}
unsafe extern "C" fn reject(_: *mut fid_pep, _: fid_t, _: *const c_void, _: usize) -> i32 {
    -FI_ENOSYS
}
unsafe extern "C" fn shutdown(_: *mut fid_ep, _: u64) -> i32 {
    -FI_ENOSYS
}
unsafe extern "C" fn join(_: *mut fid_ep, _: *const c_void, _: u64, _: *mut *mut fid_mc, _: *mut c_void) -> i32 {
    -FI_ENOSYS
}
unsafe extern "C" fn tx_ctx(_: *mut fid_ep, _: i32, _: *mut fi_tx_attr, _: *mut *mut fid_ep, _: *mut c_void) -> i32 {
    -FI_ENOSYS
}
unsafe extern "C" fn rx_ctx(_: *mut fid_ep, _: i32, _: *mut fi_rx_attr, _: *mut *mut fid_ep, _: *mut c_void) -> i32 {
    -FI_ENOSYS
}

// ------------------------------------------------------------------------
// Argument conversion shims

unsafe fn iov_of(iov: *const iovec, count: usize) -> Option<Iov> {
    if count == 0 {
        return Some(Iov::new());
    }
    if iov.is_null() {
        return None;
    }
    Some(
        std::slice::from_raw_parts(iov, count)
            .iter()
            .map(|v| (v.iov_base as usize, v.iov_len))
            .collect(),
    )
}

fn one(buf: *const c_void, len: usize) -> Iov {
    if len == 0 {
        Iov::new()
    } else {
        smallvec::smallvec![(buf as usize, len)]
    }
}

macro_rules! ep_or_inval {
    ($e:expr) => {
        match from_fid($e as *const c_void) {
            Some(ep) => ep,
            None => return -FI_EINVAL as isize,
        }
    };
}

impl Ep {
    fn tx_flags(&self) -> u64 {
        self.tx_op_flags.load(Ordering::Relaxed)
    }
    fn rx_flags(&self) -> u64 {
        self.rx_op_flags.load(Ordering::Relaxed)
    }
}

#[allow(clippy::too_many_arguments)]
unsafe fn do_send(
    e: *mut fid_ep,
    iov: Option<Iov>,
    dest: u64,
    tag: u64,
    data: Option<u64>,
    ctx: *mut c_void,
    flags: Option<u64>,
    tagged: bool,
) -> isize {
    let ep = ep_or_inval!(e);
    let Some(iov) = iov else {
        crate::warn!(FI_LOG_EP_DATA, "send: NULL iov with a non-zero count");
        return -FI_EINVAL as isize;
    };
    let flags = flags.unwrap_or_else(|| ep.tx_flags());
    ep.send(SendArgs {
        iov,
        dest,
        tag,
        data,
        ctx: ctx as usize,
        flags,
        tagged,
        silent: false,
    })
}

/// fi_inject, fi_injectdata, fi_tinject, fi_tinjectdata: the op flags do
/// not apply (fi_msg(3)), and no completion is written.
unsafe fn do_inject(
    e: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    dest: u64,
    tag: Option<u64>,
    data: Option<u64>,
) -> isize {
    let ep = ep_or_inval!(e);
    let data_flag = if data.is_some() { FI_REMOTE_CQ_DATA } else { 0 };
    ep.send(SendArgs {
        iov: one(buf, len),
        dest,
        tag: tag.unwrap_or(0),
        data,
        ctx: 0,
        flags: FI_INJECT | data_flag,
        tagged: tag.is_some(),
        silent: true,
    })
}

#[allow(clippy::too_many_arguments)]
unsafe fn do_recv(
    e: *mut fid_ep,
    iov: Option<Iov>,
    src: u64,
    tag: u64,
    ignore: u64,
    ctx: *mut c_void,
    flags: Option<u64>,
    tagged: bool,
) -> isize {
    let ep = ep_or_inval!(e);
    let Some(iov) = iov else {
        crate::warn!(FI_LOG_EP_DATA, "recv: NULL iov with a non-zero count");
        return -FI_EINVAL as isize;
    };
    let flags = flags.unwrap_or_else(|| ep.rx_flags());
    ep.recv(RecvArgs {
        iov,
        src,
        tag,
        ignore,
        ctx: ctx as usize,
        flags,
        tagged,
    })
}

unsafe extern "C" fn msg_send(
    e: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _d: *mut c_void,
    dest: u64,
    ctx: *mut c_void,
) -> isize {
    do_send(e, Some(one(buf, len)), dest, 0, None, ctx, None, false)
}
unsafe extern "C" fn msg_sendv(
    e: *mut fid_ep,
    iov: *const iovec,
    _d: *mut *mut c_void,
    count: usize,
    dest: u64,
    ctx: *mut c_void,
) -> isize {
    do_send(e, iov_of(iov, count), dest, 0, None, ctx, None, false)
}
unsafe extern "C" fn msg_sendmsg(e: *mut fid_ep, m: *const fi_msg, flags: u64) -> isize {
    let Some(m) = m.as_ref() else {
        crate::warn!(FI_LOG_EP_DATA, "NULL message descriptor");
        return -FI_EINVAL as isize;
    };
    let data = (flags & FI_REMOTE_CQ_DATA != 0).then_some(m.data);
    do_send(
        e,
        iov_of(m.msg_iov, m.iov_count),
        m.addr,
        0,
        data,
        m.context,
        Some(flags),
        false,
    )
}
unsafe extern "C" fn msg_inject(e: *mut fid_ep, buf: *const c_void, len: usize, dest: u64) -> isize {
    do_inject(e, buf, len, dest, None, None)
}
unsafe extern "C" fn msg_senddata(
    e: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _d: *mut c_void,
    data: u64,
    dest: u64,
    ctx: *mut c_void,
) -> isize {
    do_send(e, Some(one(buf, len)), dest, 0, Some(data), ctx, None, false)
}
unsafe extern "C" fn msg_injectdata(e: *mut fid_ep, buf: *const c_void, len: usize, data: u64, dest: u64) -> isize {
    do_inject(e, buf, len, dest, None, Some(data))
}
unsafe extern "C" fn msg_recv(
    e: *mut fid_ep,
    buf: *mut c_void,
    len: usize,
    _d: *mut c_void,
    src: u64,
    ctx: *mut c_void,
) -> isize {
    do_recv(e, Some(one(buf, len)), src, 0, 0, ctx, None, false)
}
unsafe extern "C" fn msg_recvv(
    e: *mut fid_ep,
    iov: *const iovec,
    _d: *mut *mut c_void,
    count: usize,
    src: u64,
    ctx: *mut c_void,
) -> isize {
    do_recv(e, iov_of(iov, count), src, 0, 0, ctx, None, false)
}
unsafe extern "C" fn msg_recvmsg(e: *mut fid_ep, m: *const fi_msg, flags: u64) -> isize {
    let Some(m) = m.as_ref() else {
        crate::warn!(FI_LOG_EP_DATA, "NULL message descriptor");
        return -FI_EINVAL as isize;
    };
    do_recv(
        e,
        iov_of(m.msg_iov, m.iov_count),
        m.addr,
        0,
        0,
        m.context,
        Some(flags),
        false,
    )
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn tag_send(
    e: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _d: *mut c_void,
    dest: u64,
    tag: u64,
    ctx: *mut c_void,
) -> isize {
    do_send(e, Some(one(buf, len)), dest, tag, None, ctx, None, true)
}
#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn tag_sendv(
    e: *mut fid_ep,
    iov: *const iovec,
    _d: *mut *mut c_void,
    count: usize,
    dest: u64,
    tag: u64,
    ctx: *mut c_void,
) -> isize {
    do_send(e, iov_of(iov, count), dest, tag, None, ctx, None, true)
}
unsafe extern "C" fn tag_sendmsg(e: *mut fid_ep, m: *const fi_msg_tagged, flags: u64) -> isize {
    let Some(m) = m.as_ref() else {
        crate::warn!(FI_LOG_EP_DATA, "NULL message descriptor");
        return -FI_EINVAL as isize;
    };
    let data = (flags & FI_REMOTE_CQ_DATA != 0).then_some(m.data);
    do_send(
        e,
        iov_of(m.msg_iov, m.iov_count),
        m.addr,
        m.tag,
        data,
        m.context,
        Some(flags),
        true,
    )
}
unsafe extern "C" fn tag_inject(e: *mut fid_ep, buf: *const c_void, len: usize, dest: u64, tag: u64) -> isize {
    do_inject(e, buf, len, dest, Some(tag), None)
}
#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn tag_senddata(
    e: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _d: *mut c_void,
    data: u64,
    dest: u64,
    tag: u64,
    ctx: *mut c_void,
) -> isize {
    do_send(e, Some(one(buf, len)), dest, tag, Some(data), ctx, None, true)
}
unsafe extern "C" fn tag_injectdata(
    e: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest: u64,
    tag: u64,
) -> isize {
    do_inject(e, buf, len, dest, Some(tag), Some(data))
}
#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn tag_recv(
    e: *mut fid_ep,
    buf: *mut c_void,
    len: usize,
    _d: *mut c_void,
    src: u64,
    tag: u64,
    ignore: u64,
    ctx: *mut c_void,
) -> isize {
    do_recv(e, Some(one(buf, len)), src, tag, ignore, ctx, None, true)
}
#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn tag_recvv(
    e: *mut fid_ep,
    iov: *const iovec,
    _d: *mut *mut c_void,
    count: usize,
    src: u64,
    tag: u64,
    ignore: u64,
    ctx: *mut c_void,
) -> isize {
    do_recv(e, iov_of(iov, count), src, tag, ignore, ctx, None, true)
}
unsafe extern "C" fn tag_recvmsg(e: *mut fid_ep, m: *const fi_msg_tagged, flags: u64) -> isize {
    let Some(m) = m.as_ref() else {
        crate::warn!(FI_LOG_EP_DATA, "NULL message descriptor");
        return -FI_EINVAL as isize;
    };
    do_recv(
        e,
        iov_of(m.msg_iov, m.iov_count),
        m.addr,
        m.tag,
        m.ignore,
        m.context,
        Some(flags),
        true,
    )
}

static EP_FI_OPS: Table<fi_ops> = Table(base_ops(close, Some(bind), Some(control), None));
static EP_OPS: Table<fi_ops_ep> = Table(fi_ops_ep {
    size: std::mem::size_of::<fi_ops_ep>(),
    cancel: Some(cancel),
    getopt: Some(getopt),
    setopt: Some(setopt),
    tx_ctx: Some(tx_ctx),
    rx_ctx: Some(rx_ctx),
    rx_size_left: Some(rx_size_left),
    tx_size_left: Some(tx_size_left),
});
static CM_OPS: Table<fi_ops_cm> = Table(fi_ops_cm {
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
static MSG_OPS: Table<fi_ops_msg> = Table(fi_ops_msg {
    size: std::mem::size_of::<fi_ops_msg>(),
    recv: Some(msg_recv),
    recvv: Some(msg_recvv),
    recvmsg: Some(msg_recvmsg),
    send: Some(msg_send),
    sendv: Some(msg_sendv),
    sendmsg: Some(msg_sendmsg),
    inject: Some(msg_inject),
    senddata: Some(msg_senddata),
    injectdata: Some(msg_injectdata),
});
static TAGGED_OPS: Table<fi_ops_tagged> = Table(fi_ops_tagged {
    size: std::mem::size_of::<fi_ops_tagged>(),
    recv: Some(tag_recv),
    recvv: Some(tag_recvv),
    recvmsg: Some(tag_recvmsg),
    send: Some(tag_send),
    sendv: Some(tag_sendv),
    sendmsg: Some(tag_sendmsg),
    inject: Some(tag_inject),
    senddata: Some(tag_senddata),
    injectdata: Some(tag_injectdata),
});

/// Doorbells for sleeping local peers, over our UDP socket. One that the
/// socket cannot take now stays queued (a sleeper must not miss it);
/// `next_deadline` brings us back soon.
fn ring_bells(st: &mut EpState) {
    let EpState { shm, wire, .. } = st;
    let Some(w) = shm.as_mut().filter(|w| !w.bells.is_empty()) else {
        return;
    };
    let stats = &mut w.stats;
    w.bells.retain(|&a| match wire.send_one(shm::DOORBELL, a) {
        Ok(()) => {
            stats.doorbells += 1;
            false
        }
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => true,
        Err(e) => {
            crate::debug!(FI_LOG_EP_DATA, "doorbell to {}: {}", a, e);
            false
        }
    });
}

/// `Ep::flush`'s side of `Engine::poll_transmit_burst`: datagrams join
/// the batch (GSO runs to one peer), which goes to the socket when full.
struct FlushOut<'a> {
    wire: &'a UdpWire,
    txbuf: &'a mut TxBatch,
    /// The socket refused a batch (it was stashed): stop for this pass.
    refused: bool,
}

impl TxOut for FlushOut<'_> {
    fn slot(&mut self) -> Option<&mut [u8]> {
        if self.txbuf.full() {
            if !self.wire.send_batch(self.txbuf) {
                self.refused = true;
                return None;
            }
            self.txbuf.rewind();
        }
        Some(self.txbuf.slot())
    }

    fn commit(&mut self, t: Transmit<'_>) -> bool {
        let (h, n, to) = (t.hdr_len, t.len, t.to);
        let payload: &[u8] = match t.payload {
            None => &[],
            Some((src, off)) => match src.contiguous(off, n - h) {
                Some(p) => p,
                None => {
                    src.read_at(off, &mut self.txbuf.slot()[h..n]);
                    &[]
                }
            },
        };
        let hdr_len = if payload.is_empty() { n } else { h };
        if !self.txbuf.fits(to, n, self.wire.gso()) && !self.wire.send_batch(self.txbuf) {
            // The socket is full: keep this one too and stop.
            // SAFETY: send_batch below sends or stashes (copies) it.
            unsafe { self.txbuf.push(to, hdr_len, payload) };
            self.wire.send_batch(self.txbuf);
            self.refused = true;
            return false;
        }
        // SAFETY: the payload lives in a send source the engine keeps,
        // unmoved and unchanged, until that send completes, which only an
        // incoming ACK or FIN can do; none is handled before this batch is
        // sent or stashed by send_batch within the same flush.
        unsafe { self.txbuf.push(to, hdr_len, payload) };
        true
    }
}
