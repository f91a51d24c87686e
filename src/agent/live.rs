//! Live events of running turns: what a turn's subscribers see while it
//! runs, before its reply is stored.
//!
//! A [`LiveHub`] (one per runner) keeps, per turn (by its inbound message's
//! id), the subscribers that asked to follow it. The runner opens a
//! [`LiveTurn`] for every turn it runs; the agent loop publishes through it:
//! each model call's start ([`LiveEvent::Round`]), its text as it arrives
//! ([`LiveEvent::Text`], [`LiveEvent::Restart`] when a retried call voids
//! the text so far), each tool call as it starts and ends, and the turn's
//! end. The model is called streaming only while someone listens
//! ([`LiveTurn::is_watched`]), so a turn nobody follows sends the very
//! requests it always did.
//!
//! Live events are a view, never the record: they are not stored, a
//! subscriber on another instance than the one running the turn hears none
//! (it still gets the reply, which the runner hands out from the database),
//! and what is stored does not depend on whether anyone listened. This is
//! the path the HTTP API's streamed completions take, and the one platform
//! adapters can use for live replies.

use crate::domain::InboundId;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::mpsc;

/// One thing that happened in a running turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LiveEvent {
    /// A model call of the turn begins (`round` counts from 1); the text
    /// that follows is its answer.
    Round { round: u32 },
    /// The next piece of the current model call's text.
    Text(String),
    /// The current model call failed after sending text and is retried
    /// (or handed to the fallback model): its text so far is void.
    Restart,
    /// A tool call starts, as the model asked for it.
    ToolCall {
        id: String,
        name: String,
        /// The arguments as JSON text (canonical when they parse).
        arguments: String,
    },
    /// A tool call ended; `is_error` when the model is told it failed.
    ToolResult {
        id: String,
        name: String,
        is_error: bool,
    },
    /// The turn ended; its reply follows through the runner.
    Finished,
}

/// The subscribers of one turn.
#[derive(Default)]
struct Channel {
    subscribers: Mutex<Vec<mpsc::UnboundedSender<LiveEvent>>>,
}

impl Channel {
    fn subscribers(&self) -> MutexGuard<'_, Vec<mpsc::UnboundedSender<LiveEvent>>> {
        self.subscribers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// The turns followed on this instance, by inbound message id.
#[derive(Clone, Default)]
pub struct LiveHub {
    turns: Arc<Mutex<HashMap<InboundId, Arc<Channel>>>>,
}

impl fmt::Debug for LiveHub {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LiveHub")
            .field("turns", &self.lock().len())
            .finish()
    }
}

impl LiveHub {
    fn lock(&self) -> MutexGuard<'_, HashMap<InboundId, Arc<Channel>>> {
        self.turns.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Follows the turn of inbound message `inbound_id`, from now on.
    /// Subscribe before the turn is queued to hear all of it.
    pub fn subscribe(&self, inbound_id: InboundId) -> LiveSubscription {
        let (sender, events) = mpsc::unbounded_channel();
        let channel = Arc::clone(self.lock().entry(inbound_id).or_default());
        channel.subscribers().push(sender);
        LiveSubscription {
            hub: self.clone(),
            inbound_id,
            events,
        }
    }

    /// The publisher for a turn about to run here.
    pub fn open(&self, inbound_id: InboundId) -> LiveTurn {
        let channel = Arc::clone(self.lock().entry(inbound_id).or_default());
        LiveTurn { channel }
    }

    /// Ends a turn: its subscribers hear [`LiveEvent::Finished`], then
    /// their subscription ends.
    pub fn close(&self, inbound_id: InboundId) {
        let Some(channel) = self.lock().remove(&inbound_id) else {
            return;
        };
        let mut subscribers = channel.subscribers();
        for subscriber in subscribers.iter() {
            let _ = subscriber.send(LiveEvent::Finished);
        }
        subscribers.clear();
    }

