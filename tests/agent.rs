//! An agent at a terminal run (issue 53, item 4), through the real binary:
//! it answers a `read -p` prompt and drives `git rebase -i` in vim with
//! `eukhe wait-for`, `eukhe keys` and `eukhe screen` only, as a person
//! looks, types and looks again. No step sleeps: each waits on the screen.

use crate::support::Env;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// How long a test's waits on a screen may take, in milliseconds.
const SCREEN_WAIT_MS: &str = "20000";

/// `eukhe wait-for ID ARGS --json`, expected to exit `code`; its answer.
fn wait_for(t: &Env, id: &str, args: &[&str], code: i32) -> serde_json::Value {
    let mut all = vec!["wait-for", id, "--json", "--timeout", SCREEN_WAIT_MS];
    all.extend_from_slice(args);
    let out = t.run(&all);
    assert_eq!(
        out.status.code(),
        Some(code),
        "wait-for {args:?}:\nstdout: {}\nstderr: {}",
        text(&out.stdout),
        text(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("wait-for --json prints JSON")
}

/// The rows of a screen in a `wait-for --json` answer, joined.
fn rows(answer: &serde_json::Value) -> String {
    let lines = answer["screen"]["lines"].as_array().expect("rows");
    let lines: Vec<&str> = lines.iter().filter_map(|l| l.as_str()).collect();
    lines.join("\n")
}

fn keys(t: &Env, id: &str, keys: &[&str]) {
    let mut all = vec!["keys", id, "--"];
    all.extend_from_slice(keys);
    t.ok(&all);
}

#[test]
fn an_agent_answers_a_prompt_with_wait_for_and_keys() {
    let t = Env::new("agent-prompt");
    let id = t.new_session();
    t.ok(&[
        "send",
        "--tty",
        &id,
        "--",
        r#"read -p "Continue? [y/N] " a; echo "got $a""#,
    ]);
    let prompt = wait_for(&t, &id, &["--match", r"Continue\? \[y/N\]"], 0);
    assert_eq!(
        prompt["met"],
        serde_json::json!({"kind": "screen", "regex": r"Continue\? \[y/N\]"})
    );
    assert!(prompt["screen"]["ended"].is_null(), "{prompt}");
    keys(&t, &id, &["y", "Enter"]);
    let end = wait_for(&t, &id, &["--end"], 0);
    assert_eq!(end["met"]["kind"], "end", "{end}");
    assert_eq!(end["screen"]["ended"], 0, "{end}");
    assert!(rows(&end).contains("Continue? [y/N] y\ngot y"), "{end}");
    assert!(t.log(&id).contains("got y"), "{}", t.log(&id));
    // The ended run's screen meets no regex any more: exit 1 at once.
    let unmet = wait_for(&t, &id, &["--match", "never shown"], 1);
    assert!(
        unmet["met"].is_null() && unmet["timed_out"] == false,
        "{unmet}"
    );
}

#[test]
fn wait_for_times_out_with_the_screen_and_the_run_goes_on() {
    let t = Env::new("agent-timeout");
    let id = t.new_session();
    t.ok(&["send", "--tty", &id, "--", "read -p 'name? ' n; echo hi $n"]);
    wait_for(&t, &id, &["--match", r"name\?"], 0);
    let out = t.run(&[
        "wait-for",
        &id,
        "--match",
        "never shown",
        "--timeout",
        "300",
    ]);
    assert_eq!(out.status.code(), Some(124), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(shown.starts_with("name?\n[run "), "{shown}");
    assert!(
        text(&out.stderr).contains("timed out after 300 ms"),
        "{}",
        text(&out.stderr)
    );
    // The run went on: it still takes its answer.
    keys(&t, &id, &["bob", "Enter"]);
    let end = wait_for(&t, &id, &["--end"], 0);
    assert!(rows(&end).contains("hi bob"), "{end}");
    // Nothing to wait for is a usage error, in one line.
    let none = t.run(&["wait-for", &id]);
    assert_eq!(none.status.code(), Some(125));
    assert_eq!(
        text(&none.stderr).trim_end().lines().count(),
        1,
        "{}",
        text(&none.stderr)
    );
    // A regex that does not compile is one line, exit 125.
    let bad = t.run(&["wait-for", &id, "--match", "name? [y"]);
    assert_eq!(bad.status.code(), Some(125));
    let said = text(&bad.stderr);
    assert!(
        said.contains("invalid regular expression") && said.trim_end().lines().count() == 1,
        "{said}"
    );
}

/// A repository with three commits, in the test's own directory (where
/// the session's shell then is).
fn three_commits(t: &Env, id: &str) {
    let repo = t.dir.join("repo");
    t.bash(
        id,
        &format!(
            "mkdir '{}' && cd \"$_\" && git init -q && git config user.name agent && \
             git config user.email agent@example.invalid && \
             for n in one two three; do echo $n > $n; git add $n; git commit -qm $n; done",
            repo.display()
        ),
    );
}

fn git_log(t: &Env, id: &str) -> String {
    t.bash(id, "git log --format=%s")
}

/// Run `git rebase -i HEAD~2` on a terminal with vim as its editor, and
/// wait until vim shows the todo list.
fn rebase_in_vim(t: &Env, id: &str) -> serde_json::Value {
    t.ok(&[
        "send",
        "--tty",
        id,
        "--",
        "TERM=xterm GIT_EDITOR='vim -u NONE -N' git rebase -i HEAD~2",
    ]);
    let todo = wait_for(t, id, &["--match", r"(?m)^pick \w+ two\npick \w+ three"], 0);
    let screen = t.ok(&["screen", id, "--json"]);
    assert!(screen.contains("pick"), "{screen}");
    todo
}

#[test]
fn an_agent_drops_a_commit_in_git_rebase_i() {
    let t = Env::new("agent-rebase-drop");
    let id = t.new_session();
    three_commits(&t, &id);
    rebase_in_vim(&t, &id);
    keys(&t, &id, &[":2s/^pick/drop/", "Enter", ":wq", "Enter"]);
    let end = wait_for(&t, &id, &["--end"], 0);
    assert_eq!(end["screen"]["ended"], 0, "{end}");
    assert_eq!(git_log(&t, &id), "two\none\n");
}

#[test]
fn an_agent_squashes_a_commit_in_git_rebase_i() {
    let t = Env::new("agent-rebase-squash");
    let id = t.new_session();
    three_commits(&t, &id);
    rebase_in_vim(&t, &id);
    keys(&t, &id, &[":2s/^pick/squash/", "Enter", ":wq", "Enter"]);
    // Then the message of the squashed commit, in vim again.
    wait_for(
        &t,
        &id,
        &["--match", "This is a combination of 2 commits"],
        0,
    );
    keys(&t, &id, &[":wq", "Enter"]);
    let end = wait_for(&t, &id, &["--end"], 0);
    assert_eq!(end["screen"]["ended"], 0, "{end}");
    assert_eq!(git_log(&t, &id), "two\none\n");
    let message = t.bash(&id, "git log -1 --format=%B");
    assert!(
        message.starts_with("two\n") && message.contains("\nthree\n"),
        "the squashed commit keeps both messages: {message:?}"
    );
}

/// `eukhe wait-for ID ARGS --json` started in the background.
fn wait_for_later(t: &Env, id: &str, args: &[&str]) -> std::process::Child {
    let mut all = vec!["wait-for", id, "--json", "--timeout", SCREEN_WAIT_MS];
    all.extend_from_slice(args);
    t.command(&all)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start eukhe wait-for")
}

/// The answer of a `wait-for` started by [`wait_for_later`], which must
/// have met its condition.
fn met_later(waiting: std::process::Child) -> serde_json::Value {
    let out = waiting.wait_with_output().expect("wait for eukhe wait-for");
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout: {}\nstderr: {}",
        text(&out.stdout),
        text(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("wait-for --json prints JSON")
}

#[test]
fn wait_for_a_queued_terminal_run_waits_until_it_starts() {
    let t = Env::new("agent-queued");
    let id = t.new_session();
    t.ok(&["send", "--tty", &id, "--", "read -p 'first? ' a"]);
    t.ok(&["send", "--tty", &id, "--", "echo second run"]);
    wait_for(&t, &id, &["--match", r"first\?"], 0);
    // Run 2 is queued behind run 1: it has no screen yet, and is waited for.
    let early = t.run(&[
        "wait-for",
        &id,
        "2",
        "--match",
        "second",
        "--timeout",
        "300",
    ]);
    assert_eq!(early.status.code(), Some(125));
    assert!(
        text(&early.stderr).contains("input 2 has not started yet"),
        "{}",
        text(&early.stderr)
    );
    let second = wait_for_later(&t, &id, &["2", "--match", "second run"]);
    keys(&t, &id, &["Enter"]);
    let met = met_later(second);
    assert_eq!(met["screen"]["input"], 2, "{met}");
}

#[test]
fn wait_for_rides_through_a_worker_kill() {
    let t = Env::new("agent-worker-kill");
    let id = t.new_session();
    t.ok(&["send", "--tty", &id, "--", "read -p 'name? ' n; echo hi $n"]);
    wait_for(&t, &id, &["--match", r"name\?"], 0);
    let worker = t.worker(&id);
    let before = sockets_of(worker);
    let answer = wait_for_later(&t, &id, &["--match", "hi bob"]);
    // Killed once the wait is the worker's: its connection is handed over.
    crate::support::wait_until(
        std::time::Duration::from_secs(10),
        "the worker holds the wait's connection",
        || sockets_of(worker) > before,
    );
    crate::support::kill9(worker);
    // Keys are refused until the next worker serves: typed again until taken.
    crate::support::wait_until(
        std::time::Duration::from_secs(20),
        "the next worker takes the keys",
        || t.run(&["keys", &id, "--", "bob", "Enter"]).status.success(),
    );
    let met = met_later(answer);
    assert!(rows(&met).contains("name? bob\nhi bob"), "{met}");
}

/// How many sockets process `pid` holds open.
fn sockets_of(pid: u32) -> usize {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return 0;
    };
    fds.filter_map(Result::ok)
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .filter(|target| target.to_string_lossy().starts_with("socket:"))
        .count()
}
