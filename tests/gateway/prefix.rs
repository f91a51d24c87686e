//! The prompt prefix is byte-stable, and agent instances are disposable.

use serde_json::Value;

use crate::helpers::{
    FakeLlm, Recorded, Reply, TestApp, last_is_tool_result, last_user_text, tool_on_even_turns,
};

/// A model that calls a tool (with untidy arguments) on every second user
/// message, then answers.
fn tool_every_other_turn(body: &Value) -> Reply {
    if last_is_tool_result(body) {
        return Reply::Text("tool said so".to_owned());
    }
    let text = last_user_text(body);
    let turn: usize = text.trim_start_matches("turn ").parse().unwrap_or(0);
    tool_on_even_turns(
        turn,
        "calculator",
        format!("{{ \"expression\" :  \"{turn} * 2\" }}"),
    )
}

async fn ten_turns(app: &TestApp, invalidate_between: bool) -> Vec<String> {
    let mut session: Option<String> = None;
    let mut replies = Vec::new();
    for turn in 0..10 {
        if invalidate_between {
            app.gateway.cache.invalidate_all();
        }
        let (id, reply) = app.say(session.as_deref(), &format!("turn {turn}")).await;
        session = Some(id);
        replies.push(reply);
    }
    replies
}

#[tokio::test]
async fn each_request_begins_with_the_previous_requests_messages_byte_for_byte() {
    let llm = FakeLlm::start(tool_every_other_turn).await;
    let app = TestApp::spawn(&llm).await;

    ten_turns(&app, false).await;

    let requests: Vec<Recorded> = llm.requests();
    assert_eq!(requests.len(), 15, "10 turns, 5 with a tool round");
    for pair in requests.windows(2) {
        let previous = pair[0].raw_messages();
        let next = pair[1].raw_messages();
        let open = previous.strip_suffix(']').expect("array");
        assert!(
            next.starts_with(open),
            "prefix changed:\nprevious: {previous}\nnext:     {next}"
        );
        assert!(next.len() > previous.len());
    }
    // Tools serialise identically on every request.
    let tools: Vec<String> = requests
        .iter()
        .map(|r| r.json()["tools"].to_string())
        .collect();
    assert!(tools.windows(2).all(|w| w[0] == w[1]));
    app.stop().await;
}

#[tokio::test]
async fn evicting_agents_before_every_turn_changes_no_request_and_no_reply() {
    let cached_llm = FakeLlm::start(tool_every_other_turn).await;
    let cached = TestApp::spawn(&cached_llm).await;
    let evicted_llm = FakeLlm::start(tool_every_other_turn).await;
    let evicted = TestApp::spawn(&evicted_llm).await;

    let cached_replies = ten_turns(&cached, false).await;
    let evicted_replies = ten_turns(&evicted, true).await;

    assert_eq!(cached_replies, evicted_replies);
    let normalise = |app: &TestApp, requests: Vec<Recorded>| -> Vec<String> {
        // The session id differs between the two gateways; nothing else may.
        let _ = app;
        requests
            .iter()
            .map(|r| {
                let mut body = r.json();
                body["prompt_cache_key"] = Value::String("<session>".to_owned());
                body.to_string()
            })
            .collect()
    };
    let a = normalise(&cached, cached_llm.requests());
    let b = normalise(&evicted, evicted_llm.requests());
    assert_eq!(a.len(), 15);
    assert_eq!(a, b);
    assert!(evicted.gateway.cache.builds() > cached.gateway.cache.builds());
    cached.stop().await;
    evicted.stop().await;
}

#[tokio::test]
async fn sessions_with_the_same_signature_share_one_agent() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;

    for _ in 0..5 {
        app.say(None, "hello").await;
    }

    assert_eq!(app.gateway.cache.builds(), 1);
    app.stop().await;
}

#[tokio::test]
async fn the_prompt_cache_key_names_the_prefix_not_the_session() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;

    let (first, _) = app.say(None, "hi").await;
    let (second, _) = app.say(None, "hello").await;

    let requests = llm.requests();
    assert_eq!(requests[0].path, "/v1/chat/completions");
    let key = requests[0].json()["prompt_cache_key"].clone();
    assert_ne!(first, second);
    assert_eq!(requests[1].json()["prompt_cache_key"], key);
    let key = key.as_str().expect("a key").to_owned();
    assert!(
        key.starts_with("sb-") && !key.contains(first.as_str()),
        "{key}"
    );
    app.stop().await;
}
