//! The adapter's configuration ([`WhatsAppSettings`], the `[whatsapp]`
//! table) and its secrets ([`Secrets`]), which are read from environment
//! variables named in the settings and never stored in configuration files.
//!
//! One `[whatsapp]` table is one Meta app: one webhook (path, app secret,
//! verify token) for every phone number the app's WhatsApp Business
//! Accounts hold. Each number is sent from with its own access token:
//! the top-level `phone_number_id` is the number named `default`, and
//! `[whatsapp.numbers.NAME]` tables add more, each with its own
//! `access_token_env` (the top-level one when unset) and, optionally, its
//! own template. See [`WhatsAppSettings::numbers`].

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use secrecy::SecretString;
use serde::{Deserialize, Deserializer};

/// The name of the number the top-level `phone_number_id` configures.
pub const DEFAULT_NUMBER: &str = "default";

/// Longest template body WhatsApp accepts, in characters.
pub const TEMPLATE_BODY_LIMIT: usize = 1024;

/// WhatsApp adapter settings, the `[whatsapp]` table of the gateway's
/// configuration. At least one phone number is required (the top-level
/// `phone_number_id` or a `[whatsapp.numbers.NAME]` table); everything else
/// has a default.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WhatsAppSettings {
    /// The Phone Number ID (not the phone number) from the app's WhatsApp →
    /// API Setup page: the number named `default`.
    #[serde(default, deserialize_with = "optional_id")]
    #[schemars(with = "Option<String>")]
    pub phone_number_id: Option<String>,
    /// Environment variable holding the access token (a System User token
    /// with `whatsapp_business_messaging` and `whatsapp_business_management`).
    /// Also the default of every number's `access_token_env`.
    #[serde(default = "default_access_token_env")]
    pub access_token_env: String,
    /// Environment variable holding the app secret (App settings → Basic),
    /// which signs every webhook request.
    #[serde(default = "default_app_secret_env")]
    pub app_secret_env: String,
    /// Environment variable holding the verify token entered with the
    /// callback URL in the webhook configuration.
    #[serde(default = "default_verify_token_env")]
    pub verify_token_env: String,
    /// The path the webhook is served at (the callback URL's path).
    /// Default `/whatsapp/webhook`.
    #[serde(default = "default_webhook_path")]
    pub webhook_path: String,
    /// The Graph API base URL, without a version. Default
    /// `https://graph.facebook.com`.
    #[serde(default = "default_api_url")]
    pub api_url: String,
    /// The Graph API version, `vNN.N`. Default `v21.0`.
    #[serde(default = "default_api_version")]
    pub api_version: String,
    /// Largest webhook body accepted, in bytes; larger ones get 413.
    /// Default 1 MiB.
    #[serde(default = "default_max_body_bytes")]
    pub max_body_bytes: usize,
    /// How long the webhook waits for the core to record a payload's
    /// messages before answering 503 (Meta then delivers it again).
    /// Default 5000 ms.
    #[serde(default = "default_ack_timeout_ms")]
    pub ack_timeout_ms: u64,
    /// Most webhook payloads being handed to the core at once; beyond it
    /// the webhook answers 503. Default 256.
    #[serde(default = "default_max_in_flight")]
    pub max_in_flight: usize,
    /// Timeout of one Graph API request, in seconds. Default 10.
    #[serde(default = "default_request_timeout_secs")]
    pub request_timeout_secs: u64,
    /// The template sent instead of a reply outside the 24-hour window;
    /// `None`: such a reply fails with a permanent error saying so.
    #[serde(default)]
    pub template: Option<TemplateSettings>,
    /// Pass reactions to the agent as messages (the emoji, replying to the
    /// message reacted to). Default false: reactions are ignored.
    #[serde(default)]
    pub react_to_reactions: bool,
    /// Mark the person's message read (blue ticks) while the agent works
    /// on it. Default true.
    #[serde(default = "default_true")]
    pub read_receipts: bool,
    /// Show the typing indicator while the agent works (sent with the read
    /// receipt, so it needs `read_receipts`). Default true.
    #[serde(default = "default_true")]
    pub typing_indicator: bool,
    /// The body of a buttons message when the reply's text is too long to
    /// carry them (over 1,024 characters: the text goes first, as text).
    /// Default `Choose an answer:`.
    #[serde(default = "default_buttons_prompt")]
    pub buttons_prompt: String,
    /// The label of the button that opens a list of more than three
    /// answers (at most 20 characters). Default `Answers`.
    #[serde(default = "default_list_button")]
    pub list_button: String,
    /// More phone numbers, by a name of your choice.
    #[serde(default)]
    pub numbers: BTreeMap<String, NumberSettings>,
}

