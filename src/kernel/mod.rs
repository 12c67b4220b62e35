//! The kernel: one long-lived process per session that holds the session's
//! shell and runs its jobs, so a run outlives its worker.
//!
//! It is not the worker's child: on the process backend it detaches (its
//! own session and process group) and is a child subreaper, so every
//! process a run starts stays its descendant. It keeps each job's output
//! and end in a durable spool (`spool`) and serves its worker over a
//! private socket (`protocol::kernel`): a worker that crashes, is replaced
//! or leaves with work leaves the kernel and its runs running, and the next
//! worker catches the transcript up from the spool. Only `Stop` (a forced
//! shutdown, `rm`) or the kernel's own death ends its runs.
//!
//! - `zygote`: the kernel's shell, which forks every job.
//! - `jobs`: the books (jobs, the snapshot) and the steps on them.
//! - `output`: reading a job's output pipes into the spool.
//! - `serve`: the socket, the job reports, reaping, the tick.
//! - `tree`: the process tree (subreaper, background jobs, ending all).

mod core;
mod drive;
mod echo;
pub mod error;
mod hang_up;
mod jobs;
mod output;
mod recent;
mod serve;
mod session_dir;
pub mod spool;
mod tree;
mod tty;
mod typist;
mod zygote;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::Path;
use std::rc::Rc;

use nix::fcntl::{Flock, FlockArg, OFlag};
use nix::unistd::ForkResult;

use crate::build_id::build_id;
use crate::host::process::{identity_of, own_identity};
use crate::host::HostKind;
use crate::laws::adoption::ProcessIdentity;
use crate::laws::timing::{TEST_TEMPLATE_IDLE_MS, TM};
use crate::paths::Paths;
use crate::protocol::kernel::KERNEL_PROTOCOL;
use crate::session::env::{first_environment, SessionEnv};
use crate::session::snapshot::{load_or_migrate, Snapshot};
use crate::session::store::{
    private_subdir, read_json, read_meta_or_spare, write_json_unsynced, KernelRecord, SessionFiles,
    SessionMeta,
};
use error::KernelError;

/// What a restore cannot bring back.
const NOT_RESTORED: &str = "background jobs and open file descriptors do not come back";

/// Run the kernel of `session`. With `detach`, the process forks: the
/// parent returns once the kernel serves (or says why it cannot), and the
/// kernel lives on in its own session.
pub fn main(session: &str, detach: bool) -> Result<(), KernelError> {
    let paths = Paths::from_env().map_err(KernelError::Paths)?;
    let files = SessionFiles::new(paths.session_dir(session));
    let meta: SessionMeta =
        read_meta_or_spare(&files)?.ok_or_else(|| KernelError::NoSession(session.to_string()))?;
    if detach && !meta.limits.is_none() {
        // Before the fork: the kernel and everything it starts are inside.
        crate::host::cgroup::enter(session, &meta.limits)?;
    }
    let ready = if detach {
        Some(detach_from_parent()?)
    } else {
        None
    };
    let result = serve_session(&paths, &files, &meta, ready);
    if let Err(e) = &result {
        tracing::error!("{e}");
    }
    result
}

/// Fork; the parent waits for the child's word on a pipe and exits with
/// it. Returns the child's end of the pipe.
fn detach_from_parent() -> Result<std::fs::File, KernelError> {
    let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| KernelError::Process {
        what: "make a pipe",
        source: e.into(),
    })?;
    let (mut read, write) = (std::fs::File::from(read), std::fs::File::from(write));
    // SAFETY: no other thread runs yet (no runtime has started), so the
    // child may do anything after fork. fork(2) is unsafe in nix too (a
    // multithreaded parent would leave the child only async-signal-safe
    // calls), and no safe crate offers it.
    match unsafe { nix::unistd::fork() } {
        Err(e) => Err(KernelError::Process {
            what: "fork",
            source: e.into(),
        }),
        Ok(ForkResult::Child) => {
            drop(read);
            // The child leads no group yet, so setsid(2) succeeds.
            let _ = nix::unistd::setsid();
            Ok(write)
        }
        Ok(ForkResult::Parent { .. }) => {
            drop(write);
            let mut word = String::new();
            let _ = read.read_to_string(&mut word);
            match word.strip_prefix("ok") {
                Some(_) => std::process::exit(0),
                None if word.is_empty() => Err(KernelError::EndedBeforeServing),
                None => Err(KernelError::DetachedFailed(word)),
            }
        }
    }
}

/// The lock that makes this the session's only kernel, held for life.
fn take_lock(files: &SessionFiles) -> Result<Flock<std::fs::File>, KernelError> {
    let path = files.kernel_lock();
    let lock = crate::session::store::private_append(&path)?;
    Flock::lock(lock, FlockArg::LockExclusiveNonblock).map_err(|_| KernelError::Locked {
        dir: files.dir.clone(),
        lock: path.clone(),
    })
}

