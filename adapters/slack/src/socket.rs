//! Socket Mode: [`SocketMode`], the [`Connection`] one instance at a time
//! holds (under the platform lease [`Connection::lease_name`]), receiving
//! events and button presses over a WebSocket instead of HTTP.
//!
//! For each Slack app (each distinct app-level token) it asks
//! `apps.connections.open` for a WebSocket URL (single use, with a ticket
//! in it: never logged), connects over rustls, and waits for `hello`.
//! Then every envelope is acknowledged with its `envelope_id`: an
//! `events_api` envelope only once the core has recorded the event (see
//! [`crate::inbound`]), so that Slack delivers it again otherwise; an
//! `interactive` one once the press is handed to the core; others at once.
//!
//! The connection is opened anew:
//!
//! - at once when Slack sends `disconnect` (`warning`, `refresh_requested`:
//!   Slack rotates connections now and then); `link_disabled` (Socket
//!   Mode turned off for the app) ends [`Connection::run`] with an error;
//! - after the contract's backoff (from 1 s, doubling, at most a minute;
//!   a 429's `Retry-After` as given) when the connection fails, closes,
//!   or stays silent: the adapter pings every [`PING_EVERY`], and a
//!   connection that yields nothing for [`SILENCE`] (or no `hello` within
//!   it) is given up.
//!
//! Failures and recoveries are told to the [`LinkObserver`]: down with the
//! reason, up once every app's connection has said `hello` again. A refused
//! app-level token ends `run` with an error (the core retries later).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use futures_util::{SinkExt, StreamExt};
use secrecy::SecretString;
use serde::Deserialize;
use serde_json::Value;
use switchboard_contract::backoff::{self, Backoff, Retries, Wait};
use switchboard_contract::{Connection, ConnectionError, LinkObserver};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

use crate::api::{ApiError, WebApi};
use crate::events::{Envelope, Interaction};
use crate::inbound::{Ack, Inbound};

/// Between failed connections: from 1 s, doubling, at most a minute.
const RECONNECT: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));

/// How long the WebSocket handshake may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How often the adapter pings Slack (and checks for silence).
pub const PING_EVERY: Duration = Duration::from_secs(10);

/// How long a connection may yield nothing (not even a pong, or no
/// `hello` after connecting) before it is given up.
pub const SILENCE: Duration = Duration::from_secs(30);

/// One Slack app's Socket Mode credentials.
pub(crate) struct SocketApp {
    /// The workspaces it serves, for the log.
    pub label: String,
    pub token: SecretString,
}

/// The Socket Mode connection of every app the adapter serves.
pub struct SocketMode {
    apps: Vec<SocketApp>,
    inbound: Arc<Inbound>,
    api: WebApi,
    links: Links,
    lease: String,
}

/// How one connection ended.
#[derive(Debug)]
enum End {
    /// Told to stop.
    Stopped,
    /// Slack asked for a new connection.
    Refresh(String),
    /// It failed; try again after a backoff (or the wait Slack asked for).
    Failed(String, Option<Duration>),
    /// It cannot work again with these settings.
    Fatal(String),
}

/// What one frame from Slack means for the connection.
enum Next {
    Read,
    Hello,
    End(End),
}

/// A frame Slack sends over the socket.
#[derive(Deserialize)]
struct Frame {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    envelope_id: Option<String>,
    #[serde(default)]
    payload: Option<Value>,
    #[serde(default)]
    reason: Option<String>,
}

impl SocketMode {
    pub(crate) fn new(
        apps: Vec<SocketApp>,
        inbound: Arc<Inbound>,
        api: WebApi,
        observer: Arc<dyn LinkObserver>,
        lease: String,
    ) -> Self {
        let links = Links::new(observer, apps.len());
        Self {
            apps,
            inbound,
            api,
            links,
            lease,
        }
    }

