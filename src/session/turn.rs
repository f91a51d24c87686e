//! One turn: load the session row and its history from the database (always,
//! even when a cached agent exists), run the agent loop, and end the turn in
//! one transaction with its reply in the outbox.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::commands::Command;
use crate::agent::cache::AgentCache;
use crate::agent::context::{self, CompactError, ContextPolicy, Summariser};
use crate::agent::run::{
    InterruptedRound, LoopEnv, LoopError, SpendLimit, TaskLimits, run_loop, warn_at_80_percent,
};
use crate::agent::wallet::{Budget, Purse, Wallet};
use crate::config::{AgentSettings, ContextSettings, LimitSettings};
use crate::llm::ChatMessage;
use crate::store::{
    Batch, InboundRow, InboundStatus, NewMessage, OutboxRow, SessionView, Store, StoreError,
    TurnEnd, WireEntry,
};
use crate::tools::ToolRegistry;
use crate::usage::Price;

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

/// Tokens per character no real tokenizer exceeds for ordinary text; a view
/// under the threshold at this ratio needs no calibrated estimate.
const GENEROUS_RATIO: f64 = 0.5;

/// Shown when the model returns nothing at all.
const EMPTY_REPLY: &str = "(The model returned an empty reply.)";

/// Runs turns; shared by all session workers.
pub struct TurnExecutor {
    pub store: Store,
    pub cache: Arc<AgentCache>,
    pub registry: Arc<ToolRegistry>,
    pub agent: AgentSettings,
    pub limits: LimitSettings,
    pub context: ContextSettings,
    pub max_tokens: u32,
    pub prices: Arc<BTreeMap<String, Price>>,
}

/// Why a running turn was stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopCause {
    /// `/stop`.
    User,
    /// A newer message, with `sessions.busy = "interrupt"`.
    Interrupted,
    /// The task's wall-clock limit.
    TimeLimit,
}

/// The handle that stops one running turn.
#[derive(Debug, Default)]
pub struct TurnControl {
    pub token: CancellationToken,
    cause: std::sync::Mutex<Option<StopCause>>,
    /// The running task's purse, once the turn has opened it (for `/status`).
    purse: std::sync::OnceLock<Arc<Purse>>,
}

impl TurnControl {
    /// Stops the turn; the first cause given is the one reported.
    pub fn stop(&self, cause: StopCause) {
        self.cause
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get_or_insert(cause);
        self.token.cancel();
    }

    /// Model calls the running task may still make, once it has started.
    pub fn budget_left(&self) -> Option<u32> {
        self.purse.get().map(|purse| purse.remaining())
    }

