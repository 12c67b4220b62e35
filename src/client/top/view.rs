//! `top`'s rendering: the dashboard's state drawn into a frame (ratatui),
//! fitting an 80x24 terminal: the table, the selected session in full, a
//! footer with the daemon and the counts, and a line of keys or news.

use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Paragraph, Row as TableRow, Table, TableState};
use ratatui::Frame;

use super::state::{elapsed, Dashboard, Mode, Row};

/// The table's columns: header and width (the last takes what is left).
const COLUMNS: [(&str, u16); 9] = [
    ("NAME", 10),
    ("STATE", 9),
    ("RUN", 14),
    ("TIME", 5),
    ("Q", 2),
    ("BG", 2),
    ("F", 2),
    ("CWD", 12),
    ("LAST OUTPUT", 0),
];

/// Draw `dashboard` as it is at wall-clock `now_ms`.
pub fn draw(frame: &mut Frame, dashboard: &Dashboard, now_ms: u64) {
    let [table_area, detail_area, footer_area, keys_area] = Layout::vertical([
        Constraint::Min(3),
        Constraint::Length(3),
        Constraint::Length(1),
        Constraint::Length(1),
    ])
    .areas(frame.area());

    let mut state = TableState::default().with_selected(dashboard.selected_index());
    frame.render_stateful_widget(table(dashboard, now_ms), table_area, &mut state);
    frame.render_widget(Paragraph::new(detail(dashboard)), detail_area);
    frame.render_widget(
        Paragraph::new(footer(dashboard)).style(Style::default().add_modifier(Modifier::REVERSED)),
        footer_area,
    );
    frame.render_widget(Paragraph::new(keys(dashboard)), keys_area);
}

/// The table of the visible sessions, one row each.
fn table(dashboard: &Dashboard, now_ms: u64) -> Table<'static> {
    let visible = dashboard.visible();
    let rows: Vec<TableRow> = visible
        .iter()
        .map(|row| TableRow::new(cells(row, now_ms)))
        .collect();
    let widths: Vec<Constraint> = COLUMNS
        .iter()
        .map(|(_, width)| match width {
            0 => Constraint::Min(4),
            width => Constraint::Length(*width),
        })
        .collect();
    let header = TableRow::new(COLUMNS.iter().map(|(name, _)| *name))
        .style(Style::default().add_modifier(Modifier::BOLD | Modifier::UNDERLINED));
    Table::new(rows, widths)
        .header(header)
        .column_spacing(1)
        .row_highlight_style(Style::default().add_modifier(Modifier::REVERSED))
}

/// The selected session in full: name, id and directory, its run, its
/// last output line.
fn detail(dashboard: &Dashboard) -> Vec<Line<'static>> {
    let selected = dashboard
        .selected
        .as_ref()
        .and_then(|id| dashboard.rows.get(id));
    match selected {
        Some(row) => vec![
            Line::from(format!("{} ({}) in {}", row.name, row.id, row.cwd)),
            Line::from(match &row.run {
                Some((input, text, _)) => format!("run {input}: {text}"),
                None => "no run".to_string(),
            }),
            Line::from(format!("> {}", row.last_line)),
        ],
        None => vec![Line::from("no session: `eukhe new` creates one")],
    }
}

/// The daemon, its backend and the counts, and whether the dashboard is
/// waiting for a daemon.
fn footer(dashboard: &Dashboard) -> String {
    let (sessions, busy, given_up) = dashboard.counts();
    let link = if dashboard.connected {
        ""
    } else {
        " · waiting for the daemon"
    };
    format!(
        "eukhe {} · {} backend · {sessions} sessions, {busy} busy, {given_up} given up{link}",
        dashboard.version, dashboard.backend
    )
}

