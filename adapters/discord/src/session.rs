//! One gateway shard on `twilight-gateway`: [`GatewayShard`] runs a
//! [`twilight_gateway::Shard`] (which speaks the protocol: HELLO, IDENTIFY
//! through the shared identify queue, RESUME, heartbeats with zombie
//! detection, op 7/9, close codes) and hands each `MESSAGE_CREATE` to the
//! [`InboundHandler`].
//!
//! Every way a connection can end leads to a reconnect unless the close code
//! is fatal (4004, 4010–4014: twilight ends the shard's stream, and the close
//! code becomes a [`DiscordError`]). Twilight reconnects and resumes when it
//! can (after 4007/4009 Discord refuses the RESUME and twilight identifies).
//! Around it:
//!
//! - after a close (with or without a status code, or a transport error) the
//!   shard is not read for a capped, jittered backoff (from 1 s, doubling
//!   until a session is up again), so a gateway that keeps closing is not
//!   hammered; twilight then completes the close and reconnects;
//! - a failed connect drops the shard and starts a new one (carrying the
//!   session, so it still resumes) after the same backoff, in place of
//!   twilight's own (which grows to 4 minutes);
//! - a connection that goes silent (no HELLO within [`HELLO_TIMEOUT`], then
//!   nothing for two heartbeat intervals, or a close that never completes) is
//!   dropped the same way: twilight has no timeout of its own there;
//! - after READY (a new session, which replays nothing) the handler fetches
//!   what was missed ([`InboundHandler::catch_up`]); after RESUMED Discord
//!   replays the missed events itself;
//! - shutdown sends a 1000 close and waits at most [`CLOSE_TIMEOUT`] for the
//!   answer, then drops the shard.
//!
//! Gateway messages are read raw and `MESSAGE_CREATE` is read into serenity's
//! [`Message`], the model the rest of the adapter uses.

use std::error::Error as _;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use serenity::model::channel::Message;
use serenity::model::id::UserId;
use switchboard_contract::backoff::{self, Backoff, Retries, Wait};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use twilight_gateway::error::ReceiveMessageErrorType;
use twilight_gateway::queue::InMemoryQueue;
use twilight_gateway::{
    CloseFrame, Config, ConfigBuilder, Intents, Message as GatewayMessage, Shard, ShardId,
    ShardState,
};
use twilight_model::gateway::event::GatewayEventDeserializer;
use twilight_model::gateway::payload::outgoing::identify::IdentifyProperties;

use crate::error::DiscordError;
use crate::gateway::ShardLinks;
use crate::inbound::InboundHandler;
use crate::press::Interaction;

/// Between a connection that ended without a session (or a failed connect)
/// and the next attempt: from 1 s, doubling while it keeps failing, at most a
/// minute; back to the start once a session is up.
const RECONNECT: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));

/// How long after a connection (re)starts HELLO must arrive: twilight's
/// connect timeout (10 s) plus the HELLO itself.
pub(crate) const HELLO_TIMEOUT: Duration = Duration::from_secs(15);

/// How long closing on shutdown may take before the shard is dropped.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);

/// The gateway opcodes read here.
const OP_DISPATCH: u8 = 0;
const OP_HELLO: u8 = 10;

/// What a shard needs to connect.
pub(crate) struct ShardConfig {
    /// The bot token (sent in IDENTIFY and RESUME, never logged).
    pub(crate) token: SecretString,
    /// The gateway URL from `GET /gateway/bot`.
    pub(crate) url: String,
    /// The intents' bits.
    pub(crate) intents: u64,
    /// This shard's number and the shard count.
    pub(crate) shard: [u32; 2],
    /// The identify queue, shared by every shard of the bot.
    pub(crate) queue: InMemoryQueue,
}

/// One gateway shard, connected again and again until shutdown.
pub(crate) struct GatewayShard {
    id: ShardId,
    /// The shard configuration without a session; each new
    /// [`twilight_gateway::Shard`] starts from it.
    config: Config,
    handler: InboundHandler,
    /// Told when the connection ends and when a session is up again.
    links: Option<Arc<ShardLinks>>,
}

