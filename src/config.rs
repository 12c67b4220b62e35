//! The configuration file, `$XDG_CONFIG_HOME/eukhe/config.toml` (every
//! setting is optional and documented in docs/usage.md):
//!
//! ```toml
//! # How long a worker waits for a lost supervisor before acting alone
//! # (milliseconds, or "never"). Default: 300000 (5 minutes).
//! worker_lost_exit_ms = 300000
//! # On the process backend, a supervised worker that shows no sign of life
//! # for this long is hung: it is killed and counts as a failure (under
//! # systemd the units' WatchdogSec does this). Default: 30000, at least 2000.
//! worker_watchdog_ms = 30000
//! # `eukhe cancel`: a run gets this long after SIGINT before SIGTERM, and
//! # again before SIGKILL. Default: 1000; at least 1, and short enough that a
//! # stop outlasts it (cancel_grace_ms + kill_route <= stop_grace, 2000 by
//! # default: `eukhe laws` shows the timeouts).
//! cancel_grace_ms = 1000
//! # Output is written at once and fsynced at most this long after (and at
//! # its run's end): what a power cut can lose. 0 syncs every write.
//! # Default: 200, at most 60000.
//! output_sync_ms = 200
//! # A session with no work, no attached client and no request naming it
//! # for this long has its worker and kernel stopped (it is `saved`; the
//! # next request wakes it over its snapshot): milliseconds, or "never".
//! # Default: 3600000 (an hour).
//! idle_stop_ms = 3600000
//! # On the process backend the daemon keeps one spare session ready
//! # (worker and kernel started, listed nowhere) for the next `eukhe new`
//! # to claim, so a new session answers its first command at the speed of
//! # a warm one. It costs one idle session's memory. Default: true.
//! spare_session = true
//! # The key that detaches a client from a terminal run: a control key, or
//! # a control key and one more key ("C-a d"), or "none". Default: "C-\\".
//! detach_key = "C-\\"
//! ```
//!
//! `EUKHE_WORKER_LOST_EXIT_MS` and `EUKHE_IDLE_STOP_MS` override the file. A lost-exit window
//! is at least 69000 ms (a client's relaunch of a lost daemon, 1 minute, plus a launcher's
//! wait, 9 s); a number past the wire's range (10^14 ms, about 3170 years) means "never", in
//! the file and in the environment alike. Tests that need short windows set
//! `EUKHE_TEST_SHORT_WINDOWS=1` (logged). Hosts by name are `hosts.toml`'s (`hosts`).

use std::path::{Path, PathBuf};

use serde::Deserialize;

pub mod detach_key;
pub mod hosts;
pub mod limits;
use detach_key::{DetachKey, DETACH_KEY_ALLOWED};

use crate::laws::idle_stop::{IdleStop, IdleStopError};
use crate::laws::orphan::{window_obeys_minimum, LostExitWindow, WindowError};
use crate::laws::timing::{
    timeouts_ordered, KernelTimeouts, Tm, IDLE_STOP_DEFAULT_MS, OUTPUT_SYNC_MAX_MS, OUTPUT_SYNC_MS,
    TM, WORKER_LOST_EXIT_DEFAULT_MS, WORKER_LOST_EXIT_MIN_MS, WORKER_WATCHDOG_MIN_MS,
};

