//! Process-level harness for the gnix integration tests.
//!
//! The tests never touch the crate's Rust API: they compile the C clients in
//! `tests/clients/` against the system libfabric (`-lfabric`), start them as
//! separate processes with `FI_PROVIDER_PATH`/`FI_PROVIDER` pointing at the
//! provider under test, and referee the line protocol described in
//! `tests/clients/fitest.h` (address exchange, OOB words, kill requests,
//! verdicts).
//!
//! Provider selection:
//! * default: gnix — `GNIX_PROVIDER_DIR`, or `target/<profile>/fi-provider/`
//!   holding a `libgnix-fi.so` symlink to the cdylib cargo built;
//! * `GNIX_TEST_PROVIDER='tcp;ofi_rxm'` (or `udp;ofi_rxd`, `shm`, ...): a
//!   libfabric built-in provider, to validate the suite itself.
//!
//! Env knobs: `GNIX_TEST_STRICT=1` makes spec deviations fail for reference
//! providers too (they always fail for gnix); `GNIX_TEST_TIMEOUT_SCALE=<f>`
//! scales every hard time bound; `GNIX_TEST_SHOW_STDERR=1` prints every
//! client's stderr after each scenario, passed or not (e.g. with
//! `FI_LOG_LEVEL=info FI_LOG_PROV=gnix`: the engine counters at close).
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

/// The provider under test: `GNIX_TEST_PROVIDER` or "gnix".
pub fn provider() -> String {
    std::env::var("GNIX_TEST_PROVIDER")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "gnix".to_string())
}

pub fn is_gnix() -> bool {
    provider() == "gnix"
}

/// For gnix-only tests: returns true (and says so in a `SKIPPED` line) when
/// another provider is under test. Not a failure under CI either: choosing
/// a reference provider (`GNIX_TEST_PROVIDER`) selects the tests that apply
/// to it, the way a test filter does; CI runs against gnix.
pub fn skip_unless_gnix(what: &str) -> bool {
    if is_gnix() {
        return false;
    }
    skipped(
        what,
        &format!(
            "gnix-only test (GNIX_TEST_PROVIDER={}); reference providers do not implement it",
            provider()
        ),
    );
    true
}

/// Whether CI runs this suite (`CI=true`, which `.ci/run` exports): there a
/// test that cannot run is a failure, never a skip.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// The one rule for a test that needs something this machine may lack (a
/// program, root, network namespaces): `need` is `Ok` when it is there.
/// Otherwise, under CI (`in_ci`) the test fails, naming what is missing;
/// elsewhere it prints a `SKIPPED` line and this returns false, and the
/// caller returns: `if !require(test, have_program("fi_info")) { return; }`.
pub fn require(test: &str, need: Result<(), String>) -> bool {
    let Err(why) = need else {
        return true;
    };
    if in_ci() {
        panic!("{test}: cannot run: {why} (CI=true: every test must run; scripts/deps.sh installs what they need)");
    }
    skipped(test, &why);
    false
}

/// Prints `SKIPPED: <test>: <why>` where it is seen: straight to stderr,
/// past the test harness's output capture, which would only show it for a
/// failed test. With `GNIX_TEST_SKIPPED_LOG` set (`./test.sh` sets it), the
/// line is also appended to that file, so the run can list its skips.
pub fn skipped(test: &str, why: &str) {
    let line = format!("SKIPPED: {test}: {why}\n");
    let _ = std::io::stderr().write_all(line.as_bytes());
    if let Some(log) = std::env::var_os("GNIX_TEST_SKIPPED_LOG") {
        let f = std::fs::OpenOptions::new().create(true).append(true).open(log);
        let _ = f.and_then(|mut f| f.write_all(line.as_bytes()));
    }
}

/// `Ok` when `name` is an executable file on `PATH`; the error names the
/// Debian `package` that has it.
pub fn have_program(name: &str, package: &str) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&path)
        .any(|d| std::fs::metadata(d.join(name)).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0));
    if found {
        Ok(())
    } else {
        Err(format!("`{name}` is not on PATH (Debian package {package})"))
    }
}

fn profile_dir() -> PathBuf {
    // target/<profile>/deps/<test>-<hash>
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .and_then(Path::parent)
        .expect("test binary is not inside target/<profile>/deps")
        .to_path_buf()
}

