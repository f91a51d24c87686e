//! Streamed completions end to end: the model is called streaming, its text
//! reaches the API client as it arrives (text of every round, tool activity
//! as `switchboard` chunks), usage comes last when asked for, a stream cut
//! short is retried and continued from what the client was shown (never
//! repeated), a failed turn ends with an error event, and what is stored is
//! exactly what the same turn stores unstreamed.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use reqwest::StatusCode;
use serde_json::{Value, json};
use switchboard::llm::ProviderKind;

use crate::helpers::{FakeLlm, Reply, TestApp, last_is_tool_result};

/// A round with text and a calculator call, then an answer.
fn compute_then_answer(body: &Value) -> Reply {
    if last_is_tool_result(body) {
        return Reply::Text("It is 4, as computed.".to_owned());
    }
    Reply::TextAndTools(
        "Let me compute.".to_owned(),
        vec![(
            "c1".to_owned(),
            "calculator".to_owned(),
            r#"{ "expression": "2+2" }"#.to_owned(),
        )],
    )
}

/// The `data:` payloads of an event stream body, `[DONE]` last.
fn data_lines(body: &str) -> Vec<String> {
    body.lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .map(str::to_owned)
        .collect()
}

/// A streamed completion: its session id and its chunks (`[DONE]` checked
/// and removed).
async fn stream_chat(
    app: &TestApp,
    session: Option<&str>,
    text: &str,
    include_usage: bool,
) -> (String, Vec<Value>) {
    let mut body = json!({"stream": true, "messages": [{"role": "user", "content": text}]});
    if include_usage {
        body["stream_options"] = json!({"include_usage": true});
    }
    let mut request = app.http.post(app.url("/v1/chat/completions")).json(&body);
    if let Some(session) = session {
        request = request.header("X-Session-Id", session);
    }
    let response = request.send().await.expect("sent");
    assert_eq!(response.status(), StatusCode::OK);
    let session = response.headers()["x-session-id"]
        .to_str()
        .expect("header")
        .to_owned();
    let text = response.text().await.expect("body");
    let mut data = data_lines(&text);
    assert_eq!(data.pop().as_deref(), Some("[DONE]"), "{text}");
    let chunks = data
        .iter()
        .map(|line| serde_json::from_str(line).expect("chunk JSON"))
        .collect();
    (session, chunks)
}

/// The text deltas of chunks, joined.
fn content(chunks: &[Value]) -> String {
    chunks
        .iter()
        .filter_map(|chunk| chunk["choices"][0]["delta"]["content"].as_str())
        .collect()
}

/// What a session stored, without what differs between any two runs
/// (ids, session, task, times, latency, the fake model's request counter),
/// and the provider request ids apart.
async fn stored(app: &TestApp, session: &str) -> (Vec<Value>, Vec<Option<String>>) {
    let rows = app.stored_history(session).await;
    let request_ids = rows
        .iter()
        .map(|row| row.message.meta.request_id.clone())
        .collect();
    let rows = rows
        .into_iter()
        .map(|row| {
            let mut message = row.message;
            message.meta.latency_ms = None;
            message.meta.request_id = None;
            json!({
                "role": format!("{:?}", message.role),
                "content": message.content,
                "tool_calls": format!("{:?}", message.tool_calls),
                "tool_call_id": message.tool_call_id,
                "is_error": message.is_error,
                "meta": format!("{:?}", message.meta),
            })
        })
        .collect();
    (rows, request_ids)
}