/// A configuration refused: the file, a setting in it, or an environment
/// override, each naming the setting, the value and what it takes.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file exists but cannot be read.
    #[error("config {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The system's answer.
        #[source]
        source: std::io::Error,
    },
    /// The file's text is refused.
    #[error("config {}: {source}", path.display())]
    InFile {
        /// The file.
        path: PathBuf,
        /// What is wrong in it.
        #[source]
        source: Box<ConfigError>,
    },
    /// toml (or a setting's reader) refuses the text, on a line if known.
    #[error("{}{message}", where_in_text(*line, source_line))]
    Text {
        /// The line (from 1), if toml names one.
        line: Option<usize>,
        /// That line's text, when the message does not already name it.
        source_line: Option<String>,
        /// What is wrong, in toml's or the setting's words.
        message: String,
    },
    /// The lost-exit window breaks the law's minimum.
    #[error(transparent)]
    LostExit(#[from] WindowError),
    /// `worker_watchdog_ms` below the minimum.
    #[error(
        "worker_watchdog_ms = {0} is below the minimum {min}: workers show a sign of life only every second",
        min = WORKER_WATCHDOG_MIN_MS
    )]
    WatchdogTooShort(u64),
    /// `output_sync_ms` above the maximum.
    #[error(
        "output_sync_ms = {0} is too long: at most {max} (a power cut loses up to that much output)",
        max = OUTPUT_SYNC_MAX_MS
    )]
    OutputSyncTooLong(u64),
    /// `cancel_grace_ms = 0`.
    #[error("cancel_grace_ms = 0: a cancelled run needs some time to end after SIGINT")]
    CancelGraceZero,
    /// A cancel grace a stop's grace cannot cover (law `timeouts_ordered`).
    #[error(
        "cancel_grace_ms = {0} is too long: a stop's grace ({grace} ms) must outlast it plus the delivery of a kill ({kill} ms), so at most {most}",
        grace = TM.worker.stop_grace,
        kill = TM.supervisor.kill_route,
        most = TM.worker.stop_grace.saturating_sub(TM.supervisor.kill_route)
    )]
    CancelGraceTooLong(u64),
    /// An environment override whose value is not one the setting takes.
    #[error("{variable}={value:?}: expected {}", allowed(setting))]
    Environment {
        /// The variable, as `EUKHE_IDLE_STOP_MS`.
        variable: &'static str,
        /// The setting it overrides.
        setting: &'static str,
        /// The value given.
        value: String,
    },
    /// An environment override that breaks a law.
    #[error("{variable}: {source}")]
    EnvironmentLaw {
        /// The variable.
        variable: &'static str,
        /// The law it breaks.
        #[source]
        source: WindowError,
    },
    /// An idle-stop value refused.
    #[error(transparent)]
    IdleStop(#[from] IdleStopError),
    /// Text that is neither decimal milliseconds nor `never`.
    #[error("{0:?} is not a number of milliseconds or \"never\"")]
    NotMilliseconds(String),
}

/// `line N: ` or `line N (text): `, as a refusal in a file starts.
fn where_in_text(line: Option<usize>, source_line: &Option<String>) -> String {
    match (line, source_line) {
        (Some(line), Some(text)) => format!("line {line} ({text}): "),
        (Some(line), None) => format!("line {line}: "),
        (None, _) => String::new(),
    }
}

/// The daemon's settings (`config.toml`), each with its default.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// How long a worker whose supervisor is lost waits before it exits
    /// when idle (`laws::orphan`), or never.
    #[serde(default = "default_lost_exit", deserialize_with = "lost_exit_setting")]
    pub worker_lost_exit_ms: LostExitWindow,
    /// How long a worker may show no sign of life before the supervisor
    /// kills it (process backend; systemd's watchdog under systemd).
    #[serde(default = "default_watchdog", deserialize_with = "watchdog_setting")]
    pub worker_watchdog_ms: u64,
    /// From a cancel's SIGINT to its SIGTERM and SIGKILL.
    #[serde(
        default = "default_cancel_grace",
        deserialize_with = "cancel_grace_setting"
    )]
    pub cancel_grace_ms: u64,
    /// How long stored output may wait for its fsync (the group commit).
    #[serde(
        default = "default_output_sync",
        deserialize_with = "output_sync_setting"
    )]
    pub output_sync_ms: u64,
    /// How long a session may be left alone before its worker and kernel
    /// stop (`laws::idle_stop`).
    #[serde(default = "default_idle_stop", deserialize_with = "idle_stop_setting")]
    pub idle_stop_ms: IdleStop,
    /// Whether the daemon keeps a spare session for `eukhe new` to claim
    /// (process backend only: `supervisor::spare`).
    #[serde(default = "default_spare_session", deserialize_with = "spare_setting")]
    pub spare_session: bool,
    /// The key a client leaves a terminal run with (`detach_key`).
    #[serde(default, deserialize_with = "detach_key_setting")]
    pub detach_key: DetachKey,
    /// The resource limits a new session gets unless it asks its own.
    #[serde(default, deserialize_with = "limits::limits_setting")]
    pub limits: crate::laws::limits::ResourceLimits,
}