/// The bottom line: the filter being typed, news, or the keys.
fn keys(dashboard: &Dashboard) -> String {
    match &dashboard.mode {
        Mode::Filter => format!("filter: {}▏ (Enter keeps it, Esc ends)", dashboard.filter),
        Mode::ConfirmRemove { .. } => dashboard.message.clone(),
        Mode::Normal if !dashboard.message.is_empty() => dashboard.message.clone(),
        Mode::Normal => {
            "↑↓ select  ⏎ attach  c cancel  r restart  d remove  / filter  q quit".to_string()
        }
    }
}

fn cells(row: &Row, now_ms: u64) -> Vec<String> {
    let (run, time) = match &row.run {
        Some((input, text, started_ms)) => (
            format!("{input} {text}"),
            elapsed(now_ms.saturating_sub(*started_ms)),
        ),
        None => (String::new(), String::new()),
    };
    vec![
        row.name.clone(),
        // A session whose run waits for input is busy, and says why.
        match row.waiting {
            true => "waiting".to_string(),
            false => row.state.clone(),
        },
        run,
        time,
        row.queued.to_string(),
        row.jobs.to_string(),
        row.failures.to_string(),
        short_path(&row.cwd),
        row.last_line.clone(),
    ]
}

/// A working directory as the table has room for: home as `~`, and the
/// end of a long path.
fn short_path(path: &str) -> String {
    let home = std::env::var("HOME").unwrap_or_default();
    let path = match path.strip_prefix(&home) {
        Some(rest) if !home.is_empty() && (rest.is_empty() || rest.starts_with('/')) => {
            format!("~{rest}")
        }
        _ => path.to_string(),
    };
    let chars: Vec<char> = path.chars().collect();
    let room = COLUMNS[7].1 as usize;
    if chars.len() <= room {
        path
    } else {
        let tail: String = chars[chars.len() - (room - 1)..].iter().collect();
        format!("…{tail}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::message::{SessionInfo, StatusInfo};
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;

    #[test]
    fn a_busy_session_fits_an_80_by_24_terminal() {
        let info = SessionInfo {
            id: "k3x9q2".into(),
            name: "build".into(),
            state: "busy".into(),
            pid: Some(10),
            build: None,
            failures_in_window: 1,
            jobs: 0,
            kernel_pid: None,
            bash: Vec::new(),
            waiting: false,
            resources: None,
            cwd: "/srv/project".into(),
            created_ms: 0,
            active_ms: 0,
            problem: None,
        };
        let status = StatusInfo {
            version: "0.1.0".into(),
            build_id: "b".into(),
            pid: 1,
            backend: "process".into(),
            protocol: 1,
            capabilities: vec![],
            sessions: 1,
            running: 1,
            busy: 1,
            given_up: 0,
            socket: String::new(),
            state_dir: String::new(),
        };
        let mut dashboard = Dashboard::new(&[info], &status);
        dashboard.rows.get_mut("k3x9q2").unwrap().run = Some((4, "make test".into(), 1_000));
        let mut terminal = Terminal::new(TestBackend::new(80, 24)).unwrap();
        terminal
            .draw(|frame| draw(frame, &dashboard, 66_000))
            .unwrap();
        let screen: String = terminal
            .backend()
            .buffer()
            .content()
            .iter()
            .map(|cell| cell.symbol())
            .collect();
        assert!(screen.contains("build"), "{screen}");
        assert!(screen.contains("4 make test"), "{screen}");
        assert!(screen.contains("1m05s"), "{screen}");
        assert!(
            screen.contains("1 sessions, 1 busy, 0 given up"),
            "{screen}"
        );
    }

    #[test]
    fn a_session_whose_run_waits_for_input_says_waiting() {
        let row = |waiting| Row {
            id: "a".into(),
            name: "a".into(),
            state: "busy".into(),
            cwd: "/".into(),
            run: None,
            queued: 0,
            texts: Default::default(),
            jobs: 0,
            failures: 0,
            last_line: String::new(),
            waiting,
        };
        assert_eq!(cells(&row(true), 0)[1], "waiting");
        assert_eq!(cells(&row(false), 0)[1], "busy");
    }
}
