//! Switchboard's Telegram adapter.
//!
//! Chat with the agent from Telegram private chats, groups and forum topics.
//! The gateway builds a [`TelegramPlatform`] from [`TelegramSettings`] and
//! runs it as every adapter ([`switchboard_contract::Adapter`]): started, it
//! is a [`TelegramAdapter`] (connected with the core's [`InboundSink`]), whose
//! [`TelegramAdapter::sender`] delivers the `telegram` platform's replies and
//! which either long-polls ([`TelegramAdapter::run_polling`]) or serves
//! [`TelegramAdapter::webhook_router`].
//!
//! Layout: [`settings`] (configuration), `lifecycle` ([`TelegramPlatform`],
//! the adapter as the core supervises it), `entities` (UTF-16 entity offsets
//! → checked byte ranges), `normalise` (update →
//! [`switchboard_contract::InboundMessage`]), `inbound` (normalise and
//! submit, a panic contained to its update), `press` (a `callback_query` →
//! [`switchboard_contract::InboundAction`]), `callback` (a tap handed to the
//! core, answered with `answerCallbackQuery`, the message edited), `polling`
//! (the `getUpdates` loop), `webhook` (the axum route), `format` (split and
//! render replies), `keyboard` (buttons as an inline keyboard), [`sender`]
//! (the [`PlatformSender`]), [`error`] (errors, token scrubbing).
//!
//! Buttons: a reply's [`switchboard_contract::Button`]s become an inline
//! keyboard (`reply_markup.inline_keyboard`, one `callback_data` button a
//! row) under its last chunk. A tap arrives as a `callback_query` update
//! (both polling and `setWebhook` ask for `callback_query` in
//! `allowed_updates`), goes to the core's `InboundSink::act`, and is always
//! answered with `answerCallbackQuery` (the core's notice as the toast);
//! the core's new text replaces the message's with `editMessageText`, its
//! keyboard removed.
//!
//! The adapter depends on the contract crate only, never on the core.

mod callback;
mod entities;
pub mod error;
mod format;
mod inbound;
mod keyboard;
mod lifecycle;
mod media;
mod normalise;
mod polling;
mod press;
pub mod sender;
pub mod settings;
mod webhook;

use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};
use switchboard_contract::{AccountId, InboundSink, LinkObserver, PlatformSender};
use teloxide_core::Bot;
use teloxide_core::payloads::SetWebhookSetters;
use teloxide_core::prelude::Requester;
use teloxide_core::types::AllowedUpdate;
use tokio_util::sync::CancellationToken;

pub use error::TelegramError;
pub use format::TELEGRAM_TEXT_LIMIT;
pub use lifecycle::TelegramPlatform;
pub use sender::TelegramSender;
pub use settings::{Mode, TelegramSettings};
pub use webhook::SECRET_HEADER;

use callback::Callbacks;
use error::Scrubber;
use inbound::Inbound;
use normalise::{BotIdentity, Normaliser};
use polling::Poller;

/// The platform name this adapter registers under and stamps on messages.
pub const PLATFORM: &str = "telegram";

/// The updates asked for, by polling and the webhook alike: new messages,
/// and taps on the bot's inline buttons.
const ALLOWED_UPDATES: [AllowedUpdate; 2] = [AllowedUpdate::Message, AllowedUpdate::CallbackQuery];

/// HTTP timeout on top of the long-polling timeout, so a `getUpdates` that
/// Telegram holds open for the whole poll is not cut short.
const HTTP_TIMEOUT_MARGIN: Duration = Duration::from_secs(15);

/// A connected Telegram bot: the sender for replies and the two ways
/// updates come in.
pub struct TelegramAdapter {
    bot: Bot,
    scrubber: Scrubber,
    settings: TelegramSettings,
    inbound: Arc<Inbound>,
    sender: Arc<TelegramSender>,
    webhook_secret: Option<SecretString>,
    /// Told when polling fails and when it works again.
    link: Option<Arc<dyn LinkObserver>>,
}

impl std::fmt::Debug for TelegramAdapter {
    // Written by hand: teloxide's `Bot` derives `Debug` over the token.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TelegramAdapter")
            .field("account", &self.inbound.normaliser.account)
            .field("username", &self.inbound.normaliser.identity.username)
            .field("mode", &self.settings.mode)
            .finish_non_exhaustive()
    }
}

impl TelegramAdapter {
    /// Tells `observer` when polling fails (`getUpdates` erring: Telegram
    /// unreachable, say) and when it works again.
    #[must_use]
    pub fn with_link_observer(mut self, observer: Arc<dyn LinkObserver>) -> Self {
        self.link = Some(observer);
        self
    }

    /// Reads the bot token (and, when configured, the webhook secret) from
    /// the environment variables the settings name, then connects as
    /// [`TelegramAdapter::connect_with_secrets`] does.
    ///
    /// # Errors
    /// A missing variable (the error names the key), plus those of
    /// [`TelegramAdapter::connect_with_secrets`].
    pub async fn connect(
        settings: TelegramSettings,
        sink: Arc<dyn InboundSink>,
    ) -> Result<Self, TelegramError> {
        let (token, webhook_secret) = read_secrets(&settings)?;
        Self::connect_with_secrets(settings, token, webhook_secret, sink).await
    }

