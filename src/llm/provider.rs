//! The one HTTP provider: [`HttpProvider`] speaks any [`WireFormat`] and
//! does everything else the same for all of them: the attempt (the URL,
//! the endpoint's timeout, errors scrubbed of the key), retries under the
//! endpoint's [`super::RetryPolicy`] with the same body bytes each time,
//! streamed attempts read as they arrive (with a restart heard when an
//! attempt that sent text is retried, and a server that ignores `stream`
//! read whole), the request id and model of every response, and the log
//! line of a call that failed for good.

use async_trait::async_trait;
use reqwest::RequestBuilder;
use secrecy::ExposeSecret;

use super::failure::log_failure;
use super::http::{Streamed, labelled, post_json, post_stream, read_events};
use super::retry::with_retry;
use super::stream::{OnStream, Restarts, StreamEvent};
use super::wire::WireFormat;
use super::{Endpoint, LlmError, ModelRequest, ModelResponse, Provider, ProviderKind};

/// A provider speaking the wire format `W`.
pub(crate) struct HttpProvider<W> {
    endpoint: Endpoint,
    http: reqwest::Client,
    wire: W,
}

impl<W: WireFormat> HttpProvider<W> {
    pub(crate) fn new(endpoint: Endpoint, http: reqwest::Client, wire: W) -> Self {
        Self {
            endpoint,
            http,
            wire,
        }
    }

    fn url(&self) -> String {
        format!(
            "{}{}",
            self.endpoint.base_url.trim_end_matches('/'),
            W::PATH
        )
    }

    fn key(&self) -> &str {
        self.endpoint.api_key.expose_secret()
    }

    /// A POST to the format's URL, authenticated.
    fn post(&self) -> RequestBuilder {
        self.wire.authorize(self.http.post(self.url()), self.key())
    }

    async fn attempt(&self, body: &[u8], request_model: &str) -> Result<ModelResponse, LlmError> {
        let (headers, bytes) = post_json(self.post(), &self.endpoint, body, W::BUSY).await?;
        let response = self.wire.parse(&bytes, self.key())?;
        Ok(labelled(response, &headers, W::REQUEST_ID, request_model))
    }

    async fn attempt_stream(
        &self,
        body: &[u8],
        request_model: &str,
        restarts: &Restarts<'_>,
    ) -> Result<ModelResponse, LlmError> {
        restarts.begin_attempt();
        let key = self.key();
        let (headers, response) =
            match post_stream(self.post(), &self.endpoint, body, W::BUSY).await? {
                Streamed::Events(stream) => {
                    let headers = stream.headers().clone();
                    let decoder = self.wire.decoder(key);
                    (headers, read_events(stream, decoder, restarts, key).await?)
                }
                Streamed::Whole(headers, bytes) => {
                    let response = self.wire.parse(&bytes, key)?;
                    if let Some(text) = response.content.as_deref() {
                        restarts.pass(StreamEvent::Text(text));
                    }
                    (headers, response)
                }
            };
        Ok(labelled(response, &headers, W::REQUEST_ID, request_model))
    }
}

#[async_trait]
impl<W: WireFormat> Provider for HttpProvider<W> {
    fn kind(&self) -> ProviderKind {
        W::KIND
    }

    async fn complete(&self, request: &ModelRequest<'_>) -> Result<ModelResponse, LlmError> {
        let body = self.wire.encode(request, false)?;
        with_retry(&self.endpoint.retry, || self.attempt(&body, request.model))
            .await
            .inspect_err(|error| log_failure(&self.url(), error))
    }

    async fn stream(
        &self,
        request: &ModelRequest<'_>,
        on: OnStream<'_>,
    ) -> Result<ModelResponse, LlmError> {
        let body = self.wire.encode(request, true)?;
        let restarts = Restarts::new(on);
        with_retry(&self.endpoint.retry, || {
            self.attempt_stream(&body, request.model, &restarts)
        })
        .await
        .inspect_err(|error| log_failure(&self.url(), error))
    }
}
