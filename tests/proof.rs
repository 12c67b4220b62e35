//! Runs `PROOF.bend` (section by section) and fails when any law does not
//! hold or any law the specification names is missing from its report.

#[path = "bridge/harness.rs"]
#[allow(dead_code)]
mod harness;

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
];

/// The sections `main` of `PROOF.bend` lists (`proof_supervisor`, ...).
fn proof_sections(proof: &str) -> Vec<String> {
    let main = &proof[proof
        .find("def main() -> Tree(String):")
        .expect("PROOF.bend has a main")..];
    let sections: Vec<String> = main
        .lines()
        .map(str::trim)
        .filter_map(|line| line.strip_suffix("(),").or_else(|| line.strip_suffix("()")))
        .filter(|name| name.starts_with("proof_"))
        .map(str::to_string)
        .collect();
    assert!(sections.len() >= 10, "PROOF.bend's main lists {sections:?}");
    sections
}

/// `PROOF.bend` with a `main` that runs `section` alone, in a directory
/// beside links to the models (its imports are relative).
fn section_program(proof: &str, section: &str) -> std::path::PathBuf {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("proof-sections");
    std::fs::create_dir_all(&dir).unwrap();
    for name in ["LAWS.bend", "bend"] {
        let link = dir.join(name);
        if std::fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(harness::repo().join(name), &link).unwrap();
        }
    }
    let head = &proof[..proof.find("def main() -> Tree(String):").unwrap()];
    let file = dir.join(format!("PROOF.{section}.bend"));
    std::fs::write(
        &file,
        format!(
            "{head}def main() -> Tree(String):\n  return lines_tree(List/flatten([{section}()]))\n"
        ),
    )
    .unwrap();
    file
}

/// Every section of `PROOF.bend`, each as a program of its own: HVM's heap
/// is fixed, and with every section at once the launcher's two-worker
/// world leaves it nearly full and the run crawls (over 19 minutes on this
/// machine, against about 6 for the sections one by one).
#[test]
fn every_law_holds_over_its_bounded_domain() {
    let proof = std::fs::read_to_string(harness::repo().join("PROOF.bend")).unwrap();
    let mut lines = Vec::new();
    for section in proof_sections(&proof) {
        let program = section_program(&proof, &section);
        let started = std::time::Instant::now();
        let output = Command::new(harness::bend())
            .arg("run-c")
            .arg(&program)
            .current_dir(program.parent().unwrap())
            .output()
            .expect("cannot run bend");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "bend run-c PROOF.bend ({section}) failed: {}\n{}",
            stdout.chars().take(3000).collect::<String>(),
            String::from_utf8_lossy(&output.stderr)
        );
        let reported = harness::result_strings(&stdout);
        eprintln!("{section}: {:.1} s", started.elapsed().as_secs_f64());
        for line in &reported {
            eprintln!("  {line}");
        }
        lines.extend(reported);
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
