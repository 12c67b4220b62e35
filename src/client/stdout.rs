//! Standard output for commands. A reader that goes away (`eukhe log s |
//! head -1`) ends the command quietly, as it ends any Unix filter: by
//! SIGPIPE, with no message.

use std::io::{self, Write};

use super::error::ClientError;

/// Write `bytes` to standard output (buffered by the caller's lock).
pub fn write_all(bytes: &[u8]) -> Result<(), ClientError> {
    let mut out = io::stdout().lock();
    out.write_all(bytes)
        .and_then(|()| out.flush())
        .map_err(failed)
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
