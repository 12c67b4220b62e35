//! The supervisor's books: one slot per session.

use super::SupervisorError;
use std::collections::{BTreeMap, HashSet};

use crate::clock::mono_ms;
use crate::config::Config;
use crate::host::process::is_alive;
use crate::host::workers::WorkerHost;
use crate::laws::adoption::ProcessIdentity;
use crate::laws::idle_stop::Seen;
use crate::laws::limits::ResourceLimits;
use crate::laws::removal::may_bring_back;
use crate::laws::restart::RestartBudget;
use crate::laws::work::WorkSet;
use crate::paths::Paths;
use crate::protocol::message::{SessionInfo, SessionResources};
use crate::session::removed::Removals;
use crate::session::snapshot::Snapshot;
use crate::session::store::{
    check_files, list_sessions, list_spares, list_unreadable, normalize_name, read_json,
    KernelRecord, SessionFiles, SessionMeta,
};
use crate::session::SessionError;

/// Where a session's worker stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SlotState {
    /// No worker; the session rests on disk.
    Saved,
    /// A worker is being launched.
    Starting,
    /// A worker serves the session.
    Running {
        /// The worker's process.
        identity: ProcessIdentity,
        /// The build it runs.
        build: String,
    },
    /// The worker failed; a restart waits out its pause.
    Restarting,
    /// Failed too often inside the restart window.
    GivenUp,
    /// Its files cannot be read (which one and why): not launched, so it
    /// does not crash-loop; checked again when a request names it.
    Damaged {
        /// The file and what is wrong with it.
        problem: String,
    },
    /// Left alone for `idle_stop_ms`: its worker is asked to quiesce and,
    /// if it does, stopped with its kernel (then `Saved`). Requests naming
    /// the session wait until this is over, then wake it.
    IdleStopping,
    /// Being removed (`eukhe rm`): nothing launches it any more.
    Removing,
}

/// One session as the supervisor keeps it.
pub struct Slot {
    /// The session's metadata (id, name, working directory, ...).
    pub meta: SessionMeta,
    /// Where its worker stands.
    pub state: SlotState,
    /// Its worker's failures in the restart window.
    pub budget: RestartBudget,
    /// Its work, as its worker last reported it.
    pub work: WorkSet,
    /// Background jobs and the kernel, as the worker last reported them.
    pub background: u32,
    /// The kernel's pid, as the worker last reported it.
    pub kernel_pid: Option<u32>,
    /// The user bash running, as the worker last reported them.
    pub bash: Vec<u64>,
    /// A terminal run waits for input, as the worker last reported it.
    pub waiting: bool,
    /// Bumped at each launch, so a stale watcher knows it is stale.
    pub generation: u64,
    /// The shell's working directory as the snapshot last said, and the
    /// snapshot's modification time then: `ls` reads a snapshot again
    /// only when it changed.
    pub shell_cwd: std::cell::RefCell<Option<(std::time::SystemTime, String)>>,
    /// Client connections open at the worker, as it last reported them.
    pub clients: u32,
    /// Requests naming the session still being handed to its worker.
    pub requests_in_flight: u32,
    /// When the session was last seen in use (monotonic ms,
    /// `laws::idle_stop::last_active`): the idle-stop clock.
    pub last_active_ms: u64,
    /// A spare session no `new` has claimed (`supervisor::spare`): listed,
    /// named, counted and told nowhere.
    pub spare: bool,
    /// Its worker's last failure: when (monotonic ms) and why. A client
    /// that waited in vain for a worker is told it.
    pub last_failure: Option<(u64, String)>,
}

impl Slot {
    /// A session resting in `state`, with nothing known of its worker yet.
    pub fn new(meta: SessionMeta, state: SlotState) -> Slot {
        Slot {
            meta,
            state,
            budget: RestartBudget::new(),
            work: WorkSet::EMPTY,
            background: 0,
            kernel_pid: None,
            bash: Vec::new(),
            waiting: false,
            generation: 0,
            shell_cwd: Default::default(),
            clients: 0,
            requests_in_flight: 0,
            last_active_ms: mono_ms(),
            spare: false,
            last_failure: None,
        }
    }

