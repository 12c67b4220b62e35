//! `eukhe events` and `eukhe top` through the real binary: the event
//! stream's order and ids, a stopped subscriber's bounded cost, and the
//! dashboard driven in a real terminal (tmux).

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::process::Signal;
use crate::support::skip::skip_unless_ci;
use crate::support::{kill9, never, signal, wait_for, wait_until, Env};

/// An `eukhe events` client whose lines are collected as they come.
struct Subscriber {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Subscriber {
    fn spawn(env: &Env, args: &[&str]) -> Subscriber {
        let mut all = vec!["events"];
        all.extend_from_slice(args);
        let mut child = env
            .command(&all)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start eukhe events");
        let lines = Arc::new(Mutex::new(Vec::new()));
        for stream in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let lines = lines.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    lines.lock().unwrap().push(line);
                }
            });
        }
        Subscriber { child, lines }
    }

    fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    fn events(&self) -> Vec<serde_json::Value> {
        self.lines()
            .iter()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        kill9(self.child.id());
        let _ = self.child.wait();
    }
}

/// Rename `session` until `subscribers` have each seen a rename: from then
/// on they are subscribed. Returns the session's name at the end.
fn until_subscribed(env: &Env, session: &str, subscribers: &[&Subscriber]) -> String {
    let mut round = 0;
    let mut name = String::new();
    let subscribed = || {
        subscribers
            .iter()
            .all(|s| s.lines().iter().any(|l| l.contains("renamed")))
    };
    wait_until(
        Duration::from_secs(20),
        "the subscribers subscribed",
        || {
            round += 1;
            name = format!("warm-{round}");
            env.ok(&["rename", session, &name]);
            wait_for(Duration::from_millis(100), subscribed)
        },
    );
    name
}

/// Whether an event is the one expected next.
type Matcher = Box<dyn Fn(&serde_json::Value) -> bool>;

fn kind(event: &serde_json::Value) -> &str {
    event["event"]["kind"].as_str().unwrap_or("")
}

#[test]
fn events_show_a_sessions_life_in_order_with_its_id_and_name() {
    let env = Env::new("events-order");
    let warm = env.ok(&["new", "--name", "warm"]).trim().to_string();
    let stream = Subscriber::spawn(&env, &["--json"]);
    until_subscribed(&env, &warm, &[&stream]);

    let id = env.ok(&["new", "--name", "seq"]).trim().to_string();
    env.ok(&["send", "seq", "echo started; sleep 60"]);
    wait_until(
        Duration::from_secs(10),
        "the run's output is an event",
        || {
            stream.events().iter().any(|e| {
                e["id"] == id.as_str() && kind(e) == "output" && e["event"]["line"] == "started"
            })
        },
    );
    let worker = env.worker_pid(&id).unwrap();
    kill9(worker);
    wait_until(Duration::from_secs(10), "a new worker serves", || {
        env.worker_pid(&id).is_some_and(|pid| pid != worker)
    });
    let cancelled = env.ok(&["cancel", "seq"]);
    assert!(cancelled.contains("run 1"), "{cancelled}");
    wait_until(Duration::from_secs(10), "the run ends", || {
        env.session(&id)["state"] == "idle"
    });
    env.ok(&["rm", "seq"]);
    wait_until(Duration::from_secs(10), "the removal is an event", || {
        stream
            .events()
            .iter()
            .any(|e| e["id"] == id.as_str() && kind(e) == "removed")
    });

    let events: Vec<serde_json::Value> = stream
        .events()
        .into_iter()
        .filter(|e| e["id"] == id.as_str())
        .collect();
    for event in &events {
        assert_eq!(event["name"], "seq", "{event}");
        assert!(event["at_ms"].as_u64().unwrap() > 0, "{event}");
    }
    // The sequence a person would expect, in this order (state events
    // between them are checked apart).
    let expected: Vec<(&str, Matcher)> = vec![
        ("created", Box::new(|e| kind(e) == "created")),
        (
            "run 1 queued",
            Box::new(|e| kind(e) == "run_queued" && e["event"]["input"] == 1),
        ),
        (
            "busy",
            Box::new(|e| kind(e) == "state" && e["event"]["state"] == "busy"),
        ),
        (
            "run 1 started",
            Box::new(|e| kind(e) == "run_started" && e["event"]["input"] == 1),
        ),
        (
            "the worker failed, restarting",
            Box::new(|e| {
                kind(e) == "worker_failed"
                    && e["event"]["verdict"]["verdict"] == "restart"
                    && e["event"]["verdict"]["failures"] == 1
            }),
        ),
        (
            "restarting",
            Box::new(|e| kind(e) == "state" && e["event"]["state"] == "restarting"),
        ),
        (
            "busy again",
            Box::new(|e| kind(e) == "state" && e["event"]["state"] == "busy"),
        ),
        (
            "run 1 cancelled",
            Box::new(|e| {
                kind(e) == "run_finished"
                    && e["event"]["input"] == 1
                    && e["event"]["cancelled"] == true
            }),
        ),
        (
            "idle",
            Box::new(|e| kind(e) == "state" && e["event"]["state"] == "idle"),
        ),
        ("removed", Box::new(|e| kind(e) == "removed")),
    ];
    let mut at = 0;
    for (what, matches) in &expected {
        match events[at..].iter().position(matches) {
            Some(found) => at += found + 1,
            None => panic!(
                "no {what} after event {at} of:\n{}",
                events
                    .iter()
                    .map(|e| e.to_string())
                    .collect::<Vec<_>>()
                    .join("\n")
            ),
        }
    }
    // The removal is the session's last event.
    assert_eq!(kind(events.last().unwrap()), "removed");
    // The other session's events carry its own id.
    assert!(stream
        .events()
        .iter()
        .any(|e| e["id"] == warm.as_str() && kind(e) == "renamed"));
}

