//! A shell reset (`eukhe reset`, MCP `bash` with `restart`): the session
//! gets a fresh kernel, as after the kernel's loss, but from the session's
//! first state instead of its snapshot. The kernel is asked to stop (every
//! process of the session ends), the snapshot is removed once it is gone,
//! one notice is stored, and the link starts the next kernel, which makes
//! the first snapshot again from `meta.json` and `env.json`. The
//! transcript stays; queued inputs run in the new shell. Refused while
//! something runs, unless forced: then it ends with the old shell and the
//! new kernel's greeting records it interrupted, as after a crash.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use super::outbox::Outbox;
use super::state::{kernel_link_until, Worker};
use super::WorkerError;
use crate::host::process::is_alive;
use crate::host::process_exit::ProcessExit;
use crate::laws::adoption::ProcessIdentity;
use crate::laws::timing::{SHELL_RESET_MS, TM};
use crate::laws::work::{WorkKind, WorkSet};
use crate::paths::Paths;
use crate::protocol::kernel::ToKernel;
use crate::protocol::message::Response;
use crate::session::store::{read_json, KernelRecord};
use crate::session::transcript::EntryBody;

/// A reset under way: the kernel asked to stop, whose end the link takes
/// as the cue to start a fresh one.
#[derive(Clone, Copy, Debug)]
pub struct ResetAsked {
    /// The kernel process asked to stop (none: no record of it).
    kernel: Option<ProcessIdentity>,
    /// Whether forced work ended with it.
    forced: bool,
}

/// Why a reset is refused now, if it is: what still runs in the shell it
/// would end (queued input is kept, so it does not count).
pub fn refusal(work: WorkSet, force: bool, session: &str) -> Option<String> {
    let running: Vec<&str> = [
        (WorkKind::Run, "a run"),
        (WorkKind::UserBash, "a bash command"),
        (WorkKind::BackgroundJob, "a background job"),
        (
            WorkKind::UnsettledChild,
            "a process still writing a command's output",
        ),
    ]
    .into_iter()
    .filter(|(kind, _)| work.contains(*kind))
    .map(|(_, words)| words)
    .collect();
    if force || running.is_empty() {
        return None;
    }
    Some(format!(
        "the shell is busy ({}): cancel it first, or `eukhe reset --force {session}` ends it \
         with the old shell",
        running.join(", ")
    ))
}

/// The notice a reset stores in the transcript.
pub fn notice(cwd: &str, forced: bool) -> String {
    let ended = if forced {
        "; what still ran ended with the old shell"
    } else {
        ""
    };
    format!(
        "the shell was restarted at the user's request: a fresh shell in {cwd} with the \
         session's first environment (variables, functions, aliases and options set since \
         are gone; the transcript is kept){ended}"
    )
}

/// Serve a reset request: refuse it, or have the link start a fresh
/// kernel and answer `Ok` once it serves.
pub async fn request(worker: &Rc<RefCell<Worker>>, force: bool, tx: &Outbox) {
    let answer = match reset(worker, force).await {
        Ok(()) => Response::Ok,
        Err(message) => Response::Error { message },
    };
    let _ = tx.send(answer);
}

async fn reset(worker: &Rc<RefCell<Worker>>, force: bool) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(SHELL_RESET_MS);
    let connected = worker.borrow().kernel_connected.clone();
    // A worker just started connects to its kernel first.
    if !kernel_link_until(worker, deadline).await {
        return Err(no_kernel());
    }
    {
        let mut w = worker.borrow_mut();
        if w.stopping {
            return Err("the session's worker is stopping; ask again".into());
        }
        if w.link_owes.reset.is_some() {
            return Err("the shell is being reset already".into());
        }
        if let Some(why) = refusal(w.core.work(), force, &w.meta.id) {
            return Err(why);
        }
        let kernel = read_json::<KernelRecord>(&w.files.kernel())
            .ok()
            .flatten()
            .map(|k| k.identity);
        tracing::info!(force, "resetting the shell: asked by a client");
        w.link_owes.reset = Some(ResetAsked {
            kernel,
            forced: refusal(w.core.work(), false, "").is_some(),
        });
        w.send_kernel(ToKernel::Stop);
        // From now on the old kernel is given nothing: a `bash` or a run
        // asked meanwhile waits for the fresh one, as for a kernel that
        // is still starting.
        w.core.kernel_lost();
    }
    // The fresh kernel's link coming up (or the worker stopping) wakes it.
    loop {
        let notified = connected.notified();
        {
            let w = worker.borrow();
            if w.stopping {
                return Err("the session's worker stopped during the reset; ask again".into());
            }
            if w.link_owes.reset.is_none() && w.core.connected() {
                return Ok(());
            }
        }
        if tokio::time::timeout_at(deadline, notified).await.is_err() {
            return Err(no_kernel());
        }
    }
}

