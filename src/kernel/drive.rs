//! The driver of the kernel's core (`core`): it hands the core its events
//! with the time they happen at, does the actions the core asks for, and
//! sleeps until the core's next deadline or the next event, whichever
//! comes first. An event is a wake (`Context::wake`) or any change of the
//! books (`Kernel::changed`: output, a stream closed, an end).

use std::time::Duration;

use nix::sys::signal::Signal as Nix;

use super::core::{Action, Signal, Want};
use super::jobs::Kernel;
use super::serve::{broadcast, flush_notices, Context};
use super::tree;
use crate::build_id::build_id;
use crate::clock::{mono_ms, wall_ms};
use crate::host::busy_journal::{BusyJournal, JournalLine};
use crate::laws::revival::BusyState;
use crate::laws::work::{session_work, Activity, WorkKind, WorkSet};
use crate::protocol::kernel::FromKernel;

/// Run the core's actions and deadlines for as long as the kernel serves.
pub async fn drive(ctx: std::rc::Rc<Context>, journal: BusyJournal) {
    let mut changed = ctx.kernel.borrow().changed.subscribe();
    loop {
        changed.borrow_and_update();
        observe(&ctx);
        act(&ctx, &journal);
        let deadline = ctx.kernel.borrow().core.poll_timeout();
        let due = async {
            match deadline {
                Some(at) => tokio::time::sleep_until(instant_of(at)).await,
                None => std::future::pending().await,
            }
        };
        let books_changed = async {
            if changed.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            _ = due => ctx.kernel.borrow_mut().core.handle_timeout(mono_ms()),
            _ = ctx.wake.notified() => {}
            _ = books_changed => {}
        }
    }
}

/// Tell the core what it decides from that the shell keeps (whether a
/// worker is connected, the session's work), and send the notices the
/// books gathered.
fn observe(ctx: &Context) {
    let connected = {
        let mut workers = ctx.workers.borrow_mut();
        workers.retain(|c| !c.is_closed());
        !workers.is_empty()
    };
    {
        let mut k = ctx.kernel.borrow_mut();
        let work = work(&k, ctx.queued_inputs.get());
        k.core.worker_connected(connected);
        k.core.set_work(work);
    }
    flush_notices(ctx);
}

/// The kernel's work set, as the work law reads it: its jobs, and the
/// inputs its worker last said wait in the queue.
fn work(k: &Kernel, queued_inputs: u32) -> WorkSet {
    let mut activities = Vec::new();
    if queued_inputs > 0 {
        activities.push(Activity::Work(WorkKind::QueuedInput));
    }
    activities.extend(k.books.work().map(Activity::Work));
    if k.core.background() > 0 {
        activities.push(Activity::Work(WorkKind::BackgroundJob));
    }
    session_work(&activities)
}

/// Write the busy evidence the core asked for, and tell it how that went.
fn record_evidence(ctx: &Context, journal: &BusyJournal, state: BusyState, work: WorkSet) {
    let line = JournalLine {
        session: ctx.session.clone(),
        state,
        at_ms: Some(wall_ms()),
        work,
        build: build_id().to_string(),
    };
    let written = journal.record(&line);
    let mut k = ctx.kernel.borrow_mut();
    match written {
        Ok(()) => k.core.evidence_recorded(state, mono_ms()),
        Err(e) => {
            tracing::error!("cannot record busy evidence: {e}");
            k.core.evidence_failed(mono_ms());
        }
    }
}

/// The tokio instant of monotonic millisecond `at_ms`.
fn instant_of(at_ms: u64) -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_millis(at_ms.saturating_sub(mono_ms()))
}

/// Cancel `job` (the worker asked): the core escalates from SIGINT.
pub fn cancel(ctx: &Context, job: &str) {
    {
        let mut k = ctx.kernel.borrow_mut();
        let Some(group) = k.books.cancel(job) else {
            return;
        };
        k.core.cancel(job, group, mono_ms());
    }
    ctx.wake.notify_one();
}

/// Hang up `job` (`kernel::hang_up`): once its shell has opened its output
/// (it reports its group after that), its output closes, then its process
/// group gets SIGHUP.
pub fn hang_up(ctx: &Context, job: &str) {
    {
        let mut k = ctx.kernel.borrow_mut();
        let Some(group) = k.books.running_group(job) else {
            return;
        };
        k.core.hang_up(job, group, mono_ms());
    }
    ctx.wake.notify_one();
}

/// Do what the core asks, until it asks nothing more.
fn act(ctx: &Context, journal: &BusyJournal) {
    loop {
        let Some(action) = ctx.kernel.borrow_mut().core.poll_action() else {
            return;
        };
        match action {
            Action::Signal { group, signal, job } => {
                tree::signal_group(group, nix(signal));
                ctx.kernel.borrow().ttys.signal(&job, nix(signal));
            }
            Action::HangUp { job, group } => {
                tracing::info!("{job}: its client went away; hanging it up");
                ctx.hang_ups.close_output(&job);
                tree::signal_group(group, Nix::SIGHUP);
                ctx.kernel.borrow().ttys.signal(&job, Nix::SIGHUP);
            }
            // Killed whole, the group cannot report its end (its reporter
            // went with it): recorded as soon as it is gone.
            Action::ProbeGroup { job, group } => {
                if !tree::group_alive(group) {
                    ctx.kernel.borrow_mut().core.group_gone(&job);
                }
            }
            Action::EndKilled { job } => {
                let mut k = ctx.kernel.borrow_mut();
                if !k.job_ended(&job) {
                    k.ended(&job, 128 + libc::SIGKILL, mono_ms());
                }
            }
            Action::GroupNeverReported { job, want } => {
                let asked = match want {
                    Want::Cancel => "cancelled",
                    Want::HangUp => "hung up",
                };
                tracing::warn!("{job} was {asked} but its shell never reported its process group");
            }
            Action::DropIdleTemplates => ctx.kernel.borrow_mut().drop_idle_templates(),
            Action::RecordEvidence { state, work } => record_evidence(ctx, journal, state, work),
            Action::LookWaiting { job } => {
                let seen = ctx.kernel.borrow().ttys.look(&job);
                ctx.kernel
                    .borrow_mut()
                    .core
                    .waiting_looked(&job, seen, mono_ms());
            }
            Action::TellWaiting { job, waiting } => {
                broadcast(ctx, &FromKernel::Waiting { job, waiting });
            }
        }
    }
}

fn nix(signal: Signal) -> Nix {
    match signal {
        Signal::Interrupt => Nix::SIGINT,
        Signal::Terminate => Nix::SIGTERM,
        Signal::Kill => Nix::SIGKILL,
    }
}
