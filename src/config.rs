//! Typed settings, layered: built-in defaults, then a TOML file, then
//! `SWITCHBOARD__SECTION__KEY` environment variables.
//!
//! Each feature owns its settings (`llm::settings`, `agent::settings`,
//! `session::settings`, `tools::settings`, `media::settings`,
//! `store::settings`, the adapters' crates) and checks them itself; this
//! module assembles them into [`Settings`], holds the settings of the
//! floors above the features (the HTTP server, the API, the console, the
//! logs), reads the layers and reports a mistake once, naming the file or
//! variable, the key and what would be valid.
//!
//! Secrets are never written in the file: the file names the environment
//! variable that holds each one (`api_key_env`, `keys_env`), and they are read
//! once at start into [`secrecy::SecretString`]s.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use schemars::JsonSchema;
use secrecy::SecretString;
use serde::Deserialize;

use crate::agent::settings::{AgentCacheSettings, AgentSettings, ContextSettings, LimitSettings};
use crate::domain::{InvalidSetting, setting};
use crate::llm::settings::LlmSettings;
use crate::media::budget::MediaBudget;
use crate::media::settings::MediaSettings;
use crate::session::settings::{AccessSettings, RunnerSettings, ServiceSettings, SessionSettings};
use crate::store::settings::DatabaseSettings;
use crate::tools::settings::{MemorySettings, ToolSettings};
use crate::tools::tasks::TaskSettings;

mod layers;

pub use layers::{ACCESS_PLATFORMS, ENV_PREFIX};

/// Why the settings could not be loaded. Each message is complete (where,
/// which key, what would be valid); none has a `source()` to repeat.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read or is not TOML.
    #[error("cannot read the configuration file {path}: {reason}")]
    Read { path: String, reason: String },
    /// A key or value of the file (or of an environment variable, named in
    /// `origin`) is wrong.
    #[error("{origin}: {problem}")]
    At { origin: String, problem: String },
    /// A value that parses but makes no sense.
    #[error("invalid setting `{key}`: {reason}")]
    Invalid { key: &'static str, reason: String },
}

impl From<InvalidSetting> for ConfigError {
    fn from(invalid: InvalidSetting) -> Self {
        Self::Invalid {
            key: invalid.key,
            reason: invalid.reason,
        }
    }
}

/// All settings.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    pub server: ServerSettings,
    pub database: DatabaseSettings,
    pub llm: LlmSettings,
    pub agent: AgentSettings,
    pub agent_cache: AgentCacheSettings,
    pub sessions: SessionSettings,
    pub access: AccessSettings,
    pub runner: RunnerSettings,
    pub limits: LimitSettings,
    pub context: ContextSettings,
    /// Prices per model (US dollars per million tokens), for cost reports.
    pub prices: std::collections::BTreeMap<String, crate::usage::Price>,
    pub api: ApiSettings,
    pub console: ConsoleSettings,
    pub tools: ToolSettings,
    /// Long-term memory per person (the `memory` tool and `/memory`).
    pub memory: MemorySettings,
    /// Scheduled, recurring and background tasks.
    pub tasks: TaskSettings,
    /// MCP tool servers whose tools join the agent's toolset.
    pub mcp: crate::tools::mcp::McpSettings,
    /// Photos and files sent to the bot (blob store, limits, vision).
    pub media: MediaSettings,
    pub log: LogSettings,
    /// Telegram bot; the section's presence enables it.
    pub telegram: Option<switchboard_telegram::TelegramSettings>,
    /// Discord bot; the section's presence enables it.
    pub discord: Option<switchboard_discord::DiscordSettings>,
    /// Feishu/Lark app; the section's presence enables it.
    pub feishu: Option<switchboard_feishu::FeishuSettings>,
    /// Slack app (Events API or Socket Mode); the section's presence
    /// enables it.
    pub slack: Option<switchboard_slack::SlackSettings>,
    /// WhatsApp Business Cloud API app; the section's presence enables it.
    pub whatsapp: Option<switchboard_whatsapp::WhatsAppSettings>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ServerSettings {
    /// Address the HTTP server listens on.
    pub bind: String,
    /// How long shutdown waits for running turns.
    #[serde(
        rename = "shutdown_grace_secs",
        deserialize_with = "setting::secs::deserialize"
    )]
    #[schemars(with = "u64")]
    pub shutdown_grace: Duration,
    /// Names this instance in the database's lease and claim rows; unique
    /// per running instance, and the same across its restarts so that a
    /// restart takes its own unfinished work back at once. Default: the
    /// host name and the port of `bind`.
    pub instance_id: Option<String>,
    /// Whether `GET /metrics` (Prometheus) is served, without a key, on
    /// `bind`.
    pub metrics: bool,
}

