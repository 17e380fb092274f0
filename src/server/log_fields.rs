//! The fields of the text log format, written so that one record is one
//! line and a value can never pose as another field: callers choose many of
//! the strings logged (dependencies, tenants, codes, hold reasons, request
//! ids), and a `dependency` of `x\n2026-… INFO … hold released` or
//! `x caller=10.0.0.1` must not read as a second record or a second field.
//!
//! Every value has its control characters (newlines, ESC, NUL, U+2028 …)
//! escaped as Rust does (`\n`, `\u{1b}`), and is quoted, with `"` and `\`
//! escaped, when it is empty or holds whitespace, `=`, `"` or `\`. A value
//! that is already one well-formed quoted string (what `?value` of a string
//! gives) is kept as it is. The message is escaped the same way and quoted
//! only when it holds `=` or an odd number of `"`, so fields always start at
//! the first bare `name=` token. The JSON format needs none of this: JSON escapes.

use std::fmt::{self, Write as _};

use tracing::field::{Field, Visit};
use tracing_subscriber::field::{MakeVisitor, VisitFmt, VisitOutput};
use tracing_subscriber::fmt::format::Writer;

/// The text format's field formatter (`fmt().fmt_fields(EscapedFields)`).
#[derive(Debug, Clone, Copy, Default)]
pub struct EscapedFields;

impl<'a> MakeVisitor<Writer<'a>> for EscapedFields {
    type Visitor = Fields<'a>;

    fn make_visitor(&self, target: Writer<'a>) -> Self::Visitor {
        Fields {
            writer: target,
            first: true,
            result: Ok(()),
        }
    }
}

/// Writes one record's (or span's) fields.
pub struct Fields<'a> {
    writer: Writer<'a>,
    first: bool,
    result: fmt::Result,
}

impl Fields<'_> {
    fn write(&mut self, field: &Field, text: &str) {
        self.write_as(field, text, false);
    }

    /// `quoted`: `text` is already one well-formed quoted string.
    fn write_as(&mut self, field: &Field, text: &str, quoted: bool) {
        if self.result.is_err() {
            return;
        }
        let name = field.name();
        if name.starts_with("log.") {
            return;
        }
        let mut out = String::with_capacity(text.len() + name.len() + 3);
        if !self.first {
            out.push(' ');
        }
        self.first = false;
        if name == "message" {
            push_message(&mut out, text);
        } else {
            out.push_str(name.strip_prefix("r#").unwrap_or(name));
            out.push('=');
            if quoted {
                out.push_str(text);
            } else {
                push_value(&mut out, text);
            }
        }
        self.result = self.writer.write_str(&out);
    }
}

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.write(field, value);
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        let mut text = value.to_string();
        let mut source = value.source();
        while let Some(s) = source {
            let _ = write!(text, ": {s}");
            source = s.source();
        }
        self.write(field, &text);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let text = format!("{value:?}");
        // `?string`: Debug already escaped and quoted it; quoting it again
        // would only add backslashes.
        let quoted = field.name() != "message" && is_quoted(&text);
        self.write_as(field, &text, quoted);
    }
}

impl VisitOutput<fmt::Result> for Fields<'_> {
    fn finish(self) -> fmt::Result {
        self.result
    }
}

impl VisitFmt for Fields<'_> {
    fn writer(&mut self) -> &mut dyn fmt::Write {
        &mut self.writer
    }
}

/// Characters shown escaped wherever they appear: anything that could end
/// a line, move the cursor or colour a terminal.
fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{2028}' | '\u{2029}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

fn push_escaped(out: &mut String, c: char) {
    for e in c.escape_debug() {
        out.push(e);
    }
    if c.escape_debug().len() == 1 {
        // escape_debug leaves some of our characters (e.g. bidi marks) as
        // they are; show their code point instead.
        out.pop();
        let _ = write!(out, "\\u{{{:x}}}", c as u32);
    }
}

fn push_value(out: &mut String, text: &str) {
    let quote = text.is_empty() || text.chars().any(|c| c.is_whitespace() || matches!(c, '=' | '"' | '\\'));
    push_text(out, text, quote);
}

/// The message is quoted only when it could pose as fields (an `=`) or
/// break a quote-aware reader (an odd number of `"`): error messages that
/// name a value in quotes (`unknown catalog "nope"`) stay as they are.
fn push_message(out: &mut String, text: &str) {
    let quote = text.contains('=') || text.matches('"').count() % 2 == 1;
    push_text(out, text, quote);
}

fn push_text(out: &mut String, text: &str, quote: bool) {
    if quote {
        out.push('"');
    }
    for c in text.chars() {
        if needs_escape(c) {
            push_escaped(out, c);
        } else if quote && matches!(c, '"' | '\\') {
            out.push('\\');
            out.push(c);
        } else {
            out.push(c);
        }
    }
    if quote {
        out.push('"');
    }
}

/// Whether `text` is one quoted string with every `"` inside escaped and
/// no raw control character: one token, whatever it holds.
fn is_quoted(text: &str) -> bool {
    let Some(inner) = text.strip_prefix('"').and_then(|t| t.strip_suffix('"')) else {
        return false;
    };
    if text.len() < 2 {
        return false;
    }
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            // The guard takes the escaped character: a lone `\` at the end is not an escape.
            '\\' if chars.next().is_none() => return false,
            '\\' => {}
            '"' => return false,
            c if needs_escape(c) => return false,
            _ => {}
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(s: &str) -> String {
        let mut out = String::new();
        push_value(&mut out, s);
        out
    }

    #[test]
    fn plain_values_stay_bare_and_others_are_quoted_and_escaped() {
        assert_eq!(value("payments"), "payments");
        assert_eq!(value(""), "\"\"");
        assert_eq!(value("x caller=10.0.0.1"), "\"x caller=10.0.0.1\"");
        assert_eq!(value("a\nb"), "\"a\\nb\"");
        assert_eq!(value("a\u{1b}[31mb"), "a\\u{1b}[31mb");
        assert_eq!(value("say \"hi\" \\"), "\"say \\\"hi\\\" \\\\\"");
        assert_eq!(value("rtl\u{202e}x"), "rtl\\u{202e}x");
    }

    #[test]
    fn messages_are_quoted_only_when_they_could_pose_as_fields() {
        let message = |s: &str| {
            let mut out = String::new();
            push_message(&mut out, s);
            out
        };
        assert_eq!(message("unknown catalog \"nope\""), "unknown catalog \"nope\"");
        assert_eq!(message("x caller=1.2.3.4"), "\"x caller=1.2.3.4\"");
        assert_eq!(message("a\" b"), "\"a\\\" b\"");
        assert_eq!(message("line\nbreak"), "line\\nbreak");
    }

    #[test]
    fn only_well_formed_quoted_strings_pass_as_one_token() {
        assert!(is_quoted("\"a \\\" b\""));
        assert!(is_quoted("\"\""));
        assert!(!is_quoted("\""));
        assert!(!is_quoted("\"a\" caller=\"b\""));
        assert!(!is_quoted("\"a\nb\""));
        assert!(!is_quoted("\"a\\\""));
    }
}
