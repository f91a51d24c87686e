//! LLM providers behind one trait.
//!
//! The agent loop speaks [`ModelRequest`] / [`ModelResponse`]. One HTTP
//! provider (`provider`) serves every endpoint; what differs between
//! providers is only the wire format (`wire`): `openai` (Chat Completions,
//! and every server that speaks it) and `anthropic` (Messages). The rest is
//! shared: the HTTP attempt (`http`), what a failure becomes, without the
//! key (`failure`), the retry policy ([`retry`]: the contract crate's
//! capped, jittered backoff, honouring `Retry-After`), and streaming
//! ([`Provider::stream`]): `sse` parses the event stream, [`stream`] reads
//! it into a wire format's decoder, and the result is the very
//! [`ModelResponse`] the unstreamed call returns. Errors never carry an API
//! key. The tests every wire format must pass are written once
//! (`conformance`, on the scaffolding of `test_support` and the fake model
//! server of `switchboard_test_support::model`).

mod anthropic;
#[cfg(test)]
mod conformance;
mod failure;
mod http;
mod openai;
mod provider;
pub mod retry;
pub mod settings;
mod sse;
pub mod stream;
#[cfg(test)]
mod test_support;
mod wire;

use crate::domain::{CallOptions, ChatMessage, StopReason, ToolCall, ToolSpec, Usage};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use secrecy::SecretString;
use serde::{Deserialize, Serialize};

pub use retry::RetryPolicy;
pub use stream::{OnStream, StreamEvent};

use anthropic::Anthropic;
use openai::OpenAi;
use provider::HttpProvider;

/// Which wire protocol a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProviderKind {
    /// OpenAI Chat Completions (also OpenRouter, DeepSeek, vLLM, Ollama, ...).
    Openai,
    /// Anthropic Messages.
    Anthropic,
}

impl ProviderKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Openai => "openai",
            Self::Anthropic => "anthropic",
        }
    }
}

/// Everything one model call needs. The system prompt is passed separately
/// and never appears in `messages`.
#[derive(Debug, Clone, Copy)]
pub struct ModelRequest<'a> {
    pub model: &'a str,
    /// The system prompt's stable text: the same on every call of a
    /// session, and in every session built from the same settings.
    pub system: &'a str,
    /// What follows the stable text and may change within a session (the
    /// person's remembered facts, refreshed at a compaction): sent after
    /// the stable text's cache breakpoint, so a refresh keeps the tools and
    /// the stable text cached. Usually empty.
    pub system_tail: &'a str,
    pub messages: &'a [ChatMessage],
    /// The tools defined; a call that must not use them keeps them (the
    /// prefix stays cached) and says so with [`ToolChoice::None`].
    pub tools: &'a [ToolSpec],
    pub tool_choice: ToolChoice,
    /// Whether the request's end is worth a cache write.
    pub cache_tail: CacheTail,
    /// How long the conversation was idle before this turn: what
    /// `llm.cache_ttl = "auto"` reads.
    pub idle: Duration,
    pub max_tokens: u32,
    /// What the client asked of this call (structured output, sampling
    /// settings, stop sequences, a seed): only a turn's own calls carry
    /// any; every other call passes [`crate::domain::NO_CALL_OPTIONS`],
    /// which sends nothing. Its `max_tokens` is already in `max_tokens`.
    pub options: &'a CallOptions,
}

/// Whether the model may call the tools a request defines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ToolChoice {
    /// As it sees fit (nothing is sent: the providers' default).
    #[default]
    Auto,
    /// Not at all: the budget's last call. (Anthropic keeps only the
    /// tools and system cached when `tool_choice` changes.)
    None,
}

/// Whether a request's end gets a cache breakpoint of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CacheTail {
    /// Yes: the next call of the conversation starts with this request.
    #[default]
    Write,
    /// No: the request ends in a question asked once (compaction's
    /// summary, the extraction of facts), which no later call repeats;
    /// only the conversation before it is marked.
    Skip,
}

/// What one model call returned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelResponse {
    pub content: Option<String>,
    /// Reasoning or thinking text, when the provider returns it. Stored, never
    /// sent back.
    pub reasoning: Option<String>,
    pub tool_calls: Vec<ToolCall>,
    pub stop_reason: StopReason,
    /// The provider's own finish/stop reason string.
    pub finish_reason: String,
    pub usage: Usage,
    /// The model that answered, as the provider reports it.
    pub model: String,
    /// The provider's request id, when it sends one.
    pub request_id: Option<String>,
}

