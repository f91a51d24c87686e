//! `POST /v1/chat/completions`: one user message into a session (the one
//! the request names or its resent transcript continues, see `transcript`),
//! the turn's reply out, as a `chat.completion` object or as server-sent
//! `chat.completion.chunk` events.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Extension;
use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Json, Response};
use futures::StreamExt;
use serde::Deserialize;
use serde_json::{Value, json};
use switchboard_contract::{
    AccountId, ChatId, ChatKind, EventId, InboundMessage, PlatformName, Sender, UserId,
};

use tokio::sync::oneshot;

use super::caller::Caller;
use super::sessions::with_session_header;
use super::transcript::{self, RequestMessage, Transcript};
use super::{ApiError, ApiState, SESSION_HEADER};
use crate::session::local::LocalPlatform;
use crate::session::runner::TurnReply;
use crate::session::service::{Admission, SubmitOptions};
use crate::store::{InboundStatus, SessionId};

/// The part of an OpenAI request the gateway reads; other fields are
/// accepted and ignored (the server owns the history and the settings).
#[derive(Debug, Deserialize)]
pub struct ChatRequest {
    #[serde(default)]
    model: Option<String>,
    messages: Vec<RequestMessage>,
    #[serde(default)]
    stream: bool,
    #[serde(default)]
    user: Option<String>,
}

/// The handler: prepare the message, submit it, then answer the turn's
/// reply as one JSON object or as a stream of chunks. Every failure is an
/// [`ApiError`], which owns the text and status the client sees; one about
/// a session the request named carries that `X-Session-Id`.
pub async fn create(
    State(state): State<Arc<ApiState>>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Result<Json<ChatRequest>, JsonRejection>,
) -> Response {
    let named = header_value(&headers, SESSION_HEADER);
    let result = answer(&state, &caller, &headers, body).await;
    match (result, named) {
        (Ok(response), _) => response,
        (Err(err), Ok(Some(named))) => with_session_header(Err::<Response, _>(err), &named),
        (Err(err), _) => err.into_response(),
    }
}

async fn answer(
    state: &Arc<ApiState>,
    caller: &Caller,
    headers: &HeaderMap,
    body: Result<Json<ChatRequest>, JsonRejection>,
) -> Result<Response, ApiError> {
    let Json(request) = body?;
    let transcript = Transcript::parse(&request.messages)?;
    let (mut message, mut options) =
        prepare(headers, &request, &transcript, caller, &state.models)?;
    // The session it names (created when new), the one its resent
    // transcript continues, or a new one.
    let explicit_event = headers.contains_key("idempotency-key");
    let route = transcript::resolve(
        state,
        caller,
        &transcript,
        &mut message,
        &mut options,
        explicit_event,
    )
    .await?;
    let sender = message.sender.id.clone();
    let turn = submit(state, message, options).await?;
    route
        .recorded(
            state,
            caller,
            sender.as_str(),
            &turn.session_id,
            turn.inbound_id,
        )
        .await;
    let completion = Completion::new(state, &turn, request.model.as_deref()).await;
    let session_header = HeaderValue::from_str(turn.session_id.as_str())
        .map_err(|err| ApiError::Internal(err.to_string()))?;
    // The session header goes with errors too (a 504, a 503 while
    // draining), so that the client can find the conversation again.
    let mut response = if request.stream {
        streamed(state, completion, turn)
    } else {
        answered(state, completion, turn)
            .await
            .unwrap_or_else(IntoResponse::into_response)
    };
    response
        .headers_mut()
        .insert(SESSION_HEADER, session_header);
    Ok(response)
}

/// A submitted message whose turn's reply is awaited.
struct Turn {
    inbound_id: i64,
    session_id: SessionId,
    reply: oneshot::Receiver<TurnReply>,
}

/// Why no reply came.
enum NoReply {
    /// The turn ended without sending one.
    Closed,
    /// The reply timeout passed first.
    TimedOut,
    /// The instance is draining and its grace period is over.
    Draining,
}

impl NoReply {
    /// The error for the turn `turn` of `session_id`.
    fn into_error(self, session_id: &SessionId, turn: i64) -> ApiError {
        match self {
            Self::Closed => ApiError::Internal("the turn ended without a reply".to_owned()),
            Self::TimedOut => ApiError::Timeout {
                session_id: session_id.to_string(),
                turn,
            },
            Self::Draining => ApiError::Unavailable {
                reason: "this instance is shutting down",
                retry_after_secs: 1,
            },
        }
    }
}

