//! Reading nutcracker.yml's YAML as twemproxy reads it with libyaml: a token pass that
//! refuses what nutcracker refuses, then the events of one document holding a mapping of
//! pool names to mappings of directives (at most one sequence per pool: `servers:`).
//!
//! `yaml-rust2` is used at the token and event level so scalars stay raw strings
//! (`preconnect: yes` is an error, not a bool); a serde-based reader would lose that.

use yaml_rust2::parser::{Event, Parser};
use yaml_rust2::scanner::{Marker, Scanner, TokenType};

use super::directives::{set_directive, RawPool};
use super::error::ConfigError;

/// Refused YAML structure at `m`'s line.
fn structure(m: &Marker, msg: impl Into<String>) -> ConfigError {
    ConfigError::Structure {
        line: m.line(),
        msg: msg.into(),
    }
}

/// Refuses the YAML features nutcracker's token pass refuses.
pub(super) fn check_tokens(text: &str) -> Result<(), ConfigError> {
    let mut scanner = Scanner::new(text.chars());
    for token in &mut scanner {
        let what = match token.1 {
            TokenType::VersionDirective(..) => "a %YAML directive",
            TokenType::TagDirective(..) => "a %TAG directive",
            TokenType::DocumentStart => "a document start marker '---'",
            TokenType::DocumentEnd => "a document end marker '...'",
            TokenType::FlowSequenceStart
            | TokenType::FlowSequenceEnd
            | TokenType::FlowMappingStart
            | TokenType::FlowMappingEnd
            | TokenType::FlowEntry => {
                "flow style ([...], {...}); quote the value or use block style"
            }
            TokenType::Alias(_) => "an alias",
            TokenType::Anchor(_) => "an anchor",
            TokenType::Tag(..) => "a tag",
            _ => continue,
        };
        return Err(structure(&token.0, format!("{what} is not allowed")));
    }
    match scanner.get_error() {
        Some(e) => Err(yaml_error(&e)),
        None => Ok(()),
    }
}

fn yaml_error(e: &yaml_rust2::ScanError) -> ConfigError {
    ConfigError::Yaml {
        line: e.marker().line(),
        col: e.marker().col() + 1,
        msg: e.info().to_owned(),
    }
}

struct Events<'a> {
    parser: Parser<std::str::Chars<'a>>,
}

impl Events<'_> {
    fn next(&mut self) -> Result<(Event, Marker), ConfigError> {
        self.parser.next_token().map_err(|e| yaml_error(&e))
    }
}

pub(super) fn parse_pools(text: &str) -> Result<Vec<RawPool>, ConfigError> {
    let mut ev = Events {
        parser: Parser::new_from_str(text),
    };
    let (e, m) = ev.next()?;
    if e != Event::StreamStart {
        return Err(structure(&m, "unexpected start of stream"));
    }
    let (e, m) = ev.next()?;
    if e == Event::StreamEnd {
        return Err(ConfigError::File {
            msg: "configuration is empty; it must contain 1 document".into(),
        });
    }
    if e != Event::DocumentStart {
        return Err(structure(&m, "expected a YAML document"));
    }
    let (e, m) = ev.next()?;
    if !matches!(e, Event::MappingStart(..)) {
        return Err(structure(
            &m,
            "top level must be a mapping of pool names to pool settings",
        ));
    }
    let mut pools = Vec::new();
    loop {
        let (e, m) = ev.next()?;
        match e {
            Event::MappingEnd => break,
            Event::Scalar(name, ..) => {
                if name.is_empty() {
                    return Err(structure(&m, "pool name is empty"));
                }
                let (e, vm) = ev.next()?;
                if !matches!(e, Event::MappingStart(..)) {
                    return Err(structure(
                        &vm,
                        format!("pool '{name}' must be a mapping of directives"),
                    ));
                }
                pools.push(parse_pool(&mut ev, name)?);
            }
            _ => return Err(structure(&m, "pool names must be plain strings")),
        }
    }
    let (e, m) = ev.next()?;
    if e != Event::DocumentEnd {
        return Err(structure(&m, "unexpected content after the pools"));
    }
    let (e, m) = ev.next()?;
    if e != Event::StreamEnd {
        return Err(structure(&m, "configuration must contain only 1 document"));
    }
    Ok(pools)
}

fn parse_pool(ev: &mut Events<'_>, name: String) -> Result<RawPool, ConfigError> {
    let mut pool = RawPool {
        name,
        ..RawPool::default()
    };
    let mut seen_sequence = false;
    loop {
        let (e, km) = ev.next()?;
        let key = match e {
            Event::MappingEnd => break,
            Event::Scalar(key, ..) => key,
            _ => {
                return Err(structure(
                    &km,
                    format!("pool '{}' has a non-scalar directive name", pool.name),
                ))
            }
        };
        if key.is_empty() {
            return Err(structure(
                &km,
                format!("pool '{}' has an empty directive name", pool.name),
            ));
        }
        let (e, vm) = ev.next()?;
        match e {
            Event::Scalar(value, ..) => set_directive(&mut pool, &key, &value, vm.line())?,
            Event::SequenceStart(..) => {
                // nutcracker allows one sequence per pool and feeds each element to the
                // directive, so only `servers:` is useful as a list.
                if seen_sequence {
                    return Err(structure(
                        &vm,
                        format!("pool '{}' has more than one sequence directive", pool.name),
                    ));
                }
                seen_sequence = true;
                loop {
                    let (e, im) = ev.next()?;
                    match e {
                        Event::SequenceEnd => break,
                        Event::Scalar(item, ..) => {
                            set_directive(&mut pool, &key, &item, im.line())?
                        }
                        _ => {
                            return Err(structure(
                                &im,
                                format!(
                                    "pool '{}' directive \"{key}\" items must be plain strings \
                                     (nesting deeper than 2 levels)",
                                    pool.name
                                ),
                            ))
                        }
                    }
                }
            }
            _ => {
                return Err(structure(
                    &vm,
                    format!(
                        "pool '{}' directive \"{key}\" has a nested mapping (depth greater than 2)",
                        pool.name
                    ),
                ))
            }
        }
    }
    if !seen_sequence {
        return Err(ConfigError::Pool {
            pool: pool.name,
            msg: "has no \"servers:\" sequence".into(),
        });
    }
    Ok(pool)
}
