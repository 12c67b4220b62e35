//! Reaching the daemon: connect, say hello, and decide with the
//! replacement law whether to use the daemon on the socket, replace it, or
//! stop. A client that finds no daemon starts one (process backend).

use std::os::unix::process::CommandExt as _;
use std::process::Stdio;
use std::time::Duration;

use tokio::net::UnixStream;

use super::error::ClientError;
use super::remote::{self, Target, Transport};
use super::route::current_target;
use crate::build_id::{build_id, version};
use crate::laws::replace::{
    busy_daemon_kept, lacking_capability, replace_verdict, start_kind, Build, ClientKind,
    ClientStart, DaemonHello, ReplaceAction,
};
use crate::laws::timing::{duration_in_words, POLL_MS, TM};
use crate::paths::Paths;
use crate::protocol::hello::{Capability, Role};
use crate::protocol::message::{Request, Response, ShutdownMode};
use crate::protocol::{read_frame, write_frame, FrameError, Hello, PROTOCOL_VERSION};
use crate::session::store::{private_append, private_dir};

/// A connection to the daemon, after hello.
pub struct Client {
    stream: UnixStream,
    /// The daemon's hello.
    pub daemon: Hello,
    /// The `ssh` carrying the stream, for a remote daemon.
    transport: Option<Box<Transport>>,
    /// Another machine's daemon (over its own ssh, or the host's forward).
    remote: bool,
}

impl Client {
    /// A client of a remote daemon, over `transport`'s stream (none: the
    /// host's forward, whose ssh is not this client's).
    pub(super) fn remote(
        stream: UnixStream,
        daemon: Hello,
        transport: Option<Transport>,
    ) -> Client {
        Client {
            stream,
            daemon,
            transport: transport.map(Box::new),
            remote: true,
        }
    }

    /// A client of a worker on this machine that serves it directly
    /// (`client::direct`), after its hello.
    pub(super) fn local(stream: UnixStream, worker: Hello) -> Client {
        Client {
            stream,
            daemon: worker,
            transport: None,
            remote: false,
        }
    }

    /// Whether this is a remote daemon's connection, and the daemon tells a
    /// remote client's dropped connection from its leaving (`remote_clients`).
    pub fn serves_remote_bash(&self) -> bool {
        self.remote
            && self
                .daemon
                .has(crate::protocol::hello::Capability::RemoteClients)
    }

    /// The pid of the `ssh` carrying this connection (a remote daemon's).
    pub fn transport_pid(&self) -> Option<u32> {
        self.transport.as_ref().and_then(|t| t.pid())
    }

    /// Send one request.
    pub async fn send(&mut self, request: &Request) -> Result<(), ClientError> {
        write_frame(&mut self.stream, request)
            .await
            .map_err(|source| ClientError::Wire {
                what: "talking to the daemon",
                source,
            })
    }

    /// Read one answer.
    pub async fn receive(&mut self) -> Result<Response, ClientError> {
        read_frame(&mut self.stream)
            .await
            .map_err(|source| ClientError::Wire {
                what: "the daemon's answer",
                source,
            })
    }

    /// Send `request` and read its answer.
    pub async fn ask(&mut self, request: Request) -> Result<Response, ClientError> {
        self.send(&request).await?;
        self.receive().await
    }
}

pub(super) fn our_hello(role: Role) -> Hello {
    Hello {
        protocol: PROTOCOL_VERSION,
        version: version().to_string(),
        build_id: build_id().to_string(),
        role,
        // Every response is read by `protocol::output`'s decoder, which
        // reads zero runs.
        capabilities: vec![Capability::ZeroRuns.name().to_string()],
        pid: None,
    }
}

