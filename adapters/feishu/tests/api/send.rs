//! Outbound: the sender against the fake open API.

use std::time::Duration;

use serde_json::json;
use switchboard_contract::{DeliveryReceipt, OutboundMessage, SendError};
use switchboard_feishu::TOKEN_ERROR_CODES;
use switchboard_feishu::send::CARD_BODY_LIMIT;

use switchboard_test_support::send::send_with_retries;

use crate::helpers::{Scripted, TestApp, spawn_app};

fn rate_limited_230020() -> Scripted {
    Scripted {
        status: 400,
        body: json!({"code": 230_020, "msg": "This operation triggers the frequency limit."}),
        headers: vec![],
    }
}

async fn send(app: &TestApp, message: &OutboundMessage) -> Result<DeliveryReceipt, SendError> {
    app.adapter.sender().send(message).await
}

#[tokio::test]
async fn twenty_sends_fetch_one_token() {
    let app = spawn_app().await;

    for i in 0..20 {
        let message = app.outbound(&format!("sb-{i}"), "hi", Some("om_q"));
        send(&app, &message).await.unwrap();
    }

    assert_eq!(app.fake.messages().len(), 20);
    assert_eq!(
        app.fake.token_fetches(),
        1,
        "bot info and all sends share one token"
    );
}

#[tokio::test]
async fn concurrent_sends_share_one_token_fetch() {
    let app = spawn_app().await;
    app.clock.advance(Duration::from_secs(2 * 3600));
    let sender = app.adapter.sender();
    let mut sends = tokio::task::JoinSet::new();

    for i in 0..20 {
        let sender = sender.clone();
        let message = app.outbound(&format!("sb-{i}"), "hi", Some("om_q"));
        sends.spawn(async move { sender.send(&message).await.map(|_| ()) });
    }

    while let Some(done) = sends.join_next().await {
        done.unwrap().unwrap();
    }
    assert_eq!(
        app.fake.token_fetches(),
        2,
        "one at start, one refresh for all 20"
    );
}

#[tokio::test]
async fn the_token_is_refreshed_once_under_thirty_minutes_remain() {
    let app = spawn_app().await;
    send(&app, &app.outbound("sb-1", "hi", None)).await.unwrap();

    app.clock.advance(Duration::from_secs(89 * 60));
    send(&app, &app.outbound("sb-2", "hi", None)).await.unwrap();
    assert_eq!(app.fake.token_fetches(), 1, "still over 30 minutes left");

    app.clock.advance(Duration::from_secs(2 * 60));
    send(&app, &app.outbound("sb-3", "hi", None)).await.unwrap();
    send(&app, &app.outbound("sb-4", "hi", None)).await.unwrap();

    assert_eq!(app.fake.token_fetches(), 2);
    let auth: Vec<_> = app
        .fake
        .messages()
        .into_iter()
        .map(|m| m.authorization.unwrap())
        .collect();
    assert_eq!(
        auth,
        ["Bearer t-1", "Bearer t-1", "Bearer t-2", "Bearer t-2"]
    );
}

#[tokio::test]
async fn every_token_error_code_refreshes_the_token_and_retries_once() {
    for code in TOKEN_ERROR_CODES {
        let app = spawn_app().await;
        send(&app, &app.outbound("sb-1", "before", None))
            .await
            .unwrap();
        app.fake.revoke_tokens(code);

        let result = send(&app, &app.outbound("sb-2", "after", None)).await;
        let later = send(&app, &app.outbound("sb-3", "later", None)).await;

        assert!(result.is_ok(), "code {code}: {result:?}");
        assert!(later.is_ok(), "code {code}: {later:?}");
        assert_eq!(app.fake.token_fetches(), 2, "code {code}: one refresh");
        let auth: Vec<_> = app
            .fake
            .messages()
            .into_iter()
            .map(|m| m.authorization.unwrap())
            .collect();
        assert_eq!(
            auth,
            ["Bearer t-1", "Bearer t-1", "Bearer t-2", "Bearer t-2"],
            "code {code}: refused once, retried with the new token, kept"
        );
        assert_eq!(app.fake.delivered().len(), 3, "code {code}");
    }
}

