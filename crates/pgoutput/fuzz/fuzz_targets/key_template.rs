#![no_main]
//! Arbitrary text as a cache-key template (`user:{id}:profile`): parsing must return a
//! template or an error, never panic. An accepted template names its columns, renders a
//! key from any column values (and none when a column is missing), and the text it adds
//! itself never holds a byte a memcached key cannot.

use libfuzzer_sys::fuzz_target;

use pgoutput::template::{check_key, BadKey, Template};

fuzz_target!(|data: &[u8]| {
    let Ok(source) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(t) = Template::parse(source) else {
        return;
    };
    assert_eq!(t.source(), source);
    let columns = t.columns();
    for (i, c) in columns.iter().enumerate() {
        assert!(!c.is_empty() && !columns[..i].contains(c));
    }
    // With safe column values, only the template's own text could make a bad key.
    let key = t
        .render(|_| Some(&b"v"[..]))
        .expect("every column has a value");
    assert!(!key.is_empty());
    assert!(
        matches!(check_key(&key), Ok(()) | Err(BadKey::TooLong)),
        "{key:?}"
    );
    // Literal text is the source without placeholders, braces unescaped: never longer.
    let literal = t
        .render(|_| Some(&b""[..]))
        .expect("every column has a value");
    assert!(literal.len() <= source.len());
    assert_eq!(key.len(), literal.len() + placeholders(&t));
    if let Some(first) = columns.first() {
        assert_eq!(t.render(|c| (c != *first).then_some(&b"v"[..])), None);
    }
});

/// How many placeholders the template has (a column may be used more than once).
fn placeholders(t: &Template) -> usize {
    let mut n = 0;
    t.render(|_| {
        n += 1;
        Some(&b""[..])
    });
    n
}
