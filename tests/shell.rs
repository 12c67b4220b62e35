//! The command's own shell and its directory (issue 51, items 4 to 6),
//! through the real binary: a command runs as `bash -c COMMAND` would run
//! it (its own `$$`, `$0`, `$LINENO` and error messages; `kill $$` ends
//! that run alone), and never in another directory than the session's.

use std::process::Output;
use std::time::Duration;

use crate::support::{wait_until, Env};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A session in `cwd` (the daemon's own directory when `None`).
fn new_session(env: &Env, cwd: Option<&std::path::Path>) -> String {
    let mut args = vec!["new".to_string()];
    if let Some(cwd) = cwd {
        args.push("--cwd".into());
        args.push(cwd.display().to_string());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    env.ok(&args).trim().to_string()
}

fn bash(env: &Env, id: &str, command: &str) -> Output {
    env.run(&["bash", id, "--", command])
}

/// Wait until the session has no run going (so `log` holds the last end).
fn idle(env: &Env, id: &str) {
    wait_until(Duration::from_secs(10), "the session is idle", || {
        env.session(id)["state"] == "idle"
    });
}

#[test]
fn dollar_dollar_is_the_commands_own_shell() {
    let env = Env::new("shell-pid");
    let id = new_session(&env, None);
    // `$$` is this command's shell: its BASHPID, and the parent of a child.
    let out = bash(
        &env,
        &id,
        "echo $$ $BASHPID $0; sh -c 'cut -d\" \" -f4 /proc/$$/stat'",
    );
    assert!(out.status.success(), "{out:?}");
    let stdout = text(&out.stdout);
    let words: Vec<&str> = stdout.split_whitespace().collect();
    assert_eq!(words.len(), 4, "{stdout:?}");
    assert_eq!(words[0], words[1], "$$ is not $BASHPID: {stdout:?}");
    assert_eq!(words[2], "bash", "$0: {stdout:?}");
    assert_eq!(words[3], words[0], "a child's parent is not $$: {stdout:?}");
    // The next command has a shell of its own.
    let next = text(&bash(&env, &id, "echo $$").stdout);
    assert_ne!(next.trim(), words[0], "two commands share a shell");
}

#[test]
fn kill_dollar_dollar_ends_the_run_and_nothing_else() {
    let env = Env::new("shell-kill");
    let id = new_session(&env, None);
    assert!(bash(&env, &id, "KEEP=kept").status.success());
    let killed = bash(&env, &id, "kill -9 $$; echo after-kill");
    assert_eq!(killed.status.code(), Some(137), "{killed:?}");
    assert!(!text(&killed.stdout).contains("after-kill"), "{killed:?}");
    let termed = bash(&env, &id, "kill $$; echo after-kill");
    assert_eq!(termed.status.code(), Some(143), "{termed:?}");
    assert!(!text(&termed.stdout).contains("after-kill"), "{termed:?}");
    // The session works on, with its state.
    let next = bash(&env, &id, "echo \"next:$KEEP\"");
    assert!(next.status.success(), "{next:?}");
    assert_eq!(text(&next.stdout), "next:kept\n");
    let queued = env.run(&["send", &id, "kill -9 $$; echo after-kill", "--wait"]);
    assert_eq!(queued.status.code(), Some(137), "{queued:?}");
    assert_eq!(text(&bash(&env, &id, "echo ok").stdout), "ok\n");
}

#[test]
fn lineno_and_error_messages_read_as_in_bash_dash_c() {
    let env = Env::new("shell-lineno");
    let id = new_session(&env, None);
    // A first command, and a later one: both count from 1.
    for _ in 0..2 {
        let out = bash(&env, &id, "echo $LINENO\necho $LINENO");
        assert_eq!(text(&out.stdout), "1\n2\n", "{out:?}");
    }
    let broken = bash(&env, &id, "echo )");
    assert_eq!(broken.status.code(), Some(2), "{broken:?}");
    assert_eq!(
        text(&broken.stderr),
        "bash: -c: line 1: syntax error near unexpected token `)'\nbash: -c: line 1: `echo )'\n"
    );
    let unfinished = bash(&env, &id, "echo a\nif");
    let stderr = text(&unfinished.stderr);
    assert!(!stderr.contains("eval"), "{stderr:?}");
    assert!(
        stderr.contains("bash: -c: line 3: syntax error: unexpected end of file"),
        "{stderr:?}"
    );
    let missing = bash(&env, &id, "no-such-command-here");
    assert_eq!(missing.status.code(), Some(127));
    // Bash itself names the line or not, as the command's words have it.
    let stderr = text(&missing.stderr);
    assert!(
        [
            "bash: no-such-command-here: command not found\n",
            "bash: line 1: no-such-command-here: command not found\n"
        ]
        .contains(&stderr.as_str()),
        "{stderr:?}"
    );
    // A syntax error leaves the state as it was.
    assert!(bash(&env, &id, "X=1").status.success());
    bash(&env, &id, "X=2; (");
    assert_eq!(text(&bash(&env, &id, "echo $X").stdout), "1\n");
}

#[test]
fn a_deleted_directory_stops_the_command_and_ls_says_it_is_missing() {
    let env = Env::new("shell-gone");
    let work = env.dir.join("w");
    let sub = work.join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    let id = new_session(&env, Some(&sub));
    assert_eq!(
        text(&bash(&env, &id, "pwd").stdout),
        format!("{}\n", sub.display())
    );
    std::fs::remove_dir_all(&work).unwrap();
    for command in ["pwd", "touch x"] {
        let out = bash(&env, &id, command);
        assert_eq!(out.status.code(), Some(1), "{command}: {out:?}");
        assert_eq!(text(&out.stdout), "", "{command} ran");
        assert_eq!(
            text(&out.stderr),
            format!("bash: cd: {}: No such file or directory\n", sub.display())
        );
    }
    idle(&env, &id);
    let log = env.log(&id);
    let notice = format!(
        "the command did not run: the session's directory {} no longer exists",
        sub.display()
    );
    assert_eq!(log.matches(&notice).count(), 2, "one notice a run: {log}");
    let listed = env.ok(&["ls"]);
    assert!(
        listed.contains(&format!("{} (missing)", sub.display())),
        "{listed}"
    );
    // Back again: commands run there once more.
    std::fs::create_dir_all(&sub).unwrap();
    std::fs::write(sub.join("f"), "back\n").unwrap();
    let out = bash(&env, &id, "pwd; cat f");
    assert_eq!(
        text(&out.stdout),
        format!("{}\nback\n", sub.display()),
        "{out:?}"
    );
}

#[test]
fn a_directory_replaced_at_its_path_is_the_one_used() {
    let env = Env::new("shell-replaced");
    let dir = env.dir.join("d");
    std::fs::create_dir_all(&dir).unwrap();
    let id = new_session(&env, Some(&dir));
    assert!(bash(&env, &id, "echo one > f").status.success());
    // Another directory takes the path (a new inode), as `git checkout`
    // or `rm -rf d && mkdir d` would make it.
    std::fs::rename(&dir, env.dir.join("old")).unwrap();
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("f"), "two\n").unwrap();
    let out = bash(&env, &id, "cat f; touch made");
    assert_eq!(text(&out.stdout), "two\n", "{out:?}");
    assert!(dir.join("made").exists());
    assert!(!env.dir.join("old/made").exists());
}

#[test]
fn words_that_parse_only_once_an_earlier_line_ran_run_as_in_bash_dash_c() {
    let env = Env::new("shell-extglob");
    let id = new_session(&env, None);
    assert!(bash(&env, &id, "KEEP=kept; set -o pipefail")
        .status
        .success());
    // `bash -c` runs line 1 before it reads line 2.
    let out = bash(
        &env,
        &id,
        "shopt -s extglob\ncase ab in @(ab|cd)) echo \"matched $KEEP\";; esac\n[[ -o pipefail ]] && echo pipefail; env | grep -c BASH_ENV || :",
    );
    assert_eq!(text(&out.stdout), "matched kept\npipefail\n0\n", "{out:?}");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    // Its changes are not kept; the session works on.
    assert_eq!(
        text(&bash(&env, &id, "shopt -q extglob || echo off").stdout),
        "off\n"
    );
}

#[test]
fn a_syntax_error_keeps_the_state_under_any_options_and_traps() {
    let env = Env::new("shell-parse");
    // The command's syntax is checked in its shell or, where a function's
    // call would show or a failed parse would end that shell, apart.
    for setup in [
        ":",
        "set -e",
        "set -o posix",
        "trap 'echo debug >&2' DEBUG",
        "trap 'echo err >&2' ERR; set -E",
        "set -T",
        "shopt -s extdebug",
        "alias say=echo",
    ] {
        let id = new_session(&env, None);
        let set = bash(&env, &id, &format!("{setup}; X=1"));
        assert!(set.status.success(), "{setup}: {set:?}");
        let broken = bash(&env, &id, "X=2; echo ran; (");
        assert_eq!(broken.status.code(), Some(2), "{setup}: {broken:?}");
        assert_eq!(text(&broken.stdout), "", "{setup}: {broken:?}");
        assert!(
            text(&broken.stderr).contains("syntax error"),
            "{setup}: {broken:?}"
        );
        let after = bash(&env, &id, "echo $X");
        assert_eq!(text(&after.stdout), "1\n", "{setup}: {after:?}");
    }
}
