//! Replies shown growing on Telegram while the model writes them, end to
//! end: a group sees one message edited in place that becomes the reply, a
//! private chat sees `sendMessageDraft` previews and then the reply once,
//! `stream_replies = false` sends no drafts, and a process killed in the
//! middle of a streamed turn still leaves exactly one message with the whole
//! reply after another process finishes the turn.

use std::time::Duration;

use serde_json::Value;
use switchboard::store::{Store, StoreOptions};
use switchboard_test_support::telegram::{self, FakeTelegram, TgUser};
use switchboard_test_support::wait::within;
use switchboard_test_support::{eventually, eventually_some};

use crate::helpers::{FakeLlm, Reply, ServeProcess, TestApp, telegram_settings};

const ADA: TgUser = TgUser {
    id: 777,
    first_name: "Ada",
};
const GROUP: i64 = -100_200;

/// The reply the model streams, in three pieces.
const ANSWER: &str = "The first part of a reply, then a middle part, and an end.";

async fn streaming_model() -> FakeLlm {
    FakeLlm::start(|_| Reply::Text(ANSWER.to_owned())).await
}

async fn gateway(llm: &FakeLlm, telegram: &FakeTelegram, stream: bool) -> TestApp {
    TestApp::spawn_with(llm, |settings| {
        let mut tg = telegram_settings(telegram);
        tg.stream_replies = stream;
        tg.draft_interval_ms = 50;
        tg.group_edit_interval_ms = 50;
        settings.telegram = Some(tg);
    })
    .await
}

/// Waits until `done` holds, failing with `what` after ten seconds.
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let reached = within(Duration::from_secs(10), || {
        std::future::ready(done().then_some(()))
    })
    .await;
    assert!(reached.is_some(), "timed out waiting for {what}");
}

/// Waits until the outbox holds one reply, marked sent (the mark is
/// committed after the delivery), and returns the draft it replaced.
async fn sent_reply(app: &TestApp) -> Option<String> {
    eventually_some("the reply marked sent", || async {
        let rows: Vec<(String, Option<String>)> =
            sqlx::query_as("SELECT status, replaces FROM outbox ORDER BY id")
                .fetch_all(&mut *app.gateway.store.conn().await.expect("conn"))
                .await
                .expect("rows");
        match rows.as_slice() {
            [(status, replaces)] if status == "sent" => Some(replaces.clone()),
            _ => None,
        }
    })
    .await
}

#[tokio::test]
async fn a_group_reply_grows_in_one_message_that_becomes_the_reply() {
    let telegram = FakeTelegram::start().await;
    let llm = streaming_model().await;
    let app = gateway(&llm, &telegram, true).await;
    llm.hold_streams();

    telegram.group(GROUP, ADA, "@SwitchboardBot tell me");
    until("the draft message", || telegram.chat_view(GROUP).len() == 1).await;
    let draft = telegram.chat_view(GROUP).remove(0);
    assert!(
        !draft.is_empty() && ANSWER.starts_with(draft.trim_end()) && draft.len() < ANSWER.len(),
        "the draft shows the first words: {draft:?}"
    );
    llm.release_streams();
    until("the reply", || telegram.chat_view(GROUP) == [ANSWER]).await;
    telegram.settled().await;

    assert_eq!(
        telegram.chat_view(GROUP),
        [ANSWER],
        "one message, the whole reply"
    );
    let sent: Vec<Value> = telegram.calls("sendMessage");
    assert_eq!(sent.len(), 1, "the draft's message is the reply: {sent:?}");
    assert_eq!(
        sent[0]["reply_parameters"]["message_id"], 1,
        "the draft answers the asker as the reply would"
    );
    let edits = telegram.calls("editMessageText");
    assert!(!edits.is_empty(), "the reply edited the draft");
    assert!(
        edits.iter().all(|edit| edit["message_id"] == 5000),
        "{edits:?}"
    );
    assert_eq!(edits.last().expect("an edit")["parse_mode"], "HTML");
    assert!(
        telegram.calls("sendMessageDraft").is_empty(),
        "no drafts in groups"
    );
    assert_eq!(sent_reply(&app).await.as_deref(), Some("5000"));
    app.stop().await;
}

