//! Amending a catalog: a file that says `extends = "vibecode"` keeps
//! everything of the base catalog and changes only what it names — a code's
//! keys (its `read` or `write` rule, its hold, its aliases …), the backoff's
//! keys, `max_attempts`, the budgets, any top-level key — adds the codes the
//! base does not have, and drops the codes it lists in `remove`. The merge is
//! made on the TOML tables, then compiled as any catalog is, so the rules
//! and their validation are the same; errors in what the file wrote point to
//! its own lines.

use toml::{Table, Value};

use super::CatalogError;
use super::locate::line_of_key;

/// Where a code of a merged catalog came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CodeOrigin {
    /// The base catalog's, unchanged.
    Base,
    /// The base catalog's, with keys the amending file's `codes[i]` changed.
    Amended(usize),
    /// New in the amending file's `codes[i]`.
    Added(usize),
}

impl CodeOrigin {
    /// `base`, `amended` or `added`.
    pub fn as_str(self) -> &'static str {
        match self {
            CodeOrigin::Base => "base",
            CodeOrigin::Amended(_) => "amended",
            CodeOrigin::Added(_) => "added",
        }
    }
}

/// A base catalog merged with an amending file.
#[derive(Debug, Clone)]
pub struct Merged {
    /// The merged catalog as TOML, what is compiled (and hashed into the policy version).
    pub text: String,
    /// Each merged code (by its `code`) and where it came from, in merged order.
    pub origins: Vec<(String, CodeOrigin)>,
}

/// The keys an amending file may hold besides the catalog's own.
pub const AMEND_KEYS: [&str; 3] = ["extends", "remove", "replaces"];

/// The `extends` of a catalog file, if its TOML says one (a file that does
/// not parse is left to the compiler to report).
pub fn extends_of(text: &str) -> Option<String> {
    let t: Table = text.parse().ok()?;
    t.get("extends").and_then(Value::as_str).map(str::to_owned)
}

/// Whether a catalog file says `replaces = true`.
pub fn replaces_of(text: &str) -> bool {
    text.parse::<Table>()
        .ok()
        .and_then(|t| t.get("replaces").and_then(Value::as_bool))
        .unwrap_or(false)
}

