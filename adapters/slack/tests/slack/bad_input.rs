//! Requests that are not Slack's are refused before anything reads them:
//! a wrong or missing signature, a stale timestamp (401), a body that is
//! not Slack's (400), an oversized one (413). Nothing reaches the core.

use serde_json::Value;
use switchboard_test_support::slack::{
    Delivery, TEAM_ID, block_actions, event_callback, message_event, unix_now, url_verification,
};

use crate::helpers::{MAX_BODY, TestApp, spawn_app};

fn dm_event() -> Vec<u8> {
    event_callback(TEAM_ID, message_event("D0DM", "im", "hello", "1.1"))
        .to_string()
        .into_bytes()
}

async fn post_event(app: &TestApp, delivery: &Delivery, raw: Vec<u8>, timestamp: u64) -> u16 {
    delivery
        .post(&app.events_url(), raw, "application/json", timestamp, &[])
        .await
        .0
}

/// Posts `raw` to the events route with only `headers`, signed by no one.
async fn unsigned_post(app: &TestApp, raw: Vec<u8>, headers: &[(&str, String)]) -> u16 {
    let mut request = reqwest::Client::new()
        .post(app.events_url())
        .header("content-type", "application/json")
        .body(raw);
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    request.send().await.unwrap().status().as_u16()
}

fn nothing_reached_the_core(app: &TestApp) {
    assert!(app.sink.submissions().is_empty());
    assert!(app.sink.actions().is_empty());
}

#[tokio::test]
async fn a_wrong_signature_is_refused() {
    let app = spawn_app().await;
    let forger = Delivery::new("not-the-signing-secret");

    assert_eq!(post_event(&app, &forger, dm_event(), unix_now()).await, 401);
    let challenge = forger
        .event(&app.events_url(), &url_verification("ch-1"))
        .await;
    assert_eq!(challenge.statuses, [401, 401, 401, 401]);
    assert!(!challenge.body.contains("ch-1"));
    nothing_reached_the_core(&app);
}

#[tokio::test]
async fn a_missing_signature_is_refused() {
    let app = spawn_app().await;

    let status = unsigned_post(&app, dm_event(), &[]).await;

    assert_eq!(status, 401);
    nothing_reached_the_core(&app);
}

#[tokio::test]
async fn a_stale_timestamp_is_refused_even_when_signed() {
    let app = spawn_app().await;

    let six_minutes_ago = unix_now() - 6 * 60;
    let status = post_event(&app, &app.delivery, dm_event(), six_minutes_ago).await;

    assert_eq!(status, 401);
    nothing_reached_the_core(&app);
}

#[tokio::test]
async fn a_signature_over_other_bytes_is_refused() {
    let app = spawn_app().await;
    let raw = dm_event();
    let timestamp = unix_now().to_string();
    let signature = switchboard_test_support::slack::sign(
        switchboard_test_support::slack::SIGNING_SECRET,
        &timestamp,
        &raw,
    );
    let mut reformatted = b" ".to_vec();
    reformatted.extend_from_slice(&raw);

    let headers = [
        ("x-slack-request-timestamp", timestamp),
        ("x-slack-signature", signature),
    ];
    let status = unsigned_post(&app, reformatted, &headers).await;

    assert_eq!(status, 401);
    nothing_reached_the_core(&app);
}

#[tokio::test]
async fn malformed_json_is_a_bad_request() {
    let app = spawn_app().await;

    let status = post_event(
        &app,
        &app.delivery,
        b"{\"type\": \"event_callback\", ".to_vec(),
        unix_now(),
    )
    .await;
    let not_an_envelope = post_event(&app, &app.delivery, b"[1, 2, 3]".to_vec(), unix_now()).await;

    assert_eq!((status, not_an_envelope), (400, 400));
    nothing_reached_the_core(&app);
}

#[tokio::test]
async fn an_oversized_body_is_refused_with_413() {
    let app = spawn_app().await;
    let mut event = event_callback(TEAM_ID, message_event("D0DM", "im", "x", "1.1"));
    event["event"]["text"] = Value::String("x".repeat(MAX_BODY + 1));

    let status = post_event(
        &app,
        &app.delivery,
        event.to_string().into_bytes(),
        unix_now(),
    )
    .await;

    assert_eq!(status, 413);
    nothing_reached_the_core(&app);
}

#[tokio::test]
async fn interactivity_is_verified_and_read_like_events() {
    let app = spawn_app().await;
    let url = app.interactivity_url();
    let press = block_actions(TEAM_ID, "D0DM", "1.1", None, "ap:1:allow");

    let forged = Delivery::new("wrong").interaction(&url, &press).await;
    let no_payload = app
        .delivery
        .post(
            &url,
            b"other=1".to_vec(),
            "application/x-www-form-urlencoded",
            unix_now(),
            &[],
        )
        .await
        .0;
    let not_json = app
        .delivery
        .post(
            &url,
            b"payload=%7Bnope".to_vec(),
            "application/x-www-form-urlencoded",
            unix_now(),
            &[],
        )
        .await
        .0;

    assert_eq!(forged.statuses, [401]);
    assert_eq!((no_payload, not_json), (400, 400));
    nothing_reached_the_core(&app);
}
