//! The supervisor's seam to the host: how a worker is started, found,
//! stopped and found dead, on the process backend (detached processes,
//! signalled by identity) or on the systemd backend (`eukhe@<session>`
//! units through the user manager). The decisions around these calls
//! (survivors, adoption, restart) stay in `launch`, through `laws`.

use std::collections::HashMap;
use std::os::unix::process::CommandExt as _;
use std::process::Stdio;
use std::time::Duration;

use super::launch::{ask_worker, Shared};
use crate::host::escape::{
    kernel_unit, session_of_kernel_unit, session_of_unit, worker_unit, KERNEL_UNIT_PATTERN,
    WORKER_UNIT_PATTERN,
};
use crate::host::process::{identity_of, is_alive, signal};
use crate::host::units::{UnitState, UserManager};
use crate::laws::adoption::ProcessIdentity;
use crate::laws::idle_shutdown::QuiesceAnswer;
use crate::laws::timing::{POLL_MS, TM};
use crate::protocol::message::{Request, Response};
use crate::session::store::{read_json, KernelRecord, WorkerRecord};

/// How long a worker unit may take to become active (Type=notify: until
/// the worker's READY=1) before it counts as failed.
const UNIT_START_WITHIN: Duration = Duration::from_millis(TM.worker_start_wait);

fn units(supervisor: &Shared) -> Option<UserManager> {
    supervisor.borrow().units.clone()
}

/// A unit state's process, as an identity (a unit without a main process
/// still counts as live, with pid 0, so it is stopped before a launch).
fn unit_identity(state: &UnitState) -> ProcessIdentity {
    identity_of(state.main_pid).unwrap_or(ProcessIdentity {
        pid: state.main_pid,
        start_time: 0,
    })
}

/// The live worker process of `id` left from before, if any.
pub async fn surviving_worker(supervisor: &Shared, id: &str) -> Option<ProcessIdentity> {
    match units(supervisor) {
        Some(units) => {
            let state = units.state(&worker_unit(id)).await.ok()?;
            (!state.is_down()).then(|| unit_identity(&state))
        }
        None => {
            let files = supervisor.borrow().files(id);
            read_json::<WorkerRecord>(&files.worker())
                .ok()
                .flatten()
                .map(|record| record.identity)
                .filter(|&identity| is_alive(identity))
        }
    }
}

/// Every live worker, by session: the process records of the process
/// backend, or the live `eukhe@*` units of the user manager.
pub async fn live_workers(supervisor: &Shared) -> Result<HashMap<String, ProcessIdentity>, String> {
    match units(supervisor) {
        Some(units) => Ok(units
            .live_units(WORKER_UNIT_PATTERN)
            .await?
            .into_iter()
            .filter_map(|(unit, state)| Some((session_of_unit(&unit)?, unit_identity(&state))))
            .collect()),
        None => {
            let ids: Vec<String> = supervisor.borrow().slots.keys().cloned().collect();
            let mut live = HashMap::new();
            for id in ids {
                if let Some(identity) = surviving_worker(supervisor, &id).await {
                    live.insert(id, identity);
                }
            }
            Ok(live)
        }
    }
}

/// Start the worker of `id`. Under systemd this returns once the unit is
/// active (the worker serves its socket) or has failed.
pub async fn start_worker(supervisor: &Shared, id: &str) -> Result<(), String> {
    match units(supervisor) {
        Some(units) => {
            let unit = worker_unit(id);
            // The supervisor's restart budget decides; systemd's start
            // limit must not refuse a restart the budget allows.
            units.reset_failed(&unit).await;
            units.start(&unit).await?;
            let state = units
                .wait_for(&unit, UNIT_START_WITHIN, |s| s.active != "activating")
                .await?;
            if state.active == "active" {
                Ok(())
            } else {
                Err(format!("session {id}: {}", state.why_down()))
            }
        }
        None => spawn_process(supervisor, id),
    }
}

