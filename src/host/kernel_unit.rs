//! Kernels as units: on the systemd backend each session's kernel is
//! `eukhe-kernel@<session>.service`, started and stopped through the user
//! manager's D-Bus API like the worker units, so stopping, restarting or
//! losing `eukhe@<session>` leaves it (and its runs) running.
//!
//! Each call connects to the user manager once and lets go of the
//! connection when it returns: a worker starts its kernel rarely (at its
//! own start, and after the kernel died), so it holds no connection for
//! the rest of its life.

use super::HostError;
use std::time::Duration;

use crate::laws::limits::ResourceLimits;
use crate::laws::timing::TM;

use super::escape::kernel_unit;
use super::unit_state::ServiceResult;
use super::units::{UnitState, UserManager};

/// How long a kernel unit may take to come up: a stop still in progress
/// (the unit's `TimeoutStopSec`, 6 s, while it empties its cgroup) and
/// then the start itself (`Type=notify`: until the kernel's READY=1).
const START_WITHIN: Duration = Duration::from_millis(TM.kernel.kernel_start_wait);

/// How long a kernel unit may take to go down: its `TimeoutStopSec` (6 s),
/// after which the manager SIGKILLs the cgroup, with a margin.
const STOP_WITHIN: Duration = Duration::from_millis(TM.kernel.kernel_stop_wait);

/// Why a kernel unit is not up, in words for a log line.
fn why_not_up(unit: &str, state: &UnitState) -> HostError {
    let why = match &state.result {
        ServiceResult::Success if state.is_down() => "stopped".to_string(),
        ServiceResult::ExitCode => "its kernel exited with an error".to_string(),
        killed if killed.killed() => "its kernel was killed by a signal".to_string(),
        ServiceResult::Timeout => "it timed out".to_string(),
        ServiceResult::Success => format!("it is {} ({})", state.active, state.sub),
        other => format!("it failed ({other})"),
    };
    HostError::State {
        what: unit.to_string(),
        state: format!("did not come up: {why}"),
    }
}

/// Start the kernel unit of `session` and return once it is active (the
/// kernel serves its socket) or has failed.
pub async fn start(session: &str, limits: &ResourceLimits) -> Result<(), HostError> {
    let unit = kernel_unit(session);
    let units = UserManager::connect().await?;
    // The session's restart budget decides; systemd's start limit must not
    // refuse a start the budget allows.
    units.reset_failed(&unit).await;
    if !limits.is_none() {
        // Set at every start: runtime properties do not outlive a reboot.
        units.set_limits(&unit, limits).await?;
    }
    let state = units.start_and_wait(&unit, START_WITHIN).await?;
    if state.is_up() {
        tracing::info!("started the session's kernel ({unit})");
        Ok(())
    } else {
        Err(why_not_up(&unit, &state))
    }
}

/// Stop the kernel unit of `session` (every process of the session ends:
/// the kernel's teardown, then the manager empties the unit's cgroup) and
/// return once it is down. Stopping a kernel that does not run is a no-op.
pub async fn stop(session: &str) -> Result<(), HostError> {
    let unit = kernel_unit(session);
    let units = UserManager::connect().await?;
    units.stop(&unit).await?;
    let state = units
        .wait_for(&unit, STOP_WITHIN, UnitState::is_down)
        .await?;
    if state.is_down() {
        Ok(())
    } else {
        Err(HostError::State {
            what: unit,
            state: format!(
                "is still {} after {} s",
                state.active,
                STOP_WITHIN.as_secs()
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::unit_state::{ActiveState, SubState};

    fn state(active: &str, sub: &str, result: &str) -> UnitState {
        UnitState {
            active: ActiveState::parse(active),
            sub: SubState::parse(sub),
            result: ServiceResult::parse(result),
            main_pid: 0,
        }
    }

    #[test]
    fn a_kernel_unit_that_is_not_up_says_why() {
        let unit = "eukhe-kernel@1a2b3c4d.service";
        let why = |s: UnitState| why_not_up(unit, &s).to_string();
        assert_eq!(
            why(state("failed", "failed", "exit-code")),
            "eukhe-kernel@1a2b3c4d.service did not come up: its kernel exited with an error"
        );
        assert!(why(state("failed", "failed", "signal")).ends_with("killed by a signal"));
        assert!(why(state("inactive", "dead", "success")).ends_with(": stopped"));
        assert!(why(state("activating", "start", "success")).ends_with("it is activating (start)"));
        assert!(why(state("failed", "failed", "timeout")).ends_with("it timed out"));
        assert!(why(state("failed", "failed", "resources")).ends_with("it failed (resources)"));
    }
}
