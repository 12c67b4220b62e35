//! Output and the transcript through the real binary: bytes arrive exactly
//! as commands wrote them, a damaged transcript keeps every entry after the
//! damage, and a transcript of the first format still opens.

// Shared with the other suites; this one uses part of it.
#[allow(dead_code)]
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::support::process::Signal;
use crate::support::small_disk::{self, fill, SmallDisk};
use crate::support::wire::frame;
use crate::support::{kill9, signal, wait_for, wait_until, Env};
use base64::Engine;

/// Bytes that are not UTF-8 anywhere: every value, in a scrambled order.
fn random_bytes(len: usize) -> Vec<u8> {
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect()
}

fn transcript_path(env: &Env, id: &str) -> PathBuf {
    env.dir.join("state/sessions").join(id).join("transcript3")
}

/// The records of a v3 transcript: (offset, seq, payload offset, payload
/// length, kind).
fn records(path: &Path) -> Vec<(usize, u64, usize, usize, u8)> {
    let bytes = std::fs::read(path).unwrap();
    assert_eq!(&bytes[..8], b"EUKHETR3");
    let mut out = Vec::new();
    let mut at = 16;
    while at + 25 <= bytes.len() {
        let seq = u64::from_be_bytes(bytes[at + 8..at + 16].try_into().unwrap());
        let len = u32::from_be_bytes(bytes[at + 17..at + 21].try_into().unwrap()) as usize;
        out.push((at, seq, at + 25, len, bytes[at + 16]));
        at += 25 + len;
    }
    out
}

#[test]
fn random_bytes_arrive_byte_identical_live_queued_raw_and_as_base64() {
    let env = Env::new("bytes");
    let id = env.ok(&["new", "--name", "bytes"]).trim().to_string();
    let data = random_bytes(20 << 20);
    let file = env.dir.join("random.bin");
    std::fs::write(&file, &data).unwrap();
    let cat = format!("cat {}", file.display());

    let live = env.run(&["bash", &id, "--", &cat]);
    assert!(live.status.success());
    assert!(
        live.stdout == data,
        "live output differs ({} bytes)",
        live.stdout.len()
    );

    let queued = env.run(&["send", &id, &cat, "--wait"]);
    assert!(queued.status.success());
    assert!(queued.stdout == data, "send --wait output differs");

    // The first input was user bash 1, the queued run is input 2.
    for input in ["1", "2"] {
        let raw = env.run(&["log", &id, "--raw", input]);
        assert!(
            raw.status.success(),
            "{}",
            String::from_utf8_lossy(&raw.stderr)
        );
        assert!(
            raw.stdout == data,
            "log --raw {input} differs ({} bytes)",
            raw.stdout.len()
        );
    }
    let stderr_only = env.run(&["log", &id, "--raw", "2", "--stream", "stderr"]);
    assert!(stderr_only.status.success() && stderr_only.stdout.is_empty());

    let json: serde_json::Value = serde_json::from_str(&env.ok(&["log", &id, "--json"])).unwrap();
    let mut decoded = Vec::new();
    for entry in json.as_array().unwrap() {
        if entry["kind"] == "output" && entry["input"] == 2 {
            // Random bytes are base64, but a short record of them can be
            // valid UTF-8, and is then text.
            match (entry["base64"].as_str(), entry["text"].as_str()) {
                (Some(encoded), None) => decoded.extend(
                    base64::engine::general_purpose::STANDARD
                        .decode(encoded)
                        .unwrap(),
                ),
                (None, Some(text)) => decoded.extend(text.as_bytes()),
                _ => panic!("an output entry is text or base64: {entry}"),
            }
        }
    }
    assert!(decoded == data, "log --json base64 differs");

    let missing = env.run(&["log", &id, "--raw", "99"]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no input 99"));
}

#[test]
fn utf8_split_across_writes_stays_text_in_log_json() {
    let env = Env::new("utf8");
    let id = env.ok(&["new"]).trim().to_string();
    // "é" written one byte at a time, with a pause between.
    env.ok(&[
        "bash",
        &id,
        "--",
        r"printf 'caf\xc3'; sleep 0.01; printf '\xa9\n'",
    ]);
    let json: serde_json::Value = serde_json::from_str(&env.ok(&["log", &id, "--json"])).unwrap();
    let text: String = json
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "output")
        .map(|e| e["text"].as_str().expect("text, not base64").to_string())
        .collect();
    assert_eq!(text, "café\n");
}

