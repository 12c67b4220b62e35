//! The kernel's event loops: job reports from its shell, children to reap
//! (a SIGCHLD or a job's end recounts the background jobs: the kernel is
//! their subreaper), and the socket its worker connects to. Busy evidence
//! while no worker is connected is the core's (`drive`); a removed session
//! directory stops the kernel (`session_dir`).

use std::cell::{Cell, RefCell};
use std::os::fd::OwnedFd;
use std::rc::Rc;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::net::unix::OwnedWriteHalf;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::Notify;
use tokio::sync::{mpsc, watch};

use super::error::KernelError;
use super::hang_up::HangUps;
use super::jobs::{Kernel, Readers};
use super::zygote::{self, Report};
use super::{output, tree};
use crate::build_id::build_id;
use crate::clock::mono_ms;
use crate::host::busy_journal::BusyJournal;
use crate::host::process::own_identity;
use crate::host::socket::from_own_user;
use crate::laws::timing::{POLL_MS, TM};
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
    pub exit: Rc<Notify>,
    /// Wakes the core's driver: an event may have moved its deadline or
    /// queued an action.
    pub wake: Notify,
    /// Turns on once the stop has ended every process of the session.
    pub stopped: watch::Sender<bool>,
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
) -> Result<(), KernelError> {
    tokio::task::spawn_local(read_reports(ctx.clone(), reports));
    tokio::task::spawn_local(reap_children(ctx.clone()));
    tokio::task::spawn_local(super::drive::drive(ctx.clone(), journal));
    tokio::task::spawn_local(super::session_dir::stop_when_gone(ctx.clone()));
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
pub(super) fn send(control: &mpsc::UnboundedSender<Vec<u8>>, message: &FromKernel) {
    if let Ok(frame) = encode(message) {
        let _ = control.send(frame);
    }
}

/// Send a control message to every connected worker.
pub(super) fn broadcast(ctx: &Context, message: &FromKernel) {
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
    let (read, write) = stream.into_split();
    let (tx, output_rx) = mpsc::channel(OUTBOX_FRAMES);
    let (control, control_rx) = mpsc::unbounded_channel();
    let writer = tokio::task::spawn_local(writer(write, control_rx, output_rx));
    let mut followers = Vec::new();
    let mut read = crate::protocol::frame::frame_reader(read);
    let served = serve_connection(&ctx, &mut read, &tx, &control, &mut followers).await;
    // The worker is gone (or asked for the stop): its followers end with
    // it, and the kernel knows it has no worker.
    for follower in followers {
        follower.abort();
    }
    ctx.workers
        .borrow_mut()
        .retain(|c| !c.same_channel(&control));
    // Without a worker, busy evidence is the kernel's to write.
    ctx.wake.notify_one();
    if served == Served::Stop {
        send(&control, &FromKernel::Stopped);
        // The writer ends once it has sent what is queued and every sender
        // is gone: the kernel exits after that, or after a poll at most.
        drop((control, tx));
        let _ = tokio::time::timeout(Duration::from_millis(POLL_MS), writer).await;
        ctx.exit.notify_one();
    } else {
        writer.abort();
    }
}

/// A worker's connection, read a frame at a time.
pub(super) type FrameReader = tokio::io::BufReader<tokio::net::unix::OwnedReadHalf>;

/// How a connection's service ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Served {
    /// The worker left (or spoke out of turn).
    Left,
    /// The worker asked the kernel to stop, and it has.
    Stop,
}

async fn serve_connection(
    ctx: &Rc<Context>,
    read: &mut FrameReader,
    tx: &mpsc::Sender<Vec<u8>>,
    control: &mpsc::UnboundedSender<Vec<u8>>,
    followers: &mut Vec<tokio::task::JoinHandle<()>>,
) -> Served {
    match greet(ctx, read, (control, tx)).await {
        Greeted::Serve => {}
        Greeted::Stop => return Served::Stop,
        Greeted::Leave => return Served::Left,
    }
    ctx.workers.borrow_mut().push(control.clone());
    tell_waiting_jobs(ctx, control);
    ctx.wake.notify_one();
    loop {
        let request = match read_frame::<ToKernel, _>(read).await {
            Ok(request) => request,
            Err(FrameError::Closed) => return Served::Left,
            Err(e) => {
                send(
                    control,
                    &FromKernel::Error {
                        message: e.to_string(),
                    },
                );
                return Served::Left;
            }
        };
        match request {
            ToKernel::Hello { .. } | ToKernel::Typist { .. } => {}
            start @ ToKernel::Start { .. } => start_job(ctx, control, start),
            request @ (ToKernel::Keys { .. } | ToKernel::Resize { .. }) => {
                terminal_request(ctx, request, control)
            }
            ToKernel::Follow { job, from } => {
                followers.retain(|f| !f.is_finished());
                followers.push(tokio::task::spawn_local(follow(
                    ctx.clone(),
                    tx.clone(),
                    job,
                    from,
                )));
            }
            ToKernel::Cancel { job } => super::drive::cancel(ctx, &job),
            ToKernel::HangUp { job } => super::drive::hang_up(ctx, &job),
            ToKernel::Forget { job } => forget(ctx, &job),
            ToKernel::Claim => {
                let mut kernel = ctx.kernel.borrow_mut();
                match kernel.claim(mono_ms()) {
                    // Ready ahead of the session's first job: its output
                    // pipes (the spare's template, restoring the first
                    // snapshot now, takes the job itself).
                    Ok(true) => kernel.prepare_spare(),
                    Ok(false) => {}
                    Err(e) => tracing::warn!("{e}"),
                }
                drop(kernel);
                ctx.wake.notify_one();
            }
            ToKernel::Queued { inputs } => queued(ctx, inputs),
            ToKernel::Stop => {
                stop(ctx).await;
                return Served::Stop;
            }
        }
    }
}

