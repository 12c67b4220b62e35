//! The source tree's own rules, checked over every file under `src/`
//! (and, for the length of a file, under `tests/` too).

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
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    sources(&root.join("src"), &mut found);
    assert!(
        found.len() > 50,
        "only {} source files under src/",
        found.len()
    );
    // The tests are code a reader holds too: the same limit holds there.
    let under_src = found.len();
    sources(&root.join("tests"), &mut found);
    assert!(
        found.len() - under_src > 30,
        "only {} source files under tests/",
        found.len() - under_src
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

/// The most fields a struct may hold: what a reader can hold in mind.
const MOST_FIELDS: usize = 15;

/// The named fields of each braced struct in `text`: (name, count). A
/// field is a line `name: Type` (or `pub name: Type`) at the struct's
/// own depth, after its opening brace.
fn struct_fields(text: &str) -> Vec<(String, usize)> {
    let mut found = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let code = line.trim_start();
        let Some(rest) = code
            .strip_prefix("struct ")
            .or_else(|| code.split_once(" struct ").map(|(_, rest)| rest))
            .filter(|_| code.starts_with("struct ") || code.starts_with("pub"))
        else {
            continue;
        };
        if !code.ends_with('{') {
            continue; // a tuple or unit struct, or a brace on its own line
        }
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let indent = line.len() - code.len();
        let mut fields = 0;
        for inner in lines.by_ref() {
            let body = inner.trim_start();
            let depth = inner.len() - body.len();
            if depth == indent && body.starts_with('}') {
                break;
            }
            let field = body.strip_prefix("pub ").unwrap_or(body);
            let field = match field.strip_prefix("pub(") {
                Some(rest) => rest.split_once(") ").map_or("", |(_, f)| f),
                None => field,
            };
            let is_field = depth == indent + 4
                && field.split_once(':').is_some_and(|(n, _)| {
                    !n.is_empty()
                        && n.chars()
                            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
                });
            fields += usize::from(is_field);
        }
        found.push((name, fields));
    }
    found
}

#[test]
fn fields_are_counted_at_the_structs_own_depth() {
    let text = "pub struct A {\n    /// doc: not a field\n    pub a: u8,\n    b: Vec<u8>,\n    pub(crate) c: u8,\n}\nstruct B(u8);\n    struct C {\n        d: u8,\n    }\n";
    assert_eq!(
        struct_fields(text),
        vec![("A".to_string(), 3), ("C".to_string(), 1)]
    );
}

#[test]
fn no_struct_has_more_than_15_fields() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found = Vec::new();
    sources(&root, &mut found);
    let mut big: Vec<String> = found
        .iter()
        .flat_map(|path| {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            struct_fields(&text)
                .into_iter()
                .filter(|(_, fields)| *fields > MOST_FIELDS)
                .map(move |(name, fields)| format!("{} {name} ({fields} fields)", path.display()))
        })
        .collect();
    big.sort();
    assert!(
        big.is_empty(),
        "split these structs by job, to at most {MOST_FIELDS} fields each: {}",
        big.join(", ")
    );
}

/// Modules that may import only the modules listed, whatever the table says.
const ONLY: &[(&str, &[&str])] = &[("laws", &[]), ("protocol", &["laws"])];

/// Imports no table may allow.
const NEVER: &[(&str, &[&str])] = &[
    ("session", &["host", "kernel"]),
    ("client", &["supervisor", "worker", "kernel"]),
];

/// The files that belong to no layer: the crate's roots and this test.
const OUTSIDE_THE_LAYERS: &[&str] = &["lib.rs", "main.rs", "layout_tests.rs"];

/// One `crate::` path found in a source file.
#[derive(Debug, PartialEq, Eq)]
struct Import {
    line: usize,
    module: String,
}

/// How many characters at the start of `rest` are a comment or a string
/// or character literal, if one starts there.
fn not_code_len(rest: &[char]) -> Option<usize> {
    let until = |from: usize, end: &[char]| {
        (from..=rest.len())
            .find(|&i| rest[i..].starts_with(end))
            .map_or(rest.len(), |i| i + end.len())
    };
    match rest {
        ['/', '/', ..] => Some(rest.iter().position(|&c| c == '\n').unwrap_or(rest.len())),
        ['/', '*', ..] => {
            let mut depth = 0;
            let mut i = 0;
            while i < rest.len() {
                if rest[i..].starts_with(&['/', '*']) {
                    depth += 1;
                    i += 2;
                } else if rest[i..].starts_with(&['*', '/']) {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        return Some(i);
                    }
                } else {
                    i += 1;
                }
            }
            Some(rest.len())
        }
        ['r', '"' | '#', ..] => {
            let hashes = rest[1..].iter().take_while(|&&c| c == '#').count();
            (rest.get(1 + hashes) == Some(&'"')).then(|| {
                let close: Vec<char> = std::iter::once('"')
                    .chain(std::iter::repeat_n('#', hashes))
                    .collect();
                until(2 + hashes, &close)
            })
        }
        ['"', ..] => {
            let mut i = 1;
            while i < rest.len() && rest[i] != '"' {
                i += if rest[i] == '\\' { 2 } else { 1 };
            }
            Some((i + 1).min(rest.len()))
        }
        // A character literal ('"', '\''), not a lifetime ('a).
        ['\'', '\\', ..] => Some(until(3, &['\''])),
        ['\'', _, '\'', ..] => Some(3),
        _ => None,
    }
}

