//! The agent cache: instances shared by every session with the same
//! signature, bounded in size and dropped when idle.
//!
//! Sharing one instance per signature keeps one provider client per
//! configuration, so requests of sessions on the same model stay on warm
//! connections and the provider's prompt cache keeps hitting. Evicting an
//! instance loses nothing: agents hold no conversation.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use moka::future::Cache;

use super::{Agent, Signature};
use crate::llm::{Endpoint, Provider};
use crate::tools::Toolset;

/// Builds a provider for an endpoint (HTTP providers in the gateway; the
/// benchmark substitutes an in-process model).
pub type ProviderFactory = Arc<dyn Fn(&Endpoint) -> Arc<dyn Provider> + Send + Sync>;

/// Agent instances by signature.
pub struct AgentCache {
    cache: Cache<Signature, Arc<Agent>>,
    endpoint: Endpoint,
    factory: ProviderFactory,
    builds: AtomicU64,
}

impl AgentCache {
    pub fn new(
        endpoint: Endpoint,
        factory: ProviderFactory,
        max_capacity: u64,
        idle_ttl: Duration,
    ) -> Self {
        Self {
            cache: Cache::builder()
                .max_capacity(max_capacity)
                .time_to_idle(idle_ttl)
                .build(),
            endpoint,
            factory,
            builds: AtomicU64::new(0),
        }
    }

    /// The shared instance for this model and toolset, built on first use.
    pub async fn get(&self, model: &str, toolset: &Toolset) -> Arc<Agent> {
        let signature = Signature::compute(&self.endpoint, model, toolset);
        self.cache
            .get_with(signature.clone(), async {
                self.builds.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(signature = signature.as_str(), model, "agent built");
                Arc::new(Agent {
                    provider: (self.factory)(&self.endpoint),
                    provider_kind: self.endpoint.kind,
                    model: model.to_owned(),
                    toolset: toolset.clone(),
                    signature,
                })
            })
            .await
    }

    /// Drops every instance (tests use it to show eviction changes nothing).
    pub fn invalidate_all(&self) {
        self.cache.invalidate_all();
    }

    /// How many instances were built since start.
    pub fn builds(&self) -> u64 {
        self.builds.load(Ordering::Relaxed)
    }
}
