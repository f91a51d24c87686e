//! Outbound: replies over real HTTP to the fake Discord REST API.

use std::time::Duration;

use axum::http::StatusCode;
use switchboard_contract::{LengthUnit, PlatformSender, SendError};

use switchboard_test_support::send::send_with_retries;

use crate::support::{TestAdapter, fixture};
use switchboard_discord::DiscordSettings;

#[tokio::test]
async fn a_dm_round_trip_replies_in_the_dm() {
    let app = TestAdapter::start().await;
    app.handler.on_message(&fixture("dm")).await;
    let inbound = app.sink.submitted().remove(0);
    let reply = TestAdapter::reply_to(&inbound, 1, "Sure, **ask away**.");

    app.sender.typing(&reply.chat_ref()).await;
    let (receipt, _) = send_with_retries(app.sender.as_ref(), &reply).await;

    let receipt = receipt.expect("delivered");
    let requests = app.fake.requests();
    assert_eq!(
        requests[0].path,
        "/api/v10/channels/500000000000000001/typing"
    );
    assert_eq!(
        requests[1].path,
        "/api/v10/channels/500000000000000001/messages"
    );
    let body = &requests[1].body;
    assert_eq!(
        body["content"], "Sure, **ask away**.",
        "Markdown passes through"
    );
    assert_eq!(
        body["message_reference"]["message_id"],
        "400000000000000001"
    );
    assert_eq!(body["message_reference"]["fail_if_not_exists"], false);
    assert_eq!(body["allowed_mentions"]["parse"], serde_json::json!([]));
    let created = app.fake.created();
    assert_eq!(receipt.message_ids, vec![created[0].id.to_string()]);
}

/// Whether the reply to `fixture_name` (sent by an adapter with
/// `reply_ping`) would notify its author.
async fn reply_pings(fixture_name: &str, reply_ping: bool) -> serde_json::Value {
    let app = TestAdapter::with_settings(DiscordSettings {
        reply_ping,
        ..DiscordSettings::default()
    })
    .await;
    app.handler.on_message(&fixture(fixture_name)).await;
    let inbound = app.sink.submitted().remove(0);
    let (receipt, _) = send_with_retries(
        app.sender.as_ref(),
        &TestAdapter::reply_to(&inbound, 1, "ok"),
    )
    .await;
    receipt.expect("delivered");
    let [created] = app.fake.created().try_into().expect("one message");
    assert!(
        created.body["message_reference"]["message_id"].is_string(),
        "still a reply"
    );
    assert_eq!(
        created.body["allowed_mentions"]["parse"],
        serde_json::json!([])
    );
    created.body["allowed_mentions"]["replied_user"].clone()
}

#[tokio::test]
async fn replies_ping_the_asker_only_in_servers_and_only_when_configured() {
    // By default no reply pings, in a DM or a server thread.
    assert_eq!(reply_pings("dm", false).await, false);
    assert_eq!(reply_pings("thread_reply", false).await, false);
    // `reply_ping` turns it on in servers; a DM never pings.
    assert_eq!(reply_pings("thread_reply", true).await, true);
    assert_eq!(reply_pings("channel_mention", true).await, true);
    assert_eq!(reply_pings("dm", true).await, false);
}

#[tokio::test]
async fn a_reply_in_a_thread_stays_in_the_thread() {
    let app = TestAdapter::start().await;
    app.handler.on_message(&fixture("thread_reply")).await;
    let inbound = app.sink.submitted().remove(0);

    let (receipt, _) = send_with_retries(
        app.sender.as_ref(),
        &TestAdapter::reply_to(&inbound, 2, "'static lives for the whole program."),
    )
    .await;

    receipt.expect("delivered");
    let [created] = app.fake.created().try_into().expect("one message");
    assert_eq!(created.channel_id, "600000000000000099");
    assert_eq!(
        created.body["message_reference"]["message_id"],
        "400000000000000011"
    );
}