/// `source` with comments and the insides of string and character
/// literals blanked out (newlines kept, so lines still count).
fn code_only(source: &str) -> String {
    let chars: Vec<char> = source.chars().collect();
    let mut code = String::with_capacity(source.len());
    let mut i = 0;
    while i < chars.len() {
        // An `r` inside a name (`for`, `bar`) starts no raw string; `br"` does.
        let inside_name = chars[i] == 'r'
            && i > 0
            && is_ident(chars[i - 1])
            && !(chars[i - 1] == 'b' && (i < 2 || !is_ident(chars[i - 2])));
        match not_code_len(&chars[i..]).filter(|_| !inside_name) {
            Some(len) => {
                for &c in &chars[i..i + len] {
                    code.push(if c == '\n' { '\n' } else { ' ' });
                }
                i += len;
            }
            None => {
                code.push(chars[i]);
                i += 1;
            }
        }
    }
    code
}

fn is_ident(c: char) -> bool {
    c == '_' || c.is_ascii_alphanumeric()
}

/// The top-level modules `crate::` paths in `source` name, with their lines:
/// `crate::x::..`, `$crate::x`, and each item of `crate::{x::.., y}`.
fn crate_imports(source: &str) -> Vec<Import> {
    let code = code_only(source);
    let line_of = |at: usize| code[..at].matches('\n').count() + 1;
    let mut found = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        if code[..at].chars().next_back().is_some_and(is_ident) {
            continue;
        }
        let rest = &code[at + "crate::".len()..];
        let heads: Vec<&str> = match rest.strip_prefix('{') {
            Some(group) => {
                let mut depth = 0;
                let end = group
                    .find(|c| {
                        depth += i32::from(c == '{') - i32::from(c == '}');
                        depth < 0
                    })
                    .unwrap_or(group.len());
                let mut items = Vec::new();
                let mut depth = 0;
                let mut start = 0;
                for (i, c) in group[..end].char_indices() {
                    depth += i32::from(c == '{') - i32::from(c == '}');
                    if c == ',' && depth == 0 {
                        items.push(&group[start..i]);
                        start = i + 1;
                    }
                }
                items.push(&group[start..end]);
                items
            }
            None => vec![rest],
        };
        for head in heads {
            let head = head.trim_start();
            let name: String = head.chars().take_while(|&c| is_ident(c)).collect();
            if !name.is_empty() {
                found.push(Import {
                    line: line_of(at),
                    module: name,
                });
            }
        }
    }
    found
}

/// The top-level module a file under `src/` belongs to: its folder, or the
/// file itself.
fn module_of(relative: &Path) -> String {
    let first = relative.components().next().expect("a path under src/");
    let first = first.as_os_str().to_string_lossy();
    first.strip_suffix(".rs").unwrap_or(&first).to_string()
}

/// The allowed-imports table of ARCHITECTURE.md: the one table headed
/// `| module | may import |`, each row a module and the modules it may
/// import, in backticks (none: `nothing`).
fn allowed_imports(architecture: &str) -> std::collections::BTreeMap<String, Vec<String>> {
    let names = |cell: &str| -> Vec<String> {
        cell.split('`')
            .skip(1)
            .step_by(2)
            .map(|name| {
                name.trim_end_matches('/')
                    .trim_end_matches(".rs")
                    .to_string()
            })
            .collect()
    };
    let mut table = std::collections::BTreeMap::new();
    let mut lines = architecture.lines().skip_while(|line| {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        cells.get(1..3) != Some(&["module", "may import"])
    });
    assert!(
        lines.next().is_some(),
        "ARCHITECTURE.md has no table headed | module | may import |"
    );
    for line in lines.skip(1).take_while(|line| line.starts_with('|')) {
        let cells: Vec<&str> = line.split('|').collect();
        let module = names(cells.get(1).copied().unwrap_or_default());
        assert_eq!(module.len(), 1, "a row names one module: {line}");
        let may = names(cells.get(2).copied().unwrap_or_default());
        table.insert(module[0].clone(), may);
    }
    table
}

