//! Scenarios that only gnix implements: peer-failure detection bounded by
//! FI_GNIX_PEER_TIMEOUT_MS, robustness against stray datagrams on its UDP
//! port, the FI_GNIX_SHM=0 (udp wire) path, and its FI_GNIX_* parameters.
//! With GNIX_TEST_PROVIDER set to another provider these skip (and say why).
mod common;
use common::{have_program, is_gnix, provider_env, require, skip_unless_gnix, Scenario};

/// Wires the gnix-only scenarios run over (FI_GNIX_SHM): udp, then shm.
const WIRES: &[&str] = &["0", "1"];

/// Peer process killed ("mid" transfer or while "idle"): the survivor's
/// operations complete in error within the FI_GNIX_PEER_TIMEOUT_MS bound.
/// The "-manual" modes shorten no timeout (see their test).
fn peer_fail(mode: &str) {
    for shm in WIRES {
        let mut sc = Scenario::new("peer_fail", 2)
            .arg(mode)
            .env("FI_GNIX_SHM", shm)
            .killable(0)
            .timeout(40);
        if !mode.ends_with("-manual") {
            sc = sc.env("FI_GNIX_PEER_TIMEOUT_MS", "2000");
        }
        sc.run();
    }
}

/// The target of large RMA reads or writes is killed with them in flight:
/// every one completes (the unfinished ones with an error) within the peer
/// timeout, on both wires.
#[test]
fn rma_target_killed_mid_transfer_gives_error_completions() {
    if skip_unless_gnix("rma_target_killed") {
        return;
    }
    for shm in WIRES {
        for what in ["read", "write"] {
            Scenario::new("rma_peer_killed", 2)
                .arg(what)
                .env("FI_GNIX_PEER_TIMEOUT_MS", "2000")
                .env("FI_GNIX_SHM", shm)
                .killable(0)
                .timeout(40)
                .run();
        }
    }
}

#[test]
fn peer_killed_mid_transfer_gives_error_completions() {
    if skip_unless_gnix("peer_killed_mid_transfer") {
        return;
    }
    peer_fail("mid");
}

#[test]
fn peer_killed_while_idle_then_sent_to() {
    if skip_unless_gnix("peer_killed_while_idle") {
        return;
    }
    peer_fail("idle");
}

/// The same under FI_PROGRESS_MANUAL, no timeout shortened: there the
/// udp wire waits 15 minutes of silence before it calls a peer dead
/// (FI_GNIX_MANUAL_PEER_TIMEOUT_MS), so the errors come within the
/// scenario's 10 s only because the dead peer's host refuses our
/// datagrams (ICMP port unreachable, nic/udp/errqueue.rs).
#[test]
fn peer_killed_under_manual_progress_is_known_from_its_closed_port() {
    if skip_unless_gnix("peer_killed_under_manual_progress") {
        return;
    }
    for mode in ["mid-manual", "idle-manual"] {
        peer_fail(mode);
    }
}

/// Both ranks of a ping-pong on one CPU: the rank that waits polls its
/// CQ while the other waits behind it for the CPU, until the poller gives
/// it away (`progress::Spin`, FI_GNIX_YIELD_AFTER_US), which each CQ says
/// at its close; with the yield turned off, none says it (and the
/// scenario still passes, a time slice a wait).
#[test]
fn a_rank_that_waits_for_a_peer_on_its_own_cpu_yields_to_it() {
    if skip_unless_gnix("yield to a peer on the same CPU") {
        return;
    }
    let yields = |log: &str| -> u64 {
        log.lines()
            .filter_map(|l| l.split("gave the CPU away ").nth(1))
            .filter_map(|t| t.split_whitespace().next()?.parse::<u64>().ok())
            .sum()
    };
    for shm in WIRES {
        for (after, want) in [("50", true), ("0", false)] {
            let out = Scenario::new("pingpong", 2)
                .arg("auto")
                .env("FI_GNIX_SHM", shm)
                .env("FI_GNIX_YIELD_AFTER_US", after)
                .env("FI_LOG_LEVEL", "info")
                .env("FI_LOG_PROV", "gnix")
                .one_cpu(0)
                .timeout(60)
                .run();
            let n: u64 = out.stderr.iter().map(|l| yields(l)).sum();
            eprintln!(
                "FI_GNIX_SHM={shm} FI_GNIX_YIELD_AFTER_US={after}: {n} yields, {:?}",
                out.elapsed
            );
            assert_eq!(
                n > 0,
                want,
                "FI_GNIX_SHM={shm} FI_GNIX_YIELD_AFTER_US={after}: {n} yields"
            );
        }
    }
}

