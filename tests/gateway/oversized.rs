//! Hostile tool output: a 2 MB MCP result reaches the model cut to the cap
//! (`tools.max_result_chars`, or the server's own), with a note saying how
//! much was left out; a request the provider refuses as too long (OpenAI's
//! `context_length_exceeded`, Anthropic's "prompt is too long") is made once
//! more with the largest tool results cut, so the session keeps answering;
//! and `/compact` summarises a short conversation whose entries are large.

use serde_json::{Value, json};
use switchboard::config::Settings;
use switchboard::domain::BaseUrl;
use switchboard::llm::ProviderKind;

use crate::helpers::{FakeLlm, Reply, TestApp, last_user_text};
use crate::mcp::{stdio_server, with_server};

/// The characters of the last message's tool result (OpenAI's `tool`
/// message, or Anthropic's `tool_result` block), when it is one.
fn last_tool_result(body: &Value) -> Option<String> {
    let last = body["messages"].as_array()?.last()?;
    if last["role"] == "tool" {
        return last["content"].as_str().map(str::to_owned);
    }
    let block = last["content"]
        .as_array()?
        .iter()
        .find(|block| block["type"] == "tool_result")?;
    match &block["content"] {
        Value::String(text) => Some(text.clone()),
        Value::Array(parts) => Some(
            parts
                .iter()
                .filter_map(|part| part["text"].as_str())
                .collect::<String>(),
        ),
        _ => None,
    }
}

/// Every tool result a request carries, in characters.
fn tool_result_sizes(body: &Value) -> Vec<usize> {
    let mut sizes = Vec::new();
    for message in body["messages"].as_array().into_iter().flatten() {
        if message["role"] == "tool" {
            sizes.push(
                message["content"]
                    .as_str()
                    .unwrap_or_default()
                    .chars()
                    .count(),
            );
        }
        for block in message["content"].as_array().into_iter().flatten() {
            if block["type"] == "tool_result" {
                let text = match &block["content"] {
                    Value::String(text) => text.clone(),
                    other => other.to_string(),
                };
                sizes.push(text.chars().count());
            }
        }
    }
    sizes
}

/// A model whose window is `limit` request bytes: a longer request is
/// refused the provider's way; otherwise `call TOOL ARGS` calls the tool, a
/// tool result is answered with its size, a summary request with a summary,
/// anything else is echoed.
fn model_with_window(limit: usize, provider: ProviderKind) -> impl Fn(&Value) -> Reply {
    move |body| {
        if body.to_string().len() > limit {
            let refusal = match provider {
                ProviderKind::Anthropic => json!({"type": "error", "error": {
                    "type": "invalid_request_error",
                    "message": "prompt is too long: 215000 tokens > 200000 maximum"}}),
                ProviderKind::Openai => json!({"error": {
                    "message": "This model's maximum context length is 128000 tokens. However, \
                                your messages resulted in 530000 tokens. Please reduce the \
                                length of the messages.",
                    "type": "invalid_request_error", "param": "messages",
                    "code": "context_length_exceeded"}}),
            };
            return Reply::Status(400, refusal.to_string());
        }
        if let Some(result) = last_tool_result(body) {
            return Reply::Text(format!("a result of {} characters", result.chars().count()));
        }
        let text = last_user_text(body);
        if text.starts_with("[switchboard] Compaction") {
            return Reply::Text("The user fetched a very large text.".to_owned());
        }
        match text.strip_prefix("call ") {
            Some(rest) => {
                let (tool, args) = rest.split_once(' ').unwrap_or((rest, "{}"));
                Reply::Tools(vec![("c1".to_owned(), tool.to_owned(), args.to_owned())])
            }
            None => Reply::Text(format!("said: {text}")),
        }
    }
}

/// How many requests the fake model refused as too long (the script's
/// test, on what it received).
fn refused(llm: &FakeLlm) -> usize {
    llm.requests()
        .iter()
        .filter(|request| request.json().to_string().len() > WINDOW)
        .count()
}

/// The fake model's window in request bytes for the refusal tests.
const WINDOW: usize = 60_000;

fn with_echo_server(settings: &mut Settings, dir: &std::path::Path) {
    with_server(settings, stdio_server(&dir.join("calls.log"), None));
}

fn big_call(chars: usize) -> String {
    format!(
        r#"call fake__echo {{"text": "ab", "repeat": {}}}"#,
        chars / 2
    )
}