fn default_spare_session() -> bool {
    true
}

/// The process backend's worker watchdog, as the units' `WatchdogSec`.
pub const WORKER_WATCHDOG_DEFAULT_MS: u64 = TM.worker.worker_watchdog;

fn default_watchdog() -> u64 {
    WORKER_WATCHDOG_DEFAULT_MS
}

fn default_cancel_grace() -> u64 {
    TM.kernel.cancel_grace
}

fn default_output_sync() -> u64 {
    OUTPUT_SYNC_MS
}

fn default_idle_stop() -> IdleStop {
    IdleStop::After(IDLE_STOP_DEFAULT_MS)
}

fn default_lost_exit() -> LostExitWindow {
    LostExitWindow::After(WORKER_LOST_EXIT_DEFAULT_MS)
}

/// Test-only: `EUKHE_TEST_SHORT_WINDOWS=1` lets a lost-exit window be
/// shorter than the law's minimum (tests cannot wait minutes); every
/// process that reads such a window logs a warning.
pub const TEST_SHORT_WINDOWS: &str = "EUKHE_TEST_SHORT_WINDOWS";

fn short_windows_allowed() -> bool {
    std::env::var(TEST_SHORT_WINDOWS).is_ok_and(|v| v == "1")
}

/// The file's `worker_lost_exit_ms`: milliseconds or "never", read the same
/// way as the environment's (`parse_window`): past the wire's range a
/// number means "never".
fn lost_exit_setting<'de, D: serde::Deserializer<'de>>(d: D) -> Result<LostExitWindow, D::Error> {
    const KEY: &str = "worker_lost_exit_ms";
    match toml::Value::deserialize(d)? {
        toml::Value::Integer(n) => u64::try_from(n)
            .map(LostExitWindow::from_ms)
            .map_err(|_| refused(KEY, &toml::Value::Integer(n))),
        toml::Value::String(word) => {
            parse_window(&word).map_err(|_| refused(KEY, &toml::Value::String(word)))
        }
        other => Err(refused(KEY, &other)),
    }
}

/// The values `key` takes, as an error names them.
fn allowed(key: &str) -> String {
    match key {
        "worker_lost_exit_ms" => {
            format!("milliseconds (at least {WORKER_LOST_EXIT_MIN_MS}) or \"never\"")
        }
        "worker_watchdog_ms" => format!("milliseconds, at least {WORKER_WATCHDOG_MIN_MS}"),
        "cancel_grace_ms" => format!(
            "milliseconds, from 1 to {}",
            TM.worker
                .stop_grace
                .saturating_sub(TM.supervisor.kill_route)
        ),
        "output_sync_ms" => format!("milliseconds, from 0 to {OUTPUT_SYNC_MAX_MS}"),
        "idle_stop_ms" => "milliseconds (at least 1) or \"never\"".to_string(),
        "spare_session" => "true or false".to_string(),
        "detach_key" => DETACH_KEY_ALLOWED.to_string(),
        "limits" => "a table of memory_max, cpu_quota and tasks_max".to_string(),
        _ => "nothing: it is no setting".to_string(),
    }
}

/// Every setting the file takes.
const SETTINGS: [&str; 8] = [
    "worker_lost_exit_ms",
    "worker_watchdog_ms",
    "cancel_grace_ms",
    "output_sync_ms",
    "idle_stop_ms",
    "spare_session",
    "detach_key",
    "limits",
];

