//! Tests against a real systemd, booted privately (see `support/systemd.rs`).
//! They need root; elsewhere each says why it did not run.

mod activation;
mod bench;
mod failures;
mod install;
mod revival;
mod spare;

use crate::support::skip::skip_unless_ci;
use crate::support::systemd::unavailable;

/// Why these tests cannot run here, printed as the reason they did not.
pub(crate) fn skip() -> bool {
    match unavailable() {
        Some(why) => {
            skip_unless_ci(&format!("a private systemd cannot run here: {why}"));
            true
        }
        None => false,
    }
}

/// `text` as one single-quoted shell word.
fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

fn worker(id: &str) -> String {
    format!("eukhe@{id}.service")
}

fn kernel(id: &str) -> String {
    format!("eukhe-kernel@{id}.service")
}

/// Whether some command line in `processes` runs `command` (e.g. `sleep 3`).
fn runs(processes: &[String], command: &str) -> bool {
    processes.iter().any(|line| line == command)
}
