//! Inbound: recorded MESSAGE_CREATE payloads through the handler to the sink.

use switchboard_contract::{ChatKind, Submitted};
use switchboard_discord::{DiscordSettings, Handled, Skip};

use crate::support::{TestAdapter, fixture};

#[tokio::test]
async fn a_dm_is_a_direct_chat_addressed_to_the_bot() {
    let app = TestAdapter::start().await;

    let handled = app.handler.on_message(&fixture("dm")).await;

    assert_eq!(handled, Handled::Submitted(Submitted::Accepted));
    let [inbound] = app.sink.submitted().try_into().expect("one submission");
    assert_eq!(inbound.platform.as_str(), "discord");
    assert_eq!(inbound.account.as_str(), "900000000000000001");
    assert_eq!(inbound.chat_kind, ChatKind::Direct);
    assert!(inbound.mentions_bot);
    assert_eq!(inbound.chat.as_str(), "500000000000000001");
    assert_eq!(inbound.event_id.as_str(), "400000000000000001");
    assert_eq!(inbound.sender.id.as_str(), "800000000000000001");
    assert_eq!(inbound.sender.display_name.as_deref(), Some("Alice"));
    assert!(!inbound.sender.is_bot);
    assert_eq!(inbound.text, "hello, can you help me with Rust?");
}

#[tokio::test]
async fn a_channel_message_without_a_mention_is_not_addressed() {
    let app = TestAdapter::start().await;

    let handled = app.handler.on_message(&fixture("channel_plain")).await;

    assert_eq!(handled, Handled::Submitted(Submitted::Ignored));
    let [inbound] = app.sink.submitted().try_into().expect("one submission");
    assert_eq!(inbound.chat_kind, ChatKind::Group);
    assert!(!inbound.mentions_bot);
}

#[tokio::test]
async fn a_mention_is_addressed_and_stripped_from_the_text() {
    let app = TestAdapter::start().await;

    let handled = app.handler.on_message(&fixture("channel_mention")).await;

    assert_eq!(handled, Handled::Submitted(Submitted::Accepted));
    let [inbound] = app.sink.submitted().try_into().expect("one submission");
    assert_eq!(inbound.chat_kind, ChatKind::Group);
    assert!(inbound.mentions_bot);
    assert_eq!(inbound.text, "what is a lifetime?");
    assert_eq!(inbound.chat.as_str(), "600000000000000001");
    assert_eq!(
        inbound.sender.display_name.as_deref(),
        Some("Ali"),
        "server nick first"
    );
    assert_eq!(inbound.message_id.as_deref(), Some("400000000000000003"));
}

#[tokio::test]
async fn a_free_response_channel_needs_no_mention() {
    let app = TestAdapter::with_settings(DiscordSettings {
        free_response_channels: vec!["600000000000000001".to_owned()],
        ..DiscordSettings::default()
    })
    .await;

    let handled = app.handler.on_message(&fixture("channel_plain")).await;

    assert_eq!(handled, Handled::Submitted(Submitted::Accepted));
    assert!(app.sink.submitted()[0].mentions_bot);
}

#[tokio::test]
async fn a_reply_to_the_bot_in_a_thread_is_addressed_and_the_thread_is_the_chat() {
    let app = TestAdapter::start().await;

    let handled = app.handler.on_message(&fixture("thread_reply")).await;

    assert_eq!(handled, Handled::Submitted(Submitted::Accepted));
    let [inbound] = app.sink.submitted().try_into().expect("one submission");
    assert!(inbound.mentions_bot, "a reply to the bot addresses it");
    assert_eq!(inbound.chat.as_str(), "600000000000000099");
    assert_eq!(inbound.reply_to.as_deref(), Some("400000000000000010"));
    assert_eq!(inbound.text, "and how does 'static differ?");
}

#[tokio::test]
async fn a_bot_author_is_ignored() {
    let app = TestAdapter::start().await;

    let handled = app.handler.on_message(&fixture("bot_author")).await;

    assert_eq!(handled, Handled::Skipped(Skip::Bot));
    assert!(app.sink.submitted().is_empty());
}

#[tokio::test]
async fn a_webhook_message_is_ignored() {
    let app = TestAdapter::start().await;

    let handled = app.handler.on_message(&fixture("webhook")).await;

    assert_eq!(handled, Handled::Skipped(Skip::Webhook));
    assert!(app.sink.submitted().is_empty());
}

#[tokio::test]
async fn the_bots_own_message_is_ignored() {
    let app = TestAdapter::start().await;
    let own = *fixture("thread_reply")
        .referenced_message
        .expect("the fixture replies to the bot");

    let handled = app.handler.on_message(&own).await;

    assert_eq!(handled, Handled::Skipped(Skip::OwnMessage));
    assert!(app.sink.submitted().is_empty());
}

#[tokio::test]
async fn the_same_message_twice_has_one_event_id_and_is_handled_once() {
    let app = TestAdapter::start().await;
    let message = fixture("channel_mention");

    let first = app.handler.on_message(&message).await;
    let second = app.handler.on_message(&message).await;

    assert_eq!(first, Handled::Submitted(Submitted::Accepted));
    assert_eq!(second, Handled::Submitted(Submitted::Duplicate));
    let [a, b] = app.sink.submitted().try_into().expect("two submissions");
    assert_eq!(a.event_id, b.event_id);
    assert_eq!(a.event_id.as_str(), "400000000000000003");
}

#[tokio::test]
async fn a_message_before_ready_is_not_submitted() {
    let app = TestAdapter::start().await;
    let fresh = switchboard_discord::InboundHandler::new(
        app.sink.clone(),
        switchboard_discord::Rest::new(
            &secrecy::SecretString::from("test-token"),
            Some(&app.fake.url()),
        ),
        &DiscordSettings::default(),
    )
    .expect("handler builds");

    assert_eq!(fresh.on_message(&fixture("dm")).await, Handled::NotReady);
    assert!(app.sink.submitted().is_empty());
}

#[tokio::test]
async fn auto_thread_moves_a_mentioned_conversation_into_a_new_thread() {
    let app = TestAdapter::with_settings(DiscordSettings {
        auto_thread: true,
        ..DiscordSettings::default()
    })
    .await;

    let handled = app.handler.on_message(&fixture("channel_mention")).await;

    assert_eq!(handled, Handled::Submitted(Submitted::Accepted));
    let requests = app.fake.requests();
    assert_eq!(
        requests[0].path,
        "/api/v10/channels/600000000000000001/messages/400000000000000003/threads"
    );
    assert_eq!(requests[0].body["name"], "what is a lifetime?");
    let inbound = &app.sink.submitted()[0];
    assert_eq!(
        inbound.chat.as_str(),
        "400000000000000003",
        "the thread's id"
    );
    assert_eq!(
        inbound.message_id, None,
        "no reply reference across channels"
    );

    // A follow-up in that thread needs no mention.
    let mut follow_up = fixture("channel_plain");
    follow_up.channel_id = serenity::model::id::ChannelId::new(400_000_000_000_000_003);
    follow_up.id = serenity::model::id::MessageId::new(400_000_000_000_000_004);
    let handled = app.handler.on_message(&follow_up).await;
    assert_eq!(handled, Handled::Submitted(Submitted::Accepted));
    assert_eq!(app.fake.requests().len(), 1, "no second thread");
}
