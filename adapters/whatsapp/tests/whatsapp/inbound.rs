//! Messages in: what reaches the core, media downloads, button presses.

use serde_json::json;
use switchboard_contract::{ActionReply, AttachmentKind, ChatKind, FetchError};
use switchboard_test_support::eventually;
use switchboard_test_support::media::{gradient_png, tone_wav};
use switchboard_test_support::whatsapp::{
    self, ACCESS_TOKEN, CUSTOMER, CUSTOMER_NAME, PHONE_NUMBER_ID, button_reply, image, messages,
    replying, text, voice_note,
};

use crate::helpers::spawn_app;

#[tokio::test]
async fn a_text_message_reaches_the_core_as_a_direct_message() {
    let app = spawn_app().await;
    let payload = messages(
        PHONE_NUMBER_ID,
        vec![replying(
            text("wamid.T1", "what is 17*23?"),
            "wamid.EARLIER",
        )],
    );

    assert_eq!(app.webhook.deliver(&payload).await, 200);

    let submitted = app.sink.submissions();
    assert_eq!(submitted.len(), 1);
    let message = &submitted[0];
    assert_eq!(message.platform.as_str(), "whatsapp");
    assert_eq!(message.account.as_str(), PHONE_NUMBER_ID);
    assert_eq!(message.event_id.as_str(), "wamid.T1");
    assert_eq!(message.chat.as_str(), CUSTOMER);
    assert_eq!(message.chat_kind, ChatKind::Direct);
    assert_eq!(message.thread, None);
    assert_eq!(message.sender.id.as_str(), CUSTOMER);
    assert_eq!(message.sender.display_name.as_deref(), Some(CUSTOMER_NAME));
    assert!(!message.sender.is_bot);
    assert!(message.mentions_bot);
    assert_eq!(message.text, "what is 17*23?");
    assert_eq!(message.reply_to.as_deref(), Some("wamid.EARLIER"));
    assert_eq!(message.message_id.as_deref(), Some("wamid.T1"));
    assert!(message.attachments.is_empty());
}

#[tokio::test]
async fn a_voice_note_is_a_voice_attachment_downloaded_with_the_token() {
    let app = spawn_app().await;
    let wav = tone_wav(200);
    app.fake.add_media("7001", "audio/ogg", &wav);
    let payload = messages(PHONE_NUMBER_ID, vec![voice_note("wamid.V1", "7001")]);

    assert_eq!(app.webhook.deliver(&payload).await, 200);

    let message = app.sink.submissions().remove(0);
    assert_eq!(message.text, "");
    let attachment = &message.attachments[0];
    assert_eq!(attachment.kind, AttachmentKind::Voice);
    assert_eq!(
        attachment.media_type.as_deref(),
        Some("audio/ogg; codecs=opus")
    );
    assert_eq!(attachment.url, None, "the media URL needs the token");
    let fetch = attachment.fetch.as_ref().expect("a fetcher");
    assert_eq!(fetch.fetch(1024 * 1024).await.unwrap(), wav);
    assert_eq!(app.fake.media_downloads(), 1);

    // Over the cap, refused from the declared size: nothing downloaded.
    let refused = fetch.fetch(100).await.unwrap_err();
    assert!(
        matches!(refused, FetchError::TooLarge { limit: 100, .. }),
        "{refused:?}"
    );
    assert_eq!(app.fake.media_downloads(), 1);
    assert_eq!(app.fake.media_lookups(), 2);
}

#[tokio::test]
async fn an_image_carries_its_caption_and_a_lying_size_is_still_capped() {
    let app = spawn_app().await;
    let png = gradient_png(64, 64, false);
    app.fake.add_media("7002", "image/png", &png);
    app.fake.add_media_declaring("7003", "image/png", &png, 10);
    let payload = messages(
        PHONE_NUMBER_ID,
        vec![
            image("wamid.I1", "7002", "what is this?"),
            image("wamid.I2", "7003", ""),
        ],
    );

    assert_eq!(app.webhook.deliver(&payload).await, 200);

    let submitted = app.sink.submissions();
    assert_eq!(submitted[0].text, "what is this?");
    let first = &submitted[0].attachments[0];
    assert_eq!(first.kind, AttachmentKind::Image);
    let fetch = first.fetch.as_ref().unwrap();
    assert_eq!(fetch.fetch(1024 * 1024).await.unwrap(), png);
    let lying = submitted[1].attachments[0].fetch.as_ref().unwrap();
    let capped = lying.fetch(100).await.unwrap_err();
    assert!(matches!(capped, FetchError::TooLarge { .. }), "{capped:?}");
}

