//! Standard input for a remote `eukhe bash`. Locally the command opens
//! `/proc/<client pid>/fd/0`; a command on another machine cannot open
//! this machine's, so the client lends it through a second ssh: `ssh HOST
//! eukhe proxy --lend-stdin` reads the client's standard input, and the
//! remote process (the *lender*) holds a pipe of its own on fd 0, copies
//! what arrives into it, and prints its pid, which the client sends as
//! the command's standard input. The lender lives until the command has
//! drained the pipe after the input ended, or its ssh ends (the client
//! ends it as it exits: the run is over).

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt as _;
use std::process::{ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use nix::fcntl::OFlag;

use super::error::ClientError;
use super::remote::{ssh_argv, transport_failure, RemoteHost, REMOTE_COMMAND_VAR, SSH_VAR};
use crate::laws::timing::{POLL_MS, REMOTE_HELLO_MS};

/// The hidden flag of `eukhe proxy` that makes it a lender.
pub const LEND_FLAG: &str = "--lend-stdin";

/// One read's worth of input.
const COPY_BUFFER: usize = 64 * 1024;

/// The client side: start the lender on `host` with this process's
/// standard input, and return its pid there.
pub fn lend_to(host: &RemoteHost) -> Result<u32, ClientError> {
    let ssh = std::env::var(SSH_VAR).unwrap_or_else(|_| "ssh".into());
    let remote = super::hosts::remote_command(host)
        .or_else(|| std::env::var(REMOTE_COMMAND_VAR).ok())
        .unwrap_or_else(|| "eukhe".into());
    let mut argv = ssh_argv(&ssh, &remote, host, false);
    argv.push(LEND_FLAG.into());
    let mut command = std::process::Command::new(&argv[0]);
    command
        .args(&argv[1..])
        .stdin(Stdio::inherit())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: prctl(2) is async-signal-safe. The lending ssh ends with this
    // client (the run is over for it then), however it ends: its end
    // closes the channel, which ends the lender.
    unsafe {
        command.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM)
                .map_err(std::io::Error::from)
        });
    }
    let mut child = command.spawn().map_err(ClientError::system(format!(
        "cannot run {:?} to lend standard input to {host}",
        argv[0]
    )))?;
    let stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let Some(stdout) = stdout else { return };
        let mut lines = BufReader::new(stdout);
        let mut first = String::new();
        let _ = lines.read_line(&mut first);
        let _ = tx.send(first);
        // Kept open (and read) until ssh ends: a closed pipe would end it.
        let _ = std::io::copy(&mut lines, &mut std::io::sink());
    });
    let first = rx
        .recv_timeout(Duration::from_millis(REMOTE_HELLO_MS))
        .unwrap_or_default();
    if let Ok(pid) = first.trim().parse::<u32>() {
        // The stderr pipe is drained so ssh never blocks on it.
        if let Some(mut stderr) = stderr {
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut stderr, &mut std::io::sink());
            });
        }
        return Ok(pid);
    }
    let _ = child.kill();
    let status = child.wait().ok();
    let mut words = String::new();
    if let Some(stderr) = stderr.as_mut() {
        let _ = stderr.read_to_string(&mut words);
    }
    let line = transport_failure(host, status.and_then(|s| s.code()), &words);
    Err(ClientError::Remote(format!(
        "cannot lend standard input to the command on {host}: {line}"
    )))
}

/// The remote side, `eukhe proxy --lend-stdin`: a pipe of its own on
/// fd 0, fed from what fd 0 was; its pid on standard output; then it
/// lives until the pipe is drained after the input ended, or its standard
/// output (the ssh channel) closes.
pub fn lender_main() -> ExitCode {
    match lend() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => super::cli::finish(Err(e)),
    }
}

fn lend() -> Result<(), ClientError> {
    let failed = |e: nix::errno::Errno| {
        ClientError::system("cannot lend standard input")(std::io::Error::from(e))
    };
    let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(failed)?;
    let mut input = std::fs::File::from(nix::unistd::dup(std::io::stdin()).map_err(failed)?);
    nix::unistd::dup2_stdin(&read).map_err(failed)?;
    drop(read);
    let ended = Arc::new(AtomicBool::new(false));
    let copied = Arc::new(AtomicU64::new(0));
    {
        let (ended, copied) = (ended.clone(), copied.clone());
        let mut write = std::fs::File::from(write);
        std::thread::spawn(move || {
            let mut buf = vec![0u8; COPY_BUFFER];
            loop {
                let n = match input.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                if write.write_all(&buf[..n]).is_err() {
                    break;
                }
                copied.fetch_add(n as u64, Ordering::Relaxed);
            }
            // Dropping the write end: the command reads the end of input.
            drop(write);
            ended.store(true, Ordering::Release);
        });
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", std::process::id())
        .and_then(|()| out.flush())
        .map_err(ClientError::system("cannot write standard output"))?;
    drop(out);
    loop {
        if hung_up(std::io::stdout().as_raw_fd(), POLL_MS) {
            // The channel closed: the client is done with its command.
            return Ok(());
        }
        // Bytes were read out of the pipe only by the command, which has
        // it open and needs this process no more once it has all.
        let drained = ended.load(Ordering::Acquire)
            && copied.load(Ordering::Relaxed) > 0
            && pending(std::io::stdin().as_raw_fd()) == Some(0);
        if drained {
            return Ok(());
        }
    }
}

/// How many bytes wait in the pipe on `fd`.
fn pending(fd: std::os::fd::RawFd) -> Option<i32> {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int through the valid pointer.
    let done = unsafe { libc::ioctl(fd, libc::FIONREAD, &mut n) };
    (done == 0).then_some(n)
}

/// Whether `fd` hung up (its reader gone) within `within_ms`.
fn hung_up(fd: std::os::fd::RawFd, within_ms: u64) -> bool {
    let mut watched = libc::pollfd {
        fd,
        events: 0,
        revents: 0,
    };
    let timeout = libc::c_int::try_from(within_ms).unwrap_or(libc::c_int::MAX);
    // SAFETY: one valid pollfd, for the duration of the call.
    let ready = unsafe { libc::poll(&mut watched, 1, timeout) };
    ready > 0 && watched.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0
}
