//! A host's forward: a Unix socket on this machine that OpenSSH carries
//! to the remote daemon's socket (`ssh -tt -L LOCAL:REMOTE`), so a remote
//! command costs one local connection instead of an ssh login, a login
//! shell and an `eukhe proxy` there. The client says the same hello
//! through it as through the proxy, and applies the same replacement law.
//!
//! The socket lives in `forward/` beside the local daemon's socket (a
//! 0700 directory), one per host key: the address, the ssh command and
//! the remote command, hashed. A keeper (`forward_keeper`, run as the
//! hidden `eukhe proxy --keep-forward HOST`) keeps it. A forward that
//! does not answer is never an error: the client takes the proxy path,
//! which starts the forward for the next commands, at most once per idle
//! period (`FORWARD_IDLE_MS`).

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, SystemTime};

use nix::fcntl::{Flock, FlockArg};
use tokio::net::UnixStream;

use super::connect::{our_hello, Client};
use super::error::ClientError;
use super::remote::{remote_command, ssh_command, use_remote_daemon, RemoteHost};
use crate::laws::replace::ClientStart;
use crate::laws::timing::{FORWARD_HELLO_MS, FORWARD_IDLE_MS};
use crate::paths::{Paths, SOCKET_PATH_MAX};
use crate::protocol::hello::Role;
use crate::protocol::message::{Request, Response};
use crate::protocol::{read_frame, write_frame};

/// `0` turns the forward off: every remote command takes the proxy path.
pub const FORWARD_VAR: &str = "EUKHE_FORWARD";
/// Tests only: the idle period in milliseconds instead of `FORWARD_IDLE_MS`.
pub const FORWARD_IDLE_VAR: &str = "EUKHE_FORWARD_IDLE_MS";

/// The files of one host's forward, all in one private directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForwardFiles {
    /// The directory (0700) beside the local daemon's socket.
    pub dir: PathBuf,
    /// The socket clients connect to (the keeper's).
    pub socket: PathBuf,
    /// The socket ssh listens on and carries to the remote daemon's.
    pub ssh_socket: PathBuf,
    /// Held (flock) by the one keeper of this host; holds its pid.
    pub lock: PathBuf,
    /// Made when a client starts a keeper: younger than the idle period,
    /// no other start is tried (a server that forbids forwarding is
    /// asked once per period). The keeper holding the lock writes its pid
    /// in it; it removes the file when it ends after having served, and
    /// empties it when it could not set the forward up. A pid no process
    /// has is a keeper killed outright: its start no longer counts.
    pub tried: PathBuf,
    /// The keeper's and its ssh's messages.
    pub log: PathBuf,
}

/// The forward's files for `host` reached by `ssh` running `remote`,
/// beside `daemon_socket`; none when its sockets would not fit a Unix
/// socket path (then there is no forward, only the proxy path).
pub fn files_for(
    daemon_socket: &Path,
    ssh: &str,
    remote: &str,
    host: &RemoteHost,
) -> Option<ForwardFiles> {
    let dir = daemon_socket.parent()?.join("forward");
    let key = format!("{:016x}", fnv1a(&format!("{host}\n{ssh}\n{remote}")));
    let file = |suffix: &str| dir.join(format!("{key}.{suffix}"));
    let files = ForwardFiles {
        socket: file("sock"),
        ssh_socket: file("ssh.sock"),
        lock: file("lock"),
        tried: file("tried"),
        log: file("log"),
        dir,
    };
    let fits = |p: &Path| p.as_os_str().len() <= SOCKET_PATH_MAX;
    (fits(&files.socket) && fits(&files.ssh_socket)).then_some(files)
}

/// This process's forward files for `host`, when forwards are on.
pub fn files(host: &RemoteHost) -> Option<ForwardFiles> {
    if std::env::var(FORWARD_VAR).is_ok_and(|v| v == "0") {
        return None;
    }
    let paths = Paths::from_env().ok()?;
    files_for(&paths.socket, &ssh_command(), &remote_command(host), host)
}

/// The idle period: `FORWARD_IDLE_MS`, or a test's shorter one.
pub fn idle_ms() -> u64 {
    std::env::var(FORWARD_IDLE_VAR)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(FORWARD_IDLE_MS)
}

