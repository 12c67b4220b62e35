//! The client's terminal in raw mode while it passes bytes to a terminal
//! run, and as it was on every way out.
//!
//! Raw mode is `cfmakeraw`, as `ssh -t` sets it: no echo, no line editing,
//! no signals from keys (Ctrl-C is a byte for the program), no input
//! translation, and output processing (`OPOST`) off too. The program's own
//! terminal, in the session, already turns its `\n` into `\r\n` when it
//! wants that; a second translation here would move the cursor to column 0
//! on every bare line feed a full-screen program sends (tmux, which draws
//! its own screen, keeps `OPOST`; a passthrough must not).
//!
//! The saved modes come back when the guard drops (an error returned
//! through `main`, a detach, the run's end, a panic unwinding: the crate
//! keeps the default `panic = "unwind"`), from a panic hook (a panic in
//! another thread or task, or under `panic = "abort"`), and on the signals
//! [`TerminalSignals`] watches: SIGTERM, SIGHUP, SIGQUIT and SIGINT (sent by
//! `kill`: in raw mode no key sends a signal) restore, then the client dies
//! of the signal; SIGTSTP restores, stops, and raw mode returns on SIGCONT
//! (also after a SIGSTOP no one could catch). [`watch_signals`] does all
//! this beside a passthrough.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex, Once};

use nix::sys::signal::Signal;
use nix::sys::termios::{cfmakeraw, tcgetattr, tcsetattr, SetArg, Termios};
use tokio::signal::unix::{signal, SignalKind};

/// The client's terminal in raw mode; the saved modes return on drop.
#[derive(Debug)]
pub struct RawMode {
    terminal: OwnedFd,
    // The C structures, not nix's `Termios` (which is not `Sync`), so the
    // guard can be shared with a task watching signals.
    saved: libc::termios,
    raw: libc::termios,
}

/// The modes a panic hook restores: the terminal and its saved modes, while
/// a [`RawMode`] lives.
static PANIC_RESTORE: Mutex<Option<(OwnedFd, Termios)>> = Mutex::new(None);
static PANIC_HOOK: Once = Once::new();

impl RawMode {
    /// Save `terminal`'s modes and put it in raw mode. The guard keeps its
    /// own descriptor of the terminal.
    pub fn enter(terminal: BorrowedFd<'_>) -> io::Result<RawMode> {
        let saved = tcgetattr(terminal)?;
        let mut raw = saved.clone();
        cfmakeraw(&mut raw);
        let terminal = terminal.try_clone_to_owned()?;
        remember_for_panic(&terminal, &saved)?;
        // After the output written so far, as ssh does.
        tcsetattr(&terminal, SetArg::TCSADRAIN, &raw)?;
        Ok(RawMode {
            terminal,
            saved: saved.into(),
            raw: raw.into(),
        })
    }

    /// The modes the terminal had before.
    pub fn saved(&self) -> Termios {
        self.saved.into()
    }

    /// The saved modes back, for a while (before the client stops).
    pub fn suspend(&self) -> io::Result<()> {
        Ok(tcsetattr(
            &self.terminal,
            SetArg::TCSADRAIN,
            &self.saved.into(),
        )?)
    }

    /// Raw mode again (after the client continues; harmless when raw).
    pub fn resume(&self) -> io::Result<()> {
        Ok(tcsetattr(
            &self.terminal,
            SetArg::TCSADRAIN,
            &self.raw.into(),
        )?)
    }

    /// Act on a signal: on SIGTSTP, restore and `stop` the client (raising
    /// SIGSTOP; a test passes its own), then raw mode again; on SIGCONT,
    /// raw mode again; on an ending signal, restore and give it back, for
    /// the caller to drop the guard and [`die_of`] it.
    pub fn on_signal(
        &self,
        signal: TerminalSignal,
        stop: impl FnOnce() -> io::Result<()>,
    ) -> io::Result<Option<Signal>> {
        match signal {
            TerminalSignal::Suspend => {
                self.suspend()?;
                stop()?;
                self.resume()?;
                Ok(None)
            }
            TerminalSignal::Continued => {
                self.resume()?;
                Ok(None)
            }
            TerminalSignal::End(ending) => {
                self.suspend()?;
                Ok(Some(ending))
            }
        }
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = tcsetattr(&self.terminal, SetArg::TCSADRAIN, &self.saved.into());
        if let Ok(mut restore) = PANIC_RESTORE.lock() {
            *restore = None;
        }
    }
}

