//! memcached's extstore options (`-o ext_path=FILE:SIZE,ext_item_size=...`): those that mean
//! something here are taken, the others refused by name.

use store::FlashConfig;

/// One `ext_path=PATH:SIZE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlashPath {
    pub path: String,
    pub size: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct FlashOptions {
    /// Files, in order; the flash space is them end to end.
    pub paths: Vec<FlashPath>,
    pub store: FlashConfig,
    /// `ext_threads`: I/O threads making the flash reads of requests (`reads`).
    pub threads: usize,
    /// `ext_io_depth`: flash reads one connection may have under way.
    pub io_depth: u32,
}

/// Options memcached has and memfleet refuses, with why.
fn refused(name: &str) -> Option<&'static str> {
    Some(match name {
        "ext_max_sleep" => "compaction runs at a fixed, bounded read rate (docs/storage.md)",
        _ => return None,
    })
}

/// Collects the `ext_*` options of `-o`. Ok(false) for an option that is not one of them.
pub fn apply(opts: &mut Option<FlashOptions>, name: &str, value: &str) -> Result<bool, String> {
    if !name.starts_with("ext_") {
        return Ok(false);
    }
    if let Some(why) = refused(name) {
        return Err(format!("-o {name}: not supported by memfleet ({why})"));
    }
    let o = opts.get_or_insert_with(|| FlashOptions {
        paths: Vec::new(),
        store: FlashConfig::default(),
        threads: 1,
        io_depth: super::reads::DEFAULT_DEPTH,
    });
    let number = |what: &str| -> Result<u64, String> {
        value
            .parse::<u64>()
            .map_err(|_| format!("-o {name}={value}: {what}"))
    };
    match name {
        "ext_path" => {
            let (path, size) = value.rsplit_once(':').ok_or_else(|| {
                format!("-o ext_path={value}: expected PATH:SIZE (e.g. /data/cache:64g)")
            })?;
            if path.is_empty() {
                return Err(format!("-o ext_path={value}: empty path"));
            }
            let size =
                crate::size::parse_size(size).map_err(|e| format!("-o ext_path={value}: {e}"))?;
            o.paths.push(FlashPath {
                path: path.to_string(),
                size: size as u64,
            });
        }
        "ext_page_size" => {
            let mb = number("a size in megabytes")?;
            if !(1..=1024).contains(&mb) {
                return Err(format!("-o ext_page_size={value}: 1 to 1024 (megabytes)"));
            }
            o.store.page_size = mb << 20;
        }
        "ext_wbuf_size" => {
            let mb = number("a size in megabytes")?;
            if !(1..=1024).contains(&mb) {
                return Err(format!("-o ext_wbuf_size={value}: 1 to 1024 (megabytes)"));
            }
            o.store.wbuf_size = (mb << 20) as usize;
        }
        "ext_item_size" => o.store.item_size = number("a size in bytes")? as usize,
        "ext_item_age" => {
            o.store.item_age = u32::try_from(number("seconds")?)
                .map_err(|_| format!("-o ext_item_age={value}: too large"))?
        }
        "ext_low_ttl" => {
            o.store.low_ttl = u32::try_from(number("seconds")?)
                .map_err(|_| format!("-o ext_low_ttl={value}: too large"))?
        }
        "ext_recache_rate" => {
            o.store.recache_rate = u32::try_from(number("a count")?)
                .map_err(|_| format!("-o ext_recache_rate={value}: too large"))?
        }
        "ext_compact_under" => {
            let pages = number("a number of pages")?;
            if pages == 0 {
                return Err(format!("-o ext_compact_under={value}: at least 1"));
            }
            o.store.compact_under = Some(pages);
        }
        "ext_drop_under" => o.store.drop_under = Some(number("a number of pages")?),
        // memcached's is a bare flag; 0 and 1 are taken too.
        "ext_drop_unread" => {
            o.store.drop_unread = match value {
                "" | "1" => true,
                "0" => false,
                _ => return Err(format!("-o ext_drop_unread={value}: 0 or 1 (or no value)")),
            }
        }
        "ext_max_frag" => {
            let frag = value
                .parse::<f64>()
                .ok()
                .filter(|f| (0.0..=1.0).contains(f))
                .ok_or_else(|| format!("-o ext_max_frag={value}: a fraction from 0 to 1"))?;
            o.store.max_frag_permille = (frag * 1000.0).round() as u32;
        }
        "ext_threads" => {
            o.threads = number("a count")? as usize;
            if !(1..=64).contains(&o.threads) {
                return Err(format!("-o ext_threads={value}: 1 to 64"));
            }
        }
        "ext_io_depth" => {
            let max = super::reads::MAX_READS as u64;
            o.io_depth = number("a count")?.clamp(0, max) as u32;
            if o.io_depth == 0 {
                return Err(format!("-o ext_io_depth={value}: at least 1"));
            }
        }
        _ => return Err(format!("-o {name}: unknown extstore option")),
    }
    Ok(true)
}

