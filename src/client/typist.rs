//! An attached client's keys straight to the kernel that holds the run's
//! terminal (a typist's connection, `kernel::typist`): one process fewer
//! woken for each keystroke than through the worker. The worker says
//! where (the session's id and the run's job); the kernel takes the
//! client as a typist of that job. Sizes go the same way, so the keys
//! that follow a resize are written after it.
//!
//! Without that connection (a remote client, a kernel of another build,
//! a worker that does not say), or once it fails (the kernel gone), keys
//! and sizes go through the worker as before (`RunKeys`), the last size
//! told first.

use std::io;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;

use super::attach::open;
use super::interactive::RunKeys;
use super::terminal::passthrough::KeySink;
use crate::laws::replace::ClientStart;
use crate::laws::timing::TYPIST_ANSWER_MS;
use crate::paths::Paths;
use crate::protocol::frame::{encode, read_frame};
use crate::protocol::kernel::{FromKernel, ToKernel};
use crate::protocol::message::{Response, SessionRequest};
use crate::protocol::tty::WindowSize;

/// A typist's connection to the kernel.
struct Direct {
    job: String,
    write: OwnedWriteHalf,
}

impl Direct {
    async fn send(&mut self, message: &ToKernel) -> io::Result<()> {
        let frame = encode(message).map_err(io::Error::other)?;
        self.write.write_all(&frame).await
    }
}

/// Keys and sizes of one attached client for one terminal run.
pub(super) struct Typing {
    /// The typist's connection, and its read side, held open until the
    /// run's echo is read from it (nothing else is read after the
    /// kernel's answer).
    direct: Option<(Direct, Option<OwnedReadHalf>)>,
    through_worker: RunKeys,
    size: Option<WindowSize>,
}

impl Typing {
    /// Keys for run `input` of `session`, straight to its kernel when it
    /// takes them, of a window of `size`; through the worker otherwise
    /// (always, when the window's size is not known).
    ///
    /// With `echo`, the kernel also sends the run's output on the typist's
    /// connection, read from `echo_reader`.
    pub(super) async fn open(
        session: &str,
        input: u64,
        size: Option<WindowSize>,
        echo: bool,
    ) -> Typing {
        let within = Duration::from_millis(TYPIST_ANSWER_MS);
        let direct = match size {
            Some(size) => tokio::time::timeout(within, typist(session, input, size, echo))
                .await
                .ok()
                .flatten()
                .map(|(direct, read)| (direct, Some(read))),
            None => None,
        };
        Typing {
            direct,
            through_worker: RunKeys::new(session, input),
            size,
        }
    }

    async fn direct_or_worker(&mut self, message: ToKernel) -> io::Result<()> {
        if let Some((direct, _)) = &mut self.direct {
            if direct.send(&message).await.is_ok() {
                return Ok(());
            }
            // The kernel is gone: the worker's path from here on, told
            // this window's size first.
            self.direct = None;
            if let (Some(size), ToKernel::Keys { .. }) = (self.size, &message) {
                self.through_worker.resize(size.rows, size.cols).await?;
            }
        }
        match message {
            ToKernel::Keys { data, .. } => self.through_worker.keys(&data).await,
            ToKernel::Resize { size, .. } => self.through_worker.resize(size.rows, size.cols).await,
            _ => Ok(()),
        }
    }

    /// The typist's connection's read side, where the run's echo comes
    /// (taken once; none without a typist).
    pub(super) fn echo_reader(&mut self) -> Option<OwnedReadHalf> {
        self.direct.as_mut()?.1.take()
    }

    fn job(&self) -> String {
        self.direct
            .as_ref()
            .map(|(d, _)| d.job.clone())
            .unwrap_or_default()
    }
}

impl KeySink for Typing {
    async fn keys(&mut self, bytes: &[u8]) -> io::Result<()> {
        let job = self.job();
        let data = bytes.to_vec();
        let quiet = true;
        self.direct_or_worker(ToKernel::Keys { job, data, quiet })
            .await
    }

    async fn resize(&mut self, rows: u16, cols: u16) -> io::Result<()> {
        let size = WindowSize { rows, cols };
        self.size = Some(size);
        let job = self.job();
        self.direct_or_worker(ToKernel::Resize { job, size, at: 0 })
            .await
    }
}

/// A typist's connection for run `input` of `session`, if its worker
/// says where and its kernel takes it.
async fn typist(
    session: &str,
    input: u64,
    size: WindowSize,
    echo: bool,
) -> Option<(Direct, OwnedReadHalf)> {
    let request = SessionRequest::Typist { input };
    let mut client = open(session, ClientStart::Send, request).await.ok()?;
    let Ok(Response::Typist { session: id, job }) = client.receive().await else {
        return None;
    };
    let socket = Paths::from_env().ok()?.kernel_socket(&id);
    let stream = UnixStream::connect(socket).await.ok()?;
    let (mut read, write) = stream.into_split();
    let mut direct = Direct {
        job: job.clone(),
        write,
    };
    direct
        .send(&ToKernel::Typist { job, size, echo })
        .await
        .ok()?;
    match read_frame::<FromKernel, _>(&mut read).await.ok()? {
        FromKernel::Keyed { error: None, .. } => Some((direct, read)),
        _ => None,
    }
}
