//! Model calls as recorded steps.
//!
//! Every model call (the loop's, a sub-agent's, a compaction's) is written
//! `running` with a fresh request id before the request goes out, and `done`
//! with its tokens, latency and cost estimate, or `failed` with the reason,
//! once it returns. A crash mid-call therefore leaves a `running` row, which
//! the resumed task marks failed; the call still counts against the task's
//! budget, because the provider may have billed it. A call cut short after
//! its request went out (a crash, `/stop`, a timeout) is recorded with the
//! input it was billed, estimated from the request's size
//! ([`estimated_input`]) and marked so. A side question
//! ([`one_shot`]: compaction's summary, the extraction of a person's facts)
//! is such a step of its own, asked as a continuation of the conversation
//! as the provider has it cached: the same system prompt, tools and
//! `tool_choice` (Anthropic drops the cached messages when `tool_choice`
//! changes; the question itself says not to call tools, and only the
//! answer's text is read), the same messages, then the question, with no
//! cache write on the question itself.

use crate::domain::{ChatMessage, Scope};
use crate::metrics::Metrics;
use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;

use crate::llm::LlmError;
use crate::llm::{CacheTail, ModelRequest, ModelResponse, ToolChoice};
use crate::store::{Batch, EstimatedInput, ModelCallEnd, ModelCallStart, Store, StoreError};
use crate::usage::{Price, price_for};

use super::cache_watch::{CacheWatch, Fingerprint, Shape};
use super::context::{CompactError, Summariser};
use super::prompt::split_system;

/// A model call that answered, with its estimated cost. Its `done` outcome
/// is not yet stored: [`Recorded::finish`] adds it to the step's next write.
#[derive(Debug)]
pub struct Recorded {
    pub response: ModelResponse,
    /// Billionths of a dollar; `None` when the model has no price.
    pub cost_nanousd: Option<i64>,
    /// The call's usage row.
    pub usage_id: i64,
    /// How it read less from the prompt cache than the conversation's
    /// previous call left there, in words ([`super::cache_watch`]).
    pub cache_miss: Option<String>,
    /// Its request's, for the next call of the conversation to be compared
    /// with.
    pub fingerprint: Fingerprint,
}

impl Recorded {
    /// Adds the call's `done` outcome (tokens, latency, cost) to `batch`.
    pub fn finish(&self, batch: &mut Batch) {
        batch.finish_model_call(
            self.usage_id,
            &ModelCallEnd::Done {
                model: &self.response.model,
                usage: self.response.usage,
                cost_nanousd: self.cost_nanousd,
                cache_miss: self.cache_miss.as_deref(),
                fingerprint: Some(self.fingerprint.as_str()),
            },
        );
    }
}

/// Tokens per request character assumed when the session has no measured
/// ratio yet (about four characters a token).
const DEFAULT_TOKENS_PER_CHAR: f64 = 0.25;

/// Whether a failed call was cut short after its request reached the
/// provider (so its input was billed), rather than refused or never sent.
pub trait CutShort {
    fn cut_short(&self) -> bool;
}

impl CutShort for LlmError {
    fn cut_short(&self) -> bool {
        matches!(self, Self::Timeout)
    }
}

impl CutShort for CompactError {
    fn cut_short(&self) -> bool {
        matches!(self, Self::Model(err) if err.cut_short())
    }
}

/// The input a call of `model` over `request_chars` characters was billed,
/// at `tokens_per_char` (else about four characters a token), and what it
/// cost at the model's input price. `None` when the size was not counted.
pub fn estimated_input(
    prices: &BTreeMap<String, Price>,
    model: &str,
    request_chars: Option<i64>,
    tokens_per_char: Option<f64>,
) -> Option<EstimatedInput> {
    let chars = request_chars.filter(|chars| *chars > 0)?;
    let ratio = tokens_per_char.unwrap_or(DEFAULT_TOKENS_PER_CHAR);
    // Far below 2^52 characters: the casts are exact enough.
    let input_tokens = (chars as f64 * ratio).ceil() as u64;
    let usage = crate::domain::Usage {
        input_tokens,
        ..crate::domain::Usage::default()
    };
    let cost_nanousd = prices.get(model).map(|price| price.cost_nanousd(&usage));
    Some(EstimatedInput {
        input_tokens,
        cost_nanousd,
    })
}

/// A call's request as the prompt-cache report compares it with the
/// previous call of its conversation (`scope`: a side question's is the
/// conversation it continues).
pub struct Watched<'a> {
    pub watch: &'a CacheWatch,
    pub scope: &'a Scope,
    pub shape: Shape,
}

/// The conversation's last recorded call, when this process has none of
/// its own to compare `watched` with and the request continues a
/// conversation (a restart, another instance, a conversation long idle).
async fn last_recorded(
    store: &Store,
    start: &ModelCallStart<'_>,
    watched: &Watched<'_>,
) -> Result<Option<super::cache_watch::Recorded>, StoreError> {
    if !watched.shape.continues() || watched.watch.knows(start.session_id, watched.scope) {
        return Ok(None);
    }
    let found = store
        .usage()
        .last_fingerprint(start.session_id, watched.scope)
        .await?;
    Ok(
        found.map(|(text, input_tokens, at_ms)| super::cache_watch::Recorded {
            fingerprint: Fingerprint::stored(text),
            input_tokens,
            at_ms,
        }),
    )
}

