//! MPI integration tests: the corpus of C programs in `tests/mpi/`, each
//! compiled with the MPI library's `mpicc` and run in every configuration
//! of the matrix below, next to a reference run of the same program over a
//! transport that is not gnix.  A reference failure is a bug in the program
//! (or an MPI library bug the program must avoid); a gnix failure with a
//! passing reference is a gnix bug.
//!
//! One test function per configuration runs every program in sequence and
//! fails at the end listing each failed program with its configuration,
//! the failing ranks (the programs' `FAIL rank N` / `TIMEOUT rank N in
//! phase P` lines) and the captured output.
//!
//! Configurations (gnix | reference):
//! * Open MPI 4.1 pml cm + mtl ofi, 2 and 4 ranks, gnix's shm wire
//!   (default) and udp wire (`FI_GNIX_SHM=0`) | the same over
//!   `tcp;ofi_rxm`, or ob1+vader where that breaks (see `CORPUS`).
//! * Open MPI across two "hosts" (network namespaces joined by a veth pair,
//!   `TwoHosts`), 2 ranks, mtl ofi over gnix on the veth | pml ob1 with
//!   btl self,tcp on the veth.
//! * MPICH (PyPI wheel) ch4:ofi, `MPIR_CVAR_NOLOCAL=1`, 2 and 4 ranks,
//!   `FI_PROVIDER=gnix` | `FI_PROVIDER=tcp` (the wheel's libfabric 2.x
//!   picks its native tcp RDM endpoint for that).
//! * MPICH across the two "hosts", 2 ranks (hydra's rsh launcher through
//!   `ip netns exec`), gnix on the veth | `FI_PROVIDER=tcp` on the veth.
//!
//! Every run has a hard timeout (`GNIX_MPI_TIMEOUT`, seconds, default 60)
//! that kills the whole process group; inside it every program's phase
//! watchdog (`GNIX_MPI_PHASE_SECS`, default 15, see `tests/mpi/common.h`)
//! makes a hung rank print its phase and the backtrace of each of its
//! threads, and exit.
//!
//! Environment:
//! * `GNIX_PROVIDER_DIR`: directory containing `libgnix-fi.so`; default: the
//!   `libgnix_fi.so` of this cargo profile, symlinked as
//!   `target/<profile>/fi-provider/libgnix-fi.so`.
//! * `GNIX_MPI_PROVIDER` (else `GNIX_TEST_PROVIDER`): run the gnix
//!   configurations over another libfabric provider instead (harness check).
//! * `GNIX_MPICH_BIN`: directory holding MPICH's `mpicc`, `mpiexec`,
//!   `mpichversion` (else an `mpichversion` on `PATH`).
//! * `GNIX_MPI_ONLY=name,name`: run only these programs.
//!
//! Missing Open MPI, MPICH or network namespaces: the test fails when
//! `CI=true` (CI installs everything) and otherwise prints `SKIPPED:` and
//! returns.
//!
//! Run one program by hand: see tests/README.md (the commands each run
//! prints on failure are complete).

mod common;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// MPI jobs busy-poll; running several at once on a 2-core machine only
/// produces timeouts.  Serialise them.
static SERIAL: Mutex<()> = Mutex::new(());

// ---------------------------------------------------------------- corpus

/// How the Open MPI reference run of a program is made.
#[derive(Clone, Copy, PartialEq, Debug)]
enum OmpiRef {
    /// pml cm + mtl ofi over tcp;ofi_rxm: the same MPI code path as gnix.
    Rxm,
    /// pml ob1 + btl self,vader: where mtl ofi over tcp;ofi_rxm breaks.
    Vader,
}

struct Prog {
    name: &'static str,
    args: &'static [&'static str],
    /// Rank counts the program supports.
    ranks: fn(u32) -> bool,
    ompi_ref: OmpiRef,
}

fn any(n: u32) -> bool {
    n >= 2
}
fn two(n: u32) -> bool {
    n == 2
}
fn even(n: u32) -> bool {
    n >= 2 && n.is_multiple_of(2)
}

