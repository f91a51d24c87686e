//! The agent loop: call the model, run the tools it asks for, write every
//! step back, repeat until the model is done or the wallet is empty.
//!
//! Calls of one round run concurrently; each result is matched to its call by
//! id and appended in call order. Before a tool runs its call is checkpointed
//! as `running` with a request id derived from the stored assistant entry, and
//! after it as `done`/`failed`. Unknown tools, invalid arguments, tool errors,
//! timeouts and panics all become `{"success": false, "error": "…"}` results
//! the model sees: nothing the model outputs can crash the loop.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::future::join_all;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::Agent;
use super::context::{self, CompactError, ContextPolicy, Summariser};
use super::step;
use super::subagent::SubAgentRunner;
use super::wallet::{Budget, CallKind, Purse};
use crate::llm::{ChatMessage, LlmError, ModelRequest, ModelResponse, ToolCall, canonical_json};
use crate::store::{
    Batch, MessageMeta, ModelCallStart, NewMessage, RoundStart, Store, StoreError, ToolCheckpoint,
    round_request_id,
};
use crate::tools::{ToolContext, ToolError};
use crate::usage::Price;

/// The note that asks for a summary when the wallet is spent. Stored like any
/// user entry so later requests keep the same prefix.
pub const BUDGET_NOTE: &str = "[switchboard] The step budget for this task is used up, so no \
    more tools can be called. Reply to the user now: summarise what you did, what you found, and \
    what is left to do.";

/// Everything a loop run needs besides the agent and its purse.
#[derive(Debug, Clone)]
pub struct LoopEnv {
    pub store: Store,
    pub session_id: String,
    pub task_id: i64,
    /// `""` for the session's own conversation; a sub-agent's path otherwise.
    pub scope: String,
    /// Who sent the task's message; its model calls are counted against
    /// this principal's daily spend.
    pub principal_id: Option<i64>,
    /// Prices per model, for each call's cost estimate.
    pub prices: Arc<BTreeMap<String, Price>>,
    pub system_prompt: String,
    pub max_tokens: u32,
    pub tool_timeout: Duration,
    /// 0 for the top agent.
    pub depth: u32,
    pub max_depth: u32,
    pub parent_reserve: u32,
    /// Limits on the whole task (shared with sub-agents).
    pub limits: TaskLimits,
    /// When to compact the session's history while the task runs; `None`
    /// for sub-agents, whose histories are their own.
    pub context: Option<ContextPolicy>,
    /// Cancelled by `/stop`, an interrupting message, or the task's time
    /// limit; sub-agents share it.
    pub cancel: CancellationToken,
}

impl LoopEnv {
    /// The transcript entry of a wire message of this loop's task and scope.
    pub fn entry(&self, message: ChatMessage) -> NewMessage {
        NewMessage::from_wire(&self.session_id, Some(self.task_id), &self.scope, message)
    }
}

/// Limits that stop runaway work.
#[derive(Debug, Clone, Default)]
pub struct TaskLimits {
    /// Input plus output tokens over all of the task's model calls; 0: none.
    pub max_tokens: u64,
    /// The same tool with the same arguments giving the same result this
    /// many times in a row stops the loop; 0: never.
    pub repeat_limit: u32,
    /// Tried once when the session's model keeps failing (429/5xx).
    pub fallback_model: Option<String>,
    /// The principal's daily spend cap, when one is configured.
    pub spend: Option<SpendLimit>,
}

/// A principal's daily spend cap, in billionths of a dollar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpendLimit {
    pub daily_nanousd: i64,
    /// What the principal had spent today when the task started.
    pub spent_before: i64,
}

impl SpendLimit {
    /// The cap in dollars, for messages.
    pub fn dollars(self) -> f64 {
        #[allow(clippy::cast_precision_loss)] // far below 2^52
        let nanos = self.daily_nanousd as f64;
        nanos / 1e9
    }
}

