//! The Responses API: `POST /v1/responses` (plain and `stream: true`),
//! `GET /v1/responses/{id}`, `DELETE /v1/responses/{id}` and `POST
//! /v1/responses/{id}/cancel`.
//!
//! A response is a turn: its id is `resp_<turn>`, the number the turn
//! endpoint and the chat completion id (`chatcmpl-<turn>`) carry. A request
//! is translated into the chat completion request it means and goes the
//! same way (`completions::admit`): `input` (a string, or `message` items
//! with text, `input_text`/`output_text` and `input_image` parts) is the
//! transcript, `instructions` a system message (the client's instructions,
//! after the operator's system prompt, as for chat completions:
//! `session::instructions`), `text.format` the `response_format`,
//! `max_output_tokens` the `max_completion_tokens`, `temperature` and
//! `top_p` as they are (`options`), and `previous_response_id` names the
//! session of that turn, as `X-Session-Id` would, so the conversation is
//! the one the other styles reach, with the same byte-stable model
//! requests. Without it a request starts a new conversation or continues a
//! resent transcript. Fields the gateway does not pass on are refused with
//! 400 (`options`; also `function_call` items and `store: false`).
//!
//! Streamed, the typed events are `response.created`,
//! `response.output_item.added`, `response.content_part.added`,
//! `response.output_text.delta`, `response.output_text.done`,
//! `response.content_part.done`, `response.output_item.done` and
//! `response.completed`; a failure sends `response.failed` and then an
//! `error` event, on which the official clients raise.
//!
//! A turn that parks (a tool that asks first, a question) completes with
//! the request's text as its output and, as a plain chat completion does,
//! the top-level `approval` it waits for (on `response.completed` when
//! streamed, and on `GET` while it waits).

use std::sync::Arc;

