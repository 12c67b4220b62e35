"""bench/run's terminal benchmarks (8 to 10): keystroke echo, output
through a terminal run, and the memory of an idle terminal run, side by
side with tmux. bench/run passes in its helpers (`kit`: Eukhe, Tmux,
alternate, PSS and process helpers), so this file holds only what a
terminal adds: a program on a pseudo-terminal, as a person's terminal
runs it, and the harness's side of that terminal (the master).
"""

import fcntl
import os
import select
import shutil
import signal
import statistics
import struct
import subprocess
import tempfile
import termios
import time

ROWS, COLS = 24, 80
# A byte no terminal sequence tmux draws with holds, so its arrival is the
# echo; the erase after each round keeps `cat`'s line empty.
PROBE, ERASE = b"z", b"\x7f"
EOF_KEY = b"\x04"
DETACH_KEY = b"\x1c"
# Long enough for a daemon to start a session's worker on a loaded machine.
READY_WITHIN = 30.0
ECHO_WITHIN = 10.0
# Output that stopped for this long after an erase has all been drawn.
QUIET = 0.02


class OnTerminal:
    """`argv` on a new pseudo-terminal (ROWS x COLS) as its controlling
    terminal, the way a person's terminal starts a program; the harness
    holds the master."""

    def __init__(self, argv, env=None):
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))
        self.process = subprocess.Popen(
            argv, stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True,
            start_new_session=True,
            preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),
        )
        os.close(slave)
        self.master = master
        self.seen = bytearray()

    def raw(self):
        """Whether the program has put its terminal in raw mode (no echo,
        no lines): a passthrough has begun."""
        lflag = termios.tcgetattr(self.master)[3]
        return not lflag & (termios.ECHO | termios.ICANON)

    def read(self, within):
        """What the program wrote within `within` seconds (b"" if nothing;
        None once the terminal has closed)."""
        ready, _, _ = select.select([self.master], [], [], within)
        if not ready:
            return b""
        try:
            data = os.read(self.master, 1 << 16)
        except OSError:  # EIO: every holder of the slave has gone
            return None
        self.seen += data
        return data or None

    def wait(self, condition, within, what):
        deadline = time.monotonic() + within
        while not condition():
            left = deadline - time.monotonic()
            if left <= 0:
                shown = bytes(self.seen[-300:]).decode(errors="replace")
                raise RuntimeError(f"timed out waiting for {what}; the terminal showed: {shown!r}")
            if self.read(min(left, 0.05)) is None and not condition():
                raise RuntimeError(f"the terminal closed before {what}: {bytes(self.seen[-300:])!r}")

    def settle(self):
        """Read until the program has written nothing for QUIET seconds."""
        while self.read(QUIET):
            pass

    def echo(self):
        """Seconds from one typed byte to its echo; then the erase, drawn."""
        self.settle()
        start = time.perf_counter()
        os.write(self.master, PROBE)
        deadline = start + ECHO_WITHIN
        while True:
            data = self.read(max(deadline - time.perf_counter(), 0))
            if data and PROBE in data:
                took = time.perf_counter() - start
                break
            if data is None or time.perf_counter() > deadline:
                raise RuntimeError(f"no echo within {ECHO_WITHIN} s: {bytes(self.seen[-300:])!r}")
        os.write(self.master, ERASE)
        return took

    def drain(self):
        """Read everything until the terminal closes: bytes read."""
        total = 0
        while True:
            try:
                data = os.read(self.master, 1 << 16)
            except OSError:
                break
            if not data:
                break
            total += len(data)
        return total

    def close(self, key=None):
        """Ends the program: `key` typed first (its own way out), then
        SIGKILL to its pid if it is still there; the master closed."""
        if key is not None and self.process.poll() is None:
            try:
                os.write(self.master, key)
                self.process.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        os.close(self.master)


