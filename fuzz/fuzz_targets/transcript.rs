//! The transcript reader on arbitrary bytes: it never panics, the entries
//! it finds are numbered strictly upward, the regions it reports lie in
//! the input in order, and cutting the input where the last good record
//! ends gives the same entries.
#![no_main]

use eukhe::session::transcript::parse;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let parsed = parse(data);
    let len = data.len() as u64;
    assert!(parsed.end <= len);
    assert!(parsed.entries.windows(2).all(|w| w[0].seq < w[1].seq));
    let mut at = 0;
    for &(offset, bytes) in &parsed.damage {
        assert!(offset >= at && bytes > 0 && offset + bytes <= len);
        at = offset + bytes;
    }
    if let Some(torn) = parsed.torn_at {
        assert!(torn >= at && torn >= parsed.end && torn < len);
    }
    let again = parse(&data[..parsed.end as usize]);
    assert_eq!(again.entries, parsed.entries);
    assert_eq!(again.end, parsed.end);
    assert_eq!(again.torn_at, None);
});
