//! Durable runs (issue 11) on the process backend, through the real binary:
//! a run outlives its worker, its lost supervisor and a replacement by
//! another build; the session's shell keeps its whole state; background
//! jobs; cancel, queue and withdraw.
//!
//! Every process a test starts is ended when it ends, by pid: the daemon,
//! workers and kernels of its private installation (found by the state
//! directory in their environment, and in `worker.json` and `kernel.json`),
//! and every process left in a kernel's session (runs and their children).

mod cancel;
mod jobs;
mod shell_state;
mod survival;

use std::process::Output;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// How many lines of `log` are exactly `line`.
fn lines_equal(log: &str, line: &str) -> usize {
    log.lines().filter(|l| *l == line).count()
}

trait OutputInThread {
    fn output_in_thread(self) -> std::thread::JoinHandle<Output>;
}

impl OutputInThread for std::process::Command {
    fn output_in_thread(mut self) -> std::thread::JoinHandle<Output> {
        std::thread::spawn(move || self.output().expect("run eukhe"))
    }
}
