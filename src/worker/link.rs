//! The worker's link to its session's kernel: find the live kernel (or
//! start one), greet it, then feed what it reports (output, ends,
//! background jobs) to the run core (`core`) and carry out its actions.

use super::WorkerError;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use tokio::net::unix::OwnedReadHalf;
use tokio::net::UnixStream;
use tokio::sync::mpsc::unbounded_channel;

use super::core::Action;
use super::state::Worker;
use crate::build_id::build_id;
use crate::clock::{mono_ms, wall_ms};
use crate::host::process::is_alive;
use crate::laws::notice::{offered_restore_notice, MessageKind};
use crate::laws::timing::{FOLLOWER_PATIENCE_MS, KERNEL_RETRY_MS, KERNEL_RUNS_POLL_MS};
use crate::paths::Paths;
use crate::protocol::event::EventKind;
use crate::protocol::frame::{read_frame, read_frame_bytes, write_frame};
use crate::protocol::kernel::{FromKernel, InlineRecord, JobState, ToKernel, KERNEL_PROTOCOL};
use crate::session::entry::Stream;
use crate::session::page_cache;
use crate::session::spool::{open_job, Chunk};
use crate::session::store::{read_json, KernelRecord};
use crate::session::transcript::EntryBody;
use crate::session::windows::index::IndexWriter;
use bytes::Bytes;
use std::path::Path;

/// How often a worker retries a kernel it cannot drive yet (another
/// protocol version with runs in flight, or one still starting).
const RETRY: Duration = Duration::from_millis(KERNEL_RETRY_MS);

/// Refused connections after which a live kernel counts as broken.
const UNREACHABLE_AFTER: u32 = 10;

/// Connect, reconcile, then serve the kernel's messages until the link
/// ends. Returns why it ended (the kernel is gone) unless the worker stops.
pub async fn run(
    worker: Rc<RefCell<Worker>>,
    paths: Paths,
    wake_runs: Rc<tokio::sync::Notify>,
) -> Result<(), WorkerError> {
    let (stream, hello) = connect(&worker, &paths).await?;
    let (read, mut write) = stream.into_split();
    let (tx, mut rx) = unbounded_channel::<ToKernel>();
    tokio::task::spawn_local(async move {
        while let Some(message) = rx.recv().await {
            if write_frame(&mut write, &message).await.is_err() {
                break;
            }
        }
    });
    {
        let mut w = worker.borrow_mut();
        w.kernel = Some(tx);
        // A new link: the kernel hears the queue's count afresh (`work_changed`).
        w.link_owes.queued_told = None;
        if std::mem::take(&mut w.link_owes.claim) {
            w.send_kernel(ToKernel::Claim);
        }
        greet(&mut w, hello)?;
        w.work_changed();
        w.kernel_connected.notify_waiters();
    }
    wake_runs.notify_one();
    let mut read = crate::protocol::frame::frame_reader(read);
    let ended = serve(&worker, &mut read, &wake_runs).await;
    let mut w = worker.borrow_mut();
    w.kernel = None;
    w.clients.keys.link_lost();
    w.link_owes.watch.link_ended();
    w.core.kernel_lost();
    if w.stopping || w.link_owes.stop_asked || w.link_owes.reset.is_some() {
        Ok(())
    } else {
        let gone = WorkerError::KernelGone(ended);
        let failed = EventKind::KernelFailed {
            why: gone.to_string(),
        };
        w.tell_event(wall_ms(), failed);
        Err(gone)
    }
}

