//! `eukhe mcp` fed raw JSON lines on standard input, as a client with a
//! bug (or a person testing by hand) sends them: each line gets the answer
//! JSON-RPC asks for, and the server keeps serving.

use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::Duration;

use serde_json::{json, Value};

use crate::support::Env;

/// How long one answer may take (a tool call may start the daemon).
const ANSWER_WITHIN: Duration = Duration::from_secs(30);

/// A running `eukhe mcp`: its input, and its output lines as they come.
pub struct Server {
    pub child: Child,
    input: Option<ChildStdin>,
    lines: Receiver<String>,
}

impl Server {
    fn start(env: &Env) -> Server {
        Server::spawn(env.command(&["mcp"]))
    }

    /// `command` (an `eukhe mcp`) started, fed and read as this test does.
    pub fn spawn(mut command: Command) -> Server {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start eukhe mcp");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let input = child.stdin.take();
        Server {
            child,
            input,
            lines,
        }
    }

    pub fn send(&mut self, line: &str) {
        let input = self.input.as_mut().unwrap();
        input.write_all(line.as_bytes()).unwrap();
        input.write_all(b"\n").unwrap();
        input.flush().unwrap();
    }

    /// The next line the server writes, as JSON.
    pub fn answer(&self) -> Value {
        let line = self
            .lines
            .recv_timeout(ANSWER_WITHIN)
            .expect("the server answers");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line:?} is not JSON: {e}"))
    }

    pub fn ask(&mut self, line: &str) -> Value {
        self.send(line);
        self.answer()
    }

    pub fn initialize(&mut self) {
        let init = json!({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": { "name": "raw", "version": "1" }
            }
        });
        let answer = self.ask(&init.to_string());
        assert_eq!(answer["id"], 1, "{answer}");
        assert!(answer["result"]["serverInfo"].is_object(), "{answer}");
        self.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    }

    /// Close standard input; the server ends, successfully.
    pub fn close(mut self) {
        drop(self.input.take());
        let status = self.child.wait().unwrap();
        assert!(status.success(), "eukhe mcp ended with {status}");
    }
}

/// The JSON-RPC line that calls `tool` with `arguments`, as request `id`.
pub fn tool_call(id: u64, tool: &str, arguments: Value) -> String {
    json!({
        "jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": { "name": tool, "arguments": arguments }
    })
    .to_string()
}

fn error_of(answer: &Value) -> (Value, i64, String) {
    let error = &answer["error"];
    (
        answer
            .get("id")
            .cloned()
            .expect("an error answer has an id member"),
        error["code"].as_i64().unwrap_or_else(|| panic!("{answer}")),
        error["message"].as_str().unwrap_or("").to_string(),
    )
}

