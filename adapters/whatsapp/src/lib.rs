//! Switchboard's WhatsApp adapter, for the official WhatsApp Business
//! Cloud API.
//!
//! Inbound, Meta posts notifications to a webhook: the adapter answers the
//! subscription handshake, checks each request's signature before parsing
//! it, and hands people's messages (text, media, locations), presses of
//! the core's buttons and delivery statuses to the core's
//! [`InboundSink`](switchboard_contract::InboundSink), acknowledging a
//! payload only once the core recorded it. Outbound,
//! [`WhatsAppSender`] renders the agent's Markdown in WhatsApp's
//! formatting, splits it under 4,096 characters, shows buttons as reply
//! buttons or a list, and falls back to an approved template outside the
//! 24-hour customer service window.
//!
//! One [`WhatsAppAdapter`] serves one Meta app and every phone number in
//! its settings, each its own account (the Phone Number ID):
//!
//! ```ignore
//! let adapter = WhatsAppAdapter::from_env(settings)?; // no network call
//! // The core mounts adapter.webhook_paths(), then:
//! let started = adapter.start(hookup).await?;           // reads each number's details
//! ```
//!
//! Layout: [`settings`] (configuration and secrets), `numbers` (the
//! numbers and their tokens), [`signature`] (webhook signatures),
//! `webhook` (the route), `payload` and `inbound` (notifications →
//! contract types), `media` (downloads), [`api`] (Graph client and
//! errors), [`format`](mod@format) (Markdown → WhatsApp, splitting),
//! [`outgoing`] (message bodies), [`send`] (the sender), [`window`] (the
//! 24-hour window), `memory` (bounded maps), [`tasks`] (hand-off tasks),
//! [`check`](mod@check) (the operator check), [`redact`] (phone numbers
//! kept out of logs).
//!
//! The adapter depends on the contract crate only, never on the core.

pub mod api;
pub mod check;
pub mod format;
mod inbound;
mod media;
mod memory;
mod numbers;
pub mod outgoing;
mod payload;
pub mod redact;
pub mod send;
pub mod settings;
pub mod signature;
pub mod tasks;
mod webhook;
pub mod window;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use switchboard_contract::{AccountId, Adapter, Hookup, PlatformName, StartError, Started};

pub use api::{ApiError, PhoneNumberDetails};
pub use check::{CheckError, NumberCheck, NumberReport, check, check_with};
pub use format::WhatsAppMarkup;
pub use send::WhatsAppSender;
pub use settings::{
    NumberConfig, NumberSettings, Secrets, SettingsError, TemplateFill, TemplateSettings,
    WhatsAppSettings,
};
pub use tasks::{Drained, WebhookTasks};
pub use window::{Clock, SystemClock};

use crate::api::Graph;
use crate::numbers::{Number, Numbers};
use crate::send::{Parts, SendOptions};
use crate::settings::number_key;
use crate::webhook::WebhookState;
use crate::window::{CONTACTS_CAPACITY, Contacts};

/// The platform name this adapter submits under and registers its sender
/// for.
pub const PLATFORM: &str = "whatsapp";

/// The adapter of one Meta app: its settings and secrets, checked; no
/// network call until [`Adapter::start`].
pub struct WhatsAppAdapter {
    settings: WhatsAppSettings,
    secrets: Secrets,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for WhatsAppAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WhatsAppAdapter")
            .field("webhook_path", &self.settings.webhook_path)
            .field("accounts", &self.accounts())
            .finish_non_exhaustive()
    }
}

impl WhatsAppAdapter {
    /// Reads the secrets from the environment variables `settings` names,
    /// then builds the adapter as [`WhatsAppAdapter::new`] does.
    ///
    /// # Errors
    /// Invalid settings, or a variable unset (the error names the key and
    /// the variable, never a value).
    pub fn from_env(settings: WhatsAppSettings) -> Result<Self, SettingsError> {
        settings.validate()?;
        let secrets = Secrets::from_env(&settings)?;
        Self::new(settings, secrets)
    }

    /// The adapter for `settings` with explicit `secrets` (tests, secret
    /// stores).
    ///
    /// # Errors
    /// Invalid settings, or a number without its token in `secrets`.
    pub fn new(settings: WhatsAppSettings, secrets: Secrets) -> Result<Self, SettingsError> {
        settings.validate()?;
        Numbers::new(&settings, &secrets)?;
        Ok(Self {
            settings,
            secrets,
            clock: Arc::new(SystemClock),
        })
    }

    /// Replaces the clock of the 24-hour window (tests).
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    #[must_use]
    pub fn settings(&self) -> &WhatsAppSettings {
        &self.settings
    }

