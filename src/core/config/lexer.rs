//! A small lexer for the protobuf text format, used for what the text-format
//! library does not give us: the colon-less list pre-pass, nesting depth, and
//! the field-path → line:column source map.
//!
//! It only needs to be right about token *boundaries* (comments, strings,
//! identifiers, punctuation); values are interpreted by `prost-reflect`.

/// One token of the text format, as a byte range of the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Token {
    pub kind: TokenKind,
    pub start: usize,
    pub end: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TokenKind {
    Ident,
    Number,
    String,
    /// A single punctuation byte: `{ } [ ] < > : , ; - / .` and anything else.
    Punct(u8),
}

/// Splits `text` into tokens, skipping white space and `#` comments.
///
/// Never fails: an unterminated string runs to the end of its line, and a byte
/// the format does not know becomes a `Punct` token (the real parser reports
/// it with a position).
pub(crate) fn tokenize(text: &str) -> Vec<Token> {
    let bytes = text.as_bytes();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let start = i;
        let kind = match b {
            b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c => {
                i += 1;
                continue;
            }
            b'#' => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            b'"' | b'\'' => {
                i += 1;
                while i < bytes.len() && bytes[i] != b && bytes[i] != b'\n' {
                    if bytes[i] == b'\\' {
                        i += 1;
                    }
                    i += 1;
                }
                i = (i + 1).min(bytes.len());
                TokenKind::String
            }
            b'a'..=b'z' | b'A'..=b'Z' | b'_' => {
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                    i += 1;
                }
                TokenKind::Ident
            }
            b'0'..=b'9' => {
                i = number_end(bytes, i);
                TokenKind::Number
            }
            b'.' if i + 1 < bytes.len() && bytes[i + 1].is_ascii_digit() => {
                i = number_end(bytes, i + 1);
                TokenKind::Number
            }
            _ => {
                // Step over a whole UTF-8 character so ranges stay on boundaries.
                i += 1;
                while i < bytes.len() && (bytes[i] & 0xC0) == 0x80 {
                    i += 1;
                }
                TokenKind::Punct(b)
            }
        };
        tokens.push(Token {
            kind,
            start,
            end: i,
        });
    }
    tokens
}

/// The end of the number whose digits start at `i` (`1.5e-3f`, `.5E+2`,
/// `0x1F`): letters, digits, dots, `_`, and the sign of an exponent.
fn number_end(bytes: &[u8], mut i: usize) -> usize {
    while i < bytes.len()
        && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'.' || bytes[i] == b'_')
    {
        // exponent sign: 1e-5
        if (bytes[i] == b'e' || bytes[i] == b'E')
            && i + 1 < bytes.len()
            && (bytes[i + 1] == b'-' || bytes[i + 1] == b'+')
        {
            i += 1;
        }
        i += 1;
    }
    i
}

/// Maps byte offsets to 1-based line and column (columns count characters).
pub(crate) struct LineIndex<'a> {
    text: &'a str,
    line_starts: Vec<usize>,
}

impl<'a> LineIndex<'a> {
    pub(crate) fn new(text: &'a str) -> Self {
        let mut line_starts = vec![0];
        line_starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        LineIndex { text, line_starts }
    }

    /// The 1-based (line, column) of byte `offset` (clamped to the text).
    pub(crate) fn position(&self, offset: usize) -> (u32, u32) {
        let offset = offset.min(self.text.len());
        let line = self.line_starts.partition_point(|&s| s <= offset) - 1;
        let start = self.line_starts[line];
        let mut end = offset;
        while !self.text.is_char_boundary(end) {
            end -= 1;
        }
        let col = self.text[start..end].chars().count() + 1;
        (line as u32 + 1, col as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(text: &str) -> Vec<(TokenKind, &str)> {
        tokenize(text)
            .into_iter()
            .map(|t| (t.kind, &text[t.start..t.end]))
            .collect()
    }

    #[test]
    fn tokens_skip_comments_and_keep_strings_whole() {
        let k = kinds("name: \"a # b\" # comment\ndims: [ -1, 1.5e-3 ]");
        assert_eq!(
            k,
            vec![
                (TokenKind::Ident, "name"),
                (TokenKind::Punct(b':'), ":"),
                (TokenKind::String, "\"a # b\""),
                (TokenKind::Ident, "dims"),
                (TokenKind::Punct(b':'), ":"),
                (TokenKind::Punct(b'['), "["),
                (TokenKind::Punct(b'-'), "-"),
                (TokenKind::Number, "1"),
                (TokenKind::Punct(b','), ","),
                (TokenKind::Number, "1.5e-3"),
                (TokenKind::Punct(b']'), "]"),
            ]
        );
    }

    #[test]
    fn escaped_quote_does_not_end_a_string() {
        let k = kinds(r#"a: "x\"y" b"#);
        assert_eq!(k[2], (TokenKind::String, r#""x\"y""#));
        assert_eq!(k[3], (TokenKind::Ident, "b"));
    }

    #[test]
    fn positions_count_characters() {
        let text = "ab\néé: 1";
        let idx = LineIndex::new(text);
        assert_eq!(idx.position(0), (1, 1));
        assert_eq!(idx.position(3), (2, 1));
        assert_eq!(idx.position(text.find(':').unwrap()), (2, 3));
        assert_eq!(idx.position(10_000), (2, 6));
    }
}
