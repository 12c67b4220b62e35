//! Workers as `eukhe@<session>.service` units of the user manager (and
//! kernels as `eukhe-kernel@<session>.service`), through its D-Bus API:
//! started, listed, killed and read back there; the units' `WatchdogSec`
//! watches them.

use super::super::HostError;
use std::collections::HashMap;
use std::time::Duration;

use super::{HostFuture, WorkerHost};
use crate::config::Config;
use crate::host::busy_journal::BusyJournal;
use crate::host::escape::{
    kernel_unit, session_of_kernel_unit, session_of_unit, worker_unit, KERNEL_UNIT_PATTERN,
    WORKER_UNIT_PATTERN,
};
use crate::host::process::identity_of;
use crate::host::units::{UnitState, UserManager};
use crate::host::HostKind;
use crate::host::{kernel_unit, kernels};
use crate::laws::adoption::ProcessIdentity;
use crate::laws::timing::TM;

/// How long a worker unit may take to become active (Type=notify: until
/// the worker's READY=1) before it counts as failed, or to go down after
/// its stop.
const UNIT_START_WITHIN: Duration = Duration::from_millis(TM.worker.worker_start_wait);

/// The systemd backend: one connection to the user manager.
pub struct SystemdHost {
    units: UserManager,
}

/// A unit state's process, as an identity (a unit without a main process
/// still counts as live, with pid 0, so it is stopped before a launch).
fn unit_identity(state: &UnitState) -> ProcessIdentity {
    identity_of(state.main_pid).unwrap_or(ProcessIdentity {
        pid: state.main_pid,
        start_time: 0,
    })
}

impl SystemdHost {
    /// Connect to this user's service manager.
    pub async fn connect() -> Result<SystemdHost, HostError> {
        Ok(SystemdHost {
            units: UserManager::connect().await?,
        })
    }

    async fn worker_up(&self, id: &str) -> bool {
        self.units
            .state(&worker_unit(id))
            .await
            .is_ok_and(|s| !s.is_down())
    }
}

impl WorkerHost for SystemdHost {
    fn kind(&self) -> HostKind {
        HostKind::Systemd
    }

    fn start<'a>(&'a self, id: &'a str) -> HostFuture<'a, Result<(), HostError>> {
        Box::pin(async move {
            let unit = worker_unit(id);
            // The supervisor's restart budget decides; systemd's start
            // limit must not refuse a restart the budget allows.
            self.units.reset_failed(&unit).await;
            // Until the start job is done: a unit read just after
            // `StartUnit` may still be inactive, its job queued.
            let state = self.units.start_and_wait(&unit, UNIT_START_WITHIN).await?;
            if state.is_up() {
                Ok(())
            } else {
                Err(HostError::State {
                    what: format!("session {id}:"),
                    state: state.why_down(),
                })
            }
        })
    }

    fn find<'a>(&'a self, id: &'a str) -> HostFuture<'a, Option<ProcessIdentity>> {
        Box::pin(async move {
            let state = self.units.state(&worker_unit(id)).await.ok()?;
            (!state.is_down()).then(|| unit_identity(&state))
        })
    }

    fn live<'a>(
        &'a self,
        _known: Vec<String>,
    ) -> HostFuture<'a, Result<HashMap<String, ProcessIdentity>, HostError>> {
        Box::pin(async move {
            Ok(self
                .units
                .live_units(WORKER_UNIT_PATTERN)
                .await?
                .into_iter()
                .filter_map(|(unit, state)| Some((session_of_unit(&unit)?, unit_identity(&state))))
                .collect())
        })
    }

    fn still_there<'a>(&'a self, id: &'a str, _identity: ProcessIdentity) -> HostFuture<'a, bool> {
        Box::pin(self.worker_up(id))
    }

    /// Until the worker's unit is down: its changes come as the user
    /// manager's signals (`UserManager::wait_for`), so nothing is polled.
    fn wait_gone<'a>(
        &'a self,
        id: &'a str,
        _identity: ProcessIdentity,
        deadline: tokio::time::Instant,
    ) -> HostFuture<'a, ()> {
        Box::pin(async move {
            let within = deadline.saturating_duration_since(tokio::time::Instant::now());
            let _ = self
                .units
                .wait_for(&worker_unit(id), within, UnitState::is_down)
                .await;
        })
    }

    /// KillUnit, not StopUnit: a stop would wait out the unit's own
    /// TimeoutStopSec before killing.
    fn kill<'a>(&'a self, id: &'a str, _identity: ProcessIdentity) -> HostFuture<'a, ()> {
        Box::pin(async move {
            if let Err(e) = self.units.kill(&worker_unit(id), libc::SIGKILL).await {
                tracing::warn!(session = id, "{e}");
            }
        })
    }

    fn why_ended<'a>(&'a self, id: &'a str) -> HostFuture<'a, String> {
        Box::pin(async move {
            let unit = worker_unit(id);
            let within = Duration::from_millis(TM.worker.worker_stop_wait);
            match self.units.wait_for(&unit, within, UnitState::is_down).await {
                Ok(state) if state.is_down() => state.why_down(),
                Ok(state) => format!("its worker hung up while {unit} stayed {}", state.active),
                Err(e) => format!("its worker ended ({e})"),
            }
        })
    }

    fn busy_journal(&self) -> BusyJournal {
        BusyJournal::Journald
    }

    fn watchdog(&self, _config: &Config) -> Option<Duration> {
        None
    }

    fn stop_kernel<'a>(&'a self, id: &'a str, _kernel: ProcessIdentity) -> HostFuture<'a, ()> {
        Box::pin(kernels::stop_unit(id))
    }

    /// Stop both units of `id` (the worker's, then the kernel's: every
    /// process of the session ends) and forget that they failed.
    fn forget_session<'a>(&'a self, id: &'a str) -> HostFuture<'a, Result<(), HostError>> {
        Box::pin(async move {
            let worker = worker_unit(id);
            self.units.stop(&worker).await?;
            let state = self
                .units
                .wait_for(&worker, UNIT_START_WITHIN, UnitState::is_down)
                .await?;
            if !state.is_down() {
                return Err(HostError::State {
                    what: format!("session {id}: {worker}"),
                    state: format!("is still {} after its stop", state.active),
                });
            }
            kernel_unit::stop(id).await?;
            self.units.reset_failed(&worker).await;
            self.units.reset_failed(&kernel_unit(id)).await;
            Ok(())
        })
    }

    fn left_of_session<'a>(&'a self, id: &'a str) -> HostFuture<'a, Option<String>> {
        Box::pin(async move {
            let unit = kernel_unit(id);
            let up = self.units.state(&unit).await.is_ok_and(|s| !s.is_down());
            up.then(|| format!("{unit} is still up"))
        })
    }

    fn sessions_running<'a>(&'a self) -> HostFuture<'a, Vec<String>> {
        Box::pin(async move {
            let mut sessions = Vec::new();
            for (pattern, session_of) in [
                (
                    WORKER_UNIT_PATTERN,
                    session_of_unit as fn(&str) -> Option<String>,
                ),
                (KERNEL_UNIT_PATTERN, session_of_kernel_unit),
            ] {
                match self.units.live_units(pattern).await {
                    Ok(live) => {
                        sessions.extend(live.iter().filter_map(|(unit, _)| session_of(unit)))
                    }
                    Err(e) => tracing::warn!("{e}"),
                }
            }
            sessions
        })
    }
}
