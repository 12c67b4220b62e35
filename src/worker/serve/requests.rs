//! A connection's requests: the supervisor's (a handed client, quiesce,
//! the idle stop) and the session's (input, user bash, cancel, log).

use std::cell::RefCell;
use std::ops::ControlFlow;
use std::rc::Rc;

use tokio::net::unix::OwnedReadHalf;

use super::loops::{stop, stop_with_kernel};
use super::replays::{follow_entries, send_log, ReplayStart};
use super::{handed_client, refuse, Signals, ATTACH_REPLAY_ENTRIES};
use crate::clock::{mono_us, wall_ms};
use crate::host::handoff;
use crate::host::socket::from_own_user;
use crate::laws::idle_shutdown::{GateEvent, QuiesceAnswer};
use crate::laws::timing::TYPIST_ANSWER_MS;
use crate::protocol::message::{Request, Response, SessionRequest};
use crate::session::log_query::LogQuery;
use crate::session::transcript::EntryBody;
use crate::worker::core::InputCancel;
use crate::worker::outbox::Outbox;
use crate::worker::state::{kernel_link_until, ClientConnection, Worker};
use crate::worker::wait_for;

/// Receive the client the supervisor hands over and serve it on its own.
pub(super) async fn take_handed_client(
    worker: &Rc<RefCell<Worker>>,
    read: &OwnedReadHalf,
    first: SessionRequest,
    signals: &Signals,
    counted: Option<ClientConnection>,
    zero_runs: bool,
) {
    match handoff::recv_fd(read.as_ref())
        .await
        .and_then(handoff::into_stream)
    {
        Ok(client) if from_own_user(&client) => {
            tokio::task::spawn_local(handed_client(
                worker.clone(),
                client,
                first,
                signals.clone(),
                counted,
                zero_runs,
            ));
        }
        Ok(client) => refuse(client, "eukhe: connection refused: another user's process").await,
        Err(e) => tracing::warn!("a client handed over did not arrive: {e}"),
    }
}

/// Serve a supervisor's quiesce, release or stop; breaks once the worker stops.
pub(super) async fn supervisor_request(
    worker: &Rc<RefCell<Worker>>,
    request: Request,
    tx: &Outbox,
    signals: &Signals,
) -> ControlFlow<()> {
    match request {
        Request::Quiesce => {
            let answer = worker.borrow_mut().quiesce();
            let _ = tx.send(Response::Quiesce { answer });
        }
        Request::QuiesceIdle => {
            let answer = worker.borrow_mut().quiesce_for_idle_stop();
            let _ = tx.send(Response::Quiesce { answer });
        }
        Request::Claim => {
            let claimed = worker.borrow_mut().claim();
            let _ = tx.send(match claimed {
                Ok(()) => Response::Ok,
                Err(e) => Response::Error {
                    message: e.to_string(),
                },
            });
        }
        Request::Release => {
            worker.borrow_mut().gate_event(GateEvent::Release);
            signals.run.notify_one();
            let _ = tx.send(Response::Ok);
        }
        Request::IdleStop => return idle_stop(worker, tx, signals).await,
        Request::Stop => {
            tracing::info!("stopping: asked by the supervisor (the kernel keeps its runs)");
            stop(worker, signals).await;
            let _ = tx.send(Response::Ok);
            return ControlFlow::Break(());
        }
        Request::StopWithKernel => {
            tracing::info!("stopping with the kernel: asked by the supervisor");
            stop_with_kernel(worker, signals).await;
            let _ = tx.send(Response::Ok);
            return ControlFlow::Break(());
        }
        other => {
            let _ = tx.send(Response::Error {
                message: format!("a worker does not serve {other:?}"),
            });
        }
    }
    ControlFlow::Continue(())
}

