//! Output windows (issue 54): `eukhe log S --raw N` with `--head`,
//! `--tail`, `--bytes` and `--grep`, exact against outputs whose every
//! byte the test knows, the whole output's size on standard error, a lost
//! or damaged index read past, and a large output's tail answered by
//! reading a few MiB of it (counted in the answering worker's
//! `/proc/PID/io`).

use std::io::Write;
use std::process::{Command, Output, Stdio};

use crate::support::Env;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `eukhe log id --raw run` with `window`, which must succeed: its stdout
/// and its stderr.
fn window(t: &Env, id: &str, run: u64, window: &[&str]) -> (Vec<u8>, String) {
    let run = run.to_string();
    let mut args = vec!["log", id, "--raw", &run];
    args.extend_from_slice(window);
    let out = t.run(&args);
    assert!(
        out.status.success(),
        "log {window:?} failed: {}",
        text(&out.stderr)
    );
    (out.stdout, text(&out.stderr))
}

/// Wait until run 1's filter has an entry for each of its index's: its
/// thread writes them after the run has ended.
fn filter_written(t: &Env, id: &str) {
    let dir = t.session_dir(id).join("index");
    let entries = |name: &str, size: u64| {
        std::fs::metadata(dir.join(name)).map_or(0, |m| m.len().saturating_sub(8) / size)
    };
    crate::support::wait_until(
        std::time::Duration::from_secs(120),
        "the filter is written",
        || {
            let index = entries("r1.idx", 48);
            index > 0 && entries("r1.tri", 4256) == index
        },
    );
}

/// Run `command` in session `id` to its end, its output stored and not
/// read by the client.
fn run_unread(t: &Env, id: &str, command: &str) {
    let ran = t
        .command(&["send", "--wait", id, command])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(ran.success(), "{ran}");
}

/// `seq 1 n` as its bytes.
fn seq(n: u64) -> Vec<u8> {
    (1..=n)
        .map(|i| format!("{i}\n"))
        .collect::<String>()
        .into_bytes()
}

/// What `program args` writes reading `input`, or None when it is not
/// installed.
fn filter(program: &str, args: &[&str], input: &[u8]) -> Option<Output> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    Some(out)
}

/// A session whose run 1 wrote `seq 1 n`.
fn seq_run(t: &Env, n: u64) -> String {
    let id = t.new_session();
    t.ok(&["send", "--wait", &id, &format!("seq 1 {n}")]);
    id
}

