//! Timing (`Tm`): every timeout of the daemon in one place, and the ordering
//! law `timeouts_ordered`.
//!
//! Each timeout must be at least the sum of the timeouts it waits for; if it
//! were shorter, the waiter would give up (and kill, or exit) while the thing
//! it waits for is still doing its job. The relations are listed in
//! [`ORDERING`], in a fixed order that the Bend model (`bend/supervise.bend`,
//! `Tm`) shares, so the bridge can compare the verdict relation by relation.
//!
//! All values are milliseconds.

use serde::{Deserialize, Serialize};

/// Names of the timeouts, in the order [`Tm::values`] returns them.
pub const TIMEOUT_NAMES: [&str; TIMEOUT_COUNT] = [
    "stop_grace",
    "kernel_teardown",
    "harness_close",
    "launcher_wait",
    "supervisor_drain",
    "kill_route",
    "child_drain",
    "client_relaunch_within",
    "worker_lost_exit",
    "busy_refresh",
    "busy_tick",
    "revival_window",
    "busy_evidence_ttl",
    "revival_clock_skew",
    "quiesce_answer",
    "quiesce_hold",
    "restart_window",
    "restart_pause_max",
    "cancel_grace",
    "template_idle",
    "daemon_start_wait",
    "worker_start_wait",
    "kernel_start_wait",
    "kernel_stop_wait",
    "worker_unit_stop",
    "kernel_unit_stop",
    "sign_of_life",
    "scheduling_slack",
    "run_term_grace",
    "kernel_term_wait",
    "worker_stop_wait",
    "state_lock_handover",
    "session_settle",
    "worker_watchdog",
    "supervisor_watchdog",
    "supervisor_unit_stop",
    "worker_answer",
];

/// How many timeouts [`Tm`] holds.
pub const TIMEOUT_COUNT: usize = 37;

/// Every timeout constant of the daemon, by who waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tm {
    /// A worker's own waits, and the waits on a worker.
    pub worker: WorkerTimeouts,
    /// The kernel's waits, and the waits on a kernel and its runs.
    pub kernel: KernelTimeouts,
    /// The supervisor's waits: shutdown, kills, quiesce, restarts, settling.
    pub supervisor: SupervisorTimeouts,
    /// A client's waits on a daemon.
    pub client: ClientTimeouts,
    /// Busy evidence and revival after a reboot or crash.
    pub evidence: EvidenceTimeouts,
}

/// A worker's own waits, and the waits on a worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerTimeouts {
    /// A worker asked to stop gets this long before it is killed.
    pub stop_grace: u64,
    /// The engine harness gets this long to flush and close the transcript.
    pub harness_close: u64,
    /// A worker gives a lost supervisor this long before it acts alone.
    pub worker_lost_exit: u64,
    /// A worker shows its supervisor a sign of life this often (the process
    /// backend's watchdog hears it).
    pub sign_of_life: u64,
    /// A worker that shows no sign of life this long is hung: `WatchdogSec`
    /// of `eukhe@.service`, and the process backend's default.
    pub worker_watchdog: u64,
    /// The supervisor waits this long for a worker to answer a connect, a
    /// hello or a request (a healthy one answers within milliseconds): a
    /// worker that does not (stopped, wedged, accepting and never replying)
    /// is unreachable, a failure under the restart budget when it is found
    /// at start, and nothing else waits for it.
    pub worker_answer: u64,
    /// The supervisor waits this long for a launched worker to be under
    /// supervision (its unit active, its socket answering).
    pub worker_start_wait: u64,
    /// `TimeoutStopSec` of `eukhe@.service`: the manager kills a worker
    /// unit's processes this long after asking them to stop.
    pub worker_unit_stop: u64,
    /// How long a worker unit may take to go down once its worker hung up:
    /// its unit's stop timeout, then the manager's kill and the reaping.
    pub worker_stop_wait: u64,
}

