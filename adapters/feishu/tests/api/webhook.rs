//! Inbound: the webhook route over real HTTP.

use std::time::Duration;

use serde_json::{Value, json};
use switchboard_contract::ChatKind;

use crate::helpers::{
    MAX_BODY, Options, SinkMode, VERIFICATION_TOKEN, challenge, encrypted_body, mention,
    message_event, signature_headers, signature_headers_at, spawn_app, spawn_app_with, unix_now,
};

fn encrypted() -> Options {
    Options {
        encrypted: true,
        ..Options::default()
    }
}

#[tokio::test]
async fn a_plain_url_verification_is_answered_with_its_challenge() {
    let app = spawn_app().await;

    let response = app.post_json(&challenge(VERIFICATION_TOKEN)).await;

    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body, json!({"challenge": "ch-123"}));
}

#[tokio::test]
async fn an_encrypted_unsigned_url_verification_is_answered() {
    let app = spawn_app_with(encrypted()).await;

    let response = app
        .post_raw(encrypted_body(&challenge(VERIFICATION_TOKEN)), &[])
        .await;

    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["challenge"], "ch-123");
}

#[tokio::test]
async fn a_url_verification_with_the_wrong_token_is_refused() {
    let app = spawn_app().await;

    let response = app.post_json(&challenge("not-the-token")).await;

    assert_eq!(response.status(), 401);
    let body = response.text().await.unwrap();
    assert!(!body.contains("ch-123"));
}

#[tokio::test]
async fn a_signed_encrypted_message_is_submitted() {
    let app = spawn_app_with(encrypted()).await;
    let event = message_event("ev-1", "p2p", "hello", json!([]));

    let response = app.post_encrypted(&event).await;

    assert_eq!(response.status(), 200);
    let submitted = app.submissions();
    assert_eq!(submitted.len(), 1);
    assert_eq!(submitted[0].text, "hello");
    assert_eq!(submitted[0].event_id.as_str(), "ev-1");
}

#[tokio::test]
async fn a_bad_signature_is_rejected_and_nothing_is_submitted() {
    let app = spawn_app_with(encrypted()).await;
    let raw = encrypted_body(&message_event("ev-1", "p2p", "hello", json!([])));
    let mut headers = signature_headers(&raw);
    headers[2].1 = "0".repeat(64);

    let response = app.post_raw(raw, &headers).await;

    assert_eq!(response.status(), 401);
    assert!(app.submissions().is_empty());
}

#[tokio::test]
async fn a_signature_over_other_bytes_is_rejected() {
    let app = spawn_app_with(encrypted()).await;
    let raw = encrypted_body(&message_event("ev-1", "p2p", "hello", json!([])));
    let headers = signature_headers(&raw);
    // Same JSON, different bytes: the signature covers the raw body.
    let mut reformatted = b" ".to_vec();
    reformatted.extend_from_slice(&raw);

    let response = app.post_raw(reformatted, &headers).await;

    assert_eq!(response.status(), 401);
    assert!(app.submissions().is_empty());
}

#[tokio::test]
async fn an_unsigned_event_is_rejected_when_an_encrypt_key_is_set() {
    let app = spawn_app_with(encrypted()).await;
    let raw = encrypted_body(&message_event("ev-1", "p2p", "hello", json!([])));

    let response = app.post_raw(raw, &[]).await;

    assert_eq!(response.status(), 401);
    assert!(app.submissions().is_empty());
}

#[tokio::test]
async fn an_event_with_the_wrong_token_is_rejected() {
    let app = spawn_app().await;
    let mut event = message_event("ev-1", "p2p", "hello", json!([]));
    event["header"]["token"] = json!("forged");

    let response = app.post_json(&event).await;

    assert_eq!(response.status(), 401);
    assert!(app.submissions().is_empty());
}

#[tokio::test]
async fn an_event_without_a_token_is_rejected() {
    let app = spawn_app().await;
    let mut event = message_event("ev-1", "p2p", "hello", json!([]));
    event["header"]
        .as_object_mut()
        .unwrap()
        .remove("token")
        .unwrap();

    let response = app.post_json(&event).await;

    assert_eq!(response.status(), 401);
    assert!(app.submissions().is_empty());
}