#[tokio::test]
async fn a_5000_character_reply_is_split_at_2000_with_fences_intact() {
    let app = TestAdapter::start().await;
    app.handler.on_message(&fixture("channel_mention")).await;
    let inbound = app.sink.submitted().remove(0);
    let code: String = (0..200).map(|i| format!("let x{i:03} = {i};\n")).collect();
    let prose = "Lorem ipsum dolor sit amet. ".repeat(100);
    let text: String = format!("Here it is:\n\n```rust\n{code}```\n\nThat is all. {prose}")
        .chars()
        .take(5000)
        .collect();
    assert_eq!(LengthUnit::Chars.measure(&text), 5000);

    let (receipt, _) = send_with_retries(
        app.sender.as_ref(),
        &TestAdapter::reply_to(&inbound, 7, &text),
    )
    .await;

    let receipt = receipt.expect("delivered");
    let created = app.fake.created();
    assert_eq!(created.len(), 3);
    assert_eq!(receipt.message_ids.len(), 3);
    for (index, message) in created.iter().enumerate() {
        assert!(
            message.content.chars().count() <= 2000,
            "chunk {index} fits"
        );
        let fences = message
            .content
            .lines()
            .filter(|l| l.starts_with("```"))
            .count();
        assert_eq!(fences % 2, 0, "chunk {index} has balanced fences");
        assert_eq!(message.body["nonce"], format!("sb-7.{index}"));
        assert_eq!(
            message.body.get("message_reference").is_some(),
            index == 0,
            "only the first chunk is a reply"
        );
    }
    assert!(
        created[1].content.starts_with("```rust\n"),
        "the block reopens"
    );
}

#[tokio::test]
async fn every_send_carries_a_stable_enforced_nonce_across_a_retry() {
    let app = TestAdapter::start().await;
    app.fake.fail_creation(0, StatusCode::BAD_GATEWAY);
    app.handler.on_message(&fixture("dm")).await;
    let inbound = app.sink.submitted().remove(0);

    let (receipt, delivery) = send_with_retries(
        app.sender.as_ref(),
        &TestAdapter::reply_to(&inbound, 3, "hi"),
    )
    .await;

    receipt.expect("delivered after a retry");
    assert_eq!(delivery.attempts, 2);
    let requests = app.fake.message_requests();
    assert_eq!(requests.len(), 2);
    for request in &requests {
        assert_eq!(request.body["nonce"], "sb-3.0");
        assert_eq!(request.body["enforce_nonce"], true);
    }
    assert_eq!(app.fake.created().len(), 1);
}

#[tokio::test]
async fn a_short_429_is_waited_out_and_every_chunk_is_delivered_once() {
    let app = TestAdapter::start().await;
    app.handler.on_message(&fixture("dm")).await;
    let inbound = app.sink.submitted().remove(0);
    let text = format!("{}\n\n{}", "a".repeat(1500), "b".repeat(1500));
    // The first chunk goes through; the second is rate limited for 0.25 s.
    app.fake.rate_limit_creation(1, 0.25);

    let (receipt, delivery) = send_with_retries(
        app.sender.as_ref(),
        &TestAdapter::reply_to(&inbound, 4, &text),
    )
    .await;

    let receipt = receipt.expect("delivered");
    assert_eq!(
        delivery.attempts, 1,
        "a short wait stays inside the adapter"
    );
    let created = app.fake.created();
    assert_eq!(created.len(), 2);
    let ids: Vec<String> = created.iter().map(|m| m.id.to_string()).collect();
    assert_eq!(receipt.message_ids, ids);
    let requests = app.fake.message_requests();
    let nonces: Vec<_> = requests.iter().map(|r| r.body["nonce"].clone()).collect();
    assert_eq!(nonces, ["sb-4.0", "sb-4.1", "sb-4.1"]);
    assert!(
        requests[2].at - requests[1].at >= Duration::from_secs(1),
        "Retry-After (rounded up to 1 s) was honoured"
    );
}

#[tokio::test]
async fn a_long_429_goes_back_to_the_core_and_discord_is_not_asked_before_it_ends() {
    let app = TestAdapter::start().await;
    app.handler.on_message(&fixture("dm")).await;
    let inbound = app.sink.submitted().remove(0);
    let reply = TestAdapter::reply_to(&inbound, 8, "hi");
    app.fake.rate_limit_creation(0, 6.0);

    let first = app.sender.send(&reply).await;
    let Err(SendError::RetryAfter(wait)) = first else {
        panic!("a long rate limit is handed back: {first:?}");
    };
    assert!(wait >= Duration::from_secs(6), "{wait:?}");

    // A retry that comes early is answered without asking Discord.
    let early = app.sender.send(&reply).await;
    let Err(SendError::RetryAfter(left)) = early else {
        panic!("still rate limited: {early:?}");
    };
    assert!(left <= wait && !left.is_zero(), "{left:?}");
    assert_eq!(app.fake.message_requests().len(), 1);

    // The core waits what it was told, then retries.
    tokio::time::sleep(left).await;
    let receipt = app.sender.send(&reply).await.expect("delivered");

    let requests = app.fake.message_requests();
    assert_eq!(requests.len(), 2);
    assert!(
        requests[1].at - requests[0].at >= Duration::from_secs(6),
        "the retry came {:?} after the 429",
        requests[1].at - requests[0].at
    );
    let created = app.fake.created();
    assert_eq!(created.len(), 1, "the reply arrives once");
    assert_eq!(receipt.message_ids, [created[0].id.to_string()]);
}

