//! The adapter's configuration: [`TelegramSettings`], one `[telegram]` table
//! of the gateway's settings, with defaults for every key.
//!
//! Settings name environment variables rather than holding secrets: the bot
//! token and the webhook secret are read from the environment at start and
//! kept as [`secrecy::SecretString`]s from then on.

use std::time::Duration;

use serde::Deserialize;
use url::Url;

/// How updates reach the adapter.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// The adapter asks Telegram for updates (`getUpdates`); works behind
    /// NAT, needs no public URL. Only one process may poll one bot.
    #[default]
    Polling,
    /// Telegram posts updates to the gateway's HTTP server at
    /// [`TelegramSettings::webhook_path`]; needs a public HTTPS URL.
    Webhook,
}

/// The `[telegram]` settings table.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct TelegramSettings {
    /// Name of the environment variable that holds the bot token from
    /// BotFather. Default `TELEGRAM_BOT_TOKEN`.
    pub token_env: String,
    /// Base URL of the Bot API, for a local Bot API server or a test fake.
    /// Default: Telegram's (`https://api.telegram.org`).
    #[schemars(with = "Option<String>")]
    pub api_url: Option<Url>,
    /// `polling` (default) or `webhook`.
    pub mode: Mode,
    /// Path of the webhook route in the gateway's HTTP server. Default
    /// `/telegram/webhook`.
    pub webhook_path: String,
    /// Name of the environment variable holding the webhook secret that
    /// Telegram echoes in `X-Telegram-Bot-Api-Secret-Token` (1–256 characters
    /// of `A-Z a-z 0-9 _ -`). Required in webhook mode: without it the route
    /// refuses every request.
    pub webhook_secret_env: Option<String>,
    /// The public HTTPS URL of the webhook route. When set in webhook mode,
    /// the adapter calls `setWebhook` with it (and the secret) on start.
    #[schemars(with = "Option<String>")]
    pub set_webhook_url: Option<Url>,
    /// Chats (Telegram chat ids, e.g. `-1001234567890`) where the bot answers
    /// every message, not only those that address it.
    pub free_response_chats: Vec<i64>,
    /// Long-polling timeout of one `getUpdates` call, in seconds. Default 25.
    pub poll_timeout_secs: u32,
    /// Largest webhook request body accepted, in bytes. Default 1 MiB.
    pub webhook_max_body_bytes: usize,
    /// Show replies growing while the model writes them. Default true.
    pub stream_replies: bool,
    /// In private chats, how often the draft (`sendMessageDraft`) changes,
    /// in milliseconds. Default 1000.
    pub draft_interval_ms: u64,
    /// In groups, how often the reply's message is edited while it grows,
    /// in milliseconds; Telegram allows a bot about 20 messages a minute in
    /// a group. Default 3000.
    pub group_edit_interval_ms: u64,
}

impl Default for TelegramSettings {
    fn default() -> Self {
        Self {
            token_env: "TELEGRAM_BOT_TOKEN".to_owned(),
            api_url: None,
            mode: Mode::Polling,
            webhook_path: "/telegram/webhook".to_owned(),
            webhook_secret_env: None,
            set_webhook_url: None,
            free_response_chats: Vec::new(),
            poll_timeout_secs: 25,
            webhook_max_body_bytes: 1024 * 1024,
            stream_replies: true,
            draft_interval_ms: 1000,
            group_edit_interval_ms: 3000,
        }
    }
}

impl TelegramSettings {
    /// The long-polling timeout as a [`Duration`].
    #[must_use]
    pub fn poll_timeout(&self) -> Duration {
        Duration::from_secs(u64::from(self.poll_timeout_secs))
    }

    /// How often replies' drafts change, when they are shown.
    #[must_use]
    pub fn drafts(&self) -> Option<DraftPace> {
        self.stream_replies.then(|| DraftPace {
            private: Duration::from_millis(self.draft_interval_ms),
            group: Duration::from_millis(self.group_edit_interval_ms),
        })
    }
}

/// How often a reply's draft may change, by kind of chat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DraftPace {
    /// Private chats (`sendMessageDraft`).
    pub private: Duration,
    /// Groups (an edited message).
    pub group: Duration,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_table_gives_the_defaults() {
        let settings: TelegramSettings = serde_json::from_str("{}").expect("parses");
        assert_eq!(settings, TelegramSettings::default());
        assert_eq!(settings.mode, Mode::Polling);
        assert_eq!(settings.token_env, "TELEGRAM_BOT_TOKEN");
        assert_eq!(settings.webhook_path, "/telegram/webhook");
    }

    #[test]
    fn webhook_mode_and_chats_parse() {
        let settings: TelegramSettings = serde_json::from_str(
            r#"{"mode":"webhook","webhook_secret_env":"TG_SECRET",
                "set_webhook_url":"https://example.org/telegram/webhook",
                "free_response_chats":[-1001]}"#,
        )
        .expect("parses");
        assert_eq!(settings.mode, Mode::Webhook);
        assert_eq!(settings.free_response_chats, vec![-1001]);
        assert_eq!(settings.webhook_secret_env.as_deref(), Some("TG_SECRET"));
    }
}
