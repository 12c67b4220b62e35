//! `eukhe shutdown`: the socket closed first, then, by its mode, the
//! daemon alone, every worker and kernel with it, or only an idle daemon.

use tokio::sync::{broadcast, mpsc};

use super::backend;
use super::launch::Shared;
use super::quiesce;
use crate::host::systemd;
use crate::protocol::message::{Request, Response, ShutdownMode};

/// The daemon's shutdown, told as tokio's mini-redis tells it: a broadcast
/// once it is decided (the accept loop and the idle stop's loop end on
/// it), and a completion channel whose closing says that every connection
/// answering a shutdown has written its answer, so the process may end.
pub struct ShutdownSignal {
    decided: broadcast::Sender<()>,
    is_decided: bool,
    /// Each connection answering a shutdown holds a clone; the accept loop
    /// drops this one once the shutdown is decided.
    answering: Option<mpsc::Sender<()>>,
    all_answered: Option<mpsc::Receiver<()>>,
    /// Connections told that the daemon is shut down on purpose, kept open
    /// until the process ends: their close tells each client it is gone.
    told: Vec<tokio::net::UnixStream>,
}

impl Default for ShutdownSignal {
    fn default() -> Self {
        let (decided, _) = broadcast::channel(1);
        let (answering, all_answered) = mpsc::channel(1);
        ShutdownSignal {
            decided,
            is_decided: false,
            answering: Some(answering),
            all_answered: Some(all_answered),
            told: Vec::new(),
        }
    }
}

impl ShutdownSignal {
    /// A receiver of the decision (take it before the decision can come).
    pub fn subscribe(&self) -> broadcast::Receiver<()> {
        self.decided.subscribe()
    }

    /// Whether a shutdown was decided: no restart, no spare from here.
    pub fn decided(&self) -> bool {
        self.is_decided
    }

    fn decide(&mut self) {
        self.is_decided = true;
        let _ = self.decided.send(());
    }

    /// Held by a connection answering a shutdown until its answer is out
    /// (none once the accept loop stopped waiting for more).
    pub fn answering(&self) -> Option<mpsc::Sender<()>> {
        self.answering.clone()
    }

    /// For the accept loop, once: what closes when every answer is out.
    /// The loop's own sender is dropped when it stops accepting.
    pub fn all_answered(&mut self) -> Option<mpsc::Receiver<()>> {
        self.all_answered.take()
    }

    /// Keep `told` open until the process ends.
    pub fn hold_until_exit(&mut self, told: tokio::net::UnixStream) {
        self.told.push(told);
    }

    /// The accept loop stopped accepting: only the answering connections
    /// keep the completion channel open.
    pub fn stop_accepting(&mut self) {
        self.answering = None;
    }
}

/// Stop accepting connections: the socket goes first, so no client
/// connects to a daemon that is going away.
fn stop_serving(supervisor: &Shared) {
    let mut s = supervisor.borrow_mut();
    s.shutdown.decide();
    systemd::notify("STOPPING=1");
    // An activated socket belongs to the service manager, which keeps
    // listening and starts the next daemon on the next connection.
    if !s.socket_activated {
        let _ = std::fs::remove_file(&s.paths.socket);
    }
}

pub(super) async fn shutdown(supervisor: &Shared, mode: ShutdownMode) -> Response {
    match mode {
        ShutdownMode::Normal => {
            stop_serving(supervisor);
            Response::Shutdown {
                stopped: true,
                message: "the daemon stopped; running workers keep their sessions".into(),
            }
        }
        ShutdownMode::Force => {
            stop_serving(supervisor);
            quiesce::stop_all(
                supervisor,
                &quiesce::running_ids(supervisor),
                Request::StopWithKernel,
            )
            .await;
            let ids: Vec<String> = supervisor.borrow().slots.keys().cloned().collect();
            for id in ids {
                backend::stop_lone_kernel(supervisor, &id).await;
            }
            Response::Shutdown {
                stopped: true,
                message: "the daemon, every worker and every kernel stopped".into(),
            }
        }
        ShutdownMode::IfIdle => quiesce::shutdown_if_idle(supervisor, stop_serving).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_decision_reaches_every_subscriber_and_the_end_waits_for_every_answer() {
        let mut signal = ShutdownSignal::default();
        let mut accept_loop = signal.subscribe();
        let mut idle_loop = signal.subscribe();
        let mut all_answered = signal.all_answered().expect("taken once");
        assert!(signal.all_answered().is_none());
        let first = signal.answering().expect("open while accepting");
        let second = signal.answering().expect("open while accepting");
        assert!(!signal.decided());
        signal.decide();
        assert!(signal.decided());
        assert!(accept_loop.recv().await.is_ok());
        assert!(idle_loop.recv().await.is_ok());
        signal.stop_accepting();
        assert!(signal.answering().is_none(), "no answer joins late");
        drop(first);
        assert!(
            all_answered.try_recv().is_err() && !all_answered.is_closed(),
            "one answer is still being written"
        );
        drop(second);
        assert_eq!(
            all_answered.recv().await,
            None,
            "closed: every answer is out"
        );
    }
}
