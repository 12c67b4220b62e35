//! The decisions about a run's end, without I/O: what the close of its
//! last output stream does, whether a capture read then ends the run at
//! once, and what its end keeps of its state capture and tells. The shell
//! reads the capture, saves the snapshot and writes the spool as told.

use crate::session::snapshot::Capture;

/// What a job's shell left of its state capture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Captured<'a> {
    /// No capture: its shell ended before it wrote one.
    Nothing,
    /// A capture that cannot be read.
    Unreadable,
    /// A whole capture.
    Whole(&'a Capture),
}

impl<'a, E> From<&'a Option<Result<Capture, E>>> for Captured<'a> {
    fn from(parsed: &'a Option<Result<Capture, E>>) -> Self {
        match parsed {
            None => Captured::Nothing,
            Some(Err(_)) => Captured::Unreadable,
            Some(Ok(capture)) => Captured::Whole(capture),
        }
    }
}

/// What an end tells beside its status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EndNotice {
    /// The command did not run: the session's directory `cwd` cannot be
    /// entered.
    LostCwd(String),
    /// These functions shadow builtins eukhe's shell code needs.
    NotKept(Vec<String>),
    /// The capture could not be read: the state stands.
    Unreadable,
    /// The command ended its own shell: the state stands.
    EndedItsShell,
}

/// What a run's end does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndPlan {
    /// Merge the capture's changes into the snapshot.
    pub merge: bool,
    /// The signal that ended its shell, if one did.
    pub signal: Option<i32>,
    pub notice: Option<EndNotice>,
}

/// The end of a job that exited with `status` (`cancelled`: the user
/// cancelled it), with what its shell captured.
pub fn plan_end(captured: Captured, status: i32, cancelled: bool) -> EndPlan {
    let plan = |merge, signal, notice| EndPlan {
        merge,
        signal,
        notice,
    };
    match captured {
        Captured::Whole(capture) if capture.not_run => plan(
            false,
            None,
            capture.lost_cwd.clone().map(EndNotice::LostCwd),
        ),
        Captured::Whole(capture) => {
            let dropped = !capture.dropped.is_empty();
            let notice = dropped.then(|| EndNotice::NotKept(capture.dropped.clone()));
            plan(true, None, notice)
        }
        Captured::Unreadable => plan(false, None, Some(EndNotice::Unreadable)),
        Captured::Nothing => {
            let signal = signal_of(status);
            let notice = (!cancelled && signal.is_none()).then_some(EndNotice::EndedItsShell);
            plan(false, signal, notice)
        }
    }
}

/// The signal N of a shell's status 128+N.
fn signal_of(status: i32) -> Option<i32> {
    (status > 128 && status < 128 + 65).then(|| status - 128)
}

/// What the close of one of a job's output streams does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnClose {
    /// Its last stream closed before its end: if its shell closed them
    /// after a whole capture, the run is over now ([`ends_at_close`]).
    LookForEnd,
    /// Its last stream closed after its end: the end is settled (nothing
    /// more of its output comes), told and its scratch removed.
    Settle,
    /// A stream is still open.
    Wait,
}

/// What the close leaves: `open` streams still open, `ended` whether its
/// end is recorded.
pub fn on_close(open: u8, ended: bool) -> OnClose {
    match (open, ended) {
        (0, false) => OnClose::LookForEnd,
        (0, true) => OnClose::Settle,
        _ => OnClose::Wait,
    }
}

/// The status a run ends with now, as its output closed: its shell closed
/// them after a whole capture (whose last word is the status) and with no
/// job of its own left. `None`: its command closed them, and the end waits
/// for its shell's exit.
pub fn ends_at_close(capture: &Capture) -> Option<i32> {
    capture.status.filter(|_| !capture.has_jobs)
}

/// Whether a job is done and can be forgotten: it ended and its output
/// is all read.
pub fn forgettable(ended: bool, open: u8) -> bool {
    ended && open == 0
}

#[cfg(test)]
mod tests;
