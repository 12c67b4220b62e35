//! The first format (`sessions/<id>/transcript`): records of a 4-byte
//! big-endian length, a CRC-32 of the payload and one JSON entry, read
//! up to the first bad record; and its migration to v2.

use crate::session::SessionError;
use std::fs::File;
use std::io::{self, BufReader, Read, Write};
use std::path::Path;

use super::{files, format, Entry};
use crate::session::crc32::crc32;

/// The first format's limit: a larger record was never written.
const MAX_RECORD_BYTES: usize = 1 << 20;

/// The entries of a first-format file, one record in memory at a time.
pub struct V1Entries<R> {
    reader: R,
    payload: Vec<u8>,
    done: bool,
}

impl V1Entries<BufReader<File>> {
    pub fn open(path: &Path) -> io::Result<Self> {
        Ok(V1Entries::new(BufReader::new(File::open(path)?)))
    }
}

impl<R: Read> V1Entries<R> {
    pub fn new(reader: R) -> Self {
        V1Entries {
            reader,
            payload: Vec::new(),
            done: false,
        }
    }

    /// The next entry; `None` at the end or at the first bad record (the
    /// first format has no way past one).
    pub fn next_entry(&mut self) -> io::Result<Option<Entry>> {
        if self.done {
            return Ok(None);
        }
        let entry = self.read_record();
        if !matches!(entry, Ok(Some(_))) {
            self.done = true;
        }
        entry
    }

    fn read_record(&mut self) -> io::Result<Option<Entry>> {
        let mut head = [0u8; 8];
        if !read_full(&mut self.reader, &mut head)? {
            return Ok(None);
        }
        let len = u32::from_be_bytes(head[..4].try_into().unwrap()) as usize;
        let crc = u32::from_be_bytes(head[4..].try_into().unwrap());
        if len == 0 || len > MAX_RECORD_BYTES {
            return Ok(None);
        }
        self.payload.resize(len, 0);
        if !read_full(&mut self.reader, &mut self.payload)? || crc32(&self.payload) != crc {
            return Ok(None);
        }
        Ok(serde_json::from_slice(&self.payload).ok())
    }
}

/// Fill `buf`; `false` if the input ends first.
fn read_full(reader: &mut impl Read, buf: &mut [u8]) -> io::Result<bool> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]) {
            Ok(0) => return Ok(false),
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// Write every entry of the first-format file `v1` into a new v2 file at
/// `path` (the v1 file is left as it is); returns how many were written.
pub fn migrate(v1: &Path, path: &Path) -> Result<u64, SessionError> {
    let context = |source: io::Error| SessionError::Transcript {
        path: v1.to_path_buf(),
        source,
    };
    let mut entries = V1Entries::open(v1).map_err(context)?;
    let mut count = 0;
    files::create(path, |marker, out| {
        let mut record = Vec::new();
        let mut last_seq = 0;
        while let Some(entry) = entries.next_entry().map_err(context)? {
            // v2 readers take only rising numbers; v1 never wrote others.
            if entry.seq <= last_seq {
                continue;
            }
            last_seq = entry.seq;
            format::encode(marker, &entry, &mut record).map_err(|e| {
                e.within(format!("transcript {}: entry {}", v1.display(), entry.seq))
            })?;
            out.write_all(&record)
                .map_err(|source| SessionError::Transcript {
                    path: path.to_path_buf(),
                    source,
                })?;
            count += 1;
        }
        Ok(())
    })?;
    Ok(count)
}
