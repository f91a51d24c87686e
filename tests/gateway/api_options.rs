//! What a client asks of a turn beyond its text (issue 28, points 5 and 6),
//! over real HTTP against the fake model: `response_format` (Responses:
//! `text.format`) and the sampling settings reach the model request, in
//! OpenAI's form and in Anthropic's; bad values and what a provider cannot
//! do are a 400 with nothing stored; the settings are the turn's only; the
//! client's system message (Responses: `instructions`) joins the session's
//! prompt, a changed one is noted from that turn with earlier requests'
//! bytes untouched, and `api.client_instructions = false` ignores it; and
//! a turn resumed after a crash applies what was stored with its message.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use switchboard::config::Settings;
use switchboard::domain::{BaseUrl, CallOptions, TurnOptions};
use switchboard::gateway::Gateway;
use switchboard::llm::ProviderKind;
use switchboard::session::service::SubmitOptions;
use switchboard_contract::{AccountId, ChatKind, EventId, InboundMessage, PlatformName};
use switchboard_test_support::{eventually, inbound};

use crate::helpers::{
    FakeLlm, Reply, TestApp, assert_prefix_holds, last_is_tool_result, last_user_content,
    last_user_text, test_settings,
};

/// A JSON schema for the answers.
fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {"answer": {"type": "string"}},
        "required": ["answer"],
        "additionalProperties": false
    })
}

/// The chat completion `response_format` of [`schema`].
fn json_schema_format() -> Value {
    json!({"type": "json_schema",
           "json_schema": {"name": "answer", "schema": schema(), "strict": true}})
}

