//! The MCP server: each tool is a thin layer over the client code the
//! command line uses (`client::connect`, `client::attach::open`,
//! `client::log::output_until_end`), so a tool call reaches the daemon,
//! starts it when none listens and rides through a lost worker exactly as
//! the command does. It is a background client: it never replaces a
//! daemon.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::handler::server::tool::ToolCallContext;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelledNotificationParam,
    ContentBlock, Implementation, RequestId, ServerCapabilities, ServerConfig,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{tool, tool_handler, tool_router, ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::{json, Value};
use tokio::sync::Notify;

use super::hosts::{self, ServedHosts};
use super::reset_call;
use super::screen_calls;
use super::screen_tools::{ScreenArgs, SendKeysArgs, WaitForArgs};
use super::tools::{
    bash_gap, bash_trailer, check_arguments, read_on, BashArgs, CancelArgs, CappedOutput, LogArgs,
    LogPage, NewSessionArgs, NoArgs, RemoveArgs, SendArgs, OUTPUT_CAP_BYTES,
};
use super::wake_tool::WaitArgs;
use crate::build_id::version;
use crate::client::attach::open;
use crate::client::cli::{absolute, session_env, unexpected};
use crate::client::connect::{connect, Client};
use crate::client::log::output_until_end;
use crate::client::render::most_recent_last;
use crate::client::route;
use crate::client::ClientError;
use crate::laws::replace::ClientStart;
use crate::laws::timing::MCP_BASH_TIMEOUT_DEFAULT_MS;
use crate::protocol::message::{Request, Response, SessionRequest};

/// What an agent reads first about this server.
const INSTRUCTIONS: &str = "eukhe keeps shell sessions alive outside this conversation. Create \
a session with `new_session` (or find one with `list_sessions`), then run commands in it with \
`bash`: the working directory, variables, functions and aliases persist from call to call, and \
the session survives this agent's exit, a crash of eukhe's own processes and a reboot. Long \
commands: `bash` answers after `timeout_ms` with the output so far while the command keeps \
running (follow it with `log`, stop it with `cancel`), or queue them with `send`. A shell in a \
bad state: `bash` with `restart: true` gives the session a fresh one. Every command \
and its output stay in the session's transcript (`log`). Programs that prompt or draw a \
screen: `bash` with `tty: true`, then read it with `screen`, type with `send_keys` and wait \
with `wait_for`, as a person at the terminal would.";

/// The tools, and the calls a client may still cancel.
#[derive(Clone, Default)]
pub struct Tools {
    /// `bash` calls in flight, by request: a client's
    /// `notifications/cancelled` for one wakes it to cancel its command.
    cancels: Arc<Mutex<HashMap<RequestId, Arc<Notify>>>>,
    /// The hosts `--host` named: each call runs on its reference's.
    hosts: Arc<ServedHosts>,
}

/// A tool call's answer: text for the model, the same facts as JSON.
pub(super) fn answer(text: String, structured: Value) -> CallToolResult {
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    result.structured_content = Some(structured);
    result
}

/// A valid call that failed: the command line's one line, as an error
/// result the model reads (not a protocol error).
fn failed(error: ClientError) -> CallToolResult {
    let line = super::terms::in_tool_terms(&error.to_string());
    CallToolResult::error(vec![ContentBlock::text(line)])
}

fn outcome(result: Result<CallToolResult, ClientError>) -> Result<CallToolResult, McpError> {
    Ok(result.unwrap_or_else(failed))
}

/// A `bash` call's registration for its client's cancel; ended with the
/// call.
struct CancelWatch {
    cancels: Arc<Mutex<HashMap<RequestId, Arc<Notify>>>>,
    id: RequestId,
    notify: Arc<Notify>,
}

impl CancelWatch {
    fn new(tools: &Tools, id: RequestId) -> CancelWatch {
        let notify = Arc::new(Notify::new());
        lock(&tools.cancels).insert(id.clone(), notify.clone());
        CancelWatch {
            cancels: tools.cancels.clone(),
            id,
            notify,
        }
    }
}

impl Drop for CancelWatch {
    fn drop(&mut self) {
        lock(&self.cancels).remove(&self.id);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding the map leaves it usable: it holds no
    // invariant beyond its entries.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// How a `bash` call's wait ended.
enum Waited {
    Ended(Result<crate::client::log::InputEnd, ClientError>),
    TimedOut,
    Cancelled,
}

#[tool_router]
impl Tools {
    /// Tools over the sessions of `hosts` (none: this process's target).
    pub fn on_hosts(hosts: ServedHosts) -> Tools {
        Tools {
            hosts: Arc::new(hosts),
            ..Tools::default()
        }
    }

    #[tool(
        description = "Create a durable shell session and return its id and name. A session is \
        a bash shell kept by the eukhe daemon, not by this conversation: its working directory, \
        variables, functions and aliases persist from call to call, and it survives this \
        agent's exit or crash, a restart of eukhe and a reboot, with a transcript of every \
        command and its output. Create one per task and pass its id or name to `bash`, `send` \
        and `log`."
    )]
    async fn new_session(
        &self,
        Parameters(args): Parameters<NewSessionArgs>,
    ) -> Result<CallToolResult, McpError> {
        outcome(new_session(args).await)
    }

    #[tool(
        description = "List the sessions, the one active most recently last: id, name, state \
        (idle, busy, running, restarting, saved, given-up, damaged), worker and kernel pid, \
        background jobs, failures in the restart window, last activity (milliseconds since the \
        epoch) and the shell's working directory. The records of `eukhe ls --json`."
    )]
    async fn list_sessions(
        &self,
        Parameters(NoArgs {}): Parameters<NoArgs>,
    ) -> Result<CallToolResult, McpError> {
        outcome(list_sessions().await)
    }

    #[tool(
        description = "Run a bash command line now in a session's shell and return its output \
        (standard output as written, each standard error line marked `[stderr] `) and exit \
        status. `cd`, `export`, functions and aliases persist in the session for later calls. \
        It runs at once, beside any queued run. Still running after timeout_ms (default 30000), \
        the answer gives the output so far and its number, and the command goes on in the \
        session: read the rest with `log` (run = that number), stop it with `cancel` (run = \
        that number). Output over 32 KiB is cut in the middle; all of it stays in the \
        transcript. Cancelling this call cancels the command. With tty=true the command runs \
        on a terminal (rows, cols: default 24x80), for programs that prompt or draw a screen \
        (`git rebase -i`, `read -p`, a password prompt, `npm init`, vim): the call answers when \
        it ends, when it waits for input, or at timeout_ms, with its screen, never hanging on a \
        prompt; answer the prompt with `send_keys`, then `wait_for`. restart=true gives the \
        session a fresh shell first (its first directory and environment; the transcript is \
        kept), with or without a command; it is refused while something runs unless \
        force=true."
    )]
    async fn bash(
        &self,
        Parameters(args): Parameters<BashArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        // Registered before the first await: the client's cancel for this
        // call is read after the call itself, and the runtime runs this
        // task's first step before the task that carries the cancel.
        let watch = CancelWatch::new(self, context.id.clone());
        if !args.restart && args.command.is_none() {
            return Err(McpError::invalid_params(reset_call::NO_COMMAND, None));
        }
        let restarted = match reset_call::restart_first(&args).await {
            Ok(restarted) => restarted,
            Err(e) => return outcome(Err(e)),
        };
        if args.command.is_none() {
            return Ok(reset_call::restarted_only(&args.session));
        }
        let ran = if args.tty {
            screen_calls::bash_tty(args, &watch.notify).await
        } else {
            bash(args, &watch.notify).await
        };
        outcome(ran.map(|result| reset_call::after_restart(restarted, result)))
    }

    #[tool(
        description = "Type keys into a terminal run (`bash` with tty=true): `keys` is a list \
        of key names (Enter, Tab, Escape, BSpace, Up, Down, Left, Right, PageUp, PageDown, F1, \
        C-c for Ctrl-C, M-x for Alt-x) and text typed as it is, e.g. [\"y\", \"Enter\"] or \
        [\":wq\", \"Enter\"]; or `text`, typed exactly. Returns once they are in the \
        terminal's input queue, where they wait for the program to read them as typed keys \
        do, so there is no race with a program that is still starting. Then call `wait_for` \
        to see what the program did with them."
    )]
    async fn send_keys(
        &self,
        Parameters(args): Parameters<SendKeysArgs>,
    ) -> Result<CallToolResult, McpError> {
        outcome(screen_calls::send_keys(args).await)
    }

    #[tool(
        description = "Show a terminal run's screen as a person would see it now: its rows of \
        text, the cursor, whether the program is full-screen (vim, less), whether it waits \
        for input, and its exit status once it ended. Default: the session's running \
        terminal run, else the last one that ended; `run` names another."
    )]
    async fn screen(
        &self,
        Parameters(args): Parameters<ScreenArgs>,
    ) -> Result<CallToolResult, McpError> {
        outcome(screen_calls::screen(args).await)
    }

    #[tool(
        description = "Wait until a terminal run's screen matches the regular expression \
        `match` (its rows joined by newlines; Rust regex syntax, so escape ? [ ( as \\? \\[ \
        \\(), or until the run waits for input (`waiting`: its program is blocked reading \
        the terminal and quiet), or until it ends (`end`); any of those given. Answers with \
        the screen and which one held, or at timeout_ms (default 30000) with the screen and \
        timed_out=true (the run goes on). Use it after `bash` with tty=true and after each \
        `send_keys`, instead of sleeping."
    )]
    async fn wait_for(
        &self,
        Parameters(args): Parameters<WaitForArgs>,
    ) -> Result<CallToolResult, McpError> {
        if args.until().is_empty() {
            return Err(McpError::invalid_params(
                "wait_for needs `match`, `waiting: true` or `end: true`",
                None,
            ));
        }
        outcome(screen_calls::wait_for(args).await)
    }

    #[tool(
        description = "Wait for something to happen in a session instead of polling: until \
        run `run` ends (at once if it already has), any run ends (`any_run`), a line of output \
        matches the regular expression `match`, or the session is idle (`idle`), whichever \
        comes first. Events are read from the session's durable transcript after the cursor \
        `since`, so nothing is missed while you were away, the daemon restarted or the machine \
        rebooted: pass the answer's `next_since` as `since` next time. Answers with the event \
        that woke it and the run's exit status, or at timeout_ms (default 30000) with \
        timed_out=true (everything goes on running)."
    )]
    async fn wait(
        &self,
        Parameters(args): Parameters<WaitArgs>,
    ) -> Result<CallToolResult, McpError> {
        if let Err(refused) = args.to_client() {
            return Err(McpError::invalid_params(refused.to_string(), None));
        }
        outcome(super::wake_tool::call(args).await)
    }

    #[tool(
        description = "Queue a bash command line in a session: it runs after the runs queued \
        before it, one at a time, whether or not this agent is still there. Returns its run \
        number: read its output and exit status with `log` (run = that number), stop it with \
        `cancel`."
    )]
    async fn send(
        &self,
        Parameters(args): Parameters<SendArgs>,
    ) -> Result<CallToolResult, McpError> {
        outcome(send(args).await)
    }

    #[tool(
        description = "Read a session's transcript: each input (`[run N] $ command` queued by \
        `send`, `[bash N] $ command`), its output as written (standard error lines marked \
        `[stderr] `), its end (`[run N exited S]`), and notices (`! ...`). Narrow it with \
        `run` (one input's entries), `tail` (the last N entries) or `since` (the entries after \
        entry SEQ). One answer holds at most 32 KiB; when it stops there it says which `since` \
        reads on. For one run's output without re-running it: with `run`, `head` (its first N \
        lines), `tail_lines` (its last N lines), `bytes` (\"START:END\") or `grep` (a regex; its \
        matching lines numbered, `context` lines around them, at most `max_count`, default \
        100); the answer gives the output's size in bytes and lines and says what it left out."
    )]
    async fn log(&self, Parameters(args): Parameters<LogArgs>) -> Result<CallToolResult, McpError> {
        outcome(log(args).await)
    }

    #[tool(
        description = "Cancel a session's running run (SIGINT, then SIGTERM and SIGKILL after a \
        grace); with all=true also withdraw its queued runs. With run=N, cancel that input \
        instead: a `bash` command still running after its timeout, the running run, or a \
        queued run (withdrawn, it never runs)."
    )]
    async fn cancel(
        &self,
        Parameters(args): Parameters<CancelArgs>,
    ) -> Result<CallToolResult, McpError> {
        if args.run.is_some() && args.all {
            return Err(McpError::invalid_params(
                "cancel takes `run` or `all`, not both",
                None,
            ));
        }
        outcome(cancel(args).await)
    }

    #[tool(
        description = "Remove a session for good: its processes end and its transcript and \
        shell state are deleted. A busy session (a running or queued command, a background \
        process) is refused unless force=true, which cancels its work."
    )]
    async fn remove_session(
        &self,
        Parameters(args): Parameters<RemoveArgs>,
    ) -> Result<CallToolResult, McpError> {
        outcome(remove_session(args).await)
    }
}

