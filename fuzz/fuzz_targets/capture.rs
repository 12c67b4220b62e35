//! What a job's shell captured (NUL-separated kinds, names and texts, from
//! whatever state a user's command left) parsed from arbitrary bytes: an
//! error, or a snapshot whose change set applies and whose restore script
//! is built; never a panic.
#![no_main]

use eukhe::session::snapshot::{parse_capture, Snapshot};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(capture) = parse_capture(data, &Snapshot::default()) {
        let mut state = Snapshot::default();
        let changes = state.changes_to(&capture.snapshot);
        state.apply(&changes);
        assert_eq!(
            state, capture.snapshot,
            "a change set brings the snapshot over"
        );
        let _ = state.restore_script();
        let _ = state.template_script();
    }
});
