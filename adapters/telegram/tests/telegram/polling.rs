//! Long polling, and a direct-message round trip through it.

use switchboard_test_support::eventually;
use tokio_util::sync::CancellationToken;

use crate::helpers::*;

#[tokio::test]
async fn a_direct_message_round_trip_through_polling() {
    let app = TestApp::spawn().await;
    app.fake.push_updates([update(
        500,
        text_message(
            21,
            private_chat(USER_ID as i64),
            user(USER_ID, "Ada", false),
            "ping",
        ),
    )]);
    let shutdown = CancellationToken::new();
    let worker = tokio::spawn(app.adapter.run_polling(shutdown.clone()));

    let inbound = app.sink.wait_for(1).await.remove(0);
    let reply = outbound(
        inbound.chat.as_str().parse().unwrap(),
        None,
        inbound.message_id.as_deref().map(|id| id.parse().unwrap()),
        "*pong*",
    );
    let receipt = app.sender().send(&reply).await.expect("sent");
    shutdown.cancel();
    worker.await.expect("joins").expect("polling ends cleanly");

    assert_eq!(inbound.event_id.as_str(), "500");
    assert_eq!(inbound.text, "ping");
    let sent = app.fake.calls("sendMessage");
    assert_eq!(sent[0]["chat_id"], USER_ID);
    assert_eq!(sent[0]["text"], "<i>pong</i>");
    assert_eq!(sent[0]["reply_parameters"]["message_id"], 21);
    assert_eq!(receipt.message_ids.len(), 1);
    // Later polls (and the confirmation at shutdown) move past update 500.
    let polls = app.fake.calls("getUpdates");
    assert!(polls.len() >= 2);
    assert_eq!(polls.last().unwrap()["offset"], 501);
    assert_eq!(
        polls[0]["allowed_updates"],
        serde_json::json!(["message", "callback_query"])
    );
}

#[tokio::test]
async fn an_unavailable_core_gets_the_update_again_before_moving_on() {
    let app = TestApp::spawn().await;
    *app.sink.unavailable.lock().unwrap() = true;
    app.fake.push_updates([update(
        600,
        text_message(22, private_chat(1), user(USER_ID, "Ada", false), "hello?"),
    )]);
    let shutdown = CancellationToken::new();
    let worker = tokio::spawn(app.adapter.run_polling(shutdown.clone()));

    // Let the loop fail a first time, then bring the core back.
    eventually("a first poll", || {
        std::future::ready(!app.fake.calls("getUpdates").is_empty())
    })
    .await;
    *app.sink.unavailable.lock().unwrap() = false;
    let submitted = app.sink.wait_for(1).await;
    shutdown.cancel();
    worker.await.expect("joins").expect("polling ends cleanly");

    assert_eq!(submitted[0].event_id.as_str(), "600");
    assert!(
        app.fake
            .calls("getUpdates")
            .iter()
            .all(|poll| poll["offset"] != 602)
    );
}

#[tokio::test]
async fn polling_stops_promptly_on_shutdown() {
    let app = TestApp::spawn().await;
    let shutdown = CancellationToken::new();
    let worker = tokio::spawn(app.adapter.run_polling(shutdown.clone()));

    shutdown.cancel();

    tokio::time::timeout(std::time::Duration::from_secs(5), worker)
        .await
        .expect("stops")
        .expect("joins")
        .expect("clean");
}

#[tokio::test]
async fn polling_refuses_to_run_in_webhook_mode() {
    let app =
        TestApp::spawn_with(|settings| settings.mode = switchboard_telegram::Mode::Webhook).await;

    let result = app.adapter.run_polling(CancellationToken::new()).await;

    assert!(result.is_err());
    assert!(app.fake.calls("getUpdates").is_empty());
    assert!(app.fake.calls("deleteWebhook").is_empty());
}
