//! Compaction never destroys: older turns are summarised in the wire view,
//! the raw messages stay stored, the first goal stays pinned, and request
//! size stays bounded however long the conversation.

use serde_json::Value;

use crate::helpers::{FakeLlm, Reply, TestApp, last_user_text};

fn is_summary_request(body: &Value) -> bool {
    last_user_text(body).starts_with("[switchboard] Compaction")
}

/// The requests of the conversation itself (summarisation calls left out):
/// each body's size and JSON.
fn conversation_requests(llm: &FakeLlm) -> Vec<(usize, Value)> {
    llm.requests()
        .iter()
        .map(|r| (r.body.len(), r.json()))
        .filter(|(_, body)| !is_summary_request(body))
        .collect()
}

fn chatty(body: &Value) -> Reply {
    if is_summary_request(body) {
        Reply::Text("Goal: a long chat. Facts: many turns so far. Open: keep going.".to_owned())
    } else {
        Reply::Text(format!(
            "echo: {} {}",
            last_user_text(body),
            "lorem ipsum ".repeat(20)
        ))
    }
}

#[tokio::test]
async fn a_500_turn_session_stays_bounded_keeps_its_goal_and_deletes_nothing() {
    let llm = FakeLlm::start_counting(chatty).await;
    let app = TestApp::spawn_with(&llm, |s| {
        s.context.window_tokens = 4000;
        s.context.keep_recent_turns = 3;
        s.agent.tools = Vec::new();
    })
    .await;
    let goal = "turn 0: my goal is to plan a trip to Lisbon";

    let (session, _) = app.say(None, goal).await;
    for turn in 1..500 {
        app.say(Some(&session), &format!("turn {turn}: tell me more"))
            .await;
    }

    let requests = conversation_requests(&llm);
    assert_eq!(requests.len(), 500);
    let largest = requests.iter().map(|(size, _)| *size).max().unwrap_or(0);
    // 75% of a 4,000-token window is ~12,000 bytes at 4 bytes a token; one
    // more turn may be added before the next compaction.
    assert!(largest < 16_000, "largest request {largest} bytes");
    let late = requests[400..]
        .iter()
        .map(|(size, _)| *size)
        .max()
        .unwrap_or(0);
    assert!(late <= largest);
    for (_, body) in &requests {
        assert_eq!(
            body["messages"][1]["content"], goal,
            "the goal stays pinned"
        );
    }
    let summaries = llm.requests().len() - 500;
    assert!(summaries >= 10, "{summaries} compactions");
    let last = &requests.last().expect("request").1;
    assert!(
        last.to_string()
            .contains("[Summary of the earlier conversation]")
    );

    let stored: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM messages WHERE session_id = $1")
        .bind(&session)
        .fetch_one(&mut *app.gateway.store.conn().await.expect("conn"))
        .await
        .expect("count");
    assert_eq!(stored, 1000, "every raw message stays stored");
    assert_eq!(
        app.count("compactions").await,
        i64::try_from(summaries).expect("fits")
    );
    app.stop().await;
}

#[tokio::test]
async fn compact_by_hand_summarises_and_the_prefix_is_stable_afterwards() {
    let llm = FakeLlm::start_counting(chatty).await;
    let app = TestApp::spawn(&llm).await;
    let (session, _) = app.say(None, "the goal").await;
    for turn in 1..8 {
        app.say(Some(&session), &format!("turn {turn}")).await;
    }

    let (_, reply) = app.say(Some(&session), "/compact").await;
    app.say(Some(&session), "after one").await;
    app.say(Some(&session), "after two").await;

    assert_eq!(
        reply,
        "Older messages were summarised; the full history stays stored."
    );
    let requests = llm.requests();
    let n = requests.len();
    let before = requests[n - 2].raw_messages();
    let after = requests[n - 1].raw_messages();
    assert!(
        after.starts_with(before.trim_end_matches(']')),
        "prefix stable between compactions"
    );
    let body = requests[n - 1].json();
    assert_eq!(body["messages"][1]["content"], "the goal");
    assert!(
        body["messages"][2]["content"]
            .as_str()
            .is_some_and(|c| c.starts_with("[Summary"))
    );
    app.stop().await;
}

#[tokio::test]
async fn a_short_conversation_is_not_compacted() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;
    let (session, _) = app.say(None, "hi").await;

    let (_, reply) = app.say(Some(&session), "/compact").await;

    assert_eq!(reply, "The conversation is too short to compact.");
    assert_eq!(app.count("compactions").await, 0);
    app.stop().await;
}

/// Every tool call in a request is answered in it, and every result answers
/// a call made before it.
fn calls_and_results_stay_together(body: &Value) -> bool {
    let mut open: Vec<String> = Vec::new();
    for message in body["messages"].as_array().into_iter().flatten() {
        match message["role"].as_str() {
            Some("assistant") => {
                if !open.is_empty() {
                    return false;
                }
                open = message["tool_calls"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|call| call["id"].as_str().map(str::to_owned))
                    .collect();
            }
            Some("tool") => {
                let id = message["tool_call_id"].as_str().unwrap_or_default();
                let Some(index) = open.iter().position(|open| open == id) else {
                    return false;
                };
                open.remove(index);
            }
            _ => {
                if !open.is_empty() {
                    return false;
                }
            }
        }
    }
    open.is_empty()
}