#[test]
fn events_ride_through_a_daemon_restart_and_say_so_once() {
    let env = Env::new("events-restart");
    let id = env.ok(&["new", "--name", "a"]).trim().to_string();
    let stream = Subscriber::spawn(&env, &["--session", &id]);
    let name = until_subscribed(&env, &id, &[&stream]);
    let first = env.daemon_pid();
    env.ok(&["shutdown"]);
    // Waiting for the next daemon: a background client starts none.
    let socket = env.dir.join("run/eukhe.sock");
    never(
        Duration::from_millis(600),
        "events started a daemon",
        || socket.exists(),
    );
    let second = env.daemon_pid();
    assert_ne!(first, second);
    wait_until(Duration::from_secs(10), "events reconnect", || {
        stream
            .lines()
            .iter()
            .any(|l| l.contains("the daemon restarted"))
    });
    env.ok(&["rename", &id, "after"]);
    wait_until(Duration::from_secs(10), "events go on", || {
        stream
            .lines()
            .iter()
            .any(|l| l.contains(&format!("after ({id}): renamed from {name}")))
    });
    let lines = stream.lines();
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.contains("the daemon restarted"))
            .count(),
        1,
        "{lines:#?}"
    );
    assert!(
        lines.iter().any(|l| l.contains("daemon: stopping")),
        "{lines:#?}"
    );
}

/// Anonymous memory of process `pid`, in KiB.
fn rss_anon_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[test]
fn a_stopped_subscriber_costs_the_daemon_a_bounded_buffer_and_hears_once_what_it_missed() {
    const SUBSCRIBERS: usize = 6;
    const RENAMES: usize = 3_000;
    let env = Env::new("events-bound");
    let id = env.ok(&["new"]).trim().to_string();
    let subscribers: Vec<Subscriber> = (0..SUBSCRIBERS)
        .map(|_| Subscriber::spawn(&env, &[]))
        .collect();
    until_subscribed(&env, &id, &subscribers.iter().collect::<Vec<_>>());
    for subscriber in &subscribers {
        signal(subscriber.child.id(), Signal::SIGSTOP);
    }
    let daemon = env.daemon_pid();
    let before = rss_anon_kib(daemon);
    // Long names: each rename event holds two, so an unbounded buffer
    // would grow by hundreds of bytes per event per subscriber.
    let long = "n".repeat(60);
    for round in 0..RENAMES {
        env.ok(&["rename", &id, &format!("{long}{}", round % 2)]);
    }
    let after = rss_anon_kib(daemon);
    let growth = after.saturating_sub(before);
    // Unbounded, the buffers alone would take SUBSCRIBERS * RENAMES *
    // ~250 bytes, over 4 MiB; bounded, each holds at most 512 events.
    assert!(
        growth < 2_048,
        "the daemon grew by {growth} KiB ({before} -> {after}) while {SUBSCRIBERS} subscribers were stopped"
    );
    for subscriber in &subscribers {
        signal(subscriber.child.id(), Signal::SIGCONT);
    }
    for subscriber in &subscribers {
        wait_until(
            Duration::from_secs(20),
            "the subscriber hears what it missed",
            || {
                subscriber
                    .lines()
                    .iter()
                    .any(|l| l.contains("events dropped:"))
            },
        );
    }
    // The last renames come after the gap: the stream goes on.
    env.ok(&["rename", &id, "last"]);
    for subscriber in &subscribers {
        wait_until(Duration::from_secs(10), "the stream goes on", || {
            subscriber
                .lines()
                .iter()
                .any(|l| l.contains(&format!("last ({id}): renamed")))
        });
        let lines = subscriber.lines();
        let dropped: Vec<&String> = lines
            .iter()
            .filter(|l| l.contains("events dropped:"))
            .collect();
        assert_eq!(dropped.len(), 1, "{dropped:#?}");
        let count: usize = dropped[0]
            .split("events dropped: ")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap();
        let renamed = lines.iter().filter(|l| l.contains("renamed")).count();
        // Every rename is either shown or counted as dropped (the warm-up
        // renames and the last one are shown too).
        assert!(count > 0 && count < RENAMES, "{count}");
        assert!(
            renamed + count > RENAMES,
            "{renamed} shown, {count} dropped"
        );
    }
}

