fn main() {
    for path in std::env::args().skip(1) {
        let text = std::fs::read_to_string(&path).unwrap();
        match routetree::parse_config(&path, &text) {
            Ok(c) => println!(
                "OK {path} pools={} routes={} warnings={}",
                c.pools.len(),
                c.routes.len(),
                c.warnings.len()
            ),
            Err(e) => println!("ERR {e}"),
        }
    }
}