/// Keys or a resize for a terminal job: its program is woken, so whether
/// it waits for input is looked at afresh.
pub(super) fn terminal_request(
    ctx: &Context,
    request: ToKernel,
    control: &mpsc::UnboundedSender<Vec<u8>>,
) {
    let mut kernel = ctx.kernel.borrow_mut();
    if let ToKernel::Keys { job, .. } | ToKernel::Resize { job, .. } = &request {
        kernel.core.terminal_nudged(job, mono_ms());
    }
    super::tty::request(&mut kernel.ttys, request, control);
    drop(kernel);
    ctx.wake.notify_one();
}

/// A worker that connects hears which terminal jobs wait for input now.
fn tell_waiting_jobs(ctx: &Context, control: &mpsc::UnboundedSender<Vec<u8>>) {
    for job in ctx.kernel.borrow().core.waiting_jobs() {
        let waiting = true;
        send(control, &FromKernel::Waiting { job, waiting });
    }
}

/// What a hello leads to.
enum Greeted {
    Serve,
    /// A worker of another protocol asked for the stop, which is done.
    Stop,
    /// The worker left, or a typist did (`typist`: an attached client's
    /// keys, served here).
    Leave,
}

/// The worker's queue holds `inputs`: work the kernel's busy evidence
/// counts once the worker is gone.
fn queued(ctx: &Context, inputs: u32) {
    ctx.queued_inputs.set(inputs);
    ctx.wake.notify_one();
}

/// The worker stored `job`'s end and output: the spool may drop it.
fn forget(ctx: &Context, job: &str) {
    ctx.hang_ups.forget(job);
    let mut kernel = ctx.kernel.borrow_mut();
    kernel.forget(job);
    if !kernel.jobs.contains_key(job) {
        kernel.ttys.forget(job);
    }
}

/// Answer the worker's hello, and say whether the connection goes on to
/// serve it.
async fn greet(
    ctx: &Rc<Context>,
    read: &mut FrameReader,
    (control, output): (&mpsc::UnboundedSender<Vec<u8>>, &mpsc::Sender<Vec<u8>>),
) -> Greeted {
    let protocol = match read_frame::<ToKernel, _>(read).await {
        Ok(ToKernel::Hello { protocol, .. }) => Some(protocol),
        Ok(ToKernel::Typist { job, size, echo }) => {
            let echo = echo.then(|| output.clone());
            super::typist::serve(ctx, read, control, (job, size, echo)).await;
            return Greeted::Leave;
        }
        _ => None,
    };
    let Some(protocol) = protocol else {
        send(
            control,
            &FromKernel::Error {
                message: "expected hello first".into(),
            },
        );
        return Greeted::Leave;
    };
    send(control, &hello(ctx, protocol));
    if protocol != KERNEL_PROTOCOL {
        // Another version may only ask this kernel to stop.
        if let Ok(ToKernel::Stop) = read_frame::<ToKernel, _>(read).await {
            stop(ctx).await;
            return Greeted::Stop;
        }
        return Greeted::Leave;
    }
    Greeted::Serve
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
        background: k.core.background(),
        terminals: k.ttys.sizes(),
    }
}