impl Default for ServerSettings {
    fn default() -> Self {
        Self {
            bind: "127.0.0.1:8080".to_owned(),
            shutdown_grace: Duration::from_secs(10),
            instance_id: None,
            metrics: true,
        }
    }
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ApiSettings {
    /// Serve the OpenAI-compatible API.
    pub enabled: bool,
    /// Name of the environment variable holding accepted bearer keys
    /// (comma-separated). Each acts only for the users and sessions it
    /// created itself; they are told apart by position (`keys_env.1`, …).
    /// With no key here nor in `keys`, no key is required (keep `bind` on
    /// loopback then).
    pub keys_env: String,
    /// Named keys (`[api.keys.NAME]`): where each is read from and which
    /// `user` values it may act for.
    pub keys: std::collections::BTreeMap<String, NamedKeySettings>,
    /// Largest request body accepted.
    pub max_body_bytes: usize,
    /// Longest a request waits for its turn's reply.
    #[serde(
        rename = "reply_timeout_secs",
        deserialize_with = "setting::secs::deserialize"
    )]
    #[schemars(with = "u64")]
    pub reply_timeout: Duration,
    /// Whether a client's system or developer message (Responses:
    /// `instructions`) reaches its turns, framed as the client's after the
    /// operator's system prompt; `false`: accepted and ignored.
    pub client_instructions: bool,
}

impl Default for ApiSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            keys_env: "SWITCHBOARD_API_KEYS".to_owned(),
            keys: std::collections::BTreeMap::new(),
            max_body_bytes: 1024 * 1024,
            reply_timeout: Duration::from_secs(600),
            client_instructions: true,
        }
    }
}

/// One named API key (`[api.keys.NAME]`).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NamedKeySettings {
    /// The environment variable holding the key.
    pub env: String,
    /// The `user` values the key may act for, shared with every other key
    /// that lists them. Absent: the key acts only for the users and
    /// sessions it created itself.
    #[serde(default)]
    pub users: Option<Vec<String>>,
}

/// An accepted API key, read from the environment: its name (never the key
/// itself) and the users it may act for.
#[derive(Debug, Clone)]
pub struct ApiKey {
    /// `NAME` of `[api.keys.NAME]`, or `keys_env.N` for the N-th key of
    /// `keys_env`.
    pub name: String,
    pub secret: SecretString,
    /// The `user` values it may act for; `None`: only those it created.
    pub users: Option<Vec<String>>,
}

/// Longest name of a named API key.
const MAX_KEY_NAME: usize = 64;

impl ApiSettings {
    /// The accepted keys, read from the environment.
    ///
    /// # Errors
    /// A named key whose environment variable is unset or empty.
    pub fn keys(&self) -> Result<Vec<ApiKey>, ConfigError> {
        let mut keys: Vec<ApiKey> = std::env::var(&self.keys_env)
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|key| !key.is_empty())
            .enumerate()
            .map(|(index, key)| ApiKey {
                name: format!("keys_env.{}", index + 1),
                secret: SecretString::from(key.to_owned()),
                users: None,
            })
            .collect();
        for (name, named) in &self.keys {
            let secret = std::env::var(&named.env).unwrap_or_default();
            if secret.trim().is_empty() {
                return Err(ConfigError::Invalid {
                    key: "api.keys",
                    reason: format!(
                        "the environment variable `{}` of key `{name}` is unset or empty",
                        named.env
                    ),
                });
            }
            keys.push(ApiKey {
                name: name.clone(),
                secret: SecretString::from(secret.trim().to_owned()),
                users: named.users.clone(),
            });
        }
        Ok(keys)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |reason: String| ConfigError::Invalid {
            key: "api.keys",
            reason,
        };
        for (name, named) in &self.keys {
            let well_formed = !name.is_empty()
                && name.len() <= MAX_KEY_NAME
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            if !well_formed {
                return Err(invalid(format!(
                    "key name `{name}` must be 1 to {MAX_KEY_NAME} letters, digits, `_` or `-`"
                )));
            }
            if named.env.trim().is_empty() {
                return Err(invalid(format!("key `{name}` needs `env`")));
            }
            if let Some(users) = &named.users {
                if users.is_empty() {
                    return Err(invalid(format!(
                        "key `{name}`: `users` must not be empty (leave it out for a key \
                         that acts only for the users it creates)"
                    )));
                }
                if let Some(bad) = users
                    .iter()
                    .find(|user| user.trim().is_empty() || user.chars().any(char::is_control))
                {
                    return Err(invalid(format!("key `{name}`: invalid user `{bad}`")));
                }
            }
        }
        Ok(())
    }
}

