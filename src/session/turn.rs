//! One turn: load the session row and its history from the database (always,
//! even when a cached agent exists), run the agent loop, and end the turn in
//! one transaction with its reply in the outbox.

use std::sync::Arc;
use std::time::Duration;

use crate::agent::cache::AgentCache;
use crate::agent::run::{InterruptedRound, LoopEnv, LoopError, run_loop};
use crate::agent::wallet::Wallet;
use crate::config::AgentSettings;
use crate::llm::ChatMessage;
use crate::store::{
    InboundRow, InboundStatus, NewMessage, OutboxRow, Store, StoreError, TurnEnd, WireEntry,
};
use crate::tools::ToolRegistry;

/// The last tool round, if a crash cut it short: the history ends with an
/// assistant entry asking for tools followed by fewer results than calls.
fn interrupted_round(stored: &[WireEntry]) -> Option<InterruptedRound> {
    let last_request = stored
        .iter()
        .rposition(|entry| !matches!(entry.message, ChatMessage::Tool { .. }))?;
    let entry = &stored[last_request];
    let ChatMessage::Assistant { tool_calls, .. } = &entry.message else {
        return None;
    };
    if tool_calls.is_empty() {
        return None;
    }
    let answered: Vec<String> = stored[last_request + 1..]
        .iter()
        .filter_map(|entry| match &entry.message {
            ChatMessage::Tool { tool_call_id, .. } => Some(tool_call_id.clone()),
            _ => None,
        })
        .collect();
    if tool_calls.iter().all(|call| answered.contains(&call.id)) {
        return None;
    }
    Some(InterruptedRound {
        assistant_id: entry.id,
        calls: tool_calls.clone(),
        answered,
    })
}

/// Shown when the model returns nothing at all.
const EMPTY_REPLY: &str = "(The model returned an empty reply.)";

/// Runs turns; shared by all session workers.
pub struct TurnExecutor {
    pub store: Store,
    pub cache: Arc<AgentCache>,
    pub registry: Arc<ToolRegistry>,
    pub agent: AgentSettings,
    pub max_tokens: u32,
}

impl TurnExecutor {
    /// Runs the turn for one inbound message (already claimed) and returns
    /// its outbox row and how it ended.
    ///
    /// # Errors
    /// A database failure; the message stays unfinished and is retried.
    pub async fn run(
        &self,
        inbound: &InboundRow,
    ) -> Result<(OutboxRow, InboundStatus), StoreError> {
        let session = self
            .store
            .session(&inbound.session_id)
            .await?
            .ok_or_else(|| {
                StoreError::Corrupt(format!("session {} missing", inbound.session_id))
            })?;
        let toolset = self
            .registry
            .toolset(&session.toolset)
            .unwrap_or_else(|unknown| {
                tracing::warn!(?unknown, "tools no longer configured are left out");
                let known: Vec<&String> = session
                    .toolset
                    .iter()
                    .filter(|name| self.registry.get(name).is_some())
                    .collect();
                self.registry.toolset(&known).unwrap_or_default()
            });
        let agent = self.cache.get(&session.model, &toolset).await;

        let stored = self.store.wire_history(&session.id, "").await?;
        let asked = stored.iter().any(|entry| {
            entry.task_id == Some(inbound.id) && matches!(entry.message, ChatMessage::User { .. })
        });
        let interrupted = interrupted_round(&stored);
        let mut history: Vec<ChatMessage> = stored.into_iter().map(|entry| entry.message).collect();
        if !asked {
            let user = ChatMessage::User {
                content: inbound.text.clone(),
            };
            self.store
                .append_message(&NewMessage::from_wire(
                    &session.id,
                    Some(inbound.id),
                    "",
                    user.clone(),
                ))
                .await?;
            history.push(user);
        }

        let env = Arc::new(LoopEnv {
            store: self.store.clone(),
            session_id: session.id.clone(),
            task_id: inbound.id,
            scope: String::new(),
            system_prompt: session.system_prompt.clone(),
            max_tokens: self.max_tokens,
            tool_timeout: Duration::from_secs(self.agent.tool_timeout_secs),
            depth: 0,
            max_depth: self.agent.max_delegation_depth,
            parent_reserve: self.agent.parent_reserve,
        });
        // A resumed task keeps spending from what it had left.
        let spent = self.store.task_usage(inbound.id).await?.calls;
        let budget = u64::from(self.agent.max_iterations).saturating_sub(spent);
        let purse = Arc::new(Wallet::open(u32::try_from(budget).unwrap_or(0)));
        let result = match run_loop(agent, env, Arc::clone(&purse), history, interrupted).await {
            Err(LoopError::Store(err)) => return Err(err),
            other => other,
        };
        tracing::info!(model_calls = purse.task_calls(), "turn finished");
        let end = match &result {
            Ok(outcome) => TurnEnd {
                inbound_id: inbound.id,
                final_message: Some(&outcome.final_message),
                reply: if outcome.text.trim().is_empty() {
                    EMPTY_REPLY
                } else {
                    &outcome.text
                },
                status: InboundStatus::Done,
                outcome: outcome.end.as_str(),
            },
            Err(LoopError::Model(err)) => {
                tracing::error!(error = %err, "model call failed; the turn ends with an apology");
                TurnEnd {
                    inbound_id: inbound.id,
                    final_message: None,
                    reply: "Sorry, the model could not be reached, so this message was not \
                            answered. Please try again in a moment.",
                    status: InboundStatus::Failed,
                    outcome: "model_error",
                }
            }
            Err(LoopError::NoBudget | LoopError::Store(_)) => TurnEnd {
                inbound_id: inbound.id,
                final_message: None,
                reply: "Sorry, this task used up its step budget before an answer was ready.",
                status: InboundStatus::Failed,
                outcome: "budget_exhausted",
            },
        };
        let row = self.store.finish_turn(&end).await?;
        Ok((row, end.status))
    }
}
