//! The namespace snapshot: the whole shell state of a session, saved after
//! every job so that a kernel started again restores it.
//!
//! A snapshot is a map of *items*, each one piece of state with the shell
//! text that restores it: the working directory, every variable (`declare
//! -p`, less bash's read-only and dynamic ones), every function, every
//! alias, `umask`, each `set -o` and `shopt` option, the traps. The kernel's
//! shell captures the items a job leaves (`src/kernel/zygote.bash`); the
//! kernel merges the job's *change set* (what it changed against the
//! snapshot it started from) into the snapshot, so jobs that overlap each
//! keep their own changes, applied in the order the jobs ended.
//!
//! Background jobs and open file descriptors are not shell text: a kernel
//! started over a snapshot cannot bring them back, and its restore notice
//! says so.
//!
//! - `capture`: a job's state capture read back as items, and bash's
//!   defaults.

use super::SessionError;
use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::store::{read_json, write_json_unsynced};

mod capture;

pub use capture::{parse_capture, shell_defaults, Capture};

/// Item kinds, in the order a restore applies them: the directory and
/// variables first, options that change how text parses before functions,
/// functions before aliases (`declare -f` prints a body with its aliases
/// expanded, and an alias would expand a function's name in its
/// definition), and `set -o` last, so `set -e`, `set -u` and `set -C` never
/// touch the restore itself. What follows the functions is written with
/// its command word quoted, which no alias expands: `\builtin alias`, and
/// `\trap` and `\set` (functions named `builtin`, `trap` or `set` are never
/// kept).
const KIND_ORDER: [&str; 8] = [
    "cwd", "var", "umask", "shopt", "func", "alias", "trap", "set",
];

/// A session's shell state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Snapshot {
    /// `kind:name` to the shell text that restores it.
    pub items: BTreeMap<String, String>,
}

/// What one job changed: items set (to their new text) or removed (`None`).
pub type ChangeSet = BTreeMap<String, Option<String>>;

/// Quote `text` for the shell, in single quotes.
pub fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// `value` in the words bash's `declare -p` writes it in, where those are
/// certain: printable ASCII in double quotes, with `\`, `"`, `$` and `` ` ``
/// escaped. Anything else bash writes as the locale has it (`$'...'`
/// for what is not printable there), so it is single-quoted: the same
/// value in other words, which a job's capture then rewrites once.
fn quote_as_declare(value: &str) -> String {
    if !value.bytes().all(|b| (b' '..=b'~').contains(&b)) {
        return quote(value);
    }
    let mut quoted = String::with_capacity(value.len() + 2);
    quoted.push('"');
    for c in value.chars() {
        if matches!(c, '\\' | '"' | '$' | '`') {
            quoted.push('\\');
        }
        quoted.push(c);
    }
    quoted.push('"');
    quoted
}

fn is_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

