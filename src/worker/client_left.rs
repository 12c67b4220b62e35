//! The shell around `laws::client_left`: once the connection of an `eukhe
//! bash` client ends, look at its process until the law decides, and hang
//! up each of its commands still running if the client went away. The
//! watch itself ([`ClientLeftWatch`]) keeps no clock and does no I/O; the
//! client's exit is an event (its pidfd), so the driver looks again when
//! the client ends or at the law's deadline, whichever comes first.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use super::state::Worker;
use crate::clock::mono_ms;
use crate::host::process::is_alive;
use crate::host::process_exit::ProcessExit;
use crate::laws::adoption::ProcessIdentity;
use crate::laws::client_left::{client_left, ClientClosed, ClientLeft, ClientLink, ClientProcess};
use crate::laws::timing::CLIENT_EXIT_MS;

/// Who the client at the far end of a connection is.
#[derive(Clone, Copy, Debug)]
pub enum Peer {
    /// Handed over: the client's own process (none if it was gone when
    /// the worker took its connection).
    Client(Option<ProcessIdentity>),
    /// Relayed through the supervisor.
    Relayed,
}

/// The user bash of one ended connection, watched until the law has
/// decided for each: which to hang up, and when to look again.
#[derive(Debug)]
pub struct ClientLeftWatch {
    link: ClientLink,
    closed_at_ms: u64,
    /// The commands the law has not decided for yet.
    waiting: Vec<u64>,
}

impl ClientLeftWatch {
    /// The connection (by `link`) that asked for user bash `numbers` ended
    /// at `closed_at_ms`.
    pub fn new(link: ClientLink, closed_at_ms: u64, numbers: Vec<u64>) -> ClientLeftWatch {
        ClientLeftWatch {
            link,
            closed_at_ms,
            waiting: numbers,
        }
    }

    /// A look at `now_ms`: the client's process is as `process` says, and
    /// `running` says which commands still run. Returns the commands to
    /// hang up now; the others still waited for stay.
    pub fn look(
        &mut self,
        now_ms: u64,
        process: ClientProcess,
        running: impl Fn(u64) -> bool,
        worker_stopping: bool,
    ) -> Vec<u64> {
        let mut hang_up = Vec::new();
        let since_close_ms = now_ms.saturating_sub(self.closed_at_ms);
        self.waiting.retain(|&number| {
            let verdict = client_left(ClientClosed {
                link: self.link,
                process,
                since_close_ms,
                running: running(number),
                worker_stopping,
            });
            match verdict {
                ClientLeft::HangUp => hang_up.push(number),
                ClientLeft::WaitForExit => return true,
                ClientLeft::RideThrough => {}
            }
            false
        });
        hang_up
    }

    /// When to look again unless the client's exit comes first (none: the
    /// law has decided for every command): when a client that lives on has
    /// plainly left on purpose (`CLIENT_EXIT_MS`).
    pub fn poll_timeout(&self) -> Option<u64> {
        if self.waiting.is_empty() {
            return None;
        }
        Some(self.closed_at_ms.saturating_add(CLIENT_EXIT_MS))
    }
}

