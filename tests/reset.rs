//! `eukhe reset` (issue 54, item 4): the persistent bash tool's `restart`
//! gives the session a fresh kernel, its shell back to the session's first
//! state, its transcript kept with one notice; refused while something
//! runs unless forced.

use std::time::Duration;

use crate::support::process::still;
use crate::support::{wait_until, Env};

/// What the session's shell holds now, one fact a line.
const PROBE: &str = "pwd; echo \"X=${X-unset}\"; echo \"KEPT=${KEPT-unset}\"; \
     type -t f || echo 'no f'; alias ll 2>/dev/null || echo 'no ll'; \
     [[ -o noclobber ]] && echo noclobber || echo clobber";

/// A session made in `cwd` with `KEPT=first` in its first environment.
fn session_in(t: &Env, cwd: &std::path::Path) -> String {
    let cwd = cwd.to_str().unwrap();
    let id = t.ok(&["new", "--cwd", cwd, "--env", "KEPT=first"]);
    id.trim().to_string()
}

#[test]
fn a_reset_gives_a_fresh_shell_and_keeps_the_transcript_with_one_notice() {
    let t = Env::new("reset");
    let first_cwd = t.dir.join("project");
    std::fs::create_dir_all(&first_cwd).unwrap();
    let id = session_in(&t, &first_cwd);
    t.ok(&["send", &id, "--wait", "echo before-the-reset"]);
    t.bash(
        &id,
        "cd /tmp; export X=1; KEPT=changed; f(){ :; }; alias ll='ls -l'; set -o noclobber",
    );
    let changed = t.bash(&id, PROBE);
    assert_eq!(
        changed,
        "/tmp\nX=1\nKEPT=changed\nfunction\nalias ll='ls -l'\nnoclobber\n"
    );
    let old_kernel = t.kernel(&id);

    let said = t.ok(&["reset", &id]);
    assert!(said.contains("fresh shell"), "{said}");
    let new_kernel = t.wait_for_kernel_after(&id, old_kernel);
    assert!(!still(old_kernel), "the old kernel outlived the reset");
    assert_ne!(new_kernel, old_kernel);

    let fresh = t.bash(&id, PROBE);
    assert_eq!(
        fresh,
        format!(
            "{}\nX=unset\nKEPT=first\nno f\nno ll\nclobber\n",
            first_cwd.display()
        ),
        "the shell after a reset is the session's first one"
    );
    let log = t.log(&id);
    assert!(log.contains("before-the-reset\n"), "{log}");
    assert!(log.contains("[run 1 exited 0]"), "{log}");
    assert!(log.contains("$ cd /tmp; export X=1"), "{log}");
    assert_eq!(
        log.matches("restarted at the user's request").count(),
        1,
        "one notice says the shell was reset:\n{log}"
    );
    assert!(
        !log.contains("restored from its snapshot"),
        "a reset is no restore:\n{log}"
    );
    // The session goes on: a queued run runs in the fresh shell.
    let out = t.ok(&["send", &id, "--wait", "echo \"after in $PWD\""]);
    assert_eq!(out, format!("after in {}\n", first_cwd.display()));
}

#[test]
fn a_reset_is_refused_while_a_run_runs_and_forced_ends_it_interrupted_and_the_queue_goes_on() {
    let t = Env::new("reset-busy");
    let id = session_in(&t, &t.dir);
    t.bash(&id, "cd /tmp");
    t.send(&id, "sleep 300");
    // Queued behind the sleep: it waits through the reset and runs in the
    // fresh shell.
    t.send(&id, "echo \"queued, run in $PWD\"");
    let kernel = t.kernel(&id);
    let run = t.run_process(kernel, "sleep 300");

    let refused = t.run(&["reset", &id]);
    assert_eq!(refused.status.code(), Some(125));
    let why = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(why.lines().count(), 1, "{why}");
    assert!(
        why.contains("busy (a run)") && why.contains(&format!("`eukhe reset --force {id}`")),
        "{why}"
    );
    assert!(still(run), "a refused reset ended the run");
    assert!(still(kernel), "a refused reset ended the kernel");

    t.ok(&["reset", &id, "--force"]);
    wait_until(Duration::from_secs(10), "the run's process ends", || {
        !still(run)
    });
    let log = t.log_with(&id, "[run 3 exited 0]", Duration::from_secs(10));
    assert!(log.contains("[run 2 interrupted]"), "{log}");
    assert!(log.contains("ended with the old shell"), "{log}");
    assert!(
        log.contains(&format!("queued, run in {}\n", t.dir.display())),
        "{log}"
    );
    assert_eq!(t.bash(&id, "echo still here"), "still here\n");
}

// Under systemd the kernel is its own unit: a reset stops it (its cgroup
// empties) and starts it again, with no failure counted.
#[test]
fn under_systemd_a_reset_starts_the_kernel_unit_again_with_a_fresh_shell() {
    use crate::support::installed::Installed;
    use crate::support::skip::skip_unless_ci;
    use crate::support::systemd::unavailable;
    if let Some(why) = unavailable() {
        skip_unless_ci(&format!("a private systemd cannot run here: {why}"));
        return;
    }
    let eukhe = Installed::boot("reset", &[]);
    let id = eukhe.eukhe("new --cwd /").trim().to_string();
    let unit = format!("eukhe-kernel@{id}.service");
    eukhe.eukhe(&format!("bash {id} -- 'cd /tmp; export X=1; f(){{ :; }}'"));
    let before = eukhe.main_pid(&unit);
    assert_ne!(before, 0, "the kernel unit runs");
    eukhe.eukhe(&format!("reset {id}"));
    assert_eq!(
        eukhe.eukhe(&format!(
            "bash {id} -- 'pwd; echo ${{X-unset}}; type -t f || echo no-f'"
        )),
        "/\nunset\nno-f\n"
    );
    assert_eq!(eukhe.unit(&unit, "ActiveState"), "active");
    assert_ne!(
        eukhe.main_pid(&unit),
        before,
        "a new kernel runs in the unit"
    );
    let log = eukhe.eukhe(&format!("log {id}"));
    assert_eq!(
        log.matches("restarted at the user's request").count(),
        1,
        "{log}"
    );
    assert_eq!(eukhe.session(&id)["failures_in_window"], 0);
}
