//! What the gateway does with each message: [`InboundHandler`] normalises it,
//! optionally opens a conversation thread, and submits it to the core.
//!
//! Button presses (`INTERACTION_CREATE`) go to [`crate::interaction`],
//! which answers them within Discord's deadline.
//!
//! It also remembers the channels the bot is active in ([`ActiveChannels`])
//! and, after the gateway had to start a new session, fetches the messages
//! missed there ([`InboundHandler::catch_up`]).
//!
//! The handler never runs a turn: the core records and queues the message and
//! returns, so a long turn blocks neither other channels nor a `/stop` in the
//! same channel (serenity also dispatches each event on its own task).

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serenity::builder::CreateThread;
use serenity::http::{LightMethod, Request, Route};
use serenity::model::channel::{AutoArchiveDuration, GuildChannel, Message};
use serenity::model::id::{ChannelId, MessageId, UserId};
use switchboard_contract::backoff::{self, Wait};
use switchboard_contract::{
    ChatId, ChatKind, InboundMessage, InboundSink, MediaFetcher, Submitted,
};
use tokio_util::sync::CancellationToken;

use crate::active::ActiveChannels;
use crate::error::DiscordError;
use crate::interaction::Interactions;
use crate::media::DiscordFile;
use crate::normalise::{Normalised, Skip, account_id, normalise};
use crate::press::Interaction;
use crate::rest::{Bucket, Rest, RestError};
use crate::settings::DiscordSettings;

/// How many auto-opened threads are remembered as needing no mention; older
/// ones need a mention again (as do all after a restart).
const REMEMBERED_THREADS: usize = 4096;

/// Discord's limit on a thread name, in characters.
const THREAD_NAME_LIMIT: usize = 100;

/// Messages asked for per page when catching up (Discord's maximum).
const CATCH_UP_PAGE: usize = 100;

/// Pages fetched per channel when catching up; older missed messages are
/// left (a channel that busy is not a conversation to answer in bulk).
const CATCH_UP_PAGES: usize = 5;

/// Rate-limit waits tolerated per channel when catching up.
const CATCH_UP_RATE_LIMITS: usize = 3;

/// How far back a catch-up looks: a message older than this is left
/// unanswered, as an answer hours late would be read out of context.
const CATCH_UP_MAX_AGE: Duration = Duration::from_secs(6 * 3600);

/// Discord's epoch (2015-01-01), in milliseconds since the Unix epoch: a
/// snowflake's top 42 bits are its time in milliseconds since then.
const DISCORD_EPOCH_MS: u64 = 1_420_070_400_000;

/// The smallest message id of a message sent at `at` or later.
fn first_id_at(at: SystemTime) -> MessageId {
    let ms = at.duration_since(UNIX_EPOCH).map_or(0, |since| {
        u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
    });
    MessageId::new(ms.saturating_sub(DISCORD_EPOCH_MS).max(1) << 22)
}

/// What became of one received message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handled {
    /// Handed to the core, which answered this.
    Submitted(Submitted),
    /// Not submitted (own, bot, webhook, system or empty message).
    Skipped(Skip),
    /// Received before the gateway's READY told us the bot's id; dropped.
    NotReady,
    /// Normalising or submitting failed; logged.
    Failed,
}

/// Normalises gateway messages and submits them to the core. Cheap to clone.
#[derive(Clone)]
pub struct InboundHandler {
    inner: Arc<Inner>,
}

struct Inner {
    sink: Arc<dyn InboundSink>,
    /// Answers button presses.
    interactions: Interactions,
    rest: Rest,
    /// Downloads attachments from the CDN (no bot token needed).
    files: reqwest::Client,
    bot_id: OnceLock<UserId>,
    /// Channels with a conversation, and the last message seen in each.
    active: Arc<ActiveChannels>,
    free_response: HashSet<ChannelId>,
    auto_thread: bool,
    /// Threads this process opened. A std mutex: held for a set lookup or
    /// insert, never across an await.
    opened_threads: Mutex<RecentChannels>,
}

impl std::fmt::Debug for InboundHandler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InboundHandler")
            .field("bot_id", &self.inner.bot_id.get())
            .field("free_response", &self.inner.free_response)
            .field("auto_thread", &self.inner.auto_thread)
            .finish_non_exhaustive()
    }
}