/// Keep the terminal and its modes where the panic hook finds them, and
/// install the hook once (it restores, then the previous hook reports the
/// panic on a terminal that shows it line by line).
fn remember_for_panic(terminal: &OwnedFd, saved: &Termios) -> io::Result<()> {
    let copy = terminal.try_clone()?;
    if let Ok(mut restore) = PANIC_RESTORE.lock() {
        *restore = Some((copy, saved.clone()));
    }
    PANIC_HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore_after_panic();
            previous(info);
        }));
    });
    Ok(())
}

/// Restore the modes saved by the living [`RawMode`], if any (the panic
/// hook's part; never blocks on a lock a panicking thread may hold).
pub fn restore_after_panic() {
    if let Ok(restore) = PANIC_RESTORE.try_lock() {
        if let Some((terminal, saved)) = restore.as_ref() {
            let _ = tcsetattr(terminal.as_fd(), SetArg::TCSANOW, saved);
        }
    }
}

/// A signal that changes what the client's terminal must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TerminalSignal {
    /// SIGTSTP: the client is asked to stop.
    Suspend,
    /// SIGCONT: the client goes on after a stop.
    Continued,
    /// SIGTERM, SIGHUP, SIGQUIT or SIGINT: the client ends.
    End(Signal),
}

/// The signals a client in raw mode must act on. Once created, their
/// default actions are the caller's to carry out (see [`RawMode::on_signal`]).
#[derive(Debug)]
pub struct TerminalSignals {
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
    quit: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
    stop: tokio::signal::unix::Signal,
    continued: tokio::signal::unix::Signal,
}

impl TerminalSignals {
    /// Watch the six signals (needs a tokio runtime).
    pub fn new() -> io::Result<TerminalSignals> {
        Ok(TerminalSignals {
            terminate: signal(SignalKind::terminate())?,
            hangup: signal(SignalKind::hangup())?,
            quit: signal(SignalKind::quit())?,
            interrupt: signal(SignalKind::interrupt())?,
            stop: signal(SignalKind::from_raw(libc::SIGTSTP))?,
            continued: signal(SignalKind::from_raw(libc::SIGCONT))?,
        })
    }

    /// The next of them to arrive.
    pub async fn recv(&mut self) -> TerminalSignal {
        tokio::select! {
            _ = self.terminate.recv() => TerminalSignal::End(Signal::SIGTERM),
            _ = self.hangup.recv() => TerminalSignal::End(Signal::SIGHUP),
            _ = self.quit.recv() => TerminalSignal::End(Signal::SIGQUIT),
            _ = self.interrupt.recv() => TerminalSignal::End(Signal::SIGINT),
            _ = self.stop.recv() => TerminalSignal::Suspend,
            _ = self.continued.recv() => TerminalSignal::Continued,
        }
    }
}

/// Act on each signal for as long as the client runs (a task beside the
/// passthrough; the guard is shared with it): stop and continue in place,
/// and on an ending signal restore the terminal and die of the signal.
/// Returns only when acting fails.
pub async fn watch_signals(raw: Arc<RawMode>, mut signals: TerminalSignals) -> io::Error {
    loop {
        let signal = signals.recv().await;
        match raw.on_signal(signal, stop_client) {
            Ok(None) => continue,
            Ok(Some(ending)) => {
                if let Err(e) = die_of(ending) {
                    return e;
                }
            }
            Err(e) => return e,
        }
    }
}

/// Stop the client as SIGTSTP's default action would.
pub fn stop_client() -> io::Result<()> {
    signal_hook::low_level::emulate_default_handler(libc::SIGSTOP)
}

/// End the client by `ending`'s default action (after the terminal is
/// restored), so its parent sees it die of that signal.
pub fn die_of(ending: Signal) -> io::Result<()> {
    signal_hook::low_level::emulate_default_handler(ending as libc::c_int)
}

#[cfg(test)]
mod tests {
    use nix::pty::{openpty, OpenptyResult};
    use nix::sys::termios::{InputFlags, LocalFlags, OutputFlags, SpecialCharacterIndices};

    use super::*;

    fn terminal() -> OpenptyResult {
        openpty(None, None).unwrap()
    }

    fn is_raw(modes: &Termios) -> bool {
        let local = LocalFlags::ECHO | LocalFlags::ICANON | LocalFlags::ISIG | LocalFlags::IEXTEN;
        let input = InputFlags::ICRNL | InputFlags::IXON | InputFlags::INLCR | InputFlags::ISTRIP;
        !modes.local_flags.intersects(local)
            && !modes.input_flags.intersects(input)
            && !modes.output_flags.contains(OutputFlags::OPOST)
            && modes.control_chars[SpecialCharacterIndices::VMIN as usize] == 1
            && modes.control_chars[SpecialCharacterIndices::VTIME as usize] == 0
    }

