//! Runs `PROOF.bend` (the whole file, as `bend run-c PROOF.bend`) and fails when any law does not
//! hold or any law the specification names is missing from its report.

use std::os::unix::process::CommandExt;
use std::process::Command;

use crate::support::process::{signal_group, Signal};
use crate::support::wait_for;

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
    let repo = crate::bridge::harness::repo();
    let started = std::time::Instant::now();
    // Its own process group: bend runs hvm as a child, and a run ended at
    // the bound must not leave hvm spinning.
    let mut child = Command::new(crate::bridge::harness::bend())
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
    let mut status = None;
    let limit = PROOF_RUN_LIMIT.saturating_sub(started.elapsed());
    if !wait_for(limit, || {
        status = child.try_wait().unwrap();
        status.is_some()
    }) {
        signal_group(child.id(), Signal::SIGKILL);
        let _ = child.wait();
        panic!(
            "bend run-c PROOF.bend did not end within {} s: HVM may have filled a \
             thread's bag of pending redexes (a large structure dropped at once) and spun",
            PROOF_RUN_LIMIT.as_secs()
        );
    }
    let status = status.unwrap();
    let stdout = out.join().unwrap();
    let stderr = err.join().unwrap();
    assert!(
        status.success(),
        "bend run-c PROOF.bend failed ({status}): {}\n{stderr}",
        stdout.chars().take(3000).collect::<String>()
    );
    let lines = crate::bridge::harness::result_strings(&stdout);
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
        let path = crate::bridge::harness::repo()
            .join("bend")
            .join(format!("{model}.bend"));
        let output = Command::new(crate::bridge::harness::bend())
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

/// The result lines of `PROOF.bend` run (compiled) in `dir`, a copy of
/// the models; `label` names the run in a failure.
fn run_proof_in(dir: &std::path::Path, label: &str) -> Vec<String> {
    let output = Command::new(crate::bridge::harness::bend())
        .arg("run-c")
        .arg("PROOF.bend")
        .current_dir(dir)
        .output()
        .expect("cannot run bend");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let lines = crate::bridge::harness::result_strings(&stdout);
    assert!(
        output.status.success() && !lines.is_empty(),
        "{label}: bend run-c failed: {}\n{}",
        stdout.chars().take(2000).collect::<String>(),
        String::from_utf8_lossy(&output.stderr)
    );
    lines
}

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
    let repo = crate::bridge::harness::repo();
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
    let run = |label: &str| run_proof_in(&copy, label);
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
    let repo = crate::bridge::harness::repo();
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

/// A model changed on purpose, and the law that must then fail: the
/// model's file, the function whose body is changed, the text there and
/// what it becomes, and the sections of `PROOF.bend` that check the law.
struct Mutation {
    what: &'static str,
    law: &'static str,
    model: &'static str,
    function: &'static str,
    from: &'static str,
    to: &'static str,
    proof: &'static str,
}

const ADOPT: &str = "[launcher_proof_adopt_line()]";
const NOTICE: &str =
    "[notice_proof_line(\"notice_shown_once\", 0), notice_proof_line(\"notice_per_restore\", 1)]";
const RELATION: &str =
    "[replace_proof_line(\"replace_relation_exact\", replace_proof_relations())]";
const WITHDRAWN: &str = "[proof_withdrawn_line()]";
const RUNS: &str = "proof_runs()";
const WIRE: &str = "orphan_wire_proof_lines()";