/// How the loop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoopEnd {
    /// The model said it was done.
    Answered,
    /// The wallet ran out; the answer is the final summary.
    BudgetExhausted,
}

impl LoopEnd {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Answered => "answered",
            Self::BudgetExhausted => "budget_exhausted",
        }
    }
}

/// The loop's result: the final assistant entry, not yet stored (the caller
/// stores it with the outbox row in one transaction), and the writes still
/// pending (the final model call's outcome) to commit with it.
#[derive(Debug, Clone)]
pub struct LoopOutcome {
    pub final_message: NewMessage,
    pub text: String,
    pub end: LoopEnd,
    pub writes: Batch,
}

/// Why the loop stopped without an answer.
#[derive(Debug, thiserror::Error)]
pub enum LoopError {
    #[error(transparent)]
    Model(#[from] LlmError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the task's step budget was spent before the model could answer")]
    NoBudget,
    #[error("the task was cancelled")]
    Cancelled,
    #[error("the task used more than its {limit} tokens")]
    TokenLimit { limit: u64 },
    #[error("no progress: `{tool}` returned the same result {times} times in a row")]
    NoProgress { tool: String, times: u32 },
    #[error("today's spending limit of ${dollars:.2} is reached (it resets at 00:00 UTC)")]
    SpendLimit { dollars: f64 },
}

/// A tool round cut short by a crash: the assistant entry that asked for the
/// calls is stored, some results are not.
#[derive(Debug, Clone)]
pub struct InterruptedRound {
    /// The stored assistant entry's id (request ids derive from it).
    pub assistant_id: i64,
    pub calls: Vec<ToolCall>,
    /// Ids of the calls whose results are already in the history.
    pub answered: Vec<String>,
}

/// Runs the loop over `history` (the wire view, without the system prompt),
/// first completing an interrupted tool round if there is one. `writes` are
/// entries not yet stored (the task's user message); they are committed with
/// the first model call's `running` row.
///
/// Writes are grouped per step: what happened since the last model call is
/// committed together with the next call's `running` row (one round trip),
/// a response's outcome together with its assistant entry, and the final
/// call's outcome is returned for the caller to commit with the reply. Every
/// write is durable before anything depends on it: before a model call goes
/// out and before a tool runs.
///
/// # Errors
/// A model call that failed after retries, a database failure, or an empty
/// purse at the start. Pending writes are committed before an error returns,
/// so the stored history stays valid.
pub async fn run_loop(
    agent: Arc<Agent>,
    env: Arc<LoopEnv>,
    purse: Arc<Purse>,
    history: Vec<ChatMessage>,
    interrupted: Option<InterruptedRound>,
    writes: Batch,
) -> Result<LoopOutcome, LoopError> {
    let mut pending = writes;
    match drive(&agent, &env, &purse, history, interrupted, &mut pending).await {
        Ok(outcome) => Ok(LoopOutcome {
            writes: pending,
            ..outcome
        }),
        Err(err) => {
            env.store.write(pending).await?;
            Err(err)
        }
    }
}

async fn drive(
    agent: &Arc<Agent>,
    env: &Arc<LoopEnv>,
    purse: &Arc<Purse>,
    mut history: Vec<ChatMessage>,
    interrupted: Option<InterruptedRound>,
    pending: &mut Batch,
) -> Result<LoopOutcome, LoopError> {
    if let Some(round) = interrupted {
        for result in resume_round(agent, env, purse, &round).await? {
            append(env, pending, &mut history, result)?;
        }
    }
    let mut iteration = 0u32;
    let mut repeats = RepeatTracker::default();
    let mut compaction = MidTaskCompaction::default();
    loop {
        iteration += 1;
        if env.cancel.is_cancelled() {
            return Err(LoopError::Cancelled);
        }
        if let Some(spend) = env.limits.spend
            && spend.spent_before.saturating_add(purse.task_cost()) >= spend.daily_nanousd
        {
            tracing::warn!(
                limit_usd = spend.dollars(),
                "daily spend limit reached; stopping the task"
            );
            return Err(LoopError::SpendLimit {
                dollars: spend.dollars(),
            });
        }
        compaction.run(agent, env, pending, &mut history).await?;
        let kind = if purse.try_spend(CallKind::Step) {
            CallKind::Step
        } else if purse.try_spend(CallKind::Final) {
            append(
                env,
                pending,
                &mut history,
                ChatMessage::User {
                    content: BUDGET_NOTE.to_owned(),
                },
            )?;
            tracing::warn!(
                iteration,
                scope = env.scope,
                "step budget spent; asking for a summary"
            );
            CallKind::Final
        } else {
            return Err(LoopError::NoBudget);
        };
        warn_at_80_percent(
            purse,
            Budget::Calls,
            u64::from(purse.task_calls()),
            u64::from(purse.task_budget()),
        );
        let tools = match kind {
            CallKind::Step => agent.toolset.specs(),
            CallKind::Final => &[],
        };
        let request = ModelRequest {
            model: &agent.model,
            system: &env.system_prompt,
            messages: &history,
            tools,
            cache_key: &env.session_id,
            max_tokens: env.max_tokens,
        };
        let started = Instant::now();
        let request_id = step::request_id();
        let start = ModelCallStart {
            request_id: &request_id,
            session_id: &env.session_id,
            task_id: Some(env.task_id),
            scope: &env.scope,
            principal_id: env.principal_id,
            provider: agent.provider_kind.as_str(),
            model: &agent.model,
            request_chars: Some(wire_chars(&env.system_prompt, &history)),
        };
        let call = call_model(agent, env, request);
        let recorded = step::recorded(
            &env.store,
            &start,
            &env.prices,
            std::mem::take(pending),
            call,
        )
        .await?;
        recorded.finish(pending);
        let step::Recorded {
            response,
            cost_nanousd,
            ..
        } = recorded;
        let latency_ms = i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX);
        tracing::info!(
            iteration,
            scope = env.scope,
            request_id,
            input_tokens = response.usage.input_tokens,
            output_tokens = response.usage.output_tokens,
            cache_read_tokens = response.usage.cache_read_tokens,
            cache_write_tokens = response.usage.cache_write_tokens,
            context_messages = history.len(),
            tool_calls = response.tool_calls.len(),
            latency_ms,
            "model call"
        );
        compaction.calibrate(&start, response.usage.input_tokens);
        let task_tokens =
            purse.add_tokens(response.usage.input_tokens + response.usage.output_tokens);
        let limit = env.limits.max_tokens;
        if limit > 0 && task_tokens > limit {
            tracing::warn!(task_tokens, limit, "task token limit reached");
            return Err(LoopError::TokenLimit { limit });
        }
        warn_at_80_percent(purse, Budget::Tokens, task_tokens, limit);
        let task_cost = purse.add_cost(cost_nanousd.unwrap_or(0));
        if let Some(spend) = env.limits.spend {
            let spent = spend.spent_before.saturating_add(task_cost);
            warn_at_80_percent(
                purse,
                Budget::Spend,
                u64::try_from(spent).unwrap_or(0),
                u64::try_from(spend.daily_nanousd).unwrap_or(0),
            );
        }
        let meta = meta_of(&response, latency_ms);
        if response.tool_calls.is_empty() || kind == CallKind::Final {
            let text = response.content.clone().unwrap_or_default();
            let final_message = env
                .entry(ChatMessage::Assistant {
                    content: response.content,
                    tool_calls: Vec::new(),
                })
                .with_meta(meta);
            let end = match kind {
                CallKind::Step => LoopEnd::Answered,
                CallKind::Final => LoopEnd::BudgetExhausted,
            };
            return Ok(LoopOutcome {
                final_message,
                text,
                end,
                writes: Batch::new(),
            });
        }
        let calls = response.tool_calls.clone();
        let assistant = ChatMessage::Assistant {
            content: response.content,
            tool_calls: calls.clone(),
        };
        // The call's outcome, the entry it produced and the round's
        // `running` checkpoints, in one write; the entry's id names the
        // round's tool calls.
        pending.append_message(&env.entry(assistant.clone()).with_meta(meta))?;
        pending.start_round(&RoundStart {
            session_id: &env.session_id,
            task_id: Some(env.task_id),
            scope: &env.scope,
            calls: &calls,
        });
        let assistant_id = env
            .store
            .write_ids(std::mem::take(pending))
            .await?
            .last()
            .copied()
            .ok_or_else(|| StoreError::Corrupt("no id for the assistant entry".to_owned()))?;
        history.push(assistant);
        let results = run_round(agent, env, purse, assistant_id, &calls, pending).await?;
        let mut stuck = None;
        for (call, result) in calls.iter().zip(&results) {
            if let ChatMessage::Tool { content, .. } = result {
                let times = repeats.observe(call, content);
                if env.limits.repeat_limit > 0 && times >= env.limits.repeat_limit {
                    stuck = Some(LoopError::NoProgress {
                        tool: call.name.clone(),
                        times,
                    });
                }
            }
        }
        for result in results {
            append(env, pending, &mut history, result)?;
        }
        if let Some(stuck) = stuck {
            tracing::warn!(error = %stuck, "stopping a loop that makes no progress");
            return Err(stuck);
        }
    }
}

