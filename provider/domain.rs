//! Domain class: one network interface. Opens endpoints, CQs, counters,
//! AVs and memory registrations, and owns the NIC (progress engine).

use crate::ffi::*;
use crate::fid::{base_ops, fid_header, FidObj, ParentRef, Refs, Table};
use crate::getinfo::Offer;
use crate::nic::Nic;
use crate::params::decl;
use std::ffi::{c_char, c_void, CStr};
use std::sync::{Arc, Mutex};

/// Largest rendezvous threshold accepted (FI_GNIX_RNDV_THRESHOLD, set_val):
/// the longest eager message a receiver reassembles.
pub const MAX_RNDV_THRESHOLD: usize = crate::proto::MAX_EAGER_LEN as usize;

/// Protocol knobs a domain hands to the endpoints it opens; they start as
/// the FI_GNIX_* values (`Params::domain_tunables`), and the
/// `fi_ext_gnix.h` domain ops read and write them, within the ranges the
/// same tunables declare (`params::decl`).
#[derive(Clone, Copy, Debug)]
pub struct Tunables {
    pub rndv_threshold: usize,
    pub peer_timeout_ms: u64,
    pub max_retrans: u32,
}

pub struct Domain {
    pub refs: Refs,
    /// Held, never read: fi_close(fabric) is -FI_EBUSY while the domain lives.
    _fabric: ParentRef<crate::fabric::Fabric>,
    pub attr: Offer,
    pub tunables: Mutex<Tunables>,
    pub mrs: crate::mr::MrTable,
    pub nic: Nic,
    /// Every enabled endpoint, as one progress source (`Nic::endpoints`):
    /// one object, so a counter bound to several regions holds it once.
    pub endpoints: Arc<dyn crate::progress::Progress>,
    /// The application serialises its calls into this domain
    /// (FI_THREAD_DOMAIN) and membarrier works: the locks of its
    /// endpoints and CQs share this gate (`gate.rs`).
    pub gate: Option<Arc<crate::gate::Gate>>,
    /// Operations posted with FI_TRIGGER, waiting for their counters.
    pub triggers: crate::trigger::Triggers,
}
impl AsRef<Refs> for Domain {
    fn as_ref(&self) -> &Refs {
        &self.refs
    }
}

type Obj = FidObj<fid_domain, Domain>;

/// The domain behind an application-supplied fid: checks class and magic.
///
/// # Safety
/// `p` must be NULL or point to readable memory of at least a `struct fid`.
pub unsafe fn from_fid<'a>(p: *const c_void) -> Option<&'a Arc<Domain>> {
    // SAFETY: the caller's contract (`p` NULL or a readable fid).
    unsafe { Obj::get(p, FI_CLASS_DOMAIN) }
}

/// fi_domain, called by the fabric's shim.
///
/// # Safety
/// `info` must be NULL or a valid fi_info (attr pointers NULL or valid).
pub unsafe fn open(
    fabric: ParentRef<crate::fabric::Fabric>,
    info: *mut fi_info,
    ctx: *mut c_void,
) -> Result<*mut fid_domain, i32> {
    // SAFETY: the caller's contract (`info` NULL or a readable fi_info).
    let attr = unsafe { crate::getinfo::offer_from_info(info) }?;
    let p = crate::params::params();
    let gate = if attr.threading == FI_THREAD_DOMAIN && p.gate {
        crate::gate::Gate::new()
    } else {
        None
    };
    crate::info!(
        FI_LOG_DOMAIN,
        "domain {}: threading {}, data progress {}, locks {}",
        attr.iface.name,
        attr.threading,
        attr.data_progress,
        if gate.is_some() { "gated" } else { "mutexes" }
    );
    // Unspecified means the default, FI_PROGRESS_AUTO.
    let nic = Nic::new(
        attr.data_progress == FI_PROGRESS_AUTO || attr.data_progress == FI_PROGRESS_UNSPEC,
        gate.clone(),
    );
    let dom = Arc::new(Domain {
        refs: Refs::default(),
        _fabric: fabric,
        tunables: Mutex::new(p.domain_tunables()),
        mrs: crate::mr::MrTable::new(attr.mr_mode),
        triggers: crate::trigger::Triggers::default(),
        endpoints: nic.endpoints(),
        nic,
        gate,
        attr,
    });
    let c = fid_domain {
        fid: fid_header(FI_CLASS_DOMAIN, ctx, DOMAIN_FI_OPS.ptr()),
        ops: DOMAIN_OPS.ptr(),
        mr: crate::mr::MR_OPS.ptr(),
    };
    Ok(Obj::create(c, dom))
}

