//! Busy evidence: where workers record it and where the supervisor reads
//! the latest record of each session at boot to feed `laws::revival`.
//!
//! - Process backend: `busy.log` in the 0700 state directory (0600, one
//!   JSON line per record, fsynced), so no other user can forge evidence.
//! - systemd backend: structured journald entries (`MESSAGE_ID`
//!   [`BUSY_MESSAGE_ID`]). Only entries whose trusted fields say they came
//!   from this user (`_UID`) and from that session's own worker unit or
//!   its own kernel unit (`_SYSTEMD_USER_UNIT`: the kernel records while
//!   no worker is connected) count, and their time is journald's receive
//!   time, so nobody can forge or back-date a revival.

use super::HostError;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::escape::{kernel_unit, worker_unit};
use super::journald;
use super::sd_journal::{newest_first, JournalEntry};
use crate::laws::revival::{BusyRecord, BusyState};
use crate::laws::work::WorkSet;
use crate::session::store::append_durably;

/// Marks a journal entry as eukhe busy evidence (journald's MESSAGE_ID).
pub const BUSY_MESSAGE_ID: &str = "4b9f0c6e1d2a4e8f9a3b5c7d1e2f4a6b";

/// One busy-evidence record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournalLine {
    /// The session's id.
    pub session: String,
    /// Busy or idle.
    pub state: BusyState,
    /// Wall-clock milliseconds.
    pub at_ms: Option<u64>,
    /// The work the session had.
    pub work: WorkSet,
    /// The build id of the worker that wrote it.
    pub build: String,
}

/// Where busy evidence lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BusyJournal {
    /// `busy.log` in the state directory (the process backend).
    File(PathBuf),
    /// The user journal (the systemd backend).
    Journald,
}

fn state_word(state: BusyState) -> &'static str {
    match state {
        BusyState::Busy => "busy",
        BusyState::Idle => "idle",
    }
}

