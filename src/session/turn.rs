//! One turn: load the session row and its history from the database (always,
//! even when a cached agent exists), run the agent loop, and end the turn in
//! one transaction with its reply in the outbox.

use crate::domain::{
    ChatMessage, ClientResult, InboundId, InboundStatus, MediaRef, Outcome, PrincipalId, Scope,
    SessionId, StopCause, ToolCall, TurnOptions,
};
use crate::metrics::Metrics;
use crate::tools::tasks::TaskSettings;
use crate::tools::tasks::TaskWake;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::commands::Task;
use super::elicit::PersonAsker;
use super::task_runs::{TaskRun, relay_entries};
use super::{notices, speaker, texts};
use crate::agent::Agent;
use crate::agent::asking::Asker;
use crate::agent::cache::AgentCache;
use crate::agent::cache_watch::CacheWatch;
use crate::agent::client_tools::ClientTools;
use crate::agent::context::{self, CompactError, ContextPolicy, Summariser};
use crate::agent::live::LiveTurn;
use crate::agent::prompt::offers_memory;
use crate::agent::run::{
    InterruptedRound, LoopEnd, LoopEnv, LoopError, LoopOutcome, SpendLimit, TaskLimits, run_loop,
    warn_at_80_percent,
};
use crate::agent::settings::{AgentSettings, ContextSettings, LimitSettings};
use crate::agent::step::estimated_input;
use crate::agent::wallet::{Budget, Purse, Wallet};
use crate::llm::ModelFailure;
use crate::media::Media;
use crate::store::{
    Batch, DirectChat, Fence, InboundRow, NewMessage, OutboxRow, SessionRow, SessionView, Store,
    StoreError, TurnEnd, WireEntry, round_request_id,
};
use crate::tools::ToolRegistry;
use crate::tools::memory::MEMORY;
use crate::tools::settings::MemorySettings;
use crate::usage::Price;

/// Tokens per character no real tokenizer exceeds for ordinary text; a view
/// under the threshold at this ratio needs no calibrated estimate.
const GENEROUS_RATIO: f64 = 0.5;

/// Runs turns; shared by all session workers.
pub struct TurnExecutor {
    pub store: Store,
    pub cache: Arc<AgentCache>,
    pub registry: Arc<ToolRegistry>,
    pub agent: AgentSettings,
    pub limits: LimitSettings,
    pub context: ContextSettings,
    /// Long-term memory: its limits, and whether compaction extracts facts.
    pub memory: MemorySettings,
    pub max_tokens: u32,
    pub prices: Arc<BTreeMap<String, Price>>,
    /// The blob store images are shown to vision models from.
    pub media: Arc<Media>,
    /// Where turns, model calls and tool calls are counted.
    pub metrics: Metrics,
    /// The last model call of each conversation, which the prompt-cache
    /// report compares the next with.
    pub cache_watch: CacheWatch,
    /// What task runs are limited by.
    pub tasks: TaskSettings,
    /// Hands a background run's answer to the scheduler, which wakes its
    /// conversation.
    pub task_wake: Arc<TaskWake>,
    /// `access.admins`: who decides the approvals `tools.approval.approver
    /// = "admins"` routes to them.
    pub admins: Vec<String>,
}

/// How a turn left its message: the row to deliver (the reply, or a
/// parked turn's first question) with the message's status, and a parked
/// turn's further questions.
#[derive(Debug, Clone)]
pub struct Ended {
    pub row: OutboxRow,
    pub status: InboundStatus,
    pub more: Vec<OutboxRow>,
}

impl From<(OutboxRow, InboundStatus)> for Ended {
    fn from((row, status): (OutboxRow, InboundStatus)) -> Self {
        Self {
            row,
            status,
            more: Vec::new(),
        }
    }
}

/// The handle that stops one running turn.
#[derive(Debug, Default)]
pub struct TurnControl {
    pub token: CancellationToken,
    cause: std::sync::Mutex<Option<StopCause>>,
    /// The running task's purse, once the turn has opened it (for `/status`).
    purse: std::sync::OnceLock<Arc<Purse>>,
    /// Where the turn's live events go.
    live: Option<LiveTurn>,
    /// The `trace_id` of the turn's log lines, once the runner named it.
    trace_id: std::sync::OnceLock<String>,
}

impl TurnControl {
    /// The control of a turn whose live events go to `live`.
    pub fn with_live(live: LiveTurn) -> Self {
        Self {
            live: Some(live),
            ..Self::default()
        }
    }

    /// Names the turn's `trace_id` (the first name given stays), stored
    /// with the message when the task starts.
    pub fn set_trace_id(&self, trace_id: String) {
        let _ = self.trace_id.set(trace_id);
    }

