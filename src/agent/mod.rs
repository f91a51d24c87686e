//! Agents: a provider, a model and a toolset, and the loop that drives them.
//!
//! An [`Agent`] holds no conversation: history always comes from the
//! database, so any instance can be evicted from the [`cache`] at any moment
//! without changing a reply. The loop ([`run`]) calls the model, runs the
//! tools it asks for, writes every step back, and stops on the model's stop
//! reason or the task's [`wallet`]. While it runs, it tells the turn's
//! [`live`] subscribers what happens (text as it arrives, tool calls).

pub mod asking;
pub mod cache;
pub mod cache_watch;
pub mod client_tools;
pub mod context;
pub mod extract;
pub mod live;
pub mod prompt;
pub mod round;
pub mod run;
pub mod settings;
pub mod shrink;
pub mod step;
pub mod subagent;
pub mod wallet;

use std::sync::Arc;

use secrecy::ExposeSecret;
use sha2::{Digest, Sha256};

use crate::llm::{Endpoint, Provider, ProviderKind};

use crate::domain::canonical_json;
use crate::tools::Toolset;

/// A stateless agent instance: what to call and with which tools.
pub struct Agent {
    pub provider: Arc<dyn Provider>,
    pub provider_kind: ProviderKind,
    pub model: String,
    pub toolset: Toolset,
    pub signature: Signature,
}

/// The cache key of an agent instance: a SHA-256 over provider, base URL,
/// model, the SHA-256 of the API key (never the key), and the toolset's names
/// and schemas in their fixed order.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Signature(String);

impl Signature {
    pub fn compute(endpoint: &Endpoint, model: &str, toolset: &Toolset) -> Self {
        let key_hash = Sha256::digest(endpoint.api_key.expose_secret().as_bytes());
        let mut hasher = Sha256::new();
        let mut field = |bytes: &[u8]| {
            // Length-prefixed so no two field lists hash the same bytes.
            hasher.update((bytes.len() as u64).to_le_bytes());
            hasher.update(bytes);
        };
        field(endpoint.kind.as_str().as_bytes());
        field(endpoint.base_url.as_bytes());
        field(model.as_bytes());
        field(hex::encode(key_hash).as_bytes());
        for spec in toolset.specs() {
            field(spec.name.as_bytes());
            field(spec.description.as_bytes());
            field(canonical_json(&spec.parameters).as_bytes());
        }
        Self(hex::encode(hasher.finalize()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use secrecy::SecretString;

    use super::*;
    use crate::llm::RetryPolicy;

    fn endpoint(key: &str) -> Endpoint {
        Endpoint {
            kind: ProviderKind::Openai,
            base_url: "http://127.0.0.1:1/v1".to_owned(),
            api_key: SecretString::from(key.to_owned()),
            timeout: Duration::from_secs(1),
            retry: RetryPolicy {
                max_retries: 0,
                base_delay: Duration::ZERO,
                max_delay: Duration::ZERO,
            },
            cache_ttl: crate::llm::settings::CacheTtl::FiveMinutes,
        }
    }

    #[test]
    fn the_signature_never_contains_the_key_and_changes_with_it() {
        let toolset = Toolset::default();
        let a = Signature::compute(&endpoint("sk-secret-key"), "m", &toolset);
        let b = Signature::compute(&endpoint("sk-other-key"), "m", &toolset);
        assert_ne!(a, b);
        assert!(!a.as_str().contains("sk-secret-key"));
        assert_eq!(
            a,
            Signature::compute(&endpoint("sk-secret-key"), "m", &toolset)
        );
        assert_ne!(
            a,
            Signature::compute(&endpoint("sk-secret-key"), "m2", &toolset)
        );
    }
}
