//! Reading conversations back: `GET /v1/sessions` (the caller's sessions),
//! `GET /v1/sessions/{id}/messages` (a session's stored conversation, each
//! entry with its turn's status) and `GET /v1/sessions/{id}/turns/{turn}`
//! (one turn and its reply, `?wait=SECONDS` to wait for it). A reply that a
//! completion request stopped waiting for (a 504, a restart, a dropped
//! connection) is read here.
//!
//! Everything is scoped to the caller ([`Caller`]): another key's session,
//! or one without an owner (a group chat), is answered like a missing one.
//! Responses about one session, errors included, carry `X-Session-Id`.

use crate::domain::{InboundId, InboundStatus, Outcome, Role, SessionId};
use std::sync::Arc;
use std::time::Duration;

use axum::Extension;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::HeaderValue;
use axum::response::{IntoResponse, Json, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::caller::Caller;
use super::{ApiError, ApiState, SESSION_HEADER};
use crate::store::{ApiScope, ApiSession, SessionCursor, TurnMessage, TurnRecord};

/// Page sizes: the default and the largest accepted.
const DEFAULT_SESSIONS: i64 = 20;
const DEFAULT_MESSAGES: i64 = 50;
const MAX_PAGE: i64 = 200;

/// Characters of the first user message shown as a session's preview.
const PREVIEW_CHARS: usize = 200;

#[derive(Debug, Deserialize)]
pub struct SessionsQuery {
    #[serde(default)]
    limit: Option<i64>,
    /// `next_cursor` of the previous page.
    #[serde(default)]
    cursor: Option<String>,
    /// Only this user's sessions (one the key may act for).
    #[serde(default)]
    user: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct MessagesQuery {
    #[serde(default)]
    limit: Option<i64>,
    /// `last_id` of the previous page.
    #[serde(default)]
    after: Option<i64>,
}

#[derive(Debug, Deserialize)]
pub struct TurnQuery {
    /// Seconds to wait for an unfinished turn to end.
    #[serde(default)]
    wait: Option<u64>,
}

/// `GET /v1/sessions`: the caller's sessions, most recently active first.
pub async fn list(
    State(state): State<Arc<ApiState>>,
    Extension(caller): Extension<Caller>,
    query: Result<Query<SessionsQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(query) = query.map_err(|err| ApiError::BadRequest(err.body_text()))?;
    let limit = page_size(query.limit, DEFAULT_SESSIONS)?;
    let cursor = query.cursor.as_deref().map(parse_cursor).transpose()?;
    let only: Vec<String> = query.user.into_iter().collect();
    let scope = if only.is_empty() {
        caller.scope()
    } else {
        caller.scope_of_user(&only)?
    };
    let mut sessions = state
        .store
        .api()
        .sessions(scope, cursor.as_ref(), limit + 1)
        .await
        .map_err(internal)?;
    let has_more = sessions.len() > usize::try_from(limit).unwrap_or(usize::MAX);
    sessions.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    let next_cursor = has_more
        .then(|| {
            sessions
                .last()
                .map(|last| format!("{}_{}", last.updated_at, last.id))
        })
        .flatten();
    let data: Vec<Value> = sessions.iter().map(session_json).collect();
    Ok(Json(json!({
        "object": "list",
        "data": data,
        "has_more": has_more,
        "next_cursor": next_cursor,
    })))
}

/// `GET /v1/sessions/{id}/messages`: the stored conversation, oldest first,
/// `limit` entries after message `after`. The last page also lists turns
/// whose message is not stored yet (waiting, or ended before their first
/// model call), with `id: null`.
pub async fn messages(
    State(state): State<Arc<ApiState>>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<String>, PathRejection>,
    query: Result<Query<MessagesQuery>, QueryRejection>,
) -> Response {
    let Ok(Path(id)) = path else {
        return ApiError::NotFound("no such session".to_owned()).into_response();
    };
    let result = async {
        let session = reachable(&state, caller.scope(), &id).await?;
        let Query(query) = query.map_err(|err| ApiError::BadRequest(err.body_text()))?;
        let limit = page_size(query.limit, DEFAULT_MESSAGES)?;
        let mut entries = state
            .store
            .api()
            .messages(&session, query.after.unwrap_or(0), limit + 1)
            .await
            .map_err(internal)?;
        let has_more = entries.len() > usize::try_from(limit).unwrap_or(usize::MAX);
        entries.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
        let mut data: Vec<Value> = entries.iter().map(message_json).collect();
        if !has_more {
            let unwritten = state
                .store
                .api()
                .unwritten_turns(&session)
                .await
                .map_err(internal)?;
            data.extend(unwritten.iter().map(unwritten_json));
        }
        Ok::<_, ApiError>(Json(json!({
            "object": "list",
            "data": data,
            "first_id": entries.first().map(|entry| entry.message.id),
            "last_id": entries.last().map(|entry| entry.message.id),
            "has_more": has_more,
        })))
    }
    .await;
    with_session_header(result, &id)
}

/// `GET /v1/sessions/{id}/turns/{turn}`: one turn (the message a completion
/// request sent; its number is in the completion's id, `chatcmpl-TURN`),
/// its status and its reply once stored. With `?wait=SECONDS` an unfinished
/// turn is waited for, up to the reply timeout; still unfinished then, it
/// is answered as it stands (ask again).
pub async fn turn(
    State(state): State<Arc<ApiState>>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<(String, String)>, PathRejection>,
    query: Result<Query<TurnQuery>, QueryRejection>,
) -> Response {
    let Ok(Path((id, turn))) = path else {
        return ApiError::NotFound("no such session".to_owned()).into_response();
    };
    let result = async {
        let session = reachable(&state, caller.scope(), &id).await?;
        let Query(query) = query.map_err(|err| ApiError::BadRequest(err.body_text()))?;
        let missing = || ApiError::NotFound(format!("no turn {turn} in session {id}"));
        let turn = InboundId::new(turn.parse().map_err(|_| missing())?);
        let wait = Duration::from_secs(query.wait.unwrap_or(0)).min(state.reply_timeout);
        let mut record = read_turn(&state, &session, turn)
            .await?
            .ok_or_else(missing)?;
        if !wait.is_zero() && !finished(record.status) {
            let runner = state.service.runner();
            let reply = runner.wait_for(turn);
            let waited = async {
                // Read again now that the waiter is registered: a reply
                // stored in between is not missed.
                let record = read_turn(&state, &session, turn)
                    .await?
                    .ok_or_else(missing)?;
                if finished(record.status) {
                    return Ok(record);
                }
                tokio::select! {
                    _ = tokio::time::timeout(wait, reply) => {}
                    () = state.drain_deadline.cancelled() => {}
                }
                read_turn(&state, &session, turn).await?.ok_or_else(missing)
            }
            .await;
            // The receiver is gone with the block: forget it, whatever
            // happened.
            runner.forget(turn);
            record = waited?;
        }
        Ok::<_, ApiError>(Json(turn_json(&record)))
    }
    .await;
    with_session_header(result, &id)
}

/// The session of `id` if it is the caller's; otherwise (another key's,
/// ownerless, missing, or no id at all) not found.
pub(super) async fn reachable(
    state: &ApiState,
    scope: ApiScope<'_>,
    id: &str,
) -> Result<SessionId, ApiError> {
    let unknown = || ApiError::NotFound(format!("no session with id {id}"));
    let session = SessionId::parse(id).map_err(|_| unknown())?;
    if state
        .store
        .api()
        .session_reachable(scope, &session)
        .await
        .map_err(internal)?
    {
        Ok(session)
    } else {
        Err(unknown())
    }
}

async fn read_turn(
    state: &ApiState,
    session: &SessionId,
    turn: InboundId,
) -> Result<Option<TurnRecord>, ApiError> {
    let Some(mut record) = state
        .store
        .api()
        .turn(session, turn)
        .await
        .map_err(internal)?
    else {
        return Ok(None);
    };
    // An answered turn's reply as its client was shown it.
    if record.status == InboundStatus::Done
        && let Some(visible) = state
            .store
            .api()
            .visible_reply(session, turn)
            .await
            .map_err(internal)?
    {
        record.reply = Some(visible);
    }
    Ok(Some(record))
}

/// The response with `X-Session-Id: id` (when it can be a header value).
pub(super) fn with_session_header(
    result: Result<impl IntoResponse, ApiError>,
    id: &str,
) -> Response {
    let mut response = match result {
        Ok(answer) => answer.into_response(),
        Err(err) => err.into_response(),
    };
    if let Ok(value) = HeaderValue::from_str(id) {
        response.headers_mut().insert(SESSION_HEADER, value);
    }
    response
}

fn page_size(requested: Option<i64>, default: i64) -> Result<i64, ApiError> {
    match requested {
        None => Ok(default),
        Some(limit) if (1..=MAX_PAGE).contains(&limit) => Ok(limit),
        Some(_) => Err(ApiError::BadRequest(format!(
            "`limit` must be 1 to {MAX_PAGE}"
        ))),
    }
}

/// A `next_cursor` as handed out: `UPDATED_AT_ID`.
fn parse_cursor(cursor: &str) -> Result<SessionCursor, ApiError> {
    let invalid = || ApiError::BadRequest("invalid `cursor`".to_owned());
    let (updated_at, id) = cursor.split_once('_').ok_or_else(invalid)?;
    let updated_at = updated_at.parse().map_err(|_| invalid())?;
    if id.is_empty() {
        return Err(invalid());
    }
    Ok(SessionCursor {
        updated_at,
        id: id.to_owned(),
    })
}

/// How a turn stands, as the API names it.
fn turn_status(status: InboundStatus, outcome: Option<Outcome>) -> &'static str {
    match status {
        InboundStatus::Pending => "pending",
        InboundStatus::Running => "running",
        InboundStatus::Waiting => "waiting",
        InboundStatus::Done | InboundStatus::Command => "done",
        InboundStatus::Failed if outcome.is_some_and(Outcome::is_stopped) => "stopped",
        InboundStatus::Failed => "failed",
    }
}

fn finished(status: InboundStatus) -> bool {
    !matches!(
        status,
        InboundStatus::Pending | InboundStatus::Running | InboundStatus::Waiting
    )
}

fn session_json(session: &ApiSession) -> Value {
    let preview = session
        .first_text
        .as_deref()
        .map(|text| text.chars().take(PREVIEW_CHARS).collect::<String>());
    json!({
        "id": session.id.as_str(),
        "object": "session",
        "title": session.title,
        "preview": preview,
        "platform": session.platform.as_str(),
        "model": session.model,
        "created_at": seconds(session.created_at),
        "last_activity_at": seconds(session.updated_at),
    })
}

fn message_json(entry: &TurnMessage) -> Value {
    let stored = &entry.message;
    let message = &stored.message;
    // An entry without a turn record was written by a turn that finished
    // long ago (its record pruned), or by no turn at all.
    let status = entry
        .turn
        .as_ref()
        .map_or("done", |(status, outcome)| turn_status(*status, *outcome));
    let mut body = json!({
        "id": stored.id,
        "object": "session.message",
        "role": message.role.as_str(),
        "content": message.content,
        "turn": message.task_id,
        "status": status,
        "created_at": seconds(stored.created_at),
    });
    if !message.tool_calls.is_empty() {
        body["tool_calls"] = super::completions::tool_calls_json(&message.tool_calls);
    }
    if message.role == Role::Tool {
        body["tool_call_id"] = json!(message.tool_call_id);
    }
    body
}

fn unwritten_json(turn: &TurnRecord) -> Value {
    json!({
        "id": null,
        "object": "session.message",
        "role": "user",
        "content": turn.text,
        "turn": turn.id,
        "status": turn_status(turn.status, turn.outcome),
        "created_at": seconds(turn.received_at),
    })
}

fn turn_json(turn: &TurnRecord) -> Value {
    let status = turn_status(turn.status, turn.outcome);
    let reply = finished(turn.status).then(|| {
        turn.reply
            .as_ref()
            .map(|text| json!({"role": "assistant", "content": text}))
    });
    json!({
        "id": turn.id,
        "object": "session.turn",
        "session_id": turn.session_id.as_str(),
        "status": status,
        "outcome": turn.outcome,
        "created_at": seconds(turn.received_at),
        "input": {"role": "user", "content": turn.text},
        "reply": reply.flatten(),
    })
}

fn seconds(ms: i64) -> i64 {
    ms.div_euclid(1000)
}

fn internal(err: crate::store::StoreError) -> ApiError {
    ApiError::Internal(err.to_string())
}
