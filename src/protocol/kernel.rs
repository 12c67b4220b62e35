//! The worker-kernel link: a worker drives its session's kernel over the
//! kernel's private socket, in JSON frames. Output does not cross it: the
//! kernel says how far a job's spool file has grown (`Spooled`) and the
//! worker reads the records from the file.
//!
//! The link carries [`KERNEL_PROTOCOL`]: a worker drives a kernel only when
//! the versions agree; otherwise it leaves the kernel to finish its runs and
//! replaces it once it is idle.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::entry::{LostOutput, Stream};
use super::tty::WindowSize;

/// The version of the link and of the spool's layout (9: terminal runs,
/// `Start`'s `tty`, `ToKernel::Keys` and `Resize`; an earlier kernel would
/// take those for malformed messages. 10: `FromKernel::Waiting`, which a
/// worker of 9 would take for a malformed frame and drop the link over;
/// it never gets one, since a kernel serves only a worker of its own
/// version and lets any other only ask it to stop. 11: `FromKernel::Output`,
/// small spooled records sent inline. 12: `Resize`'s `at` and `Hello`'s
/// `terminals`, each terminal job's sizes and where in its output each
/// began; `Keys`'s `quiet`. 13: `Typist`, a client's own connection for
/// one terminal job's keys, and `FromKernel::Resized`, a size the kernel
/// took for such a client. 14: `Typist`'s `echo`, the job's output sent
/// on the typist's connection too).
pub const KERNEL_PROTOCOL: u32 = 14;

/// Why a command with a NUL byte cannot run: the kernel's shell reads
/// NUL-separated fields, so one inside a command would split it and what
/// follows would be read as the next job. Workers refuse such a command;
/// the kernel ends one that reaches it as not started.
pub const NUL_IN_COMMAND: &str =
    "the command contains a NUL byte, which a shell command line cannot hold";

/// How a job ended (the kernel keeps it in the spool as `<job>.end`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobEnd {
    /// The exit status (128 + signal when a signal ended it).
    pub status: i32,
    /// The signal that ended it, if one did.
    pub signal: Option<i32>,
    /// Whether `eukhe cancel` ended it.
    pub cancelled: bool,
    /// Something the user should know about the shell state it left.
    pub notice: Option<String>,
    /// Whether every writer of its output has closed.
    pub settled: bool,
    /// Output it wrote that the spool could not keep (a full disk): no
    /// client and no transcript has those bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_output: Option<LostOutput>,
}

/// One spool record sent inline (`FromKernel::Output`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InlineRecord {
    /// The stream its bytes came from.
    pub stream: Stream,
    /// The spool offset just after it.
    pub end: u64,
    /// Its bytes.
    #[serde(with = "super::tty::base64_bytes")]
    pub data: Vec<u8>,
}

/// A size a terminal job's terminal took, and the spool offset of the
/// job's output it took it at: output records ending after `at` were
/// drawn at this size (until the next).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SizeAt {
    /// The spool offset (0: the terminal's first size).
    pub at: u64,
    /// The size.
    pub size: WindowSize,
}

/// What a kernel knows of one job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case", deny_unknown_fields)]
pub enum JobState {
    /// Executing in this kernel, or its output is still open.
    Running,
    /// Ended; the spool holds its end.
    Ended {
        /// Its status and how it ended.
        end: JobEnd,
    },
    /// Accepted by an earlier kernel that is gone, without an end.
    Lost,
}

/// Worker to kernel.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ToKernel {
    /// The worker's greeting, first on the link.
    Hello {
        /// [`KERNEL_PROTOCOL`] as the worker speaks it.
        protocol: u32,
        /// The worker's build.
        build_id: String,
    },
    /// Execute `command` as `job` (`r<N>` for run N, `b<N>` for user
    /// bash), unless the spool already knows `job`.
    Start {
        /// The job's tag.
        job: String,
        /// The command line its shell runs.
        command: String,
        /// The process whose standard input the command reads (a user
        /// bash's client: its shell opens `/proc/<pid>/fd/0`); none: the
        /// command's stdin is `/dev/null`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stdin_of: Option<u32>,
        /// Run it on a pseudo-terminal of this size that the kernel opens
        /// and holds: the terminal is the job's standard input, output and
        /// error and its controlling terminal; what the program writes to
        /// it is the job's stdout.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tty: Option<WindowSize>,
    },
    /// Write `data` to terminal job `job`'s terminal, as typed keys; the
    /// kernel answers `Keyed` once they are in its input queue, unless
    /// `quiet`.
    Keys {
        /// The job's tag.
        job: String,
        /// The bytes.
        #[serde(with = "super::tty::base64_bytes")]
        data: Vec<u8>,
        /// Nobody waits to hear they are written (a person's typing): no
        /// `Keyed` comes back, an error is only logged.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        quiet: bool,
    },
    /// Set terminal job `job`'s window size (its program gets SIGWINCH).
    Resize {
        /// The job's tag.
        job: String,
        /// The new size.
        size: WindowSize,
        /// The spool offset of the job's output the worker's screen had
        /// taken when it took this size: a rebuilt screen takes it there.
        #[serde(default)]
        at: u64,
    },
    /// The first frame of a typist's connection (an attached client's
    /// own, not a worker's): its `Keys` and `Resize` for terminal job `job`
    /// follow, written by the kernel as they come. Its terminal takes
    /// `size` before its keys are written when another size was taken
    /// since (the size of whoever typed or resized last). The kernel
    /// answers `Keyed` without an error when `job` has a terminal.
    Typist {
        /// The job's tag.
        job: String,
        /// The typist's window size.
        size: WindowSize,
        /// Also send the job's output on this connection as the kernel
        /// spools it (`protocol::output::echo_frame`), so its echo reaches
        /// the client without waking the worker.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        echo: bool,
    },
    /// Send `job`'s output from byte `from` of its spool, then its end,
    /// then what its leftover processes still write until it settles.
    Follow {
        /// The job's tag.
        job: String,
        /// The spool offset the worker has stored up to.
        from: u64,
    },
    /// Cancel `job`: SIGINT, then SIGTERM and SIGKILL after the cancel grace.
    Cancel {
        /// The job's tag.
        job: String,
    },
    /// The client of user bash `job` went away: close the job's output
    /// (a write gets SIGPIPE), then send its process group SIGHUP, as a
    /// command whose `ssh` client left gets them.
    HangUp {
        /// The job's tag.
        job: String,
    },
    /// The worker stored `job`'s end and output: the spool may drop it.
    Forget {
        /// The job's tag.
        job: String,
    },
    /// The spare session this kernel serves was claimed by `eukhe new`:
    /// make its first snapshot and a template ahead of its first job.
    Claim,
    /// How many inputs wait in the worker's queue, told whenever the count
    /// changes and as the link comes up: queued input is work, so the
    /// kernel's own busy evidence counts it after the worker has left.
    Queued {
        /// The number of queued inputs (withdrawn ones are not counted).
        inputs: u32,
    },
    /// End every process of the session, then the kernel.
    Stop,
}

