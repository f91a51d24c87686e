//! The webhook route over real HTTP: the handshake, signatures, bad input,
//! acknowledgement and redelivery, status callbacks.

use serde_json::json;
use switchboard_contract::DeliveryState;
use switchboard_test_support::whatsapp::{
    self, APP_SECRET, PHONE_NUMBER_ID, VERIFY_TOKEN, failed_status, messages, sign, status,
    statuses, text,
};

use crate::helpers::{MAX_BODY, spawn_app, spawn_app_with};

#[tokio::test]
async fn the_handshake_with_the_verify_token_answers_the_challenge() {
    let app = spawn_app().await;

    let (status, body) = app.webhook.handshake(VERIFY_TOKEN, "1158201444").await;

    assert_eq!(status, 200);
    assert_eq!(body, "1158201444");
}

#[tokio::test]
async fn the_handshake_with_a_wrong_verify_token_is_forbidden() {
    let app = spawn_app().await;

    let (status, body) = app.webhook.handshake("not-the-token", "1158201444").await;

    assert_eq!(status, 403);
    assert!(!body.contains("1158201444"));
    let (status, _) = app.webhook.handshake("", "1").await;
    assert_eq!(status, 403);
}

#[tokio::test]
async fn a_wrong_or_missing_signature_is_refused_and_nothing_submitted() {
    let app = spawn_app().await;
    let body = messages(PHONE_NUMBER_ID, vec![text("wamid.A1", "hi")])
        .to_string()
        .into_bytes();

    let forged = sign("another-secret", &body);
    assert_eq!(app.webhook.post(body.clone(), Some(forged)).await, 401);
    assert_eq!(app.webhook.post(body.clone(), None).await, 401);
    assert_eq!(
        app.webhook
            .post(body.clone(), Some("sha256=zz".to_owned()))
            .await,
        401
    );
    // The signature covers the raw bytes: the same JSON, respaced, fails.
    let mut respaced = b" ".to_vec();
    respaced.extend_from_slice(&body);
    assert_eq!(
        app.webhook
            .post(respaced, Some(sign(APP_SECRET, &body)))
            .await,
        401
    );

    assert!(app.sink.submissions().is_empty());
}

#[tokio::test]
async fn malformed_json_is_a_bad_request_and_nothing_submitted() {
    let app = spawn_app().await;
    let body = b"{\"object\": \"whatsapp_business_account\", \"entry\": [".to_vec();

    let status = app
        .webhook
        .post(body.clone(), Some(sign(APP_SECRET, &body)))
        .await;

    assert_eq!(status, 400);
    assert!(app.sink.submissions().is_empty());
}

#[tokio::test]
async fn an_oversized_body_is_refused_with_413() {
    let app = spawn_app().await;
    let huge = "x".repeat(MAX_BODY + 1);
    let payload = messages(PHONE_NUMBER_ID, vec![text("wamid.A1", &huge)]);

    assert_eq!(app.webhook.deliver(&payload).await, 413);
    assert!(app.sink.submissions().is_empty());
}

#[tokio::test]
async fn a_redelivered_payload_is_submitted_with_the_same_event_id() {
    let app = spawn_app().await;
    let payload = messages(PHONE_NUMBER_ID, vec![text("wamid.REPEAT", "hello")]);

    assert_eq!(app.webhook.deliver(&payload).await, 200);
    assert_eq!(app.webhook.deliver(&payload).await, 200);

    let submitted = app.sink.submissions();
    assert_eq!(submitted.len(), 2, "the core, not the adapter, dedups");
    assert!(
        submitted
            .iter()
            .all(|message| message.event_id.as_str() == "wamid.REPEAT")
    );
}

#[tokio::test]
async fn a_payload_the_core_could_not_record_is_not_acknowledged_until_it_is() {
    let app = spawn_app().await;
    app.sink.fail_next(1);
    let payload = messages(
        PHONE_NUMBER_ID,
        vec![text("wamid.B1", "first"), text("wamid.B2", "second")],
    );

    let attempts = app.webhook.deliver_until_acknowledged(&payload, 3).await;

    assert_eq!(attempts, [503, 200]);
    let ids: Vec<String> = app
        .sink
        .submissions()
        .iter()
        .map(|message| message.event_id.to_string())
        .collect();
    assert_eq!(ids, ["wamid.B1", "wamid.B1", "wamid.B2"]);
}

