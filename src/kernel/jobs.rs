//! The kernel's books: its jobs, the snapshot, and the steps on them (start
//! a job, take its report, its end, a cancel). A job is a run (`r<N>`) or
//! user bash (`b<N>`); each is forked by the shell in its own process group
//! from the snapshot as it is when the job starts, and its changes to the
//! shell state are merged into the snapshot when it ends.
//!
//! - `template`: shells and output FIFOs made ahead of the next job, and
//!   the spare's claim.
//! - `ends`: a job's output closing, its end, its capture merged.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::rc::Rc;

use tokio::sync::watch;

use super::core::jobs::JobBooks;
use super::core::templates::Taker;
use super::core::{CoreTiming, KernelCore};
use super::error::KernelError;
use super::output::open_fifo;
use super::spool::{JobEnd, LostOutput, Spool};
use super::zygote::{self, Pipes};
use crate::host::process::{identity_of, is_alive};
use crate::laws::runs::{kernel_accepts, SpoolRun};
use crate::protocol::kernel::JobState;
use crate::protocol::tty::WindowSize;
use crate::session::entry::Stream;
use crate::session::snapshot::Snapshot;
use crate::session::store::SessionFiles;

mod ends;
mod shell;
mod template;
mod terminal;

use template::{Template, Templates};

/// What of a job the kernel runs is I/O (its books are the core's:
/// `core::jobs::JobBooks`).
pub struct Job {
    /// Its spool file, appended by both output readers.
    pub out: File,
    /// The state it started from: its changes are measured against it.
    pub started_from: Rc<Snapshot>,
    /// The read ends of its output FIFOs while their readers hold them
    /// (stdout, stderr): output still in them is read before the job's
    /// end is told.
    pub fifos: [Option<RawFd>; 2],
    /// Holds the FIFOs open for writing until the job has opened them, so
    /// their readers do not see an end before it starts.
    pub placeholders: Vec<File>,
    /// An interactive shell job's checkpoints.
    shell: Option<shell::ShellJob>,
    /// The OOM kills the kernel's cgroup had counted as it started: more
    /// at its end tell that its memory limit was reached.
    pub oom_kills_at_start: u64,
    /// Its latest small records, for its followers to send inline.
    pub recent: super::recent::RecentOutput,
    /// How far its spool file has grown (the kernel is its one writer and
    /// made it empty): its followers need not ask the file.
    pub spooled: u64,
    /// The typists that asked for its echo: each output is sent to them
    /// as it is spooled, past the worker.
    pub echoes: super::echo::Echoes,
}

/// The status of a job the kernel accepted but could not start (a shell's
/// "found but cannot execute").
pub const COULD_NOT_START: i32 = 126;

/// What handing a job to a shell made: its output readers, the FIFOs'
/// placeholder writers and the readers' fds.
struct Handed {
    readers: Readers,
    placeholders: Vec<File>,
    read_ends: [Option<RawFd>; 2],
    shell: Option<shell::ShellJob>,
}

/// A start over the snapshot: what it brought back, and the id the
/// restore goes by, so its notice is stored once however many workers
/// are told of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Restore {
    /// Random, drawn as the kernel starts.
    pub id: u64,
    /// What was restored and what could not be.
    pub text: String,
}

/// The kernel's books beside its core: the spool, the snapshot, the jobs'
/// pipes and files, the templates, and the shell they are handed to.
pub struct Kernel {
    pub files: SessionFiles,
    pub spool: Spool,
    /// Shared with the jobs started from it (`Job::started_from`): a job
    /// start copies no state, and a merge copies it only while a job
    /// started from it still runs.
    pub snapshot: Rc<Snapshot>,
    pub jobs: HashMap<String, Job>,
    pub pipes: Pipes,
    pub shell_pid: u32,
    /// What the restore brought back, if this kernel started over a
    /// snapshot: offered to each worker in its hello.
    pub restored: Option<Restore>,
    /// Bumped on every change a follower may be waiting for.
    pub changed: watch::Sender<u64>,
    /// Notices for the worker (sent to the connected ones, in order).
    pub notices: Vec<String>,
    /// Which jobs run, the cancels, and when the templates go.
    pub core: KernelCore,
    /// Each job's group, end, open streams, cancel and lost output.
    pub books: JobBooks,
    /// The terminals of terminal jobs.
    pub ttys: super::tty::Terminals,
    templates: Templates,
    /// What bash gives every shell before a restore, once the kernel's
    /// shell has said (`Report::Defaults`).
    shell_defaults: Option<Snapshot>,
    /// The snapshot is the session's first (made from `new`'s directory and
    /// environment) and no job's capture has been merged into it yet: bash's
    /// defaults are still to be added to it.
    first_unmerged: bool,
}