async fn handshake(paths: &Paths, role: Role) -> Result<Option<Client>, ClientError> {
    // A socket directory too deep for any socket of eukhe's is said as
    // `eukhe doctor` says it, not as the system call's error.
    paths.sockets_fit()?;
    let mut stream = match UnixStream::connect(&paths.socket).await {
        Ok(stream) => stream,
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
            ) =>
        {
            return Ok(None)
        }
        Err(e) => {
            let what = format!("cannot connect to {}", paths.socket.display());
            return Err(ClientError::system(what)(e));
        }
    };
    // A daemon that is shutting down may accept and then hang up: that is
    // no daemon, not an error. A daemon refusing us may have answered
    // (and closed) before our hello was written: its answer still counts.
    let _ = write_frame(&mut stream, &Request::Hello(our_hello(role))).await;
    // A daemon that accepts and never answers (stopped, wedged) is waited
    // for as long as a starting one, and no longer.
    let answer = tokio::time::timeout(
        Duration::from_millis(TM.client.daemon_start_wait),
        read_frame::<Response, _>(&mut stream),
    )
    .await
    .map_err(|_| {
        ClientError::NoDaemon(format!(
            "the daemon on {} accepted but did not answer within {}: it is stopped or wedged; `eukhe doctor` names its process",
            paths.socket.display(),
            duration_in_words(TM.client.daemon_start_wait)
        ))
    })?;
    match answer {
        Ok(Response::Hello(daemon)) => Ok(Some(Client {
            stream,
            daemon,
            transport: None,
            remote: false,
        })),
        Ok(Response::Error { message }) => Err(ClientError::Daemon { message }),
        Ok(other) => Err(ClientError::NoDaemon(format!(
            "the daemon answered {other:?} to hello"
        ))),
        Err(FrameError::Closed) | Err(FrameError::Io(_)) => Ok(None),
        Err(source) => Err(ClientError::Wire {
            what: "the daemon's hello",
            source,
        }),
    }
}

/// Connect to a running daemon without starting one (a remote target's
/// proxy starts one there as a background client would).
pub async fn connect_existing() -> Result<Option<Client>, ClientError> {
    if let Target::Remote(host) = &current_target() {
        return remote::connect_remote(host, ClientStart::Relaunch)
            .await
            .map(Some);
    }
    let paths = Paths::from_env()?;
    handshake(&paths, Role::Interactive).await
}

/// Connect to this process's target (`--host`), starting a daemon if
/// none listens. `start` says who starts (`laws::replace::start_kind`):
/// only an interactive start may replace an older daemon, as the
/// replacement law says.
pub async fn connect(start: ClientStart) -> Result<Client, ClientError> {
    connect_to(&current_target(), start).await
}

/// Connect to `target`'s daemon as [`connect`] does: this machine's, or
/// another's through `ssh HOST eukhe proxy` (`client::remote`).
pub async fn connect_to(target: &Target, start: ClientStart) -> Result<Client, ClientError> {
    match target {
        Target::Local => connect_local(start).await,
        Target::Remote(host) => remote::connect_remote(host, start).await,
    }
}

/// Connect to this machine's daemon, starting one if none listens.
async fn connect_local(start: ClientStart) -> Result<Client, ClientError> {
    let paths = Paths::from_env()?;
    let role = start_role(start);
    match handshake(&paths, role).await? {
        Some(client) => use_daemon(&paths, start, client).await,
        None => {
            let daemon = start_daemon(&paths).await?;
            wait_for_daemon(&paths, role, daemon).await
        }
    }
}

/// Connect to this machine's daemon as [`connect`] does, but only to one
/// that listens: `None` when none does (none is started).
pub async fn connect_listening(start: ClientStart) -> Result<Option<Client>, ClientError> {
    let paths = Paths::from_env()?;
    match handshake(&paths, start_role(start)).await? {
        Some(client) => use_daemon(&paths, start, client).await.map(Some),
        None => Ok(None),
    }
}

/// The role a start's hello says.
fn start_role(start: ClientStart) -> Role {
    match start_kind(start) {
        ClientKind::Interactive => Role::Interactive,
        ClientKind::Background => Role::Background,
    }
}

/// Use, replace or refuse the daemon that answered `client`'s hello, as
/// the replacement law says for `start`.
async fn use_daemon(
    paths: &Paths,
    start: ClientStart,
    client: Client,
) -> Result<Client, ClientError> {
    let kind = start_kind(start);
    let role = start_role(start);
    let ours = our_build();
    let theirs = their_hello(&client.daemon);
    let verdict = replace_verdict(&ours, PROTOCOL_VERSION, kind, &theirs)?;
    if let Some(message) = &verdict.message {
        eprintln!("eukhe: {message}");
    }
    match verdict.action {
        ReplaceAction::Use => {
            match lacking_capability(start, &client.daemon.capabilities, &ours, &theirs.build) {
                Some(message) => Err(ClientError::NoDaemon(message)),
                None => Ok(client),
            }
        }
        ReplaceAction::Stop => Err(cannot_use(verdict.message)),
        ReplaceAction::ReplaceIfIdle => replace_if_idle(paths, role, client, &ours, &theirs).await,
    }
}

