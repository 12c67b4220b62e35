//! Another machine's daemon, reached over SSH: `--host [ssh://][user@]host[:port]`
//! (or `EUKHE_REMOTE`) names it, and the transport is `ssh HOST eukhe proxy`
//! on one end of a socket pair whose other end is the client's stream, so
//! every client path speaks to the remote daemon as to a local one.
//! Authentication and encryption are SSH's; nothing here listens.

use std::ffi::OsString;
use std::fmt;
use std::os::fd::OwnedFd;
use std::process::Stdio;
use std::sync::{Arc, Mutex, OnceLock};

use tokio::io::AsyncReadExt as _;
use tokio::net::UnixStream;

use super::connect::{our_build, our_hello, their_hello, Client};
use super::error::ClientError;
use crate::laws::replace::{
    lacking_capability, remote_verdict, start_kind, ClientKind, ClientStart, ReplaceAction,
};
use crate::laws::timing::{duration_in_words, REMOTE_HELLO_MS, SSH_EXIT_MS};
use crate::protocol::hello::Role;
use crate::protocol::message::{Request, Response};
use crate::protocol::Hello;
use crate::protocol::{read_frame, write_frame, PROTOCOL_VERSION};

/// Names the remote host every client command of this process goes to
/// (`--host` wins). Not `EUKHE_HOST`: that one picks the backend
/// (process or systemd) of the machine it is read on.
pub const REMOTE_VAR: &str = "EUKHE_REMOTE";
/// The ssh command, split on whitespace as `GIT_SSH_COMMAND` is (`ssh -F config`).
pub const SSH_VAR: &str = "EUKHE_SSH";
/// The remote program's name (default `eukhe`).
pub const REMOTE_COMMAND_VAR: &str = "EUKHE_REMOTE_COMMAND";

/// How much of ssh's standard error is kept for the failure line.
const STDERR_KEPT: usize = 8 * 1024;

/// A remote host as the user typed it: `[ssh://][user@]host[:port]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteHost {
    /// The login name (`-l`), when given.
    pub user: Option<String>,
    /// The host name or address (IPv6 without its brackets).
    pub host: String,
    /// The port (`-p`), when given.
    pub port: Option<u16>,
}

/// A `--host` value that names no host.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("--host {given:?} is not [ssh://][user@]host[:port]: {why}")]
pub struct NotAHost {
    /// What was given.
    pub given: String,
    /// What is wrong with it.
    pub why: &'static str,
}

impl RemoteHost {
    /// Read `[ssh://][user@]host[:port]`; an IPv6 address goes in
    /// brackets (`[::1]:2222`).
    pub fn parse(given: &str) -> Result<RemoteHost, NotAHost> {
        let refuse = |why| NotAHost {
            given: given.to_string(),
            why,
        };
        let rest = given.strip_prefix("ssh://").unwrap_or(given);
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        let (user, rest) = match rest.rsplit_once('@') {
            Some(("", _)) => return Err(refuse("the user is empty")),
            Some((user, rest)) => (Some(user.to_string()), rest),
            None => (None, rest),
        };
        let (host, port) = if let Some(bracketed) = rest.strip_prefix('[') {
            let (host, after) = bracketed
                .split_once(']')
                .ok_or_else(|| refuse("an IPv6 address's bracket is not closed"))?;
            match after {
                "" => (host, None),
                _ => match after.strip_prefix(':') {
                    Some(port) => (host, Some(port)),
                    None => return Err(refuse("only :port may follow ]")),
                },
            }
        } else {
            match rest.split_once(':') {
                Some((_, port)) if port.contains(':') => {
                    return Err(refuse("an IPv6 address goes in brackets: [::1]:22"))
                }
                Some((host, port)) => (host, Some(port)),
                None => (rest, None),
            }
        };
        if host.is_empty() {
            return Err(refuse("the host is empty"));
        }
        if host.starts_with('-') || host.contains(char::is_whitespace) || host.contains('/') {
            return Err(refuse(
                "a host name has no spaces or slashes and no leading -",
            ));
        }
        let port = match port {
            None => None,
            Some(port) => Some(
                port.parse::<u16>()
                    .ok()
                    .filter(|p| *p != 0)
                    .ok_or_else(|| refuse("the port is not a number from 1 to 65535"))?,
            ),
        };
        Ok(RemoteHost {
            user,
            host: host.to_string(),
            port,
        })
    }
}

