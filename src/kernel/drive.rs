//! The driver of the kernel's core (`core`): it hands the core its events
//! with the time they happen at, does the actions the core asks for, and
//! sleeps until the core's next deadline or the next event, whichever
//! comes first.

use std::time::Duration;

use nix::sys::signal::Signal as Nix;

use super::core::{Action, Signal, Want};
use super::serve::Context;
use super::tree;
use crate::clock::mono_ms;

/// Run the core's actions and deadlines for as long as the kernel serves.
pub async fn drive(ctx: std::rc::Rc<Context>) {
    loop {
        act(&ctx);
        let deadline = ctx.kernel.borrow().core.poll_timeout();
        let due = async {
            match deadline {
                Some(at) => tokio::time::sleep_until(instant_of(at)).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = due => ctx.kernel.borrow_mut().core.handle_timeout(mono_ms()),
            _ = ctx.wake.notified() => {}
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
        let Some(j) = k.jobs.get_mut(job) else {
            return;
        };
        if j.end.is_some() {
            return;
        }
        j.cancelled = true;
        let group = j.group;
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
        let group = match k.jobs.get(job) {
            Some(j) if j.end.is_none() => j.group,
            _ => return,
        };
        k.core.hang_up(job, group, mono_ms());
    }
    ctx.wake.notify_one();
}

/// Do what the core asks, until it asks nothing more.
fn act(ctx: &Context) {
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