/// FNV-1a, 64 bits: a stable name for a host key (not a secret: the
/// directory is private).
fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Whether a client starts a keeper, given how long ago the last start
/// was tried (none: never, or the last keeper served and ended) and
/// whether that start's keeper was killed (it left its pid, which no
/// process has): nothing else will start the forward before the period
/// ends.
pub fn start_due(tried_ago_ms: Option<u64>, keeper_killed: bool, idle_ms: u64) -> bool {
    keeper_killed || tried_ago_ms.is_none_or(|ago| ago >= idle_ms)
}

/// Whether the keeper of the last start was killed: it wrote its pid in
/// `.tried` once it held the host's lock, and nothing holds that lock now
/// (a process's locks go with it, however it ends). An empty `.tried` is
/// a start under way or one that failed, which counts.
fn keeper_killed(files: &ForwardFiles) -> bool {
    let wrote_pid =
        std::fs::read_to_string(&files.tried).is_ok_and(|text| text.trim().parse::<u32>().is_ok());
    // Held for a moment only: a keeper taking it meanwhile tries again.
    let lock_free = || {
        std::fs::File::open(&files.lock)
            .is_ok_and(|file| Flock::lock(file, FlockArg::LockExclusiveNonblock).is_ok())
    };
    wrote_pid && lock_free()
}

/// Reach `host`'s daemon through its forward as `start` (a background
/// start). None: no forward answered, take the proxy path. An error is
/// the remote daemon's own answer (the replacement law refusing it).
pub async fn connect(host: &RemoteHost, start: ClientStart) -> Result<Option<Client>, ClientError> {
    let Some(files) = files(host) else {
        return Ok(None);
    };
    let Ok(mut stream) = UnixStream::connect(&files.socket).await else {
        return Ok(None);
    };
    let _ = write_frame(&mut stream, &Request::Hello(our_hello(Role::Background))).await;
    let answer = tokio::time::timeout(
        Duration::from_millis(FORWARD_HELLO_MS),
        read_frame::<Response, _>(&mut stream),
    )
    .await;
    let daemon = match answer {
        Ok(Ok(Response::Hello(daemon))) => daemon,
        Ok(Ok(Response::Error { message })) => return Err(ClientError::Daemon { message }),
        // Closed (ssh gone, the remote daemon gone, forwarding refused),
        // silent or strange: the proxy path knows what to do or to say.
        _ => return Ok(None),
    };
    use_remote_daemon(host, start, &daemon)?;
    Ok(Some(Client::remote(stream, daemon, None)))
}

/// After a command took the proxy path: start the keeper
/// detached, unless one was tried within the idle period. Nothing here
/// reaches the user: the forward is a shortcut, never a requirement.
pub fn start_in_background(host: &RemoteHost) {
    let Some(files) = files(host) else {
        return;
    };
    let tried_ago = std::fs::metadata(&files.tried)
        .and_then(|m| m.modified())
        .ok()
        .map(|at| {
            SystemTime::now()
                .duration_since(at)
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        });
    if !start_due(tried_ago, keeper_killed(&files), idle_ms()) {
        return;
    }
    if crate::session::store::private_dir(&files.dir).is_err()
        || std::fs::write(&files.tried, b"").is_err()
    {
        return;
    }
    let (exe, arg0) = crate::build_id::own_executable();
    let mut command = std::process::Command::new(exe);
    command
        .arg0(arg0)
        .args(["proxy", "--keep-forward"])
        .arg(host.to_string())
        // The keeper runs the same remote command as this client did.
        .env(super::remote::REMOTE_COMMAND_VAR, remote_command(host))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: the closure runs between fork and exec and calls only
    // setsid(2), which is async-signal-safe and allocates nothing. The
    // keeper leaves this client's session so no terminal hangup ends it.
    unsafe {
        command.pre_exec(|| {
            let _ = nix::unistd::setsid();
            Ok(())
        });
    }
    let mut command = tokio::process::Command::from(command);
    // Dropped, the child is reaped by tokio once it ends.
    let _ = command.spawn();
}

