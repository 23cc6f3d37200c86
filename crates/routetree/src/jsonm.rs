//! JSONM, mcrouter's macro language for configs, expanded as mcrouter's preprocessor expands
//! it before the config is read: `macros` (`macroDef`, `constDef`), `vars`, `%param%`
//! references, `@name(args)` calls in strings, `{"type": "name", ...}` calls in objects,
//! and the built-in macros (see [`builtins`]).
//!
//! Pure: `@import` reads other files through the loader the caller passes in.
//!
//! Limits, so that no config can exhaust the router: calls and values nest at most
//! [`NESTED_LIMIT`] deep (mcrouter's limit and message), a value built by a loop nests at most
//! [`DEPTH_LIMIT`] deep, and the expansion makes at most [`SIZE_LIMIT`] values and string bytes
//! (the environment, [`Env`], may set a lower limit).

mod builtins;
mod env;
mod shuffle;
mod text;
mod value;
mod weighted_hash;

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

use serde_json::{Map, Value};

use crate::error::{ConfigError, Path, Seg};
use crate::source::Source;
pub use env::{no_imports, route_globals, Env, Import, RuntimeVars, SIZE_LIMIT};
use text::{find_unescaped, lossy, unescape_until};
use value::type_name;

/// Deepest nesting of macro calls and values being expanded (mcrouter's `nestedLimit`).
pub const NESTED_LIMIT: usize = 250;
/// Deepest value a loop (`process`) may build.
pub const DEPTH_LIMIT: usize = 1000;

/// Expands `json`, the parsed text of `source`; errors are located in `source`.
pub fn expand(source: &Source, json: Value, env: &Env) -> Result<Value, ConfigError> {
    expand_value(json, env).map_err(|f| f.located(source))
}

/// Parses and expands a config's text.
pub fn expand_text(file: &str, text: &str, env: &Env) -> Result<Value, ConfigError> {
    let source = Source::new(file, text)?;
    let json = source.parse()?;
    expand(&source, json, env)
}

fn expand_value(json: Value, env: &Env) -> R<Value> {
    // mcrouter refuses a config that is not an object; the parser says so in its words.
    let Value::Object(mut top) = json else {
        return Ok(json);
    };
    let pre = Pre::new(env);
    if let Some(macros) = top.remove("macros") {
        pre.macro_defs(macros).within(Step::Key("macros".into()))?;
    }
    pre.expand(Value::Object(top), &Ctx::root())
}

/// One step of where an expansion failed, innermost first.
#[derive(Debug)]
enum Step {
    Key(String),
    Index(usize),
    /// What was being expanded: a macro, a variable, a const, an import.
    Note(String),
}

/// An expansion error: mcrouter's message and the steps that led to it.
#[derive(Debug)]
pub(crate) struct Fail {
    trail: Vec<Step>,
    message: String,
}

type R<T> = Result<T, Fail>;

fn fail<T>(message: impl Into<String>) -> R<T> {
    Err(Fail {
        trail: Vec::new(),
        message: message.into(),
    })
}

trait Within {
    fn within(self, step: Step) -> Self;
}

impl<T> Within for R<T> {
    fn within(self, step: Step) -> Self {
        self.map_err(|mut f| {
            f.trail.push(step);
            f
        })
    }
}

impl From<String> for Fail {
    fn from(message: String) -> Fail {
        Fail {
            trail: Vec::new(),
            message,
        }
    }
}

fn note(text: impl Into<String>) -> Step {
    Step::Note(text.into())
}

