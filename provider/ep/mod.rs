//! RDM endpoint class: the libfabric face of one port of the software NIC.
//!
//! An endpoint has a port on the software NIC (`nic::port::Port`) with two
//! wires (`nic::wire::Wire`): shared memory to peers on this host and UDP
//! to the others, chosen per peer on first use. Its operations are
//! `FabReq`s (`nic::fabreq`), one table bounded by `tx_size` and
//! `rx_size`; its receives are matched by two tag-matching engines (`Tme`,
//! untagged and tagged). The receive and transmit paths see the endpoint
//! itself only as a `Face` (capabilities, the AV, the completion queues
//! and counters), so their unit tests run against a fake one and fake
//! wires.
//!
//! The rooms:
//!
//! | file | what |
//! |---|---|
//! | `mod.rs` | the endpoint object and its state, opening, progress across the wires, closing |
//! | `tx.rs` | the transmit path: validation, the FabReq, the wire, send completions; `send_small`, the short way of small sends to local peers |
//! | `lanes.rs` | which fi_addrs a small send reaches straight in a local peer's ring (the shm wire's peer index, by AV index) |
//! | `rx.rs` | the receive path: posting, matching, arrivals, peek/claim/discard, cancel, receive completions |
//! | `ctl.rs` | `fi_ops`, `fi_ops_ep`, `fi_ops_cm`: close, bind, enable, control, options, names |
//! | `rma.rs` | one-sided operations (RMA, atomics) as messages: the initiator's parts, the target's checks and answers |
//! | `shims.rs` | the data-path `extern "C"` shims and the msg and tagged ops tables |
//! | `shims_rma.rs`, `shims_atomic.rs` | the rma and atomic ops tables |
//! | `coll.rs` | collectives: joins, and the schedules of `coll::sched` run with internal messages |
//! | `shims_coll.rs` | the collective ops table |
//!
//! Every data call and every progress pass runs under the endpoint's one
//! lock, so threads using different endpoints never contend (DESIGN.md
//! §4); completions go to the bound CQs and counters, which have locks of
//! their own (taken after this one, never before).

mod coll;
mod ctl;
mod deferred;
mod lanes;
mod rma;
mod rma_target;
mod rx;
mod shims;
mod shims_atomic;
mod shims_coll;
mod shims_rma;
#[cfg(test)]
mod tests;
mod tx;

use crate::av::Av;
use crate::cntr::Cntr;
use crate::cq::Cq;
use crate::domain::Domain;
use crate::ffi::*;
use crate::fid::{fid_header, FidObj, ParentRef};
use crate::gate::{gate_mutex, GateGuard, GateMutex};
use crate::mr::MrEvent;
use crate::nic::fabreq::FabReqs;
use crate::nic::port::Port;
use crate::nic::shm::ShmConfig;
use crate::nic::shm::ShmWire;
use crate::nic::udp::UdpSockets;
use crate::nic::udp_wire::UdpWire;
use crate::nic::AutoProgress;
use crate::progress::{now_ns, Pass, PassClock, Progress, Quiet};
use crate::proto::EngineConfig;
use std::ffi::c_void;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use crate::cq::{CqEntry, CqError};
use crate::getinfo::std_to_sockaddr;
pub(crate) use rx::Rx;
use rx::{Handler, Req, SendReq};

#[derive(Clone, Default)]
struct Bindings {
    av: Option<Arc<Av>>,
    tx_cq: Option<Arc<Cq>>,
    rx_cq: Option<Arc<Cq>>,
    tx_selective: bool,
    rx_selective: bool,
    send_cntr: Option<Arc<Cntr>>,
    recv_cntr: Option<Arc<Cntr>>,
    /// One-sided completions: ours (FI_READ, FI_WRITE), and peers' on our
    /// memory (FI_REMOTE_READ, FI_REMOTE_WRITE).
    read_cntr: Option<Arc<Cntr>>,
    write_cntr: Option<Arc<Cntr>>,
    rem_read_cntr: Option<Arc<Cntr>>,
    rem_write_cntr: Option<Arc<Cntr>>,
    /// Held so the EQ cannot close under the endpoint; RDM endpoints have
    /// no asynchronous events to report in it yet.
    eq: Option<Arc<crate::eq::Eq>>,
}

impl Bindings {
    /// Every counter bound, once per role (send, recv, read, write,
    /// remote read, remote write).
    fn cntrs(&self) -> impl Iterator<Item = &Arc<Cntr>> {
        [
            &self.send_cntr,
            &self.recv_cntr,
            &self.read_cntr,
            &self.write_cntr,
            &self.rem_read_cntr,
            &self.rem_write_cntr,
        ]
        .into_iter()
        .flatten()
    }
}