/// One more phone number (`[whatsapp.numbers.NAME]`).
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NumberSettings {
    /// Its Phone Number ID.
    #[serde(deserialize_with = "id")]
    #[schemars(with = "String")]
    pub phone_number_id: String,
    /// Environment variable holding its access token; the top-level
    /// `access_token_env` when unset.
    #[serde(default)]
    pub access_token_env: Option<String>,
    /// Its own template for the 24-hour window; the top-level one when
    /// unset.
    #[serde(default)]
    pub template: Option<TemplateSettings>,
}

/// A message template approved in WhatsApp Manager, sent when a reply
/// cannot go out as a free-form message (the person last wrote more than 24
/// hours ago).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TemplateSettings {
    /// The template's name (`reply_ready`).
    pub name: String,
    /// The language code it was approved in (`en_US`).
    pub language: String,
    /// How the reply fills it. Default `body`.
    #[serde(default)]
    pub fill: TemplateFill,
    /// With `fill = "body"`, the longest the reply text may be in the
    /// parameter, in characters; a longer reply is cut and ends with
    /// `truncation_note`. Default 700 (the whole body may hold 1,024).
    #[serde(default = "default_template_max_chars")]
    pub max_chars: usize,
    /// Ends a reply cut to `max_chars`. Default ` … (reply to read the
    /// rest)`.
    #[serde(default = "default_truncation_note")]
    pub truncation_note: String,
}

/// How a reply fills the template.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TemplateFill {
    /// The template's body has one parameter (`{{1}}`): the reply's text,
    /// on one line (WhatsApp refuses line breaks in parameters), cut to
    /// `max_chars`.
    #[default]
    Body,
    /// The template has no parameters (a fixed "I have an answer, write to
    /// me to see it"); the reply's text is not sent.
    None,
}

/// One phone number, resolved: the top-level one or one of `numbers`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NumberConfig {
    /// [`DEFAULT_NUMBER`] or the `numbers` table's key.
    pub name: String,
    pub phone_number_id: String,
    pub access_token_env: String,
    pub template: Option<TemplateSettings>,
}

impl WhatsAppSettings {
    /// Settings with every default, for the number `phone_number_id`.
    #[must_use]
    pub fn new(phone_number_id: impl Into<String>) -> Self {
        Self {
            phone_number_id: Some(phone_number_id.into()),
            access_token_env: default_access_token_env(),
            app_secret_env: default_app_secret_env(),
            verify_token_env: default_verify_token_env(),
            webhook_path: default_webhook_path(),
            api_url: default_api_url(),
            api_version: default_api_version(),
            max_body_bytes: default_max_body_bytes(),
            ack_timeout_ms: default_ack_timeout_ms(),
            max_in_flight: default_max_in_flight(),
            request_timeout_secs: default_request_timeout_secs(),
            template: None,
            react_to_reactions: false,
            read_receipts: true,
            typing_indicator: true,
            buttons_prompt: default_buttons_prompt(),
            list_button: default_list_button(),
            numbers: BTreeMap::new(),
        }
    }

