//! `eukhe events`: the daemon's event stream, one line (or one JSON
//! object) per event. A background client: it never replaces a daemon, and
//! when the daemon goes away it waits for the next one and goes on,
//! saying so once.

use std::collections::{HashMap, HashSet};
use std::process::ExitCode;
use std::time::Duration;

use super::attach::open;
use super::cli::{unexpected, Command};
use super::connect::{connect, connect_background_existing, Client};
use super::error::ClientError;
use super::render::utc_timestamp;
use super::stdout::outln;
use crate::laws::replace::ClientStart;
use crate::laws::timing::EVENTS_RECONNECT_MS;
use crate::protocol::event::Event;
use crate::protocol::message::{Request, Response, SessionRequest};
use crate::session::wake::stored_event;

/// `eukhe events` as the command line gave it.
pub async fn from_command(command: Command) -> Result<ExitCode, ClientError> {
    let Command::Events {
        json,
        session,
        since,
    } = command
    else {
        unreachable!("only `events` is dispatched here");
    };
    events(json, session, since).await
}

/// `eukhe events`: print the daemon's events (one session's, if given)
/// until the reader goes away, riding through daemon restarts. With
/// `since`, first the stored events after that cursor, then the live ones
/// whose cursor was not replayed; after a daemon restart, what was stored
/// meanwhile is replayed the same way, so nothing still stored is missed.
pub async fn events(
    json: bool,
    session: Option<String>,
    since: Option<u64>,
) -> Result<ExitCode, ClientError> {
    // Subscribed first, then replayed: an event stored in between comes
    // both ways and is shown once, by its cursor.
    let mut stream = subscribe(connect(ClientStart::Events).await?, &session).await?;
    let mut cursors = since.map(Cursors::new);
    if let Some(cursors) = &mut cursors {
        cursors.replay(&session, json).await?;
    }
    // The session followed, by its id once an event names it: a rename
    // while the daemon is away does not lose it.
    let mut session = session;
    loop {
        match stream.receive().await {
            Ok(Response::Event(event)) => {
                if let (Some(_), Some(id)) = (&session, &event.id) {
                    session = Some(id.clone());
                }
                if let Some(cursors) = &mut cursors {
                    if !cursors.live(&event, json).await? {
                        continue;
                    }
                }
                print(&event, json)?
            }
            Ok(other) => return unexpected(other),
            Err(_) => {
                let before = stream.daemon.pid;
                stream = resubscribe(&session).await?;
                let after = stream.daemon.pid;
                let pids = match (before, after) {
                    (Some(before), Some(after)) => format!(" (pid {before} → {after})"),
                    _ => String::new(),
                };
                match &mut cursors {
                    Some(cursors) => {
                        eprintln!(
                            "eukhe: the daemon restarted{pids}: events go on from eukhe {}; those stored in between are replayed",
                            stream.daemon.version
                        );
                        cursors.replay(&session, json).await?;
                    }
                    None => eprintln!(
                        "eukhe: the daemon restarted{pids}: events go on from eukhe {}; those in between are not shown",
                        stream.daemon.version
                    ),
                }
            }
        }
    }
}

/// What `--since` has shown of each session: the cursor of the last event
/// printed, and whether a live event has been seen since the last replay.
struct Cursors {
    since: u64,
    shown: HashMap<String, u64>,
    /// Sessions whose stored events since the replay came live: from then
    /// on their worker reports every one.
    caught_up: HashSet<String>,
}

impl Cursors {
    fn new(since: u64) -> Cursors {
        Cursors {
            since,
            shown: HashMap::new(),
            caught_up: HashSet::new(),
        }
    }

    fn after(&self, id: &str) -> u64 {
        self.shown.get(id).copied().unwrap_or(self.since)
    }

