//! Output kept once: the bytes of a stored output record (kind 3) are the
//! kernel's spool record the record points to, read back here.
//!
//! A job's spool file is where `session::spool` says; the spool record a
//! stored record names ends at the entry's `spool_end`, so it starts a
//! header and `len` bytes before.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use bytes::Bytes;

use super::format::StoredOutput;
use super::{Entry, EntryBody};
use crate::session::entry::Stream;
use crate::session::spool::{open_job, out_name, RecordHeader, SpoolError, RECORD_HEADER};

/// Reads stored output's bytes for the transcript beside it.
pub struct OutputStore {
    session: PathBuf,
    /// The job file read last: a run's records follow each other.
    open: Option<(String, File)>,
}

impl OutputStore {
    /// The store of the transcript at `transcript` (its session's
    /// directory).
    pub fn beside(transcript: &Path) -> OutputStore {
        OutputStore {
            session: transcript.parent().unwrap_or(Path::new(".")).to_path_buf(),
            open: None,
        }
    }

    /// `entry` with its output bytes read from the store, or, when they
    /// cannot be read whole and good, a notice in its place saying so
    /// (same number and time): the rest of the history reads on.
    pub fn fill(&mut self, mut entry: Entry, stored: &StoredOutput) -> Entry {
        let EntryBody::Output {
            input,
            bash,
            stream,
            spool_end: Some(end),
            data,
        } = &mut entry.body
        else {
            return entry;
        };
        match self.read(&stored.job, *stream, *end, stored) {
            Ok(bytes) => {
                *data = bytes;
                entry
            }
            Err(why) => {
                let whose = match (input, bash) {
                    (Some(run), _) => format!("run {run}"),
                    (None, Some(bash)) => format!("bash {bash}"),
                    (None, None) => "a command".to_string(),
                };
                let stream = match stream {
                    Stream::Stdout => "stdout",
                    Stream::Stderr => "stderr",
                };
                Entry {
                    body: EntryBody::Notice {
                        text: lost_notice(stored.len, &whose, stream, &why.to_string()),
                        restore: None,
                        restore_id: None,
                    },
                    ..entry
                }
            }
        }
    }

    fn read(
        &mut self,
        job: &str,
        stream: Stream,
        end: u64,
        stored: &StoredOutput,
    ) -> Result<Bytes, Unreadable> {
        let name = out_name(job);
        let size = (RECORD_HEADER + stored.len as usize) as u64;
        let start = end
            .checked_sub(size)
            .ok_or(Unreadable::BeforeStart { name: name.clone() })?;
        let file = self.file(job)?;
        let mut record = vec![0u8; size as usize];
        file.read_exact_at(&mut record, start)
            .map_err(|source| match source.kind() {
                io::ErrorKind::UnexpectedEof => Unreadable::EndsBefore {
                    name: name.clone(),
                    end,
                },
                _ => Unreadable::Io {
                    name: name.clone(),
                    source,
                },
            })?;
        let header = RecordHeader {
            stream,
            len: stored.len as usize,
            zero_run: false,
        };
        let bytes = record.split_off(RECORD_HEADER);
        if record != header.encode() || crc32fast::hash(&bytes) != stored.crc {
            return Err(Unreadable::Damaged { name, start, end });
        }
        Ok(bytes.into())
    }

    fn file(&mut self, job: &str) -> Result<&File, Unreadable> {
        if self.open.as_ref().is_none_or(|(open, _)| open != job) {
            self.open = None;
            let file = open_job(&self.session, job)?;
            self.open = Some((job.to_string(), file));
        }
        Ok(&self.open.as_ref().unwrap().1)
    }
}

