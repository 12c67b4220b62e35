//! `eukhe mcp --host A --host B`: several machines' sessions as one tool
//! set. A session reference carries its host (`A:s1`); each call runs on
//! its reference's host (`client::route::on`), and its answer names
//! sessions by their references again. `list_sessions` asks every host at
//! once, each within `HOST_ANSWER_MS`: a host that does not answer is
//! listed with why and delays the others by no more than that.
//!
//! The local machine is `local`, served only when given: an agent driving
//! build machines sees (and starts a daemon on) exactly the machines it
//! was given, not the one its client happens to run on.

use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock};
use serde_json::{json, Value};

use crate::client::all_hosts::{ask_every_host, HostAnswer};
use crate::client::hosts::{load_hosts, resolve, NamedTarget};
use crate::client::render::most_recent_last;
use crate::client::ClientError;
use crate::laws::replace::ClientStart;

/// The hosts one `eukhe mcp` serves; none: the process's own target, as
/// without `--host`.
#[derive(Clone, Debug, Default)]
pub struct ServedHosts {
    hosts: Vec<NamedTarget>,
}

/// A tool call's session reference, read: the host it names and the
/// reference on that host.
#[derive(Debug, PartialEq, Eq)]
pub struct Routed<'a> {
    /// The host.
    pub host: &'a NamedTarget,
    /// The session's name or id there (empty: none given).
    pub session: String,
}

impl ServedHosts {
    /// The hosts `--host` gave (names from hosts.toml, addresses or
    /// `local`), each once.
    pub fn resolve(given: &[String]) -> Result<ServedHosts, ClientError> {
        if given.is_empty() {
            return Ok(ServedHosts::default());
        }
        let file = load_hosts()?;
        let mut hosts: Vec<NamedTarget> = Vec::new();
        for name in given {
            if hosts.iter().any(|h| &h.name == name) {
                return Err(ClientError::Usage(format!(
                    "--host {name} is given twice: give each host once"
                )));
            }
            hosts.push(resolve(name, &file)?);
        }
        Ok(ServedHosts { hosts })
    }

    /// Whether `--host` named any host: references then carry theirs.
    pub fn many(&self) -> bool {
        !self.hosts.is_empty()
    }

    /// The host a reference names (`HOST:SESSION`, the longest host name
    /// that fits; a reference without one is the only host's, when one is
    /// served), or what to write instead.
    pub fn route(&self, reference: &str) -> Result<Routed<'_>, String> {
        let named = self
            .hosts
            .iter()
            .filter_map(|h| {
                let rest = reference.strip_prefix(h.name.as_str())?.strip_prefix(':')?;
                Some((h, rest))
            })
            .max_by_key(|(h, _)| h.name.len());
        match (named, self.hosts.as_slice()) {
            (Some((host, rest)), _) => Ok(Routed {
                host,
                session: rest.to_string(),
            }),
            (None, [only]) => Ok(Routed {
                host: only,
                session: reference.to_string(),
            }),
            (None, _) => Err(format!(
                "{reference:?} names no host: write HOST:SESSION, HOST one of {}",
                self.names()
            )),
        }
    }

    /// What an agent reads about the hosts after the tools' instructions
    /// (nothing without `--host`).
    pub fn instructions(&self) -> String {
        match self.many() {
            false => String::new(),
            true => format!(
                " Sessions live on several machines ({}): refer to each as HOST:NAME, \
                 create one with `new_session` name = \"HOST:NAME\"; `list_sessions` gives \
                 each session's `ref` and the machines that did not answer.",
                self.names()
            ),
        }
    }

    fn names(&self) -> String {
        let names: Vec<&str> = self.hosts.iter().map(|h| h.name.as_str()).collect();
        names.join(", ")
    }

    /// `list_sessions` over every host: each session with its `host` and
    /// `ref` (what other tools take), each host that did not answer with
    /// why.
    pub async fn list_sessions(&self) -> CallToolResult {
        let answers = ask_every_host(&self.hosts, ClientStart::Mcp).await;
        let (sessions, unreachable) = listing(answers);
        let structured = json!({ "sessions": sessions, "unreachable": unreachable });
        let text = serde_json::to_string_pretty(&structured).unwrap_or_default();
        super::server::answer(text, structured)
    }
}

/// Every host's sessions as one list (each host's the one active most
/// recently last, hosts in their order), and the hosts that gave none.
pub fn listing(answers: Vec<(String, HostAnswer)>) -> (Vec<Value>, Vec<Value>) {
    let mut sessions = Vec::new();
    let mut unreachable = Vec::new();
    for (host, answer) in answers {
        match answer {
            HostAnswer::Sessions(mut listed) => {
                most_recent_last(&mut listed);
                for session in listed {
                    let reference = format!("{host}:{}", session.name);
                    let mut value = serde_json::to_value(&session).unwrap_or_default();
                    if let Value::Object(fields) = &mut value {
                        fields.insert("host".into(), json!(host));
                        fields.insert("ref".into(), json!(reference));
                    }
                    sessions.push(value);
                }
            }
            HostAnswer::Unreachable(reason) => {
                unreachable.push(json!({ "host": host, "reason": reason }));
            }
        }
    }
    (sessions, unreachable)
}

/// The argument naming a call's session: `name` for `new_session`
/// (`HOST:NAME`, or `HOST:` for a name the daemon picks), `session` for
/// the others; `list_sessions` has none.
pub fn reference_argument(tool: &str) -> Option<&'static str> {
    match tool {
        "list_sessions" => None,
        "new_session" => Some("name"),
        _ => Some("session"),
    }
}

