"""Where the soak runs eukhe: on the process backend (the embedded default,
a private socket and state directory on this machine), or installed from
its Debian package in a private systemd (the backend users get from the
packages: worker and kernel units, journald evidence, socket activation).

Each host runs `eukhe` as its user, finds the session processes it owns,
and injects the faults that only it knows how to cause. The soak's
invariants (soak/run) are the same on both.
"""

import os
import shutil
import signal
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EUKHE = os.path.join(ROOT, "target", "release", "eukhe")
# The soak's short windows (EUKHE_TEST_SHORT_WINDOWS allows them): a lost
# worker exits 3 s after its supervisor, a hung one is killed after 2 s.
LOST_EXIT_MS = 3000
WATCHDOG_MS = 2000
STATE_DISK_MB = 160


def find_processes(role, belongs):
    """session -> pids of live `eukhe <role> <session>` processes for which
    `belongs(pid)` holds, leaving out a child between fork and exec (it
    looks like its parent)."""
    found, parents = {}, {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            if len(argv) < 3 or not argv[0].endswith(b"eukhe") or argv[1] != role.encode():
                continue
            if not belongs(pid):
                continue
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if fields[0] == "Z":
                continue
        except OSError:
            continue
        found.setdefault(argv[2].decode(), []).append(int(pid))
        parents[int(pid)] = int(fields[1])
    return {session: [p for p in pids if parents[p] not in pids] for session, pids in found.items()}


def alive(pid):
    """Whether host pid `pid` runs (a zombie does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


# A probe run as another user: it connects to each socket, sends a frame
# and prints the ones that answered with anything but a refusal (a worker
# answers another user's connection with one error frame; a kernel closes
# it).
OTHER_UID_PROBE = ("import socket, sys\n"
                   "for path in sys.argv[1:]:\n"
                   "    s = socket.socket(socket.AF_UNIX)\n"
                   "    try:\n"
                   "        s.connect(path)\n"
                   "        s.settimeout(5)\n"
                   "        s.sendall(bytes([0, 0, 0, 2]) + b'{}')\n"
                   "        reply = s.recv(65536)\n"
                   "        if reply and b'connection refused: another user' not in reply:\n"
                   "            print('answered', path, reply[:200])\n"
                   "    except OSError:\n"
                   "        pass\n")


class ProcessHost:
    """The process backend: a private daemon, socket and state directory;
    the state on a small tmpfs (as root) so the disk can be filled."""

    name = "process"
    fault_kinds = {
        # kind: how many of it in each shuffled round of faults
        "worker SIGKILL": 3, "worker SIGSTOP": 2, "kernel SIGKILL": 2, "supervisor SIGKILL": 2,
        "supervisor lost": 1, "client drop": 2, "disk full": 1, "cancel": 2, "rm --force": 1,
        "give-up": 1,
    }

    def __init__(self):
        self.fault_kinds = dict(self.fault_kinds)
        self.dir = tempfile.mkdtemp(prefix="eukhe-soak-")
        self.state = os.path.join(self.dir, "state")
        os.makedirs(self.state)
        self.tmpfs = False
        if os.geteuid() == 0:
            subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={STATE_DISK_MB}m,mode=0700", "tmpfs",
                            self.state], check=True)
            self.tmpfs = True
        else:
            del self.fault_kinds["disk full"]
        config = os.path.join(self.dir, "config", "eukhe")
        os.makedirs(config)
        with open(os.path.join(config, "config.toml"), "w") as f:
            f.write(f"worker_lost_exit_ms = {LOST_EXIT_MS}\nworker_watchdog_ms = {WATCHDOG_MS}\n")
        self.env = dict(os.environ)
        self.env.update(EUKHE_SOCKET=os.path.join(self.dir, "run", "eukhe.sock"),
                        EUKHE_STATE_DIR=self.state, HOME=self.dir,
                        XDG_CONFIG_HOME=os.path.join(self.dir, "config"))
        for name in ("EUKHE_HOST", "EUKHE_WORKER_LOST_EXIT_MS", "NOTIFY_SOCKET"):
            self.env.pop(name, None)
        # Test only: a 3 s lost-exit window is below the law's minimum.
        self.env["EUKHE_TEST_SHORT_WINDOWS"] = "1"

    def describe(self):
        return f"the process backend, state on {'a tmpfs' if self.tmpfs else 'disk (not root: no disk-full faults)'}"

    # -- running eukhe ----------------------------------------------------
    def argv(self, args):
        return [EUKHE, *args]

    def run(self, args, timeout=60, text=True):
        return subprocess.run(self.argv(args), env=self.env, capture_output=True, text=text,
                              timeout=timeout, stdin=subprocess.DEVNULL)

    def popen(self, args, **kw):
        return subprocess.Popen(self.argv(args), env=self.env, **kw)

    def put_file(self, name, data, mode=0o644):
        """Write `data` where the session's commands can read it (and, with
        `mode` 0666, write it); its path as they see it."""
        path = os.path.join(self.dir, name)
        with open(path, "wb") as f:
            f.write(data)
        os.chmod(path, mode)
        return path

    def read_file(self, path):
        with open(path) as f:
            return f.read()

    # -- its processes ----------------------------------------------------
    def live(self, role):
        tag = f"EUKHE_STATE_DIR={self.state}".encode()

        def ours(pid):
            with open(f"/proc/{pid}/environ", "rb") as f:
                return tag in f.read().split(b"\0")
        return find_processes(role, ours)

    def pid_alive(self, pid):
        return alive(pid)

    def session_left_running(self, session, kernel_pid, background_pid):
        """What of a removed session still runs: a list of descriptions."""
        left = [f"its {what} {pid}" for what, pid in (("kernel", kernel_pid),
                                                      ("background job", background_pid))
                if pid and alive(pid)]
        left += [f"a {role}" for role in ("worker", "kernel") if session in self.live(role)]
        return left

    # -- faults -----------------------------------------------------------
    def kill_worker(self, session, states, sig):
        os.kill(states[session]["pid"], sig)

    def kill_kernel(self, session, states):
        os.kill(states[session]["kernel_pid"], signal.SIGKILL)

    def kill_supervisor(self, pid):
        os.kill(pid, signal.SIGKILL)

    def state_path(self, *parts):
        """A path of the state directory, as this process reaches it."""
        return os.path.join(self.state, *parts)

    def fill_disk(self):
        filler = self.state_path("filler")
        subprocess.run(["fallocate", "-l", f"{STATE_DISK_MB}m", filler], capture_output=True)
        subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=1M", "oflag=append",
                        "conv=notrunc"], capture_output=True)
        return filler

    def probe_other_uid(self, session):
        """Lines for sockets another uid was served on; None when it cannot
        be probed (not root)."""
        if os.geteuid() != 0:
            return None
        sockets = os.path.join(self.dir, "run")
        paths = [os.path.join(sockets, "workers", f"{session}.sock"),
                 os.path.join(sockets, "kernels", f"{session}.sock")]
        missing = [p for p in paths if not os.path.exists(p)]
        # The system interpreter: one under /root is not the other uid's to run.
        out = subprocess.run(["/usr/bin/python3", "-c", OTHER_UID_PROBE, *paths],
                             capture_output=True, text=True, user=65534, group=65534, timeout=30)
        return [f"no socket at {p} to probe" for p in missing] + out.stdout.splitlines()

    def close(self):
        subprocess.run(self.argv(["shutdown", "--force"]), env=self.env, capture_output=True)
        for role in ("worker", "kernel"):
            for pids in self.live(role).values():
                for pid in pids:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
        deadline = time.monotonic() + 10
        while self.live("worker") and time.monotonic() < deadline:
            time.sleep(0.1)
        if self.tmpfs:
            if subprocess.run(["umount", self.state], capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", self.state])
        shutil.rmtree(self.dir, ignore_errors=True)


# -- the private systemd ---------------------------------------------------

USER, UID = "eukhe-soak", 4243
HOME = f"/home/{USER}"
STATE_INSIDE = f"{HOME}/.local/state/eukhe"
STATE_IMAGE = "/var/lib/eukhe-soak/state.ext4"
# The private systemd's boot, shared with the tests: run as
# `bash boot-systemd.sh DIR soak`, it boots the target eukhe-soak.target.
BOOT_SCRIPT = os.path.join(ROOT, "tests", "support", "boot-systemd.sh")


def cgroup2_root():
    unified = "/sys/fs/cgroup/unified"
    return unified if os.path.exists(os.path.join(unified, "cgroup.procs")) else "/sys/fs/cgroup"


class SystemdHost:
    """eukhe installed from its .deb in a private systemd (PID 1 of new PID,
    mount, UTS, IPC and cgroup namespaces over a copy-on-write overlay of
    this machine, as tests/support/systemd.rs boots it), driven as a user
    whose manager runs the enabled `eukhe.socket`. The state directory is
    a small ext4 image, so it survives a reboot and can be filled. Nothing
    is written outside the soak's directory under target/; teardown kills
    only the private PID 1 it started (which ends its namespace) by pid."""

    name = "systemd"
    fault_kinds = {
        "worker SIGKILL": 3, "kernel SIGKILL": 2, "supervisor SIGKILL": 2,
        "supervisor stopped": 2, "reboot": 1, "disk full": 1, "upgrade": 1, "cancel": 2,
        "rm --force": 1, "give-up": 1,
    }

    def __init__(self, debs):
        """`debs`: the package of this checkout first, then the upgrades in
        the order they are installed."""
        self.debs = list(debs)
        self.installed = 0
        self.dir = os.path.join(ROOT, "target", "soak", f"systemd-{os.getpid()}")
        shutil.rmtree(self.dir, ignore_errors=True)
        for sub in ("upper", "work", "root"):
            os.makedirs(os.path.join(self.dir, sub))
        shutil.copy(BOOT_SCRIPT, os.path.join(self.dir, "boot.sh"))
        self.image_made = False
        self.cgroup = os.path.join(cgroup2_root(), f"eukhe-soak-{os.getpid()}")
        os.makedirs(self.cgroup, exist_ok=True)
        self.unshare = None
        self.pid = 0
        try:
            self.boot()
            self.root(f"useradd -m -u {UID} -s /bin/sh {USER}")
            self.install_next()
            self.log_in()
        except BaseException:
            # Nobody else holds this host yet: end what was booted.
            self.close()
            raise

    def describe(self):
        return (f"the systemd backend: a private systemd, eukhe {self.version()} from its .deb, "
                f"state on a {STATE_DISK_MB} MiB ext4 image")

    # -- booting ----------------------------------------------------------
    def boot(self):
        procs = os.path.join(self.cgroup, "cgroup.procs")

        def join_cgroup():
            with open(procs, "w") as f:
                f.write(str(os.getpid()))
        self.unshare = subprocess.Popen(
            ["/usr/bin/unshare", "--fork", "--pid", "--mount", "--uts", "--ipc", "--cgroup",
             "/bin/bash", os.path.join(self.dir, "boot.sh"), self.dir, "soak"],
            stdin=subprocess.DEVNULL, stdout=open(os.path.join(self.dir, "boot.log"), "w"),
            stderr=open(os.path.join(self.dir, "boot.err"), "w"), preexec_fn=join_cgroup)
        deadline = time.monotonic() + 20
        while True:
            try:
                with open(f"/proc/{self.unshare.pid}/task/{self.unshare.pid}/children") as f:
                    child = f.read().split()
                if child:
                    with open(f"/proc/{child[0]}/comm") as f:
                        if f.read().strip() == "systemd":
                            self.pid = int(child[0])
                            break
            except OSError:
                pass
            if self.unshare.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the private systemd did not start: {self.boot_log()}")
            time.sleep(0.02)
        self.wait_for("the private systemd runs", 30, lambda: self.exec(
            ["systemctl", "is-system-running"]).stdout.strip() in (b"running", b"degraded"))
        # The state directory on its own small disk, before the user's
        # manager (and with it eukhe) starts. The image lives inside (in
        # the overlay, so it survives a reboot): the checkout may be under
        # a path the private root does not show (its /tmp is its own).
        if not self.image_made:
            self.root(f"mkdir -p {os.path.dirname(STATE_IMAGE)} && "
                      f"truncate -s {STATE_DISK_MB}M {STATE_IMAGE} && mkfs.ext4 -q -F {STATE_IMAGE}")
            self.image_made = True
        self.root(f"mkdir -p {STATE_INSIDE} && mount -o loop {STATE_IMAGE} {STATE_INSIDE} && "
                  f"chown {UID}:{UID} {STATE_INSIDE} && chmod 0700 {STATE_INSIDE} && "
                  f"chown -R {UID}:{UID} {HOME}/.local")

    def boot_log(self):
        try:
            with open(os.path.join(self.dir, "boot.err")) as f:
                return " | ".join(f.read().splitlines()[-10:])
        except OSError:
            return ""

    def log_in(self):
        self.root(f"systemctl start user@{UID}.service")
        self.wait_for("the user manager runs", 20, lambda: self.user(
            ["systemctl", "--user", "is-system-running"]).stdout.startswith(b"running"))

    def power_off(self):
        if self.pid:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.unshare:
            self.unshare.kill()
            self.unshare.wait()
        self.pid = 0

    def reboot(self):
        """A power cut and a boot over the same disk; the user logs in again."""
        self.power_off()
        for entry in os.scandir(self.cgroup):
            if entry.is_dir():
                remove_cgroup(entry.path)
        self.boot()
        self.log_in()

    @staticmethod
    def wait_for(what, within, done):
        deadline = time.monotonic() + within
        while not done():
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting until {what}")
            time.sleep(0.05)

    # -- running commands inside --------------------------------------------
    def enter(self):
        return ["/usr/bin/nsenter", "-t", str(self.pid), "-m", "-p", "-u", "-i", "-C", "-r", "-w"]

    def exec(self, argv, **kw):
        return subprocess.run(self.enter() + argv, capture_output=True, **kw)

    def root(self, script):
        out = self.exec(["sh", "-c", script], text=True)
        if out.returncode != 0:
            raise RuntimeError(f"{script}: {out.stderr.strip()}")
        return out.stdout

    def user_argv(self, argv):
        return self.enter() + ["runuser", "-u", USER, "--", "env", "-C", HOME,
                               f"XDG_RUNTIME_DIR=/run/user/{UID}",
                               f"DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/{UID}/bus",
                               f"HOME={HOME}", *argv]

    def user(self, argv, **kw):
        return subprocess.run(self.user_argv(argv), capture_output=True, **kw)

    def argv(self, args):
        return self.user_argv(["eukhe", *args])

    def run(self, args, timeout=60, text=True):
        return subprocess.run(self.argv(args), capture_output=True, text=text, timeout=timeout,
                              stdin=subprocess.DEVNULL)

    def popen(self, args, **kw):
        return subprocess.Popen(self.argv(args), **kw)

    def inside(self, path):
        """Where `path` inside is, seen from here (through PID 1's root)."""
        return f"/proc/{self.pid}/root{path}"

    def put_file(self, name, data, mode=0o644):
        path = f"/tmp/{name}"
        with open(self.inside(path), "wb") as f:
            f.write(data)
        os.chmod(self.inside(path), mode)
        return path

    def read_file(self, path):
        with open(self.inside(path)) as f:
            return f.read()

    def unit(self, unit, prop):
        return self.user(["systemctl", "--user", "show", "-p", prop, "--value", unit],
                         text=True).stdout.strip()

    def version(self):
        return self.root("eukhe --version").split()[-1]

    # -- its processes ----------------------------------------------------
    def in_cgroup(self, pid):
        with open(f"/proc/{pid}/cgroup") as f:
            return f"/eukhe-soak-{os.getpid()}/" in f.read()

    def live(self, role):
        return find_processes(role, self.in_cgroup)

    def session_left_running(self, session, kernel_pid, background_pid):
        left = []
        for unit in (f"eukhe@{session}.service", f"eukhe-kernel@{session}.service"):
            if self.unit(unit, "ActiveState") not in ("inactive", "failed", ""):
                left.append(f"its unit {unit} ({self.unit(unit, 'ActiveState')})")
        # Any process left in a cgroup of the session's units.
        for dirpath, _, files in os.walk(self.cgroup):
            if session in dirpath and "cgroup.procs" in files:
                with open(os.path.join(dirpath, "cgroup.procs")) as f:
                    pids = f.read().split()
                if pids:
                    left.append(f"processes {' '.join(pids)} in {os.path.basename(dirpath)}")
        if background_pid and self.exec(["kill", "-0", str(background_pid)]).returncode == 0:
            left.append(f"its background job {background_pid}")
        return left

    # -- faults -----------------------------------------------------------
    def kill_unit(self, unit):
        out = self.user(["systemctl", "--user", "kill", "-s", "KILL", unit], text=True)
        if out.returncode != 0:
            raise ProcessLookupError(out.stderr.strip())

    def kill_worker(self, session, states, sig):
        self.kill_unit(f"eukhe@{session}.service")

    def kill_kernel(self, session, states):
        self.kill_unit(f"eukhe-kernel@{session}.service")

    def kill_supervisor(self, pid):
        self.kill_unit("eukhe.service")

    def stop_supervisor(self):
        out = self.user(["systemctl", "--user", "stop", "eukhe.service"], text=True)
        if out.returncode != 0:
            raise RuntimeError(f"systemctl --user stop eukhe.service: {out.stderr.strip()}")

    def state_path(self, *parts):
        return os.path.join(self.inside(STATE_INSIDE), *parts)

    def fill_disk(self):
        filler = f"{STATE_INSIDE}/filler"
        self.exec(["fallocate", "-l", f"{STATE_DISK_MB}m", filler])
        self.exec(["dd", "if=/dev/zero", f"of={filler}", "bs=1M", "oflag=append", "conv=notrunc"])
        return self.inside(filler)

    def upgrades_left(self):
        return len(self.debs) - self.installed

    def install_next(self):
        """Install the next package (`apt-get install` of a local .deb, as
        an upgrade would come); its version."""
        deb = self.debs[self.installed]
        inside = f"/var/cache/eukhe-soak/{os.path.basename(deb)}"
        os.makedirs(os.path.dirname(self.inside(inside)), exist_ok=True)
        shutil.copy(deb, self.inside(inside))
        self.root(f"DEBIAN_FRONTEND=noninteractive apt-get install -y -q {inside} >/dev/null")
        self.installed += 1
        return self.version()

    def probe_other_uid(self, session):
        """Root inside is the other uid that can reach the user's runtime
        directory (0700): neither socket may serve it."""
        paths = [f"/run/user/{UID}/eukhe/workers/{session}.sock",
                 f"/run/user/{UID}/eukhe/kernels/{session}.sock"]
        missing = [p for p in paths if not os.path.exists(self.inside(p))]
        out = self.exec(["python3", "-c", OTHER_UID_PROBE, *paths], text=True, timeout=30)
        return [f"no socket at {p} to probe" for p in missing] + out.stdout.splitlines()

    def close(self):
        self.power_off()
        remove_cgroup(self.cgroup)
        shutil.rmtree(self.dir, ignore_errors=True)


def remove_cgroup(cgroup):
    """Remove a cgroup and those below it, deepest first, once empty."""
    deadline = time.monotonic() + 5
    while os.path.exists(cgroup) and time.monotonic() < deadline:
        for dirpath, _, _ in sorted(os.walk(cgroup), key=lambda w: -w[0].count(os.sep)):
            try:
                os.rmdir(dirpath)
            except OSError:
                pass
        time.sleep(0.02)


def deb_versions(upgrades):
    """This checkout's version and the `upgrades` patch releases above it."""
    with open(os.path.join(ROOT, "Cargo.toml")) as f:
        version = next(line.split('"')[1] for line in f if line.startswith("version = "))
    major, minor, patch = (int(p) for p in version.split("."))
    return [f"{major}.{minor}.{patch + step}" for step in range(upgrades + 1)]


def debs_in(directory, versions):
    """The .deb of each of `versions` in `directory`, oldest first."""
    arch = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True,
                          check=True).stdout.strip()
    return [os.path.join(directory, f"eukhe_{v}_{arch}.deb") for v in versions]


def build_debs(versions, directory):
    """Make the .deb of this checkout as each of `versions` in `directory`:
    this checkout's own version built (packaging/build-packages
    --deb-only), the releases above it relabelled from it
    (packaging/relabel-deb: the same binary under that version and another
    build id)."""
    declared = deb_versions(0)[0]
    base = debs_in(directory, [declared])[0]
    if declared in versions or not os.path.exists(base):
        subprocess.run([os.path.join(ROOT, "packaging", "build-packages"), "--deb-only",
                        "--out", directory], check=True, stdout=subprocess.DEVNULL)
    for version in versions:
        if version == declared:
            continue
        subprocess.run([os.path.join(ROOT, "packaging", "relabel-deb"), base, version,
                        "--out", directory], check=True, stdout=subprocess.DEVNULL)
