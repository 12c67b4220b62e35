//! What the command line passes and says: arguments byte for byte, the
//! run `send --wait` queued, a removed session, a wrong setting.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt as _;

use crate::support::Env;

fn bytes(raw: &[u8]) -> &OsStr {
    OsStr::from_bytes(raw)
}

#[test]
fn arguments_that_are_not_utf8_reach_the_command_byte_for_byte() {
    let env = Env::new("bytes");
    let work = env.dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(work.join(bytes(b"caf\xe9.txt")), "a\nb\n").unwrap();
    let id = env
        .ok(&["new", "--cwd", work.to_str().unwrap()])
        .trim()
        .to_string();

    let counted = env
        .command(&["bash", &id, "--", "wc", "-l"])
        .arg(bytes(b"caf\xe9.txt"))
        .output()
        .unwrap();
    assert_eq!(
        (counted.status.code(), counted.stdout.as_slice()),
        (Some(0), &b"2 caf\xe9.txt\n"[..]),
        "{}",
        String::from_utf8_lossy(&counted.stderr)
    );

    // Every byte, quotes and backslashes too, through `send --wait`.
    let word = b"\xff'\\\x01 x\xe9";
    let printed = env
        .command(&["send", "--wait", &id, "--", "printf", "%s"])
        .arg(bytes(word))
        .output()
        .unwrap();
    assert_eq!(printed.status.code(), Some(0));
    assert_eq!(printed.stdout, word);

    // One argument is a command line: a byte outside quoting is kept.
    let catted = env
        .command(&["bash", &id, "--"])
        .arg(bytes(b"cat caf\xe9.txt"))
        .output()
        .unwrap();
    assert_eq!(catted.stdout, b"a\nb\n");

    // Inside quotes too.
    let quoted = env
        .command(&["bash", &id, "--"])
        .arg(bytes(b"cat 'caf\xe9.txt' \"caf\xe9.txt\""))
        .output()
        .unwrap();
    assert_eq!(quoted.stdout, b"a\nb\na\nb\n");

    // In a substitution it cannot be written as text: refused in one line.
    let refused = env
        .command(&["bash", &id, "--"])
        .arg(bytes(b"cat $(echo caf\xe9.txt)"))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(125), "{said}");
    assert_eq!(said.lines().count(), 1, "{said}");
    assert!(said.contains("separate words after `--`"), "{said}");

    // The transcript keeps the line as the shell read it, escaped.
    let log = String::from_utf8_lossy(&env.run(&["log", &id]).stdout).into_owned();
    assert!(log.contains("[bash 1] $ wc -l $'caf\\xe9.txt'\n"), "{log}");
    assert!(log.contains("[bash 3] $ cat caf$'\\xe9'.txt\n"), "{log}");
}

#[test]
fn send_wait_says_which_run_it_queued_on_standard_error() {
    let env = Env::new("send-wait-run");
    let id = env.ok(&["new"]).trim().to_string();
    env.ok(&["send", &id, "true"]);
    let waited = env.run(&["send", "--wait", &id, "echo hi"]);
    assert_eq!(waited.status.code(), Some(0));
    assert_eq!(waited.stdout, b"hi\n");
    assert_eq!(
        String::from_utf8_lossy(&waited.stderr),
        "eukhe: queued as run 2\n"
    );
    assert_eq!(env.ok(&["log", &id, "--raw", "2"]), "hi\n");
}

#[test]
fn every_command_words_a_removed_session_one_way() {
    let env = Env::new("removed-wording");
    let id = env.ok(&["new", "--name", "gone"]).trim().to_string();
    env.ok(&["bash", "gone", "--", "true"]);
    env.ok(&["rm", "gone"]);
    for reference in ["gone", id.as_str()] {
        let commands: [&[&str]; 7] = [
            &["attach", reference],
            &["bash", reference, "--", "true"],
            &["send", reference, "true"],
            &["send", "--wait", reference, "true"],
            &["log", reference],
            &["cancel", reference],
            &["queue", reference],
        ];
        let expected = format!("eukhe: session {reference} no longer exists: it was removed\n");
        for args in commands {
            let out = env.run(args);
            assert_eq!(out.status.code(), Some(125), "{args:?}");
            assert_eq!(String::from_utf8_lossy(&out.stderr), expected, "{args:?}");
        }
        let out = env.run(&["rm", reference]);
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            format!(
                "eukhe: rm {reference}: session {reference} no longer exists: it was removed\n"
            )
        );
    }
    // A name never given says so differently.
    let out = env.run(&["bash", "never-made", "--", "true"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "eukhe: no session \"never-made\": `eukhe ls` lists them\n"
    );
}

