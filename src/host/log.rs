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

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::layer::{Context, SubscriberExt as _};
use tracing_subscriber::Layer;

use super::HostKind;
use crate::build_id::build_id;

/// Install the logger of this process: `role` is `daemon` or `worker`,
/// `session` the worker's session.
pub fn init(host: HostKind, role: &'static str, session: Option<&str>) {
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
                tracing_subscriber::registry().with(StderrLines { prefix }.with_filter(ours)),
            )
        }
    };
}

/// One line per event on standard error: `eukhe worker 1a2b3c4d: message
/// (run=3)`.
struct StderrLines {
    prefix: String,
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
        let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), text.as_bytes());
    }
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