#[test]
fn lines_that_are_no_message_get_json_rpcs_errors_and_serving_goes_on() {
    let env = Env::new("mcp-raw");
    let mut server = Server::start(&env);

    // Before initialize: a request is told what to do; garbage is a
    // parse error and does not end the connection.
    let (id, code, message) =
        error_of(&server.ask(r#"{"jsonrpc":"2.0","id":7,"method":"tools/list"}"#));
    assert_eq!((id, code), (json!(7), -32002));
    assert!(message.contains("send `initialize` first"), "{message}");
    let (id, code, _) = error_of(&server.ask("hello"));
    assert_eq!((id, code), (Value::Null, -32700));
    server.initialize();

    let (id, code, message) = error_of(&server.ask("this is not json"));
    assert_eq!((id, code), (Value::Null, -32700));
    assert!(message.contains("not JSON"), "{message}");
    for invalid in [
        r#"{"foo":1}"#,
        "[1,2]",
        "42",
        r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
    ] {
        let (id, code, _) = error_of(&server.ask(invalid));
        assert_eq!((id, code), (Value::Null, -32600), "{invalid}");
    }
    let (id, code, _) = error_of(&server.ask(r#"{"jsonrpc":"2.0","id":8}"#));
    assert_eq!((id, code), (json!(8), -32600));

    // Still serving.
    let tools = server.ask(r#"{"jsonrpc":"2.0","id":9,"method":"tools/list"}"#);
    assert_eq!(tools["id"], 9, "{tools}");
    assert!(
        tools["result"]["tools"]
            .as_array()
            .is_some_and(|t| t.len() == 11),
        "{tools}"
    );
    server.close();
}

#[test]
fn a_tool_error_speaks_in_the_tools_terms() {
    let env = Env::new("mcp-terms");
    let id = env.ok(&["new", "--name", "busy"]).trim().to_string();
    env.ok(&["send", &id, "sleep 60"]);
    let mut server = Server::start(&env);
    server.initialize();
    let refused = server.ask(&tool_call(
        2,
        "remove_session",
        json!({ "session": "busy" }),
    ));
    assert_eq!(refused["result"]["isError"], true, "{refused}");
    let said = refused["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        said.contains("busy") && said.contains("`force: true`"),
        "{said}"
    );
    assert!(
        !said.contains("--force") && !said.contains("eukhe rm"),
        "{said}"
    );
    let unknown = server.ask(&tool_call(3, "log", json!({ "session": "nothing-here" })));
    let said = unknown["result"]["content"][0]["text"].as_str().unwrap();
    assert!(
        said.contains("`list_sessions`") && !said.contains("eukhe ls"),
        "{said}"
    );
    let removed = server.ask(&tool_call(
        4,
        "remove_session",
        json!({ "session": "busy", "force": true }),
    ));
    assert_eq!(
        removed["result"]["structuredContent"]["id"],
        id.as_str(),
        "{removed}"
    );
    server.close();
}

#[test]
fn input_that_ends_before_initialize_is_said_in_one_line() {
    let env = Env::new("mcp-no-init");
    let out = env.command(&["mcp"]).stdin(Stdio::null()).output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{said}");
    assert_eq!(
        said,
        "eukhe: mcp: standard input ended before the client's `initialize`: an MCP client starts with it, and nothing was served\n"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn the_log_tool_shows_a_damaged_region_as_one_notice_in_its_place() {
    use crate::damage::{overwrite, records, transcript_path};
    let env = Env::new("mcp-damage");
    let id = env.ok(&["new", "--name", "d"]).trim().to_string();
    for i in 1..=3 {
        env.ok(&["bash", &id, "--", &format!("echo entry-{i}")]);
    }
    env.ok(&["shutdown", "--force"]);
    let path = transcript_path(&env, &id);
    let (offset, _) = records(&path)
        .into_iter()
        .find(|(_, payload)| payload.ends_with(b"entry-2\n"))
        .expect("entry 2's output record");
    overwrite(&path, offset + 25 + 20, b"XXXX");
    let mut server = Server::start(&env);
    server.initialize();
    let answer = server.ask(&tool_call(2, "log", json!({ "session": "d" })));
    let log = answer["result"]["structuredContent"]["log"]
        .as_str()
        .unwrap_or_else(|| panic!("{answer}"));
    assert_eq!(log.matches("damaged transcript: ").count(), 1, "{log}");
    let notice = log.find("! damaged transcript: ").unwrap();
    let (started, ended) = (
        log.find("[bash 2] $ echo entry-2\n").expect("bash 2"),
        log.find("[bash 2 exited 0]").expect("its end"),
    );
    assert!(started < notice && notice < ended, "{log}");
    assert!(
        log.contains(&format!(" bytes at offset {offset} ")),
        "{log}"
    );
    assert!(
        log.contains("\nentry-1\n") && log.contains("\nentry-3\n"),
        "{log}"
    );
    server.close();
}

#[test]
fn new_sessions_limits_are_refused_in_the_tools_terms() {
    let env = Env::new("mcp-limits");
    let mut server = Server::start(&env);
    server.initialize();
    let call = |n: u64, arguments: Value| tool_call(n, "new_session", arguments);
    let text = |answer: &Value| {
        answer["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let refused = server.ask(&call(2, json!({ "memory_max": "64m" })));
    assert_eq!(refused["result"]["isError"], true, "{refused}");
    assert!(
        text(&refused).contains("memory_max \"64m\": expected bytes"),
        "{refused}"
    );
    let tasks = server.ask(&call(3, json!({ "name": "capped", "tasks_max": "50" })));
    if tasks["result"]["isError"] == true {
        // No delegated cgroup v2 here (the process backend's refusal).
        let said = text(&tasks);
        assert!(
            said.contains("resource limits need") && said.ends_with("drop tasks_max)"),
            "{said}"
        );
    } else {
        let id = tasks["result"]["structuredContent"]["id"].as_str().unwrap();
        assert_eq!(env.session(id)["resources"]["limits"]["tasks_max"], 50);
    }
    server.close();
}
