//! The `wait` tool of `eukhe mcp`: `eukhe wait` for a model. Its arguments
//! and wording here, the wait itself is the command line's
//! (`client::wake`): it follows the session's durable transcript from a
//! cursor, so a model that passes `next_since` back misses nothing.

use regex::Regex;
use rmcp::model::CallToolResult;

use super::server::answer;
use crate::client::wake::{wait, WaitArgs as ClientWaitArgs, WaitOutcome};
use crate::client::ClientError;
use crate::session::wake::Condition;

// `rmcp` re-exports the `schemars` it derives schemas with.
use rmcp::schemars;

/// Arguments of `wait`.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WaitArgs {
    /// The session: its id or its name.
    pub session: String,
    /// Until this run has ended (at once if it already has): the number
    /// `send` or a `bash` past its timeout gave.
    #[serde(default)]
    pub run: Option<u64>,
    /// Until any run ends after `since`.
    #[serde(default)]
    pub any_run: bool,
    /// Until a line of output after `since` matches this regular
    /// expression (Rust `regex` syntax: escape `?`, `[`, `(`).
    #[serde(default, rename = "match")]
    pub regex: Option<String>,
    /// Until the session is idle: no run, queued input or background job.
    #[serde(default)]
    pub idle: bool,
    /// Only what happened after this cursor: the `next_since` of an
    /// earlier `wait`, or an entry's `seq` from `log`. Default: from now.
    #[serde(default)]
    pub since: Option<u64>,
    /// How long to wait, in milliseconds (default 30000, at most one
    /// hour). Past it the answer says timed_out=true; everything goes on
    /// running.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

/// Why a `wait` call cannot be carried out.
#[derive(Debug, thiserror::Error)]
pub enum WaitRefused {
    /// Nothing to wait for.
    #[error("wait needs `run`, `any_run: true`, `match` or `idle: true`")]
    NoCondition,
    /// One run, or any: not both.
    #[error("wait takes `run` or `any_run`, not both")]
    RunAndAnyRun,
    /// `match` does not compile.
    #[error("`match` {regex:?} is not a regular expression: {why}")]
    BadRegex {
        /// The expression given.
        regex: String,
        /// What the regex crate said of it.
        why: String,
    },
}

impl WaitArgs {
    /// The wait these arguments ask for, or why there is none.
    pub fn to_client(&self) -> Result<ClientWaitArgs, WaitRefused> {
        if self.run.is_some() && self.any_run {
            return Err(WaitRefused::RunAndAnyRun);
        }
        if self.run.is_none() && !self.any_run && self.regex.is_none() && !self.idle {
            return Err(WaitRefused::NoCondition);
        }
        let regex = match &self.regex {
            Some(regex) => Some(Regex::new(regex).map_err(|e| WaitRefused::BadRegex {
                regex: regex.clone(),
                why: e.to_string(),
            })?),
            None => None,
        };
        Ok(ClientWaitArgs {
            session: self.session.clone(),
            condition: Condition {
                run: self.run,
                any_run: self.any_run,
                regex,
                idle: self.idle,
            },
            since: self.since,
            timeout_ms: self.timeout_ms,
        })
    }
}

/// The answer for a model: what woke the wait (or that it timed out) and
/// the cursor to pass next.
pub fn wait_text(outcome: &WaitOutcome) -> String {
    let mut text = String::new();
    if outcome.timed_out {
        text += &format!(
            "timed out after {} ms, nothing met; everything goes on running\n",
            outcome.timeout_ms
        );
    }
    for event in &outcome.events {
        let seq = event.seq.map_or(String::new(), |seq| format!("[{seq}] "));
        text += &format!("{seq}{}\n", event.describe());
    }
    if let Some(status) = outcome.status {
        text += &format!("exit status {status}\n");
    }
    if let Some(next) = outcome.next_since {
        text += &format!("next_since: {next} (pass it as `since` to wait for what comes next)\n");
    }
    text
}

/// `wait`.
pub async fn call(args: WaitArgs) -> Result<CallToolResult, ClientError> {
    let wait_args = args
        .to_client()
        .map_err(|e| ClientError::Usage(e.to_string()))?;
    let outcome = wait(&wait_args).await?;
    Ok(answer(wait_text(&outcome), outcome.json()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::event::{Event, EventKind};

    fn args(json: serde_json::Value) -> WaitArgs {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn a_wait_needs_one_condition_and_run_excludes_any_run() {
        let none = args(serde_json::json!({"session": "s"}));
        assert!(matches!(none.to_client(), Err(WaitRefused::NoCondition)));
        let both = args(serde_json::json!({"session": "s", "run": 2, "any_run": true}));
        assert!(matches!(both.to_client(), Err(WaitRefused::RunAndAnyRun)));
        let bad = args(serde_json::json!({"session": "s", "match": "("}));
        assert!(matches!(bad.to_client(), Err(WaitRefused::BadRegex { .. })));
        let run = args(serde_json::json!({"session": "s", "run": 2, "since": 7}));
        let client = run.to_client().unwrap();
        assert_eq!((client.condition.run, client.since), (Some(2), Some(7)));
        assert!(serde_json::from_value::<WaitArgs>(
            serde_json::json!({"session": "s", "surprise": 1})
        )
        .is_err());
    }

    #[test]
    fn the_answer_names_the_event_the_status_and_the_next_cursor() {
        let event = Event::session(
            0,
            "s",
            "s",
            EventKind::RunFinished {
                input: 3,
                status: 4,
                signal: None,
                cancelled: false,
            },
        )
        .at_seq(Some(12));
        let outcome = WaitOutcome {
            events: vec![event],
            next_since: Some(12),
            status: Some(4),
            timed_out: false,
            timeout_ms: 30_000,
        };
        let text = wait_text(&outcome);
        assert!(text.contains("[12] s: run 3 exited 4"), "{text}");
        assert!(text.contains("exit status 4"), "{text}");
        assert!(text.contains("next_since: 12"), "{text}");
        let timed_out = WaitOutcome {
            events: Vec::new(),
            next_since: Some(12),
            status: None,
            timed_out: true,
            timeout_ms: 500,
        };
        let text = wait_text(&timed_out);
        assert!(text.starts_with("timed out after 500 ms"), "{text}");
    }
}
