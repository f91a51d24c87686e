//! Buttons: a question as a card with buttons, presses arriving as verified
//! card callbacks, answered with a toast and the updated card (or updated
//! later when the core is slow), bad presses refused without harm.

use serde_json::{Value, json};
use switchboard_contract::{ActionId, ActionReply, Button, ButtonStyle, OutboundMessage};
use switchboard_test_support::eventually;

use crate::helpers::*;

fn encrypted() -> Options {
    Options {
        encrypted: true,
        ..Options::default()
    }
}

fn question(app: &TestApp, text: &str) -> OutboundMessage {
    OutboundMessage {
        buttons: vec![
            Button::new(ActionId::parse("ap:4:once").unwrap(), "Allow once")
                .styled(ButtonStyle::Primary),
            Button::new(ActionId::parse("ap:4:deny").unwrap(), "Deny").styled(ButtonStyle::Danger),
        ],
        ..app.outbound("sb-q-1", text, None)
    }
}

fn pairs(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(label, action)| ((*label).to_owned(), (*action).to_owned()))
        .collect()
}

fn press(event_id: &str, value: Value) -> Value {
    card_action(event_id, "ou_alice", "oc_chat", "om_question", value)
}

#[tokio::test]
async fn a_plain_question_is_a_card_with_its_buttons_under_its_last_part() {
    let app = spawn_app().await;

    app.adapter
        .sender()
        .send(&question(&app, "May I delete the file?"))
        .await
        .unwrap();

    let sent = app.fake.delivered();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].body["msg_type"], "interactive");
    let card = sent[0].content();
    assert_eq!(
        card["body"]["elements"][0]["content"],
        "May I delete the file?"
    );
    assert_eq!(
        card_buttons(&card),
        pairs(&[("Allow once", "ap:4:once"), ("Deny", "ap:4:deny")])
    );
    assert_eq!(card["body"]["elements"][1]["type"], "primary");
    assert_eq!(card["body"]["elements"][2]["type"], "danger");
    assert_eq!(
        card["body"]["elements"][1]["behaviors"][0]["type"],
        "callback"
    );
}

#[tokio::test]
async fn a_long_question_carries_its_buttons_on_its_last_card_only() {
    let app = spawn_app().await;
    let long = "A long question, line after line.\n".repeat(1500);

    app.adapter
        .sender()
        .send(&question(&app, &long))
        .await
        .unwrap();

    let sent = app.fake.delivered();
    assert!(sent.len() >= 2);
    let (last, earlier) = sent.split_last().unwrap();
    for message in earlier {
        assert!(card_buttons(&message.content()).is_empty());
        assert!(message.body.to_string().len() <= 30 * 1024);
    }
    assert_eq!(card_buttons(&last.content()).len(), 2);
    assert!(last.body.to_string().len() <= 30 * 1024);
}

#[tokio::test]
async fn a_signed_press_reaches_the_core_and_gets_a_toast_and_the_new_card() {
    let app = spawn_app_with(encrypted()).await;
    *app.sink.reply.lock().unwrap() = ActionReply {
        notice: Some("Deleting.".to_owned()),
        update: Some("May I delete the file? **Allowed** by Alice.".to_owned()),
    };

    let response = app
        .post_encrypted(&press("ev-press-1", json!({"action": "ap:4:once"})))
        .await;

    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(
        answer["toast"],
        json!({"type": "info", "content": "Deleting."})
    );
    assert_eq!(answer["card"]["type"], "raw");
    let card = &answer["card"]["data"];
    assert_eq!(
        card["body"]["elements"][0]["content"],
        "May I delete the file? **Allowed** by Alice."
    );
    assert!(card_buttons(card).is_empty());
    let actions = app.sink.actions.lock().unwrap().clone();
    assert_eq!(actions.len(), 1);
    let action = &actions[0];
    assert_eq!(action.action.as_str(), "ap:4:once");
    assert_eq!(action.event_id.as_str(), "ev-press-1");
    assert_eq!(action.chat.as_str(), "oc_chat");
    assert_eq!(action.sender.id.as_str(), "ou_alice");
    assert_eq!(action.message_id.as_deref(), Some("om_question"));
}

