//! Stateless clients: requests that resend the whole transcript and name no
//! session continue the session they extend (byte-identical model requests,
//! as a client naming it would cause), fork into a seeded session when the
//! transcript was edited, and are refused when malformed; a client-chosen
//! id creates a session seeded with the transcript it carries; and the
//! official Python and Node clients keep a conversation in each of the three
//! styles (`tests/clients/openai_styles.{py,mjs}`).

use reqwest::StatusCode;
use serde_json::{Value, json};
use switchboard::domain::ChatMessage;

use crate::api_sessions::{Answer, answer_of};
use crate::helpers::{
    FakeLlm, Recorded, Reply, TestApp, last_is_tool_result, last_user_text, session_id,
    tool_on_even_turns,
};
use crate::openai_client::{Client, available, run_script};

impl Answer {
    fn text(&self) -> String {
        self.body["choices"][0]["message"]["content"]
            .as_str()
            .unwrap_or_else(|| panic!("no reply: {}", self.body))
            .to_owned()
    }

    fn session(&self) -> String {
        self.session.clone().expect("X-Session-Id")
    }
}

/// Posts `messages` (and `user`, and `X-Session-Id` when given).
async fn send(
    app: &TestApp,
    messages: &[Value],
    user: Option<&str>,
    header: Option<&str>,
) -> Answer {
    let mut body = json!({"model": "fake-model", "messages": messages});
    if let Some(user) = user {
        body["user"] = json!(user);
    }
    let mut request = app.http.post(app.url("/v1/chat/completions")).json(&body);
    if let Some(header) = header {
        request = request.header("X-Session-Id", header);
    }
    answer_of(request.send().await.expect("sent")).await
}

fn user(text: &str) -> Value {
    json!({"role": "user", "content": text})
}

fn assistant(text: &str) -> Value {
    json!({"role": "assistant", "content": text})
}

/// A model that calls the calculator on every even-numbered `turn N`
/// message (with untidy arguments), then answers.
fn tool_every_other_turn(body: &Value) -> Reply {
    if last_is_tool_result(body) {
        return Reply::Text(format!("tool said so ({})", last_user_text(body)));
    }
    let text = last_user_text(body);
    let turn: usize = text.trim_start_matches("turn ").parse().unwrap_or(1);
    tool_on_even_turns(
        turn,
        "calculator",
        format!("{{ \"expression\" :  \"{turn} * 2\" }}"),
    )
}

