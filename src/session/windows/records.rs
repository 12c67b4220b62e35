//! A job's output file read forward, record by record, through a bounded
//! buffer, counting every byte read: a window reads only the records it
//! needs.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use crate::protocol::entry::Stream;
use crate::protocol::zeros;
use crate::session::spool::{BadRecord, RecordHeader, RECORD_HEADER};

use super::select::Flow;

/// How much is read at once.
const READ_BYTES: usize = 1 << 20;

/// The longest record the kernel writes is far below this: a longer
/// length is damage.
const RECORD_MAX_BYTES: usize = 64 << 20;

/// Why records could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RecordsError {
    #[error("{0}")]
    Io(#[from] io::Error),
    /// A header at `at` that no record has.
    #[error("a bad record at byte {at}: {why}")]
    Bad { at: u64, why: String },
}

/// A job's output file, read up to `end` (whole records only).
pub struct Records<'a> {
    file: &'a File,
    end: u64,
    /// Bytes read from the file so far.
    pub read: u64,
    buf: Vec<u8>,
    buf_at: u64,
}

impl<'a> Records<'a> {
    pub fn new(file: &'a File, end: u64) -> Records<'a> {
        Records {
            file,
            end,
            read: 0,
            buf: Vec::new(),
            buf_at: 0,
        }
    }

    /// Where the records read end.
    pub fn end(&self) -> u64 {
        self.end
    }

    /// The bytes `at..at + len` of the file, read if not buffered.
    fn bytes(&mut self, at: u64, len: usize) -> io::Result<&[u8]> {
        let buffered = at >= self.buf_at && at + len as u64 <= self.buf_at + self.buf.len() as u64;
        if !buffered {
            // What is buffered from `at` on is kept: each byte is read once.
            let buf_end = self.buf_at + self.buf.len() as u64;
            let kept = if at >= self.buf_at && at < buf_end {
                self.buf.drain(..(at - self.buf_at) as usize);
                self.buf.len()
            } else {
                self.buf.clear();
                0
            };
            let want = len.max(READ_BYTES).min((self.end - at) as usize).max(len);
            self.buf.resize(want, 0);
            self.file
                .read_exact_at(&mut self.buf[kept..], at + kept as u64)?;
            self.read += (want - kept) as u64;
            self.buf_at = at;
        }
        let from = (at - self.buf_at) as usize;
        Ok(&self.buf[from..from + len])
    }

    /// Each record from `from` to `to` (records' starts), as `each` does.
    pub fn each_to(
        &mut self,
        from: u64,
        to: u64,
        each: impl FnMut(Stream, &[u8], u64) -> Flow,
    ) -> Result<u64, RecordsError> {
        let end = self.end;
        self.end = to.min(end);
        let reached = self.each(from, each);
        self.end = end;
        reached
    }

    /// Each record from `from` (a record's start) to the end, in order:
    /// its stream, its bytes (a run of zeros as zeros) and its end, until
    /// `each` has had enough. Where the records stopped.
    pub fn each(
        &mut self,
        from: u64,
        mut each: impl FnMut(Stream, &[u8], u64) -> Flow,
    ) -> Result<u64, RecordsError> {
        let mut at = from;
        while at + RECORD_HEADER as u64 <= self.end {
            let header = RecordHeader::decode(self.bytes(at, RECORD_HEADER)?)
                .map_err(|why: BadRecord| RecordsError::Bad {
                    at,
                    why: why.to_string(),
                })?
                .expect("a whole header");
            let stored = header.stored();
            if stored > RECORD_MAX_BYTES {
                return Err(RecordsError::Bad {
                    at,
                    why: format!("a record of {stored} bytes"),
                });
            }
            let next = at + (RECORD_HEADER + stored) as u64;
            if next > self.end {
                break; // still being written
            }
            let flow = if header.zero_run {
                each(header.stream, &zeros::ZEROS[..header.len], next)
            } else {
                let data = self.bytes(at + RECORD_HEADER as u64, stored)?;
                each(header.stream, data, next)
            };
            at = next;
            if flow == Flow::Enough {
                break;
            }
        }
        Ok(at)
    }
}
