//! The Telegram adapter wired into the gateway end to end: an update from a
//! fake Bot API (long polling) is answered through the agent and the outbox
//! with `sendMessage`, once even when the update is delivered again.

use serde_json::{Value, json};

use switchboard_test_support::eventually;
use switchboard_test_support::telegram::FakeTelegram;

use crate::helpers::{FakeLlm, TestApp, telegram_settings};

fn dm_update(update_id: u32, message_id: u32, text: &str) -> Value {
    json!({"update_id": update_id, "message": {
        "message_id": message_id, "date": 1_700_000_000,
        "chat": {"id": 777, "type": "private", "first_name": "Ada"},
        "from": {"id": 777, "is_bot": false, "first_name": "Ada"},
        "text": text
    }})
}

#[tokio::test]
async fn a_telegram_update_is_answered_once_through_the_gateway() {
    let telegram = FakeTelegram::start().await;
    let llm = FakeLlm::echo().await;
    let gateway =
        TestApp::spawn_with(&llm, |s| s.telegram = Some(telegram_settings(&telegram))).await;

    telegram.push(dm_update(1, 10, "hello telegram"));
    telegram
        .wait_for("the reply", || !telegram.sent().is_empty())
        .await;
    // The same update again (as after a restart of the poller), then a new
    // one: the chat's messages are answered in order, so the reply to the
    // new one comes after any second reply to the first.
    telegram.push(dm_update(1, 10, "hello telegram"));
    telegram.push(dm_update(2, 11, "and then"));
    telegram
        .wait_for("the reply to the next update", || telegram.sent().len() > 1)
        .await;
    telegram.settled().await;

    let sent = telegram.sent();
    assert_eq!(sent.len(), 2, "one reply per update: {sent:?}");
    assert_eq!(sent[0].chat_id, 777);
    assert!(sent[0].text.contains("echo: hello telegram"), "{sent:?}");
    assert!(sent[1].text.contains("echo: and then"), "{sent:?}");
    assert_eq!(sent[0].body["parse_mode"], "HTML");
    assert_eq!(llm.requests().len(), 2);
    let statuses = || async {
        sqlx::query_scalar::<_, String>("SELECT status FROM outbox")
            .fetch_all(&mut *gateway.gateway.store.conn().await.expect("conn"))
            .await
            .expect("rows")
    };
    eventually("two outbox rows, both marked sent", || async {
        statuses().await == ["sent", "sent"]
    })
    .await;
    gateway.stop().await;
}

#[tokio::test]
async fn group_members_reach_the_model_by_name_and_direct_chats_stay_bare() {
    use switchboard_test_support::telegram::{BOT_USERNAME, TgUser};
    const ADA: TgUser = TgUser {
        id: 777,
        first_name: "Ada",
    };
    const BOB: TgUser = TgUser {
        id: 888,
        first_name: "Bob",
    };
    const GROUP: i64 = -100_123;
    let telegram = FakeTelegram::start().await;
    let llm = FakeLlm::echo().await;
    let gateway =
        TestApp::spawn_with(&llm, |s| s.telegram = Some(telegram_settings(&telegram))).await;

    telegram
        .ask_in_group(
            GROUP,
            ADA,
            &format!("@{BOT_USERNAME} remember the number 7"),
        )
        .await;
    telegram
        .ask_in_group(
            GROUP,
            BOB,
            &format!("@{BOT_USERNAME} who asked about the number?"),
        )
        .await;
    telegram.ask(ADA, "just us now").await;

    let requests = llm.requests();
    let users = |index: usize| -> Vec<String> {
        requests[index].json()["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .filter(|m| m["role"] == "user")
            .map(|m| m["content"].as_str().expect("text").to_owned())
            .collect()
    };
    let group = users(1);
    assert_eq!(group.len(), 2, "{group:?}");
    assert!(group[0].starts_with("[Ada] "), "{group:?}");
    assert!(group[0].ends_with("remember the number 7"), "{group:?}");
    assert!(group[1].starts_with("[Bob] "), "{group:?}");
    // The first turn's entry is replayed as it was sent: the prefix holds.
    assert_eq!(users(0)[0], group[0]);
    assert_eq!(users(2), ["just us now"], "a direct chat is not labelled");
    gateway.stop().await;
}
