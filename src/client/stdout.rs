//! Standard output for commands. A reader that goes away (`eukhe log s |
//! head -1`) ends the command quietly, as it ends any Unix filter: by
//! SIGPIPE, with no message.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsFd;
use std::sync::OnceLock;

use super::error::ClientError;

/// Write `bytes` to standard output, at once.
pub fn write_all(bytes: &[u8]) -> Result<(), ClientError> {
    write_raw(bytes).map_err(failed)
}

/// As [`write_all`], but a closed reader is returned
/// (`ClientError::Stdout`, a broken pipe), for a caller that must act
/// before it dies of it.
pub fn write_all_or_closed(bytes: &[u8]) -> Result<(), ClientError> {
    write_raw(bytes).map_err(ClientError::Stdout)
}

fn write_raw(bytes: &[u8]) -> io::Result<()> {
    // The lock keeps other writers of std's handle out; its buffer is
    // empty (every write here flushes), so order is kept.
    let mut out = io::stdout().lock();
    out.flush().and_then(|()| match unbuffered() {
        Some(mut file) => file.write_all(bytes),
        None => out.write_all(bytes).and_then(|()| out.flush()),
    })
}

/// Standard output without std's line buffer, which scans each write for
/// its last newline and splits it in two: a command's output (a megabyte
/// a frame) goes out in one write. None when standard output is closed.
fn unbuffered() -> Option<&'static File> {
    static FILE: OnceLock<Option<File>> = OnceLock::new();
    FILE.get_or_init(|| {
        io::stdout()
            .as_fd()
            .try_clone_to_owned()
            .ok()
            .map(File::from)
    })
    .as_ref()
}

/// Print `text` to standard output.
pub fn print(text: &str) -> Result<(), ClientError> {
    write_all(text.as_bytes())
}

/// The one line for a failed write to standard output; a closed reader
/// ends the process here, quietly.
pub fn failed(e: io::Error) -> ClientError {
    if e.kind() == io::ErrorKind::BrokenPipe {
        closed();
    }
    ClientError::Stdout(e)
}

/// Die of SIGPIPE, as a filter whose reader left does (Rust ignores the
/// signal, so writes fail with EPIPE instead).
fn closed() -> ! {
    // Restores the default action and raises the signal.
    let _ = signal_hook::low_level::emulate_default_handler(libc::SIGPIPE);
    std::process::exit(128 + libc::SIGPIPE)
}

/// `println!` through [`print`]: a closed reader ends the command quietly,
/// another failure is returned.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::client::stdout::print(&format!("{}\n", format_args!($($arg)*)))
    };
}
pub(crate) use outln;
