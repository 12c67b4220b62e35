"""bench/run --compare OTHER_EUKHE: this tree's build against another eukhe
binary, each with its own private daemon, alternated round by round through
the spawner: session start and round trip as in benchmarks 1 and 2, and the
CPU one round trip costs all processes together (user and system time from
/proc/stat, over blocks of round trips), which the machine's noise moves far
less than the time a round trip takes. `kit` is bench/run's module (its
daemons, tmux, the subjects it times)."""

import os
import statistics

import spawner


def busy_ticks():
    """CPU time every process has used so far (user and system), in clock
    ticks."""
    with open("/proc/stat") as stat:
        fields = stat.readline().split()
    return int(fields[1]) + int(fields[2]) + int(fields[3])


def bench_compare(kit, report, other, rounds):
    """This tree's build against `other`: session start, round trip, and
    the CPU a round trip costs, alternated build by build."""
    builds = {"this tree": None, os.path.basename(other): other}
    kit.say(f"compare: session start, this tree against {other}")
    daemons = {name: kit.Eukhe(f"cmp-start-{i}", binary=b) for i, (name, b) in enumerate(builds.items())}
    tmux = kit.Tmux("cmp-start")
    try:
        for daemon in daemons.values():
            daemon("status")
        subjects = {f"eukhe new + bash, {name}": kit.start_command(d) for name, d in daemons.items()}
        subjects["tmux new-session"] = tmux.start_command("s")
        samples = spawner.alternate(subjects, rounds, 2, quiet=1.0)
        names = list(subjects)[:2]
        report.timing("1 session start", samples,
                      {names[0]: [names[1], "tmux new-session"], names[1]: ["tmux new-session"]})
    finally:
        for daemon in daemons.values():
            daemon.close()
        tmux.close()

    kit.say(f"compare: round trip, this tree against {other}")
    daemons = {name: kit.Eukhe(f"cmp-rtt-{i}", binary=b) for i, (name, b) in enumerate(builds.items())}
    try:
        sessions = {name: daemon("new").strip() for name, daemon in daemons.items()}
        subjects = {
            f"eukhe bash -- true, {name}": kit.round_trip_command(daemon, sessions[name])
            for name, daemon in daemons.items()
        }
        subjects[kit.SH_FLOOR] = spawner.Command(["sh", "-c", "true"])
        samples, cpu = spawner.alternate_with_cpu(subjects, rounds * 5, 3)
        names = list(subjects)[:2]
        report.timing("2 round trip", samples,
                      {names[0]: [names[1], kit.SH_FLOOR], names[1]: [kit.SH_FLOOR]})
        # The client's own CPU (wait4's), which a busy machine moves least.
        report.timing("2 client CPU", {name: cpu[name] for name in [*names, kit.SH_FLOOR]},
                      {names[0]: [names[1], kit.SH_FLOOR], names[1]: [kit.SH_FLOOR]})
        # Blocks of round trips, build after build: CPU per round trip.
        block, ticks = 50, {name: [] for name in daemons}
        tick_ms = 1000.0 / os.sysconf("SC_CLK_TCK")
        for _ in range(max(rounds // 3, 3)):
            for name, daemon in daemons.items():
                before = busy_ticks()
                for _ in range(block):
                    daemon("bash", sessions[name], "--", "true")
                ticks[name].append((busy_ticks() - before) * tick_ms / block)
        for name, values in ticks.items():
            report.value("2 CPU per round trip", f"eukhe bash -- true, {name}", "ms CPU",
                         statistics.median(values),
                         note=f"all processes, median of {len(values)} blocks of {block}")
    finally:
        for daemon in daemons.values():
            daemon.close()