impl Kernel {
    /// A kernel over `snapshot` (`first`: the session's first, just made),
    /// or, with none, a spare's: unclaimed until [`Kernel::claim`] makes
    /// the session's first snapshot.
    pub fn new(
        files: SessionFiles,
        snapshot: Option<Snapshot>,
        first: bool,
        restored: Option<Restore>,
        timing: CoreTiming,
    ) -> Result<(Kernel, OwnedFd), KernelError> {
        let unclaimed = snapshot.is_none();
        let snapshot = snapshot.unwrap_or_else(|| Snapshot::fresh("/", std::iter::empty()));
        let spool = Spool::open(&files.spool())?;
        let (pipes, reports) = zygote::pipes()?;
        let shell_pid = zygote::start(&pipes)?;
        let (changed, _) = watch::channel(0);
        Ok((
            Kernel {
                files,
                spool,
                snapshot: Rc::new(snapshot),
                jobs: HashMap::new(),
                pipes,
                shell_pid,
                restored,
                changed,
                notices: Vec::new(),
                core: KernelCore::new(timing, !unclaimed, crate::clock::mono_ms()),
                books: JobBooks::default(),
                ttys: Default::default(),
                templates: Templates::default(),
                shell_defaults: None,
                first_unmerged: first && !unclaimed,
            },
            reports,
        ))
    }

    pub fn bump(&self) {
        self.changed.send_modify(|n| *n += 1);
    }

    fn scratch(&self, job: &str, what: &str) -> PathBuf {
        self.files.scratch().join(format!("{job}.{what}"))
    }

    /// What the spool knows, as `laws::runs` reads it.
    fn spool_runs(&self) -> BTreeMap<u64, SpoolRun> {
        self.spool
            .jobs()
            .into_iter()
            .filter_map(|(job, end)| {
                let run = job.strip_prefix('r')?.parse().ok()?;
                Some((
                    run,
                    match end {
                        Some(end) => SpoolRun::Ended { status: end.status },
                        None => SpoolRun::Accepted,
                    },
                ))
            })
            .collect()
    }

    /// Every job the spool knows, as a worker sees it.
    pub fn job_states(&self) -> BTreeMap<String, JobState> {
        self.spool
            .jobs()
            .into_iter()
            .map(|(job, end)| {
                let state = self.books.state(&job, end);
                (job, state)
            })
            .collect()
    }

    /// `job` was accepted but could not be handed to a shell (`error`):
    /// its end, kept in the spool where a job's end is kept.
    fn could_not_start(&mut self, job: &str, error: &dyn std::fmt::Display) -> JobEnd {
        self.remove_scratch(job);
        let end = JobEnd {
            status: COULD_NOT_START,
            signal: None,
            cancelled: false,
            notice: Some(format!("{} did not start: {error}", job_in_words(job))),
            settled: true,
            lost_output: None,
        };
        if keeps_end(job) {
            if let Err(e) = self.spool.set_end(job, &end) {
                self.notices
                    .push(format!("the end of {job} could not be kept: {e}"));
            }
        }
        end
    }

    /// Start `job` unless the spool knows it: `Ok(Some(readers))` of its
    /// output when it started, `Ok(None)` when the spool knew it. A job the
    /// spool accepted but the kernel could not hand to a shell (its scratch
    /// files cannot be made, say on a full disk) ends at once with
    /// `COULD_NOT_START` and a notice saying why: its acceptance stands
    /// (the run never starts twice), and it was never running, so it is not
    /// recorded interrupted.
    pub fn start(
        &mut self,
        job: &str,
        command: &str,
        (stdin_of, tty): (Option<u32>, Option<WindowSize>),
    ) -> Result<Option<Readers>, KernelError> {
        if self.core.stopping() {
            return Err(KernelError::Stopping);
        }
        // A job reaches a spare's kernel only once `new` claimed it; the
        // claim's word may not have come first.
        self.claim(crate::clock::mono_ms())?;
        // A shell job's last command may have changed the state this job
        // starts from.
        self.merge_shell_checkpoints();
        if let Some(run) = job.strip_prefix('r').and_then(|n| n.parse::<u64>().ok()) {
            if !kernel_accepts(&self.spool_runs(), run) {
                return Ok(None);
            }
        }
        let Some(out) = self.spool.accept(job)? else {
            return Ok(None);
        };
        let handed = self.hand_to_shell(job, command, stdin_of, tty);
        let mut shell = None;
        let (readers, placeholders, fifos, end) = match handed {
            Ok(handed) => {
                shell = handed.shell;
                (handed.readers, handed.placeholders, handed.read_ends, None)
            }
            Err(e) => (
                Vec::new(),
                Vec::new(),
                [None, None],
                Some(self.could_not_start(job, &e)),
            ),
        };
        let now = crate::clock::mono_ms();
        self.core.job_started(job, now);
        match end {
            Some(end) => {
                self.core.job_ended(job, now);
                self.books.not_started(job, end);
            }
            None => {
                self.books.started(job);
                if tty.is_some() {
                    self.core.watch_waiting(job, now);
                }
            }
        }
        self.jobs.insert(
            job.to_string(),
            Job {
                out,
                started_from: Rc::clone(&self.snapshot),
                fifos,
                placeholders,
                shell,
                oom_kills_at_start: crate::host::cgroup::own_oom_kills(),
                recent: Default::default(),
                spooled: 0,
                echoes: Default::default(),
            },
        );
        self.bump();
        Ok(Some(readers))
    }

