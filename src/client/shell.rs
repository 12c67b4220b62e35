//! `eukhe attach S --shell`: an interactive bash on a terminal the
//! session's kernel holds, over the session's state, passed through to
//! this terminal. The shell is a terminal run whose text is
//! `SHELL_COMMAND`; when one runs already, this attaches to it again:
//! its output from the latest command's mark on (enough to redraw a
//! prompt or the full-screen program running), then live, and keys and
//! window sizes go to its terminal.

use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::AsFd;
use std::process::ExitCode;
use std::sync::Arc;

use tokio::sync::mpsc;

use super::attach::open;
use super::error::ClientError;
use super::interactive::{can_pass_through, pass_terminal, passthrough_failed, RunKeys};
use super::log::{end_of_input, exit_code, reopen, InputEnd};
use super::terminal::passthrough::{Ended, KeySink};
use super::terminal::raw::{watch_signals, RawMode, TerminalSignals};
use crate::config::detach_key::DetachKey;
use crate::laws::replace::ClientStart;
use crate::protocol::message::{Response, SessionRequest};
use crate::protocol::tty::SHELL_COMMAND;
use crate::session::transcript::{Entry, EntryBody};

/// How many of the transcript's last entries are read to find a running
/// shell run.
const SHELL_TAIL: u64 = 200;

/// `eukhe attach S --shell`.
pub async fn attach_shell(
    session: String,
    detach_key: Option<DetachKey>,
) -> Result<ExitCode, ClientError> {
    if !can_pass_through() {
        return Err(ClientError::Usage(
            "`eukhe attach --shell` needs a terminal: run it with standard input and output \
             on one (without one, use `eukhe send --tty` and `eukhe keys`)"
                .to_string(),
        ));
    }
    let detach = super::tty_run::detach_key(detach_key)?;
    match running(&session).await? {
        Running::Shell(shell) => return reattach(&session, shell, detach).await,
        Running::Other(input) => {
            eprintln!("eukhe: run {input} runs in {session}; the shell starts once it ends")
        }
        Running::Nothing => {}
    }
    let request = SessionRequest::Send {
        text: SHELL_COMMAND.to_string(),
        wait: true,
        tty: Some(super::tty_run::window_size()),
    };
    super::interactive::run(&session, ClientStart::Attach, request, detach).await
}

/// A shell run that runs now: its number, and the entry after which its
/// output redraws its screen.
struct RunningShell {
    input: u64,
    after: Option<u64>,
}

/// What the transcript's last entries show running.
enum Running {
    Shell(RunningShell),
    /// Another run (by its number).
    Other(u64),
    Nothing,
}

/// What runs now, as the transcript's last entries show it.
async fn running(session: &str) -> Result<Running, ClientError> {
    let request = SessionRequest::Log {
        tail: Some(SHELL_TAIL),
        input: None,
        after: None,
        follow: false,
    };
    let mut client = open(session, ClientStart::Attach, request).await?;
    let mut seen = TailSeen::default();
    loop {
        match client.receive().await? {
            Response::Entry(entry) => seen.see(&entry),
            Response::Replayed => return Ok(seen.running()),
            other => return super::cli::unexpected(other),
        }
    }
}

/// What the transcript's last entries say of its runs.
#[derive(Default)]
struct TailSeen {
    /// Terminal runs' texts.
    texts: BTreeMap<u64, String>,
    /// Runs with typed commands.
    shells: BTreeSet<u64>,
    /// Each run's last typed command's entry.
    last_mark: BTreeMap<u64, u64>,
    ended: BTreeSet<u64>,
    running: Option<u64>,
}