/// The programs (tests/mpi/<name>.c).  Each checks its data, exits
/// non-zero on a mismatch and prints `PASS <name>` from rank 0.
#[rustfmt::skip]
const CORPUS: &[Prog] = &[
    Prog { name: "pingpong", args: &["-q"], ranks: two, ompi_ref: OmpiRef::Rxm },
    Prog { name: "allreduce", args: &[], ranks: any, ompi_ref: OmpiRef::Rxm },
    Prog { name: "iprobe", args: &[], ranks: any, ompi_ref: OmpiRef::Rxm },
    Prog { name: "zero", args: &[], ranks: any, ompi_ref: OmpiRef::Rxm },
    // p2p's truncation phase (a receive smaller than the message):
    // Open MPI mtl ofi over tcp;ofi_rxm returns MPI_ERR_INTERN to the
    // sender and then loses the next message of the pair (the receiver
    // hangs); ob1+vader, MPICH and gnix handle it.
    Prog { name: "p2p", args: &[], ranks: any, ompi_ref: OmpiRef::Vader },
    Prog { name: "probe", args: &[], ranks: any, ompi_ref: OmpiRef::Rxm },
    Prog { name: "datatypes", args: &[], ranks: any, ompi_ref: OmpiRef::Rxm },
    Prog { name: "comm", args: &[], ranks: any, ompi_ref: OmpiRef::Rxm },
    Prog { name: "coll", args: &[], ranks: any, ompi_ref: OmpiRef::Rxm },
    Prog { name: "nbc", args: &[], ranks: any, ompi_ref: OmpiRef::Rxm },
    Prog { name: "threads", args: &[], ranks: any, ompi_ref: OmpiRef::Rxm },
    Prog { name: "rma", args: &[], ranks: any, ompi_ref: OmpiRef::Rxm },
    // Dynamic processes: the peers' addresses reach the AV at run time,
    // after their first messages (MPI_Comm_spawn; connect/accept between
    // the halves of one job; two separate jobs: mpich_two_jobs_connect).
    Prog { name: "spawn", args: &[], ranks: any, ompi_ref: OmpiRef::Rxm },
    Prog { name: "connect", args: &[], ranks: even, ompi_ref: OmpiRef::Rxm },
];

fn selected(p: &Prog) -> bool {
    match std::env::var("GNIX_MPI_ONLY") {
        Ok(s) if !s.is_empty() => s.split(',').any(|n| n.trim() == p.name),
        _ => true,
    }
}

// ---------------------------------------------------------------- environment

/// A configuration that cannot run here: the one rule of the tests
/// (common::require): a failure in CI, which installs everything; a
/// visible SKIPPED line elsewhere.
fn cannot_run(what: &str, reason: &str) {
    common::require(what, Err(reason.to_string()));
}

fn which(cmd: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(cmd)).find(|p| p.is_file())
}

fn source_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join("mpi")
}

fn build_dir(flavour: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("mpi-{flavour}"));
    std::fs::create_dir_all(&d).expect("create build dir");
    d
}

/// Provider of the "gnix" configurations: gnix unless overridden.
fn provider() -> String {
    ["GNIX_MPI_PROVIDER", "GNIX_TEST_PROVIDER"]
        .iter()
        .filter_map(|v| std::env::var(v).ok())
        .find(|s| !s.is_empty())
        .unwrap_or_else(|| "gnix".to_string())
}

/// Directory to put in FI_PROVIDER_PATH, or None when testing a built-in
/// provider.
fn provider_dir() -> Option<PathBuf> {
    if provider() != "gnix" {
        return None;
    }
    if let Some(d) = std::env::var_os("GNIX_PROVIDER_DIR") {
        let d = PathBuf::from(d);
        assert!(
            d.join("libgnix-fi.so").exists(),
            "GNIX_PROVIDER_DIR={} has no libgnix-fi.so",
            d.display()
        );
        return Some(d);
    }
    Some(common::provider_dir())
}

fn phase_secs() -> String {
    std::env::var("GNIX_MPI_PHASE_SECS").unwrap_or_else(|_| "15".into())
}

fn timeout() -> Duration {
    let secs = std::env::var("GNIX_MPI_TIMEOUT")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60u64);
    Duration::from_secs(secs)
}

// ---------------------------------------------------------------- running

struct Outcome {
    status: Option<std::process::ExitStatus>,
    stdout: String,
    stderr: String,
    timed_out: bool,
    elapsed: Duration,
}

/// Run `cmd` in its own process group with a hard timeout; the whole group
/// (mpirun/mpiexec, daemons, ranks) is killed at the end either way.
fn run_with_timeout(mut cmd: Command, limit: Duration) -> Outcome {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    let pid = child.id();
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let t_out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let mut timed_out = false;
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break Some(st),
            Ok(None) => {}
            Err(e) => panic!("wait: {e}"),
        }
        if start.elapsed() > limit {
            timed_out = true;
            let _ = Command::new("kill").args(["-KILL", "--", &format!("-{pid}")]).status();
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20)); // polling a child, not synchronising
    };
    let elapsed = start.elapsed();
    // ranks could outlive mpirun in error cases: nothing of ours may keep
    // the pipes open
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{pid}")])
        .stderr(Stdio::null())
        .status();
    Outcome {
        status,
        stdout: t_out.join().unwrap_or_default(),
        stderr: t_err.join().unwrap_or_default(),
        timed_out,
        elapsed,
    }
}