#[tokio::test]
async fn status_callbacks_reach_the_core() {
    let app = spawn_app().await;
    let payload = statuses(
        PHONE_NUMBER_ID,
        vec![
            status("wamid.S1", "sent"),
            status("wamid.S1", "delivered"),
            status("wamid.S1", "read"),
            failed_status("wamid.S2", 131_026, "Message undeliverable"),
            status("wamid.S3", "deleted"),
        ],
    );

    assert_eq!(app.webhook.deliver(&payload).await, 200);

    let states: Vec<_> = app
        .sink
        .statuses()
        .into_iter()
        .map(|status| (status.message_id, status.state))
        .collect();
    assert_eq!(
        states,
        [
            ("wamid.S1".to_owned(), DeliveryState::Sent),
            ("wamid.S1".to_owned(), DeliveryState::Delivered),
            ("wamid.S1".to_owned(), DeliveryState::Read),
            (
                "wamid.S2".to_owned(),
                DeliveryState::Failed {
                    code: Some(131_026),
                    reason: "Message undeliverable".to_owned()
                }
            ),
        ]
    );
    let status = &app.sink.statuses()[0];
    assert_eq!(status.account.as_str(), PHONE_NUMBER_ID);
    assert_eq!(status.chat.as_str(), whatsapp::CUSTOMER);
}

#[tokio::test]
async fn a_status_the_core_could_not_record_is_delivered_again() {
    let app = spawn_app().await;
    app.sink.fail_next(1);
    let payload = statuses(PHONE_NUMBER_ID, vec![status("wamid.S1", "delivered")]);

    let attempts = app.webhook.deliver_until_acknowledged(&payload, 3).await;

    assert_eq!(attempts, [503, 200]);
}

#[tokio::test]
async fn payloads_for_other_numbers_objects_or_fields_are_acknowledged_and_dropped() {
    let app = spawn_app().await;

    let other_number = messages("999000999", vec![text("wamid.X", "hi")]);
    assert_eq!(app.webhook.deliver(&other_number).await, 200);
    let other_object = json!({"object": "page", "entry": []});
    assert_eq!(app.webhook.deliver(&other_object).await, 200);
    let other_field = json!({"object": "whatsapp_business_account", "entry": [
        {"id": "1", "changes": [{"field": "account_update", "value": {"event": "VERIFIED"}}]}]});
    assert_eq!(app.webhook.deliver(&other_field).await, 200);

    assert!(app.sink.submissions().is_empty());
}

#[tokio::test]
async fn unsupported_messages_and_reactions_are_ignored_by_default() {
    let app = spawn_app().await;
    let payload = messages(
        PHONE_NUMBER_ID,
        vec![
            whatsapp::message(
                "wamid.C1",
                "contacts",
                json!([{"name": {"formatted_name": "Bob"}}]),
            ),
            whatsapp::message(
                "wamid.C2",
                "reaction",
                json!({"message_id": "wamid.OURS", "emoji": "👍"}),
            ),
            whatsapp::message("wamid.C3", "unsupported", json!({})),
            text("wamid.C4", "still here"),
        ],
    );

    assert_eq!(app.webhook.deliver(&payload).await, 200);

    let submitted = app.sink.submissions();
    assert_eq!(submitted.len(), 1);
    assert_eq!(submitted[0].text, "still here");
}

#[tokio::test]
async fn reactions_reach_the_core_when_configured() {
    let app = spawn_app_with(|settings| settings.react_to_reactions = true).await;
    let reaction = |id, emoji| {
        whatsapp::message(
            id,
            "reaction",
            json!({"message_id": "wamid.OURS", "emoji": emoji}),
        )
    };
    let payload = messages(
        PHONE_NUMBER_ID,
        vec![reaction("wamid.R1", "👍"), reaction("wamid.R2", "")],
    );

    assert_eq!(app.webhook.deliver(&payload).await, 200);

    let submitted = app.sink.submissions();
    assert_eq!(submitted.len(), 1, "a removed reaction is not passed on");
    assert_eq!(submitted[0].text, "👍");
    assert_eq!(submitted[0].reply_to.as_deref(), Some("wamid.OURS"));
}