    /// Every phone number: the top-level one first (named
    /// [`DEFAULT_NUMBER`]), then `numbers` by name. A number without its
    /// own token variable or template takes the top-level ones.
    #[must_use]
    pub fn numbers(&self) -> Vec<NumberConfig> {
        let top = self.phone_number_id.iter().map(|id| NumberConfig {
            name: DEFAULT_NUMBER.to_owned(),
            phone_number_id: id.clone(),
            access_token_env: self.access_token_env.clone(),
            template: self.template.clone(),
        });
        let named = self.numbers.iter().map(|(name, number)| NumberConfig {
            name: name.clone(),
            phone_number_id: number.phone_number_id.clone(),
            access_token_env: number
                .access_token_env
                .clone()
                .unwrap_or_else(|| self.access_token_env.clone()),
            template: number.template.clone().or_else(|| self.template.clone()),
        });
        top.chain(named).collect()
    }

    /// The Graph API base with its version, without a trailing slash
    /// (`https://graph.facebook.com/v21.0`).
    #[must_use]
    pub fn graph_base(&self) -> String {
        format!(
            "{}/{}",
            self.api_url.trim_end_matches('/'),
            self.api_version.trim_matches('/')
        )
    }

    /// Checks the values; the error names the offending key.
    ///
    /// # Errors
    /// No phone number, an id that is not a number or appears twice, a
    /// path or URL or version of the wrong shape, a zero limit, a template
    /// without name or language, or a typing indicator without read
    /// receipts.
    pub fn validate(&self) -> Result<(), SettingsError> {
        self.validate_numbers()?;
        self.validate_endpoints()?;
        self.validate_limits()?;
        if self.typing_indicator && !self.read_receipts {
            return invalid(
                "whatsapp.typing_indicator",
                "needs read_receipts (the indicator is sent with the read receipt)",
            );
        }
        if self.buttons_prompt.trim().is_empty() || self.buttons_prompt.chars().count() > 1024 {
            return invalid("whatsapp.buttons_prompt", "must be 1 to 1024 characters");
        }
        if self.list_button.trim().is_empty() || self.list_button.chars().count() > 20 {
            return invalid("whatsapp.list_button", "must be 1 to 20 characters");
        }
        if let Some(template) = &self.template {
            template.validate("whatsapp.template")?;
        }
        for (name, number) in &self.numbers {
            if let Some(template) = &number.template {
                template.validate(&format!("whatsapp.numbers.{name}.template"))?;
            }
        }
        Ok(())
    }

    fn validate_numbers(&self) -> Result<(), SettingsError> {
        if self.numbers.contains_key(DEFAULT_NUMBER) && self.phone_number_id.is_some() {
            return invalid(
                &format!("whatsapp.numbers.{DEFAULT_NUMBER}"),
                "names the top-level phone_number_id's number; choose another name",
            );
        }
        let numbers = self.numbers();
        if numbers.is_empty() {
            return invalid(
                "whatsapp.phone_number_id",
                "set it, or add a [whatsapp.numbers.NAME] table",
            );
        }
        let mut seen = BTreeSet::new();
        for number in &numbers {
            let key = number_key(&number.name, "phone_number_id");
            let id = &number.phone_number_id;
            if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) {
                return invalid(&key, "must be the numeric Phone Number ID");
            }
            if !seen.insert(id.clone()) {
                return invalid(&key, "is configured twice");
            }
            if number.name.trim().is_empty() {
                return invalid("whatsapp.numbers", "a number's name must not be empty");
            }
        }
        Ok(())
    }

    fn validate_endpoints(&self) -> Result<(), SettingsError> {
        if !self.webhook_path.starts_with('/') {
            return invalid("whatsapp.webhook_path", "must start with '/'");
        }
        if !(self.api_url.starts_with("http://") || self.api_url.starts_with("https://")) {
            return invalid("whatsapp.api_url", "must be an http(s) URL");
        }
        let version = self.api_version.strip_prefix('v').unwrap_or_default();
        let well_formed = version.split_once('.').is_some_and(|(major, minor)| {
            [major, minor]
                .iter()
                .all(|part| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()))
        });
        if !well_formed {
            return invalid("whatsapp.api_version", "must look like v21.0");
        }
        Ok(())
    }

    fn validate_limits(&self) -> Result<(), SettingsError> {
        let zero = [
            ("whatsapp.max_body_bytes", self.max_body_bytes == 0),
            ("whatsapp.ack_timeout_ms", self.ack_timeout_ms == 0),
            ("whatsapp.max_in_flight", self.max_in_flight == 0),
            (
                "whatsapp.request_timeout_secs",
                self.request_timeout_secs == 0,
            ),
        ];
        match zero.into_iter().find(|(_, is_zero)| *is_zero) {
            Some((key, _)) => invalid(key, "must be greater than zero"),
            None => Ok(()),
        }
    }

    pub(crate) fn ack_timeout(&self) -> Duration {
        Duration::from_millis(self.ack_timeout_ms)
    }

    pub(crate) fn request_timeout(&self) -> Duration {
        Duration::from_secs(self.request_timeout_secs)
    }
}