/// The kernel's waits, and the waits on a kernel and its runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KernelTimeouts {
    /// The kernel (persistent shell) gets this long to exit after SIGTERM.
    pub kernel_teardown: u64,
    /// A cancelled run gets this long after SIGINT before SIGTERM, and again
    /// before SIGKILL.
    pub cancel_grace: u64,
    /// A kernel keeps the shell it prepared for the next job (a template,
    /// the snapshot already restored) this long after its last job: an idle
    /// session holds no shell beyond its own.
    pub template_idle: u64,
    /// A worker waits this long for its kernel unit to come up: a stop
    /// still in progress (`kernel_stop_wait`), then the start itself.
    pub kernel_start_wait: u64,
    /// How long a kernel unit may take to go down: its unit's stop timeout,
    /// then the manager's kill and the reaping.
    pub kernel_stop_wait: u64,
    /// `TimeoutStopSec` of `eukhe-kernel@.service`.
    pub kernel_unit_stop: u64,
    /// A stopping kernel gives the session's processes this long after
    /// SIGTERM before it kills what is left.
    pub run_term_grace: u64,
    /// A parent ending a kernel process (SIGTERM) waits this long for it
    /// to go before SIGKILL: the kernel's whole teardown.
    pub kernel_term_wait: u64,
}

/// The supervisor's waits: shutdown, kills, quiesce, restarts, settling.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SupervisorTimeouts {
    /// The supervisor's whole shutdown: stop every worker, then kill survivors.
    pub supervisor_drain: u64,
    /// Delivering a kill order to a child (signal or `KillUnit`).
    pub kill_route: u64,
    /// A killed child is reaped within this long.
    pub child_drain: u64,
    /// The supervisor waits this long for every worker's quiesce answer.
    pub quiesce_answer: u64,
    /// A quiesced run gate reopens by itself after this long.
    pub quiesce_hold: u64,
    /// Failures inside this monotonic window count towards giving up.
    pub restart_window: u64,
    /// The longest pause before restarting a failed worker.
    pub restart_pause_max: u64,
    /// A daemon starting on the socket of a daemon that is ending (a
    /// replacement: the old one removed its socket and drains) waits this
    /// long for it to release the state directory's lock.
    pub state_lock_handover: u64,
    /// A request naming a session waits this long for that session's idle
    /// stop or removal to finish before it is answered.
    pub session_settle: u64,
    /// `WatchdogSec` of `eukhe.service`: a supervisor that pings nothing
    /// this long is killed by the manager.
    pub supervisor_watchdog: u64,
    /// `TimeoutStopSec` of `eukhe.service`: the manager kills a supervisor
    /// this long after asking it to stop.
    pub supervisor_unit_stop: u64,
    /// The stated slack for scheduling delay: a waiter whose sum is tight
    /// waits this much longer than the sum, so a loaded machine's late
    /// wake-up never makes it give up on a peer still within its time.
    pub scheduling_slack: u64,
}

/// A client's waits on a daemon.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientTimeouts {
    /// A client replacing a daemon waits this long for it to go away.
    pub launcher_wait: u64,
    /// An attached client relaunches a lost supervisor within this long.
    pub client_relaunch_within: u64,
    /// A client waits this long for a daemon it started (or the service
    /// manager activated) to answer.
    pub daemon_start_wait: u64,
}

/// Busy evidence and revival after a reboot or crash.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvidenceTimeouts {
    /// A worker with work re-records busy evidence this often.
    pub busy_refresh: u64,
    /// The worker's busy-evidence tick: how late a due refresh may be written.
    pub busy_tick: u64,
    /// A boot within this long of a crash revives the worker.
    pub revival_window: u64,
    /// How long a busy record stays fresh evidence.
    pub busy_evidence_ttl: u64,
    /// Bound on wall-clock disagreement between processes (journal timestamps).
    pub revival_clock_skew: u64,
}

