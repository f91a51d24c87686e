//! MCP tool servers: a real server process (the test kit's `fake_mcp`, on
//! stdio) and the same server over streamable HTTP, their tools listed and
//! called through the agent loop, a crash mid-call answered with an error
//! while the server comes back, a byte-stable prefix with MCP tools offered,
//! `/stop` cancelling a running call, allow/deny lists, a tool list change
//! seen by new sessions only, cached tool results, and an image in a tool's
//! result stored once and shown as an image (OpenAI and Anthropic formats)
//! or as a note, never as base64 text.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use switchboard::config::Settings;
use switchboard::tools::mcp::McpServerSettings;
use switchboard_test_support::eventually;
use switchboard_test_support::mcp::{FakeMcp, fake_mcp_binary, serve_http};
use tokio_util::sync::CancellationToken;

use crate::helpers::{
    FakeLlm, Recorded, Reply, TestApp, last_is_tool_result, last_user_text, tool_on_even_turns,
};

/// The `[mcp.servers.fake]` settings of the stdio server, logging its calls
/// to `log` (and listing the extra tools of `extra`).
pub(crate) fn stdio_server(log: &Path, extra: Option<&Path>) -> McpServerSettings {
    let mut args = vec!["--log".to_owned(), log.display().to_string()];
    if let Some(extra) = extra {
        args.extend(["--extra".to_owned(), extra.display().to_string()]);
    }
    McpServerSettings {
        command: Some(fake_mcp_binary().display().to_string()),
        args,
        env: vec!["HOME".to_owned()],
        ..McpServerSettings::default()
    }
}

pub(crate) fn with_server(settings: &mut Settings, server: McpServerSettings) {
    settings.mcp.servers.insert("fake".to_owned(), server);
    settings.mcp.restart_base = std::time::Duration::from_millis(50);
    settings.mcp.restart_max = std::time::Duration::from_secs(1);
}

/// The lines of the server's call log.
fn log_lines(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn calls_of(log: &Path, tool: &str) -> usize {
    let wanted = format!("call {tool}");
    log_lines(log)
        .iter()
        .filter(|line| **line == wanted)
        .count()
}

/// A model that, for a user message `call TOOL ARGS`, calls TOOL with ARGS
/// once, then answers with the tool's result text.
fn caller(body: &Value) -> Reply {
    if last_is_tool_result(body) {
        let messages = body["messages"].as_array().expect("messages");
        let result = messages.last().expect("a message")["content"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        return Reply::Text(result);
    }
    let text = last_user_text(body);
    match text.strip_prefix("call ") {
        Some(rest) => {
            let (tool, args) = rest.split_once(' ').unwrap_or((rest, "{}"));
            Reply::Tools(vec![("c1".to_owned(), tool.to_owned(), args.to_owned())])
        }
        None => Reply::Text(format!("said: {text}")),
    }
}

/// The tool names a model request offered.
fn offered(request: &Recorded) -> Vec<String> {
    request.json()["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .map(|tool| {
                    tool["function"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned()
                })
                .collect()
        })
        .unwrap_or_default()
}

fn result_of(reply: &str) -> Value {
    serde_json::from_str(reply).unwrap_or_else(|_| panic!("a tool result, got {reply}"))
}