    /// Make `job`'s output FIFOs and hand it to the template, or to the
    /// shell with the snapshot's restore script. Its shell runs `command`
    /// with the standard input of process `stdin_of` (empty: `/dev/null`).
    fn hand_to_shell(
        &mut self,
        job: &str,
        command: &str,
        stdin_of: Option<u32>,
        tty: Option<WindowSize>,
    ) -> Result<Handed, KernelError> {
        // The shell reads NUL-separated fields: a NUL inside the command
        // would split it, and what follows would be read as the next job.
        if command.contains('\0') {
            return Err(KernelError::NulInCommand);
        }
        let capture = self.scratch(job, "state");
        let _ = std::fs::remove_file(&capture);
        if let Some(size) = tty {
            return self.hand_terminal_job(job, command, size, &capture.to_string_lossy());
        }
        let fifos = STREAMS.map(|stream| self.scratch(job, stream_name(stream)));
        let made = match self.take_spare(&fifos) {
            Some(made) => made,
            None => [open_fifo(&fifos[0])?, open_fifo(&fifos[1])?],
        };
        let mut placeholders = Vec::new();
        let mut readers = Vec::new();
        for (stream, fifo) in STREAMS.into_iter().zip(made) {
            placeholders.push(fifo.placeholder);
            readers.push((stream, fifo.reader));
        }
        let read_ends = [
            Some(readers[0].1.as_raw_fd()),
            Some(readers[1].1.as_raw_fd()),
        ];
        let (out_fifo, err_fifo) = (fifos[0].to_string_lossy(), fifos[1].to_string_lossy());
        let capture = capture.to_string_lossy();
        let stdin = stdin_of.map_or(String::new(), |pid| format!("/proc/{pid}/fd/0"));
        let book = &mut self.templates.book;
        let taker = book.take_job(Template::is_alive);
        let template = taker.slot().and_then(|slot| book.handle_mut(slot));
        let handed = match (taker, template) {
            // The template restored all but traps and options: the job
            // applies those (its `late` script) and runs at once.
            // Its job shell names the FIFOs and the capture after the job.
            (Taker::Current { arm_first }, Some(template)) => {
                let armed = if arm_first { template.arm() } else { Ok(()) };
                armed.and_then(|()| template.take(job, &stdin, command))
            }
            // Its job shell, forked ahead, restores the whole snapshot.
            (Taker::Claim, Some(template)) => template.take(job, &stdin, command),
            _ => {
                let restore = self.scratch(job, "restore");
                let late = self.scratch(job, "late");
                write_scripts(&self.snapshot, &restore, &late)?;
                let (restore, late) = (restore.to_string_lossy(), late.to_string_lossy());
                let message = zygote::message(&[
                    "job", job, &out_fifo, &err_fifo, &restore, &late, &capture, &stdin, "",
                    command,
                ]);
                self.shell_input()?.write_all(&message)
            }
        };
        handed.map_err(|source| KernelError::Hand {
            job: job.to_string(),
            source,
        })?;
        Ok(Handed {
            readers,
            placeholders,
            read_ends,
            shell: None,
        })
    }

    fn shell_input(&self) -> Result<File, KernelError> {
        let pipe = self.pipes.jobs_write.try_clone();
        Ok(File::from(pipe.map_err(|source| KernelError::Process {
            what: "reach its shell",
            source,
        })?))
    }

    /// Whether a job has not ended yet.
    fn job_running(&self) -> bool {
        self.core.job_running()
    }

