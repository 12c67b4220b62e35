//! When the connection of an `eukhe bash` client ends while its command
//! runs: whether the client went away (the command is hung up, as `ssh`
//! hangs up a command whose client left) or only the way to it was lost
//! (the command rides through, and the client follows it again).
//!
//! A client talks to the worker directly once the supervisor handed its
//! connection over, so a lost supervisor never ends that connection: its
//! end means the client closed it. A client whose standard output closed
//! dies of SIGPIPE, and a killed client dies; either way its process is
//! gone a moment after its connection ends. A client that closes on
//! purpose and lives on (`eukhe mcp` after its call's timeout, which
//! leaves the command running) is not gone. A connection relayed by the
//! supervisor (a worker that cannot take clients over) also ends with the
//! supervisor: that end says nothing about the client, so it rides
//! through.
//!
//! A remote client (`eukhe --host`) reaches the worker through SSH (`eukhe
//! proxy` on the worker's machine, or sshd carrying the host's forward),
//! so the process at the far end is the proxy or sshd, whose end says
//! nothing about the client: its SSH connection may only have dropped.
//! Its command goes on for a reconnection grace; the
//! client following it again within the grace keeps it, and none by then
//! hangs it up. A remote client that really leaves says so itself (an
//! explicit hang-up request), so only one killed outright waits the grace.

use super::timing::CLIENT_EXIT_MS;

/// How a user bash's client reached the worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientLink {
    /// Handed over: the client's own connection, its process known.
    HandedOver,
    /// Relayed through the supervisor, whose loss also ends it.
    Relayed,
    /// Through SSH for a client on another machine: the peer's process
    /// is the proxy's or sshd's, and says nothing about the client.
    Remote,
}

/// What is known of the client's process after its connection ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientProcess {
    /// No process of its identity lives (it exited, was killed, is a zombie).
    Gone,
    /// It still lives.
    Lives,
}

/// The facts the decision reads, once the client's connection ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientClosed {
    /// How the client reached the worker.
    pub link: ClientLink,
    /// Whether its process still lives.
    pub process: ClientProcess,
    /// Milliseconds since the connection ended.
    pub since_close_ms: u64,
    /// The command still runs (its end is not stored yet).
    pub running: bool,
    /// The worker itself is stopping: its clients' connections end with it.
    pub worker_stopping: bool,
    /// The client has followed the command again on another connection
    /// since this one took it (a remote client that reconnected).
    pub followed_again: bool,
    /// How long a remote client's command waits for it to reconnect
    /// (`REMOTE_RECONNECT_GRACE_MS`, shorter only in tests).
    pub reconnect_grace_ms: u64,
}

/// What happens to the command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientLeft {
    /// The client went away: close the command's output (a write gets
    /// SIGPIPE), then send its process group SIGHUP.
    HangUp,
    /// The client's process may be exiting: look again.
    WaitForExit,
    /// A remote client may be reconnecting: look again at the grace's end.
    WaitForReconnect,
    /// Nothing: the command goes on and can be followed by its number.
    RideThrough,
}

/// Decide what the end of a user bash client's connection does.
pub fn client_left(closed: ClientClosed) -> ClientLeft {
    if !closed.running || closed.worker_stopping || closed.link == ClientLink::Relayed {
        return ClientLeft::RideThrough;
    }
    if closed.link == ClientLink::Remote {
        return match closed.followed_again {
            true => ClientLeft::RideThrough,
            false if closed.since_close_ms < closed.reconnect_grace_ms => {
                ClientLeft::WaitForReconnect
            }
            false => ClientLeft::HangUp,
        };
    }
    match closed.process {
        ClientProcess::Gone => ClientLeft::HangUp,
        // A process closes its sockets as it exits, a moment before it is
        // gone: one that still lives after that moment left on purpose.
        ClientProcess::Lives if closed.since_close_ms < CLIENT_EXIT_MS => ClientLeft::WaitForExit,
        ClientProcess::Lives => ClientLeft::RideThrough,
    }
}

#[cfg(test)]
mod tests {
    use super::super::timing::REMOTE_RECONNECT_GRACE_MS;
    use super::*;

    fn closed(link: ClientLink, process: ClientProcess, since_close_ms: u64) -> ClientClosed {
        ClientClosed {
            link,
            process,
            since_close_ms,
            running: true,
            worker_stopping: false,
            followed_again: false,
            reconnect_grace_ms: REMOTE_RECONNECT_GRACE_MS,
        }
    }

