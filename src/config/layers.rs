//! Reading the settings' layers — the TOML file, then `SWITCHBOARD__…`
//! environment variables — into one tree, checked against the shape of
//! [`Settings`] (its JSON schema, derived from the types) before it is
//! deserialized.
//!
//! Deriving the shape from the types means every key, list and enum is
//! known without a hand-kept list: an unknown key is refused with the closest
//! valid one, an enum value with the valid ones, and an environment variable
//! is parsed as what its key holds (a list from comma-separated values, a
//! number, a flag). Every problem names where the value came from: the file,
//! or the environment variable.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value as Json;
use toml::Value;

use super::{ConfigError, Settings};
use crate::domain::closest;

/// Prefix of the environment variables that set keys (`SWITCHBOARD__LLM__MODEL`).
pub const ENV_PREFIX: &str = "SWITCHBOARD__";

/// Platforms `[access.platforms]` may name.
pub const ACCESS_PLATFORMS: [&str; 5] = ["discord", "feishu", "slack", "telegram", "whatsapp"];

/// The merged layers, and where each value came from.
pub(super) struct Layers {
    pub tree: toml::Table,
    /// The file read, if any.
    pub file: Option<PathBuf>,
    /// Dotted key → the environment variable that set it.
    pub from_env: BTreeMap<String, String>,
}

impl Layers {
    /// Where the value of `key` (dotted) came from, for messages.
    pub fn origin_of(&self, key: &str) -> String {
        let from_env = self.from_env.iter().find(|(set, _)| {
            key == set.as_str()
                || key.starts_with(&format!("{set}."))
                || set.starts_with(&format!("{key}."))
        });
        match (from_env, &self.file) {
            (Some((_, var)), _) => format!("environment variable {var}"),
            (None, Some(file)) => file.display().to_string(),
            (None, None) => "the built-in defaults".to_owned(),
        }
    }
}

/// Reads `file` (if any) and the environment `vars` into one tree, checking
/// each against the settings' shape.
pub(super) fn read(
    file: Option<&Path>,
    vars: impl IntoIterator<Item = (String, String)>,
) -> Result<Layers, ConfigError> {
    let schema = serde_json::to_value(schemars::schema_for!(Settings)).unwrap_or(Json::Null);
    let shape = Shape { root: &schema };
    let mut tree = toml::Table::new();
    if let Some(path) = file {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|err| ConfigError::Read {
            path: origin.clone(),
            reason: err.to_string(),
        })?;
        tree = toml::from_str(&text).map_err(|err| ConfigError::Read {
            path: origin.clone(),
            reason: format!("not valid TOML: {}", err.message()) + &toml_position(&text, &err),
        })?;
        shape.check_table(&tree, &mut Vec::new(), &schema, &origin)?;
    }
    let mut from_env = BTreeMap::new();
    let mut vars: Vec<(String, String)> = vars
        .into_iter()
        .filter(|(name, _)| name.starts_with(ENV_PREFIX))
        .collect();
    vars.sort();
    for (name, raw) in vars {
        let path: Vec<String> = name[ENV_PREFIX.len()..]
            .split("__")
            .map(str::to_ascii_lowercase)
            .collect();
        let value = shape.env_value(&path, &raw, &name)?;
        insert(&mut tree, &path, value, &name)?;
        from_env.insert(path.join("."), name);
    }
    Ok(Layers {
        tree,
        file: file.map(Path::to_path_buf),
        from_env,
    })
}