impl fmt::Display for RemoteHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(user) = &self.user {
            write!(f, "{user}@")?;
        }
        let bracket = self.host.contains(':');
        match (bracket, self.port) {
            (true, Some(port)) => write!(f, "[{}]:{port}", self.host),
            (true, None) => write!(f, "[{}]", self.host),
            (false, Some(port)) => write!(f, "{}:{port}", self.host),
            (false, None) => write!(f, "{}", self.host),
        }
    }
}

/// Where a client command's daemon is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// This machine's daemon, on its socket.
    Local,
    /// Another machine's, through `ssh HOST eukhe proxy`.
    Remote(RemoteHost),
}

static TARGET: OnceLock<Target> = OnceLock::new();

/// Set this process's target once (`main`, from `--host` or
/// `EUKHE_REMOTE`); a later call changes nothing.
pub fn set_process_target(target: Target) {
    let _ = TARGET.set(target);
}

/// This process's target: local unless `set_process_target` said otherwise.
pub fn process_target() -> &'static Target {
    TARGET.get_or_init(|| Target::Local)
}

/// The target `--host` (else `EUKHE_REMOTE`, when set and not empty) names.
pub fn target_from(host_option: Option<&str>) -> Result<Target, NotAHost> {
    let from_env = std::env::var(REMOTE_VAR).ok().filter(|v| !v.is_empty());
    match host_option.map(str::to_string).or(from_env) {
        Some(given) => Ok(Target::Remote(RemoteHost::parse(&given)?)),
        None => Ok(Target::Local),
    }
}

/// The command line that reaches `host`'s daemon: `ssh` (or `ssh_command`'s
/// words), `-T`, the port and user, the host, then `--` and the remote
/// command with `proxy` (`--background` for a background client).
pub fn ssh_argv(
    ssh_command: &str,
    remote_command: &str,
    host: &RemoteHost,
    background: bool,
) -> Vec<OsString> {
    let mut argv: Vec<OsString> = ssh_command.split_whitespace().map(OsString::from).collect();
    if argv.is_empty() {
        argv.push("ssh".into());
    }
    argv.push("-T".into());
    if let Some(port) = host.port {
        argv.push("-p".into());
        argv.push(port.to_string().into());
    }
    if let Some(user) = &host.user {
        argv.push("-l".into());
        argv.push(user.into());
    }
    argv.push(host.host.clone().into());
    argv.push("--".into());
    argv.extend(remote_command.split_whitespace().map(OsString::from));
    argv.push("proxy".into());
    if background {
        argv.push("--background".into());
    }
    argv
}

/// An `ssh` running the remote proxy: the client's stream is the other end
/// of its standard input and output. Dropping it leaves the child to
/// tokio, which reaps it once ssh sees the stream close and ends.
pub struct Transport {
    child: tokio::process::Child,
    stderr: Arc<Mutex<Vec<u8>>>,
    /// Reads ssh's standard error into `stderr` until it closes.
    drain: Option<tokio::task::JoinHandle<()>>,
    host: RemoteHost,
    /// The remote daemon said hello through it: from then on ssh ends
    /// when the stream closes.
    heard: bool,
}

impl Drop for Transport {
    /// An ssh given up on before the daemon's hello (a deadline missed, a
    /// host that accepts and never speaks) may never read the closed
    /// stream: it is killed rather than left behind.
    fn drop(&mut self) {
        if !self.heard {
            let _ = self.child.start_kill();
        }
    }
}