fn serve_session(
    paths: &Paths,
    files: &SessionFiles,
    meta: &SessionMeta,
    mut ready: Option<std::fs::File>,
) -> Result<(), KernelError> {
    let say = |ready: &mut Option<std::fs::File>, word: &str| {
        if let Some(mut pipe) = ready.take() {
            let _ = pipe.write_all(word.as_bytes());
        }
    };
    let started = start_kernel(paths, files, meta);
    let (kernel, reports, listener, _lock, journal) = match started {
        Ok(parts) => parts,
        Err(e) => {
            say(&mut ready, &e.to_string());
            return Err(e);
        }
    };
    say(&mut ready, "ok");
    // As a unit (Type=notify), the kernel is active once it serves.
    crate::host::systemd::notify(&format!("READY=1\nSTATUS=kernel of session {}", meta.id));
    // Standard streams go to the kernel's log (the worker's are not ours).
    redirect_stdio(&files.kernel_log());
    let ctx = Rc::new(serve::Context {
        kernel,
        session: meta.id.clone(),
        exit: Rc::new(tokio::sync::Notify::new()),
        wake: tokio::sync::Notify::new(),
        stopped: tokio::sync::watch::channel(false).0,
        workers: Rc::new(RefCell::new(Vec::new())),
        queued_inputs: std::cell::Cell::new(0),
        hang_ups: Default::default(),
    });
    let socket = paths.kernel_socket(&meta.id);
    let result = crate::runtime::block_on_local("kernel", async move {
        let listener = tokio::net::UnixListener::from_std(listener).map_err(|source| {
            KernelError::Process {
                what: "serve its socket",
                source,
            }
        })?;
        ctx.kernel.borrow_mut().prepare_for_claim();
        serve::run(ctx, listener, reports, journal).await
    });
    let _ = std::fs::remove_file(&socket);
    let _ = std::fs::remove_file(files.kernel());
    result
}

type Started = (
    serve::Shared,
    std::os::fd::OwnedFd,
    std::os::unix::net::UnixListener,
    Flock<std::fs::File>,
    crate::host::busy_journal::BusyJournal,
);

fn start_kernel(
    paths: &Paths,
    files: &SessionFiles,
    meta: &SessionMeta,
) -> Result<Started, KernelError> {
    let host = HostKind::from_env()?;
    crate::host::log::init(host, "kernel", Some(&meta.id), Some(files.kernel_log()));
    tree::become_subreaper()?;
    private_subdir(&files.scratch())?;
    let lock = take_lock(files)?;
    // Read before this kernel's record replaces it; a record from before
    // the machine's boot names a kernel whose processes all ended with it.
    let previous: Option<KernelRecord> = read_json(&files.kernel())
        .ok()
        .flatten()
        .filter(|_| written_since_boot(&files.kernel()));
    let config = crate::config::Config::load(&paths.config).map_err(KernelError::Config)?;
    let (snapshot, first, restored) = match load_or_migrate(&files.snapshot(), &files.namespace())?
    {
        Some(snapshot) => {
            let text = format!(
                "working directory {}, {} variables, {} functions, {} aliases, options and traps; {NOT_RESTORED}",
                snapshot.cwd(),
                count(&snapshot, "var:"),
                count(&snapshot, "func:"),
                count(&snapshot, "alias:")
            );
            let restore = jobs::Restore {
                id: restore_id(),
                text,
            };
            (Some(snapshot), false, Some(restore))
        }
        // A spare's kernel: no `new` has given the session its working
        // directory and environment yet; its claim (or first job) does.
        None if !files.meta().exists() => (None, false, None),
        // Bash's defaults are added once the kernel's shell has said them.
        None => (Some(first_snapshot(files, None)?), true, None),
    };
    // No template yet: the first job would compete with it for the CPU (a
    // session's start); one is prepared when a job ends.
    let timing = core::CoreTiming {
        cancel_grace: config.cancel_grace_ms,
        template_idle: template_idle(),
    };
    let (kernel, reports) = jobs::Kernel::new(files.clone(), snapshot, first, restored, timing)?;
    // Holding the lock, this is the only kernel: whatever the last one
    // left running is a run already cut short.
    for job in kernel.end_jobs_of_a_dead_kernel() {
        tracing::warn!(job, "ended {job}, left running by a kernel that died");
    }
    if let Some(previous) = previous {
        end_session_of_a_dead_kernel(previous.identity);
    }
    sweep_scratch(&files.scratch());
    let listener = crate::host::socket::listen_private(&paths.kernel_socket(&meta.id))?;
    // Not synced: after a machine crash the recorded kernel is dead anyway,
    // and it is only ever trusted by identity (pid and start time).
    write_json_unsynced(
        &files.kernel(),
        &KernelRecord {
            identity: own_identity(),
            build_id: build_id().to_string(),
            protocol: KERNEL_PROTOCOL,
        },
    )?;
    Ok((
        Rc::new(RefCell::new(kernel)),
        reports,
        listener,
        lock,
        host.busy_journal(&paths.state),
    ))
}