/// The daemon's timeouts.
pub const TM: Tm = Tm {
    worker: WorkerTimeouts {
        stop_grace: 4_000,
        harness_close: 1_000,
        worker_lost_exit: 300_000,
        sign_of_life: 1_000,
        worker_watchdog: 30_000,
        worker_answer: 5_000,
        worker_start_wait: 10_000,
        worker_unit_stop: 5_000,
        worker_stop_wait: 8_000,
    },
    kernel: KernelTimeouts {
        kernel_teardown: 2_500,
        cancel_grace: 1_000,
        template_idle: 60_000,
        kernel_start_wait: 20_000,
        kernel_stop_wait: 10_000,
        kernel_unit_stop: 6_000,
        run_term_grace: 1_000,
        kernel_term_wait: 3_000,
    },
    supervisor: SupervisorTimeouts {
        supervisor_drain: 6_500,
        kill_route: 1_000,
        child_drain: 1_000,
        quiesce_answer: 2_000,
        quiesce_hold: 5_000,
        restart_window: 900_000,
        restart_pause_max: 30_000,
        state_lock_handover: 7_500,
        session_settle: 30_000,
        supervisor_watchdog: 30_000,
        supervisor_unit_stop: 10_000,
        scheduling_slack: 500,
    },
    client: ClientTimeouts {
        launcher_wait: 9_000,
        client_relaunch_within: 60_000,
        daemon_start_wait: 10_000,
    },
    evidence: EvidenceTimeouts {
        busy_refresh: 300_000,
        busy_tick: 10_000,
        revival_window: 1_500_000,
        busy_evidence_ttl: 1_810_000,
        revival_clock_skew: 60_000,
    },
};

