//! A job's output: two FIFOs per job (stdout, stderr) that the job's shell
//! opens for writing; the kernel reads them into the spool as fast as the
//! job writes.

use std::cell::RefCell;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::rc::Rc;
use std::time::Duration;

use nix::fcntl::{fcntl, FcntlArg};
use nix::sys::stat::Mode;
use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;

use super::error::KernelError;
use super::jobs::Kernel;
use crate::laws::timing::{OUTPUT_GATHER_MS, UTF8_HOLD_MS};
use crate::session::entry::Stream;

/// The size of a job's output pipes: a fast writer gets ahead while the
/// kernel stores what it read.
const PIPE_BYTES: i32 = 1024 * 1024;

/// The most one record holds.
const READ_BYTES: usize = 512 * 1024;

/// A read this large finds a stream in full flow: what follows it within
/// `OUTPUT_GATHER_MS` goes into the same record.
pub const GATHER_FROM_BYTES: usize = 16 * 1024;

/// The same for a terminal: its line discipline hands a reader at most
/// one buffer of 4 KiB at a time, so a read that nearly fills it finds
/// the program writing on.
const TERMINAL_GATHER_FROM_BYTES: usize = 4000;

pub struct Fifo {
    pub reader: pipe::Receiver,
    /// A write end held by the kernel until the job has opened its own.
    pub placeholder: File,
}

/// Make a FIFO at `path`, 0600.
pub fn make_fifo(path: &Path) -> Result<(), KernelError> {
    nix::unistd::mkfifo(path, Mode::S_IRUSR | Mode::S_IWUSR).map_err(|e| KernelError::Scratch {
        action: "make",
        path: path.to_path_buf(),
        source: e.into(),
    })
}

/// Make the FIFO at `path` (0600) and open both ends.
pub fn open_fifo(path: &Path) -> Result<Fifo, KernelError> {
    let _ = std::fs::remove_file(path);
    let context = |source| KernelError::Scratch {
        action: "open the output pipe",
        path: path.to_path_buf(),
        source,
    };
    make_fifo(path)?;
    let reader = pipe::OpenOptions::new()
        .open_receiver(path)
        .map_err(context)?;
    let placeholder = OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(context)?;
    // Failure leaves the default size, which is only slower.
    let _ = fcntl(&placeholder, FcntlArg::F_SETPIPE_SZ(PIPE_BYTES));
    Ok(Fifo {
        reader,
        placeholder,
    })
}

/// Read `reader` into `job`'s spool until every writer has closed it, or
/// until the job is hung up (`hang_up` turns on): then the reader's end
/// closes, so the job's next write gets SIGPIPE, and what it had not read
/// is never stored.
pub async fn read(
    kernel: Rc<RefCell<Kernel>>,
    job: String,
    stream: Stream,
    (mut reader, hang_up): (pipe::Receiver, tokio::sync::watch::Receiver<bool>),
) {
    tokio::select! {
        _ = pump(&kernel, &job, stream, &mut reader) => {}
        _ = super::hang_up::hung_up(hang_up) => {
            kernel.borrow_mut().holding(&job, stream, 0);
        }
    }
    // The books forget the pipe before its read end closes.
    let now = crate::clock::mono_ms();
    kernel.borrow_mut().stream_closed(&job, stream, now);
    drop(reader);
}

/// Read `reader` into `job`'s spool until every writer has closed it.
/// Records end at UTF-8 character boundaries: a character split across
/// reads waits for its last bytes, so text stays text in `log --json`.
async fn pump(kernel: &RefCell<Kernel>, job: &str, stream: Stream, reader: &mut pipe::Receiver) {
    // Read into spare capacity: a job that writes little (most) costs no
    // zeroed half-megabyte per stream.
    let mut buf: Vec<u8> = Vec::with_capacity(READ_BYTES);
    let mut held = 0;
    let gather_from = match nix::unistd::isatty(&*reader) {
        Ok(true) => TERMINAL_GATHER_FROM_BYTES,
        _ => GATHER_FROM_BYTES,
    };
    loop {
        let read = reader.read_buf(&mut buf);
        let got = if held == 0 {
            read.await
        } else {
            // The rest of a cut character comes at once or not at all:
            // bytes held this long go as they are.
            match tokio::time::timeout(Duration::from_millis(UTF8_HOLD_MS), read).await {
                Ok(got) => got,
                Err(_) => {
                    kernel.borrow_mut().output(job, stream, &buf[..held]);
                    buf.clear();
                    held = 0;
                    kernel.borrow_mut().holding(job, stream, 0);
                    continue;
                }
            }
        };
        match got {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let ended = n >= gather_from && {
                    // Held while gathering: the job's end waits for them.
                    kernel.borrow_mut().holding(job, stream, buf.len());
                    !gather(reader, &mut buf).await
                };
                let filled = buf.len();
                let whole = whole_characters(&buf[..filled]);
                if whole > 0 {
                    kernel.borrow_mut().output(job, stream, &buf[..whole]);
                }
                buf.copy_within(whole..filled, 0);
                held = filled - whole;
                buf.truncate(held);
                kernel.borrow_mut().holding(job, stream, held);
                if ended {
                    break;
                }
            }
        }
    }
    if held > 0 {
        kernel.borrow_mut().output(job, stream, &buf[..held]);
    }
}

/// Read on into `buf` until it is full or `OUTPUT_GATHER_MS` has passed;
/// false once every writer has closed the pipe (or reading failed).
async fn gather(reader: &mut pipe::Receiver, buf: &mut Vec<u8>) -> bool {
    let until = tokio::time::Instant::now() + Duration::from_millis(OUTPUT_GATHER_MS);
    while buf.len() < READ_BYTES {
        match tokio::time::timeout_at(until, reader.read_buf(buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return false,
            Ok(Ok(_)) => {}
            Err(_) => break,
        }
    }
    true
}

/// The length of `bytes` without a UTF-8 character cut at its end (at
/// most three bytes are held back; anything else, binary included, is
/// taken whole).
pub fn whole_characters(bytes: &[u8]) -> usize {
    let len = bytes.len();
    for back in 1..=3.min(len) {
        let byte = bytes[len - back];
        if byte & 0b1100_0000 == 0b1000_0000 {
            continue; // a continuation byte: look further back
        }
        let needs = match byte {
            0b1100_0000..=0b1101_1111 => 2,
            0b1110_0000..=0b1110_1111 => 3,
            0b1111_0000..=0b1111_0111 => 4,
            _ => return len,
        };
        return if back < needs { len - back } else { len };
    }
    len
}

#[cfg(test)]
mod tests {
    use super::whole_characters;

    #[test]
    fn a_character_cut_at_the_end_is_held_back_and_nothing_else_is() {
        let text = "aé€😀".as_bytes();
        for cut in 0..=text.len() {
            let whole = whole_characters(&text[..cut]);
            assert!(std::str::from_utf8(&text[..whole]).is_ok(), "cut {cut}");
            assert!(cut - whole < 4);
        }
        assert_eq!(whole_characters("aé".as_bytes()), 3);
        assert_eq!(whole_characters(&[b'a', 0xE2, 0x82]), 1);
        assert_eq!(whole_characters(&[0xFF, 0xFE]), 2, "binary is taken whole");
        assert_eq!(whole_characters(&[0x80, 0x80, 0x80, 0x80]), 4);
    }
}
