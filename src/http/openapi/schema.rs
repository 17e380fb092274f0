//! JSON Schemas of the HTTP bodies, generated from `retryd.proto`'s
//! descriptor (the one the gRPC reflection service serves, comments
//! included): every message the routes take or answer, field by field, with
//! the proto's own comment as the description.
//!
//! The HTTP bodies are the proto3 JSON mapping with three differences, all
//! applied here rather than written by hand: field names are the proto's
//! (snake_case; lowerCamelCase is accepted on input); enum values are the
//! core's words (`retry_with_limit`: the proto name without its prefix, in
//! lowercase, which a test checks against `core::words`), and requests also
//! accept the proto names and numbers; a few strings the proto leaves empty
//! are `null` in JSON ([`NULLABLE`]).

use std::collections::BTreeMap;

use prost::Message as _;
use prost_types::field_descriptor_proto::{Label, Type};
use prost_types::{DescriptorProto, EnumDescriptorProto, FileDescriptorProto, FileDescriptorSet};
use serde_json::{Value, json};

/// The encoded descriptor set of `retryd.proto` and its imports.
const DESCRIPTOR: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/retryd_descriptor.bin"));

/// Fields written as `null` in JSON when the proto would carry an empty
/// string or an unspecified enum (the core has no value there).
pub const NULLABLE: &[(&str, &str)] = &[
    ("Decision", "required_transition"),
    ("Decision", "terminal_state"),
    ("CatalogRule", "hold_kind"),
    ("CatalogRule", "hold_scope"),
];

/// Which way a schema is read: a request accepts more spellings than an
/// answer uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// A request body: enums by word, proto name or number; 64-bit integers
    /// as numbers or strings.
    Request,
    /// An answer: enums by word; integers as numbers.
    Answer,
}

/// The `retryd.v1` messages and enums, with their comments.
pub struct Proto {
    messages: BTreeMap<String, (DescriptorProto, Comments)>,
    enums: BTreeMap<String, (EnumDescriptorProto, Comments)>,
}

/// A message's or enum's comment, and its fields' or values' by number.
#[derive(Default, Clone)]
struct Comments {
    own: String,
    members: BTreeMap<i32, String>,
}

impl Proto {
    /// The descriptor of the package, read from the embedded set.
    pub fn load() -> Option<Proto> {
        let set = FileDescriptorSet::decode(DESCRIPTOR).ok()?;
        let file = set
            .file
            .into_iter()
            .find(|f| f.package.as_deref() == Some("retryd.v1"))?;
        Some(Proto::of(&file))
    }

