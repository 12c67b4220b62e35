//! A job's state capture read back: the triples its shell wrote, as the
//! snapshot items they hold, and what bash gives every shell.

use std::collections::BTreeMap;

use super::{is_name, Snapshot};
use crate::session::SessionError;

/// Options a job's shell must not take from the snapshot: job control would
/// take a run's background jobs out of its process group, and the others
/// only mean something in an interactive shell.
const SET_OPTIONS_NOT_KEPT: [&str; 4] = ["monitor", "history", "emacs", "vi"];
const SHOPT_OPTIONS_NOT_KEPT: [&str; 2] = ["login_shell", "restricted_shell"];

/// What one job's shell left behind.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Capture {
    /// The shell state it left.
    pub snapshot: Snapshot,
    /// Functions that could not be kept: their names shadow builtins that
    /// eukhe's own shell code needs.
    pub dropped: Vec<String>,
    /// The status its shell recorded as the capture's last word, if it
    /// got that far.
    pub status: Option<i32>,
    /// Whether its shell still had jobs (`jobs -p`) when it captured.
    pub has_jobs: bool,
    /// The command did not run (its working directory or its stdin could
    /// not be had): the capture holds no state, and the state stands.
    pub not_run: bool,
    /// The session's directory, when it could not be entered.
    pub lost_cwd: Option<String>,
}

/// Parse what a job's shell captured: NUL-terminated triples of kind, name
/// and text (see `src/kernel/job.bash`). A job that left its `set -o` or
/// its `shopt` options as its command found them lists neither: those
/// are then the options of `started_from`, the snapshot it began with.
pub fn parse_capture(bytes: &[u8], started_from: &Snapshot) -> Result<Capture, SessionError> {
    let text = String::from_utf8_lossy(bytes);
    let fields: Vec<&str> = text.split('\0').collect();
    if fields.len() < 4 || fields.len() % 3 != 1 {
        return Err(SessionError::CaptureCutShort { bytes: bytes.len() });
    }
    let mut capture = Capture::default();
    let mut function_names: Vec<&str> = Vec::new();
    let mut options_listed = [false; 2];
    for triple in fields[..fields.len() - 1].chunks(3) {
        let (kind, name, text) = (triple[0], triple[1], triple[2].trim_end_matches('\n'));
        match kind {
            "setopts" | "shopts" => {
                options_listed[usize::from(kind == "shopts")] = true;
                capture_item(&mut capture.snapshot.items, kind, name, text, &[]);
            }
            "dropped" => {
                capture.dropped = text.split_whitespace().map(str::to_string).collect();
            }
            "funcnames" => function_names = declared_functions(text),
            "jobs" => capture.has_jobs = !text.trim().is_empty(),
            "skip" => capture.not_run(name, text),
            "status" => capture.status = text.trim().parse().ok(),
            _ => capture_item(
                &mut capture.snapshot.items,
                kind,
                name,
                text,
                &function_names,
            ),
        }
    }
    for (listed, prefix) in options_listed.into_iter().zip(["set:", "shopt:"]) {
        if !listed {
            let unchanged = started_from
                .items
                .iter()
                .filter(|(k, _)| k.starts_with(prefix));
            capture
                .snapshot
                .items
                .extend(unchanged.map(|(k, v)| (k.clone(), v.clone())));
        }
    }
    for name in SPECIAL_BUILTINS {
        if capture
            .snapshot
            .items
            .remove(&format!("func:{name}"))
            .is_some()
        {
            capture.dropped.push(name.to_string());
        }
    }
    Ok(capture)
}

impl Capture {
    /// The command did not run: `why` is `cwd` when the session's
    /// directory `text` could not be entered.
    fn not_run(&mut self, why: &str, text: &str) {
        self.not_run = true;
        if why == "cwd" {
            self.lost_cwd = Some(text.to_string());
        }
    }
}

/// What bash gives every shell it starts, before any restore: the
/// variables it sets itself (`HOSTNAME`, `IFS`, `OPTIND`, `PS4`, a `PATH`
/// when none is exported, ...) and the umask, from the `declare -p` and
/// `umask -p` of the kernel's shell as it starts (`zygote.bash`: its
/// environment is empty, so nothing in it is the user's). Bash's own
/// read-only and dynamic variables are left out, as from a capture.
pub fn shell_defaults(declared: &str, umask: &str) -> Snapshot {
    let mut items = BTreeMap::new();
    capture_item(&mut items, "vars", "", declared.trim_end_matches('\n'), &[]);
    capture_item(&mut items, "umask", "", umask.trim_end_matches('\n'), &[]);
    Snapshot { items }
}

