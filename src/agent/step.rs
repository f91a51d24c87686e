//! Model calls as recorded steps.
//!
//! Every model call (the loop's, a sub-agent's, a compaction's) is written
//! `running` with a fresh request id before the request goes out, and `done`
//! with its tokens, latency and cost estimate, or `failed` with the reason,
//! once it returns. A crash mid-call therefore leaves a `running` row, which
//! the resumed task marks failed; the call still counts against the task's
//! budget, because the provider may have billed it. A one-shot call
//! ([`one_shot`]: a system prompt and one user message, no tools, the
//! answer's text; compaction's summary and the extraction of a person's
//! facts) is such a step of its own.

use crate::domain::{ChatMessage, Scope};
use crate::metrics::Metrics;
use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;

use crate::llm::{ModelRequest, ModelResponse};
use crate::store::{Batch, ModelCallEnd, ModelCallStart, Store, StoreError};
use crate::usage::{Price, price_for};

use super::context::{CompactError, Summariser};

/// A model call that answered, with its estimated cost. Its `done` outcome
/// is not yet stored: [`Recorded::finish`] adds it to the step's next write.
#[derive(Debug)]
pub struct Recorded {
    pub response: ModelResponse,
    /// Billionths of a dollar; `None` when the model has no price.
    pub cost_nanousd: Option<i64>,
    /// The call's usage row.
    pub usage_id: i64,
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
            },
        );
    }
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
    call: impl Future<Output = Result<ModelResponse, E>>,
) -> Result<Recorded, E>
where
    E: From<StoreError> + fmt::Display,
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
            Ok(Recorded {
                response,
                cost_nanousd,
                usage_id,
            })
        }
        Err(err) => {
            let error = err.to_string();
            store
                .usage()
                .finish_model_call(usage_id, &ModelCallEnd::Failed { error: &error })
                .await?;
            Err(err)
        }
    }
}

/// One question asked in a [`one_shot`] call.
#[derive(Debug, Clone)]
pub struct OneShot<'a> {
    /// The call's scope in its record (`compaction`, `memory`).
    pub scope: &'a Scope,
    pub system: &'a str,
    /// The one user message.
    pub prompt: String,
    pub max_tokens: u32,
}

/// Asks `by`'s model `question` without tools (the request's cache key is
/// the session's), as a recorded step with nothing written before it;
/// returns the answer's text (empty when it has none) and the call, whose
/// `done` outcome the caller adds to its next write ([`Recorded::finish`]).
///
/// # Errors
/// The call failing (recorded as `failed` first), or the database.
pub async fn one_shot(
    by: &Summariser<'_>,
    question: OneShot<'_>,
) -> Result<(String, Recorded), CompactError> {
    let messages = [ChatMessage::User {
        content: question.prompt,
        media: Vec::new(),
    }];
    let request = ModelRequest {
        model: by.model,
        system: question.system,
        messages: &messages,
        tools: &[],
        cache_key: by.session_id.as_str(),
        max_tokens: question.max_tokens,
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
        request_chars: None,
    };
    let call = async { Ok::<_, CompactError>(by.provider.complete(&request).await?) };
    let recorded = recorded(by.store, by.metrics, &start, by.prices, Batch::new(), call).await?;
    let text = recorded.response.content.clone().unwrap_or_default();
    Ok((text, recorded))
}
