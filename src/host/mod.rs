//! The host: what eukhe runs on. Two backends sit behind the same seams:
//!
//! - the process backend (the embedded default): workers are detached
//!   processes, busy evidence is `busy.log`, logs go to files;
//! - the systemd backend (`EUKHE_HOST=systemd`, set by the units): workers
//!   are `eukhe@<session>.service` units started through the user
//!   manager's D-Bus API, busy evidence and logs go to journald.

pub use error::HostError;

pub mod busy_journal;
pub mod cgroup;
pub mod error;
pub mod escape;
pub mod handoff;
pub mod journald;
pub mod kernel_unit;
pub mod kernels;
pub mod log;
pub mod process;
pub mod process_exit;
pub mod sd_journal;
pub mod socket;
pub mod systemd;
pub mod systemd1;
pub mod tty_wait;
pub mod unit_state;
pub(crate) mod units;
pub mod workers;

/// Which backend this process runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostKind {
    /// Workers and kernels are plain processes, watched by the supervisor.
    Process,
    /// Workers and kernels are units of the user's service manager.
    Systemd,
}

impl HostKind {
    /// The backend named by `EUKHE_HOST` (`systemd` or `process`; unset is
    /// `process`).
    pub fn from_env() -> Result<HostKind, HostError> {
        match std::env::var("EUKHE_HOST").as_deref() {
            Err(_) | Ok("") | Ok("process") => Ok(HostKind::Process),
            Ok("systemd") => Ok(HostKind::Systemd),
            Ok(other) => Err(HostError::UnknownBackend(other.to_string())),
        }
    }

    /// The backend's name, as `EUKHE_HOST` and `eukhe status` spell it.
    pub fn name(self) -> &'static str {
        match self {
            HostKind::Process => "process",
            HostKind::Systemd => "systemd",
        }
    }

    /// The busy-evidence journal of this backend.
    pub fn busy_journal(self, state_dir: &std::path::Path) -> busy_journal::BusyJournal {
        match self {
            HostKind::Process => busy_journal::BusyJournal::file(state_dir),
            HostKind::Systemd => busy_journal::BusyJournal::Journald,
        }
    }
}
