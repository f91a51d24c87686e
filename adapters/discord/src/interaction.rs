//! [`Interactions`]: what happens to an `INTERACTION_CREATE` from the
//! gateway, a press of one of the core's buttons above all.
//!
//! Discord wants every interaction answered within 3 seconds
//! (`POST /interactions/{id}/{token}/callback`), else the person sees
//! "This interaction failed". A press ([`crate::press`]) goes to
//! [`InboundSink::act`] for at most [`ACT_DEADLINE`]; its answer becomes the
//! callback:
//!
//! - an `update`: type 7 UPDATE_MESSAGE, the message's content replaced and
//!   its components (the buttons) removed; a `notice` besides goes out as an
//!   ephemeral follow-up (`POST /webhooks/{application}/{token}`, flag 64:
//!   only the presser sees it);
//! - a `notice` alone: type 4 CHANNEL_MESSAGE_WITH_SOURCE, ephemeral;
//! - neither (a press the core knows nothing of), or an interaction that is
//!   not the core's: type 6 DEFERRED_UPDATE_MESSAGE, which acknowledges and
//!   changes nothing.
//!
//! When the core takes longer than [`ACT_DEADLINE`], the press is
//! acknowledged with type 6 at once and the answer shown when it comes, with
//! the interaction token (valid 15 minutes): the original message edited
//! (`PATCH /webhooks/{application}/{token}/messages/@original`), the notice
//! as an ephemeral follow-up. A core that could not take the press
//! ([`SubmitError`]) gets the presser an ephemeral "try again". Failed calls
//! are logged (never with the token) and not retried: Discord does not
//! deliver an interaction twice.

use std::sync::Arc;
use std::time::Duration;

use serenity::builder::{
    CreateInteractionResponse, CreateInteractionResponseFollowup, CreateInteractionResponseMessage,
    EditInteractionResponse,
};
use serenity::http::{LightMethod, Request, Route};
use serenity::model::id::ChannelId;
use switchboard_contract::{
    AccountId, ActionReply, InboundSink, LengthUnit, SubmitError, split_message,
};

use crate::press::{self, Interaction};
use crate::rest::{Bucket, Rest, RestError};
use crate::sender::MESSAGE_LIMIT;

/// How long the core may take before the press is acknowledged without its
/// answer: Discord's 3 s, less the time the callback itself takes.
pub const ACT_DEADLINE: Duration = Duration::from_millis(2000);

/// What the person sees when the core could not take a press.
const TRY_AGAIN: &str = "That did not go through. Please try again in a moment.";

/// Answers interactions. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Interactions {
    pub sink: Arc<dyn InboundSink>,
    pub rest: Rest,
}

impl Interactions {
    /// Hands `interaction` to the core when it is a press of one of its
    /// buttons (as an action of `account`), and answers it either way.
    pub(crate) async fn handle(&self, interaction: Interaction, account: &AccountId) {
        let action = match press::action(&interaction, account) {
            Ok(action) => action,
            Err(not_ours) => {
                tracing::debug!(?not_ours, "a Discord interaction that is not the core's");
                self.callback(&interaction, &CreateInteractionResponse::Acknowledge)
                    .await;
                return;
            }
        };
        let act = self.sink.act(action);
        tokio::pin!(act);
        match tokio::time::timeout(ACT_DEADLINE, &mut act).await {
            Ok(reply) => {
                let reply = settled(reply);
                self.callback(&interaction, &response(&reply)).await;
                if reply.update.is_some()
                    && let Some(notice) = &reply.notice
                {
                    self.follow_up(&interaction, notice).await;
                }
            }
            Err(_) => {
                tracing::debug!("the core is slow to take a Discord press; acknowledged first");
                self.callback(&interaction, &CreateInteractionResponse::Acknowledge)
                    .await;
                let reply = settled(act.await);
                if let Some(update) = &reply.update {
                    self.edit_original(&interaction, update).await;
                }
                if let Some(notice) = &reply.notice {
                    self.follow_up(&interaction, notice).await;
                }
            }
        }
    }