impl Fail {
    /// The error at the place in `source` it came from: the key path as far as it runs
    /// through the file itself (up to the first macro call), and the rest in the message in
    /// mcrouter's words.
    fn located(self, source: &Source) -> ConfigError {
        let mut path = Vec::new();
        let mut notes = Vec::new();
        for step in self.trail.into_iter().rev() {
            match step {
                Step::Key(k) if notes.is_empty() => path.push(Seg::Key(k)),
                Step::Index(i) if notes.is_empty() => path.push(Seg::Index(i)),
                Step::Key(k) => notes.push(format!("Raw object property '{k}'")),
                Step::Index(i) => notes.push(format!("Array element #{i}")),
                Step::Note(n) => notes.push(n),
            }
        }
        notes.push(self.message);
        let mut at = Path(path.clone());
        let (line, column) = loop {
            if let Some(found) = source.locate(&at) {
                break found;
            }
            if at.0.pop().is_none() {
                break (0, 0);
            }
        };
        ConfigError {
            file: source.name.clone(),
            line,
            column,
            path: Path(path),
            message: notes.join(": "),
        }
    }
}

/// A variable in a scope: a macro argument not yet expanded (`Raw`, for built-ins that
/// expand lazily), a `vars` entry not yet expanded (`Lazy`), one being expanded, a value.
enum Var {
    Raw(Value),
    Lazy(Value),
    Busy,
    Ready(Value),
}

/// A scope of parameters. A macro's arguments are a base scope: its body sees them and the
/// consts, not its caller's variables.
pub(crate) struct Ctx<'c> {
    vars: RefCell<HashMap<String, Var>>,
    outer: Option<&'c Ctx<'c>>,
    base: bool,
}

impl<'c> Ctx<'c> {
    fn root() -> Ctx<'static> {
        Ctx {
            vars: RefCell::default(),
            outer: None,
            base: true,
        }
    }

    fn extend(outer: &'c Ctx<'c>, base: bool) -> Ctx<'c> {
        Ctx {
            vars: RefCell::default(),
            outer: Some(outer),
            base,
        }
    }

    fn add(&self, key: &str, var: Var) -> R<()> {
        let mut vars = self.vars.borrow_mut();
        if vars.contains_key(key) {
            return fail(format!("'{key}' already exists in local scope"));
        }
        vars.insert(key.to_owned(), var);
        Ok(())
    }

    /// Sets a loop variable.
    fn set(&self, key: &str, value: Value) {
        self.vars
            .borrow_mut()
            .insert(key.to_owned(), Var::Ready(value));
    }

    /// Takes an expanded argument out (each is used once).
    fn take(&self, key: &str) -> Value {
        match self.vars.borrow_mut().remove(key) {
            Some(Var::Ready(v)) => v,
            _ => Value::Null,
        }
    }

    /// Expands a lazily expanded argument in the caller's scope.
    fn expand_raw(&self, pre: &Pre, key: &str) -> R<Value> {
        Ok(self.try_expand_raw(pre, key)?.unwrap_or(Value::Null))
    }

    fn try_expand_raw(&self, pre: &Pre, key: &str) -> R<Option<Value>> {
        let raw = match self.vars.borrow_mut().remove(key) {
            Some(Var::Raw(v)) => v,
            _ => return Ok(None),
        };
        let expanded = match self.outer {
            Some(outer) => pre.expand(raw, outer)?,
            None => pre.expand(raw, &Ctx::root())?,
        };
        Ok(Some(expanded))
    }

    /// Expands a `vars` entry in this scope, once.
    fn expand_lazy(&self, pre: &Pre, key: &str) -> R<()> {
        let var = {
            let mut vars = self.vars.borrow_mut();
            match vars.get_mut(key) {
                Some(v @ Var::Lazy(_)) => std::mem::replace(v, Var::Busy),
                Some(Var::Busy) => return fail("Too many nested macros. Check for cycles."),
                _ => return Ok(()),
            }
        };
        let Var::Lazy(raw) = var else { return Ok(()) };
        let value = pre
            .expand(raw, self)
            .within(note(format!("Variable '{key}'")))?;
        self.vars
            .borrow_mut()
            .insert(key.to_owned(), Var::Ready(value));
        Ok(())
    }

    /// The value of `%key%` in this scope or the scopes it extends.
    fn find(&self, pre: &Pre, key: &str) -> R<Option<Value>> {
        if self.vars.borrow().contains_key(key) {
            self.expand_lazy(pre, key)?;
            return Ok(match self.vars.borrow().get(key) {
                Some(Var::Ready(v)) => Some(v.clone()),
                _ => None,
            });
        }
        match self.outer {
            Some(outer) if !self.base => outer.find(pre, key),
            _ => Ok(None),
        }
    }

    fn contains(&self, pre: &Pre, key: &str) -> R<bool> {
        if self.vars.borrow().contains_key(key) {
            return Ok(true);
        }
        match self.outer {
            Some(outer) if !self.base => Ok(outer.find(pre, key)?.is_some()),
            _ => Ok(false),
        }
    }
}

