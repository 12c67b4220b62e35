//! Templates: shells forked ahead over the snapshot, so a job finds it
//! restored, and output FIFOs made ahead of the next job; a spare's
//! template over the blank state, which the claim turns into the first
//! snapshot's.

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::rc::Rc;

use super::{stream_name, write_private, write_scripts, Kernel, STREAMS};
use crate::host::process::{identity_of, is_alive};
use crate::kernel::core::templates::{AfterEnd, Slot, TemplateBook};
use crate::kernel::error::KernelError;
use crate::kernel::output::{open_fifo, Fifo};
use crate::kernel::zygote;
use crate::laws::adoption::ProcessIdentity;

/// A shell forked by the kernel's shell that has restored one version of
/// the snapshot and takes jobs from its FIFO.
pub struct Template {
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

    /// Whether its shell is up.
    pub(super) fn is_alive(&self) -> bool {
        self.shell.is_some_and(is_alive)
    }

    /// Hand a job to its waiting job shell (which names the job's FIFOs and
    /// capture after the job).
    pub(super) fn take(&mut self, job: &str, stdin: &str, command: &str) -> std::io::Result<()> {
        self.jobs
            .write_all(&zygote::message(&[job, stdin, command]))
    }

    /// Have its waiting job's bash restore the `restore` script again now,
    /// ahead of the job it will take.
    fn restore_ahead(&mut self) -> std::io::Result<()> {
        self.jobs
            .write_all(&zygote::message(&[zygote::RESTORE_AHEAD]))
    }

    /// Have a job shell forked (the book says none waits).
    pub(super) fn arm(&mut self) -> std::io::Result<()> {
        self.next_writer.write_all(b"n")
    }
}

/// The shells and FIFOs made ahead of jobs.
#[derive(Default)]
pub(super) struct Templates {
    /// The snapshot's version, the current template and a claimed spare's
    /// (over the blank state: its waiting job shell restores the whole
    /// first snapshot, its `late` script, and takes the session's first
    /// job only if the current one is not ready yet), and their states.
    pub(super) book: TemplateBook<Template>,
    seq: u64,
    spare: Option<SpareOutput>,
    spare_seq: u64,
    /// `restore` and `late` scripts of dropped templates, kept while a job
    /// may read them.
    retired_late: Vec<PathBuf>,
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
    /// its metadata) at `now`: make its first snapshot, from the working directory
    /// and environment `new` gave it. Whether it was made now (a kernel
    /// claimed before, or never a spare's, is left as it is).
    ///
    /// The spare's template, made ahead over the blank state, stays as
    /// `Templates::claim`: its `restore` and `late` scripts become
    /// the first snapshot's, which its waiting job's bash, already started,
    /// restores at once (`Template::restore_ahead`), in the milliseconds before
    /// the client's first request comes; so the session's first job waits
    /// for neither a template nor a restore. The session's own template is
    /// made once that job's end is on its way ([`Kernel::arm_template`]), as
    /// after any job: made at the claim, its shell would share the two cores
    /// with that restore and with the client's start.
    pub fn claim(&mut self, now: u64) -> Result<bool, KernelError> {
        if self.core.is_claimed() {
            return Ok(false);
        }
        self.snapshot = Rc::new(crate::kernel::first_snapshot(
            &self.files,
            self.shell_defaults.as_ref(),
        )?);
        self.core.claimed(now);
        self.first_unmerged = true;
        if let Some(mut spare) = self.templates.book.claim() {
            let template = &mut spare.handle;
            let written = write_private(&template.restore, &self.snapshot.template_script())
                .and_then(|()| write_private(&template.late, &self.snapshot.late_script()))
                .and_then(|()| template.restore_ahead());
            match written {
                Ok(()) => self.templates.book.restored_ahead(spare),
                Err(e) => {
                    tracing::warn!("the spare's template is not used: {e}");
                    self.retire(spare.handle);
                }
            }
        }
        Ok(true)
    }

    /// A spare's kernel, while nothing waits: a template over the blank
    /// state and the first job's output pipes, ready for the claim.
    pub fn prepare_for_claim(&mut self) {
        if !self.core.is_claimed() {
            self.prepare_template();
            self.prepare_spare();
        }
    }

