//! Output on the client wire: binary frames, so bytes arrive exactly as the
//! command wrote them and nothing is escaped.
//!
//! A frame whose payload starts with `{` is a JSON [`Response`]; one that
//! starts with a tag byte below is output:
//!
//! - `0x01` live output: `tag | stream | bytes`;
//! - `0x02` a stored output entry (`log`, `attach`):
//!   `tag | stream | seq u64 | at_ms u64 | input u64 | bash u64 | bytes`
//!   (big-endian; `0` for an absent input or bash number);
//! - `0x03` live output that is a run of zero bytes: `tag | stream | len
//!   u32` (big-endian, at most [`zeros::RUN_MAX`]). Sent only to a client
//!   whose hello has `Capability::ZeroRuns`; it stands for `len` zeros, so
//!   a run of `head -c 1G /dev/zero` crosses the socket as ten bytes.
//!
//! - `0x04` live output of a terminal run to a client that asked for
//!   offsets: `tag | stream | end u64 | bytes`, `end` the spool offset
//!   after the record the bytes are from;
//! - `0x05` a terminal job's output the kernel sends a typist that asked
//!   for its echo ([`Echo`]): `tag | stream | from u64 | end u64 | bytes`,
//!   the spool offsets before and after the records that hold them.
//!
//! `stream` is 1 for stdout and 2 for stderr.

use bytes::Bytes;

use super::entry::{Entry, EntryBody, Stream};
use super::frame::{decode, FrameError, Message};
use super::message::Response;
use super::zeros;

const LIVE: u8 = 0x01;
const ENTRY: u8 = 0x02;
const ZERO_RUN: u8 = 0x03;
const LIVE_AT: u8 = 0x04;
const ECHO: u8 = 0x05;
const ENTRY_HEADER: usize = 2 + 4 * 8;
const LIVE_AT_HEADER: usize = 2 + 8;
const ECHO_HEADER: usize = 2 + 2 * 8;

/// A terminal job's output as the kernel spooled it, sent straight to a
/// typist that asked for its echo: the bytes of the records from spool
/// offset `from` to `end`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Echo {
    /// The stream they came from.
    pub stream: Stream,
    /// The spool offset where their records start.
    pub from: u64,
    /// The spool offset after their records.
    pub end: u64,
    /// The bytes.
    pub data: Bytes,
}

impl Echo {
    /// The whole frame (length, header, bytes); `None` when it would be
    /// over the frame limit.
    pub fn frame(stream: Stream, (from, end): (u64, u64), data: &[u8]) -> Option<Vec<u8>> {
        let len = ECHO_HEADER + data.len();
        if len > super::frame::MAX_FRAME_BYTES {
            return None;
        }
        let mut frame = Vec::with_capacity(4 + len);
        frame.extend_from_slice(&(len as u32).to_be_bytes());
        frame.extend_from_slice(&[ECHO, stream_byte(stream)]);
        frame.extend_from_slice(&from.to_be_bytes());
        frame.extend_from_slice(&end.to_be_bytes());
        frame.extend_from_slice(data);
        Some(frame)
    }

    /// The echo a frame's payload holds; `None` when it holds none (a
    /// JSON message).
    pub fn from_payload(payload: Vec<u8>) -> Result<Option<Echo>, FrameError> {
        if payload.first() != Some(&ECHO) {
            return Ok(None);
        }
        if payload.len() < ECHO_HEADER {
            return Err(FrameError::Malformed(
                "echo frame shorter than its header".to_string(),
            ));
        }
        let stream = stream_of(payload[1])?;
        let (from, end) = (u64_at(&payload, 2), u64_at(&payload, 10));
        Ok(Some(Echo {
            stream,
            from,
            end,
            data: Bytes::from(payload).slice(ECHO_HEADER..),
        }))
    }
}

fn stream_byte(stream: Stream) -> u8 {
    match stream {
        Stream::Stdout => 1,
        Stream::Stderr => 2,
    }
}

