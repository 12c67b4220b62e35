//! A client connection's outgoing messages, with the bytes not yet written
//! counted: a replay waits while its client is behind, and a client that
//! stops reading live output is not buffered for without limit: past
//! [`LAG_BYTES`] its live stream is dropped and it is fed from the
//! transcript (durable, in order) until it has caught up.

use std::cell::{Cell, RefCell};
use std::path::PathBuf;
use std::rc::Rc;

use tokio::net::unix::OwnedWriteHalf;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio::sync::Notify;

use crate::laws::timing::CATCH_UP_RETRY_MS;
use crate::protocol::frame::{write_frame, FrameError};
use crate::protocol::message::Response;
use crate::protocol::output::{live_at_header, live_header, zero_run_frame};
use crate::protocol::zeros;
use crate::session::entry::{EntryBody, Stream};

/// What a message costs the outbox besides its output bytes.
const MESSAGE_COST: usize = 64;

/// A replay (log, attach) sends while its client has less than this
/// queued, so it never holds more of a transcript than this in memory.
pub const REPLAY_AHEAD_BYTES: usize = 1 << 20;

/// Live output queued for a client past this: the client is not reading.
pub const LAG_BYTES: usize = 8 << 20;

#[derive(Default)]
struct Counter {
    pending: Cell<usize>,
    drained: Notify,
    /// Set while the client is fed from the transcript.
    lag: RefCell<Option<Lag>>,
    /// The client read nothing for a while: its next output falls behind.
    stalled: Cell<bool>,
    /// The peer reads zero-run frames.
    zero_runs: bool,
    /// The peer asked where each terminal run's output frame ends in the
    /// spool (`Response::OutputAt`); others get `Response::Output`.
    offsets: Cell<bool>,
}

/// A client behind its live output: what the transcript still owes it.
struct Lag {
    /// The input whose output it follows.
    input: u64,
    /// Where to read on: a record's start, and the first entry not sent.
    offset: u64,
    seq: u64,
    /// The last output entry it is owed.
    through: u64,
    /// Messages that follow the output (its exit), sent once caught up.
    held: Vec<Response>,
}

/// Where live output was stored: its entry and where the entry's record
/// starts in the transcript.
#[derive(Clone, Copy, Debug)]
pub struct Stored {
    pub seq: u64,
    pub offset: u64,
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

/// What `response` costs the outbox until it is written: a run of zeros
/// that goes as its length alone (`as_zero_run`) costs no more than any
/// other message, so a client that reads zeros is never fed from the
/// transcript (as bytes) for them.
fn cost(response: &Response, zero_runs: bool) -> usize {
    MESSAGE_COST
        + match response {
            Response::Output { data, .. } if as_zero_run(data, zero_runs) => 0,
            Response::Output { data, .. } | Response::OutputAt { data, .. } => data.len(),
            Response::Entry(entry) => match &entry.body {
                EntryBody::Output { data, .. } => data.len(),
                _ => 0,
            },
            _ => 0,
        }
}

/// Whether live output `data` goes as a zero-run frame: a run of zeros the
/// spool handed out, to a peer that reads those.
fn as_zero_run(data: &[u8], zero_runs: bool) -> bool {
    zero_runs && zeros::handed_out(data)
}

impl Outbox {
    /// An outbox and the task that writes it to `write` in order;
    /// `zero_runs`: the peer reads zero-run frames.
    pub fn spawn_writer(write: OwnedWriteHalf, zero_runs: bool) -> Outbox {
        let (tx, rx) = unbounded_channel();
        let counter = Rc::new(Counter {
            zero_runs,
            ..Counter::default()
        });
        tokio::task::spawn_local(writer(write, rx, counter.clone()));
        Outbox { tx, counter }
    }

    /// The peer merges this connection's output with its kernel's echo:
    /// each terminal run's output frame says where it ends in the spool.
    pub fn want_offsets(&self) {
        self.counter.offsets.set(true);
    }

