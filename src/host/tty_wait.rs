//! Whether a pseudo-terminal's program is blocked on input (Linux): what
//! `laws::waiting` reads.
//!
//! From the terminal's master: its foreground process group (`TIOCGPGRP`
//! works on the master), the terminal itself (`TIOCGPTPEER` opens the
//! slave side, whose device number names it and whose input queue says how
//! many typed bytes a read would return now). Then every thread of every
//! process of the group: its state in `/proc/PID/task/TID/stat` and the
//! system call it sleeps in, `/proc/PID/task/TID/syscall`. A thread reads
//! the terminal when it sleeps in
//! - `read`, `readv`, `pread64`, `preadv`, `preadv2` on a descriptor that
//!   is the terminal (another open of the same device counts: `less` reads
//!   `/dev/tty`);
//! - `poll` or `ppoll` with the terminal among its descriptors, waiting to
//!   read (the array is read from `/proc/PID/mem`);
//! - `select` or `pselect6` with the terminal in its read set (read from
//!   `/proc/PID/mem`);
//! - `epoll_wait`, `epoll_pwait` or `epoll_pwait2` on an epoll whose
//!   interest list holds the terminal for reading (`/proc/PID/fdinfo`).
//!
//! The group is blocked on input when some thread reads the terminal so
//! and none is running (or in uninterruptible sleep, or stopped). `sleep`
//! sleeps in `clock_nanosleep`, `make` in `wait4` beside running children:
//! neither is waiting. Reading another process's `syscall` and `mem` needs
//! the right to trace it: the kernel, their ancestor, has it.

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use crate::laws::waiting::{Foreground, Seen};

/// What one look at the terminal found. Its unread keys are those in the
/// terminal's input queue: the caller adds the keys it has not written yet.
pub fn look(master: BorrowedFd<'_>) -> Seen {
    let unknown = Seen {
        foreground: Foreground::Unknown,
        unread_key_bytes: 0,
    };
    // The group first: a terminal no program holds is never opened (the
    // slave's last close is what tells its master that the program hung up).
    let Some(group) = foreground_group(master) else {
        return unknown;
    };
    let Some(terminal) = Terminal::of_master(master) else {
        return unknown;
    };
    Seen {
        foreground: terminal.foreground(group),
        unread_key_bytes: terminal.unread_bytes(),
    }
}

/// The terminal's foreground process group, if it has one.
fn foreground_group(master: BorrowedFd<'_>) -> Option<u32> {
    let mut group: libc::pid_t = 0;
    // SAFETY: TIOCGPGRP writes one pid_t through the pointer.
    let rc = unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCGPGRP, &mut group) };
    (rc == 0 && group > 0).then_some(group.unsigned_abs())
}

/// The slave side of a pseudo-terminal, opened from its master.
struct Terminal {
    slave: OwnedFd,
    device: u64,
}