/// Where deferred work's completion goes (`Ep::route_next`).
struct Route {
    ctx: usize,
    cntr: Option<Arc<Cntr>>,
    at_ep: bool,
}

/// Whole passes of the application's polls, with the sockets in their
/// epoll set and no sleeper arming meanwhile, before they leave it
/// (`Ep::unwatch_if_unslept`): a thread that sleeps in fi_cq_sread arms
/// before every sleep and never gets there, one that polls in a loop does
/// within microseconds.
const UNWATCH_AFTER: u32 = 64;
/// And the time since the last arming: an application that polls a while
/// and then sleeps, message after message, takes the sockets out and puts
/// them back (four system calls) at most once in this long.
const UNWATCH_QUIET_NS: u64 = 1_000_000;

/// What the endpoint's lock guards: its wires, its operations, its
/// matching.
struct EpState {
    port: Port,
    reqs: FabReqs<Req>,
    rx: Rx,
    os: rma::Onesided,
    /// After `port`: an operation's landing buffers outlive the wires
    /// that write them.
    coll: coll::Colls,
    /// A stream of sends to one peer takes no AV lock.
    dest_cache: DestCache,
    /// Where small sends to local peers go (`Ep::send_small`).
    lanes: lanes::Lanes,
    /// The time of the application's progress passes (CQ and counter
    /// polls).
    clock: PassClock,
    /// Until when a poll that finds no slot in the shm rings has nothing
    /// else to do: it ends after that look instead of making a pass
    /// (`Ep::progress`). Set by a pass that found nothing
    /// (`Port::quiet_until`); ended by one that found something, and
    /// when anything else took the lock (`Ep::lock`).
    quiet: Quiet,
    /// The application's whole passes since a sleeper last armed, while
    /// the sockets are in their epoll set, and when it armed
    /// (`Ep::unwatch_if_unslept`).
    unarmed_passes: u32,
    armed_at: u64,
}

/// The last destination a send looked up: (fi_addr, AV generation,
/// address).
type DestCache = Option<(u64, u64, SocketAddr)>;

impl EpState {
    /// `split`, with the send path's destination cache beside the parts.
    fn split_send<'a>(&'a mut self, face: &'a Ep) -> (&'a mut Port, Handler<'a, Ep>, &'a mut DestCache) {
        let EpState {
            port,
            reqs,
            rx,
            os,
            coll,
            dest_cache,
            ..
        } = self;
        let caps = face.caps();
        (
            port,
            Handler {
                face,
                caps,
                rx,
                reqs,
                os,
                coll,
            },
            dest_cache,
        )
    }

    /// The receive and transmit paths (`Handler`, also the wires'
    /// upcall), apart from the port whose wires they drive.
    fn split<'a>(&'a mut self, face: &'a Ep) -> (&'a mut Port, Handler<'a, Ep>) {
        let (port, h, _) = self.split_send(face);
        (port, h)
    }
}