/// How long an idle session keeps its templates: `template_idle`, or a
/// second under `EUKHE_TEST_SHORT_WINDOWS=1` (logged), so a test can see
/// them go.
fn template_idle() -> u64 {
    let short = std::env::var(crate::config::TEST_SHORT_WINDOWS).is_ok_and(|v| v == "1");
    if !short {
        return TM.kernel.template_idle;
    }
    tracing::warn!(
        "{}=1 (test only): templates go after {TEST_TEMPLATE_IDLE_MS} ms idle",
        crate::config::TEST_SHORT_WINDOWS
    );
    TEST_TEMPLATE_IDLE_MS
}

/// Remove what an earlier kernel of the session left in `scratch` (its
/// FIFOs, restore scripts and captures; a kernel killed has no chance to):
/// holding the lock, this kernel is the only one, and its shell has made
/// nothing there yet.
fn sweep_scratch(scratch: &Path) {
    let Ok(entries) = std::fs::read_dir(scratch) else {
        return;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        match std::fs::remove_file(entry.path()) {
            Ok(()) => removed += 1,
            Err(e) => tracing::warn!("cannot remove {}: {e}", entry.path().display()),
        }
    }
    if removed > 0 {
        tracing::info!(
            removed,
            "removed what an earlier kernel left in {}",
            scratch.display()
        );
    }
}

/// A session's first snapshot, saved: its working directory and its first
/// environment (the client's, or this process's, the daemon's), and what
/// bash gives every shell (`shell_defaults`, when the kernel's shell has
/// said); from here on they live in the snapshot.
pub(crate) fn first_snapshot(
    files: &SessionFiles,
    shell_defaults: Option<&Snapshot>,
) -> Result<Snapshot, KernelError> {
    let meta: SessionMeta =
        read_json(&files.meta())?.ok_or_else(|| KernelError::Unclaimed(files.dir.clone()))?;
    let chosen: Option<SessionEnv> = read_json(&files.env())?;
    let daemon: BTreeMap<String, String> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    let env = first_environment(chosen.as_ref(), daemon);
    let mut snapshot = Snapshot::fresh(&meta.cwd, &env);
    if let Some(defaults) = shell_defaults {
        snapshot.fill_in(defaults);
    }
    snapshot.save(&files.snapshot())?;
    Ok(snapshot)
}

/// End every process left in the session of the kernel `previous`, which
/// died (this kernel holds the lock): its shell, and the jobs it started
/// and their children. A job whose start it had not yet recorded has no
/// group on file (the kernel may die between its shell forking the job and
/// reading the job's report), and its run is recorded interrupted, so it
/// must not go on. A job's processes stay in the kernel's session however
/// they are reparented, and while any of them lives no new process can get
/// the dead kernel's pid; so a live process with that pid means none is
/// left, and nothing is ended.
fn end_session_of_a_dead_kernel(previous: ProcessIdentity) {
    if identity_of(previous.pid).is_some() {
        return;
    }
    let members = tree::session_members(previous);
    for member in &members {
        crate::host::process::signal(*member, nix::sys::signal::Signal::SIGKILL);
    }
    if !members.is_empty() {
        tracing::warn!(
            "ended {} processes left running in the session of a kernel that died",
            members.len()
        );
    }
}

/// Whether `path` was last written after the machine booted (`btime` of
/// /proc/stat); false when either cannot be read.
fn written_since_boot(path: &std::path::Path) -> bool {
    let boot = std::fs::read_to_string("/proc/stat").ok().and_then(|stat| {
        stat.lines()
            .find_map(|line| line.strip_prefix("btime "))
            .and_then(|secs| secs.trim().parse::<u64>().ok())
    });
    let written = std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok());
    matches!((boot, written), (Some(boot), Some(written)) if written.as_secs() >= boot)
}

fn count(snapshot: &Snapshot, prefix: &str) -> usize {
    snapshot
        .items
        .keys()
        .filter(|k| k.starts_with(prefix))
        .count()
}

fn redirect_stdio(log: &std::path::Path) {
    let Ok(file) = crate::session::store::private_append(log) else {
        return;
    };
    let null = std::fs::File::open("/dev/null").ok();
    if let Some(null) = &null {
        let _ = nix::unistd::dup2_stdin(null);
    }
    let _ = nix::unistd::dup2_stdout(&file);
    let _ = nix::unistd::dup2_stderr(&file);
}

/// A fresh id for a restore: random, so no later restore of the session
/// (after a reboot, pids and start times repeat) goes by the same one.
fn restore_id() -> u64 {
    let mut bytes = [0u8; 8];
    if getrandom::fill(&mut bytes).is_err() {
        // Without a random source: the time and the pid, unique enough.
        let now = crate::clock::wall_ms();
        return now.rotate_left(20) ^ u64::from(std::process::id());
    }
    u64::from_le_bytes(bytes)
}
