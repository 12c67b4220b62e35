//! Replacement: whether a starting client keeps the daemon on its socket or
//! replaces it, and what it tells the user.
//!
//! Model: `bend/replace.bend`. Laws: `replace_never_downgrades`,
//! `replacement_terminates`, `background_never_replaces`,
//! `replace_rank_reads_semver`, `replace_relation_exact`,
//! `replace_verdict_exact`, `replace_rank_cut`.
//!
//! - Rank ([`version_rank`]): semver. A release `M.m.p` ranks by
//!   `(M, m, p)`; any pre-release (`-dev`, an older-scheme build such as
//!   `0.9.9-main.46`) is cut to its series: it ranks just below every
//!   release `M.m.p` of that series and equal to every other pre-release of
//!   it. Build metadata (`+...`) is ignored. Anything else is not a version.
//! - Relation ([`replace_relation`]): client newer, client older, the same
//!   build, or another build of the same rank.
//! - Verdict ([`replace_verdict`]): only an interactive client replaces, only
//!   a daemon of lower rank, and only one that advertises `idle_shutdown`
//!   (by asking it to shut down if idle). Everything else keeps the daemon:
//!   the client uses it when the protocol agrees and stops when it does not,
//!   telling the user why in both cases.

use std::cmp::Ordering;

use serde::{Deserialize, Serialize};

/// Where a version stands in the replacement order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Rank {
    /// The major version.
    pub major: u64,
    /// The minor version.
    pub minor: u64,
    /// The patch version.
    pub patch: u64,
    /// A release ranks above every pre-release of its series.
    pub release: bool,
}

/// A version string that semver does not read.
#[derive(Debug, thiserror::Error)]
#[error("{version:?} is not a semantic version: {source}")]
pub struct NotAVersion {
    /// The string given.
    pub version: String,
    /// Why semver refuses it.
    #[source]
    pub source: semver::Error,
}

/// The rank of `version`, or why it is not a version.
pub fn version_rank(version: &str) -> Result<Rank, NotAVersion> {
    let parsed = semver::Version::parse(version).map_err(|source| NotAVersion {
        version: version.to_string(),
        source,
    })?;
    Ok(Rank {
        major: parsed.major,
        minor: parsed.minor,
        patch: parsed.patch,
        release: parsed.pre.is_empty(),
    })
}

/// A build of eukhe: its version and its build id.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Build {
    /// Its semantic version.
    pub version: String,
    /// The binary's build id: tells two builds of one version apart.
    pub build_id: String,
}

/// How the client's build stands to the daemon's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Relation {
    /// The client's version ranks higher: an interactive start replaces an idle daemon.
    ClientNewer,
    /// The client's version ranks lower: the daemon is kept and the user told to update.
    ClientOlder,
    /// The very same binary.
    SameBuild,
    /// The same version, another build: the daemon is kept.
    OtherBuild,
}

/// The relation of `client` to `daemon`.
pub fn replace_relation(client: &Build, daemon: &Build) -> Result<Relation, NotAVersion> {
    let ours = version_rank(&client.version)?;
    let theirs = version_rank(&daemon.version)?;
    Ok(match ours.cmp(&theirs) {
        Ordering::Greater => Relation::ClientNewer,
        Ordering::Less => Relation::ClientOlder,
        Ordering::Equal if client.build_id == daemon.build_id => Relation::SameBuild,
        Ordering::Equal => Relation::OtherBuild,
    })
}

/// Who is starting: only an interactive start (TUI, `eukhe chat`, a command
/// typed by the user) may replace a daemon.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClientKind {
    /// A person's start (`eukhe attach` only): may replace an older daemon.
    Interactive,
    /// Dashboard, gateway, ACP, the relaunch of a lost daemon.
    Background,
}