#[tokio::test]
async fn a_two_megabyte_mcp_result_reaches_the_model_cut_to_the_cap() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Wide enough for any capped request, far too narrow for 2 MB.
    let llm = FakeLlm::start(model_with_window(400_000, ProviderKind::Openai)).await;
    let app = TestApp::spawn_with(&llm, |s| with_echo_server(s, dir.path())).await;

    let (session, reply) = app.say(None, &big_call(2_000_000)).await;
    let (_, next) = app.say(Some(&session), "are you still there?").await;

    assert_eq!(next, "said: are you still there?", "the next turn answers");
    let shown: usize = reply
        .trim_start_matches("a result of ")
        .trim_end_matches(" characters")
        .parse()
        .unwrap_or_else(|_| panic!("a result size, got {reply}"));
    assert!(
        shown <= 100_000 && shown > 90_000,
        "cut to the default cap: {shown}"
    );
    let requests = llm.requests();
    assert_eq!(requests.len(), 3, "nothing refused, nothing retried");
    let after_tool = requests[1].json();
    let cut = last_tool_result(&after_tool).expect("a tool result");
    assert!(
        cut.contains("characters left out") && cut.contains("2000028"),
        "the note says how much of the 2,000,028 characters was left out: {}",
        &cut[cut.len().saturating_sub(300)..]
    );
    for request in &requests {
        assert!(
            tool_result_sizes(&request.json())
                .iter()
                .all(|&n| n <= 100_000),
            "every request the model sees stays under the cap"
        );
    }
    app.stop().await;
}

#[tokio::test]
async fn an_mcp_servers_own_cap_wins_over_the_global_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = FakeLlm::start(model_with_window(400_000, ProviderKind::Openai)).await;
    let app = TestApp::spawn_with(&llm, |s| {
        let mut server = stdio_server(&dir.path().join("calls.log"), None);
        server.max_result_chars = Some(5_000);
        with_server(s, server);
    })
    .await;

    let (_, reply) = app.say(None, &big_call(50_000)).await;

    let shown: usize = reply
        .trim_start_matches("a result of ")
        .trim_end_matches(" characters")
        .parse()
        .unwrap_or_else(|_| panic!("a result size, got {reply}"));
    assert!(shown <= 5_000 && shown > 4_000, "the server's cap: {shown}");
    app.stop().await;
}

async fn refused_as_too_long_is_retried_with_the_largest_results_cut(provider: ProviderKind) {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = FakeLlm::start(model_with_window(WINDOW, provider)).await;
    let app = TestApp::spawn_with(&llm, |s| {
        with_echo_server(s, dir.path());
        // The results stay whole in the conversation: only the refusal cuts.
        s.tools.max_result_chars = 200_000;
        if provider == ProviderKind::Anthropic {
            s.llm.provider = ProviderKind::Anthropic;
            s.llm.base_url = BaseUrl::parse(&llm.anthropic_base()).expect("a test URL");
        }
    })
    .await;

    let (session, first) = app.say(None, &big_call(90_000)).await;
    let (_, second) = app.say(Some(&session), "and now?").await;
    let (_, third) = app.say(Some(&session), "still fine?").await;

    let shown: usize = first
        .trim_start_matches("a result of ")
        .trim_end_matches(" characters")
        .parse()
        .unwrap_or_else(|_| panic!("a result size, got {first}"));
    assert!(
        shown <= 2_000,
        "the retried request had the result cut: {shown}"
    );
    assert_eq!(second, "said: and now?", "the session keeps answering");
    assert_eq!(third, "said: still fine?");
    assert_eq!(
        refused(&llm),
        3,
        "one refusal per model call that carried the whole result, each retried once"
    );
    app.stop().await;
}

#[tokio::test]
async fn a_request_refused_as_too_long_is_retried_once_with_tool_results_cut_openai() {
    refused_as_too_long_is_retried_with_the_largest_results_cut(ProviderKind::Openai).await;
}

#[tokio::test]
async fn a_request_refused_as_too_long_is_retried_once_with_tool_results_cut_anthropic() {
    refused_as_too_long_is_retried_with_the_largest_results_cut(ProviderKind::Anthropic).await;
}

#[tokio::test]
async fn compact_summarises_a_short_conversation_whose_entries_are_large() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = FakeLlm::start(model_with_window(WINDOW, ProviderKind::Openai)).await;
    let app = TestApp::spawn_with(&llm, |s| {
        with_echo_server(s, dir.path());
        s.tools.max_result_chars = 200_000;
    })
    .await;

    let (session, _) = app.say(None, &big_call(90_000)).await;
    let (_, compacted) = app.say(Some(&session), "/compact").await;
    let before = llm.requests().len();
    let (_, after) = app.say(Some(&session), "what did I fetch?").await;

    assert_eq!(
        compacted,
        "Older messages were summarised; the full history stays stored."
    );
    assert_eq!(after, "said: what did I fetch?");
    let requests = llm.requests();
    assert_eq!(
        requests.len(),
        before + 1,
        "after the compaction a turn needs no retry"
    );
    let last = requests.last().expect("a request").json().to_string();
    assert!(
        last.contains("The user fetched a very large text."),
        "the summary is sent"
    );
    assert!(last.len() < WINDOW);
    app.stop().await;
}
