//! `eukhe wait-for`: wait until a terminal run's screen shows a regular
//! expression, the run waits for input, or it ends; then print the screen
//! as `eukhe screen` does. A worker lost during the wait is asked again
//! (the daemon starts its successor) for the time that is left.

use std::process::ExitCode;
use std::time::Duration;

use super::cli::{unexpected, Command};
use super::connect::connect;
use super::error::ClientError;
use crate::laws::replace::ClientStart;
use crate::laws::timing::{RELAUNCH_RETRY_MS, WAIT_FOR_TIMEOUT_DEFAULT_MS};
use crate::protocol::message::{Request, Response, SessionRequest, Until};
use crate::protocol::screen::ScreenState;

/// The exit status when the run ended without any condition holding.
pub const ENDED_UNMET: u8 = 1;

/// The exit status at the timeout, as `timeout(1)`'s.
pub const TIMED_OUT: u8 = 124;

/// The conditions the options name, in the order `--match`, `--waiting`,
/// `--end`.
pub fn conditions(regex: Option<String>, waiting: bool, end: bool) -> Vec<Until> {
    let mut until: Vec<Until> = regex
        .map(|regex| Until::Screen { regex })
        .into_iter()
        .collect();
    if waiting {
        until.push(Until::Waiting);
    }
    if end {
        until.push(Until::End);
    }
    until
}

/// How a wait ended, as the worker answered it.
pub struct Waited {
    /// The screen when the wait ended.
    pub screen: ScreenState,
    /// The condition that held, if one did.
    pub met: Option<Until>,
    /// The timeout came first.
    pub timed_out: bool,
}

/// Ask the worker to wait, at most `timeout_ms`. A connection lost before
/// the answer (a worker or the daemon lost) is made again and the wait
/// asked again for the time left; meanwhile a refusal (the daemon has not
/// seen the lost worker end yet) is tried again, as `log --follow` does.
pub async fn ask_wait(
    session: &str,
    input: Option<u64>,
    until: &[Until],
    timeout_ms: u64,
) -> Result<Waited, ClientError> {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(timeout_ms);
    let mut lost = false;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let request = Request::Session {
            session: session.to_string(),
            request: SessionRequest::WaitFor {
                input,
                until: until.to_vec(),
                timeout_ms: u64::try_from(left.as_millis()).unwrap_or(u64::MAX),
            },
        };
        let start = if lost {
            ClientStart::Reattach
        } else {
            ClientStart::Send
        };
        let asked = async { connect(start).await?.ask(request).await };
        let retry = match asked.await {
            Ok(Response::WaitedFor {
                screen,
                met,
                timed_out,
            }) => {
                return Ok(Waited {
                    screen,
                    met,
                    timed_out,
                })
            }
            Ok(Response::Error { message }) if lost => {
                match super::log::refusal(session, message).await {
                    gone @ ClientError::Gone(_) => return Err(gone),
                    refused => refused,
                }
            }
            Ok(other) => return unexpected(other),
            Err(e @ ClientError::Wire { .. }) => {
                lost = true;
                e
            }
            Err(e) if lost => e,
            Err(e) => return Err(e),
        };
        if tokio::time::Instant::now() >= deadline {
            return Err(retry.within(format!(
                "lost the session {session} during the wait and could not reach it again in time"
            )));
        }
        // The next worker or daemon is on its way: ask again shortly.
        tokio::time::sleep(Duration::from_millis(RELAUNCH_RETRY_MS)).await;
    }
}

/// `wait-for` as the command line gave it.
pub async fn command(command: Command) -> Result<ExitCode, ClientError> {
    let Command::WaitFor {
        session,
        input,
        regex,
        waiting,
        end,
        timeout,
        json,
    } = command
    else {
        unreachable!("only `wait-for` is dispatched here");
    };
    let until = conditions(regex, waiting, end);
    wait_for(session, input, until, timeout, json).await
}

/// `wait-for`: wait, print the screen (or the answer as JSON), exit 0 when
/// a condition held, [`ENDED_UNMET`] or [`TIMED_OUT`] otherwise.
pub async fn wait_for(
    session: String,
    input: Option<u64>,
    until: Vec<Until>,
    timeout_ms: Option<u64>,
    json: bool,
) -> Result<ExitCode, ClientError> {
    let timeout_ms = timeout_ms.unwrap_or(WAIT_FOR_TIMEOUT_DEFAULT_MS);
    let waited = ask_wait(&session, input, &until, timeout_ms).await?;
    let text = if json {
        let value = serde_json::json!({
            "screen": waited.screen,
            "met": waited.met,
            "timed_out": waited.timed_out,
        });
        format!("{value}\n")
    } else {
        super::screen::text_of(&waited.screen)
    };
    super::stdout::print(&text)?;
    if !json {
        if waited.timed_out {
            eprintln!("eukhe: timed out after {timeout_ms} ms; the run goes on");
        } else if waited.met.is_none() {
            eprintln!("eukhe: the run ended before the screen met the condition");
        }
    }
    Ok(match (&waited.met, waited.timed_out) {
        (Some(_), _) => ExitCode::SUCCESS,
        (None, true) => ExitCode::from(TIMED_OUT),
        (None, false) => ExitCode::from(ENDED_UNMET),
    })
}