#[tokio::test]
async fn a_token_refused_twice_is_transient_and_not_kept() {
    let app = spawn_app().await;
    let expired = || Scripted {
        status: 401,
        body: json!({"code": 99_991_677, "msg": "Authentication token expired."}),
        headers: vec![],
    };
    app.fake.script([expired(), expired()]);

    let refused = send(&app, &app.outbound("sb-1", "hi", None)).await;
    let next = send(&app, &app.outbound("sb-1", "hi", None)).await;

    assert!(
        matches!(refused, Err(SendError::Transient(_))),
        "{refused:?}"
    );
    next.unwrap();
    assert_eq!(app.fake.token_fetches(), 3, "t-2 was dropped as well");
    let last = app.fake.messages().pop().unwrap();
    assert_eq!(last.authorization.as_deref(), Some("Bearer t-3"));
    assert_eq!(app.fake.delivered().len(), 1);
}

#[tokio::test]
async fn a_plain_reply_is_a_text_reply_with_a_uuid() {
    let app = spawn_app().await;

    let receipt = send(&app, &app.outbound("sb-7", "391", Some("om_question")))
        .await
        .unwrap();

    assert_eq!(receipt.message_ids, ["om_sent_1"]);
    let sent = &app.fake.messages()[0];
    assert_eq!(sent.path, "/open-apis/im/v1/messages/om_question/reply");
    assert_eq!(sent.body["msg_type"], "text");
    assert_eq!(sent.body["uuid"], "sb-7-0");
    assert!(sent.body.get("reply_in_thread").is_none());
    assert_eq!(sent.content(), json!({"text": "391"}));
    assert_eq!(sent.authorization.as_deref(), Some("Bearer t-1"));
}

#[tokio::test]
async fn a_markdown_reply_is_an_interactive_card() {
    let app = spawn_app().await;

    send(
        &app,
        &app.outbound("sb-7", "It is **391**.", Some("om_question")),
    )
    .await
    .unwrap();

    let sent = &app.fake.messages()[0];
    assert_eq!(sent.body["msg_type"], "interactive");
    assert_eq!(card_markdown(&sent.content()), "It is **391**.");
}

/// The Markdown a card carries, after checking the card is valid card JSON
/// 2.0 as Feishu documents it (which, unlike 1.0, refuses properties it does
/// not know): `schema` "2.0", known `config` keys with `update_multi` true
/// (the only value 2.0 allows), `elements` under `body`, one `markdown`
/// element.
fn card_markdown(card: &serde_json::Value) -> String {
    let object = card.as_object().expect("a card is an object");
    for key in object.keys() {
        assert!(
            ["schema", "config", "header", "body", "card_link"].contains(&key.as_str()),
            "unknown card property {key}"
        );
    }
    assert_eq!(card["schema"], "2.0");
    let config = card["config"].as_object().expect("config");
    for key in config.keys() {
        assert!(
            [
                "streaming_mode",
                "streaming_config",
                "summary",
                "locales",
                "enable_forward",
                "update_multi",
                "width_mode",
                "use_custom_translation",
                "enable_forward_interaction",
                "style",
            ]
            .contains(&key.as_str()),
            "unknown config property {key}"
        );
    }
    assert_eq!(config.get("update_multi"), Some(&json!(true)));
    assert!(card.get("elements").is_none(), "2.0 keeps elements in body");
    let elements = card["body"]["elements"].as_array().expect("body.elements");
    let [element] = elements.as_slice() else {
        panic!("one element: {elements:?}");
    };
    assert_eq!(element["tag"], "markdown");
    element["content"].as_str().expect("content").to_owned()
}

#[tokio::test]
async fn a_long_answer_with_headings_and_a_table_is_one_card_of_json_2_0() {
    let app = spawn_app().await;
    let mut text = String::new();
    for section in 1..=6 {
        text.push_str(&format!("# Section {section}\n\n"));
        text.push_str(&"Prose with a \"quote\", **bold** and `code`. ".repeat(40));
        text.push_str("\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n> a quote\n\n");
    }
    assert!(text.len() > 10_000);

    send(&app, &app.outbound("sb-5", &text, Some("om_q")))
        .await
        .unwrap();

    let sent = app.fake.messages();
    assert_eq!(sent.len(), 1, "a card holds 10 KB: no split");
    assert_eq!(sent[0].body["msg_type"], "interactive");
    assert_eq!(card_markdown(&sent[0].content()), text.trim_end());
}

#[tokio::test]
async fn without_a_reply_target_the_message_goes_to_the_chat() {
    let app = spawn_app().await;

    send(&app, &app.outbound("sb-7", "hello", None))
        .await
        .unwrap();

    let sent = &app.fake.messages()[0];
    assert_eq!(sent.path, "/open-apis/im/v1/messages");
    assert_eq!(sent.query.as_deref(), Some("receive_id_type=chat_id"));
    assert_eq!(sent.body["receive_id"], "oc_chat");
    assert_eq!(sent.body["uuid"], "sb-7-0");
}