/// A client start, by the command (or the client's own act) that starts
/// it: the command-to-kind table every daemon start goes through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientStart {
    /// `eukhe new`.
    New,
    /// `eukhe send`.
    Send,
    /// `eukhe bash`.
    Bash,
    /// `eukhe log`.
    Log,
    /// `eukhe queue`.
    Queue,
    /// `eukhe withdraw`.
    Withdraw,
    /// `eukhe cancel`.
    Cancel,
    /// `eukhe ls`.
    Ls,
    /// `eukhe status`.
    Status,
    /// `eukhe restart`.
    Restart,
    /// `eukhe rm`.
    Rm,
    /// `eukhe rename`.
    Rename,
    /// `eukhe events`, a subscriber that outlives daemons.
    Events,
    /// `eukhe top`, a dashboard (the specification's background example).
    Top,
    /// `eukhe mcp`, an agent's gateway.
    Mcp,
    /// `eukhe attach` with a terminal on its standard input and output: a
    /// person's screen on a session.
    Attach,
    /// `eukhe attach` without a terminal (from cron, or fed by a pipe):
    /// no person drives it.
    AttachWithoutTerminal,
    /// An attached client's own connection that watches the supervisor.
    AttachWatch,
    /// A client (attach, `log --follow`, `send --wait`, `bash`) connecting
    /// again after its connection dropped.
    Reattach,
    /// An attached client relaunching a lost daemon.
    Relaunch,
}

impl ClientStart {
    /// Every start, in the order the model's table lists them.
    pub const ALL: [ClientStart; 20] = [
        ClientStart::New,
        ClientStart::Send,
        ClientStart::Bash,
        ClientStart::Log,
        ClientStart::Queue,
        ClientStart::Withdraw,
        ClientStart::Cancel,
        ClientStart::Ls,
        ClientStart::Status,
        ClientStart::Restart,
        ClientStart::Rm,
        ClientStart::Rename,
        ClientStart::Events,
        ClientStart::Top,
        ClientStart::Mcp,
        ClientStart::Attach,
        ClientStart::AttachWithoutTerminal,
        ClientStart::AttachWatch,
        ClientStart::Reattach,
        ClientStart::Relaunch,
    ];

    /// The start's name: the command, or what the client does.
    pub fn name(self) -> &'static str {
        match self {
            ClientStart::New => "new",
            ClientStart::Send => "send",
            ClientStart::Bash => "bash",
            ClientStart::Log => "log",
            ClientStart::Queue => "queue",
            ClientStart::Withdraw => "withdraw",
            ClientStart::Cancel => "cancel",
            ClientStart::Ls => "ls",
            ClientStart::Status => "status",
            ClientStart::Restart => "restart",
            ClientStart::Rm => "rm",
            ClientStart::Rename => "rename",
            ClientStart::Events => "events",
            ClientStart::Top => "top",
            ClientStart::Mcp => "mcp",
            ClientStart::Attach => "attach",
            ClientStart::AttachWithoutTerminal => "attach-without-terminal",
            ClientStart::AttachWatch => "attach-watch",
            ClientStart::Reattach => "reattach",
            ClientStart::Relaunch => "relaunch",
        }
    }
}

/// Who a start is. Only `eukhe attach` with a terminal is an interactive
/// start (the specification's "TUI, eukhe chat": a person's screen on a
/// session); the same command without one, every other command, and an attached client's own reconnects and
/// relaunches, is a background start and never replaces a daemon.
pub fn start_kind(start: ClientStart) -> ClientKind {
    match start {
        ClientStart::Attach => ClientKind::Interactive,
        ClientStart::New
        | ClientStart::Send
        | ClientStart::Bash
        | ClientStart::Log
        | ClientStart::Queue
        | ClientStart::Withdraw
        | ClientStart::Cancel
        | ClientStart::Ls
        | ClientStart::Status
        | ClientStart::Restart
        | ClientStart::Rm
        | ClientStart::Rename
        | ClientStart::Events
        | ClientStart::Top
        | ClientStart::Mcp
        | ClientStart::AttachWithoutTerminal
        | ClientStart::AttachWatch
        | ClientStart::Reattach
        | ClientStart::Relaunch => ClientKind::Background,
    }
}

/// The capabilities (by the names hellos carry) a start needs of the
/// daemon it uses: every session command needs per-session workers.
pub fn needed_capabilities(start: ClientStart) -> &'static [&'static str] {
    match start {
        ClientStart::Ls | ClientStart::Status | ClientStart::Relaunch => &[],
        _ => &["workers"],
    }
}