/// The endpoint as its receive and transmit paths see it: capabilities,
/// the AV, and where completions go. `Ep` is the real one.
pub(super) trait Face {
    fn caps(&self) -> u64;
    /// The fi_addr the AV has for `peer`.
    fn reverse(&self, peer: &SocketAddr) -> Option<u64>;
    /// Changes whenever the AV does.
    fn av_generation(&self) -> u64;
    /// A send's completion (or error entry); fi_inject only counts.
    fn tx_complete(&self, r: &SendReq, err: Option<i32>);
    /// A receive's completion, or with `err` its error entry
    /// (FI_EADDRNOTAVAIL carries `peer`'s address); its counter. A
    /// successful one is written only if not selective or asked for
    /// (`op_flags & FI_COMPLETION`).
    fn rx_complete(&self, op_flags: u64, entry: CqEntry, err: Option<i32>, olen: usize, peer: Option<&SocketAddr>);
    /// A peek's answer (or with `err`, FI_ENOMSG): an entry, no counter.
    fn rx_peek(&self, entry: CqEntry, err: Option<i32>);
    /// A one-sided operation of ours ended: its entry (or error entry) and
    /// its counter (FI_READ or FI_WRITE).
    fn rma_complete(&self, r: &rma::RmaReq, err: Option<i32>);
    /// A peer may touch `len` bytes of our memory at `addr` under `key`
    /// with `access` (`nic::wire::Upcall::resolve`).
    fn resolve(&self, key: u64, addr: u64, len: u64, access: u64) -> Result<(crate::nic::iov::Iov, MrEvent), i32>;
    /// A peer's one-sided operation on our memory completed (`access`:
    /// FI_REMOTE_READ or FI_REMOTE_WRITE): the endpoint's counter and the
    /// region's (`ev`), and for remote CQ data an entry in the receive CQ.
    fn remote_done(&self, access: u64, data: Option<u64>, len: usize, ev: MrEvent);
    /// A collective of ours ended: its entry (or error entry) in the
    /// transmit CQ.
    fn coll_complete(&self, ctx: usize, flags: u64, err: Option<i32>);
    /// A join ended: FI_JOIN_COMPLETE (or an error) on the EQ, naming the
    /// group's fid `mc`.
    fn join_complete(&self, mc: u64, ctx: usize, err: Option<i32>);
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
    rma_iov_limit: usize,
    max_msg_size: usize,
    pending_binds: Mutex<Bindings>,
    binds: OnceLock<Bindings>,
    /// fi_ep_alias: each alias's fid and its own op flags (tx, rx).
    aliases: Mutex<Vec<(usize, u64, u64)>>,
    aliased: AtomicBool,
    /// Deferred work in flight (fi_trigger(3)): by context, the counter its
    /// completion counts on and whether it also completes at the endpoint.
    routes: Mutex<Vec<Route>>,
    routed: AtomicBool,
    enabled: AtomicBool,
    fd: AtomicI32,
    /// The wire's sockets are in its wait fd's epoll set (`UdpSockets::watch`,
    /// done by a sleeper's `arm_wakeup`; undone by the application's polls
    /// once no sleeper is left, `unwatch_if_unslept`).
    watched: AtomicBool,
    /// Sleepers armed (`arm_wakeup`) and not back yet (`disarm`), and
    /// armings never taken back (a native wait on the fd, fi_trywait): while
    /// any, the sockets stay in their epoll set.
    sleepers: AtomicU64,
    /// The application called in since the progress thread last looked
    /// (`touch`): a flag rather than a time, so that a data call reads no
    /// clock. The thread turns it into `app_seen`.
    app_called: AtomicBool,
    /// When the progress thread last saw `app_called` (its clock).
    app_seen: AtomicU64,
    /// Everything the data path changes. Taken by every data call and
    /// progress pass: under FI_THREAD_DOMAIN a gate lock (no atomic
    /// instruction for the application, `gate.rs`), else parking_lot's
    /// mutex (its uncontended lock and unlock one atomic each, inlined).
    /// Neither tracks poisoning: after a panic, which `abi_guard` turns
    /// into an error of that call, the state is used as it is.
    state: GateMutex<EpState>,
}

type Obj = FidObj<fid_ep, Ep>;

/// The endpoint behind an application-supplied fid: checks class and magic.
///
/// # Safety
/// `p` must be NULL or point to readable memory of at least a `struct fid`.
pub unsafe fn from_fid<'a>(p: *const c_void) -> Option<&'a Arc<Ep>> {
    // SAFETY: the caller passes a pointer libfabric handed it as a fid
    // (or NULL); Obj::get checks the class before casting.
    unsafe { Obj::get(p, FI_CLASS_EP) }
}

fn engine_config(dom: &Domain, wire: &UdpSockets) -> EngineConfig {
    let link = crate::params::LinkFacts {
        max_datagram: wire.max_datagram,
        local_max_datagram: wire.local_max_datagram,
        rcvbuf: wire.rcvbuf,
        local_ips: crate::getinfo::interfaces().iter().map(|i| i.ip).collect(),
    };
    let manual = !dom.nic.is_auto();
    crate::params::engine_config(crate::params::params(), *dom.tunables.lock().unwrap(), link, manual)
}

/// A key for the wires' hash maps, which peers' addresses and ids fill:
/// from the operating system's random source, so nobody can aim
/// collisions.
fn seed() -> u64 {
    use crate::proto::Entropy;
    crate::proto::OsEntropy.next_u64()
}