/// Kernel to worker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum FromKernel {
    /// The kernel's answer to the worker's hello: who it is and what it
    /// knows, for the worker to reconcile its books with.
    Hello {
        /// [`KERNEL_PROTOCOL`] as the kernel speaks it.
        protocol: u32,
        /// The kernel's build.
        build_id: String,
        /// Its pid, with `start_time` its identity.
        pid: u32,
        /// Its start time (clock ticks since boot).
        start_time: u64,
        /// For a kernel started over a snapshot: what the restore brought
        /// back and what it could not. Offered to every worker for the
        /// kernel's life, so a worker that dies before storing its notice
        /// loses nothing.
        restored: Option<String>,
        /// The id that restore goes by: a notice stored with it is stored
        /// already (none: a kernel of an earlier build, which offers its
        /// restore once).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        restore_id: Option<u64>,
        /// Every job its spool knows, by tag.
        jobs: BTreeMap<String, JobState>,
        /// Processes that runs left running.
        background: u32,
        /// The sizes each terminal job's terminal took, by tag, oldest
        /// first, the last its size now: a worker rebuilding a screen
        /// from the stored output resizes it where the live one was.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        terminals: BTreeMap<String, Vec<SizeAt>>,
    },
    /// `job` was accepted and runs (`accepted: false`: the spool knew it;
    /// it was not executed again).
    Started {
        /// The job's tag.
        job: String,
        /// Whether this kernel executes it (false: the spool knew it).
        accepted: bool,
    },
    /// `job`'s spool holds output records from byte `from` to `end`: the
    /// worker reads them from the spool file (whole records; a record cut
    /// by a crash is never counted).
    Spooled {
        /// The job's tag.
        job: String,
        /// Where the new records start in the spool.
        from: u64,
        /// Where they end.
        end: u64,
    },
    /// `job`'s spool holds these records from byte `from` on, the same
    /// records `Spooled` would point to, sent whole because they are small:
    /// the worker takes them without reading the spool file.
    Output {
        /// The job's tag.
        job: String,
        /// Where the first record starts in the spool.
        from: u64,
        /// The records, in spool order.
        records: Vec<InlineRecord>,
    },
    /// `job` ended (`None`: a kernel that is gone had accepted it).
    Ended {
        /// The job's tag.
        job: String,
        /// Its status and how it ended, when known.
        end: Option<JobEnd>,
    },
    /// Every writer of `job`'s output has closed.
    Settled {
        /// The job's tag.
        job: String,
    },
    /// The keys of a `Keys` for `job` are written to its terminal (or,
    /// with `error`, could not be: one line for the user).
    Keyed {
        /// The job's tag.
        job: String,
        /// Why they were not written.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// Terminal job `job` took `size` for a typist, at spool offset `at`
    /// of its output: the worker's screen takes it too.
    Resized {
        /// The job's tag.
        job: String,
        /// The new size.
        size: WindowSize,
        /// The job's spool offset when it took it.
        at: u64,
    },
    /// Whether terminal job `job` waits for input now (`laws::waiting`):
    /// told when it changes, when the job ends (false), and to a worker
    /// that connects, for each job that waits.
    Waiting {
        /// The job's tag.
        job: String,
        /// Whether it waits.
        waiting: bool,
    },
    /// How many processes that runs left behind still live.
    Jobs {
        /// How many.
        background: u32,
    },
    /// Something the user should know (the worker stores it as a notice).
    Notice {
        /// The notice's text.
        text: String,
    },
    /// What the kernel could not do (a malformed message, a job it could
    /// not start); the worker logs it and stores it as a notice.
    Error {
        /// Why, in one line.
        message: String,
    },
    /// The kernel ended every process of the session and exits.
    Stopped,
}