/// Removes the gnix shm mailboxes (`/dev/shm/gnix-*`) of processes that no
/// longer exist: ranks killed by a timeout or an abort leave theirs. Not
/// those of another pid namespace (`common::mailboxes` leaves them out):
/// their owners may well live (fabtests under `unshare --pid` beside this
/// suite lost theirs to this sweep, `fi_ubertest` failing with
/// `FI_EHOSTUNREACH`).
fn sweep_dead_mailboxes() {
    for (p, pid) in common::mailboxes() {
        if pid != 0 && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_file(&p);
        }
    }
}

static COMPILED: Mutex<Option<HashMap<(String, String), PathBuf>>> = Mutex::new(None);

/// Compile tests/mpi/<name>.c with the given mpicc, once per test process.
fn compile(mpicc: &Path, flavour: &str, name: &str) -> Result<PathBuf, String> {
    let key = (flavour.to_string(), name.to_string());
    let mut cache = COMPILED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = cache.get_or_insert_with(HashMap::new).get(&key) {
        return Ok(p.clone());
    }
    let src = source_dir().join(format!("{name}.c"));
    let exe = build_dir(flavour).join(name);
    let mut cmd = Command::new(mpicc);
    cmd.args(["-O2", "-g", "-Wall", "-o"])
        .arg(&exe)
        .arg(&src)
        .arg(format!("-I{}", source_dir().display()))
        .arg("-lpthread");
    let out = run_with_timeout(cmd, Duration::from_secs(120));
    if !out.status.map(|s| s.success()).unwrap_or(false) {
        return Err(format!(
            "{} failed to compile {}:\n{}{}",
            mpicc.display(),
            src.display(),
            out.stdout,
            out.stderr
        ));
    }
    cache.as_mut().unwrap().insert(key, exe.clone());
    Ok(exe)
}

#[derive(PartialEq)]
enum Verdict {
    Pass,
    /// The program said `SKIP <name>:` (a feature the library lacks).
    Skip(String),
    Fail(String),
}

/// What a run's output says about which ranks failed and where.
fn key_lines(o: &Outcome) -> Vec<String> {
    const MARKS: &[&str] = &[
        "FAIL rank",
        "TIMEOUT rank",
        "Segmentation fault",
        "exited on signal",
        "BAD TERMINATION",
        "Process name:",
        "Exit code:",
        "MPI_ABORT was invoked",
        "An error occurred in",
        "*** MPI_ERR_",
        "selected another provider",
        "SKIPPED phase",
    ];
    o.stdout
        .lines()
        .chain(o.stderr.lines())
        .filter(|l| MARKS.iter().any(|m| l.contains(m)))
        .map(|l| l.trim().to_string())
        .take(12)
        .collect()
}

fn verdict(o: &Outcome, name: &str) -> Verdict {
    if let Some(l) = o.stdout.lines().find(|l| l.starts_with(&format!("SKIP {name}:"))) {
        return Verdict::Skip(l.to_string());
    }
    let ok = o.status.map(|s| s.success()).unwrap_or(false);
    let pass = format!("PASS {name}");
    // Anywhere in a line: mpiexec forwards the output of ranks on two
    // hosts in pieces, and two ranks' lines can meet on one ("PASS
    // probecancel MPI_Send_init of 8 B ..." in MPICH's run across the
    // namespaces, CI of 2026-12-05). Each program's output is judged on
    // its own, and its exit status too.
    let said_pass = o.stdout.lines().any(|l| l.contains(&pass));
    if !o.timed_out && ok && said_pass {
        return Verdict::Pass;
    }
    let why = if o.timed_out {
        format!("TIMEOUT: killed after {:?}", o.elapsed)
    } else if !ok {
        format!("exit {:?}", o.status)
    } else {
        format!("no `PASS {name}` line")
    };
    Verdict::Fail(why)
}

fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// A configuration: how to build and launch the corpus.
struct Matrix<'a> {
    config: &'a str,
    np: u32,
    /// build directory and compile cache key: "ompi" or "mpich"
    flavour: &'a str,
    mpicc: &'a Path,
    /// only these programs (empty: all)
    only: &'a [&'a str],
    /// not these programs
    except: &'a [&'a str],
    /// builds the command running a program's executable
    launch: &'a dyn Fn(&Prog, &Path) -> Command,
    /// a further check of a run's output (None: fine)
    check: &'a dyn Fn(&Outcome) -> Option<String>,
}

fn no_check(_: &Outcome) -> Option<String> {
    None
}