#[tool_handler]
impl ServerHandler for Tools {
    /// Arguments that do not fit a tool's schema are refused as the
    /// protocol's invalid params (the router alone would answer them as a
    /// failed call), so a client tells a malformed call from a failed one.
    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        check_arguments(&request.name, request.arguments.as_ref())
            .map_err(|refused| McpError::invalid_params(refused.to_string(), None))?;
        if self.hosts.many() {
            return self.call_on_host(request, context).await;
        }
        let call = ToolCallContext::new(self, request, context);
        Self::tool_router().call(call).await
    }

    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("eukhe", version()))
            .with_instructions(INSTRUCTIONS.to_string() + &self.hosts.instructions())
    }

    async fn on_cancelled(
        &self,
        notification: CancelledNotificationParam,
        _context: NotificationContext<RoleServer>,
    ) {
        // Only the client's own cancel ends a command: the server going
        // away (its client closed the connection) leaves it running, as
        // the session outlives its agent.
        if let Some(id) = notification.request_id {
            if let Some(notify) = lock(&self.cancels).get(&id) {
                notify.notify_one();
            }
        }
    }
}

impl Tools {
    /// A call of a many-host server: `list_sessions` asks every host; any
    /// other call runs on its reference's host, its answer naming sessions
    /// by reference.
    async fn call_on_host(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let Some(argument) = hosts::reference_argument(&request.name) else {
            return Ok(self.hosts.list_sessions().await.into());
        };
        let reference = hosts::reference_of(&request, argument).unwrap_or_default();
        let routed = match self.hosts.route(&reference) {
            Ok(routed) => routed,
            Err(why) if argument == "name" => {
                return Ok(hosts::refused(format!(
                    "new_session needs its host: name = \"HOST:NAME\" (or \"HOST:\" for a \
                     name of eukhe's choosing): {why}"
                ))
                .into())
            }
            Err(why) => return Ok(hosts::refused(why).into()),
        };
        let (host, session) = (routed.host.clone(), routed.session);
        let request = hosts::on_host(request, argument, &session);
        let call = ToolCallContext::new(self, request, context);
        let response = route::on(host.target, Self::tool_router().call(call)).await?;
        Ok(match response {
            CallToolResponse::Complete(result) => {
                hosts::with_references(result, &host.name, &session).into()
            }
            other => other,
        })
    }
}