    /// Keeps app number `index` connected until `stop`.
    async fn run_app(&self, index: usize, stop: &CancellationToken) -> Result<(), ConnectionError> {
        let app = &self.apps[index];
        let mut retries = RECONNECT.retries();
        loop {
            if stop.is_cancelled() {
                return Ok(());
            }
            let ended = match self.api.open_connection(&app.token).await {
                Ok(url) => self.session(index, &url, stop, &mut retries).await,
                Err(err) if err.is_auth() => {
                    End::Fatal(format!("Slack refused the app-level token ({err})"))
                }
                Err(ApiError::RateLimited { retry_after, .. }) => End::Failed(
                    "apps.connections.open was rate limited".to_owned(),
                    Some(retry_after),
                ),
                Err(err) => End::Failed(err.to_string(), None),
            };
            let delay = match ended {
                End::Stopped => return Ok(()),
                End::Fatal(reason) => {
                    let reason = format!("Slack Socket Mode for {}: {reason}", app.label);
                    self.links.down(index, &reason);
                    tracing::error!(%reason, "Slack Socket Mode stopped");
                    return Err(ConnectionError::Failed(reason));
                }
                End::Refresh(reason) => {
                    tracing::info!(app = %app.label, %reason, "Slack asked for a new Socket Mode connection");
                    Duration::ZERO
                }
                End::Failed(reason, after) => {
                    let delay = retries.next_delay(after);
                    tracing::warn!(app = %app.label, %reason, backoff = ?delay, "Slack Socket Mode connection failed; reconnecting");
                    self.links
                        .down(index, &format!("Slack Socket Mode: {reason}"));
                    delay
                }
            };
            if backoff::wait(delay, stop).await == Wait::Cancelled {
                return Ok(());
            }
        }
    }

    /// One WebSocket connection, from the handshake until it ends.
    async fn session(
        &self,
        index: usize,
        url: &str,
        stop: &CancellationToken,
        retries: &mut Retries,
    ) -> End {
        let scrub = |text: String| text.replace(url, "<socket url>");
        let mut socket = match tokio::time::timeout(
            CONNECT_TIMEOUT,
            tokio_tungstenite::connect_async(url),
        )
        .await
        {
            Ok(Ok((socket, _))) => socket,
            Ok(Err(err)) => return End::Failed(scrub(format!("connect: {err}")), None),
            Err(_) => return End::Failed("the WebSocket handshake timed out".to_owned(), None),
        };
        let (acks, mut to_ack) = mpsc::unbounded_channel::<String>();
        let mut last_heard = Instant::now();
        let mut ping = tokio::time::interval_at(Instant::now() + PING_EVERY, PING_EVERY);
        loop {
            let next = tokio::select! {
                biased;
                () = stop.cancelled() => Next::End(End::Stopped),
                Some(envelope_id) = to_ack.recv() => {
                    let ack = serde_json::json!({ "envelope_id": envelope_id }).to_string();
                    match socket.send(Message::Text(ack)).await {
                        Ok(()) => Next::Read,
                        Err(err) => Next::End(End::Failed(scrub(format!("sending an ack: {err}")), None)),
                    }
                }
                _ = ping.tick() => {
                    if last_heard.elapsed() > SILENCE {
                        Next::End(End::Failed(format!("nothing heard for {SILENCE:?}"), None))
                    } else {
                        match socket.send(Message::Ping(Vec::new())).await {
                            Ok(()) => Next::Read,
                            Err(err) => Next::End(End::Failed(scrub(format!("ping: {err}")), None)),
                        }
                    }
                }
                frame = socket.next() => {
                    last_heard = Instant::now();
                    match frame {
                        None => Next::End(End::Failed("the connection ended".to_owned(), None)),
                        Some(Err(err)) => Next::End(End::Failed(scrub(err.to_string()), None)),
                        Some(Ok(Message::Text(text))) => self.on_text(&text, &acks),
                        Some(Ok(Message::Close(_))) => Next::End(End::Failed("Slack closed the connection".to_owned(), None)),
                        Some(Ok(_)) => Next::Read,
                    }
                }
            };
            match next {
                Next::Read => {}
                Next::Hello => {
                    retries.reset();
                    tracing::info!(app = %self.apps[index].label, "connected to Slack Socket Mode");
                    self.links.up(index);
                }
                Next::End(end) => {
                    // Best effort: the connection is dropped either way.
                    let _ = tokio::time::timeout(Duration::from_secs(1), socket.close(None)).await;
                    return end;
                }
            }
        }
    }