/// Calls the model, racing the task's cancellation, and falls back to the
/// configured fallback model once when the session's model keeps failing.
async fn call_model(
    agent: &Agent,
    env: &LoopEnv,
    request: ModelRequest<'_>,
) -> Result<ModelResponse, LoopError> {
    let first = tokio::select! {
        result = agent.provider.complete(&request) => result,
        () = env.cancel.cancelled() => return Err(LoopError::Cancelled),
    };
    match (first, &env.limits.fallback_model) {
        (Err(err), Some(fallback)) if err.is_retryable() && fallback != request.model => {
            tracing::warn!(error = %err, fallback, "model failing; trying the fallback model");
            let request = ModelRequest {
                model: fallback,
                ..request
            };
            tokio::select! {
                result = agent.provider.complete(&request) => Ok(result?),
                () = env.cancel.cancelled() => Err(LoopError::Cancelled),
            }
        }
        (result, _) => Ok(result?),
    }
}

/// Compaction between the iterations of a long task: when the history would
/// pass the context threshold (estimated at the ratio of tokens to
/// characters the provider reported for the previous call), the task's
/// earlier rounds are summarised, its goal and latest rounds kept.
#[derive(Debug, Default)]
struct MidTaskCompaction {
    /// Input tokens per request character of the last call.
    tokens_per_char: Option<f64>,
    /// History length below which no new attempt is made (after an attempt
    /// found nothing to summarise or failed).
    retry_from_len: usize,
}

