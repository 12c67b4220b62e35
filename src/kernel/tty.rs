//! Terminal jobs: a pseudo-terminal the kernel opens and holds for a job
//! that asked for one (`ToKernel::Start`'s `tty`), so the terminal, like
//! the job, outlives the worker.
//!
//! The job's shell gets the terminal's slave as its standard input, output
//! and error, and as its controlling terminal (`setsid --ctty`, in
//! `zygote.rs`): it leads a new session whose process group is the
//! terminal's foreground group. The kernel keeps the master: what the
//! program writes is read from it as the job's stdout, byte for byte (a
//! read failing with EIO means every slave is closed: the stream's end);
//! typed keys are written to it; a resize sets its window size.
//!
//! Its shell leads a session of its own, outside the reporter's process
//! group that the core signals, so every signal the core sends a terminal
//! job reaches its session's group and the terminal's foreground group too
//! ([`Terminals::signal`]), and the group a later kernel ends if this one
//! dies is the session's.

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::rc::Rc;

use nix::fcntl::{fcntl, FcntlArg, FdFlag, OFlag};
use nix::sys::signal::Signal;
use tokio::io::AsyncWriteExt;
use tokio::net::unix::pipe;
use tokio::sync::mpsc;

use super::error::KernelError;
use crate::laws::waiting::{Foreground, Seen};
use crate::protocol::kernel::{FromKernel, SizeAt, ToKernel};
use crate::protocol::tty::WindowSize;

/// A terminal just opened for a job.
pub struct Pty {
    /// The kernel's side.
    pub master: OwnedFd,
    /// The job's side, held by the kernel until the job's shell has opened
    /// it (a master whose slave was never open reads EIO at once).
    pub slave: OwnedFd,
    /// The slave's path, which the job's shell opens.
    pub path: String,
}

fn failed(what: &'static str) -> impl Fn(nix::Error) -> KernelError {
    move |e| KernelError::Process {
        what,
        source: e.into(),
    }
}

/// Open a terminal of `size`. Both ends are closed on exec (the job opens
/// the slave by its path); the master does not block.
pub fn open(size: WindowSize) -> Result<Pty, KernelError> {
    let winsize = nix::pty::Winsize {
        ws_row: size.rows,
        ws_col: size.cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    let pty = nix::pty::openpty(&winsize, None).map_err(failed("open a terminal"))?;
    for fd in [&pty.master, &pty.slave] {
        fcntl(fd, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC)).map_err(failed("open a terminal"))?;
    }
    fcntl(&pty.master, FcntlArg::F_SETFL(OFlag::O_NONBLOCK)).map_err(failed("open a terminal"))?;
    let link = format!("/proc/self/fd/{}", pty.slave.as_raw_fd());
    let path = std::fs::read_link(link)
        .map_err(|source| KernelError::Process {
            what: "name a terminal",
            source,
        })?
        .to_string_lossy()
        .into_owned();
    Ok(Pty {
        master: pty.master,
        slave: pty.slave,
        path,
    })
}

/// The master as the job's stdout reader: EIO on a read (every slave
/// closed) ends it as a FIFO's end does.
pub fn reader(master: &OwnedFd) -> Result<pipe::Receiver, KernelError> {
    let cannot = |source| KernelError::Process {
        what: "read a terminal",
        source,
    };
    pipe::Receiver::from_owned_fd_unchecked(master.try_clone().map_err(cannot)?).map_err(cannot)
}

/// Keys for a terminal, and where to say they are written (none: nobody
/// waits to hear it).
struct Keys {
    data: Vec<u8>,
    job: String,
    answer: Option<mpsc::UnboundedSender<Vec<u8>>>,
}

/// One terminal job's terminal.
struct Terminal {
    master: OwnedFd,
    /// The session its shell leads, once it has said it started.
    session: Option<u32>,
    /// The writer of its keys, in the order they came; started with the
    /// first keys.
    keys: Option<mpsc::UnboundedSender<Keys>>,
    /// Bytes of keys handed to the writer and not written yet: keys the
    /// program has not read (`laws::waiting`).
    unwritten: Rc<Cell<u64>>,
    /// The sizes it took, oldest first (at most [`SIZES_KEPT`]).
    sizes: Vec<SizeAt>,
}

/// The most sizes a terminal remembers: a rebuilt screen replays the
/// output's tail, over which a person resizes a window a few times; the
/// oldest go first.
pub const SIZES_KEPT: usize = 64;

/// The terminals of the kernel's terminal jobs, by job.
#[derive(Default)]
pub struct Terminals {
    by_job: HashMap<String, Terminal>,
}

