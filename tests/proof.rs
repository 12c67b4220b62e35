//! Runs `PROOF.bend` (the whole file, as `bend run-c PROOF.bend`) and fails when any law does not
//! hold or any law the specification names is missing from its report.

#[path = "bridge/harness.rs"]
#[allow(dead_code)]
mod harness;

use std::os::unix::process::CommandExt;
use std::process::Command;

/// Every law the specification names for the Bend side, by section.
const LAWS: &[&str] = &[
    "spec_constants_pinned",
    "restart_gives_up",
    "restart_decide_window",
    "restart_decide_verdict",
    "timeouts_ordered",
    "restart_wire_round_trips",
    "restart_wire_rejects_malformed",
    "revive_after_refresh",
    "withdrawn_input_is_not_work",
    "orphan_never_aborts_resumable",
    "orphan_idle_exit_due",
    "orphan_work_exit_due",
    "orphan_capped_window_never_expires",
    "orphan_exit_by_work",
    "orphan_wire_round_trips",
    "orphan_wire_rejects_malformed",
    "idle_shutdown_never_aborts",
    "adopt_same_build",
    "adopt_retries_under_budget",
    "never_launch_beside_survivor",
    "survivor_counts_a_failure",
    "notice_shown_once",
    "notice_per_restore",
    "replace_never_downgrades",
    "replacement_terminates",
    "background_never_replaces",
    "only_interactive_replaces",
    "replace_rank_reads_semver",
    "replace_relation_exact",
    "replace_verdict_exact",
    "replace_rank_cut",
    "run_starts_once",
    "run_end_recorded_once",
    "live_run_never_interrupted",
    "orphan_exit_keeps_runs",
    "withdrawn_input_never_runs",
    "runs_one_at_a_time_in_order",
    "orphan_records_busy_and_resumes",
];

/// How long the whole of `PROOF.bend` may take: it runs in about two
/// minutes on two idle cores; the bound leaves room for a loaded machine
/// and ends a run that HVM would never finish (below).
const PROOF_RUN_LIMIT: std::time::Duration = std::time::Duration::from_secs(20 * 60);

/// `bend run-c PROOF.bend`, the whole file as a reader runs it, and every
/// law the specification names reported as holding with its case count.
///
/// HVM's runtime has a fixed bag of 2^16 pending high-priority redexes
/// (erasures among them) per thread; a program that drops a large shared
/// structure at once can fill it, and the runtime then spins for ever (a law section that held all its cases in
/// one list did). The run is bounded so such a regression fails, saying so.
#[test]
fn every_law_holds_over_its_bounded_domain() {
    let repo = harness::repo();
    let started = std::time::Instant::now();
    // Its own process group: bend runs hvm as a child, and a run ended at
    // the bound must not leave hvm spinning.
    let mut child = Command::new(harness::bend())
        .arg("run-c")
        .arg("PROOF.bend")
        .current_dir(&repo)
        .process_group(0)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("cannot run bend");
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || std::io::read_to_string(stdout).unwrap_or_default());
    let err = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > PROOF_RUN_LIMIT {
            // SAFETY: kill(2) on the process group this test started.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = child.wait();
            panic!(
                "bend run-c PROOF.bend did not end within {} s: HVM may have filled a \
                 thread's bag of pending redexes (a large structure dropped at once) and spun",
                PROOF_RUN_LIMIT.as_secs()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    let stdout = out.join().unwrap();
    let stderr = err.join().unwrap();
    assert!(
        status.success(),
        "bend run-c PROOF.bend failed ({status}): {}\n{stderr}",
        stdout.chars().take(3000).collect::<String>()
    );
    let lines = harness::result_strings(&stdout);
    eprintln!(
        "bend run-c PROOF.bend: {:.1} s",
        started.elapsed().as_secs_f64()
    );
    for line in &lines {
        eprintln!("  {line}");
    }
    let failing: Vec<&String> = lines.iter().filter(|l| !l.contains(" holds ")).collect();
    assert!(failing.is_empty(), "laws that do not hold: {failing:#?}");
    for law in LAWS {
        let reported = lines.iter().find(|l| l.split(' ').next() == Some(law));
        let line = reported.unwrap_or_else(|| panic!("PROOF.bend does not check {law}"));
        let cases: u64 = line.rsplit(' ').next().unwrap().parse().unwrap();
        assert!(cases > 0, "{law} was checked on no case");
    }
}

#[test]
fn every_model_type_checks() {
    for model in [
        "supervise",
        "revive",
        "orphan",
        "launcher",
        "notice",
        "replace",
        "runs",
    ] {
        let path = harness::repo().join("bend").join(format!("{model}.bend"));
        let output = Command::new(harness::bend())
            .args(["check", "-A", "missing-main", "-A", "unused-definition"])
            .arg(&path)
            .output()
            .expect("cannot run bend");
        let stderr = String::from_utf8_lossy(&output.stderr);
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && !stdout.contains("Errors") && !stderr.contains("Errors"),
            "bend check {} failed:\n{stdout}\n{stderr}",
            path.display()
        );
    }
}

