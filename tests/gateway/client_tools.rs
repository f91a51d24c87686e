//! The API client's own function tools (issue 28, point 4), over real HTTP
//! against the fake model: offered after the gateway's tools; a response
//! calling one ends the turn with `finish_reason: "tool_calls"` once the
//! gateway's own calls of the round ran; the next request's `role: "tool"`
//! results continue the same session (found by its resent transcript, or
//! named) with the call ids kept and the prompt prefix byte-stable; results
//! that answer nothing are a 400 storing nothing; a new message instead of
//! the results gives the calls an error result; `tool_choice` and
//! `parallel_tool_calls` reach the provider in its own form; and a
//! continuation cut short by a crash resumes with the client's result once.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use switchboard::config::Settings;
use switchboard::domain::{ClientResult, ToolSpec, TurnOptions};
use switchboard::gateway::Gateway;
use switchboard::session::service::SubmitOptions;
use switchboard_contract::{AccountId, ChatKind, EventId, InboundMessage, PlatformName};
use switchboard_test_support::{eventually, inbound};

use crate::helpers::{FakeLlm, Reply, TestApp, assert_prefix_holds, last_user_text, test_settings};

/// The client's weather tool.
fn weather_tool() -> Value {
    json!({"type": "function", "function": {
        "name": "get_weather",
        "description": "The weather in a city now",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}})
}

/// Asked about the weather: computes with the gateway's calculator and
/// calls the client's `get_weather` in one response (`call_c<n>` and
/// `call_w<n>` for the n-th user message); given the weather, answers with
/// it; otherwise echoes.
fn weather_agent(body: &Value) -> Reply {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let last = messages.last().cloned().unwrap_or(Value::Null);
    if last["role"] == "tool" {
        let weather = messages
            .iter()
            .rev()
            .find(|message| {
                message["tool_call_id"]
                    .as_str()
                    .is_some_and(|id| id.starts_with("call_w"))
            })
            .map(|message| message["content"].as_str().unwrap_or_default().to_owned())
            .unwrap_or_default();
        return Reply::Text(format!("In Paris: {weather}"));
    }
    if last_user_text(body).contains("weather") {
        let n = messages
            .iter()
            .filter(|message| message["role"] == "user")
            .count();
        return Reply::TextAndTools(
            "Let me check.".to_owned(),
            vec![
                (
                    format!("call_c{n}"),
                    "calculator".to_owned(),
                    json!({"expression": "20+1"}).to_string(),
                ),
                (
                    format!("call_w{n}"),
                    "get_weather".to_owned(),
                    json!({"city": "Paris"}).to_string(),
                ),
            ],
        );
    }
    Reply::Text(format!("echo: {}", last_user_text(body)))
}

/// `POST /v1/chat/completions` with `body` (and `X-Session-Id` when
/// given): status, session header, body (JSON, or the raw text of a
/// stream as a string).
async fn post(app: &TestApp, session: Option<&str>, body: &Value) -> (StatusCode, String, Value) {
    let mut request = app.http.post(app.url("/v1/chat/completions")).json(body);
    if let Some(session) = session {
        request = request.header("X-Session-Id", session);
    }
    let response = request.send().await.expect("sent");
    let status = response.status();
    let session = response
        .headers()
        .get("x-session-id")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let text = response.text().await.expect("body");
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, session, body)
}

