//! The Responses API over plain HTTP: a response is a turn, `previous_response_id`
//! continues its session with byte-stable model requests (twenty turns,
//! tool rounds included), a stream sends the typed events and ends as the
//! plain answer does, a failure is an error (an `error` event on a
//! stream), a response can be read back and deleted, and fields the gateway
//! does not pass on (or set to values that are not valid) are refused with
//! nothing stored.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{
    FakeLlm, Reply, TestApp, assert_prefix_holds, last_is_tool_result, last_user_text,
    tool_on_even_turns,
};

/// `POST /v1/responses` with `body`: status, `X-Session-Id`, text body.
async fn create(app: &TestApp, body: Value) -> (StatusCode, Option<String>, String) {
    let response = app
        .http
        .post(app.url("/v1/responses"))
        .json(&body)
        .send()
        .await
        .expect("sent");
    let status = response.status();
    let session = response
        .headers()
        .get("x-session-id")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    (status, session, response.text().await.expect("body"))
}

/// The text of a response's output messages.
fn output_text(response: &Value) -> String {
    response["output"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|item| item["content"].as_array().cloned().unwrap_or_default())
        .filter_map(|part| part["text"].as_str().map(str::to_owned))
        .collect()
}

/// The (event name, data) pairs of a server-sent event body.
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

#[tokio::test]
async fn twenty_turns_through_previous_response_id_keep_byte_stable_prefixes() {
    let llm = FakeLlm::start(|body| {
        if last_is_tool_result(body) {
            return Reply::Text("computed".to_owned());
        }
        let turn = last_user_text(body)
            .strip_prefix("turn ")
            .and_then(|n| n.parse().ok())
            .unwrap_or(1);
        tool_on_even_turns(turn, "calculator", json!({"expression": "1+1"}).to_string())
    })
    .await;
    let app = TestApp::spawn(&llm).await;
    let mut previous: Option<String> = None;
    let mut sessions = Vec::new();

    for turn in 1..=20 {
        let mut body = json!({"input": format!("turn {turn}")});
        if let Some(previous) = &previous {
            body["previous_response_id"] = json!(previous);
        }
        let (status, session, text) = create(&app, body).await;
        assert_eq!(status, StatusCode::OK, "{text}");
        let response: Value = serde_json::from_str(&text).expect("JSON");
        assert_eq!(response["object"], "response");
        assert_eq!(response["status"], "completed");
        assert!(!output_text(&response).is_empty(), "{response}");
        previous = response["id"].as_str().map(str::to_owned);
        sessions.push(session.expect("session header"));
    }

    sessions.dedup();
    assert_eq!(sessions.len(), 1, "one conversation");
    let requests = llm.requests();
    assert_eq!(requests.len(), 30, "twenty turns, ten with a tool round");
    assert_prefix_holds(&requests);
    app.stop().await;
}

#[tokio::test]
async fn a_streamed_response_sends_the_typed_events_and_ends_as_the_plain_one() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;

    let (status, _, body) = create(&app, json!({"input": "hello", "stream": true})).await;

    assert_eq!(status, StatusCode::OK);
    let events = events(&body);
    let mut names: Vec<&str> = events.iter().map(|(name, _)| name.as_str()).collect();
    names.dedup();
    assert_eq!(
        names,
        [
            "response.created",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    let deltas: String = events
        .iter()
        .filter(|(name, _)| name == "response.output_text.delta")
        .filter_map(|(_, data)| data["delta"].as_str())
        .collect();
    assert_eq!(deltas, "echo: hello");
    let (_, completed) = events.last().expect("events");
    assert_eq!(output_text(&completed["response"]), "echo: hello");
    let sequence: Vec<u64> = events
        .iter()
        .filter_map(|(_, data)| data["sequence_number"].as_u64())
        .collect();
    assert_eq!(sequence, (0..events.len() as u64).collect::<Vec<_>>());
    // Read back by its id.
    let id = completed["response"]["id"].as_str().expect("id");
    let stored: Value = app
        .http
        .get(app.url(&format!("/v1/responses/{id}")))
        .send()
        .await
        .expect("sent")
        .json()
        .await
        .expect("JSON");
    assert_eq!(stored["status"], "completed");
    assert_eq!(output_text(&stored), "echo: hello");
    app.stop().await;
}

#[tokio::test]
async fn a_failed_response_is_an_error_plain_and_streamed() {
    let llm =
        FakeLlm::start(|_| Reply::Status(500, r#"{"error":{"message":"boom"}}"#.to_owned())).await;
    let app = TestApp::spawn_with(&llm, |s| s.llm.max_retries = 0).await;

    let (status, session, body) = create(&app, json!({"input": "hello"})).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{body}");
    assert!(session.is_some());
    let error: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(error["error"]["code"], "model_failed");

    let (status, _, body) = create(&app, json!({"input": "hello again", "stream": true})).await;
    assert_eq!(status, StatusCode::OK, "the stream had started");
    let events = events(&body);
    let names: Vec<&str> = events.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        names[names.len() - 2..],
        ["response.failed", "error"],
        "{names:?}"
    );
    let (_, error) = events.last().expect("events");
    assert_eq!(error["code"], "model_failed");
    assert_eq!(error["error"]["code"], "model_failed");
    app.stop().await;
}

#[tokio::test]
async fn a_deleted_response_cannot_be_read_or_continued() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;
    let (_, _, body) = create(&app, json!({"input": "hello"})).await;
    let id = serde_json::from_str::<Value>(&body).expect("JSON")["id"]
        .as_str()
        .expect("id")
        .to_owned();

    let deleted: Value = app
        .http
        .delete(app.url(&format!("/v1/responses/{id}")))
        .send()
        .await
        .expect("sent")
        .json()
        .await
        .expect("JSON");

    assert_eq!(
        deleted,
        json!({"id": id, "object": "response", "deleted": true})
    );
    let read = app
        .http
        .get(app.url(&format!("/v1/responses/{id}")))
        .send()
        .await
        .expect("sent");
    assert_eq!(read.status(), StatusCode::NOT_FOUND);
    let (status, _, _) = create(&app, json!({"input": "more", "previous_response_id": id})).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    app.stop().await;
}

#[tokio::test]
async fn fields_not_passed_on_or_not_valid_are_refused_and_nothing_is_stored() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;

    let refused = [
        json!({"input": "a", "tools": [{"type": "web_search"}]}),
        json!({"input": "a", "tools": [{"type": "function", "name": "bad name"}]}),
        json!({"input": "a", "text": {"format": {"type": "xml"}}}),
        json!({"input": "a", "temperature": 5}),
        json!({"input": "a", "max_output_tokens": "many"}),
        json!({"input": [{"type": "function_call_output", "call_id": "c", "output": "1"}]}),
        json!({"input": "a", "store": false}),
        json!({"input": 7}),
    ];
    for body in refused {
        let (status, _, text) = create(&app, body.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {text}");
    }

    assert_eq!(app.count("inbound").await, 0);
    assert!(llm.requests().is_empty());
    app.stop().await;
}
