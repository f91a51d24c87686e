//! [`WhatsAppSender`]: the adapter's [`PlatformSender`], delivering the
//! core's replies from the number their account names.
//!
//! A reply becomes the messages [`crate::outgoing`] plans (text parts,
//! buttons under the last), sent in order, the first replying to the
//! person's message. Errors map onto [`SendError`]: rate limits (HTTP 429,
//! codes 4, 613, 80007, 130429, 131048, 131056) become
//! [`SendError::RetryAfter`] with `Retry-After` when Meta sends one, else a
//! capped exponential backoff per number; Meta's failures and network
//! errors are transient; a refused token or request is permanent.
//!
//! **The 24-hour window.** Outside it WhatsApp takes only templates. A
//! reply goes straight to the configured template when the window's memory knows
//! the person last wrote over 24 hours ago (or the API said so since), and
//! also when the API refuses a free-form part with the re-engagement error
//! (131047) — the API is the source of truth, on every instance. Without a
//! template such a reply fails with a [`SendError::Permanent`] saying
//! so. Meta may also accept a message and report the closed window later,
//! in a `failed` status callback: the webhook hands that status to the
//! core, and this sender sends the template for the reply if it sent it
//! (it remembers the last [`RECENT_CAPACITY`] messages).
//!
//! **Retries.** WhatsApp has no idempotency key. When a part fails after
//! earlier parts went out, their ids are remembered under the reply's
//! idempotency key ([`PARTIAL_CAPACITY`] replies, in this process only),
//! so the core's retry sends only what is left.
//!
//! **No drafts, no edits.** WhatsApp cannot change a sent message, so
//! there are no drafts, and [`PlatformSender::edit`] sends the new text as
//! a new message replying to the old one (whose buttons stay; a press of
//! one is still checked by the core).
//!
//! **Typing.** While a turn runs, the person's latest message is marked
//! read, with the typing indicator (it shows for up to 25 seconds, so the
//! core repeats it every [`TYPING_INTERVAL`]), both best effort.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use switchboard_contract::backoff::{Backoff, Retries};
use switchboard_contract::{
    AccountId, Button, ChatId, ChatRef, DeliveryReceipt, DeliveryStatus, LinkObserver,
    OutboundMessage, PlatformSender, SendError,
};

use crate::api::{ApiError, Graph};
use crate::memory::Bounded;
use crate::numbers::{Number, Numbers};
use crate::outgoing;
use crate::redact;
use crate::settings::number_key;
use crate::window::{Clock, Contacts, Window};

/// How often the core repeats the typing indicator (WhatsApp shows it for
/// up to 25 seconds, or until the reply).
pub const TYPING_INTERVAL: Duration = Duration::from_secs(20);

/// Partly delivered replies remembered at most.
pub const PARTIAL_CAPACITY: usize = 256;

/// Sent messages remembered at most, for a late closed-window failure.
pub const RECENT_CAPACITY: usize = 4096;

/// The backoff of repeated rate limits without `Retry-After`.
const RATE_LIMIT_BACKOFF: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));

/// How the sender behaves, from the settings.
pub(crate) struct SendOptions {
    pub read_receipts: bool,
    pub typing_indicator: bool,
    pub buttons_prompt: String,
    pub list_button: String,
}

/// What the sender shares with the webhook.
pub(crate) struct Parts {
    pub graph: Arc<Graph>,
    pub numbers: Arc<Numbers>,
    pub contacts: Arc<Contacts>,
    pub clock: Arc<dyn Clock>,
    pub observer: Arc<dyn LinkObserver>,
}

/// A reply recently sent free-form, in case Meta reports later that the
/// window was closed.
struct Pending {
    to: String,
    text: String,
    /// Its template went out (one per reply, however many parts failed).
    handled: AtomicBool,
}

/// Work the webhook leaves to the sender once the core recorded a payload.
pub(crate) enum FollowUp {
    /// Say `text` (what a button press answered) in the chat.
    Notice {
        account: AccountId,
        chat: ChatId,
        text: String,
        reply_to: Option<String>,
    },
    /// Meta reported a sent message failed because the window was closed.
    WindowClosed(DeliveryStatus),
}

