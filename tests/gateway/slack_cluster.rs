//! Slack on several instances: two real `switchboard serve` processes on one
//! PostgreSQL database. With the Events API, every event delivered to both
//! (as a load balancer and Slack's retries may) is answered once; in Socket
//! Mode one instance holds the connection under the platform lease, the
//! other stands by and takes over when the holder is killed. Needs
//! `TEST_DATABASE_URL`: on SQLite there is one instance per database.

use std::future::ready;

use serde_json::Value;
use switchboard_test_support::slack::{
    APP_TOKEN, BOT_TOKEN, Delivery, FakeSlack, SIGNING_SECRET, TEAM_ID, event_callback,
    message_event,
};
use switchboard_test_support::{eventually, eventually_some};

use crate::helpers::{FakeLlm, FreshDatabase, ServeProcess, fresh_database};

const DM: &str = "D0DMCLUSTER";

/// Whether PostgreSQL is there to share; prints why a test is skipped
/// when it is not.
fn postgres_available() -> bool {
    let available = std::env::var("TEST_DATABASE_URL").is_ok_and(|url| !url.is_empty());
    if !available {
        eprintln!(
            "skipped: two Slack instances on one database need PostgreSQL (set TEST_DATABASE_URL)"
        );
    }
    available
}

/// One instance on `database` serving the fake's workspace in `mode`.
async fn start(
    dir: &std::path::Path,
    database: &str,
    llm: &FakeLlm,
    slack: &FakeSlack,
    mode: &str,
) -> ServeProcess {
    let base_url = llm.openai_base();
    let api_url = slack.api_url();
    let process = ServeProcess::start(
        dir,
        &[
            ("SWITCHBOARD__DATABASE__URL", database),
            ("SWITCHBOARD__LLM__BASE_URL", base_url.as_str()),
            ("SWITCHBOARD__RUNNER__LEASE_TTL_SECS", "2"),
            ("SWITCHBOARD__SLACK__MODE", mode),
            ("SWITCHBOARD__SLACK__API_URL", api_url.as_str()),
            ("SWITCHBOARD__SLACK__STREAM_REPLIES", "false"),
            (
                "SWITCHBOARD__SLACK__BOT_TOKEN_ENV",
                "SB_TEST_CLUSTER_SLACK_BOT",
            ),
            (
                "SWITCHBOARD__SLACK__SIGNING_SECRET_ENV",
                "SB_TEST_CLUSTER_SLACK_SECRET",
            ),
            (
                "SWITCHBOARD__SLACK__APP_TOKEN_ENV",
                "SB_TEST_CLUSTER_SLACK_APP",
            ),
            ("SB_TEST_CLUSTER_SLACK_BOT", BOT_TOKEN),
            ("SB_TEST_CLUSTER_SLACK_SECRET", SIGNING_SECRET),
            ("SB_TEST_CLUSTER_SLACK_APP", APP_TOKEN),
            ("RUST_LOG", "warn"),
        ],
        true,
    )
    .await;
    eventually("the Slack adapter to be ready", || async {
        matches!(
            slack_state(&process).await.as_deref(),
            Some("up" | "standby")
        )
    })
    .await;
    process
}

/// The Slack adapter's state in `process`'s `/readyz`.
async fn slack_state(process: &ServeProcess) -> Option<String> {
    let response = reqwest::get(format!("{}/readyz", process.base_url()))
        .await
        .ok()?;
    let body: Value = response.json().await.ok()?;
    body["adapters"]["slack"]["state"]
        .as_str()
        .map(str::to_owned)
}

/// A DM `text` at `ts`.
fn dm(text: &str, ts: &str) -> Value {
    event_callback(TEAM_ID, message_event(DM, "im", text, ts))
}

/// The texts the bot posted in the DM, oldest first.
fn answers(slack: &FakeSlack) -> Vec<String> {
    slack.posted_in(DM).into_iter().map(|p| p.text).collect()
}

