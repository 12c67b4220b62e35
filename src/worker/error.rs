//! What fails in a worker, as one type: requests the session refuses, its
//! files, its backend and the link to its kernel. Its `Display` is the one
//! line a client (`Response::Error`) or the worker's log sees, the same
//! words the layer always used.

use crate::host::HostError;
use crate::laws::runs::RunId;
use crate::runtime::RuntimeError;
use crate::session::SessionError;

/// A worker's failure.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// `withdraw` named a run the session never had.
    #[error("there is no run {0}")]
    NoRun(RunId),
    /// `withdraw` named a run withdrawn before.
    #[error("run {0} is already withdrawn")]
    AlreadyWithdrawn(RunId),
    /// `withdraw` named a run that has started: only queued input goes.
    #[error("run {0} is not queued: it has started")]
    RunStarted(RunId),
    /// `cancel` named an input number the session never gave.
    #[error("{}", crate::session::log_query::no_input(*.0))]
    NoInput(RunId),
    /// `cancel` named an input that has ended.
    #[error("input {0} is neither running nor queued: it has ended")]
    InputEnded(RunId),
    /// The session records an engine this build does not have.
    #[error("no engine {name:?} in this build (engines: {known})")]
    NoEngine {
        /// The session's engine.
        name: String,
        /// The engines this build has, in words.
        known: String,
    },
    /// A peer speaks another protocol version (the line says which).
    #[error(transparent)]
    Protocol(#[from] crate::protocol::hello::ProtocolMismatch),
    /// The session named has no metadata.
    #[error("session {0} does not exist")]
    NoSession(String),
    /// The session's files (its transcript, above all).
    #[error(transparent)]
    Session(#[from] SessionError),
    /// The backend (its socket, the kernel it starts).
    #[error(transparent)]
    Host(#[from] HostError),
    /// The process's runtime could not start.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// Where the state lives (the environment names no usable directory).
    #[error(transparent)]
    Paths(#[from] crate::paths::PathsError),
    /// The configuration file, or a setting passed in the environment.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// The kernel's spool: opening it, or reading a job's records.
    #[error(transparent)]
    Spool(#[from] crate::session::spool::SpoolError),
    /// Speaking with the session's kernel.
    #[error("kernel of session {id}: {detail}")]
    Kernel {
        /// The session.
        id: String,
        /// What went wrong, as the wire or the kernel said it.
        detail: String,
    },
    /// The session's kernel is gone, and the worker with it.
    #[error("the session's kernel is gone ({0})")]
    KernelGone(String),
    /// A step of something larger (`what`), as "cannot start run 3".
    #[error("{what}: {source}")]
    Within {
        /// The larger thing.
        what: String,
        /// The step that failed.
        #[source]
        source: Box<WorkerError>,
    },
}

impl WorkerError {
    /// This failure as a step of `what`.
    pub fn within(self, what: impl Into<String>) -> WorkerError {
        WorkerError::Within {
            what: what.into(),
            source: Box::new(self),
        }
    }
}

/// The client and the other layers take a worker's failure as its line.
impl From<WorkerError> for String {
    fn from(e: WorkerError) -> String {
        e.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_say_the_lines_clients_always_read() {
        assert_eq!(WorkerError::NoRun(4).to_string(), "there is no run 4");
        assert_eq!(
            WorkerError::AlreadyWithdrawn(2).to_string(),
            "run 2 is already withdrawn"
        );
        assert_eq!(
            WorkerError::RunStarted(3).to_string(),
            "run 3 is not queued: it has started"
        );
        assert_eq!(
            WorkerError::NoInput(9).to_string(),
            "the session has no input 9"
        );
        assert_eq!(
            WorkerError::InputEnded(1).to_string(),
            "input 1 is neither running nor queued: it has ended"
        );
        let engine = WorkerError::NoEngine {
            name: "chat".into(),
            known: "shell".into(),
        };
        assert_eq!(
            engine.to_string(),
            "no engine \"chat\" in this build (engines: shell)"
        );
    }
}
