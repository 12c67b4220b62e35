//! Handing a terminal job to the kernel's shell (`super::super::tty`): its
//! shell, forked by the kernel's shell rather than a template (a template's
//! job shell exists before its job, so it cannot lead the job's session),
//! opens the terminal for its standard streams; the terminal's master is
//! the job's stdout reader.

use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;

use super::{write_scripts, Handed, Kernel};
use crate::kernel::error::KernelError;
use crate::kernel::output::open_fifo;
use crate::kernel::tty;
use crate::kernel::zygote;
use crate::protocol::tty::WindowSize;
use crate::session::entry::Stream;

impl Kernel {
    /// Hand `job` to the kernel's shell on a new terminal of `size`. Its
    /// stderr stream is a FIFO nobody opens (the terminal carries both):
    /// it ends once the job has started.
    pub(super) fn hand_terminal_job(
        &mut self,
        job: &str,
        command: &str,
        size: WindowSize,
        capture: &str,
    ) -> Result<Handed, KernelError> {
        let pty = tty::open(size)?;
        let stdout = tty::reader(&pty.master)?;
        let stderr = open_fifo(&self.scratch(job, super::stream_name(Stream::Stderr)))?;
        let restore = self.scratch(job, "restore");
        let late = self.scratch(job, "late");
        write_scripts(&self.snapshot, &restore, &late)?;
        let (restore, late) = (restore.to_string_lossy(), late.to_string_lossy());
        let (shell_line, shell) = if command == super::shell::SHELL_COMMAND {
            let (line, shell) = self.shell_command(job)?;
            (Some(line), Some(shell))
        } else {
            (None, None)
        };
        let command = shell_line.as_deref().unwrap_or(command);
        let terminal = pty.path.as_str();
        let message = zygote::message(&[
            "job", job, terminal, terminal, &restore, &late, capture, terminal, terminal, command,
        ]);
        self.shell_input()?
            .write_all(&message)
            .map_err(|source| KernelError::Hand {
                job: job.to_string(),
                source,
            })?;
        let read_ends = [Some(stdout.as_raw_fd()), Some(stderr.reader.as_raw_fd())];
        self.ttys.add(job, pty.master, size);
        Ok(Handed {
            readers: vec![(Stream::Stdout, stdout), (Stream::Stderr, stderr.reader)],
            placeholders: vec![stderr.placeholder, File::from(pty.slave)],
            read_ends,
            shell,
        })
    }
}
