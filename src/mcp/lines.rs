//! What `eukhe mcp` does with each line its client sends, before the MCP
//! library sees it (no I/O): a line that is no JSON-RPC message, or a
//! request before `initialize`, is answered here as JSON-RPC asks (the
//! library would close the connection or answer without an id); the
//! rest goes on to the library.

use serde_json::{json, Map, Value};

/// JSON-RPC's code for a line that is not JSON.
pub const PARSE_ERROR: i64 = -32700;
/// JSON-RPC's code for JSON that is not a request, notification or
/// response.
pub const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC's code for a method's parameters that do not fit it.
pub const INVALID_PARAMS: i64 = -32602;
/// A request that needs `initialize` first (the code the Language Server
/// Protocol gives this, in JSON-RPC's range for servers).
pub const NOT_INITIALIZED: i64 = -32002;

/// What becomes of one line.
#[derive(Debug, PartialEq)]
pub enum Verdict {
    /// The library takes it.
    Forward,
    /// This answer (one JSON line) goes back; the library never sees it.
    Answer(String),
    /// Nothing: a blank line, or a notification before `initialize`.
    Drop,
}

/// The lines of one connection: whether `initialize` went through.
#[derive(Debug, Default)]
pub struct Gate {
    initialized: bool,
}

impl Gate {
    /// Judge one line (without its newline).
    pub fn judge(&mut self, line: &[u8]) -> Verdict {
        if line.iter().all(u8::is_ascii_whitespace) {
            return Verdict::Drop;
        }
        match message(line) {
            Ok(object) => self.route(&object),
            Err(answer) => Verdict::Answer(answer),
        }
    }

    /// Where a well-formed message goes: `initialize` (once its
    /// parameters can start a connection) opens the gate; before it, a
    /// request is told to initialize first.
    fn route(&mut self, object: &Map<String, Value>) -> Verdict {
        let id = object.get("id").cloned();
        match (object.get("method").and_then(Value::as_str), id) {
            (Some("initialize"), Some(id)) if !self.initialized => match initialize_params(object)
            {
                Ok(()) => {
                    self.initialized = true;
                    Verdict::Forward
                }
                Err(why) => Verdict::Answer(error(
                    &id,
                    INVALID_PARAMS,
                    &format!("Invalid params of initialize: {why}"),
                )),
            },
            _ if self.initialized => Verdict::Forward,
            (Some("ping"), Some(id)) => Verdict::Answer(
                json!({ "jsonrpc": "2.0", "id": id, "result": {} }).to_string(),
            ),
            (Some(method), Some(id)) => Verdict::Answer(error(
                &id,
                NOT_INITIALIZED,
                &format!(
                    "not initialized: send `initialize` first, then `notifications/initialized`, then `{method}`"
                ),
            )),
            // Notifications and responses before `initialize` answer
            // nothing.
            _ => Verdict::Drop,
        }
    }
}

/// The line as a JSON-RPC message, or the error answer it gets.
fn message(line: &[u8]) -> Result<Map<String, Value>, String> {
    let parsed: Value = serde_json::from_slice(line).map_err(|e| {
        error(
            &Value::Null,
            PARSE_ERROR,
            &format!("Parse error: the line is not JSON ({e}): send one JSON-RPC message per line"),
        )
    })?;
    let object = match parsed {
        Value::Object(object) => object,
        Value::Array(_) => {
            return Err(error(
                &Value::Null,
                INVALID_REQUEST,
                "Invalid Request: a batch (JSON array) is not taken: send one message per line",
            ))
        }
        _ => {
            return Err(error(
                &Value::Null,
                INVALID_REQUEST,
                "Invalid Request: a message is a JSON object",
            ))
        }
    };
    if let Err(why) = well_formed(&object) {
        let id = object
            .get("id")
            .filter(|id| valid_id(id))
            .cloned()
            .unwrap_or(Value::Null);
        return Err(error(
            &id,
            INVALID_REQUEST,
            &format!("Invalid Request: {why}"),
        ));
    }
    Ok(object)
}

/// A request's id: a string or a whole number.
fn valid_id(id: &Value) -> bool {
    id.is_string() || id.is_i64() || id.is_u64()
}

/// Why a JSON object is no JSON-RPC 2.0 message.
#[derive(Debug, PartialEq, thiserror::Error)]
enum Malformed {
    #[error("\"jsonrpc\" must be \"2.0\"")]
    Version,
    #[error("\"id\" must be a string or a whole number, not {0}")]
    Id(Value),
    #[error("\"params\" must be an object")]
    Params,
    #[error("\"method\" must be a string")]
    Method,
    #[error("a request needs \"method\" (and \"id\" when it wants an answer)")]
    NoMethod,
}

