use super::*;

/// `select` fed `data` in chunks of `chunk` bytes.
fn run(mut select: Box<dyn Select>, data: &[u8], chunk: usize) -> Collected {
    for piece in data.chunks(chunk) {
        if select.feed(piece) == Flow::Enough {
            break;
        }
    }
    select.finish()
}

fn numbers(n: u64) -> Vec<u8> {
    (1..=n)
        .map(|i| format!("{i}\n"))
        .collect::<String>()
        .into_bytes()
}

#[test]
fn head_tail_and_bytes_give_what_head_tail_and_dd_give_whatever_the_chunks() {
    let data = numbers(1000);
    for chunk in [1, 3, 7, 4096] {
        let head = run(Box::new(Head::new(3)), &data, chunk);
        assert_eq!(head.parts[0].data, b"1\n2\n3\n");
        let tail = run(Box::new(Tail::new(Place::START, 2)), &data, chunk);
        assert_eq!(tail.parts[0].data, b"999\n1000\n");
        assert_eq!(tail.parts[0].start.line, 999);
        let bytes = run(Box::new(Bytes::new(Place::START, 2, Some(6))), &data, chunk);
        assert_eq!(bytes.parts[0].data, &data[2..6]);
        assert_eq!(bytes.parts[0].start, PartStart { line: 2, offset: 2 });
    }
    // No newline at the end: the last line still counts.
    let tail = run(Box::new(Tail::new(Place::START, 2)), b"a\nb\nc", 2);
    assert_eq!(tail.parts[0].data, b"b\nc");
}

#[test]
fn grep_groups_matches_with_context_and_stops_at_its_max_count() {
    let data = numbers(100);
    let regex = Regex::new("^(10|12|50)$").unwrap();
    let grep = run(Box::new(Grep::new(regex.clone(), 1, None)), &data, 5);
    let parts: Vec<_> = grep
        .parts
        .iter()
        .map(|p| (p.start.line, String::from_utf8_lossy(&p.data).into_owned()))
        .collect();
    assert_eq!(
        parts,
        [
            (9, "9\n10\n11\n12\n13\n".to_string()),
            (49, "49\n50\n51\n".to_string())
        ]
    );
    assert_eq!(grep.matches, Some(3));
    let first = run(Box::new(Grep::new(regex, 0, Some(1))), &data, 5);
    assert_eq!(first.parts.len(), 1);
    assert_eq!(first.matches, Some(1));
    assert!(first.stopped);
}

#[test]
fn chunks_a_grep_skips_give_what_looking_at_every_line_gives() {
    let data = numbers(3000);
    for pattern in ["^(7|1000|1001|2999|3000)$", "99", "0$", "^1", "x"] {
        for context in [0, 1, 3] {
            for max_count in [None, Some(2)] {
                // A group `(?:...)` turns the chunk search off: every line
                // is looked at.
                let every = Regex::new(&format!("(?:{pattern})")).unwrap();
                for chunk in [1, 13, 100, 4096] {
                    let fast = Grep::new(Regex::new(pattern).unwrap(), context, max_count);
                    assert!(fast.search.is_some());
                    let fast = run(Box::new(fast), &data, chunk);
                    let slow = Grep::new(every.clone(), context, max_count);
                    assert!(slow.search.is_none());
                    let slow = run(Box::new(slow), &data, chunk);
                    let what = format!("{pattern} -C {context} -m {max_count:?} in {chunk}s");
                    assert_eq!(fast.parts, slow.parts, "{what}");
                    assert_eq!(fast.matches, slow.matches, "{what}");
                }
            }
        }
    }
}
