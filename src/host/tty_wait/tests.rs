use std::io::Write as _;
use std::os::fd::AsFd;
use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::*;
use crate::laws::timing::POLL_MS;

#[test]
fn a_blocked_calls_number_and_arguments_are_read() {
    let blocked = "0 0x3 0x7ffd1c0 0x1 0x0 0x0 0x0 0x7ffd1a8 0x7f3e";
    assert_eq!(
        parse_syscall(blocked),
        Some(Syscall {
            number: 0,
            args: [3, 0x7ffd1c0]
        })
    );
    assert_eq!(parse_syscall("running\n"), None);
    assert_eq!(parse_syscall("-1 0x7ffd1a8 0x7f3e\n"), None);
}

#[test]
fn the_state_and_group_come_after_the_command_name() {
    let stat = "4242 (my (odd) prog) S 1 4240 4240 34816 4240 4194304";
    assert_eq!(stat_state(stat), Some('S'));
    assert_eq!(stat_group(stat), Some(4240));
}

#[test]
fn an_epolls_watched_descriptors_are_read_from_its_fdinfo() {
    let info = "pos:\t0\nflags:\t02\nmnt_id:\t15\nino:\t1057\n\
        tfd:        0 events:       19 data:                0  pos:0 ino:3 sdev:1a\n\
        tfd:        7 events:        4 data:                7  pos:0 ino:9 sdev:e\n";
    assert_eq!(epoll_targets(info), [(0, 0x19), (7, 0x4)]);
}

#[test]
fn the_input_calls_are_known_on_this_architecture() {
    assert_eq!(input_call(libc::SYS_read), Some(InputCall::Read));
    assert_eq!(input_call(libc::SYS_ppoll), Some(InputCall::Poll));
    assert_eq!(input_call(libc::SYS_pselect6), Some(InputCall::Select));
    assert_eq!(input_call(libc::SYS_epoll_pwait), Some(InputCall::Epoll));
    assert_eq!(input_call(libc::SYS_clock_nanosleep), None);
    assert_eq!(input_call(libc::SYS_wait4), None);
}

/// A program on a fresh pseudo-terminal, as the terminal's session leader
/// (its controlling terminal, its foreground group).
struct OnTerminal {
    master: OwnedFd,
    child: Child,
    output: Vec<u8>,
}