    #[test]
    fn enter_makes_the_terminal_raw_and_drop_restores_exactly_its_modes() {
        let pty = terminal();
        let before = tcgetattr(&pty.slave).unwrap();
        assert!(!is_raw(&before), "a new pty is cooked");
        let raw = RawMode::enter(pty.slave.as_fd()).unwrap();
        assert!(is_raw(&tcgetattr(&pty.slave).unwrap()));
        assert_eq!(raw.saved(), before);
        drop(raw);
        assert_eq!(tcgetattr(&pty.slave).unwrap(), before);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_guard_can_be_shared_with_a_spawned_signal_watch() {
        let pty = terminal();
        let before = tcgetattr(&pty.slave).unwrap();
        let raw = Arc::new(RawMode::enter(pty.slave.as_fd()).unwrap());
        let watch = tokio::spawn(watch_signals(raw.clone(), TerminalSignals::new().unwrap()));
        assert!(is_raw(&tcgetattr(&pty.slave).unwrap()));
        watch.abort();
        assert!(watch.await.unwrap_err().is_cancelled());
        drop(raw);
        assert_eq!(tcgetattr(&pty.slave).unwrap(), before);
    }

    #[test]
    fn unusual_saved_modes_come_back_as_they_were() {
        let pty = terminal();
        let mut odd = tcgetattr(&pty.slave).unwrap();
        odd.local_flags.remove(LocalFlags::ECHO);
        odd.output_flags.remove(OutputFlags::ONLCR);
        odd.control_chars[SpecialCharacterIndices::VINTR as usize] = 0x07;
        tcsetattr(&pty.slave, SetArg::TCSANOW, &odd).unwrap();
        let odd = tcgetattr(&pty.slave).unwrap();
        drop(RawMode::enter(pty.slave.as_fd()).unwrap());
        assert_eq!(tcgetattr(&pty.slave).unwrap(), odd);
    }

    #[test]
    fn a_suspended_client_is_cooked_while_stopped_and_raw_after() {
        let pty = terminal();
        let before = tcgetattr(&pty.slave).unwrap();
        let raw = RawMode::enter(pty.slave.as_fd()).unwrap();
        let mut while_stopped = None;
        let ending = raw
            .on_signal(TerminalSignal::Suspend, || {
                while_stopped = Some(tcgetattr(&pty.slave).unwrap());
                Ok(())
            })
            .unwrap();
        assert_eq!(ending, None);
        assert_eq!(while_stopped, Some(before.clone()));
        assert!(is_raw(&tcgetattr(&pty.slave).unwrap()));
        // A shell that took the terminal back while the client was stopped
        // (SIGSTOP, which no one catches) cooked it: SIGCONT makes it raw.
        tcsetattr(&pty.slave, SetArg::TCSANOW, &before).unwrap();
        let not_stopping = || panic!("SIGCONT stops nothing");
        assert_eq!(
            raw.on_signal(TerminalSignal::Continued, not_stopping)
                .unwrap(),
            None
        );
        assert!(is_raw(&tcgetattr(&pty.slave).unwrap()));
    }

    #[test]
    fn an_ending_signal_restores_and_is_given_back() {
        let pty = terminal();
        let before = tcgetattr(&pty.slave).unwrap();
        let raw = RawMode::enter(pty.slave.as_fd()).unwrap();
        for ending in [
            Signal::SIGTERM,
            Signal::SIGHUP,
            Signal::SIGQUIT,
            Signal::SIGINT,
        ] {
            raw.resume().unwrap();
            let given = raw
                .on_signal(TerminalSignal::End(ending), || panic!("no stop"))
                .unwrap();
            assert_eq!(given, Some(ending));
            assert_eq!(tcgetattr(&pty.slave).unwrap(), before);
        }
    }

    #[test]
    fn a_panic_restores_the_terminal_by_unwinding_and_by_the_hook() {
        let pty = terminal();
        let before = tcgetattr(&pty.slave).unwrap();
        let slave = pty.slave.as_fd();
        let unwound = std::panic::catch_unwind(|| {
            let _raw = RawMode::enter(slave).unwrap();
            panic!("a bug while raw");
        });
        assert!(unwound.is_err());
        assert_eq!(tcgetattr(&pty.slave).unwrap(), before);
        // A guard that never drops (its thread is blocked, or the build
        // aborts on panic): the hook restores before the panic is reported.
        let raw = RawMode::enter(slave).unwrap();
        assert!(is_raw(&tcgetattr(&pty.slave).unwrap()));
        let elsewhere = std::thread::spawn(|| panic!("a bug in another thread")).join();
        assert!(elsewhere.is_err());
        assert_eq!(tcgetattr(&pty.slave).unwrap(), before);
        drop(raw);
    }

    /// Set in the child of [`a_real_client_stopped_continued_and_killed_leaves_its_terminal_cooked`]:
    /// the terminal it makes raw.
    const CHILD_TERMINAL: &str = "EUKHE_TEST_RAW_CHILD_TERMINAL";

    /// The child: a client whose terminal is raw and whose signals are
    /// watched, until one ends it.
    fn child_client(path: &str) {
        let terminal = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let failed = runtime.block_on(async {
            let raw = Arc::new(RawMode::enter(terminal.as_fd()).unwrap());
            let signals = TerminalSignals::new().unwrap();
            println!("ready");
            watch_signals(raw, signals).await
        });
        panic!("watching signals failed: {failed}");
    }

    /// Poll the terminal's modes until they are raw (or `raw` is false and
    /// they are not), within the time a process answers in.
    fn wait_for_modes(terminal: impl AsFd, raw: bool) {
        use crate::laws::timing::{KERNEL_ANSWER_MS, POLL_MS};
        let deadline =
            std::time::Instant::now() + std::time::Duration::from_millis(KERNEL_ANSWER_MS);
        while is_raw(&tcgetattr(&terminal).unwrap()) != raw {
            assert!(
                std::time::Instant::now() < deadline,
                "modes raw={raw} never came"
            );
            std::thread::sleep(std::time::Duration::from_millis(POLL_MS));
        }
    }

    #[test]
    fn a_real_client_stopped_continued_and_killed_leaves_its_terminal_cooked() {
        use std::io::BufRead as _;
        use std::os::fd::AsRawFd as _;

        use nix::sys::signal::kill;
        use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
        use nix::unistd::Pid;

        if let Ok(path) = std::env::var(CHILD_TERMINAL) {
            return child_client(&path);
        }
        let pty = terminal();
        let before = tcgetattr(&pty.slave).unwrap();
        let path = std::fs::read_link(format!("/proc/self/fd/{}", pty.slave.as_raw_fd())).unwrap();
        let name = "client::terminal::raw::tests::a_real_client_stopped_continued_and_killed_leaves_its_terminal_cooked";
        // Reaped by `waitpid`, which also sees it stop.
        #[allow(clippy::zombie_processes)]
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([name, "--exact", "--nocapture"])
            .env(CHILD_TERMINAL, &path)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = Pid::from_raw(i32::try_from(child.id()).unwrap());
        let mut said = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        while line.trim() != "ready" {
            line.clear();
            assert_ne!(
                said.read_line(&mut line).unwrap(),
                0,
                "the child ended early"
            );
        }
        assert!(is_raw(&tcgetattr(&pty.slave).unwrap()));

        kill(pid, Signal::SIGTSTP).unwrap();
        let stopped = waitpid(pid, Some(WaitPidFlag::WUNTRACED)).unwrap();
        assert_eq!(stopped, WaitStatus::Stopped(pid, Signal::SIGSTOP));
        assert_eq!(
            tcgetattr(&pty.slave).unwrap(),
            before,
            "cooked while stopped"
        );

        kill(pid, Signal::SIGCONT).unwrap();
        wait_for_modes(&pty.slave, true);

        kill(pid, Signal::SIGTERM).unwrap();
        let ended = waitpid(pid, None).unwrap();
        assert_eq!(ended, WaitStatus::Signaled(pid, Signal::SIGTERM, false));
        assert_eq!(
            tcgetattr(&pty.slave).unwrap(),
            before,
            "cooked after the end"
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_watched_signals_arrive_as_what_they_mean() {
        let mut signals = TerminalSignals::new().unwrap();
        for (sent, meant) in [
            (Signal::SIGTERM, TerminalSignal::End(Signal::SIGTERM)),
            (Signal::SIGHUP, TerminalSignal::End(Signal::SIGHUP)),
            (Signal::SIGQUIT, TerminalSignal::End(Signal::SIGQUIT)),
            (Signal::SIGINT, TerminalSignal::End(Signal::SIGINT)),
            (Signal::SIGTSTP, TerminalSignal::Suspend),
            (Signal::SIGCONT, TerminalSignal::Continued),
        ] {
            nix::sys::signal::raise(sent).unwrap();
            assert_eq!(signals.recv().await, meant);
        }
    }
}
