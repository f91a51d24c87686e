//! Feishu through the whole gateway, where the database matters: an event
//! arriving while the database is write-locked is refused with 503 (never
//! acknowledged unrecorded) and answered once after Feishu redelivers it;
//! and a recreated database's replies are not swallowed by Feishu's `uuid`
//! dedup as repeats of the old database's replies.

use std::time::{SystemTime, UNIX_EPOCH};

use secrecy::SecretString;
use serde_json::{Value, json};
use sqlx::{Connection, Executor};
use switchboard_feishu::{Domain, FeishuSettings, crypto};
use switchboard_test_support::eventually;
use switchboard_test_support::feishu::{
    APP_ID, APP_SECRET, FakeFeishu, VERIFICATION_TOKEN, message_event,
};

use crate::helpers::{FakeLlm, TestApp};

const ENCRYPT_KEY: &str = "gateway-test-encrypt-key";

/// Feishu settings pointing at `fake`, with an Encrypt Key (signed events).
pub(crate) fn feishu_settings(fake: &FakeFeishu) -> FeishuSettings {
    // SAFETY (test): variable names unique to this module, always set to
    // the same values.
    unsafe {
        std::env::set_var("SB_TEST_FSDB_SECRET", APP_SECRET);
        std::env::set_var("SB_TEST_FSDB_TOKEN", VERIFICATION_TOKEN);
        std::env::set_var("SB_TEST_FSDB_ENCRYPT_KEY", ENCRYPT_KEY);
    }
    let mut settings = FeishuSettings::new(APP_ID);
    settings.app_secret_env = "SB_TEST_FSDB_SECRET".to_owned();
    settings.verification_token_env = "SB_TEST_FSDB_TOKEN".to_owned();
    settings.encrypt_key_env = Some("SB_TEST_FSDB_ENCRYPT_KEY".to_owned());
    settings.domain = Domain::Custom(fake.url());
    settings
}

/// A direct message `text` with its own event and message ids.
fn direct_message(event_id: &str, message_id: &str, text: &str) -> Value {
    let mut event = message_event(event_id, "p2p", text, json!([]));
    event["event"]["message"]["message_id"] = json!(message_id);
    event
}

/// Posts `event` encrypted and signed now, as Feishu does; the status.
pub(crate) async fn post_signed(app: &TestApp, event: &Value) -> u16 {
    let key = SecretString::from(ENCRYPT_KEY.to_owned());
    let iv: [u8; 16] = std::array::from_fn(|i| u8::try_from(i * 5).expect("small"));
    let encrypt = crypto::encrypt(&key, iv, event.to_string().as_bytes());
    let raw = json!({ "encrypt": encrypt }).to_string();
    let timestamp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs()
        .to_string();
    let signature = crypto::signature(&timestamp, "n0nce", &key, raw.as_bytes());
    app.http
        .post(app.url("/feishu/events"))
        .header("content-type", "application/json")
        .header("x-lark-request-timestamp", timestamp)
        .header("x-lark-request-nonce", "n0nce")
        .header("x-lark-signature", signature)
        .body(raw)
        .send()
        .await
        .expect("sent")
        .status()
        .as_u16()
}

/// Another process's write lock on the database at `url`, held until
/// dropped or released: `BEGIN IMMEDIATE` on SQLite, an `EXCLUSIVE` table
/// lock on `inbound` on PostgreSQL (reads go on, writes wait).
struct WriteLock {
    conn: sqlx::AnyConnection,
}

impl WriteLock {
    async fn take(url: &str) -> Self {
        sqlx::any::install_default_drivers();
        let mut conn = sqlx::AnyConnection::connect(url)
            .await
            .expect("a second connection");
        if url.starts_with("postgres") {
            conn.execute("BEGIN").await.expect("begin");
            conn.execute("LOCK TABLE inbound IN EXCLUSIVE MODE")
                .await
                .expect("lock");
        } else {
            conn.execute("BEGIN IMMEDIATE").await.expect("write lock");
        }
        Self { conn }
    }