unsafe extern "C" fn close(f: *mut fid) -> i32 {
    abi_guard!("close", -FI_EOTHER, || {
        // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
        let Some(d) = (unsafe { from_fid(f as *const c_void) }) else {
            return -FI_EINVAL;
        };
        if d.refs.busy() {
            crate::warn!(
                FI_LOG_DOMAIN,
                "fi_close(domain): endpoints, CQs, counters, AVs or MRs still open"
            );
            return -FI_EBUSY;
        }
        d.nic.stop();
        // SAFETY: `f` is a live domain (checked above) the application gives up.
        unsafe { Obj::destroy(f as *mut c_void) };
        0
    })
}

/// Writes `out` through `p` and returns 0, or -FI_EINVAL on NULL.
macro_rules! shim_open {
    ($name:ident, $attr:ty, $out:ty, $call:path) => {
        unsafe extern "C" fn $name(d: *mut fid_domain, attr: *mut $attr, out: *mut *mut $out, ctx: *mut c_void) -> i32 {
            crate::abi::guard(
                concat!(module_path!(), "::", stringify!($name)),
                -FI_EOTHER,
                || {
                    // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
                    let Some(dom) = (unsafe { from_fid(d as *const c_void) }) else {
                        return -FI_EINVAL;
                    };
                    if out.is_null() {
                        return -FI_EINVAL;
                    }
                    // SAFETY: `attr` is NULL or the application's attributes
                    // for this open call (fi_domain(3)).
                    match unsafe { $call(dom, attr, ctx) } {
                        Ok(p) => {
                            // SAFETY: `out` is the application's result slot, non-NULL.
                            unsafe { *out = p };
                            0
                        }
                        Err(e) => e,
                    }
                },
            )
        }
    };
}
shim_open!(av_open, fi_av_attr, fid_av, crate::av::open);
shim_open!(cq_open, fi_cq_attr, fid_cq, crate::cq::open);
shim_open!(cntr_open, fi_cntr_attr, fid_cntr, crate::cntr::open);
shim_open!(endpoint, fi_info, fid_ep, crate::ep::open);

unsafe extern "C" fn endpoint2(
    d: *mut fid_domain,
    info: *mut fi_info,
    ep: *mut *mut fid_ep,
    flags: u64,
    ctx: *mut c_void,
) -> i32 {
    abi_guard!("endpoint2", -FI_EOTHER, || {
        if flags != 0 {
            crate::warn!(FI_LOG_DOMAIN, "fi_endpoint2: flags {:#x} not supported", flags);
            return -FI_EINVAL;
        }
        // SAFETY: fi_endpoint2(3) is fi_endpoint with flags, checked above.
        unsafe { endpoint(d, info, ep, ctx) }
    })
}

unsafe extern "C" fn poll_open(d: *mut fid_domain, attr: *mut fi_poll_attr, ps: *mut *mut fid_poll) -> i32 {
    abi_guard!("poll_open", -FI_EOTHER, || {
        // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
        let Some(dom) = (unsafe { from_fid(d as *const c_void) }) else {
            return -FI_EINVAL;
        };
        if ps.is_null() || attr.is_null() {
            return -FI_EINVAL;
        }
        // SAFETY: `attr` is the application's fi_poll_attr, non-NULL.
        match unsafe { crate::wait::poll_open(attr, Box::new(ParentRef::new(dom))) } {
            Ok(p) => {
                // SAFETY: `ps` is the application's result slot, non-NULL.
                unsafe { *ps = p };
                0
            }
            Err(e) => e,
        }
    })
}

