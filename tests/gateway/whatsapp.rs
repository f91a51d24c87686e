//! WhatsApp through the whole gateway, against the fake Cloud API: a round
//! trip whose delivery statuses are kept against the outbox, a redelivered
//! webhook answered once, a long Markdown answer split and formatted, a
//! voice note transcribed, an image reaching a vision model, a reply
//! outside the 24-hour window sent as the template, a restart between
//! receiving and answering delivering once, bad requests refused with
//! nothing stored, and `/readyz` naming the adapter. The adapter's own
//! parsing, signing and sending details are proven in
//! `adapters/whatsapp/tests`.

use std::future::ready;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Value, json};
use switchboard::media::voice::TranscriptionSettings;
use switchboard_test_support::eventually;
use switchboard_test_support::media::tone_wav;
use switchboard_test_support::transcription::FakeTranscription;
use switchboard_test_support::whatsapp::{
    ACCESS_TOKEN, APP_SECRET, CUSTOMER, FakeWhatsApp, PHONE_NUMBER_ID, VERIFY_TOKEN, Webhook,
    failed_status, image, messages, status, statuses, text, voice_note,
};
use switchboard_whatsapp::{TemplateSettings, WhatsAppSettings};

use crate::helpers::{FakeLlm, Reply, TINY_PNG, TestApp, last_user_content};

const ACCESS_TOKEN_ENV: &str = "SB_TEST_GW_WA_ACCESS_TOKEN";
const APP_SECRET_ENV: &str = "SB_TEST_GW_WA_APP_SECRET";
const VERIFY_TOKEN_ENV: &str = "SB_TEST_GW_WA_VERIFY_TOKEN";

/// `[whatsapp]` pointing at `fake`, the fake's secrets in this module's
/// variables.
pub(crate) fn whatsapp_settings(fake: &FakeWhatsApp) -> WhatsAppSettings {
    // SAFETY (test): variable names unique to this module, always set to
    // the same values.
    unsafe {
        std::env::set_var(ACCESS_TOKEN_ENV, ACCESS_TOKEN);
        std::env::set_var(APP_SECRET_ENV, APP_SECRET);
        std::env::set_var(VERIFY_TOKEN_ENV, VERIFY_TOKEN);
    }
    let mut settings = WhatsAppSettings::new(PHONE_NUMBER_ID);
    settings.access_token_env = ACCESS_TOKEN_ENV.to_owned();
    settings.app_secret_env = APP_SECRET_ENV.to_owned();
    settings.verify_token_env = VERIFY_TOKEN_ENV.to_owned();
    settings.api_url = fake.url();
    settings
}

fn webhook(app: &TestApp) -> Webhook {
    Webhook::new(app.url("/whatsapp/webhook"))
}

/// A text message `id` from the fake's customer.
fn says(id: &str, body: &str) -> Value {
    messages(PHONE_NUMBER_ID, vec![text(id, body)])
}

/// Waits until `count` messages were sent (read receipts aside).
async fn sent(fake: &FakeWhatsApp, count: usize) {
    eventually("the sent messages", || ready(fake.sent().len() >= count)).await;
}

/// Whether one outbox row is marked sent.
async fn outbox_sent(app: &TestApp) -> bool {
    let sent: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM outbox WHERE status = 'sent'")
        .fetch_one(&mut *app.gateway.store.conn().await.expect("conn"))
        .await
        .expect("count");
    sent == 1
}