/// The user texts of the session's stored conversation.
async fn stored_user_texts(app: &TestApp, session: &str) -> Vec<String> {
    app.wire_history(session)
        .await
        .into_iter()
        .filter_map(|entry| match entry.message {
            ChatMessage::User { content, .. } => Some(content),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_resent_transcript_continues_its_session_storing_only_the_new_message() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;

    let first = send(&app, &[user("hi")], None, None).await;
    let second = send(
        &app,
        &[
            json!({"role": "system", "content": "a system message the client made up"}),
            user("hi"),
            assistant(&first.text()),
            user("and now?"),
        ],
        None,
        None,
    )
    .await;

    assert_eq!(second.status, StatusCode::OK, "{}", second.body);
    assert_eq!(second.session(), first.session());
    // The client's system message, new after the prompt was sent, is the
    // note that starts the new message (see `api_options`).
    let note = "[switchboard] The client's instructions changed";
    assert!(second.text().starts_with(&format!("echo: {note}")));
    assert!(second.text().ends_with("\n\nand now?"), "{}", second.text());
    let stored = stored_user_texts(&app, &first.session()).await;
    assert_eq!(
        stored.len(),
        2,
        "only the new message is stored: {stored:?}"
    );
    assert_eq!(stored[0], "hi");
    assert!(stored[1].starts_with(note) && stored[1].ends_with("and now?"));
    assert_eq!(app.count("sessions").await, 1);
    let request = llm.requests()[1].json();
    assert_eq!(
        request["messages"][0]["content"],
        llm.requests()[0].json()["messages"][0]["content"],
        "the session's system prompt is not rewritten"
    );
    assert_eq!(
        request["messages"][0]["content"],
        app.session_row(&first.session()).await.system_prompt,
    );
    app.stop().await;
}

/// Runs `turns` turns as a stateless client (resending only user messages
/// and final replies) and returns the replies.
async fn stateless_turns(app: &TestApp, turns: usize) -> (Vec<String>, Vec<String>) {
    let mut messages = Vec::new();
    let mut replies = Vec::new();
    let mut sessions = Vec::new();
    for turn in 0..turns {
        messages.push(user(&format!("turn {turn}")));
        let answer = send(app, &messages, None, None).await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
        messages.push(assistant(&answer.text()));
        replies.push(answer.text());
        sessions.push(answer.session());
    }
    (replies, sessions)
}

#[tokio::test]
async fn twenty_plain_transcript_turns_with_tool_calls_keep_byte_exact_prefixes() {
    let stateless_llm = FakeLlm::start(tool_every_other_turn).await;
    let stateless = TestApp::spawn(&stateless_llm).await;
    let header_llm = FakeLlm::start(tool_every_other_turn).await;
    let header = TestApp::spawn(&header_llm).await;

    let (replies, sessions) = stateless_turns(&stateless, 20).await;
    let mut header_session: Option<String> = None;
    let mut header_replies = Vec::new();
    for turn in 0..20 {
        let (id, reply) = header
            .say(header_session.as_deref(), &format!("turn {turn}"))
            .await;
        header_session = Some(id);
        header_replies.push(reply);
    }

    assert!(
        sessions.windows(2).all(|w| w[0] == w[1]),
        "one session: {sessions:?}"
    );
    assert_eq!(replies, header_replies);
    let requests: Vec<Recorded> = stateless_llm.requests();
    assert_eq!(requests.len(), 30, "20 turns, 10 with a tool round");
    for pair in requests.windows(2) {
        let previous = pair[0].raw_messages();
        let next = pair[1].raw_messages();
        let open = previous.strip_suffix(']').expect("array");
        assert!(
            next.starts_with(open),
            "prefix changed:\nprevious: {previous}\nnext:     {next}"
        );
    }
    let header_requests = header_llm.requests();
    assert_eq!(header_requests.len(), requests.len());
    for (stateless, header) in requests.iter().zip(&header_requests) {
        assert_eq!(
            stateless.raw_messages(),
            header.raw_messages(),
            "what a client naming its session would have caused"
        );
    }
    stateless.stop().await;
    header.stop().await;
}

#[tokio::test]
async fn an_edited_transcript_forks_into_a_session_seeded_with_it() {
    let llm = FakeLlm::start(tool_every_other_turn).await;
    let app = TestApp::spawn(&llm).await;
    let first = send(&app, &[user("turn 2")], None, None).await;
    let original = first.session();
    let stored_before = app.wire_history(&original).await.len();

    let edited = send(
        &app,
        &[
            user("turn 2, edited"),
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_x", "type": "function",
                 "function": {"name": "calculator", "arguments": "{\"expression\": \"1+1\"}"}}]}),
            json!({"role": "tool", "tool_call_id": "call_x", "content": "2"}),
            assistant(&first.text()),
            user("turn 3"),
        ],
        None,
        None,
    )
    .await;

    assert_eq!(edited.status, StatusCode::OK, "{}", edited.body);
    assert_ne!(edited.session(), original, "an edit forks");
    let fork = app.session_row(&edited.session()).await;
    assert_eq!(
        fork.chat_id.as_str(),
        edited.session(),
        "the fork's chat is its own, as for a client naming it"
    );
    assert!(fork.principal.is_some(), "owned by the caller");
    assert_eq!(
        app.wire_history(&original).await.len(),
        stored_before,
        "the original conversation is untouched"
    );
    let request = llm.requests().last().expect("request").json();
    let roles: Vec<&str> = request["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| m["role"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        roles,
        ["system", "user", "assistant", "tool", "assistant", "user"]
    );
    assert_eq!(request["messages"][2]["tool_calls"][0]["id"], "call_x");
    assert_eq!(
        request["messages"][2]["tool_calls"][0]["function"]["arguments"],
        r#"{"expression":"1+1"}"#
    );
    assert_eq!(request["messages"][3]["tool_call_id"], "call_x");
    // The fork goes on like any session.
    let next = send(
        &app,
        &[
            user("turn 2, edited"),
            assistant(&first.text()),
            user("turn 3"),
            assistant(&edited.text()),
            user("turn 5"),
        ],
        None,
        None,
    )
    .await;
    assert_eq!(next.session(), edited.session());
    app.stop().await;
}