fn spawn_process(supervisor: &Shared, id: &str) -> Result<(), String> {
    let (paths, files, lost_exit) = {
        let s = supervisor.borrow();
        let lost_exit = crate::config::window_text(s.config.worker_lost_exit_ms);
        (s.paths.clone(), s.files(id), lost_exit)
    };
    let exe =
        std::env::current_exe().map_err(|e| format!("cannot find the eukhe executable: {e}"))?;
    let log = crate::session::store::private_append(&files.log())?;
    let log2 = log.try_clone().map_err(|e| e.to_string())?;
    let mut command = tokio::process::Command::new(exe);
    command
        .arg("worker")
        .arg(id)
        .env("EUKHE_SOCKET", &paths.socket)
        .env("EUKHE_STATE_DIR", &paths.state)
        .env("EUKHE_WORKER_LOST_EXIT_MS", lost_exit)
        .env_remove("EUKHE_HOST")
        .env_remove("NOTIFY_SOCKET")
        .env_remove("WATCHDOG_USEC")
        .env_remove("WATCHDOG_PID")
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2);
    // SAFETY: the closure runs between fork and exec and calls only
    // setsid(2), which is async-signal-safe and allocates nothing. The
    // worker gets its own session and process group, so it outlives this
    // supervisor. `pre_exec` itself is unsafe: std and tokio offer
    // `process_group` (setpgid), not setsid. process-wrap's ProcessSession
    // is a safe wrapper of this same closure, but its child type also
    // changes how the child is waited for and killed (by group).
    unsafe {
        command.as_std_mut().pre_exec(|| {
            let _ = nix::unistd::setsid();
            Ok(())
        });
    }
    let mut child = command
        .spawn()
        .map_err(|e| format!("session {id}: cannot start its worker: {e}"))?;
    // Reap the child whenever it ends; the watcher notices through its
    // control connection.
    tokio::task::spawn_local(async move {
        let _ = child.wait().await;
    });
    Ok(())
}

/// Whether the worker `identity` of `id` is still there.
async fn still_there(units: Option<&UserManager>, id: &str, identity: ProcessIdentity) -> bool {
    match units {
        Some(units) => units
            .state(&worker_unit(id))
            .await
            .map(|s| !s.is_down())
            .unwrap_or(false),
        None => is_alive(identity),
    }
}

/// Wait up to `within_ms` for the worker `identity` of `id` to be gone.
pub async fn wait_gone(
    units: Option<&UserManager>,
    id: &str,
    identity: ProcessIdentity,
    within_ms: u64,
) {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(within_ms);
    wait_gone_until(units, id, identity, deadline).await;
}

async fn wait_gone_until(
    units: Option<&UserManager>,
    id: &str,
    identity: ProcessIdentity,
    deadline: tokio::time::Instant,
) {
    while still_there(units, id, identity).await && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    }
}

/// Whether no worker of `id` is left, once one that is dying has had the
/// kill route and the child drain to go (its connection closes before its
/// process is gone).
pub async fn no_worker_left(supervisor: &Shared, id: &str) -> bool {
    let Some(identity) = surviving_worker(supervisor, id).await else {
        return true;
    };
    let units = units(supervisor);
    wait_gone(units.as_ref(), id, identity, TM.kill_route + TM.child_drain).await;
    !still_there(units.as_ref(), id, identity).await
}

/// Stop the worker `identity` of `id`: ask it with `request` (`Stop`: it
/// keeps queued input for the next worker and its kernel keeps its runs;
/// `StopWithKernel`: the kernel ends too) and give it one stop grace for
/// asking and leaving together, then end it by force (SIGKILL by identity,
/// or `KillUnit`) and wait out the kill route and the child drain. The
/// whole escalation is `stop_grace + kill_route + child_drain`, which the
/// supervisor drain covers (`timeouts_ordered`). Returns whether it is gone.
pub async fn stop_worker(
    supervisor: &Shared,
    id: &str,
    identity: ProcessIdentity,
    request: Request,
) -> bool {
    let units = units(supervisor);
    let grace_ends = tokio::time::Instant::now() + Duration::from_millis(TM.stop_grace);
    let answer = tokio::time::timeout_at(grace_ends, ask_worker(supervisor, id, request)).await;
    // An idle shutdown's stop that met a reopened gate is refused: the
    // worker may have started work since its idle answer, so it is left
    // serving (never killed); the next supervisor adopts it.
    if let Ok(Ok(Response::Quiesce {
        answer: QuiesceAnswer::Busy,
    })) = answer
    {
        tracing::warn!(
            session = id,
            "the worker refused the idle shutdown's stop (its gate reopened): left running"
        );
        return false;
    }
    wait_gone_until(units.as_ref(), id, identity, grace_ends).await;
    if still_there(units.as_ref(), id, identity).await {
        match &units {
            Some(units) => {
                // KillUnit, not StopUnit: a stop would wait out the unit's
                // own TimeoutStopSec before killing.
                if let Err(e) = units.kill(&worker_unit(id), libc::SIGKILL).await {
                    tracing::warn!(session = id, "{e}");
                }
            }
            None => {
                signal(identity, nix::sys::signal::Signal::SIGKILL);
            }
        }
        tracing::warn!(
            session = id,
            "the worker outlived its stop grace and was ended by force"
        );
        wait_gone(units.as_ref(), id, identity, TM.kill_route + TM.child_drain).await;
    }
    !still_there(units.as_ref(), id, identity).await
}