/// The user's question and the assistant message handing the weather call
/// to the client, as the client keeps them.
fn asked_and_handed() -> Vec<Value> {
    vec![
        json!({"role": "user", "content": "what is the weather in Paris?"}),
        json!({"role": "assistant", "content": "Let me check.", "tool_calls": [{
            "id": "call_w1", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]}),
    ]
}

#[tokio::test]
async fn a_client_tool_call_round_trips_and_the_resent_transcript_continues_the_session() {
    let llm = FakeLlm::start(weather_agent).await;
    let app = TestApp::spawn(&llm).await;

    let (status, session, answer) = post(
        &app,
        None,
        &json!({"tools": [weather_tool()],
                "messages": [{"role": "user", "content": "what is the weather in Paris?"}]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let choice = &answer["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{answer}");
    assert_eq!(choice["message"]["content"], "Let me check.");
    assert_eq!(
        choice["message"]["tool_calls"],
        json!([{"id": "call_w1", "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]),
        "only the client's call is handed to it"
    );
    let requests = llm.requests();
    assert_eq!(requests.len(), 1, "the turn ended at the client's call");
    let tools: Vec<String> = requests[0].json()["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|tool| {
            tool["function"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    assert_eq!(
        tools.last().map(String::as_str),
        Some("get_weather"),
        "the client's tool follows the gateway's: {tools:?}"
    );
    assert!(tools.iter().any(|name| name == "calculator"));

    // The client runs its tool and resends the transcript with the result.
    let mut messages = asked_and_handed();
    messages.push(json!({"role": "tool", "tool_call_id": "call_w1", "content": "sunny, 21°C"}));
    let (status, continued, answer) = post(
        &app,
        None,
        &json!({"tools": [weather_tool()], "messages": messages}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(continued, session, "the same session");
    assert_eq!(answer["choices"][0]["finish_reason"], "stop");
    assert_eq!(
        answer["choices"][0]["message"]["content"],
        "In Paris: sunny, 21°C"
    );
    let requests = llm.requests();
    assert_eq!(requests.len(), 2);
    let body = requests[1].json();
    let sent = body["messages"].as_array().expect("messages");
    let results: Vec<(&str, &str)> = sent
        .iter()
        .filter(|message| message["role"] == "tool")
        .map(|message| {
            (
                message["tool_call_id"].as_str().unwrap_or_default(),
                message["content"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(results.len(), 2, "{body}");
    assert_eq!(results[0].0, "call_c1", "the gateway's call ran: {body}");
    assert!(results[0].1.contains("21"), "{results:?}");
    assert_eq!(
        results[1],
        ("call_w1", "sunny, 21°C"),
        "the client's result, as sent"
    );
    assert_prefix_holds(&requests);

    // The conversation goes on from the answer, still the same session.
    messages.push(json!({"role": "assistant", "content": "In Paris: sunny, 21°C"}));
    messages.push(json!({"role": "user", "content": "thanks"}));
    let (status, next, answer) = post(
        &app,
        None,
        &json!({"tools": [weather_tool()], "messages": messages}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(next, session, "the resent transcript continues the session");
    assert_eq!(answer["choices"][0]["message"]["content"], "echo: thanks");
    assert_prefix_holds(&llm.requests());
    app.stop().await;
}

#[tokio::test]
async fn a_streamed_client_tool_call_ends_with_tool_calls_and_a_named_session_continues() {
    let llm = FakeLlm::start(weather_agent).await;
    let app = TestApp::spawn(&llm).await;

    let (status, session, stream) = post(
        &app,
        Some("weather-1"),
        &json!({"stream": true, "tools": [weather_tool()],
                "messages": [{"role": "user", "content": "what is the weather in Paris?"}]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(session, "weather-1");
    let chunks: Vec<Value> = stream
        .as_str()
        .expect("a stream")
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter(|data| *data != "[DONE]")
        .map(|data| serde_json::from_str(data).expect("chunk JSON"))
        .collect();
    let text: String = chunks
        .iter()
        .filter_map(|chunk| chunk["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "Let me check.");
    let calls: Vec<&Value> = chunks
        .iter()
        .filter_map(|chunk| chunk["choices"][0]["delta"]["tool_calls"].as_array())
        .flatten()
        .collect();
    assert_eq!(
        calls,
        [&json!({"index": 0, "id": "call_w1", "type": "function",
                 "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}})]
    );
    let finish: Vec<&str> = chunks
        .iter()
        .filter_map(|chunk| chunk["choices"][0]["finish_reason"].as_str())
        .collect();
    assert_eq!(finish, ["tool_calls"]);

    // Results for a call the session never handed out: refused, nothing
    // stored.
    let history = app.stored_history("weather-1").await;
    let mut wrong = asked_and_handed();
    wrong[1]["tool_calls"][0]["id"] = json!("call_other");
    wrong.push(json!({"role": "tool", "tool_call_id": "call_other", "content": "rain"}));
    let (status, _, answer) = post(
        &app,
        Some("weather-1"),
        &json!({"tools": [weather_tool()], "messages": wrong}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .is_some_and(|message| message.contains("tool results")),
        "{answer}"
    );
    assert_eq!(app.stored_history("weather-1").await, history);

    let mut messages = asked_and_handed();
    messages.push(json!({"role": "tool", "tool_call_id": "call_w1", "content": "cloudy"}));
    let (status, _, answer) = post(
        &app,
        Some("weather-1"),
        &json!({"tools": [weather_tool()], "messages": messages}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(
        answer["choices"][0]["message"]["content"],
        "In Paris: cloudy"
    );
    assert_prefix_holds(&llm.requests());
    app.stop().await;
}

#[tokio::test]
async fn a_new_message_instead_of_the_results_gives_the_handed_calls_an_error_result() {
    let llm = FakeLlm::start(weather_agent).await;
    let app = TestApp::spawn(&llm).await;
    let ask = json!({"tools": [weather_tool()],
                     "messages": [{"role": "user", "content": "what is the weather in Paris?"}]});
    let (status, _, answer) = post(&app, Some("abandoned"), &ask).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["choices"][0]["finish_reason"], "tool_calls");

    let (status, _, answer) = post(
        &app,
        Some("abandoned"),
        &json!({"messages": [{"role": "user", "content": "never mind"}]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let requests = llm.requests();
    let body = requests.last().expect("a request").json();
    let sent = body["messages"].as_array().expect("messages");
    let unanswered = sent
        .iter()
        .find(|message| message["tool_call_id"] == "call_w1")
        .expect("the handed call has a result");
    assert!(
        unanswered["content"]
            .as_str()
            .is_some_and(|content| content.contains("no result")),
        "{unanswered}"
    );
    assert_eq!(sent.last().expect("last")["content"], "never mind");
    assert_prefix_holds(&requests);
    app.stop().await;
}

#[tokio::test]
async fn tool_choice_and_parallel_tool_calls_reach_the_first_call_of_the_turn() {
    let llm = FakeLlm::start(weather_agent).await;
    let app = TestApp::spawn(&llm).await;
    let (status, _, answer) = post(
        &app,
        Some("forced"),
        &json!({"tools": [weather_tool()], "parallel_tool_calls": false,
                "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
                "messages": [{"role": "user", "content": "hello"}]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let body = llm.requests()[0].json();
    assert_eq!(
        body["tool_choice"],
        json!({"type": "function", "function": {"name": "get_weather"}})
    );
    assert_eq!(body["parallel_tool_calls"], false);

    let (status, _, answer) = post(
        &app,
        Some("forced"),
        &json!({"tools": [weather_tool()], "tool_choice": "none",
                "messages": [{"role": "user", "content": "hello again"}]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let body = llm.requests()[1].json();
    assert_eq!(body["tool_choice"], "none");
    assert!(body.get("parallel_tool_calls").is_none());

    // A client tool named like one of the gateway's is refused.
    let shadowing = json!({"type": "function", "function": {"name": "calculator"}});
    let (status, _, answer) = post(
        &app,
        Some("forced"),
        &json!({"tools": [shadowing], "messages": [{"role": "user", "content": "x"}]}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert_eq!(llm.requests().len(), 2);
    app.stop().await;
}

/// `POST /v1/responses` with `body`: status and body (JSON, or a stream's
/// raw text as a string).
async fn respond(app: &TestApp, body: &Value) -> (StatusCode, Value) {
    let response = app
        .http
        .post(app.url("/v1/responses"))
        .json(body)
        .send()
        .await
        .expect("sent");
    let status = response.status();
    let text = response.text().await.expect("body");
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// The weather tool in the Responses form.
fn weather_function() -> Value {
    let tool = weather_tool();
    let mut function = tool["function"].clone();
    function["type"] = json!("function");
    function
}

#[tokio::test]
async fn the_responses_api_hands_function_calls_out_and_takes_their_outputs() {
    let llm = FakeLlm::start(weather_agent).await;
    let app = TestApp::spawn(&llm).await;
    let question = json!({"role": "user", "content": "what is the weather in Paris?"});

    let (status, first) = respond(
        &app,
        &json!({"tools": [weather_function()], "input": [question.clone()]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{first}");
    let output = first["output"].as_array().expect("output");
    let call = output
        .iter()
        .find(|item| item["type"] == "function_call")
        .expect("a function call");
    assert_eq!(call["call_id"], "call_w1");
    assert_eq!(call["name"], "get_weather");
    assert_eq!(call["arguments"], "{\"city\":\"Paris\"}");
    assert_eq!(output[0]["content"][0]["text"], "Let me check.");

    // The SDKs' default: the whole input again, the output items and the
    // function's output appended.
    let mut input = vec![question];
    input.extend(output.iter().cloned());
    input.push(json!({"type": "function_call_output", "call_id": "call_w1", "output": "windy"}));
    let (status, second) = respond(
        &app,
        &json!({"tools": [weather_function()], "input": input}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{second}");
    assert_eq!(second["output"][0]["content"][0]["text"], "In Paris: windy");
    assert_prefix_holds(&llm.requests());

    // With `previous_response_id`, the outputs alone.
    let (status, third) = respond(
        &app,
        &json!({"tools": [weather_function()], "previous_response_id": second["id"],
                "input": "and the weather now?"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{third}");
    let (status, fourth) = respond(
        &app,
        &json!({"tools": [weather_function()], "previous_response_id": third["id"],
                "input": [{"type": "function_call_output", "call_id": "call_w2",
                           "output": "still windy"}]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{fourth}");
    assert_eq!(
        fourth["output"][0]["content"][0]["text"],
        "In Paris: still windy"
    );
    assert_prefix_holds(&llm.requests());

    // Streamed: the call is an output item with its arguments.
    let (status, stream) = respond(
        &app,
        &json!({"tools": [weather_function()], "stream": true,
                "previous_response_id": fourth["id"], "input": "weather once more?"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let events: Vec<Value> = stream
        .as_str()
        .expect("a stream")
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .map(|data| serde_json::from_str(data).expect("event JSON"))
        .collect();
    let kinds: Vec<&str> = events
        .iter()
        .filter_map(|event| event["type"].as_str())
        .collect();
    for kind in [
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.completed",
    ] {
        assert!(kinds.contains(&kind), "{kind} in {kinds:?}");
    }
    let completed = events
        .iter()
        .find(|event| event["type"] == "response.completed")
        .expect("completed");
    assert_eq!(completed["response"]["output"][1]["type"], "function_call");
    assert_eq!(completed["response"]["output"][1]["call_id"], "call_w3");
    app.stop().await;
}

/// The message `text` from `u1` in the API chat `crash-chat`, under the
/// event id `event`.
fn api_message(event: &str, text: &str) -> InboundMessage {
    InboundMessage {
        platform: PlatformName::parse("api").expect("id"),
        account: AccountId::parse("default").expect("id"),
        event_id: EventId::parse(event).expect("id"),
        ..inbound::message("u1", "crash-chat", ChatKind::Direct, text)
    }
}

/// The client's weather tool as a turn stores it.
fn weather_spec() -> ToolSpec {
    let tool = weather_tool();
    ToolSpec {
        name: "get_weather".to_owned(),
        description: tool["function"]["description"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        parameters: tool["function"]["parameters"].clone(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_continuation_cut_short_by_a_crash_resumes_with_the_clients_result_once() {
    let llm = FakeLlm::start_with_delay(weather_agent, Duration::from_millis(300)).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let settings = test_settings(&llm, &dir).await;
    // One database (PostgreSQL too) for the three instances in turn.
    let _database = crate::helpers::hold_database(&settings);
    let tools = TurnOptions {
        client_tools: vec![weather_spec()],
        ..TurnOptions::default()
    };
    {
        let dir = tempfile::tempdir().expect("tempdir");
        let app = TestApp::start(settings.clone(), dir).await;
        let asked = SubmitOptions {
            wait: true,
            turn: tools.clone(),
            ..SubmitOptions::default()
        };
        let submitted = app
            .gateway
            .service
            .submit(api_message("ask", "what is the weather?"), asked)
            .await
            .expect("submitted");
        let reply = submitted.reply.expect("a receiver");
        tokio::time::timeout(Duration::from_secs(20), reply)
            .await
            .expect("the calls handed out in time")
            .expect("a reply");
        app.stop().await;
    }
    let results = TurnOptions {
        tool_results: vec![ClientResult {
            call_id: "call_w1".to_owned(),
            content: "foggy".to_owned(),
        }],
        ..tools
    };
    // The crashed process's lease must expire before another takes over
    // (a TTL this short only there: a loaded machine could miss renewing
    // it while the turns that finish run).
    let mut crashing = settings.clone();
    crashing.runner.lease_ttl = Duration::from_secs(1);
    crash_during_the_first_call(crashing, llm.clone(), results);

    let app = TestApp::start(settings, dir).await;
    eventually("the resumed continuation's call", || {
        std::future::ready(llm.requests().len() >= 3)
    })
    .await;
    let requests = llm.requests();
    let resumed = requests[2].json();
    let foggy = resumed["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|message| message["content"] == "foggy")
        .count();
    assert_eq!(foggy, 1, "the client's result once: {resumed}");
    assert_eq!(requests[1].raw_messages(), requests[2].raw_messages());
    assert_prefix_holds(&requests);
    app.stop().await;
}

/// Runs a gateway on its own runtime until the model has received the
/// continuation's first call (the results `turn` brings, with no message),
/// then closes its database and drops the runtime: as far as the database
/// can tell, the process died mid-call.
fn crash_during_the_first_call(settings: Settings, llm: FakeLlm, turn: TurnOptions) {
    let before = llm.requests().len();
    // The crashed instance runs on a thread of its own; waiting for it
    // hands this runtime's queued work (the fake model's server among it)
    // to another worker first.
    let crashed = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let gateway = Gateway::build(settings).await.expect("gateway");
            let options = SubmitOptions {
                turn,
                ..SubmitOptions::default()
            };
            gateway
                .service
                .submit(api_message("results", ""), options)
                .await
                .expect("submitted");
            eventually("the continuation's model call", || {
                std::future::ready(llm.requests().len() > before)
            })
            .await;
            gateway.store.close().await;
        });
        runtime.shutdown_background();
    });
    tokio::task::block_in_place(|| crashed.join()).expect("crashed cleanly");
}

#[tokio::test]
async fn ten_client_tool_rounds_on_a_resent_transcript_stay_one_byte_stable_conversation() {
    let llm = FakeLlm::start(weather_agent).await;
    let app = TestApp::spawn(&llm).await;
    let mut messages: Vec<Value> = Vec::new();
    let mut sessions = Vec::new();
    for round in 1..=10 {
        messages.push(json!({"role": "user", "content": format!("the weather, take {round}?")}));
        let (status, session, asked) = post(
            &app,
            None,
            &json!({"tools": [weather_tool()], "messages": messages}),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{asked}");
        let message = asked["choices"][0]["message"].clone();
        let call = message["tool_calls"][0]["id"].clone();
        assert_eq!(call, json!(format!("call_w{round}")), "{asked}");
        messages.push(message);
        messages
            .push(json!({"role": "tool", "tool_call_id": call, "content": format!("{round} °C")}));
        let (status, continued, answer) = post(
            &app,
            None,
            &json!({"tools": [weather_tool()], "messages": messages}),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        messages.push(answer["choices"][0]["message"].clone());
        sessions.extend([session, continued]);
    }
    sessions.dedup();
    assert_eq!(sessions.len(), 1, "one conversation: {sessions:?}");
    let requests = llm.requests();
    assert_eq!(requests.len(), 20);
    assert_prefix_holds(&requests);
    app.stop().await;
}
