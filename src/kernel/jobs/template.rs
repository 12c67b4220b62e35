//! Templates: shells forked ahead over the snapshot, so a job finds it
//! restored, and output FIFOs made ahead of the next job; a spare's
//! template over the blank state, which the claim turns into the first
//! snapshot's.

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::rc::Rc;

use super::{stream_name, write_private, Kernel, STREAMS};
use crate::host::process::{identity_of, is_alive};
use crate::kernel::output::{open_fifo, Fifo};
use crate::kernel::zygote;
use crate::laws::adoption::ProcessIdentity;
use crate::laws::timing::TM;

/// A shell forked by the kernel's shell that has restored one version of
/// the snapshot and takes jobs from its FIFO.
pub struct Template {
    /// The snapshot version it restored.
    version: u64,
    fifo: PathBuf,
    /// Where its reporters say they have taken a job.
    taken: PathBuf,
    restore: PathBuf,
    /// Traps and `set -o`, which each job applies itself (the template's
    /// own loop must not run under the user's `set -e` or traps).
    late: PathBuf,
    /// The FIFO's end the kernel writes jobs to (dropping it ends the
    /// template).
    jobs: File,
    /// Where the kernel asks for the next job shell (a byte each).
    next: PathBuf,
    next_writer: File,
    /// A job shell waits for a job: none after one took a job, until
    /// the kernel asks for the next (`Kernel::arm_template`).
    pub(super) armed: bool,
    /// The template's shell, once it reported ready.
    shell: Option<ProcessIdentity>,
}

impl Template {
    /// Remove its files but `restore` and `late`, which the bash of a job
    /// it took may still be about to read: returns those paths (see
    /// `Kernel::retire`).
    fn remove_files(self) -> [PathBuf; 2] {
        for path in [&self.fifo, &self.taken, &self.next] {
            let _ = std::fs::remove_file(path);
        }
        [self.restore, self.late]
    }

    /// Whether it restored snapshot `version` and its shell is up.
    pub(super) fn is_ready(&self, version: u64) -> bool {
        self.version == version && self.shell.is_some_and(is_alive)
    }

    /// Hand a job to its waiting job shell (which names the job's FIFOs and
    /// capture after the job).
    pub(super) fn take(&mut self, job: &str, stdin: &str, command: &str) -> std::io::Result<()> {
        self.armed = false;
        self.jobs
            .write_all(&zygote::message(&[job, stdin, command]))
    }

    /// Have its waiting job's bash restore the `restore` script again now,
    /// ahead of the job it will take.
    fn restore_ahead(&mut self) -> std::io::Result<()> {
        self.jobs
            .write_all(&zygote::message(&[zygote::RESTORE_AHEAD]))
    }

    /// Have a job shell forked, unless one waits already.
    pub(super) fn arm(&mut self) -> std::io::Result<()> {
        if !self.armed {
            self.next_writer.write_all(b"n")?;
            self.armed = true;
        }
        Ok(())
    }
}

/// Output FIFOs made ahead of the next job, off its way, under names of
/// their own until a job takes them (`Kernel::prepare_spare`).
pub(super) struct SpareOutput {
    /// stdout's and stderr's.
    paths: [PathBuf; 2],
    fifos: [Fifo; 2],
}

impl SpareOutput {
    fn remove_files(&self) {
        for path in &self.paths {
            let _ = std::fs::remove_file(path);
        }
    }
}