impl MidTaskCompaction {
    fn calibrate(&mut self, start: &ModelCallStart<'_>, input_tokens: u64) {
        self.tokens_per_char = start
            .request_chars
            .and_then(|chars| crate::store::tokens_per_char(input_tokens, chars));
    }

    async fn run(
        &mut self,
        agent: &Agent,
        env: &LoopEnv,
        pending: &mut Batch,
        history: &mut Vec<ChatMessage>,
    ) -> Result<(), LoopError> {
        let Some(policy) = &env.context else {
            return Ok(());
        };
        if self.tokens_per_char.is_none()
            || history.len() < self.retry_from_len
            || !policy.over_threshold(
                wire_chars(&env.system_prompt, history),
                self.tokens_per_char,
            )
        {
            return Ok(());
        }
        // The view is read back from the database, so it must be complete.
        env.store.write(std::mem::take(pending)).await?;
        let (entries, latest) = env.store.conversation(&env.session_id).await?;
        let view = context::apply(entries, latest.as_ref());
        let summariser = Summariser {
            store: &env.store,
            provider: agent.provider.as_ref(),
            model: &agent.model,
            session_id: &env.session_id,
            task_id: Some(env.task_id),
            principal_id: env.principal_id,
            prices: &env.prices,
        };
        match policy.compact_task(&summariser, &view, env.task_id).await {
            Ok(Some(compaction)) => {
                *history = context::apply(view, Some(&compaction))
                    .into_iter()
                    .map(|entry| entry.message)
                    .collect();
                self.tokens_per_char = None;
                tracing::info!(
                    task_id = env.task_id,
                    messages = history.len(),
                    "history compacted while the task runs"
                );
            }
            Ok(None) => self.retry_from_len = history.len() + 2,
            Err(CompactError::Store(err)) => return Err(err.into()),
            Err(CompactError::Model(err)) => {
                tracing::warn!(error = %err, "compaction failed; continuing with the full history");
                self.retry_from_len = history.len() + 2;
            }
        }
        Ok(())
    }
}

