//! What media become for the model, end to end through the fake platforms:
//! a photo over `media.max_image_side` reaches a vision model scaled down
//! (a JPEG of its own, stored next to the original, the same bytes on every
//! turn); a voice note reaches the model as its transcript from a fake
//! transcription server (Telegram and Feishu), and a failing server gets a
//! clear reply with the audio kept and a resend working; a PDF's text
//! reaches the model and a PDF without text gets a reply; a Discord image
//! attachment and voice message reach the model through the fake Discord;
//! turns with every kind of media keep the prompt prefix byte-identical; a
//! voice note held across a restart is transcribed once, by the instance
//! that answers it; and a slow transcription holds up only its own chat.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::Value;
use switchboard::media::voice::TranscriptionSettings;
use switchboard_discord::DiscordSettings;
use switchboard_test_support::media::{gradient_png, test_pdf, tone_wav};
use switchboard_test_support::telegram::{FakeTelegram, TgUser};
use switchboard_test_support::transcription::FakeTranscription;

use crate::helpers::{FakeLlm, TestApp, telegram_settings};
use crate::helpers::{assert_prefix_holds, files_under, last_user_content};

const ADA: TgUser = TgUser {
    id: 778,
    first_name: "Ada",
};
const GRACE: TgUser = TgUser {
    id: 779,
    first_name: "Grace",
};

/// Transcription through `server`, without a key.
fn transcription(server: &FakeTranscription) -> TranscriptionSettings {
    TranscriptionSettings {
        base_url: switchboard::domain::BaseUrl::parse(&server.base_url()).expect("the fake URL"),
        model: "whisper-test".to_owned(),
        api_key_env: "SWITCHBOARD_TEST_NO_SUCH_KEY".to_owned(),
        ..TranscriptionSettings::default()
    }
}

#[tokio::test]
async fn a_large_photo_reaches_the_vision_model_scaled_down_the_same_on_every_turn() {
    let telegram = FakeTelegram::start().await;
    let png = gradient_png(640, 320, false);
    telegram.add_file("big-1", &png);
    let llm = FakeLlm::echo().await;
    let gateway = TestApp::spawn_with(&llm, |s| {
        s.telegram = Some(telegram_settings(&telegram));
        s.media.vision_models = vec!["fake-model".to_owned()];
        s.media.max_image_side = 160;
    })
    .await;
    let folder = &gateway.gateway.settings.media.folder;

    telegram.dm_photo(ADA, "big-1", (640, 320), Some("what is it?"));
    telegram.reply_after(0, ADA.id, "the photo").await;
    telegram.dm_photo(ADA, "big-1", (640, 320), Some("and again"));
    telegram.reply_after(1, ADA.id, "the second photo").await;

    let requests = llm.requests();
    assert_eq!(requests.len(), 2);
    let first = last_user_content(&requests[0].json());
    let url = first[1]["image_url"]["url"]
        .as_str()
        .expect("an image part");
    let data = url
        .strip_prefix("data:image/jpeg;base64,")
        .expect("a JPEG data URL");
    let jpeg = BASE64.decode(data).expect("base64");
    let shown = image::load_from_memory(&jpeg).expect("a real image");
    assert_eq!((shown.width(), shown.height()), (160, 80));
    // The second turn shows the same bytes, and replays the first as it was.
    let second = last_user_content(&requests[1].json());
    assert_eq!(second[1], first[1]);
    assert_prefix_holds(&requests);
    // Stored: the original as sent, and the scaled-down version, once each.
    let mut stored: Vec<Vec<u8>> = files_under(folder)
        .iter()
        .map(|path| std::fs::read(path).expect("blob"))
        .collect();
    stored.sort_by_key(Vec::len);
    assert_eq!(stored, vec![jpeg, png]);
    gateway.stop().await;
}

