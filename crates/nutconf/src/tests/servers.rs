//! `servers:` entries that name DNS records (`dns:`, `srv:`).

use super::*;

#[test]
fn dns_servers_are_kept_apart_from_written_ones() {
    let c = parse(
            "a:\n  listen: 127.0.0.1:22121\n  dns_refresh_ms: 500\n  servers:\n   - 10.0.0.9:11211:1\n   - dns:cache.ns.svc:11211:2\n   - srv:_memcache._tcp.cache.ns.svc:1\nb:\n  listen: 127.0.0.1:22122\n  servers:\n   - dns:other:11311:1\n",
        );
    assert_eq!(c.pools[0].servers.len(), 1);
    assert!(c.pools[1].servers.is_empty());
    assert_eq!(c.dns.len(), 2);
    assert_eq!(c.dns[0].pool, 0);
    assert_eq!(c.dns[0].refresh, Duration::from_millis(500));
    assert_eq!(
        c.dns[0].names,
        vec![
            DnsName {
                lookup: DnsLookup::Addresses {
                    host: "cache.ns.svc".into(),
                    port: 11211
                },
                weight: 2
            },
            DnsName {
                lookup: DnsLookup::Srv {
                    name: "_memcache._tcp.cache.ns.svc".into()
                },
                weight: 1
            },
        ]
    );
    assert_eq!(c.dns[1].pool, 1);
    assert_eq!(
        c.dns[1].refresh,
        Duration::from_millis(DEFAULT_DNS_REFRESH_MS.into())
    );
}

#[test]
fn bad_dns_servers_are_refused() {
    let pool = |entry: &str| format!("a:\n  listen: 127.0.0.1:22121\n  servers:\n   - {entry}\n");
    for bad in [
        "dns:cache:11211",
        "dns::11211:1",
        "dns:cache:0:1",
        "dns:cache:11211:0",
        "dns:cache:x:1",
        "srv::1",
        "srv:_memcache._tcp.x",
        "srv:_memcache._tcp.x:0",
    ] {
        assert!(reject(&pool(bad)).contains("format string"), "{bad}");
    }
    let refresh_alone = "a:\n  listen: 127.0.0.1:22121\n  dns_refresh_ms: 100\n  servers:\n   - 127.0.0.1:11211:1\n";
    assert!(reject(refresh_alone).contains("dns_refresh_ms"));
}
