//! The shell around `laws::client_left`: once the connection of an `eukhe
//! bash` client ends, look at its process until the law decides, and hang
//! up each of its commands still running if the client went away. The
//! watch itself ([`ClientLeftWatch`]) keeps no clock and does no I/O; the
//! client's exit is an event (its pidfd), so the driver looks again when
//! the client ends or at the law's deadline, whichever comes first. A
//! remote client's connection has no process to watch: the driver sleeps
//! until the reconnection grace ends, then asks whether the client followed
//! its command again meanwhile (`Clients::rejoins`).

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use super::state::Worker;
use crate::clock::mono_ms;
use crate::host::process::{identity_of, is_alive};
use crate::host::process_exit::ProcessExit;
use crate::laws::adoption::ProcessIdentity;
use crate::laws::client_left::{client_left, ClientClosed, ClientLeft, ClientLink, ClientProcess};
use crate::laws::timing::{
    CLIENT_EXIT_MS, REMOTE_RECONNECT_GRACE_MS, TEST_REMOTE_RECONNECT_GRACE_MS,
};
use crate::protocol::message::SessionRequest;

/// Who the client at the far end of a connection is.
#[derive(Clone, Copy, Debug)]
pub enum Peer {
    /// Handed over: the client's own process (none if it was gone when
    /// the worker took its connection).
    Client(Option<ProcessIdentity>),
    /// Relayed through the supervisor.
    Relayed,
    /// A remote client's, through `eukhe proxy`.
    Remote,
}

/// A user bash a connection asked for (or rejoined): its number, and how
/// many times it had been rejoined then (a later rejoin is its client
/// following it on another connection).
pub type Taken = (u64, u64);

/// Whether `request` comes from a client on another machine (through its
/// `eukhe proxy` here).
pub fn from_remote_client(request: &SessionRequest) -> bool {
    matches!(
        request,
        SessionRequest::Bash { remote: true, .. } | SessionRequest::Rejoin { .. }
    )
}

/// What a handed-over connection took: the user bash it asked for (or
/// rejoined), whether a remote client asked, and who its peer is, read
/// with the first bash while it surely lives.
pub struct BashOfConnection {
    taken: Vec<Taken>,
    remote: bool,
    /// The peer's pid, as the connection was accepted.
    peer: Option<u32>,
    /// The peer's identity, once read.
    client: Option<Option<ProcessIdentity>>,
}

impl BashOfConnection {
    /// A connection whose peer process is `peer` as it was accepted.
    pub fn new(peer: Option<u32>) -> BashOfConnection {
        BashOfConnection {
            taken: Vec::new(),
            remote: false,
            peer,
            client: None,
        }
    }

    /// A request (from a remote client when `remote`) took user bash
    /// `number`, or none.
    pub fn asked(&mut self, number: Option<u64>, remote: bool, worker: &Worker) {
        let Some(number) = number else {
            return;
        };
        let peer = self.peer;
        self.client
            .get_or_insert_with(|| peer.and_then(identity_of));
        self.remote |= remote;
        self.taken.push((number, worker.clients.rejoins(number)));
    }

    /// The connection ended (after a detach: its client left on purpose,
    /// and its commands go on): its client, and the bash to watch for it.
    pub fn ended(self, detached: bool) -> (Peer, Vec<Taken>) {
        let taken = if detached { Vec::new() } else { self.taken };
        match self.remote {
            // A remote client's peer is its proxy, which says nothing of it.
            true => (Peer::Remote, taken),
            false => (Peer::Client(self.client.flatten()), taken),
        }
    }
}

/// The user bash of one ended connection, watched until the law has
/// decided for each: which to hang up, and when to look again.
#[derive(Debug)]
pub struct ClientLeftWatch {
    link: ClientLink,
    closed_at_ms: u64,
    reconnect_grace_ms: u64,
    /// The commands the law has not decided for yet.
    waiting: Vec<Taken>,
}

impl ClientLeftWatch {
    /// The connection (by `link`) that asked for user bash `numbers` ended
    /// at `closed_at_ms`.
    pub fn new(link: ClientLink, closed_at_ms: u64, numbers: Vec<Taken>) -> ClientLeftWatch {
        ClientLeftWatch {
            link,
            closed_at_ms,
            reconnect_grace_ms: REMOTE_RECONNECT_GRACE_MS,
            waiting: numbers,
        }
    }

