//! A session's resource limits (`eukhe new --memory-max --cpu-quota
//! --tasks-max`, or `config.toml`'s `[limits]`): how they are read from
//! text, as systemd reads the unit properties they become, which cgroup
//! controllers they need, and what a run's end means once its kernel's
//! cgroup counted an OOM kill. A rule of eukhe's own, not a law of the
//! specification.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A maximum: a number, or no maximum at all (`infinity`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Max {
    /// At most this many (bytes, tasks).
    Value(u64),
    /// No maximum.
    Infinity,
}

impl Max {
    /// The number a D-Bus property takes (`infinity` is `u64::MAX`).
    pub fn property(self) -> u64 {
        match self {
            Max::Value(n) => n,
            Max::Infinity => u64::MAX,
        }
    }

    /// The text a cgroup v2 file takes (`max` for no maximum).
    pub fn cgroup_text(self) -> String {
        match self {
            Max::Value(n) => n.to_string(),
            Max::Infinity => "max".to_string(),
        }
    }
}

impl Serialize for Max {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Max::Value(n) => s.serialize_u64(*n),
            Max::Infinity => s.serialize_str("infinity"),
        }
    }
}

impl<'de> Deserialize<'de> for Max {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Form {
            Number(u64),
            Word(String),
        }
        match Form::deserialize(d)? {
            Form::Number(n) => Ok(Max::Value(n)),
            Form::Word(word) if word == "infinity" => Ok(Max::Infinity),
            Form::Word(word) => Err(serde::de::Error::custom(format!(
                "{word:?}: expected a number or \"infinity\""
            ))),
        }
    }
}

/// The limits of one session's kernel (and so of every run in it). Each
/// is absent when not asked for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourceLimits {
    /// Bytes of memory (systemd's `MemoryMax`, cgroup v2's `memory.max`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_max: Option<Max>,
    /// CPU time per second of wall time, in percent of one CPU (above
    /// 100 for several CPUs): `CPUQuotaPerSecUSec`, `cpu.max`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_quota_percent: Option<u32>,
    /// Processes and threads (`TasksMax`, `pids.max`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks_max: Option<Max>,
}

/// A limit's text refused: the option, the value and what it takes.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{option} {value:?}: expected {accepted}")]
pub struct LimitError {
    /// The option or setting, as `--memory-max`.
    pub option: &'static str,
    /// The text given.
    pub value: String,
    /// What the option takes.
    pub accepted: &'static str,
}

/// What `--memory-max` takes.
pub const MEMORY_MAX_ACCEPTED: &str =
    "bytes, or a whole number with a K, M, G or T suffix (powers of 1024), or \"infinity\"";
/// What `--cpu-quota` takes.
pub const CPU_QUOTA_ACCEPTED: &str =
    "a whole percentage of one CPU from 1%, as 50% (above 100% for several CPUs)";
/// What `--tasks-max` takes.
pub const TASKS_MAX_ACCEPTED: &str = "a whole number from 1, or \"infinity\"";

/// The size suffixes systemd reads, largest first, with their factors.
const SUFFIXES: [(char, u64); 4] = [
    ('T', 1 << 40),
    ('G', 1 << 30),
    ('M', 1 << 20),
    ('K', 1 << 10),
];

/// `--memory-max`: bytes, `K`/`M`/`G`/`T` (base 1024), or `infinity`.
pub fn parse_memory_max(text: &str) -> Result<Max, LimitError> {
    let refused = || LimitError {
        option: "--memory-max",
        value: text.to_string(),
        accepted: MEMORY_MAX_ACCEPTED,
    };
    if text == "infinity" {
        return Ok(Max::Infinity);
    }
    let (digits, factor) = match SUFFIXES.iter().find(|(c, _)| text.ends_with(*c)) {
        Some((_, factor)) => (&text[..text.len() - 1], *factor),
        None => (text, 1),
    };
    let number = whole(digits).ok_or_else(refused)?;
    match number.checked_mul(factor) {
        Some(bytes) if bytes > 0 => Ok(Max::Value(bytes)),
        _ => Err(refused()),
    }
}

/// `--cpu-quota`: `N%`, N from 1.
pub fn parse_cpu_quota(text: &str) -> Result<u32, LimitError> {
    let refused = || LimitError {
        option: "--cpu-quota",
        value: text.to_string(),
        accepted: CPU_QUOTA_ACCEPTED,
    };
    let digits = text.strip_suffix('%').ok_or_else(refused)?;
    match whole(digits).and_then(|n| u32::try_from(n).ok()) {
        Some(percent) if percent > 0 => Ok(percent),
        _ => Err(refused()),
    }
}

