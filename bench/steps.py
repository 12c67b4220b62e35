#!/usr/bin/env python3
"""Where a round trip goes: each step of `eukhe bash s -- true`, its cost and
its floor (the same step alone on this machine).

    bench/steps.py [--rounds N] [--eukhe BINARY] [--handed]

Runs N round trips on a warm session of a private daemon, one every 30 ms
(so none overlaps the last one's background work), under `perf record -a`
of a few tracepoints only (process exec, fork and exit; connect, recvmsg,
recvfrom, sendto, fdatasync and fsync), which costs a round trip a few
microseconds, not the milliseconds `strace` or `perf trace` would. Each
step is the time between two marks, the median over the rounds:

  1 client: exec to connect        the client's exec, dynamic loading and
                                   relocation, its runtime, the parse
  2 to the worker: connect to it   the client's hello and request on the
                                   worker's own socket (the direct route; with
                                   --handed, for an earlier build: the
                                   supervisor's answer, the socket handed to
                                   the worker by SCM_RIGHTS)
  3 worker: to the kernel          the worker reads the request, stores the
                                   input (and the run's start), asks the kernel
  4 job: kernel to its end word    the waiting job shell reads the job,
                                   runs it, writes its capture; the kernel
                                   sees the end and tells the worker
  5 worker: to the end's sync      the worker reads the end, appends it
  6 the end's sync                 fdatasync of the transcript
  7 answer and client exit         the answer, the client's teardown

Floors come from bench/floors.c (Unix socket round trip, descriptor pass,
fdatasync of 4 KiB in the state directory's file system, fork) and from the
spawner (a process that does nothing, a static C program with glibc's start,
`sh -c true`, `bash -c true`, `eukhe --version`). Needs root (perf) and gcc.
Prints a Markdown table.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import spawner  # noqa: E402 - beside this file
from tracepoints import (  # noqa: E402 - beside this file
    ROUND_TRIP_EVENTS, SYNC_ENDS, SYNC_EVENTS, TABLE_HEAD, Daemon, load_average, ms,
    need_root_and_perf, parse, record_plan)

EVENTS = ROUND_TRIP_EVENTS
STEPS = [
    ("1 client: exec to connect", "exec", "connect"),
    ("2 to the worker: connect to the worker reading the request", "connect", "worker_has"),
    ("3 worker: request to the kernel holding the job", "worker_has", "kernel_has"),
    ("4 job: the job shell and the kernel, to its end word", "kernel_has", "kernel_tells"),
    ("5 worker: the end word to the end's sync", "kernel_tells", "sync_start"),
    ("6 the end's fdatasync", "sync_start", "sync_end"),
    ("7 the answer and the client's exit", "sync_end", "exit"),
]
HELLO_C = '#include <stdio.h>\nint main(void) { puts("hello"); return 0; }\n'


def say(message):
    print(f"steps: {message}", file=sys.stderr, flush=True)


def worker_mark(handed):
    """The worker's event that ends step 2: a client reaches a running
    session's worker on its own socket (the direct route), so the worker's
    first read after the connect (its hello and request); `handed`, for a
    build before that route: the recvmsg of the socket the supervisor hands
    over."""
    return "syscalls:sys_exit_recvmsg" if handed else "syscalls:sys_exit_recvfrom"


def marks_of_rounds(events, binary, worker, kernel, handed=False):
    """Each round's marks, from the client's exec to its exit (step 2's
    end: `worker_mark`)."""
    worker_has = worker_mark(handed)
    rounds, open_ = [], {}
    for when, tgid, tid, event, rest in events:
        if event == "sched:sched_process_exec" and f'filename={binary} ' in rest + " ":
            open_[tgid] = {"exec": when, "syncs": []}
            continue
        for client, marks in list(open_.items()):
            if tgid == client and event == "syscalls:sys_enter_connect" and "connect" not in marks:
                marks["connect"] = when
            elif (tgid == worker and event == worker_has and "connect" in marks
                  and "worker_has" not in marks):
                marks["worker_has"] = when
            elif (tgid == kernel and event == "syscalls:sys_exit_recvfrom" and "worker_has" in marks
                  and "kernel_has" not in marks):
                marks["kernel_has"] = when
            elif tgid == kernel and event == "syscalls:sys_enter_sendto" and "kernel_has" in marks:
                marks.setdefault("kernel_sends", []).append(when)
            elif tgid == worker and event in SYNC_EVENTS:
                marks["syncs"].append([when, None, event.split("_")[-1]])
            elif tgid == worker and event in SYNC_ENDS:
                for sync in marks["syncs"]:
                    if sync[1] is None:
                        sync[1] = when
            elif tgid == client and event == "sched:sched_process_exit" and tid == client:
                marks["exit"] = when
                rounds.append(marks)
                del open_[client]
    return [m for m in map(finish, rounds) if m]


def finish(marks):
    """The end's sync is the worker's last before the client's exit; the
    kernel's end word its last send before that sync."""
    syncs = [s for s in marks["syncs"] if s[1] is not None and s[0] > marks.get("kernel_has", 1e18)]
    if not syncs or "kernel_has" not in marks:
        return None
    marks["sync_start"], marks["sync_end"] = syncs[-1][0], syncs[-1][1]
    sends = [t for t in marks.get("kernel_sends", []) if t < marks["sync_start"]]
    if not sends:
        return None
    marks["kernel_tells"] = sends[-1]
    marks["other_syncs"] = [(step_of(marks, s[0]), s[1] - s[0]) for s in marks["syncs"]
                            if s[1] is not None and s[0] != marks["sync_start"]]
    return marks


