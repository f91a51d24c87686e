//! `image_url` content parts through the HTTP API: a `data:` URL and an
//! `http(s)` URL (served by a small server on 127.0.0.1) reach a vision
//! model as image parts and are stored as blobs; a resent transcript with
//! the image in an earlier message continues its session; `http(s)` URLs
//! obey the `http_get` rules (loopback refused unless
//! `tools.http_get.allow_private`), and every malformed part is a 400 that
//! names it, with nothing stored and no model call.

use axum::Router;
use axum::routing::get;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use reqwest::StatusCode;
use serde_json::{Value, json};
use switchboard_test_support::media::gradient_png;

use crate::helpers::{FakeLlm, TestApp};
use crate::helpers::{files_under, last_user_content};

/// Posts `body`; returns the status, the session header and the JSON body.
async fn post(app: &TestApp, body: &Value) -> (StatusCode, Option<String>, Value) {
    let response = app
        .http
        .post(app.url("/v1/chat/completions"))
        .json(body)
        .send()
        .await
        .expect("request sent");
    let status = response.status();
    let session = response
        .headers()
        .get("x-session-id")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    (
        status,
        session,
        response.json().await.unwrap_or(Value::Null),
    )
}

/// A server on 127.0.0.1 serving `png` at `/cat.png` and text at
/// `/not-an-image.png`; its base URL.
async fn image_server(png: Vec<u8>) -> String {
    let app = Router::new()
        .route(
            "/cat.png",
            get(move || {
                let png = png.clone();
                async move { ([("content-type", "image/png")], png) }
            }),
        )
        .route(
            "/not-an-image.png",
            get(|| async { ([("content-type", "image/png")], "just text") }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{address}")
}

fn with_image(text: &str, url: &str) -> Value {
    json!([
        {"type": "text", "text": text},
        {"type": "image_url", "image_url": {"url": url, "detail": "auto"}},
    ])
}

#[tokio::test]
async fn a_data_url_image_reaches_the_vision_model_and_a_resent_transcript_continues() {
    let llm = FakeLlm::echo().await;
    let blobs = tempfile::tempdir().expect("tempdir");
    let folder = blobs.path().join("media");
    let app = TestApp::spawn_with(&llm, |s| {
        s.media.vision_models = vec!["fake-model".to_owned()];
        s.media.folder.clone_from(&folder);
    })
    .await;
    let png = gradient_png(8, 8, false);
    // Declared as JPEG: the type is read off the bytes.
    let url = format!("data:image/jpeg;base64,{}", BASE64.encode(&png));
    let first_message = json!({"role": "user", "content": with_image("what is this?", &url)});

    let (status, session, body) = post(&app, &json!({"messages": [first_message]})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let reply = body["choices"][0]["message"]["content"]
        .as_str()
        .expect("reply")
        .to_owned();
    let shown = format!("data:image/png;base64,{}", BASE64.encode(&png));
    assert_eq!(
        last_user_content(&llm.requests()[0].json()),
        json!([
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": shown}},
        ])
    );
    let stored = files_under(&folder);
    assert_eq!(stored.len(), 1, "{stored:?}");
    assert_eq!(std::fs::read(&stored[0]).expect("blob"), png);

    // A stateless client resends the whole transcript: the same session,
    // and the model request begins with the first one's messages.
    let (status, again, body) = post(
        &app,
        &json!({"messages": [
            first_message,
            {"role": "assistant", "content": reply},
            {"role": "user", "content": "and its colours?"},
        ]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(again, session, "the transcript continues its session");
    let requests = llm.requests();
    let before = requests[0].raw_messages();
    assert!(
        requests[1]
            .raw_messages()
            .starts_with(before.trim_end_matches(']')),
        "the prompt prefix changed"
    );
    assert_eq!(files_under(&folder).len(), 1, "nothing stored again");
    app.stop().await;
}

#[tokio::test]
async fn an_http_image_url_is_fetched_under_the_http_get_rules() {
    let png = gradient_png(4, 4, true);
    let server = image_server(png.clone()).await;
    let llm = FakeLlm::echo().await;
    let blobs = tempfile::tempdir().expect("tempdir");
    let folder = blobs.path().join("media");

    // By default a loopback address is refused, by IP and by name.
    let strict = TestApp::spawn_with(&llm, |s| {
        s.media.vision_models = vec!["fake-model".to_owned()];
        s.media.folder.clone_from(&folder);
    })
    .await;
    let port = server.rsplit(':').next().expect("port");
    for (url, expected) in [
        (format!("{server}/cat.png"), "non-public address"),
        (
            format!("http://localhost:{port}/cat.png"),
            "resolves to a private",
        ),
    ] {
        let (status, _, body) = post(
            &strict,
            &json!({"messages": [{"role": "user", "content": with_image("look", &url)}]}),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        let message = body["error"]["message"].as_str().expect("message");
        assert!(
            message.starts_with("messages[0].content[1]: image_url ") && message.contains(expected),
            "{message}"
        );
    }
    assert_eq!(strict.count("inbound").await, 0, "nothing stored");
    assert!(files_under(&folder).is_empty());
    strict.stop().await;

    // Allowed, the image is fetched; a body that is no image is refused.
    let open = TestApp::spawn_with(&llm, |s| {
        s.media.vision_models = vec!["fake-model".to_owned()];
        s.media.folder.clone_from(&folder);
        s.tools.http_get.allow_private = true;
    })
    .await;
    let (status, _, body) = post(
        &open,
        &json!({"messages": [{"role": "user", "content": with_image("look", &format!("{server}/cat.png"))}]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        last_user_content(&llm.requests()[0].json())[1]["image_url"]["url"],
        json!(format!("data:image/png;base64,{}", BASE64.encode(&png)))
    );
    let (status, _, body) = post(
        &open,
        &json!({"messages": [{"role": "user", "content": with_image("look", &format!("{server}/not-an-image.png"))}]}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|message| message.contains("is not a PNG, JPEG, GIF or WebP image")),
        "{body}"
    );
    let (status, _, body) = post(
        &open,
        &json!({"messages": [{"role": "user", "content": with_image("look", &format!("{server}/missing.png"))}]}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|message| message.contains("404")),
        "{body}"
    );
    assert_eq!(llm.requests().len(), 1, "one model call, for the image");
    assert_eq!(files_under(&folder).len(), 1);
    open.stop().await;
}

#[tokio::test]
async fn malformed_image_parts_get_a_400_naming_them_and_nothing_is_stored() {
    let llm = FakeLlm::echo().await;
    let blobs = tempfile::tempdir().expect("tempdir");
    let folder = blobs.path().join("media");
    let app = TestApp::spawn_with(&llm, |s| {
        s.media.vision_models = vec!["fake-model".to_owned()];
        s.media.folder.clone_from(&folder);
        s.media.max_file_bytes = 2048;
    })
    .await;
    let big = format!(
        "data:image/png;base64,{}",
        BASE64.encode(gradient_png(64, 64, false))
    );
    let cases = [
        (
            json!([{"type": "image_url", "image_url": {"detail": "low"}}]),
            "messages[0].content[0]: an image_url part needs `image_url.url`",
        ),
        (
            with_image("x", "data:image/png;base64,!!!notbase64"),
            "messages[0].content[1]: image_url is a data: URL whose base64 does not decode",
        ),
        (
            with_image(
                "x",
                &format!("data:image/png;base64,{}", BASE64.encode("hello")),
            ),
            "messages[0].content[1]: image_url is not a PNG, JPEG, GIF or WebP image",
        ),
        (
            with_image("x", &big),
            "messages[0].content[1]: image_url is too large: images can be at most 2048 bytes",
        ),
        (
            with_image("x", "file:///etc/passwd"),
            "messages[0].content[1]: image_url must be a data: URL or an http(s) URL",
        ),
        (
            json!([{"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}]),
            "messages[0].content[0]: content parts of type `input_audio` are not supported",
        ),
    ];
    for (content, expected) in cases {
        let (status, _, body) = post(
            &app,
            &json!({"messages": [{"role": "user", "content": content}]}),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        let message = body["error"]["message"].as_str().expect("message");
        assert!(message.starts_with(expected), "{message}");
    }
    assert!(llm.requests().is_empty(), "no model call");
    assert_eq!(app.count("inbound").await, 0, "nothing stored");
    assert_eq!(app.count("sessions").await, 0, "no session");
    assert!(files_under(&folder).is_empty(), "no blob");
    app.stop().await;
}
