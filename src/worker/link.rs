//! The worker's link to its session's kernel: find the live kernel (or
//! start one), greet it, settle every run the transcript left open as
//! `laws::runs::reconcile` says, then store what the kernel reports (output,
//! ends, background jobs) in the transcript.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use tokio::net::unix::OwnedReadHalf;
use tokio::net::UnixStream;
use tokio::sync::mpsc::unbounded_channel;

use super::state::{Followed, JobKind, Worker};
use crate::build_id::build_id;
use crate::host::process::is_alive;
use crate::kernel::spool::JobEnd;
use crate::laws::notice::{restore_notice, KernelStart, MessageKind};
use crate::laws::runs::{end_is_recorded, reconcile, KernelView, RunAction, RunRecord, SpoolRun};
use crate::paths::Paths;
use crate::protocol::frame::{read_frame, read_frame_bytes, write_frame};
use crate::protocol::kernel::{FromKernel, JobState, ToKernel, KERNEL_PROTOCOL};
use crate::protocol::message::{Response, Stream};
use crate::session::store::{read_json, KernelRecord};
use crate::session::transcript::EntryBody;

/// How often a worker retries a kernel it cannot drive yet (another
/// protocol version with runs in flight, or one still starting).
const RETRY: Duration = Duration::from_millis(200);

/// Connect, reconcile, then serve the kernel's messages until the link
/// ends. Returns why it ended (the kernel is gone) unless the worker stops.
pub async fn run(
    worker: Rc<RefCell<Worker>>,
    paths: Paths,
    wake_runs: Rc<tokio::sync::Notify>,
) -> Result<(), String> {
    let (stream, hello) = connect(&worker, &paths).await?;
    let (mut read, mut write) = stream.into_split();
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
        greet(&mut w, hello)?;
        w.work_changed();
    }
    wake_runs.notify_one();
    let ended = serve(&worker, &mut read, &wake_runs).await;
    let mut w = worker.borrow_mut();
    w.kernel = None;
    w.kernel_pid = None;
    if w.stopping {
        Ok(())
    } else {
        Err(format!("the session's kernel is gone ({ended})"))
    }
}

async fn connect(
    worker: &Rc<RefCell<Worker>>,
    paths: &Paths,
) -> Result<(UnixStream, FromKernel), String> {
    let (id, files) = {
        let w = worker.borrow();
        (w.meta.id.clone(), w.files.clone())
    };
    let socket = paths.kernel_socket(&id);
    let mut said_waiting = false;
    loop {
        let live = read_json::<KernelRecord>(&files.kernel())
            .ok()
            .flatten()
            .filter(|k| is_alive(k.identity));
        if live.is_none() {
            start_kernel(&id, paths).await?;
        }
        let Ok(mut stream) = UnixStream::connect(&socket).await else {
            tokio::time::sleep(RETRY).await;
            continue;
        };
        let hello = ToKernel::Hello {
            protocol: KERNEL_PROTOCOL,
            build_id: build_id().to_string(),
        };
        write_frame(&mut stream, &hello)
            .await
            .map_err(|e| format!("kernel of session {id}: {e}"))?;
        let answer: FromKernel = read_frame(&mut stream)
            .await
            .map_err(|e| format!("kernel of session {id}: {e}"))?;
        let FromKernel::Hello { protocol, jobs, .. } = &answer else {
            return Err(format!("kernel of session {id}: unexpected {answer:?}"));
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
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        }
        tracing::info!("replacing an idle kernel of protocol {protocol}");
        let _ = write_frame(&mut stream, &ToKernel::Stop).await;
        let _ = read_frame_bytes(&mut stream).await;
        tokio::time::sleep(RETRY).await;
    }
}

/// Start the session's kernel: its own `eukhe-kernel@` unit under systemd,
/// else a detached process (it is not this worker's child).
async fn start_kernel(id: &str, paths: &Paths) -> Result<(), String> {
    if crate::host::HostKind::from_env()? == crate::host::HostKind::Systemd {
        return crate::host::kernel_unit::start(id).await;
    }
    let exe =
        std::env::current_exe().map_err(|e| format!("cannot find the eukhe executable: {e}"))?;
    let output = tokio::process::Command::new(exe)
        .args(["kernel", id, "--detach"])
        .env("EUKHE_SOCKET", &paths.socket)
        .env("EUKHE_STATE_DIR", &paths.state)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .output()
        .await
        .map_err(|e| format!("cannot start the kernel of session {id}: {e}"))?;
    if output.status.success() {
        tracing::info!("started the session's kernel");
        return Ok(());
    }
    let why = String::from_utf8_lossy(&output.stderr).trim().to_string();
    if why.contains("already has a live kernel") {
        // Another worker's start won the race; connect to that one.
        return Ok(());
    }
    Err(format!("the kernel of session {id} did not start: {why}"))
}