/// Runs every applicable corpus program and fails listing every failed
/// program.
fn run_corpus(m: &Matrix) {
    let (config, np) = (m.config, m.np);
    let _guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let t0 = Instant::now();
    let mut failures = String::new();
    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    let wanted = |p: &&Prog| {
        (p.ranks)(np) && selected(p) && (m.only.is_empty() || m.only.contains(&p.name)) && !m.except.contains(&p.name)
    };
    for p in CORPUS.iter().filter(wanted) {
        let exe = match compile(m.mpicc, m.flavour, p.name) {
            Ok(e) => e,
            Err(e) => {
                failed += 1;
                let _ = writeln!(failures, "=== {} in {config}: {e}", p.name);
                continue;
            }
        };
        let cmd = (m.launch)(p, &exe);
        let shown = format!("{cmd:?}");
        let o = run_with_timeout(cmd, timeout());
        sweep_dead_mailboxes();
        let v = match (m.check)(&o) {
            Some(why) => Verdict::Fail(why),
            None => verdict(&o, p.name),
        };
        match v {
            Verdict::Pass => {
                passed += 1;
                let notes: Vec<String> = o
                    .stdout
                    .lines()
                    .filter(|l| l.starts_with("SKIPPED phase"))
                    .map(str::to_string)
                    .collect();
                eprintln!(
                    "[{config}] {:<10} pass    {:>6.1} s {}",
                    p.name,
                    o.elapsed.as_secs_f64(),
                    notes.join("; ")
                );
            }
            Verdict::Skip(l) => {
                skipped += 1;
                eprintln!("[{config}] {:<10} SKIPPED {l}", p.name);
                if common::in_ci() {
                    failed += 1;
                    let _ = writeln!(failures, "=== {} in {config}: skipped in CI: {l}", p.name);
                }
            }
            Verdict::Fail(why) => {
                failed += 1;
                let keys = key_lines(&o);
                eprintln!(
                    "[{config}] {:<10} FAIL    {:>6.1} s {why}: {}",
                    p.name,
                    o.elapsed.as_secs_f64(),
                    keys.first().map(String::as_str).unwrap_or("")
                );
                let _ = writeln!(
                    failures,
                    "\n=== {} in {config} ({np} ranks): {why}\n--- which ranks ---\n{}\n--- command ---\n{shown}\n\
                     --- stdout (tail) ---\n{}\n--- stderr (tail) ---\n{}",
                    p.name,
                    keys.join("\n"),
                    tail(&o.stdout, 20),
                    tail(&o.stderr, 40)
                );
            }
        }
    }
    eprintln!(
        "[{config}] {passed} passed, {failed} failed, {skipped} skipped in {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    if failed > 0 {
        panic!(
            "{config}: {failed} of {} programs failed:\n{failures}",
            passed + failed + skipped
        );
    }
}

// ---------------------------------------------------------------- Open MPI

fn ompi_tools(what: &str) -> Option<(PathBuf, PathBuf)> {
    match (which("mpicc"), which("mpirun")) {
        (Some(cc), Some(run)) => Some((cc, run)),
        _ => {
            cannot_run(what, "mpicc/mpirun (Open MPI) not found in PATH");
            None
        }
    }
}

