//! Runs a Bend model and its Rust module on the same scenarios and compares
//! their transcripts step by step.
//!
//! A model's bridge module (`bend/bridge/<model>.bend`) defines
//! `run(scenario) -> String`: the model's verdicts for one scenario's steps,
//! joined by `" ; "`. The harness writes the scenarios into a generated Bend
//! program (in chunks: the Bend compiler is slow on one huge literal), runs
//! it with `bend run-c`, and reads back the verdict strings from the
//! balanced tree the program returns (the runtime prints a result through a
//! small fixed stack, so a long list could not be printed).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One scenario: a Bend term for the model, and for each step the inputs
/// (for the transcript) and the Rust module's verdict.
pub struct Scenario {
    pub bend: String,
    pub steps: Vec<(String, String)>,
}

impl Scenario {
    pub fn new(bend: impl Into<String>) -> Self {
        Scenario {
            bend: bend.into(),
            steps: Vec::new(),
        }
    }

    pub fn step(&mut self, inputs: impl Into<String>, verdict: impl Into<String>) {
        self.steps.push((inputs.into(), verdict.into()));
    }
}

/// A `u64` as a `(hi, mid, lo)` tuple of 24-bit limbs, which the model's
/// bridge turns into a `Wide`. (A tuple, not a `wide3(..)` call: every call
/// in a literal becomes an HVM definition, and a program holds at most
/// 16384 of them.)
pub fn limbs(n: u64) -> String {
    format!(
        "({}, {}, {})",
        n >> 48,
        (n >> 24) & 0xFF_FFFF,
        n & 0xFF_FFFF
    )
}

/// A Bend list literal.
pub fn list<I: IntoIterator<Item = String>>(items: I) -> String {
    format!("[{}]", items.into_iter().collect::<Vec<_>>().join(", "))
}

/// Seeded pseudo-random numbers (SplitMix64), so a failing run replays.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The `bend` executable: on PATH or in cargo's bin directory.
pub fn bend() -> PathBuf {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("bend"))
            .find(|candidate| candidate.is_file())
    });
    let in_cargo = std::env::var_os("HOME").map(|home| Path::new(&home).join(".cargo/bin/bend"));
    on_path.or(in_cargo.filter(|p| p.is_file())).expect(
        "bend not found: install it with `cargo install --locked bend-lang@0.2.38 hvm@2.0.22`",
    )
}

/// Run `scenarios` through `bend/bridge/<model>.bend` and compare with the
/// Rust verdicts; panics at the first scenario whose transcripts differ.
pub fn check(model: &str, scenarios: &[Scenario]) {
    assert!(!scenarios.is_empty(), "{model}: no scenarios");
    let dir = workdir(model);
    let program = program(model, scenarios);
    let main = dir.join(format!("bridge_{model}.bend"));
    std::fs::write(&main, &program).unwrap();
    let (success, stdout, stderr) = run_model(&dir, &main, &program);
    let model_lines = result_strings(&stdout);
    if !success || model_lines.len() != scenarios.len() {
        panic!(
            "{model}: bend run-c {} gave {} results for {} scenarios (status {}).\nstdout (start): {}\nstderr: {}",
            main.display(),
            model_lines.len(),
            scenarios.len(),
            if success { "success" } else { "failure" },
            stdout.chars().take(2000).collect::<String>(),
            stderr
        );
    }
    let mut rust_transcript = String::new();
    let mut bend_transcript = String::new();
    let mut first_difference = None;
    for (index, (scenario, model_line)) in scenarios.iter().zip(&model_lines).enumerate() {
        let model_verdicts: Vec<&str> = model_line.split(" ; ").collect();
        for (step, (inputs, verdict)) in scenario.steps.iter().enumerate() {
            let model_verdict = model_verdicts.get(step).copied().unwrap_or("<missing>");
            writeln!(rust_transcript, "#{index}.{step} {inputs} -> {verdict}").unwrap();
            writeln!(
                bend_transcript,
                "#{index}.{step} {inputs} -> {model_verdict}"
            )
            .unwrap();
            if first_difference.is_none() && model_verdict != verdict {
                first_difference = Some((index, step));
            }
        }
        if model_verdicts.len() != scenario.steps.len() && first_difference.is_none() {
            first_difference = Some((index, scenario.steps.len()));
        }
    }
    let rust_path = dir.join(format!("{model}.rust.txt"));
    let bend_path = dir.join(format!("{model}.bend.txt"));
    std::fs::write(&rust_path, &rust_transcript).unwrap();
    std::fs::write(&bend_path, &bend_transcript).unwrap();
    if let Some((index, step)) = first_difference {
        let scenario = &scenarios[index];
        let steps: String = scenario
            .steps
            .iter()
            .enumerate()
            .map(|(i, (inputs, verdict))| format!("  step {i}: {inputs} -> rust: {verdict}\n"))
            .collect();
        panic!(
            "{model}: scenario #{index} differs at step {step}\n{steps}  model said: {}\n  bend term: {}\n  transcripts: {} {}",
            model_lines[index],
            scenario.bend,
            rust_path.display(),
            bend_path.display()
        );
    }
    eprintln!(
        "{model}: {} scenarios, {} steps, Rust and Bend agree",
        scenarios.len(),
        scenarios.iter().map(|s| s.steps.len()).sum::<usize>()
    );
}

