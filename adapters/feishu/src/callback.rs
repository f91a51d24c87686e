//! A card callback (`card.action.trigger`, a press of a button on one of
//! the bot's cards), once the webhook has verified it like any event.
//!
//! The press ([`crate::press`]) is handed to [`InboundSink::act`] in an
//! owned task ([`EventTasks`]), which the webhook waits for up to the ack
//! timeout (Feishu wants its answer within 3 seconds). The answer is the
//! callback's response body: the core's `notice` as a `toast` (an `error`
//! toast saying to try again when the core could not take the press), and
//! its `update` as the new card (`card: {"type": "raw", "data": …}`: the
//! text, no buttons), which Feishu shows in place of the pressed one to
//! everyone (the cards are shared, `update_multi`). A press that is not the
//! core's, or that the core knows nothing of, is answered `{}`: acknowledged,
//! nothing changes. When the core is slower than the ack timeout, the
//! webhook answers `{}` and the task, once the core has answered, updates the
//! card through the Open API (`PATCH` of the message); its notice is then
//! not shown.

use std::sync::Arc;

use serde_json::{Value, json};
use switchboard_contract::{ActionReply, SubmitError};
use tokio::sync::oneshot;

use crate::press::{self, CardAction};
use crate::send::{card, card_json};
use crate::webhook::WebhookState;

/// What the person sees when the core could not take a press.
const TRY_AGAIN: &str = "That did not go through. Please try again in a moment.";

/// The response body to the card callback `event_id` with `raw` as its
/// event; `None` when no task could be started (too many in flight).
pub(crate) async fn answer(state: &WebhookState, event_id: &str, raw: Value) -> Option<Value> {
    let event: CardAction = serde_json::from_value(raw).unwrap_or_default();
    let action = match press::action(event_id, &event, &state.account) {
        Ok(action) => action,
        Err(not_ours) => {
            tracing::debug!(
                ?not_ours,
                "a Feishu card button that is not the core's was pressed"
            );
            return Some(json!({}));
        }
    };
    let permit = state.tasks.reserve()?;
    let (done, answered) = oneshot::channel();
    let sink = Arc::clone(&state.sink);
    let api = Arc::clone(&state.api);
    state.tasks.spawn(permit, async move {
        let message = action.message_id.clone();
        let reply = settled(sink.act(action).await);
        // The webhook stopped waiting: the card is updated here.
        if let Err(reply) = done.send(reply)
            && let (Some(update), Some(message)) = (&reply.update, &message)
            && let Err(err) = api.update_card(message, &card(update, &[])).await
        {
            tracing::warn!(error = %err, "could not update the card of a Feishu button press");
        }
    });
    match tokio::time::timeout(state.ack_timeout, answered).await {
        Ok(Ok(reply)) => Some(body(&reply)),
        Ok(Err(_)) => Some(body(&ActionReply::notice(TRY_AGAIN))),
        Err(_) => {
            tracing::warn!("the core is slow to take a Feishu button press; acknowledged first");
            Some(json!({}))
        }
    }
}

/// The core's answer, or "try again" when it could not take the press.
fn settled(reply: Result<ActionReply, SubmitError>) -> ActionReply {
    reply.unwrap_or_else(|err| {
        tracing::warn!(error = %err, "the core could not take a Feishu button press");
        ActionReply::notice(TRY_AGAIN)
    })
}

/// The callback response showing `reply`.
fn body(reply: &ActionReply) -> Value {
    let mut body = json!({});
    if let Some(notice) = &reply.notice {
        let kind = if notice == TRY_AGAIN { "error" } else { "info" };
        body["toast"] = json!({ "type": kind, "content": notice });
    }
    if let Some(update) = &reply.update {
        body["card"] = json!({ "type": "raw", "data": card_json(update, &[]) });
    }
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_a_toast_and_a_card_without_buttons() {
        let reply = ActionReply {
            notice: Some("Allowed.".to_owned()),
            update: Some("**Allowed** by Alice".to_owned()),
        };
        let answered = body(&reply);
        assert_eq!(
            answered["toast"],
            json!({"type": "info", "content": "Allowed."})
        );
        assert_eq!(answered["card"]["type"], "raw");
        let elements = answered["card"]["data"]["body"]["elements"]
            .as_array()
            .unwrap();
        assert_eq!(elements.len(), 1);
        assert_eq!(elements[0]["content"], "**Allowed** by Alice");
        assert_eq!(body(&ActionReply::default()), json!({}));
        assert_eq!(
            body(&ActionReply::notice(TRY_AGAIN))["toast"]["type"],
            "error"
        );
    }
}
