//! Platform connections have one holder: two real `switchboard serve`
//! processes on one PostgreSQL database, both configured to long-poll one
//! (fake) Telegram bot. Only the holder of the bot's platform lease polls
//! (the fake answers overlapping polls with 409 Conflict, as Telegram does,
//! and counts them); every message is answered once; when the holder is
//! killed with SIGKILL, or stalls under SIGSTOP, the other instance takes
//! the lease over and answers what comes next. Needs `TEST_DATABASE_URL`:
//! on SQLite there is one instance per database and no lease.

use std::time::Instant;

use switchboard::store::{Store, StoreOptions};
use switchboard_test_support::telegram::{BOT_ID, FakeTelegram, TgUser};
use switchboard_test_support::{eventually, eventually_some};

use crate::helpers::{FakeLlm, FreshDatabase, ServeProcess, fresh_database};

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
            ("RUST_LOG", "warn,switchboard::platforms::lease=info"),
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

/// Whether PostgreSQL is there to share; prints why the test is skipped
/// when it is not.
fn postgres_available() -> bool {
    let available = std::env::var("TEST_DATABASE_URL").is_ok_and(|url| !url.is_empty());
    if !available {
        eprintln!(
            "skipped: two instances sharing the Telegram long poll need PostgreSQL \
             (set TEST_DATABASE_URL)"
        );
    }
    available
}

/// Two instances on one fresh database and one fake bot: the first holds
/// the lease (it started first and renews it), the second stands by; the
/// logs of both are captured.
struct Cluster {
    telegram: FakeTelegram,
    store: Store,
    first: ServeProcess,
    first_id: String,
    second: ServeProcess,
    _llm: FakeLlm,
    _dir: tempfile::TempDir,
    /// Dropped last: drops the database.
    _database: FreshDatabase,
}

async fn cluster() -> Cluster {
    // Like Telegram, the fake keeps an update until a poll confirms it: an
    // update taken by a poller that then died or stalled reaches the next.
    let telegram = FakeTelegram::start_confirming().await;
    let llm = FakeLlm::echo().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let database = fresh_database(dir.path()).await;

    let first = start(dir.path(), &database, &llm, &telegram, true).await;
    let store = Store::connect_without_migrating(&StoreOptions::new(&*database))
        .await
        .expect("store");
    let first_id = eventually_some("the first instance to take the lease", || async {
        holder(&store).await
    })
    .await;
    telegram
        .wait_for("the first instance to poll", || telegram.polls() > 0)
        .await;
    let second = start(dir.path(), &database, &llm, &telegram, true).await;
    Cluster {
        telegram,
        store,
        first,
        first_id,
        second,
        _llm: llm,
        _dir: dir,
        _database: database,
    }
}

/// `ADA` writes `text`; it is answered (by whichever instance polls).
async fn ask(telegram: &FakeTelegram, asked: &mut Vec<String>, text: &str) {
    let reply = telegram.ask(ADA, text).await;
    assert_eq!(reply, format!("echo: {text}"));
    asked.push(text.to_owned());
}

/// Waits until every reply is delivered and recorded as such, so no
/// instance delivers one again.
async fn replies_recorded(telegram: &FakeTelegram, store: &Store) {
    telegram.settled().await;
    eventually("every reply to be marked sent", || async {
        let unsent: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM outbox WHERE status <> 'sent'")
            .fetch_one(&mut *store.conn().await.expect("conn"))
            .await
            .expect("count");
        unsent == 0
    })
    .await;
}

/// Every message in `asked` was answered exactly once.
fn assert_answered_once(telegram: &FakeTelegram, asked: &[String]) {
    let sent = telegram.sent();
    assert_eq!(sent.len(), asked.len(), "one reply per message: {sent:?}");
    for text in asked {
        let echo = format!("echo: {text}");
        let replies = sent.iter().filter(|reply| reply.text == echo).count();
        assert_eq!(replies, 1, "{text:?} answered once: {sent:?}");
    }
}

/// Sends `signal` to `process`.
fn signal(process: &ServeProcess, signal: i32) {
    let pid = process.child.id().expect("running");
    // SAFETY: signalling our own child process.
    let sent = unsafe { libc::kill(i32::try_from(pid).expect("pid fits"), signal) };
    assert_eq!(sent, 0, "signal {signal} sent");
}

