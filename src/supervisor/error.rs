//! What fails in the supervisor, as one type: requests it refuses, the
//! session files and backend it works through, its workers, its socket and
//! state directory. Its `Display` is the one line a client
//! (`Response::Error`) or the daemon's log sees, the same words the layer
//! always used.

use std::io;

use crate::host::HostError;
use crate::laws::timing::{duration_in_words, give_up_in_words, TM};
use crate::runtime::RuntimeError;
use crate::session::removed::no_longer_exists;
use crate::session::SessionError;

/// A supervisor's failure.
#[derive(Debug, thiserror::Error)]
pub enum SupervisorError {
    /// No session answers to the reference.
    #[error("no session {reference:?}: `eukhe ls` lists them")]
    NoSession {
        /// The id or name asked for.
        reference: String,
    },
    /// The session was removed (before or while the request waited).
    #[error("{}", no_longer_exists(id))]
    Removed {
        /// The id or name asked for.
        id: String,
    },
    /// More than one session has the name.
    #[error("{count} sessions are named {reference:?}: use an id (`eukhe ls`)")]
    Ambiguous {
        /// The name asked for.
        reference: String,
        /// How many sessions have it.
        count: usize,
    },
    /// The session's slot went away while a request waited for its worker.
    #[error("no session {id}")]
    Vanished {
        /// The session.
        id: String,
    },
    /// The session was given up by the restart budget.
    #[error(
        "session {id} was given up after failing {}{because}; `eukhe restart {id}` starts it afresh",
        give_up_in_words()
    )]
    GivenUp {
        /// The session.
        id: String,
        /// Its last failure, as " (the last attempt: ...)", or empty.
        because: String,
    },
    /// The session's files cannot be read.
    #[error("session {id} cannot start: {problem} (mend or move the file; the next request reads it again)")]
    Damaged {
        /// The session.
        id: String,
        /// What is wrong with its files.
        problem: String,
    },
    /// Its worker did not come up within the worker-start wait.
    #[error(
        "session {id}: its worker did not start within {}{because}",
        duration_in_words(TM.worker.worker_start_wait)
    )]
    NotStarted {
        /// The session.
        id: String,
        /// Its last failure, as " (the last attempt: ...)", or empty.
        because: String,
    },
    /// The session's idle stop or removal outlasted `session_settle`.
    #[error(
        "session {id}: its stop did not finish within {}",
        duration_in_words(TM.supervisor.session_settle)
    )]
    StopTooLong {
        /// The session.
        id: String,
    },
    /// A removed session's processes outlived their stop (which ones).
    #[error("{0}")]
    ProcessesLeft(String),
    /// A new session's name is another session's id.
    #[error("session name {name:?} is the id of another session: choose another name")]
    NameIsId {
        /// The name asked for.
        name: String,
    },
    /// A new session's name is taken (`given_up`: by a session given up).
    #[error("{}", name_taken(name, id, *given_up))]
    NameTaken {
        /// The name asked for.
        name: String,
        /// The session that has it.
        id: String,
        /// Whether that session was given up.
        given_up: bool,
    },
    /// A peer of another user connected.
    #[error("connection refused: uid {uid} is not the daemon's uid {own_uid}")]
    ForeignUser {
        /// The peer's uid.
        uid: u32,
        /// The daemon's.
        own_uid: u32,
    },
    /// A client of another protocol asked for more than hello and shutdown.
    #[error(transparent)]
    Protocol(#[from] crate::protocol::hello::ProtocolMismatch),
    /// On the systemd backend the daemon was started without its socket.
    #[error("on the systemd backend the socket comes from eukhe.socket: `systemctl --user start eukhe.socket`")]
    NoActivatedSocket,
    /// The state, socket or config paths (as `paths` words it).
    #[error(transparent)]
    Paths(#[from] crate::paths::PathsError),
    /// The settings file (as `config` words it).
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// The async runtime could not start.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
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
}

/// The refusal of a name another session has.
fn name_taken(name: &str, id: &str, given_up: bool) -> String {
    if given_up {
        format!("a session named {name:?} exists ({id}) and was given up; `eukhe restart {id}` starts it afresh")
    } else {
        format!("a session named {name:?} exists already ({id})")
    }
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