impl Transport {
    /// The ssh child's pid (tests kill it to drop the connection).
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Why the transport ended before the daemon's hello: ssh's exit and
    /// its last words, as one line. Waits for ssh's end at most `within_ms`.
    pub async fn failure(&mut self, within_ms: u64) -> ClientError {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_millis(within_ms);
        let code = match tokio::time::timeout_at(deadline, self.child.wait()).await {
            Ok(Ok(status)) => status.code(),
            _ => None,
        };
        // Its last words may still be in the pipe when it has ended.
        if let Some(drain) = self.drain.take() {
            let _ = tokio::time::timeout_at(deadline, drain).await;
        }
        let stderr = self.stderr.lock().map(|s| s.clone()).unwrap_or_default();
        ClientError::Remote(transport_failure(
            &self.host,
            code,
            &String::from_utf8_lossy(&stderr),
        ))
    }
}

/// The ssh command (`EUKHE_SSH`, else `ssh`).
pub(super) fn ssh_command() -> String {
    std::env::var(SSH_VAR).unwrap_or_else(|_| "ssh".into())
}

/// The eukhe to run on `host`: hosts.toml's command for this host, else
/// the variable's, else eukhe.
pub(super) fn remote_command(host: &RemoteHost) -> String {
    super::hosts::remote_command(host)
        .or_else(|| std::env::var(REMOTE_COMMAND_VAR).ok())
        .unwrap_or_else(|| "eukhe".into())
}

/// Start `ssh HOST eukhe proxy` on a socket pair: the client's end, and
/// the transport whose failure says why it ended.
pub fn spawn(host: &RemoteHost, background: bool) -> Result<(UnixStream, Transport), ClientError> {
    let argv = ssh_argv(&ssh_command(), &remote_command(host), host, background);
    let (ours, theirs) = std::os::unix::net::UnixStream::pair()
        .map_err(ClientError::system("cannot make a socket pair for ssh"))?;
    let theirs_out: OwnedFd = theirs
        .try_clone()
        .map_err(ClientError::system("cannot make a socket pair for ssh"))?
        .into();
    let mut command = tokio::process::Command::new(&argv[0]);
    command
        .args(&argv[1..])
        .stdin(Stdio::from(OwnedFd::from(theirs)))
        .stdout(Stdio::from(theirs_out))
        .stderr(Stdio::piped());
    let spawned = command.spawn();
    // The command holds our copies of ssh's end: only ssh may keep it
    // open, so its end is the stream's end.
    drop(command);
    let mut child = spawned.map_err(ClientError::system(format!(
        "cannot run {:?} to reach {host}",
        argv[0]
    )))?;
    let stderr = Arc::new(Mutex::new(Vec::new()));
    let drain = child.stderr.take().map(|mut pipe| {
        let kept = stderr.clone();
        tokio::spawn(async move {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = pipe.read(&mut buf).await {
                if let Ok(mut kept) = kept.lock() {
                    kept.extend_from_slice(&buf[..n]);
                    let over = kept.len().saturating_sub(STDERR_KEPT);
                    kept.drain(..over);
                }
            }
        })
    });
    ours.set_nonblocking(true)
        .map_err(ClientError::system("cannot make a socket pair for ssh"))?;
    let stream = UnixStream::from_std(ours)
        .map_err(ClientError::system("cannot make a socket pair for ssh"))?;
    let transport = Transport {
        child,
        stderr,
        drain,
        host: host.clone(),
        heard: false,
    };
    Ok((stream, transport))
}

/// Reach `host`'s daemon as `start`: a background start through the
/// host's forward when one answers (`client::forward`), else ssh to its
/// proxy (`--background` for a background start, so the proxy never
/// replaces a daemon there), which also starts the forward for the next
/// commands. Either way the client says hello itself and applies the
/// replacement law for a remote daemon (`laws::replace::remote_verdict`).
pub async fn connect_remote(host: &RemoteHost, start: ClientStart) -> Result<Client, ClientError> {
    // An interactive start keeps the proxy path: the remote's own proxy
    // may replace an idle older daemon there, which a forward cannot.
    if start_kind(start) == ClientKind::Background {
        if let Some(client) = super::forward::connect(host, start).await? {
            return Ok(client);
        }
    }
    let client = connect_over_ssh(host, start).await?;
    super::forward::start_in_background(host);
    Ok(client)
}

