//! What fails in a backend, as one type: the user manager, the journal,
//! and the sockets, files and processes a backend makes. Each variant says
//! what failed and on which unit, path or session; its `Display` is the
//! one line a user or a log sees (the same words the layer always used).

use std::io;

/// A backend's failure.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// The user manager cannot be reached on the user bus.
    #[error(
        "cannot reach the user manager on the user bus (is dbus-user-session installed?): {0}"
    )]
    UserBus(#[source] Box<zbus::Error>),
    /// A call on a unit (or a pattern of units) through the user manager.
    #[error("{action} {unit} through the user manager: {source}")]
    Manager {
        /// What was asked, as "cannot start".
        action: String,
        /// The unit, or the pattern of units, it was asked of.
        unit: String,
        /// What the manager (or the bus) answered.
        #[source]
        source: Box<zbus::Error>,
    },
    /// Following the user manager's signals.
    #[error("{doing} the user manager's signals: {source}")]
    Signals {
        /// "listening to" or "subscribing to".
        doing: &'static str,
        /// What the bus answered.
        #[source]
        source: Box<zbus::Error>,
    },
    /// A unit or process is not in the state asked for (`what` names it,
    /// `state` says how it is).
    #[error("{what} {state}")]
    State {
        /// The unit, process or session.
        what: String,
        /// How it is, as "did not come up: it timed out".
        state: String,
    },
    /// A file, socket or process call.
    #[error("{what}: {source}")]
    Io {
        /// What was being done, on which path or session.
        what: String,
        /// The system's answer.
        #[source]
        source: io::Error,
    },
    /// Reading the journal through libsystemd.
    #[error("{0}")]
    Journal(String),
    /// Sending an entry to journald.
    /// (The crate's words name the socket.)
    #[error("cannot write to journald: {0}")]
    Journald(#[source] libsystemd::errors::SdError),
    /// A journal field name journald would drop or keeps for itself.
    #[error("{0:?} is not a journal field name")]
    FieldName(String),
    /// A record that cannot be encoded.
    #[error("{0}")]
    Encode(#[from] serde_json::Error),
    /// A failure of a step of something larger (`what`).
    #[error("{what}: {source}")]
    Within {
        /// The larger thing.
        what: String,
        /// The step that failed.
        #[source]
        source: Box<HostError>,
    },
    /// A session file the backend keeps (a log, a directory, a socket's).
    #[error(transparent)]
    Session(#[from] crate::session::SessionError),
    /// `EUKHE_HOST` names no backend.
    #[error("EUKHE_HOST={0:?} is not a backend: use \"systemd\" or \"process\"")]
    UnknownBackend(String),
    /// Socket activation passed several sockets, none of them eukhe's.
    #[error("socket activation passed {0} sockets and none is named eukhe.socket")]
    NoEukheSocket(usize),
    /// The activated socket was taken before.
    #[error("the activated socket was already taken")]
    ActivatedSocketTaken,
}

impl HostError {
    /// An I/O failure of `what`.
    pub fn io(what: impl Into<String>, source: io::Error) -> HostError {
        HostError::Io {
            what: what.into(),
            source,
        }
    }

    /// This failure as a step of `what`.
    pub fn within(self, what: impl Into<String>) -> HostError {
        HostError::Within {
            what: what.into(),
            source: Box::new(self),
        }
    }
}

/// Layers that still speak in strings take a backend's failure as its line.
impl From<HostError> for String {
    fn from(e: HostError) -> String {
        e.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_reads_as_one_line_naming_what_failed_and_where() {
        let refused = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        let step = HostError::io("journald at /run/systemd/journal/socket", refused);
        assert_eq!(
            step.within("busy evidence of session 1a2b3c4d").to_string(),
            "busy evidence of session 1a2b3c4d: journald at /run/systemd/journal/socket: \
             permission denied"
        );
        let not_up = HostError::State {
            what: "eukhe-kernel@1a2b3c4d.service".into(),
            state: "did not come up: it timed out".into(),
        };
        let line: String = not_up.into();
        assert_eq!(
            line,
            "eukhe-kernel@1a2b3c4d.service did not come up: it timed out"
        );
    }
}