impl Terminals {
    /// `job` runs on the terminal whose master is `master`, of `size`.
    pub fn add(&mut self, job: &str, master: OwnedFd, size: WindowSize) {
        let terminal = Terminal {
            master,
            session: None,
            keys: None,
            unwritten: Rc::default(),
            sizes: vec![SizeAt { at: 0, size }],
        };
        self.by_job.insert(job.to_string(), terminal);
    }

    /// `job`'s shell said it started: it leads its terminal's session now.
    /// Returns that session (its leader's pid, which is its group's id).
    pub fn started(&mut self, job: &str) -> Option<u32> {
        let terminal = self.by_job.get_mut(job)?;
        let session = nix::sys::termios::tcgetsid(terminal.master.as_fd()).ok()?;
        terminal.session = Some(session.as_raw() as u32);
        terminal.session
    }

    /// Send `signal` to `job`'s session group and to its terminal's
    /// foreground group (a program in it may have made a group of its own).
    pub fn signal(&self, job: &str, signal: Signal) {
        let Some(terminal) = self.by_job.get(job) else {
            return;
        };
        let foreground = nix::unistd::tcgetpgrp(terminal.master.as_fd()).ok();
        let foreground = foreground.map(|group| group.as_raw() as u32);
        for group in [terminal.session, foreground].into_iter().flatten() {
            if group > 1 {
                super::tree::signal_group(group, signal);
            }
        }
    }

    /// The size `job`'s terminal took last, if it has one.
    pub fn size(&self, job: &str) -> Option<WindowSize> {
        let terminal = self.by_job.get(job)?;
        terminal.sizes.last().map(|taken| taken.size)
    }

