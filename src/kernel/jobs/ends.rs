//! A job's end: its output streams closing, its state capture merged into
//! the snapshot, its end recorded and told, the job forgotten.

use std::rc::Rc;

use super::{job_in_words, keeps_end, Kernel};
use crate::kernel::spool::{JobEnd, LostOutput};
use crate::session::entry::Stream;
use crate::session::snapshot::{parse_capture, Capture};
use crate::session::SessionError;

impl Kernel {
    /// `job`'s end as it is told, once the output its shell wrote before
    /// it ended is read: counting the output lost since [`Kernel::ended`]
    /// (that last output among it). `None` while it runs.
    pub fn end_to_tell(&mut self, job: &str) -> Option<JobEnd> {
        let j = self.jobs.get_mut(job)?;
        let end = j.end.as_mut()?;
        if let Some(more) = j.lost.take() {
            LostOutput::add(&mut end.lost_output, more);
            if keeps_end(job) {
                if let Err(e) = self.spool.set_end(job, end) {
                    tracing::warn!("{job}'s end could not be kept again: {e}");
                }
            }
        }
        Some(end.clone())
    }

    /// Whether output of `job` waits in its FIFOs, not yet read into the
    /// spool (its shell ended a moment before the reader got to it).
    pub fn unread_output(&self, job: &str) -> bool {
        let Some(j) = self.jobs.get(job) else {
            return false;
        };
        let held = j
            .fifos
            .iter()
            .zip(j.held)
            .any(|(fd, held)| fd.is_some() && held > 0);
        held || j.fifos.iter().flatten().any(|&fd| {
            let mut waiting: libc::c_int = 0;
            // SAFETY: FIONREAD writes one int; `fd` is a FIFO read end its
            // reader task still holds (cleared before the task drops it).
            // No safe crate covers it: nix's ioctl macros generate unsafe
            // functions, and rustix's safe `ioctl_fionread` takes a
            // `BorrowedFd`, which only an unsafe `borrow_raw` makes from
            // the raw fd the reader task's `pipe::Receiver` owns.
            let rc = unsafe { libc::ioctl(fd, libc::FIONREAD, &mut waiting) };
            rc == 0 && waiting > 0
        })
    }

    /// Whether a stream of `job` has no writer left while its reader has
    /// not closed it yet: the job has settled, and its reader is about to
    /// say so. Its end waits for that, so the end is told settled and a
    /// command that returned leaves no unsettled child behind.
    pub fn settling(&self, job: &str) -> bool {
        let Some(j) = self.jobs.get(job) else {
            return false;
        };
        j.fifos.iter().flatten().any(|&fd| {
            let mut polled = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: `poll` reads and writes the one `pollfd` given, and
            // `fd` is a FIFO read end its reader task still holds (cleared
            // before the task drops it). A zero timeout never blocks. The
            // safe wrappers need a `BorrowedFd`, which only an unsafe
            // `borrow_raw` makes from the raw fd the reader task owns.
            let rc = unsafe { libc::poll(&mut polled, 1, 0) };
            rc == 1 && polled.revents & libc::POLLHUP != 0
        })
    }

    /// A reader holds `bytes` of `job`'s `stream` back.
    pub fn holding(&mut self, job: &str, stream: Stream, bytes: usize) {
        if let Some(j) = self.jobs.get_mut(job) {
            j.held[stream as usize] = bytes;
        }
    }

    /// One of `job`'s output streams closed.
    pub fn stream_closed(&mut self, job: &str, stream: Stream) {
        let Some(j) = self.jobs.get_mut(job) else {
            return;
        };
        j.fifos[stream as usize] = None;
        j.open_streams = j.open_streams.saturating_sub(1);
        if j.open_streams == 0 && j.end.is_none() {
            // Ended settled, or still running (its command closed them).
            self.end_on_closed_output(job);
            self.bump();
            return;
        }
        if j.open_streams == 0 {
            if let Some(end) = &mut j.end {
                // Its end told what was lost before it; this is what
                // processes it left running wrote after.
                if let Some(lost) = j.lost.take() {
                    self.notices.push(format!(
                        "{} bytes of output that {} left running wrote after it ended could not be kept: {}",
                        lost.bytes,
                        job_in_words(job),
                        lost.error
                    ));
                }
                end.settled = true;
                let end = end.clone();
                if keeps_end(job) {
                    let _ = self.spool.set_end(job, &end);
                }
                self.forget_scratch(job);
            }
        }
        self.bump();
    }

    /// `job`'s shell ended with `status`: keep its changes to the shell
    /// state, and record its end.
    pub fn ended(&mut self, job: &str, status: i32) {
        let captured = self.take_state_capture(job);
        let Some(j) = self.jobs.get(job) else {
            return;
        };
        let parsed = captured.map(|bytes| parse_capture(&bytes, &j.started_from));
        self.ended_with(job, status, parsed);
    }

    /// Every writer of `job`'s output has closed before its shell's end
    /// was reported. When its shell closed them itself, after a whole
    /// capture (whose last word is the status) and with no job of its own
    /// left, the run is over: it ends now, not after that shell's exit and
    /// its reporter's word (which then only counts what the run left
    /// running). Otherwise its command closed them, and the end waits.
    fn end_on_closed_output(&mut self, job: &str) {
        let path = self.scratch(job, "state");
        let (Some(j), Ok(bytes)) = (self.jobs.get(job), std::fs::read(&path)) else {
            return;
        };
        let Ok(capture) = parse_capture(&bytes, &j.started_from) else {
            return;
        };
        if let (Some(status), false) = (capture.status, capture.has_jobs) {
            if let Some(group) = j.group {
                self.core.ended_before_reporter(group);
            }
            let _ = std::fs::remove_file(&path);
            self.ended_with(job, status, Some(Ok(capture)));
        }
    }