/// Take the kernel's greeting: the restore notice, then every run the
/// transcript left open, as `reconcile` decides.
fn greet(w: &mut Worker, hello: FromKernel) -> Result<(), String> {
    let FromKernel::Hello {
        pid,
        restored,
        jobs,
        background,
        ..
    } = hello
    else {
        return Ok(());
    };
    w.kernel_pid = Some(pid);
    w.background = background;
    if let Some(text) = restored {
        let restores = w.restores()?;
        if let Some(MessageKind::RestoreNotice { restore }) =
            restore_notice(KernelStart::OverSnapshot, restores)
        {
            w.append(EntryBody::Notice {
                text: format!("kernel restored from its snapshot (restore {restore}): {text}"),
                restore: Some(restore),
            })?;
        }
    }
    // Runs a gone kernel accepted are settled against a dead kernel, the
    // rest against this live one.
    let mut lost = (BTreeMap::new(), BTreeMap::new());
    let mut live = (BTreeMap::new(), BTreeMap::new());
    for (run, record) in &w.book {
        let job = format!("r{run}");
        match jobs.get(&job) {
            Some(JobState::Lost) => {
                lost.0.insert(*run, *record);
                lost.1.insert(*run, SpoolRun::Accepted);
            }
            Some(JobState::Running) => {
                live.0.insert(*run, *record);
                live.1.insert(*run, SpoolRun::Accepted);
            }
            Some(JobState::Ended { end }) => {
                live.0.insert(*run, *record);
                live.1.insert(*run, SpoolRun::Ended { status: end.status });
            }
            None => {
                live.0.insert(*run, *record);
            }
        }
    }
    let mut actions = reconcile(
        &lost.0,
        KernelView {
            alive: false,
            spool: &lost.1,
        },
    );
    actions.extend(reconcile(
        &live.0,
        KernelView {
            alive: true,
            spool: &live.1,
        },
    ));
    for action in actions {
        match action {
            RunAction::Hand(run) => {
                let text = w.started_text.get(&run).cloned().unwrap_or_default();
                tracing::info!(
                    run,
                    "run {run} was never accepted: handing it to the kernel"
                );
                hand(
                    w,
                    &format!("r{run}"),
                    Some(&text),
                    JobKind::Run {
                        input: run,
                        lost: false,
                    },
                );
            }
            RunAction::Follow(run) | RunAction::RecordEnd(run, _) => {
                tracing::info!(run, "resuming run {run}");
                hand(
                    w,
                    &format!("r{run}"),
                    None,
                    JobKind::Run {
                        input: run,
                        lost: false,
                    },
                );
            }
            RunAction::RecordInterrupted(run) => {
                hand(
                    w,
                    &format!("r{run}"),
                    None,
                    JobKind::Run {
                        input: run,
                        lost: true,
                    },
                );
            }
        }
    }
    // User bash of an earlier worker: its client is gone with that worker.
    for job in jobs.keys().filter(|j| j.starts_with('b')) {
        w.send_kernel(ToKernel::Forget { job: job.clone() });
    }
    // Ends of runs the transcript already holds.
    for job in jobs.keys() {
        if let Some(run) = job.strip_prefix('r').and_then(|n| n.parse::<u64>().ok()) {
            if w.book.get(&run) == Some(&RunRecord::Ended) {
                w.send_kernel(ToKernel::Forget { job: job.clone() });
            }
        }
    }
    Ok(())
}

/// Follow `job` in the kernel (starting it first when `command` is given).
pub fn hand(w: &mut Worker, job: &str, command: Option<&str>, kind: JobKind) {
    let from = match kind {
        JobKind::Run { input, .. } => w.spool_offsets.get(&input).copied().unwrap_or(0),
        JobKind::Bash { .. } => 0,
    };
    if let Some(command) = command {
        w.send_kernel(ToKernel::Start {
            job: job.to_string(),
            command: command.to_string(),
        });
    }
    w.send_kernel(ToKernel::Follow {
        job: job.to_string(),
        from,
    });
    w.jobs.insert(
        job.to_string(),
        Followed {
            kind,
            ended: false,
            carry: [Vec::new(), Vec::new()],
        },
    );
}

