//! mcrouter's runtime variables file (`--runtime-vars-file`): a JSON object whose
//! `hash_route_weights` holds, per name, the weights of the WeightedCh3Rv hashes whose
//! `weights_rv` names it. Read with the config, so a reload reads it again.

use serde_json::Value;

use super::builder::{Builder, Result};
use super::fields::kind;

impl Builder<'_> {
    /// The `n` weights runtime variable `name` gives. As mcrouter: 0.5 each without a
    /// file (or with one that is not JSON, which it logs); a missing or malformed variable
    /// refuses the config; too few weights are made up with 0.5, too many are cut (warned).
    pub(super) fn runtime_weights(&mut self, name: &str, n: usize) -> Result<Vec<f64>> {
        let Some(rv) = self.runtime_vars else {
            self.warn(format!(
                "WeightedCh3Rv weights come from runtime variable '{name}', and no \
                 --runtime-vars-file was given: every weight is 0.5 (as mcrouter)"
            ));
            return Ok(vec![0.5; n]);
        };
        if self.rv_data.is_none() {
            let parsed = serde_json::from_str::<Value>(rv.text);
            if let Err(e) = &parsed {
                self.warn(format!(
                    "runtime variables file {} is not JSON ({e}): every WeightedCh3Rv weight \
                     is 0.5 (as mcrouter)",
                    rv.file
                ));
            }
            self.rv_data = Some(parsed.ok());
        }
        let Some(Some(data)) = &self.rv_data else {
            return Ok(vec![0.5; n]);
        };
        let file = rv.file;
        let Some(Value::Object(all)) = data.get("hash_route_weights") else {
            return self.fail(format!(
                "runtime variable hash_route_weights in {file} is not an object"
            ));
        };
        let weights = match all.get(name) {
            Some(Value::Array(w)) => w.clone(),
            Some(other) => {
                return self.fail(format!(
                    "runtime variable hash_route_weights.{name} in {file} must be an array, \
                     not {}",
                    kind(other)
                ))
            }
            None => {
                return self.fail(format!(
                    "runtime variable hash_route_weights.{name} is not in {file}"
                ))
            }
        };
        if weights.len() != n {
            self.warn(format!(
                "{} weights in runtime variable hash_route_weights.{name} for {n} servers: {} \
                 (as mcrouter)",
                weights.len(),
                if weights.len() < n {
                    "the missing ones are 0.5"
                } else {
                    "the extra ones are not read"
                }
            ));
        }
        let mut out = vec![0.5; n];
        for (slot, w) in out.iter_mut().zip(&weights) {
            match w.as_f64() {
                Some(w) if (0.0..=1.0).contains(&w) => *slot = w,
                _ => {
                    return self.fail(format!(
                        "runtime variable hash_route_weights.{name} in {file}: weight {w} is \
                         not a number from 0 to 1"
                    ))
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use ring::PoolHash;

    use crate::jsonm::Env;
    use crate::jsonm::RuntimeVars;
    use crate::parse::parse_config_with;
    use crate::{Config, Plan};

    fn config(vars: Option<&str>) -> Result<Config, String> {
        let text = r#"{"pools": {"U": {"servers": ["h:1", "h:2", "h:3"]}},
            "route": {"type": "PoolRoute", "pool": "U",
                      "hash": {"hash_func": "WeightedCh3Rv", "weights_rv": "w"}}}"#;
        let env = Env {
            runtime_vars: vars.map(|text| RuntimeVars {
                file: "rv.json",
                text,
            }),
            ..Env::default()
        };
        parse_config_with("t.json", text, &env).map_err(|e| e.to_string())
    }

    /// Where each of 200 keys goes.
    fn spread(c: &Config) -> Vec<usize> {
        (0..200)
            .map(
                |i| match c.plan("get", format!("k{i}").as_bytes(), "/r/c/") {
                    Plan::Send(s) => s.index,
                    other => panic!("{other:?}"),
                },
            )
            .collect()
    }

    fn as_weighted(weights: &[f64]) -> Vec<usize> {
        let h = PoolHash::WeightedCh3(weights.to_vec());
        (0..200)
            .map(|i| h.index(format!("k{i}").as_bytes(), 3))
            .collect()
    }

    #[test]
    fn weights_come_from_the_runtime_variable() {
        let c = config(Some(r#"{"hash_route_weights": {"w": [1, 0, 0.25]}}"#)).unwrap();
        assert_eq!(spread(&c), as_weighted(&[1.0, 0.0, 0.25]));
        assert!(spread(&c).iter().all(|&i| i != 1), "weight 0 gets nothing");
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        // Too few: the rest are 0.5, with a warning.
        let c = config(Some(r#"{"hash_route_weights": {"w": [1]}}"#)).unwrap();
        assert_eq!(spread(&c), as_weighted(&[1.0, 0.5, 0.5]));
        assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
    }

    #[test]
    fn without_a_usable_file_every_weight_is_a_half() {
        for vars in [None, Some("not json")] {
            let c = config(vars).unwrap();
            assert_eq!(spread(&c), as_weighted(&[0.5; 3]));
            assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
        }
    }

    #[test]
    fn a_bad_variable_refuses_the_config() {
        for (vars, want) in [
            (r#"{}"#, "hash_route_weights in rv.json is not an object"),
            (
                r#"{"hash_route_weights": {}}"#,
                "hash_route_weights.w is not in rv.json",
            ),
            (r#"{"hash_route_weights": {"w": 1}}"#, "must be an array"),
            (
                r#"{"hash_route_weights": {"w": [2]}}"#,
                "weight 2 is not a number from 0 to 1",
            ),
        ] {
            let e = config(Some(vars)).unwrap_err();
            assert!(e.contains(want) && e.contains("weights_rv"), "{vars}: {e}");
        }
    }
}
