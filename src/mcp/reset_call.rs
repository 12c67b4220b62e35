//! `bash` with `restart`: the persistent bash tool's fresh shell, as
//! `eukhe reset` gives it, then the command (if any) in that shell.

use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::json;

use super::server::answer;
use super::tools::BashArgs;
use crate::client::reset::reset_shell;
use crate::client::ClientError;
use crate::laws::replace::ClientStart;

/// Why a `bash` call without a command is refused.
pub const NO_COMMAND: &str = "bash needs `command` (or `restart: true` for a fresh shell)";

/// The line that says the shell was reset.
fn restarted_line(session: &str) -> String {
    format!(
        "[the shell of session {session} was restarted: a fresh shell in its first working \
         directory with its first environment; the transcript is kept]"
    )
}

/// With `restart`, reset the session's shell before anything else; the
/// line saying so (none without `restart`).
pub async fn restart_first(args: &BashArgs) -> Result<Option<String>, ClientError> {
    if !args.restart {
        return Ok(None);
    }
    reset_shell(&args.session, args.force, ClientStart::Mcp).await?;
    Ok(Some(restarted_line(&args.session)))
}

/// The answer of a `restart` without a command.
pub fn restarted_only(session: &str) -> CallToolResult {
    answer(
        format!("{}\n", restarted_line(session)),
        json!({ "restarted": true }),
    )
}

/// A command's answer, after the line saying the shell was reset first.
pub fn after_restart(restarted: Option<String>, mut result: CallToolResult) -> CallToolResult {
    let Some(line) = restarted else {
        return result;
    };
    result.content.insert(0, ContentBlock::text(line));
    if let Some(serde_json::Value::Object(fields)) = result.structured_content.as_mut() {
        fields.insert("restarted".into(), json!(true));
    }
    result
}
