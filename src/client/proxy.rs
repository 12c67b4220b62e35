//! `eukhe proxy`: what `eukhe --host HOST` runs on HOST over ssh. It makes
//! sure this user's daemon answers (starting it, or for an interactive
//! client replacing an idle older one, exactly as a local client does),
//! then copies bytes between its standard input and output and the
//! daemon's socket until either side closes. The client behind it says
//! hello itself and applies the replacement law to what answers.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsFd as _;
use std::os::linux::fs::MetadataExt as _;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::ExitCode;

use super::connect::connect_to;
use super::error::ClientError;
use super::remote::Target;
use crate::laws::replace::ClientStart;
use crate::paths::Paths;

/// One read's worth of bytes between the client and the daemon.
const COPY_BUFFER: usize = 64 * 1024;

/// Run the proxy; `background`: the client behind it is a background
/// client, so the daemon is never replaced.
pub fn main(background: bool) -> ExitCode {
    let ready = match accepting_now(background) {
        Some(ready) => ready,
        None => crate::runtime::block_on_client("proxy", ready(background)),
    };
    match ready.and_then(splice) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => super::cli::finish(Err(e)),
    }
}

/// For a background client, the daemon that accepts now, reached without
/// a runtime (the common case, on every remote command's path): the
/// client's own hello decides about it. None: none accepts, or the client
/// is interactive.
fn accepting_now(background: bool) -> Option<Result<UnixStream, ClientError>> {
    if !background {
        return None;
    }
    let paths = Paths::from_env().ok()?;
    let daemon = UnixStream::connect(&paths.socket).ok()?;
    Some(refuse_foreign_socket(&paths.socket).map(|()| daemon))
}

/// A connection to this machine's daemon, started or replaced first as
/// the client behind the proxy would have it.
async fn ready(background: bool) -> Result<UnixStream, ClientError> {
    let paths = Paths::from_env()?;
    // Always this machine's daemon: a remote's own EUKHE_REMOTE must not
    // send the proxy on to a third machine.
    if background {
        // None accepted (`accepting_now`): start one (or activate it).
        drop(connect_to(&Target::Local, ClientStart::Relaunch).await?);
    } else {
        // The remote's own interactive start: it may replace an idle
        // daemon older than the eukhe installed here.
        drop(connect_to(&Target::Local, ClientStart::Attach).await?);
    }
    refuse_foreign_socket(&paths.socket)?;
    UnixStream::connect(&paths.socket).map_err(ClientError::system(format!(
        "cannot connect to {}",
        paths.socket.display()
    )))
}

/// The proxy serves only its own user's daemon.
pub(super) fn refuse_foreign_socket(socket: &Path) -> Result<(), ClientError> {
    let owner = std::fs::metadata(socket)
        .map_err(ClientError::system(format!(
            "cannot read {}",
            socket.display()
        )))?
        .st_uid();
    let euid = nix::unistd::geteuid().as_raw();
    match foreign_socket(socket, owner, euid) {
        Some(line) => Err(ClientError::Remote(line)),
        None => Ok(()),
    }
}

/// The refusal of a socket owned by `owner` to a proxy running as `euid`,
/// or none when they are the same user.
pub fn foreign_socket(socket: &Path, owner: u32, euid: u32) -> Option<String> {
    (owner != euid).then(|| {
        format!(
            "the daemon's socket {} belongs to uid {owner}, not to this user (uid {euid}): `eukhe proxy` serves only its own user's daemon; log in as that user",
            socket.display()
        )
    })
}

/// Copy standard input to the daemon and the daemon to standard output,
/// until either side closes.
fn splice(daemon: UnixStream) -> Result<(), ClientError> {
    let system = |what: &'static str| ClientError::system(what);
    let mut input = File::from(
        std::io::stdin()
            .as_fd()
            .try_clone_to_owned()
            .map_err(system("cannot read standard input"))?,
    );
    // Not `std::io::stdout()`, which holds bytes until a newline.
    let mut output = File::from(
        std::io::stdout()
            .as_fd()
            .try_clone_to_owned()
            .map_err(system("cannot write standard output"))?,
    );
    let mut to_daemon = daemon
        .try_clone()
        .map_err(system("cannot copy the daemon's socket"))?;
    let mut from_daemon = daemon;
    let (ended, end) = std::sync::mpsc::channel();
    let ended_too = ended.clone();
    std::thread::spawn(move || {
        copy(&mut input, &mut to_daemon);
        let _ = to_daemon.shutdown(std::net::Shutdown::Write);
        let _ = ended.send(());
    });
    std::thread::spawn(move || {
        copy(&mut from_daemon, &mut output);
        let _ = ended_too.send(());
    });
    // Either side's end is the proxy's: the other copy is cut off by the
    // process's exit.
    let _ = end.recv();
    Ok(())
}

/// Copy `from` to `to` until `from` ends or either fails, by plain reads
/// and writes: `std::io::copy` splices between pipes and sockets, and
/// sshd was not woken by bytes spliced into its pipe.
fn copy(from: &mut impl Read, to: &mut impl Write) {
    let mut buf = vec![0u8; COPY_BUFFER];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        };
        if to.write_all(&buf[..n]).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_sockets_owner_is_served() {
        let socket = Path::new("/run/user/7/eukhe.sock");
        assert_eq!(foreign_socket(socket, 7, 7), None);
        let refusal = foreign_socket(socket, 7, 8).unwrap();
        assert!(refusal.contains("belongs to uid 7"), "{refusal}");
        assert!(refusal.contains("(uid 8)"), "{refusal}");
        assert!(!refusal.contains('\n'));
    }
}