    /// The turn's `trace_id`, once named.
    pub fn trace_id(&self) -> Option<&str> {
        self.trace_id.get().map(String::as_str)
    }

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

/// How a turn ended: what its reply says ([`texts::turn_reply`]), the status
/// its message is left in, and the outcome name stored with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnOutcome {
    /// The model answered (`end` says whether it finished or summarised at
    /// the end of its budget).
    Answered { text: String, end: LoopEnd },
    /// `/compact`: older history was summarised.
    Compacted,
    /// `/compact` on a conversation too short to summarise.
    NothingToCompact,
    /// `/compact` whose summary could not be made.
    CompactionFailed,
    /// `/compact` from a principal over its daily spend.
    CompactionOverSpend,
    /// The model call failed for good; `failure` says how (each kind has
    /// its own reply).
    ModelError { failure: ModelFailure },
    /// A database write of the turn failed (the conversation could not be
    /// stored), other than a lost lease.
    StoreFailed,
    /// The task ran past its wall-clock limit of `secs` seconds.
    TimeLimit { secs: u64 },
    /// A newer message interrupted the task (`sessions.busy = "interrupt"`).
    Interrupted,
    /// `/stop`.
    Cancelled,
    /// The task's token limit; `reason` is the limit's own wording.
    TokenLimit { reason: String },
    /// The same tool result repeated; `reason` names the tool.
    NoProgress { reason: String },
    /// The principal's daily spend cap; `reason` names the cap.
    SpendLimit { reason: String },
    /// The step budget was spent before the model could answer.
    BudgetExhausted,
    /// A file of the message could not be made readable when the turn
    /// started (a voice note the transcription server failed on, or with
    /// no speech in it); `reply` says which and why. No model call.
    MediaRefused { reply: String },
    /// The model called the API client's own tools; `text` is what it
    /// wrote with the calls. The client's next request brings the results.
    ClientTools { text: String },
}

impl TurnOutcome {
    /// The status the turn's message is left in.
    pub fn status(&self) -> InboundStatus {
        match self {
            Self::Answered { .. } | Self::ClientTools { .. } => InboundStatus::Done,
            Self::Compacted
            | Self::NothingToCompact
            | Self::CompactionFailed
            | Self::CompactionOverSpend => InboundStatus::Command,
            Self::ModelError { .. }
            | Self::StoreFailed
            | Self::TimeLimit { .. }
            | Self::Interrupted
            | Self::Cancelled
            | Self::TokenLimit { .. }
            | Self::NoProgress { .. }
            | Self::SpendLimit { .. }
            | Self::BudgetExhausted
            | Self::MediaRefused { .. } => InboundStatus::Failed,
        }
    }

    /// The outcome as stored on the message.
    pub fn outcome(&self) -> Outcome {
        match self {
            Self::Answered { end, .. } => end.outcome(),
            Self::Compacted | Self::NothingToCompact | Self::CompactionFailed => Outcome::Compact,
            Self::CompactionOverSpend | Self::SpendLimit { .. } => Outcome::SpendLimit,
            Self::ModelError { .. } => Outcome::ModelError,
            Self::StoreFailed => Outcome::StoreError,
            Self::TimeLimit { .. } => Outcome::TimeLimit,
            Self::Interrupted => Outcome::Interrupted,
            Self::Cancelled => Outcome::Cancelled,
            Self::TokenLimit { .. } => Outcome::TokenLimit,
            Self::NoProgress { .. } => Outcome::NoProgress,
            Self::BudgetExhausted => Outcome::BudgetExhausted,
            Self::MediaRefused { .. } => Outcome::MediaRefused,
            Self::ClientTools { .. } => Outcome::ClientTools,
        }
    }

    /// The outcome of a loop that stopped without an answer; `cause` is why
    /// a cancelled turn was stopped. A database failure stays an error.
    fn of_error(
        err: LoopError,
        cause: Option<StopCause>,
        time_limit: Duration,
    ) -> Result<Self, StoreError> {
        Ok(match err {
            LoopError::Store(err) => return Err(err),
            LoopError::Model(err) => {
                let failure = err.failure();
                tracing::error!(
                    error = %err,
                    failure = failure.as_str(),
                    "model call failed; the turn ends with an apology"
                );
                Self::ModelError { failure }
            }
            LoopError::Cancelled => match cause {
                Some(StopCause::TimeLimit) => Self::TimeLimit {
                    secs: time_limit.as_secs(),
                },
                Some(StopCause::Interrupted) => Self::Interrupted,
                Some(StopCause::User) | None => Self::Cancelled,
            },
            err @ LoopError::TokenLimit { .. } => Self::TokenLimit {
                reason: err.to_string(),
            },
            err @ LoopError::NoProgress { .. } => Self::NoProgress {
                reason: err.to_string(),
            },
            err @ LoopError::SpendLimit { .. } => Self::SpendLimit {
                reason: err.to_string(),
            },
            LoopError::NoBudget => Self::BudgetExhausted,
            LoopError::Parked(_) => {
                return Err(StoreError::Corrupt(
                    "a parked turn is not an outcome".to_owned(),
                ));
            }
            LoopError::ClientCalls => Self::ClientTools {
                text: String::new(),
            },
        })
    }
}

