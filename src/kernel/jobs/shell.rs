//! Interactive shell runs (`eukhe attach S --shell`): a terminal job whose
//! command is [`SHELL_COMMAND`] runs `bash -i` over the session's state
//! with `shell.bash` as its rc file. That shell writes the state each
//! typed command leaves to the job's checkpoint file before it shows its
//! next prompt; the kernel merges a new checkpoint into the snapshot as
//! soon as it reads the shell's next output (the end mark follows the
//! write), before it starts any other job, and at the job's end. So a
//! later `eukhe bash` sees what a command changed once its prompt is back,
//! whatever becomes of the worker or the client.

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

/// The rc file of a shell job: `shell.bash` with the job's capture, whose
/// status is the typed command's (kept by the prompt's hook as it began).
fn rc_script() -> String {
    let capture =
        include_str!("../capture.bash").replacen("__eukhe_st=$?", "__eukhe_st=$__eukhe_s", 1);
    include_str!("../shell.bash").replace("@CAPTURE@", &capture)
}

impl Kernel {
    /// The command a shell job's own bash runs in place of
    /// [`SHELL_COMMAND`] (`bash -i` over the rc file, written now), and
    /// the job's checkpoints. The run ends with status 0 when the person
    /// leaves the shell (`exit`, Ctrl-D), or with the signal's status when
    /// one ended it.
    pub(super) fn shell_command(&mut self, job: &str) -> Result<(String, ShellJob), KernelError> {
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
        let line = format!(
            "__eukhe_restore=$__eukhe_restore __eukhe_late=$__eukhe_late \
             __eukhe_so_outer=$SHELLOPTS __eukhe_bo_outer=$BASHOPTS \
             __eukhe_had=\"{had}\" __eukhe_checkpoint={} \
             \"$BASH\" --rcfile {} -i; (exit $(($? > 128 ? $? : 0)))",
            quote(&checkpoint.to_string_lossy()),
            quote(&rc.to_string_lossy()),
        );
        let shell = ShellJob {
            checkpoint,
            merged: None,
            base: Rc::clone(&self.snapshot),
        };
        Ok((line, shell))
    }

    /// Merge the newest checkpoint of `job`, if it is a shell job and one
    /// is there that was not merged yet, into the snapshot.
    pub(super) fn merge_shell_checkpoint(&mut self, job: &str) {
        let Some(shell) = self.jobs.get_mut(job).and_then(|j| j.shell.as_mut()) else {
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
        let shells: Vec<String> = self
            .jobs
            .iter()
            .filter(|(_, j)| j.shell.is_some())
            .map(|(job, _)| job.clone())
            .collect();
        for job in shells {
            self.merge_shell_checkpoint(&job);
        }
    }

    /// `job` ended: a shell job's last checkpoint is merged, and its
    /// files go.
    pub(super) fn shell_ended(&mut self, job: &str) {
        if self.jobs.get(job).is_some_and(|j| j.shell.is_some()) {
            self.merge_shell_checkpoint(job);
            if let Some(j) = self.jobs.get_mut(job) {
                j.shell = None;
            }
            self.remove_shell_files(job);
        }
    }

    /// A shell job's rc file and checkpoints, if it had them.
    pub(super) fn remove_shell_files(&self, job: &str) {
        for what in ["checkpoint", "checkpoint.new", "shellrc"] {
            let _ = std::fs::remove_file(self.scratch(job, what));
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_rc_file_captures_with_the_typed_commands_status() {
        let rc = super::rc_script();
        assert!(!rc.contains("@CAPTURE@"));
        assert!(rc.contains("__eukhe_st=$__eukhe_s"));
        assert!(
            !rc.contains("__eukhe_st=$?"),
            "the hook's own status is not the command's"
        );
    }
}