#[tokio::test]
async fn a_voice_note_reaches_the_model_as_its_transcript_and_a_failure_loses_nothing() {
    let telegram = FakeTelegram::start().await;
    let wav = tone_wav(200);
    telegram.add_file("voice-t", &wav);
    let server = FakeTranscription::start("remind me to buy milk").await;
    let llm = FakeLlm::echo().await;
    let gateway = TestApp::spawn_with(&llm, |s| {
        s.telegram = Some(telegram_settings(&telegram));
        s.media.transcription = Some(transcription(&server));
    })
    .await;
    let folder = gateway.gateway.settings.media.folder.clone();

    telegram.dm_voice(ADA, "voice-t");
    let reply = telegram.reply_after(0, ADA.id, "the voice note").await;

    let transcribed = "[voice note, transcribed] remind me to buy milk";
    assert_eq!(
        last_user_content(&llm.requests()[0].json()),
        Value::String(transcribed.to_owned())
    );
    assert!(reply.contains(transcribed), "{reply}");
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].file, wav, "the audio as downloaded");
    assert_eq!(requests[0].model.as_deref(), Some("whisper-test"));
    let stored = files_under(&folder);
    assert_eq!(stored.len(), 1, "the audio is kept: {stored:?}");
    assert_eq!(std::fs::read(&stored[0]).expect("blob"), wav);

    // The server fails: a clear reply, no turn, the audio still kept.
    server.fail_with(502);
    telegram.dm_voice(ADA, "voice-t");
    let reply = telegram
        .reply_after(1, ADA.id, "the failed voice note")
        .await;
    assert!(
        reply.contains("could not transcribe") && reply.contains("try again"),
        "{reply}"
    );
    assert_eq!(llm.requests().len(), 1, "no model call");
    assert_eq!(files_under(&folder).len(), 1);

    // Sent again once the server is back, it goes through.
    server.answer("remind me to buy bread");
    telegram.dm_voice(ADA, "voice-t");
    telegram
        .reply_after(2, ADA.id, "the resent voice note")
        .await;
    assert_eq!(
        last_user_content(&llm.requests()[1].json()),
        Value::String("[voice note, transcribed] remind me to buy bread".to_owned())
    );
    assert_eq!(files_under(&folder).len(), 1, "stored once");
    gateway.stop().await;
}

#[tokio::test]
async fn a_pdf_reaches_the_model_as_text_and_one_without_text_gets_a_reply() {
    let telegram = FakeTelegram::start().await;
    telegram.add_file(
        "pdf-1",
        &test_pdf(&["Quarterly report", "Revenue rose 12%"]),
    );
    telegram.add_file("pdf-2", &test_pdf(&[]));
    let mut broken = test_pdf(&["cut"]);
    broken.truncate(30);
    telegram.add_file("pdf-3", &broken);
    let llm = FakeLlm::echo().await;
    let gateway =
        TestApp::spawn_with(&llm, |s| s.telegram = Some(telegram_settings(&telegram))).await;

    telegram.dm_document(
        ADA,
        "pdf-1",
        "report.pdf",
        "application/pdf",
        Some("sum up"),
    );
    telegram.reply_after(0, ADA.id, "the PDF").await;
    let Value::String(text) = last_user_content(&llm.requests()[0].json()) else {
        panic!("text content")
    };
    assert!(text.starts_with("sum up\n[file: report.pdf]\n"), "{text}");
    assert!(text.contains("Quarterly report"), "{text}");
    assert!(text.contains("Revenue rose 12%"), "{text}");
    assert!(text.ends_with("\n[end of file: report.pdf]"), "{text}");

    telegram.dm_document(ADA, "pdf-2", "scan.pdf", "application/pdf", None);
    let reply = telegram.reply_after(1, ADA.id, "the empty PDF").await;
    assert!(
        reply.contains("scan.pdf") && reply.contains("no text"),
        "{reply}"
    );
    telegram.dm_document(ADA, "pdf-3", "torn.pdf", "application/pdf", None);
    let reply = telegram.reply_after(2, ADA.id, "the broken PDF").await;
    assert!(
        reply.contains("torn.pdf") && reply.contains("could not read"),
        "{reply}"
    );
    assert_eq!(llm.requests().len(), 1, "no model call for either");
    gateway.stop().await;
}

#[tokio::test]
async fn a_feishu_audio_message_is_transcribed() {
    use switchboard_test_support::eventually;
    use switchboard_test_support::feishu::{FakeFeishu, message_event};

    use crate::feishu::{feishu_settings, post_signed};

    let feishu = FakeFeishu::start().await;
    let wav = tone_wav(100);
    feishu.add_resource("om_audio1", "file_v3_audio", &wav);
    let server = FakeTranscription::start("see you at noon").await;
    let llm = FakeLlm::echo().await;
    let gateway = TestApp::spawn_with(&llm, |s| {
        s.feishu = Some(feishu_settings(&feishu));
        s.media.transcription = Some(transcription(&server));
    })
    .await;

    let mut event = message_event("ev-audio-1", "p2p", "", serde_json::json!([]));
    event["event"]["message"]["message_id"] = serde_json::json!("om_audio1");
    event["event"]["message"]["message_type"] = serde_json::json!("audio");
    event["event"]["message"]["content"] = serde_json::json!(
        serde_json::json!({"file_key": "file_v3_audio", "duration": 1000}).to_string()
    );
    assert_eq!(post_signed(&gateway, &event).await, 200);
    eventually("the reply to the audio", || {
        std::future::ready(!feishu.delivered().is_empty())
    })
    .await;

    assert_eq!(
        last_user_content(&llm.requests()[0].json()),
        Value::String("[voice note, transcribed] see you at noon".to_owned())
    );
    assert_eq!(server.requests()[0].file, wav);
    let downloads = feishu.resource_downloads();
    assert_eq!(downloads.len(), 1);
    assert_eq!(downloads[0].2.as_deref(), Some("type=file"));
    gateway.stop().await;
}

