//! A damaged, emptied or removed transcript through the real binary:
//! damage reads as one notice where it is, in every form of `log`, on a
//! resting session and a live one; its bytes are copied aside once; a
//! damaged file header hides nothing; and input numbers are never given
//! twice, whatever happens to the file.

use std::io::Write as _;
// Shared with the other suites; this one uses part of it.
#[allow(dead_code)]
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use crate::support::Env;

const NOTICE: &str = "damaged transcript: ";

/// The notice of a transcript emptied, removed or cut short.
const LOST: &str = "the transcript lost history: ";

pub(crate) fn transcript_path(env: &Env, id: &str) -> PathBuf {
    env.dir.join("state/sessions").join(id).join("transcript3")
}

/// The records of an undamaged v3 transcript: (offset, payload).
pub(crate) fn records(path: &Path) -> Vec<(usize, Vec<u8>)> {
    let bytes = std::fs::read(path).unwrap();
    assert_eq!(&bytes[..8], b"EUKHETR3");
    let mut out = Vec::new();
    let mut at = 16;
    while at + 25 <= bytes.len() {
        let len = u32::from_be_bytes(bytes[at + 17..at + 21].try_into().unwrap()) as usize;
        out.push((at, bytes[at + 25..at + 25 + len].to_vec()));
        at += 25 + len;
    }
    out
}

/// The names of the copies of damaged bytes beside the transcript.
fn copies(path: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .flatten()
        .map(|f| f.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("transcript.damaged-"))
        .collect();
    names.sort();
    names
}

pub(crate) fn overwrite(path: &Path, at: usize, with: &[u8]) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[at..at + with.len()].copy_from_slice(with);
    std::fs::write(path, &bytes).unwrap();
}

/// The numbers of the user bashes `log` shows, in order.
fn bash_numbers(log: &str) -> Vec<u64> {
    log.lines()
        .filter_map(|line| line.strip_prefix("[bash ")?.split_once("] $ "))
        .map(|(number, _)| number.parse().unwrap())
        .collect()
}

/// `log` of a transcript whose entry 5's output record is damaged: every
/// other entry, and one notice exactly where the damage is.
#[track_caller]
fn shows_the_notice_in_place(log: &str, offset: usize, first: usize) {
    assert_eq!(log.matches(NOTICE).count(), 1, "{log}");
    let notice = format!("! {NOTICE}");
    let at = log.find(&notice).unwrap();
    assert!(
        log[at..].contains(&format!(" bytes at offset {offset} ")),
        "{log}"
    );
    let started = log.find("[bash 5] $ echo entry-5\n").expect("bash 5 shown");
    let ended = log.find("[bash 5 exited 0]").expect("its end shown");
    assert!(started < at && at < ended, "not in its place: {log}");
    assert!(!log.contains("\nentry-5\n"), "{log}");
    for i in (first..=10).filter(|&i| i != 5) {
        assert!(log.contains(&format!("\nentry-{i}\n")), "entry {i}: {log}");
    }
}