impl OnTerminal {
    fn start(argv: &[&str], cwd: &std::path::Path) -> OnTerminal {
        let mut master: libc::c_int = -1;
        let mut slave: libc::c_int = -1;
        let size = libc::winsize {
            ws_row: 24,
            ws_col: 80,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: openpty writes two descriptors, which we own from here on.
        let rc = unsafe {
            libc::openpty(
                &mut master,
                &mut slave,
                std::ptr::null_mut(),
                std::ptr::null(),
                &size,
            )
        };
        assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
        // SAFETY: both were just opened by openpty.
        let (master, slave) =
            unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
        nix::fcntl::fcntl(
            master.as_fd(),
            nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
        )
        .unwrap();
        let mut command = Command::new(argv[0]);
        command
            .args(&argv[1..])
            .current_dir(cwd)
            .env("TERM", "xterm")
            .env("LESSHISTFILE", "-")
            .stdin(Stdio::from(slave.try_clone().unwrap()))
            .stdout(Stdio::from(slave.try_clone().unwrap()))
            .stderr(Stdio::from(slave));
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            command.pre_exec(|| {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command.spawn().unwrap();
        OnTerminal {
            master,
            child,
            output: Vec::new(),
        }
    }

    /// Read what the program wrote, so it never blocks on a full terminal.
    fn drain(&mut self) {
        let mut buffer = [0u8; 4096];
        while let Ok(n) = nix::unistd::read(&self.master, &mut buffer) {
            if n == 0 {
                break;
            }
            self.output.extend_from_slice(&buffer[..n]);
        }
    }

    fn look(&mut self) -> Seen {
        self.drain();
        look(self.master.as_fd())
    }

    fn type_keys(&mut self, keys: &[u8]) {
        std::fs::File::from(self.master.try_clone().unwrap())
            .write_all(keys)
            .unwrap();
    }

    /// Look until `done` holds, for at most `limit`.
    fn look_until(&mut self, limit: Duration, done: impl Fn(&Seen) -> bool) -> Seen {
        let start = Instant::now();
        loop {
            let seen = self.look();
            if done(&seen) {
                return seen;
            }
            assert!(
                start.elapsed() < limit,
                "still {seen:?} after {limit:?}; the program wrote {:?}",
                String::from_utf8_lossy(&self.output)
            );
            std::thread::sleep(Duration::from_millis(POLL_MS));
        }
    }

    /// Wait until some process of the group sleeps in system call `number`.
    fn wait_for_call(&mut self, number: libc::c_long) {
        self.wait_for_sleep(&format!("call {number}"), |call| call == number);
    }

    /// Wait until some process of the group sleeps in a system call that
    /// `wanted` accepts.
    fn wait_for_sleep(&mut self, what: &str, wanted: impl Fn(libc::c_long) -> bool) {
        let group = self.child.id();
        let start = Instant::now();
        while !group_members(group).into_iter().any(|pid| {
            read_small(&format!("/proc/{pid}/syscall"))
                .and_then(|s| parse_syscall(&s))
                .is_some_and(|call| wanted(call.number))
        }) {
            assert!(start.elapsed() < START_LIMIT, "no process reached {what}");
            self.drain();
            std::thread::sleep(Duration::from_millis(POLL_MS));
        }
    }
}

impl Drop for OnTerminal {
    fn drop(&mut self) {
        // The group is the one this test made (setsid): end it by its id.
        let group = nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).unwrap());
        let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

/// How long a program may take to start and block on the terminal, on a
/// loaded machine.
const START_LIMIT: Duration = Duration::from_secs(20);

fn program_here(name: &str) -> bool {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {name}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        crate::skip::skip_unless_ci(&format!(
            "{name} is not installed (scripts/setup installs it)"
        ));
    }
    found
}

fn blocks_on_input(argv: &[&str]) {
    if !program_here(argv[0]) {
        return;
    }
    let dir = std::env::temp_dir();
    let mut program = OnTerminal::start(argv, &dir);
    let seen = program.look_until(START_LIMIT, |s| s.foreground == Foreground::BlockedOnInput);
    assert_eq!(seen.unread_key_bytes, 0);
}

#[test]
fn bash_read_waits_for_input() {
    blocks_on_input(&["bash", "--norc", "-c", "read x; echo got $x"]);
}

#[test]
fn cat_waits_for_input() {
    blocks_on_input(&["cat"]);
}

#[test]
fn a_python_prompt_waits_for_input() {
    blocks_on_input(&["python3", "-q", "-i"]);
}

#[test]
fn vim_waits_for_input() {
    blocks_on_input(&["vim", "-u", "NONE", "-N", "-n"]);
}

#[test]
fn less_waits_for_input_on_dev_tty() {
    let dir = std::env::temp_dir().join(format!("eukhe-tty-wait-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("pages.txt");
    let text: String = (0..200).map(|n| format!("line {n}\n")).collect();
    std::fs::write(&file, text).unwrap();
    // Its input is a pipe: less reads its keys from /dev/tty, another
    // open of the terminal.
    blocks_on_input(&["sh", "-c", &format!("cat {} | less", file.display())]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Looks for a while at a program that sleeps in something else: it never
/// reads as blocked on input.
fn never_blocked(program: &mut OnTerminal) {
    for _ in 0..10 {
        let seen = program.look();
        assert_eq!(seen.foreground, Foreground::Busy, "{seen:?}");
        std::thread::sleep(Duration::from_millis(POLL_MS));
    }
}

#[test]
fn sleep_is_not_waiting_for_input() {
    let mut program = OnTerminal::start(&["sleep", "100"], &std::env::temp_dir());
    program.wait_for_call(libc::SYS_clock_nanosleep);
    never_blocked(&mut program);
}

#[test]
fn make_waiting_for_its_recipe_is_not_waiting_for_input() {
    if !program_here("make") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("eukhe-tty-make-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("Makefile"), "all:\n\tsleep 100; true\n").unwrap();
    let mut program = OnTerminal::start(&["make", "-s"], &dir);
    program.wait_for_call(libc::SYS_clock_nanosleep);
    program.wait_for_call(libc::SYS_wait4);
    never_blocked(&mut program);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_busy_loop_is_not_waiting_for_input() {
    let mut program = OnTerminal::start(
        &["bash", "--norc", "-c", "while :; do :; done"],
        &std::env::temp_dir(),
    );
    program.look_until(START_LIMIT, |s| s.foreground == Foreground::Busy);
    never_blocked(&mut program);
}

#[test]
fn typed_lines_the_program_has_not_read_are_counted() {
    let mut program = OnTerminal::start(&["sleep", "100"], &std::env::temp_dir());
    program.wait_for_call(libc::SYS_clock_nanosleep);
    assert_eq!(program.look().unread_key_bytes, 0);
    // One ended line and the start of another: only the ended one would
    // be returned by a read now.
    program.type_keys(b"abc\nxy");
    let seen = program.look_until(START_LIMIT, |s| s.unread_key_bytes > 0);
    assert_eq!(seen.unread_key_bytes, 4);
}

#[test]
fn once_the_line_is_read_the_program_is_no_longer_blocked() {
    let mut program = OnTerminal::start(
        &["bash", "--norc", "-c", "read x; sleep 100"],
        &std::env::temp_dir(),
    );
    program.look_until(START_LIMIT, |s| s.foreground == Foreground::BlockedOnInput);
    program.type_keys(b"answer\n");
    program.wait_for_call(libc::SYS_clock_nanosleep);
    never_blocked(&mut program);
}

#[test]
fn a_master_whose_program_is_gone_is_unknown() {
    let mut program = OnTerminal::start(&["true"], &std::env::temp_dir());
    program.child.wait().unwrap();
    assert_eq!(program.look().foreground, Foreground::Unknown);
}

/// A Python program that waits in `kind` of call on `source` (a
/// descriptor named in Python: `0`, the terminal, or `r`, a pipe's end).
fn python_waits_in(kind: InputCall, code: &str) -> Option<OnTerminal> {
    if !program_here("python3") {
        return None;
    }
    let script = format!("import os, select\nr, w = os.pipe()\n{code}\n");
    let mut program = OnTerminal::start(&["python3", "-c", &script], &std::env::temp_dir());
    program.wait_for_sleep(&format!("{kind:?}"), |call| input_call(call) == Some(kind));
    Some(program)
}

const POLL_ON: &str = "p = select.poll(); p.register(FD, select.POLLIN); p.poll()";
const EPOLL_ON: &str = "e = select.epoll(); e.register(FD, select.EPOLLIN); e.poll()";
const SELECT_ON: &str = "select.select([FD], [], [])";

#[test]
fn polling_selecting_or_epolling_the_terminal_is_waiting_for_input() {
    for (kind, code) in [
        (InputCall::Poll, POLL_ON),
        (InputCall::Epoll, EPOLL_ON),
        (InputCall::Select, SELECT_ON),
    ] {
        let Some(mut program) = python_waits_in(kind, &code.replace("FD", "0")) else {
            return;
        };
        let seen = program.look();
        assert_eq!(seen.foreground, Foreground::BlockedOnInput, "{kind:?}");
    }
}

#[test]
fn polling_selecting_or_epolling_a_pipe_is_not_waiting_for_input() {
    for (kind, code) in [
        (InputCall::Poll, POLL_ON),
        (InputCall::Epoll, EPOLL_ON),
        (InputCall::Select, SELECT_ON),
    ] {
        let Some(mut program) = python_waits_in(kind, &code.replace("FD", "r")) else {
            return;
        };
        never_blocked(&mut program);
    }
}

/// The rule and its detection together, on a real prompt: a watch driven
/// by the program's output and the looks it asks for.
#[test]
fn a_prompt_is_waiting_once_quiet_and_no_longer_once_answered() {
    use crate::laws::waiting::{WaitingWatch, WAITING_QUIET_MS};
    let clock = Instant::now();
    let now_ms = || u64::try_from(clock.elapsed().as_millis()).unwrap();
    let script = "echo starting; sleep 0.2; read -p 'name? ' x; echo \"hi $x\"; sleep 100";
    let mut program = OnTerminal::start(&["bash", "--norc", "-c", script], &std::env::temp_dir());
    let mut watch = WaitingWatch::new(now_ms());
    let mut last_output_ms = now_ms();
    // Follows the program until `done` holds of the watch, as a shell would.
    let mut follow = |program: &mut OnTerminal,
                      watch: &mut WaitingWatch,
                      done: &dyn Fn(&WaitingWatch) -> bool| {
        let start = Instant::now();
        while !done(watch) {
            let before = program.output.len();
            program.drain();
            if program.output.len() > before {
                last_output_ms = now_ms();
                watch.output(last_output_ms);
            }
            if watch.due(now_ms()) {
                let seen = look(program.master.as_fd());
                watch.looked(seen, now_ms());
            }
            assert!(start.elapsed() < START_LIMIT, "the watch never settled");
            std::thread::sleep(Duration::from_millis(POLL_MS));
        }
        last_output_ms
    };
    let last = follow(&mut program, &mut watch, &|w| w.waiting());
    assert!(
        now_ms() >= last + WAITING_QUIET_MS,
        "waiting before the quiet passed"
    );
    assert!(String::from_utf8_lossy(&program.output).contains("name? "));
    program.type_keys(b"bob\n");
    watch.nudged(now_ms());
    assert!(!watch.waiting());
    program.wait_for_call(libc::SYS_clock_nanosleep);
    // Each look now finds the program asleep elsewhere.
    for _ in 0..3 {
        let at = watch.poll_timeout();
        while now_ms() < at {
            program.drain();
            std::thread::sleep(Duration::from_millis(POLL_MS));
        }
        watch.looked(look(program.master.as_fd()), now_ms());
        assert!(!watch.waiting());
    }
    assert!(String::from_utf8_lossy(&program.output).contains("hi bob"));
}