impl TemplateSettings {
    /// A template `name` in `language`, filled with the reply's text.
    #[must_use]
    pub fn new(name: impl Into<String>, language: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            language: language.into(),
            fill: TemplateFill::Body,
            max_chars: default_template_max_chars(),
            truncation_note: default_truncation_note(),
        }
    }

    fn validate(&self, key: &str) -> Result<(), SettingsError> {
        let named = !self.name.is_empty()
            && self
                .name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !named {
            return invalid(
                &format!("{key}.name"),
                "must be the template's name: lowercase letters, digits and _",
            );
        }
        if self.language.trim().is_empty() {
            return invalid(&format!("{key}.language"), "must not be empty");
        }
        let note = self.truncation_note.chars().count();
        if self.max_chars <= note || self.max_chars > TEMPLATE_BODY_LIMIT {
            return invalid(
                &format!("{key}.max_chars"),
                "must be longer than truncation_note and at most 1024",
            );
        }
        Ok(())
    }
}

/// The settings key of `field` of the number `name`.
pub(crate) fn number_key(name: &str, field: &str) -> String {
    if name == DEFAULT_NUMBER {
        format!("whatsapp.{field}")
    } else {
        format!("whatsapp.numbers.{name}.{field}")
    }
}

fn invalid(key: &str, reason: &'static str) -> Result<(), SettingsError> {
    Err(SettingsError::Invalid {
        key: key.to_owned(),
        reason,
    })
}

/// The app's secrets and every number's access token. Built from the
/// environment ([`Secrets::from_env`]) or directly (tests, secret stores).
#[derive(Clone)]
pub struct Secrets {
    pub app_secret: SecretString,
    pub verify_token: SecretString,
    /// Access tokens by number name.
    tokens: BTreeMap<String, SecretString>,
}

impl Secrets {
    /// The app's secrets, with no access token yet.
    #[must_use]
    pub fn new(app_secret: SecretString, verify_token: SecretString) -> Self {
        Self {
            app_secret,
            verify_token,
            tokens: BTreeMap::new(),
        }
    }

    /// With `token` as the access token of the number named `number`.
    #[must_use]
    pub fn with_token(mut self, number: impl Into<String>, token: SecretString) -> Self {
        self.tokens.insert(number.into(), token);
        self
    }

    /// Reads the secrets from the environment variables `settings` names.
    ///
    /// # Errors
    /// A named variable is unset, empty or not Unicode; the error names the
    /// variable and the settings key, never the value.
    pub fn from_env(settings: &WhatsAppSettings) -> Result<Self, SettingsError> {
        let mut secrets = Self::new(
            read_env("whatsapp.app_secret_env", &settings.app_secret_env)?,
            read_env("whatsapp.verify_token_env", &settings.verify_token_env)?,
        );
        for number in settings.numbers() {
            let key = number_key(&number.name, "access_token_env");
            let token = read_env(&key, &number.access_token_env)?;
            secrets = secrets.with_token(number.name, token);
        }
        Ok(secrets)
    }