impl TurnExecutor {
    /// Runs the turn for one inbound message (already claimed under
    /// `fence`) and returns its outbox row and how it ended. Every write of
    /// the turn is conditional on `fence` still being the session's grant.
    ///
    /// A database failure during the turn ends it with
    /// [`TurnOutcome::StoreFailed`] when that much can still be written (the
    /// failing write was one of the turn's, such as an entry the database
    /// refuses); a lost lease never does.
    ///
    /// # Errors
    /// A database failure that left not even the apology writable, or
    /// [`StoreError::LeaseLost`]; the message stays unfinished and is
    /// retried (by whoever holds the lease).
    pub async fn run(
        &self,
        inbound: &InboundRow,
        control: &TurnControl,
        fence: Fence,
    ) -> Result<Ended, StoreError> {
        let started = Instant::now();
        let store = self.store.fenced(fence);
        match self.run_fenced(&store, inbound, control, started).await {
            Err(err) if !matches!(err, StoreError::LeaseLost) => self
                .store_failed(&store, inbound, err, Batch::new(), started)
                .await
                .map(Ended::from),
            result => result,
        }
    }

    /// Ends the turn with [`TurnOutcome::StoreFailed`] after `err`, with
    /// `writes` (bookkeeping of the turn that is still worth keeping).
    /// Returns `err` when even that cannot be written.
    async fn store_failed(
        &self,
        store: &Store,
        inbound: &InboundRow,
        err: StoreError,
        writes: Batch,
        started: Instant,
    ) -> Result<(OutboxRow, InboundStatus), StoreError> {
        tracing::error!(
            error = %err,
            "storing the conversation failed; the turn ends with an apology"
        );
        let outcome = TurnOutcome::StoreFailed;
        match self
            .finish(store, inbound, &outcome, None, writes, started)
            .await
        {
            Ok(finished) => Ok(finished),
            Err(again) => {
                tracing::error!(
                    error = %again,
                    "the failed turn could not be recorded either; it is tried again"
                );
                Err(err)
            }
        }
    }

    /// The turn proper, every write through `store` (fenced).
    async fn run_fenced(
        &self,
        store: &Store,
        inbound: &InboundRow,
        control: &TurnControl,
        started: Instant,
    ) -> Result<Ended, StoreError> {
        if let Some(answer) = &inbound.relay {
            return self
                .relay(store, inbound, answer, started)
                .await
                .map(Ended::from);
        }
        let mut turn = self.prepare(inbound).await?;
        if let Some(answer) = self.compact(store, inbound, &mut turn).await? {
            return self
                .finish(store, inbound, &answer, None, Batch::new(), started)
                .await
                .map(Ended::from);
        }
        let media = match self.user_media(inbound, &turn).await? {
            Ok(media) => media,
            Err(refused) => {
                return self
                    .finish(store, inbound, &refused, None, Batch::new(), started)
                    .await
                    .map(Ended::from);
            }
        };
        let task = self
            .start_task(store, inbound, control, turn, media)
            .await?;
        let time_limit = self.limits.task_timeout;
        let purse = Arc::clone(&task.purse);
        let result = run_within_limits(task, control, time_limit).await;
        tracing::info!(model_calls = purse.task_calls(), "turn finished");
        if let Err(LoopError::Parked(approvals)) = &result {
            return self.park(store, inbound, approvals).await;
        }
        let (outcome, final_message, writes) = match result {
            Ok(LoopOutcome {
                final_message,
                text,
                end,
                writes,
            }) => (
                TurnOutcome::Answered { text, end },
                Some(final_message),
                writes,
            ),
            Err(err) => (
                TurnOutcome::of_error(err, control.cause(), time_limit)?,
                None,
                Batch::new(),
            ),
        };
        if final_message.is_none() {
            return self
                .finish(store, inbound, &outcome, None, writes, started)
                .await
                .map(Ended::from);
        }
        // The answer's entry may be what the database refuses; the
        // bookkeeping that rides with it is then kept without it.
        match self
            .finish(
                store,
                inbound,
                &outcome,
                final_message.as_ref(),
                writes.clone(),
                started,
            )
            .await
        {
            Err(err) if !matches!(err, StoreError::LeaseLost) => {
                self.store_failed(store, inbound, err, writes, started)
                    .await
            }
            result => result,
        }
        .map(Ended::from)
    }