#[test]
fn stray_datagrams_during_transfer() {
    if skip_unless_gnix("stray_datagrams") {
        return;
    }
    for shm in WIRES {
        Scenario::new("ordering", 2)
            .arg("120")
            .env("FI_GNIX_SHM", shm)
            .stray()
            .timeout(90)
            .run();
    }
}

#[test]
fn udp_wire_core_scenarios() {
    if skip_unless_gnix("udp_wire (FI_GNIX_SHM=0)") {
        return;
    }
    for (s, a) in [
        ("msg_ops", None),
        ("tagged_ops", None),
        ("trunc", None),
        ("unexpected", None),
        ("zero_len", None),
        ("peek", None),
        ("large", Some("64")),
    ] {
        let mut sc = Scenario::new(s, 2).env("FI_GNIX_SHM", "0");
        if let Some(a) = a {
            sc = sc.arg(a);
        }
        sc.run();
    }
    Scenario::new("directed", 3).env("FI_GNIX_SHM", "0").run();
}

/// A peer on the udp wire gets through to an endpoint that a local peer
/// floods over shm (`UdpTurn` in nic/port.rs): rank 2 runs with
/// FI_GNIX_SHM=0, so rank 0 hears it on its socket only.
#[test]
fn udp_peer_gets_through_a_shm_flood() {
    if skip_unless_gnix("wire_mix (shm and udp peers at once)") {
        return;
    }
    Scenario::new("wire_mix", 3)
        .rank_env(2, "FI_GNIX_SHM", "0")
        .timeout(60)
        .run();
}

/// fi_open_ops(FI_GNIX_DOMAIN_OPS_1): get/set of every value, refusals,
/// and messages either side of a threshold set that way, on each wire.
#[test]
fn domain_ops_extension() {
    if skip_unless_gnix("fi_open_ops") {
        return;
    }
    for shm in WIRES {
        Scenario::new("open_ops", 1).env("FI_GNIX_SHM", shm).timeout(30).run();
    }
}

#[test]
fn fi_info_lists_gnix_parameters() {
    if skip_unless_gnix("fi_info -e") {
        return;
    }
    assert!(is_gnix());
    let mut cmd = std::process::Command::new("fi_info");
    cmd.arg("-e");
    for (k, v) in provider_env() {
        cmd.env(k, v);
    }
    if !require("fi_info -e", have_program("fi_info", "libfabric-bin")) {
        return;
    }
    let out = cmd.output().expect("run fi_info -e");
    assert!(out.status.success(), "fi_info -e: {}", out.status);
    let text = String::from_utf8_lossy(&out.stdout);
    for var in [
        "FI_GNIX_PEER_TIMEOUT_MS",
        "FI_GNIX_RNDV_THRESHOLD",
        "FI_GNIX_RNDV_PUSH",
        "FI_GNIX_MAX_RETRANS",
    ] {
        assert!(text.contains(var), "fi_info -e does not list {var}:\n{text}");
    }
}

/// A number on the closing endpoint's log lines (one per wire): `field: N`
/// after `after` (field names repeat across the wires: `sent` is in both
/// EngineStats and ShmStats).
fn closing_stat(log: &str, after: &str, field: &str) -> Option<u64> {
    // One line per wire: the first that has the field.
    log.lines().filter(|l| l.contains("closing:")).find_map(|line| {
        let rest = &line[line.find(after)?..];
        let v = rest.split(&format!("{field}: ")).nth(1)?;
        v.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
    })
}

/// What the shm wire carried: `ShmStats { sent, received, pulled, pushed,
/// .. }`, or `None` without shm.
fn shm_stat(log: &str, field: &str) -> Option<u64> {
    closing_stat(log, "ShmStats", field)
}