/// `CLIENT_RELAUNCH_WITHIN_MS` of the specification.
pub const CLIENT_RELAUNCH_WITHIN_MS: u64 = TM.client.client_relaunch_within;
/// `WORKER_LOST_EXIT_DEFAULT_MS` of the specification.
pub const WORKER_LOST_EXIT_DEFAULT_MS: u64 = TM.worker.worker_lost_exit;
/// `QUIESCE_ANSWER_MS` of the specification.
pub const QUIESCE_ANSWER_MS: u64 = TM.supervisor.quiesce_answer;
/// `QUIESCE_HOLD_MS` of the specification.
pub const QUIESCE_HOLD_MS: u64 = TM.supervisor.quiesce_hold;
/// `REVIVAL_CLOCK_SKEW_MS` of the specification.
pub const REVIVAL_CLOCK_SKEW_MS: u64 = TM.evidence.revival_clock_skew;
/// The busy refresh interval (5 minutes).
pub const BUSY_REFRESH_MS: u64 = TM.evidence.busy_refresh;
/// The revival window (25 minutes).
pub const REVIVAL_WINDOW_MS: u64 = TM.evidence.revival_window;
/// The restart window (15 minutes, monotonic).
pub const RESTART_WINDOW_MS: u64 = TM.supervisor.restart_window;
/// The cancel grace: SIGINT, this long, SIGTERM, this long, SIGKILL.
pub const CANCEL_GRACE_MS: u64 = TM.kernel.cancel_grace;
/// Output is group-committed: fsynced at most this long after it was
/// written (and at its run's end). Not a law's timeout: it bounds what a
/// power cut can take, never what a crash of a process can.
pub const OUTPUT_SYNC_MS: u64 = 200;
/// The longest `output_sync_ms` a configuration may set.
pub const OUTPUT_SYNC_MAX_MS: u64 = 60_000;
/// How long the worker waits for a live client to read its output before
/// it stops waiting and the client catches up from the transcript.
pub const FOLLOWER_PATIENCE_MS: u64 = 100;
/// How long the kernel holds the first bytes of a UTF-8 character cut at
/// the end of a read for the rest of it, before storing them as they are.
pub const UTF8_HOLD_MS: u64 = 50;
/// How long the kernel gathers a stream in full flow (a read of at least
/// `kernel::output::GATHER_FROM_BYTES`) into one spool record: every record
/// costs a transcript record and a client frame, and a kernel that reads as
/// soon as a fast writer writes makes them small. Output that trickles is
/// never held.
pub const OUTPUT_GATHER_MS: u64 = 1;
/// How long a catch-up that found nothing new waits before reading again.
pub const CATCH_UP_RETRY_MS: u64 = 50;
/// How long a worker waits for its kernel to answer a start (a healthy one
/// answers within milliseconds) before it says, once, that the kernel is
/// stopped or wedged and what waits for it. Not a law's timeout: nothing
/// gives up after it (the kernel holds the session's runs, and only its
/// death ends them).
pub const KERNEL_ANSWER_MS: u64 = 5_000;
/// How long an attached client waits for its session's worker to say
/// where its keys may go past it, then for the kernel to take it as a
/// typist (each answers at once when healthy). Not a law's timeout:
/// without the answer the keys go through the worker, as before. A worker
/// just started waits as long for its kernel link before it paints an
/// attach that asks where its screen is in the spool.
pub const TYPIST_ANSWER_MS: u64 = 1_000;
/// How long a shell reset (`eukhe reset`, MCP `bash` with `restart`) may
/// take before its client is told it failed: the old kernel's teardown,
/// then a new kernel's start.
pub const SHELL_RESET_MS: u64 = TM.kernel.kernel_teardown + TM.kernel.kernel_start_wait;
/// How long a worker waits, after an `eukhe bash` client's connection
/// ended, for that client's process to be gone (it closes its sockets as
/// it exits, a moment before): gone within it, the client went away and
/// its command is hung up; alive after it, it left on purpose. Not a
/// law's timeout: the command goes on either way while it waits.
pub const CLIENT_EXIT_MS: u64 = 1_000;
/// How long a remote client's `eukhe bash` command goes on after its
/// connection (the `eukhe proxy` in front of the worker) ended, for the
/// client to follow it again: past it, nobody did, and the command is hung
/// up as a local client's end hangs it up. A dropped SSH connection is
/// usually a wifi blip or a laptop's network change of seconds; ssh
/// itself gives a dead connection `ServerAliveInterval` times
/// `ServerAliveCountMax` (commonly 15 s times 3) before it ends it. The
/// client tries again for a whole `client_relaunch_within`, and its last
/// try, begun as that minute ends, may take `REMOTE_HELLO_MS` (an ssh
/// login, then a daemon's start there): it still finds its command. A client that leaves on purpose hangs up at once instead, so
/// only a client killed outright waits this out. Not a law's timeout: the
/// command goes on while it runs.
pub const REMOTE_RECONNECT_GRACE_MS: u64 = TM.client.client_relaunch_within + REMOTE_HELLO_MS;
/// Test only (`EUKHE_TEST_SHORT_WINDOWS=1`): the remote reconnection
/// grace a test can wait out.
pub const TEST_REMOTE_RECONNECT_GRACE_MS: u64 = 2_000;
/// How long a starting daemon's `ls` and `status` wait for the sessions it
/// adopts, resumes or revives to be under supervision, so the first `ls`
/// shows adopted workers with their pids; a worker that does not answer
/// delays them no longer. Not a law's timeout: nothing gives up after it.
pub const STARTS_SETTLE_MS: u64 = 500;
/// `idle_stop_ms` by default: a session left alone for an hour gives back
/// its worker and kernel (its shell state waits in the snapshot). Not a
/// law's timeout: nothing waits for it.
pub const IDLE_STOP_DEFAULT_MS: u64 = 3_600_000;
/// How long after `eukhe new` claimed the spare session the supervisor
/// starts the next one (`supervisor::spare`): the new session's first
/// commands, which usually follow at once, do not share the CPU with a
/// worker, a kernel and a shell starting. Not a law's timeout: nothing
/// waits for it (a `new` that finds no spare makes its session itself).
pub const SPARE_REMAKE_MS: u64 = 500;
/// How long `eukhe mcp`'s `bash` tool waits for its command by default
/// before it answers with the output so far, the command still running in
/// the session. Not a law's timeout: it stays below the request timeouts
/// MCP clients commonly use (60 s), so the agent hears back before its
/// client gives up on the call.
pub const MCP_BASH_TIMEOUT_DEFAULT_MS: u64 = 30_000;

