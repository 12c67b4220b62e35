//! Kernels as the worker starts and ends them: its own
//! `eukhe-kernel@<session>` unit under systemd, else a detached process
//! (never the worker's child), so a kernel outlives the worker that
//! started it on either backend.

use std::time::Duration;

use super::process::is_alive;
use super::HostKind;
use crate::laws::adoption::ProcessIdentity;
use crate::laws::timing::{KERNEL_RETRY_MS, TM};
use crate::paths::Paths;

/// How often an ended kernel is looked at while it tears down.
const RETRY: Duration = Duration::from_millis(KERNEL_RETRY_MS);

/// End a broken kernel: through its unit under systemd, else by identity
/// (SIGTERM ends its processes; SIGKILL if it outlives its teardown).
pub async fn end(id: &str, kernel: ProcessIdentity) {
    if HostKind::from_env() == Ok(HostKind::Systemd) {
        if let Err(e) = super::kernel_unit::stop(id).await {
            tracing::warn!("{e}");
        }
        return;
    }
    super::process::signal(kernel, nix::sys::signal::Signal::SIGTERM);
    let deadline = tokio::time::Instant::now() + Duration::from_millis(TM.kernel_teardown * 2);
    while is_alive(kernel) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(RETRY).await;
    }
    super::process::signal(kernel, nix::sys::signal::Signal::SIGKILL);
}

/// Start the session's kernel: its own `eukhe-kernel@` unit under systemd,
/// else a detached process (it is not this worker's child).
pub async fn start(id: &str, paths: &Paths) -> Result<(), String> {
    if HostKind::from_env()? == HostKind::Systemd {
        return super::kernel_unit::start(id).await;
    }
    let exe =
        std::env::current_exe().map_err(|e| format!("cannot find the eukhe executable: {e}"))?;
    let output = tokio::process::Command::new(exe)
        .args(["kernel", id, "--detach"])
        .env("EUKHE_SOCKET", &paths.socket)
        .env("EUKHE_STATE_DIR", &paths.state)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .output()
        .await
        .map_err(|e| format!("cannot start the kernel of session {id}: {e}"))?;
    if output.status.success() {
        tracing::info!("started the session's kernel");
        return Ok(());
    }
    let why = String::from_utf8_lossy(&output.stderr).trim().to_string();
    if why.contains("already has a live kernel") {
        // Another worker's start won the race; connect to that one.
        return Ok(());
    }
    Err(format!("the kernel of session {id} did not start: {why}"))
}
