//! `Packet::parse` on typed or raw datagrams, edited (provider/proto/fuzz/).
#![no_main]

use gnix_fi::proto::fuzz::{wire_decoder, DecoderCase};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|case: DecoderCase| {
    wire_decoder(&case);
});