/// Each wire is the one that carries the data: shm pulls large messages
/// with cross-memory attach, the copy fallback pushes them through the
/// mailbox, FI_GNIX_SHM=0 leaves shm out entirely.
#[test]
fn wire_selection_shows_in_counters() {
    if skip_unless_gnix("wire selection") {
        return;
    }
    for (wire, shm, cma) in [("shm", "1", "1"), ("copy", "1", "0"), ("udp", "0", "1")] {
        let out = Scenario::new("large", 2)
            .arg("16")
            .env("FI_GNIX_SHM", shm)
            .env("FI_GNIX_CMA", cma)
            .env("FI_LOG_LEVEL", "info")
            .env("FI_LOG_PROV", "gnix")
            .run();
        for (rank, log) in out.stderr.iter().enumerate() {
            let (sent, pulled, pushed) = (shm_stat(log, "sent"), shm_stat(log, "pulled"), shm_stat(log, "pushed"));
            let what = format!("{wire} wire, rank {rank}: sent {sent:?} pulled {pulled:?} pushed {pushed:?}");
            match wire {
                "shm" => assert!(
                    log.contains("shm wire") && pulled > Some(0) && pushed == Some(0),
                    "{what}"
                ),
                "copy" => assert!(pulled == Some(0) && pushed > Some(0), "{what}"),
                _ => assert!(sent.is_none() && !log.contains("shm wire"), "{what}"),
            }
        }
    }
    // Over udp each rank gave its peer a connected socket, unless told not to.
    for (connect, want) in [("16", 1), ("0", 0)] {
        let out = Scenario::new("tagged_ops", 2)
            .env("FI_GNIX_SHM", "0")
            .env("FI_GNIX_UDP_CONNECT", connect)
            .env("FI_LOG_LEVEL", "info")
            .env("FI_LOG_PROV", "gnix")
            .run();
        for (rank, log) in out.stderr.iter().enumerate() {
            let n = closing_stat(log, "closing:", "connected_sockets");
            assert_eq!(n, Some(want), "FI_GNIX_UDP_CONNECT={connect}, rank {rank}:\n{log}");
        }
    }
    // A receiver asleep in fi_cq_sread is woken by its sender's doorbell.
    let out = Scenario::new("cq_sread", 2)
        .arg("fd")
        .env("FI_GNIX_SHM", "1")
        .env("FI_LOG_LEVEL", "info")
        .env("FI_LOG_PROV", "gnix")
        .run();
    let bells = shm_stat(&out.stderr[1], "doorbells");
    assert!(bells > Some(0), "sender rang no doorbell: {bells:?}\n{}", out.stderr[1]);
}

/// Whether something listens on TCP `port` (fi_pingpong's control port).
fn tcp_listening(port: u16) -> bool {
    let want = format!(":{port:04X} ");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f).unwrap_or_default().lines().any(|l| {
            l.split_whitespace()
                .nth(1)
                .is_some_and(|a| format!("{a} ").ends_with(&want))
                && l.split_whitespace().nth(3) == Some("0A")
        })
    })
}

/// `fi_pingpong -e rdm -S all -c` between two local processes, msg and
/// tagged, on each wire: passes (every size up to 8 MiB, data checked),
/// and the closing log line shows which wire carried it.
#[test]
fn fi_pingpong_runs_on_both_wires() {
    use std::process::Command;
    use std::time::{Duration, Instant};
    if skip_unless_gnix("fi_pingpong") {
        return;
    }
    if !require("fi_pingpong", have_program("fi_pingpong", "libfabric-bin")) {
        return;
    }
    for (wire, shm) in [("shm", "1"), ("udp", "0")] {
        for (i, mode) in ["msg", "tagged"].into_iter().enumerate() {
            let port = 20000 + (std::process::id() % 20000) as u16 + i as u16 + if shm == "0" { 2 } else { 0 };
            let run = |server: bool| {
                let mut c = Command::new("fi_pingpong");
                c.args(["-p", "gnix", "-e", "rdm", "-m", mode, "-S", "all", "-c"]);
                if server {
                    c.args(["-B", &port.to_string()]);
                } else {
                    c.args(["-P", &port.to_string(), "127.0.0.1"]);
                }
                for (k, v) in provider_env() {
                    c.env(k, v);
                }
                c.env("FI_LOG_LEVEL", "info")
                    .env("FI_LOG_PROV", "gnix")
                    .env("FI_GNIX_SHM", shm);
                Child::spawn(c)
            };
            let mut srv = run(true);
            let t0 = Instant::now();
            while !tcp_listening(port) {
                assert!(
                    t0.elapsed() < Duration::from_secs(20),
                    "fi_pingpong server never listened"
                );
                if let Some(s) = srv.exited() {
                    panic!("fi_pingpong server exited: {s}");
                }
                std::thread::sleep(Duration::from_millis(5)); // polling for a real condition
            }
            let cli = run(false);
            let deadline = Instant::now() + Duration::from_secs(60);
            for ch in [cli, srv] {
                let (status, out, err) = ch.finish(deadline);
                let what = format!("fi_pingpong -m {mode} on the {wire} wire");
                assert!(status.success(), "{what}: {status}\n{out}\n{err}");
                assert!(out.contains("8m"), "{what} did not reach 8m:\n{out}");
                let carried = match wire {
                    "shm" => err.contains("shm wire") && shm_stat(&err, "sent") > Some(0),
                    _ => !err.contains("shm wire") && closing_stat(&err, "closing:", "datagrams_out") > Some(0),
                };
                assert!(carried, "{what}: the log does not show that wire carrying it:\n{err}");
                if wire == "udp" {
                    // Every receive is posted before its message comes, so
                    // every pushed rendezvous segment lands.
                    let pushed = closing_stat(&err, "closing:", "rndv_pushed");
                    let dropped = closing_stat(&err, "closing:", "push_dropped");
                    assert!(
                        pushed > Some(0) && dropped == Some(0),
                        "{what}: pushed {pushed:?} dropped {dropped:?}"
                    );
                }
            }
        }
    }
}

