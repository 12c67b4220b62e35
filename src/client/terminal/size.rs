//! The client terminal's window size, and its changes as the program on
//! the session's terminal must learn them.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use futures_util::FutureExt as _;
use tokio::signal::unix::{signal, Signal, SignalKind};

/// A window size: rows, then columns.
pub type Size = (u16, u16);

/// The terminal's size (TIOCGWINSZ), or none for something that is no
/// terminal or reports no size (a terminal of 0 rows, as a fresh pty).
pub fn window_size(fd: impl AsFd) -> Option<Size> {
    let size = rustix::termios::tcgetwinsize(fd).ok()?;
    (size.ws_row > 0 && size.ws_col > 0).then_some((size.ws_row, size.ws_col))
}

/// The last size told, and whether a newly read one is news.
#[derive(Debug, Default)]
pub struct SizeTracker {
    told: Option<Size>,
}

impl SizeTracker {
    /// A tracker that has told `size` already.
    pub fn new(told: Option<Size>) -> SizeTracker {
        SizeTracker { told }
    }

    /// `read` if it differs from the last size told (which it becomes); a
    /// size that cannot be read is no change.
    pub fn changed(&mut self, read: Option<Size>) -> Option<Size> {
        let size = read?;
        if self.told == Some(size) {
            return None;
        }
        self.told = Some(size);
        Some(size)
    }
}

/// The changes of a terminal's size, from SIGWINCH.
#[derive(Debug)]
pub struct WindowChanges {
    terminal: OwnedFd,
    winch: Signal,
    tracker: SizeTracker,
}

impl WindowChanges {
    /// Watch `terminal` (duplicated: the watch keeps its own descriptor),
    /// counting its present size as told. Needs a tokio runtime.
    pub fn new(terminal: BorrowedFd<'_>) -> io::Result<WindowChanges> {
        let terminal = terminal.try_clone_to_owned()?;
        let winch = signal(SignalKind::window_change())?;
        let tracker = SizeTracker::new(window_size(&terminal));
        Ok(WindowChanges {
            terminal,
            winch,
            tracker,
        })
    }

    /// The next size that differs from the last one told. A burst of
    /// signals (a window dragged) gives one read of the size once the
    /// burst's signals are taken; a signal with no change gives nothing.
    pub async fn next(&mut self) -> Size {
        loop {
            // SIGWINCH's stream never ends while its handler is installed.
            let _ = self.winch.recv().await;
            while let Some(Some(())) = self.winch.recv().now_or_never() {}
            if let Some(size) = self.tracker.changed(window_size(&self.terminal)) {
                return size;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use nix::pty::openpty;
    use nix::sys::signal::{raise, Signal as Sig};
    use rustix::termios::{tcsetwinsize, Winsize};

    use super::*;

    fn set_size(fd: impl AsFd, rows: u16, cols: u16) {
        let size = Winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        tcsetwinsize(fd, size).unwrap();
    }

    #[test]
    fn a_terminal_has_its_size_and_a_pipe_none() {
        let pty = openpty(None, None).unwrap();
        set_size(&pty.master, 40, 120);
        assert_eq!(window_size(&pty.slave), Some((40, 120)));
        set_size(&pty.master, 0, 0);
        assert_eq!(window_size(&pty.slave), None);
        let (read, _write) = nix::unistd::pipe().unwrap();
        assert_eq!(window_size(&read), None);
    }

    #[test]
    fn only_a_real_change_is_told() {
        let mut tracker = SizeTracker::new(Some((24, 80)));
        assert_eq!(tracker.changed(Some((24, 80))), None);
        assert_eq!(tracker.changed(None), None);
        assert_eq!(tracker.changed(Some((30, 80))), Some((30, 80)));
        assert_eq!(tracker.changed(Some((30, 80))), None);
        assert_eq!(tracker.changed(Some((24, 80))), Some((24, 80)));
        assert_eq!(SizeTracker::default().changed(Some((1, 1))), Some((1, 1)));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn each_resize_reaches_the_stream_as_its_new_size() {
        let pty = openpty(None, None).unwrap();
        set_size(&pty.master, 24, 80);
        let mut changes = WindowChanges::new(pty.slave.as_fd()).unwrap();
        // A signal with the size unchanged, then a burst for one resize:
        // the first size told is the new one.
        raise(Sig::SIGWINCH).unwrap();
        set_size(&pty.master, 50, 132);
        for _ in 0..5 {
            raise(Sig::SIGWINCH).unwrap();
        }
        assert_eq!(changes.next().await, (50, 132));
        set_size(&pty.master, 51, 132);
        raise(Sig::SIGWINCH).unwrap();
        assert_eq!(changes.next().await, (51, 132));
    }
}
