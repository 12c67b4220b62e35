//! What fails in a session's files, as one type: the transcript, the
//! JSON files beside it, names and settings a user gives. Each variant
//! says what failed and on which path or session; its `Display` is the one
//! line a user or a log sees (the same words the layer always used).

use std::io;
use std::path::PathBuf;

/// A session layer's failure.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// Reading or writing a transcript.
    #[error("transcript {}: {source}", path.display())]
    Transcript {
        /// The transcript (or its first-format file).
        path: PathBuf,
        /// The system's answer.
        #[source]
        source: io::Error,
    },
    /// One step of opening, creating or syncing a transcript.
    #[error("transcript {}: {step}: {source}", path.display())]
    TranscriptStep {
        /// The transcript.
        path: PathBuf,
        /// The step, as "sync" or "cut the torn tail".
        step: &'static str,
        /// The system's answer.
        #[source]
        source: io::Error,
    },
    /// A file that is not a transcript of this format.
    #[error("transcript {}: not a v2 transcript (bad magic)", path.display())]
    NotATranscript {
        /// The file.
        path: PathBuf,
    },
    /// A file or directory call, as `cannot write <path>: <error>`.
    #[error("{action} {}: {source}", path.display())]
    File {
        /// What was being done, as "cannot write".
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The system's answer.
        #[source]
        source: io::Error,
    },
    /// A JSON file whose contents are not what it should hold.
    #[error("{}: {source}", path.display())]
    Json {
        /// The file.
        path: PathBuf,
        /// Why it cannot be read.
        #[source]
        source: serde_json::Error,
    },
    /// A file a session cannot do without is missing.
    #[error("{}: missing", path.display())]
    Missing {
        /// The file.
        path: PathBuf,
    },
    /// A session's directory cannot be moved aside to be deleted.
    #[error("session {id}: cannot move {} to {}: {source}", from.display(), to.display())]
    MoveAside {
        /// The session.
        id: String,
        /// Its directory.
        from: PathBuf,
        /// Where it was to go.
        to: PathBuf,
        /// The system's answer.
        #[source]
        source: io::Error,
    },
    /// A record that cannot be encoded.
    #[error("{0}")]
    Encode(#[from] serde_json::Error),
    /// A failure of a step of something larger (`what`).
    #[error("{what}: {source}")]
    Within {
        /// The larger thing, as `transcript <path>`.
        what: String,
        /// The step that failed.
        #[source]
        source: Box<SessionError>,
    },
    /// Input refused (a session name, an `--env` assignment, an entry or
    /// a state capture that cannot be kept), in words.
    #[error("{0}")]
    Refused(String),
}

impl SessionError {
    /// This failure as a step of `what`.
    pub fn within(self, what: impl Into<String>) -> SessionError {
        SessionError::Within {
            what: what.into(),
            source: Box::new(self),
        }
    }
}

/// Layers that still speak in strings take a session's failure as its line.
impl From<SessionError> for String {
    fn from(e: SessionError) -> String {
        e.to_string()
    }
}
