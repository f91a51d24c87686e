//! Inbound over the Events API, and the replies that go back: DMs,
//! channel mentions, threads, retries.

use serde_json::{Value, json};
use switchboard_contract::ChatKind;
use switchboard_test_support::slack::{
    BOT_USER_ID, OTHER_TEAM_ID, TEAM_ID, USER_ID, USER_NAME, app_mention, event_callback,
    message_event, url_verification,
};

use crate::helpers::{RecordingSink, eventually, reply_to, settings, spawn_app, spawn_with};

const TS: &str = "1700000500.000100";

#[tokio::test]
async fn url_verification_echoes_the_challenge() {
    let app = spawn_app().await;

    let delivered = app
        .delivery
        .event(
            &app.events_url(),
            &url_verification("3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"),
        )
        .await;

    assert_eq!(delivered.statuses, [200]);
    let body: Value = serde_json::from_str(&delivered.body).unwrap();
    assert_eq!(
        body,
        json!({"challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"})
    );
    assert!(app.sink.submissions().is_empty());
}

#[tokio::test]
async fn a_dm_goes_round_trip_through_the_sink_and_the_sender() {
    let app = spawn_app().await;

    let delivered = app
        .deliver(message_event("D0DM", "im", "what is 17*23?", TS))
        .await;

    assert_eq!(delivered.statuses, [200]);
    let message = app.only_submission().await;
    assert_eq!(message.platform.as_str(), "slack");
    assert_eq!(message.account.as_str(), TEAM_ID);
    assert_eq!(message.chat.as_str(), "D0DM");
    assert_eq!(message.chat_kind, ChatKind::Direct);
    assert_eq!(message.thread, None, "DMs are not threaded");
    assert_eq!(message.text, "what is 17*23?");
    assert!(message.mentions_bot);
    assert_eq!(message.sender.id.as_str(), USER_ID);
    assert_eq!(message.sender.display_name.as_deref(), Some(USER_NAME));
    assert_eq!(message.event_id.as_str(), format!("D0DM:{TS}"));
    assert_eq!(message.message_id.as_deref(), Some(TS));

    let receipt = app
        .sender
        .send(&reply_to(&message, "17 × 23 = **391**", "sb-1-1"))
        .await
        .unwrap();

    let posted = app.fake.posted_in("D0DM");
    assert_eq!(posted.len(), 1);
    assert_eq!(posted[0].text, "17 × 23 = *391*");
    assert_eq!(posted[0].thread_ts, None);
    assert_eq!(receipt.message_ids, [posted[0].ts.clone()]);
    let call = &app.fake.calls_to("chat.postMessage")[0];
    assert_eq!(call.args["mrkdwn"], true);
    assert_eq!(
        call.authorization.as_deref(),
        Some(format!("Bearer {}", switchboard_test_support::slack::BOT_TOKEN).as_str())
    );
}

#[tokio::test]
async fn display_names_are_asked_once() {
    let app = spawn_app().await;

    app.deliver(message_event("D0DM", "im", "one", "1700000500.000001"))
        .await;
    app.deliver(message_event("D0DM", "im", "two", "1700000500.000002"))
        .await;

    eventually("two submissions", || async {
        app.sink.submissions().len() == 2
    })
    .await;
    assert!(
        app.sink
            .submissions()
            .iter()
            .all(|m| m.sender.display_name.as_deref() == Some(USER_NAME))
    );
    assert_eq!(app.fake.calls_to("users.info").len(), 1);
}

#[tokio::test]
async fn a_channel_message_without_a_mention_is_not_submitted() {
    let app = spawn_app().await;

    let delivered = app
        .deliver(message_event("C0GENERAL", "channel", "lunch anyone?", TS))
        .await;

    assert_eq!(delivered.statuses, [200], "acknowledged all the same");
    assert!(app.sink.submissions().is_empty());
}

