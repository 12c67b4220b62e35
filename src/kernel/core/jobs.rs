//! The kernel's per-job books, without I/O: each job's process group, its
//! end, its output streams still open, the bytes its readers hold back, a
//! cancel, and output the spool could not keep. The shell (`jobs`) keeps
//! what is I/O (the spool file, the FIFOs, the placeholders) and asks these
//! books what a report, a close or an end means.

use std::collections::BTreeMap;

use super::ends::{forgettable, on_close, OnClose};
use crate::laws::work::WorkKind;
use crate::protocol::entry::LostOutput;
use crate::protocol::kernel::{JobEnd, JobState};
use crate::session::entry::Stream;

/// One job's books.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobBook {
    /// The shell process that reports its end (its process group).
    pub group: Option<u32>,
    pub end: Option<JobEnd>,
    /// Output streams still open (0: settled).
    pub open_streams: u8,
    /// Bytes a reader holds back (a UTF-8 character cut at the end of a
    /// read), per stream.
    pub held: [usize; 2],
    pub cancelled: bool,
    /// Output the spool could not keep and no end has told yet.
    pub lost: Option<LostOutput>,
    /// Its end has been told (`end_to_tell`): output lost from now on is
    /// what the job left running wrote.
    pub told: bool,
}

/// The books of every job the kernel has.
#[derive(Debug, Default)]
pub struct JobBooks {
    jobs: BTreeMap<String, JobBook>,
}

impl JobBooks {
    /// `job` was handed to a shell: both its streams are open.
    pub fn started(&mut self, job: &str) {
        let book = JobBook {
            open_streams: 2,
            ..JobBook::default()
        };
        self.jobs.insert(job.to_string(), book);
    }

    /// `job` was accepted but could not start: it ended with `end`, and
    /// has no output to wait for.
    pub fn not_started(&mut self, job: &str, end: JobEnd) {
        let book = JobBook {
            end: Some(end),
            ..JobBook::default()
        };
        self.jobs.insert(job.to_string(), book);
    }

    pub fn get(&self, job: &str) -> Option<&JobBook> {
        self.jobs.get(job)
    }

    /// Whether `job` is here and has not ended.
    pub fn running(&self, job: &str) -> bool {
        self.jobs.get(job).is_some_and(|b| b.end.is_none())
    }

    /// `job`'s shell said its process group: whether its end came first
    /// (it ended as its output closed).
    pub fn group_started(&mut self, job: &str, group: u32) -> Option<bool> {
        let book = self.jobs.get_mut(job)?;
        book.group = Some(group);
        Some(book.end.is_some())
    }

    /// The running job whose process group `group` leads.
    pub fn job_of_group(&self, group: u32) -> Option<String> {
        self.jobs
            .iter()
            .find(|(_, b)| b.group == Some(group) && b.end.is_none())
            .map(|(job, _)| job.clone())
    }

    /// Cancel the running `job`: its process group, if its shell said it.
    /// `None`: no such job runs.
    pub fn cancel(&mut self, job: &str) -> Option<Option<u32>> {
        let book = self.jobs.get_mut(job).filter(|b| b.end.is_none())?;
        book.cancelled = true;
        Some(book.group)
    }

    /// The process group of running `job` (`Some(None)`: not said yet).
    pub fn running_group(&self, job: &str) -> Option<Option<u32>> {
        let book = self.jobs.get(job).filter(|b| b.end.is_none())?;
        Some(book.group)
    }

    /// How a worker sees `job`, with the end the spool keeps (`kept`).
    pub fn state(&self, job: &str, kept: Option<JobEnd>) -> JobState {
        match (self.jobs.get(job), kept) {
            (Some(live), _) if live.end.is_none() || live.open_streams > 0 => JobState::Running,
            (_, Some(end)) => JobState::Ended { end },
            (Some(_), None) => JobState::Running,
            (None, None) => JobState::Lost,
        }
    }