/// This build, as the replacement law compares builds.
pub(super) fn our_build() -> Build {
    Build {
        version: version().to_string(),
        build_id: build_id().to_string(),
    }
}

/// The daemon's hello, as the replacement law reads it.
pub(super) fn their_hello(daemon: &Hello) -> DaemonHello {
    DaemonHello {
        build: Build {
            version: daemon.version.clone(),
            build_id: daemon.build_id.clone(),
        },
        protocol: daemon.protocol,
        idle_shutdown: daemon.has(Capability::IdleShutdown),
    }
}

/// The law says replace the daemon if it is idle: ask it (on `asking`) to
/// stop if idle; once it has, connect to the next daemon (this build's,
/// or the service manager's); if it has not, keep the busy one when the
/// law allows.
async fn replace_if_idle(
    paths: &Paths,
    role: Role,
    mut asking: Client,
    ours: &Build,
    theirs: &DaemonHello,
) -> Result<Client, ClientError> {
    // The launcher waits for the whole supervisor drain (the
    // quiesce answers, then every worker's stop), and no longer.
    let deadline = tokio::time::Instant::now() + Duration::from_millis(TM.client.launcher_wait);
    let answer = tokio::time::timeout_at(
        deadline,
        asking.ask(Request::Shutdown {
            mode: ShutdownMode::IfIdle,
        }),
    )
    .await
    .map_err(|_| {
        ClientError::NoDaemon(format!(
            "the daemon on {} did not finish its idle shutdown within {}",
            paths.socket.display(),
            duration_in_words(TM.client.launcher_wait)
        ))
    })??;
    match answer {
        Response::Shutdown { stopped: true, .. } => {
            let activated = asking.daemon.has(Capability::SocketActivated);
            drop(asking);
            if activated {
                // The service manager starts the next daemon on
                // the next connection.
                return wait_for_activation(paths, role).await;
            }
            wait_socket_free(paths, deadline).await;
            let daemon = start_daemon(paths).await?;
            wait_for_daemon(paths, role, daemon).await
        }
        _ => keep_busy_daemon(paths, role, ours, theirs).await,
    }
}

/// The daemon did not stop (it is busy): connect to it again when the law
/// keeps it in use, else stop with the law's message.
async fn keep_busy_daemon(
    paths: &Paths,
    role: Role,
    ours: &Build,
    theirs: &DaemonHello,
) -> Result<Client, ClientError> {
    let kept = busy_daemon_kept(ours, PROTOCOL_VERSION, theirs);
    if let Some(message) = &kept.message {
        eprintln!("eukhe: {message}");
    }
    match kept.action {
        ReplaceAction::Stop => Err(ClientError::NoDaemon(kept.message.unwrap_or_default())),
        _ => handshake(paths, role)
            .await?
            .ok_or_else(|| ClientError::NoDaemon("the daemon went away".into())),
    }
}

/// Start `eukhe daemon` detached, logging to the state directory.
async fn start_daemon(paths: &Paths) -> Result<std::process::Child, ClientError> {
    private_dir(&paths.state)?;
    let log = private_append(&paths.state.join("daemon.log"))?;
    let log2 = log
        .try_clone()
        .map_err(ClientError::system("cannot open the daemon's log"))?;
    // This very build, even after an upgrade replaced the file it started
    // from: a client relaunches a daemon of its own build.
    let (exe, arg0) = crate::build_id::own_executable();
    let mut command = std::process::Command::new(exe);
    command
        .arg0(arg0)
        .arg("daemon")
        .env("EUKHE_SOCKET", &paths.socket)
        .env("EUKHE_STATE_DIR", &paths.state)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2);
    // SAFETY: the closure runs between fork and exec and calls only
    // setsid(2), which is async-signal-safe and allocates nothing. The
    // daemon leaves this client's session so it outlives the terminal.
    // `pre_exec` itself is unsafe: std and tokio offer
    // `process_group` (setpgid), not setsid. process-wrap's ProcessSession
    // is a safe wrapper of this same closure, but its child type also
    // changes how the child is waited for and killed (by group).
    unsafe {
        command.pre_exec(|| {
            let _ = nix::unistd::setsid();
            Ok(())
        });
    }
    command
        .spawn()
        .map_err(ClientError::system("cannot start the daemon"))
}

