//! `top`'s state, pure: rows built from an initial `ls` and kept up to
//! date by events, the selection, the filter, and what a key asks for.
//! No I/O and no clock: times arrive as wall-clock milliseconds.

use std::collections::BTreeMap;

use crate::laws::restart::RestartVerdict;
use crate::protocol::event::{latest_line, Event, EventKind};
use crate::protocol::message::{SessionInfo, StatusInfo};
use crate::session::transcript::{Entry, EntryBody};

/// One session's row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    pub id: String,
    pub name: String,
    pub state: String,
    pub cwd: String,
    /// The run executing: its number, its command, when it started.
    pub run: Option<(u64, String, u64)>,
    /// Inputs queued and not started (counted from events: unknown
    /// before this dashboard saw them queued).
    pub queued: u32,
    /// The commands of inputs seen queued, by run number.
    pub texts: BTreeMap<u64, String>,
    pub jobs: u32,
    pub failures: u32,
    pub last_line: String,
    /// A terminal run of the session waits for input (`laws::waiting`).
    pub waiting: bool,
}

impl Row {
    fn from_info(info: &SessionInfo) -> Row {
        Row {
            id: info.id.clone(),
            name: info.name.clone(),
            state: info.state.clone(),
            cwd: info.cwd.clone(),
            run: None,
            queued: 0,
            texts: BTreeMap::new(),
            jobs: info.jobs,
            failures: info.failures_in_window,
            last_line: String::new(),
            waiting: info.waiting,
        }
    }

    /// The row of a session just created.
    fn created(id: String, name: String, cwd: String) -> Row {
        Row {
            id,
            name,
            state: "running".into(),
            cwd,
            run: None,
            queued: 0,
            texts: BTreeMap::new(),
            jobs: 0,
            failures: 0,
            last_line: String::new(),
            waiting: false,
        }
    }

    /// Take in an event about this row's session (other than its creation
    /// or removal), which happened at wall-clock `at_ms`.
    fn apply(&mut self, event: &EventKind, at_ms: u64) {
        match event {
            EventKind::State { state } => {
                // Only a restart takes a session out of given-up, and it
                // starts a new restart window.
                if self.state == "given-up" && state != "given-up" {
                    self.failures = 0;
                }
                self.state = state.clone();
                if matches!(state.as_str(), "idle" | "saved" | "given-up" | "restarting") {
                    // No run executes in these states (a run a lost
                    // worker left resumes with the next one and says so).
                    self.run = None;
                    self.waiting = false;
                }
                if state == "idle" {
                    self.queued = 0;
                }
            }
            EventKind::RunQueued { input, text } => {
                self.queued += 1;
                self.texts.insert(*input, text.clone());
            }
            EventKind::RunStarted { input } => {
                self.queued = self.queued.saturating_sub(1);
                let text = self.texts.get(input).cloned().unwrap_or_default();
                self.run = Some((*input, text, at_ms));
            }
            EventKind::RunFinished { input, .. } | EventKind::RunInterrupted { input } => {
                self.texts.remove(input);
                if self.run.as_ref().is_some_and(|(run, _, _)| run == input) {
                    self.run = None;
                    self.waiting = false;
                }
            }
            EventKind::WaitingForInput { .. } => self.waiting = true,
            EventKind::InputTaken { .. } => self.waiting = false,
            EventKind::Withdrawn { input } => {
                self.texts.remove(input);
                self.queued = self.queued.saturating_sub(1);
            }
            EventKind::JobsStarted { count } | EventKind::JobsEnded { count } => self.jobs = *count,
            EventKind::Output { line } => self.last_line = line.clone(),
            EventKind::WorkerFailed { verdict, .. } => {
                self.failures = match verdict {
                    RestartVerdict::Restart {
                        failures_in_window, ..
                    }
                    | RestartVerdict::GiveUp { failures_in_window } => *failures_in_window,
                }
            }
            EventKind::Renamed { .. }
            | EventKind::Restored { .. }
            | EventKind::Revived { .. }
            | EventKind::Notice { .. }
            | EventKind::KernelFailed { .. }
            | EventKind::Created { .. }
            | EventKind::Removed
            | EventKind::Dropped { .. }
            | EventKind::DaemonStopping { .. } => {}
        }
    }
}

/// What the dashboard is doing with the keyboard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mode {
    Normal,
    /// Typing a filter after `/`.
    Filter,
    /// `d` was pressed on this session: `y` removes it.
    ConfirmRemove {
        id: String,
        name: String,
    },
}

/// A key, as the dashboard reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    Up,
    Down,
    Enter,
    Escape,
    Backspace,
    Char(char),
}