/// How long `eukhe wait-for` and the MCP `wait_for` tool wait when the
/// caller names no timeout: as long as the MCP `bash` tool, for the same
/// reason. Not a law's timeout: the caller chooses it.
pub const WAIT_FOR_TIMEOUT_DEFAULT_MS: u64 = 30_000;
/// The longest wait a `wait_for` request may ask for: one hour. A longer
/// timeout is cut to it, so no request holds a worker's connection for
/// ever; a caller that must wait longer asks again.
pub const WAIT_FOR_TIMEOUT_MAX_MS: u64 = 3_600_000;
/// How long `eukhe ls --all-hosts` and a many-host `eukhe mcp`'s
/// `list_sessions` wait for one host's answer (its ssh login, its daemon's
/// start when none runs, its list) before they show it as unreachable:
/// hosts are asked at once, so one that is down or silent delays the
/// others by at most this. A healthy host answers within a second or two.
/// Not a law's timeout: the host is asked again next time.
pub const HOST_ANSWER_MS: u64 = 10_000;

/// The latest output line of a session goes out on the event stream at
/// most this often (`eukhe events`, `eukhe top`): a flood of output never
/// floods the stream. Not a law's timeout: nothing waits for it.
pub const EVENT_OUTPUT_LINE_MS: u64 = 1_000;
/// How long a terminal run's program must have written nothing before it
/// counts as waiting for input (`laws::waiting`), its foreground group
/// blocked reading the terminal. Long enough that a program which polls
/// its terminal between frames of a spinner or a progress bar (commonly
/// 80 to 250 ms apart) is not waiting, and that a shell between echoing a
/// command and reading the next is not; short enough that a person sees
/// the state come with the prompt and an agent's `wait_for` answers
/// within half a second of it. Not a law's timeout: nothing waits for it.
pub const WAITING_QUIET_MS: u64 = 500;
/// The first pause between two looks at a terminal run whose waiting
/// verdict did not change; it doubles at each look that finds the same.
pub const WAITING_RECHECK_FIRST_MS: u64 = 500;
/// The longest pause between two looks at a terminal run whose verdict
/// stays the same: a program that stops reading (or starts) without
/// writing a byte is seen within it. A look reads a few files of `/proc`
/// per process of the group.
pub const WAITING_RECHECK_MAX_MS: u64 = 5_000;
/// How often `eukhe top` redraws without an event: elapsed times tick.
pub const TOP_TICK_MS: u64 = 1_000;
/// How often a client that lost the daemon's event stream tries again.
pub const EVENTS_RECONNECT_MS: u64 = 200;
/// How long a stopping daemon gives its event subscribers to read the
/// last events (its own stop) before it ends.
pub const EVENTS_FLUSH_MS: u64 = 200;

/// How long ssh is given to log in to a remote host and start its proxy.
pub const SSH_LOGIN_MS: u64 = 15_000;
/// How long a client waits for a remote daemon's hello through ssh: the
/// login, then the proxy's own start of a daemon there (a launcher's
/// replacement of an older one, then a start), as a local client waits.
pub const REMOTE_HELLO_MS: u64 =
    SSH_LOGIN_MS + TM.client.launcher_wait + TM.client.daemon_start_wait;
/// How long a client whose transport ended waits for ssh's exit status.
pub const SSH_EXIT_MS: u64 = 2_000;
/// How long a host's forward (`client::forward`) lives without a
/// connection through it: as a `ControlPersist` of ten minutes, a burst
/// of work with pauses between commands keeps it, and an ssh nobody uses
/// goes away within a coffee break.
pub const FORWARD_IDLE_MS: u64 = 600_000;
/// How long a client waits for the remote daemon's hello through a
/// host's forward before taking the ssh proxy path: the forward's start
/// made sure that daemon runs, so it answers within a round trip; a
/// daemon still starting (socket activation) is reached by the proxy.
pub const FORWARD_HELLO_MS: u64 = 2_000;
/// How often a forward's ssh asks the server whether it is alive
/// (`ServerAliveInterval`); after `FORWARD_ALIVE_COUNT` unanswered asks
/// ssh ends, and the forward with it: an unreachable host is let go.
pub const FORWARD_ALIVE_INTERVAL_MS: u64 = 15_000;
/// How many unanswered alive asks end a forward's ssh (`ServerAliveCountMax`).
pub const FORWARD_ALIVE_COUNT: u64 = 3;

