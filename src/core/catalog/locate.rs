//! Finds the line of a key path such as `codes[3].write.verdict` in a
//! catalog's TOML text, so every validation error names file, line and key.

use toml::Spanned;
use toml::de::{DeTable, DeValue};

/// The 1-based line of the deepest part of `path` that exists in `text`.
pub fn line_of_key(text: &str, path: &str) -> Option<usize> {
    let (root, _) = DeTable::parse_recoverable(text);
    let mut table: &DeTable<'_> = root.get_ref();
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
    found.map(|offset| line_of(text, offset))
}

/// The path of the last key that starts on 1-based line `line` (for naming
/// where a syntax error is), e.g. `codes[2].read`.
pub fn key_on_line(root: &DeTable<'_>, text: &str, line: usize) -> Option<String> {
    let mut found = None;
    visit(root, "", text, line, &mut found);
    found.map(|(_, path)| path)
}

fn visit(table: &DeTable<'_>, parent: &str, text: &str, line: usize, found: &mut Option<(usize, String)>) {
    for (key, value) in table.iter() {
        let name = key.get_ref().as_ref();
        let path = if parent.is_empty() {
            name.to_owned()
        } else {
            format!("{parent}.{name}")
        };
        let start = key.span().start;
        if line_of(text, start) == line && found.as_ref().is_none_or(|(s, _)| start >= *s) {
            *found = Some((start, path.clone()));
        }
        match value.get_ref() {
            DeValue::Table(t) => visit(t, &path, text, line, found),
            DeValue::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    if let DeValue::Table(t) = item.get_ref() {
                        visit(t, &format!("{path}[{i}]"), text, line, found);
                    }
                }
            }
            _ => {}
        }
    }
}

/// The 1-based line of byte `offset`.
pub fn line_of(text: &str, offset: usize) -> usize {
    text.get(..offset).map_or(1, |t| t.matches('\n').count() + 1)
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
}