async fn new_session(args: NewSessionArgs) -> Result<CallToolResult, ClientError> {
    let cwd = match args.cwd {
        Some(cwd) => Some(absolute(&cwd)?),
        None => std::env::current_dir()
            .ok()
            .map(|d| d.display().to_string()),
    };
    // The session takes this server's environment, as `eukhe new` takes
    // its shell's: the agent's, as its MCP client configured it.
    let env = session_env(&[], false)?;
    let limits = crate::client::limits::LimitArgs {
        memory_max: args.memory_max,
        cpu_quota: args.cpu_quota,
        tasks_max: args.tasks_max,
    }
    .limits()?;
    let mut client = connect(ClientStart::Mcp).await?;
    let request = Request::New {
        name: args.name,
        cwd,
        env: Some(env),
        limits,
    };
    match client.ask(request).await? {
        Response::Created { id, name, warning } => {
            let mut text = format!(
                "created session {name} (id {id}); run commands in it with `bash` \
                 session={name}"
            );
            let mut created = json!({ "id": id, "name": name });
            if let Some(warning) = warning {
                text.push_str(&format!("\nwarning: {warning}"));
                created["warning"] = warning.into();
            }
            Ok(answer(text, created))
        }
        other => unexpected(other),
    }
}

async fn list_sessions() -> Result<CallToolResult, ClientError> {
    let mut client = connect(ClientStart::Mcp).await?;
    match client.ask(Request::List).await? {
        Response::Sessions { mut sessions } => {
            most_recent_last(&mut sessions);
            let text = serde_json::to_string_pretty(&sessions).unwrap_or_default();
            Ok(answer(text, json!({ "sessions": sessions })))
        }
        other => unexpected(other),
    }
}

