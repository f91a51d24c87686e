//! The agent loop: call the model, run the tools it asks for, write every
//! step back, repeat until the model is done or the wallet is empty.
//!
//! Each iteration is a few named steps: check the task may go on, compact a
//! history that outgrew the window, take a step from the purse, call the
//! model, settle its usage against the limits, then either answer or run the
//! round of tools it asked for (see [`super::round`]). How the loop ended is
//! one type: [`LoopEnd`] for an answer, [`LoopError`] (whose messages are
//! what users see) otherwise. When the turn has live subscribers
//! ([`super::live`]), each model call is streamed and its text published as
//! it arrives, with tool calls as they start and end; the stored steps are
//! the same either way.

use crate::domain::{
    CallOptions, ChatMessage, InboundId, Outcome, PrincipalId, Scope, SessionId, ToolCall,
};
use crate::metrics::Metrics;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::Agent;
use super::asking::{Asker, Gate, gate, nonce};
use super::cache_watch::{CacheWatch, Shape};
use super::client_tools::ClientTools;
use super::context::{self, CompactError, ContextPolicy, Summariser};
use super::live::{LiveEvent, LiveTurn};
use super::prompt::split_system;
use super::round::{refused, resume_round, run_round};
use super::step::{self, CutShort};
use super::wallet::{Budget, CallKind, Purse};
use crate::llm::{
    CacheTail, LlmError, ModelRequest, ModelResponse, OnStream, StreamEvent, ToolChoice,
};
use crate::store::{
    Batch, MessageMeta, ModelCallStart, NewMessage, RoundStart, Store, StoreError, round_request_id,
};
use crate::tools::approval::ApprovalPolicy;
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
    /// Where the loop counts its model and tool calls.
    pub metrics: Metrics,
    /// What the prompt-cache report compares each model call with.
    pub cache_watch: CacheWatch,
    pub session_id: SessionId,
    pub task_id: InboundId,
    /// `""` for the session's own conversation; a sub-agent's path otherwise.
    pub scope: Scope,
    /// Who sent the task's message; its model calls are counted against
    /// this principal's daily spend.
    pub principal_id: Option<PrincipalId>,
    /// Prices per model, for each call's cost estimate.
    pub prices: Arc<BTreeMap<String, Price>>,
    pub system_prompt: String,
    /// How long the conversation was idle before this task: what the
    /// cache TTL policy reads (`llm.cache_ttl`).
    pub idle: Duration,
    pub max_tokens: u32,
    /// What the client asked of the turn's model calls (`api::options`):
    /// a structured-output format, sampling settings, a lower output cap,
    /// stop sequences, a seed. Empty for a sub-agent.
    pub call_options: Arc<CallOptions>,
    /// The API client's own function tools: offered after the agent's,
    /// handed to the client when called. None for a sub-agent.
    pub client_tools: Arc<ClientTools>,
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
    /// Where the turn's live events go; `None` for sub-agents, whose text
    /// is not the turn's reply.
    pub live: Option<LiveTurn>,
    /// Who the turn's questions go to; `None` in a sub-agent, which asks
    /// nobody (its `ask` tools are refused).
    pub asker: Option<Arc<Asker>>,
    /// Where a tool's own questions (an MCP server's elicitation) go;
    /// `None` in a sub-agent, as `asker`.
    pub person: Option<Arc<dyn crate::tools::AskPerson>>,
    /// Which tools ask first.
    pub policy: Arc<ApprovalPolicy>,
    /// Where the files tools return are kept, and how they are shown.
    pub media: Arc<crate::media::Media>,
}

impl LoopEnv {
    /// The transcript entry of a wire message of this loop's task and scope.
    pub fn entry(&self, message: ChatMessage) -> NewMessage {
        NewMessage::from_wire(&self.session_id, Some(self.task_id), &self.scope, message)
    }