unsafe extern "C" fn scalable_ep(_: *mut fid_domain, _: *mut fi_info, _: *mut *mut fid_ep, _: *mut c_void) -> i32 {
    abi_guard!("scalable_ep", -FI_EOTHER, || {
        crate::warn!(FI_LOG_DOMAIN, "scalable endpoints are not supported yet");
        -FI_ENOSYS
    })
}
unsafe extern "C" fn stx_ctx(_: *mut fid_domain, _: *mut fi_tx_attr, _: *mut *mut fid_stx, _: *mut c_void) -> i32 {
    abi_guard!("stx_ctx", -FI_EOTHER, || {
        crate::warn!(FI_LOG_DOMAIN, "shared transmit contexts are not supported");
        -FI_ENOSYS
    })
}
unsafe extern "C" fn srx_ctx(_: *mut fid_domain, _: *mut fi_rx_attr, _: *mut *mut fid_ep, _: *mut c_void) -> i32 {
    abi_guard!("srx_ctx", -FI_EOTHER, || {
        crate::warn!(FI_LOG_DOMAIN, "shared receive contexts are not supported");
        -FI_ENOSYS
    })
}
/// fi_query_atomic: whether an op is offered on a datatype, and how many
/// elements one operation may carry (FI_FETCH_ATOMIC / FI_COMPARE_ATOMIC
/// pick the family).
unsafe extern "C" fn query_atomic(
    _: *mut fid_domain,
    dt: fi_datatype,
    op: fi_op,
    attr: *mut fi_atomic_attr,
    flags: u64,
) -> i32 {
    use crate::nic::atomic::{self, AtomicClass};
    abi_guard!("query_atomic", -FI_EOTHER, || {
        let class = if flags & FI_COMPARE_ATOMIC != 0 {
            AtomicClass::Compare
        } else if flags & FI_FETCH_ATOMIC != 0 {
            AtomicClass::Fetch
        } else {
            AtomicClass::Plain
        };
        match atomic::valid(class, op, dt) {
            Ok(count) => {
                // SAFETY: fi_query_atomic(3): `attr` is NULL or the application's.
                if let Some(a) = unsafe { attr.as_mut() } {
                    a.count = count;
                    a.size = atomic::datatype_size(dt).unwrap_or(0);
                }
                0
            }
            Err(e) => e,
        }
    })
}
/// fi_query_collective: whether gnix runs a collective with an op on a
/// datatype, and its limits (`coll::query`).
unsafe extern "C" fn query_collective(
    _: *mut fid_domain,
    coll: fi_collective_op,
    attr: *mut fi_collective_attr,
    flags: u64,
) -> i32 {
    abi_guard!("query_collective", -FI_EOTHER, || {
        // SAFETY: fi_query_collective(3): `attr` is NULL or the application's.
        match unsafe { attr.as_mut() } {
            Some(a) => crate::coll::query(coll, a, flags),
            None => -FI_EINVAL,
        }
    })
}

// ---- fi_ext_gnix.h domain ops ----

const FI_GNIX_DOMAIN_OPS_1: &CStr = c"domain ops 1";
const GNIX_RNDV_THRESHOLD: u32 = 0;
const GNIX_PEER_TIMEOUT_MS: u32 = 1;
const GNIX_MAX_RETRANS: u32 = 2;

#[repr(C)]
pub struct GnixOpsDomain {
    set_val: unsafe extern "C" fn(*mut fid, u32, *mut c_void) -> i32,
    get_val: unsafe extern "C" fn(*mut fid, u32, *mut c_void) -> i32,
}

/// Whether set_val may store `v` into the knob `t` declares (warns if not).
fn admits(t: &crate::params::Tunable, v: u64) -> bool {
    let ok = i64::try_from(v).is_ok_and(|n| t.admits(n));
    if !ok {
        crate::warn!(FI_LOG_DOMAIN, "set_val: {} {} outside {}", t.env_name(), v, t.range);
    }
    ok
}

unsafe extern "C" fn ext_set_val(f: *mut fid, t: u32, val: *mut c_void) -> i32 {
    abi_guard!("ext_set_val", -FI_EOTHER, || {
        // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
        let Some(d) = (unsafe { from_fid(f as *const c_void) }) else {
            return -FI_EINVAL;
        };
        if val.is_null() {
            return -FI_EINVAL;
        }
        let mut tun = d.tunables.lock().unwrap();
        // SAFETY: fi_gnix_ops_domain: `val` (non-NULL) points to the knob's type, documented per knob in the man page.
        match t {
            GNIX_RNDV_THRESHOLD => {
                let v = unsafe { *(val as *const usize) };
                if !admits(&decl::rndv_threshold, v as u64) {
                    return -FI_EINVAL;
                }
                tun.rndv_threshold = v;
            }
            GNIX_PEER_TIMEOUT_MS => {
                let v = unsafe { *(val as *const u64) };
                if !admits(&decl::peer_timeout_ms, v) {
                    return -FI_EINVAL;
                }
                tun.peer_timeout_ms = v;
            }
            GNIX_MAX_RETRANS => {
                let v = unsafe { *(val as *const u32) };
                if !admits(&decl::max_retrans, v as u64) {
                    return -FI_EINVAL;
                }
                tun.max_retrans = v;
            }
            _ => {
                crate::warn!(FI_LOG_DOMAIN, "set_val: unknown value {}", t);
                return -FI_EINVAL;
            }
        }
        0
    })
}

