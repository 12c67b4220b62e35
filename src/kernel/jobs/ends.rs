//! A job's end: its output streams closing, its state capture merged into
//! the snapshot, its end recorded and told, the job forgotten.

use std::rc::Rc;

use super::{job_in_words, keeps_end, Kernel};
use crate::kernel::core::ends::{ends_at_close, plan_end, Captured, EndNotice, OnClose};
use crate::kernel::spool::JobEnd;
use crate::laws::limits::{oom_notice, Max};
use crate::session::entry::Stream;
use crate::session::snapshot::{parse_capture, Capture};
use crate::session::store::{read_json, SessionMeta};
use crate::session::SessionError;

impl Kernel {
    /// `job`'s end as it is told, once the output its shell wrote before
    /// it ended is read: counting the output lost since [`Kernel::ended`]
    /// (that last output among it). `None` while it runs.
    pub fn end_to_tell(&mut self, job: &str) -> Option<JobEnd> {
        let (end, changed) = self.books.end_to_tell(job)?;
        if changed && keeps_end(job) {
            if let Err(e) = self.spool.set_end(job, &end) {
                tracing::warn!("{job}'s end could not be kept again: {e}");
            }
        }
        Some(end)
    }

    /// Whether output of `job` waits in its FIFOs, not yet read into the
    /// spool (its shell ended a moment before the reader got to it).
    pub fn unread_output(&self, job: &str) -> bool {
        let Some(j) = self.jobs.get(job) else {
            return false;
        };
        let held_back = self.books.get(job).map_or([0, 0], |b| b.held);
        let held = j
            .fifos
            .iter()
            .zip(held_back)
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
        self.books.holding(job, stream, bytes);
    }

    /// One of `job`'s output streams closed at `now`.
    pub fn stream_closed(&mut self, job: &str, stream: Stream, now: u64) {
        let Some(j) = self.jobs.get_mut(job) else {
            return;
        };
        j.fifos[stream as usize] = None;
        match self.books.stream_closed(job) {
            // Ended settled, or still running (its command closed them).
            Some(OnClose::LookForEnd) => self.end_on_closed_output(job, now),
            Some(OnClose::Settle) => self.settle(job),
            Some(OnClose::Wait) | None => {}
        }
        self.bump();
    }

    /// Every output stream of ended `job` closed: its end is settled.
    fn settle(&mut self, job: &str) {
        let Some((end, lost)) = self.books.settle(job) else {
            return;
        };
        // Its end told what was lost before it; this is what processes it
        // left running wrote after.
        if let Some(lost) = lost {
            self.notices.push(format!(
                "{} bytes of output that {} left running wrote after it ended could not be kept: {}",
                lost.bytes,
                job_in_words(job),
                lost.error
            ));
        }
        if keeps_end(job) {
            let _ = self.spool.set_end(job, &end);
        }
        self.forget_scratch(job);
    }

    /// `job`'s shell ended with `status` at `now`: keep its changes to the
    /// shell state, and record its end.
    pub fn ended(&mut self, job: &str, status: i32, now: u64) {
        let captured = self.take_state_capture(job);
        let Some(j) = self.jobs.get(job) else {
            return;
        };
        let parsed = captured.map(|bytes| parse_capture(&bytes, &j.started_from));
        self.ended_with(job, status, parsed, now);
    }