impl TailSeen {
    fn see(&mut self, entry: &Entry) {
        match &entry.body {
            EntryBody::Input {
                input,
                text,
                tty: Some(_),
            } => {
                self.texts.insert(*input, text.clone());
            }
            EntryBody::RunStarted { input } => self.running = Some(*input),
            // Output may come after its run's end (until it settles).
            EntryBody::Output {
                input: Some(input), ..
            } if self.running.is_none() && !self.ended.contains(input) => {
                self.running = Some(*input)
            }
            EntryBody::ShellCommand { input, .. } if !self.ended.contains(input) => {
                self.shells.insert(*input);
                self.last_mark.insert(*input, entry.seq);
                self.running = self.running.or(Some(*input));
            }
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

    fn running(&self) -> Running {
        let Some(input) = self.running else {
            return Running::Nothing;
        };
        let is_shell = self.shells.contains(&input)
            || self
                .texts
                .get(&input)
                .is_some_and(|text| text.as_str() == SHELL_COMMAND);
        if !is_shell {
            return Running::Other(input);
        }
        Running::Shell(RunningShell {
            input,
            after: self.last_mark.get(&input).map(|seq| seq.saturating_sub(1)),
        })
    }
}

/// Pass this terminal through to running shell run `shell` until it ends
/// or the detach key.
async fn reattach(
    session: &str,
    shell: RunningShell,
    detach: DetachKey,
) -> Result<ExitCode, ClientError> {
    let stdin = std::io::stdin();
    let raw = Arc::new(
        RawMode::enter(stdin.as_fd())
            .map_err(ClientError::system("cannot put the terminal in raw mode"))?,
    );
    let signals = TerminalSignals::new()
        .map_err(ClientError::system("cannot watch the terminal's signals"))?;
    let watch = tokio::spawn(watch_signals(raw.clone(), signals));
    let ended = follow(session, &shell, detach).await;
    watch.abort();
    let _ = watch.await;
    drop(raw);
    match ended? {
        Some(end) => {
            if let Some(why) = &end.cut_short {
                eprintln!("eukhe: {why}");
            }
            Ok(exit_code(end.status))
        }
        None => {
            eprintln!(
                "eukhe: detached; the shell (run {}) goes on in {session} \
                 (`eukhe attach {session} --shell` comes back to it)",
                shell.input
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The shell's end, or `None` once the person detached.
async fn follow(
    session: &str,
    shell: &RunningShell,
    detach: DetachKey,
) -> Result<Option<InputEnd>, ClientError> {
    let (output, program) = mpsc::unbounded_channel();
    let following = output_until_end(session, shell, output);
    let passing = async {
        let mut keys = RunKeys::new(session, shell.input);
        // The shell's terminal takes this window's size: a program whose
        // size changes draws its screen again.
        let size = super::tty_run::window_size();
        let _ = keys.resize(size.rows, size.cols).await;
        pass_terminal(program, &mut keys, &detach).await
    };
    tokio::pin!(following, passing);
    let mut end = None;
    loop {
        tokio::select! {
            done = &mut following, if end.is_none() => end = Some(done?),
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

/// Send the shell's output after `shell.after` to `output`, then live,
/// until it ends; a lost connection is made again after the last entry
/// seen.
async fn output_until_end(
    session: &str,
    shell: &RunningShell,
    output: mpsc::UnboundedSender<Vec<u8>>,
) -> Result<InputEnd, ClientError> {
    let mut after = shell.after;
    let mut said = None;
    loop {
        let request = SessionRequest::Log {
            tail: None,
            input: Some(shell.input),
            after,
            follow: true,
        };
        let (mut client, first) = reopen(session, request).await?;
        let mut pending = Some(first);
        loop {
            let response = match pending.take() {
                Some(first) => first,
                None => match client.receive().await {
                    Ok(response) => response,
                    Err(_) => break,
                },
            };
            let entry = match response {
                Response::Entry(entry) => entry,
                Response::Replayed => continue,
                other => return super::cli::unexpected(other),
            };
            after = Some(entry.seq);
            match &entry.body {
                EntryBody::Output { data, .. } => {
                    let _ = output.send(data.to_vec());
                }
                body => {
                    if let Some(end) = end_of_input(body, shell.input, &mut said) {
                        return end;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::entry::Stream;

    fn seen(bodies: Vec<EntryBody>) -> Running {
        let mut seen = TailSeen::default();
        for (seq, body) in bodies.into_iter().enumerate() {
            seen.see(&Entry {
                seq: seq as u64 + 1,
                at_ms: 0,
                body,
            });
        }
        seen.running()
    }

    fn output(input: u64) -> EntryBody {
        EntryBody::Output {
            input: Some(input),
            stream: Stream::Stdout,
            data: "x".into(),
            spool_end: None,
            bash: None,
        }
    }

    fn typed(input: u64, status: Option<i32>) -> EntryBody {
        EntryBody::ShellCommand {
            input,
            text: "ls".into(),
            status,
        }
    }

    #[test]
    fn a_running_shell_is_found_by_its_marks_and_redrawn_from_the_last() {
        // Its start is older than the tail.
        let running = seen(vec![
            output(3),
            typed(3, None),
            output(3),
            typed(3, Some(0)),
        ]);
        let Running::Shell(shell) = running else {
            panic!("the shell runs");
        };
        assert_eq!((shell.input, shell.after), (3, Some(3)));
    }

    #[test]
    fn an_ended_shell_or_another_run_is_not_attached_to() {
        let ended = vec![
            typed(3, Some(0)),
            EntryBody::RunFinished {
                input: 3,
                status: 0,
                signal: None,
                cancelled: false,
                lost_output: None,
            },
            // What a child of it wrote as it settled.
            output(3),
        ];
        assert!(matches!(seen(ended.clone()), Running::Nothing));
        let mut other = ended;
        other.push(EntryBody::RunStarted { input: 4 });
        other.push(output(4));
        assert!(matches!(seen(other), Running::Other(4)));
    }
}
