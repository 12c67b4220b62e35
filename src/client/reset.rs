//! `reset`: give a session a fresh shell (its first working directory and
//! environment), keeping its transcript. Named `reset`, not `restart`:
//! `restart` starts a given-up session's worker afresh and keeps its shell
//! state, which is what this one throws away.

use std::process::ExitCode;

use super::cli::unexpected;
use super::connect::connect;
use super::error::ClientError;
use super::stdout::outln;
use crate::laws::replace::ClientStart;
use crate::protocol::message::{Request, Response, SessionRequest};

/// Ask the session's worker for a fresh shell; done once it serves.
/// `start` is the asking client's kind (a background client either way).
pub async fn reset_shell(
    session: &str,
    force: bool,
    start: ClientStart,
) -> Result<(), ClientError> {
    let request = Request::Session {
        session: session.to_string(),
        request: SessionRequest::ResetShell { force },
    };
    match connect(start).await?.ask(request).await? {
        Response::Ok => Ok(()),
        other => unexpected(other),
    }
}

/// `eukhe reset S [--force]`.
pub(super) async fn command(session: String, force: bool) -> Result<ExitCode, ClientError> {
    reset_shell(&session, force, ClientStart::Bash).await?;
    outln!(
        "session {session}: a fresh shell (its first working directory and environment); \
         the transcript is kept"
    )?;
    Ok(ExitCode::SUCCESS)
}
