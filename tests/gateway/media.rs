//! Media end to end: photos sent to the fake Telegram are downloaded by the
//! adapter, stored once in the blob folder, and reach the model as image
//! parts (a vision model, OpenAI and Anthropic formats) or as a text note
//! (any other model); an oversized photo gets the limit reply and no turn;
//! a text document reaches the model as text and an archive gets a reply
//! naming its type; a voice note gets "voice notes are not enabled" (no
//! transcription configured); a Feishu image
//! message is fetched with the tenant token.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::Value;
use switchboard::llm::ProviderKind;
use switchboard_test_support::telegram::{FakeTelegram, TgUser};

use crate::helpers::{FakeLlm, TestApp, telegram_settings};
use crate::helpers::{TINY_PNG as PNG, files_under, last_user_content};

const ADA: TgUser = TgUser {
    id: 777,
    first_name: "Ada",
};

#[tokio::test]
async fn a_vision_model_sees_the_photo_stored_once_and_the_prefix_holds() {
    let telegram = FakeTelegram::start().await;
    telegram.add_file("photo-1", PNG);
    let llm = FakeLlm::echo().await;
    let blobs = tempfile::tempdir().expect("tempdir");
    let folder = blobs.path().join("media");
    let gateway = TestApp::spawn_with(&llm, |s| {
        s.telegram = Some(telegram_settings(&telegram));
        s.media.vision_models = vec!["fake-model".to_owned()];
        s.media.folder.clone_from(&folder);
    })
    .await;

    // A photo without a caption is answered, not dropped.
    telegram.ask_with_photo(ADA, "photo-1", None).await;
    telegram
        .ask_with_photo(ADA, "photo-1", Some("and again"))
        .await;

    let requests = llm.requests();
    assert_eq!(requests.len(), 2, "one model call per photo");
    let data_url = format!("data:image/png;base64,{}", BASE64.encode(PNG));
    let first = last_user_content(&requests[0].json());
    assert_eq!(
        first,
        serde_json::json!([{"type": "image_url", "image_url": {"url": data_url}}]),
        "a photo alone is one image part"
    );
    let second = last_user_content(&requests[1].json());
    assert_eq!(
        second,
        serde_json::json!([
            {"type": "text", "text": "and again"},
            {"type": "image_url", "image_url": {"url": data_url}},
        ]),
        "the caption comes first, then the image"
    );
    // The second request replays the first turn byte for byte.
    let before = requests[0].raw_messages();
    let after = requests[1].raw_messages();
    assert!(
        after.starts_with(before.trim_end_matches(']')),
        "the prompt prefix changed:\n{before}\n{after}"
    );
    // Downloaded twice (two messages), stored once.
    assert_eq!(telegram.downloads("photo-1"), 2);
    let stored = files_under(&folder);
    assert_eq!(stored.len(), 1, "one blob for the same photo: {stored:?}");
    assert_eq!(std::fs::read(&stored[0]).expect("blob"), PNG);
    // The stored user entry refers to the blob by hash, no bytes in it.
    let media: Vec<Option<String>> =
        sqlx::query_scalar("SELECT media FROM messages WHERE role = 'user' ORDER BY id")
            .fetch_all(&mut *gateway.gateway.store.conn().await.expect("conn"))
            .await
            .expect("rows");
    assert_eq!(media.len(), 2);
    let refs: Value = serde_json::from_str(media[0].as_deref().expect("media")).expect("json");
    let name = stored[0]
        .file_name()
        .and_then(|n| n.to_str())
        .expect("name");
    assert_eq!(refs[0]["hash"], name);
    assert_eq!(refs[0]["media_type"], "image/png");
    assert_eq!(
        (refs[0]["width"].as_u64(), refs[0]["height"].as_u64()),
        (Some(1), Some(1))
    );
    gateway.stop().await;
}

