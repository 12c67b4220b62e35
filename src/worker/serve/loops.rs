//! The background loops (runs, busy evidence, output sync, the tick) and
//! the worker's stop.

use crate::host::HostError;
use crate::worker::WorkerError;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use super::Signals;
use crate::clock::{mono_ms, mono_us};
use crate::host::process_exit::ProcessExit;
use crate::host::systemd;
use crate::laws::idle_shutdown::GateEvent;
use crate::laws::timing::{duration_in_words, TM, WORKER_RETRY_MS};
use crate::protocol::kernel::ToKernel;
use crate::session::store::{read_json, KernelRecord};
use crate::session::transcript::EntryBody;
use crate::worker::books::TickAction;
use crate::worker::core::Action;
use crate::worker::state::Worker;

pub(super) async fn run_loop(worker: Rc<RefCell<Worker>>, signals: Signals) {
    loop {
        let started = {
            let mut w = worker.borrow_mut();
            if w.stopping {
                return;
            }
            let next = w.core.next_start(mono_us());
            next.map(|run| w.start_run(run))
        };
        match started {
            // Not stored (a full disk): a disk tells nothing when it has
            // room again, so the start is tried again after the pause.
            Some(Err(e)) => {
                tracing::error!("{e}");
                tokio::time::sleep(Duration::from_millis(WORKER_RETRY_MS)).await;
            }
            Some(Ok(())) => {}
            // Until something may start a run: input queued, a run ended,
            // the kernel link up, the gate released, or the instant a
            // quiesced gate reopens by itself.
            None => {
                // Time first: a gate whose hold has passed is open, and
                // needs no wake-up.
                let reopens = {
                    let mut w = worker.borrow_mut();
                    w.core.tick(mono_us());
                    w.core.poll_timeout()
                };
                let reopens = async {
                    match reopens {
                        Some(at_us) => tokio::time::sleep_until(mono_instant_us(at_us)).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    _ = signals.run.notified() => {}
                    _ = reopens => {}
                }
            }
        }
    }
}

impl Worker {
    /// Start queued input `run`: its start is stored first, then the kernel
    /// is given it (the input leaves the queue only once its start is
    /// stored: on a full disk it waits).
    fn start_run(&mut self, run: u64) -> Result<(), WorkerError> {
        self.append(EntryBody::RunStarted { input: run })
            .map_err(|e| e.within(format!("cannot start run {run}")))?;
        tracing::info!(run, "run {run} started");
        let actions = self.core.run_start_stored(run);
        self.apply(actions);
        self.work_changed();
        Ok(())
    }
}

/// Carry out `actions`; an end that cannot be stored yet (a full disk) is
/// retried until it is (it must be on record, or a restart would call a
/// finished run interrupted), and nothing after it, the waiters told of
/// that end among them, happens before. Gives up only when the worker
/// stops.
pub async fn apply_until_stored(worker: &Rc<RefCell<Worker>>, actions: Vec<Action>) {
    let mut held = worker.borrow_mut().apply(actions);
    while !held.is_empty() {
        if worker.borrow().stopping {
            tracing::error!(
                "the worker is stopping: {} actions not carried out",
                held.len()
            );
            return;
        }
        tokio::time::sleep(Duration::from_millis(WORKER_RETRY_MS)).await;
        held = worker.borrow_mut().apply(held);
    }
}

/// Record busy evidence whenever the work changes, as the refresh law says:
/// one record at a time, in order, each written off this thread (on the
/// process backend it waits for the disk, which must hold neither the run
/// that just started nor the end just told).
pub(super) async fn record_evidence(worker: Rc<RefCell<Worker>>) {
    let evidence = worker.borrow().evidence.clone();
    loop {
        evidence.due.notified().await;
        let _writing = evidence.writing.lock().await;
        // `stop` writes the last record (it may have, while this waited).
        if worker.borrow().stopping {
            return;
        }
        let Some((journal, line, state, now)) = worker.borrow_mut().evidence_to_write() else {
            continue;
        };
        let written = tokio::task::spawn_blocking(move || journal.record(&line))
            .await
            .unwrap_or_else(|e| Err(HostError::Journal(format!("the busy evidence writer: {e}"))));
        worker.borrow_mut().evidence_written(written, state, now);
    }
}

/// The group commit: output written since the last fsync is made durable
/// `output_sync_ms` after the first of it, or at once in a flood (see
/// `page_cache::COMMIT_EARLY_BYTES`).
pub(super) async fn output_sync_loop(worker: Rc<RefCell<Worker>>) {
    let (signals, wait) = {
        let w = worker.borrow();
        (w.store.commit_signals.clone(), w.store.output_sync)
    };
    loop {
        signals.due.notified().await;
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = signals.now.notified() => {}
        }
        let Some(commit) = worker.borrow_mut().group_commit() else {
            continue;
        };
        if let Err(e) = tokio::task::spawn_blocking(commit).await {
            tracing::warn!("transcript: group commit: {e}");
        }
    }
}

/// The tokio instant at monotonic microsecond `at_us` (now, if it has passed).
fn mono_instant_us(at_us: u64) -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_micros(at_us.saturating_sub(mono_us()))
}