/// The idle shutdown's stop, refused if the run gate reopened after its hold.
async fn idle_stop(
    worker: &Rc<RefCell<Worker>>,
    tx: &Outbox,
    signals: &Signals,
) -> ControlFlow<()> {
    let taken = worker.borrow_mut().core.idle_stop(mono_us());
    if !taken {
        tracing::info!("refused the idle shutdown's stop: the run gate reopened after its hold");
        let _ = tx.send(Response::Quiesce {
            answer: QuiesceAnswer::Busy,
        });
        return ControlFlow::Continue(());
    }
    // Idle: the kernel has no run and no background job to keep.
    tracing::info!("stopping with the kernel: the idle shutdown committed");
    stop_with_kernel(worker, signals).await;
    let _ = tx.send(Response::Ok);
    ControlFlow::Break(())
}

/// Serve one session request. `peer` is the client's pid when the client
/// is connected directly (handed over), not relayed. Returns the number
/// of the user bash it started, if it started one.
pub(super) async fn session_request(
    worker: &Rc<RefCell<Worker>>,
    request: SessionRequest,
    tx: &Outbox,
    signals: &Signals,
    peer: Option<u32>,
) -> Option<u64> {
    if let SessionRequest::Send { text, .. } | SessionRequest::Bash { command: text, .. } = &request
    {
        if let Some(why) = unrunnable(text) {
            let _ = tx.send(Response::Error {
                message: why.to_string(),
            });
            return None;
        }
    }
    match request {
        SessionRequest::Send { text, wait, tty } => {
            send_input(worker, (text, tty), wait, tx, signals)
        }
        request @ SessionRequest::Bash { .. } => {
            return bash_request(worker, request, tx, peer).await
        }
        SessionRequest::Rejoin { input } => return rejoin(worker, input),
        SessionRequest::HangUp { input } => hang_up(worker, input, tx),
        request @ (SessionRequest::Keys { .. } | SessionRequest::WaitFor { .. }) => {
            terminal_request(worker, request, tx)
        }
        SessionRequest::Screen { input } => worker.borrow().screen_request(input, tx),
        SessionRequest::WatchTerminal { input, offsets } => {
            // A screen drawn without its spool offset cannot be merged
            // with the kernel's echo: a worker just started says it once
            // its kernel link is up.
            if offsets {
                let within = std::time::Duration::from_millis(TYPIST_ANSWER_MS);
                kernel_link_until(worker, tokio::time::Instant::now() + within).await;
            }
            worker.borrow_mut().watch_terminal(input, offsets, tx)
        }
        // Only a connection's own loop acts on it.
        SessionRequest::Detach => {}
        request @ (SessionRequest::TypeInto { .. } | SessionRequest::Typist { .. }) => {
            crate::worker::terminal::typing(&worker.borrow(), request, tx)
        }
        SessionRequest::Cancel { all } => cancel_run(worker, all, tx),
        SessionRequest::CancelInput { input } => cancel_input(worker, input, tx),
        SessionRequest::Queue => queue(&worker.borrow(), tx),
        SessionRequest::ResetShell { force } => {
            crate::worker::reset::request(worker, force, tx).await
        }
        SessionRequest::Withdraw { run } => withdraw(worker, run, tx),
        SessionRequest::Log {
            tail,
            input,
            after,
            follow,
        } => send_log(worker, LogQuery { tail, input, after }, follow, tx),
        request @ SessionRequest::Window { .. } => super::windows::send_window(worker, request, tx),
        SessionRequest::Attach { after, tail } => {
            let start = match after {
                Some(after) => ReplayStart::After(after),
                None => ReplayStart::Tail(tail.unwrap_or(ATTACH_REPLAY_ENTRIES)),
            };
            follow_entries(worker, start, None, tx);
        }
    }
    None
}

/// Keys for a terminal run, or a wait on its screen (`worker::wait_for`).
fn terminal_request(worker: &Rc<RefCell<Worker>>, request: SessionRequest, tx: &Outbox) {
    match request {
        SessionRequest::Keys { input, data } => {
            crate::worker::terminal::keys(&mut worker.borrow_mut(), input, data, tx)
        }
        request => wait_for::start(worker, request, tx),
    }
}

/// `queue`: what runs beside the queue and `cancel` ends (user bash
/// first), then the queued inputs.
fn queue(worker: &Worker, tx: &Outbox) {
    let mut inputs = worker.core.bash_list();
    inputs.extend(worker.core.queue().cloned());
    let _ = tx.send(Response::Queue { inputs });
}

