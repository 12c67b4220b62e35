//! A client connection's outgoing messages, with the bytes not yet written
//! counted: a replay waits while its client is behind, and the shell can
//! tell a client that does not read from one that does.

use std::cell::Cell;
use std::rc::Rc;

use tokio::net::unix::OwnedWriteHalf;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio::sync::Notify;

use crate::protocol::frame::write_frame;
use crate::protocol::message::Response;
use crate::session::entry::EntryBody;

/// What a message costs the outbox besides its output bytes.
const MESSAGE_COST: usize = 64;

/// A replay (log, attach) sends while its client has less than this
/// queued, so it never holds more of a transcript than this in memory.
pub const REPLAY_AHEAD_BYTES: usize = 1 << 20;

#[derive(Default)]
struct Counter {
    pending: Cell<usize>,
    drained: Notify,
}

/// The sending side; cheap to clone.
#[derive(Clone)]
pub struct Outbox {
    tx: UnboundedSender<Response>,
    counter: Rc<Counter>,
}

/// The connection is gone.
#[derive(Debug)]
pub struct Gone;

fn cost(response: &Response) -> usize {
    MESSAGE_COST
        + match response {
            Response::Output { data, .. } => data.len(),
            Response::Entry(entry) => match &entry.body {
                EntryBody::Output { data, .. } => data.len(),
                _ => 0,
            },
            _ => 0,
        }
}

impl Outbox {
    /// An outbox and the task that writes it to `write` in order.
    pub fn spawn_writer(write: OwnedWriteHalf) -> Outbox {
        let (tx, rx) = unbounded_channel();
        let counter = Rc::new(Counter::default());
        tokio::task::spawn_local(writer(write, rx, counter.clone()));
        Outbox { tx, counter }
    }

    pub fn send(&self, response: Response) -> Result<(), Gone> {
        let cost = cost(&response);
        self.tx.send(response).map_err(|_| Gone)?;
        self.counter.pending.set(self.counter.pending.get() + cost);
        Ok(())
    }

    /// Bytes queued and not yet written to the client.
    pub fn pending(&self) -> usize {
        self.counter.pending.get()
    }

    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    /// Wait until less than `bytes` is queued (or the connection is gone).
    pub async fn below(&self, bytes: usize) {
        loop {
            let drained = self.counter.drained.notified();
            if self.pending() < bytes || self.is_closed() {
                return;
            }
            drained.await;
        }
    }
}

async fn writer(
    mut write: OwnedWriteHalf,
    mut rx: UnboundedReceiver<Response>,
    counter: Rc<Counter>,
) {
    while let Some(response) = rx.recv().await {
        let written = write_frame(&mut write, &response).await;
        counter
            .pending
            .set(counter.pending.get().saturating_sub(cost(&response)));
        counter.drained.notify_waiters();
        if written.is_err() {
            break;
        }
    }
    rx.close();
    counter.drained.notify_waiters();
}
