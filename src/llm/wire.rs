//! What tells one provider from another: its wire format.
//!
//! A [`WireFormat`] says where a call goes (the path after the base URL)
//! and how it authenticates, how a [`ModelRequest`] is encoded (the bytes,
//! which must extend the previous turn's for the prompt cache to hit), how
//! an answer's body is parsed, how a streamed answer's events are decoded,
//! which statuses besides 429 mean "busy", and which header carries the
//! request id. Everything else, the HTTP attempt, retries, streaming,
//! timeouts, key redaction, is [`super::provider::HttpProvider`]'s, the
//! same for every format.

use reqwest::RequestBuilder;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::stream::StreamDecoder;
use super::{LlmError, ModelRequest, ModelResponse, ProviderKind};

/// One provider's wire format.
pub(crate) trait WireFormat: Send + Sync + 'static {
    /// Turns the events of one streamed answer into its response.
    type Decoder<'a>: StreamDecoder + Send;

    const KIND: ProviderKind;
    /// Appended to the endpoint's base URL (less its trailing slashes).
    const PATH: &'static str;
    /// Statuses that mean "busy, try again later" besides 429 (Anthropic's
    /// 529 "overloaded"): classified as rate limits, in a status or an
    /// error sent inside a stream alike.
    const BUSY: &'static [u16];
    /// The response header carrying the provider's request id.
    const REQUEST_ID: &'static str;

    /// `request` with the provider's authentication (and version) headers.
    fn authorize(&self, request: RequestBuilder, key: &str) -> RequestBuilder;

    /// The request body, serialised once so every retry sends the same
    /// bytes; `stream` asks for an event stream (the fields that ask come
    /// last, so a streamed request's `messages` bytes are an unstreamed
    /// one's).
    ///
    /// # Errors
    /// A request that cannot be serialised.
    fn encode(&self, request: &ModelRequest<'_>, stream: bool) -> Result<Vec<u8>, LlmError>;

    /// The response in a successful answer's `body`. Its `model` is the one
    /// the provider reported (empty when it named none) and its
    /// `request_id` the body's id: the provider completes both from the
    /// request and the headers (see [`super::http::labelled`]). `key` is
    /// scrubbed from any error message quoted.
    ///
    /// # Errors
    /// A body that is not the format's response.
    fn parse(&self, body: &[u8], key: &str) -> Result<ModelResponse, LlmError>;

    /// A fresh decoder for one streamed attempt, whose response is left to
    /// complete like [`WireFormat::parse`]'s; `key` is scrubbed from errors
    /// sent in the stream.
    fn decoder<'a>(&self, key: &'a str) -> Self::Decoder<'a>;
}

/// A request body as JSON.
///
/// # Errors
/// A body that cannot be serialised.
pub(crate) fn to_json(body: &impl Serialize) -> Result<Vec<u8>, LlmError> {
    serde_json::to_vec(body)
        .map_err(|error| LlmError::InvalidResponse(format!("could not encode request: {error}")))
}

/// A response body read from JSON.
///
/// # Errors
/// A body that is not JSON of the expected shape.
pub(crate) fn from_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, LlmError> {
    serde_json::from_slice(bytes)
        .map_err(|error| LlmError::InvalidResponse(format!("unexpected response body: {error}")))
}
