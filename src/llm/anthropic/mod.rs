//! Anthropic Messages: `POST {base}/v1/messages` with `x-api-key` and the
//! API version it follows; the request body ([`request`]), the response
//! ([`response`]) and the streamed events ([`events`]). Besides 429, 529
//! "overloaded" means busy (retried like a rate limit); the request id is
//! `request-id`.

mod events;
mod request;
mod response;
#[cfg(test)]
mod tests;

use reqwest::RequestBuilder;

use super::wire::WireFormat;
use super::{LlmError, ModelRequest, ModelResponse, ProviderKind};

/// The API version this module's wire format follows.
const ANTHROPIC_VERSION: &str = "2023-06-01";

/// Anthropic's "overloaded" status: transient, like a rate limit.
const OVERLOADED: u16 = 529;

/// The Messages wire format, with how long its cache breakpoints live.
pub(crate) struct Anthropic {
    pub(crate) cache_ttl: super::settings::CacheTtl,
}

impl WireFormat for Anthropic {
    type Decoder<'a> = events::EventDecoder<'a>;

    const KIND: ProviderKind = ProviderKind::Anthropic;
    const PATH: &'static str = "/v1/messages";
    const BUSY: &'static [u16] = &[OVERLOADED];
    const REQUEST_ID: &'static str = "request-id";

    fn authorize(&self, request: RequestBuilder, key: &str) -> RequestBuilder {
        request
            .header("x-api-key", key)
            .header("anthropic-version", ANTHROPIC_VERSION)
    }

    fn encode(&self, request: &ModelRequest<'_>, stream: bool) -> Result<Vec<u8>, LlmError> {
        request::body(request, self.cache_ttl, stream)
    }

    fn parse(&self, body: &[u8], _key: &str) -> Result<ModelResponse, LlmError> {
        response::parse(body)
    }

    fn decoder<'a>(&self, key: &'a str) -> Self::Decoder<'a> {
        events::EventDecoder::new(key)
    }
}