impl Kernel {
    /// The spare this kernel serves became a session (`eukhe new` wrote
    /// its metadata): make its first snapshot, from the working directory
    /// and environment `new` gave it. Whether it was made now (a kernel
    /// claimed before, or never a spare's, is left as it is).
    ///
    /// The spare's template, made ahead over the blank state, stays as
    /// [`Kernel::claim_template`]: its `restore` and `late` scripts become
    /// the first snapshot's, which its waiting job's bash, already started,
    /// restores at once (`Template::restore_ahead`), in the milliseconds before
    /// the client's first request comes; so the session's first job waits
    /// for neither a template nor a restore. The session's own template is
    /// made once that job's end is on its way ([`Kernel::arm_template`]), as
    /// after any job: made at the claim, its shell would share the two cores
    /// with that restore and with the client's start.
    pub fn claim(&mut self) -> Result<bool, String> {
        if !self.unclaimed {
            return Ok(false);
        }
        self.snapshot = Rc::new(crate::kernel::first_snapshot(
            &self.files,
            self.shell_defaults.as_ref(),
        )?);
        self.unclaimed = false;
        self.first_unmerged = true;
        let blank = self.version;
        self.version += 1;
        if let Some(mut template) = self.template.take_if(|t| t.version == blank) {
            let written = write_private(&template.restore, &self.snapshot.template_script())
                .and_then(|()| write_private(&template.late, &self.snapshot.late_script()))
                .and_then(|()| template.restore_ahead());
            match written {
                Ok(()) => {
                    template.version = self.version;
                    self.claim_template = Some(template);
                }
                Err(e) => {
                    tracing::warn!("the spare's template is not used: {e}");
                    self.retire(template);
                }
            }
        }
        Ok(true)
    }

    /// A spare's kernel, while nothing waits: a template over the blank
    /// state and the first job's output pipes, ready for the claim.
    pub fn prepare_for_claim(&mut self) {
        if self.unclaimed {
            self.prepare_template();
            self.prepare_spare();
        }
    }

    /// The spare output FIFOs, moved to `paths` (a job's names), if there
    /// are any and the move works.
    pub(super) fn take_spare(&mut self, paths: &[PathBuf; 2]) -> Option<[Fifo; 2]> {
        let spare = self.spare.take()?;
        for (from, to) in spare.paths.iter().zip(paths) {
            if let Err(e) = std::fs::rename(from, to) {
                tracing::warn!("cannot move {} to {}: {e}", from.display(), to.display());
                spare.remove_files();
                return None;
            }
        }
        Some(spare.fifos)
    }

    /// Make the next job's output FIFOs now, while nothing waits for them.
    pub fn prepare_spare(&mut self) {
        if self.spare.is_some() || self.stopping {
            return;
        }
        self.spare_seq += 1;
        let name = format!("spare-{}", self.spare_seq);
        let paths = STREAMS.map(|stream| self.scratch(&name, stream_name(stream)));
        match open_fifo(&paths[0]).and_then(|out| Ok([out, open_fifo(&paths[1])?])) {
            Ok(fifos) => self.spare = Some(SpareOutput { paths, fifos }),
            Err(e) => {
                tracing::warn!("no output pipes made ahead: {e}");
                for path in &paths {
                    let _ = std::fs::remove_file(path);
                }
            }
        }
    }

    /// Remove the spare output FIFOs (the kernel stops).
    pub fn drop_spare(&mut self) {
        if let Some(spare) = self.spare.take() {
            spare.remove_files();
        }
    }

    /// The template of the current snapshot, if it is up and alive.
    fn ready_template(&mut self) -> Option<&mut Template> {
        let version = self.version;
        self.template.as_mut().filter(|t| t.is_ready(version))
    }

    /// Have the shell fork a template over the current snapshot (the old
    /// one ends: its job FIFO closes). Off every job's way: the next job
    /// finds it restored.
    pub fn prepare_template(&mut self) {
        if let Some(old) = self.template.take() {
            self.retire(old);
        }
        if self.stopping {
            return;
        }
        self.template_seq += 1;
        let name = format!("template-{}", self.template_seq);
        let fifo = self.scratch(&name, "fifo");
        let taken = self.scratch(&name, "taken");
        let restore = self.scratch(&name, "restore");
        let late = self.scratch(&name, "late");
        let next = self.scratch(&name, "next");
        let made = (|| -> Result<Template, String> {
            for path in [&fifo, &taken, &next] {
                let _ = std::fs::remove_file(path);
                crate::kernel::output::make_fifo(path)?;
            }
            // Read and write: never blocks, and the template sees the end
            // only when the kernel drops it.
            let open = |path: &PathBuf| {
                std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(path)
                    .map_err(|e| format!("kernel: {}: {e}", path.display()))
            };
            let jobs = open(&fifo)?;
            let next_writer = open(&next)?;
            write_private(&restore, &self.snapshot.template_script())
                .and_then(|_| write_private(&late, &self.snapshot.late_script()))
                .map_err(|e| format!("kernel: cannot write {}: {e}", restore.display()))?;
            let message = zygote::message(&[
                "template",
                &fifo.to_string_lossy(),
                &taken.to_string_lossy(),
                &restore.to_string_lossy(),
                &self.files.scratch().to_string_lossy(),
                &late.to_string_lossy(),
                &next.to_string_lossy(),
            ]);
            self.shell_input()?
                .write_all(&message)
                .map_err(|e| format!("kernel: cannot ask for a template: {e}"))?;
            Ok(Template {
                version: self.version,
                fifo: fifo.clone(),
                taken: taken.clone(),
                restore: restore.clone(),
                late: late.clone(),
                jobs,
                next: next.clone(),
                next_writer,
                armed: true,
                shell: None,
            })
        })();
        match made {
            Ok(template) => self.template = Some(template),
            // Jobs then restore the snapshot themselves.
            Err(e) => tracing::warn!("no template: {e}"),
        }
    }

