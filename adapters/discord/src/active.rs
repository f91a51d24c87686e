//! The channels the bot is active in: [`ActiveChannels`] remembers, for each
//! channel (DM, server channel or thread) where a message reached the core,
//! the last message id seen there, so that after the gateway lost its session
//! the messages sent since can be fetched.
//!
//! Kept in memory only: after a restart nothing is remembered, and messages
//! sent while the process was down are not fetched.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use serenity::model::id::{ChannelId, GuildId, MessageId};

/// How many channels are remembered; the one activated longest ago is
/// forgotten first.
pub(crate) const REMEMBERED_CHANNELS: usize = 256;

/// One active channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Active {
    /// The newest message seen in the channel.
    pub(crate) last_seen: MessageId,
    /// The server the channel belongs to; `None` for a DM.
    pub(crate) guild_id: Option<GuildId>,
}

/// Active channels and the last message seen in each.
#[derive(Debug)]
pub(crate) struct ActiveChannels {
    /// A std mutex: held for a map update, never across an await.
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    channels: HashMap<ChannelId, Active>,
    order: VecDeque<ChannelId>,
    capacity: usize,
}

impl Default for ActiveChannels {
    fn default() -> Self {
        Self::with_capacity(REMEMBERED_CHANNELS)
    }
}

impl ActiveChannels {
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        Self {
            inner: Mutex::new(Inner {
                channels: HashMap::new(),
                order: VecDeque::new(),
                capacity,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Marks `channel` active, having seen `message` in it.
    pub(crate) fn activate(
        &self,
        channel: ChannelId,
        guild_id: Option<GuildId>,
        message: MessageId,
    ) {
        let mut inner = self.lock();
        if let Some(active) = inner.channels.get_mut(&channel) {
            active.last_seen = active.last_seen.max(message);
            return;
        }
        inner.channels.insert(
            channel,
            Active {
                last_seen: message,
                guild_id,
            },
        );
        inner.order.push_back(channel);
        while inner.order.len() > inner.capacity {
            if let Some(oldest) = inner.order.pop_front() {
                inner.channels.remove(&oldest);
            }
        }
    }

    /// Whether `channel` is a DM the bot is active in (a channel not
    /// remembered, e.g. after a restart, is not known to be one).
    pub(crate) fn is_dm(&self, channel: ChannelId) -> bool {
        self.lock()
            .channels
            .get(&channel)
            .is_some_and(|active| active.guild_id.is_none())
    }

    /// Records that `message` was seen in `channel` (no effect unless the
    /// channel is active).
    pub(crate) fn seen(&self, channel: ChannelId, message: MessageId) {
        if let Some(active) = self.lock().channels.get_mut(&channel) {
            active.last_seen = active.last_seen.max(message);
        }
    }

    /// Every active channel with its last seen message.
    pub(crate) fn snapshot(&self) -> Vec<(ChannelId, Active)> {
        let inner = self.lock();
        inner
            .order
            .iter()
            .filter_map(|channel| {
                inner
                    .channels
                    .get(channel)
                    .map(|active| (*channel, *active))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_seen_id_only_moves_forward() {
        let channels = ActiveChannels::default();
        let dm = ChannelId::new(5);
        channels.seen(dm, MessageId::new(1));
        assert!(channels.snapshot().is_empty(), "not active yet");

        channels.activate(dm, None, MessageId::new(10));
        channels.seen(dm, MessageId::new(12));
        channels.seen(dm, MessageId::new(11));

        let [(channel, active)] = channels.snapshot().try_into().expect("one channel");
        assert_eq!(channel, dm);
        assert_eq!(active.last_seen, MessageId::new(12));
        assert_eq!(active.guild_id, None);
    }

    #[test]
    fn the_channel_activated_longest_ago_is_forgotten() {
        let channels = ActiveChannels::with_capacity(2);
        for id in 1..=3 {
            channels.activate(
                ChannelId::new(id),
                Some(GuildId::new(9)),
                MessageId::new(id),
            );
        }
        let kept: Vec<u64> = channels.snapshot().iter().map(|(c, _)| c.get()).collect();
        assert_eq!(kept, [2, 3]);
    }
}
