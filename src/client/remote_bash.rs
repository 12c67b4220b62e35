//! How a remote `eukhe bash` client leaves. Locally, a client that ends
//! (SIGTERM, SIGHUP, a second Ctrl-C, a closed standard output) is gone,
//! and the worker, seeing its process gone, hangs up its command at once.
//! A remote client's worker sees only the `eukhe proxy` in front of it,
//! whose end may be a dropped SSH connection the client rides through: so
//! a remote client that really leaves says so first, with a hang-up
//! request, and only one killed outright leaves its command to the
//! reconnection grace (`laws::timing::REMOTE_RECONNECT_GRACE_MS`).

use tokio::signal::unix::{signal, Signal, SignalKind};

use super::connect::connect;
use super::error::ClientError;
use crate::laws::replace::ClientStart;
use crate::protocol::message::{Request, Response, SessionRequest};

/// The signals that end a client, caught for a remote bash client (for a
/// local one: none, so they end it as they always did).
pub struct Leaving {
    caught: Option<(Signal, Signal)>,
    session: String,
}

impl Leaving {
    /// Catch SIGTERM and SIGHUP when `remote`.
    pub fn watch(session: &str, remote: bool) -> Result<Leaving, ClientError> {
        let catch = |kind| signal(kind).map_err(ClientError::system("cannot catch signals"));
        let caught = match remote {
            true => Some((
                catch(SignalKind::terminate())?,
                catch(SignalKind::hangup())?,
            )),
            false => None,
        };
        Ok(Leaving {
            caught,
            session: session.to_string(),
        })
    }

    /// Whether the client is remote, and must hang up its command itself.
    pub fn remote(&self) -> bool {
        self.caught.is_some()
    }

    /// The next signal that ends the client (never for a local client).
    pub async fn signalled(&mut self) -> i32 {
        let Some((term, hup)) = &mut self.caught else {
            return std::future::pending().await;
        };
        tokio::select! {
            _ = term.recv() => libc::SIGTERM,
            _ = hup.recv() => libc::SIGHUP,
        }
    }

    /// The client leaves: hang up its command `input` (when the session
    /// numbered it) if the client is remote. A failure is said in one
    /// line; the client leaves anyway.
    pub async fn hang_up(&self, input: Option<u64>) {
        let (true, Some(input)) = (self.remote(), input) else {
            return;
        };
        if let Err(e) = hang_up(&self.session, input).await {
            eprintln!("eukhe: cannot hang up bash {input}: {e}");
        }
    }
}

/// Ask `session`'s worker to hang up user bash `input` now.
async fn hang_up(session: &str, input: u64) -> Result<(), ClientError> {
    let request = Request::Session {
        session: session.to_string(),
        request: SessionRequest::HangUp { input },
    };
    match connect(ClientStart::Cancel).await?.ask(request).await? {
        // An error: it has just ended, its end is on its way.
        Response::Ok | Response::Error { .. } => Ok(()),
        other => super::cli::unexpected(other),
    }
}

/// End this process by `signal`, as its default action would have.
pub fn die_of(signal: i32) -> ! {
    let _ = signal_hook::low_level::emulate_default_handler(signal);
    std::process::exit(128 + signal)
}