/// The way a client reached `host`'s daemon, for `eukhe --host H doctor`:
/// `over_ssh`, its own `ssh ... eukhe proxy`; else the forward.
pub fn route(host: &RemoteHost, over_ssh: bool) -> String {
    match (over_ssh, files(host)) {
        (false, Some(files)) => format!(
            "through the forward {} (one ssh kept for {host}; EUKHE_FORWARD=0 turns it off)",
            files.socket.display()
        ),
        (false, None) => format!("through the forward to {host}"),
        (true, None) => format!("over `ssh {host} eukhe proxy` (the forward is off)"),
        (true, Some(files)) => format!(
            "over `ssh {host} eukhe proxy`: no forward answered (it is started for the next commands; its log: {})",
            files.log.display()
        ),
    }
}

/// `eukhe proxy --socket-path`: make sure this user's daemon answers (as
/// the background proxy does), then print its socket's path for a
/// client's forward.
pub fn print_socket_path() -> std::process::ExitCode {
    let found = crate::runtime::block_on_client("proxy", async {
        let paths = Paths::from_env()?;
        if std::os::unix::net::UnixStream::connect(&paths.socket).is_err() {
            drop(
                super::connect::connect_to(&super::remote::Target::Local, ClientStart::Relaunch)
                    .await?,
            );
        }
        super::proxy::refuse_foreign_socket(&paths.socket)?;
        Ok::<_, ClientError>(paths.socket)
    });
    match found {
        Ok(socket) => {
            println!("{}", socket.display());
            std::process::ExitCode::SUCCESS
        }
        Err(e) => super::cli::finish(Err(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(text: &str) -> RemoteHost {
        RemoteHost::parse(text).unwrap()
    }

    #[test]
    fn each_host_key_has_its_own_files_beside_the_daemons_socket() {
        let socket = Path::new("/run/user/7/eukhe/eukhe.sock");
        let a = files_for(socket, "ssh", "eukhe", &host("box")).unwrap();
        assert_eq!(a.dir, Path::new("/run/user/7/eukhe/forward"));
        assert!(a.socket.starts_with(&a.dir) && a.ssh_socket.starts_with(&a.dir));
        assert_eq!(
            files_for(socket, "ssh", "eukhe", &host("box")),
            Some(a.clone())
        );
        for other in [
            files_for(socket, "ssh", "eukhe", &host("ann@box")),
            files_for(socket, "ssh", "eukhe", &host("box:2222")),
            files_for(socket, "ssh -F c", "eukhe", &host("box")),
            files_for(socket, "ssh", "/opt/eukhe", &host("box")),
        ] {
            assert_ne!(other.unwrap().socket, a.socket);
        }
    }

    #[test]
    fn a_socket_that_would_not_fit_means_no_forward() {
        let deep = PathBuf::from(format!("/{}/eukhe.sock", "d".repeat(90)));
        assert_eq!(files_for(&deep, "ssh", "eukhe", &host("box")), None);
    }

    #[test]
    fn a_start_is_tried_once_per_idle_period() {
        assert!(start_due(None, false, 1_000));
        assert!(!start_due(Some(0), false, 1_000));
        assert!(!start_due(Some(999), false, 1_000));
        assert!(start_due(Some(1_000), false, 1_000));
    }

    #[test]
    fn a_killed_keepers_start_does_not_count() {
        assert!(start_due(Some(0), true, 1_000));
        assert!(start_due(Some(999), true, 1_000));
    }

    #[test]
    fn a_keeper_that_wrote_its_pid_and_holds_no_lock_was_killed() {
        let dir = std::env::temp_dir().join(format!("eukhe-forward-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("eukhe.sock");
        let files = files_for(&socket, "ssh", "eukhe", &host("box")).unwrap();
        std::fs::create_dir_all(&files.dir).unwrap();
        std::fs::write(&files.lock, "").unwrap();
        // A start under way (or one that failed) counts.
        std::fs::write(&files.tried, "").unwrap();
        assert!(!keeper_killed(&files));
        std::fs::write(&files.tried, "4242\n").unwrap();
        let held = Flock::lock(
            std::fs::File::open(&files.lock).unwrap(),
            FlockArg::LockExclusiveNonblock,
        )
        .unwrap();
        assert!(!keeper_killed(&files), "its keeper holds the lock");
        drop(held);
        assert!(keeper_killed(&files));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