/// Why a model call failed. Messages never contain a key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LlmError {
    #[error("the model call timed out")]
    Timeout,
    #[error("rate limited by the provider (HTTP {status})")]
    RateLimited {
        status: u16,
        retry_after: Option<Duration>,
    },
    #[error("the provider failed (HTTP {status}): {message}")]
    Server { status: u16, message: String },
    #[error("the provider rejected the request (HTTP {status}): {message}")]
    Rejected { status: u16, message: String },
    #[error("could not reach the provider: {0}")]
    Network(String),
    #[error("the provider's response could not be understood: {0}")]
    InvalidResponse(String),
}

impl LlmError {
    /// Whether another attempt may succeed (429, 5xx, timeouts, network).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Self::Timeout | Self::RateLimited { .. } | Self::Server { .. } | Self::Network(_)
        )
    }

    /// Whether the provider refused the request as too long for the model:
    /// OpenAI's `context_length_exceeded` ("maximum context length"),
    /// Anthropic's "prompt is too long", or a 413.
    pub fn is_too_long(&self) -> bool {
        let Self::Rejected { status, message } = self else {
            return false;
        };
        if *status == 413 {
            return true;
        }
        let message = message.to_lowercase();
        *status == 400
            && [
                "context_length_exceeded",
                "maximum context length",
                "context length",
                "context window",
                "prompt is too long",
                "input is too long",
                "too many tokens",
            ]
            .iter()
            .any(|sign| message.contains(sign))
    }

    /// The delay the provider asked for, if any.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::RateLimited { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// The HTTP status the provider answered with, if it answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::RateLimited { status, .. }
            | Self::Server { status, .. }
            | Self::Rejected { status, .. } => Some(*status),
            Self::Timeout | Self::Network(_) | Self::InvalidResponse(_) => None,
        }
    }

    /// What the failure means for whoever has to act on it.
    pub fn failure(&self) -> ModelFailure {
        match self {
            Self::Timeout | Self::Network(_) => ModelFailure::Unreachable,
            Self::RateLimited { .. } | Self::Server { status: 503, .. } => ModelFailure::Busy,
            Self::Server { .. } | Self::InvalidResponse(_) => ModelFailure::ProviderFailed,
            Self::Rejected { status, .. } => match status {
                401 | 403 => ModelFailure::Credentials,
                404 | 405 => ModelFailure::Endpoint,
                408 => ModelFailure::Unreachable,
                _ => ModelFailure::BadRequest,
            },
        }
    }
}

/// The kinds of model failure a user and an operator tell apart: each has a
/// reply of its own (`session::texts`) and a log line naming the endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelFailure {
    /// No answer: connection refused, DNS, TLS, a timeout. Often passing.
    Unreachable,
    /// The address answered 404/405: the base URL (or the model's path) is
    /// wrong. The operator must fix the configuration.
    Endpoint,
    /// 401/403: the API key is missing, wrong or lacks access. The operator
    /// must fix the key.
    Credentials,
    /// 429, 503 or Anthropic's 529: rate limited or overloaded. Passing.
    Busy,
    /// Another 4xx: the provider refused this request (a conversation too
    /// long for the model's context, an unsupported parameter).
    BadRequest,
    /// Another 5xx, or an answer that could not be understood.
    ProviderFailed,
}

impl ModelFailure {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unreachable => "unreachable",
            Self::Endpoint => "wrong_endpoint",
            Self::Credentials => "bad_credentials",
            Self::Busy => "rate_limited",
            Self::BadRequest => "bad_request",
            Self::ProviderFailed => "provider_failed",
        }
    }

    /// Whether the operator has to change something (the log says so at
    /// ERROR); the others may pass on their own (WARN).
    pub fn needs_operator(self) -> bool {
        matches!(self, Self::Endpoint | Self::Credentials | Self::BadRequest)
    }
}

/// A model provider.
#[async_trait]
pub trait Provider: Send + Sync {
    fn kind(&self) -> ProviderKind;

