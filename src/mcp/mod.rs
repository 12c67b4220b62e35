//! `eukhe mcp`: the sessions as the shell tool of any coding agent, over
//! the Model Context Protocol (standard input and output, `rmcp`).
//!
//! An agent's own shell tool dies with the agent and forgets `cd` and
//! `export` between calls; these tools run in eukhe sessions, which keep
//! their shell state, outlive the agent, the daemon and a reboot, and keep
//! a transcript to read back. `tools` holds the arguments, the output cap
//! and the wording of answers (no I/O); `server` carries each call out
//! with the command line's client code.

mod server;
pub mod tools;

use std::process::ExitCode;

use rmcp::transport::stdio;
use rmcp::ServiceExt as _;

use crate::client::ClientError;

/// Serve MCP on standard input and output until the client closes them.
/// Standard output carries the protocol alone: nothing else may print
/// there (messages go to standard error).
pub async fn serve() -> Result<ExitCode, ClientError> {
    let running = server::Tools::new()
        .serve(stdio())
        .await
        .map_err(|e| ClientError::Mcp {
            what: "the client's initialize failed",
            detail: e.to_string(),
        })?;
    running.waiting().await.map_err(|e| ClientError::Mcp {
        what: "serving ended",
        detail: e.to_string(),
    })?;
    Ok(ExitCode::SUCCESS)
}