/// Reach `host`'s daemon through `ssh HOST eukhe proxy`.
async fn connect_over_ssh(host: &RemoteHost, start: ClientStart) -> Result<Client, ClientError> {
    let kind = start_kind(start);
    let role = match kind {
        ClientKind::Interactive => Role::Interactive,
        ClientKind::Background => Role::Background,
    };
    let (mut stream, mut transport) = spawn(host, kind == ClientKind::Background)?;
    // A transport that ended before the hello was written tells why below.
    let _ = write_frame(&mut stream, &Request::Hello(our_hello(role))).await;
    let answer = tokio::time::timeout(
        std::time::Duration::from_millis(REMOTE_HELLO_MS),
        read_frame::<Response, _>(&mut stream),
    )
    .await
    .map_err(|_| {
        ClientError::Remote(format!(
            "the daemon on {host} did not answer through ssh within {}: try `ssh {host} eukhe doctor`",
            duration_in_words(REMOTE_HELLO_MS)
        ))
    })?;
    let daemon = match answer {
        Ok(Response::Hello(daemon)) => {
            transport.heard = true;
            daemon
        }
        Ok(Response::Error { message }) => return Err(ClientError::Daemon { message }),
        Ok(other) => {
            return Err(ClientError::Remote(format!(
                "the daemon on {host} answered {other:?} to hello"
            )))
        }
        Err(_) => return Err(transport.failure(SSH_EXIT_MS).await),
    };
    use_remote_daemon(host, start, &daemon)?;
    Ok(Client::remote(stream, daemon, Some(transport)))
}

/// The replacement law for the remote daemon that said `daemon`: use it
/// (saying a version difference in one line), or why not.
pub(super) fn use_remote_daemon(
    host: &RemoteHost,
    start: ClientStart,
    daemon: &Hello,
) -> Result<(), ClientError> {
    let ours = our_build();
    let theirs = their_hello(daemon);
    let verdict = remote_verdict(&ours, PROTOCOL_VERSION, &theirs, &host.to_string())?;
    if let Some(message) = &verdict.message {
        eprintln!("eukhe: {message}");
    }
    match verdict.action {
        ReplaceAction::Use => {
            match lacking_capability(start, &daemon.capabilities, &ours, &theirs.build) {
                Some(message) => Err(ClientError::Remote(format!("on {host}: {message}"))),
                None => Ok(()),
            }
        }
        ReplaceAction::Stop | ReplaceAction::ReplaceIfIdle => {
            Err(ClientError::Remote(verdict.message.unwrap_or_else(|| {
                format!("cannot use the daemon on {host}")
            })))
        }
    }
}