    pub fn cause(&self) -> Option<StopCause> {
        *self
            .cause
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl TurnExecutor {
    /// The daily spend cap of the message's principal, with what it has
    /// spent today (one query, only when a cap is configured).
    async fn spend_limit(&self, principal: Option<i64>) -> Result<Option<SpendLimit>, StoreError> {
        let daily = self.limits.principal_daily_usd;
        let Some(principal) = principal.filter(|_| daily > 0.0) else {
            return Ok(None);
        };
        #[allow(clippy::cast_possible_truncation)] // a dollar amount, far below 2^63 nanos
        let daily_nanousd = (daily * 1e9).round() as i64;
        let spent_before = self
            .store
            .principal_spend_since(principal, crate::store::start_of_today_ms())
            .await?;
        Ok(Some(SpendLimit {
            daily_nanousd,
            spent_before,
        }))
    }

    /// Ends a `/compact` turn with its answer (no model reply).
    async fn answer_compact(
        &self,
        inbound: &InboundRow,
        reply: &str,
        outcome: &str,
    ) -> Result<(OutboxRow, InboundStatus), StoreError> {
        let row = self
            .store
            .finish_turn(&TurnEnd {
                inbound_id: inbound.id,
                final_message: None,
                reply,
                status: InboundStatus::Command,
                outcome,
            })
            .await?;
        Ok((row, InboundStatus::Command))
    }

    /// Runs the turn for one inbound message (already claimed) and returns
    /// its outbox row and how it ended.
    ///
    /// # Errors
    /// A database failure; the message stays unfinished and is retried.
    pub async fn run(
        &self,
        inbound: &InboundRow,
        control: &TurnControl,
    ) -> Result<(OutboxRow, InboundStatus), StoreError> {
        let SessionView {
            session,
            entries,
            compaction,
        } = self
            .store
            .session_view(&inbound.session_id)
            .await?
            .ok_or_else(|| {
                StoreError::Corrupt(format!("session {} missing", inbound.session_id))
            })?;
        let toolset = self.registry.toolset(&session.toolset);
        let agent = self.cache.get(&session.model, &toolset).await;

        let policy = ContextPolicy::for_model(&self.context, &session.model);
        let mut stored = context::apply(entries, compaction.as_ref());
        let forced = Command::parse(&inbound.text, None) == Some(Command::Compact);
        // A principal over its daily spend gets no model call at all, not
        // even a summary; the loop then ends the task with the message.
        let spend = self.spend_limit(inbound.principal_id).await?;
        let over_budget = spend.is_some_and(|limit| limit.spent_before >= limit.daily_nanousd);
        if forced && over_budget {
            return self
                .answer_compact(
                    inbound,
                    "Compacting needs a model call, and today's spending limit is reached \
                     (it resets at 00:00 UTC).",
                    "spend_limit",
                )
                .await;
        }
        // Calibrating costs a query; only a view that might be near the
        // threshold at a generous estimate needs it.
        let near = policy.should_compact(&session.system_prompt, &stored, Some(GENEROUS_RATIO));
        let ratio = if near {
            self.store.tokens_per_char(&session.id).await?
        } else {
            None
        };
        if !over_budget
            && (forced || (near && policy.should_compact(&session.system_prompt, &stored, ratio)))
        {
            let summariser = Summariser {
                store: &self.store,
                provider: agent.provider.as_ref(),
                model: &agent.model,
                session_id: &session.id,
                task_id: Some(inbound.id),
                principal_id: inbound.principal_id,
                prices: &self.prices,
            };
            let compacted = match policy.compact(&summariser, &stored).await {
                Ok(done) => Some(done),
                Err(CompactError::Store(err)) => return Err(err),
                Err(CompactError::Model(err)) => {
                    tracing::warn!(error = %err, "compaction failed; continuing with the full history");
                    None
                }
            };
            if let Some(Some(compaction)) = &compacted {
                stored = context::apply(stored, Some(compaction));
            }
            if forced {
                let reply = match compacted {
                    Some(Some(_)) => {
                        "Older messages were summarised; the full history stays stored."
                    }
                    Some(None) => "The conversation is too short to compact.",
                    None => "Compaction failed; the conversation is unchanged.",
                };
                return self.answer_compact(inbound, reply, "compact").await;
            }
        }
        let asked = stored.iter().any(|entry| {
            entry.task_id == Some(inbound.id) && matches!(entry.message, ChatMessage::User { .. })
        });
        if asked {
            let interrupted_calls = self.store.fail_interrupted_model_calls(inbound.id).await?;
            if interrupted_calls > 0 {
                tracing::warn!(
                    interrupted_calls,
                    "recovery: model calls cut short by a restart recorded as failed"
                );
            }
        }
        let interrupted = interrupted_round(&stored);
        let mut history: Vec<ChatMessage> = stored.into_iter().map(|entry| entry.message).collect();
        // The task's message is committed with its first model call.
        let mut first_writes = Batch::new();
        if !asked {
            let user = ChatMessage::User {
                content: inbound.text.clone(),
            };
            first_writes.append_message(&NewMessage::from_wire(
                &session.id,
                Some(inbound.id),
                "",
                user.clone(),
            ))?;
            history.push(user);
        }

        let env = Arc::new(LoopEnv {
            store: self.store.clone(),
            session_id: session.id.clone(),
            task_id: inbound.id,
            scope: String::new(),
            principal_id: inbound.principal_id,
            prices: Arc::clone(&self.prices),
            system_prompt: session.system_prompt.clone(),
            max_tokens: self.max_tokens,
            tool_timeout: Duration::from_secs(self.agent.tool_timeout_secs),
            depth: 0,
            max_depth: self.agent.max_delegation_depth,
            parent_reserve: self.agent.parent_reserve,
            limits: TaskLimits {
                max_tokens: self.limits.task_max_tokens,
                repeat_limit: self.limits.repeat_limit,
                fallback_model: self.limits.fallback_model.clone(),
                spend,
            },
            cancel: control.token.clone(),
            context: Some(policy.clone()),
        });
        // A resumed task (its message was stored by an earlier run) keeps
        // spending from what it had left.
        let spent = if asked {
            self.store.task_usage(inbound.id).await?.calls
        } else {
            0
        };
        let budget = u64::from(self.agent.max_iterations).saturating_sub(spent);
        let purse = Arc::new(Wallet::open(u32::try_from(budget).unwrap_or(0)));
        let _ = control.purse.set(Arc::clone(&purse));
        let run = run_loop(
            agent,
            env,
            Arc::clone(&purse),
            history,
            interrupted,
            first_writes,
        );
        let mut run = std::pin::pin!(run);
        let time_limit = Duration::from_secs(self.limits.task_timeout_secs);
        let warn_at = time_limit.mul_f64(0.8);
        let result = tokio::select! {
            result = &mut run => result,
            () = async {
                tokio::time::sleep(warn_at).await;
                let secs = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
                warn_at_80_percent(&purse, Budget::Time, secs(warn_at), secs(time_limit));
                tokio::time::sleep(time_limit.saturating_sub(warn_at)).await;
            } => {
                tracing::warn!(limit_secs = time_limit.as_secs(), "task time limit reached");
                control.stop(StopCause::TimeLimit);
                // The loop winds down on its own, recording a result for
                // every call in flight, so the history stays valid.
                run.await
            }
        };
        let mut result = match result {
            Err(LoopError::Store(err)) => return Err(err),
            other => other,
        };
        // The final model call's outcome commits with the reply.
        let writes = match &mut result {
            Ok(outcome) => std::mem::take(&mut outcome.writes),
            Err(_) => Batch::new(),
        };
        tracing::info!(model_calls = purse.task_calls(), "turn finished");
        let limit_reply;
        let (final_message, reply, status, outcome) = match &result {
            Ok(outcome) => (
                Some(&outcome.final_message),
                if outcome.text.trim().is_empty() {
                    EMPTY_REPLY
                } else {
                    outcome.text.as_str()
                },
                InboundStatus::Done,
                outcome.end.as_str(),
            ),
            Err(LoopError::Model(err)) => {
                tracing::error!(error = %err, "model call failed; the turn ends with an apology");
                (
                    None,
                    "Sorry, the model could not be reached, so this message was not answered. \
                     Please try again in a moment.",
                    InboundStatus::Failed,
                    "model_error",
                )
            }
            Err(LoopError::Cancelled) => match control.cause() {
                Some(StopCause::TimeLimit) => {
                    limit_reply = format!(
                        "Stopped: this task ran longer than its {}-second limit.",
                        time_limit.as_secs()
                    );
                    (
                        None,
                        limit_reply.as_str(),
                        InboundStatus::Failed,
                        "time_limit",
                    )
                }
                Some(StopCause::Interrupted) => (
                    None,
                    "Stopped to handle your newer message.",
                    InboundStatus::Failed,
                    "interrupted",
                ),
                _ => (
                    None,
                    "Stopped, as you asked.",
                    InboundStatus::Failed,
                    "cancelled",
                ),
            },
            Err(err @ (LoopError::TokenLimit { .. } | LoopError::NoProgress { .. })) => {
                limit_reply = format!("Stopped: {err}. Ask again to continue.");
                let outcome = if matches!(err, LoopError::TokenLimit { .. }) {
                    "token_limit"
                } else {
                    "no_progress"
                };
                (None, limit_reply.as_str(), InboundStatus::Failed, outcome)
            }
            Err(err @ LoopError::SpendLimit { .. }) => {
                limit_reply = format!("Stopped: {err}.");
                (
                    None,
                    limit_reply.as_str(),
                    InboundStatus::Failed,
                    "spend_limit",
                )
            }
            Err(LoopError::NoBudget | LoopError::Store(_)) => (
                None,
                "Sorry, this task used up its step budget before an answer was ready.",
                InboundStatus::Failed,
                "budget_exhausted",
            ),
        };
        if status == InboundStatus::Failed {
            tracing::warn!(outcome, "turn ended by a limit or failure");
        }
        let end = TurnEnd {
            inbound_id: inbound.id,
            final_message,
            reply,
            status,
            outcome,
        };
        let row = self.store.finish_turn_with(&end, writes).await?;
        Ok((row, end.status))
    }
}
