//! Each client command served: its request asked of the daemon (started
//! when none listens, as the command's `ClientStart` says), its answer
//! shown.

use std::ffi::OsString;
use std::process::ExitCode;

use super::cli::{unexpected, Command, EUKHE_FAILED};
use super::connect::connect;
use super::error::ClientError;
use super::interactive;
use super::render;
use super::stdout::{self, outln};
use super::words::command_line;
use crate::config::detach_key::DetachKey;
use crate::laws::limits::ResourceLimits;
use crate::laws::replace::ClientStart;
use crate::protocol::message::{Request, Response, SessionRequest, ShutdownMode};
use crate::session::entry::Stream;
use crate::session::env::{carried, parse_assignment, SessionEnv};

/// Serve a client's command, each by its function below.
pub(super) async fn client(command: Command) -> Result<ExitCode, ClientError> {
    match command {
        Command::New {
            name,
            cwd,
            env,
            clean_env,
            json,
            limits,
        } => new_session(name, cwd, &env, clean_env, json, limits.limits()?).await,
        Command::Ls { json, all_hosts } => list(json, all_hosts).await,
        Command::Status { json } => status(json).await,
        Command::Restart { session } => restart(session).await,
        Command::Rm { sessions, force } => remove(sessions, force).await,
        Command::Rename { session, new_name } => rename(session, new_name).await,
        Command::Shutdown { if_idle, force } => shutdown(if_idle, force).await,
        Command::Send {
            session,
            text,
            wait,
            tty,
            detach_key,
        } => send(session, &text, wait, (tty, detach_key)).await,
        Command::Bash {
            session,
            no_stdin,
            tty,
            detach_key,
            command,
        } => bash(session, no_stdin || tty, (tty, detach_key), &command).await,
        Command::Keys {
            session,
            input,
            literal,
            text,
        } => super::tty_run::keys(session, input, literal, &text).await,
        Command::Screen {
            session,
            input,
            json,
        } => super::screen::screen(session, input, json).await,
        command @ Command::WaitFor { .. } => super::wait_for::command(command).await,
        command @ Command::Log { .. } => super::windows::log(log_args(command)).await,
        command @ Command::Attach { .. } => attach(command).await,
        Command::Cancel { session, all } => cancel(session, all).await,
        Command::Queue { session, json } => queue(session, json).await,
        Command::Withdraw { session, run } => withdraw(session, run).await,
        Command::Reset { session, force } => super::reset::command(session, force).await,
        Command::Doctor { json } => doctor(json).await,
        command @ Command::Events { .. } => super::events::from_command(command).await,
        command @ Command::Wait { .. } => super::wake::from_command(command).await,
        Command::Top => super::top::top().await,
        Command::Daemon
        | Command::Worker { .. }
        | Command::Kernel { .. }
        | Command::Mcp { .. }
        | Command::Proxy { .. }
        | Command::Laws { .. } => unreachable!("served by main"),
    }
}

/// `attach`: onto the session's shell (`--shell`), else its terminal run
/// or its transcript.
async fn attach(command: Command) -> Result<ExitCode, ClientError> {
    let Command::Attach {
        session,
        tail,
        read_only,
        shell,
        detach_key,
    } = command
    else {
        unreachable!("attach is given an attach");
    };
    match shell {
        true => super::shell::attach_shell(session, detach_key).await,
        false => super::attach::attach(session, Some(tail), (read_only, detach_key)).await,
    }
}

/// `log`'s flags as `client::log` takes them (`command` is a `log`: its
/// eight flags are too many to pass one by one).
fn log_args(command: Command) -> super::log::LogArgs {
    let Command::Log {
        session,
        json,
        tail,
        since,
        follow,
        timestamps,
        raw,
        stream,
        window,
    } = command
    else {
        unreachable!("log_args of a command other than log")
    };
    super::log::LogArgs {
        session,
        json,
        tail,
        since,
        follow,
        timestamps,
        raw,
        stream: stream.map(Stream::from),
        window,
    }
}