/// Directory holding `libgnix-fi.so` for `FI_PROVIDER_PATH`.
pub fn provider_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("GNIX_PROVIDER_DIR") {
        return PathBuf::from(d);
    }
    let prof = profile_dir();
    // `cargo build` puts the cdylib in target/<profile>/; `cargo test` builds
    // it too but leaves it in target/<profile>/deps/: take the newer one.
    let mtime = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let cands = [prof.join("libgnix_fi.so"), prof.join("deps/libgnix_fi.so")];
    let lib = cands
        .iter()
        .filter(|p| p.exists())
        .max_by_key(|p| mtime(p))
        .cloned()
        .unwrap_or_else(|| cands[0].clone());
    if !lib.exists() {
        panic!(
            "gnix provider not found: {} does not exist. Build it (cargo build [--release]) \
             or set GNIX_PROVIDER_DIR, or run the suite against a reference provider with \
             GNIX_TEST_PROVIDER='tcp;ofi_rxm'",
            lib.display()
        );
    }
    let dir = prof.join("fi-provider");
    std::fs::create_dir_all(&dir).expect("create fi-provider dir");
    let link = dir.join("libgnix-fi.so");
    // Race-free between parallel tests/binaries: make a temp link, rename over.
    let tmp = dir.join(format!(
        ".libgnix-fi.so.{}.{:?}",
        std::process::id(),
        thread::current().id()
    ));
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(&lib, &tmp).expect("symlink provider");
    std::fs::rename(&tmp, &link).expect("rename provider symlink");
    dir
}

/// Environment for a client process.
/// gnix's wire under test, `GNIX_TEST_WIRE`: `shm` (the default: local
/// peers over shared memory, rendezvous by cross-memory attach), `copy`
/// (shm with the copy fallback, FI_GNIX_CMA=0) or `udp` (FI_GNIX_SHM=0).
/// `./test.sh` runs the integration scenarios once per wire.
pub fn wire_env() -> Vec<(String, String)> {
    let wire = std::env::var("GNIX_TEST_WIRE").unwrap_or_default();
    match wire.as_str() {
        "" | "shm" => vec![],
        "copy" => vec![("FI_GNIX_CMA".into(), "0".into())],
        "udp" => vec![("FI_GNIX_SHM".into(), "0".into())],
        w => panic!("GNIX_TEST_WIRE={w}: expected shm, copy or udp"),
    }
}

pub fn provider_env() -> Vec<(String, String)> {
    let mut v = Vec::new();
    if is_gnix() {
        v.push(("FI_PROVIDER_PATH".into(), provider_dir().display().to_string()));
        v.push(("FI_PROVIDER".into(), "gnix".into()));
        v.push(("FITEST_STRICT".into(), "1".into()));
        v.extend(wire_env());
    } else {
        v.push(("FI_PROVIDER".into(), provider()));
        if std::env::var("GNIX_TEST_STRICT").map(|s| s == "1").unwrap_or(false) {
            v.push(("FITEST_STRICT".into(), "1".into()));
        }
    }
    v
}

fn timeout_scale() -> f64 {
    std::env::var("GNIX_TEST_TIMEOUT_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0)
}

static CLIENTS: OnceLock<PathBuf> = OnceLock::new();

/// Compile every `tests/clients/*.c` once per test process into
/// `target/<profile>/clients/<name>` (temp name + rename: race-free between
/// test binaries running at the same time).
pub fn clients_dir() -> &'static Path {
    CLIENTS.get_or_init(|| {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients");
        let out = profile_dir().join("clients");
        std::fs::create_dir_all(&out).expect("create clients dir");
        for ent in std::fs::read_dir(&src).expect("tests/clients") {
            let p = ent.unwrap().path();
            if p.extension().map(|e| e != "c").unwrap_or(true) {
                continue;
            }
            let name = p.file_stem().unwrap().to_string_lossy().to_string();
            let tmp = out.join(format!(".{name}.{}.tmp", std::process::id()));
            let o = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
                .args(["-O2", "-g", "-Wall", "-Werror", "-o"])
                .arg(&tmp)
                .arg(&p)
                .arg(format!("-I{}", src.display()))
                // gnix's own extension header (fi_ext_gnix.h)
                .arg(format!(
                    "-I{}",
                    Path::new(env!("CARGO_MANIFEST_DIR")).join("include").display()
                ))
                .args(["-lfabric", "-lpthread"])
                .output()
                .expect("run cc");
            if !o.status.success() {
                panic!(
                    "compiling {} failed:\n{}",
                    p.display(),
                    String::from_utf8_lossy(&o.stderr)
                );
            }
            std::fs::rename(&tmp, out.join(&name)).expect("rename client");
        }
        out
    })
}

enum Ev {
    Line(usize, String),
    Eof(usize),
}