/// A built-in macro's code; it reads its arguments from the scope it is given.
type BuiltinFn = fn(&Pre, &Ctx) -> R<Value>;

enum Body {
    Builtin(BuiltinFn),
    User(Value),
}

struct Param {
    name: String,
    /// Given when the call leaves the parameter out (a null default is no default).
    default: Option<Value>,
    required: bool,
}

struct Macro {
    name: String,
    params: Vec<Param>,
    min_args: usize,
    /// Whether arguments are expanded before the body runs; built-ins that choose what to
    /// expand (`if`, `and`, `select`, `import`) take them raw.
    auto_expand: bool,
    body: Body,
}

impl Macro {
    fn new(name: &str, params: &[Value], auto_expand: bool, body: Body) -> R<Macro> {
        let mut out = Vec::new();
        let mut optional_seen = false;
        for param in params {
            let p = match param {
                Value::String(s) => Param {
                    name: s.clone(),
                    default: None,
                    required: true,
                },
                Value::Object(obj) => {
                    let pname = match obj.get("name") {
                        None => return fail("Macro param object: 'name' not found"),
                        Some(Value::String(s)) => s.clone(),
                        Some(other) => {
                            return fail(format!(
                                "Macro param object name is {}, string expected",
                                type_name(other)
                            ))
                        }
                    };
                    let optional = match obj.get("optional") {
                        None => None,
                        Some(Value::Bool(b)) => Some(*b),
                        Some(other) => {
                            return fail(format!(
                                "Incorrect definition for parameter '{pname}' in macro '{name}'. \
                                 Expected optional parameter 'optional' to be boolean, but got {}!",
                                type_name(other)
                            ))
                        }
                    };
                    match (obj.get("default"), optional) {
                        (Some(_), Some(false)) => {
                            return fail(format!(
                                "Conflicting options provided for parameter '{pname}' in macro \
                                 '{name}'. Default was set, but the parameter is also explicitly \
                                 marked as not optional."
                            ))
                        }
                        (Some(d), _) => Param {
                            name: pname,
                            default: (!d.is_null()).then(|| d.clone()),
                            required: false,
                        },
                        (None, Some(true)) => Param {
                            name: pname,
                            default: None,
                            required: false,
                        },
                        (None, _) => Param {
                            name: pname,
                            default: None,
                            required: true,
                        },
                    }
                }
                other => {
                    return fail(format!(
                        "Macro param is {}, expected string/object",
                        type_name(other)
                    ))
                }
            };
            if p.required && optional_seen {
                return fail(format!(
                    "Incorrect defaults/optionals in macro {name}. All params after \
                     optional/default one should also be optional or have default value"
                ));
            }
            optional_seen |= !p.required;
            out.push(p);
        }
        Ok(Macro {
            name: name.to_owned(),
            min_args: out.iter().filter(|p| p.required).count(),
            params: out,
            auto_expand,
            body,
        })
    }
}

/// A `constDef` or global: expanded on first use.
enum Const {
    Raw(Value),
    Busy,
    Done(Value),
}

/// The preprocessor: macros and consts defined so far, the import cache, and the limits'
/// counters.
pub(crate) struct Pre<'e> {
    macros: RefCell<HashMap<String, Rc<Macro>>>,
    consts: RefCell<HashMap<String, Const>>,
    imports: RefCell<HashMap<String, Value>>,
    import: Import<'e>,
    nested: Cell<usize>,
    made: Cell<usize>,
    size_limit: usize,
    local_ips: Option<&'e [std::net::IpAddr]>,
}