/// The transport an Open MPI run uses.
#[derive(Clone, Copy, PartialEq)]
enum Ompi {
    /// pml cm + mtl ofi over the provider under test (gnix), on the given
    /// gnix wire ("shm" or "udp").
    GnixMtl(&'static str),
    /// The program's reference (`OmpiRef`).
    Reference,
    /// pml ob1 + btl self,tcp (the reference across hosts).
    Ob1Tcp,
}

fn ompi_base(mpirun: &Path, np: u32) -> Command {
    let mut cmd = Command::new(mpirun);
    cmd.args(["-np", &np.to_string()])
        .args(["--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]);
    cmd
}

/// Adds the transport, one-sided component and environment for `t`.
fn ompi_transport(cmd: &mut Command, p: &Prog, t: Ompi) {
    match t {
        Ompi::GnixMtl(wire) => {
            let prov = provider();
            cmd.args(["--mca", "pml", "cm", "--mca", "mtl", "ofi"])
                .args(["--mca", "mtl_ofi_provider_include", &prov]);
            if let Some(d) = provider_dir() {
                cmd.args(["-x", &format!("FI_PROVIDER_PATH={}", d.display())]);
                if wire == "udp" {
                    cmd.args(["-x", "FI_GNIX_SHM=0"]);
                }
            }
        }
        Ompi::Reference => match p.ompi_ref {
            OmpiRef::Rxm => {
                cmd.args(["--mca", "pml", "cm", "--mca", "mtl", "ofi"]).args([
                    "--mca",
                    "mtl_ofi_provider_include",
                    "tcp;ofi_rxm",
                ]);
            }
            OmpiRef::Vader => {
                cmd.args(["--mca", "pml", "ob1", "--mca", "btl", "self,vader"]);
            }
        },
        Ompi::Ob1Tcp => {
            cmd.args(["--mca", "pml", "ob1", "--mca", "btl", "self,tcp"]);
        }
    }
    // One-sided over the pml (mtl ofi has no osc of its own; osc rdma over
    // btl ofi has its own tests below).  The references use it too.
    cmd.args(["--mca", "osc", "pt2pt"]);
    cmd.args(["-x", &format!("GNIX_MPI_PHASE_SECS={}", phase_secs())]);
    for v in ["FI_LOG_LEVEL", "FI_LOG_PROV", "RUST_BACKTRACE", "GNIX_MPI_TRACE"] {
        if std::env::var_os(v).is_some() {
            cmd.args(["-x", v]);
        }
    }
}

fn ompi_matrix(config: &str, np: u32, t: Ompi) {
    let Some((mpicc, mpirun)) = ompi_tools(config) else {
        return;
    };
    run_corpus(&Matrix {
        config,
        np,
        flavour: "ompi",
        mpicc: &mpicc,
        only: &[],
        except: &[],
        launch: &|p, exe| {
            let mut cmd = ompi_base(&mpirun, np);
            ompi_transport(&mut cmd, p, t);
            cmd.arg(exe).args(p.args);
            cmd
        },
        check: &no_check,
    });
}

#[test]
fn ompi_mtl_gnix_shm_2ranks() {
    ompi_matrix("Open MPI mtl ofi, gnix shm wire, 2 ranks", 2, Ompi::GnixMtl("shm"));
}

#[test]
fn ompi_mtl_gnix_shm_4ranks() {
    ompi_matrix("Open MPI mtl ofi, gnix shm wire, 4 ranks", 4, Ompi::GnixMtl("shm"));
}

#[test]
fn ompi_mtl_gnix_udp_2ranks() {
    ompi_matrix("Open MPI mtl ofi, gnix udp wire, 2 ranks", 2, Ompi::GnixMtl("udp"));
}

#[test]
fn ompi_mtl_gnix_udp_4ranks() {
    ompi_matrix("Open MPI mtl ofi, gnix udp wire, 4 ranks", 4, Ompi::GnixMtl("udp"));
}

#[test]
fn ompi_reference_2ranks() {
    ompi_matrix("Open MPI reference, 2 ranks", 2, Ompi::Reference);
}

#[test]
fn ompi_reference_4ranks() {
    ompi_matrix("Open MPI reference, 4 ranks", 4, Ompi::Reference);
}

// ------------------------------------------------ Open MPI across two hosts

/// A directory of scripts for a job across the two namespaces of `h`
/// (`flavour`: one per MPI library): `iface.sh`, the wrapper every rank
/// runs through, which sets FI_GNIX_IFACE to the veth end of its
/// namespace (the two ends have different names, so it cannot be one
/// environment variable of the launcher).
fn hosts_dir(h: &common::TwoHosts, flavour: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{flavour}-hosts-{}", h.ns[0]));
    std::fs::create_dir_all(&dir).expect("hosts dir");
    write_script(
        &dir.join("iface.sh"),
        &format!(
            "#!/bin/sh\n# gnix on this namespace's end of the veth pair\nfor i in {} {}; do [ -e /sys/class/net/$i ] && export FI_GNIX_IFACE=$i; done\nexec \"$@\"\n",
            h.veth[0], h.veth[1]
        ),
    );
    dir
}

fn write_script(p: &Path, body: &str) {
    std::fs::write(p, body).expect("write script");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// Open MPI across the two namespaces of `h`: mpirun runs in host A (its
/// ranks are local to it), a hostfile names A as `localhost` and B as
/// `gnixhostb`, and an rsh agent script starts B's orted with
/// `ip netns exec`.  OOB and btl tcp are confined to the veth subnet; every
/// rank runs through a wrapper that sets FI_GNIX_IFACE to the veth end of
/// its namespace (the two ends have different names, so it cannot be one
/// `-x`).  `--map-by node` alternates ranks between the hosts.
struct OmpiHosts {
    ns_a: String,
    dir: PathBuf,
}

impl OmpiHosts {
    fn new(h: &common::TwoHosts) -> OmpiHosts {
        let dir = hosts_dir(h, "mpi");
        write_script(
            &dir.join("agent.sh"),
            &format!(
                "#!/bin/sh\n# rsh agent: the one remote host, gnixhostb, is namespace {ns}\nshift\nexec ip netns exec {ns} /bin/sh -c \"$*\"\n",
                ns = h.ns[1]
            ),
        );
        std::fs::write(dir.join("hostfile"), "localhost slots=2\ngnixhostb slots=2\n").expect("hostfile");
        OmpiHosts {
            ns_a: h.ns[0].clone(),
            dir,
        }
    }

    fn command(&self, mpirun: &Path, np: u32, p: &Prog, t: Ompi, exe: &Path) -> Command {
        let subnet = "10.212.0.0/24";
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.ns_a]).arg(mpirun);
        cmd.args(["-np", &np.to_string()])
            .args([
                "--allow-run-as-root",
                "--oversubscribe",
                "--bind-to",
                "none",
                "--map-by",
                "node",
            ])
            .arg("--hostfile")
            .arg(self.dir.join("hostfile"))
            .args(["--mca", "plm_rsh_agent"])
            .arg(self.dir.join("agent.sh"))
            .args([
                "--mca",
                "oob_tcp_if_include",
                subnet,
                "--mca",
                "btl_tcp_if_include",
                subnet,
            ]);
        ompi_transport(&mut cmd, p, t);
        cmd.arg(self.dir.join("iface.sh")).arg(exe).args(p.args);
        cmd
    }
}

fn ompi_hosts_matrix(config: &str, np: u32, t: Ompi) {
    let Some((mpicc, mpirun)) = ompi_tools(config) else {
        return;
    };
    // (TwoHosts::new applies the rule itself when there are no namespaces.)
    let Some(h) = common::TwoHosts::new(config) else {
        return;
    };
    let hosts = OmpiHosts::new(&h);
    run_corpus(&Matrix {
        config,
        np,
        flavour: "ompi",
        mpicc: &mpicc,
        only: &[],
        // Children started by MPI_Comm_spawn miss the per-host wrapper
        // (iface.sh, which names each namespace's interface) and fail in
        // MPI_Init, over Open MPI's own TCP as over gnix: a limit of this
        // harness, not of the transports.
        except: &["spawn"],
        launch: &|p, exe| hosts.command(&mpirun, np, p, t, exe),
        check: &no_check,
    });
}

#[test]
fn ompi_two_hosts_gnix_2ranks() {
    ompi_hosts_matrix(
        "Open MPI mtl ofi, gnix across two hosts (veth), 2 ranks",
        2,
        Ompi::GnixMtl("shm"),
    );
}

#[test]
fn ompi_two_hosts_reference_2ranks() {
    ompi_hosts_matrix("Open MPI ob1 btl tcp across two hosts (veth), 2 ranks", 2, Ompi::Ob1Tcp);
}

// ------------------------------------------------ Open MPI btl ofi

/// pml ob1 + btl ofi in the given btl_ofi_mode (v4.1.4
/// opal/mca/btl/ofi/btl_ofi.h): 0 one-sided (needs FI_RMA | FI_ATOMIC),
/// 1 two-sided (FI_MSG, tx op_flags FI_DELIVERY_COMPLETE), 2 both. `osc`:
/// MPI one-sided through osc rdma, which then puts, gets and updates
/// with the btl's fi_write, fi_read and fi_atomic (else the pml's osc
/// pt2pt would carry it as messages).
fn ompi_btl_ofi(mode: u32, np: u32, only: &[&str], osc_rdma: bool) {
    let what = format!(
        "Open MPI ob1 + btl ofi mode {mode}{}, {np} ranks",
        if osc_rdma { " + osc rdma" } else { "" }
    );
    let Some((mpicc, mpirun)) = ompi_tools(&what) else {
        return;
    };
    let prov = provider();
    run_corpus(&Matrix {
        config: &what,
        np,
        flavour: "ompi",
        mpicc: &mpicc,
        only,
        except: &[],
        launch: &|p, exe| {
            let mut cmd = ompi_base(&mpirun, np);
            cmd.args(["--mca", "pml", "ob1", "--mca", "btl", "self,ofi"])
                .args(["--mca", "btl_ofi_provider_include", &prov])
                .args(["--mca", "btl_ofi_mode", &mode.to_string()])
                .args(["-x", &format!("GNIX_MPI_PHASE_SECS={}", phase_secs())]);
            if osc_rdma {
                cmd.args(["--mca", "osc", "rdma"]);
            }
            if let Some(d) = provider_dir() {
                cmd.args(["-x", &format!("FI_PROVIDER_PATH={}", d.display())]);
            }
            cmd.arg(exe).args(p.args);
            cmd
        },
        check: &no_check,
    });
}

#[test]
fn ompi_btl_ofi_two_sided() {
    ompi_btl_ofi(1, 2, &["pingpong"], false);
}

/// MPI one-sided (fence, PSCW, lock/unlock, flush; put, get, accumulate,
/// fetch-and-op, compare-and-swap) through osc rdma over btl ofi in mode 2:
/// gnix's RMA and atomics. (Mode 0, one-sided only, leaves ob1 no btl to
/// send with: Open MPI 4.1.4 crashes in MPI_Send over libfabric's shm
/// too.) Reference: GNIX_TEST_PROVIDER=shm passes it.
#[test]
fn ompi_btl_ofi_osc_rdma_2ranks() {
    ompi_btl_ofi(2, 2, &["rma"], true);
}

#[test]
fn ompi_btl_ofi_osc_rdma_4ranks() {
    ompi_btl_ofi(2, 4, &["rma"], true);
}

// ---------------------------------------------------------------- MPICH

fn mpich_bin(what: &str) -> Option<PathBuf> {
    let dir = match std::env::var_os("GNIX_MPICH_BIN") {
        Some(d) => PathBuf::from(d),
        None => match which("mpichversion").and_then(|p| p.parent().map(Path::to_path_buf)) {
            Some(d) => d,
            None => {
                cannot_run(
                    what,
                    "MPICH not found (pip install mpich into a venv and set GNIX_MPICH_BIN=<venv>/bin, \
                     or activate the venv)",
                );
                return None;
            }
        },
    };
    for t in ["mpicc", "mpiexec", "mpichversion"] {
        if !dir.join(t).is_file() {
            cannot_run(what, &format!("{} has no {t}", dir.display()));
            return None;
        }
    }
    Some(dir)
}

/// MPICH ch4:ofi with every rank's traffic through libfabric
/// (MPIR_CVAR_NOLOCAL=1) over `prov`: gnix (FI_PROVIDER_PATH) or a
/// provider of the wheel's own libfabric (the reference: `tcp`). On one
/// host, or across the two namespaces of `hosts` (`MpichHosts`).
fn mpich_matrix(config: &str, np: u32, reference: bool, hosts: Option<&MpichHosts>) {
    let Some(bin) = mpich_bin(config) else { return };
    let prov = if reference { "tcp".to_string() } else { provider() };
    let dir = if reference { None } else { provider_dir() };
    // FI_PROVIDER takes core provider names: "udp;ofi_rxd" -> "udp"
    let core = prov.split(';').next().unwrap_or(&prov).to_string();
    let mpiexec = bin.join("mpiexec");
    let want = core.clone();
    // MPIR_CVAR_DEBUG_SUMMARY prints "libfabric provider: <name> - <fabric>"
    // ("tcp" may come back as "tcp;ofi_rxm")
    let check = move |o: &Outcome| -> Option<String> {
        let line = o
            .stdout
            .lines()
            .chain(o.stderr.lines())
            .find(|l| l.starts_with("libfabric provider:"))?;
        let name = line
            .trim_start_matches("libfabric provider:")
            .split(" - ")
            .next()
            .unwrap_or("")
            .trim();
        if !name.starts_with(want.as_str()) {
            return Some(format!("MPICH selected another provider: {line} (want {want})"));
        }
        // gnix offers FI_RMA and FI_ATOMIC: MPICH must use them for MPI
        // one-sided (its summary says so), not active messages.
        let out = format!("{}{}", o.stdout, o.stderr);
        (!reference && want == "gnix")
            .then(|| {
                ["MPIDI_OFI_ENABLE_RMA: 1", "MPIDI_OFI_ENABLE_ATOMICS: 1"]
                    .into_iter()
                    .find(|w| !out.contains(w))
                    .map(|w| format!("MPICH's capability summary lacks \"{w}\""))
            })
            .flatten()
    };
    run_corpus(&Matrix {
        config,
        np,
        flavour: "mpich",
        mpicc: &bin.join("mpicc"),
        only: &[],
        except: &[],
        launch: &|p, exe| {
            let mut cmd = match hosts {
                Some(h) => h.mpiexec(&mpiexec),
                None => Command::new(&mpiexec),
            };
            cmd.env("MPICH_CH4_NETMOD", "ofi")
                .env("MPIR_CVAR_NOLOCAL", "1")
                .env("MPIR_CVAR_DEBUG_SUMMARY", "1")
                .env("FI_PROVIDER", &core)
                .env("GNIX_MPI_PHASE_SECS", phase_secs());
            match &dir {
                Some(d) => cmd.env("FI_PROVIDER_PATH", d),
                None => cmd.env_remove("FI_PROVIDER_PATH"),
            };
            cmd.args(["-n", &np.to_string()]);
            if let Some(h) = hosts {
                cmd.arg(h.dir.join("iface.sh"));
            }
            cmd.arg(exe).args(p.args);
            cmd
        },
        check: &check,
    });
}

#[test]
fn mpich_gnix_2ranks() {
    mpich_matrix("MPICH ch4:ofi, gnix, 2 ranks", 2, false, None);
}

#[test]
fn mpich_gnix_4ranks() {
    mpich_matrix("MPICH ch4:ofi, gnix, 4 ranks", 4, false, None);
}

#[test]
fn mpich_reference_2ranks() {
    mpich_matrix("MPICH ch4:ofi reference (FI_PROVIDER=tcp), 2 ranks", 2, true, None);
}

#[test]
fn mpich_reference_4ranks() {
    mpich_matrix("MPICH ch4:ofi reference (FI_PROVIDER=tcp), 4 ranks", 4, true, None);
}

/// MPICH across the two namespaces of `h`: mpiexec runs in host A, its
/// ranks alternating between the hosts (`-hosts A,B`, one slot each), and
/// hydra's rsh launcher starts B's proxy through an agent that runs it
/// with `ip netns exec`. Hydra's control connections use A's veth end
/// (`-iface`); every rank runs through `iface.sh`.
struct MpichHosts {
    ns_a: String,
    iface_a: String,
    hosts: String,
    dir: PathBuf,
}

impl MpichHosts {
    fn new(h: &common::TwoHosts) -> MpichHosts {
        let dir = hosts_dir(h, "mpich");
        // Hydra calls the agent as `agent HOST COMMAND...`; A's proxy it
        // starts itself.
        write_script(
            &dir.join("agent.sh"),
            &format!(
                "#!/bin/sh\n# rsh agent: host {ip} is namespace {ns}\nhost=$1; shift\n\
                 [ \"$host\" = {ip} ] && exec ip netns exec {ns} /bin/sh -c \"$*\"\nexec /bin/sh -c \"$*\"\n",
                ip = h.ip[1],
                ns = h.ns[1]
            ),
        );
        MpichHosts {
            ns_a: h.ns[0].clone(),
            iface_a: h.veth[0].clone(),
            hosts: format!("{},{}", h.ip[0], h.ip[1]),
            dir,
        }
    }

    /// mpiexec in host A with the launcher's options; the caller adds
    /// `-n`, the wrapper and the program.
    fn mpiexec(&self, mpiexec: &Path) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.ns_a])
            .arg(mpiexec)
            .args(["-launcher", "rsh", "-launcher-exec"])
            .arg(self.dir.join("agent.sh"))
            .args(["-iface", &self.iface_a, "-hosts", &self.hosts]);
        cmd
    }
}

