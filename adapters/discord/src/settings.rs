//! The Discord section of the configuration and the bot token it points at.

use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;

use crate::error::DiscordError;

/// Environment variable read for the bot token unless `token_env` says otherwise.
pub const DEFAULT_TOKEN_ENV: &str = "DISCORD_BOT_TOKEN";

/// Settings of the Discord adapter (`[discord]` in the configuration).
///
/// Every key has a default, so an empty section is valid:
///
/// ```toml
/// [discord]
/// token_env = "DISCORD_BOT_TOKEN"     # where the bot token is read from
/// free_response_channels = ["123456789012345678"]
/// auto_thread = false
/// reply_ping = false                  # replies in servers notify the asker
/// stream_replies = true               # show replies growing, edited in place
/// edit_interval_ms = 1500             # at most one edit this often
/// # api_proxy = "http://127.0.0.1:3000"  # tests only
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct DiscordSettings {
    /// Name of the environment variable holding the bot token (never the
    /// token itself: committed configuration holds no secrets).
    pub token_env: String,
    /// Base URL that replaces `https://discord.com` for REST calls, e.g.
    /// `http://127.0.0.1:3000` for a fake server in tests or an HTTP proxy
    /// that does its own rate limiting. Either way a 429's `retry_after` is
    /// honoured: a short one is waited out, a long one reaches the core as
    /// [`SendError::RetryAfter`](switchboard_contract::SendError::RetryAfter).
    pub api_proxy: Option<String>,
    /// Server channel (or thread) ids where the bot answers every message,
    /// not only those that mention it or reply to it.
    pub free_response_channels: Vec<String>,
    /// When the bot is mentioned in a plain server channel, open a public
    /// thread on that message and hold the conversation there. Messages in
    /// threads the bot opened (since this process started) need no mention.
    pub auto_thread: bool,
    /// Whether a reply in a server channel or thread notifies (pings) the
    /// person it answers, as Discord's "mention" toggle on a reply does.
    /// Off by default; replies in DMs never ping.
    pub reply_ping: bool,
    /// Show replies growing while the model writes them: one message,
    /// edited in place, becomes the reply. Default true.
    pub stream_replies: bool,
    /// How often that message is edited while the reply grows, in
    /// milliseconds (Discord allows about five edits per five seconds in a
    /// channel). Default 1500.
    pub edit_interval_ms: u64,
}

impl Default for DiscordSettings {
    fn default() -> Self {
        Self {
            token_env: DEFAULT_TOKEN_ENV.to_owned(),
            api_proxy: None,
            free_response_channels: Vec::new(),
            auto_thread: false,
            reply_ping: false,
            stream_replies: true,
            edit_interval_ms: 1500,
        }
    }
}

impl DiscordSettings {
    /// Reads the bot token from the environment variable named by `token_env`.
    ///
    /// # Errors
    /// [`DiscordError::MissingToken`] when the variable is unset, empty or
    /// not Unicode; the error names the variable, never a value.
    pub fn token_from_env(&self) -> Result<SecretString, DiscordError> {
        let token = std::env::var(&self.token_env)
            .map(SecretString::from)
            .map_err(|_| DiscordError::MissingToken {
                env: self.token_env.clone(),
            })?;
        check_token(&token, &self.token_env)?;
        Ok(token)
    }

    /// The free-response channel ids, parsed.
    ///
    /// # Errors
    /// [`DiscordError::InvalidSetting`] naming the first id that is not a
    /// Discord snowflake.
    pub fn free_response_channel_ids(
        &self,
    ) -> Result<Vec<serenity::model::id::ChannelId>, DiscordError> {
        self.free_response_channels
            .iter()
            .map(|raw| {
                crate::ids::channel_id(raw).ok_or_else(|| DiscordError::InvalidSetting {
                    key: "discord.free_response_channels",
                    reason: format!("{raw:?} is not a channel id"),
                })
            })
            .collect()
    }
}

/// Rejects a token that cannot be right, without echoing it.
pub(crate) fn check_token(token: &SecretString, env: &str) -> Result<(), DiscordError> {
    let raw = token.expose_secret().trim();
    if raw.is_empty() {
        return Err(DiscordError::MissingToken {
            env: env.to_owned(),
        });
    }
    if raw.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(DiscordError::InvalidSetting {
            key: "discord.token_env",
            reason: format!("the token in {env} contains whitespace"),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_section_takes_the_defaults() {
        let settings: DiscordSettings = serde_json::from_str("{}").expect("valid settings");
        assert_eq!(settings, DiscordSettings::default());
        assert_eq!(settings.token_env, "DISCORD_BOT_TOKEN");
        assert!(!settings.auto_thread);
    }

    #[test]
    fn a_free_response_channel_must_be_a_snowflake() {
        let settings = DiscordSettings {
            free_response_channels: vec!["general".to_owned()],
            ..DiscordSettings::default()
        };
        let err = settings.free_response_channel_ids().expect_err("not an id");
        assert!(err.to_string().contains("discord.free_response_channels"));
    }

    #[test]
    fn a_missing_token_names_the_variable() {
        let settings = DiscordSettings {
            token_env: "SWITCHBOARD_TEST_UNSET_DISCORD_TOKEN".to_owned(),
            ..DiscordSettings::default()
        };
        let err = settings.token_from_env().expect_err("unset");
        assert!(
            err.to_string()
                .contains("SWITCHBOARD_TEST_UNSET_DISCORD_TOKEN")
        );
    }

    #[test]
    fn a_token_with_whitespace_is_rejected_without_echoing_it() {
        let token = SecretString::from("abc def-secret");
        let err = check_token(&token, "X").expect_err("whitespace");
        assert!(!err.to_string().contains("secret"));
    }
}
