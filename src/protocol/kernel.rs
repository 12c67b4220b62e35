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

use crate::kernel::spool::JobEnd;

/// The version of the link and of the spool's layout.
pub const KERNEL_PROTOCOL: u32 = 2;

/// What a kernel knows of one job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case", deny_unknown_fields)]
pub enum JobState {
    /// Executing in this kernel, or its output is still open.
    Running,
    /// Ended; the spool holds its end.
    Ended { end: JobEnd },
    /// Accepted by an earlier kernel that is gone, without an end.
    Lost,
}

/// Worker to kernel.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ToKernel {
    Hello {
        protocol: u32,
        build_id: String,
    },
    /// Execute `command` as `job` (`r<N>` for run N, `b<N>` for user
    /// bash), unless the spool already knows `job`.
    Start {
        job: String,
        command: String,
    },
    /// Send `job`'s output from byte `from` of its spool, then its end,
    /// then what its leftover processes still write until it settles.
    Follow {
        job: String,
        from: u64,
    },
    /// Cancel `job`: SIGINT, then SIGTERM and SIGKILL after the cancel grace.
    Cancel {
        job: String,
    },
    /// The worker stored `job`'s end and output: the spool may drop it.
    Forget {
        job: String,
    },
    /// End every process of the session, then the kernel.
    Stop,
}

/// Kernel to worker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum FromKernel {
    Hello {
        protocol: u32,
        build_id: String,
        pid: u32,
        start_time: u64,
        /// Set once, for the first worker of a kernel started over a
        /// snapshot: what the restore brought back and what it could not.
        restored: Option<String>,
        jobs: BTreeMap<String, JobState>,
        background: u32,
    },
    /// `job` was accepted and runs (`accepted: false`: the spool knew it;
    /// it was not executed again).
    Started {
        job: String,
        accepted: bool,
    },
    /// `job`'s spool holds output records from byte `from` to `end`: the
    /// worker reads them from the spool file (whole records; a record cut
    /// by a crash is never counted).
    Spooled {
        job: String,
        from: u64,
        end: u64,
    },
    /// `job` ended (`None`: a kernel that is gone had accepted it).
    Ended {
        job: String,
        end: Option<JobEnd>,
    },
    /// Every writer of `job`'s output has closed.
    Settled {
        job: String,
    },
    /// How many processes that runs left behind still live.
    Jobs {
        background: u32,
    },
    /// Something the user should know (the worker stores it as a notice).
    Notice {
        text: String,
    },
    Error {
        message: String,
    },
    /// The kernel ended every process of the session and exits.
    Stopped,
}