/// Start the job `start` names and tell the worker whether the kernel
/// accepted it.
fn start_job(ctx: &Context, control: &mpsc::UnboundedSender<Vec<u8>>, start: ToKernel) {
    let ToKernel::Start {
        job,
        command,
        stdin_of,
        tty,
    } = start
    else {
        return;
    };
    let started = ctx
        .kernel
        .borrow_mut()
        .start(&job, &command, (stdin_of, tty));
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
        Err(e) => {
            let message = e.to_string();
            send(control, &FromKernel::Error { message });
        }
    }
    // The next job's FIFOs, made while this one runs.
    ctx.kernel.borrow_mut().prepare_spare();
    ctx.wake.notify_one();
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
        // A stopping kernel tells no more: the ends of the runs it stops
        // are its stop, not theirs.
        if ctx.kernel.borrow().core.stopping() {
            return;
        }
        let (spool, state, spooled) = {
            let k = ctx.kernel.borrow();
            let spooled = k.jobs.get(&job).map(|j| j.spooled);
            let state = match k.books.get(&job) {
                Some(j) => (true, j.end.clone(), j.open_streams == 0),
                // Not live here: what the spool holds is all there is.
                None => (false, k.spool.end(&job), true),
            };
            (k.spool.clone(), state, spooled)
        };
        let (live, end, settled) = state;
        // Everything written so far: the worker reads the records from
        // the spool file itself, unless they are few and small (no copy
        // of a flood's bytes through this socket).
        let written = spooled.unwrap_or_else(|| spool.len(&job));
        if written > from {
            let message = grown(&ctx, &job, from, written);
            if tx.send(encode(&message).unwrap_or_default()).await.is_err() {
                return;
            }
            from = written;
        }
        // A job's end is told after the output its shell wrote before it
        // ended (still in its FIFOs a moment after): the reader spools it
        // and wakes this loop.
        // Nor before a reader that has seen its last writer go closes its
        // stream (a moment after): the end is then told settled.
        // Looked at only once there is an end to tell: a running job's
        // output is not held up by the look.
        let unread = || {
            live && {
                let k = ctx.kernel.borrow();
                k.unread_output(&job) || k.settling(&job)
            }
        };
        if !end_sent && (end.is_some() || !live) && !unread() {
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

/// What tells a worker that `job`'s spool grew from `from` to `written`:
/// the records themselves when they are few and small, else the span.
fn grown(ctx: &Context, job: &str, from: u64, written: u64) -> FromKernel {
    let kernel = ctx.kernel.borrow();
    let inline = kernel
        .jobs
        .get(job)
        .and_then(|j| j.recent.span(from, written));
    match inline {
        Some(records) => FromKernel::Output {
            job: job.to_string(),
            from,
            records,
        },
        None => FromKernel::Spooled {
            job: job.to_string(),
            from,
            end: written,
        },
    }
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
        // What its jobs say as its stop ends them is not their end.
        if ctx.kernel.borrow().core.stopping() {
            pending.clear();
            continue;
        }
        let mut ended = false;
        for report in zygote::parse_reports(&mut pending) {
            let mut k = ctx.kernel.borrow_mut();
            match report {
                Report::Started { job, group } => k.started(&job, group, mono_ms()),
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
                    k.ended(&job, status, mono_ms());
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
        // A group said, or an end: the core's deadlines moved.
        ctx.wake.notify_one();
        flush_notices(&ctx);
    }
}

pub(super) fn flush_notices(ctx: &Context) {
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
        let reaped = reap(&ctx);
        let shell_died = {
            let k = ctx.kernel.borrow();
            reaped.contains(&k.shell_pid) && !k.core.stopping()
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

/// Reap ended children, unless the kernel stops: then its stop reaps
/// them itself, off this thread, while it signals what it read is left.
fn reap(ctx: &Context) -> Vec<u32> {
    if ctx.kernel.borrow().core.stopping() {
        return Vec::new();
    }
    tree::reap()
}

fn count_background(ctx: &Context) {
    // What a stop has not reaped yet is no background job: counted, it
    // would be told to the worker as work, and recorded as busy evidence.
    if ctx.kernel.borrow().core.stopping() {
        return;
    }
    let count = {
        let k = ctx.kernel.borrow();
        crate::host::process::children(std::process::id())
            .into_iter()
            .filter(|&pid| pid != k.shell_pid)
            .count() as u32
    };
    let changed = ctx.kernel.borrow_mut().core.set_background(count);
    if changed {
        tracing::info!(background = count, "background jobs: {count}");
        broadcast(ctx, &FromKernel::Jobs { background: count });
        ctx.wake.notify_one();
    }
}

/// End every process of the session (the kernel's exit is its caller's);
/// returns once they are gone, whoever started the stop. The waits for
/// them run off the async thread, which serves on meanwhile, telling no
/// job's end.
pub(super) async fn stop(ctx: &Context) {
    let stopping = ctx.kernel.borrow().core.stopping();
    if stopping {
        let _ = ctx.stopped.subscribe().wait_for(|done| *done).await;
        return;
    }
    {
        let mut k = ctx.kernel.borrow_mut();
        k.core.stop();
        k.drop_spare();
    }
    tracing::info!("stopping: every process of the session ends");
    let ended = tokio::task::spawn_blocking(|| {
        tree::end_descendants(
            Duration::from_millis(TM.kernel.run_term_grace),
            Duration::from_millis(TM.supervisor.child_drain),
        )
    });
    match ended.await {
        Ok(0) => {}
        Ok(killed) => tracing::warn!("{killed} processes did not end on SIGTERM and were killed"),
        Err(e) => tracing::error!("ending the session's processes failed: {e}"),
    }
    ctx.stopped.send_replace(true);
}

/// SIGTERM (a manager stopping the kernel's unit, a shutdown of the
/// machine) is a stop.
async fn stop_on_sigterm(ctx: Rc<Context>) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut terms) = signal(SignalKind::terminate()) else {
        return;
    };
    if terms.recv().await.is_some() {
        stop(&ctx).await;
        ctx.exit.notify_one();
    }
}
