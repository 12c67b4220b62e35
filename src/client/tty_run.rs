//! The client's side of terminal runs, before the passthrough: the size a
//! terminal run starts with, and `eukhe keys`.

use std::ffi::OsString;
use std::process::ExitCode;

use super::cli::unexpected;
use super::error::ClientError;
use super::terminal::keys::{literal_keys, parse_keys};
use crate::config::detach_key::DetachKey;
use crate::laws::replace::ClientStart;
use crate::protocol::message::{Request, Response, SessionRequest};
use crate::protocol::tty::WindowSize;

/// The size of the terminal on standard output, or a VT100's when there is
/// none (or it says it has no size).
pub fn window_size() -> WindowSize {
    let mut size = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one `winsize`, which lives across the
    // call; fd 1 is this process's standard output, whatever it is (a
    // pipe or a file answers an error).
    let rc = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut size) };
    if rc == 0 && size.ws_row > 0 && size.ws_col > 0 {
        WindowSize {
            rows: size.ws_row,
            cols: size.ws_col,
        }
    } else {
        WindowSize::DEFAULT
    }
}

/// `keys`: type the arguments (keys by name, or text; all text with
/// `literal`) into the terminal of `input` (or of the session's current
/// terminal run); returns once they are in its input queue.
pub async fn keys(
    session: String,
    input: Option<u64>,
    literal: bool,
    text: &[OsString],
) -> Result<ExitCode, ClientError> {
    let data = if literal {
        literal_keys(text)
    } else {
        parse_keys(text).map_err(|e| ClientError::Usage(e.to_string()))?
    };
    let request = Request::Session {
        session,
        request: SessionRequest::Keys { input, data },
    };
    let answer = super::connect::connect(ClientStart::Send)
        .await?
        .ask(request)
        .await?;
    match answer {
        Response::Ok => Ok(ExitCode::SUCCESS),
        other => unexpected(other),
    }
}

/// The detach key: `flag` when given, else the `detach_key` setting, else
/// the default.
pub fn detach_key(flag: Option<DetachKey>) -> Result<DetachKey, ClientError> {
    if let Some(key) = flag {
        return Ok(key);
    }
    let paths = crate::paths::Paths::from_env()?;
    Ok(crate::config::Config::load(&paths.config)?.detach_key)
}
