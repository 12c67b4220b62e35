//! Frames: a 4-byte big-endian length, then that many bytes: one
//! [`Message`], JSON for control messages (the payload starts with `{`) or
//! binary for output (see `protocol::output`).
//!
//! A frame longer than [`MAX_FRAME_BYTES`], an empty frame or a stream that
//! ends inside a frame is an error naming the problem; the connection that
//! sent it is answered and closed, every other connection keeps going.

use std::fmt;

use serde::de::DeserializeOwned;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The largest frame payload accepted or sent: 1 MiB.
pub const MAX_FRAME_BYTES: usize = 1 << 20;

/// What a reader of a stream of frames buffers: a small frame (a
/// keystroke, its echo) then takes one read, not one for its header and
/// one for its payload.
pub const FRAME_READ_BUFFER_BYTES: usize = 64 * 1024;

/// `read` buffered for reading frames from (only frames: the buffer may
/// hold the start of the next one).
pub fn frame_reader<R: AsyncRead>(read: R) -> tokio::io::BufReader<R> {
    tokio::io::BufReader::with_capacity(FRAME_READ_BUFFER_BYTES, read)
}

/// Why a frame could not be read or written.
#[derive(Debug)]
pub enum FrameError {
    /// The peer closed the stream between frames (a clean end).
    Closed,
    /// The stream ended inside a frame.
    Truncated {
        /// The length the frame's header announced.
        expected: usize,
        /// The bytes that came.
        got: usize,
    },
    /// A frame of zero bytes.
    Empty,
    /// A frame over the limit.
    TooLarge {
        /// The length the frame's header announced.
        len: usize,
    },
    /// The payload is not a message we understand.
    Malformed(String),
    /// The stream failed.
    Io(std::io::Error),
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::Closed => write!(f, "connection closed"),
            FrameError::Truncated { expected, got } => {
                write!(f, "truncated frame: expected {expected} bytes, got {got}")
            }
            FrameError::Empty => write!(f, "empty frame"),
            FrameError::TooLarge { len } => {
                write!(
                    f,
                    "frame of {len} bytes is over the limit of {MAX_FRAME_BYTES}"
                )
            }
            FrameError::Malformed(why) => write!(f, "malformed message: {why}"),
            FrameError::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for FrameError {}

impl From<std::io::Error> for FrameError {
    fn from(e: std::io::Error) -> Self {
        FrameError::Io(e)
    }
}

/// Read one frame's payload.
pub async fn read_frame_bytes<R: AsyncRead + Unpin>(reader: &mut R) -> Result<Vec<u8>, FrameError> {
    let mut header = [0u8; 4];
    let got = read_full(reader, &mut header).await?;
    if got == 0 {
        return Err(FrameError::Closed);
    }
    if got < header.len() {
        return Err(FrameError::Truncated {
            expected: header.len(),
            got,
        });
    }
    let len = u32::from_be_bytes(header) as usize;
    if len == 0 {
        return Err(FrameError::Empty);
    }
    if len > MAX_FRAME_BYTES {
        return Err(FrameError::TooLarge { len });
    }
    // Read into spare capacity: no half-megabyte of output zeroed first.
    let mut payload = Vec::with_capacity(len);
    let got = (&mut *reader)
        .take(len as u64)
        .read_to_end(&mut payload)
        .await?;
    if got < len {
        return Err(FrameError::Truncated { expected: len, got });
    }
    Ok(payload)
}

/// A message that travels as one frame's payload.
pub trait Message: Sized {
    /// The message as one frame's payload.
    fn to_payload(&self) -> Result<Vec<u8>, FrameError>;
    /// The message a frame's payload holds, or why it holds none.
    fn from_payload(payload: &[u8]) -> Result<Self, FrameError>;
    /// The same from a payload the caller gives up: a message that carries
    /// bytes (output) can keep the payload's buffer instead of copying it.
    fn from_owned_payload(payload: Vec<u8>) -> Result<Self, FrameError> {
        Self::from_payload(&payload)
    }
}

/// Messages that are plain JSON.
macro_rules! json_messages {
    ($($t:ty),* $(,)?) => {$(
        impl Message for $t {
            fn to_payload(&self) -> Result<Vec<u8>, FrameError> {
                serde_json::to_vec(self).map_err(|e| FrameError::Malformed(e.to_string()))
            }
            fn from_payload(payload: &[u8]) -> Result<Self, FrameError> {
                decode(payload)
            }
        }
    )*};
}

json_messages!(
    super::message::Request,
    super::kernel::ToKernel,
    super::kernel::FromKernel,
    serde_json::Value,
);

/// Read one frame and decode it as `T`.
pub async fn read_frame<T: Message, R: AsyncRead + Unpin>(reader: &mut R) -> Result<T, FrameError> {
    T::from_owned_payload(read_frame_bytes(reader).await?)
}

/// Decode a frame payload.
pub fn decode<T: DeserializeOwned>(payload: &[u8]) -> Result<T, FrameError> {
    let text = std::str::from_utf8(payload)
        .map_err(|e| FrameError::Malformed(format!("invalid UTF-8: {e}")))?;
    serde_json::from_str(text).map_err(|e| FrameError::Malformed(e.to_string()))
}

/// Encode `message` as one frame (header and payload).
pub fn encode<T: Message>(message: &T) -> Result<Vec<u8>, FrameError> {
    let payload = message.to_payload()?;
    if payload.len() > MAX_FRAME_BYTES {
        return Err(FrameError::TooLarge { len: payload.len() });
    }
    let mut frame = Vec::with_capacity(4 + payload.len());
    frame.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    frame.extend_from_slice(&payload);
    Ok(frame)
}

/// Write `message` as one frame.
pub async fn write_frame<T: Message, W: AsyncWrite + Unpin>(
    writer: &mut W,
    message: &T,
) -> Result<(), FrameError> {
    let frame = encode(message)?;
    writer.write_all(&frame).await?;
    writer.flush().await?;
    Ok(())
}

async fn read_full<R: AsyncRead + Unpin>(
    reader: &mut R,
    buf: &mut [u8],
) -> Result<usize, FrameError> {
    let mut filled = 0;
    while filled < buf.len() {
        let n = reader.read(&mut buf[filled..]).await?;
        if n == 0 {
            break;
        }
        filled += n;
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
    }

    fn read(bytes: &[u8]) -> Result<Vec<u8>, FrameError> {
        runtime().block_on(read_frame_bytes(&mut &bytes[..]))
    }

    fn with_header(len: u32, payload: &[u8]) -> Vec<u8> {
        let mut v = len.to_be_bytes().to_vec();
        v.extend_from_slice(payload);
        v
    }

    #[test]
    fn a_frame_at_exactly_the_limit_is_read_and_one_byte_over_is_refused() {
        let at_limit = vec![b'x'; MAX_FRAME_BYTES];
        assert_eq!(
            read(&with_header(MAX_FRAME_BYTES as u32, &at_limit))
                .unwrap()
                .len(),
            MAX_FRAME_BYTES
        );
        let err = read(&with_header(MAX_FRAME_BYTES as u32 + 1, b"")).unwrap_err();
        assert!(
            matches!(err, FrameError::TooLarge { len } if len == MAX_FRAME_BYTES + 1),
            "{err}"
        );
    }

    #[test]
    fn empty_truncated_and_closed_frames_are_told_apart() {
        assert!(matches!(read(&with_header(0, b"")), Err(FrameError::Empty)));
        assert!(matches!(
            read(&[0, 0]),
            Err(FrameError::Truncated {
                expected: 4,
                got: 2
            })
        ));
        assert!(matches!(
            read(&with_header(10, b"abc")),
            Err(FrameError::Truncated {
                expected: 10,
                got: 3
            })
        ));
        assert!(matches!(read(b""), Err(FrameError::Closed)));
    }

    #[test]
    fn invalid_utf8_is_a_malformed_message() {
        let err = decode::<serde_json::Value>(&[0xff, 0xfe]).unwrap_err();
        assert!(err.to_string().contains("invalid UTF-8"), "{err}");
    }

    #[test]
    fn encode_then_read_round_trips() {
        let frame = encode(&serde_json::json!({"a": 1})).unwrap();
        let payload = read(&frame).unwrap();
        assert_eq!(decode::<serde_json::Value>(&payload).unwrap()["a"], 1);
    }
}