async fn bash(args: BashArgs, cancel_asked: &Notify) -> Result<CallToolResult, ClientError> {
    let waited_ms = args.timeout_ms.unwrap_or(MCP_BASH_TIMEOUT_DEFAULT_MS);
    let deadline = tokio::time::Instant::now() + Duration::from_millis(waited_ms);
    let session = args.session;
    let command = args.command.unwrap_or_default();
    let mut client = screen_calls::open_bash(&session, command, None).await?;
    // Its number comes first: a cancel names it, and so does the `log`
    // that follows a command still running. A cancel asked meanwhile is
    // carried out once the number is known.
    let (number, cancel_early) = {
        let first = first_answer(&mut client);
        tokio::pin!(first);
        let mut cancel_early = false;
        loop {
            tokio::select! {
                number = &mut first => break (number?, cancel_early),
                _ = cancel_asked.notified(), if !cancel_early => cancel_early = true,
            }
        }
    };
    let mut output = CappedOutput::new(OUTPUT_CAP_BYTES);
    let waited = if cancel_early {
        Waited::Cancelled
    } else {
        tokio::select! {
            end = output_until_end(&mut client, &session, Some(number), &mut output) => Waited::Ended(end),
            _ = tokio::time::sleep_until(deadline) => Waited::TimedOut,
            _ = cancel_asked.notified() => Waited::Cancelled,
        }
    };
    let (status, cut_short) = match waited {
        Waited::Ended(end) => {
            let end = end?;
            (Some(end.status), end.cut_short)
        }
        Waited::TimedOut => {
            // The command goes on: this call leaves it on purpose.
            screen_calls::leave(&mut client, &session).await;
            (None, None)
        }
        Waited::Cancelled => {
            screen_calls::cancel_input(&session, number).await?;
            (
                None,
                Some("cancelled: its client cancelled the call".to_string()),
            )
        }
    };
    let mut text = output.text(&bash_gap(&session, number));
    text += &bash_trailer(&session, number, status, cut_short.as_deref(), waited_ms);
    text.push('\n');
    let structured = json!({
        "bash": number,
        "output": output.text(&bash_gap(&session, number)),
        "exit_status": status,
        "running": status.is_none() && cut_short.is_none(),
        "truncated": output.truncated(),
    });
    Ok(answer(text, structured))
}

