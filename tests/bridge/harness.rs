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

/// How the interpreted bridge samples a model's scenarios: every
/// `INTERPRETED_EVERY`th one (the first always). The compiled model runs
/// them all.
const INTERPRETED_EVERY: usize = 10;

/// Run `scenarios` through the compiled bridge (all of them) and through
/// `bend/bridge/<model>.bend` interpreted by `bend run-c` (a sample), and
/// compare both with the Rust verdicts: compiled = Rust on every scenario,
/// interpreted = compiled = Rust on the sample. Panics at the first
/// scenario where they differ.
pub fn check(model: &str, scenarios: &[Scenario]) {
    assert!(!scenarios.is_empty(), "{model}: no scenarios");
    let dir = workdir(model);
    let started = std::time::Instant::now();
    let compiled = compiled_verdicts(model, scenarios, &dir);
    let compiled_time = started.elapsed();
    let all: Vec<usize> = (0..scenarios.len()).collect();
    compare(model, "compiled", &dir, scenarios, &all, &compiled);

    let sample: Vec<usize> = (0..scenarios.len()).step_by(INTERPRETED_EVERY).collect();
    let sampled: Vec<&Scenario> = sample.iter().map(|&i| &scenarios[i]).collect();
    let started = std::time::Instant::now();
    let interpreted = interpreted_verdicts(model, &sampled, &dir);
    let interpreted_time = started.elapsed();
    compare(model, "interpreted", &dir, scenarios, &sample, &interpreted);
    for (line, &index) in interpreted.iter().zip(&sample) {
        assert_eq!(
            line, &compiled[index],
            "{model}: scenario #{index}: the interpreted model said {line:?}, the compiled one {:?}",
            compiled[index]
        );
    }
    let laws = FFI_LAWS
        .iter()
        .find(|(m, _)| *m == model)
        .map_or(String::new(), |(_, laws)| {
            format!(" ({} hold)", laws.join(", "))
        });
    eprintln!(
        "{model}: {} scenarios, {} steps: compiled = Rust ({:.1} s); {} of them: interpreted = compiled = Rust ({:.1} s){laws}",
        scenarios.len(),
        scenarios.iter().map(|s| s.steps.len()).sum::<usize>(),
        compiled_time.as_secs_f64(),
        sample.len(),
        interpreted_time.as_secs_f64(),
    );
}

/// The specification's compiled-model laws (compiled = interpreted = Rust;
/// LAWS.bend states them in words), by the bridge model whose scenarios
/// check them. The other models are checked the same way; the
/// specification names no law for them.
pub const FFI_LAWS: &[(&str, &[&str])] = &[
    ("supervise", &["restart_ffi_decide"]),
    ("restart_wire", &["restart_ffi_wire"]),
    ("orphan", &["orphan_ffi_decision"]),
    ("orphan_wire", &["orphan_ffi_wire"]),
    ("replace", &["replace_ffi_relation", "replace_ffi_verdict"]),
];

/// Compare one side's verdict lines (`lines[k]` for scenario
/// `indices[k]`) with the Rust verdicts, writing both transcripts to `dir`.
fn compare(
    model: &str,
    side: &str,
    dir: &Path,
    scenarios: &[Scenario],
    indices: &[usize],
    lines: &[String],
) {
    assert_eq!(
        lines.len(),
        indices.len(),
        "{model}: the {side} model gave {} results for {} scenarios",
        lines.len(),
        indices.len()
    );
    let mut rust_transcript = String::new();
    let mut model_transcript = String::new();
    let mut first_difference = None;
    for (&index, model_line) in indices.iter().zip(lines) {
        let scenario = &scenarios[index];
        let model_verdicts: Vec<&str> = model_line.split(" ; ").collect();
        for (step, (inputs, verdict)) in scenario.steps.iter().enumerate() {
            let model_verdict = model_verdicts.get(step).copied().unwrap_or("<missing>");
            writeln!(rust_transcript, "#{index}.{step} {inputs} -> {verdict}").unwrap();
            writeln!(
                model_transcript,
                "#{index}.{step} {inputs} -> {model_verdict}"
            )
            .unwrap();
            if first_difference.is_none() && model_verdict != verdict {
                first_difference = Some((index, step, model_line));
            }
        }
        if model_verdicts.len() != scenario.steps.len() && first_difference.is_none() {
            first_difference = Some((index, scenario.steps.len(), model_line));
        }
    }
    let rust_path = dir.join(format!("{model}.{side}.rust.txt"));
    let model_path = dir.join(format!("{model}.{side}.bend.txt"));
    std::fs::write(&rust_path, &rust_transcript).unwrap();
    std::fs::write(&model_path, &model_transcript).unwrap();
    if let Some((index, step, model_line)) = first_difference {
        let scenario = &scenarios[index];
        let steps: String = scenario
            .steps
            .iter()
            .enumerate()
            .map(|(i, (inputs, verdict))| format!("  step {i}: {inputs} -> rust: {verdict}\n"))
            .collect();
        panic!(
            "{model}: scenario #{index} differs at step {step} ({side} model)\n{steps}  model said: {model_line}\n  bend term: {}\n  transcripts: {} {}",
            scenario.bend,
            rust_path.display(),
            model_path.display()
        );
    }
}

