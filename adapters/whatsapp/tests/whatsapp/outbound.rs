//! Messages out: replies, splitting, buttons, typing, rate limits, the
//! 24-hour window and its template, edits, refused tokens.

use std::sync::atomic::Ordering;
use std::time::Duration;

use switchboard_contract::{ActionId, Button, ChatRef, LengthUnit, SendError};
use switchboard_test_support::eventually;
use switchboard_test_support::send::send_with_retries;
use switchboard_test_support::whatsapp::{
    ACCESS_TOKEN, CUSTOMER, PHONE_NUMBER_ID, failed_status, messages, statuses, text,
};
use switchboard_whatsapp::TemplateSettings;

use crate::helpers::{TestApp, outbound, spawn_app, spawn_app_with};

fn with_template(settings: &mut switchboard_whatsapp::WhatsAppSettings) {
    settings.template = Some(TemplateSettings::new("reply_ready", "en_US"));
}

/// The person writes `body` as message `id`; the core records it.
async fn person_writes(app: &TestApp, id: &str, body: &str) {
    let payload = messages(PHONE_NUMBER_ID, vec![text(id, body)]);
    assert_eq!(app.webhook.deliver(&payload).await, 200);
}

#[tokio::test]
async fn a_text_round_trip_replies_to_the_question() {
    let app = spawn_app().await;
    person_writes(&app, "wamid.Q1", "what is 17*23?").await;
    let question = app.sink.submissions().remove(0);

    let reply = outbound("sb-1", "It is **391**.", question.message_id.as_deref());
    let receipt = app.sender.send(&reply).await.unwrap();

    let sent = app.fake.sent();
    assert_eq!(sent.len(), 1);
    assert_eq!(receipt.message_ids, [sent[0].message_id.clone().unwrap()]);
    let body = &sent[0].body;
    assert_eq!(sent[0].phone_number_id, PHONE_NUMBER_ID);
    assert_eq!(
        sent[0].authorization.as_deref(),
        Some(format!("Bearer {ACCESS_TOKEN}").as_str())
    );
    assert_eq!(body["messaging_product"], "whatsapp");
    assert_eq!(body["recipient_type"], "individual");
    assert_eq!(body["to"], CUSTOMER);
    assert_eq!(body["type"], "text");
    assert_eq!(body["text"]["body"], "It is *391*.");
    assert_eq!(body["text"]["preview_url"], false);
    assert_eq!(body["context"]["message_id"], "wamid.Q1");
}

#[tokio::test]
async fn a_long_markdown_answer_is_split_under_the_limit_and_formatted() {
    let app = spawn_app().await;
    let code = "let total = items.iter().sum::<u64>();\n".repeat(150);
    let markdown = format!(
        "# Report\n\n{}\n\n```rust\n{code}```\n\n- **done**\n- _pending_",
        "Some prose that goes on. ".repeat(300)
    );

    let receipt = app
        .sender
        .send(&outbound("sb-2", &markdown, Some("wamid.Q")))
        .await
        .unwrap();

    let sent = app.fake.sent();
    assert!(sent.len() >= 3, "{}", sent.len());
    assert_eq!(receipt.message_ids.len(), sent.len());
    for part in &sent {
        let text = part.text().unwrap();
        assert!(LengthUnit::Utf16.measure(text) <= 4096);
        assert_eq!(text.matches("```").count() % 2, 0, "a fence broken: {text}");
    }
    assert!(
        sent[0]
            .text()
            .unwrap()
            .starts_with("*Report*\n\nSome prose")
    );
    assert!(
        sent.last()
            .unwrap()
            .text()
            .unwrap()
            .ends_with("- *done*\n- _pending_")
    );
    assert_eq!(sent[0].reply_to(), Some("wamid.Q"));
    assert!(sent[1..].iter().all(|part| part.reply_to().is_none()));
}