async fn connect(
    worker: &Rc<RefCell<Worker>>,
    paths: &Paths,
) -> Result<(UnixStream, FromKernel), WorkerError> {
    let (id, files) = {
        let w = worker.borrow();
        (w.meta.id.clone(), w.files.clone())
    };
    let socket = paths.kernel_socket(&id);
    let mut said_waiting = false;
    let mut refused = 0;
    loop {
        let live = read_json::<KernelRecord>(&files.kernel())
            .ok()
            .flatten()
            .filter(|k| is_alive(k.identity));
        if live.is_none() {
            crate::host::kernels::start(&id, paths).await?;
        }
        let mut stream = match UnixStream::connect(&socket).await {
            Ok(stream) => stream,
            Err(e) => {
                refused = after_refusal(&id, live, refused + 1, &e).await;
                tokio::time::sleep(RETRY).await;
                continue;
            }
        };
        let answer = exchange_hellos(&mut stream, &id).await?;
        let FromKernel::Hello { protocol, jobs, .. } = &answer else {
            return Err(WorkerError::Kernel {
                id,
                detail: format!("unexpected {answer:?}"),
            });
        };
        if *protocol == KERNEL_PROTOCOL {
            return Ok((stream, answer));
        }
        // Another version: let it finish its runs, then replace it.
        if jobs.values().any(|s| matches!(s, JobState::Running)) {
            if !said_waiting {
                tracing::warn!(
                    "the kernel speaks protocol {protocol}: waiting for its runs to end"
                );
                said_waiting = true;
            }
            // A kernel of another protocol tells this worker nothing it
            // can read, and nothing on disk marks every end (a user bash's
            // is not kept): its runs' ends are asked about again after a
            // pause.
            tokio::time::sleep(Duration::from_millis(KERNEL_RUNS_POLL_MS)).await;
            continue;
        }
        tracing::info!("replacing an idle kernel of protocol {protocol}");
        let _ = write_frame(&mut stream, &ToKernel::Stop).await;
        let _ = read_frame_bytes(&mut stream).await;
        tokio::time::sleep(RETRY).await;
    }
}

/// End a live kernel that refused `refused` connections; the count to go on with.
async fn after_refusal(
    id: &str,
    live: Option<KernelRecord>,
    refused: u32,
    e: &std::io::Error,
) -> u32 {
    // A live kernel records itself only once it listens: one that
    // keeps refusing is broken; it is ended (by identity) and
    // replaced, like a kernel that died.
    if let (Some(kernel), true) = (live, refused >= UNREACHABLE_AFTER) {
        tracing::warn!(
            "the kernel ({}) is unreachable ({e}): ending it",
            kernel.identity.pid
        );
        crate::host::kernels::end(id, kernel.identity).await;
        return 0;
    }
    refused
}

/// Send the kernel this worker's hello and read its answer.
async fn exchange_hellos(stream: &mut UnixStream, id: &str) -> Result<FromKernel, WorkerError> {
    let kernel = |e: crate::protocol::frame::FrameError| WorkerError::Kernel {
        id: id.to_string(),
        detail: e.to_string(),
    };
    let hello = ToKernel::Hello {
        protocol: KERNEL_PROTOCOL,
        build_id: build_id().to_string(),
    };
    write_frame(stream, &hello).await.map_err(kernel)?;
    read_frame(stream).await.map_err(kernel)
}

/// Take the kernel's greeting: the restore notice, then every run the
/// transcript left open, as the core decides.
fn greet(w: &mut Worker, hello: FromKernel) -> Result<(), WorkerError> {
    let FromKernel::Hello {
        pid,
        restored,
        restore_id,
        jobs,
        background,
        terminals,
        ..
    } = hello
    else {
        return Ok(());
    };
    // Before the jobs are followed: a screen rebuilt then takes its sizes.
    w.screens.heard_sizes(terminals);
    if restored.is_some() {
        log_revival(&w.meta.id, &jobs, w.core.queue().count());
    }
    if let Some(text) = restored {
        let held = w.store.restore_ids();
        if let Some(MessageKind::RestoreNotice { restore }) =
            offered_restore_notice(restore_id, &held, w.store.restores())
        {
            w.append(EntryBody::Notice {
                text: format!("kernel restored from its snapshot (restore {restore}): {text}"),
                restore: Some(restore),
                restore_id,
            })?;
        }
    }
    let actions = w.core.kernel_hello(pid, &jobs, background);
    for action in &actions {
        if let Action::Kernel(ToKernel::Follow { job, from }) = action {
            tracing::info!(job, from, "following {job} from byte {from} of its spool");
        }
    }
    // Only the ends of runs are retried: an end a greeting makes (a user
    // bash no kernel knows) that cannot be stored is logged, and what
    // follows it (following the kernel's jobs among it) still happens.
    let mut held = w.apply(actions);
    while !held.is_empty() {
        let unstored = held.remove(0);
        tracing::error!("not stored: {unstored:?}");
        held = w.apply(held);
    }
    Ok(())
}

