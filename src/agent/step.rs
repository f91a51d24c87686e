//! Model calls as recorded steps.
//!
//! Every model call (the loop's, a sub-agent's, a compaction's) is written
//! `running` with a fresh request id before the request goes out, and `done`
//! with its tokens, latency and cost estimate, or `failed` with the reason,
//! once it returns. A crash mid-call therefore leaves a `running` row, which
//! the resumed task marks failed; the call still counts against the task's
//! budget, because the provider may have billed it.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;

use crate::llm::ModelResponse;
use crate::store::{ModelCallEnd, ModelCallStart, Store, StoreError};
use crate::usage::{Price, price_for};

/// A finished model call with its estimated cost.
#[derive(Debug)]
pub struct Recorded {
    pub response: ModelResponse,
    /// Billionths of a dollar; `None` when the model has no price.
    pub cost_nanousd: Option<i64>,
}

/// A fresh request id for a model call.
pub fn request_id() -> String {
    format!("mc-{}", uuid::Uuid::new_v4().simple())
}

/// Runs `call` as a recorded step: the `running` row is written first (and
/// the call is not made if that fails), the outcome after.
///
/// # Errors
/// The call's own error (recorded as `failed` first), or a database failure.
pub async fn recorded<E>(
    store: &Store,
    start: &ModelCallStart<'_>,
    prices: &BTreeMap<String, Price>,
    call: impl Future<Output = Result<ModelResponse, E>>,
) -> Result<Recorded, E>
where
    E: From<StoreError> + fmt::Display,
{
    let id = store.start_model_call(start).await?;
    match call.await {
        Ok(response) => {
            let cost_nanousd = price_for(prices, &response.model, start.model)
                .map(|price| price.cost_nanousd(&response.usage));
            store
                .finish_model_call(
                    id,
                    &ModelCallEnd::Done {
                        model: &response.model,
                        usage: response.usage,
                        cost_nanousd,
                    },
                )
                .await?;
            Ok(Recorded {
                response,
                cost_nanousd,
            })
        }
        Err(err) => {
            let error = err.to_string();
            store
                .finish_model_call(id, &ModelCallEnd::Failed { error: &error })
                .await?;
            Err(err)
        }
    }
}