    fn of(file: &FileDescriptorProto) -> Proto {
        let mut comments: BTreeMap<Vec<i32>, String> = BTreeMap::new();
        for loc in file.source_code_info.iter().flat_map(|s| &s.location) {
            if let Some(c) = &loc.leading_comments {
                comments.insert(loc.path.clone(), clean(c));
            }
        }
        let at = |path: &[i32]| comments.get(path).cloned().unwrap_or_default();
        let messages = file
            .message_type
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let i = i as i32;
                let members = (0..m.field.len() as i32)
                    .map(|j| (m.field[j as usize].number(), at(&[4, i, 2, j])))
                    .collect();
                let c = Comments {
                    own: at(&[4, i]),
                    members,
                };
                (m.name().to_owned(), (m.clone(), c))
            })
            .collect();
        let enums = file
            .enum_type
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let i = i as i32;
                let members = (0..e.value.len() as i32)
                    .map(|j| (e.value[j as usize].number(), at(&[5, i, 2, j])))
                    .collect();
                let c = Comments {
                    own: at(&[5, i]),
                    members,
                };
                (e.name().to_owned(), (e.clone(), c))
            })
            .collect();
        Proto { messages, enums }
    }

    /// The core words of enum `name`: each value's name without the enum's
    /// prefix, in lowercase (`VERDICT_RETRY_WITH_LIMIT` → `retry_with_limit`);
    /// the unspecified value has none.
    pub fn words(&self, name: &str) -> Vec<String> {
        let Some((e, _)) = self.enums.get(name) else {
            return Vec::new();
        };
        let prefix = format!("{}_", screaming(name));
        e.value
            .iter()
            .filter(|v| v.number() != 0)
            .map(|v| v.name().strip_prefix(&prefix).unwrap_or(v.name()).to_ascii_lowercase())
            .collect()
    }

    /// The schema of message `name` read in `direction`, with every message
    /// it refers to added to `defs` (under `name`, or `name` + `Request` for
    /// a request's own form where the two differ).
    pub fn message_schema(&self, name: &str, direction: Direction, defs: &mut BTreeMap<String, Value>) -> Value {
        let key = def_name(name, direction, self);
        if defs.contains_key(&key) {
            return json!({ "$ref": format!("#/components/schemas/{key}") });
        }
        let Some((m, comments)) = self.messages.get(name).cloned() else {
            return json!({});
        };
        // Reserved first: a message may refer to itself.
        defs.insert(key.clone(), Value::Null);
        let mut properties = serde_json::Map::new();
        let mut oneofs: BTreeMap<i32, Vec<String>> = BTreeMap::new();
        for f in &m.field {
            let mut schema = self.field_schema(f, direction, defs);
            let nullable = NULLABLE.contains(&(name, f.name())) && direction == Direction::Answer;
            if nullable {
                schema = json!({ "anyOf": [schema, { "type": "null" }] });
            }
            if let Some(c) = comments.members.get(&f.number()).filter(|c| !c.is_empty()) {
                add_description(&mut schema, c);
            }
            if let Some(o) = f.oneof_index.filter(|_| !f.proto3_optional()) {
                oneofs.entry(o).or_default().push(f.name().to_owned());
            }
            // proto3 JSON's lowerCamelCase name, read as the field.
            let camel = f.json_name().to_owned();
            if direction == Direction::Request && camel != f.name() {
                properties.insert(
                    camel,
                    json!({ "description": format!("`{}` by its proto3 JSON name", f.name()), "allOf": [schema.clone()] }),
                );
            }
            properties.insert(f.name().to_owned(), schema);
        }
        let mut schema = json!({
            "type": "object",
            "properties": properties,
        });
        // Requests: unknown fields are refused, naming the field. Answers:
        // every field is written, and nothing else.
        schema["additionalProperties"] = json!(false);
        if direction == Direction::Answer {
            let in_oneof: Vec<&String> = oneofs.values().flatten().collect();
            let required: Vec<&str> = m
                .field
                .iter()
                .map(|f| f.name())
                .filter(|n| !in_oneof.iter().any(|o| o.as_str() == *n))
                .collect();
            schema["required"] = json!(required);
        }
        if !comments.own.is_empty() {
            schema["description"] = json!(comments.own);
        }
        // A oneof's members: exactly one is present.
        let one_of: Vec<Value> = oneofs
            .values()
            .flat_map(|names| names.iter().map(|n| json!({ "required": [n] })))
            .collect();
        if !one_of.is_empty() {
            schema["oneOf"] = json!(one_of);
        }
        defs.insert(key.clone(), schema);
        json!({ "$ref": format!("#/components/schemas/{key}") })
    }

    fn field_schema(
        &self,
        f: &prost_types::FieldDescriptorProto,
        direction: Direction,
        defs: &mut BTreeMap<String, Value>,
    ) -> Value {
        let request = direction == Direction::Request;
        let single = match f.r#type() {
            Type::String => json!({ "type": "string" }),
            Type::Bool => json!({ "type": "boolean" }),
            Type::Double | Type::Float => json!({ "type": "number" }),
            // proto3 JSON writes 64-bit integers as strings; the door reads
            // every unsigned integer as a number or a decimal string.
            Type::Uint32 | Type::Fixed32 if request => {
                json!({ "type": ["integer", "string"], "format": "int32", "minimum": 0, "pattern": "^[0-9]+$" })
            }
            Type::Int64 | Type::Sint64 | Type::Sfixed64 | Type::Uint64 | Type::Fixed64 if request => {
                json!({ "type": ["integer", "string"], "format": "int64", "minimum": 0, "pattern": "^[0-9]+$" })
            }
            Type::Int32 | Type::Sint32 | Type::Sfixed32 => json!({ "type": "integer", "format": "int32" }),
            Type::Uint32 | Type::Fixed32 => json!({ "type": "integer", "format": "int32", "minimum": 0 }),
            Type::Int64 | Type::Sint64 | Type::Sfixed64 | Type::Uint64 | Type::Fixed64 => {
                json!({ "type": "integer", "format": "int64", "minimum": 0 })
            }
            Type::Enum => self.enum_schema(short(f.type_name()), direction),
            Type::Message => match f.type_name() {
                ".google.protobuf.Timestamp" => json!({ "type": "string", "format": "date-time" }),
                ".google.rpc.Status" => json!({ "$ref": "#/components/schemas/Status" }),
                other => self.message_schema(short(other), direction, defs),
            },
            Type::Bytes | Type::Group => json!({ "type": "string" }),
        };
        let single = if f.proto3_optional() || (f.r#type() == Type::Message && f.label() != Label::Repeated) {
            // Absent is `null` (requests: `null` means the default).
            json!({ "anyOf": [single, { "type": "null" }] })
        } else if request && f.label() != Label::Repeated {
            // proto3 JSON: `null` is the default value.
            json!({ "anyOf": [single, { "type": "null" }] })
        } else {
            single
        };
        if f.label() == Label::Repeated {
            json!({ "type": "array", "items": single })
        } else {
            single
        }
    }

    fn enum_schema(&self, name: &str, direction: Direction) -> Value {
        let words = self.words(name);
        let (own, values) = self.enums.get(name).map_or((String::new(), Vec::new()), |(e, c)| {
            (
                c.own.clone(),
                e.value.iter().map(|v| (v.name().to_owned(), v.number())).collect(),
            )
        });
        let mut schema = match direction {
            Direction::Answer => json!({ "type": "string", "enum": words }),
            Direction::Request => {
                let names: Vec<&str> = values.iter().map(|(n, _)| n.as_str()).collect();
                let numbers: Vec<i32> = values.iter().map(|(_, n)| *n).collect();
                json!({ "oneOf": [
                    { "type": "string", "enum": words, "description": "the word, as decisions spell it" },
                    { "type": "string", "enum": names, "description": "the proto name" },
                    { "type": "integer", "enum": numbers, "description": "the proto number" },
                ] })
            }
        };
        if !own.is_empty() {
            add_description(&mut schema, &own);
        }
        schema
    }
}

