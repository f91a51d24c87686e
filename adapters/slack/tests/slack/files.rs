//! Files shared in Slack reach the core as attachments whose fetcher
//! downloads them with the bot token, within the core's cap.

use serde_json::json;
use switchboard_contract::{AttachmentKind, FetchError, InboundMessage};
use switchboard_test_support::media::gradient_png;
use switchboard_test_support::slack::message_event;

use crate::helpers::{TestApp, spawn_app};

const TS: &str = "1700000600.000100";

/// A DM sharing one file, as Slack sends it (`subtype: file_share`).
async fn share(app: &TestApp, file: serde_json::Value) -> InboundMessage {
    let mut event = message_event("D0DM", "im", "what is in this?", TS);
    event["subtype"] = json!("file_share");
    event["files"] = json!([file]);
    assert_eq!(app.deliver(event).await.statuses, [200]);
    app.only_submission().await
}

#[tokio::test]
async fn a_shared_image_is_downloaded_with_the_bot_token() {
    let app = spawn_app().await;
    let png = gradient_png(32, 32, false);
    let file = app.fake.add_file("chart.png", "image/png", &png, None);

    let message = share(&app, file).await;

    assert_eq!(message.text, "what is in this?");
    let [attachment] = message.attachments.as_slice() else {
        panic!("one attachment: {:?}", message.attachments);
    };
    assert_eq!(attachment.kind, AttachmentKind::Image);
    assert_eq!(attachment.name.as_deref(), Some("chart.png"));
    assert_eq!(attachment.media_type.as_deref(), Some("image/png"));
    assert_eq!(attachment.size, Some(png.len() as u64));
    assert_eq!(attachment.url, None, "no link the core could leak");
    let fetcher = attachment.fetch.as_ref().expect("a fetcher");
    assert_eq!(fetcher.fetch(1024 * 1024).await.unwrap(), png);
    let downloads = app.fake.downloads();
    assert_eq!(downloads.len(), 1);
    assert!(downloads[0].authorised, "sent with the bot token");
}

#[tokio::test]
async fn a_file_declared_larger_than_the_cap_is_refused_before_downloading() {
    let app = spawn_app().await;
    let file = app.fake.add_file(
        "talk.mp3",
        "audio/mpeg",
        b"ID3 tiny",
        Some(50 * 1024 * 1024),
    );

    let message = share(&app, file).await;

    let attachment = &message.attachments[0];
    assert_eq!(attachment.kind, AttachmentKind::Audio);
    let fetched = attachment.fetch.as_ref().unwrap().fetch(1024 * 1024).await;
    assert_eq!(
        fetched,
        Err(FetchError::TooLarge {
            size: 50 * 1024 * 1024,
            limit: 1024 * 1024
        })
    );
    assert!(app.fake.downloads().is_empty(), "nothing was requested");
}

#[tokio::test]
async fn a_file_larger_than_declared_is_cut_off_while_reading() {
    let app = spawn_app().await;
    let bytes = vec![7u8; 4096];
    let file = app
        .fake
        .add_file("notes.pdf", "application/pdf", &bytes, Some(100));

    let message = share(&app, file).await;

    let attachment = &message.attachments[0];
    assert_eq!(attachment.kind, AttachmentKind::Document);
    let fetched = attachment.fetch.as_ref().unwrap().fetch(1000).await;
    assert!(
        matches!(fetched, Err(FetchError::TooLarge { limit: 1000, .. })),
        "{fetched:?}"
    );
}

#[tokio::test]
async fn a_voice_clip_is_a_voice_note() {
    let app = spawn_app().await;
    let mut file = app
        .fake
        .add_file("audio_message.webm", "audio/webm", b"webm", None);
    file["subtype"] = json!("slack_audio");

    let message = share(&app, file).await;

    assert_eq!(message.attachments[0].kind, AttachmentKind::Voice);
}

#[tokio::test]
async fn a_file_on_another_host_never_gets_the_token() {
    let app = spawn_app().await;
    let mut file = app.fake.add_file("x.png", "image/png", b"png", None);
    file["url_private_download"] = json!("https://files.example.com/x.png");

    let message = share(&app, file).await;

    let fetched = message.attachments[0]
        .fetch
        .as_ref()
        .unwrap()
        .fetch(1024)
        .await;
    let Err(FetchError::Failed(reason)) = fetched else {
        panic!("{fetched:?}");
    };
    assert!(!reason.contains("example.com"), "{reason}");
    assert!(app.fake.downloads().is_empty());
}