#[tokio::test]
async fn a_long_task_is_compacted_while_it_runs_keeping_its_goal_and_whole_rounds() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    const ROUNDS: usize = 40;
    let calls = std::sync::Arc::new(AtomicUsize::new(0));
    let counter = std::sync::Arc::clone(&calls);
    let llm = FakeLlm::start_counting(move |body| {
        if is_summary_request(body) {
            return Reply::Text("Progress: many sums computed; keep going.".to_owned());
        }
        if last_user_text(body) == "hello" {
            return Reply::Text("hi".to_owned());
        }
        let n = counter.fetch_add(1, Ordering::SeqCst);
        if n >= ROUNDS {
            return Reply::Text("finished".to_owned());
        }
        // ~1.6 KB of arguments per round, so the task alone outgrows the
        // window several times over.
        // Each different, so no-progress detection stays out of the way.
        let expression = format!("{}+{n}", vec!["1"; 400].join("+"));
        Reply::Tools(vec![(
            format!("call{n}"),
            "calculator".to_owned(),
            format!("{{\"expression\":\"{expression}\"}}"),
        )])
    })
    .await;
    let app = TestApp::spawn_with(&llm, |s| {
        s.context.window_tokens = 4000;
        s.context.keep_recent_turns = 2;
        s.agent.tools = vec!["calculator".to_owned()];
    })
    .await;
    let (session, _) = app.say(None, "hello").await;
    let goal = "add up all those ones, again and again";

    let (_, reply) = app.say(Some(&session), goal).await;

    assert_eq!(reply, "finished");
    let requests = conversation_requests(&llm);
    let task: Vec<&(usize, Value)> = requests.iter().skip(1).collect();
    assert_eq!(task.len(), ROUNDS + 1);
    let largest = task.iter().map(|(size, _)| *size).max().unwrap_or(0);
    // 75% of 4,000 tokens is ~12,000 bytes; one round may be added before
    // the next compaction. Uncompacted, the last request would be ~70 KB.
    assert!(largest < 20_000, "largest request {largest} bytes");
    for (_, body) in &task {
        assert_eq!(
            body["messages"][1]["content"], "hello",
            "first message pinned"
        );
        assert!(
            body["messages"]
                .as_array()
                .is_some_and(|m| m.iter().any(|m| m["content"] == goal)),
            "the task's goal stays in every request"
        );
        assert!(calls_and_results_stay_together(body), "{body}");
    }
    let compactions = app.count("compactions").await;
    assert!(
        compactions >= 3,
        "{compactions} compactions during the task"
    );
    let stored: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM messages WHERE session_id = $1")
        .bind(&session)
        .fetch_one(&mut *app.gateway.store.conn().await.expect("conn"))
        .await
        .expect("count");
    let expected = 2 + 1 + 2 * ROUNDS + 1;
    assert_eq!(
        stored,
        i64::try_from(expected).expect("fits"),
        "nothing deleted"
    );
    app.stop().await;
}

#[tokio::test]
async fn a_failed_summary_call_leaves_the_conversation_as_it_was_and_the_next_turn_works() {
    // The summary call fails (a 500 every time it is asked) until the
    // summariser is back; every other call answers.
    let failing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let fail = std::sync::Arc::clone(&failing);
    let llm = FakeLlm::start(move |body| {
        if is_summary_request(body) && fail.load(std::sync::atomic::Ordering::SeqCst) {
            Reply::Status(500, "the summariser is down".to_owned())
        } else {
            chatty(body)
        }
    })
    .await;
    let app = TestApp::spawn_with(&llm, |s| {
        s.context.window_tokens = 1000;
        s.context.keep_recent_turns = 1;
        s.agent.tools = Vec::new();
        s.llm.retry_base = std::time::Duration::from_millis(1);
    })
    .await;
    let (session, _) = app.say(None, "turn 0: the goal").await;
    let mut replies = Vec::new();
    for turn in 1..6 {
        let (_, reply) = app.say(Some(&session), &format!("turn {turn}")).await;
        replies.push(reply);
    }
    let (_, by_hand) = app.say(Some(&session), "/compact").await;

    let summaries = llm
        .requests()
        .iter()
        .filter(|r| is_summary_request(&r.json()))
        .count();
    assert!(summaries >= 1, "compaction was attempted: {summaries}");
    for (turn, reply) in replies.iter().enumerate() {
        assert!(
            reply.starts_with(&format!("echo: turn {}", turn + 1)),
            "each turn answered from the uncompacted history: {reply}"
        );
    }
    assert_eq!(by_hand, "Compaction failed; the conversation is unchanged.");
    assert_eq!(app.count("compactions").await, 0, "nothing half-written");
    let last = conversation_requests(&llm)
        .last()
        .expect("a request")
        .1
        .clone();
    assert!(
        !last
            .to_string()
            .contains("[Summary of the earlier conversation]"),
        "the history was sent whole"
    );
    assert_eq!(last["messages"][1]["content"], "turn 0: the goal");

    // The next turn works; once the summariser is back, compaction does.
    let (_, reply) = app.say(Some(&session), "turn 6").await;
    assert!(reply.starts_with("echo: turn 6"), "{reply}");
    failing.store(false, std::sync::atomic::Ordering::SeqCst);
    let (_, again) = app.say(Some(&session), "/compact").await;
    assert_eq!(
        again,
        "Older messages were summarised; the full history stays stored."
    );
    assert_eq!(app.count("compactions").await, 1);
    app.stop().await;
}