    /// The state as `eukhe ls` (and the event stream) shows it.
    pub fn state_label(&self) -> &'static str {
        match &self.state {
            SlotState::Saved => "saved",
            SlotState::Damaged { .. } => "damaged",
            SlotState::Starting => "running",
            SlotState::Restarting => "restarting",
            SlotState::GivenUp => "given-up",
            SlotState::IdleStopping => "stopping",
            SlotState::Removing => "removing",
            SlotState::Running { .. } if self.work.is_empty() => "idle",
            SlotState::Running { .. } => "busy",
        }
    }

    /// What the idle-stop decision sees of the session now.
    pub fn seen(&self) -> Seen {
        Seen {
            work: self.work,
            clients: self.clients,
            requests_in_flight: self.requests_in_flight,
        }
    }

    /// The session's working directory now: its shell's, as its snapshot
    /// says, else (no snapshot yet, or one that cannot be read) the one it
    /// was created in.
    pub fn cwd(&self, files: &SessionFiles) -> String {
        let path = files.snapshot();
        let Ok(modified) = std::fs::metadata(&path).and_then(|m| m.modified()) else {
            return self.meta.cwd.clone();
        };
        if let Some((at, cwd)) = &*self.shell_cwd.borrow() {
            if *at == modified {
                return cwd.clone();
            }
        }
        match Snapshot::load(&path) {
            Ok(Some(snapshot)) => {
                let cwd = snapshot.cwd().to_string();
                *self.shell_cwd.borrow_mut() = Some((modified, cwd.clone()));
                cwd
            }
            _ => self.meta.cwd.clone(),
        }
    }
}

pub struct Supervisor {
    pub paths: Paths,
    pub config: Config,
    pub slots: BTreeMap<String, Slot>,
    /// The shutdown: decided (no new connections, no restarts), and
    /// whether its answers are out (the process may end).
    pub shutdown: super::shutdown::ShutdownSignal,
    /// The socket came from the service manager, which owns its file.
    pub socket_activated: bool,
    /// The backend workers run on, chosen once at start.
    pub host: std::rc::Rc<dyn WorkerHost>,
    /// Woken whenever a slot's state changes (see `set_state`).
    pub changed: std::rc::Rc<tokio::sync::Notify>,
    /// Sessions removed from this state directory (`session::removed`):
    /// never listed, launched or revived again, their ids never reused.
    pub removed: HashSet<String>,
    /// The event stream's subscribers (`eukhe events`, `eukhe top`).
    pub events: super::events::EventHub,
    /// Until when `ls` and `status` wait for the adoptions, resumptions and
    /// revivals a starting daemon began (none: they do not wait).
    pub starts_settle_by: Option<tokio::time::Instant>,
}

impl Supervisor {
    pub fn new(paths: Paths, config: Config, host: std::rc::Rc<dyn WorkerHost>) -> Self {
        let removed = Removals::new(&paths.state).ids();
        let mut slots: BTreeMap<String, Slot> = list_sessions(&paths.state)
            .into_iter()
            .filter(|meta| may_bring_back(removed.contains(&meta.id)))
            .map(|meta| {
                let files = SessionFiles::new(paths.session_dir(&meta.id));
                // Read now, so `ls` names a damaged session before any
                // request tries to start it.
                let kernel_lives = read_json::<KernelRecord>(&files.kernel())
                    .ok()
                    .flatten()
                    .is_some_and(|record| is_alive(record.identity));
                let state = match check_files(&files, !kernel_lives) {
                    Err(problem) => SlotState::Damaged {
                        problem: problem.to_string(),
                    },
                    Ok(()) if files.given_up().exists() => SlotState::GivenUp,
                    Ok(()) => SlotState::Saved,
                };
                (meta.id.clone(), Slot::new(meta, state))
            })
            .collect();
        // A spare left by an earlier daemon is launched again.
        for meta in list_spares(&paths.state) {
            if !may_bring_back(removed.contains(&meta.id)) {
                continue;
            }
            let mut slot = Slot::new(meta, SlotState::Saved);
            slot.spare = true;
            slots.insert(slot.meta.id.clone(), slot);
        }
        // A session whose metadata cannot be read is still listed (with
        // what is wrong), not silently gone.
        for (id, problem) in list_unreadable(&paths.state) {
            if !may_bring_back(removed.contains(&id)) {
                continue;
            }
            let meta = SessionMeta {
                id: id.clone(),
                name: id.clone(),
                cwd: String::new(),
                created_ms: 0,
                engine: "shell".into(),
                limits: Default::default(),
            };
            let slot = Slot::new(meta, SlotState::Damaged { problem });
            slots.insert(id, slot);
        }
        Supervisor {
            host,
            paths,
            config,
            slots,
            shutdown: Default::default(),
            socket_activated: false,
            changed: Default::default(),
            removed,
            events: Default::default(),
            starts_settle_by: None,
        }
    }

    /// Set the state of `id`'s slot and wake whoever waits on a change.
    pub fn set_state(&mut self, id: &str, state: SlotState) {
        if let Some(slot) = self.slots.get_mut(id) {
            slot.state = state;
            self.state_changed(id);
        }
    }

    /// The state of `id`'s slot was changed: wake whoever waits on a
    /// change, and tell the event stream.
    pub fn state_changed(&self, id: &str) {
        if let Some(slot) = self.slots.get(id) {
            self.changed.notify_waiters();
            if !slot.spare {
                self.events.state(id, &slot.meta.name, slot.state_label());
            }
        }
    }

    /// Every session: the slots but a spare.
    pub fn sessions(&self) -> impl Iterator<Item = &Slot> {
        self.slots.values().filter(|slot| !slot.spare)
    }

