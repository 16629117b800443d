//! `config.pbtxt` → [`ModelConfig`], with positions.
//!
//! Parsing is done by `prost-reflect`'s text-format parser against the
//! descriptors of `proto/model_config.proto`. Around it:
//! - a size, UTF-8 and nesting-depth guard, so hostile input gets one clear
//!   error and never a stack overflow;
//! - a pre-pass that accepts the colon-less list form `input [ { ... } ]`,
//!   which Triton's C++ parser accepts and nearly every Triton config uses,
//!   but prost-reflect 0.16 rejects (it inserts the optional `:`, and maps
//!   error offsets back to the original text);
//! - "did you mean" suggestions for unknown fields and enum values;
//! - a [`SourceMap`] from field paths (`dynamic_batching.preferred_batch_size[1]`)
//!   to line and column, so validation findings can point into the file.

use std::collections::BTreeMap;

use prost_reflect::{DynamicMessage, Kind, MessageDescriptor};

use super::lexer::{tokenize, LineIndex, Token, TokenKind};
use super::pb::ModelConfig;

/// Larger config files are refused before parsing. Real ones are a few KiB;
/// Triton has no limit, but a 4 MiB `config.pbtxt` is a mistake, not a model.
pub const MAX_CONFIG_BYTES: usize = 4 << 20;

/// Deeper nesting is refused before parsing (the schema's deepest legal
/// nesting is 7 levels).
pub const MAX_NESTING: usize = 64;

/// A config that parsed, with where each field was written.
#[derive(Debug, Clone)]
pub struct ParsedConfig {
    pub config: ModelConfig,
    pub source_map: SourceMap,
}

/// Why a config did not parse, with its 1-based position in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    pub line: u32,
    pub col: u32,
    pub message: String,
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}: {}", self.line, self.col, self.message)
    }
}

/// Field path → (line, column) of where that field (or list element) starts.
///
/// Paths use the proto field names: `input[0].dims[1]`, `dynamic_batching`,
/// map entries by key: `parameters["threads"]`, `priority_queue_policy[2]`.
#[derive(Debug, Clone, Default)]
pub struct SourceMap {
    positions: BTreeMap<String, (u32, u32)>,
}

impl SourceMap {
    /// The position of `path`, or of its closest enclosing field that was
    /// written in the file, or 1:1 when none was (a missing field).
    pub fn locate(&self, path: &str) -> (u32, u32) {
        let mut p = path;
        loop {
            if let Some(&pos) = self.positions.get(p) {
                return pos;
            }
            match parent_path(p) {
                Some(parent) => p = parent,
                None => return (1, 1),
            }
        }
    }

    /// Whether `path` itself was written in the file.
    pub fn contains(&self, path: &str) -> bool {
        self.positions.contains_key(path)
    }

    fn insert(&mut self, path: String, pos: (u32, u32)) {
        self.positions.entry(path).or_insert(pos);
    }
}

/// `a.b[2]` → `a.b`, `a.b` → `a`, `a` → None.
fn parent_path(path: &str) -> Option<&str> {
    if path.ends_with(']') {
        // Keys may contain '.', so find the '[' that opens the last index.
        let open = if let Some(key_start) = path.strip_suffix("\"]") {
            key_start.rfind("[\"")?
        } else {
            path.rfind('[')?
        };
        return Some(&path[..open]);
    }
    path.rfind('.').map(|dot| &path[..dot])
}