/// One delivery: what to send where.
struct Reply<'a> {
    number: &'a Number,
    to: &'a str,
    text: &'a str,
    reply_to: Option<&'a str>,
    buttons: &'a [Button],
    /// The reply's idempotency key, for replies from the outbox.
    key: Option<&'a str>,
}

/// Sends replies through the Cloud API. Cheap to share.
pub struct WhatsAppSender {
    parts: Parts,
    options: SendOptions,
    partial: Bounded<Vec<String>>,
    recent: Bounded<Arc<Pending>>,
    rate_limits: Mutex<HashMap<String, Retries>>,
    /// Numbers whose token was refused, for the link observer.
    refused: Mutex<HashSet<String>>,
}

impl std::fmt::Debug for WhatsAppSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WhatsAppSender").finish_non_exhaustive()
    }
}

#[async_trait]
impl PlatformSender for WhatsAppSender {
    #[tracing::instrument(
        name = "whatsapp.send",
        skip_all,
        fields(account = %message.account, to = %redact::phone(message.chat.as_str()))
    )]
    async fn send(&self, message: &OutboundMessage) -> Result<DeliveryReceipt, SendError> {
        let number = self.number(&message.account)?;
        let reply = Reply {
            number: &number,
            to: recipient(&message.chat)?,
            text: &message.text,
            reply_to: message.reply_to.as_deref(),
            buttons: &message.buttons,
            key: Some(&message.idempotency_key),
        };
        let message_ids = self.deliver(&reply).await?;
        Ok(DeliveryReceipt { message_ids })
    }

    async fn typing(&self, chat: &ChatRef) {
        if !self.options.read_receipts {
            return;
        }
        let Some(number) = self.parts.numbers.get(chat.account.as_str()) else {
            tracing::debug!(account = %chat.account, "typing: not a WhatsApp number here");
            return;
        };
        let contacts = &self.parts.contacts;
        let person = chat.chat.as_str();
        let typing = self.options.typing_indicator;
        let latest = if typing {
            contacts.last_message(&number.id, person)
        } else {
            contacts.unread(&number.id, person)
        };
        let Some(message_id) = latest else {
            return;
        };
        let graph = &self.parts.graph;
        if let Err(err) = graph
            .mark_read(&number.id, &number.token, &message_id, typing)
            .await
        {
            tracing::debug!(error = %err, "WhatsApp read receipt or typing indicator failed");
        }
    }

    fn typing_interval(&self) -> Option<Duration> {
        self.options.read_receipts.then_some(TYPING_INTERVAL)
    }

    /// WhatsApp cannot edit: the text goes as a new message replying to
    /// `message_id`.
    async fn edit(&self, chat: &ChatRef, message_id: &str, text: &str) -> Result<(), SendError> {
        let number = self.number(&chat.account)?;
        let reply = Reply {
            number: &number,
            to: recipient(&chat.chat)?,
            text,
            reply_to: Some(message_id),
            buttons: &[],
            key: None,
        };
        self.deliver(&reply).await.map(|_| ())
    }
}

impl WhatsAppSender {
    pub(crate) fn new(parts: Parts, options: SendOptions) -> Self {
        Self {
            parts,
            options,
            partial: Bounded::new(PARTIAL_CAPACITY),
            recent: Bounded::new(RECENT_CAPACITY),
            rate_limits: Mutex::new(HashMap::new()),
            refused: Mutex::new(HashSet::new()),
        }
    }

    /// Sends `reply`'s messages (or its template); returns their ids.
    async fn deliver(&self, reply: &Reply<'_>) -> Result<Vec<String>, SendError> {
        let plan = outgoing::plan(reply.text, reply.buttons, &self.options.buttons_prompt);
        if plan.is_empty() {
            tracing::debug!("empty reply; nothing to send");
            return Ok(Vec::new());
        }
        let number = reply.number;
        let mut sent = reply
            .key
            .and_then(|key| self.partial.take(key))
            .unwrap_or_default();
        let now = self.parts.clock.now();
        if self.parts.contacts.window(&number.id, reply.to, now) == Window::Closed {
            tracing::info!("the person last wrote over 24 hours ago; sending the template");
            let id = self.send_template(reply).await;
            return self.finish(reply, sent, id.map(Some));
        }
        let pending = Arc::new(Pending {
            to: reply.to.to_owned(),
            text: reply.text.to_owned(),
            handled: AtomicBool::new(false),
        });
        for (index, item) in plan.iter().enumerate().skip(sent.len()) {
            let reply_to = if index == 0 { reply.reply_to } else { None };
            let body = item.body(reply.to, reply_to, &self.options.list_button);
            match self.post(number, &body).await {
                Ok(id) => {
                    self.recent.insert(id.clone(), Arc::clone(&pending));
                    sent.push(id);
                }
                Err(ApiError::WindowClosed { code }) => {
                    self.parts.contacts.close(&number.id, reply.to);
                    tracing::info!(
                        code,
                        "outside the 24-hour window; sending the template instead"
                    );
                    let id = self.send_template(reply).await;
                    return self.finish(reply, sent, id.map(Some));
                }
                Err(err) => {
                    let err = self.send_error(number, &err);
                    return self.finish(reply, sent, Err(err));
                }
            }
        }
        self.finish(reply, sent, Ok(None))
    }

