//! Slack through the whole gateway, against the fake Slack: a DM answered
//! once however often Slack delivers it, channel mentions gated and answered
//! in threads, a long Markdown answer split and rendered, a 429 honoured, a
//! shared image reaching a vision model, a restart between receiving and
//! answering delivering once, Socket Mode reconnecting after a
//! `disconnect`, bad requests refused with nothing stored, and `/readyz`
//! and `/metrics` naming the adapter. The adapter's own parsing, signing
//! and sending details are proven in `adapters/slack/tests`.

use std::future::ready;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Value, json};
use switchboard_slack::{Mode, SlackSettings, TEXT_LIMIT};
use switchboard_test_support::eventually;
use switchboard_test_support::slack::{
    APP_TOKEN, BOT_TOKEN, BOT_USER_ID, Delivery, Failure, FakeSlack, SIGNING_SECRET, TEAM_ID,
    app_mention, event_callback, message_event, unix_now,
};

use crate::helpers::{FakeLlm, Reply, TINY_PNG, TestApp, last_user_content};

const BOT_TOKEN_ENV: &str = "SB_TEST_GW_SLACK_BOT_TOKEN";
const SIGNING_SECRET_ENV: &str = "SB_TEST_GW_SLACK_SIGNING_SECRET";
const APP_TOKEN_ENV: &str = "SB_TEST_GW_SLACK_APP_TOKEN";

/// `[slack]` pointing at `fake`: the Events API, no drafts (each reply is
/// one post), the fake's tokens in this module's variables.
pub(crate) fn slack_settings(fake: &FakeSlack) -> SlackSettings {
    // SAFETY (test): variable names unique to this module, always set to
    // the same values.
    unsafe {
        std::env::set_var(BOT_TOKEN_ENV, BOT_TOKEN);
        std::env::set_var(SIGNING_SECRET_ENV, SIGNING_SECRET);
        std::env::set_var(APP_TOKEN_ENV, APP_TOKEN);
    }
    SlackSettings {
        bot_token_env: BOT_TOKEN_ENV.to_owned(),
        signing_secret_env: SIGNING_SECRET_ENV.to_owned(),
        app_token_env: APP_TOKEN_ENV.to_owned(),
        api_url: fake.api_url(),
        stream_replies: false,
        ..SlackSettings::default()
    }
}

/// A DM from the fake's person in `D0DM0001`.
fn dm(text: &str, ts: &str) -> Value {
    event_callback(TEAM_ID, message_event(DM, "im", text, ts))
}

const DM: &str = "D0DM0001";
const CHANNEL: &str = "C0GENERAL";

/// Delivers `event` to the gateway's events path as Slack does (retrying
/// until acknowledged); the statuses of the attempts.
async fn deliver(app: &TestApp, event: &Value) -> Vec<u16> {
    Delivery::new(SIGNING_SECRET)
        .event(&app.url("/slack/events"), event)
        .await
        .statuses
}

/// Waits until the bot has posted `count` messages in `channel`.
async fn posted(slack: &FakeSlack, channel: &str, count: usize) {
    eventually("the bot's posts", || {
        ready(slack.posted_in(channel).len() >= count)
    })
    .await;
}

#[tokio::test]
async fn a_dm_is_answered_once_in_the_dm_however_often_slack_delivers_it() {
    let slack = FakeSlack::start().await;
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn_with(&llm, |s| s.slack = Some(slack_settings(&slack))).await;
    let event = dm("hello from Slack", "1700000001.000100");

    assert_eq!(deliver(&app, &event).await, [200]);
    posted(&slack, DM, 1).await;
    // Slack retries (X-Slack-Retry-Num) and sends the same event again.
    let retried = Delivery::new(SIGNING_SECRET)
        .post(
            &app.url("/slack/events"),
            event.to_string().into_bytes(),
            "application/json",
            unix_now(),
            &[("x-slack-retry-num", "1".to_owned())],
        )
        .await;
    assert_eq!(retried.0, 200, "a repeat is acknowledged");
    // A later message is a sync point: the repeat was handled before it.
    assert_eq!(
        deliver(&app, &dm("and again", "1700000002.000100")).await,
        [200]
    );
    posted(&slack, DM, 2).await;

    let posts = slack.posted_in(DM);
    assert_eq!(posts.len(), 2, "{posts:?}");
    assert_eq!(posts[0].text, "echo: hello from Slack");
    assert_eq!(posts[0].thread_ts, None, "DM replies are not threaded");
    assert_eq!(posts[1].text, "echo: and again");
    assert_eq!(llm.requests().len(), 2, "one turn per message");
    assert_eq!(app.count("inbound").await, 2);
    let sender: String = sqlx::query_scalar("SELECT sender_id FROM inbound ORDER BY id LIMIT 1")
        .fetch_one(&mut *app.gateway.store.conn().await.expect("conn"))
        .await
        .expect("row");
    assert_eq!(sender, switchboard_test_support::slack::USER_ID);
    app.stop().await;
}

