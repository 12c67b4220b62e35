//! The session's shell keeps its whole state between runs and across a
//! kernel's death, and shows the user only what the user did.

use std::time::Duration;

use super::{lines_equal, text, OutputInThread};
use crate::support::process::{descendants, recorded, still};
use crate::support::{alive, kill9, wait_until, Env};

const SET_STATE: &str = "f() { echo \"fn:$1\"; }; alias hi='echo alias-hi'; secret='a b'; \
                         umask 027; set -o pipefail; shopt -s extglob; trap 'echo got-usr1' USR1";

const SHOW_STATE: &str = "f x; hi; echo \"secret:$secret\"; \
                          bash -c 'echo \"child:${secret-unset}\"'; umask; \
                          [[ -o pipefail ]] && echo pipefail-on; \
                          shopt -q extglob && echo extglob-on; trap -p USR1";

const STATE_SHOWN: &str = "fn:x\nalias-hi\nsecret:a b\nchild:unset\n0027\npipefail-on\n\
                           extglob-on\ntrap -- 'echo got-usr1' SIGUSR1\n";

// Done when 4: functions, aliases, unexported variables, umask, set -o and
// shopt options and traps persist between commands, and come back when the
// kernel is killed.
#[test]
fn shell_state_persists_between_commands_and_across_a_kernel_kill() {
    let t = Env::new("state");
    let id = t.new_session();
    assert_eq!(t.bash(&id, SET_STATE), "");
    assert_eq!(t.bash(&id, SHOW_STATE), STATE_SHOWN);
    let queued = t.run(&["send", &id, SHOW_STATE, "--wait"]);
    assert!(queued.status.success(), "{}", text(&queued.stderr));
    assert_eq!(text(&queued.stdout), STATE_SHOWN, "in a queued run");
    let kernel = t.kernel(&id);
    assert_eq!(t.session(&id)["kernel_pid"], kernel.pid);
    assert!(
        !t.log(&id).contains("kernel restored"),
        "a first kernel restores nothing"
    );
    kill9(kernel.pid);
    t.wait_for_kernel_after(&id, kernel);
    assert!(!alive(kernel.pid));
    assert_eq!(t.bash(&id, SHOW_STATE), STATE_SHOWN, "after the restore");
    let log = t.log(&id);
    assert_eq!(
        log.matches("kernel restored from its snapshot").count(),
        1,
        "{log}"
    );
    assert_ne!(t.session(&id)["state"], "given-up");
}

// A command that leaves the options as it found them does not list them
// (the kernel keeps those it began with); one that changes them back
// lists them again, and the change holds.
#[test]
fn options_turned_on_then_off_again_stay_off() {
    let t = Env::new("options");
    let id = t.new_session();
    assert_eq!(t.bash(&id, "set -o pipefail; shopt -s extglob"), "");
    assert_eq!(t.bash(&id, "true"), "");
    let shown = "[[ -o pipefail ]] && echo pipefail; shopt -q extglob && echo extglob; :";
    assert_eq!(t.bash(&id, shown), "pipefail\nextglob\n");
    assert_eq!(t.bash(&id, "set +o pipefail; shopt -u extglob"), "");
    assert_eq!(t.bash(&id, "true"), "");
    assert_eq!(t.bash(&id, shown), "");
}

// Done when 4: a run queued right behind another starts from the state
// that one left, even when listing that state takes a while (four thousand
// variables): its end is told only once the state is merged, or (if that
// ever changes) the next run must wait for the merge.
#[test]
fn a_run_queued_right_behind_another_starts_from_the_state_it_left() {
    let t = Env::new("behind");
    let id = t.new_session();
    let fill = "for i in {1..4000}; do declare \"filler_$i=$i\"; done";
    assert_eq!(t.bash(&id, fill), "");
    for round in 0..5 {
        let first = t.run(&["send", &id, &format!("export MARK={round}")]);
        assert!(first.status.success(), "{}", text(&first.stderr));
        let second = t.run(&["send", &id, "echo \"mark=$MARK\"", "--wait"]);
        assert!(second.status.success(), "{}", text(&second.stderr));
        assert_eq!(
            text(&second.stdout),
            format!("mark={round}\n"),
            "round {round}"
        );
    }
    assert_eq!(t.bash(&id, "echo $filler_4000"), "4000\n");
}

