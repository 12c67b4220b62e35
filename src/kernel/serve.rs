//! The kernel's event loops: job reports from its shell, children to reap,
//! the socket its worker connects to, and the tick that counts background
//! jobs and keeps busy evidence fresh while no worker is connected.

use std::cell::{Cell, RefCell};
use std::os::fd::OwnedFd;
use std::rc::Rc;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::net::unix::OwnedWriteHalf;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;
use tokio::sync::Notify;

use super::hang_up::HangUps;
use super::jobs::{Kernel, Readers};
use super::zygote::{self, Report};
use super::{output, tree};
use crate::build_id::build_id;
use crate::clock::{mono_ms, wall_ms};
use crate::host::busy_journal::{BusyJournal, JournalLine};
use crate::host::process::own_identity;
use crate::host::socket::from_own_user;
use crate::laws::revival::{busy_refresh, BusyState, OwnRecord, RefreshAction};
use crate::laws::timing::{KERNEL_TICK_MS, POLL_MS, TM};
use crate::laws::work::{session_work, Activity, WorkKind, WorkSet};
use crate::protocol::frame::{encode, read_frame, FrameError};
use crate::protocol::kernel::{FromKernel, ToKernel, KERNEL_PROTOCOL};
use crate::session::snapshot::shell_defaults;

/// Frames waiting for a slow worker: a bound on the kernel's memory (each
/// frame holds at most one spool record).
const OUTBOX_FRAMES: usize = 16;

pub type Shared = Rc<RefCell<Kernel>>;

/// What the kernel's loops share besides the books.
pub struct Context {
    pub kernel: Shared,
    pub session: String,
    pub cancel_grace: Duration,
    pub exit: Rc<Notify>,
    /// The control channels of the connected workers.
    pub workers: Rc<RefCell<Vec<mpsc::UnboundedSender<Vec<u8>>>>>,
    /// The inputs waiting in the worker's queue, as it last told: kept
    /// after it leaves, so the kernel's busy evidence counts them.
    pub queued_inputs: Cell<u32>,
    /// What closes a job's output when its user bash is hung up.
    pub hang_ups: HangUps,
}

pub async fn run(
    ctx: Rc<Context>,
    listener: UnixListener,
    reports: OwnedFd,
    journal: BusyJournal,
) -> Result<(), String> {
    tokio::task::spawn_local(read_reports(ctx.clone(), reports));
    tokio::task::spawn_local(reap_children(ctx.clone()));
    tokio::task::spawn_local(tick(ctx.clone(), journal));
    tokio::task::spawn_local(stop_on_sigterm(ctx.clone()));
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                if !from_own_user(&stream) {
                    continue;
                }
                tokio::task::spawn_local(connection(ctx.clone(), stream));
            }
            _ = ctx.exit.notified() => return Ok(()),
        }
    }
}

/// Send a control message (never held back by output waiting for a slow
/// worker, never dropped).
fn send(control: &mpsc::UnboundedSender<Vec<u8>>, message: &FromKernel) {
    if let Ok(frame) = encode(message) {
        let _ = control.send(frame);
    }
}

/// Send a control message to every connected worker.
fn broadcast(ctx: &Context, message: &FromKernel) {
    let Ok(frame) = encode(message) else { return };
    ctx.workers
        .borrow_mut()
        .retain(|control| control.send(frame.clone()).is_ok());
}

/// One connection's writer: control messages first, then output (a
/// bounded queue, so a slow worker holds back the spool's readers, not
/// the kernel's memory).
async fn writer(
    mut write: OwnedWriteHalf,
    mut control: mpsc::UnboundedReceiver<Vec<u8>>,
    mut output: mpsc::Receiver<Vec<u8>>,
) {
    use tokio::io::AsyncWriteExt;
    loop {
        let frame = tokio::select! {
            biased;
            Some(frame) = control.recv() => frame,
            Some(frame) = output.recv() => frame,
            else => return,
        };
        if write.write_all(&frame).await.is_err() {
            return;
        }
    }
}

async fn connection(ctx: Rc<Context>, stream: UnixStream) {
    let (mut read, write) = stream.into_split();
    let (tx, output_rx) = mpsc::channel(OUTBOX_FRAMES);
    let (control, control_rx) = mpsc::unbounded_channel();
    let writer = tokio::task::spawn_local(writer(write, control_rx, output_rx));
    let mut followers = Vec::new();
    serve_connection(&ctx, &mut read, &tx, &control, &mut followers).await;
    // The worker is gone (or asked for the stop): its followers and writer
    // end with it, and the kernel knows it has no worker.
    for follower in followers {
        follower.abort();
    }
    writer.abort();
    ctx.workers
        .borrow_mut()
        .retain(|c| !c.same_channel(&control));
}

