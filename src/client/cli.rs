//! Commands and their flags; running one, and eukhe's own exit status.

use std::ffi::OsString;
use std::process::ExitCode;

use crate::config::detach_key::DetachKey;
use clap::{Parser, Subcommand};

use super::commands::client;
use super::error::ClientError;
use crate::protocol::message::Response;
use crate::session::entry::Stream;

/// `eukhe mcp` reads a session's environment and directory as `new` does.
pub(crate) use super::commands::{absolute, session_env};

/// The command line as clap parses it (its help is written out below,
/// not taken from this comment).
#[derive(Debug, Parser)]
#[command(
    name = "eukhe",
    version = crate::build_id::version(),
    about = "Keeps coding-agent sessions alive across crashes, upgrades and reboots",
    long_about = "Keeps coding-agent sessions alive across crashes, upgrades and reboots.\n\n\
A session is a durable transcript and a kernel: one long-lived process that holds the \
session's shell. Queued inputs run in it one at a time, in order; `eukhe bash` runs at once \
beside them. Everything a command leaves in the shell persists: the working directory, every \
variable, functions, aliases, umask, set -o and shopt options, traps. A run outlives its \
worker: a worker that crashes, is replaced or loses its daemon stops no run, and the next one \
records the run's output and end exactly once. When the kernel itself is gone (a reboot, a \
crash, `shutdown --force`), the run in flight is marked interrupted and never rerun, and a new \
kernel restores the saved shell state (background jobs and open file descriptors cannot come \
back; one restore notice says so). `eukhe cancel` ends the running run (SIGINT, then SIGTERM \
and SIGKILL after the cancel grace); `eukhe queue` and `eukhe withdraw` show and withdraw \
queued inputs.\n\n\
A session left alone (no work, no attached client, no request naming it) for `idle_stop_ms` \
(config.toml or EUKHE_IDLE_STOP_MS; an hour by default, \"never\" turns it off) has its worker \
and kernel stopped and is listed as saved; the next request naming it wakes it, its shell state \
restored from the snapshot.\n\n\
On the process backend the daemon keeps one spare session ready (its worker, kernel and shell \
started; listed nowhere), so `eukhe new` only claims it and gives it the client's environment \
and working directory; `spare_session = false` in config.toml turns it off.",
    after_long_help = "Exit status:\n  \
`bash` and `send --wait` exit with the command's own status (128 + N when signal N ended it; \
255 when it was interrupted: its kernel was lost; 126 when the kernel could not start it, the \
reason in the log).\n  \
125: eukhe itself failed (an unknown session, a bad option, no daemon to be had, a damaged \
session, a refused `rm`, a run withdrawn before it ran, output of the command that could not be \
kept on a full disk), as `env` and `timeout` do, so it is \
never mistaken for a command's status.\n  \
1: `cancel` found nothing to cancel; `shutdown --if-idle` did not stop a busy daemon; `doctor` \
found a problem.\n  \
3: `ls --all-hosts`: some host did not answer (its row says why).\n  \
A reader of standard output that goes away (`eukhe log s | head -1`) ends any command quietly, \
by SIGPIPE."
)]
pub struct Cli {
    /// Run the command against another machine's daemon, over SSH
    /// (`ssh HOST eukhe proxy`; also EUKHE_REMOTE). EUKHE_SSH is the ssh
    /// command (default `ssh`), EUKHE_REMOTE_COMMAND the remote eukhe.
    #[arg(long, value_name = "[ssh://][user@]host[:port]")]
    pub host: Option<String>,
    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

/// Every command: a client's, or one of eukhe's own processes.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the supervisor in the foreground.
    Daemon,
    /// Run one session's worker (started by the supervisor, never by hand).
    #[command(hide = true)]
    Worker {
        /// The session's id.
        session: String,
    },
    /// Run one session's kernel (started by its worker, never by hand).
    #[command(hide = true)]
    Kernel {
        /// The session's id.
        session: String,
        /// Fork into the background once the kernel serves.
        #[arg(long)]
        detach: bool,
    },
    /// Create a session and print its id.
    ///
    /// The session's shell starts in this client's working directory
    /// (`--cwd` to choose another) with this client's exported
    /// environment: `FOO=1 eukhe new` gives the session FOO=1.
    /// `--clean-env` starts from the daemon's environment instead (under
    /// systemd, the user manager's); `--env KEY=VALUE` adds to either.
    /// From then on the variables are the session's: they live in its
    /// saved shell state and survive a restart of its shell.
    ///
    /// Never carried, from the client or the daemon, because they describe
    /// one process, not the user's environment: eukhe's own control
    /// variables EUKHE_* (which daemon, which state directory, which
    /// backend); the service manager's NOTIFY_SOCKET, WATCHDOG_PID and
    /// WATCHDOG_USEC (a command finding them would speak for a unit);
    /// socket activation's LISTEN_FDS, LISTEN_PID and LISTEN_FDNAMES (file
    /// descriptors passed to one process); a unit's INVOCATION_ID,
    /// JOURNAL_STREAM, SYSTEMD_EXEC_PID, MANAGERPID, MAINPID, TRIGGER_*
    /// and MEMORY_PRESSURE_*; the shell's own PWD, OLDPWD, SHLVL and _.
    /// Variables whose name is no shell name or whose value is not UTF-8
    /// are left out too.
    New {
        /// A name to refer to the session by, instead of its id (1 to 64
        /// characters; not another session's name or id).
        #[arg(long)]
        name: Option<String>,
        /// Working directory of the session's shell (default: the
        /// directory this command runs in).
        #[arg(long)]
        cwd: Option<String>,
        /// Set a variable in the session's environment, over this client's
        /// (or, with --clean-env, the daemon's); repeatable.
        #[arg(long = "env", value_name = "KEY=VALUE")]
        env: Vec<String>,
        /// Start from the daemon's environment instead of this client's.
        #[arg(long)]
        clean_env: bool,
        /// Print the id and name as one JSON object.
        #[arg(long)]
        json: bool,
        /// Resource limits of the session's kernel and its runs.
        #[command(flatten)]
        limits: super::limits::LimitArgs,
    },
    /// List sessions, the one active most recently last.
    ///
    /// Columns: id, name, state (idle, busy, running: launched and not yet
    /// reporting, restarting, saved, given-up, damaged, stopping: an idle
    /// stop under way, removing), the worker's and the kernel's pid, background
    /// jobs, failures in the restart window, last activity (the last
    /// input, output or end in its transcript) and the working directory of its shell. A
    /// damaged session (a file of it cannot be read) is named with the
    /// file and what is wrong, one line each, on standard error.
    Ls {
        /// One JSON array; each session has "cwd", "created_ms" and
        /// "active_ms" (wall-clock milliseconds), and "problem" when it is
        /// damaged.
        #[arg(long)]
        json: bool,
        /// This machine's sessions and those of every host hosts.toml
        /// names, asked at once, each host within 10 s, in one table with
        /// a HOST column (`--json`: each session with "host"); a host that
        /// did not answer is one row saying why, and the exit status is 3.
        #[arg(long)]
        all_hosts: bool,
    },
    /// Queue input (a run) in a session: it runs after the inputs queued
    /// before it. One argument is a command line (`'cd src && make'`);
    /// several (after `--`) are a command and its arguments, each passed as
    /// it is, byte for byte (`eukhe send s -- sh -c 'exit 3'`).
    Send {
        /// The session's name or id.
        session: String,
        /// The command line, or a command and its arguments.
        #[arg(required = true, value_name = "COMMAND")]
        text: Vec<OsString>,
        /// Wait for the run, stream its output and exit with its status
        /// (riding through a lost worker or daemon).
        #[arg(long)]
        wait: bool,
        /// Run it on a terminal the session's kernel holds (its size is
        /// this terminal's, else 24x80); `eukhe keys` types into it. With
        /// --wait from a terminal, this terminal is passed through to it
        /// (raw, as `ssh -t`) until it ends or the detach key.
        #[arg(long)]
        tty: bool,
        /// The key that detaches from a terminal run (default: the
        /// `detach_key` setting, else C-\\; `none`: no detaching).
        #[arg(long, value_name = "KEY")]
        detach_key: Option<DetachKey>,
    },
    /// Run a command now in the session's shell, beside any run in progress
    /// (everything it leaves in the shell persists), and exit with its
    /// status. One argument after `--` is a command line (`'cd src &&
    /// make'`); several are a command and its arguments, each passed as it
    /// is, byte for byte (`sh -c 'exit 3'`). When standard input is not a terminal, the
    /// command reads it (`echo hi | eukhe bash s -- cat`); `-n` gives it
    /// /dev/null instead (as `ssh -n`), for loops that read a list. Ctrl-C
    /// cancels the command as `eukhe cancel` does; a second stops waiting.
    /// A client that goes away (killed, or its reader gone) hangs the
    /// command up as `ssh` does: its output closes, then SIGHUP.
    Bash {
        /// The session's name or id.
        session: String,
        /// Standard input is /dev/null, not this command's.
        #[arg(short = 'n', long = "no-stdin")]
        no_stdin: bool,
        /// Run it on a terminal the session's kernel holds (its size is
        /// this terminal's, else 24x80): its output is the terminal's. From
        /// a terminal, this terminal is passed through to it (raw, as `ssh
        /// -t`) until it ends or the detach key.
        #[arg(long)]
        tty: bool,
        /// The key that detaches from a terminal run (default: the
        /// `detach_key` setting, else C-\\; `none`: no detaching).
        #[arg(long, value_name = "KEY")]
        detach_key: Option<DetachKey>,
        /// The command line, or a command and its arguments.
        #[arg(last = true, required = true, value_name = "COMMAND")]
        command: Vec<OsString>,
    },
    /// Type into a terminal run: each argument is a key's name (`Enter`,
    /// `Tab`, `Escape`, `BSpace`, `Up`, `PageUp`, `F1`, `C-c`, `M-x`, ...)
    /// or text typed as it is, one after another, to the terminal of the
    /// session's current terminal run (or of input N); returns once they
    /// are in its input queue, where they wait for the program to read
    /// them (`eukhe keys s -- 'git push' Enter`).
    Keys {
        /// The session's name or id.
        session: String,
        /// The terminal run's input number (default: the one running).
        #[arg(long)]
        input: Option<u64>,
        /// Every argument is text, byte for byte, never a key's name (as
        /// tmux's `send-keys -l`).
        #[arg(short = 'l', long)]
        literal: bool,
        /// Keys by name, or text.
        #[arg(last = true, required = true, value_name = "KEYS")]
        text: Vec<OsString>,
    },
    /// Print the screen of a terminal run as a person would see it now:
    /// its rows as text (trailing blank rows left out), then one line
    /// saying whose screen it is, its size, the cursor (row and column,
    /// from 1), the title, whether the program is on the alternate screen,
    /// and whether it waits for input or ended. The screen of the
    /// session's current terminal run, or of input N; the last one that
    /// ended is kept too.
    Screen {
        /// The session's name or id.
        session: String,
        /// The terminal run's input number (default: the one running,
        /// else the last one that ended).
        input: Option<u64>,
        /// The screen as one JSON object: `lines`, `rows`, `cols`,
        /// `cursor` (from 0), `title`, `alternate`, `waiting`, `input`,
        /// `ended` (the exit status, once it ended).
        #[arg(long)]
        json: bool,
    },
    /// Wait until a terminal run's screen shows a regular expression
    /// (--match), the run waits for input (--waiting) or it ends (--end),
    /// whichever of those given comes first; then print the screen. Exit 0
    /// when one held, 1 when the run ended without, 124 at the timeout (the
    /// run goes on): `eukhe wait-for s --match 'Continue\?'`.
    #[command(group = clap::ArgGroup::new("until").required(true).multiple(true))]
    WaitFor {
        /// The session's name or id.
        session: String,
        /// The terminal run's input number (default: the one running, else
        /// the first queued terminal run, else the last that ended).
        input: Option<u64>,
        /// Until the screen's text (its rows joined by newlines) matches
        /// this regular expression.
        #[arg(long = "match", value_name = "REGEX", group = "until")]
        regex: Option<String>,
        /// Until the run waits for input.
        #[arg(long, group = "until")]
        waiting: bool,
        /// Until the run has ended.
        #[arg(long, group = "until")]
        end: bool,
        /// How long to wait, in milliseconds (default 30000, at most
        /// 3600000).
        #[arg(long, value_name = "MS")]
        timeout: Option<u64>,
        /// Print `{screen, met, timed_out}` as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Wait until a run ends (--run N, --any-run), output matches a
    /// regular expression (--match) or the session is idle (--idle),
    /// whichever comes first, reading the durable transcript from a cursor
    /// (--since SEQ: the entries after it): nothing stored while this
    /// client, its worker or the daemon was away is missed. Prints the
    /// event that met it and the next cursor; exits with the run's status,
    /// 0 when met without one, 124 at the timeout (everything goes on
    /// running): `eukhe wait s --run 3`.
    #[command(group = clap::ArgGroup::new("condition").required(true).multiple(true))]
    Wait {
        /// The session's name or id.
        session: String,
        /// Until run N has ended (at once if it already has).
        #[arg(
            long,
            value_name = "N",
            group = "condition",
            conflicts_with = "any_run"
        )]
        run: Option<u64>,
        /// Until any run ends after the cursor.
        #[arg(long, group = "condition")]
        any_run: bool,
        /// Until a line of output after the cursor matches this regular
        /// expression.
        #[arg(long = "match", value_name = "REGEX", group = "condition")]
        regex: Option<String>,
        /// Until the session is idle (no run, queued input or background
        /// job).
        #[arg(long, group = "condition")]
        idle: bool,
        /// Only what was stored after entry SEQ (a cursor from `events` or
        /// an earlier `wait`); default: from now. `--run N` looks at the
        /// whole run either way.
        #[arg(long, value_name = "SEQ")]
        since: Option<u64>,
        /// How long to wait, in milliseconds (default 30000, at most
        /// 3600000).
        #[arg(long, value_name = "MS")]
        timeout: Option<u64>,
        /// Print `{events, next_since, status, timed_out}` as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Cancel the running run and every running `bash` command (SIGINT,
    /// then SIGTERM and SIGKILL after the cancel grace); exit 1 when there
    /// was nothing to cancel.
    Cancel {
        /// The session: its id or name.
        session: String,
        /// Also withdraw every queued input.
        #[arg(long)]
        all: bool,
    },
    /// List the inputs queued in a session, after the `bash` commands
    /// running (which `cancel` ends).
    Queue {
        /// The session: its id or name.
        session: String,
        /// One JSON array of the queued inputs.
        #[arg(long)]
        json: bool,
    },
    /// Give a session a fresh shell: its first working directory and
    /// environment, no functions, aliases or options set since; the
    /// transcript is kept, with one notice saying so.
    ///
    /// The persistent bash tool's `restart`. Refused while a run, a `bash`
    /// command or a background job runs (queued inputs wait and run in
    /// the new shell), unless --force ends them with the old shell. Not
    /// `restart`, which starts a given-up session again with its state.
    Reset {
        /// The session: its id or name.
        session: String,
        /// End what runs in the shell rather than refuse.
        #[arg(long)]
        force: bool,
    },
    /// Withdraw a queued input before it runs (it never runs).
    Withdraw {
        /// The session: its id or name.
        session: String,
        /// The run number `send` printed.
        run: u64,
    },
    /// Print a session's transcript: output bytes as the commands wrote
    /// them (each line of standard error marked `[stderr] `), between
    /// marked lines: `[run N] $ command`, `[run N exited S]`, `! notice`.
    Log {
        /// The session's name or id.
        session: String,
        /// One JSON array of entries (with --follow: one entry per line);
        /// output is `"text"` when it is valid UTF-8, else `"base64"`. With
        /// --raw and a window (--head, --tail, --bytes, --grep): one object,
        /// the output's size and the window's parts.
        #[arg(long)]
        json: bool,
        /// Only the last N entries (read from the end of the transcript),
        /// after a line for each earlier restore of the session.
        #[arg(long, value_name = "N")]
        tail: Option<u64>,
        /// Only the entries after entry SEQ (the `"seq"` of `--json`).
        #[arg(long, value_name = "SEQ")]
        since: Option<u64>,
        /// Then print entries as they are stored, until interrupted (with
        /// --raw N: until input N has ended).
        #[arg(short = 'f', long)]
        follow: bool,
        /// Start each line with the time it was stored (UTC, RFC 3339).
        #[arg(short = 't', long, conflicts_with_all = ["json", "raw"])]
        timestamps: bool,
        /// Write input N's output bytes exactly, and nothing else (N is the
        /// number `send` printed, or a user bash's number in `log`).
        #[arg(long, value_name = "N")]
        raw: Option<u64>,
        /// With --raw: only this stream.
        #[arg(long, value_enum, requires = "raw")]
        stream: Option<StreamArg>,
        /// With --raw: a window of the output (`client::windows`).
        #[command(flatten)]
        window: super::windows::WindowFlags,
    },
    /// Replay a session's transcript, then follow it; typed lines are input.
    /// Ctrl-C cancels the running run, Ctrl-\ detaches, end of input
    /// detaches once the inputs sent have run. From a terminal, when the
    /// session's current run is a terminal run: its screen as it is now,
    /// then this terminal passed through to it (raw) until it ends or the
    /// detach key.
    Attach {
        /// The session's name or id.
        session: String,
        /// Onto a terminal run: show it, never type into it or resize it.
        #[arg(long)]
        read_only: bool,
        /// Replay the last N entries first (and a line for each earlier
        /// restore).
        #[arg(long, value_name = "N", default_value_t = 200)]
        tail: u64,
        /// An interactive bash over the session's state, on a terminal the
        /// session's kernel holds: each command typed is recorded with its
        /// output and status, and what it changes is kept for later
        /// commands. Comes back to the shell if one runs already.
        #[arg(long)]
        shell: bool,
        /// The key that detaches from a terminal run or the shell (default:
        /// the `detach_key` setting, else C-\\; `none`: no detaching).
        #[arg(long, value_name = "KEY")]
        detach_key: Option<DetachKey>,
    },
    /// The daemon's version, build, pid, backend and session counts.
    Status {
        /// One JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Start a given-up session afresh (or a damaged one whose files were
    /// mended).
    Restart {
        /// The session: its id or name.
        session: String,
    },
    /// Remove sessions: their processes end and their directories are
    /// deleted.
    ///
    /// Each session's worker, kernel and every process its runs started
    /// end (under systemd: its eukhe@ and eukhe-kernel@ units stop), and
    /// its directory (transcript, snapshot, spool) is deleted; its name is
    /// free again. A busy session (a run, queued input, a user bash or a
    /// background job) is refused unless --force. The removal is final: no
    /// busy evidence and no daemon restart brings the session back. One
    /// line per session; exit 125 if any was not removed.
    #[command(name = "rm")]
    Rm {
        /// The sessions to remove, by id or name.
        #[arg(required = true, value_name = "SESSION")]
        sessions: Vec<String>,
        /// Remove busy sessions too: their runs are cancelled, their
        /// queued input dropped and their background jobs ended.
        #[arg(long)]
        force: bool,
    },
    /// Give a session a new name (its id never changes).
    ///
    /// The name must be free, and may not be another session's id.
    Rename {
        /// The session, by id or current name.
        session: String,
        /// Its new name: 1 to 64 characters, no `/`, no `..`, no control
        /// characters.
        new_name: String,
    },
    /// Stop the daemon.
    Shutdown {
        /// Stop only if no session has work (runs are never aborted).
        #[arg(long, conflicts_with = "force")]
        if_idle: bool,
        /// Stop every worker now.
        #[arg(long)]
        force: bool,
    },
    /// Check the configuration, directories (private and writable), the
    /// room left on the state disk (at least 64 MiB),
    /// socket paths (each within the 107 bytes a Unix socket path holds),
    /// every session's files, which daemon holds the state directory,
    /// lingering (systemd backend), the shell and the daemon. Exits 1 when
    /// a check fails.
    Doctor {
        /// One JSON array of checks.
        #[arg(long)]
        json: bool,
    },
    /// Serve the sessions as tools of a coding agent over the Model
    /// Context Protocol (MCP), on standard input and output.
    ///
    /// Tools: new_session, list_sessions, bash (a command now, in a shell
    /// that keeps cd and export; past its timeout it answers and the
    /// command goes on; restart: a fresh shell, as `reset`), send, log,
    /// cancel, remove_session. Add it to an
    /// MCP client as the command `eukhe` with the argument `mcp`. It
    /// starts the daemon when none listens and, a background client,
    /// never replaces one.
    ///
    /// With `--host` (repeatable): the sessions of those machines as one
    /// tool set. Session references carry their host (`build:s1`);
    /// `list_sessions` lists every host's, a host that does not answer
    /// within 10 s listed with why; `local` names this machine, served
    /// only when given.
    Mcp {
        /// A host to serve: a name from hosts.toml, an address
        /// `[ssh://][user@]host[:port]`, or `local` (this machine).
        #[arg(long = "host", value_name = "HOST")]
        hosts: Vec<String>,
    },
    /// Follow the daemon's events, one line each: sessions created,
    /// removed, renamed; state changes; runs queued, started, finished,
    /// interrupted; terminal runs waiting for input and input taken;
    /// background jobs; restore and revival notices; worker
    /// and kernel failures with the restart verdict; the latest output
    /// line (at most once a second per session); the daemon stopping.
    ///
    /// Rides through a daemon restart: it waits for the next daemon (never
    /// starting or replacing one) and says so once. A reader that falls
    /// behind gets one "events dropped: N" line.
    Events {
        /// One JSON object per line: "at_ms", "id", "name" and "event"
        /// (its "kind" and fields).
        #[arg(long)]
        json: bool,
        /// Only this session's events (and the daemon's own).
        #[arg(long, value_name = "SESSION")]
        session: Option<String>,
        /// First replay the stored events after cursor SEQ (each session's
        /// transcript entry numbers: "seq" in --json, the first column in
        /// text), then follow.
        #[arg(long, value_name = "SEQ")]
        since: Option<u64>,
    },
    /// A live dashboard of every session: state, working directory, the
    /// run and its elapsed time, queue, background jobs, failures, the
    /// last output line.
    ///
    /// Keys: arrows select; Enter attaches (detach with Ctrl-\ to come
    /// back); c cancels the run; r restarts a given-up session; d removes
    /// (asks first); / filters by name; q quits.
    Top,
    /// Connect standard input and output to this user's daemon, starting
    /// it if none answers: what `eukhe --host HOST` runs on HOST over ssh.
    /// Refuses when the daemon's socket belongs to another user.
    Proxy {
        /// The client behind it is a background client: never replace the
        /// daemon.
        #[arg(long)]
        background: bool,
        /// Print the daemon's socket path (starting the daemon if none
        /// answers) instead of connecting: for a client's forward.
        #[arg(long, hide = true)]
        socket_path: bool,
        /// Keep this machine's forward to HOST's daemon instead (started
        /// by a client, never by hand; `client::forward_keeper`).
        #[arg(long, hide = true, value_name = "HOST")]
        keep_forward: Option<String>,
        /// Lend standard input to a remote `eukhe bash` command (its
        /// client's second ssh): print this process's pid, then pass the
        /// input on through a pipe of its own.
        #[arg(long, hide = true)]
        lend_stdin: bool,
    },
    /// The laws' timeouts, their ordering and the restart schedule.
    Laws {
        /// One JSON object.
        #[arg(long)]
        json: bool,
    },
}

/// Run a client command.
pub fn run(command: Command) -> ExitCode {
    finish(crate::runtime::block_on_client("client", client(command)))
}

/// A client command's exit: its own status, or eukhe's failure in one line.
pub fn finish(result: Result<ExitCode, ClientError>) -> ExitCode {
    match result {
        Ok(code) => code,
        Err(message) => fail(message),
    }
}

/// eukhe's own failures exit 125 (as `env`, `timeout` and container
/// runners do), so they are never mistaken for a command's status.
pub const EUKHE_FAILED: u8 = 125;

fn fail(message: ClientError) -> ExitCode {
    eprintln!("eukhe: {message}");
    ExitCode::from(EUKHE_FAILED)
}

/// `--stream` of `log --raw`.
#[derive(Clone, Copy, Debug)]
pub enum StreamArg {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

// By hand, not derived: a derived `ValueEnum` would show the variants' docs
// in `--help` and the man pages, which list the bare names.
impl clap::ValueEnum for StreamArg {
    fn value_variants<'a>() -> &'a [Self] {
        &[StreamArg::Stdout, StreamArg::Stderr]
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(match self {
            StreamArg::Stdout => "stdout",
            StreamArg::Stderr => "stderr",
        }))
    }
}

impl From<StreamArg> for Stream {
    fn from(arg: StreamArg) -> Stream {
        match arg {
            StreamArg::Stdout => Stream::Stdout,
            StreamArg::Stderr => Stream::Stderr,
        }
    }
}

/// A daemon's answer other than the one asked for: its error's one line,
/// or what came instead.
pub fn unexpected<T>(response: Response) -> Result<T, ClientError> {
    Err(ClientError::answer(response))
}
