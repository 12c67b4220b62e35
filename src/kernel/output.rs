//! A job's output: two FIFOs per job (stdout, stderr) that the job's shell
//! opens for writing; the kernel reads them into the spool as fast as the
//! job writes.

use std::cell::RefCell;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::rc::Rc;

use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;

use super::jobs::Kernel;
use crate::protocol::message::Stream;

/// The size of a job's output pipes: a fast writer gets ahead while the
/// kernel stores what it read.
const PIPE_BYTES: i32 = 1024 * 1024;

/// The most one read takes (one spool record).
const READ_BYTES: usize = 128 * 1024;

pub struct Fifo {
    pub reader: pipe::Receiver,
    /// A write end held by the kernel until the job has opened its own.
    pub placeholder: File,
}

/// Make a FIFO at `path`, 0600.
pub fn make_fifo(path: &Path) -> Result<(), String> {
    let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|e| format!("kernel: {e}"))?;
    // SAFETY: mkfifo(3) reads the NUL-terminated path we own.
    if unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(format!("kernel: cannot make {}: {e}", path.display()));
    }
    Ok(())
}

/// Make the FIFO at `path` (0600) and open both ends.
pub fn open_fifo(path: &Path) -> Result<Fifo, String> {
    let _ = std::fs::remove_file(path);
    let context = |e: std::io::Error| format!("kernel: output pipe {}: {e}", path.display());
    make_fifo(path)?;
    let reader = pipe::OpenOptions::new()
        .open_receiver(path)
        .map_err(context)?;
    let placeholder = OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(context)?;
    // SAFETY: fcntl(2) on a FIFO this process holds; failure leaves the
    // default size, which is only slower.
    unsafe { libc::fcntl(placeholder.as_raw_fd(), libc::F_SETPIPE_SZ, PIPE_BYTES) };
    Ok(Fifo {
        reader,
        placeholder,
    })
}

/// Read `reader` into `job`'s spool until every writer has closed it.
pub async fn read(
    kernel: Rc<RefCell<Kernel>>,
    job: String,
    stream: Stream,
    mut reader: pipe::Receiver,
) {
    let mut buf = vec![0u8; READ_BYTES];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => kernel.borrow_mut().output(&job, stream, &buf[..n]),
        }
    }
    kernel.borrow_mut().stream_closed(&job);
}