    /// Loads the session and its history (compaction applied), the agent
    /// for its model and tools, and the principal's spend so far.
    async fn prepare(&self, inbound: &InboundRow) -> Result<Prepared, StoreError> {
        let SessionView {
            session,
            entries,
            compaction,
        } = self
            .store
            .sessions()
            .view(&inbound.session_id)
            .await?
            .ok_or_else(|| {
                StoreError::Corrupt(format!("session {} missing", inbound.session_id))
            })?;
        let toolset = self.registry.toolset(&session.toolset);
        let agent = self.cache.get(&session.model, &toolset).await;
        let mut policy = ContextPolicy::for_model(&self.context, &session.model);
        // Facts are refreshed only while the tool is still offered
        // (`memory.enabled` may have been turned off since).
        let person_memory = session.principal.is_some()
            && offers_memory(&session.toolset)
            && self.registry.get(MEMORY).is_some();
        policy.person_memory = person_memory.then(|| self.memory.clone());
        let stored = crate::agent::shrink::bound_stored(
            context::apply(entries, compaction.as_ref()),
            &toolset,
        );
        let spend = self.spend_limit(inbound.principal_id).await?;
        Ok(Prepared {
            session,
            stored,
            agent,
            policy,
            spend,
        })
    }

    /// Compacts the history when `/compact` asks or the view nears the
    /// model's context window. Returns the answer that ends a `/compact`
    /// turn; an ordinary turn goes on with the compacted view.
    async fn compact(
        &self,
        store: &Store,
        inbound: &InboundRow,
        turn: &mut Prepared,
    ) -> Result<Option<TurnOutcome>, StoreError> {
        let forced = Task::of(&inbound.text) == Task::Compact;
        // A principal over its daily spend gets no model call at all, not
        // even a summary; the loop then ends the task with the message.
        let over_budget = turn
            .spend
            .is_some_and(|limit| limit.spent_before >= limit.daily_nanousd);
        if forced && over_budget {
            return Ok(Some(TurnOutcome::CompactionOverSpend));
        }
        let system = &turn.session.system_prompt;
        // Calibrating costs a query; only a view that might be near the
        // threshold at a generous estimate needs it.
        let near = turn
            .policy
            .should_compact(system, &turn.stored, Some(GENEROUS_RATIO));
        let ratio = if near {
            self.store
                .transcript()
                .tokens_per_char(&turn.session.id)
                .await?
        } else {
            None
        };
        let due = forced || (near && turn.policy.should_compact(system, &turn.stored, ratio));
        if over_budget || !due {
            return Ok(None);
        }
        let summariser = Summariser {
            store,
            metrics: &self.metrics,
            cache_watch: &self.cache_watch,
            provider: turn.agent.provider.as_ref(),
            model: &turn.agent.model,
            system,
            tools: turn.agent.toolset.specs(),
            idle: idle_since(&turn.session),
            session_id: &turn.session.id,
            task_id: Some(inbound.id),
            principal_id: inbound.principal_id,
            prices: &self.prices,
        };
        let compacted = match turn.policy.compact(&summariser, &turn.stored).await {
            Ok(done) => Some(done),
            Err(CompactError::Store(err)) => return Err(err),
            Err(CompactError::Model(err)) => {
                tracing::warn!(error = %err, "compaction failed; continuing with the full history");
                None
            }
        };
        if let Some(Some(compaction)) = &compacted {
            turn.stored = context::apply(std::mem::take(&mut turn.stored), Some(compaction));
            if let Some(session) = self.store.sessions().get(&turn.session.id).await? {
                // The compaction may have refreshed the remembered facts or
                // the client's instructions.
                turn.session.system_prompt = session.system_prompt;
            }
        }
        Ok(forced.then_some(match compacted {
            Some(Some(_)) => TurnOutcome::Compacted,
            Some(None) => TurnOutcome::NothingToCompact,
            None => TurnOutcome::CompactionFailed,
        }))
    }

