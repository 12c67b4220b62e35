//! Whether a terminal run is **waiting for input** (a rule of eukhe's
//! own, not a law of the specification): its foreground process group is
//! blocked reading its terminal (or polling it), nothing was written to the
//! terminal for [`WAITING_QUIET_MS`], and no keys sent to it are still
//! unread: the moment a person, or an agent, answers a prompt.
//!
//! [`verdict`] is the rule, pure: its inputs are what the detection saw
//! (`host::tty_wait` on Linux), the last output's time and now. A
//! [`WaitingWatch`] says when to look again, without a fixed tick: once at
//! the last output plus the quiet, then backing off while the verdict stays
//! the same ([`WAITING_RECHECK_FIRST_MS`], doubling up to
//! [`WAITING_RECHECK_MAX_MS`]); output, keys or a resize start it over.
//! Time arrives as monotonic milliseconds.

pub use super::timing::{WAITING_QUIET_MS, WAITING_RECHECK_FIRST_MS, WAITING_RECHECK_MAX_MS};

/// What the detection saw of the terminal's foreground process group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Foreground {
    /// Some process of the group sleeps reading or polling the terminal,
    /// and none is running.
    BlockedOnInput,
    /// Some process of the group runs, or every one sleeps in something
    /// else (a child's end, a timer, a file, the network).
    Busy,
    /// The group could not be read: no foreground group, or it is gone.
    Unknown,
}

/// What the detection saw at one look.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seen {
    /// The foreground group's state.
    pub foreground: Foreground,
    /// Keys sent to the terminal that its program has not read yet: bytes
    /// still on their way to the terminal, and bytes in the terminal's
    /// input queue that a read would return now (a line not yet ended by
    /// Enter, in a line-editing terminal, is not such a byte: the program
    /// still waits for the rest of it).
    pub unread_key_bytes: u64,
}

/// The rule's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The run waits for input.
    Waiting,
    /// The foreground group is not blocked on the terminal (or is unknown).
    Busy,
    /// Keys were sent that the program has not read yet: it will wake.
    KeysUnread,
    /// The program wrote to the terminal less than [`WAITING_QUIET_MS`]
    /// ago; the verdict may change at `quiet_at_ms`.
    Writing {
        /// When the quiet will have lasted long enough.
        quiet_at_ms: u64,
    },
}

impl Verdict {
    /// Whether the run waits for input.
    pub fn is_waiting(self) -> bool {
        self == Verdict::Waiting
    }
}

/// The rule: is the run waiting for input at `now_ms`, given what was
/// `seen` and when the program last wrote (`last_output_ms`: its start, if
/// it has written nothing)?
pub fn verdict(seen: Seen, last_output_ms: u64, now_ms: u64) -> Verdict {
    if seen.foreground != Foreground::BlockedOnInput {
        return Verdict::Busy;
    }
    if seen.unread_key_bytes > 0 {
        return Verdict::KeysUnread;
    }
    let quiet_at_ms = last_output_ms.saturating_add(WAITING_QUIET_MS);
    if now_ms < quiet_at_ms {
        return Verdict::Writing { quiet_at_ms };
    }
    Verdict::Waiting
}

/// When to look at a terminal run's foreground group, and what the last
/// look said. Sans-IO: the caller tells it what happened and when, looks
/// when [`WaitingWatch::poll_timeout`] says, and reports what it saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WaitingWatch {
    last_output_ms: u64,
    next_look_ms: u64,
    backoff_ms: u64,
    last: Option<Verdict>,
}

impl WaitingWatch {
    /// A watch over a run that started at `now_ms` (its start counts as
    /// its first output: a program that never writes still gets its
    /// quiet).
    pub fn new(now_ms: u64) -> Self {
        WaitingWatch {
            last_output_ms: now_ms,
            next_look_ms: now_ms.saturating_add(WAITING_QUIET_MS),
            backoff_ms: WAITING_RECHECK_FIRST_MS,
            last: None,
        }
    }

    /// The program wrote to its terminal at `now_ms`: it is not waiting
    /// now, and the next look comes once the quiet has passed.
    pub fn output(&mut self, now_ms: u64) {
        self.last_output_ms = self.last_output_ms.max(now_ms);
        self.start_over(self.last_output_ms.saturating_add(WAITING_QUIET_MS));
    }

    /// Keys were written to the terminal, or it was resized, at `now_ms`:
    /// the program is woken, so the next look comes after a quiet from now.
    pub fn nudged(&mut self, now_ms: u64) {
        self.start_over(now_ms.saturating_add(WAITING_QUIET_MS));
    }

    fn start_over(&mut self, look_at_ms: u64) {
        self.next_look_ms = look_at_ms;
        self.backoff_ms = WAITING_RECHECK_FIRST_MS;
        self.last = None;
    }

    /// When the watch next wants a look (monotonic milliseconds).
    pub fn poll_timeout(&self) -> u64 {
        self.next_look_ms
    }

    /// Whether a look is due at `now_ms`.
    pub fn due(&self, now_ms: u64) -> bool {
        now_ms >= self.next_look_ms
    }

    /// What a look at `now_ms` saw: the verdict, and when to look next.
    pub fn looked(&mut self, seen: Seen, now_ms: u64) -> Verdict {
        let verdict = verdict(seen, self.last_output_ms, now_ms);
        self.next_look_ms = match verdict {
            Verdict::Writing { quiet_at_ms } => quiet_at_ms,
            _ if self.last == Some(verdict) => {
                self.backoff_ms = self
                    .backoff_ms
                    .saturating_mul(2)
                    .min(WAITING_RECHECK_MAX_MS);
                now_ms.saturating_add(self.backoff_ms)
            }
            _ => {
                self.backoff_ms = WAITING_RECHECK_FIRST_MS;
                now_ms.saturating_add(self.backoff_ms)
            }
        };
        self.last = Some(verdict);
        verdict
    }

    /// Whether the last look found the run waiting, with nothing written
    /// or sent since.
    pub fn waiting(&self) -> bool {
        self.last.is_some_and(Verdict::is_waiting)
    }
}

#[cfg(test)]
mod tests;