    /// Print the stored events after each session's cursor (`only`: that
    /// session's), session by session.
    async fn replay(&mut self, only: &Option<String>, json: bool) -> Result<(), ClientError> {
        self.caught_up.clear();
        let sessions = match connect(ClientStart::Events)
            .await?
            .ask(Request::List)
            .await?
        {
            Response::Sessions { sessions } => sessions,
            other => return unexpected(other),
        };
        for info in sessions.iter().filter(|info| {
            only.as_ref()
                .is_none_or(|only| *only == info.id || *only == info.name)
        }) {
            let after = self.after(&info.id);
            self.replay_session(&info.id, &info.name, after, None, json)
                .await?;
        }
        Ok(())
    }

    /// Print session `id`'s stored events after `after` (and before
    /// `before`, if given).
    async fn replay_session(
        &mut self,
        id: &str,
        name: &str,
        after: u64,
        before: Option<u64>,
        json: bool,
    ) -> Result<(), ClientError> {
        let request = SessionRequest::Log {
            tail: None,
            input: None,
            after: Some(after),
            follow: false,
        };
        let mut client = open(id, ClientStart::Events, request).await?;
        loop {
            match client.receive().await? {
                Response::Entry(entry) => {
                    if before.is_some_and(|before| entry.seq >= before) {
                        continue;
                    }
                    if let Some(event) = stored_event(id, name, &entry) {
                        self.shown.insert(id.to_string(), entry.seq);
                        print(&event, json)?;
                    }
                }
                Response::Replayed => return Ok(()),
                // A session removed meanwhile has nothing left to replay.
                Response::Error { .. } => return Ok(()),
                other => return unexpected(other),
            }
        }
    }

    /// Whether to print live `event`: not when its cursor was replayed.
    /// The first stored event of a session after a replay first replays
    /// what lies between (a worker not yet supervised when the replay
    /// read does not report what it stores meanwhile).
    async fn live(&mut self, event: &Event, json: bool) -> Result<bool, ClientError> {
        let (Some(id), Some(seq)) = (&event.id, event.seq) else {
            return Ok(true);
        };
        let after = self.after(id);
        if seq <= after {
            return Ok(false);
        }
        if self.caught_up.insert(id.clone()) {
            let name = event.name.clone().unwrap_or_else(|| id.clone());
            self.replay_session(id, &name, after, Some(seq), json)
                .await?;
        }
        self.shown.insert(id.clone(), seq);
        Ok(true)
    }
}

/// One event: a JSON object, or its cursor (`-` when it has none), time
/// and description.
fn print(event: &Event, json: bool) -> Result<(), ClientError> {
    if json {
        let line = serde_json::to_string(event).map_err(|source| ClientError::Encode {
            what: "an event",
            source,
        })?;
        outln!("{line}")
    } else {
        let seq = event.seq.map_or("-".to_string(), |seq| seq.to_string());
        outln!(
            "{seq}  {}  {}",
            utc_timestamp(event.at_ms),
            event.describe()
        )
    }
}

/// Ask `client`'s daemon for its events (one session's, if given).
pub async fn subscribe(
    mut client: Client,
    session: &Option<String>,
) -> Result<Client, ClientError> {
    let request = Request::Events {
        session: session.clone(),
    };
    match client.ask(request).await? {
        Response::Ok => Ok(client),
        other => unexpected(other),
    }
}

/// The stream was lost: wait for a daemon to listen again (never starting
/// or replacing one) and subscribe again. A session that is gone from the
/// next daemon ends the wait with its error.
pub async fn resubscribe(session: &Option<String>) -> Result<Client, ClientError> {
    loop {
        if let Some(client) = connect_background_existing().await? {
            // A daemon still stopping may accept and then hang up: that is
            // no daemon yet.
            match subscribe(client, session).await {
                Ok(client) => return Ok(client),
                Err(ClientError::Daemon { message }) if message.starts_with("no session") => {
                    return Err(ClientError::Daemon { message })
                }
                Err(_) => {}
            }
        }
        tokio::time::sleep(Duration::from_millis(EVENTS_RECONNECT_MS)).await;
    }
}
