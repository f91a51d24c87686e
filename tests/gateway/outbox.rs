//! Replies go through the outbox to the platform's sender: retried on rate
//! limits, delivered once, marked sent with the platform's id; typing shown
//! while the turn runs. Also the service's gating and deduplication, as an
//! adapter sees them through `InboundSink`.

use std::sync::Arc;
use std::time::Duration;

use switchboard_contract::{
    ChatKind, EventId, InboundMessage, InboundSink, PlatformSender, Sender, Submitted, UserId,
};
use switchboard_test_support::eventually;
use switchboard_test_support::inbound::message;
use switchboard_test_support::sender::RecordingSender;

use crate::helpers::{FakeLlm, Reply, TestApp, last_user_text, session_id};

/// `hello <event>` from Alice in `chat-9`, as platform message `pm-<event>`.
fn inbound(event: &str, kind: ChatKind, mentions_bot: bool, is_bot: bool) -> InboundMessage {
    let base = message("alice", "chat-9", kind, &format!("hello {event}"));
    InboundMessage {
        event_id: EventId::parse(event).expect("id"),
        sender: Sender {
            display_name: Some("Alice".to_owned()),
            is_bot,
            ..base.sender.clone()
        },
        mentions_bot,
        message_id: Some(format!("pm-{event}")),
        ..base
    }
}

async fn sent_rows(app: &TestApp) -> Vec<(String, Option<String>, String)> {
    sqlx::query_as::<_, (String, Option<String>, String)>(
        "SELECT status, platform_message_id, reply_to FROM outbox ORDER BY id",
    )
    .fetch_all(&mut *app.gateway.store.conn().await.expect("conn"))
    .await
    .expect("rows")
}

async fn wait_for_sent(app: &TestApp, count: usize) {
    let what = format!("{count} replies delivered");
    eventually(&what, || async {
        let rows = sent_rows(app).await;
        rows.iter()
            .filter(|(status, _, _)| status == "sent")
            .count()
            >= count
    })
    .await;
}

#[tokio::test]
async fn a_rate_limited_reply_is_delivered_once_and_marked_sent() {
    let llm = FakeLlm::start_with_delay(
        |body| Reply::Text(format!("echo: {}", last_user_text(body))),
        Duration::from_millis(120),
    )
    .await;
    let app = TestApp::spawn(&llm).await;
    let sender = Arc::new(
        RecordingSender::new()
            .rate_limiting_the_first_attempt()
            .typing_every(Duration::from_millis(20)),
    );
    app.gateway
        .service
        .runner()
        .register_sender("fake", Arc::clone(&sender) as Arc<dyn PlatformSender>);
    let sink: &dyn InboundSink = app.gateway.service.as_ref();

    let submitted = sink
        .submit(inbound("e1", ChatKind::Direct, true, false))
        .await
        .expect("submitted");
    wait_for_sent(&app, 1).await;

    assert_eq!(submitted, Submitted::Accepted);
    let attempts = sender.attempts();
    assert_eq!(attempts.len(), 2, "one 429, one success");
    assert_eq!(attempts[0], attempts[1], "the retry is the same message");
    assert_eq!(attempts[1].text, "echo: hello e1");
    assert_eq!(attempts[1].reply_to.as_deref(), Some("pm-e1"));
    assert_eq!(attempts[1].chat.as_str(), "chat-9");
    let rows = sent_rows(&app).await;
    assert_eq!(
        rows,
        [("sent".to_owned(), Some("m2".to_owned()), "pm-e1".to_owned())]
    );
    assert!(
        sender.typing().len() >= 2,
        "typing repeated while the model worked"
    );
    assert_eq!(attempts_of(&app).await, [2], "both sends counted");
    app.stop().await;
}

async fn attempts_of(app: &TestApp) -> Vec<i64> {
    sqlx::query_scalar("SELECT attempts FROM outbox ORDER BY id")
        .fetch_all(&mut *app.gateway.store.conn().await.expect("conn"))
        .await
        .expect("rows")
}

#[tokio::test]
async fn a_long_rate_limit_defers_the_reply_without_holding_up_the_session() {
    let llm = FakeLlm::start(|body| Reply::Text(format!("echo: {}", last_user_text(body)))).await;
    let app = TestApp::spawn(&llm).await;
    let sender = Arc::new(
        RecordingSender::new().rate_limiting_the_first_attempt_for(Duration::from_secs(3600)),
    );
    let runner = app.gateway.service.runner();
    runner.register_sender("fake", Arc::clone(&sender) as Arc<dyn PlatformSender>);
    let sink: &dyn InboundSink = app.gateway.service.as_ref();

    sink.submit(inbound("e1", ChatKind::Direct, true, false))
        .await
        .expect("submitted");
    // The worker does not sit out the hour: the session's next message is
    // answered meanwhile.
    sink.submit(inbound("e2", ChatKind::Direct, true, false))
        .await
        .expect("submitted");
    wait_for_sent(&app, 1).await;

    let rows = sent_rows(&app).await;
    assert_eq!(
        rows[0].0, "pending",
        "the first reply waits out its rate limit"
    );
    assert_eq!(attempts_of(&app).await, [1, 1]);
    let texts: Vec<String> = sender.attempts().iter().map(|m| m.text.clone()).collect();
    assert_eq!(texts, ["echo: hello e1", "echo: hello e2"]);
    // Claimed until the platform's time: no sweep sends it earlier.
    let (_, replies) = runner.sweep().await.expect("swept");
    assert_eq!(replies, 0, "the deferred reply is not due");
    let now_ms = app.gateway.store.database_now_ms().await.expect("clock");
    let expires: i64 =
        sqlx::query_scalar("SELECT claim_expires_at FROM outbox ORDER BY id LIMIT 1")
            .fetch_one(&mut *app.gateway.store.conn().await.expect("conn"))
            .await
            .expect("claim");
    assert!(expires > now_ms + 3_500_000, "claimed for the hour asked");

    // Once the hour has passed (moved back here), a sweep sends it, once.
    sqlx::query("UPDATE outbox SET claim_expires_at = 1 WHERE status = 'pending'")
        .execute(&mut *app.gateway.store.conn().await.expect("conn"))
        .await
        .expect("expired");
    let (_, replies) = runner.sweep().await.expect("swept");
    assert_eq!(replies, 1);
    wait_for_sent(&app, 2).await;
    assert_eq!(sender.attempts().len(), 3);
    assert_eq!(attempts_of(&app).await, [2, 1]);
    app.stop().await;
}