/// Why `object` is no JSON-RPC 2.0 message, if it is not.
fn well_formed(object: &Map<String, Value>) -> Result<(), Malformed> {
    if object.get("jsonrpc") != Some(&Value::from("2.0")) {
        return Err(Malformed::Version);
    }
    if let Some(id) = object.get("id") {
        if !valid_id(id) {
            return Err(Malformed::Id(id.clone()));
        }
    }
    match object.get("method") {
        Some(Value::String(_)) => match object.get("params") {
            None | Some(Value::Object(_) | Value::Array(_)) => Ok(()),
            Some(_) => Err(Malformed::Params),
        },
        Some(_) => Err(Malformed::Method),
        None if object.contains_key("id")
            && (object.contains_key("result") || object.contains_key("error")) =>
        {
            Ok(())
        }
        None => Err(Malformed::NoMethod),
    }
}

/// Why an `initialize` request's parameters cannot start a connection.
#[derive(Debug, PartialEq, thiserror::Error)]
enum BadInitialize {
    #[error("\"params\" must be an object with protocolVersion, capabilities and clientInfo")]
    Params,
    #[error("\"protocolVersion\" must be a string, such as \"2025-06-18\"")]
    ProtocolVersion,
    #[error("\"capabilities\" must be an object ({{}} for none)")]
    Capabilities,
    #[error("\"clientInfo\" must be an object with \"name\" and \"version\" strings")]
    ClientInfo,
}

/// Whether an `initialize` request's parameters can start a connection.
fn initialize_params(object: &Map<String, Value>) -> Result<(), BadInitialize> {
    let params = object
        .get("params")
        .and_then(Value::as_object)
        .ok_or(BadInitialize::Params)?;
    if !params.get("protocolVersion").is_some_and(Value::is_string) {
        return Err(BadInitialize::ProtocolVersion);
    }
    if !params.get("capabilities").is_some_and(Value::is_object) {
        return Err(BadInitialize::Capabilities);
    }
    let info = params.get("clientInfo").and_then(Value::as_object);
    let named = info.is_some_and(|info| {
        info.get("name").is_some_and(Value::is_string)
            && info.get("version").is_some_and(Value::is_string)
    });
    if !named {
        return Err(BadInitialize::ClientInfo);
    }
    Ok(())
}

/// A JSON-RPC error answer, one line.
fn error(id: &Value, code: i64, message: &str) -> String {
    json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } }).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    const INIT: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;

    fn answer(verdict: Verdict) -> Value {
        match verdict {
            Verdict::Answer(line) => serde_json::from_str(&line).unwrap(),
            other => panic!("not answered: {other:?}"),
        }
    }

    #[test]
    fn a_line_that_is_not_json_is_a_parse_error_with_a_null_id() {
        let mut gate = Gate::default();
        let a = answer(gate.judge(b"hello"));
        assert_eq!(a["error"]["code"], PARSE_ERROR);
        assert!(a.as_object().unwrap().contains_key("id") && a["id"].is_null());
        assert_eq!(gate.judge(b"  "), Verdict::Drop);
    }

    #[test]
    fn json_that_is_no_message_is_an_invalid_request_with_its_id_when_it_has_one() {
        let mut gate = Gate::default();
        for line in [
            &b"[1]"[..],
            b"3",
            br#"{"foo":1}"#,
            br#"{"jsonrpc":"2.0","id":null}"#,
        ] {
            let a = answer(gate.judge(line));
            assert_eq!(a["error"]["code"], INVALID_REQUEST, "{a}");
            assert!(a["id"].is_null(), "{a}");
        }
        let a = answer(gate.judge(br#"{"jsonrpc":"2.0","id":7}"#));
        assert_eq!(
            (a["id"].clone(), a["error"]["code"].clone()),
            (json!(7), json!(INVALID_REQUEST))
        );
        let a = answer(gate.judge(br#"{"jsonrpc":"1.0","id":"x","method":"ping"}"#));
        assert_eq!(a["id"], "x");
    }

    #[test]
    fn before_initialize_a_request_is_told_to_initialize_and_a_ping_is_answered() {
        let mut gate = Gate::default();
        let a = answer(gate.judge(br#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#));
        assert_eq!(a["error"]["code"], NOT_INITIALIZED);
        assert!(
            a["error"]["message"]
                .as_str()
                .unwrap()
                .contains("send `initialize` first"),
            "{a}"
        );
        let a = answer(gate.judge(br#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#));
        assert_eq!(a["result"], json!({}));
        assert_eq!(
            gate.judge(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
            Verdict::Drop
        );
        let a =
            answer(gate.judge(br#"{"jsonrpc":"2.0","id":4,"method":"initialize","params":{}}"#));
        assert_eq!(a["error"]["code"], INVALID_PARAMS);
        assert_eq!(gate.judge(INIT.as_bytes()), Verdict::Forward);
        assert_eq!(
            gate.judge(br#"{"jsonrpc":"2.0","id":5,"method":"tools/list"}"#),
            Verdict::Forward
        );
        assert_eq!(
            gate.judge(br#"{"jsonrpc":"2.0","id":5,"result":{}}"#),
            Verdict::Forward
        );
    }
}
