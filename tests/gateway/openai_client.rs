//! The official OpenAI clients (Python and Node), unchanged, against the
//! gateway's API: `tests/clients/openai_client.{py,mjs}` make plain and
//! streamed completions (one with a tool round: its `switchboard` tool
//! chunks and final usage chunk), send an image as an `image_url` part
//! (which reaches a vision model as an image part), continue a conversation with
//! `X-Session-Id`, send an unknown session id that cannot name a new session
//! and list the models; these tests check what the client saw and what the
//! model received.
//!
//! They need `python3` with the `openai` package, and `node` with the
//! `openai` package in `tests/clients/node_modules`. Without them a test
//! prints `SKIPPED: …` to the test run's stderr (not captured, so it shows
//! in `cargo test`'s output) and passes, unless `SWITCHBOARD_REQUIRE_OPENAI_CLIENT=1`
//! (Python) or `SWITCHBOARD_REQUIRE_OPENAI_NODE_CLIENT=1` (Node) makes that a
//! failure; CI sets them after installing the packages.

use std::io::Write;
use std::time::Duration;

use serde_json::Value;
use tokio::process::Command;

use crate::helpers::{FakeLlm, Reply, TestApp, last_is_tool_result, last_user_text};
use crate::identity::user_texts;
use switchboard_test_support::model::Canned;

/// The 1×1 PNG the client scripts send as an `image_url` part, in base64.
const PIXEL: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGP4z8DwHwAFAAH/iZk9HQAAAABJRU5ErkJggg==";

/// `tests/clients`, found through the package folder `cargo test` names at
/// run time (a build reused from another checkout keeps its compile-time
/// path).
fn clients_dir() -> String {
    let root = std::env::var("CARGO_MANIFEST_DIR")
        .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_owned());
    format!("{root}/tests/clients")
}

/// One official client and how to run it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Client {
    Python,
    Node,
}

impl Client {
    fn program(self) -> &'static str {
        match self {
            Self::Python => "python3",
            Self::Node => "node",
        }
    }

    /// The path of the client's script named `name` (without extension).
    fn script(self, name: &str) -> String {
        match self {
            Self::Python => format!("{}/{name}.py", clients_dir()),
            Self::Node => format!("{}/{name}.mjs", clients_dir()),
        }
    }

    /// The arguments that fail unless the `openai` package can be loaded.
    fn probe(self) -> [&'static str; 3] {
        match self {
            Self::Python => ["-c", "import openai", ""],
            Self::Node => ["--input-type=module", "-e", "await import('openai')"],
        }
    }

    fn required_by(self) -> &'static str {
        match self {
            Self::Python => "SWITCHBOARD_REQUIRE_OPENAI_CLIENT",
            Self::Node => "SWITCHBOARD_REQUIRE_OPENAI_NODE_CLIENT",
        }
    }

    fn greeting(self) -> &'static str {
        match self {
            Self::Python => "hello from python",
            Self::Node => "hello from node",
        }
    }
}
/// How long the script may take (it makes six requests).
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(120);

#[tokio::test]
async fn the_official_openai_python_client_works_unchanged() {
    works_unchanged(Client::Python).await;
}

#[tokio::test]
async fn the_official_openai_node_client_works_unchanged() {
    works_unchanged(Client::Node).await;
}

/// Whether `client`'s `openai` package can be loaded; when it cannot, the
/// test is skipped with a notice (a failure when its `SWITCHBOARD_REQUIRE_…`
/// variable is 1).
pub(crate) async fn available(client: Client) -> bool {
    if installed(client).await {
        return true;
    }
    let required = client.required_by();
    assert!(
        std::env::var(required).as_deref() != Ok("1"),
        "{required}=1 but the {client:?} openai package cannot be loaded"
    );
    // Written to the process's stderr directly: libtest captures
    // `println!`/`eprintln!` of passing tests, not this, so the notice
    // shows in `cargo test`'s output.
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED: an official OpenAI {client:?} client test: its `openai` package is not \
         installed (see the README; {required}=1 makes this a failure)"
    );
    false
}