#[tokio::test]
async fn a_reply_in_a_thread_stays_in_the_thread() {
    let app = spawn_app().await;

    send(&app, &app.outbound_in_thread("sb-7", "ok", "omt_thread"))
        .await
        .unwrap();

    let sent = &app.fake.messages()[0];
    assert_eq!(sent.path, "/open-apis/im/v1/messages/om_question/reply");
    assert_eq!(sent.body["reply_in_thread"], true);
}

#[tokio::test]
async fn a_rate_limit_code_then_success_delivers_exactly_one_reply() {
    let app = spawn_app().await;
    app.fake.script([rate_limited_230020()]);
    let message = app.outbound("sb-9", "hi", Some("om_q"));

    let (result, delivery) = send_with_retries(app.adapter.sender().as_ref(), &message).await;

    let receipt = result.unwrap();
    assert_eq!(receipt.message_ids.len(), 1);
    assert_eq!(delivery.waits, [Duration::from_secs(1)]);
    let attempts = app.fake.messages();
    assert_eq!(attempts.len(), 2, "one refused attempt, one delivery");
    assert!(attempts.iter().all(|m| m.body["uuid"] == "sb-9-0"));
}

#[tokio::test]
async fn http_429_waits_as_long_as_the_reset_header_says() {
    let app = spawn_app().await;
    app.fake.script([Scripted {
        status: 429,
        body: json!({"code": 99_991_400, "msg": "request trigger frequency limit"}),
        headers: vec![("x-ogw-ratelimit-reset", "3")],
    }]);

    let result = send(&app, &app.outbound("sb-1", "hi", None)).await;

    assert!(matches!(result, Err(SendError::RetryAfter(d)) if d == Duration::from_secs(3)));
}

#[tokio::test]
async fn other_error_codes_are_permanent_and_5xx_transient() {
    let app = spawn_app().await;
    app.fake.script([
        Scripted {
            status: 400,
            body: json!({"code": 230_002, "msg": "Bot can NOT be out of the chat."}),
            headers: vec![],
        },
        Scripted {
            status: 502,
            body: json!("bad gateway"),
            headers: vec![],
        },
    ]);

    let first = send(&app, &app.outbound("sb-1", "hi", None)).await;
    let second = send(&app, &app.outbound("sb-2", "hi", None)).await;

    match first {
        Err(SendError::Permanent(reason)) => {
            assert!(reason.contains("230002"), "{reason}");
            assert!(!reason.contains("app-secret") && !reason.contains("t-1"));
        }
        other => panic!("expected a permanent error, got {other:?}"),
    }
    assert!(matches!(second, Err(SendError::Transient(_))));
}

#[tokio::test]
async fn a_recalled_reply_target_falls_back_to_the_chat() {
    let app = spawn_app().await;
    app.fake.script([Scripted {
        status: 400,
        body: json!({"code": 230_011, "msg": "The message was withdrawn."}),
        headers: vec![],
    }]);

    send(&app, &app.outbound("sb-1", "hi", Some("om_gone")))
        .await
        .unwrap();

    let sent = app.fake.messages();
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[1].path, "/open-apis/im/v1/messages");
    assert_eq!(sent[1].body["uuid"], "sb-1-0");
}

#[tokio::test]
async fn a_long_markdown_reply_is_split_into_cards_under_the_limit() {
    let app = spawn_app().await;
    let paragraph = format!("**Point**: {}\n\n", "a \"quoted\" word, ".repeat(40));
    let text = paragraph.repeat(80);

    let receipt = send(&app, &app.outbound("sb-3", &text, Some("om_q")))
        .await
        .unwrap();

    let sent = app.fake.messages();
    assert!(sent.len() > 1, "{} chunks", sent.len());
    assert_eq!(receipt.message_ids.len(), sent.len());
    let mut rejoined = String::new();
    for (index, message) in sent.iter().enumerate() {
        assert_eq!(message.body["uuid"], format!("sb-3-{index}"));
        assert_eq!(message.body["msg_type"], "interactive");
        let size = message.body.to_string().len();
        assert!(size <= CARD_BODY_LIMIT);
        // Split only because one card cannot hold it: each card but the
        // last is at least half full.
        if index + 1 < sent.len() {
            assert!(size >= CARD_BODY_LIMIT / 2, "card {index}: {size} bytes");
        }
        rejoined.push_str(&card_markdown(&message.content()));
        rejoined.push_str("\n\n");
    }
    // Only the whitespace at each cut is dropped.
    assert!(
        rejoined.split_whitespace().eq(text.split_whitespace()),
        "nothing lost or repeated"
    );
}

