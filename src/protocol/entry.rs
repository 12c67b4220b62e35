//! What a transcript holds: entries, each numbered and timed.
//!
//! Output is bytes, exactly as the command wrote them. Where an entry is
//! JSON (`log --json`, entries of the first transcript format) output
//! bytes are `"text"` when they are valid UTF-8 and `"base64"` otherwise
//! (standard alphabet, padded); the first format's `"data"` is read as
//! text.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// Which output stream a chunk came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// One transcript entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Position in the transcript, from 1, never reused.
    pub seq: u64,
    /// Wall-clock milliseconds when it was stored.
    pub at_ms: u64,
    /// What it says.
    #[serde(flatten)]
    pub body: EntryBody,
}

/// What an entry says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EntryBody {
    /// Input queued as run `input`.
    Input {
        /// The run's number.
        input: u64,
        /// The input as sent.
        text: String,
        /// A terminal run, and the size its terminal starts with (absent:
        /// a plain run, as in older transcripts).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tty: Option<super::tty::WindowSize>,
    },
    /// Run `input` started.
    RunStarted {
        /// The run's number.
        input: u64,
    },
    /// Output of run `input` (or of user bash `bash`, when `input` is
    /// `None`).
    Output {
        /// The run's number; `None` for user bash.
        input: Option<u64>,
        /// Which stream it came from.
        stream: Stream,
        /// The bytes exactly as written.
        #[serde(flatten, with = "output_bytes")]
        data: Bytes,
        /// The offset in the kernel's spool of the run's output after this
        /// entry: a worker that reconnects resumes from it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        spool_end: Option<u64>,
        /// The number of the user bash this output belongs to.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        bash: Option<u64>,
    },
    /// Run `input` ended with `status`.
    RunFinished {
        /// The run's number.
        input: u64,
        /// Its exit status.
        status: i32,
        /// The signal that ended it, if one did.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signal: Option<i32>,
        /// Whether `eukhe cancel` ended it.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        cancelled: bool,
        /// Output it wrote that could not be kept: its output here is
        /// incomplete (a notice just before says so too).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lost_output: Option<LostOutput>,
    },
    /// A command typed at the prompt of interactive shell run `input`
    /// (`eukhe attach --shell`): once as it starts (no `status`), then as
    /// it ends (its `status`). The run's output between the two is the
    /// command's.
    ShellCommand {
        /// The shell run's number.
        input: u64,
        /// The command line as typed (empty when the shell did not say).
        text: String,
        /// Its exit status, once it has ended.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<i32>,
    },
    /// Run `input` was cut short: the kernel running it is gone. It does
    /// not run again.
    RunInterrupted {
        /// The run's number.
        input: u64,
    },
    /// Queued input `input` was withdrawn before it ran; it never runs.
    Withdrawn {
        /// The input's number.
        input: u64,
    },
    /// User bash started; `bash` numbers it among the session's inputs.
    Bash {
        /// The command line.
        command: String,
        /// Its number among the session's inputs (absent in older
        /// transcripts).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        bash: Option<u64>,
    },
    /// User bash ended.
    BashFinished {
        /// Its exit status.
        status: i32,
        /// Its number among the session's inputs (absent in older
        /// transcripts).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        bash: Option<u64>,
        /// The signal that ended it, if one did.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signal: Option<i32>,
        /// Whether a cancel ended it (`eukhe cancel`, Ctrl-C on `eukhe bash`).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        cancelled: bool,
        /// Output it wrote that could not be kept: its output here is
        /// incomplete (a notice just before says so too).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lost_output: Option<LostOutput>,
    },
    /// Something the user should know; `restore` numbers a restore notice.
    Notice {
        /// The notice.
        text: String,
        /// The restore's number, for a restore notice.
        restore: Option<u32>,
        /// The id the kernel gave that restore (absent in older
        /// transcripts): a kernel offers its restore to every worker, and
        /// one whose id a notice holds is not stored again.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        restore_id: Option<u64>,
    },
}

/// Output the kernel's spool could not keep (a full state disk), counted
/// rather than told chunk by chunk: a full disk fails every write of a
/// stream in full flow. No client and no transcript has those bytes.
/// Unknown fields are ignored: a later build may say more, and an end
/// that says it must still read here.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LostOutput {
    /// How many bytes.
    pub bytes: u64,
    /// Why the first of them could not be kept.
    pub error: String,
}

impl LostOutput {
    /// Count `more` in `lost` (which keeps the first error).
    pub fn add(lost: &mut Option<LostOutput>, more: LostOutput) {
        match lost {
            Some(lost) => lost.bytes += more.bytes,
            None => *lost = Some(more),
        }
    }
}

/// Output bytes as one JSON field: `text`, `base64`, or the first
/// format's `data`.
mod output_bytes {
    use base64::engine::general_purpose::STANDARD;
    use base64::Engine;
    use bytes::Bytes;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    enum Repr {
        Text(String),
        Base64(String),
        Data(String),
    }

    pub fn serialize<S: Serializer>(bytes: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
        match std::str::from_utf8(bytes) {
            Ok(text) => Repr::Text(text.to_owned()),
            Err(_) => Repr::Base64(STANDARD.encode(bytes)),
        }
        .serialize(serializer)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Bytes, D::Error> {
        match Repr::deserialize(deserializer)? {
            Repr::Text(text) | Repr::Data(text) => Ok(text.into_bytes().into()),
            Repr::Base64(encoded) => STANDARD
                .decode(encoded.as_bytes())
                .map(Bytes::from)
                .map_err(serde::de::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn output(data: &[u8]) -> Entry {
        Entry {
            seq: 7,
            at_ms: 9,
            body: EntryBody::Output {
                input: Some(2),
                stream: Stream::Stdout,
                data: data.to_vec().into(),
                spool_end: None,
                bash: None,
            },
        }
    }

    #[test]
    fn utf8_output_is_text_and_other_bytes_are_base64_both_ways() {
        let text = serde_json::to_value(output("héllo\n".as_bytes())).unwrap();
        assert_eq!(text["text"], "héllo\n");
        assert!(text.get("base64").is_none());
        let binary = serde_json::to_value(output(&[0xff, 0, 0xfe])).unwrap();
        assert_eq!(binary["base64"], "/wD+");
        assert!(binary.get("text").is_none());
        for data in [&b"plain"[..], &[0xff, 0, 0xfe][..]] {
            let json = serde_json::to_string(&output(data)).unwrap();
            assert_eq!(serde_json::from_str::<Entry>(&json).unwrap(), output(data));
        }
    }

    #[test]
    fn the_first_formats_data_field_reads_as_text() {
        let v1 = r#"{"seq":7,"at_ms":9,"kind":"output","input":2,"stream":"stdout","data":"hi"}"#;
        assert_eq!(serde_json::from_str::<Entry>(v1).unwrap(), output(b"hi"));
    }
}