#[tokio::test]
async fn turns_with_every_kind_of_media_keep_the_prompt_prefix_byte_identical() {
    let telegram = FakeTelegram::start().await;
    telegram.add_file("p-photo", &gradient_png(300, 200, true));
    telegram.add_file("p-pdf", &test_pdf(&["Meeting notes"]));
    telegram.add_file("p-voice", &tone_wav(50));
    telegram.add_file("p-text", b"a,b\n1,2\n");
    let server = FakeTranscription::start("next item please").await;
    let llm = FakeLlm::echo().await;
    let gateway = TestApp::spawn_with(&llm, |s| {
        s.telegram = Some(telegram_settings(&telegram));
        s.media.vision_models = vec!["fake-model".to_owned()];
        s.media.max_image_side = 100;
        s.media.transcription = Some(transcription(&server));
    })
    .await;

    telegram.dm_photo(ADA, "p-photo", (300, 200), Some("look"));
    telegram.reply_after(0, ADA.id, "the photo").await;
    telegram.dm_document(ADA, "p-pdf", "notes.pdf", "application/pdf", None);
    telegram.reply_after(1, ADA.id, "the PDF").await;
    telegram.dm_voice(ADA, "p-voice");
    telegram.reply_after(2, ADA.id, "the voice note").await;
    telegram.dm_document(ADA, "p-text", "t.csv", "text/csv", Some("and this"));
    telegram.reply_after(3, ADA.id, "the CSV").await;
    telegram.dm(ADA, "thanks");
    telegram.reply_after(4, ADA.id, "the text").await;

    let requests = llm.requests();
    assert_eq!(requests.len(), 5);
    assert_prefix_holds(&requests);
    // The photo had alpha: a PNG, scaled down.
    let photo = &requests[4].json()["messages"];
    let shown = photo
        .as_array()
        .and_then(|messages| messages.iter().find(|m| m["content"].is_array()))
        .map(|message| message["content"][1]["image_url"]["url"].clone())
        .expect("the photo in the last request");
    assert!(
        shown
            .as_str()
            .is_some_and(|url| url.starts_with("data:image/png;base64,")),
        "{shown}"
    );
    assert_eq!(server.requests().len(), 1, "transcribed once, for its turn");
    gateway.stop().await;
}

/// The environment variable the Discord tests' bot token is read from.
const DISCORD_TOKEN_ENV: &str = "SWITCHBOARD_TEST_DISCORD_TOKEN";

/// The `[discord]` settings that point the adapter at `fake`.
pub(crate) fn discord_settings(
    fake: &switchboard_test_support::discord::FakeDiscord,
) -> DiscordSettings {
    static TOKEN_SET: std::sync::Once = std::sync::Once::new();
    // SAFETY (test): set once per process, before the first adapter reads
    // it; nothing else writes this variable.
    TOKEN_SET.call_once(|| unsafe { std::env::set_var(DISCORD_TOKEN_ENV, "test-token.not-real") });
    DiscordSettings {
        token_env: DISCORD_TOKEN_ENV.to_owned(),
        api_proxy: Some(fake.url()),
        stream_replies: false,
        ..DiscordSettings::default()
    }
}

