#!/usr/bin/env python3
"""Step 4 of a round trip taken apart: the job, from the kernel's receipt of
`eukhe bash s -- true` to its end word, in the job's bash and the kernel.

    bench/job_steps.py [--rounds N] [--eukhe BINARY ...]

Runs N round trips (one every 30 ms) in a warm session of a private daemon
per binary, under `perf record -a` of a few tracepoints, and prints each
part's median over the rounds, one column per binary:

  the kernel to the job's bash   the kernel's receipt of the job to the
                                 waiting bash's first byte of it (the spool
                                 file made, the FIFOs named, the job
                                 written to the template's FIFO, a wake-up)
  reading the job                that byte to the bash's word that it has
                                 taken it (the fields, a byte a read)
  its start                      output redirected, `started` said, the
                                 directory entered, traps and options
                                 applied, the syntax checked, the command
                                 run (`true`), up to its capture
  of which the syntax check      a subshell's fork to its reaping (0 when
                                 the check forks none)
  the capture and the exit       the state listed into its file, the
                                 output closed, the bash's exit
  the kernel to its end word     the job's bash's exit to the kernel's
                                 `ended` (the capture read and merged, the
                                 scratch files removed); less than 0 when
                                 the kernel saw the closed output first

Needs root (perf). Prints a Markdown table.
"""

import argparse
import json
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import spawner  # noqa: E402 - beside this file
from tracepoints import Daemon, need_root_and_perf, record  # noqa: E402 - beside this file

EVENTS = ",".join([
    "sched:sched_process_fork", "sched:sched_process_exit", "syscalls:sys_exit_recvfrom",
    "syscalls:sys_enter_sendto", "syscalls:sys_enter_write", "syscalls:sys_enter_openat",
    "syscalls:sys_exit_wait4", "syscalls:sys_exit_read",
])
PARTS = ["the kernel to the job's bash", "reading the job", "its start", "of which the syntax check",
         "the capture and the exit", "the kernel to its end word", "the whole job step"]
# O_WRONLY|O_CREAT|O_TRUNC: bash's `>` (the last one before its exit opens the capture).
CREATE = re.compile(r"flags: 0x0*241\b")


def events_of(script_text):
    """perf script lines -> (time ms, pid, comm, event, rest)."""
    events = []
    for line in script_text.splitlines():
        m = re.match(r"\s*(\S.*?)\s+(\d+)\s+([\d.]+):\s+(\S+):\s*(.*)", line)
        if m:
            events.append((float(m.group(3)) * 1000, int(m.group(2)), m.group(1), m.group(4), m.group(5)))
    return events


def parts_of_round(window, kernel):
    """One round's parts, from the events after the kernel's receipt."""
    t0 = window[0][0]
    woke = next((e for e in window if e[2] == "bash" and e[3] == "syscalls:sys_exit_read"), None)
    if not woke:
        return None
    shell = woke[1]
    mine = [e for e in window if e[1] == shell]
    taken = next((e for e in mine if e[3] == "syscalls:sys_enter_write" and e[0] > woke[0]), None)
    left = next((e for e in window if e[3] == "sched:sched_process_exit" and re.search(rf"\bpid={shell}\b", e[4])),
                None)
    if not taken or not left:
        return None
    fork = next((e for e in window if e[3] == "sched:sched_process_fork"
                 and re.search(rf"(?<![_\w])pid={shell}\b", e[4]) and taken[0] < e[0] < left[0]), None)
    reaped = next((e for e in mine if fork and e[3] == "syscalls:sys_exit_wait4" and e[0] > fork[0]), None)
    opens = [e for e in mine if e[3] == "syscalls:sys_enter_openat" and CREATE.search(e[4]) and e[0] < left[0]]
    end = next((e for e in window if e[1] == kernel and e[3] == "syscalls:sys_enter_sendto"
                and opens and e[0] > opens[-1][0]), None)
    if not opens or not end:
        return None
    capture = opens[-1][0]
    return [woke[0] - t0, taken[0] - woke[0], capture - taken[0],
            (reaped[0] - fork[0]) if (fork and reaped) else 0.0,
            left[0] - capture, end[0] - left[0], end[0] - t0]


def measure(binary, rounds):
    daemon = Daemon(binary)
    try:
        session = daemon("new").strip()
        for _ in range(5):
            daemon("bash", session, "--", "true")
        kernel = next(s for s in json.loads(daemon("ls", "--json")) if s["id"] == session)["kernel_pid"]
        loop = f'for i in $(seq {rounds}); do "$0" bash {session} -- true; sleep 0.03; done'
        _, text = record(["-e", EVENTS], ["sh", "-c", loop, binary], "comm,pid,time,event,trace", daemon.env)
    finally:
        daemon.close()
    events = events_of(text)
    found = []
    for i, e in enumerate(events):
        if e[1] == kernel and e[3] == "syscalls:sys_exit_recvfrom" and int(e[4].split("0x")[-1], 16) > 100:
            window = [w for w in events[i:i + 5000] if w[0] < e[0] + 50]
            parts = parts_of_round(window, kernel)
            if parts:
                found.append(parts)
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--eukhe", nargs="+", default=[os.path.join(spawner.ROOT, "target", "release", "eukhe")])
    args = parser.parse_args()
    need_root_and_perf("job_steps")
    columns = []
    for binary in args.eukhe:
        found = measure(os.path.abspath(binary), args.rounds)
        if not found:
            sys.exit(f"job_steps: no round of {binary} had every mark")
        print(f"job_steps: {binary}: {len(found)} of {args.rounds} rounds had every mark",
              file=sys.stderr, flush=True)
        columns.append([statistics.median(p[i] for p in found) for i in range(len(PARTS))])
    print("| part of step 4 | " + " | ".join(f"{os.path.basename(b)} ms" for b in args.eukhe) + " |")
    print("|---|" + "---:|" * len(args.eukhe))
    for i, name in enumerate(PARTS):
        print(f"| {name} | " + " | ".join(f"{c[i]:.3f}" for c in columns) + " |")


if __name__ == "__main__":
    main()