    /// The accounts it serves: each number's Phone Number ID, in settings
    /// order.
    #[must_use]
    pub fn accounts(&self) -> Vec<AccountId> {
        self.settings
            .numbers()
            .into_iter()
            .filter_map(|number| AccountId::parse(number.phone_number_id).ok())
            .collect()
    }

    /// Reads `number`'s details: the token and the id work.
    async fn verify(&self, graph: &Graph, number: &Number) -> Result<(), StartError> {
        let report = check::details(graph, number)
            .await
            .map_err(|err| start_error(number, &err))?;
        tracing::info!(
            number = %number.name,
            account = %number.account,
            display = %report.display_phone_number,
            verified_name = report.verified_name.as_deref().unwrap_or(""),
            quality = report.quality_rating.as_deref().unwrap_or("unknown"),
            "WhatsApp number connected"
        );
        Ok(())
    }
}

#[async_trait]
impl Adapter for WhatsAppAdapter {
    fn platform(&self) -> PlatformName {
        platform()
    }

    fn webhook_paths(&self) -> Vec<String> {
        vec![self.settings.webhook_path.clone()]
    }

    async fn start(&self, hookup: Hookup) -> Result<Started, StartError> {
        let settings = &self.settings;
        let http = http_client(settings).map_err(StartError::Configuration)?;
        let graph = Arc::new(Graph::new(http, settings.graph_base()));
        let numbers = Numbers::new(settings, &self.secrets)
            .map_err(|err| StartError::Configuration(err.to_string()))?;
        let numbers = Arc::new(numbers);
        for number in numbers.iter() {
            self.verify(&graph, number).await?;
        }
        let contacts = Arc::new(Contacts::new(CONTACTS_CAPACITY));
        let parts = Parts {
            graph: Arc::clone(&graph),
            numbers: Arc::clone(&numbers),
            contacts: Arc::clone(&contacts),
            clock: Arc::clone(&self.clock),
            observer: hookup.observer,
        };
        let options = SendOptions {
            read_receipts: settings.read_receipts,
            typing_indicator: settings.typing_indicator,
            buttons_prompt: settings.buttons_prompt.clone(),
            list_button: settings.list_button.clone(),
        };
        let sender = Arc::new(WhatsAppSender::new(parts, options));
        let tasks = Arc::new(WebhookTasks::new(settings.max_in_flight));
        let state = Arc::new(WebhookState {
            sink: hookup.sink,
            sender: Arc::clone(&sender),
            numbers,
            graph,
            contacts,
            clock: Arc::clone(&self.clock),
            tasks: Arc::clone(&tasks),
            app_secret: self.secrets.app_secret.clone(),
            verify_token: self.secrets.verify_token.clone(),
            ack_timeout: settings.ack_timeout(),
            react_to_reactions: settings.react_to_reactions,
        });
        let router = webhook::router(state, &settings.webhook_path, settings.max_body_bytes);
        Ok(Started::sender(sender)
            .with_webhook(router)
            .with_drain(tasks))
    }

    async fn check(&self) -> Result<String, StartError> {
        let checks = check::check_with(&self.settings, &self.secrets)
            .await
            .map_err(|err| StartError::Configuration(err.to_string()))?;
        let report = checks
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ");
        match checks.iter().find(|number| number.result.is_err()) {
            Some(_) => Err(StartError::Unavailable(report)),
            None => Ok(report),
        }
    }
}

/// A failed start-up check of `number`: a refused token or id is the
/// configuration's fault, anything else the platform's (tried again).
fn start_error(number: &Number, err: &ApiError) -> StartError {
    match err {
        ApiError::TokenRejected { .. } => StartError::Configuration(format!(
            "{}: {err}",
            number_key(&number.name, "access_token_env")
        )),
        ApiError::Refused { .. } | ApiError::InvalidId | ApiError::WindowClosed { .. } => {
            StartError::Configuration(format!(
                "{}: {err}",
                number_key(&number.name, "phone_number_id")
            ))
        }
        ApiError::RateLimited { .. }
        | ApiError::Server { .. }
        | ApiError::Network(_)
        | ApiError::InvalidResponse { .. } => {
            StartError::Unavailable(format!("WhatsApp number {}: {err}", number.name))
        }
    }
}

/// The HTTP client of every Graph call and media download.
pub(crate) fn http_client(settings: &WhatsAppSettings) -> Result<reqwest::Client, String> {
    let timeout = settings.request_timeout();
    reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout.min(Duration::from_secs(5)))
        // Meta's media host refuses some downloads without a user agent.
        .user_agent(concat!("switchboard-whatsapp/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|err| {
            format!(
                "building the HTTP client failed: {}",
                api::describe_network(err)
            )
        })
}

/// [`PLATFORM`] as a platform name.
pub(crate) fn platform() -> PlatformName {
    PlatformName::parse(PLATFORM).unwrap_or_else(|_| unreachable!("the platform name is valid"))
}