#[tokio::test]
async fn resent_tool_entries_match_when_they_agree_with_the_stored_ones() {
    let llm = FakeLlm::start(tool_every_other_turn).await;
    let app = TestApp::spawn(&llm).await;
    let first = send(&app, &[user("turn 2")], None, None).await;
    let session = first.session();
    // The conversation as the client saw it, tool entries included.
    let mut messages: Vec<Value> = app
        .wire_history(&session)
        .await
        .into_iter()
        .map(|entry| match entry.message {
            ChatMessage::User { content, .. } => user(&content),
            ChatMessage::Assistant {
                content,
                tool_calls,
            } => {
                let calls: Vec<Value> = tool_calls
                    .iter()
                    .map(|c| {
                        json!({"id": c.id, "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments}})
                    })
                    .collect();
                if calls.is_empty() {
                    json!({"role": "assistant", "content": content})
                } else {
                    json!({"role": "assistant", "content": content, "tool_calls": calls})
                }
            }
            ChatMessage::Tool {
                tool_call_id,
                content,
                ..
            } => json!({"role": "tool", "tool_call_id": tool_call_id, "content": content}),
        })
        .collect();
    assert_eq!(messages.len(), 4, "{messages:?}");
    let mut disagreeing = messages.clone();
    disagreeing[2]["content"] = json!("a different result");
    disagreeing.push(user("turn 3"));
    messages.push(user("turn 3"));

    // The disagreeing copy first, while the session is still where both
    // transcripts leave it.
    let forked = send(&app, &disagreeing, None, None).await;
    let agreeing = send(&app, &messages, None, None).await;

    assert_eq!(agreeing.session(), session);
    assert_ne!(forked.session(), session);
    app.stop().await;
}

#[tokio::test]
async fn transcripts_match_only_under_the_same_user() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;
    let ada = send(&app, &[user("hi")], Some("ada"), None).await;
    let follow_up = [user("hi"), assistant(&ada.text()), user("more")];

    let bob = send(&app, &follow_up, Some("bob"), None).await;
    let ada_again = send(&app, &follow_up, Some("ada"), None).await;

    assert_eq!(bob.status, StatusCode::OK, "{}", bob.body);
    assert_ne!(bob.session(), ada.session(), "bob's copy forks");
    assert_eq!(ada_again.session(), ada.session());
    app.stop().await;
}

#[tokio::test]
async fn two_identical_stateless_requests_at_once_run_one_turn() {
    let llm = FakeLlm::start_with_delay(
        |body| Reply::Text(format!("echo: {}", last_user_text(body))),
        std::time::Duration::from_millis(300),
    )
    .await;
    let app = TestApp::spawn(&llm).await;
    let first = send(&app, &[user("hi")], None, None).await;
    let follow_up = [user("hi"), assistant(&first.text()), user("twice?")];

    let (one, two) = tokio::join!(
        send(&app, &follow_up, None, None),
        send(&app, &follow_up, None, None)
    );

    assert_eq!(one.session(), first.session());
    assert_eq!(two.session(), first.session());
    assert_eq!(one.text(), two.text());
    assert_eq!(llm.requests().len(), 2, "one turn for the twin requests");
    assert_eq!(
        stored_user_texts(&app, &first.session()).await,
        ["hi", "twice?"]
    );
    // Sent again after it was answered, it is asked anew, in a fork.
    let later = send(&app, &follow_up, None, None).await;
    assert_ne!(later.session(), first.session());
    app.stop().await;
}

#[tokio::test]
async fn a_chosen_id_starts_a_session_seeded_with_the_transcript() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;

    let answer = send(
        &app,
        &[
            user("from elsewhere"),
            assistant("an old answer"),
            user("go on"),
        ],
        None,
        Some("chat-42"),
    )
    .await;

    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(answer.session(), "chat-42");
    let request = llm.requests()[0].json();
    assert_eq!(request["messages"][1]["content"], "from elsewhere");
    assert_eq!(request["messages"][2]["content"], "an old answer");
    assert_eq!(request["messages"][3]["content"], "go on");
    let row = app.session_row("chat-42").await;
    assert!(row.principal.is_some(), "owned by the caller");
    assert_eq!(row.id, session_id("chat-42"));
    app.stop().await;
}