/// The inbound message of a request, and how to submit it: as the sender
/// `caller` acts as, with the requested model (one of `models`).
fn prepare(
    headers: &HeaderMap,
    request: &ChatRequest,
    transcript: &Transcript,
    caller: &Caller,
    models: &[String],
) -> Result<(InboundMessage, SubmitOptions), ApiError> {
    let text = transcript.text.clone();
    let model = match request.model.as_deref().filter(|model| !model.is_empty()) {
        Some(model) if !models.iter().any(|known| known == model) => {
            return Err(ApiError::BadRequest(format!(
                "unknown model `{model}`; the configured models are: {}",
                models.join(", ")
            )));
        }
        model => model.map(str::to_owned),
    };
    let session = header_value(headers, SESSION_HEADER)?;
    let event_id = header_value(headers, "idempotency-key")?
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let chat = session
        .clone()
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let user = request.user.as_deref().filter(|user| !user.is_empty());
    let sender = caller.sender(user)?;
    // A request naming its session, or from no particular user, is a chat of
    // its own; a `user`'s other requests continue that user's conversation
    // (shared with their linked identities on other platforms).
    let own_chat = session.is_some() || user.is_none();
    let message = inbound(caller.account(), &chat, &event_id, &sender, text)?;
    let options = SubmitOptions {
        session,
        wait: true,
        own_chat,
        model,
    };
    Ok((message, options))
}

/// Submits the message; an ignored one gets no turn. A duplicate (a retry
/// with the same Idempotency-Key) waits for the first request's reply, or
/// gets it at once when its turn has finished.
async fn submit(
    state: &ApiState,
    message: InboundMessage,
    options: SubmitOptions,
) -> Result<Turn, ApiError> {
    let event = (
        message.platform.clone(),
        message.account.clone(),
        message.event_id.clone(),
    );
    let named_session = options.session.clone();
    let submission = state.service.submit(message, options).await?;
    let (inbound_id, session_id) = match submission.admission {
        Admission::Accepted {
            inbound_id,
            session_id,
        }
        | Admission::Handled {
            inbound_id,
            session_id,
            ..
        } => (inbound_id, session_id),
        Admission::Duplicate => {
            return retried(state, &event, named_session.as_deref()).await;
        }
        Admission::Ignored => return Err(ApiError::BadRequest("message ignored".to_owned())),
    };
    let reply = submission
        .reply
        .ok_or_else(|| ApiError::Internal("no reply receiver".to_owned()))?;
    Ok(Turn {
        inbound_id,
        session_id,
        reply,
    })
}

/// The turn of a message recorded before under the same Idempotency-Key:
/// its reply is awaited (or read at once, when stored). Another
/// conversation's key is a conflict.
async fn retried(
    state: &ApiState,
    (platform, account, event_id): &(PlatformName, AccountId, EventId),
    named_session: Option<&str>,
) -> Result<Turn, ApiError> {
    let conflict = || ApiError::Conflict("this Idempotency-Key was used before".to_owned());
    let (inbound_id, session_id) = state
        .store
        .inbound_id_of_event(platform.as_str(), account.as_str(), event_id.as_str())
        .await
        .map_err(|err| ApiError::Internal(err.to_string()))?
        .ok_or_else(conflict)?;
    if named_session.is_some_and(|named| named != session_id.as_str()) {
        return Err(conflict());
    }
    let runner = state.service.runner();
    let reply = runner.wait_for(inbound_id);
    runner
        .reply_stored(Some(&[inbound_id]))
        .await
        .map_err(|err| ApiError::Internal(err.to_string()))?;
    Ok(Turn {
        inbound_id,
        session_id,
        reply,
    })
}

/// Waits for the turn's reply, at most `timeout`, and while the instance
/// drains at most until its grace period ends.
async fn wait_for_reply(
    state: &ApiState,
    turn: Turn,
    timeout: Duration,
) -> Result<TurnReply, NoReply> {
    let inbound_id = turn.inbound_id;
    let result = tokio::select! {
        waited = tokio::time::timeout(timeout, turn.reply) => match waited {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(_closed)) => Err(NoReply::Closed),
            Err(_elapsed) => Err(NoReply::TimedOut),
        },
        () = state.drain_deadline.cancelled() => Err(NoReply::Draining),
    };
    if result.is_err() {
        // Its reply will be in the conversation's history, and a retry with
        // the same Idempotency-Key gets it.
        state.service.runner().forget(inbound_id);
    }
    result
}

