//! The config text as mcrouter reads it: JSON plus `//` and `/* */` comments and trailing
//! commas. Both are blanked out byte for byte, so every offset, line and column in the
//! cleaned text is the same as in the file, and errors point into the file the user wrote.

use crate::error::{ConfigError, Path, Seg};

/// A config file's cleaned text and the name to report it under.
#[derive(Debug)]
pub struct Source {
    /// The name errors report the file under.
    pub name: String,
    /// The text with comments and trailing commas blanked, so positions stay those of the file.
    pub text: String,
}

impl Source {
    /// Blanks comments and trailing commas. Only an unterminated `/*` is an error here.
    pub fn new(name: &str, text: &str) -> Result<Source, ConfigError> {
        let mut out = text.as_bytes().to_vec();
        let bytes = text.as_bytes();
        let mut i = 0;
        // Position of the last comma seen outside strings and comments, if nothing but
        // whitespace or comments followed it so far.
        let mut pending_comma: Option<usize> = None;
        while i < bytes.len() {
            match bytes[i] {
                b'"' => {
                    pending_comma = None;
                    i += 1;
                    while i < bytes.len() && bytes[i] != b'"' {
                        i += if bytes[i] == b'\\' { 2 } else { 1 };
                    }
                    i += 1;
                }
                b'/' if bytes.get(i + 1) == Some(&b'/') => {
                    while i < bytes.len() && bytes[i] != b'\n' {
                        out[i] = b' ';
                        i += 1;
                    }
                }
                b'/' if bytes.get(i + 1) == Some(&b'*') => {
                    let start = i;
                    i += 2;
                    while i < bytes.len() && !(bytes[i] == b'*' && bytes.get(i + 1) == Some(&b'/'))
                    {
                        i += 1;
                    }
                    if i >= bytes.len() {
                        let (line, column) = line_col(text, start);
                        return Err(ConfigError::at(
                            name,
                            line,
                            column,
                            "unterminated /* comment",
                        ));
                    }
                    i += 2;
                    for b in &mut out[start..i] {
                        // Newlines stay so that line numbers after the comment hold.
                        if *b != b'\n' {
                            *b = b' ';
                        }
                    }
                }
                b',' => {
                    pending_comma = Some(i);
                    i += 1;
                }
                b'}' | b']' => {
                    if let Some(comma) = pending_comma.take() {
                        out[comma] = b' ';
                    }
                    i += 1;
                }
                b if b.is_ascii_whitespace() => i += 1,
                _ => {
                    pending_comma = None;
                    i += 1;
                }
            }
        }
        // Only ASCII bytes were replaced by ASCII spaces, so the text is still UTF-8.
        let text = String::from_utf8(out).expect("blanking keeps UTF-8");
        Ok(Source {
            name: name.to_owned(),
            text,
        })
    }

    /// Parses the cleaned text; a syntax error names the file, line, column and the key
    /// it occurred under.
    pub fn parse(&self) -> Result<serde_json::Value, ConfigError> {
        serde_json::from_str(&self.text).map_err(|e| {
            let offset = offset_of(&self.text, e.line(), e.column());
            let mut err = ConfigError::at(&self.name, e.line(), e.column(), &syntax_message(&e));
            err.path = path_at(&self.text, offset);
            err
        })
    }

    /// The line and column where the value at `path` starts.
    pub fn locate(&self, path: &Path) -> Option<(usize, usize)> {
        let mut found = None;
        walk(&self.text, |at, current| {
            if found.is_none() && current == path.0.as_slice() {
                found = Some(line_col(&self.text, at));
            }
            found.is_none()
        });
        found
    }
}

fn syntax_message(e: &serde_json::Error) -> String {
    // serde_json appends " at line L column C"; the location is reported separately.
    let full = e.to_string();
    match full.rfind(" at line ") {
        Some(cut) => full[..cut].to_owned(),
        None => full,
    }
}

/// 1-based line and column of byte `offset`.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text.as_bytes()[..offset.min(text.len())];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let column = offset
        - before
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |p| p + 1)
        + 1;
    (line, column)
}

fn offset_of(text: &str, line: usize, column: usize) -> usize {
    let mut start = 0;
    for _ in 1..line {
        match text[start..].find('\n') {
            Some(n) => start += n + 1,
            None => break,
        }
    }
    (start + column.saturating_sub(1)).min(text.len())
}

/// The path of the innermost value open at `offset` (for syntax errors).
fn path_at(text: &str, offset: usize) -> Path {
    let mut end = offset.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut last = Path::default();
    walk(&text[..end], |_, current| {
        last = Path(current.to_vec());
        true
    });
    last
}

enum Frame {
    Object { key: Option<String> },
    Array { index: usize },
}