/// The worker's first answer to `bash`: the command's number.
async fn first_answer(client: &mut Client) -> Result<u64, ClientError> {
    match client.receive().await? {
        Response::Queued { input } => Ok(input),
        other => unexpected(other),
    }
}

async fn send(args: SendArgs) -> Result<CallToolResult, ClientError> {
    let request = SessionRequest::Send {
        text: args.command,
        wait: false,
        tty: None,
    };
    let mut client = open(&args.session, ClientStart::Mcp, request).await?;
    match client.receive().await? {
        Response::Queued { input } => Ok(answer(
            format!(
                "queued as run {input}; its output and exit status: `log` session={}, run={input}",
                args.session
            ),
            json!({ "run": input }),
        )),
        other => unexpected(other),
    }
}

async fn log(args: LogArgs) -> Result<CallToolResult, ClientError> {
    if let Some(window) = super::window_tools::window_of(&args).map_err(ClientError::Usage)? {
        let run = args.run.unwrap_or_default();
        let (parts, summary) = crate::client::windows::fetch(
            &args.session,
            run,
            None,
            window.clone(),
            ClientStart::Mcp,
        )
        .await?;
        let (text, structured) =
            super::window_tools::window_text(&args.session, &window, &parts, &summary);
        return Ok(answer(text, structured));
    }
    let request = SessionRequest::Log {
        tail: args.tail,
        input: args.run,
        after: args.since,
        follow: false,
    };
    let mut client = open(&args.session, ClientStart::Mcp, request).await?;
    let mut page = LogPage::new(OUTPUT_CAP_BYTES);
    loop {
        match client.receive().await? {
            Response::Entry(entry) => {
                if !page.offer(&entry) {
                    // The rest is read by the next call; this connection
                    // is dropped mid-replay.
                    break;
                }
            }
            Response::Replayed => break,
            other => return unexpected(other),
        }
    }
    let mut text = page.text();
    if text.is_empty() {
        text = "(no entries)\n".into();
    }
    let hint = read_on(&args.session, &page, args.run);
    if let Some(hint) = &hint {
        text += hint;
        text.push('\n');
    }
    let structured = json!({
        "log": page.text(),
        "last_seq": page.last_seq,
        "more": page.more,
    });
    Ok(answer(text, structured))
}