    /// The files of the task's message as its stored user message keeps
    /// them: voice notes transcribed now, when the message is not stored
    /// yet (a resumed task's message has its transcripts). `Err` ends the
    /// turn with the reply for a file that cannot be transcribed.
    ///
    /// A restart between the transcription and the first model call (which
    /// stores the message) transcribes again; nothing else is lost.
    async fn user_media(
        &self,
        inbound: &InboundRow,
        turn: &Prepared,
    ) -> Result<Result<Vec<MediaRef>, TurnOutcome>, StoreError> {
        let mut media = inbound.media.clone();
        if !media.iter().any(MediaRef::awaits_transcript) || asked(&turn.stored, inbound.id) {
            return Ok(Ok(media));
        }
        match self.media.transcribe(&mut media).await {
            Ok(Ok(done)) => {
                tracing::info!(transcribed = done, "voice notes transcribed");
                Ok(Ok(media))
            }
            Ok(Err(refusal)) => Ok(Err(TurnOutcome::MediaRefused {
                reply: refusal.reply(),
            })),
            Err(err) => Err(StoreError::Corrupt(format!("media: {err}"))),
        }
    }

    /// Opens the task: settles model calls a restart cut short, stages the
    /// task's message with its files `media` (committed with its first
    /// model call), and opens its purse with what the task has left.
    async fn start_task(
        &self,
        store: &Store,
        inbound: &InboundRow,
        control: &TurnControl,
        turn: Prepared,
        media: Vec<MediaRef>,
    ) -> Result<StartedTask, StoreError> {
        let Prepared {
            mut session,
            stored,
            agent,
            policy,
            spend,
        } = turn;
        let asked = asked(&stored, inbound.id);
        if asked {
            let ratio = store.transcript().tokens_per_char(&session.id).await?;
            let estimate = |model: &str, chars| estimated_input(&self.prices, model, chars, ratio);
            let interrupted_calls = store
                .usage()
                .fail_interrupted_model_calls(inbound.id, estimate)
                .await?;
            if interrupted_calls > 0 {
                tracing::warn!(
                    interrupted_calls,
                    "recovery: model calls cut short by a restart recorded as failed"
                );
            }
        }
        let mut interrupted = interrupted_round(&stored);
        let mut history: Vec<ChatMessage> = stored.into_iter().map(|entry| entry.message).collect();
        let mut first_writes = Batch::new();
        let mut options = TurnOptions::read(inbound.options.as_deref());
        if !asked {
            let results = std::mem::take(&mut options.tool_results);
            let answered =
                answer_handed_calls(store, &session.id, inbound, &mut interrupted, &results);
            let answered = answered.await?;
            for (message, entry) in answered {
                first_writes.extend(entry);
                history.push(message);
            }
            // A request that brings tool results and no message continues
            // the conversation from those results.
            let continues = inbound.text.is_empty()
                && media.is_empty()
                && matches!(history.last(), Some(ChatMessage::Tool { .. }));
            if !continues {
                let instructions = options.instructions.as_deref();
                let writes = &mut first_writes;
                let user = stage_message(store, inbound, &mut session, instructions, media, writes);
                history.push(user.await?);
            }
        }
        if let Some(trace_id) = control.trace_id() {
            first_writes.record_trace_id(inbound.id, trace_id);
        }
        self.show_media(&agent.model, &mut history).await?;
        let mut env = self.loop_env(store, inbound, control, &session, policy, spend);
        env.call_options = Arc::new(options.call);
        if !options.client_tools.is_empty() {
            env.client_tools = Arc::new(ClientTools::new(
                agent.toolset.specs(),
                options.client_tools,
            ));
        }
        let env = Arc::new(env);
        // A resumed task (its message was stored by an earlier run) keeps
        // spending from what it had left.
        let spent = if asked {
            self.store.usage().task_usage(inbound.id).await?.calls
        } else {
            0
        };
        let budget = u64::from(self.iterations(inbound).await?).saturating_sub(spent);
        let purse = Arc::new(Wallet::open(u32::try_from(budget).unwrap_or(0)));
        let _ = control.purse.set(Arc::clone(&purse));
        Ok(StartedTask {
            agent,
            env,
            purse,
            history,
            interrupted,
            first_writes,
        })
    }

    /// Sets how the files of `history`'s user messages and tool results
    /// are shown to `model`: images to a vision model, notes to another.
    async fn show_media(&self, model: &str, history: &mut [ChatMessage]) -> Result<(), StoreError> {
        for message in history {
            if let ChatMessage::User { media, .. } | ChatMessage::Tool { media, .. } = message
                && !media.is_empty()
            {
                self.media
                    .show(model, media)
                    .await
                    .map_err(|err| StoreError::Corrupt(format!("media: {err}")))?;
            }
        }
        Ok(())
    }

