//! A fake OpenAI-compatible transcription server on 127.0.0.1:0:
//! `POST /v1/audio/transcriptions` reads the multipart form as OpenAI (and a
//! local whisper server) does (`file`, `model`, optional `language` and
//! `response_format`), records it, and answers `{"text": …}` with the text
//! it was given, or fails with the status it was told to. Told to hold, it
//! records requests and answers none until released (a slow server).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::Router;
use axum::extract::{Multipart, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::json;

/// One transcription request the fake received.
#[derive(Debug, Clone, Default)]
pub struct TranscriptionRequest {
    pub authorization: Option<String>,
    pub model: Option<String>,
    pub language: Option<String>,
    pub file_name: Option<String>,
    pub file_type: Option<String>,
    pub file: Vec<u8>,
}

#[derive(Default)]
struct FakeState {
    requests: Mutex<Vec<TranscriptionRequest>>,
    /// What the next requests get: the text, or a failing status.
    answer: Mutex<Option<Result<String, u16>>>,
    /// While true, requests are recorded and then wait.
    held: tokio::sync::watch::Sender<bool>,
}

/// The running fake.
pub struct FakeTranscription {
    address: SocketAddr,
    state: Arc<FakeState>,
}

impl FakeTranscription {
    /// Starts the server on a free port; it answers `text` until told
    /// otherwise.
    ///
    /// # Panics
    ///
    /// When no loopback port can be bound.
    pub async fn start(text: &str) -> Self {
        let state = Arc::new(FakeState::default());
        *lock(&state.answer) = Some(Ok(text.to_owned()));
        let app = Router::new()
            .route("/v1/audio/transcriptions", post(transcribe))
            .with_state(Arc::clone(&state));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let address = listener.local_addr().expect("addr");
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { address, state }
    }

    /// The base URL to configure, up to and including `/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.address)
    }

    /// Later requests get `text`.
    pub fn answer(&self, text: &str) {
        *lock(&self.state.answer) = Some(Ok(text.to_owned()));
    }

    /// Later requests fail with `status`.
    pub fn fail_with(&self, status: u16) {
        *lock(&self.state.answer) = Some(Err(status));
    }

    /// Later requests are recorded and then wait, unanswered, until
    /// [`FakeTranscription::release`].
    pub fn hold(&self) {
        self.state.held.send_replace(true);
    }

    /// Held requests (and later ones) are answered.
    pub fn release(&self) {
        self.state.held.send_replace(false);
    }

    /// The requests received so far.
    pub fn requests(&self) -> Vec<TranscriptionRequest> {
        lock(&self.state.requests).clone()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

async fn transcribe(
    State(state): State<Arc<FakeState>>,
    headers: HeaderMap,
    mut form: Multipart,
) -> Response {
    let mut request = TranscriptionRequest {
        authorization: headers
            .get("authorization")
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned),
        ..TranscriptionRequest::default()
    };
    loop {
        let field = match form.next_field().await {
            Ok(Some(field)) => field,
            Ok(None) => break,
            Err(err) => {
                return (StatusCode::BAD_REQUEST, format!("bad form: {err}")).into_response();
            }
        };
        let name = field.name().unwrap_or_default().to_owned();
        match name.as_str() {
            "file" => {
                request.file_name = field.file_name().map(str::to_owned);
                request.file_type = field.content_type().map(str::to_owned);
                match field.bytes().await {
                    Ok(bytes) => request.file = bytes.to_vec(),
                    Err(err) => {
                        return (StatusCode::BAD_REQUEST, format!("bad file: {err}"))
                            .into_response();
                    }
                }
            }
            "model" => request.model = field.text().await.ok(),
            "language" => request.language = field.text().await.ok(),
            _ => {}
        }
    }
    let missing = request.file.is_empty() || request.model.is_none();
    lock(&state.requests).push(request);
    if missing {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": {"message": "file and model are required"}})),
        )
            .into_response();
    }
    let mut held = state.held.subscribe();
    // The sender lives in `state`, so the wait ends only on a release.
    let _ = held.wait_for(|held| !held).await;
    let answer = lock(&state.answer).clone();
    match answer {
        Some(Ok(text)) => Json(json!({"text": text})).into_response(),
        Some(Err(status)) => (
            StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            Json(json!({"error": {"message": "the fake was told to fail"}})),
        )
            .into_response(),
        None => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}