async fn works_unchanged(client: Client) {
    if !available(client).await {
        return;
    }
    // Echoes, except that `calculate: EXPR` gets a tool round first.
    let llm = FakeLlm::start(|body| {
        let text = last_user_text(body);
        match text.strip_prefix("calculate: ") {
            Some(_) if last_is_tool_result(body) => Reply::Text("The result is 42.".to_owned()),
            Some(expression) => Reply::TextAndTools(
                "Calculating.".to_owned(),
                vec![(
                    "calc-1".to_owned(),
                    "calculator".to_owned(),
                    serde_json::json!({"expression": expression}).to_string(),
                )],
            ),
            None => Reply::Text(format!("echo: {text}")),
        }
    })
    .await;
    let app = TestApp::spawn_with(&llm, |s| {
        s.media.vision_models = vec!["fake-model".to_owned()]
    })
    .await;

    let results = run_script(client, "openai_client", &app).await;

    let plain = &results["plain"];
    assert!(
        plain["id"]
            .as_str()
            .is_some_and(|id| id.starts_with("chatcmpl-")),
        "{plain}"
    );
    assert_eq!(plain["object"], "chat.completion");
    assert_eq!(plain["model"], "fake-model");
    assert_eq!(plain["role"], "assistant");
    assert_eq!(
        plain["content"],
        format!("echo: {}", client.greeting()),
        "{plain}"
    );
    assert_eq!(plain["finish_reason"], "stop");
    assert_eq!(plain["prompt_tokens"], 120);
    assert_eq!(plain["completion_tokens"], 7);
    assert_eq!(plain["total_tokens"], 127);

    let stream = &results["stream"];
    assert_eq!(stream["text"], "echo: stream it please", "{stream}");
    assert_eq!(
        stream["roles"],
        serde_json::json!(["assistant"]),
        "{stream}"
    );
    assert_eq!(stream["finish_reason"], "stop", "{stream}");
    assert_eq!(stream["ids"], 1, "every chunk carries one id: {stream}");

    let tools = &results["stream_tools"];
    assert_eq!(
        tools["text"], "Calculating.\n\nThe result is 42.",
        "{tools}"
    );
    assert!(tools["deltas"].as_u64().is_some_and(|n| n > 2), "{tools}");
    assert_eq!(
        tools["events"],
        serde_json::json!([
            {"type": "tool_call", "id": "calc-1", "name": "calculator",
             "arguments": "{\"expression\":\"6*7\"}"},
            {"type": "tool_result", "id": "calc-1", "name": "calculator", "is_error": false},
        ]),
        "shown as the gateway's own field, never as calls for the client: {tools}"
    );
    assert_eq!(tools["finish_reason"], "stop", "{tools}");
    assert_eq!(tools["prompt_tokens"], 240, "{tools}");
    assert_eq!(tools["completion_tokens"], 14, "{tools}");

    // The image_url part reached the (vision) model as an image part.
    assert!(
        results["image"]["content"]
            .as_str()
            .is_some_and(|reply| reply.starts_with("echo: ")),
        "{}",
        results["image"]
    );
    let pixel = format!("data:image/png;base64,{PIXEL}");
    let with_image: Vec<Value> = llm
        .requests()
        .iter()
        .filter_map(|request| {
            let body = request.json();
            let last = body["messages"].as_array()?.last()?.clone();
            last["content"].is_array().then(|| last["content"].clone())
        })
        .collect();
    assert_eq!(
        with_image,
        vec![serde_json::json!([
            {"type": "text", "text": "what is in this picture?"},
            {"type": "image_url", "image_url": {"url": pixel}},
        ])]
    );

    let session = &results["session"];
    let id = session["first"].as_str().expect("X-Session-Id read back");
    assert_eq!(session["second"], id, "{session}");
    assert_eq!(session["first_reply"], "echo: my name is Py");
    assert_eq!(session["second_reply"], "echo: what is my name?");
    assert_eq!(
        user_texts(&llm),
        ["my name is Py", "what is my name?"],
        "the continued conversation's history reached the model"
    );

    let unknown = &results["unknown_session"];
    assert_eq!(unknown["error"], "BadRequestError", "{unknown}");
    assert_eq!(unknown["status"], 400);
    assert!(
        unknown["message"]
            .as_str()
            .is_some_and(|m| m.contains("no session with id no/such/session")),
        "{unknown}"
    );

    assert_eq!(results["models"], serde_json::json!(["fake-model"]));
    assert_eq!(
        llm.requests().len(),
        7,
        "one model call per completion (two for the tool round), none for the unknown session"
    );
    app.stop().await;
}

