//! The kernel's books: its jobs, the snapshot, and the steps on them (start
//! a job, take its report, its end, a cancel). A job is a run (`r<N>`) or
//! user bash (`b<N>`); each is forked by the shell in its own process group
//! from the snapshot as it is when the job starts, and its changes to the
//! shell state are merged into the snapshot when it ends.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::rc::Rc;

use tokio::sync::watch;

use super::output::{open_fifo, Fifo};
use super::spool::{JobEnd, LostOutput, Spool};
use super::zygote::{self, Pipes};
use crate::host::process::{identity_of, is_alive};
use crate::laws::adoption::ProcessIdentity;
use crate::laws::runs::{kernel_accepts, SpoolRun};
use crate::laws::timing::TM;
use crate::protocol::kernel::JobState;
use crate::session::entry::Stream;
use crate::session::snapshot::{parse_capture, Capture, Snapshot};
use crate::session::store::SessionFiles;
use crate::session::SessionError;

/// One job the kernel runs.
pub struct Job {
    /// Its spool file, appended by both output readers.
    pub out: File,
    /// The shell process that reports its end (its process group).
    pub group: Option<u32>,
    /// The state it started from: its changes are measured against it.
    pub started_from: Rc<Snapshot>,
    pub end: Option<JobEnd>,
    /// Output streams still open (0: settled).
    pub open_streams: u8,
    /// The read ends of its output FIFOs while their readers hold them
    /// (stdout, stderr): output still in them is read before the job's
    /// end is told.
    pub fifos: [Option<RawFd>; 2],
    /// Bytes a reader holds back (a UTF-8 character cut at the end of a
    /// read), per stream.
    pub held: [usize; 2],
    pub cancelled: bool,
    /// Holds the FIFOs open for writing until the job has opened them, so
    /// their readers do not see an end before it starts.
    pub placeholders: Vec<File>,
    /// Output the spool could not keep and no end has told yet.
    pub lost: Option<LostOutput>,
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
}

/// A shell forked by the kernel's shell that has restored one version of
/// the snapshot and takes jobs from its FIFO.
pub struct Template {
    /// The snapshot version it restored.
    version: u64,
    fifo: PathBuf,
    /// Where its reporters say they have taken a job.
    taken: PathBuf,
    restore: PathBuf,
    /// Traps and `set -o`, which each job applies itself (the template's
    /// own loop must not run under the user's `set -e` or traps).
    late: PathBuf,
    /// The FIFO's end the kernel writes jobs to (dropping it ends the
    /// template).
    jobs: File,
    /// Where the kernel asks for the next job shell (a byte each).
    next: PathBuf,
    next_writer: File,
    /// A job shell waits for a job: none after one took a job, until
    /// the kernel asks for the next (`Kernel::arm_template`).
    armed: bool,
    /// The template's shell, once it reported ready.
    shell: Option<ProcessIdentity>,
}

impl Template {
    /// Remove its files but `restore` and `late`, which the bash of a job
    /// it took may still be about to read: returns those paths (see
    /// `Kernel::retire`).
    fn remove_files(self) -> [PathBuf; 2] {
        for path in [&self.fifo, &self.taken, &self.next] {
            let _ = std::fs::remove_file(path);
        }
        [self.restore, self.late]
    }

    /// Whether it restored snapshot `version` and its shell is up.
    fn is_ready(&self, version: u64) -> bool {
        self.version == version && self.shell.is_some_and(is_alive)
    }

    /// Hand a job to its waiting job shell (which names the job's FIFOs and
    /// capture after the job).
    fn take(&mut self, job: &str, stdin: &str, command: &str) -> std::io::Result<()> {
        self.armed = false;
        self.jobs
            .write_all(&zygote::message(&[job, stdin, command]))
    }

