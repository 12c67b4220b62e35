//! The terminal-run tools carried out: `send_keys`, `screen`, `wait_for`
//! and `bash` with `tty: true`, each with the command line's client code
//! (`eukhe keys`, `eukhe screen`, `eukhe wait-for`).

use rmcp::model::CallToolResult;
use serde_json::json;
use tokio::sync::Notify;

use super::screen_tools::{key_bytes, screen_text, ScreenArgs, SendKeysArgs, WaitForArgs};
use super::server::answer;
use super::tools::BashArgs;
use crate::client::cli::unexpected;
use crate::client::connect::{connect, Client};
use crate::client::wait_for::{ask_wait, Waited};
use crate::client::ClientError;
use crate::laws::replace::ClientStart;
use crate::laws::timing::{MCP_BASH_TIMEOUT_DEFAULT_MS, WAIT_FOR_TIMEOUT_DEFAULT_MS};
use crate::protocol::message::{Request, Response, SessionRequest, Until};
use crate::protocol::screen::ScreenState;
use crate::protocol::tty::WindowSize;

/// What follows a screen in an answer: how to go on from it.
fn next_steps(session: &str, screen: &ScreenState) -> String {
    let run = screen.input;
    match screen.ended {
        Some(status) => format!("[run {run} exited {status}]"),
        None if screen.waiting => format!(
            "[run {run} waits for input: type with `send_keys` session={session}, run={run}, \
             then `wait_for` what should follow]"
        ),
        None => format!(
            "[run {run} is running: `wait_for` session={session}, run={run} with `match`, \
             `waiting` or `end` to wait for it; `cancel` run={run} stops it]"
        ),
    }
}

/// The state words of a screen's last line.
fn state_words(screen: &ScreenState) -> String {
    match screen.ended {
        Some(status) => format!("ended, exit status {status}"),
        None if screen.waiting => "waiting for input".to_string(),
        None => "running".to_string(),
    }
}

/// `send_keys`.
pub async fn send_keys(args: SendKeysArgs) -> Result<CallToolResult, ClientError> {
    let data = key_bytes(&args).map_err(|e| ClientError::Usage(e.to_string()))?;
    let typed = data.len();
    let mut client = connect(ClientStart::Mcp).await?;
    let request = Request::Session {
        session: args.session.clone(),
        request: SessionRequest::Keys {
            input: args.run,
            data,
        },
    };
    match client.ask(request).await? {
        Response::Ok => Ok(answer(
            format!(
                "typed {typed} bytes; they are in the terminal's input queue for the program \
                 to read: `wait_for` session={} shows what it does with them",
                args.session
            ),
            json!({ "typed_bytes": typed }),
        )),
        other => unexpected(other),
    }
}

/// `screen`.
pub async fn screen(args: ScreenArgs) -> Result<CallToolResult, ClientError> {
    let mut client = connect(ClientStart::Mcp).await?;
    let request = Request::Session {
        session: args.session.clone(),
        request: SessionRequest::Screen { input: args.run },
    };
    match client.ask(request).await? {
        Response::Screen { screen } => {
            let mut text = screen_text(&screen, Some(screen.input), &state_words(&screen));
            text += &next_steps(&args.session, &screen);
            text.push('\n');
            Ok(answer(text, json!({ "screen": screen })))
        }
        other => unexpected(other),
    }
}

/// `wait_for`.
pub async fn wait_for(args: WaitForArgs) -> Result<CallToolResult, ClientError> {
    let until = args.until();
    let timeout_ms = args.timeout_ms.unwrap_or(WAIT_FOR_TIMEOUT_DEFAULT_MS);
    let waited = ask_wait(&args.session, args.run, &until, timeout_ms).await?;
    let head = match (&waited.met, waited.timed_out) {
        (Some(met), _) => format!("met: {}", condition_words(met)),
        (None, true) => {
            format!("timed out after {timeout_ms} ms, nothing met; the run goes on")
        }
        (None, false) => "the run ended before any condition was met".to_string(),
    };
    Ok(waited_answer(&args.session, head, waited))
}

fn condition_words(until: &Until) -> String {
    match until {
        Until::Screen { regex } => format!("the screen matches {regex:?}"),
        Until::Waiting => "the run waits for input".to_string(),
        Until::End => "the run has ended".to_string(),
    }
}