/// Checks the options once all are read.
pub fn validate(opts: &Option<FlashOptions>) -> Result<(), String> {
    let Some(o) = opts else {
        return Ok(());
    };
    if o.paths.is_empty() {
        return Err("the ext_* options need -o ext_path=PATH:SIZE".into());
    }
    if o.store.wbuf_size as u64 > o.store.page_size {
        return Err(format!(
            "ext_wbuf_size ({} MB) must not be larger than ext_page_size ({} MB)",
            o.store.wbuf_size >> 20,
            o.store.page_size >> 20
        ));
    }
    for p in &o.paths {
        if p.size < o.store.page_size {
            return Err(format!(
                "ext_path {}: size {} is smaller than one page ({} MB)",
                p.path,
                p.size,
                o.store.page_size >> 20
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(opts: &[(&str, &str)]) -> Result<Option<FlashOptions>, String> {
        let mut o = None;
        for (n, v) in opts {
            assert!(apply(&mut o, n, v)?);
        }
        validate(&o)?;
        Ok(o)
    }

    #[test]
    fn memcached_options_are_taken_or_refused_by_name() {
        let o = parse(&[
            ("ext_path", "/data/a:2g"),
            ("ext_path", "/data/b:1536m"),
            ("ext_item_size", "512"),
            ("ext_page_size", "32"),
            ("ext_wbuf_size", "8"),
            ("ext_low_ttl", "60"),
            ("ext_recache_rate", "100"),
            ("ext_threads", "4"),
            ("ext_io_depth", "8"),
            ("ext_compact_under", "3"),
            ("ext_max_frag", "0.5"),
            ("ext_drop_unread", ""),
            ("ext_drop_under", "2"),
            ("ext_item_age", "3600"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(
            o.paths[1],
            FlashPath {
                path: "/data/b".into(),
                size: 1536 << 20
            }
        );
        assert_eq!(o.store.page_size, 32 << 20);
        assert_eq!(o.store.wbuf_size, 8 << 20);
        assert_eq!(
            (o.store.item_size, o.store.low_ttl, o.store.recache_rate),
            (512, 60, 100)
        );
        assert_eq!((o.threads, o.io_depth), (4, 8));
        assert_eq!(
            (o.store.compact_under, o.store.max_frag_permille),
            (Some(3), 500)
        );
        assert_eq!((o.store.drop_unread, o.store.drop_under), (true, Some(2)));
        assert_eq!(o.store.item_age, 3600);
        let d = parse(&[("ext_path", "/x:1g")]).unwrap().unwrap();
        assert_eq!((d.threads, d.io_depth), (1, 16));
        // memcached's default: no age, only eviction writes items to flash.
        assert_eq!(d.store.item_age, store::NO_ITEM_AGE);
        assert_eq!((d.store.drop_unread, d.store.drop_under), (false, None));
        // memcached's defaults: 1% of the pages, at least 1.
        assert_eq!(
            (d.store.drop_under_of(16), d.store.drop_under_of(1000)),
            (1, 10)
        );
        for (v, on) in [("1", true), ("0", false)] {
            let o = parse(&[("ext_path", "/x:1g"), ("ext_drop_unread", v)]);
            assert_eq!(o.unwrap().unwrap().store.drop_unread, on);
        }
        for bad in [
            ("ext_threads", "0"),
            ("ext_threads", "x"),
            ("ext_io_depth", "0"),
            ("ext_max_frag", "1.5"),
            ("ext_max_frag", "x"),
            ("ext_compact_under", "0"),
            ("ext_drop_unread", "yes"),
            ("ext_drop_under", "-1"),
            ("ext_drop_under", "x"),
            ("ext_item_age", "-1"),
            ("ext_item_age", "4294967296"),
        ] {
            let e = parse(&[("ext_path", "/x:1g"), bad]).unwrap_err();
            assert!(e.contains(bad.0), "{e}");
        }
        let mut none = None;
        assert!(!apply(&mut none, "hashpower", "20").unwrap());
        for bad in ["ext_max_sleep", "ext_bogus"] {
            let e = parse(&[("ext_path", "/x:1g"), (bad, "1")]).unwrap_err();
            assert!(e.contains(bad), "{e}");
        }
        assert!(parse(&[("ext_item_size", "512")])
            .unwrap_err()
            .contains("ext_path"));
        assert!(parse(&[("ext_path", "/x")]).is_err());
        assert!(parse(&[("ext_path", "/x:1m")])
            .unwrap_err()
            .contains("smaller than one page"));
        assert!(parse(&[("ext_path", "/x:1g"), ("ext_wbuf_size", "128")]).is_err());
        assert!(parse(&[("ext_path", "/x:1g"), ("ext_page_size", "0")]).is_err());
    }
}