    pub fn send(&self, response: Response) -> Result<(), Gone> {
        let response = match response {
            Response::OutputAt { stream, data, .. } if !self.counter.offsets.get() => {
                Response::Output { stream, data }
            }
            other => other,
        };
        let cost = cost(&response, self.counter.zero_runs);
        self.tx.send(response).map_err(|_| Gone)?;
        self.counter.pending.set(self.counter.pending.get() + cost);
        Ok(())
    }

    /// Live output of `input`, stored as `stored` in the transcript at
    /// `transcript`. A client more than [`LAG_BYTES`] behind is fed from
    /// the transcript instead until it catches up, so the worker never
    /// holds more than that for it and the client still gets every byte in
    /// order.
    pub fn send_output(
        &self,
        response: Response,
        input: u64,
        stored: Option<Stored>,
        transcript: &std::path::Path,
    ) {
        if let Some(lag) = self.counter.lag.borrow_mut().as_mut() {
            if let Some(stored) = stored {
                lag.through = stored.seq;
            }
            return;
        }
        match stored {
            // Output the transcript could not take (a full disk) can only
            // go live.
            Some(stored) if self.pending() >= LAG_BYTES || self.counter.stalled.take() => {
                tracing::info!(
                    input,
                    "a client stopped reading: it is fed from the transcript from entry {}",
                    stored.seq
                );
                *self.counter.lag.borrow_mut() = Some(Lag {
                    input,
                    offset: stored.offset,
                    seq: stored.seq,
                    through: stored.seq,
                    held: Vec::new(),
                });
                tokio::task::spawn_local(catch_up(self.clone(), transcript.to_path_buf()));
            }
            _ => {
                let _ = self.send(response);
            }
        }
    }

    /// Whether the client is fed from the transcript (not live).
    pub fn is_behind(&self) -> bool {
        self.counter.lag.borrow().is_some()
    }

    /// The client did not read for a while: its next live output starts
    /// its catch-up from the transcript, and nobody waits for it.
    pub fn stall(&self) {
        self.counter.stalled.set(true);
    }

