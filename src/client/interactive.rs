//! A terminal run followed from a person's terminal, as `ssh -t` follows a
//! remote command: the terminal in raw mode, what they type (less the
//! detach key) and their window's size go to the run's terminal, what the
//! program writes comes back byte for byte, until the run ends or they
//! detach. Output follows the run's own connection (riding through a lost
//! worker as any run's does); keys and sizes go on a second connection
//! (`TypeInto`), opened once the run has its number and again after a
//! worker restart; or straight to the kernel (`typist`) when it takes them.

use std::cell::{Cell, RefCell};
use std::io;
use std::os::fd::AsFd;
use std::pin::Pin;
use std::process::ExitCode;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{mpsc, Notify};

use super::connect::{connect, Client};
use super::error::ClientError;
use super::log::{exit_code, output_until_end, OutputSink};
use super::terminal::detach::DetachScanner;
use super::terminal::passthrough::{passthrough, Ended, Ends, KeySink, PassthroughError};
use super::terminal::raw::{watch_signals, RawMode, TerminalSignals};
use super::terminal::size::WindowChanges;
use super::terminal::tty_io::Tty;
use super::tty_echo::{Echoing, FromStart};
use crate::config::detach_key::DetachKey;
use crate::laws::replace::ClientStart;
use crate::protocol::entry::Stream;
use crate::protocol::message::{Request, Response, SessionRequest};
use crate::protocol::tty::TerminalInput;

/// Whether this client can pass a terminal through: both its standard
/// input and output are terminals.
pub fn can_pass_through() -> bool {
    use std::io::IsTerminal;
    std::io::stdin().is_terminal() && std::io::stdout().is_terminal()
}