    /// Ends a delivery: on success the ids sent (and `last`, the template
    /// that ended it, if one did); on failure the error, remembering the
    /// parts already sent for the retry.
    fn finish(
        &self,
        reply: &Reply<'_>,
        mut sent: Vec<String>,
        last: Result<Option<String>, SendError>,
    ) -> Result<Vec<String>, SendError> {
        match last {
            Ok(last) => {
                sent.extend(last);
                self.link_works(reply.number);
                tracing::debug!(parts = sent.len(), "reply delivered to WhatsApp");
                Ok(sent)
            }
            Err(err) => {
                if let Some(key) = reply.key.filter(|_| !sent.is_empty()) {
                    self.partial.insert(key.to_owned(), sent);
                }
                Err(err)
            }
        }
    }

    /// Sends the number's template in place of `reply`.
    async fn send_template(&self, reply: &Reply<'_>) -> Result<String, SendError> {
        let number = reply.number;
        let Some(template) = &number.template else {
            tracing::warn!(
                "outside the 24-hour window and no template is configured; not delivered"
            );
            return Err(SendError::Permanent(format!(
                "the 24-hour customer service window is closed (the person last wrote over 24 \
                 hours ago, and WhatsApp then takes only templates) and no template is \
                 configured ({})",
                number_key(&number.name, "template")
            )));
        };
        if !reply.buttons.is_empty() {
            tracing::debug!("a template carries no buttons; they are left out");
        }
        let body = outgoing::template(reply.to, template, reply.text);
        match self.post(number, &body).await {
            Ok(id) => {
                tracing::info!(template = %template.name, "template sent in place of the reply");
                Ok(id)
            }
            Err(ApiError::Refused { code, message, .. }) => {
                tracing::error!(template = %template.name, code, reason = %message, "WhatsApp refused the template");
                Err(SendError::Permanent(format!(
                    "WhatsApp refused the template `{}` ({}): code {code}: {message}",
                    template.name, template.language
                )))
            }
            Err(err) => Err(self.send_error(number, &err)),
        }
    }

    /// Does what the webhook left to do once the core recorded a payload.
    /// Best effort: failures are logged.
    pub(crate) async fn follow_up(&self, follow_up: FollowUp) {
        match follow_up {
            FollowUp::Notice {
                account,
                chat,
                text,
                reply_to,
            } => {
                if let Err(err) = self
                    .notice(&account, &chat, &text, reply_to.as_deref())
                    .await
                {
                    tracing::warn!(error = %err, "WhatsApp answer to a button press not delivered");
                }
            }
            FollowUp::WindowClosed(status) => self.window_failure(&status).await,
        }
    }

    async fn notice(
        &self,
        account: &AccountId,
        chat: &ChatId,
        text: &str,
        reply_to: Option<&str>,
    ) -> Result<Vec<String>, SendError> {
        let number = self.number(account)?;
        let reply = Reply {
            number: &number,
            to: recipient(chat)?,
            text,
            reply_to,
            buttons: &[],
            key: None,
        };
        self.deliver(&reply).await
    }