/// The operators' web console (`/console`).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ConsoleSettings {
    /// Serve the console at `/console`.
    pub enabled: bool,
    /// The argon2 hash of the login password (`switchboard console-hash`
    /// prints one); absent: no password login, only the admin key.
    pub password_hash: Option<String>,
    /// Name of the environment variable holding an admin bearer key, sent
    /// as `Authorization: Bearer KEY` (optional).
    pub admin_key_env: String,
    /// Name of the environment variable holding the secret that signs the
    /// session cookies (at least 32 characters; the same on every instance
    /// sharing the database). Required when the console is enabled.
    pub secret_env: String,
    /// Mark the session cookie `Secure` (set it when the console is reached
    /// over HTTPS).
    pub secure_cookie: bool,
    /// How long a login lasts, in hours.
    #[serde(
        rename = "session_hours",
        deserialize_with = "setting::hours::deserialize"
    )]
    #[schemars(with = "u64")]
    pub session_lifetime: Duration,
}

impl Default for ConsoleSettings {
    fn default() -> Self {
        Self {
            enabled: false,
            password_hash: None,
            admin_key_env: "SWITCHBOARD_CONSOLE_KEY".to_owned(),
            secret_env: "SWITCHBOARD_CONSOLE_SECRET".to_owned(),
            secure_cookie: false,
            session_lifetime: Duration::from_secs(12 * 3600),
        }
    }
}

