#![no_main]
//! Arbitrary bytes as a `-Y` password file (`user:password` per line): parsing must accept or
//! name a malformed line, never panic. An accepted file has one entry per line, and each
//! line's user and password (up to a `\r` or NUL) log in; a refused file names a line that
//! exists.

use libfuzzer_sys::fuzz_target;

use server::auth::PasswordFile;

fuzz_target!(|data: &[u8]| {
    let body = data.strip_suffix(b"\n").unwrap_or(data);
    let lines: Vec<&[u8]> = if data.is_empty() {
        Vec::new()
    } else {
        body.split(|&b| b == b'\n').collect()
    };
    match PasswordFile::parse(data) {
        Ok(file) => {
            assert_eq!(file.len(), lines.len());
            for line in lines {
                let colon = line.iter().position(|&b| b == b':').expect("has a ':'");
                let pass = &line[colon + 1..];
                let end = pass
                    .iter()
                    .position(|&b| b == b'\r' || b == 0)
                    .unwrap_or(pass.len());
                assert!(file.check(&line[..colon], &pass[..end]), "{line:?}");
            }
        }
        Err(line) => assert!(line >= 1 && line <= lines.len()),
    }
});