    async fn release(mut self) {
        self.conn.execute("ROLLBACK").await.expect("released");
        self.conn.close().await.expect("closed");
    }
}

#[tokio::test]
async fn an_event_arriving_while_the_database_is_write_locked_is_refused_then_answered_once() {
    let feishu = FakeFeishu::start().await;
    let llm = FakeLlm::echo().await;
    let mut database = String::new();
    let app = TestApp::spawn_with(&llm, |s| {
        let mut settings = feishu_settings(&feishu);
        settings.ack_timeout_ms = 300;
        s.feishu = Some(settings);
        database.clone_from(&s.database.url);
    })
    .await;
    let event = direct_message("ev-locked", "om_locked", "hello while locked");

    let lock = WriteLock::take(&database).await;
    let while_locked = post_signed(&app, &event).await;
    lock.release().await;

    assert_eq!(
        while_locked, 503,
        "not recorded, so not acknowledged: Feishu must redeliver"
    );
    // Feishu redelivers until it gets a 200; the first recording may have
    // finished in the background meanwhile (then this is a duplicate).
    let mut redelivered = post_signed(&app, &event).await;
    for _ in 0..50 {
        if redelivered == 200 {
            break;
        }
        assert_eq!(redelivered, 503);
        redelivered = post_signed(&app, &event).await;
    }
    assert_eq!(redelivered, 200, "recorded once the lock is gone");
    assert_eq!(app.count("inbound").await, 1, "acknowledged means recorded");
    eventually("the reply to the redelivered event", || {
        std::future::ready(!feishu.delivered().is_empty())
    })
    .await;
    assert_eq!(post_signed(&app, &event).await, 200, "a later repeat");

    let delivered = feishu.delivered();
    assert_eq!(delivered.len(), 1, "answered once: {delivered:?}");
    assert_eq!(delivered[0].reply_target(), Some("om_locked"));
    assert!(
        delivered[0]
            .body
            .to_string()
            .contains("echo: hello while locked"),
        "{delivered:?}"
    );
    assert_eq!(llm.requests().len(), 1);
    assert_eq!(app.count("inbound").await, 1);
    app.stop().await;
}

#[tokio::test]
async fn a_recreated_database_delivers_its_replies_past_the_platforms_uuid_dedup() {
    let feishu = FakeFeishu::start().await;
    let llm = FakeLlm::echo().await;

    let mut uuids = Vec::new();
    for (round, text) in ["from the first database", "from the recreated one"]
        .into_iter()
        .enumerate()
    {
        let app = TestApp::spawn_with(&llm, |s| s.feishu = Some(feishu_settings(&feishu))).await;
        let event = direct_message(&format!("ev-{round}"), &format!("om_{round}"), text);
        assert_eq!(post_signed(&app, &event).await, 200);
        eventually("the reply", || {
            std::future::ready(feishu.messages().len() > round)
        })
        .await;
        let sent = feishu.messages().pop().expect("a message request");
        uuids.push(sent.body["uuid"].as_str().expect("a uuid").to_owned());
        app.stop().await;
    }

    let delivered = feishu.delivered();
    assert_eq!(feishu.deduplicated(), 0, "uuids: {uuids:?}");
    assert_eq!(delivered.len(), 2, "uuids: {uuids:?}");
    assert!(
        delivered[1]
            .body
            .to_string()
            .contains("echo: from the recreated one")
    );
    assert_ne!(uuids[0], uuids[1]);
    for uuid in &uuids {
        // sb-<database id>-<outbox id 1>-<chunk 0>: both databases' first reply.
        assert!(uuid.starts_with("sb-") && uuid.ends_with("-1-0"), "{uuid}");
        assert!(uuid.len() <= 50, "{uuid}");
    }
}