/// Merges `text` (from `file`, which `extends` the catalog `base_name`
/// whose TOML is `base_text`).
pub fn merge(file: &str, text: &str, base_name: &str, base_text: &str) -> Result<Merged, Vec<CatalogError>> {
    let err = |key: &str, message: String| CatalogError {
        file: file.to_owned(),
        line: line_of_key(text, key),
        key: key.to_owned(),
        message,
    };
    let mut amendment: Table = text
        .parse()
        .map_err(|e: toml::de::Error| vec![err("toml", format!("TOML syntax: {}", e.message()))])?;
    let mut merged: Table = base_text.parse().map_err(|e: toml::de::Error| {
        vec![err(
            "extends",
            format!("the base catalog {base_name:?} does not parse: {}", e.message()),
        )]
    })?;
    let mut errors = Vec::new();
    if !amendment.contains_key("name") {
        errors.push(err(
            "extends",
            format!("an amending file needs a `name`: name = {base_name:?} amends {base_name:?} in place, another name makes a new catalog"),
        ));
    }
    if amendment.get("replaces").and_then(Value::as_bool) == Some(true) {
        errors.push(err(
            "replaces",
            "`replaces = true` and `extends` contradict each other: extends amends the base, replaces drops it"
                .to_owned(),
        ));
    }
    for key in AMEND_KEYS {
        amendment.remove(key);
        merged.remove(key);
    }
    merged.remove("tests");
    let remove: Vec<String> = match text.parse::<Table>().ok().and_then(|t| t.get("remove").cloned()) {
        None => Vec::new(),
        Some(Value::Array(items)) => {
            let mut codes = Vec::new();
            for item in items {
                match item {
                    Value::String(s) => codes.push(s),
                    other => errors.push(err(
                        "remove",
                        format!("codes to remove are strings, not {}", other.type_str()),
                    )),
                }
            }
            codes
        }
        Some(other) => {
            errors.push(err("remove", format!("a list of codes, not {}", other.type_str())));
            Vec::new()
        }
    };

    // The codes: the base's in its order (amended in place, removed ones
    // dropped), then the file's new ones.
    let base_codes = take_codes(&mut merged);
    let own_codes = take_codes(&mut amendment);
    for code in &remove {
        if !base_codes.iter().any(|c| code_of(c) == Some(code.as_str())) {
            errors.push(err(
                "remove",
                format!(
                    "{code:?} is not a code of {base_name:?}; its codes: {}",
                    names(&base_codes)
                ),
            ));
        }
    }
    let mut codes: Vec<Value> = Vec::new();
    let mut origins = Vec::new();
    for base in base_codes {
        let name = code_of(&base).unwrap_or_default().to_owned();
        if remove.contains(&name) {
            if let Some(j) = own_codes.iter().position(|c| code_of(c) == Some(name.as_str())) {
                errors.push(err(
                    &format!("codes[{j}].code"),
                    format!("{name:?} is both amended and in `remove`; keep one"),
                ));
            }
            continue;
        }
        match own_codes.iter().position(|c| code_of(c) == Some(name.as_str())) {
            Some(j) => {
                codes.push(overlay(base, &own_codes[j]));
                origins.push((name, CodeOrigin::Amended(j)));
            }
            None => {
                codes.push(base);
                origins.push((name, CodeOrigin::Base));
            }
        }
    }
    for (j, own) in own_codes.iter().enumerate() {
        let Some(name) = code_of(own) else {
            errors.push(err(&format!("codes[{j}].code"), "missing (required)".to_owned()));
            continue;
        };
        if !origins.iter().any(|(n, _)| n == name) && !remove.iter().any(|r| r == name) {
            codes.push(own.clone());
            origins.push((name.to_owned(), CodeOrigin::Added(j)));
        }
    }
    // Every other key: a table's keys are overlaid one level down (the
    // backoff's base_ms alone may change), anything else is replaced.
    for (key, value) in amendment {
        let new = match merged.remove(&key) {
            Some(base @ Value::Table(_)) if value.is_table() => overlay(base, &value),
            _ => value,
        };
        merged.insert(key, new);
    }
    merged.insert("codes".to_owned(), Value::Array(codes));
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(Merged {
        text: toml::to_string(&merged).unwrap_or_default(),
        origins,
    })
}

/// Points an error the compiler found in the merged catalog back at the
/// amending file: a key the file wrote gets the file's key path and line; a
/// key of the base says so.
pub fn locate_error(
    mut e: CatalogError,
    text: &str,
    base_name: &str,
    origins: &[(String, CodeOrigin)],
) -> CatalogError {
    if let Some(rest) = e.key.strip_prefix("codes[") {
        let (index, tail) = rest.split_once(']').unwrap_or((rest, ""));
        match index.parse::<usize>().ok().and_then(|i| origins.get(i)) {
            Some((_, CodeOrigin::Amended(j) | CodeOrigin::Added(j))) => {
                e.key = format!("codes[{j}]{tail}");
                e.line = line_of_key(text, &e.key);
            }
            _ => {
                e.line = None;
                e.message = format!("{} (in what {base_name:?} contributes)", e.message);
            }
        }
        return e;
    }
    let top = e.key.split(['.', '[']).next().unwrap_or_default();
    let written = text.parse::<Table>().is_ok_and(|t| t.contains_key(top));
    if written {
        e.line = line_of_key(text, &e.key);
    } else {
        e.line = None;
        e.message = format!("{} (in what {base_name:?} contributes)", e.message);
    }
    e
}

fn take_codes(t: &mut Table) -> Vec<Value> {
    match t.remove("codes") {
        Some(Value::Array(a)) => a,
        _ => Vec::new(),
    }
}

fn code_of(v: &Value) -> Option<&str> {
    v.get("code").and_then(Value::as_str)
}

fn names(codes: &[Value]) -> String {
    codes.iter().filter_map(code_of).collect::<Vec<_>>().join(", ")
}

/// `base` with `top`'s keys put over it (one level: a key `top` names is
/// replaced whole).
fn overlay(mut base: Value, top: &Value) -> Value {
    if let (Some(b), Some(t)) = (base.as_table_mut(), top.as_table()) {
        for (k, v) in t {
            b.insert(k.clone(), v.clone());
        }
    }
    base
}