/// The second instance's logs after a clean stop: it stood by, took over,
/// never met another poller, and released the lease.
async fn assert_took_over_cleanly(second: ServeProcess, store: &Store) {
    let logs = second.stop().await;
    assert!(logs.contains("standing by"), "{logs}");
    assert!(logs.contains("platform lease taken"), "{logs}");
    assert!(logs.contains("platform lease released"), "{logs}");
    assert!(
        !logs.contains("another process is polling this bot"),
        "{logs}"
    );
    eventually("the lease to be free after a clean stop", || async {
        holder(store).await.is_none()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_instance_polls_telegram_and_another_takes_over_when_it_is_killed() {
    if !postgres_available() {
        return;
    }
    let Cluster {
        telegram,
        store,
        first,
        first_id,
        second,
        _llm,
        _dir,
        _database,
    } = cluster().await;

    // The second stands by while the first renews its lease: every message
    // is taken by one poller and answered once.
    let mut asked = Vec::new();
    for i in 0..4 {
        ask(&telegram, &mut asked, &format!("while both run {i}")).await;
    }
    replies_recorded(&telegram, &store).await;
    assert_eq!(holder(&store).await.as_deref(), Some(first_id.as_str()));
    assert_eq!(telegram.conflicts(), 0, "only one instance polls at a time");

    // SIGKILL the holder: its lease expires on the database's clock and the
    // second instance takes over within about the TTL.
    let killed = Instant::now();
    first.kill().await;
    ask(&telegram, &mut asked, "after the kill").await;
    eprintln!(
        "the second instance answered {:.1?} after the holder was killed (lease TTL {LEASE_TTL_SECS} s)",
        killed.elapsed()
    );
    let second_id = eventually_some("the second instance to hold the lease", || async {
        holder(&store).await.filter(|owner| *owner != first_id)
    })
    .await;
    assert_ne!(second_id, first_id);
    replies_recorded(&telegram, &store).await;

    assert_answered_once(&telegram, &asked);
    assert_eq!(telegram.conflicts(), 0, "only one instance polls at a time");
    assert_took_over_cleanly(second, &store).await;
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_holder_is_replaced_and_stands_by_when_it_resumes() {
    if !postgres_available() {
        return;
    }
    let Cluster {
        telegram,
        store,
        first,
        first_id,
        second,
        _llm,
        _dir,
        _database,
    } = cluster().await;
    let mut asked = Vec::new();
    ask(&telegram, &mut asked, "before the stall").await;
    replies_recorded(&telegram, &store).await;

    // SIGSTOP the holder: it stops renewing, and the second instance takes
    // over once the lease expires.
    let stopped = Instant::now();
    signal(&first, libc::SIGSTOP);
    ask(&telegram, &mut asked, "during the stall").await;
    eprintln!(
        "the second instance answered {:.1?} after the holder stalled (lease TTL {LEASE_TTL_SECS} s)",
        stopped.elapsed()
    );
    let second_id = eventually_some("the second instance to hold the lease", || async {
        holder(&store).await.filter(|owner| *owner != first_id)
    })
    .await;
    replies_recorded(&telegram, &store).await;

    // SIGCONT: the first finds its lease gone, disconnects and stands by;
    // the second keeps polling and answers once.
    signal(&first, libc::SIGCONT);
    let http = reqwest::Client::new();
    eventually("the first instance to run again", || async {
        http.get(format!("{}/healthz", first.base))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
    })
    .await;
    ask(&telegram, &mut asked, "after the stall").await;
    ask(&telegram, &mut asked, "and later").await;
    replies_recorded(&telegram, &store).await;
    assert_eq!(holder(&store).await.as_deref(), Some(second_id.as_str()));
    assert_answered_once(&telegram, &asked);
    // Resumed, the first finds its lease expired before its poller acts,
    // and stops polling without a last confirming getUpdates: no poll of
    // its own cuts the second's short, and neither meets a 409.
    assert_eq!(
        telegram.conflicts(),
        0,
        "no overlapping polls after the stall"
    );
    let first_logs = first.stop().await;
    assert!(!first_logs.contains("409 Conflict"), "{first_logs}");
    let logs = second.stop().await;
    assert!(logs.contains("platform lease taken"), "{logs}");
    assert!(!logs.contains("409 Conflict"), "{logs}");
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