    /// The same, giving a remote client `grace_ms` to come back.
    pub fn with_grace(mut self, grace_ms: u64) -> ClientLeftWatch {
        self.reconnect_grace_ms = grace_ms;
        self
    }

    /// A look at `now_ms`: the client's process is as `process` says, and
    /// `running` says which commands still run, `rejoins` how many times
    /// each was rejoined. Returns the commands to hang up now; the others
    /// still waited for stay.
    pub fn look(
        &mut self,
        now_ms: u64,
        process: ClientProcess,
        (running, rejoins): (impl Fn(u64) -> bool, impl Fn(u64) -> u64),
        worker_stopping: bool,
    ) -> Vec<u64> {
        let mut hang_up = Vec::new();
        let since_close_ms = now_ms.saturating_sub(self.closed_at_ms);
        self.waiting.retain(|&(number, held)| {
            let verdict = client_left(ClientClosed {
                link: self.link,
                process,
                since_close_ms,
                running: running(number),
                worker_stopping,
                followed_again: rejoins(number) > held,
                reconnect_grace_ms: self.reconnect_grace_ms,
            });
            match verdict {
                ClientLeft::HangUp => hang_up.push(number),
                ClientLeft::WaitForExit | ClientLeft::WaitForReconnect => return true,
                ClientLeft::RideThrough => {}
            }
            false
        });
        hang_up
    }

    /// When to look again unless the client's exit comes first (none: the
    /// law has decided for every command): when a client that lives on has
    /// plainly left on purpose (`CLIENT_EXIT_MS`), or a remote client's
    /// grace ends.
    pub fn poll_timeout(&self) -> Option<u64> {
        if self.waiting.is_empty() {
            return None;
        }
        let wait = match self.link {
            ClientLink::Remote => self.reconnect_grace_ms,
            ClientLink::HandedOver | ClientLink::Relayed => CLIENT_EXIT_MS,
        };
        Some(self.closed_at_ms.saturating_add(wait))
    }
}

/// The reconnection grace this worker gives remote clients: the law's, or
/// a short one under `EUKHE_TEST_SHORT_WINDOWS=1` (logged).
fn reconnect_grace_ms() -> u64 {
    let short = std::env::var(crate::config::TEST_SHORT_WINDOWS).is_ok_and(|v| v == "1");
    if !short {
        return REMOTE_RECONNECT_GRACE_MS;
    }
    tracing::warn!(
        "{}=1 (test only): a remote client's command is hung up {TEST_REMOTE_RECONNECT_GRACE_MS} ms after its connection ended",
        crate::config::TEST_SHORT_WINDOWS
    );
    TEST_REMOTE_RECONNECT_GRACE_MS
}

