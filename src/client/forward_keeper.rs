//! `eukhe proxy --keep-forward HOST` (hidden): keeps one host's forward
//! (`forward`), on the client's machine.
//! It asks the remote for its daemon's socket (`eukhe proxy
//! --socket-path`), runs `ssh -tt -L PRIVATE:REMOTE HOST` (its own
//! connection, not a shared master's, so its lifetime is the forward's),
//! checks a hello gets through, then holds the public socket itself and
//! splices each connection to ssh's. Holding it, it knows when none is
//! open: it ends after the idle period without one, when ssh ends (a host
//! unreachable past ssh's alive checks), or on SIGTERM, removing its
//! sockets. One keeper per host: the lock file's flock.

use std::fs::File;
use std::io::Write as _;
use std::path::Path;
use std::process::{ExitCode, Stdio};
use std::time::Duration;

use nix::fcntl::{Flock, FlockArg};
use tokio::net::{UnixListener, UnixStream};
use tokio::process::Child;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::connect::our_hello;
use super::error::ClientError;
use super::forward::{files, idle_ms, ForwardFiles};
use super::remote::{remote_command, ssh_argv, ssh_command, RemoteHost};
use crate::laws::timing::{
    FORWARD_ALIVE_COUNT, FORWARD_ALIVE_INTERVAL_MS, FORWARD_HELLO_MS, POLL_MS, REMOTE_HELLO_MS,
    SSH_EXIT_MS, SSH_LOGIN_MS,
};
use crate::protocol::hello::Role;
use crate::protocol::message::{Request, Response};
use crate::protocol::{read_frame, write_frame};

/// What the forward's terminal session runs on the remote: nothing but
/// a wait, ended by the terminal's hangup when the connection ends.
const REMOTE_HOLD: &str = "exec sleep 2147483647";

/// Why a keeper ends (written to its log).
#[derive(Debug, PartialEq, Eq)]
enum End {
    /// No connection for the idle period.
    Idle,
    /// ssh ended, or its socket stopped accepting.
    SshGone,
    /// SIGTERM, SIGINT or SIGHUP.
    Signalled,
}

/// What a splice tells the keeper.
enum Event {
    /// A connection through the forward closed.
    Closed,
    /// ssh's socket refused a connection: ssh is gone.
    SshGone,
}

/// Run the keeper for `host` (as `Display` shows it). Its failures go to
/// its log, never to a user: the exit status is for tests and people.
pub fn main(host: &str) -> ExitCode {
    let Ok(host) = RemoteHost::parse(host) else {
        return ExitCode::FAILURE;
    };
    let Some(files) = files(&host) else {
        return ExitCode::FAILURE;
    };
    if crate::session::store::private_dir(&files.dir).is_err() {
        return ExitCode::FAILURE;
    }
    let Ok(lock) = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&files.lock)
    else {
        return ExitCode::FAILURE;
    };
    // Another keeper serves this host: nothing to do.
    let Some(mut lock) = take_lock(lock) else {
        return ExitCode::SUCCESS;
    };
    let _ = lock.set_len(0);
    let _ = writeln!(lock, "{}", std::process::id());
    // Its pid in the start's mark: killed outright, it leaves a pid no
    // process has, which the next client does not wait out.
    let _ = std::fs::write(&files.tried, format!("{}\n", std::process::id()));
    // Appended: each start's outcome stays readable (one per idle period).
    let Ok(mut log) = crate::session::store::private_append(&files.log) else {
        return ExitCode::FAILURE;
    };
    let kept = crate::runtime::block_on_client("forward", keep(&host, &files, &log));
    let line = match &kept {
        Ok(end) => format!("forward to {host} ended: {end:?}"),
        Err(e) => format!("no forward to {host}: {e}"),
    };
    let _ = writeln!(log, "{line}");
    match kept {
        Ok(_) => ExitCode::SUCCESS,
        Err(_) => {
            // No forward: no other start is tried this period.
            let _ = std::fs::write(&files.tried, b"");
            ExitCode::FAILURE
        }
    }
}

