//! Single-process scenarios: getinfo, object classes, CQ/EQ/counter/AV/MR
//! semantics, cancel, bad input. Each runs `fitest <name> 0 1` against the
//! provider under test (see tests/common/mod.rs).
mod common;
use common::single;

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

#[test]
fn cancel_posted_receives() {
    single("cancel");
}

#[test]
fn bad_input_does_not_crash() {
    single("bad_input");
}
