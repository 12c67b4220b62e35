//! Commands and their flags.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tokio::io::AsyncBufReadExt;

use super::connect::{connect, Client};
use super::render;
use crate::laws::notice::{MessageKind, StoredMessage, View};
use crate::laws::replace::ClientStart;
use crate::laws::timing::{CLIENT_RELAUNCH_WITHIN_MS, RELAUNCH_RETRY_MS};
use crate::protocol::message::{Request, Response, SessionRequest, ShutdownMode, Stream};
use crate::session::transcript::{Entry, EntryBody};

#[derive(Debug, Parser)]
#[command(
    name = "eukhe",
    version,
    about = "Keeps coding-agent sessions alive across crashes, upgrades and reboots",
    long_about = "Keeps coding-agent sessions alive across crashes, upgrades and reboots.\n\n\
A session is a durable transcript and a kernel: one long-lived process that holds the \
session's shell. Queued inputs run in it one at a time, in order; `eukhe bash` runs at once \
beside them. Everything a command leaves in the shell persists: the working directory, every \
variable, functions, aliases, umask, set -o and shopt options, traps. A run outlives its \
worker: a worker that crashes, is replaced or loses its daemon stops no run, and the next one \
records the run's output and end exactly once. When the kernel itself is gone (a reboot, a \
crash, `shutdown --force`), the run in flight is marked interrupted and never rerun, and a new \
kernel restores the saved shell state (background jobs and open file descriptors cannot come \
back; one restore notice says so). `eukhe cancel` ends the running run (SIGINT, then SIGTERM \
and SIGKILL after the cancel grace); `eukhe queue` and `eukhe withdraw` show and withdraw \
queued inputs."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the supervisor in the foreground.
    Daemon,
    /// Run one session's worker (started by the supervisor, never by hand).
    #[command(hide = true)]
    Worker { session: String },
    /// Run one session's kernel (started by its worker, never by hand).
    #[command(hide = true)]
    Kernel {
        session: String,
        /// Fork into the background once the kernel serves.
        #[arg(long)]
        detach: bool,
    },
    /// Create a session and print its id.
    New {
        #[arg(long)]
        name: Option<String>,
        /// Working directory of the session's kernel (default: $HOME).
        #[arg(long)]
        cwd: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// List sessions.
    Ls {
        #[arg(long)]
        json: bool,
    },
    /// Queue input (a run) in a session.
    Send {
        session: String,
        text: String,
        /// Wait for the run, stream its output and exit with its status.
        #[arg(long)]
        wait: bool,
    },
    /// Run a command now in the session's shell, beside any run in progress
    /// (everything it leaves in the shell persists). One argument after
    /// `--` is a command line (`'cd src && make'`); several are a command
    /// and its arguments, each passed as it is (`sh -c 'exit 3'`).
    Bash {
        session: String,
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Cancel the running run (SIGINT, then SIGTERM and SIGKILL after the
    /// cancel grace); exit 1 when there was nothing to cancel.
    Cancel {
        session: String,
        /// Also withdraw every queued input.
        #[arg(long)]
        all: bool,
    },
    /// List the inputs queued in a session.
    Queue {
        session: String,
        #[arg(long)]
        json: bool,
    },
    /// Withdraw a queued input before it runs (it never runs).
    Withdraw { session: String, run: u64 },
    /// Print a session's transcript: output bytes as the commands wrote
    /// them, between marked lines.
    Log {
        session: String,
        /// One JSON array of entries; output is `"text"` when it is valid
        /// UTF-8, else `"base64"`.
        #[arg(long, conflicts_with = "raw")]
        json: bool,
        /// Only the last N entries (read from the end of the transcript).
        #[arg(long, value_name = "N")]
        tail: Option<u64>,
        /// Write input N's output bytes exactly, and nothing else (N is the
        /// number `send` printed, or a user bash's number in `log`).
        #[arg(long, value_name = "N")]
        raw: Option<u64>,
        /// With --raw: only this stream.
        #[arg(long, value_enum, requires = "raw")]
        stream: Option<StreamArg>,
    },
    /// Replay a session's transcript, then follow it; typed lines are input.
    /// Ctrl-C cancels the running run, Ctrl-\ detaches, end of input
    /// detaches once the inputs sent have run.
    Attach { session: String },
    /// The daemon's version, build, pid, backend and session counts.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Start a given-up session afresh.
    Restart { session: String },
    /// Stop the daemon.
    Shutdown {
        /// Stop only if no session has work (runs are never aborted).
        #[arg(long, conflicts_with = "force")]
        if_idle: bool,
        /// Stop every worker now.
        #[arg(long)]
        force: bool,
    },
    /// Check the configuration, directories, shell and daemon.
    Doctor {
        #[arg(long)]
        json: bool,
    },
    /// The laws' timeouts, their ordering and the restart schedule.
    Laws {
        #[arg(long)]
        json: bool,
    },
}

/// Run a client command.
pub fn run(command: Command) -> ExitCode {
    match crate::runtime::block_on_local("client", client(command)) {
        Ok(code) => code,
        Err(message) => fail(message),
    }
}

fn fail(message: String) -> ExitCode {
    eprintln!("eukhe: {message}");
    ExitCode::FAILURE
}

async fn client(command: Command) -> Result<ExitCode, String> {
    match command {
        Command::New { name, cwd, json } => {
            let cwd = match cwd {
                Some(cwd) => Some(absolute(&cwd)?),
                None => std::env::current_dir()
                    .ok()
                    .map(|d| d.display().to_string()),
            };
            let mut client = connect(ClientStart::New).await?;
            match client.ask(Request::New { name, cwd }).await? {
                Response::Created { id, name } => {
                    if json {
                        println!("{}", serde_json::json!({ "id": id, "name": name }));
                    } else {
                        println!("{id}");
                    }
                    Ok(ExitCode::SUCCESS)
                }
                other => unexpected(other),
            }
        }
        Command::Ls { json } => {
            let mut client = connect(ClientStart::Ls).await?;
            match client.ask(Request::List).await? {
                Response::Sessions { sessions } => {
                    print!("{}", render::sessions(&sessions, json));
                    Ok(ExitCode::SUCCESS)
                }
                other => unexpected(other),
            }
        }
        Command::Status { json } => {
            let mut client = connect(ClientStart::Status).await?;
            match client.ask(Request::Status).await? {
                Response::Status(status) => {
                    print!("{}", render::status(&status, json));
                    Ok(ExitCode::SUCCESS)
                }
                other => unexpected(other),
            }
        }
        Command::Restart { session } => {
            let mut client = connect(ClientStart::Restart).await?;
            match client
                .ask(Request::Restart {
                    session: session.clone(),
                })
                .await?
            {
                Response::Ok => {
                    println!("session {session} restarted");
                    Ok(ExitCode::SUCCESS)
                }
                other => unexpected(other),
            }
        }
        Command::Shutdown { if_idle, force } => {
            let mode = match (if_idle, force) {
                (true, _) => ShutdownMode::IfIdle,
                (_, true) => ShutdownMode::Force,
                _ => ShutdownMode::Normal,
            };
            let Some(mut client) = super::connect::connect_existing().await? else {
                println!("no daemon is running");
                return Ok(ExitCode::SUCCESS);
            };
            match client.ask(Request::Shutdown { mode }).await? {
                Response::Shutdown { stopped, message } => {
                    println!("{message}");
                    Ok(if stopped {
                        ExitCode::SUCCESS
                    } else {
                        ExitCode::FAILURE
                    })
                }
                other => unexpected(other),
            }
        }
        Command::Send {
            session,
            text,
            wait,
        } => {
            let mut client = connect(ClientStart::Send).await?;
            client
                .send(&Request::Session {
                    session,
                    request: SessionRequest::Send { text, wait },
                })
                .await?;
            stream_until_exit(&mut client, wait).await
        }
        Command::Bash { session, command } => {
            let mut client = connect(ClientStart::Bash).await?;
            let command = command_line(&command);
            client
                .send(&Request::Session {
                    session,
                    request: SessionRequest::Bash { command },
                })
                .await?;
            stream_until_exit(&mut client, true).await
        }
        Command::Log {
            session,
            json,
            tail,
            raw,
            stream,
        } => {
            let mut client = connect(ClientStart::Log).await?;
            client
                .send(&Request::Session {
                    session,
                    request: SessionRequest::Log { tail, input: raw },
                })
                .await?;
            let stream = stream.map(Stream::from);
            let mut out = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
            let mut array = if json {
                Some(render::JsonArray::start(&mut out).map_err(stdout_failed)?)
            } else {
                None
            };
            loop {
                let entry = match client.receive().await? {
                    Response::Entry(entry) => entry,
                    Response::Replayed => break,
                    other => return unexpected(other),
                };
                let written = match (&mut array, raw) {
                    (Some(array), _) => array.push(&mut out, &entry),
                    (None, Some(_)) => match &entry.body {
                        EntryBody::Output {
                            stream: from, data, ..
                        } if stream.map_or(true, |s| s == *from) => out.write_all(data),
                        _ => Ok(()),
                    },
                    (None, None) => out.write_all(&render::entry(&entry)),
                };
                written.map_err(stdout_failed)?;
            }
            if let Some(array) = array {
                array.finish(&mut out).map_err(stdout_failed)?;
            }
            out.flush().map_err(stdout_failed)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Attach { session } => attach(session).await,
        Command::Cancel { session, all } => {
            let mut client = connect(ClientStart::Cancel).await?;
            let request = Request::Session {
                session,
                request: SessionRequest::Cancel { all },
            };
            match client.ask(request).await? {
                Response::Cancelled { run, withdrawn } => {
                    if let Some(run) = run {
                        println!("cancelling run {run}");
                    }
                    for input in &withdrawn {
                        println!("withdrew run {input}");
                    }
                    if run.is_none() && withdrawn.is_empty() {
                        println!("nothing to cancel");
                        return Ok(ExitCode::FAILURE);
                    }
                    Ok(ExitCode::SUCCESS)
                }
                other => unexpected(other),
            }
        }
        Command::Queue { session, json } => {
            let mut client = connect(ClientStart::Queue).await?;
            let request = Request::Session {
                session,
                request: SessionRequest::Queue,
            };
            match client.ask(request).await? {
                Response::Queue { inputs } => {
                    print!("{}", render::queue(&inputs, json));
                    Ok(ExitCode::SUCCESS)
                }
                other => unexpected(other),
            }
        }
        Command::Withdraw { session, run } => {
            let mut client = connect(ClientStart::Withdraw).await?;
            let request = Request::Session {
                session,
                request: SessionRequest::Withdraw { run },
            };
            match client.ask(request).await? {
                Response::Ok => {
                    println!("withdrew run {run}");
                    Ok(ExitCode::SUCCESS)
                }
                other => unexpected(other),
            }
        }
        Command::Doctor { json } => {
            let checks = super::doctor::run().await;
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&checks).unwrap_or_default()
                );
            } else {
                for c in &checks {
                    println!(
                        "{} {}: {}",
                        if c.ok { "ok  " } else { "FAIL" },
                        c.check,
                        c.detail
                    );
                }
            }
            Ok(if checks.iter().all(|c| c.ok) {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Command::Daemon
        | Command::Worker { .. }
        | Command::Kernel { .. }
        | Command::Laws { .. } => {
            unreachable!("served without a client")
        }
    }
}

fn absolute(path: &str) -> Result<String, String> {
    let path = std::path::Path::new(path);
    let full = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| e.to_string())?
            .join(path)
    };
    full.canonicalize()
        .map(|p| p.display().to_string())
        .map_err(|e| format!("working directory {}: {e}", full.display()))
}

/// The shell command line for `bash`'s arguments: one is a command line
/// already; several are words, each quoted so the shell passes it as it
/// is.
fn command_line(words: &[String]) -> String {
    if let [line] = words {
        return line.clone();
    }
    let quote = |word: &String| {
        let plain = !word.is_empty()
            && word
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_./:,+@%".contains(&b));
        if plain {
            word.clone()
        } else {
            format!("'{}'", word.replace('\'', "'\\''"))
        }
    };
    words.iter().map(quote).collect::<Vec<_>>().join(" ")
}

/// `--stream` of `log --raw`.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum StreamArg {
    Stdout,
    Stderr,
}