    /// A message that comes after the output (an exit): held while the
    /// client is fed from the transcript.
    pub fn send_after_output(&self, response: Response) -> Result<(), Gone> {
        if let Some(lag) = self.counter.lag.borrow_mut().as_mut() {
            lag.held.push(response);
            return Ok(());
        }
        self.send(response)
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

/// Feed a lagging client its input's output from the transcript, never
/// more than [`REPLAY_AHEAD_BYTES`] ahead of it, until it has every entry
/// it is owed; then send what was held and go live again.
async fn catch_up(outbox: Outbox, transcript: PathBuf) {
    loop {
        outbox.below(REPLAY_AHEAD_BYTES).await;
        if outbox.is_closed() {
            return;
        }
        let (input, offset, seq, through) = match outbox.counter.lag.borrow().as_ref() {
            Some(lag) => (lag.input, lag.offset, lag.seq, lag.through),
            None => return,
        };
        if seq > through {
            // Caught up (nothing awaited since `through` was read): live
            // again, after what was held.
            let held = outbox
                .counter
                .lag
                .borrow_mut()
                .take()
                .map(|lag| lag.held)
                .unwrap_or_default();
            for response in held {
                let _ = outbox.send(response);
            }
            return;
        }
        let mut entries = match crate::session::transcript::stream_at(&transcript, offset, seq) {
            Ok(entries) => entries,
            Err(e) => {
                tracing::warn!("a lagging client cannot be fed from the transcript: {e}");
                return;
            }
        };
        let mut next = (offset, seq);
        while outbox.pending() < REPLAY_AHEAD_BYTES {
            let Ok(Some((entry, end))) = entries.next_with_end() else {
                break;
            };
            next = (end, entry.seq + 1);
            if let Some(output) = output_of(entry.body, input) {
                let _ = outbox.send(output);
            }
            if entry.seq >= through {
                break;
            }
        }
        if let Some(lag) = outbox.counter.lag.borrow_mut().as_mut() {
            (lag.offset, lag.seq) = next;
        }
        if next.1 <= seq {
            // Nothing readable past the point (the entry is not on disk as
            // expected): do not spin.
            tokio::time::sleep(std::time::Duration::from_millis(CATCH_UP_RETRY_MS)).await;
        }
    }
}

/// A stored entry of input `input`'s output as live output: a run's or a
/// user bash's says where it ends in the spool when the entry does.
fn output_of(body: EntryBody, input: u64) -> Option<Response> {
    let EntryBody::Output {
        stream,
        data,
        input: run,
        bash,
        spool_end,
    } = body
    else {
        return None;
    };
    let followed = run == Some(input) || bash == Some(input);
    match (followed, spool_end) {
        (true, Some(end)) => Some(Response::OutputAt { stream, data, end }),
        (true, None) => Some(Response::Output { stream, data }),
        (false, _) => None,
    }
}

/// Write `parts` as one stream of bytes, in as few writes as the socket
/// takes: a frame's header and its bytes go together, so the client wakes
/// once for the whole frame.
async fn write_all(write: &mut OwnedWriteHalf, parts: &[&[u8]]) -> Result<(), FrameError> {
    use std::io::IoSlice;
    use tokio::io::AsyncWriteExt;
    let mut slices: Vec<IoSlice> = parts.iter().map(|part| IoSlice::new(part)).collect();
    let mut left = &mut slices[..];
    IoSlice::advance_slices(&mut left, 0);
    while !left.is_empty() {
        let written = write.write_vectored(left).await?;
        if written == 0 {
            return Err(std::io::Error::from(std::io::ErrorKind::WriteZero).into());
        }
        IoSlice::advance_slices(&mut left, written);
    }
    Ok(())
}

/// Live output as it is, behind its header (no copy into a frame).
async fn write_live(
    write: &mut OwnedWriteHalf,
    stream: Stream,
    data: &[u8],
) -> Result<(), FrameError> {
    let header = live_header(stream, data.len())?;
    write_all(write, &[&header, data]).await
}

async fn writer(
    mut write: OwnedWriteHalf,
    mut rx: UnboundedReceiver<Response>,
    counter: Rc<Counter>,
) {
    while let Some(response) = rx.recv().await {
        let written = match &response {
            // A run of zeros the spool handed out goes as its length alone
            // to a peer that reads that: the socket copies none of it.
            Response::Output { stream, data } if as_zero_run(data, counter.zero_runs) => {
                match zero_run_frame(*stream, data.len()) {
                    Some(frame) => write_all(&mut write, &[&frame]).await,
                    None => write_live(&mut write, *stream, data).await,
                }
            }
            Response::Output { stream, data } => write_live(&mut write, *stream, data).await,
            Response::OutputAt { stream, data, end } => {
                match live_at_header(*stream, *end, data.len()) {
                    Ok(header) => write_all(&mut write, &[&header, data]).await,
                    Err(e) => Err(e),
                }
            }
            other => write_frame(&mut write, other).await,
        };
        counter.pending.set(
            counter
                .pending
                .get()
                .saturating_sub(cost(&response, counter.zero_runs)),
        );
        counter.drained.notify_waiters();
        if written.is_err() {
            break;
        }
    }
    rx.close();
    counter.drained.notify_waiters();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::entry::Stream;

    fn output(data: bytes::Bytes) -> Response {
        Response::Output {
            stream: Stream::Stdout,
            data,
        }
    }

    /// 512 KiB of zeros the spool handed out cost a client that reads zero
    /// runs one message, not 512 KiB of its `LAG_BYTES`: sixteen of them
    /// queued would otherwise send it to the transcript for bytes it never
    /// needed.
    #[test]
    fn a_run_of_zeros_costs_its_bytes_only_to_a_client_that_takes_them_as_bytes() {
        let run = output(bytes::Bytes::from_static(&zeros::ZEROS[..]));
        assert_eq!(cost(&run, true), MESSAGE_COST);
        assert_eq!(cost(&run, false), MESSAGE_COST + zeros::RUN_MAX);
        // Zeros that came as bytes (not handed out) go as bytes.
        let written = output(bytes::Bytes::from(vec![0u8; 4096]));
        assert_eq!(cost(&written, true), MESSAGE_COST + 4096);
    }
}