    fn remote(since_close_ms: u64, followed_again: bool) -> ClientClosed {
        ClientClosed {
            followed_again,
            ..closed(ClientLink::Remote, ClientProcess::Gone, since_close_ms)
        }
    }

    #[test]
    fn a_remote_clients_command_goes_on_through_the_grace_then_is_hung_up() {
        // Its proxy is gone at once; that says nothing of the client.
        assert_eq!(client_left(remote(0, false)), ClientLeft::WaitForReconnect);
        assert_eq!(
            client_left(remote(REMOTE_RECONNECT_GRACE_MS - 1, false)),
            ClientLeft::WaitForReconnect
        );
        // Nobody followed it again by the grace's end: the client is gone.
        assert_eq!(
            client_left(remote(REMOTE_RECONNECT_GRACE_MS, false)),
            ClientLeft::HangUp
        );
    }

    #[test]
    fn a_remote_client_that_follows_its_command_again_keeps_it_running() {
        for since in [
            0,
            REMOTE_RECONNECT_GRACE_MS - 1,
            REMOTE_RECONNECT_GRACE_MS * 2,
        ] {
            assert_eq!(client_left(remote(since, true)), ClientLeft::RideThrough);
        }
    }

    #[test]
    fn a_remote_clients_grace_is_the_one_given() {
        let short = ClientClosed {
            reconnect_grace_ms: 2_000,
            ..remote(1_999, false)
        };
        assert_eq!(client_left(short), ClientLeft::WaitForReconnect);
        let over = ClientClosed {
            since_close_ms: 2_000,
            ..short
        };
        assert_eq!(client_left(over), ClientLeft::HangUp);
    }

    #[test]
    fn a_remote_clients_ended_command_or_stopping_worker_hangs_up_nothing() {
        let ended = ClientClosed {
            running: false,
            ..remote(REMOTE_RECONNECT_GRACE_MS, false)
        };
        assert_eq!(client_left(ended), ClientLeft::RideThrough);
        let stopping = ClientClosed {
            worker_stopping: true,
            ..remote(REMOTE_RECONNECT_GRACE_MS, false)
        };
        assert_eq!(client_left(stopping), ClientLeft::RideThrough);
    }

    #[test]
    fn a_local_client_is_not_given_the_grace() {
        // Its own process is the peer: gone means it left.
        let gone = closed(ClientLink::HandedOver, ClientProcess::Gone, 0);
        assert_eq!(client_left(gone), ClientLeft::HangUp);
    }

    #[test]
    fn a_client_gone_hangs_up_its_running_command() {
        let gone = closed(ClientLink::HandedOver, ClientProcess::Gone, 0);
        assert_eq!(client_left(gone), ClientLeft::HangUp);
    }

    #[test]
    fn a_client_still_exiting_is_waited_for_then_one_alive_left_on_purpose() {
        let lives = |ms| closed(ClientLink::HandedOver, ClientProcess::Lives, ms);
        assert_eq!(client_left(lives(0)), ClientLeft::WaitForExit);
        assert_eq!(
            client_left(lives(CLIENT_EXIT_MS - 1)),
            ClientLeft::WaitForExit
        );
        assert_eq!(client_left(lives(CLIENT_EXIT_MS)), ClientLeft::RideThrough);
        // Gone after the wait: still a client that went away.
        let late = closed(ClientLink::HandedOver, ClientProcess::Gone, CLIENT_EXIT_MS);
        assert_eq!(client_left(late), ClientLeft::HangUp);
    }

    #[test]
    fn a_relayed_connection_rides_through_whatever_its_client_did() {
        // Its end may be the supervisor's: a lost daemon hangs up nothing.
        for process in [ClientProcess::Gone, ClientProcess::Lives] {
            let relayed = closed(ClientLink::Relayed, process, 0);
            assert_eq!(client_left(relayed), ClientLeft::RideThrough);
        }
    }

    #[test]
    fn an_ended_command_or_a_stopping_worker_hangs_up_nothing() {
        let ended = ClientClosed {
            running: false,
            ..closed(ClientLink::HandedOver, ClientProcess::Gone, 0)
        };
        assert_eq!(client_left(ended), ClientLeft::RideThrough);
        let stopping = ClientClosed {
            worker_stopping: true,
            ..closed(ClientLink::HandedOver, ClientProcess::Gone, 0)
        };
        assert_eq!(client_left(stopping), ClientLeft::RideThrough);
    }
}