/// `request` with its reference replaced by the host's own (`HOST:` alone
/// leaves `new_session`'s name out).
pub fn on_host(
    mut request: CallToolRequestParams,
    argument: &str,
    session: &str,
) -> CallToolRequestParams {
    let arguments = request.arguments.get_or_insert_with(Default::default);
    match session.is_empty() {
        true => {
            arguments.remove(argument);
        }
        false => {
            arguments.insert(argument.to_string(), json!(session));
        }
    }
    request
}

/// The reference `request` carries in `argument`, if any.
pub fn reference_of(request: &CallToolRequestParams, argument: &str) -> Option<String> {
    request
        .arguments
        .as_ref()?
        .get(argument)?
        .as_str()
        .map(str::to_string)
}

/// A host's answer with its sessions named by reference: `session=NAME`
/// (and `session NAME`) become `HOST:NAME`, and a created session's
/// structured answer gains its `host` and `ref`.
pub fn with_references(mut result: CallToolResult, host: &str, session: &str) -> CallToolResult {
    let created = result
        .structured_content
        .as_ref()
        .and_then(|s| s.get("name"))
        .and_then(Value::as_str)
        .map(str::to_string);
    let name = created.clone().unwrap_or_else(|| session.to_string());
    if name.is_empty() {
        return result;
    }
    let reference = format!("{host}:{name}");
    for block in &mut result.content {
        if let ContentBlock::Text(text) = block {
            text.text = text
                .text
                .replace(&format!("session={name}"), &format!("session={reference}"))
                .replace(
                    &format!("session {name} "),
                    &format!("session {reference} "),
                );
        }
    }
    if let (Some(_), Some(Value::Object(fields))) = (created, &mut result.structured_content) {
        fields.insert("host".into(), json!(host));
        fields.insert("ref".into(), json!(reference));
    }
    result
}

/// A call refused before it reached any host: why, as the model reads it.
pub fn refused(why: String) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(why)])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::remote::{RemoteHost, Target};

    fn served(names: &[&str]) -> ServedHosts {
        ServedHosts {
            hosts: names
                .iter()
                .map(|n| NamedTarget {
                    name: n.to_string(),
                    target: Target::Remote(RemoteHost::parse("box").unwrap()),
                })
                .collect(),
        }
    }

    #[test]
    fn a_reference_routes_by_its_host_the_longest_name_first() {
        let hosts = served(&["a", "a:b", "build"]);
        let routed = hosts.route("build:s1").unwrap();
        assert_eq!(
            (routed.host.name.as_str(), routed.session.as_str()),
            ("build", "s1")
        );
        let routed = hosts.route("a:b:c").unwrap();
        assert_eq!(
            (routed.host.name.as_str(), routed.session.as_str()),
            ("a:b", "c")
        );
        let routed = hosts.route("a:x:y").unwrap();
        assert_eq!(
            (routed.host.name.as_str(), routed.session.as_str()),
            ("a", "x:y")
        );
        assert_eq!(hosts.route("build:").unwrap().session, "");
        let refused = hosts.route("s1").unwrap_err();
        assert_eq!(
            refused,
            "\"s1\" names no host: write HOST:SESSION, HOST one of a, a:b, build"
        );
        let one = served(&["build"]);
        assert_eq!(one.route("s1").unwrap().session, "s1");
        assert_eq!(one.route("build:s1").unwrap().session, "s1");
    }

    #[test]
    fn every_hosts_sessions_are_listed_with_their_host_and_the_silent_with_why() {
        let session = |name: &str, active_ms: u64| {
            serde_json::from_value(json!({
                "id": format!("id-{name}"), "name": name, "state": "idle", "pid": null,
                "build": null, "failures_in_window": 0, "active_ms": active_ms,
            }))
            .unwrap()
        };
        let (sessions, unreachable) = listing(vec![
            (
                "a".into(),
                HostAnswer::Sessions(vec![session("late", 9), session("early", 1)]),
            ),
            (
                "down".into(),
                HostAnswer::Unreachable("no answer within 10 s".into()),
            ),
            ("b".into(), HostAnswer::Sessions(vec![session("s", 5)])),
        ]);
        let refs: Vec<_> = sessions
            .iter()
            .map(|s| s["ref"].as_str().unwrap())
            .collect();
        assert_eq!(refs, ["a:early", "a:late", "b:s"]);
        assert_eq!(sessions[2]["host"], "b");
        assert_eq!(
            unreachable,
            vec![json!({ "host": "down", "reason": "no answer within 10 s" })]
        );
    }

    #[test]
    fn answers_name_sessions_by_reference() {
        let created = super::super::server::answer(
            "created session s1 (id x); run commands in it with `bash` session=s1".into(),
            json!({ "id": "x", "name": "s1" }),
        );
        let created = with_references(created, "a", "");
        let text = created.content[0].as_text().unwrap().text.clone();
        assert_eq!(
            text,
            "created session a:s1 (id x); run commands in it with `bash` session=a:s1"
        );
        assert_eq!(
            created.structured_content,
            Some(json!({ "id": "x", "name": "s1", "host": "a", "ref": "a:s1" }))
        );
        let queued = super::super::server::answer(
            "queued as run 3; its output and exit status: `log` session=s1, run=3".into(),
            json!({ "input": 3 }),
        );
        let queued = with_references(queued, "b", "s1");
        assert!(queued.content[0]
            .as_text()
            .unwrap()
            .text
            .contains("session=b:s1, run=3"));
    }
}
