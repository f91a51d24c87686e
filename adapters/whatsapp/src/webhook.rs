//! The webhook route Meta calls, at `webhook_path`.
//!
//! `GET` is the subscription handshake: `hub.mode=subscribe`,
//! `hub.verify_token` (compared in constant time) and `hub.challenge`,
//! answered with the challenge as plain text, or 403.
//!
//! `POST` carries notifications. Checks, in order, on the raw request
//! before anything is trusted:
//!
//! 1. body size (413 past `max_body_bytes`, enforced while reading);
//! 2. `X-Hub-Signature-256`, the HMAC-SHA256 of the raw body with the app
//!    secret, compared in constant time (401 when missing or wrong);
//! 3. the JSON itself (400 when it is not a notification).
//!
//! What the payload holds for the core (messages, button presses,
//! statuses; see [`crate::inbound`]) is handed to it in a task, and the
//! request is answered 200 only once the core recorded every item (a
//! duplicate counts as recorded, and so does an item the core rejected as
//! unusable: a redelivery would not change that). When the core is
//! unavailable or slower than `ack_timeout_ms`, the answer is 503 and Meta
//! delivers the payload again, with the same message ids, which the core
//! deduplicates. A payload with nothing for the core is answered 200 at
//! once. Answers to button presses and templates for late window failures
//! are sent after the recording, in the same task. Refusals answer with a
//! generic body and log their reason once, never the body.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use secrecy::SecretString;
use serde::Deserialize;
use switchboard_contract::{ActionReply, InboundAction, InboundSink, SubmitError};
use tokio::sync::oneshot;

use crate::api::{Graph, REENGAGEMENT_CODES};
use crate::inbound::{Item, Normaliser};
use crate::numbers::Numbers;
use crate::payload::{self, Notification};
use crate::redact;
use crate::send::{FollowUp, WhatsAppSender};
use crate::signature::{self, SIGNATURE_HEADER};
use crate::tasks::WebhookTasks;
use crate::window::{Clock, Contacts};

/// Everything the webhook needs, shared by all requests.
pub(crate) struct WebhookState {
    pub sink: Arc<dyn InboundSink>,
    pub sender: Arc<WhatsAppSender>,
    pub numbers: Arc<Numbers>,
    pub graph: Arc<Graph>,
    pub contacts: Arc<Contacts>,
    pub clock: Arc<dyn Clock>,
    pub tasks: Arc<WebhookTasks>,
    pub app_secret: SecretString,
    pub verify_token: SecretString,
    pub ack_timeout: Duration,
    pub react_to_reactions: bool,
}

/// The webhook route at `path`, with its body limit.
pub(crate) fn router(state: Arc<WebhookState>, path: &str, max_body_bytes: usize) -> Router {
    Router::new()
        .route(path, get(handshake).post(receive))
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .with_state(state)
}