/// tmux, or why this test cannot run: under CI it must.
fn tmux() -> Option<&'static str> {
    let found = std::process::Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|out| out.status.success());
    if found {
        return Some("tmux");
    }
    skip_unless_ci(
        "tmux is not installed, so `top` cannot be driven in a terminal: scripts/setup installs it",
    );
    None
}

/// A private tmux server running one command in an 80x24 terminal.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn start(env: &Env, command: &str) -> Tmux {
        let socket = env.dir.join("tmux.sock").display().to_string();
        let tmux = Tmux { socket };
        let vars: String = env
            .vars
            .iter()
            .map(|(k, v)| format!("{k}='{v}' "))
            .collect();
        let status = tmux
            .command(&[
                "-f",
                "/dev/null",
                "new-session",
                "-d",
                "-x",
                "80",
                "-y",
                "24",
                "-s",
                "top",
                &format!("env {vars}{command}"),
            ])
            .status()
            .unwrap();
        assert!(status.success());
        tmux
    }

    fn command(&self, args: &[&str]) -> std::process::Command {
        let mut command = std::process::Command::new("tmux");
        command.args(["-S", &self.socket]).args(args);
        command
    }

    fn screen(&self) -> String {
        let out = self
            .command(&["capture-pane", "-p", "-t", "top"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn keys(&self, keys: &str) {
        let status = self.command(&["send-keys", "-t", "top", keys]).status();
        assert!(status.unwrap().success());
    }

    fn pane(&self, format: &str) -> String {
        let out = self
            .command(&["display-message", "-p", "-t", "top", format])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    fn until(&self, what: &str, condition: impl Fn(&str) -> bool) -> String {
        let mut screen = String::new();
        let shown = wait_for(Duration::from_secs(15), || {
            screen = self.screen();
            condition(&screen)
        });
        assert!(
            shown,
            "timed out waiting until {what}; the screen:\n{screen}"
        );
        screen
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.command(&["kill-server"]).status();
    }
}

/// The row of session `name` on the screen.
fn row<'a>(screen: &'a str, name: &str) -> &'a str {
    screen
        .lines()
        .find(|l| l.starts_with(&format!("{name} ")))
        .unwrap_or("")
}

#[test]
fn top_shows_a_run_end_cancels_with_c_and_quits_with_q_restoring_the_terminal() {
    let Some(_) = tmux() else { return };
    let env = Env::new("top");
    env.ok(&["new", "--name", "quick", "--cwd", "/tmp"]);
    env.ok(&["new", "--name", "slow", "--cwd", "/tmp"]);
    let exe = env!("CARGO_BIN_EXE_eukhe");
    // After top: whether the terminal is back in cooked mode with echo.
    let tmux = Tmux::start(
        &env,
        &format!("sh -c '{exe} top; echo top-exited-$?; stty -a | tr \" \" \"\\n\" | grep -x -e icanon -e echo | tr \"\\n\" \" \"; echo; sleep 60'"),
    );
    tmux.until("top lists both sessions", |s| {
        row(s, "quick").contains("idle") && row(s, "slow").contains("idle")
    });
    assert_eq!(
        tmux.pane("#{alternate_on}"),
        "1",
        "top uses the alternate screen"
    );

    // A busy session turns idle when its run ends.
    env.ok(&["send", "quick", "echo quick-line; sleep 2"]);
    tmux.until("quick is busy with its run and its output", |s| {
        row(s, "quick").contains("busy")
            && row(s, "quick").contains("1 echo")
            && row(s, "quick").contains("quick-line")
    });
    tmux.until("quick turns idle", |s| row(s, "quick").contains("idle"));

    // `c` cancels the selected session's run (slow is second: Down).
    env.ok(&["send", "slow", "sleep 120"]);
    tmux.until("slow is busy", |s| row(s, "slow").contains("busy"));
    tmux.keys("Down");
    tmux.until("slow is selected", |s| s.contains("slow ("));
    tmux.keys("c");
    tmux.until("the cancel is said and slow is idle", |s| {
        s.contains("cancelling run 1 of slow") && row(s, "slow").contains("idle")
    });
    let log = env.log("slow");
    assert!(log.contains("[run 1 cancelled"), "{log}");

    // The screen fits 80x24.
    let screen = tmux.screen();
    assert!(screen.lines().count() <= 24);
    assert!(screen.lines().all(|l| l.chars().count() <= 80), "{screen}");
    assert!(
        screen.contains("2 sessions, 0 busy, 0 given up"),
        "{screen}"
    );

    // `q` quits and gives the terminal back as it was.
    tmux.keys("q");
    let screen = tmux.until("top exits", |s| s.contains("top-exited-"));
    assert!(screen.contains("top-exited-0"), "{screen}");
    tmux.until("stty answers", |s| s.contains("icanon echo"));
    assert_eq!(
        tmux.pane("#{alternate_on}"),
        "0",
        "the alternate screen is left"
    );
    assert_eq!(tmux.pane("#{cursor_flag}"), "1", "the cursor shows again");
}

/// The words of session `name`'s row: name, state, then (with no run)
/// queued, jobs and failures.
fn row_words<'a>(screen: &'a str, name: &str) -> Vec<&'a str> {
    row(screen, name).split_whitespace().collect()
}

