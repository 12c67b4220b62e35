"""The one spawner bench/run times every process subject with (bench/spawn.c),
and the statistics that judge a subject against its peers round by round.

A subject is a list of commands run one after another (`eukhe new`, then
`eukhe bash ID -- echo hi`), each started by `posix_spawn` and reaped by
`wait4` in a small C program, so every subject, eukhe's and its peers',
pays the same harness, and that harness is timed too: `nothing`, a static
program with no libc that exits at once, runs in every alternation.

A ratio is judged per round (this round's eukhe over this round's floor,
both timed back to back) and then the median of those ratios is taken:
what moves the whole machine for a while (another build, the hour) moves
both sides of one round, and falls out of the ratio.
"""

import os
import shutil
import statistics
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BUILD = os.path.join(ROOT, "target", "bench-spawn")
SPAWN = os.path.join(BUILD, "spawn")
NOTHING = os.path.join(BUILD, "nothing")
NOTHING_NAME = "nothing (the harness's own cost)"


def build():
    """Compile the spawner and the `nothing` program into target/ when
    their sources are newer than them."""
    os.makedirs(BUILD, exist_ok=True)
    for source, binary, flags in (
        ("spawn.c", SPAWN, ["-O2"]),
        ("nothing.c", NOTHING, ["-O2", "-static", "-nostdlib"]),
    ):
        path = os.path.join(HERE, source)
        if not os.path.exists(binary) or os.path.getmtime(binary) < os.path.getmtime(path):
            subprocess.run(["gcc", *flags, "-o", binary, path], check=True)


class Command:
    """One subject: `steps` (argv lists) run in turn under `env`. In an
    argument `%n` is the round's number; a step whose `read_output` is
    true gives its first output line to the next steps as `%o`."""

    def __init__(self, *steps, env=None, read_output=(), quiet=True):
        self.steps = [[resolve(step[0]), *step[1:]] for step in steps]
        self.env = dict(os.environ if env is None else env)
        self.read_output = set(read_output)
        self.quiet = quiet


def resolve(program):
    found = program if os.sep in program else shutil.which(program)
    if not found:
        raise RuntimeError(f"{program} is not on PATH")
    return found


def plan_text(subjects, rounds, warmup, quiet):
    lines = [f"rounds {rounds}", f"warmup {warmup}", f"quiet {int(quiet * 1000)}"]
    for name, command in subjects.items():
        lines += [f"subject {name}", "cleanenv"] + ([] if command.quiet else ["noquiet"])
        lines += [f"env {k}={v}" for k, v in command.env.items()
                  if "\n" not in k + v and "\t" not in k + v]
        for i, step in enumerate(command.steps):
            keyword = "runout" if i in command.read_output else "run"
            if any("\t" in arg or "\n" in arg for arg in step):
                raise ValueError(f"an argument with a tab or newline: {step}")
            lines.append(keyword + " " + "\t".join(step))
    return "\n".join(lines) + "\n"


def alternate(subjects, rounds, warmup, quiet=0.0, with_nothing=True):
    """alternate_with_cpu's wall times alone."""
    return alternate_with_cpu(subjects, rounds, warmup, quiet, with_nothing)[0]


def alternate_with_cpu(subjects, rounds, warmup, quiet=0.0, with_nothing=True):
    """Time each subject (a name -> Command) `rounds` times, A B A B, after
    `warmup` rounds, with `quiet` seconds of nothing before each. Returns
    name -> durations in seconds, index i of each list from round i, and
    name -> the CPU its own processes used (seconds, from wait4: a client's,
    not the daemon's it asks), round by round the same.
    `nothing` is timed too (first in each round, with no quiet before it)
    unless `with_nothing` is false."""
    build()
    if with_nothing:
        subjects = {NOTHING_NAME: Command([NOTHING], quiet=False), **subjects}
    with tempfile.NamedTemporaryFile("w", prefix="eukhe-bench-plan-", suffix=".txt") as plan:
        plan.write(plan_text(subjects, rounds, warmup, quiet))
        plan.flush()
        out = subprocess.run([SPAWN, plan.name], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"the spawner failed: {out.stderr.strip()}")
    samples = {name: [None] * rounds for name in subjects}
    cpu = {name: [None] * rounds for name in subjects}
    for line in out.stdout.splitlines():
        round_, nanoseconds, cpu_nanoseconds, name = line.split(" ", 3)
        samples[name][int(round_)] = int(nanoseconds) / 1e9
        cpu[name][int(round_)] = int(cpu_nanoseconds) / 1e9
    return samples, cpu


def paired_ratios(values, peer_values):
    """This subject's time over its peer's, round by round."""
    return [a / b for a, b in zip(values, peer_values) if b > 0]


def quartiles(values):
    """The 25th and 75th percentiles (the middle half's bounds)."""
    if len(values) < 2:
        return values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[2]


def spread_note(values):
    """How much a floor moved within its run: its middle half, relative to
    its median."""
    low, high = quartiles(values)
    median = statistics.median(values)
    return f"middle half {low * 1000:.2f} to {high * 1000:.2f} ms (±{(high - low) / 2 / median * 100:.0f}%)"