#[tokio::test]
async fn a_forbidden_channel_is_a_permanent_failure() {
    let app = TestAdapter::start().await;
    app.fake.fail_creation(0, StatusCode::FORBIDDEN);
    app.handler.on_message(&fixture("dm")).await;
    let inbound = app.sink.submitted().remove(0);

    let (receipt, delivery) = send_with_retries(
        app.sender.as_ref(),
        &TestAdapter::reply_to(&inbound, 5, "hi"),
    )
    .await;

    let err = receipt.expect_err("not delivered");
    assert!(matches!(err, SendError::Permanent(_)), "{err}");
    assert!(!err.to_string().contains("test-token"));
    assert_eq!(delivery.attempts, 1);
}

#[tokio::test]
async fn the_typing_indicator_repeats_every_eight_seconds() {
    let app = TestAdapter::start().await;
    assert_eq!(
        app.sender.typing_interval(),
        Some(std::time::Duration::from_secs(8))
    );
}

/// A draft of the reply to `inbound`, showing `text`.
fn draft(
    inbound: &switchboard_contract::InboundMessage,
    text: &str,
    message_id: Option<&str>,
) -> switchboard_contract::Draft {
    let reply = TestAdapter::reply_to(inbound, 1, text);
    switchboard_contract::Draft {
        chat: reply.chat_ref(),
        reply_to: reply.reply_to,
        draft_id: 7,
        key: "sb-test-d7".to_owned(),
        message_id: message_id.map(str::to_owned),
        text: text.to_owned(),
    }
}

#[tokio::test]
async fn a_draft_grows_in_one_message_that_the_reply_completes() {
    let app = TestAdapter::start().await;
    app.handler.on_message(&fixture("channel_mention")).await;
    let inbound = app.sink.submitted().remove(0);
    assert_eq!(
        app.sender.draft_interval(&inbound_chat(&inbound)),
        Some(Duration::from_millis(1500)),
        "streaming is on by default, under Discord's five edits per five seconds"
    );

    let shown = app
        .sender
        .draft(&draft(&inbound, "Sure, ", None))
        .await
        .expect("shown")
        .expect("a message shows the draft");
    let again = app
        .sender
        .draft(&draft(&inbound, "Sure, one", Some(&shown)))
        .await
        .expect("edited");
    assert_eq!(again.as_deref(), Some(shown.as_str()));
    let mut reply = TestAdapter::reply_to(&inbound, 1, "Sure, one moment.");
    reply.replaces = Some(shown.clone());
    let (receipt, _) = send_with_retries(app.sender.as_ref(), &reply).await;

    assert_eq!(receipt.expect("delivered").message_ids, [shown.as_str()]);
    let created = app.fake.created();
    assert_eq!(created.len(), 1, "one message: {created:?}");
    assert_eq!(created[0].content, "Sure, one moment.");
    assert_eq!(
        created[0].body["message_reference"]["message_id"],
        inbound.message_id.clone().expect("an id"),
        "the draft replies to the asker like the reply"
    );
    let edits: Vec<_> = app
        .fake
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with(&format!("/messages/{shown}")))
        .collect();
    assert_eq!(edits.len(), 2);
}

#[tokio::test]
async fn a_reply_whose_draft_was_deleted_goes_out_as_new_messages() {
    let app = TestAdapter::start().await;
    app.handler.on_message(&fixture("dm")).await;
    let inbound = app.sink.submitted().remove(0);
    let long = format!("{}\n\n{}", "a".repeat(1500), "b".repeat(1500));
    let mut reply = TestAdapter::reply_to(&inbound, 2, &long);
    reply.replaces = Some("1999999999999999999".to_owned());

    let (receipt, _) = send_with_retries(app.sender.as_ref(), &reply).await;

    assert_eq!(receipt.expect("delivered").message_ids.len(), 2);
    let created = app.fake.created();
    assert_eq!(created.len(), 2, "both chunks posted anew");
    assert!(created[0].content.starts_with('a'));
    assert!(created[1].content.starts_with('b'));
}

#[tokio::test]
async fn streaming_off_means_no_drafts() {
    let app = TestAdapter::with_settings(DiscordSettings {
        stream_replies: false,
        ..DiscordSettings::default()
    })
    .await;
    app.handler.on_message(&fixture("dm")).await;
    let inbound = app.sink.submitted().remove(0);
    assert_eq!(app.sender.draft_interval(&inbound_chat(&inbound)), None);
}

fn inbound_chat(inbound: &switchboard_contract::InboundMessage) -> switchboard_contract::ChatRef {
    TestAdapter::reply_to(inbound, 0, "").chat_ref()
}
