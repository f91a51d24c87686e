//! The HTTP API client's instructions in a session (issue 28, point 6): its
//! system or developer message (Chat Completions) or `instructions`
//! (Responses API), stored with the turn's message (`TurnOptions`), are
//! applied when the turn starts, so that the prompt prefix providers cache
//! stays byte for byte what earlier requests sent:
//!
//! - before the session's first model call (a new session, or one seeded
//!   with a client's transcript), they join its system prompt as its last
//!   stable section, after the operator's text and framed as the client's
//!   (`agent::prompt::with_client_instructions`): the cached prefix holds
//!   them from the first request on;
//! - once the prompt has been sent, instructions that differ from those in
//!   effect start that turn's user message as a framed note
//!   (`agent::prompt::client_instructions_note`): earlier requests' bytes
//!   are untouched and the change is in the history from then on;
//! - the same instructions again, or a request with none, change nothing:
//!   those in effect stay;
//! - a compaction (which changes the history's prefix anyway) makes the
//!   prompt's section those in effect (`agent::prompt::refreshed_prompt`),
//!   so a note it summarised away is not lost.
//!
//! What is in effect is recorded on the session row (migration 0063), in
//! the turn's first write, the one its first model call commits. The
//! operator's system prompt comes first and says so; `api.client_instructions
//! = false` keeps clients' instructions out of turns altogether.

use crate::agent::prompt::{client_instructions_note, with_client_instructions};
use crate::store::{Batch, SessionRow, Store, StoreError};

/// Applies the client's `asked` instructions to the turn of `session`:
/// `session.system_prompt` gets them before its first model call (the
/// update goes into `writes`), or the returned note starts the turn's user
/// message.
///
/// # Errors
/// A database failure.
pub(super) async fn apply(
    store: &Store,
    session: &mut SessionRow,
    asked: Option<&str>,
    writes: &mut Batch,
) -> Result<Option<String>, StoreError> {
    let Some(asked) = asked.map(str::trim).filter(|text| !text.is_empty()) else {
        return Ok(None);
    };
    let (current, sent) = store.sessions().client_instructions(&session.id).await?;
    if current.as_deref() == Some(asked) {
        return Ok(None);
    }
    if !sent {
        let prompt = with_client_instructions(&session.system_prompt, asked);
        writes.set_client_instructions(&session.id, asked, Some(&prompt));
        session.system_prompt = prompt;
        tracing::info!(
            session_id = session.id.as_str(),
            "the client's instructions joined the system prompt"
        );
        return Ok(None);
    }
    writes.set_client_instructions(&session.id, asked, None);
    tracing::info!(
        session_id = session.id.as_str(),
        "the client's instructions changed; noted in the history"
    );
    Ok(Some(client_instructions_note(asked)))
}
