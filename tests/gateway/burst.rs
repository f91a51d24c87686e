//! Bursts (`sessions.burst_window_ms`): messages one sender sends within the
//! window, while no turn runs, become one turn, through a real adapter (the
//! fake Telegram); every message is stored once, the later ones marked
//! merged into the first. HTTP API requests are never held or merged.

use switchboard_test_support::telegram::{BOT_USERNAME, FakeTelegram, TgUser};

use crate::helpers::{FakeLlm, TestApp, telegram_settings};

const ADA: TgUser = TgUser {
    id: 777,
    first_name: "Ada",
};
const BOB: TgUser = TgUser {
    id: 888,
    first_name: "Bob",
};
const GROUP: i64 = -100_456;

/// Wide enough that a handful of messages queued at once are all recorded
/// within it, even on a loaded machine.
const WINDOW_MS: u64 = 2_000;

async fn gateway(llm: &FakeLlm, telegram: &FakeTelegram, window_ms: u64) -> TestApp {
    TestApp::spawn_with(llm, |s| {
        s.telegram = Some(telegram_settings(telegram));
        s.sessions.burst_window = std::time::Duration::from_millis(window_ms);
    })
    .await
}

/// The last user entry of each model request, in order.
fn asked(llm: &FakeLlm) -> Vec<String> {
    llm.requests()
        .iter()
        .map(|request| {
            request.json()["messages"]
                .as_array()
                .expect("messages")
                .iter()
                .rev()
                .find(|m| m["role"] == "user")
                .and_then(|m| m["content"].as_str())
                .expect("a user entry")
                .to_owned()
        })
        .collect()
}

/// Every inbound row: (id, text, status, outcome, burst_of), oldest first.
async fn inbound_rows(app: &TestApp) -> Vec<(i64, String, String, Option<String>, Option<i64>)> {
    sqlx::query_as("SELECT id, text, status, outcome, burst_of FROM inbound ORDER BY id")
        .fetch_all(&mut *app.gateway.store.conn().await.expect("conn"))
        .await
        .expect("rows")
}

#[tokio::test]
async fn a_five_message_burst_is_one_turn_and_a_later_message_another() {
    let telegram = FakeTelegram::start().await;
    let llm = FakeLlm::echo().await;
    let app = gateway(&llm, &telegram, WINDOW_MS).await;
    let texts = [
        "so",
        "about the trip",
        "to Lisbon",
        "in May",
        "what to pack?",
    ];

    for text in texts {
        telegram.dm(ADA, text);
    }
    telegram
        .wait_for("the reply", || !telegram.sent().is_empty())
        .await;
    telegram.settled().await;

    assert_eq!(asked(&llm), [texts.join("\n")], "one model request");
    let sent = telegram.sent();
    assert_eq!(sent.len(), 1, "one reply: {sent:?}");
    assert!(sent[0].text.contains("what to pack?"), "{sent:?}");
    let rows = inbound_rows(&app).await;
    assert_eq!(rows.len(), 5, "each message stored once: {rows:?}");
    let first = rows[0].0;
    assert_eq!(rows[0].1, "so", "the first keeps its own text: {rows:?}");
    assert_eq!(rows[0].2, "done");
    assert_ne!(rows[0].3.as_deref(), Some("merged"));
    assert_eq!(rows[0].4, None);
    for (row, text) in rows[1..].iter().zip(&texts[1..]) {
        assert_eq!(row.1, *text, "{rows:?}");
        assert_eq!(
            (row.2.as_str(), row.3.as_deref(), row.4),
            ("done", Some("merged"), Some(first)),
            "{rows:?}"
        );
    }
    assert_eq!(app.count("outbox").await, 1);

    // The reply came at least a window after the burst began: a message now
    // is a turn of its own.
    let reply = telegram.ask(ADA, "and shoes?").await;
    assert!(reply.contains("and shoes?"), "{reply}");
    assert_eq!(asked(&llm).len(), 2);
    assert_eq!(asked(&llm)[1], "and shoes?");
    let rows = inbound_rows(&app).await;
    assert_eq!(rows.len(), 6);
    assert_eq!((rows[5].2.as_str(), rows[5].4), ("done", None), "{rows:?}");
    app.stop().await;
}