/// Parses the bytes of a `config.pbtxt`.
pub fn parse_config(bytes: &[u8]) -> Result<ParsedConfig, ParseError> {
    if bytes.len() > MAX_CONFIG_BYTES {
        return Err(ParseError {
            line: 1,
            col: 1,
            message: format!(
                "file is {} bytes; a model configuration may be at most {} bytes",
                bytes.len(),
                MAX_CONFIG_BYTES
            ),
        });
    }
    let text = std::str::from_utf8(bytes).map_err(|e| {
        let valid = e.valid_up_to();
        // Safe: the prefix up to `valid_up_to` is valid UTF-8.
        let prefix = std::str::from_utf8(&bytes[..valid]).unwrap_or("");
        let (line, col) = LineIndex::new(prefix).position(valid);
        ParseError {
            line,
            col,
            message: format!("invalid UTF-8 (byte 0x{:02x})", bytes[valid]),
        }
    })?;
    let index = LineIndex::new(text);
    let at = |offset: usize, message: String| {
        let (line, col) = index.position(offset);
        ParseError { line, col, message }
    };
    if let Some(nul) = text.find('\0') {
        return Err(at(nul, "unexpected NUL byte".to_string()));
    }
    let tokens = tokenize(text);
    check_nesting(&tokens).map_err(|offset| {
        at(
            offset,
            format!("nesting is deeper than {MAX_NESTING} levels"),
        )
    })?;

    let (patched, inserted) = insert_list_colons(text, &tokens);
    let desc = model_config_descriptor();
    let message = DynamicMessage::parse_text_format(desc.clone(), &patched).map_err(|err| {
        let offset = miette::Diagnostic::labels(&err)
            .and_then(|mut labels| labels.next())
            .map(|label| original_offset(label.offset(), &inserted))
            .unwrap_or(text.len());
        let message = err.to_string();
        // A repeated scalar is labelled at its value; point at its name.
        let offset = if message.ends_with("' is already set") {
            field_name_before(&tokens, offset).unwrap_or(offset)
        } else {
            offset
        };
        at(offset, explain(&message))
    })?;
    let config: ModelConfig = message.transcode_to().map_err(|e| at(0, e.to_string()))?;

    let mut walker = Walker {
        text,
        tokens: &tokens,
        pos: 0,
        index: &index,
        map: SourceMap::default(),
    };
    walker.message(&desc, "", None);
    Ok(ParsedConfig {
        config,
        source_map: walker.map,
    })
}

/// The descriptor of `inference.ModelConfig` from the compiled-in pool.
pub fn model_config_descriptor() -> MessageDescriptor {
    super::descriptor_pool()
        .get_message_by_name("inference.ModelConfig")
        .expect("inference.ModelConfig is in the compiled descriptor set")
}

/// The start of the field name written just before the value at `offset`.
fn field_name_before(tokens: &[Token], offset: usize) -> Option<usize> {
    let i = tokens.partition_point(|t| t.start < offset);
    let mut before = tokens[..i].iter().rev();
    let mut t = before.next()?;
    if t.kind == TokenKind::Punct(b':') {
        t = before.next()?;
    }
    (t.kind == TokenKind::Ident).then_some(t.start)
}