struct Proc {
    child: Child,
    stdin: Option<ChildStdin>,
    stderr: Arc<Mutex<String>>,
    /// Says when the stderr reader reached end of file: the client's last
    /// lines (its closing log line) are in `stderr` only after that.
    stderr_done: Receiver<()>,
    eof: bool,
    killed: bool,
    status: Option<ExitStatus>,
}

/// The outcome of a scenario run (all processes).
#[derive(Debug, Default)]
pub struct Outcome {
    pub skipped: Option<String>,
    pub deviations: Vec<String>,
    pub info: Vec<String>,
    pub addrs: Vec<String>,
    pub elapsed: Duration,
    /// Each rank's stderr (libfabric's log goes there).
    pub stderr: Vec<String>,
}

/// A scenario to run: `fitest <scenario> <rank> <nprocs> [arg]` × nprocs.
pub struct Scenario {
    pub name: String,
    pub nprocs: usize,
    pub arg: Option<String>,
    pub env: Vec<(String, String)>,
    pub timeout: Duration,
    /// For gnix a SKIP verdict fails the test unless this is set; then it
    /// is a `require` that failed (a failure under CI all the same).
    pub skip_ok_for_gnix: bool,
    /// Ranks that will be SIGKILLed on request (they need not pass).
    pub may_be_killed: Vec<usize>,
    /// Send garbage UDP datagrams to rank 0's address while running.
    pub stray_datagrams: bool,
    /// Paced stray datagrams: at most this many per second (0: flat out).
    pub stray_rate: u32,
    /// Per rank: run it inside this network namespace (`ip netns exec`).
    pub rank_netns: Vec<(usize, String)>,
    /// Per rank environment, after the common one.
    pub rank_env: Vec<(usize, String, String)>,
    /// Run every rank on this one CPU (`taskset`), so that they take turns.
    pub one_cpu: Option<usize>,
}

impl Scenario {
    pub fn new(name: &str, nprocs: usize) -> Self {
        Scenario {
            name: name.into(),
            nprocs,
            arg: None,
            env: Vec::new(),
            timeout: Duration::from_secs(60),
            skip_ok_for_gnix: false,
            may_be_killed: Vec::new(),
            stray_datagrams: false,
            stray_rate: 0,
            rank_netns: Vec::new(),
            rank_env: Vec::new(),
            one_cpu: None,
        }
    }
    /// Every rank on CPU `cpu` alone: a rank that waits for another keeps
    /// it from running until it gives the CPU away.
    pub fn one_cpu(mut self, cpu: usize) -> Self {
        self.one_cpu = Some(cpu);
        self
    }
    /// Run `rank` inside network namespace `ns`.
    pub fn netns(mut self, rank: usize, ns: &str) -> Self {
        self.rank_netns.push((rank, ns.into()));
        self
    }
    pub fn rank_env(mut self, rank: usize, k: &str, v: &str) -> Self {
        self.rank_env.push((rank, k.into(), v.into()));
        self
    }
    /// Every rank in one of the two hosts of `h`: rank 0 in host A, the
    /// others in host B, each bound to its veth interface.
    pub fn across(mut self, h: &TwoHosts) -> Self {
        for r in 0..self.nprocs {
            let side = if r == 0 { 0 } else { 1 };
            self = self
                .netns(r, &h.ns[side])
                .rank_env(r, "FI_GNIX_IFACE", &h.veth[side])
                .rank_env(r, "FI_TCP_IFACE", &h.veth[side]);
        }
        self
    }
    pub fn arg(mut self, a: &str) -> Self {
        self.arg = Some(a.into());
        self
    }
    pub fn env(mut self, k: &str, v: &str) -> Self {
        self.env.push((k.into(), v.into()));
        self
    }
    pub fn timeout(mut self, secs: u64) -> Self {
        self.timeout = Duration::from_secs(secs);
        self
    }
    pub fn skip_ok(mut self) -> Self {
        self.skip_ok_for_gnix = true;
        self
    }
    pub fn killable(mut self, rank: usize) -> Self {
        self.may_be_killed.push(rank);
        self
    }
    pub fn stray(mut self) -> Self {
        self.stray_datagrams = true;
        self
    }
    /// Stray datagrams paced to `per_sec` (a flood that costs the machine
    /// little CPU of its own, so that a slowdown is the victim's).
    pub fn stray_paced(mut self, per_sec: u32) -> Self {
        self.stray_datagrams = true;
        self.stray_rate = per_sec;
        self
    }