#[tokio::test]
async fn a_round_trip_keeps_its_delivery_statuses_against_the_outbox() {
    let fake = FakeWhatsApp::start().await;
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn_with(&llm, |s| s.whatsapp = Some(whatsapp_settings(&fake))).await;

    assert_eq!(
        webhook(&app)
            .deliver(&says("wamid.IN1", "what is new?"))
            .await,
        200
    );
    sent(&fake, 1).await;
    let reply = fake.sent().remove(0);
    assert_eq!(reply.text(), Some("echo: what is new?"));
    assert_eq!(reply.reply_to(), Some("wamid.IN1"));
    assert_eq!(reply.body["to"], CUSTOMER);
    let wamid = reply.message_id.clone().expect("a wamid");
    eventually("the reply marked sent", || async {
        let sent: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM outbox WHERE status = 'sent' AND platform_message_id IS NOT NULL",
        )
        .fetch_one(&mut *app.gateway.store.conn().await.expect("conn"))
        .await
        .expect("count");
        sent == 1
    })
    .await;
    // Meta reports what became of it, out of order and repeated.
    let reports = statuses(
        PHONE_NUMBER_ID,
        vec![
            status(&wamid, "sent"),
            status(&wamid, "read"),
            status(&wamid, "delivered"),
            status(&wamid, "read"),
            failed_status("wamid.ELSEWHERE", 131_026, "Message undeliverable"),
        ],
    );
    assert_eq!(webhook(&app).deliver(&reports).await, 200);

    let outbox_id: i64 = sqlx::query_scalar("SELECT id FROM outbox")
        .fetch_one(&mut *app.gateway.store.conn().await.expect("conn"))
        .await
        .expect("row");
    let kept = app
        .gateway
        .store
        .deliveries()
        .of_outbox(outbox_id)
        .await
        .expect("db");
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(kept[0].message_id, wamid);
    assert_eq!(kept[0].state, "read", "a late `delivered` changes nothing");
    assert_eq!(app.count("delivery_statuses").await, 2);
    let reasons: Vec<Option<String>> =
        sqlx::query_scalar("SELECT reason FROM delivery_statuses WHERE state = 'failed'")
            .fetch_all(&mut *app.gateway.store.conn().await.expect("conn"))
            .await
            .expect("rows");
    assert_eq!(reasons, [Some("Message undeliverable".to_owned())]);
    assert!(
        !format!("{reasons:?}").contains(CUSTOMER),
        "no phone number"
    );
    app.stop().await;
}

#[tokio::test]
async fn a_redelivered_webhook_is_answered_once() {
    let fake = FakeWhatsApp::start().await;
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn_with(&llm, |s| s.whatsapp = Some(whatsapp_settings(&fake))).await;
    let payload = says("wamid.IN2", "only once please");

    assert_eq!(webhook(&app).deliver(&payload).await, 200);
    sent(&fake, 1).await;
    assert_eq!(
        webhook(&app).deliver(&payload).await,
        200,
        "a repeat is acknowledged"
    );
    // A later message is a sync point: the repeat was handled before it.
    assert_eq!(webhook(&app).deliver(&says("wamid.IN3", "sync")).await, 200);
    sent(&fake, 2).await;

    let texts: Vec<String> = fake
        .sent()
        .iter()
        .filter_map(|r| r.text().map(str::to_owned))
        .collect();
    assert_eq!(texts, ["echo: only once please", "echo: sync"]);
    assert_eq!(llm.requests().len(), 2);
    assert_eq!(app.count("inbound").await, 2);
    app.stop().await;
}

