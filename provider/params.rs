//! `FI_GNIX_*` tunables, each declared once (`tunables!` below): its name,
//! the field it fills, its libfabric type, default, range and help text.
//! From that one declaration come the `fi_param_define` calls (so
//! `fi_info -e` lists them, with help that states the declared default
//! and range), `Params::default`, the parser with its range checks, and the
//! endpoint's engine and credit configuration; a unit test holds the man
//! page's RUNTIME PARAMETERS table to it.
//!
//! `fi_param` stays hand-called (through `crate::core`): no crate speaks
//! libfabric's parameter registry.

use crate::domain::Tunables;
use crate::ffi::*;
use crate::proto::credit::CreditConfig;
use crate::proto::EngineConfig;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::fmt;
use std::sync::OnceLock;

/// The C type a tunable is declared with (what `fi_info -e` shows).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Int,
    Size,
    Str,
}

impl Kind {
    fn fi_type(self) -> fi_param_type {
        match self {
            Kind::Int => FI_PARAM_INT,
            Kind::Size => FI_PARAM_SIZE_T,
            Kind::Str => FI_PARAM_STRING,
        }
    }

    /// The name the man page's table uses.
    #[cfg(test)]
    pub fn c_name(self) -> &'static str {
        match self {
            Kind::Int => "int",
            Kind::Size => "size_t",
            Kind::Str => "string",
        }
    }
}

/// The values a tunable accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Range {
    /// `lo..=hi` (`0 or 1` for a switch).
    Span(i64, i64),
    /// `lo` or more, up to what the C type holds.
    AtLeast(i64),
    /// 0 (a special meaning the help gives) or `lo..=hi`.
    ZeroOr(i64, i64),
    /// Any text (string tunables).
    Text,
}

impl Range {
    pub fn admits(self, n: i64) -> bool {
        match self {
            Range::Span(lo, hi) => (lo..=hi).contains(&n),
            Range::AtLeast(lo) => n >= lo,
            Range::ZeroOr(lo, hi) => n == 0 || (lo..=hi).contains(&n),
            Range::Text => false,
        }
    }
}

impl fmt::Display for Range {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Range::Span(0, 1) => write!(f, "0 or 1"),
            Range::Span(lo, hi) => write!(f, "{lo}..{hi}"),
            Range::AtLeast(lo) => write!(f, "at least {lo}"),
            Range::ZeroOr(lo, hi) => write!(f, "0 or {lo}..{hi}"),
            Range::Text => write!(f, "text"),
        }
    }
}

/// One tunable's declaration.
#[derive(Debug)]
pub struct Tunable {
    /// Lower case, without the `FI_GNIX_` prefix (what `fi_param_define` takes).
    pub name: &'static str,
    pub kind: Kind,
    /// None: unset by default (string tunables).
    pub default: Option<i64>,
    pub range: Range,
    /// What it does, without default or range (those are appended).
    pub help: &'static str,
}

impl Tunable {
    /// `FI_GNIX_NAME`, as the environment and the man page spell it.
    pub fn env_name(&self) -> String {
        format!("FI_GNIX_{}", self.name.to_uppercase())
    }

    /// The default as the man page's table and the help show it.
    pub fn default_text(&self) -> String {
        self.default.map_or_else(|| "unset".to_string(), |d| d.to_string())
    }

    /// The help `fi_info -e` shows: the declared text, default and range.
    pub fn full_help(&self) -> String {
        match self.kind {
            Kind::Str => self.help.to_string(),
            _ => format!("{} Default {}, range {}.", self.help, self.default_text(), self.range),
        }
    }

    /// Whether `n` may be stored (numeric tunables): its range, and the
    /// field it fills can hold it.
    pub fn admits(&self, n: i64) -> bool {
        self.range.admits(n)
    }
}

/// A value read from the environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Val {
    Int(i64),
    Str(String),
}

