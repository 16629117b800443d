//! Universal Binary JSON (ubjson.org, draft 12), as XGBoost writes its
//! `.ubj` models, read into a `serde_json::Value` so one reader serves
//! both forms. Hand-written: the format is a dozen one-byte markers, and
//! the crates on crates.io are early (serde_ubj: "not production ready"),
//! a single 2022 release (serde_ub_json) or serialize only (serde_ubjson),
//! while XGBoost writes every array as an optimized (typed, counted)
//! container that the reader must get right. Numbers are big-endian; nesting and
//! counts are bounded so a hostile file cannot exhaust the stack or memory.

use serde_json::{Map, Number, Value};

/// Containers deeper than this are refused.
const MAX_DEPTH: usize = 64;

/// Parses one UBJSON value that fills `bytes`.
pub fn parse(bytes: &[u8]) -> Result<Value, String> {
    let mut r = Reader { bytes, at: 0 };
    let v = r.value(None, 0)?;
    if r.at != bytes.len() {
        return Err(format!("{} bytes after the document", bytes.len() - r.at));
    }
    Ok(v)
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or_else(|| format!("the file ends at byte {} inside a value", self.bytes.len()))?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn byte(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    fn int(&mut self, marker: u8) -> Result<i64, String> {
        Ok(match marker {
            b'i' => i64::from(self.take(1)?[0] as i8),
            b'U' => i64::from(self.take(1)?[0]),
            b'I' => i64::from(i16::from_be_bytes(self.take(2)?.try_into().unwrap())),
            b'l' => i64::from(i32::from_be_bytes(self.take(4)?.try_into().unwrap())),
            b'L' => i64::from_be_bytes(self.take(8)?.try_into().unwrap()),
            m => return Err(format!("expected an integer, found marker '{}'", m as char)),
        })
    }

    /// A count or length: an integer, at most what is left of the file
    /// (each element takes a byte at least, except no-ops and nulls).
    fn count(&mut self) -> Result<usize, String> {
        let marker = self.byte()?;
        let n = self.int(marker)?;
        usize::try_from(n)
            .ok()
            .filter(|&n| n <= self.bytes.len() - self.at)
            .ok_or_else(|| format!("a count of {n} past the end of the file"))
    }

    fn value(&mut self, marker: Option<u8>, depth: usize) -> Result<Value, String> {
        let marker = match marker {
            Some(m) => m,
            None => loop {
                let m = self.byte()?;
                if m != b'N' {
                    break m;
                }
            },
        };
        Ok(match marker {
            b'Z' => Value::Null,
            b'T' => Value::Bool(true),
            b'F' => Value::Bool(false),
            b'i' | b'U' | b'I' | b'l' | b'L' => Value::Number(self.int(marker)?.into()),
            b'd' => float(f64::from(f32::from_be_bytes(
                self.take(4)?.try_into().unwrap(),
            ))),
            b'D' => float(f64::from_be_bytes(self.take(8)?.try_into().unwrap())),
            b'C' => Value::String((self.byte()? as char).to_string()),
            b'S' | b'H' => {
                let n = self.count()?;
                let text =
                    std::str::from_utf8(self.take(n)?).map_err(|_| "a string is not UTF-8")?;
                if marker == b'H' {
                    text.parse::<Number>()
                        .map(Value::Number)
                        .map_err(|_| "a bad high-precision number")?
                } else {
                    Value::String(text.to_string())
                }
            }
            b'[' | b'{' => {
                if depth >= MAX_DEPTH {
                    return Err(format!("containers nested deeper than {MAX_DEPTH}"));
                }
                self.container(marker == b'{', depth + 1)?
            }
            m => {
                return Err(format!(
                    "unknown marker '{}' at byte {}",
                    m.escape_ascii(),
                    self.at - 1
                ))
            }
        })
    }

    fn container(&mut self, object: bool, depth: usize) -> Result<Value, String> {
        // Optimized form: `$` type, then `#` count (a type needs a count).
        let mut typed = None;
        let mut count = None;
        if self.bytes.get(self.at) == Some(&b'$') {
            self.at += 1;
            typed = Some(self.byte()?);
            if self.byte()? != b'#' {
                return Err("a typed container without a count".into());
            }
            count = Some(self.count()?);
        } else if self.bytes.get(self.at) == Some(&b'#') {
            self.at += 1;
            count = Some(self.count()?);
        }
        let close = if object { b'}' } else { b']' };
        let mut items = Vec::new();
        let mut map = Map::new();
        let mut i = 0;
        loop {
            match count {
                Some(n) if i == n => break,
                None if self.bytes.get(self.at) == Some(&close) => {
                    self.at += 1;
                    break;
                }
                _ => {}
            }
            if object {
                let n = self.count()?;
                let key = std::str::from_utf8(self.take(n)?)
                    .map_err(|_| "a key is not UTF-8")?
                    .to_string();
                map.insert(key, self.value(typed, depth)?);
            } else {
                items.push(self.value(typed, depth)?);
            }
            i += 1;
        }
        Ok(if object {
            Value::Object(map)
        } else {
            Value::Array(items)
        })
    }
}

fn float(x: f64) -> Value {
    Number::from_f64(x).map_or(Value::Null, Value::Number)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_and_optimized_containers() {
        // {"a": [1, 2.5f32], "b": typed int8 array [3, 4], "s": "x"}
        let mut doc = b"{\x55\x01a[\x69\x01\x64".to_vec();
        doc.extend(2.5f32.to_be_bytes());
        doc.extend(b"]\x55\x01b[$i#\x55\x02\x03\x04\x55\x01sS\x55\x01x}");
        let v = parse(&doc).unwrap();
        assert_eq!(v, serde_json::json!({"a": [1, 2.5], "b": [3, 4], "s": "x"}));
    }

    #[test]
    fn hostile_files_are_refused() {
        assert!(parse(b"[").is_err());
        assert!(parse(b"[$d#L\x7f\xff\xff\xff\xff\xff\xff\xff").is_err());
        assert!(parse(&[b'['; 200]).unwrap_err().contains("nested"));
        assert!(parse(b"S\x55\x05ab").is_err());
        assert!(parse(b"Zx").is_err());
    }
}