/// The POSIX special builtins eukhe's shell code calls: a function of one
/// of these names is not kept (the code runs in POSIX mode, where they are
/// found before any function, but a restore outside it would let the
/// function take their place).
const SPECIAL_BUILTINS: [&str; 15] = [
    "set", "unset", "export", "eval", "trap", "readonly", "exec", "exit", "return", "shift",
    "break", "continue", "times", ".", ":",
];

/// The names `declare -F` lists, one a line.
fn declared_functions(listing: &str) -> Vec<&str> {
    // `declare -f NAME`, `declare -fx NAME`, ...
    listing
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .collect()
}

/// Keep in `items` the shell state one captured triple (`kind`, `name`,
/// `text`) holds; `function_names` are the functions a `funcs` text
/// defines, in order.
fn capture_item(
    items: &mut BTreeMap<String, String>,
    kind: &str,
    name: &str,
    text: &str,
    function_names: &[&str],
) {
    match kind {
        "cwd" if !text.is_empty() => {
            items.insert("cwd:".into(), text.to_string());
        }
        // `name` is $SHELLOPTS / $BASHOPTS as the user left them (the
        // options on); `text` lists every option, so options off are
        // kept too.
        "setopts" => {
            for (option, on) in options(name, text, &SET_OPTIONS_NOT_KEPT) {
                let sign = if on { '-' } else { '+' };
                items.insert(format!("set:{option}"), format!("set {sign}o {option}"));
            }
        }
        "shopts" => {
            for (option, on) in options(name, text, &SHOPT_OPTIONS_NOT_KEPT) {
                let flag = if on { 's' } else { 'u' };
                items.insert(format!("shopt:{option}"), format!("shopt -{flag} {option}"));
            }
        }
        "umask" if !text.is_empty() => {
            items.insert("umask:".into(), text.to_string());
        }
        "traps" => {
            let kept: Vec<&str> = trap_commands(text)
                .into_iter()
                .filter(|t| !t.starts_with("trap -- - "))
                .collect();
            if !kept.is_empty() {
                items.insert("trap:".into(), kept.join("\n"));
            }
        }
        "var" => {
            items.insert(format!("var:{name}"), text.to_string());
        }
        "vars" => {
            for (name, statement) in declarations(text) {
                if kept_variable(name) {
                    items.insert(format!("var:{name}"), statement.to_string());
                }
            }
        }
        "func" => {
            items.insert(format!("func:{name}"), text.to_string());
        }
        "funcs" => {
            for (name, definition) in definitions(text, function_names) {
                items.insert(format!("func:{name}"), definition.to_string());
            }
        }
        "alias" => {
            items.insert(format!("alias:{name}"), format!("alias -- {text}"));
        }
        _ => {}
    }
}