/// One of the specification's constants changed in one model: the file,
/// the function whose body holds it, the text there and what it becomes.
struct ChangedConstant {
    what: &'static str,
    model: &'static str,
    function: &'static str,
    from: &'static str,
    to: &'static str,
}

const CHANGED_CONSTANTS: &[ChangedConstant] = &[
    ChangedConstant {
        what: "the restart window 15 -> 16.7 minutes",
        model: "supervise",
        function: "tm_daemon_restart_window",
        from: "900000",
        to: "1000000",
    },
    ChangedConstant {
        what: "given up after 6 failures instead of more than 5",
        model: "supervise",
        function: "restart_give_up_after",
        from: "return 5",
        to: "return 6",
    },
    ChangedConstant {
        what: "the first pause 300 ms",
        model: "supervise",
        function: "restart_pause_ms",
        from: "250",
        to: "300",
    },
    ChangedConstant {
        what: "the longest pause 32 s",
        model: "supervise",
        function: "tm_daemon_restart_pause_max",
        from: "30000",
        to: "32000",
    },
    ChangedConstant {
        what: "the busy refresh 5.5 minutes",
        model: "supervise",
        function: "tm_daemon_busy_refresh",
        from: "300000",
        to: "330000",
    },
    ChangedConstant {
        what: "the busy refresh written 30 s late",
        model: "revive",
        function: "busy_refresh",
        from: "wide_le(wide_add(latest.at, busy_refresh_ms()), now)",
        to: "wide_le(wide_add(wide_add(latest.at, busy_refresh_ms()), wide(30000)), now)",
    },
    ChangedConstant {
        what: "the revival window 23 minutes",
        model: "supervise",
        function: "tm_daemon_revival_window",
        from: "1500000",
        to: "1380000",
    },
    ChangedConstant {
        what: "busy evidence kept 28 minutes (a boot 25 minutes after the crash finds it stale)",
        model: "supervise",
        function: "tm_daemon_busy_evidence_ttl",
        from: "1810000",
        to: "1680000",
    },
    ChangedConstant {
        what: "the lost-exit default 4 minutes",
        model: "supervise",
        function: "tm_daemon_worker_lost_exit",
        from: "300000",
        to: "240000",
    },
    ChangedConstant {
        what: "three windows with work instead of two",
        model: "orphan",
        function: "orphan_patience",
        from: "return wide_add(window, window)",
        to: "return wide_add(window, wide_add(window, window))",
    },
    ChangedConstant {
        what: "the wire's range one ms short of 10^14",
        model: "orphan",
        function: "orphan_wire_ms_max",
        from: "8011776",
        to: "8011775",
    },
    ChangedConstant {
        what: "the client relaunch within 90 s",
        model: "supervise",
        function: "tm_daemon_client_relaunch_within",
        from: "60000",
        to: "90000",
    },
];

/// `text` with `from` replaced by `to` inside the body of `def function`.
fn change_in_function(text: &str, function: &str, from: &str, to: &str) -> String {
    let head = format!("def {function}(");
    let start = text
        .find(&head)
        .unwrap_or_else(|| panic!("no def {function} in the model"));
    let end = text[start + head.len()..]
        .find("\ndef ")
        .map_or(text.len(), |at| start + head.len() + at);
    let body = &text[start..end];
    assert!(
        body.contains(from),
        "def {function} does not contain {from:?}"
    );
    format!(
        "{}{}{}",
        &text[..start],
        body.replacen(from, to, 1),
        &text[end..]
    )
}