async fn cancel(args: CancelArgs) -> Result<CallToolResult, ClientError> {
    let request = match args.run {
        Some(input) => SessionRequest::CancelInput { input },
        None => SessionRequest::Cancel { all: args.all },
    };
    let mut client = connect(ClientStart::Mcp).await?;
    let asked = Request::Session {
        session: args.session.clone(),
        request,
    };
    match client.ask(asked).await? {
        Response::Cancelled {
            run,
            withdrawn,
            bash,
        } => {
            let what = if args.run.is_some() { "input" } else { "run" };
            let mut lines: Vec<String> = run
                .iter()
                .map(|r| format!("cancelling {what} {r}"))
                .collect();
            lines.extend(bash.iter().map(|b| format!("cancelling bash {b}")));
            lines.extend(withdrawn.iter().map(|w| format!("withdrew run {w}")));
            if lines.is_empty() {
                lines.push("nothing to cancel".into());
            }
            Ok(answer(
                lines.join("\n"),
                json!({ "cancelled": run, "withdrawn": withdrawn }),
            ))
        }
        other => unexpected(other),
    }
}

async fn remove_session(args: RemoveArgs) -> Result<CallToolResult, ClientError> {
    let mut client = connect(ClientStart::Mcp).await?;
    let request = Request::Remove {
        session: args.session.clone(),
        force: args.force,
    };
    match client.ask(request).await {
        Ok(Response::Removed { id, name }) => Ok(answer(
            format!("removed {name} ({id})"),
            json!({ "id": id, "name": name }),
        )),
        Ok(other) => unexpected(other),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_checks_its_arguments_before_it_runs() {
        let stray = serde_json::json!({ "session": "s", "command": "true", "stray": 1 });
        let tools = Tools::tool_router().list_all();
        assert_eq!(tools.len(), 11);
        for tool in tools {
            let refused = check_arguments(&tool.name, stray.as_object());
            assert!(
                refused.is_err_and(|e| e.to_string().contains("unknown field")),
                "{} took an argument its schema does not name",
                tool.name
            );
        }
        assert_eq!(
            check_arguments("bash", None).unwrap_err().to_string(),
            "invalid arguments: missing field `session`"
        );
    }
}
