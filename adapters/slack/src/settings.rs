//! The adapter's configuration ([`SlackSettings`], the `[slack]` table) and
//! its secrets ([`Secrets`]), which are read from environment variables
//! named in the settings and never stored in configuration files.
//!
//! One adapter serves every workspace configured: with no
//! `[slack.workspaces.NAME]` table, the one workspace whose bot token is in
//! `bot_token_env` (named `default`); with such tables, exactly those, each
//! with its own bot token and, where it belongs to another Slack app, its
//! own signing secret or app-level token (the top-level ones otherwise).
//! Which workspace an event belongs to is its `team_id`, learned for each
//! bot token from `auth.test` when the adapter starts.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use secrecy::SecretString;
use serde::Deserialize;

/// The name of the implicit workspace of a `[slack]` table without
/// `[slack.workspaces.*]`.
pub const DEFAULT_WORKSPACE: &str = "default";

/// How Slack delivers events.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// The Events API: Slack posts signed requests to `events_path` and
    /// `interactivity_path` (the gateway must be reachable from Slack).
    #[default]
    Events,
    /// Socket Mode: the adapter opens a WebSocket to Slack with the app-level
    /// token; no public URL is needed. One instance at a time holds it.
    Socket,
}

/// Slack adapter settings, the `[slack]` table. Every key has a default, so
/// an empty table is valid (one workspace, Events API).
///
/// ```toml
/// [slack]
/// mode = "events"                           # or "socket"
/// events_path = "/slack/events"
/// interactivity_path = "/slack/interactivity"
/// bot_token_env = "SLACK_BOT_TOKEN"          # xoxb-…
/// signing_secret_env = "SLACK_SIGNING_SECRET"
/// app_token_env = "SLACK_APP_TOKEN"          # xapp-…, Socket Mode only
/// free_response_channels = ["C0123456789"]
/// thread_replies = true
///
/// [slack.workspaces.acme]                   # optional: several workspaces
/// bot_token_env = "SLACK_ACME_BOT_TOKEN"
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct SlackSettings {
    /// `events` (the Events API over HTTP, the default) or `socket`
    /// (Socket Mode).
    pub mode: Mode,
    /// The path Slack posts events to (the app's Event Subscriptions
    /// Request URL). Default `/slack/events`.
    pub events_path: String,
    /// The path Slack posts button presses to (the app's Interactivity
    /// Request URL). Default `/slack/interactivity`.
    pub interactivity_path: String,
    /// Environment variable holding the bot token (`xoxb-…`) of the single
    /// workspace, when no `[slack.workspaces.*]` table is given. Default
    /// `SLACK_BOT_TOKEN`.
    pub bot_token_env: String,
    /// Environment variable holding the app's signing secret (Basic
    /// Information → App Credentials), Events API only. Default
    /// `SLACK_SIGNING_SECRET`.
    pub signing_secret_env: String,
    /// Environment variable holding the app-level token (`xapp-…`, scope
    /// `connections:write`), Socket Mode only. Default `SLACK_APP_TOKEN`.
    pub app_token_env: String,
    /// The Web API base URL. Default `https://slack.com/api`; tests point it
    /// at a fake.
    pub api_url: String,
    /// Largest request body accepted, in bytes; larger ones get 413.
    /// Default 1 MiB.
    pub max_body_bytes: usize,
    /// Channel ids (`C…`, `G…`) where the bot answers every message, not
    /// only those that mention it.
    pub free_response_channels: Vec<String>,
    /// Whether a channel message the bot answers outside a thread starts a
    /// thread (the reply goes under it, and the thread is one
    /// conversation). Default true; false answers in the channel itself.
    /// Direct messages are never threaded.
    pub thread_replies: bool,
    /// Show replies growing while the model writes them: one message,
    /// updated in place, becomes the reply. Default true.
    pub stream_replies: bool,
    /// How often that message is updated, in milliseconds; at least 1000
    /// (`chat.update` is rate limited per workspace). Default 1500.
    pub draft_interval_ms: u64,
    /// Timeout of one Web API request, in seconds. Default 10.
    pub request_timeout_secs: u64,
    /// How far a request's `X-Slack-Request-Timestamp` may be from this
    /// host's clock, either way, in seconds; older ones are refused (401)
    /// so a captured request cannot be replayed. Default 300.
    pub signature_max_age_secs: u64,
    /// How long an event waits for the core to record it before it is
    /// answered 503 (Events API) or left unacknowledged (Socket Mode), so
    /// that Slack delivers it again. Slack wants an answer within 3 s.
    /// Default 2000.
    pub ack_timeout_ms: u64,
    /// Most events being handed to the core at once; beyond it events are
    /// refused and Slack delivers them again later. Default 256.
    pub max_in_flight: usize,
    /// How long a sender's display name (`users.info`) is remembered, in
    /// seconds. Default 3600.
    pub user_cache_ttl_secs: u64,
    /// How many display names are remembered at most. Default 2000.
    pub user_cache_capacity: usize,
    /// Several workspaces, by a name of your choice; when empty, the one
    /// workspace of `bot_token_env`.
    pub workspaces: BTreeMap<String, WorkspaceSettings>,
}

