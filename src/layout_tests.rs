//! The source tree's own rules, checked over every file under `src/`.

use std::path::{Path, PathBuf};

/// The most lines a source file may hold: one job a reader can hold.
const MOST_LINES: usize = 700;

fn sources(dir: &Path, found: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            sources(&path, found);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            found.push(path);
        }
    }
}

#[test]
fn no_source_file_is_over_700_lines() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found = Vec::new();
    sources(&root, &mut found);
    assert!(
        found.len() > 50,
        "only {} source files under src/",
        found.len()
    );
    let mut long: Vec<String> = found
        .iter()
        .filter_map(|path| {
            let lines = std::fs::read_to_string(path).ok()?.lines().count();
            (lines > MOST_LINES).then(|| format!("{} ({lines} lines)", path.display()))
        })
        .collect();
    long.sort();
    assert!(
        long.is_empty(),
        "split these files by job, to at most {MOST_LINES} lines each: {}",
        long.join(", ")
    );
}