/// Connect as `start` (starting a daemon when none listens) and ask
/// `request`: the daemon's one answer.
async fn ask(start: ClientStart, request: Request) -> Result<Response, ClientError> {
    connect(start).await?.ask(request).await
}

/// `new`: create a session and print its id (and name, with `json`).
async fn new_session(
    name: Option<String>,
    cwd: Option<String>,
    env: &[String],
    clean_env: bool,
    json: bool,
    limits: ResourceLimits,
) -> Result<ExitCode, ClientError> {
    let cwd = shell_cwd(cwd)?;
    let env = session_env(env, clean_env)?;
    let request = Request::New {
        name,
        cwd,
        env: Some(env),
        limits,
    };
    match ask(ClientStart::New, request).await? {
        Response::Created { id, name, warning } => {
            if let Some(warning) = &warning {
                eprintln!("eukhe: warning: {warning}");
            }
            if json {
                let mut created = serde_json::json!({ "id": id, "name": name });
                if let Some(warning) = warning {
                    created["warning"] = warning.into();
                }
                outln!("{created}")?;
            } else {
                outln!("{id}")?;
            }
            Ok(ExitCode::SUCCESS)
        }
        other => unexpected(other),
    }
}

/// The working directory `new` asks for: `--cwd` made absolute, else
/// this client's (none when it cannot be read).
fn shell_cwd(cwd: Option<String>) -> Result<Option<String>, ClientError> {
    Ok(match cwd {
        Some(cwd) => Some(absolute(&cwd)?),
        None => std::env::current_dir()
            .ok()
            .map(|d| d.display().to_string()),
    })
}