#[tokio::test]
async fn another_senders_message_in_a_group_is_not_merged_and_ends_the_burst() {
    let telegram = FakeTelegram::start().await;
    let llm = FakeLlm::echo().await;
    let app = gateway(&llm, &telegram, WINDOW_MS).await;
    let say = |user, text: &str| telegram.group(GROUP, user, &format!("@{BOT_USERNAME} {text}"));

    say(ADA, "pick a number");
    say(ADA, "between 1 and 10");
    say(BOB, "make it 42");
    say(ADA, "and tell me why");
    telegram
        .wait_for("three replies", || telegram.sent().len() >= 3)
        .await;
    telegram.settled().await;

    let asked = asked(&llm);
    assert_eq!(asked.len(), 3, "{asked:?}");
    assert!(asked[0].starts_with("[Ada] "), "{asked:?}");
    let pick = asked[0].find("pick a number").expect("first text");
    let between = asked[0].find("between 1 and 10").expect("second text");
    assert!(pick < between, "{asked:?}");
    assert!(
        !asked[0].contains("42"),
        "Bob's message is not Ada's: {asked:?}"
    );
    assert!(!asked[0].contains("tell me why"), "{asked:?}");
    assert!(asked[1].starts_with("[Bob] ") && asked[1].ends_with("make it 42"));
    assert!(asked[2].starts_with("[Ada] ") && asked[2].ends_with("and tell me why"));
    let merged: Vec<Option<i64>> = inbound_rows(&app).await.iter().map(|r| r.4).collect();
    let first = inbound_rows(&app).await[0].0;
    assert_eq!(merged, [None, Some(first), None, None]);
    assert_eq!(telegram.sent().len(), 3);
    app.stop().await;
}

#[tokio::test]
async fn a_window_of_zero_runs_one_turn_per_message() {
    let telegram = FakeTelegram::start().await;
    let llm = FakeLlm::echo().await;
    let app = gateway(&llm, &telegram, 0).await;

    for text in ["one", "two", "three"] {
        telegram.dm(ADA, text);
    }
    telegram
        .wait_for("three replies", || telegram.sent().len() >= 3)
        .await;
    telegram.settled().await;

    assert_eq!(asked(&llm), ["one", "two", "three"]);
    let rows = inbound_rows(&app).await;
    assert!(
        rows.iter().all(|r| r.2 == "done" && r.4.is_none()),
        "{rows:?}"
    );
    app.stop().await;
}

#[tokio::test]
async fn api_requests_are_never_held_or_merged() {
    let llm = FakeLlm::echo().await;
    let telegram = FakeTelegram::start().await;
    let app = gateway(&llm, &telegram, WINDOW_MS).await;
    // The user's own conversation, so that both requests share a session.
    let (session, _) = app.say_as("ann", "hello").await;

    let (first, second) = tokio::join!(
        app.say_as("ann", "what is"),
        app.say_as("ann", "two plus two")
    );

    assert_eq!(first.0, session);
    assert_eq!(second.0, session);
    // An API caller sends whole messages and waits on each: each is a turn
    // of its own, answered with its own reply.
    assert_ne!(first.1, second.1);
    assert!(first.1.contains("what is"), "{first:?}");
    assert!(second.1.contains("two plus two"), "{second:?}");
    assert_eq!(asked(&llm).len(), 3);
    let rows = inbound_rows(&app).await;
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert!(
        rows.iter().all(|r| r.3.as_deref() != Some("merged")),
        "{rows:?}"
    );
    app.stop().await;
}