unsafe extern "C" fn ext_get_val(f: *mut fid, t: u32, val: *mut c_void) -> i32 {
    abi_guard!("ext_get_val", -FI_EOTHER, || {
        // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
        let Some(d) = (unsafe { from_fid(f as *const c_void) }) else {
            return -FI_EINVAL;
        };
        if val.is_null() {
            return -FI_EINVAL;
        }
        let tun = *d.tunables.lock().unwrap();
        // SAFETY: fi_gnix_ops_domain: `val` (non-NULL) points to the knob's type, documented per knob in the man page.
        match t {
            GNIX_RNDV_THRESHOLD => unsafe { *(val as *mut usize) = tun.rndv_threshold },
            GNIX_PEER_TIMEOUT_MS => unsafe { *(val as *mut u64) = tun.peer_timeout_ms },
            GNIX_MAX_RETRANS => unsafe { *(val as *mut u32) = tun.max_retrans },
            _ => {
                crate::warn!(FI_LOG_DOMAIN, "get_val: unknown value {}", t);
                return -FI_EINVAL;
            }
        }
        0
    })
}

static GNIX_DOMAIN_OPS: Table<GnixOpsDomain> = Table(GnixOpsDomain {
    set_val: ext_set_val,
    get_val: ext_get_val,
});

unsafe extern "C" fn ops_open(
    f: *mut fid,
    name: *const c_char,
    _flags: u64,
    ops: *mut *mut c_void,
    _ctx: *mut c_void,
) -> i32 {
    abi_guard!("ops_open", -FI_EOTHER, || {
        // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
        if (unsafe { from_fid(f as *const c_void) }).is_none() || name.is_null() || ops.is_null() {
            return -FI_EINVAL;
        }
        // SAFETY: fi_open_ops(3): `name` is a NUL-terminated string, non-NULL.
        let name = unsafe { CStr::from_ptr(name) };
        if name != FI_GNIX_DOMAIN_OPS_1 {
            crate::warn!(FI_LOG_DOMAIN, "fi_open_ops: unknown ops {:?}", name);
            return -FI_ENOSYS;
        }
        // SAFETY: `ops` is the application's result slot, non-NULL.
        unsafe { *ops = GNIX_DOMAIN_OPS.ptr() as *mut c_void };
        0
    })
}

/// fi_control on a domain: the deferred work queue (fi_trigger(3)).
unsafe extern "C" fn control(f: *mut fid, cmd: i32, arg: *mut c_void) -> i32 {
    abi_guard!("control", -FI_EOTHER, || {
        // SAFETY: a fid the application holds, or NULL; `get` checks class and magic.
        let Some(d) = (unsafe { Obj::get(f as *const c_void, FI_CLASS_DOMAIN) }) else {
            return -FI_EINVAL;
        };
        // SAFETY: FI_QUEUE_WORK and kin take the application's struct fi_deferred_work.
        unsafe { crate::trigger::control(&d.triggers, cmd as u32, arg) }
    })
}

static DOMAIN_FI_OPS: Table<fi_ops> = Table(base_ops(close, None, Some(control), Some(ops_open)));
static DOMAIN_OPS: Table<fi_ops_domain> = Table(fi_ops_domain {
    size: std::mem::size_of::<fi_ops_domain>(),
    av_open: Some(av_open),
    cq_open: Some(cq_open),
    endpoint: Some(endpoint),
    scalable_ep: Some(scalable_ep),
    cntr_open: Some(cntr_open),
    poll_open: Some(poll_open),
    stx_ctx: Some(stx_ctx),
    srx_ctx: Some(srx_ctx),
    query_atomic: Some(query_atomic),
    query_collective: Some(query_collective),
    endpoint2: Some(endpoint2),
});
