//! Handing a client's connection from the supervisor to a worker: the
//! supervisor sends the client's socket over its connection to the worker
//! (`SCM_RIGHTS`, one byte of data) and drops out, so the client and the
//! worker then talk directly: no splice, one hop fewer for every byte of
//! output and every answer.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use tokio::io::Interest;
use tokio::net::UnixStream;

/// The byte that carries the descriptor.
const CARRIER: u8 = b'F';

/// Send `fd` over `stream`.
pub async fn send_fd(stream: &UnixStream, fd: RawFd) -> io::Result<()> {
    loop {
        stream.writable().await?;
        match stream.try_io(Interest::WRITABLE, || send_once(stream.as_raw_fd(), fd)) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            other => return other,
        }
    }
}

/// Receive one descriptor sent with [`send_fd`] on `stream`.
pub async fn recv_fd(stream: &UnixStream) -> io::Result<OwnedFd> {
    loop {
        stream.readable().await?;
        match stream.try_io(Interest::READABLE, || recv_once(stream.as_raw_fd())) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            other => return other,
        }
    }
}

/// Room for one descriptor's control message.
fn space() -> usize {
    // SAFETY: CMSG_SPACE only computes a size.
    unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) as usize }
}

/// A message header over one data byte and room for one descriptor. The
/// caller keeps `iov`'s buffer and `control` alive while it is used.
fn header(iov: &mut libc::iovec, control: &mut [u8]) -> libc::msghdr {
    // SAFETY: msghdr is plain data; all-zero is a valid empty header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = control.len() as _;
    msg
}

fn send_once(socket: RawFd, fd: RawFd) -> io::Result<()> {
    let mut data = [CARRIER];
    let mut iov = libc::iovec {
        iov_base: data.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut control = vec![0u8; space()];
    let msg = header(&mut iov, &mut control);
    // SAFETY: every pointer in `msg` points into buffers that live until
    // sendmsg returns, with their lengths.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), fd);
        if libc::sendmsg(socket, &msg, libc::MSG_NOSIGNAL) != 1 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

fn recv_once(socket: RawFd) -> io::Result<OwnedFd> {
    let mut data = [0u8];
    let mut iov = libc::iovec {
        iov_base: data.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut control = vec![0u8; space()];
    let mut msg = header(&mut iov, &mut control);
    // SAFETY: as in `send_once`; a descriptor received is owned by this
    // process from recvmsg on (MSG_CMSG_CLOEXEC: not inherited by children).
    unsafe {
        let got = libc::recvmsg(socket, &mut msg, libc::MSG_CMSG_CLOEXEC);
        if got < 0 {
            return Err(io::Error::last_os_error());
        }
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if got != 1 || data[0] != CARRIER || cmsg.is_null() {
            return Err(io::Error::other("no connection was handed over"));
        }
        if (*cmsg).cmsg_level != libc::SOL_SOCKET || (*cmsg).cmsg_type != libc::SCM_RIGHTS {
            return Err(io::Error::other("a handoff carried something else"));
        }
        let fd = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>());
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

/// A received descriptor as a connection of this runtime.
pub fn into_stream(fd: OwnedFd) -> io::Result<UnixStream> {
    let stream = std::os::unix::net::UnixStream::from(fd);
    stream.set_nonblocking(true)?;
    UnixStream::from_std(stream)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn a_connection_handed_over_talks_to_its_new_owner() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let (supervisor, worker) = UnixStream::pair().unwrap();
            let (mut client, daemon_side) = UnixStream::pair().unwrap();
            send_fd(&supervisor, daemon_side.as_raw_fd()).await.unwrap();
            drop(daemon_side);
            let mut handed = into_stream(recv_fd(&worker).await.unwrap()).unwrap();
            client.write_all(b"ping").await.unwrap();
            let mut got = [0u8; 4];
            handed.read_exact(&mut got).await.unwrap();
            assert_eq!(&got, b"ping");
            handed.write_all(b"pong").await.unwrap();
            client.read_exact(&mut got).await.unwrap();
            assert_eq!(&got, b"pong");
        });
    }
}