/// A start that uses a daemon lacking a capability it needs: the one line
/// that says so and names the way to upgrade the daemon (a background start
/// never replaces it).
pub fn lacking_capability(
    start: ClientStart,
    advertised: &[String],
    client: &Build,
    daemon: &Build,
) -> Option<String> {
    let missing = needed_capabilities(start)
        .iter()
        .find(|need| !advertised.iter().any(|has| has == *need))?;
    Some(format!(
        "the running daemon (v{}) lacks `{missing}`, which `eukhe {}` needs: `eukhe attach` (or `eukhe shutdown --if-idle`) replaces it with v{} when it is idle",
        daemon.version,
        start.name(),
        client.version
    ))
}

/// What the daemon on the socket told the client in its hello.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DaemonHello {
    /// The daemon's build.
    pub build: Build,
    /// The wire protocol it speaks.
    pub protocol: u32,
    /// Whether it has the idle-shutdown capability (it can be asked to stop if idle).
    pub idle_shutdown: bool,
}

/// What the client does with the daemon.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplaceAction {
    /// Use the running daemon.
    Use,
    /// Ask the daemon to shut down if idle, then start this build.
    ReplaceIfIdle,
    /// Do not use the daemon (the protocols differ): stop with the message.
    Stop,
}

/// The keep-or-replace verdict with the words for the user.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplaceVerdict {
    /// Use, replace if idle, or stop.
    pub action: ReplaceAction,
    /// What the user is told, if anything.
    pub message: Option<String>,
}

/// The verdict for a client start.
pub fn replace_verdict(
    client: &Build,
    client_protocol: u32,
    kind: ClientKind,
    daemon: &DaemonHello,
) -> Result<ReplaceVerdict, NotAVersion> {
    let relation = replace_relation(client, &daemon.build)?;
    let (c, d) = (&client.version, &daemon.build.version);
    let message = match relation {
        Relation::SameBuild => None,
        Relation::ClientOlder => Some(format!(
            "this eukhe (v{c}) is older than the running daemon (v{d}): update or run `eukhe shutdown`"
        )),
        Relation::OtherBuild => Some(format!(
            "this eukhe (v{c}, build {}) is another build than the running daemon (v{d}, build {}): keeping it; run `eukhe shutdown` to switch",
            client.build_id, daemon.build.build_id
        )),
        Relation::ClientNewer if kind == ClientKind::Background => Some(format!(
            "the running daemon (v{d}) is older than this eukhe (v{c}): keeping it; `eukhe attach` (or `eukhe shutdown --if-idle`) replaces it when it is idle"
        )),
        Relation::ClientNewer if !daemon.idle_shutdown => Some(format!(
            "the running daemon (v{d}) cannot shut down when idle: keeping it; run `eukhe shutdown` to start v{c}"
        )),
        Relation::ClientNewer => {
            return Ok(ReplaceVerdict {
                action: ReplaceAction::ReplaceIfIdle,
                message: None,
            })
        }
    };
    Ok(keep(client_protocol, daemon, message))
}

/// The verdict when a daemon asked to shut down if idle answered busy.
pub fn busy_daemon_kept(
    client: &Build,
    client_protocol: u32,
    daemon: &DaemonHello,
) -> ReplaceVerdict {
    let message = format!(
        "the running daemon (v{}) is busy: it keeps serving until it is idle; v{} replaces it at a later start",
        daemon.build.version, client.version
    );
    keep(client_protocol, daemon, Some(message))
}

/// The verdict of a client on a daemon on another machine (`host`, reached
/// over SSH through that machine's `eukhe proxy`). The client cannot start
/// its own build there, so it never replaces: where [`replace_verdict`]
/// would, it uses the daemon and says so, naming the host and both
/// versions (the remote's own interactive start, the proxy, has already
/// replaced an idle daemon older than the remote's installed eukhe). An
/// older client uses a newer daemon and says so; any other build is used
/// and named. Only protocols that disagree stop it.
pub fn remote_verdict(
    client: &Build,
    client_protocol: u32,
    daemon: &DaemonHello,
    host: &str,
) -> Result<ReplaceVerdict, NotAVersion> {
    let relation = replace_relation(client, &daemon.build)?;
    let (c, d) = (&client.version, &daemon.build.version);
    if client_protocol != daemon.protocol {
        return Ok(ReplaceVerdict {
            action: ReplaceAction::Stop,
            message: Some(format!(
                "the daemon on {host} (v{d}) speaks protocol {} and this eukhe (v{c}) speaks {client_protocol}: install the same eukhe on both machines",
                daemon.protocol
            )),
        });
    }
    let message = match relation {
        Relation::SameBuild => None,
        Relation::ClientNewer => Some(format!(
            "the daemon on {host} (v{d}) is older than this eukhe (v{c}): using it; install v{c} on {host} to replace it"
        )),
        Relation::ClientOlder => Some(format!(
            "this eukhe (v{c}) is older than the daemon on {host} (v{d}): using it; update eukhe here"
        )),
        Relation::OtherBuild => Some(format!(
            "this eukhe (v{c}, build {}) is another build than the daemon on {host} (v{d}, build {}): using it",
            client.build_id, daemon.build.build_id
        )),
    };
    Ok(ReplaceVerdict {
        action: ReplaceAction::Use,
        message,
    })
}