/// Why a command line cannot run, if it cannot: it takes no number then.
fn unrunnable(command: &str) -> Option<&'static str> {
    if command.trim().is_empty() {
        Some("the command is empty: nothing to run")
    } else if command.contains('\0') {
        Some(crate::protocol::kernel::NUL_IN_COMMAND)
    } else {
        None
    }
}

/// Queue input `text` (with `wait`, its client waits for its run).
fn send_input(
    worker: &Rc<RefCell<Worker>>,
    (text, tty): (String, Option<crate::protocol::tty::WindowSize>),
    wait: bool,
    tx: &Outbox,
    signals: &Signals,
) {
    let queued = worker.borrow_mut().queue_input(text, tty);
    match queued {
        Ok(input) => {
            if wait {
                worker.borrow_mut().wait_for(input, tx.clone());
            }
            let _ = tx.send(Response::Queued { input });
            signals.run.notify_one();
        }
        Err(message) => {
            let _ = tx.send(Response::Error {
                message: message.into(),
            });
        }
    }
}

/// Run a user bash (`request`, a `Bash`) once the kernel link is up; its
/// number.
async fn bash_request(
    worker: &Rc<RefCell<Worker>>,
    request: SessionRequest,
    tx: &Outbox,
    peer: Option<u32>,
) -> Option<u64> {
    let SessionRequest::Bash {
        command,
        stdin,
        tty,
        remote,
        offsets,
    } = request
    else {
        return None;
    };
    if offsets && tty.is_some() {
        tx.want_offsets();
    }
    // A terminal run reads its terminal, never the client's stdin.
    let stdin = if tty.is_some() { None } else { stdin };
    // Only the client itself may lend its standard input: a
    // connection relayed by the supervisor has no client pid. A remote
    // client's peer is its proxy: its input comes from a lender of this
    // user (`eukhe proxy --lend-stdin`).
    let lent = remote && stdin.is_some_and(own_users);
    if stdin.is_some() && stdin != peer && !lent {
        let message = "this session's worker cannot take standard input through the \
                       daemon's relay; pass -n for /dev/null"
            .to_string();
        let _ = tx.send(Response::Error { message });
        return None;
    }
    // User bash work from the moment it is taken: a quiesce (idle
    // shutdown, rm) meanwhile answers busy.
    worker.borrow_mut().core.bash_requested();
    // A worker just started connects to its kernel first; the link
    // coming up, or the worker stopping, wakes the wait. (One thread:
    // nothing can connect between the check and the wait.)
    let connected = worker.borrow().kernel_connected.clone();
    while !worker.borrow().core.connected() && !worker.borrow().stopping {
        connected.notified().await;
    }
    worker.borrow_mut().core.bash_request_taken_up();
    user_bash(worker, command, (stdin, tty), tx)
}

/// Whether process `pid` runs as this worker's user.
fn own_users(pid: u32) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata(format!("/proc/{pid}"))
        .is_ok_and(|m| m.uid() == nix::unistd::geteuid().as_raw())
}

/// Withdraw queued input `run`.
fn withdraw(worker: &Rc<RefCell<Worker>>, run: u64, tx: &Outbox) {
    let withdrawn = worker.borrow_mut().withdraw(run);
    let _ = tx.send(match withdrawn {
        Ok(()) => Response::Ok,
        Err(message) => Response::Error {
            message: message.into(),
        },
    });
}

/// A remote client follows user bash `input` again: this connection takes
/// it (its number, if it still runs), and the hang-up the dropped one
/// would bring is off. Answers nothing.
fn rejoin(worker: &Rc<RefCell<Worker>>, input: u64) -> Option<u64> {
    let mut w = worker.borrow_mut();
    if !w.core.bash_runs(input) {
        return None;
    }
    let times = w.clients.rejoin(input);
    tracing::info!(input, "the remote client of bash {input} is back ({times})");
    Some(input)
}

