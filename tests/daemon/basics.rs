//! Sessions run commands: words after the separator, queued runs in
//! order, and a torn transcript tail cut and reported once.

use crate::support::Env;

#[test]
fn sessions_run_commands_and_keep_their_namespace() {
    let env = Env::new("basics");
    let id = env
        .ok(&["new", "--name", "basics", "--cwd", "/"])
        .trim()
        .to_string();
    assert_eq!(id.len(), 8, "{id}");
    let out = env.ok(&[
        "bash",
        &id,
        "--",
        "cd /tmp && export GREETING=hello && echo moved",
    ]);
    assert_eq!(out, "moved\n");
    let out = env.ok(&["bash", "basics", "--", "echo $GREETING from $(pwd)"]);
    assert_eq!(out, "hello from /tmp\n");
    let failing = env.run(&["send", &id, "echo run output; exit 3", "--wait"]);
    assert_eq!(failing.status.code(), Some(3));
    assert_eq!(String::from_utf8_lossy(&failing.stdout), "run output\n");
    let log = env.log(&id);
    assert!(
        // Two user bashes took inputs 1 and 2: inputs share one sequence.
        log.contains("[run 3] $ echo run output; exit 3\nrun output\n[run 3 exited 3]"),
        "{log}"
    );
    let json: serde_json::Value = serde_json::from_str(&env.ok(&["log", &id, "--json"])).unwrap();
    assert!(json
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["kind"] == "run_finished" && e["status"] == 3));
    assert_eq!(env.session(&id)["state"], "idle");
}

#[test]
fn several_words_after_the_separator_are_a_command_and_its_arguments() {
    let env = Env::new("argv");
    let id = env.ok(&["new"]).trim().to_string();
    let printed = env.ok(&["bash", &id, "--", "printf", "%s\n", "a b", "c", "it's"]);
    assert_eq!(printed, "a b\nc\nit's\n");
    let status = env.run(&["bash", &id, "--", "sh", "-c", "exit 3"]).status;
    assert_eq!(status.code(), Some(3));
    // One argument is a command line, as before.
    assert_eq!(
        env.ok(&["bash", &id, "--", "echo one && echo two"]),
        "one\ntwo\n"
    );
}

#[test]
fn queued_runs_go_one_at_a_time_in_order() {
    let env = Env::new("order");
    let id = env.ok(&["new"]).trim().to_string();
    for i in 1..=3 {
        env.ok(&["send", &id, &format!("sleep 0.1; echo run {i}")]);
    }
    let last = env.run(&["send", &id, "echo last", "--wait"]);
    assert!(last.status.success());
    let log = env.log(&id);
    let positions: Vec<usize> = (1..=3)
        .map(|i| log.find(&format!("\nrun {i}\n")).unwrap())
        .collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{log}");
}

#[test]
fn a_torn_transcript_tail_is_cut_and_reported_once() {
    use std::io::Write;
    let env = Env::new("torn");
    let id = env.ok(&["new"]).trim().to_string();
    env.ok(&["bash", &id, "--", "echo acknowledged"]);
    env.ok(&["shutdown", "--force"]);
    let transcript = env.dir.join("state/sessions").join(&id).join("transcript3");
    let good = std::fs::metadata(&transcript).unwrap().len();
    // A record header promising 200 bytes, and only a few of them: what a
    // crash in the middle of an append leaves (the file's sync marker is
    // bytes 8..16 of its header).
    let marker = std::fs::read(&transcript).unwrap()[8..16].to_vec();
    let mut torn = marker;
    torn.extend_from_slice(&1000u64.to_be_bytes());
    torn.push(1);
    torn.extend_from_slice(&200u32.to_be_bytes());
    torn.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef, b'{', b'"']);
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&transcript)
        .unwrap();
    file.write_all(&torn).unwrap();
    drop(file);
    // A reader of the resting session says so, at its end.
    let resting = env.log(&id);
    assert_eq!(resting.matches("torn tail").count(), 1, "{resting}");
    assert!(
        resting.ends_with(&format!(
            "27 bytes at offset {good}; the session's next start cuts them off and keeps them in {}\n",
            transcript.with_file_name(format!("transcript.damaged-{good}")).display()
        )),
        "{resting}"
    );
    assert_eq!(env.ok(&["bash", &id, "--", "echo after"]), "after\n");
    let log = env.log(&id);
    assert!(log.contains("acknowledged"), "{log}");
    assert_eq!(log.matches("torn tail").count(), 1, "{log}");
    assert!(
        log.contains(&format!("27 bytes at offset {good} were cut off")),
        "{log}"
    );
    // Cut off, but kept aside first, where the notice says.
    let kept = transcript.with_file_name(format!("transcript.damaged-{good}"));
    assert!(log.contains(&kept.display().to_string()), "{log}");
    assert_eq!(std::fs::read(&kept).unwrap(), torn);
}