fn new_state(dom: &Domain, addr: SocketAddr, tx_size: usize, rx_size: usize) -> Result<EpState, i32> {
    let p = crate::params::params();
    let sockets = UdpSockets::bind(addr, &dom.attr.iface.name, p.sockbuf, p.udp_mtu, p.udp_connect).map_err(|e| {
        crate::warn!(FI_LOG_EP_CTRL, "cannot bind a UDP socket to {}: {}", addr, e);
        if e.kind() == std::io::ErrorKind::AddrInUse {
            -FI_EADDRINUSE
        } else {
            -FI_EINVAL
        }
    })?;
    let cfg = engine_config(dom, &sockets);
    let threshold = cfg.rndv_threshold;
    let udp = UdpWire::new(sockets, cfg, seed());
    let shm = if p.shm {
        let geo = p.shm_geometry();
        let cfg = ShmConfig {
            // The receive budget (FI_GNIX_CREDIT_BYTES) split among the
            // rings: bounds what local peers' unexpected messages hold
            // here, whatever their number; enough for a few slots each.
            loan: match p.credit_bytes {
                0 => 0,
                b => ((b / geo.nrings) as u64).max(8 * (geo.span * geo.slot_size) as u64),
            },
            geo,
            cma: p.cma,
            local_ips: crate::getinfo::interfaces().iter().map(|i| i.ip).collect(),
        };
        ShmWire::new(udp.local_addr(), cfg, seed())
            .inspect_err(|e| {
                crate::warn!(
                    FI_LOG_EP_CTRL,
                    "no shm mailbox for {} ({}): local peers use UDP",
                    udp.local_addr(),
                    e
                )
            })
            .ok()
            .map(|mut s| {
                s.set_rndv_threshold(threshold);
                s
            })
    } else {
        None
    };
    Ok(EpState {
        port: Port::new(udp, shm, 2 * tx_size + rma::ANSWER_DESCS),
        reqs: FabReqs::new(tx_size, rx_size),
        rx: Rx::new(),
        os: rma::Onesided::default(),
        coll: coll::Colls::default(),
        dest_cache: None,
        lanes: lanes::Lanes::default(),
        clock: PassClock::default(),
        quiet: Quiet::default(),
        unarmed_passes: 0,
        armed_at: 0,
    })
}

/// fi_endpoint, called by the domain's shim.
///
/// # Safety
/// `info` must be NULL or a valid fi_info (attr pointers NULL or valid).
pub unsafe fn open(dom: &Arc<Domain>, info: *mut fi_info, ctx: *mut c_void) -> Result<*mut fid_ep, i32> {
    // SAFETY: `info` comes from the application's fi_endpoint call.
    let o = unsafe { crate::getinfo::offer_from_info(info) }?;
    if o.iface.name != dom.attr.iface.name {
        crate::warn!(
            FI_LOG_EP_CTRL,
            "fi_endpoint: info is for domain {}, not {}",
            o.iface.name,
            dom.attr.iface.name
        );
        return Err(-FI_EINVAL);
    }
    let mut st = new_state(dom, o.src, o.tx_size, o.rx_size)?;
    st.os.order_max = o.max_order_size;
    let fd = st.port.wait_fd();
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
        rma_iov_limit: crate::getinfo::MAX_IOV,
        max_msg_size: o.max_msg_size,
        pending_binds: Mutex::new(Bindings::default()),
        binds: OnceLock::new(),
        aliases: Mutex::new(Vec::new()),
        aliased: AtomicBool::new(false),
        routes: Mutex::new(Vec::new()),
        routed: AtomicBool::new(false),
        enabled: AtomicBool::new(false),
        fd: AtomicI32::new(fd),
        watched: AtomicBool::new(false),
        sleepers: AtomicU64::new(0),
        app_called: AtomicBool::new(false),
        app_seen: AtomicU64::new(0),
        state: gate_mutex(dom.gate.clone(), st),
    });
    let c = fid_ep {
        fid: fid_header(FI_CLASS_EP, ctx, ctl::EP_FI_OPS.ptr()),
        ops: ctl::EP_OPS.ptr(),
        cm: ctl::CM_OPS.ptr(),
        msg: shims::MSG_OPS.ptr(),
        rma: shims_rma::RMA_OPS.ptr(),
        tagged: shims::TAGGED_OPS.ptr(),
        atomic: shims_atomic::ATOMIC_OPS.ptr(),
        collective: shims_coll::COLLECTIVE_OPS.ptr(),
    };
    Ok(Obj::create(c, ep))
}

impl Ep {
    fn binds(&self) -> &Bindings {
        // Only reached after enable (data calls check it).
        self.binds.get().expect("endpoint enabled")
    }

    /// The application is calling in: the progress thread keeps off.
    /// (Stored only when the thread has taken the last one: the line
    /// stays in this core's cache.)
    fn touch(&self) {
        if !self.app_called.load(Ordering::Relaxed) {
            self.app_called.store(true, Ordering::Relaxed);
        }
    }