    /// What the agent loop of this task runs with.
    fn loop_env(
        &self,
        store: &Store,
        inbound: &InboundRow,
        control: &TurnControl,
        session: &SessionRow,
        policy: ContextPolicy,
        spend: Option<SpendLimit>,
    ) -> LoopEnv {
        let asker = Arc::new(Asker {
            platform: inbound.platform.clone(),
            account: inbound.account.clone(),
            chat_id: inbound.chat_id.clone(),
            thread_id: inbound.thread_id.clone(),
            sender_id: inbound.sender_id.clone(),
            principal_id: inbound.principal_id,
        });
        LoopEnv {
            store: store.clone(),
            metrics: self.metrics.clone(),
            cache_watch: self.cache_watch.clone(),
            session_id: session.id.clone(),
            task_id: inbound.id,
            scope: Scope::top(),
            principal_id: inbound.principal_id,
            prices: Arc::clone(&self.prices),
            system_prompt: session.system_prompt.clone(),
            idle: idle_since(session),
            max_tokens: self.max_tokens,
            call_options: Arc::default(),
            client_tools: Arc::default(),
            tool_timeout: self.agent.tool_timeout,
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
            context: Some(policy),
            live: control.live.clone(),
            person: self.registry.tools_may_ask().then(|| {
                let person: Arc<dyn crate::tools::AskPerson> = Arc::new(PersonAsker {
                    store: store.clone(),
                    asker: Arc::clone(&asker),
                    policy: Arc::clone(self.registry.policy()),
                    session_id: session.id.clone(),
                    inbound_id: inbound.id,
                    wake: Arc::clone(&self.task_wake),
                    within: self.agent.tool_timeout,
                });
                person
            }),
            asker: Some(asker),
            policy: Arc::clone(self.registry.policy()),
            media: Arc::clone(&self.media),
        }
    }

    /// The daily spend cap of the message's principal, with what it has
    /// spent today (one query, only when a cap is configured).
    async fn spend_limit(
        &self,
        principal: Option<PrincipalId>,
    ) -> Result<Option<SpendLimit>, StoreError> {
        let daily = self.limits.principal_daily_usd;
        let Some(principal) = principal.filter(|_| daily > 0.0) else {
            return Ok(None);
        };
        // A dollar amount, far below 2^63 nano-dollars.
        let daily_nanousd = (daily * 1e9).round() as i64;
        let spent_before = self
            .store
            .usage()
            .spend_since(principal, crate::domain::start_of_today_ms())
            .await?;
        Ok(Some(SpendLimit {
            daily_nanousd,
            spent_before,
        }))
    }

    /// Ends the turn in one transaction: `writes` (the final model call's
    /// outcome), the final assistant entry, the reply in the outbox, and the
    /// message's status and outcome. The turn, `started` then, is counted
    /// once its end is stored.
    async fn finish(
        &self,
        store: &Store,
        inbound: &InboundRow,
        outcome: &TurnOutcome,
        final_message: Option<&NewMessage>,
        writes: Batch,
        started: Instant,
    ) -> Result<(OutboxRow, InboundStatus), StoreError> {
        let status = outcome.status();
        if status == InboundStatus::Failed {
            tracing::warn!(
                outcome = outcome.outcome().as_str(),
                "turn ended by a limit or failure"
            );
        }
        let mut reply = texts::turn_reply(outcome).into_owned();
        let mut writes = writes;
        let run = TaskRun::of(&self.store, inbound).await?;
        if let Some(run) = &run {
            if let Some(notice) = run.pause_notice(outcome.outcome(), &self.tasks) {
                reply = format!("{reply}\n\n{notice}");
            }
            let answered = matches!(outcome, TurnOutcome::Answered { .. });
            let answer = (answered || run.is_background()).then_some(reply.as_str());
            writes.extend(run.writes(outcome.outcome(), answer, &self.tasks));
        }
        let relayed = run.as_ref().is_some_and(TaskRun::is_background);
        let end = TurnEnd {
            inbound_id: inbound.id,
            final_message,
            reply: &reply,
            status,
            outcome: outcome.outcome(),
            relayed,
        };
        let row = store.outbox().finish_turn_with(&end, writes).await?;
        if let Some(run) = run.filter(TaskRun::is_background) {
            self.task_wake.wake_session(run.task.session_id);
        }
        self.metrics
            .turn_finished(outcome.outcome(), started.elapsed());
        Ok((row, status))
    }