async fn serve_connection(
    ctx: &Rc<Context>,
    read: &mut tokio::net::unix::OwnedReadHalf,
    tx: &mpsc::Sender<Vec<u8>>,
    control: &mpsc::UnboundedSender<Vec<u8>>,
    followers: &mut Vec<tokio::task::JoinHandle<()>>,
) {
    if !greet(ctx, read, control).await {
        return;
    }
    ctx.workers.borrow_mut().push(control.clone());
    loop {
        let request = match read_frame::<ToKernel, _>(read).await {
            Ok(request) => request,
            Err(FrameError::Closed) => break,
            Err(e) => {
                send(
                    control,
                    &FromKernel::Error {
                        message: e.to_string(),
                    },
                );
                break;
            }
        };
        match request {
            ToKernel::Hello { .. } => {}
            ToKernel::Start {
                job,
                command,
                stdin_of,
            } => start_job(ctx, control, job, &command, stdin_of),
            ToKernel::Follow { job, from } => {
                followers.retain(|f| !f.is_finished());
                followers.push(tokio::task::spawn_local(follow(
                    ctx.clone(),
                    tx.clone(),
                    job,
                    from,
                )));
            }
            ToKernel::Cancel { job } => {
                tokio::task::spawn_local(cancel(ctx.clone(), job));
            }
            ToKernel::HangUp { job } => {
                tokio::task::spawn_local(hang_up(ctx.clone(), job));
            }
            ToKernel::Forget { job } => forget(ctx, &job),
            ToKernel::Claim => {
                let mut kernel = ctx.kernel.borrow_mut();
                match kernel.claim() {
                    // Ready ahead of the session's first job: its output
                    // pipes (the spare's template, restoring the first
                    // snapshot now, takes the job itself).
                    Ok(true) => kernel.prepare_spare(),
                    Ok(false) => {}
                    Err(e) => tracing::warn!("{e}"),
                }
            }
            ToKernel::Queued { inputs } => ctx.queued_inputs.set(inputs),
            ToKernel::Stop => {
                stop(ctx, control).await;
                return;
            }
        }
    }
}

/// The worker stored `job`'s end and output: the spool may drop it.
fn forget(ctx: &Context, job: &str) {
    ctx.hang_ups.forget(job);
    ctx.kernel.borrow_mut().forget(job);
}

/// Answer the worker's hello; whether the connection goes on to serve it.
async fn greet(
    ctx: &Rc<Context>,
    read: &mut tokio::net::unix::OwnedReadHalf,
    control: &mpsc::UnboundedSender<Vec<u8>>,
) -> bool {
    let Ok(ToKernel::Hello { protocol, .. }) = read_frame::<ToKernel, _>(read).await else {
        send(
            control,
            &FromKernel::Error {
                message: "expected hello first".into(),
            },
        );
        return false;
    };
    send(control, &hello(ctx, protocol));
    if protocol != KERNEL_PROTOCOL {
        // Another version may only ask this kernel to stop.
        if let Ok(ToKernel::Stop) = read_frame::<ToKernel, _>(read).await {
            stop(ctx, control).await;
        }
        return false;
    }
    true
}

/// The hello to a worker of `protocol`; one of this protocol is offered the restore.
fn hello(ctx: &Context, protocol: u32) -> FromKernel {
    let k = ctx.kernel.borrow();
    let identity = own_identity();
    FromKernel::Hello {
        protocol: KERNEL_PROTOCOL,
        build_id: build_id().to_string(),
        pid: identity.pid,
        start_time: identity.start_time,
        restored: match (&k.restored, protocol == KERNEL_PROTOCOL) {
            (Some(restore), true) => Some(restore.text.clone()),
            _ => None,
        },
        restore_id: match (&k.restored, protocol == KERNEL_PROTOCOL) {
            (Some(restore), true) => Some(restore.id),
            _ => None,
        },
        jobs: k.job_states(),
        background: k.background,
    }
}

