//! The transcript reader on arbitrary bytes: the good prefix it reports is
//! within the input, and reading that prefix again gives the same entries.
#![no_main]

use eukhe::session::transcript::parse;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (entries, good) = parse(data);
    assert!(good <= data.len());
    let (again, good_again) = parse(&data[..good]);
    assert_eq!(good_again, good);
    assert_eq!(again.len(), entries.len());
});