// Done when 4 (What to build 2: eukhe's shell code is immune to the user's
// state, and leaves nothing in it): the user's shell has exactly the traps
// the user set.
#[test]
fn the_users_shell_has_only_the_traps_the_user_set() {
    let t = Env::new("traps");
    let id = t.new_session();
    assert_eq!(t.bash(&id, "trap -p"), "", "in a new session");
    assert_eq!(t.bash(&id, "trap -p"), "", "in the next command");
    t.bash(&id, "trap 'echo bye' USR1");
    assert_eq!(t.bash(&id, "trap -p"), "trap -- 'echo bye' SIGUSR1\n");
}

/// Standard error of `send --wait` without its own first line, `eukhe:
/// queued as run N`: what the command wrote there.
fn without_queued_line(stderr: &[u8]) -> String {
    text(stderr)
        .lines()
        .filter(|line| !line.starts_with("eukhe: queued as run "))
        .map(|line| format!("{line}\n"))
        .collect()
}

// Under the user's `set -x` the trace shows the user's commands and none
// of eukhe's own (its `eval`, its stdin redirection, its capture), for a
// queued run and for a user bash with and without a file on stdin; a
// command that never started (a syntax error) leaves the trace on. Under
// `set -v` the command's text is echoed once.
#[test]
fn under_set_x_the_trace_shows_only_the_users_commands() {
    let t = Env::new("xtrace");
    let id = t.new_session();
    assert_eq!(t.bash(&id, "set -x"), "");
    let only_traced = |what: &str, stderr: &[u8], command: &str| {
        let stderr = text(stderr);
        let lines: Vec<&str> = stderr.lines().collect();
        assert!(!lines.is_empty(), "{what}: nothing traced");
        for line in &lines {
            let traced = line.trim_start_matches('+');
            assert!(
                line.starts_with('+') && traced.starts_with(' ') && command.contains(traced.trim()),
                "{what}: a trace line that is not the user's command: {line:?} in {stderr:?}"
            );
        }
    };
    let bash = t.run(&["bash", &id, "--", "echo one; echo two"]);
    assert_eq!(text(&bash.stdout), "one\ntwo\n");
    only_traced("user bash", &bash.stderr, "echo one; echo two");
    let input = t.dir.join("input");
    std::fs::write(&input, "from a file\n").unwrap();
    let piped = t
        .command(&["bash", &id, "--", "cat"])
        .stdin(std::fs::File::open(&input).unwrap())
        .output()
        .unwrap();
    assert_eq!(text(&piped.stdout), "from a file\n");
    only_traced("user bash reading a file", &piped.stderr, "cat");
    let queued = t.run(&["send", &id, "echo queued", "--wait"]);
    assert_eq!(text(&queued.stdout), "queued\n");
    only_traced(
        "queued run",
        without_queued_line(&queued.stderr).as_bytes(),
        "echo queued",
    );
    let broken = t.run(&["bash", &id, "--", "if"]);
    assert!(text(&broken.stderr).contains("syntax error"), "{broken:?}");
    let on = "[[ -o xtrace ]] && echo on";
    let after = t.run(&["bash", &id, "--", on]);
    assert_eq!(text(&after.stdout), "on\n", "set -x lost: {after:?}");
    only_traced("after a syntax error", &after.stderr, on);
    // Under `set -v` the command's text is echoed, and nothing of eukhe's.
    t.run(&["bash", &id, "--", "set +x -v"]);
    for args in [
        ["bash", &id, "--", "echo v"],
        ["send", &id, "echo v", "--wait"],
    ] {
        let verbose = t.run(&args);
        assert_eq!(text(&verbose.stdout), "v\n", "{args:?}");
        assert_eq!(without_queued_line(&verbose.stderr), "echo v\n", "{args:?}");
    }
    // Nothing of eukhe's reaches the environment of the user's programs.
    let ours = t.bash(&id, "set +v; env | grep -c __eukhe || :");
    assert_eq!(ours, "0\n");
}