#[test]
fn damage_in_the_middle_keeps_every_later_entry_and_is_reported_once() {
    let env = Env::new("damage");
    let id = env.ok(&["new"]).trim().to_string();
    // Each user bash stores three entries: its command, its output, its end.
    for i in 1..=34 {
        env.ok(&["bash", &id, "--", &format!("echo entry-{i}")]);
    }
    env.ok(&["shutdown", "--force"]);
    let path = transcript_path(&env, &id);
    let before = std::fs::metadata(&path).unwrap().len();
    let recs = records(&path);
    assert!(recs.len() >= 100, "{} records", recs.len());
    let (_, seq, payload, len, _) = recs[39];
    assert_eq!(seq, 40);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[payload + len / 2] ^= 0xFF;
    bytes[payload + len / 2 + 1] ^= 0xFF;
    std::fs::write(&path, &bytes).unwrap();

    assert_eq!(env.ok(&["bash", &id, "--", "echo after"]), "after\n");
    let log = env.log(&id);
    assert!(
        log.contains("entry-34\n") && log.contains("after\n"),
        "{log}"
    );
    assert!(
        log.contains("entry-13\n") && log.contains("entry-15\n"),
        "{log}"
    );
    assert_eq!(log.matches("! damaged transcript: ").count(), 1, "{log}");
    assert!(
        std::fs::metadata(&path).unwrap().len() > before,
        "never truncated"
    );
    let kept: Vec<_> = std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .flatten()
        .filter(|f| {
            f.file_name()
                .to_string_lossy()
                .starts_with("transcript.damaged-")
        })
        .collect();
    assert_eq!(kept.len(), 1);
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        kept[0].metadata().unwrap().permissions().mode() & 0o777,
        0o600
    );

    // A later worker start does not report it again.
    env.ok(&["shutdown", "--force"]);
    env.ok(&["bash", &id, "--", "true"]);
    assert_eq!(env.log(&id).matches("! damaged transcript: ").count(), 1);
}

#[test]
fn a_transcript_catted_into_output_is_never_read_as_records_even_after_damage() {
    let env = Env::new("embedded");
    let other = env.ok(&["new", "--name", "other"]).trim().to_string();
    env.ok(&["bash", &other, "--", "echo OTHER-SESSION-MARK"]);
    let id = env.ok(&["new", "--name", "host"]).trim().to_string();
    env.ok(&["bash", &id, "--", "echo first"]);
    // Another session's transcript and its own, as output (one file, so
    // one write and one output record).
    let mut both = std::fs::read(transcript_path(&env, &other)).unwrap();
    both.extend(std::fs::read(transcript_path(&env, &id)).unwrap());
    let copy = env.dir.join("both");
    std::fs::write(&copy, &both).unwrap();
    let cat = format!("cat {}", copy.display());
    assert!(env.run(&["bash", &id, "--", &cat]).status.success());
    env.ok(&["bash", &id, "--", "echo last"]);
    let json: serde_json::Value = serde_json::from_str(&env.ok(&["log", &id, "--json"])).unwrap();
    let kinds: Vec<&str> = json
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == "bash").count(),
        3,
        "{kinds:?}"
    );
    assert!(
        kinds
            .iter()
            .all(|k| ["bash", "output", "bash_finished"].contains(k)),
        "{kinds:?}"
    );

    // Damage the header of the output record that holds the copies.
    env.ok(&["shutdown", "--force"]);
    let path = transcript_path(&env, &id);
    let recs = records(&path);
    let (offset, ..) = *recs
        .iter()
        .find(|r| r.4 == 2 && r.3 > 200)
        .expect("the catted output");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[offset + 1] ^= 0xFF;
    bytes[offset + 18] ^= 0xFF;
    std::fs::write(&path, &bytes).unwrap();
    env.ok(&["bash", &id, "--", "true"]);
    let log = String::from_utf8_lossy(&env.run(&["log", &id]).stdout).into_owned();
    assert!(!log.contains("OTHER-SESSION-MARK"), "{log}");
    assert_eq!(log.matches("echo first").count(), 1, "{log}");
    assert!(log.contains("last\n"), "{log}");
}

#[test]
fn a_transcript_of_the_first_format_opens_with_all_its_entries() {
    let env = Env::new("v1");
    let id = env.ok(&["new"]).trim().to_string();
    env.ok(&["shutdown", "--force"]);
    let dir = env.dir.join("state/sessions").join(&id);
    let _ = std::fs::remove_file(dir.join("transcript3"));
    // A session of a build that kept no record of its numbering.
    let _ = std::fs::remove_file(dir.join("numbers.json"));
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/transcript-v1");
    std::fs::copy(&fixture, dir.join("transcript")).unwrap();
    let expected = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/transcript-v1.log"),
    )
    .unwrap();
    // Read before any worker opens it, then after the worker copied it.
    let shown = env.log(&id);
    assert_eq!(shown, expected);
    env.ok(&["bash", &id, "--", "echo new"]);
    let shown = env.log(&id);
    assert!(shown.starts_with(&expected), "{shown}");
    assert!(
        shown.contains("[bash 2] $ echo new\nnew\n[bash 2 exited 0]"),
        "{shown}"
    );
    assert!(dir.join("transcript3").exists());
}

