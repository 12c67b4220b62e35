//! Output and the transcript through the real binary: bytes arrive exactly
//! as commands wrote them, a damaged transcript keeps every entry after the
//! damage, and a transcript of the first format still opens.

mod bytes;
mod full_disk;
mod transcript;

use std::path::Path;

use crate::support::{kill9, wait_until, Env};

/// The records of a v3 transcript: (offset, seq, payload offset, payload
/// length, kind).
fn records(path: &Path) -> Vec<(usize, u64, usize, usize, u8)> {
    let bytes = std::fs::read(path).unwrap();
    assert_eq!(&bytes[..8], b"EUKHETR3");
    let mut out = Vec::new();
    let mut at = 16;
    while at + 25 <= bytes.len() {
        let seq = u64::from_be_bytes(bytes[at + 8..at + 16].try_into().unwrap());
        let len = u32::from_be_bytes(bytes[at + 17..at + 21].try_into().unwrap()) as usize;
        out.push((at, seq, at + 25, len, bytes[at + 16]));
        at += 25 + len;
    }
    out
}

/// SIGKILL the session's worker and wait for the supervisor's next one.
fn kill_worker_and_wait_for_the_next(env: &Env, id: &str) {
    let worker = env.worker_pid(id).expect("a worker");
    kill9(worker);
    wait_until(
        std::time::Duration::from_secs(10),
        "the next worker",
        || env.worker_pid(id).is_some_and(|pid| pid != worker),
    );
}