/// Wait for the daemon we started to answer. If it ends first, its own
/// last words say why (another client's daemon may have won the socket,
/// which is fine: then that one answers).
async fn wait_for_daemon(
    paths: &Paths,
    role: Role,
    mut daemon: std::process::Child,
) -> Result<Client, ClientError> {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(TM.client.daemon_start_wait);
    loop {
        if let Some(client) = handshake(paths, role).await? {
            return Ok(client);
        }
        if let Ok(Some(_)) = daemon.try_wait() {
            if let Some(client) = handshake(paths, role).await? {
                return Ok(client);
            }
            let log = std::fs::read_to_string(paths.state.join("daemon.log")).unwrap_or_default();
            let last = log
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("no message");
            return Err(ClientError::NoDaemon(format!(
                "the daemon could not start: {}",
                last.trim_start_matches("eukhe: ")
            )));
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(ClientError::NoDaemon(format!(
                "the daemon did not start within {}; see {}",
                duration_in_words(TM.client.daemon_start_wait),
                paths.state.join("daemon.log").display()
            )));
        }
        // No event says a socket accepts (its file exists before it
        // listens): it is tried again until the start wait's deadline.
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    }
}

/// Connect until a daemon other than the one that just stopped answers
/// (the old one may still accept while it ends).
async fn wait_for_activation(paths: &Paths, role: Role) -> Result<Client, ClientError> {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(TM.client.daemon_start_wait);
    loop {
        if let Some(client) = handshake(paths, role).await? {
            return Ok(client);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(ClientError::NoDaemon(format!(
                "no daemon answered on {} within {} after the old one stopped; `systemctl --user status eukhe.service` says why",
                paths.socket.display(),
                duration_in_words(TM.client.daemon_start_wait)
            )));
        }
        // No event says the service manager's next daemon answers: it is
        // tried again until the start wait's deadline.
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    }
}

/// Wait until no daemon accepts on the socket, or until `deadline` (the
/// launcher's wait, which began when it asked the old daemon to stop).
async fn wait_socket_free(paths: &Paths, deadline: tokio::time::Instant) {
    while UnixStream::connect(&paths.socket).await.is_ok() && tokio::time::Instant::now() < deadline
    {
        // No event says a socket stopped accepting (an activated one keeps
        // its file): it is tried again until the launcher's deadline.
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    }
}

/// Connect as a background client (`events`, `top`) to a daemon that
/// listens now, never starting or replacing one: a client that rides
/// through a daemon's restart waits for the next daemon. None: no daemon
/// listens yet.
pub async fn connect_background_existing() -> Result<Option<Client>, ClientError> {
    if let Target::Remote(host) = &current_target() {
        return remote::connect_remote(host, ClientStart::Relaunch)
            .await
            .map(Some);
    }
    let paths = Paths::from_env()?;
    let Some(client) = handshake(&paths, Role::Background).await? else {
        return Ok(None);
    };
    let ours = our_build();
    let theirs = their_hello(&client.daemon);
    let verdict = replace_verdict(&ours, PROTOCOL_VERSION, ClientKind::Background, &theirs)?;
    match verdict.action {
        // A background client never replaces: `ReplaceIfIdle` is never
        // its verdict, and a daemon it may not replace it uses.
        ReplaceAction::Use | ReplaceAction::ReplaceIfIdle => Ok(Some(client)),
        ReplaceAction::Stop => Err(cannot_use(verdict.message)),
    }
}

/// The law's refusal of the running daemon, in its words.
fn cannot_use(message: Option<String>) -> ClientError {
    ClientError::NoDaemon(message.unwrap_or_else(|| "cannot use the running daemon".into()))
}