impl Snapshot {
    /// A fresh shell: `cwd`, the exported environment `env`, and aliases
    /// expanded as an interactive shell expands them. Each variable is
    /// written as a job's capture writes it (`declare -p`), so a first job
    /// that leaves it alone does not change the snapshot.
    pub fn fresh<'a>(
        cwd: &str,
        env: impl IntoIterator<Item = (&'a String, &'a String)>,
    ) -> Snapshot {
        let mut items = BTreeMap::new();
        items.insert("cwd:".into(), cwd.to_string());
        for (name, value) in env {
            if is_name(name) && !matches!(name.as_str(), "SHLVL" | "PWD" | "OLDPWD" | "_") {
                items.insert(
                    format!("var:{name}"),
                    format!("declare -x {name}={}", quote_as_declare(value)),
                );
            }
        }
        items.insert(
            "shopt:expand_aliases".into(),
            "shopt -s expand_aliases".into(),
        );
        Snapshot { items }
    }

    /// Add `defaults` (see [`shell_defaults`]) for what the snapshot does
    /// not set. A restore sets and never unsets, and every job's shell has
    /// them before it restores (it is forked from the kernel's shell), so
    /// no job sees a difference; but a job's capture lists them, and a first
    /// snapshot that lists them too is not changed by a first job that
    /// changes nothing (its save, and a new template, are spared).
    pub fn fill_in(&mut self, defaults: &Snapshot) {
        for (key, text) in &defaults.items {
            self.items
                .entry(key.clone())
                .or_insert_with(|| text.clone());
        }
    }

    /// Whether applying `changes` would change the snapshot: not when an
    /// overlapping job already made the same changes.
    pub fn is_changed_by(&self, changes: &ChangeSet) -> bool {
        changes
            .iter()
            .any(|(key, text)| self.items.get(key) != text.as_ref())
    }

    /// The working directory the snapshot restores.
    pub fn cwd(&self) -> &str {
        self.items.get("cwd:").map_or("/", String::as_str)
    }

    /// Load the snapshot at `path`; `Ok(None)` when there is none.
    pub fn load(path: &Path) -> Result<Option<Snapshot>, SessionError> {
        read_json(path)
    }

    /// Save the snapshot at `path` (0600, replaced atomically). Not synced:
    /// a machine crash keeps the previous snapshot or this one, never a
    /// torn one (rename), and costs at most the state changes of the last
    /// few seconds; the transcript keeps every command that made them.
    pub fn save(&self, path: &Path) -> Result<(), SessionError> {
        write_json_unsynced(path, self)
    }

    /// The items `after` changed against `self` (the state a job started from).
    pub fn changes_to(&self, after: &Snapshot) -> ChangeSet {
        let mut changes = ChangeSet::new();
        for (key, text) in &after.items {
            if self.items.get(key) != Some(text) {
                changes.insert(key.clone(), Some(text.clone()));
            }
        }
        for key in self.items.keys() {
            if !after.items.contains_key(key) {
                changes.insert(key.clone(), None);
            }
        }
        changes
    }

    /// Apply a job's change set.
    pub fn apply(&mut self, changes: &ChangeSet) {
        for (key, text) in changes {
            match text {
                Some(text) => self.items.insert(key.clone(), text.clone()),
                None => self.items.remove(key),
            };
        }
    }

    /// The shell text that restores this state in a clean shell (sourced at
    /// the top level of a job's shell, so `declare` makes globals).
    pub fn restore_script(&self) -> String {
        self.script_of(&KIND_ORDER)
    }

    /// All of the restore but traps and `set -o`: what a job's own bash
    /// restores as it starts, ahead of its job in a template (its wait for
    /// the job must not run under the user's `set -e` or traps).
    pub fn template_script(&self) -> String {
        let early: Vec<&str> = KIND_ORDER
            .into_iter()
            .filter(|kind| !matches!(*kind, "trap" | "set"))
            .collect();
        // A bash started over this script as its BASH_ENV (a command that
        // only parses as it runs, `job_prep.bash`) passes it on to no
        // program; no snapshot holds it.
        // A trap that would see the job's bash call a function: that bash
        // checks the command's syntax in a subshell (`job_prep.bash`).
        let traps = self.items.get("trap:").map_or("", String::as_str);
        let apart = ["DEBUG", "ERR", "RETURN"].iter().any(|s| traps.contains(s));
        format!(
            "\\builtin unset BASH_ENV\n__eukhe_parse_apart={}\n{}",
            if apart { "y" } else { "" },
            self.script_of(&early)
        )
    }

    /// Traps and `set -o`: what a job's own bash applies after it has
    /// taken its job (they must not act on eukhe's code before it).
    pub fn late_script(&self) -> String {
        self.script_of(&["trap", "set"])
    }

    fn script_of(&self, kinds: &[&str]) -> String {
        let mut script = String::new();
        for &kind in kinds {
            let prefix = format!("{kind}:");
            let texts = self
                .items
                .range(prefix.clone()..)
                .take_while(|(key, _)| key.starts_with(&prefix))
                .map(|(_, text)| text.as_str());
            match kind {
                "cwd" => {
                    for cwd in texts {
                        // Bash's `cd` to the path. One that cannot be
                        // entered stops the command (`job_prep.bash`).
                        let cwd = quote(cwd);
                        script += &format!(
                            "\\builtin cd -- {cwd} 2>/dev/null || __eukhe_lost_cwd={cwd}\n"
                        );
                    }
                }
                // One call per command, not one per option: the restore is
                // on every job's way.
                "shopt" => {
                    let (mut on, mut off) = (Vec::new(), Vec::new());
                    for text in texts {
                        match text.split_whitespace().collect::<Vec<_>>()[..] {
                            ["shopt", "-s", name] => on.push(name),
                            ["shopt", "-u", name] => off.push(name),
                            _ => {}
                        }
                    }
                    for (flag, names) in [("-s", on), ("-u", off)] {
                        if !names.is_empty() {
                            script += &format!("shopt {flag} {}\n", names.join(" "));
                        }
                    }
                }
                "set" => {
                    let options: Vec<&str> = texts.filter_map(|t| t.strip_prefix("set ")).collect();
                    if !options.is_empty() {
                        script += &format!("\\set {}\n", options.join(" "));
                    }
                }
                _ => {
                    // After the functions, a quoted command word: `alias`
                    // and `trap` may be a function's or an alias's name.
                    let quoted = match kind {
                        "alias" => "\\builtin ",
                        "trap" => "\\",
                        _ => "",
                    };
                    for text in texts {
                        script += quoted;
                        script += text;
                        script.push('\n');
                    }
                }
            }
        }
        script
    }
}