#[tokio::test]
async fn an_event_delivered_four_times_keeps_its_event_id() {
    let app = spawn_app().await;
    let event = message_event("ev-repeat", "p2p", "hello", json!([]));

    for _ in 0..4 {
        assert_eq!(app.post_json(&event).await.status(), 200);
    }

    let submitted = app.submissions();
    assert_eq!(submitted.len(), 4, "the core, not the adapter, dedups");
    assert!(submitted.iter().all(|m| m.event_id.as_str() == "ev-repeat"));
}

#[tokio::test]
async fn a_group_message_without_a_mention_is_not_addressed() {
    let app = spawn_app().await;
    let event = message_event(
        "ev-1",
        "group",
        "@_user_1 lunch?",
        json!([mention("@_user_1", "ou_bob", "Bob")]),
    );

    app.post_json(&event).await;

    let submitted = app.submissions();
    assert_eq!(submitted.len(), 1);
    assert_eq!(submitted[0].chat_kind, ChatKind::Group);
    assert!(!submitted[0].mentions_bot);
    assert_eq!(submitted[0].text, "@Bob lunch?");
}

#[tokio::test]
async fn a_group_message_mentioning_the_bot_is_addressed_and_stripped() {
    let app = spawn_app().await;
    let event = message_event(
        "ev-1",
        "group",
        "@_user_1 what is 17*23?",
        json!([mention("@_user_1", "ou_bot", "Switchboard")]),
    );

    app.post_json(&event).await;

    let message = &app.submissions()[0];
    assert!(message.mentions_bot);
    assert_eq!(message.text, "what is 17*23?");
    assert_eq!(message.chat.as_str(), "oc_chat");
    assert_eq!(message.sender.id.as_str(), "ou_alice");
    assert!(!message.sender.is_bot);
    assert_eq!(message.message_id.as_deref(), Some("om_msg1"));
    assert_eq!(message.thread, None);
    assert_eq!(message.reply_to, None);
    assert_eq!(message.account.as_str(), "cli_test_app");
    assert_eq!(message.platform.as_str(), "feishu");
}

#[tokio::test]
async fn at_all_does_not_address_the_bot() {
    let app = spawn_app().await;
    let at_all = json!({"key": "@_all", "id": {"open_id": "", "union_id": "", "user_id": ""}, "name": "all"});
    let event = message_event("ev-1", "group", "@_all standup", json!([at_all]));

    app.post_json(&event).await;

    assert!(!app.submissions()[0].mentions_bot);
}

#[tokio::test]
async fn a_p2p_message_is_addressed() {
    let app = spawn_app().await;

    app.post_json(&message_event("ev-1", "p2p", "hi there", json!([])))
        .await;

    let message = &app.submissions()[0];
    assert_eq!(message.chat_kind, ChatKind::Direct);
    assert!(message.mentions_bot);
    assert_eq!(message.text, "hi there");
}

#[tokio::test]
async fn a_thread_message_carries_its_thread_and_reply_target() {
    let app = spawn_app().await;
    let mut event = message_event(
        "ev-1",
        "group",
        "@_user_1 more",
        json!([mention("@_user_1", "ou_bot", "bot")]),
    );
    event["event"]["message"]["root_id"] = json!("om_root");
    event["event"]["message"]["parent_id"] = json!("om_parent");
    event["event"]["message"]["thread_id"] = json!("omt_thread");

    app.post_json(&event).await;

    let message = &app.submissions()[0];
    assert_eq!(message.thread.as_ref().unwrap().as_str(), "omt_thread");
    assert_eq!(message.reply_to.as_deref(), Some("om_parent"));
    assert_eq!(message.message_id.as_deref(), Some("om_msg1"));
}

#[tokio::test]
async fn a_reply_chain_without_a_thread_uses_its_root_as_thread() {
    let app = spawn_app().await;
    let mut event = message_event("ev-1", "p2p", "and then?", json!([]));
    event["event"]["message"]["root_id"] = json!("om_root");

    app.post_json(&event).await;

    let message = &app.submissions()[0];
    assert_eq!(message.thread.as_ref().unwrap().as_str(), "om_root");
}