/// `--tasks-max`: a number from 1, or `infinity`.
pub fn parse_tasks_max(text: &str) -> Result<Max, LimitError> {
    if text == "infinity" {
        return Ok(Max::Infinity);
    }
    match whole(text) {
        Some(n) if n > 0 => Ok(Max::Value(n)),
        _ => Err(LimitError {
            option: "--tasks-max",
            value: text.to_string(),
            accepted: TASKS_MAX_ACCEPTED,
        }),
    }
}

/// Decimal digits only (no sign, no spaces), as a number.
fn whole(digits: &str) -> Option<u64> {
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Bytes as the shortest exact text `parse_memory_max` reads back
/// (`536870912` is `512M`).
pub fn size_text(max: Max) -> String {
    match max {
        Max::Infinity => "infinity".to_string(),
        Max::Value(bytes) => SUFFIXES
            .iter()
            .find(|(_, factor)| bytes % factor == 0)
            .map_or(bytes.to_string(), |(c, factor)| {
                format!("{}{c}", bytes / factor)
            }),
    }
}

impl fmt::Display for ResourceLimits {
    /// `memory-max 512M, cpu-quota 50%, tasks-max 100`, as a line names them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(memory) = self.memory_max {
            parts.push(format!("memory-max {}", size_text(memory)));
        }
        if let Some(percent) = self.cpu_quota_percent {
            parts.push(format!("cpu-quota {percent}%"));
        }
        if let Some(tasks) = self.tasks_max {
            parts.push(format!("tasks-max {}", size_text_tasks(tasks)));
        }
        write!(f, "{}", parts.join(", "))
    }
}

fn size_text_tasks(max: Max) -> String {
    match max {
        Max::Infinity => "infinity".to_string(),
        Max::Value(n) => n.to_string(),
    }
}

/// A cgroup controller a limit needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Controller {
    /// `memory`, for `memory_max`.
    Memory,
    /// `cpu`, for `cpu_quota_percent`.
    Cpu,
    /// `pids`, for `tasks_max`.
    Pids,
}

impl Controller {
    /// The controller's name in `cgroup.controllers`.
    pub fn name(self) -> &'static str {
        match self {
            Controller::Memory => "memory",
            Controller::Cpu => "cpu",
            Controller::Pids => "pids",
        }
    }
}

/// The option that asked for each controller, as a refusal names it.
fn option_of(controller: Controller) -> &'static str {
    match controller {
        Controller::Memory => "--memory-max",
        Controller::Cpu => "--cpu-quota",
        Controller::Pids => "--tasks-max",
    }
}

impl ResourceLimits {
    /// No limit asked for.
    pub fn is_none(&self) -> bool {
        *self == ResourceLimits::default()
    }

    /// Each limit given here, else the one in `defaults`.
    pub fn or(self, defaults: ResourceLimits) -> ResourceLimits {
        ResourceLimits {
            memory_max: self.memory_max.or(defaults.memory_max),
            cpu_quota_percent: self.cpu_quota_percent.or(defaults.cpu_quota_percent),
            tasks_max: self.tasks_max.or(defaults.tasks_max),
        }
    }

    /// The controllers these limits need, in the order they are named.
    pub fn controllers(&self) -> Vec<Controller> {
        let mut needed = Vec::new();
        if self.memory_max.is_some() {
            needed.push(Controller::Memory);
        }
        if self.cpu_quota_percent.is_some() {
            needed.push(Controller::Cpu);
        }
        if self.tasks_max.is_some() {
            needed.push(Controller::Pids);
        }
        needed
    }

    /// `CPUQuotaPerSecUSec`: microseconds of CPU per second.
    pub fn cpu_quota_usec(percent: u32) -> u64 {
        u64::from(percent) * 10_000
    }

    /// `cpu.max`: the quota per `CPU_PERIOD_USEC`, then the period.
    pub fn cpu_max_text(percent: u32) -> String {
        format!(
            "{} {CPU_PERIOD_USEC}",
            u64::from(percent) * CPU_PERIOD_USEC / 100
        )
    }
}

/// The period `cpu.max` counts its quota in (the kernel's default).
pub const CPU_PERIOD_USEC: u64 = 100_000;