/// Err(offset) of the first bracket that opens a level deeper than allowed.
fn check_nesting(tokens: &[Token]) -> Result<(), usize> {
    let mut depth = 0usize;
    for t in tokens {
        match t.kind {
            TokenKind::Punct(b'{' | b'[' | b'<') => {
                depth += 1;
                if depth > MAX_NESTING {
                    return Err(t.start);
                }
            }
            TokenKind::Punct(b'}' | b']' | b'>') => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

/// Inserts `:` between a field name and a `[` that opens its list, where the
/// text omits it. Returns the new text and the original offsets at which a
/// byte was inserted (ascending).
fn insert_list_colons(text: &str, tokens: &[Token]) -> (String, Vec<usize>) {
    let mut inserted = Vec::new();
    for (i, pair) in tokens.windows(2).enumerate() {
        let (name, next) = (pair[0], pair[1]);
        let after_colon = i > 0 && tokens[i - 1].kind == TokenKind::Punct(b':');
        if name.kind == TokenKind::Ident && next.kind == TokenKind::Punct(b'[') && !after_colon {
            inserted.push(name.end);
        }
    }
    if inserted.is_empty() {
        return (text.to_string(), inserted);
    }
    let mut out = String::with_capacity(text.len() + inserted.len());
    let mut last = 0;
    for &at in &inserted {
        out.push_str(&text[last..at]);
        out.push(':');
        last = at;
    }
    out.push_str(&text[last..]);
    (out, inserted)
}

/// Maps an offset in the patched text back to the original text.
fn original_offset(patched: usize, inserted: &[usize]) -> usize {
    // Insertion k sits at patched offset inserted[k] + k.
    let before = inserted
        .iter()
        .enumerate()
        .take_while(|(k, &at)| at + k < patched)
        .count();
    patched - before
}

/// Rewrites prost-reflect's message for the two lookups where a hint helps.
fn explain(message: &str) -> String {
    // "field 'max_batch' not found for message 'inference.ModelConfig'"
    if let Some((field, msg)) = two_quoted(message, "field '", "' not found for message '") {
        let hint = super::descriptor_pool()
            .get_message_by_name(msg)
            .and_then(|d| {
                let names: Vec<String> = d.fields().map(|f| f.name().to_string()).collect();
                closest(field, &names)
            });
        return with_hint(format!("unknown field '{field}' in {msg}"), hint);
    }
    // "value 'TYPE_FP33' was not found for enum 'inference.DataType'"
    if let Some((value, en)) = two_quoted(message, "value '", "' was not found for enum '") {
        let alias = data_type_alias(value).filter(|_| en == "inference.DataType");
        let hint = alias.map(str::to_string).or_else(|| {
            let d = super::descriptor_pool().get_enum_by_name(en)?;
            let names: Vec<String> = d.values().map(|v| v.name().to_string()).collect();
            closest(value, &names)
        });
        return with_hint(format!("unknown value '{value}' for enum {en}"), hint);
    }
    if let Some(rest) = message.strip_suffix("' is already set") {
        if let Some(field) = rest.strip_prefix('\'') {
            return format!("field '{field}' is set more than once");
        }
    }
    message.to_string()
}

/// Data type spellings borrowed from other frameworks or from the wire
/// protocol (`BYTES`), and the config name they mean.
fn data_type_alias(value: &str) -> Option<&'static str> {
    Some(match value.strip_prefix("TYPE_").unwrap_or(value) {
        "BYTES" | "STR" => "TYPE_STRING",
        "FLOAT" | "FLOAT32" | "F32" => "TYPE_FP32",
        "HALF" | "FLOAT16" | "F16" => "TYPE_FP16",
        "DOUBLE" | "FLOAT64" | "F64" => "TYPE_FP64",
        "BFLOAT16" => "TYPE_BF16",
        "INT" => "TYPE_INT32",
        "LONG" => "TYPE_INT64",
        "BOOLEAN" => "TYPE_BOOL",
        _ => return None,
    })
}

fn with_hint(message: String, hint: Option<String>) -> String {
    match hint {
        Some(h) => format!("{message}; did you mean '{h}'?"),
        None => message,
    }
}

/// Splits `<a>X<b>Y'` into (X, Y).
fn two_quoted<'m>(message: &'m str, a: &str, b: &str) -> Option<(&'m str, &'m str)> {
    let rest = message.strip_prefix(a)?;
    let (x, rest) = rest.split_once(b)?;
    let y = rest.strip_suffix('\'')?;
    Some((x, y))
}

/// The candidate closest to `word` by edit distance, if it is close enough to
/// be a plausible typo.
pub fn closest(word: &str, candidates: &[String]) -> Option<String> {
    let lower = word.to_ascii_lowercase();
    candidates
        .iter()
        .map(|c| (c, c.to_ascii_lowercase()))
        .map(|(c, cl)| {
            let close = edit_distance(&lower, &cl) <= (cl.len().max(word.len()) / 3).max(2);
            // A truncated name (`max_batch`) is a plausible slip too.
            let prefix = lower.len() >= 4 && (cl.starts_with(&lower) || lower.starts_with(&cl));
            (edit_distance(&lower, &cl), close || prefix, c)
        })
        .filter(|(_, plausible, _)| *plausible)
        .min_by_key(|(d, _, _)| *d)
        .map(|(_, _, c)| c.clone())
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = if ca == cb {
                prev
            } else {
                1 + prev.min(cur).min(row[j])
            };
            prev = cur;
        }
    }
    row[b.len()]
}

/// Walks the tokens of a config that already parsed and records where each
/// field path is written.
struct Walker<'t> {
    text: &'t str,
    tokens: &'t [Token],
    pos: usize,
    index: &'t LineIndex<'t>,
    map: SourceMap,
}

