//! `eukhe attach`: the transcript's last entries, then live ones; typed
//! lines are input; the connection is made again when a worker or the
//! daemon is lost.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use tokio::io::AsyncBufReadExt;

use super::cli::unexpected;
use super::connect::{connect, Client};
use super::error::ClientError;
use super::render::TextLog;
use super::stdout;
use super::supervisor_watch::SupervisorWatch;
use crate::config::detach_key::DetachKey;
use crate::laws::notice::{MessageKind, StoredMessage, View};
use crate::laws::replace::ClientStart;
use crate::laws::timing::{CLIENT_RELAUNCH_WITHIN_MS, RELAUNCH_RETRY_MS};
use crate::protocol::message::{Request, Response, SessionRequest};
use crate::session::notices::damaged_region;
use crate::session::transcript::{Entry, EntryBody};

/// `eukhe attach`: replay `session`'s last `tail` entries, then follow
/// it until the person detaches (or, once input ends, until the inputs
/// sent have run).
pub async fn attach(
    session: String,
    tail: Option<u64>,
    (read_only, detach_key): (bool, Option<DetachKey>),
) -> Result<ExitCode, ClientError> {
    use tokio::signal::unix::{signal, SignalKind};
    if super::interactive::can_pass_through() {
        let detach = super::tty_run::detach_key(detach_key)?;
        let attached = super::attach_tty::attach_terminal(&session, read_only, detach).await?;
        if let Some(code) = attached {
            return Ok(code);
        }
    }
    let interactive = std::io::stdin().is_terminal();
    // A person drives an attach only from a terminal: only then may its
    // start replace an older daemon.
    let start = if interactive && std::io::stdout().is_terminal() {
        ClientStart::Attach
    } else {
        ClientStart::AttachWithoutTerminal
    };
    let client = open_attach(&session, start, None, tail).await?;
    // The attach connection is the worker's (handed over by the
    // supervisor), so a lost supervisor is noticed on a connection of its
    // own, and relaunched.
    let supervisor = SupervisorWatch::open().await;
    if interactive {
        eprintln!(
            "attached to {session}: typed lines are queued as input; \
             Ctrl-C cancels the running run, Ctrl-\\ or Ctrl-D detaches"
        );
    }
    let mut interrupts =
        signal(SignalKind::interrupt()).map_err(ClientError::system("cannot catch Ctrl-C"))?;
    let mut quits =
        signal(SignalKind::quit()).map_err(ClientError::system("cannot catch Ctrl-\\"))?;
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).split(b'\n');
    let mut stdin_open = true;
    let mut attached = Attached::new(session, client, supervisor.clone());
    loop {
        // Not before the session's replay: a session that is gone says so
        // first, even when the input is already over.
        if !stdin_open && attached.replayed && attached.runs.sent_all_ended() {
            return Ok(ExitCode::SUCCESS);
        }
        tokio::select! {
            response = attached.client.receive() => attached.answered(response).await?,
            _ = interrupts.recv() => attached.cancel().await?,
            _ = quits.recv() => {
                eprintln!("eukhe: detached from {}", attached.session);
                return Ok(ExitCode::SUCCESS);
            }
            _ = supervisor.lost() => supervisor.relaunch().await?,
            line = lines.next_segment(), if stdin_open => match line {
                Ok(Some(line)) => match super::words::typed_line(&line) {
                    Ok(text) if !text.trim().is_empty() => attached.send(text).await?,
                    Ok(_) => {}
                    // One line refused; the next may be taken.
                    Err(refused) => eprintln!("eukhe: {refused}"),
                },
                // End of input: detach once what this client sent has run.
                _ => stdin_open = false,
            },
        }
    }
}

/// An attached client: its connection to the session, and what it has
/// seen and shown of the session.
struct Attached {
    session: String,
    client: Client,
    /// Says whether a lost connection may start a daemon again.
    supervisor: SupervisorWatch,
    // An attach replays the transcript's last entries after every restore
    // notice; attaching again replays what came after the last entry
    // seen. The view (the notice law's) shows every entry, every notice,
    // once.
    view: View,
    /// The damaged regions shown (their offsets): a reader numbers a
    /// region's notice as the entry before it, so the view would take it
    /// for that entry.
    damage_shown: std::collections::HashSet<u64>,
    runs: RunsSeen,
    text: TextLog,
    /// The session answered once (its replay): a refusal after it means it
    /// was removed since.
    replayed: bool,
}

impl Attached {
    fn new(session: String, client: Client, supervisor: SupervisorWatch) -> Attached {
        Attached {
            session,
            client,
            supervisor,
            view: View::default(),
            damage_shown: Default::default(),
            runs: RunsSeen::default(),
            text: TextLog::new(false),
            replayed: false,
        }
    }

    /// Take in what came on the connection; a lost connection is attached
    /// again.
    async fn answered(
        &mut self,
        response: Result<Response, ClientError>,
    ) -> Result<(), ClientError> {
        match response {
            Ok(Response::Entry(entry)) => self.show(&entry)?,
            Ok(Response::Queued { input }) => {
                self.runs.unanswered = self.runs.unanswered.saturating_sub(1);
                self.runs.sent.push(input);
            }
            Ok(Response::Replayed) => self.replayed = true,
            // Worded as `bash` and `send --wait` word it.
            Ok(Response::Error { message }) if self.replayed => {
                return Err(super::log::refusal(&self.session, message).await)
            }
            Ok(Response::Cancelled {
                run: None, bash, ..
            }) if bash.is_empty() => {
                eprintln!("eukhe: no run is running (Ctrl-\\ detaches)");
            }
            Ok(Response::Cancelled { run, bash, .. }) => {
                if std::mem::take(&mut self.runs.cancel_asked) {
                    let mut what: Vec<String> = run.iter().map(|r| format!("run {r}")).collect();
                    what.extend(bash.iter().map(|b| format!("bash {b}")));
                    eprintln!("eukhe: cancelling {} (Ctrl-\\ detaches)", what.join(", "));
                }
            }
            Ok(other) => return unexpected(other),
            Err(_) => self.attach_again().await?,
        }
        Ok(())
    }