/// The interpreted model's verdict line for each scenario: the terms
/// embedded in a generated program that `bend run-c` runs.
fn interpreted_verdicts(model: &str, scenarios: &[&Scenario], dir: &Path) -> Vec<String> {
    let program = program(model, scenarios);
    let main = dir.join(format!("bridge_{model}.bend"));
    std::fs::write(&main, &program).unwrap();
    let (success, stdout, stderr) = memoized(&program, || {
        let output = Command::new(bend())
            .arg("run-c")
            .arg(&main)
            .current_dir(dir)
            .output()
            .unwrap_or_else(|e| panic!("cannot run bend: {e}"));
        (
            output.status.success(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    });
    let lines = result_strings(&stdout);
    if !success || lines.len() != scenarios.len() {
        panic!(
            "{model}: bend run-c {} gave {} results for {} scenarios (status {}).\nstdout (start): {}\nstderr: {}",
            main.display(),
            lines.len(),
            scenarios.len(),
            if success { "success" } else { "failure" },
            stdout.chars().take(2000).collect::<String>(),
            stderr
        );
    }
    lines
}

/// The compiled model's verdict line for each scenario: the terms written
/// to `scenarios.txt`, read back by the compiled bridge
/// (`bend/compiled_bridge.bend`), whose result tree is read from the
/// runtime's printout (see [`printed_lines`]).
fn compiled_verdicts(model: &str, scenarios: &[Scenario], dir: &Path) -> Vec<String> {
    let binary = compiled_bridge();
    let mut input = format!("{model:?}\n");
    for scenario in scenarios {
        // ASCII only (the bridge reads bytes, not UTF-8): other characters
        // can only be inside string literals, where an escape means them.
        for c in scenario.bend.chars() {
            if c.is_ascii() {
                input.push(c);
            } else {
                write!(input, "\\u{{{:x}}}", c as u32).unwrap();
            }
        }
        input.push('\n');
    }
    std::fs::write(dir.join("scenarios.txt"), &input).unwrap();
    let (success, stdout, stderr) = memoized(&input, || {
        let output = Command::new(&binary)
            .current_dir(dir)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", binary.display()));
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        // HVM's runtime says OOM and goes on when its heap is full.
        let success = output.status.success() && !stdout.contains("OOM");
        (
            success,
            stdout,
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    });
    let lines = printed_lines(&stdout);
    match lines {
        Some(lines) if success && lines.len() == scenarios.len() => lines,
        _ => panic!(
            "{model}: the compiled bridge {} gave {} results for {} scenarios (status {}).\nstdout (start): {}\nstderr: {}",
            binary.display(),
            lines.map_or(0, |l| l.len()),
            scenarios.len(),
            if success { "success" } else { "failure" },
            stdout.chars().take(2000).collect::<String>(),
            stderr
        ),
    }
}

/// The compiled bridge, built once per test run (and again only when a file
/// under `bend/` changes): `bend gen-c -Oinline` of
/// `bend/compiled_bridge.bend`, then the C compiler, for one thread (the
/// model's work is one sequential walk per scenario list; a second thread
/// only spins in `sched_yield`, and took half as long again). Test
/// processes run at once take turns through a lock, so the first builds it
/// and the others find it.
fn compiled_bridge() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("bridge-compiled");
    std::fs::create_dir_all(&root).unwrap();
    let lock = std::fs::File::create(root.join("build.lock")).unwrap();
    lock.lock().unwrap();
    let key = bend_tree_hash(&COMPILED_FLAGS.join(" "));
    let binary = root.join(format!("bridge-{key:016x}"));
    if binary.is_file() {
        return binary;
    }
    let started = std::time::Instant::now();
    let src = root.join(format!("src-{key:016x}"));
    let _ = std::fs::remove_dir_all(&src);
    copy_tree(&repo().join("bend"), &src);
    let generated = Command::new(bend())
        .args(["gen-c", "-Oinline", "compiled_bridge.bend"])
        .current_dir(&src)
        .output()
        .unwrap_or_else(|e| panic!("cannot run bend gen-c: {e}"));
    assert!(
        generated.status.success(),
        "bend gen-c bend/compiled_bridge.bend failed:\n{}",
        String::from_utf8_lossy(&generated.stderr)
    );
    std::fs::write(src.join("compiled_bridge.c"), generated.stdout).unwrap();
    let partial = root.join(format!("bridge-{key:016x}.partial"));
    let compiled = Command::new("cc")
        .args(COMPILED_FLAGS)
        .arg("-o")
        .arg(&partial)
        .args(["compiled_bridge.c", "-lm", "-lpthread"])
        .current_dir(&src)
        .output()
        .unwrap_or_else(|e| panic!("cannot run the C compiler (cc): {e}"));
    assert!(
        compiled.status.success(),
        "cc compiled_bridge.c failed:\n{}",
        String::from_utf8_lossy(&compiled.stderr)
    );
    std::fs::rename(&partial, &binary).unwrap();
    let _ = std::fs::remove_dir_all(&src);
    // Builds of earlier versions of the models are of no further use.
    for entry in std::fs::read_dir(&root).into_iter().flatten().flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("bridge-") && entry.path() != binary {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    eprintln!(
        "built the compiled bridge in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    binary
}

/// The C compiler's flags: one runtime thread (`TPC_L2` is log2 of HVM's
/// threads), optimised.
const COMPILED_FLAGS: &[&str] = &["-O1", "-DTPC_L2=0"];

/// The verdict lines from the compiled bridge's printout: `Result: ` and
/// its value, `IO/Done` of a `Tree(String)`, as HVM's runtime prints a net
/// (`bend gen-c` leaves out the readback `bend run-c` does). A constructor
/// is `((tag (field (field ... x))) x)` (tags inlined as numbers by
/// `-Oinline`), an empty string `@String/Nil`. `None` when the printout is
/// not that.
fn printed_lines(stdout: &str) -> Option<Vec<String>> {
    let text = stdout.lines().find_map(|l| l.strip_prefix("Result: "))?;
    let net = PrintedNet::parse(text)?;
    let done = net.constructor(net.root)?;
    let tree = *done.1.last()?;
    let mut lines = Vec::new();
    let mut pending = vec![tree];
    while let Some(node) = pending.pop() {
        match net.constructor(node)? {
            (0, fields) if fields.len() == 2 => {
                pending.push(fields[1]);
                pending.push(fields[0]);
            }
            (1, fields) if fields.len() == 1 => lines.push(net.string(fields[0])?),
            _ => return None,
        }
    }
    Some(lines)
}

/// A printed HVM net: pairs, numbers, references and variables.
struct PrintedNet {
    nodes: Vec<Printed>,
    root: usize,
}

enum Printed {
    Pair(usize, usize),
    Number(u32),
    Ref(String),
    Var,
}

impl PrintedNet {
    /// Parses without recursion: a line's characters nest a few levels each.
    fn parse(text: &str) -> Option<PrintedNet> {
        let mut nodes = Vec::new();
        // Open pairs, each with its first half once read.
        let mut open: Vec<Option<usize>> = Vec::new();
        let mut chars = text.chars().peekable();
        loop {
            let node = loop {
                match *chars.peek()? {
                    ' ' => {
                        chars.next();
                    }
                    '(' => {
                        chars.next();
                        open.push(None);
                    }
                    _ => break Self::atom(&mut chars)?,
                }
            };
            nodes.push(node);
            let mut done = nodes.len() - 1;
            loop {
                match open.last_mut() {
                    None => return Some(PrintedNet { nodes, root: done }),
                    Some(first @ None) => {
                        *first = Some(done);
                        break;
                    }
                    Some(Some(first)) => {
                        let first = *first;
                        open.pop();
                        while chars.peek() == Some(&' ') {
                            chars.next();
                        }
                        if chars.next()? != ')' {
                            return None;
                        }
                        nodes.push(Printed::Pair(first, done));
                        done = nodes.len() - 1;
                    }
                }
            }
        }
    }

    fn atom(chars: &mut std::iter::Peekable<std::str::Chars>) -> Option<Printed> {
        let mut token = String::new();
        while let Some(&c) = chars.peek() {
            if c == ' ' || c == '(' || c == ')' {
                break;
            }
            token.push(c);
            chars.next();
        }
        if let Some(name) = token.strip_prefix('@') {
            Some(Printed::Ref(name.to_string()))
        } else if token.starts_with(|c: char| c.is_ascii_digit()) {
            token.parse().ok().map(Printed::Number)
        } else if token.is_empty() {
            None
        } else {
            Some(Printed::Var)
        }
    }

    /// A constructor's tag and fields.
    fn constructor(&self, node: usize) -> Option<(u32, Vec<usize>)> {
        let Printed::Pair(inner, _) = self.nodes[node] else {
            return None;
        };
        let Printed::Pair(tag, mut chain) = self.nodes[inner] else {
            return None;
        };
        let Printed::Number(tag) = self.nodes[tag] else {
            return None;
        };
        let mut fields = Vec::new();
        while let Printed::Pair(field, rest) = self.nodes[chain] {
            fields.push(field);
            chain = rest;
        }
        Some((tag, fields))
    }

    fn string(&self, mut node: usize) -> Option<String> {
        let mut s = String::new();
        loop {
            if let Printed::Ref(name) = &self.nodes[node] {
                return (name == "String/Nil").then_some(s);
            }
            let (1, fields) = self.constructor(node)? else {
                return None;
            };
            let Printed::Number(c) = self.nodes[*fields.first()?] else {
                return None;
            };
            s.push(char::from_u32(c)?);
            node = *fields.get(1)?;
        }
    }
}

/// With `EUKHE_BRIDGE_CACHE=1` (set by the mutation-testing run, where only
/// the Rust side changes) a successful model run is memoized under a hash
/// of its input and every model file, so an unchanged Bend computation is
/// not repeated; CI never sets it.
fn memoized(input: &str, run: impl FnOnce() -> (bool, String, String)) -> (bool, String, String) {
    let cache = std::env::var("EUKHE_BRIDGE_CACHE")
        .is_ok_and(|v| v == "1")
        .then(|| {
            PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
                .join("bridge-cache")
                .join(format!("{:016x}.out", bend_tree_hash(input)))
        });
    if let Some(hit) = cache
        .as_ref()
        .and_then(|path| std::fs::read_to_string(path).ok())
    {
        return (true, hit, String::new());
    }
    let (success, stdout, stderr) = run();
    if let (Some(path), true) = (&cache, success) {
        let _ = std::fs::create_dir_all(path.parent().unwrap());
        let _ = std::fs::write(path, &stdout);
    }
    (success, stdout, stderr)
}

/// FNV-1a over `extra` and every file under `bend/` (names and contents).
fn bend_tree_hash(extra: &str) -> u64 {
    let mut key = extra.to_string();
    let mut files = Vec::new();
    collect_files(&repo().join("bend"), &mut files);
    files.sort();
    for file in files {
        key.push_str(&file.strip_prefix(repo()).unwrap_or(&file).to_string_lossy());
        key.push_str(&std::fs::read_to_string(file).unwrap_or_default());
    }
    key.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
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

fn program(model: &str, scenarios: &[&Scenario]) -> String {
    let mut program = format!(
        "from ./bend/bridge/{model} import (run)\nfrom ./bend/lib/text import (lines_tree)\n\n"
    );
    let chunks: Vec<&[&Scenario]> = scenarios.chunks(40).collect();
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