/// Every option `listing` names (`set +o` or `shopt -p` lines, the
/// option third), less `not_kept`, and whether `enabled` (a colon list)
/// has it on.
fn options<'t>(
    enabled: &'t str,
    listing: &'t str,
    not_kept: &'t [&str],
) -> impl Iterator<Item = (&'t str, bool)> + 't {
    let on: Vec<&str> = enabled.split(':').collect();
    listing
        .lines()
        .filter_map(|line| line.split_whitespace().nth(2))
        .filter(move |option| !not_kept.contains(option))
        .map(move |option| (option, on.contains(&option)))
}

/// Variables that are bash's own (read-only, dynamic, per shell) or
/// eukhe's: never part of a snapshot. (`POSIXLY_CORRECT` is captured apart:
/// eukhe's capture sets it.)
fn kept_variable(name: &str) -> bool {
    const BASH_OWN: [&str; 24] = [
        "POSIXLY_CORRECT",
        "BASH",
        "BASHOPTS",
        "BASHPID",
        "COLUMNS",
        "LINES",
        "DIRSTACK",
        "EPOCHREALTIME",
        "EPOCHSECONDS",
        "EUID",
        "FUNCNAME",
        "GROUPS",
        "HISTCMD",
        "LINENO",
        "OLDPWD",
        "PIPESTATUS",
        "PPID",
        "PWD",
        "RANDOM",
        "SECONDS",
        "SHELLOPTS",
        "SHLVL",
        "SRANDOM",
        "UID",
    ];
    !(name.starts_with("__eukhe_")
        || name.starts_with("BASH_")
        || name.starts_with("COMP_")
        || name == "_"
        || BASH_OWN.contains(&name))
}

/// The statements of `declare -p` output, with the name each declares.
/// A statement ends at a newline outside quotes and parentheses.
fn declarations(text: &str) -> Vec<(&str, &str)> {
    let mut statements = Vec::new();
    let (mut start, mut depth) = (0, 0u32);
    let (mut double, mut ansi, mut escaped) = (false, false, false);
    let bytes = text.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        if escaped {
            escaped = false;
            continue;
        }
        match b {
            b'\\' if double || ansi => escaped = true,
            b'"' if !ansi => double = !double,
            b'\'' if ansi => ansi = false,
            b'\'' if !double && i > 0 && bytes[i - 1] == b'$' => ansi = true,
            b'(' if !double && !ansi => depth += 1,
            b')' if !double && !ansi => depth = depth.saturating_sub(1),
            b'\n' if !double && !ansi && depth == 0 => {
                statements.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if start < text.len() {
        statements.push(&text[start..]);
    }
    statements
        .into_iter()
        .filter_map(|statement| {
            // declare -FLAGS NAME[=VALUE]
            let rest = statement.strip_prefix("declare ")?;
            let (_, rest) = rest.split_once(' ')?;
            let name = rest.split('=').next()?;
            is_name(name).then_some((name, statement))
        })
        .collect()
}

/// Split `declare -f` output into each function's definition. `names` are
/// the functions in the order bash prints them (`declare -F`); each
/// definition starts at the line `NAME () ` and runs to the next one's.
fn definitions<'t>(text: &'t str, names: &[&'t str]) -> Vec<(&'t str, &'t str)> {
    let mut starts = Vec::new();
    let mut from = 0;
    for name in names {
        let header = format!("{name} () \n");
        let found = if text[from..].starts_with(&header) {
            Some(from)
        } else {
            text[from..]
                .find(&format!("\n{header}"))
                .map(|at| from + at + 1)
        };
        if let Some(at) = found {
            starts.push((*name, at));
            from = at + header.len();
        }
    }
    let mut definitions = Vec::new();
    for (i, (name, start)) in starts.iter().enumerate() {
        let end = starts.get(i + 1).map_or(text.len(), |(_, next)| *next);
        definitions.push((*name, text[*start..end].trim_end_matches('\n')));
    }
    definitions
}

/// Split `trap -p` output into its commands (a trap's action may span
/// lines inside its single quotes).
fn trap_commands(text: &str) -> Vec<&str> {
    let mut commands = Vec::new();
    let mut start = 0;
    let mut quoted = false;
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        if escaped {
            escaped = false;
            continue;
        }
        match c {
            '\\' if !quoted => escaped = true,
            '\'' => quoted = !quoted,
            '\n' if !quoted => {
                commands.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if start < text.len() {
        commands.push(&text[start..]);
    }
    commands
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `bytes` parsed as the capture of a job that began with no state.
    fn parsed(bytes: &[u8]) -> Capture {
        parse_capture(bytes, &Snapshot::default()).unwrap()
    }

    fn capture(triples: &[(&str, &str, &str)]) -> Vec<u8> {
        let mut bytes = Vec::new();
        for (kind, name, text) in triples {
            for field in [kind, name, text] {
                bytes.extend_from_slice(field.as_bytes());
                bytes.push(0);
            }
        }
        bytes
    }

    #[test]
    fn options_are_kept_on_and_off_and_job_control_is_never_restored() {
        let bytes = capture(&[
            (
                "setopts",
                "braceexpand:monitor:pipefail",
                "set -o braceexpand\nset +o errexit\nset -o monitor\nset +o pipefail\n",
            ),
            (
                "shopts",
                "extglob",
                "shopt -u extglob\nshopt -s login_shell\n",
            ),
        ]);
        let snapshot = parsed(&bytes).snapshot;
        assert_eq!(snapshot.items["set:pipefail"], "set -o pipefail");
        assert_eq!(snapshot.items["set:errexit"], "set +o errexit");
        assert!(!snapshot.items.contains_key("set:monitor"));
        assert_eq!(snapshot.items["shopt:extglob"], "shopt -s extglob");
        assert!(!snapshot.items.contains_key("shopt:login_shell"));
    }

    #[test]
    fn options_a_job_did_not_list_are_those_it_began_with() {
        let mut started_from = Snapshot::fresh("/", &BTreeMap::new());
        for (key, text) in [
            ("set:pipefail", "set -o pipefail"),
            ("shopt:extglob", "shopt -s extglob"),
        ] {
            started_from.items.insert(key.into(), text.into());
        }
        let unlisted = capture(&[("cwd", "", "/")]);
        let capture_of = |bytes: &[u8]| parse_capture(bytes, &started_from).unwrap().snapshot;
        assert!(started_from.changes_to(&capture_of(&unlisted)).is_empty());
        let set_listed = capture(&[("cwd", "", "/"), ("setopts", "", "set +o pipefail\n")]);
        let changes = started_from.changes_to(&capture_of(&set_listed));
        assert_eq!(
            changes.into_iter().collect::<Vec<_>>(),
            [(
                "set:pipefail".to_string(),
                Some("set +o pipefail".to_string())
            )]
        );
    }

    #[test]
    fn a_captures_last_words_are_its_shells_jobs_and_status_not_state() {
        let started_from = Snapshot::fresh("/", &BTreeMap::new());
        let parse = |triples: &[(&str, &str, &str)]| {
            parse_capture(&capture(triples), &started_from).unwrap()
        };
        let with_job = parse(&[
            ("cwd", "", "/tmp"),
            ("jobs", "", "4242\n"),
            ("status", "", "7"),
        ]);
        assert_eq!(with_job.status, Some(7));
        assert!(with_job.has_jobs);
        assert_eq!(
            with_job.snapshot,
            parse(&[("cwd", "", "/tmp")]).snapshot,
            "only the state is state"
        );
        let without = parse(&[("cwd", "", "/"), ("jobs", "", ""), ("status", "", "0")]);
        assert_eq!((without.status, without.has_jobs), (Some(0), false));
        let cut_before_them = parse(&[("cwd", "", "/")]);
        assert_eq!(cut_before_them.status, None, "no status: its end waits");
    }

    #[test]
    fn a_cut_capture_is_an_error_not_an_empty_state() {
        let started_from = Snapshot::fresh("/", &BTreeMap::new());
        assert!(parse_capture(b"cwd\0\0/tmp", &started_from).is_err());
        assert!(parse_capture(b"", &started_from).is_err());
    }

    #[test]
    fn every_declaration_is_one_item_and_bash_own_variables_are_left_out() {
        let text = "declare -- x=$'a\"b\\nc'\ndeclare -a arr=([0]=\"1 2\" [1]=$'x\\ny')\n\
                    declare -A as=([k]=\"v\" [\" sp\"]=\"w\" )\ndeclare -- u\n\
                    declare -i OPTIND=\"1\"\ndeclare -ir BASHPID\ndeclare -- __eukhe_st=\"0\"\n\
                    declare -x MULTI=\"one\ntwo\"\n";
        let bytes = capture(&[("vars", "", text)]);
        let items = parsed(&bytes).snapshot.items;
        let names: Vec<&str> = items.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "var:MULTI",
                "var:OPTIND",
                "var:arr",
                "var:as",
                "var:u",
                "var:x"
            ]
        );
        assert_eq!(
            items["var:arr"],
            "declare -a arr=([0]=\"1 2\" [1]=$'x\\ny')"
        );
        assert_eq!(items["var:MULTI"], "declare -x MULTI=\"one\ntwo\"");
    }

    #[test]
    fn functions_printed_together_are_split_by_their_names() {
        let names = "declare -f a\ndeclare -fx b_2\n";
        let funcs = "a () \n{ \n    cat <<EOF\nb_2 ()\nEOF\n}\nb_2 () \n{ \n    echo two\n}\n";
        let bytes = capture(&[("funcnames", "", names), ("funcs", "", funcs)]);
        let items = parsed(&bytes).snapshot.items;
        assert_eq!(items["func:a"], "a () \n{ \n    cat <<EOF\nb_2 ()\nEOF\n}");
        assert_eq!(items["func:b_2"], "b_2 () \n{ \n    echo two\n}");
    }

    #[test]
    fn functions_named_like_special_builtins_are_dropped_and_said_so() {
        let names = "declare -f f\ndeclare -f set\n";
        let funcs = "f () \n{ \n    echo f\n}\nset () \n{ \n    :\n}\n";
        let bytes = capture(&[
            ("dropped", "", "builtin"),
            ("funcnames", "", names),
            ("funcs", "", funcs),
        ]);
        let capture = parsed(&bytes);
        assert_eq!(capture.dropped, ["builtin", "set"]);
        let kept: Vec<&String> = capture.snapshot.items.keys().collect();
        assert_eq!(kept, ["func:f"]);
    }

    #[test]
    fn traps_keep_multi_line_actions_and_drop_defaults() {
        let bytes = capture(&[(
            "traps",
            "",
            "trap -- - EXIT\ntrap -- 'echo a\necho '\\''b'\\''\nx' USR1\ntrap -- - INT",
        )]);
        let snapshot = parsed(&bytes).snapshot;
        assert_eq!(
            snapshot.items["trap:"],
            "trap -- 'echo a\necho '\\''b'\\''\nx' USR1"
        );
    }
}
