//! The frame reader on arbitrary bytes: it returns a frame or an error,
//! never panics, and never returns more than the frame limit.
#![no_main]

use eukhe::protocol::frame::{read_frame_bytes, MAX_FRAME_BYTES};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let mut reader = data;
    runtime.block_on(async {
        while let Ok(frame) = read_frame_bytes(&mut reader).await {
            assert!(frame.len() <= MAX_FRAME_BYTES);
        }
    });
});