fn waited_answer(session: &str, head: String, waited: Waited) -> CallToolResult {
    let screen = waited.screen;
    let mut text = format!("{head}\n");
    text += &screen_text(&screen, Some(screen.input), &state_words(&screen));
    text += &next_steps(session, &screen);
    text.push('\n');
    let structured = json!({
        "screen": screen,
        "met": waited.met,
        "timed_out": waited.timed_out,
    });
    answer(text, structured)
}

/// `bash` with `tty: true`: the command runs on a terminal; the answer
/// comes when it ends, waits for input, or at the timeout, with its
/// screen. The command goes on after the answer (this call leaves its
/// terminal as a detach does).
pub async fn bash_tty(
    args: BashArgs,
    cancel_asked: &Notify,
) -> Result<CallToolResult, ClientError> {
    let size = WindowSize {
        rows: args.rows.unwrap_or(WindowSize::DEFAULT.rows),
        cols: args.cols.unwrap_or(WindowSize::DEFAULT.cols),
    };
    let timeout_ms = args.timeout_ms.unwrap_or(MCP_BASH_TIMEOUT_DEFAULT_MS);
    let session = args.session;
    let command = args.command.unwrap_or_default();
    let mut client = open_bash(&session, command, Some(size)).await?;
    let number = match client.receive().await? {
        Response::Queued { input } => input,
        other => return unexpected(other),
    };
    let until = [Until::Waiting, Until::End];
    let waited = tokio::select! {
        waited = ask_wait(&session, Some(number), &until, timeout_ms) => Some(waited),
        _ = drain(&mut client) => None,
        _ = cancel_asked.notified() => None,
    };
    let waited = match waited {
        Some(waited) => waited?,
        None => {
            // Cancelled by the client (its output connection never ends
            // before the wait does).
            cancel_input(&session, number).await?;
            let head = "cancelled: its client cancelled the call".to_string();
            let waited = ask_wait(&session, Some(number), &[Until::End], timeout_ms).await?;
            return Ok(bash_answer(&session, number, head, waited));
        }
    };
    leave(&mut client, &session).await;
    let head = match (&waited.met, waited.timed_out) {
        (_, true) => format!("still running after {timeout_ms} ms and not waiting for input"),
        (Some(Until::Waiting), _) => "waiting for input".to_string(),
        _ => "ended".to_string(),
    };
    Ok(bash_answer(&session, number, head, waited))
}

fn bash_answer(session: &str, number: u64, head: String, waited: Waited) -> CallToolResult {
    let screen = &waited.screen;
    let structured = json!({
        "bash": number,
        "screen": screen,
        "waiting": screen.waiting && screen.ended.is_none(),
        "exit_status": screen.ended,
        "running": screen.ended.is_none(),
    });
    let mut text = format!("[bash {number} on a terminal: {head}]\n");
    text += &screen_text(screen, Some(number), &state_words(screen));
    text += &next_steps(session, screen);
    text.push('\n');
    answer(text, structured)
}

/// Read the command's connection (its output is in the screen); never
/// ends while the connection stays open.
async fn drain(client: &mut Client) {
    while let Ok(response) = client.receive().await {
        if matches!(response, Response::Exit { .. }) {
            break;
        }
    }
    // The end is also the wait's: its answer comes on its own connection.
    std::future::pending::<()>().await
}

/// Ask `session` for a user bash of `command` (on a terminal of `tty`)
/// on a connection of its own, saying whether this client is remote: a
/// daemon on another machine then tells the connection's drop (its SSH)
/// from this client leaving.
pub(super) async fn open_bash(
    session: &str,
    command: String,
    tty: Option<WindowSize>,
) -> Result<Client, ClientError> {
    let mut client = connect(ClientStart::Mcp).await?;
    let request = SessionRequest::Bash {
        command,
        stdin: None,
        tty,
        remote: client.serves_remote_bash(),
        offsets: false,
    };
    client
        .send(&Request::Session {
            session: session.to_string(),
            request,
        })
        .await?;
    Ok(client)
}

/// Leave the command on purpose (its terminal, or its output after the
/// call's timeout): it goes on.
pub(super) async fn leave(client: &mut Client, session: &str) {
    let _ = client
        .send(&Request::Session {
            session: session.to_string(),
            request: SessionRequest::Detach,
        })
        .await;
}

pub(super) async fn cancel_input(session: &str, input: u64) -> Result<(), ClientError> {
    let mut client = connect(ClientStart::Mcp).await?;
    let request = Request::Session {
        session: session.to_string(),
        request: SessionRequest::CancelInput { input },
    };
    match client.ask(request).await? {
        Response::Cancelled { .. } => Ok(()),
        other => unexpected(other),
    }
}
