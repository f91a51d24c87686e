//! One HTTP attempt, the same for every wire format: POST the body with
//! the endpoint's timeout and read the whole answer ([`post_json`]), or ask
//! for an event stream and read it piece by piece into a decoder
//! ([`post_stream`], [`read_events`]); an error status or a transport
//! failure becomes its [`LlmError`] (see [`super::failure`]). Then the
//! metadata every response has, from the headers and the request
//! ([`labelled`]).

use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap};
use reqwest::{RequestBuilder, Response};
use secrecy::ExposeSecret;

use super::failure::{status_error, transport_error};
use super::stream::{EventReader, Restarts, StreamDecoder, StreamEvent};
use super::{Endpoint, LlmError, ModelResponse};

/// POSTs the JSON `body` through `request` (the provider's URL and auth
/// headers) with the endpoint's timeout; `stream` asks for an event stream.
async fn send(
    request: RequestBuilder,
    endpoint: &Endpoint,
    body: &[u8],
    stream: bool,
) -> Result<Response, LlmError> {
    let mut request = request
        .timeout(endpoint.timeout)
        .header(CONTENT_TYPE, "application/json");
    if stream {
        request = request.header(ACCEPT, "text/event-stream");
    }
    request
        .body(body.to_vec())
        .send()
        .await
        .map_err(|error| transport_error(error, endpoint.api_key.expose_secret()))
}

/// Reads a whole answer: its headers and body, or the error its status
/// stands for. Statuses in `busy` count as rate limits, like 429.
async fn read_whole(
    response: Response,
    endpoint: &Endpoint,
    busy: &[u16],
) -> Result<(HeaderMap, Vec<u8>), LlmError> {
    let key = endpoint.api_key.expose_secret();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = response
        .bytes()
        .await
        .map_err(|error| transport_error(error, key))?;
    if !status.is_success() {
        return Err(status_error(status, &headers, &bytes, key, busy));
    }
    Ok((headers, bytes.to_vec()))
}

/// Makes one attempt: POSTs `body` and returns a success's headers and
/// body.
///
/// # Errors
/// The transport failure or error status, scrubbed of the endpoint's key.
pub(crate) async fn post_json(
    request: RequestBuilder,
    endpoint: &Endpoint,
    body: &[u8],
    busy: &[u16],
) -> Result<(HeaderMap, Vec<u8>), LlmError> {
    let response = send(request, endpoint, body, false).await?;
    read_whole(response, endpoint, busy).await
}

/// What a streamed attempt got back.
pub(crate) enum Streamed {
    /// An event stream, to be read with [`read_events`].
    Events(Response),
    /// One JSON body (some compatible servers ignore `stream`), with its
    /// headers.
    Whole(HeaderMap, Vec<u8>),
}

/// Makes one streamed attempt: POSTs `body` (which asks for a stream) like
/// [`post_json`], and returns the stream, or the body of a server that
/// answered with one JSON body instead.
///
/// # Errors
/// As [`post_json`].
pub(crate) async fn post_stream(
    request: RequestBuilder,
    endpoint: &Endpoint,
    body: &[u8],
    busy: &[u16],
) -> Result<Streamed, LlmError> {
    let response = send(request, endpoint, body, true).await?;
    let is_json = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("application/json"));
    if !response.status().is_success() || is_json {
        let (headers, bytes) = read_whole(response, endpoint, busy).await?;
        return Ok(Streamed::Whole(headers, bytes));
    }
    Ok(Streamed::Events(response))
}

/// Reads an event stream into `decoder` as it arrives, its text passed on
/// through `restarts`.
///
/// # Errors
/// A transport failure while the stream is read (scrubbed of `key`); what
/// the decoder finds wrong with the stream.
pub(crate) async fn read_events<D: StreamDecoder>(
    mut response: Response,
    decoder: D,
    restarts: &Restarts<'_>,
    key: &str,
) -> Result<ModelResponse, LlmError> {
    let on = |event: StreamEvent<'_>| restarts.pass(event);
    let mut reader = EventReader::new(decoder);
    while !reader.done() {
        let Some(piece) = response
            .chunk()
            .await
            .map_err(|error| transport_error(error, key))?
        else {
            break;
        };
        reader.feed(&piece, &on)?;
    }
    reader.finish(&on)
}

/// Completes a parsed or decoded response: the request id is the
/// provider's `header` when it sends one, else the id in the body; the
/// model is the one the provider reported, else the `requested` one.
pub(crate) fn labelled(
    mut response: ModelResponse,
    headers: &HeaderMap,
    header: &str,
    requested: &str,
) -> ModelResponse {
    if let Some(id) = headers.get(header).and_then(|value| value.to_str().ok()) {
        response.request_id = Some(id.to_owned());
    }
    if response.model.is_empty() {
        requested.clone_into(&mut response.model);
    }
    response
}
