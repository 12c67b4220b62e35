//! An attached client's watch on its supervisor, on a connection of its
//! own (the session's connection is the worker's, handed over). A lost
//! supervisor is relaunched. One shut down on purpose (`eukhe shutdown`)
//! says so on that connection before it goes: from then on the client
//! starts no daemon, neither by a relaunch nor by attaching again; it
//! may still attach to a daemon that listens (another client's).

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::connect::{connect, connect_listening, Client};
use super::error::ClientError;
use super::remote::Target;
use super::route::current_target;
use crate::laws::replace::ClientStart;
use crate::laws::timing::{SHUTDOWN_WORD_MS, SHUT_DOWN_REATTACH_MS};
use crate::protocol::hello::Capability;
use crate::protocol::message::Response;

/// What the watch has heard of the supervisor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Said {
    /// No watch could be opened: a loss shows on the session's own
    /// connection only.
    Unwatched,
    /// The supervisor serves.
    Watching,
    /// Its connection closed without a word: the supervisor is lost.
    Lost,
    /// It was shut down on purpose; `gone` since its process ended.
    ShutDown { gone: Option<Instant> },
}

/// The watch, shared by an attach's loop and its reattaches.
#[derive(Clone)]
pub(super) struct SupervisorWatch(Rc<Watching>);

struct Watching {
    said: watch::Sender<Said>,
    reader: RefCell<Option<tokio::task::JoinHandle<()>>>,
    /// A daemon that listens may be looked for once the watched one was
    /// shut down: not on another machine, nor behind the service
    /// manager's socket (connecting to either starts one).
    may_look_again: Cell<bool>,
}

impl Drop for Watching {
    fn drop(&mut self) {
        if let Some(reader) = self.reader.get_mut().take() {
            reader.abort();
        }
    }
}

impl SupervisorWatch {
    /// Watch the daemon as an attach starts (none: a loss shows on the
    /// session's connection only).
    pub(super) async fn open() -> SupervisorWatch {
        let watching = SupervisorWatch(Rc::new(Watching {
            said: watch::Sender::new(Said::Unwatched),
            reader: RefCell::new(None),
            may_look_again: Cell::new(false),
        }));
        watching.follow(connect(ClientStart::AttachWatch).await.ok());
        watching
    }

    /// Watch through `client` from now on.
    fn follow(&self, client: Option<Client>) {
        if let Some(old) = self.0.reader.borrow_mut().take() {
            old.abort();
        }
        let Some(client) = client else {
            self.0.said.send_replace(Said::Unwatched);
            return;
        };
        let activated = client.daemon.has(Capability::SocketActivated);
        let local = matches!(current_target(), Target::Local);
        self.0.may_look_again.set(local && !activated);
        self.0.said.send_replace(Said::Watching);
        let said = self.0.said.clone();
        *self.0.reader.borrow_mut() = Some(tokio::task::spawn_local(listen(client, said)));
    }

    /// Resolves when the supervisor is lost (never when it was shut down
    /// on purpose, nor without a watch).
    pub(super) async fn lost(&self) {
        let mut said = self.0.said.subscribe();
        if said.wait_for(|said| *said == Said::Lost).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// The supervisor is lost: relaunch one of this build (as
    /// `attach::relaunch` does) and watch it.
    pub(super) async fn relaunch(&self) -> Result<(), ClientError> {
        let client = super::attach::relaunch().await?;
        self.follow(Some(client));
        Ok(())
    }

    /// A connection to attach `session` again: to the daemon that
    /// listens; when none does, a lost supervisor is started again (as a
    /// reattach always did) and one shut down on purpose is not.
    pub(super) async fn reach(&self, session: &str) -> Result<Client, ClientError> {
        if let Said::ShutDown { gone } = self.said() {
            return self.after_shutdown(session, gone).await;
        }
        if !matches!(current_target(), Target::Local) {
            return connect(ClientStart::Reattach).await;
        }
        if let Some(client) = connect_listening(ClientStart::Reattach).await? {
            return Ok(client);
        }
        // The word comes as the socket goes: wait for it before taking
        // the daemon for lost.
        let mut said = self.0.said.subscribe();
        let heard = tokio::time::timeout(
            Duration::from_millis(SHUTDOWN_WORD_MS),
            said.wait_for(|said| *said != Said::Watching),
        )
        .await;
        drop(heard);
        match self.said() {
            Said::ShutDown { gone } => self.after_shutdown(session, gone).await,
            _ => connect(ClientStart::Reattach).await,
        }
    }

    fn said(&self) -> Said {
        *self.0.said.borrow()
    }

    /// The daemon was shut down on purpose: a daemon that listens (another
    /// client's) is used and watched; else, once `SHUT_DOWN_REATTACH_MS`
    /// passed since the old one's process ended, the client detaches. The
    /// error in between is one `within_relaunch` tries again after.
    async fn after_shutdown(
        &self,
        session: &str,
        gone: Option<Instant>,
    ) -> Result<Client, ClientError> {
        let detach = || ClientError::ShutDown(session.to_string());
        if !self.0.may_look_again.get() {
            return Err(detach());
        }
        if let Some(client) = connect_listening(ClientStart::Reattach).await? {
            self.follow(
                connect_listening(ClientStart::AttachWatch)
                    .await
                    .ok()
                    .flatten(),
            );
            return Ok(client);
        }
        match gone {
            Some(at) if at.elapsed() >= Duration::from_millis(SHUT_DOWN_REATTACH_MS) => {
                Err(detach())
            }
            _ => Err(ClientError::NoDaemon(format!(
                "the daemon was shut down and none listens; detached from {session}"
            ))),
        }
    }
}

/// Read the watch's connection: a word that the daemon is shut down on
/// purpose, then its end (the process is gone); an end without the word,
/// or anything else, is a lost supervisor.
async fn listen(mut client: Client, said: watch::Sender<Said>) {
    match client.receive().await {
        Ok(Response::Shutdown { stopped: true, .. }) => {
            said.send_replace(Said::ShutDown { gone: None });
            while client.receive().await.is_ok() {}
            said.send_replace(Said::ShutDown {
                gone: Some(Instant::now()),
            });
        }
        _ => {
            said.send_replace(Said::Lost);
        }
    }
}
