//! The configuration parser on arbitrary text: a config or a one-line error.
#![no_main]

use eukhe::config::Config;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Err(message) = Config::parse(text) {
            assert!(!message.is_empty());
        }
    }
});
