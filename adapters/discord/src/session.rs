//! One gateway shard's websocket connection, speaking Discord's gateway
//! protocol (v10, JSON): [`Shard`] connects, waits for HELLO, IDENTIFYs (or
//! RESUMEs a session it had), heartbeats, and hands each `MESSAGE_CREATE` to
//! the [`InboundHandler`].
//!
//! Every way a connection can end leads to a reconnect unless the close code
//! is fatal: an ended stream, an error, a close frame with or without a
//! status code, Reconnect (op 7), Invalid Session (op 9), a HELLO that does
//! not come, a heartbeat without an ACK (a zombie connection). The session is
//! resumed when Discord allows it; when it does not, a new one is identified
//! and, once READY, the handler fetches what was missed
//! ([`InboundHandler::catch_up`]). Reading never spins: each step waits on
//! the socket, a timer or shutdown, and shutdown ends every wait.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use serde_json::{Value, json};
use serenity::model::channel::Message;
use serenity::model::id::UserId;
use switchboard_contract::backoff::{self, Backoff, Wait};
use tokio::net::TcpStream;
use tokio::time::{Instant, Interval, MissedTickBehavior};
use tokio_tungstenite::tungstenite::Message as Frame;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};
use tokio_util::sync::CancellationToken;

use crate::error::DiscordError;
use crate::inbound::InboundHandler;

/// Between reconnects: from 1 s, doubling while connecting keeps failing,
/// at most a minute; back to the start once a session is up.
const RECONNECT: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));

/// How long connecting (TCP, TLS, websocket handshake) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// How long after connecting HELLO must arrive.
const HELLO_TIMEOUT: Duration = Duration::from_secs(15);

/// How long sending one frame may take.
const SEND_TIMEOUT: Duration = Duration::from_secs(10);

/// How long closing the socket may take before it is dropped.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);

/// The close code sent when reconnecting: any code but 1000/1001 keeps the
/// session resumable.
const RECONNECT_CLOSE: u16 = 4000;

type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// What a shard needs to connect.
pub(crate) struct ShardConfig {
    /// The bot token (sent in IDENTIFY and RESUME, never logged).
    pub(crate) token: SecretString,
    /// The gateway URL from `GET /gateway/bot`.
    pub(crate) url: String,
    /// The intents' bits.
    pub(crate) intents: u64,
    /// `[shard id, shard count]`.
    pub(crate) shard: [u32; 2],
}

/// A session that can be resumed.
struct Session {
    id: String,
    resume_url: String,
}

/// One gateway shard, connected again and again until shutdown.
pub(crate) struct Shard {
    config: ShardConfig,
    handler: InboundHandler,
    session: Option<Session>,
    /// The last dispatch's sequence number.
    seq: Option<u64>,
}

/// How one connection ended.
#[derive(Debug)]
enum Ended {
    /// Shutdown was signalled.
    Shutdown,
    /// Connect again; resume the session if `resumable`.
    Reconnect { resumable: bool, reason: String },
    /// Connecting again would fail the same way.
    Fatal(DiscordError),
}

impl Ended {
    fn resume(reason: impl Into<String>) -> Self {
        Self::Reconnect {
            resumable: true,
            reason: reason.into(),
        }
    }
}

/// One gateway payload.
#[derive(Debug, Deserialize)]
struct Payload {
    op: u8,
    #[serde(default)]
    d: Value,
    s: Option<u64>,
    t: Option<String>,
}

#[derive(Deserialize)]
struct Hello {
    heartbeat_interval: u64,
}

#[derive(Deserialize)]
struct Ready {
    session_id: String,
    resume_gateway_url: Option<String>,
    user: ReadyUser,
}

#[derive(Deserialize)]
struct ReadyUser {
    id: UserId,
}

impl Shard {
    pub(crate) fn new(config: ShardConfig, handler: InboundHandler) -> Self {
        Self {
            config,
            handler,
            session: None,
            seq: None,
        }
    }

