//! Kernels as the worker starts and ends them: its own
//! `eukhe-kernel@<session>` unit under systemd, else a detached process
//! (never the worker's child), so a kernel outlives the worker that
//! started it on either backend.

use super::HostError;
use std::time::Duration;

use nix::sys::signal::Signal;

use super::process::signal;
use super::process_exit::ProcessExit;
use super::HostKind;
use crate::laws::adoption::ProcessIdentity;
use crate::laws::limits::ResourceLimits;
use crate::laws::timing::TM;
use crate::paths::Paths;
use crate::session::store::{read_json, SessionFiles, SessionMeta};

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
    // Opened before the signal, so the exit cannot come first.
    let exit = ProcessExit::open(kernel);
    signal(kernel, Signal::SIGTERM);
    let deadline = tokio::time::Instant::now() + Duration::from_millis(grace_ms);
    exit.wait_until(deadline).await;
    signal(kernel, Signal::SIGKILL);
}

/// Start the session's kernel: its own `eukhe-kernel@` unit under systemd,
/// else a detached process (it is not this worker's child).
pub async fn start(id: &str, paths: &Paths) -> Result<(), HostError> {
    if HostKind::from_env()? == HostKind::Systemd {
        let limits = limits_of(id, paths)?;
        return super::kernel_unit::start(id, &limits).await;
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

/// The resource limits of session `id`, as its `meta.json` keeps them (a
/// spare, with no metadata yet, has none).
fn limits_of(id: &str, paths: &Paths) -> Result<ResourceLimits, HostError> {
    let files = SessionFiles::new(paths.session_dir(id));
    match read_json::<SessionMeta>(&files.meta()) {
        Ok(meta) => Ok(meta.map(|m| m.limits).unwrap_or_default()),
        Err(e) => Err(HostError::State {
            what: format!("the kernel of session {id}"),
            state: format!("cannot read its limits: {e}"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::process::{identity_of, is_alive};
    use crate::laws::timing::POLL_MS;

    /// A process of this test, by identity (left a zombie until reaped:
    /// not alive, as `is_alive` counts).
    fn spawn(script: &str) -> (std::process::Child, ProcessIdentity) {
        let child = std::process::Command::new("sh")
            .args(["-c", script])
            .spawn()
            .expect("sh starts");
        let identity = identity_of(child.id()).expect("just started");
        (child, identity)
    }

    #[tokio::test]
    async fn a_kernel_that_ends_on_sigterm_is_waited_for_until_its_end_only() {
        let (mut child, kernel) = spawn("exec sleep 1000");
        let started = std::time::Instant::now();
        terminate(kernel, TM.kernel.kernel_term_wait).await;
        assert!(!is_alive(kernel));
        assert!(
            started.elapsed() < Duration::from_millis(TM.kernel.kernel_term_wait),
            "{:?}",
            started.elapsed()
        );
        let status = child.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGTERM), "ended by the SIGTERM");
    }

    #[tokio::test]
    async fn a_kernel_that_ignores_sigterm_is_killed_at_its_grace() {
        // The ignored SIGTERM is inherited across the exec.
        let (mut child, kernel) = spawn("trap '' TERM; exec sleep 1000");
        // The shell sets its trap before the exec: wait until it runs sleep.
        let deadline =
            std::time::Instant::now() + Duration::from_millis(TM.kernel.kernel_term_wait);
        while std::fs::read_to_string(format!("/proc/{}/comm", kernel.pid))
            .is_ok_and(|comm| comm.trim() != "sleep")
            && std::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
        }
        let started = std::time::Instant::now();
        terminate(kernel, TM.kernel.kernel_term_wait).await;
        assert!(started.elapsed() >= Duration::from_millis(TM.kernel.kernel_term_wait));
        let status = child.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGKILL), "killed at the grace");
    }
}