/// `POST path` with `body` (and `X-Session-Id` when given): status,
/// session header, JSON body.
async fn post(
    app: &TestApp,
    path: &str,
    session: Option<&str>,
    body: &Value,
) -> (StatusCode, Option<String>, Value) {
    let mut request = app.http.post(app.url(path)).json(body);
    if let Some(session) = session {
        request = request.header("X-Session-Id", session);
    }
    let response = request.send().await.expect("sent");
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

/// A chat completion of `body`, asserted 200; returns the session.
async fn completed(app: &TestApp, session: Option<&str>, body: Value) -> String {
    let (status, session, answer) = post(app, "/v1/chat/completions", session, &body).await;
    assert_eq!(status, StatusCode::OK, "{body}: {answer}");
    session.expect("session header")
}

/// Computes with the calculator first, then answers `{"answer": "4"}`.
fn calculate_then_answer(body: &Value) -> Reply {
    if last_is_tool_result(body) {
        return Reply::Text(r#"{"answer":"4"}"#.to_owned());
    }
    if last_user_text(body).starts_with("compute") {
        return Reply::Tools(vec![(
            "call_1".to_owned(),
            "calculator".to_owned(),
            json!({"expression": "2+2"}).to_string(),
        )]);
    }
    Reply::Text(format!("echo: {}", last_user_text(body)))
}

/// The fields a client's settings add to a model request.
const SETTINGS_FIELDS: [&str; 7] = [
    "response_format",
    "temperature",
    "top_p",
    "stop",
    "seed",
    "output_config",
    "stop_sequences",
];

fn on_anthropic(llm: &FakeLlm, settings: &mut Settings) {
    settings.llm.provider = ProviderKind::Anthropic;
    settings.llm.base_url = BaseUrl::parse(&llm.anthropic_base()).expect("a test URL");
}

#[tokio::test]
async fn response_format_and_sampling_settings_reach_the_openai_request_for_that_turn_only() {
    let llm = FakeLlm::start(calculate_then_answer).await;
    let app = TestApp::spawn(&llm).await;

    let session = completed(
        &app,
        None,
        json!({
            "messages": [{"role": "user", "content": "compute 2+2"}],
            "response_format": json_schema_format(),
            "temperature": 0.3, "top_p": 0.9, "max_tokens": 50, "stop": ["END"], "seed": 42
        }),
    )
    .await;
    completed(
        &app,
        Some(&session),
        json!({"messages": [{"role": "user", "content": "plain"}]}),
    )
    .await;
    completed(
        &app,
        Some(&session),
        json!({"messages": [{"role": "user", "content": "capped"}], "max_tokens": 100000}),
    )
    .await;

    let requests = llm.requests();
    assert_eq!(requests.len(), 4, "a tool round, then two plain turns");
    for request in &requests[..2] {
        let body = request.json();
        assert_eq!(body["response_format"], json_schema_format(), "{body}");
        assert_eq!(body["temperature"], 0.3);
        assert_eq!(body["top_p"], 0.9);
        assert_eq!(body["max_tokens"], 50);
        assert_eq!(body["stop"], json!(["END"]));
        assert_eq!(body["seed"], 42);
        assert!(
            body["tools"]
                .as_array()
                .is_some_and(|tools| !tools.is_empty()),
            "the gateway's tools stay offered"
        );
    }
    assert!(
        last_is_tool_result(&requests[1].json()),
        "the tool ran first"
    );
    for request in &requests[2..] {
        let body = request.json();
        for field in SETTINGS_FIELDS {
            assert!(body.get(field).is_none(), "{field} leaked: {body}");
        }
        assert_eq!(body["max_tokens"], 4096, "the configured cap, never above");
    }
    assert_prefix_holds(&requests);
    app.stop().await;
}

#[tokio::test]
async fn anthropic_gets_its_structured_output_and_settings_and_refuses_a_seed() {
    let llm = FakeLlm::start(calculate_then_answer).await;
    let app = TestApp::spawn_with(&llm, |settings| on_anthropic(&llm, settings)).await;

    for refused in [
        json!({"seed": 1}),
        json!({"response_format": {"type": "json_object"}}),
        json!({"temperature": 1.5}),
    ] {
        let mut body = refused.clone();
        body["messages"] = json!([{"role": "user", "content": "refused"}]);
        let (status, _, answer) = post(&app, "/v1/chat/completions", None, &body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}: {answer}");
        let field = refused
            .as_object()
            .and_then(|fields| fields.keys().next().cloned())
            .expect("a field");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(&format!("`{field}`")), "{message}");
    }
    assert_eq!(app.count("inbound").await, 0, "nothing stored");
    assert!(llm.requests().is_empty());

    let session = completed(
        &app,
        None,
        json!({
            "messages": [{"role": "user", "content": "compute 2+2"}],
            "response_format": json_schema_format(),
            "temperature": 0.5, "top_p": 0.8, "max_completion_tokens": 64, "stop": "END"
        }),
    )
    .await;
    completed(
        &app,
        Some(&session),
        json!({"messages": [{"role": "user", "content": "plain"}]}),
    )
    .await;

    let requests = llm.requests();
    assert_eq!(requests.len(), 3);
    for request in &requests[..2] {
        let body = request.json();
        assert_eq!(
            body["output_config"],
            json!({"format": {"type": "json_schema", "schema": schema()}}),
            "{body}"
        );
        assert_eq!(body["temperature"], 0.5);
        assert_eq!(body["top_p"], 0.8);
        assert_eq!(body["max_tokens"], 64);
        assert_eq!(body["stop_sequences"], json!(["END"]));
        assert!(body.get("response_format").is_none() && body.get("seed").is_none());
    }
    let plain = requests[2].json();
    for field in SETTINGS_FIELDS {
        assert!(plain.get(field).is_none(), "{field} leaked: {plain}");
    }
    // Anthropic's breakpoints move with the conversation's end; the rest
    // of the messages' bytes is a prefix.
    let unmarked: Vec<String> = requests
        .iter()
        .map(|request| {
            request
                .raw_messages()
                .replace(r#","cache_control":{"type":"ephemeral"}"#, "")
        })
        .collect();
    for pair in unmarked.windows(2) {
        let open = pair[0].strip_suffix(']').expect("array");
        assert!(pair[1].starts_with(open), "{}\n{}", pair[0], pair[1]);
    }
    app.stop().await;
}

#[tokio::test]
async fn bad_values_are_a_400_naming_the_field_with_nothing_stored() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;
    let user = json!([{"role": "user", "content": "bad"}]);

    let chat = [
        ("temperature", json!({"temperature": 3})),
        ("temperature", json!({"temperature": "warm"})),
        ("top_p", json!({"top_p": 1.5})),
        ("max_tokens", json!({"max_tokens": 0})),
        (
            "max_completion_tokens",
            json!({"max_completion_tokens": -3}),
        ),
        ("stop", json!({"stop": ["a", "b", "c", "d", "e"]})),
        ("seed", json!({"seed": 1.5})),
        (
            "response_format",
            json!({"response_format": {"type": "yaml"}}),
        ),
        (
            "response_format.json_schema",
            json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}),
        ),
        ("n", json!({"n": 2})),
        ("logprobs", json!({"logprobs": true})),
        ("presence_penalty", json!({"presence_penalty": 1})),
        ("logit_bias", json!({"logit_bias": {"50256": -100}})),
        ("tools[0]", json!({"tools": [{"type": "web_search"}]})),
        ("functions", json!({"functions": [{"name": "f"}]})),
    ];
    for (field, mut body) in chat {
        body["messages"] = user.clone();
        let (status, _, answer) = post(&app, "/v1/chat/completions", None, &body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(&format!("`{field}`")),
            "{field}: {message}"
        );
    }
    let responses = [
        (
            "text.format",
            json!({"text": {"format": {"type": "json_schema"}}}),
        ),
        ("text.format", json!({"text": {"format": {"type": "xml"}}})),
        ("max_output_tokens", json!({"max_output_tokens": 0})),
        ("temperature", json!({"temperature": -1})),
    ];
    for (field, mut body) in responses {
        body["input"] = json!("bad");
        let (status, _, answer) = post(&app, "/v1/responses", None, &body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(&format!("`{field}`")),
            "{field}: {message}"
        );
    }

    assert_eq!(app.count("inbound").await, 0);
    assert_eq!(app.count("sessions").await, 0);
    assert!(llm.requests().is_empty());
    app.stop().await;
}

