//! The worker's event loops: its socket, the run loop, and the tick that
//! refreshes busy evidence, reopens an expired gate and watches for a lost
//! supervisor.

use std::cell::RefCell;
use std::os::unix::fs::PermissionsExt;
use std::rc::Rc;
use std::time::Duration;

use tokio::net::unix::OwnedWriteHalf;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio::sync::Notify;

use super::state::Worker;
use crate::build_id::{build_id, version};
use crate::host::systemd;
use crate::laws::idle_shutdown::GateEvent;
use crate::laws::orphan::OrphanVerdict;
use crate::laws::timing::TM;
use crate::paths::Paths;
use crate::protocol::hello::{check_protocol, Role};
use crate::protocol::message::{Request, Response, SessionRequest};
use crate::protocol::{read_frame, write_frame, FrameError, Hello, PROTOCOL_VERSION};
use crate::session::kernel::{self, signal_group};
use crate::session::store::private_dir;
use crate::session::transcript::{read_entries, EntryBody};

/// Shared wake-ups: the run loop, and the end of the worker.
#[derive(Clone, Default)]
struct Signals {
    run: Rc<Notify>,
    exit: Rc<Notify>,
}

pub async fn run(worker: Rc<RefCell<Worker>>, paths: &Paths) -> Result<(), String> {
    let id = worker.borrow().meta.id.clone();
    let socket = paths.worker_socket(&id);
    if let Some(dir) = socket.parent() {
        private_dir(dir)?;
    }
    let _ = std::fs::remove_file(&socket);
    let listener = UnixListener::bind(&socket)
        .map_err(|e| format!("cannot listen on {}: {e}", socket.display()))?;
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("cannot protect {}: {e}", socket.display()))?;
    let signals = Signals::default();
    tokio::task::spawn_local(run_loop(worker.clone(), signals.clone()));
    tokio::task::spawn_local(tick_loop(worker.clone(), signals.clone()));
    tokio::task::spawn_local(stop_on_sigterm(worker.clone(), signals.clone()));
    worker.borrow_mut().work_changed();
    systemd::notify(&format!("READY=1\nSTATUS=serving session {id}"));
    tracing::info!("serving session {id} on {}", socket.display());
    // SAFETY: getuid(2) cannot fail.
    let own_uid = unsafe { libc::getuid() };
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                if stream.peer_cred().map(|c| c.uid()).ok() != Some(own_uid) {
                    refuse(stream, "eukhe: connection refused: another user's process").await;
                    continue;
                }
                tokio::task::spawn_local(connection(worker.clone(), stream, signals.clone()));
            }
            _ = signals.exit.notified() => break,
        }
    }
    let _ = std::fs::remove_file(&socket);
    Ok(())
}

async fn refuse(stream: UnixStream, message: &str) {
    let (_, mut write) = stream.into_split();
    let _ = write_frame(
        &mut write,
        &Response::Error {
            message: message.to_string(),
        },
    )
    .await;
}

async fn writer(mut write: OwnedWriteHalf, mut rx: UnboundedReceiver<Response>) {
    while let Some(response) = rx.recv().await {
        if write_frame(&mut write, &response).await.is_err() {
            break;
        }
    }
}