/// What a key asks the terminal loop to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    Nothing,
    Quit,
    Attach(String),
    Cancel(String),
    Restart(String),
    Remove(String),
}

/// The whole dashboard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dashboard {
    pub rows: BTreeMap<String, Row>,
    /// The selected session's id.
    pub selected: Option<String>,
    pub filter: String,
    pub mode: Mode,
    /// One line for the person: what the last command did, or a problem.
    pub message: String,
    pub version: String,
    pub backend: String,
    /// Whether the event stream is connected now.
    pub connected: bool,
}

impl Dashboard {
    /// The dashboard as `ls` and `status` show the daemon now.
    pub fn new(sessions: &[SessionInfo], status: &StatusInfo) -> Dashboard {
        let rows = sessions
            .iter()
            .map(|info| (info.id.clone(), Row::from_info(info)))
            .collect();
        let mut dashboard = Dashboard {
            rows,
            selected: None,
            filter: String::new(),
            mode: Mode::Normal,
            message: String::new(),
            version: status.version.clone(),
            backend: status.backend.clone(),
            connected: true,
        };
        dashboard.keep_selection();
        dashboard
    }

    /// A fresh `ls` after the stream was lost: rows as listed, keeping
    /// what only events told (runs, queue, last lines) for sessions still
    /// in the same state.
    pub fn relist(&mut self, sessions: &[SessionInfo], status: &StatusInfo) {
        let mut rows = BTreeMap::new();
        for info in sessions {
            let mut row = Row::from_info(info);
            if let Some(old) = self.rows.get(&info.id) {
                row.last_line = old.last_line.clone();
                if old.state == row.state {
                    row.run = old.run.clone();
                    row.queued = old.queued;
                    row.texts = old.texts.clone();
                }
            }
            rows.insert(info.id.clone(), row);
        }
        self.rows = rows;
        self.version = status.version.clone();
        self.backend = status.backend.clone();
        self.connected = true;
        self.keep_selection();
    }

    /// What the last entries of session `id`'s transcript say of its run
    /// and queue (read once at the start: events tell the rest).
    pub fn seen_in_tail(&mut self, id: &str, entries: &[Entry]) {
        let Some(row) = self.rows.get_mut(id) else {
            return;
        };
        let mut waiting = std::collections::BTreeSet::new();
        for entry in entries {
            match &entry.body {
                EntryBody::Input { input, text, .. } => {
                    row.texts.insert(*input, text.clone());
                    waiting.insert(*input);
                }
                EntryBody::RunStarted { input } => {
                    waiting.remove(input);
                    let text = row.texts.get(input).cloned().unwrap_or_default();
                    row.run = Some((*input, text, entry.at_ms));
                }
                EntryBody::RunFinished { input, .. } | EntryBody::RunInterrupted { input }
                    if row.run.as_ref().is_some_and(|(run, _, _)| run == input) =>
                {
                    row.run = None;
                }
                EntryBody::Withdrawn { input } => {
                    waiting.remove(input);
                }
                EntryBody::Output { data, .. } => {
                    if let Some(line) = latest_line(data) {
                        row.last_line = line;
                    }
                }
                _ => {}
            }
        }
        row.queued = waiting.len() as u32;
    }

    /// Take one event in.
    pub fn apply(&mut self, event: &Event) {
        let Some(id) = &event.id else {
            self.apply_daemon_event(&event.event);
            return;
        };
        let name = event.name.clone().unwrap_or_else(|| id.clone());
        if let EventKind::Created { cwd } = &event.event {
            self.rows
                .insert(id.clone(), Row::created(id.clone(), name, cwd.clone()));
            self.keep_selection();
            return;
        }
        if event.event == EventKind::Removed {
            self.removed(id);
            return;
        }
        let Some(row) = self.rows.get_mut(id) else {
            return;
        };
        row.name = name;
        row.apply(&event.event, event.at_ms);
    }

    /// Take in an event of the daemon's own (one that names no session).
    fn apply_daemon_event(&mut self, event: &EventKind) {
        match event {
            EventKind::DaemonStopping { message } => {
                self.message = format!("the daemon stops: {message}")
            }
            EventKind::Dropped { count } => {
                self.message = format!("{count} events were missed: the list may be behind")
            }
            _ => {}
        }
    }

    /// Session `id` was removed: its row goes, and so does a question
    /// whether to remove it.
    fn removed(&mut self, id: &str) {
        self.rows.remove(id);
        if matches!(&self.mode, Mode::ConfirmRemove { id: asked, .. } if asked == id) {
            self.mode = Mode::Normal;
        }
        self.keep_selection();
    }

