//! Requests and responses decoded from arbitrary payloads (JSON control
//! messages and binary output frames): an error or a message that encodes
//! again, never a panic; an output frame (a zero run's too, which encodes
//! as live output) decodes to the same message again.
#![no_main]

use eukhe::protocol::frame::{encode, Message};
use eukhe::protocol::message::{Request, Response};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(request) = Request::from_payload(data) {
        encode(&request).expect("a decoded request encodes");
    }
    if let Ok(response) = Response::from_payload(data) {
        let payload = response.to_payload().expect("a decoded response encodes");
        if matches!(data.first(), Some(1..=3)) {
            let again = Response::from_payload(&payload).expect("an encoded output frame decodes");
            assert_eq!(again, response, "an output frame round-trips");
        }
    }
});
