//! One 1 GiB message in each direction, u64-pattern verified.
mod common;
use common::Scenario;

#[test]
fn one_gib_both_directions() {
    Scenario::new("large", 2).arg("1024").timeout(240).run();
}