    /// The endpoint's state, for anything but a progress pass: whatever
    /// it changes, the next poll makes a whole pass.
    #[inline(always)]
    fn lock(&self) -> GateGuard<'_, EpState> {
        let mut st = self.state.lock();
        st.quiet.end();
        st
    }

    /// The address of `dest` in the AV (`cache`, the endpoint's
    /// `dest_cache`, remembers the last one while the AV does not change).
    #[inline(always)]
    fn dest_addr<'a>(&self, b: &Bindings, cache: &'a mut DestCache, dest: u64) -> Option<&'a SocketAddr> {
        let av = b.av.as_ref()?;
        let gen = av.generation();
        if !matches!(cache, Some((a, g, _)) if *a == dest && *g == gen) {
            // The generation is read before the lookup: a change racing
            // with it leaves an entry that the next send refreshes.
            *cache = Some((dest, gen, av.lookup(dest)?));
        }
        cache.as_ref().map(|(_, _, peer)| peer)
    }

    fn tx_flags(&self) -> u64 {
        self.tx_op_flags.load(Ordering::Relaxed)
    }

    fn rx_flags(&self) -> u64 {
        self.rx_op_flags.load(Ordering::Relaxed)
    }

    /// The op flags of the fid a call came through: the endpoint's, or an
    /// alias's (fi_ep_alias).
    #[inline]
    fn flags_at(&self, f: *const fid_ep, tx: bool) -> u64 {
        if self.aliased.load(Ordering::Acquire) {
            if let Some(flags) = self.alias_flags(f, tx) {
                return flags;
            }
        }
        if tx {
            self.tx_flags()
        } else {
            self.rx_flags()
        }
    }

    /// The op flags of alias `f`, if it is one (out of the data path's
    /// line: few applications alias an endpoint).
    #[cold]
    fn alias_flags(&self, f: *const fid_ep, tx: bool) -> Option<u64> {
        let a = self.aliases.lock().unwrap_or_else(|p| p.into_inner());
        a.iter()
            .find(|x| x.0 == f as usize)
            .map(|&(_, t, r)| if tx { t } else { r })
    }

    /// Room for new operations: transmit (`tx`) or receive.
    pub(crate) fn room(&self, tx: bool) -> usize {
        if tx {
            self.tx_left()
        } else {
            self.rx_left()
        }
    }

    /// The next operation posted with context `ctx` is deferred work: its
    /// completion counts on `cntr`, and reaches the endpoint's CQ and
    /// counters only if `at_ep` (FI_COMPLETION).
    pub(crate) fn route_next(&self, ctx: usize, cntr: Option<Arc<Cntr>>, at_ep: bool) {
        let mut r = self.routes.lock().unwrap_or_else(|p| p.into_inner());
        r.push(Route { ctx, cntr, at_ep });
        self.routed.store(true, Ordering::Release);
    }

    /// Deferred work `ctx` ended (`err`): counted on its counter. Whether
    /// the endpoint reports it too.
    #[inline]
    fn at_endpoint(&self, ctx: usize, err: Option<i32>) -> bool {
        if !self.routed.load(Ordering::Acquire) {
            return true;
        }
        self.at_endpoint_routed(ctx, err)
    }

    #[cold]
    fn at_endpoint_routed(&self, ctx: usize, err: Option<i32>) -> bool {
        let mut r = self.routes.lock().unwrap_or_else(|p| p.into_inner());
        let Some(k) = r.iter().position(|x| x.ctx == ctx) else {
            return true;
        };
        let route = r.remove(k);
        self.routed.store(!r.is_empty(), Ordering::Release);
        drop(r);
        count(&route.cntr, err);
        route.at_ep
    }

    /// An operation that could not be posted after all (a triggered one):
    /// its error completion and its counter.
    pub(crate) fn fail_op(&self, ctx: usize, flags: u64, tx: bool, err: i32) {
        if !self.at_endpoint(ctx, Some(err)) {
            return;
        }
        let Some(b) = self.binds.get() else { return };
        count(if tx { &b.send_cntr } else { &b.recv_cntr }, Some(err));
        let entry = CqEntry {
            op_context: ctx as *mut c_void,
            flags,
            ..CqEntry::default()
        };
        if let Some(cq) = if tx { &b.tx_cq } else { &b.rx_cq } {
            cq.push_err(CqError::new(entry, err));
        }
    }

    /// One pass over both wires; what arrives is matched, what ends is
    /// completed.
    fn progress_locked(&self, st: &mut EpState, now: u64) {
        let (port, mut h) = st.split(self);
        let found = port.progress(now, &mut h);
        h.end_pass(port, now);
        // A pass that found nothing and left nothing to do: the polls
        // until `quiet_until` look at the rings only. (After one that
        // found something the next pass is whole, and asks.)
        let until = if found || !h.idle() {
            0
        } else {
            st.port.quiet_until(now)
        };
        st.quiet.set(until, now);
    }

    /// A pass for what came in the shm rings, asked by a poll of the quiet
    /// time (`Pass::Rings`): the messages are taken and handed up,
    /// and the next poll makes the whole pass (timers, the UDP socket's
    /// turn, the shm wire's own steps), so that none of it lies between a
    /// message's arrival and its completion. (Nor between the completion
    /// and an answer: the read after one that found completions makes no
    /// pass, `Cq::read`.) Answers to one-sided
    /// requests and collectives' next rounds are not left for it. (Out
    /// of line: inlined, it made every empty poll longer.)
    #[inline(never)]
    fn take_arrivals(&self, st: &mut EpState, now: u64) {
        let (port, mut h) = st.split(self);
        port.take_arrivals(&mut h);
        h.end_pass(port, now);
        st.quiet.end();
    }

    /// A message the shm wire left in its slot for a receive to come
    /// (`Take::Later`), taken in before a peek looks for it: kept, unless
    /// a receive now wants it.
    #[cold]
    fn take_left(&self, st: &mut EpState) {
        let (port, mut h) = st.split(self);
        port.take_left(&mut h);
        h.end_pass(port, now_ns());
    }

    /// The application polls us while our sockets sit in their epoll set,
    /// put there by a sleeper: the progress thread while the endpoint was
    /// idle (before the application's first poll, or between its phases),
    /// a fi_cq_sread. In the set, every datagram a socket receives or sends
    /// runs the set's wake-up in the kernel, on the way of every message
    /// (0.3 us or more of a one-way trip across hosts, bench/README.md, "Sockets
    /// out of the epoll set while the application polls"). After
    /// `UNWATCH_AFTER` whole passes and `UNWATCH_QUIET_NS` with no
    /// sleeper arming meanwhile, and none asleep, the sockets leave the
    /// set; the next sleeper's `arm_wakeup` puts them back.
    #[cold]
    #[inline(never)]
    fn unwatch_if_unslept(&self, st: &mut EpState, now: u64) {
        st.unarmed_passes += 1;
        if st.unarmed_passes < UNWATCH_AFTER || now.saturating_sub(st.armed_at) < UNWATCH_QUIET_NS {
            return;
        }
        st.unarmed_passes = 0;
        if self.sleepers.load(Ordering::SeqCst) != 0 {
            return;
        }
        self.watched.store(false, Ordering::SeqCst);
        st.port.unwatch();
        // A sleeper that came meanwhile found the state locked and read
        // `watched` before our store (else it read false, and does not
        // sleep): it sleeps on the set, so the sockets go back (an arrival
        // in between is reported by the add). Or the wire keeps them, to
        // find which socket has data.
        if self.sleepers.load(Ordering::SeqCst) != 0 || st.port.watched() {
            let _ = st.port.watch();
            self.watched.store(st.port.watched(), Ordering::SeqCst);
        }
    }

    /// Closing: send the ACKs still owed, then wait (bounded) until what we
    /// sent is acknowledged, so a peer's last message is neither lost nor
    /// left to time out because we went away first.
    fn linger(&self) {
        const LINGER_NS: u64 = 1_000_000_000;
        let mut st = self.lock();
        st.port.flush_acks(now_ns());
        self.progress_locked(&mut st, now_ns());
        let deadline = now_ns() + LINGER_NS;
        // Without its sockets the wait fd could not cut a poll short.
        let _ = st.port.watch();
        while st.port.busy() && now_ns() < deadline {
            let mut pfd = libc::pollfd {
                fd: st.port.wait_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd; waits for the peer's ACK (or 1 ms).
            unsafe { libc::poll(&mut pfd, 1, 1) };
            self.progress_locked(&mut st, now_ns());
        }
        for line in st.port.stats_lines() {
            crate::info!(FI_LOG_EP_CTRL, "endpoint {} closing: {}", st.port.local_addr(), line);
        }
    }
}

