//! The busy-evidence journal of the process backend: an append-only file
//! (`busy.log`, 0600, in a 0700 state directory, so no other user can
//! forge evidence) with one JSON line per record. The supervisor reads the
//! latest record per session at boot and feeds `laws::revival`.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::laws::revival::{BusyRecord, BusyState};
use crate::laws::work::WorkSet;
use crate::session::store::private_append;

/// One line of the journal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournalLine {
    pub session: String,
    pub state: BusyState,
    /// Wall-clock milliseconds.
    pub at_ms: Option<u64>,
    pub work: WorkSet,
    pub build: String,
}

pub struct BusyJournal {
    path: PathBuf,
}

impl BusyJournal {
    pub fn new(state_dir: &Path) -> Self {
        BusyJournal {
            path: state_dir.join("busy.log"),
        }
    }

    /// Append a record durably.
    pub fn record(&self, line: &JournalLine) -> Result<(), String> {
        let mut file = private_append(&self.path)?;
        let mut text = serde_json::to_string(line).map_err(|e| e.to_string())?;
        text.push('\n');
        file.write_all(text.as_bytes())
            .and_then(|_| file.sync_data())
            .map_err(|e| format!("busy journal {}: {e}", self.path.display()))
    }

    /// The latest record of each session (unreadable lines are skipped).
    pub fn latest(&self) -> HashMap<String, BusyRecord> {
        let Ok(text) = std::fs::read_to_string(&self.path) else {
            return HashMap::new();
        };
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
}