/// What one item from the shard's stream means for the loop.
#[derive(Debug)]
enum Next {
    /// Keep reading.
    Read,
    /// Stop reading for a backoff, then let twilight reconnect.
    Pause(String),
    /// Drop this shard and start a new one after a backoff.
    Restart(String),
    /// The shard closed for good.
    Fatal(DiscordError),
}

/// The state of the connection as seen from outside twilight.
struct Watch {
    /// When the shard last yielded anything.
    last_heard: Instant,
    /// How long it may stay silent.
    silence: Duration,
    /// The last close frame received (or made up for a transport error).
    last_close: Option<CloseFrame<'static>>,
}

impl Watch {
    fn new() -> Self {
        Self {
            last_heard: Instant::now(),
            silence: HELLO_TIMEOUT,
            last_close: None,
        }
    }

    fn deadline(&self) -> Instant {
        self.last_heard + self.silence
    }
}

#[derive(Deserialize)]
struct Payload<T> {
    d: T,
}

#[derive(Deserialize)]
struct Hello {
    heartbeat_interval: u64,
}

#[derive(Deserialize)]
struct Ready {
    user: ReadyUser,
}

#[derive(Deserialize)]
struct ReadyUser {
    id: UserId,
}

impl GatewayShard {
    /// # Errors
    /// [`DiscordError::Gateway`] when the shard number is not below the
    /// shard count.
    pub(crate) fn new(config: ShardConfig, handler: InboundHandler) -> Result<Self, DiscordError> {
        let [number, total] = config.shard;
        let id = ShardId::new_checked(number, total).ok_or_else(|| {
            DiscordError::Gateway(format!("shard {number} of {total} does not exist"))
        })?;
        let config = ConfigBuilder::new(
            raw_token(&config.token).to_owned(),
            Intents::from_bits_truncate(config.intents),
        )
        .proxy_url(config.url.trim_end_matches('/').to_owned())
        .queue(config.queue)
        .identify_properties(IdentifyProperties::new(
            "switchboard",
            "switchboard",
            std::env::consts::OS,
        ))
        .build();
        Ok(Self {
            id,
            config,
            handler,
            links: None,
        })
    }

    /// This shard, reporting its connection to `links`.
    pub(crate) fn with_links(mut self, links: Option<Arc<ShardLinks>>) -> Self {
        self.links = links;
        self
    }

    /// A new twilight shard, resuming `from`'s session if it had one.
    fn shard(&self, from: Option<&Shard>) -> Shard {
        let mut config = ConfigBuilder::from(self.config.clone());
        if let Some(session) = from.and_then(Shard::session) {
            config = config.session(session.clone());
            if let Some(url) = from.and_then(Shard::resume_url) {
                config = config.resume_url(url.to_owned());
            }
        }
        Shard::with_config(self.id, config.build())
    }

    /// Connects and reconnects until `shutdown` (then `Ok`) or a fatal
    /// close code.
    pub(crate) async fn run(self, shutdown: CancellationToken) -> Result<(), DiscordError> {
        let mut shard = self.shard(None);
        let mut watch = Watch::new();
        let mut retries = RECONNECT.retries();
        loop {
            let next = tokio::select! {
                biased;
                () = shutdown.cancelled() => {
                    close(shard).await;
                    return Ok(());
                }
                () = tokio::time::sleep_until(watch.deadline()) => {
                    Next::Restart(format!("nothing heard from the gateway for {:?}", watch.silence))
                }
                item = shard.next() => self.on_item(item, &mut watch, &mut retries, &shutdown),
            };
            let (reason, rebuild) = match next {
                Next::Read => continue,
                Next::Fatal(err) => return Err(err),
                Next::Pause(reason) => (reason, false),
                Next::Restart(reason) => (reason, true),
            };
            if let Some(links) = &self.links {
                links.down(self.id.number(), &reason);
            }
            let delay = retries.next_delay(None);
            tracing::warn!(
                shard = self.id.number(),
                %reason,
                resume = shard.session().is_some(),
                backoff = ?delay,
                rebuilt = rebuild,
                "Discord gateway connection ended; reconnecting"
            );
            if rebuild {
                // Replacing the shard drops the old one's connection, if
                // any; the new one resumes its session.
                shard = self.shard(Some(&shard));
            }
            if backoff::wait(delay, &shutdown).await == Wait::Cancelled {
                return Ok(());
            }
            if rebuild {
                watch = Watch::new();
            } else {
                watch.last_heard = Instant::now();
            }
        }
    }