/// Calls `visit(offset, path)` at the start of every value, in document order, for as long
/// as it returns true. Tolerates malformed or truncated text (it only tokenizes).
fn walk(text: &str, mut visit: impl FnMut(usize, &[Seg]) -> bool) {
    let bytes = text.as_bytes();
    let mut stack: Vec<Frame> = Vec::new();
    let mut path: Vec<Seg> = Vec::new();
    let mut expect_key = false;
    let mut i = 0;
    // Sets `path` to the path of the value about to start.
    fn value_path(stack: &[Frame], path: &mut Vec<Seg>) {
        path.clear();
        for frame in stack {
            match frame {
                Frame::Object { key } => path.push(Seg::Key(key.clone().unwrap_or_default())),
                Frame::Array { index } => path.push(Seg::Index(*index)),
            }
        }
    }
    while i < bytes.len() {
        let b = bytes[i];
        if b.is_ascii_whitespace() || b == b':' {
            i += 1;
            continue;
        }
        if b == b',' {
            match stack.last_mut() {
                Some(Frame::Array { index }) => *index += 1,
                Some(Frame::Object { .. }) => expect_key = true,
                None => {}
            }
            i += 1;
            continue;
        }
        if b == b'}' || b == b']' {
            stack.pop();
            expect_key = false;
            i += 1;
            continue;
        }
        if b == b'"' {
            let start = i;
            i += 1;
            while i < bytes.len() && bytes[i] != b'"' {
                i += if bytes[i] == b'\\' { 2 } else { 1 };
            }
            i = (i + 1).min(bytes.len());
            if expect_key {
                let raw = &text[start..i];
                let key = serde_json::from_str::<String>(raw)
                    .unwrap_or_else(|_| raw.trim_matches('"').to_owned());
                if let Some(Frame::Object { key: k }) = stack.last_mut() {
                    *k = Some(key);
                }
                expect_key = false;
                continue;
            }
            value_path(&stack, &mut path);
            if !visit(start, &path) {
                return;
            }
            continue;
        }
        // A value: object, array or scalar.
        value_path(&stack, &mut path);
        if !visit(i, &path) {
            return;
        }
        match b {
            b'{' => {
                stack.push(Frame::Object { key: None });
                expect_key = true;
                i += 1;
            }
            b'[' => {
                stack.push(Frame::Array { index: 0 });
                i += 1;
            }
            _ => {
                while i < bytes.len()
                    && !matches!(bytes[i], b',' | b'}' | b']' | b':')
                    && !bytes[i].is_ascii_whitespace()
                {
                    i += 1;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clean(text: &str) -> String {
        Source::new("t.json", text).expect("clean").text
    }

    #[test]
    fn comments_and_trailing_commas_are_blanked_in_place() {
        let text = "{\n  // note\n  \"a\": [1, 2,], /* x\n y */ \"b\": \"//not/*a comment\",\n}";
        let cleaned = clean(text);
        assert_eq!(cleaned.len(), text.len());
        assert_eq!(cleaned.lines().count(), text.lines().count());
        let v: serde_json::Value = serde_json::from_str(&cleaned).expect("valid");
        assert_eq!(v["a"], serde_json::json!([1, 2]));
        assert_eq!(v["b"], "//not/*a comment");
    }

    #[test]
    fn escaped_quotes_do_not_end_strings() {
        let v: serde_json::Value =
            serde_json::from_str(&clean(r#"{"a": "x\" // y", "b": 1}"#)).expect("valid");
        assert_eq!(v["a"], "x\" // y");
    }

    #[test]
    fn unterminated_block_comment_is_located() {
        let err = Source::new("c.json", "{\n  /* open\n}").expect_err("error");
        assert_eq!((err.line, err.column), (2, 3));
        assert!(err.to_string().starts_with("c.json:2:3:"), "{err}");
    }

    #[test]
    fn syntax_error_names_line_and_key() {
        let text = "{\n \"pools\": {\n  \"A\": {\"servers\": [\"h:1\" \"h:2\"]}\n }\n}";
        let err = Source::new("p.json", text)
            .unwrap()
            .parse()
            .expect_err("error");
        assert_eq!(err.line, 3);
        assert_eq!(err.path.to_string(), "pools.A.servers[0]");
        assert!(err.to_string().contains("p.json:3:"), "{err}");
    }

    /// Found by fuzzing: a syntax error inside a multi-byte character.
    #[test]
    fn syntax_error_inside_a_multibyte_character() {
        let text = "{\"route\": {\"typels\u{fffd}\u{fffd}";
        let src = Source::new("m.json", text).unwrap();
        let err = src.parse().expect_err("error");
        assert_eq!(err.line, 1);
    }

    #[test]
    fn locate_finds_nested_values() {
        let src = Source::new("l.json", "{\"a\": {\"b\": [0,\n {\"c\": 1}]}}").unwrap();
        let path = Path(vec![
            Seg::Key("a".into()),
            Seg::Key("b".into()),
            Seg::Index(1),
            Seg::Key("c".into()),
        ]);
        assert_eq!(src.locate(&path), Some((2, 8)));
        assert_eq!(src.locate(&Path(vec![Seg::Key("zz".into())])), None);
    }
}
