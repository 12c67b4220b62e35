//! Orphan: what a worker does while its supervisor is lost.
//!
//! Model: `bend/orphan.bend`. Laws: `orphan_never_aborts_resumable`,
//! `orphan_idle_exit_due`, `orphan_work_exit_due`,
//! `orphan_capped_window_never_expires`, `orphan_exit_by_work`,
//! `orphan_wire_round_trips`, `orphan_wire_rejects_malformed` (the window's
//! text, [`LostExitWindow::to_text`] and [`LostExitWindow::parse_text`]).
//!
//! With `elapsed = now - lost_since` (saturating) and the lost-exit window `w`:
//! - `w` past the wire's range ([`WIRE_MS_MAX`], about 3170 years): wait forever;
//! - with work: exit keeping the work resumable once `elapsed >= 2w`
//!   (record busy, abort nothing; a later supervisor resumes it);
//! - without work: close the session once `elapsed >= w`;
//! - otherwise wait.
//!
//! Nothing here can overflow: `2w <= 2 * WIRE_MS_MAX` fits in a `u64`.

use serde::{Deserialize, Serialize};

use super::timing::{duration_in_words, TM, WORKER_LOST_EXIT_MIN_MS};
use super::work::WorkSet;

/// The largest millisecond count the wire carries: 10^14 ms, about 3170 years.
pub const WIRE_MS_MAX: u64 = 100_000_000_000_000;

/// What a worker without a supervisor does now.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OrphanVerdict {
    /// Keep serving and wait for a supervisor.
    Wait,
    /// Record busy evidence and exit, aborting nothing: the work resumes
    /// under a later supervisor.
    ExitResumable,
    /// No work to keep: close the session and exit.
    CloseSession,
}

/// The lost-supervisor decision.
pub fn orphan_decision(
    lost_since_ms: u64,
    now_ms: u64,
    window: LostExitWindow,
    work: WorkSet,
) -> OrphanVerdict {
    let LostExitWindow::After(window_ms) = window else {
        return OrphanVerdict::Wait;
    };
    let elapsed = now_ms.saturating_sub(lost_since_ms);
    if work.is_empty() {
        if elapsed >= window_ms {
            OrphanVerdict::CloseSession
        } else {
            OrphanVerdict::Wait
        }
    } else if elapsed >= window_ms.saturating_mul(2) {
        OrphanVerdict::ExitResumable
    } else {
        OrphanVerdict::Wait
    }
}

/// Whether a configured lost-exit window obeys the ordering law: a lost
/// worker sees a relaunched supervisor before it exits, so the window is
/// at least `WORKER_LOST_EXIT_MIN_MS` (an attached client's relaunch, then
/// a launcher's whole wait). `short_allowed` is the test-only setting that
/// lets tests use short windows.
pub fn window_obeys_minimum(
    window: LostExitWindow,
    short_allowed: bool,
) -> Result<(), WindowError> {
    match window {
        LostExitWindow::After(ms) if ms < WORKER_LOST_EXIT_MIN_MS && !short_allowed => {
            Err(WindowError::BelowMinimum { ms })
        }
        _ => Ok(()),
    }
}

/// A lost-exit window refused, as setting, wire value or text.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WindowError {
    /// Shorter than `WORKER_LOST_EXIT_MIN_MS` (law `timeouts_ordered`).
    #[error(
        "worker_lost_exit_ms = {ms} is shorter than the minimum {}: a lost worker must see a relaunched daemon before it exits (a client relaunches one within {}, then waits up to {} for it)",
        WORKER_LOST_EXIT_MIN_MS,
        duration_in_words(TM.client.client_relaunch_within),
        duration_in_words(TM.client.launcher_wait)
    )]
    BelowMinimum {
        /// The window asked for.
        ms: u64,
    },
    /// A number past the wire's range on the wire.
    #[error(
        "lost-exit window {ms} ms is past the wire's range ({} ms); say \"never\"",
        WIRE_MS_MAX
    )]
    PastWireRange {
        /// The number sent.
        ms: u64,
    },
    /// A word other than `never` on the wire.
    #[error("lost-exit window {word:?}: expected milliseconds or \"never\"")]
    Word {
        /// The word sent.
        word: String,
    },
    /// Text that is neither decimal milliseconds nor `never`.
    #[error("{text:?} is not a number of milliseconds or \"never\"")]
    Text {
        /// The text given.
        text: String,
    },
}

/// The lost-exit window: a number of milliseconds within the wire's range,
/// or never.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "LostExitWire", into = "LostExitWire")]
pub enum LostExitWindow {
    /// Exit this many milliseconds after the supervisor is lost.
    After(u64),
    /// Never exit for a lost supervisor.
    Never,
}

impl LostExitWindow {
    /// A window of `ms` milliseconds; past the wire's range it never expires.
    pub fn from_ms(ms: u64) -> Self {
        if ms > WIRE_MS_MAX {
            LostExitWindow::Never
        } else {
            LostExitWindow::After(ms)
        }
    }
}

#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum LostExitWire {
    Ms(u64),
    Word(String),
}

impl From<LostExitWindow> for LostExitWire {
    fn from(window: LostExitWindow) -> Self {
        match window {
            LostExitWindow::After(ms) => LostExitWire::Ms(ms),
            LostExitWindow::Never => LostExitWire::Word("never".to_string()),
        }
    }
}