#[test]
fn a_transcript_of_the_second_format_opens_with_all_its_entries_and_is_left_for_older_builds() {
    let env = Env::new("v2");
    let id = env.ok(&["new"]).trim().to_string();
    env.ok(&["shutdown", "--force"]);
    let dir = env.dir.join("state/sessions").join(&id);
    std::fs::remove_file(dir.join("transcript3")).unwrap();
    // A session of a build that kept no record of its numbering.
    let _ = std::fs::remove_file(dir.join("numbers.json"));
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let v2 = std::fs::read(fixtures.join("transcript-v2")).unwrap();
    std::fs::write(dir.join("transcript2"), &v2).unwrap();
    let expected = std::fs::read(fixtures.join("transcript-v2.log")).unwrap();
    let log = || env.run(&["log", &id]).stdout;
    // Read before any worker opens it, then after the worker copied it.
    assert!(log() == expected, "{}", String::from_utf8_lossy(&log()));
    env.ok(&["bash", &id, "--", "echo new"]);
    let shown = log();
    assert!(
        shown.starts_with(&expected),
        "{}",
        String::from_utf8_lossy(&shown)
    );
    assert!(
        shown.ends_with(b"[bash 4] $ echo new\nnew\n[bash 4 exited 0]\n"),
        "{}",
        String::from_utf8_lossy(&shown)
    );
    assert_eq!(
        &std::fs::read(dir.join("transcript3")).unwrap()[..8],
        b"EUKHETR3"
    );
    assert_eq!(std::fs::read(dir.join("transcript2")).unwrap(), v2);
}

#[test]
fn a_flood_is_written_once_and_small_output_leaves_no_spool_file() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new("once");
    let id = env.ok(&["new"]).trim().to_string();
    let size = 20u64 << 20;
    let flood = format!("yes 'a line of text' | head -c {size}");
    let live = env.run(&["send", &id, "--wait", "--", &flood]);
    assert!(live.status.success());
    assert_eq!(live.stdout.len() as u64, size);
    assert!(live.stdout.starts_with(b"a line of text\n"));
    assert_eq!(
        env.ok(&["send", &id, "--wait", "--", "echo small"]),
        "small\n"
    );
    let dir = env.dir.join("state/sessions").join(&id);
    let transcript = std::fs::metadata(dir.join("transcript3")).unwrap().len();
    assert!(
        transcript < 1 << 20,
        "the flood's bytes are not in the transcript: {transcript} bytes"
    );
    let number = "1";
    let raw = env.run(&["log", &id, "--raw", number]);
    assert!(raw.status.success());
    assert!(
        raw.stdout == live.stdout,
        "log --raw differs ({} bytes)",
        raw.stdout.len()
    );
    // Once the runs are forgotten, the flood's spool file is kept whole,
    // private, and the small one is gone.
    let kept = dir.join("output/r1.out");
    wait_for(std::time::Duration::from_secs(10), || kept.exists());
    let meta = std::fs::metadata(&kept).expect("the flood's output kept in output/");
    assert!(meta.len() > size, "{} bytes", meta.len());
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    let output_dir = std::fs::metadata(dir.join("output")).unwrap();
    assert_eq!(output_dir.permissions().mode() & 0o777, 0o700);
    assert!(!dir.join("output/r2.out").exists());
    assert!(!dir.join("spool/r2.out").exists());
    // Read again after a restart, from the kept file.
    env.ok(&["shutdown", "--force"]);
    let again = env.run(&["log", &id, "--raw", number]);
    assert_eq!(again.stdout, raw.stdout);
    assert_eq!(env.ok(&["log", &id, "--tail", "1"]).lines().count(), 1);
}