/// One workspace (`[slack.workspaces.NAME]`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceSettings {
    /// Environment variable holding this workspace's bot token (`xoxb-…`).
    pub bot_token_env: String,
    /// Environment variable holding the signing secret, when this
    /// workspace's bot belongs to another Slack app than the top-level
    /// `signing_secret_env`'s.
    #[serde(default)]
    pub signing_secret_env: Option<String>,
    /// Environment variable holding the app-level token, when this
    /// workspace's bot belongs to another Slack app than the top-level
    /// `app_token_env`'s (Socket Mode).
    #[serde(default)]
    pub app_token_env: Option<String>,
}

impl Default for SlackSettings {
    fn default() -> Self {
        Self {
            mode: Mode::Events,
            events_path: "/slack/events".to_owned(),
            interactivity_path: "/slack/interactivity".to_owned(),
            bot_token_env: "SLACK_BOT_TOKEN".to_owned(),
            signing_secret_env: "SLACK_SIGNING_SECRET".to_owned(),
            app_token_env: "SLACK_APP_TOKEN".to_owned(),
            api_url: "https://slack.com/api".to_owned(),
            max_body_bytes: 1024 * 1024,
            free_response_channels: Vec::new(),
            thread_replies: true,
            stream_replies: true,
            draft_interval_ms: 1500,
            request_timeout_secs: 10,
            signature_max_age_secs: 300,
            ack_timeout_ms: 2000,
            max_in_flight: 256,
            user_cache_ttl_secs: 3600,
            user_cache_capacity: 2000,
            workspaces: BTreeMap::new(),
        }
    }
}

/// The shortest interval between two updates of a draft.
pub const MIN_DRAFT_INTERVAL: Duration = Duration::from_secs(1);

/// Slack's deadline for answering a request or acknowledging an envelope.
pub const SLACK_ACK_DEADLINE: Duration = Duration::from_secs(3);

impl SlackSettings {
    /// Checks the values; the error names the offending key.
    ///
    /// # Errors
    /// A path not starting with `/` (or both the same), an `api_url` that is
    /// not http(s), a zero limit, an ack timeout of 3 s or more, a draft
    /// interval under a second, or an empty workspace or channel name.
    pub fn validate(&self) -> Result<(), SettingsError> {
        for (key, path) in [
            ("slack.events_path", &self.events_path),
            ("slack.interactivity_path", &self.interactivity_path),
        ] {
            if !path.starts_with('/') {
                return Err(SettingsError::invalid(key, "must start with '/'"));
            }
        }
        if self.events_path == self.interactivity_path {
            return Err(SettingsError::invalid(
                "slack.interactivity_path",
                "must differ from slack.events_path",
            ));
        }
        if url::Url::parse(&self.api_url)
            .ok()
            .is_none_or(|url| !matches!(url.scheme(), "http" | "https"))
        {
            return Err(SettingsError::invalid(
                "slack.api_url",
                "must be an http(s) URL",
            ));
        }
        self.validate_numbers()?;
        if let Some(name) = self.workspaces.keys().find(|name| name.trim().is_empty()) {
            return Err(SettingsError::invalid(
                format!("slack.workspaces.{name:?}"),
                "a workspace needs a name",
            ));
        }
        if self
            .free_response_channels
            .iter()
            .any(|channel| !is_slack_id(channel))
        {
            return Err(SettingsError::invalid(
                "slack.free_response_channels",
                "each must be a channel id such as C0123456789",
            ));
        }
        Ok(())
    }

    fn validate_numbers(&self) -> Result<(), SettingsError> {
        let zero = [
            ("slack.max_body_bytes", self.max_body_bytes == 0),
            ("slack.request_timeout_secs", self.request_timeout_secs == 0),
            (
                "slack.signature_max_age_secs",
                self.signature_max_age_secs == 0,
            ),
            ("slack.ack_timeout_ms", self.ack_timeout_ms == 0),
            ("slack.max_in_flight", self.max_in_flight == 0),
            ("slack.user_cache_capacity", self.user_cache_capacity == 0),
        ];
        if let Some((key, _)) = zero.into_iter().find(|(_, is_zero)| *is_zero) {
            return Err(SettingsError::invalid(key, "must be greater than zero"));
        }
        if self.ack_timeout() >= SLACK_ACK_DEADLINE {
            return Err(SettingsError::invalid(
                "slack.ack_timeout_ms",
                "must be under 3000: Slack wants an answer within 3 seconds",
            ));
        }
        if self.draft_interval() < MIN_DRAFT_INTERVAL {
            return Err(SettingsError::invalid(
                "slack.draft_interval_ms",
                "must be at least 1000",
            ));
        }
        Ok(())
    }

