//! The spare session on the process backend: `new` claims it, it is no
//! session until then, its first snapshot is kept, and config can turn it off.

use std::time::Duration;

use crate::support::{alive, kill9, never, wait_until, Env};

/// The spare session the daemon keeps ready for the next `new`, if one is
/// up: its id (its directory has `spare.json` and no `meta.json`) and its
/// worker's pid.
fn ready_spare(env: &Env) -> Option<(String, u32)> {
    let dirs = std::fs::read_dir(env.dir.join("state/sessions")).ok()?;
    dirs.flatten()
        .filter(|d| d.path().join("spare.json").exists() && !d.path().join("meta.json").exists())
        .find_map(|d| {
            let id = d.file_name().to_string_lossy().to_string();
            let record: serde_json::Value =
                serde_json::from_slice(&std::fs::read(d.path().join("worker.json")).ok()?).ok()?;
            let pid = record["identity"]["pid"].as_u64()? as u32;
            (alive(pid) && env.kernel_pid(&id).is_some()).then_some((id, pid))
        })
}

/// `new` (with `args`) run in `cwd` with `SPARE_TEST_VAR` set to `value`:
/// the id it prints.
fn new_with_var(env: &Env, args: &[&str], cwd: &std::path::Path, value: &str) -> String {
    let new = env
        .command(args)
        .current_dir(cwd)
        .env("SPARE_TEST_VAR", value)
        .output()
        .unwrap();
    assert!(new.status.success(), "{new:?}");
    String::from_utf8_lossy(&new.stdout).trim().to_string()
}

// On the process backend the daemon keeps one session ready, worker and
// kernel started: `new` claims it, with the client's environment and
// working directory as any new session has them, and the next spare is
// made. A spare is nobody's session: not listed, not counted, not named.
#[test]
fn new_claims_the_spare_session_and_a_spare_is_no_session() {
    let env = Env::new("spare");
    env.ok(&["status"]);
    let (spare, worker) = {
        let mut found = None;
        wait_until(Duration::from_secs(10), "a spare session is ready", || {
            found = ready_spare(&env);
            found.is_some()
        });
        found.unwrap()
    };
    assert_eq!(
        env.sessions().as_array().unwrap().len(),
        0,
        "a spare was listed"
    );
    let status: serde_json::Value = serde_json::from_str(&env.ok(&["status", "--json"])).unwrap();
    assert_eq!(status["sessions"], 0, "a spare was counted: {status}");
    let refused = env.run(&["bash", &spare, "--", "echo no"]);
    assert!(!refused.status.success(), "a spare was reachable by its id");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("no session"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );

    let cwd = env.dir.join("work");
    std::fs::create_dir_all(&cwd).unwrap();
    let id = new_with_var(&env, &["new", "--name", "claimed"], &cwd, "from the client");
    assert_eq!(id, spare, "new did not claim the ready spare");
    assert_eq!(
        env.worker_pid(&id),
        Some(worker),
        "the spare's worker was not kept"
    );
    assert_eq!(
        env.ok(&["bash", "claimed", "--", "echo \"$SPARE_TEST_VAR\"; pwd"]),
        format!("from the client\n{}\n", cwd.display())
    );
    let listed: Vec<String> = env
        .sessions()
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(listed, ["claimed"]);
    wait_until(Duration::from_secs(10), "the next spare is ready", || {
        ready_spare(&env).is_some_and(|(next, _)| next != spare)
    });

    // A daemon that dies leaves its spare; the next one keeps it a spare.
    let (next, _) = ready_spare(&env).unwrap();
    kill9(env.daemon_pid());
    assert_eq!(env.sessions().as_array().unwrap().len(), 1);
    let second = env.ok(&["new"]).trim().to_string();
    assert_eq!(
        second, next,
        "the new daemon did not claim the earlier spare"
    );
    assert_eq!(env.ok(&["bash", &second, "--", "echo up"]), "up\n");

    // The spare's template serves the first command; the session's own,
    // made as that command ends (the spare's, template-1, is dropped then),
    // serves the next, in the client's environment and directory too.
    wait_until(Duration::from_secs(10), "a third spare is ready", || {
        ready_spare(&env).is_some()
    });
    let third = new_with_var(&env, &["new"], &cwd, "third");
    let scratch = env.dir.join("state/sessions").join(&third).join("scratch");
    let present = |name: &str| scratch.join(name).exists();
    let shown = format!("third\n{}\n", cwd.display());
    let show = "echo \"$SPARE_TEST_VAR\"; pwd";
    assert_eq!(env.ok(&["bash", &third, "--", show]), shown);
    wait_until(
        Duration::from_secs(10),
        "the session's template replaces the spare's",
        || present("template-2.fifo") && !present("template-1.fifo"),
    );
    assert_eq!(env.ok(&["bash", &third, "--", show]), shown);
}

