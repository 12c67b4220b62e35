//! Reading without writing: every entry, or a stream of them. The
//! transcript is never changed; a damaged region reads as one notice in
//! its place, and its bytes are copied aside once, by the first reader
//! that finds them (`transcript.damaged-<offset>`). An unfinished last
//! record (the writer may be appending it) ends the reading quietly.

use crate::session::SessionError;
use std::fs::File;
use std::io::{self, BufReader};
use std::path::{Path, PathBuf};

use super::format::{Marker, FILE_HEADER};
use super::scan::{Event, Scanner};
use super::stored::OutputStore;
use super::v1::V1Entries;
use super::{files, header, Entry, EntryBody};
use crate::session::notices;

/// What a reader finds at a transcript's path.
pub enum Found {
    /// A v3 file (or, while there is none, the v2 file beside it: the same
    /// records), its length when opened, its marker, its path (beside
    /// which its stored output is), and whether its header is damaged.
    Records(File, u64, Marker, PathBuf, bool),
    /// Neither a v3 nor a v2 file, but the first-format file beside it: the worker
    /// migrates it when it next starts.
    V1(File),
    /// No transcript at all, or one too short to hold an entry.
    Nothing,
}

/// The length and sync marker of the transcript a reader finds at `path`
/// (none when there is none, or one too short to hold a header).
pub fn identity(path: &Path) -> Result<Option<(u64, Marker)>, SessionError> {
    Ok(match locate(path)? {
        Found::Records(_, len, marker, ..) => Some((len, marker)),
        Found::V1(_) | Found::Nothing => None,
    })
}

