//! The adapter's configuration ([`FeishuSettings`]) and its secrets
//! ([`Credentials`]), which are read from environment variables named in the
//! settings and never stored in configuration files.

use std::fmt;
use std::time::Duration;

use secrecy::SecretString;
use serde::{Deserialize, Deserializer};

/// Feishu/Lark adapter settings, usually the `[feishu]` table of the gateway's
/// configuration. Every field but `app_id` has a default.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FeishuSettings {
    /// The app's App ID (`cli_…`), from the developer console. Also the
    /// account id of every message this adapter submits.
    pub app_id: String,
    /// Environment variable holding the App Secret.
    #[serde(default = "default_app_secret_env")]
    pub app_secret_env: String,
    /// Environment variable holding the Verification Token (Events and
    /// callbacks → Encryption strategy).
    #[serde(default = "default_verification_token_env")]
    pub verification_token_env: String,
    /// Environment variable holding the Encrypt Key, when one is set in the
    /// console. With a key, events arrive encrypted and signed, and unsigned
    /// events are rejected. `None` (the default): events arrive in plain JSON.
    #[serde(default)]
    pub encrypt_key_env: Option<String>,
    /// `feishu` (open.feishu.cn), `lark` (open.larksuite.com), or a base URL
    /// such as `http://127.0.0.1:9000` (tests, proxies). Default `feishu`.
    #[serde(default)]
    #[schemars(with = "String")]
    pub domain: Domain,
    /// The path the webhook route is served at, as entered in the console's
    /// request URL. Default `/feishu/events`.
    #[serde(default = "default_webhook_path")]
    pub webhook_path: String,
    /// Largest webhook body accepted, in bytes; larger ones get 413.
    /// Default 1 MiB (events are a few KiB).
    #[serde(default = "default_max_body_bytes")]
    pub max_body_bytes: usize,
    /// How long the webhook waits for the core to record an event. Only a
    /// recorded event is acknowledged (200); one the core has not recorded
    /// by then is answered 503, so Feishu delivers it again (recording goes
    /// on in the background, and the redelivery is deduplicated by event
    /// id). Feishu wants an answer within 3 s. Default 2000 ms.
    #[serde(default = "default_ack_timeout_ms")]
    pub ack_timeout_ms: u64,
    /// How far a signed request's `X-Lark-Request-Timestamp` may be from
    /// this host's clock, either way, in seconds; requests outside the window
    /// are refused with 401 so a captured request cannot be replayed later.
    /// Applies when an Encrypt Key is set (only then are requests signed).
    /// Default 300 (five minutes).
    #[serde(default = "default_signature_max_age_secs")]
    pub signature_max_age_secs: u64,
    /// Most events being handed to the core at once; beyond it the webhook
    /// answers 503 and Feishu redelivers later. Default 256.
    #[serde(default = "default_max_in_flight")]
    pub max_in_flight: usize,
    /// Timeout of one request to the Feishu open API, in seconds. Default 10.
    #[serde(default = "default_request_timeout_secs")]
    pub request_timeout_secs: u64,
    /// Show replies growing while the model writes them: one card, updated
    /// in place, becomes the reply. Default true.
    #[serde(default = "default_stream_replies")]
    pub stream_replies: bool,
    /// How often that card is updated while the reply grows, in
    /// milliseconds (Feishu allows 5 requests a second per chat). Default
    /// 1000.
    #[serde(default = "default_card_update_interval_ms")]
    pub card_update_interval_ms: u64,
}