async fn connection(worker: Rc<RefCell<Worker>>, stream: UnixStream, signals: Signals) {
    let (mut read, write) = stream.into_split();
    let (tx, rx) = unbounded_channel();
    tokio::task::spawn_local(writer(write, rx));
    // A peer of another protocol (a supervisor of another build) still gets
    // the hello and may still stop this worker; nothing else.
    let compatible = match read_frame::<Request, _>(&mut read).await {
        Ok(Request::Hello(hello)) => {
            let _ = tx.send(Response::Hello(Hello {
                protocol: PROTOCOL_VERSION,
                version: version().to_string(),
                build_id: build_id().to_string(),
                role: Role::Daemon,
                capabilities: Vec::new(),
                pid: Some(std::process::id()),
            }));
            check_protocol(hello.protocol)
        }
        Ok(_) => {
            let _ = tx.send(Response::Error {
                message: "expected hello first".into(),
            });
            return;
        }
        Err(e) => {
            let _ = tx.send(Response::Error {
                message: e.to_string(),
            });
            return;
        }
    };
    let mut supervising = false;
    loop {
        let request = match read_frame::<Request, _>(&mut read).await {
            Ok(request) => request,
            Err(FrameError::Closed) => break,
            Err(e) => {
                let _ = tx.send(Response::Error {
                    message: e.to_string(),
                });
                break;
            }
        };
        if let (Err(message), false) = (&compatible, matches!(request, Request::Stop)) {
            let _ = tx.send(Response::Error {
                message: message.clone(),
            });
            break;
        }
        match request {
            Request::Session { request, .. } => {
                session_request(&worker, request, &tx, &signals).await
            }
            Request::Supervise { build_id } => {
                tracing::info!(supervisor_build = build_id, "supervised");
                supervising = true;
                let mut w = worker.borrow_mut();
                w.supervised_by(tx.clone());
                let _ = tx.send(Response::Worker(w.info()));
            }
            Request::Quiesce => {
                let answer = worker.borrow_mut().quiesce();
                let _ = tx.send(Response::Quiesce { answer });
            }
            Request::Release => {
                worker.borrow_mut().gate_event(GateEvent::Release);
                signals.run.notify_one();
                let _ = tx.send(Response::Ok);
            }
            Request::Stop => {
                tracing::info!("stopping: asked by the supervisor");
                stop(&worker, &signals).await;
                let _ = tx.send(Response::Ok);
                return;
            }
            other => {
                let _ = tx.send(Response::Error {
                    message: format!("a worker does not serve {other:?}"),
                });
            }
        }
    }
    if supervising {
        tracing::info!("lost its supervisor; waiting for the next one");
        worker.borrow_mut().supervisor_lost();
    }
}

async fn session_request(
    worker: &Rc<RefCell<Worker>>,
    request: SessionRequest,
    tx: &UnboundedSender<Response>,
    signals: &Signals,
) {
    match request {
        SessionRequest::Send { text, wait } => {
            let queued = worker.borrow_mut().queue_input(text);
            match queued {
                Ok(input) => {
                    if wait {
                        worker.borrow_mut().wait_for(input, tx.clone());
                    }
                    let _ = tx.send(Response::Queued { input });
                    signals.run.notify_one();
                }
                Err(message) => {
                    let _ = tx.send(Response::Error { message });
                }
            }
        }
        SessionRequest::Bash { command } => user_bash(worker, command, tx).await,
        SessionRequest::Log => {
            let path = worker.borrow().files.transcript();
            match read_entries(&path) {
                Ok(entries) => {
                    for entry in entries {
                        let _ = tx.send(Response::Entry(entry));
                    }
                    let _ = tx.send(Response::Replayed);
                }
                Err(message) => {
                    let _ = tx.send(Response::Error { message });
                }
            }
        }
        SessionRequest::Attach => {
            // Subscribe before reading the file, then leave out live entries
            // the replay already carried. (Only traffic: the client's view,
            // `laws::notice::View`, decides what is shown.)
            let (live_tx, mut live_rx) = unbounded_channel();
            let path = {
                let mut w = worker.borrow_mut();
                w.subscribe(live_tx);
                w.files.transcript()
            };
            let entries = read_entries(&path).unwrap_or_default();
            let last = entries.last().map_or(0, |e| e.seq);
            for entry in entries {
                let _ = tx.send(Response::Entry(entry));
            }
            let _ = tx.send(Response::Replayed);
            let tx = tx.clone();
            tokio::task::spawn_local(async move {
                while let Some(response) = live_rx.recv().await {
                    if let Response::Entry(entry) = &response {
                        if entry.seq <= last {
                            continue;
                        }
                    }
                    if tx.send(response).is_err() {
                        break;
                    }
                }
            });
        }
    }
}