    /// Whether `group`'s reporter comes after its run ended as its output
    /// closed (not a job shell of a dropped template, which took no job).
    pub fn reporter_after_end(&mut self, group: u32) -> bool {
        self.core.reporter_after_end(group)
    }

    /// Record `job`'s end with `status`, keeping the changes of its
    /// capture (`None`: its shell left none).
    fn ended_with(
        &mut self,
        job: &str,
        status: i32,
        parsed: Option<Result<Capture, SessionError>>,
    ) {
        let Some(j) = self.jobs.get_mut(job) else {
            return;
        };
        if j.end.is_some() {
            return;
        }
        j.placeholders.clear();
        self.core.job_ended(job, crate::clock::mono_ms());
        let (notice, signal) = match parsed {
            // The command did not run: the state stands.
            Some(Ok(capture)) if capture.not_run => (capture.lost_cwd.map(lost_cwd_notice), None),
            Some(Ok(capture)) => {
                let changes = j.started_from.changes_to(&capture.snapshot);
                let mut notice = None;
                self.first_unmerged = false;
                if self.snapshot.is_changed_by(&changes) {
                    Rc::make_mut(&mut self.snapshot).apply(&changes);
                    self.version += 1;
                    if let Err(e) = self.snapshot.save(&self.files.snapshot()) {
                        notice = Some(format!("the shell state could not be saved: {e}"));
                    }
                }
                if !capture.dropped.is_empty() {
                    notice = Some(format!(
                        "not kept: function {} (eukhe's shell code needs that builtin)",
                        capture.dropped.join(", ")
                    ));
                }
                (notice, None)
            }
            Some(Err(e)) => {
                // The job's shell writes its capture on the state disk.
                let full = crate::session::store::disk_space(&self.files.scratch())
                    .is_some_and(|(free, _)| free == 0);
                let why = if full {
                    " (the state disk is full)"
                } else {
                    ""
                };
                (Some(format!("{e}{why}")), None)
            }
            None => end_without_capture(status, j.cancelled),
        };
        let end = JobEnd {
            status,
            signal,
            cancelled: j.cancelled,
            notice,
            settled: j.open_streams == 0,
            lost_output: j.lost.take(),
        };
        j.end = Some(end.clone());
        self.record_end(job, &end);
        self.remove_retired_late();
    }

    /// Read `job`'s state capture, if its shell left one, and remove its files.
    fn take_state_capture(&self, job: &str) -> Option<Vec<u8>> {
        let capture_path = self.scratch(job, "state");
        let captured = std::fs::read(&capture_path).ok();
        let _ = std::fs::remove_file(&capture_path);
        captured
    }

    /// Keep `job`'s `end` (on disk for a run; its scratch goes once settled), wake followers.
    fn record_end(&mut self, job: &str, end: &JobEnd) {
        if keeps_end(job) {
            if let Err(e) = self.spool.set_end(job, end) {
                self.notices
                    .push(format!("the end of {job} could not be kept: {e}"));
            }
        }
        if end.settled {
            self.forget_scratch(job);
        }
        self.bump();
    }

    fn forget_scratch(&self, job: &str) {
        for what in ["restore", "late", "out", "err"] {
            let _ = std::fs::remove_file(self.scratch(job, what));
        }
    }

    /// Every scratch file of `job`, its state capture too.
    pub(super) fn remove_scratch(&self, job: &str) {
        self.forget_scratch(job);
        let _ = std::fs::remove_file(self.scratch(job, "state"));
    }

    /// Whether `job` has ended (or is not this kernel's).
    pub fn job_ended(&self, job: &str) -> bool {
        self.jobs.get(job).is_none_or(|j| j.end.is_some())
    }

    /// The worker has stored `job`: drop it from the books and the spool.
    pub fn forget(&mut self, job: &str) {
        let done = match self.jobs.get(job) {
            Some(j) => j.end.is_some() && j.open_streams == 0,
            None => true,
        };
        if done {
            self.jobs.remove(job);
            self.spool.forget(job);
        }
    }
}

/// The notice and signal of a job whose shell left no state capture (status 128+N: signal N).
fn end_without_capture(status: i32, cancelled: bool) -> (Option<String>, Option<i32>) {
    let mut notice = None;
    let mut signal = None;
    if status > 128 && status < 128 + 65 {
        signal = Some(status - 128);
    }
    if !cancelled && signal.is_none() {
        notice = Some(
            "the command ended its shell (exit, exec, a failed `set -e` or `${x:?}`): \
             the shell state is as it was before it"
                .to_string(),
        );
    }
    (notice, signal)
}

/// What a run that could not enter the session's directory says.
fn lost_cwd_notice(cwd: String) -> String {
    let what = if std::path::Path::new(&cwd).exists() {
        "cannot be entered"
    } else {
        "no longer exists"
    };
    format!(
        "the command did not run: the session's directory {cwd} {what}; \
         make it again, or start another session (`eukhe new --cwd DIR`)"
    )
}