    /// The kernel's shell said what bash gives every shell: kept for the
    /// first snapshot a claim makes, and added to a first snapshot no job
    /// has changed yet. Not a change of the snapshot (no job sees one): a
    /// template made over it stays.
    pub fn shell_started(&mut self, defaults: Snapshot) {
        if self.first_unmerged {
            Rc::make_mut(&mut self.snapshot).fill_in(&defaults);
        }
        self.shell_defaults = Some(defaults);
    }

    /// The job's shell is running, in its own process group (at `now`).
    pub fn started(&mut self, job: &str, group: u32, now: u64) {
        if let Some(j) = self.jobs.get_mut(job) {
            self.core.group_started(job, group, now);
            j.placeholders.clear();
            if self.books.group_started(job, group) == Some(true) {
                // Its end came first (`end_on_closed_output`).
                self.core.ended_before_reporter(group);
            }
            // A terminal job's processes are in its shell's session.
            let leader = self.ttys.started(job).unwrap_or(group);
            if let Some(leader) = identity_of(leader) {
                if let Err(e) = self.spool.set_group(job, leader) {
                    tracing::warn!("{job}'s process group is not recorded: {e}");
                }
            }
        }
    }

    /// The running job whose process group `group` leads.
    pub fn job_of_group(&self, group: u32) -> Option<String> {
        self.books.job_of_group(group)
    }

    /// End what a kernel that died left running: the process group of each
    /// job it started that has no end, if its leader still lives (on the
    /// process backend its jobs outlive it; under systemd the kernel unit's
    /// cgroup is emptied first). Their runs are recorded interrupted, so
    /// they must not go on. Returns the jobs ended.
    pub fn end_jobs_of_a_dead_kernel(&self) -> Vec<String> {
        let mut ended = Vec::new();
        for (job, leader) in self.spool.unended_groups() {
            if is_alive(leader) {
                super::tree::signal_group(leader.pid, nix::sys::signal::Signal::SIGKILL);
                ended.push(job);
            }
        }
        ended
    }

    /// Store output of `job`.
    pub fn output(&mut self, job: &str, stream: Stream, bytes: &[u8]) {
        // A terminal job's output is what its program wrote to its
        // terminal: it is not waiting for input now.
        self.core.terminal_output(job, crate::clock::mono_ms());
        if let Some(j) = self.jobs.get_mut(job) {
            match Spool::append(&mut j.out, stream, bytes) {
                Ok(end) => {
                    j.echoes.send(stream, (j.spooled, end), bytes);
                    j.spooled = end;
                    j.recent.appended(stream, bytes, end)
                }
                Err(e) => {
                    j.recent.clear();
                    let more = LostOutput {
                        bytes: bytes.len() as u64,
                        error: e.to_string(),
                    };
                    self.books.output_lost(job, more);
                }
            }
            self.merge_shell_checkpoint(job);
            self.bump();
        }
    }
}

/// Whether `job`'s end is kept on disk: a run's is (a later worker records
/// it); user bash's is not (its client leaves with its worker, and the
/// next worker drops it), which spares every `eukhe bash` two file writes.
fn keeps_end(job: &str) -> bool {
    job.starts_with('r')
}

/// Write `snapshot`'s `restore` and `late` scripts.
fn write_scripts(
    snapshot: &Snapshot,
    restore: &std::path::Path,
    late: &std::path::Path,
) -> Result<(), KernelError> {
    write_private(restore, &snapshot.template_script())
        .and_then(|()| write_private(late, &snapshot.late_script()))
        .map_err(|source| KernelError::Scratch {
            action: "write",
            path: restore.to_path_buf(),
            source,
        })
}

/// Write a restore script, 0600: it holds the session's variables, which
/// may be secrets.
fn write_private(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(text.as_bytes())
}

/// A started job's output pipes, to be read by `output::read`.
pub type Readers = Vec<(Stream, tokio::net::unix::pipe::Receiver)>;

/// A job as the user knows it: `r2` is "run 2", `b1` "bash 1".
pub(super) fn job_in_words(job: &str) -> String {
    match job.split_at_checked(1) {
        Some(("r", n)) => format!("run {n}"),
        // User bash's tag is `b<number>-<worker>-<seq>`.
        Some(("b", tag)) => format!("bash {}", tag.split('-').next().unwrap_or(tag)),
        _ => job.to_string(),
    }
}

/// A job's output streams, in the order of its FIFOs.
const STREAMS: [Stream; 2] = [Stream::Stdout, Stream::Stderr];

pub fn stream_name(stream: Stream) -> &'static str {
    match stream {
        Stream::Stdout => "out",
        Stream::Stderr => "err",
    }
}
