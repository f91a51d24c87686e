//! Replies: HTML, threading, splitting, fallbacks, rate limits, typing.

use std::time::Duration;

use serde_json::json;
use switchboard_contract::{LengthUnit, SendError};

use crate::helpers::*;
use switchboard_test_support::telegram::{cant_parse_entities, too_many_requests};

const CHAT: i64 = 4242;

#[tokio::test]
async fn a_reply_is_sent_as_html_in_reply_to_the_message() {
    let app = TestApp::spawn().await;

    let receipt = app
        .sender()
        .send(&outbound(CHAT, None, Some(7), "**Hi** <you> & `x`"))
        .await
        .expect("sent");

    let calls = app.fake.calls("sendMessage");
    assert_eq!(calls.len(), 1);
    let call = &calls[0];
    assert_eq!(call["chat_id"], json!(CHAT));
    assert_eq!(call["text"], "<b>Hi</b> &lt;you&gt; &amp; <code>x</code>");
    assert_eq!(call["parse_mode"], "HTML");
    assert_eq!(call["reply_parameters"]["message_id"], 7);
    assert_eq!(
        call["reply_parameters"]["allow_sending_without_reply"],
        true
    );
    assert!(call.get("message_thread_id").is_none());
    assert_eq!(receipt.message_ids, vec!["5000".to_owned()]);
}

#[tokio::test]
async fn a_forum_topic_reply_carries_the_thread_id() {
    let app = TestApp::spawn().await;

    app.sender()
        .send(&outbound(-100_200, Some(300), Some(301), "in the topic"))
        .await
        .expect("sent");

    let calls = app.fake.calls("sendMessage");
    assert_eq!(calls[0]["message_thread_id"], 300);
    assert_eq!(calls[0]["reply_parameters"]["message_id"], 301);
}

#[tokio::test]
async fn a_long_reply_is_split_with_code_fences_intact() {
    let app = TestApp::spawn().await;
    let mut text = String::from("Here is the program:\n\n```rust\n");
    let mut line = 0;
    while text.len() < 9_000 {
        text.push_str(&format!(
            "let value_{line} = compute({line}) < limit && ok;\n"
        ));
        line += 1;
    }
    text.push_str("```\n\nAnd some closing words. ");
    while text.chars().count() < 10_000 {
        text.push_str("More prose <here>. ");
    }

    let receipt = app
        .sender()
        .send(&outbound(CHAT, Some(9), Some(7), &text))
        .await
        .expect("sent");

    let calls = app.fake.calls("sendMessage");
    assert!(calls.len() >= 3, "{} chunks", calls.len());
    assert_eq!(receipt.message_ids.len(), calls.len());
    for (index, call) in calls.iter().enumerate() {
        let html = call["text"].as_str().expect("text");
        assert!(
            LengthUnit::Utf16.measure(html) <= 4096,
            "chunk {index} too long"
        );
        assert_eq!(
            html.matches("<pre>").count(),
            html.matches("</pre>").count(),
            "chunk {index}"
        );
        assert_eq!(call["parse_mode"], "HTML");
        assert_eq!(
            call["message_thread_id"], 9,
            "every chunk stays in the topic"
        );
        assert_eq!(
            call.get("reply_parameters").is_some(),
            index == 0,
            "only the first replies"
        );
    }
    // Chunks that continue the code block reopen it with its language.
    assert!(
        calls[1]["text"]
            .as_str()
            .unwrap()
            .starts_with("<pre><code class=\"language-rust\">")
    );
    // No line of code is lost or repeated.
    let all: String = calls.iter().map(|c| c["text"].as_str().unwrap()).collect();
    for n in 0..line {
        assert_eq!(
            all.matches(&format!("let value_{n} = ")).count(),
            1,
            "line {n}"
        );
    }
}

/// A 10,000-character Markdown answer as models write them: six sections
/// with headings, prose with characters HTML escapes, lists, a table and a
/// code block each; returns it with the code lines it holds.
fn long_markdown_answer() -> (String, Vec<String>) {
    let mut text =
        String::from("An overview, with **emphasis** and a [link](https://example.com).\n\n");
    let mut code_lines = Vec::new();
    let mut section = 0;
    while text.chars().count() < 10_000 {
        section += 1;
        text.push_str(&format!("# Part {section}: the <details> & more\n\n"));
        for paragraph in 0..3 {
            text.push_str(&format!(
                "Paragraph {paragraph} of part {section} explains why a < b && c > d holds, \
                 with *italic words* and `inline code` along the way. "
            ));
            text.push_str(&"It goes on for a while to read like real prose. ".repeat(3));
            text.push_str("\n\n");
        }
        text.push_str("- first point\n- second point with **bold**\n  - a nested point\n\n");
        text.push_str("| key | value |\n|-----|-------|\n| a | 1 |\n| b | 2 |\n\n");
        text.push_str("```python\n");
        for line in 0..12 {
            let code = format!("value_{section}_{line} = compute({line}) if x < {line} else None");
            text.push_str(&code);
            text.push('\n');
            code_lines.push(code);
        }
        text.push_str("```\n\n");
    }
    (text, code_lines)
}

