//! [`Inbound`]: what happens to an event or a button press once it is
//! known to come from Slack, whether it arrived over HTTP
//! ([`crate::webhook`]) or Socket Mode ([`crate::socket`]).
//!
//! - An `event_callback` is matched to its workspace by `team_id`,
//!   normalised ([`crate::normalise`]), given its sender's display name,
//!   and handed to the core's [`InboundSink::submit`] in a [`Handoff`]
//!   task. It is acknowledged ([`Ack::Yes`]) once the core has recorded it
//!   (or found it recorded before, or called it unusable), and not
//!   ([`Ack::No`]: 503, or no Socket Mode ack) when the core is
//!   unavailable or has not answered within the ack timeout, so that Slack
//!   delivers it again; the core deduplicates the redelivery by its event
//!   id. A second delivery of an event this process is recording or has
//!   recorded is not submitted again ([`crate::recent`]). Events that are
//!   not for the core are acknowledged at once.
//! - A `block_actions` press becomes an [`InboundAction`] for
//!   [`InboundSink::act`] and is acknowledged at once (Slack never delivers
//!   a press twice, and wants the answer within 3 s); what the core
//!   answers is shown afterwards: an `update` replaces the message's text
//!   and removes its buttons (`chat.update`), a `notice` goes to the
//!   presser alone (`chat.postEphemeral`).

use std::sync::Arc;
use std::time::Duration;

use switchboard_contract::{
    ActionReply, ChatRef, EventId, InboundAction, InboundMessage, InboundSink, PlatformSender,
    SubmitError, Submitted,
};
use tokio::sync::oneshot;

use crate::api::WebApi;
use crate::events::{Envelope, Interaction, MessageEvent};
use crate::handoff::Handoff;
use crate::media::Downloads;
use crate::names::UserNames;
use crate::normalise::{self, Context, Normalised, Rules};
use crate::press;
use crate::recent::{self, Claim, Recent};
use crate::sender::SlackSender;
use crate::workspace::{Workspace, Workspaces};

/// What the person sees when the core could not take a press.
const TRY_AGAIN: &str = "That did not go through. Please try again in a moment.";

/// Whether Slack's delivery is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ack {
    /// Acknowledge: done with it (recorded, or not for the core).
    Yes,
    /// Do not: Slack delivers it again. The reason is logged.
    No(&'static str),
}

/// Everything events and presses need, shared by the webhook and the
/// Socket Mode connection.
pub(crate) struct Inbound {
    pub sink: Arc<dyn InboundSink>,
    pub workspaces: Arc<Workspaces>,
    pub api: WebApi,
    pub names: Arc<UserNames>,
    pub handoff: Arc<Handoff>,
    /// What this process handed to the core lately.
    pub recent: Recent,
    pub sender: Arc<SlackSender>,
    pub rules: Rules,
    pub ack_timeout: Duration,
}

impl Inbound {
    /// Handles an Events API callback (not `url_verification`).
    pub async fn event(&self, envelope: Envelope) -> Ack {
        if envelope.kind != "event_callback" {
            tracing::debug!(kind = %envelope.kind, "Slack callback type ignored");
            return Ack::Yes;
        }
        let team = envelope.team_id.unwrap_or_default();
        let Some(workspace) = self.workspaces.by_team(&team) else {
            tracing::warn!(%team, "Slack event for a workspace without a bot token ignored");
            return Ack::Yes;
        };
        let Some(raw) = envelope.event else {
            return Ack::Yes;
        };
        if !matches!(raw["type"].as_str(), Some("message" | "app_mention")) {
            tracing::debug!(kind = ?raw["type"].as_str(), "Slack event type ignored");
            return Ack::Yes;
        }
        let event: MessageEvent = match serde_json::from_value(raw) {
            Ok(event) => event,
            // Redelivery would not fix it: acknowledge, so Slack stops. The
            // error's text may quote the message, so only its kind is logged.
            Err(err) => {
                tracing::warn!(kind = ?err.classify(), line = err.line(), event_id = ?envelope.event_id, "unreadable Slack message event dropped");
                return Ack::Yes;
            }
        };
        let downloads = Downloads {
            http: self.api.http().clone(),
            token: workspace.token.clone(),
            api_base: self.api.base().to_owned(),
        };
        let ctx = Context {
            account: &workspace.account,
            bot_user_id: workspace.bot_user_id(),
            rules: &self.rules,
            downloads: Some(&downloads),
        };
        match normalise::normalise(&ctx, event) {
            Ok(Normalised::Message(message)) => self.submit(workspace, *message).await,
            Ok(Normalised::Skipped(skip)) => {
                tracing::debug!(?skip, "Slack message not for the core");
                Ack::Yes
            }
            Err(err) => {
                tracing::warn!(error = %err, "Slack message with an unusable id dropped");
                Ack::Yes
            }
        }
    }

