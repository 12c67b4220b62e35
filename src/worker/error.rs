//! What fails in a worker, as one type: requests the session refuses, its
//! files, its backend and the link to its kernel. Its `Display` is the one
//! line a client (`Response::Error`) or the worker's log sees, the same
//! words the layer always used.

use crate::host::HostError;
use crate::session::SessionError;

/// A worker's failure.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// A request the session refuses, in words ("there is no run 4").
    #[error("{0}")]
    Refused(String),
    /// The session named has no metadata.
    #[error("session {0} does not exist")]
    NoSession(String),
    /// The session's files (its transcript, above all).
    #[error(transparent)]
    Session(#[from] SessionError),
    /// The backend (its socket, the kernel it starts).
    #[error(transparent)]
    Host(#[from] HostError),
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
    /// A setting, the spool or another layer that still speaks in words.
    #[error("{0}")]
    Other(String),
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