async fn serve(
    worker: &Rc<RefCell<Worker>>,
    read: &mut OwnedReadHalf,
    wake_runs: &tokio::sync::Notify,
) -> String {
    loop {
        let message = match read_frame::<FromKernel, _>(read).await {
            Ok(message) => message,
            Err(e) => return e.to_string(),
        };
        match message {
            FromKernel::Output { job, stream, end } => {
                let bytes = match read_frame_bytes(read).await {
                    Ok(bytes) => bytes,
                    Err(e) => return e.to_string(),
                };
                worker.borrow_mut().output(&job, stream, end, &bytes);
            }
            FromKernel::Ended { job, end } => {
                super::serve::append_until_stored_with(worker, |w| w.ended(&job, end.clone()))
                    .await;
                worker.borrow_mut().work_changed();
                wake_runs.notify_one();
            }
            FromKernel::Settled { job } => {
                let mut w = worker.borrow_mut();
                w.jobs.remove(&job);
                w.send_kernel(ToKernel::Forget { job });
                w.work_changed();
            }
            FromKernel::Jobs { background } => {
                let mut w = worker.borrow_mut();
                let before = std::mem::replace(&mut w.background, background);
                if before > 0 && background == 0 {
                    let _ = w.append(EntryBody::Notice {
                        text: "the last background job ended".into(),
                        restore: None,
                    });
                }
                w.work_changed();
            }
            FromKernel::Notice { text } => {
                let _ = worker.borrow_mut().append(EntryBody::Notice {
                    text,
                    restore: None,
                });
            }
            FromKernel::Error { message } => {
                tracing::error!("kernel: {message}");
                let _ = worker.borrow_mut().append(EntryBody::Notice {
                    text: format!("the kernel: {message}"),
                    restore: None,
                });
            }
            FromKernel::Started { .. } | FromKernel::Hello { .. } => {}
            FromKernel::Stopped => return "it stopped".into(),
        }
    }
}

impl Worker {
    pub fn send_kernel(&self, message: ToKernel) {
        if let Some(kernel) = &self.kernel {
            let _ = kernel.send(message);
        }
    }

    /// Store output the kernel reported, then show it.
    fn output(&mut self, job: &str, stream: Stream, end: u64, bytes: &[u8]) {
        let Some(followed) = self.jobs.get_mut(job) else {
            return;
        };
        let carry = &mut followed.carry[stream as usize];
        carry.extend_from_slice(bytes);
        let whole = match std::str::from_utf8(carry) {
            Ok(_) => carry.len(),
            Err(e) if e.error_len().is_none() && carry.len() - e.valid_up_to() < 4 => {
                e.valid_up_to()
            }
            Err(_) => carry.len(),
        };
        let data = String::from_utf8_lossy(&carry[..whole]).into_owned();
        carry.drain(..whole);
        if data.is_empty() {
            return;
        }
        let response = Response::Output {
            stream,
            data: data.clone(),
        };
        match &followed.kind {
            JobKind::Run { input, .. } => {
                let input = *input;
                let stored = self.append(EntryBody::Output {
                    input: Some(input),
                    stream,
                    data,
                    spool_end: Some(end),
                });
                match stored {
                    Ok(_) => {
                        self.spool_offsets.insert(input, end);
                    }
                    Err(_) => self.unstored_output += bytes.len() as u64,
                }
                self.tell_waiters(input, response);
            }
            JobKind::Bash { client } => {
                let _ = client.send(response);
                if self
                    .append(EntryBody::Output {
                        input: None,
                        stream,
                        data,
                        spool_end: None,
                    })
                    .is_err()
                {
                    self.unstored_output += bytes.len() as u64;
                }
            }
        }
    }

    /// Store the end the kernel reported for `job` (once: a run's end is
    /// stored only while the book has it started).
    pub fn ended(&mut self, job: &str, end: Option<JobEnd>) -> Result<(), String> {
        let Some(followed) = self.jobs.get(job) else {
            return Ok(());
        };
        if followed.ended {
            return Ok(());
        }
        let notice = end.as_ref().and_then(|e| e.notice.clone());
        match &followed.kind {
            JobKind::Run { input, lost } => {
                let input = *input;
                if end_is_recorded(&self.book, input) {
                    let (body, status) = match (&end, lost) {
                        (Some(end), _) => (
                            EntryBody::RunFinished {
                                input,
                                status: end.status,
                                signal: end.signal,
                                cancelled: end.cancelled,
                            },
                            end.status,
                        ),
                        (None, _) => (EntryBody::RunInterrupted { input }, 255),
                    };
                    self.append(body)?;
                    if end.is_none() {
                        let _ = self.append(EntryBody::Notice {
                            text: format!(
                                "run {input} was cut short: the kernel running it is gone; it does not run again"
                            ),
                            restore: None,
                        });
                    }
                    tracing::info!(run = input, status, "run {input} exited {status}");
                    self.book.insert(input, RunRecord::Ended);
                    self.started_text.remove(&input);
                    self.notice_unstored_output();
                    self.end_waiters(input, status);
                }
            }
            JobKind::Bash { client } => {
                let status = end.as_ref().map_or(255, |e| e.status);
                let client = client.clone();
                self.append(EntryBody::BashFinished { status })?;
                let _ = client.send(Response::Exit { status });
            }
        }
        if let Some(text) = notice {
            let _ = self.append(EntryBody::Notice {
                text,
                restore: None,
            });
        }
        if let Some(followed) = self.jobs.get_mut(job) {
            followed.ended = true;
        }
        Ok(())
    }
}
