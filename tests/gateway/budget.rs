//! One wallet per task: however deep and wide the delegation, a task's
//! model calls never exceed its budget, and the parent always gets to finish.

use serde_json::Value;

use crate::helpers::{FakeLlm, Reply, TestApp, same_calculation};

fn offers(body: &Value, tool: &str) -> bool {
    body["tools"]
        .as_array()
        .is_some_and(|tools| tools.iter().any(|t| t["function"]["name"] == tool))
}

/// The budget's last call: its tools kept, their use barred.
fn is_final(body: &Value) -> bool {
    body["tool_choice"] == "none"
}

fn is_sub_agent(body: &Value) -> bool {
    body["messages"][0]["content"]
        .as_str()
        .is_some_and(|s| s.starts_with("You are a sub-agent"))
}

/// A model that never stops on its own: it delegates twice in parallel
/// whenever it can, else it calls the calculator forever; only a request
/// barring tools (the final summary) gets text.
fn runaway(body: &Value) -> Reply {
    if is_final(body) {
        return Reply::Text("summary".to_owned());
    }
    if offers(body, "delegate") {
        let n = body["messages"].as_array().map_or(0, Vec::len);
        return Reply::Tools(vec![
            (
                format!("d{n}a"),
                "delegate".to_owned(),
                r#"{"task":"dig deeper"}"#.to_owned(),
            ),
            (
                format!("d{n}b"),
                "delegate".to_owned(),
                r#"{"task":"dig wider"}"#.to_owned(),
            ),
        ]);
    }
    let n = body["messages"].as_array().map_or(0, Vec::len);
    Reply::Tools(vec![(
        format!("c{n}"),
        "calculator".to_owned(),
        r#"{"expression":"1+1"}"#.to_owned(),
    )])
}

#[tokio::test]
async fn deep_and_wide_delegation_never_exceeds_the_task_budget() {
    let llm = FakeLlm::start(runaway).await;
    let app = TestApp::spawn_with(&llm, |s| {
        s.agent.max_iterations = std::num::NonZero::new(40).unwrap();
        s.limits.repeat_limit = 0;
    })
    .await;

    let (_, reply) = app.say(None, "research everything").await;

    let requests: Vec<Value> = llm.requests().iter().map(|r| r.json()).collect();
    assert!(requests.len() <= 40, "{} model calls", requests.len());
    assert!(
        requests.len() >= 10,
        "delegation happened: {}",
        requests.len()
    );
    assert!(requests.iter().any(is_sub_agent));
    // Depth is capped at 2: grandchildren are not offered `delegate`.
    let depth_two = requests
        .iter()
        .filter(|r| is_sub_agent(r) && !is_final(r) && !offers(r, "delegate"))
        .count();
    assert!(depth_two > 0, "grandchildren ran");
    // The parent was not starved: its final summary, tools kept but barred,
    // was the reply.
    assert_eq!(reply, "summary");
    let last = requests.last().expect("request");
    assert!(!is_sub_agent(last));
    assert!(is_final(last) && offers(last, "delegate"));
    let note = last["messages"]
        .as_array()
        .and_then(|m| m.last())
        .expect("note");
    assert!(
        note["content"]
            .as_str()
            .is_some_and(|t| t.contains("budget"))
    );
    app.stop().await;
}

#[tokio::test]
async fn a_tool_loop_without_delegation_stops_at_the_budget_with_a_summary() {
    let llm = FakeLlm::start(|body| {
        if is_final(body) {
            Reply::Text("here is what I found".to_owned())
        } else {
            same_calculation(body)
        }
    })
    .await;
    let app = TestApp::spawn_with(&llm, |s| {
        s.agent.max_iterations = std::num::NonZero::new(5).unwrap();
        s.limits.repeat_limit = 0;
    })
    .await;

    let (session, reply) = app.say(None, "loop forever").await;

    assert_eq!(reply, "here is what I found");
    assert_eq!(llm.requests().len(), 5);
    let (_, next) = app.say(Some(&session), "and now?").await;
    assert_eq!(
        next, "here is what I found",
        "a new message gets a fresh wallet"
    );
    assert_eq!(llm.requests().len(), 10);
    app.stop().await;
}