/// The connection of `peer`, which asked for user bash `numbers`, ended:
/// hang up each one still running once its client is found gone.
pub async fn connection_ended(worker: Rc<RefCell<Worker>>, peer: Peer, numbers: Vec<u64>) {
    if numbers.is_empty() {
        return;
    }
    let link = match peer {
        Peer::Relayed => ClientLink::Relayed,
        Peer::Client(_) => ClientLink::HandedOver,
    };
    let mut watch = ClientLeftWatch::new(link, mono_ms(), numbers);
    let exit = match peer {
        Peer::Client(Some(identity)) => Some(ProcessExit::open(identity)),
        Peer::Client(None) | Peer::Relayed => None,
    };
    loop {
        let process = match peer {
            Peer::Client(identity) if !identity.is_some_and(is_alive) => ClientProcess::Gone,
            Peer::Client(_) | Peer::Relayed => ClientProcess::Lives,
        };
        let hang_up = {
            let w = worker.borrow();
            watch.look(mono_ms(), process, |n| w.core.bash_runs(n), w.stopping)
        };
        for number in hang_up {
            tracing::info!(
                number,
                "the client of bash {number} went away: hanging it up"
            );
            let mut w = worker.borrow_mut();
            let actions = w.core.hang_up(number);
            w.apply(actions);
        }
        let Some(next_ms) = watch.poll_timeout() else {
            return;
        };
        let pause = Duration::from_millis(next_ms.saturating_sub(mono_ms()));
        let deadline = tokio::time::Instant::now() + pause;
        match &exit {
            Some(exit) => exit.wait_until(deadline).await,
            None => tokio::time::sleep_until(deadline).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Drive `watch` on a fake clock, looking whenever it asks or the
    /// client's process ends (`gone_at`; never: it lives on), as the
    /// driver's wait on its exit does, with every command running; every
    /// hang-up with the time it came.
    fn drive(watch: &mut ClientLeftWatch, gone_at: Option<u64>) -> Vec<(u64, u64)> {
        let mut hung_up = Vec::new();
        let mut now = watch.closed_at_ms;
        loop {
            let process = match gone_at {
                Some(at) if now >= at => ClientProcess::Gone,
                _ => ClientProcess::Lives,
            };
            for number in watch.look(now, process, |_| true, false) {
                hung_up.push((now, number));
            }
            let Some(next) = watch.poll_timeout() else {
                return hung_up;
            };
            assert!(next > now, "the watch asks for time ahead");
            now = match gone_at {
                Some(at) if at > now => next.min(at),
                _ => next,
            };
        }
    }

    #[test]
    fn a_client_that_lives_on_hangs_nothing_up_and_the_watch_ends_at_its_deadline() {
        let closed = 10_000;
        let mut watch = ClientLeftWatch::new(ClientLink::HandedOver, closed, vec![3, 4]);
        // The first look waits; nothing is hung up, and the next look is
        // at the deadline (the client's exit would wake the driver first).
        let now = closed;
        assert_eq!(
            watch.look(now, ClientProcess::Lives, |_| true, false),
            Vec::<u64>::new()
        );
        let now = watch.poll_timeout().expect("still waiting");
        assert_eq!(
            now,
            closed + CLIENT_EXIT_MS,
            "the next look is at the deadline"
        );
        assert_eq!(
            watch.look(now, ClientProcess::Lives, |_| true, false),
            Vec::<u64>::new()
        );
        assert_eq!(watch.poll_timeout(), None, "left on purpose: rides through");
    }

    #[test]
    fn a_client_gone_before_the_deadline_has_its_commands_hung_up_then() {
        let closed = 500;
        let mut watch = ClientLeftWatch::new(ClientLink::HandedOver, closed, vec![7]);
        let gone = closed + CLIENT_EXIT_MS / 2 + 3;
        let hung_up = drive(&mut watch, Some(gone));
        assert_eq!(hung_up.len(), 1);
        let (at, number) = hung_up[0];
        assert_eq!(number, 7);
        assert_eq!(at, gone, "hung up as the client ends");
    }

    #[test]
    fn a_client_gone_after_the_deadline_hangs_nothing_up() {
        let mut watch = ClientLeftWatch::new(ClientLink::HandedOver, 0, vec![1]);
        assert!(drive(&mut watch, Some(CLIENT_EXIT_MS + 1)).is_empty());
    }

    #[test]
    fn a_relayed_connection_or_an_ended_command_is_decided_at_once() {
        let mut relayed = ClientLeftWatch::new(ClientLink::Relayed, 0, vec![1]);
        assert_eq!(
            relayed.look(0, ClientProcess::Gone, |_| true, false),
            Vec::<u64>::new()
        );
        assert_eq!(relayed.poll_timeout(), None);
        let mut ended = ClientLeftWatch::new(ClientLink::HandedOver, 0, vec![2]);
        assert_eq!(
            ended.look(0, ClientProcess::Gone, |_| false, false),
            Vec::<u64>::new()
        );
        assert_eq!(ended.poll_timeout(), None);
    }
}
