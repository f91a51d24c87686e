//! Buttons: an inline keyboard under a question, taps answered and the
//! question edited, bad taps refused without harm.

use serde_json::{Value, json};
use switchboard_contract::{ActionId, ActionReply, Button, ButtonStyle, ChatKind, OutboundMessage};
use switchboard_test_support::telegram::TgUser;
use tokio_util::sync::CancellationToken;

use crate::helpers::*;

const ADA: TgUser = TgUser {
    id: USER_ID as i64,
    first_name: "Ada",
};

fn question(chat: i64, text: &str) -> OutboundMessage {
    let mut message = outbound(chat, None, None, text);
    message.buttons = vec![
        Button::new(ActionId::parse("ap:7:once").unwrap(), "Allow once")
            .styled(ButtonStyle::Primary),
        Button::new(ActionId::parse("ap:7:deny").unwrap(), "Deny").styled(ButtonStyle::Danger),
    ];
    message
}

/// A `callback_query` update with `data` under message 5000 of `chat`.
fn tap_update(update_id: u32, chat: Value, data: Value) -> Value {
    json!({"update_id": update_id, "callback_query": {
        "id": format!("cbq-{update_id}"),
        "from": user(USER_ID, "Ada", false),
        "chat_instance": "77",
        "data": data,
        "message": text_message(5000, chat, user(999, "Bot", true), "May I?"),
    }})
}

fn buttons(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(label, data)| ((*label).to_owned(), (*data).to_owned()))
        .collect()
}

#[tokio::test]
async fn a_question_shows_its_buttons_under_its_last_part_only() {
    let app = TestApp::spawn().await;
    let long = "A long question. ".repeat(400);

    let receipt = app.sender().send(&question(4242, &long)).await.unwrap();

    assert!(receipt.message_ids.len() >= 2);
    let ids: Vec<i64> = receipt
        .message_ids
        .iter()
        .map(|id| id.parse().unwrap())
        .collect();
    let (last, earlier) = ids.split_last().unwrap();
    for id in earlier {
        assert!(app.fake.buttons(4242, *id).is_empty());
    }
    assert_eq!(
        app.fake.buttons(4242, *last),
        buttons(&[("Allow once", "ap:7:once"), ("Deny", "ap:7:deny")])
    );
    let calls = app.fake.calls("sendMessage");
    assert_eq!(
        calls.last().unwrap()["reply_markup"]["inline_keyboard"][1][0]["callback_data"],
        "ap:7:deny"
    );
}

#[tokio::test]
async fn a_question_that_replaces_its_draft_puts_the_buttons_on_the_draft() {
    let app = TestApp::spawn().await;
    let mut message = question(-1005, "May I run `ls`?");
    message.replaces = Some("4711".to_owned());

    let receipt = app.sender().send(&message).await.unwrap();

    assert_eq!(receipt.message_ids, ["4711"]);
    let edits = app.fake.calls("editMessageText");
    assert_eq!(edits.len(), 1);
    assert_eq!(
        edits[0]["reply_markup"]["inline_keyboard"][0][0]["callback_data"],
        "ap:7:once"
    );
    assert!(app.fake.calls("sendMessage").is_empty());
}

