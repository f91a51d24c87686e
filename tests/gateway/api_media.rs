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

use crate::api_sessions::{Answer, answer_of};
use crate::helpers::{FakeLlm, TestApp};
use crate::helpers::{assert_prefix_holds, files_under, last_user_content};

/// Posts `messages` (a JSON array).
async fn post(app: &TestApp, messages: Value) -> Answer {
    let request = app
        .http
        .post(app.url("/v1/chat/completions"))
        .json(&json!({"messages": messages}));
    answer_of(request.send().await.expect("sent")).await
}

/// Posts one user message of `content`.
async fn ask(app: &TestApp, content: Value) -> Answer {
    post(app, json!([{"role": "user", "content": content}])).await
}

/// The error message of `answer`, which must be a 400.
fn refused(answer: &Answer) -> &str {
    assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{}", answer.body);
    answer.body["error"]["message"].as_str().expect("message")
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
    let app = TestApp::spawn_with(&llm, |s| {
        s.media.vision_models = vec!["fake-model".to_owned()];
    })
    .await;
    let folder = app.gateway.settings.media.folder.clone();
    let png = gradient_png(8, 8, false);
    // Declared as JPEG: the type is read off the bytes.
    let url = format!("data:image/jpeg;base64,{}", BASE64.encode(&png));
    let first_message = json!({"role": "user", "content": with_image("what is this?", &url)});

    let first = post(&app, json!([first_message])).await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.body);
    let reply = first.body["choices"][0]["message"]["content"]
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
    let again = post(
        &app,
        json!([
            first_message,
            {"role": "assistant", "content": reply},
            {"role": "user", "content": "and its colours?"},
        ]),
    )
    .await;
    assert_eq!(again.status, StatusCode::OK, "{}", again.body);
    assert_eq!(
        again.session, first.session,
        "the transcript continues its session"
    );
    let requests = llm.requests();
    assert_eq!(requests.len(), 2);
    assert_prefix_holds(&requests);
    assert_eq!(files_under(&folder).len(), 1, "nothing stored again");
    app.stop().await;
}

#[tokio::test]
async fn an_http_image_url_is_fetched_under_the_http_get_rules() {
    let png = gradient_png(4, 4, true);
    let server = image_server(png.clone()).await;
    let llm = FakeLlm::echo().await;

    // By default a loopback address is refused, by IP and by name.
    let strict = TestApp::spawn_with(&llm, |s| {
        s.media.vision_models = vec!["fake-model".to_owned()];
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
        let answer = ask(&strict, with_image("look", &url)).await;
        let message = refused(&answer);
        assert!(
            message.starts_with("messages[0].content[1]: image_url ") && message.contains(expected),
            "{message}"
        );
    }
    assert_eq!(strict.count("inbound").await, 0, "nothing stored");
    assert!(files_under(&strict.gateway.settings.media.folder).is_empty());
    strict.stop().await;

    // Allowed, the image is fetched; a body that is no image is refused.
    let open = TestApp::spawn_with(&llm, |s| {
        s.media.vision_models = vec!["fake-model".to_owned()];
        s.tools.http_get.allow_private = true;
    })
    .await;
    let answer = ask(&open, with_image("look", &format!("{server}/cat.png"))).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(
        last_user_content(&llm.requests()[0].json())[1]["image_url"]["url"],
        json!(format!("data:image/png;base64,{}", BASE64.encode(&png)))
    );
    for (path, expected) in [
        ("not-an-image.png", "is not a PNG, JPEG, GIF or WebP image"),
        ("missing.png", "404"),
    ] {
        let answer = ask(&open, with_image("look", &format!("{server}/{path}"))).await;
        let message = refused(&answer);
        assert!(message.contains(expected), "{message}");
    }
    assert_eq!(llm.requests().len(), 1, "one model call, for the image");
    assert_eq!(files_under(&open.gateway.settings.media.folder).len(), 1);
    open.stop().await;
}

#[tokio::test]
async fn malformed_image_parts_get_a_400_naming_them_and_nothing_is_stored() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn_with(&llm, |s| {
        s.media.vision_models = vec!["fake-model".to_owned()];
        s.media.max_file_bytes = std::num::NonZero::new(2048).unwrap();
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
        let answer = ask(&app, content).await;
        let message = refused(&answer);
        assert!(message.starts_with(expected), "{message}");
    }
    assert!(llm.requests().is_empty(), "no model call");
    assert_eq!(app.count("inbound").await, 0, "nothing stored");
    assert_eq!(app.count("sessions").await, 0, "no session");
    assert!(
        files_under(&app.gateway.settings.media.folder).is_empty(),
        "no blob"
    );
    app.stop().await;
}
