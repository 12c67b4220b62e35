//! Requests and responses decoded from arbitrary payloads: an error or a
//! message that encodes again, never a panic.
#![no_main]

use eukhe::protocol::frame::{decode, encode};
use eukhe::protocol::message::{Request, Response};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(request) = decode::<Request>(data) {
        encode(&request).expect("a decoded request encodes");
    }
    if let Ok(response) = decode::<Response>(data) {
        encode(&response).expect("a decoded response encodes");
    }
});
