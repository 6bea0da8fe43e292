//! One-sided scenarios (FI_RMA, FI_ATOMIC, FI_RMA_EVENT): rank 0 is the
//! target, the others read, write and update its registered memory (see
//! tests/clients/fitest_rma.h). Every test also runs against a reference
//! provider (`GNIX_TEST_PROVIDER`), so a failure here is known to be gnix's.
mod common;
use common::{is_gnix, pair, skip_unless_gnix, Scenario};

/// fi_read/readv/readmsg, fi_write/writev/writemsg/inject_write/writedata:
/// 8 B, 3000 B, 1 MiB, iovs on both sides, remote CQ data.
#[test]
fn rma_every_call_and_size() {
    pair("rma_ops", None);
}

/// Unknown key, wrong rights, outside the region: error completions,
/// nothing written, the endpoint works afterwards. gnix only: libfabric
/// 1.17's shm and tcp;ofi_rxm complete a write with an unknown key
/// without an error.
#[test]
fn rma_refused_access_writes_nothing() {
    if skip_unless_gnix("rma_refused") {
        return;
    }
    pair("rma_refused", None);
}

/// FI_RMA_EVENT: endpoint counters for FI_READ/FI_WRITE and
/// FI_REMOTE_READ/FI_REMOTE_WRITE, and a counter bound to the region.
#[test]
fn rma_events_count_on_both_sides() {
    pair("rma_event", None);
}

/// The same under FI_PROGRESS_MANUAL, the target waiting first on the
/// counter bound to the region alone (fabtests' fi_multi_mr hung there):
/// a wait on it progresses every endpoint of the domain.
#[test]
fn rma_events_on_a_region_counter_under_manual_progress() {
    pair("rma_event", Some("manual"));
}

/// Every op × datatype × family fi_atomicvalid offers, against a reference
/// computed by the client; the v, msg and inject forms.
#[test]
fn atomics_every_op_and_datatype() {
    pair("atomic_ops", None);
}

/// 8 processes (rank 0 through its own endpoint too) fetch-and-add one
/// word 2000 times each; on gnix half of them over the udp wire, so both
/// wires feed the one executor. The word ends at exactly 16,000.
#[test]
fn concurrent_fetch_and_add_sums_exactly() {
    let mut s = Scenario::new("atomic_fadd", 8).timeout(120);
    if is_gnix() {
        for r in (1..8).step_by(2) {
            s = s.rank_env(r, "FI_GNIX_SHM", "0");
        }
    }
    s.run();
}

/// FI_TRIGGER: a receive, a send, an RMA write, a write through a
/// triggering alias (fi_ep_alias) and an atomic, each held back until the
/// application's counter reaches its threshold, then completing with its
/// triggered context.
#[test]
fn triggered_operations_wait_for_their_threshold() {
    pair("trigger", None);
}

/// The deferred work queue (FI_QUEUE_WORK): a write, a counter add and a
/// send chained on counters, completing on their completion counters and
/// not in the CQ; FI_CANCEL_WORK and FI_FLUSH_WORK take back what has not
/// fired.
#[test]
fn deferred_work_queue_chains_on_counters() {
    pair("deferred_work", None);
}

/// The same under manual progress: a wait on the chain's last completion
/// counter, which no endpoint is bound to, progresses the endpoint the
/// work runs on.
#[test]
fn deferred_work_under_manual_progress() {
    pair("deferred_work", Some("manual"));
}

/// Both ranks flood each other with 5000 inject writes through a transmit
/// budget of 64: the answers to the peer's writes still leave (they once
/// waited for the budget their own writes held, on both sides at once).
#[test]
fn two_way_write_flood_through_a_small_budget() {
    pair("rma_flood", None);
}

/// Ordering (FI_ORDER_RAR, RAW, WAR, WAW and their FI_ORDER_RMA_* and
/// FI_ORDER_ATOMIC_* forms), one bit at a time as the hints ask it: rank 1
/// posts windows of writes and reads (RMA, atomic, or both) on one block
/// of rank 0's memory without waiting, and checks what each read saw and
/// what the block ends as (tests/clients/fitest_rma.h, `rma_order`). A
/// reference provider that does not offer the bit skips it. gnix runs
/// with a small credit loan, so that the shm wire sends some requests by
/// rendezvous, and once more with cross-memory attach off, where such a
/// request's data comes pushed behind requests sent after it.
fn order(bit: &str) {
    let s = Scenario::new("rma_order", 2).arg(bit).timeout(120);
    if !is_gnix() {
        s.run();
        return;
    }
    s.env("FI_GNIX_CREDIT_BYTES", "1048576").run();
    Scenario::new("rma_order", 2)
        .arg(bit)
        .timeout(120)
        .env("FI_GNIX_CREDIT_BYTES", "1048576")
        .env("FI_GNIX_CMA", "0")
        .run();
}

#[test]
fn order_rar() {
    order("rar");
}

#[test]
fn order_raw() {
    order("raw");
}

#[test]
fn order_war() {
    order("war");
}

#[test]
fn order_waw() {
    order("waw");
}

#[test]
fn order_rma_rar() {
    order("rma_rar");
}

#[test]
fn order_rma_raw() {
    order("rma_raw");
}

#[test]
fn order_rma_war() {
    order("rma_war");
}

#[test]
fn order_rma_waw() {
    order("rma_waw");
}

#[test]
fn order_atomic_rar() {
    order("atomic_rar");
}

#[test]
fn order_atomic_raw() {
    order("atomic_raw");
}

#[test]
fn order_atomic_war() {
    order("atomic_war");
}

#[test]
fn order_atomic_waw() {
    order("atomic_waw");
}