/// The one line for a transport that ended before the remote daemon
/// said hello: ssh's exit status (`None`: not known) and standard error.
pub fn transport_failure(host: &RemoteHost, code: Option<i32>, stderr: &str) -> String {
    // The remote eukhe's own line says most; else ssh's last.
    let lines = || stderr.lines().map(str::trim).filter(|l| !l.is_empty());
    let last = lines()
        .rfind(|l| l.starts_with("eukhe: "))
        .or_else(|| lines().next_back())
        .map(|l| l.trim_start_matches("eukhe: ").to_string());
    let has = |words: &str| stderr.contains(words);
    if code == Some(127) || has("command not found") || has("eukhe: not found") {
        return format!(
            "eukhe is not installed on {host} (or not on its PATH for ssh commands): install the eukhe package there (Debian: apt install eukhe; Fedora: dnf install eukhe)"
        );
    }
    if has("unrecognized subcommand 'proxy'") || has("unrecognized subcommand \"proxy\"") {
        return format!(
            "the eukhe on {host} is too old to serve other machines (it has no `eukhe proxy`): update eukhe there"
        );
    }
    if has("Permission denied (") {
        return format!(
            "{host} refused the SSH login ({}): check `ssh {host}` works without a password",
            last.unwrap_or_default()
        );
    }
    match (code, last) {
        (Some(255), Some(last)) => format!("cannot reach {host} over SSH: {last}"),
        (Some(255), None) => format!("cannot reach {host} over SSH (ssh exited 255)"),
        (_, Some(last)) => format!("the connection to {host} ended: {last}"),
        (Some(code), None) => format!(
            "the connection to {host} ended before its daemon answered (the remote command exited {code})"
        ),
        (None, None) => {
            format!("the connection to {host} ended before its daemon answered")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(user: Option<&str>, host: &str, port: Option<u16>) -> RemoteHost {
        RemoteHost {
            user: user.map(str::to_string),
            host: host.to_string(),
            port,
        }
    }

    #[test]
    fn every_form_of_a_host_parses_and_shows_as_typed() {
        let cases = [
            ("box", host(None, "box", None), "box"),
            ("ann@box", host(Some("ann"), "box", None), "ann@box"),
            ("box:2222", host(None, "box", Some(2222)), "box:2222"),
            (
                "ssh://ann@box.example:22",
                host(Some("ann"), "box.example", Some(22)),
                "ann@box.example:22",
            ),
            ("[::1]", host(None, "::1", None), "[::1]"),
            (
                "ann@[::1]:2200",
                host(Some("ann"), "::1", Some(2200)),
                "ann@[::1]:2200",
            ),
            ("ssh://box/", host(None, "box", None), "box"),
        ];
        for (given, want, shown) in cases {
            let parsed = RemoteHost::parse(given).unwrap();
            assert_eq!(parsed, want, "{given}");
            assert_eq!(parsed.to_string(), shown, "{given}");
            assert_eq!(RemoteHost::parse(shown).unwrap(), want, "{shown}");
        }
    }

    #[test]
    fn a_value_that_names_no_host_is_refused_saying_why() {
        for given in [
            "",
            "@box",
            "box:",
            "box:0",
            "box:99999",
            "::1",
            "[::1",
            "[::1]x",
            "-oProxyCommand=x",
            "a b",
        ] {
            let refused = RemoteHost::parse(given).unwrap_err();
            assert!(
                refused.to_string().contains("[ssh://][user@]host[:port]"),
                "{given}"
            );
        }
    }

    #[test]
    fn the_ssh_command_line_carries_port_user_and_background() {
        let argv = ssh_argv(
            "ssh -F /t/config",
            "eukhe",
            &host(Some("ann"), "box", Some(2222)),
            true,
        );
        let words: Vec<_> = argv.iter().map(|w| w.to_str().unwrap()).collect();
        assert_eq!(
            words,
            [
                "ssh",
                "-F",
                "/t/config",
                "-T",
                "-p",
                "2222",
                "-l",
                "ann",
                "box",
                "--",
                "eukhe",
                "proxy",
                "--background"
            ]
        );
        let argv = ssh_argv("", "/opt/eukhe", &host(None, "box", None), false);
        let words: Vec<_> = argv.iter().map(|w| w.to_str().unwrap()).collect();
        assert_eq!(words, ["ssh", "-T", "box", "--", "/opt/eukhe", "proxy"]);
    }

    #[test]
    fn each_transport_failure_is_its_own_line() {
        let h = host(None, "box", None);
        let missing = transport_failure(&h, Some(127), "bash: line 1: eukhe: command not found\n");
        assert!(
            missing.contains("eukhe is not installed on box"),
            "{missing}"
        );
        assert!(missing.contains("apt install eukhe"), "{missing}");
        let old = transport_failure(
            &h,
            Some(125),
            "eukhe: error: unrecognized subcommand 'proxy'\n",
        );
        assert!(old.contains("too old"), "{old}");
        let denied = transport_failure(&h, Some(255), "root@box: Permission denied (publickey).\n");
        assert!(denied.contains("box refused the SSH login"), "{denied}");
        let unreachable = transport_failure(
            &h,
            Some(255),
            "ssh: connect to host box port 22: Connection refused\n",
        );
        assert_eq!(
            unreachable,
            "cannot reach box over SSH: ssh: connect to host box port 22: Connection refused"
        );
        let refused = transport_failure(&h, Some(125), "eukhe: the socket /s belongs to uid 7\n");
        assert_eq!(
            refused,
            "the connection to box ended: the socket /s belongs to uid 7"
        );
        for line in [missing, old, denied, unreachable, refused] {
            assert!(!line.contains('\n'), "{line}");
        }
    }
}