/// `key = value` refused: the setting, the value given and the values it
/// takes.
fn refused<E: serde::de::Error>(key: &str, value: &toml::Value) -> E {
    let given = match value {
        toml::Value::String(text) => format!("{text:?}"),
        toml::Value::Integer(n) => n.to_string(),
        toml::Value::Float(x) => x.to_string(),
        toml::Value::Boolean(b) => b.to_string(),
        toml::Value::Datetime(at) => at.to_string(),
        toml::Value::Array(_) => "[...]".to_string(),
        toml::Value::Table(_) => "{...}".to_string(),
    };
    E::custom(format!("{key} = {given}: expected {}", allowed(key)))
}

/// A whole number of milliseconds (0 or more) for `key`.
fn whole_ms<'de, D: serde::Deserializer<'de>>(d: D, key: &str) -> Result<u64, D::Error> {
    match toml::Value::deserialize(d)? {
        toml::Value::Integer(n) => {
            u64::try_from(n).map_err(|_| refused(key, &toml::Value::Integer(n)))
        }
        other => Err(refused(key, &other)),
    }
}

fn watchdog_setting<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    whole_ms(d, "worker_watchdog_ms")
}

fn cancel_grace_setting<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    whole_ms(d, "cancel_grace_ms")
}

fn output_sync_setting<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    whole_ms(d, "output_sync_ms")
}

fn idle_stop_setting<'de, D: serde::Deserializer<'de>>(d: D) -> Result<IdleStop, D::Error> {
    const KEY: &str = "idle_stop_ms";
    match toml::Value::deserialize(d)? {
        // Zero would stop a session between two commands of one script.
        toml::Value::Integer(0) => Err(serde::de::Error::custom(format!(
            "{KEY} = 0: a session needs some time between two requests; expected {}",
            allowed(KEY)
        ))),
        toml::Value::Integer(n) => u64::try_from(n)
            .map(IdleStop::After)
            .map_err(|_| refused(KEY, &toml::Value::Integer(n))),
        toml::Value::String(word) if word == "never" => Ok(IdleStop::Never),
        other => Err(refused(KEY, &other)),
    }
}

fn spare_setting<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    match toml::Value::deserialize(d)? {
        toml::Value::Boolean(on) => Ok(on),
        other => Err(refused("spare_session", &other)),
    }
}

fn detach_key_setting<'de, D: serde::Deserializer<'de>>(d: D) -> Result<DetachKey, D::Error> {
    match toml::Value::deserialize(d)? {
        toml::Value::String(text) => {
            DetachKey::parse(&text).map_err(|_| refused("detach_key", &toml::Value::String(text)))
        }
        other => Err(refused("detach_key", &other)),
    }
}

/// toml's words for an unknown key, as one line naming the settings.
fn unknown_setting(message: &str) -> Option<String> {
    let rest = message.strip_prefix("unknown field `")?;
    let key = &rest[..rest.find('`')?];
    Some(format!(
        "`{key}` is no setting: the settings are {}",
        SETTINGS.join(", ")
    ))
}

/// The window obeys the law's minimum (or the test-only setting allows a
/// shorter one, with a warning).
fn check_lost_exit(window: LostExitWindow) -> Result<(), WindowError> {
    let allowed = short_windows_allowed();
    window_obeys_minimum(window, allowed)?;
    if allowed && window_obeys_minimum(window, false).is_err() {
        tracing::warn!(
            "{TEST_SHORT_WINDOWS}=1 (test only): lost-exit window {} ms is below the minimum {WORKER_LOST_EXIT_MIN_MS} ms",
            window_text(window)
        );
    }
    Ok(())
}

impl Default for Config {
    fn default() -> Self {
        Config {
            worker_lost_exit_ms: default_lost_exit(),
            worker_watchdog_ms: default_watchdog(),
            cancel_grace_ms: default_cancel_grace(),
            output_sync_ms: default_output_sync(),
            idle_stop_ms: default_idle_stop(),
            spare_session: default_spare_session(),
            detach_key: DetachKey::default(),
            limits: Default::default(),
        }
    }
}