/// Holds one level of nesting while it lives.
struct Nest<'p>(&'p Cell<usize>);

impl Drop for Nest<'_> {
    fn drop(&mut self) {
        self.0.set(self.0.get() - 1);
    }
}

impl<'e> Pre<'e> {
    fn new(env: &Env<'e>) -> Pre<'e> {
        let pre = Pre {
            macros: RefCell::default(),
            consts: RefCell::new(
                env.globals
                    .iter()
                    .map(|(k, v)| (k.clone(), Const::Raw(v.clone())))
                    .collect(),
            ),
            imports: RefCell::default(),
            import: env.import,
            nested: Cell::new(0),
            made: Cell::new(0),
            size_limit: env.size_limit,
            local_ips: env.local_ips,
        };
        builtins::install(&pre);
        pre
    }

    fn add_macro(&self, m: Macro) {
        self.macros.borrow_mut().insert(m.name.clone(), Rc::new(m));
    }

    fn macro_named(&self, name: &str) -> R<Rc<Macro>> {
        match self.macros.borrow().get(name) {
            Some(m) => Ok(Rc::clone(m)),
            None => fail(format!("Macro: '{name}' not found")),
        }
    }

    fn nest(&self) -> R<Nest<'_>> {
        let depth = self.nested.get() + 1;
        if depth >= NESTED_LIMIT {
            return fail("Too many nested macros. Check for cycles.");
        }
        self.nested.set(depth);
        Ok(Nest(&self.nested))
    }

    /// Counts `n` more values or bytes made against the size limit.
    fn charge(&self, n: usize) -> R<()> {
        let made = self.made.get().saturating_add(n);
        if made > self.size_limit {
            return fail(format!(
                "the expanded config exceeds {} values and string bytes",
                self.size_limit
            ));
        }
        self.made.set(made);
        Ok(())
    }

    /// Counts a copy of `v`.
    fn charge_copy(&self, v: &Value) -> R<()> {
        self.charge(value::measure(v).0)
    }

    fn macro_defs(&self, json: Value) -> R<()> {
        match self.expand(json, &Ctx::root())? {
            Value::Object(defs) => {
                for (name, def) in defs {
                    self.macro_def(&name, def).within(Step::Key(name.clone()))?;
                }
                Ok(())
            }
            Value::Array(items) => {
                for (i, item) in items.into_iter().enumerate() {
                    self.macro_defs(item).within(Step::Index(i))?;
                }
                Ok(())
            }
            _ => fail("config macros is not an array/object"),
        }
    }

    fn macro_def(&self, name: &str, def: Value) -> R<()> {
        let Value::Object(mut def) = def else {
            return fail(format!("'{name}' macro definition is not an object"));
        };
        let kind = match def.get("type") {
            None => return fail("macro definition: 'type' not found"),
            Some(Value::String(s)) => s.clone(),
            Some(other) => {
                return fail(format!(
                    "macro definition type is {}, string expected",
                    type_name(other)
                ))
            }
        };
        match kind.as_str() {
            "macroDef" => {
                let Some(result) = def.remove("result") else {
                    return fail("Macro definition: 'result' not found");
                };
                let params = match def.remove("params") {
                    None => Vec::new(),
                    Some(Value::Array(p)) => p,
                    Some(_) => return fail(format!("'{name}' macroDef params is not an array")),
                };
                self.add_macro(Macro::new(name, &params, true, Body::User(result))?);
            }
            "constDef" => {
                let Some(result) = def.remove("result") else {
                    return fail("constDef: 'result' not found");
                };
                self.consts
                    .borrow_mut()
                    .insert(name.to_owned(), Const::Raw(result));
            }
            other => return fail(format!("Unknown macro definition type: {other}")),
        }
        Ok(())
    }