#[tokio::test]
async fn app_mention_and_its_message_event_are_answered_once() {
    let app = spawn_app().await;
    let text = format!("<@{BOT_USER_ID}> what is 17*23?");

    let first = app
        .deliver(message_event("C0GENERAL", "channel", &text, TS))
        .await;
    let second = app.deliver(app_mention("C0GENERAL", &text, TS)).await;

    assert_eq!((first.statuses, second.statuses), (vec![200], vec![200]));
    let message = app.only_submission().await;
    assert_eq!(message.event_id.as_str(), format!("C0GENERAL:{TS}"));
    assert_eq!(message.text, "what is 17*23?", "the mention is stripped");
    assert_eq!(message.chat_kind, ChatKind::Group);
    assert!(message.mentions_bot);
}

#[tokio::test]
async fn another_process_submits_the_mentions_duplicate_with_the_same_event_id() {
    // Two instances behind one URL: each gets one of the two events, and
    // the core's dedup by event id drops the second.
    let app = spawn_app().await;
    let other = crate::helpers::spawn_with(
        switchboard_test_support::slack::FakeSlack::start().await,
        crate::helpers::settings(&app.fake),
        RecordingSink::default(),
    )
    .await;
    let text = format!("<@{BOT_USER_ID}> hi");

    app.deliver(message_event("C0GENERAL", "channel", &text, TS))
        .await;
    other.deliver(app_mention("C0GENERAL", &text, TS)).await;

    let here = app.only_submission().await;
    let there = other.only_submission().await;
    assert_eq!(here.event_id, there.event_id);
}

#[tokio::test]
async fn a_channel_mention_starts_a_thread_and_the_reply_goes_there() {
    let app = spawn_app().await;

    app.deliver(app_mention(
        "C0GENERAL",
        &format!("<@{BOT_USER_ID}> hi"),
        TS,
    ))
    .await;
    let message = app.only_submission().await;
    assert_eq!(message.thread.as_ref().map(|t| t.as_str()), Some(TS));

    app.sender
        .send(&reply_to(&message, "Hello!", "sb-1-2"))
        .await
        .unwrap();

    let posted = app.fake.posted_in("C0GENERAL");
    assert_eq!(posted[0].thread_ts.as_deref(), Some(TS));
}

#[tokio::test]
async fn a_mention_inside_a_thread_is_answered_in_that_thread() {
    let app = spawn_app().await;
    let mut event = message_event(
        "C0GENERAL",
        "channel",
        &format!("<@{BOT_USER_ID}> and now?"),
        TS,
    );
    event["thread_ts"] = json!("1700000400.000001");

    app.deliver(event).await;
    let message = app.only_submission().await;
    app.sender
        .send(&reply_to(&message, "Now this.", "sb-1-3"))
        .await
        .unwrap();

    assert_eq!(
        message.thread.as_ref().map(|t| t.as_str()),
        Some("1700000400.000001")
    );
    assert_eq!(
        app.fake.posted_in("C0GENERAL")[0].thread_ts.as_deref(),
        Some("1700000400.000001")
    );
}

#[tokio::test]
async fn without_thread_replies_a_channel_mention_is_answered_in_the_channel() {
    let fake = switchboard_test_support::slack::FakeSlack::start().await;
    let mut settings = settings(&fake);
    settings.thread_replies = false;
    let app = spawn_with(fake, settings, RecordingSink::default()).await;

    app.deliver(app_mention(
        "C0GENERAL",
        &format!("<@{BOT_USER_ID}> hi"),
        TS,
    ))
    .await;
    let message = app.only_submission().await;
    app.sender
        .send(&reply_to(&message, "Hi.", "sb-1-4"))
        .await
        .unwrap();

    assert_eq!(message.thread, None);
    assert_eq!(app.fake.posted_in("C0GENERAL")[0].thread_ts, None);
}

#[tokio::test]
async fn a_free_response_channel_needs_no_mention() {
    let fake = switchboard_test_support::slack::FakeSlack::start().await;
    let mut settings = settings(&fake);
    settings.free_response_channels = vec!["C0HELP".to_owned()];
    let app = spawn_with(fake, settings, RecordingSink::default()).await;

    app.deliver(message_event(
        "C0HELP",
        "channel",
        "how do I reset my password?",
        TS,
    ))
    .await;

    let message = app.only_submission().await;
    assert!(message.mentions_bot);
    assert_eq!(message.text, "how do I reset my password?");
}