fn draft(app: &TestApp, text: &str, message_id: Option<&str>) -> switchboard_contract::Draft {
    let reply = app.outbound("unused", text, Some("om_q"));
    switchboard_contract::Draft {
        chat: reply.chat_ref(),
        reply_to: Some("om_q".to_owned()),
        draft_id: 7,
        key: "sb-test-d7".to_owned(),
        message_id: message_id.map(str::to_owned),
        text: text.to_owned(),
    }
}

#[tokio::test]
async fn a_draft_is_one_card_updated_in_place_that_the_reply_completes() {
    let app = spawn_app().await;
    let sender = app.adapter.sender();
    let chat = app.outbound("k", "x", None).chat_ref();
    assert_eq!(
        sender.draft_interval(&chat),
        Some(Duration::from_millis(1000)),
        "streaming is on by default, one card update a second"
    );

    let first = sender
        .draft(&draft(&app, "The answer", None))
        .await
        .unwrap()
        .expect("a card message shows the draft");
    let again = sender
        .draft(&draft(&app, "The answer is", Some(&first)))
        .await
        .unwrap();
    assert_eq!(again.as_deref(), Some(first.as_str()), "updated in place");

    let mut reply = app.outbound("sb-db-1", "The answer is **42**.", Some("om_q"));
    reply.replaces = Some(first.clone());
    let receipt = send(&app, &reply).await.unwrap();
    assert_eq!(receipt.message_ids, [first.as_str()]);

    let delivered = app.fake.delivered();
    assert_eq!(delivered.len(), 1, "one card posted, for the draft");
    assert_eq!(delivered[0].reply_target(), Some("om_q"));
    assert_eq!(delivered[0].body["msg_type"], "interactive");
    let updates = app.fake.updates();
    assert_eq!(updates.len(), 2);
    assert!(updates.iter().all(|(id, _)| *id == first));
    let last = &updates[1].1;
    let card: serde_json::Value =
        serde_json::from_str(last.body["content"].as_str().unwrap()).unwrap();
    assert_eq!(card["schema"], "2.0");
    assert_eq!(card["config"]["update_multi"], true);
    assert_eq!(
        card["body"]["elements"][0]["content"],
        "The answer is **42**."
    );
}

#[tokio::test]
async fn a_reply_whose_draft_card_was_recalled_goes_out_as_a_new_message() {
    let app = spawn_app().await;
    app.fake.script([Scripted {
        status: 400,
        body: json!({"code": 230_011, "msg": "The message was recalled."}),
        headers: vec![],
    }]);
    let mut reply = app.outbound("sb-db-2", "Plain words.", Some("om_q"));
    reply.replaces = Some("om_gone".to_owned());

    let receipt = send(&app, &reply).await.unwrap();

    assert_eq!(receipt.message_ids.len(), 1);
    assert_ne!(receipt.message_ids[0], "om_gone");
    assert_eq!(app.fake.delivered().len(), 1);
    assert!(app.fake.updates().is_empty());
}

#[tokio::test]
async fn a_long_draft_shows_its_newest_part_within_one_card() {
    let app = spawn_app().await;
    let paragraph = "word ".repeat(400);
    let text = (0..20)
        .map(|n| format!("## Part {n}\n\n{paragraph}"))
        .collect::<Vec<_>>()
        .join("\n\n");

    app.adapter
        .sender()
        .draft(&draft(&app, &text, None))
        .await
        .unwrap();
    let posted = &app.fake.delivered()[0];
    assert!(posted.body.to_string().len() <= CARD_BODY_LIMIT);
    let shown = posted.content()["body"]["elements"][0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(shown.contains("## Part 19"), "the newest part is shown");
    assert!(!shown.contains("## Part 0\n"), "the oldest is not");
}

#[tokio::test]
async fn a_draft_created_again_after_a_crash_is_the_same_card() {
    let app = spawn_app().await;
    let sender = app.adapter.sender();

    // The first instance's draft card, its id lost in a crash: the next
    // instance creates the draft again, with the turn's key.
    let first = sender.draft(&draft(&app, "The", None)).await.unwrap();
    let again = sender
        .draft(&draft(&app, "The answer", None))
        .await
        .unwrap();

    assert_eq!(first, again, "Feishu returns the card the key already made");
    assert_eq!(app.fake.delivered().len(), 1);
}
