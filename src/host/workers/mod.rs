//! The one seam between the supervisor and the backend its workers run on:
//! [`WorkerHost`], with a process and a systemd implementation, chosen once
//! when the supervisor starts ([`chosen`]). Nothing outside this module
//! knows which backend runs; the decisions around these calls (survivors,
//! adoption, restart, stop escalation) stay in `supervisor`, through `laws`.
//!
//! The trait's futures are boxed (`HostFuture`), so the supervisor holds
//! one `Rc<dyn WorkerHost>`; they are not `Send`: the supervisor runs on
//! one thread.

mod process;
mod systemd;

use super::HostError;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::time::Duration;

use super::busy_journal::BusyJournal;
use super::HostKind;
use crate::config::Config;
use crate::laws::adoption::ProcessIdentity;
use crate::paths::Paths;

pub use process::ProcessHost;
pub use systemd::SystemdHost;

/// What a [`WorkerHost`] call gives back, once it is done.
pub type HostFuture<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;

/// How the supervisor starts, finds, ends and watches workers (and ends
/// the kernels no worker drives), on one backend.
pub trait WorkerHost {
    /// Which backend this is (`eukhe status` names it).
    fn kind(&self) -> HostKind;

    /// Start the worker of `id`; returns once it is on its way (process)
    /// or its unit is active or has failed (systemd).
    fn start<'a>(&'a self, id: &'a str) -> HostFuture<'a, Result<(), HostError>>;

    /// The live worker of `id` left from before, if any.
    fn find<'a>(&'a self, id: &'a str) -> HostFuture<'a, Option<ProcessIdentity>>;

    /// Every live worker, by session. `known` are the sessions the
    /// supervisor knows (the process backend looks only at those; the
    /// systemd backend lists every `eukhe@` unit).
    fn live<'a>(
        &'a self,
        known: Vec<String>,
    ) -> HostFuture<'a, Result<HashMap<String, ProcessIdentity>, HostError>>;

    /// Whether the worker `identity` of `id` is still there.
    fn still_there<'a>(&'a self, id: &'a str, identity: ProcessIdentity) -> HostFuture<'a, bool>;

    /// Until the worker `identity` of `id` is gone or `deadline` passes.
    /// By default [`WorkerHost::still_there`] is asked again and again (a
    /// host with no event for the end); the process host hears of it from
    /// a pidfd, systemd's from the user manager's signals.
    fn wait_gone<'a>(
        &'a self,
        id: &'a str,
        identity: ProcessIdentity,
        deadline: tokio::time::Instant,
    ) -> HostFuture<'a, ()> {
        Box::pin(async move {
            while self.still_there(id, identity).await && tokio::time::Instant::now() < deadline {
                // The answer is a state (a unit's, under systemd) and tells
                // no end: asked until the deadline.
                tokio::time::sleep(Duration::from_millis(crate::laws::timing::POLL_MS)).await;
            }
        })
    }

    /// End the worker `identity` of `id` by force, now.
    fn kill<'a>(&'a self, id: &'a str, identity: ProcessIdentity) -> HostFuture<'a, ()>;

    /// After a worker's control connection ended: why, as far as the host
    /// knows (under systemd it waits for the unit to go down and reads its
    /// result).
    fn why_ended<'a>(&'a self, id: &'a str) -> HostFuture<'a, String>;

    /// How the worker this host started for `id` exited, in words, if it
    /// saw it exit at or after `since_ms` (monotonic); told once. By
    /// default the host does not know (a unit's end is read by
    /// [`WorkerHost::why_ended`]).
    fn exit_of(&self, _id: &str, _since_ms: u64) -> Option<String> {
        None
    }

    /// Where workers record busy evidence and the supervisor reads it.
    fn busy_journal(&self) -> BusyJournal;

    /// How long a worker may stay silent before the supervisor counts it
    /// hung, when the supervisor is its watchdog (not under systemd, whose
    /// `WatchdogSec` kills a hung unit itself).
    fn watchdog(&self, config: &Config) -> Option<Duration>;

    /// End the kernel `kernel` of `id` that no worker drives: every
    /// process of the session ends.
    fn stop_kernel<'a>(&'a self, id: &'a str, kernel: ProcessIdentity) -> HostFuture<'a, ()>;

    /// Leave no trace of `id` with the host: its units stopped and their
    /// failures forgotten. A host that runs nothing beside the session's
    /// processes (plain processes) has nothing to do.
    fn forget_session<'a>(&'a self, _id: &'a str) -> HostFuture<'a, Result<(), HostError>> {
        Box::pin(async { Ok(()) })
    }

    /// What the host still runs of `id` beyond its worker and kernel
    /// processes (a unit still up), in words; by default nothing.
    fn left_of_session<'a>(&'a self, _id: &'a str) -> HostFuture<'a, Option<String>> {
        Box::pin(async { None })
    }

    /// Sessions the host still runs something of, whether or not the
    /// supervisor knows them (live units); by default none (plain
    /// processes keep their records in session directories instead).
    fn sessions_running<'a>(&'a self) -> HostFuture<'a, Vec<String>> {
        Box::pin(async { Vec::new() })
    }
}

/// The host of `kind`: on systemd this connects to the user manager.
pub async fn chosen(
    kind: HostKind,
    paths: &Paths,
    config: &Config,
) -> Result<Rc<dyn WorkerHost>, HostError> {
    Ok(match kind {
        HostKind::Process => Rc::new(ProcessHost::new(paths.clone(), config)),
        HostKind::Systemd => Rc::new(SystemdHost::connect().await?),
    })
}