/// A fresh request id for a model call.
pub fn request_id() -> String {
    format!("mc-{}", uuid::Uuid::new_v4().simple())
}

/// Runs `call` as a recorded step: its `running` row is committed first,
/// together with `before` (the writes of the step that led to this call),
/// and the call is not made if that fails. A failure is recorded at once; a
/// success is returned for the caller to [`Recorded::finish`] with its next
/// write.
///
/// # Errors
/// The call's own error (recorded as `failed` first), or a database failure.
pub async fn recorded<E>(
    store: &Store,
    metrics: &Metrics,
    start: &ModelCallStart<'_>,
    prices: &BTreeMap<String, Price>,
    mut before: Batch,
    watched: Watched<'_>,
    call: impl Future<Output = Result<ModelResponse, E>>,
) -> Result<Recorded, E>
where
    E: From<StoreError> + fmt::Display + CutShort,
{
    before.start_model_call(start);
    let usage_id = store
        .write_ids(before)
        .await?
        .last()
        .copied()
        .ok_or_else(|| StoreError::Corrupt("no id for the model call".to_owned()))?;
    let started = std::time::Instant::now();
    let result = call.await;
    let usage = result.as_ref().ok().map(|response| &response.usage);
    metrics.model_call(start.provider, start.model, usage, started.elapsed());
    match result {
        Ok(response) => {
            let cost_nanousd = price_for(prices, &response.model, start.model)
                .map(|price| price.cost_nanousd(&response.usage));
            let fingerprint = watched.shape.fingerprint();
            let recorded = last_recorded(store, start, &watched).await?;
            let cache_miss = watched
                .watch
                .observe(
                    start.session_id,
                    watched.scope,
                    watched.shape,
                    &response.usage,
                    recorded,
                )
                .map(|miss| {
                    metrics.cache_miss(start.provider, start.model, miss.cause.label());
                    let text = miss.describe();
                    tracing::info!(
                        cause = miss.cause.label(),
                        request_id = start.request_id,
                        "prompt cache missed: {text}"
                    );
                    text
                });
            Ok(Recorded {
                response,
                cost_nanousd,
                usage_id,
                cache_miss,
                fingerprint,
            })
        }
        Err(err) => {
            let error = err.to_string();
            let billed = if err.cut_short() {
                let ratio = store.transcript().tokens_per_char(start.session_id).await?;
                estimated_input(prices, start.model, start.request_chars, ratio)
            } else {
                None
            };
            let end = ModelCallEnd::Failed {
                error: &error,
                billed,
            };
            store.usage().finish_model_call(usage_id, &end).await?;
            Err(err)
        }
    }
}

/// One question asked in a [`one_shot`] call.
#[derive(Debug, Clone)]
pub struct OneShot<'a> {
    /// The call's scope in its record (`compaction`, `memory`).
    pub scope: &'a Scope,
    /// The conversation as its last request sent it.
    pub history: &'a [ChatMessage],
    /// The question, a user message after the history.
    pub prompt: String,
    pub max_tokens: u32,
}

/// Asks `by`'s model `question` after the conversation, with its tools
/// defined as in the conversation (the question says not to use them), as
/// a recorded step with nothing written
/// before it; returns the answer's text (empty when it has none) and the
/// call, whose `done` outcome the caller adds to its next write
/// ([`Recorded::finish`]).
///
/// # Errors
/// The call failing (recorded as `failed` first), or the database.
pub async fn one_shot(
    by: &Summariser<'_>,
    question: OneShot<'_>,
) -> Result<(String, Recorded), CompactError> {
    let mut messages = question.history.to_vec();
    messages.push(ChatMessage::User {
        content: question.prompt,
        media: Vec::new(),
    });
    let (system, system_tail) = split_system(by.system);
    let request = ModelRequest {
        model: by.model,
        system,
        system_tail,
        messages: &messages,
        tools: by.tools,
        tool_choice: ToolChoice::Auto,
        cache_tail: CacheTail::Skip,
        idle: by.idle,
        max_tokens: question.max_tokens,
        // A one-shot question is the gateway's own: no client settings.
        options: &crate::domain::NO_CALL_OPTIONS,
    };
    let request_id = request_id();
    let start = ModelCallStart {
        request_id: &request_id,
        session_id: by.session_id,
        task_id: by.task_id,
        scope: question.scope,
        principal_id: by.principal_id,
        provider: by.provider.kind().as_str(),
        model: by.model,
        request_chars: Some(super::run::wire_bytes(by.system, messages.iter())),
    };
    let watched = Watched {
        watch: by.cache_watch,
        scope: &Scope::top(),
        shape: Shape::of(&request),
    };
    let call = async { Ok::<_, CompactError>(by.provider.complete(&request).await?) };
    let recorded = recorded(
        by.store,
        by.metrics,
        &start,
        by.prices,
        Batch::new(),
        watched,
        call,
    )
    .await?;
    let text = recorded.response.content.clone().unwrap_or_default();
    Ok((text, recorded))
}