#[tokio::test]
async fn a_long_markdown_answer_is_split_under_the_limit_and_formatted() {
    let fake = FakeWhatsApp::start().await;
    let prose = "The **quick** brown fox ~~ran~~ past _me_. ".repeat(120);
    let code = format!("```\n{}```", "let x = y;\n".repeat(300));
    let answer = format!("# Title\n\n{prose}\n\n{code}\n\n{prose}");
    assert!(answer.chars().count() > 10_000);
    let llm = FakeLlm::start(move |_| Reply::Text(answer.clone())).await;
    let app = TestApp::spawn_with(&llm, |s| s.whatsapp = Some(whatsapp_settings(&fake))).await;

    assert_eq!(
        webhook(&app).deliver(&says("wamid.IN4", "tell me")).await,
        200
    );
    eventually("the reply marked sent", || outbox_sent(&app)).await;

    let parts: Vec<String> = fake
        .sent()
        .iter()
        .filter_map(|r| r.text().map(str::to_owned))
        .collect();
    assert!(parts.len() >= 3, "{} parts", parts.len());
    for (index, part) in parts.iter().enumerate() {
        assert!(part.chars().count() <= 4096, "part {index}");
        assert_eq!(part.matches("```").count() % 2, 0, "part {index}");
        assert!(!part.contains("**") && !part.contains("~~"), "part {index}");
    }
    assert!(parts[0].starts_with("*Title*"), "{}", &parts[0][..40]);
    assert!(parts[0].contains("The *quick* brown fox ~ran~ past _me_."));
    assert_eq!(llm.requests().len(), 1);
    app.stop().await;
}

#[tokio::test]
async fn a_voice_note_reaches_the_model_as_its_transcript() {
    let fake = FakeWhatsApp::start().await;
    let wav = tone_wav(200);
    fake.add_media("media-voice-1", "audio/ogg", &wav);
    let server = FakeTranscription::start("remind me to call mum").await;
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn_with(&llm, |s| {
        s.whatsapp = Some(whatsapp_settings(&fake));
        s.media.transcription = Some(TranscriptionSettings {
            base_url: switchboard::domain::BaseUrl::parse(&server.base_url()).expect("URL"),
            model: "whisper-test".to_owned(),
            api_key_env: "SWITCHBOARD_TEST_NO_SUCH_KEY".to_owned(),
            ..TranscriptionSettings::default()
        });
    })
    .await;
    let payload = messages(
        PHONE_NUMBER_ID,
        vec![voice_note("wamid.V1", "media-voice-1")],
    );

    assert_eq!(webhook(&app).deliver(&payload).await, 200);
    sent(&fake, 1).await;

    let transcribed = "[voice note, transcribed] remind me to call mum";
    assert_eq!(
        last_user_content(&llm.requests()[0].json()),
        Value::String(transcribed.to_owned())
    );
    assert_eq!(server.requests().len(), 1);
    assert_eq!(server.requests()[0].file, wav, "the audio as downloaded");
    assert_eq!(fake.media_downloads(), 1);
    app.stop().await;
}

#[tokio::test]
async fn an_image_reaches_a_vision_model_with_its_caption() {
    let fake = FakeWhatsApp::start().await;
    fake.add_media("media-img-1", "image/png", TINY_PNG);
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn_with(&llm, |s| {
        s.whatsapp = Some(whatsapp_settings(&fake));
        s.media.vision_models = vec!["fake-model".to_owned()];
    })
    .await;
    let payload = messages(
        PHONE_NUMBER_ID,
        vec![image("wamid.P1", "media-img-1", "what is this?")],
    );

    assert_eq!(webhook(&app).deliver(&payload).await, 200);
    sent(&fake, 1).await;

    let data_url = format!("data:image/png;base64,{}", BASE64.encode(TINY_PNG));
    assert_eq!(
        last_user_content(&llm.requests()[0].json()),
        json!([
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": data_url}},
        ])
    );
    app.stop().await;
}

#[tokio::test]
async fn a_reply_outside_the_24_hour_window_goes_as_the_template() {
    let fake = FakeWhatsApp::start().await;
    // The Cloud API refuses free-form messages to this person (131047).
    fake.close_window(CUSTOMER);
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn_with(&llm, |s| {
        let mut settings = whatsapp_settings(&fake);
        settings.template = Some(TemplateSettings::new("reply_ready", "en_US"));
        s.whatsapp = Some(settings);
    })
    .await;

    assert_eq!(
        webhook(&app).deliver(&says("wamid.IN5", "later")).await,
        200
    );
    sent(&fake, 1).await;

    let sent = fake.sent();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].kind(), "template");
    assert_eq!(sent[0].body["template"]["name"], "reply_ready");
    assert!(
        sent[0].body.to_string().contains("echo: later"),
        "the reply fills it"
    );
    eventually("the reply marked sent", || outbox_sent(&app)).await;
    app.stop().await;
}

