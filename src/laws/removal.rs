//! Removal: whether `eukhe rm` removes a session now, and whether anything
//! may bring a removed session back.
//!
//! Not a law of the specification; it leans on two of them. A busy session
//! (its work set, [`super::work`], is not empty) is refused unless the
//! removal is forced, which cancels its work (its kernel ends every process
//! of the session). Whether it is busy is asked through the run gate
//! ([`super::idle_shutdown`]): a worker with no work closes its gate, so no
//! run starts between the answer and the stop.
//!
//! A removal is recorded before anything is stopped or deleted, and the
//! record is final: no busy evidence (revival), no live kernel, no
//! directory left by a removal cut short ever brings the session back
//! ([`may_bring_back`]).

use serde::{Deserialize, Serialize};

use super::idle_shutdown::{idle_shutdown_commits, QuiesceReply, ShutdownCommit};

/// What `rm` does with a session, once its worker answered (or did not).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RemovalVerdict {
    /// Idle (its gate is closed): stop it and delete it.
    Remove,
    /// Busy or silent, and forced: stop it with its kernel (every process
    /// of the session ends, so its work is cancelled) and delete it.
    CancelWorkAndRemove,
    /// Busy, or silent, and not forced: reopen its gate and refuse.
    RefuseBusy,
}

/// The verdict for a session whose worker was asked to quiesce at
/// `asked_at_ms` and replied `reply` (`None`: no worker runs and no kernel
/// lives, so nothing can be busy).
pub fn removal_verdict(
    asked_at_ms: u64,
    reply: Option<QuiesceReply>,
    force: bool,
) -> RemovalVerdict {
    let idle = match reply {
        None => true,
        Some(reply) => idle_shutdown_commits(asked_at_ms, &[reply]) == ShutdownCommit::StopWorkers,
    };
    match (idle, force) {
        (true, _) => RemovalVerdict::Remove,
        (false, true) => RemovalVerdict::CancelWorkAndRemove,
        (false, false) => RemovalVerdict::RefuseBusy,
    }
}

/// Whether a session may be launched, revived, resumed or listed: only if
/// it was never removed, whatever its busy evidence or leftover files say.
pub fn may_bring_back(removed: bool) -> bool {
    !removed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::laws::idle_shutdown::QuiesceAnswer;
    use crate::laws::timing::QUIESCE_ANSWER_MS;

    fn answered(answer: QuiesceAnswer, at_ms: u64) -> Option<QuiesceReply> {
        Some(QuiesceReply::Answered { answer, at_ms })
    }

    #[test]
    fn an_idle_session_is_removed_forced_or_not() {
        for force in [false, true] {
            assert_eq!(
                removal_verdict(10, answered(QuiesceAnswer::Quiesced, 10), force),
                RemovalVerdict::Remove
            );
            assert_eq!(removal_verdict(10, None, force), RemovalVerdict::Remove);
        }
    }

    #[test]
    fn a_busy_or_silent_session_is_refused_unless_forced() {
        for reply in [
            answered(QuiesceAnswer::Busy, 10),
            Some(QuiesceReply::Silent),
            // Quiesced too late: its gate may have reopened already.
            answered(QuiesceAnswer::Quiesced, 11 + QUIESCE_ANSWER_MS),
        ] {
            assert_eq!(
                removal_verdict(10, reply, false),
                RemovalVerdict::RefuseBusy
            );
            assert_eq!(
                removal_verdict(10, reply, true),
                RemovalVerdict::CancelWorkAndRemove
            );
        }
    }

    #[test]
    fn a_removed_session_never_comes_back() {
        assert!(!may_bring_back(true));
        assert!(may_bring_back(false));
    }
}