impl InboundHandler {
    /// A handler submitting to `sink`; `rest` opens threads and fetches
    /// missed messages.
    ///
    /// # Errors
    /// [`DiscordError::InvalidSetting`] for a free-response channel that is
    /// not a channel id.
    pub fn new(
        sink: Arc<dyn InboundSink>,
        rest: Rest,
        settings: &DiscordSettings,
    ) -> Result<Self, DiscordError> {
        Ok(Self {
            inner: Arc::new(Inner {
                interactions: Interactions {
                    sink: Arc::clone(&sink),
                    rest: rest.clone(),
                },
                sink,
                rest,
                files: reqwest::Client::new(),
                bot_id: OnceLock::new(),
                active: Arc::new(ActiveChannels::default()),
                free_response: settings.free_response_channel_ids()?.into_iter().collect(),
                auto_thread: settings.auto_thread,
                opened_threads: Mutex::new(RecentChannels::new(REMEMBERED_THREADS)),
            }),
        })
    }

    /// The channels this handler has seen conversations in, shared with
    /// the sender (which needs to know a DM from a server channel).
    pub(crate) fn active_channels(&self) -> Arc<ActiveChannels> {
        Arc::clone(&self.inner.active)
    }

    /// Records the bot's user id (from READY). The first id wins: a token
    /// belongs to one bot.
    pub fn connected_as(&self, bot_id: UserId) {
        if self.inner.bot_id.set(bot_id).is_err() && self.inner.bot_id.get() != Some(&bot_id) {
            tracing::warn!(%bot_id, "READY reported a different bot id; keeping the first");
        }
    }

    /// The bot's user id, once connected.
    #[must_use]
    pub fn bot_id(&self) -> Option<UserId> {
        self.inner.bot_id.get().copied()
    }

    /// Handles one `INTERACTION_CREATE`: a press of one of the core's
    /// buttons goes to the core; every interaction is answered.
    #[tracing::instrument(skip_all, fields(interaction_id = %interaction.id))]
    pub(crate) async fn on_interaction(&self, interaction: Interaction) {
        // The application's id is the bot's user id; READY says so first.
        let bot = self
            .bot_id()
            .unwrap_or_else(|| UserId::new(interaction.application_id.get()));
        let account = match account_id(bot) {
            Ok(account) => account,
            Err(err) => {
                tracing::warn!(error = %err, "no account for a Discord interaction");
                return;
            }
        };
        self.inner.interactions.handle(interaction, &account).await;
    }

    /// Handles one `MESSAGE_CREATE`: normalise, maybe open a thread, submit.
    #[tracing::instrument(skip_all, fields(message_id = %msg.id, channel_id = %msg.channel_id))]
    pub async fn on_message(&self, msg: &Message) -> Handled {
        let Some(bot_id) = self.bot_id() else {
            tracing::warn!("message before READY dropped");
            return Handled::NotReady;
        };
        self.inner.active.seen(msg.channel_id, msg.id);
        let free_response = self.inner.free_response.contains(&msg.channel_id)
            || self.opened_threads().contains(msg.channel_id);
        let mut inbound = match normalise(msg, bot_id, free_response) {
            Ok(Normalised::Message(inbound)) => inbound,
            Ok(Normalised::Skipped(reason)) => {
                tracing::debug!(?reason, "message skipped");
                return Handled::Skipped(reason);
            }
            Err(err) => {
                tracing::warn!(error = %err, "message not normalised");
                return Handled::Failed;
            }
        };
        for file in &mut inbound.attachments {
            if let Some(url) = &file.url {
                file.fetch = Some(MediaFetcher::new(DiscordFile {
                    client: self.inner.files.clone(),
                    url: url.clone(),
                    size: file.size.unwrap_or(0),
                }));
            }
        }
        let inbound = if self.inner.auto_thread && !free_response {
            self.move_to_thread(msg, inbound).await
        } else {
            inbound
        };
        let chat = ids_channel(&inbound.chat);
        match self.inner.sink.submit(*inbound).await {
            Ok(outcome) => {
                tracing::debug!(?outcome, "message submitted");
                if matches!(outcome, Submitted::Accepted | Submitted::Duplicate) {
                    self.inner
                        .active
                        .activate(msg.channel_id, msg.guild_id, msg.id);
                    if let Some(thread) = chat.filter(|thread| *thread != msg.channel_id) {
                        self.inner.active.activate(thread, msg.guild_id, msg.id);
                    }
                }
                Handled::Submitted(outcome)
            }
            Err(err) => {
                tracing::error!(error = %err, "message not accepted by the core");
                Handled::Failed
            }
        }
    }

