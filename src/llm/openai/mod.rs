//! OpenAI Chat Completions, the wire format of OpenAI and of every server
//! that speaks it (OpenRouter, DeepSeek, vLLM, Ollama): `POST
//! {base}/chat/completions` with a bearer key; the request body
//! ([`request`]), the response ([`response`]) and the streamed chunks
//! ([`chunks`]). Nothing but 429 means busy; the request id is
//! `x-request-id`.

mod chunks;
mod request;
mod response;
#[cfg(test)]
mod tests;

use reqwest::RequestBuilder;
use reqwest::header::AUTHORIZATION;

use super::wire::WireFormat;
use super::{LlmError, ModelRequest, ModelResponse, ProviderKind};

/// The Chat Completions wire format.
pub(crate) struct OpenAi;

impl WireFormat for OpenAi {
    type Decoder<'a> = chunks::ChunkDecoder<'a>;

    const KIND: ProviderKind = ProviderKind::Openai;
    const PATH: &'static str = "/chat/completions";
    const BUSY: &'static [u16] = &[];
    const REQUEST_ID: &'static str = "x-request-id";

    fn authorize(&self, request: RequestBuilder, key: &str) -> RequestBuilder {
        request.header(AUTHORIZATION, format!("Bearer {key}"))
    }

    fn encode(&self, request: &ModelRequest<'_>, stream: bool) -> Result<Vec<u8>, LlmError> {
        request::body(request, stream)
    }

    fn parse(&self, body: &[u8], key: &str) -> Result<ModelResponse, LlmError> {
        response::parse(body, key)
    }

    fn decoder<'a>(&self, key: &'a str) -> Self::Decoder<'a> {
        chunks::ChunkDecoder::new(key)
    }
}
