#!/usr/bin/env python3
"""Where a session start goes: each step of `eukhe new` and of the new
session's first command, their cost and their floor.

    bench/start_steps.py [--rounds N] [--eukhe BINARY] [--quiet S]

Starts N sessions on a private daemon that keeps its spare session (the
default), each as benchmark 1 starts them (`eukhe new`, then `eukhe bash ID
-- echo hi`, a second of quiet before each), under `perf record -a` of a
few tracepoints (as bench/steps.py: exec, fork, exit, connect, recvmsg,
recvfrom, sendto, sendmsg, fsync, fdatasync; and rename, unlink and openat;
and the supervisor's own read and write). Each step is the time between two marks, the median
over the starts:

  N1 `new`: exec to connect        the client's start
  N2 hello and request             connect to the supervisor's first sync
                                   (the hello, the request, the claim's
                                   checks and its first file written)
  N3 the claim's syncs             first sync's start to the last one's end:
                                   the environment, the metadata, their
                                   directory (each listed below the table)
  N4 durable to the answer         the last sync's end to the supervisor's
                                   last write before the client reads it
  N5 the answer and exit           to the `new` client's exit
  gap                              the spawner reads the id, spawns `bash`
  B1..B7                           the first command, as bench/steps.py
                                   steps 1 to 7, on the claimed worker

Floors: bench/floors.c and the spawner as in bench/steps.py; for N3, a
small new file written, synced and renamed into place, then its directory
synced, in the state directory's file system (what one durable new name
costs: the least a durable `new` can do). Needs root (perf) and gcc.
Prints a Markdown table.
"""

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import spawner  # noqa: E402 - beside this file
import steps  # noqa: E402 - beside this file
from tracepoints import (  # noqa: E402 - beside this file
    ROUND_TRIP_EVENTS, SYNC_ENDS, SYNC_EVENTS, TABLE_HEAD, Daemon, load_average, ms,
    need_root_and_perf, parse, record_plan)

RENAMES = ("syscalls:sys_enter_rename", "syscalls:sys_enter_renameat", "syscalls:sys_enter_renameat2")
EVENTS = [
    *ROUND_TRIP_EVENTS, "syscalls:sys_enter_sendmsg", "syscalls:sys_enter_unlink",
    "syscalls:sys_enter_unlinkat", "syscalls:sys_enter_openat", "syscalls:sys_exit_connect", *RENAMES,
]
NEW_STEPS = [
    ("N1 `new`: exec to connect", "exec", "connect"),
    ("N2 hello, request, the claim up to its first sync", "connect", "claim_start"),
    ("N3 the claim's syncs and renames", "claim_start", "claim_end"),
    ("N4 durable to the answer written", "claim_end", "answer"),
    ("N5 the answer and the `new` client's exit", "answer", "exit"),
]
BASH_STEPS = [
    ("gap: the spawner reads the id and spawns `bash`", "new_exit", "exec"),
    ("B1 `bash`: exec to connect", "exec", "connect"),
    ("B2 to the claimed worker: connect to its read of the request", "connect", "worker_has"),
    ("B3 worker: request to the kernel", "worker_has", "kernel_has"),
    ("B4 job: to the kernel's end word", "kernel_has", "kernel_tells"),
    ("B5 worker: end word to the end's sync", "kernel_tells", "sync_start"),
    ("B6 the end's sync", "sync_start", "sync_end"),
    ("B7 the answer and the `bash` client's exit", "sync_end", "exit"),
]


def say(message):
    print(f"start_steps: {message}", file=sys.stderr, flush=True)


def trace_events(supervisor):
    """perf's -e list: EVENTS, and the supervisor's own read and write."""
    args = []
    for event in EVENTS:
        args += ["-e", event]
    for event in ("syscalls:sys_enter_write", "syscalls:sys_exit_read"):
        args += ["-e", event, "--filter", f"common_pid == {supervisor}"]
    return args


def starts_of(events, binary, supervisor, workers, kernels, handed=False):
    """Each start's marks: its `new` and its first command's."""
    starts, new, first, clients = [], None, None, set()
    for when, tgid, tid, event, rest in events:
        # Only the spawner's children are clients: a worker the daemon
        # starts (the next spare) runs the same binary.
        if event == "sched:sched_process_fork" and rest.startswith("comm=spawn "):
            clients.add(int(rest.split("child_pid=")[1].split()[0]))
            continue
        if (event == "sched:sched_process_exec" and f"filename={binary} " in rest + " "
                and tgid in clients):
            if new is None or "exit" in new and first is not None:
                new, first = {"exec": when, "pid": tgid, "syncs": []}, None
            elif "exit" in new and first is None:
                first = {"exec": when, "pid": tgid, "new_exit": new["exit"], "syncs": []}
            continue
        if new is not None and first is None:
            new_mark(new, when, tgid, tid, event, supervisor, rest)
        elif first is not None:
            if first_mark(first, (when, tgid, tid, event), workers, kernels, handed):
                starts.append((new, first))
                new, first = None, None
    return [(n, f) for n, f in starts if finish_new(n) and steps.finish(f)]