#[test]
fn a_wrong_setting_is_named_with_the_values_it_takes_in_one_line() {
    for (name, line, said) in [
        (
            "watchdog-type",
            "worker_watchdog_ms = \"x\"\n",
            "config.toml: line 1: worker_watchdog_ms = \"x\": expected milliseconds, at least 2000",
        ),
        (
            "lost-exit-negative",
            "worker_lost_exit_ms = -3\n",
            "config.toml: line 1: worker_lost_exit_ms = -3: expected milliseconds (at least 69000) or \"never\"",
        ),
        (
            "idle-stop-negative",
            "idle_stop_ms = -5\n",
            "config.toml: line 1: idle_stop_ms = -5: expected milliseconds (at least 1) or \"never\"",
        ),
        (
            "spare-type",
            "spare_session = \"yes\"\n",
            "config.toml: line 1: spare_session = \"yes\": expected true or false",
        ),
        (
            "unknown-key",
            "colour = 1\n",
            "config.toml: line 1 (colour = 1): `colour` is no setting: the settings are worker_lost_exit_ms, worker_watchdog_ms, cancel_grace_ms, output_sync_ms, idle_stop_ms, spare_session, detach_key, limits",
        ),
        (
            "limits-memory",
            "[limits]\nmemory_max = \"64m\"\n",
            "limits.memory_max = \"64m\": expected bytes, or a whole number with a K, M, G or T suffix (powers of 1024), or \"infinity\"",
        ),
        (
            "detach-key",
            "detach_key = \"C-[\"\n",
            "config.toml: line 1: detach_key = \"C-[\": expected a control key (C-a to C-z except C-[, or C-@, C-\\, C-], C-^, C-_, C-Space), alone or followed by one more key (\"C-a d\"), or \"none\"",
        ),
    ] {
        let env = Env::new(name).with_config(line);
        let out = env.run(&["new"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.trim_end().ends_with(said), "{stderr}");
    }
}

#[test]
fn a_command_line_eukhe_cannot_take_is_one_line_naming_the_usage() {
    let env = Env::new("usage-line");
    for (args, said) in [
        (
            &["bash", "s", "--foo", "--", "true"][..],
            "eukhe: unexpected argument '--foo' found (to pass '--foo' as a value, use '-- --foo'); `eukhe bash --help` shows the usage\n",
        ),
        (
            &["log", "s", "--tail", "x"][..],
            "eukhe: invalid value 'x' for '--tail <N>': invalid digit found in string; `eukhe log --help` shows the usage\n",
        ),
    ] {
        let out = env.run(args);
        assert_eq!(out.status.code(), Some(125), "{args:?}");
        assert_eq!(String::from_utf8_lossy(&out.stderr), said, "{args:?}");
    }
    // A session is named by text: a name that is not UTF-8 is refused so.
    let out = env
        .command(&["bash"])
        .arg(bytes(b"s\xe9"))
        .args(["--", "true"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{said}");
    assert_eq!(said.lines().count(), 1, "{said}");
    // Help is no failure.
    let help = env.run(&["bash", "--help"]);
    assert_eq!(help.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&help.stdout).contains("Usage: eukhe bash"));
}

#[test]
fn a_typed_line_that_is_not_utf8_is_queued_as_it_is_and_input_goes_on() {
    use std::io::Write as _;
    use std::process::Stdio;
    let env = Env::new("attach-bytes");
    let id = env.ok(&["new"]).trim().to_string();
    let mut attach = env
        .command(&["attach", &id])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut typed = attach.stdin.take().unwrap();
    typed
        .write_all(b"printf '%s\\n' caf\xe9\necho $(echo \xe9)\necho after\n")
        .unwrap();
    drop(typed);
    let out = attach.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{said}");
    // The line with the byte in a substitution is refused in one line;
    // the lines around it run.
    assert_eq!(said.lines().count(), 1, "{said}");
    assert!(said.contains("cannot be written as text"), "{said}");
    let raw = env.run(&["log", &id, "--raw", "1"]);
    assert_eq!(raw.stdout, b"caf\xe9\n");
    assert_eq!(env.ok(&["log", &id, "--raw", "2"]), "after\n");
}
