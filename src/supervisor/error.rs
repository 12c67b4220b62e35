//! What fails in the supervisor, as one type: requests it refuses, the
//! session files and backend it works through, its workers, its socket and
//! state directory. Its `Display` is the one line a client
//! (`Response::Error`) or the daemon's log sees, the same words the layer
//! always used.

use std::io;

use crate::host::HostError;
use crate::session::SessionError;

/// A supervisor's failure.
#[derive(Debug, thiserror::Error)]
pub enum SupervisorError {
    /// A request refused, in words (no such session, a name taken, a
    /// session given up or damaged, a worker that did not come up).
    #[error("{0}")]
    Refused(String),
    /// The session files.
    #[error(transparent)]
    Session(#[from] SessionError),
    /// The backend.
    #[error(transparent)]
    Host(#[from] HostError),
    /// Speaking with a session's worker.
    #[error("session {id}: {detail}")]
    Worker {
        /// The session.
        id: String,
        /// What went wrong, as the wire or the worker said it.
        detail: String,
    },
    /// A socket or signal call of the daemon.
    #[error("{what}: {source}")]
    Io {
        /// What was being done, on which path.
        what: String,
        /// The system's answer.
        #[source]
        source: io::Error,
    },
    /// Another daemon holds the state directory or listens on the socket
    /// (one line saying which, and what to do).
    #[error("{0}")]
    Taken(String),
    /// Settings, paths or another layer that still speaks in words.
    #[error("{0}")]
    Other(String),
}

impl SupervisorError {
    /// An I/O failure of `what`.
    pub fn io(what: impl Into<String>, source: io::Error) -> SupervisorError {
        SupervisorError::Io {
            what: what.into(),
            source,
        }
    }

    /// A failure speaking with the worker of `id`.
    pub fn worker(id: &str, detail: impl std::fmt::Display) -> SupervisorError {
        SupervisorError::Worker {
            id: id.to_string(),
            detail: detail.to_string(),
        }
    }
}

/// Clients and the other layers take a supervisor's failure as its line.
impl From<SupervisorError> for String {
    fn from(e: SupervisorError) -> String {
        e.to_string()
    }
}
