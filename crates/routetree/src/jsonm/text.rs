//! The text forms inside JSONM strings: `@name(arg, arg)` calls and `%param%` references,
//! with `\` escaping the next character. Works on bytes: every delimiter is ASCII, so every
//! cut lands on a character boundary.

/// Position of the first `c` not escaped by `\`.
pub(super) fn find_unescaped(s: &[u8], c: u8) -> Option<usize> {
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'\\' {
            i += 2;
            continue;
        }
        if s[i] == c {
            return Some(i);
        }
        i += 1;
    }
    None
}

/// Copies `from` into `to`, dropping escapes, up to the first unescaped `c`; its position,
/// or `None` when there is none (a trailing lone `\` is dropped).
pub(super) fn unescape_until(from: &[u8], to: &mut Vec<u8>, c: u8) -> Option<usize> {
    let mut i = 0;
    while i < from.len() {
        if from[i] == b'\\' {
            i += 1;
            if i == from.len() {
                return None;
            }
            to.push(from[i]);
            i += 1;
            continue;
        }
        if from[i] == c {
            return Some(i);
        }
        to.push(from[i]);
        i += 1;
    }
    None
}

/// The `)` closing the `(` at `open`, skipping escaped brackets.
fn matching_bracket(s: &[u8], open: usize) -> Option<usize> {
    let mut depth = 0i64;
    let mut i = open;
    while i < s.len() {
        match s[i] {
            b'\\' => {
                i += 2;
                continue;
            }
            b'(' => depth += 1,
            b')' => depth -= 1,
            _ => {}
        }
        if depth == 0 {
            return Some(i);
        }
        i += 1;
    }
    None
}

/// Strips leading whitespace and trailing whitespace that is not escaped.
pub(super) fn trim(s: &[u8]) -> &[u8] {
    let start = s
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(s.len());
    let mut s = &s[start..];
    while let Some(&last) = s.last() {
        if !last.is_ascii_whitespace() {
            break;
        }
        let slashes = s[..s.len() - 1]
            .iter()
            .rev()
            .take_while(|&&b| b == b'\\')
            .count();
        if slashes > 0 {
            // An odd run of backslashes escapes the space: it stays.
            if slashes % 2 == 0 {
                s = &s[..s.len() - 1];
            }
            break;
        }
        s = &s[..s.len() - 1];
    }
    s
}

/// Splits the text between a call's brackets into its arguments; commas inside a nested
/// call's brackets do not split. `@a()` is a call with one empty argument.
pub(super) fn call_args(mut s: &[u8]) -> Result<Vec<&[u8]>, String> {
    let mut args = Vec::new();
    loop {
        if s.is_empty() {
            args.push(&s[..0]);
            return Ok(args);
        }
        let Some(mut comma) = find_unescaped(s, b',') else {
            args.push(trim(s));
            return Ok(args);
        };
        if let Some(open) = find_unescaped(&s[..comma], b'(') {
            let close = matching_bracket(s, open)
                .ok_or_else(|| format!("Brackets do not match: {}", lossy(s)))?;
            if close == s.len() - 1 {
                args.push(trim(s));
                return Ok(args);
            }
            comma = close + 1;
            while comma < s.len() && s[comma] != b',' {
                comma += 1;
            }
            if comma == s.len() {
                return Err("No comma after closing bracket".into());
            }
        }
        args.push(trim(&s[..comma]));
        s = &s[comma + 1..];
    }
}

pub(super) fn lossy(s: &[u8]) -> String {
    String::from_utf8_lossy(s).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        call_args(s.as_bytes())
            .unwrap()
            .into_iter()
            .map(lossy)
            .collect()
    }

    #[test]
    fn arguments_split_on_top_level_commas_only() {
        assert_eq!(args("a, @b(c,d) ,e"), ["a", "@b(c,d)", "e"]);
        assert_eq!(args(""), [""]);
        assert_eq!(args("x\\,y"), ["x\\,y"]);
        assert_eq!(args("@f(@g(1),2)"), ["@f(@g(1),2)"]);
    }

    #[test]
    fn trailing_escaped_space_is_kept() {
        assert_eq!(trim(b"  a\\ "), b"a\\ ");
        assert_eq!(trim(b"  a\\\\ "), b"a\\\\");
        assert_eq!(trim(b" a  "), b"a");
    }

    #[test]
    fn unbalanced_brackets_are_errors() {
        assert!(call_args(b"@f(1,2").is_err());
        assert!(call_args(b"@f(1)x y,2").is_ok());
        assert!(call_args(b"@f(1) x").is_ok());
    }
}