impl Terminal {
    fn of_master(master: BorrowedFd<'_>) -> Option<Terminal> {
        let flags = libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC | libc::O_NONBLOCK;
        // SAFETY: TIOCGPTPEER takes open flags and returns a new descriptor
        // of the slave side, which we own from here on.
        let fd = unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCGPTPEER, flags) };
        if fd < 0 {
            return None;
        }
        // SAFETY: `fd` was just returned by the kernel and nothing else owns it.
        let slave = unsafe { OwnedFd::from_raw_fd(fd) };
        let device = nix::sys::stat::fstat(&slave).ok()?.st_rdev;
        Some(Terminal { slave, device })
    }

    /// Bytes a read of the terminal would return now: in a line-editing
    /// terminal, those of lines already ended.
    fn unread_bytes(&self) -> u64 {
        let mut queued: libc::c_int = 0;
        // SAFETY: FIONREAD writes one int through the pointer.
        let rc = unsafe { libc::ioctl(self.slave.as_raw_fd(), libc::FIONREAD, &mut queued) };
        if rc < 0 {
            return 0;
        }
        u64::try_from(queued).unwrap_or(0)
    }

    fn foreground(&self, group: u32) -> Foreground {
        let members = group_members(group);
        if members.is_empty() {
            return Foreground::Unknown;
        }
        let mut reading = false;
        for pid in members {
            for tid in threads(pid) {
                match self.thread(pid, tid) {
                    Thread::Active => return Foreground::Busy,
                    Thread::ReadsTerminal => reading = true,
                    Thread::SleepsElsewhere | Thread::Gone => {}
                }
            }
        }
        if reading {
            Foreground::BlockedOnInput
        } else {
            Foreground::Busy
        }
    }

    fn thread(&self, pid: u32, tid: u32) -> Thread {
        let task = format!("/proc/{pid}/task/{tid}");
        let Some(state) = read_small(&format!("{task}/stat")).and_then(|s| stat_state(&s)) else {
            return Thread::Gone;
        };
        match state {
            'S' => {}
            'Z' | 'X' | 'x' => return Thread::Gone,
            _ => return Thread::Active,
        }
        let Some(call) = read_small(&format!("{task}/syscall")).and_then(|s| parse_syscall(&s))
        else {
            return Thread::SleepsElsewhere;
        };
        let on_terminal = match input_call(call.number) {
            Some(InputCall::Read) => self.is_terminal(pid, call.args[0]),
            Some(InputCall::Poll) => self.polls_terminal(pid, call.args[0], call.args[1]),
            Some(InputCall::Select) => self.selects_terminal(pid, call.args[0], call.args[1]),
            Some(InputCall::Epoll) => self.epoll_has_terminal(pid, call.args[0]),
            None => false,
        };
        if on_terminal {
            Thread::ReadsTerminal
        } else {
            Thread::SleepsElsewhere
        }
    }

    /// Whether descriptor `fd` of process `pid` is this terminal.
    fn is_terminal(&self, pid: u32, fd: u64) -> bool {
        let Ok(fd) = i32::try_from(fd) else {
            return false;
        };
        nix::sys::stat::stat(format!("/proc/{pid}/fd/{fd}").as_str())
            .is_ok_and(|st| st.st_rdev == self.device && is_char_device(st.st_mode))
    }

    fn polls_terminal(&self, pid: u32, address: u64, count: u64) -> bool {
        const POLLFD_BYTES: u64 = 8;
        const POLL_MAX_FDS: u64 = 4096;
        let wanted = libc::POLLIN | libc::POLLPRI;
        let Some(bytes) = read_memory(pid, address, count.min(POLL_MAX_FDS) * POLLFD_BYTES) else {
            return false;
        };
        bytes.chunks_exact(8).any(|entry| {
            let fd = i32::from_ne_bytes([entry[0], entry[1], entry[2], entry[3]]);
            let events = i16::from_ne_bytes([entry[4], entry[5]]);
            fd >= 0 && events & wanted != 0 && self.is_terminal(pid, fd.unsigned_abs().into())
        })
    }

    fn selects_terminal(&self, pid: u32, count: u64, read_set: u64) -> bool {
        const SELECT_MAX_FDS: u64 = 1024;
        if read_set == 0 {
            return false;
        }
        let count = count.min(SELECT_MAX_FDS);
        let Some(bits) = read_memory(pid, read_set, count.div_ceil(8)) else {
            return false;
        };
        (0..count).any(|fd| {
            let byte = usize::try_from(fd / 8).ok().and_then(|at| bits.get(at));
            byte.is_some_and(|byte| byte & (1 << (fd % 8)) != 0) && self.is_terminal(pid, fd)
        })
    }

    /// Whether epoll `epfd` of `pid` watches this terminal for input: its
    /// `fdinfo` lists each watched descriptor as `tfd: N events: MASK`.
    fn epoll_has_terminal(&self, pid: u32, epfd: u64) -> bool {
        let Some(info) = read_small(&format!("/proc/{pid}/fdinfo/{epfd}")) else {
            return false;
        };
        epoll_targets(&info)
            .into_iter()
            .any(|(fd, events)| events & EPOLLIN != 0 && self.is_terminal(pid, fd))
    }
}

const EPOLLIN: u64 = 0x1;

/// What one thread of the foreground group is doing.
#[derive(Debug, PartialEq, Eq)]
enum Thread {
    /// Running, in uninterruptible sleep, stopped or traced.
    Active,
    /// Asleep reading or polling the terminal.
    ReadsTerminal,
    /// Asleep in anything else.
    SleepsElsewhere,
    /// Gone, or a zombie.
    Gone,
}

/// The system calls a program waits for typed input in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum InputCall {
    /// Its first argument is the descriptor read.
    Read,
    /// `(array, count)` of `struct pollfd`.
    Poll,
    /// `(count, read set, ...)`.
    Select,
    /// Its first argument is the epoll descriptor.
    Epoll,
}