/// Open the transcript at `path` for reading: the v3 file, else the v2
/// file beside it, else the first-format one.
pub fn locate(path: &Path) -> Result<Found, SessionError> {
    let v2 = files::v2_path(path);
    let (path, file) = match File::open(path) {
        Ok(file) => (path, file),
        Err(e) if e.kind() == io::ErrorKind::NotFound => match File::open(&v2) {
            Ok(file) => (v2.as_path(), file),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let old = files::v1_path(path);
                return match File::open(&old) {
                    Ok(file) => Ok(Found::V1(file)),
                    Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Found::Nothing),
                    Err(source) => Err(SessionError::Transcript { path: old, source }),
                };
            }
            Err(source) => return Err(SessionError::Transcript { path: v2, source }),
        },
        Err(source) => {
            return Err(SessionError::Transcript {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let context = |source: io::Error| SessionError::Transcript {
        path: path.to_path_buf(),
        source,
    };
    let len = file.metadata().map_err(context)?.len();
    if len < FILE_HEADER {
        return Ok(Found::Nothing);
    }
    let Some(hint) = header::read(&file, len).map_err(context)? else {
        return Err(SessionError::NotATranscript {
            path: path.to_path_buf(),
        });
    };
    Ok(Found::Records(
        file,
        len,
        hint.marker,
        path.to_path_buf(),
        hint.damaged,
    ))
}

/// Good entries in order, one record in memory at a time, and a notice in
/// the place of each damaged region.
pub struct Entries {
    inner: Inner,
    /// Entries numbered below this are skipped.
    from: u64,
    /// The time of the last entry read: a damage notice's.
    last_at_ms: u64,
}

/// A file's records, and where the file is (damaged bytes are copied
/// beside it).
struct Records {
    scanner: Scanner<File>,
    path: PathBuf,
    /// The entry a reader that starts after the file's first record reads
    /// on after, as far as it knows (0 from the first record).
    after: u64,
}

enum Inner {
    Records(Box<Records>),
    V1(V1Entries<BufReader<File>>),
    Nothing,
}

impl Entries {
    pub(super) fn new(found: Found, from: u64) -> Self {
        Self::at(found, FILE_HEADER, from)
    }

    /// The entries from byte `offset` on (where a record starts).
    fn at(found: Found, offset: u64, from: u64) -> Self {
        let inner = match found {
            Found::Records(file, len, marker, path, header_damaged) => {
                let start = offset.max(FILE_HEADER);
                let scanner = Scanner::new(file, len, marker, start)
                    .with_store(OutputStore::beside(&path))
                    .with_damaged_header(header_damaged);
                let after = match start > FILE_HEADER {
                    true => from.saturating_sub(1),
                    false => 0,
                };
                Inner::Records(Box::new(Records {
                    scanner,
                    path,
                    after,
                }))
            }
            Found::V1(file) => Inner::V1(V1Entries::new(BufReader::new(file))),
            Found::Nothing => Inner::Nothing,
        };
        Entries {
            inner,
            from,
            last_at_ms: 0,
        }
    }

    /// The next entry, with I/O errors (the iterator ends at one).
    pub fn next_entry(&mut self) -> io::Result<Option<Entry>> {
        Ok(self.next_with_end()?.map(|(entry, _)| entry))
    }

    /// The next entry and the offset where its record ends (where a later
    /// reader may start with [`stream_at`]; 0 in a first-format file).
    ///
    /// A damaged region reads as a notice numbered as the good entry
    /// before it (0 at the start), ending where the region ends: it is
    /// read by a reader from `from` on when that entry is `from - 1` or
    /// later (the region lies after what that reader has already seen).
    pub fn next_with_end(&mut self) -> io::Result<Option<(Entry, u64)>> {
        loop {
            let next = match &mut self.inner {
                Inner::Records(records) => {
                    let last = match records.scanner.last_seq() {
                        0 => records.after,
                        last => last,
                    };
                    match records.scanner.next_event()? {
                        Some(Event::Entry { entry, end, .. }) => Some((entry, end)),
                        Some(Event::Tail { torn: true, .. }) => continue,
                        Some(Event::Damage { offset, len } | Event::Tail { offset, len, .. }) => {
                            if last + 1 < self.from {
                                continue;
                            }
                            let notice = damage_notice(&records.path, offset, len);
                            let entry = Entry {
                                seq: last,
                                at_ms: self.last_at_ms,
                                body: notice,
                            };
                            return Ok(Some((entry, offset + len)));
                        }
                        None => None,
                    }
                }
                Inner::V1(v1) => v1.next_entry()?.map(|entry| (entry, 0)),
                Inner::Nothing => None,
            };
            match next {
                Some((entry, _)) if entry.seq < self.from => continue,
                Some((entry, end)) => {
                    self.last_at_ms = entry.at_ms;
                    return Ok(Some((entry, end)));
                }
                None => return Ok(None),
            }
        }
    }
}

impl Iterator for Entries {
    type Item = Entry;

    fn next(&mut self) -> Option<Entry> {
        match self.next_entry() {
            Ok(Some(entry)) => Some(entry),
            Ok(None) | Err(_) => {
                self.inner = Inner::Nothing;
                None
            }
        }
    }
}

/// Every good entry of the transcript at `path`, in order (read-only; the
/// first-format file beside it if there is no v2 file yet; none if
/// neither exists).
pub fn read_entries(path: &Path) -> Result<Vec<Entry>, SessionError> {
    let mut entries = stream(path)?;
    let mut all = Vec::new();
    while let Some(entry) = entries
        .next_entry()
        .map_err(|source| SessionError::Transcript {
            path: path.to_path_buf(),
            source,
        })?
    {
        all.push(entry);
    }
    Ok(all)
}

/// The good entries of the transcript at `path` as they are read, up to
/// its end when opened (read-only, like [`read_entries`]). An I/O error
/// while reading ends the iteration.
pub fn stream(path: &Path) -> Result<Entries, SessionError> {
    stream_from(path, 0)
}

/// [`stream`], from the first entry numbered `seq` or more.
pub fn stream_from(path: &Path, seq: u64) -> Result<Entries, SessionError> {
    Ok(Entries::new(locate(path)?, seq))
}

/// [`stream_from`], reading from byte `offset`: where a record starts, as
/// [`Entries::next_with_end`] or `Transcript::end_offset` told (a client
/// catching up reads on from where it stopped, not from the start).
pub fn stream_at(path: &Path, offset: u64, seq: u64) -> Result<Entries, SessionError> {
    Ok(Entries::at(locate(path)?, offset, seq))
}

/// The notice read in the place of the damaged bytes `[offset, offset +
/// len)` of the transcript at `path`, after copying them aside if no
/// reader has yet.
fn damage_notice(path: &Path, offset: u64, len: u64) -> EntryBody {
    let kept = files::damaged_path(path, offset);
    let copied = File::open(path).and_then(|file| files::keep(&file, offset, len, &kept));
    if let Err(e) = copied {
        tracing::warn!(
            "transcript {}: cannot copy the damaged bytes at {offset} to {}: {e}",
            path.display(),
            kept.display()
        );
    }
    notices::damaged_here(offset, len, &kept)
}
