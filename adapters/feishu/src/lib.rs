//! Switchboard's Feishu/Lark adapter.
//!
//! Inbound, Feishu posts events (schema 2.0) to a webhook: the adapter checks
//! the signature and verification token, decrypts, answers URL verification,
//! and turns `im.message.receive_v1` text and post messages into
//! [`InboundMessage`](switchboard_contract::InboundMessage)s for the core's
//! [`InboundSink`]. Outbound, [`FeishuSender`] delivers replies as text
//! messages or Markdown cards, as replies to the message that asked.
//!
//! The gateway builds one [`FeishuPlatform`] per Feishu app and runs it as
//! every adapter ([`switchboard_contract::Adapter`]); started, it is a
//! [`FeishuAdapter`], which can also be used directly:
//!
//! ```ignore
//! let feishu = FeishuAdapter::connect(settings, sink).await?; // fetches the bot's open_id
//! runner.register_sender(switchboard_feishu::PLATFORM, feishu.sender());
//! let app = app.merge(feishu.router()); // serves settings.webhook_path
//! // … at shutdown, after the HTTP server stopped:
//! feishu.drain(Duration::from_secs(5)).await;
//! ```
//!
//! Layout: [`settings`] (configuration and secrets), `lifecycle`
//! ([`FeishuPlatform`]), [`webhook`] (the route), [`crypto`] (decryption,
//! signatures), `event` (payloads and normalisation), [`tasks`] (event
//! hand-off tasks), [`api`] (open API client), `token` (tenant token cache),
//! [`send`] (the sender), `press` (a card callback → an inbound action),
//! `callback` (a press handed to the core, answered with a toast and the
//! updated card).
//!
//! Buttons: a reply with buttons is a card whose last chunk carries them
//! (card JSON 2.0 `button`s whose `callback` value is
//! `{"action": "<action id>"}`). A press arrives as a `card.action.trigger`
//! callback at the same webhook, verified like any event (signature, token,
//! decryption), goes to the core's `InboundSink::act`, and is answered
//! within the ack timeout with the core's notice as a toast and its new
//! text as the card, buttons gone.

pub mod api;
mod callback;
pub mod crypto;
mod event;
mod lifecycle;
mod press;
pub mod send;
pub mod settings;
pub mod tasks;
mod token;
mod webhook;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use switchboard_contract::{AccountId, IdError, InboundSink, PlatformSender};

pub use api::{ApiError, ErrorCode, TOKEN_ERROR_CODES};
pub use lifecycle::FeishuPlatform;
pub use send::FeishuSender;
pub use settings::{Credentials, Domain, FeishuSettings, SettingsError};
pub use tasks::{Drained, EventTasks};
pub use token::{Clock, REFRESH_MARGIN, SystemClock};

use crate::api::OpenApi;
use crate::webhook::WebhookState;

/// The platform name this adapter submits under and registers its sender
/// for, on Feishu and Lark alike.
pub const PLATFORM: &str = "feishu";

/// One Feishu/Lark app, connected: its webhook router, its sender, and the
/// tasks handing events to the core.
pub struct FeishuAdapter {
    sender: Arc<FeishuSender>,
    router: Router,
    tasks: Arc<EventTasks>,
    bot_open_id: String,
    webhook_path: String,
}

/// Why the adapter could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Settings(#[from] SettingsError),
    #[error("feishu.app_id: {0}")]
    AppId(IdError),
    #[error("building the HTTP client failed: {0}")]
    HttpClient(String),
    #[error("fetching the bot's identity from Feishu failed: {0}")]
    BotInfo(ApiError),
}

impl From<IdError> for StartError {
    fn from(err: IdError) -> Self {
        Self::AppId(err)
    }
}

impl From<ApiError> for StartError {
    fn from(err: ApiError) -> Self {
        Self::BotInfo(err)
    }
}

impl FeishuAdapter {
    /// Reads the secrets from the environment variables named in `settings`,
    /// then connects as [`FeishuAdapterBuilder::connect`] does.
    ///
    /// # Errors
    /// Invalid settings, a missing secret, or Feishu unreachable or refusing
    /// the app's credentials.
    pub async fn connect(
        settings: FeishuSettings,
        sink: Arc<dyn InboundSink>,
    ) -> Result<Self, StartError> {
        let credentials = Credentials::from_env(&settings)?;
        Self::builder(settings, credentials, sink).connect().await
    }

