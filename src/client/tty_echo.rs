//! A terminal run's output the kernel sends a typist (its echo, past the
//! worker), read beside the worker's: `attach` and `bash --tty` both show
//! whichever path brings a byte first, once (`terminal::merge`).
//!
//! A `bash --tty` follows its command from the first byte, so it also
//! counts the bytes each path brought: when the worker's path loses its
//! spool offsets (its connection lost, the command followed on in the
//! transcript), the bytes the echo showed ahead of it are not shown again.

use bytes::Bytes;
use tokio::net::unix::OwnedReadHalf;

use super::terminal::merge::Merge;
use crate::protocol::frame::{frame_reader, read_frame_bytes};
use crate::protocol::output::Echo;

/// Read the echo frames on a typist's connection (`read`) into `show`
/// until the connection ends, a frame is malformed or `show` says stop.
pub(super) async fn echoes(read: OwnedReadHalf, mut show: impl FnMut(Echo) -> bool) {
    let mut read = frame_reader(read);
    while let Ok(payload) = read_frame_bytes(&mut read).await {
        match Echo::from_payload(payload) {
            Ok(Some(echo)) => {
                if !show(echo) {
                    return;
                }
            }
            Ok(None) => {}
            Err(_) => return,
        }
    }
}

/// The echo's reader, ended with the passthrough.
pub(super) struct Echoing(pub(super) tokio::task::JoinHandle<()>);

impl Drop for Echoing {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// One command's output from both paths, from its first byte: the merge,
/// and how many bytes were shown and how many the worker's path brought.
#[derive(Debug, Default)]
pub(super) struct FromStart {
    merge: Merge,
    shown: u64,
    brought: u64,
}

impl FromStart {
    /// Both paths from spool offset 0: the command's spool starts there.
    pub(super) fn at_start() -> FromStart {
        let mut merge = Merge::default();
        let _ = merge.redrawn(Some(0));
        FromStart {
            merge,
            ..FromStart::default()
        }
    }

    /// The worker's next bytes (from the record ending at `end`, when it
    /// says): what of them to show.
    pub(super) fn worker_bytes(&mut self, end: Option<u64>, data: &[u8]) -> Vec<Bytes> {
        let brought = data.len() as u64;
        // Without an offset, the bytes the echo showed ahead are skipped
        // by count: the worker's path brings every byte once, in order.
        let ahead = match end {
            Some(_) => 0,
            None => self.shown.saturating_sub(self.brought),
        };
        let fresh = &data[(ahead.min(brought)) as usize..];
        self.brought += brought;
        let pieces = self.merge.from_worker(end, Bytes::copy_from_slice(fresh));
        self.count(pieces)
    }

    /// The kernel's echo: what of it to show.
    pub(super) fn kernel_echo(&mut self, echo: Echo) -> Vec<Bytes> {
        let pieces = self.merge.from_kernel(echo.from, echo.end, echo.data);
        self.count(pieces)
    }

    fn count(&mut self, mut pieces: Vec<Bytes>) -> Vec<Bytes> {
        pieces.retain(|p| !p.is_empty());
        self.shown += pieces.iter().map(|p| p.len() as u64).sum::<u64>();
        pieces
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::entry::Stream;

    fn echo(from: u64, text: &str) -> Echo {
        Echo {
            stream: Stream::Stdout,
            from,
            end: from + 5 + text.len() as u64,
            data: Bytes::copy_from_slice(text.as_bytes()),
        }
    }

    fn text(pieces: Vec<Bytes>) -> String {
        pieces
            .iter()
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .collect()
    }

    #[test]
    fn the_echo_shows_the_first_bytes_and_the_worker_repeats_none() {
        let mut screen = FromStart::at_start();
        let first = echo(0, "ab");
        let end = first.end;
        assert_eq!(text(screen.kernel_echo(first)), "ab");
        assert_eq!(text(screen.worker_bytes(Some(end), b"ab")), "");
    }

    #[test]
    fn the_worker_without_offsets_skips_what_the_echo_showed_ahead() {
        let mut screen = FromStart::at_start();
        let first = echo(0, "ab");
        let second = echo(first.end, "cd");
        let end = first.end;
        assert_eq!(text(screen.kernel_echo(first)), "ab");
        assert_eq!(text(screen.kernel_echo(second)), "cd");
        assert_eq!(text(screen.worker_bytes(Some(end), b"ab")), "");
        // The worker's connection was lost: the transcript brings the rest
        // without offsets.
        assert_eq!(text(screen.worker_bytes(None, b"c")), "");
        assert_eq!(text(screen.worker_bytes(None, b"def")), "ef");
        assert_eq!(text(screen.worker_bytes(None, b"g")), "g");
    }
}
