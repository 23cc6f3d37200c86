//! The TLS directives, and the combinations refused.

use super::*;

#[test]
fn tls_directives() {
    let c = parse(
        "pool:
  listen: 127.0.0.1:22121
  tls: true
  tls_ca_file: /etc/ca.pem
  tls_cert_file: /etc/client.pem
  tls_key_file: /etc/client.key
  tls_server_name: cache.internal
  listen_tls_cert_file: /etc/server.pem
  listen_tls_key_file: /etc/server.key
  listen_tls_ca_file: /etc/clients-ca.pem
  servers:
   - 127.0.0.1:11211:1
",
    );
    let t = &c.pools[0].tls;
    assert!(t.to_servers());
    assert_eq!(t.ca_file.as_deref(), Some("/etc/ca.pem"));
    assert_eq!(t.cert_file.as_deref(), Some("/etc/client.pem"));
    assert_eq!(t.key_file.as_deref(), Some("/etc/client.key"));
    assert_eq!(t.server_name.as_deref(), Some("cache.internal"));
    assert_eq!(t.listen_cert_file.as_deref(), Some("/etc/server.pem"));
    assert_eq!(t.listen_key_file.as_deref(), Some("/etc/server.key"));
    assert_eq!(t.listen_ca_file.as_deref(), Some("/etc/clients-ca.pem"));
    assert!(!parse(MINIMAL).pools[0].tls.to_servers());
    let pool = |extra: &str| {
        format!("p:\n  listen: 127.0.0.1:22121\n{extra}  servers:\n   - 127.0.0.1:11211:1\n")
    };
    for (extra, why) in [
        ("  tls_ca_file: /ca.pem\n", "without \"tls: true\""),
        ("  tls: true\n  tls_cert_file: /c.pem\n", "needs both"),
        ("  listen_tls_key_file: /k.pem\n", "needs both"),
        (
            "  listen_tls_ca_file: /ca.pem\n",
            "without \"listen_tls_cert_file:\"",
        ),
        ("  tls: yes\n", "is not \"true\" or \"false\""),
    ] {
        let e = reject(&pool(extra));
        assert!(e.contains(why), "{extra}: {e}");
    }
}