// eukhe's restore is immune to aliases of any name: `set`, `trap`,
// `builtin` and `alias` aliased, and a function named `alias`, leave every
// option, trap and alias restored in the next command (its shell restores
// the snapshot: a template's or its own).
#[test]
fn aliases_and_functions_named_like_the_restores_commands_change_nothing() {
    let t = Env::new("aliased");
    let id = t.new_session();
    let setup = "shopt -s expand_aliases; set -o pipefail; trap 'echo usr1' USR1; \
                 alias ll='echo listed' set=false trap=false builtin=false; \
                 alias() { echo not-reached; }";
    assert_eq!(t.bash(&id, setup), "");
    let check = "[[ -o pipefail ]] && echo pipefail; \\trap -p USR1; ll; \\unset -f alias; \
                 \\builtin alias set";
    let expected = "pipefail\ntrap -- 'echo usr1' SIGUSR1\nlisted\nalias set='false'\n";
    assert_eq!(t.bash(&id, check), expected);
    // The same, restored by a kernel started again over the snapshot.
    t.bash(&id, "alias() { echo not-reached; }");
    let kernel = t.kernel(&id);
    kill9(kernel.pid);
    t.wait_for_kernel_after(&id, kernel);
    assert_eq!(t.bash(&id, check), expected, "after the restore");
}

// A killed kernel cannot clean up after itself: the next kernel removes
// what it left in the session's scratch directory (a retired template's
// script, a job's capture), and the session works on.
#[test]
fn a_new_kernel_removes_what_a_killed_one_left_in_scratch() {
    let t = Env::new("sweep");
    let id = t.new_session();
    assert_eq!(t.bash(&id, "echo one"), "one\n");
    let scratch = t.session_dir(&id).join("scratch");
    let left = scratch.join("template-99.late");
    std::fs::write(&left, "echo left\n").unwrap();
    let kernel = t.kernel(&id);
    kill9(kernel.pid);
    t.wait_for_kernel_after(&id, kernel);
    assert_eq!(t.bash(&id, "echo two"), "two\n");
    assert!(!left.exists(), "{} is still there", left.display());
}

// Done when 4: a command that ends its shell or sets hostile options ends
// or affects only its own run; eukhe's shell code is immune.
#[test]
fn a_command_that_ends_or_bends_its_shell_affects_only_its_own_run() {
    let t = Env::new("hostile");
    let id = t.new_session();
    t.bash(&id, "KEEP=kept");
    let cases: [(&str, Option<i32>); 7] = [
        ("exit 3", Some(3)),
        ("exec true", Some(0)),
        ("set -e; false; echo not-reached", None),
        ("set -u; echo $nope; echo not-reached", None),
        ("set -C", Some(0)),
        ("builtin() { :; }", Some(0)),
        ("set() { echo not-reached; }", Some(0)),
    ];
    for (n, (command, status)) in cases.iter().enumerate() {
        let out = t.run(&["send", &id, command, "--wait"]);
        match status {
            Some(status) => assert_eq!(out.status.code(), Some(*status), "{command}"),
            None => assert!(
                !out.status.success() && out.status.code().is_some(),
                "{command}: {:?}",
                out.status
            ),
        }
        assert!(!text(&out.stdout).contains("not-reached"), "{command}");
        // The next command works, sees the state, and its own changes keep.
        let next = t.run(&[
            "bash",
            &id,
            "--",
            &format!("echo \"next:$KEEP\"; AFTER{n}={n}"),
        ]);
        assert!(
            next.status.success(),
            "after {command}: {}",
            text(&next.stderr)
        );
        assert_eq!(text(&next.stdout), "next:kept\n", "after {command}");
        wait_until(
            Duration::from_secs(5),
            &format!("the session is idle after {command}"),
            || t.session(&id)["state"] == "idle",
        );
        assert_eq!(t.session(&id)["failures_in_window"], 0, "after {command}");
    }
    let kept = t.bash(
        &id,
        "echo $AFTER0 $AFTER1 $AFTER2 $AFTER3 $AFTER4 $AFTER5 $AFTER6; [[ -o noclobber ]] && echo noclobber",
    );
    // `set -C` is the user's option (set -o options persist); it does not
    // stop eukhe from keeping the state.
    assert_eq!(kept, "0 1 2 3 4 5 6\nnoclobber\n");
    let log = t.log(&id);
    // User bash 1 (`KEEP=kept`) took input 1: `exit 3` was run 2.
    assert!(log.contains("[run 2 exited 3]"), "{log}");
    assert!(log.contains("not kept: function builtin"), "{log}");
    assert!(log.contains("not kept: function set"), "{log}");
    assert!(!log.contains("given up"), "{log}");
}

