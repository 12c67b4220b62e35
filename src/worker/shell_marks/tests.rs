use bytes::Bytes;

use super::{split, Found, ShellMarks};
use crate::protocol::entry::{EntryBody, Stream};

const COMMAND: &[u8] = b"$ false\r\n\x1b]633;E;false\x07\x1b]133;C\x07oops\r\n\x1b]133;D;1\x1b\\$ ";

fn marks_of(chunks: &[&[u8]]) -> Vec<(usize, Found)> {
    let mut marks = ShellMarks::default();
    let mut found = Vec::new();
    for (n, chunk) in chunks.iter().enumerate() {
        found.extend(marks.scan(chunk).into_iter().map(|f| (n, f)));
    }
    found
}

#[test]
fn a_commands_start_and_end_are_found_with_its_text_and_status() {
    let found = marks_of(&[COMMAND]);
    let [(_, start), (_, end)] = &found[..] else {
        panic!("two marks: {found:?}");
    };
    assert_eq!((start.text.as_str(), start.status), ("false", None));
    assert_eq!(&COMMAND[start.end..start.end + 4], b"oops");
    assert_eq!((end.text.as_str(), end.status), ("false", Some(1)));
    assert_eq!(&COMMAND[end.start..end.start + 2], b"\x1b]");
    assert_eq!(&COMMAND[end.end..], b"$ ");
}

#[test]
fn marks_cut_at_every_byte_are_found_the_same() {
    for cut in 0..=COMMAND.len() {
        let found = marks_of(&[&COMMAND[..cut], &COMMAND[cut..]]);
        let seen: Vec<_> = found
            .iter()
            .map(|(_, f)| (f.text.clone(), f.status))
            .collect();
        assert_eq!(
            seen,
            [("false".to_string(), None), ("false".to_string(), Some(1))],
            "cut at {cut}"
        );
    }
}

#[test]
fn escaped_text_reads_back_and_other_sequences_are_not_marks() {
    let data = b"\x1b[1m\x1b]0;title\x07\x1b]633;E;a\\x3bb\\x0ac\\\\d\x07\x1b]133;C\x07";
    let found = marks_of(&[data]);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].1.text, "a;b\nc\\d");
    assert!(marks_of(&[b"plain \x1b]133;A\x07 text"]).is_empty());
}

#[test]
fn a_chunk_is_cut_so_the_commands_output_lies_between_its_entries() {
    let mut marks = ShellMarks::default();
    let data = Bytes::from_static(COMMAND);
    let found = marks.scan(&data);
    let entries = split(7, Stream::Stdout, (data.clone(), 99), found);
    let mut joined = Vec::new();
    let mut between = Vec::new();
    let mut inside = false;
    for entry in &entries {
        match entry {
            EntryBody::Output { data, .. } => {
                joined.extend_from_slice(data);
                if inside {
                    between.extend_from_slice(data);
                }
            }
            EntryBody::ShellCommand {
                input: 7, status, ..
            } => inside = status.is_none(),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(joined, COMMAND, "every byte kept, in order");
    assert_eq!(between, b"oops\r\n");
    let ends: Vec<_> = entries
        .iter()
        .filter_map(|e| match e {
            EntryBody::Output { spool_end, .. } => Some(*spool_end),
            _ => None,
        })
        .collect();
    assert_eq!(
        ends.last(),
        Some(&Some(99)),
        "the last piece says where the chunk ends"
    );
    assert!(ends[..ends.len() - 1].iter().all(Option::is_none));
}
