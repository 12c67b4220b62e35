//! Reading a file forward through a bounded buffer, and finding markers.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use super::format::Marker;

/// How much is read at once.
pub const CHUNK: usize = 64 << 10;

/// The buffer a window keeps between records whatever their sizes.
const RETAINED: usize = 1 << 20;

/// Something read by offset: a file, or a whole image in memory (the
/// fuzzer's input).
pub trait Source {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
}

impl Source for File {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        FileExt::read_at(self, buf, offset)
    }
}

impl Source for &File {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        FileExt::read_at(*self, buf, offset)
    }
}

impl Source for &[u8] {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(self.len());
        let n = buf.len().min(self.len() - start);
        buf[..n].copy_from_slice(&self[start..start + n]);
        Ok(n)
    }
}

/// The bytes of `[0, eof)` of a source, read forward: it holds what was
/// read from the last position asked for on, so its size is bounded by
/// the largest request (one record), never by the file.
pub struct Window<S> {
    src: S,
    eof: u64,
    base: u64,
    buf: Vec<u8>,
}

impl<S: Source> Window<S> {
    /// `eof` is fixed here: bytes a writer appends later are not read, so
    /// a record still being written looks incomplete, never damaged.
    pub fn new(src: S, eof: u64) -> Self {
        Window {
            src,
            eof,
            base: 0,
            buf: Vec::new(),
        }
    }

    pub fn eof(&self) -> u64 {
        self.eof
    }

    /// The bytes buffered from `pos` on: at least `want` of them, unless
    /// the end comes first.
    pub fn get(&mut self, pos: u64, want: usize) -> io::Result<&[u8]> {
        let pos = pos.min(self.eof);
        let want = want.min((self.eof - pos) as usize);
        let end = self.base + self.buf.len() as u64;
        if pos < self.base || pos > end {
            self.base = pos;
            self.buf.clear();
        }
        let have = (self.base + self.buf.len() as u64 - pos) as usize;
        if have < want {
            self.refill(pos, have, want)?;
        }
        let from = (pos - self.base) as usize;
        Ok(&self.buf[from..])
    }

    /// The first place at or after `from` where `marker` occurs.
    pub fn find(&mut self, from: u64, marker: &Marker) -> io::Result<Option<u64>> {
        let mut at = from;
        loop {
            let hay = self.get(at, marker.len())?;
            if hay.len() < marker.len() {
                return Ok(None);
            }
            match memmem(hay, marker) {
                Some(i) => return Ok(Some(at + i as u64)),
                // The last bytes may hold the start of a marker.
                None => at += (hay.len() - marker.len() + 1) as u64,
            }
        }
    }

    fn refill(&mut self, pos: u64, have: usize, want: usize) -> io::Result<()> {
        self.buf.drain(..(pos - self.base) as usize);
        self.base = pos;
        let target = want.max(CHUNK).min((self.eof - pos) as usize);
        // One huge record must not keep its buffer for the rest of the
        // file; an output record's size (the kernel reads at most 512 KiB
        // at once) is kept, or a buffer would shrink and grow again at
        // every record between short ones.
        if self.buf.capacity() > (4 * target).max(RETAINED) {
            self.buf.shrink_to(target);
        }
        self.buf.resize(target, 0);
        let mut filled = have;
        while filled < target {
            match self
                .src
                .read_at(&mut self.buf[filled..], pos + filled as u64)
            {
                Ok(0) => {
                    // The file got shorter under us: its end is here now.
                    self.eof = pos + filled as u64;
                    break;
                }
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.buf.truncate(filled);
                    return Err(e);
                }
            }
        }
        self.buf.truncate(filled);
        Ok(())
    }
}

/// Where `marker` first occurs in `hay`.
pub fn memmem(hay: &[u8], marker: &Marker) -> Option<usize> {
    // memchr's vectorised search: a byte-by-byte one would dominate reading
    // the end of a large transcript, which scans up to 16 MiB.
    memchr::memmem::find(hay, marker)
}