    /// Calls the model once (retrying transient failures per the provider's
    /// [`RetryPolicy`]).
    ///
    /// # Errors
    /// The last failure once retries are spent, or the first non-retryable one.
    async fn complete(&self, request: &ModelRequest<'_>) -> Result<ModelResponse, LlmError>;

    /// Calls the model like [`Provider::complete`], streaming: `on` hears
    /// each piece of the answer's text as it arrives, and
    /// [`StreamEvent::Restart`] when an attempt that had already sent text
    /// failed and is retried (the text heard so far is void). Returns the
    /// same response the unstreamed call would, so what is stored does not
    /// depend on whether the call was streamed.
    ///
    /// The default, for providers that cannot stream, makes the unstreamed
    /// call and reports its whole text at once.
    ///
    /// # Errors
    /// As [`Provider::complete`].
    async fn stream(
        &self,
        request: &ModelRequest<'_>,
        on: OnStream<'_>,
    ) -> Result<ModelResponse, LlmError> {
        let response = self.complete(request).await?;
        if let Some(text) = response.content.as_deref() {
            on(StreamEvent::Text(text));
        }
        Ok(response)
    }
}

/// How to reach one provider endpoint.
#[derive(Clone)]
pub struct Endpoint {
    pub kind: ProviderKind,
    /// For OpenAI: up to and including `/v1`. For Anthropic: the host root
    /// (the client appends `/v1/messages`).
    pub base_url: String,
    pub api_key: SecretString,
    /// Per-call timeout.
    pub timeout: Duration,
    pub retry: RetryPolicy,
    /// How long Anthropic keeps what a request writes to its cache.
    pub cache_ttl: settings::CacheTtl,
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Endpoint")
            .field("kind", &self.kind)
            .field("base_url", &self.base_url)
            .field("api_key", &"[redacted]")
            .field("timeout", &self.timeout)
            .field("retry", &self.retry)
            .field("cache_ttl", &self.cache_ttl)
            .finish()
    }
}

/// Builds the provider for an endpoint, sharing one HTTP client (and its
/// connection pool) across all providers.
pub fn build_provider(endpoint: Endpoint, http: reqwest::Client) -> Arc<dyn Provider> {
    match endpoint.kind {
        ProviderKind::Openai => Arc::new(HttpProvider::new(endpoint, http, OpenAi)),
        ProviderKind::Anthropic => {
            let wire = Anthropic {
                cache_ttl: endpoint.cache_ttl,
            };
            Arc::new(HttpProvider::new(endpoint, http, wire))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rejected(status: u16) -> LlmError {
        LlmError::Rejected {
            status,
            message: "no".to_owned(),
        }
    }

    #[test]
    fn refusals_as_too_long_are_told_apart_from_other_refusals() {
        let rejected = |status, message: &str| LlmError::Rejected {
            status,
            message: message.to_owned(),
        };
        let openai = rejected(
            400,
            "This model's maximum context length is 128000 tokens. However, your messages \
             resulted in 530000 tokens.",
        );
        let anthropic = rejected(400, "prompt is too long: 215000 tokens > 200000 maximum");
        assert!(openai.is_too_long());
        assert!(anthropic.is_too_long());
        assert!(rejected(413, "request_too_large").is_too_long());
        assert!(!rejected(400, "unsupported parameter: temperature").is_too_long());
        assert!(!rejected(401, "prompt is too long").is_too_long());
        assert!(!LlmError::Timeout.is_too_long());
    }

    #[test]
    fn failures_are_classified_by_what_fixes_them() {
        let server = |status| LlmError::Server {
            status,
            message: "down".to_owned(),
        };
        let limited = LlmError::RateLimited {
            status: 529,
            retry_after: None,
        };
        let cases = [
            (LlmError::Timeout, ModelFailure::Unreachable),
            (
                LlmError::Network("connection refused".to_owned()),
                ModelFailure::Unreachable,
            ),
            (rejected(404), ModelFailure::Endpoint),
            (rejected(401), ModelFailure::Credentials),
            (rejected(403), ModelFailure::Credentials),
            (limited, ModelFailure::Busy),
            (server(503), ModelFailure::Busy),
            (rejected(400), ModelFailure::BadRequest),
            (rejected(413), ModelFailure::BadRequest),
            (server(500), ModelFailure::ProviderFailed),
            (
                LlmError::InvalidResponse("?".to_owned()),
                ModelFailure::ProviderFailed,
            ),
        ];
        for (error, failure) in cases {
            assert_eq!(error.failure(), failure, "{error}");
        }
        assert_eq!(rejected(404).status(), Some(404));
        assert_eq!(LlmError::Timeout.status(), None);
        assert!(ModelFailure::Credentials.needs_operator());
        assert!(!ModelFailure::Busy.needs_operator());
    }
}
