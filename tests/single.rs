//! Single-process scenarios: getinfo, object classes, CQ/EQ/counter/AV/MR
//! semantics, cancel, bad input. Each runs `fitest <name> 0 1` against the
//! provider under test (see tests/common/mod.rs).
mod common;
use common::{is_gnix, single, Scenario};

#[test]
fn getinfo() {
    single("getinfo");
}

#[test]
fn classes_open_close_bind_enable_names_opts() {
    single("classes");
}

#[test]
fn cq_wait_objects_sread_timeout_strerror() {
    single("cq_wait");
}

#[test]
fn cq_signal_wakes_sread() {
    single("cq_signal");
}

#[test]
fn av_map_and_table() {
    single("av");
}

#[test]
fn mr_reg_regv_regattr() {
    single("mr");
}

#[test]
fn counters() {
    single("cntr");
}

#[test]
fn eq_write_read_sread() {
    single("eq");
}

/// fi_write, fi_atomicvalid, fi_barrier, fi_av_set ... on an endpoint
/// without FI_RMA / FI_ATOMIC / FI_COLLECTIVE: refused, not a crash.
#[test]
fn unsupported_ops_are_refused() {
    single("unsupported_ops");
}

#[test]
fn cancel_posted_receives() {
    single("cancel");
}

/// rx_attr->size receives at once, then -FI_EAGAIN; a cancel frees a
/// place; a receive posted for a waiting unexpected message takes it.
#[test]
fn receive_budget_and_unexpected_match_on_post() {
    single("rx_budget");
}

/// Every refused call returns its error code (asserted by the client) and
/// says why in a warning of the provider's log.
#[test]
fn bad_input_does_not_crash() {
    if !is_gnix() {
        single("bad_input");
        return;
    }
    let out = Scenario::new("bad_input", 1)
        .timeout(30)
        .env("FI_LOG_LEVEL", "warn")
        .env("FI_LOG_PROV", "gnix")
        .run();
    let log = &out.stderr[0];
    for why in [
        "NULL buffer with non-zero length",
        "> inject_size",
        "is not in the AV",
        "endpoint was opened without FI_TAGGED",
        "> iov_limit",
        "unsupported flags",
        "apply to tagged receives only",
    ] {
        assert!(
            log.lines().any(|l| l.contains("<warn>") && l.contains(why)),
            "no warning containing {why:?} in:\n{log}"
        );
    }
}