    /// Turns with subscribers or a publisher here (for tests).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops a turn nobody follows any more, unless it runs here.
    fn release(&self, inbound_id: InboundId) {
        let mut turns = self.lock();
        let Some(channel) = turns.get(&inbound_id) else {
            return;
        };
        let mut subscribers = channel.subscribers();
        subscribers.retain(|subscriber| !subscriber.is_closed());
        // One count for the map's own handle: any other is a publisher.
        let unused = subscribers.is_empty() && Arc::strong_count(channel) == 1;
        drop(subscribers);
        if unused {
            turns.remove(&inbound_id);
        }
    }
}

/// The publishing side of one running turn.
#[derive(Clone)]
pub struct LiveTurn {
    channel: Arc<Channel>,
}

impl fmt::Debug for LiveTurn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LiveTurn")
            .field("subscribers", &self.channel.subscribers().len())
            .finish()
    }
}

impl LiveTurn {
    /// Sends `event` to every current subscriber; those gone are dropped.
    pub fn publish(&self, event: LiveEvent) {
        self.channel
            .subscribers()
            .retain(|subscriber| subscriber.send(event.clone()).is_ok());
    }

    /// Whether anyone follows the turn now.
    pub fn is_watched(&self) -> bool {
        self.channel
            .subscribers()
            .iter()
            .any(|subscriber| !subscriber.is_closed())
    }
}

/// A subscriber's view of one turn: its events in order, ending after
/// [`LiveEvent::Finished`] (or never, when the turn runs on another
/// instance: the reply comes through the runner all the same).
pub struct LiveSubscription {
    hub: LiveHub,
    inbound_id: InboundId,
    events: mpsc::UnboundedReceiver<LiveEvent>,
}

impl fmt::Debug for LiveSubscription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LiveSubscription")
            .field("inbound_id", &self.inbound_id)
            .finish_non_exhaustive()
    }
}

impl LiveSubscription {
    /// The next event; `None` once the turn's events have ended.
    pub async fn next(&mut self) -> Option<LiveEvent> {
        self.events.recv().await
    }
}

impl Drop for LiveSubscription {
    fn drop(&mut self) {
        self.events.close();
        self.hub.release(self.inbound_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn subscribers_hear_a_turn_in_order_until_it_closes() {
        let hub = LiveHub::default();
        let mut early = hub.subscribe(InboundId::new(7));
        let turn = hub.open(InboundId::new(7));
        assert!(turn.is_watched());
        turn.publish(LiveEvent::Round { round: 1 });
        let mut late = hub.subscribe(InboundId::new(7));
        turn.publish(LiveEvent::Text("hi".to_owned()));
        hub.close(InboundId::new(7));
        // Published after the close: nobody hears it.
        turn.publish(LiveEvent::Text("lost".to_owned()));
        let mut heard = Vec::new();
        while let Some(event) = early.next().await {
            heard.push(event);
        }
        assert_eq!(
            heard,
            [
                LiveEvent::Round { round: 1 },
                LiveEvent::Text("hi".to_owned()),
                LiveEvent::Finished
            ]
        );
        assert_eq!(late.next().await, Some(LiveEvent::Text("hi".to_owned())));
        assert_eq!(late.next().await, Some(LiveEvent::Finished));
        assert_eq!(late.next().await, None);
        assert!(!turn.is_watched());
        assert!(hub.is_empty());
    }

    #[test]
    fn a_subscription_to_a_turn_run_elsewhere_is_released_when_dropped() {
        let hub = LiveHub::default();
        let subscription = hub.subscribe(InboundId::new(1));
        let other = hub.subscribe(InboundId::new(1));
        assert_eq!(hub.len(), 1);
        drop(subscription);
        assert_eq!(hub.len(), 1, "another subscriber still follows it");
        drop(other);
        assert!(hub.is_empty());

        // A turn running here keeps its entry while subscribers come and go.
        let turn = hub.open(InboundId::new(2));
        drop(hub.subscribe(InboundId::new(2)));
        assert_eq!(hub.len(), 1);
        assert!(!turn.is_watched());
        hub.close(InboundId::new(2));
        assert!(hub.is_empty());
    }
}