    /// Handles one text frame.
    fn on_text(&self, text: &str, acks: &mpsc::UnboundedSender<String>) -> Next {
        let Ok(frame) = serde_json::from_str::<Frame>(text) else {
            tracing::warn!("unreadable Slack Socket Mode frame skipped");
            return Next::Read;
        };
        match frame.kind.as_str() {
            "hello" => return Next::Hello,
            "disconnect" => {
                let reason = frame.reason.unwrap_or_default();
                return Next::End(if reason == "link_disabled" {
                    End::Fatal("Socket Mode was turned off for the app (link_disabled)".to_owned())
                } else {
                    End::Refresh(reason)
                });
            }
            _ => {}
        }
        let Some(envelope_id) = frame.envelope_id else {
            tracing::debug!(kind = %frame.kind, "Slack Socket Mode frame ignored");
            return Next::Read;
        };
        let payload = frame.payload.unwrap_or(Value::Null);
        match frame.kind.as_str() {
            "events_api" => match serde_json::from_value::<Envelope>(payload) {
                Ok(envelope) => {
                    let inbound = Arc::clone(&self.inbound);
                    let acks = acks.clone();
                    tokio::spawn(async move {
                        acknowledge(inbound.event(envelope).await, envelope_id, &acks);
                    });
                }
                Err(_) => {
                    tracing::warn!("unreadable Slack events_api envelope acknowledged and dropped");
                    let _ = acks.send(envelope_id);
                }
            },
            "interactive" => match serde_json::from_value::<Interaction>(payload) {
                Ok(interaction) => {
                    acknowledge(self.inbound.interaction(interaction), envelope_id, acks);
                }
                Err(_) => {
                    tracing::warn!(
                        "unreadable Slack interactive envelope acknowledged and dropped"
                    );
                    let _ = acks.send(envelope_id);
                }
            },
            other => {
                tracing::debug!(kind = %other, "Slack Socket Mode envelope acknowledged and ignored");
                let _ = acks.send(envelope_id);
            }
        }
        Next::Read
    }
}

/// Queues the ack of `envelope_id`, or says why it is left unacknowledged.
fn acknowledge(ack: Ack, envelope_id: String, acks: &mpsc::UnboundedSender<String>) {
    match ack {
        // The connection may be gone; Slack then delivers it again.
        Ack::Yes => {
            let _ = acks.send(envelope_id);
        }
        Ack::No(reason) => {
            tracing::warn!(%reason, "Slack envelope left unacknowledged; Slack delivers it again");
        }
    }
}

#[async_trait]
impl Connection for SocketMode {
    fn lease_name(&self) -> String {
        self.lease.clone()
    }

    async fn run(&self, stop: CancellationToken) -> Result<(), ConnectionError> {
        // Each app's connection ends with the others: when one fails for
        // good, the core restarts them all.
        let stop = stop.child_token();
        let runs = (0..self.apps.len()).map(|index| {
            let stop = stop.clone();
            async move {
                let result = self.run_app(index, &stop).await;
                stop.cancel();
                result
            }
        });
        let results = futures_util::future::join_all(runs).await;
        results.into_iter().find(Result::is_err).unwrap_or(Ok(()))
    }
}

/// Which apps' connections are up, told to the observer: up once all are.
struct Links {
    observer: Arc<dyn LinkObserver>,
    up: Mutex<Vec<bool>>,
}

impl Links {
    fn new(observer: Arc<dyn LinkObserver>, apps: usize) -> Self {
        Self {
            observer,
            up: Mutex::new(vec![false; apps]),
        }
    }

    fn up(&self, index: usize) {
        let all = {
            let mut up = self.up.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(slot) = up.get_mut(index) {
                *slot = true;
            }
            up.iter().all(|&up| up)
        };
        if all {
            self.observer.up();
        }
    }

    fn down(&self, index: usize, reason: &str) {
        if let Some(slot) = self
            .up
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_mut(index)
        {
            *slot = false;
        }
        self.observer.down(reason);
    }
}