    /// Run to completion; panics (after killing every child) on any failure.
    pub fn run(self) -> Outcome {
        // The wire and knobs in the label: a scenario run once a wire
        // (FI_GNIX_SHM, GNIX_TEST_WIRE) says which run failed.
        let knobs: String = wire_env()
            .iter()
            .chain(&self.env)
            .map(|(k, v)| format!(" {k}={v}"))
            .collect();
        let label = format!(
            "{}{} [{}{knobs}]",
            self.name,
            self.arg.as_deref().map(|a| format!(" {a}")).unwrap_or_default(),
            provider()
        );
        let r = run_inner(&self, &label);
        for d in &r.deviations {
            eprintln!("[{label}] spec deviation (tolerated for {}): {d}", provider());
        }
        for i in &r.info {
            eprintln!("[{label}] {i}");
        }
        if let Some(why) = &r.skipped {
            if !is_gnix() {
                // A reference provider that cannot meet the scenario's hints.
                skipped(&label, why);
            } else if self.skip_ok_for_gnix {
                require(&label, Err(why.clone()));
            } else {
                panic!("[{label}] gnix must support this scenario, but it skipped: {why}");
            }
        }
        r
    }
}

fn write_line(p: &mut Proc, line: &str) {
    if let Some(s) = p.stdin.as_mut() {
        let _ = s.write_all(line.as_bytes());
        let _ = s.write_all(b"\n");
        let _ = s.flush();
    }
}

fn kill(p: &mut Proc) {
    if p.status.is_none() {
        let _ = p.child.kill();
        p.status = p.child.wait().ok();
    }
}

fn dump(procs: &[Proc]) -> String {
    let mut s = String::new();
    for (i, p) in procs.iter().enumerate() {
        let e = p.stderr.lock().unwrap();
        s += &format!("---- rank {i} (status {:?}) stderr:\n{}\n", p.status, e.trim_end());
    }
    s
}

struct Stray {
    stop: Arc<AtomicBool>,
    handle: Option<thread::JoinHandle<u64>>,
}

/// Parse a hex fi_getname address; Some(addr) if it is a sockaddr_in.
pub fn sockaddr_in_from_hex(h: &str) -> Option<SocketAddrV4> {
    let b: Vec<u8> = (0..h.len() / 2)
        .filter_map(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16).ok())
        .collect();
    if b.len() >= 16 && u16::from_ne_bytes([b[0], b[1]]) == 2 {
        let port = u16::from_be_bytes([b[2], b[3]]);
        let ip = Ipv4Addr::new(b[4], b[5], b[6], b[7]);
        Some(SocketAddrV4::new(ip, port))
    } else {
        None
    }
}

fn start_stray(target: SocketAddrV4, rate: u32) -> Stray {
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let handle = thread::spawn(move || {
        let sock = UdpSocket::bind("0.0.0.0:0").expect("bind stray socket");
        let mut rng: u64 = 0x243f6a8885a308d3 ^ std::process::id() as u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut gen = |buf: &mut [u8]| -> usize {
            let kind = next() % 7;
            let len = match kind {
                0 => 0,
                1 => 1 + (next() % 8) as usize,      // truncated header
                2 => 9 + (next() % 64) as usize,     // short
                3 => 1200 + (next() % 300) as usize, // MTU-ish
                4 => 1 + (next() % 65000) as usize,  // anything
                6 => 24 + (next() % 1500) as usize,  // gnix header, unknown sender
                _ => 16 + (next() % 2000) as usize,
            };
            for x in buf[..len].iter_mut() {
                *x = next() as u8;
            }
            if kind == 6 {
                // magic "GN", version 1, a real kind: decodes, then dropped
                // for its source (no VC) or connection id
                buf[..3].copy_from_slice(&[0x47, 0x4e, 1]);
                buf[3] = [3u8, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16][(next() % 8) as usize];
            }
            if kind == 5 && len >= 8 {
                // plausible-looking: small leading fields
                for x in buf[..8].iter_mut() {
                    *x = (next() % 4) as u8;
                }
            }
            len
        };
        // Paced: a pool made up front, so that the flood's own CPU is the
        // sending only and a slowdown is the victim's.
        let pool: Vec<Vec<u8>> = if rate > 0 {
            let mut b = vec![0u8; 65000];
            (0..512)
                .map(|_| {
                    let n = gen(&mut b);
                    b[..n].to_vec()
                })
                .collect()
        } else {
            Vec::new()
        };
        let mut sent = 0u64;
        let t0 = Instant::now();
        let mut buf = vec![0u8; 65000];
        let mut k = 0usize;
        while !st.load(Ordering::Relaxed) {
            let d: &[u8] = if pool.is_empty() {
                let len = gen(&mut buf);
                &buf[..len]
            } else {
                k += 1;
                &pool[k % pool.len()]
            };
            if sock.send_to(d, target).is_ok() {
                sent += 1;
            }
            if sent.is_multiple_of(64) {
                if rate > 0 {
                    // pacing the flood (not synchronisation): 64 per 64/rate s
                    let due = t0 + Duration::from_secs_f64(sent as f64 / rate as f64);
                    if let Some(d) = due.checked_duration_since(Instant::now()) {
                        thread::sleep(d);
                    }
                } else {
                    thread::yield_now();
                }
            }
        }
        sent
    });
    Stray {
        stop,
        handle: Some(handle),
    }
}