#[tokio::test]
async fn the_responses_api_passes_text_format_max_output_tokens_and_instructions_on() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;

    let body = json!({
        "input": "hello",
        "instructions": "Answer in French.",
        "text": {"format": {"type": "json_schema", "name": "answer", "schema": schema(),
                            "strict": true}},
        "max_output_tokens": 30,
        "temperature": 0.2
    });
    let (status, _, answer) = post(&app, "/v1/responses", None, &body).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let (status, _, answer) = post(
        &app,
        "/v1/responses",
        None,
        &json!({"input": "again", "previous_response_id": answer["id"]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let (status, _, answer) = post(
        &app,
        "/v1/responses",
        None,
        &json!({"input": "changed", "previous_response_id": answer["id"],
                "instructions": "Answer in German."}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");

    let requests = llm.requests();
    assert_eq!(requests.len(), 3);
    let first = requests[0].json();
    assert_eq!(first["response_format"], json_schema_format(), "{first}");
    assert_eq!(first["max_tokens"], 30);
    assert_eq!(first["temperature"], 0.2);
    let system = system_text(&first);
    assert!(system.ends_with("Answer in French."), "{system}");
    let second = requests[1].json();
    assert!(second.get("response_format").is_none(), "{second}");
    assert_eq!(
        system_text(&second),
        system,
        "a request without instructions keeps those in effect"
    );
    let third = requests[2].json();
    assert_eq!(system_text(&third), system, "the prompt is never rewritten");
    let changed = last_user_text(&third);
    assert!(
        changed.starts_with("[switchboard] The client's instructions changed")
            && changed.contains("\nAnswer in German.\n")
            && changed.ends_with("changed"),
        "{changed}"
    );
    assert_prefix_holds(&requests);
    app.stop().await;
}

/// The system message of an OpenAI request.
fn system_text(body: &Value) -> String {
    let first = &body["messages"][0];
    assert_eq!(first["role"], "system", "{body}");
    first["content"].as_str().expect("text").to_owned()
}

/// A stateless client's request: `system` (when given), the earlier
/// exchanges as (user, reply) pairs, then `text`.
fn transcript(system: Option<&str>, earlier: &[(String, String)], text: &str) -> Value {
    let mut messages = Vec::new();
    if let Some(system) = system {
        messages.push(json!({"role": "system", "content": system}));
    }
    for (user, reply) in earlier {
        messages.push(json!({"role": "user", "content": user}));
        messages.push(json!({"role": "assistant", "content": reply}));
    }
    messages.push(json!({"role": "user", "content": text}));
    json!({"messages": messages})
}

#[tokio::test]
async fn a_client_system_message_joins_the_prompt_and_a_changed_one_is_noted_in_place() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;
    let mut earlier: Vec<(String, String)> = Vec::new();
    let mut sessions = Vec::new();
    let systems = [
        "Answer in French.",
        "Answer in French.",
        "Answer in German.",
        "Answer in German.",
    ];
    for (turn, system) in systems.iter().enumerate() {
        let text = format!("turn {turn}");
        let body = transcript(Some(system), &earlier, &text);
        let (status, session, answer) = post(&app, "/v1/chat/completions", None, &body).await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        sessions.push(session.expect("session"));
        let reply = answer["choices"][0]["message"]["content"]
            .as_str()
            .expect("reply")
            .to_owned();
        earlier.push((text, reply));
    }

    sessions.dedup();
    assert_eq!(
        sessions.len(),
        1,
        "a resent transcript continues its session"
    );
    let requests: Vec<Value> = llm.requests().iter().map(|r| r.json()).collect();
    let system = system_text(&requests[0]);
    let heading = system
        .find("\n\n# The client's instructions\n")
        .expect("the client's section");
    assert!(heading > 0, "the operator's prompt comes first: {system}");
    assert!(system.ends_with("Answer in French."), "{system}");
    for request in &requests {
        assert_eq!(
            system_text(request),
            system,
            "the prompt is never rewritten"
        );
    }
    let user_texts: Vec<String> = requests
        .iter()
        .map(|request| {
            last_user_content(request)
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    assert_eq!(user_texts[1], "turn 1", "the same instructions: no note");
    assert!(
        user_texts[2].starts_with("[switchboard] The client's instructions changed")
            && user_texts[2].contains("\nAnswer in German.\n")
            && user_texts[2].ends_with("turn 2"),
        "{}",
        user_texts[2]
    );
    assert_eq!(user_texts[3], "turn 3", "noted once");
    assert_prefix_holds(&llm.requests());
    app.stop().await;
}

#[tokio::test]
async fn anthropic_gets_the_client_instructions_in_its_cached_system_block() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn_with(&llm, |settings| on_anthropic(&llm, settings)).await;

    completed(
        &app,
        None,
        transcript(Some("Answer in French."), &[], "bonjour"),
    )
    .await;

    let body = llm.requests()[0].json();
    let system = body["system"][0]["text"].as_str().expect("system block");
    assert!(
        system.contains("\n\n# The client's instructions\n")
            && system.ends_with("Answer in French."),
        "{system}"
    );
    assert_eq!(body["system"][0]["cache_control"]["type"], "ephemeral");
    app.stop().await;
}

#[tokio::test]
async fn with_client_instructions_off_a_system_message_is_accepted_and_ignored() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn_with(&llm, |settings| {
        settings.api.client_instructions = false;
    })
    .await;

    let session = completed(
        &app,
        None,
        transcript(Some("Answer in French."), &[], "hello"),
    )
    .await;
    completed(
        &app,
        Some(&session),
        transcript(Some("Answer in German."), &[], "again"),
    )
    .await;

    for request in llm.requests() {
        let body = request.json();
        assert!(!body.to_string().contains("Answer in"), "{body}");
        assert!(!system_text(&body).contains("# The client's instructions"));
    }
    app.stop().await;
}

/// Runs a gateway on its own runtime until the model has received the
/// turn's first call, then closes its database and drops the runtime: as
/// far as the database can tell, the process died mid-call.
fn crash_during_the_first_call(mut settings: Settings, llm: FakeLlm, turn: TurnOptions) {
    // The crashed process's lease must expire before another takes over (a
    // TTL this short only there: a loaded machine could miss renewing it).
    settings.runner.lease_ttl = Duration::from_secs(1);
    // The crashed instance runs on a thread of its own; waiting for it
    // hands this runtime's queued work (the fake model's server among it)
    // to another worker first, or a task left in this worker's slot would
    // wait for the join, and the join for it.
    let crashed = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let gateway = Gateway::build(settings).await.expect("gateway");
            let message = InboundMessage {
                platform: PlatformName::parse("api").expect("id"),
                account: AccountId::parse("default").expect("id"),
                event_id: EventId::parse("crash-options").expect("id"),
                ..inbound::message("u1", "crash-chat", ChatKind::Direct, "remember this")
            };
            let options = SubmitOptions {
                turn,
                ..SubmitOptions::default()
            };
            gateway
                .service
                .submit(message, options)
                .await
                .expect("submitted");
            eventually("the first model call", || {
                std::future::ready(!llm.requests().is_empty())
            })
            .await;
            gateway.store.close().await;
        });
        runtime.shutdown_background();
    });
    tokio::task::block_in_place(|| crashed.join()).expect("crashed cleanly");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_resumed_after_a_crash_applies_the_settings_stored_with_its_message() {
    let llm = FakeLlm::start_with_delay(
        |body| Reply::Text(format!("echo: {}", last_user_text(body))),
        Duration::from_millis(500),
    )
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let settings = test_settings(&llm, &dir).await;
    let turn = TurnOptions {
        call: CallOptions {
            temperature: Some(0.7),
            stop: vec!["END".to_owned()],
            ..CallOptions::default()
        },
        instructions: Some("Answer in French.".to_owned()),
        ..TurnOptions::default()
    };
    crash_during_the_first_call(settings.clone(), llm.clone(), turn);

    let app = TestApp::start(settings, dir).await;
    eventually("the resumed turn's call", || {
        std::future::ready(llm.requests().len() >= 2)
    })
    .await;

    let stored: Option<String> =
        sqlx::query_scalar("SELECT options FROM inbound ORDER BY id LIMIT 1")
            .fetch_one(&mut *app.gateway.store.conn().await.expect("conn"))
            .await
            .expect("the message");
    assert!(stored.is_some_and(|stored| stored.contains("0.7")));
    for request in llm.requests() {
        let body = request.json();
        assert_eq!(body["temperature"], 0.7, "{body}");
        assert_eq!(body["stop"], json!(["END"]));
        assert!(system_text(&body).ends_with("Answer in French."));
    }
    assert_prefix_holds(&llm.requests());
    app.stop().await;
}

#[tokio::test]
async fn a_compaction_makes_the_prompts_section_the_instructions_in_effect() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;
    let session = completed(
        &app,
        None,
        transcript(Some("Answer in French."), &[], "the goal"),
    )
    .await;
    completed(
        &app,
        Some(&session),
        transcript(Some("Answer in German."), &[], "changed"),
    )
    .await;
    for turn in 1..8 {
        completed(
            &app,
            Some(&session),
            transcript(None, &[], &format!("turn {turn}")),
        )
        .await;
    }
    let before = system_text(&llm.requests().last().expect("a request").json());
    assert!(
        before.ends_with("Answer in French."),
        "not rewritten yet: {before}"
    );

    completed(&app, Some(&session), transcript(None, &[], "/compact")).await;
    assert_eq!(app.count("compactions").await, 1);
    completed(&app, Some(&session), transcript(None, &[], "after")).await;

    let after = system_text(&llm.requests().last().expect("a request").json());
    assert!(after.ends_with("Answer in German."), "{after}");
    assert!(!after.contains("French"), "{after}");
    app.stop().await;
}