def step_of(marks, when):
    """The number of the step a moment falls in (0: before the client's exec)."""
    step = 0
    for i, (_, start, _) in enumerate(STEPS, 1):
        if marks.get(start, 1e18) <= when:
            step = i
    return step


def floors(state_dir, binary, env):
    """Each step's floor on this machine, in seconds."""
    build = spawner.BUILD
    spawner.build()
    here = os.path.dirname(os.path.abspath(__file__))
    floors_bin, hello = os.path.join(build, "floors"), os.path.join(build, "hello-static")
    subprocess.run(["gcc", "-O2", "-o", floors_bin, os.path.join(here, "floors.c")], check=True)
    with tempfile.NamedTemporaryFile("w", suffix=".c") as source:
        source.write(HELLO_C)
        source.flush()
        subprocess.run(["gcc", "-O2", "-static", "-o", hello, source.name], check=True)
    out = subprocess.run([floors_bin, state_dir, "2000"], check=True, capture_output=True, text=True).stdout
    found = {name: int(ns) / 1e9 for name, ns in (line.split() for line in out.splitlines())}
    samples = spawner.alternate({
        "static hello": spawner.Command([hello]),
        "sh -c true": spawner.Command(["sh", "-c", "true"]),
        "bash -c true": spawner.Command(["bash", "-c", "true"], env=env),
        "eukhe --version": spawner.Command([binary, "--version"], env=env),
        "bash: 100 subshells": spawner.Command(["bash", "-c", "for i in {1..100}; do (:); done"], env=env),
    }, 30, 3)
    found.update({name: statistics.median(values) for name, values in samples.items()})
    found["bash subshell"] = found.pop("bash: 100 subshells") / 100
    return found