async fn user_bash(worker: &Rc<RefCell<Worker>>, command: String, tx: &UnboundedSender<Response>) {
    let started = {
        let mut w = worker.borrow_mut();
        if w.stopping {
            Err("the session's worker is stopping".to_string())
        } else {
            w.append(EntryBody::Bash {
                command: command.clone(),
            })
            .and_then(|_| {
                let tag = format!("bash-{}", crate::clock::mono_ms());
                kernel::spawn(w.kernel.namespace(), &command, &w.files.scratch(), &tag)
            })
        }
    };
    let running = match started {
        Ok(running) => running,
        Err(message) => {
            let _ = tx.send(Response::Error { message });
            return;
        }
    };
    let group = running.process_group();
    {
        let mut w = worker.borrow_mut();
        w.bash_running += 1;
        w.running_groups.extend(group);
        w.work_changed();
    }
    let (status, namespace) = running
        .finish(|stream, data| {
            let _ = tx.send(Response::Output {
                stream,
                data: data.clone(),
            });
            let _ = worker.borrow_mut().append(EntryBody::Output {
                input: None,
                stream,
                data,
            });
        })
        .await;
    let mut w = worker.borrow_mut();
    w.running_groups.retain(|g| Some(*g) != group);
    w.bash_running -= 1;
    w.set_namespace(namespace);
    let _ = w.append(EntryBody::BashFinished { status });
    w.work_changed();
    let _ = tx.send(Response::Exit { status });
}

