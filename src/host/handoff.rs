//! Handing a client's connection from the supervisor to a worker: the
//! supervisor sends the client's socket over its connection to the worker
//! (`SCM_RIGHTS`, one byte of data) and drops out, so the client and the
//! worker then talk directly: no splice, one hop fewer for every byte of
//! output and every answer.

use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::net::{
    recvmsg, sendmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

use tokio::io::Interest;
use tokio::net::UnixStream;

/// The byte that carries the descriptor.
const CARRIER: u8 = b'F';

/// Send `fd` over `stream`.
pub async fn send_fd(stream: &UnixStream, fd: BorrowedFd<'_>) -> io::Result<()> {
    loop {
        stream.writable().await?;
        match stream.try_io(Interest::WRITABLE, || send_once(stream.as_fd(), fd)) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            other => return other,
        }
    }
}

/// Receive one descriptor sent with [`send_fd`] on `stream`.
pub async fn recv_fd(stream: &UnixStream) -> io::Result<OwnedFd> {
    loop {
        stream.readable().await?;
        match stream.try_io(Interest::READABLE, || recv_once(stream.as_fd())) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            other => return other,
        }
    }
}

fn send_once(socket: BorrowedFd<'_>, fd: BorrowedFd<'_>) -> io::Result<()> {
    let fds = [fd];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    control.push(SendAncillaryMessage::ScmRights(&fds));
    let sent = sendmsg(
        socket,
        &[IoSlice::new(&[CARRIER])],
        &mut control,
        SendFlags::NOSIGNAL,
    )?;
    if sent != 1 {
        return Err(io::ErrorKind::WriteZero.into());
    }
    Ok(())
}

fn recv_once(socket: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    let mut data = [0u8];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    // CMSG_CLOEXEC: a descriptor received is not inherited by children. One
    // received but not taken here is closed with `control`.
    let got = recvmsg(
        socket,
        &mut [IoSliceMut::new(&mut data)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    let handed = match control.drain().next() {
        Some(RecvAncillaryMessage::ScmRights(mut fds)) if got.bytes == 1 && data[0] == CARRIER => {
            fds.next()
                .ok_or_else(|| io::Error::other("no connection was handed over"))
        }
        Some(_) if got.bytes == 1 && data[0] == CARRIER => {
            Err(io::Error::other("a handoff carried something else"))
        }
        _ => Err(io::Error::other("no connection was handed over")),
    };
    handed
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
            send_fd(&supervisor, daemon_side.as_fd()).await.unwrap();
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
