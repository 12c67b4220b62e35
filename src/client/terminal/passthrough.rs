//! Bytes both ways between a person's terminal and a terminal run: what
//! they type goes to the session (less the detach key), what the program
//! writes comes back byte for byte, and the window's size follows.
//!
//! Generic over the connection: the session is a [`KeySink`], the
//! program's output any `AsyncRead`, window changes any [`SizeSource`].

use std::future::Future;
use std::io;

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};

use super::detach::DetachScanner;
use super::modes::ScreenModes;
use super::size::{Size, WindowChanges};

/// Where typed keys and window sizes go: the session's terminal.
pub trait KeySink {
    /// Write `bytes` to the program's terminal, as typed.
    fn keys(&mut self, bytes: &[u8]) -> impl Future<Output = io::Result<()>>;
    /// Give the program's terminal this size.
    fn resize(&mut self, rows: u16, cols: u16) -> impl Future<Output = io::Result<()>>;
}

/// Where window sizes come from.
pub trait SizeSource {
    /// The next new size (waits forever if there will be none).
    fn next_size(&mut self) -> impl Future<Output = Size>;
}

impl SizeSource for WindowChanges {
    async fn next_size(&mut self) -> Size {
        self.next().await
    }
}

impl SizeSource for tokio::sync::mpsc::Receiver<Size> {
    async fn next_size(&mut self) -> Size {
        match self.recv().await {
            Some(size) => size,
            None => std::future::pending().await,
        }
    }
}

/// Why a passthrough ended.
#[derive(Debug)]
pub enum Ended {
    /// The detach key was typed (the program goes on in the session); the
    /// modes the program set on the person's terminal were taken back
    /// (`modes::ScreenModes`).
    Detached,
    /// The program's output ended: the run ended, or the session closed it.
    OutputEnded,
    /// The person's input ended (a closed terminal, or a pipe's end).
    StdinClosed,
    /// Reading or writing failed.
    Failed(PassthroughError),
}

/// A read or write of the passthrough that failed, naming which.
#[derive(Debug, thiserror::Error)]
#[error("{side}: {source}")]
pub struct PassthroughError {
    /// Which of the four ends failed.
    pub side: Side,
    /// The system's answer.
    #[source]
    pub source: io::Error,
}

/// The four ends of a passthrough.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Side {
    /// Standard input.
    #[error("reading the keyboard")]
    Keyboard,
    /// Standard output.
    #[error("writing to the terminal")]
    Screen,
    /// The program's output.
    #[error("reading the program's output")]
    Program,
    /// The session's terminal.
    #[error("writing to the session's terminal")]
    Session,
}

/// A read's size: a burst of typing or a screenful of output.
const CHUNK: usize = 16 * 1024;

/// The four ends of one passthrough, moved in.
#[derive(Debug)]
pub struct Ends<I, O, P> {
    /// The person's keys (the client's standard input).
    pub stdin: I,
    /// The person's screen (the client's standard output).
    pub stdout: O,
    /// The program's output bytes.
    pub program: P,
}

/// Pass bytes until the detach key, an end or a failure, and say which.
pub async fn passthrough<I, O, P, K, Z>(
    ends: Ends<I, O, P>,
    sink: &mut K,
    sizes: &mut Z,
    mut scanner: DetachScanner,
) -> Ended
where
    I: AsyncRead + Unpin,
    O: AsyncWrite + Unpin,
    P: AsyncRead + Unpin,
    K: KeySink,
    Z: SizeSource,
{
    let Ends {
        mut stdin,
        mut stdout,
        mut program,
    } = ends;
    let failed = |side| move |source| Ended::Failed(PassthroughError { side, source });
    let mut modes = ScreenModes::default();
    let mut typed = vec![0; CHUNK];
    let mut output = vec![0; CHUNK];
    loop {
        // Each branch's future is cancel-safe: a read that loses the race
        // has read nothing.
        let step = tokio::select! {
            read = stdin.read(&mut typed) => match read {
                // A detach key's prefix typed last was a key after all.
                Ok(0) => match scanner.held().is_empty() {
                    true => Err(Ended::StdinClosed),
                    false => match sink.keys(scanner.held()).await {
                        Ok(()) => Err(Ended::StdinClosed),
                        Err(e) => Err(failed(Side::Session)(e)),
                    },
                },
                Ok(n) => {
                    let scanned = scanner.feed(&typed[..n]);
                    let sent = match scanned.pass.is_empty() {
                        true => Ok(()),
                        false => sink.keys(&scanned.pass).await.map_err(failed(Side::Session)),
                    };
                    match (sent, scanned.detached) {
                        (Err(ended), _) => Err(ended),
                        (Ok(()), true) => Err(leave(&mut stdout, &modes).await),
                        (Ok(()), false) => Ok(()),
                    }
                }
                Err(e) => Err(failed(Side::Keyboard)(e)),
            },
            read = program.read(&mut output) => match read {
                Ok(0) => Err(Ended::OutputEnded),
                Ok(n) => {
                    modes.see(&output[..n]);
                    write_whole(&mut stdout, &output[..n]).await.map_err(failed(Side::Screen))
                }
                Err(e) => Err(failed(Side::Program)(e)),
            },
            (rows, cols) = sizes.next_size() => {
                sink.resize(rows, cols).await.map_err(failed(Side::Session))
            }
        };
        if let Err(ended) = step {
            return ended;
        }
    }
}

/// Write all of `bytes` (a short write is continued) and flush.
async fn write_whole(stdout: &mut (impl AsyncWrite + Unpin), bytes: &[u8]) -> io::Result<()> {
    stdout.write_all(bytes).await?;
    stdout.flush().await
}

/// The person's terminal left in its own modes, after a detach.
async fn leave(stdout: &mut (impl AsyncWrite + Unpin), modes: &ScreenModes) -> Ended {
    match write_whole(stdout, &modes.leave()).await {
        Ok(()) => Ended::Detached,
        Err(source) => Ended::Failed(PassthroughError {
            side: Side::Screen,
            source,
        }),
    }
}

#[cfg(test)]
mod tests;