/// Whether the kernel of `id` lives (as it recorded itself, by identity).
pub fn kernel_lives(supervisor: &Shared, id: &str) -> bool {
    let files = supervisor.borrow().files(id);
    read_json::<KernelRecord>(&files.kernel())
        .ok()
        .flatten()
        .is_some_and(|record| is_alive(record.identity))
}

/// End the kernel of `id` that no worker drives (its worker left or was
/// stopped first): every process of the session ends. On the process
/// backend it is signalled by identity (its SIGTERM handler ends its
/// descendants); under systemd its unit is stopped.
pub async fn stop_lone_kernel(supervisor: &Shared, id: &str) {
    let files = supervisor.borrow().files(id);
    let Some(record) = read_json::<KernelRecord>(&files.kernel()).ok().flatten() else {
        return;
    };
    if !is_alive(record.identity) {
        return;
    }
    tracing::info!(session = id, "stopping the session's kernel");
    if units(supervisor).is_some() {
        if let Err(e) = crate::host::kernel_unit::stop(id).await {
            tracing::warn!(session = id, "{e}");
        }
        return;
    }
    signal(record.identity, nix::sys::signal::Signal::SIGTERM);
    let deadline = tokio::time::Instant::now() + Duration::from_millis(TM.stop_grace);
    while is_alive(record.identity) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    }
    if is_alive(record.identity) {
        signal(record.identity, nix::sys::signal::Signal::SIGKILL);
    }
}

/// After a worker's control connection ended: why, as far as the host
/// knows. Under systemd this waits (up to the stop grace) for the unit to
/// go down and reads its result: exit, signal or watchdog.
pub async fn why_worker_ended(supervisor: &Shared, id: &str) -> String {
    let Some(units) = units(supervisor) else {
        return "its worker ended".into();
    };
    let unit = worker_unit(id);
    match units
        .wait_for(
            &unit,
            Duration::from_millis(TM.stop_grace + TM.worker_unit_stop),
            UnitState::is_down,
        )
        .await
    {
        Ok(state) if state.is_down() => state.why_down(),
        Ok(state) => format!("its worker hung up while {unit} stayed {}", state.active),
        Err(e) => format!("its worker ended ({e})"),
    }
}

/// Under systemd: stop both units of `id` (the worker's, then the
/// kernel's: every process of the session ends) and forget that they
/// failed, so no trace of the session stays with the manager. Nothing to
/// do on the process backend.
pub async fn stop_session_units(supervisor: &Shared, id: &str) -> Result<(), String> {
    let Some(units) = units(supervisor) else {
        return Ok(());
    };
    let worker = worker_unit(id);
    units.stop(&worker).await?;
    let state = units
        .wait_for(&worker, UNIT_START_WITHIN, UnitState::is_down)
        .await?;
    if !state.is_down() {
        return Err(format!(
            "session {id}: {worker} is still {} after its stop",
            state.active
        ));
    }
    crate::host::kernel_unit::stop(id).await?;
    units.reset_failed(&worker).await;
    units.reset_failed(&kernel_unit(id)).await;
    Ok(())
}

/// What is left of session `id`'s processes, in words (none: nothing).
pub async fn processes_left(supervisor: &Shared, id: &str) -> Option<String> {
    if let Some(worker) = surviving_worker(supervisor, id).await {
        return Some(format!("its worker (pid {}) is still alive", worker.pid));
    }
    let files = supervisor.borrow().files(id);
    let kernel = read_json::<KernelRecord>(&files.kernel()).ok().flatten();
    if let Some(kernel) = kernel.filter(|k| is_alive(k.identity)) {
        return Some(format!(
            "its kernel (pid {}) is still alive",
            kernel.identity.pid
        ));
    }
    if let Some(units) = units(supervisor) {
        let unit = kernel_unit(id);
        if units.state(&unit).await.is_ok_and(|s| !s.is_down()) {
            return Some(format!("{unit} is still up"));
        }
    }
    None
}

/// Under systemd, the sessions of every live worker or kernel unit (the
/// process backend keeps its records in session directories instead).
pub async fn sessions_with_live_units(supervisor: &Shared) -> Vec<String> {
    let Some(units) = units(supervisor) else {
        return Vec::new();
    };
    let mut sessions = Vec::new();
    for (pattern, session_of) in [
        (
            WORKER_UNIT_PATTERN,
            session_of_unit as fn(&str) -> Option<String>,
        ),
        (KERNEL_UNIT_PATTERN, session_of_kernel_unit),
    ] {
        match units.live_units(pattern).await {
            Ok(live) => sessions.extend(live.iter().filter_map(|(unit, _)| session_of(unit))),
            Err(e) => tracing::warn!("{e}"),
        }
    }
    sessions
}