/// ` (line L, column C)` of a TOML error, when it has a position.
fn toml_position(text: &str, err: &toml::de::Error) -> String {
    let Some(span) = err.span() else {
        return String::new();
    };
    let before = &text[..span.start.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    format!(" (line {line}, column {column})")
}

/// Puts an environment value at `path`, over what the file said.
fn insert(
    tree: &mut toml::Table,
    path: &[String],
    value: Value,
    var: &str,
) -> Result<(), ConfigError> {
    let Some((last, parents)) = path.split_last() else {
        return Ok(());
    };
    let mut table = tree;
    for (depth, segment) in parents.iter().enumerate() {
        let entry = table
            .entry(segment.clone())
            .or_insert_with(|| Value::Table(toml::Table::new()));
        table = match entry {
            Value::Table(inner) => inner,
            _ => {
                return Err(ConfigError::At {
                    origin: format!("environment variable {var}"),
                    problem: format!(
                        "`{}` is not a section, so it has no key `{}`",
                        path[..=depth].join("."),
                        path[depth + 1..].join(".")
                    ),
                });
            }
        };
    }
    table.insert(last.clone(), value);
    Ok(())
}

/// What a key holds, read off the JSON schema.
enum Kind<'s> {
    /// A section with known keys (`open`: other keys allowed, each holding
    /// `values`: a map such as `[prices]`).
    Table {
        keys: Vec<(&'s str, &'s Json)>,
        values: Option<&'s Json>,
    },
    List(&'s Json),
    Scalar {
        types: Vec<&'s str>,
        allowed: Option<Vec<String>>,
        minimum: Option<f64>,
    },
    /// Anything (a schema that says nothing).
    Any,
}

/// Reads the settings' JSON schema.
struct Shape<'s> {
    root: &'s Json,
}