    /// Validates the settings, asks Telegram who the bot is (`getMe`) and, in
    /// webhook mode with `set_webhook_url`, registers the webhook
    /// (`setWebhook` with the secret).
    ///
    /// # Errors
    /// An invalid setting (named), a webhook mode without secret, or a failed
    /// `getMe`/`setWebhook` (a wrong token shows here).
    pub async fn connect_with_secrets(
        settings: TelegramSettings,
        token: SecretString,
        webhook_secret: Option<SecretString>,
        sink: Arc<dyn InboundSink>,
    ) -> Result<Self, TelegramError> {
        validate(&settings, webhook_secret.as_ref())?;
        let (bot, scrubber) = client(&settings, token)?;
        let (identity, account) = identify(&bot, &scrubber).await?;
        tracing::info!(bot = %identity.username, account = %account, "connected to Telegram");
        let sender = Arc::new(
            TelegramSender::new(bot.clone(), scrubber.clone()).with_drafts(settings.drafts()),
        );
        let inbound = Arc::new(Inbound {
            normaliser: Normaliser {
                identity,
                account,
                free_response_chats: settings
                    .free_response_chats
                    .iter()
                    .copied()
                    .collect::<HashSet<_>>(),
                files: Some(media::Files {
                    bot: bot.clone(),
                    scrubber: scrubber.clone(),
                }),
            },
            sink,
            callbacks: Callbacks {
                bot: bot.clone(),
                scrubber: scrubber.clone(),
                sender: Arc::clone(&sender),
            },
        });
        let adapter = Self {
            bot,
            scrubber,
            settings,
            inbound,
            sender,
            webhook_secret,
            link: None,
        };
        if adapter.settings.mode == Mode::Webhook && adapter.settings.set_webhook_url.is_some() {
            adapter.set_webhook().await?;
        }
        Ok(adapter)
    }

    /// The bot's account id (its Telegram user id), stamped on every
    /// inbound message.
    #[must_use]
    pub fn account(&self) -> &AccountId {
        &self.inbound.normaliser.account
    }

    /// The bot's username, without `@`.
    #[must_use]
    pub fn username(&self) -> &str {
        &self.inbound.normaliser.identity.username
    }

    /// The configured mode: run [`Self::run_polling`] or mount
    /// [`Self::webhook_router`].
    #[must_use]
    pub fn mode(&self) -> Mode {
        self.settings.mode
    }

    /// The sender to register with the core for [`PLATFORM`].
    #[must_use]
    pub fn sender(&self) -> Arc<dyn PlatformSender> {
        self.sender.clone()
    }

    /// The webhook route, serving `POST` at the configured `webhook_path`;
    /// merge it into the gateway's router (`Router::merge`). Refuses every
    /// request when no webhook secret is configured.
    pub fn webhook_router(&self) -> axum::Router {
        webhook::router(
            &self.settings.webhook_path,
            self.inbound.clone(),
            self.webhook_secret.clone(),
            self.settings.webhook_max_body_bytes,
        )
    }

    /// Registers `set_webhook_url` with Telegram (`setWebhook`, with the
    /// secret, new messages only). [`Self::connect`] calls it in webhook mode.
    ///
    /// # Errors
    /// No URL or secret configured, or Telegram refused.
    pub async fn set_webhook(&self) -> Result<(), TelegramError> {
        let url = self
            .settings
            .set_webhook_url
            .clone()
            .ok_or(TelegramError::InvalidSetting {
                key: "set_webhook_url",
                reason: "not set".to_owned(),
            })?;
        let secret = self
            .webhook_secret
            .as_ref()
            .ok_or(TelegramError::InvalidSetting {
                key: "webhook_secret_env",
                reason: "required to register a webhook".to_owned(),
            })?;
        self.bot
            .set_webhook(url)
            .secret_token(secret.expose_secret())
            .allowed_updates(ALLOWED_UPDATES)
            .await
            .map_err(|e| self.scrubber.api_error("setWebhook", &e))?;
        tracing::info!("Telegram webhook registered");
        Ok(())
    }

