//! Loading: the file merged with its `TIDEMARK__` overrides, then typed,
//! section by section, so that one load reports every problem.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use tidemark_schema::event::EventConfig;
use tidemark_schema::period::{Billing, CapacityTiers};
use tidemark_schema::route::{Router, RouterConfig};

use super::check::{self, Effective, Problem, ValueOrigin, ValueOrigins};
use super::env::{ENV_PREFIX, apply_env, fill_worker_id, strip_env_prefix};
use super::error::LoadError;
use super::schema::json_schema;
use super::sections::Config;

/// A config file merged with its environment overrides, before typing: the
/// tree, where each key came from, and the problems found so far.
#[derive(Debug)]
struct Merged {
    root: toml::Table,
    origins: ValueOrigins,
    problems: Vec<Problem>,
}

impl Merged {
    /// Parses `text`, applies the `TIDEMARK__*` overrides of `env`, fills
    /// derived defaults, and takes out (as problems) the keys no type uses.
    fn new(text: &str, path: &str, env: &BTreeMap<String, String>) -> Result<Merged, LoadError> {
        let mut root: toml::Table =
            text.parse()
                .map_err(|e: toml::de::Error| LoadError::Syntax {
                    path: path.to_string(),
                    message: e.to_string(),
                })?;
        let mut origins = ValueOrigins::of_file(text, path);
        let mut problems = Vec::new();
        // Names are case insensitive (`tidemark__source__stream` works);
        // when two spellings of one name are set, the upper-case one wins
        // (applied last).
        let mut vars: Vec<(&String, &String)> = env.iter().collect();
        vars.sort_by_key(|(var, _)| var.starts_with(ENV_PREFIX));
        for (var, value) in vars {
            if let Some(rest) = strip_env_prefix(var) {
                let origin = ValueOrigin::Env { var: var.clone() };
                match apply_env(&mut root, rest, value) {
                    Ok(key) => origins.set(&key, origin),
                    Err(message) => problems.push(Problem {
                        key: rest
                            .split("__")
                            .map(str::to_ascii_lowercase)
                            .collect::<Vec<_>>()
                            .join("."),
                        value: Some(value.clone()),
                        origin: Some(origin),
                        message,
                    }),
                }
            }
        }
        if fill_worker_id(&mut root, env) {
            origins.set(
                "source.worker_id",
                ValueOrigin::Derived {
                    what: "ECS task id or host name".into(),
                },
            );
        }
        for mut p in check::unknown_keys(&mut root, &json_schema())
            .into_iter()
            .chain(check::contradictions(&root))
        {
            p.origin = origins.of(&p.key).cloned();
            problems.push(p);
        }
        Ok(Merged {
            root,
            origins,
            problems,
        })
    }

    /// A problem at `key` with its value and origin.
    fn problem(&self, key: String, message: String) -> Problem {
        Problem {
            value: check::value_at(&self.root, &key),
            origin: self.origins.of(&key).cloned(),
            key,
            message,
        }
    }

    /// The typed config, or every problem: a value serde refuses is noted
    /// and taken out, and the rest is typed again, so one run reports the
    /// bad values of every section, not only the first.
    fn into_config(mut self) -> Result<Config, LoadError> {
        let mut removed: Vec<String> = Vec::new();
        let mut typed = None;
        // Bounded: each round removes a key (or stops).
        for _ in 0..64 {
            match Config::typed(&self.root) {
                Ok(c) => {
                    typed = Some(c);
                    break;
                }
                Err(LoadError::Key { key, message }) => {
                    // A value taken out inside a tagged table comes back
                    // as that table's missing field (`source.type` for the
                    // `source.initial_position.type` taken out): the same key.
                    let key = match key.rsplit_once('.') {
                        Some((table, field)) if !removed.contains(&key) => removed
                            .iter()
                            .find(|r| {
                                r.starts_with(&format!("{table}."))
                                    && r.ends_with(&format!(".{field}"))
                            })
                            .cloned()
                            .unwrap_or(key),
                        _ => key,
                    };
                    // A required value we took out: already reported.
                    if !removed.contains(&key) {
                        let p = self.problem(key.clone(), message);
                        self.problems.push(p);
                    }
                    let mut k = key.as_str();
                    // Take the value out, or (missing) its section, to go on.
                    loop {
                        if check::remove_at(&mut self.root, k) {
                            removed.push(k.to_string());
                            break;
                        }
                        match k.rfind('.') {
                            Some(i) => k = &k[..i],
                            None => return Err(LoadError::Invalid(self.problems)),
                        }
                    }
                    removed.push(key);
                }
                Err(e) => return Err(e),
            }
        }
        // The cross-field checks run on what typed (the values taken out
        // read as their defaults), so they report alongside the rest.
        if let Some(config) = &typed {
            for (key, message) in config.problems() {
                // One problem a key: a contradiction the raw file showed is
                // not said again by the typed checks.
                if self.problems.iter().any(|p| p.key == key) {
                    continue;
                }
                if !removed
                    .iter()
                    .any(|r| key == *r || key.starts_with(&format!("{r}.")))
                {
                    let p = self.problem(key, message);
                    self.problems.push(p);
                }
            }
        }
        match typed {
            Some(config) if self.problems.is_empty() => Ok(config),
            _ => Err(LoadError::Invalid(self.problems)),
        }
    }
}