#[tokio::test]
async fn documents_audio_video_and_stickers_are_attachments_of_their_kind() {
    let app = spawn_app().await;
    let media = |kind: &str, extra: serde_json::Value| {
        let mut content = json!({"id": "7010", "mime_type": "application/pdf"});
        content
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        whatsapp::message(&format!("wamid.{kind}"), kind, content)
    };
    let payload = messages(
        PHONE_NUMBER_ID,
        vec![
            media(
                "document",
                json!({"filename": "report.pdf", "caption": "read it"}),
            ),
            media("audio", json!({"voice": false})),
            media("video", json!({})),
            media("sticker", json!({"animated": false})),
        ],
    );

    assert_eq!(app.webhook.deliver(&payload).await, 200);

    let kinds: Vec<_> = app
        .sink
        .submissions()
        .iter()
        .map(|message| message.attachments[0].kind)
        .collect();
    assert_eq!(
        kinds,
        [
            AttachmentKind::Document,
            AttachmentKind::Audio,
            AttachmentKind::Video,
            AttachmentKind::Sticker
        ]
    );
    let document = &app.sink.submissions()[0];
    assert_eq!(document.attachments[0].name.as_deref(), Some("report.pdf"));
    assert_eq!(document.text, "read it");
}

#[tokio::test]
async fn a_failed_download_names_neither_url_nor_token() {
    let app = spawn_app().await;
    let payload = messages(PHONE_NUMBER_ID, vec![image("wamid.I9", "7404", "")]);
    assert_eq!(app.webhook.deliver(&payload).await, 200);

    let message = app.sink.submissions().remove(0);
    let err = message.attachments[0]
        .fetch
        .as_ref()
        .unwrap()
        .fetch(1024)
        .await
        .unwrap_err();

    let shown = err.to_string();
    assert!(matches!(err, FetchError::Failed(_)), "{shown}");
    assert!(
        !shown.contains(ACCESS_TOKEN) && !shown.contains("http"),
        "{shown}"
    );
}

#[tokio::test]
async fn a_location_becomes_a_note() {
    let app = spawn_app().await;
    let location = whatsapp::message(
        "wamid.L1",
        "location",
        json!({"latitude": 52.370216, "longitude": 4.895168, "name": "Dam Square", "address": "Amsterdam"}),
    );

    assert_eq!(
        app.webhook
            .deliver(&messages(PHONE_NUMBER_ID, vec![location]))
            .await,
        200
    );

    assert_eq!(
        app.sink.submissions()[0].text,
        "📍 Location: Dam Square, Amsterdam (52.370216, 4.895168)"
    );
}

#[tokio::test]
async fn a_button_press_reaches_act_and_its_answer_is_sent() {
    let app = spawn_app().await;
    *app.sink.action_reply.lock().unwrap() = ActionReply {
        notice: Some("Allowed.".to_owned()),
        update: Some("May I run `ls`? — allowed".to_owned()),
    };
    let press = button_reply("wamid.P1", "wamid.QUESTION", "ap:7:allow", "Allow");

    assert_eq!(
        app.webhook
            .deliver(&messages(PHONE_NUMBER_ID, vec![press]))
            .await,
        200
    );

    let actions = app.sink.actions();
    assert_eq!(actions.len(), 1);
    let action = &actions[0];
    assert_eq!(action.action.as_str(), "ap:7:allow");
    assert_eq!(action.event_id.as_str(), "wamid.P1");
    assert_eq!(action.message_id.as_deref(), Some("wamid.QUESTION"));
    assert_eq!(action.chat.as_str(), CUSTOMER);
    assert_eq!(action.sender.display_name.as_deref(), Some(CUSTOMER_NAME));
    assert!(app.sink.submissions().is_empty());
    eventually("the press's answers to be sent", || async {
        app.fake.sent().len() == 2
    })
    .await;
    let sent = app.fake.sent();
    assert_eq!(sent[0].text(), Some("May I run `ls`? — allowed"));
    assert_eq!(sent[1].text(), Some("Allowed."));
    assert!(sent.iter().all(|m| m.reply_to() == Some("wamid.QUESTION")));
}

#[tokio::test]
async fn a_press_of_a_button_that_is_not_ours_is_ignored() {
    let app = spawn_app().await;
    let press = button_reply("wamid.P2", "wamid.Q", "has spaces", "Odd");

    assert_eq!(
        app.webhook
            .deliver(&messages(PHONE_NUMBER_ID, vec![press]))
            .await,
        200
    );

    assert!(app.sink.actions().is_empty());
}
