//! Bytes arrive exactly as commands wrote them: live, queued, raw and as
//! base64, in order, once, and at a bounded cost to a slow client.

use std::path::Path;
use std::time::Duration;

use crate::support::process::Signal;
use crate::support::wire::frame;
use crate::support::{signal, wait_for, wait_until, Env};
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
