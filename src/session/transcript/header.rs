//! The file header as a hint. Every record starts with the file's sync
//! marker and carries its own checksum, so the records say which marker
//! is the file's: a damaged header never hides intact records.

use std::io;

use super::format::{self, is_magic, Header, Marker, OutputBytes, FILE_HEADER, HEADER};
use super::window::{Source, Window};

/// What a file's first bytes and records say about its marker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hint {
    /// The marker its records carry (the header's when no record says
    /// otherwise).
    pub marker: Marker,
    /// Whether the header is not what a writer wrote: a wrong magic, or a
    /// marker no good record carries while another one does.
    pub damaged: bool,
}

/// The marker of the file `src` (`eof` bytes, at least a header), or
/// `None` when neither its header nor any record looks like a transcript's.
pub fn read<S: Source>(src: S, eof: u64) -> io::Result<Option<Hint>> {
    let mut window = Window::new(src, eof);
    let head = window.get(0, FILE_HEADER as usize)?;
    if head.len() < FILE_HEADER as usize {
        return Ok(None);
    }
    let magic = is_magic(&head[..8]);
    let hinted: Marker = head[8..16].try_into().unwrap();
    if eof == FILE_HEADER || confirmed(&mut window, &hinted)? {
        return Ok(Some(Hint {
            marker: hinted,
            damaged: !magic,
        }));
    }
    if let Some(marker) = found_in_records(&mut window)? {
        return Ok(Some(Hint {
            marker,
            damaged: true,
        }));
    }
    // No good record at all: the header is all there is to go by.
    Ok(magic.then_some(Hint {
        marker: hinted,
        damaged: false,
    }))
}

/// Whether some good record carries `marker`.
fn confirmed<S: Source>(window: &mut Window<S>, marker: &Marker) -> io::Result<bool> {
    let mut at = FILE_HEADER;
    while let Some(candidate) = window.find(at, marker)? {
        if good_record(window, candidate, marker)?.is_some() {
            return Ok(true);
        }
        at = candidate + 1;
    }
    Ok(false)
}

/// The first marker that starts a good record followed by another record
/// with the same marker (or by the end of the file): the file's own, since
/// a record of another file copied inside a payload is followed by more
/// of its payload.
fn found_in_records<S: Source>(window: &mut Window<S>) -> io::Result<Option<Marker>> {
    let eof = window.eof();
    let mut at = FILE_HEADER;
    while at + HEADER as u64 <= eof {
        let bytes = window.get(at, HEADER)?;
        let marker: Marker = bytes[..8].try_into().unwrap();
        if marker != [0; 8] {
            if let Some(end) = good_record(window, at, &marker)? {
                let next = window.get(end, 8)?;
                if end == eof || next.len() >= 8 && next[..8] == marker[..] {
                    return Ok(Some(marker));
                }
            }
        }
        at += 1;
    }
    Ok(None)
}

/// Where the good record starting at `at` with `marker` ends, if there is
/// one.
fn good_record<S: Source>(
    window: &mut Window<S>,
    at: u64,
    marker: &Marker,
) -> io::Result<Option<u64>> {
    let eof = window.eof();
    let bytes = window.get(at, HEADER)?;
    if bytes.len() < HEADER {
        return Ok(None);
    }
    let Some(header) = Header::read(bytes, marker) else {
        return Ok(None);
    };
    let Some(end) = header.end(at).filter(|&end| end <= eof) else {
        return Ok(None);
    };
    if header.seq == 0 || !(1..=3).contains(&header.kind) {
        return Ok(None);
    }
    let size = (end - at) as usize;
    let bytes = window.get(at, size)?;
    if bytes.len() < size {
        return Ok(None);
    }
    let good = format::decode_keeping(&header, &bytes[..size], OutputBytes::Left).is_some();
    Ok(good.then_some(end))
}