/// Logs the first time a task passes 80 % of one of its budgets.
pub fn warn_at_80_percent(purse: &Purse, budget: Budget, used: u64, limit: u64) {
    if purse.first_past_80_percent(budget, used, limit) {
        tracing::warn!(
            budget = budget.as_str(),
            used,
            limit,
            "task passed 80% of a budget"
        );
    }
}

/// Counts how often in a row each tool call repeated with the same result.
#[derive(Debug, Default)]
struct RepeatTracker {
    last: Option<(String, String, String)>,
    times: u32,
}

impl RepeatTracker {
    /// Records one call and its result; returns how many times in a row this
    /// exact call gave this exact result.
    fn observe(&mut self, call: &ToolCall, result: &str) -> u32 {
        let key = (call.name.clone(), call.arguments.clone(), result.to_owned());
        if self.last.as_ref() == Some(&key) {
            self.times += 1;
        } else {
            self.last = Some(key);
            self.times = 1;
        }
        self.times
    }
}

/// Characters of a request's system prompt and messages (the part that grows).
pub fn wire_chars(system: &str, messages: &[ChatMessage]) -> i64 {
    let chars: usize = system.len()
        + messages
            .iter()
            .map(|message| match message {
                ChatMessage::User { content } => content.len(),
                ChatMessage::Assistant {
                    content,
                    tool_calls,
                } => {
                    content.as_ref().map_or(0, String::len)
                        + tool_calls
                            .iter()
                            .map(|call| call.name.len() + call.arguments.len() + call.id.len())
                            .sum::<usize>()
                }
                ChatMessage::Tool {
                    tool_call_id,
                    content,
                    ..
                } => tool_call_id.len() + content.len(),
            })
            .sum::<usize>();
    i64::try_from(chars).unwrap_or(i64::MAX)
}

/// Adds a wire message to the history and its entry to the pending writes
/// (committed with the next model call's `running` row at the latest).
fn append(
    env: &LoopEnv,
    pending: &mut Batch,
    history: &mut Vec<ChatMessage>,
    message: ChatMessage,
) -> Result<(), StoreError> {
    pending.append_message(&env.entry(message.clone()))?;
    history.push(message);
    Ok(())
}

fn meta_of(response: &ModelResponse, latency_ms: i64) -> MessageMeta {
    MessageMeta {
        reasoning: response.reasoning.clone(),
        model: Some(response.model.clone()),
        finish_reason: Some(response.finish_reason.clone()),
        usage: Some(response.usage),
        latency_ms: Some(latency_ms),
        request_id: response.request_id.clone(),
    }
}

