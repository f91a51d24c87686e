//! A warning is logged once when a task passes 80 % of each of its budgets
//! (model calls, tokens, the principal's daily spend, time), seen in the
//! real binary's logs.

use std::time::Duration;

use crate::helpers::{FakeLlm, ServeProcess, endless_calculator};

fn warnings_for(logs: &str, budget: &str) -> usize {
    logs.lines()
        .filter(|line| {
            line.contains("task passed 80% of a budget")
                && line.contains(&format!("budget=\"{budget}\""))
        })
        .count()
}

async fn serve_with(llm: &FakeLlm, config: &str) -> (ServeProcess, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("switchboard.toml");
    std::fs::write(&path, config).expect("config written");
    let base_url = llm.openai_base();
    let path = path.to_str().expect("utf-8 path").to_owned();
    let server = ServeProcess::start(
        dir.path(),
        &[
            ("SWITCHBOARD_CONFIG", path.as_str()),
            ("SWITCHBOARD__LLM__BASE_URL", base_url.as_str()),
            ("RUST_LOG", "info"),
            ("NO_COLOR", "1"),
        ],
        true,
    )
    .await;
    (server, dir)
}

#[tokio::test]
async fn calls_tokens_and_spend_each_warn_once_at_80_percent() {
    let llm = FakeLlm::start(endless_calculator).await;
    // Each fake call: 127 tokens, $0.044 at these prices. Ten calls allowed;
    // the spend cap ($0.40) is reached after the tenth call's cost is in,
    // and the token cap (1,400) is not.
    let config = r#"
[llm]
model = "fake-model"
[agent]
tools = ["calculator"]
max_iterations = 10
[limits]
task_max_tokens = 1400
principal_daily_usd = 0.40
[prices]
"fake-model" = { input = 1000.0, output = 2000.0, cache_read = 100.0, cache_write = 1250.0 }
"#;
    let (server, _dir) = serve_with(&llm, config).await;

    let reply = server.say("count forever").await;

    let logs = server.stop().await;
    assert!(!reply.is_empty());
    assert_eq!(warnings_for(&logs, "model calls"), 1, "{logs}");
    assert_eq!(warnings_for(&logs, "tokens"), 1, "{logs}");
    assert_eq!(warnings_for(&logs, "daily spend"), 1, "{logs}");
    assert_eq!(warnings_for(&logs, "time"), 0, "{logs}");
    assert!(
        logs.lines()
            .filter(|line| line.contains("task passed 80% of a budget"))
            .all(|line| line.contains("turn{")),
        "each warning carries its turn's span: {logs}"
    );
}

#[tokio::test]
async fn time_warns_at_80_percent_before_the_time_limit_stops_the_task() {
    let llm = FakeLlm::start_with_delay(endless_calculator, Duration::from_millis(300)).await;
    let config = r#"
[agent]
tools = ["calculator"]
[limits]
task_timeout_secs = 1
"#;
    let (server, _dir) = serve_with(&llm, config).await;

    let reply = server.say("count slowly").await;

    let logs = server.stop().await;
    assert_eq!(
        reply,
        "Stopped: this task ran longer than its 1-second limit."
    );
    assert_eq!(warnings_for(&logs, "time"), 1, "{logs}");
}