/// The reply as one `chat.completion` object, with the turn's usage.
async fn answered(
    state: &ApiState,
    completion: Completion,
    turn: Turn,
) -> Result<Response, ApiError> {
    let inbound_id = turn.inbound_id;
    let session_id = turn.session_id.clone();
    let reply = wait_for_reply(state, turn, state.reply_timeout)
        .await
        .map_err(|no_reply| no_reply.into_error(&session_id, inbound_id))?;
    let usage = state
        .store
        .task_usage(inbound_id)
        .await
        .map_err(|err| ApiError::Internal(err.to_string()))?;
    let prompt = usage.usage.input_tokens;
    let completion_tokens = usage.usage.output_tokens;
    let body = json!({
        "id": completion.id,
        "object": "chat.completion",
        "created": completion.created,
        "model": completion.model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": reply.text},
            "finish_reason": finish_reason(&reply),
        }],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": usage.usage.cache_read_tokens},
        },
    });
    Ok(Json(body).into_response())
}

/// The reply as server-sent `chat.completion.chunk` events, sent once the
/// turn ends. A turn that ends without a reply is forgotten like one that
/// times out, and the stream ends with the timeout's error event.
fn streamed(state: &Arc<ApiState>, completion: Completion, turn: Turn) -> Response {
    let state = Arc::clone(state);
    let events = futures::stream::once(async move {
        let (session_id, inbound_id) = (turn.session_id.clone(), turn.inbound_id);
        let reply = wait_for_reply(&state, turn, state.reply_timeout)
            .await
            .map_err(|no_reply| no_reply.into_error(&session_id, inbound_id));
        futures::stream::iter(completion.chunks(reply))
    })
    .flatten()
    .map(Ok::<Event, Infallible>);
    Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// The fields every answer to one request repeats.
struct Completion {
    id: String,
    created: u64,
    model: String,
}

impl Completion {
    /// The answer's id (from the inbound message), its time, and the model
    /// of its session (the requested one if the session cannot be read).
    async fn new(state: &ApiState, turn: &Turn, requested: Option<&str>) -> Self {
        let model = match state.store.session(&turn.session_id).await {
            Ok(Some(session)) => session.model,
            _ => requested.unwrap_or_default().to_owned(),
        };
        Self {
            id: format!("chatcmpl-{}", turn.inbound_id),
            created: unix_now(),
            model,
        }
    }

    /// The SSE events for a finished turn: the role, the content, the finish
    /// reason, then `[DONE]`. A turn that timed out ends with an error event.
    fn chunks(&self, reply: Result<TurnReply, ApiError>) -> Vec<Event> {
        let chunk = |delta: Value, finish: Value| {
            Event::default().data(
                json!({
                    "id": self.id,
                    "object": "chat.completion.chunk",
                    "created": self.created,
                    "model": self.model,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                })
                .to_string(),
            )
        };
        let mut events = vec![chunk(
            json!({"role": "assistant", "content": ""}),
            Value::Null,
        )];
        match reply {
            Ok(reply) => {
                events.push(chunk(json!({"content": reply.text}), Value::Null));
                events.push(chunk(json!({}), json!(finish_reason(&reply))));
            }
            Err(err) => {
                events.push(Event::default().data(
                    json!({"error": {"message": err.to_string(), "type": err.kind()}}).to_string(),
                ));
            }
        }
        events.push(Event::default().data("[DONE]"));
        events
    }
}

fn finish_reason(reply: &TurnReply) -> &'static str {
    match reply.status {
        InboundStatus::Failed => "error",
        _ => "stop",
    }
}

fn header_value(headers: &HeaderMap, name: &str) -> Result<Option<String>, ApiError> {
    match headers.get(name) {
        None => Ok(None),
        Some(value) => {
            let value = value
                .to_str()
                .map_err(|_| ApiError::BadRequest(format!("header {name} is not valid text")))?
                .trim();
            if value.is_empty() || value.len() > 128 {
                return Err(ApiError::BadRequest(format!(
                    "header {name} must be 1 to 128 characters"
                )));
            }
            Ok(Some(value.to_owned()))
        }
    }
}

/// The message as the API platform hands it in: under the caller's
/// `account`, from `sender`.
fn inbound(
    account: &str,
    chat: &str,
    event_id: &str,
    sender: &str,
    text: String,
) -> Result<InboundMessage, ApiError> {
    let bad = |err: switchboard_contract::IdError| ApiError::BadRequest(err.to_string());
    Ok(InboundMessage {
        platform: PlatformName::parse(LocalPlatform::Api.name()).map_err(bad)?,
        account: AccountId::parse(account).map_err(bad)?,
        event_id: EventId::parse(event_id).map_err(bad)?,
        chat: ChatId::parse(chat).map_err(bad)?,
        chat_kind: ChatKind::Direct,
        thread: None,
        sender: Sender {
            id: UserId::parse(sender).map_err(bad)?,
            display_name: None,
            is_bot: false,
        },
        text,
        mentions_bot: true,
        reply_to: None,
        message_id: None,
        attachments: Vec::new(),
    })
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs())
}