impl TryFrom<LostExitWire> for LostExitWindow {
    type Error = WindowError;

    fn try_from(wire: LostExitWire) -> Result<Self, WindowError> {
        match wire {
            LostExitWire::Ms(ms) if ms <= WIRE_MS_MAX => Ok(LostExitWindow::After(ms)),
            LostExitWire::Ms(ms) => Err(WindowError::PastWireRange { ms }),
            LostExitWire::Word(word) if word == "never" => Ok(LostExitWindow::Never),
            LostExitWire::Word(word) => Err(WindowError::Word { word }),
        }
    }
}

impl LostExitWindow {
    /// The window as the text a worker's environment carries
    /// (`EUKHE_WORKER_LOST_EXIT_MS`): decimal milliseconds or `never`. This
    /// text is the form the window crosses processes in (laws
    /// `orphan_wire_round_trips`, `orphan_wire_rejects_malformed`).
    pub fn to_text(self) -> String {
        match self {
            LostExitWindow::After(ms) => ms.to_string(),
            LostExitWindow::Never => "never".into(),
        }
    }

    /// The window read from that text: ASCII digits (at least one, at most
    /// `u64::MAX`; past the wire's range the window never expires) or
    /// exactly `never`. A sign, a space or a unit is refused.
    pub fn parse_text(text: &str) -> Result<Self, WindowError> {
        if text == "never" {
            return Ok(LostExitWindow::Never);
        }
        let refused = || WindowError::Text {
            text: text.to_string(),
        };
        if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
            return Err(refused());
        }
        text.parse::<u64>()
            .map(LostExitWindow::from_ms)
            .map_err(|_| refused())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::laws::work::WorkKind;

    fn work() -> WorkSet {
        WorkSet::EMPTY.with(WorkKind::BackgroundJob)
    }

    #[test]
    fn idle_closes_after_one_window_work_exits_resumable_after_two() {
        let w = LostExitWindow::After(300_000);
        assert_eq!(
            orphan_decision(0, 299_999, w, WorkSet::EMPTY),
            OrphanVerdict::Wait
        );
        assert_eq!(
            orphan_decision(0, 300_000, w, WorkSet::EMPTY),
            OrphanVerdict::CloseSession
        );
        assert_eq!(orphan_decision(0, 300_000, w, work()), OrphanVerdict::Wait);
        assert_eq!(orphan_decision(0, 599_999, w, work()), OrphanVerdict::Wait);
        assert_eq!(
            orphan_decision(0, 600_000, w, work()),
            OrphanVerdict::ExitResumable
        );
    }

    #[test]
    fn a_window_past_the_wire_range_never_expires() {
        let w = LostExitWindow::from_ms(WIRE_MS_MAX + 1);
        assert_eq!(w, LostExitWindow::Never);
        assert_eq!(
            orphan_decision(0, u64::MAX, w, WorkSet::EMPTY),
            OrphanVerdict::Wait
        );
        let max = LostExitWindow::from_ms(WIRE_MS_MAX);
        assert_eq!(
            orphan_decision(0, u64::MAX, max, work()),
            OrphanVerdict::ExitResumable
        );
        assert_eq!(
            orphan_decision(u64::MAX, 0, max, work()),
            OrphanVerdict::Wait
        );
    }

    #[test]
    fn orphan_wire_round_trips() {
        for window in [
            LostExitWindow::After(0),
            LostExitWindow::After(WIRE_MS_MAX),
            LostExitWindow::Never,
        ] {
            let json = serde_json::to_string(&window).unwrap();
            assert_eq!(
                serde_json::from_str::<LostExitWindow>(&json).unwrap(),
                window
            );
        }
        for verdict in [
            OrphanVerdict::Wait,
            OrphanVerdict::ExitResumable,
            OrphanVerdict::CloseSession,
        ] {
            let json = serde_json::to_string(&verdict).unwrap();
            assert_eq!(
                serde_json::from_str::<OrphanVerdict>(&json).unwrap(),
                verdict
            );
        }
    }

    #[test]
    fn orphan_wire_rejects_out_of_range_windows_and_unknown_tags() {
        let past = (WIRE_MS_MAX + 1).to_string();
        assert!(serde_json::from_str::<LostExitWindow>(&past).is_err());
        assert!(serde_json::from_str::<LostExitWindow>(r#""soon""#).is_err());
        assert!(serde_json::from_str::<LostExitWindow>("-5").is_err());
        assert!(serde_json::from_str::<OrphanVerdict>(r#""abort""#).is_err());
    }

    #[test]
    fn the_window_crosses_to_a_worker_as_its_text() {
        for window in [
            LostExitWindow::After(0),
            LostExitWindow::After(300_000),
            LostExitWindow::After(WIRE_MS_MAX),
            LostExitWindow::Never,
        ] {
            assert_eq!(LostExitWindow::parse_text(&window.to_text()), Ok(window));
        }
        assert_eq!(LostExitWindow::After(300_000).to_text(), "300000");
        assert_eq!(LostExitWindow::Never.to_text(), "never");
        let past = (WIRE_MS_MAX + 1).to_string();
        assert_eq!(LostExitWindow::parse_text(&past), Ok(LostExitWindow::Never));
        for refused in ["", "+5", "-5", " 5", "5ms", "Never", "18446744073709551616"] {
            assert!(LostExitWindow::parse_text(refused).is_err(), "{refused:?}");
        }
    }
}
