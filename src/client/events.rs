//! `eukhe events`: the daemon's event stream, one line (or one JSON
//! object) per event. A background client: it never replaces a daemon, and
//! when the daemon goes away it waits for the next one and goes on,
//! saying so once.

use std::process::ExitCode;
use std::time::Duration;

use super::cli::unexpected;
use super::connect::{connect, connect_background_existing, Client};
use super::error::ClientError;
use super::render::utc_timestamp;
use super::stdout::outln;
use crate::laws::replace::ClientStart;
use crate::laws::timing::EVENTS_RECONNECT_MS;
use crate::protocol::event::Event;
use crate::protocol::message::{Request, Response};

/// `eukhe events`: print the daemon's events (one session's, if given)
/// until the reader goes away, riding through daemon restarts.
pub async fn events(json: bool, session: Option<String>) -> Result<ExitCode, ClientError> {
    let mut stream = subscribe(connect(ClientStart::Events).await?, &session).await?;
    // The session followed, by its id once an event names it: a rename
    // while the daemon is away does not lose it.
    let mut session = session;
    loop {
        match stream.receive().await {
            Ok(Response::Event(event)) => {
                if let (Some(_), Some(id)) = (&session, &event.id) {
                    session = Some(id.clone());
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
                eprintln!(
                    "eukhe: the daemon restarted{pids}: events go on from eukhe {}; those in between are not shown",
                    stream.daemon.version
                );
            }
        }
    }
}

fn print(event: &Event, json: bool) -> Result<(), ClientError> {
    if json {
        let line = serde_json::to_string(event).map_err(|source| ClientError::Encode {
            what: "an event",
            source,
        })?;
        outln!("{line}")
    } else {
        outln!("{}  {}", utc_timestamp(event.at_ms), event.describe())
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