impl From<StreamArg> for Stream {
    fn from(arg: StreamArg) -> Stream {
        match arg {
            StreamArg::Stdout => Stream::Stdout,
            StreamArg::Stderr => Stream::Stderr,
        }
    }
}

fn stdout_failed(e: std::io::Error) -> String {
    format!("cannot write to standard output: {e}")
}

fn unexpected(response: Response) -> Result<ExitCode, String> {
    match response {
        Response::Error { message } => Err(message),
        other => Err(format!("unexpected answer from the daemon: {other:?}")),
    }
}

/// Print output as it comes; with `wait`, end with the command's status.
async fn stream_until_exit(client: &mut Client, wait: bool) -> Result<ExitCode, String> {
    loop {
        match client.receive().await? {
            Response::Queued { input } => {
                if !wait {
                    println!("queued as run {input}");
                    return Ok(ExitCode::SUCCESS);
                }
            }
            Response::Output { stream, data } => {
                let _ = match stream {
                    Stream::Stdout => std::io::stdout().write_all(&data),
                    Stream::Stderr => std::io::stderr().write_all(&data),
                };
                let _ = std::io::stdout().flush();
            }
            Response::Exit { status } => return Ok(ExitCode::from(status.clamp(0, 255) as u8)),
            other => return unexpected(other),
        }
    }
}

