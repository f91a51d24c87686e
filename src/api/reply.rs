//! A finished turn as an API client sees it: its visible reply (the text
//! of every model call of the turn, as a streamed answer shows it; see
//! [`super::shown`]), or, for a turn that ended without an answer, the
//! error it is ([`super::failure`]). Plain and streamed answers, the
//! transcript matcher and the turn endpoint all use this one text.

use crate::session::runner::TurnReply;

use super::failure;
use super::{ApiError, ApiState};

/// The visible reply of the finished turn `reply`.
///
/// # Errors
/// [`ApiError::TurnFailed`] for a turn that failed, or a database failure.
pub async fn visible(state: &ApiState, reply: &TurnReply) -> Result<String, ApiError> {
    if let Some(failure) = failure::of_reply(state, reply).await? {
        return Err(ApiError::TurnFailed(Box::new(failure)));
    }
    if reply.status == crate::domain::InboundStatus::Waiting {
        // Parked: what it waits for is the answer for now.
        return Ok(reply.text.clone());
    }
    let visible = state
        .store
        .api()
        .visible_reply(&reply.session_id, reply.inbound_id)
        .await
        .map_err(|err| ApiError::Internal(err.to_string()))?;
    Ok(visible.unwrap_or_else(|| reply.text.clone()))
}