#[test]
fn head_tail_bytes_and_grep_are_exact_and_the_size_is_told() {
    let t = Env::new("windows-exact");
    // Over two MiB: the index has entries, and windows start at them.
    let n = 300_000;
    let id = seq_run(&t, n);
    let all = seq(n);
    let size = format!("run 1: {} bytes, {n} lines", all.len());

    let (tail, said) = window(&t, &id, 1, &["--tail", "20"]);
    assert_eq!(text(&tail), text(&seq(n)[seq(n - 20).len()..]));
    assert!(
        said.contains(&format!("{size}; shown lines {}-{n}", n - 19)),
        "{said}"
    );

    let (head, said) = window(&t, &id, 1, &["--head", "5"]);
    assert_eq!(head, seq(5));
    assert!(said.contains(&format!("{size}; shown lines 1-5")), "{said}");

    for (range, from, to) in [
        ("100:200", 100, 200),
        ("1500000:1500010", 1_500_000, 1_500_010),
        ("1900000:", 1_900_000, all.len()),
    ] {
        let (bytes, _) = window(&t, &id, 1, &["--bytes", range]);
        assert_eq!(bytes, &all[from..to], "--bytes {range}");
    }

    // As grep -n writes them: numbered, context marked `-`, `--` between.
    let pattern = "^(7|10|12|250000|299999)$";
    let (grepped, said) = window(&t, &id, 1, &["--grep", pattern, "--context", "2"]);
    let expected = "5-5\n6-6\n7:7\n8-8\n9-9\n10:10\n11-11\n12:12\n13-13\n14-14\n--\n\
                    249998-249998\n249999-249999\n250000:250000\n250001-250001\n250002-250002\n--\n\
                    299997-299997\n299998-299998\n299999:299999\n300000-300000\n";
    assert_eq!(text(&grepped), expected);
    assert!(said.contains("5 matching lines"), "{said}");
    if let Some(grep) = filter("grep", &["-n", "-E", "-C", "2", pattern], &all) {
        assert_eq!(text(&grepped), text(&grep.stdout), "as grep -n -C 2 does");
    }
    let (first, said) = window(&t, &id, 1, &["--grep", "0$", "--max-count", "3"]);
    assert_eq!(text(&first), "10:10\n20:20\n30:30\n");
    assert!(said.contains("stopped at the max count"), "{said}");

    // Nothing matched: grep's status 1.
    let none = t.run(&["log", &id, "--raw", "1", "--grep", "x"]);
    assert_eq!(none.status.code(), Some(1), "{}", text(&none.stderr));

    // As one JSON object.
    let (json, _) = window(&t, &id, 1, &["--tail", "2", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&json).unwrap();
    assert_eq!(json["lines"], n);
    assert_eq!(json["bytes"], all.len());
    assert_eq!(json["parts"][0]["text"], "299999\n300000\n");
    assert_eq!(json["parts"][0]["line"], n - 1);

    // Without --raw, --tail still counts the transcript's entries.
    let last = t.ok(&["log", &id, "--tail", "1"]);
    assert!(last.contains("[run 1 exited 0]"), "{last}");
}

#[test]
fn a_last_line_without_newline_counts_and_each_stream_is_its_own() {
    let t = Env::new("windows-streams");
    let id = t.new_session();
    t.ok(&[
        "send",
        "--wait",
        &id,
        "printf 'a\\nb\\nc'; printf 'e1\\ne2\\ne3\\n' >&2",
    ]);
    let (tail, said) = window(&t, &id, 1, &["--stream", "stdout", "--tail", "2"]);
    assert_eq!(text(&tail), "b\nc");
    assert!(
        said.contains("run 1: 5 bytes, 3 lines; shown lines 2-3"),
        "{said}"
    );
    let (head, said) = window(&t, &id, 1, &["--stream", "stderr", "--head", "1"]);
    assert_eq!(text(&head), "e1\n");
    assert!(
        said.contains("run 1: 9 bytes, 3 lines; shown lines 1-1"),
        "{said}"
    );
    let (grepped, _) = window(&t, &id, 1, &["--stream", "stderr", "--grep", "3"]);
    assert_eq!(text(&grepped), "3:e3\n");
    // User bash's output has a file of its own too, when it is large.
    let bash = t.ok(&["bash", &id, "--", "seq 1 200000"]);
    assert_eq!(bash.len(), seq(200_000).len());
    let (tail, said) = window(&t, &id, 2, &["--tail", "1"]);
    assert_eq!(text(&tail), "200000\n");
    assert!(said.contains("200000 lines"), "{said}");
    // A resting session is read from disk, by the daemon: no worker starts.
    t.ok(&["shutdown", "--force"]);
    let (tail, said) = window(&t, &id, 1, &["--stream", "stdout", "--tail", "2"]);
    assert_eq!(text(&tail), "b\nc");
    assert!(
        said.contains("run 1: 5 bytes, 3 lines; shown lines 2-3"),
        "{said}"
    );
    assert_eq!(t.worker_pid(&id), None, "a worker started to read");
    // A run that never was: one line, eukhe's failure.
    let out = t.run(&["log", &id, "--raw", "9", "--tail", "1"]);
    assert_eq!(out.status.code(), Some(125));
    assert!(
        text(&out.stderr).contains("has no input 9"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_lost_or_damaged_index_gives_the_same_answer_and_says_so() {
    let t = Env::new("windows-index");
    let n = 400_000;
    let id = seq_run(&t, n);
    let all = seq(n);
    let asks: [&[&str]; 3] = [
        &["--tail", "3"],
        &["--bytes", "2000000:2000020"],
        &["--grep", "^39999[0-9]$", "-C", "1"],
    ];
    let good: Vec<_> = asks.iter().map(|ask| window(&t, &id, 1, ask).0).collect();
    assert_eq!(good[0], &all[seq(n - 3).len()..]);
    assert_eq!(good[1], &all[2_000_000..2_000_020]);
    let index = t.session_dir(&id).join("index/r1.idx");
    let bytes = std::fs::read(&index).unwrap();
    assert!(
        bytes.len() > 8 + 48,
        "the index has entries: {}",
        bytes.len()
    );

    // A flipped byte in its first entry.
    let mut damaged = bytes.clone();
    damaged[8 + 20] ^= 0x40;
    std::fs::write(&index, &damaged).unwrap();
    for (ask, good) in asks.iter().zip(&good) {
        let (answer, said) = window(&t, &id, 1, ask);
        assert_eq!(&answer, good, "{ask:?} with a damaged index");
        assert!(said.contains("index is damaged at entry 1"), "{said}");
    }
    // Entries that do not fit the output (one more, past its end).
    let mut longer = bytes.clone();
    longer.extend_from_slice(&bytes[bytes.len() - 48..]);
    std::fs::write(&index, &longer).unwrap();
    let (answer, _) = window(&t, &id, 1, asks[0]);
    assert_eq!(answer, good[0], "an entry repeated");
    // Gone.
    std::fs::remove_file(&index).unwrap();
    for (ask, good) in asks.iter().zip(&good) {
        let (answer, said) = window(&t, &id, 1, ask);
        assert_eq!(&answer, good, "{ask:?} without an index");
        assert!(said.contains("it has no index"), "{said}");
    }
}

#[test]
fn an_output_kept_in_the_transcript_alone_is_windowed_the_same() {
    let t = Env::new("windows-transcript");
    let id = t.new_session();
    // Small writes, each kept in the transcript: no output file is kept.
    t.ok(&[
        "send",
        "--wait",
        &id,
        "for i in $(seq 1 50); do echo line $i; done",
    ]);
    assert!(!t.session_dir(&id).join("output/r1.out").exists());
    let (tail, said) = window(&t, &id, 1, &["--tail", "2"]);
    assert_eq!(text(&tail), "line 49\nline 50\n");
    assert!(said.contains("50 lines; shown lines 49-50"), "{said}");
    let (grepped, _) = window(&t, &id, 1, &["--grep", "line 2[05]$"]);
    assert_eq!(text(&grepped), "20:line 20\n25:line 25\n");
}

/// The bytes process `pid` has read so far (`rchar`).
fn read_by(pid: u32) -> u64 {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap();
    io.lines()
        .find_map(|line| line.strip_prefix("rchar: "))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn a_large_outputs_tail_and_size_are_read_from_a_few_mib() {
    let t = Env::new("windows-large");
    let id = t.new_session();
    let line = "abcdefghijklmnopqrstuvwxyz0123456789\n";
    let size: u64 = 256 << 20;
    let command =
        format!("yes abcdefghijklmnopqrstuvwxyz0123456789 | head -c {size} >&2; echo end");
    run_unread(&t, &id, &command);
    let lines = size.div_ceil(line.len() as u64);
    filter_written(&t, &id);
    let worker = t.worker(&id);
    const FEW_MIB: u64 = 4 << 20;
    let answer = |ask: &[&str]| {
        let before = read_by(worker);
        let (out, said) = window(&t, &id, 1, ask);
        let read = read_by(worker) - before;
        assert!(read < FEW_MIB, "{ask:?} read {read} bytes");
        (out, said)
    };
    let (tail, said) = answer(&["--stream", "stderr", "--tail", "20"]);
    let last_line = size % line.len() as u64;
    let expected = format!("{}{}", line.repeat(19), &line[..last_line as usize]);
    assert_eq!(text(&tail), expected);
    assert!(
        said.contains(&format!(
            "run 1: {size} bytes, {lines} lines; shown lines {}-{lines}",
            lines - 19
        )),
        "{said}"
    );
    let (bytes, _) = answer(&["--stream", "stderr", "--bytes", "200000000:200000037"]);
    let at = 200_000_000 % line.len();
    assert_eq!(text(&bytes), format!("{}{}", &line[at..], &line[..at]));
    let (head, _) = answer(&["--stream", "stdout", "--head", "1"]);
    assert_eq!(text(&head), "end\n");
    // A grep stops at its max count, having read what it needed.
    let (first, said) = answer(&["--stream", "stderr", "--grep", "^abc", "-m", "2"]);
    assert_eq!(text(&first), format!("1:{line}2:{line}"));
    assert!(said.contains("stopped at the max count"), "{said}");
}

/// The blocks the index marks: each entry's stdout byte count.
fn stdout_marks(index: &[u8]) -> Vec<usize> {
    index[8..]
        .chunks_exact(48)
        .map(|entry| u64::from_be_bytes(entry[8..16].try_into().unwrap()) as usize)
        .collect()
}

/// `--grep` with `--json`: the answer but for the bytes of output it
/// read, and those.
fn grep_read(t: &Env, id: &str, ask: &[&str]) -> (String, u64) {
    let mut args = vec!["log", id, "--raw", "1", "--json", "--grep"];
    args.extend_from_slice(ask);
    let out = t.run(&args);
    assert!(
        out.status.code().is_some_and(|c| c <= 1),
        "{ask:?}: {}",
        text(&out.stderr)
    );
    let mut json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let read = json["read_bytes"].as_u64().unwrap();
    json["read_bytes"] = serde_json::Value::Null;
    (json.to_string(), read)
}

#[test]
fn a_grep_through_the_filter_answers_as_grep_whether_it_is_whole_damaged_or_gone() {
    let t = Env::new("windows-filter");
    let id = t.new_session();
    let words = "of an output long enough that its lines are cut by the blocks of the index";
    let n = 200_000;
    // One line has a word of its own.
    let rare = 150_000;
    let command = format!("seq -f 'line %g {words}' 1 {n} | sed 's/^line {rare} /&zebra-quartz /'");
    t.ok(&["send", "--wait", &id, &command]);
    filter_written(&t, &id);
    let all: String = (1..=n)
        .map(|i| match i == rare {
            true => format!("line {i} zebra-quartz {words}\n"),
            false => format!("line {i} {words}\n"),
        })
        .collect();
    let dir = t.session_dir(&id);
    let index = std::fs::read(dir.join("index/r1.idx")).unwrap();
    let marks = stdout_marks(&index);
    assert!(marks.len() >= 10, "an index of blocks: {marks:?}");
    // A literal across a block's end: a line's start (its number) to
    // just past the end.
    let across = marks
        .iter()
        .find_map(|&edge| {
            let start = all[..edge].rfind('\n').map_or(0, |at| at + 1);
            (12..=48)
                .contains(&(edge - start))
                .then(|| &all[start..edge + 3])
        })
        .expect("a block's end a little way into a line");
    let asks: Vec<(Vec<String>, Vec<&str>)> = vec![
        (vec!["zebra-quartz".into()], vec!["-F", "zebra-quartz"]),
        (vec![across.into()], vec!["-F", across]),
        (
            vec!["line 777 of|line 159999 of".into(), "-C".into(), "2".into()],
            vec!["-E", "-C", "2", "line 777 of|line 159999 of"],
        ),
        (vec!["(?i)LINE 4242 OF".into()], vec!["-i", "LINE 4242 OF"]),
        (vec!["no line says this".into()], vec!["no line says this"]),
        (
            vec![".".into(), "-m".into(), "500".into()],
            vec!["-m", "500", "."],
        ),
    ];
    let answers = |state: &str| -> Vec<(String, u64)> {
        asks.iter()
            .map(|(ask, grep_args)| {
                let ask: Vec<&str> = ask.iter().map(String::as_str).collect();
                let mut args = vec!["log", &id, "--raw", "1", "--grep"];
                args.extend_from_slice(&ask);
                let out = t.run(&args);
                let mut expected_args = vec!["-n"];
                expected_args.extend_from_slice(grep_args);
                let grep =
                    filter("grep", &expected_args, all.as_bytes()).expect("grep is installed");
                assert_eq!(text(&out.stdout), text(&grep.stdout), "{ask:?} {state}");
                assert_eq!(out.status.code(), grep.status.code(), "{ask:?} {state}");
                grep_read(&t, &id, &ask)
            })
            .collect()
    };
    let whole = answers("with the filter");
    assert!(
        whole[1].0.contains(across),
        "the literal across the blocks is found"
    );
    let tri = dir.join("index/r1.tri");
    let bytes = std::fs::read(&tri).unwrap();
    // A flipped bit in the third block's bitmap: its CRC refuses it, and
    // that block is read.
    let entry = (bytes.len() - 8) / marks.len();
    let mut damaged = bytes.clone();
    damaged[8 + 2 * entry + 100] ^= 0x01;
    std::fs::write(&tri, &damaged).unwrap();
    let hurt = answers("with a damaged filter");
    std::fs::remove_file(&tri).unwrap();
    let gone = answers("without a filter");
    let size = all.len() as u64;
    for (i, ((w, h), g)) in whole.iter().zip(&hurt).zip(&gone).enumerate() {
        assert_eq!((&w.0, &h.0), (&g.0, &g.0), "ask {i}");
    }
    // The rare literal read a block or two, more with the damage, all
    // without the filter.
    assert!(whole[0].1 < size / 2, "read {} of {size}", whole[0].1);
    assert!(hurt[0].1 > whole[0].1, "{} then {}", whole[0].1, hurt[0].1);
    assert!(gone[0].1 >= size);
}

#[test]
fn a_large_outputs_rare_lines_are_grepped_from_a_few_mib() {
    let t = Env::new("windows-rare");
    let id = t.new_session();
    let line = "abcdefghijklmnopqrstuvwxyz0123456789\n";
    let half: u64 = 48 << 20;
    let yes = "yes abcdefghijklmnopqrstuvwxyz0123456789";
    let command = format!(
        "{yes} | head -c {half}; echo middle-needle; {yes} | head -c {half}; echo end-needle"
    );
    run_unread(&t, &id, &command);
    filter_written(&t, &id);
    let worker = t.worker(&id);
    let before = read_by(worker);
    let (found, said) = window(&t, &id, 1, &["--grep", "(middle|end)-needle$"]);
    let read = read_by(worker) - before;
    let full = half / line.len() as u64;
    let cut = &line[..(half % line.len() as u64) as usize];
    let middle = full + 1;
    let end = middle + full + 1;
    let expected = format!("{middle}:{cut}middle-needle\n{end}:{cut}end-needle\n");
    assert_eq!(text(&found), expected);
    assert!(said.contains("2 matching lines"), "{said}");
    const FEW_MIB: u64 = 8 << 20;
    assert!(read < FEW_MIB, "the grep read {read} bytes of {}", 2 * half);
}
