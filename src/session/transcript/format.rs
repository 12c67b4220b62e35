//! One record: its layout, how it is encoded, and how it is checked.

use crate::session::SessionError;
use bytes::Bytes;
use std::io;

use super::{Entry, EntryBody};
use crate::session::entry::Stream;
use crate::session::spool::{valid_job, JOB_NAME_MAX};

/// The first 8 bytes of every transcript this build writes (v3: output
/// may be stored in the spool, kind 3).
pub const MAGIC: [u8; 8] = *b"EUKHETR3";
/// The first 8 bytes of a v2 transcript: the same records, never kind 3.
pub const MAGIC_V2: [u8; 8] = *b"EUKHETR2";
/// The magic and the file's sync marker.
pub const FILE_HEADER: u64 = 16;
/// marker (8) | seq (8) | kind (1) | len (4) | crc (4).
pub const HEADER: usize = 25;
/// A larger payload is refused by writers and is damage to readers.
pub const MAX_PAYLOAD: usize = 16 << 20;
/// The furthest a record can reach from its first byte.
pub const SPAN: u64 = (HEADER + MAX_PAYLOAD) as u64;

const KIND_JSON: u8 = 1;
const KIND_OUTPUT: u8 = 2;
const KIND_STORED: u8 = 3;
/// at_ms, input, bash, spool_end (u64 each) and the stream byte.
const OUTPUT_PREFIX: usize = 33;
/// A stored output record's prefix: an output record's, then the bytes'
/// length (u32) and CRC32 (u32); the job's name follows.
const STORED_PREFIX: usize = OUTPUT_PREFIX + 8;

/// Whether `head` (a file's first 8 bytes) is a transcript's magic.
pub fn is_magic(head: &[u8]) -> bool {
    head == MAGIC || head == MAGIC_V2
}

/// Where an output entry's bytes are when its record does not hold them:
/// the kernel's spool record of job `job` that ends at the entry's
/// `spool_end` (`spool/<job>.out`, then `output/<job>.out` once the job is
/// forgotten), `len` bytes whose CRC32 is `crc`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredOutput {
    /// The job whose spool file holds the bytes.
    pub job: String,
    /// How many bytes.
    pub len: u32,
    /// Their CRC32.
    pub crc: u32,
}

/// A good record's entry, and where its output bytes are when the record
/// does not hold them (the entry's `data` is then empty).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decoded {
    /// The entry.
    pub entry: Entry,
    /// For a stored output record: where its bytes are.
    pub stored: Option<StoredOutput>,
}

/// The 8 random bytes that start every record of one file.
pub type Marker = [u8; 8];

/// A fresh marker: random, so that no other file's records (for example
/// a transcript a run printed, stored inside an output record) carry it.
pub fn new_marker() -> io::Result<Marker> {
    loop {
        let mut marker = [0u8; 8];
        fill_random(&mut marker)?;
        // Zeros are what a crash leaves behind; the magic is the file's
        // own header.
        if marker != [0; 8] && marker != MAGIC {
            return Ok(marker);
        }
    }
}

/// Random bytes from getrandom(2) (the getrandom crate retries on EINTR
/// and reads /dev/urandom where the call is missing).
fn fill_random(buf: &mut [u8]) -> io::Result<()> {
    Ok(getrandom::fill(buf)?)
}

/// The header of a new file.
pub fn file_header(marker: &Marker) -> [u8; FILE_HEADER as usize] {
    let mut header = [0u8; FILE_HEADER as usize];
    header[..8].copy_from_slice(&MAGIC);
    header[8..].copy_from_slice(marker);
    header
}

/// A record's header fields, read before anything is trusted.
#[derive(Clone, Copy, Debug)]
pub struct Header {
    pub seq: u64,
    pub kind: u8,
    pub len: usize,
    pub crc: u32,
}

