//! Interactive shell runs (`eukhe attach S --shell`): a terminal job whose
//! command is [`SHELL_COMMAND`] runs `bash -i` over the session's state
//! with `shell.bash` as its rc file. That shell writes the state each
//! typed command leaves to the job's checkpoint file before it shows its
//! next prompt; the kernel merges a new checkpoint into the snapshot as
//! soon as it reads the shell's next output (the end mark follows the
//! write), before it starts any other job, and at the job's end. So a
//! later `eukhe bash` sees what a command changed once its prompt is back,
//! whatever becomes of the worker or the client.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::rc::Rc;

use super::{write_private, Kernel};
use crate::kernel::error::KernelError;
pub use crate::protocol::tty::SHELL_COMMAND;
use crate::session::snapshot::{parse_capture, quote, Snapshot};

/// Variables interactive bash sets itself (`shell.bash` says which of them
/// the session had, so only those are kept unless a command changed them).
const INTERACTIVE_NAMES: [&str; 6] = [
    "PS1",
    "PS2",
    "HISTFILE",
    "HISTSIZE",
    "HISTFILESIZE",
    "MAILCHECK",
];

/// One running shell job's checkpoints.
pub struct ShellJob {
    checkpoint: PathBuf,
    /// The file merged last (its inode and change time): a checkpoint is
    /// written aside and renamed, so each is a new file.
    merged: Option<(u64, i64, i64)>,
    /// The state the last merged checkpoint held: the next one's changes
    /// are measured against it.
    base: Rc<Snapshot>,
}

/// The kernel's running shell jobs, by job.
#[derive(Default)]
pub struct ShellJobs {
    by_job: HashMap<String, ShellJob>,
}

/// The rc file of a shell job: `shell.bash` with the job's capture.
fn rc_script() -> String {
    include_str!("../shell.bash").replace("@CAPTURE@", include_str!("../capture.bash"))
}

impl Kernel {
    /// The command a shell job's own bash runs in place of
    /// [`SHELL_COMMAND`]: `bash -i` over the rc file, written now. The run
    /// ends with status 0 when the person leaves the shell (`exit`,
    /// Ctrl-D), or with the signal's status when one ended it.
    pub(super) fn shell_command(&mut self, job: &str) -> Result<String, KernelError> {
        let rc = self.scratch(job, "shellrc");
        let checkpoint = self.scratch(job, "checkpoint");
        write_private(&rc, &rc_script()).map_err(|source| KernelError::Scratch {
            action: "write",
            path: rc.clone(),
            source,
        })?;
        let had: String = INTERACTIVE_NAMES
            .iter()
            .map(|name| format!("${{{name}+{name} }}"))
            .collect();
        self.shells.by_job.insert(
            job.to_string(),
            ShellJob {
                checkpoint: checkpoint.clone(),
                merged: None,
                base: Rc::clone(&self.snapshot),
            },
        );
        Ok(format!(
            "__eukhe_restore=$__eukhe_restore __eukhe_late=$__eukhe_late \
             __eukhe_so_outer=$SHELLOPTS __eukhe_bo_outer=$BASHOPTS \
             __eukhe_had=\"{had}\" __eukhe_checkpoint={} \
             \"$BASH\" --rcfile {} -i; (exit $(($? > 128 ? $? : 0)))",
            quote(&checkpoint.to_string_lossy()),
            quote(&rc.to_string_lossy()),
        ))
    }

    /// Merge the newest checkpoint of shell job `job` into the snapshot,
    /// if there is one not merged yet.
    pub(super) fn merge_shell_checkpoint(&mut self, job: &str) {
        let Some(shell) = self.shells.by_job.get_mut(job) else {
            return;
        };
        let Ok(meta) = std::fs::metadata(&shell.checkpoint) else {
            return;
        };
        let stamp = (meta.ino(), meta.ctime(), meta.ctime_nsec());
        if shell.merged == Some(stamp) {
            return;
        }
        let Ok(bytes) = std::fs::read(&shell.checkpoint) else {
            return;
        };
        shell.merged = Some(stamp);
        let capture = match parse_capture(&bytes, &shell.base) {
            Ok(capture) if capture.status.is_some() => capture,
            Ok(_) => return,
            Err(e) => {
                tracing::warn!("{job}'s shell state could not be read: {e}");
                return;
            }
        };
        let changes = shell.base.changes_to(&capture.snapshot);
        shell.base = Rc::new(capture.snapshot);
        if self.snapshot.is_changed_by(&changes) {
            Rc::make_mut(&mut self.snapshot).apply(&changes);
            self.first_unmerged = false;
            self.templates.book.snapshot_changed();
            if let Err(e) = self.snapshot.save(&self.files.snapshot()) {
                self.notices
                    .push(format!("the shell state could not be saved: {e}"));
            }
        }
    }

    /// Merge every running shell job's newest checkpoint: before another
    /// job starts from the snapshot.
    pub(super) fn merge_shell_checkpoints(&mut self) {
        let jobs: Vec<String> = self.shells.by_job.keys().cloned().collect();
        for job in jobs {
            self.merge_shell_checkpoint(&job);
        }
    }

    /// Shell job `job` ended: its last checkpoint is merged, its files go.
    pub(super) fn shell_ended(&mut self, job: &str) {
        self.merge_shell_checkpoint(job);
        if let Some(shell) = self.shells.by_job.remove(job) {
            let _ = std::fs::remove_file(&shell.checkpoint);
            let _ = std::fs::remove_file(self.scratch(job, "shellrc"));
        }
    }

    /// Whether `job` is a running shell job.
    pub(super) fn is_shell_job(&self, job: &str) -> bool {
        self.shells.by_job.contains_key(job)
    }
}
