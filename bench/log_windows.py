"""bench/run's benchmark 11: windows of a large stored output (issue 54).

One run writes SIZE bytes of text (and a last line of its own) once; then
`eukhe log S --raw N --tail 20` and `--grep` are timed against `tail -n
20` and `grep` of the same bytes in a file. bench/run passes in its
helpers (`kit`: Eukhe, alternate).
"""

import os
import subprocess

# The last line, which only the grep's pattern matches.
NEEDLE = "the-needle-at-the-end"


def bench_windows(kit, report, size, rounds):
    mib = size // (1024 * 1024)
    kit.say(f"11. output windows of a {mib} MiB output: tail and grep, against tail and grep of a file")
    eukhe = kit.Eukhe("windows")
    producer = f"yes {kit.TEXT_LINE} | head -c {size}; echo {NEEDLE}"
    try:
        session = eukhe("new").strip()
        path = os.path.join(eukhe.dir, "output.txt")
        with open(os.devnull, "w") as null:
            eukhe("send", "--wait", session, producer, stdout=null)
        subprocess.run(["sh", "-c", f"({producer}) > {path}"], check=True)

        def quiet(argv):
            return lambda: subprocess.run(argv, env=eukhe.env, check=True,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        log = [eukhe.binary, "log", session, "--raw", "1"]
        subjects = {
            "eukhe log --raw 1 --tail 20": quiet(log + ["--tail", "20"]),
            "tail -n 20 (a file)": quiet(["tail", "-n", "20", path]),
        }
        samples = kit.alternate(subjects, rounds, 2)
        report.timing(f"11 output windows, {mib} MiB", samples,
                      {"eukhe log --raw 1 --tail 20": ["tail -n 20 (a file)"]})
        subjects = {
            "eukhe log --raw 1 --grep (the last line)": quiet(log + ["--grep", NEEDLE]),
            "grep -n (a file)": quiet(["grep", "-n", NEEDLE, path]),
            "eukhe log --raw 1 --grep -m 1 (the first line)": quiet(log + ["--grep", "^abc", "-m", "1"]),
        }
        samples = kit.alternate(subjects, max(3, rounds // 4), 1)
        report.timing(f"11 output windows, {mib} MiB", samples,
                      {"eukhe log --raw 1 --grep (the last line)": ["grep -n (a file)"]})
    finally:
        eukhe.close()
