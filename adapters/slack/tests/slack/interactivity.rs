//! Button presses over the Events API's interactivity route.

use switchboard_contract::{ActionId, ActionReply, Button, ChatKind};
use switchboard_test_support::slack::{TEAM_ID, USER_ID, block_actions};

use crate::helpers::{eventually, outbound, spawn_app};

#[tokio::test]
async fn a_signed_press_reaches_act_and_the_message_is_updated() {
    let app = spawn_app().await;
    let thread = "1700000400.000001";
    let mut question = outbound("C0GENERAL", Some(thread), "Deploy to production?", "sb-3-1");
    question.buttons = vec![Button::new(ActionId::parse("ap:5:allow").unwrap(), "Allow")];
    let receipt = app.sender.send(&question).await.unwrap();
    let ts = receipt.message_ids[0].clone();
    app.sink.reply_with(ActionReply {
        notice: Some("Deploying now.".to_owned()),
        update: Some("Deploy to production? **Allowed.**".to_owned()),
    });

    let delivered = app
        .delivery
        .interaction(
            &app.interactivity_url(),
            &block_actions(TEAM_ID, "C0GENERAL", &ts, Some(thread), "ap:5:allow"),
        )
        .await;

    assert_eq!(delivered.statuses, [200]);
    eventually("the press at the core", || async {
        app.sink.actions().len() == 1
    })
    .await;
    let action = &app.sink.actions()[0];
    assert_eq!(action.action.as_str(), "ap:5:allow");
    assert_eq!(action.account.as_str(), TEAM_ID);
    assert_eq!(action.chat.as_str(), "C0GENERAL");
    assert_eq!(action.chat_kind, ChatKind::Group);
    assert_eq!(action.thread.as_ref().map(|t| t.as_str()), Some(thread));
    assert_eq!(action.sender.id.as_str(), USER_ID);
    assert_eq!(action.message_id.as_deref(), Some(ts.as_str()));
    assert!(action.event_id.as_str().starts_with("trig."));

    eventually("the message updated", || async {
        app.fake.posted_in("C0GENERAL")[0].text == "Deploy to production? *Allowed.*"
    })
    .await;
    let updated = &app.fake.posted_in("C0GENERAL")[0];
    assert_eq!(
        updated.blocks.as_array().unwrap().len(),
        1,
        "the buttons are gone"
    );
    eventually("the notice", || async {
        !app.fake.calls_to("chat.postEphemeral").is_empty()
    })
    .await;
    let notice = &app.fake.calls_to("chat.postEphemeral")[0];
    assert_eq!(notice.args["user"], USER_ID);
    assert_eq!(notice.args["channel"], "C0GENERAL");
    assert_eq!(notice.args["thread_ts"], thread);
    assert_eq!(notice.args["text"], "Deploying now.");
}

#[tokio::test]
async fn a_press_of_a_button_that_is_not_the_cores_still_gets_a_200() {
    let app = spawn_app().await;

    let delivered = app
        .delivery
        .interaction(
            &app.interactivity_url(),
            &block_actions(TEAM_ID, "C0GENERAL", "1.2", None, "not an action id"),
        )
        .await;

    assert_eq!(delivered.statuses, [200]);
    assert!(app.sink.actions().is_empty());
}

#[tokio::test]
async fn a_press_the_core_knows_nothing_of_changes_nothing() {
    let app = spawn_app().await;

    let delivered = app
        .delivery
        .interaction(
            &app.interactivity_url(),
            &block_actions(TEAM_ID, "D0DM", "1700000400.000009", None, "ap:404:allow"),
        )
        .await;

    assert_eq!(delivered.statuses, [200]);
    eventually("the press at the core", || async {
        app.sink.actions().len() == 1
    })
    .await;
    assert_eq!(app.sink.actions()[0].chat_kind, ChatKind::Direct);
    assert!(app.fake.calls_to("chat.update").is_empty());
    assert!(app.fake.calls_to("chat.postEphemeral").is_empty());
}