/// A remote client leaves: hang up its user bash `input` now.
fn hang_up(worker: &Rc<RefCell<Worker>>, input: u64, tx: &Outbox) {
    let mut w = worker.borrow_mut();
    if !w.core.bash_runs(input) {
        let _ = tx.send(Response::Error {
            message: format!("bash {input} is not running"),
        });
        return;
    }
    tracing::info!(
        input,
        "the remote client of bash {input} left: hanging it up"
    );
    let actions = w.core.hang_up(input);
    w.apply(actions);
    let _ = tx.send(Response::Ok);
}

/// Cancel the run in progress and every user bash running (with `all`,
/// withdraw every queued input too).
fn cancel_run(worker: &Rc<RefCell<Worker>>, all: bool, tx: &Outbox) {
    let mut w = worker.borrow_mut();
    let (run, bash, actions) = w.core.cancel();
    if let Some(run) = run {
        tracing::info!(run, "cancelling run {run}");
    }
    for number in &bash {
        tracing::info!(number, "cancelling bash {number}");
    }
    w.apply(actions);
    let mut withdrawn = Vec::new();
    if all {
        let queued: Vec<u64> = w.core.queue().map(|q| q.run).collect();
        for queued in queued {
            match w.withdraw(queued) {
                Ok(()) => withdrawn.push(queued),
                Err(message) => {
                    let _ = tx.send(Response::Error {
                        message: message.into(),
                    });
                    return;
                }
            }
        }
    }
    let _ = tx.send(Response::Cancelled {
        run,
        withdrawn,
        bash,
    });
}

/// Cancel input `input`: signal it if it runs, withdraw it if it is queued.
fn cancel_input(worker: &Rc<RefCell<Worker>>, input: u64, tx: &Outbox) {
    let mut w = worker.borrow_mut();
    let answer = match w.core.cancel_input(input) {
        Ok(InputCancel::Signal(actions)) => {
            tracing::info!(input, "cancelling input {input}");
            w.apply(actions);
            Response::Cancelled {
                run: Some(input),
                withdrawn: Vec::new(),
                bash: Vec::new(),
            }
        }
        Ok(InputCancel::Withdraw) => match w.withdraw(input) {
            Ok(()) => Response::Cancelled {
                run: None,
                withdrawn: vec![input],
                bash: Vec::new(),
            },
            Err(message) => Response::Error {
                message: message.into(),
            },
        },
        Err(message) => Response::Error {
            message: message.into(),
        },
    };
    let _ = tx.send(answer);
}

/// User bash runs at once in the kernel, beside any run in progress; the
/// kernel merges the shell state it leaves when it ends.
fn user_bash(
    worker: &Rc<RefCell<Worker>>,
    command: String,
    stdin: (Option<u32>, Option<crate::protocol::tty::WindowSize>),
    tx: &Outbox,
) -> Option<u64> {
    let mut w = worker.borrow_mut();
    if w.stopping {
        let message = "the session's worker is stopping".to_string();
        let _ = tx.send(Response::Error { message });
        return None;
    }
    // User bash is work like a run: a worker quiesced for an idle shutdown
    // starts none, so the shutdown's stop never meets one.
    if !w.core.bash_admitted(mono_us()) {
        let message = format!(
            "session {}: the daemon is shutting down because it was idle; run the command again",
            w.meta.id
        );
        let _ = tx.send(Response::Error { message });
        return None;
    }
    // Acknowledged only by its end, which is stored durably after it.
    let number = w.core.take_input_number();
    let stored = w.reserve_input(number).and_then(|()| {
        w.append_unacknowledged(EntryBody::Bash {
            command: command.clone(),
            bash: Some(number),
        })
    });
    if let Err(message) = stored {
        let _ = tx.send(Response::Error {
            message: message.into(),
        });
        return None;
    }
    // The client learns the number, so it can follow the bash in the
    // transcript if its connection drops.
    let _ = tx.send(Response::Queued { input: number });
    let client = w.add_client(tx.clone(), number);
    let actions = w.core.bash(&command, stdin, (client, wall_ms()), number);
    w.apply(actions);
    w.work_changed();
    Some(number)
}