    /// A const's value, expanding it on first use.
    fn const_value(&self, name: &str) -> R<Option<Value>> {
        let state = match self.consts.borrow_mut().get_mut(name) {
            None => return Ok(None),
            Some(c) => std::mem::replace(c, Const::Busy),
        };
        let value = match state {
            Const::Busy => return fail("Too many nested macros. Check for cycles."),
            Const::Done(v) => v,
            Const::Raw(raw) => self
                .expand(raw, &Ctx::root())
                .within(note(format!("Const '{name}'")))?,
        };
        self.consts
            .borrow_mut()
            .insert(name.to_owned(), Const::Done(value.clone()));
        Ok(Some(value))
    }

    /// The value of `%name%`: the scope's, else the const's.
    fn param(&self, name: &str, ctx: &Ctx) -> R<Value> {
        let found = match ctx.find(self, name)? {
            Some(v) => v,
            None => match self.const_value(name)? {
                Some(v) => v,
                None => return fail(format!("Param in string: '{name}' not found")),
            },
        };
        self.charge_copy(&found)?;
        Ok(found)
    }

    fn expand(&self, json: Value, ctx: &Ctx) -> R<Value> {
        let _nest = self.nest()?;
        self.charge(1)?;
        match json {
            Value::String(s) => self.expand_string(&s, ctx),
            Value::Object(map) => self.expand_object(map, ctx),
            Value::Array(items) => {
                let mut out = Vec::with_capacity(items.len());
                for (i, item) in items.into_iter().enumerate() {
                    out.push(self.expand(item, ctx).within(Step::Index(i))?);
                }
                Ok(Value::Array(out))
            }
            other => Ok(other),
        }
    }

    fn expand_object(&self, mut map: Map<String, Value>, ctx: &Ctx) -> R<Value> {
        let with_vars;
        let local = match map.remove("vars") {
            None => ctx,
            Some(Value::Object(vars)) => {
                with_vars = Ctx::extend(ctx, false);
                for (name, raw) in &vars {
                    with_vars.add(name, Var::Lazy(raw.clone()))?;
                }
                for name in vars.keys() {
                    with_vars.expand_lazy(self, name)?;
                }
                &with_vars
            }
            Some(other) => return fail(format!("vars is {}, expected object", type_name(&other))),
        };
        if let Some(kind) = map.get("type").cloned() {
            if let Value::String(kind) = self.expand(kind, local)? {
                let call = match kind.as_str() {
                    // Definitions are read where they are defined, not expanded.
                    "macroDef" | "constDef" => return Ok(Value::Object(map)),
                    "transform" => Some(builtins::transform as builtins::CallFn),
                    "process" => Some(builtins::process as builtins::CallFn),
                    "foreach" => Some(builtins::foreach as builtins::CallFn),
                    _ => None,
                };
                if let Some(call) = call {
                    return call(self, map, local).within(note(format!("Built-in '{kind}'")));
                }
                let found = self.macros.borrow().get(&kind).cloned();
                if let Some(m) = found {
                    return self
                        .call_object(&m, map, local)
                        .within(note(format!("Macro '{kind}'")));
                }
            }
        }
        let mut out = Map::new();
        for (key, item) in map {
            let step = Step::Key(key.clone());
            let entry = (|| {
                let Value::String(key) = self.expand(Value::String(key), local)? else {
                    return fail("Expanded key is not a string");
                };
                let item = self.expand(item, local)?;
                self.charge(key.len())?;
                out.insert(key, item);
                Ok(())
            })();
            entry.within(step)?;
        }
        Ok(Value::Object(out))
    }