#[tokio::test]
async fn rate_limits_become_retry_after() {
    let app = spawn_app().await;
    app.fake.fail_next_sends(1, 429, None, Some(7));
    app.fake.fail_next_sends(1, 400, Some(130_429), None);
    app.fake.fail_next_sends(1, 400, Some(131_056), None);

    let reply = outbound("sb-3", "hello", None);
    let (result, delivery) = send_with_retries(app.sender.as_ref(), &reply).await;

    result.unwrap();
    assert_eq!(delivery.attempts, 4);
    assert_eq!(delivery.rate_limited(), 3);
    assert_eq!(delivery.waits[0], Duration::from_secs(7));
    // Without Retry-After: the backoff's next steps (the first wait
    // counted as one), between half the ceiling and the ceiling.
    let waits = &delivery.waits;
    assert!(
        waits[1] >= Duration::from_secs(1) && waits[1] <= Duration::from_secs(2),
        "{waits:?}"
    );
    assert!(
        waits[2] >= Duration::from_secs(2) && waits[2] <= Duration::from_secs(4),
        "{waits:?}"
    );
    assert_eq!(app.fake.sent().len(), 1);
}

#[tokio::test]
async fn the_other_rate_limit_codes_are_rate_limits_too() {
    let app = spawn_app().await;
    for code in [4, 613, 80_007, 131_048] {
        app.fake.fail_next_sends(1, 400, Some(code), None);
        let err = app
            .sender
            .send(&outbound("sb-4", "hello", None))
            .await
            .unwrap_err();
        assert!(
            matches!(err, SendError::RetryAfter(wait) if !wait.is_zero()),
            "{code}: {err}"
        );
    }
}

#[tokio::test]
async fn server_failures_are_transient_and_refusals_permanent() {
    let app = spawn_app().await;
    app.fake.fail_next_sends(1, 500, None, None);
    app.fake.fail_next_sends(1, 400, Some(131_000), None);
    app.fake.fail_next_sends(1, 400, Some(100), None);
    let reply = outbound("sb-5", "hello", None);

    for expected in ["transient", "transient", "permanent"] {
        let err = app.sender.send(&reply).await.unwrap_err();
        let kind = match err {
            SendError::Transient(_) => "transient",
            SendError::Permanent(_) => "permanent",
            SendError::RetryAfter(_) => "retry after",
        };
        assert_eq!(kind, expected, "{err}");
    }
}

#[tokio::test]
async fn a_part_sent_before_a_failure_is_not_sent_again() {
    let app = spawn_app().await;
    let long = "word ".repeat(1500);
    app.fake.pass_next_sends(1);
    app.fake.fail_next_sends(1, 503, None, None);
    let reply = outbound("sb-6", &long, None);

    let (result, delivery) = send_with_retries(app.sender.as_ref(), &reply).await;

    let receipt = result.unwrap();
    assert_eq!(delivery.attempts, 2);
    let sent = app.fake.sent();
    assert_eq!(sent.len(), 2, "each part once");
    let ids: Vec<_> = sent.iter().filter_map(|m| m.message_id.clone()).collect();
    assert_eq!(receipt.message_ids, ids);
}

#[tokio::test]
async fn a_reply_the_api_refuses_outside_the_window_goes_as_the_template() {
    let app = spawn_app_with(with_template).await;
    app.fake.close_window(CUSTOMER);

    let receipt = app
        .sender
        .send(&outbound(
            "sb-7",
            "Your report is **ready**.\n\nIt has 3 parts.",
            Some("wamid.Q"),
        ))
        .await
        .unwrap();

    let requests = app.fake.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].kind(), "text");
    assert!(requests[0].message_id.is_none(), "refused with 131047");
    let template = &requests[1];
    assert_eq!(template.kind(), "template");
    assert_eq!(receipt.message_ids, [template.message_id.clone().unwrap()]);
    let spec = &template.body["template"];
    assert_eq!(spec["name"], "reply_ready");
    assert_eq!(spec["language"]["code"], "en_US");
    assert_eq!(
        spec["components"][0]["parameters"][0]["text"],
        "Your report is *ready*. It has 3 parts."
    );

    // Known closed now: the next reply goes straight to the template.
    app.sender
        .send(&outbound("sb-8", "And another thing.", None))
        .await
        .unwrap();
    let requests = app.fake.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(requests[2].kind(), "template");
}

#[tokio::test]
async fn without_a_template_the_closed_window_is_a_clear_permanent_error() {
    let app = spawn_app().await;
    app.fake.close_window(CUSTOMER);

    let err = app
        .sender
        .send(&outbound("sb-9", "hello", None))
        .await
        .unwrap_err();

    let SendError::Permanent(reason) = err else {
        panic!("not permanent: {err}");
    };
    assert!(reason.contains("24-hour"), "{reason}");
    assert!(reason.contains("no template is configured"), "{reason}");
    assert!(reason.contains("whatsapp.template"), "{reason}");
}