#[tokio::test]
async fn a_tap_through_polling_reaches_the_core_is_answered_and_edits_the_question() {
    let app = TestApp::spawn().await;
    let receipt = app
        .sender()
        .send(&question(ADA.id, "May I?"))
        .await
        .unwrap();
    let message_id: i64 = receipt.message_ids[0].parse().unwrap();
    *app.sink.reply.lock().unwrap() = ActionReply {
        notice: Some("Allowed once.".to_owned()),
        update: Some("May I? **Allowed** by Ada.".to_owned()),
    };

    let query = app.fake.tap(ADA, ADA.id, message_id, "ap:7:once");
    let shutdown = CancellationToken::new();
    let worker = tokio::spawn(app.adapter.run_polling(shutdown.clone()));
    app.fake
        .wait_for("the question edited", || {
            !app.fake.calls("editMessageText").is_empty()
        })
        .await;
    shutdown.cancel();
    worker.await.unwrap().unwrap();

    let actions = app.sink.actions();
    assert_eq!(actions.len(), 1);
    let action = &actions[0];
    assert_eq!(action.action.as_str(), "ap:7:once");
    assert_eq!(action.event_id.as_str(), query);
    assert_eq!(action.chat.as_str(), ADA.id.to_string());
    assert_eq!(action.chat_kind, ChatKind::Direct);
    assert_eq!(action.sender.id.as_str(), USER_ID.to_string());
    assert_eq!(action.message_id, Some(message_id.to_string()));
    let answers = app.fake.answers();
    assert_eq!(answers.len(), 1);
    assert_eq!(answers[0]["callback_query_id"], query);
    assert_eq!(answers[0]["text"], "Allowed once.");
    assert_eq!(
        app.fake.chat_view(ADA.id),
        ["May I? <b>Allowed</b> by Ada."]
    );
    assert!(app.fake.buttons(ADA.id, message_id).is_empty());
}

#[tokio::test]
async fn a_tap_the_core_knows_nothing_of_is_answered_and_changes_nothing() {
    let app = TestApp::spawn().await;

    let update = tap_update(70, group_chat(-1009), json!("ap:404:once"));
    assert_eq!(app.deliver(update).await, None);

    assert_eq!(app.sink.actions()[0].chat_kind, ChatKind::Group);
    let answers = app.fake.answers();
    assert_eq!(answers.len(), 1);
    assert_eq!(answers[0]["callback_query_id"], "cbq-70");
    assert!(answers[0].get("text").is_none());
    assert!(app.fake.calls("editMessageText").is_empty());
}

#[tokio::test]
async fn a_tap_with_data_that_is_no_action_id_is_answered_and_never_reaches_the_core() {
    let app = TestApp::spawn().await;

    for (n, data) in [json!("has space"), json!("x".repeat(65)), Value::Null]
        .into_iter()
        .enumerate()
    {
        let update = tap_update(80 + n as u32, private_chat(ADA.id), data);
        assert_eq!(app.deliver(update).await, None);
    }

    assert!(app.sink.actions().is_empty());
    assert_eq!(app.fake.answers().len(), 3);
    assert!(app.fake.calls("editMessageText").is_empty());
}

#[tokio::test]
async fn a_tap_the_core_cannot_take_gets_a_try_again_toast() {
    let app = TestApp::spawn().await;
    *app.sink.unavailable.lock().unwrap() = true;

    let update = tap_update(90, private_chat(ADA.id), json!("ap:7:once"));
    assert_eq!(app.deliver(update).await, None);

    let answers = app.fake.answers();
    assert_eq!(answers.len(), 1);
    assert!(answers[0]["text"].as_str().unwrap().contains("try again"));
    assert!(app.fake.calls("editMessageText").is_empty());
}

#[tokio::test]
async fn an_edit_replaces_the_text_and_removes_the_keyboard() {
    let app = TestApp::spawn().await;
    let receipt = app
        .sender()
        .send(&question(-1001, "Pick one"))
        .await
        .unwrap();
    let id = &receipt.message_ids[0];
    let chat = question(-1001, "").chat_ref();

    app.sender().edit(&chat, id, "Picked: *one*").await.unwrap();

    let id: i64 = id.parse().unwrap();
    assert_eq!(app.fake.chat_view(-1001), ["Picked: <i>one</i>"]);
    assert!(app.fake.buttons(-1001, id).is_empty());
    let edit = &app.fake.calls("editMessageText")[0];
    assert_eq!(edit["reply_markup"], json!({"inline_keyboard": []}));
    assert!(app.sender().edit(&chat, "not-a-number", "x").await.is_err());
}