#[tokio::test]
async fn an_anthropic_vision_model_gets_an_image_block() {
    let telegram = FakeTelegram::start().await;
    telegram.add_file("photo-a", PNG);
    let llm = FakeLlm::echo().await;
    let gateway = TestApp::spawn_with(&llm, |s| {
        s.telegram = Some(telegram_settings(&telegram));
        s.llm.provider = ProviderKind::Anthropic;
        s.llm.base_url =
            switchboard::domain::BaseUrl::parse(&llm.anthropic_base()).expect("a test URL");
        s.media.vision_models = vec!["fake-model".to_owned()];
    })
    .await;

    telegram
        .ask_with_photo(ADA, "photo-a", Some("what is this?"))
        .await;

    let content = last_user_content(&llm.requests()[0].json());
    let blocks = content.as_array().expect("blocks");
    assert_eq!(blocks[0]["type"], "text");
    assert_eq!(blocks[0]["text"], "what is this?");
    assert_eq!(
        blocks[1]["source"],
        serde_json::json!({"type": "base64", "media_type": "image/png",
                           "data": BASE64.encode(PNG)})
    );
    assert_eq!(blocks[1]["type"], "image");
    gateway.stop().await;
}

#[tokio::test]
async fn a_model_without_vision_gets_a_note_instead() {
    let telegram = FakeTelegram::start().await;
    telegram.add_file("photo-2", PNG);
    let llm = FakeLlm::echo().await;
    let gateway =
        TestApp::spawn_with(&llm, |s| s.telegram = Some(telegram_settings(&telegram))).await;

    let reply = telegram.ask_with_photo(ADA, "photo-2", Some("look")).await;

    let note = "[image: 1×1, not shown: this model has no vision]";
    assert_eq!(
        last_user_content(&llm.requests()[0].json()),
        Value::String(format!("look\n{note}"))
    );
    assert!(reply.contains(note), "{reply}");
    gateway.stop().await;
}

#[tokio::test]
async fn an_oversized_photo_gets_the_limit_reply_and_no_turn() {
    let telegram = FakeTelegram::start().await;
    telegram.add_file("photo-3", PNG);
    let llm = FakeLlm::echo().await;
    let blobs = tempfile::tempdir().expect("tempdir");
    let folder = blobs.path().join("media");
    let gateway = TestApp::spawn_with(&llm, |s| {
        s.telegram = Some(telegram_settings(&telegram));
        s.media.max_file_bytes = std::num::NonZero::new(64).unwrap();
        s.media.folder.clone_from(&folder);
    })
    .await;

    let reply = telegram
        .ask_with_photo(ADA, "photo-3", Some("big one"))
        .await;

    assert!(
        reply.contains("too large") && reply.contains("64 bytes"),
        "{reply}"
    );
    assert!(llm.requests().is_empty(), "no model call");
    assert_eq!(telegram.downloads("photo-3"), 0, "not even downloaded");
    assert!(files_under(&folder).is_empty());
    gateway.stop().await;
}

#[tokio::test]
async fn a_feishu_image_message_is_fetched_with_the_tenant_token_and_seen() {
    use switchboard_test_support::eventually;
    use switchboard_test_support::feishu::{FakeFeishu, message_event};

    use crate::feishu::{feishu_settings, post_signed};

    let feishu = FakeFeishu::start().await;
    feishu.add_resource("om_img1", "img_v1", PNG);
    let llm = FakeLlm::echo().await;
    let gateway = TestApp::spawn_with(&llm, |s| {
        s.feishu = Some(feishu_settings(&feishu));
        s.media.vision_models = vec!["fake-model".to_owned()];
    })
    .await;

    // Feishu images used to be acknowledged and ignored.
    let mut event = message_event("ev-img-1", "p2p", "", serde_json::json!([]));
    event["event"]["message"]["message_id"] = serde_json::json!("om_img1");
    event["event"]["message"]["message_type"] = serde_json::json!("image");
    event["event"]["message"]["content"] =
        serde_json::json!(serde_json::json!({"image_key": "img_v1"}).to_string());
    assert_eq!(post_signed(&gateway, &event).await, 200);
    eventually("the reply to the image", || {
        std::future::ready(!feishu.delivered().is_empty())
    })
    .await;

    let data_url = format!("data:image/png;base64,{}", BASE64.encode(PNG));
    assert_eq!(
        last_user_content(&llm.requests()[0].json()),
        serde_json::json!([{"type": "image_url", "image_url": {"url": data_url}}])
    );
    let downloads = feishu.resource_downloads();
    assert_eq!(downloads.len(), 1);
    assert_eq!(downloads[0].2.as_deref(), Some("type=image"));
    gateway.stop().await;
}