/// Runs one round of tool calls, already checkpointed `running`,
/// concurrently; results come back in call order, one per call, each
/// carrying its call's id. A result is recorded as soon as its call ends
/// while others still run; the last one to end joins `pending`, the step's
/// next write, which follows at once.
async fn run_round(
    agent: &Arc<Agent>,
    env: &Arc<LoopEnv>,
    purse: &Arc<Purse>,
    assistant_id: i64,
    calls: &[ToolCall],
    pending: &mut Batch,
) -> Result<Vec<ChatMessage>, StoreError> {
    let running = AtomicUsize::new(calls.len());
    let runs = calls.iter().enumerate().map(|(index, call)| {
        let span = tracing::info_span!("tool", call_id = %call.id, name = %call.name);
        let running = &running;
        async move {
            let request_id = round_request_id(assistant_id, index);
            let (result, finish) = run_started_call(agent, env, purse, request_id, call).await;
            if running.fetch_sub(1, Ordering::AcqRel) == 1 {
                return (result, Ok(Some(finish)));
            }
            (result, env.store.write(finish).await.map(|_| None))
        }
        .instrument(span)
    });
    let mut results = Vec::with_capacity(calls.len());
    let mut failure = None;
    for (result, recorded) in join_all(runs).await {
        match recorded {
            Ok(Some(finish)) => pending.extend(finish),
            Ok(None) => {}
            Err(err) => failure = Some(err),
        }
        results.push(result);
    }
    match failure {
        Some(err) => Err(err),
        None => Ok(results),
    }
}

fn checkpoint<'a>(env: &'a LoopEnv, request_id: &'a str, call: &'a ToolCall) -> ToolCheckpoint<'a> {
    ToolCheckpoint {
        request_id,
        session_id: &env.session_id,
        task_id: Some(env.task_id),
        scope: &env.scope,
        call_id: &call.id,
        name: &call.name,
        arguments: &call.arguments,
    }
}

/// Answers the unanswered calls of an interrupted round from their
/// checkpoints: a finished call's stored result is reused; a call that never
/// started runs now; a call caught `running` is re-run with the same request
/// id only if its tool is idempotent, and otherwise gets an "outcome
/// unknown" error result, so the history never holds a call without a result.
async fn resume_round(
    agent: &Arc<Agent>,
    env: &Arc<LoopEnv>,
    purse: &Arc<Purse>,
    round: &InterruptedRound,
) -> Result<Vec<ChatMessage>, StoreError> {
    let mut results = Vec::new();
    for (index, call) in round.calls.iter().enumerate() {
        if round.answered.contains(&call.id) {
            continue;
        }
        let request_id = round_request_id(round.assistant_id, index);
        let checkpoint = env.store.tool_call_checkpoint(&request_id).await?;
        let result = match checkpoint {
            Some((status, Some(result))) if status == "done" || status == "failed" => {
                tracing::info!(call_id = %call.id, "recovery: reusing a finished tool result");
                ChatMessage::Tool {
                    tool_call_id: call.id.clone(),
                    content: result,
                    is_error: status == "failed",
                }
            }
            Some(_running) => {
                let idempotent = agent
                    .toolset
                    .get(&call.name)
                    .is_some_and(|tool| tool.idempotent());
                if idempotent {
                    tracing::info!(call_id = %call.id, "recovery: re-running an idempotent tool");
                    run_call(agent, env, purse, request_id, call).await?
                } else {
                    tracing::warn!(call_id = %call.id, "recovery: tool outcome unknown, not retried");
                    let content = canonical_json(&result_object(Err(
                        "the gateway restarted while this tool was running; its outcome is \
                         unknown and it was not retried"
                            .to_owned(),
                    )));
                    env.store
                        .finish_tool_call(&request_id, &content, true)
                        .await?;
                    ChatMessage::Tool {
                        tool_call_id: call.id.clone(),
                        content,
                        is_error: true,
                    }
                }
            }
            None => run_call(agent, env, purse, request_id, call).await?,
        };
        results.push(result);
    }
    Ok(results)
}

/// Checkpoints one call `running`, then runs it.
async fn run_call(
    agent: &Arc<Agent>,
    env: &Arc<LoopEnv>,
    purse: &Arc<Purse>,
    request_id: String,
    call: &ToolCall,
) -> Result<ChatMessage, StoreError> {
    env.store
        .start_tool_call(&checkpoint(env, &request_id, call))
        .await?;
    let (result, finish) = run_started_call(agent, env, purse, request_id, call).await;
    env.store.write(finish).await?;
    Ok(result)
}