struct Pair {
    slack: FakeSlack,
    llm: FakeLlm,
    first: ServeProcess,
    second: ServeProcess,
    _dir: tempfile::TempDir,
    /// Dropped last: drops the database.
    _database: FreshDatabase,
}

/// Two instances in `mode`, the first started (and, in Socket Mode,
/// connected) before the second.
async fn pair(mode: &str) -> Pair {
    let slack = FakeSlack::start().await;
    let llm = FakeLlm::echo().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let database = fresh_database(dir.path()).await;
    let first = start(dir.path(), &database, &llm, &slack, mode).await;
    if mode == "socket" {
        eventually("the first instance to connect", || {
            ready(slack.socket_connected())
        })
        .await;
    }
    let second = start(dir.path(), &database, &llm, &slack, mode).await;
    Pair {
        slack,
        llm,
        first,
        second,
        _dir: dir,
        _database: database,
    }
}

#[tokio::test]
async fn two_instances_with_http_events_answer_each_event_once() {
    if !postgres_available() {
        return;
    }
    // Bound whole: the database and folder live until the end.
    let pair = pair("events").await;
    let Pair {
        slack,
        llm,
        first,
        second,
        ..
    } = &pair;
    let delivery = Delivery::new(SIGNING_SECRET);
    let urls = [
        format!("{}/slack/events", first.base_url()),
        format!("{}/slack/events", second.base_url()),
    ];

    // Every event reaches both instances at once, as a retry through a
    // load balancer may.
    for n in 0..4 {
        let event = dm(&format!("question {n}"), &format!("1700001000.00000{n}"));
        let (a, b) = tokio::join!(
            delivery.event(&urls[0], &event),
            delivery.event(&urls[1], &event)
        );
        assert_eq!((a.statuses, b.statuses), (vec![200], vec![200]));
    }
    eventually("four answers", || ready(answers(slack).len() >= 4)).await;
    // A last event through one instance: every earlier turn is done by then.
    assert_eq!(
        delivery
            .event(&urls[1], &dm("last", "1700001001.000001"))
            .await
            .statuses,
        [200]
    );
    eventually("the last answer", || ready(answers(slack).len() >= 5)).await;

    let mut texts = answers(slack);
    texts.sort();
    assert_eq!(
        texts,
        [
            "echo: last",
            "echo: question 0",
            "echo: question 1",
            "echo: question 2",
            "echo: question 3",
        ]
    );
    assert_eq!(llm.requests().len(), 5, "one turn per event");
    let Pair { first, second, .. } = pair;
    first.stop().await;
    second.stop().await;
}

#[tokio::test]
async fn two_instances_in_socket_mode_hold_one_connection() {
    if !postgres_available() {
        return;
    }
    let Pair {
        slack,
        llm,
        first,
        second,
        _dir,
        _database,
    } = pair("socket").await;

    assert_eq!(slack.socket_connections(), 1, "one holder connects");
    assert_eq!(slack_state(&second).await.as_deref(), Some("standby"));
    slack.send_envelope("events_api", dm("who answers?", "1700002000.000001"));
    eventually("the answer", || ready(!answers(&slack).is_empty())).await;

    // The holder dies: the other takes the lease over and connects.
    first.kill().await;
    eventually_some("the second instance to connect", || async {
        (slack.socket_connections() == 2 && slack.socket_connected()).then_some(())
    })
    .await;
    eventually("the second instance up", || async {
        slack_state(&second).await.as_deref() == Some("up")
    })
    .await;
    slack.send_envelope("events_api", dm("still here?", "1700002001.000001"));
    eventually("the second answer", || ready(answers(&slack).len() >= 2)).await;

    assert_eq!(answers(&slack), ["echo: who answers?", "echo: still here?"]);
    assert_eq!(llm.requests().len(), 2);
    let logs = second.stop().await;
    assert!(
        !logs.contains(BOT_TOKEN) && !logs.contains(APP_TOKEN),
        "no token in the logs"
    );
}