impl<'s> Shape<'s> {
    /// Follows a `$ref` into `$defs`.
    fn resolve(&self, schema: &'s Json) -> &'s Json {
        let mut schema = schema;
        for _ in 0..16 {
            let Some(reference) = schema.get("$ref").and_then(Json::as_str) else {
                break;
            };
            let name = reference.rsplit('/').next().unwrap_or_default();
            match self.root.get("$defs").and_then(|defs| defs.get(name)) {
                Some(target) => schema = target,
                None => break,
            }
        }
        schema
    }

    fn kind(&self, schema: &'s Json) -> Kind<'s> {
        let schema = self.resolve(schema);
        // `Option<T>` is `T` or null; documented enum variants are a
        // `oneOf` of constants.
        if let Some(options) = schema
            .get("anyOf")
            .or_else(|| schema.get("oneOf"))
            .and_then(Json::as_array)
        {
            let options: Vec<&Json> = options
                .iter()
                .map(|option| self.resolve(option))
                .filter(|option| option.get("type").and_then(Json::as_str) != Some("null"))
                .collect();
            let constants: Option<Vec<String>> = options
                .iter()
                .map(|option| {
                    option
                        .get("const")
                        .or_else(|| option.get("enum").and_then(|e| e.get(0)))
                        .and_then(Json::as_str)
                        .map(str::to_owned)
                })
                .collect();
            if let Some(constants) = constants.filter(|c| !c.is_empty()) {
                return Kind::Scalar {
                    types: vec!["string"],
                    allowed: Some(constants),
                    minimum: None,
                };
            }
            if let [only] = options[..] {
                return self.kind(only);
            }
            return Kind::Any;
        }
        let types: Vec<&str> = match schema.get("type") {
            Some(Json::String(single)) => vec![single.as_str()],
            Some(Json::Array(many)) => many.iter().filter_map(Json::as_str).collect(),
            _ => Vec::new(),
        };
        let types: Vec<&str> = types.into_iter().filter(|t| *t != "null").collect();
        if let Some(allowed) = schema.get("enum").and_then(Json::as_array) {
            return Kind::Scalar {
                types: vec!["string"],
                allowed: Some(
                    allowed
                        .iter()
                        .filter_map(Json::as_str)
                        .map(str::to_owned)
                        .collect(),
                ),
                minimum: None,
            };
        }
        match types.as_slice() {
            ["object"] => {
                let keys = schema
                    .get("properties")
                    .and_then(Json::as_object)
                    .map(|props| props.iter().map(|(k, v)| (k.as_str(), v)).collect())
                    .unwrap_or_default();
                let values = schema
                    .get("additionalProperties")
                    .filter(|extra| extra.is_object());
                Kind::Table { keys, values }
            }
            ["array"] => Kind::List(schema.get("items").unwrap_or(&Json::Null)),
            [] => Kind::Any,
            _ => Kind::Scalar {
                types,
                allowed: None,
                minimum: schema.get("minimum").and_then(Json::as_f64),
            },
        }
    }

    /// Checks a table of the file against `schema`; `path` is its key.
    fn check_table(
        &self,
        table: &toml::Table,
        path: &mut Vec<String>,
        schema: &'s Json,
        origin: &str,
    ) -> Result<(), ConfigError> {
        let Kind::Table { keys, values } = self.kind(schema) else {
            return Ok(());
        };
        for (key, value) in table {
            let known = keys.iter().find(|(name, _)| *name == key.as_str());
            let child = match (known, values) {
                (Some((_, child)), _) => *child,
                (None, Some(values)) => {
                    if path.join(".") == "access.platforms"
                        && !ACCESS_PLATFORMS.contains(&key.as_str())
                    {
                        return Err(unknown_platform(origin, key));
                    }
                    values
                }
                (None, None) => {
                    let names: Vec<&str> = keys.iter().map(|(name, _)| *name).collect();
                    return Err(unknown_key(origin, path, key, &names));
                }
            };
            path.push(key.clone());
            self.check_value(value, path, child, origin)?;
            path.pop();
        }
        Ok(())
    }

    fn check_value(
        &self,
        value: &Value,
        path: &mut Vec<String>,
        schema: &'s Json,
        origin: &str,
    ) -> Result<(), ConfigError> {
        let key = path.join(".");
        let wrong = |expected: &str| ConfigError::At {
            origin: origin.to_owned(),
            problem: format!("`{key}` must be {expected}, not {}", describe(value)),
        };
        match (self.kind(schema), value) {
            (Kind::Any, _) => Ok(()),
            (Kind::Table { .. }, Value::Table(table)) => {
                self.check_table(table, path, schema, origin)
            }
            (Kind::Table { .. }, _) => Err(wrong(&format!("a table (`[{key}]`)"))),
            (Kind::List(items), Value::Array(entries)) => {
                for (index, entry) in entries.iter().enumerate() {
                    path.push(index.to_string());
                    let checked = self.check_value(entry, path, items, origin);
                    path.pop();
                    checked?;
                }
                Ok(())
            }
            (Kind::List(_), _) => Err(wrong("a list, like [\"a\", \"b\"]")),
            (
                Kind::Scalar {
                    types,
                    allowed,
                    minimum,
                },
                value,
            ) => {
                let fits = match value {
                    Value::String(_) => types.contains(&"string"),
                    Value::Integer(_) => types.contains(&"integer") || types.contains(&"number"),
                    Value::Float(_) => types.contains(&"number"),
                    Value::Boolean(_) => types.contains(&"boolean"),
                    _ => false,
                };
                if !fits {
                    return Err(wrong(expected_of(&types)));
                }
                if let (Some(allowed), Value::String(given)) = (&allowed, value)
                    && !allowed.contains(given)
                {
                    return Err(ConfigError::At {
                        origin: origin.to_owned(),
                        problem: bad_choice(&key, given, allowed),
                    });
                }
                let number = match value {
                    Value::Integer(n) => Some(*n as f64),
                    Value::Float(n) => Some(*n),
                    _ => None,
                };
                if let (Some(minimum), Some(number)) = (minimum, number)
                    && number < minimum
                {
                    return Err(ConfigError::At {
                        origin: origin.to_owned(),
                        problem: format!("`{key}` must be at least {minimum}, not {number}"),
                    });
                }
                Ok(())
            }
        }
    }

    /// Parses an environment variable's value as what `path` holds.
    fn env_value(&self, path: &[String], raw: &str, var: &str) -> Result<Value, ConfigError> {
        let origin = format!("environment variable {var}");
        let mut schema = self.root;
        for (depth, segment) in path.iter().enumerate() {
            let walked = &path[..depth];
            schema = match self.kind(schema) {
                Kind::Table { keys, values } => {
                    match (
                        keys.iter().find(|(name, _)| *name == segment.as_str()),
                        values,
                    ) {
                        (Some((_, child)), _) => *child,
                        (None, Some(values)) => {
                            if walked.join(".") == "access.platforms"
                                && !ACCESS_PLATFORMS.contains(&segment.as_str())
                            {
                                return Err(unknown_platform(&origin, segment));
                            }
                            values
                        }
                        (None, None) => {
                            let names: Vec<&str> = keys.iter().map(|(name, _)| *name).collect();
                            return Err(unknown_key(&origin, walked, segment, &names));
                        }
                    }
                }
                _ => {
                    return Err(ConfigError::At {
                        origin,
                        problem: format!(
                            "`{}` is not a section, so it has no key `{segment}`",
                            walked.join(".")
                        ),
                    });
                }
            };
        }
        let key = path.join(".");
        match self.kind(schema) {
            Kind::Table { .. } => Err(ConfigError::At {
                origin,
                problem: format!("`{key}` is a section: set its keys one by one ({var}__KEY)"),
            }),
            Kind::List(items) => {
                let entries = raw
                    .split(',')
                    .map(str::trim)
                    .filter(|entry| !entry.is_empty())
                    .map(|entry| self.env_scalar(items, entry, &key, &origin))
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(Value::Array(entries))
            }
            _ => self.env_scalar(schema, raw, &key, &origin),
        }
    }

    fn env_scalar(
        &self,
        schema: &'s Json,
        raw: &str,
        key: &str,
        origin: &str,
    ) -> Result<Value, ConfigError> {
        let Kind::Scalar { types, allowed, .. } = self.kind(schema) else {
            return Ok(Value::String(raw.to_owned()));
        };
        let wrong = || ConfigError::At {
            origin: origin.to_owned(),
            problem: format!("`{key}` must be {}, not \"{raw}\"", expected_of(&types)),
        };
        if types.contains(&"string") {
            if let Some(allowed) = allowed
                && !allowed.iter().any(|choice| choice == raw)
            {
                return Err(ConfigError::At {
                    origin: origin.to_owned(),
                    problem: bad_choice(key, raw, &allowed),
                });
            }
            return Ok(Value::String(raw.to_owned()));
        }
        if types.contains(&"boolean") {
            return match raw.to_ascii_lowercase().as_str() {
                "true" => Ok(Value::Boolean(true)),
                "false" => Ok(Value::Boolean(false)),
                _ => Err(wrong()),
            };
        }
        if types.contains(&"integer") {
            return raw.parse().map(Value::Integer).map_err(|_| wrong());
        }
        if types.contains(&"number") {
            return raw.parse().map(Value::Float).map_err(|_| wrong());
        }
        Err(wrong())
    }
}

/// "a whole number" and the like, for the JSON types a key takes.
fn expected_of(types: &[&str]) -> &'static str {
    if types.contains(&"string") {
        "a string (in quotes)"
    } else if types.contains(&"integer") {
        "a whole number"
    } else if types.contains(&"number") {
        "a number"
    } else if types.contains(&"boolean") {
        "true or false"
    } else {
        "a value of another type"
    }
}

fn describe(value: &Value) -> String {
    match value {
        Value::String(text) => format!("the string \"{text}\""),
        Value::Integer(n) => format!("the number {n}"),
        Value::Float(n) => format!("the number {n}"),
        Value::Boolean(b) => format!("{b}"),
        Value::Datetime(d) => format!("the date {d}"),
        Value::Array(_) => "a list".to_owned(),
        Value::Table(_) => "a table".to_owned(),
    }
}

fn bad_choice(key: &str, given: &str, allowed: &[String]) -> String {
    let choices: Vec<String> = allowed.iter().map(|c| format!("\"{c}\"")).collect();
    format!(
        "`{key}` cannot be \"{given}\"{}; valid values: {}",
        closest(given, allowed.iter().map(String::as_str))
            .map(|best| format!(" (did you mean \"{best}\"?)"))
            .unwrap_or_default(),
        choices.join(", ")
    )
}

fn unknown_key(origin: &str, path: &[String], key: &str, names: &[&str]) -> ConfigError {
    let section = if path.is_empty() {
        "at the top level".to_owned()
    } else {
        format!("in [{}]", path.join("."))
    };
    let hint = match closest(key, names.iter().copied()) {
        Some(best) => format!("did you mean `{best}`?"),
        None if names.is_empty() => "this section takes no keys".to_owned(),
        None => format!("valid keys: {}", names.join(", ")),
    };
    ConfigError::At {
        origin: origin.to_owned(),
        problem: format!("unknown key `{key}` {section}; {hint}"),
    }
}

fn unknown_platform(origin: &str, name: &str) -> ConfigError {
    let hint = closest(name, ACCESS_PLATFORMS.iter().copied())
        .map(|best| format!("did you mean `{best}`? "))
        .unwrap_or_default();
    ConfigError::At {
        origin: origin.to_owned(),
        problem: format!(
            "unknown platform `{name}` in [access.platforms]; {hint}platforms: {}",
            ACCESS_PLATFORMS.join(", ")
        ),
    }
}