#[tokio::test]
async fn a_private_reply_streams_as_drafts_then_arrives_once() {
    let telegram = FakeTelegram::start().await;
    let llm = streaming_model().await;
    let app = gateway(&llm, &telegram, true).await;
    llm.hold_streams();

    telegram.dm(ADA, "tell me");
    until("a draft", || !telegram.calls("sendMessageDraft").is_empty()).await;
    llm.release_streams();
    until("the reply", || !telegram.sent().is_empty()).await;
    telegram.settled().await;

    let drafts = telegram.calls("sendMessageDraft");
    let first = &drafts[0];
    assert_eq!(first["chat_id"], ADA.id);
    assert!(
        first["draft_id"].as_i64().is_some_and(|id| id != 0),
        "{first}"
    );
    let shown = first["text"].as_str().expect("text");
    assert!(ANSWER.starts_with(shown.trim_end()), "{shown:?}");
    assert!(
        drafts
            .iter()
            .all(|draft| draft["draft_id"] == first["draft_id"]),
        "one draft, animated: {drafts:?}"
    );
    let sent = telegram.sent();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].text, ANSWER);
    assert!(telegram.calls("editMessageText").is_empty());
    assert_eq!(
        sent_reply(&app).await,
        None,
        "an ephemeral draft is not replaced"
    );
    app.stop().await;
}

#[tokio::test]
async fn with_streaming_off_a_slow_reply_shows_no_draft() {
    let telegram = FakeTelegram::start().await;
    // Slow enough for several drafts, had they been on.
    let llm = FakeLlm::start_with_delay(
        |_| Reply::Text(ANSWER.to_owned()),
        Duration::from_millis(400),
    )
    .await;
    let app = gateway(&llm, &telegram, false).await;

    telegram.group(GROUP, ADA, "@SwitchboardBot tell me");
    telegram.dm(ADA, "and you");
    until("both replies", || telegram.sent().len() == 2).await;
    telegram.settled().await;

    assert!(telegram.calls("sendMessageDraft").is_empty());
    assert!(telegram.calls("editMessageText").is_empty());
    assert_eq!(telegram.chat_view(GROUP), [ANSWER]);
    assert!(
        llm.requests()
            .iter()
            .all(|request| !request.body.contains("\"stream\":true")),
        "nobody follows the turns, so the model is not asked to stream"
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_in_the_middle_of_a_streamed_reply_leaves_one_message() {
    let telegram = FakeTelegram::start_confirming().await;
    let llm = streaming_model().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let database = crate::helpers::fresh_database(dir.path()).await;
    let database_url = database.to_string();
    let api_url = telegram.url().to_string();
    let base_url = llm.openai_base();
    let env = [
        ("SWITCHBOARD__DATABASE__URL", database_url.as_str()),
        ("SWITCHBOARD__LLM__BASE_URL", base_url.as_str()),
        ("SWITCHBOARD__RUNNER__LEASE_TTL_SECS", "1"),
        ("SWITCHBOARD__TELEGRAM__TOKEN_ENV", "SB_DRAFTS_TG_TOKEN"),
        ("SB_DRAFTS_TG_TOKEN", telegram::TOKEN),
        ("SWITCHBOARD__TELEGRAM__API_URL", api_url.as_str()),
        ("SWITCHBOARD__TELEGRAM__POLL_TIMEOUT_SECS", "1"),
        ("SWITCHBOARD__TELEGRAM__GROUP_EDIT_INTERVAL_MS", "50"),
        ("RUST_LOG", "warn"),
    ];
    let first = ServeProcess::start(dir.path(), &env, false).await;
    llm.hold_streams();
    telegram.group(GROUP, ADA, "@SwitchboardBot tell me");
    until("the draft message", || telegram.chat_view(GROUP).len() == 1).await;
    // Killed once the draft's message is recorded with the turn (a crash
    // between Telegram creating it and that write is the one window left,
    // see src/session/drafts.rs).
    let store = Store::connect_without_migrating(&StoreOptions::new(&database_url))
        .await
        .expect("store");
    eventually("the draft's message recorded", || async {
        let recorded: Option<String> =
            sqlx::query_scalar("SELECT draft_message_id FROM inbound WHERE text LIKE '%tell me%'")
                .fetch_one(&mut *store.conn().await.expect("conn"))
                .await
                .expect("the message");
        recorded.as_deref() == Some("5000")
    })
    .await;
    first.kill().await;

    llm.release_streams();
    let second = ServeProcess::start(dir.path(), &env, true).await;
    let recovered = within(Duration::from_secs(30), || {
        std::future::ready((telegram.chat_view(GROUP) == [ANSWER]).then_some(()))
    })
    .await;
    if recovered.is_none() {
        let view = telegram.chat_view(GROUP);
        let calls = telegram.calls("editMessageText");
        panic!(
            "no reply after recovery: {view:?} {calls:?}\n{}",
            second.stop().await
        );
    }
    telegram.settled().await;
    // Anything still to come would come now.
    tokio::time::sleep(Duration::from_millis(300)).await;

    assert_eq!(
        telegram.chat_view(GROUP),
        [ANSWER],
        "one message with the whole reply: {:?}",
        telegram.calls("sendMessage")
    );
    assert_eq!(telegram.calls("sendMessage").len(), 1, "no second message");
    assert_eq!(
        llm.requests().len(),
        2,
        "the model call ran again after the crash"
    );
    second.stop().await;
}