#[tokio::test]
async fn bots_edits_and_deletions_are_acknowledged_and_dropped() {
    let app = spawn_app().await;
    let mut own = message_event("D0DM", "im", "my own reply", TS);
    own["user"] = json!(BOT_USER_ID);
    let mut bot = message_event("D0DM", "im", "beep", TS);
    bot["bot_id"] = json!("B0OTHER");
    bot["subtype"] = json!("bot_message");
    let edit = json!({"type": "message", "subtype": "message_changed", "channel": "D0DM",
                      "channel_type": "im", "hidden": true, "ts": TS,
                      "message": {"type": "message", "user": USER_ID, "text": "edited", "ts": "1.1"}});
    let deletion = json!({"type": "message", "subtype": "message_deleted", "channel": "D0DM",
                          "channel_type": "im", "hidden": true, "ts": TS, "deleted_ts": "1.1"});

    for event in [own, bot, edit, deletion] {
        assert_eq!(app.deliver(event).await.statuses, [200]);
    }

    assert!(app.sink.submissions().is_empty());
}

#[tokio::test]
async fn an_event_the_core_could_not_record_is_retried_with_the_same_event_id() {
    let app = spawn_app().await;
    app.sink.fail_next(1);

    let delivered = app.deliver(message_event("D0DM", "im", "hello", TS)).await;

    assert_eq!(
        delivered.statuses,
        [503, 200],
        "Slack retries after the 5xx"
    );
    let submissions = app.sink.submissions();
    assert_eq!(submissions.len(), 2);
    assert_eq!(submissions[0].event_id, submissions[1].event_id);
    assert_eq!(app.sink.recorded(), 1);
}

#[tokio::test]
async fn a_retry_of_a_recorded_event_is_a_duplicate_for_the_core() {
    let app = spawn_app().await;
    let body = event_callback(TEAM_ID, message_event("D0DM", "im", "hello", TS));

    app.delivery.event(&app.events_url(), &body).await;
    let (status, _) = app
        .delivery
        .post(
            &app.events_url(),
            body.to_string().into_bytes(),
            "application/json",
            switchboard_test_support::slack::unix_now(),
            &[
                ("x-slack-retry-num", "1".to_owned()),
                ("x-slack-retry-reason", "http_timeout".to_owned()),
            ],
        )
        .await;

    assert_eq!(status, 200);
    assert_eq!(app.sink.submissions().len(), 1, "not submitted again");
    assert_eq!(app.sink.recorded(), 1);
}

#[tokio::test]
async fn a_core_too_slow_to_record_gets_a_503_and_the_retry_is_deduplicated() {
    let fake = switchboard_test_support::slack::FakeSlack::start().await;
    let mut settings = settings(&fake);
    settings.ack_timeout_ms = 100;
    let app = spawn_with(fake, settings, RecordingSink::blocked()).await;
    let body = event_callback(TEAM_ID, message_event("D0DM", "im", "hello", TS));
    let mut delivery = switchboard_test_support::slack::Delivery::new(
        switchboard_test_support::slack::SIGNING_SECRET,
    );
    delivery.attempts = 1;

    let first = delivery.event(&app.events_url(), &body).await;
    app.sink.unblock();
    eventually("the slow event recorded", || async {
        app.sink.recorded() == 1
    })
    .await;
    let retry = delivery.event(&app.events_url(), &body).await;

    assert_eq!(first.statuses, [503]);
    assert_eq!(retry.statuses, [200]);
    assert_eq!(app.sink.recorded(), 1);
}

#[tokio::test]
async fn an_event_of_an_unknown_workspace_is_acknowledged_and_dropped() {
    let app = spawn_app().await;
    let body = event_callback(OTHER_TEAM_ID, message_event("D0DM", "im", "hello", TS));

    let delivered = app.delivery.event(&app.events_url(), &body).await;

    assert_eq!(delivered.statuses, [200]);
    assert!(app.sink.submissions().is_empty());
}
