//! The shell around `laws::client_left`: once the connection of an `eukhe
//! bash` client ends, look at its process until the law decides, and hang
//! up each of its commands still running if the client went away.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use super::state::Worker;
use crate::clock::mono_ms;
use crate::host::process::is_alive;
use crate::laws::adoption::ProcessIdentity;
use crate::laws::client_left::{client_left, ClientClosed, ClientLeft, ClientLink, ClientProcess};
use crate::laws::timing::POLL_MS;

/// Who the client at the far end of a connection is.
#[derive(Clone, Copy, Debug)]
pub enum Peer {
    /// Handed over: the client's own process (none if it was gone when
    /// the worker took its connection).
    Client(Option<ProcessIdentity>),
    /// Relayed through the supervisor.
    Relayed,
}

/// The connection of `peer`, which asked for user bash `numbers`, ended:
/// hang up each one still running once its client is found gone.
pub async fn connection_ended(worker: Rc<RefCell<Worker>>, peer: Peer, numbers: Vec<u64>) {
    if numbers.is_empty() {
        return;
    }
    let closed_at = mono_ms();
    let mut waiting = numbers;
    while !waiting.is_empty() {
        let mut still = Vec::new();
        for number in waiting {
            let verdict = decide(&worker.borrow(), peer, number, closed_at);
            match verdict {
                ClientLeft::HangUp => {
                    tracing::info!(
                        number,
                        "the client of bash {number} went away: hanging it up"
                    );
                    let mut w = worker.borrow_mut();
                    let actions = w.core.hang_up(number);
                    w.apply(actions);
                }
                ClientLeft::WaitForExit => still.push(number),
                ClientLeft::RideThrough => {}
            }
        }
        waiting = still;
        if !waiting.is_empty() {
            tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
        }
    }
}

fn decide(worker: &Worker, peer: Peer, number: u64, closed_at: u64) -> ClientLeft {
    let (link, process) = match peer {
        Peer::Relayed => (ClientLink::Relayed, ClientProcess::Lives),
        Peer::Client(identity) => {
            let lives = identity.is_some_and(is_alive);
            let process = match lives {
                true => ClientProcess::Lives,
                false => ClientProcess::Gone,
            };
            (ClientLink::HandedOver, process)
        }
    };
    client_left(ClientClosed {
        link,
        process,
        since_close_ms: mono_ms().saturating_sub(closed_at),
        running: worker.core.bash_runs(number),
        worker_stopping: worker.stopping,
    })
}
