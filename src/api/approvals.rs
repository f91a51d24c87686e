//! `GET /v1/approvals` (the caller's pending approvals and questions, as
//! `{"object": "list", "data": [...]}`) and `POST /v1/approvals/{id}`
//! (`{"decision": "allow" | "allow_session" | "deny"}`, or `{"answer":
//! "..."}` for a question). The requester of an API turn is the caller
//! (key and `user`) that sent its message: another caller's approval is a
//! 404, one already decided or expired a 409. A decided turn resumes at
//! once; its reply is read as any other (`GET /v1/sessions/{id}/messages`).
//! A turn that parks answers its request at once, with the approval it
//! waits for ([`approval_json`]).

use std::sync::Arc;

use axum::Extension;
use axum::Json;
use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{Path, State};
use serde::Deserialize;
use serde_json::{Value, json};

use super::caller::Caller;
use super::{ApiError, ApiState};
use crate::domain::{ApprovalStatus, InboundId, LocalPlatform};
use crate::session::approvals::{Decider, Refused, Verdict};
use crate::session::notices::Answer;
use crate::store::{ApprovalRow, StoreError};

fn internal(err: StoreError) -> ApiError {
    ApiError::Internal(err.to_string())
}

/// An approval as the API shows it.
#[must_use]
pub fn approval_json(approval: &ApprovalRow) -> Value {
    let arguments: Value = serde_json::from_str(&approval.arguments)
        .unwrap_or(Value::String(approval.arguments.clone()));
    json!({
        "id": approval.id.to_string(),
        "object": "approval",
        "kind": approval.kind.as_str(),
        "session": approval.session_id.as_str(),
        "tool": approval.tool,
        "arguments": arguments,
        "choices": approval.choices(),
        "status": approval.status.as_str(),
        "created_at": approval.created_at / 1000,
        "expires_at": approval.expires_at / 1000,
        "decided_by": approval.decided_by,
        "answer": approval.answer,
    })
}

/// The first pending approval a parked turn waits for, as JSON.
///
/// # Errors
/// A database failure.
pub async fn waiting_for(state: &ApiState, turn: InboundId) -> Result<Option<Value>, ApiError> {
    let approvals = state
        .store
        .approvals()
        .of_turn(turn)
        .await
        .map_err(internal)?;
    Ok(approvals
        .iter()
        .find(|approval| approval.status == ApprovalStatus::Pending)
        .map(approval_json))
}

/// Whether `approval` is the caller's: asked in one of its API turns.
fn owned(caller: &Caller, approval: &ApprovalRow) -> bool {
    let scope = caller.scope();
    approval.platform.as_str() == LocalPlatform::Api.name()
        && approval.account.as_str() == scope.account
        && scope
            .users
            .is_none_or(|users| users.iter().any(|user| user == approval.sender_id.as_str()))
}

/// `GET /v1/approvals`.
pub async fn list(
    State(state): State<Arc<ApiState>>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<Value>, ApiError> {
    let platform = LocalPlatform::Api.name();
    let senders: Vec<String> = match caller.scope().users {
        Some(users) => users.to_vec(),
        None => vec![crate::api::caller::ANONYMOUS_SENDER.to_owned()],
    };
    let mut data = Vec::new();
    for sender in senders {
        for approval in state
            .store
            .approvals()
            .pending_of(platform, caller.account(), &sender)
            .await
            .map_err(internal)?
        {
            data.push(approval_json(&approval));
        }
    }
    Ok(Json(json!({"object": "list", "data": data})))
}

/// The body of `POST /v1/approvals/{id}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecisionRequest {
    /// `allow`, `allow_session` or `deny`.
    #[serde(default)]
    decision: Option<String>,
    /// A question's answer.
    #[serde(default)]
    answer: Option<String>,
}

/// `POST /v1/approvals/{id}`.
pub async fn decide(
    State(state): State<Arc<ApiState>>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<String>, PathRejection>,
    body: Result<Json<DecisionRequest>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Path(raw) = path.map_err(|err| ApiError::BadRequest(err.body_text()))?;
    let Json(body) = body.map_err(|err| ApiError::BadRequest(err.body_text()))?;
    let not_found = || ApiError::NotFound(format!("no approval with id {raw}"));
    let id: i64 = raw.parse().map_err(|_| not_found())?;
    let verdict = match (body.decision.as_deref(), body.answer) {
        (Some("allow"), None) => Verdict::Answer(Answer::Allow),
        (Some("allow_session"), None) => Verdict::Answer(Answer::AllowSession),
        (Some("deny"), None) => Verdict::Answer(Answer::Deny),
        (None, Some(answer)) if !answer.trim().is_empty() => Verdict::Text(answer),
        _ => {
            return Err(ApiError::BadRequest(
                "give `decision` (\"allow\", \"allow_session\" or \"deny\"), or a question's \
                 `answer`"
                    .to_owned(),
            ));
        }
    };
    let approval = state
        .store
        .approvals()
        .get(id)
        .await
        .map_err(internal)?
        .filter(|approval| owned(&caller, approval))
        .ok_or_else(not_found)?;
    let who = Decider {
        principal: approval.principal_id,
        admin: false,
        label: format!("api:{}/{}", caller.account(), approval.sender_id),
        chat: None,
        pressed: None,
    };
    match state
        .service
        .approvals()
        .decide(id, None, &verdict, &who, "api")
        .await
        .map_err(internal)?
    {
        Ok(row) => Ok(Json(approval_json(&row))),
        Err(Refused::Settled(row)) => Err(ApiError::Conflict(format!(
            "approval {id} is already {}",
            row.status.as_str()
        ))),
        Err(Refused::NotYours(_)) => Err(not_found()),
        Err(Refused::Unknown) => Err(ApiError::BadRequest(format!(
            "that decision does not fit approval {id} (a question takes `answer`, a tool call \
             `decision`)"
        ))),
    }
}
