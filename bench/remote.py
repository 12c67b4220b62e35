"""bench/run's benchmark 12: a command's round trip on another machine
(issue 55), `eukhe --host localhost bash s -- true` against `ssh localhost
true`, both through a private sshd on loopback (as the tests start one:
throwaway keys, its own config) and both with SSH connection sharing on
(ControlMaster auto, ControlPersist), as a user would configure it. The
remote side is a private eukhe of bench/run's (`kit`: Eukhe, alternate).

Run alone: `bench/remote.py [--rounds N] [--binary PATH]` prints the
medians (PATH: any eukhe build; bench/run uses the release build).
"""

import os
import shutil
import socket
import subprocess
import sys
import time

SSHD = "/usr/sbin/sshd"
# A root sshd chroots into this directory, which only a booted machine
# has made (the package's tmpfiles); elsewhere it is made in a private
# mount namespace, never on the machine.
PRIVSEP_DIR = "/run/sshd"


class Sshd:
    """A private sshd on 127.0.0.1 whose logins reach `eukhe`'s installation."""

    def __init__(self, eukhe):
        if not os.path.exists(SSHD):
            raise RuntimeError(f"{SSHD} is missing: install openssh-server (scripts/setup does)")
        self.dir = os.path.join(eukhe.dir, "sshd")
        for sub in ("home", "bin"):
            os.makedirs(os.path.join(self.dir, sub))
        os.symlink(os.path.abspath(eukhe.binary), os.path.join(self.dir, "bin", "eukhe"))
        for key in ("host_key", "client_key"):
            subprocess.run(["ssh-keygen", "-q", "-N", "", "-t", "ed25519", "-f",
                            os.path.join(self.dir, key)], check=True)
        shutil.copy(os.path.join(self.dir, "client_key.pub"), os.path.join(self.dir, "authorized_keys"))
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        remote_env = [f"PATH={self.dir}/bin:/usr/bin:/bin", f"HOME={self.dir}/home"]
        remote_env += [f"{name}={eukhe.env[name]}" for name in ("EUKHE_SOCKET", "EUKHE_STATE_DIR")]
        self.write("sshd_config", f"""ListenAddress 127.0.0.1
Port {self.port}
HostKey {self.dir}/host_key
AuthorizedKeysFile {self.dir}/authorized_keys
StrictModes no
PidFile none
UsePAM no
PermitRootLogin prohibit-password
PasswordAuthentication no
SetEnv {" ".join(remote_env)}
""")
        self.write("ssh_config", f"""Host *
  HostName 127.0.0.1
  Port {self.port}
  IdentityFile {self.dir}/client_key
  IdentitiesOnly yes
  UserKnownHostsFile {self.dir}/known_hosts
  StrictHostKeyChecking no
  BatchMode yes
  LogLevel ERROR
  ControlMaster auto
  ControlPath {self.dir}/cm-%C
  ControlPersist 120
""")
        command = [SSHD, "-D", "-e", "-f", os.path.join(self.dir, "sshd_config")]
        if os.geteuid() == 0 and not os.path.isdir(PRIVSEP_DIR):
            command = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                       f"mount -t tmpfs none /run && mkdir -m 0755 {PRIVSEP_DIR} && exec "
                       + " ".join(command)]
        self.log = open(os.path.join(self.dir, "sshd.log"), "w")
        self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("sshd did not listen: " + open(self.log.name).read()[-300:])
                time.sleep(0.02)
        self.ssh = ["ssh", "-F", os.path.join(self.dir, "ssh_config")]

    def write(self, name, text):
        with open(os.path.join(self.dir, name), "w") as f:
            f.write(text)

    def close(self):
        # The shared connection's master first, then sshd, each by its own
        # handle (never by name).
        subprocess.run(self.ssh + ["-O", "exit", "localhost"], capture_output=True)
        self.process.terminate()
        self.process.wait()
        self.log.close()


def bench_remote(kit, report, rounds):
    kit.say("12. remote round trip: eukhe --host localhost bash s -- true against ssh localhost true,"
            " each over a shared SSH connection")
    eukhe = kit.Eukhe("remote")
    sshd = None
    try:
        sshd = Sshd(eukhe)
        env = dict(eukhe.env, EUKHE_SSH=" ".join(sshd.ssh))
        subprocess.run([eukhe.binary, "--host", "localhost", "new", "--name", "s"], env=env,
                       check=True, capture_output=True)
        # That first command started the host's forward: the commands timed
        # go through it, as a user's after their first.
        forwards = os.path.join(os.path.dirname(eukhe.env["EUKHE_SOCKET"]), "forward")
        wait_forward(forwards)

        def quiet(argv):
            return lambda: subprocess.run(argv, env=env, check=True, stdin=subprocess.DEVNULL,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        eukhe_name = "eukhe --host localhost bash s -- true"
        subjects = {
            eukhe_name: quiet([eukhe.binary, "--host", "localhost", "bash", "s", "--", "true"]),
            "ssh localhost true": quiet(sshd.ssh + ["localhost", "true"]),
        }
        samples = kit.alternate(subjects, rounds, 3)
        report.timing("12 remote round trip", samples, {eukhe_name: ["ssh localhost true"]})
    finally:
        if sshd is not None:
            stop_forwards(os.path.join(os.path.dirname(eukhe.env["EUKHE_SOCKET"]), "forward"))
            sshd.close()
        eukhe.close()


def wait_forward(forwards, within=10.0):
    """Wait until a forward's socket listens in `forwards`."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        names = os.listdir(forwards) if os.path.isdir(forwards) else []
        if any(n.endswith(".sock") and not n.endswith(".ssh.sock") for n in names):
            return
        time.sleep(0.02)
    raise RuntimeError(f"no forward listened in {forwards} within {within} s")


def stop_forwards(forwards):
    """End the forwards' keepers by their pids (each lock file holds its own)."""
    if not os.path.isdir(forwards):
        return
    for name in os.listdir(forwards):
        if name.endswith(".lock"):
            try:
                os.kill(int(open(os.path.join(forwards, name)).read().strip()), 15)
            except (OSError, ValueError):
                pass


def main():
    import argparse
    import statistics
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    parser = argparse.ArgumentParser(description="benchmark 12 alone")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--binary", help="the eukhe to measure (default: the release build)")
    args = parser.parse_args()
    import importlib.machinery
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "run")
    loader = importlib.machinery.SourceFileLoader("bench_run", path)
    spec = importlib.util.spec_from_loader("bench_run", loader)
    kit = importlib.util.module_from_spec(spec)
    loader.exec_module(kit)
    if args.binary:
        kit.EUKHE = os.path.abspath(args.binary)

    class Report:
        def timing(self, name, samples, peers):
            print(name)
            for subject, times in samples.items():
                print(f"  {subject:<45} median {statistics.median(times) * 1000:7.1f} ms"
                      f"  min {min(times) * 1000:7.1f}  max {max(times) * 1000:7.1f}")
            for subject, others in peers.items():
                for other in others:
                    ratio = statistics.median(samples[subject]) / statistics.median(samples[other])
                    print(f"  {subject} / {other}: {ratio:.2f}x")

    bench_remote(kit, Report(), args.rounds)


if __name__ == "__main__":
    main()
