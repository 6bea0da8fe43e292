//! Fuzzed datagrams against a pair of engines exchanging real messages
//! (provider/proto/fuzz/).
#![no_main]

use gnix_fi::proto::fuzz::{engine_datagrams, EngineCase};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|case: EngineCase| {
    engine_datagrams(&case);
});