    /// Auto-thread: a mention in a server channel opens a public thread on
    /// the message, and the conversation (its chat) moves there. In a
    /// thread, or when Discord refuses, the message stays where it is.
    async fn move_to_thread(
        &self,
        msg: &Message,
        mut inbound: Box<InboundMessage>,
    ) -> Box<InboundMessage> {
        if inbound.chat_kind != ChatKind::Group || !inbound.mentions_bot {
            return inbound;
        }
        let name = thread_name(&inbound.text);
        let builder = CreateThread::new(name).auto_archive_duration(AutoArchiveDuration::OneDay);
        let thread = match self.create_thread(msg, &builder).await {
            Ok(thread) => thread,
            Err(err) => {
                // Typically: the channel is itself a thread or a DM-like
                // channel, or the bot lacks Create Public Threads.
                tracing::info!(error = %err, "no thread opened; answering in the channel");
                return inbound;
            }
        };
        let Ok(chat) = ChatId::parse(thread.id.to_string()) else {
            return inbound;
        };
        self.opened_threads().insert(thread.id);
        tracing::info!(thread_id = %thread.id, "conversation thread opened");
        inbound.chat = chat;
        // The original message sits in the parent channel; a reply reference
        // across channels would not render, and the thread shows it on top.
        inbound.message_id = None;
        inbound
    }

    /// `POST /channels/{id}/messages/{id}/threads`; a short rate limit is
    /// waited out once.
    async fn create_thread(
        &self,
        msg: &Message,
        builder: &CreateThread<'_>,
    ) -> Result<GuildChannel, RestError> {
        let body =
            serde_json::to_vec(builder).map_err(|err| RestError::Invalid(err.to_string()))?;
        let mut waited = false;
        loop {
            let request = Request::new(
                Route::ChannelMessageThreads {
                    channel_id: msg.channel_id,
                    message_id: msg.id,
                },
                LightMethod::Post,
            )
            .body(Some(body.clone()));
            match self
                .inner
                .rest
                .call(Bucket::CreateThread, msg.channel_id, request)
                .await
            {
                Err(RestError::RateLimited(wait))
                    if !waited && wait <= crate::sender::INLINE_RETRY_LIMIT =>
                {
                    waited = true;
                    tokio::time::sleep(wait).await;
                }
                other => return other,
            }
        }
    }

    /// Fetches and handles the messages missed in every active channel
    /// since the last one seen there (`GET /channels/{id}/messages?after=`),
    /// oldest first, at most [`CATCH_UP_PAGES`] pages of [`CATCH_UP_PAGE`]
    /// and none older than [`CATCH_UP_MAX_AGE`]; the core drops any it
    /// already has by event id. Called
    /// after the gateway started a new session (a RESUME would have replayed
    /// them). Rate limits are waited out unless `shutdown` comes first.
    pub async fn catch_up(&self, shutdown: &CancellationToken) {
        let channels = self.inner.active.snapshot();
        if channels.is_empty() {
            return;
        }
        let mut handled = 0usize;
        for (channel, active) in &channels {
            match self.catch_up_channel(*channel, *active, shutdown).await {
                Ok(count) => handled += count,
                Err(err) => {
                    tracing::warn!(%channel, error = %err, "could not fetch missed messages");
                }
            }
            if shutdown.is_cancelled() {
                return;
            }
        }
        tracing::info!(
            channels = channels.len(),
            messages = handled,
            "caught up on messages sent while the gateway was away"
        );
    }

