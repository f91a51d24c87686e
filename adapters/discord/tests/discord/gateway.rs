//! The gateway connection against the fake gateway: a message sent while
//! the connection was down and RESUME was refused is fetched and handled; a
//! close frame without a status code leads to a reconnect (reported to the
//! link observer as down, then up once resumed); a fatal close code stops the
//! worker with its error; stopping returns within the shutdown deadline.

use std::sync::Arc;
use std::time::Duration;

use switchboard_contract::LinkObserver;
use switchboard_discord::{DiscordError, DiscordSettings, SHUTDOWN_DEADLINE};
use switchboard_test_support::eventually;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::fake_discord::FakeDiscord;
use crate::support::{RecordingSink, TOKEN, adapter_with};

/// The DM channel the user writes in.
const DM: u64 = 500_000_000_000_000_077;

/// The adapter's gateway worker, running against a fake Discord.
struct Running {
    fake: FakeDiscord,
    sink: Arc<RecordingSink>,
    shutdown: CancellationToken,
    worker: JoinHandle<Result<(), DiscordError>>,
}

impl Running {
    async fn start() -> Self {
        Self::observed(None).await
    }

    /// Started, telling `link` (when given) how the connection fares.
    async fn observed(link: Option<Arc<dyn LinkObserver>>) -> Self {
        let fake = FakeDiscord::start().await;
        let sink = Arc::new(RecordingSink::default());
        let adapter = adapter_with(
            &fake,
            TOKEN,
            DiscordSettings::default(),
            Arc::clone(&sink) as _,
        );
        let gateway = match link {
            Some(link) => adapter.gateway.with_link_observer(link),
            None => adapter.gateway,
        };
        let shutdown = CancellationToken::new();
        let worker = tokio::spawn(gateway.run(shutdown.clone()));
        eventually("the adapter identifies", || async { fake.connected() }).await;
        Self {
            fake,
            sink,
            shutdown,
            worker,
        }
    }

    /// Sends a DM `text` and waits until it reaches the core (`what`).
    async fn dm(&self, text: &str, what: &str) {
        self.fake.user_sends_dm(DM, text);
        eventually(what, || async { self.submitted(text) }).await;
    }

    /// Whether the core was handed the message `text`.
    fn submitted(&self, text: &str) -> bool {
        self.sink.submitted().iter().any(|m| m.text == text)
    }

    /// Stops the worker, failing the test unless it returns within the
    /// shutdown deadline (plus slack for a loaded machine).
    async fn stop(self) {
        self.shutdown.cancel();
        let ended = tokio::time::timeout(SHUTDOWN_DEADLINE + Duration::from_secs(2), self.worker)
            .await
            .expect("the adapter stops within its deadline")
            .expect("the worker does not panic");
        assert!(ended.is_ok(), "{ended:?}");
    }
}

#[tokio::test]
async fn a_dm_sent_while_the_gateway_was_down_is_fetched_after_resume_is_refused() {
    let app = Running::start().await;
    app.dm("before the outage", "the first DM reaches the core")
        .await;

    app.fake.down();
    app.fake.refuse_resume();
    app.fake.user_sends_dm(DM, "during the outage");
    app.fake.up();

    eventually("the missed DM reaches the core", || async {
        app.submitted("during the outage")
    })
    .await;
    let ops = app.fake.gateway_ops();
    assert_eq!(ops, [2, 6, 2], "IDENTIFY, a refused RESUME, IDENTIFY again");
    let fetched: Vec<_> = app
        .fake
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("messages?after"))
        .collect();
    assert!(!fetched.is_empty(), "the DM channel's history was fetched");
    assert_eq!(
        app.sink
            .submitted()
            .iter()
            .filter(|m| m.text == "during the outage")
            .count(),
        1
    );

    // Messages after the new session arrive over the gateway as usual.
    app.dm("after the outage", "a DM after the outage reaches the core")
        .await;
    app.stop().await;
}

#[tokio::test]
async fn a_catch_up_leaves_out_messages_older_than_six_hours() {
    let app = Running::start().await;
    // The channel's last message seen is seven hours old.
    app.fake.rewind(Duration::from_secs(7 * 3600));
    app.dm("long ago", "the old DM reaches the core").await;

    app.fake.down();
    app.fake.refuse_resume();
    let hour = Duration::from_secs(3600);
    app.fake
        .user_sent_dm_ago(DM, "six and a half hours ago", hour * 13 / 2);
    app.fake
        .user_sent_dm_ago(DM, "a minute ago", Duration::from_secs(60));
    app.fake.up();

    eventually("the recent DM reaches the core", || async {
        app.submitted("a minute ago")
    })
    .await;
    assert!(
        !app.submitted("six and a half hours ago"),
        "a message past the catch-up window is left unanswered"
    );
    app.stop().await;
}

