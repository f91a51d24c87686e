//! Socket Mode: envelopes in over the fake's WebSocket, acks out only once
//! the core recorded the event, reconnection, and what the link observer
//! hears.

use switchboard_contract::ConnectionError;
use switchboard_test_support::slack::{
    BOT_USER_ID, FakeSlack, TEAM_ID, app_mention, block_actions, event_callback, message_event,
};

use crate::helpers::{RecordingSink, TestApp, eventually, socket_settings, spawn_with};

async fn socket_app(sink: RecordingSink) -> TestApp {
    let fake = FakeSlack::start().await;
    let settings = socket_settings(&fake);
    let app = spawn_with(fake, settings, sink).await;
    eventually("a Socket Mode connection", || async {
        app.fake.socket_connected() && app.observer.ups() == 1
    })
    .await;
    app
}

fn dm(ts: &str) -> serde_json::Value {
    event_callback(TEAM_ID, message_event("D0DM", "im", "hello", ts))
}

#[tokio::test]
async fn socket_mode_serves_no_routes_and_holds_one_lease_per_workspace() {
    let app = socket_app(RecordingSink::default()).await;

    assert!(app.address.is_none(), "no webhook in Socket Mode");
    let connection = app.connection.as_ref().unwrap();
    assert_eq!(connection.lease_name(), format!("slack:{TEAM_ID}"));
    assert_eq!(app.fake.calls_to("apps.connections.open").len(), 1);
}

#[tokio::test]
async fn an_envelope_is_acknowledged_only_after_the_core_recorded_it() {
    let app = socket_app(RecordingSink::blocked()).await;

    let envelope = app
        .fake
        .send_envelope("events_api", dm("1700000700.000001"));
    eventually("the event at the core", || async {
        app.sink.submissions().len() == 1
    })
    .await;
    assert!(app.fake.acks().is_empty(), "not recorded yet");
    app.sink.unblock();

    eventually("the ack", || async {
        app.fake.acks() == [envelope.clone()]
    })
    .await;
    assert_eq!(app.sink.recorded(), 1);
    let message = &app.sink.submissions()[0];
    assert_eq!(message.event_id.as_str(), "D0DM:1700000700.000001");
}

#[tokio::test]
async fn an_event_the_core_could_not_record_is_left_unacknowledged() {
    let app = socket_app(RecordingSink::default()).await;
    app.sink.fail_next(1);

    let refused = app
        .fake
        .send_envelope("events_api", dm("1700000700.000002"));
    eventually("the refused event", || async {
        app.sink.submissions().len() == 1
    })
    .await;
    let taken = app
        .fake
        .send_envelope("events_api", dm("1700000700.000003"));

    eventually("the second ack", || async {
        app.fake.acks().contains(&taken)
    })
    .await;
    assert!(!app.fake.acks().contains(&refused));
}

#[tokio::test]
async fn a_mention_and_its_message_event_over_the_socket_are_recorded_once() {
    let app = socket_app(RecordingSink::default()).await;
    let text = format!("<@{BOT_USER_ID}> hi");
    let ts = "1700000700.000004";

    let a = app.fake.send_envelope(
        "events_api",
        event_callback(TEAM_ID, message_event("C0GENERAL", "channel", &text, ts)),
    );
    let b = app.fake.send_envelope(
        "events_api",
        event_callback(TEAM_ID, app_mention("C0GENERAL", &text, ts)),
    );

    eventually("both acks", || async {
        let acks = app.fake.acks();
        acks.contains(&a) && acks.contains(&b)
    })
    .await;
    assert_eq!(app.sink.submissions().len(), 1, "submitted once");
    assert_eq!(app.sink.recorded(), 1);
}

#[tokio::test]
async fn a_disconnect_message_opens_a_new_connection() {
    let app = socket_app(RecordingSink::default()).await;

    app.fake.disconnect("refresh_requested");

    eventually("a second connection", || async {
        app.fake.socket_connections() == 2 && app.fake.socket_connected()
    })
    .await;
    eventually("up again", || async { app.observer.ups() == 2 }).await;
    let envelope = app
        .fake
        .send_envelope("events_api", dm("1700000700.000005"));
    eventually("the ack on the new connection", || async {
        app.fake.acks().contains(&envelope)
    })
    .await;
    assert!(
        app.observer.downs().is_empty(),
        "a requested refresh is no failure"
    );
    assert_eq!(app.fake.calls_to("apps.connections.open").len(), 2);
}

#[tokio::test]
async fn a_dropped_connection_is_reported_and_reconnected_after_a_backoff() {
    let app = socket_app(RecordingSink::default()).await;

    app.fake.drop_connection();

    eventually("the failure reported", || async {
        !app.observer.downs().is_empty()
    })
    .await;
    eventually("reconnected", || async {
        app.fake.socket_connections() == 2 && app.observer.ups() == 2
    })
    .await;
    let reason = &app.observer.downs()[0];
    assert!(reason.starts_with("Slack Socket Mode"), "{reason}");
    assert!(!reason.contains("ticket"), "{reason}");
}

#[tokio::test]
async fn link_disabled_ends_the_connection_with_an_error() {
    let mut app = socket_app(RecordingSink::default()).await;

    app.fake.disconnect("link_disabled");

    let ended = app.run.take().unwrap().await.unwrap();
    assert!(
        matches!(&ended, Err(ConnectionError::Failed(reason)) if reason.contains("link_disabled")),
        "{ended:?}"
    );
}

#[tokio::test]
async fn stopping_ends_the_connection() {
    let mut app = socket_app(RecordingSink::default()).await;

    app.stop.cancel();

    assert_eq!(app.run.take().unwrap().await.unwrap(), Ok(()));
}

#[tokio::test]
async fn a_button_press_over_the_socket_reaches_act_and_is_acknowledged() {
    let app = socket_app(RecordingSink::default()).await;

    let envelope = app.fake.send_envelope(
        "interactive",
        block_actions(TEAM_ID, "D0DM", "1700000700.000009", None, "ap:3:allow"),
    );

    eventually("the ack", || async { app.fake.acks().contains(&envelope) }).await;
    eventually("the press at the core", || async {
        app.sink.actions().len() == 1
    })
    .await;
    assert_eq!(app.sink.actions()[0].action.as_str(), "ap:3:allow");
}

#[tokio::test]
async fn a_refused_app_level_token_ends_the_connection_with_an_error() {
    let fake = FakeSlack::start().await;
    let settings = socket_settings(&fake);
    let mut secrets = crate::helpers::secrets();
    secrets.workspaces[0].app_token = Some(secrecy::SecretString::from("xapp-wrong"));
    let mut app =
        crate::helpers::spawn_with_secrets(fake, settings, secrets, RecordingSink::default()).await;

    let ended = app.run.take().unwrap().await.unwrap();

    let Err(ConnectionError::Failed(reason)) = ended else {
        panic!("{ended:?}");
    };
    assert!(reason.contains("app-level token"), "{reason}");
    assert!(!reason.contains("xapp-wrong"), "{reason}");
    assert_eq!(app.observer.downs(), [reason]);
}
