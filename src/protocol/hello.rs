//! The greeting that opens every connection: protocol version, eukhe
//! version, build id and capabilities, so each side knows what it talks to.

use serde::{Deserialize, Serialize};

/// The wire protocol this build speaks.
/// 2: output travels as binary frames (`protocol::output`).
/// 3: terminal runs and their screens (`keys`, `screen`, `wait-for`,
/// attaching onto a terminal run, the shell), and `waiting` in the
/// sessions' listings: messages a peer of 2 refuses as unknown.
pub const PROTOCOL_VERSION: u32 = 3;

/// Capabilities a peer advertises.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Capability {
    /// Answers `shutdown` with `if_idle` through the quiesce protocol.
    IdleShutdown,
    /// Routes session requests to per-session workers.
    Workers,
    /// Its socket belongs to the service manager, which starts the next
    /// daemon on the next connection: a replacing client starts none.
    SocketActivated,
    /// A worker that takes a client's connection from its supervisor
    /// (`Request::Handoff`) and serves it directly.
    Handoff,
    /// Output as zero-run frames (`protocol::output`): a client that reads
    /// them, a worker that sends them to such a client.
    ZeroRuns,
    /// Serves clients on other machines' user bash: rides through their
    /// dropped connection for a grace, takes `rejoin` and `hang_up`.
    RemoteClients,
    /// A client's hello: its `Request::Direct` follows at once. A worker's
    /// answer: it serves that request and the client from now on
    /// (`laws::direct`); without it, the client goes to the supervisor.
    Direct,
}

impl Capability {
    /// The capability's name as hellos carry it.
    pub fn name(self) -> &'static str {
        match self {
            Capability::IdleShutdown => "idle_shutdown",
            Capability::Workers => "workers",
            Capability::SocketActivated => "socket_activated",
            Capability::Handoff => "handoff",
            Capability::ZeroRuns => "zero_runs",
            Capability::RemoteClients => "remote_clients",
            Capability::Direct => "direct",
        }
    }
}

/// Who is saying hello.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// A command a user typed.
    Interactive,
    /// A client acting on its own (relaunching a lost daemon, scripts).
    Background,
    /// The supervisor, talking to a worker.
    Supervisor,
    /// A daemon or worker answering.
    Daemon,
}

/// The greeting. Capabilities are names, so a newer peer's unknown
/// capabilities are carried (and ignored), never an error.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hello {
    /// The wire protocol version ([`PROTOCOL_VERSION`]).
    pub protocol: u32,
    /// The sender's version.
    pub version: String,
    /// The sender's build id.
    pub build_id: String,
    /// Who is speaking.
    pub role: Role,
    /// What the sender can do, by name ([`Capability::name`]).
    #[serde(default)]
    pub capabilities: Vec<String>,
    /// The answering process's pid (daemons and workers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
}

impl Hello {
    /// Whether the sender advertises `capability`.
    pub fn has(&self, capability: Capability) -> bool {
        self.capabilities.iter().any(|c| c == capability.name())
    }
}

/// A peer whose protocol this eukhe does not speak.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolMismatch {
    /// The peer is newer.
    #[error(
        "protocol version {0} is from the future: this eukhe speaks {ours}; update it",
        ours = PROTOCOL_VERSION
    )]
    Newer(u32),
    /// The peer is older.
    #[error("protocol version {0} is too old: this eukhe speaks {ours}", ours = PROTOCOL_VERSION)]
    Older(u32),
}

/// Whether a peer speaking `protocol` can be served, or why not.
pub fn check_protocol(protocol: u32) -> Result<(), ProtocolMismatch> {
    match protocol.cmp(&PROTOCOL_VERSION) {
        std::cmp::Ordering::Equal => Ok(()),
        std::cmp::Ordering::Greater => Err(ProtocolMismatch::Newer(protocol)),
        std::cmp::Ordering::Less => Err(ProtocolMismatch::Older(protocol)),
    }
}