#[tokio::test]
async fn a_channel_message_needs_a_mention_and_is_answered_in_its_thread() {
    let slack = FakeSlack::start().await;
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn_with(&llm, |s| s.slack = Some(slack_settings(&slack))).await;
    let plain = event_callback(
        TEAM_ID,
        message_event(CHANNEL, "channel", "just chatting", "1700000100.000001"),
    );
    let asked = format!("<@{BOT_USER_ID}> what is up?");
    let ts = "1700000101.000001";

    assert_eq!(deliver(&app, &plain).await, [200]);
    // Slack sends a mention twice: as `message` and as `app_mention`.
    let message = event_callback(TEAM_ID, message_event(CHANNEL, "channel", &asked, ts));
    let mention = event_callback(TEAM_ID, app_mention(CHANNEL, &asked, ts));
    assert_eq!(deliver(&app, &message).await, [200]);
    assert_eq!(deliver(&app, &mention).await, [200]);
    posted(&slack, CHANNEL, 1).await;
    // A mention inside that thread continues there.
    let mut follow_up = message_event(
        CHANNEL,
        "channel",
        &format!("<@{BOT_USER_ID}> and now?"),
        "1700000102.000001",
    );
    follow_up["thread_ts"] = json!(ts);
    assert_eq!(
        deliver(&app, &event_callback(TEAM_ID, follow_up)).await,
        [200]
    );
    posted(&slack, CHANNEL, 2).await;

    let posts = slack.posted_in(CHANNEL);
    assert_eq!(posts.len(), 2, "one answer per mention: {posts:?}");
    assert_eq!(
        posts[0].text, "echo: [Alice] what is up?",
        "the mention stripped, the sender named by users.info"
    );
    assert_eq!(posts[0].thread_ts.as_deref(), Some(ts), "a thread under it");
    assert_eq!(posts[1].thread_ts.as_deref(), Some(ts), "the same thread");
    assert_eq!(
        app.count("inbound").await,
        2,
        "the plain message is not stored"
    );
    assert_eq!(
        app.count("sessions").await,
        1,
        "the thread is one conversation"
    );
    app.stop().await;
}

/// A Markdown answer of more than 10,000 characters, with a long fence.
fn long_answer() -> String {
    let prose = "The **quick** brown fox & its _friends_ jump over the lazy dog. ".repeat(45);
    let code = format!(
        "```rust\n{}```",
        "let value = compute(a < b, &c);\n".repeat(140)
    );
    format!("# Answer\n\n{prose}\n\n{code}\n\n{prose}")
}

#[tokio::test]
async fn a_ten_thousand_character_markdown_answer_is_split_and_rendered() {
    let slack = FakeSlack::start().await;
    let answer = long_answer();
    assert!(answer.chars().count() >= 10_000);
    let llm = FakeLlm::start(move |_| Reply::Text(answer.clone())).await;
    let app = TestApp::spawn_with(&llm, |s| s.slack = Some(slack_settings(&slack))).await;

    assert_eq!(
        deliver(&app, &dm("explain", "1700000200.000001")).await,
        [200]
    );
    // Every part is posted once the reply is marked sent.
    eventually("the reply marked sent", || async {
        let sent: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM outbox WHERE status = 'sent'")
            .fetch_one(&mut *app.gateway.store.conn().await.expect("conn"))
            .await
            .expect("count");
        sent == 1
    })
    .await;

    let posts = slack.posted_in(DM);
    assert!(posts.len() >= 3, "{} parts", posts.len());
    for (index, part) in posts.iter().enumerate() {
        assert!(part.text.chars().count() <= TEXT_LIMIT, "part {index}");
        assert_eq!(part.text.matches("```").count() % 2, 0, "part {index}");
        assert!(!part.text.contains("**"), "part {index} is mrkdwn");
    }
    assert!(
        posts[0]
            .text
            .starts_with("*Answer*\n\nThe *quick* brown fox &amp; its")
    );
    assert!(
        posts
            .iter()
            .any(|p| p.text.contains("compute(a &lt; b, &amp;c)"))
    );
    let keys: Vec<&Value> = posts
        .iter()
        .map(|p| &p.metadata["event_payload"]["key"])
        .collect();
    assert!(keys.windows(2).all(|k| k[0] == k[1]), "one reply: {keys:?}");
    app.stop().await;
}

