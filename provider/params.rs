//! `FI_GNIX_*` tunables, declared with `fi_param_define` so that
//! `fi_info -e` lists them with their help text.

use crate::ffi::*;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::OnceLock;

#[derive(Clone, Copy)]
enum Kind {
    Int,
    Size,
    Str,
}

struct Def {
    name: &'static CStr,
    kind: Kind,
    help: &'static CStr,
}

const DEFS: &[Def] = &[
    Def { name: c"rndv_threshold", kind: Kind::Size, help: c"Messages longer than this many bytes use rendezvous (receiver pulls) instead of eager sends (default: 65536, at most 1073741824; on the shm wire also at most FI_GNIX_SHM_EAGER). Also settable per domain through fi_open_ops(FI_GNIX_DOMAIN_OPS_1)." },
    Def { name: c"rndv_push", kind: Kind::Size, help: c"udp wire: bytes of a rendezvous message sent right behind its request to send, before the receiver asks for them (whole segments, always less than the message); a receive posted in time takes them and asks only for the rest, saving a round trip; 0 turns it off (default: 131072)." },
    Def { name: c"peer_timeout_ms", kind: Kind::Int, help: c"A peer that acknowledges nothing for this many milliseconds while data is outstanding is declared dead: its operations complete in error (default: 10000)." },
    Def { name: c"max_retrans", kind: Kind::Int, help: c"Retransmissions of one segment before its peer is declared dead (default: 25)." },
    Def { name: c"udp_mtu", kind: Kind::Size, help: c"Largest UDP datagram the udp wire sends; 0 = the interface MTU minus IP/UDP headers (default: 0)." },
    Def { name: c"udp_connect", kind: Kind::Int, help: c"udp wire: how many peers of an endpoint get a socket of their own, connected to them, which spares the kernel route and socket lookups per datagram; 0 = all traffic through the endpoint's one socket (default: 16, at most 1024)." },
    Def { name: c"sockbuf", kind: Kind::Size, help: c"Socket send/receive buffer size of each endpoint's UDP socket, in bytes (default: 8388608)." },
    Def { name: c"iface", kind: Kind::Str, help: c"Only offer the domain of this network interface (e.g. lo, eth0); default: all interfaces that are up." },
    Def { name: c"tx_size", kind: Kind::Size, help: c"Default transmit queue depth: outstanding sends per endpoint before -FI_EAGAIN (default: 1024)." },
    Def { name: c"rx_size", kind: Kind::Size, help: c"Default receive queue depth: receives that can be posted at once before -FI_EAGAIN (default: 16384)." },
    Def { name: c"credit_bytes", kind: Kind::Size, help: c"udp wire: receive budget for eager and unexpected messages, shared by all peers (credit flow control); 0 turns it off (default: 33554432)." },
    Def { name: c"credit_min_loan", kind: Kind::Size, help: c"udp wire: credit bytes every peer may hold; a new peer gets this much at once (default: 262144)." },
    Def { name: c"credit_max_loan", kind: Kind::Size, help: c"udp wire: most credit bytes one peer may hold (default: 8388608)." },
    Def { name: c"credit_epoch_ms", kind: Kind::Int, help: c"udp wire: usage counters halve every this many milliseconds; peers that used nothing in an epoch give back credits when the bank runs low (default: 10)." },
    Def { name: c"shm", kind: Kind::Int, help: c"Use the shared-memory wire for peers on this host (1) or send everything over UDP (0) (default: 1)." },
    Def { name: c"cma", kind: Kind::Int, help: c"Shared-memory rendezvous pulls data with process_vm_readv (1) or always copies it through the mailbox (0) (default: 1)." },
    Def { name: c"shm_eager", kind: Kind::Size, help: c"Payload bytes of one shared-memory mailbox slot; longer messages use rendezvous (default: 4096, 64..65536)." },
    Def { name: c"shm_depth", kind: Kind::Int, help: c"Slots in each peer's shared-memory mailbox ring (default: 64, 2..4096)." },
    Def { name: c"shm_peers", kind: Kind::Int, help: c"Rings in an endpoint's shared-memory mailbox: local peers that can send to it over shm at once; more use UDP (default: 64, 1..480)." },
];

/// Values after environment overrides.
#[derive(Clone, Debug)]
pub struct Params {
    pub rndv_threshold: usize,
    pub rndv_push: u64,
    pub peer_timeout_ms: u64,
    pub max_retrans: u32,
    pub udp_mtu: usize,
    pub sockbuf: usize,
    pub udp_connect: usize,
    pub iface: Option<String>,
    pub tx_size: usize,
    pub rx_size: usize,
    pub credit_bytes: usize,
    pub credit_min_loan: usize,
    pub credit_max_loan: usize,
    pub credit_epoch_ms: u64,
    pub shm: bool,
    pub cma: bool,
    pub shm_eager: usize,
    pub shm_depth: usize,
    pub shm_peers: usize,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            rndv_threshold: 65536,
            rndv_push: 128 << 10,
            peer_timeout_ms: 10_000,
            max_retrans: 25,
            udp_mtu: 0,
            sockbuf: 8 << 20,
            udp_connect: 16,
            iface: None,
            tx_size: 1024,
            rx_size: 16384,
            credit_bytes: 32 << 20,
            credit_min_loan: 256 << 10,
            credit_max_loan: 8 << 20,
            credit_epoch_ms: 10,
            shm: true,
            cma: true,
            shm_eager: 4096,
            shm_depth: 64,
            shm_peers: 64,
        }
    }
}

