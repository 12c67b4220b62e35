//! `eukhe new --memory-max --cpu-quota --tasks-max`: the limits a new
//! session's kernel gets, read as `laws::limits` reads them (the daemon
//! adds `config.toml`'s defaults and decides whether the backend can apply
//! them).

use super::error::ClientError;
use crate::laws::limits::{parse_cpu_quota, parse_memory_max, parse_tasks_max, ResourceLimits};

/// The limit options of `eukhe new`.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct LimitArgs {
    /// Most memory the session's kernel and its runs may use: bytes, or a
    /// whole number with K, M, G or T (powers of 1024), or "infinity". A run
    /// past it is killed, and its end says so.
    #[arg(long, value_name = "SIZE")]
    pub memory_max: Option<String>,
    /// Most CPU time per second, in percent of one CPU (e.g. 50%; above
    /// 100% for several CPUs).
    #[arg(long, value_name = "PCT")]
    pub cpu_quota: Option<String>,
    /// Most processes and threads at once: a number or "infinity".
    #[arg(long, value_name = "N")]
    pub tasks_max: Option<String>,
}

impl LimitArgs {
    /// The limits asked for; a refused value is one line naming it and
    /// what the option takes.
    pub fn limits(&self) -> Result<ResourceLimits, ClientError> {
        let usage = |e: crate::laws::limits::LimitError| ClientError::Usage(e.to_string());
        Ok(ResourceLimits {
            memory_max: self
                .memory_max
                .as_deref()
                .map(parse_memory_max)
                .transpose()
                .map_err(usage)?,
            cpu_quota_percent: self
                .cpu_quota
                .as_deref()
                .map(parse_cpu_quota)
                .transpose()
                .map_err(usage)?,
            tasks_max: self
                .tasks_max
                .as_deref()
                .map(parse_tasks_max)
                .transpose()
                .map_err(usage)?,
        })
    }
}
