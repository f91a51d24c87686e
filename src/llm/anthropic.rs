//! Anthropic Messages provider.
use async_trait::async_trait;

use super::{Endpoint, LlmError, ModelRequest, ModelResponse, Provider, ProviderKind};

pub struct AnthropicProvider {
    endpoint: Endpoint,
    http: reqwest::Client,
}

impl AnthropicProvider {
    pub fn new(endpoint: Endpoint, http: reqwest::Client) -> Self {
        Self { endpoint, http }
    }
}

#[async_trait]
impl Provider for AnthropicProvider {
    fn kind(&self) -> ProviderKind {
        ProviderKind::Anthropic
    }

    async fn complete(&self, _request: &ModelRequest<'_>) -> Result<ModelResponse, LlmError> {
        let _ = (&self.endpoint, &self.http);
        Err(LlmError::Network("not implemented".to_owned()))
    }
}