/// A cycle in `graph`, as the modules along it, if there is one.
fn cycle(graph: &std::collections::BTreeMap<String, Vec<String>>) -> Option<Vec<String>> {
    fn visit(
        graph: &std::collections::BTreeMap<String, Vec<String>>,
        node: &str,
        path: &mut Vec<String>,
        done: &mut std::collections::BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(graph, next, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = std::collections::BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(graph, node, &mut Vec::new(), &mut done))
}

#[test]
fn every_import_between_folders_is_in_the_architecture_table() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let architecture =
        std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let table = allowed_imports(&architecture);
    let src = root.join("src");
    let mut found = Vec::new();
    sources(&src, &mut found);
    found.sort();
    let mut wrong = Vec::new();
    let mut modules = std::collections::BTreeSet::new();
    let mut edges: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    let mut imports = 0;
    for path in &found {
        let relative = path.strip_prefix(&src).expect("under src/");
        if OUTSIDE_THE_LAYERS.iter().any(|f| relative == Path::new(f)) {
            continue;
        }
        let from = module_of(relative);
        modules.insert(from.clone());
        let source = std::fs::read_to_string(path).expect("a source file");
        for import in crate_imports(&source) {
            imports += 1;
            if import.module == from {
                continue;
            }
            let allowed = table
                .get(&from)
                .is_some_and(|may| may.contains(&import.module));
            if !allowed {
                wrong.push(format!(
                    "src/{}:{}: {from} -> {} is not in ARCHITECTURE.md's allowed imports",
                    relative.display(),
                    import.line,
                    import.module
                ));
            }
            let targets = edges.entry(from.clone()).or_default();
            if !targets.contains(&import.module) {
                targets.push(import.module);
            }
        }
    }
    assert!(
        imports > 300,
        "only {imports} crate:: paths found under src/"
    );
    // `skip` is tests/support/skip.rs, a module of the crate's tests.
    modules.insert("skip".to_string());
    let rows: std::collections::BTreeSet<String> = table.keys().cloned().collect();
    assert_eq!(
        rows, modules,
        "ARCHITECTURE.md's allowed-imports table has a row for each module under src/, and no other"
    );
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    if let Some(cycle) = cycle(&edges) {
        panic!("the modules import each other: {}", cycle.join(" -> "));
    }
}

#[test]
fn the_architecture_table_keeps_the_layers_and_has_no_cycle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let architecture =
        std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let table = allowed_imports(&architecture);
    for (from, only) in ONLY {
        let may = table
            .get(*from)
            .unwrap_or_else(|| panic!("no row for {from}"));
        let beyond: Vec<&String> = may.iter().filter(|m| !only.contains(&m.as_str())).collect();
        assert!(
            beyond.is_empty(),
            "{from} may import only {only:?}, not {beyond:?}"
        );
    }
    for (from, never) in NEVER {
        let may = table
            .get(*from)
            .unwrap_or_else(|| panic!("no row for {from}"));
        let allowed: Vec<&String> = may.iter().filter(|m| never.contains(&m.as_str())).collect();
        assert!(allowed.is_empty(), "{from} may never import {allowed:?}");
    }
    if let Some(cycle) = cycle(&table) {
        panic!(
            "the table lets modules import each other: {}",
            cycle.join(" -> ")
        );
    }
}

#[test]
fn imports_are_read_from_code_only_and_from_groups() {
    let source = r##"
//! crate::laws in a doc comment
use crate::{kernel::spool::{Spool, JobEnd}, session};
let s = "crate::host \" crate::host";
let r = r#"crate::mcp"#; let c = '"'; let l: &'static str = ""; let b = br"crate::host";
let e = '\\'; let q = '\''; let bytes = b"crate::host"; for r in "crate::host" {}
/* crate::client /* nested */ crate::client */ x = crate::paths::x(); // crate::worker
$crate::config::x!(); my_crate::supervisor;
"##;
    let modules: Vec<(usize, String)> = crate_imports(source)
        .into_iter()
        .map(|i| (i.line, i.module))
        .collect();
    assert_eq!(
        modules,
        vec![
            (3, "kernel".to_string()),
            (3, "session".to_string()),
            (7, "paths".to_string()),
            (8, "config".to_string()),
        ]
    );
}

#[test]
fn a_cycle_between_modules_is_found_and_a_layering_has_none() {
    let graph = |edges: &[(&str, &str)]| {
        let mut graph = std::collections::BTreeMap::<String, Vec<String>>::new();
        for (from, to) in edges {
            graph
                .entry(from.to_string())
                .or_default()
                .push(to.to_string());
        }
        graph
    };
    assert_eq!(
        cycle(&graph(&[("a", "b"), ("b", "c"), ("c", "a"), ("d", "a")])),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
    assert_eq!(cycle(&graph(&[("a", "b"), ("b", "c"), ("a", "c")])), None);
}