impl Config {
    /// Read the file at `path` (absent: the defaults), then apply the
    /// environment's overrides. Errors name the file and the problem.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let mut config = match std::fs::read_to_string(path) {
            Ok(text) => Self::parse(&text).map_err(|e| ConfigError::InFile {
                path: path.to_path_buf(),
                source: Box::new(e),
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Config::default(),
            Err(source) => {
                return Err(ConfigError::Read {
                    path: path.to_path_buf(),
                    source,
                })
            }
        };
        if let Ok(value) = std::env::var("EUKHE_WORKER_LOST_EXIT_MS") {
            const VARIABLE: &str = "EUKHE_WORKER_LOST_EXIT_MS";
            config.worker_lost_exit_ms = match parse_window(&value) {
                Ok(window) => window,
                Err(_) => {
                    return Err(ConfigError::Environment {
                        variable: VARIABLE,
                        setting: "worker_lost_exit_ms",
                        value,
                    })
                }
            };
            check_lost_exit(config.worker_lost_exit_ms).map_err(|source| {
                ConfigError::EnvironmentLaw {
                    variable: VARIABLE,
                    source,
                }
            })?;
        }
        if let Ok(value) = std::env::var("EUKHE_IDLE_STOP_MS") {
            config.idle_stop_ms = match parse_idle_stop(&value) {
                Ok(setting) => setting,
                Err(_) => {
                    return Err(ConfigError::Environment {
                        variable: "EUKHE_IDLE_STOP_MS",
                        setting: "idle_stop_ms",
                        value,
                    })
                }
            };
        }
        Ok(config)
    }

    /// Parse the file's text; an error names the line it is on.
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| {
            let message = unknown_setting(e.message()).unwrap_or(e.message().to_string());
            let Some(span) = e.span() else {
                return ConfigError::Text {
                    line: None,
                    source_line: None,
                    message,
                };
            };
            let line = text[..span.start.min(text.len())].matches('\n').count();
            let source = text.lines().nth(line).unwrap_or("").trim();
            // A setting's own error names it and its value already.
            let key = source.split('=').next().unwrap_or("").trim();
            let named = !key.is_empty() && message.starts_with(&format!("{key} = "));
            ConfigError::Text {
                line: Some(line + 1),
                source_line: (!named).then(|| source.to_string()),
                message,
            }
        })?;
        check_lost_exit(config.worker_lost_exit_ms)?;
        if config.worker_watchdog_ms < WORKER_WATCHDOG_MIN_MS {
            return Err(ConfigError::WatchdogTooShort(config.worker_watchdog_ms));
        }
        if config.output_sync_ms > OUTPUT_SYNC_MAX_MS {
            return Err(ConfigError::OutputSyncTooLong(config.output_sync_ms));
        }
        if config.cancel_grace_ms == 0 {
            return Err(ConfigError::CancelGraceZero);
        }
        if !timeouts_ordered(&config.timeouts()) {
            return Err(ConfigError::CancelGraceTooLong(config.cancel_grace_ms));
        }
        Ok(config)
    }

    /// The daemon's timeouts with this configuration's settings applied
    /// (the cancel grace; the other timeouts are the law module's).
    pub fn timeouts(&self) -> Tm {
        Tm {
            kernel: KernelTimeouts {
                cancel_grace: self.cancel_grace_ms,
                ..TM.kernel
            },
            ..TM
        }
    }
}

/// A lost-exit window from text: milliseconds or `never`.
pub fn parse_window(text: &str) -> Result<LostExitWindow, WindowError> {
    LostExitWindow::parse_text(text)
}

/// The idle-stop setting from text: milliseconds (at least 1) or `never`.
pub fn parse_idle_stop(text: &str) -> Result<IdleStop, ConfigError> {
    match text.parse::<u64>() {
        Ok(0) => Err(IdleStopError::Zero.into()),
        Ok(ms) => Ok(IdleStop::After(ms)),
        Err(_) if text == "never" => Ok(IdleStop::Never),
        Err(_) => Err(ConfigError::NotMilliseconds(text.to_string())),
    }
}