#[tokio::test]
async fn a_long_markdown_answer_fills_each_message_before_starting_the_next() {
    let app = TestApp::spawn().await;
    let (text, code_lines) = long_markdown_answer();

    app.sender()
        .send(&outbound(CHAT, None, Some(7), &text))
        .await
        .expect("sent");

    let calls = app.fake.calls("sendMessage");
    let sizes: Vec<usize> = calls
        .iter()
        .map(|c| LengthUnit::Utf16.measure(c["text"].as_str().expect("text")))
        .collect();
    assert!(sizes.len() >= 3, "{sizes:?}");
    assert!(sizes.iter().all(|&size| size <= 4096), "{sizes:?}");
    // Every message but the last is at least half full: no fragments of a
    // few lines between full ones.
    let (last, full) = sizes.split_last().expect("chunks");
    assert!(full.iter().all(|&size| size >= 2048), "{sizes:?}");
    assert!(*last > 0);
    // Each message is valid on its own, and no line of code is lost or
    // repeated (reopened code blocks repeat only their fence).
    let all: String = calls.iter().map(|c| c["text"].as_str().unwrap()).collect();
    for call in &calls {
        let html = call["text"].as_str().unwrap();
        assert_eq!(
            html.matches("<pre>").count(),
            html.matches("</pre>").count()
        );
        assert_eq!(html.matches("<b>").count(), html.matches("</b>").count());
    }
    for code in &code_lines {
        let escaped = code.replace('<', "&lt;");
        assert_eq!(all.matches(&escaped).count(), 1, "{code}");
    }
}

#[tokio::test]
async fn rejected_html_is_resent_as_plain_text() {
    let app = TestApp::spawn().await;
    app.fake.script("sendMessage", 400, cant_parse_entities());

    let receipt = app
        .sender()
        .send(&outbound(CHAT, None, Some(7), "**bold** move"))
        .await
        .expect("sent");

    let calls = app.fake.calls("sendMessage");
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0]["parse_mode"], "HTML");
    assert_eq!(calls[1]["text"], "bold move");
    assert!(calls[1].get("parse_mode").is_none());
    assert_eq!(calls[1]["reply_parameters"]["message_id"], 7);
    assert_eq!(receipt.message_ids.len(), 1);
}

#[tokio::test]
async fn a_rate_limited_reply_is_delivered_exactly_once() {
    let app = TestApp::spawn().await;
    app.fake.script("sendMessage", 429, too_many_requests(3));
    let sender = app.sender();

    let (result, delivery) =
        send_with_retries(sender.as_ref(), &outbound(CHAT, None, None, "hello")).await;

    assert_eq!(result.expect("delivered").message_ids.len(), 1);
    assert_eq!(delivery.waits, vec![Duration::from_secs(3)]);
    assert_eq!(app.fake.delivered_texts(), vec!["hello".to_owned()]);
}

#[tokio::test]
async fn a_rate_limit_between_chunks_sends_only_the_rest_on_retry() {
    let app = TestApp::spawn().await;
    let text = format!("{}\n\n{}", "a".repeat(4000), "b".repeat(4000));
    // The first chunk goes through; the second is rate limited once.
    app.fake.script("sendMessage", 200, json!({"ok": true, "result": {
        "message_id": 1, "date": 0, "chat": {"id": CHAT, "type": "private", "first_name": "C"}, "text": "a"
    }}));
    app.fake.script("sendMessage", 429, too_many_requests(1));
    let sender = app.sender();

    let (result, delivery) =
        send_with_retries(sender.as_ref(), &outbound(CHAT, None, None, &text)).await;

    let receipt = result.expect("delivered");
    assert_eq!(receipt.message_ids, vec!["1".to_owned(), "5000".to_owned()]);
    assert_eq!(delivery.waits, vec![Duration::from_secs(1)]);
    let texts: Vec<String> = app
        .fake
        .calls("sendMessage")
        .iter()
        .map(|c| c["text"].as_str().unwrap()[..1].to_owned())
        .collect();
    assert_eq!(
        texts,
        vec!["a", "b", "b"],
        "the first chunk is not sent again"
    );
}

#[tokio::test]
async fn a_missing_chat_is_a_permanent_failure() {
    let app = TestApp::spawn().await;
    app.fake.script(
        "sendMessage",
        400,
        json!({"ok": false, "error_code": 400, "description": "Bad Request: chat not found"}),
    );

    let result = app
        .sender()
        .send(&outbound(CHAT, None, None, "anyone?"))
        .await;

    assert!(matches!(result, Err(SendError::Permanent(_))), "{result:?}");
}

#[tokio::test]
async fn typing_sends_a_chat_action_in_the_topic() {
    let app = TestApp::spawn().await;
    let sender = app.sender();

    sender
        .typing(&outbound(CHAT, Some(300), None, "").chat_ref())
        .await;

    let calls = app.fake.calls("sendChatAction");
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["chat_id"], json!(CHAT));
    assert_eq!(calls[0]["action"], "typing");
    assert_eq!(calls[0]["message_thread_id"], 300);
    assert_eq!(sender.typing_interval(), Some(Duration::from_secs(4)));
}