impl Progress for Ep {
    fn progress(&self) {
        self.touch();
        if let Some(mut st) = self.state.try_lock() {
            // The poll of an application waiting for a message: one look
            // at the rings, not a pass (bench/pollbench-callgrind EMPTY=1),
            // and mostly no clock read either (`Quiet::poll`).
            let EpState { quiet, clock, port, .. } = &mut *st;
            match quiet.poll(clock, || port.arrived()) {
                Pass::Skip => {}
                Pass::Whole(now) => {
                    self.progress_locked(&mut st, now);
                    if self.watched.load(Ordering::Relaxed) {
                        self.unwatch_if_unslept(&mut st, now);
                    }
                }
                Pass::Rings(now) => self.take_arrivals(&mut st, now),
            }
        }
        // No endpoint lock held: triggered operations may fire.
        self.domain.triggers.run();
    }
    fn wait_fds(&self, out: &mut Vec<RawFd>) {
        out.push(self.fd.load(Ordering::Relaxed));
    }
    fn next_deadline(&self) -> Option<u64> {
        // Contended: whoever holds the lock is progressing; look again soon
        // rather than sleeping past a retransmission.
        let Some(st) = self.state.try_lock() else {
            return Some(now_ns() + 50_000);
        };
        st.port.next_deadline(now_ns())
    }
    fn arm_wakeup(&self) -> bool {
        // Counted before the sockets are looked at, so that a poll about
        // to take them out of the epoll set sees it (`unwatch_if_unslept`).
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        // Contended: the holder is progressing, and next_deadline said
        // to look again soon; but an epoll set not watching our sockets
        // would not wake us at all.
        let Some(mut st) = self.state.try_lock() else {
            return self.watched.load(Ordering::SeqCst);
        };
        let armed = st.port.arm();
        // The pass after the sleep takes the arming back.
        st.quiet.end();
        st.unarmed_passes = 0;
        st.armed_at = now_ns();
        self.watched.store(st.port.watched(), Ordering::SeqCst);
        armed
    }
    fn disarm(&self) {
        // Paired with an arm_wakeup by every caller; never below zero.
        let _ = self
            .sleepers
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
    }
}