use axum::Extension;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue};
use axum::response::sse::Event;
use axum::response::{IntoResponse, Json, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::approvals;
use super::caller::Caller;
use super::completions::{self, ChatRequest, Turn};
use super::follow::{self, Outlet, Seen};
use super::options::ModelOptions;
use super::sessions::reachable;
use super::{ApiError, ApiState, SESSION_HEADER, reply, retries};
use crate::domain::{InboundId, InboundStatus, StopCause, ToolCall};

/// A Responses API request, as far as the gateway reads it.
#[derive(Debug, Deserialize)]
pub struct ResponsesRequest {
    #[serde(default)]
    model: Option<String>,
    input: Value,
    #[serde(default)]
    instructions: Option<String>,
    #[serde(default)]
    previous_response_id: Option<String>,
    #[serde(default)]
    store: Option<bool>,
    #[serde(default)]
    stream: bool,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    text: Option<Value>,
    #[serde(default)]
    max_output_tokens: Option<Value>,
    #[serde(flatten)]
    options: ModelOptions,
}

/// `POST /v1/responses`.
pub async fn create(
    State(state): State<Arc<ApiState>>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    match respond(&state, &caller, headers, body).await {
        Ok(response) => response,
        Err(err) => err.into_response(),
    }
}

async fn respond(
    state: &Arc<ApiState>,
    caller: &Caller,
    mut headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = completions::body_bytes(body)?;
    let Json(request) = Json::<ResponsesRequest>::from_bytes(&body)?;
    refuse_unsupported(&request)?;
    if let Some(previous) = &request.previous_response_id {
        let (_, session) = turn_of(state, caller, previous).await?;
        let value = HeaderValue::from_str(session.as_str())
            .map_err(|err| ApiError::Internal(err.to_string()))?;
        headers.insert(SESSION_HEADER, value);
    }
    let chat = chat_body(&request)?;
    let bytes = serde_json::to_vec(&chat).map_err(|err| ApiError::Internal(err.to_string()))?;
    let chat: ChatRequest =
        serde_json::from_value(chat).map_err(|err| ApiError::BadRequest(err.to_string()))?;
    let turn = completions::admit(state, caller, &headers, &chat, &bytes).await?;
    let shape = Shape::new(state, &turn, &request).await;
    let session = HeaderValue::from_str(turn.session_id.as_str())
        .map_err(|err| ApiError::Internal(err.to_string()))?;
    let mut response = if request.stream {
        streamed(state, shape, turn)
    } else {
        answered(state, &shape, turn)
            .await
            .unwrap_or_else(IntoResponse::into_response)
    };
    response.headers_mut().insert(SESSION_HEADER, session);
    Ok(response)
}

/// `GET /v1/responses/{id}`: the response as it stands.
pub async fn get(
    State(state): State<Arc<ApiState>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Response {
    let result = async {
        let (turn, session) = turn_of(&state, &caller, &id).await?;
        stored(&state, turn, &session).await
    }
    .await;
    result.map_or_else(IntoResponse::into_response, |body| {
        Json(body).into_response()
    })
}

/// `DELETE /v1/responses/{id}`: the response can no longer be read nor
/// continued by its id; the conversation it belongs to stays.
pub async fn delete(
    State(state): State<Arc<ApiState>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Response {
    let result = async {
        let (turn, _) = turn_of(&state, &caller, &id).await?;
        state
            .store
            .api()
            .delete_response(turn)
            .await
            .map_err(|err| ApiError::Internal(err.to_string()))?;
        Ok::<_, ApiError>(json!({"id": id, "object": "response", "deleted": true}))
    }
    .await;
    result.map_or_else(IntoResponse::into_response, |body| {
        Json(body).into_response()
    })
}

/// `POST /v1/responses/{id}/cancel`: stops the response's turn if it is
/// running (as `/stop` does), then answers the response as it stands.
pub async fn cancel(
    State(state): State<Arc<ApiState>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Response {
    let result = async {
        let (turn, session) = turn_of(&state, &caller, &id).await?;
        let record = state
            .store
            .api()
            .turn(&session, turn)
            .await
            .map_err(|err| ApiError::Internal(err.to_string()))?;
        if record.is_some_and(|record| record.status == InboundStatus::Running) {
            state
                .service
                .runner()
                .stop(&session, StopCause::User)
                .await
                .map_err(|err| ApiError::Internal(err.to_string()))?;
        }
        stored(&state, turn, &session).await
    }
    .await;
    result.map_or_else(IntoResponse::into_response, |body| {
        Json(body).into_response()
    })
}

/// Refuses what a Responses request may set that the gateway does not do:
/// `store: false` (the other fields are checked as their chat completion
/// forms are, `options`).
fn refuse_unsupported(request: &ResponsesRequest) -> Result<(), ApiError> {
    if request.store == Some(false) {
        return Err(ApiError::BadRequest(
            "`store: false` is not supported by this gateway: it keeps every conversation; \
             send the request without it"
                .to_owned(),
        ));
    }
    Ok(())
}

/// `text.format` as the chat completion `response_format` it means:
/// `text` (nothing), `json_object`, or `json_schema` with its `name`,
/// `schema`, `strict` and `description` beside the type.
fn response_format(text: Option<&Value>) -> Result<Option<Value>, ApiError> {
    let Some(format) = text
        .and_then(|text| text.get("format"))
        .filter(|format| !format.is_null())
    else {
        return Ok(None);
    };
    let bad = |what: &str| ApiError::BadRequest(format!("`text.format` {what}"));
    match format.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(json!({"type": "json_object"}))),
        Some("json_schema") => {
            let mut schema = format.clone();
            if let Some(fields) = schema.as_object_mut() {
                fields.remove("type");
            }
            // Checked (with names that say `text.format`) before the chat
            // completion form is.
            super::options::json_schema(Some(&schema))
                .map_err(|_| bad("of type `json_schema` needs a `name` (1 to 64 letters, digits, `_` or `-`) and a `schema` object; `strict` is true or false"))?;
            Ok(Some(json!({"type": "json_schema", "json_schema": schema})))
        }
        _ => Err(bad(
            "must be of type `text`, `json_object` or `json_schema`",
        )),
    }
}

/// The chat completion request a Responses request means.
fn chat_body(request: &ResponsesRequest) -> Result<Value, ApiError> {
    let mut messages = Vec::new();
    if let Some(instructions) = request.instructions.as_deref() {
        messages.push(json!({"role": "system", "content": instructions}));
    }
    match &request.input {
        Value::String(text) => messages.push(json!({"role": "user", "content": text})),
        Value::Array(items) => {
            for (index, item) in items.iter().enumerate() {
                push_item(&mut messages, index, item)?;
            }
        }
        _ => {
            return Err(ApiError::BadRequest(
                "`input` must be a string or a list of items".to_owned(),
            ));
        }
    }
    let mut chat = serde_json::to_value(&request.options)
        .map_err(|err| ApiError::Internal(err.to_string()))?;
    chat_tools(&mut chat);
    chat["messages"] = json!(messages);
    chat["stream"] = json!(request.stream);
    if let Some(format) = response_format(request.text.as_ref())? {
        chat["response_format"] = format;
    }
    if let Some(max) = request
        .max_output_tokens
        .as_ref()
        .filter(|max| !max.is_null())
    {
        if max.as_u64().is_none_or(|max| max == 0) {
            return Err(ApiError::BadRequest(
                "`max_output_tokens` must be a positive integer".to_owned(),
            ));
        }
        chat["max_completion_tokens"] = max.clone();
    }
    if let Some(model) = &request.model {
        chat["model"] = json!(model);
    }
    if let Some(user) = &request.user {
        chat["user"] = json!(user);
    }
    Ok(chat)
}

/// The Responses form of function tools and of a named `tool_choice`
/// (`{"type": "function", "name", …}`) in the chat completion form; other
/// tools are left for the chat completion's check to refuse.
fn chat_tools(chat: &mut Value) {
    if let Some(tools) = chat.get_mut("tools").and_then(Value::as_array_mut) {
        for tool in tools {
            if tool.get("type").and_then(Value::as_str) == Some("function")
                && tool.get("function").is_none()
            {
                let mut function = tool.clone();
                if let Some(fields) = function.as_object_mut() {
                    fields.remove("type");
                }
                *tool = json!({"type": "function", "function": function});
            }
        }
    }
    if let Some(choice) = chat.get_mut("tool_choice")
        && choice.get("type").and_then(Value::as_str) == Some("function")
        && choice.get("function").is_none()
    {
        let name = choice.get("name").cloned().unwrap_or(Value::Null);
        *choice = json!({"type": "function", "function": {"name": name}});
    }
}

/// Adds one `input` item to the chat messages: a message, a
/// `function_call` (a tool call of the assistant message before it, or of
/// a new one) or a `function_call_output` (a tool result).
fn push_item(messages: &mut Vec<Value>, index: usize, item: &Value) -> Result<(), ApiError> {
    let bad = |what: &str| ApiError::BadRequest(format!("input[{index}]: {what}"));
    let text = |field: &str| {
        item.get(field)
            .and_then(Value::as_str)
            .ok_or_else(|| bad(&format!("a `{}` item needs `{field}`", kind_of(item))))
    };
    match kind_of(item) {
        "message" => messages.push(chat_message(index, item)?),
        "function_call" => {
            let call = json!({"id": text("call_id")?, "type": "function",
                              "function": {"name": text("name")?,
                                           "arguments": item.get("arguments").and_then(Value::as_str).unwrap_or("{}")}});
            match messages.last_mut() {
                Some(last) if last["role"] == "assistant" => {
                    if !last["tool_calls"].is_array() {
                        last["tool_calls"] = json!([]);
                    }
                    if let Some(calls) = last["tool_calls"].as_array_mut() {
                        calls.push(call);
                    }
                }
                _ => messages
                    .push(json!({"role": "assistant", "content": null, "tool_calls": [call]})),
            }
        }
        "function_call_output" => {
            let output = match item.get("output") {
                Some(Value::String(output)) => output.clone(),
                Some(Value::Array(parts)) => parts
                    .iter()
                    .filter_map(|part| part.get("text").and_then(Value::as_str))
                    .collect::<Vec<_>>()
                    .join("\n"),
                _ => return Err(bad("a `function_call_output` item needs `output`")),
            };
            messages
                .push(json!({"role": "tool", "tool_call_id": text("call_id")?, "content": output}));
        }
        kind => {
            return Err(bad(&format!(
                "items of type `{kind}` are not supported (only `message`, `function_call` and \
                 `function_call_output`)"
            )));
        }
    }
    Ok(())
}

/// An input item's type: `message` when it has none.
fn kind_of(item: &Value) -> &str {
    item.get("type")
        .and_then(Value::as_str)
        .unwrap_or("message")
}

/// One `input` message item as a chat message.
fn chat_message(index: usize, item: &Value) -> Result<Value, ApiError> {
    let bad = |what: &str| ApiError::BadRequest(format!("input[{index}]: {what}"));
    let role = item
        .get("role")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("a message needs a role"))?;
    let content = match item.get("content") {
        Some(Value::String(text)) => json!(text),
        Some(Value::Array(parts)) => {
            let parts: Result<Vec<Value>, ApiError> = parts
                .iter()
                .enumerate()
                .map(|(position, part)| chat_part(index, position, part))
                .collect();
            json!(parts?)
        }
        _ => return Err(bad("a message needs content")),
    };
    Ok(json!({"role": role, "content": content}))
}

/// One content part as a chat content part.
fn chat_part(index: usize, position: usize, part: &Value) -> Result<Value, ApiError> {
    let kind = part.get("type").and_then(Value::as_str).unwrap_or_default();
    match kind {
        "input_text" | "output_text" | "text" => Ok(json!({
            "type": "text",
            "text": part.get("text").and_then(Value::as_str).unwrap_or_default(),
        })),
        "input_image" => Ok(json!({
            "type": "image_url",
            "image_url": {"url": part.get("image_url").cloned().unwrap_or(Value::Null)},
        })),
        other => Err(ApiError::BadRequest(format!(
            "input[{index}].content[{position}]: a part of type `{other}` cannot be taken"
        ))),
    }
}

/// The turn and session a response id names, if the caller may reach it.
async fn turn_of(
    state: &ApiState,
    caller: &Caller,
    id: &str,
) -> Result<(InboundId, crate::domain::SessionId), ApiError> {
    let missing = || ApiError::NotFound(format!("no response with id {id}"));
    let turn = id
        .strip_prefix("resp_")
        .and_then(|n| n.parse::<i64>().ok())
        .map(InboundId::new)
        .ok_or_else(missing)?;
    let found = state
        .store
        .api()
        .response_session(turn)
        .await
        .map_err(|err| ApiError::Internal(err.to_string()))?
        .ok_or_else(missing)?;
    let session = reachable(state, caller.scope(), found.as_str())
        .await
        .map_err(|_| missing())?;
    Ok((turn, session))
}

/// What every rendering of one response repeats.
struct Shape {
    id: String,
    message_id: String,
    created_at: u64,
    model: String,
    previous: Option<String>,
    /// Whether the request defined tools of its own.
    tools: bool,
}

impl Shape {
    async fn new(state: &ApiState, turn: &Turn, request: &ResponsesRequest) -> Self {
        let model = match state.store.sessions().get(&turn.session_id).await {
            Ok(Some(session)) => session.model,
            _ => request.model.clone().unwrap_or_default(),
        };
        Self {
            id: format!("resp_{}", turn.inbound_id),
            message_id: format!("msg_{}", turn.inbound_id),
            created_at: completions::unix_now(),
            model,
            previous: request.previous_response_id.clone(),
            tools: request.options.has_tools(),
        }
    }

    /// The output message holding `text`.
    fn message(&self, text: &str, status: &str) -> Value {
        json!({
            "type": "message", "id": self.message_id, "status": status, "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        })
    }

    /// The response object.
    fn response(&self, status: &str, output: Value, usage: Value, error: Value) -> Value {
        json!({
            "id": self.id, "object": "response", "created_at": self.created_at,
            "status": status, "model": self.model, "output": output, "usage": usage,
            "error": error, "incomplete_details": null, "instructions": null,
            "previous_response_id": self.previous, "store": true,
            "parallel_tool_calls": false, "tool_choice": "auto", "tools": [],
            "text": {"format": {"type": "text"}},
        })
    }
}

/// The response, once its turn has ended, as one object.
async fn answered(state: &ApiState, shape: &Shape, turn: Turn) -> Result<Response, ApiError> {
    let inbound_id = turn.inbound_id;
    let session_id = turn.session_id.clone();
    let reply = completions::wait_for_reply(state, turn, state.reply_timeout)
        .await
        .map_err(|no_reply| no_reply.into_error(&session_id, inbound_id))?;
    let text = reply::visible(state, &reply).await?;
    let usage = usage(state, inbound_id).await?;
    retries::answered(state, inbound_id).await;
    let handed = completions::handed_calls(state, shape.tools, &session_id).await?;
    let mut output = vec![shape.message(&text, "completed")];
    output.extend(handed.iter().map(|call| function_call(call, "completed")));
    let output = json!(output);
    let mut response = shape.response("completed", output, usage, Value::Null);
    if reply.status == InboundStatus::Waiting {
        with_approval(
            &mut response,
            approvals::waiting_for(state, inbound_id).await?,
        );
    }
    Ok(Json(response).into_response())
}

/// A call of the client's own tool as a `function_call` output item.
fn function_call(call: &ToolCall, status: &str) -> Value {
    json!({"type": "function_call", "id": format!("fc_{}", call.id), "call_id": call.id,
           "name": call.name, "arguments": call.arguments, "status": status})
}

/// Adds the `approval` a parked turn waits for to its response object.
fn with_approval(response: &mut Value, approval: Option<Value>) {
    if let Some(approval) = approval {
        response["approval"] = approval;
    }
}

/// A stored response, for `GET` and `cancel`.
async fn stored(
    state: &ApiState,
    turn: InboundId,
    session: &crate::domain::SessionId,
) -> Result<Value, ApiError> {
    let internal = |err: crate::store::StoreError| ApiError::Internal(err.to_string());
    let record = state
        .store
        .api()
        .turn(session, turn)
        .await
        .map_err(internal)?
        .ok_or_else(|| ApiError::NotFound(format!("no response with id resp_{turn}")))?;
    let model = state
        .store
        .sessions()
        .get(session)
        .await
        .map_err(internal)?
        .map(|session| session.model)
        .unwrap_or_default();
    let shape = Shape {
        id: format!("resp_{turn}"),
        message_id: format!("msg_{turn}"),
        created_at: u64::try_from(record.received_at.div_euclid(1000)).unwrap_or_default(),
        model,
        previous: None,
        tools: false,
    };
    let (status, output) = match record.status {
        InboundStatus::Pending | InboundStatus::Running => ("in_progress", json!([])),
        InboundStatus::Failed if record.outcome.is_some_and(|o| o.is_stopped()) => {
            ("cancelled", json!([]))
        }
        InboundStatus::Failed => ("failed", json!([])),
        _ => {
            let text = state
                .store
                .api()
                .visible_reply(session, turn)
                .await
                .map_err(internal)?
                .or(record.reply)
                .unwrap_or_default();
            ("completed", json!([shape.message(&text, "completed")]))
        }
    };
    let usage = usage(state, turn).await?;
    let mut response = shape.response(status, output, usage, Value::Null);
    if record.status == InboundStatus::Waiting {
        with_approval(&mut response, approvals::waiting_for(state, turn).await?);
    }
    Ok(response)
}

/// The turn's token counts, as a Responses `usage` object.
async fn usage(state: &ApiState, turn: InboundId) -> Result<Value, ApiError> {
    let usage = state
        .store
        .usage()
        .task_usage(turn)
        .await
        .map_err(|err| ApiError::Internal(err.to_string()))?
        .usage;
    Ok(json!({
        "input_tokens": usage.input_tokens,
        "input_tokens_details": {"cached_tokens": usage.cache_read_tokens},
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.input_tokens + usage.output_tokens,
    }))
}

/// The response as typed server-sent events, sent as its turn runs.
fn streamed(state: &Arc<ApiState>, shape: Shape, turn: Turn) -> Response {
    follow::sse(state, move |state, out| async move {
        let inbound_id = turn.inbound_id;
        let session_id = turn.session_id.clone();
        let mut events = Events {
            out: &out,
            shape: &shape,
            sequence: 0,
        };
        events.start();
        let mut text = String::new();
        let Some(rest) = follow::follow(&state, turn, &out, |seen| {
            if let Seen::Text(piece) = seen {
                text.push_str(&piece);
                events.delta(&piece);
            }
        })
        .await
        else {
            return;
        };
        match rest {
            Ok(ended) => {
                if let Some(rest) = ended.rest {
                    text.push_str(&rest);
                    events.delta(&rest);
                }
                let usage = usage(&state, inbound_id).await.unwrap_or(Value::Null);
                let approval = if ended.parked {
                    approvals::waiting_for(&state, inbound_id)
                        .await
                        .unwrap_or_else(|err| {
                            tracing::warn!(error = %err, "no approval for a parked streamed response");
                            None
                        })
                } else {
                    None
                };
                retries::answered(&state, inbound_id).await;
                let handed = completions::handed_calls(&state, shape.tools, &session_id)
                    .await
                    .unwrap_or_else(|err| {
                        tracing::warn!(error = %err, "the calls handed to the client not read");
                        Vec::new()
                    });
                events.finish(&text, usage, approval, &handed);
            }
            Err(err) => events.failed(&err),
        }
    })
}

/// The typed events of one streamed response, numbered.
struct Events<'a> {
    out: &'a Outlet,
    shape: &'a Shape,
    sequence: u64,
}

impl Events<'_> {
    fn send(&mut self, kind: &str, mut data: Value) {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        self.out
            .send(Event::default().event(kind).data(data.to_string()));
    }

    /// `response.created`, the output message and its text part begun.
    fn start(&mut self) {
        let shape = self.shape;
        let response = shape.response("in_progress", json!([]), Value::Null, Value::Null);
        self.send("response.created", json!({"response": response}));
        let mut item = shape.message("", "in_progress");
        item["content"] = json!([]);
        self.send(
            "response.output_item.added",
            json!({"output_index": 0, "item": item}),
        );
        self.send(
            "response.content_part.added",
            json!({"item_id": shape.message_id, "output_index": 0, "content_index": 0,
                   "part": {"type": "output_text", "text": "", "annotations": []}}),
        );
    }

    fn delta(&mut self, piece: &str) {
        let item_id = self.shape.message_id.clone();
        self.send(
            "response.output_text.delta",
            json!({"item_id": item_id, "output_index": 0, "content_index": 0, "delta": piece}),
        );
    }

    /// The text, part, item and response done (a parked turn's response
    /// with the `approval` it waits for).
    fn finish(&mut self, text: &str, usage: Value, approval: Option<Value>, handed: &[ToolCall]) {
        let shape = self.shape;
        let id = &shape.message_id;
        self.send(
            "response.output_text.done",
            json!({"item_id": id, "output_index": 0, "content_index": 0, "text": text}),
        );
        self.send(
            "response.content_part.done",
            json!({"item_id": id, "output_index": 0, "content_index": 0,
                   "part": {"type": "output_text", "text": text, "annotations": []}}),
        );
        let item = shape.message(text, "completed");
        self.send(
            "response.output_item.done",
            json!({"output_index": 0, "item": item.clone()}),
        );
        let mut output = vec![item];
        for (index, call) in handed.iter().enumerate() {
            output.push(self.function_call(index + 1, call));
        }
        let mut response = shape.response("completed", json!(output), usage, Value::Null);
        with_approval(&mut response, approval);
        self.send("response.completed", json!({"response": response}));
    }

    /// A call handed to the client, as the output item at `index`: added,
    /// its arguments (in one delta), done. Returns the item.
    fn function_call(&mut self, index: usize, call: &ToolCall) -> Value {
        let mut added = function_call(call, "in_progress");
        added["arguments"] = json!("");
        self.send(
            "response.output_item.added",
            json!({"output_index": index, "item": added}),
        );
        let item_id = format!("fc_{}", call.id);
        self.send(
            "response.function_call_arguments.delta",
            json!({"item_id": item_id, "output_index": index, "delta": call.arguments}),
        );
        self.send(
            "response.function_call_arguments.done",
            json!({"item_id": item_id, "output_index": index, "arguments": call.arguments}),
        );
        let item = function_call(call, "completed");
        self.send(
            "response.output_item.done",
            json!({"output_index": index, "item": item.clone()}),
        );
        item
    }

    /// `response.failed`, then the `error` event clients raise on.
    fn failed(&mut self, err: &ApiError) {
        let body = err.body();
        let error = json!({"code": body["code"], "message": body["message"]});
        let response = self
            .shape
            .response("failed", json!([]), Value::Null, error.clone());
        self.send("response.failed", json!({"response": response}));
        self.send(
            "error",
            json!({"code": body["code"], "message": body["message"], "param": null,
                   "error": body}),
        );
    }
}
