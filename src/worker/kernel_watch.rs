//! Whether the kernel answers, without I/O. A kernel asked to start a job
//! answers at once; one that leaves a start unanswered for the kernel
//! answer deadline is stopped or wedged. The worker keeps serving (`log`,
//! `ls`, `cancel` never wait for the kernel) and says once, in the
//! transcript, what waits for it; once more when the kernel answers again.
//! Times are monotonic milliseconds passed in by the tick.

use crate::laws::timing::{duration_in_words, KERNEL_ANSWER_MS};

/// What the worker is to say about its kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KernelSilence {
    /// The kernel left the start of `job` unanswered for `for_ms`.
    Silent {
        /// The job's tag (`r3`, `b2`).
        job: String,
        /// How long it has been waiting.
        for_ms: u64,
    },
    /// The kernel answered again, `after_ms` after the start it left
    /// unanswered.
    AnswersAgain {
        /// How long it was silent.
        after_ms: u64,
    },
}

impl KernelSilence {
    /// The notice, in one line; `kernel_pid` names the process.
    pub fn words(&self, kernel_pid: Option<u32>) -> String {
        let kernel = match kernel_pid {
            Some(pid) => format!("the kernel (pid {pid})"),
            None => "the kernel".to_string(),
        };
        match self {
            KernelSilence::Silent { job, for_ms } => {
                let resume = match kernel_pid {
                    Some(pid) => format!(" (`kill -CONT {pid}` resumes a stopped one)"),
                    None => String::new(),
                };
                format!(
                    "{kernel} has not started {} for {}: it is stopped or wedged, and {} waits for it{resume}",
                    job_words(job),
                    duration_in_words(*for_ms / 1_000 * 1_000),
                    job_words(job),
                )
            }
            KernelSilence::AnswersAgain { after_ms } => format!(
                "{kernel} answers again after {}",
                duration_in_words(*after_ms / 1_000 * 1_000)
            ),
        }
    }
}

/// A job's tag as the transcript names its input: `r3` is run 3, `b2` (or
/// `b2-...`) bash 2.
fn job_words(job: &str) -> String {
    let number: String = job
        .chars()
        .skip(1)
        .take_while(char::is_ascii_digit)
        .collect();
    match (job.chars().next(), number.is_empty()) {
        (Some('r'), false) => format!("run {number}"),
        (Some('b'), false) => format!("bash {number}"),
        _ => format!("job {job}"),
    }
}

/// The watch's books.
#[derive(Debug, Default)]
pub struct KernelWatch {
    /// The oldest start not answered yet: its job and when it was asked.
    waiting: Option<(String, u64)>,
    /// Whether that silence was told.
    told: bool,
}

impl KernelWatch {
    /// The worker asked the kernel to start `job` at `now_ms`.
    pub fn asked(&mut self, job: &str, now_ms: u64) {
        self.waiting
            .get_or_insert_with(|| (job.to_string(), now_ms));
    }

    /// A message came from the kernel at `now_ms`: it lives and answers.
    pub fn heard(&mut self, now_ms: u64) -> Option<KernelSilence> {
        let (_, since) = self.waiting.take()?;
        std::mem::take(&mut self.told).then(|| KernelSilence::AnswersAgain {
            after_ms: now_ms.saturating_sub(since),
        })
    }

    /// The link ended: nothing is waited for on it any more.
    pub fn link_ended(&mut self) {
        *self = KernelWatch::default();
    }

    /// When the silence is next to be told (none: nothing waits, or it
    /// was told).
    pub fn poll_timeout(&self) -> Option<u64> {
        match (&self.waiting, self.told) {
            (Some((_, since)), false) => Some(since.saturating_add(KERNEL_ANSWER_MS)),
            _ => None,
        }
    }

    /// At `now_ms`: the silence to tell, once.
    pub fn tick(&mut self, now_ms: u64) -> Option<KernelSilence> {
        let (job, since) = self.waiting.as_ref()?;
        let for_ms = now_ms.saturating_sub(*since);
        if self.told || for_ms < KERNEL_ANSWER_MS {
            return None;
        }
        self.told = true;
        Some(KernelSilence::Silent {
            job: job.clone(),
            for_ms,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_start_answered_in_time_says_nothing() {
        let mut watch = KernelWatch::default();
        watch.asked("r1", 1_000);
        assert_eq!(watch.tick(1_000 + KERNEL_ANSWER_MS - 1), None);
        assert_eq!(watch.heard(1_000 + KERNEL_ANSWER_MS - 1), None);
        assert_eq!(watch.tick(1_000 + 10 * KERNEL_ANSWER_MS), None);
    }

    #[test]
    fn a_silent_kernel_is_told_once_and_its_return_once() {
        let mut watch = KernelWatch::default();
        watch.asked("b2", 0);
        watch.asked("r3", 100);
        assert_eq!(watch.poll_timeout(), Some(KERNEL_ANSWER_MS));
        assert_eq!(watch.tick(KERNEL_ANSWER_MS - 1), None, "not before");
        let silent = watch.tick(KERNEL_ANSWER_MS).expect("told at the deadline");
        assert_eq!(watch.poll_timeout(), None, "told: no time needed");
        assert_eq!(
            silent,
            KernelSilence::Silent {
                job: "b2".into(),
                for_ms: KERNEL_ANSWER_MS
            }
        );
        assert_eq!(
            silent.words(Some(42)),
            "the kernel (pid 42) has not started bash 2 for 5 s: it is stopped or wedged, and bash 2 waits for it (`kill -CONT 42` resumes a stopped one)"
        );
        assert_eq!(watch.tick(KERNEL_ANSWER_MS * 3), None, "once");
        let again = watch.heard(37_400).expect("its return is told");
        assert_eq!(
            again.words(Some(42)),
            "the kernel (pid 42) answers again after 37 s"
        );
        assert_eq!(watch.heard(38_000), None, "once");
    }

    #[test]
    fn an_ended_link_forgets_what_it_waited_for() {
        let mut watch = KernelWatch::default();
        watch.asked("r1", 0);
        watch.link_ended();
        assert_eq!(watch.tick(KERNEL_ANSWER_MS * 2), None);
    }

    #[test]
    fn job_tags_read_as_inputs() {
        assert_eq!(job_words("r12"), "run 12");
        assert_eq!(job_words("b3-77-1"), "bash 3");
        assert_eq!(job_words("x"), "job x");
    }
}