    /// The spare output FIFOs, moved to `paths` (a job's names), if there
    /// are any and the move works.
    pub(super) fn take_spare(&mut self, paths: &[PathBuf; 2]) -> Option<[Fifo; 2]> {
        let spare = self.templates.spare.take()?;
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
        if self.templates.spare.is_some() || self.core.stopping() {
            return;
        }
        self.templates.spare_seq += 1;
        let name = format!("spare-{}", self.templates.spare_seq);
        let paths = STREAMS.map(|stream| self.scratch(&name, stream_name(stream)));
        match open_fifo(&paths[0]).and_then(|out| Ok([out, open_fifo(&paths[1])?])) {
            Ok(fifos) => self.templates.spare = Some(SpareOutput { paths, fifos }),
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
        if let Some(spare) = self.templates.spare.take() {
            spare.remove_files();
        }
    }

    /// Have the shell fork a template over the current snapshot (the old
    /// one ends: its job FIFO closes). Off every job's way: the next job
    /// finds it restored.
    pub fn prepare_template(&mut self) {
        if let Some(old) = self.templates.book.take_current() {
            self.retire(old);
        }
        if self.core.stopping() {
            return;
        }
        self.templates.seq += 1;
        let name = format!("template-{}", self.templates.seq);
        let fifo = self.scratch(&name, "fifo");
        let taken = self.scratch(&name, "taken");
        let restore = self.scratch(&name, "restore");
        let late = self.scratch(&name, "late");
        let next = self.scratch(&name, "next");
        let made = (|| -> Result<Template, KernelError> {
            for path in [&fifo, &taken, &next] {
                let _ = std::fs::remove_file(path);
                crate::kernel::output::make_fifo(path)?;
            }
            let jobs = open_both_ends(&fifo)?;
            let next_writer = open_both_ends(&next)?;
            write_scripts(&self.snapshot, &restore, &late)?;
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
                .map_err(KernelError::AskTemplate)?;
            Ok(Template {
                fifo: fifo.clone(),
                taken: taken.clone(),
                restore: restore.clone(),
                late: late.clone(),
                jobs,
                next: next.clone(),
                next_writer,
                shell: None,
            })
        })();
        match made {
            Ok(template) => {
                if let Some(old) = self.templates.book.made(template) {
                    self.retire(old);
                }
            }
            // Jobs then restore the snapshot themselves.
            Err(e) => tracing::warn!("no template: {e}"),
        }
    }

    /// Drop the templates of a session that has been idle for
    /// `template_idle`, as the core decided (their shells are memory an
    /// idle session need not hold; the next job restores the snapshot
    /// itself and prepares another).
    pub fn drop_idle_templates(&mut self) {
        for template in self.templates.book.drop_all() {
            self.retire(template);
        }
    }

    /// Drop `template`: its job FIFO closes, so its waiting job shell and
    /// reporter end, and then its shell. Its `restore` and `late` scripts
    /// are removed only once no job runs: a job it took may not have
    /// sourced them yet (jobs
    /// run side by side, and a job that ends first can change the snapshot
    /// and so drop the template of the others).
    fn retire(&mut self, template: Template) {
        self.templates.retired_late.extend(template.remove_files());
        self.remove_retired_late();
    }

    /// Remove retired templates' `restore` and `late` scripts, once no job
    /// runs.
    pub(super) fn remove_retired_late(&mut self) {
        if !self.job_running() {
            for path in self.templates.retired_late.drain(..) {
                let _ = std::fs::remove_file(path);
            }
        }
    }

    /// Have the template fork its next job shell now that a job's end is
    /// on its way (or prepare a template over a changed snapshot).
    pub fn arm_template(&mut self) {
        match self.templates.book.after_end(Template::is_alive) {
            AfterEnd::Make => self.prepare_template(),
            AfterEnd::Arm => {
                let template = self.templates.book.handle_mut(Slot::Current);
                match template.map(Template::arm) {
                    Some(Err(e)) => tracing::warn!("template: cannot ask for a job shell: {e}"),
                    Some(Ok(())) => self.templates.book.armed(),
                    None => {}
                }
            }
            AfterEnd::Nothing => {}
        }
    }

    /// A template reported that it is ready. Once the session's own is, a
    /// claimed spare's template is no longer needed.
    pub fn template_ready(&mut self, fifo: &str, pid: u32) {
        let spares = self.templates.book.reported_ready(|template| {
            let it = template.fifo.to_string_lossy() == fifo;
            if it {
                template.shell = identity_of(pid);
            }
            it
        });
        if let Some(claim_template) = spares {
            self.retire(claim_template);
        }
    }
}

/// Open the FIFO at `path` for reading and writing: never blocks, and its
/// reader (a template) sees the end only when the kernel drops it.
fn open_both_ends(path: &std::path::Path) -> Result<File, KernelError> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|source| KernelError::Scratch {
            action: "open",
            path: path.to_path_buf(),
            source,
        })
}