    /// Every writer of `job`'s output has closed before its shell's end
    /// was reported. When its shell closed them itself, after a whole
    /// capture (whose last word is the status) and with no job of its own
    /// left, the run is over: it ends now, not after that shell's exit and
    /// its reporter's word (which then only counts what the run left
    /// running). Otherwise its command closed them, and the end waits.
    fn end_on_closed_output(&mut self, job: &str, now: u64) {
        let path = self.scratch(job, "state");
        let (Some(j), Ok(bytes)) = (self.jobs.get(job), std::fs::read(&path)) else {
            return;
        };
        let Ok(capture) = parse_capture(&bytes, &j.started_from) else {
            return;
        };
        if let Some(status) = ends_at_close(&capture) {
            if let Some(group) = self.books.get(job).and_then(|b| b.group) {
                self.core.ended_before_reporter(group);
            }
            let _ = std::fs::remove_file(&path);
            self.ended_with(job, status, Some(Ok(capture)), now);
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
        now: u64,
    ) {
        self.shell_ended(job);
        let Some(j) = self.jobs.get_mut(job) else {
            return;
        };
        if !self.books.running(job) {
            return;
        }
        j.placeholders.clear();
        let oom_kills_at_start = j.oom_kills_at_start;
        self.core.job_ended(job, now);
        let cancelled = self.books.get(job).is_some_and(|b| b.cancelled);
        let plan = plan_end(Captured::from(&parsed), status, cancelled);
        let mut not_saved = None;
        if let (true, Some(Ok(capture))) = (plan.merge, &parsed) {
            let changes = j.started_from.changes_to(&capture.snapshot);
            self.first_unmerged = false;
            if self.snapshot.is_changed_by(&changes) {
                Rc::make_mut(&mut self.snapshot).apply(&changes);
                self.templates.book.snapshot_changed();
                if let Err(e) = self.snapshot.save(&self.files.snapshot()) {
                    not_saved = Some(format!("the shell state could not be saved: {e}"));
                }
            }
        }
        // What the run left unkept says more than a failed save.
        let notice = plan
            .notice
            .map(|n| self.notice_text(n, &parsed))
            .or(not_saved);
        let sigkill = libc::SIGKILL;
        let killed = plan.signal == Some(sigkill) || status == 128 + sigkill;
        let notice = match (
            killed
                .then(|| self.oom_notice(job, oom_kills_at_start))
                .flatten(),
            notice,
        ) {
            (Some(oom), Some(other)) => Some(format!("{oom}; {other}")),
            (oom, other) => oom.or(other),
        };
        let Some(end) = self.books.end(job, status, plan.signal, notice) else {
            return;
        };
        self.record_end(job, &end);
        self.remove_retired_late();
    }

    /// The notice of `job`, killed by SIGKILL, if its kernel's cgroup
    /// counted an OOM kill since it started (`laws::limits::oom_notice`).
    fn oom_notice(&self, job: &str, oom_kills_at_start: u64) -> Option<String> {
        let now = crate::host::cgroup::own_oom_kills();
        if now <= oom_kills_at_start {
            return None;
        }
        // The session's own limit, else the one its cgroup was given.
        let meta = read_json::<SessionMeta>(&self.files.meta()).ok().flatten();
        let memory_max = meta
            .and_then(|m| m.limits.memory_max)
            .or(crate::host::cgroup::own_memory_limit().map(Max::Value));
        oom_notice(job, true, oom_kills_at_start, now, memory_max)
    }

    /// The words of an end's `notice`, for `parsed`, the capture it is about.
    fn notice_text(
        &self,
        notice: EndNotice,
        parsed: &Option<Result<Capture, SessionError>>,
    ) -> String {
        match notice {
            EndNotice::LostCwd(cwd) => lost_cwd_notice(cwd),
            EndNotice::NotKept(functions) => format!(
                "not kept: function {} (eukhe's shell code needs that builtin)",
                functions.join(", ")
            ),
            EndNotice::Unreadable => {
                // The job's shell writes its capture on the state disk.
                let full = crate::session::store::disk_space(&self.files.scratch())
                    .is_some_and(|(free, _)| free == 0);
                let why = if full {
                    " (the state disk is full)"
                } else {
                    ""
                };
                let error = match parsed {
                    Some(Err(e)) => e.to_string(),
                    _ => "the state capture cannot be read".to_string(),
                };
                format!("{error}{why}")
            }
            EndNotice::EndedItsShell => {
                "the command ended its shell (exit, exec, a failed `set -e` or `${x:?}`): \
                 the shell state is as it was before it"
                    .to_string()
            }
        }
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
        self.remove_shell_files(job);
        self.forget_scratch(job);
        let _ = std::fs::remove_file(self.scratch(job, "state"));
    }

    /// Whether `job` has ended (or is not this kernel's).
    pub fn job_ended(&self, job: &str) -> bool {
        self.books.ended_or_gone(job)
    }

    /// The worker has stored `job`: drop it from the books and the spool.
    pub fn forget(&mut self, job: &str) {
        if self.books.forget(job) {
            self.jobs.remove(job);
            self.spool.forget(job);
        }
    }
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