#[tokio::test]
async fn a_restart_between_receiving_and_answering_delivers_once() {
    let fake = FakeWhatsApp::start().await;
    let llm = FakeLlm::echo().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = crate::helpers::test_settings(&llm, &dir).await;
    settings.whatsapp = Some(whatsapp_settings(&fake));
    let _database = crate::helpers::hold_database(&settings);
    let mut holding = settings.clone();
    holding.sessions.burst_window = std::time::Duration::from_secs(600);
    let first = TestApp::start(holding, tempfile::tempdir().expect("tempdir")).await;
    let payload = says("wamid.IN6", "still there?");
    assert_eq!(webhook(&first).deliver(&payload).await, 200);
    first.stop().await;
    assert!(fake.sent().is_empty(), "not answered before the restart");

    let second = TestApp::start(settings, tempfile::tempdir().expect("tempdir")).await;
    sent(&fake, 1).await;
    assert_eq!(
        webhook(&second).deliver(&payload).await,
        200,
        "Meta redelivers"
    );
    assert_eq!(
        webhook(&second).deliver(&says("wamid.IN7", "sync")).await,
        200
    );
    sent(&fake, 2).await;

    let texts: Vec<String> = fake
        .sent()
        .iter()
        .filter_map(|r| r.text().map(str::to_owned))
        .collect();
    assert_eq!(texts, ["echo: still there?", "echo: sync"]);
    second.stop().await;
}

#[tokio::test]
async fn bad_requests_are_refused_and_nothing_is_stored() {
    let fake = FakeWhatsApp::start().await;
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn_with(&llm, |s| s.whatsapp = Some(whatsapp_settings(&fake))).await;
    let hook = webhook(&app);
    let body = says("wamid.BAD", "forged").to_string().into_bytes();

    let (verified, challenge) = hook.handshake(VERIFY_TOKEN, "chal-123").await;
    let (wrong_token, answer) = hook.handshake("not-the-verify-token", "chal-456").await;
    let unsigned = hook.post(body.clone(), None).await;
    let forged = hook
        .post(
            body.clone(),
            Some(switchboard_test_support::whatsapp::sign(
                "other-secret",
                &body,
            )),
        )
        .await;
    let malformed_body = b"{\"object\": ".to_vec();
    let signature = switchboard_test_support::whatsapp::sign(APP_SECRET, &malformed_body);
    let malformed = hook.post(malformed_body, Some(signature)).await;
    let oversized_body = vec![b' '; 1024 * 1024 + 1];
    let signature = switchboard_test_support::whatsapp::sign(APP_SECRET, &oversized_body);
    let oversized = hook.post(oversized_body, Some(signature)).await;

    assert_eq!((verified, challenge.as_str()), (200, "chal-123"));
    assert_eq!(wrong_token, 403);
    assert!(!answer.contains("chal-456") && !answer.contains(VERIFY_TOKEN));
    assert_eq!(unsigned, 401);
    assert_eq!(forged, 401);
    assert_eq!(malformed, 400);
    assert_eq!(oversized, 413);
    assert_eq!(app.count("inbound").await, 0);
    assert_eq!(app.count("sessions").await, 0);
    assert!(llm.requests().is_empty());
    assert!(fake.sent().is_empty());
    app.stop().await;
}

