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