#[tokio::test]
async fn a_message_from_an_app_is_marked_as_from_a_bot() {
    let app = spawn_app().await;
    let mut event = message_event("ev-1", "p2p", "beep", json!([]));
    event["event"]["sender"]["sender_type"] = json!("app");

    app.post_json(&event).await;

    assert!(app.submissions()[0].sender.is_bot);
}

#[tokio::test]
async fn a_post_message_is_flattened_to_text() {
    let app = spawn_app().await;
    let mut event = message_event(
        "ev-1",
        "group",
        "",
        json!([mention("@_user_1", "ou_bot", "bot")]),
    );
    event["event"]["message"]["message_type"] = json!("post");
    event["event"]["message"]["content"] = json!(
        json!({"title": "Q", "content": [[{"tag": "at", "user_id": "@_user_1"}, {"tag": "text", "text": " summarise"}], [{"tag": "text", "text": "this"}]]})
            .to_string()
    );

    app.post_json(&event).await;

    let message = &app.submissions()[0];
    assert!(message.mentions_bot);
    assert_eq!(message.text, "Q\nsummarise\nthis");
}

#[tokio::test]
async fn integer_timestamps_are_accepted_too() {
    let app = spawn_app().await;
    let mut event = message_event("ev-1", "p2p", "hi", json!([]));
    event["header"]["create_time"] = json!(1_700_000_000_000_i64);
    event["event"]["message"]["create_time"] = json!("1700000000000");

    assert_eq!(app.post_json(&event).await.status(), 200);
    assert_eq!(app.submissions().len(), 1);
}

#[tokio::test]
async fn unknown_event_types_are_acknowledged_and_ignored() {
    let app = spawn_app().await;
    let mut event = message_event("ev-1", "p2p", "hi", json!([]));
    event["header"]["event_type"] = json!("im.chat.member.bot.added_v1");
    event["event"] = json!({"chat_id": "oc_chat", "operator_id": {"open_id": "ou_x"}});

    let response = app.post_json(&event).await;

    assert_eq!(response.status(), 200);
    assert!(app.submissions().is_empty());
}

