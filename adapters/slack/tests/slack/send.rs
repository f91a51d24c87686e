//! Outbound: splitting and rendering, rate limits and errors, drafts,
//! buttons and edits, and what a redelivery does.

use std::time::Duration;

use switchboard_contract::{
    AccountId, ActionId, Button, ButtonStyle, ChatId, ChatRef, Draft, OutboundMessage,
    PlatformName, SendError, ThreadId,
};
use switchboard_slack::TEXT_LIMIT;
use switchboard_test_support::send::send_with_retries;
use switchboard_test_support::slack::{Failure, Posted, TEAM_ID};

use crate::helpers::{RecordingSink, TestApp, outbound, restarted_sender, spawn_app, spawn_with};

/// About 10,000 characters of Markdown with a long code block in the middle.
fn long_answer() -> String {
    let prose = "The **quick** brown fox & its _friends_ jump over the lazy dog. ".repeat(45);
    let code = format!(
        "```rust\n{}```",
        "let value = compute(a < b, &c);\n".repeat(140)
    );
    format!("# Answer\n\n{prose}\n\n{code}\n\n{prose}")
}

#[tokio::test]
async fn a_long_answer_is_split_into_rendered_messages_without_breaking_a_fence() {
    let app = spawn_app().await;
    let text = long_answer();
    assert!(text.chars().count() >= 10_000, "{}", text.chars().count());

    let receipt = app
        .sender
        .send(&outbound("D0DM", None, &text, "sb-2-1"))
        .await
        .unwrap();

    let posted = app.fake.posted_in("D0DM");
    assert!(posted.len() >= 3, "{} parts", posted.len());
    assert_eq!(
        receipt.message_ids,
        posted.iter().map(|p| p.ts.clone()).collect::<Vec<_>>()
    );
    for (index, part) in posted.iter().enumerate() {
        assert!(part.text.chars().count() <= TEXT_LIMIT, "part {index}");
        assert_eq!(
            part.text.matches("```").count() % 2,
            0,
            "part {index}: {}",
            part.text
        );
        assert!(!part.text.contains("**") && !part.text.contains("```rust"));
        assert_eq!(part.metadata["event_type"], "switchboard_reply");
        assert_eq!(part.metadata["event_payload"]["key"], "sb-2-1");
        assert_eq!(part.metadata["event_payload"]["part"], index);
    }
    assert!(
        posted[0]
            .text
            .starts_with("*Answer*\n\nThe *quick* brown fox &amp; its _friends_")
    );
    assert!(
        posted
            .iter()
            .any(|p| p.text.contains("compute(a &lt; b, &amp;c)"))
    );
}

#[tokio::test]
async fn a_429_surfaces_as_retry_after_with_slacks_wait() {
    let app = spawn_app().await;
    app.fake
        .fail_next("chat.postMessage", 1, Failure::RateLimited(7));
    let message = outbound("D0DM", None, "hello", "sb-2-2");

    let first = app.sender.send(&message).await;
    let (retried, delivery) = send_with_retries(app.sender.as_ref(), &message).await;

    assert!(
        matches!(first, Err(SendError::RetryAfter(wait)) if wait == Duration::from_secs(7)),
        "{first:?}"
    );
    assert!(retried.is_ok());
    assert_eq!(delivery.attempts, 1);
    assert_eq!(app.fake.posted_in("D0DM").len(), 1);
}

#[tokio::test]
async fn slack_errors_are_permanent_or_transient() {
    let app = spawn_app().await;
    let message = outbound("C0GONE", None, "hello", "sb-2-3");
    let cases = [
        (Failure::Error("channel_not_found"), "permanent"),
        (Failure::Error("not_in_channel"), "permanent"),
        (Failure::Error("invalid_auth"), "permanent"),
        (Failure::Error("internal_error"), "transient"),
        (Failure::Status(503), "transient"),
    ];

    for (failure, expected) in cases {
        app.fake.fail_next("chat.postMessage", 1, failure.clone());
        let outcome = match app.sender.send(&message).await {
            Err(SendError::Permanent(_)) => "permanent",
            Err(SendError::Transient(_)) => "transient",
            other => panic!("{failure:?}: {other:?}"),
        };
        assert_eq!(outcome, expected, "{failure:?}");
    }
}

