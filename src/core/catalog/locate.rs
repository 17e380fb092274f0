//! Finds the line of a key path such as `codes[3].write.verdict` in a
//! catalog's TOML text, so every validation error names file, line and key.
//!
//! A catalog with many mistakes has many errors to place: each is found in
//! one parse of the text (not a parse per error) and its line by a binary
//! search of the text's line starts (not a count of newlines per key).

use toml::Spanned;
use toml::de::{DeTable, DeValue};

/// Where the lines of a text start: the 1-based line of any byte offset.
#[derive(Debug)]
pub struct Lines {
    /// Offsets of the text's `\n`s, ascending.
    newlines: Vec<usize>,
    len: usize,
}

impl Lines {
    /// The lines of `text`.
    pub fn of_text(text: &str) -> Lines {
        // `match_indices` of a char searches with memchr, not byte by byte.
        let newlines = text.match_indices('\n').map(|(i, _)| i).collect();
        Lines {
            newlines,
            len: text.len(),
        }
    }

    /// The 1-based line of byte `offset` (1 past the end of the text).
    pub fn line(&self, offset: usize) -> usize {
        if offset > self.len {
            return 1;
        }
        self.newlines.partition_point(|&n| n < offset) + 1
    }
}

/// The 1-based line of the deepest part of `path` that exists in `text`.
pub fn line_of_key(text: &str, path: &str) -> Option<usize> {
    let (root, _) = DeTable::parse_recoverable(text);
    line_of_key_in(root.get_ref(), &Lines::of_text(text), path)
}

/// [`line_of_key`] in the parsed `root` of a text whose lines are `lines`.
pub fn line_of_key_in(root: &DeTable<'_>, lines: &Lines, path: &str) -> Option<usize> {
    let mut table: &DeTable<'_> = root;
    let mut found: Option<usize> = None;
    for segment in path.split('.') {
        let (name, index) = match segment.split_once('[') {
            Some((name, rest)) => (name, rest.trim_end_matches(']').parse::<usize>().ok()),
            None => (segment, None),
        };
        let Some((key, value)) = table.iter().find(|(k, _)| k.get_ref().as_ref() == name) else {
            break;
        };
        found = Some(key.span().start);
        let mut value: &Spanned<DeValue<'_>> = value;
        if let Some(i) = index {
            let DeValue::Array(items) = value.get_ref() else { break };
            let Some(item) = items.get(i) else { break };
            found = Some(item.span().start);
            value = item;
        }
        match value.get_ref() {
            DeValue::Table(t) => table = t,
            _ => break,
        }
    }
    found.map(|offset| lines.line(offset))
}

/// For each of the 1-based `lines` (ascending, no repeats), the path of the
/// last key that starts on it (for naming where a syntax error is), e.g.
/// `codes[2].read`. One walk of the tree for all of them: a file with many
/// syntax errors is not walked once per error.
pub fn keys_on_lines(root: &DeTable<'_>, lines: &Lines, wanted: &[usize]) -> Vec<Option<String>> {
    let mut found = vec![None; wanted.len()];
    if !wanted.is_empty() {
        visit(root, &String::new, lines, wanted, &mut found);
    }
    found.into_iter().map(|f| f.map(|(_, path)| path)).collect()
}

/// Walks every key; a key's path is only written out when it is on a wanted
/// line (writing each key's path was most of a many-error compile).
fn visit(
    table: &DeTable<'_>,
    parent: &dyn Fn() -> String,
    lines: &Lines,
    wanted: &[usize],
    found: &mut [Option<(usize, String)>],
) {
    for (key, value) in table.iter() {
        let name = key.get_ref().as_ref();
        let path = || {
            let parent = parent();
            if parent.is_empty() {
                name.to_owned()
            } else {
                format!("{parent}.{name}")
            }
        };
        let start = key.span().start;
        if let Ok(i) = wanted.binary_search(&lines.line(start)) {
            if found[i].as_ref().is_none_or(|(s, _)| start >= *s) {
                found[i] = Some((start, path()));
            }
        }
        match value.get_ref() {
            DeValue::Table(t) => visit(t, &path, lines, wanted, found),
            DeValue::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    if let DeValue::Table(t) = item.get_ref() {
                        visit(t, &|| format!("{}[{i}]", path()), lines, wanted, found);
                    }
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "name = \"x\"\n[backoff]\nbase_ms = 1\n\n[[codes]]\ncode = \"A\"\n\n[[codes]]\ncode = \"B\"\nwrite = { verdict = \"v\" }\n";

    #[test]
    fn finds_nested_keys_and_array_items() {
        assert_eq!(line_of_key(TEXT, "name"), Some(1));
        assert_eq!(line_of_key(TEXT, "backoff.base_ms"), Some(3));
        assert_eq!(line_of_key(TEXT, "codes[1].code"), Some(9));
        assert_eq!(line_of_key(TEXT, "codes[1].write.verdict"), Some(10));
        // a missing leaf falls back to the deepest part that exists
        assert_eq!(line_of_key(TEXT, "codes[1].condition.ru"), Some(8));
        assert_eq!(line_of_key(TEXT, "nothing"), None);
    }

    /// One walk names the last key of every wanted line, nested and in
    /// array items; a line with no key has none.
    #[test]
    fn names_the_last_key_of_each_wanted_line() {
        let (root, _) = DeTable::parse_recoverable(TEXT);
        let keys = keys_on_lines(root.get_ref(), &Lines::of_text(TEXT), &[1, 3, 4, 6, 10, 99]);
        let keys: Vec<Option<&str>> = keys.iter().map(Option::as_deref).collect();
        assert_eq!(
            keys,
            [
                Some("name"),
                Some("backoff.base_ms"),
                None,
                Some("codes[0].code"),
                Some("codes[1].write.verdict"),
                None
            ]
        );
        assert!(keys_on_lines(root.get_ref(), &Lines::of_text(TEXT), &[]).is_empty());
    }

    /// The line of every offset is the count of newlines before it, plus one
    /// (what the lookup replaced), and 1 past the end of the text.
    #[test]
    fn a_line_is_one_more_than_the_newlines_before_it() {
        for text in [TEXT, "", "\n", "a", "\n\nx\n", "ж\nй"] {
            let lines = Lines::of_text(text);
            for offset in 0..=text.len() {
                let naive = text.as_bytes()[..offset].iter().filter(|b| **b == b'\n').count() + 1;
                assert_eq!(lines.line(offset), naive, "{text:?} at {offset}");
            }
            assert_eq!(lines.line(text.len() + 1), 1);
        }
    }
}