    /// Set `job`'s window size, taken by the worker's screen at spool
    /// offset `at` of its output; its program gets SIGWINCH.
    pub fn resize(&mut self, job: &str, size: WindowSize, at: u64) -> Result<(), String> {
        let terminal = self.by_job.get_mut(job).ok_or_else(|| no_terminal(job))?;
        let winsize = libc::winsize {
            ws_row: size.rows,
            ws_col: size.cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: TIOCSWINSZ reads one `winsize`, which lives across the
        // call; the fd is the master this book owns. nix has no safe
        // wrapper for it (its ioctl macros make unsafe functions).
        let rc = unsafe { libc::ioctl(terminal.master.as_raw_fd(), libc::TIOCSWINSZ, &winsize) };
        if rc == 0 {
            remember_size(&mut terminal.sizes, SizeAt { at, size });
            Ok(())
        } else {
            Err(format!(
                "cannot resize the terminal of {}: {}",
                words(job),
                std::io::Error::last_os_error()
            ))
        }
    }

    /// Write `data` to `job`'s terminal, after any keys before it; then
    /// send `Keyed` on `answer`, if any. An error is answered at once.
    pub fn keys(
        &mut self,
        job: &str,
        data: Vec<u8>,
        answer: Option<mpsc::UnboundedSender<Vec<u8>>>,
    ) {
        let Some(terminal) = self.by_job.get_mut(job) else {
            send_keyed(&answer, job, Some(no_terminal(job)));
            return;
        };
        if terminal.keys.is_none() {
            match terminal
                .master
                .try_clone()
                .map(pipe::Sender::from_owned_fd_unchecked)
            {
                Ok(Ok(writer)) => {
                    let (tx, rx) = mpsc::unbounded_channel();
                    let unwritten = terminal.unwritten.clone();
                    tokio::task::spawn_local(write_keys(writer, rx, unwritten));
                    terminal.keys = Some(tx);
                }
                Ok(Err(e)) | Err(e) => {
                    let why = format!("cannot write to the terminal of {}: {e}", words(job));
                    send_keyed(&answer, job, Some(why));
                    return;
                }
            }
        }
        let keys = Keys {
            data,
            job: job.to_string(),
            answer,
        };
        if let Some(writer) = &terminal.keys {
            let bytes = keys.data.len() as u64;
            terminal.unwritten.set(terminal.unwritten.get() + bytes);
            if let Err(refused) = writer.send(keys) {
                terminal.unwritten.set(terminal.unwritten.get() - bytes);
                let keys = refused.0;
                let why = format!("the terminal of {} is closed", words(job));
                send_keyed(&keys.answer, job, Some(why));
            }
        }
    }

    /// Whether `job`'s program is blocked reading its terminal, and the
    /// keys it has not read: those in the terminal's input queue and those
    /// not written to it yet.
    pub fn look(&self, job: &str) -> Seen {
        let Some(terminal) = self.by_job.get(job) else {
            return Seen {
                foreground: Foreground::Unknown,
                unread_key_bytes: 0,
            };
        };
        let seen = crate::host::tty_wait::look(terminal.master.as_fd());
        Seen {
            unread_key_bytes: seen.unread_key_bytes + terminal.unwritten.get(),
            ..seen
        }
    }

    /// The sizes each terminal took, by job, oldest first.
    pub fn sizes(&self) -> BTreeMap<String, Vec<SizeAt>> {
        let sizes = self.by_job.iter();
        sizes
            .map(|(job, terminal)| (job.clone(), terminal.sizes.clone()))
            .collect()
    }

    /// `job` is forgotten: its terminal closes once its reader is done.
    pub fn forget(&mut self, job: &str) {
        self.by_job.remove(job);
    }
}

/// Carry out a worker's `Keys` or `Resize` (any other request is not a
/// terminal's).
pub fn request(
    terminals: &mut Terminals,
    request: ToKernel,
    control: &mpsc::UnboundedSender<Vec<u8>>,
) {
    match request {
        ToKernel::Keys { job, data, quiet } => {
            let answer = (!quiet).then(|| control.clone());
            terminals.keys(&job, data, answer)
        }
        ToKernel::Resize { job, size, at } => {
            if let Err(message) = terminals.resize(&job, size, at) {
                if let Ok(frame) = crate::protocol::frame::encode(&FromKernel::Error { message }) {
                    let _ = control.send(frame);
                }
            }
        }
        _ => {}
    }
}

/// Add `size` to `sizes`: one taken at the same offset as the last
/// replaces it (no output was drawn at that one), the oldest goes past
/// [`SIZES_KEPT`].
fn remember_size(sizes: &mut Vec<SizeAt>, size: SizeAt) {
    match sizes.last_mut() {
        Some(last) if last.at >= size.at => *last = size,
        _ => sizes.push(size),
    }
    if sizes.len() > SIZES_KEPT {
        sizes.remove(0);
    }
}

/// A job as the user knows it ("run 2").
fn words(job: &str) -> String {
    super::jobs::job_in_words(job)
}

fn no_terminal(job: &str) -> String {
    let job = words(job);
    format!("{job} has no terminal (it was not started with --tty, or it has ended)")
}

fn send_keyed(answer: &Option<mpsc::UnboundedSender<Vec<u8>>>, job: &str, error: Option<String>) {
    let Some(answer) = answer else {
        if let Some(error) = error {
            tracing::warn!("{error}");
        }
        return;
    };
    let keyed = FromKernel::Keyed {
        job: job.to_string(),
        error,
    };
    if let Ok(frame) = crate::protocol::frame::encode(&keyed) {
        let _ = answer.send(frame);
    }
}

/// Write each job's keys in order; a full input queue waits for the
/// program to read (as a person's typing would).
async fn write_keys(
    mut writer: pipe::Sender,
    mut keys: mpsc::UnboundedReceiver<Keys>,
    unwritten: Rc<Cell<u64>>,
) {
    while let Some(Keys { data, job, answer }) = keys.recv().await {
        let written = writer.write_all(&data).await;
        unwritten.set(unwritten.get().saturating_sub(data.len() as u64));
        let error = written
            .err()
            .map(|e| format!("cannot write to the terminal of {}: {e}", words(&job)));
        send_keyed(&answer, &job, error);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn size_at(at: u64, cols: u16) -> SizeAt {
        let size = WindowSize { rows: 24, cols };
        SizeAt { at, size }
    }

    #[test]
    fn a_size_taken_where_no_output_came_since_the_last_replaces_it() {
        let mut sizes = vec![size_at(0, 80)];
        remember_size(&mut sizes, size_at(0, 90));
        remember_size(&mut sizes, size_at(7, 100));
        remember_size(&mut sizes, size_at(7, 110));
        remember_size(&mut sizes, size_at(9, 120));
        assert_eq!(sizes, [size_at(0, 90), size_at(7, 110), size_at(9, 120)]);
    }

    #[test]
    fn a_terminal_remembers_its_newest_sizes_only() {
        let mut sizes = vec![size_at(0, 80)];
        for at in 1..=SIZES_KEPT as u64 + 5 {
            remember_size(&mut sizes, size_at(at, 100));
        }
        assert_eq!(sizes.len(), SIZES_KEPT);
        assert_eq!(sizes.last(), Some(&size_at(SIZES_KEPT as u64 + 5, 100)));
        assert_eq!(sizes[0].at, 6);
    }
}