/// The snapshot a kernel starts over: the session's `snapshot.json`, else
/// an earlier version's `namespace.json` (directory and exported
/// environment) as a first snapshot.
pub fn load_or_migrate(
    snapshot: &Path,
    namespace: &Path,
) -> Result<Option<Snapshot>, SessionError> {
    if let Some(snapshot) = Snapshot::load(snapshot)? {
        return Ok(Some(snapshot));
    }
    #[derive(Deserialize)]
    struct Namespace {
        cwd: String,
        env: BTreeMap<String, String>,
    }
    Ok(read_json::<Namespace>(namespace)?.map(|ns| Snapshot::fresh(&ns.cwd, &ns.env)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trap_that_would_see_a_function_call_has_the_syntax_checked_apart() {
        let plain = Snapshot::fresh("/", &BTreeMap::new());
        let mut exiting = plain.clone();
        exiting
            .items
            .insert("trap:".into(), "trap -- 'echo bye' EXIT".into());
        for quiet in [&plain, &exiting] {
            assert!(quiet.template_script().contains("__eukhe_parse_apart=\n"));
        }
        for signal in ["DEBUG", "ERR", "RETURN"] {
            let mut traced = plain.clone();
            traced
                .items
                .insert("trap:".into(), format!("trap -- 'echo seen' {signal}"));
            assert!(
                traced.template_script().contains("__eukhe_parse_apart=y\n"),
                "{signal}"
            );
        }
    }

    #[test]
    fn overlapping_jobs_each_keep_their_changes_in_the_order_they_ended() {
        let start = Snapshot::fresh("/", &BTreeMap::new());
        let mut a = start.clone();
        a.items.insert("var:A".into(), "declare -x A='1'".into());
        let mut b = start.clone();
        b.items.insert("var:B".into(), "declare -x B='2'".into());
        b.items.insert("cwd:".into(), "/tmp".into());
        let mut current = start.clone();
        current.apply(&start.changes_to(&a));
        current.apply(&start.changes_to(&b));
        assert_eq!(current.items["var:A"], "declare -x A='1'");
        assert_eq!(current.items["var:B"], "declare -x B='2'");
        assert_eq!(current.cwd(), "/tmp");
        let mut unset = current.clone();
        unset.items.remove("var:A");
        current.apply(&current.changes_to(&unset));
        assert!(!current.items.contains_key("var:A"));
    }

    #[test]
    fn changes_an_overlapping_job_already_made_change_nothing() {
        let start = Snapshot::fresh("/", &BTreeMap::new());
        let with_a = |value: &str| {
            let mut after = start.clone();
            after
                .items
                .insert("var:A".into(), format!("declare -- A={value}"));
            start.changes_to(&after)
        };
        let mut current = start.clone();
        current.apply(&with_a("1"));
        assert!(!current.is_changed_by(&with_a("1")));
        assert!(current.is_changed_by(&with_a("2")));
        let mut moved = start.clone();
        moved.items.remove("cwd:");
        assert!(current.is_changed_by(&start.changes_to(&moved)));
    }

    /// What bash prints for `script`, run with `env` as its whole environment.
    fn bash_output(script: &str, env: &[(&str, &str)]) -> String {
        let out = std::process::Command::new("bash")
            .args(["--norc", "--noprofile", "-c", script])
            .env_clear()
            .envs(env.iter().copied())
            .current_dir("/")
            .output()
            .expect("run bash");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    }

    #[test]
    fn a_first_variable_is_written_as_declare_p_writes_it() {
        let fresh = |value: &str| {
            let env = BTreeMap::from([("V".to_string(), value.to_string())]);
            Snapshot::fresh("/", &env).items["var:V"].clone()
        };
        for value in [
            "plain",
            "",
            "two  words",
            "say \"hi\"",
            "$HOME and `date`",
            r"back\slash\",
            "it's",
            "!x ~ * ? [a] {b,c} ; & | < > # %",
        ] {
            let declared = bash_output("declare -p V", &[("V", value)]);
            assert_eq!(fresh(value), declared.trim_end(), "{value:?}");
        }
        // What bash writes as its locale has it: other words, the same value.
        for value in ["tab\there", "line\nbreak", "caf\u{e9}"] {
            let restored = bash_output(&format!("{}; printf %s \"$V\"", fresh(value)), &[]);
            assert_eq!(restored, value);
        }
    }

    #[test]
    fn what_bash_gives_every_shell_fills_in_only_what_a_snapshot_does_not_set() {
        let printed = bash_output("declare -p; printf '\\0'; umask -p", &[]);
        let (declared, umask) = printed.split_once('\0').unwrap();
        let defaults = shell_defaults(declared, umask);
        assert_eq!(defaults.items["var:IFS"], "declare -- IFS=$' \\t\\n'");
        assert_eq!(defaults.items["var:OPTIND"], "declare -i OPTIND=\"1\"");
        assert!(defaults.items["umask:"].starts_with("umask 0"));
        for own in ["var:BASHPID", "var:PPID", "var:SHLVL", "var:PWD", "var:_"] {
            assert!(!defaults.items.contains_key(own), "{own} kept");
        }
        let env = BTreeMap::from([("PATH".to_string(), "/bin".to_string())]);
        let mut first = Snapshot::fresh("/tmp", &env);
        first.fill_in(&defaults);
        assert_eq!(first.items["var:PATH"], "declare -x PATH=\"/bin\"");
        assert_eq!(first.items["var:IFS"], defaults.items["var:IFS"]);
        assert_eq!(first.cwd(), "/tmp");
    }

    #[test]
    fn restore_sets_options_last_and_quotes_the_directory() {
        let mut s = Snapshot::fresh("/tmp/it's here", &BTreeMap::new());
        s.items
            .insert("set:errexit".into(), "set -o errexit".into());
        s.items
            .insert("func:f".into(), "f () \n{ \n    :\n}".into());
        let script = s.restore_script();
        let cwd = r"'/tmp/it'\''s here'";
        assert!(script.starts_with(&format!(
            "\\builtin cd -- {cwd} 2>/dev/null || __eukhe_lost_cwd={cwd}\n"
        )));
        s.items
            .insert("set:pipefail".into(), "set +o pipefail".into());
        s.items
            .insert("shopt:extglob".into(), "shopt -u extglob".into());
        let script = s.restore_script();
        assert!(
            script.find("f ()").unwrap() < script.find("\\set -o errexit +o pipefail\n").unwrap()
        );
        assert!(script.find("shopt -s expand_aliases\n").unwrap() < script.find("f ()").unwrap());
        assert!(script.contains("shopt -u extglob\n"), "{script}");
    }
}
