//! The parse state every reader shares: where in the file it is, what it has built so far,
//! and how it reports a refusal or a warning at that place.

use std::collections::HashMap;

use serde_json::{Map, Value};

use crate::error::{ConfigError, Path, Seg};
use crate::model::*;
use crate::source::Source;

pub(super) type Result<T> = std::result::Result<T, ConfigError>;
pub(super) type Object = Map<String, Value>;

/// Where a named handle is: defined but not yet built (its definition and where it is),
/// being built, or built.
pub(super) enum Named<'a> {
    Pending(&'a Value, Vec<Seg>),
    Building,
    Done(Vec<Target>),
}

/// What follows the type of a handle: nothing (`"NullRoute"`), the text after `|`, or the
/// handle's object.
#[derive(Clone, Copy)]
pub(super) enum Args<'a> {
    None,
    Str(&'a str),
    Object(&'a Object),
}

/// What parsing has built so far and where in the file it is.
pub(super) struct Builder<'a> {
    pub(super) src: &'a Source,
    pub(super) pools_json: Option<&'a Object>,
    pub(super) pools: Vec<Pool>,
    pub(super) pool_ids: HashMap<String, PoolId>,
    pub(super) routes: Vec<Route>,
    pub(super) named: HashMap<String, Named<'a>>,
    /// Named handles being built, outermost first (to name a cycle).
    pub(super) building: Vec<String>,
    pub(super) path: Vec<Seg>,
    pub(super) warnings: Vec<String>,
    /// Each BigValueRoute built and where it is, for the placement check.
    pub(super) big_values: Vec<(RouteId, Vec<Seg>)>,
    /// The runtime variables file, and its JSON once a WeightedCh3Rv asked for it.
    pub(super) runtime_vars: Option<crate::jsonm::RuntimeVars<'a>>,
    pub(super) rv_data: Option<Option<serde_json::Value>>,
}

impl<'a> Builder<'a> {
    pub(super) fn fail<T>(&self, message: impl Into<String>) -> Result<T> {
        self.fail_at(self.path.clone(), message)
    }

    /// Like [`Self::fail`], at `path` rather than where the reader is now.
    pub(super) fn fail_at<T>(&self, path: Vec<Seg>, message: impl Into<String>) -> Result<T> {
        let path = Path(path);
        let (line, column) = self.src.locate(&path).unwrap_or((0, 0));
        Err(ConfigError {
            file: self.src.name.clone(),
            line,
            column,
            path,
            message: message.into(),
        })
    }

    pub(super) fn warn(&mut self, message: impl Into<String>) {
        let path = Path(self.path.clone());
        let at = match self.src.locate(&path) {
            Some((line, _)) => format!("{}:{line}", self.src.name),
            None => self.src.name.clone(),
        };
        self.warnings
            .push(format!("{at}: at {path}: {}", message.into()));
    }

    /// Runs `f` with `seg` appended to the current path.
    pub(super) fn at<T>(&mut self, seg: Seg, f: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        self.path.push(seg);
        let result = f(self);
        self.path.pop();
        result
    }

    pub(super) fn key<T>(
        &mut self,
        key: &str,
        f: impl FnOnce(&mut Self) -> Result<T>,
    ) -> Result<T> {
        self.at(Seg::Key(key.to_owned()), f)
    }

    pub(super) fn add(&mut self, route: Route) -> Vec<Target> {
        self.routes.push(route);
        vec![Target::Route(self.routes.len() - 1)]
    }
}