impl Header {
    /// The header at the start of `bytes` (at least [`HEADER`] long), if
    /// it starts with `marker`.
    pub fn read(bytes: &[u8], marker: &Marker) -> Option<Header> {
        if bytes[..8] != marker[..] {
            return None;
        }
        Some(Header {
            seq: u64::from_be_bytes(bytes[8..16].try_into().unwrap()),
            kind: bytes[16],
            len: u32::from_be_bytes(bytes[17..21].try_into().unwrap()) as usize,
            crc: u32::from_be_bytes(bytes[21..25].try_into().unwrap()),
        })
    }

    /// Where the record starting at `at` ends, if its length is possible.
    pub fn end(&self, at: u64) -> Option<u64> {
        (self.len <= MAX_PAYLOAD).then(|| at + (HEADER + self.len) as u64)
    }
}

/// The entry a complete record (`record`: header then payload) holds, if
/// its checksum and payload are good.
pub fn decode(header: &Header, record: &[u8]) -> Option<Decoded> {
    decode_keeping(header, record, OutputBytes::Kept)
}

/// Whether a decoded output entry carries its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputBytes {
    /// Copied into the entry.
    Kept,
    /// Checked against the record's checksum, then left out (the entry's
    /// `data` is empty): for readers that book the history rather than
    /// show it, so opening a large transcript copies no output.
    Left,
}

/// [`decode`], with output bytes kept or left out.
pub fn decode_keeping(header: &Header, record: &[u8], output: OutputBytes) -> Option<Decoded> {
    let payload = &record[HEADER..];
    // Hashed in two parts rather than copied together: a payload may be
    // 16 MiB.
    let mut crc = crc32fast::Hasher::new();
    crc.update(&record[8..21]);
    crc.update(payload);
    if crc.finalize() != header.crc {
        return None;
    }
    let whole = |entry: Entry| Decoded {
        entry,
        stored: None,
    };
    match header.kind {
        KIND_JSON => serde_json::from_slice::<Entry>(payload)
            .ok()
            .filter(|entry| entry.seq == header.seq)
            .map(whole),
        KIND_OUTPUT => decode_output(header.seq, payload, output).map(whole),
        KIND_STORED => decode_stored(header.seq, payload),
        _ => None,
    }
}

/// A stored output record: its entry (no bytes) and where they are.
fn decode_stored(seq: u64, payload: &[u8]) -> Option<Decoded> {
    if payload.len() <= STORED_PREFIX || payload.len() > STORED_PREFIX + JOB_NAME_MAX {
        return None;
    }
    let word = |i: usize| u32::from_be_bytes(payload[i..i + 4].try_into().unwrap());
    let job = std::str::from_utf8(&payload[STORED_PREFIX..]).ok()?;
    if !valid_job(job) {
        return None;
    }
    let len = word(OUTPUT_PREFIX);
    // No spool record is larger than a record of the transcript may be.
    if len as usize > MAX_PAYLOAD {
        return None;
    }
    let entry = decode_output(seq, &payload[..OUTPUT_PREFIX], OutputBytes::Left)?;
    if !matches!(
        entry.body,
        EntryBody::Output {
            spool_end: Some(_),
            ..
        }
    ) {
        return None;
    }
    Some(Decoded {
        entry,
        stored: Some(StoredOutput {
            job: job.to_string(),
            len,
            crc: word(OUTPUT_PREFIX + 4),
        }),
    })
}

fn decode_output(seq: u64, payload: &[u8], output: OutputBytes) -> Option<Entry> {
    if payload.len() < OUTPUT_PREFIX {
        return None;
    }
    let word = |i: usize| u64::from_be_bytes(payload[i * 8..i * 8 + 8].try_into().unwrap());
    let stream = match payload[32] {
        1 => Stream::Stdout,
        2 => Stream::Stderr,
        _ => return None,
    };
    Some(Entry {
        seq,
        at_ms: word(0),
        body: EntryBody::Output {
            input: Some(word(1)).filter(|&n| n != 0),
            stream,
            data: match output {
                OutputBytes::Kept => Bytes::copy_from_slice(&payload[OUTPUT_PREFIX..]),
                OutputBytes::Left => Bytes::new(),
            },
            spool_end: Some(word(3)).filter(|&n| n != u64::MAX),
            bash: Some(word(2)).filter(|&n| n != 0),
        },
    })
}