#[tokio::test]
async fn a_reply_known_to_be_outside_the_window_goes_straight_to_the_template() {
    let app = spawn_app_with(with_template).await;
    person_writes(&app, "wamid.OLD", "hello").await;
    app.clock.advance(Duration::from_secs(25 * 60 * 60));

    app.sender
        .send(&outbound("sb-10", "Sorry for the wait.", Some("wamid.OLD")))
        .await
        .unwrap();

    let requests = app.fake.requests();
    assert_eq!(requests.len(), 1, "no free-form attempt");
    assert_eq!(requests[0].kind(), "template");
}

#[tokio::test]
async fn within_the_window_replies_go_free_form() {
    let app = spawn_app_with(with_template).await;
    person_writes(&app, "wamid.NEW", "hello").await;
    app.clock.advance(Duration::from_secs(23 * 60 * 60));

    app.sender
        .send(&outbound("sb-11", "Here you are.", None))
        .await
        .unwrap();

    assert_eq!(app.fake.sent()[0].kind(), "text");
}

#[tokio::test]
async fn a_late_window_failure_sends_the_template_for_that_reply() {
    let app = spawn_app_with(with_template).await;
    let receipt = app
        .sender
        .send(&outbound("sb-12", "The answer is 42.", None))
        .await
        .unwrap();
    let wamid = receipt.message_ids[0].clone();

    let payload = statuses(
        PHONE_NUMBER_ID,
        vec![failed_status(&wamid, 131_047, "Re-engagement message")],
    );
    assert_eq!(app.webhook.deliver(&payload).await, 200);

    eventually("the template to replace the failed reply", || async {
        app.fake.sent().len() == 2
    })
    .await;
    let template = &app.fake.sent()[1];
    assert_eq!(template.kind(), "template");
    assert_eq!(
        template.body["template"]["components"][0]["parameters"][0]["text"],
        "The answer is 42."
    );
    assert_eq!(app.sink.statuses()[0].message_id, wamid);
    // Redelivered, the status sends no second template.
    assert_eq!(app.webhook.deliver(&payload).await, 200);
    assert_eq!(app.sink.statuses().len(), 2);
    assert_eq!(app.fake.sent().len(), 2);
}

#[tokio::test]
async fn up_to_three_buttons_are_reply_buttons() {
    let app = spawn_app().await;
    let mut reply = outbound("sb-13", "May I run `rm -rf target`?", Some("wamid.Q"));
    reply.buttons = vec![
        Button::new(ActionId::parse("ap:9:allow").unwrap(), "Allow"),
        Button::new(
            ActionId::parse("ap:9:deny").unwrap(),
            "Deny, and tell me why not",
        ),
    ];

    app.sender.send(&reply).await.unwrap();

    let sent = app.fake.sent();
    assert_eq!(sent.len(), 1);
    let interactive = &sent[0].body["interactive"];
    assert_eq!(sent[0].kind(), "interactive");
    assert_eq!(interactive["type"], "button");
    assert_eq!(interactive["body"]["text"], "May I run `rm -rf target`?");
    let buttons = interactive["action"]["buttons"].as_array().unwrap();
    assert_eq!(buttons[0]["reply"]["id"], "ap:9:allow");
    assert_eq!(buttons[1]["reply"]["id"], "ap:9:deny");
    assert_eq!(sent[0].reply_to(), Some("wamid.Q"));
}

#[tokio::test]
async fn more_buttons_become_a_list_and_a_long_question_goes_first() {
    let app = spawn_app().await;
    let question = format!("{}\n\nWhich file?", "Context. ".repeat(150));
    let mut reply = outbound("sb-14", &question, None);
    reply.buttons = (1..=5)
        .map(|n| {
            Button::new(
                ActionId::parse(format!("pick:{n}")).unwrap(),
                format!("file_{n}.rs"),
            )
        })
        .collect();

    app.sender.send(&reply).await.unwrap();

    let sent = app.fake.sent();
    assert_eq!(sent.len(), 2, "the fake accepted both");
    assert_eq!(sent[0].kind(), "text");
    assert!(sent[0].text().unwrap().ends_with("Which file?"));
    let interactive = &sent[1].body["interactive"];
    assert_eq!(interactive["type"], "list");
    assert_eq!(interactive["body"]["text"], "Choose an answer:");
    let rows = interactive["action"]["sections"][0]["rows"]
        .as_array()
        .unwrap();
    assert_eq!(rows.len(), 5);
    assert_eq!(rows[4]["id"], "pick:5");
}