    /// Have its waiting job's bash restore the `restore` script again now,
    /// ahead of the job it will take.
    fn restore_ahead(&mut self) -> std::io::Result<()> {
        self.jobs
            .write_all(&zygote::message(&[zygote::RESTORE_AHEAD]))
    }

    /// Have a job shell forked, unless one waits already.
    fn arm(&mut self) -> std::io::Result<()> {
        if !self.armed {
            self.next_writer.write_all(b"n")?;
            self.armed = true;
        }
        Ok(())
    }
}

/// Output FIFOs made ahead of the next job, off its way, under names of
/// their own until a job takes them (`Kernel::prepare_spare`).
struct SpareOutput {
    /// stdout's and stderr's.
    paths: [PathBuf; 2],
    fifos: [Fifo; 2],
}

impl SpareOutput {
    fn remove_files(&self) {
        for path in &self.paths {
            let _ = std::fs::remove_file(path);
        }
    }
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
    /// Processes that runs left behind (children of the kernel other than
    /// its shell).
    pub background: u32,
    /// `restore` and `late` scripts of dropped templates, kept while a job
    /// may read them.
    retired_late: Vec<PathBuf>,
    /// Bumped on every change a follower may be waiting for.
    pub changed: watch::Sender<u64>,
    pub stopping: bool,
    /// Notices for the worker (sent to the connected ones, in order).
    pub notices: Vec<String>,
    /// Bumped each time the snapshot changes.
    version: u64,
    template: Option<Template>,
    /// A claimed spare's template, over the blank state: its waiting job
    /// shell restores the whole first snapshot (its `late` script), and
    /// takes the session's first job only if `template` is not ready yet.
    claim_template: Option<Template>,
    template_seq: u64,
    spare: Option<SpareOutput>,
    spare_seq: u64,
    /// The process groups of runs ended as their output closed, whose
    /// reporters have not said `finished` yet.
    ended_before_reporter: Vec<u32>,
    /// When the last job started or ended (monotonic ms).
    last_job_ms: u64,
    /// A spare's kernel whose session has no first snapshot yet.
    unclaimed: bool,
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
    ) -> Result<(Kernel, OwnedFd), String> {
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
                background: 0,
                retired_late: Vec::new(),
                changed,
                stopping: false,
                notices: Vec::new(),
                version: 0,
                template: None,
                claim_template: None,
                template_seq: 0,
                spare: None,
                spare_seq: 0,
                ended_before_reporter: Vec::new(),
                last_job_ms: crate::clock::mono_ms(),
                unclaimed,
                shell_defaults: None,
                first_unmerged: first && !unclaimed,
            },
            reports,
        ))
    }

    /// The spare this kernel serves became a session (`eukhe new` wrote
    /// its metadata): make its first snapshot, from the working directory
    /// and environment `new` gave it. Whether it was made now (a kernel
    /// claimed before, or never a spare's, is left as it is).
    ///
    /// The spare's template, made ahead over the blank state, stays as
    /// [`Kernel::claim_template`]: its `restore` and `late` scripts become
    /// the first snapshot's, which its waiting job's bash, already started,
    /// restores at once (`Template::restore_ahead`), in the milliseconds before
    /// the client's first request comes; so the session's first job waits
    /// for neither a template nor a restore. The session's own template is
    /// made once that job's end is on its way ([`Kernel::arm_template`]), as
    /// after any job: made at the claim, its shell would share the two cores
    /// with that restore and with the client's start.
    pub fn claim(&mut self) -> Result<bool, String> {
        if !self.unclaimed {
            return Ok(false);
        }
        self.snapshot = Rc::new(super::first_snapshot(
            &self.files,
            self.shell_defaults.as_ref(),
        )?);
        self.unclaimed = false;
        self.first_unmerged = true;
        let blank = self.version;
        self.version += 1;
        if let Some(mut template) = self.template.take_if(|t| t.version == blank) {
            let written = write_private(&template.restore, &self.snapshot.template_script())
                .and_then(|()| write_private(&template.late, &self.snapshot.late_script()))
                .and_then(|()| template.restore_ahead());
            match written {
                Ok(()) => {
                    template.version = self.version;
                    self.claim_template = Some(template);
                }
                Err(e) => {
                    tracing::warn!("the spare's template is not used: {e}");
                    self.retire(template);
                }
            }
        }
        Ok(true)
    }

    /// A spare's kernel, while nothing waits: a template over the blank
    /// state and the first job's output pipes, ready for the claim.
    pub fn prepare_for_claim(&mut self) {
        if self.unclaimed {
            self.prepare_template();
            self.prepare_spare();
        }
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
                let live = self.jobs.get(&job);
                let state = match (live, end) {
                    (Some(live), _) if live.end.is_none() || live.open_streams > 0 => {
                        JobState::Running
                    }
                    (_, Some(end)) => JobState::Ended { end },
                    (Some(_), None) => JobState::Running,
                    (None, None) => JobState::Lost,
                };
                (job, state)
            })
            .collect()
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
        stdin_of: Option<u32>,
    ) -> Result<Option<Readers>, String> {
        if self.stopping {
            return Err("the kernel is stopping".into());
        }
        // A job reaches a spare's kernel only once `new` claimed it; the
        // claim's word may not have come first.
        self.claim()?;
        if let Some(run) = job.strip_prefix('r').and_then(|n| n.parse::<u64>().ok()) {
            if !kernel_accepts(&self.spool_runs(), run) {
                return Ok(None);
            }
        }
        let Some(out) = self.spool.accept(job)? else {
            return Ok(None);
        };
        let handed = self.hand_to_shell(job, command, stdin_of);
        let (readers, placeholders, fifos, end) = match handed {
            Ok(handed) => (handed.readers, handed.placeholders, handed.read_ends, None),
            Err(e) => {
                self.remove_scratch(job);
                let end = JobEnd {
                    status: COULD_NOT_START,
                    signal: None,
                    cancelled: false,
                    notice: Some(format!("{} did not start: {e}", job_in_words(job))),
                    settled: true,
                    lost_output: None,
                };
                if keeps_end(job) {
                    if let Err(e) = self.spool.set_end(job, &end) {
                        self.notices
                            .push(format!("the end of {job} could not be kept: {e}"));
                    }
                }
                (Vec::new(), Vec::new(), [None, None], Some(end))
            }
        };
        self.last_job_ms = crate::clock::mono_ms();
        let open_streams = if end.is_some() { 0 } else { 2 };
        self.jobs.insert(
            job.to_string(),
            Job {
                out,
                group: None,
                started_from: Rc::clone(&self.snapshot),
                end,
                open_streams,
                fifos,
                held: [0, 0],
                cancelled: false,
                placeholders,
                lost: None,
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
    ) -> Result<Handed, String> {
        // The shell reads NUL-separated fields: a NUL inside the command
        // would split it, and what follows would be read as the next job.
        if command.contains('\0') {
            return Err(crate::protocol::kernel::NUL_IN_COMMAND.into());
        }
        let capture = self.scratch(job, "state");
        let _ = std::fs::remove_file(&capture);
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
        let version = self.version;
        let claim_template = self
            .claim_template
            .as_mut()
            .filter(|t| t.armed && t.is_ready(version));
        let template = self.template.as_mut().filter(|t| t.is_ready(version));
        let handed = match (template, claim_template) {
            // The template restored all but traps and options: the job
            // applies those (its `late` script) and runs at once.
            // Its job shell names the FIFOs and the capture after the job.
            (Some(template), _) => template
                .arm()
                .and_then(|()| template.take(job, &stdin, command)),
            // Its job shell, forked ahead, restores the whole snapshot.
            (None, Some(claim_template)) => claim_template.take(job, &stdin, command),
            (None, None) => {
                let restore = self.scratch(job, "restore");
                let late = self.scratch(job, "late");
                write_private(&restore, &self.snapshot.template_script())
                    .and_then(|()| write_private(&late, &self.snapshot.late_script()))
                    .map_err(|e| format!("kernel: cannot write {}: {e}", restore.display()))?;
                let (restore, late) = (restore.to_string_lossy(), late.to_string_lossy());
                let message = zygote::message(&[
                    "job", job, &out_fifo, &err_fifo, &restore, &late, &capture, &stdin, command,
                ]);
                self.shell_input()?.write_all(&message)
            }
        };
        handed.map_err(|e| format!("kernel: cannot hand {job} to its shell: {e}"))?;
        Ok(Handed {
            readers,
            placeholders,
            read_ends,
        })
    }

    /// The spare output FIFOs, moved to `paths` (a job's names), if there
    /// are any and the move works.
    fn take_spare(&mut self, paths: &[PathBuf; 2]) -> Option<[Fifo; 2]> {
        let spare = self.spare.take()?;
        for (from, to) in spare.paths.iter().zip(paths) {
            if let Err(e) = std::fs::rename(from, to) {
                tracing::warn!("cannot move {} to {}: {e}", from.display(), to.display());
                spare.remove_files();
                return None;
            }
        }
        Some(spare.fifos)
    }

    /// Make the next job's output FIFOs now, while nothing waits for them.
    pub fn prepare_spare(&mut self) {
        if self.spare.is_some() || self.stopping {
            return;
        }
        self.spare_seq += 1;
        let name = format!("spare-{}", self.spare_seq);
        let paths = STREAMS.map(|stream| self.scratch(&name, stream_name(stream)));
        match open_fifo(&paths[0]).and_then(|out| Ok([out, open_fifo(&paths[1])?])) {
            Ok(fifos) => self.spare = Some(SpareOutput { paths, fifos }),
            Err(e) => {
                tracing::warn!("no output pipes made ahead: {e}");
                for path in &paths {
                    let _ = std::fs::remove_file(path);
                }
            }
        }
    }

    /// Remove the spare output FIFOs (the kernel stops).
    pub fn drop_spare(&mut self) {
        if let Some(spare) = self.spare.take() {
            spare.remove_files();
        }
    }

    fn shell_input(&self) -> Result<File, String> {
        let pipe = self.pipes.jobs_write.try_clone();
        Ok(File::from(pipe.map_err(|e| format!("kernel: {e}"))?))
    }

    /// The template of the current snapshot, if it is up and alive.
    fn ready_template(&mut self) -> Option<&mut Template> {
        let version = self.version;
        self.template.as_mut().filter(|t| t.is_ready(version))
    }

    /// Have the shell fork a template over the current snapshot (the old
    /// one ends: its job FIFO closes). Off every job's way: the next job
    /// finds it restored.
    pub fn prepare_template(&mut self) {
        if let Some(old) = self.template.take() {
            self.retire(old);
        }
        if self.stopping {
            return;
        }
        self.template_seq += 1;
        let name = format!("template-{}", self.template_seq);
        let fifo = self.scratch(&name, "fifo");
        let taken = self.scratch(&name, "taken");
        let restore = self.scratch(&name, "restore");
        let late = self.scratch(&name, "late");
        let next = self.scratch(&name, "next");
        let made = (|| -> Result<Template, String> {
            for path in [&fifo, &taken, &next] {
                let _ = std::fs::remove_file(path);
                super::output::make_fifo(path)?;
            }
            // Read and write: never blocks, and the template sees the end
            // only when the kernel drops it.
            let open = |path: &PathBuf| {
                std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(path)
                    .map_err(|e| format!("kernel: {}: {e}", path.display()))
            };
            let jobs = open(&fifo)?;
            let next_writer = open(&next)?;
            write_private(&restore, &self.snapshot.template_script())
                .and_then(|_| write_private(&late, &self.snapshot.late_script()))
                .map_err(|e| format!("kernel: cannot write {}: {e}", restore.display()))?;
            let message = zygote::message(&[
                "template",
                &fifo.to_string_lossy(),
                &taken.to_string_lossy(),
                &restore.to_string_lossy(),
                &self.files.scratch().to_string_lossy(),
                &late.to_string_lossy(),
                &next.to_string_lossy(),
            ]);
            self.shell_input()?
                .write_all(&message)
                .map_err(|e| format!("kernel: cannot ask for a template: {e}"))?;
            Ok(Template {
                version: self.version,
                fifo: fifo.clone(),
                taken: taken.clone(),
                restore: restore.clone(),
                late: late.clone(),
                jobs,
                next: next.clone(),
                next_writer,
                armed: true,
                shell: None,
            })
        })();
        match made {
            Ok(template) => self.template = Some(template),
            // Jobs then restore the snapshot themselves.
            Err(e) => tracing::warn!("no template: {e}"),
        }
    }

    /// Drop the template of a session that has been idle for
    /// `template_idle` (its shell is memory an idle session need not hold;
    /// the next job restores the snapshot itself and prepares another).
    pub fn drop_idle_template(&mut self, now_ms: u64) {
        // A spare's is there for the claim, however long that takes.
        if self.unclaimed {
            return;
        }
        let held = self.template.is_some() || self.claim_template.is_some();
        if held && template_expired(self.job_running(), self.last_job_ms, now_ms) {
            for template in [self.template.take(), self.claim_template.take()]
                .into_iter()
                .flatten()
            {
                self.retire(template);
            }
        }
    }

    /// Whether a job has not ended yet.
    fn job_running(&self) -> bool {
        self.jobs.values().any(|j| j.end.is_none())
    }

    /// Drop `template`: its job FIFO closes, so its waiting job shell and
    /// reporter end, and then its shell. Its `restore` and `late` scripts
    /// are removed only once no job runs: a job it took may not have
    /// sourced them yet (jobs
    /// run side by side, and a job that ends first can change the snapshot
    /// and so drop the template of the others).
    fn retire(&mut self, template: Template) {
        self.retired_late.extend(template.remove_files());
        self.remove_retired_late();
    }

    /// Remove retired templates' `restore` and `late` scripts, once no job
    /// runs.
    fn remove_retired_late(&mut self) {
        if !self.job_running() {
            for path in self.retired_late.drain(..) {
                let _ = std::fs::remove_file(path);
            }
        }
    }

    /// Have the template fork its next job shell now that a job's end is
    /// on its way (or prepare a template over a changed snapshot).
    pub fn arm_template(&mut self) {
        if self.needs_template() {
            self.prepare_template();
        } else if let Some(template) = self.ready_template() {
            if let Err(e) = template.arm() {
                tracing::warn!("template: cannot ask for a job shell: {e}");
            }
        }
    }

    /// Whether the template is missing or restored an older snapshot.
    pub fn needs_template(&self) -> bool {
        self.template
            .as_ref()
            .is_none_or(|t| t.version != self.version)
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

    /// A template reported that it is ready. Once the session's own is, a
    /// claimed spare's template is no longer needed.
    pub fn template_ready(&mut self, fifo: &str, pid: u32) {
        if let Some(template) = &mut self.template {
            if template.fifo.to_string_lossy() == fifo {
                template.shell = identity_of(pid);
                if let Some(claim_template) = self.claim_template.take() {
                    self.retire(claim_template);
                }
            }
        }
    }

    /// The job's shell is running, in its own process group.
    pub fn started(&mut self, job: &str, group: u32) {
        if let Some(j) = self.jobs.get_mut(job) {
            j.group = Some(group);
            j.placeholders.clear();
            if j.end.is_some() {
                // Its end came first (`end_on_closed_output`).
                self.ended_before_reporter.push(group);
            }
            if let Some(leader) = identity_of(group) {
                if let Err(e) = self.spool.set_group(job, leader) {
                    tracing::warn!("{job}'s process group is not recorded: {e}");
                }
            }
        }
    }

    /// The running job whose process group `group` leads.
    pub fn job_of_group(&self, group: u32) -> Option<String> {
        self.jobs
            .iter()
            .find(|(_, j)| j.group == Some(group) && j.end.is_none())
            .map(|(job, _)| job.clone())
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
        if let Some(j) = self.jobs.get_mut(job) {
            if let Err(e) = Spool::append(&mut j.out, stream, bytes) {
                let more = LostOutput {
                    bytes: bytes.len() as u64,
                    error: e.to_string(),
                };
                LostOutput::add(&mut j.lost, more);
            }
            self.bump();
        }
    }

    /// `job`'s end as it is told, once the output its shell wrote before
    /// it ended is read: counting the output lost since [`Kernel::ended`]
    /// (that last output among it). `None` while it runs.
    pub fn end_to_tell(&mut self, job: &str) -> Option<JobEnd> {
        let j = self.jobs.get_mut(job)?;
        let end = j.end.as_mut()?;
        if let Some(more) = j.lost.take() {
            LostOutput::add(&mut end.lost_output, more);
            if keeps_end(job) {
                if let Err(e) = self.spool.set_end(job, end) {
                    tracing::warn!("{job}'s end could not be kept again: {e}");
                }
            }
        }
        Some(end.clone())
    }

    /// Whether output of `job` waits in its FIFOs, not yet read into the
    /// spool (its shell ended a moment before the reader got to it).
    pub fn unread_output(&self, job: &str) -> bool {
        let Some(j) = self.jobs.get(job) else {
            return false;
        };
        let held = j
            .fifos
            .iter()
            .zip(j.held)
            .any(|(fd, held)| fd.is_some() && held > 0);
        held || j.fifos.iter().flatten().any(|&fd| {
            let mut waiting: libc::c_int = 0;
            // SAFETY: FIONREAD writes one int; `fd` is a FIFO read end its
            // reader task still holds (cleared before the task drops it).
            // No safe crate covers it: nix's ioctl macros generate unsafe
            // functions, and rustix's safe `ioctl_fionread` takes a
            // `BorrowedFd`, which only an unsafe `borrow_raw` makes from
            // the raw fd the reader task's `pipe::Receiver` owns.
            let rc = unsafe { libc::ioctl(fd, libc::FIONREAD, &mut waiting) };
            rc == 0 && waiting > 0
        })
    }

    /// A reader holds `bytes` of `job`'s `stream` back.
    pub fn holding(&mut self, job: &str, stream: Stream, bytes: usize) {
        if let Some(j) = self.jobs.get_mut(job) {
            j.held[stream as usize] = bytes;
        }
    }

    /// One of `job`'s output streams closed.
    pub fn stream_closed(&mut self, job: &str, stream: Stream) {
        let Some(j) = self.jobs.get_mut(job) else {
            return;
        };
        j.fifos[stream as usize] = None;
        j.open_streams = j.open_streams.saturating_sub(1);
        if j.open_streams == 0 && j.end.is_none() {
            // Ended settled, or still running (its command closed them).
            self.end_on_closed_output(job);
            self.bump();
            return;
        }
        if j.open_streams == 0 {
            if let Some(end) = &mut j.end {
                // Its end told what was lost before it; this is what
                // processes it left running wrote after.
                if let Some(lost) = j.lost.take() {
                    self.notices.push(format!(
                        "{} bytes of output that {} left running wrote after it ended could not be kept: {}",
                        lost.bytes,
                        job_in_words(job),
                        lost.error
                    ));
                }
                end.settled = true;
                let end = end.clone();
                if keeps_end(job) {
                    let _ = self.spool.set_end(job, &end);
                }
                self.forget_scratch(job);
            }
        }
        self.bump();
    }

    /// `job`'s shell ended with `status`: keep its changes to the shell
    /// state, and record its end.
    pub fn ended(&mut self, job: &str, status: i32) {
        let captured = self.take_state_capture(job);
        let Some(j) = self.jobs.get(job) else {
            return;
        };
        let parsed = captured.map(|bytes| parse_capture(&bytes, &j.started_from));
        self.ended_with(job, status, parsed);
    }

    /// Every writer of `job`'s output has closed before its shell's end
    /// was reported. When its shell closed them itself, after a whole
    /// capture (whose last word is the status) and with no job of its own
    /// left, the run is over: it ends now, not after that shell's exit and
    /// its reporter's word (which then only counts what the run left
    /// running). Otherwise its command closed them, and the end waits.
    fn end_on_closed_output(&mut self, job: &str) {
        let path = self.scratch(job, "state");
        let (Some(j), Ok(bytes)) = (self.jobs.get(job), std::fs::read(&path)) else {
            return;
        };
        let Ok(capture) = parse_capture(&bytes, &j.started_from) else {
            return;
        };
        if let (Some(status), false) = (capture.status, capture.has_jobs) {
            self.ended_before_reporter.extend(j.group);
            let _ = std::fs::remove_file(&path);
            self.ended_with(job, status, Some(Ok(capture)));
        }
    }

    /// Whether `group`'s reporter comes after its run ended as its output
    /// closed (not a job shell of a dropped template, which took no job).
    pub fn reporter_after_end(&mut self, group: u32) -> bool {
        let before = self.ended_before_reporter.len();
        self.ended_before_reporter.retain(|&g| g != group);
        self.ended_before_reporter.len() < before
    }

    /// Record `job`'s end with `status`, keeping the changes of its
    /// capture (`None`: its shell left none).
    fn ended_with(
        &mut self,
        job: &str,
        status: i32,
        parsed: Option<Result<Capture, SessionError>>,
    ) {
        let Some(j) = self.jobs.get_mut(job) else {
            return;
        };
        if j.end.is_some() {
            return;
        }
        j.placeholders.clear();
        self.last_job_ms = crate::clock::mono_ms();
        let (notice, signal) = match parsed {
            // The command did not run: the state stands.
            Some(Ok(capture)) if capture.not_run => (capture.lost_cwd.map(lost_cwd_notice), None),
            Some(Ok(capture)) => {
                let changes = j.started_from.changes_to(&capture.snapshot);
                let mut notice = None;
                self.first_unmerged = false;
                if self.snapshot.is_changed_by(&changes) {
                    Rc::make_mut(&mut self.snapshot).apply(&changes);
                    self.version += 1;
                    if let Err(e) = self.snapshot.save(&self.files.snapshot()) {
                        notice = Some(format!("the shell state could not be saved: {e}"));
                    }
                }
                if !capture.dropped.is_empty() {
                    notice = Some(format!(
                        "not kept: function {} (eukhe's shell code needs that builtin)",
                        capture.dropped.join(", ")
                    ));
                }
                (notice, None)
            }
            Some(Err(e)) => {
                // The job's shell writes its capture on the state disk.
                let full = crate::session::store::disk_space(&self.files.scratch())
                    .is_some_and(|(free, _)| free == 0);
                let why = if full {
                    " (the state disk is full)"
                } else {
                    ""
                };
                (Some(format!("{e}{why}")), None)
            }
            None => end_without_capture(status, j.cancelled),
        };
        let end = JobEnd {
            status,
            signal,
            cancelled: j.cancelled,
            notice,
            settled: j.open_streams == 0,
            lost_output: j.lost.take(),
        };
        j.end = Some(end.clone());
        self.record_end(job, &end);
        self.remove_retired_late();
    }

    /// Read `job`'s state capture, if its shell left one, and remove its files.
    fn take_state_capture(&self, job: &str) -> Option<Vec<u8>> {
        let capture_path = self.scratch(job, "state");
        let captured = std::fs::read(&capture_path).ok();
        let _ = std::fs::remove_file(&capture_path);
        captured
    }

    /// Keep `job`'s `end` (on disk for a run; its scratch goes once settled), wake followers.
    fn record_end(&mut self, job: &str, end: &JobEnd) {
        if keeps_end(job) {
            if let Err(e) = self.spool.set_end(job, end) {
                self.notices
                    .push(format!("the end of {job} could not be kept: {e}"));
            }
        }
        if end.settled {
            self.forget_scratch(job);
        }
        self.bump();
    }

    fn forget_scratch(&self, job: &str) {
        for what in ["restore", "late", "out", "err"] {
            let _ = std::fs::remove_file(self.scratch(job, what));
        }
    }

    /// Every scratch file of `job`, its state capture too.
    fn remove_scratch(&self, job: &str) {
        self.forget_scratch(job);
        let _ = std::fs::remove_file(self.scratch(job, "state"));
    }

    /// Whether `job` has ended (or is not this kernel's).
    pub fn job_ended(&self, job: &str) -> bool {
        self.jobs.get(job).is_none_or(|j| j.end.is_some())
    }

    /// The worker has stored `job`: drop it from the books and the spool.
    pub fn forget(&mut self, job: &str) {
        let done = match self.jobs.get(job) {
            Some(j) => j.end.is_some() && j.open_streams == 0,
            None => true,
        };
        if done {
            self.jobs.remove(job);
            self.spool.forget(job);
        }
    }
}

/// Whether `job`'s end is kept on disk: a run's is (a later worker records
/// it); user bash's is not (its client leaves with its worker, and the
/// next worker drops it), which spares every `eukhe bash` two file writes.
fn keeps_end(job: &str) -> bool {
    job.starts_with('r')
}

/// The notice and signal of a job whose shell left no state capture (status 128+N: signal N).
fn end_without_capture(status: i32, cancelled: bool) -> (Option<String>, Option<i32>) {
    let mut notice = None;
    let mut signal = None;
    if status > 128 && status < 128 + 65 {
        signal = Some(status - 128);
    }
    if !cancelled && signal.is_none() {
        notice = Some(
            "the command ended its shell (exit, exec, a failed `set -e` or `${x:?}`): \
             the shell state is as it was before it"
                .to_string(),
        );
    }
    (notice, signal)
}

/// What a run that could not enter the session's directory says.
fn lost_cwd_notice(cwd: String) -> String {
    let what = if std::path::Path::new(&cwd).exists() {
        "cannot be entered"
    } else {
        "no longer exists"
    };
    format!(
        "the command did not run: the session's directory {cwd} {what}; \
         make it again, or start another session (`eukhe new --cwd DIR`)"
    )
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

/// Whether a template has waited too long for a job: none runs and the
/// last one started or ended more than `template_idle` ago.
fn template_expired(job_running: bool, last_job_ms: u64, now_ms: u64) -> bool {
    !job_running && now_ms.saturating_sub(last_job_ms) > TM.template_idle
}

/// A started job's output pipes, to be read by `output::read`.
pub type Readers = Vec<(Stream, tokio::net::unix::pipe::Receiver)>;

/// A job as the user knows it: `r2` is "run 2", `b1` "bash 1".
fn job_in_words(job: &str) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_template_outlives_a_busy_spell_and_goes_after_an_idle_one() {
        let idle = TM.template_idle;
        assert!(!template_expired(false, 1_000, 1_000 + idle));
        assert!(template_expired(false, 1_000, 1_000 + idle + 1));
        assert!(
            !template_expired(true, 1_000, 1_000 + 10 * idle),
            "a job runs"
        );
        assert!(
            !template_expired(false, 5_000, 1_000),
            "a clock before the job"
        );
    }
}