#[tokio::test]
async fn a_press_the_core_knows_nothing_of_is_acknowledged_and_changes_nothing() {
    let app = spawn_app().await;

    let response = app
        .post_json(&press("ev-press-2", json!({"action": "ap:404:once"})))
        .await;

    assert_eq!(response.status(), 200);
    assert_eq!(response.json::<Value>().await.unwrap(), json!({}));
    assert_eq!(app.sink.actions.lock().unwrap().len(), 1);
    assert!(app.fake.updates().is_empty());
}

#[tokio::test]
async fn a_press_without_an_action_id_is_acknowledged_and_never_reaches_the_core() {
    let app = spawn_app().await;

    for (n, value) in [json!({"action": "two words"}), json!("ap:1:x"), Value::Null]
        .into_iter()
        .enumerate()
    {
        let response = app.post_json(&press(&format!("ev-bad-{n}"), value)).await;
        assert_eq!(response.status(), 200);
        assert_eq!(response.json::<Value>().await.unwrap(), json!({}));
    }

    assert!(app.sink.actions.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_forged_press_is_refused_before_the_core_hears_of_it() {
    let app = spawn_app_with(encrypted()).await;
    let mut forged = press("ev-forged", json!({"action": "ap:4:once"}));
    forged["header"]["token"] = json!("not-the-token");

    let wrong_token = app.post_encrypted(&forged).await;
    let raw = encrypted_body(&press("ev-unsigned", json!({"action": "ap:4:once"})));
    let unsigned = app.post_raw(raw, &[]).await;

    assert_eq!(wrong_token.status(), 401);
    assert_eq!(unsigned.status(), 401);
    assert!(app.sink.actions.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_press_the_core_cannot_take_gets_an_error_toast() {
    let app = spawn_app_with(Options {
        sink: SinkMode::Unavailable,
        ..Options::default()
    })
    .await;

    let response = app
        .post_json(&press("ev-press-3", json!({"action": "ap:4:once"})))
        .await;

    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["toast"]["type"], "error");
    assert!(answer.get("card").is_none());
}

#[tokio::test]
async fn a_slow_core_gets_the_press_acknowledged_and_the_card_updated_later() {
    let app = spawn_app_with(Options {
        ack_timeout_ms: 50,
        ..Options::default()
    })
    .await;
    let (release, held) = tokio::sync::oneshot::channel();
    *app.sink.held.lock().unwrap() = Some(held);
    *app.sink.reply.lock().unwrap() = ActionReply {
        notice: Some("Done.".to_owned()),
        update: Some("Allowed.".to_owned()),
    };

    let response = app
        .post_json(&press("ev-press-4", json!({"action": "ap:4:once"})))
        .await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.json::<Value>().await.unwrap(), json!({}));
    release.send(()).unwrap();

    eventually("the card updated", || async {
        !app.fake.updates().is_empty()
    })
    .await;
    let (message, update) = &app.fake.updates()[0];
    assert_eq!(message, "om_question");
    let card = update.content();
    assert_eq!(card["body"]["elements"][0]["content"], "Allowed.");
    assert!(card_buttons(&card).is_empty());
}

#[tokio::test]
async fn an_edit_replaces_the_card_and_its_buttons() {
    let app = spawn_app().await;
    let chat = question(&app, "").chat_ref();

    app.adapter
        .sender()
        .edit(&chat, "om_question", "Picked: **one**")
        .await
        .unwrap();

    let (message, update) = &app.fake.updates()[0];
    assert_eq!(message, "om_question");
    let card = update.content();
    assert_eq!(card["body"]["elements"][0]["content"], "Picked: **one**");
    assert!(card_buttons(&card).is_empty());
}