#[tokio::test]
async fn stdio_tools_are_offered_sorted_with_their_schemas_and_called_by_the_agent() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("calls.log");
    let llm = FakeLlm::start(caller).await;
    let app = TestApp::spawn_with(&llm, |s| with_server(s, stdio_server(&log, None))).await;

    let (session, added) = app.say(None, r#"call fake__add {"a": 2, "b": 3}"#).await;
    let (_, failed) = app.say(Some(&session), "call fake__fail {}").await;
    let (_, home) = app
        .say(Some(&session), r#"call fake__env {"name":"HOME"}"#)
        .await;
    let (_, hidden) = app
        .say(
            Some(&session),
            r#"call fake__env {"name":"CARGO_MANIFEST_DIR"}"#,
        )
        .await;

    assert_eq!(result_of(&added), json!({"sum": 5.0, "success": true}));
    assert_eq!(
        result_of(&failed),
        json!({"error": "this tool always fails", "success": false})
    );
    // Only the variables named in `env` (and PATH) reach the server.
    let home_value = std::env::var("HOME").unwrap_or_default();
    assert_eq!(result_of(&home)["result"], json!(home_value));
    assert_eq!(result_of(&hidden)["result"], json!(""));
    let first = &llm.requests()[0];
    assert_eq!(
        offered(first),
        [
            "calculator",
            "current_time",
            "delegate",
            "fake__add",
            "fake__choose",
            "fake__crash",
            "fake__echo",
            "fake__env",
            "fake__fail",
            "fake__freeze",
            "fake__header",
            "fake__image",
            "fake__slow",
        ]
    );
    let add = first.json()["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .find(|tool| tool["function"]["name"] == "fake__add")
        .cloned()
        .expect("fake__add offered");
    assert_eq!(add["function"]["description"], "Add two numbers.");
    assert_eq!(
        add["function"]["parameters"],
        json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]})
    );
    assert_eq!(calls_of(&log, "add"), 1);
    let listed: Vec<(String, String)> = app
        .gateway
        .tools
        .offered()
        .sources()
        .into_iter()
        .map(|(name, source)| (name, source.to_string()))
        .collect();
    assert!(listed.contains(&("calculator".to_owned(), "built-in".to_owned())));
    assert!(listed.contains(&("fake__echo".to_owned(), "mcp:fake".to_owned())));
    app.stop().await;
}

