//! The worker-kernel link: a worker drives its session's kernel over the
//! kernel's private socket. Control messages are JSON frames; each
//! `Output` message is followed by one raw frame holding the exact bytes.
//!
//! The link carries [`KERNEL_PROTOCOL`]: a worker drives a kernel only when
//! the versions agree; otherwise it leaves the kernel to finish its runs and
//! replaces it once it is idle.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncWrite, AsyncWriteExt};

use super::frame::{FrameError, MAX_FRAME_BYTES};
use crate::kernel::spool::JobEnd;
use crate::protocol::message::Stream;

/// The version of the link and of the spool's layout.
pub const KERNEL_PROTOCOL: u32 = 1;

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
    /// Output of `job`; the next frame holds its bytes. `end` is the spool
    /// offset after them.
    Output {
        job: String,
        stream: Stream,
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

/// Write `bytes` as one raw frame.
pub async fn write_raw<W: AsyncWrite + Unpin>(
    writer: &mut W,
    bytes: &[u8],
) -> Result<(), FrameError> {
    if bytes.len() > MAX_FRAME_BYTES {
        return Err(FrameError::TooLarge { len: bytes.len() });
    }
    writer
        .write_all(&(bytes.len() as u32).to_be_bytes())
        .await?;
    writer.write_all(bytes).await?;
    Ok(())
}
