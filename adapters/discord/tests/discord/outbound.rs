//! Outbound: replies over real HTTP to the fake Discord REST API.

use axum::http::StatusCode;
use switchboard_contract::{LengthUnit, PlatformSender, SendError};

use switchboard_test_support::send::send_with_retries;

use crate::support::{TestAdapter, fixture};

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
async fn a_429_then_success_delivers_every_chunk_once() {
    let app = TestAdapter::start().await;
    app.handler.on_message(&fixture("dm")).await;
    let inbound = app.sink.submitted().remove(0);
    let text = format!("{}\n\n{}", "a".repeat(1500), "b".repeat(1500));
    // The first chunk goes through; the second is rate limited.
    app.fake.fail_creation(1, StatusCode::TOO_MANY_REQUESTS);

    let (receipt, delivery) = send_with_retries(
        app.sender.as_ref(),
        &TestAdapter::reply_to(&inbound, 4, &text),
    )
    .await;

    let receipt = receipt.expect("delivered");
    assert_eq!(delivery.rate_limited(), 1);
    assert_eq!(delivery.attempts, 2);
    let created = app.fake.created();
    assert_eq!(
        created.len(),
        2,
        "the resent first chunk is not shown twice"
    );
    let ids: Vec<String> = created.iter().map(|m| m.id.to_string()).collect();
    assert_eq!(receipt.message_ids, ids);
    let nonces: Vec<_> = app
        .fake
        .message_requests()
        .iter()
        .map(|r| r.body["nonce"].clone())
        .collect();
    assert_eq!(nonces, ["sb-4.0", "sb-4.1", "sb-4.0", "sb-4.1"]);
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