fn run_inner(sc: &Scenario, label: &str) -> Outcome {
    let bin = clients_dir().join("fitest");
    let env = provider_env();
    let timeout = sc.timeout.mul_f64(timeout_scale());
    let start = Instant::now();
    let deadline = start + timeout;
    let (tx, rx): (Sender<Ev>, Receiver<Ev>) = channel();
    let mut procs: Vec<Proc> = Vec::new();
    for rank in 0..sc.nprocs {
        let mut cmd = match sc.rank_netns.iter().find(|(r, _)| *r == rank) {
            // `ip netns exec` execs the client after setns: the child's pid is the client's.
            Some((_, ns)) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(&bin);
                c
            }
            // `taskset` execs the client: the child's pid is the client's.
            None => match sc.one_cpu {
                Some(cpu) => {
                    let mut c = Command::new("taskset");
                    c.args(["-c", &cpu.to_string()]).arg(&bin);
                    c
                }
                None => Command::new(&bin),
            },
        };
        cmd.arg(&sc.name).arg(rank.to_string()).arg(sc.nprocs.to_string());
        if let Some(a) = &sc.arg {
            cmd.arg(a);
        }
        for (k, v) in env.iter().chain(sc.env.iter()) {
            cmd.env(k, v);
        }
        for (_, k, v) in sc.rank_env.iter().filter(|(r, _, _)| *r == rank) {
            cmd.env(k, v);
        }
        // the client's own per-wait deadline stays below the hard bound
        let inner = (timeout.as_millis() as u64 * 3 / 4).max(1000);
        cmd.env("FITEST_TIMEOUT_MS", inner.to_string());
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));
        let out = child.stdout.take().unwrap();
        let err = child.stderr.take().unwrap();
        let stdin = child.stdin.take();
        let t = tx.clone();
        thread::spawn(move || {
            for l in BufReader::new(out).lines() {
                match l {
                    Ok(l) => {
                        if t.send(Ev::Line(rank, l)).is_err() {
                            return;
                        }
                    }
                    Err(_) => break,
                }
            }
            let _ = t.send(Ev::Eof(rank));
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let se = stderr.clone();
        let (done_tx, stderr_done) = channel();
        thread::spawn(move || {
            let mut r = BufReader::new(err);
            let mut buf = [0u8; 4096];
            loop {
                match r.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => se.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n])),
                }
            }
            let _ = done_tx.send(());
        });
        procs.push(Proc {
            child,
            stdin,
            stderr,
            stderr_done,
            eof: false,
            killed: false,
            status: None,
        });
    }
    drop(tx);

    let mut out = Outcome::default();
    let mut addrs: Vec<Option<String>> = vec![None; sc.nprocs];
    let mut verdict: Vec<Option<String>> = vec![None; sc.nprocs];
    let mut stray: Option<Stray> = None;
    let mut failure: Option<String> = None;
    let mut counts: HashMap<&'static str, u64> = HashMap::new();

    while procs.iter().any(|p| !p.eof) {
        let now = Instant::now();
        if now >= deadline {
            failure = Some(format!("hard time bound of {timeout:?} exceeded"));
            break;
        }
        let ev = match rx.recv_timeout(deadline - now) {
            Ok(ev) => ev,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => break,
        };
        match ev {
            Ev::Eof(r) => {
                procs[r].eof = true;
                if procs[r].killed {
                    continue;
                }
                match verdict[r].as_deref() {
                    Some("PASS") => {}
                    Some("SKIP") => {
                        // the others may be waiting for this one: stop them
                        for (i, p) in procs.iter_mut().enumerate() {
                            if i != r && !p.eof {
                                kill(p);
                                p.killed = true;
                            }
                        }
                    }
                    _ => {
                        failure = Some(format!("rank {r} failed or exited without a verdict"));
                        break;
                    }
                }
            }
            Ev::Line(r, l) => {
                let (cmd, rest) = l.split_once(' ').unwrap_or((l.as_str(), ""));
                match cmd {
                    "ADDR" => {
                        addrs[r] = Some(rest.to_string());
                        if addrs.iter().all(|a| a.is_some()) {
                            let all: Vec<String> = addrs.iter().map(|a| a.clone().unwrap()).collect();
                            let line = format!("ADDRS {}", all.join(" "));
                            for p in procs.iter_mut() {
                                write_line(p, &line);
                            }
                            out.addrs = all.clone();
                            if sc.stray_datagrams {
                                let t =
                                    sockaddr_in_from_hex(&all[0]).expect("stray datagrams need a sockaddr_in address");
                                eprintln!("[{label}] sending stray datagrams to {t}");
                                stray = Some(start_stray(t, sc.stray_rate));
                            }
                        }
                    }
                    "OOB" => {
                        let (dst, word) = rest.split_once(' ').unwrap_or((rest, ""));
                        let dst: usize = dst.parse().expect("OOB destination");
                        *counts.entry("oob").or_default() += 1;
                        write_line(&mut procs[dst], &format!("{r} {word}"));
                    }
                    "KILLME" => {
                        assert!(sc.may_be_killed.contains(&r), "rank {r} asked to be killed");
                        kill(&mut procs[r]);
                        procs[r].killed = true;
                        for (i, p) in procs.iter_mut().enumerate() {
                            if i != r {
                                write_line(p, "-1 killed");
                            }
                        }
                    }
                    "KILLPEER" => {
                        let v: usize = rest.trim().parse().expect("KILLPEER rank");
                        assert!(sc.may_be_killed.contains(&v), "rank {v} may not be killed");
                        kill(&mut procs[v]);
                        procs[v].killed = true;
                        write_line(&mut procs[r], "-1 killed");
                    }
                    "PASS" | "FAILED" => verdict[r] = Some(cmd.to_string()),
                    "SKIP" => {
                        verdict[r] = Some("SKIP".into());
                        out.skipped.get_or_insert(rest.to_string());
                    }
                    "DEVIATION" => {
                        if !out.deviations.iter().any(|d| d == rest) {
                            out.deviations.push(rest.to_string())
                        }
                    }
                    "INFO" => out.info.push(format!("rank {r}: {rest}")),
                    _ => out.info.push(format!("rank {r} says: {l}")),
                }
            }
        }
    }
    if let Some(mut s) = stray.take() {
        s.stop.store(true, Ordering::Relaxed);
        let n = s.handle.take().unwrap().join().unwrap_or(0);
        out.info.push(format!("{n} stray datagrams sent"));
    }
    // reap
    for p in procs.iter_mut() {
        if failure.is_some() {
            kill(p);
            continue;
        }
        while p.status.is_none() {
            match p.child.try_wait() {
                Ok(Some(s)) => p.status = Some(s),
                Ok(None) => {
                    if Instant::now() >= deadline {
                        failure = Some(format!("hard time bound of {timeout:?} exceeded (exit)"));
                        kill(p);
                    } else {
                        thread::sleep(Duration::from_millis(5)); // reaping, not synchronisation
                    }
                }
                Err(e) => panic!("wait: {e}"),
            }
        }
    }
    if failure.is_some() {
        for p in procs.iter_mut() {
            kill(p);
        }
    }
    // Every client has exited: its stderr pipe reaches end of file as soon
    // as the reader has drained it (bounded, in case a grandchild kept it).
    for p in &procs {
        let _ = p.stderr_done.recv_timeout(
            deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_secs(1)),
        );
    }
    out.elapsed = start.elapsed();
    out.stderr = procs.iter().map(|p| p.stderr.lock().unwrap().clone()).collect();
    // shm mailboxes: a killed rank leaves its own behind (removed here, as
    // the next process at that address would); one that exited normally
    // must have removed its own when it closed its endpoint.
    for (i, p) in procs.iter().enumerate() {
        for f in mailboxes_of(p.child.id()) {
            let _ = std::fs::remove_file(&f);
            if !p.killed && failure.is_none() && verdict[i].as_deref() == Some("PASS") {
                failure = Some(format!("rank {i} left its shm mailbox {} behind", f.display()));
            }
        }
    }
    if failure.is_none() && out.skipped.is_none() {
        for (i, p) in procs.iter().enumerate() {
            if p.killed {
                continue;
            }
            let ok = p.status.map(|s| s.success()).unwrap_or(false);
            if !ok || verdict[i].as_deref() != Some("PASS") {
                failure = Some(format!("rank {i}: status {:?}, verdict {:?}", p.status, verdict[i]));
                break;
            }
        }
    }
    if std::env::var("GNIX_TEST_SHOW_STDERR").is_ok_and(|v| v == "1") {
        eprintln!("[{label}] clients' stderr:\n{}", dump(&procs));
    }
    if let Some(f) = failure {
        panic!(
            "[{label}] FAILED after {:?}: {f}\n{}\ninfo: {:#?}\ndeviations: {:#?}",
            out.elapsed,
            dump(&procs),
            out.info,
            out.deviations
        );
    }
    out
}