#[tokio::test]
async fn a_text_document_reaches_the_model_and_a_binary_one_gets_a_reply() {
    let telegram = FakeTelegram::start().await;
    telegram.add_file("doc-1", b"name,qty\napples,3\n");
    telegram.add_file("doc-2", b"PK\x03\x04\x14\x00\x00\x00");
    let llm = FakeLlm::echo().await;
    let gateway =
        TestApp::spawn_with(&llm, |s| s.telegram = Some(telegram_settings(&telegram))).await;

    telegram.dm_document(ADA, "doc-1", "stock.csv", "text/csv", Some("sum it"));
    telegram.reply_after(0, ADA.id, "the CSV").await;
    assert_eq!(
        last_user_content(&llm.requests()[0].json()),
        Value::String(
            "sum it\n[file: stock.csv]\nname,qty\napples,3\n\n[end of file: stock.csv]".to_owned()
        )
    );

    telegram.dm_document(ADA, "doc-2", "report.zip", "application/zip", None);
    let reply = telegram.reply_after(1, ADA.id, "the archive").await;
    assert!(
        reply.contains("report.zip") && reply.contains("application/zip"),
        "{reply}"
    );
    assert_eq!(llm.requests().len(), 1, "no model call for the archive");
    gateway.stop().await;
}

#[tokio::test]
async fn a_voice_note_is_answered_that_voice_notes_are_not_enabled() {
    let telegram = FakeTelegram::start().await;
    telegram.add_file("voice-1", b"OggS not really");
    let llm = FakeLlm::echo().await;
    let gateway =
        TestApp::spawn_with(&llm, |s| s.telegram = Some(telegram_settings(&telegram))).await;

    telegram.dm_voice(ADA, "voice-1");
    telegram
        .wait_for("the reply to the voice note", || {
            !telegram.sent().is_empty()
        })
        .await;

    let reply = telegram.sent().swap_remove(0).text;
    assert!(reply.contains("voice notes are not enabled"), "{reply}");
    assert!(llm.requests().is_empty(), "no model call");
    assert_eq!(telegram.downloads("voice-1"), 0, "not downloaded");
    gateway.stop().await;
}

#[tokio::test]
async fn a_restart_between_receiving_and_answering_loses_nothing() {
    let telegram = FakeTelegram::start().await;
    telegram.add_file("photo-r", PNG);
    let llm = FakeLlm::echo().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = crate::helpers::test_settings(&llm, &dir).await;
    settings.telegram = Some(telegram_settings(&telegram));
    settings.media.vision_models = vec!["fake-model".to_owned()];
    // One database for both instances, until the end of the test.
    let _database = crate::helpers::hold_database(&settings);
    // The first instance records the photo but holds it (a long burst
    // window), then stops before answering it.
    let mut holding = settings.clone();
    holding.sessions.burst_window = std::time::Duration::from_millis(600_000);
    let first = TestApp::start(holding, tempfile::tempdir().expect("tempdir")).await;
    telegram.dm_photo(ADA, "photo-r", (1, 1), Some("still there?"));
    crate::helpers::eventually_recorded(&first).await;
    first.stop().await;
    assert!(llm.requests().is_empty(), "not answered before the restart");

    let second = TestApp::start(settings, tempfile::tempdir().expect("tempdir")).await;
    telegram
        .wait_for("the reply after the restart", || {
            !telegram.sent().is_empty()
        })
        .await;

    let data_url = format!("data:image/png;base64,{}", BASE64.encode(PNG));
    assert_eq!(
        last_user_content(&llm.requests()[0].json()),
        serde_json::json!([
            {"type": "text", "text": "still there?"},
            {"type": "image_url", "image_url": {"url": data_url}},
        ])
    );
    assert_eq!(telegram.downloads("photo-r"), 1, "not downloaded again");
    second.stop().await;
}