fn stream_of(byte: u8) -> Result<Stream, FrameError> {
    match byte {
        1 => Ok(Stream::Stdout),
        2 => Ok(Stream::Stderr),
        other => Err(FrameError::Malformed(format!(
            "unknown output stream {other}"
        ))),
    }
}

fn u64_at(payload: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(payload[at..at + 8].try_into().expect("eight bytes"))
}

fn nonzero(n: u64) -> Option<u64> {
    (n != 0).then_some(n)
}

/// The frame header of live output of `len` bytes: the frame's length, the
/// tag and the stream. A writer sends it, then the bytes themselves (no
/// copy of the output into a frame).
pub fn live_header(stream: Stream, len: usize) -> Result<[u8; 6], FrameError> {
    let frame = len + 2;
    if frame > super::frame::MAX_FRAME_BYTES {
        return Err(FrameError::TooLarge { len: frame });
    }
    let mut header = [0u8; 6];
    header[..4].copy_from_slice(&(frame as u32).to_be_bytes());
    header[4] = LIVE;
    header[5] = stream_byte(stream);
    Ok(header)
}

/// The frame header of live output of `len` bytes from the spool record
/// that ends at `end` (`Response::OutputAt`).
pub fn live_at_header(stream: Stream, end: u64, len: usize) -> Result<[u8; 14], FrameError> {
    let frame = len + LIVE_AT_HEADER;
    if frame > super::frame::MAX_FRAME_BYTES {
        return Err(FrameError::TooLarge { len: frame });
    }
    let mut header = [0u8; 14];
    header[..4].copy_from_slice(&(frame as u32).to_be_bytes());
    header[4] = LIVE_AT;
    header[5] = stream_byte(stream);
    header[6..].copy_from_slice(&end.to_be_bytes());
    Ok(header)
}

/// The whole frame of live output that is `len` zero bytes, for a client
/// that reads zero runs; `None` when `len` is more than one run holds.
pub fn zero_run_frame(stream: Stream, len: usize) -> Option<[u8; 10]> {
    let len = u32::try_from(len)
        .ok()
        .filter(|&n| n as usize <= zeros::RUN_MAX)?;
    let mut frame = [0u8; 10];
    frame[..4].copy_from_slice(&6u32.to_be_bytes());
    frame[4] = ZERO_RUN;
    frame[5] = stream_byte(stream);
    frame[6..].copy_from_slice(&len.to_be_bytes());
    Some(frame)
}

impl Message for Response {
    fn to_payload(&self) -> Result<Vec<u8>, FrameError> {
        match self {
            Response::Output { stream, data } => {
                let mut payload = Vec::with_capacity(2 + data.len());
                payload.extend_from_slice(&[LIVE, stream_byte(*stream)]);
                payload.extend_from_slice(data);
                Ok(payload)
            }
            Response::OutputAt { stream, data, end } => {
                let mut payload = Vec::with_capacity(LIVE_AT_HEADER + data.len());
                payload.extend_from_slice(&[LIVE_AT, stream_byte(*stream)]);
                payload.extend_from_slice(&end.to_be_bytes());
                payload.extend_from_slice(data);
                Ok(payload)
            }
            Response::Entry(Entry {
                seq,
                at_ms,
                body:
                    EntryBody::Output {
                        input,
                        stream,
                        data,
                        bash,
                        ..
                    },
            }) => {
                let mut payload = Vec::with_capacity(ENTRY_HEADER + data.len());
                payload.extend_from_slice(&[ENTRY, stream_byte(*stream)]);
                for n in [*seq, *at_ms, input.unwrap_or(0), bash.unwrap_or(0)] {
                    payload.extend_from_slice(&n.to_be_bytes());
                }
                payload.extend_from_slice(data);
                Ok(payload)
            }
            json => serde_json::to_vec(json).map_err(|e| FrameError::Malformed(e.to_string())),
        }
    }

    fn from_payload(payload: &[u8]) -> Result<Self, FrameError> {
        match payload.first() {
            Some(&LIVE) | Some(&ENTRY) | Some(&LIVE_AT) => {
                Self::from_owned_payload(payload.to_vec())
            }
            Some(&ZERO_RUN) => zero_run(payload),
            _ => decode(payload),
        }
    }

