//! The shm frame decoder's fuzz target under `cargo test`, run as the udp
//! wire's are (`proto/fuzz/tests.rs`, whose seeded runner it shares):
//! inputs built by `arbitrary` from fixed seeds, bounded and reproducible;
//! a failing input is saved and replays under
//! `cargo fuzz run shm_frame_decoder <file>`. The long randomised run is
//! `#[ignore]`d:
//! `GNIX_FUZZ_SECS=60 cargo test --release --lib fuzz_shm -- --ignored --nocapture`.

use super::{shm_frame_decoder, ShmFrameCase};
use crate::proto::fuzz::tests::{long_run_seed, run_seeded, Budget};
use arbitrary::{Arbitrary, Unstructured};
use std::collections::BTreeMap;

/// Every reason `Frame::parse` refuses a slot for.
const REFUSALS: [&str; 7] = [
    "unknown slot kind",
    "payload longer than a slot",
    "bad iov list",
    "iov lengths overflow",
    "payload on a control frame",
    "grant index out of range",
    "status is no error number",
];

/// The target on `budget` inputs from `seed`; returns the frames accepted
/// per kind and the slots refused per reason.
fn run_decoder(seed: u64, budget: Budget) -> (BTreeMap<u8, u64>, BTreeMap<&'static str, u64>) {
    let (mut accepted, mut refused) = (BTreeMap::new(), BTreeMap::new());
    let n = run_seeded("shm_frame_decoder", seed, budget, (8, 256), |bytes| {
        let case = ShmFrameCase::arbitrary_take_rest(Unstructured::new(bytes)).expect("any bytes make a case");
        match shm_frame_decoder(&case) {
            Ok(kind) => *accepted.entry(kind).or_insert(0) += 1,
            Err(why) => *refused.entry(why).or_insert(0) += 1,
        }
    });
    eprintln!("fuzz_shm_frame_decoder: seed {seed}: {n} inputs; accepted by kind {accepted:?}; refused {refused:?}");
    (accepted, refused)
}

/// 300,000 inputs, about a tenth of a second in release. The inputs reach
/// every kind accepted and every reason to refuse.
#[test]
fn fuzz_shm_frame_decoder() {
    for seed in [1, 2, 3] {
        let (accepted, refused) = run_decoder(seed, Budget::Inputs(100_000));
        for k in 1..=7u8 {
            assert!(
                accepted.get(&k).is_some_and(|&n| n > 0),
                "seed {seed}: no frame of kind {k} accepted"
            );
        }
        for why in REFUSALS {
            assert!(
                refused.get(why).is_some_and(|&n| n > 0),
                "seed {seed}: never refused: {why}"
            );
        }
    }
}

#[test]
#[ignore = "long randomised run: GNIX_FUZZ_SECS, GNIX_FUZZ_SEED (tests/README.md)"]
fn fuzz_shm_frame_decoder_long() {
    run_decoder(long_run_seed("fuzz_shm_frame_decoder_long"), Budget::long_run(1, 4));
}
