//! Normalisation: what the adapter submits for each kind of update.

use serde_json::json;
use switchboard_contract::{AttachmentKind, ChatKind};

use crate::helpers::*;
use switchboard_test_support::telegram::{BOT_ID, me};

const GROUP: i64 = -100_200;

#[tokio::test]
async fn a_direct_message_is_submitted_with_its_ids() {
    let app = TestApp::spawn().await;
    let message = text_message(
        7,
        private_chat(USER_ID as i64),
        user(USER_ID, "Ada", false),
        "hello",
    );

    let inbound = app.deliver(update(1001, message)).await.expect("submitted");

    assert_eq!(inbound.platform.as_str(), "telegram");
    assert_eq!(inbound.account.as_str(), BOT_ID.to_string());
    assert_eq!(inbound.event_id.as_str(), "1001");
    assert_eq!(inbound.chat.as_str(), USER_ID.to_string());
    assert_eq!(inbound.chat_kind, ChatKind::Direct);
    assert_eq!(inbound.thread, None);
    assert_eq!(inbound.sender.id.as_str(), USER_ID.to_string());
    assert_eq!(inbound.sender.display_name.as_deref(), Some("Ada Tester"));
    assert!(!inbound.sender.is_bot);
    assert_eq!(inbound.text, "hello");
    assert!(inbound.mentions_bot);
    assert_eq!(inbound.message_id.as_deref(), Some("7"));
    assert_eq!(inbound.reply_to, None);
}

#[tokio::test]
async fn the_same_update_always_yields_the_same_event() {
    let app = TestApp::spawn().await;
    let message = text_message(7, private_chat(1), user(USER_ID, "Ada", false), "hi");

    let first = app
        .deliver(update(77, message.clone()))
        .await
        .expect("submitted");
    let again = app.deliver(update(77, message)).await.expect("submitted");

    assert_eq!(first, again);
    assert_eq!(first.event_id.as_str(), "77");
}

#[tokio::test]
async fn a_group_message_without_a_mention_is_not_addressed() {
    let app = TestApp::spawn().await;
    let message = text_message(8, group_chat(GROUP), user(USER_ID, "Ada", false), "lunch?");

    let inbound = app.deliver(update(2, message)).await.expect("submitted");

    assert_eq!(inbound.chat_kind, ChatKind::Group);
    assert!(!inbound.mentions_bot);
    assert_eq!(inbound.text, "lunch?");
}

#[tokio::test]
async fn a_mention_addresses_the_bot_and_is_stripped() {
    let app = TestApp::spawn().await;
    let text = "@switchboardbot, what is 2+2?";
    let message = with(
        text_message(9, group_chat(GROUP), user(USER_ID, "Ada", false), text),
        "entities",
        json!([entity("mention", 0, 15)]),
    );

    let inbound = app.deliver(update(3, message)).await.expect("submitted");

    assert!(inbound.mentions_bot);
    assert_eq!(inbound.text, "what is 2+2?");
}

#[tokio::test]
async fn a_mention_of_another_user_does_not_address_the_bot() {
    let app = TestApp::spawn().await;
    let message = with(
        text_message(
            9,
            group_chat(GROUP),
            user(USER_ID, "Ada", false),
            "@bob look",
        ),
        "entities",
        json!([entity("mention", 0, 4)]),
    );

    let inbound = app.deliver(update(3, message)).await.expect("submitted");

    assert!(!inbound.mentions_bot);
    assert_eq!(inbound.text, "@bob look");
}

#[tokio::test]
async fn a_text_mention_of_the_bot_addresses_it() {
    let app = TestApp::spawn().await;
    let mut mention = entity("text_mention", 4, 11);
    mention["user"] = me();
    let message = with(
        text_message(
            10,
            group_chat(GROUP),
            user(USER_ID, "Ada", false),
            "hey Switchboard help",
        ),
        "entities",
        json!([mention]),
    );

    let inbound = app.deliver(update(4, message)).await.expect("submitted");

    assert!(inbound.mentions_bot);
    assert_eq!(inbound.text, "hey help");
}

#[tokio::test]
async fn a_reply_to_the_bot_addresses_it() {
    let app = TestApp::spawn().await;
    let bots_message = text_message(50, group_chat(GROUP), me(), "an earlier answer");
    let message = with(
        text_message(
            51,
            group_chat(GROUP),
            user(USER_ID, "Ada", false),
            "and then?",
        ),
        "reply_to_message",
        bots_message,
    );

    let inbound = app.deliver(update(5, message)).await.expect("submitted");

    assert!(inbound.mentions_bot);
    assert_eq!(inbound.reply_to.as_deref(), Some("50"));
}

#[tokio::test]
async fn a_command_for_the_bot_addresses_it_without_the_bot_name() {
    let app = TestApp::spawn().await;
    let message = with(
        text_message(
            11,
            group_chat(GROUP),
            user(USER_ID, "Ada", false),
            "/status@SwitchboardBot",
        ),
        "entities",
        json!([entity("bot_command", 0, 22)]),
    );

    let inbound = app.deliver(update(6, message)).await.expect("submitted");

    assert!(inbound.mentions_bot);
    assert_eq!(inbound.text, "/status");
}

