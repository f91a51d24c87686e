//! `POST /v1/chat/completions`: one user message into a session (the one
//! the request names or its resent transcript continues, see `transcript`),
//! the turn's reply out, as a `chat.completion` object or as server-sent
//! `chat.completion.chunk` events.
//!
//! The reply is the turn's visible reply (`reply`): the text of every model
//! call, a later call's after a blank line, the same streamed or not. A
//! turn that failed is an error (`failure`). A streamed request follows its
//! turn live (`agent::live`): the text of each model call is sent as it
//! arrives (`shown`: a retried call continues from what was shown), and
//! tool activity as chunks with an empty `delta` and a `switchboard` field
//! (`{"type": "tool_call", "id", "name", "arguments"}`, `{"type":
//! "tool_result", "id", "name", "is_error"}`). The last chunk carries the
//! finish reason, then, with `stream_options.include_usage`, a chunk with
//! the turn's `usage` and no choices, then `[DONE]`. A turn that parks
//! (a tool that asks first, a question) sends the request's text after
//! what its model wrote, and its finishing chunk carries the top-level
//! `approval` a plain answer has (`approvals::approval_json`). A failure ends the
//! stream with an `{"error": …}` event instead. A turn run by another
//! instance sends no live text; its reply comes whole when the turn ends.
//! The event id a request is recorded under makes a client's retries one
//! turn (`retries`).
//!
//! A request's own function `tools` are offered beside the gateway's
//! (`agent::client_tools`): a turn whose model called one answers
//! `finish_reason: "tool_calls"` with those calls (streamed: a
//! `delta.tool_calls` chunk before the finishing one), and the request
//! that brings their results continues the turn (`transcript`).

use crate::domain::{InboundId, LocalPlatform, SessionId, ToolCall, ToolSpec, TurnOptions};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Extension;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::sse::Event;
use axum::response::{IntoResponse, Json, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use switchboard_contract::{
    AccountId, ChatId, ChatKind, EventId, InboundMessage, PlatformName, Sender, UserId,
};

use tokio::sync::oneshot;

use super::approvals;
use super::caller::Caller;
use super::follow::{self, Seen};
use super::options::ModelOptions;
use super::reply;
use super::retries;
use super::sessions::with_session_header;
use super::transcript::{self, RequestMessage, Transcript};
use super::{ApiError, ApiState, SESSION_HEADER};
use crate::agent::live::{LiveEvent, LiveSubscription};
use crate::session::runner::TurnReply;
use crate::session::service::{Admission, SubmitOptions};

/// The part of an OpenAI request the gateway reads. Fields that change the
/// model call are passed on or refused (`options`); system and developer
/// messages are the client's instructions (`transcript`,
/// `session::instructions`); others are accepted and ignored (the server
/// owns the history and the settings).
#[derive(Debug, Deserialize)]
pub struct ChatRequest {
    #[serde(default)]
    pub(super) model: Option<String>,
    pub(super) messages: Vec<RequestMessage>,
    #[serde(default)]
    pub(super) stream: bool,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
    #[serde(default)]
    user: Option<String>,
    /// Passed on or refused (`options`).
    #[serde(flatten)]
    options: ModelOptions,
}

/// `stream_options`: whether a streamed answer ends with a usage chunk.
#[derive(Debug, Default, Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
}

/// The handler: prepare the message, submit it, then answer the turn's
/// reply as one JSON object or as a stream of chunks. Every failure is an
/// [`ApiError`], which owns the text and status the client sees; one about
/// a session the request named carries that `X-Session-Id`.
pub async fn create(
    State(state): State<Arc<ApiState>>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
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
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body_bytes(body)?;
    let Json(request) = Json::<ChatRequest>::from_bytes(&body)?;
    let turn = admit(state, caller, headers, &request, &body).await?;
    let completion = Completion::new(state, &turn, request.model.as_deref()).await;
    let session_header = HeaderValue::from_str(turn.session_id.as_str())
        .map_err(|err| ApiError::Internal(err.to_string()))?;
    // The session header goes with errors too (a 504, a 503 while
    // draining), so that the client can find the conversation again.
    let mut response = if request.stream {
        let include_usage = request
            .stream_options
            .as_ref()
            .is_some_and(|options| options.include_usage);
        let tools = request.options.has_tools();
        streamed(state, completion, turn, include_usage, tools)
    } else {
        answered(state, completion, turn, &request)
            .await
            .unwrap_or_else(IntoResponse::into_response)
    };
    response
        .headers_mut()
        .insert(SESSION_HEADER, session_header);
    Ok(response)
}

