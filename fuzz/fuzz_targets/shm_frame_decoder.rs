//! `Frame::parse` on shm slots, typed or raw, edited (provider/nic/shm/fuzz/).
#![no_main]

use gnix_fi::fuzz::{shm_frame_decoder, ShmFrameCase};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|case: ShmFrameCase| {
    // A refused slot is an outcome, not a failure.
    let _ = shm_frame_decoder(&case);
});