    /// The rows shown, in order: those whose name or id holds the filter.
    pub fn visible(&self) -> Vec<&Row> {
        let mut rows: Vec<&Row> = self
            .rows
            .values()
            .filter(|row| {
                self.filter.is_empty()
                    || row.name.contains(&self.filter)
                    || row.id.contains(&self.filter)
            })
            .collect();
        rows.sort_by(|a, b| a.name.cmp(&b.name).then(a.id.cmp(&b.id)));
        rows
    }

    /// The selected row's place among the visible rows.
    pub fn selected_index(&self) -> Option<usize> {
        let selected = self.selected.as_ref()?;
        self.visible().iter().position(|row| &row.id == selected)
    }

    /// Keep the selection on a visible row (the first, when it is gone).
    fn keep_selection(&mut self) {
        if self.selected_index().is_none() {
            self.selected = self.visible().first().map(|row| row.id.clone());
        }
    }

    fn move_selection(&mut self, down: bool) {
        let ids: Vec<String> = self.visible().iter().map(|row| row.id.clone()).collect();
        if ids.is_empty() {
            return;
        }
        let at = self.selected_index().unwrap_or(0);
        let next = if down {
            (at + 1).min(ids.len() - 1)
        } else {
            at.saturating_sub(1)
        };
        self.selected = Some(ids[next].clone());
    }

    /// A key pressed: the state it leaves and what the loop must do.
    pub fn key(&mut self, key: Key) -> Command {
        match self.mode.clone() {
            Mode::Filter => {
                match key {
                    Key::Enter | Key::Escape => self.mode = Mode::Normal,
                    Key::Backspace => {
                        self.filter.pop();
                    }
                    Key::Char(c) => self.filter.push(c),
                    Key::Up | Key::Down => {}
                }
                self.keep_selection();
                Command::Nothing
            }
            Mode::ConfirmRemove { id, name } => {
                self.mode = Mode::Normal;
                if key == Key::Char('y') {
                    self.message = format!("removing {name}");
                    Command::Remove(id)
                } else {
                    self.message = format!("{name} was not removed");
                    Command::Nothing
                }
            }
            Mode::Normal => {
                let selected = self.selected.clone();
                match (key, selected) {
                    (Key::Char('q'), _) => Command::Quit,
                    (Key::Up, _) => {
                        self.move_selection(false);
                        Command::Nothing
                    }
                    (Key::Down, _) => {
                        self.move_selection(true);
                        Command::Nothing
                    }
                    (Key::Char('/'), _) => {
                        self.mode = Mode::Filter;
                        Command::Nothing
                    }
                    (Key::Escape, _) => {
                        self.filter.clear();
                        self.keep_selection();
                        Command::Nothing
                    }
                    (Key::Enter, Some(id)) => Command::Attach(id),
                    (Key::Char('c'), Some(id)) => Command::Cancel(id),
                    (Key::Char('r'), Some(id)) => Command::Restart(id),
                    (Key::Char('d'), Some(id)) => {
                        let name = self.rows.get(&id).map_or(id.clone(), |r| r.name.clone());
                        self.message =
                            format!("remove {name}? y removes it, any other key keeps it");
                        self.mode = Mode::ConfirmRemove { id, name };
                        Command::Nothing
                    }
                    _ => Command::Nothing,
                }
            }
        }
    }

    /// Counts for the footer: sessions, busy, given up.
    pub fn counts(&self) -> (usize, usize, usize) {
        let count = |state: &str| self.rows.values().filter(|r| r.state == state).count();
        (self.rows.len(), count("busy"), count("given-up"))
    }
}

