//! Errors of building and running the Discord adapter.
//!
//! Delivery errors are the contract's [`SendError`](switchboard_contract::SendError);
//! this enum covers configuration and the gateway connection. No variant
//! carries the bot token.

/// Why the Discord adapter could not start or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DiscordError {
    /// The token variable is unset or empty.
    #[error("the Discord bot token is missing: set the environment variable {env}")]
    MissingToken { env: String },
    /// A setting has an unusable value.
    #[error("invalid setting {key}: {reason}")]
    InvalidSetting { key: &'static str, reason: String },
    /// Gateway close code 4014: the bot asked for a privileged intent that is
    /// not enabled for the application.
    #[error(
        "Discord refused the MESSAGE_CONTENT intent (gateway close code 4014): open \
         https://discord.com/developers/applications, select the application, go to Bot → \
         Privileged Gateway Intents, enable MESSAGE CONTENT INTENT, save, and restart"
    )]
    PrivilegedIntentDisabled,
    /// Gateway close code 4004: the token was rejected.
    #[error(
        "Discord rejected the bot token (gateway close code 4004): reset it under Bot → Token \
         in the developer portal and update the environment variable"
    )]
    InvalidToken,
    /// Asking Discord which bot the token belongs to failed (not a
    /// rejected token: that is [`DiscordError::InvalidToken`]).
    #[error("could not ask Discord which bot this is: {0}")]
    Identity(String),
    /// Any other gateway or client failure.
    #[error("the Discord gateway stopped: {0}")]
    Gateway(String),
}