    /// Handles one item from the shard's stream.
    fn on_item(
        &self,
        item: Option<Result<GatewayMessage, twilight_gateway::error::ReceiveMessageError>>,
        watch: &mut Watch,
        retries: &mut Retries,
        shutdown: &CancellationToken,
    ) -> Next {
        watch.last_heard = Instant::now();
        match item {
            // Twilight ends the stream after a fatal close code only.
            None => Next::Fatal(fatal(watch.last_close.as_ref())),
            Some(Err(err)) => {
                // The source only: a deserializing error's own text carries
                // the whole payload (message contents included).
                let cause = err
                    .source()
                    .map_or_else(|| "unknown".to_owned(), ToString::to_string);
                if matches!(err.kind(), ReceiveMessageErrorType::Reconnect) {
                    return Next::Restart(format!("could not connect: {cause}"));
                }
                tracing::warn!(error = %cause, "unreadable gateway payload skipped");
                Next::Read
            }
            Some(Ok(GatewayMessage::Close(frame))) => {
                let reason = describe(frame.as_ref());
                watch.last_close = frame;
                watch.silence = HELLO_TIMEOUT;
                if is_fatal(watch.last_close.as_ref()) {
                    // The stream ends next; `None` above reports it.
                    return Next::Read;
                }
                Next::Pause(reason)
            }
            Some(Ok(GatewayMessage::Text(text))) => {
                self.on_payload(&text, watch, retries, shutdown);
                Next::Read
            }
        }
    }

    /// Reads what the adapter needs from one gateway payload; twilight has
    /// already acted on it.
    fn on_payload(
        &self,
        text: &str,
        watch: &mut Watch,
        retries: &mut Retries,
        shutdown: &CancellationToken,
    ) {
        let Some(event) = GatewayEventDeserializer::from_json(text) else {
            return;
        };
        match (event.op(), event.event_type()) {
            (OP_HELLO, _) => {
                if let Ok(hello) = serde_json::from_str::<Payload<Hello>>(text) {
                    // Twilight beats at this interval and notices a missing
                    // ACK; two intervals of silence mean it is stuck.
                    let beat = Duration::from_millis(hello.d.heartbeat_interval.max(1000));
                    watch.silence = beat.saturating_mul(2);
                }
            }
            (OP_DISPATCH, Some("READY")) => {
                retries.reset();
                let ready = match serde_json::from_str::<Payload<Ready>>(text) {
                    Ok(ready) => ready.d,
                    Err(err) => {
                        tracing::warn!(error = %err, "unreadable READY");
                        return;
                    }
                };
                tracing::info!(
                    shard = self.id.number(),
                    bot_id = %ready.user.id,
                    "connected to Discord (new session)"
                );
                self.handler.connected_as(ready.user.id);
                if let Some(links) = &self.links {
                    links.up(self.id.number());
                }
                // A new session replays nothing: fetch what was missed.
                let handler = self.handler.clone();
                let shutdown = shutdown.clone();
                tokio::spawn(async move { handler.catch_up(&shutdown).await });
            }
            (OP_DISPATCH, Some("RESUMED")) => {
                retries.reset();
                tracing::info!(shard = self.id.number(), "Discord session resumed");
                if let Some(links) = &self.links {
                    links.up(self.id.number());
                }
            }
            (OP_DISPATCH, Some("MESSAGE_CREATE")) => {
                match serde_json::from_str::<Payload<Message>>(text) {
                    Ok(message) => {
                        let handler = self.handler.clone();
                        // Own task: a slow submit must not hold up reading
                        // (and with it, heartbeats).
                        tokio::spawn(async move { handler.on_message(&message.d).await });
                    }
                    Err(err) => tracing::warn!(error = %err, "unreadable MESSAGE_CREATE skipped"),
                }
            }
            (OP_DISPATCH, Some("INTERACTION_CREATE")) => {
                match serde_json::from_str::<Payload<Interaction>>(text) {
                    Ok(interaction) => {
                        let handler = self.handler.clone();
                        // Own task: answering waits for the core and Discord.
                        tokio::spawn(async move { handler.on_interaction(interaction.d).await });
                    }
                    // Serde's message names the field, never its value.
                    Err(err) => {
                        tracing::warn!(error = %err, "unreadable INTERACTION_CREATE skipped")
                    }
                }
            }
            _ => {}
        }
    }
}

