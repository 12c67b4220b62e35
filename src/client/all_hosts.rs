//! `eukhe ls --all-hosts`: this machine and every host `hosts.toml` names,
//! asked at once, each within `HOST_ANSWER_MS`; one table with a HOST
//! column, a host that did not answer one row saying why.

use std::process::ExitCode;
use std::time::Duration;

use serde_json::{json, Value};

use super::connect::connect_to;
use super::error::ClientError;
use super::hosts::{every_host, load_hosts, NamedTarget};
use super::render::{
    escape_controls, most_recent_last, session_cells, table, SESSION_COLUMNS, SESSION_RIGHT,
};
use super::stdout;
use crate::laws::replace::ClientStart;
use crate::laws::timing::{duration_in_words, HOST_ANSWER_MS};
use crate::protocol::message::{Request, Response, SessionInfo};

/// `ls --all-hosts` exits 3 when some host did not answer (its rows say
/// why), so a script tells a partial table from a whole one.
pub const SOME_HOST_UNREACHABLE: u8 = 3;

/// What one host answered.
#[derive(Clone, Debug, PartialEq)]
pub enum HostAnswer {
    /// Its sessions.
    Sessions(Vec<SessionInfo>),
    /// No list: why (ssh's line, the daemon's, or the deadline missed).
    Unreachable(String),
}

/// One row of the table: a host's session, or a host that did not answer.
#[derive(Clone, Debug, PartialEq)]
pub struct HostRow {
    /// The host's name.
    pub host: String,
    /// The session, or why the host gave none.
    pub row: Result<SessionInfo, String>,
}

/// The hosts' answers as rows, in the hosts' order; each host's sessions
/// the one active most recently last.
pub fn merge(answers: Vec<(String, HostAnswer)>) -> Vec<HostRow> {
    let mut rows = Vec::new();
    for (host, answer) in answers {
        match answer {
            HostAnswer::Sessions(mut sessions) => {
                most_recent_last(&mut sessions);
                rows.extend(sessions.into_iter().map(|s| HostRow {
                    host: host.clone(),
                    row: Ok(s),
                }));
            }
            HostAnswer::Unreachable(why) => rows.push(HostRow {
                host,
                row: Err(why),
            }),
        }
    }
    rows
}

/// The rows as JSON: each session with its `host`; a host that did not
/// answer as `{host, unreachable: why}`.
pub fn rows_json(rows: &[HostRow]) -> Value {
    let rows: Vec<Value> = rows
        .iter()
        .map(|r| match &r.row {
            Ok(session) => {
                let mut value = serde_json::to_value(session).unwrap_or_default();
                if let Value::Object(fields) = &mut value {
                    fields.insert("host".into(), json!(r.host));
                }
                value
            }
            Err(why) => json!({ "host": r.host, "unreachable": why }),
        })
        .collect();
    Value::Array(rows)
}

/// The rows as a table for people; `now_ms` (wall clock) dates activity.
pub fn rows_table(rows: &[HostRow], now_ms: u64) -> String {
    let mut header = vec!["HOST".to_string()];
    header.extend(SESSION_COLUMNS.map(String::from));
    let mut lines = vec![header];
    for r in rows {
        let mut line = vec![escape_controls(&r.host)];
        match &r.row {
            // Another machine's directory cannot be looked at from here.
            Ok(s) => line.extend(session_cells(s, now_ms, false)),
            Err(why) => {
                line.extend(["-", "-", "unreachable", "", "", "", "", ""].map(String::from));
                line.push(escape_controls(why));
            }
        }
        lines.push(line);
    }
    let mut right = vec![false];
    right.extend(SESSION_RIGHT);
    table(&lines, &right)
}