/// Say in the worker's journal that its session was revived: a kernel
/// started over the snapshot, the one before it gone (a reboot, or its
/// crash) with runs it had accepted or inputs still queued. A session woken
/// from rest has neither and is not called revived.
fn log_revival(id: &str, jobs: &BTreeMap<String, JobState>, queued: usize) {
    let lost = jobs
        .iter()
        .filter(|(job, state)| job.starts_with('r') && matches!(state, JobState::Lost))
        .count();
    if lost > 0 || queued > 0 {
        tracing::info!(
            lost,
            queued,
            "session {id} revived over its snapshot (its kernel was gone): \
             {lost} run(s) that kernel had accepted end interrupted, never run again; \
             {queued} queued input(s) go on"
        );
    }
}

/// How much of a spool file is read at a time.
const SPOOL_READ_BYTES: usize = 1024 * 1024;

/// Output is read from the spool while its live clients have less than
/// this queued, or after waiting `FOLLOWER_PATIENCE_MS` (a client that
/// reads nothing then falls behind and catches up from the transcript).
const FOLLOW_AHEAD_BYTES: usize = 4 << 20;

/// Feed `job`'s output records from `from` to `end` of its spool file to
/// the core, a chunk at a time (other work goes on between chunks).
async fn read_spooled(
    worker: &Rc<RefCell<Worker>>,
    (job, indexes): (&str, &mut Indexes),
    mut from: u64,
    end: u64,
) -> Result<(), WorkerError> {
    let spool = worker.borrow().store.spool.clone();
    while from < end {
        let chunk = spool
            .read(job, from, end, SPOOL_READ_BYTES)
            .map_err(WorkerError::Spool)?;
        if chunk.records.is_empty() {
            // The file is shorter than the kernel said: it is gone (the
            // job was forgotten) or was cut; nothing more to read.
            break;
        }
        let next = chunk.next;
        take_records(worker, (job, &mut *indexes), from, chunk).await;
        from = next;
    }
    Ok(())
}

/// Records of `job` the kernel sent inline: the same records the spool
/// holds from `from`, taken as if read from the file.
async fn take_inline(
    worker: &Rc<RefCell<Worker>>,
    (job, indexes): (&str, &mut Indexes),
    from: u64,
    records: Vec<InlineRecord>,
) {
    let Some(next) = records.last().map(|record| record.end) else {
        return;
    };
    let records = records
        .into_iter()
        .map(|record| (record.stream, Bytes::from(record.data), record.end))
        .collect();
    take_records(worker, (job, indexes), from, Chunk { records, next }).await;
}

/// Index, store and show `chunk`, the records of `job`'s spool from
/// `from`; then keep pace with the clients that follow it.
async fn take_records(
    worker: &Rc<RefCell<Worker>>,
    (job, indexes): (&str, &mut Indexes),
    from: u64,
    chunk: Chunk,
) {
    let session = worker.borrow().files.dir.clone();
    indexes.read(&session, job, from, &chunk.records);
    {
        let mut w = worker.borrow_mut();
        let spool = w.store.spool.clone();
        let stored = w.core.follows(job);
        let unstored = w.store.unstored_output;
        for (stream, bytes, record_end) in chunk.records {
            let actions = w.core.output(job, stream, record_end, bytes);
            w.apply(actions);
        }
        // The spool's pages are handed back behind what the transcript
        // holds (copied or pointed to), in steps as the output flows,
        // so a flood recycles its pages: the first release of a step
        // starts writing it to disk, a later one drops it once clean
        // (advice only: the bytes stay, and the transcript's stored
        // records point to them). The next group commit, which syncs
        // them, releases the rest.
        if stored && w.core.follows(job) && w.store.unstored_output == unstored {
            let step = |at: u64| at / page_cache::RECYCLE_BYTES;
            if step(chunk.next) > step(from) {
                spool.release(job, chunk.next);
            }
            w.store.spool_stored.insert(job.to_string(), chunk.next);
        }
    }
    // Keep pace with the clients that follow it, up to a point: one
    // that does not read within `FOLLOWER_PATIENCE_MS` falls behind and
    // is fed from the transcript (`Outbox::send_output`).
    let followers = worker.borrow().followers(job);
    for follower in followers.iter().filter(|f| !f.is_behind()) {
        let patience = Duration::from_millis(FOLLOWER_PATIENCE_MS);
        let waited = tokio::time::timeout(patience, follower.below(FOLLOW_AHEAD_BYTES)).await;
        if waited.is_err() {
            follower.stall();
        }
    }
    tokio::task::yield_now().await;
}