/// Changing any of the specification's constants in any model makes a law
/// fail: each change is made on a copy of the models, laws and proof, and
/// the copy's constants section (and the supervisor's) is run.
#[test]
fn a_changed_specification_constant_in_any_model_fails_a_law() {
    let repo = harness::repo();
    let proof = std::fs::read_to_string(repo.join("PROOF.bend")).unwrap();
    let main_at = proof
        .find("def main() -> Tree(String):")
        .expect("PROOF.bend has a main");
    let partial = format!(
        "{}def main() -> Tree(String):\n  return lines_tree(List/flatten([proof_constants(), proof_supervisor()]))\n",
        &proof[..main_at]
    );
    let copy = repo.join("target/tmp/proof-constants");
    let _ = std::fs::remove_dir_all(&copy);
    std::fs::create_dir_all(copy.join("bend/lib")).unwrap();
    std::fs::create_dir_all(copy.join("bend/bridge")).unwrap();
    let mut copy_tree = vec!["LAWS.bend".to_string()];
    for dir in ["bend", "bend/lib"] {
        for entry in std::fs::read_dir(repo.join(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "bend") {
                copy_tree.push(format!(
                    "{dir}/{}",
                    path.file_name().unwrap().to_string_lossy()
                ));
            }
        }
    }
    let run = |label: &str| -> Vec<String> {
        let output = Command::new(harness::bend())
            .arg("run-c")
            .arg("PROOF.bend")
            .current_dir(&copy)
            .output()
            .expect("cannot run bend");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let lines = harness::result_strings(&stdout);
        assert!(
            output.status.success() && !lines.is_empty(),
            "{label}: bend run-c failed: {}\n{}",
            stdout.chars().take(2000).collect::<String>(),
            String::from_utf8_lossy(&output.stderr)
        );
        lines
    };
    let restore = || {
        for file in &copy_tree {
            std::fs::copy(repo.join(file), copy.join(file)).unwrap();
        }
        std::fs::write(copy.join("PROOF.bend"), &partial).unwrap();
    };
    restore();
    let unchanged = run("the models as they are");
    assert!(
        unchanged.iter().all(|l| l.contains(" holds ")),
        "the copy should hold before any change: {unchanged:#?}"
    );
    let mut survived = Vec::new();
    for change in CHANGED_CONSTANTS {
        restore();
        let path = copy.join(format!("bend/{}.bend", change.model));
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(
            &path,
            change_in_function(&text, change.function, change.from, change.to),
        )
        .unwrap();
        let lines = run(change.what);
        let failing: Vec<&String> = lines.iter().filter(|l| l.contains(" FAILS ")).collect();
        eprintln!("{}: {failing:?}", change.what);
        if failing.is_empty() {
            survived.push(change.what);
        }
    }
    assert!(
        survived.is_empty(),
        "constants changed in a model with every law still holding: {survived:#?}"
    );
}

/// The repository stands alone: no tracked file points outside it to the
/// specification's first home (the project states it in `docs/laws.md`).
#[test]
fn no_tracked_file_points_outside_the_repository() {
    let repo = harness::repo();
    let outside = ["..", "/shared"].concat();
    let listed = Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(&repo)
        .output()
        .expect("cannot run git ls-files");
    assert!(listed.status.success(), "git ls-files failed");
    let files: Vec<&[u8]> = listed
        .stdout
        .split(|b| *b == 0)
        .filter(|f| !f.is_empty())
        .collect();
    assert!(
        files.len() > 100,
        "git ls-files listed only {} files",
        files.len()
    );
    let mut pointing = Vec::new();
    for file in files {
        let path = repo.join(String::from_utf8_lossy(file).as_ref());
        let Ok(bytes) = std::fs::read(&path) else {
            continue;
        };
        if bytes
            .windows(outside.len())
            .any(|w| w == outside.as_bytes())
        {
            pointing.push(path.display().to_string());
        }
    }
    assert!(
        pointing.is_empty(),
        "tracked files point outside the repository ({outside}): {pointing:#?}"
    );
    assert!(
        repo.join("docs/laws.md").is_file(),
        "docs/laws.md, the specification in the project's words, is missing"
    );
}