#[tokio::test]
async fn image_messages_are_submitted_with_a_fetcher_and_stickers_ignored() {
    let app = spawn_app().await;
    let mut event = message_event("ev-1", "p2p", "", json!([]));
    event["event"]["message"]["message_type"] = json!("image");
    event["event"]["message"]["content"] = json!(r#"{"image_key":"img_v2"}"#);

    assert_eq!(app.post_json(&event).await.status(), 200);
    let submissions = app.submissions();
    assert_eq!(submissions.len(), 1);
    let attachments = &submissions[0].attachments;
    assert_eq!(attachments.len(), 1);
    assert_eq!(
        attachments[0].kind,
        switchboard_contract::AttachmentKind::Image
    );
    assert!(attachments[0].fetch.is_some(), "the core can download it");
    assert_eq!(attachments[0].url, None, "no URL leaves the adapter");

    let mut sticker = message_event("ev-2", "p2p", "", json!([]));
    sticker["event"]["message"]["message_type"] = json!("sticker");
    sticker["event"]["message"]["content"] = json!(r#"{"file_key":"v2_sticker"}"#);
    assert_eq!(app.post_json(&sticker).await.status(), 200);
    assert_eq!(app.submissions().len(), 1, "a sticker is ignored");
}

#[tokio::test]
async fn malformed_bodies_are_refused_without_a_submission() {
    let app = spawn_app_with(encrypted()).await;
    let bodies: Vec<Vec<u8>> = vec![
        b"".to_vec(),
        b"not json".to_vec(),
        b"[1,2,3]".to_vec(),
        b"{\"encrypt\": 42}".to_vec(),
        br#"{"encrypt": "!!!not base64!!!"}"#.to_vec(),
        br#"{"encrypt": "AAECAwQFBgcICQoLDA0ODw=="}"#.to_vec(),
        vec![0xff, 0xfe, 0x00],
    ];

    for body in bodies {
        let headers = signature_headers(&body);
        let response = app.post_raw(body.clone(), &headers).await;
        assert!(
            response.status().is_client_error(),
            "{} for {:?}",
            response.status(),
            String::from_utf8_lossy(&body)
        );
    }
    assert!(app.submissions().is_empty());
}

#[tokio::test]
async fn an_encrypted_body_is_refused_when_no_key_is_set() {
    let app = spawn_app().await;

    let response = app
        .post_raw(encrypted_body(&challenge(VERIFICATION_TOKEN)), &[])
        .await;

    assert_eq!(response.status(), 400);
}

#[tokio::test]
async fn an_oversized_body_is_refused_without_a_submission() {
    let app = spawn_app().await;
    let event = message_event("ev-1", "p2p", &"x".repeat(MAX_BODY), json!([]));

    let response = app.post_json(&event).await;

    assert_eq!(response.status(), 413);
    assert!(app.submissions().is_empty());
}

#[tokio::test]
async fn a_core_outage_answers_503_so_feishu_redelivers() {
    let app = spawn_app_with(Options {
        sink: SinkMode::Unavailable,
        ..Options::default()
    })
    .await;

    let response = app
        .post_json(&message_event("ev-1", "p2p", "hi", json!([])))
        .await;

    assert_eq!(response.status(), 503);
}

#[tokio::test]
async fn an_event_not_recorded_within_the_ack_timeout_is_answered_503_not_acknowledged() {
    let app = spawn_app_with(Options {
        sink: SinkMode::Blocked,
        ack_timeout_ms: 200,
        ..Options::default()
    })
    .await;
    let event = message_event("ev-1", "p2p", "hi", json!([]));

    let while_blocked = app.post_json(&event).await;
    app.sink.unblock();
    let redelivered = app.post_json(&event).await;

    assert_eq!(
        while_blocked.status(),
        503,
        "Feishu never redelivers an acknowledged event"
    );
    assert_eq!(redelivered.status(), 200);
    let drained = app.adapter.drain(Duration::from_secs(5)).await;
    assert_eq!(drained.aborted, 0, "the first recording went on");
}

#[tokio::test]
async fn a_signed_request_with_a_stale_timestamp_is_refused() {
    let app = spawn_app_with(encrypted()).await;
    let five_years = 5 * 365 * 24 * 3600;
    for (timestamp, what) in [
        (unix_now() - five_years, "five years old"),
        (unix_now() - 301, "just over five minutes old"),
        (unix_now() + 400, "from the future"),
    ] {
        let raw = encrypted_body(&message_event("ev-old", "p2p", "replayed", json!([])));
        let headers = signature_headers_at(&raw, timestamp);

        let response = app.post_raw(raw, &headers).await;

        assert_eq!(response.status(), 401, "{what}");
        let body = response.text().await.unwrap();
        assert!(!body.contains("replayed"), "{body}");
    }
    assert!(app.submissions().is_empty());

    let raw = encrypted_body(&message_event("ev-new", "p2p", "recent", json!([])));
    let headers = signature_headers_at(&raw, unix_now() - 200);
    let recent = app.post_raw(raw, &headers).await;
    assert_eq!(recent.status(), 200, "inside the window");
    assert_eq!(app.submissions().len(), 1);
}

#[tokio::test]
async fn draining_after_traffic_finishes_every_task() {
    let app = spawn_app().await;
    for i in 0..5 {
        app.post_json(&message_event(&format!("ev-{i}"), "p2p", "hi", json!([])))
            .await;
    }

    let drained = app.adapter.drain(Duration::from_secs(5)).await;

    assert_eq!(drained.aborted, 0);
    assert_eq!(app.adapter.tasks().in_flight(), 0);
    assert_eq!(app.submissions().len(), 5);
}

#[tokio::test]
async fn null_and_missing_optional_fields_are_tolerated() {
    let app = spawn_app().await;
    let mut event = message_event("ev-1", "group", "hi", json!(null));
    let message = event["event"]["message"].as_object_mut().unwrap();
    message.remove("root_id");
    message.insert("parent_id".to_owned(), json!(null));
    event["header"]
        .as_object_mut()
        .unwrap()
        .remove("create_time");

    assert_eq!(app.post_json(&event).await.status(), 200);
    let submitted = app.submissions();
    assert_eq!(submitted.len(), 1);
    assert!(!submitted[0].mentions_bot);
}
