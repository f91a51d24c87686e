//! A platform adapter wired into the gateway end to end: a Feishu event
//! posted to the gateway's webhook route is answered through the agent and
//! the outbox into the fake Feishu open API, once however often it is
//! redelivered.

use serde_json::{Value, json};
use switchboard_feishu::{Domain, FeishuSettings};
use switchboard_test_support::eventually;
use switchboard_test_support::feishu::{
    APP_ID, APP_SECRET, FakeFeishu, VERIFICATION_TOKEN, message_event,
};

use crate::helpers::{FakeLlm, TestApp};

/// A direct message `text` with its own event and message ids.
fn direct_message(event_id: &str, message_id: &str, text: &str) -> Value {
    let mut event = message_event(event_id, "p2p", text, json!([]));
    event["event"]["message"]["message_id"] = json!(message_id);
    event
}

#[tokio::test]
async fn a_feishu_event_is_answered_once_through_the_agent_and_the_outbox() {
    // SAFETY (test): variable names unique to this test.
    unsafe {
        std::env::set_var("SB_TEST_FS_SECRET", APP_SECRET);
        std::env::set_var("SB_TEST_FS_TOKEN", VERIFICATION_TOKEN);
    }
    let feishu = FakeFeishu::start().await;
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn_with(&llm, |s| {
        let mut settings = FeishuSettings::new(APP_ID);
        settings.app_secret_env = "SB_TEST_FS_SECRET".to_owned();
        settings.verification_token_env = "SB_TEST_FS_TOKEN".to_owned();
        settings.domain = Domain::Custom(feishu.url());
        s.feishu = Some(settings);
    })
    .await;
    let post = |event: Value| {
        let request = app.http.post(app.url("/feishu/events")).json(&event);
        async move { request.send().await.expect("sent").status() }
    };

    for _ in 0..4 {
        let status = post(direct_message("ev-1", "om_1", "hello feishu")).await;
        assert_eq!(status, 200);
    }
    // A later message in the same chat: the chat's messages are answered in
    // order, so its reply comes after any second reply to the first.
    let status = post(direct_message("ev-2", "om_2", "and then")).await;
    assert_eq!(status, 200);
    eventually("the reply to the later message", || {
        std::future::ready(feishu.messages().len() >= 2)
    })
    .await;

    let replies = feishu.messages();
    assert_eq!(replies.len(), 2, "four deliveries, one reply: {replies:?}");
    let (first, later) = (&replies[0], &replies[1]);
    assert_eq!(first.reply_target(), Some("om_1"));
    assert!(
        first.body.to_string().contains("echo: hello feishu"),
        "{first:?}"
    );
    assert!(first.body["uuid"].as_str().is_some_and(|u| !u.is_empty()));
    assert_eq!(later.reply_target(), Some("om_2"));
    assert!(
        later.body.to_string().contains("echo: and then"),
        "{later:?}"
    );
    assert_eq!(llm.requests().len(), 2);
    let wrong = post(json!({"header": {"event_id": "x", "token": "nope", "event_type": "im.message.receive_v1"}, "schema": "2.0", "event": {}})).await;
    assert_eq!(wrong, 401);
    app.stop().await;
}