/// The connection of `peer`, which asked for user bash `numbers`, ended:
/// hang up each one still running once its client is found gone.
pub async fn connection_ended(worker: Rc<RefCell<Worker>>, peer: Peer, numbers: Vec<Taken>) {
    if numbers.is_empty() {
        return;
    }
    let link = match peer {
        Peer::Relayed => ClientLink::Relayed,
        Peer::Client(_) => ClientLink::HandedOver,
        Peer::Remote => ClientLink::Remote,
    };
    let mut watch = ClientLeftWatch::new(link, mono_ms(), numbers);
    if link == ClientLink::Remote {
        watch = watch.with_grace(reconnect_grace_ms());
    }
    let exit = match peer {
        Peer::Client(Some(identity)) => Some(ProcessExit::open(identity)),
        Peer::Client(None) | Peer::Relayed | Peer::Remote => None,
    };
    loop {
        let process = match peer {
            Peer::Client(identity) if !identity.is_some_and(is_alive) => ClientProcess::Gone,
            Peer::Client(_) | Peer::Relayed | Peer::Remote => ClientProcess::Lives,
        };
        let hang_up = {
            let w = worker.borrow();
            let facts = (|n| w.core.bash_runs(n), |n| w.clients.rejoins(n));
            watch.look(mono_ms(), process, facts, w.stopping)
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

    /// Whether each command runs, and how many times it was rejoined.
    type Facts = (fn(u64) -> bool, fn(u64) -> u64);

    /// Every command runs, none was rejoined.
    const ALL_RUN: Facts = (|_| true, |_| 0);

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
            for number in watch.look(now, process, ALL_RUN, false) {
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
        let mut watch = ClientLeftWatch::new(ClientLink::HandedOver, closed, vec![(3, 0), (4, 0)]);
        // The first look waits; nothing is hung up, and the next look is
        // at the deadline (the client's exit would wake the driver first).
        let now = closed;
        assert_eq!(
            watch.look(now, ClientProcess::Lives, ALL_RUN, false),
            Vec::<u64>::new()
        );
        let now = watch.poll_timeout().expect("still waiting");
        assert_eq!(
            now,
            closed + CLIENT_EXIT_MS,
            "the next look is at the deadline"
        );
        assert_eq!(
            watch.look(now, ClientProcess::Lives, ALL_RUN, false),
            Vec::<u64>::new()
        );
        assert_eq!(watch.poll_timeout(), None, "left on purpose: rides through");
    }

    #[test]
    fn a_client_gone_before_the_deadline_has_its_commands_hung_up_then() {
        let closed = 500;
        let mut watch = ClientLeftWatch::new(ClientLink::HandedOver, closed, vec![(7, 0)]);
        let gone = closed + CLIENT_EXIT_MS / 2 + 3;
        let hung_up = drive(&mut watch, Some(gone));
        assert_eq!(hung_up.len(), 1);
        let (at, number) = hung_up[0];
        assert_eq!(number, 7);
        assert_eq!(at, gone, "hung up as the client ends");
    }

    #[test]
    fn a_client_gone_after_the_deadline_hangs_nothing_up() {
        let mut watch = ClientLeftWatch::new(ClientLink::HandedOver, 0, vec![(1, 0)]);
        assert!(drive(&mut watch, Some(CLIENT_EXIT_MS + 1)).is_empty());
    }

    #[test]
    fn a_relayed_connection_or_an_ended_command_is_decided_at_once() {
        let mut relayed = ClientLeftWatch::new(ClientLink::Relayed, 0, vec![(1, 0)]);
        assert_eq!(
            relayed.look(0, ClientProcess::Gone, ALL_RUN, false),
            Vec::<u64>::new()
        );
        assert_eq!(relayed.poll_timeout(), None);
        let mut ended = ClientLeftWatch::new(ClientLink::HandedOver, 0, vec![(2, 0)]);
        assert_eq!(
            ended.look(0, ClientProcess::Gone, (|_| false, |_| 0), false),
            Vec::<u64>::new()
        );
        assert_eq!(ended.poll_timeout(), None);
    }

    #[test]
    fn a_remote_connection_sleeps_to_the_grace_end_then_hangs_up_the_unfollowed() {
        let closed = 1_000;
        let mut watch = ClientLeftWatch::new(ClientLink::Remote, closed, vec![(5, 0), (6, 1)])
            .with_grace(TEST_REMOTE_RECONNECT_GRACE_MS);
        // Its proxy is gone at once: nothing is hung up yet, and the one
        // next look is the grace's end (no ticks between).
        let nobody_back = (|_: u64| true, |n: u64| if n == 6 { 1 } else { 0 });
        assert_eq!(
            watch.look(closed, ClientProcess::Lives, nobody_back, false),
            Vec::<u64>::new()
        );
        let end = watch.poll_timeout().expect("waits for a reconnection");
        assert_eq!(end, closed + TEST_REMOTE_RECONNECT_GRACE_MS);
        // By then bash 6 was rejoined (a second time) and bash 5 was not.
        let six_back = (|_: u64| true, |n: u64| if n == 6 { 2 } else { 0 });
        assert_eq!(
            watch.look(end, ClientProcess::Lives, six_back, false),
            vec![5]
        );
        assert_eq!(watch.poll_timeout(), None);
    }

    #[test]
    fn a_remote_connection_gets_the_laws_grace_unless_told_otherwise() {
        let watch = ClientLeftWatch::new(ClientLink::Remote, 0, vec![(1, 0)]);
        assert_eq!(watch.poll_timeout(), Some(REMOTE_RECONNECT_GRACE_MS));
    }
}