/// Closes `shard` with 1000 if it is connected, waiting at most
/// [`CLOSE_TIMEOUT`] for the gateway's answer; then drops it.
async fn close(mut shard: Shard) {
    if matches!(
        shard.state(),
        ShardState::Disconnected { .. } | ShardState::FatallyClosed
    ) {
        return;
    }
    shard.close(CloseFrame::NORMAL);
    let answered = async {
        while let Some(item) = shard.next().await {
            if matches!(item, Ok(GatewayMessage::Close(_)) | Err(_)) {
                break;
            }
        }
    };
    // Not answering in time changes nothing: the shard is dropped.
    let _ = tokio::time::timeout(CLOSE_TIMEOUT, answered).await;
}

/// The token as the gateway wants it: without a `Bot ` prefix (twilight
/// adds it).
fn raw_token(token: &SecretString) -> &str {
    let token = token.expose_secret().trim();
    token.strip_prefix("Bot ").unwrap_or(token)
}

/// A close frame for the log.
fn describe(frame: Option<&CloseFrame<'_>>) -> String {
    match frame {
        None => "closed without a status code".to_owned(),
        Some(frame) if frame.code == 1006 => "the connection failed".to_owned(),
        Some(frame) => format!("closed with code {} ({})", frame.code, frame.reason),
    }
}

/// Whether a close code stops the shard for good (twilight's own list:
/// `CloseCode::can_reconnect` is false).
fn is_fatal(frame: Option<&CloseFrame<'_>>) -> bool {
    frame
        .map(|frame| twilight_model::gateway::CloseCode::try_from(frame.code))
        .is_some_and(|code| code.is_ok_and(|code| !code.can_reconnect()))
}

/// The error for a shard twilight closed for good after `frame`.
fn fatal(frame: Option<&CloseFrame<'_>>) -> DiscordError {
    match frame.map(|frame| frame.code) {
        Some(4004) => DiscordError::InvalidToken,
        Some(4014) => DiscordError::PrivilegedIntentDisabled,
        _ => DiscordError::Gateway(describe(frame)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(code: u16) -> CloseFrame<'static> {
        CloseFrame::new(code, "")
    }

    #[test]
    fn close_code_4014_explains_how_to_enable_the_intent() {
        assert!(is_fatal(Some(&frame(4014))));
        let err = fatal(Some(&frame(4014)));
        assert!(matches!(err, DiscordError::PrivilegedIntentDisabled));
        let text = err.to_string();
        assert!(text.contains("4014"));
        assert!(text.contains("MESSAGE CONTENT INTENT"));
        assert!(text.contains("developer"));
    }

    #[test]
    fn only_the_fatal_close_codes_stop_the_shard() {
        assert!(!is_fatal(None), "no status code: reconnect");
        assert!(!is_fatal(Some(&frame(1006))), "transport error: reconnect");
        assert!(!is_fatal(Some(&frame(4000))));
        assert!(!is_fatal(Some(&frame(4007))), "invalid seq: new session");
        assert!(!is_fatal(Some(&frame(4009))), "timed out: new session");
        for code in [4004, 4010, 4011, 4012, 4013, 4014] {
            assert!(is_fatal(Some(&frame(code))), "{code}");
        }
        assert!(matches!(
            fatal(Some(&frame(4004))),
            DiscordError::InvalidToken
        ));
        assert!(fatal(Some(&frame(4013))).to_string().contains("4013"));
    }

    #[test]
    fn the_token_is_given_without_its_prefix() {
        assert_eq!(raw_token(&SecretString::from("Bot abc.def")), "abc.def");
        assert_eq!(raw_token(&SecretString::from("abc.def")), "abc.def");
    }
}