/// Where the process backend would make a session kernel's cgroup, as
/// found: the cgroup v2 directory and the controllers it offers its
/// children (its `cgroup.controllers`), or why there is none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CgroupPlace {
    /// No cgroup v2 hierarchy holds this process.
    NoCgroup2 {
        /// What was found instead, as a refusal says it.
        why: String,
    },
    /// The daemon's cgroup v2 directory.
    Found {
        /// Its path.
        dir: String,
        /// The controllers it has (`cgroup.controllers`).
        controllers: Vec<String>,
        /// Whether this user may make cgroups in it.
        writable: bool,
    },
}

/// Whether the process backend can apply `limits` at `place`: `None`, or
/// the one line that refuses `eukhe new`.
pub fn process_backend_refusal(limits: &ResourceLimits, place: &CgroupPlace) -> Option<String> {
    let needed = limits.controllers();
    let first = *needed.first()?;
    let advice = |controller: Controller| {
        format!(
            "(use the systemd backend, or drop {})",
            option_of(controller)
        )
    };
    match place {
        CgroupPlace::NoCgroup2 { why } => Some(format!(
            "resource limits need cgroup v2 with the {} controller delegated; {why} {}",
            first.name(),
            advice(first)
        )),
        CgroupPlace::Found {
            dir,
            controllers,
            writable,
        } => {
            if let Some(missing) = needed
                .iter()
                .find(|c| !controllers.iter().any(|have| have == c.name()))
            {
                let has = if controllers.is_empty() {
                    "none".to_string()
                } else {
                    controllers.join(" ")
                };
                return Some(format!(
                    "resource limits need cgroup v2 with the {} controller delegated; {dir} has {has} {}",
                    missing.name(),
                    advice(*missing)
                ));
            }
            (!writable).then(|| {
                format!(
                    "resource limits need a delegated cgroup v2; {dir} is not writable by this user {}",
                    advice(first)
                )
            })
        }
    }
}

/// The systemd property a controller enforces.
fn property_of(controller: Controller) -> &'static str {
    match controller {
        Controller::Memory => "MemoryMax",
        Controller::Cpu => "CPUQuota",
        Controller::Pids => "TasksMax",
    }
}

/// `eukhe new` under systemd: the warning when the user manager's cgroup
/// (`manager_controllers`, its `cgroup.controllers`) lacks a controller
/// `limits` need. systemd keeps such a property on the kernel unit and
/// shows it, but nothing enforces it: without this line the gap is silent.
pub fn systemd_unenforced(
    limits: &ResourceLimits,
    manager_controllers: &[String],
) -> Option<String> {
    let missing: Vec<Controller> = limits
        .controllers()
        .into_iter()
        .filter(|c| !manager_controllers.iter().any(|have| have == c.name()))
        .collect();
    if missing.is_empty() {
        return None;
    }
    let names = |name: fn(Controller) -> &'static str| {
        missing
            .iter()
            .map(|c| name(*c))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let has = if manager_controllers.is_empty() {
        "none".to_string()
    } else {
        manager_controllers.join(" ")
    };
    let (controllers, are) = if missing.len() == 1 {
        ("controller", "is")
    } else {
        ("controllers", "are")
    };
    Some(format!(
        "the user manager's cgroup has no {} {controllers} (it has {has}): {} {are} set on the session's kernel unit but not enforced; delegate the {controllers} to the user manager (Delegate= of user@.service) or drop {}",
        names(Controller::name),
        names(property_of),
        names(option_of)
    ))
}

/// A kernel job's name as its notice names it: `r7` is "run 7", a user
/// bash `b3-...` is "bash 3"; other jobs have none.
pub fn job_label(job: &str) -> Option<String> {
    let (kind, rest) = match job.split_at_checked(1)? {
        ("r", rest) => ("run", rest),
        ("b", rest) => ("bash", rest.split('-').next()?),
        _ => return None,
    };
    let number: u64 = whole(rest)?;
    Some(format!("{kind} {number}"))
}

/// What a job's end means under a memory limit: the notice to store, if
/// the kernel's cgroup counted an OOM kill while the job ran and the job
/// ended by SIGKILL (the OOM killer's signal), its shell's or its
/// command's (status 137).
pub fn oom_notice(
    job: &str,
    killed_by_sigkill: bool,
    oom_kills_at_start: u64,
    oom_kills_at_end: u64,
    memory_max: Option<Max>,
) -> Option<String> {
    let memory = memory_max?;
    let label = job_label(job)?;
    (killed_by_sigkill && oom_kills_at_end > oom_kills_at_start).then(|| {
        format!(
            "{label} was killed: the session's memory limit ({}) was reached",
            size_text(memory)
        )
    })
}

#[cfg(test)]
#[path = "limits/tests.rs"]
mod tests;