/// The window as the environment variable carries it to a worker.
pub fn window_text(window: LostExitWindow) -> String {
    window.to_text()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_parse_and_wrong_types_are_named() {
        assert_eq!(Config::parse("").unwrap(), Config::default());
        assert_eq!(
            Config::parse("worker_lost_exit_ms = 70000")
                .unwrap()
                .worker_lost_exit_ms,
            LostExitWindow::After(70_000)
        );
        assert_eq!(
            Config::parse("worker_lost_exit_ms = \"never\"")
                .unwrap()
                .worker_lost_exit_ms,
            LostExitWindow::Never
        );
        let err = Config::parse("worker_lost_exit_ms = \"soon\"")
            .unwrap_err()
            .to_string();
        assert!(err.contains("soon"), "{err}");
        let err = Config::parse("worker_lost_exit_ms = true")
            .unwrap_err()
            .to_string();
        assert!(!err.is_empty());
        let err = Config::parse("colour = \"blue\"").unwrap_err().to_string();
        assert!(err.contains("colour"), "{err}");
    }

    #[test]
    fn a_wrong_value_names_its_setting_and_the_values_it_takes() {
        for (line, said) in [
            (
                "worker_lost_exit_ms = -3",
                "line 1: worker_lost_exit_ms = -3: expected milliseconds (at least 69000) or \"never\"",
            ),
            (
                "worker_lost_exit_ms = true",
                "line 1: worker_lost_exit_ms = true: expected milliseconds (at least 69000) or \"never\"",
            ),
            (
                "worker_watchdog_ms = \"x\"",
                "line 1: worker_watchdog_ms = \"x\": expected milliseconds, at least 2000",
            ),
            (
                "cancel_grace_ms = true",
                "line 1: cancel_grace_ms = true: expected milliseconds, from 1 to 3000",
            ),
            (
                "output_sync_ms = -1",
                "line 1: output_sync_ms = -1: expected milliseconds, from 0 to 60000",
            ),
            (
                "idle_stop_ms = 1.5",
                "line 1: idle_stop_ms = 1.5: expected milliseconds (at least 1) or \"never\"",
            ),
            (
                "spare_session = \"yes\"",
                "line 1: spare_session = \"yes\": expected true or false",
            ),
            (
                "detach_key = \"F12\"",
                "line 1: detach_key = \"F12\": expected a control key (C-a to C-z except C-[, \
                 or C-@, C-\\, C-], C-^, C-_, C-Space), alone or followed by one more key \
                 (\"C-a d\"), or \"none\"",
            ),
            (
                "\ncolour = 1",
                "line 2 (colour = 1): `colour` is no setting: the settings are worker_lost_exit_ms, \
                 worker_watchdog_ms, cancel_grace_ms, output_sync_ms, idle_stop_ms, spare_session, \
                 detach_key, limits",
            ),
        ] {
            assert_eq!(Config::parse(line).unwrap_err().to_string(), said);
        }
    }

    #[test]
    fn idle_stop_defaults_to_an_hour_and_reads_never() {
        assert_eq!(
            Config::parse("").unwrap().idle_stop_ms,
            IdleStop::After(3_600_000)
        );
        assert_eq!(
            Config::parse("idle_stop_ms = 1500").unwrap().idle_stop_ms,
            IdleStop::After(1_500)
        );
        assert_eq!(
            Config::parse("idle_stop_ms = \"never\"")
                .unwrap()
                .idle_stop_ms,
            IdleStop::Never
        );
        let err = Config::parse("idle_stop_ms = 0").unwrap_err().to_string();
        assert!(
            err.contains("line 1") && err.contains("idle_stop_ms = 0"),
            "{err}"
        );
        let err = Config::parse("idle_stop_ms = \"later\"")
            .unwrap_err()
            .to_string();
        assert!(err.contains("later"), "{err}");
        assert_eq!(parse_idle_stop("never").unwrap(), IdleStop::Never);
        assert_eq!(parse_idle_stop("250").unwrap(), IdleStop::After(250));
        assert!(parse_idle_stop("0").is_err());
        assert!(parse_idle_stop("soon")
            .unwrap_err()
            .to_string()
            .contains("soon"));
    }

    #[test]
    fn a_lost_exit_window_below_the_minimum_is_refused_and_past_the_cap_is_never() {
        let err = Config::parse("worker_lost_exit_ms = 500")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("worker_lost_exit_ms = 500 is shorter than the minimum 69000"),
            "{err}"
        );
        assert!(!err.contains('\n'), "{err}");
        let minimum = format!("worker_lost_exit_ms = {WORKER_LOST_EXIT_MIN_MS}");
        assert_eq!(
            Config::parse(&minimum).unwrap().worker_lost_exit_ms,
            LostExitWindow::After(WORKER_LOST_EXIT_MIN_MS)
        );
        let below = format!("worker_lost_exit_ms = {}", WORKER_LOST_EXIT_MIN_MS - 1);
        assert!(Config::parse(&below).is_err());
        // Past the wire's range: never, from the file and from the
        // environment's text alike.
        let past = crate::laws::orphan::WIRE_MS_MAX + 1;
        assert_eq!(
            Config::parse(&format!("worker_lost_exit_ms = {past}"))
                .unwrap()
                .worker_lost_exit_ms,
            LostExitWindow::Never
        );
        assert_eq!(parse_window(&past.to_string()), Ok(LostExitWindow::Never));
        assert_eq!(
            parse_window(&crate::laws::orphan::WIRE_MS_MAX.to_string()),
            Ok(LostExitWindow::After(crate::laws::orphan::WIRE_MS_MAX))
        );
    }

    #[test]
    fn output_sync_defaults_to_200_ms_and_is_bounded() {
        assert_eq!(Config::parse("").unwrap().output_sync_ms, 200);
        assert_eq!(
            Config::parse("output_sync_ms = 0").unwrap().output_sync_ms,
            0
        );
        let err = Config::parse("output_sync_ms = 60001")
            .unwrap_err()
            .to_string();
        assert!(err.contains("output_sync_ms = 60001 is too long"), "{err}");
    }

    #[test]
    fn the_cancel_grace_is_at_least_one_ms_and_a_stop_outlasts_it() {
        assert_eq!(Config::default().cancel_grace_ms, TM.kernel.cancel_grace);
        assert_eq!(Config::parse("").unwrap().cancel_grace_ms, 1_000);
        assert_eq!(
            Config::parse("cancel_grace_ms = 1")
                .unwrap()
                .cancel_grace_ms,
            1
        );
        let longest = TM.worker.stop_grace - TM.supervisor.kill_route;
        let config = Config::parse(&format!("cancel_grace_ms = {longest}")).unwrap();
        assert_eq!(config.cancel_grace_ms, longest);
        assert!(timeouts_ordered(&config.timeouts()));
        let err = Config::parse("cancel_grace_ms = 0")
            .unwrap_err()
            .to_string();
        assert!(err.contains("cancel_grace_ms = 0"), "{err}");
        let err = Config::parse(&format!("cancel_grace_ms = {}", longest + 1))
            .unwrap_err()
            .to_string();
        assert!(err.contains("too long"), "{err}");
        assert!(err.contains(&format!("at most {longest}")), "{err}");
        // The largest number TOML carries (sums saturate: nothing wraps).
        let err = Config::parse(&format!("cancel_grace_ms = {}", i64::MAX))
            .unwrap_err()
            .to_string();
        assert!(err.contains("too long"), "{err}");
        let err = Config::parse("cancel_grace_ms = -5")
            .unwrap_err()
            .to_string();
        assert!(!err.is_empty());
    }
}