    /// Note what `entry` says of runs, and write it unless the view has
    /// shown it already.
    fn show(&mut self, entry: &Entry) -> Result<(), ClientError> {
        self.runs.last_seq = self.runs.last_seq.max(Some(entry.seq));
        self.runs.see(&entry.body);
        let new = match &entry.body {
            EntryBody::Notice { text, .. } => match damaged_region(text) {
                Some((offset, _)) => self.damage_shown.insert(offset),
                None => self.view.deliver(stored_message(entry)),
            },
            _ => self.view.deliver(stored_message(entry)),
        };
        if new {
            let mut out = std::io::stdout().lock();
            self.text
                .write(&mut out, entry)
                .and_then(|()| out.flush())
                .map_err(stdout::failed)?;
        }
        Ok(())
    }

    /// Ctrl-C: ask for the running run to be cancelled.
    async fn cancel(&mut self) -> Result<(), ClientError> {
        // Say which run is cancelled first when this view knows;
        // else the worker's answer says it.
        if let Some(run) = self.runs.running {
            eprintln!("eukhe: cancelling run {run} (Ctrl-\\ detaches)");
        }
        self.runs.cancel_asked = self.runs.running.is_none();
        let request = Request::Session {
            session: self.session.clone(),
            request: SessionRequest::Cancel { all: false },
        };
        if self.client.send(&request).await.is_err() {
            self.attach_again().await?;
        }
        Ok(())
    }

    /// A typed line: queue it as input (on a new attach if the connection
    /// was lost).
    async fn send(&mut self, text: String) -> Result<(), ClientError> {
        let request = Request::Session {
            session: self.session.clone(),
            request: SessionRequest::Send {
                text,
                wait: false,
                tty: None,
            },
        };
        if self.client.send(&request).await.is_err() {
            self.attach_again().await?;
            self.client.send(&request).await?;
        }
        self.runs.unanswered += 1;
        Ok(())
    }

    /// Attach again, replaying what came after the last entry seen.
    async fn attach_again(&mut self) -> Result<(), ClientError> {
        self.client = reattach(&self.supervisor, &self.session, self.runs.last_seq).await?;
        Ok(())
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
    tail: Option<u64>,
) -> Result<Client, ClientError> {
    open(session, start, SessionRequest::Attach { after, tail }).await
}

/// Connect as `start` and send `request` for `session`.
pub async fn open(
    session: &str,
    start: ClientStart,
    request: SessionRequest,
) -> Result<Client, ClientError> {
    if let Some(client) = super::direct::open(session, start, &request).await {
        return Ok(client);
    }
    ask_on(connect(start).await?, session, request).await
}

/// Send `request` for `session` on `client`.
pub(super) async fn ask_on(
    mut client: Client,
    session: &str,
    request: SessionRequest,
) -> Result<Client, ClientError> {
    client
        .send(&Request::Session {
            session: session.to_string(),
            request,
        })
        .await?;
    Ok(client)
}

/// The supervisor is lost: start one of this build within
/// `CLIENT_RELAUNCH_WITHIN_MS` if none listens (a background start: it
/// never replaces a daemon another client started), and watch it.
pub(super) async fn relaunch() -> Result<Client, ClientError> {
    within_relaunch(|| connect(ClientStart::Relaunch))
        .await
        .map_err(|e| e.within("lost the daemon and could not start another within a minute"))
}

/// The connection dropped (worker restart, lost supervisor): attach again
/// within `CLIENT_RELAUNCH_WITHIN_MS`, starting a supervisor of this build
/// if none listens and `supervisor` was not shut down on purpose. A
/// reattach is a background start: it never replaces a daemon another
/// client started.
async fn reattach(
    supervisor: &SupervisorWatch,
    session: &str,
    after: Option<u64>,
) -> Result<Client, ClientError> {
    let request = || SessionRequest::Attach { after, tail: None };
    within_relaunch(|| async { ask_on(supervisor.reach(session).await?, session, request()).await })
        .await
        .map_err(|e| {
            e.within(format!(
                "lost the session {session} and could not attach again within a minute"
            ))
        })
}

/// Try `attempt` until it succeeds, `CLIENT_RELAUNCH_WITHIN_MS` has
/// passed, its session is gone or its daemon was shut down on purpose;
/// the error is the last attempt's.
pub async fn within_relaunch<T, F, Fut>(mut attempt: F) -> Result<T, ClientError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, ClientError>>,
{
    let deadline =
        tokio::time::Instant::now() + std::time::Duration::from_millis(CLIENT_RELAUNCH_WITHIN_MS);
    loop {
        match attempt().await {
            Ok(client) => return Ok(client),
            Err(gone @ (ClientError::Gone(_) | ClientError::ShutDown(_))) => return Err(gone),
            Err(e) if tokio::time::Instant::now() >= deadline => return Err(e),
            Err(_) => {}
        }
        tokio::time::sleep(std::time::Duration::from_millis(RELAUNCH_RETRY_MS)).await;
    }
}
