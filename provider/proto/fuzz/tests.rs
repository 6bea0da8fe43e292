//! The fuzz targets under `cargo test`: inputs built by `arbitrary` from
//! seeded random bytes, a fixed number from fixed seeds (about a second in
//! release). The same bytes given to cargo-fuzz build the same input
//! (`arbitrary_take_rest`, as libfuzzer-sys does), so a failure here is
//! saved as a file that replays under `cargo fuzz run <target> <file>`.
//!
//! The long randomised runs without cargo-fuzz are `#[ignore]`d:
//! `GNIX_FUZZ_SECS=600 cargo test --release --lib fuzz -- --ignored --nocapture`
//! (`GNIX_FUZZ_SECS` default 60, a quarter for the decoder; `GNIX_FUZZ_SEED`
//! default from the clock, printed). tests/README.md has both ways.

use super::{engine_datagrams, wire_decoder, DecoderCase, EngineCase, EngineReport};
use crate::rng::SplitMix as Rng;
use arbitrary::{Arbitrary, Unstructured};
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

/// How long a run lasts: a number of inputs (the `cargo test` run), or
/// until a deadline (the long runs).
#[derive(Clone, Copy)]
pub(crate) enum Budget {
    Inputs(u64),
    Until(Instant),
}

impl Budget {
    fn more(&self, done: u64) -> bool {
        match *self {
            Budget::Inputs(n) => done < n,
            Budget::Until(t) => Instant::now() < t,
        }
    }