    /// The access token of the number named `number`.
    pub(crate) fn token(&self, number: &str) -> Result<&SecretString, SettingsError> {
        self.tokens
            .get(number)
            .ok_or_else(|| SettingsError::MissingSecret {
                key: number_key(number, "access_token_env"),
                var: "(no access token given)".to_owned(),
            })
    }
}

fn read_env(key: &str, var: &str) -> Result<SecretString, SettingsError> {
    match std::env::var(var) {
        Ok(value) if !value.is_empty() => Ok(SecretString::from(value)),
        _ => Err(SettingsError::MissingSecret {
            key: key.to_owned(),
            var: var.to_owned(),
        }),
    }
}

impl fmt::Debug for Secrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Secrets")
            .field("app_secret", &"[redacted]")
            .field("verify_token", &"[redacted]")
            .field("tokens", &self.tokens.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// A configuration problem found before any network call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    #[error("{key}: {reason}")]
    Invalid { key: String, reason: &'static str },
    #[error("{key}: environment variable {var} is not set")]
    MissingSecret { key: String, var: String },
}

/// A Graph id written as a TOML string or integer.
#[derive(Deserialize)]
#[serde(untagged)]
enum RawId {
    Text(String),
    Number(u64),
}

impl From<RawId> for String {
    fn from(raw: RawId) -> Self {
        match raw {
            RawId::Text(text) => text.trim().to_owned(),
            RawId::Number(number) => number.to_string(),
        }
    }
}

fn id<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    RawId::deserialize(deserializer).map(String::from)
}

fn optional_id<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    Option::<RawId>::deserialize(deserializer).map(|raw| raw.map(String::from))
}

fn default_access_token_env() -> String {
    "WHATSAPP_ACCESS_TOKEN".to_owned()
}

fn default_app_secret_env() -> String {
    "WHATSAPP_APP_SECRET".to_owned()
}

fn default_verify_token_env() -> String {
    "WHATSAPP_VERIFY_TOKEN".to_owned()
}

fn default_webhook_path() -> String {
    "/whatsapp/webhook".to_owned()
}

fn default_api_url() -> String {
    "https://graph.facebook.com".to_owned()
}

fn default_api_version() -> String {
    "v21.0".to_owned()
}

fn default_max_body_bytes() -> usize {
    1024 * 1024
}

fn default_ack_timeout_ms() -> u64 {
    5000
}

fn default_max_in_flight() -> usize {
    256
}

fn default_request_timeout_secs() -> u64 {
    10
}

fn default_true() -> bool {
    true
}

fn default_buttons_prompt() -> String {
    "Choose an answer:".to_owned()
}

fn default_list_button() -> String {
    "Answers".to_owned()
}

fn default_template_max_chars() -> usize {
    700
}