    /// Meta accepted a message, then failed it because the window was
    /// closed: marks the window closed and, when this process sent it,
    /// sends the template for its reply (once per reply).
    async fn window_failure(&self, status: &DeliveryStatus) {
        let Some(number) = self.parts.numbers.get(status.account.as_str()) else {
            return;
        };
        self.parts.contacts.close(&number.id, status.chat.as_str());
        let wamid = redact::message(&status.message_id);
        let Some(pending) = self.recent.get(&status.message_id) else {
            tracing::warn!(
                %wamid,
                "a message refused outside the 24-hour window was not sent from this process \
                 (or is forgotten); the core has its failed status"
            );
            return;
        };
        if pending.handled.swap(true, Ordering::SeqCst) {
            return;
        }
        let reply = Reply {
            number,
            to: &pending.to,
            text: &pending.text,
            reply_to: None,
            buttons: &[],
            key: None,
        };
        match self.send_template(&reply).await {
            Ok(_) => {
                tracing::info!(%wamid, "a reply refused outside the 24-hour window went out as the template")
            }
            Err(err) => {
                tracing::warn!(%wamid, error = %err, "a reply refused outside the 24-hour window is not delivered")
            }
        }
    }

    /// Sends one message from `number`.
    async fn post(&self, number: &Number, body: &serde_json::Value) -> Result<String, ApiError> {
        let graph = &self.parts.graph;
        graph.send(&number.id, &number.token, body).await
    }

    fn number(&self, account: &AccountId) -> Result<Arc<Number>, SendError> {
        self.parts
            .numbers
            .get(account.as_str())
            .cloned()
            .ok_or_else(|| {
                SendError::Permanent(format!(
                    "no WhatsApp phone number is configured for account {account}"
                ))
            })
    }

    /// Maps an API failure to what the core's retry loop understands,
    /// logging it once here.
    fn send_error(&self, number: &Number, err: &ApiError) -> SendError {
        match err {
            ApiError::RateLimited { code, retry_after } => {
                let wait = self.rate_limit_wait(&number.id, *retry_after);
                tracing::warn!(
                    code,
                    wait_ms = wait.as_millis(),
                    "WhatsApp rate limit; retry later"
                );
                SendError::RetryAfter(wait)
            }
            ApiError::TokenRejected { .. } => {
                tracing::error!(number = %number.name, error = %err, "WhatsApp refused the access token");
                self.link_failed(number, err);
                SendError::Permanent(err.to_string())
            }
            ApiError::Server { .. } | ApiError::Network(_) | ApiError::InvalidResponse { .. } => {
                tracing::warn!(error = %err, "WhatsApp send failed; retryable");
                SendError::Transient(err.to_string())
            }
            ApiError::WindowClosed { .. } | ApiError::Refused { .. } | ApiError::InvalidId => {
                tracing::error!(error = %err, "WhatsApp refused the message");
                SendError::Permanent(err.to_string())
            }
        }
    }

    /// The wait before the next send from `number` after a rate limit:
    /// Meta's `Retry-After`, else the next step of the backoff.
    fn rate_limit_wait(&self, number: &str, retry_after: Option<Duration>) -> Duration {
        let mut limits = self
            .rate_limits
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let retries = limits
            .entry(number.to_owned())
            .or_insert_with(|| RATE_LIMIT_BACKOFF.retries());
        retries.next_delay(retry_after.filter(|wait| !wait.is_zero()))
    }

    /// A send from `number` worked: its backoff starts over, and a refused
    /// token is taken as mended.
    fn link_works(&self, number: &Number) {
        if let Some(retries) = self
            .rate_limits
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_mut(&number.id)
        {
            retries.reset();
        }
        let mut refused = self.refused.lock().unwrap_or_else(PoisonError::into_inner);
        if refused.remove(&number.id) && refused.is_empty() {
            self.parts.observer.up();
        }
    }

    fn link_failed(&self, number: &Number, err: &ApiError) {
        let mut refused = self.refused.lock().unwrap_or_else(PoisonError::into_inner);
        if refused.insert(number.id.clone()) {
            let reason = format!("number {}: {err}", number.name);
            self.parts.observer.down(&reason);
        }
    }
}

/// The person a chat is with: their `wa_id`, digits only.
fn recipient(chat: &ChatId) -> Result<&str, SendError> {
    let id = chat.as_str();
    if id.bytes().all(|b| b.is_ascii_digit()) {
        Ok(id)
    } else {
        Err(SendError::Permanent(
            "the chat id is not a WhatsApp id (digits only)".to_owned(),
        ))
    }
}