static PARAMS: OnceLock<Params> = OnceLock::new();

pub fn define_all() {
    let Some(define) = crate::core::core().and_then(|c| c.param_define) else {
        return;
    };
    for d in DEFS {
        let ty = match d.kind {
            Kind::Int => FI_PARAM_INT,
            Kind::Size => FI_PARAM_SIZE_T,
            Kind::Str => FI_PARAM_STRING,
        };
        // SAFETY: names and help are static NUL-terminated strings; the help
        // passes through a literal "%s" so a '%' in it is not a directive.
        unsafe {
            define(
                crate::provider_ptr(),
                d.name.as_ptr(),
                ty,
                c"%s".as_ptr(),
                d.help.as_ptr(),
            )
        };
    }
}

enum Val {
    Int(i64),
    Str(String),
}

fn get(name: &CStr, kind: Kind) -> Option<Val> {
    let get = crate::core::core().and_then(|c| c.param_get)?;
    let p = crate::provider_ptr() as *mut fi_provider;
    // SAFETY: fi_param_get writes an int / size_t / char* matching the type
    // the parameter was defined with, into storage of that type.
    unsafe {
        match kind {
            Kind::Int => {
                let mut v: c_int = 0;
                (get(p, name.as_ptr(), &mut v as *mut c_int as *mut c_void) == 0).then_some(Val::Int(v as i64))
            }
            Kind::Size => {
                let mut v: usize = 0;
                (get(p, name.as_ptr(), &mut v as *mut usize as *mut c_void) == 0).then_some(Val::Int(v as i64))
            }
            Kind::Str => {
                let mut v: *mut c_char = std::ptr::null_mut();
                if get(p, name.as_ptr(), &mut v as *mut *mut c_char as *mut c_void) != 0 || v.is_null() {
                    return None;
                }
                // The core returns a pointer into the environment: do not free.
                Some(Val::Str(CStr::from_ptr(v).to_string_lossy().into_owned()))
            }
        }
    }
}

fn load() -> Params {
    let mut p = Params::default();
    for d in DEFS {
        let Some(v) = get(d.name, d.kind) else { continue };
        let n = match &v {
            Val::Int(n) => *n,
            Val::Str(_) => 0,
        };
        let bad = |what: &str| {
            crate::warn!(
                FI_LOG_CORE,
                "FI_GNIX_{}: {}, keeping the default",
                d.name.to_string_lossy().to_uppercase(),
                what
            )
        };
        match (d.name.to_bytes(), v) {
            (b"rndv_threshold", _) if (0..=crate::domain::MAX_RNDV_THRESHOLD as i64).contains(&n) => {
                p.rndv_threshold = n as usize
            }
            (b"rndv_push", _) if (0..=1 << 30).contains(&n) => p.rndv_push = n as u64,
            (b"peer_timeout_ms", _) if n > 0 => p.peer_timeout_ms = n as u64,
            (b"max_retrans", _) if n > 0 => p.max_retrans = n as u32,
            (b"udp_mtu", _) if n == 0 || (576..=65507).contains(&n) => p.udp_mtu = n as usize,
            (b"sockbuf", _) if n >= 65536 => p.sockbuf = n as usize,
            (b"udp_connect", _) if (0..=1024).contains(&n) => p.udp_connect = n as usize,
            (b"iface", Val::Str(s)) => p.iface = Some(s),
            (b"tx_size", _) if n > 0 => p.tx_size = n as usize,
            (b"rx_size", _) if n > 0 => p.rx_size = n as usize,
            (b"credit_bytes", _) if n == 0 || (1 << 20..=1 << 40).contains(&n) => p.credit_bytes = n as usize,
            (b"credit_min_loan", _) if (4096..=1 << 30).contains(&n) => p.credit_min_loan = n as usize,
            (b"credit_max_loan", _) if (65536..=1 << 36).contains(&n) => p.credit_max_loan = n as usize,
            (b"credit_epoch_ms", _) if n > 0 => p.credit_epoch_ms = n as u64,
            (b"shm", _) if n == 0 || n == 1 => p.shm = n == 1,
            (b"cma", _) if n == 0 || n == 1 => p.cma = n == 1,
            (b"shm_eager", _) if (64..=65536).contains(&n) => p.shm_eager = n as usize,
            (b"shm_depth", _) if (2..=4096).contains(&n) => p.shm_depth = n as usize,
            (b"shm_peers", _) if (1..=480).contains(&n) => p.shm_peers = n as usize,
            _ => bad("value out of range"),
        }
    }
    p
}

/// The tunables, read once from the environment.
pub fn params() -> &'static Params {
    PARAMS.get_or_init(load)
}