impl ConsoleSettings {
    fn validate(&self) -> Result<(), ConfigError> {
        if let Some(hash) = &self.password_hash
            && argon2::PasswordHash::new(hash.trim()).is_err()
        {
            return Err(ConfigError::Invalid {
                key: "console.password_hash",
                reason: "not an argon2 hash; make one with `switchboard console-hash`".to_owned(),
            });
        }
        if !(Duration::from_secs(3600)..=Duration::from_secs(720 * 3600))
            .contains(&self.session_lifetime)
        {
            return Err(ConfigError::Invalid {
                key: "console.session_lifetime",
                reason: "must be 1 to 720".to_owned(),
            });
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct LogSettings {
    /// A `tracing` filter (`RUST_LOG` overrides it).
    pub filter: String,
    /// One JSON object per line instead of text.
    pub json: bool,
}

impl Default for LogSettings {
    fn default() -> Self {
        Self {
            filter: "info".to_owned(),
            json: false,
        }
    }
}

impl Settings {
    /// Loads the settings: defaults, then `file` (required when given;
    /// otherwise `config/switchboard.toml` if it exists), then the
    /// environment. A relative SQLite path is resolved against the folder of
    /// the file that sets it, or else the working directory; the URL kept is
    /// absolute.
    ///
    /// # Errors
    /// An unreadable file, an unknown key, a value of the wrong type, or an
    /// invalid value: the message names the key, the file or environment
    /// variable it came from, and what would be valid.
    pub fn load(file: Option<&Path>) -> Result<Self, ConfigError> {
        Self::load_from(file, std::env::vars())
    }

    /// [`Settings::load`] with the environment given.
    ///
    /// # Errors
    /// As [`Settings::load`].
    pub fn load_from(
        file: Option<&Path>,
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        let file = file_in_use(file);
        let file = file.as_deref();
        let layers = layers::read(file, vars)?;
        let mut settings: Self = serde_path_to_error::deserialize(toml::Value::Table(
            layers.tree.clone(),
        ))
        .map_err(|err| {
            let key = err.path().to_string();
            let key = if key == "." { String::new() } else { key };
            ConfigError::At {
                origin: layers.origin_of(&key),
                // The message alone: the error's `Display` repeats
                // the key on lines of its own.
                problem: if key.is_empty() {
                    err.inner().message().to_owned()
                } else {
                    format!("`{key}`: {}", err.inner().message())
                },
            }
        })?;
        let database_base = match (layers.from_env.contains_key("database.url"), file) {
            (false, Some(file))
                if layers
                    .tree
                    .get("database")
                    .is_some_and(|db| db.get("url").is_some()) =>
            {
                file.parent().map(Path::to_path_buf)
            }
            _ => None,
        };
        settings.database.url =
            absolute_sqlite_url(&settings.database.url, database_base.as_deref());
        let media_base = match (layers.from_env.contains_key("media.folder"), file) {
            (false, Some(file))
                if layers
                    .tree
                    .get("media")
                    .is_some_and(|media| media.get("folder").is_some()) =>
            {
                file.parent().map(Path::to_path_buf)
            }
            _ => None,
        };
        settings.media.folder = absolute_path(&settings.media.folder, media_base.as_deref());
        settings.validate().map_err(|err| match err {
            ConfigError::Invalid { key, reason } => ConfigError::At {
                origin: layers.origin_of(key),
                problem: format!("invalid setting `{key}`: {reason}"),
            },
            other => other,
        })?;
        Ok(settings)
    }

    /// Checks values that parse but make no sense, each feature's by that
    /// feature.
    ///
    /// # Errors
    /// The first invalid value, by key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.bind_addr()?;
        self.database.validate()?;
        self.llm.validate()?;
        self.agent.validate()?;
        self.memory.validate()?;
        self.tools.validate()?;
        self.tasks.validate()?;
        self.media.validate()?;
        self.context.validate()?;
        self.runner.validate()?;
        self.access.validate()?;
        self.sessions.validate()?;
        self.mcp
            .validate()
            .map_err(|(key, reason)| ConfigError::Invalid { key, reason })?;
        self.api.validate()?;
        self.console.validate()
    }

    /// What the session service reads, gathered from the features'
    /// settings.
    #[must_use]
    pub fn service(&self) -> ServiceSettings {
        ServiceSettings {
            sessions: self.sessions.clone(),
            access: self.access.clone(),
            agent: self.agent.clone(),
            memory: self.memory.clone(),
            model: self.llm.model.clone(),
            extra_models: self.llm.extra_models.clone(),
            daily_usd: self.limits.principal_daily_usd,
            media_budget: MediaBudget::new(&self.media),
        }
    }

    /// The address to listen on: `server.bind` as an IP address and port,
    /// or a host name (resolved) and port.
    ///
    /// # Errors
    /// Neither form, or a host name that does not resolve.
    pub fn bind_addr(&self) -> Result<SocketAddr, ConfigError> {
        let bind = self.server.bind.trim();
        if let Ok(addr) = bind.parse::<SocketAddr>() {
            return Ok(addr);
        }
        let invalid = |why: String| ConfigError::Invalid {
            key: "server.bind",
            reason: format!(
                "\"{bind}\" {why}; expected HOST:PORT, like 127.0.0.1:8080, [::1]:8080 or localhost:8080"
            ),
        };
        if bind
            .rsplit_once(':')
            .is_none_or(|(host, port)| host.is_empty() || port.parse::<u16>().is_err())
        {
            return Err(invalid("has no valid port".to_owned()));
        }
        let mut addrs = std::net::ToSocketAddrs::to_socket_addrs(bind)
            .map_err(|err| invalid(format!("does not resolve ({err})")))?
            .collect::<Vec<_>>();
        // Prefer IPv4 (what `localhost` means to most clients).
        addrs.sort_by_key(|addr| !addr.is_ipv4());
        addrs
            .into_iter()
            .next()
            .ok_or_else(|| invalid("resolves to no address".to_owned()))
    }
}

/// The file read when no `--config` is given, if it exists.
pub const DEFAULT_FILE: &str = "config/switchboard.toml";

/// The file [`Settings::load`] reads for `file`: it, or the default file if
/// that exists.
#[must_use]
pub fn file_in_use(file: Option<&Path>) -> Option<PathBuf> {
    let default_file = Path::new(DEFAULT_FILE);
    file.map(Path::to_path_buf)
        .or_else(|| default_file.is_file().then(|| default_file.to_path_buf()))
}

/// The path of a `sqlite:` URL, and its query (without `?`), if it names a
/// file.
pub fn sqlite_path(url: &str) -> Option<(&str, &str)> {
    let rest = url.strip_prefix("sqlite:")?;
    let rest = rest.strip_prefix("//").unwrap_or(rest);
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    (!path.is_empty() && path != ":memory:").then_some((path, query))
}

/// `url` with a relative SQLite path made absolute against `base` (or the
/// working directory).
fn absolute_sqlite_url(url: &str, base: Option<&Path>) -> String {
    let Some((path, query)) = sqlite_path(url) else {
        return url.to_owned();
    };
    if Path::new(path).is_absolute() {
        return url.to_owned();
    }
    let joined = match base {
        Some(base) if !base.as_os_str().is_empty() => base.join(path),
        _ => PathBuf::from(path),
    };
    let absolute = std::path::absolute(&joined).unwrap_or(joined);
    let absolute = absolute.display();
    if query.is_empty() {
        format!("sqlite://{absolute}")
    } else {
        format!("sqlite://{absolute}?{query}")
    }
}

/// `path` made absolute against `base` (or the working directory).
fn absolute_path(path: &Path, base: Option<&Path>) -> PathBuf {
    if path.is_absolute() {
        return path.to_path_buf();
    }
    let joined = match base {
        Some(base) if !base.as_os_str().is_empty() => base.join(path),
        _ => path.to_path_buf(),
    };
    std::path::absolute(&joined).unwrap_or(joined)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An argon2 hash of `password`, as `switchboard console-hash` makes.
    fn argon2_hash(password: &str) -> String {
        use argon2::password_hash::{PasswordHasher, SaltString};
        let salt = SaltString::encode_b64(b"0123456789abcdef").expect("salt");
        argon2::Argon2::default()
            .hash_password(password.as_bytes(), &salt)
            .expect("hashes")
            .to_string()
    }
    use crate::media::settings::BlobStoreKind;
    use crate::tools::settings::MAX_MEMORY_ENTRY_CHARS;

    #[test]
    fn defaults_are_valid() {
        Settings::default().validate().expect("defaults valid");
    }

    #[test]
    fn a_file_overrides_defaults_and_unknown_keys_are_rejected() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s.toml");
        std::fs::write(
            &path,
            "[llm]\nmodel = \"m-1\"\n[agent]\nmax_iterations = 7\n",
        )
        .expect("write");
        let settings = Settings::load(Some(&path)).expect("loads");
        assert_eq!(settings.llm.model, "m-1");
        assert_eq!(settings.agent.max_iterations.get(), 7);
        assert_eq!(settings.runner.max_concurrent_turns.get(), 32);

        std::fs::write(&path, "[llm]\nmodle = \"typo\"\n").expect("write");
        assert!(Settings::load(Some(&path)).is_err());
    }

    #[test]
    fn the_console_refuses_a_password_hash_that_is_not_argon2() {
        let err = Settings::load_from(
            None,
            vars(&[("SWITCHBOARD__CONSOLE__PASSWORD_HASH", "hunter2")]),
        )
        .expect_err("not a hash")
        .to_string();
        assert!(err.contains("console.password_hash"), "{err}");
        let hash = argon2_hash("pw");
        let settings = Settings::load_from(
            None,
            vars(&[("SWITCHBOARD__CONSOLE__PASSWORD_HASH", &hash)]),
        )
        .expect("an argon2 hash loads");
        assert_eq!(settings.console.password_hash, Some(hash));
    }

    #[test]
    fn the_readme_mcp_examples_load() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("switchboard.toml");
        std::fs::write(
            &path,
            r#"
[mcp.servers.fs]
command = "npx"
args = ["-y", "@modelcontextprotocol/server-filesystem", "/srv/shared-docs"]
env = ["HOME"]
cache_ttl_secs = 0
tool_cache_ttl_secs = { read_text_file = 300 }
per_user = false

[mcp.servers.search]
url = "https://mcp.example.com/mcp"
headers = { Authorization = "SEARCH_MCP_AUTHORIZATION" }

[mcp]
allow = ["fs__read_*", "fs__list_*", "fs__search_files"]
deny = ["fs__write_file", "fs__edit_file"]
"#,
        )
        .expect("write");
        let settings = Settings::load(Some(&path)).expect("loads");
        let fs = &settings.mcp.servers["fs"];
        assert_eq!(fs.command.as_deref(), Some("npx"));
        assert_eq!(fs.cache_ttl_of("read_text_file"), 300);
        assert_eq!(fs.cache_ttl_of("list_directory"), 0);
        assert_eq!(
            settings.mcp.servers["search"].headers["Authorization"],
            "SEARCH_MCP_AUTHORIZATION"
        );
        assert_eq!(settings.mcp.deny.len(), 2);

        std::fs::write(&path, "[mcp.servers.fs]\nargs = [\"x\"]\n").expect("write");
        let err = Settings::load(Some(&path)).expect_err("no command or url");
        assert!(err.to_string().contains("server `fs`"), "{err}");
    }