impl crate::av::AvListener for Ep {
    fn learned(&self, addrs: &[SocketAddr]) {
        if self.enabled.load(Ordering::Acquire) {
            self.lock().port.connect_ahead(addrs);
        }
    }
}

impl AutoProgress for Ep {
    fn last_app_activity(&self, now: u64) -> u64 {
        if self.app_called.swap(false, Ordering::Relaxed) {
            self.app_seen.store(now, Ordering::Relaxed);
        }
        self.app_seen.load(Ordering::Relaxed)
    }
    fn auto_progress(&self) {
        if let Some(mut st) = self.state.try_lock() {
            self.progress_locked(&mut st, now_ns());
        }
        self.domain.triggers.run();
    }
}

impl Face for Ep {
    fn caps(&self) -> u64 {
        self.caps
    }

    fn reverse(&self, peer: &SocketAddr) -> Option<u64> {
        self.binds().av.as_ref().and_then(|av| av.reverse(peer))
    }

    fn av_generation(&self) -> u64 {
        self.binds().av.as_ref().map_or(0, |av| av.generation())
    }

    // The two completions of every message: inlined into the endpoint's
    // send and receive paths (bench/pollbench-callgrind), their errors
    // out of line.
    #[inline(always)]
    fn tx_complete(&self, r: &SendReq, err: Option<i32>) {
        self.tx_complete_at(r, err, Within::Pass)
    }

    #[inline(always)]
    fn rx_complete(&self, op_flags: u64, entry: CqEntry, err: Option<i32>, olen: usize, peer: Option<&SocketAddr>) {
        if !self.at_endpoint(entry.op_context as usize, err) {
            return;
        }
        let b = self.binds();
        count(&b.recv_cntr, err);
        let Some(cq) = &b.rx_cq else { return };
        match err {
            None => {
                if !b.rx_selective || op_flags & FI_COMPLETION != 0 {
                    cq.push(entry);
                }
            }
            Some(e) => rx_failed(cq, entry, e, olen, peer),
        }
    }

    fn rma_complete(&self, r: &rma::RmaReq, err: Option<i32>) {
        if !self.at_endpoint(r.ctx, err) {
            return;
        }
        let b = self.binds();
        count(
            if r.flags & FI_READ != 0 {
                &b.read_cntr
            } else {
                &b.write_cntr
            },
            err,
        );
        if !r.silent {
            push_tx(
                b,
                r.ctx,
                r.flags,
                FI_RMA | FI_ATOMIC | FI_READ | FI_WRITE,
                r.len,
                err,
                Within::Pass,
            );
        }
    }

    fn resolve(&self, key: u64, addr: u64, len: u64, access: u64) -> Result<(crate::nic::iov::Iov, MrEvent), i32> {
        self.domain.mrs.resolve(key, addr, len, access)
    }