/// Why stored output cannot be read back whole and good: the end of the
/// notice read in its place.
#[derive(Debug, thiserror::Error)]
enum Unreadable {
    /// The record would start before the file does.
    #[error("its record in {name} would start before the file")]
    BeforeStart { name: String },
    /// The file is shorter than the record's end.
    #[error("{name} ends before byte {end}")]
    EndsBefore { name: String, end: u64 },
    /// Reading the file failed.
    #[error("{name}: {source}")]
    Io { name: String, source: io::Error },
    /// The bytes there are not the ones stored.
    #[error("bytes {start} to {end} of {name} are not what was stored (damaged)")]
    Damaged { name: String, start: u64, end: u64 },
    /// The job's output file cannot be opened.
    #[error(transparent)]
    Spool(#[from] SpoolError),
}

/// The notice read in the place of stored output whose bytes are not
/// there whole and good: `whose` is "run N" or "bash N".
fn lost_notice(len: u32, whose: &str, stream: &str, why: &str) -> String {
    format!("{len} bytes of {whose}'s {stream} are lost: {why}")
}

/// The input whose output a notice read in its place says is lost (the
/// notice [`lost_notice`] writes), so a reader of one input's entries
/// keeps it: its output is incomplete.
pub fn input_of_lost_notice(text: &str) -> Option<u64> {
    let (_, rest) = text.split_once(" bytes of ")?;
    let (whose, rest) = rest.split_once("'s ")?;
    if !(rest.starts_with("stdout are lost: ") || rest.starts_with("stderr are lost: ")) {
        return None;
    }
    let (_, number) = whose.split_once(' ')?;
    number.parse().ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_lost_notice_names_its_input_back() {
        for (whose, input) in [
            ("run 3", Some(3)),
            ("bash 12", Some(12)),
            ("a command", None),
        ] {
            let text = super::lost_notice(9, whose, "stderr", "its file is gone");
            assert_eq!(super::input_of_lost_notice(&text), input, "{text}");
        }
        assert_eq!(
            super::input_of_lost_notice("kernel restored (restore 1): x"),
            None
        );
    }

    use super::*;

    fn spool_record(stream: u8, bytes: &[u8]) -> Vec<u8> {
        let mut record = vec![stream];
        record.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
        record.extend_from_slice(bytes);
        record
    }

    fn output_entry(end: u64) -> Entry {
        Entry {
            seq: 3,
            at_ms: 1,
            body: EntryBody::Output {
                input: Some(2),
                stream: Stream::Stderr,
                data: Bytes::new(),
                spool_end: Some(end),
                bash: None,
            },
        }
    }

    #[test]
    fn stored_bytes_are_read_from_the_spool_then_from_output_and_damage_becomes_a_notice() {
        let dir = std::env::temp_dir().join(format!("eukhe-stored-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("spool")).unwrap();
        std::fs::create_dir_all(dir.join("output")).unwrap();
        let first = spool_record(1, b"first\n");
        let second = spool_record(2, b"\xff\x00 second");
        let file = [first.clone(), second.clone()].concat();
        std::fs::write(dir.join("spool/r2.out"), &file).unwrap();
        let stored = StoredOutput {
            job: "r2".into(),
            len: 9,
            crc: crc32fast::hash(b"\xff\x00 second"),
        };
        let end = file.len() as u64;
        let mut store = OutputStore::beside(&dir.join("transcript3"));
        let filled = store.fill(output_entry(end), &stored);
        let EntryBody::Output { data, .. } = &filled.body else {
            panic!("{filled:?}")
        };
        assert_eq!(&data[..], b"\xff\x00 second");
        // Forgotten: renamed into output/, read from there.
        std::fs::rename(dir.join("spool/r2.out"), dir.join("output/r2.out")).unwrap();
        let mut store = OutputStore::beside(&dir.join("transcript3"));
        assert_eq!(store.fill(output_entry(end), &stored), {
            let mut e = output_entry(end);
            if let EntryBody::Output { data, .. } = &mut e.body {
                *data = Bytes::from_static(b"\xff\x00 second");
            }
            e
        });
        // A flipped byte: a notice with the same number, nothing else lost.
        let mut damaged = file.clone();
        damaged[first.len() + 7] ^= 1;
        std::fs::write(dir.join("output/r2.out"), &damaged).unwrap();
        let mut store = OutputStore::beside(&dir.join("transcript3"));
        let notice = store.fill(output_entry(end), &stored);
        assert_eq!(notice.seq, 3);
        let EntryBody::Notice { text, .. } = &notice.body else {
            panic!("{notice:?}")
        };
        assert!(
            text.contains("9 bytes of run 2's stderr are lost"),
            "{text}"
        );
        assert!(text.contains("damaged"), "{text}");
        // Gone: a notice naming the file.
        std::fs::remove_file(dir.join("output/r2.out")).unwrap();
        let mut store = OutputStore::beside(&dir.join("transcript3"));
        let gone = store.fill(output_entry(end), &stored);
        assert!(
            format!("{gone:?}").contains("r2.out is in neither"),
            "{gone:?}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
