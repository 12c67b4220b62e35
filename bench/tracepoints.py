"""What the step benchmarks share (bench/steps.py, bench/start_steps.py,
bench/job_steps.py): a private daemon, `perf record -a` of a few tracepoints
around a command and its `perf script`, and the pieces of their tables.
"""

import os
import shutil
import subprocess
import sys
import tempfile

# A round trip's marks (bench/steps.py): process exec, fork and exit; the
# client's connect; the worker's and the kernel's receipts and sends; the
# worker's syncs.
ROUND_TRIP_EVENTS = [
    "sched:sched_process_exec", "sched:sched_process_exit", "sched:sched_process_fork",
    "syscalls:sys_enter_connect", "syscalls:sys_exit_recvmsg", "syscalls:sys_exit_recvfrom",
    "syscalls:sys_enter_sendto", "syscalls:sys_enter_fdatasync", "syscalls:sys_exit_fdatasync",
    "syscalls:sys_enter_fsync", "syscalls:sys_exit_fsync",
]
SYNC_EVENTS = ("syscalls:sys_enter_fdatasync", "syscalls:sys_enter_fsync")
SYNC_ENDS = ("syscalls:sys_exit_fdatasync", "syscalls:sys_exit_fsync")
TABLE_HEAD = ["| step | median ms | floor ms | the floor is |", "|---|---:|---:|---|"]


class Daemon:
    """A private eukhe daemon (process backend) in a temp dir."""

    def __init__(self, binary):
        self.binary = binary
        self.dir = tempfile.mkdtemp(prefix="eukhe-bench-steps-")
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("EUKHE_HOST", "NOTIFY_SOCKET", "LISTEN_FDS", "LISTEN_PID")}
        self.env.update(EUKHE_SOCKET=os.path.join(self.dir, "run", "eukhe.sock"),
                        EUKHE_STATE_DIR=os.path.join(self.dir, "state"), HOME=self.dir,
                        XDG_CONFIG_HOME=os.path.join(self.dir, "config"))

    def __call__(self, *args):
        return subprocess.run([self.binary, *args], env=self.env, check=True,
                              capture_output=True, text=True).stdout

    def close(self):
        subprocess.run([self.binary, "shutdown", "--force"], env=self.env, capture_output=True)
        shutil.rmtree(self.dir, ignore_errors=True)


def need_root_and_perf(name):
    """Leave, saying why, unless this runs as root with perf."""
    if os.geteuid() != 0 or shutil.which("perf") is None:
        sys.exit(f"{name}: needs root and perf (the tracepoints of every process)")


def record(event_args, command, fields="pid,tid,time,event,trace", env=None):
    """Run `command` under `perf record -a` of `event_args` (perf's own
    `-e` and `--filter` words): what it printed, and `perf script`'s text
    with `fields`."""
    with tempfile.TemporaryDirectory(prefix="eukhe-bench-perf-") as scratch:
        data = os.path.join(scratch, "perf.data")
        traced = subprocess.run(["perf", "record", "-q", "-a", *event_args, "-o", data, "--", *command],
                                env=env, capture_output=True, text=True, check=True)
        script = subprocess.run(["perf", "script", "-i", data, "-F", fields],
                                capture_output=True, text=True, check=True).stdout
    return traced.stdout, script


def record_plan(event_args, spawn, plan):
    """Run the spawner `spawn` on `plan` (its text) under `record`: each
    command's wall time in seconds, and `perf script`'s text."""
    with tempfile.TemporaryDirectory(prefix="eukhe-bench-plan-") as scratch:
        plan_path = os.path.join(scratch, "plan")
        with open(plan_path, "w") as f:
            f.write(plan)
        printed, script = record(event_args, [spawn, plan_path])
    walls = [int(line.split()[1]) / 1e9 for line in printed.splitlines()]
    return walls, script


def parse(script_text):
    """`perf script -F pid,tid,time,event,trace` lines -> (time s, tgid,
    tid, event, its whole trace text)."""
    events = []
    for line in script_text.splitlines():
        parts = line.split(None, 3)
        if len(parts) < 3:
            continue
        try:
            tgid, tid = (int(x) for x in parts[0].split("/"))
            when = float(parts[1].rstrip(":"))
        except ValueError:
            continue
        events.append((when, tgid, tid, parts[2].rstrip(":"), parts[3] if len(parts) > 3 else ""))
    return events


def ms(seconds):
    return f"{seconds * 1000:.3f}"


def load_average():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])
