//! Reading without writing: every entry, or a stream of them. Nothing is
//! changed on disk; damage is skipped and an unfinished last record (the
//! writer may be appending it) ends the reading quietly.

use crate::session::SessionError;
use std::fs::File;
use std::io::{self, BufReader};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::format::{is_magic, Marker, FILE_HEADER};
use super::scan::{Event, Scanner};
use super::stored::OutputStore;
use super::v1::V1Entries;
use super::{files, Entry};

/// What a reader finds at a transcript's path.
pub enum Found {
    /// A v3 file (or, while there is none, the v2 file beside it: the same
    /// records), its length when opened, its marker, and where its stored
    /// output is read.
    Records(File, u64, Marker, PathBuf),
    /// Neither a v3 nor a v2 file, but the first-format file beside it: the worker
    /// migrates it when it next starts.
    V1(File),
    /// No transcript at all, or one too short to hold an entry.
    Nothing,
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
    let mut head = [0u8; FILE_HEADER as usize];
    file.read_exact_at(&mut head, 0).map_err(context)?;
    if !is_magic(&head[..8]) {
        return Err(SessionError::NotATranscript {
            path: path.to_path_buf(),
        });
    }
    Ok(Found::Records(
        file,
        len,
        head[8..].try_into().unwrap(),
        path.to_path_buf(),
    ))
}

/// Good entries in order, one record in memory at a time.
pub struct Entries {
    inner: Inner,
    /// Entries numbered below this are skipped.
    from: u64,
}

enum Inner {
    Records(Box<Scanner<File>>),
    V1(V1Entries<BufReader<File>>),
    Nothing,
}

impl Entries {
    pub(super) fn new(found: Found, from: u64) -> Self {
        let inner = match found {
            Found::Records(file, len, marker, path) => Inner::Records(Box::new(
                Scanner::new(file, len, marker, FILE_HEADER).with_store(OutputStore::beside(&path)),
            )),
            Found::V1(file) => Inner::V1(V1Entries::new(BufReader::new(file))),
            Found::Nothing => Inner::Nothing,
        };
        Entries { inner, from }
    }

    /// The next entry, with I/O errors (the iterator ends at one).
    pub fn next_entry(&mut self) -> io::Result<Option<Entry>> {
        Ok(self.next_with_end()?.map(|(entry, _)| entry))
    }

    /// The next entry and the offset where its record ends (where a later
    /// reader may start with [`stream_at`]; 0 in a first-format file).
    pub fn next_with_end(&mut self) -> io::Result<Option<(Entry, u64)>> {
        loop {
            let next = match &mut self.inner {
                Inner::Records(scanner) => match scanner.next_event()? {
                    Some(Event::Entry { entry, end, .. }) => Some((entry, end)),
                    Some(_) => continue,
                    None => None,
                },
                Inner::V1(v1) => v1.next_entry()?.map(|entry| (entry, 0)),
                Inner::Nothing => None,
            };
            match next {
                Some((entry, _)) if entry.seq < self.from => continue,
                next => return Ok(next),
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
    let found = locate(path)?;
    let inner = match found {
        Found::Records(file, len, marker, path) => Inner::Records(Box::new(
            Scanner::new(file, len, marker, offset.max(FILE_HEADER))
                .with_store(OutputStore::beside(&path)),
        )),
        other => return Ok(Entries::new(other, seq)),
    };
    Ok(Entries { inner, from: seq })
}
