//! Logging for the daemon and the workers, through `tracing`. Under systemd
//! events go to journald (tracing-journald) with structured fields, so
//! `journalctl --user -u eukhe@<session>` reads a session's log and can
//! filter on `EUKHE_SESSION`, `EUKHE_RUN` or `EUKHE_BUILD`; elsewhere they
//! are lines on standard error (the process backend's log files).
//!
//! Event fields are named without a prefix in code (`run = 3`); in the
//! journal they become `EUKHE_RUN=3`. Environment values never go into an
//! event: they may be secrets.

use std::fmt::Write as _;
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::layer::{Context, SubscriberExt as _};
use tracing_subscriber::Layer;

use super::HostKind;
use crate::build_id::build_id;

/// A log file past this size is renamed `<name>.1` (replacing the one
/// before) and begun again: on the process backend a process's log is its
/// standard error, a file in the state directory that would otherwise grow
/// by a line or two per run for as long as the session lives.
pub const LOG_ROTATE_BYTES: u64 = 8 * 1024 * 1024;

/// Install the logger of this process: `role` is `daemon`, `worker` or
/// `kernel`, `session` the session; `file` is its log file on the process
/// backend, rotated past [`LOG_ROTATE_BYTES`] while it is standard error.
pub fn init(host: HostKind, role: &'static str, session: Option<&str>, file: Option<PathBuf>) {
    let mut fixed = vec![
        ("EUKHE_ROLE", role.to_string()),
        ("EUKHE_BUILD", build_id().to_string()),
    ];
    if let Some(session) = session {
        fixed.push(("EUKHE_SESSION", session.to_string()));
    }
    // eukhe's own events, info and above; the libraries' debugging stays out.
    let ours = filter_fn(|meta| {
        meta.target().starts_with("eukhe") && *meta.level() <= tracing::Level::INFO
    });
    let journald = (host == HostKind::Systemd)
        .then(|| tracing_journald::layer().ok())
        .flatten();
    // A second init (tests in one process) keeps the first logger.
    let _ = match journald {
        Some(layer) => {
            let layer = layer
                .with_syslog_identifier("eukhe".into())
                .with_field_prefix(Some("EUKHE".into()))
                .with_custom_fields(fixed)
                .with_filter(ours);
            tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer))
        }
        None => {
            let prefix = match session {
                Some(session) => format!("eukhe {role} {session}"),
                None => format!("eukhe {role}"),
            };
            tracing::subscriber::set_global_default(
                tracing_subscriber::registry().with(StderrLines { prefix, file }.with_filter(ours)),
            )
        }
    };
}

/// One line per event on standard error: `eukhe worker 1a2b3c4d: message
/// (run=3)`.
struct StderrLines {
    prefix: String,
    file: Option<PathBuf>,
}

impl<S: Subscriber> Layer<S> for StderrLines {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let mut line = LineVisitor::default();
        event.record(&mut line);
        let fields = if line.fields.is_empty() {
            String::new()
        } else {
            format!(" ({})", line.fields.join(", "))
        };
        // One write, and never a panic: on the process backend standard
        // error is a log file on the state disk, and a full disk must not
        // end the task that logged (`eprintln!` panics when it cannot
        // write; a kernel's report reader died so, and its runs never
        // ended).
        let text = format!("{}: {}{fields}\n", self.prefix, line.message);
        let stderr = std::io::stderr();
        let _ = std::io::Write::write_all(&mut stderr.lock(), text.as_bytes());
        if let Some(path) = &self.file {
            if let Ok(Some(fresh)) = rotate_if_full(path, stderr.as_fd(), LOG_ROTATE_BYTES) {
                let _ = nix::unistd::dup2_stderr(&fresh);
            }
        }
    }
}

/// If `current` is the file at `path` and holds more than `cap` bytes,
/// rename it `<path>.1` (replacing the one before) and return a new, empty
/// file at `path` to put in its place. `None` when `current` is another
/// file (a terminal, a file the user chose) or not full.
pub fn rotate_if_full(
    path: &Path,
    current: std::os::fd::BorrowedFd<'_>,
    cap: u64,
) -> std::io::Result<Option<std::fs::File>> {
    let open = nix::sys::stat::fstat(current).map_err(std::io::Error::from)?;
    let named = std::fs::metadata(path)?;
    let same = open.st_dev as u64 == named.dev() && open.st_ino as u64 == named.ino();
    if !same || (open.st_size as u64) <= cap {
        return Ok(None);
    }
    let mut older = path.as_os_str().to_owned();
    older.push(".1");
    std::fs::rename(path, &older)?;
    crate::session::store::private_append(path)
        .map(Some)
        .map_err(|e| std::io::Error::other(e.to_string()))
}

#[derive(Default)]
struct LineVisitor {
    message: String,
    fields: Vec<String>,
}

impl Visit for LineVisitor {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            self.fields.push(format!("{}={value:?}", field.name()));
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            self.fields.push(format!("{}={value}", field.name()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    #[test]
    fn a_full_log_is_renamed_and_begun_again_and_another_file_is_left_alone() {
        let dir = std::env::temp_dir().join(format!("eukhe-log-rotate-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("worker.log");
        let mut log = crate::session::store::private_append(&path).unwrap();
        log.write_all(b"first line\n").unwrap();
        assert!(
            rotate_if_full(&path, log.as_fd(), 100).unwrap().is_none(),
            "not full"
        );
        log.write_all(&[b'x'; 200]).unwrap();
        let other = crate::session::store::private_append(&dir.join("mine.log")).unwrap();
        assert!(
            rotate_if_full(&path, other.as_fd(), 100).unwrap().is_none(),
            "standard error is not the session's log"
        );
        let mut fresh = rotate_if_full(&path, log.as_fd(), 100)
            .unwrap()
            .expect("rotated");
        fresh.write_all(b"after\n").unwrap();
        let older = std::fs::read(dir.join("worker.log.1")).unwrap();
        assert!(older.starts_with(b"first line\n") && older.len() == 211);
        assert_eq!(std::fs::read(&path).unwrap(), b"after\n");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
