//! `eukhe mcp`: the sessions as the shell tool of any coding agent, over
//! the Model Context Protocol (standard input and output, `rmcp`).
//!
//! An agent's own shell tool dies with the agent and forgets `cd` and
//! `export` between calls; these tools run in eukhe sessions, which keep
//! their shell state, outlive the agent, the daemon and a reboot, and keep
//! a transcript to read back. `tools` holds the arguments, the output cap
//! and the wording of answers (no I/O); `server` carries each call out
//! with the command line's client code. Each line the client sends passes
//! `lines` first, which answers what is no JSON-RPC message (and any
//! request before `initialize`) as the protocol asks; the library sees
//! the rest.

pub mod hosts;
mod lines;
mod reset_call;
mod screen_calls;
pub mod screen_tools;
mod server;
mod terms;
pub mod tools;
pub mod wake_tool;
mod window_tools;

use std::process::ExitCode;

use rmcp::ServiceExt as _;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::sync::mpsc;

use crate::client::cli::finish;
use crate::client::ClientError;
use lines::{Gate, Verdict};

/// How many bytes may wait between the line filter, the library and
/// standard output.
const PIPE_BYTES: usize = 64 * 1024;

/// How many of the filter's answers may wait for standard output: a
/// client that sends faster than it reads is read more slowly.
const ANSWERS_WAITING: usize = 64;

/// `eukhe mcp [--host H]...`: serve, then exit as every client command
/// does.
pub fn run(hosts: &[String]) -> ExitCode {
    let hosts = match hosts::ServedHosts::resolve(hosts) {
        Ok(hosts) => hosts,
        Err(e) => return finish(Err(e)),
    };
    finish(crate::runtime::block_on_client("client", serve(hosts)))
}

/// Serve MCP on standard input and output until the client closes them.
/// Standard output carries the protocol alone: nothing else may print
/// there (messages go to standard error).
pub async fn serve(hosts: hosts::ServedHosts) -> Result<ExitCode, ClientError> {
    let (to_library, library_in) = tokio::io::duplex(PIPE_BYTES);
    let (library_out, from_library) = tokio::io::duplex(PIPE_BYTES);
    let (answers, answered) = mpsc::channel(ANSWERS_WAITING);
    let filter = tokio::spawn(filter_lines(to_library, answers));
    let writer = tokio::spawn(write_lines(from_library, answered));
    let served = serve_library(library_in, library_out, hosts).await;
    // The library has closed its side: what it and the filter said is
    // written out before the process ends.
    filter.abort();
    let _ = writer.await;
    served
}

/// The library's half: its initialize, then its requests until its input
/// ends.
async fn serve_library(
    input: tokio::io::DuplexStream,
    output: tokio::io::DuplexStream,
    hosts: hosts::ServedHosts,
) -> Result<ExitCode, ClientError> {
    let running = server::Tools::on_hosts(hosts)
        .serve((input, output))
        .await
        .map_err(|e| match e {
            rmcp::service::ServerInitializeError::ConnectionClosed(_) => ClientError::Mcp {
                what: "standard input ended before the client's `initialize`",
                detail: "an MCP client starts with it, and nothing was served".to_string(),
            },
            e => ClientError::Mcp {
                what: "the client's initialize failed",
                detail: e.to_string(),
            },
        })?;
    running.waiting().await.map_err(|e| ClientError::Mcp {
        what: "serving ended",
        detail: e.to_string(),
    })?;
    Ok(ExitCode::SUCCESS)
}

/// Standard input's lines: to the library, or answered here
/// (`lines::Gate`). Its end closes the library's input.
async fn filter_lines(mut library: tokio::io::DuplexStream, answers: mpsc::Sender<String>) {
    let mut stdin = BufReader::new(tokio::io::stdin());
    let mut gate = Gate::default();
    let mut line = Vec::new();
    loop {
        line.clear();
        match stdin.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        let text = text.strip_suffix(b"\r").unwrap_or(text);
        match gate.judge(text) {
            Verdict::Forward => {
                if library.write_all(text).await.is_err() || library.write_all(b"\n").await.is_err()
                {
                    return;
                }
            }
            Verdict::Answer(answer) => {
                if answers.send(answer).await.is_err() {
                    return;
                }
            }
            Verdict::Drop => {}
        }
    }
}

/// Standard output: the library's lines and the filter's answers, each
/// line whole; until both have ended.
async fn write_lines(library: tokio::io::DuplexStream, mut answers: mpsc::Receiver<String>) {
    let mut library = BufReader::new(library).lines();
    let mut stdout = tokio::io::stdout();
    let mut library_open = true;
    let mut answers_open = true;
    while library_open || answers_open {
        let line = tokio::select! {
            line = library.next_line(), if library_open => match line {
                Ok(Some(line)) => line,
                _ => {
                    library_open = false;
                    continue;
                }
            },
            answer = answers.recv(), if answers_open => match answer {
                Some(answer) => answer,
                None => {
                    answers_open = false;
                    continue;
                }
            },
        };
        let written = async {
            stdout.write_all(line.as_bytes()).await?;
            stdout.write_all(b"\n").await?;
            stdout.flush().await
        };
        // A client that stopped reading has nothing more to be told.
        if written.await.is_err() {
            return;
        }
    }
}
