//! No token, app secret, verify token or person's phone number in any log
//! line (at every level, debug and trace included) or error.

use switchboard_test_support::eventually;
use switchboard_test_support::media::tone_wav;
use switchboard_test_support::whatsapp::{
    ACCESS_TOKEN, APP_SECRET, CUSTOMER, PHONE_NUMBER_ID, VERIFY_TOKEN, failed_status, messages,
    replying, sign, status, statuses, text, voice_note,
};

use crate::helpers::{Logs, outbound, spawn_app};

const SECRETS: [&str; 4] = [ACCESS_TOKEN, APP_SECRET, VERIFY_TOKEN, CUSTOMER];

fn assert_clean(what: &str, text: &str) {
    for secret in SECRETS {
        assert!(!text.contains(secret), "{what} holds {secret:?}:\n{text}");
    }
}

#[tokio::test]
async fn no_secret_or_phone_number_reaches_a_log_line_or_an_error() {
    let (logs, _guard) = Logs::capture();
    let app = spawn_app().await;
    let mut errors = Vec::new();

    // In: the handshake (right and wrong), a forged and a real payload.
    app.webhook.handshake(VERIFY_TOKEN, "42").await;
    app.webhook.handshake("wrong", "42").await;
    let body = b"{}".to_vec();
    app.webhook.post(body, Some(sign("forged", b"{}"))).await;
    app.fake.add_media("7001", "audio/ogg", &tone_wav(100));
    let payload = messages(
        PHONE_NUMBER_ID,
        vec![
            replying(text("wamid.R1", "hello"), "wamid.EARLIER"),
            voice_note("wamid.R2", "7001"),
        ],
    );
    assert_eq!(app.webhook.deliver(&payload).await, 200);
    let voice = app.sink.submissions().remove(1);
    let fetch = voice.attachments[0].fetch.clone().unwrap();
    fetch.fetch(1 << 20).await.unwrap();
    errors.push(fetch.fetch(10).await.unwrap_err().to_string());

    // Out: a reply, typing, a rate limit, a refusal naming the number, a
    // refused token, a closed window without a template.
    let chat = outbound("x", "", None).chat_ref();
    app.sender.typing(&chat).await;
    let receipt = app
        .sender
        .send(&outbound("sb-1", "**hi**", Some("wamid.R1")))
        .await
        .unwrap();
    for (status, code) in [(429, None), (400, Some(131_030)), (401, Some(190))] {
        app.fake.fail_next_sends(1, status, code, None);
        let err = app.sender.send(&outbound("sb-2", "hi", None)).await;
        errors.push(err.unwrap_err().to_string());
    }
    app.fake.close_window(CUSTOMER);
    let closed = app.sender.send(&outbound("sb-3", "hi", None)).await;
    errors.push(closed.unwrap_err().to_string());

    // Statuses, a failure among them (its details name the person).
    let wamid = &receipt.message_ids[0];
    let payload = statuses(
        PHONE_NUMBER_ID,
        vec![
            status(wamid, "delivered"),
            failed_status(wamid, 131_047, "Re-engagement message"),
        ],
    );
    assert_eq!(app.webhook.deliver(&payload).await, 200);
    eventually("the failed status to be handled", || async {
        logs.text().contains("refused outside the 24-hour window")
    })
    .await;

    let logged = logs.text();
    assert!(logged.contains("…4567"), "the capture works: {logged}");
    assert!(
        logged.contains("DEBUG"),
        "debug lines are captured: {logged}"
    );
    assert_clean("the log", &logged);
    for error in &errors {
        assert_clean("an error", error);
    }
}