/// A process's resident memory, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_client_that_stops_reading_costs_bounded_memory_and_still_gets_every_byte() {
    use std::io::Read;
    use std::process::Stdio;
    const SIZE: u64 = 1 << 30;
    const LINE: &[u8] = b"0123456789 the quick brown fox jumps over the lazy dog\n";
    let env = Env::new("stopped");
    let id = env.ok(&["new"]).trim().to_string();
    let worker = env.worker_pid(&id).expect("a worker");
    let daemon = env.daemon_pid();
    let producer = format!(
        "yes '{}' | head -c {SIZE}",
        std::str::from_utf8(&LINE[..LINE.len() - 1]).unwrap()
    );
    let mut client = env
        .command(&["bash", &id, "--", &producer])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Stopped once its command has started (so its request is out).
    wait_until(
        std::time::Duration::from_secs(10),
        "the command starts",
        || env.session(&id)["state"] == "busy",
    );
    signal(client.id(), Signal::SIGSTOP);
    let mut peak = (0, 0);
    let start = std::time::Instant::now();
    // The run writes everything while its client is stopped: its end is
    // stored once the kernel has read all of it.
    wait_until(
        std::time::Duration::from_secs(300),
        "the run finishes",
        || {
            peak = (peak.0.max(rss_kib(worker)), peak.1.max(rss_kib(daemon)));
            env.ok(&["log", &id, "--tail", "3"]).contains("exited 0]")
        },
    );
    println!(
        "1 GiB written to a stopped client in {:?}: worker peak {} KiB, supervisor peak {} KiB",
        start.elapsed(),
        peak.0,
        peak.1
    );
    assert!(peak.0 < 64 * 1024, "the worker grew to {} KiB", peak.0);
    assert!(peak.1 < 64 * 1024, "the supervisor grew to {} KiB", peak.1);
    signal(client.id(), Signal::SIGCONT);
    let mut stdout = client.stdout.take().unwrap();
    let mut buf = vec![0u8; 1 << 20];
    let mut at: u64 = 0;
    loop {
        let n = stdout.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        for (i, byte) in buf[..n].iter().enumerate() {
            let expected = LINE[((at + i as u64) % LINE.len() as u64) as usize];
            assert_eq!(*byte, expected, "byte {} differs", at + i as u64);
        }
        at += n as u64;
    }
    assert_eq!(at, SIZE, "every byte arrived");
    assert!(client.wait().unwrap().success());

    // `log` of the whole 1 GiB of output (the spool records the transcript
    // points to) streams: neither the client nor the worker holds it.
    let mut log = env
        .command(&["log", &id])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut worker_peak = 0;
    let mut client_peak = 0;
    wait_until(std::time::Duration::from_secs(600), "`log` ends", || {
        worker_peak = worker_peak.max(rss_kib(worker));
        let mut status = 0;
        // SAFETY: wait4(2) on the child this test started, with buffers we own.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        let reaped =
            unsafe { libc::wait4(log.id() as i32, &mut status, libc::WNOHANG, &mut usage) };
        if reaped == log.id() as i32 {
            assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
            client_peak = usage.ru_maxrss as u64;
        }
        reaped == log.id() as i32
    });
    let _ = log.try_wait();
    println!(
        "log of 1 GiB of output: client peak {client_peak} KiB, worker peak {worker_peak} KiB"
    );
    assert!(client_peak < 64 * 1024, "log grew to {client_peak} KiB");
    assert!(
        worker_peak < 64 * 1024,
        "the worker grew to {worker_peak} KiB serving log"
    );

    // The 1 GiB history: its tail and an attach's first line come from its
    // end, without reading the rest.
    let limit = if cfg!(debug_assertions) { 1000 } else { 200 };
    let start = std::time::Instant::now();
    let tail = env.run(&["log", &id, "--tail", "100"]);
    let took = start.elapsed();
    assert!(tail.status.success());
    assert!(String::from_utf8_lossy(&tail.stdout).ends_with("[bash 1 exited 0]\n"));
    println!("log --tail 100 of 1 GiB of output: {took:?}");
    assert!(took.as_millis() < limit, "log --tail 100 took {took:?}");
    let start = std::time::Instant::now();
    let mut attached = env
        .command(&["attach", &id])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut first = [0u8; 1];
    attached
        .stdout
        .as_mut()
        .unwrap()
        .read_exact(&mut first)
        .unwrap();
    let took = start.elapsed();
    let _ = attached.kill();
    let _ = attached.wait();
    println!("attach's first byte on 1 GiB of output: {took:?}");
    assert!(
        took.as_millis() < limit,
        "attach showed its first line after {took:?}"
    );
}

#[test]
fn a_commands_last_output_arrives_before_its_exit_every_time() {
    let env = Env::new("last-output");
    let id = env.ok(&["new"]).trim().to_string();
    for i in 0..100 {
        let out = env.run(&["bash", &id, "--", &format!("echo line {i}")]);
        assert!(out.status.success());
        assert_eq!(out.stdout, format!("line {i}\n").as_bytes(), "round {i}");
    }
}

#[test]
fn a_cut_character_at_the_end_is_not_held_while_a_background_job_keeps_the_output_open() {
    let env = Env::new("held");
    let id = env.ok(&["new"]).trim().to_string();
    let start = std::time::Instant::now();
    let out = env.run(&["bash", &id, "--", r"printf 'ab\xc3'; sleep 5 &"]);
    assert!(out.status.success());
    assert_eq!(out.stdout, b"ab\xc3");
    assert!(
        start.elapsed() < std::time::Duration::from_secs(3),
        "waited for the background job ({:?})",
        start.elapsed()
    );
}