/// Encode `entry` as one record into `out` (cleared first), or say why it
/// cannot be stored.
pub fn encode(marker: &Marker, entry: &Entry, out: &mut Vec<u8>) -> Result<(), SessionError> {
    let tail = encode_parts(marker, entry, None, out)?;
    out.extend_from_slice(tail);
    Ok(())
}

/// `entry`'s record in two parts: all but an output entry's bytes in
/// `head` (cleared first), then those bytes, returned as they are (empty
/// for any other entry). A writer sends both with one `writev`, so output
/// is not copied again on its way to the file. With `stored_in` (a job's
/// name), an output entry's bytes are left in that job's spool record,
/// which ends at its `spool_end`: the record holds their length and CRC32
/// instead (kind 3), and the tail is empty.
pub fn encode_parts<'e>(
    marker: &Marker,
    entry: &'e Entry,
    stored_in: Option<&str>,
    head: &mut Vec<u8>,
) -> Result<&'e [u8], SessionError> {
    head.clear();
    head.extend_from_slice(marker);
    head.extend_from_slice(&entry.seq.to_be_bytes());
    head.push(0);
    // Length and checksum, filled in once the payload is there.
    head.extend_from_slice(&[0; 8]);
    let (kind, tail): (u8, &[u8]) = match &entry.body {
        EntryBody::Output {
            input,
            stream,
            data,
            spool_end,
            bash,
        } => {
            // 0 and u64::MAX stand for None, so they cannot be stored as
            // numbers; runs, bash commands and spool offsets never are.
            if *input == Some(0) || *bash == Some(0) || *spool_end == Some(u64::MAX) {
                return Err(SessionError::Unrepresentable);
            }
            head.extend_from_slice(&entry.at_ms.to_be_bytes());
            head.extend_from_slice(&input.unwrap_or(0).to_be_bytes());
            head.extend_from_slice(&bash.unwrap_or(0).to_be_bytes());
            head.extend_from_slice(&spool_end.unwrap_or(u64::MAX).to_be_bytes());
            head.push(match stream {
                Stream::Stdout => 1,
                Stream::Stderr => 2,
            });
            match stored_in {
                Some(job) => {
                    push_stored(job, data, spool_end.is_some(), head)?;
                    (KIND_STORED, &[][..])
                }
                None => (KIND_OUTPUT, &data[..]),
            }
        }
        _ => {
            serde_json::to_writer(&mut *head, entry)?;
            (KIND_JSON, &[])
        }
    };
    let len = head.len() - HEADER + tail.len();
    if len > MAX_PAYLOAD {
        return Err(SessionError::EntryTooLarge {
            len,
            max: MAX_PAYLOAD,
        });
    }
    head[16] = kind;
    head[17..21].copy_from_slice(&(len as u32).to_be_bytes());
    let mut crc = crc32fast::Hasher::new();
    crc.update(&head[8..21]);
    crc.update(&head[HEADER..]);
    crc.update(tail);
    let crc = crc.finalize();
    head[21..25].copy_from_slice(&crc.to_be_bytes());
    Ok(tail)
}