def round_trip_floors(floor, handed=False):
    """Each round trip step's floor (by its number) and what it is."""
    reach = ((2 * floor["socket_round_trip"] + floor["fd_pass"],
              "two Unix socket round trips (hello, request) and a descriptor passed") if handed
             else (floor["socket_round_trip"] / 2, "one message (the hello and the request in one write)"))
    return {
        "1": (floor["static hello"] - floor[spawner.NOTHING_NAME],
              "a static C hello's exec and glibc start (spawned, less the spawner's `nothing`); "
              f"`eukhe --version` whole {ms(floor['eukhe --version'])} ms, `sh -c true` "
              f"{ms(floor['sh -c true'])} ms"),
        "2": reach,
        "3": (floor["socket_round_trip"] / 2, "half a Unix socket round trip (one message)"),
        "4": (floor["bash subshell"] + floor["socket_round_trip"],
              "a warm bash's subshell forked and reaped, and a socket round trip"),
        "5": (floor["socket_round_trip"] / 2, "one message"),
        "6": (floor["fdatasync_4k"], "fdatasync of a 4 KiB append on the state directory's file system"),
        "7": (floor["socket_round_trip"] / 2 + floor[spawner.NOTHING_NAME] / 2,
              "one message and a process's exit (about half the spawner's `nothing`)"),
    }


def table(rounds, floor, walls, handed=False):
    med = lambda key_from, key_to: statistics.median(m[key_to] - m[key_from] for m in rounds)
    step_floors = round_trip_floors(floor, handed)
    lines = list(TABLE_HEAD)
    total_floor = 0.0
    for name, a, b in STEPS:
        f, what = step_floors[name.split()[0]]
        total_floor += f
        lines.append(f"| {name} | {ms(med(a, b))} | {ms(f)} | {what} |")
    steps_sum = sum(med(a, b) for _, a, b in STEPS)
    lines.append(f"| the steps' medians added | {ms(steps_sum)} | {ms(total_floor)} | the steps' floors added |")
    total = statistics.median(m["exit"] - m["exec"] for m in rounds)
    lines.append(f"| exec to exit (traced), median | {ms(total)} | | |")
    lines.append(f"| the spawner's wall time (traced) | {ms(statistics.median(walls))} | "
                 f"{ms(floor['sh -c true'])} | `sh -c true` spawned the same way |")
    others = [s for m in rounds for s in m["other_syncs"]]
    per_round = len(others) / len(rounds)
    if others:
        where = statistics.multimode(step for step, _ in others)
        lines.append(f"| other syncs in the worker (each) | {ms(statistics.median(d for _, d in others))} | "
                     f"{ms(floor['fdatasync_4k'])} | {per_round:.1f} a round trip, most often begun in step "
                     f"{', '.join(map(str, where))}: a group commit on its own thread |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--eukhe", default=os.path.join(spawner.ROOT, "target", "release", "eukhe"))
    parser.add_argument("--handed", action="store_true",
                        help="a build before the direct route: step 2 ends at the handed socket's recvmsg")
    args = parser.parse_args()
    binary = os.path.abspath(args.eukhe)
    need_root_and_perf("steps")
    daemon = Daemon(binary)
    try:
        session = daemon("new").strip()
        for _ in range(5):
            daemon("bash", session, "--", "true")
        supervisor = json.loads(daemon("status", "--json"))["pid"]
        listed = next(s for s in json.loads(daemon("ls", "--json")) if s["id"] == session)
        worker, kernel = listed["pid"], listed["kernel_pid"]
        say(f"supervisor {supervisor}, worker {worker}, kernel {kernel}; {args.rounds} traced round trips")
        spawner.build()
        plan = spawner.plan_text({"rt": spawner.Command([binary, "bash", session, "--", "true"], env=daemon.env)},
                                 args.rounds, 0, 0.03)
        walls, script = record_plan(["-e", ",".join(EVENTS)], spawner.SPAWN, plan)
        rounds = marks_of_rounds(parse(script), binary, worker, kernel, args.handed)
        if not rounds:
            sys.exit("steps: no round trip had every mark (see the tracepoints above)")
        say(f"{len(rounds)} of {args.rounds} round trips had every mark; measuring the floors")
        floor = floors(daemon.env["EUKHE_STATE_DIR"], binary, daemon.env)
    finally:
        daemon.close()
    print(f"`bench/steps.py --rounds {args.rounds}`: {len(rounds)} round trips, load average {load_average()}\n")
    print(table(rounds, floor, walls, args.handed))


if __name__ == "__main__":
    main()