/// Which input call system call `number` is, on this architecture.
fn input_call(number: libc::c_long) -> Option<InputCall> {
    let reads = [
        libc::SYS_read,
        libc::SYS_readv,
        libc::SYS_pread64,
        libc::SYS_preadv,
        libc::SYS_preadv2,
    ];
    #[cfg(target_arch = "x86_64")]
    let (polls, selects, epolls) = (
        [libc::SYS_poll, libc::SYS_ppoll],
        [libc::SYS_select, libc::SYS_pselect6],
        [
            libc::SYS_epoll_wait,
            libc::SYS_epoll_pwait,
            libc::SYS_epoll_pwait2,
        ],
    );
    // aarch64 has only the newer calls (`ppoll`, `pselect6`, `epoll_pwait`).
    #[cfg(not(target_arch = "x86_64"))]
    let (polls, selects, epolls) = (
        [libc::SYS_ppoll],
        [libc::SYS_pselect6],
        [libc::SYS_epoll_pwait, libc::SYS_epoll_pwait2],
    );
    if reads.contains(&number) {
        Some(InputCall::Read)
    } else if polls.contains(&number) {
        Some(InputCall::Poll)
    } else if selects.contains(&number) {
        Some(InputCall::Select)
    } else if epolls.contains(&number) {
        Some(InputCall::Epoll)
    } else {
        None
    }
}

/// A sleeping thread's system call: its number and first arguments.
#[derive(Debug, PartialEq, Eq)]
struct Syscall {
    number: libc::c_long,
    args: [u64; 2],
}

/// `/proc/PID/syscall`: `NR arg1 ... arg6 sp pc` (arguments in hex) for
/// a thread blocked in a call; `running`, or `-1 sp pc` otherwise.
fn parse_syscall(text: &str) -> Option<Syscall> {
    let mut fields = text.split_whitespace();
    let number: libc::c_long = fields.next()?.parse().ok()?;
    if number < 0 {
        return None;
    }
    let mut hex = || u64::from_str_radix(fields.next()?.trim_start_matches("0x"), 16).ok();
    Some(Syscall {
        number,
        args: [hex()?, hex()?],
    })
}

/// The state letter of `/proc/PID/stat` (after the command name, which
/// may hold spaces and parentheses).
fn stat_state(stat: &str) -> Option<char> {
    stat[stat.rfind(')')? + 1..].trim_start().chars().next()
}

/// The process group of `/proc/PID/stat` (the third field after the name).
fn stat_group(stat: &str) -> Option<u32> {
    stat[stat.rfind(')')? + 1..]
        .split_whitespace()
        .nth(2)?
        .parse()
        .ok()
}

/// `(fd, events)` of each `tfd:` line of an epoll's fdinfo.
fn epoll_targets(info: &str) -> Vec<(u64, u64)> {
    info.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            if words.next()? != "tfd:" {
                return None;
            }
            let fd = words.next()?.parse().ok()?;
            if words.next()? != "events:" {
                return None;
            }
            let events = u64::from_str_radix(words.next()?, 16).ok()?;
            Some((fd, events))
        })
        .collect()
}

fn is_char_device(mode: libc::mode_t) -> bool {
    mode & libc::S_IFMT == libc::S_IFCHR
}

/// The live processes of process group `group`.
fn group_members(group: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            read_small(&format!("/proc/{pid}/stat")).and_then(|s| stat_group(&s)) == Some(group)
        })
        .collect()
}

fn threads(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
        .collect()
}

fn read_small(path: &str) -> Option<String> {
    use std::io::Read as _;
    let mut text = String::with_capacity(512);
    std::fs::File::open(path)
        .ok()?
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

/// `length` bytes of process `pid`'s memory at `address`.
fn read_memory(pid: u32, address: u64, length: u64) -> Option<Vec<u8>> {
    use std::os::unix::fs::FileExt as _;
    if length == 0 {
        return None;
    }
    let file = std::fs::File::open(format!("/proc/{pid}/mem")).ok()?;
    let mut bytes = vec![0; usize::try_from(length).ok()?];
    file.read_exact_at(&mut bytes, address).ok()?;
    Some(bytes)
}

#[cfg(test)]
mod tests;