async fn run_loop(worker: Rc<RefCell<Worker>>, signals: Signals) {
    loop {
        let next = {
            let mut w = worker.borrow_mut();
            if w.stopping {
                return;
            }
            if w.current_run.is_some() || w.queue.is_empty() || !w.gate_admits_run() {
                None
            } else {
                let (input, text) = w.queue.front().cloned().expect("queue is not empty");
                // The input leaves the queue only once its start is stored:
                // on a full disk it waits, and runs when space returns.
                if let Err(e) = w.append(EntryBody::RunStarted { input }) {
                    tracing::error!(run = input, "cannot start run {input}: {e}");
                    Some(Err(()))
                } else {
                    w.queue.pop_front();
                    w.current_run = Some(input);
                    tracing::info!(run = input, "run {input} started");
                    let started = w.engine.start(
                        w.kernel.namespace(),
                        &text,
                        &w.files.scratch(),
                        &format!("run-{input}"),
                    );
                    w.work_changed();
                    Some(Ok((input, started)))
                }
            }
        };
        let (input, started) = match next {
            Some(Ok(next)) => next,
            // Not stored: retry once the disk may have room again.
            Some(Err(())) => {
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
            None => {
                tokio::select! {
                    _ = signals.run.notified() => {}
                    _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                }
                continue;
            }
        };
        let (status, namespace) = match started {
            Ok(running) => {
                let group = running.process_group();
                worker.borrow_mut().running_groups.extend(group);
                let result = running
                    .finish(|stream, data| {
                        let mut w = worker.borrow_mut();
                        // Stored first, then shown (a full disk: shown, and
                        // counted for a notice once space returns).
                        let output = Response::Output {
                            stream,
                            data: data.clone(),
                        };
                        let bytes = data.len();
                        if w.append(EntryBody::Output {
                            input: Some(input),
                            stream,
                            data,
                        })
                        .is_err()
                        {
                            w.unstored_output += bytes as u64;
                        }
                        w.tell_waiters(input, output);
                    })
                    .await;
                worker
                    .borrow_mut()
                    .running_groups
                    .retain(|g| Some(*g) != group);
                result
            }
            Err(message) => {
                let _ = worker.borrow_mut().append(EntryBody::Notice {
                    text: message,
                    restore: None,
                });
                (127, None)
            }
        };
        let ending = if worker.borrow().stopping {
            tracing::info!(run = input, "run {input} interrupted by the stop");
            EntryBody::RunInterrupted { input }
        } else {
            tracing::info!(run = input, status, "run {input} exited {status}");
            EntryBody::RunFinished { input, status }
        };
        append_until_stored(&worker, ending).await;
        let mut w = worker.borrow_mut();
        w.set_namespace(namespace);
        w.current_run = None;
        w.end_waiters(input, status);
        w.work_changed();
    }
}

/// Store `body`, retrying while the disk is full (the run's end must be
/// on record, or a restart would call a finished run interrupted). Gives up
/// only when the worker stops.
async fn append_until_stored(worker: &Rc<RefCell<Worker>>, body: EntryBody) {
    loop {
        let stored = worker.borrow_mut().append(body.clone());
        match stored {
            Ok(_) => {
                worker.borrow_mut().notice_unstored_output();
                return;
            }
            Err(e) if !worker.borrow().stopping => {
                tracing::error!("{e}; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => {
                tracing::error!("{e}; the worker is stopping");
                return;
            }
        }
    }
}

async fn tick_loop(worker: Rc<RefCell<Worker>>, signals: Signals) {
    // The watchdog is fed from the worker's own loop: a hung worker is
    // killed by its manager and counts as a failure.
    let watchdog = systemd::watchdog_ping_interval();
    let mut last_ping = tokio::time::Instant::now();
    let mut last_sign_of_life = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        // The supervisor's own watchdog (process backend) hears from this
        // loop too: a hung worker falls silent.
        if last_sign_of_life.elapsed() >= Duration::from_secs(1) {
            worker.borrow().sign_of_life();
            last_sign_of_life = tokio::time::Instant::now();
        }
        if let Some(interval) = watchdog {
            if last_ping.elapsed() >= interval {
                systemd::notify("WATCHDOG=1");
                last_ping = tokio::time::Instant::now();
            }
        }
        let verdict = {
            let mut w = worker.borrow_mut();
            if w.stopping {
                return;
            }
            w.expire_gate();
            w.refresh_evidence();
            w.orphan_verdict()
        };
        match verdict {
            OrphanVerdict::Wait => {}
            OrphanVerdict::ExitResumable => {
                tracing::warn!(
                    "no supervisor for the lost-exit window: exiting with its work resumable"
                );
                worker.borrow_mut().record_busy_now();
                stop(&worker, &signals).await;
                return;
            }
            OrphanVerdict::CloseSession => {
                tracing::info!("no supervisor and no work: closing the session");
                let _ = worker.borrow_mut().append(EntryBody::Notice {
                    text: "no supervisor and no work: the worker closed the session".into(),
                    restore: None,
                });
                stop(&worker, &signals).await;
                return;
            }
        }
    }
}

/// SIGTERM (StopUnit, a shutdown of the machine) is a stop like the
/// supervisor's: queued input stays for the next worker.
async fn stop_on_sigterm(worker: Rc<RefCell<Worker>>, signals: Signals) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut terms) = signal(SignalKind::terminate()) else {
        return;
    };
    if terms.recv().await.is_some() {
        tracing::info!("stopping on SIGTERM");
        stop(&worker, &signals).await;
    }
}

/// Stop: close the gate for good, tear down running commands (TERM, then
/// KILL after the kernel teardown time), keep queued input for a later
/// worker, and end the process's loops.
async fn stop(worker: &Rc<RefCell<Worker>>, signals: &Signals) {
    let groups = {
        let mut w = worker.borrow_mut();
        if w.stopping {
            return;
        }
        w.gate_event(GateEvent::Stop);
        systemd::notify("STOPPING=1");
        w.record_busy_now();
        w.stopping = true;
        w.running_groups.clone()
    };
    for &group in &groups {
        signal_group(group, libc::SIGTERM);
    }
    let deadline = tokio::time::Instant::now() + Duration::from_millis(TM.kernel_teardown);
    while tokio::time::Instant::now() < deadline && !worker.borrow().running_groups.is_empty() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for &group in &worker.borrow().running_groups {
        signal_group(group, libc::SIGKILL);
    }
    // Give the run loop a moment to store how the run ended.
    let deadline = tokio::time::Instant::now() + Duration::from_millis(TM.harness_close);
    while tokio::time::Instant::now() < deadline && worker.borrow().current_run.is_some() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    signals.exit.notify_one();
}