#[test]
fn a_damaged_record_reads_as_one_notice_in_its_place_in_every_form_of_log() {
    let env = Env::new("damage-in-place");
    let id = env.ok(&["new"]).trim().to_string();
    for i in 1..=10 {
        env.ok(&["bash", &id, "--", &format!("echo entry-{i}")]);
    }
    env.ok(&["shutdown", "--force"]);
    let path = transcript_path(&env, &id);
    let (offset, _) = records(&path)
        .into_iter()
        .find(|(_, payload)| payload.ends_with(b"entry-5\n"))
        .expect("entry 5's output record");
    overwrite(&path, offset + 25 + 20, b"XXXX");
    let damaged = std::fs::read(&path).unwrap();

    // A resting session: the daemon reads it.
    shows_the_notice_in_place(&env.log(&id), offset, 1);
    let kept = path.with_file_name(format!("transcript.damaged-{offset}"));
    assert_eq!(copies(&path), vec![format!("transcript.damaged-{offset}")]);
    let mode = std::fs::metadata(&kept).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let copy = std::fs::read(&kept).unwrap();
    assert_eq!(copy, &damaged[offset..offset + copy.len()]);
    // The last 20 entries: bash 4's output and end, bashes 5 to 10, the
    // notice in the place of bash 5's output.
    let tail = env.ok(&["log", &id, "--tail", "20"]);
    assert!(tail.starts_with("entry-4\n[bash 4 exited 0]\n"), "{tail}");
    shows_the_notice_in_place(&tail, offset, 6);
    let raw = env.run(&["log", &id, "--raw", "5"]);
    let said = String::from_utf8_lossy(&raw.stderr);
    assert_eq!(raw.status.code(), Some(125), "{said}");
    assert_eq!(said.lines().count(), 1, "{said}");
    assert!(said.contains("input 5") && said.contains(NOTICE), "{said}");
    let json: serde_json::Value = serde_json::from_str(&env.ok(&["log", &id, "--json"])).unwrap();
    let lost: Vec<&serde_json::Value> = json
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e.get("lost").is_some())
        .collect();
    assert_eq!(lost.len(), 1, "{json:#}");
    assert_eq!(lost[0]["lost"]["transcript_offset"], offset as u64);

    // A live session: its worker reads it, and stores no second notice.
    assert_eq!(env.ok(&["bash", &id, "--", "echo after"]), "after\n");
    let log = env.log(&id);
    shows_the_notice_in_place(&log, offset, 1);
    assert!(
        log.ends_with("[bash 11] $ echo after\nafter\n[bash 11 exited 0]\n"),
        "{log}"
    );
    assert_eq!(
        env.run(&["log", &id, "--raw", "5"]).status.code(),
        Some(125)
    );
    // `attach` replays it so too.
    let mut attach = env
        .command(&["attach", &id])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut typed = attach.stdin.take().unwrap();
    typed.write_all(b"echo attached\n").unwrap();
    drop(typed);
    let attached = attach.wait_with_output().unwrap();
    let shown = String::from_utf8_lossy(&attached.stdout);
    assert!(attached.status.success(), "{shown}");
    shows_the_notice_in_place(&shown, offset, 1);
    assert!(shown.contains("\nattached\n"), "{shown}");
    env.ok(&["shutdown", "--force"]);
    env.ok(&["bash", &id, "--", "true"]);
    shows_the_notice_in_place(&env.log(&id), offset, 1);
    assert_eq!(copies(&path).len(), 1, "copied once");
    assert_eq!(
        std::fs::read(&path).unwrap()[..damaged.len()],
        damaged[..],
        "never moved"
    );
}

#[test]
fn a_damaged_file_header_hides_nothing_and_numbering_goes_on() {
    let env = Env::new("damage-header");
    let id = env.ok(&["new"]).trim().to_string();
    for i in 1..=3 {
        env.ok(&["bash", &id, "--", &format!("echo entry-{i}")]);
    }
    env.ok(&["shutdown", "--force"]);
    let path = transcript_path(&env, &id);
    // One byte of the file's sync marker.
    let byte = std::fs::read(&path).unwrap()[10];
    overwrite(&path, 10, &[byte ^ 0x5a]);

    let log = env.log(&id);
    assert_eq!(bash_numbers(&log), vec![1, 2, 3], "{log}");
    assert_eq!(log.matches(NOTICE).count(), 1, "{log}");
    assert!(
        log.starts_with(&format!("! {NOTICE}16 bytes at offset 0 ")),
        "{log}"
    );
    assert_eq!(copies(&path), vec!["transcript.damaged-0".to_string()]);

    env.ok(&["bash", &id, "--", "echo entry-4"]);
    let log = env.log(&id);
    assert_eq!(bash_numbers(&log), vec![1, 2, 3, 4], "{log}");
    assert_eq!(log.matches(NOTICE).count(), 1, "{log}");
    assert_eq!(copies(&path).len(), 1, "copied once");
}