    /// Parks the turn until `approvals` are decided: each is posted as a
    /// notice with its buttons, and the message left `waiting`, in one
    /// write. The turn ends with the first notice as its row and the others
    /// to deliver after it; a notice posted before a crash is not posted
    /// again.
    async fn park(
        &self,
        store: &Store,
        inbound: &InboundRow,
        approvals: &[i64],
    ) -> Result<Ended, StoreError> {
        let mut batch = Batch::new();
        let mut asked = Vec::new();
        for &id in approvals {
            if let Some(approval) = self.store.approvals().get(id).await? {
                asked.push(approval);
            }
        }
        let admin_chats = if asked.iter().any(notices::for_admins) {
            self.admin_chats().await?
        } else {
            Vec::new()
        };
        for approval in &asked {
            let postings = notices::postings(approval, self.registry.policy(), &admin_chats);
            notices::post(&mut batch, &self.store, approval.id, &postings);
        }
        batch.park_turn(inbound.id);
        let rows = store.write(batch).await?;
        let mut notices = rows
            .iter()
            .map(crate::store::read::<OutboxRow>)
            .collect::<Result<Vec<_>, _>>()?;
        if notices.is_empty()
            && let Some(&first) = approvals.first()
        {
            // Posted before a restart: the waiter is answered with it, and
            // it is not sent again.
            notices = self.store.approvals().notices(first).await?;
        }
        self.metrics.approvals_asked(approvals.len());
        // The scheduler expires what nobody decides: it learns the new
        // expiry now.
        self.task_wake.wake();
        let mut notices = notices.into_iter();
        let row = notices
            .next()
            .ok_or_else(|| StoreError::Corrupt("a parked turn without a notice".to_owned()))?;
        Ok(Ended {
            row,
            status: InboundStatus::Waiting,
            more: notices.collect(),
        })
    }

    /// The admins' direct chats (`access.admins`), where approvals the
    /// admins decide are posted.
    async fn admin_chats(&self) -> Result<Vec<DirectChat>, StoreError> {
        let mut chats = Vec::new();
        for admin in self.store.principals().named(&self.admins).await? {
            chats.extend(self.store.principals().direct_chats(admin).await?);
        }
        Ok(chats)
    }

    /// The model calls this turn's task may make: a background run's own
    /// budget, else `agent.max_iterations`.
    async fn iterations(&self, inbound: &InboundRow) -> Result<u32, StoreError> {
        let background = match inbound.task_run_id {
            Some(_) => TaskRun::of(&self.store, inbound)
                .await?
                .is_some_and(|run| run.is_background()),
            None => false,
        };
        Ok(if background {
            self.tasks.background_max_iterations
        } else {
            self.agent.max_iterations.get()
        })
    }

    /// A relay turn: records a background run's `answer` in the
    /// conversation (after the relay's own message) and delivers it, with
    /// no model call.
    async fn relay(
        &self,
        store: &Store,
        inbound: &InboundRow,
        answer: &str,
        started: Instant,
    ) -> Result<(OutboxRow, InboundStatus), StoreError> {
        let (writes, reply) = relay_entries(inbound, inbound.id, answer)?;
        let outcome = TurnOutcome::Answered {
            text: answer.to_owned(),
            end: LoopEnd::Answered,
        };
        self.finish(store, inbound, &outcome, Some(&reply), writes, started)
            .await
    }
}

/// Whether the user message of task `inbound_id` is stored in `stored`
/// (the task is resumed, not new).
fn asked(stored: &[WireEntry], inbound_id: InboundId) -> bool {
    // Its message (a user entry, or the results a client sent) is stored
    // with its first model call, before any other entry of the task.
    stored.iter().any(|entry| entry.task_id == Some(inbound_id))
}

/// The task's message, with the files `media`, as its transcript entry and
/// as the model sees it: the speaker's label in a group chat, and a note
/// of the client's `instructions` when they changed after the session's
/// prompt was sent (before it was, `session`'s prompt takes them, and
/// `writes` the update: see `session::instructions`).
async fn stage_message(
    store: &Store,
    inbound: &InboundRow,
    session: &mut SessionRow,
    instructions: Option<&str>,
    media: Vec<MediaRef>,
    writes: &mut Batch,
) -> Result<ChatMessage, StoreError> {
    let mut content = speaker::content(inbound.speaker.as_deref(), &inbound.text);
    if let Some(note) = super::instructions::apply(store, session, instructions, writes).await? {
        content.insert_str(0, &note);
    }
    let user = ChatMessage::User { content, media };
    writes.append_message(&NewMessage::from_wire(
        &session.id,
        Some(inbound.id),
        &Scope::top(),
        user.clone(),
    ))?;
    Ok(user)
}

/// A turn's session, loaded.
struct Prepared {
    session: SessionRow,
    /// The wire view of the history (compaction applied).
    stored: Vec<WireEntry>,
    agent: Arc<Agent>,
    policy: ContextPolicy,
    spend: Option<SpendLimit>,
}

/// A task ready for the agent loop.
struct StartedTask {
    agent: Arc<Agent>,
    env: Arc<LoopEnv>,
    purse: Arc<Purse>,
    history: Vec<ChatMessage>,
    interrupted: Option<InterruptedRound>,
    /// The task's message, committed with the first model call.
    first_writes: Batch,
}