/// Whether `name`'s request form differs from its answer form (it, or a
/// message it holds, has an enum or a 64-bit integer): then the request
/// form is its own schema, `<name>Input`.
fn def_name(name: &str, direction: Direction, proto: &Proto) -> String {
    if direction == Direction::Request && !name.ends_with("Request") && differs(name, proto, 0) {
        format!("{name}Input")
    } else {
        name.to_owned()
    }
}

fn differs(name: &str, proto: &Proto, depth: usize) -> bool {
    let Some((m, _)) = proto.messages.get(name) else {
        return false;
    };
    depth < 8
        && m.field.iter().any(|f| match f.r#type() {
            Type::Enum | Type::Int64 | Type::Uint64 | Type::Sint64 | Type::Fixed64 | Type::Sfixed64 => true,
            Type::Message => differs(short(f.type_name()), proto, depth + 1),
            _ => false,
        })
}

fn short(type_name: &str) -> &str {
    type_name.rsplit('.').next().unwrap_or(type_name)
}

/// `HoldEventKind` → `HOLD_EVENT_KIND`.
fn screaming(name: &str) -> String {
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

/// A comment as one paragraph of text.
fn clean(comment: &str) -> String {
    comment.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn add_description(schema: &mut Value, text: &str) {
    if schema.get("$ref").is_some() {
        // A $ref's siblings are allowed in 3.1: the field's own words.
        schema["description"] = json!(text);
    } else if let Some(obj) = schema.as_object_mut() {
        obj.insert("description".to_owned(), json!(text));
    }
}
