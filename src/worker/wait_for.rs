//! `wait_for`: answer once a terminal run's screen shows a regular
//! expression, the run waits for input, or it has ended (any of those the
//! caller names), or at the caller's timeout with the screen as it is.
//!
//! `Conditions` decides (no I/O, no clock); `wait_for` looks at the screen
//! at once, then again each time `Screens::changed` fires, until the
//! conditions hold, the run ends, the timeout passes or the worker stops.
//! A run that ends without the conditions holding is answered then: its
//! screen changes no more.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use regex::Regex;

use super::outbox::Outbox;
use super::screens::ScreenAsked;
use super::state::Worker;
use crate::laws::runs::RunId;
use crate::laws::timing::WAIT_FOR_TIMEOUT_MAX_MS;
use crate::protocol::message::{Response, SessionRequest, Until};
use crate::protocol::screen::ScreenState;

/// `WaitFor`: answer `client` once the screen of `input` (or of the
/// session's current terminal run) meets any of `until`, or when the run
/// ends, or after `timeout_ms` (bounded). Served on a task of its own, so
/// the connection goes on reading; an invalid condition is answered at once.
pub fn start(worker: &Rc<RefCell<Worker>>, request: SessionRequest, client: &Outbox) {
    let SessionRequest::WaitFor {
        input,
        until,
        timeout_ms,
    } = request
    else {
        return;
    };
    let conditions = match Conditions::new(until) {
        Ok(conditions) => conditions,
        Err(message) => {
            let _ = client.send(Response::Error { message });
            return;
        }
    };
    let timeout = Duration::from_millis(bounded_timeout_ms(timeout_ms));
    let deadline = tokio::time::Instant::now() + timeout;
    tokio::task::spawn_local(wait(
        worker.clone(),
        input,
        conditions,
        deadline,
        client.clone(),
    ));
}

/// What one look at the screen found.
enum Look {
    /// The screen of the run waited for.
    Screen(ScreenState),
    /// The run waited for has no screen yet: it is queued, or it runs and
    /// this worker has not rebuilt its screen yet.
    NotYet,
    /// There is nothing to wait for: one line saying what to do.
    Refused(String),
}

async fn wait(
    worker: Rc<RefCell<Worker>>,
    input: Option<RunId>,
    conditions: Conditions,
    deadline: tokio::time::Instant,
    client: Outbox,
) {
    // Subscribed before the first look: no change after it is missed.
    let mut changed = worker.borrow().screens.changed.subscribe();
    let Some(input) = input.or_else(|| current_terminal_input(&worker.borrow())) else {
        let message = "no terminal run in this session to wait for: start one with `eukhe \
                       send --tty` or `eukhe bash --tty`"
            .to_string();
        let _ = client.send(Response::Error { message });
        return;
    };
    let mut last = None;
    loop {
        match look(&worker.borrow(), input) {
            Look::Screen(screen) => {
                if let Some(met) = conditions.met(&screen) {
                    let _ = client.send(waited(screen, Some(met)));
                    return;
                }
                if screen.ended.is_some() {
                    // An ended run's screen changes no more.
                    let _ = client.send(waited(screen, None));
                    return;
                }
                last = Some(screen);
            }
            Look::NotYet => {}
            Look::Refused(message) => {
                let _ = client.send(Response::Error { message });
                return;
            }
        }
        tokio::select! {
            seen = changed.changed() => {
                // The screens went away with the worker, or the client
                // left: nobody is there to answer.
                if seen.is_err() || client.is_closed() {
                    return;
                }
            }
            _ = tokio::time::sleep_until(deadline) => break,
        }
    }
    let answer = match last {
        Some(screen) => Response::WaitedFor {
            screen,
            met: None,
            timed_out: true,
        },
        None => Response::Error {
            message: format!(
                "timed out: input {input} has not started yet, so it has no screen \
                 (see `eukhe queue`)"
            ),
        },
    };
    let _ = client.send(answer);
}

fn waited(screen: ScreenState, met: Option<Until>) -> Response {
    Response::WaitedFor {
        screen,
        met,
        timed_out: false,
    }
}

/// The input a wait with no number is for: the terminal run that runs
/// now, else the latest user bash with a terminal, else the first terminal
/// run queued (the one `send --tty` just queued), else the last one that
/// ended.
fn current_terminal_input(worker: &Worker) -> Option<RunId> {
    let current = worker.core.current_run();
    if let Some(run) = current.filter(|run| worker.core.run_tty(*run).is_some()) {
        return Some(run);
    }
    let kept = worker.screens.state(ScreenAsked::Current { current }).ok();
    if let Some(live) = kept.as_ref().filter(|screen| screen.ended.is_none()) {
        return Some(live.input);
    }
    let queued = worker.core.queue().find(|queued| queued.tty.is_some());
    queued
        .map(|queued| queued.run)
        .or(kept.map(|ended| ended.input))
}

/// The screen of `input` now, or why there is none.
fn look(worker: &Worker, input: RunId) -> Look {
    match worker.screens.state(ScreenAsked::Input(input)) {
        Ok(screen) => Look::Screen(screen),
        Err(_) if terminal_run_to_come(worker, input) => Look::NotYet,
        Err(message) => Look::Refused(message),
    }
}

