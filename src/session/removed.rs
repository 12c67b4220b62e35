//! Removal records: `removed.log` in the state directory (0600, one JSON
//! line per removed session, fsynced before anything of the session is
//! stopped or deleted). A record is final (`laws::removal`): busy evidence
//! (`busy.log`, or journald entries, which cannot be deleted), a kernel that
//! outlived its stop or a directory left by a removal cut short never bring
//! the session back, and its id is never given to a new session.
//!
//! A session's directory is deleted by moving it into `removing/` first
//! (one rename: from then on it is no session, as `list_sessions` sees
//! it), then deleting it there; a supervisor that starts finishes whatever
//! is left in `removing/`, and deletes the directory of any recorded
//! session that still has one.

use super::SessionError;
use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::store::{append_durably, private_dir};

/// What every command says of a session removed before or while it asked
/// (`reference`: the id or name it gave).
pub fn no_longer_exists(reference: &str) -> String {
    format!("session {reference} no longer exists: it was removed")
}

/// One removed session.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemovalRecord {
    pub session: String,
    pub name: String,
    /// Wall-clock milliseconds.
    pub at_ms: u64,
}

/// The removal records of a state directory.
#[derive(Clone, Debug)]
pub struct Removals {
    state: PathBuf,
}

impl Removals {
    pub fn new(state: &Path) -> Removals {
        Removals {
            state: state.to_path_buf(),
        }
    }

    /// The file of records.
    pub fn log(&self) -> PathBuf {
        self.state.join("removed.log")
    }

    /// Where directories wait while they are deleted.
    pub fn removing(&self) -> PathBuf {
        self.state.join("removing")
    }

    /// Record a removal, durably, before anything is stopped or deleted.
    pub fn record(&self, record: &RemovalRecord) -> Result<(), SessionError> {
        let path = self.log();
        let mut line = serde_json::to_string(record)?;
        line.push('\n');
        append_durably(&path, line.as_bytes()).map_err(|source| SessionError::File {
            action: "removal record",
            path,
            source,
        })
    }

    /// Every removed session's id (unreadable lines, such as a torn last
    /// line, are skipped: a removal whose record was torn had not begun).
    pub fn ids(&self) -> HashSet<String> {
        let Ok(text) = std::fs::read_to_string(self.log()) else {
            return HashSet::new();
        };
        text.lines()
            .filter_map(|line| serde_json::from_str::<RemovalRecord>(line).ok())
            .map(|record| record.session)
            .collect()
    }

    /// Whether a removed session was last named `name`.
    pub fn named(&self, name: &str) -> bool {
        let Ok(text) = std::fs::read_to_string(self.log()) else {
            return false;
        };
        text.lines()
            .filter_map(|line| serde_json::from_str::<RemovalRecord>(line).ok())
            .any(|record| record.name == name)
    }

    /// Delete the directory `dir` of session `id`: moved aside in one
    /// rename, then deleted. A directory that is already gone is fine.
    pub fn delete_dir(&self, id: &str, dir: &Path) -> Result<(), SessionError> {
        let aside = self.removing().join(id);
        if dir.exists() {
            private_dir(&self.removing())?;
            // A leftover of an earlier attempt would make the rename fail.
            remove_tree(&aside)?;
            std::fs::rename(dir, &aside).map_err(|source| SessionError::MoveAside {
                id: id.to_string(),
                from: dir.to_path_buf(),
                to: aside.clone(),
                source,
            })?;
        }
        remove_tree(&aside)
    }

    /// Finish removals cut short: whatever waits in `removing/`.
    pub fn finish_cut_short(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if let Ok(entries) = std::fs::read_dir(self.removing()) {
            for entry in entries.flatten() {
                if let Err(e) = remove_tree(&entry.path()) {
                    problems.push(e.to_string());
                }
            }
        }
        problems
    }
}

fn remove_tree(path: &Path) -> Result<(), SessionError> {
    match std::fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(SessionError::File {
            action: "cannot delete",
            path: path.to_path_buf(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn records_are_kept_and_directories_deleted_through_removing() {
        let state = std::env::temp_dir().join(format!("eukhe-removed-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&state);
        std::fs::create_dir_all(state.join("sessions/abcd0123/spool")).unwrap();
        std::fs::write(state.join("sessions/abcd0123/meta.json"), "{}").unwrap();
        let removals = Removals::new(&state);
        assert!(removals.ids().is_empty());
        removals
            .record(&RemovalRecord {
                session: "abcd0123".into(),
                name: "gone".into(),
                at_ms: 1,
            })
            .unwrap();
        // A torn last line is skipped, the record before it kept.
        std::fs::OpenOptions::new()
            .append(true)
            .open(removals.log())
            .unwrap()
            .write_all(b"{\"session\":\"ff")
            .unwrap();
        assert_eq!(removals.ids(), HashSet::from(["abcd0123".to_string()]));
        let dir = state.join("sessions/abcd0123");
        removals.delete_dir("abcd0123", &dir).unwrap();
        assert!(!dir.exists());
        assert!(!removals.removing().join("abcd0123").exists());
        // Already gone: nothing to do.
        removals.delete_dir("abcd0123", &dir).unwrap();
        // One cut short in `removing/` is finished.
        std::fs::create_dir_all(removals.removing().join("00000000/spool")).unwrap();
        assert!(removals.finish_cut_short().is_empty());
        assert!(!removals.removing().join("00000000").exists());
        std::fs::remove_dir_all(&state).unwrap();
    }
}
