//! The worker-kernel link's messages decoded from arbitrary payloads: an
//! error, or a message that encodes again and decodes to itself; never a
//! panic.
#![no_main]

use eukhe::protocol::kernel::{FromKernel, ToKernel};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(message) = serde_json::from_slice::<ToKernel>(data) {
        let again = serde_json::to_vec(&message).expect("a decoded message encodes");
        let back: ToKernel = serde_json::from_slice(&again).expect("an encoded message decodes");
        assert_eq!(back, message);
    }
    if let Ok(message) = serde_json::from_slice::<FromKernel>(data) {
        let again = serde_json::to_vec(&message).expect("a decoded message encodes");
        let back: FromKernel = serde_json::from_slice(&again).expect("an encoded message decodes");
        assert_eq!(back, message);
    }
});