/// A request's body, or the error it is: 413 past `api.max_body_bytes`.
pub(super) fn body_bytes(body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    body.map_err(|rejection| {
        if rejection.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::TooLarge
        } else {
            ApiError::BadRequest(rejection.body_text())
        }
    })
}

/// Checks the request, records its message in its session and queues its
/// turn (or finds the turn an identical request started); `body` is the
/// request's bytes.
pub(super) async fn admit(
    state: &ApiState,
    caller: &Caller,
    headers: &HeaderMap,
    request: &ChatRequest,
    body: &[u8],
) -> Result<Turn, ApiError> {
    let call = request.options.check(state.provider)?;
    let client_tools = request.options.client_tools()?;
    refuse_shadowing(state, &client_tools)?;
    let transcript = Transcript::parse(&request.messages)?;
    let event = retries::request_event(state, caller, headers, body).await?;
    let (mut message, mut options) = prepare(
        headers,
        request,
        &transcript,
        caller,
        &state.models,
        &event.event_id,
    )?;
    options.turn = TurnOptions {
        call,
        // Ignored, as before, unless the operator lets clients instruct.
        instructions: transcript
            .instructions
            .clone()
            .filter(|_| state.client_instructions),
        client_tools,
        tool_results: transcript.results.clone(),
    };
    retries::check_key(state, caller, message.sender.id.as_str(), headers, body).await?;
    // Images are fetched and checked before anything is stored.
    message.attachments = state.images.take(&transcript.images).await?;
    // The session it names (created when new), the one its resent
    // transcript continues, or a new one.
    let route = transcript::resolve(
        state,
        caller,
        &transcript,
        &mut message,
        &mut options,
        event.retry,
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
    Ok(turn)
}

/// Refuses client tools named like one of the gateway's own (the model
/// could not tell them apart).
fn refuse_shadowing(state: &ApiState, tools: &[ToolSpec]) -> Result<(), ApiError> {
    if tools.is_empty() {
        return Ok(());
    }
    let own = state.tools.offered();
    match tools.iter().find(|tool| own.get(&tool.name).is_some()) {
        Some(tool) => Err(ApiError::BadRequest(format!(
            "`tools`: `{}` is the name of one of the gateway's own tools; name yours otherwise",
            tool.name
        ))),
        None => Ok(()),
    }
}

/// The calls of the client's own tools the turn of a request that
/// `has_tools` handed to it (none when it answered, or the request had no
/// tools).
pub(super) async fn handed_calls(
    state: &ApiState,
    has_tools: bool,
    session_id: &SessionId,
) -> Result<Vec<ToolCall>, ApiError> {
    if !has_tools {
        return Ok(Vec::new());
    }
    state
        .store
        .transcript()
        .client_calls(session_id)
        .await
        .map_err(|err| ApiError::Internal(err.to_string()))
}

/// `tool_calls` as a chat completion message carries them (and the
/// conversation endpoints show them).
pub(super) fn tool_calls_json(calls: &[ToolCall]) -> Value {
    calls.iter().map(tool_call_json).collect()
}

/// One tool call as a chat completion carries it.
fn tool_call_json(call: &ToolCall) -> Value {
    json!({
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    })
}

/// A submitted message whose turn's reply is awaited.
pub(super) struct Turn {
    pub(super) inbound_id: InboundId,
    pub(super) session_id: SessionId,
    pub(super) reply: oneshot::Receiver<TurnReply>,
    /// The turn's live events, for a streamed request.
    pub(super) live: Option<LiveSubscription>,
}

/// Why no reply came.
pub(super) enum NoReply {
    /// The turn ended without sending one.
    Closed,
    /// The reply timeout passed first.
    TimedOut,
    /// The instance is draining and its grace period is over.
    Draining,
}

impl NoReply {
    /// The error for the turn `turn` of `session_id`.
    pub(super) fn into_error(self, session_id: &SessionId, turn: InboundId) -> ApiError {
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
    event_id: &str,
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
    let chat = session
        .clone()
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let user = request.user.as_deref().filter(|user| !user.is_empty());
    let sender = caller.sender(user)?;
    // A request naming its session, or from no particular user, is a chat of
    // its own; a `user`'s other requests continue that user's conversation
    // (shared with their linked identities on other platforms).
    let own_chat = session.is_some() || user.is_none();
    let message = inbound(caller.account(), &chat, event_id, &sender, text)?;
    let options = SubmitOptions {
        session,
        wait: true,
        own_chat,
        model,
        live: request.stream,
        turn: TurnOptions::default(),
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
        live: submission.live,
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
        .inbound()
        .id_of_event(platform.as_str(), account.as_str(), event_id.as_str())
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
    // A retry's stream gets the reply whole: the turn may be half done.
    Ok(Turn {
        inbound_id,
        session_id,
        reply,
        live: None,
    })
}

/// Waits for the turn's reply, at most `timeout`, and while the instance
/// drains at most until its grace period ends.
pub(super) async fn wait_for_reply(
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
    request: &ChatRequest,
) -> Result<Response, ApiError> {
    let inbound_id = turn.inbound_id;
    let session_id = turn.session_id.clone();
    let reply = wait_for_reply(state, turn, state.reply_timeout)
        .await
        .map_err(|no_reply| no_reply.into_error(&session_id, inbound_id))?;
    let text = reply::visible(state, &reply).await?;
    let handed = handed_calls(state, request.options.has_tools(), &session_id).await?;
    let usage = usage_of(state, inbound_id).await?;
    retries::answered(state, inbound_id).await;
    let approval = if reply.status == crate::domain::InboundStatus::Waiting {
        approvals::waiting_for(state, inbound_id).await?
    } else {
        None
    };
    let (message, finish) = if handed.is_empty() {
        (json!({"role": "assistant", "content": text}), "stop")
    } else {
        let content = (!text.is_empty()).then_some(text);
        let calls = tool_calls_json(&handed);
        (
            json!({"role": "assistant", "content": content, "tool_calls": calls}),
            "tool_calls",
        )
    };
    let mut body = json!({
        "id": completion.id,
        "object": "chat.completion",
        "created": completion.created,
        "model": completion.model,
        "choices": [{
            "index": 0,
            "message": message,
            "finish_reason": finish,
        }],
        "usage": usage,
    });
    if let Some(approval) = approval {
        body["approval"] = approval;
    }
    Ok(Json(body).into_response())
}

/// The turn as server-sent `chat.completion.chunk` events, sent as it runs
/// (see the module's documentation), then `[DONE]`.
fn streamed(
    state: &Arc<ApiState>,
    completion: Completion,
    turn: Turn,
    include_usage: bool,
    client_tools: bool,
) -> Response {
    follow::sse(state, move |state, out| async move {
        let inbound_id = turn.inbound_id;
        let session_id = turn.session_id.clone();
        out.send(completion.chunk(json!({"role": "assistant", "content": ""}), Value::Null));
        let seen = |seen: Seen<'_>| out.send(completion.seen_chunk(seen));
        let Some(rest) = follow::follow(&state, turn, &out, seen).await else {
            return;
        };
        match rest {
            Ok(ended) => {
                if let Some(rest) = ended.rest {
                    out.send(completion.chunk(json!({"content": rest}), Value::Null));
                }
                let approval = if ended.parked {
                    approvals::waiting_for(&state, inbound_id)
                        .await
                        .unwrap_or_else(|err| {
                            tracing::warn!(error = %err, "no approval for a parked streamed turn");
                            None
                        })
                } else {
                    None
                };
                let handed = handed_calls(&state, client_tools, &session_id)
                    .await
                    .unwrap_or_else(|err| {
                        tracing::warn!(error = %err, "the calls handed to the client not read");
                        Vec::new()
                    });
                let finish = if handed.is_empty() {
                    "stop"
                } else {
                    // A stream's tool call deltas carry their index.
                    let calls: Vec<Value> = handed
                        .iter()
                        .enumerate()
                        .map(|(index, call)| {
                            let mut call = tool_call_json(call);
                            call["index"] = json!(index);
                            call
                        })
                        .collect();
                    out.send(completion.chunk(json!({"tool_calls": calls}), Value::Null));
                    "tool_calls"
                };
                out.send(completion.finish_chunk(approval, finish));
                retries::answered(&state, inbound_id).await;
                if include_usage {
                    match usage_of(&state, inbound_id).await {
                        Ok(usage) => out.send(completion.usage_chunk(usage)),
                        Err(err) => tracing::warn!(error = %err, "no usage for a streamed turn"),
                    }
                }
            }
            Err(err) => out.send(error_event(&err)),
        }
        out.send(Event::default().data("[DONE]"));
    })
}

/// The event that ends a stream with `err`: `{"error": {...}}`, on which
/// the official clients raise.
pub(super) fn error_event(err: &ApiError) -> Event {
    if let ApiError::Internal(cause) = err {
        tracing::error!(%cause, "a streamed request failed");
    }
    Event::default().data(json!({"error": err.body()}).to_string())
}

/// The turn's token counts, as a `usage` object.
async fn usage_of(state: &ApiState, inbound_id: InboundId) -> Result<Value, ApiError> {
    let usage = state
        .store
        .usage()
        .task_usage(inbound_id)
        .await
        .map_err(|err| ApiError::Internal(err.to_string()))?;
    let prompt = usage.usage.input_tokens;
    let completion_tokens = usage.usage.output_tokens;
    Ok(json!({
        "prompt_tokens": prompt,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.usage.cache_read_tokens},
    }))
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
        let model = match state.store.sessions().get(&turn.session_id).await {
            Ok(Some(session)) => session.model,
            _ => requested.unwrap_or_default().to_owned(),
        };
        Self {
            id: format!("chatcmpl-{}", turn.inbound_id),
            created: unix_now(),
            model,
        }
    }

    /// The chunk JSON with the given choices.
    fn body(&self, choices: Value) -> Value {
        json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": choices,
        })
    }

    /// A chunk with one choice.
    fn chunk(&self, delta: Value, finish: Value) -> Event {
        let body = self.body(json!([{"index": 0, "delta": delta, "finish_reason": finish}]));
        Event::default().data(body.to_string())
    }

    /// The finishing chunk: an empty delta, the `finish_reason` (`stop`,
    /// or `tool_calls` for calls handed to the client), and for a turn
    /// that parked the `approval` it waits for.
    fn finish_chunk(&self, approval: Option<Value>, finish: &str) -> Event {
        let mut body = self.body(json!([{"index": 0, "delta": {}, "finish_reason": finish}]));
        if let Some(approval) = approval {
            body["approval"] = approval;
        }
        Event::default().data(body.to_string())
    }

    /// A chunk with one choice and the gateway's own `switchboard` field.
    fn chunk_with(&self, delta: Value, finish: Value, switchboard: Value) -> Event {
        let mut body = self.body(json!([{"index": 0, "delta": delta, "finish_reason": finish}]));
        body["switchboard"] = switchboard;
        Event::default().data(body.to_string())
    }

    /// The chunk of something seen in the turn: its text as `content`,
    /// tool activity as an empty delta with the gateway's `switchboard`
    /// field.
    fn seen_chunk(&self, seen: Seen<'_>) -> Event {
        let tool = |value: Value| self.chunk_with(json!({}), Value::Null, value);
        match seen {
            Seen::Text(text) => self.chunk(json!({"content": text}), Value::Null),
            Seen::Tool(LiveEvent::ToolCall {
                id,
                name,
                arguments,
            }) => {
                tool(json!({"type": "tool_call", "id": id, "name": name, "arguments": arguments}))
            }
            Seen::Tool(LiveEvent::ToolResult { id, name, is_error }) => {
                tool(json!({"type": "tool_result", "id": id, "name": name, "is_error": is_error}))
            }
            Seen::Tool(_) => tool(Value::Null),
        }
    }

    /// The usage chunk: no choices, the turn's `usage`.
    fn usage_chunk(&self, usage: Value) -> Event {
        let mut body = self.body(json!([]));
        body["usage"] = usage;
        Event::default().data(body.to_string())
    }
}

pub(super) fn header_value(headers: &HeaderMap, name: &str) -> Result<Option<String>, ApiError> {
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

pub(super) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs())
}