#[tokio::test]
async fn the_same_server_works_over_streamable_http() {
    let stop = CancellationToken::new();
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("calls.log");
    let url = serve_http(
        FakeMcp {
            log: Some(log.clone()),
            extra: None,
        },
        stop.clone(),
    )
    .await
    .expect("HTTP server");
    let llm = FakeLlm::start(caller).await;
    let app = TestApp::spawn_with(&llm, |s| {
        with_server(
            s,
            McpServerSettings {
                url: Some(url),
                // The header's value comes from the named variable.
                headers: [("X-Api-Key".to_owned(), "HOME".to_owned())].into(),
                ..McpServerSettings::default()
            },
        );
    })
    .await;

    let (session, echoed) = app
        .say(None, r#"call fake__echo {"text": "over http"}"#)
        .await;
    let (_, header) = app
        .say(Some(&session), r#"call fake__header {"name": "x-api-key"}"#)
        .await;

    assert_eq!(
        result_of(&echoed),
        json!({"result": "over http", "success": true})
    );
    assert_eq!(
        result_of(&header)["result"],
        json!(std::env::var("HOME").unwrap_or_default())
    );
    assert!(offered(&llm.requests()[0]).contains(&"fake__slow".to_owned()));
    assert_eq!(calls_of(&log, "echo"), 1);
    app.stop().await;
    stop.cancel();
}

#[tokio::test]
async fn a_crash_mid_call_is_an_error_result_and_the_server_comes_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("calls.log");
    let llm = FakeLlm::start(caller).await;
    let app = TestApp::spawn_with(&llm, |s| with_server(s, stdio_server(&log, None))).await;
    let mcp = app.gateway.tools.mcp().expect("MCP servers").clone();
    assert_eq!(mcp.statuses()[0].starts, 1);

    let (session, crashed) = app.say(None, "call fake__crash {}").await;

    let crashed = result_of(&crashed);
    assert_eq!(crashed["success"], false);
    let error = crashed["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("MCP server `fake`") && error.contains("restarted"),
        "a clear error: {error}"
    );
    // Other tools keep working while it restarts.
    let (_, calculated) = app
        .say(Some(&session), r#"call calculator {"expression": "6*7"}"#)
        .await;
    assert_eq!(result_of(&calculated)["result"], 42);
    eventually("the server to be restarted", || {
        let status = mcp.statuses()[0].clone();
        async move { status.up && status.starts == 2 }
    })
    .await;
    let (_, echoed) = app
        .say(Some(&session), r#"call fake__echo {"text": "back"}"#)
        .await;
    assert_eq!(
        result_of(&echoed),
        json!({"result": "back", "success": true})
    );
    assert_eq!(calls_of(&log, "crash"), 1);
    assert_eq!(calls_of(&log, "echo"), 1);
    app.stop().await;
}

#[tokio::test]
async fn a_hung_server_is_restarted_and_answers_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("calls.log");
    let llm = FakeLlm::start(caller).await;
    let app = TestApp::spawn_with(&llm, |s| {
        with_server(s, stdio_server(&log, None));
        s.agent.tool_timeout = std::time::Duration::from_secs(1);
        s.mcp.refresh = std::time::Duration::from_secs(1);
        s.mcp.startup_timeout = std::time::Duration::from_secs(1);
    })
    .await;
    let mcp = app.gateway.tools.mcp().expect("MCP servers").clone();

    let (session, frozen) = app.say(None, "call fake__freeze {}").await;

    assert_eq!(
        result_of(&frozen),
        json!({"error": "the tool did not finish within 1 s", "success": false})
    );
    eventually("the hung server to be restarted", || {
        let status = mcp.statuses()[0].clone();
        async move { status.up && status.starts == 2 }
    })
    .await;
    let (_, echoed) = app
        .say(Some(&session), r#"call fake__echo {"text": "thawed"}"#)
        .await;
    assert_eq!(
        result_of(&echoed),
        json!({"result": "thawed", "success": true})
    );
    app.stop().await;
}

/// Calls `fake__echo` on every second user message, then answers.
fn echo_every_other_turn(body: &Value) -> Reply {
    if last_is_tool_result(body) {
        return Reply::Text("tool said so".to_owned());
    }
    let turn: usize = last_user_text(body)
        .trim_start_matches("turn ")
        .parse()
        .unwrap_or(0);
    tool_on_even_turns(
        turn,
        "fake__echo",
        format!("{{ \"text\" :  \"turn {turn}\" }}"),
    )
}

#[tokio::test]
async fn the_prompt_prefix_is_byte_stable_across_ten_turns_with_mcp_tools() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("calls.log");
    let llm = FakeLlm::start(echo_every_other_turn).await;
    let app = TestApp::spawn_with(&llm, |s| {
        with_server(s, stdio_server(&log, None));
        // Re-listed every second: the listing must not disturb the prefix.
        s.mcp.refresh = std::time::Duration::from_secs(1);
    })
    .await;

    let mut session: Option<String> = None;
    for turn in 0..10 {
        let (id, _) = app.say(session.as_deref(), &format!("turn {turn}")).await;
        session = Some(id);
    }

    let requests = llm.requests();
    assert_eq!(requests.len(), 15, "10 turns, 5 with a tool round");
    for pair in requests.windows(2) {
        let previous = pair[0].raw_messages();
        let next = pair[1].raw_messages();
        let open = previous.strip_suffix(']').expect("array");
        assert!(
            next.starts_with(open),
            "prefix changed:\nprevious: {previous}\nnext:     {next}"
        );
    }
    let tools: Vec<String> = requests
        .iter()
        .map(|r| r.json()["tools"].to_string())
        .collect();
    assert!(tools.windows(2).all(|w| w[0] == w[1]));
    assert!(tools[0].contains("fake__echo"));
    assert_eq!(calls_of(&log, "echo"), 5);
    assert_eq!(app.gateway.cache.builds(), 1, "one agent signature");
    app.stop().await;
}

#[tokio::test]
async fn stop_cancels_a_running_mcp_call() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("calls.log");
    let llm = FakeLlm::start(caller).await;
    let app = TestApp::spawn_with(&llm, |s| with_server(s, stdio_server(&log, None))).await;
    let (session, _) = app.say(None, "/help").await;

    let long = {
        let (app, session) = (&app, session.clone());
        async move {
            app.say(Some(&session), r#"call fake__slow {"secs": 600}"#)
                .await
        }
    };
    let stop = async {
        eventually("the slow call to start", || {
            let started = calls_of(&log, "slow") == 1;
            async move { started }
        })
        .await;
        app.say(Some(&session), "/stop").await
    };
    let ((_, stopped), (_, confirmation)) = tokio::join!(long, stop);

    assert_eq!(confirmation, "Stopping the running task.");
    assert_eq!(stopped, "Stopped, as you asked.");
    assert_eq!(app.outcome_of_last_turn().await, "cancelled");
    eventually("the server to hear of the cancellation", || {
        let told = log_lines(&log).contains(&"cancelled slow".to_owned());
        async move { told }
    })
    .await;
    app.stop().await;
}

#[tokio::test]
async fn allow_and_deny_lists_choose_the_mcp_tools_offered() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("calls.log");
    let llm = FakeLlm::start(caller).await;
    let app = TestApp::spawn_with(&llm, |s| {
        with_server(s, stdio_server(&log, None));
        s.mcp.allow = vec!["fake__e*".to_owned(), "fake__add".to_owned()];
        s.mcp.deny = vec!["fake__env".to_owned()];
    })
    .await;

    let (_, denied) = app.say(None, r#"call fake__env {"name":"HOME"}"#).await;

    assert_eq!(
        offered(&llm.requests()[0]),
        [
            "calculator",
            "current_time",
            "delegate",
            "fake__add",
            "fake__echo"
        ]
    );
    assert_eq!(result_of(&denied)["success"], false);
    assert_eq!(calls_of(&log, "env"), 0);
    app.stop().await;
}

#[tokio::test]
async fn a_changed_tool_list_reaches_new_sessions_and_running_ones_keep_theirs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("calls.log");
    let extra: PathBuf = dir.path().join("extra.txt");
    let llm = FakeLlm::start(caller).await;
    let app = TestApp::spawn_with(&llm, |s| {
        with_server(s, stdio_server(&log, Some(&extra)));
        s.mcp.refresh = std::time::Duration::from_secs(1);
    })
    .await;
    let (old, _) = app.say(None, "hello").await;

    std::fs::write(&extra, "shout\n").expect("extra tools");
    let tools = app.gateway.tools.clone();
    eventually("the new tool to be listed", || {
        let listed = tools.offered().names().contains(&"fake__shout".to_owned());
        async move { listed }
    })
    .await;
    app.say(Some(&old), "again").await;
    let (_, shouted) = app.say(None, r#"call fake__shout {"text": "hey"}"#).await;

    let requests = llm.requests();
    assert!(!offered(&requests[1]).contains(&"fake__shout".to_owned()));
    assert_eq!(requests[0].json()["tools"], requests[1].json()["tools"]);
    assert!(offered(&requests[2]).contains(&"fake__shout".to_owned()));
    assert_eq!(
        result_of(&shouted),
        json!({"result": "hey", "success": true})
    );
    app.stop().await;
}

/// `tool_calls.cache_hit` of every checkpoint, in order.
async fn cache_hits(app: &TestApp) -> Vec<(String, i64)> {
    sqlx::query_as("SELECT name, cache_hit FROM tool_calls ORDER BY started_at, request_id")
        .fetch_all(&mut *app.gateway.store.conn().await.expect("conn"))
        .await
        .expect("checkpoints")
}

#[tokio::test]
async fn a_cacheable_tool_called_twice_runs_once_with_the_same_bytes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("calls.log");
    let llm = FakeLlm::start(caller).await;
    let app = TestApp::spawn_with(&llm, |s| {
        let mut server = stdio_server(&log, None);
        server.tool_cache_ttl_secs.insert("add".to_owned(), 600);
        with_server(s, server);
    })
    .await;

    // Two sessions (so across sessions), the same call spelt two ways.
    let (first_session, first) = app.say(None, r#"call fake__add {"a": 1, "b": 2}"#).await;
    let (second_session, second) = app.say(None, r#"call fake__add {"b":2,"a":1}"#).await;
    // Not cacheable: runs each time.
    app.say(Some(&first_session), r#"call fake__echo {"text": "x"}"#)
        .await;
    app.say(Some(&second_session), r#"call fake__echo {"text": "x"}"#)
        .await;
    // The calculator is cacheable by nature.
    app.say(None, r#"call calculator {"expression": "2+2"}"#)
        .await;
    app.say(None, r#"call calculator {"expression": "2+2"}"#)
        .await;

    assert_ne!(first_session, second_session);
    assert_eq!(calls_of(&log, "add"), 1, "the second call was a cache hit");
    assert_eq!(calls_of(&log, "echo"), 2);
    assert_eq!(first, second);
    // The history holds the same bytes as after a live call.
    let live = app.wire_history(&first_session).await;
    let cached = app.wire_history(&second_session).await;
    let tool_entry = |entries: &[switchboard::store::WireEntry]| {
        entries
            .iter()
            .find_map(|entry| match &entry.message {
                switchboard::domain::ChatMessage::Tool { content, .. } => Some(content.clone()),
                _ => None,
            })
            .expect("a tool result")
    };
    assert_eq!(tool_entry(&live), tool_entry(&cached));
    assert_eq!(
        cache_hits(&app).await,
        [
            ("fake__add".to_owned(), 0),
            ("fake__add".to_owned(), 1),
            ("fake__echo".to_owned(), 0),
            ("fake__echo".to_owned(), 0),
            ("calculator".to_owned(), 0),
            ("calculator".to_owned(), 1),
        ]
    );
    let cached_rows = app.count("tool_cache").await;
    assert_eq!(cached_rows, 2, "one row per distinct cacheable call");
    app.stop().await;
}

#[tokio::test]
async fn a_server_that_cannot_start_leaves_the_gateway_and_other_tools_working() {
    let llm = FakeLlm::start(caller).await;
    let app = TestApp::spawn_with(&llm, |s| {
        with_server(
            s,
            McpServerSettings {
                command: Some("/nonexistent/mcp-server".to_owned()),
                ..McpServerSettings::default()
            },
        );
    })
    .await;

    let (_, calculated) = app
        .say(None, r#"call calculator {"expression": "1+1"}"#)
        .await;

    assert_eq!(result_of(&calculated)["result"], 2);
    let status = app.gateway.tools.mcp().expect("MCP servers").statuses()[0].clone();
    assert!(!status.up);
    assert!(
        status.error.unwrap_or_default().contains("could not start"),
        "the reason is kept"
    );
    app.stop().await;
}

#[tokio::test]
async fn switchboard_tools_lists_every_tool_with_its_source() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("calls.log");
    let config = dir.path().join("switchboard.toml");
    let text = format!(
        "[agent]\ntools = [\"calculator\", \"current_time\"]\n\n[mcp]\ndeny = [\"fake__crash\"]\n\n\
         [mcp.servers.fake]\ncommand = {:?}\nargs = [\"--log\", {:?}]\n\
         tool_cache_ttl_secs = {{ add = 60 }}\n",
        fake_mcp_binary().display().to_string(),
        log.display().to_string(),
    );
    std::fs::write(&config, text).expect("config written");

    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .arg("--config")
        .arg(&config)
        .arg("tools")
        .output()
        .await
        .expect("switchboard tools runs");

    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    let lines: Vec<&str> = stdout.lines().collect();
    let line_of = |tool: &str| {
        lines
            .iter()
            .find(|line| line.split_whitespace().next() == Some(tool))
            .map(|line| line.split_whitespace().collect::<Vec<_>>().join(" "))
            .unwrap_or_else(|| panic!("{tool} listed in:\n{stdout}"))
    };
    assert_eq!(
        line_of("calculator"),
        "calculator allow built-in (results cached 86400 s)"
    );
    assert_eq!(line_of("current_time"), "current_time allow built-in");
    assert_eq!(
        line_of("fake__add"),
        "fake__add allow mcp:fake (results cached 60 s)"
    );
    assert_eq!(line_of("fake__echo"), "fake__echo allow mcp:fake");
    assert_eq!(
        line_of("fake__crash"),
        "fake__crash - (not offered: mcp.deny)",
        "a tool left out is listed with why"
    );
    assert!(stdout.contains("fake: up; 10 tools listed"), "{stdout}");
}

/// Starts `switchboard serve` in `dir` with `config/switchboard.toml` there
/// naming the MCP server `fake` started by `script`, against `llm`.
async fn serve_with_mcp_script(
    dir: &Path,
    script: &Path,
    llm: &FakeLlm,
) -> crate::helpers::ServeProcess {
    let config = dir.join("config");
    std::fs::create_dir_all(&config).expect("config folder");
    std::fs::write(
        config.join("switchboard.toml"),
        format!(
            "[mcp]\nrestart_base_ms = 50\n\n[mcp.servers.fake]\ncommand = {:?}\n",
            script.display().to_string()
        ),
    )
    .expect("config written");
    let base_url = llm.openai_base();
    crate::helpers::ServeProcess::start(
        dir,
        &[
            ("SWITCHBOARD__LLM__BASE_URL", base_url.as_str()),
            ("OPENAI_API_KEY", "sk-test"),
            ("RUST_LOG", "warn"),
        ],
        false,
    )
    .await
}

/// `/readyz`: its status code and body.
async fn readyz(base: &str) -> (u16, Value) {
    let response = reqwest::get(format!("{base}/readyz"))
        .await
        .expect("readyz");
    let status = response.status().as_u16();
    (status, response.json().await.expect("json"))
}

/// Sends `text` to the session (a new one when `None`): the session id and
/// the reply.
async fn say_to(base: &str, session: Option<&str>, text: &str) -> (String, String) {
    let mut request = reqwest::Client::new()
        .post(format!("{base}/v1/chat/completions"))
        .json(&json!({"messages": [{"role": "user", "content": text}]}));
    if let Some(session) = session {
        request = request.header("X-Session-Id", session);
    }
    let response = request.send().await.expect("sent");
    let session = response.headers()["x-session-id"]
        .to_str()
        .expect("ascii")
        .to_owned();
    let body: Value = response.json().await.expect("json");
    let reply = body["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_else(|| panic!("a reply: {body}"))
        .to_owned();
    (session, reply)
}

#[tokio::test]
async fn a_hanging_mcp_server_holds_neither_the_start_nor_the_turns() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("calls.log");
    let hang = dir.path().join("hang");
    // The server: the fake one, or (once `hang` exists) a program that never
    // answers MCP's initialisation.
    let script = dir.path().join("fake-mcp.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nif [ -e {hang:?} ]; then exec sleep 600; fi\nexec {:?} --log {log:?}\n",
            fake_mcp_binary().display().to_string(),
            hang = hang.display().to_string(),
            log = log.display().to_string(),
        ),
    )
    .expect("script written");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))
            .expect("executable");
    }
    let llm = FakeLlm::start(caller).await;

    // A first run: the server is up, and a session is offered its tools.
    let first = serve_with_mcp_script(dir.path(), &script, &llm).await;
    eventually("the MCP server to be up", || async {
        readyz(first.base_url()).await.1["mcp"]["fake"] == "up"
    })
    .await;
    let (session, echoed) =
        say_to(first.base_url(), None, r#"call fake__echo {"text": "up"}"#).await;
    assert_eq!(result_of(&echoed), json!({"result": "up", "success": true}));
    first.stop().await;

    // The next run: the server hangs at start (for the whole default 30 s
    // start timeout, then again after each restart).
    std::fs::write(&hang, "").expect("hang flag");
    let started = std::time::Instant::now();
    let second = serve_with_mcp_script(dir.path(), &script, &llm).await;
    let (status, ready) = readyz(second.base_url()).await;
    let answered_after = started.elapsed();

    assert!(
        answered_after < std::time::Duration::from_secs(1),
        "/healthz and /readyz answer at once, not after the MCP start timeout: {answered_after:?}"
    );
    assert_eq!(
        status, 200,
        "a starting MCP server does not make the instance unready: {ready}"
    );
    assert_eq!(ready["status"], "ok");
    assert_eq!(ready["mcp"]["fake"], "starting", "{ready}");

    // The session offered the server's tools gets an error result at once.
    let asked = std::time::Instant::now();
    let (_, unavailable) = say_to(
        second.base_url(),
        Some(&session),
        r#"call fake__echo {"text": "down"}"#,
    )
    .await;
    let result = result_of(&unavailable);
    assert_eq!(result["success"], false);
    assert!(
        result["error"]
            .as_str()
            .is_some_and(|e| e.contains("`fake` is not available (starting)")),
        "{result}"
    );
    assert!(asked.elapsed() < std::time::Duration::from_secs(5));
    second.stop().await;
}

/// An MCP server's question during a call (elicitation) reaches the person
/// as a question with its choices as buttons; a tap, or their next message,
/// is the answer the server gets, and the call goes on with it.
#[tokio::test]
async fn an_mcp_servers_question_during_a_call_is_put_to_the_person() {
    use switchboard_test_support::telegram::{FIRST_SENT_ID, FakeTelegram, TgUser};
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("calls.log");
    let telegram = FakeTelegram::start().await;
    let llm = FakeLlm::start(caller).await;
    let app = TestApp::spawn_with(&llm, |s| {
        with_server(s, stdio_server(&log, None));
        s.telegram = Some(crate::helpers::telegram_settings(&telegram));
    })
    .await;
    let alice = TgUser {
        id: 501,
        first_name: "Alice",
    };
    let question = telegram
        .ask(alice, r#"call fake__choose {"question": "Which size?"}"#)
        .await;
    assert!(
        question.contains("`fake` asks: Which size?") || question.contains("fake</code> asks"),
        "{question}"
    );
    let asked = (0..20)
        .map(|n| FIRST_SENT_ID + n)
        .find(|id| !telegram.buttons(alice.id, *id).is_empty())
        .expect("the question has buttons");
    let buttons = telegram.buttons(alice.id, asked);
    let labels: Vec<&str> = buttons.iter().map(|(label, _)| label.as_str()).collect();
    assert_eq!(labels, ["small", "large"]);
    let before = telegram.sent().len();
    telegram.tap(alice, alice.id, asked, &buttons[1].1);
    let reply = telegram
        .reply_after(before, alice.id, "the call's result")
        .await;
    assert!(
        reply.contains(r#"action=accept content={\"size\":\"large\"}"#)
            || reply.contains(r#"action=accept content={"size":"large"}"#),
        "{reply}"
    );

    // Answered in the person's own words: their next message.
    telegram.dm(alice, r#"call fake__choose {"question": "And now?"}"#);
    telegram
        .wait_for("the second question", || {
            telegram
                .chat_view(alice.id)
                .iter()
                .any(|t| t.contains("And now?"))
        })
        .await;
    let before = telegram.sent().len();
    telegram.dm(alice, "small");
    telegram
        .wait_for("the call's result with the typed answer", || {
            telegram.sent()[before..]
                .iter()
                .any(|m| m.text.contains("action=accept") && m.text.contains("small"))
        })
        .await;
    assert_eq!(calls_of(&log, "choose"), 2);

    // Stopped while the question is open: the question is closed with the
    // call, so no later message is taken for its answer.
    telegram.dm(alice, r#"call fake__choose {"question": "Third?"}"#);
    telegram
        .wait_for("the third question", || {
            telegram
                .chat_view(alice.id)
                .iter()
                .any(|t| t.contains("Third?"))
        })
        .await;
    telegram.dm(alice, "/stop");
    switchboard_test_support::eventually("the abandoned question closed", || async {
        sqlx::query_scalar::<_, String>("SELECT status FROM approvals ORDER BY id DESC LIMIT 1")
            .fetch_one(&mut *app.gateway.store.conn().await.expect("conn"))
            .await
            .expect("status")
            == "stopped"
    })
    .await;
    app.stop().await;
}

/// A model that calls `fake__image` for the user message `call fake__image
/// {}` and answers `seen` once it has the result.
fn picture(body: &Value) -> Reply {
    if last_user_text(body) == "call fake__image {}" && !last_is_tool_result(body) {
        Reply::Tools(vec![(
            "c1".to_owned(),
            "fake__image".to_owned(),
            "{}".to_owned(),
        )])
    } else {
        Reply::Text("seen".to_owned())
    }
}

/// The message of `request` that is the result of the call `id`
/// (Chat Completions).
fn tool_message(request: &Recorded, id: &str) -> Value {
    request.json()["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .find(|message| message["role"] == "tool" && message["tool_call_id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("the result of {id}"))
}

/// The base64 of the `image` tool's PNG.
fn image_base64() -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(switchboard_test_support::mcp::image_png())
}

/// What the result text says of the `image` tool's file.
fn image_note() -> String {
    let size = switchboard_test_support::mcp::image_png().len();
    format!("[file 1: image/png, 4×3, {size} bytes]")
}

#[tokio::test]
async fn an_mcp_image_reaches_a_vision_model_as_an_image_stored_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("calls.log");
    let llm = FakeLlm::start(picture).await;
    let app = TestApp::spawn_with(&llm, |s| {
        with_server(s, stdio_server(&log, None));
        s.media.vision_models = vec!["fake-model".to_owned()];
    })
    .await;

    let (session, first) = app.say(None, "call fake__image {}").await;
    let (_, second) = app.say(Some(&session), "call fake__image {}").await;

    assert_eq!((first.as_str(), second.as_str()), ("seen", "seen"));
    let requests = llm.requests();
    assert_eq!(requests.len(), 4, "two turns of a tool round each");
    let result = tool_message(&requests[1], "c1");
    let text = result["content"].as_str().expect("the result's text");
    assert_eq!(
        result_of(text),
        json!({"files": [image_note()], "result": "a 4×3 gradient", "success": true})
    );
    let data_url = format!("data:image/png;base64,{}", image_base64());
    assert!(
        !text.contains(&image_base64()[..40]),
        "the base64 is only in the image part, never in the result text"
    );
    let messages = requests[1].json()["messages"].clone();
    let last = messages
        .as_array()
        .and_then(|m| m.last())
        .expect("a message");
    assert_eq!(
        *last,
        json!({"role": "user", "content": [
            {"type": "text", "text": "Images returned by tool call c1:"},
            {"type": "image_url", "image_url": {"url": data_url}},
        ]}),
        "the image follows the round's results"
    );
    // The next turn replays the first byte for byte, image included.
    crate::helpers::assert_prefix_holds(&requests);
    // Two calls, the same image: one blob.
    assert_eq!(calls_of(&log, "image"), 2);
    let stored = crate::helpers::files_under(&dir_of(&app));
    assert_eq!(stored.len(), 1, "one blob: {stored:?}");
    assert_eq!(
        std::fs::read(&stored[0]).expect("blob"),
        switchboard_test_support::mcp::image_png()
    );
    // The tool entries refer to it by hash.
    let media: Vec<Option<String>> =
        sqlx::query_scalar("SELECT media FROM messages WHERE role = 'tool' ORDER BY id")
            .fetch_all(&mut *app.gateway.store.conn().await.expect("conn"))
            .await
            .expect("rows");
    let name = stored[0]
        .file_name()
        .and_then(|n| n.to_str())
        .expect("name");
    for files in &media {
        let files: Value = serde_json::from_str(files.as_deref().expect("media")).expect("json");
        assert_eq!(files[0]["hash"], name);
    }
    assert_eq!(media.len(), 2);
    app.stop().await;
}

/// The blob folder of `app`.
fn dir_of(app: &TestApp) -> PathBuf {
    app.gateway.settings.media.folder.clone()
}

#[tokio::test]
async fn an_mcp_image_is_a_note_to_a_model_without_vision() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("calls.log");
    let llm = FakeLlm::start(picture).await;
    let app = TestApp::spawn_with(&llm, |s| with_server(s, stdio_server(&log, None))).await;

    let (_, reply) = app.say(None, "call fake__image {}").await;

    assert_eq!(reply, "seen");
    let requests = llm.requests();
    let raw = requests[1].raw_messages();
    assert!(!raw.contains(&image_base64()[..40]), "no base64: {raw}");
    let messages = requests[1].json()["messages"].clone();
    let last = messages
        .as_array()
        .and_then(|m| m.last())
        .expect("a message");
    assert_eq!(last["role"], "tool", "no image message");
    let text = last["content"].as_str().expect("text");
    let (json_text, note) = text.split_once('\n').expect("the result, then the note");
    assert_eq!(
        result_of(json_text),
        json!({"files": [image_note()], "result": "a 4×3 gradient", "success": true})
    );
    assert_eq!(note, "[image: 4×3, not shown: this model has no vision]");
    assert!(
        text.len() < 200,
        "a short result: {} characters",
        text.len()
    );
    app.stop().await;
}

#[tokio::test]
async fn an_mcp_image_goes_inside_the_tool_result_for_an_anthropic_vision_model() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("calls.log");
    let llm = FakeLlm::start(picture).await;
    let app = TestApp::spawn_with(&llm, |s| {
        with_server(s, stdio_server(&log, None));
        s.llm.provider = switchboard::llm::ProviderKind::Anthropic;
        s.llm.base_url =
            switchboard::domain::BaseUrl::parse(&llm.anthropic_base()).expect("a test URL");
        s.media.vision_models = vec!["fake-model".to_owned()];
    })
    .await;

    let (_, reply) = app.say(None, "call fake__image {}").await;

    assert_eq!(reply, "seen");
    let requests = llm.requests();
    let messages = requests[1].json()["messages"].clone();
    let last = messages
        .as_array()
        .and_then(|m| m.last())
        .expect("a message");
    let block = &last["content"][0];
    assert_eq!(block["type"], "tool_result");
    let content = block["content"].as_array().expect("blocks");
    assert_eq!(content.len(), 2, "{content:?}");
    assert_eq!(content[0]["type"], "text");
    assert_eq!(
        result_of(content[0]["text"].as_str().expect("text")),
        json!({"files": [image_note()], "result": "a 4×3 gradient", "success": true})
    );
    assert_eq!(
        content[1],
        json!({"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                           "data": image_base64()}})
    );
    app.stop().await;
}