async fn attach(session: String) -> Result<ExitCode, String> {
    use tokio::signal::unix::{signal, SignalKind};
    let interactive = std::io::stdin().is_terminal();
    let mut client = open_attach(&session, ClientStart::Attach, None).await?;
    // The attach connection is the worker's (handed over by the
    // supervisor), so a lost supervisor is noticed on a connection of its
    // own, and relaunched.
    let mut watch = connect(ClientStart::AttachWatch).await.ok();
    if interactive {
        eprintln!(
            "attached to {session}: typed lines are queued as input; \
             Ctrl-C cancels the running run, Ctrl-\\ or Ctrl-D detaches"
        );
    }
    let mut interrupts =
        signal(SignalKind::interrupt()).map_err(|e| format!("cannot catch Ctrl-C: {e}"))?;
    let mut quits = signal(SignalKind::quit()).map_err(|e| format!("cannot catch Ctrl-\\: {e}"))?;
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    let mut stdin_open = true;
    // An attach replays the transcript's last entries after every restore
    // notice; attaching again replays what came after the last entry
    // seen. The view (the notice law's) shows every entry, every notice,
    // once.
    let mut view = View::default();
    let mut runs = RunsSeen::default();
    loop {
        if !stdin_open && runs.sent_all_ended() {
            return Ok(ExitCode::SUCCESS);
        }
        tokio::select! {
            response = client.receive() => match response {
                Ok(Response::Entry(entry)) => {
                    runs.last_seq = runs.last_seq.max(Some(entry.seq));
                    runs.see(&entry.body);
                    if view.deliver(stored_message(&entry)) {
                        let mut out = std::io::stdout().lock();
                        let _ = out.write_all(&render::entry(&entry)).and_then(|_| out.flush());
                    }
                }
                Ok(Response::Queued { input }) => {
                    runs.unanswered = runs.unanswered.saturating_sub(1);
                    runs.sent.push(input);
                }
                Ok(Response::Replayed) => {}
                Ok(Response::Cancelled { run: None, .. }) => {
                    eprintln!("eukhe: no run is running (Ctrl-\\ detaches)");
                }
                Ok(Response::Cancelled { run: Some(run), .. }) => {
                    if std::mem::take(&mut runs.cancel_asked) {
                        eprintln!("eukhe: cancelling run {run} (Ctrl-\\ detaches)");
                    }
                }
                Ok(other) => return unexpected(other),
                Err(_) => client = reattach(&session, runs.last_seq).await?,
            },
            _ = interrupts.recv() => {
                // Say which run is cancelled first when this view knows;
                // else the worker's answer says it.
                if let Some(run) = runs.running {
                    eprintln!("eukhe: cancelling run {run} (Ctrl-\\ detaches)");
                }
                runs.cancel_asked = runs.running.is_none();
                let request = Request::Session { session: session.clone(), request: SessionRequest::Cancel { all: false } };
                if client.send(&request).await.is_err() {
                    client = reattach(&session, runs.last_seq).await?;
                }
            }
            _ = quits.recv() => {
                eprintln!("eukhe: detached from {session}");
                return Ok(ExitCode::SUCCESS);
            }
            _ = supervisor_lost(&mut watch) => watch = Some(relaunch().await?),
            line = lines.next_line(), if stdin_open => match line {
                Ok(Some(text)) if !text.trim().is_empty() => {
                    let request = Request::Session { session: session.clone(), request: SessionRequest::Send { text, wait: false } };
                    if client.send(&request).await.is_err() {
                        client = reattach(&session, runs.last_seq).await?;
                        client.send(&request).await?;
                    }
                    runs.unanswered += 1;
                }
                Ok(Some(_)) => {}
                // End of input: detach once what this client sent has run.
                _ => stdin_open = false,
            },
        }
    }
}