class TmuxOnTerminal:
    """A tmux server of its own (a socket in a temp dir) whose one pane
    runs `command`, and a tmux client attached to it on a terminal; the
    server is ended by its pid."""

    def __init__(self, command):
        self.dir = tempfile.mkdtemp(prefix="eukhe-bench-tmux-")
        self.socket = os.path.join(self.dir, "socket")
        self.server = None
        self.client = None
        try:
            self("new-session", "-d", "-s", "s", "-x", str(COLS), "-y", str(ROWS), command)
            self.server = int(self("display-message", "-p", "#{pid}").strip())
            # No status line: its clock would draw between the echoes.
            self("set-option", "-g", "status", "off")
            env = {**os.environ, "TERM": "xterm-256color"}
            env.pop("TMUX", None)
            self.client = OnTerminal(["tmux", "-S", self.socket, "attach-session", "-t", "s"], env)
            self.client.wait(self.client.raw, READY_WITHIN, "the tmux client's raw mode")
        except BaseException:
            self.close()
            raise

    def __call__(self, *args):
        env = {k: v for k, v in os.environ.items() if k != "TMUX"}
        return subprocess.run(["tmux", "-S", self.socket, "-f", "/dev/null", *args], env=env,
                              check=True, capture_output=True, text=True).stdout

    def close(self):
        if self.client is not None:
            self.client.close()
        if self.server is not None:
            try:
                os.kill(self.server, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(self.dir, ignore_errors=True)


def started(eukhe):
    """The pids of `eukhe`'s daemon and of every session's worker and
    kernel, for `close`."""
    pids = [eukhe.daemon_pid()]
    for session in eukhe.sessions():
        pids += [session[key] for key in ("pid", "kernel_pid") if session.get(key)]
    return pids


def close(eukhe, pids):
    """`eukhe shutdown --force` and its temp dir (Eukhe.close), then
    SIGKILL to any of `pids` still running."""
    eukhe.close()
    kill_if_running(pids)


def kill_if_running(pids):
    """SIGKILL to each of `pids` that is still running (not a zombie)."""
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                running = stat.read().rsplit(")", 1)[1].split()[0] != "Z"
            if running:
                os.kill(pid, signal.SIGKILL)
        except (OSError, IndexError):
            continue


def eukhe_argv(eukhe, *args):
    return [eukhe.binary, *args]


def attach_passes_through(eukhe, session):
    """`eukhe attach` on a terminal onto `session`, whose current run is a
    terminal run: the client when it passes that terminal through (raw,
    its echo the run's), else None (the line view: typed lines become
    runs, the person's terminal echoes them itself)."""
    client = OnTerminal(eukhe_argv(eukhe, "attach", session), eukhe.env)
    line_view = b"typed lines are queued"
    try:
        client.wait(lambda: client.raw() or line_view in client.seen, READY_WITHIN,
                    "attach's raw mode or its line view")
    except RuntimeError:
        client.close()
        return None
    if line_view in client.seen or not client.raw():
        client.close()
        return None
    return client


def bench_echo(kit, report, rounds, warmup):
    """8: a byte typed on the client's terminal until its echo comes back,
    through `eukhe bash --tty`, `eukhe attach`, a tmux client, and `cat`
    on a terminal of its own (the floor)."""
    kit.say("8. keystroke echo: eukhe bash --tty, eukhe attach, tmux attach, a bare pty (floor)")
    eukhe = kit.Eukhe("echo")
    # Each terminal, and the key that ends its program its own way.
    terminals, ends, tmux, unavailable, pids = {}, {}, None, {}, []
    try:
        direct = eukhe("new").strip()
        bash = OnTerminal(eukhe_argv(eukhe, "bash", "--tty", direct, "--", "cat"), eukhe.env)
        terminals["eukhe bash --tty -- cat"], ends["eukhe bash --tty -- cat"] = bash, EOF_KEY
        bash.wait(bash.raw, READY_WITHIN, "eukhe bash --tty's raw mode")
        watched = eukhe("new").strip()
        eukhe("send", "--tty", watched, "--", "cat")
        attach = attach_passes_through(eukhe, watched)
        if attach is None:
            unavailable["eukhe attach (send --tty -- cat)"] = \
                "attach: not a terminal pass-through in this build"
        else:
            terminals["eukhe attach (send --tty -- cat)"] = attach
            ends["eukhe attach (send --tty -- cat)"] = DETACH_KEY
        pids = started(eukhe)
        tmux = TmuxOnTerminal("cat")
        terminals["tmux attach (pane: cat)"] = tmux.client
        terminals["cat on a pty (floor)"], ends["cat on a pty (floor)"] = OnTerminal(["cat"]), EOF_KEY
        for _ in range(warmup):
            for terminal in terminals.values():
                terminal.echo()
        samples = {name: [] for name in terminals}
        for _ in range(rounds):
            for name, terminal in terminals.items():
                samples[name].append(terminal.echo())
        peers = ["tmux attach (pane: cat)", "cat on a pty (floor)"]
        report.timing("8 keystroke echo", samples,
                      {name: peers for name in samples if name.startswith("eukhe")},
                      unit="µs", scale=1e6)
        for name, why in unavailable.items():
            report.value("8 keystroke echo", name, "", 0.0, note=why)
    finally:
        for name, key in ends.items():
            terminals[name].close(key)
        if tmux is not None:
            tmux.close()
        close(eukhe, pids)


def drained_on_terminal(argv, env=None):
    """A program on a terminal whose master is read as fast as it can be:
    until it closes."""
    terminal = OnTerminal(argv, env)
    try:
        terminal.drain()
        status = terminal.process.wait()
        if status != 0:
            raise RuntimeError(f"{argv[:3]} exited with {status}")
    finally:
        terminal.close()


def bench_tty_throughput(kit, report, size, rounds, tmux_pane):
    """9: text through a terminal run, the client on a terminal the
    harness drains, against a pipe; the pty on its own; tmux's pane (the
    figure benchmark 3 measured in this run, else measured here)."""
    mib = size // (1024 * 1024)
    kit.say(f"9. {mib} MiB of text through a terminal run")
    text = f"yes {kit.TEXT_LINE} | head -c {size}"
    eukhe, tmux, pids, tmux_server = kit.Eukhe("tty-throughput"), None, [], []
    try:
        session = eukhe("new").strip()
        pids = started(eukhe)
        measured_tmux = tmux_pane is None or tmux_pane[0] != size
        if measured_tmux:
            tmux = kit.Tmux("tty-throughput")
            tmux_server = [tmux.server_pid()]

        def subjects(text):
            through = {
                "eukhe bash --tty (client on a pty)":
                    lambda: drained_on_terminal(eukhe_argv(eukhe, "bash", "--tty", session, "--", text),
                                                eukhe.env),
                "eukhe bash --tty (client's stdout a pipe)":
                    lambda: subprocess.run(
                        ["sh", "-c", f'"$0" bash --tty {session} -- "$1" | cat > /dev/null',
                         eukhe.binary, text],
                        env=eukhe.env, stdin=subprocess.DEVNULL, check=True),
                "pipe (floor)": lambda: subprocess.run(["sh", "-c", f"{text} | cat > /dev/null"], check=True),
                "the pty alone (no eukhe)": lambda: drained_on_terminal(["sh", "-c", text]),
            }
            if measured_tmux:
                through["tmux pane"] = lambda: tmux.run_in("base", f"{text}; clear")
            return through

        # The warm-up: each subject once, with a 64th of the text.
        for warm in subjects(f"yes {kit.TEXT_LINE} | head -c {size // 64}").values():
            warm()
        samples = kit.alternate(subjects(text), rounds, 0)
        if not measured_tmux:
            samples["tmux pane (benchmark 3, this run)"] = tmux_pane[1]
        tmux_name = "tmux pane" if measured_tmux else "tmux pane (benchmark 3, this run)"
        eukhe_names = [name for name in samples if name.startswith("eukhe")]
        report.timing(f"9 terminal run, {mib} MiB text", samples,
                      {name: ["pipe (floor)", "the pty alone (no eukhe)", tmux_name] for name in eukhe_names},
                      unit="s", scale=1.0)
        rates = " / ".join(f"{mib / statistics.median(samples[name]):.1f}"
                           for name in [*eukhe_names, "pipe (floor)", tmux_name])
        report.value(f"9 terminal run, {mib} MiB text", "eukhe on a pty / its stdout a pipe / pipe / tmux",
                     "", 0.0, note=f"{rates} MiB/s")
    finally:
        if tmux is not None:
            tmux.close()
            kill_if_running(tmux_server)
        close(eukhe, pids)


def descendants(kit, pid):
    found, stack = [], [pid]
    while stack:
        children = kit.children_of(stack.pop())
        found += children
        stack += children
    return found


def commands_under(kit, pid):
    """The command names of every process under `pid`."""
    names = []
    for child in descendants(kit, pid):
        try:
            with open(f"/proc/{child}/comm") as comm:
                names.append(comm.read().strip())
        except OSError:
            continue
    return names


def session_pss_kib(kit, session):
    """A session's PSS: its worker, its kernel and everything under the
    kernel (the shell; a terminal run's shell and program)."""
    pids = [session["pid"], session["kernel_pid"], *descendants(kit, session["kernel_pid"])]
    worker = kit.private_and_pss_kib(session["pid"])[1]
    return sum(kit.private_and_pss_kib(pid)[1] for pid in pids), worker, len(pids)


def bench_tty_memory(kit, report, count):
    """10: `count` sessions with an idle terminal run (`cat` waiting for
    its terminal) against `count` plain idle sessions, and against
    `count` with an idle run on no terminal (`eukhe bash -- cat` whose
    client's stdin stays open): the last difference is the terminal's
    own (its pty, its screen), the first also counts the run's
    processes. In one daemon."""
    kit.say(f"10. memory of an idle terminal run, {count} sessions of each")
    eukhe, pids, clients = kit.Eukhe("tty-memory"), [], []
    try:
        groups = {name: [eukhe("new").strip() for _ in range(count)]
                  for name in ("plain", "run on no terminal", "terminal run")}
        for session in groups["terminal run"]:
            eukhe("send", "--tty", session, "--", "cat")
        for session in groups["run on no terminal"]:
            clients.append(subprocess.Popen([eukhe.binary, "bash", session, "--", "cat"], env=eukhe.env,
                                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL))

        def all_waiting():
            listed = {s["id"]: s for s in eukhe.sessions()}
            return all(listed[s]["state"] == "busy" and listed[s].get("kernel_pid")
                       and "cat" in commands_under(kit, listed[s]["kernel_pid"])
                       for s in groups["terminal run"] + groups["run on no terminal"])

        kit.wait_for(all_waiting)
        pids = started(eukhe)
        # As benchmark 4: what starting them left running is over.
        time.sleep(1.0)
        listed = {s["id"]: s for s in eukhe.sessions()}
        measured = {name: [session_pss_kib(kit, listed[s]) for s in group] for name, group in groups.items()}
        session = {name: statistics.median(m[0] for m in values) for name, values in measured.items()}
        worker = {name: statistics.median(m[1] for m in values) for name, values in measured.items()}
        processes = {name: statistics.median(m[2] for m in values) for name, values in measured.items()}
        for name in measured:
            report.value("10 idle terminal run memory",
                         f"session PSS (worker + kernel + all under it), {name}, {count} sessions",
                         "MiB", session[name] / 1024,
                         note=f"worker {worker[name] / 1024:.2f} MiB; {processes[name]:.0f} processes")
        for than, label in (("plain", "a plain session"),
                            ("run on no terminal", "a session whose idle run has no terminal")):
            report.value("10 idle terminal run memory", f"an idle terminal run beyond {label}", "MiB",
                         (session["terminal run"] - session[than]) / 1024,
                         note=f"the worker's part: {(worker['terminal run'] - worker[than]) / 1024:.2f} MiB")
    finally:
        for client in clients:
            client.stdin.close()
            try:
                client.wait(timeout=10)
            except subprocess.TimeoutExpired:
                client.kill()
                client.wait()
        close(eukhe, pids)
