//! A failed tool call's one line in the tools' own terms: the daemon words
//! its refusals for the command line (`eukhe rm --force s`, `eukhe ls`),
//! and an agent calling tools is told the tool and argument instead.

/// `message`, with each command-line suggestion the tools have a form of
/// put as that form.
pub fn in_tool_terms(message: &str) -> String {
    let mut text = message.to_string();
    // "`eukhe rm --force s1` cancels its work and removes it"
    replace_command(
        &mut text,
        "`eukhe rm --force ",
        "`remove_session` with `force: true`",
    );
    // `new_session`'s limits are arguments, not options.
    for (option, argument) in [
        ("--memory-max", "memory_max"),
        ("--cpu-quota", "cpu_quota"),
        ("--tasks-max", "tasks_max"),
    ] {
        text = text.replace(option, argument);
    }
    // "`eukhe reset --force s` ends it with the old shell"
    replace_command(
        &mut text,
        "`eukhe reset --force ",
        "`bash` with `restart: true, force: true`",
    );
    text.replace("`eukhe ls`", "`list_sessions`")
}

/// Put `tool` in place of every quoted command line in `text` that starts
/// with `command` (its opening quote included).
fn replace_command(text: &mut String, command: &str, tool: &str) {
    while let Some(start) = text.find(command) {
        let after = start + 1;
        let Some(len) = text[after..].find('`') else {
            break;
        };
        text.replace_range(start..after + len + 1, tool);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_lines_suggestions_become_the_tools() {
        assert_eq!(
            in_tool_terms(
                "session s (ab12cd34) is busy (a run): `eukhe rm --force s` cancels its work and removes it"
            ),
            "session s (ab12cd34) is busy (a run): `remove_session` with `force: true` cancels its work and removes it"
        );
        assert_eq!(
            in_tool_terms("no session \"x\": `eukhe ls` lists them"),
            "no session \"x\": `list_sessions` lists them"
        );
        assert_eq!(
            in_tool_terms("--memory-max \"64m\": expected bytes"),
            "memory_max \"64m\": expected bytes"
        );
        assert!(
            in_tool_terms("(use the systemd backend, or drop --tasks-max)")
                .ends_with("or drop tasks_max)")
        );
        assert_eq!(
            in_tool_terms("the shell is busy (a run): `eukhe reset --force ab12cd34` ends it"),
            "the shell is busy (a run): `bash` with `restart: true, force: true` ends it"
        );
        assert_eq!(in_tool_terms("nothing to change"), "nothing to change");
    }
}