    /// Output keeps the frame's buffer: the bytes are the part of it past
    /// the header, so a megabyte of output is neither copied into a second
    /// allocation nor moved down.
    fn from_owned_payload(payload: Vec<u8>) -> Result<Self, FrameError> {
        match payload.first() {
            Some(&LIVE) if payload.len() >= 2 => {
                let stream = stream_of(payload[1])?;
                Ok(Response::Output {
                    stream,
                    data: Bytes::from(payload).slice(2..),
                })
            }
            Some(&LIVE_AT) if payload.len() >= LIVE_AT_HEADER => {
                let stream = stream_of(payload[1])?;
                let end = u64_at(&payload, 2);
                Ok(Response::OutputAt {
                    stream,
                    end,
                    data: Bytes::from(payload).slice(LIVE_AT_HEADER..),
                })
            }
            Some(&ENTRY) if payload.len() >= ENTRY_HEADER => {
                let stream = stream_of(payload[1])?;
                let (seq, at_ms) = (u64_at(&payload, 2), u64_at(&payload, 10));
                let (input, bash) = (u64_at(&payload, 18), u64_at(&payload, 26));
                Ok(Response::Entry(Entry {
                    seq,
                    at_ms,
                    body: EntryBody::Output {
                        input: nonzero(input),
                        stream,
                        data: Bytes::from(payload).slice(ENTRY_HEADER..),
                        spool_end: None,
                        bash: nonzero(bash),
                    },
                }))
            }
            Some(&LIVE) | Some(&ENTRY) | Some(&LIVE_AT) => Err(FrameError::Malformed(
                "output frame shorter than its header".to_string(),
            )),
            Some(&ZERO_RUN) => zero_run(&payload),
            _ => decode(&payload),
        }
    }
}