// Done when 4: a queued run's stdin is /dev/null: `read` cannot swallow
// the inputs queued behind it.
#[test]
fn a_queued_read_does_not_swallow_the_inputs_queued_behind_it() {
    let t = Env::new("read");
    let id = t.new_session();
    t.send(&id, "sleep 0.5");
    t.send(&id, "read x; echo \"got:$x\"");
    t.send(&id, "echo after");
    let last = t.run(&["send", &id, "echo last", "--wait"]);
    assert!(last.status.success(), "{}", text(&last.stderr));
    assert_eq!(text(&last.stdout), "last\n");
    let log = t.log(&id);
    assert_eq!(lines_equal(&log, "got:"), 1, "{log}");
    assert_eq!(lines_equal(&log, "after"), 1, "{log}");
    for run in 1..=4 {
        assert!(log.contains(&format!("[run {run} exited 0]")), "{log}");
    }
}

// Done when 5: `export PATH=/nowhere` loses nothing.
#[test]
fn resetting_path_after_export_path_nowhere_keeps_home_and_the_exports() {
    let t = Env::new("path");
    let id = t.new_session();
    let home = std::env::var("HOME").expect("HOME is set for the tests");
    assert_eq!(t.bash(&id, "export PATH=/nowhere; export KEEP=1"), "");
    assert_eq!(
        t.bash(&id, "PATH=/usr/bin:/bin; echo \"$HOME $KEEP\""),
        format!("{home} 1\n")
    );
    assert_eq!(
        t.bash(&id, "ls / >/dev/null && echo found; printenv KEEP"),
        "found\n1\n"
    );
}

// Done when 6: user bash beside a busy run; every change is kept.
#[test]
fn twenty_parallel_exports_beside_a_busy_run_are_all_kept() {
    let t = Env::new("parallel");
    let id = t.new_session();
    t.send(&id, "sleep 5");
    let kernel = t.kernel(&id);
    let run = t.run_process(kernel, "sleep 5");
    let children: Vec<_> = (1..=20)
        .map(|i| {
            t.command(&["bash", &id, "--", &format!("export V{i}={i}")])
                .output_in_thread()
        })
        .collect();
    for (i, child) in children.into_iter().enumerate() {
        let out = child.join().unwrap();
        assert!(out.status.success(), "V{}: {}", i + 1, text(&out.stderr));
        // Each began in the shell state of its time, traps and options
        // too (a template dropped under it once took its `late` script).
        assert_eq!(text(&out.stderr), "", "V{}", i + 1);
    }
    let show = "for i in $(seq 1 20); do v=V$i; printf '%s ' \"${!v}\"; done; echo";
    let expected: String = (1..=20).map(|i| format!("{i} ")).collect::<String>() + "\n";
    assert!(still(run), "the run was no longer busy");
    assert_eq!(t.bash(&id, show), expected, "beside the run");
    // After the run ends, in a queued run: the run's end kept them too.
    let queued = t.run(&["send", &id, show, "--wait"]);
    assert!(queued.status.success(), "{}", text(&queued.stderr));
    assert_eq!(text(&queued.stdout), expected, "after the run");
    let log = t.log(&id);
    assert!(log.contains("[run 1 exited 0]"));
    // No job started a background process: no eukhe process of its own
    // was counted as one.
    assert!(!log.contains("background job"), "{log}");
}