/// Ask for `request` (a terminal run: `Bash` or `Send --wait` with a
/// size) and pass this terminal through to it until it ends (its exit
/// status) or the detach key (0; the run goes on).
pub async fn run(
    session: &str,
    start: ClientStart,
    request: SessionRequest,
    detach: DetachKey,
) -> Result<ExitCode, ClientError> {
    let (mut client, echo) = ask(session, start, request).await?;
    let stdin = std::io::stdin();
    let raw = Arc::new(
        RawMode::enter(stdin.as_fd())
            .map_err(ClientError::system("cannot put the terminal in raw mode"))?,
    );
    let signals = TerminalSignals::new()
        .map_err(ClientError::system("cannot watch the terminal's signals"))?;
    let watch = tokio::spawn(watch_signals(raw.clone(), signals));
    let ended = follow(&mut client, session, detach, echo).await;
    // The watch holds the guard too: once it is gone, dropping ours
    // gives the terminal its modes back.
    watch.abort();
    let _ = watch.await;
    drop(raw);
    match ended? {
        Followed::Ended(end) => {
            if let Some(why) = &end.cut_short {
                eprintln!("eukhe: {why}");
            }
            Ok(exit_code(end.status))
        }
        Followed::Detached(input) => {
            // Told on the run's own connection, so the worker never takes
            // this client's exit for a client that went away.
            let _ = client
                .send(&Request::Session {
                    session: session.to_string(),
                    request: SessionRequest::Detach,
                })
                .await;
            eprintln!(
                "eukhe: detached; run {} goes on in {session} (`eukhe attach {session}` shows it)",
                input.map_or_else(|| "?".to_string(), |n| n.to_string())
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Send `request` for `session`; whether its output can be merged with
/// the kernel's echo: a `bash --tty` asks where each output frame is in
/// the spool of a daemon of this build (whose workers are of its build; an
/// earlier one refuses the question).
async fn ask(
    session: &str,
    start: ClientStart,
    mut request: SessionRequest,
) -> Result<(Client, bool), ClientError> {
    let mut client = connect(start).await?;
    let echo = client.daemon.build_id == crate::build_id::build_id();
    let echo = match &mut request {
        SessionRequest::Bash {
            tty: Some(_),
            offsets,
            ..
        } => {
            *offsets = echo;
            echo
        }
        _ => false,
    };
    let session = session.to_string();
    client.send(&Request::Session { session, request }).await?;
    Ok((client, echo))
}

/// How following a terminal run ended.
enum Followed {
    /// The run ended, as it ended.
    Ended(super::log::InputEnd),
    /// The person detached from input N (None: before it was numbered).
    Detached(Option<u64>),
}

/// Follow the run asked for on `client` until it ends or the person
/// detaches; with `echo`, its output also comes as the kernel's echo on
/// the typist's connection, merged with the worker's.
async fn follow(
    client: &mut Client,
    session: &str,
    detach: DetachKey,
    echo: bool,
) -> Result<Followed, ClientError> {
    let number = Rc::new(Cell::new(None));
    let numbered = Rc::new(Notify::new());
    let (output, program) = mpsc::unbounded_channel();
    let merged = echo.then(|| Rc::new(RefCell::new(FromStart::at_start())));
    // The echo's reader does not hold the screen open: the run's end, on
    // the worker's path, ends it.
    let echo_output = output.downgrade();
    let sink = ToScreen {
        number: number.clone(),
        numbered: numbered.clone(),
        output,
        merged: merged.clone(),
    };
    let following = async move {
        let mut sink = sink;
        // The sink (and its channel) ends with the run: the passthrough
        // writes what is left and ends too.
        output_until_end(client, session, None, &mut sink).await
    };
    let passing = async {
        numbered.notified().await;
        let input = number.get().expect("told once numbered");
        let size = super::terminal::size::window_size(io::stdin().as_fd());
        let window = size.map(|(rows, cols)| crate::protocol::tty::WindowSize { rows, cols });
        let mut keys = super::typist::Typing::open(session, input, window, echo).await;
        let _echoing = match (keys.echo_reader(), merged) {
            (Some(read), Some(merged)) => Some(Echoing(tokio::task::spawn_local(
                super::tty_echo::echoes(read, move |echo| {
                    let Some(output) = echo_output.upgrade() else {
                        return false;
                    };
                    for piece in merged.borrow_mut().kernel_echo(echo) {
                        let _ = output.send(piece.to_vec());
                    }
                    true
                }),
            ))),
            _ => None,
        };
        pass_terminal(program, &mut keys, &detach).await
    };
    tokio::pin!(following, passing);
    let mut end = None;
    loop {
        tokio::select! {
            done = &mut following, if end.is_none() => end = Some(done?),
            passed = &mut passing => match passed? {
                Ended::Detached => return Ok(Followed::Detached(number.get())),
                Ended::Failed(e) => return Err(passthrough_failed(e)),
                // The person's terminal is gone: nobody sees the rest.
                Ended::StdinClosed => return Ok(Followed::Detached(number.get())),
                Ended::OutputEnded => break,
            },
        }
    }
    let end = match end {
        Some(end) => end,
        None => following.await?,
    };
    Ok(Followed::Ended(end))
}

/// The run's output, to the passthrough; the run's number as it is given.
struct ToScreen {
    number: Rc<Cell<Option<u64>>>,
    numbered: Rc<Notify>,
    output: mpsc::UnboundedSender<Vec<u8>>,
    /// The merge with the kernel's echo, when it comes.
    merged: Option<Rc<RefCell<FromStart>>>,
}

impl ToScreen {
    /// The worker's bytes (from the spool record ending at `end`, when it
    /// says), less what the kernel's echo showed.
    fn show(&mut self, data: &[u8], end: Option<u64>) {
        // A terminal has one stream; the passthrough has gone only when
        // the person detached, and then nothing is shown any more.
        let Some(merged) = &self.merged else {
            let _ = self.output.send(data.to_vec());
            return;
        };
        for piece in merged.borrow_mut().worker_bytes(end, data) {
            let _ = self.output.send(piece.to_vec());
        }
    }
}

impl OutputSink for ToScreen {
    fn numbered(&mut self, input: u64) {
        if self.number.replace(Some(input)).is_none() {
            self.numbered.notify_one();
        }
    }

    fn write(&mut self, _stream: Stream, data: &[u8]) -> Result<(), ClientError> {
        self.show(data, None);
        Ok(())
    }

    fn write_at(&mut self, _stream: Stream, data: &[u8], end: u64) -> Result<(), ClientError> {
        self.show(data, Some(end));
        Ok(())
    }
}

/// Pass this terminal through to a program whose output comes on
/// `program` and whose keys go to `keys`, until the detach key, the
/// output's end or a failure.
pub(super) async fn pass_terminal<K: KeySink>(
    program: mpsc::UnboundedReceiver<Vec<u8>>,
    keys: &mut K,
    detach: &DetachKey,
) -> Result<Ended, ClientError> {
    let stdin = io::stdin();
    let mut sizes = WindowChanges::new(stdin.as_fd())
        .map_err(ClientError::system("cannot watch the window's size"))?;
    // The person's terminal opened anew (no thread per read or write);
    // as it is, should that fail.
    let stdin: Box<dyn AsyncRead + Unpin> = match Tty::reopen(stdin.as_fd(), false) {
        Ok(tty) => Box::new(tty),
        Err(_) => Box::new(tokio::io::stdin()),
    };
    let stdout: Box<dyn AsyncWrite + Unpin> = match Tty::reopen(io::stdout().as_fd(), true) {
        Ok(tty) => Box::new(tty),
        Err(_) => Box::new(tokio::io::stdout()),
    };
    let ends = Ends {
        stdin,
        stdout,
        program: ChannelReader::new(program),
    };
    Ok(passthrough(ends, keys, &mut sizes, DetachScanner::new(detach)).await)
}

/// A passthrough whose read or write failed, as the client's error.
pub(super) fn passthrough_failed(e: PassthroughError) -> ClientError {
    ClientError::System {
        what: "passing the terminal through".to_string(),
        source: e.source,
    }
}

/// A channel of byte chunks read as a stream of bytes: ends when every
/// sender is gone.
pub(super) struct ChannelReader {
    chunks: mpsc::UnboundedReceiver<Vec<u8>>,
    left: Vec<u8>,
    at: usize,
}

impl ChannelReader {
    pub(super) fn new(chunks: mpsc::UnboundedReceiver<Vec<u8>>) -> ChannelReader {
        ChannelReader {
            chunks,
            left: Vec::new(),
            at: 0,
        }
    }
}

impl AsyncRead for ChannelReader {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        while self.at == self.left.len() {
            match self.chunks.poll_recv(cx) {
                Poll::Ready(Some(chunk)) => {
                    self.left = chunk;
                    self.at = 0;
                }
                Poll::Ready(None) => return Poll::Ready(Ok(())),
                Poll::Pending => return Poll::Pending,
            }
        }
        let n = buf.remaining().min(self.left.len() - self.at);
        let at = self.at;
        buf.put_slice(&self.left[at..at + n]);
        self.at += n;
        Poll::Ready(Ok(()))
    }
}

/// Keys and sizes for one terminal run, on a connection of their own,
/// opened with the first of them and again if it is lost (a worker
/// restart).
pub(super) struct RunKeys {
    session: String,
    input: u64,
    client: Option<Client>,
    /// The size last sent: told again on a new connection, whose worker
    /// takes the size of the client that typed last (a new worker has not
    /// heard it).
    size: Option<crate::protocol::tty::WindowSize>,
}

impl RunKeys {
    pub(super) fn new(session: &str, input: u64) -> RunKeys {
        RunKeys {
            session: session.to_string(),
            input,
            client: None,
            size: None,
        }
    }

    async fn send(&mut self, input: TerminalInput) -> io::Result<()> {
        if let TerminalInput::Resize { size } = input {
            self.size = Some(size);
        }
        let frame = Request::TerminalInput { input };
        if let Some(client) = &mut self.client {
            if client.send(&frame).await.is_ok() {
                return Ok(());
            }
        }
        self.client = None;
        match type_into(&self.session, self.input).await {
            Ok(mut client) => {
                if let Some(size) = self.size {
                    let resize = TerminalInput::Resize { size };
                    let told = Request::TerminalInput { input: resize };
                    client.send(&told).await.map_err(io::Error::other)?;
                }
                let sent = client.send(&frame).await.map_err(io::Error::other);
                self.client = Some(client);
                sent
            }
            // The run no longer runs: its keys have nowhere to go, and
            // its end is on its way to the screen.
            Err(ClientError::Daemon { .. }) => Ok(()),
            Err(e) => Err(io::Error::other(e)),
        }
    }
}

impl KeySink for RunKeys {
    async fn keys(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.send(TerminalInput::Keys {
            data: bytes.to_vec(),
        })
        .await
    }

    async fn resize(&mut self, rows: u16, cols: u16) -> io::Result<()> {
        let size = crate::protocol::tty::WindowSize { rows, cols };
        self.send(TerminalInput::Resize { size }).await
    }
}

/// A connection whose terminal input goes to input `input`'s terminal.
async fn type_into(session: &str, input: u64) -> Result<Client, ClientError> {
    let mut client = connect(ClientStart::Send).await?;
    let request = Request::Session {
        session: session.to_string(),
        request: SessionRequest::TypeInto { input },
    };
    match client.ask(request).await? {
        Response::Ok => Ok(client),
        other => super::cli::unexpected(other),
    }
}