    fn expand_string(&self, s: &str, ctx: &Ctx) -> R<Value> {
        let _nest = self.nest()?;
        let b = s.as_bytes();
        if b.first() != Some(&b'@') {
            return self.replace_params(b, ctx);
        }
        let (name, args) = match find_unescaped(b, b'(') {
            Some(open) => {
                if b.last() != Some(&b')') || open == b.len() - 1 {
                    return fail(format!("No closing bracket for call '{s}'"));
                }
                (&b[1..open], text::call_args(&b[open + 1..b.len() - 1])?)
            }
            None => (&b[1..], Vec::new()),
        };
        let name = match self.replace_params(name, ctx)? {
            Value::String(name) => name,
            other => {
                return fail(format!(
                    "Macro name is {}, string expected",
                    type_name(&other)
                ))
            }
        };
        let m = self.macro_named(&name)?;
        self.call_string(&m, &args, ctx)
            .within(note(format!("Macro in string '{name}'")))
    }

    /// Substitutes `%param%`s and drops escapes. A string that is one `%param%` and nothing
    /// else becomes the parameter's value, whatever its type.
    fn replace_params(&self, mut s: &[u8], ctx: &Ctx) -> R<Value> {
        if !s.contains(&b'%') && !s.contains(&b'\\') {
            self.charge(s.len())?;
            return Ok(Value::String(lossy(s)));
        }
        let mut buf = Vec::new();
        while !s.is_empty() {
            let Some(open) = unescape_until(s, &mut buf, b'%') else {
                break;
            };
            s = &s[open + 1..];
            let mut name = Vec::new();
            let Some(close) = unescape_until(s, &mut name, b'%') else {
                return fail(format!(
                    "Odd number of percent signs in string around '{}'",
                    lossy(s)
                ));
            };
            let name = lossy(&name);
            let value = self.param(&name, ctx)?;
            if buf.is_empty() && close == s.len() - 1 {
                return Ok(value);
            }
            let Value::String(text) = value else {
                return fail(format!("Param in string '{name}' is not a string"));
            };
            buf.extend_from_slice(text.as_bytes());
            s = &s[close + 1..];
        }
        self.charge(buf.len())?;
        Ok(Value::String(lossy(&buf)))
    }

    fn call_string(&self, m: &Macro, args: &[&[u8]], ctx: &Ctx) -> R<Value> {
        if args.len() < m.min_args {
            return fail(format!(
                "Too few arguments for macro {}. Expected at least {} got {}",
                m.name,
                m.min_args,
                args.len()
            ));
        }
        if args.len() > m.params.len() {
            return fail(format!(
                "Too many arguments for macro {}. Expected at most {} got {}",
                m.name,
                m.params.len(),
                args.len()
            ));
        }
        let scope = Ctx::extend(ctx, true);
        for (p, arg) in m.params.iter().zip(args) {
            let arg = lossy(arg);
            let var = if m.auto_expand {
                Var::Ready(self.expand_string(&arg, ctx)?)
            } else {
                Var::Raw(Value::String(arg))
            };
            scope.add(&p.name, var)?;
        }
        for p in &m.params[args.len()..] {
            if let Some(d) = &p.default {
                scope.add(&p.name, Var::Ready(d.clone()))?;
            }
        }
        self.run(m, &scope)
    }

    fn call_object(&self, m: &Macro, mut obj: Map<String, Value>, ctx: &Ctx) -> R<Value> {
        let scope = Ctx::extend(ctx, true);
        for p in &m.params {
            match obj.remove(&p.name) {
                None if p.required => {
                    return fail(format!(
                        "Macro call {}: '{}' parameter not found",
                        m.name, p.name
                    ))
                }
                None => {
                    if let Some(d) = &p.default {
                        scope.add(&p.name, Var::Ready(d.clone()))?;
                    }
                }
                Some(arg) if m.auto_expand => {
                    scope.add(&p.name, Var::Ready(self.expand(arg, ctx)?))?
                }
                Some(arg) => scope.add(&p.name, Var::Raw(arg))?,
            }
        }
        self.run(m, &scope)
    }

    fn run(&self, m: &Macro, scope: &Ctx) -> R<Value> {
        match &m.body {
            Body::Builtin(f) => f(self, scope),
            Body::User(result) => self.expand(result.clone(), scope),
        }
    }
}

#[cfg(test)]
#[path = "jsonm_tests.rs"]
mod tests;