impl Walker<'_> {
    fn peek(&self) -> Option<Token> {
        self.tokens.get(self.pos).copied()
    }

    fn peek_is(&self, b: u8) -> bool {
        matches!(self.peek(), Some(t) if t.kind == TokenKind::Punct(b))
    }

    fn record(&mut self, path: String, offset: usize) {
        let pos = self.index.position(offset);
        self.map.insert(path, pos);
    }

    /// Walks the fields of one message up to `closing` (or the end); returns
    /// the text of its `key` field, for map entries.
    fn message(
        &mut self,
        desc: &MessageDescriptor,
        prefix: &str,
        closing: Option<u8>,
    ) -> Option<String> {
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        let mut key = None;
        while let Some(tok) = self.peek() {
            match tok.kind {
                TokenKind::Punct(b) if Some(b) == closing => {
                    self.pos += 1;
                    return key;
                }
                TokenKind::Ident => {
                    let name = &self.text[tok.start..tok.end];
                    self.pos += 1;
                    let Some(field) = desc.get_field_by_name(name) else {
                        return key;
                    };
                    let base = if prefix.is_empty() {
                        name.to_string()
                    } else {
                        format!("{prefix}.{name}")
                    };
                    self.record(base.clone(), tok.start);
                    if self.peek_is(b':') {
                        self.pos += 1;
                    }
                    let repeated = field.is_list() || field.is_map();
                    if self.peek_is(b'[') {
                        self.pos += 1;
                        while let Some(t) = self.peek() {
                            match t.kind {
                                TokenKind::Punct(b']') => {
                                    self.pos += 1;
                                    break;
                                }
                                TokenKind::Punct(b',') => self.pos += 1,
                                _ => {
                                    self.element(&field, &base, &mut counts, name);
                                }
                            }
                        }
                    } else if repeated {
                        self.element(&field, &base, &mut counts, name);
                    } else {
                        let value = self.value(&field, &base);
                        if name == "key" && desc.is_map_entry() {
                            key = value;
                        }
                    }
                }
                _ => self.pos += 1,
            }
        }
        key
    }

    /// One element of a repeated or map field.
    fn element(
        &mut self,
        field: &prost_reflect::FieldDescriptor,
        base: &str,
        counts: &mut BTreeMap<String, usize>,
        name: &str,
    ) {
        let n = counts.entry(name.to_string()).or_default();
        let idx = *n;
        *n += 1;
        if !field.is_map() {
            self.value(field, &format!("{base}[{idx}]"));
            return;
        }
        // Map entries are addressed by key, which is only known once the
        // entry is walked: walk it under a temporary name, then rename.
        let start = self.peek().map(|t| t.start).unwrap_or(0);
        let temp = format!("{base}[#{idx}]");
        let key = self.value(field, &temp);
        let moved: Vec<(String, (u32, u32))> = self
            .map
            .positions
            .range(temp.clone()..)
            .take_while(|(k, _)| k.starts_with(&temp))
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        for (k, _) in &moved {
            self.map.positions.remove(k);
        }
        if let Some(key) = key {
            let is_string = field
                .kind()
                .as_message()
                .and_then(|m| m.get_field_by_name("key"))
                .is_some_and(|k| k.kind() == Kind::String);
            let named = if is_string {
                format!("{base}[{key:?}]")
            } else {
                format!("{base}[{key}]")
            };
            self.record(named.clone(), start);
            for (k, v) in moved {
                self.map.insert(k.replacen(&temp, &named, 1), v);
            }
        }
    }

    /// One value: a nested message or a scalar. Returns the scalar's text
    /// (strings unquoted) so map keys can be named.
    fn value(&mut self, field: &prost_reflect::FieldDescriptor, path: &str) -> Option<String> {
        let tok = self.peek()?;
        self.record(path.to_string(), tok.start);
        match tok.kind {
            TokenKind::Punct(open @ (b'{' | b'<')) => {
                self.pos += 1;
                let close = if open == b'{' { b'}' } else { b'>' };
                match field.kind() {
                    Kind::Message(m) => self.message(&m, path, Some(close)),
                    _ => None,
                }
            }
            TokenKind::Punct(b'-') => {
                self.pos += 1;
                let t = self.peek()?;
                self.pos += 1;
                Some(format!("-{}", &self.text[t.start..t.end]))
            }
            TokenKind::String => {
                let mut s = String::new();
                while let Some(t) = self.peek().filter(|t| t.kind == TokenKind::String) {
                    let raw = &self.text[t.start..t.end];
                    s.push_str(raw.get(1..raw.len().saturating_sub(1)).unwrap_or(""));
                    self.pos += 1;
                }
                Some(s)
            }
            _ => {
                self.pos += 1;
                Some(self.text[tok.start..tok.end].to_string())
            }
        }
    }
}