def new_mark(marks, when, tgid, tid, event, supervisor, rest):
    if tgid == marks["pid"] and event == "syscalls:sys_enter_connect":
        marks.setdefault("connect", when)
    elif tgid == marks["pid"] and event == "syscalls:sys_exit_recvfrom" and not rest.startswith("0xffff"):
        marks.setdefault("reads", []).append(when)
    elif tgid == supervisor and "connect" in marks and "exit" not in marks:
        if event in SYNC_EVENTS:
            marks["syncs"].append([when, None, event.split("_")[-1]])
        elif event in SYNC_ENDS:
            for sync in marks["syncs"]:
                if sync[1] is None:
                    sync[1] = when
        elif event in RENAMES:
            marks["syncs"].append([when, when, "rename"])
        elif event in ("syscalls:sys_enter_write", "syscalls:sys_enter_sendto", "syscalls:sys_enter_sendmsg"):
            marks.setdefault("writes", []).append(when)
    elif tgid == marks["pid"] and tid == tgid and event == "sched:sched_process_exit":
        marks["exit"] = when


def first_mark(marks, seen, workers, kernels, handed):
    """Marks of the first command (bench/steps.py's), on any session's
    worker and kernel; true at its client's exit."""
    when, tgid, tid, event = seen
    if tgid == marks["pid"] and event == "syscalls:sys_enter_connect":
        marks.setdefault("connect", when)
    elif tgid in workers and event == steps.worker_mark(handed) and "connect" in marks:
        marks.setdefault("worker_has", when)
        marks.setdefault("worker", tgid)
    elif tgid in kernels and event == "syscalls:sys_exit_recvfrom" and "worker_has" in marks:
        marks.setdefault("kernel_has", when)
        marks.setdefault("kernel", tgid)
    elif tgid == marks.get("kernel") and event == "syscalls:sys_enter_sendto" and "kernel_has" in marks:
        marks.setdefault("kernel_sends", []).append(when)
    elif tgid == marks.get("worker") and event in SYNC_EVENTS:
        marks["syncs"].append([when, None, event.split("_")[-1]])
    elif tgid == marks.get("worker") and event in SYNC_ENDS:
        for sync in marks["syncs"]:
            if sync[1] is None:
                sync[1] = when
    elif tgid == marks["pid"] and tid == tgid and event == "sched:sched_process_exit":
        marks["exit"] = when
        return True
    return False


def finish_new(marks):
    """The claim: the supervisor's syncs and renames from the client's
    connect to the client's read of the answer (its first read after the
    supervisor's first sync); the answer written: the supervisor's last
    write before that read."""
    if "exit" not in marks or not marks["syncs"]:
        return False
    first_sync = marks["syncs"][0][0]
    reads = [t for t in marks.get("reads", []) if t > first_sync]
    if not reads:
        return False
    marks["syncs"] = [s for s in marks["syncs"] if s[0] < reads[0] and s[1] is not None]
    if not marks["syncs"]:
        return False
    marks["claim_start"] = marks["syncs"][0][0]
    marks["claim_end"] = max(s[1] for s in marks["syncs"])
    writes = [t for t in marks.get("writes", []) if marks["claim_end"] <= t < reads[0]]
    marks["answer"] = writes[-1] if writes else reads[0]
    return True


def durable_name_floor(state_dir, rounds=200):
    """A small new file written, synced, renamed into place, its directory
    synced: median seconds of the whole and of each sync."""
    os.makedirs(state_dir, exist_ok=True)
    whole, file_syncs, dir_syncs = [], [], []
    target, tmp = os.path.join(state_dir, "floor.json"), os.path.join(state_dir, "floor.tmp")
    for i in range(rounds):
        begin = time.perf_counter()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.write(fd, b'{"floor": %d}\n' % i * 8)
        synced = time.perf_counter()
        os.fsync(fd)
        file_syncs.append(time.perf_counter() - synced)
        os.close(fd)
        os.rename(tmp, target)
        directory = os.open(state_dir, os.O_RDONLY | os.O_DIRECTORY)
        synced = time.perf_counter()
        os.fsync(directory)
        dir_syncs.append(time.perf_counter() - synced)
        os.close(directory)
        whole.append(time.perf_counter() - begin)
    os.unlink(target)
    return {"durable_name": statistics.median(whole), "new_file_fsync": statistics.median(file_syncs),
            "dir_fsync": statistics.median(dir_syncs)}