/// A request's messages without the system prompt.
fn conversation(request: &Value) -> Vec<Value> {
    request["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|message| message["role"] != "system")
        .cloned()
        .collect()
}

async fn same_rows_streamed_or_not(provider: ProviderKind) {
    let llm = FakeLlm::start(compute_then_answer).await;
    let base = match provider {
        ProviderKind::Openai => llm.openai_base(),
        ProviderKind::Anthropic => llm.anthropic_base(),
    };
    let app = TestApp::spawn_with(&llm, |settings| {
        settings.llm.provider = provider;
        settings.llm.base_url = switchboard::domain::BaseUrl::parse(&base).expect("a test URL");
    })
    .await;

    let (status, plain_session, reply) = app.chat(None, "what is 2+2?").await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    assert_eq!(
        reply["choices"][0]["message"]["content"], "Let me compute.\n\nIt is 4, as computed.",
        "the plain reply is the visible text a stream shows"
    );
    let plain_session = plain_session.expect("session header");
    let (streamed_session, chunks) = stream_chat(&app, None, "what is 2+2?", false).await;
    assert_ne!(plain_session, streamed_session);

    // The client saw the text of both rounds, a blank line between them,
    // and the tool call between them.
    assert_eq!(content(&chunks), "Let me compute.\n\nIt is 4, as computed.");
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert!(
        chunks
            .iter()
            .all(|c| c["object"] == "chat.completion.chunk")
    );
    let events: Vec<(usize, &Value)> = chunks
        .iter()
        .enumerate()
        .filter(|(_, chunk)| !chunk["switchboard"].is_null())
        .map(|(index, chunk)| (index, &chunk["switchboard"]))
        .collect();
    assert_eq!(
        events
            .iter()
            .map(|(_, event)| (*event).clone())
            .collect::<Vec<_>>(),
        [
            json!({"type": "tool_call", "id": "c1", "name": "calculator",
                   "arguments": r#"{"expression":"2+2"}"#}),
            json!({"type": "tool_result", "id": "c1", "name": "calculator", "is_error": false}),
        ]
    );
    for (index, _) in &events {
        assert_eq!(chunks[*index]["choices"][0]["delta"], json!({}));
        assert!(chunks[*index]["choices"][0]["finish_reason"].is_null());
    }
    let before_tools = content(&chunks[..events[0].0]);
    assert_eq!(
        before_tools, "Let me compute.",
        "text streamed before the tool ran"
    );
    let last = chunks.last().expect("chunks");
    assert_eq!(last["choices"][0]["finish_reason"], "stop");
    assert!(last.get("usage").is_none(), "no usage chunk unless asked");
    assert!(
        chunks
            .iter()
            .filter(|c| c["choices"][0]["delta"]["content"].is_string())
            .count()
            > 3,
        "the text came in several deltas: {chunks:?}"
    );

    // Stored alike, row for row.
    let (plain_rows, plain_ids) = stored(&app, &plain_session).await;
    let (streamed_rows, streamed_ids) = stored(&app, &streamed_session).await;
    assert_eq!(plain_rows.len(), 4, "{plain_rows:?}");
    assert_eq!(plain_rows, streamed_rows);
    let some = |id: &str| Some(id.to_owned());
    assert_eq!(plain_ids, [None, some("req-1"), None, some("req-2")]);
    assert_eq!(
        streamed_ids,
        [None, some("req-3"), None, some("req-4")],
        "the provider's request ids, from the streams' headers"
    );

    // The model saw the same conversation; only the streamed requests asked
    // for a stream.
    let requests = llm.requests();
    assert_eq!(requests.len(), 4);
    let bodies: Vec<Value> = requests.iter().map(|r| r.json()).collect();
    assert_eq!(conversation(&bodies[0]), conversation(&bodies[2]));
    assert_eq!(conversation(&bodies[1]), conversation(&bodies[3]));
    assert!(bodies[..2].iter().all(|body| body.get("stream").is_none()));
    assert!(bodies[2..].iter().all(|body| body["stream"] == true));
    app.stop().await;
}

#[tokio::test]
async fn a_streamed_turn_with_tools_stores_what_an_unstreamed_one_does_openai() {
    same_rows_streamed_or_not(ProviderKind::Openai).await;
}

#[tokio::test]
async fn a_streamed_turn_with_tools_stores_what_an_unstreamed_one_does_anthropic() {
    same_rows_streamed_or_not(ProviderKind::Anthropic).await;
}

/// A stateless request: the whole transcript, streamed or not.
async fn resend(app: &TestApp, messages: Value, stream: bool) -> (String, String) {
    let body = json!({"messages": messages, "stream": stream});
    let response = app
        .http
        .post(app.url("/v1/chat/completions"))
        .json(&body)
        .send()
        .await
        .expect("sent");
    assert_eq!(response.status(), StatusCode::OK);
    let session = response.headers()["x-session-id"]
        .to_str()
        .expect("header")
        .to_owned();
    let text = response.text().await.expect("body");
    let reply = if stream {
        let mut data = data_lines(&text);
        assert_eq!(data.pop().as_deref(), Some("[DONE]"), "{text}");
        let chunks: Vec<Value> = data
            .iter()
            .map(|line| serde_json::from_str(line).expect("chunk JSON"))
            .collect();
        content(&chunks)
    } else {
        let body: Value = serde_json::from_str(&text).expect("JSON");
        body["choices"][0]["message"]["content"]
            .as_str()
            .expect("content")
            .to_owned()
    };
    (session, reply)
}

async fn a_resent_transcript_continues_its_session(stream: bool) {
    let llm = FakeLlm::start(compute_then_answer).await;
    let app = TestApp::spawn(&llm).await;
    let mut messages = vec![json!({"role": "user", "content": "what is 2+2?"})];

    let (first, reply) = resend(&app, json!(messages), stream).await;
    assert_eq!(reply, "Let me compute.\n\nIt is 4, as computed.");
    messages.push(json!({"role": "assistant", "content": reply}));
    messages.push(json!({"role": "user", "content": "and again?"}));
    let (second, _) = resend(&app, json!(messages), stream).await;

    assert_eq!(
        first, second,
        "the client's transcript continued its session"
    );
    let last = llm.requests().last().expect("requests").json();
    let tools: Vec<&Value> = last["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|message| message["role"] == "tool")
        .collect();
    assert_eq!(
        tools.len(),
        2,
        "the model still sees the first turn's tool round, then the second's"
    );
    app.stop().await;
}

#[tokio::test]
async fn a_streamed_reply_with_text_before_a_tool_call_resent_continues_the_session() {
    a_resent_transcript_continues_its_session(true).await;
}

#[tokio::test]
async fn a_plain_reply_with_text_before_a_tool_call_resent_continues_the_session() {
    a_resent_transcript_continues_its_session(false).await;
}

#[tokio::test]
async fn deltas_reach_the_client_before_the_turn_ends() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;
    llm.hold_streams();

    let mut response = app
        .http
        .post(app.url("/v1/chat/completions"))
        .json(&json!({"stream": true, "messages": [{"role": "user", "content": "hold on please"}]}))
        .send()
        .await
        .expect("sent");
    let session = response.headers()["x-session-id"]
        .to_str()
        .expect("header")
        .to_owned();
    // Read until the first piece of text: the model's stream is held right
    // after it, so the turn cannot have ended.
    let mut body = String::new();
    let first = loop {
        let piece = response
            .chunk()
            .await
            .expect("reads")
            .expect("the stream goes on while the model is held");
        body.push_str(std::str::from_utf8(&piece).expect("UTF-8"));
        let chunks: Vec<Value> = data_lines(&body)
            .iter()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect();
        let text = content(&chunks);
        if !text.is_empty() {
            break text;
        }
    };
    assert!("echo: hold on please".starts_with(&first), "{first}");
    assert_ne!(first, "echo: hold on please", "only the first delta so far");
    let history = app.wire_history(&session).await;
    assert!(
        history.iter().all(|entry| !matches!(
            entry.message,
            switchboard::domain::ChatMessage::Assistant { .. }
        )),
        "no reply is stored yet: {history:?}"
    );

    llm.release_streams();
    while let Some(piece) = response.chunk().await.expect("reads") {
        body.push_str(std::str::from_utf8(&piece).expect("UTF-8"));
    }
    let mut data = data_lines(&body);
    assert_eq!(data.pop().as_deref(), Some("[DONE]"));
    let chunks: Vec<Value> = data
        .iter()
        .map(|line| serde_json::from_str(line).expect("chunk JSON"))
        .collect();
    assert_eq!(content(&chunks), "echo: hold on please");
    assert_eq!(app.outcome_of_last_turn().await, "answered");
    app.stop().await;
}

#[tokio::test]
async fn usage_comes_last_when_asked_for() {
    let llm = FakeLlm::start(compute_then_answer).await;
    let app = TestApp::spawn(&llm).await;

    let (_, _, plain) = app.chat(None, "what is 2+2?").await;
    let (_, chunks) = stream_chat(&app, None, "what is 2+2?", true).await;

    let (usage, rest) = chunks.split_last().expect("chunks");
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["object"], "chat.completion.chunk");
    assert_eq!(
        usage["usage"], plain["usage"],
        "the turn's usage, as unstreamed"
    );
    assert_eq!(usage["usage"]["prompt_tokens"], 240, "both model calls");
    assert_eq!(usage["usage"]["completion_tokens"], 14);
    assert_eq!(usage["usage"]["total_tokens"], 254);
    let finish = rest.last().expect("finish chunk");
    assert_eq!(finish["choices"][0]["finish_reason"], "stop");
    assert!(rest.iter().all(|chunk| chunk.get("usage").is_none()));
    app.stop().await;
}

#[tokio::test]
async fn a_failed_streamed_turn_ends_with_an_error_event_not_an_apology() {
    let llm = FakeLlm::start(|body| {
        if last_is_tool_result(body) {
            Reply::Status(400, r#"{"error":{"message":"no"}}"#.to_owned())
        } else {
            compute_then_answer(body)
        }
    })
    .await;
    let app = TestApp::spawn(&llm).await;

    let (session, chunks) = stream_chat(&app, None, "what is 2+2?", false).await;

    let (error, chunks) = chunks.split_last().expect("chunks");
    assert_eq!(content(chunks), "Let me compute.", "no apology as content");
    assert!(
        chunks
            .iter()
            .all(|chunk| chunk["choices"][0]["finish_reason"].is_null()),
        "no finish reason: the turn did not finish"
    );
    assert_eq!(error["error"]["code"], "model_refused", "{error}");
    assert_eq!(error["error"]["type"], "invalid_request_error");
    assert_eq!(error["error"]["session_id"], session.as_str());
    assert_eq!(app.outcome_of_last_turn().await, "model_error");
    app.stop().await;
}

async fn a_cut_stream_is_retried(provider: ProviderKind) {
    let calls = Arc::new(AtomicUsize::new(0));
    let llm = FakeLlm::start(move |_| {
        if calls.fetch_add(1, Ordering::SeqCst) == 0 {
            Reply::CutStream("Hello wor".to_owned())
        } else {
            Reply::Text("Hello world.".to_owned())
        }
    })
    .await;
    let base = match provider {
        ProviderKind::Openai => llm.openai_base(),
        ProviderKind::Anthropic => llm.anthropic_base(),
    };
    let app = TestApp::spawn_with(&llm, |settings| {
        settings.llm.provider = provider;
        settings.llm.base_url = switchboard::domain::BaseUrl::parse(&base).expect("a test URL");
    })
    .await;

    let (session, chunks) = stream_chat(&app, None, "hi", false).await;

    // The client saw the cut text, then only what the retried call added:
    // the reply it was shown is the stored one, nothing repeated.
    assert_eq!(content(&chunks), "Hello world.");
    assert!(
        chunks
            .iter()
            .all(|chunk| chunk.get("switchboard").is_none()),
        "no gateway-specific restart marker: {chunks:?}"
    );
    // Stored as if the first attempt never happened; the retry sent the
    // same request.
    let history: Vec<_> = app
        .wire_history(&session)
        .await
        .into_iter()
        .map(|entry| entry.message)
        .collect();
    assert_eq!(
        history,
        [
            switchboard::domain::ChatMessage::user("hi"),
            switchboard::domain::ChatMessage::Assistant {
                content: Some("Hello world.".to_owned()),
                tool_calls: Vec::new()
            },
        ]
    );
    let requests = llm.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].body, requests[1].body);
    app.stop().await;
}

#[tokio::test]
async fn a_stream_cut_short_is_retried_without_repeating_text_openai() {
    a_cut_stream_is_retried(ProviderKind::Openai).await;
}

#[tokio::test]
async fn a_stream_cut_short_is_retried_without_repeating_text_anthropic() {
    a_cut_stream_is_retried(ProviderKind::Anthropic).await;
}
