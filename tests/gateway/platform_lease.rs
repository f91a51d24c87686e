//! Platform connections have one holder: two real `switchboard serve`
//! processes on one PostgreSQL database, both configured to long-poll one
//! (fake) Telegram bot. Only the holder of the bot's platform lease polls
//! (the fake answers overlapping polls with 409 Conflict, as Telegram does,
//! and counts them); every message is answered once; when the holder is
//! killed with SIGKILL the other instance takes the lease over and answers
//! what comes next. Needs `TEST_DATABASE_URL`: on SQLite there is one
//! instance per database and no lease.

use std::time::Instant;

use switchboard::store::{Store, StoreOptions};
use switchboard_test_support::telegram::{BOT_ID, FakeTelegram, TgUser};
use switchboard_test_support::{eventually, eventually_some};

use crate::helpers::{FakeLlm, ServeProcess, fresh_database};

/// The lease TTL given to both instances.
const LEASE_TTL_SECS: &str = "2";

const ADA: TgUser = TgUser {
    id: 4242,
    first_name: "Ada",
};

/// One instance on `database`, polling `telegram` under the lease.
async fn start(
    dir: &std::path::Path,
    database: &str,
    llm: &FakeLlm,
    telegram: &FakeTelegram,
    capture_logs: bool,
) -> ServeProcess {
    let base_url = llm.openai_base();
    let api_url = telegram.url().to_string();
    ServeProcess::start(
        dir,
        &[
            ("SWITCHBOARD__DATABASE__URL", database),
            ("SWITCHBOARD__LLM__BASE_URL", base_url.as_str()),
            ("SWITCHBOARD__RUNNER__LEASE_TTL_SECS", LEASE_TTL_SECS),
            ("SWITCHBOARD__TELEGRAM__TOKEN_ENV", "SB_TEST_LEASE_TG_TOKEN"),
            ("SWITCHBOARD__TELEGRAM__API_URL", api_url.as_str()),
            ("SWITCHBOARD__TELEGRAM__POLL_TIMEOUT_SECS", "1"),
            (
                "SB_TEST_LEASE_TG_TOKEN",
                switchboard_test_support::telegram::TOKEN,
            ),
            // Little enough output that the captured pipe never fills.
            ("RUST_LOG", "warn,switchboard::platform_lease=info"),
        ],
        capture_logs,
    )
    .await
}

/// The instance holding the Telegram bot's lease, if any holds it now.
async fn holder(store: &Store) -> Option<String> {
    sqlx::query_scalar::<_, String>(&format!(
        "SELECT owner FROM platform_leases WHERE name = $1 AND expires_at >= {}",
        store.clock_sql()
    ))
    .bind(format!("telegram:{BOT_ID}"))
    .fetch_optional(&mut *store.conn().await.expect("conn"))
    .await
    .expect("lease row")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_instance_polls_telegram_and_another_takes_over_when_it_is_killed() {
    if std::env::var("TEST_DATABASE_URL").is_ok_and(|url| !url.is_empty()) {
        run().await;
    } else {
        eprintln!(
            "skipped: two instances sharing the Telegram long poll need PostgreSQL \
             (set TEST_DATABASE_URL)"
        );
    }
}

async fn run() {
    let telegram = FakeTelegram::start().await;
    let llm = FakeLlm::echo().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let database = fresh_database(dir.path()).await;

    // The first instance takes the lease and polls.
    let first = start(dir.path(), &database, &llm, &telegram, false).await;
    let store = Store::connect_without_migrating(&StoreOptions::new(&database))
        .await
        .expect("store");
    let first_id = eventually_some("the first instance to take the lease", || async {
        holder(&store).await
    })
    .await;
    telegram
        .wait_for("the first instance to poll", || telegram.polls() > 0)
        .await;

    // The second stands by while the first renews its lease: every message
    // is taken by one poller and answered once.
    let second = start(dir.path(), &database, &llm, &telegram, true).await;
    let mut asked = Vec::new();
    for i in 0..4 {
        let text = format!("while both run {i}");
        let reply = telegram.ask(ADA, &text).await;
        assert_eq!(reply, format!("echo: {text}"));
        asked.push(text);
    }
    telegram.settled().await;
    // Delivered and recorded as such, so no instance delivers them again.
    eventually("every reply to be marked sent", || async {
        let unsent: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM outbox WHERE status <> 'sent'")
            .fetch_one(&mut *store.conn().await.expect("conn"))
            .await
            .expect("count");
        unsent == 0
    })
    .await;
    assert_eq!(holder(&store).await.as_deref(), Some(first_id.as_str()));
    assert_eq!(telegram.conflicts(), 0, "only one instance polls at a time");

    // SIGKILL the holder: its lease expires on the database's clock and the
    // second instance takes over within about the TTL.
    let killed = Instant::now();
    first.kill().await;
    let text = "after the kill".to_owned();
    let reply = telegram.ask(ADA, &text).await;
    assert_eq!(reply, format!("echo: {text}"));
    asked.push(text);
    eprintln!(
        "the second instance answered {:.1?} after the holder was killed (lease TTL {LEASE_TTL_SECS} s)",
        killed.elapsed()
    );
    let second_id = eventually_some("the second instance to hold the lease", || async {
        holder(&store).await.filter(|owner| *owner != first_id)
    })
    .await;
    assert_ne!(second_id, first_id);
    telegram.settled().await;

    // Every message answered exactly once, and never two pollers at once.
    let sent = telegram.sent();
    assert_eq!(sent.len(), asked.len(), "one reply per message: {sent:?}");
    for text in &asked {
        let echo = format!("echo: {text}");
        let replies = sent.iter().filter(|reply| reply.text == echo).count();
        assert_eq!(replies, 1, "{text:?} answered once: {sent:?}");
    }
    assert_eq!(telegram.conflicts(), 0, "only one instance polls at a time");

    // The second instance stood by, took over, and released the lease when
    // it stopped.
    let logs = second.stop().await;
    assert!(logs.contains("standing by"), "{logs}");
    assert!(logs.contains("platform lease taken"), "{logs}");
    assert!(logs.contains("platform lease released"), "{logs}");
    assert!(
        !logs.contains("another process is polling this bot"),
        "{logs}"
    );
    eventually("the lease to be free after a clean stop", || async {
        holder(&store).await.is_none()
    })
    .await;
    store.close().await;
}

/// What the test above relies on: the fake, like Telegram, ends a held
/// `getUpdates` with 409 Conflict when a second one arrives, and counts it.
#[tokio::test]
async fn the_fake_telegram_answers_overlapping_polls_with_a_conflict() {
    let telegram = FakeTelegram::start().await;
    let url = format!(
        "{}bot{}/getUpdates",
        telegram.url(),
        switchboard_test_support::telegram::TOKEN
    );
    let poll = || {
        let request = reqwest::Client::new()
            .post(&url)
            .json(&serde_json::json!({"timeout": 1}));
        async move {
            let response = request.send().await.expect("sent");
            let status = response.status().as_u16();
            let body: serde_json::Value = response.json().await.expect("json");
            (status, body)
        }
    };
    let held = tokio::spawn(poll());
    telegram
        .wait_for("the first poll to be held", || telegram.polls() == 1)
        .await;
    let (second, _) = poll().await;
    let (first, body) = held.await.expect("joined");
    assert_eq!(first, 409, "{body}");
    assert_eq!(body["error_code"], 409);
    assert_eq!(second, 200);
    assert_eq!(telegram.conflicts(), 1);
}