/// The host's lock, or none when another keeper holds it. A keeper that
/// is ending (its ssh killed, the client that started this one already
/// served by the proxy) lets go within moments: it is waited for that long.
fn take_lock(mut file: File) -> Option<Flock<File>> {
    let deadline = std::time::Instant::now() + Duration::from_millis(SSH_EXIT_MS);
    loop {
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => return Some(lock),
            Err((back, _)) if std::time::Instant::now() < deadline => file = back,
            Err(_) => return None,
        }
        // No event says a flock was let go short of a blocking wait
        // without a deadline: it is tried again until the deadline.
        std::thread::sleep(Duration::from_millis(POLL_MS));
    }
}

/// Set the forward up, serve it until it ends, and clean up after it.
async fn keep(host: &RemoteHost, files: &ForwardFiles, log: &File) -> Result<End, ClientError> {
    let remote = remote_socket(host, log).await?;
    let _ = std::fs::remove_file(&files.ssh_socket);
    let mut ssh = start_ssh(host, files, &remote, log)?;
    let served = match ssh_ready(&mut ssh, &files.ssh_socket).await {
        Ok(()) => serve(files, &mut ssh).await,
        Err(e) => Err(e),
    };
    let _ = ssh.start_kill();
    let _ = ssh.wait().await;
    let _ = std::fs::remove_file(&files.ssh_socket);
    if served.is_ok() {
        // It served: the next command that finds no forward starts one.
        let _ = std::fs::remove_file(&files.tried);
    }
    served
}

/// The remote daemon's socket, from `eukhe proxy --socket-path` there
/// (which starts that daemon if none answers).
async fn remote_socket(host: &RemoteHost, log: &File) -> Result<String, ClientError> {
    let mut argv = ssh_argv(&ssh_command(), &remote_command(host), host, false);
    argv.push("--socket-path".into());
    let stderr = log
        .try_clone()
        .map_err(ClientError::system("cannot copy the forward's log"))?;
    let child = tokio::process::Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .kill_on_drop(true)
        .spawn()
        .map_err(ClientError::system(format!("cannot run {:?}", argv[0])))?;
    let out = tokio::time::timeout(
        Duration::from_millis(REMOTE_HELLO_MS),
        child.wait_with_output(),
    )
    .await
    .map_err(|_| ClientError::Remote(format!("{host} did not say its socket in time")))?
    .map_err(ClientError::system("cannot read the remote's socket path"))?;
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || !text.starts_with('/') || text.contains('\n') {
        // An eukhe there without `--socket-path` is older: the proxy path stays.
        return Err(ClientError::Remote(format!(
            "{host} did not say its daemon's socket ({})",
            out.status
        )));
    }
    Ok(text)
}

/// `ssh -tt -L PRIVATE:REMOTE HOST -- sleep`, ending itself when the forward
/// cannot be set up or the host stops answering.
fn start_ssh(
    host: &RemoteHost,
    files: &ForwardFiles,
    remote: &str,
    log: &File,
) -> Result<Child, ClientError> {
    let mut argv: Vec<String> = ssh_command().split_whitespace().map(String::from).collect();
    if argv.is_empty() {
        argv.push("ssh".into());
    }
    let alive_seconds = FORWARD_ALIVE_INTERVAL_MS.div_ceil(1_000);
    for word in [
        // A terminal makes both ends' connection interactive (no Nagle
        // delay): without one, a daemon's small frame right after another
        // waits for the peer's delayed acknowledgement.
        "-tt".to_string(),
        "-o".into(),
        "ExitOnForwardFailure=yes".into(),
        "-o".into(),
        "StreamLocalBindUnlink=yes".into(),
        "-o".into(),
        "StreamLocalBindMask=0177".into(),
        // Its own connection: a shared master would outlive the forward.
        "-o".into(),
        "ControlMaster=no".into(),
        "-o".into(),
        "ControlPath=none".into(),
        "-o".into(),
        "BatchMode=yes".into(),
        "-o".into(),
        format!("ServerAliveInterval={alive_seconds}"),
        "-o".into(),
        format!("ServerAliveCountMax={FORWARD_ALIVE_COUNT}"),
        "-L".into(),
        format!("{}:{remote}", files.ssh_socket.display()),
    ] {
        argv.push(word);
    }
    if let Some(port) = host.port {
        argv.extend(["-p".into(), port.to_string()]);
    }
    if let Some(user) = &host.user {
        argv.extend(["-l".into(), user.clone()]);
    }
    argv.push(host.host.clone());
    argv.extend(["--".into(), REMOTE_HOLD.into()]);
    let stderr = log
        .try_clone()
        .map_err(ClientError::system("cannot copy the forward's log"))?;
    tokio::process::Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .kill_on_drop(true)
        .spawn()
        .map_err(ClientError::system(format!("cannot run {:?}", argv[0])))
}

