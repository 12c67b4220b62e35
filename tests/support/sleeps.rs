//! Tests wait on conditions: a fixed sleep is the exception, at most
//! [`MOST`] in `tests/`, each under a comment saying why no condition can
//! be awaited.

use std::path::{Path, PathBuf};

/// How many fixed sleeps `tests/` may hold.
const MOST: usize = 5;

fn rust_files(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

/// The fixed sleeps of `text` (not the one polling loop's): the top-level
/// function each is in, and whether a comment stands right above it.
fn fixed_sleeps(text: &str) -> Vec<(String, bool)> {
    let calls = [
        ["thread", "::sleep("].concat(),
        ["time", "::sleep("].concat(),
    ];
    let the_loop = ["std::thread", "::sleep(POLL);"].concat();
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let mut function = String::new();
    let mut found = Vec::new();
    for (at, (line, raw)) in lines.iter().zip(text.lines()).enumerate() {
        // A test's own function starts a line; a nested one is indented.
        let signature = raw.strip_prefix("pub ").unwrap_or(raw);
        if let Some(rest) = signature.strip_prefix("fn ") {
            function = rest.split(['(', '<']).next().unwrap_or("").to_string();
        }
        let is_sleep = calls.iter().any(|call| line.contains(call.as_str()));
        if is_sleep && !line.starts_with("//") && *line != the_loop {
            let said = at > 0 && lines[at - 1].starts_with("//");
            found.push((function.clone(), said));
        }
    }
    found
}

#[test]
fn fixed_sleeps_are_few_and_each_says_why() {
    let mut files = Vec::new();
    rust_files(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests"),
        &mut files,
    );
    let mut counted = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for (function, said) in fixed_sleeps(&text) {
            assert!(
                said,
                "a fixed sleep in {} ({function}) does not say why no condition can be awaited",
                file.display()
            );
            counted.push(format!("{} ({function})", file.display()));
        }
    }
    assert!(
        counted.len() <= MOST,
        "{} fixed sleeps in tests/, at most {MOST}: {counted:#?}",
        counted.len()
    );
}

#[test]
fn a_sleep_with_no_comment_is_found_and_a_commented_one_is_said() {
    let call = ["std::thread", "::sleep(Duration::from_millis(1));"].concat();
    let text = format!("fn quiet() {{\n    {call}\n}}\nfn said() {{\n    // why\n    {call}\n}}\n");
    assert_eq!(
        fixed_sleeps(&text),
        [("quiet".to_string(), false), ("said".to_string(), true)]
    );
}