/// Each law stated from the specification's sentences (its expected values
/// never computed with the model's own functions) fails on a model broken
/// in a way the sentence forbids.
const MUTATIONS: &[Mutation] = &[
    Mutation {
        what: "a live worker of another build is adopted",
        law: "adopt_same_build",
        model: "launcher",
        function: "launcher_adoption",
        from: "(own_build == live_build) & (reachable != 0)",
        to: "(reachable != 0)",
        proof: ADOPT,
    },
    Mutation {
        what: "a live worker that does not answer is adopted",
        law: "adopt_same_build",
        model: "launcher",
        function: "launcher_adoption",
        from: "(own_build == live_build) & (reachable != 0)",
        to: "(own_build == live_build)",
        proof: ADOPT,
    },
    Mutation {
        what: "a process holding the earlier one's pid is taken for it (pid alone)",
        law: "adopt_same_build",
        model: "launcher",
        function: "launcher_same_proc",
        from: "return wide_eq(a.pid, b.pid) & wide_eq(a.start, b.start)",
        to: "return wide_eq(a.pid, b.pid)",
        proof: ADOPT,
    },
    Mutation {
        what: "a survivor of its stop is launched beside",
        law: "adopt_same_build",
        model: "launcher",
        function: "launcher_survivor",
        from: "return LauncherLaunch/CountFailure",
        to: "return LauncherLaunch/Launch",
        proof: ADOPT,
    },
    Mutation {
        what: "a notice delivered again is shown again",
        law: "notice_shown_once",
        model: "notice",
        function: "notice_deliver",
        from: "if notice_shows_id(view, m.id):",
        to: "if 0:",
        proof: NOTICE,
    },
    Mutation {
        what: "an attach adds the rebuilt view to the old one",
        law: "notice_per_restore",
        model: "notice",
        function: "notice_step",
        from: "NoticeSession/S(s.stored, s.restores, s.next_id, notice_attach(s.stored))",
        to: "NoticeSession/S(s.stored, s.restores, s.next_id, List/concat(s.view, notice_attach(s.stored)))",
        proof: NOTICE,
    },
    Mutation {
        what: "restore notices numbered from 0",
        law: "notice_per_restore",
        model: "notice",
        function: "restore_notice",
        from: "restores_so_far + 1",
        to: "restores_so_far",
        proof: NOTICE,
    },
    Mutation {
        what: "a fresh kernel start stores a restore notice",
        law: "notice_shown_once",
        model: "notice",
        function: "restore_notice",
        from: "return Maybe/None",
        to: "return Maybe/Some(NoticeKind/Restore(restores_so_far + 1))",
        proof: NOTICE,
    },
    Mutation {
        what: "a pre-release ranks equal to its series' release",
        law: "replace_relation_exact",
        model: "replace",
        function: "replace_rank_cmp",
        from: "return (a.release > b.release) * 2",
        to: "return 1",
        proof: RELATION,
    },
    Mutation {
        what: "another build of the same version taken for the same build",
        law: "replace_relation_exact",
        model: "replace",
        function: "replace_relation_of",
        from: "elif same_id:",
        to: "elif 1:",
        proof: RELATION,
    },
    Mutation {
        what: "minor versions ordered backwards",
        law: "replace_relation_exact",
        model: "replace",
        function: "replace_rank_cmp",
        from: "return (a.minor > b.minor) * 2",
        to: "return (a.minor < b.minor) * 2",
        proof: RELATION,
    },
    Mutation {
        what: "withdrawn input counted as queued input",
        law: "withdrawn_input_is_not_work",
        model: "revive",
        function: "session_work_of",
        from: "    case _:\n      return 0",
        to: "    case _:\n      return work_queued_input()",
        proof: WITHDRAWN,
    },
    Mutation {
        what: "the refresh tick records busy without work",
        law: "withdrawn_input_is_not_work",
        model: "revive",
        function: "busy_refresh",
        from: "if session_work_any(work):",
        to: "if 1:",
        proof: WITHDRAWN,
    },
    Mutation {
        what: "an orphan exit records no busy evidence",
        law: "orphan_records_busy_and_resumes",
        model: "runs",
        function: "runs_world_step",
        from: "0, [], runs_has_work(w.book))",
        to: "0, [], w.busy)",
        proof: RUNS,
    },
    Mutation {
        what: "a later supervisor resumes only a session whose kernel lives",
        law: "orphan_records_busy_and_resumes",
        model: "runs",
        function: "runs_world_supervisor_start",
        from: "(w.alive | w.busy)",
        to: "w.alive",
        proof: RUNS,
    },
    Mutation {
        what: "an orphan exit takes the kernel and its run down",
        law: "orphan_records_busy_and_resumes",
        model: "runs",
        function: "runs_world_step",
        from: "w.alive, w.gen, w.spool, w.executing, w.channel, w.execs, w.live, 0, [], runs_has_work(w.book))",
        to: "0, w.gen, w.spool, 0, [], w.execs, [], 0, [], runs_has_work(w.book))",
        proof: RUNS,
    },
    Mutation {
        what: "a window past the wire's range refused instead of never",
        law: "orphan_wire_rejects_malformed",
        model: "orphan",
        function: "orphan_window_parse",
        from: "              return Maybe/Some(Maybe/None)",
        to: "              return Maybe/None",
        proof: WIRE,
    },
    Mutation {
        what: "never written as \"Never\"",
        law: "orphan_wire_round_trips",
        model: "orphan",
        function: "orphan_window_text",
        from: "return \"never\"",
        to: "return \"Never\"",
        proof: WIRE,
    },
    Mutation {
        what: "a sign before the digits accepted",
        law: "orphan_wire_rejects_malformed",
        model: "orphan",
        function: "orphan_window_digits",
        from: "      if (c < 48) | (c > 57):",
        to: "      if c == 43:\n        return orphan_window_digits(text.tail, acc)\n      elif (c < 48) | (c > 57):",
        proof: WIRE,
    },
];