/// A `Params` field type, filled from a range-checked value.
trait Field: Sized {
    fn from_val(v: &Val) -> Option<Self>;
}
macro_rules! int_field {
    ($($t:ty),*) => {$(
        impl Field for $t {
            fn from_val(v: &Val) -> Option<Self> {
                match v {
                    Val::Int(n) => <$t>::try_from(*n).ok(),
                    Val::Str(_) => None,
                }
            }
        }
    )*};
}
int_field!(usize, u64, u32, i64);
impl Field for bool {
    fn from_val(v: &Val) -> Option<Self> {
        match v {
            Val::Int(0) => Some(false),
            Val::Int(1) => Some(true),
            _ => None,
        }
    }
}
impl Field for Option<String> {
    fn from_val(v: &Val) -> Option<Self> {
        match v {
            Val::Str(s) => Some(Some(s.clone())),
            Val::Int(_) => None,
        }
    }
}

macro_rules! opt {
    () => {
        None
    };
    ($e:expr) => {
        Some($e)
    };
}
macro_rules! range_or_text {
    () => {
        Range::Text
    };
    ($e:expr) => {
        $e
    };
}

/// Declares the tunables: for each, the `Params` field and its Rust type,
/// the C kind with default and range (none for strings), and the help.
/// Generates `Params`, `decl::<field>` (each declaration), `TUNABLES`
/// (all of them, in `fi_info -e` order), `Params::default` and
/// `Params::set`.
macro_rules! tunables {
    ($(
        $(#[doc = $doc:literal])*
        $field:ident: $ty:ty = $kind:ident $(($default:expr, $range:expr))?, $help:literal;
    )*) => {
        /// Values after environment overrides.
        #[derive(Clone, Debug, PartialEq)]
        pub struct Params {
            $($(#[doc = $doc])* pub $field: $ty,)*
        }

        /// Each tunable's declaration, by its `Params` field name.
        #[allow(non_upper_case_globals)]
        pub mod decl {
            use super::*;
            $(pub const $field: Tunable = Tunable {
                name: stringify!($field),
                kind: Kind::$kind,
                default: opt!($($default)?),
                range: range_or_text!($($range)?),
                help: $help,
            };)*
        }

        /// Every tunable, in the order `fi_info -e` lists them.
        pub const TUNABLES: &[Tunable] = &[$(decl::$field),*];

        impl Default for Params {
            /// The declared defaults (a unit test checks each converts).
            fn default() -> Self {
                Params {
                    $($field: match decl::$field.default {
                        Some(d) => Field::from_val(&Val::Int(d)).unwrap_or_default(),
                        None => Default::default(),
                    },)*
                }
            }
        }

        impl Params {
            /// Stores an admitted value into the field `name` declares;
            /// false if the field's type cannot hold it.
            fn set(&mut self, name: &str, v: &Val) -> bool {
                match name {
                    $(stringify!($field) => match Field::from_val(v) {
                        Some(x) => {
                            self.$field = x;
                            true
                        }
                        None => false,
                    },)*
                    _ => false,
                }
            }
        }
    };
}

tunables! {
    rndv_threshold: usize = Size(65536, Range::Span(0, crate::domain::MAX_RNDV_THRESHOLD as i64)),
        "Messages longer than this many bytes use rendezvous (receiver pulls) instead of eager sends (on the shm wire also at most FI_GNIX_SHM_EAGER). Also settable per domain through fi_open_ops(FI_GNIX_DOMAIN_OPS_1).";
    rndv_push: u64 = Size(128 << 10, Range::Span(0, 1 << 30)),
        "udp wire: bytes of a rendezvous message sent right behind its request to send, before the receiver asks for them (whole segments, always less than the message); a receive posted in time takes them and asks only for the rest, saving a round trip; 0 turns it off.";
    peer_timeout_ms: u64 = Int(10_000, Range::AtLeast(1)),
        "A peer that acknowledges nothing for this many milliseconds while data is outstanding is declared dead: its operations complete in error.";
    max_retrans: u32 = Int(25, Range::AtLeast(1)),
        "Retransmissions of one segment before its peer is declared dead.";
    manual_peer_timeout_ms: u64 = Int(900_000, Range::AtLeast(1)),
        "Under FI_PROGRESS_MANUAL, where a process answers only while its application calls in, this replaces FI_GNIX_PEER_TIMEOUT_MS and the retransmission limit: a peer is declared dead after this many milliseconds without a word from it (default 15 minutes, about when TCP gives up retransmitting).";
    udp_mtu: usize = Size(0, Range::ZeroOr(576, 65507)),
        "Largest UDP datagram the udp wire sends; 0 = the interface MTU minus IP/UDP headers.";
    udp_connect: usize = Int(16, Range::Span(0, 1024)),
        "udp wire: how many peers of an endpoint get a socket of their own, connected to them, which spares the kernel route and socket lookups per datagram; 0 = all traffic through the endpoint's one socket.";
    sockbuf: usize = Size(8 << 20, Range::AtLeast(65536)),
        "Socket send/receive buffer size of each endpoint's UDP socket, in bytes.";
    iface: Option<String> = Str,
        "Only offer the domain of this network interface (e.g. lo, eth0); default: all interfaces that are up.";
    tx_size: usize = Size(1024, Range::AtLeast(1)),
        "Default transmit queue depth: outstanding sends per endpoint before -FI_EAGAIN.";
    rx_size: usize = Size(16384, Range::AtLeast(1)),
        "Default receive queue depth: receives that can be posted at once before -FI_EAGAIN.";
    credit_bytes: usize = Size(32 << 20, Range::ZeroOr(1 << 20, 1 << 40)),
        "udp wire: receive budget for eager and unexpected messages, shared by all peers (credit flow control); 0 turns it off.";
    credit_min_loan: usize = Size(256 << 10, Range::Span(4096, 1 << 30)),
        "udp wire: credit bytes every peer may hold; a new peer gets this much at once.";
    credit_max_loan: usize = Size(8 << 20, Range::Span(65536, 1 << 36)),
        "udp wire: most credit bytes one peer may hold.";
    credit_epoch_ms: u64 = Int(10, Range::AtLeast(1)),
        "udp wire: usage counters halve every this many milliseconds; peers that used nothing in an epoch give back credits when the bank runs low.";
    gate: bool = Int(1, Range::Span(0, 1)),
        "Under FI_THREAD_DOMAIN, endpoint and CQ locks cost the application no atomic instruction; the progress thread takes the whole domain with membarrier(2) when it needs it (1). 0: ordinary mutexes.";
    shm: bool = Int(1, Range::Span(0, 1)),
        "Use the shared-memory wire for peers on this host (1) or send everything over UDP (0).";
    cma: bool = Int(1, Range::Span(0, 1)),
        "Shared-memory rendezvous pulls data with process_vm_readv (1) or always copies it through the mailbox (0).";
    shm_eager: usize = Size(8192, Range::Span(64, 65536)),
        "Payload bytes of one shared-memory mailbox slot (a slot takes this much memory in each peer's ring); a longer message spans up to FI_GNIX_SHM_SPAN slots.";
    shm_span: usize = Int(8, Range::Span(1, 64)),
        "Slots one shared-memory message may span: messages up to this many slots (less a 48-byte header) may be copied through the mailbox, longer ones use rendezvous (a pull with process_vm_readv); to a peer not known to share this process's last-level cache (both bound within one) a message spans at most 4 slots. Within that, each receiver times its copies and pulls and asks for copies only where they cost less on its host (until it knows, a message longer than a slot is pulled). Each ring gets this many slots less one of overflow room.";
    shm_cache: i64 = Int(-1, Range::Span(-1, 1 << 20)),
        "The last-level cache this process names to its local peers: -1 works it out (from the CPUs it may run on and sysfs: named when they are all under one cache, not otherwise); a number names that one (processes that name the same nonzero number take each other as sharing a cache, for containers without sysfs); 0 names none. A sender spans FI_GNIX_SHM_SPAN slots only to a peer naming its own cache, at most 4 to others.";
    shm_depth: usize = Int(64, Range::Span(2, 4096)),
        "Slots in each peer's shared-memory mailbox ring.";
    shm_peers: usize = Int(64, Range::Span(1, 480)),
        "Rings in an endpoint's shared-memory mailbox: local peers that can send to it over shm at once; more use UDP.";
    yield_after_us: u64 = Int(50, Range::Span(0, 1_000_000)),
        "An application that polls a CQ or counter finding nothing for this many microseconds gives its CPU away (sched_yield) every 64 polls after that (up to 4096 while the yields find nothing else to run), so that a peer queued behind it on an oversubscribed host gets to run; once a yield has let something else run, every wait yields at its 64th poll until a yield comes back at once; 0: never.";
}

static PARAMS: OnceLock<Params> = OnceLock::new();

pub fn define_all() {
    let Some(define) = crate::core::core().and_then(|c| c.param_define) else {
        return;
    };
    for t in TUNABLES {
        let (Ok(name), Ok(help)) = (CString::new(t.name), CString::new(t.full_help())) else {
            continue;
        };
        // SAFETY: name and help are NUL-terminated and live through the
        // call; the help passes through a literal "%s", so a '%' in it is no
        // directive, and the core keeps its own formatted copy of it.
        unsafe {
            define(
                crate::provider_ptr(),
                name.as_ptr(),
                t.kind.fi_type(),
                c"%s".as_ptr(),
                help.as_ptr(),
            )
        };
    }
}

/// The environment's value of `t`, if set (through `fi_param_get`).
fn get(t: &Tunable) -> Option<Val> {
    let get = crate::core::core().and_then(|c| c.param_get)?;
    let p = crate::provider_ptr() as *mut fi_provider;
    let name = CString::new(t.name).ok()?;
    // SAFETY: fi_param_get writes an int / size_t / char* matching the type
    // the parameter was defined with, into storage of that type.
    unsafe {
        match t.kind {
            Kind::Int => {
                let mut v: c_int = 0;
                (get(p, name.as_ptr(), &mut v as *mut c_int as *mut c_void) == 0).then_some(Val::Int(v as i64))
            }
            Kind::Size => {
                let mut v: usize = 0;
                // A size past i64::MAX is out of every range: i64::MIN is too.
                (get(p, name.as_ptr(), &mut v as *mut usize as *mut c_void) == 0)
                    .then_some(Val::Int(i64::try_from(v).unwrap_or(i64::MIN)))
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

/// Why a value was refused (then the default stays).
#[derive(Debug, PartialEq, Eq)]
pub struct Refused(String);

impl Params {
    /// Applies one environment value to the tunable it belongs to, after
    /// checking it against the declared range.
    pub fn apply(&mut self, t: &Tunable, v: &Val) -> Result<(), Refused> {
        let ok = match (t.range, v) {
            (Range::Text, Val::Str(_)) => true,
            (Range::Text, Val::Int(_)) | (_, Val::Str(_)) => false,
            (r, Val::Int(n)) => r.admits(*n),
        };
        if ok && self.set(t.name, v) {
            return Ok(());
        }
        let shown = match v {
            Val::Int(i64::MIN) => "a value".to_string(),
            Val::Int(n) => n.to_string(),
            Val::Str(s) => format!("{s:?}"),
        };
        Err(Refused(format!(
            "{}: {} is out of range ({}), keeping the default {}",
            t.env_name(),
            shown,
            t.range,
            t.default_text()
        )))
    }

    /// The declared defaults overridden by what `lookup` finds; a value
    /// out of range is refused with a warning and the default kept.
    pub fn load_with(lookup: impl Fn(&Tunable) -> Option<Val>) -> Params {
        let mut p = Params::default();
        for t in TUNABLES {
            if let Some(v) = lookup(t) {
                if let Err(Refused(why)) = p.apply(t, &v) {
                    crate::warn!(FI_LOG_CORE, "{}", why);
                }
            }
        }
        p
    }

    /// The protocol knobs a domain starts with (`fi_ext_gnix.h` changes them).
    pub fn domain_tunables(&self) -> Tunables {
        Tunables {
            rndv_threshold: self.rndv_threshold,
            peer_timeout_ms: self.peer_timeout_ms,
            max_retrans: self.max_retrans,
        }
    }

    /// FI_GNIX_SHM_PEERS, _DEPTH, _EAGER and _SPAN: the shape of an
    /// endpoint's mailbox (and of its peers', made with the same).
    pub fn shm_geometry(&self) -> crate::nic::shm::Geometry {
        crate::nic::shm::Geometry::new(self.shm_peers, self.shm_depth, self.shm_eager).with_span(self.shm_span)
    }

    /// FI_GNIX_CREDIT_*: bytes in, credits of 1 KiB out; None when off.
    pub fn credit_config(&self) -> Option<CreditConfig> {
        if self.credit_bytes == 0 {
            return None;
        }
        let unit = 1024usize;
        let c = |b: usize| (b / unit).clamp(1, u32::MAX as usize / 4) as u32;
        let total = c(self.credit_bytes);
        let min_loan = c(self.credit_min_loan).min(total);
        Some(CreditConfig {
            unit: unit as u32,
            total,
            min_loan,
            max_loan: c(self.credit_max_loan).clamp(min_loan, total),
            low_water: total / 8,
            epoch_ns: self.credit_epoch_ms * 1_000_000,
        })
    }
}

/// What the udp wire learnt about its socket and host that the engine needs.
pub struct LinkFacts {
    /// Largest datagram towards the interface's peers, headers included.
    pub max_datagram: usize,
    /// The same towards peers on this host (loopback).
    pub local_max_datagram: usize,
    /// Bytes of datagrams the socket's receive buffer really holds.
    pub rcvbuf: usize,
    /// This host's addresses.
    pub local_ips: Vec<std::net::IpAddr>,
}

/// Silence after which a VC we wait on probes its peer (`EngineConfig::keepalive_ns`).
const KEEPALIVE_NS: u64 = 1_000_000_000;

/// An endpoint's engine configuration. Every field a tunable decides is set
/// here from `p` and the domain's `t`, so `EngineConfig::default` supplies
/// only what no tunable covers (window, ACK delay, RTO bounds, pull window,
/// GET chunk, handshake limits).
/// The udp wire's engine settings for an endpoint of a domain with the
/// progress thread, or without it (`manual`): then only the application's
/// calls answer for the process, so a peer that is away from libfabric
/// is not to be taken for dead by its silence alone within the usual
/// timeout (a process that computes for a minute after taking our
/// message is well), and an ACK that completes a send its sender waits
/// for cannot wait for a next call.
pub fn engine_config(p: &Params, t: Tunables, link: LinkFacts, manual: bool) -> EngineConfig {
    let engine = EngineConfig::default();
    let (peer_timeout_ms, max_retrans) = if manual {
        (p.manual_peer_timeout_ms, u32::MAX)
    } else {
        (t.peer_timeout_ms, t.max_retrans)
    };
    EngineConfig {
        max_datagram: link.max_datagram,
        local_ips: link.local_ips,
        local_max_datagram: link.local_max_datagram,
        rndv_threshold: t.rndv_threshold,
        // Peers are assumed to get the receive buffer we got: more in flight
        // than it holds is lost in bursts (an unprivileged process gets
        // net.core.rmem_max, 208 KiB on a stock kernel, under the 4 MiB default).
        window_bytes: engine.window_bytes.min(link.rcvbuf.max(64 << 10)),
        max_retrans,
        peer_timeout_ns: peer_timeout_ms.saturating_mul(1_000_000),
        // A peer we wait for that died is then known within a second from
        // its host's refusal, whatever the peer timeout (15 minutes under
        // manual progress).
        keepalive_ns: KEEPALIVE_NS,
        ack_completions_now: manual,
        rndv_push: p.rndv_push,
        credits: p.credit_config(),
        ..engine
    }
}

/// The tunables, read once from the environment.
pub fn params() -> &'static Params {
    PARAMS.get_or_init(|| Params::load_with(get))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_default_is_in_range_and_fits_its_field() {
        for t in TUNABLES {
            match t.default {
                Some(d) => {
                    assert!(t.admits(d), "{}: default {} outside {}", t.name, d, t.range);
                    let mut p = Params::default();
                    assert!(p.set(t.name, &Val::Int(d)), "{}: default does not fit", t.name);
                    assert_eq!(p, Params::default(), "{}: Params::default differs", t.name);
                }
                None => assert_eq!(t.kind, Kind::Str, "{}: only strings may lack a default", t.name),
            }
            assert_eq!(t.kind == Kind::Str, t.range == Range::Text, "{}", t.name);
            // Every declared name has a field (`set` knows it).
            let probe = match t.kind {
                Kind::Str => Val::Str("x".into()),
                _ => Val::Int(t.default.unwrap()),
            };
            assert!(Params::default().set(t.name, &probe), "{}", t.name);
        }
        let mut names: Vec<_> = TUNABLES.iter().map(|t| t.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), TUNABLES.len(), "a name is declared twice");
    }

    #[test]
    fn declared_defaults_are_the_documented_ones() {
        let p = Params::default();
        assert_eq!(p.rndv_threshold, 65536);
        assert_eq!(p.peer_timeout_ms, 10_000);
        assert_eq!(p.sockbuf, 8 << 20);
        assert_eq!(p.iface, None);
        assert!(p.shm && p.cma);
    }

    #[test]
    fn out_of_range_values_are_refused_and_the_default_kept() {
        let env = |t: &Tunable| -> Option<Val> {
            match t.name {
                "udp_connect" => Some(Val::Int(1025)),
                "udp_mtu" => Some(Val::Int(100)),
                "shm" => Some(Val::Int(2)),
                "peer_timeout_ms" => Some(Val::Int(0)),
                "sockbuf" => Some(Val::Int(i64::MIN)),
                "credit_bytes" => Some(Val::Int(0)),
                "shm_peers" => Some(Val::Int(480)),
                "iface" => Some(Val::Str("lo".into())),
                _ => None,
            }
        };
        let p = Params::load_with(env);
        let d = Params::default();
        assert_eq!(p.udp_connect, d.udp_connect);
        assert_eq!(p.udp_mtu, d.udp_mtu);
        assert_eq!(p.shm, d.shm);
        assert_eq!(p.peer_timeout_ms, d.peer_timeout_ms);
        assert_eq!(p.sockbuf, d.sockbuf);
        assert_eq!(p.credit_bytes, 0, "0 is admitted: credits off");
        assert_eq!(p.shm_peers, 480, "the range's bound is admitted");
        assert_eq!(p.iface.as_deref(), Some("lo"));

        let mut q = Params::default();
        let e = q.apply(&decl::udp_mtu, &Val::Int(100)).unwrap_err();
        assert_eq!(
            e,
            Refused("FI_GNIX_UDP_MTU: 100 is out of range (0 or 576..65507), keeping the default 0".into())
        );
        assert!(q.apply(&decl::udp_mtu, &Val::Int(576)).is_ok());
        assert_eq!(q.udp_mtu, 576);
        assert!(q.apply(&decl::iface, &Val::Int(3)).is_err());
        assert!(q.apply(&decl::shm, &Val::Str("1".into())).is_err());
    }

    #[test]
    fn help_states_the_declared_default_and_range() {
        assert_eq!(
            decl::udp_connect.full_help(),
            format!("{} Default 16, range 0..1024.", decl::udp_connect.help)
        );
        assert!(decl::shm.full_help().ends_with("Default 1, range 0 or 1."));
        assert!(decl::peer_timeout_ms
            .full_help()
            .ends_with("Default 10000, range at least 1."));
        for t in TUNABLES {
            assert!(
                !t.help.contains("default:") || t.kind == Kind::Str,
                "{}: default in prose",
                t.name
            );
        }
    }

    fn link() -> LinkFacts {
        LinkFacts {
            max_datagram: 1472,
            local_max_datagram: 65507,
            rcvbuf: 1 << 30,
            local_ips: vec![],
        }
    }

    /// Production engine configuration comes from the tunables, whatever
    /// `EngineConfig::default` says.
    #[test]
    fn engine_config_comes_from_params() {
        let p = Params::default();
        let cfg = engine_config(&p, p.domain_tunables(), link(), false);
        assert_eq!(cfg.peer_timeout_ns, 10_000_000_000);
        assert_eq!(cfg.max_retrans, 25);
        assert!(!cfg.ack_completions_now);
        // Manual progress: silence alone, 15 minutes of it.
        let m = engine_config(&p, p.domain_tunables(), link(), true);
        assert_eq!((m.peer_timeout_ns, m.max_retrans), (900_000_000_000, u32::MAX));
        assert!(m.ack_completions_now);
        assert_eq!(cfg.rndv_threshold, 65536);
        assert_eq!(cfg.rndv_push, 128 << 10);
        assert_eq!(cfg.max_datagram, 1472);
        assert_eq!(cfg.local_max_datagram, 65507);
        let c = cfg.credits.unwrap();
        assert_eq!(
            (c.unit, c.total, c.min_loan, c.max_loan),
            (1024, 32 << 10, 256, 8 << 10)
        );
        assert_eq!((c.low_water, c.epoch_ns), (4 << 10, 10_000_000));

        let mut q = Params::load_with(|t| match t.name {
            "rndv_push" => Some(Val::Int(0)),
            "credit_bytes" => Some(Val::Int(0)),
            _ => None,
        });
        q.peer_timeout_ms = 3;
        let t = Tunables {
            rndv_threshold: 100,
            peer_timeout_ms: 7,
            max_retrans: 2,
        };
        let cfg = engine_config(&q, t, LinkFacts { rcvbuf: 1, ..link() }, false);
        assert_eq!(cfg.peer_timeout_ns, 7_000_000, "the domain's value wins");
        assert_eq!((cfg.rndv_threshold, cfg.max_retrans, cfg.rndv_push), (100, 2, 0));
        assert_eq!(cfg.credits, None);
        assert_eq!(
            cfg.window_bytes,
            64 << 10,
            "capped by the receive buffer, at least 64 KiB"
        );
    }

    /// The man page's RUNTIME PARAMETERS section: its table lists exactly
    /// the declared tunables with their type, default and range, and each
    /// has a description.
    #[test]
    fn man_page_matches_the_declarations() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/man/fi_gnix.7.md");
        let man = std::fs::read_to_string(path).unwrap();
        let section = man
            .split("\n# RUNTIME PARAMETERS\n")
            .nth(1)
            .expect("no RUNTIME PARAMETERS section")
            .split("\n# ")
            .next()
            .unwrap();
        let mut rows: Vec<String> = section
            .lines()
            .filter(|l| l.starts_with("| FI_GNIX_"))
            .map(|l| l.split('|').map(str::trim).collect::<Vec<_>>().join("|"))
            .collect();
        let mut want: Vec<String> = TUNABLES
            .iter()
            .map(|t| {
                format!(
                    "|{}|{}|{}|{}|",
                    t.env_name(),
                    t.kind.c_name(),
                    t.default_text(),
                    t.range
                )
            })
            .collect();
        rows.sort();
        want.sort();
        assert_eq!(
            rows,
            want,
            "man/fi_gnix.7.md's table differs from the declarations; it should read:\n{}",
            TUNABLES
                .iter()
                .map(|t| format!(
                    "| {} | {} | {} | {} |\n",
                    t.env_name(),
                    t.kind.c_name(),
                    t.default_text(),
                    t.range
                ))
                .collect::<String>()
        );
        // The descriptions: definition terms naming each tunable once.
        let mut described: Vec<String> = section
            .lines()
            .filter(|l| l.starts_with("*FI_GNIX_"))
            .flat_map(|l| {
                l.split(", ")
                    .map(|s| s.trim_matches('*').to_string())
                    .collect::<Vec<_>>()
            })
            .collect();
        described.sort();
        let mut names: Vec<String> = TUNABLES.iter().map(Tunable::env_name).collect();
        names.sort();
        assert_eq!(described, names, "each tunable needs one description");
    }
}