#[test]
fn an_emptied_or_removed_transcript_never_gives_a_number_twice() {
    let env = Env::new("damage-emptied");
    let id = env.ok(&["new"]).trim().to_string();
    for i in 1..=3 {
        env.ok(&["bash", &id, "--", &format!("echo entry-{i}")]);
    }
    env.ok(&["shutdown", "--force"]);
    let path = transcript_path(&env, &id);
    std::fs::write(&path, b"").unwrap();
    // Before a worker opens it, a reader of the resting session says so.
    let resting = env.log(&id);
    assert_eq!(bash_numbers(&resting), Vec::<u64>::new(), "{resting}");
    assert_eq!(resting.matches(LOST).count(), 1, "{resting}");

    env.ok(&["bash", &id, "--", "echo after-emptied"]);
    let log = env.log(&id);
    let numbers = bash_numbers(&log);
    assert_eq!(numbers.len(), 1, "{log}");
    assert!(numbers[0] > 3, "a number given twice: {log}");
    assert_eq!(log.matches(LOST).count(), 1, "{log}");

    env.ok(&["shutdown", "--force"]);
    std::fs::remove_file(&path).unwrap();
    let resting = env.log(&id);
    assert_eq!(resting.matches(LOST).count(), 1, "{resting}");
    assert!(resting.starts_with(&format!("! {LOST}")), "{resting}");
    env.ok(&["bash", &id, "--", "echo after-removed"]);
    let log = env.log(&id);
    let again = bash_numbers(&log);
    assert_eq!(again.len(), 1, "{log}");
    assert!(again[0] > numbers[0], "a number given twice: {log}");
    assert_eq!(log.matches(LOST).count(), 1, "{log}");

    // A later wake of the intact file numbers on as usual.
    env.ok(&["shutdown", "--force"]);
    env.ok(&["bash", &id, "--", "echo later"]);
    let log = env.log(&id);
    assert_eq!(bash_numbers(&log), vec![again[0], again[0] + 1], "{log}");
    assert_eq!(log.matches(LOST).count(), 1, "{log}");
    env.ok(&["shutdown", "--force"]);
    assert_eq!(env.log(&id).matches(LOST).count(), 1, "at rest: {log}");
}

/// A few rounds of the transcript fuzz test through the binary: random
/// damage (the header included) reads, in `log --json`, as the entries a
/// reader of the file keeps and one marked notice per damaged region, each
/// copied aside; and the next input's number is above every number given.
/// (Each round damages the file as it is: a file put back as it was
/// before inputs were given is another matter, see `session::numbers`.)
#[test]
fn random_damage_through_the_binary_reads_as_the_library_reads_it() {
    let env = Env::new("damage-rounds");
    let id = env.ok(&["new"]).trim().to_string();
    for i in 1..=20 {
        env.ok(&["bash", &id, "--", &format!("echo entry-{i}")]);
    }
    env.ok(&["shutdown", "--force"]);
    let path = transcript_path(&env, &id);
    let mut seed = 0x00c0_ffee_u64;
    let mut random = |below: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % below as u64) as usize
    };
    let mut given = 20;
    // Each round damages the file as the rounds before left it.
    for round in 0..4 {
        let mut bytes = std::fs::read(&path).unwrap();
        let at = match round {
            0 => random(16),
            _ => 16 + random(bytes.len() - 16),
        };
        let end = (at + 1 + random(40)).min(bytes.len());
        for byte in &mut bytes[at..end] {
            *byte ^= 1 + random(255) as u8;
        }
        std::fs::write(&path, &bytes).unwrap();
        let parsed = eukhe::session::transcript::parse(&bytes);

        let json: serde_json::Value =
            serde_json::from_str(&env.ok(&["log", &id, "--json"])).unwrap();
        let entries = json.as_array().unwrap();
        let lost: Vec<u64> = entries
            .iter()
            .filter_map(|e| e.get("lost")?["transcript_offset"].as_u64())
            .collect();
        let regions: Vec<u64> = parsed.damage.iter().map(|r| r.0).collect();
        assert_eq!(lost, regions, "round {round}, damage at {at}");
        let seqs: Vec<u64> = entries
            .iter()
            .filter(|e| e.get("lost").is_none())
            .map(|e| e["seq"].as_u64().unwrap())
            .collect();
        let kept: Vec<u64> = parsed.entries.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, kept, "round {round}, damage at {at}");
        let kept = copies(&path);
        for offset in &regions {
            let name = format!("transcript.damaged-{offset}");
            assert!(kept.contains(&name), "round {round}: {name} in {kept:?}");
        }

        env.ok(&["bash", &id, "--", "echo next"]);
        let numbers = bash_numbers(&env.log(&id));
        let next = *numbers.last().unwrap();
        assert!(next > given, "round {round}: bash {next} after {given}");
        given = next;
        env.ok(&["shutdown", "--force"]);
    }
}
