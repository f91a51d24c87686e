//! Compaction never destroys: older turns are summarised in the wire view,
//! the raw messages stay stored, the first goal stays pinned, and request
//! size stays bounded however long the conversation.

use serde_json::Value;

use crate::helpers::{FakeLlm, Reply, TestApp, last_user_text};

fn is_summary_request(body: &Value) -> bool {
    body["messages"][0]["content"]
        .as_str()
        .is_some_and(|s| s.starts_with("You compress conversations"))
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

    let requests: Vec<(usize, Value)> = llm
        .requests()
        .iter()
        .map(|r| (r.body.len(), r.json()))
        .filter(|(_, body)| !is_summary_request(body))
        .collect();
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