/// A journald entry: its message and its fields.
type JournaldEntry = (String, Vec<(&'static str, String)>);

/// A record as a journald entry: its message and the fields the
/// supervisor reads it back by (priority: informational).
fn journald_entry(line: &JournalLine) -> Result<JournaldEntry, HostError> {
    let work = serde_json::to_string(&line.work)?;
    let message = match line.state {
        BusyState::Busy => format!("busy evidence: busy with {work}"),
        BusyState::Idle => "busy evidence: idle".to_string(),
    };
    let fields = vec![
        ("MESSAGE_ID", BUSY_MESSAGE_ID.to_string()),
        ("SYSLOG_IDENTIFIER", "eukhe".to_string()),
        ("EUKHE_SESSION", line.session.clone()),
        ("EUKHE_BUSY", state_word(line.state).to_string()),
        ("EUKHE_WORK", work),
        ("EUKHE_BUILD", line.build.clone()),
    ];
    Ok((message, fields))
}

impl BusyJournal {
    /// The file journal of the process backend.
    pub fn file(state_dir: &Path) -> Self {
        BusyJournal::File(state_dir.join("busy.log"))
    }

    /// Append a record durably (the file) or hand it to journald.
    pub fn record(&self, line: &JournalLine) -> Result<(), HostError> {
        match self {
            BusyJournal::File(path) => {
                let mut text = serde_json::to_string(line)?;
                text.push('\n');
                append_durably(path, text.as_bytes())
                    .map_err(|e| HostError::io(format!("busy journal {}", path.display()), e))
            }
            BusyJournal::Journald => {
                let (message, fields) = journald_entry(line)?;
                let fields: Vec<(&str, &str)> =
                    fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
                journald::send(&message, &fields)
                    .map_err(|e| e.within(format!("busy evidence of session {}", line.session)))
            }
        }
    }

    /// The latest record of each session.
    pub fn latest(&self) -> Result<HashMap<String, BusyRecord>, HostError> {
        match self {
            BusyJournal::File(path) => Ok(latest_in_file(path)),
            BusyJournal::Journald => {
                let own_uid = nix::unistd::getuid().as_raw();
                let mut latest = HashMap::new();
                newest_first(
                    &[
                        format!("MESSAGE_ID={BUSY_MESSAGE_ID}"),
                        format!("_UID={own_uid}"),
                    ],
                    &["EUKHE_SESSION", "EUKHE_BUSY", "_UID", "_SYSTEMD_USER_UNIT"],
                    |entry| {
                        if let Some((session, record)) = trusted_record(&entry, own_uid) {
                            latest.entry(session).or_insert(record);
                        }
                        true
                    },
                )?;
                Ok(latest)
            }
        }
    }
}

/// The latest record per session in a file journal (unreadable lines,
/// such as a torn last line, are skipped).
fn latest_in_file(path: &Path) -> HashMap<String, BusyRecord> {
    match std::fs::read_to_string(path) {
        Ok(text) => latest_in_text(&text),
        Err(_) => HashMap::new(),
    }
}

/// The latest record per session in the text of a file journal.
pub fn latest_in_text(text: &str) -> HashMap<String, BusyRecord> {
    let mut latest = HashMap::new();
    for line in text.lines() {
        if let Ok(entry) = serde_json::from_str::<JournalLine>(line) {
            latest.insert(
                entry.session,
                BusyRecord {
                    state: entry.state,
                    at_ms: entry.at_ms,
                },
            );
        }
    }
    latest
}

/// The session and record a journal entry stands for, if it is to be
/// trusted: written by `own_uid`, from the worker unit or the kernel unit
/// of the session it names. Its time is journald's receive time, never a
/// field the sender set.
pub fn trusted_record(entry: &JournalEntry, own_uid: u32) -> Option<(String, BusyRecord)> {
    let session = entry.get("EUKHE_SESSION")?;
    if entry.get("_UID")? != own_uid.to_string() {
        return None;
    }
    let unit = entry.get("_SYSTEMD_USER_UNIT")?;
    if unit != worker_unit(session) && unit != kernel_unit(session) {
        return None;
    }
    let state = match entry.get("EUKHE_BUSY")? {
        "busy" => BusyState::Busy,
        "idle" => BusyState::Idle,
        _ => return None,
    };
    let at_ms = (entry.received_ms > 0).then_some(entry.received_ms);
    Some((session.to_string(), BusyRecord { state, at_ms }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(fields: &[(&str, &str)], received_ms: u64) -> JournalEntry {
        JournalEntry {
            fields: fields
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            received_ms,
        }
    }

    #[test]
    fn a_journald_record_carries_the_fields_it_is_read_back_by() {
        let line = JournalLine {
            session: "1a2b3c4d".into(),
            state: BusyState::Idle,
            at_ms: None,
            work: WorkSet::EMPTY,
            build: "b1".into(),
        };
        let (message, fields) = journald_entry(&line).unwrap();
        assert_eq!(message, "busy evidence: idle");
        let fields: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
        assert_eq!(
            fields,
            [
                ("MESSAGE_ID", BUSY_MESSAGE_ID),
                ("SYSLOG_IDENTIFIER", "eukhe"),
                ("EUKHE_SESSION", "1a2b3c4d"),
                ("EUKHE_BUSY", "idle"),
                ("EUKHE_WORK", "[]"),
                ("EUKHE_BUILD", "b1"),
            ]
        );
        assert!(fields.iter().all(|(name, _)| journald::is_field_name(name)));
    }

    const GENUINE: &[(&str, &str)] = &[
        ("EUKHE_SESSION", "1a2b3c4d"),
        ("EUKHE_BUSY", "busy"),
        ("_UID", "4242"),
        ("_SYSTEMD_USER_UNIT", "eukhe@1a2b3c4d.service"),
    ];

    #[test]
    fn a_record_from_the_sessions_own_worker_unit_is_trusted_with_journald_time() {
        let (session, record) = trusted_record(&entry(GENUINE, 1_700_000_000_000), 4242).unwrap();
        assert_eq!(session, "1a2b3c4d");
        assert_eq!(record.state, BusyState::Busy);
        assert_eq!(record.at_ms, Some(1_700_000_000_000));
    }

    #[test]
    fn a_record_from_the_sessions_own_kernel_unit_is_trusted_too() {
        let mut fields: Vec<(&str, &str)> = GENUINE.to_vec();
        fields.retain(|(k, _)| *k != "_SYSTEMD_USER_UNIT");
        fields.push(("_SYSTEMD_USER_UNIT", "eukhe-kernel@1a2b3c4d.service"));
        let (session, record) = trusted_record(&entry(&fields, 7), 4242).unwrap();
        assert_eq!(session, "1a2b3c4d");
        assert_eq!(record.state, BusyState::Busy);
        assert_eq!(record.at_ms, Some(7));
    }

    #[test]
    fn an_idle_record_is_trusted_as_idle_and_one_without_a_time_has_none() {
        let mut fields: Vec<(&str, &str)> = GENUINE.to_vec();
        fields.retain(|(k, _)| *k != "EUKHE_BUSY");
        fields.push(("EUKHE_BUSY", "idle"));
        let (_, record) = trusted_record(&entry(&fields, 5), 4242).unwrap();
        assert_eq!(record.state, BusyState::Idle);
        let (_, untimed) = trusted_record(&entry(GENUINE, 0), 4242).unwrap();
        assert_eq!(untimed.at_ms, None, "no revival on a record without a time");
    }

    #[test]
    fn forged_records_are_not_trusted() {
        let with = |name: &str, value: &str| {
            let mut fields: Vec<(&str, &str)> = GENUINE.to_vec();
            fields.retain(|(k, _)| *k != name);
            if !value.is_empty() {
                fields.push((name, value));
            }
            entry(&fields, 1)
        };
        // Another user, another unit (a shell of the same user, another
        // session's worker or kernel, a unit named like a kernel unit but
        // not one), no unit at all, an unknown state.
        assert_eq!(trusted_record(&with("_UID", "1000"), 4242), None);
        assert_eq!(
            trusted_record(&with("_SYSTEMD_USER_UNIT", "app.slice"), 4242),
            None
        );
        assert_eq!(
            trusted_record(&with("_SYSTEMD_USER_UNIT", "eukhe@99999999.service"), 4242),
            None
        );
        assert_eq!(
            trusted_record(
                &with("_SYSTEMD_USER_UNIT", "eukhe-kernel@99999999.service"),
                4242
            ),
            None
        );
        for unit in [
            "eukhe-kernel@1a2b3c4d.scope",
            "eukhe-kernel-1a2b3c4d.service",
            "eukhe-kernel@1a2b3c4d.service.d",
            "other-eukhe-kernel@1a2b3c4d.service",
        ] {
            assert_eq!(
                trusted_record(&with("_SYSTEMD_USER_UNIT", unit), 4242),
                None,
                "{unit}"
            );
        }
        let mut from_kernel: Vec<(&str, &str)> = GENUINE.to_vec();
        from_kernel.retain(|(k, _)| *k != "_SYSTEMD_USER_UNIT" && *k != "_UID");
        from_kernel.push(("_SYSTEMD_USER_UNIT", "eukhe-kernel@1a2b3c4d.service"));
        from_kernel.push(("_UID", "1000"));
        assert_eq!(
            trusted_record(&entry(&from_kernel, 1), 4242),
            None,
            "another user's kernel unit"
        );
        assert_eq!(trusted_record(&with("_SYSTEMD_USER_UNIT", ""), 4242), None);
        assert_eq!(trusted_record(&with("EUKHE_BUSY", "maybe"), 4242), None);
    }

    #[test]
    fn the_file_journal_keeps_the_latest_record_per_session() {
        let dir = std::env::temp_dir().join(format!("eukhe-busy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let journal = BusyJournal::file(&dir);
        for (session, state, at) in [
            ("a", BusyState::Busy, 1),
            ("b", BusyState::Busy, 2),
            ("a", BusyState::Idle, 3),
        ] {
            journal
                .record(&JournalLine {
                    session: session.into(),
                    state,
                    at_ms: Some(at),
                    work: WorkSet::EMPTY,
                    build: "b".into(),
                })
                .unwrap();
        }
        let latest = journal.latest().unwrap();
        assert_eq!(
            latest["a"],
            BusyRecord {
                state: BusyState::Idle,
                at_ms: Some(3)
            }
        );
        assert_eq!(latest["b"].at_ms, Some(2));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