    /// Connects and reconnects until `shutdown` (then `Ok`) or a fatal
    /// close code.
    pub(crate) async fn run(mut self, shutdown: CancellationToken) -> Result<(), DiscordError> {
        let mut retries = RECONNECT.retries();
        loop {
            let mut established = false;
            let ended = self.connection(&shutdown, &mut established).await;
            let (resumable, reason) = match ended {
                Ended::Shutdown => return Ok(()),
                Ended::Fatal(err) => return Err(err),
                Ended::Reconnect { resumable, reason } => (resumable, reason),
            };
            if !resumable {
                self.session = None;
                self.seq = None;
            }
            if established {
                retries.reset();
            }
            let delay = retries.next_delay(None);
            tracing::warn!(
                shard = self.config.shard[0],
                %reason,
                resume = self.session.is_some(),
                backoff = ?delay,
                "Discord gateway connection lost; reconnecting"
            );
            if backoff::wait(delay, &shutdown).await == Wait::Cancelled {
                return Ok(());
            }
        }
    }

    /// One websocket connection, from connecting to its end. Sets
    /// `established` once READY or RESUMED arrived.
    async fn connection(&mut self, shutdown: &CancellationToken, established: &mut bool) -> Ended {
        let base = self
            .session
            .as_ref()
            .map_or(self.config.url.as_str(), |session| {
                session.resume_url.as_str()
            });
        let url = gateway_url(base);
        let connecting = tokio::select! {
            () = shutdown.cancelled() => return Ended::Shutdown,
            connecting = tokio::time::timeout(CONNECT_TIMEOUT, tokio_tungstenite::connect_async(url)) => connecting,
        };
        let mut socket = match connecting {
            Ok(Ok((socket, _))) => socket,
            Ok(Err(err)) => return Ended::resume(format!("could not connect: {err}")),
            Err(_) => return Ended::resume("connecting timed out"),
        };
        let ended = self.converse(&mut socket, shutdown, established).await;
        let code = match &ended {
            Ended::Shutdown => CloseCode::Normal,
            _ => CloseCode::from(RECONNECT_CLOSE),
        };
        close(&mut socket, code).await;
        ended
    }