/// The owner pid written in gnix shm mailbox file `p`, if the file is of
/// this pid namespace. The header's word at 72 names its owner's
/// namespace (the inode of `/proc/self/ns/pid`; 0 in files made before
/// it was written): a mailbox of another namespace (fabtests under
/// `runfabtests.sh`'s `unshare --pid`, a container) has a pid that names
/// some other process here, or none, and is not ours to judge.
fn mailbox_owner(p: &Path) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    const PID_OFF: usize = 24;
    const PID_NS_OFF: usize = 72;
    let mut h = [0u8; PID_NS_OFF + 8];
    std::fs::File::open(p).and_then(|mut f| f.read_exact(&mut h)).ok()?;
    let ns = u64::from_le_bytes(h[PID_NS_OFF..].try_into().unwrap());
    let ours = std::fs::metadata("/proc/self/ns/pid").map_or(0, |m| m.ino());
    if ns != 0 && ours != 0 && ns != ours {
        return None;
    }
    Some(u32::from_le_bytes(h[PID_OFF..PID_OFF + 4].try_into().unwrap()))
}

/// gnix shm mailbox files (`/dev/shm/gnix-*`) of this pid namespace,
/// each with its owner's pid (`mailbox_owner`).
pub fn mailboxes() -> Vec<(PathBuf, u32)> {
    let Ok(dir) = std::fs::read_dir("/dev/shm") else {
        return Vec::new();
    };
    dir.flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("gnix-")))
        .filter_map(|p| mailbox_owner(&p).map(|pid| (p, pid)))
        .collect()
}