/// A child process whose stdout and stderr are drained by threads as it
/// runs, so a chatty log cannot fill a pipe and stall it.
struct Child {
    child: std::process::Child,
    out: std::thread::JoinHandle<String>,
    err: std::thread::JoinHandle<String>,
}

impl Child {
    fn spawn(mut c: std::process::Command) -> Child {
        use std::io::Read;
        use std::process::Stdio;
        c.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = c.spawn().unwrap_or_else(|e| panic!("spawn {c:?}: {e}"));
        let drain = |mut r: Box<dyn Read + Send>| {
            std::thread::spawn(move || {
                let mut s = Vec::new();
                let _ = r.read_to_end(&mut s);
                String::from_utf8_lossy(&s).into_owned()
            })
        };
        let out = drain(Box::new(child.stdout.take().expect("piped stdout")));
        let err = drain(Box::new(child.stderr.take().expect("piped stderr")));
        Child { child, out, err }
    }

    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().expect("try_wait")
    }

    /// Waits for the exit (killed at `deadline`), then for all its output.
    fn finish(mut self, deadline: std::time::Instant) -> (std::process::ExitStatus, String, String) {
        let status = loop {
            if let Some(s) = self.exited() {
                break s;
            }
            if std::time::Instant::now() > deadline {
                let _ = self.child.kill();
            }
            std::thread::sleep(std::time::Duration::from_millis(5)); // reaping
        };
        (
            status,
            self.out.join().unwrap_or_default(),
            self.err.join().unwrap_or_default(),
        )
    }
}

/// Milliseconds the two directions of a `large` scenario took (its INFO lines).
fn large_ms(out: &common::Outcome) -> u64 {
    out.info
        .iter()
        .filter_map(|l| l.split(" in ").nth(1)?.strip_suffix(" ms")?.parse::<u64>().ok())
        .sum()
}

/// A flood of junk datagrams at the receiver's port (20,000 per second, or
/// GNIX_TEST_FLOOD_PPS: random bytes, truncated and oversized datagrams,
/// well-formed gnix headers from an address that never connected; sent
/// from a pool made up front, so the flood's own CPU is small) while
/// 64 MiB move each way over the udp wire: every byte arrives intact and
/// every completion is right (the `large` scenario checks them).
///
/// How much the flood slows the transfer is a performance figure, not a
/// pass/fail property: the same transfer without the flood runs first and
/// both times are printed (visible with --nocapture), not compared.
#[test]
fn junk_flood_does_not_break_a_transfer() {
    if skip_unless_gnix("junk_flood") {
        return;
    }
    let pps: u32 = std::env::var("GNIX_TEST_FLOOD_PPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let run = |flood: bool| {
        let mut sc = Scenario::new("large", 2).arg("64").env("FI_GNIX_SHM", "0").timeout(90);
        if flood {
            sc = sc.stray_paced(pps);
        }
        let out = sc.run();
        (large_ms(&out), out.info)
    };
    let (quiet, _) = run(false);
    let (flooded, info) = run(true);
    let sent: u64 = info
        .iter()
        .find_map(|l| l.strip_suffix(" stray datagrams sent")?.parse().ok())
        .unwrap_or(0);
    eprintln!(
        "64 MiB each way over the udp wire: {quiet} ms quiet, {flooded} ms under a junk flood of {pps}/s \
         ({:.2}x; {sent} datagrams sent)",
        flooded as f64 / quiet.max(1) as f64,
    );
    assert!(sent > 0, "no junk was sent: the transfer was not flooded");
}