/// `ls`: the sessions, the one active most recently last; each damaged
/// one named on standard error (unless `json`, which carries its problem).
/// `all_hosts`: every host's (`client::all_hosts`).
async fn list(json: bool, all_hosts: bool) -> Result<ExitCode, ClientError> {
    if all_hosts {
        return super::all_hosts::list_all_hosts(json).await;
    }
    match ask(ClientStart::Ls, Request::List).await? {
        Response::Sessions { mut sessions } => {
            render::most_recent_last(&mut sessions);
            stdout::print(&render::sessions(&sessions, json, crate::clock::wall_ms()))?;
            if !json {
                for s in &sessions {
                    if let Some(problem) = &s.problem {
                        eprintln!("eukhe: session {} is damaged: {problem}", s.id);
                    }
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        other => unexpected(other),
    }
}

/// `status`: the daemon's version, build, pid, backend and counts.
async fn status(json: bool) -> Result<ExitCode, ClientError> {
    match ask(ClientStart::Status, Request::Status).await? {
        Response::Status(status) => {
            stdout::print(&render::status(&status, json))?;
            Ok(ExitCode::SUCCESS)
        }
        other => unexpected(other),
    }
}

/// `restart`: start a given-up (or mended) session afresh.
async fn restart(session: String) -> Result<ExitCode, ClientError> {
    let request = Request::Restart {
        session: session.clone(),
    };
    match ask(ClientStart::Restart, request).await? {
        Response::Ok => {
            outln!("session {session} restarted")?;
            Ok(ExitCode::SUCCESS)
        }
        other => unexpected(other),
    }
}

/// `rm`: remove each session in turn, one line each; a session not
/// removed does not stop the others, and makes the exit status 125.
async fn remove(sessions: Vec<String>, force: bool) -> Result<ExitCode, ClientError> {
    let mut failed = false;
    for session in sessions {
        match ask_removal(&session, force)
            .await
            .and_then(|answer| match answer {
                Response::Removed { id, name } => Ok((id, name)),
                other => Err(ClientError::answer(other)),
            }) {
            Ok((id, name)) => outln!("removed {name} ({id})")?,
            Err(e) => {
                failed = true;
                eprintln!("eukhe: rm {session}: {e}");
            }
        }
    }
    Ok(if failed {
        ExitCode::from(EUKHE_FAILED)
    } else {
        ExitCode::SUCCESS
    })
}

/// Ask, on a connection of its own, for `session`'s removal.
async fn ask_removal(session: &str, force: bool) -> Result<Response, ClientError> {
    let request = Request::Remove {
        session: session.to_string(),
        force,
    };
    ask(ClientStart::Rm, request).await
}

/// `rename`: give a session a new name.
async fn rename(session: String, new_name: String) -> Result<ExitCode, ClientError> {
    let request = Request::Rename {
        session: session.clone(),
        name: new_name.clone(),
    };
    match ask(ClientStart::Rename, request).await? {
        Response::Ok => {
            outln!("session {session} is now named {new_name}")?;
            Ok(ExitCode::SUCCESS)
        }
        other => unexpected(other),
    }
}

/// `shutdown`: stop the daemon that runs, if one does (never starting
/// one); exit 1 when it did not stop.
async fn shutdown(if_idle: bool, force: bool) -> Result<ExitCode, ClientError> {
    let mode = shutdown_mode(if_idle, force);
    let Some(mut client) = super::connect::connect_existing().await? else {
        outln!("no daemon is running")?;
        return Ok(ExitCode::SUCCESS);
    };
    match client.ask(Request::Shutdown { mode }).await? {
        Response::Shutdown { stopped, message } => {
            outln!("{message}")?;
            Ok(if stopped {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        other => unexpected(other),
    }
}

/// How `shutdown`'s flags ask the daemon to stop.
fn shutdown_mode(if_idle: bool, force: bool) -> ShutdownMode {
    match (if_idle, force) {
        (true, _) => ShutdownMode::IfIdle,
        (_, true) => ShutdownMode::Force,
        _ => ShutdownMode::Normal,
    }
}

/// `send`: queue a run; with `wait`, stream its output and exit with its
/// status.
async fn send(
    session: String,
    text: &[OsString],
    wait: bool,
    (tty, detach_key): (bool, Option<DetachKey>),
) -> Result<ExitCode, ClientError> {
    let text = fitting(command_line(text)?)?;
    let passing = tty && wait && interactive::can_pass_through();
    let tty = tty.then(super::tty_run::window_size);
    let request = SessionRequest::Send { text, wait, tty };
    if passing {
        let detach = super::tty_run::detach_key(detach_key)?;
        return interactive::run(&session, ClientStart::Send, request, detach).await;
    }
    let mut client = super::attach::open(&session, ClientStart::Send, request).await?;
    super::log::stream_until_exit(&mut client, &session, wait).await
}

/// `bash`: run a command now, stream its output and exit with its status.
async fn bash(
    session: String,
    no_stdin: bool,
    (tty, detach_key): (bool, Option<DetachKey>),
    command: &[OsString],
) -> Result<ExitCode, ClientError> {
    let command = fitting(command_line(command)?)?;
    let stdin = if no_stdin {
        None
    } else {
        super::stdin::lend()?
    };
    let tty = tty.then(super::tty_run::window_size);
    let mut request = SessionRequest::Bash {
        command,
        stdin,
        tty,
        remote: false,
        offsets: false,
    };
    if tty.is_some() && interactive::can_pass_through() {
        let detach = super::tty_run::detach_key(detach_key)?;
        return interactive::run(&session, ClientStart::Bash, request, detach).await;
    }
    if let Some(mut client) = super::direct::open(&session, ClientStart::Bash, &request).await {
        return super::log::stream_bash_until_exit(&mut client, &session, false).await;
    }
    let mut client = connect(ClientStart::Bash).await?;
    // A remote daemon that can tells this client's dropped connection from
    // its leaving: the command rides through the first.
    let rides = client.serves_remote_bash();
    if let SessionRequest::Bash { remote, .. } = &mut request {
        *remote = rides;
    }
    let session_request = Request::Session {
        session: session.clone(),
        request,
    };
    client.send(&session_request).await?;
    super::log::stream_bash_until_exit(&mut client, &session, rides).await
}

/// `cancel`: end the running run and user bash (and, with `all`, withdraw
/// the queue);
/// exit 1 when there was nothing to cancel.
async fn cancel(session: String, all: bool) -> Result<ExitCode, ClientError> {
    let request = Request::Session {
        session,
        request: SessionRequest::Cancel { all },
    };
    match ask(ClientStart::Cancel, request).await? {
        Response::Cancelled {
            run,
            withdrawn,
            bash,
        } => {
            if let Some(run) = run {
                outln!("cancelling run {run}")?;
            }
            for number in &bash {
                outln!("cancelling bash {number}")?;
            }
            for input in &withdrawn {
                outln!("withdrew run {input}")?;
            }
            if run.is_none() && bash.is_empty() && withdrawn.is_empty() {
                outln!("nothing to cancel")?;
                return Ok(ExitCode::FAILURE);
            }
            Ok(ExitCode::SUCCESS)
        }
        other => unexpected(other),
    }
}

/// `queue`: the inputs queued in a session.
async fn queue(session: String, json: bool) -> Result<ExitCode, ClientError> {
    let request = Request::Session {
        session,
        request: SessionRequest::Queue,
    };
    match ask(ClientStart::Queue, request).await? {
        Response::Queue { inputs } => {
            stdout::print(&render::queue(&inputs, json))?;
            Ok(ExitCode::SUCCESS)
        }
        other => unexpected(other),
    }
}

/// `withdraw`: take a queued input back before it runs.
async fn withdraw(session: String, run: u64) -> Result<ExitCode, ClientError> {
    let request = Request::Session {
        session,
        request: SessionRequest::Withdraw { run },
    };
    match ask(ClientStart::Withdraw, request).await? {
        Response::Ok => {
            outln!("withdrew run {run}")?;
            Ok(ExitCode::SUCCESS)
        }
        other => unexpected(other),
    }
}

/// `doctor`: every check, one line each (or one JSON array); exit 1 when
/// one failed.
async fn doctor(json: bool) -> Result<ExitCode, ClientError> {
    let checks = super::doctor::run().await;
    if json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&checks).unwrap_or_default()
        )?;
    } else {
        for c in &checks {
            outln!(
                "{} {}: {}",
                if c.ok { "ok  " } else { "FAIL" },
                c.check,
                c.detail
            )?;
        }
    }
    Ok(if checks.iter().all(|c| c.ok) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The environment `new` asks for: this process's exported variables
/// (those carried, `session::env`), or none with `--clean-env`, and the
/// `--env` assignments.
pub(crate) fn session_env(assignments: &[String], clean: bool) -> Result<SessionEnv, ClientError> {
    let client = (!clean).then(|| {
        carried(
            std::env::vars_os()
                .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))),
        )
    });
    let set = assignments
        .iter()
        .map(|text| parse_assignment(text))
        .collect::<Result<_, _>>()?;
    Ok(SessionEnv { client, set })
}

pub(crate) fn absolute(path: &str) -> Result<String, ClientError> {
    let path = std::path::Path::new(path);
    let full = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(ClientError::system(
                "cannot read this client's working directory",
            ))?
            .join(path)
    };
    let what = format!("working directory {}", full.display());
    full.canonicalize()
        .map(|p| p.display().to_string())
        .map_err(ClientError::system(what))
}

/// What a request holds besides its command line, at most: the session's
/// reference, the request's own words, the standard input's pid.
const REQUEST_OVERHEAD_BYTES: usize = 4 * 1024;

/// `line`, if a request can carry it (one frame, as JSON); else why not,
/// and what to do instead.
fn fitting(line: String) -> Result<String, ClientError> {
    let encoded = serde_json::to_string(&line).map_or(usize::MAX, |json| json.len());
    if encoded.saturating_add(REQUEST_OVERHEAD_BYTES) <= crate::protocol::MAX_FRAME_BYTES {
        return Ok(line);
    }
    Err(ClientError::CommandTooLong {
        bytes: line.len(),
        limit_kib: (crate::protocol::MAX_FRAME_BYTES - REQUEST_OVERHEAD_BYTES) / 1024,
    })
}