/// A zero-run frame's output: its zeros sliced from the static block, so
/// the run costs the client no allocation.
fn zero_run(payload: &[u8]) -> Result<Response, FrameError> {
    let [ZERO_RUN, stream, a, b, c, d] = *payload else {
        return Err(FrameError::Malformed(format!(
            "a zero-run frame has 6 bytes, not {}",
            payload.len()
        )));
    };
    let len = u32::from_be_bytes([a, b, c, d]) as usize;
    if len > zeros::RUN_MAX {
        return Err(FrameError::Malformed(format!(
            "a zero run of {len} bytes is over the limit of {}",
            zeros::RUN_MAX
        )));
    }
    Ok(Response::Output {
        stream: stream_of(stream)?,
        data: bytes::Bytes::from_static(&zeros::ZEROS[..len]),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(response: Response) {
        let payload = response.to_payload().unwrap();
        assert_eq!(Response::from_payload(&payload).unwrap(), response);
        assert_eq!(Response::from_owned_payload(payload).unwrap(), response);
    }

    #[test]
    fn every_byte_value_crosses_the_wire_unescaped() {
        let data: Vec<u8> = (0..=255u8).collect();
        let live = Response::Output {
            stream: Stream::Stderr,
            data: data.clone().into(),
        };
        assert_eq!(live.to_payload().unwrap().len(), 2 + 256, "no escaping");
        round_trip(live);
        round_trip(Response::Entry(Entry {
            seq: 41,
            at_ms: 1_796_000_000_000,
            body: EntryBody::Output {
                input: Some(3),
                stream: Stream::Stdout,
                data: data.into(),
                spool_end: None,
                bash: None,
            },
        }));
        round_trip(Response::Entry(Entry {
            seq: 42,
            at_ms: 1,
            body: EntryBody::Output {
                input: None,
                stream: Stream::Stdout,
                data: b"{not json".to_vec().into(),
                spool_end: None,
                bash: Some(4),
            },
        }));
    }

    #[test]
    fn offsets_cross_the_wire_with_the_bytes() {
        round_trip(Response::OutputAt {
            stream: Stream::Stdout,
            data: b"\xff{echo".to_vec().into(),
            end: 1 << 40,
        });
        assert!(Response::from_payload(&[LIVE_AT, 1, 0, 0]).is_err());
        let frame = Echo::frame(Stream::Stdout, (7, 13), b"z").unwrap();
        let echo = Echo::from_payload(frame[4..].to_vec()).unwrap().unwrap();
        assert_eq!((echo.from, echo.end, &echo.data[..]), (7, 13, &b"z"[..]));
        let json = br#"{"type":"keyed","job":"r1"}"#.to_vec();
        assert_eq!(Echo::from_payload(json).unwrap(), None);
        assert!(Echo::from_payload(vec![ECHO, 1, 0]).is_err());
    }

    #[test]
    fn a_live_at_header_then_the_bytes_is_the_same_frame() {
        let response = Response::OutputAt {
            stream: Stream::Stdout,
            data: b"echo".to_vec().into(),
            end: 99,
        };
        let mut split = live_at_header(Stream::Stdout, 99, 4).unwrap().to_vec();
        split.extend_from_slice(b"echo");
        assert_eq!(split, super::super::frame::encode(&response).unwrap());
    }

    #[test]
    fn a_live_header_then_the_bytes_is_the_same_frame() {
        let data = b"\xffbytes".to_vec();
        let response = Response::Output {
            stream: Stream::Stdout,
            data: data.clone().into(),
        };
        let mut split = live_header(Stream::Stdout, data.len()).unwrap().to_vec();
        split.extend_from_slice(&data);
        assert_eq!(split, super::super::frame::encode(&response).unwrap());
    }

    #[test]
    fn control_messages_stay_json_and_short_output_frames_are_malformed() {
        round_trip(Response::Exit {
            status: 3,
            lost: None,
            cut_short: None,
        });
        assert_eq!(
            Response::Exit {
                status: 3,
                lost: None,
                cut_short: None,
            }
            .to_payload()
            .unwrap()[0],
            b'{'
        );
        // A client of this build reads an older worker's exit, which says
        // nothing of lost output.
        assert_eq!(
            Response::from_payload(br#"{"type":"exit","status":3}"#).unwrap(),
            Response::Exit {
                status: 3,
                lost: None,
                cut_short: None,
            }
        );
        round_trip(Response::Exit {
            status: 0,
            lost: Some(crate::protocol::entry::LostOutput {
                bytes: 4096,
                error: "No space left on device (os error 28)".into(),
            }),
            cut_short: None,
        });
        round_trip(Response::Exit {
            status: 255,
            lost: None,
            cut_short: Some("bash 1 was cut short".into()),
        });
        assert!(Response::from_payload(&[ENTRY, 1, 0]).is_err());
        assert!(Response::from_payload(&[LIVE, 9]).is_err());
    }

    #[test]
    fn a_zero_run_frame_reads_as_its_zeros_and_a_bad_one_is_malformed() {
        let frame = zero_run_frame(Stream::Stderr, 300_000).unwrap();
        let len = u32::from_be_bytes(frame[..4].try_into().unwrap()) as usize;
        assert_eq!(len, frame.len() - 4);
        let expected = Response::Output {
            stream: Stream::Stderr,
            data: vec![0u8; 300_000].into(),
        };
        assert_eq!(Response::from_payload(&frame[4..]).unwrap(), expected);
        assert_eq!(
            Response::from_owned_payload(frame[4..].to_vec()).unwrap(),
            expected
        );
        assert_eq!(zero_run_frame(Stream::Stdout, zeros::RUN_MAX + 1), None);
        let over = (zeros::RUN_MAX as u32 + 1).to_be_bytes();
        let too_long = [&[ZERO_RUN, 1][..], &over].concat();
        assert!(Response::from_payload(&too_long).is_err());
        assert!(Response::from_payload(&[ZERO_RUN, 1, 0, 0, 1]).is_err());
        assert!(Response::from_payload(&[ZERO_RUN, 3, 0, 0, 0, 1]).is_err());
    }
}
