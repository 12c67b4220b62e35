//! `eukhe wait` (and the MCP `wait` tool): follow a session's transcript
//! from a cursor until a condition holds (`session::wake` decides), riding
//! through a lost worker or daemon by asking again from the last entry
//! seen, so nothing stored in between is missed.

use std::process::ExitCode;
use std::time::Duration;

use regex::Regex;

use super::attach::open;
use super::cli::{unexpected, Command};
use super::connect::connect;
use super::error::ClientError;
use super::log::{exit_code, reopen};
use super::render::utc_timestamp;
use super::wait_for::TIMED_OUT;
use crate::clock::wall_ms;
use crate::laws::replace::ClientStart;
use crate::laws::timing::{
    WAIT_FOR_TIMEOUT_DEFAULT_MS, WAIT_FOR_TIMEOUT_MAX_MS, WAIT_IDLE_POLL_MS,
};
use crate::protocol::event::Event;
use crate::protocol::message::{Request, Response, SessionRequest};
use crate::session::wake::{Condition, Wake, Woken};

/// What a wait was asked for.
#[derive(Clone, Debug)]
pub struct WaitArgs {
    /// The session's name or id.
    pub session: String,
    /// What it waits for.
    pub condition: Condition,
    /// Only what was stored after this entry (a cursor from `events` or an
    /// earlier wait); absent, from now (`--run N` looks at the whole run).
    pub since: Option<u64>,
    /// How long to wait (default `WAIT_FOR_TIMEOUT_DEFAULT_MS`, cut to
    /// `WAIT_FOR_TIMEOUT_MAX_MS`).
    pub timeout_ms: Option<u64>,
}

/// How a wait ended.
#[derive(Clone, Debug)]
pub struct WaitOutcome {
    /// The events that met the condition (none at a timeout).
    pub events: Vec<Event>,
    /// The cursor to pass next (`--since`).
    pub next_since: Option<u64>,
    /// The run's status, where the event has one.
    pub status: Option<i32>,
    /// The timeout came first; everything goes on running.
    pub timed_out: bool,
    /// The wait's length in milliseconds, as cut to the maximum.
    pub timeout_ms: u64,
}

impl WaitOutcome {
    /// The outcome as JSON: `events`, `next_since`, `status`, `timed_out`.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "events": self.events,
            "next_since": self.next_since,
            "status": self.status,
            "timed_out": self.timed_out,
        })
    }

    /// The outcome for a person: one line per event, then the cursor.
    pub fn text(&self) -> String {
        let mut text = String::new();
        for event in &self.events {
            let seq = event.seq.map_or("-".to_string(), |seq| seq.to_string());
            text.push_str(&format!(
                "{seq}  {}  {}\n",
                utc_timestamp(event.at_ms),
                event.describe()
            ));
        }
        if self.timed_out {
            text.push_str(&format!(
                "timed out after {} ms; everything goes on running\n",
                self.timeout_ms
            ));
        }
        if let Some(next) = self.next_since {
            text.push_str(&format!("next --since {next}\n"));
        }
        text
    }
}

/// `eukhe wait` as the command line gave it.
pub async fn from_command(command: Command) -> Result<ExitCode, ClientError> {
    let Command::Wait {
        session,
        run,
        any_run,
        regex,
        idle,
        since,
        timeout,
        json,
    } = command
    else {
        unreachable!("only `wait` is dispatched here");
    };
    let regex = match regex {
        Some(regex) => Some(Regex::new(&regex).map_err(|e| {
            ClientError::Usage(format!(
                "--match {regex:?} is not a regular expression: {e}"
            ))
        })?),
        None => None,
    };
    let condition = Condition {
        run,
        any_run,
        regex,
        idle,
    };
    let args = WaitArgs {
        session,
        condition,
        since,
        timeout_ms: timeout,
    };
    command_line(args, json).await
}

/// `eukhe wait`: print the events that met the condition and the next
/// cursor; exit with the run's status, 0 when met without one, 124 at the
/// timeout.
pub async fn command_line(args: WaitArgs, json: bool) -> Result<ExitCode, ClientError> {
    let outcome = wait(&args).await?;
    if json {
        super::stdout::print(&format!("{}\n", outcome.json()))?;
    } else if outcome.timed_out {
        // Not an error: a note on stderr, the cursor on stdout.
        eprintln!(
            "eukhe: timed out after {} ms waiting on {}; everything goes on running",
            outcome.timeout_ms, args.session
        );
        if let Some(next) = outcome.next_since {
            super::stdout::print(&format!("next --since {next}\n"))?;
        }
    } else {
        super::stdout::print(&outcome.text())?;
    }
    Ok(match (outcome.timed_out, outcome.status) {
        (true, _) => ExitCode::from(TIMED_OUT),
        (false, Some(status)) => exit_code(status),
        (false, None) => ExitCode::SUCCESS,
    })
}