/// Start `job` and tell the worker whether the kernel accepted it.
fn start_job(
    ctx: &Context,
    control: &mpsc::UnboundedSender<Vec<u8>>,
    job: String,
    command: &str,
    stdin_of: Option<u32>,
) {
    let started = ctx.kernel.borrow_mut().start(&job, command, stdin_of);
    match started {
        Ok(Some(readers)) => {
            spawn_readers(ctx, &job, readers);
            send(
                control,
                &FromKernel::Started {
                    job,
                    accepted: true,
                },
            );
        }
        Ok(None) => {
            send(
                control,
                &FromKernel::Started {
                    job,
                    accepted: false,
                },
            );
        }
        Err(message) => {
            send(control, &FromKernel::Error { message });
        }
    }
    // The next job's FIFOs, made while this one runs.
    ctx.kernel.borrow_mut().prepare_spare();
}

fn spawn_readers(ctx: &Context, job: &str, readers: Readers) {
    let hang_up = ctx.hang_ups.register(job);
    for (stream, reader) in readers {
        tokio::task::spawn_local(output::read(
            ctx.kernel.clone(),
            job.to_string(),
            stream,
            (reader, hang_up.clone()),
        ));
    }
}

/// Tell the worker how far `job`'s spool has grown from `from`, then its
/// end, then how far it grows until it settles.
async fn follow(ctx: Rc<Context>, tx: mpsc::Sender<Vec<u8>>, job: String, mut from: u64) {
    let mut changed = ctx.kernel.borrow().changed.subscribe();
    let mut end_sent = false;
    loop {
        changed.borrow_and_update();
        let (spool, state) = {
            let k = ctx.kernel.borrow();
            let state = match k.jobs.get(&job) {
                Some(j) => (true, j.end.clone(), j.open_streams == 0),
                // Not live here: what the spool holds is all there is.
                None => (false, k.spool.end(&job), true),
            };
            (k.spool.clone(), state)
        };
        let (live, end, settled) = state;
        // Everything written so far: the worker reads the records from
        // the spool file itself (no copy of the bytes through this socket).
        let written = spool.len(&job);
        if written > from {
            let message = FromKernel::Spooled {
                job: job.clone(),
                from,
                end: written,
            };
            if tx.send(encode(&message).unwrap_or_default()).await.is_err() {
                return;
            }
            from = written;
        }
        // A job's end is told after the output its shell wrote before it
        // ended (still in its FIFOs a moment after): the reader spools it
        // and wakes this loop.
        let unread = live && ctx.kernel.borrow().unread_output(&job);
        if !end_sent && !unread && (end.is_some() || !live) {
            end_sent = true;
            let end = match live {
                true => ctx.kernel.borrow_mut().end_to_tell(&job),
                false => end.clone(),
            };
            let message = FromKernel::Ended {
                job: job.clone(),
                end,
            };
            if tx.send(encode(&message).unwrap_or_default()).await.is_err() {
                return;
            }
        }
        if end_sent && (settled || !live) {
            let _ = tx
                .send(encode(&FromKernel::Settled { job }).unwrap_or_default())
                .await;
            return;
        }
        if changed.changed().await.is_err() {
            return;
        }
    }
}

/// Cancel `job`: SIGINT to its process group, SIGTERM after the cancel
/// grace, SIGKILL after another; an end is recorded even if its shell is
/// killed before it can report.
async fn cancel(ctx: Rc<Context>, job: String) {
    let group = {
        let mut k = ctx.kernel.borrow_mut();
        let Some(j) = k.jobs.get_mut(&job) else {
            return;
        };
        if j.end.is_some() {
            return;
        }
        j.cancelled = true;
        j.group
    };
    let group = match group {
        Some(group) => group,
        None => match group_once_started(&ctx, &job).await {
            Some(group) => group,
            None => return,
        },
    };
    let ended = || ctx.kernel.borrow().job_ended(&job);
    for signal in [
        nix::sys::signal::Signal::SIGINT,
        nix::sys::signal::Signal::SIGTERM,
        nix::sys::signal::Signal::SIGKILL,
    ] {
        tree::signal_group(group, signal);
        let deadline = tokio::time::Instant::now() + ctx.cancel_grace;
        while tokio::time::Instant::now() < deadline {
            if ended() {
                return;
            }
            // Killed whole, the group cannot report its end (its reporter
            // went with it): recorded as soon as it is gone.
            if signal == nix::sys::signal::Signal::SIGKILL && !tree::group_alive(group) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
        }
    }
    if !ended() {
        ctx.kernel.borrow_mut().ended(&job, 128 + libc::SIGKILL);
    }
}

