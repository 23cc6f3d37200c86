//! Arbitrary text never panics the reader, and its verdicts match `nutcracker -t`.

use super::*;

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

    /// Arbitrary text, and YAML-ish line soup, never panics the parser.
    #[test]
    fn never_panics(text in "\\PC{0,200}") {
        let _ = Config::from_yaml_str(&text);
    }

    #[test]
    fn yamlish_never_panics(lines in proptest::collection::vec(
        "( {0,4})(-|[a-z_]{1,8}:)( [ -~]{0,20})?", 0..12)) {
        let _ = Config::from_yaml_str(&lines.join("\n"));
    }
}

/// Runs the installed nutcracker 0.5.0 (`-t`) on configs and checks it agrees.
#[test]
fn verdicts_agree_with_nutcracker() {
    let Some(nutcracker) = find_nutcracker() else {
        eprintln!("WARNING: nutcracker not on PATH; skipping verdict comparison");
        return;
    };
    let cases: Vec<String> = vec![
            FIVE_POOLS.into(),
            LEAF.into(),
            ROOT.into(),
            MINIMAL.into(),
            "a:\n  listen: 127.0.0.1:22121\n  hash: md6\n  servers:\n   - 127.0.0.1:11211:1\n".into(),
            "a:\n  listen: 127.0.0.1:22121\n  preconnect: yes\n  servers:\n   - 127.0.0.1:11211:1\n".into(),
            "a:\n  listen: 127.0.0.1:22121\n  servers: [127.0.0.1:11211:1]\n".into(),
            "a:\n  listen: 127.0.0.1:22121\n  servers:\n   - 127.0.0.1:11211:1\n   - 127.0.0.1:11211:2\n".into(),
            "a:\n  listen: 127.0.0.1:22121\n  servers:\n   - 127.0.0.1:11211:1 x\n   - 127.0.0.1:11211:1 y\n".into(),
            "a:\n  listen: 127.0.0.1:22121\n  servers:\n   - 127.0.0.1:11211:0\n".into(),
            "a:\n  listen: 127.0.0.1:22121\n  servers:\n   - 127.0.0.1:11211:99999999999\n".into(),
            "a:\n  listen: /tmp/x.sock 0666\n  servers:\n   - /tmp/mc.sock:1 one\n   - /tmp/mc2.sock:1\n".into(),
            "a:\n  listen: /tmp/x.sock 0999\n  servers:\n   - /tmp/mc.sock:1\n".into(),
            "a:\n  listen: 127.0.0.1:22121\n  servers:\n   - /tmp/a:b.sock:1\n".into(),
            "a:\n  listen: 127.0.0.1:22121\n  timeout:\n  servers:\n   - 127.0.0.1:11211:1\n".into(),
            "a:\n  listen: 127.0.0.1:22121\n  timeout: 0\n  servers:\n   - 127.0.0.1:11211:1\n".into(),
            "a:\n  listen: 127.0.0.1:22121\n  hash:\n   - md5\n  servers:\n   - 127.0.0.1:11211:1\n".into(),
            "a:\n  listen: 127.0.0.1:22121\n  redis_auth: pw\n  servers:\n   - 127.0.0.1:11211:1\n".into(),
            "a:\n  listen: 127.0.0.1:22121\n  redis: true\n  redis_auth: >\n    pass word\n  servers:\n   - 127.0.0.1:11211:1\n".into(),
            "a:\n  listen: 127.0.0.1:22121\n  server_connections: 0\n  servers:\n   - 127.0.0.1:11211:1\n".into(),
            "a:\n  listen: :22121\n  servers:\n   - 127.0.0.1:11211:1\n".into(),
            "a:\n  listen: ::1:22121\n  servers:\n   - ::1:11211:1\n".into(),
            "a:\n  listen: 1#27.0.0.1:22121\n  servers:\n   - 127.0.0.1:11211:1\n".into(),
            "a:\n  listen: \"[::1]:22121\"\n  servers:\n   - 127.0.0.1:11211:1\n".into(),
            "a:\n  listen: localhost:22121\n  servers:\n   - 127.0.0.1:11211:1\n".into(),
            "a:\n  listen: 127.0.0.1:22121\n  servers:\n   - 127.0.0.1:11211:1\n...\n".into(),
            "a: b\n".into(),
            "".into(),
        ];
    let dir = std::env::temp_dir().join(format!("memfleet-conf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (i, text) in cases.iter().enumerate() {
        let path = dir.join(format!("case{i}.yml"));
        std::fs::write(&path, text).unwrap();
        let out = std::process::Command::new(&nutcracker)
            .arg("-t")
            .arg("-c")
            .arg(&path)
            .output()
            .expect("run nutcracker -t");
        let theirs = String::from_utf8_lossy(&out.stderr).contains("syntax is ok");
        let ours = Config::from_yaml_str(text);
        assert_eq!(ours.is_ok(), theirs, "case {i} ours={ours:?}\n{text}");
    }
    std::fs::remove_dir_all(&dir).ok();
    eprintln!("{} configs: verdicts agree with nutcracker -t", cases.len());
}

fn find_nutcracker() -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| std::path::Path::new(d).join("nutcracker"))
        .find(|p| p.is_file())
}