#[tokio::test]
async fn malformed_transcripts_are_refused_and_store_nothing() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;
    let cases = [
        (
            vec![user("a"), assistant("b")],
            "must end with a non-empty user message",
        ),
        (
            vec![json!({"role": "wizard", "content": "a"}), user("b")],
            "unknown role `wizard`",
        ),
        (
            vec![
                user("a"),
                json!({"role": "tool", "tool_call_id": "nope", "content": "x"}),
                user("b"),
            ],
            "no assistant message before it called",
        ),
        (
            vec![
                user("a"),
                json!({"role": "assistant", "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "calculator", "arguments": "{}"}}]}),
                user("b"),
            ],
            "`c1` has no result",
        ),
    ];
    for (messages, reason) in cases {
        let answer = send(&app, &messages, None, None).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{}", answer.body);
        let message = answer.body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(reason), "{message}");
    }
    assert_eq!(app.count("inbound").await, 0);
    assert_eq!(app.count("sessions").await, 0);
    assert_eq!(app.count("messages").await, 0);
    assert!(llm.requests().is_empty());
    app.stop().await;
}

#[tokio::test]
async fn a_retried_transcript_request_with_an_idempotency_key_runs_once() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;
    let messages = [
        user("from a UI"),
        assistant("an answer it kept"),
        user("go on"),
    ];
    let post = || {
        app.http
            .post(app.url("/v1/chat/completions"))
            .header("Idempotency-Key", "ui-retry-1")
            .json(&json!({"messages": messages}))
            .send()
    };

    let first = post().await.expect("sent");
    let retry = post().await.expect("sent");

    let session = |response: &reqwest::Response| {
        response
            .headers()
            .get("x-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(retry.status(), StatusCode::OK);
    assert_eq!(
        session(&first),
        session(&retry),
        "the retry goes where the first went"
    );
    let first: Value = first.json().await.expect("json");
    let retry: Value = retry.json().await.expect("json");
    assert_eq!(first["choices"], retry["choices"]);
    assert_eq!(llm.requests().len(), 1, "one turn");
    assert_eq!(app.count("sessions").await, 1, "one seeded session");
    app.stop().await;
}

/// The official Python client in the three styles (`tests/clients/openai_styles.py`).
/// Skipped, like the other client tests, when the `openai` package is
/// missing, unless `SWITCHBOARD_REQUIRE_OPENAI_CLIENT=1`.
#[tokio::test]
async fn the_official_python_client_keeps_conversations_in_all_three_styles() {
    keeps_conversations_in_all_three_styles(Client::Python, "Py").await;
}

/// The official Node client likewise (`tests/clients/openai_styles.mjs`),
/// unless its package is missing (`SWITCHBOARD_REQUIRE_OPENAI_NODE_CLIENT=1`
/// makes that a failure).
#[tokio::test]
async fn the_official_node_client_keeps_conversations_in_all_three_styles() {
    keeps_conversations_in_all_three_styles(Client::Node, "Node").await;
}

/// Runs `client`'s styles script (whose first message says "my name is
/// `name`") and checks each style kept one conversation.
async fn keeps_conversations_in_all_three_styles(client: Client, name: &str) {
    if !available(client).await {
        return;
    }
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;
    let results = run_script(client, "openai_styles", &app).await;

    for style in ["header", "user", "transcript"] {
        let sessions = results[style]["sessions"].as_array().expect("sessions");
        assert_eq!(sessions.len(), 3, "{style}");
        assert!(
            sessions
                .windows(2)
                .all(|w| w[0] == w[1] && w[0].is_string()),
            "{style}: one conversation: {sessions:?}"
        );
        assert_eq!(
            results[style]["replies"][2],
            format!("echo: {style}: and again?"),
            "{style}"
        );
        // The model saw the whole conversation on the last turn.
        let last = llm
            .requests()
            .into_iter()
            .rfind(|r| last_user_text(&r.json()) == format!("{style}: and again?"))
            .expect("the last turn's request");
        let users: Vec<String> = last.json()["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .filter(|m| m["role"] == "user")
            .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
            .collect();
        assert_eq!(
            users,
            [
                format!("{style}: my name is {name}"),
                format!("{style}: what is my name?"),
                format!("{style}: and again?"),
            ]
        );
    }
    assert_eq!(app.count("sessions").await, 3, "one session per style");
    app.stop().await;
}