/// Hang up `job` (`kernel::hang_up`): once its shell has opened its
/// output (it reports its group after that), close the output, then
/// SIGHUP its process group.
async fn hang_up(ctx: Rc<Context>, job: String) {
    let group = {
        let k = ctx.kernel.borrow();
        match k.jobs.get(&job) {
            Some(j) if j.end.is_none() => j.group,
            _ => return,
        }
    };
    let group = match group {
        Some(group) => group,
        None => match group_once_started(&ctx, &job).await {
            Some(group) => group,
            None => return,
        },
    };
    tracing::info!("{job}: its client went away; hanging it up");
    ctx.hang_ups.close_output(&job);
    tree::signal_group(group, nix::sys::signal::Signal::SIGHUP);
}

/// The process group of `job`, which was handed to a shell that has not
/// reported it yet (a cancel sent the moment a run starts): waited for up
/// to the cancel grace. `None` if the job ends first or never reports.
async fn group_once_started(ctx: &Context, job: &str) -> Option<u32> {
    let deadline = tokio::time::Instant::now() + ctx.cancel_grace;
    while tokio::time::Instant::now() < deadline {
        {
            let k = ctx.kernel.borrow();
            let j = k.jobs.get(job)?;
            if j.end.is_some() {
                return None;
            }
            if j.group.is_some() {
                return j.group;
            }
        }
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    }
    tracing::warn!("{job} was cancelled but its shell never reported its process group");
    None
}

async fn read_reports(ctx: Rc<Context>, reports: OwnedFd) {
    let Ok(mut reader) = tokio::net::unix::pipe::Receiver::from_owned_fd(reports) else {
        tracing::error!("kernel: cannot read its shell's reports");
        ctx.exit.notify_one();
        return;
    };
    let mut pending = Vec::new();
    let mut buf = vec![0u8; 4096];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => pending.extend_from_slice(&buf[..n]),
        }
        let mut ended = false;
        for report in zygote::parse_reports(&mut pending) {
            let mut k = ctx.kernel.borrow_mut();
            match report {
                Report::Started { job, group } => k.started(&job, group),
                Report::Finished { group, status } => {
                    // No job to end: a run already ended as its output
                    // closed (`Kernel::stream_closed`), whose shell has now
                    // left what the run leaves running to the kernel, to be
                    // counted below; or a job shell that never took a job
                    // (its template was dropped: no template is armed).
                    let Some(job) = k.job_of_group(group) else {
                        ended |= k.reporter_after_end(group);
                        continue;
                    };
                    // The transcript keeps every end: a log line per job would
                    // only grow the log (a file without bound on the process
                    // backend).
                    tracing::debug!(job, status, "{job} exited {status}");
                    k.ended(&job, status);
                    ended = true;
                }
                Report::Template { fifo, pid } => k.template_ready(&fifo, pid),
                Report::Defaults { declared, umask } => {
                    k.shell_started(shell_defaults(&declared, &umask))
                }
            }
        }
        // What the job left running came to the kernel (its subreaper)
        // when the job's shell exited, before its end was reported; no
        // signal says so, so it is counted now, not at the next tick:
        // once the end is on its way (a task after the writer's), so the
        // scan of /proc never delays a round trip.
        // So is the template over a changed snapshot: its shell's fork
        // would compete with the end's way to the client for the CPU.
        if ended {
            let ctx = ctx.clone();
            tokio::task::spawn_local(async move {
                count_background(&ctx);
                // Behind the follower's send, then the writer's write.
                tokio::task::yield_now().await;
                ctx.kernel.borrow_mut().arm_template();
            });
        }
        flush_notices(&ctx);
    }
}

fn flush_notices(ctx: &Context) {
    let notices = std::mem::take(&mut ctx.kernel.borrow_mut().notices);
    for text in notices {
        broadcast(ctx, &FromKernel::Notice { text });
    }
}

/// Reap ended children: the shell (started again if it died) and the
/// orphans of runs, which come to the kernel as their subreaper.
async fn reap_children(ctx: Rc<Context>) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut children) = signal(SignalKind::child()) else {
        return;
    };
    loop {
        let reaped = tree::reap();
        let shell_died = {
            let k = ctx.kernel.borrow();
            reaped.contains(&k.shell_pid) && !k.stopping
        };
        if shell_died {
            let restarted = {
                let k = ctx.kernel.borrow();
                zygote::start(&k.pipes)
            };
            match restarted {
                Ok(pid) => {
                    tracing::warn!("the kernel's shell died; started another ({pid})");
                    ctx.kernel.borrow_mut().shell_pid = pid;
                }
                Err(e) => {
                    tracing::error!("{e}");
                    ctx.exit.notify_one();
                    return;
                }
            }
        }
        count_background(&ctx);
        if children.recv().await.is_none() {
            return;
        }
    }
}