/// What an attached client knows of runs from the entries it sees.
#[derive(Default)]
struct RunsSeen {
    running: Option<u64>,
    /// Runs this client queued.
    sent: Vec<u64>,
    /// Inputs sent whose run number has not come back yet.
    unanswered: u32,
    /// A cancel was asked while this view knew of no running run.
    cancel_asked: bool,
    ended: std::collections::HashSet<u64>,
    /// The last entry shown: attaching again replays what came after it.
    last_seq: Option<u64>,
}

impl RunsSeen {
    fn see(&mut self, body: &EntryBody) {
        match body {
            EntryBody::RunStarted { input } => self.running = Some(*input),
            EntryBody::RunFinished { input, .. }
            | EntryBody::RunInterrupted { input }
            | EntryBody::Withdrawn { input } => {
                self.ended.insert(*input);
                if self.running == Some(*input) {
                    self.running = None;
                }
            }
            _ => {}
        }
    }

    fn sent_all_ended(&self) -> bool {
        self.unanswered == 0 && self.sent.iter().all(|run| self.ended.contains(run))
    }
}

/// A transcript entry as the notice law sees it.
fn stored_message(entry: &Entry) -> StoredMessage {
    let kind = match entry.body {
        EntryBody::Notice {
            restore: Some(restore),
            ..
        } => MessageKind::RestoreNotice { restore },
        _ => MessageKind::Entry,
    };
    StoredMessage {
        id: entry.seq,
        kind,
    }
}

