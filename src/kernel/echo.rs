//! A terminal job's output sent straight to the typists that asked for it
//! (`ToKernel::Typist`'s `echo`), as the kernel spools it: a keystroke's
//! echo then reaches an attached client without waking the worker. Each
//! frame says where its records are in the spool, so the client merges it
//! with the worker's output (the truth, which a reattach, `log` and the
//! screen use) and shows each byte once. A frame a slow typist has no room
//! for is dropped: the worker's output brings those bytes.

use tokio::sync::mpsc;

use crate::protocol::output::Echo;
use crate::session::entry::Stream;

/// The typists of one job, each its connection's bounded output queue.
#[derive(Default)]
pub struct Echoes {
    typists: Vec<mpsc::Sender<Vec<u8>>>,
}

impl Echoes {
    /// A typist's connection asks for the job's echo.
    pub fn add(&mut self, typist: mpsc::Sender<Vec<u8>>) {
        self.typists.push(typist);
    }

    /// `data` of `stream` was spooled from offset `from` to `end`.
    pub fn send(&mut self, stream: Stream, (from, end): (u64, u64), data: &[u8]) {
        if self.typists.is_empty() {
            return;
        }
        let Some(frame) = Echo::frame(stream, (from, end), data) else {
            return;
        };
        self.typists
            .retain(|typist| match typist.try_send(frame.clone()) {
                Ok(()) | Err(mpsc::error::TrySendError::Full(_)) => true,
                Err(mpsc::error::TrySendError::Closed(_)) => false,
            });
    }
}