#[tokio::test]
async fn a_redelivered_event_starts_no_second_turn() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;
    let sender = Arc::new(RecordingSender::new().typing_every(Duration::from_millis(20)));
    app.gateway
        .service
        .runner()
        .register_sender("fake", Arc::clone(&sender) as Arc<dyn PlatformSender>);
    let sink: &dyn InboundSink = app.gateway.service.as_ref();

    let first = sink
        .submit(inbound("e7", ChatKind::Direct, true, false))
        .await
        .expect("ok");
    wait_for_sent(&app, 1).await;
    let again = sink
        .submit(inbound("e7", ChatKind::Direct, true, false))
        .await
        .expect("ok");
    let third = sink
        .submit(inbound("e7", ChatKind::Direct, true, false))
        .await
        .expect("ok");

    // A later message in the same chat: the chat's messages are answered in
    // order, so its reply comes after any second turn for the first.
    let later = sink
        .submit(inbound("e8", ChatKind::Direct, true, false))
        .await
        .expect("ok");
    wait_for_sent(&app, 2).await;

    assert_eq!(first, Submitted::Accepted);
    assert_eq!(again, Submitted::Duplicate);
    assert_eq!(third, Submitted::Duplicate);
    assert_eq!(later, Submitted::Accepted);
    let asked: Vec<String> = llm
        .requests()
        .iter()
        .map(|request| last_user_text(&request.json()))
        .collect();
    assert_eq!(asked, ["hello e7", "hello e8"], "one turn per event");
    let replies: Vec<String> = sender
        .attempts()
        .iter()
        .map(|attempt| attempt.text.clone())
        .collect();
    assert_eq!(replies, ["echo: hello e7", "echo: hello e8"]);
    app.stop().await;
}

#[tokio::test]
async fn group_messages_that_do_not_address_the_bot_and_bot_messages_are_ignored() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;
    let sink: &dyn InboundSink = app.gateway.service.as_ref();

    let unaddressed = sink
        .submit(inbound("g1", ChatKind::Group, false, false))
        .await
        .expect("ok");
    let from_bot = sink
        .submit(inbound("g2", ChatKind::Direct, true, true))
        .await
        .expect("ok");
    let addressed = sink
        .submit(inbound("g3", ChatKind::Group, true, false))
        .await
        .expect("ok");

    assert_eq!(unaddressed, Submitted::Ignored);
    assert_eq!(from_bot, Submitted::Ignored);
    assert_eq!(addressed, Submitted::Accepted);
    let events: Vec<String> = sqlx::query_scalar("SELECT event_id FROM inbound")
        .fetch_all(&mut *app.gateway.store.conn().await.expect("conn"))
        .await
        .expect("rows");
    assert_eq!(events, ["g3"], "ignored messages store nothing");
    app.stop().await;
}

#[tokio::test]
async fn group_sessions_can_be_per_user() {
    use switchboard::session::settings::GroupSessions;
    let llm = FakeLlm::echo().await;
    let app =
        TestApp::spawn_with(&llm, |s| s.sessions.group_sessions = GroupSessions::PerUser).await;
    let sink: &dyn InboundSink = app.gateway.service.as_ref();
    let mut bob = inbound("p2", ChatKind::Group, true, false);
    bob.sender.id = UserId::parse("bob").expect("id");

    sink.submit(inbound("p1", ChatKind::Group, true, false))
        .await
        .expect("ok");
    sink.submit(bob).await.expect("ok");

    assert_eq!(app.count("sessions").await, 2);
    app.stop().await;
}

#[tokio::test]
async fn dedup_records_are_kept_72_hours_then_pruned_without_touching_transcripts() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;
    let (old_session, _) = app.say(None, "long ago").await;
    let store = &app.gateway.store;
    for sql in [
        "UPDATE inbound SET received_at = 1000",
        "UPDATE outbox SET created_at = 1000",
    ] {
        sqlx::query(sql)
            .execute(&mut *store.conn().await.expect("conn"))
            .await
            .expect("backdate");
    }
    app.say(None, "just now").await;
    let cutoff = switchboard::domain::now_ms() - 72 * 3_600_000;

    let pruned = store
        .inbound()
        .prune_finished(cutoff)
        .await
        .expect("pruned");

    assert_eq!(pruned, 1);
    assert_eq!(app.count("inbound").await, 1, "the recent record stays");
    assert_eq!(app.count("outbox").await, 1);
    let history = store
        .transcript()
        .wire_history(
            &session_id(&old_session),
            &switchboard::domain::Scope::top(),
        )
        .await
        .expect("history");
    assert_eq!(history.len(), 2, "the transcript stays");
    app.stop().await;
}