    /// One line for the service manager's `STATUS=`.
    pub fn status_line(&self) -> String {
        let running = self
            .sessions()
            .filter(|s| matches!(s.state, SlotState::Running { .. }))
            .count();
        let busy = self
            .sessions()
            .filter(|s| matches!(s.state, SlotState::Running { .. }) && !s.work.is_empty())
            .count();
        format!(
            "{} sessions, {running} running, {busy} busy",
            self.sessions().count()
        )
    }

    pub fn files(&self, id: &str) -> SessionFiles {
        SessionFiles::new(self.paths.session_dir(id))
    }

    /// The session named by `reference`: an id, or a unique name.
    pub fn resolve(&self, reference: &str) -> Result<String, SupervisorError> {
        if self.slots.get(reference).is_some_and(|slot| !slot.spare) {
            return Ok(reference.to_string());
        }
        let reference_name = normalize_name(reference);
        let named: Vec<&String> = self
            .sessions()
            .filter(|s| s.meta.name == reference || normalize_name(&s.meta.name) == reference_name)
            .map(|s| &s.meta.id)
            .collect();
        match named.as_slice() {
            [id] => Ok((*id).clone()),
            // Read only when no session answers to it: an error's path.
            [] if self.removed.contains(reference)
                || Removals::new(&self.paths.state).named(reference) =>
            {
                Err(SupervisorError::Removed {
                    id: reference.to_string(),
                })
            }
            [] => Err(SupervisorError::NoSession {
                reference: reference.to_string(),
            }),
            _ => Err(SupervisorError::Ambiguous {
                reference: reference.to_string(),
                count: named.len(),
            }),
        }
    }

    /// Read a damaged session's files again (a person may have mended
    /// them): `Ok` once they read, the slot saved (or given up, if it was)
    /// and its metadata as stored; else what is still wrong. Other states
    /// are left alone.
    pub fn recheck(&mut self, id: &str, kernel_lives: bool) -> Result<(), SupervisorError> {
        let files = self.files(id);
        let Some(slot) = self.slots.get_mut(id) else {
            return Ok(());
        };
        if !matches!(slot.state, SlotState::Damaged { .. }) {
            return Ok(());
        }
        let checked = check_files(&files, !kernel_lives)
            .and_then(|()| read_json::<SessionMeta>(&files.meta()));
        match checked {
            Ok(Some(meta)) => {
                slot.meta = meta;
                // Mended, it rests as it did before the damage was seen.
                let state = if files.given_up().exists() {
                    SlotState::GivenUp
                } else {
                    SlotState::Saved
                };
                self.set_state(id, state);
                Ok(())
            }
            Ok(None) => Err(SessionError::Missing { path: files.meta() }.into()),
            Err(problem) => {
                slot.state = SlotState::Damaged {
                    problem: problem.to_string(),
                };
                Err(problem.into())
            }
        }
    }

    pub fn info(&self, now_ms: u64) -> Vec<SessionInfo> {
        self.sessions()
            .map(|slot| {
                let state = slot.state_label();
                let (pid, build) = match &slot.state {
                    SlotState::Running { identity, build } => {
                        (Some(identity.pid), Some(build.clone()))
                    }
                    _ => (None, None),
                };
                SessionInfo {
                    id: slot.meta.id.clone(),
                    name: slot.meta.name.clone(),
                    state: state.to_string(),
                    pid,
                    build,
                    failures_in_window: slot.budget.failures_in_window(now_ms),
                    jobs: slot.background,
                    kernel_pid: slot.kernel_pid,
                    cwd: slot.cwd(&self.files(&slot.meta.id)),
                    created_ms: slot.meta.created_ms,
                    active_ms: self.last_activity(slot),
                    problem: match &slot.state {
                        SlotState::Damaged { problem } => Some(problem.clone()),
                        _ => None,
                    },
                    bash: match &slot.state {
                        SlotState::Running { .. } => slot.bash.clone(),
                        _ => Vec::new(),
                    },
                    waiting: matches!(slot.state, SlotState::Running { .. }) && slot.waiting,
                    resources: resources(&slot.meta.limits, slot.kernel_pid),
                }
            })
            .collect()
    }

    /// When the session last did something, wall-clock ms: its
    /// transcript's last write (every input, output, end and notice is
    /// written there), else its creation.
    fn last_activity(&self, slot: &Slot) -> u64 {
        let written = std::fs::metadata(self.files(&slot.meta.id).transcript())
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_millis() as u64);
        written.max(slot.meta.created_ms)
    }
}

/// `ls`'s resources of a session with limits: them, and what its kernel's
/// cgroup uses now while it lives.
fn resources(limits: &ResourceLimits, kernel_pid: Option<u32>) -> Option<SessionResources> {
    if limits.is_none() {
        return None;
    }
    let (memory_bytes, tasks) = kernel_pid.map_or((None, None), crate::host::cgroup::usage);
    Some(SessionResources {
        limits: *limits,
        memory_bytes,
        tasks,
    })
}