    /// Reads and answers the gateway until the connection ends.
    async fn converse(
        &mut self,
        socket: &mut Socket,
        shutdown: &CancellationToken,
        established: &mut bool,
    ) -> Ended {
        let hello_deadline = tokio::time::sleep(HELLO_TIMEOUT);
        tokio::pin!(hello_deadline);
        let mut heartbeat: Option<Interval> = None;
        let mut awaiting_ack = false;
        loop {
            let waiting_for_hello = heartbeat.is_none();
            let beat = async {
                match heartbeat.as_mut() {
                    Some(interval) => interval.tick().await,
                    None => std::future::pending().await,
                }
            };
            let frame = tokio::select! {
                biased;
                () = shutdown.cancelled() => return Ended::Shutdown,
                () = &mut hello_deadline, if waiting_for_hello => {
                    return Ended::resume("no HELLO from the gateway");
                }
                _ = beat => {
                    if awaiting_ack {
                        return Ended::resume("no heartbeat ACK (zombie connection)");
                    }
                    awaiting_ack = true;
                    if let Err(ended) = send(socket, self.heartbeat()).await {
                        return ended;
                    }
                    continue;
                }
                frame = socket.next() => frame,
            };
            let payload = match frame {
                None => return Ended::resume("the connection ended"),
                Some(Err(err)) => return Ended::resume(format!("connection error: {err}")),
                Some(Ok(Frame::Close(frame))) => return closed(frame.as_ref()),
                Some(Ok(Frame::Text(text))) => serde_json::from_str::<Payload>(&text),
                Some(Ok(Frame::Binary(bytes))) => serde_json::from_slice::<Payload>(&bytes),
                Some(Ok(_)) => continue,
            };
            let payload = match payload {
                Ok(payload) => payload,
                Err(err) => {
                    tracing::warn!(error = %err, "unreadable gateway payload skipped");
                    continue;
                }
            };
            match payload.op {
                // Dispatch.
                0 => {
                    if let Some(seq) = payload.s {
                        self.seq = Some(seq);
                    }
                    self.dispatch(payload, shutdown, established);
                }
                // Heartbeat request.
                1 => {
                    if let Err(ended) = send(socket, self.heartbeat()).await {
                        return ended;
                    }
                }
                // Reconnect.
                7 => return Ended::resume("Discord asked to reconnect"),
                // Invalid session: `d` says whether it can be resumed.
                9 => {
                    let resumable = payload.d.as_bool().unwrap_or(false);
                    // Discord asks for a random 1–5 s before the next IDENTIFY.
                    let pause = Duration::from_millis(fastrand::u64(1000..=5000));
                    if backoff::wait(pause, shutdown).await == Wait::Cancelled {
                        return Ended::Shutdown;
                    }
                    return Ended::Reconnect {
                        resumable,
                        reason: "Discord invalidated the session".to_owned(),
                    };
                }
                // Hello.
                10 => {
                    let Ok(hello) = serde_json::from_value::<Hello>(payload.d) else {
                        return Ended::resume("unreadable HELLO");
                    };
                    let period = Duration::from_millis(hello.heartbeat_interval.max(1000));
                    // The first beat after a random part of the interval.
                    let first = period.mul_f64(fastrand::f64());
                    let mut interval = tokio::time::interval_at(Instant::now() + first, period);
                    interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
                    heartbeat = Some(interval);
                    if let Err(ended) = send(socket, self.identify_or_resume()).await {
                        return ended;
                    }
                }
                // Heartbeat ACK.
                11 => awaiting_ack = false,
                other => tracing::debug!(op = other, "gateway opcode ignored"),
            }
        }
    }

    /// Handles one dispatch (op 0).
    fn dispatch(&mut self, payload: Payload, shutdown: &CancellationToken, established: &mut bool) {
        match payload.t.as_deref() {
            Some("READY") => {
                let ready = match serde_json::from_value::<Ready>(payload.d) {
                    Ok(ready) => ready,
                    Err(err) => {
                        tracing::warn!(error = %err, "unreadable READY");
                        return;
                    }
                };
                *established = true;
                let resume_url = ready
                    .resume_gateway_url
                    .unwrap_or_else(|| self.config.url.clone());
                self.session = Some(Session {
                    id: ready.session_id,
                    resume_url,
                });
                tracing::info!(
                    shard = self.config.shard[0],
                    bot_id = %ready.user.id,
                    "connected to Discord (new session)"
                );
                self.handler.connected_as(ready.user.id);
                // A new session replays nothing: fetch what was missed.
                let handler = self.handler.clone();
                let shutdown = shutdown.clone();
                tokio::spawn(async move { handler.catch_up(&shutdown).await });
            }
            Some("RESUMED") => {
                *established = true;
                tracing::info!(shard = self.config.shard[0], "Discord session resumed");
            }
            Some("MESSAGE_CREATE") => match serde_json::from_value::<Message>(payload.d) {
                Ok(message) => {
                    let handler = self.handler.clone();
                    // Own task: a slow submit must not hold up heartbeats.
                    tokio::spawn(async move { handler.on_message(&message).await });
                }
                Err(err) => tracing::warn!(error = %err, "unreadable MESSAGE_CREATE skipped"),
            },
            _ => {}
        }
    }

    fn heartbeat(&self) -> Value {
        json!({"op": 1, "d": self.seq})
    }