    async fn catch_up_channel(
        &self,
        channel: ChannelId,
        active: crate::active::Active,
        shutdown: &CancellationToken,
    ) -> Result<usize, RestError> {
        let oldest = first_id_at(SystemTime::now() - CATCH_UP_MAX_AGE);
        let mut after = active.last_seen.max(oldest);
        let mut handled = 0;
        let mut pages = 0;
        let mut rate_limits = 0;
        while pages < CATCH_UP_PAGES {
            let request = Request::new(
                Route::ChannelMessages {
                    channel_id: channel,
                },
                LightMethod::Get,
            )
            .params(Some(vec![
                ("after", after.to_string()),
                ("limit", CATCH_UP_PAGE.to_string()),
            ]));
            let mut page: Vec<Message> = match self
                .inner
                .rest
                .call(Bucket::GetMessages, channel, request)
                .await
            {
                Ok(page) => page,
                Err(RestError::RateLimited(wait)) if rate_limits < CATCH_UP_RATE_LIMITS => {
                    rate_limits += 1;
                    if backoff::wait(wait, shutdown).await == Wait::Cancelled {
                        return Ok(handled);
                    }
                    continue;
                }
                Err(err) => return Err(err),
            };
            pages += 1;
            let full = page.len() >= CATCH_UP_PAGE;
            page.sort_by_key(|msg| msg.id);
            let floor = after;
            for mut msg in page.into_iter().filter(|msg| msg.id > floor) {
                after = msg.id;
                // REST messages carry no guild id; the gateway's did.
                msg.guild_id = msg.guild_id.or(active.guild_id);
                msg.channel_id = channel;
                if matches!(self.on_message(&msg).await, Handled::Submitted(_)) {
                    handled += 1;
                }
            }
            if !full || shutdown.is_cancelled() {
                break;
            }
        }
        Ok(handled)
    }

    fn opened_threads(&self) -> std::sync::MutexGuard<'_, RecentChannels> {
        // A poisoned lock only means another task panicked mid-insert; the
        // set is still usable.
        self.inner
            .opened_threads
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn ids_channel(chat: &ChatId) -> Option<ChannelId> {
    crate::ids::channel_id(chat.as_str())
}

/// A thread name from the first line of the message, within Discord's limit.
fn thread_name(text: &str) -> String {
    let first_line = text.lines().map(str::trim).find(|line| !line.is_empty());
    match first_line {
        Some(line) => line.chars().take(THREAD_NAME_LIMIT).collect(),
        None => "Conversation".to_owned(),
    }
}

/// A set of channel ids that forgets the oldest beyond its capacity.
#[derive(Debug)]
struct RecentChannels {
    order: VecDeque<ChannelId>,
    members: HashSet<ChannelId>,
    capacity: usize,
}

impl RecentChannels {
    fn new(capacity: usize) -> Self {
        Self {
            order: VecDeque::new(),
            members: HashSet::new(),
            capacity,
        }
    }

    fn contains(&self, id: ChannelId) -> bool {
        self.members.contains(&id)
    }

    fn insert(&mut self, id: ChannelId) {
        if !self.members.insert(id) {
            return;
        }
        self.order.push_back(id);
        while self.order.len() > self.capacity {
            if let Some(oldest) = self.order.pop_front() {
                self.members.remove(&oldest);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_id_of_a_moment_is_its_snowflake() {
        // Discord's documented example: 175928847299117063 was created at
        // 1462015105796 ms (2016-04-30 11:18:25.796 UTC).
        let at = UNIX_EPOCH + Duration::from_millis(1_462_015_105_796);
        let first = first_id_at(at).get();
        assert!(first <= 175_928_847_299_117_063);
        assert_eq!(first >> 22, 175_928_847_299_117_063 >> 22);
        assert!(first_id_at(UNIX_EPOCH).get() > 0, "never the zero id");
    }

    #[test]
    fn recent_channels_forget_the_oldest() {
        let mut recent = RecentChannels::new(2);
        for id in 1..=3 {
            recent.insert(ChannelId::new(id));
        }
        assert!(!recent.contains(ChannelId::new(1)));
        assert!(recent.contains(ChannelId::new(2)));
        assert!(recent.contains(ChannelId::new(3)));
    }

    #[test]
    fn a_thread_is_named_after_the_first_line() {
        assert_eq!(
            thread_name("\n  explain lifetimes \nplease"),
            "explain lifetimes"
        );
        assert_eq!(thread_name(&"é".repeat(300)).chars().count(), 100);
        assert_eq!(thread_name(""), "Conversation");
    }
}