/// A long run's output is written once: the spool holds it, and the
/// transcript's records only point into it, so disk holds it once while
/// the run goes on.
#[test]
fn a_long_runs_output_is_on_disk_once_in_its_spool_while_it_runs() {
    use std::os::unix::fs::MetadataExt;
    let env = Env::new("spool-once");
    let id = env.ok(&["new", "--name", "once"]).trim().to_string();
    let data = random_bytes(40 << 20);
    let file = env.dir.join("random.bin");
    std::fs::write(&file, &data).unwrap();
    let queued = env.ok(&["send", &id, &format!("cat {}; sleep 4", file.display())]);
    let input = queued
        .trim()
        .strip_prefix("queued as run ")
        .unwrap_or_else(|| panic!("send said {queued:?}"))
        .to_string();
    let session = env.dir.join("state/sessions").join(&id);
    let spool = session.join(format!("spool/r{input}.out"));
    // The output is written within a second; the worker stores it as it
    // is read, a record per spool record.
    let (mut len, mut stored) = (0, 0);
    let whole = wait_for(std::time::Duration::from_secs(3), || {
        // Until the run starts, there is no spool file.
        len = std::fs::metadata(&spool).map_or(0, |m| m.len());
        stored = log_raw_len(&env, &id, &input);
        len >= data.len() as u64 && stored == data.len()
    });
    assert!(
        whole,
        "the spool has {len} bytes, the transcript {stored} of its output"
    );
    let on_disk = |path: &Path| std::fs::metadata(path).unwrap().blocks() * 512;
    let transcript = on_disk(&session.join("transcript3"));
    assert!(
        transcript < 1 << 20,
        "the transcript holds {transcript} bytes: the output is not written twice"
    );
    assert!(on_disk(&spool) >= data.len() as u64);
    let waited = env.run(&["send", &id, "true", "--wait"]);
    assert!(waited.status.success());
    let raw = env.run(&["log", &id, "--raw", &input]);
    assert!(
        raw.stdout == data,
        "log --raw {input} differs ({} bytes)",
        raw.stdout.len()
    );
}

/// How many bytes of output run `input` has in the transcript now.
fn log_raw_len(env: &Env, id: &str, input: &str) -> usize {
    env.run(&["log", id, "--raw", input]).stdout.len()
}

fn worker_log(env: &Env, id: &str) -> String {
    std::fs::read_to_string(env.dir.join("state/sessions").join(id).join("worker.log"))
        .unwrap_or_default()
}

/// SIGKILL the session's worker and wait for the supervisor's next one.
fn kill_worker_and_wait_for_the_next(env: &Env, id: &str) {
    let worker = env.worker_pid(id).expect("a worker");
    kill9(worker);
    wait_until(
        std::time::Duration::from_secs(10),
        "the next worker",
        || env.worker_pid(id).is_some_and(|pid| pid != worker),
    );
}

#[test]
fn a_restarted_worker_reads_only_what_the_transcript_gained_since_its_checkpoint() {
    let env = Env::new("checkpoint");
    let id = env.ok(&["new"]).trim().to_string();
    let checkpoint = env.dir.join("state/sessions").join(&id).join("replay.json");
    // Input 1 writes 70 MB (past the 64 MiB between checkpoints) and a
    // restore-free history around it: a queued run and a user bash.
    env.ok(&["bash", &id, "--", "head -c 70000000 /dev/zero"]);
    assert!(checkpoint.exists(), "no checkpoint past 64 MiB");
    assert_eq!(env.ok(&["send", &id, "--wait", "echo two"]), "two\n");
    env.ok(&["send", &id, "sleep 30"]);
    env.ok(&["send", &id, "echo four"]);
    kill_worker_and_wait_for_the_next(&env, &id);

    let log = worker_log(&env, &id);
    assert!(
        log.contains("read the transcript from offset"),
        "the checkpoint was not used:\n{log}"
    );
    // The books are whole: the run in flight, the queue behind it and the
    // numbering all go on.
    let queue = env.ok(&["queue", &id]);
    assert!(queue.contains("echo four"), "{queue}");
    env.ok(&["cancel", &id]);
    assert_eq!(env.ok(&["send", &id, "echo five"]), "queued as run 5\n");
    wait_until(std::time::Duration::from_secs(10), "run 5", || {
        env.log(&id).contains("five\n")
    });
    let log = env.log(&id);
    assert!(log.contains("four\n") && log.contains("two\n"), "{log}");
}

#[test]
fn a_checkpoint_that_does_not_match_its_transcript_is_passed_over() {
    let env = Env::new("checkpoint-stale");
    let id = env.ok(&["new"]).trim().to_string();
    let dir = env.dir.join("state/sessions").join(&id);
    env.ok(&["bash", &id, "--", "head -c 70000000 /dev/zero"]);
    let checkpoint = dir.join("replay.json");
    let saved = std::fs::read_to_string(&checkpoint).unwrap();
    assert_eq!(env.ok(&["send", &id, "--wait", "echo two"]), "two\n");
    // The same books, pointed one byte off their record: a checkpoint that
    // no longer fits is never trusted.
    let mut moved: serde_json::Value = serde_json::from_str(&saved).unwrap();
    let start = moved["after"]["start"].as_u64().unwrap();
    moved["after"]["start"] = (start + 1).into();
    std::fs::write(&checkpoint, moved.to_string()).unwrap();
    kill_worker_and_wait_for_the_next(&env, &id);
    assert_eq!(env.ok(&["send", &id, "--wait", "echo three"]), "three\n");
    assert!(
        !worker_log(&env, &id).contains("read the transcript from offset"),
        "a checkpoint off its record was used"
    );
    // Garbage is passed over too, with a line saying so.
    std::fs::write(&checkpoint, "{not json").unwrap();
    kill_worker_and_wait_for_the_next(&env, &id);
    let numbered = env.ok(&["send", &id, "--wait", "echo four"]);
    assert_eq!(numbered, "four\n");
    let log = worker_log(&env, &id);
    assert!(!log.contains("read the transcript from offset"), "{log}");
    assert!(log.contains("reading the whole transcript"), "{log}");
}