/// Whether `input` is a terminal run that is queued, or that runs without
/// a screen yet (this worker follows it and rebuilds its screen).
fn terminal_run_to_come(worker: &Worker, input: RunId) -> bool {
    let queued = worker
        .core
        .queue()
        .any(|queued| queued.run == input && queued.tty.is_some());
    let running = worker.core.current_run() == Some(input) && worker.core.run_tty(input).is_some();
    queued || running
}

/// The conditions of one wait, their regular expressions compiled.
#[derive(Debug)]
pub struct Conditions {
    until: Vec<(Until, Option<Regex>)>,
}

impl Conditions {
    /// Compile `until`; an invalid or missing condition is one line saying
    /// what to fix.
    pub fn new(until: Vec<Until>) -> Result<Conditions, String> {
        if until.is_empty() {
            return Err(
                "nothing to wait for: name a condition (a regex to match, waiting, or end)"
                    .to_string(),
            );
        }
        let until = until
            .into_iter()
            .map(|condition| {
                let regex = match &condition {
                    Until::Screen { regex } => Some(compile(regex)?),
                    Until::Waiting | Until::End => None,
                };
                Ok((condition, regex))
            })
            .collect::<Result<_, String>>()?;
        Ok(Conditions { until })
    }

    /// The first condition that holds for `screen`, if one does.
    pub fn met(&self, screen: &ScreenState) -> Option<Until> {
        let ended = screen.ended.is_some();
        let text = screen.lines.join("\n");
        self.until
            .iter()
            .find(|(condition, regex)| match (condition, regex) {
                (Until::Screen { .. }, Some(regex)) => regex.is_match(&text),
                (Until::Screen { .. }, None) => false,
                (Until::Waiting, _) => screen.waiting && !ended,
                (Until::End, _) => ended,
            })
            .map(|(condition, _)| condition.clone())
    }
}

/// A regular expression, or one line naming what is wrong with it (the
/// crate's own message runs over several lines).
fn compile(regex: &str) -> Result<Regex, String> {
    Regex::new(regex).map_err(|e| {
        let why = match &e {
            regex::Error::Syntax(text) => text
                .lines()
                .rev()
                .find(|line| line.starts_with("error:"))
                .map(|line| line.trim_start_matches("error:").trim().to_string())
                .unwrap_or_else(|| text.replace('\n', " ")),
            other => other.to_string(),
        };
        format!("invalid regular expression {regex:?}: {why}")
    })
}

/// The timeout a wait takes: the caller's, at most the maximum.
pub fn bounded_timeout_ms(asked_ms: u64) -> u64 {
    asked_ms.min(WAIT_FOR_TIMEOUT_MAX_MS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::screen::Cursor;

    fn screen(lines: &[&str], waiting: bool) -> ScreenState {
        ScreenState {
            input: 1,
            rows: lines.len() as u16,
            cols: 20,
            lines: lines.iter().map(|l| l.to_string()).collect(),
            cursor: Cursor {
                row: 0,
                col: 0,
                visible: true,
            },
            title: None,
            alternate: false,
            waiting,
            ended: None,
        }
    }

    fn ended(screen: ScreenState) -> ScreenState {
        ScreenState {
            ended: Some(0),
            ..screen
        }
    }

    fn matching(regex: &str) -> Until {
        Until::Screen {
            regex: regex.to_string(),
        }
    }

    #[test]
    fn a_regex_matches_the_screen_text_across_rows() {
        let conditions = Conditions::new(vec![matching(r"Continue\? \[y/N\]")]).unwrap();
        assert_eq!(conditions.met(&screen(&["$ x", ""], false)), None);
        let prompt = screen(&["$ x", "Continue? [y/N] "], false);
        assert_eq!(
            conditions.met(&prompt),
            Some(matching(r"Continue\? \[y/N\]"))
        );
        let across = Conditions::new(vec![matching(r"(?m)^b\nc$")]).unwrap();
        assert!(across.met(&screen(&["a", "b", "c"], false)).is_some());
    }

    #[test]
    fn the_first_condition_that_holds_is_the_one_told() {
        let conditions =
            Conditions::new(vec![matching("never"), Until::Waiting, Until::End]).unwrap();
        assert_eq!(conditions.met(&screen(&["x"], false)), None);
        assert_eq!(conditions.met(&screen(&["x"], true)), Some(Until::Waiting));
        // An ended run waits for nothing any more.
        assert_eq!(
            conditions.met(&ended(screen(&["x"], true))),
            Some(Until::End)
        );
        let waiting_only = Conditions::new(vec![Until::Waiting]).unwrap();
        assert_eq!(waiting_only.met(&ended(screen(&["x"], true))), None);
    }

    #[test]
    fn an_invalid_regex_or_no_condition_is_one_line() {
        let error = Conditions::new(vec![matching("Continue? [y/N")]).unwrap_err();
        assert!(
            error.starts_with("invalid regular expression \"Continue? [y/N\": "),
            "{error}"
        );
        assert!(!error.contains('\n'), "{error}");
        let error = Conditions::new(Vec::new()).unwrap_err();
        assert!(error.contains("nothing to wait for"), "{error}");
    }

    #[test]
    fn a_timeout_is_bounded_by_the_maximum() {
        assert_eq!(bounded_timeout_ms(1_000), 1_000);
        assert_eq!(
            bounded_timeout_ms(u64::MAX),
            crate::laws::timing::WAIT_FOR_TIMEOUT_MAX_MS
        );
    }
}
