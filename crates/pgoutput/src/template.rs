//! Cache-key templates: `user:{id}:profile` is literal text with `{column}` placeholders
//! (`{{` and `}}` stand for literal braces). Pure.

use std::fmt;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    Literal(String),
    Column(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template {
    source: String,
    parts: Vec<Part>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TemplateError {
    pub template: String,
    pub reason: &'static str,
}

impl fmt::Display for TemplateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "key template {:?}: {}", self.template, self.reason)
    }
}

impl std::error::Error for TemplateError {}

impl Template {
    pub fn parse(source: &str) -> Result<Template, TemplateError> {
        let err = |reason| TemplateError {
            template: source.to_owned(),
            reason,
        };
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut chars = source.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '{' if chars.peek() == Some(&'{') => {
                    chars.next();
                    literal.push('{');
                }
                '}' if chars.peek() == Some(&'}') => {
                    chars.next();
                    literal.push('}');
                }
                '{' => {
                    let mut name = String::new();
                    loop {
                        match chars.next() {
                            Some('}') => break,
                            Some('{') => return Err(err("has '{' inside a placeholder")),
                            Some(c) => name.push(c),
                            None => return Err(err("has an unclosed '{'")),
                        }
                    }
                    if name.is_empty() {
                        return Err(err("has an empty placeholder '{}'"));
                    }
                    if !literal.is_empty() {
                        parts.push(Part::Literal(std::mem::take(&mut literal)));
                    }
                    parts.push(Part::Column(name));
                }
                '}' => {
                    return Err(err(
                        "has a '}' without '{' (write '}}' for a literal brace)",
                    ))
                }
                c if c.is_whitespace() || c.is_control() => {
                    return Err(err(
                        "contains whitespace or a control character, which memcached keys cannot",
                    ))
                }
                c => literal.push(c),
            }
        }
        if !literal.is_empty() {
            parts.push(Part::Literal(literal));
        }
        if parts.is_empty() {
            return Err(err("is empty"));
        }
        Ok(Template {
            source: source.to_owned(),
            parts,
        })
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// The column names the template reads, in order of first use.
    pub fn columns(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for p in &self.parts {
            if let Part::Column(c) = p {
                if !out.contains(&c.as_str()) {
                    out.push(c);
                }
            }
        }
        out
    }

    /// Renders the key, asking `value` for each column's text; `None` from `value` (a NULL
    /// or a value the change does not carry) makes the key unknowable, so `None`.
    pub fn render<'v>(&self, mut value: impl FnMut(&str) -> Option<&'v [u8]>) -> Option<Vec<u8>> {
        let mut key = Vec::with_capacity(self.source.len() + 16);
        for p in &self.parts {
            match p {
                Part::Literal(s) => key.extend_from_slice(s.as_bytes()),
                Part::Column(c) => key.extend_from_slice(value(c)?),
            }
        }
        Some(key)
    }
}

/// A rendered key is checked by proto's key rule (the spools' too).
pub use proto::{check_key, BadKey};

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn lookup<'a>(cols: &'a [(&'a str, &'a str)]) -> impl FnMut(&str) -> Option<&'a [u8]> + 'a {
        move |name| {
            cols.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.as_bytes())
        }
    }

    #[test]
    fn renders_placeholders() {
        let t = Template::parse("user:{id}:profile").unwrap();
        assert_eq!(t.columns(), ["id"]);
        let row = [("id", "42"), ("email", "a@b")];
        assert_eq!(t.render(lookup(&row)).unwrap(), b"user:42:profile");
        let t = Template::parse("{email}").unwrap();
        assert_eq!(t.render(lookup(&row)).unwrap(), b"a@b");
        let t = Template::parse("t:{id}:{email}:{id}").unwrap();
        assert_eq!(t.columns(), ["id", "email"]);
        assert_eq!(t.render(lookup(&row)).unwrap(), b"t:42:a@b:42");
    }

    #[test]
    fn escaped_braces_are_literal() {
        let t = Template::parse("{{x}}:{id}").unwrap();
        assert_eq!(t.columns(), ["id"]);
        assert_eq!(t.render(lookup(&[("id", "1")])).unwrap(), b"{x}:1");
    }

    #[test]
    fn missing_value_gives_no_key() {
        let t = Template::parse("email:{email}").unwrap();
        assert_eq!(t.render(lookup(&[("id", "1")])), None);
    }

    #[test]
    fn refuses_bad_templates() {
        for bad in [
            "",
            "user:{id",
            "user:{}",
            "a}b",
            "a b:{id}",
            "x:{a{b}}",
            "tab\t{id}",
        ] {
            assert!(Template::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn key_checks() {
        assert_eq!(check_key(b"user:1"), Ok(()));
        assert_eq!(check_key(&[b'k'; 250]), Ok(()));
        assert_eq!(check_key(&[b'k'; 251]), Err(BadKey::TooLong));
        assert_eq!(check_key(b"a b"), Err(BadKey::BadByte));
        assert_eq!(check_key(b"a\r\nflush_all"), Err(BadKey::BadByte));
        assert_eq!(check_key(b""), Err(BadKey::BadByte));
    }

    proptest! {
        #[test]
        fn parse_never_panics(s in ".{0,40}") {
            let _ = Template::parse(&s);
        }

        #[test]
        fn literal_text_renders_to_itself(s in "[a-z:_.]{1,30}") {
            let t = Template::parse(&s).unwrap();
            prop_assert_eq!(t.render(|_| None).unwrap(), s.as_bytes().to_vec());
        }
    }
}