    fn identify_or_resume(&self) -> Value {
        let token = raw_token(&self.config.token);
        match (&self.session, self.seq) {
            (Some(session), Some(seq)) => json!({
                "op": 6,
                "d": {"token": token, "session_id": session.id, "seq": seq},
            }),
            _ => json!({
                "op": 2,
                "d": {
                    "token": token,
                    "intents": self.config.intents,
                    "shard": self.config.shard,
                    "properties": {
                        "os": std::env::consts::OS,
                        "browser": "switchboard",
                        "device": "switchboard",
                    },
                },
            }),
        }
    }
}

/// The token as the gateway wants it: without a `Bot ` prefix.
fn raw_token(token: &SecretString) -> &str {
    let token = token.expose_secret().trim();
    token.strip_prefix("Bot ").unwrap_or(token)
}

/// `base` with the API version and encoding.
fn gateway_url(base: &str) -> String {
    format!("{}/?v=10&encoding=json", base.trim_end_matches('/'))
}

/// Sends one payload; a failure ends the connection.
async fn send(socket: &mut Socket, payload: Value) -> Result<(), Ended> {
    match tokio::time::timeout(SEND_TIMEOUT, socket.send(Frame::Text(payload.to_string()))).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(err)) => Err(Ended::resume(format!("could not send: {err}"))),
        Err(_) => Err(Ended::resume("sending timed out")),
    }
}

/// Closes the socket with `code`, giving up after [`CLOSE_TIMEOUT`].
async fn close(socket: &mut Socket, code: CloseCode) {
    let frame = CloseFrame {
        code,
        reason: "".into(),
    };
    // An error here means the socket is already gone, which is the goal.
    let _ = tokio::time::timeout(CLOSE_TIMEOUT, socket.close(Some(frame))).await;
}

/// What a close frame from Discord means for the next connection.
fn closed(frame: Option<&CloseFrame<'_>>) -> Ended {
    let Some(frame) = frame else {
        return Ended::resume("closed without a status code");
    };
    let code = u16::from(frame.code);
    let reason = format!("closed with code {code} ({})", frame.reason);
    match code {
        4004 => Ended::Fatal(DiscordError::InvalidToken),
        4014 => Ended::Fatal(DiscordError::PrivilegedIntentDisabled),
        4010..=4013 => Ended::Fatal(DiscordError::Gateway(reason)),
        // Invalid sequence, session timed out: start a new session.
        4007 | 4009 => Ended::Reconnect {
            resumable: false,
            reason,
        },
        _ => Ended::resume(reason),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(code: u16) -> CloseFrame<'static> {
        CloseFrame {
            code: CloseCode::from(code),
            reason: "".into(),
        }
    }

    #[test]
    fn close_code_4014_explains_how_to_enable_the_intent() {
        let Ended::Fatal(err) = closed(Some(&frame(4014))) else {
            panic!("4014 is fatal");
        };
        assert!(matches!(err, DiscordError::PrivilegedIntentDisabled));
        let text = err.to_string();
        assert!(text.contains("4014"));
        assert!(text.contains("MESSAGE CONTENT INTENT"));
        assert!(text.contains("developer"));
    }

    #[test]
    fn a_close_without_a_status_code_reconnects_and_resumes() {
        assert!(matches!(
            closed(None),
            Ended::Reconnect {
                resumable: true,
                ..
            }
        ));
        assert!(matches!(
            closed(Some(&frame(4009))),
            Ended::Reconnect {
                resumable: false,
                ..
            }
        ));
        assert!(matches!(
            closed(Some(&frame(4004))),
            Ended::Fatal(DiscordError::InvalidToken)
        ));
    }

    #[test]
    fn the_gateway_url_names_version_and_encoding() {
        assert_eq!(
            gateway_url("wss://gateway.discord.gg/"),
            "wss://gateway.discord.gg/?v=10&encoding=json"
        );
    }

    #[test]
    fn the_token_is_sent_without_its_prefix() {
        assert_eq!(raw_token(&SecretString::from("Bot abc.def")), "abc.def");
        assert_eq!(raw_token(&SecretString::from("abc.def")), "abc.def");
    }
}
