//! `eukhe attach` onto a terminal run, from a terminal: the run's screen
//! as it is now (painted from the worker's screen, never replayed from the
//! start), then bytes both ways as `bash --tty` passes them
//! (`interactive`: raw mode, the detach key, the window's size, the
//! terminal's modes given back on every exit path). Several clients may be
//! attached at once; each sees the output, the keys of each reach the
//! program, and the terminal takes the size of the one that attached or
//! typed last. `--read-only` writes neither keys nor sizes.
//!
//! A lost connection (a worker or daemon gone) is made again as an attach
//! makes it, and the screen painted again from the new worker's screen,
//! unless the kernel's echo has brought the screen past it already.
//! When the run ends the client says so in one line and exits: the line
//! view would write the transcript's lines over the program's last screen.
//!
//! An attach that types also reads the run's output its kernel sends on
//! the typist's connection (the echo, past the worker), merged with the
//! worker's by spool offset (`terminal::merge`): whichever comes first is
//! shown, each byte once.

use std::cell::RefCell;
use std::io;
use std::os::fd::AsFd;
use std::process::ExitCode;
use std::rc::Rc;
use std::sync::Arc;

use tokio::net::unix::OwnedReadHalf;
use tokio::sync::mpsc;

use super::attach::{ask_on, open, within_relaunch};
use super::connect::Client;
use super::error::ClientError;
use super::interactive::{pass_terminal, passthrough_failed};
use super::supervisor_watch::SupervisorWatch;
use super::terminal::merge::Merge;
use super::terminal::passthrough::{Ended, KeySink};
use super::terminal::raw::{watch_signals, RawMode, TerminalSignals};
use super::terminal::size::window_size;
use super::tty_echo::Echoing;
use super::typist::Typing;
use crate::config::detach_key::DetachKey;
use crate::laws::replace::ClientStart;
use crate::protocol::message::{Response, SessionRequest};
use crate::protocol::screen::ScreenState;
use crate::protocol::tty::WindowSize;

/// What a person's terminal is cleared with before a screen is painted:
/// the main screen, modes reset, cursor home, everything erased.
const CLEAR: &[u8] = b"\x1b[?1049l\x1b[m\x1b[H\x1b[2J";

/// The terminal run a watch follows: its connection and number.
struct Watched {
    client: Client,
    input: u64,
}

/// Attach to `session`'s current terminal run, if it has one that runs:
/// `None` when it has none (the caller shows the line view).
pub async fn attach_terminal(
    session: &str,
    read_only: bool,
    detach: DetachKey,
) -> Result<Option<ExitCode>, ClientError> {
    let (client, answer) = watch(session, None, None).await?;
    let (input, redraw) = match answer {
        Response::Redraw { input, data, at } => (input, (data, at)),
        _ => return Ok(None),
    };
    let stdin = io::stdin();
    let raw = Arc::new(
        RawMode::enter(stdin.as_fd())
            .map_err(ClientError::system("cannot put the terminal in raw mode"))?,
    );
    let signals = TerminalSignals::new()
        .map_err(ClientError::system("cannot watch the terminal's signals"))?;
    let watch = tokio::spawn(watch_signals(raw.clone(), signals));
    let watched = Watched { client, input };
    // The watch is the worker's connection (handed over): a lost
    // supervisor is noticed on a connection of its own, and relaunched.
    let supervisor = SupervisorWatch::open().await;
    let ended = pass_through(session, (watched, supervisor), redraw, (read_only, detach)).await;
    watch.abort();
    let _ = watch.await;
    drop(raw);
    match ended? {
        Some(words) => eprintln!("eukhe: {words}; detached from {session}"),
        None => eprintln!(
            "eukhe: detached; run {input} goes on in {session} (`eukhe attach {session}` shows it)"
        ),
    }
    Ok(Some(ExitCode::SUCCESS))
}

/// Pass the terminal through until the run ends (what ended it, in
/// words) or the person detaches (`None`).
async fn pass_through(
    session: &str,
    (watched, supervisor): (Watched, SupervisorWatch),
    (redraw, at): (Vec<u8>, Option<u64>),
    (read_only, detach): (bool, DetachKey),
) -> Result<Option<String>, ClientError> {
    let input = watched.input;
    let (output, program) = mpsc::unbounded_channel();
    let merge = Rc::new(RefCell::new(Merge::default()));
    merge.borrow_mut().redrawn(at);
    let _ = output.send([CLEAR, &redraw].concat());
    // The echo's reader does not hold the screen open: the run's end, on
    // the worker's path, ends it.
    let echo_output = output.downgrade();
    let following = follow((session, &supervisor), watched, output, merge.clone());
    let passing = async {
        if read_only {
            return pass_terminal(program, &mut NoKeys, &detach).await;
        }
        let size = window_size(io::stdin().as_fd());
        let window = size.map(|(rows, cols)| WindowSize { rows, cols });
        let mut keys = Typing::open(session, input, window, at.is_some()).await;
        let _echoing = keys
            .echo_reader()
            .map(|read| Echoing(tokio::task::spawn_local(echoes(read, merge, echo_output))));
        // Attaching makes this window the one whose size the terminal takes.
        if let Some((rows, cols)) = size {
            let _ = keys.resize(rows, cols).await;
        }
        pass_terminal(program, &mut keys, &detach).await
    };
    tokio::pin!(following, passing);
    let mut end = None;
    loop {
        tokio::select! {
            done = &mut following, if end.is_none() => end = Some(done?),
            _ = supervisor.lost() => supervisor.relaunch().await?,
            passed = &mut passing => match passed? {
                Ended::Detached | Ended::StdinClosed => return Ok(None),
                Ended::Failed(e) => return Err(passthrough_failed(e)),
                Ended::OutputEnded => break,
            },
        }
    }
    match end {
        Some(end) => Ok(Some(end)),
        None => following.await.map(Some),
    }
}