/// gnix shm mailbox files (`/dev/shm/gnix-*`) owned by process `pid`.
pub fn mailboxes_of(pid: u32) -> Vec<PathBuf> {
    mailboxes().into_iter().filter(|m| m.1 == pid).map(|m| m.0).collect()
}

/// Run a single-process scenario.
pub fn single(name: &str) -> Outcome {
    Scenario::new(name, 1).timeout(30).run()
}

/// Run a two-process scenario with an optional argument.
pub fn pair(name: &str, arg: Option<&str>) -> Outcome {
    let mut s = Scenario::new(name, 2);
    if let Some(a) = arg {
        s = s.arg(a);
    }
    s.run()
}

/// Two "hosts" on this machine: network namespaces joined by a veth pair,
/// 10.212.0.1/24 (A) and 10.212.0.2/24 (B). Names are unique per test
/// process and instance; everything (namespaces, the veth pair, iptables
/// rules inside them) is deleted on drop, also when a test panics.
/// Namespaces left behind by a test process that was killed are removed by
/// the next `TwoHosts::new` (their names carry the dead process's pid).
pub struct TwoHosts {
    pub ns: [String; 2],
    pub veth: [String; 2],
    pub ip: [&'static str; 2],
}

const NS_PREFIX: &str = "gnixt";

fn ip_cmd(args: &[&str]) -> Result<String, String> {
    let o = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("ip {}: {e}", args.join(" ")))?;
    if o.status.success() {
        Ok(String::from_utf8_lossy(&o.stdout).into_owned())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&o.stderr).trim()
        ))
    }
}

/// Run a command inside namespace `ns`; Err(stderr) on failure.
pub fn netns_exec(ns: &str, args: &[&str]) -> Result<String, String> {
    let mut v = vec!["netns", "exec", ns];
    v.extend_from_slice(args);
    ip_cmd(&v)
}

/// `Ok` where this process can make network namespaces: it is root and
/// `ip netns` works.
pub fn netns_support() -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("two-host tests need root (ip netns, veth, iptables)".into());
    }
    ip_cmd(&["netns", "list"])
        .map(|_| ())
        .map_err(|e| format!("`ip netns` does not work ({e}); Debian package iproute2"))
}

fn sweep_stale_netns() {
    let Ok(list) = ip_cmd(&["netns", "list"]) else {
        return;
    };
    for line in list.lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let Some(rest) = name.strip_prefix(NS_PREFIX) else {
            continue;
        };
        let pid: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
        if let Ok(pid) = pid.parse::<u32>() {
            if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
                let _ = ip_cmd(&["netns", "del", name]);
            }
        }
    }
}

