//! The transcript: damage keeps every later entry, older formats open,
//! and a restarted worker reads only what its checkpoint has not seen.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{kill_worker_and_wait_for_the_next, records};
use crate::support::{wait_until, Env};

fn transcript_path(env: &Env, id: &str) -> PathBuf {
    env.dir.join("state/sessions").join(id).join("transcript3")
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

fn worker_log(env: &Env, id: &str) -> String {
    std::fs::read_to_string(env.dir.join("state/sessions").join(id).join("worker.log"))
        .unwrap_or_default()
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