/// A private installation whose state directory is a 16 MiB disk of its
/// own, or `None` when the test cannot run here. The disk comes first, so
/// bound as `(disk, env)` it outlives the installation's cleanup.
fn on_a_small_disk(name: &str) -> Option<(SmallDisk, Env)> {
    let env = Env::new(name);
    let disk = small_disk::for_test(&env.dir.join("state"))?;
    let env = env.with("EUKHE_STATE_DIR", &disk.path.display().to_string());
    Some((disk, env))
}

/// Runs of zeros are kept without taking room (`protocol::zeros`): 40 MB
/// of zeros on a 16 MiB state disk all arrive and are all in the
/// transcript byte for byte (stored as bytes, they would not fit: the
/// client would exit 125, as in the test below).
#[test]
fn zeros_a_small_state_disk_could_not_hold_are_kept_whole() {
    let Some((_disk, env)) = on_a_small_disk("zeros-small-disk") else {
        return;
    };
    let id = env.ok(&["new"]).trim().to_string();
    let out = env.run(&["bash", &id, "--", "head -c 40000000 /dev/zero; echo end"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let mut expected = vec![0u8; 40_000_000];
    expected.extend(b"end\n");
    assert!(out.stdout == expected, "{} bytes arrived", out.stdout.len());
    let raw = env.run(&["log", &id, "--raw", "1"]);
    assert!(
        raw.stdout == expected,
        "{} bytes in the transcript",
        raw.stdout.len()
    );
}

/// What a raw client of `capabilities` receives for `command` in session
/// `id`: the output's bytes, the zero-run frames among its frames, and
/// the bytes that crossed the socket.
fn raw_bash(env: &Env, id: &str, command: &str, capabilities: &str) -> (Vec<u8>, usize, usize) {
    use std::io::{Read, Write};
    let mut stream =
        std::os::unix::net::UnixStream::connect(env.dir.join("run/eukhe.sock")).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let hello = format!(
        r#"{{"type":"hello","protocol":{},"version":"0","build_id":"raw","role":"interactive","capabilities":[{capabilities}]}}"#,
        eukhe::protocol::PROTOCOL_VERSION
    );
    let request = serde_json::json!({
        "type": "session", "session": id, "request": {"op": "bash", "command": command},
    });
    stream.write_all(&frame(hello.as_bytes())).unwrap();
    stream
        .write_all(&frame(request.to_string().as_bytes()))
        .unwrap();
    let (mut output, mut runs, mut wire) = (Vec::new(), 0, 0);
    loop {
        let mut header = [0u8; 4];
        stream.read_exact(&mut header).unwrap();
        let mut payload = vec![0u8; u32::from_be_bytes(header) as usize];
        stream.read_exact(&mut payload).unwrap();
        wire += 4 + payload.len();
        match payload[0] {
            0x01 => output.extend_from_slice(&payload[2..]),
            0x03 => {
                runs += 1;
                let len = u32::from_be_bytes(payload[2..6].try_into().unwrap());
                output.resize(output.len() + len as usize, 0);
            }
            _ => {
                let message: serde_json::Value = serde_json::from_slice(&payload).unwrap();
                match message["type"].as_str() {
                    Some("exit") => return (output, runs, wire),
                    Some("error") => panic!("{message}"),
                    _ => {}
                }
            }
        }
    }
}

/// Runs of zeros cross the socket as their length alone to a client whose
/// hello says it reads them (`zero_runs`, as every client of this build
/// says), and as bytes to one that does not: a client of an older build
/// still gets every byte.
#[test]
fn zeros_cross_the_socket_as_runs_only_to_a_client_that_reads_them() {
    let env = Env::new("zero-runs");
    let id = env.ok(&["new"]).trim().to_string();
    let command = "printf start; head -c 8000000 /dev/zero; printf end";
    let mut expected = b"start".to_vec();
    expected.resize(expected.len() + 8_000_000, 0);
    expected.extend(b"end");
    let (output, runs, wire) = raw_bash(&env, &id, command, r#""zero_runs""#);
    assert!(output == expected, "{} bytes arrived", output.len());
    assert!(
        runs > 0 && wire < 64 << 10,
        "{runs} runs in {wire} bytes on the wire"
    );
    let (output, runs, wire) = raw_bash(&env, &id, command, "");
    assert!(output == expected, "{} bytes arrived", output.len());
    assert!(
        runs == 0 && wire > 8_000_000,
        "{runs} runs in {wire} bytes on the wire"
    );
}

/// A state disk that fills while a command writes: what the kernel could
/// not spool is counted, not told chunk by chunk; the client gets only
/// whole records of the output (a record cut short is taken back, never
/// read with the next one's header as output), says on stderr what is
/// missing and exits 125; the transcript says it once, before the end.
#[test]
fn output_a_full_state_disk_could_not_keep_is_told_once_and_fails_the_client() {
    let Some((_disk, env)) = on_a_small_disk("full-disk") else {
        return;
    };
    let id = env.ok(&["new"]).trim().to_string();
    // Not zeros: runs of zeros take no room (`protocol::zeros`).
    let out = env.run(&[
        "bash",
        &id,
        "--",
        "head -c 40000000 /dev/zero | tr '\\0' x; echo end",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(
        stderr.contains("the command exited 0, but ")
            && stderr.contains("bytes of its output could not be kept: No space left on device"),
        "{stderr}"
    );
    assert!(
        out.stdout.len() < 40_000_000,
        "{} bytes arrived",
        out.stdout.len()
    );
    // Its x's, then its last line if that was kept.
    let xs = out.stdout.strip_suffix(b"end\n").unwrap_or(&out.stdout);
    let stray = xs.iter().position(|&b| b != b'x');
    assert!(
        stray.is_none(),
        "a byte the command never wrote at {stray:?}"
    );

    let log = env.run(&["log", &id]).stdout;
    let log = String::from_utf8_lossy(&log).replace('\0', "");
    let told: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("could not be kept"))
        .collect();
    assert_eq!(told.len(), 1, "{told:#?}");
    assert!(
        told[0].starts_with("! ")
            && told[0].contains(
                "bytes of the output of bash 1 could not be kept: No space left on device"
            ),
        "{}",
        told[0]
    );
    let notice = log.find("bytes of the output of bash 1").unwrap();
    let end = log.find("[bash 1 exited 0]").expect("the end is recorded");
    assert!(notice < end, "{log}");
}

/// A saved session woken on a full state disk: its worker cannot record
/// itself and exits at once. The supervisor sees the exit (no waiting out
/// the worker-start wait for a process that is gone) and the client is
/// told why, from the worker's own last word; once space is freed,
/// `restart` brings the session back with its state.
#[test]
fn a_worker_that_cannot_start_on_a_full_disk_says_why_to_the_client() {
    let Some((disk, env)) = on_a_small_disk("full-wake") else {
        return;
    };
    let env = env.with("EUKHE_IDLE_STOP_MS", "1000");
    let id = env.ok(&["new"]).trim().to_string();
    env.ok(&["bash", &id, "--", "kept=yes"]);
    wait_until(Duration::from_secs(20), "the session saved", || {
        env.session(&id)["state"] == "saved"
    });
    let filler = fill(&disk);
    let started = Instant::now();
    let woken = env.run(&["bash", &id, "--", "echo $kept"]);
    let stderr = String::from_utf8_lossy(&woken.stderr);
    assert_eq!(woken.status.code(), Some(125), "{stderr}");
    assert!(
        stderr.contains("(the last attempt: its worker exited with status 125; its log ends: ")
            && stderr.contains("worker.json: No space left on device"),
        "{stderr}"
    );
    assert!(stderr.lines().count() == 1, "{stderr}");
    // Each failure is seen as the worker exits, not after a worker-start
    // wait (10 s, as long as this client waits): by the time the client
    // is told, the supervisor has counted several (6, the give-up, after
    // pauses of 250 ms doubling to 4 s).
    let failures = env.session(&id)["failures_in_window"].as_u64().unwrap();
    assert!(
        failures >= 2,
        "{failures} failures in {:?}",
        started.elapsed()
    );

    std::fs::remove_file(filler).unwrap();
    env.ok(&["restart", &id]);
    assert_eq!(env.ok(&["bash", &id, "--", "echo $kept"]), "yes\n");
}

/// `new` on a full state disk fails in one line and leaves nothing
/// behind: no session directory, no temporary file.
#[test]
fn a_new_session_refused_by_a_full_disk_leaves_nothing_behind() {
    let Some((disk, env)) = on_a_small_disk("full-new") else {
        return;
    };
    let env = env.with_config("spare_session = false\n");
    env.ok(&["status"]);
    let sessions = disk.path.join("sessions");
    let before: Vec<_> = std::fs::read_dir(&sessions)
        .map_or(Vec::new(), |d| d.flatten().map(|e| e.file_name()).collect());
    let filler = fill(&disk);
    let refused = env.run(&["new", "--env", &format!("BIG={}", "x".repeat(64 * 1024))]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(125), "{stderr}");
    assert!(stderr.contains("No space left on device"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    let after: Vec<_> = std::fs::read_dir(&sessions)
        .map_or(Vec::new(), |d| d.flatten().map(|e| e.file_name()).collect());
    assert_eq!(after, before, "nothing of the refused session stays");
    std::fs::remove_file(filler).unwrap();
    env.ok(&["new"]);
}

/// A client whose worker is lost while its command runs follows the
/// command in the transcript: output lost to a full disk is told there
/// too (the end entry carries it), and the client fails the same way.
#[test]
fn output_lost_is_told_to_a_client_that_follows_the_transcript() {
    use std::process::Stdio;
    let Some((disk, env)) = on_a_small_disk("full-follow") else {
        return;
    };
    let id = env.ok(&["new"]).trim().to_string();
    env.ok(&["bash", &id, "--", "true"]);
    let filler = fill(&disk);
    let client = env
        .command(&["send", &id, "--wait", "echo lost; sleep 4; echo kept"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The first line is written on a full disk; then there is room
    // again, for the next worker and for what the command writes after.
    // Once `sleep` runs, the first line is in the kernel's pipe.
    env.run_process(env.kernel(&id), "sleep 4");
    // Time for the kernel to read it and meet the full disk: its loss
    // shows nowhere a test could wait on.
    std::thread::sleep(std::time::Duration::from_millis(500));
    std::fs::remove_file(filler).unwrap();
    kill_worker_and_wait_for_the_next(&env, &id);
    let out = client.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "kept\n", "{stderr}");
    assert!(
        stderr.contains("the command exited 0, but 5 bytes of its output could not be kept"),
        "{stderr}"
    );
    let json = env.ok(&["log", &id, "--json", "--tail", "1"]);
    let end: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(end[0]["kind"], "run_finished", "{json}");
    assert_eq!(end[0]["lost_output"]["bytes"], 5, "{json}");
}

/// A command's last output read after its shell reported its end, on a
/// disk with no room for it: its loss is told with that command's end,
/// never as output of something it left running.
#[test]
fn output_lost_as_a_command_ends_is_told_with_its_end() {
    let Some((disk, env)) = on_a_small_disk("full-end") else {
        return;
    };
    let id = env.ok(&["new"]).trim().to_string();
    env.ok(&["bash", &id, "--", "true"]);
    let filler = fill(&disk);
    for bash in 2..5 {
        small_disk::top_up(&filler);
        let out = env.run(&["bash", &id, "--", "echo small; echo more"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(125),
            "bash {bash}: {stderr}\n{}",
            env.log(&id)
        );
        assert!(
            stderr.contains("the command exited 0, but 11 bytes of its output could not be kept"),
            "{stderr}"
        );
        let log = env.log(&id);
        assert!(log.contains(&format!("! 11 bytes of the output of bash {bash} could not be kept: No space left on device")), "{log}");
        assert!(!log.contains("left running"), "{log}");
        // What the command changed in the shell could not be captured;
        // the notice says why.
        assert!(
            log.contains(
                "! the shell's state capture is cut short (0 bytes) (the state disk is full)"
            ),
            "{log}"
        );
    }
    std::fs::remove_file(filler).unwrap();
    assert_eq!(env.ok(&["bash", &id, "--", "echo small"]), "small\n");
}

/// `log --raw N` of output whose kept bytes were damaged writes what it
/// can and fails, saying in one line which bytes are missing (plain `log`
/// shows the same notice in their place).
#[test]
fn log_raw_of_damaged_output_fails_saying_what_is_missing() {
    use std::io::{Seek, SeekFrom, Write};
    let env = Env::new("raw-damaged");
    let id = env.ok(&["new"]).trim().to_string();
    let size = 4u64 << 20;
    let flood = format!("yes 'a line of text' | head -c {size}");
    assert!(env
        .run(&["send", &id, "--wait", "--", &flood])
        .status
        .success());
    let kept = env
        .dir
        .join("state/sessions")
        .join(&id)
        .join("output/r1.out");
    wait_until(Duration::from_secs(10), "the output is kept", || {
        kept.exists()
    });
    env.ok(&["shutdown", "--force"]);
    let mut file = std::fs::OpenOptions::new().write(true).open(&kept).unwrap();
    file.seek(SeekFrom::Start(size / 2)).unwrap();
    file.write_all(b"XXXX").unwrap();
    drop(file);

    let raw = env.run(&["log", &id, "--raw", "1"]);
    let said = String::from_utf8_lossy(&raw.stderr);
    assert_eq!(raw.status.code(), Some(125), "{said}");
    assert!(
        (raw.stdout.len() as u64) < size,
        "{} bytes",
        raw.stdout.len()
    );
    assert_eq!(said.lines().count(), 1, "{said}");
    assert!(
        said.starts_with("eukhe: the output of input 1 written above is incomplete: ")
            && said.contains("bytes of run 1's stdout are lost"),
        "{said}"
    );
    assert!(env
        .ok(&["log", &id])
        .contains("bytes of run 1's stdout are lost"));
    let json: serde_json::Value = serde_json::from_str(&env.ok(&["log", &id, "--json"])).unwrap();
    let lost: Vec<&serde_json::Value> = json
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e.get("lost"))
        .collect();
    assert_eq!(lost, [&serde_json::json!({ "input": 1 })], "{json:#}");
}