impl FeishuSettings {
    /// Settings with every default, for the app `app_id`.
    #[must_use]
    pub fn new(app_id: impl Into<String>) -> Self {
        Self {
            app_id: app_id.into(),
            app_secret_env: default_app_secret_env(),
            verification_token_env: default_verification_token_env(),
            encrypt_key_env: None,
            domain: Domain::default(),
            webhook_path: default_webhook_path(),
            max_body_bytes: default_max_body_bytes(),
            ack_timeout_ms: default_ack_timeout_ms(),
            signature_max_age_secs: default_signature_max_age_secs(),
            max_in_flight: default_max_in_flight(),
            request_timeout_secs: default_request_timeout_secs(),
            stream_replies: default_stream_replies(),
            card_update_interval_ms: default_card_update_interval_ms(),
        }
    }

    /// Checks the values; the error names the offending key.
    ///
    /// # Errors
    /// An empty `app_id`, a `webhook_path` not starting with `/`, or a zero
    /// limit.
    pub fn validate(&self) -> Result<(), SettingsError> {
        if self.app_id.trim().is_empty() {
            return Err(SettingsError::Invalid {
                key: "feishu.app_id",
                reason: "must not be empty",
            });
        }
        if !self.webhook_path.starts_with('/') {
            return Err(SettingsError::Invalid {
                key: "feishu.webhook_path",
                reason: "must start with '/'",
            });
        }
        let zero = [
            ("feishu.max_body_bytes", self.max_body_bytes == 0),
            ("feishu.ack_timeout_ms", self.ack_timeout_ms == 0),
            (
                "feishu.signature_max_age_secs",
                self.signature_max_age_secs == 0,
            ),
            ("feishu.max_in_flight", self.max_in_flight == 0),
            (
                "feishu.request_timeout_secs",
                self.request_timeout_secs == 0,
            ),
        ];
        if let Some((key, _)) = zero.into_iter().find(|(_, is_zero)| *is_zero) {
            return Err(SettingsError::Invalid {
                key,
                reason: "must be greater than zero",
            });
        }
        if let Domain::Custom(url) = &self.domain
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return Err(SettingsError::Invalid {
                key: "feishu.domain",
                reason: "must be `feishu`, `lark` or an http(s) URL",
            });
        }
        Ok(())
    }

    pub(crate) fn ack_timeout(&self) -> Duration {
        Duration::from_millis(self.ack_timeout_ms)
    }

    pub(crate) fn signature_max_age(&self) -> Duration {
        Duration::from_secs(self.signature_max_age_secs)
    }

    /// How often a growing reply's card is updated; `None` when replies
    /// are not streamed.
    pub(crate) fn card_updates(&self) -> Option<Duration> {
        self.stream_replies
            .then(|| Duration::from_millis(self.card_update_interval_ms))
    }

    pub(crate) fn request_timeout(&self) -> Duration {
        Duration::from_secs(self.request_timeout_secs)
    }
}

/// Which open platform the app lives on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Domain {
    /// Feishu (mainland China): `https://open.feishu.cn`.
    #[default]
    Feishu,
    /// Lark (international): `https://open.larksuite.com`.
    Lark,
    /// Any other base URL, without a trailing slash (tests, proxies).
    Custom(String),
}

impl Domain {
    /// The open API base URL, without a trailing slash.
    #[must_use]
    pub fn base_url(&self) -> &str {
        match self {
            Self::Feishu => "https://open.feishu.cn",
            Self::Lark => "https://open.larksuite.com",
            Self::Custom(url) => url.trim_end_matches('/'),
        }
    }
}

impl<'de> Deserialize<'de> for Domain {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = String::deserialize(deserializer)?;
        Ok(match value.as_str() {
            "feishu" => Self::Feishu,
            "lark" => Self::Lark,
            _ => Self::Custom(value),
        })
    }
}

/// The app's secrets. Built from the environment ([`Credentials::from_env`])
/// or directly (tests, secret stores).
#[derive(Clone)]
pub struct Credentials {
    pub app_secret: SecretString,
    pub verification_token: SecretString,
    /// Set when the console has an Encrypt Key.
    pub encrypt_key: Option<SecretString>,
}

