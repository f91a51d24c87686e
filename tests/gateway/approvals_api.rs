//! A parked turn over the API's other shapes: a streamed chat completion
//! carries the request's text, ends with `finish_reason: "stop"` and
//! `[DONE]`, and its finishing chunk holds the `approval` object; the
//! Responses API answers a parked turn with the same `approval`, plain,
//! streamed (on `response.completed`) and read back while it waits. The
//! approval then decides the turn as any other.

use reqwest::StatusCode;
use serde_json::{Value, json};
use switchboard_test_support::eventually;

use crate::helpers::{FakeLlm, Reply, TestApp, last_is_tool_result};

/// Some text and a calculator call, then, given its result, an answer.
fn compute_then_answer(body: &Value) -> Reply {
    if last_is_tool_result(body) {
        return Reply::Text("It is 4, as computed.".to_owned());
    }
    Reply::TextAndTools(
        "Let me compute.".to_owned(),
        vec![(
            "c1".to_owned(),
            "calculator".to_owned(),
            r#"{"expression":"2+2"}"#.to_owned(),
        )],
    )
}

async fn asking_app(llm: &FakeLlm) -> TestApp {
    TestApp::spawn_with(llm, |settings| {
        settings.tools.approval.ask = vec!["calculator".to_owned()];
    })
    .await
}

/// The `data:` payloads of an event stream body.
fn data_lines(body: &str) -> Vec<String> {
    body.lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .map(str::to_owned)
        .collect()
}

/// The (event name, data) pairs of a typed server-sent event body.
fn events(body: &str) -> Vec<(String, Value)> {
    body.split("\n\n")
        .filter_map(|block| {
            let event = block
                .lines()
                .find_map(|line| line.strip_prefix("event: "))?;
            let data = block.lines().find_map(|line| line.strip_prefix("data: "))?;
            Some((event.to_owned(), serde_json::from_str(data).expect("JSON")))
        })
        .collect()
}

/// `POST path` with `body`: the status, `X-Session-Id` and the text body.
async fn post(app: &TestApp, path: &str, body: &Value) -> (StatusCode, String, String) {
    let response = app
        .http
        .post(app.url(path))
        .json(body)
        .send()
        .await
        .expect("sent");
    let status = response.status();
    let session = response
        .headers()
        .get("x-session-id")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    (status, session, response.text().await.expect("body"))
}

/// The approval as `GET /v1/approvals` lists it.
async fn listed(app: &TestApp) -> Vec<Value> {
    let list: Value = app
        .http
        .get(app.url("/v1/approvals"))
        .send()
        .await
        .expect("sent")
        .json()
        .await
        .expect("JSON");
    list["data"].as_array().cloned().unwrap_or_default()
}

/// Checks `approval` is the pending calculator call of `session`, as
/// `GET /v1/approvals` shows it, and allows it; the turn then finishes
/// with the tool's answer.
async fn allow_and_finish(app: &TestApp, session: &str, approval: &Value) {
    assert_eq!(approval["object"], "approval", "{approval}");
    assert_eq!(approval["tool"], "calculator");
    assert_eq!(approval["arguments"], json!({"expression": "2+2"}));
    assert_eq!(approval["status"], "pending");
    assert_eq!(approval["session"], session);
    assert!(approval["expires_at"].as_i64().is_some(), "{approval}");
    assert_eq!(listed(app).await, vec![approval.clone()]);
    let id = approval["id"].as_str().expect("id");
    let (status, _, body) = post(
        app,
        &format!("/v1/approvals/{id}"),
        &json!({"decision": "allow"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    eventually("the allowed turn to finish", || async {
        app.stored_history(session)
            .await
            .iter()
            .any(|m| m.message.content.as_deref() == Some("It is 4, as computed."))
    })
    .await;
}

#[tokio::test]
async fn a_streamed_completion_that_parks_ends_with_the_approval() {
    let llm = FakeLlm::start(compute_then_answer).await;
    let app = asking_app(&llm).await;
    let (status, session, body) = post(
        &app,
        "/v1/chat/completions",
        &json!({"stream": true, "messages": [{"role": "user", "content": "2+2?"}]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let mut data = data_lines(&body);
    assert_eq!(data.pop().as_deref(), Some("[DONE]"), "{body}");
    let chunks: Vec<Value> = data
        .iter()
        .map(|line| serde_json::from_str(line).expect("chunk JSON"))
        .collect();
    assert!(
        chunks.iter().all(|chunk| chunk.get("error").is_none()),
        "{body}"
    );
    let content: String = chunks
        .iter()
        .filter_map(|chunk| chunk["choices"][0]["delta"]["content"].as_str())
        .collect();
    // The text the model wrote, then the request naming the call.
    assert!(content.starts_with("Let me compute."), "{content}");
    assert!(content.contains("Approval needed"), "{content}");
    assert!(content.contains("2+2"), "{content}");
    let last = chunks.last().expect("chunks");
    assert_eq!(last["choices"][0]["finish_reason"], "stop", "{body}");
    let carrying: Vec<&Value> = chunks
        .iter()
        .filter(|chunk| chunk.get("approval").is_some())
        .collect();
    assert_eq!(carrying.len(), 1, "only the finishing chunk: {body}");
    allow_and_finish(&app, &session, &last["approval"]).await;
    app.stop().await;
}

#[tokio::test]
async fn a_response_that_parks_carries_the_approval() {
    let llm = FakeLlm::start(compute_then_answer).await;
    let app = asking_app(&llm).await;
    let (status, session, body) = post(&app, "/v1/responses", &json!({"input": "2+2?"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let response: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(response["status"], "completed", "{response}");
    let text = response["output"][0]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("Approval needed"), "{text}");
    // Read back while the turn waits: the same approval.
    let id = response["id"].as_str().expect("id");
    let read: Value = app
        .http
        .get(app.url(&format!("/v1/responses/{id}")))
        .send()
        .await
        .expect("sent")
        .json()
        .await
        .expect("JSON");
    assert_eq!(read["approval"], response["approval"], "{read}");
    allow_and_finish(&app, &session, &response["approval"]).await;
    app.stop().await;
}

#[tokio::test]
async fn a_streamed_response_that_parks_completes_with_the_approval() {
    let llm = FakeLlm::start(compute_then_answer).await;
    let app = asking_app(&llm).await;
    let (status, session, body) = post(
        &app,
        "/v1/responses",
        &json!({"input": "2+2?", "stream": true}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let events = events(&body);
    assert!(events.iter().all(|(name, _)| name != "error"), "{body}");
    let (name, completed) = events.last().expect("events");
    assert_eq!(name, "response.completed", "{body}");
    let response = &completed["response"];
    let text = response["output"][0]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.starts_with("Let me compute."), "{text}");
    assert!(text.contains("Approval needed"), "{text}");
    allow_and_finish(&app, &session, &response["approval"]).await;
    app.stop().await;
}
