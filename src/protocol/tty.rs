//! Terminal runs: the size of the pseudo-terminal a run gets, and the
//! bytes typed into it (`"data"` in JSON is base64, standard alphabet,
//! padded: keys are bytes, never text to re-encode).

use serde::{Deserialize, Serialize};

/// A terminal's size in character cells.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WindowSize {
    /// Rows.
    pub rows: u16,
    /// Columns.
    pub cols: u16,
}

impl WindowSize {
    /// The size a terminal run gets when its client has no terminal: a
    /// VT100's, which is also what programs assume without one.
    pub const DEFAULT: WindowSize = WindowSize { rows: 24, cols: 80 };
}

/// The text of an interactive shell run (`eukhe attach S --shell`): a
/// terminal run with exactly this text runs `bash -i` over the session's
/// state, each command typed at its prompt marked and its state kept. A
/// bash comment, so a kernel that does not know it runs nothing.
pub const SHELL_COMMAND: &str = "# eukhe: interactive shell";

/// What a client sends on its connection after a `Bash` or `Send --wait`
/// request that asked for a terminal, while the run goes on, each in a
/// frame of its own as `Request::TerminalInput` (`{"type":
/// "terminal_input", "input": {"type": "keys", "data": "..."}}`). The
/// worker writes keys to that run's terminal in the order they come and
/// sets its size on `resize`; it answers nothing (output and the exit
/// come as for any run).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum TerminalInput {
    /// Bytes typed at the terminal.
    Keys {
        /// The bytes, exactly as typed.
        #[serde(with = "base64_bytes")]
        data: Vec<u8>,
    },
    /// The client's terminal changed its size.
    Resize {
        /// The new size.
        size: WindowSize,
    },
}

/// Bytes as one base64 string in JSON.
pub mod base64_bytes {
    use base64::engine::general_purpose::STANDARD;
    use base64::Engine;
    use serde::{Deserialize, Deserializer, Serializer};

    /// The bytes as base64.
    pub fn serialize<S: Serializer>(bytes: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&STANDARD.encode(bytes))
    }

    /// Base64 back to the bytes.
    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(deserializer)?;
        STANDARD
            .decode(text.as_bytes())
            .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_travel_as_base64_and_come_back_as_the_same_bytes() {
        let keys = TerminalInput::Keys {
            data: b"bob\r\x03\xff".to_vec(),
        };
        let json = serde_json::to_string(&keys).unwrap();
        assert_eq!(json, r#"{"type":"keys","data":"Ym9iDQP/"}"#);
        assert_eq!(serde_json::from_str::<TerminalInput>(&json).unwrap(), keys);
        let resize: TerminalInput =
            serde_json::from_str(r#"{"type":"resize","size":{"rows":50,"cols":132}}"#).unwrap();
        assert_eq!(
            resize,
            TerminalInput::Resize {
                size: WindowSize {
                    rows: 50,
                    cols: 132
                }
            }
        );
    }
}