#[test]
fn top_counts_a_restarted_sessions_failures_afresh() {
    let Some(_) = tmux() else { return };
    let env = Env::new("top-restart");
    let id = env
        .ok(&["new", "--name", "crashy", "--cwd", "/tmp"])
        .trim()
        .to_string();
    env.ok(&["bash", &id, "--", "true"]);
    let tmux = Tmux::start(&env, &format!("{} top", env!("CARGO_BIN_EXE_eukhe")));
    tmux.until("top lists crashy", |s| row(s, "crashy").contains("idle"));
    super::crash_times(&env, &id, 6);
    tmux.until("crashy is given up after six failures", |s| {
        row_words(s, "crashy").get(1..5) == Some(&["given-up", "0", "0", "6"][..])
    });
    // `r` restarts the selected session: a new restart window.
    tmux.keys("r");
    tmux.until("crashy runs again, its failures counted afresh", |s| {
        let words = row_words(s, "crashy");
        words.get(1) != Some(&"given-up") && words.get(4) == Some(&"0")
    });
    assert_eq!(env.session(&id)["failures_in_window"], 0);
}

#[test]
fn top_cancels_a_running_user_bash_with_c() {
    let Some(_) = tmux() else { return };
    let env = Env::new("top-bash");
    let id = env
        .ok(&["new", "--name", "held", "--cwd", "/tmp"])
        .trim()
        .to_string();
    let mut client = env
        .command(&["bash", "-n", &id, "--", "sleep 120"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("eukhe bash");
    wait_until(Duration::from_secs(20), "ls lists bash 1", || {
        env.session(&id)["bash"] == serde_json::json!([1])
    });
    let tmux = Tmux::start(&env, &format!("{} top", env!("CARGO_BIN_EXE_eukhe")));
    tmux.until("top lists held", |s| !row(s, "held").is_empty());
    tmux.keys("c");
    tmux.until("the cancel is said", |s| {
        s.contains("cancelling bash 1 of held")
    });
    let status = client.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    let log = env.log(&id);
    assert!(log.contains("[bash 1 cancelled: signal 2]"), "{log}");
}