/// A stored output record's own fields: the length and CRC32 of `data`,
/// which stay in job `job`'s spool record (one that has an offset).
fn push_stored(
    job: &str,
    data: &[u8],
    has_offset: bool,
    head: &mut Vec<u8>,
) -> Result<(), SessionError> {
    let len = u32::try_from(data.len())
        .ok()
        .filter(|&len| valid_job(job) && has_offset && len as usize <= MAX_PAYLOAD);
    let Some(len) = len else {
        return Err(SessionError::NotInSpool {
            job: job.to_string(),
        });
    };
    head.extend_from_slice(&len.to_be_bytes());
    head.extend_from_slice(&crc32fast::hash(data).to_be_bytes());
    head.extend_from_slice(job.as_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_output_records_bytes_are_written_as_they_are_behind_its_head() {
        let marker = *b"mArKeR!!";
        let data: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
        let entry = Entry {
            seq: 12,
            at_ms: 1_796_000_000_000,
            body: EntryBody::Output {
                input: Some(3),
                stream: Stream::Stderr,
                data: data.clone().into(),
                spool_end: Some(70_000),
                bash: None,
            },
        };
        let mut head = Vec::new();
        let tail = encode_parts(&marker, &entry, None, &mut head).unwrap();
        let EntryBody::Output { data: own, .. } = &entry.body else {
            unreachable!()
        };
        assert!(std::ptr::eq(tail, &own[..]), "the bytes are not copied");
        assert_eq!(head.len(), HEADER + OUTPUT_PREFIX);
        let mut whole = Vec::new();
        encode(&marker, &entry, &mut whole).unwrap();
        assert_eq!(whole, [head.as_slice(), tail].concat());
        let header = Header::read(&whole, &marker).unwrap();
        assert_eq!(header.len, OUTPUT_PREFIX + data.len());
        assert_eq!(decode(&header, &whole).map(|d| d.entry), Some(entry));
    }

    #[test]
    fn output_bytes_left_out_are_still_checked() {
        let marker = *b"mArKeR!!";
        let entry = Entry {
            seq: 4,
            at_ms: 9,
            body: EntryBody::Output {
                input: Some(2),
                stream: Stream::Stdout,
                data: b"built\n".to_vec().into(),
                spool_end: Some(11),
                bash: None,
            },
        };
        let mut record = Vec::new();
        encode(&marker, &entry, &mut record).unwrap();
        let header = Header::read(&record, &marker).unwrap();
        let booked = decode_keeping(&header, &record, OutputBytes::Left)
            .unwrap()
            .entry;
        let EntryBody::Output { data, .. } = &booked.body else {
            panic!("not output: {booked:?}")
        };
        assert!(data.is_empty());
        assert_eq!(
            booked,
            Entry {
                body: EntryBody::Output {
                    data: Default::default(),
                    input: Some(2),
                    stream: Stream::Stdout,
                    spool_end: Some(11),
                    bash: None,
                },
                ..entry
            }
        );
        let last = record.len() - 1;
        record[last] ^= 1;
        assert_eq!(decode_keeping(&header, &record, OutputBytes::Left), None);
    }

    #[test]
    fn a_stored_output_record_holds_where_its_bytes_are_not_the_bytes() {
        let marker = *b"mArKeR!!";
        let data: Vec<u8> = (0..=255u8).cycle().take(40_000).collect();
        let entry = Entry {
            seq: 5,
            at_ms: 77,
            body: EntryBody::Output {
                input: Some(9),
                stream: Stream::Stdout,
                data: data.clone().into(),
                spool_end: Some(123_456),
                bash: None,
            },
        };
        let mut head = Vec::new();
        let tail = encode_parts(&marker, &entry, Some("r9"), &mut head).unwrap();
        assert!(tail.is_empty(), "the bytes stay in the spool");
        assert_eq!(head.len(), HEADER + STORED_PREFIX + 2);
        let header = Header::read(&head, &marker).unwrap();
        assert_eq!(header.kind, KIND_STORED);
        let decoded = decode(&header, &head).unwrap();
        assert_eq!(
            decoded.stored,
            Some(StoredOutput {
                job: "r9".into(),
                len: 40_000,
                crc: crc32fast::hash(&data),
            })
        );
        let EntryBody::Output { data: left, .. } = &decoded.entry.body else {
            panic!("not output: {decoded:?}")
        };
        assert!(left.is_empty());
        // A job name the spool would refuse, or no spool offset, is refused
        // here too.
        assert!(encode_parts(&marker, &entry, Some("../x"), &mut head).is_err());
        let mut no_offset = entry.clone();
        if let EntryBody::Output { spool_end, .. } = &mut no_offset.body {
            *spool_end = None;
        }
        assert!(encode_parts(&marker, &no_offset, Some("r9"), &mut head).is_err());
    }
}