async fn serve(
    worker: &Rc<RefCell<Worker>>,
    read: &mut tokio::io::BufReader<OwnedReadHalf>,
    wake_runs: &tokio::sync::Notify,
) -> String {
    let mut indexes = Indexes::default();
    loop {
        let message = match read_frame::<FromKernel, _>(read).await {
            Ok(message) => message,
            Err(e) => return e.to_string(),
        };
        let answers_again = worker.borrow_mut().link_owes.watch.heard(mono_ms());
        if let Some(again) = answers_again {
            worker.borrow_mut().tell_kernel_silence(again);
        }
        match message {
            FromKernel::Spooled { job, from, end } => {
                if let Err(e) = read_spooled(worker, (&job, &mut indexes), from, end).await {
                    return e.to_string();
                }
            }
            FromKernel::Output { job, from, records } => {
                take_inline(worker, (&job, &mut indexes), from, records).await
            }
            FromKernel::Ended { job, end } => {
                indexes.ended(&job);
                // An end clears the waiting (the kernel's word may come
                // after it, when the job is forgotten).
                super::waiting::waiting_changed(&mut worker.borrow_mut(), &job, false);
                let actions = worker.borrow_mut().core.ended(&job, end.as_ref());
                super::serve::apply_until_stored(worker, actions).await;
                worker.borrow_mut().work_changed();
                wake_runs.notify_one();
            }
            FromKernel::Settled { job } => {
                let mut w = worker.borrow_mut();
                let actions = w.core.settled(&job);
                w.apply(actions);
                w.work_changed();
            }
            FromKernel::Jobs { background } => {
                let mut w = worker.borrow_mut();
                let actions = w.core.background_jobs(background);
                w.apply(actions);
                w.work_changed();
            }
            FromKernel::Notice { text } => store_notice(worker, text),
            FromKernel::Error { message } => {
                tracing::error!("kernel: {message}");
                store_notice(worker, format!("the kernel: {message}"));
            }
            FromKernel::Waiting { job, waiting } => {
                super::waiting::waiting_changed(&mut worker.borrow_mut(), &job, waiting);
            }
            FromKernel::Resized { job, size, at } => {
                let taken = ToKernel::Resize { job, size, at };
                worker.borrow_mut().screens_see_kernel(&taken);
            }
            FromKernel::Keyed { job, error } => {
                worker.borrow_mut().clients.keys.keyed(&job, error);
            }
            FromKernel::Started { .. } | FromKernel::Hello { .. } => {}
            FromKernel::Stopped => return "it stopped".into(),
        }
    }
}

/// The indexes of the jobs' output files (`session::windows::index`),
/// written as their output is read; a job whose index cannot follow has
/// none written (its readers read its output instead).
#[derive(Default)]
struct Indexes(BTreeMap<String, Option<IndexWriter>>);

impl Indexes {
    /// `job`'s records from `from`, as read from its output file.
    fn read(&mut self, session: &Path, job: &str, from: u64, records: &[(Stream, Bytes, u64)]) {
        let writer = self.0.entry(job.to_string()).or_insert_with(|| {
            let output = open_job(session, job).ok()?;
            IndexWriter::open(session, job, &output, from)
        });
        let records = records.iter().map(|(s, b, e)| (*s, &b[..], *e));
        if writer.as_mut().is_some_and(|w| !w.read(from, records)) {
            *writer = None;
        }
    }

    fn ended(&mut self, job: &str) {
        self.0.remove(job);
    }
}

/// Store what the kernel says as a notice in the transcript.
fn store_notice(worker: &Rc<RefCell<Worker>>, text: String) {
    let _ = worker.borrow_mut().append(EntryBody::Notice {
        text,
        restore: None,
        restore_id: None,
    });
}
