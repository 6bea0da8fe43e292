//! Incast: 16 sender processes, one receiver, eager messages, over the udp
//! wire (loopback, FI_GNIX_SHM=0). The receiver posts nothing until every
//! sender has posted all its sends (or been pushed back with -FI_EAGAIN),
//! then checks that each sender's sequence numbers arrive exactly once, in
//! order, with intact payloads (scenario `incast` in fitest_pair_progress.h), and
//! reports its resident memory.
mod common;
use common::{Outcome, Scenario};

const SENDERS: usize = 16;

struct Mem {
    offered_kb: i64,
    base_kb: i64,
    mid_kb: i64,
    hwm_kb: i64,
}

fn field(line: &str, key: &str) -> i64 {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('=')?.parse().ok())
        .unwrap_or_else(|| panic!("no {key}= in {line:?}"))
}

fn mem(out: &Outcome) -> Mem {
    let l = out
        .info
        .iter()
        .find(|l| l.starts_with("rank 0: incast "))
        .expect("the receiver reported no memory line");
    Mem {
        offered_kb: field(l, "offered_kb"),
        base_kb: field(l, "base_kb"),
        mid_kb: field(l, "mid_kb"),
        hwm_kb: field(l, "hwm_kb"),
    }
}

/// Runs the incast scenario and reports the receiver's memory.
fn run_incast(what: &str, sc: Scenario, msgs: u32, size: u32) -> Mem {
    let out = sc.arg(&format!("{msgs},{size}")).run();
    let m = mem(&out);
    eprintln!(
        "{what} {SENDERS} x {msgs} x {size} B: offered {} KiB; receiver VmRSS {} KiB after set-up, {} KiB once all \
         was sent, VmHWM {} KiB (+{} KiB) in {:?}",
        m.offered_kb,
        m.base_kb,
        m.mid_kb,
        m.hwm_kb,
        m.hwm_kb - m.base_kb,
        out.elapsed
    );
    m
}

fn incast(msgs: u32, size: u32, credit_bytes: Option<&str>) -> Mem {
    let mut sc = Scenario::new("incast", SENDERS + 1).env("FI_GNIX_SHM", "0").timeout(90);
    if let Some(b) = credit_bytes {
        sc = sc.env("FI_GNIX_CREDIT_BYTES", b);
    }
    run_incast("incast", sc, msgs, size)
}

/// Exactly-once, in-order delivery per sender under incast (every
/// provider); the memory is reported, not bounded (see below).
#[test]
fn incast_16_senders_eager_no_loss_no_dup() {
    incast(256, 16384, None);
}

/// Receive memory bound: the receiver's peak RSS may grow by at most
/// 16 MiB over its set-up value while 16 senders offer 64 MiB of unexpected
/// eager messages. Credit flow control (FI_GNIX_CREDIT_BYTES, here 8 MiB
/// of eager/unexpected payload) makes the senders queue instead.
#[test]
fn incast_receiver_memory_bounded() {
    let m = incast(256, 16384, Some("8388608"));
    let bound_kb = 16 * 1024;
    assert!(
        m.hwm_kb - m.base_kb <= bound_kb,
        "receiver peak RSS grew by {} KiB for {} KiB offered (bound {} KiB)",
        m.hwm_kb - m.base_kb,
        m.offered_kb,
        bound_kb
    );
}

/// The same incast between two hosts (receiver alone in one network
/// namespace, the 16 senders in the other) with 1 % loss on the
/// receiver's INPUT chain: fewer, smaller messages (the udp wire moves
/// ~250 MB/s across the veth today), same checks.
#[test]
fn incast_16_senders_across_two_hosts_1pct_loss() {
    let what = "incast across two hosts";
    if common::skip_unless_gnix(what) {
        return;
    }
    let Some(h) = common::TwoHosts::new(what) else {
        return;
    };
    if !common::require(what, h.input_loss(0, 1.0)) {
        return;
    }
    let sc = Scenario::new("incast", SENDERS + 1).across(&h).timeout(90);
    run_incast("incast across two hosts, 1 % loss:", sc, 64, 8192);
    eprintln!("the loss rule dropped {:?} packets", h.dropped(0));
    assert!(h.dropped(0).unwrap_or(0) > 0, "the loss rule dropped nothing");
}

/// The shm wire under incast (issue 15): 16 local senders flood a receiver
/// that posts nothing until they stop (all sent, or held back for 2 s);
/// every message then arrives once, in order per sender, intact, and the
/// receiver's peak RSS grew by at most its receive budget
/// (FI_GNIX_CREDIT_BYTES, here 16 MiB) plus 16 MiB for the mailbox pages
/// the 16 rings touch and allocator slack. Before credits on this wire the
/// receiver copied every unexpected message to its heap: +202 MiB while
/// flooded with 16 x 20,000 x 2 KiB.
#[test]
fn shm_incast_receiver_memory_bounded() {
    let budget_kb = 16 * 1024;
    let sc = Scenario::new("incast", SENDERS + 1)
        .env("FI_GNIX_CREDIT_BYTES", &(budget_kb * 1024).to_string())
        .timeout(120);
    let m = run_incast("shm incast", sc, 8000, 2048);
    if common::is_gnix() {
        let bound_kb = budget_kb + 16 * 1024;
        assert!(
            m.hwm_kb - m.base_kb <= bound_kb,
            "receiver peak RSS grew by {} KiB for {} KiB offered (bound {} KiB)",
            m.hwm_kb - m.base_kb,
            m.offered_kb,
            bound_kb
        );
    }
}