#[tokio::test]
async fn discord_attachments_reach_the_model_as_an_image_part_and_a_transcript() {
    use switchboard_test_support::discord::FakeDiscord;
    use switchboard_test_support::eventually;

    const DM: u64 = 500_000_000_000_000_321;
    let discord = FakeDiscord::start().await;
    let server = FakeTranscription::start("ship it on friday").await;
    let llm = FakeLlm::echo().await;
    let gateway = TestApp::spawn_with(&llm, |s| {
        s.discord = Some(discord_settings(&discord));
        s.media.vision_models = vec!["fake-model".to_owned()];
        s.media.transcription = Some(transcription(&server));
    })
    .await;
    eventually("the adapter identifies", || async { discord.connected() }).await;

    let png = gradient_png(6, 4, false);
    discord.user_sends_file(DM, "what is this?", "shot.png", "image/png", &png);
    eventually("the reply to the image", || {
        std::future::ready(!discord.created().is_empty())
    })
    .await;
    let data_url = format!("data:image/png;base64,{}", BASE64.encode(&png));
    assert_eq!(
        last_user_content(&llm.requests()[0].json()),
        serde_json::json!([
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": data_url}},
        ])
    );
    let downloads = discord.downloads();
    assert_eq!(downloads.len(), 1, "{downloads:?}");
    assert!(downloads[0].ends_with("/shot.png"), "{downloads:?}");

    // A voice message is an Ogg attachment.
    let wav = tone_wav(60);
    discord.user_sends_file(DM, "", "voice-message.ogg", "audio/ogg", &wav);
    eventually("the reply to the voice message", || {
        std::future::ready(discord.created().len() > 1)
    })
    .await;
    assert_eq!(
        last_user_content(&llm.requests()[1].json()),
        Value::String("[audio: voice-message.ogg, transcribed] ship it on friday".to_owned())
    );
    assert_eq!(server.requests()[0].file, wav);
    gateway.stop().await;
}

#[tokio::test]
async fn a_voice_note_held_across_a_restart_is_transcribed_once_by_the_instance_that_answers() {
    let telegram = FakeTelegram::start().await;
    telegram.add_file("voice-r", &tone_wav(40));
    let server = FakeTranscription::start("are you still there").await;
    let llm = FakeLlm::echo().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = crate::helpers::test_settings(&llm, &dir).await;
    settings.telegram = Some(telegram_settings(&telegram));
    settings.media.transcription = Some(transcription(&server));
    let _database = crate::helpers::hold_database(&settings);
    // The first instance records the voice note but holds it (a long burst
    // window), then stops before answering it.
    let mut holding = settings.clone();
    holding.sessions.burst_window = std::time::Duration::from_millis(600_000);
    let first = TestApp::start(holding, tempfile::tempdir().expect("tempdir")).await;
    telegram.dm_voice(ADA, "voice-r");
    crate::helpers::eventually_recorded(&first).await;
    first.stop().await;
    assert!(llm.requests().is_empty(), "not answered before the restart");

    let second = TestApp::start(settings, tempfile::tempdir().expect("tempdir")).await;
    telegram
        .reply_after(0, ADA.id, "the voice note, after the restart")
        .await;

    assert_eq!(
        last_user_content(&llm.requests()[0].json()),
        Value::String("[voice note, transcribed] are you still there".to_owned())
    );
    assert_eq!(
        server.requests().len(),
        1,
        "transcribed once, when its turn started"
    );
    assert_eq!(telegram.downloads("voice-r"), 1, "not downloaded again");
    second.stop().await;
}

/// Transcription happens when the voice note's turn starts, not while the
/// adapter takes the update: a transcription server that does not answer
/// holds up only that conversation, and another user's message, polled
/// after it, is answered meanwhile.
#[tokio::test]
async fn a_slow_transcription_holds_up_only_its_own_conversation() {
    let telegram = FakeTelegram::start().await;
    telegram.add_file("voice-slow", &tone_wav(60));
    let server = FakeTranscription::start("this one took a while").await;
    server.hold();
    let llm = FakeLlm::echo().await;
    let gateway = TestApp::spawn_with(&llm, |s| {
        s.telegram = Some(telegram_settings(&telegram));
        s.media.transcription = Some(transcription(&server));
    })
    .await;

    telegram.dm_voice(ADA, "voice-slow");
    telegram
        .wait_for("the transcription to be asked for", || {
            !server.requests().is_empty()
        })
        .await;
    telegram.dm(GRACE, "hello from another chat");
    let reply = telegram
        .reply_after(0, GRACE.id, "the other chat's message")
        .await;
    assert!(reply.contains("hello from another chat"), "{reply}");

    server.release();
    let reply = telegram.reply_after(1, ADA.id, "the voice note").await;
    assert!(
        reply.contains("[voice note, transcribed] this one took a while"),
        "{reply}"
    );
    assert_eq!(server.requests().len(), 1);
    gateway.stop().await;
}