/// Wait until ssh's socket accepts and a hello gets through it to the
/// remote daemon (a server that forbids forwarding closes the channel).
async fn ssh_ready(ssh: &mut Child, socket: &Path) -> Result<(), ClientError> {
    let deadline = Instant::now() + Duration::from_millis(SSH_LOGIN_MS);
    let mut stream = loop {
        if let Ok(stream) = UnixStream::connect(socket).await {
            break stream;
        }
        if let Ok(Some(status)) = ssh.try_wait() {
            return Err(ClientError::Remote(format!(
                "ssh ended before forwarding ({status})"
            )));
        }
        if Instant::now() >= deadline {
            return Err(ClientError::Remote("ssh did not forward in time".into()));
        }
        // No event says ssh's socket accepts (it may exist before it
        // listens): it is tried again until the login's deadline.
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    };
    let _ = write_frame(&mut stream, &Request::Hello(our_hello(Role::Background))).await;
    let answer = tokio::time::timeout(
        Duration::from_millis(FORWARD_HELLO_MS),
        read_frame::<Response, _>(&mut stream),
    )
    .await;
    match answer {
        Ok(Ok(Response::Hello(_))) => Ok(()),
        _ => Err(ClientError::Remote(
            "no hello came through the forward (does the server allow stream forwarding?)".into(),
        )),
    }
}

/// Hold the public socket and splice each connection to ssh's until the
/// forward ends; the public socket is removed first, so a client that
/// comes after takes the proxy path at once.
async fn serve(files: &ForwardFiles, ssh: &mut Child) -> Result<End, ClientError> {
    let _ = std::fs::remove_file(&files.socket);
    let listener = UnixListener::bind(&files.socket).map_err(ClientError::system(format!(
        "cannot listen on {}",
        files.socket.display()
    )))?;
    let ended = splice_until_end(&listener, files, ssh).await;
    let _ = std::fs::remove_file(&files.socket);
    ended
}

async fn splice_until_end(
    listener: &UnixListener,
    files: &ForwardFiles,
    ssh: &mut Child,
) -> Result<End, ClientError> {
    let system = ClientError::system("cannot catch the forward's signals");
    let mut term = signal(SignalKind::terminate()).map_err(system)?;
    let mut int = signal(SignalKind::interrupt())
        .map_err(ClientError::system("cannot catch the forward's signals"))?;
    let mut hup = signal(SignalKind::hangup())
        .map_err(ClientError::system("cannot catch the forward's signals"))?;
    let idle = Duration::from_millis(idle_ms());
    let (events, mut heard) = mpsc::unbounded_channel();
    let mut open = 0usize;
    let mut idle_since = Instant::now();
    loop {
        // Asleep until the earliest of: a connection, a splice's end,
        // ssh's end, a signal, or the idle deadline (only with none open).
        let idle_at = idle_since + idle;
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((client, _)) = accepted else { continue };
                open += 1;
                tokio::spawn(splice(client, files.ssh_socket.clone(), events.clone()));
            }
            Some(event) = heard.recv() => match event {
                Event::Closed => {
                    open = open.saturating_sub(1);
                    if open == 0 {
                        idle_since = Instant::now();
                    }
                }
                Event::SshGone => return Ok(End::SshGone),
            },
            _ = ssh.wait() => return Ok(End::SshGone),
            _ = tokio::time::sleep_until(idle_at), if open == 0 => return Ok(End::Idle),
            _ = term.recv() => return Ok(End::Signalled),
            _ = int.recv() => return Ok(End::Signalled),
            _ = hup.recv() => return Ok(End::Signalled),
        }
    }
}

/// Carry one client's connection to ssh's socket until both sides end.
async fn splice(
    mut client: UnixStream,
    ssh_socket: std::path::PathBuf,
    events: mpsc::UnboundedSender<Event>,
) {
    match UnixStream::connect(&ssh_socket).await {
        Ok(mut carried) => {
            let _ = tokio::io::copy_bidirectional(&mut client, &mut carried).await;
        }
        Err(_) => {
            let _ = events.send(Event::SshGone);
        }
    }
    let _ = events.send(Event::Closed);
}