impl Credentials {
    /// Reads the secrets from the environment variables `settings` names.
    ///
    /// # Errors
    /// A named variable is unset, empty or not Unicode; the error names the
    /// variable and the settings key, never the value.
    pub fn from_env(settings: &FeishuSettings) -> Result<Self, SettingsError> {
        let read = |key: &'static str, var: &str| -> Result<SecretString, SettingsError> {
            match std::env::var(var) {
                Ok(value) if !value.is_empty() => Ok(SecretString::from(value)),
                _ => Err(SettingsError::MissingSecret {
                    key,
                    var: var.to_owned(),
                }),
            }
        };
        Ok(Self {
            app_secret: read("feishu.app_secret_env", &settings.app_secret_env)?,
            verification_token: read(
                "feishu.verification_token_env",
                &settings.verification_token_env,
            )?,
            encrypt_key: settings
                .encrypt_key_env
                .as_deref()
                .map(|var| read("feishu.encrypt_key_env", var))
                .transpose()?,
        })
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("app_secret", &"[redacted]")
            .field("verification_token", &"[redacted]")
            .field(
                "encrypt_key",
                &self.encrypt_key.as_ref().map(|_| "[redacted]"),
            )
            .finish()
    }
}

/// A configuration problem found at startup.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    #[error("{key}: {reason}")]
    Invalid {
        key: &'static str,
        reason: &'static str,
    },
    #[error("{key}: environment variable {var} is not set")]
    MissingSecret { key: &'static str, var: String },
}

fn default_app_secret_env() -> String {
    "FEISHU_APP_SECRET".to_owned()
}

fn default_verification_token_env() -> String {
    "FEISHU_VERIFICATION_TOKEN".to_owned()
}

fn default_webhook_path() -> String {
    "/feishu/events".to_owned()
}

fn default_max_body_bytes() -> usize {
    1024 * 1024
}

fn default_ack_timeout_ms() -> u64 {
    2000
}

fn default_signature_max_age_secs() -> u64 {
    300
}

fn default_max_in_flight() -> usize {
    256
}

fn default_request_timeout_secs() -> u64 {
    10
}

fn default_stream_replies() -> bool {
    true
}

fn default_card_update_interval_ms() -> u64 {
    1000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_app_id_is_required() {
        let settings: FeishuSettings = serde_json::from_str(r#"{"app_id":"cli_x"}"#).unwrap();
        assert_eq!(settings.app_secret_env, "FEISHU_APP_SECRET");
        assert_eq!(settings.webhook_path, "/feishu/events");
        assert_eq!(settings.domain, Domain::Feishu);
        assert!(settings.encrypt_key_env.is_none());
        settings.validate().unwrap();
    }

    #[test]
    fn the_domain_names_a_platform_or_a_url() {
        let lark: FeishuSettings =
            serde_json::from_str(r#"{"app_id":"a","domain":"lark"}"#).unwrap();
        assert_eq!(lark.domain.base_url(), "https://open.larksuite.com");
        let custom: FeishuSettings =
            serde_json::from_str(r#"{"app_id":"a","domain":"http://127.0.0.1:9/"}"#).unwrap();
        assert_eq!(custom.domain.base_url(), "http://127.0.0.1:9");
        let bad: FeishuSettings =
            serde_json::from_str(r#"{"app_id":"a","domain":"feishu.cn"}"#).unwrap();
        assert!(matches!(
            bad.validate(),
            Err(SettingsError::Invalid {
                key: "feishu.domain",
                ..
            })
        ));
    }

    #[test]
    fn credentials_never_show_in_debug_output() {
        let credentials = Credentials {
            app_secret: SecretString::from("s3cret".to_owned()),
            verification_token: SecretString::from("t0ken".to_owned()),
            encrypt_key: Some(SecretString::from("k3y".to_owned())),
        };
        let shown = format!("{credentials:?}");
        assert!(!shown.contains("s3cret") && !shown.contains("t0ken") && !shown.contains("k3y"));
    }
}