fn default_truncation_note() -> String {
    " … (reply to read the rest)".to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> WhatsAppSettings {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn only_a_phone_number_id_is_required() {
        let settings = parse(r#"{"phone_number_id":"1065"}"#);
        assert_eq!(settings.webhook_path, "/whatsapp/webhook");
        assert_eq!(settings.access_token_env, "WHATSAPP_ACCESS_TOKEN");
        assert_eq!(settings.app_secret_env, "WHATSAPP_APP_SECRET");
        assert_eq!(settings.verify_token_env, "WHATSAPP_VERIFY_TOKEN");
        assert_eq!(settings.graph_base(), "https://graph.facebook.com/v21.0");
        assert_eq!(settings.max_body_bytes, 1024 * 1024);
        assert!(!settings.react_to_reactions);
        assert!(settings.read_receipts && settings.typing_indicator);
        settings.validate().unwrap();
    }

    #[test]
    fn ids_may_be_written_as_integers() {
        let settings = parse(r#"{"phone_number_id":106540352242922}"#);
        assert_eq!(settings.phone_number_id.as_deref(), Some("106540352242922"));
    }

    #[test]
    fn named_numbers_inherit_the_token_variable_and_template() {
        let settings = parse(
            r#"{"phone_number_id":"1","template":{"name":"reply_ready","language":"en_US"},
                "numbers":{"sales":{"phone_number_id":"2","access_token_env":"SALES_TOKEN"},
                           "support":{"phone_number_id":"3",
                                      "template":{"name":"other","language":"de","fill":"none"}}}}"#,
        );
        settings.validate().unwrap();
        let numbers = settings.numbers();
        let names: Vec<_> = numbers.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["default", "sales", "support"]);
        assert_eq!(numbers[1].access_token_env, "SALES_TOKEN");
        assert_eq!(numbers[1].template.as_ref().unwrap().name, "reply_ready");
        assert_eq!(numbers[2].access_token_env, "WHATSAPP_ACCESS_TOKEN");
        assert_eq!(
            numbers[2].template.as_ref().unwrap().fill,
            TemplateFill::None
        );
    }

    #[test]
    fn numbers_alone_are_enough_but_none_at_all_is_not() {
        parse(r#"{"numbers":{"sales":{"phone_number_id":"2"}}}"#)
            .validate()
            .unwrap();
        let err = parse("{}").validate().unwrap_err();
        assert!(
            err.to_string().starts_with("whatsapp.phone_number_id"),
            "{err}"
        );
    }

    #[test]
    fn bad_values_name_their_key() {
        let cases = [
            (r#"{"phone_number_id":"+1555"}"#, "whatsapp.phone_number_id"),
            (
                r#"{"phone_number_id":"1","numbers":{"b":{"phone_number_id":"1"}}}"#,
                "whatsapp.numbers.b.phone_number_id",
            ),
            (
                r#"{"phone_number_id":"1","webhook_path":"x"}"#,
                "whatsapp.webhook_path",
            ),
            (
                r#"{"phone_number_id":"1","api_version":"21"}"#,
                "whatsapp.api_version",
            ),
            (
                r#"{"phone_number_id":"1","api_url":"graph.facebook.com"}"#,
                "whatsapp.api_url",
            ),
            (
                r#"{"phone_number_id":"1","max_body_bytes":0}"#,
                "whatsapp.max_body_bytes",
            ),
            (
                r#"{"phone_number_id":"1","read_receipts":false}"#,
                "whatsapp.typing_indicator",
            ),
            (
                r#"{"phone_number_id":"1","template":{"name":"Bad Name","language":"en"}}"#,
                "whatsapp.template.name",
            ),
            (
                r#"{"phone_number_id":"1","template":{"name":"t","language":"en","max_chars":2000}}"#,
                "whatsapp.template.max_chars",
            ),
        ];
        for (json, key) in cases {
            let err = parse(json).validate().unwrap_err();
            assert!(err.to_string().starts_with(key), "{json}: {err}");
        }
    }

    #[test]
    fn unknown_keys_are_refused() {
        let parsed: Result<WhatsAppSettings, _> =
            serde_json::from_str(r#"{"phone_number_id":"1","phone_number":"+1555"}"#);
        assert!(parsed.is_err());
    }

    #[test]
    fn secrets_never_show_in_debug_output() {
        let secrets = Secrets::new(
            SecretString::from("app-s3cret"),
            SecretString::from("v3rify"),
        )
        .with_token("default", SecretString::from("EAAt0ken"));
        let shown = format!("{secrets:?}");
        assert!(!shown.contains("s3cret") && !shown.contains("v3rify") && !shown.contains("t0ken"));
        assert!(shown.contains("default"));
    }

    #[test]
    fn a_missing_token_names_the_key() {
        let secrets = Secrets::new(SecretString::from("a"), SecretString::from("b"));
        let err = secrets.token("sales").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("whatsapp.numbers.sales.access_token_env"),
            "{err}"
        );
    }
}