/// The runs world explored to 4 events in the mutation runs: each of its
/// mutations breaks a history of at most two (an orphan exit; a kernel
/// death, then an orphan exit) and the supervisor's start the law looks
/// past.
const MUTATION_RUNS_DEPTH: &str = "def runs_proof_depth() -> u24:\n  return 4\n";

/// Every mutation makes its law fail, and the unchanged models hold on the
/// same partial proofs: run on a copy of the models, laws and proof.
#[test]
fn each_law_from_the_sentences_fails_on_a_mutated_model() {
    let repo = crate::bridge::harness::repo();
    let proof = std::fs::read_to_string(repo.join("PROOF.bend")).unwrap();
    let proof = proof.replacen(
        "def runs_proof_depth() -> u24:\n  return 7\n",
        MUTATION_RUNS_DEPTH,
        1,
    );
    assert!(
        proof.contains(MUTATION_RUNS_DEPTH),
        "PROOF.bend's runs_proof_depth changed"
    );
    let main_at = proof
        .find("def main() -> Tree(String):")
        .expect("PROOF.bend has a main");
    let copy = repo.join("target/tmp/proof-mutations");
    let _ = std::fs::remove_dir_all(&copy);
    std::fs::create_dir_all(copy.join("bend/lib")).unwrap();
    let mut tree = vec!["LAWS.bend".to_string()];
    for dir in ["bend", "bend/lib"] {
        for entry in std::fs::read_dir(repo.join(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "bend") {
                tree.push(format!(
                    "{dir}/{}",
                    path.file_name().unwrap().to_string_lossy()
                ));
            }
        }
    }
    let restore = |sections: &str| {
        for file in &tree {
            std::fs::copy(repo.join(file), copy.join(file)).unwrap();
        }
        let main = format!(
            "{}def main() -> Tree(String):\n  return lines_tree(List/flatten([{sections}]))\n",
            &proof[..main_at]
        );
        std::fs::write(copy.join("PROOF.bend"), main).unwrap();
    };
    let run = |label: &str| run_proof_in(&copy, label);
    let mut sections: Vec<&str> = MUTATIONS.iter().map(|m| m.proof).collect();
    sections.dedup();
    restore(&sections.join(", "));
    let unchanged = run("the models as they are");
    for law in MUTATIONS.iter().map(|m| m.law) {
        let line = unchanged
            .iter()
            .find(|l| l.split(' ').next() == Some(law))
            .unwrap_or_else(|| panic!("the partial proof does not check {law}"));
        assert!(line.contains(" holds "), "unchanged models: {line}");
    }
    let mut survived = Vec::new();
    for mutation in MUTATIONS {
        restore(mutation.proof);
        let path = copy.join(format!("bend/{}.bend", mutation.model));
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(
            &path,
            change_in_function(&text, mutation.function, mutation.from, mutation.to),
        )
        .unwrap();
        let lines = run(mutation.what);
        let line = lines
            .iter()
            .find(|l| l.split(' ').next() == Some(mutation.law))
            .unwrap_or_else(|| panic!("{}: {} not reported", mutation.what, mutation.law));
        eprintln!("{}: {line}", mutation.what);
        if !line.contains(" FAILS ") {
            survived.push(format!("{} ({})", mutation.what, mutation.law));
        }
    }
    assert!(
        survived.is_empty(),
        "mutated models with their law still holding: {survived:#?}"
    );
}