    /// Drop the template of a session that has been idle for
    /// `template_idle` (its shell is memory an idle session need not hold;
    /// the next job restores the snapshot itself and prepares another).
    pub fn drop_idle_template(&mut self, now_ms: u64) {
        // A spare's is there for the claim, however long that takes.
        if self.unclaimed {
            return;
        }
        let held = self.template.is_some() || self.claim_template.is_some();
        if held && template_expired(self.job_running(), self.last_job_ms, now_ms) {
            for template in [self.template.take(), self.claim_template.take()]
                .into_iter()
                .flatten()
            {
                self.retire(template);
            }
        }
    }

    /// Drop `template`: its job FIFO closes, so its waiting job shell and
    /// reporter end, and then its shell. Its `restore` and `late` scripts
    /// are removed only once no job runs: a job it took may not have
    /// sourced them yet (jobs
    /// run side by side, and a job that ends first can change the snapshot
    /// and so drop the template of the others).
    fn retire(&mut self, template: Template) {
        self.retired_late.extend(template.remove_files());
        self.remove_retired_late();
    }

    /// Remove retired templates' `restore` and `late` scripts, once no job
    /// runs.
    pub(super) fn remove_retired_late(&mut self) {
        if !self.job_running() {
            for path in self.retired_late.drain(..) {
                let _ = std::fs::remove_file(path);
            }
        }
    }

    /// Have the template fork its next job shell now that a job's end is
    /// on its way (or prepare a template over a changed snapshot).
    pub fn arm_template(&mut self) {
        if self.needs_template() {
            self.prepare_template();
        } else if let Some(template) = self.ready_template() {
            if let Err(e) = template.arm() {
                tracing::warn!("template: cannot ask for a job shell: {e}");
            }
        }
    }

    /// Whether the template is missing or restored an older snapshot.
    pub fn needs_template(&self) -> bool {
        self.template
            .as_ref()
            .is_none_or(|t| t.version != self.version)
    }

    /// A template reported that it is ready. Once the session's own is, a
    /// claimed spare's template is no longer needed.
    pub fn template_ready(&mut self, fifo: &str, pid: u32) {
        if let Some(template) = &mut self.template {
            if template.fifo.to_string_lossy() == fifo {
                template.shell = identity_of(pid);
                if let Some(claim_template) = self.claim_template.take() {
                    self.retire(claim_template);
                }
            }
        }
    }
}

/// Whether a template has waited too long for a job: none runs and the
/// last one started or ended more than `template_idle` ago.
fn template_expired(job_running: bool, last_job_ms: u64, now_ms: u64) -> bool {
    !job_running && now_ms.saturating_sub(last_job_ms) > TM.kernel.template_idle
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_template_outlives_a_busy_spell_and_goes_after_an_idle_one() {
        let idle = TM.kernel.template_idle;
        assert!(!template_expired(false, 1_000, 1_000 + idle));
        assert!(template_expired(false, 1_000, 1_000 + idle + 1));
        assert!(
            !template_expired(true, 1_000, 1_000 + 10 * idle),
            "a job runs"
        );
        assert!(
            !template_expired(false, 5_000, 1_000),
            "a clock before the job"
        );
    }
}