// Poll and retry intervals: not timeouts (nothing gives up after them),
// how often a waiter looks again. Kept here so no shell carries a literal.

/// How often a waiter re-checks a condition it has no signal for (a
/// process gone, a socket free, a unit down).
pub const POLL_MS: u64 = 20;
/// How often the supervisor retries a just-launched worker's socket (a
/// worker binds it within milliseconds: a short retry keeps starts fast).
pub const WORKER_CONNECT_RETRY_MS: u64 = 2;
/// How often a worker retries reaching or replacing its kernel.
pub const KERNEL_RETRY_MS: u64 = 200;
/// How often a worker whose kernel speaks another protocol looks whether
/// that kernel's runs have ended.
pub const KERNEL_RUNS_POLL_MS: u64 = 1_000;
/// How often a worker retries a store that failed (a full disk), and how
/// long its loops sleep when nothing woke them.
pub const WORKER_RETRY_MS: u64 = 500;
/// How often a kernel whose session directory cannot be watched (no
/// inotify instance left) looks whether it is still there.
pub const SESSION_DIR_POLL_MS: u64 = 1_000;
/// How long a kernel without a worker waits before writing busy evidence
/// again after a write failed (a full disk).
pub const KERNEL_EVIDENCE_RETRY_MS: u64 = 1_000;
/// Test only (`EUKHE_TEST_SHORT_WINDOWS=1`): the template idle window
/// (`template_idle`) a test can wait out.
pub const TEST_TEMPLATE_IDLE_MS: u64 = 1_000;
/// How long a waiter on the user manager sleeps at most between looks at
/// a unit (its signals usually wake it first).
pub const UNIT_WAKE_MS: u64 = 1_000;
/// How often an attached client retries relaunching a lost supervisor
/// (within `client_relaunch_within`).
pub const RELAUNCH_RETRY_MS: u64 = 200;
/// How long the word that a daemon is shut down on purpose may take: the
/// daemon's write of it to a client waiting to ask (an attached client's
/// watch), and an attached client's wait for it once no daemon listens
/// (the word comes as the socket goes; without it the daemon was lost).
pub const SHUTDOWN_WORD_MS: u64 = 1_000;
/// How long an attached client whose daemon was shut down on purpose
/// looks, once that daemon's process is gone, for a daemon another client
/// starts at once (a newer build replacing an idle daemon) before it
/// detaches: it never starts one itself.
pub const SHUT_DOWN_REATTACH_MS: u64 = 2_000;
/// How often `eukhe top`'s key reader looks whether it is paused (an
/// attach has the terminal).
pub const TOP_KEY_POLL_MS: u64 = 50;

// A failed busy record is retried within the lateness `busy_tick` allows,
// and a worker's signs of life come at least twice inside the shortest
// watchdog (checked when the crate compiles).
const _: () = assert!(KERNEL_EVIDENCE_RETRY_MS <= TM.evidence.busy_tick);
const _: () = assert!(WORKER_RETRY_MS <= TM.evidence.busy_tick);
const _: () = assert!(TM.worker.sign_of_life * 2 <= WORKER_WATCHDOG_MIN_MS);

/// The shortest worker watchdog a configuration may set: two signs of
/// life, so a healthy worker is never killed.
pub const WORKER_WATCHDOG_MIN_MS: u64 = TM.worker.sign_of_life * 2;

/// The shortest lost-exit window a configuration may set: an attached
/// client's relaunch of a lost supervisor, then a launcher's whole wait
/// (`worker_lost_exit >= client_relaunch_within + launcher_wait`), so a
/// lost worker sees a relaunched supervisor before it exits.
pub const WORKER_LOST_EXIT_MIN_MS: u64 = TM.client.client_relaunch_within + TM.client.launcher_wait;

/// The restart budget in words, for messages: "6 times in 15 minutes".
pub fn give_up_in_words() -> String {
    format!(
        "{} times in {}",
        crate::laws::restart::RESTART_GIVE_UP_AFTER + 1,
        duration_in_words(TM.supervisor.restart_window)
    )
}