    #[test]
    fn the_example_file_parses_and_matches_the_defaults() {
        // The package folder as `cargo test` names it at run time (a build
        // reused from another checkout keeps its compile-time path).
        let root = std::env::var("CARGO_MANIFEST_DIR")
            .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_owned());
        let path = Path::new(&root).join("config/switchboard.example.toml");
        let mut example = Settings::load(Some(&path)).expect("example parses");
        // Its relative database path is resolved against its folder.
        assert_eq!(
            example.database.url,
            format!("sqlite://{root}/config/data/switchboard.db")
        );
        // So is its media folder.
        assert_eq!(
            example.media.folder,
            Path::new(&root).join("config/data/media")
        );
        let defaults = Settings::default();
        example.database.url.clone_from(&defaults.database.url);
        example.media.folder.clone_from(&defaults.media.folder);
        assert_eq!(format!("{example:?}"), format!("{defaults:?}"));
    }

    #[test]
    fn a_relative_media_folder_follows_the_file_and_zero_bytes_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s.toml");
        std::fs::write(&path, "[media]\nfolder = \"blobs\"\n").expect("write");
        let settings = Settings::load_from(Some(&path), Vec::new()).expect("loads");
        assert_eq!(settings.media.folder, dir.path().join("blobs"));
        std::fs::write(&path, "[media]\nmax_file_bytes = 0\n").expect("write");
        let err = Settings::load_from(Some(&path), Vec::new())
            .expect_err("refused")
            .to_string();
        assert!(err.contains("media.max_file_bytes"), "{err}");
        std::fs::write(&path, "[media]\nmax_image_side = 0\n").expect("write");
        let err = Settings::load_from(Some(&path), Vec::new())
            .expect_err("refused")
            .to_string();
        assert!(err.contains("media.max_image_side"), "{err}");
        std::fs::write(
            &path,
            "[media.transcription]\nbase_url = \"whisper.local\"\n",
        )
        .expect("write");
        let err = Settings::load_from(Some(&path), Vec::new())
            .expect_err("refused")
            .to_string();
        assert!(err.contains("media.transcription.base_url"), "{err}");
        std::fs::write(
            &path,
            "[media.transcription]\nbase_url = \"http://127.0.0.1:9000/v1\"\nmodel = \"small\"\n",
        )
        .expect("write");
        let settings = Settings::load_from(Some(&path), Vec::new()).expect("loads");
        let transcription = settings.media.transcription.expect("set");
        assert_eq!(transcription.model, "small");
        assert_eq!(
            transcription.timeout,
            Duration::from_secs(60),
            "the defaults fill the rest"
        );
    }

    #[test]
    fn an_s3_store_needs_a_bucket_and_an_allowed_endpoint() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s.toml");
        let refused = |toml: &str| {
            std::fs::write(&path, toml).expect("write");
            Settings::load_from(Some(&path), Vec::new())
                .expect_err("refused")
                .to_string()
        };
        let err = refused("[media]\nstore = \"s3\"\n");
        assert!(err.contains("media.s3.bucket"), "{err}");
        let err = refused(
            "[media]\nstore = \"s3\"\n[media.s3]\nbucket = \"b\"\n\
             endpoint = \"http://minio:9000\"\n",
        );
        assert!(
            err.contains("media.s3.endpoint") && err.contains("allow_http"),
            "{err}"
        );
        let err = refused("[media]\nstore = \"s4\"\n");
        assert!(err.contains("media.store"), "{err}");
        let err = refused("[media]\nmax_message_bytes = 0\n");
        assert!(err.contains("media.max_message_bytes"), "{err}");
        std::fs::write(
            &path,
            "[media]\nstore = \"s3\"\nprincipal_daily_bytes = 1000\n[media.s3]\n\
             bucket = \"b\"\nendpoint = \"http://minio:9000\"\nallow_http = true\n",
        )
        .expect("write");
        let settings = Settings::load_from(Some(&path), Vec::new()).expect("loads");
        assert_eq!(settings.media.store, BlobStoreKind::S3);
        assert_eq!(settings.media.s3.bucket, "b");
        assert_eq!(settings.media.principal_daily_bytes, 1000);
        // A local store does not look at [media.s3].
        std::fs::write(&path, "[media.s3]\nendpoint = \"ftp://x\"\n").expect("write");
        assert!(Settings::load_from(Some(&path), Vec::new()).is_ok());
    }

    fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn every_list_key_takes_comma_separated_values_from_the_environment() {
        let settings = Settings::load_from(
            None,
            vars(&[
                ("SWITCHBOARD__ACCESS__PLATFORMS__TELEGRAM", "123"),
                ("SWITCHBOARD__ACCESS__PLATFORMS__DISCORD", "7, 8"),
                ("SWITCHBOARD__ACCESS__ALLOWLIST", "telegram:1,principal:2"),
                ("SWITCHBOARD__TELEGRAM__FREE_RESPONSE_CHATS", "-100123,42"),
                ("SWITCHBOARD__DISCORD__FREE_RESPONSE_CHANNELS", "55"),
                ("SWITCHBOARD__AGENT__TOOLS", "calculator"),
                ("SWITCHBOARD__LLM__EXTRA_MODELS", ""),
                (
                    "SWITCHBOARD__TOOLS__HTTP_GET__ALLOW_HOSTS",
                    "example.com,example.org",
                ),
                ("SWITCHBOARD__LLM__MODEL", "42"),
                ("SWITCHBOARD__LOG__JSON", "TRUE"),
                ("SWITCHBOARD__CONTEXT__COMPACT_THRESHOLD", "0.5"),
                ("SWITCHBOARD_CONFIG_UNRELATED", "x"),
            ]),
        )
        .expect("loads");
        assert_eq!(settings.access.platforms["telegram"], ["123"]);
        assert_eq!(settings.access.platforms["discord"], ["7", "8"]);
        assert_eq!(settings.access.allowlist, ["telegram:1", "principal:2"]);
        let telegram = settings.telegram.expect("the section is enabled");
        assert_eq!(telegram.free_response_chats, [-100_123, 42]);
        assert_eq!(
            settings.discord.expect("enabled").free_response_channels,
            ["55"]
        );
        assert_eq!(settings.agent.tools, ["calculator"]);
        assert!(settings.llm.extra_models.is_empty());
        assert_eq!(
            settings.tools.http_get.allow_hosts,
            ["example.com", "example.org"]
        );
        assert_eq!(settings.llm.model, "42");
        assert!(settings.log.json);
        assert!((settings.context.compact_threshold - 0.5).abs() < f64::EPSILON);
    }

    #[test]
    fn the_environment_overrides_the_file_key_by_key() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s.toml");
        std::fs::write(
            &path,
            "[llm]\nmodel = \"m-file\"\nextra_models = [\"a\"]\n[access.platforms]\ntelegram = [\"1\"]\n",
        )
        .expect("write");
        let settings = Settings::load_from(
            Some(&path),
            vars(&[("SWITCHBOARD__LLM__EXTRA_MODELS", "b,c")]),
        )
        .expect("loads");
        assert_eq!(settings.llm.model, "m-file");
        assert_eq!(settings.llm.extra_models, ["b", "c"]);
        assert_eq!(settings.access.platforms["telegram"], ["1"]);
    }

    #[test]
    fn relative_database_paths_follow_the_file_that_sets_them() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s.toml");
        std::fs::write(
            &path,
            "[database]\nurl = \"sqlite://state/x.db?mode=rwc\"\n",
        )
        .expect("write");
        let settings = Settings::load_from(Some(&path), vars(&[])).expect("loads");
        assert_eq!(
            settings.database.url,
            format!("sqlite://{}/state/x.db?mode=rwc", dir.path().display())
        );
        // Set from the environment: the working directory's.
        let settings = Settings::load_from(
            Some(&path),
            vars(&[("SWITCHBOARD__DATABASE__URL", "sqlite://y.db")]),
        )
        .expect("loads");
        let cwd = std::env::current_dir().expect("cwd");
        assert_eq!(
            settings.database.url,
            format!("sqlite://{}", cwd.join("y.db").display())
        );
        // Absolute paths, memory and PostgreSQL stay as they are.
        for url in [
            "sqlite:///srv/gw.db",
            "sqlite::memory:",
            "postgres://u@h/db",
        ] {
            let settings = Settings::load_from(None, vars(&[("SWITCHBOARD__DATABASE__URL", url)]))
                .expect("loads");
            assert_eq!(settings.database.url, url);
        }
    }

    #[test]
    fn every_section_refuses_unknown_keys() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s.toml");
        for section in [
            "server",
            "database",
            "llm",
            "agent",
            "agent_cache",
            "sessions",
            "access",
            "runner",
            "limits",
            "context",
            "api",
            "console",
            "tools",
            "tools.http_get",
            "memory",
            "log",
            "telegram",
            "discord",
            "feishu",
            "slack",
            "slack.workspaces.acme",
            "whatsapp",
            "whatsapp.numbers.shop",
            "prices.\"some-model\"",
            "api.keys.web",
        ] {
            std::fs::write(&path, format!("[{section}]\nbogus_key = 1\n")).expect("write");
            let err = Settings::load_from(Some(&path), vars(&[]))
                .expect_err(section)
                .to_string();
            let shown = section.replace('"', "");
            assert!(
                err.contains(&format!("unknown key `bogus_key` in [{shown}]")),
                "{section}: {err}"
            );
            let var = format!(
                "SWITCHBOARD__{}__BOGUS_KEY",
                shown.replace('.', "__").to_ascii_uppercase()
            );
            let err = Settings::load_from(None, vars(&[(var.as_str(), "1")]))
                .expect_err(&var)
                .to_string();
            assert!(
                err.starts_with(&format!(
                    "environment variable {var}: unknown key `bogus_key`"
                )),
                "{var}: {err}"
            );
        }
    }

    #[test]
    fn a_host_name_bind_address_is_resolved() {
        let mut settings = Settings::default();
        settings.server.bind = "localhost:8080".to_owned();
        let addr = settings.bind_addr().expect("resolves");
        assert!(addr.ip().is_loopback());
        assert_eq!(addr.port(), 8080);
        for bad in ["localhost", "127.0.0.1:http", ":8080"] {
            settings.server.bind = bad.to_owned();
            let err = settings.bind_addr().expect_err(bad).to_string();
            assert!(err.contains("expected HOST:PORT"), "{err}");
        }
    }

    #[test]
    fn invalid_values_name_their_key() {
        let mut settings = Settings::default();
        settings.database.url = "mysql://x".to_owned();
        let err = settings.validate().expect_err("invalid");
        assert!(err.to_string().contains("database.url"));

        let mut settings = Settings::default();
        settings.access.allowlist = vec!["telegram:42".to_owned(), "principal:x".to_owned()];
        let err = settings.validate().expect_err("invalid");
        assert!(err.to_string().contains("access.allowlist"));
    }

    #[test]
    fn memory_limits_are_checked() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s.toml");
        std::fs::write(&path, "[memory]\nmax_entries = 0\n").expect("write");
        let err = Settings::load_from(Some(&path), Vec::new())
            .expect_err("invalid")
            .to_string();
        assert!(
            err.contains("memory.max_entries") && err.contains("must be at least 1"),
            "{err}"
        );

        for chars in [0, MAX_MEMORY_ENTRY_CHARS + 1] {
            let mut settings = Settings::default();
            settings.memory.max_entry_chars = chars;
            let err = settings.validate().expect_err("invalid").to_string();
            assert!(err.contains("memory.max_entry_chars"), "{err}");
        }
        let mut settings = Settings::default();
        settings.memory.max_entry_chars = MAX_MEMORY_ENTRY_CHARS;
        settings.validate().expect("the largest allowed");
    }

    #[test]
    fn named_api_keys_parse_and_bad_ones_name_their_key() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s.toml");
        std::fs::write(
            &path,
            "[api.keys.web-app]\nenv = \"WEB_KEY\"\nusers = [\"alice\"]\n\
             [api.keys.batch]\nenv = \"BATCH_KEY\"\n",
        )
        .expect("write");
        let settings = Settings::load(Some(&path)).expect("loads");
        let web = &settings.api.keys["web-app"];
        assert_eq!(web.env, "WEB_KEY");
        assert_eq!(web.users.as_deref(), Some(&["alice".to_owned()][..]));
        assert_eq!(settings.api.keys["batch"].users, None);

        for bad in [
            "[api.keys.\"a b\"]\nenv = \"K\"\n",
            "[api.keys.k]\nenv = \"K\"\nusers = []\n",
        ] {
            std::fs::write(&path, bad).expect("write");
            let err = Settings::load(Some(&path)).expect_err(bad);
            assert!(err.to_string().contains("api.keys"), "{err}");
        }
    }
}