#[tokio::test]
async fn the_python_client_raises_on_failures_and_its_streams_and_retries_stay_in_one_turn() {
    as_agent_frameworks_use_it(Client::Python).await;
}

#[tokio::test]
async fn the_node_client_raises_on_failures_and_its_streams_and_retries_stay_in_one_turn() {
    as_agent_frameworks_use_it(Client::Node).await;
}

/// The model of `openai_agents`: by the user message's prefix, a 500
/// (`fail:`), text then a tool round (`compute:`), a stream cut once part-way
/// (`cut:`), a JSON answer (`structured:`), an answer after three seconds
/// (`slow:`), the gateway's calculator and the client's `get_weather` in
/// one response, then the weather (`weather:`), else an echo.
async fn agents_model() -> FakeLlm {
    let cut = std::sync::atomic::AtomicBool::new(false);
    FakeLlm::start(move |body| {
        let text = last_user_text(body);
        let (kind, _) = text.split_once(": ").unwrap_or_default();
        match kind {
            "fail" => Reply::Status(500, r#"{"error":{"message":"boom"}}"#.to_owned()),
            "compute" if last_is_tool_result(body) => Reply::Text("It is 4.".to_owned()),
            "compute" => Reply::TextAndTools(
                "Let me check that.".to_owned(),
                vec![(
                    "calc-1".to_owned(),
                    "calculator".to_owned(),
                    r#"{"expression":"2+2"}"#.to_owned(),
                )],
            ),
            "cut" if !cut.swap(true, std::sync::atomic::Ordering::SeqCst) => {
                Reply::CutStream("Hello wor".to_owned())
            }
            "cut" => Reply::Text("Hello world.".to_owned()),
            "weather"
                if body["messages"]
                    .as_array()
                    .and_then(|m| m.last())
                    .is_some_and(|last| last["tool_call_id"] == "w-1") =>
            {
                let last = &body["messages"][body["messages"].as_array().map_or(0, Vec::len) - 1];
                Reply::Text(format!(
                    "In Paris: {}",
                    last["content"].as_str().unwrap_or_default()
                ))
            }
            "weather" => Reply::TextAndTools(
                "Let me look.".to_owned(),
                vec![
                    (
                        "calc-w".to_owned(),
                        "calculator".to_owned(),
                        r#"{"expression":"20+1"}"#.to_owned(),
                    ),
                    (
                        "w-1".to_owned(),
                        "get_weather".to_owned(),
                        r#"{"city":"Paris"}"#.to_owned(),
                    ),
                ],
            ),
            "structured" => Reply::Text(r#"{"answer":"yes"}"#.to_owned()),
            "slow" => Canned {
                delay: Duration::from_secs(3),
                ..Canned::json(200, slow_completion(&text).to_string())
            }
            .into(),
            _ => Reply::Text(format!("echo: {text}")),
        }
    })
    .await
}

/// A plain chat completion answering `text`.
fn slow_completion(text: &str) -> Value {
    serde_json::json!({
        "id": "chatcmpl-slow", "object": "chat.completion", "model": "fake-model",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": format!("echo: {text}")}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}
    })
}

async fn as_agent_frameworks_use_it(client: Client) {
    if !available(client).await {
        return;
    }
    let llm = agents_model().await;
    let app = TestApp::spawn_with(&llm, |s| {
        s.llm.max_retries = 1;
        s.api.reply_timeout = Duration::from_secs(2);
    })
    .await;

    let results = run_script(client, "openai_agents", &app).await;

    for failure in ["plain_failure", "streamed_failure"] {
        let failure = &results[failure];
        assert_eq!(failure["raised"], true, "the client raised: {failure}");
        assert_eq!(failure["code"], "model_failed", "{failure}");
    }
    assert_eq!(results["plain_failure"]["status"], 502);
    assert!(results["plain_failure"]["session"].is_string());

    let resent = &results["resent"];
    assert_eq!(resent["first_reply"], "Let me check that.\n\nIt is 4.");
    assert_eq!(resent["second_reply"], "Let me check that.\n\nIt is 4.");
    assert_eq!(
        resent["first_session"], resent["second_session"],
        "the transcript as streamed continued its session: {resent}"
    );
    let last = llm
        .requests()
        .iter()
        .map(|request| request.json())
        .rfind(|body| last_user_text(body) == "compute: again")
        .expect("the second turn's requests");
    let tool_results = last["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|message| message["role"] == "tool")
        .count();
    assert_eq!(tool_results, 2, "both turns' tool rounds reach the model");

    assert_eq!(results["cut"]["text"], "Hello world.", "no text twice");

    assert_eq!(results["structured"]["answer"], "yes", "{results}");
    let structured = llm
        .requests()
        .iter()
        .map(|request| request.json())
        .find(|body| last_user_text(body) == "structured: pick")
        .expect("the structured request");
    assert_eq!(
        structured["response_format"]["json_schema"]["name"], "pick",
        "{structured}"
    );
    assert_eq!(structured["response_format"]["json_schema"]["strict"], true);
    assert_eq!(structured["temperature"], 0.2);
    let system = structured["messages"][0]["content"]
        .as_str()
        .unwrap_or_default();
    assert!(
        system.contains("\n\n# The client's instructions\n") && system.ends_with("Answer as JSON."),
        "the client's system message reached the model: {system}"
    );

    let client_tools = &results["client_tools"];
    assert_eq!(client_tools["finish"], "tool_calls", "{client_tools}");
    assert_eq!(client_tools["content"], "Let me look.");
    assert_eq!(
        client_tools["calls"],
        serde_json::json!([["w-1", "get_weather", r#"{"city":"Paris"}"#]]),
        "only the client's call is handed out"
    );
    assert_eq!(client_tools["answer"], "In Paris: sunny");
    assert_eq!(client_tools["answer_finish"], "stop");
    assert_client_tool_round(&llm);
    let refused = &results["penalty_refused"];
    assert_eq!(refused["raised"], true, "{refused}");
    assert_eq!(refused["status"], 400, "{refused}");
    assert!(
        llm.requests()
            .iter()
            .all(|request| !last_user_text(&request.json()).starts_with("refused")),
        "a refused request reaches no model"
    );

    let retried = &results["retried"];
    assert_eq!(retried["raised"], false, "{retried}");
    assert_eq!(retried["outcome"], "echo: slow: take your time");
    let slow_calls = llm
        .requests()
        .iter()
        .filter(|request| last_user_text(&request.json()) == "slow: take your time")
        .count();
    assert_eq!(slow_calls, 1, "the client's retries joined the first turn");
    app.stop().await;
}

#[tokio::test]
async fn the_python_client_speaks_the_responses_api() {
    speaks_the_responses_api(Client::Python).await;
}

#[tokio::test]
async fn the_node_client_speaks_the_responses_api() {
    speaks_the_responses_api(Client::Node).await;
}

async fn speaks_the_responses_api(client: Client) {
    if !available(client).await {
        return;
    }
    let llm = agents_model().await;
    let app = TestApp::spawn_with(&llm, |s| s.llm.max_retries = 0).await;

    let results = run_script(client, "openai_responses", &app).await;

    let plain = &results["plain"];
    assert!(
        plain["id"]
            .as_str()
            .is_some_and(|id| id.starts_with("resp_")),
        "{plain}"
    );
    assert_eq!(plain["object"], "response");
    assert_eq!(plain["status"], "completed");
    assert_eq!(plain["text"], "echo: my name is Ada");
    let continued = &results["continued"];
    assert_eq!(continued["text"], "echo: what is my name?");
    assert_eq!(continued["previous"], plain["id"]);
    let continued_request = llm
        .requests()
        .iter()
        .map(|request| request.json())
        .find(|body| last_user_text(body) == "what is my name?")
        .expect("the continued request");
    assert!(
        continued_request.to_string().contains("my name is Ada"),
        "previous_response_id continued the conversation"
    );
    let system = continued_request["messages"][0]["content"]
        .as_str()
        .unwrap_or_default();
    assert!(
        system.contains("\n\n# The client's instructions\n") && system.ends_with("Be brief."),
        "the first response's `instructions` joined the prompt: {system}"
    );
    let streamed = &results["streamed"];
    assert_eq!(
        streamed["types"],
        serde_json::json!([
            "response.created",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ]),
        "{streamed}"
    );
    assert_eq!(streamed["text"], "Let me check that.\n\nIt is 4.");
    assert_eq!(streamed["final_text"], streamed["text"]);
    assert_eq!(results["retrieved"]["text"], "echo: my name is Ada");
    assert_eq!(results["deleted"]["status"], 404, "{}", results["deleted"]);
    assert_eq!(results["plain_failure"]["status"], 502);
    assert_eq!(results["plain_failure"]["code"], "model_failed");
    let streamed_failure = &results["streamed_failure"];
    assert_eq!(streamed_failure["raised"], true, "{streamed_failure}");
    assert_eq!(streamed_failure["code"], "model_failed");
    let client_tools = &results["client_tools"];
    assert_eq!(
        client_tools["calls"],
        serde_json::json!([["w-1", "get_weather", r#"{"city":"Paris"}"#]]),
        "{client_tools}"
    );
    assert_eq!(client_tools["answer"], "In Paris: sunny");
    assert_client_tool_round(&llm);
    app.stop().await;
}

/// The model saw the client's tool round as one conversation: two calls
/// for the `weather:` question, the second with the gateway's calculator
/// result and the client's result, in call order, after the first's
/// messages unchanged.
fn assert_client_tool_round(llm: &FakeLlm) {
    let requests: Vec<_> = llm
        .requests()
        .into_iter()
        .filter(|request| last_user_text(&request.json()) == "weather: in Paris?")
        .collect();
    assert_eq!(
        requests.len(),
        2,
        "one call hands the tool out, one answers"
    );
    let answer = requests[1].json();
    let results: Vec<(String, String)> = answer["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|message| message["role"] == "tool")
        .map(|message| {
            (
                message["tool_call_id"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                message["content"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert_eq!(results.len(), 2, "{answer}");
    assert_eq!(results[0].0, "calc-w", "the gateway's tool also ran");
    assert_eq!(results[1], ("w-1".to_owned(), "sunny".to_owned()));
    crate::helpers::assert_prefix_holds(&requests);
}

/// Whether the client's `openai` package can be loaded.
async fn installed(client: Client) -> bool {
    Command::new(client.program())
        .args(client.probe().iter().filter(|arg| !arg.is_empty()))
        .current_dir(clients_dir())
        .kill_on_drop(true)
        .output()
        .await
        .is_ok_and(|output| output.status.success())
}

/// Runs the client's script `name` against the app and parses what it
/// printed.
pub(crate) async fn run_script(client: Client, name: &str, app: &TestApp) -> Value {
    let no_proxy = match std::env::var("NO_PROXY") {
        Ok(hosts) if !hosts.is_empty() => format!("{hosts},127.0.0.1"),
        _ => "127.0.0.1".to_owned(),
    };
    let run = Command::new(client.program())
        .arg(client.script(name))
        .arg(app.url("/v1"))
        .current_dir(clients_dir())
        .env("NO_PROXY", no_proxy)
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(SCRIPT_TIMEOUT, run)
        .await
        .expect("the client script finishes")
        .expect("the client runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the client script failed:\n{}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(&stdout).unwrap_or_else(|err| panic!("not JSON ({err}): {stdout}"))
}
