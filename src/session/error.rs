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
    /// A session name refused.
    #[error("{0}")]
    Name(#[from] NameRefused),
    /// An `--env KEY=VALUE` refused.
    #[error("--env {text:?}: {problem}")]
    Assignment {
        /// The assignment as given.
        text: String,
        /// What is wrong with it.
        problem: AssignmentProblem,
    },
    /// An output entry whose numbers the record format cannot hold (0 and
    /// `u64::MAX` stand for none).
    #[error("output entry with an unrepresentable number")]
    Unrepresentable,
    /// An entry over the record format's payload limit.
    #[error("entry of {len} bytes is too large (at most {max})")]
    EntryTooLarge {
        /// Its payload's length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Output that cannot be kept as a reference into its job's spool.
    #[error("output of job {job:?} cannot be stored in its spool")]
    NotInSpool {
        /// The job.
        job: String,
    },
    /// A shell state capture that ends before its last field.
    #[error("the shell's state capture is cut short ({bytes} bytes)")]
    CaptureCutShort {
        /// How many bytes came.
        bytes: usize,
    },
}

/// Why a session name is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NameRefused {
    /// No name at all.
    #[error("a session name cannot be empty")]
    Empty,
    /// Over 64 characters.
    #[error("session name {0:?} is longer than 64 characters")]
    TooLong(String),
    /// It holds `/` or `\\`.
    #[error("session name {0:?} contains a path separator")]
    PathSeparator(String),
    /// It is `.`.
    #[error("session name \".\" reads as the current directory: choose another name")]
    CurrentDirectory,
    /// It holds `..`.
    #[error("session name {0:?} contains \"..\"")]
    DotDot(String),
    /// It starts with `-`.
    #[error(
        "session name {0:?} starts with '-', which a command would read as an option: choose another name"
    )]
    LeadingDash(String),
    /// It holds a control character.
    #[error("session name {name:?} contains the control character {control:?}")]
    Control {
        /// The name.
        name: String,
        /// The first control character in it.
        control: char,
    },
    /// It holds an invisible format character.
    #[error(
        "session name {name:?} contains the invisible character U+{:04X}: names show as they are",
        u32::from(*invisible)
    )]
    Invisible {
        /// The name.
        name: String,
        /// The first such character in it.
        invisible: char,
    },
    /// It is only whitespace.
    #[error("session name {0:?} is only whitespace: a name must show")]
    Whitespace(String),
}

/// What is wrong with an `--env` assignment.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AssignmentProblem {
    /// No `=`.
    #[error("expected KEY=VALUE")]
    NoEquals,
    /// The key is no shell variable name.
    #[error("{0:?} is not a shell variable name")]
    NotAName(String),
    /// The key describes one process, never a session.
    #[error(
        "{0} is never carried into a session (it describes one process, not the session; see `eukhe new --help`)"
    )]
    NeverCarried(String),
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