#[tokio::test]
async fn a_429_from_slack_is_honoured_and_the_reply_arrives_once() {
    let slack = FakeSlack::start().await;
    slack.fail_next("chat.postMessage", 1, Failure::RateLimited(1));
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn_with(&llm, |s| s.slack = Some(slack_settings(&slack))).await;

    assert_eq!(
        deliver(&app, &dm("busy?", "1700000300.000001")).await,
        [200]
    );
    posted(&slack, DM, 1).await;

    assert_eq!(
        slack.calls_to("chat.postMessage").len(),
        2,
        "refused, then sent"
    );
    assert_eq!(slack.posted_in(DM).len(), 1);
    assert_eq!(slack.posted_in(DM)[0].text, "echo: busy?");
    assert_eq!(
        llm.requests().len(),
        1,
        "the retry sends, it does not re-run the turn"
    );
    app.stop().await;
}

#[tokio::test]
async fn a_shared_image_reaches_a_vision_model() {
    let slack = FakeSlack::start().await;
    let file = slack.add_file("dot.png", "image/png", TINY_PNG, None);
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn_with(&llm, |s| {
        s.slack = Some(slack_settings(&slack));
        s.media.vision_models = vec!["fake-model".to_owned()];
    })
    .await;
    let mut event = message_event(DM, "im", "what is this?", "1700000400.000001");
    event["subtype"] = json!("file_share");
    event["files"] = json!([file]);

    assert_eq!(deliver(&app, &event_callback(TEAM_ID, event)).await, [200]);
    posted(&slack, DM, 1).await;

    let data_url = format!("data:image/png;base64,{}", BASE64.encode(TINY_PNG));
    assert_eq!(
        last_user_content(&llm.requests()[0].json()),
        json!([
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": data_url}},
        ])
    );
    let downloads = slack.downloads();
    assert_eq!(downloads.len(), 1);
    assert!(downloads[0].authorised, "downloaded with the bot token");
    app.stop().await;
}

#[tokio::test]
async fn a_restart_between_receiving_and_answering_delivers_once() {
    let slack = FakeSlack::start().await;
    let llm = FakeLlm::echo().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = crate::helpers::test_settings(&llm, &dir).await;
    settings.slack = Some(slack_settings(&slack));
    let _database = crate::helpers::hold_database(&settings);
    // The first instance records the message but holds it (a long burst
    // window), then stops before answering.
    let mut holding = settings.clone();
    holding.sessions.burst_window = std::time::Duration::from_secs(600);
    let first = TestApp::start(holding, tempfile::tempdir().expect("tempdir")).await;
    assert_eq!(
        deliver(&first, &dm("still there?", "1700000500.000001")).await,
        [200]
    );
    first.stop().await;
    assert!(slack.posted().is_empty(), "not answered before the restart");

    let second = TestApp::start(settings, tempfile::tempdir().expect("tempdir")).await;
    posted(&slack, DM, 1).await;
    // Slack retries the event at the new instance: a duplicate.
    assert_eq!(
        deliver(&second, &dm("still there?", "1700000500.000001")).await,
        [200]
    );
    assert_eq!(
        deliver(&second, &dm("sync", "1700000501.000001")).await,
        [200]
    );
    posted(&slack, DM, 2).await;

    let posts = slack.posted_in(DM);
    assert_eq!(posts.len(), 2, "{posts:?}");
    assert_eq!(posts[0].text, "echo: still there?");
    assert_eq!(llm.requests().len(), 2);
    second.stop().await;
}

#[tokio::test]
async fn socket_mode_answers_and_reconnects_after_a_disconnect() {
    let slack = FakeSlack::start().await;
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn_with(&llm, |s| {
        let mut settings = slack_settings(&slack);
        settings.mode = Mode::Socket;
        s.slack = Some(settings);
    })
    .await;
    eventually("a Socket Mode connection", || {
        ready(slack.socket_connected())
    })
    .await;

    let first = slack.send_envelope("events_api", dm("over the socket", "1700000600.000001"));
    posted(&slack, DM, 1).await;
    slack.disconnect("refresh_requested");
    eventually("a second connection", || {
        ready(slack.socket_connections() == 2 && slack.socket_connected())
    })
    .await;
    let second = slack.send_envelope("events_api", dm("after the refresh", "1700000601.000001"));
    posted(&slack, DM, 2).await;

    let acks = slack.acks();
    assert!(acks.contains(&first) && acks.contains(&second), "{acks:?}");
    let posts = slack.posted_in(DM);
    assert_eq!(posts[0].text, "echo: over the socket");
    assert_eq!(posts[1].text, "echo: after the refresh");
    let routes = app
        .http
        .post(app.url("/slack/events"))
        .send()
        .await
        .expect("sent");
    assert_eq!(routes.status(), 404, "no HTTP route in Socket Mode");
    app.stop().await;
}