impl Config {
    /// Loads `path` (if given), applies `TIDEMARK__*` overrides from `env`,
    /// and validates. `env` is passed in so tests need not touch the process
    /// environment.
    pub fn load(path: Option<&Path>, env: &BTreeMap<String, String>) -> Result<Config, LoadError> {
        let (text, shown) = read(path)?;
        Config::from_toml(&text, &shown, env)
    }

    /// Parses TOML text with environment overrides; see [`Config::load`].
    pub fn from_toml(
        text: &str,
        path: &str,
        env: &BTreeMap<String, String>,
    ) -> Result<Config, LoadError> {
        Merged::new(text, path, env)?.into_config()
    }

    /// What loads but is likely a mistake, each with its key, value and
    /// source (a retention shorter than a period, a `time_bucket` bucket
    /// longer than the period): `config check` prints them. Read from the
    /// merged file and variables, so they show beside any problem.
    pub(crate) fn warnings(path: Option<&Path>, env: &BTreeMap<String, String>) -> Vec<Problem> {
        let Ok((text, shown)) = read(path) else {
            return Vec::new();
        };
        let Ok(merged) = Merged::new(&text, &shown, env) else {
            return Vec::new();
        };
        let schema = merged.root.get("schema").and_then(|v| {
            let mut t = v.as_table()?.clone();
            // Read beside the router's settings, not by them.
            for key in ["tiers", "billing", "event"] {
                t.remove(key);
            }
            toml::Value::Table(t).try_into::<RouterConfig>().ok()
        });
        schema
            .map(|s| s.warnings())
            .unwrap_or_default()
            .into_iter()
            .map(|(key, message)| merged.problem(format!("schema.{key}"), message))
            .collect()
    }

    /// Every key of the effective config with its value and where it came
    /// from (file and line, environment variable, or default); fails as
    /// [`Config::load`] does.
    pub(crate) fn effective(
        path: Option<&Path>,
        env: &BTreeMap<String, String>,
    ) -> Result<Vec<Effective>, LoadError> {
        let (text, shown) = read(path)?;
        Config::from_toml(&text, &shown, env)?;
        let merged = Merged::new(&text, &shown, env)?;
        Ok(check::effective(
            &merged.root,
            &merged.origins,
            &json_schema(),
        ))
    }

    /// The event and router settings alone, for the commands that only
    /// route (`key`, `plan`): the other sections may be absent, and are
    /// checked only for unknown keys.
    pub(crate) fn load_router(
        path: Option<&Path>,
        env: &BTreeMap<String, String>,
    ) -> Result<RouterConfig, LoadError> {
        Ok(Config::load_routing(path, env)?.0)
    }

    /// [`Config::load_router`] with `schema.tiers` and `schema.billing`, for
    /// `plan`, which judges a config's capacity.
    pub(crate) fn load_routing(
        path: Option<&Path>,
        env: &BTreeMap<String, String>,
    ) -> Result<(RouterConfig, SchemaExtras), LoadError> {
        #[derive(Deserialize)]
        struct Routing {
            #[serde(default)]
            event: EventConfig,
            schema: RouterConfig,
        }
        let (text, shown) = read(path)?;
        let mut merged = Merged::new(&text, &shown, env)?;
        if !merged.problems.is_empty() {
            return Err(LoadError::Invalid(merged.problems));
        }
        let mut routing = toml::Table::new();
        for section in ["event", "schema"] {
            if let Some(v) = merged.root.remove(section) {
                routing.insert(section.into(), v);
            }
        }
        let mut extras = toml::Table::new();
        if let Some(toml::Value::Table(schema)) = routing.get_mut("schema") {
            for key in ["tiers", "billing"] {
                if let Some(v) = schema.remove(key) {
                    extras.insert(key.to_string(), v);
                }
            }
        }
        let extras: SchemaExtras =
            strict(toml::Value::Table(extras), "schema.").map_err(|e| match e {
                LoadError::Key { key, message } => {
                    LoadError::Invalid(vec![merged.problem(key, message)])
                }
                e => e,
            })?;
        merged.root = routing;
        let r: Routing =
            strict(toml::Value::Table(merged.root.clone()), "").map_err(|e| match e {
                LoadError::Key { key, message } => {
                    LoadError::Invalid(vec![merged.problem(key, message)])
                }
                e => e,
            })?;
        let mut schema = r.schema;
        schema.event = r.event;
        Router::new(schema.clone())
            .map_err(|e| LoadError::Invalid(vec![merged.problem(e.key_path(), e.to_string())]))?;
        Ok((schema, extras))
    }