/// The worker's clock-driven work: it sleeps until the earliest deadline
/// its books and run core name (`Worker::next_tick_ms`), or until one of
/// them may have come nearer, and does what is due then.
pub(super) async fn tick_loop(worker: Rc<RefCell<Worker>>, signals: Signals) {
    let reschedule = worker.borrow().reschedule.clone();
    loop {
        let due_ms = worker.borrow().next_tick_ms();
        tokio::select! {
            _ = tokio::time::sleep_until(mono_instant_us(due_ms.saturating_mul(1000))) => {}
            _ = reschedule.notified() => continue,
        }
        let actions = {
            let mut w = worker.borrow_mut();
            if w.stopping {
                return;
            }
            w.core.tick(mono_us());
            if let Some(silence) = w.link_owes.watch.tick(mono_ms()) {
                w.tell_kernel_silence(silence);
            }
            let work = w.work();
            w.books.tick(mono_ms(), work)
        };
        for action in actions {
            match action {
                TickAction::SignOfLife => worker.borrow().sign_of_life(),
                TickAction::WatchdogPing => systemd::notify("WATCHDOG=1"),
                // Written by `record_evidence`, off this thread and in
                // order with the records the work's changes make.
                TickAction::Record(_) => worker.borrow().evidence.due.notify_one(),
                TickAction::ExitResumable => {
                    tracing::warn!(
                        "no supervisor for the lost-exit window: exiting; the kernel keeps its runs"
                    );
                    // `stop` records busy now.
                    stop(&worker, &signals).await;
                    return;
                }
                TickAction::CloseSession => {
                    tracing::info!("no supervisor and no work: closing the session");
                    let _ = worker.borrow_mut().append(EntryBody::Notice {
                        text: "no supervisor and no work: the worker closed the session".into(),
                        restore: None,
                        restore_id: None,
                    });
                    // Nothing runs: the idle kernel goes too (the snapshot
                    // keeps its state for the next one).
                    stop_with_kernel(&worker, &signals).await;
                    return;
                }
            }
        }
        worker.borrow_mut().report_output_line();
    }
}

/// Tell the supervisor whenever the number of client connections changes,
/// so it knows when the last client left (the idle-stop clock starts).
pub(super) async fn tell_client_changes(worker: Rc<RefCell<Worker>>) {
    let changed = worker.borrow().clients.changed.clone();
    loop {
        changed.notified().await;
        let w = worker.borrow();
        if w.stopping {
            return;
        }
        w.sign_of_life();
    }
}

/// SIGTERM (StopUnit, a shutdown of the machine) is a stop like the
/// supervisor's: queued input stays for the next worker.
pub(super) async fn stop_on_sigterm(worker: Rc<RefCell<Worker>>, signals: Signals) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut terms) = signal(SignalKind::terminate()) else {
        return;
    };
    if terms.recv().await.is_some() {
        tracing::info!("stopping on SIGTERM");
        stop(&worker, &signals).await;
    }
}

/// Stop: close the gate for good and end the process's loops. The kernel
/// and its runs keep running (a worker that leaves aborts nothing); queued
/// input stays for the next worker.
pub(super) async fn stop(worker: &Rc<RefCell<Worker>>, signals: &Signals) {
    // Its record of busy comes after any still being written, never
    // before it.
    let evidence = worker.borrow().evidence.clone();
    let _writing = evidence.writing.lock().await;
    {
        let mut w = worker.borrow_mut();
        if w.stopping {
            return;
        }
        w.gate_event(GateEvent::Stop);
        systemd::notify("STOPPING=1");
        w.record_busy_now();
        w.stopping = true;
        // Requests waiting for the kernel link wait no longer.
        w.kernel_connected.notify_waiters();
    }
    signals.exit.notify_one();
}

/// The harness close: what the transcript holds is made durable before the
/// worker exits, within `harness_close` (the stop grace covers it after the
/// kernel's teardown); a commit still running then ends with the process.
pub(super) async fn close_transcript(worker: &Rc<RefCell<Worker>>) {
    let Some(commit) = worker.borrow_mut().group_commit() else {
        return;
    };
    let within = Duration::from_millis(TM.worker.harness_close);
    if tokio::time::timeout(within, tokio::task::spawn_blocking(commit))
        .await
        .is_err()
    {
        tracing::warn!(
            "the transcript's last output was not stored within {}",
            duration_in_words(TM.worker.harness_close)
        );
    }
}

/// Stop the session's kernel (every process of the session ends), then the
/// worker: `shutdown --force`.
pub(super) async fn stop_with_kernel(worker: &Rc<RefCell<Worker>>, signals: &Signals) {
    let kernel = {
        let mut w = worker.borrow_mut();
        w.link_owes.stop_asked = true;
        w.send_kernel(ToKernel::Stop);
        read_json::<KernelRecord>(&w.files.kernel())
            .ok()
            .flatten()
            .map(|k| k.identity)
    };
    // Until the kernel process is gone, so nobody finds it alive after:
    // its teardown, once, inside the stop grace with the transcript's close.
    let deadline = tokio::time::Instant::now() + Duration::from_millis(TM.kernel.kernel_teardown);
    if let Some(kernel) = kernel {
        ProcessExit::open(kernel).wait_until(deadline).await;
    }
    stop(worker, signals).await;
}
