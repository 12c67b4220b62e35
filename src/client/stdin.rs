//! Lending this client's standard input to `eukhe bash`'s command: the
//! command's shell opens `/proc/<client pid>/fd/0`, so a pipe or a file
//! is read by the command itself, at its own pace, and survives a lost
//! worker or daemon. A socket cannot be opened that way: it is copied
//! into a pipe of the client's own first.

use std::io::IsTerminal;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// The pid whose fd 0 the command reads, or `None` (the command gets
/// `/dev/null`) when standard input is a terminal or closed.
pub fn lend() -> Result<Option<u32>, String> {
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        return Ok(None);
    }
    // SAFETY: fstat fills a stat buffer we own.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(0, &mut stat) } != 0 {
        return Ok(None);
    }
    if stat.st_mode & libc::S_IFMT == libc::S_IFSOCK {
        relay_socket()?;
    }
    Ok(Some(std::process::id()))
}

/// Put a pipe on fd 0, fed from the socket that was there by a thread.
fn relay_socket() -> Result<(), String> {
    let failed = |e: std::io::Error| format!("cannot pass standard input (a socket) on: {e}");
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills the two descriptors it creates.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(failed(std::io::Error::last_os_error()));
    }
    // SAFETY: both descriptors were just created and are ours alone.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: fd 0 is ours; dup keeps the socket open for the thread.
    let socket = unsafe { libc::dup(0) };
    if socket < 0 {
        return Err(failed(std::io::Error::last_os_error()));
    }
    // SAFETY: `socket` was just duplicated and is owned by this File.
    let mut socket = unsafe { std::fs::File::from_raw_fd(socket) };
    // SAFETY: replaces fd 0 with the pipe's read end (dup2 clears
    // close-on-exec on the copy).
    if unsafe { libc::dup2(read.as_raw_fd(), 0) } < 0 {
        return Err(failed(std::io::Error::last_os_error()));
    }
    let mut write = std::fs::File::from(write);
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut socket, &mut write);
    });
    Ok(())
}