#[tokio::test]
async fn typing_marks_the_latest_message_read_with_the_indicator() {
    let app = spawn_app().await;
    person_writes(&app, "wamid.T1", "first").await;
    person_writes(&app, "wamid.T2", "second").await;
    let chat = outbound("x", "", None).chat_ref();

    assert_eq!(app.sender.typing_interval(), Some(Duration::from_secs(20)));
    app.sender.typing(&chat).await;
    app.sender.typing(&chat).await;

    let reads = app.fake.reads();
    assert_eq!(reads.len(), 2, "the indicator is refreshed");
    assert_eq!(reads[0].body["message_id"], "wamid.T2");
    assert_eq!(reads[0].body["typing_indicator"]["type"], "text");
}

#[tokio::test]
async fn read_receipts_alone_go_once_per_message_and_none_when_off() {
    let app = spawn_app_with(|settings| settings.typing_indicator = false).await;
    person_writes(&app, "wamid.T1", "first").await;
    let chat = outbound("x", "", None).chat_ref();

    app.sender.typing(&chat).await;
    app.sender.typing(&chat).await;

    let reads = app.fake.reads();
    assert_eq!(reads.len(), 1);
    assert!(reads[0].body.get("typing_indicator").is_none());

    let quiet = spawn_app_with(|settings| {
        settings.typing_indicator = false;
        settings.read_receipts = false;
    })
    .await;
    assert_eq!(quiet.sender.typing_interval(), None);
}

#[tokio::test]
async fn an_edit_is_a_new_message_replying_to_the_old_one() {
    let app = spawn_app().await;
    let chat: ChatRef = outbound("x", "", None).chat_ref();

    app.sender
        .edit(&chat, "wamid.QUESTION", "Approved: `ls` ran.")
        .await
        .unwrap();

    let sent = app.fake.sent();
    assert_eq!(sent[0].text(), Some("Approved: `ls` ran."));
    assert_eq!(sent[0].reply_to(), Some("wamid.QUESTION"));
    assert_eq!(app.sender.draft_interval(&chat), None);
}

#[tokio::test]
async fn a_refused_token_is_permanent_and_reported_until_a_send_works() {
    let app = spawn_app().await;
    app.fake.fail_next_sends(1, 401, Some(190), None);

    let err = app
        .sender
        .send(&outbound("sb-15", "hello", None))
        .await
        .unwrap_err();

    assert!(matches!(err, SendError::Permanent(_)), "{err}");
    assert!(!err.to_string().contains(ACCESS_TOKEN));
    assert_eq!(app.observer.downs.lock().unwrap().len(), 1);
    app.sender
        .send(&outbound("sb-16", "hello", None))
        .await
        .unwrap();
    assert_eq!(app.observer.ups.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_reply_for_an_account_not_configured_is_permanent() {
    let app = spawn_app().await;
    let mut reply = outbound("sb-17", "hello", None);
    reply.account = switchboard_contract::AccountId::parse("42").unwrap();

    let err = app.sender.send(&reply).await.unwrap_err();

    assert!(matches!(err, SendError::Permanent(_)), "{err}");
    assert!(app.fake.requests().is_empty());
}

#[tokio::test]
async fn a_late_window_failure_of_a_message_sent_elsewhere_closes_the_window_here() {
    let app = spawn_app_with(with_template).await;
    let payload = statuses(
        PHONE_NUMBER_ID,
        vec![failed_status(
            "wamid.OTHER-INSTANCE",
            131_047,
            "Re-engagement message",
        )],
    );

    assert_eq!(app.webhook.deliver(&payload).await, 200);

    assert_eq!(app.sink.statuses().len(), 1, "the core has the failure");
    // The window is marked closed by the payload's task right after the
    // core recorded the status, before the webhook answered (the runtime
    // has one thread, and nothing in between awaits).
    app.sender
        .send(&outbound("sb-20", "Still there?", None))
        .await
        .unwrap();
    let requests = app.fake.requests();
    assert_eq!(requests.len(), 1, "no free-form attempt");
    assert_eq!(requests[0].kind(), "template");
}