/// A duration for a message: whole minutes, whole seconds, or ms.
pub fn duration_in_words(ms: u64) -> String {
    if ms >= 60_000 && ms.is_multiple_of(60_000) {
        let minutes = ms / 60_000;
        if minutes == 1 {
            "1 minute".into()
        } else {
            format!("{minutes} minutes")
        }
    } else if ms >= 1_000 && ms.is_multiple_of(1_000) {
        format!("{} s", ms / 1_000)
    } else {
        format!("{ms} ms")
    }
}

impl Tm {
    /// The values in [`TIMEOUT_NAMES`] order.
    pub fn values(&self) -> [u64; TIMEOUT_COUNT] {
        [
            self.worker.stop_grace,
            self.kernel.kernel_teardown,
            self.worker.harness_close,
            self.client.launcher_wait,
            self.supervisor.supervisor_drain,
            self.supervisor.kill_route,
            self.supervisor.child_drain,
            self.client.client_relaunch_within,
            self.worker.worker_lost_exit,
            self.evidence.busy_refresh,
            self.evidence.busy_tick,
            self.evidence.revival_window,
            self.evidence.busy_evidence_ttl,
            self.evidence.revival_clock_skew,
            self.supervisor.quiesce_answer,
            self.supervisor.quiesce_hold,
            self.supervisor.restart_window,
            self.supervisor.restart_pause_max,
            self.kernel.cancel_grace,
            self.kernel.template_idle,
            self.client.daemon_start_wait,
            self.worker.worker_start_wait,
            self.kernel.kernel_start_wait,
            self.kernel.kernel_stop_wait,
            self.worker.worker_unit_stop,
            self.kernel.kernel_unit_stop,
            self.worker.sign_of_life,
            self.supervisor.scheduling_slack,
            self.kernel.run_term_grace,
            self.kernel.kernel_term_wait,
            self.worker.worker_stop_wait,
            self.supervisor.state_lock_handover,
            self.supervisor.session_settle,
            self.worker.worker_watchdog,
            self.supervisor.supervisor_watchdog,
            self.supervisor.supervisor_unit_stop,
            self.worker.worker_answer,
        ]
    }

    /// The timeouts from values in [`TIMEOUT_NAMES`] order (the inverse of
    /// [`Tm::values`]).
    pub fn from_values(v: [u64; TIMEOUT_COUNT]) -> Tm {
        Tm {
            worker: WorkerTimeouts {
                stop_grace: v[0],
                harness_close: v[2],
                worker_lost_exit: v[8],
                sign_of_life: v[26],
                worker_watchdog: v[33],
                worker_answer: v[36],
                worker_start_wait: v[21],
                worker_unit_stop: v[24],
                worker_stop_wait: v[30],
            },
            kernel: KernelTimeouts {
                kernel_teardown: v[1],
                cancel_grace: v[18],
                template_idle: v[19],
                kernel_start_wait: v[22],
                kernel_stop_wait: v[23],
                kernel_unit_stop: v[25],
                run_term_grace: v[28],
                kernel_term_wait: v[29],
            },
            supervisor: SupervisorTimeouts {
                supervisor_drain: v[4],
                kill_route: v[5],
                child_drain: v[6],
                quiesce_answer: v[14],
                quiesce_hold: v[15],
                restart_window: v[16],
                restart_pause_max: v[17],
                state_lock_handover: v[31],
                session_settle: v[32],
                supervisor_watchdog: v[34],
                supervisor_unit_stop: v[35],
                scheduling_slack: v[27],
            },
            client: ClientTimeouts {
                launcher_wait: v[3],
                client_relaunch_within: v[7],
                daemon_start_wait: v[20],
            },
            evidence: EvidenceTimeouts {
                busy_refresh: v[9],
                busy_tick: v[10],
                revival_window: v[11],
                busy_evidence_ttl: v[12],
                revival_clock_skew: v[13],
            },
        }
    }
}

mod ordering;
pub use ordering::{relations_hold, timeouts_ordered, Relation, ORDERING, SENTENCES};

#[cfg(test)]
mod tests;
