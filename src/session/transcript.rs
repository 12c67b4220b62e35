//! The transcript: a session's memory, an append-only file of records.
//!
//! A record is a 4-byte big-endian length, a 4-byte CRC-32 of the payload
//! and the payload (one JSON [`Entry`]). An entry is on disk (fsync) before
//! [`Transcript::append`] returns, so anything acknowledged survives a
//! crash. A crash mid-write leaves a torn tail: [`Transcript::open`] finds
//! it, cuts it off and reports it, and the caller stores a notice saying so.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::crc32::crc32;
use crate::protocol::message::Stream;

/// A record larger than this is corrupt, not real.
const MAX_RECORD_BYTES: usize = 1 << 20;

/// One transcript entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Position in the transcript, from 1, never reused.
    pub seq: u64,
    /// Wall-clock milliseconds when it was stored.
    pub at_ms: u64,
    #[serde(flatten)]
    pub body: EntryBody,
}

/// What an entry says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EntryBody {
    /// Input queued as run `input`.
    Input { input: u64, text: String },
    /// Run `input` started.
    RunStarted { input: u64 },
    /// Output of run `input` (or of user bash when `input` is `None`).
    Output {
        input: Option<u64>,
        stream: Stream,
        data: String,
        /// The offset in the kernel's spool of the run's output after this
        /// entry: a worker that reconnects resumes from it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        spool_end: Option<u64>,
    },
    /// Run `input` ended with `status`.
    RunFinished {
        input: u64,
        status: i32,
        /// The signal that ended it, if one did.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signal: Option<i32>,
        /// Whether `eukhe cancel` ended it.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        cancelled: bool,
    },
    /// Run `input` was cut short: the kernel running it is gone. It does
    /// not run again.
    RunInterrupted { input: u64 },
    /// Queued input `input` was withdrawn before it ran; it never runs.
    Withdrawn { input: u64 },
    /// User bash started.
    Bash { command: String },
    /// User bash ended.
    BashFinished { status: i32 },
    /// Something the user should know; `restore` numbers a restore notice.
    Notice { text: String, restore: Option<u32> },
}

/// A torn tail found (and cut off) when opening a transcript.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TornTail {
    pub offset: u64,
    pub bytes: u64,
}

/// An open transcript, positioned for appending.
pub struct Transcript {
    path: PathBuf,
    file: File,
    next_seq: u64,
    /// The length of the good records: a failed append is cut back to it.
    len: u64,
}

impl Transcript {
    /// Open (or create) the transcript at `path`, returning its entries and
    /// any torn tail that was cut off.
    pub fn open(path: &Path) -> Result<(Transcript, Vec<Entry>, Option<TornTail>), String> {
        let context = |e: std::io::Error| format!("transcript {}: {e}", path.display());
        // 0600: a transcript is the session's memory, nobody else's to read.
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(0o600)
            .open(path)
            .map_err(context)?;
        // One written by an earlier version may be 0644.
        {
            use std::os::unix::fs::PermissionsExt;
            file.set_permissions(std::fs::Permissions::from_mode(0o600))
                .map_err(context)?;
        }
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(context)?;
        let (entries, good_len) = parse(&bytes);
        let torn = if good_len < bytes.len() {
            file.set_len(good_len as u64).map_err(context)?;
            file.sync_all().map_err(context)?;
            Some(TornTail {
                offset: good_len as u64,
                bytes: (bytes.len() - good_len) as u64,
            })
        } else {
            None
        };
        file.seek(SeekFrom::End(0)).map_err(context)?;
        let next_seq = entries.last().map_or(1, |e| e.seq + 1);
        Ok((
            Transcript {
                path: path.to_path_buf(),
                file,
                next_seq,
                len: good_len as u64,
            },
            entries,
            torn,
        ))
    }

    /// Store an entry durably and return it.
    pub fn append(&mut self, at_ms: u64, body: EntryBody) -> Result<Entry, String> {
        self.append_with(at_ms, body, true)
    }

    /// Store an entry that nobody is told about yet, without waiting for
    /// the disk: the next synced append covers it (a crash of this process
    /// keeps it in the page cache; a machine crash loses only what was
    /// never acknowledged).
    pub fn append_unsynced(&mut self, at_ms: u64, body: EntryBody) -> Result<Entry, String> {
        self.append_with(at_ms, body, false)
    }

    fn append_with(&mut self, at_ms: u64, body: EntryBody, sync: bool) -> Result<Entry, String> {
        let entry = Entry {
            seq: self.next_seq,
            at_ms,
            body,
        };
        let payload = serde_json::to_vec(&entry).map_err(|e| e.to_string())?;
        if payload.len() > MAX_RECORD_BYTES {
            return Err(format!(
                "transcript {}: entry of {} bytes is too large",
                self.path.display(),
                payload.len()
            ));
        }
        let mut record = Vec::with_capacity(payload.len() + 8);
        record.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        record.extend_from_slice(&crc32(&payload).to_be_bytes());
        record.extend_from_slice(&payload);
        let written = self.file.write_all(&record).and_then(|_| {
            if sync {
                self.file.sync_data()
            } else {
                Ok(())
            }
        });
        if let Err(e) = written {
            // A full disk can take part of a record: cut it off, or every
            // later record would sit behind a torn one and be unreadable.
            let _ = self.file.set_len(self.len);
            return Err(format!("transcript {}: {e}", self.path.display()));
        }
        self.len += record.len() as u64;
        self.next_seq += 1;
        Ok(entry)
    }
}