def table(starts, floor, walls, handed=False):
    med = lambda marks, a, b: statistics.median(m[b] - m[a] for m in marks)
    news, firsts = [n for n, _ in starts], [f for _, f in starts]
    hello = floor["static hello"] - floor[spawner.NOTHING_NAME]
    rt = floor["socket_round_trip"]
    floors = {
        "N1": (hello, "a static C hello's exec and glibc start, as bench/steps.py's step 1"),
        "N2": (2 * rt, "two Unix socket round trips (hello, request)"),
        "N3": (floor["durable_name"], "one small new file synced and renamed, its directory synced "
               f"(file {ms(floor['new_file_fsync'])}, directory {ms(floor['dir_fsync'])} ms)"),
        "N4": (0.0, "nothing: the answer can go once the session is durable"),
        "N5": (rt / 2 + floor[spawner.NOTHING_NAME] / 2, "one message and a process's exit"),
        "gap": (floor[spawner.NOTHING_NAME], "the spawner's own cost (`nothing`)"),
    }
    floors.update({f"B{step}": value for step, value in steps.round_trip_floors(floor, handed).items()})
    lines = list(TABLE_HEAD)
    total, total_floor = 0.0, 0.0
    for marks, rows in ((news, NEW_STEPS), (firsts, BASH_STEPS)):
        for name, a, b in rows:
            value = med(marks, a, b)
            f, what = floors[name.split()[0].rstrip(":")]
            total, total_floor = total + value, total_floor + f
            lines.append(f"| {name} | {ms(value)} | {ms(f)} | {what} |")
    lines.append(f"| the steps' medians added | {ms(total)} | {ms(total_floor)} | the steps' floors added |")
    whole = statistics.median(f["exit"] - n["exec"] for n, f in starts)
    lines.append(f"| `new` exec to `bash` exit (traced), median | {ms(whole)} | | |")
    lines.append(f"| the spawner's wall time (traced) | {ms(statistics.median(walls))} | | |")
    kinds = [" ".join(s[2] for s in n["syncs"]) for n in news]
    usual = statistics.mode(kinds)
    each = []
    for i in range(len(usual.split())):
        durations = [n["syncs"][i][1] - n["syncs"][i][0] for n, kind in zip(news, kinds) if kind == usual]
        each.append(f"{ms(statistics.median(durations))}")
    lines.append("")
    lines.append(f"The claim's calls in order, most often ({kinds.count(usual)} of {len(kinds)}): {usual}; each one's median ms: "
                 f"{', '.join(each)} (a rename's is 0: only its start is traced).")
    others = [s for f in firsts for s in f["other_syncs"]]
    if others:
        lines.append(f"The claimed worker's other syncs during the first command: {len(others) / len(firsts):.1f} "
                     f"a start, {ms(statistics.median(d for _, d in others))} ms each.")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--quiet", type=float, default=1.0, help="seconds of quiet before each start")
    parser.add_argument("--eukhe", default=os.path.join(spawner.ROOT, "target", "release", "eukhe"))
    parser.add_argument("--handed", action="store_true",
                        help="a build before the direct route: B2 ends at the handed socket's recvmsg")
    args = parser.parse_args()
    binary = os.path.abspath(args.eukhe)
    need_root_and_perf("start_steps")
    daemon = Daemon(binary)
    try:
        warm = daemon("new").strip()
        daemon("bash", warm, "--", "true")
        supervisor = json.loads(daemon("status", "--json"))["pid"]
        say(f"supervisor {supervisor}; {args.rounds} traced session starts")
        spawner.build()
        command = spawner.Command([binary, "new"], [binary, "bash", "%o", "--", "echo hi"],
                                  env=daemon.env, read_output=[0])
        plan = spawner.plan_text({"start": command}, args.rounds, 0, args.quiet)
        walls, script = record_plan(trace_events(supervisor), spawner.SPAWN, plan)
        listed = json.loads(daemon("ls", "--json"))
        workers = {s["pid"] for s in listed if s.get("pid")}
        kernels = {s["kernel_pid"] for s in listed if s.get("kernel_pid")}
        starts = starts_of(parse(script), binary, supervisor, workers, kernels, args.handed)
        if not starts:
            sys.exit("start_steps: no session start had every mark")
        say(f"{len(starts)} of {args.rounds} starts had every mark; measuring the floors")
        state = daemon.env["EUKHE_STATE_DIR"]
        floor = steps.floors(state, binary, daemon.env)
        floor.update(durable_name_floor(os.path.join(state, "floor")))
    finally:
        daemon.close()
    print(f"`bench/start_steps.py --rounds {args.rounds}`: {len(starts)} session starts, "
          f"load average {load_average()}\n")
    print(table(starts, floor, walls, args.handed))


if __name__ == "__main__":
    main()
