//! The literals a grep's regex needs: every match holds one of them, so a
//! block of output whose filter lacks a trigram of each holds no match.
//! Taken from the regex's syntax (`regex_syntax`): the literals every
//! match starts with, or those it ends with, whichever are longer. A
//! regex without such literals of three bytes at least (`.`, `x*`,
//! `[0-9]+`) has none, and its grep reads the whole output.

use regex_syntax::hir::literal::{ExtractKind, Extractor};

/// The longest part of a literal looked up: a part of a needed literal
/// is needed too, and a shorter one reaches back over fewer blocks.
pub const NEEDLE_MAX_BYTES: usize = 64;

/// The literals one of which every match of `pattern` holds, ASCII
/// letters in lower case, or None when there are none worth looking up.
pub fn needles(pattern: &str) -> Option<Vec<Vec<u8>>> {
    // As `regex::bytes::Regex` parses it.
    let hir = regex_syntax::ParserBuilder::new()
        .utf8(false)
        .build()
        .parse(pattern)
        .ok()?;
    let of = |kind: ExtractKind| -> Option<Vec<Vec<u8>>> {
        let suffix = matches!(kind, ExtractKind::Suffix);
        let seq = Extractor::new().kind(kind).extract(&hir);
        let mut found: Vec<Vec<u8>> = Vec::new();
        for literal in seq.literals()? {
            let bytes = literal.as_bytes();
            let keep = bytes.len().min(NEEDLE_MAX_BYTES);
            let part = match suffix {
                true => &bytes[bytes.len() - keep..],
                false => &bytes[..keep],
            };
            if part.len() < 3 {
                return None;
            }
            found.push(part.to_ascii_lowercase());
        }
        found.sort();
        found.dedup();
        (!found.is_empty()).then_some(found)
    };
    let shortest = |set: &Vec<Vec<u8>>| set.iter().map(Vec::len).min().unwrap_or(0);
    match (of(ExtractKind::Prefix), of(ExtractKind::Suffix)) {
        (Some(prefix), Some(suffix)) => Some(
            match (shortest(&suffix), prefix.len()) > (shortest(&prefix), suffix.len()) {
                true => suffix,
                false => prefix,
            },
        ),
        (prefix, suffix) => prefix.or(suffix),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(pattern: &str) -> Option<Vec<String>> {
        needles(pattern).map(|set| {
            set.into_iter()
                .map(|n| String::from_utf8(n).unwrap())
                .collect()
        })
    }

    #[test]
    fn a_regex_needs_its_literals_folded_and_one_without_needs_none() {
        assert_eq!(strings("needle"), Some(vec!["needle".into()]));
        assert_eq!(strings("^Error: x"), Some(vec!["error: x".into()]));
        assert_eq!(strings("foo|Bar"), Some(vec!["bar".into(), "foo".into()]));
        assert_eq!(strings("(?i)NeEdLe"), Some(vec!["needle".into()]));
        let failed = strings("[0-9]+ failed$").unwrap();
        assert!(failed.iter().all(|n| n.ends_with(" failed")), "{failed:?}");
        for none in [".", "x*", "^$", "[0-9]+", "ab|cde", "a.c"] {
            assert_eq!(strings(none), None, "{none}");
        }
        let long = "x".repeat(200);
        assert_eq!(needles(&long).unwrap()[0].len(), NEEDLE_MAX_BYTES);
    }
}
