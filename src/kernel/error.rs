//! What fails in a kernel, as types a caller can match. Each `Display` is
//! one line: what happened, with the path, job or system answer it
//! concerns.

use std::io;
use std::path::PathBuf;

use crate::host::HostError;
use crate::runtime::RuntimeError;
pub use crate::session::spool::{BadRecord, SpoolError};
use crate::session::SessionError;

/// A kernel's failure.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    /// The session named has no metadata (nor is it a spare).
    #[error("session {0} does not exist")]
    NoSession(String),
    /// Another kernel of the session holds its lock.
    #[error("kernel: session {} already has a live kernel ({} is locked)", dir.display(), lock.display())]
    Locked {
        /// The session's directory.
        dir: PathBuf,
        /// Its kernel lock.
        lock: PathBuf,
    },
    /// A spare's directory has no session yet: no first snapshot can be made.
    #[error("kernel: {} has no session yet (a spare no `eukhe new` claimed)", .0.display())]
    Unclaimed(PathBuf),
    /// A call on the kernel's own process failed (`what`: "fork", "make a
    /// pipe", "start bash", "become a subreaper").
    #[error("kernel: cannot {what}: {source}")]
    Process {
        /// What the kernel could not do.
        what: &'static str,
        /// The system's answer.
        #[source]
        source: io::Error,
    },
    /// The detached kernel ended before it said it serves.
    #[error("kernel: it ended before it served")]
    EndedBeforeServing,
    /// The detached kernel said why it cannot serve (its own error's line).
    #[error("{0}")]
    DetachedFailed(String),
    /// A file of the kernel's scratch directory (a FIFO, a restore script).
    #[error("kernel: cannot {action} {}: {source}", path.display())]
    Scratch {
        /// What was being done, as "make" or "write".
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The system's answer.
        #[source]
        source: io::Error,
    },
    /// A job's command holds a NUL byte.
    #[error("{}", crate::protocol::kernel::NUL_IN_COMMAND)]
    NulInCommand,
    /// A job was handed to a stopping kernel.
    #[error("the kernel is stopping")]
    Stopping,
    /// Writing a job to its shell (or its template) failed.
    #[error("kernel: cannot hand {job} to its shell: {source}")]
    Hand {
        /// The job, as `r2` or `b1-...`.
        job: String,
        /// The system's answer.
        #[source]
        source: io::Error,
    },
    /// Asking the kernel's shell for a template failed.
    #[error("kernel: cannot ask for a template: {0}")]
    AskTemplate(#[source] io::Error),
    /// The job spool.
    #[error(transparent)]
    Spool(#[from] SpoolError),
    /// The session's files.
    #[error(transparent)]
    Session(#[from] SessionError),
    /// The backend (the kernel's socket, its host kind).
    #[error(transparent)]
    Host(#[from] HostError),
    /// The runtime could not start.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// The daemon's paths, as their layer says.
    #[error(transparent)]
    Paths(#[from] crate::paths::PathsError),
    /// The configuration file, as its layer says.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
}

/// The layers that still speak in words take it as its line.
impl From<KernelError> for String {
    fn from(e: KernelError) -> String {
        e.to_string()
    }
}

/// The layers that still speak in words take it as its line.
impl From<SpoolError> for String {
    fn from(e: SpoolError) -> String {
        e.to_string()
    }
}