fn mpich_hosts_matrix(config: &str, reference: bool) {
    // (TwoHosts::new applies the rule itself when there are no namespaces.)
    if mpich_bin(config).is_none() {
        return;
    }
    let Some(h) = common::TwoHosts::new(config) else {
        return;
    };
    mpich_matrix(config, 2, reference, Some(&MpichHosts::new(&h)));
}

#[test]
fn mpich_two_hosts_gnix_2ranks() {
    mpich_hosts_matrix("MPICH ch4:ofi, gnix across two hosts (veth), 2 ranks", false);
}

#[test]
fn mpich_two_hosts_reference_2ranks() {
    mpich_hosts_matrix(
        "MPICH ch4:ofi reference (FI_PROVIDER=tcp) across two hosts (veth), 2 ranks",
        true,
    );
}

/// MPI_Comm_connect / MPI_Comm_accept between two separately started
/// MPICH jobs (the port name goes through a file): neither knows the
/// other's addresses until the connection brings them. 2 + 2 ranks, and
/// 1 + 3 (the accepting root then holds every address first).
fn mpich_two_jobs(reference: bool) {
    let what = if reference {
        "MPICH two jobs, connect/accept, reference (FI_PROVIDER=tcp)"
    } else {
        "MPICH two jobs, connect/accept, gnix"
    };
    let Some(bin) = mpich_bin(what) else { return };
    let prov = if reference { "tcp".to_string() } else { provider() };
    let core = prov.split(';').next().unwrap_or(&prov).to_string();
    let dir = if reference { None } else { provider_dir() };
    let _guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let exe = compile(&bin.join("mpicc"), "mpich", "connect").unwrap_or_else(|e| panic!("{what}: {e}"));
    for (na, nc) in [(2, 2), (1, 3)] {
        let port = build_dir("mpich").join(format!("port-{}-{na}-{nc}", std::process::id()));
        let _ = std::fs::remove_file(&port);
        let job = |role: &str, n: u32| {
            let mut cmd = Command::new(bin.join("mpiexec"));
            cmd.env("MPICH_CH4_NETMOD", "ofi")
                .env("MPIR_CVAR_NOLOCAL", "1")
                .env("FI_PROVIDER", &core)
                .env("GNIX_MPI_PHASE_SECS", phase_secs());
            match &dir {
                Some(d) => cmd.env("FI_PROVIDER_PATH", d),
                None => cmd.env_remove("FI_PROVIDER_PATH"),
            };
            cmd.args(["-n", &n.to_string()]).arg(&exe).arg(role).arg(&port);
            cmd
        };
        // Both at once: the connecting job waits (bounded) for the file.
        let acc = std::thread::spawn({
            let cmd = job("accept", na);
            move || run_with_timeout(cmd, timeout())
        });
        let con = run_with_timeout(job("connect", nc), timeout());
        let acc = acc.join().expect("accepting job's runner");
        sweep_dead_mailboxes();
        let _ = std::fs::remove_file(&port);
        for (side, o) in [("accepting", &acc), ("connecting", &con)] {
            if let Verdict::Fail(why) = verdict(o, "connect") {
                panic!(
                    "{what}, {na} + {nc} ranks: the {side} job failed: {why}\n--- stdout ---\n{}\n--- stderr ---\n{}",
                    tail(&o.stdout, 20),
                    tail(&o.stderr, 40)
                );
            }
        }
        eprintln!("[{what}] {na} + {nc} ranks pass");
    }
}

#[test]
fn mpich_two_jobs_connect_gnix() {
    mpich_two_jobs(false);
}

#[test]
fn mpich_two_jobs_connect_reference() {
    mpich_two_jobs(true);
}