/// `ms` as a short elapsed time: `42s`, `3m07s`, `2h05m`.
pub fn elapsed(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, s / 60 % 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(id: &str, name: &str, state: &str) -> SessionInfo {
        SessionInfo {
            id: id.into(),
            name: name.into(),
            state: state.into(),
            pid: None,
            build: None,
            failures_in_window: 0,
            jobs: 0,
            kernel_pid: None,
            bash: Vec::new(),
            waiting: false,
            cwd: "/tmp".into(),
            created_ms: 0,
            active_ms: 0,
            problem: None,
            resources: None,
        }
    }

    fn status() -> StatusInfo {
        StatusInfo {
            version: "0.1.0".into(),
            build_id: "b".into(),
            pid: 1,
            backend: "process".into(),
            protocol: 1,
            capabilities: vec![],
            sessions: 0,
            running: 0,
            busy: 0,
            given_up: 0,
            socket: String::new(),
            state_dir: String::new(),
        }
    }

    fn event(id: &str, at_ms: u64, kind: EventKind) -> Event {
        Event::session(at_ms, id, id, kind)
    }

    #[test]
    fn a_run_shows_from_its_start_to_its_end() {
        let mut d = Dashboard::new(&[info("a", "a", "idle")], &status());
        let text = "sleep 5".to_string();
        d.apply(&event("a", 1, EventKind::RunQueued { input: 1, text }));
        d.apply(&event(
            "a",
            2,
            EventKind::State {
                state: "busy".into(),
            },
        ));
        d.apply(&event("a", 3, EventKind::RunStarted { input: 1 }));
        let row = &d.rows["a"];
        assert_eq!((row.state.as_str(), row.queued), ("busy", 0));
        assert_eq!(row.run, Some((1, "sleep 5".into(), 3)));
        let finished = EventKind::RunFinished {
            input: 1,
            status: 0,
            signal: None,
            cancelled: false,
        };
        d.apply(&event("a", 4, finished));
        d.apply(&event(
            "a",
            5,
            EventKind::State {
                state: "idle".into(),
            },
        ));
        assert_eq!(d.rows["a"].run, None);
        assert_eq!(d.rows["a"].state, "idle");
    }

    #[test]
    fn a_run_waiting_for_input_shows_until_it_takes_input_or_ends() {
        let mut listed = info("b", "b", "busy");
        listed.waiting = true;
        let mut d = Dashboard::new(&[info("a", "a", "busy"), listed], &status());
        assert!(d.rows["b"].waiting, "ls said it waits");
        d.apply(&event("a", 1, EventKind::RunStarted { input: 1 }));
        let wait = || EventKind::WaitingForInput {
            input: 1,
            bash: false,
        };
        d.apply(&event("a", 2, wait()));
        assert!(d.rows["a"].waiting);
        let taken = EventKind::InputTaken {
            input: 1,
            bash: false,
        };
        d.apply(&event("a", 3, taken));
        assert!(!d.rows["a"].waiting);
        d.apply(&event("a", 4, wait()));
        let finished = EventKind::RunFinished {
            input: 1,
            status: 0,
            signal: None,
            cancelled: false,
        };
        d.apply(&event("a", 5, finished));
        assert!(!d.rows["a"].waiting, "an ended run waits for nothing");
    }

    #[test]
    fn keys_select_filter_and_ask_before_removing() {
        let sessions = [info("a", "alpha", "idle"), info("b", "beta", "busy")];
        let mut d = Dashboard::new(&sessions, &status());
        assert_eq!(d.selected.as_deref(), Some("a"));
        d.key(Key::Down);
        assert_eq!(d.key(Key::Char('c')), Command::Cancel("b".into()));
        assert_eq!(d.key(Key::Enter), Command::Attach("b".into()));
        assert_eq!(d.key(Key::Char('d')), Command::Nothing);
        assert_eq!(d.key(Key::Char('n')), Command::Nothing);
        d.key(Key::Char('d'));
        assert_eq!(d.key(Key::Char('y')), Command::Remove("b".into()));
        d.key(Key::Char('/'));
        for c in "alp".chars() {
            d.key(Key::Char(c));
        }
        d.key(Key::Enter);
        assert_eq!(d.visible().len(), 1);
        assert_eq!(d.selected.as_deref(), Some("a"));
        assert_eq!(d.key(Key::Char('q')), Command::Quit);
    }

    #[test]
    fn sessions_come_and_go_with_their_events() {
        let mut d = Dashboard::new(&[], &status());
        let cwd = "/w".to_string();
        d.apply(&event("n", 1, EventKind::Created { cwd }));
        assert_eq!(d.selected.as_deref(), Some("n"));
        d.apply(&event("n", 2, EventKind::Removed));
        assert!(d.rows.is_empty());
        assert_eq!(d.selected, None);
    }

    #[test]
    fn a_restarted_session_counts_its_failures_afresh() {
        let mut given_up = info("a", "a", "given-up");
        given_up.failures_in_window = 6;
        let mut d = Dashboard::new(&[given_up], &status());
        assert_eq!(d.rows["a"].failures, 6);
        let state = |s: &str| EventKind::State { state: s.into() };
        d.apply(&event("a", 1, state("running")));
        assert_eq!(d.rows["a"].failures, 0, "eukhe restart: a new window");
        let failed = EventKind::WorkerFailed {
            why: "crash".into(),
            verdict: RestartVerdict::Restart {
                pause_ms: 250,
                failures_in_window: 1,
            },
        };
        d.apply(&event("a", 2, failed));
        d.apply(&event("a", 3, state("restarting")));
        d.apply(&event("a", 4, state("running")));
        assert_eq!(
            d.rows["a"].failures, 1,
            "a restart after a pause keeps its count"
        );
    }

    #[test]
    fn elapsed_times_read_short() {
        assert_eq!(elapsed(42_999), "42s");
        assert_eq!(elapsed(187_000), "3m07s");
        assert_eq!(elapsed(7_500_000), "2h05m");
    }
}
