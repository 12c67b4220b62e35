//! A failed tool call's one line in the tools' own terms: the daemon words
//! its refusals for the command line (`eukhe rm --force s`, `eukhe ls`),
//! and an agent calling tools is told the tool and argument instead.

/// `message`, with each command-line suggestion the tools have a form of
/// put as that form.
pub fn in_tool_terms(message: &str) -> String {
    let mut text = message.to_string();
    // "`eukhe rm --force s1` cancels its work and removes it"
    while let Some(start) = text.find("`eukhe rm --force ") {
        let after = start + 1;
        let Some(len) = text[after..].find('`') else {
            break;
        };
        text.replace_range(
            start..after + len + 1,
            "`remove_session` with `force: true`",
        );
    }
    // "`eukhe reset --force s` ends it with the old shell"
    while let Some(start) = text.find("`eukhe reset --force ") {
        let after = start + 1;
        let Some(len) = text[after..].find('`') else {
            break;
        };
        text.replace_range(
            start..after + len + 1,
            "`bash` with `restart: true, force: true`",
        );
    }
    text.replace("`eukhe ls`", "`list_sessions`")
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
            in_tool_terms("the shell is busy (a run): `eukhe reset --force ab12cd34` ends it"),
            "the shell is busy (a run): `bash` with `restart: true, force: true` ends it"
        );
        assert_eq!(in_tool_terms("nothing to change"), "nothing to change");
    }
}
