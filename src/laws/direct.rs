//! The direct route: a client reaching a running session's worker without
//! the supervisor.
//!
//! Not a law of the specification: a shortcut that must change none of its
//! decisions. A client that asks for it says hello to the worker and sends
//! its request at once; the worker serves it only where the supervisor's
//! route would have come to the same thing with nothing to add:
//!
//! - the replacement law ([`super::replace`]), applied to the daemon the
//!   client would have met, says "use it" and has nothing to tell (the
//!   client is of the worker's build and protocol, and so of the
//!   supervisor's, which the worker checks);
//! - a supervisor supervises the worker: a client finding the supervisor
//!   lost starts one, so that one goes on doing so;
//! - the run gate is open: a quiesced or stopping worker (an idle stop, a
//!   removal, a daemon being replaced) leaves the request to the
//!   supervisor, which holds it until the stop is over and wakes the session;
//! - the request names this worker's session.
//!
//! Anything else is [`DirectVerdict::Elsewhere`]: the worker serves
//! nothing and the client takes the supervisor's route as before. The
//! worker's own books count a direct client as a handed-over one (its
//! connection from the moment it is accepted, for the idle stop), and
//! `client_left` reads its pid from the socket as it does for one.

use super::replace::{replace_verdict, Build, ClientKind, DaemonHello, ReplaceAction};

/// What the worker knows of itself when a client asks for the direct route.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerSees<'a> {
    /// The worker's own build.
    pub own: &'a Build,
    /// The worker's wire protocol.
    pub protocol: u32,
    /// The build id of the supervisor supervising it now, if one does.
    pub supervisor_build_id: Option<&'a str>,
    /// Whether its run gate is open (not quiesced, not stopping).
    pub gate_open: bool,
    /// Whether the request names the worker's own session.
    pub own_session: bool,
}

/// Who asks for the direct route.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirectAsk<'a> {
    /// The client's build.
    pub client: &'a Build,
    /// The client's wire protocol.
    pub protocol: u32,
    /// An interactive or a background start.
    pub kind: ClientKind,
}

/// Why a worker leaves a client to the supervisor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Elsewhere {
    /// The replacement law has something to do or to say (another build,
    /// version or protocol), or the versions do not read.
    ReplacementLaw,
    /// No supervisor supervises the worker now.
    Unsupervised,
    /// Its supervisor is of another build than the worker.
    SupervisorOfAnotherBuild,
    /// The run gate is closed: the worker is quiesced or stopping.
    GateClosed,
    /// The request names another session.
    OtherSession,
}

/// Serve the client directly, or leave it to the supervisor's route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DirectVerdict {
    /// The worker serves the client from its first request on.
    Serve,
    /// The worker serves nothing; the client goes to the supervisor.
    Elsewhere(Elsewhere),
}

/// Whether the client's hello alone lets the direct route serve it: the
/// replacement law, applied to a daemon of `daemon`'s build speaking
/// `daemon_protocol`, says use it and has nothing to tell. The client asks
/// this of the worker's hello; the worker of the client's.
pub fn law_allows(ask: &DirectAsk<'_>, daemon: &Build, daemon_protocol: u32) -> bool {
    let hello = DaemonHello {
        build: daemon.clone(),
        protocol: daemon_protocol,
        idle_shutdown: true,
    };
    matches!(
        replace_verdict(ask.client, ask.protocol, ask.kind, &hello),
        Ok(verdict) if verdict.action == ReplaceAction::Use && verdict.message.is_none()
    ) && ask.protocol == daemon_protocol
}

/// The worker's verdict on a client asking for the direct route.
pub fn direct_verdict(ask: &DirectAsk<'_>, worker: &WorkerSees<'_>) -> DirectVerdict {
    let elsewhere = if !law_allows(ask, worker.own, worker.protocol) {
        Some(Elsewhere::ReplacementLaw)
    } else if worker.supervisor_build_id.is_none() {
        Some(Elsewhere::Unsupervised)
    } else if worker.supervisor_build_id != Some(worker.own.build_id.as_str()) {
        Some(Elsewhere::SupervisorOfAnotherBuild)
    } else if !worker.gate_open {
        Some(Elsewhere::GateClosed)
    } else if !worker.own_session {
        Some(Elsewhere::OtherSession)
    } else {
        None
    };
    elsewhere.map_or(DirectVerdict::Serve, DirectVerdict::Elsewhere)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(version: &str, id: &str) -> Build {
        Build {
            version: version.into(),
            build_id: id.into(),
        }
    }

    fn sees(own: &Build) -> WorkerSees<'_> {
        WorkerSees {
            own,
            protocol: 3,
            supervisor_build_id: Some(&own.build_id),
            gate_open: true,
            own_session: true,
        }
    }

    fn ask(client: &Build, kind: ClientKind) -> DirectAsk<'_> {
        DirectAsk {
            client,
            protocol: 3,
            kind,
        }
    }

    #[test]
    fn a_client_of_the_workers_build_is_served_when_all_is_settled() {
        let own = build("1.2.0", "aa");
        for kind in [ClientKind::Background, ClientKind::Interactive] {
            assert_eq!(
                direct_verdict(&ask(&own, kind), &sees(&own)),
                DirectVerdict::Serve
            );
        }
    }

    #[test]
    fn any_other_build_or_protocol_goes_to_the_supervisor() {
        let own = build("1.2.0", "aa");
        let others = [
            build("1.2.0", "bb"),
            build("1.1.0", "bb"),
            build("1.3.0", "bb"),
            build("not a version", "aa"),
        ];
        for client in &others {
            for kind in [ClientKind::Background, ClientKind::Interactive] {
                assert_eq!(
                    direct_verdict(&ask(client, kind), &sees(&own)),
                    DirectVerdict::Elsewhere(Elsewhere::ReplacementLaw),
                    "{client:?} {kind:?}"
                );
            }
        }
        let newer_protocol = DirectAsk {
            protocol: 4,
            ..ask(&own, ClientKind::Background)
        };
        assert_eq!(
            direct_verdict(&newer_protocol, &sees(&own)),
            DirectVerdict::Elsewhere(Elsewhere::ReplacementLaw)
        );
    }

    #[test]
    fn an_unsettled_worker_leaves_the_client_to_the_supervisor() {
        let own = build("1.2.0", "aa");
        let client = ask(&own, ClientKind::Background);
        let cases = [
            (
                WorkerSees {
                    supervisor_build_id: None,
                    ..sees(&own)
                },
                Elsewhere::Unsupervised,
            ),
            (
                WorkerSees {
                    supervisor_build_id: Some("bb"),
                    ..sees(&own)
                },
                Elsewhere::SupervisorOfAnotherBuild,
            ),
            (
                WorkerSees {
                    gate_open: false,
                    ..sees(&own)
                },
                Elsewhere::GateClosed,
            ),
            (
                WorkerSees {
                    own_session: false,
                    ..sees(&own)
                },
                Elsewhere::OtherSession,
            ),
        ];
        for (worker, why) in cases {
            assert_eq!(
                direct_verdict(&client, &worker),
                DirectVerdict::Elsewhere(why)
            );
        }
    }

    #[test]
    fn the_client_reads_the_workers_hello_by_the_same_law() {
        let own = build("1.2.0", "aa");
        let background = ask(&own, ClientKind::Background);
        assert!(law_allows(&background, &own, 3));
        assert!(!law_allows(&background, &build("1.2.0", "bb"), 3));
        assert!(!law_allows(&background, &own, 2));
    }
}