/// Ask one host for its sessions within `HOST_ANSWER_MS`, as `start`.
pub async fn ask_host(host: &NamedTarget, start: ClientStart) -> HostAnswer {
    let asked = async {
        let mut client = connect_to(&host.target, start).await?;
        client.ask(Request::List).await
    };
    match tokio::time::timeout(Duration::from_millis(HOST_ANSWER_MS), asked).await {
        Ok(Ok(Response::Sessions { sessions })) => HostAnswer::Sessions(sessions),
        Ok(Ok(other)) => HostAnswer::Unreachable(ClientError::answer(other).to_string()),
        Ok(Err(e)) => HostAnswer::Unreachable(e.to_string()),
        Err(_) => HostAnswer::Unreachable(format!(
            "no answer within {}",
            duration_in_words(HOST_ANSWER_MS)
        )),
    }
}

/// Ask every host at once: each answer, in the hosts' order.
pub async fn ask_every_host(
    hosts: &[NamedTarget],
    start: ClientStart,
) -> Vec<(String, HostAnswer)> {
    let asked = hosts.iter().map(|host| async move {
        let answer = ask_host(host, start).await;
        (host.name.clone(), answer)
    });
    futures_util::future::join_all(asked).await
}

/// `ls --all-hosts`: every host's sessions in one table (or JSON array).
pub async fn list_all_hosts(json: bool) -> Result<ExitCode, ClientError> {
    let hosts = every_host(&load_hosts()?)?;
    let rows = merge(ask_every_host(&hosts, ClientStart::Ls).await);
    let text = match json {
        true => format!(
            "{}\n",
            serde_json::to_string_pretty(&rows_json(&rows)).unwrap_or_default()
        ),
        false => rows_table(&rows, crate::clock::wall_ms()),
    };
    stdout::print(&text)?;
    Ok(match rows.iter().any(|r| r.row.is_err()) {
        true => ExitCode::from(SOME_HOST_UNREACHABLE),
        false => ExitCode::SUCCESS,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(id: &str, active_ms: u64) -> SessionInfo {
        serde_json::from_value(json!({
            "id": id, "name": format!("n-{id}"), "state": "idle", "pid": null,
            "build": null, "failures_in_window": 0, "cwd": "/w", "active_ms": active_ms,
        }))
        .unwrap()
    }

    fn rows() -> Vec<HostRow> {
        merge(vec![
            (
                "local".into(),
                HostAnswer::Sessions(vec![session("b", 20), session("a", 10)]),
            ),
            (
                "down".into(),
                HostAnswer::Unreachable("no answer within 10 s".into()),
            ),
            ("build".into(), HostAnswer::Sessions(vec![session("c", 5)])),
        ])
    }

    #[test]
    fn rows_keep_the_hosts_order_and_an_unreachable_host_is_one_row() {
        let shown: Vec<_> = rows()
            .iter()
            .map(|r| (r.host.clone(), r.row.clone().map(|s| s.id)))
            .collect();
        assert_eq!(
            shown,
            vec![
                ("local".into(), Ok("a".into())),
                ("local".into(), Ok("b".into())),
                ("down".into(), Err("no answer within 10 s".into())),
                ("build".into(), Ok("c".into())),
            ]
        );
        assert!(merge(vec![("quiet".into(), HostAnswer::Sessions(vec![]))]).is_empty());
    }

    #[test]
    fn the_table_has_a_host_column_and_the_json_a_host_field() {
        let table = rows_table(&rows(), 20);
        let lines: Vec<_> = table.lines().collect();
        assert!(lines[0].starts_with("HOST   ID  NAME"), "{table}");
        assert!(lines[1].starts_with("local  a   n-a"), "{table}");
        assert!(
            lines[3].starts_with("down   -   -     unreachable"),
            "{table}"
        );
        assert!(lines[3].ends_with("no answer within 10 s"), "{table}");
        let json = rows_json(&rows());
        assert_eq!(json[0]["host"], "local");
        assert_eq!(json[0]["id"], "a");
        assert_eq!(
            json[2],
            json!({ "host": "down", "unreachable": "no answer within 10 s" })
        );
        assert_eq!(json[3]["host"], "build");
    }
}