/// Runs a call already checkpointed `running`; returns its result and the
/// write that records it.
async fn run_started_call(
    agent: &Arc<Agent>,
    env: &Arc<LoopEnv>,
    purse: &Arc<Purse>,
    request_id: String,
    call: &ToolCall,
) -> (ChatMessage, Batch) {
    let started = Instant::now();
    let outcome = execute(agent, env, purse, &request_id, call).await;
    let failed = outcome.is_err();
    let content = canonical_json(&result_object(outcome));
    let mut finish = Batch::new();
    finish.finish_tool_call(&request_id, &content, failed);
    tracing::info!(
        status = if failed { "failed" } else { "done" },
        duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        "tool call"
    );
    let result = ChatMessage::Tool {
        tool_call_id: call.id.clone(),
        content,
        is_error: failed,
    };
    (result, finish)
}

/// Finds, validates and runs one call, containing every failure.
async fn execute(
    agent: &Arc<Agent>,
    env: &Arc<LoopEnv>,
    purse: &Arc<Purse>,
    request_id: &str,
    call: &ToolCall,
) -> Result<Value, String> {
    let Some(tool) = agent.toolset.get(&call.name).cloned() else {
        return Err(format!(
            "unknown tool `{}`; available tools: {}",
            call.name,
            agent.toolset.names().join(", ")
        ));
    };
    let args: Value = serde_json::from_str(&call.arguments)
        .map_err(|err| format!("the arguments are not valid JSON: {err}"))?;
    if !args.is_object() {
        return Err("the arguments must be a JSON object".to_owned());
    }
    let ctx = ToolContext {
        request_id: request_id.to_owned(),
        session_id: env.session_id.clone(),
        subagents: Some(Arc::new(SubAgentRunner::new(
            Arc::clone(agent),
            Arc::clone(env),
            Arc::clone(purse),
            request_id.to_owned(),
        ))),
    };
    let timeout = env.tool_timeout;
    // Spawned so a panicking tool is caught as a JoinError instead of
    // unwinding through the loop.
    let mut task =
        tokio::spawn(async move { tokio::time::timeout(timeout, tool.call(&ctx, args)).await });
    let joined = tokio::select! {
        joined = &mut task => joined,
        () = env.cancel.cancelled() => {
            task.abort();
            return Err("cancelled: the task was stopped before this tool finished".to_owned());
        }
    };
    match joined {
        Ok(Ok(Ok(value))) => Ok(value),
        Ok(Ok(Err(ToolError::InvalidArguments(message)))) => {
            Err(format!("invalid arguments: {message}"))
        }
        Ok(Ok(Err(ToolError::Failed(message)))) => Err(message),
        Ok(Err(_elapsed)) => Err(format!(
            "the tool did not finish within {} s",
            timeout.as_secs_f32()
        )),
        Err(join_error) => {
            tracing::error!(error = %join_error, "tool panicked");
            Err("the tool failed unexpectedly".to_owned())
        }
    }
}

/// The object the model sees: the tool's fields plus `success`.
fn result_object(outcome: Result<Value, String>) -> Value {
    match outcome {
        Ok(Value::Object(mut fields)) => {
            fields.insert("success".to_owned(), Value::Bool(true));
            Value::Object(fields)
        }
        Ok(other) => {
            let mut fields = Map::new();
            fields.insert("success".to_owned(), Value::Bool(true));
            fields.insert("result".to_owned(), other);
            Value::Object(fields)
        }
        Err(error) => {
            let mut fields = Map::new();
            fields.insert("success".to_owned(), Value::Bool(false));
            fields.insert("error".to_owned(), Value::String(error));
            Value::Object(fields)
        }
    }
}