    /// Tells the turn's live subscribers, if any, about `event`.
    pub fn publish(&self, event: impl FnOnce() -> LiveEvent) {
        if let Some(live) = &self.live {
            live.publish(event());
        }
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
        self.daily_nanousd as f64 / 1e9
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
    /// The turn's outcome when the loop ended so.
    pub fn outcome(self) -> Outcome {
        match self {
            Self::Answered => Outcome::Answered,
            Self::BudgetExhausted => Outcome::BudgetExhausted,
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
    /// Calls wait for a person: the turn parks until these approvals are
    /// decided (everything before them is stored).
    #[error("the task waits for a person's decision")]
    Parked(Vec<i64>),
    /// The model called the API client's own tools: the turn ends handing
    /// the calls to the client (everything before them is stored).
    #[error("the task handed tool calls to the client")]
    ClientCalls,
}

impl CutShort for LoopError {
    fn cut_short(&self) -> bool {
        match self {
            Self::Cancelled => true,
            Self::Model(err) => err.cut_short(),
            _ => false,
        }
    }
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

/// Bytes (UTF-8, not characters) of a request's system prompt and messages:
/// the part that grows. Stored as a model call's `request_chars`; the ratio
/// of reported input tokens to this count calibrates compaction.
pub fn wire_bytes<'a>(system: &str, messages: impl IntoIterator<Item = &'a ChatMessage>) -> i64 {
    let bytes: usize = system.len()
        + messages
            .into_iter()
            .map(|message| match message {
                // A text file's bytes are sent as text; images are not
                // counted (their token cost is the provider's own).
                ChatMessage::User { content, media } => media
                    .iter()
                    .filter(|file| !file.is_image())
                    .map(|file| usize::try_from(file.size).unwrap_or(usize::MAX))
                    .fold(content.len(), usize::saturating_add),
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
    i64::try_from(bytes).unwrap_or(i64::MAX)
}

/// The loop proper: complete an interrupted round, then step until the
/// model answers or a limit stops it.
async fn drive(
    agent: &Arc<Agent>,
    env: &Arc<LoopEnv>,
    purse: &Arc<Purse>,
    mut history: Vec<ChatMessage>,
    interrupted: Option<InterruptedRound>,
    pending: &mut Batch,
) -> Result<LoopOutcome, LoopError> {
    if let Some(round) = interrupted {
        let resumed = resume_round(agent, env, purse, &round).await?;
        for result in resumed.results {
            append(env, pending, &mut history, result)?;
        }
        if !resumed.waiting.is_empty() {
            return Err(LoopError::Parked(resumed.waiting));
        }
        if resumed.client_calls {
            return Err(LoopError::ClientCalls);
        }
    }
    let mut iteration = 0u32;
    let mut repeats = RepeatTracker::default();
    let mut compaction = MidTaskCompaction::default();
    loop {
        iteration += 1;
        check_before_step(env, purse)?;
        compaction.run(agent, env, pending, &mut history).await?;
        let kind = take_step(env, purse, pending, &mut history, iteration)?;
        let step = match call_step(agent, env, kind, &history, pending, iteration).await {
            Err(LoopError::Model(err))
                if err.is_too_long() && super::shrink::shrink_tool_results(&mut history) =>
            {
                tracing::warn!(scope = %env.scope, "request refused as too long; retrying once with the largest tool results cut");
                call_step(agent, env, kind, &history, pending, iteration).await?
            }
            step => step?,
        };
        compaction.calibrate(step.request_bytes, step.response.usage.input_tokens);
        settle_usage(env, purse, &step)?;
        if step.response.tool_calls.is_empty() || kind == CallKind::Final {
            return Ok(answer(env, step, kind));
        }
        run_tools(agent, env, purse, step, &mut history, pending, &mut repeats).await?;
    }
}

/// One answered model call of the loop, its outcome added to the pending
/// writes.
struct Step {
    response: ModelResponse,
    meta: MessageMeta,
    cost_nanousd: Option<i64>,
    /// What [`wire_bytes`] counted for the request.
    request_bytes: i64,
}

/// Stops a cancelled task, and one whose principal reached the daily spend
/// limit.
fn check_before_step(env: &LoopEnv, purse: &Purse) -> Result<(), LoopError> {
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
    Ok(())
}

/// Spends one call from the purse: a step while the budget lasts, then one
/// final call that asks (with [`BUDGET_NOTE`]) for a summary.
fn take_step(
    env: &LoopEnv,
    purse: &Purse,
    pending: &mut Batch,
    history: &mut Vec<ChatMessage>,
    iteration: u32,
) -> Result<CallKind, LoopError> {
    let kind = if purse.try_spend(CallKind::Step) {
        CallKind::Step
    } else if purse.try_spend(CallKind::Final) {
        append(
            env,
            pending,
            history,
            ChatMessage::User {
                content: BUDGET_NOTE.to_owned(),
                media: Vec::new(),
            },
        )?;
        tracing::warn!(
            iteration,
            scope = %env.scope,
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
    Ok(kind)
}

/// Makes the step's model call as a recorded step: the pending writes go
/// out with its `running` row, and its outcome becomes the next pending
/// write. A final call keeps the tools (the prefix stays cached, and
/// Anthropic refuses tool blocks in a history without tools) and may not
/// use them.
async fn call_step(
    agent: &Agent,
    env: &LoopEnv,
    kind: CallKind,
    history: &[ChatMessage],
    pending: &mut Batch,
    iteration: u32,
) -> Result<Step, LoopError> {
    let tool_choice = match kind {
        CallKind::Step => ToolChoice::Auto,
        CallKind::Final => ToolChoice::None,
    };
    let (system, system_tail) = split_system(&env.system_prompt);
    // A tool call the client required is asked of the task's first call.
    let later;
    let options = if iteration > 1 && env.call_options.tool_choice.is_some() {
        later = env.call_options.after_first_call();
        &later
    } else {
        &*env.call_options
    };
    let request = ModelRequest {
        model: &agent.model,
        system,
        system_tail,
        messages: history,
        tools: env.client_tools.offered(agent.toolset.specs()),
        tool_choice,
        cache_tail: CacheTail::Write,
        idle: env.idle,
        max_tokens: options.max_tokens(env.max_tokens),
        options,
    };
    let started = Instant::now();
    let request_id = step::request_id();
    let request_bytes = wire_bytes(&env.system_prompt, history);
    let start = ModelCallStart {
        request_id: &request_id,
        session_id: &env.session_id,
        task_id: Some(env.task_id),
        scope: &env.scope,
        principal_id: env.principal_id,
        provider: agent.provider_kind.as_str(),
        model: &agent.model,
        request_chars: Some(request_bytes),
    };
    env.publish(|| LiveEvent::Round { round: iteration });
    let watched = step::Watched {
        watch: &env.cache_watch,
        scope: &env.scope,
        shape: Shape::of(&request),
    };
    let call = call_model(agent, env, request);
    let recorded = step::recorded(
        &env.store,
        &env.metrics,
        &start,
        &env.prices,
        std::mem::take(pending),
        watched,
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
        scope = %env.scope,
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
    let meta = meta_of(&response, latency_ms);
    Ok(Step {
        response,
        meta,
        cost_nanousd,
        request_bytes,
    })
}

/// Counts the step's tokens and cost against the task's limits: past the
/// token limit the task stops; at 80 % of a budget it warns.
fn settle_usage(env: &LoopEnv, purse: &Purse, step: &Step) -> Result<(), LoopError> {
    let usage = &step.response.usage;
    let task_tokens = purse.add_tokens(usage.input_tokens + usage.output_tokens);
    let limit = env.limits.max_tokens;
    if limit > 0 && task_tokens > limit {
        tracing::warn!(task_tokens, limit, "task token limit reached");
        return Err(LoopError::TokenLimit { limit });
    }
    warn_at_80_percent(purse, Budget::Tokens, task_tokens, limit);
    let task_cost = purse.add_cost(step.cost_nanousd.unwrap_or(0));
    if let Some(spend) = env.limits.spend {
        let spent = spend.spent_before.saturating_add(task_cost);
        warn_at_80_percent(
            purse,
            Budget::Spend,
            u64::try_from(spent).unwrap_or(0),
            u64::try_from(spend.daily_nanousd).unwrap_or(0),
        );
    }
    Ok(())
}

/// The loop's outcome from the step that answered.
fn answer(env: &LoopEnv, step: Step, kind: CallKind) -> LoopOutcome {
    let text = step.response.content.clone().unwrap_or_default();
    let final_message = env
        .entry(ChatMessage::Assistant {
            content: step.response.content,
            tool_calls: Vec::new(),
        })
        .with_meta(step.meta);
    let end = match kind {
        CallKind::Step => LoopEnd::Answered,
        CallKind::Final => LoopEnd::BudgetExhausted,
    };
    LoopOutcome {
        final_message,
        text,
        end,
        writes: Batch::new(),
    }
}

/// Stores the step's assistant entry with its round's `running`
/// checkpoints, runs the round, and appends the results; stops a loop that
/// keeps getting the same result for the same call.
async fn run_tools(
    agent: &Arc<Agent>,
    env: &Arc<LoopEnv>,
    purse: &Arc<Purse>,
    step: Step,
    history: &mut Vec<ChatMessage>,
    pending: &mut Batch,
    repeats: &mut RepeatTracker,
) -> Result<(), LoopError> {
    let calls = step.response.tool_calls;
    let gates = gate(agent, env, &calls).await?;
    let awaiting: Vec<usize> = (0..calls.len())
        .filter(|&index| matches!(gates[index], Gate::Ask { .. }))
        .collect();
    let client: Vec<usize> = (0..calls.len())
        .filter(|&index| gates[index] == Gate::Client)
        .collect();
    let assistant = ChatMessage::Assistant {
        content: step.response.content,
        tool_calls: calls.clone(),
    };
    // The call's outcome, the entry it produced, the round's checkpoints
    // (`running`, or `awaiting` with their approvals) in one write; the
    // entry's id names the round's tool calls.
    pending.append_message(&env.entry(assistant.clone()).with_meta(step.meta))?;
    pending.start_round(&RoundStart {
        session_id: &env.session_id,
        task_id: Some(env.task_id),
        scope: &env.scope,
        calls: &calls,
        awaiting: &awaiting,
        client: &client,
    });
    for &index in &awaiting {
        // Only a loop with someone to ask has calls that ask.
        if let (Some(asker), Gate::Ask { kind, choices }) = (&env.asker, &gates[index]) {
            let nonce = nonce();
            let approval = asker.approval(env, &calls[index], *kind, choices, &nonce);
            pending.ask_in_round(&approval, &env.scope, index);
        }
    }
    let ids = env.store.write_ids(std::mem::take(pending)).await?;
    let split = ids
        .len()
        .checked_sub(awaiting.len() + 1)
        .ok_or_else(|| StoreError::Corrupt("no id for the assistant entry".to_owned()))?;
    let assistant_id = ids[split];
    let asked = ids[split + 1..].to_vec();
    history.push(assistant);
    for call in &calls {
        env.publish(|| LiveEvent::ToolCall {
            id: call.id.clone(),
            name: call.name.clone(),
            arguments: call.arguments.clone(),
        });
    }
    let mut results: Vec<Option<ChatMessage>> = vec![None; calls.len()];
    for (index, gate) in gates.iter().enumerate() {
        if let Gate::Refuse(reason) = gate {
            let result = refused(&calls[index], reason);
            if let ChatMessage::Tool { content, .. } = &result {
                env.metrics.tool_call(&calls[index].name, true, "refused");
                pending.finish_tool_call(&round_request_id(assistant_id, index), content, true);
            }
            results[index] = Some(result);
        }
    }
    let runs: Vec<(usize, &ToolCall)> = calls
        .iter()
        .enumerate()
        .filter(|(index, _)| gates[*index] == Gate::Run)
        .collect();
    let ran = run_round(agent, env, purse, assistant_id, &runs, pending).await?;
    let mut stuck = None;
    for (&(index, call), result) in runs.iter().zip(ran) {
        if let ChatMessage::Tool { content, .. } = &result {
            let times = repeats.observe(call, content);
            if env.limits.repeat_limit > 0 && times >= env.limits.repeat_limit {
                stuck = Some(LoopError::NoProgress {
                    tool: call.name.clone(),
                    times,
                });
            }
        }
        results[index] = Some(result);
    }
    for result in results.into_iter().flatten() {
        append(env, pending, history, result)?;
    }
    if !asked.is_empty() {
        tracing::info!(approvals = ?asked, "calls wait for a person; the turn parks");
        return Err(LoopError::Parked(asked));
    }
    if !client.is_empty() {
        tracing::info!(
            calls = client.len(),
            "the model called the client's tools; handed to it"
        );
        return Err(LoopError::ClientCalls);
    }
    if let Some(stuck) = stuck {
        tracing::warn!(error = %stuck, "stopping a loop that makes no progress");
        return Err(stuck);
    }
    Ok(())
}

/// Calls the model, racing the task's cancellation, and falls back to the
/// configured fallback model once when the session's model keeps failing.
/// Streams the call when someone follows the turn live, publishing its text
/// (and a restart when the fallback takes over from a call that had sent
/// some).
async fn call_model(
    agent: &Agent,
    env: &LoopEnv,
    request: ModelRequest<'_>,
) -> Result<ModelResponse, LoopError> {
    let live = env.live.as_ref().filter(|live| live.is_watched());
    let heard = AtomicBool::new(false);
    let publish = |event: StreamEvent<'_>| {
        let Some(live) = live else { return };
        match event {
            StreamEvent::Text("") => {}
            StreamEvent::Text(text) => {
                heard.store(true, Ordering::Release);
                live.publish(LiveEvent::Text(text.to_owned()));
            }
            StreamEvent::Restart => live.publish(LiveEvent::Restart),
        }
    };
    let on: Option<OnStream<'_>> = live.map(|_| &publish as OnStream<'_>);
    let first = tokio::select! {
        result = model_call(agent, &request, on) => result,
        () = env.cancel.cancelled() => return Err(LoopError::Cancelled),
    };
    match (first, &env.limits.fallback_model) {
        (Err(err), Some(fallback)) if err.is_retryable() && fallback != request.model => {
            tracing::warn!(error = %err, fallback, "model failing; trying the fallback model");
            if heard.swap(false, Ordering::AcqRel) {
                env.publish(|| LiveEvent::Restart);
            }
            let request = ModelRequest {
                model: fallback,
                ..request
            };
            tokio::select! {
                result = model_call(agent, &request, on) => Ok(result?),
                () = env.cancel.cancelled() => Err(LoopError::Cancelled),
            }
        }
        (result, _) => Ok(result?),
    }
}

/// One model call: streamed to `on` when given, else plain.
async fn model_call(
    agent: &Agent,
    request: &ModelRequest<'_>,
    on: Option<OnStream<'_>>,
) -> Result<ModelResponse, LlmError> {
    match on {
        Some(on) => agent.provider.stream(request, on).await,
        None => agent.provider.complete(request).await,
    }
}

/// Compaction between the iterations of a long task: when the history would
/// pass the context threshold (estimated at the ratio of tokens to request
/// bytes the provider reported for the previous call), the task's
/// earlier rounds are summarised, its goal and latest rounds kept.
#[derive(Debug, Default)]
struct MidTaskCompaction {
    /// Input tokens per request byte of the last call.
    tokens_per_byte: Option<f64>,
    /// History length below which no new attempt is made (after an attempt
    /// found nothing to summarise or failed).
    retry_from_len: usize,
}

impl MidTaskCompaction {
    fn calibrate(&mut self, request_bytes: i64, input_tokens: u64) {
        self.tokens_per_byte = crate::store::tokens_per_char(input_tokens, request_bytes);
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
        if self.tokens_per_byte.is_none()
            || history.len() < self.retry_from_len
            || !policy.over_threshold(
                wire_bytes(&env.system_prompt, history.iter()),
                self.tokens_per_byte,
            )
        {
            return Ok(());
        }
        // The view is read back from the database, so it must be complete.
        env.store.write(std::mem::take(pending)).await?;
        let (entries, latest) = env.store.transcript().conversation(&env.session_id).await?;
        let view = context::apply(entries, latest.as_ref());
        let summariser = Summariser {
            store: &env.store,
            metrics: &env.metrics,
            cache_watch: &env.cache_watch,
            provider: agent.provider.as_ref(),
            model: &agent.model,
            system: &env.system_prompt,
            tools: agent.toolset.specs(),
            idle: env.idle,
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
                self.tokens_per_byte = None;
                tracing::info!(
                    task_id = env.task_id.get(),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_bytes_counts_utf8_bytes_not_characters() {
        let messages = [ChatMessage::User {
            content: "日本".to_owned(),
            media: Vec::new(),
        }];
        assert_eq!(wire_bytes("ab", &messages), 2 + 6);
    }
}
