//! The person's terminal as the passthrough reads and writes it: opened
//! anew through `/proc/self/fd`, a file description of the client's own
//! that does not block, so a key is read and an echo written in the
//! client's event loop, not handed to and from a thread of their own (as
//! `tokio::io::stdin` and `stdout` do). The description the client was
//! started with, which its shell shares, stays as it was (blocking).

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// One of the client's terminals, opened anew, non-blocking.
pub struct Tty(AsyncFd<File>);

impl Tty {
    /// `fd` (standard input or output) opened anew for reading or
    /// writing; an error when it is not a terminal or cannot be opened
    /// (the caller then uses it as it is).
    pub fn reopen(fd: BorrowedFd<'_>, write: bool) -> io::Result<Tty> {
        if !nix::unistd::isatty(fd).unwrap_or(false) {
            return Err(io::Error::other("not a terminal"));
        }
        let file = OpenOptions::new()
            .read(!write)
            .write(write)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(format!("/proc/self/fd/{}", fd.as_raw_fd()))?;
        // SAFETY: the file owns its descriptor, which nothing else closes
        // or replaces while the `AsyncFd` holds it.
        let registered = unsafe { AsyncFd::register(file) };
        Ok(Tty(registered?))
    }
}

impl AsyncRead for Tty {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            let mut guard = ready!(self.0.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            match guard.try_io(|file| file.get_ref().read(unfilled)) {
                Ok(Ok(read)) => {
                    buf.advance(read);
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                Err(_would_block) => continue,
            }
        }
    }
}

impl AsyncWrite for Tty {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bytes: &[u8],
    ) -> Poll<io::Result<usize>> {
        loop {
            let mut guard = ready!(self.0.poll_write_ready(cx))?;
            match guard.try_io(|file| file.get_ref().write(bytes)) {
                Ok(result) => return Poll::Ready(result),
                Err(_would_block) => continue,
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A pseudo-terminal's slave, opened anew for each side, carries keys
    /// in and output out, and the slave's own description stays blocking.
    #[test]
    fn a_terminal_opened_anew_reads_and_writes_without_blocking_the_original() {
        let pty = nix::pty::openpty(None, None).unwrap();
        let mut termios = nix::sys::termios::tcgetattr(&pty.slave).unwrap();
        nix::sys::termios::cfmakeraw(&mut termios);
        nix::sys::termios::tcsetattr(&pty.slave, nix::sys::termios::SetArg::TCSANOW, &termios)
            .unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let mut keys = Tty::reopen(pty.slave.as_fd(), false).unwrap();
            let mut screen = Tty::reopen(pty.slave.as_fd(), true).unwrap();
            nix::unistd::write(&pty.master, b"z").unwrap();
            let mut typed = [0u8; 8];
            let read = keys.read(&mut typed).await.unwrap();
            assert_eq!(&typed[..read], b"z");
            screen.write_all(b"echo").await.unwrap();
            let mut shown = [0u8; 8];
            let read = nix::unistd::read(&pty.master, &mut shown).unwrap();
            assert_eq!(&shown[..read], b"echo");
        });
        let flags = nix::fcntl::fcntl(&pty.slave, nix::fcntl::FcntlArg::F_GETFL).unwrap();
        assert_eq!(
            flags & libc::O_NONBLOCK,
            0,
            "the original description blocks"
        );
    }

    #[test]
    fn what_is_not_a_terminal_is_not_opened_anew() {
        let (read, _write) = nix::unistd::pipe().unwrap();
        assert!(Tty::reopen(read.as_fd(), false).is_err());
    }
}