/// Why a request was refused; the variant picks the status, the reason is
/// logged, and the body stays generic.
#[derive(Debug, thiserror::Error)]
enum Rejection {
    #[error("bad request: {0}")]
    BadRequest(&'static str),
    #[error("unauthorised: {0}")]
    Unauthorised(&'static str),
    #[error("forbidden: {0}")]
    Forbidden(&'static str),
    #[error("too many payloads in flight")]
    Busy,
    #[error("the core could not record the payload")]
    Unavailable,
}

impl IntoResponse for Rejection {
    fn into_response(self) -> Response {
        let (status, body) = match self {
            Self::BadRequest(_) => (StatusCode::BAD_REQUEST, "bad request"),
            Self::Unauthorised(_) => (StatusCode::UNAUTHORIZED, "unauthorised"),
            Self::Forbidden(_) => (StatusCode::FORBIDDEN, "forbidden"),
            Self::Busy | Self::Unavailable => (StatusCode::SERVICE_UNAVAILABLE, "try again later"),
        };
        tracing::warn!(status = status.as_u16(), reason = %self, "WhatsApp webhook request refused");
        (status, body).into_response()
    }
}

/// The subscription handshake's query.
#[derive(Deserialize)]
struct Handshake {
    #[serde(rename = "hub.mode")]
    mode: Option<String>,
    #[serde(rename = "hub.verify_token")]
    verify_token: Option<String>,
    #[serde(rename = "hub.challenge")]
    challenge: Option<String>,
}

async fn handshake(
    State(state): State<Arc<WebhookState>>,
    Query(query): Query<Handshake>,
) -> Result<Response, Rejection> {
    if query.mode.as_deref() != Some("subscribe") {
        return Err(Rejection::Forbidden("hub.mode is not subscribe"));
    }
    let token = query.verify_token.unwrap_or_default();
    if !signature::constant_time_eq(&token, &state.verify_token) {
        return Err(Rejection::Forbidden("verify token mismatch"));
    }
    let challenge = query
        .challenge
        .ok_or(Rejection::BadRequest("no hub.challenge"))?;
    tracing::info!("answered the WhatsApp webhook subscription handshake");
    let plain = [(header::CONTENT_TYPE, "text/plain; charset=utf-8")];
    Ok((StatusCode::OK, plain, challenge).into_response())
}

async fn receive(
    State(state): State<Arc<WebhookState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, Rejection> {
    let signature = headers
        .get(SIGNATURE_HEADER)
        .and_then(|value| value.to_str().ok())
        .ok_or(Rejection::Unauthorised("no X-Hub-Signature-256"))?;
    if !signature::verify(&state.app_secret, &body, signature) {
        return Err(Rejection::Unauthorised("signature mismatch"));
    }
    let notification: Notification = serde_json::from_slice(&body)
        .map_err(|_| Rejection::BadRequest("body is not a webhook notification"))?;
    if notification.object != payload::OBJECT {
        tracing::debug!(object = %notification.object, "WhatsApp webhook for another object ignored");
        return Ok(acknowledged());
    }
    let normaliser = Normaliser {
        numbers: &state.numbers,
        graph: &state.graph,
        contacts: &state.contacts,
        clock: state.clock.as_ref(),
        react_to_reactions: state.react_to_reactions,
    };
    let items = normaliser.items(notification);
    if items.is_empty() {
        return Ok(acknowledged());
    }
    hand_off(&state, items).await
}

/// Hands `items` to the core in an owned task and waits for it up to the
/// ack timeout.
async fn hand_off(state: &Arc<WebhookState>, items: Vec<Item>) -> Result<Response, Rejection> {
    let permit = state.tasks.reserve().ok_or(Rejection::Busy)?;
    let (done, recorded) = oneshot::channel();
    let task_state = Arc::clone(state);
    state.tasks.spawn(permit, async move {
        let outcome = record(task_state.sink.as_ref(), items).await;
        // The webhook may have stopped waiting; then nobody needs it.
        let _ = done.send(outcome.is_ok());
        for follow_up in outcome.unwrap_or_default() {
            task_state.sender.follow_up(follow_up).await;
        }
    });
    match tokio::time::timeout(state.ack_timeout, recorded).await {
        Ok(Ok(true)) => Ok(acknowledged()),
        // The core is unavailable, or the task ended without an answer.
        Ok(Ok(false) | Err(_)) => Err(Rejection::Unavailable),
        Err(_) => {
            tracing::warn!(
                ack_timeout_ms = state.ack_timeout.as_millis(),
                "core slow to record a WhatsApp payload; answering 503 so Meta delivers it again"
            );
            Err(Rejection::Unavailable)
        }
    }
}

/// The core could not record an item: the payload is not acknowledged.
struct NotRecorded;

/// Hands every item to the core, in order, and returns what is left to
/// do; stops at the first the core could not record.
async fn record(sink: &dyn InboundSink, items: Vec<Item>) -> Result<Vec<FollowUp>, NotRecorded> {
    let mut follow_ups = Vec::new();
    for item in items {
        match item {
            Item::Message(message) => {
                let id = redact::message(message.event_id.as_str()).to_string();
                if let Some(submitted) = verdict(sink.submit(*message).await, &id)? {
                    tracing::debug!(wamid = %id, ?submitted, "WhatsApp message recorded");
                }
            }
            Item::Action(action) => {
                let id = redact::message(action.event_id.as_str()).to_string();
                if let Some(reply) = verdict(sink.act(action.clone()).await, &id)? {
                    follow_ups.extend(notices(&action, reply));
                }
            }
            Item::Status { status, code } => {
                let id = redact::message(&status.message_id).to_string();
                verdict(sink.delivery_status(status.clone()).await, &id)?;
                // Recorded, or refused by the core as unusable: either way
                // the reply did not arrive, and its template may.
                if code.is_some_and(|code| REENGAGEMENT_CODES.contains(&code)) {
                    follow_ups.push(FollowUp::WindowClosed(status));
                }
            }
        }
    }
    Ok(follow_ups)
}

/// `Some` when the core recorded the item, `None` when it rejected it as
/// unusable (acknowledged all the same), [`NotRecorded`] when it could not.
fn verdict<T>(result: Result<T, SubmitError>, id: &str) -> Result<Option<T>, NotRecorded> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(SubmitError::Rejected(reason)) => {
            tracing::warn!(wamid = %id, %reason, "core rejected a WhatsApp item");
            Ok(None)
        }
        Err(SubmitError::Unavailable(reason)) => {
            tracing::error!(wamid = %id, %reason, "core could not record a WhatsApp item");
            Err(NotRecorded)
        }
    }
}

/// What to say after a press: WhatsApp cannot edit the question, so its
/// new text and the notice go as messages replying to it.
fn notices(action: &InboundAction, reply: ActionReply) -> impl Iterator<Item = FollowUp> + '_ {
    [reply.update, reply.notice]
        .into_iter()
        .flatten()
        .filter(|text| !text.trim().is_empty())
        .map(|text| FollowUp::Notice {
            account: action.account.clone(),
            chat: action.chat.clone(),
            text,
            reply_to: action.message_id.clone(),
        })
}

fn acknowledged() -> Response {
    (StatusCode::OK, "ok").into_response()
}