impl TwoHosts {
    /// None where namespaces cannot be made (not root, no `ip`, no netns
    /// support): `require` said so (under CI it failed the test instead) and
    /// the caller returns.
    pub fn new(what: &str) -> Option<TwoHosts> {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        if !require(what, netns_support()) {
            return None;
        }
        sweep_stale_netns();
        let n = N.fetch_add(1, Ordering::Relaxed);
        let tag = format!("{NS_PREFIX}{}x{n}", std::process::id());
        // veth names live inside the namespaces (created there directly),
        // so they need not be unique on the machine; ≤ 15 characters.
        let h = TwoHosts {
            ns: [format!("{tag}a"), format!("{tag}b")],
            veth: ["gtveth0".into(), "gtveth1".into()],
            ip: ["10.212.0.1", "10.212.0.2"],
        };
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<String>>();
        let (ns, veth) = (&h.ns, &h.veth);
        let mut steps = vec![
            s(&["netns", "add", &ns[0]]),
            s(&["netns", "add", &ns[1]]),
            s(&[
                "link", "add", &veth[0], "netns", &ns[0], "type", "veth", "peer", "name", &veth[1], "netns", &ns[1],
            ]),
        ];
        for i in 0..2 {
            let cidr = format!("{}/24", h.ip[i]);
            steps.push(s(&["-n", &ns[i], "addr", "add", &cidr, "dev", &veth[i]]));
            steps.push(s(&["-n", &ns[i], "link", "set", "lo", "up"]));
            steps.push(s(&["-n", &ns[i], "link", "set", &veth[i], "up"]));
        }
        for st in &steps {
            let args: Vec<&str> = st.iter().map(String::as_str).collect();
            if let Err(e) = ip_cmd(&args) {
                drop(h);
                if args[0] == "netns" && args[1] == "add" {
                    require(what, Err(format!("cannot create a network namespace ({e})")));
                    return None;
                }
                panic!("two-host setup failed: {e}");
            }
        }
        // Wait until both ends report carrier (bounded): the state is real,
        // there is nothing else to wait on.
        let deadline = Instant::now() + Duration::from_secs(10);
        for i in 0..2 {
            loop {
                let out = ip_cmd(&["-n", &h.ns[i], "-o", "link", "show", &h.veth[i]]).unwrap_or_default();
                if out.contains("LOWER_UP") {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "veth {} in {} never came up: {out}",
                    h.veth[i],
                    h.ns[i]
                );
                thread::sleep(Duration::from_millis(5)); // polling a state, not synchronising
            }
        }
        eprintln!(
            "[{what}] hosts {} ({} on {}) <-veth-> {} ({} on {})",
            h.ns[0], h.ip[0], h.veth[0], h.ns[1], h.ip[1], h.veth[1]
        );
        Some(h)
    }

    /// Random loss of `pct` % of the packets host `side` receives: a DROP
    /// rule on its INPUT chain (netem is not available; a DROP on OUTPUT
    /// makes sendmsg fail instead of losing). Returns why not where
    /// iptables or its statistic match is unavailable.
    pub fn input_loss(&self, side: usize, pct: f64) -> Result<(), String> {
        if pct <= 0.0 {
            return Ok(());
        }
        let p = format!("{:.4}", pct / 100.0);
        netns_exec(
            &self.ns[side],
            &[
                "iptables",
                "-w",
                "-A",
                "INPUT",
                "-m",
                "statistic",
                "--mode",
                "random",
                "--probability",
                &p,
                "-j",
                "DROP",
            ],
        )
        .map(|_| ())
        .map_err(|e| format!("cannot install the iptables loss rule ({e}); Debian package iptables"))
    }

    /// Packets dropped by the loss rule of host `side` so far.
    pub fn dropped(&self, side: usize) -> Option<u64> {
        let out = netns_exec(&self.ns[side], &["iptables", "-w", "-L", "INPUT", "-v", "-n", "-x"]).ok()?;
        out.lines()
            .filter(|l| l.contains("DROP") && l.contains("statistic"))
            .filter_map(|l| l.split_whitespace().next()?.parse::<u64>().ok())
            .next()
    }
}

impl Drop for TwoHosts {
    fn drop(&mut self) {
        // Deleting a namespace takes its veth end (and so the pair) and its
        // iptables rules with it.
        for ns in &self.ns {
            let _ = ip_cmd(&["netns", "del", ns]);
        }
    }
}