async fn open_attach(
    session: &str,
    start: ClientStart,
    after: Option<u64>,
) -> Result<Client, String> {
    let mut client = connect(start).await?;
    client
        .send(&Request::Session {
            session: session.to_string(),
            request: SessionRequest::Attach { after },
        })
        .await?;
    Ok(client)
}

/// Resolves when the supervisor behind `watch` is gone (an idle connection
/// to it closes); never without one.
async fn supervisor_lost(watch: &mut Option<Client>) {
    match watch {
        Some(client) => {
            let _ = client.receive().await;
        }
        None => std::future::pending().await,
    }
}

/// The supervisor is lost: start one of this build within
/// `CLIENT_RELAUNCH_WITHIN_MS` if none listens (a background start: it
/// never replaces a daemon another client started), and watch it.
async fn relaunch() -> Result<Client, String> {
    within_relaunch(|| connect(ClientStart::Relaunch))
        .await
        .map_err(|e| format!("lost the daemon and could not start another within a minute: {e}"))
}

/// The connection dropped (worker restart, lost supervisor): attach again
/// within `CLIENT_RELAUNCH_WITHIN_MS`, starting a supervisor of this build
/// if none listens. A reattach is a background start: it never replaces a
/// daemon another client started.
async fn reattach(session: &str, after: Option<u64>) -> Result<Client, String> {
    within_relaunch(|| open_attach(session, ClientStart::Reattach, after))
        .await
        .map_err(|e| {
            format!("lost the session {session} and could not attach again within a minute: {e}")
        })
}

/// Try `attempt` until it succeeds or `CLIENT_RELAUNCH_WITHIN_MS` has
/// passed; the error is the last attempt's.
async fn within_relaunch<F, Fut>(mut attempt: F) -> Result<Client, String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Client, String>>,
{
    let deadline =
        tokio::time::Instant::now() + std::time::Duration::from_millis(CLIENT_RELAUNCH_WITHIN_MS);
    let mut last_error = String::new();
    while tokio::time::Instant::now() < deadline {
        match attempt().await {
            Ok(client) => return Ok(client),
            Err(e) => last_error = e,
        }
        tokio::time::sleep(std::time::Duration::from_millis(RELAUNCH_RETRY_MS)).await;
    }
    Err(last_error)
}