/// Read every entry of the transcript at `path` without opening it for
/// writing (a torn tail is left alone and not returned).
pub fn read_entries(path: &Path) -> Result<Vec<Entry>, String> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(parse(&bytes).0),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(format!("transcript {}: {e}", path.display())),
    }
}

/// The good entries of `bytes` and the length of the good prefix.
pub fn parse(bytes: &[u8]) -> (Vec<Entry>, usize) {
    let mut entries = Vec::new();
    let mut offset = 0;
    while offset + 8 <= bytes.len() {
        let len = u32::from_be_bytes(bytes[offset..offset + 4].try_into().unwrap()) as usize;
        let crc = u32::from_be_bytes(bytes[offset + 4..offset + 8].try_into().unwrap());
        let start = offset + 8;
        if len == 0 || len > MAX_RECORD_BYTES || start + len > bytes.len() {
            break;
        }
        let payload = &bytes[start..start + len];
        if crc32(payload) != crc {
            break;
        }
        let Ok(entry) = serde_json::from_slice::<Entry>(payload) else {
            break;
        };
        entries.push(entry);
        offset = start + len;
    }
    (entries, offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("eukhe-transcript-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir.join("transcript")
    }

    /// A write that the disk cuts short (here: the file size limit, as a
    /// full disk would) leaves no torn record behind: later entries stay
    /// readable.
    #[test]
    fn a_failed_append_is_cut_back_and_later_entries_stay_readable() {
        let path = temp("full");
        let (mut transcript, _, _) = Transcript::open(&path).unwrap();
        transcript.append(1, input(1)).unwrap();
        let len = std::fs::metadata(&path).unwrap().len();
        // SAFETY: this test runs in a process of its own (nextest); the
        // limit makes writes past `len + 16` fail with EFBIG instead of
        // raising SIGXFSZ, which is ignored here.
        let old = unsafe {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            let mut old = std::mem::zeroed::<libc::rlimit>();
            libc::getrlimit(libc::RLIMIT_FSIZE, &mut old);
            let limit = libc::rlimit {
                rlim_cur: len + 16,
                rlim_max: old.rlim_max,
            };
            libc::setrlimit(libc::RLIMIT_FSIZE, &limit);
            old
        };
        let big = EntryBody::Notice {
            text: "x".repeat(4096),
            restore: None,
        };
        let failed = transcript.append(2, big);
        // SAFETY: restores the limit read above.
        unsafe { libc::setrlimit(libc::RLIMIT_FSIZE, &old) };
        assert!(failed.is_err());
        assert_eq!(std::fs::metadata(&path).unwrap().len(), len, "cut back");
        transcript.append(3, input(2)).unwrap();
        let (_, entries, torn) = Transcript::open(&path).unwrap();
        assert_eq!(torn, None);
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[1].seq, 2, "the failed entry took no number");
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }

    fn input(input: u64) -> EntryBody {
        EntryBody::Input {
            input,
            text: format!("input {input}"),
        }
    }

    #[test]
    fn entries_survive_reopen_in_order() {
        let path = temp("reopen");
        let (mut t, entries, torn) = Transcript::open(&path).unwrap();
        assert!(entries.is_empty() && torn.is_none());
        t.append(
            1,
            EntryBody::Input {
                input: 1,
                text: "echo hi".into(),
            },
        )
        .unwrap();
        t.append(2, EntryBody::RunStarted { input: 1 }).unwrap();
        drop(t);
        let (mut t, entries, torn) = Transcript::open(&path).unwrap();
        assert_eq!(torn, None);
        assert_eq!(
            entries.iter().map(|e| e.seq).collect::<Vec<_>>(),
            vec![1, 2]
        );
        assert_eq!(
            t.append(
                3,
                EntryBody::RunFinished {
                    input: 1,
                    status: 0,
                    signal: None,
                    cancelled: false,
                }
            )
            .unwrap()
            .seq,
            3
        );
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }

    #[test]
    fn a_torn_tail_is_found_cut_and_reported() {
        let path = temp("torn");
        let (mut t, _, _) = Transcript::open(&path).unwrap();
        t.append(1, input(1)).unwrap();
        drop(t);
        let good = std::fs::metadata(&path).unwrap().len();
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&[0, 0, 0, 50, 1, 2, 3, 4, b'{']).unwrap();
        drop(f);
        let (_, entries, torn) = Transcript::open(&path).unwrap();
        assert_eq!(entries.len(), 1);
        assert_eq!(
            torn,
            Some(TornTail {
                offset: good,
                bytes: 9
            })
        );
        assert_eq!(std::fs::metadata(&path).unwrap().len(), good);
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }

    #[test]
    fn a_corrupt_record_ends_the_good_prefix() {
        let path = temp("corrupt");
        let (mut t, _, _) = Transcript::open(&path).unwrap();
        t.append(1, input(1)).unwrap();
        t.append(1, input(2)).unwrap();
        drop(t);
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 2;
        bytes[last] ^= 0xFF;
        assert_eq!(parse(&bytes).0.len(), 1);
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }
}