fn count_background(ctx: &Context) {
    let count = {
        let k = ctx.kernel.borrow();
        tree::children(std::process::id())
            .into_iter()
            .filter(|&pid| pid != k.shell_pid)
            .count() as u32
    };
    let changed = {
        let mut k = ctx.kernel.borrow_mut();
        let changed = k.background != count;
        k.background = count;
        changed
    };
    if changed {
        tracing::info!(background = count, "background jobs: {count}");
        broadcast(ctx, &FromKernel::Jobs { background: count });
    }
}

/// The kernel's work set, as the work law reads it: its jobs, and the
/// inputs its worker last said wait in the queue.
fn work(k: &Kernel, queued_inputs: u32) -> WorkSet {
    let mut activities = Vec::new();
    if queued_inputs > 0 {
        activities.push(Activity::Work(WorkKind::QueuedInput));
    }
    for j in k.jobs.values() {
        if j.end.is_none() {
            activities.push(Activity::Work(WorkKind::Run));
        } else if j.open_streams > 0 {
            activities.push(Activity::Work(WorkKind::UnsettledChild));
        }
    }
    if k.background > 0 {
        activities.push(Activity::Work(WorkKind::BackgroundJob));
    }
    session_work(&activities)
}

/// Every second: count background jobs (reparented orphans send no
/// signal), and while no worker is connected, keep busy evidence fresh as
/// the refresh law says, so a reboot revives the session.
async fn tick(ctx: Rc<Context>, journal: BusyJournal) {
    let mut latest: Option<OwnRecord> = None;
    loop {
        tokio::time::sleep(Duration::from_millis(KERNEL_TICK_MS)).await;
        // A session removed from under the kernel takes its processes with it.
        if !ctx.kernel.borrow().files.exist() {
            tracing::warn!("the session's directory is gone: stopping");
            let (control, _rx) = mpsc::unbounded_channel();
            stop(&ctx, &control).await;
            return;
        }
        tree::reap();
        count_background(&ctx);
        flush_notices(&ctx);
        ctx.kernel.borrow_mut().drop_idle_template(mono_ms());
        let no_worker = {
            ctx.workers.borrow_mut().retain(|c| !c.is_closed());
            ctx.workers.borrow().is_empty()
        };
        if !no_worker {
            latest = None;
            continue;
        }
        let work = work(&ctx.kernel.borrow(), ctx.queued_inputs.get());
        let now = mono_ms();
        let state = match busy_refresh(work, latest, now) {
            RefreshAction::Nothing => continue,
            RefreshAction::RecordBusy => BusyState::Busy,
            RefreshAction::RecordIdle => BusyState::Idle,
        };
        let line = JournalLine {
            session: ctx.session.clone(),
            state,
            at_ms: Some(wall_ms()),
            work,
            build: build_id().to_string(),
        };
        match journal.record(&line) {
            Ok(()) => latest = Some(OwnRecord { state, at_ms: now }),
            Err(e) => tracing::error!("cannot record busy evidence: {e}"),
        }
    }
}

/// End every process of the session, then the kernel.
async fn stop(ctx: &Context, control: &mpsc::UnboundedSender<Vec<u8>>) {
    {
        let mut k = ctx.kernel.borrow_mut();
        k.stopping = true;
        k.drop_spare();
    }
    tracing::info!("stopping: every process of the session ends");
    let killed = tree::end_descendants(
        Duration::from_millis(TM.kernel.run_term_grace),
        Duration::from_millis(TM.supervisor.child_drain),
    );
    if killed > 0 {
        tracing::warn!("{killed} processes did not end on SIGTERM and were killed");
    }
    send(control, &FromKernel::Stopped);
    // Let the writer send it before the loops end.
    tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    ctx.exit.notify_one();
}

/// SIGTERM (a manager stopping the kernel's unit, a shutdown of the
/// machine) is a stop.
async fn stop_on_sigterm(ctx: Rc<Context>) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut terms) = signal(SignalKind::terminate()) else {
        return;
    };
    if terms.recv().await.is_some() {
        let (control, _rx) = mpsc::unbounded_channel();
        stop(&ctx, &control).await;
    }
}