/// Send run `watched`'s output to `output` until it ends (what ended it,
/// in words); a lost connection is made again and the screen painted anew.
async fn follow(
    (session, supervisor): (&str, &SupervisorWatch),
    mut watched: Watched,
    output: mpsc::UnboundedSender<Vec<u8>>,
    merge: Rc<RefCell<Merge>>,
) -> Result<String, ClientError> {
    let input = watched.input;
    let show = |pieces: Vec<bytes::Bytes>| {
        for piece in pieces {
            let _ = output.send(piece.to_vec());
        }
    };
    loop {
        match watched.client.receive().await {
            Ok(Response::Output { data, .. }) => show(merge.borrow_mut().from_worker(None, data)),
            Ok(Response::OutputAt { data, end, .. }) => {
                show(merge.borrow_mut().from_worker(Some(end), data))
            }
            Ok(Response::Exit {
                cut_short: Some(why),
                ..
            }) => return Ok(why),
            Ok(Response::Exit { status, .. }) => return Ok(format!("run {input} exited {status}")),
            Ok(other) => return super::cli::unexpected(other),
            Err(_) => match watch_again(session, input, supervisor).await? {
                Again::Watching(client, (redraw, at)) => {
                    watched.client = client;
                    // A screen that passed the new worker's (the kernel's
                    // echo went on while no worker ran) is left as it is.
                    if merge.borrow_mut().redrawn(at) {
                        let _ = output.send([CLEAR, &redraw].concat());
                    }
                }
                Again::Ended(words) => return Ok(words),
            },
        }
    }
}

/// What watching a run again found.
enum Again {
    /// It runs: the new connection, the bytes that paint its screen and
    /// the spool offset they paint it to.
    Watching(Client, (Vec<u8>, Option<u64>)),
    /// It ended meanwhile, in words.
    Ended(String),
}

/// Watch run `input` again within `CLIENT_RELAUNCH_WITHIN_MS` (a new
/// worker answers once its kernel link is up and the screen rebuilt).
async fn watch_again(
    session: &str,
    input: u64,
    supervisor: &SupervisorWatch,
) -> Result<Again, ClientError> {
    within_relaunch(|| async move {
        match watch(session, Some(supervisor), Some(input)).await? {
            (client, Response::Redraw { data, at, .. }) => Ok(Again::Watching(client, (data, at))),
            // The worker's words say how it ended (cut short, its kernel
            // gone, or its status).
            (_, Response::Error { message }) => match ended(session, input, supervisor).await {
                Some(_) => Ok(Again::Ended(message)),
                None => Err(ClientError::Daemon { message }),
            },
            (_, other) => super::cli::unexpected(other),
        }
    })
    .await
    .map_err(|e| {
        e.within(format!(
            "lost the session {session} and could not attach again within a minute"
        ))
    })
}

/// Watch run `input` (none: the current run), asking where in the spool
/// its screen and output are; a worker of an earlier build, which takes
/// that for a malformed request, is asked again as before. `again`: the
/// watch that says whether a lost connection may start a daemon (none: an
/// attach's start).
async fn watch(
    session: &str,
    again: Option<&SupervisorWatch>,
    input: Option<u64>,
) -> Result<(Client, Response), ClientError> {
    let request = SessionRequest::WatchTerminal {
        input,
        offsets: true,
    };
    let start = match again {
        Some(_) => ClientStart::Reattach,
        None => ClientStart::Attach,
    };
    let ask = |request| async move {
        match again {
            Some(supervisor) => ask_on(supervisor.reach(session).await?, session, request).await,
            None => open(session, start, request).await,
        }
    };
    let mut client = ask(request).await?;
    match client.receive().await? {
        Response::Error { message } if message.starts_with("malformed message") => {
            let request = SessionRequest::WatchTerminal {
                input,
                offsets: false,
            };
            let mut client = ask(request).await?;
            let answer = client.receive().await?;
            Ok((client, answer))
        }
        answer => Ok((client, answer)),
    }
}

/// Show the run's output the kernel sends on the typist's connection
/// (`read`), merged with the worker's, until either is gone.
async fn echoes(
    read: OwnedReadHalf,
    merge: Rc<RefCell<Merge>>,
    output: mpsc::WeakUnboundedSender<Vec<u8>>,
) {
    super::tty_echo::echoes(read, |echo| {
        let Some(output) = output.upgrade() else {
            return false;
        };
        for piece in merge
            .borrow_mut()
            .from_kernel(echo.from, echo.end, echo.data)
        {
            let _ = output.send(piece.to_vec());
        }
        true
    })
    .await
}

/// The status run `input` ended with, if its screen says it ended.
async fn ended(session: &str, input: u64, supervisor: &SupervisorWatch) -> Option<i32> {
    let request = SessionRequest::Screen { input: Some(input) };
    let client = supervisor.reach(session).await.ok()?;
    let mut client = ask_on(client, session, request).await.ok()?;
    match client.receive().await.ok()? {
        Response::Screen {
            screen:
                ScreenState {
                    ended: Some(status),
                    ..
                },
        } => Some(status),
        _ => None,
    }
}

/// A read-only attach's keys and sizes: none leave this client.
struct NoKeys;

impl KeySink for NoKeys {
    async fn keys(&mut self, _bytes: &[u8]) -> io::Result<()> {
        Ok(())
    }

    async fn resize(&mut self, _rows: u16, _cols: u16) -> io::Result<()> {
        Ok(())
    }
}