/// Wait until `args`' condition holds or its timeout passes.
pub async fn wait(args: &WaitArgs) -> Result<WaitOutcome, ClientError> {
    let timeout_ms = args
        .timeout_ms
        .unwrap_or(WAIT_FOR_TIMEOUT_DEFAULT_MS)
        .min(WAIT_FOR_TIMEOUT_MAX_MS);
    let deadline = tokio::time::Instant::now() + Duration::from_millis(timeout_ms);
    let mut wake = Wake::new(args.condition.clone(), args.since);
    let met = tokio::time::timeout_at(deadline, async {
        let follow = follow(args, &mut wake);
        let idle = idle(&args.session, args.condition.idle);
        tokio::select! {
            woken = follow => woken.map(Some),
            () = idle => Ok(None),
        }
    })
    .await;
    let woken = match met {
        Err(_elapsed) => {
            return Ok(WaitOutcome {
                events: Vec::new(),
                next_since: wake.cursor(),
                status: None,
                timed_out: true,
                timeout_ms,
            })
        }
        Ok(woken) => woken?.unwrap_or_else(|| wake.idle(wall_ms())),
    };
    let Woken {
        event,
        seq,
        at_ms,
        status,
    } = woken;
    let event = Event::session(at_ms, &args.session, &args.session, event).at_seq(Some(seq));
    Ok(WaitOutcome {
        events: vec![event],
        next_since: wake.cursor(),
        status,
        timed_out: false,
        timeout_ms,
    })
}

/// The log request that goes on from where `wake` is: run N's entries
/// whole (it may have ended already), else those after the cursor, else
/// (nothing seen yet, no cursor given) the last entry alone, to learn the
/// cursor of now.
fn request(args: &WaitArgs, wake: &Wake) -> SessionRequest {
    let (tail, after) = match (args.condition.run, wake.cursor()) {
        (Some(_), _) => (None, None),
        (None, Some(cursor)) => (None, Some(cursor)),
        (None, None) => (Some(1), None),
    };
    SessionRequest::Log {
        tail,
        input: args.condition.run,
        after,
        follow: true,
    }
}

/// Follow the session's entries into `wake` until one wakes it.
async fn follow(args: &WaitArgs, wake: &mut Wake) -> Result<Woken, ClientError> {
    let mut asked = request(args, wake);
    let mut client = open(&args.session, ClientStart::Log, asked.clone()).await?;
    let mut pending = None;
    loop {
        let response = match pending.take() {
            Some(first) => Ok(first),
            None => client.receive().await,
        };
        match response {
            // The last entry alone, asked to learn the cursor of now: it
            // is no news.
            Ok(Response::Entry(entry))
                if matches!(asked, SessionRequest::Log { tail: Some(_), .. }) =>
            {
                wake.pass(&entry)
            }
            Ok(Response::Entry(entry)) => {
                if let Some(woken) = wake.feed(&entry) {
                    return Ok(woken);
                }
            }
            Ok(Response::Replayed) => {
                if wake.cursor().is_none() {
                    // An empty transcript: everything from its start is new.
                    wake.pass_empty();
                }
                asked = request(args, wake);
            }
            Ok(Response::Error { message }) => return Err(ClientError::Daemon { message }),
            Ok(other) => return unexpected(other),
            Err(_) => {
                asked = request(args, wake);
                let (again, first) = reopen(&args.session, asked.clone()).await?;
                client = again;
                pending = Some(first);
            }
        }
    }
}

/// With `wanted`: resolves once the daemon lists the session as idle (or
/// resting); never without. A daemon that cannot be asked right now (it
/// restarts) is asked again at the next turn.
async fn idle(session: &str, wanted: bool) {
    if !wanted {
        return std::future::pending().await;
    }
    loop {
        let asked = async { connect(ClientStart::Log).await?.ask(Request::List).await };
        if let Ok(Response::Sessions { sessions }) = asked.await {
            let idle = sessions
                .iter()
                .find(|s| s.id == session || s.name == session)
                .is_some_and(|s| matches!(s.state.as_str(), "idle" | "saved"));
            if idle {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(WAIT_IDLE_POLL_MS)).await;
    }
}