/// Run the generated program. With `EUKHE_BRIDGE_CACHE=1` (set by the
/// mutation-testing run, where only the Rust side changes) a successful
/// result is memoized under a hash of the program and every model file, so
/// an unchanged Bend computation is not repeated; CI never sets it.
fn run_model(dir: &Path, main: &Path, program: &str) -> (bool, String, String) {
    let cache = std::env::var("EUKHE_BRIDGE_CACHE")
        .is_ok_and(|v| v == "1")
        .then(|| {
            let mut key = program.to_string();
            let mut files = Vec::new();
            collect_files(&repo().join("bend"), &mut files);
            files.sort();
            for file in files {
                key.push_str(&std::fs::read_to_string(file).unwrap_or_default());
            }
            let hash = key.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
            });
            PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
                .join("bridge-cache")
                .join(format!("{hash:016x}.out"))
        });
    if let Some(hit) = cache
        .as_ref()
        .and_then(|path| std::fs::read_to_string(path).ok())
    {
        return (true, hit, String::new());
    }
    let output = Command::new(bend())
        .arg("run-c")
        .arg(main)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("cannot run bend: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if let (Some(path), true) = (&cache, output.status.success()) {
        let _ = std::fs::create_dir_all(path.parent().unwrap());
        let _ = std::fs::write(path, &stdout);
    }
    (
        output.status.success(),
        stdout,
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn collect_files(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect_files(&path, files);
        } else {
            files.push(path);
        }
    }
}

fn program(model: &str, scenarios: &[Scenario]) -> String {
    let mut program = format!(
        "from ./bend/bridge/{model} import (run)\nfrom ./bend/lib/text import (lines_tree)\n\n"
    );
    let chunks: Vec<&[Scenario]> = scenarios.chunks(40).collect();
    for (i, chunk) in chunks.iter().enumerate() {
        let terms: Vec<String> = chunk.iter().map(|s| s.bend.clone()).collect();
        writeln!(program, "def chunk{i}():\n  return {}\n", list(terms)).unwrap();
    }
    program.push_str(
        "def run_all(xs):\n  match xs:\n    case List/Nil:\n      return []\n    case List/Cons:\n      return List/Cons(run(xs.head), run_all(xs.tail))\n\n",
    );
    let all: Vec<String> = (0..chunks.len()).map(|i| format!("chunk{i}()")).collect();
    writeln!(
        program,
        "def main():\n  return lines_tree(run_all(List/flatten({})))",
        list(all)
    )
    .unwrap();
    program
}

/// A scratch directory holding a copy of `bend/`, so generated programs can
/// import the models without writing into the source tree.
fn workdir(model: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("bridge-{model}"));
    let _ = std::fs::remove_dir_all(&dir);
    copy_tree(&repo().join("bend"), &dir.join("bend"));
    dir
}

pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// The string leaves of the printed result, in order.
pub fn result_strings(stdout: &str) -> Vec<String> {
    let Some(start) = stdout.find("Result:") else {
        return Vec::new();
    };
    let mut strings = Vec::new();
    let mut chars = stdout[start..].chars();
    while let Some(c) = chars.next() {
        if c == '"' {
            let mut s = String::new();
            for c in chars.by_ref() {
                if c == '"' {
                    break;
                }
                s.push(c);
            }
            strings.push(s);
        }
    }
    strings
}