    /// Hands `message` to the core in a task and waits for it up to the ack
    /// timeout; a repeat of an event this process is recording (or has
    /// recorded) takes that outcome instead.
    async fn submit(&self, workspace: &Arc<Workspace>, mut message: InboundMessage) -> Ack {
        tracing::info!(
            team = %workspace.team_id(),
            chat = %message.chat,
            kind = ?message.chat_kind,
            event_id = %message.event_id,
            "Slack message received"
        );
        let key = (message.account.to_string(), message.event_id.to_string());
        let report = match self.recent.claim(key) {
            Claim::First(report) => report,
            Claim::Repeat(outcome) => {
                tracing::debug!(event_id = %message.event_id, "Slack delivered this message again; not submitted twice");
                return if recent::recorded(outcome, self.ack_timeout).await {
                    Ack::Yes
                } else {
                    Ack::No("an earlier delivery of the event is not recorded")
                };
            }
        };
        let (done, outcome) = oneshot::channel();
        let sink = Arc::clone(&self.sink);
        let names = Arc::clone(&self.names);
        let api = self.api.clone();
        let workspace = Arc::clone(workspace);
        // Half the budget at most for a name: recording comes first.
        let patience = self.ack_timeout / 2;
        let spawned = self.handoff.spawn(async move {
            message.sender.display_name = names
                .lookup(
                    &api,
                    &workspace.token,
                    workspace.team_id(),
                    message.sender.id.as_str(),
                    patience,
                )
                .await;
            let event_id = message.event_id.clone();
            let result = sink.submit(message).await;
            log_submitted(&event_id, &result);
            let recorded = !matches!(result, Err(SubmitError::Unavailable(_)));
            report.send_replace(Some(recorded));
            // The request may have stopped waiting; then nobody needs it.
            let _ = done.send(result);
        });
        if !spawned {
            return Ack::No("too many events in flight");
        }
        match tokio::time::timeout(self.ack_timeout, outcome).await {
            Ok(Ok(Err(SubmitError::Unavailable(_)))) => {
                Ack::No("the core could not record the event")
            }
            // Recorded, recorded before, or unusable (a redelivery would
            // not change that).
            Ok(Ok(_)) => Ack::Yes,
            Ok(Err(_)) => Ack::No("the hand-off ended without an answer"),
            // Recording goes on; if it succeeds, the redelivery takes it.
            Err(_) => Ack::No("the core was slow to record the event"),
        }
    }

    /// Handles an interactivity payload: a button press reaches the core's
    /// [`InboundSink::act`], and its answer is shown afterwards.
    pub fn interaction(&self, interaction: Interaction) -> Ack {
        if interaction.kind != "block_actions" {
            tracing::debug!(kind = %interaction.kind, "Slack interaction type ignored");
            return Ack::Yes;
        }
        let Some((action, user)) = self.action(&interaction) else {
            return Ack::Yes;
        };
        let sink = Arc::clone(&self.sink);
        let sender = Arc::clone(&self.sender);
        let spawned = self.handoff.spawn(async move {
            let reply = sink.act(action.clone()).await;
            show(&sender, &action, &user, reply).await;
        });
        if spawned {
            Ack::Yes
        } else {
            Ack::No("too many events in flight")
        }
    }

    /// The press as the contract's action, and the presser's Slack id;
    /// `None` (logged) for a press that is not of one of the core's
    /// buttons.
    fn action(&self, interaction: &Interaction) -> Option<(InboundAction, String)> {
        let team = interaction.team_id().unwrap_or_default();
        let Some(workspace) = self.workspaces.by_team(team) else {
            tracing::warn!(%team, "Slack button press for an unknown workspace ignored");
            return None;
        };
        match press::action(interaction, &workspace.account) {
            Ok(Some(action)) => Some((action, interaction.user.id.clone())),
            Ok(None) => {
                tracing::debug!("a Slack button that is not the core's was pressed");
                None
            }
            Err(err) => {
                tracing::warn!(error = %err, "Slack button press with an unusable id dropped");
                None
            }
        }
    }
}

/// Shows the core's answer to a press.
async fn show(
    sender: &SlackSender,
    action: &InboundAction,
    user: &str,
    reply: Result<ActionReply, SubmitError>,
) {
    let chat = ChatRef {
        platform: action.platform.clone(),
        account: action.account.clone(),
        chat: action.chat.clone(),
        thread: action.thread.clone(),
    };
    let reply = match reply {
        Ok(reply) => reply,
        Err(err) => {
            tracing::warn!(error = %err, "the core could not take a Slack button press");
            ActionReply::notice(TRY_AGAIN)
        }
    };
    if let (Some(text), Some(message)) = (&reply.update, &action.message_id)
        && let Err(err) = sender.edit(&chat, message, text).await
    {
        tracing::warn!(error = %err, "could not update the message of a Slack button press");
    }
    if let Some(notice) = &reply.notice
        && let Err(err) = sender.ephemeral(&chat, user, notice).await
    {
        tracing::warn!(error = %err, "could not show a Slack button press notice");
    }
}

fn log_submitted(event_id: &EventId, result: &Result<Submitted, SubmitError>) {
    match result {
        Ok(Submitted::Duplicate) => tracing::debug!(%event_id, "Slack event seen before"),
        Ok(submitted) => tracing::debug!(%event_id, ?submitted, "Slack event recorded"),
        Err(SubmitError::Rejected(reason)) => {
            tracing::warn!(%event_id, %reason, "core rejected a Slack event");
        }
        Err(SubmitError::Unavailable(reason)) => {
            tracing::error!(%event_id, %reason, "core could not record a Slack event");
        }
    }
}