#[tokio::test]
async fn a_close_frame_without_a_status_code_leads_to_a_reconnect() {
    let app = Running::start().await;
    app.dm("first", "the first DM reaches the core").await;

    app.fake.close_without_status();
    eventually("the adapter resumes", || async {
        app.fake.connected() && app.fake.gateway_ops() == [2, 6]
    })
    .await;
    app.dm("second", "a DM after the close reaches the core")
        .await;

    // The adapter's answer (an echo of the empty close, as RFC 6455 asks)
    // must not be one that ends the session: that is 1000 or 1001.
    let closes = app.fake.client_closes();
    app.stop().await;
    assert!(
        closes.iter().all(|code| !matches!(code, Some(1000 | 1001))),
        "the adapter keeps its session when answering: {closes:?}"
    );
}

/// What the adapter told its link observer, in order.
#[derive(Default)]
struct LinkEvents(std::sync::Mutex<Vec<String>>);

impl LinkEvents {
    fn seen(&self) -> Vec<String> {
        self.0.lock().expect("lock").clone()
    }
}

impl LinkObserver for LinkEvents {
    fn up(&self) {
        self.0.lock().expect("lock").push("up".to_owned());
    }

    fn down(&self, reason: &str) {
        self.0.lock().expect("lock").push(format!("down: {reason}"));
    }
}

#[tokio::test]
async fn a_connection_that_ends_is_reported_down_until_the_session_resumes() {
    let link = Arc::new(LinkEvents::default());
    let app = Running::observed(Some(Arc::clone(&link) as _)).await;
    let fake = &app.fake;
    // The first session is no change: the adapter was up already.
    assert!(link.seen().is_empty(), "{:?}", link.seen());

    fake.down();
    eventually("the ended connection reported", || async {
        !link.seen().is_empty()
    })
    .await;
    let seen = link.seen();
    assert!(
        seen[0].starts_with("down: gateway connection of shard 0 ended"),
        "{seen:?}"
    );
    assert!(
        !seen.iter().any(|event| event.contains("not-real")),
        "{seen:?}"
    );
    fake.up();
    eventually("the resumed session reported", || async {
        link.seen().last().map(String::as_str) == Some("up")
    })
    .await;
    assert_eq!(fake.gateway_ops().last(), Some(&6), "it resumed");

    app.stop().await;
}

#[tokio::test]
async fn stopping_while_the_gateway_is_down_returns_within_the_deadline() {
    let app = Running::start().await;
    app.fake.down();
    eventually("the connection is gone", || async { !app.fake.connected() }).await;

    app.stop().await;
}

#[tokio::test]
async fn a_fatal_close_code_stops_the_worker_with_its_explanation() {
    let app = Running::start().await;

    app.fake.close_with(4014);

    let ended = tokio::time::timeout(switchboard_test_support::wait::PATIENCE, app.worker)
        .await
        .expect("the worker stops by itself")
        .expect("the worker does not panic");
    let err = ended.expect_err("4014 is fatal");
    assert!(
        matches!(err, DiscordError::PrivilegedIntentDisabled),
        "{err:?}"
    );
    assert_eq!(app.fake.gateway_ops(), [2], "no reconnect after 4014");
}

#[tokio::test]
async fn an_attachment_comes_with_a_fetcher_of_its_bytes_within_the_cap() {
    let app = Running::start().await;
    let bytes = b"\x89PNG\r\n\x1a\n not really the rest of a png";
    app.fake
        .user_sends_file(DM, "", "dot.png", "image/png", bytes);
    eventually("the file message is submitted", || async {
        !app.sink.submitted().is_empty()
    })
    .await;
    let message = app.sink.submitted().remove(0);
    assert_eq!(message.text, "", "a file without text is not dropped");
    let file = &message.attachments[0];
    assert_eq!(file.kind, switchboard_contract::AttachmentKind::Image);
    assert_eq!(file.name.as_deref(), Some("dot.png"));
    assert_eq!(file.media_type.as_deref(), Some("image/png"));
    assert_eq!(file.size, Some(bytes.len() as u64));
    let fetch = file.fetch.as_ref().expect("a fetcher");
    assert_eq!(fetch.fetch(1024).await.expect("downloaded"), bytes);
    assert!(matches!(
        fetch.fetch(8).await,
        Err(switchboard_contract::FetchError::TooLarge { limit: 8, .. })
    ));
    app.stop().await;
}