    /// The settings key of each workspace and the variables its secrets
    /// are read from.
    pub(crate) fn workspace_vars(&self) -> Vec<WorkspaceVars> {
        if self.workspaces.is_empty() {
            return vec![WorkspaceVars {
                name: DEFAULT_WORKSPACE.to_owned(),
                key: "slack".to_owned(),
                bot_token: self.bot_token_env.clone(),
                signing_secret: self.signing_secret_env.clone(),
                app_token: self.app_token_env.clone(),
            }];
        }
        self.workspaces
            .iter()
            .map(|(name, workspace)| WorkspaceVars {
                name: name.clone(),
                key: format!("slack.workspaces.{name}"),
                bot_token: workspace.bot_token_env.clone(),
                signing_secret: workspace
                    .signing_secret_env
                    .clone()
                    .unwrap_or_else(|| self.signing_secret_env.clone()),
                app_token: workspace
                    .app_token_env
                    .clone()
                    .unwrap_or_else(|| self.app_token_env.clone()),
            })
            .collect()
    }

    pub(crate) fn ack_timeout(&self) -> Duration {
        Duration::from_millis(self.ack_timeout_ms)
    }

    pub(crate) fn draft_interval(&self) -> Duration {
        Duration::from_millis(self.draft_interval_ms)
    }

    /// How often drafts change; `None` when replies are not streamed.
    pub(crate) fn drafts(&self) -> Option<Duration> {
        self.stream_replies.then(|| self.draft_interval())
    }

    pub(crate) fn request_timeout(&self) -> Duration {
        Duration::from_secs(self.request_timeout_secs)
    }

    pub(crate) fn signature_max_age(&self) -> Duration {
        Duration::from_secs(self.signature_max_age_secs)
    }

    pub(crate) fn user_cache_ttl(&self) -> Duration {
        Duration::from_secs(self.user_cache_ttl_secs)
    }
}

/// Where one workspace's secrets are read from.
#[derive(Debug, Clone)]
pub(crate) struct WorkspaceVars {
    pub name: String,
    /// The settings table that names the variables (`slack` or
    /// `slack.workspaces.NAME`).
    pub key: String,
    pub bot_token: String,
    pub signing_secret: String,
    pub app_token: String,
}

/// Whether `id` looks like a Slack id (`C0123ABC`): uppercase letters and
/// digits.
fn is_slack_id(id: &str) -> bool {
    !id.is_empty()
        && id
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
}

/// The secrets of one workspace. Built from the environment
/// ([`Secrets::from_env`]) or directly (tests, secret stores).
#[derive(Clone)]
pub struct WorkspaceSecrets {
    /// The workspace's name in the settings ([`DEFAULT_WORKSPACE`] for a
    /// single one).
    pub name: String,
    /// The bot token, `xoxb-…`.
    pub bot_token: SecretString,
    /// The app's signing secret (Events API).
    pub signing_secret: Option<SecretString>,
    /// The app-level token, `xapp-…` (Socket Mode).
    pub app_token: Option<SecretString>,
}

impl fmt::Debug for WorkspaceSecrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let redacted = |secret: &Option<SecretString>| secret.as_ref().map(|_| "[redacted]");
        f.debug_struct("WorkspaceSecrets")
            .field("name", &self.name)
            .field("bot_token", &"[redacted]")
            .field("signing_secret", &redacted(&self.signing_secret))
            .field("app_token", &redacted(&self.app_token))
            .finish()
    }
}

/// Every workspace's secrets.
#[derive(Debug, Clone)]
pub struct Secrets {
    pub workspaces: Vec<WorkspaceSecrets>,
}

impl Secrets {
    /// Reads the secrets from the environment variables `settings` names:
    /// each workspace's bot token, and the signing secret (Events API) or
    /// the app-level token (Socket Mode).
    ///
    /// # Errors
    /// A named variable is unset, empty or not Unicode; the error names the
    /// variable and the settings key, never the value.
    pub fn from_env(settings: &SlackSettings) -> Result<Self, SettingsError> {
        let read = |key: String, var: &str| match std::env::var(var) {
            Ok(value) if !value.trim().is_empty() => Ok(SecretString::from(value.trim())),
            _ => Err(SettingsError::MissingSecret {
                key,
                var: var.to_owned(),
            }),
        };
        let socket = settings.mode == Mode::Socket;
        let workspaces = settings
            .workspace_vars()
            .into_iter()
            .map(|vars| {
                Ok(WorkspaceSecrets {
                    bot_token: read(format!("{}.bot_token_env", vars.key), &vars.bot_token)?,
                    signing_secret: (!socket)
                        .then(|| {
                            read(
                                format!("{}.signing_secret_env", vars.key),
                                &vars.signing_secret,
                            )
                        })
                        .transpose()?,
                    app_token: socket
                        .then(|| read(format!("{}.app_token_env", vars.key), &vars.app_token))
                        .transpose()?,
                    name: vars.name,
                })
            })
            .collect::<Result<_, SettingsError>>()?;
        Ok(Self { workspaces })
    }
}