    /// The typed config of a merged tree (serde's first error only).
    fn typed(root: &toml::Table) -> Result<Config, LoadError> {
        let mut root = root.clone();
        // Tiers and billing live in [schema] for users, but are maintenance
        // settings, not the router's: lift them out before the router's
        // strict (deny_unknown_fields) parse sees them.
        let mut extras = toml::Table::new();
        if let Some(toml::Value::Table(schema)) = root.get_mut("schema") {
            for key in ["tiers", "billing"] {
                if let Some(v) = schema.remove(key) {
                    extras.insert(key.to_string(), v);
                }
            }
        }
        let extras: SchemaExtras = strict(toml::Value::Table(extras), "schema.")?;
        let mut config: Config = strict(toml::Value::Table(root), "")?;
        config.tiers = extras.tiers;
        config.billing = extras.billing;
        config.schema.event = config.event.clone();
        Ok(config)
    }
}

/// The file's text and its name as shown in messages.
fn read(path: Option<&Path>) -> Result<(String, String), LoadError> {
    let text = match path {
        Some(p) => std::fs::read_to_string(p).map_err(|source| LoadError::Read {
            path: p.display().to_string(),
            source,
        })?,
        None => String::new(),
    };
    let shown = path.map_or_else(|| "(no file)".to_string(), |p| p.display().to_string());
    Ok((text, shown))
}

/// Tiers and billing, read from `[schema]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SchemaExtras {
    /// `schema.tiers`.
    #[serde(default)]
    pub(crate) tiers: CapacityTiers,
    /// `schema.billing`.
    #[serde(default)]
    pub(crate) billing: Billing,
}

/// Deserializes `value`, turning errors into [`LoadError::Key`] with the
/// dotted path of the key (under `prefix`).
fn strict<T: serde::de::DeserializeOwned>(
    value: toml::Value,
    prefix: &str,
) -> Result<T, LoadError> {
    // Kept to find the field a complaint is about (see `check::locate`).
    let searched = value.clone();
    serde_path_to_error::deserialize(value).map_err(|e| {
        let message = e.inner().to_string();
        let mut key = e.path().to_string();
        if let Some(leaf) = check::locate(&searched, &key, &message) {
            key = leaf;
        }
        // Internally tagged sections (source) report the section, not the
        // field: name the field too.
        if let Some(field) = backticked_after(&message, "unknown field ")
            .or_else(|| backticked_after(&message, "missing field "))
            && !key.ends_with(field)
        {
            key = if key == "." {
                field.to_string()
            } else {
                format!("{key}.{field}")
            };
        }
        let key = match (key.as_str(), prefix) {
            (".", "") => "(top level)".to_string(),
            (".", p) => p.trim_end_matches('.').to_string(),
            (k, p) => format!("{p}{k}"),
        };
        LoadError::Key {
            key,
            message: check::humanize(&message),
        }
    })
}

/// The first `` `name` `` after `marker` in `message`.
fn backticked_after<'a>(message: &'a str, marker: &str) -> Option<&'a str> {
    let rest = &message[message.find(marker)? + marker.len()..];
    rest.strip_prefix('`')?.split('`').next()
}

/// Variables of `env` that look meant as overrides but are ignored (one
/// underscore after `TIDEMARK`, or lower case), each with the name to use.
pub(crate) fn env_warnings(env: &BTreeMap<String, String>) -> Vec<String> {
    let schema = json_schema();
    let sections: Vec<&str> = schema["properties"]
        .as_object()
        .map(|p| p.keys().map(String::as_str).collect())
        .unwrap_or_default();
    check::env_warnings(env, &sections)
}