    /// A builder with explicit credentials and, optionally, a clock.
    #[must_use]
    pub fn builder(
        settings: FeishuSettings,
        credentials: Credentials,
        sink: Arc<dyn InboundSink>,
    ) -> FeishuAdapterBuilder {
        FeishuAdapterBuilder {
            settings,
            credentials,
            sink,
            clock: Arc::new(SystemClock),
        }
    }

    /// The sender to register with the core under [`PLATFORM`].
    #[must_use]
    pub fn sender(&self) -> Arc<dyn PlatformSender> {
        self.sender.clone()
    }

    /// The webhook route (at [`FeishuAdapter::webhook_path`], with its own
    /// body limit), to merge into the gateway's router.
    pub fn router(&self) -> Router {
        self.router.clone()
    }

    /// The path the router serves.
    #[must_use]
    pub fn webhook_path(&self) -> &str {
        &self.webhook_path
    }

    /// The bot's open_id, as Feishu reported it at start.
    #[must_use]
    pub fn bot_open_id(&self) -> &str {
        &self.bot_open_id
    }

    /// The tasks handing events to the core (for metrics or a custom drain).
    #[must_use]
    pub fn tasks(&self) -> Arc<EventTasks> {
        Arc::clone(&self.tasks)
    }

    /// Waits up to `deadline` for events still being handed to the core,
    /// then aborts the rest. Call after the HTTP server has stopped.
    pub async fn drain(&self, deadline: Duration) -> Drained {
        self.tasks.drain(deadline).await
    }
}

/// Builds a [`FeishuAdapter`]; see [`FeishuAdapter::builder`].
pub struct FeishuAdapterBuilder {
    settings: FeishuSettings,
    credentials: Credentials,
    sink: Arc<dyn InboundSink>,
    clock: Arc<dyn Clock>,
}

impl FeishuAdapterBuilder {
    /// Replaces the clock that ages the tenant token (tests).
    #[must_use]
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Validates the settings, fetches a tenant token and the bot's open_id
    /// (`GET /open-apis/bot/v3/info`), and builds the adapter.
    ///
    /// # Errors
    /// Invalid settings or app id, or Feishu unreachable or refusing the
    /// app's credentials.
    pub async fn connect(self) -> Result<FeishuAdapter, StartError> {
        let Self {
            settings,
            credentials,
            sink,
            clock,
        } = self;
        let account = checked(&settings)?;
        let api = Arc::new(open_api(&settings, credentials.app_secret, clock)?);
        let bot_open_id = api.bot_open_id().await?;
        tracing::info!(app_id = %settings.app_id, %bot_open_id, "Feishu adapter connected");
        let tasks = Arc::new(EventTasks::new(settings.max_in_flight));
        let state = Arc::new(WebhookState {
            sink,
            tasks: Arc::clone(&tasks),
            verification_token: credentials.verification_token,
            encrypt_key: credentials.encrypt_key,
            app_id: settings.app_id.clone(),
            account,
            bot_open_id: bot_open_id.clone(),
            api: Arc::clone(&api),
            ack_timeout: settings.ack_timeout(),
            signature_max_age: settings.signature_max_age(),
        });
        Ok(FeishuAdapter {
            sender: Arc::new(FeishuSender::new(api, settings.card_updates())),
            router: webhook::router(state, &settings.webhook_path, settings.max_body_bytes),
            tasks,
            bot_open_id,
            webhook_path: settings.webhook_path,
        })
    }
}

/// Checks the settings; returns the app's account id.
fn checked(settings: &FeishuSettings) -> Result<AccountId, StartError> {
    settings.validate()?;
    Ok(AccountId::parse(settings.app_id.as_str())?)
}

/// The open API client of the app `settings` name, with `app_secret`.
/// Makes no call.
fn open_api(
    settings: &FeishuSettings,
    app_secret: secrecy::SecretString,
    clock: Arc<dyn Clock>,
) -> Result<OpenApi, StartError> {
    let http = reqwest::Client::builder()
        .timeout(settings.request_timeout())
        .connect_timeout(settings.request_timeout().min(Duration::from_secs(5)))
        .build()
        .map_err(|err| StartError::HttpClient(err.without_url().to_string()))?;
    Ok(OpenApi::new(
        http,
        settings.domain.base_url(),
        &settings.app_id,
        app_secret,
        clock,
    ))
}
