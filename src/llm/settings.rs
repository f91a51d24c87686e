//! The `[llm]` settings: which provider new sessions talk to, and how.

use std::time::Duration;

use schemars::JsonSchema;
use secrecy::SecretString;
use serde::Deserialize;

use super::{Endpoint, ProviderKind, RetryPolicy};
use crate::domain::setting::{self, BaseUrl, InvalidSetting};

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct LlmSettings {
    /// `openai` (any Chat Completions server) or `anthropic`.
    pub provider: ProviderKind,
    /// OpenAI: up to and including `/v1`. Anthropic: the host root.
    pub base_url: BaseUrl,
    /// The model new sessions use.
    pub model: String,
    /// Further models clients may pick (`GET /v1/models`).
    pub extra_models: Vec<String>,
    /// Name of the environment variable holding the API key.
    pub api_key_env: String,
    /// Longest one model call may take (`timeout_secs`).
    #[serde(
        rename = "timeout_secs",
        deserialize_with = "setting::secs::deserialize"
    )]
    #[schemars(with = "u64")]
    pub timeout: Duration,
    pub max_retries: u32,
    /// The first retry's delay (`retry_base_ms`), doubling after.
    #[serde(
        rename = "retry_base_ms",
        deserialize_with = "setting::millis::deserialize"
    )]
    #[schemars(with = "u64")]
    pub retry_base: Duration,
    /// The longest delay between retries (`retry_max_ms`).
    #[serde(
        rename = "retry_max_ms",
        deserialize_with = "setting::millis::deserialize"
    )]
    #[schemars(with = "u64")]
    pub retry_max: Duration,
    /// Output token cap per call.
    pub max_tokens: u32,
    /// How long Anthropic keeps a conversation's prompt cached: `5m`, `1h`
    /// (writes cost 2× the input price instead of 1.25×, and survive a
    /// person answering minutes later), or `auto` (`1h` for a turn that
    /// came more than five minutes after the previous one, else `5m`).
    pub cache_ttl: CacheTtl,
}

/// How long a prompt-cache entry lives (Anthropic's `cache_control.ttl`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, JsonSchema)]
pub enum CacheTtl {
    #[serde(rename = "5m")]
    FiveMinutes,
    #[serde(rename = "1h")]
    OneHour,
    /// The hour for conversations whose last pause passed five minutes.
    #[default]
    #[serde(rename = "auto")]
    Auto,
}

impl CacheTtl {
    /// What a 5-minute cache is worth nothing after.
    pub const SHORT: Duration = Duration::from_secs(300);

    /// Whether a turn that followed a pause of `idle` writes for an hour.
    pub fn hour_for(self, idle: Duration) -> bool {
        match self {
            Self::FiveMinutes => false,
            Self::OneHour => true,
            Self::Auto => idle > Self::SHORT,
        }
    }
}

impl Default for LlmSettings {
    fn default() -> Self {
        Self {
            provider: ProviderKind::Openai,
            base_url: BaseUrl::parse("https://api.openai.com/v1").expect("a valid URL"),
            model: "gpt-4o-mini".to_owned(),
            extra_models: Vec::new(),
            api_key_env: "OPENAI_API_KEY".to_owned(),
            timeout: Duration::from_secs(120),
            max_retries: 3,
            retry_base: Duration::from_millis(500),
            retry_max: Duration::from_secs(20),
            max_tokens: 4096,
            cache_ttl: CacheTtl::Auto,
        }
    }
}

impl LlmSettings {
    /// The endpoint, with the key read from the environment (empty when the
    /// variable is unset: local servers often need none).
    pub fn endpoint(&self) -> Endpoint {
        let key = std::env::var(&self.api_key_env).unwrap_or_default();
        Endpoint {
            kind: self.provider,
            base_url: self.base_url.to_string(),
            api_key: SecretString::from(key),
            timeout: self.timeout,
            retry: RetryPolicy {
                max_retries: self.max_retries,
                base_delay: self.retry_base,
                max_delay: self.retry_max,
            },
            cache_ttl: self.cache_ttl,
        }
    }

    /// Checks what parses but cannot be used.
    ///
    /// # Errors
    /// An empty model name.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        if self.model.trim().is_empty() {
            return Err(InvalidSetting::new("llm.model", "must not be empty"));
        }
        Ok(())
    }
}