    fn remote_done(&self, access: u64, data: Option<u64>, len: usize, ev: MrEvent) {
        if let Some(c) = ev {
            c.inc();
        }
        let b = self.binds();
        if access & FI_REMOTE_READ != 0 {
            count(&b.rem_read_cntr, None);
        }
        if access & FI_REMOTE_WRITE != 0 {
            count(&b.rem_write_cntr, None);
        }
        // fi_rma(3): remote CQ data makes an entry at the target.
        if let (Some(data), Some(cq)) = (data, &b.rx_cq) {
            cq.push(CqEntry {
                flags: FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA,
                len,
                data,
                ..CqEntry::default()
            });
        }
    }

    fn coll_complete(&self, ctx: usize, flags: u64, err: Option<i32>) {
        push_tx(
            self.binds(),
            ctx,
            flags | FI_COLLECTIVE,
            FI_COLLECTIVE,
            0,
            err,
            Within::Pass,
        );
    }

    fn join_complete(&self, mc: u64, ctx: usize, err: Option<i32>) {
        let Some(eq) = &self.binds().eq else { return };
        match err {
            None => {
                // struct fi_eq_entry { fid_t fid; void *context; uint64_t data; }
                let mut e = Vec::with_capacity(std::mem::size_of::<fi_eq_entry>());
                e.extend_from_slice(&(mc as usize).to_ne_bytes());
                e.extend_from_slice(&ctx.to_ne_bytes());
                e.extend_from_slice(&0u64.to_ne_bytes());
                eq.push(FI_JOIN_COMPLETE, &e, 0);
            }
            Some(e) => eq.push_err(crate::eq::EqError {
                fid: mc as usize as fid_t,
                context: ctx as *mut c_void,
                err: e,
                prov_errno: e,
                ..Default::default()
            }),
        }
    }

    fn rx_peek(&self, entry: CqEntry, err: Option<i32>) {
        if let Some(cq) = &self.binds().rx_cq {
            match err {
                None => cq.push(entry),
                Some(e) => cq.push_err(CqError::new(entry, e)),
            }
        }
    }
}

/// Where a completion is made: in a progress pass (or anywhere a pass
/// may be under way on this thread), or in the application's own call
/// into the provider, which no pass of this thread encloses
/// (`Cq::push_op_in_call`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Within {
    Pass,
    Call,
}

impl Ep {
    /// `Face::tx_complete`, made `at` a pass or in the application's call.
    #[inline(always)]
    fn tx_complete_at(&self, r: &SendReq, err: Option<i32>, at: Within) {
        if !self.at_endpoint(r.ctx, err) {
            return;
        }
        let b = self.binds();
        count(&b.send_cntr, err);
        if !r.silent {
            push_tx(b, r.ctx, r.flags, FI_SEND | FI_MSG | FI_TAGGED, r.len, err, at);
        }
    }
}

/// A transmit operation's entry in the tx CQ (context `ctx`, its `flags`
/// as far as `shown` lets the CQ see them), or its error entry: a success
/// only if the CQ is not selective or the operation asked for one.
fn push_tx(b: &Bindings, ctx: usize, flags: u64, shown: u64, len: usize, err: Option<i32>, at: Within) {
    let Some(cq) = &b.tx_cq else { return };
    match err {
        None => {
            if !b.tx_selective || flags & FI_COMPLETION != 0 {
                match at {
                    Within::Pass => cq.push_op(ctx, flags & shown),
                    Within::Call => cq.push_op_in_call(ctx, flags & shown),
                }
            }
        }
        // Errors are always reported, selective or not (fi_cq(3)).
        Some(e) => {
            let entry = CqEntry {
                op_context: ctx as *mut c_void,
                flags: flags & shown,
                len,
                ..CqEntry::default()
            };
            cq.push_err(CqError::new(entry, e))
        }
    }
}

/// A receive's error entry (FI_EADDRNOTAVAIL carries `peer`'s address).
#[cold]
fn rx_failed(cq: &Cq, entry: CqEntry, e: i32, olen: usize, peer: Option<&SocketAddr>) {
    let err_data = match peer {
        Some(p) if e == FI_EADDRNOTAVAIL => std_to_sockaddr(p),
        _ => Vec::new(),
    };
    cq.push_err(CqError {
        entry,
        err: e,
        prov_errno: e,
        olen,
        err_data,
    });
}

/// An operation's end on its counter, if one is bound: success or error.
#[inline(always)]
fn count(c: &Option<Arc<Cntr>>, err: Option<i32>) {
    if let Some(c) = c {
        match err {
            None => c.inc(),
            Some(_) => c.inc_err(),
        }
    }
}