fn keep(client_protocol: u32, daemon: &DaemonHello, message: Option<String>) -> ReplaceVerdict {
    if client_protocol == daemon.protocol {
        ReplaceVerdict {
            action: ReplaceAction::Use,
            message,
        }
    } else {
        let message = message.unwrap_or_else(|| {
            format!(
                "the running daemon (v{}) speaks protocol {} and this eukhe speaks {}: run `eukhe shutdown`",
                daemon.build.version, daemon.protocol, client_protocol
            )
        });
        ReplaceVerdict {
            action: ReplaceAction::Stop,
            message: Some(message),
        }
    }
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

    fn hello(version: &str, id: &str, idle_shutdown: bool) -> DaemonHello {
        DaemonHello {
            build: build(version, id),
            protocol: 1,
            idle_shutdown,
        }
    }

    #[test]
    fn a_start_that_needs_what_the_daemon_lacks_says_so_naming_attach() {
        let client = build("2.0.0", "b");
        let daemon = build("1.0.0", "a");
        let none: Vec<String> = Vec::new();
        let workers = vec!["workers".to_string()];
        assert_eq!(
            lacking_capability(ClientStart::Send, &none, &client, &daemon).as_deref(),
            Some("the running daemon (v1.0.0) lacks `workers`, which `eukhe send` needs: `eukhe attach` (or `eukhe shutdown --if-idle`) replaces it with v2.0.0 when it is idle")
        );
        assert_eq!(
            lacking_capability(ClientStart::Send, &workers, &client, &daemon),
            None
        );
        assert_eq!(
            lacking_capability(ClientStart::Status, &none, &client, &daemon),
            None
        );
    }

    #[test]
    fn only_attach_is_an_interactive_start() {
        for start in ClientStart::ALL {
            let interactive = start_kind(start) == ClientKind::Interactive;
            assert_eq!(interactive, start == ClientStart::Attach, "{start:?}");
        }
    }

    #[test]
    fn pre_releases_rank_below_their_series_releases_and_tie_among_themselves() {
        let dev = version_rank("0.9.9-main.46").unwrap();
        assert!(dev < version_rank("0.9.9").unwrap());
        assert!(dev > version_rank("0.9.8").unwrap());
        assert_eq!(dev, version_rank("0.9.9-dev").unwrap());
        assert_eq!(
            version_rank("1.2.3+abc").unwrap(),
            version_rank("1.2.3").unwrap()
        );
        assert!(version_rank("1.10.0").unwrap() > version_rank("1.9.0").unwrap());
        assert!(version_rank("01.2.3").is_err());
        assert!(version_rank("1.2").is_err());
    }

    #[test]
    fn an_older_client_uses_the_daemon_with_the_specified_words() {
        let verdict = replace_verdict(
            &build("0.1.0", "a"),
            1,
            ClientKind::Interactive,
            &hello("0.2.0", "b", true),
        )
        .unwrap();
        assert_eq!(verdict.action, ReplaceAction::Use);
        assert_eq!(
            verdict.message.unwrap(),
            "this eukhe (v0.1.0) is older than the running daemon (v0.2.0): update or run `eukhe shutdown`"
        );
        let mut other_protocol = hello("0.2.0", "b", true);
        other_protocol.protocol = 2;
        let verdict = replace_verdict(
            &build("0.1.0", "a"),
            1,
            ClientKind::Interactive,
            &other_protocol,
        )
        .unwrap();
        assert_eq!(verdict.action, ReplaceAction::Stop);
    }

    #[test]
    fn only_an_interactive_newer_client_replaces_a_capable_daemon() {
        let client = build("0.2.0", "a");
        let old = hello("0.1.0", "b", true);
        let v =
            |kind, daemon: &DaemonHello| replace_verdict(&client, 1, kind, daemon).unwrap().action;
        assert_eq!(
            v(ClientKind::Interactive, &old),
            ReplaceAction::ReplaceIfIdle
        );
        assert_eq!(v(ClientKind::Background, &old), ReplaceAction::Use);
        assert_eq!(
            v(ClientKind::Interactive, &hello("0.1.0", "b", false)),
            ReplaceAction::Use
        );
        assert_eq!(
            v(ClientKind::Interactive, &hello("0.2.0", "b", true)),
            ReplaceAction::Use
        );
        assert_eq!(
            v(ClientKind::Interactive, &hello("0.2.0", "a", true)),
            ReplaceAction::Use
        );
    }

    #[test]
    fn replace_wire_round_trips_and_rejects_unknown_tags() {
        let verdict = ReplaceVerdict {
            action: ReplaceAction::ReplaceIfIdle,
            message: None,
        };
        let json = serde_json::to_string(&verdict).unwrap();
        assert_eq!(
            serde_json::from_str::<ReplaceVerdict>(&json).unwrap(),
            verdict
        );
        assert!(
            serde_json::from_str::<ReplaceVerdict>(r#"{"action":"downgrade","message":null}"#)
                .is_err()
        );
        assert!(serde_json::from_str::<DaemonHello>(
            r#"{"build":{"version":"1.0.0","build_id":"x"},"protocol":-1,"idle_shutdown":true}"#
        )
        .is_err());
    }

    fn remote_daemon(version: &str, id: &str, protocol: u32) -> DaemonHello {
        DaemonHello {
            build: build(version, id),
            protocol,
            idle_shutdown: true,
        }
    }

    #[test]
    fn a_client_never_replaces_a_remote_daemon_and_names_host_and_versions() {
        let newer = build("0.3.0", "n");
        let older = remote_daemon("0.2.0", "o", 4);
        // Locally an interactive start would replace this daemon.
        let local = replace_verdict(&newer, 4, ClientKind::Interactive, &older).unwrap();
        assert_eq!(local.action, ReplaceAction::ReplaceIfIdle);
        let remote = remote_verdict(&newer, 4, &older, "ann@box").unwrap();
        assert_eq!(remote.action, ReplaceAction::Use);
        let message = remote.message.unwrap();
        assert!(message.contains("ann@box"), "{message}");
        assert!(
            message.contains("v0.2.0") && message.contains("v0.3.0"),
            "{message}"
        );
    }

    #[test]
    fn an_older_client_uses_a_newer_remote_daemon_and_says_so() {
        let verdict = remote_verdict(
            &build("0.2.0", "o"),
            4,
            &remote_daemon("0.3.0", "n", 4),
            "box",
        )
        .unwrap();
        assert_eq!(verdict.action, ReplaceAction::Use);
        let message = verdict.message.unwrap();
        assert!(
            message.contains("older than the daemon on box (v0.3.0)"),
            "{message}"
        );
    }

    #[test]
    fn the_same_build_remote_is_used_silently_and_another_protocol_stops() {
        let same = remote_verdict(
            &build("0.3.0", "a"),
            4,
            &remote_daemon("0.3.0", "a", 4),
            "box",
        );
        assert_eq!(
            same.unwrap(),
            ReplaceVerdict {
                action: ReplaceAction::Use,
                message: None
            }
        );
        let other = remote_verdict(
            &build("0.3.0", "a"),
            4,
            &remote_daemon("0.3.0", "b", 4),
            "box",
        );
        assert_eq!(other.unwrap().action, ReplaceAction::Use);
        for daemon in ["0.2.0", "0.3.0", "0.4.0"] {
            let stop = remote_verdict(
                &build("0.3.0", "a"),
                4,
                &remote_daemon(daemon, "b", 5),
                "box",
            )
            .unwrap();
            assert_eq!(stop.action, ReplaceAction::Stop, "{daemon}");
            assert!(stop.message.unwrap().contains("box"), "{daemon}");
        }
    }
}
