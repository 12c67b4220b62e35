//! Lending this client's standard input to `eukhe bash`'s command: the
//! command's shell opens `/proc/<client pid>/fd/0`, so a pipe or a file
//! is read by the command itself, at its own pace, and survives a lost
//! worker or daemon. A socket cannot be opened that way: it is copied
//! into a pipe of the client's own first. A remote command's input is
//! lent by a process on its machine (`lend`).

use std::io::IsTerminal;

use nix::fcntl::OFlag;

use super::error::ClientError;

/// The pid whose fd 0 the command reads, or `None` (the command gets
/// `/dev/null`) when standard input is a terminal or closed.
pub fn lend() -> Result<Option<u32>, ClientError> {
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        return Ok(None);
    }
    let Ok(stat) = nix::sys::stat::fstat(&stdin) else {
        return Ok(None);
    };
    if let super::remote::Target::Remote(host) = super::remote::process_target() {
        return lend_remote(host, &stat);
    }
    if stat.st_mode & libc::S_IFMT == libc::S_IFSOCK {
        relay_socket()?;
    }
    Ok(Some(std::process::id()))
}

/// Put a pipe on fd 0, fed from the socket that was there by a thread.
fn relay_socket() -> Result<(), ClientError> {
    let failed = |e: nix::errno::Errno| {
        ClientError::system("cannot pass standard input (a socket) on")(e.into())
    };
    let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(failed)?;
    // The copy keeps the socket open for the thread.
    let mut socket = std::fs::File::from(nix::unistd::dup(std::io::stdin()).map_err(failed)?);
    // Replaces fd 0 with the pipe's read end (dup2 clears close-on-exec on
    // the copy).
    nix::unistd::dup2_stdin(&read).map_err(failed)?;
    let mut write = std::fs::File::from(write);
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut socket, &mut write);
    });
    Ok(())
}

/// A remote command cannot open this machine's `/proc/<pid>/fd/0`: it
/// gets `/dev/null` when that is what standard input is, and anything
/// else is lent to it through a second ssh (`lend`): the pid there.
fn lend_remote(
    host: &super::remote::RemoteHost,
    stat: &nix::sys::stat::FileStat,
) -> Result<Option<u32>, ClientError> {
    let null = nix::sys::stat::stat("/dev/null").ok();
    let is_null = stat.st_mode & libc::S_IFMT == libc::S_IFCHR
        && null.is_some_and(|null| null.st_rdev == stat.st_rdev);
    if is_null {
        return Ok(None);
    }
    super::lend::lend_to(host).map(Some)
}