/// How long the session was idle: since its previous turn ended (what the
/// prompt cache's TTL policy reads).
fn idle_since(session: &SessionRow) -> Duration {
    let idle = crate::domain::now_ms().saturating_sub(session.updated_at);
    Duration::from_millis(u64::try_from(idle).unwrap_or(0))
}

/// Runs the agent loop under the task's wall-clock limit: a warning at 80%,
/// then the turn is stopped and the loop winds down on its own.
async fn run_within_limits(
    task: StartedTask,
    control: &TurnControl,
    time_limit: Duration,
) -> Result<LoopOutcome, LoopError> {
    let StartedTask {
        agent,
        env,
        purse,
        history,
        interrupted,
        first_writes,
    } = task;
    let run = run_loop(
        agent,
        env,
        Arc::clone(&purse),
        history,
        interrupted,
        first_writes,
    );
    let mut run = std::pin::pin!(run);
    let warn_at = time_limit.mul_f64(0.8);
    tokio::select! {
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
    }
}

/// The results a new task starts with, when the conversation's last round
/// has calls an earlier turn handed to the API client (and only those
/// unanswered): the client's result for each call it answered (from
/// `results`), an error result for one it did not; each with the write
/// that stores it and marks its checkpoint. The round is then no longer
/// `interrupted`.
async fn answer_handed_calls(
    store: &Store,
    session_id: &SessionId,
    inbound: &InboundRow,
    interrupted: &mut Option<InterruptedRound>,
    results: &[ClientResult],
) -> Result<Vec<(ChatMessage, Batch)>, StoreError> {
    let Some(round) = interrupted.as_ref() else {
        return Ok(Vec::new());
    };
    let handed = store.transcript().client_calls(session_id).await?;
    let unanswered: Vec<(usize, &ToolCall)> = round
        .calls
        .iter()
        .enumerate()
        .filter(|(_, call)| !round.answered.contains(&call.id))
        .collect();
    if !unanswered
        .iter()
        .all(|(_, call)| handed.iter().any(|handed| handed.id == call.id))
    {
        return Ok(Vec::new());
    }
    let mut answered = Vec::with_capacity(unanswered.len());
    for (index, call) in unanswered {
        let message = match results.iter().find(|result| result.call_id == call.id) {
            Some(result) => ChatMessage::tool_result(&call.id, &result.content, false),
            None => crate::agent::round::refused(call, texts::NO_CLIENT_RESULT),
        };
        let mut entry = Batch::new();
        if let ChatMessage::Tool {
            content, is_error, ..
        } = &message
        {
            let request_id = round_request_id(round.assistant_id, index);
            entry.finish_tool_call(&request_id, content, *is_error);
        }
        entry.append_message(&NewMessage::from_wire(
            session_id,
            Some(inbound.id),
            &Scope::top(),
            message.clone(),
        ))?;
        answered.push((message, entry));
    }
    *interrupted = None;
    Ok(answered)
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compaction_answers_are_commands_and_limits_are_failures() {
        assert_eq!(TurnOutcome::Compacted.status(), InboundStatus::Command);
        assert_eq!(TurnOutcome::Compacted.outcome().as_str(), "compact");
        assert_eq!(
            TurnOutcome::CompactionOverSpend.outcome().as_str(),
            "spend_limit"
        );
        let refused = TurnOutcome::MediaRefused {
            reply: "Sorry, I could not make out any speech in your voice note.".to_owned(),
        };
        assert_eq!(refused.status(), InboundStatus::Failed);
        assert_eq!(refused.outcome().as_str(), "media_refused");
        assert_eq!(
            texts::turn_reply(&refused),
            "Sorry, I could not make out any speech in your voice note."
        );
        assert_eq!(TurnOutcome::Cancelled.status(), InboundStatus::Failed);
        let answered = TurnOutcome::Answered {
            text: "hi".to_owned(),
            end: LoopEnd::BudgetExhausted,
        };
        assert_eq!(answered.status(), InboundStatus::Done);
        assert_eq!(answered.outcome().as_str(), "budget_exhausted");
    }

    #[test]
    fn a_cancelled_loop_reports_why_it_was_stopped() {
        let limit = Duration::from_secs(90);
        let of = |cause| TurnOutcome::of_error(LoopError::Cancelled, cause, limit).ok();
        assert_eq!(
            of(Some(StopCause::TimeLimit)),
            Some(TurnOutcome::TimeLimit { secs: 90 })
        );
        assert_eq!(
            of(Some(StopCause::Interrupted)),
            Some(TurnOutcome::Interrupted)
        );
        assert_eq!(of(None), Some(TurnOutcome::Cancelled));
    }
}
