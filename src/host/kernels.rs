//! Kernels as the worker starts and ends them: its own
//! `eukhe-kernel@<session>` unit under systemd, else a detached process
//! (never the worker's child), so a kernel outlives the worker that
//! started it on either backend.

use super::HostError;
use std::time::Duration;

use nix::sys::signal::Signal;

use super::process::{is_alive, signal};
use super::HostKind;
use crate::laws::adoption::ProcessIdentity;
use crate::laws::timing::{POLL_MS, TM};
use crate::paths::Paths;

/// End a broken kernel: through its unit under systemd, else by identity
/// (SIGTERM ends its processes; SIGKILL if it outlives its teardown).
pub async fn end(id: &str, kernel: ProcessIdentity) {
    if matches!(HostKind::from_env(), Ok(HostKind::Systemd)) {
        stop_unit(id).await;
    } else {
        terminate(kernel, TM.kernel.kernel_term_wait).await;
    }
}

/// Stop the kernel unit of `id` (every process of the session ends); a
/// failure is logged.
pub async fn stop_unit(id: &str) {
    if let Err(e) = super::kernel_unit::stop(id).await {
        tracing::warn!(session = id, "{e}");
    }
}

/// End the kernel process `kernel` by identity: SIGTERM (its handler ends
/// its descendants), then SIGKILL if it outlives `grace_ms`.
pub async fn terminate(kernel: ProcessIdentity, grace_ms: u64) {
    signal(kernel, Signal::SIGTERM);
    let deadline = tokio::time::Instant::now() + Duration::from_millis(grace_ms);
    while is_alive(kernel) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    }
    signal(kernel, Signal::SIGKILL);
}

/// Start the session's kernel: its own `eukhe-kernel@` unit under systemd,
/// else a detached process (it is not this worker's child).
pub async fn start(id: &str, paths: &Paths) -> Result<(), HostError> {
    if HostKind::from_env()? == HostKind::Systemd {
        return super::kernel_unit::start(id).await;
    }
    let (exe, arg0) = crate::build_id::own_executable();
    let output = tokio::process::Command::new(exe)
        .arg0(arg0)
        .args(["kernel", id, "--detach"])
        .env("EUKHE_SOCKET", &paths.socket)
        .env("EUKHE_STATE_DIR", &paths.state)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .output()
        .await
        .map_err(|e| HostError::io(format!("cannot start the kernel of session {id}"), e))?;
    if output.status.success() {
        tracing::info!("started the session's kernel");
        return Ok(());
    }
    let why = String::from_utf8_lossy(&output.stderr).trim().to_string();
    if why.contains("already has a live kernel") {
        // Another worker's start won the race; connect to that one.
        return Ok(());
    }
    Err(HostError::State {
        what: format!("the kernel of session {id}"),
        state: format!("did not start: {why}"),
    })
}
