//! What fails in a client, as one type: the daemon's refusals and odd
//! answers, the wire, reaching or starting a daemon, standard output, the
//! terminal and what the user typed. Its `Display` is the one line after
//! `eukhe: ` on standard error (the same words the layer always used);
//! every one of them exits 125 (`cli::EUKHE_FAILED`).

use std::io;

use crate::protocol::message::Response;
use crate::protocol::FrameError;
use crate::session::SessionError;

/// A client command's failure.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The daemon refused the request, in its words (`Response::Error`:
    /// the wire carries a refusal as its line, nothing else).
    #[error("{message}")]
    Daemon {
        /// The daemon's line.
        message: String,
    },
    /// A command line too long for one request.
    #[error(
        "the command line is {bytes} bytes, over the {limit_kib} KiB a request carries: put it in a script file and run that"
    )]
    CommandTooLong {
        /// Its length.
        bytes: usize,
        /// What a request carries.
        limit_kib: usize,
    },
    /// `log --raw N` wrote output that the transcript says is not whole.
    #[error(
        "the output of input {input} written above is incomplete: {first}{}",
        more_losses(*more)
    )]
    IncompleteOutput {
        /// The input.
        input: u64,
        /// The first loss, as its notice says it.
        first: String,
        /// How many more losses follow.
        more: usize,
    },
    /// An input withdrawn before it ran (it never runs).
    #[error("{}", crate::session::log_query::withdrawn(*.0))]
    Withdrawn(u64),
    /// Where eukhe keeps its files cannot be placed.
    #[error(transparent)]
    Paths(#[from] crate::paths::PathsError),
    /// The settings file, which the client reads for its own settings
    /// (the detach key), is not valid.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// The running daemon's version (or ours) is no version the
    /// replacement law can rank.
    #[error(transparent)]
    Version(#[from] crate::laws::replace::NotAVersion),
    /// The session a client followed no longer exists (it was removed):
    /// nothing to reach again.
    #[error("{}", crate::session::removed::no_longer_exists(.0))]
    Gone(String),
    /// The daemon an attached client followed was shut down on purpose
    /// (`eukhe shutdown`): the client detached from this session and
    /// started no daemon.
    #[error("the daemon was shut down (`eukhe shutdown`); detached from {0} (`eukhe attach {0}` starts it again)")]
    ShutDown(String),
    /// The daemon answered something other than what was asked.
    #[error("unexpected answer from the daemon: {0}")]
    Unexpected(String),
    /// A frame to or from the daemon, as "talking to the daemon".
    #[error("{what}: {source}")]
    Wire {
        /// What the client was doing.
        what: &'static str,
        /// How the frame failed.
        #[source]
        source: FrameError,
    },
    /// Another machine's daemon could not be reached over SSH, in one
    /// line naming the host (`client::remote`).
    #[error("{0}")]
    Remote(String),
    /// A `--host` value that names no host.
    #[error(transparent)]
    NotAHost(#[from] super::remote::NotAHost),
    /// No daemon could be reached, started or kept, and why (the law's
    /// message, the daemon's last words, a deadline passed).
    #[error("{0}")]
    NoDaemon(String),
    /// Writing to standard output (a reader that left never gets here:
    /// it ends the command quietly, `stdout::failed`).
    #[error("cannot write to standard output: {0}")]
    Stdout(#[source] io::Error),
    /// Something the client writes as JSON, as "an event".
    #[error("cannot write {what} as JSON: {source}")]
    Encode {
        /// What it is.
        what: &'static str,
        /// Why it cannot be written.
        #[source]
        source: serde_json::Error,
    },
    /// A system call the command needs, as "cannot catch Ctrl-C".
    #[error("{what}: {source}")]
    System {
        /// What the call was for.
        what: String,
        /// The system's answer.
        #[source]
        source: io::Error,
    },
    /// A child process the command ran, which failed.
    #[error("{what} ended with {status}")]
    Ended {
        /// What it did, as "attaching to s1".
        what: String,
        /// How it ended.
        status: std::process::ExitStatus,
    },
    /// What the user gave that cannot be used, or a place the command
    /// cannot run (`top` without a terminal).
    #[error("{0}")]
    Usage(String),
    /// A session's files, or a setting the user gave that the session
    /// layer refuses (`--env`).
    #[error(transparent)]
    Session(#[from] SessionError),
    /// `eukhe mcp`'s protocol with its client, as "serving ended".
    #[error("mcp: {what}: {detail}")]
    Mcp {
        /// What failed.
        what: &'static str,
        /// The MCP library's words.
        detail: String,
    },
    /// The client's runtime could not start.
    #[error(transparent)]
    Runtime(#[from] crate::runtime::RuntimeError),
    /// A step of something larger (`what`), as "lost the daemon and could
    /// not start another within a minute".
    #[error("{what}: {source}")]
    Within {
        /// The larger thing.
        what: String,
        /// The step that failed.
        #[source]
        source: Box<ClientError>,
    },
}

/// ` (and N more losses: ...)` after the first loss, when there are more.
fn more_losses(more: usize) -> String {
    match more {
        0 => String::new(),
        n => format!(" (and {n} more losses: `eukhe log` shows each)"),
    }
}

impl ClientError {
    /// The daemon's answer `response`, which is not the one asked for:
    /// its refusal, or what came instead.
    pub fn answer(response: Response) -> ClientError {
        match response {
            Response::Error { message } => ClientError::Daemon { message },
            other => ClientError::Unexpected(format!("{other:?}")),
        }
    }

    /// A failed system call, for `what`.
    pub fn system(what: impl Into<String>) -> impl FnOnce(io::Error) -> ClientError {
        let what = what.into();
        move |source| ClientError::System { what, source }
    }

    /// This failure as a step of `what` (a shutdown on purpose is the
    /// whole story already: it stays as it is).
    pub fn within(self, what: impl Into<String>) -> ClientError {
        match self {
            shut_down @ ClientError::ShutDown(_) => shut_down,
            other => ClientError::Within {
                what: what.into(),
                source: Box::new(other),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_reads_as_the_one_line_the_client_always_printed() {
        let refused = ClientError::answer(Response::Error {
            message: "no session nope".into(),
        });
        assert_eq!(refused.to_string(), "no session nope");
        let odd = ClientError::answer(Response::Ok);
        assert_eq!(odd.to_string(), "unexpected answer from the daemon: Ok");
        let lost = ClientError::Wire {
            what: "the daemon's answer",
            source: FrameError::Closed,
        }
        .within("lost the daemon and could not start another within a minute");
        assert_eq!(
            lost.to_string(),
            "lost the daemon and could not start another within a minute: \
             the daemon's answer: connection closed"
        );
        let ctrl_c = ClientError::system("cannot catch Ctrl-C")(io::Error::from_raw_os_error(1));
        assert!(
            ctrl_c
                .to_string()
                .starts_with("cannot catch Ctrl-C: Operation not permitted"),
            "{ctrl_c}"
        );
    }
}
