//! Runs `bend run-c PROOF.bend` and fails when any law does not hold or any
//! law the specification names is missing from its report.

#[path = "bridge/harness.rs"]
#[allow(dead_code)]
mod harness;

use std::process::Command;

/// Every law the specification names for the Bend side, by section.
const LAWS: &[&str] = &[
    "restart_gives_up",
    "restart_decide_window",
    "restart_decide_verdict",
    "timeouts_ordered",
    "revive_after_refresh",
    "orphan_never_aborts_resumable",
    "orphan_idle_exit_due",
    "orphan_work_exit_due",
    "orphan_capped_window_never_expires",
    "orphan_exit_by_work",
    "idle_shutdown_never_aborts",
    "adopt_same_build",
    "notice_shown_once",
    "notice_per_restore",
    "replace_never_downgrades",
    "replacement_terminates",
    "background_never_replaces",
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

#[test]
fn every_law_holds_over_its_bounded_domain() {
    let output = Command::new(harness::bend())
        .arg("run-c")
        .arg("PROOF.bend")
        .current_dir(harness::repo())
        .output()
        .expect("cannot run bend");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "bend run-c PROOF.bend failed: {}\n{}",
        stdout.chars().take(3000).collect::<String>(),
        String::from_utf8_lossy(&output.stderr)
    );
    let lines = harness::result_strings(&stdout);
    for line in &lines {
        eprintln!("{line}");
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