    /// The long run's share of `GNIX_FUZZ_SECS`.
    pub(crate) fn long_run(share_num: u32, share_den: u32) -> Budget {
        let secs: f64 = std::env::var("GNIX_FUZZ_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(60.0);
        Budget::Until(Instant::now() + Duration::from_secs_f64(secs * share_num as f64 / share_den as f64))
    }
}

/// The long run's seed: `GNIX_FUZZ_SEED`, or from the clock; printed.
pub(crate) fn long_run_seed(what: &str) -> u64 {
    let s = std::env::var("GNIX_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        });
    eprintln!("{what}: GNIX_FUZZ_SEED={s}");
    s
}

/// Runs `target` on inputs of `min..max` random bytes from `seed` within
/// `budget`; returns the number of inputs. A failing input is written to
/// target/fuzz-failures/ and its path printed before the panic goes on.
pub(crate) fn run_seeded(
    name: &str,
    seed: u64,
    budget: Budget,
    (min, max): (usize, usize),
    mut target: impl FnMut(&[u8]),
) -> u64 {
    let mut rng = Rng(seed);
    let mut bytes = Vec::new();
    let mut n = 0;
    while budget.more(n) {
        bytes.resize(min + rng.below((max - min) as u64) as usize, 0);
        rng.fill(&mut bytes);
        if let Err(e) = catch_unwind(AssertUnwindSafe(|| target(&bytes))) {
            let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/fuzz-failures");
            let path = dir.join(format!("{name}-{seed}-{n}"));
            let saved = std::fs::create_dir_all(&dir).and_then(|_| std::fs::write(&path, &bytes));
            eprintln!(
                "{name}: seed {seed}, input {n} failed; {}: cargo fuzz run {name} {}",
                if saved.is_ok() { "saved" } else { "NOT saved" },
                path.display()
            );
            resume_unwind(e);
        }
        n += 1;
    }
    n
}

/// The decoder target on `budget` inputs from `seed`; returns (inputs,
/// accepted).
fn run_decoder(seed: u64, budget: Budget) -> (u64, u64) {
    let mut ok = 0u64;
    let n = run_seeded("wire_decoder", seed, budget, (8, 160), |bytes| {
        let case = DecoderCase::arbitrary_take_rest(Unstructured::new(bytes)).expect("any bytes make a case");
        ok += wire_decoder(&case) as u64;
    });
    eprintln!("fuzz_wire_decoder: seed {seed}: {n} inputs, {ok} accepted");
    assert!(
        ok > 0 && ok < n,
        "the inputs should make both valid and invalid datagrams"
    );
    (n, ok)
}

/// About 150,000 inputs, a few tenths of a second in release.
#[test]
fn fuzz_wire_decoder() {
    for seed in [1, 2, 3] {
        run_decoder(seed, Budget::Inputs(50_000));
    }
}

#[test]
#[ignore = "long randomised run: GNIX_FUZZ_SECS, GNIX_FUZZ_SEED (tests/README.md)"]
fn fuzz_wire_decoder_long() {
    run_decoder(long_run_seed("fuzz_wire_decoder_long"), Budget::long_run(1, 4));
}

/// The engine target on `budget` cases from `seed` (checked or chaos as
/// the bytes say);
/// returns the real messages checked.
fn run_engine(seed: u64, budget: Budget) -> u64 {
    let mut tot = EngineReport::default();
    let (mut cases, mut checked_cases) = (0u64, 0u64);
    let mut counters = [0u64; 16];
    run_seeded("engine_datagrams", seed, budget, (1024, 16 << 10), |bytes| {
        let case = EngineCase::arbitrary_take_rest(Unstructured::new(bytes)).expect("any bytes make a case");
        cases += 1;
        checked_cases += case.checked as u64;
        let r = engine_datagrams(&case);
        tot.inputs += r.inputs;
        tot.dropped += r.dropped;
        tot.checked_msgs += r.checked_msgs;
        let st = &r.b_stats;
        for (t, v) in counters.iter_mut().zip([
            st.dropped_malformed,
            st.dropped_stale,
            st.dropped_unknown_peer,
            st.dropped_out_of_window,
            st.dropped_early,
            st.dropped_rndv,
            st.dup_segments,
            st.ooo_segments,
            st.peers_restarted,
            st.conn_reqs_challenged,
            st.conn_reqs_duplicate,
            st.first_contacts_challenged,
            st.unproven_rekeyed,
            st.unproven_expired,
            st.refusals_unverified,
            st.peers_refused,
        ]) {
            *t += v;
        }
    });
    eprintln!(
        "fuzz_engine_datagrams: seed {seed}: {cases} cases ({checked_cases} checked), {} fuzzed datagrams ({} that had to be dropped were), \
         {} real messages checked exactly-once and in order",
        tot.inputs, tot.dropped, tot.checked_msgs
    );
    eprintln!(
        "fuzz_engine_datagrams: receiver counters: malformed {} stale {} unknown_peer {} out_of_window {} early {} \
         rndv {} dup_segments {} ooo_segments {} peers_restarted {} conn_reqs_challenged {} conn_reqs_duplicate {} \
         first_contacts_challenged {} unproven_rekeyed {} unproven_expired {} refusals_unverified {} peers_refused {}",
        counters[0],
        counters[1],
        counters[2],
        counters[3],
        counters[4],
        counters[5],
        counters[6],
        counters[7],
        counters[8],
        counters[9],
        counters[10],
        counters[11],
        counters[12],
        counters[13],
        counters[14],
        counters[15]
    );
    assert!(cases >= 2 && tot.dropped > 0);
    // Forged refusals came, and were ignored (the oracle checks each).
    assert!(counters[14] > 0, "no refusal was fuzzed");
    tot.checked_msgs
}

/// 800 cases, about half a second in release.
#[test]
fn fuzz_engine_datagrams() {
    for seed in [1, 2] {
        let checked = run_engine(seed, Budget::Inputs(400));
        assert!(checked > 0);
    }
}

#[test]
#[ignore = "long randomised run: GNIX_FUZZ_SECS, GNIX_FUZZ_SEED (tests/README.md)"]
fn fuzz_engine_datagrams_long() {
    run_engine(long_run_seed("fuzz_engine_datagrams_long"), Budget::long_run(3, 4));
}