/// A configuration problem found before the adapter starts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    #[error("{key}: {reason}")]
    Invalid { key: String, reason: &'static str },
    #[error("{key}: environment variable {var} is not set")]
    MissingSecret { key: String, var: String },
}

impl SettingsError {
    fn invalid(key: impl Into<String>, reason: &'static str) -> Self {
        Self::Invalid {
            key: key.into(),
            reason,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_table_takes_the_defaults() {
        let settings: SlackSettings = serde_json::from_str("{}").unwrap();
        assert_eq!(settings, SlackSettings::default());
        assert_eq!(settings.events_path, "/slack/events");
        assert_eq!(settings.interactivity_path, "/slack/interactivity");
        assert_eq!(settings.mode, Mode::Events);
        assert_eq!(settings.max_body_bytes, 1024 * 1024);
        assert!(settings.thread_replies);
        settings.validate().unwrap();
        let vars = settings.workspace_vars();
        assert_eq!(vars.len(), 1);
        assert_eq!(vars[0].name, DEFAULT_WORKSPACE);
        assert_eq!(vars[0].bot_token, "SLACK_BOT_TOKEN");
    }

    #[test]
    fn unknown_keys_are_refused() {
        let err = serde_json::from_str::<SlackSettings>(r#"{"bot_token":"xoxb"}"#).unwrap_err();
        assert!(err.to_string().contains("unknown field"), "{err}");
    }

    #[test]
    fn workspaces_inherit_the_app_secrets() {
        let settings: SlackSettings = serde_json::from_str(
            r#"{"mode":"socket","workspaces":{
                "acme":{"bot_token_env":"ACME_BOT"},
                "beta":{"bot_token_env":"BETA_BOT","signing_secret_env":"BETA_SIGNING","app_token_env":"BETA_APP"}}}"#,
        )
        .unwrap();
        settings.validate().unwrap();
        let vars = settings.workspace_vars();
        assert_eq!(vars[0].name, "acme");
        assert_eq!(vars[0].signing_secret, "SLACK_SIGNING_SECRET");
        assert_eq!(vars[0].app_token, "SLACK_APP_TOKEN");
        assert_eq!(vars[1].key, "slack.workspaces.beta");
        assert_eq!(vars[1].signing_secret, "BETA_SIGNING");
        assert_eq!(vars[1].app_token, "BETA_APP");
    }

    #[test]
    fn bad_values_name_their_key() {
        let cases = [
            (r#"{"events_path":"slack"}"#, "slack.events_path"),
            (
                r#"{"interactivity_path":"/slack/events"}"#,
                "slack.interactivity_path",
            ),
            (r#"{"api_url":"slack.com/api"}"#, "slack.api_url"),
            (r#"{"ack_timeout_ms":3000}"#, "slack.ack_timeout_ms"),
            (r#"{"draft_interval_ms":200}"#, "slack.draft_interval_ms"),
            (r#"{"max_body_bytes":0}"#, "slack.max_body_bytes"),
            (
                r##"{"free_response_channels":["#general"]}"##,
                "slack.free_response_channels",
            ),
        ];
        for (json, key) in cases {
            let settings: SlackSettings = serde_json::from_str(json).unwrap();
            let err = settings.validate().unwrap_err();
            assert!(err.to_string().starts_with(key), "{json}: {err}");
        }
    }

    #[test]
    fn a_missing_secret_names_the_variable_and_key() {
        let settings = SlackSettings {
            bot_token_env: "SWITCHBOARD_TEST_UNSET_SLACK_TOKEN".to_owned(),
            ..SlackSettings::default()
        };
        let err = Secrets::from_env(&settings).unwrap_err();
        assert_eq!(
            err.to_string(),
            "slack.bot_token_env: environment variable SWITCHBOARD_TEST_UNSET_SLACK_TOKEN is not set"
        );
    }

    #[test]
    fn secrets_never_show_in_debug_output() {
        let secrets = WorkspaceSecrets {
            name: "acme".to_owned(),
            bot_token: SecretString::from("xoxb-s3cret"),
            signing_secret: Some(SecretString::from("sign-s3cret")),
            app_token: Some(SecretString::from("xapp-s3cret")),
        };
        let shown = format!("{secrets:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("acme"));
    }
}