#[tokio::test]
async fn readiness_names_the_whatsapp_adapter_without_a_secret() {
    let fake = FakeWhatsApp::start().await;
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn_with(&llm, |s| s.whatsapp = Some(whatsapp_settings(&fake))).await;

    let ready = app.http.get(app.url("/readyz")).send().await.expect("sent");
    assert_eq!(ready.status(), 200);
    let body: Value = ready.json().await.expect("JSON");
    assert_eq!(body["adapters"]["whatsapp"]["state"], "up", "{body}");
    let metrics = app
        .http
        .get(app.url("/metrics"))
        .send()
        .await
        .expect("sent");
    let metrics = metrics.text().await.expect("text");
    assert!(metrics.contains("adapter=\"whatsapp\""));
    for shown in [body.to_string(), metrics] {
        assert!(!shown.contains(ACCESS_TOKEN) && !shown.contains(APP_SECRET));
    }
    app.stop().await;
}

#[tokio::test]
async fn an_unknown_number_gets_a_pairing_code_and_no_turn() {
    let fake = FakeWhatsApp::start().await;
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn_with(&llm, |s| {
        s.whatsapp = Some(whatsapp_settings(&fake));
        s.access
            .platforms
            .insert("whatsapp".to_owned(), vec!["15550000000".to_owned()]);
    })
    .await;

    assert_eq!(
        webhook(&app).deliver(&says("wamid.IN8", "let me in")).await,
        200
    );
    sent(&fake, 1).await;

    assert!(llm.requests().is_empty(), "no turn before pairing");
    assert_eq!(app.count("pairing_requests").await, 1);
    let greeting = fake.sent()[0].text().unwrap_or_default().to_owned();
    assert!(!greeting.starts_with("echo:"), "{greeting}");
    app.stop().await;
}

#[tokio::test]
async fn no_token_nor_full_phone_number_reaches_the_logs_even_at_debug() {
    let fake = FakeWhatsApp::start().await;
    let llm = FakeLlm::echo().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let (base_url, api_url) = (llm.openai_base(), fake.url());
    let process = crate::helpers::ServeProcess::start(
        dir.path(),
        &[
            ("SWITCHBOARD__LLM__BASE_URL", base_url.as_str()),
            ("SWITCHBOARD__WHATSAPP__PHONE_NUMBER_ID", PHONE_NUMBER_ID),
            ("SWITCHBOARD__WHATSAPP__API_URL", api_url.as_str()),
            ("SWITCHBOARD__WHATSAPP__ACCESS_TOKEN_ENV", ACCESS_TOKEN_ENV),
            ("SWITCHBOARD__WHATSAPP__APP_SECRET_ENV", APP_SECRET_ENV),
            ("SWITCHBOARD__WHATSAPP__VERIFY_TOKEN_ENV", VERIFY_TOKEN_ENV),
            (ACCESS_TOKEN_ENV, ACCESS_TOKEN),
            (APP_SECRET_ENV, APP_SECRET),
            (VERIFY_TOKEN_ENV, VERIFY_TOKEN),
            (
                "RUST_LOG",
                "debug,sqlx=warn,hyper=info,reqwest=info,h2=info",
            ),
        ],
        true,
    )
    .await;
    let hook = Webhook::new(format!("{}/whatsapp/webhook", process.base_url()));
    eventually("the webhook up", || async {
        hook.deliver(&says("wamid.LOG1", "hello, logs")).await == 200
    })
    .await;
    sent(&fake, 1).await;
    let reply = fake.sent().remove(0);
    let wamid = reply.message_id.clone().expect("a wamid");
    let reports = statuses(
        PHONE_NUMBER_ID,
        vec![
            status(&wamid, "delivered"),
            failed_status(&wamid, 131_026, "Undeliverable"),
        ],
    );
    assert_eq!(hook.deliver(&reports).await, 200);

    let logs = process.stop().await;
    assert!(logs.contains("DEBUG"), "debug logs were captured");
    for secret in [CUSTOMER, ACCESS_TOKEN, APP_SECRET, VERIFY_TOKEN] {
        let lines: Vec<&str> = logs.lines().filter(|line| line.contains(secret)).collect();
        assert!(lines.is_empty(), "{secret} in the logs: {lines:#?}");
    }
}