#[tokio::test]
async fn bad_requests_are_refused_and_nothing_is_stored() {
    let slack = FakeSlack::start().await;
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn_with(&llm, |s| s.slack = Some(slack_settings(&slack))).await;
    let url = app.url("/slack/events");
    let body = dm("forged", "1700000700.000001").to_string().into_bytes();
    let json = "application/json";

    let wrong = Delivery::new("not-the-signing-secret")
        .post(&url, body.clone(), json, unix_now(), &[])
        .await;
    let stale = Delivery::new(SIGNING_SECRET)
        .post(&url, body.clone(), json, unix_now() - 600, &[])
        .await;
    let malformed = Delivery::new(SIGNING_SECRET)
        .post(
            &url,
            b"{\"type\": \"event_callback\", ".to_vec(),
            json,
            unix_now(),
            &[],
        )
        .await;
    let oversized = Delivery::new(SIGNING_SECRET)
        .post(&url, vec![b' '; 1024 * 1024 + 1], json, unix_now(), &[])
        .await;

    assert_eq!(wrong.0, 401, "{}", wrong.1);
    assert_eq!(stale.0, 401, "{}", stale.1);
    assert_eq!(malformed.0, 400, "{}", malformed.1);
    assert_eq!(oversized.0, 413);
    for (_, answer) in [&wrong, &stale, &malformed] {
        assert!(!answer.contains(SIGNING_SECRET) && !answer.contains(BOT_TOKEN));
    }
    assert_eq!(app.count("inbound").await, 0);
    assert_eq!(app.count("sessions").await, 0);
    assert!(llm.requests().is_empty());
    assert!(slack.posted().is_empty());
    app.stop().await;
}

#[tokio::test]
async fn readiness_and_metrics_name_the_slack_adapter() {
    let slack = FakeSlack::start().await;
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn_with(&llm, |s| s.slack = Some(slack_settings(&slack))).await;

    let ready = app.http.get(app.url("/readyz")).send().await.expect("sent");
    assert_eq!(ready.status(), 200);
    let body: Value = ready.json().await.expect("JSON");
    let state = &body["adapters"]["slack"]["state"];
    assert!(state == "up" || state == "standby", "{body}");
    let metrics = app
        .http
        .get(app.url("/metrics"))
        .send()
        .await
        .expect("sent");
    let metrics = metrics.text().await.expect("text");
    assert!(
        metrics.contains("adapter=\"slack\""),
        "{}",
        metrics
            .lines()
            .filter(|l| l.contains("adapter"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(!body.to_string().contains(BOT_TOKEN) && !metrics.contains(BOT_TOKEN));
    app.stop().await;
}

#[tokio::test]
async fn an_unknown_slack_sender_gets_a_pairing_code_and_no_turn() {
    let slack = FakeSlack::start().await;
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn_with(&llm, |s| {
        s.slack = Some(slack_settings(&slack));
        s.access
            .platforms
            .insert("slack".to_owned(), vec!["USOMEONE1".to_owned()]);
    })
    .await;

    assert_eq!(
        deliver(&app, &dm("let me in", "1700000800.000001")).await,
        [200]
    );
    posted(&slack, DM, 1).await;

    assert!(llm.requests().is_empty(), "no turn before pairing");
    assert_eq!(app.count("pairing_requests").await, 1);
    let greeting = &slack.posted_in(DM)[0].text;
    assert!(!greeting.starts_with("echo:"), "{greeting}");
    app.stop().await;
}

#[tokio::test]
async fn a_button_press_that_matches_nothing_gets_a_2xx_and_changes_nothing() {
    let slack = FakeSlack::start().await;
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn_with(&llm, |s| s.slack = Some(slack_settings(&slack))).await;
    let press = switchboard_test_support::slack::block_actions(
        TEAM_ID,
        CHANNEL,
        "1700000900.000001",
        None,
        "sb:no-such-action",
    );

    let answered = Delivery::new(SIGNING_SECRET)
        .interaction(&app.url("/slack/interactivity"), &press)
        .await;
    let forged = Delivery::new("not-the-signing-secret")
        .interaction(&app.url("/slack/interactivity"), &press)
        .await;

    assert_eq!(answered.statuses, [200], "{}", answered.body);
    assert_eq!(forged.statuses, [401], "verified like events");
    assert_eq!(app.count("inbound").await, 0);
    assert!(llm.requests().is_empty());
    app.stop().await;
}