fn no_kernel() -> String {
    format!(
        "the session's new shell did not start within {} ms; see the session's kernel.log",
        SHELL_RESET_MS
    )
}

/// The link to the kernel, kept up: after a reset's stop, the old kernel
/// is waited for, the session's first state put back and a fresh kernel
/// linked. Returns as `link::run` does once the link ends otherwise.
pub async fn keep_linked(
    worker: Rc<RefCell<Worker>>,
    paths: Paths,
    wake_runs: Rc<tokio::sync::Notify>,
) -> Result<(), WorkerError> {
    loop {
        super::link::run(worker.clone(), paths.clone(), wake_runs.clone()).await?;
        let asked = worker.borrow().link_owes.reset;
        let Some(asked) = asked else {
            return Ok(());
        };
        if worker.borrow().stopping {
            return Ok(());
        }
        fresh_state(&worker, asked).await?;
        worker.borrow_mut().link_owes.reset = None;
    }
}

/// Once the old kernel is gone: its snapshot removed (the next kernel
/// makes the first one again) and the notice stored.
async fn fresh_state(worker: &Rc<RefCell<Worker>>, asked: ResetAsked) -> Result<(), WorkerError> {
    let (id, files, cwd) = {
        let w = worker.borrow();
        (w.meta.id.clone(), w.files.clone(), w.meta.cwd.clone())
    };
    if let Some(kernel) = asked.kernel {
        let deadline =
            tokio::time::Instant::now() + Duration::from_millis(TM.kernel.kernel_teardown);
        ProcessExit::open(kernel).wait_until(deadline).await;
        if is_alive(kernel) {
            tracing::warn!("the old kernel outlived its teardown: ending it");
            crate::host::kernels::end(&id, kernel).await;
        }
    }
    for path in [files.snapshot(), files.namespace()] {
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(WorkerError::Host(crate::host::HostError::io(
                    format!("cannot remove {} to reset the shell", path.display()),
                    e,
                )))
            }
        }
    }
    worker.borrow_mut().append(EntryBody::Notice {
        text: notice(&cwd, asked.forced),
        restore: None,
        restore_id: None,
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reset_is_refused_while_something_runs_unless_forced() {
        assert_eq!(refusal(WorkSet::EMPTY, false, "s"), None);
        let queued = WorkSet::EMPTY.with(WorkKind::QueuedInput);
        assert_eq!(
            refusal(queued, false, "s"),
            None,
            "queued input runs in the new shell"
        );
        let busy = WorkSet::EMPTY
            .with(WorkKind::Run)
            .with(WorkKind::BackgroundJob);
        let why = refusal(busy, false, "s").unwrap();
        assert!(
            why.contains("busy (a run, a background job)")
                && why.contains("`eukhe reset --force s` ends it"),
            "{why}"
        );
        assert_eq!(refusal(busy, true, "s"), None);
    }

    #[test]
    fn the_notice_says_what_was_reset_and_what_was_kept() {
        let text = notice("/home/u/p", false);
        assert!(text.contains("at the user's request") && text.contains("/home/u/p"));
        assert!(text.contains("transcript is kept") && !text.contains("ended"));
        assert!(notice("/", true).contains("ended with the old shell"));
    }
}