#[tokio::test]
async fn a_command_for_another_bot_is_not_submitted() {
    let app = TestApp::spawn().await;
    let message = with(
        text_message(
            12,
            group_chat(GROUP),
            user(USER_ID, "Ada", false),
            "/new@OtherBot",
        ),
        "entities",
        json!([entity("bot_command", 0, 13)]),
    );

    assert_eq!(app.deliver(update(7, message)).await, None);
}

#[tokio::test]
async fn a_free_response_chat_is_answered_without_a_mention() {
    let app = TestApp::spawn_with(|settings| settings.free_response_chats = vec![GROUP]).await;
    let message = text_message(
        13,
        group_chat(GROUP),
        user(USER_ID, "Ada", false),
        "anyone?",
    );

    let inbound = app.deliver(update(8, message)).await.expect("submitted");

    assert!(inbound.mentions_bot);
}

#[tokio::test]
async fn a_forum_topic_message_carries_its_thread() {
    let app = TestApp::spawn().await;
    // The topic's opening service message, which Telegram attaches as
    // `reply_to_message` to every message in the topic.
    let topic_root = json!({
        "message_id": 300,
        "date": 1_700_000_000,
        "chat": forum_chat(GROUP),
        "from": me(),
        "message_thread_id": 300,
        "forum_topic_created": {"name": "Ideas", "icon_color": 7_322_096},
        "is_topic_message": true,
    });
    let mut message = text_message(
        301,
        forum_chat(GROUP),
        user(USER_ID, "Ada", false),
        "@SwitchboardBot idea",
    );
    message["message_thread_id"] = json!(300);
    message["is_topic_message"] = json!(true);
    message["reply_to_message"] = topic_root;
    message["entities"] = json!([entity("mention", 0, 15)]);

    let inbound = app.deliver(update(9, message)).await.expect("submitted");

    assert_eq!(inbound.thread.as_ref().map(|t| t.as_str()), Some("300"));
    assert_eq!(inbound.reply_to, None, "the topic root is not a reply");
    assert!(inbound.mentions_bot);
    assert_eq!(inbound.text, "idea");
}

#[tokio::test]
async fn a_topic_opened_by_the_bot_does_not_address_it() {
    let app = TestApp::spawn().await;
    let topic_root = json!({
        "message_id": 400,
        "date": 1_700_000_000,
        "chat": forum_chat(GROUP),
        "from": me(),
        "message_thread_id": 400,
        "forum_topic_created": {"name": "Bot topic", "icon_color": 7_322_096},
        "is_topic_message": true,
    });
    let mut message = text_message(
        401,
        forum_chat(GROUP),
        user(USER_ID, "Ada", false),
        "chatting",
    );
    message["message_thread_id"] = json!(400);
    message["is_topic_message"] = json!(true);
    message["reply_to_message"] = topic_root;

    let inbound = app.deliver(update(10, message)).await.expect("submitted");

    assert!(!inbound.mentions_bot);
}

#[tokio::test]
async fn a_caption_counts_as_text() {
    let app = TestApp::spawn().await;
    let message = json!({
        "message_id": 14,
        "date": 1_700_000_000,
        "chat": group_chat(GROUP),
        "from": user(USER_ID, "Ada", false),
        "photo": [{"file_id": "f", "file_unique_id": "u", "width": 10, "height": 10}],
        "caption": "@SwitchboardBot what is this?",
        "caption_entities": [entity("mention", 0, 15)],
    });

    let inbound = app.deliver(update(11, message)).await.expect("submitted");

    assert!(inbound.mentions_bot);
    assert_eq!(inbound.text, "what is this?");
    assert_eq!(inbound.attachments.len(), 1);
    assert_eq!(inbound.attachments[0].kind, AttachmentKind::Image);
    assert_eq!(
        inbound.attachments[0].url, None,
        "file URLs would carry the token"
    );
}

#[tokio::test]
async fn a_message_from_a_bot_is_marked_as_such() {
    let app = TestApp::spawn().await;
    let message = text_message(15, private_chat(77), user(77, "Robo", true), "beep");

    let inbound = app.deliver(update(12, message)).await.expect("submitted");

    assert!(inbound.sender.is_bot);
}

#[tokio::test]
async fn mention_offsets_count_utf16_units() {
    let app = TestApp::spawn().await;
    // "😀 " is three UTF-16 units, so the mention starts at offset 3.
    let message = with(
        text_message(
            16,
            group_chat(GROUP),
            user(USER_ID, "Ada", false),
            "😀 @SwitchboardBot hi",
        ),
        "entities",
        json!([entity("mention", 3, 15)]),
    );

    let inbound = app.deliver(update(13, message)).await.expect("submitted");

    assert!(inbound.mentions_bot);
    assert_eq!(inbound.text, "😀 hi");
}

#[tokio::test]
async fn an_edited_message_is_not_submitted() {
    let app = TestApp::spawn().await;
    let message = text_message(17, private_chat(1), user(USER_ID, "Ada", false), "edited");
    let edit = json!({"update_id": 14, "edited_message": message});

    assert_eq!(app.deliver(edit).await, None);
}