    /// The work the jobs are, as the work law reads it.
    pub fn work(&self) -> impl Iterator<Item = WorkKind> + '_ {
        self.jobs
            .values()
            .filter_map(|b| match (&b.end, b.open_streams) {
                (None, _) => Some(WorkKind::Run),
                (Some(_), 1..) => Some(WorkKind::UnsettledChild),
                (Some(_), 0) => None,
            })
    }

    /// Output of `job` the spool could not keep.
    pub fn output_lost(&mut self, job: &str, more: LostOutput) {
        if let Some(book) = self.jobs.get_mut(job) {
            LostOutput::add(&mut book.lost, more);
        }
    }

    /// A reader of `job` holds `bytes` of `stream` back.
    pub fn holding(&mut self, job: &str, stream: Stream, bytes: usize) {
        if let Some(book) = self.jobs.get_mut(job) {
            book.held[stream as usize] = bytes;
        }
    }

    /// One of `job`'s output streams closed: what that leads to.
    pub fn stream_closed(&mut self, job: &str) -> Option<OnClose> {
        let book = self.jobs.get_mut(job)?;
        book.open_streams = book.open_streams.saturating_sub(1);
        Some(on_close(book.open_streams, book.end.is_some()))
    }

    /// Every stream of ended `job` closed: its end, now settled, and the
    /// output lost after its end was told (what it left running wrote).
    /// Output lost before the end is told is the end's: its readers may
    /// settle ahead of the telling with the last bytes its shell wrote.
    pub fn settle(&mut self, job: &str) -> Option<(JobEnd, Option<LostOutput>)> {
        let book = self.jobs.get_mut(job)?;
        let end = book.end.as_mut()?;
        end.settled = true;
        let lost = book.lost.take();
        let after_told = match (book.told, lost) {
            (true, lost) => lost,
            (false, Some(lost)) => {
                LostOutput::add(&mut end.lost_output, lost);
                None
            }
            (false, None) => None,
        };
        Some((end.clone(), after_told))
    }

    /// `job` ends with `status`, `signal` and `notice`: its end, unless it
    /// had one. Whether it was cancelled, has settled and lost output
    /// comes from its books.
    pub fn end(
        &mut self,
        job: &str,
        status: i32,
        signal: Option<i32>,
        notice: Option<String>,
    ) -> Option<JobEnd> {
        let book = self.jobs.get_mut(job).filter(|b| b.end.is_none())?;
        let end = JobEnd {
            status,
            signal,
            cancelled: book.cancelled,
            notice,
            settled: book.open_streams == 0,
            lost_output: book.lost.take(),
        };
        book.end = Some(end.clone());
        Some(end)
    }

    /// `job`'s end as it is told, once the output its shell wrote before
    /// it ended is read, counting the output lost since its end; whether
    /// that changed the end (to be kept again). `None` while it runs.
    pub fn end_to_tell(&mut self, job: &str) -> Option<(JobEnd, bool)> {
        let book = self.jobs.get_mut(job)?;
        let end = book.end.as_mut()?;
        book.told = true;
        let more = book.lost.take();
        let changed = more.is_some();
        if let Some(more) = more {
            LostOutput::add(&mut end.lost_output, more);
        }
        Some((end.clone(), changed))
    }

    /// Whether `job` is not here or has ended.
    pub fn ended_or_gone(&self, job: &str) -> bool {
        self.jobs.get(job).is_none_or(|b| b.end.is_some())
    }

    /// Forget `job` if it is done (ended, its output all read); whether it
    /// is gone from the books.
    pub fn forget(&mut self, job: &str) -> bool {
        let done = self
            .jobs
            .get(job)
            .is_none_or(|b| forgettable(b.end.is_some(), b.open_streams));
        if done {
            self.jobs.remove(job);
        }
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lost(bytes: u64) -> LostOutput {
        LostOutput {
            bytes,
            error: "No space left on device".into(),
        }
    }

    #[test]
    fn a_job_runs_until_its_end_and_is_work_until_its_output_settles() {
        let mut books = JobBooks::default();
        books.started("r1");
        assert_eq!(books.state("r1", None), JobState::Running);
        assert_eq!(books.work().collect::<Vec<_>>(), [WorkKind::Run]);
        assert_eq!(books.running_group("r1"), Some(None));
        assert_eq!(books.group_started("r1", 7), Some(false));
        assert_eq!(books.job_of_group(7).as_deref(), Some("r1"));
        assert_eq!(books.stream_closed("r1"), Some(OnClose::Wait));
        let end = books.end("r1", 0, None, None).unwrap();
        assert!(!end.settled, "a stream is still open");
        assert_eq!(books.end("r1", 1, None, None), None, "ended once");
        assert_eq!(books.job_of_group(7), None);
        assert_eq!(books.work().collect::<Vec<_>>(), [WorkKind::UnsettledChild]);
        assert!(!books.forget("r1"), "its output is not all read");
        assert_eq!(books.stream_closed("r1"), Some(OnClose::Settle));
        let (settled, _) = books.settle("r1").unwrap();
        assert!(settled.settled);
        assert_eq!(
            books.state("r1", Some(settled.clone())),
            JobState::Ended { end: settled }
        );
        assert_eq!(books.work().count(), 0);
        assert!(books.forget("r1"));
        assert_eq!(books.state("r1", None), JobState::Lost);
    }

    #[test]
    fn lost_output_is_told_once_with_the_end_or_after_it_at_the_settle() {
        let mut books = JobBooks::default();
        books.started("b1");
        books.output_lost("b1", lost(10));
        books.group_started("b1", 9);
        assert_eq!(books.cancel("b1"), Some(Some(9)));
        let end = books.end("b1", 130, Some(2), None).unwrap();
        assert!(end.cancelled);
        assert_eq!(end.lost_output, Some(lost(10)));
        // Lost between the end and its telling: added to the end told.
        books.output_lost("b1", lost(5));
        let (told, changed) = books.end_to_tell("b1").unwrap();
        assert!(changed);
        assert_eq!(told.lost_output.map(|l| l.bytes), Some(15));
        assert_eq!(books.end_to_tell("b1").map(|(_, c)| c), Some(false));
        // Lost after the end was told: said at the settle.
        books.output_lost("b1", lost(3));
        books.stream_closed("b1");
        books.stream_closed("b1");
        assert_eq!(books.settle("b1").unwrap().1, Some(lost(3)));
        assert_eq!(books.cancel("b1"), None, "an ended job is not cancelled");
    }

    #[test]
    fn output_lost_before_the_end_is_told_is_the_ends_even_once_settled() {
        let mut books = JobBooks::default();
        books.started("b2");
        books.end("b2", 0, None, None).unwrap();
        // The last bytes its shell wrote, read and lost after its end was
        // reported; both readers close before the end is told.
        books.output_lost("b2", lost(11));
        books.stream_closed("b2");
        books.stream_closed("b2");
        let (settled, after) = books.settle("b2").unwrap();
        assert_eq!(after, None, "told as output of something left running");
        assert_eq!(settled.lost_output, Some(lost(11)), "the kept end lacks it");
        let (told, changed) = books.end_to_tell("b2").unwrap();
        assert_eq!(told.lost_output, Some(lost(11)));
        assert!(told.settled);
        assert!(!changed, "kept already, with the settle");
    }

    #[test]
    fn a_job_that_could_not_start_has_ended_settled() {
        let mut books = JobBooks::default();
        let end = JobEnd {
            status: 126,
            signal: None,
            cancelled: false,
            notice: Some("run 1 did not start".into()),
            settled: true,
            lost_output: None,
        };
        books.not_started("r1", end.clone());
        assert!(!books.running("r1"));
        assert_eq!(
            books.state("r1", Some(end.clone())),
            JobState::Ended { end }
        );
        assert!(books.forget("r1"));
    }
}
