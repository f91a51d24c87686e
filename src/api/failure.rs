//! What a turn that ended without an answer is to an API client: an HTTP
//! error in OpenAI's shape, never a successful completion with an apology.
//!
//! The turn's outcome (stored on its message) picks the status and the
//! error `code`; a failed model call is told apart by its kind (the stored
//! reply is the apology of exactly one [`ModelFailure`]). The error's
//! `message` is the human-readable reply a chat platform would have shown.
//! The session stays usable, and nothing of the failure is stored as the
//! assistant's reply in the conversation (the apology lives in the outbox
//! row only, for the turn endpoint and platform chats).
//!
//! | outcome | status | `code` |
//! |---|---|---|
//! | model unreachable, failed (5xx) or misconfigured (bad key, endpoint) | 502 | `model_unreachable`, `model_failed`, `model_misconfigured` |
//! | model rate-limited or overloaded | 503, `Retry-After` | `model_busy` |
//! | model refused the request (another 4xx) | 400 | `model_refused` |
//! | the task's time limit | 504 | `time_limit` |
//! | the principal's daily spend cap | 429 | `spend_limit` |
//! | the task's token limit, a file of the message unreadable | 400 | `token_limit`, `media_refused` |
//! | no progress, the step budget spent without an answer | 502 | `no_progress`, `budget_exhausted` |
//! | `/stop`, or interrupted by a newer message | 409 | `cancelled`, `interrupted` |
//! | the database refused the turn's writes | 500 | `store_error` |

use axum::http::StatusCode;

use crate::domain::{InboundId, InboundStatus, Outcome, SessionId};
use crate::llm::ModelFailure;
use crate::session::runner::TurnReply;
use crate::session::texts;

use super::{ApiError, ApiState};

/// Seconds a client is asked to wait before retrying a busy model.
const BUSY_RETRY_AFTER_SECS: u64 = 5;

/// A turn that ended without an answer, as the client sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnFailure {
    pub status: StatusCode,
    /// The OpenAI error `code`.
    pub code: &'static str,
    /// The turn's reply: what a person on a chat platform reads.
    pub message: String,
    pub session_id: SessionId,
    pub turn: InboundId,
    pub retry_after_secs: Option<u64>,
}

impl TurnFailure {
    /// The failure of `reply`'s turn, which ended with `outcome`.
    #[must_use]
    pub fn of(reply: &TurnReply, outcome: Option<Outcome>) -> Self {
        let (status, code) = match outcome {
            Some(Outcome::ModelError) => model_error(&reply.text),
            Some(Outcome::TimeLimit) => (StatusCode::GATEWAY_TIMEOUT, "time_limit"),
            Some(Outcome::SpendLimit) => (StatusCode::TOO_MANY_REQUESTS, "spend_limit"),
            Some(Outcome::TokenLimit) => (StatusCode::BAD_REQUEST, "token_limit"),
            Some(Outcome::MediaRefused) => (StatusCode::BAD_REQUEST, "media_refused"),
            Some(Outcome::NoProgress) => (StatusCode::BAD_GATEWAY, "no_progress"),
            Some(Outcome::BudgetExhausted) => (StatusCode::BAD_GATEWAY, "budget_exhausted"),
            Some(Outcome::Cancelled) => (StatusCode::CONFLICT, "cancelled"),
            Some(Outcome::Interrupted) => (StatusCode::CONFLICT, "interrupted"),
            _ => (StatusCode::INTERNAL_SERVER_ERROR, "store_error"),
        };
        let retry_after_secs = (code == "model_busy").then_some(BUSY_RETRY_AFTER_SECS);
        Self {
            status,
            code,
            message: reply.text.clone(),
            session_id: reply.session_id.clone(),
            turn: reply.inbound_id,
            retry_after_secs,
        }
    }

    /// The OpenAI error `type` of this failure.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self.status {
            StatusCode::BAD_REQUEST => "invalid_request_error",
            StatusCode::TOO_MANY_REQUESTS => "rate_limit_error",
            StatusCode::CONFLICT => "conflict_error",
            _ => "server_error",
        }
    }
}

/// The failure a finished turn's `reply` is, if the turn failed: its
/// outcome is read from the database.
///
/// # Errors
/// A database failure.
pub async fn of_reply(
    state: &ApiState,
    reply: &TurnReply,
) -> Result<Option<TurnFailure>, ApiError> {
    if reply.status != InboundStatus::Failed {
        return Ok(None);
    }
    let outcome = state
        .store
        .inbound()
        .get(reply.inbound_id)
        .await
        .map_err(|err| ApiError::Internal(err.to_string()))?
        .and_then(|row| row.outcome);
    Ok(Some(TurnFailure::of(reply, outcome)))
}

/// The status and code of a failed model call whose apology is `reply`.
fn model_error(reply: &str) -> (StatusCode, &'static str) {
    const KINDS: [ModelFailure; 6] = [
        ModelFailure::Unreachable,
        ModelFailure::Endpoint,
        ModelFailure::Credentials,
        ModelFailure::Busy,
        ModelFailure::BadRequest,
        ModelFailure::ProviderFailed,
    ];
    let kind = KINDS
        .into_iter()
        .find(|kind| texts::model_failure(*kind) == reply);
    match kind {
        Some(ModelFailure::Unreachable) => (StatusCode::BAD_GATEWAY, "model_unreachable"),
        Some(ModelFailure::Endpoint | ModelFailure::Credentials) => {
            (StatusCode::BAD_GATEWAY, "model_misconfigured")
        }
        Some(ModelFailure::Busy) => (StatusCode::SERVICE_UNAVAILABLE, "model_busy"),
        Some(ModelFailure::BadRequest) => (StatusCode::BAD_REQUEST, "model_refused"),
        Some(ModelFailure::ProviderFailed) | None => (StatusCode::BAD_GATEWAY, "model_failed"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(text: &str) -> TurnReply {
        TurnReply {
            inbound_id: InboundId::new(7),
            session_id: SessionId::parse("s-1").expect("an id"),
            text: text.to_owned(),
            status: InboundStatus::Failed,
        }
    }

    #[test]
    fn each_model_failure_has_its_status() {
        let of = |failure| {
            let failure = TurnFailure::of(
                &reply(texts::model_failure(failure)),
                Some(Outcome::ModelError),
            );
            (
                failure.status.as_u16(),
                failure.code,
                failure.retry_after_secs,
            )
        };
        assert_eq!(
            of(ModelFailure::ProviderFailed),
            (502, "model_failed", None)
        );
        assert_eq!(
            of(ModelFailure::Unreachable),
            (502, "model_unreachable", None)
        );
        assert_eq!(
            of(ModelFailure::Credentials),
            (502, "model_misconfigured", None)
        );
        assert_eq!(of(ModelFailure::Busy), (503, "model_busy", Some(5)));
        assert_eq!(of(ModelFailure::BadRequest), (400, "model_refused", None));
    }

    #[test]
    fn limits_have_theirs_and_the_message_is_the_apology() {
        let failure = TurnFailure::of(&reply("Stopped: over the cap."), Some(Outcome::SpendLimit));
        assert_eq!(failure.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(failure.kind(), "rate_limit_error");
        assert_eq!(failure.message, "Stopped: over the cap.");
        assert_eq!(failure.turn, InboundId::new(7));
        let timed = TurnFailure::of(&reply("Stopped."), Some(Outcome::TimeLimit));
        assert_eq!((timed.status.as_u16(), timed.code), (504, "time_limit"));
    }
}
