//! Where a unit stands, as the user manager says it, parsed once at the
//! edge (`UserManager::state`) into enums the backend decides on.
//!
//! systemd documents closed sets for these properties but adds values in
//! new releases (`reloading` came late; `refreshing` later). A value this
//! build does not know is kept as `Unknown` with its word, so a log line
//! still names it; no decision treats an unknown value as a known one.

use std::fmt;

/// A unit's `ActiveState`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ActiveState {
    /// Started and running.
    Active,
    /// Being started.
    Activating,
    /// Being stopped.
    Deactivating,
    /// Not running (the default of a unit never started).
    #[default]
    Inactive,
    /// Not running, after a failure.
    Failed,
    /// Reloading its configuration.
    Reloading,
    /// A value systemd added after this build: kept in its words.
    Unknown(Box<str>),
}

/// A service's `SubState`, where eukhe reads it (log lines); the states a
/// decision needs are `ActiveState`'s.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SubState(Box<str>);

/// A service's `Result`: why it last went down (or `success`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ServiceResult {
    /// It ended as asked, or never failed.
    #[default]
    Success,
    /// Its process exited with a non-zero status.
    ExitCode,
    /// Its process was killed by a signal.
    Signal,
    /// Its process dumped core.
    CoreDump,
    /// It missed its watchdog.
    Watchdog,
    /// A start or stop timed out.
    Timeout,
    /// The manager lacked resources to start it (or its main pid vanished).
    Resources,
    /// Its start limit was hit.
    StartLimitHit,
    /// A value systemd added after this build, or one eukhe does not
    /// tell apart (`protocol`, `oom-kill`, ...): kept in its words.
    Unknown(Box<str>),
}

/// Where a unit stands, as the manager says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UnitState {
    /// Whether it runs, is starting, stopping or down.
    pub active: ActiveState,
    /// The finer state of its type, for log lines.
    pub sub: SubState,
    /// The service's result.
    pub result: ServiceResult,
    /// The main process, 0 when there is none.
    pub main_pid: u32,
}

impl ActiveState {
    /// The state systemd names `word`.
    pub fn parse(word: &str) -> ActiveState {
        match word {
            "active" => ActiveState::Active,
            "activating" => ActiveState::Activating,
            "deactivating" => ActiveState::Deactivating,
            "inactive" => ActiveState::Inactive,
            "failed" => ActiveState::Failed,
            "reloading" => ActiveState::Reloading,
            other => ActiveState::Unknown(other.into()),
        }
    }

    /// systemd's word for it.
    pub fn word(&self) -> &str {
        match self {
            ActiveState::Active => "active",
            ActiveState::Activating => "activating",
            ActiveState::Deactivating => "deactivating",
            ActiveState::Inactive => "inactive",
            ActiveState::Failed => "failed",
            ActiveState::Reloading => "reloading",
            ActiveState::Unknown(word) => word,
        }
    }
}

impl SubState {
    /// The sub-state systemd names `word`.
    pub fn parse(word: &str) -> SubState {
        SubState(word.into())
    }
}

impl ServiceResult {
    /// The result systemd names `word` (empty on units that have none,
    /// read as success).
    pub fn parse(word: &str) -> ServiceResult {
        match word {
            "success" | "" => ServiceResult::Success,
            "exit-code" => ServiceResult::ExitCode,
            "signal" => ServiceResult::Signal,
            "core-dump" => ServiceResult::CoreDump,
            "watchdog" => ServiceResult::Watchdog,
            "timeout" => ServiceResult::Timeout,
            "resources" => ServiceResult::Resources,
            "start-limit-hit" => ServiceResult::StartLimitHit,
            other => ServiceResult::Unknown(other.into()),
        }
    }

    /// systemd's word for it.
    pub fn word(&self) -> &str {
        match self {
            ServiceResult::Success => "success",
            ServiceResult::ExitCode => "exit-code",
            ServiceResult::Signal => "signal",
            ServiceResult::CoreDump => "core-dump",
            ServiceResult::Watchdog => "watchdog",
            ServiceResult::Timeout => "timeout",
            ServiceResult::Resources => "resources",
            ServiceResult::StartLimitHit => "start-limit-hit",
            ServiceResult::Unknown(word) => word,
        }
    }

    /// It went down by a signal or a core dump.
    pub fn killed(&self) -> bool {
        matches!(self, ServiceResult::Signal | ServiceResult::CoreDump)
    }
}

impl fmt::Display for ActiveState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.word())
    }
}

impl fmt::Display for SubState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Display for ServiceResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.word())
    }
}

impl UnitState {
    /// The unit runs (for `Type=notify`: it said READY=1).
    pub fn is_up(&self) -> bool {
        self.active == ActiveState::Active
    }

    /// The unit has no processes left to wait for.
    pub fn is_down(&self) -> bool {
        matches!(self.active, ActiveState::Inactive | ActiveState::Failed)
    }

    /// Why a unit that went down did so, in words for a log line.
    pub fn why_down(&self) -> String {
        match &self.result {
            ServiceResult::Success => "its worker unit stopped".into(),
            ServiceResult::ExitCode => "its worker unit exited with an error".into(),
            killed if killed.killed() => "its worker unit was killed by a signal".into(),
            ServiceResult::Watchdog => "its worker unit was killed by the watchdog (hung)".into(),
            ServiceResult::Timeout => "its worker unit timed out".into(),
            other => format!("its worker unit failed ({other})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_word_systemd_documents_reads_back_as_itself() {
        for word in [
            "active",
            "activating",
            "deactivating",
            "inactive",
            "failed",
            "reloading",
        ] {
            let state = ActiveState::parse(word);
            assert!(!matches!(state, ActiveState::Unknown(_)), "{word}");
            assert_eq!(state.to_string(), word);
        }
        for word in [
            "success",
            "exit-code",
            "signal",
            "core-dump",
            "watchdog",
            "timeout",
            "resources",
            "start-limit-hit",
        ] {
            let result = ServiceResult::parse(word);
            assert!(!matches!(result, ServiceResult::Unknown(_)), "{word}");
            assert_eq!(result.to_string(), word);
        }
    }

    #[test]
    fn a_word_systemd_adds_later_stays_visible_and_decides_nothing() {
        let state = UnitState {
            active: ActiveState::parse("refreshing"),
            sub: SubState::parse("refresh"),
            result: ServiceResult::parse("oom-kill"),
            main_pid: 0,
        };
        assert_eq!(state.active.to_string(), "refreshing");
        assert!(!state.is_up() && !state.is_down());
        assert_eq!(state.why_down(), "its worker unit failed (oom-kill)");
    }

    #[test]
    fn a_worker_unit_that_went_down_says_why() {
        let down = |result: &str| UnitState {
            active: ActiveState::Failed,
            result: ServiceResult::parse(result),
            ..UnitState::default()
        };
        assert_eq!(down("success").why_down(), "its worker unit stopped");
        assert_eq!(down("").why_down(), "its worker unit stopped");
        assert_eq!(
            down("core-dump").why_down(),
            "its worker unit was killed by a signal"
        );
        assert_eq!(
            down("watchdog").why_down(),
            "its worker unit was killed by the watchdog (hung)"
        );
    }
}