    /// The long-polling worker: returned, not spawned, so the caller owns
    /// it (spawn it and await or abort the handle). It removes a webhook
    /// that would block polling, then polls until `shutdown` is cancelled,
    /// and then confirms the updates it handled.
    ///
    /// # Errors
    /// As [`Self::run_polling_until`].
    pub fn run_polling(
        &self,
        shutdown: CancellationToken,
    ) -> impl Future<Output = Result<(), TelegramError>> + Send + 'static {
        self.run_polling_until(shutdown.clone(), shutdown)
    }

    /// Like [`Self::run_polling`], stopping when `stop` is cancelled, which
    /// may happen before `shutdown` (a caller that polls only while it holds
    /// a lease cancels `stop` when the lease is lost). The handled updates
    /// are confirmed only when `shutdown` is cancelled by then: otherwise
    /// another process polls now, and a confirming `getUpdates` would cut
    /// its poll short.
    ///
    /// Only one process may poll a bot at a time: when Telegram answers 409
    /// Conflict (another poller took over), polling stops at once and
    /// returns [`TelegramError::PollingConflict`], logged at WARN; the
    /// caller decides whether to poll again.
    ///
    /// # Errors
    /// The adapter is configured for webhook mode (polling would delete the
    /// webhook), the blocking webhook cannot be removed, or
    /// [`TelegramError::PollingConflict`].
    pub fn run_polling_until(
        &self,
        stop: CancellationToken,
        shutdown: CancellationToken,
    ) -> impl Future<Output = Result<(), TelegramError>> + Send + 'static {
        let webhook_mode = self.settings.mode == Mode::Webhook;
        let poller = Poller {
            bot: self.bot.clone(),
            inbound: self.inbound.clone(),
            scrubber: self.scrubber.clone(),
            timeout_secs: self.settings.poll_timeout_secs,
            shutdown,
            link: self.link.clone(),
        };
        async move {
            if webhook_mode {
                return Err(TelegramError::InvalidSetting {
                    key: "mode",
                    reason: "webhook mode: mount webhook_router instead of polling".to_owned(),
                });
            }
            poller.run(stop).await
        }
    }
}

/// The Bot API client `settings` describe, with `token`, and the scrubber
/// of its errors. Makes no call.
fn client(
    settings: &TelegramSettings,
    token: SecretString,
) -> Result<(Bot, Scrubber), TelegramError> {
    let scrubber = Scrubber::new(token.clone());
    let client = teloxide_core::net::default_reqwest_settings()
        .timeout(settings.poll_timeout() + HTTP_TIMEOUT_MARGIN)
        .build()
        .map_err(|e| TelegramError::Client(scrubber.scrub(&e.to_string())))?;
    let mut bot = Bot::with_client(token.expose_secret(), client);
    if let Some(url) = &settings.api_url {
        bot = bot.set_api_url(url.clone());
    }
    Ok((bot, scrubber))
}

/// Asks Telegram who the bot is (`getMe`): its identity and account id.
async fn identify(
    bot: &Bot,
    scrubber: &Scrubber,
) -> Result<(BotIdentity, AccountId), TelegramError> {
    let me = bot
        .get_me()
        .await
        .map_err(|e| scrubber.api_error("getMe", &e))?;
    let username = me.user.username.clone().ok_or_else(|| TelegramError::Api {
        method: "getMe",
        detail: "the bot has no username".to_owned(),
    })?;
    let account = AccountId::parse(me.user.id.0.to_string()).map_err(|e| TelegramError::Api {
        method: "getMe",
        detail: e.to_string(),
    })?;
    let identity = BotIdentity {
        id: me.user.id.0,
        username,
    };
    Ok((identity, account))
}

/// The bot token and, when configured, the webhook secret, from the
/// environment variables `settings` names.
fn read_secrets(
    settings: &TelegramSettings,
) -> Result<(SecretString, Option<SecretString>), TelegramError> {
    let token = read_env("token_env", &settings.token_env)?;
    let webhook_secret = match &settings.webhook_secret_env {
        Some(var) => Some(read_env("webhook_secret_env", var)?),
        None => None,
    };
    Ok((token, webhook_secret))
}

fn read_env(key: &'static str, var: &str) -> Result<SecretString, TelegramError> {
    match std::env::var(var) {
        Ok(value) if !value.trim().is_empty() => Ok(SecretString::from(value.trim().to_owned())),
        _ => Err(TelegramError::MissingEnv {
            key,
            var: var.to_owned(),
        }),
    }
}

/// Telegram's rule for webhook secrets: 1–256 of `A-Z a-z 0-9 _ -`.
fn valid_webhook_secret(secret: &str) -> bool {
    (1..=256).contains(&secret.len())
        && secret
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn validate(
    settings: &TelegramSettings,
    webhook_secret: Option<&SecretString>,
) -> Result<(), TelegramError> {
    let invalid = |key, reason: &str| TelegramError::InvalidSetting {
        key,
        reason: reason.to_owned(),
    };
    if settings
        .api_url
        .as_ref()
        .is_some_and(url::Url::cannot_be_a_base)
    {
        return Err(invalid(
            "api_url",
            "must be a base URL such as http://host:port/",
        ));
    }
    if !settings.webhook_path.starts_with('/') {
        return Err(invalid("webhook_path", "must start with /"));
    }
    if settings.webhook_max_body_bytes == 0 {
        return Err(invalid("webhook_max_body_bytes", "must be positive"));
    }
    match webhook_secret {
        Some(secret) if !valid_webhook_secret(secret.expose_secret()) => {
            return Err(invalid(
                "webhook_secret_env",
                "the secret must be 1-256 characters of A-Z, a-z, 0-9, _ and -",
            ));
        }
        None if settings.mode == Mode::Webhook => {
            return Err(invalid("webhook_secret_env", "required in webhook mode"));
        }
        _ => {}
    }
    Ok(())
}