    /// `POST /interactions/{id}/{token}/callback`.
    async fn callback(&self, interaction: &Interaction, response: &CreateInteractionResponse) {
        let route = Route::InteractionResponse {
            interaction_id: interaction.id,
            token: &interaction.token,
        };
        let sent = self
            .call(
                interaction,
                Bucket::InteractionCallback,
                route,
                LightMethod::Post,
                response,
            )
            .await;
        if let Err(err) = sent {
            tracing::warn!(error = %err, "could not answer a Discord interaction");
        }
    }

    /// An ephemeral follow-up message with `notice`.
    async fn follow_up(&self, interaction: &Interaction, notice: &str) {
        let message = CreateInteractionResponseFollowup::new()
            .content(first_part(notice))
            .ephemeral(true);
        let route = Route::WebhookFollowupMessages {
            application_id: interaction.application_id,
            token: &interaction.token,
        };
        let sent = self
            .call(
                interaction,
                Bucket::InteractionFollowup,
                route,
                LightMethod::Post,
                &message,
            )
            .await;
        if let Err(err) = sent {
            tracing::warn!(error = %err, "could not show a Discord press notice");
        }
    }

    /// The pressed message's content replaced by `update`, its buttons gone.
    async fn edit_original(&self, interaction: &Interaction, update: &str) {
        let edit = EditInteractionResponse::new()
            .content(first_part(update))
            .components(Vec::new());
        let route = Route::WebhookOriginalInteractionResponse {
            application_id: interaction.application_id,
            token: &interaction.token,
        };
        let sent = self
            .call(
                interaction,
                Bucket::InteractionFollowup,
                route,
                LightMethod::Patch,
                &edit,
            )
            .await;
        if let Err(err) = sent {
            tracing::warn!(error = %err, "could not update the message of a Discord press");
        }
    }

    async fn call(
        &self,
        interaction: &Interaction,
        bucket: Bucket,
        route: Route<'_>,
        method: LightMethod,
        body: &impl serde::Serialize,
    ) -> Result<(), RestError> {
        let body = serde_json::to_vec(body).map_err(|err| RestError::Invalid(err.to_string()))?;
        // An interaction's routes are limited per interaction; one without a
        // channel is gated on its own id.
        let gate = interaction
            .channel_id
            .unwrap_or_else(|| ChannelId::new(interaction.id.get()));
        let request = Request::new(route, method).body(Some(body));
        self.rest.call_empty(bucket, gate, request).await
    }
}

/// The core's answer, or "try again" when it could not take the press.
fn settled(reply: Result<ActionReply, SubmitError>) -> ActionReply {
    reply.unwrap_or_else(|err| {
        tracing::warn!(error = %err, "the core could not take a Discord press");
        ActionReply::notice(TRY_AGAIN)
    })
}

/// The callback that shows `reply` (see the module docs).
fn response(reply: &ActionReply) -> CreateInteractionResponse {
    match (&reply.update, &reply.notice) {
        (Some(update), _) => CreateInteractionResponse::UpdateMessage(
            CreateInteractionResponseMessage::new()
                .content(first_part(update))
                .components(Vec::new()),
        ),
        (None, Some(notice)) => CreateInteractionResponse::Message(
            CreateInteractionResponseMessage::new()
                .content(first_part(notice))
                .ephemeral(true),
        ),
        (None, None) => CreateInteractionResponse::Acknowledge,
    }
}

/// What one message shows of `text`: its first 2,000-character part.
fn first_part(text: &str) -> String {
    split_message(text, MESSAGE_LIMIT, LengthUnit::Chars)
        .into_iter()
        .next()
        .unwrap_or_else(|| "·".to_owned())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn body(reply: &ActionReply) -> serde_json::Value {
        serde_json::to_value(response(reply)).unwrap()
    }

    #[test]
    fn each_answer_has_its_callback_type() {
        let update = ActionReply {
            notice: Some("Done".to_owned()),
            update: Some("Allowed".to_owned()),
        };
        let updated = body(&update);
        assert_eq!(updated["type"], 7);
        assert_eq!(updated["data"]["content"], "Allowed");
        assert_eq!(updated["data"]["components"], json!([]));
        let noticed = body(&ActionReply::notice("Too late"));
        assert_eq!(noticed["type"], 4);
        assert_eq!(noticed["data"]["content"], "Too late");
        assert_eq!(noticed["data"]["flags"], 64);
        assert_eq!(body(&ActionReply::default())["type"], 6);
    }
}