// An idle session lets its shell template go after `template_idle` (an
// idle session need not hold that shell's memory): the waiting job shell
// of the dropped template ends, and that is no run's end; the next command
// still runs, and a template comes back after it. The window here is the
// test one (`EUKHE_TEST_SHORT_WINDOWS`); that the templates go at exactly
// `template_idle`, not before, and are not made again while the session
// stays idle is the kernel core's fake-clock test
// (`kernel::core::tests::an_idle_sessions_templates_go_at_template_idle_and_not_before_nor_again`).
#[test]
fn an_idle_sessions_template_goes_and_comes_back_with_the_next_command() {
    let mut t = Env::new("idle-template");
    t.set_var("EUKHE_TEST_SHORT_WINDOWS", "1");
    let id = t.new_session();
    assert_eq!(t.bash(&id, "echo hi"), "hi\n");
    let templates = || -> Vec<String> {
        t.scratch_names(&id)
            .into_iter()
            .filter(|name| name.starts_with("template-"))
            .collect()
    };
    wait_until(
        Duration::from_secs(5),
        "the session's template is up",
        || !templates().is_empty(),
    );
    wait_until(
        Duration::from_secs(10),
        "the idle session's template goes",
        || templates().is_empty(),
    );
    assert_eq!(t.bash(&id, "echo again"), "again\n");
    wait_until(
        Duration::from_secs(5),
        "a template is made again after the command",
        || !templates().is_empty(),
    );
}

// A session made from the spare (worker and kernel started ahead): as soon
// as `new` claims it, the spare template's waiting job shell restores the
// session's first snapshot, before any command comes; the first command
// runs in it (the client's environment and `--env`, the directory), and
// what it sets is there for the next.
#[test]
fn a_claimed_spares_first_command_finds_its_shell_restored_ahead() {
    let mut t = Env::new("claimed");
    t.set_var("FROM_THE_CLIENT", "client value");
    t.ok(&["status"]);
    let sessions = t.state_dir().join("sessions");
    // A spare whose worker and kernel are up: `new` claims only such a one.
    let ready = |dir: &std::path::Path| {
        dir.join("spare.json").exists()
            && !dir.join("meta.json").exists()
            && recorded(&dir.join("worker.json")).is_some_and(still)
            && recorded(&dir.join("kernel.json")).is_some_and(still)
    };
    let mut spare = String::new();
    wait_until(Duration::from_secs(10), "a spare session", || {
        spare = std::fs::read_dir(&sessions)
            .into_iter()
            .flatten()
            .flatten()
            .find(|d| ready(&d.path()))
            .map(|d| d.file_name().to_string_lossy().into_owned())
            .unwrap_or_default();
        !spare.is_empty()
    });
    let cwd = t.dir.join("work");
    std::fs::create_dir_all(&cwd).unwrap();
    let cwd = cwd.canonicalize().unwrap();
    let id = t
        .ok(&[
            "new",
            "--cwd",
            &cwd.to_string_lossy(),
            "--env",
            "BY_ENV=set",
        ])
        .trim()
        .to_string();
    assert_eq!(id, spare, "new claimed the spare");
    let kernel = t.kernel(&id);
    wait_until(
        Duration::from_secs(15),
        "a shell of the kernel in the session's directory before any command",
        || {
            descendants(kernel.pid)
                .iter()
                .any(|p| std::fs::read_link(format!("/proc/{p}/cwd")).ok().as_ref() == Some(&cwd))
        },
    );
    let first = t
        .command(&[
            "bash",
            &id,
            "--",
            r#"echo "$FROM_THE_CLIENT|$BY_ENV|$PWD"; FIRST=1"#,
        ])
        .output()
        .unwrap();
    assert!(first.status.success(), "{}", text(&first.stderr));
    assert_eq!(text(&first.stderr), "", "the restore says nothing");
    assert_eq!(
        text(&first.stdout),
        format!("client value|set|{}\n", cwd.display())
    );
    assert_eq!(t.bash(&id, "echo $FIRST"), "1\n");
}
