//! Two hosts on one machine (DESIGN.md §8): rank 0 in one network
//! namespace, rank 1 in another, joined by a veth pair; the integration
//! scenarios run across it at 0 %, 1 % and 10 % random loss on the INPUT
//! chain of rank 0's host (rank 0 is the receiver of the pair scenarios).
//! The clients check every byte and every completion as on loopback.
//! They need root, `ip netns` and iptables (`common::require`): where those
//! are missing they fail under CI (CI=true) and print `SKIPPED` elsewhere.
mod common;
use common::{require, skip_unless_gnix, Scenario, TwoHosts};
use std::time::Instant;

/// Scenarios run across the pair, with their argument and hard bound (s):
/// msg/tagged eager and rendezvous with every send/recv variant (msg_ops,
/// tagged_ops), unexpected eager and rendezvous messages, ordering of mixed
/// sizes up to 4 MiB, multi-recv, truncation of a rendezvous message,
/// peek/claim/discard, zero-length messages and directed receives with
/// three processes (rank 0 alone in host A, ranks 1 and 2 in host B);
/// after them, peer failure (`peer_fail_across`) where loss allows.
const SCENARIOS: &[(&str, usize, Option<&str>, u64)] = &[
    ("msg_ops", 2, None, 30),
    ("tagged_ops", 2, None, 30),
    ("unexpected", 2, None, 30),
    ("ordering", 2, Some("60"), 60),
    ("multi_recv", 2, None, 30),
    ("trunc", 2, Some("large"), 30),
    ("peek", 2, None, 30),
    ("zero_len", 2, None, 30),
    ("directed", 3, None, 30),
];

/// Runs SCENARIOS, then one `large_mib` MiB message each way. A large
/// transfer's time grows steeply with loss, and the udp wire moves only
/// ~100-200 MB/s across the veth today (1 GiB each way took 20 s idle, 80 s
/// next to a build), so the runs move 256 MiB without loss, less with it;
/// `tests/large.rs` moves 1 GiB each way on loopback.
fn across(what: &str, loss_pct: f64, large_mib: u32) {
    if skip_unless_gnix(what) {
        return;
    }
    let Some(h) = TwoHosts::new(what) else { return };
    if !require(what, h.input_loss(0, loss_pct)) {
        return;
    }
    let t0 = Instant::now();
    let large = large_mib.to_string();
    let all = SCENARIOS
        .iter()
        .copied()
        .chain([("large", 2, Some(large.as_str()), 150)]);
    for (name, nprocs, arg, secs) in all {
        let mut sc = Scenario::new(name, nprocs).across(&h).timeout(secs);
        if let Some(a) = arg {
            sc = sc.arg(a);
        }
        let out = sc.run();
        eprintln!("[{what}] {name}: {:?}", out.elapsed);
    }
    let modes: &[&str] = match loss_pct {
        l if l <= 0.0 => &["mid", "idle", "mid-manual", "idle-manual"],
        l if l <= 1.0 => &["mid"],
        _ => &[],
    };
    peer_fail_across(&h, what, modes);
    let dropped = h.dropped(0);
    eprintln!(
        "[{what}] all scenarios in {:?}; the loss rule dropped {:?} packets",
        t0.elapsed(),
        dropped
    );
    if loss_pct > 0.0 {
        assert!(
            dropped.unwrap_or(0) > 0,
            "{loss_pct} % loss rule installed but nothing was dropped: the test did not test loss"
        );
    }
}

/// Peer failure across the hosts: the survivor's operations complete in
/// error within the FI_GNIX_PEER_TIMEOUT_MS bound when the peer dies
/// mid-transfer (and while idle). The scenario's 10 s bound counts from
/// the first send, so it includes one 8 MiB transfer: at 10 % loss that
/// alone took up to 8 s on this loaded VM, so the 10 % run leaves it out.
///
/// The "-manual" modes ask FI_PROGRESS_MANUAL and shorten no timeout
/// (under manual progress a peer is dead after 15 minutes of silence):
/// the errors come in time because the dead peer's host refuses our
/// datagrams (ICMP port unreachable across the veth).
fn peer_fail_across(h: &TwoHosts, what: &str, modes: &[&str]) {
    for &mode in modes {
        let mut sc = Scenario::new("peer_fail", 2)
            .arg(mode)
            .across(h)
            .killable(0)
            .timeout(40);
        if !mode.ends_with("-manual") {
            sc = sc.env("FI_GNIX_PEER_TIMEOUT_MS", "2000");
        }
        let out = sc.run();
        eprintln!("[{what}] peer_fail {mode}: {:?}", out.elapsed);
    }
}

#[test]
fn two_hosts_no_loss() {
    across("two_hosts_no_loss", 0.0, 256);
}

#[test]
fn two_hosts_1pct_loss() {
    across("two_hosts_1pct_loss", 1.0, 64);
}

#[test]
fn two_hosts_10pct_loss() {
    across("two_hosts_10pct_loss", 10.0, 16);
}

/// Datagrams larger than the link's MTU (`FI_GNIX_UDP_MTU=8972` over the
/// 1500-byte veth): the kernel refuses them as GSO runs (EMSGSIZE), so the
/// wire sends them one at a time and IP fragments them; the transfers
/// complete intact (they failed with the peer unreachable before).
#[test]
fn two_hosts_datagrams_above_the_link_mtu() {
    let what = "two_hosts_datagrams_above_the_link_mtu";
    if skip_unless_gnix(what) {
        return;
    }
    let Some(h) = TwoHosts::new(what) else { return };
    for (name, arg) in [("tagged_ops", None), ("large", Some("8"))] {
        let mut sc = Scenario::new(name, 2)
            .across(&h)
            .env("FI_GNIX_UDP_MTU", "8972")
            .timeout(60);
        if let Some(a) = arg {
            sc = sc.arg(a);
        }
        let out = sc.run();
        eprintln!("[{what}] {name}: {:?}", out.elapsed);
    }
}