#[tokio::test]
async fn a_retry_after_a_failed_part_posts_only_the_rest() {
    let app = spawn_app().await;
    let message = outbound("D0DM", None, &long_answer(), "sb-2-4");
    fail_the_second_post(&app);

    let (receipt, delivery) = send_with_retries(app.sender.as_ref(), &message).await;

    let receipt = receipt.unwrap();
    assert_eq!(delivery.attempts, 2);
    let posted = app.fake.posted_in("D0DM");
    assert_eq!(receipt.message_ids.len(), posted.len(), "no part twice");
    assert_eq!(part_numbers(&posted), (0..posted.len()).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_redelivery_skips_the_parts_an_earlier_process_posted() {
    let app = spawn_app().await;
    let message = outbound("D0DM", None, &long_answer(), "sb-2-5");
    fail_the_second_post(&app);
    assert!(app.sender.send(&message).await.is_err());
    assert_eq!(app.fake.posted_in("D0DM").len(), 1);

    // Another process (or this one after a restart) knows nothing of it.
    let restarted = restarted_sender(&app.fake).await;
    let redelivery = OutboundMessage {
        redelivery: true,
        ..message
    };
    let receipt = restarted.send(&redelivery).await.unwrap();

    let posted = app.fake.posted_in("D0DM");
    assert_eq!(
        receipt.message_ids,
        posted.iter().map(|p| p.ts.clone()).collect::<Vec<_>>()
    );
    assert_eq!(
        part_numbers(&posted),
        (0..posted.len()).collect::<Vec<_>>(),
        "each part once"
    );
    let lookup = &app.fake.calls_to("conversations.history")[0];
    assert_eq!(lookup.args["channel"], "D0DM");
    assert_eq!(lookup.args["include_all_metadata"], "true");
}

#[tokio::test]
async fn a_redelivery_of_a_delivered_thread_reply_posts_nothing() {
    let app = spawn_app().await;
    let message = outbound("C0GENERAL", Some("1700000400.000001"), "Done.", "sb-2-6");
    let first = app.sender.send(&message).await.unwrap();

    let again = app
        .sender
        .send(&OutboundMessage {
            redelivery: true,
            ..message
        })
        .await
        .unwrap();

    assert_eq!(again.message_ids, first.message_ids);
    assert_eq!(app.fake.posted_in("C0GENERAL").len(), 1);
    let lookup = &app.fake.calls_to("conversations.replies")[0];
    assert_eq!(lookup.args["ts"], "1700000400.000001");
}

#[tokio::test]
async fn a_draft_grows_in_one_message_that_becomes_the_reply() {
    let app = spawn_app().await;
    let chat = chat("C0GENERAL", Some("1700000400.000001"));
    assert_eq!(
        app.sender.draft_interval(&chat),
        Some(Duration::from_millis(1500))
    );
    assert_eq!(app.sender.typing_interval(), None);
    let draft = |text: &str, message_id: Option<String>| Draft {
        chat: chat.clone(),
        reply_to: None,
        draft_id: 7,
        key: "turn-7".to_owned(),
        message_id,
        text: text.to_owned(),
    };

    let shown = app
        .sender
        .draft(&draft("Thinking about **it", None))
        .await
        .unwrap();
    let again = app
        .sender
        .draft(&draft("Thinking about **it** more", shown.clone()))
        .await
        .unwrap();
    let mut reply = outbound(
        "C0GENERAL",
        Some("1700000400.000001"),
        "The answer is **42**.",
        "sb-2-7",
    );
    reply.replaces = again.clone();
    let receipt = app.sender.send(&reply).await.unwrap();

    assert_eq!(shown, again, "one message, updated");
    let posted = app.fake.posted_in("C0GENERAL");
    assert_eq!(posted.len(), 1, "{posted:?}");
    assert_eq!(posted[0].thread_ts.as_deref(), Some("1700000400.000001"));
    assert_eq!(posted[0].text, "The answer is *42*.");
    assert_eq!(posted[0].updates, 2);
    assert_eq!(posted[0].metadata["event_payload"]["key"], "sb-2-7");
    assert_eq!(receipt.message_ids, [posted[0].ts.clone()]);
}

#[tokio::test]
async fn a_reply_whose_draft_is_gone_is_posted_anew() {
    let app = spawn_app().await;
    let mut reply = outbound("D0DM", None, "Here it is.", "sb-2-8");
    reply.replaces = Some("1699999999.000001".to_owned());

    let receipt = app.sender.send(&reply).await.unwrap();

    let posted = app.fake.posted_in("D0DM");
    assert_eq!(posted.len(), 1);
    assert_eq!(receipt.message_ids, [posted[0].ts.clone()]);
    assert_eq!(
        app.fake.calls_to("chat.update").len(),
        1,
        "the edit was tried first"
    );
}

#[tokio::test]
async fn drafts_can_be_turned_off() {
    let fake = switchboard_test_support::slack::FakeSlack::start().await;
    let mut settings = crate::helpers::settings(&fake);
    settings.stream_replies = false;
    let app = spawn_with(fake, settings, RecordingSink::default()).await;

    assert_eq!(app.sender.draft_interval(&chat("D0DM", None)), None);
}

#[tokio::test]
async fn buttons_sit_under_the_last_part_and_an_edit_removes_them() {
    let app = spawn_app().await;
    let mut question = outbound("D0DM", None, "Run `rm -rf build`?", "sb-2-9");
    question.buttons = vec![
        Button::new(ActionId::parse("ap:9:allow").unwrap(), "Allow").styled(ButtonStyle::Primary),
        Button::new(ActionId::parse("ap:9:deny").unwrap(), "Deny").styled(ButtonStyle::Danger),
    ];

    let receipt = app.sender.send(&question).await.unwrap();
    let posted = app.fake.posted_in("D0DM");
    let blocks = &posted[0].blocks;
    assert_eq!(blocks[0]["type"], "section");
    assert_eq!(blocks[0]["text"]["text"], "Run `rm -rf build`?");
    assert_eq!(blocks[1]["type"], "actions");
    assert_eq!(blocks[1]["elements"][0]["value"], "ap:9:allow");
    assert_eq!(blocks[1]["elements"][0]["action_id"], "ap:9:allow");
    assert_eq!(blocks[1]["elements"][1]["style"], "danger");

    app.sender
        .edit(
            &chat("D0DM", None),
            &receipt.message_ids[0],
            "Allowed by **Alice**.",
        )
        .await
        .unwrap();

    let edited = &app.fake.posted_in("D0DM")[0];
    assert_eq!(edited.text, "Allowed by *Alice*.");
    assert_eq!(edited.blocks.as_array().unwrap().len(), 1);
    assert_eq!(edited.blocks[0]["type"], "section");
}

#[tokio::test]
async fn a_reply_for_an_unknown_workspace_is_permanent() {
    let app = spawn_app().await;
    let mut message = outbound("D0DM", None, "hello", "sb-2-10");
    message.account = AccountId::parse("T0NOBODY").unwrap();

    let sent = app.sender.send(&message).await;

    assert!(matches!(sent, Err(SendError::Permanent(_))), "{sent:?}");
    assert!(app.fake.calls_to("chat.postMessage").is_empty());
}

fn chat(channel: &str, thread: Option<&str>) -> ChatRef {
    ChatRef {
        platform: PlatformName::parse("slack").unwrap(),
        account: AccountId::parse(TEAM_ID).unwrap(),
        chat: ChatId::parse(channel).unwrap(),
        thread: thread.map(|t| ThreadId::parse(t).unwrap()),
    }
}

/// The first post goes through, the second fails once with a 500.
fn fail_the_second_post(app: &TestApp) {
    app.fake.pass_next("chat.postMessage", 1);
    app.fake
        .fail_next("chat.postMessage", 1, Failure::Status(500));
}

/// The part number in each posted message's metadata.
fn part_numbers(posted: &[Posted]) -> Vec<usize> {
    posted
        .iter()
        .filter_map(|p| p.metadata["event_payload"]["part"].as_u64())
        .map(|n| usize::try_from(n).unwrap())
        .collect()
}