// A session's first snapshot is written as a job's capture writes the
// same state (the client's variables as `declare -p` prints them, and what
// bash gives every shell): a first command that changes nothing leaves it
// as it was, and the template made from it as that command ended serves
// the next.
#[test]
fn a_first_command_that_changes_nothing_keeps_the_first_snapshot_and_its_template() {
    let env = Env::new("first-snapshot");
    env.ok(&["status"]);
    wait_until(Duration::from_secs(10), "a spare session is ready", || {
        ready_spare(&env).is_some()
    });
    let quoted = r#"say "$HOME" `x` \ it's"#;
    let new = env
        .command(&["new"])
        .env_clear()
        .envs(env.vars.iter().map(|(name, value)| (name, value)))
        .env("PATH", "/usr/bin:/bin")
        .env("QUOTED", quoted)
        .current_dir(&env.dir)
        .output()
        .unwrap();
    assert!(new.status.success(), "{new:?}");
    let id = String::from_utf8_lossy(&new.stdout).trim().to_string();
    let dir = env.dir.join("state/sessions").join(&id);
    let present = |name: &str| dir.join("scratch").join(name).exists();
    let mut first = Vec::new();
    wait_until(Duration::from_secs(10), "the first snapshot", || {
        first = std::fs::read(dir.join("snapshot.json")).unwrap_or_default();
        !first.is_empty()
    });
    assert_eq!(
        env.ok(&["bash", &id, "--", "echo \"$QUOTED\"; pwd"]),
        format!("{quoted}\n{}\n", env.dir.display())
    );
    wait_until(
        Duration::from_secs(10),
        "the session's template replaces the spare's",
        || present("template-2.fifo") && !present("template-1.fifo"),
    );
    never(
        Duration::from_millis(300),
        "a first command that changed nothing changed the snapshot",
        || std::fs::read(dir.join("snapshot.json")).unwrap() != first,
    );
    assert_eq!(
        env.ok(&["bash", &id, "--", "echo \"$QUOTED\""]),
        format!("{quoted}\n")
    );
    never(
        Duration::from_millis(300),
        "the template made after the first command was made again",
        || !present("template-2.fifo") || present("template-3.fifo"),
    );
    // A command that changes the state changes both.
    env.ok(&["bash", &id, "--", "export CHANGED=1"]);
    wait_until(
        Duration::from_secs(10),
        "a template over the changed state",
        || present("template-3.fifo"),
    );
    assert!(std::fs::read(dir.join("snapshot.json")).unwrap() != first);
    assert_eq!(env.ok(&["bash", &id, "--", "echo $CHANGED"]), "1\n");
}

// `spare_session = false`: no spare, and `new` makes its session itself.
#[test]
fn no_spare_session_when_the_config_says_so() {
    let env = Env::new("no-spare").with_config("spare_session = false\n");
    let id = env.ok(&["new"]).trim().to_string();
    assert_eq!(env.ok(&["bash", &id, "--", "echo up"]), "up\n");
    let dirs = || -> Vec<_> {
        std::fs::read_dir(env.dir.join("state/sessions"))
            .unwrap()
            .flatten()
            .map(|d| d.file_name().to_string_lossy().to_string())
            .collect()
    };
    never(
        Duration::from_millis(1_000),
        "a spare was made against the config",
        || dirs() != [id.clone()],
    );
}
