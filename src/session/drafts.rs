//! Live drafts on chat platforms: the reply shown growing while its turn
//! runs.
//!
//! For a turn whose platform shows drafts in its chat
//! ([`PlatformSender::draft_interval`]), the runner follows the turn's live
//! events ([`crate::agent::live`]) with a [`DraftWriter`] in a task of its
//! own: the text of the current model call accumulates, a running tool adds
//! a line ("running calculator…"), and at most once per interval the sender
//! shows what there is ([`PlatformSender::draft`]), the first time one
//! interval after the turn began (a reply quicker than that goes out whole,
//! with no draft before it). A platform that shows
//! drafts as a message says which; its id is recorded with the turn
//! ([`Inbound::record_draft`]) the first time, so the reply, delivered through
//! the outbox like every reply, edits that message instead of adding a second
//! one, even when another instance finishes the turn after a crash.
//!
//! Drafts are best effort: the turn never waits for one (events queue in an
//! unbounded channel), a failed draft is skipped, a platform asking to slow
//! down is given the time it asks for, and after [`FAILURES_TO_GIVE_UP`]
//! failures in a row the writer stops drafting. What is stored never depends
//! on any of it. One window stays open: a crash after the platform created
//! the draft's message and before its id is recorded. Where the platform
//! deduplicates creation by a key (Discord, Feishu), the next instance's
//! draft, made with the turn's key, is that same message; on Telegram a
//! group may then keep the partial message beside the reply.

use crate::domain::InboundId;
use std::sync::Arc;
use std::time::Duration;

use switchboard_contract::{ChatRef, Draft, PlatformSender, SendError};
use tokio::time::Instant;

use crate::agent::live::{LiveEvent, LiveSubscription};
use crate::store::Store;

/// Failed drafts in a row after which a turn's drafts stop (the reply still
/// goes out).
pub const FAILURES_TO_GIVE_UP: u32 = 3;

/// The longest one draft call may take; a slower platform's draft is
/// dropped (the next one carries the newer text anyway).
const DRAFT_TIMEOUT: Duration = Duration::from_secs(10);

/// What the reader sees while the turn runs.
#[derive(Debug, Default)]
struct Shown {
    /// The current model call's text.
    text: String,
    /// A new model call began: its first text replaces the last call's.
    new_round: bool,
    /// The tool running now, if any.
    tool: Option<String>,
}

impl Shown {
    /// Takes one live event in; `true` when what is shown changed.
    fn apply(&mut self, event: LiveEvent) -> bool {
        match event {
            LiveEvent::Round { .. } => {
                self.new_round = true;
                false
            }
            LiveEvent::Text(text) => {
                if text.is_empty() {
                    return false;
                }
                if std::mem::take(&mut self.new_round) {
                    self.text.clear();
                }
                self.text.push_str(&text);
                true
            }
            LiveEvent::Restart => {
                self.text.clear();
                true
            }
            LiveEvent::ToolCall { name, .. } => {
                self.tool = Some(name);
                true
            }
            LiveEvent::ToolResult { .. } => self.tool.take().is_some(),
            LiveEvent::Finished => false,
        }
    }

    /// The draft's Markdown: the text so far and, while a tool runs, a
    /// line naming it. Empty when there is nothing to show yet.
    fn markdown(&self) -> String {
        let text = self.text.trim_end();
        match &self.tool {
            Some(tool) if text.is_empty() => format!("_running {tool}…_"),
            Some(tool) => format!("{text}\n\n_running {tool}…_"),
            None => text.to_owned(),
        }
    }
}

/// Shows one turn's drafts through one platform's sender.
pub struct DraftWriter {
    sender: Arc<dyn PlatformSender>,
    /// The turn's fenced store, where the draft's message is recorded.
    store: Store,
    inbound_id: InboundId,
    interval: Duration,
    draft: Draft,
}

impl DraftWriter {
    /// A writer for the turn of `inbound_id` in `chat`, when the platform
    /// shows drafts there; `message_id` is the draft message an earlier run
    /// of the turn created, if any.
    pub fn new(
        sender: Arc<dyn PlatformSender>,
        store: Store,
        inbound_id: InboundId,
        chat: ChatRef,
        reply_to: Option<String>,
        message_id: Option<String>,
    ) -> Option<Self> {
        let interval = sender.draft_interval(&chat)?;
        Some(Self {
            sender,
            store,
            inbound_id,
            interval,
            draft: Draft {
                chat,
                reply_to,
                draft_id: inbound_id.get().max(1),
                // Set before the first draft is shown.
                key: String::new(),
                message_id,
                text: String::new(),
            },
        })
    }

    /// Follows the turn until it ends; returns the platform message that
    /// shows its draft, if there is one (for the reply to replace).
    pub async fn run(mut self, mut events: LiveSubscription) -> Option<String> {
        let mut shown = Shown::default();
        let mut changed = false;
        let mut failures = 0;
        // A quick reply goes out whole, without a draft flickering first.
        let mut next = Instant::now() + self.interval;
        loop {
            tokio::select! {
                event = events.next() => match event {
                    None | Some(LiveEvent::Finished) => break,
                    Some(event) => changed |= shown.apply(event),
                },
                () = tokio::time::sleep_until(next), if changed && failures < FAILURES_TO_GIVE_UP => {
                    changed = false;
                    let text = shown.markdown();
                    if text.is_empty() || text == self.draft.text {
                        continue;
                    }
                    self.draft.text = text;
                    let wait = match self.show().await {
                        Ok(()) => {
                            failures = 0;
                            self.interval
                        }
                        Err(wait) => {
                            failures += 1;
                            // Shown again once the platform allows it.
                            changed = true;
                            wait.max(self.interval)
                        }
                    };
                    next = Instant::now() + wait;
                }
            }
        }
        self.draft.message_id
    }

    /// The turn's draft key: `sb-<database id>-d<inbound id>`, the same on
    /// every instance and never repeated by another database (like the
    /// outbox's keys, which have no `d`).
    async fn key(&self) -> String {
        match self.store.database_id().await {
            Ok(Some(database)) => format!("sb-{database}-d{}", self.inbound_id),
            Ok(None) => format!("sb-d{}", self.inbound_id),
            Err(err) => {
                tracing::debug!(error = %err, "database id not read; the draft key is the turn's");
                format!("sb-d{}", self.inbound_id)
            }
        }
    }

    /// Shows the current draft; on failure, how long to wait before the
    /// next.
    async fn show(&mut self) -> Result<(), Duration> {
        if self.draft.key.is_empty() {
            self.draft.key = self.key().await;
        }
        let shown = tokio::time::timeout(DRAFT_TIMEOUT, self.sender.draft(&self.draft)).await;
        match shown {
            Ok(Ok(message_id)) => {
                if let Some(id) = message_id
                    && self.draft.message_id.as_deref() != Some(id.as_str())
                {
                    if let Err(err) = self
                        .store
                        .inbound()
                        .record_draft(self.inbound_id, &id)
                        .await
                    {
                        tracing::warn!(error = %err, "draft message not recorded");
                    }
                    self.draft.message_id = Some(id);
                }
                Ok(())
            }
            Ok(Err(SendError::RetryAfter(wait))) => {
                tracing::debug!(?wait, "draft rate limited");
                Err(wait)
            }
            Ok(Err(err)) => {
                tracing::debug!(error = %err, "draft not shown");
                Err(Duration::ZERO)
            }
            Err(_) => {
                tracing::debug!("draft timed out");
                Err(Duration::ZERO)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use async_trait::async_trait;
    use switchboard_contract::{AccountId, ChatId, DeliveryReceipt, OutboundMessage, PlatformName};

    use super::*;
    use crate::agent::live::LiveHub;
    use crate::store::test_support::scratch_store;

    /// Records when each draft was shown and what it said; answers with
    /// the scripted errors first.
    #[derive(Default)]
    struct Recording {
        shown: Mutex<Vec<(Instant, String)>>,
        errors: Mutex<Vec<SendError>>,
    }

    #[async_trait]
    impl PlatformSender for Recording {
        async fn send(&self, _: &OutboundMessage) -> Result<DeliveryReceipt, SendError> {
            Ok(DeliveryReceipt {
                message_ids: Vec::new(),
            })
        }

        fn draft_interval(&self, _: &ChatRef) -> Option<Duration> {
            Some(Duration::from_secs(1))
        }

        async fn draft(&self, draft: &Draft) -> Result<Option<String>, SendError> {
            if let Some(error) = self.errors.lock().expect("lock").pop() {
                return Err(error);
            }
            self.shown
                .lock()
                .expect("lock")
                .push((Instant::now(), draft.text.clone()));
            Ok(None)
        }
    }

    fn chat() -> ChatRef {
        ChatRef {
            platform: PlatformName::parse("telegram").expect("name"),
            account: AccountId::parse("1").expect("account"),
            chat: ChatId::parse("42").expect("chat"),
            thread: None,
        }
    }

    /// Streams `pieces` words 10 ms apart through a writer over `sender`;
    /// returns when the turn ended and the writer with it.
    async fn stream(sender: &Arc<Recording>, pieces: usize) -> Instant {
        let (store, _dir) = scratch_store().await;
        // Read (and kept) before the clock stops: no I/O once it has.
        store.database_id().await.expect("database id");
        tokio::time::pause();
        let hub = LiveHub::default();
        let turn = hub.open(InboundId::new(9));
        let as_sender: Arc<dyn PlatformSender> = Arc::clone(sender) as _;
        let writer = DraftWriter::new(as_sender, store, InboundId::new(9), chat(), None, None)
            .expect("drafts");
        let writer = tokio::spawn(writer.run(hub.subscribe(InboundId::new(9))));
        let start = Instant::now();
        turn.publish(LiveEvent::Round { round: 1 });
        for n in 0..pieces {
            turn.publish(LiveEvent::Text(format!("w{n} ")));
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        hub.close(InboundId::new(9));
        assert_eq!(writer.await.expect("writer"), None);
        start
    }

    #[tokio::test]
    async fn drafts_change_at_most_once_per_interval_the_first_after_one() {
        let sender = Arc::new(Recording::default());
        let start = stream(&sender, 500).await;

        let shown = sender.shown.lock().expect("lock").clone();
        // 5 s of text, one draft a second, the first after a second.
        assert!((4..=5).contains(&shown.len()), "{}", shown.len());
        assert!(shown[0].0 - start >= Duration::from_secs(1));
        for pair in shown.windows(2) {
            assert!(pair[1].0 - pair[0].0 >= Duration::from_secs(1));
            assert!(pair[1].1.starts_with(&pair[0].1), "the text grows");
        }
    }

    #[tokio::test]
    async fn a_quick_turn_shows_no_draft() {
        let sender = Arc::new(Recording::default());
        stream(&sender, 50).await;
        assert!(sender.shown.lock().expect("lock").is_empty());
    }

    #[tokio::test]
    async fn a_rate_limited_draft_waits_as_asked() {
        let sender = Arc::new(Recording::default());
        sender
            .errors
            .lock()
            .expect("lock")
            .push(SendError::RetryAfter(Duration::from_secs(3)));
        let start = stream(&sender, 600).await;

        let shown = sender.shown.lock().expect("lock").clone();
        // Refused at 1 s, so the next is at 4 s at the earliest.
        assert!(shown[0].0 - start >= Duration::from_secs(4), "{shown:?}");
    }

    #[tokio::test]
    async fn drafts_stop_after_failing_again_and_again() {
        let sender = Arc::new(Recording::default());
        let errors = (0..FAILURES_TO_GIVE_UP).map(|_| SendError::Transient("down".into()));
        sender.errors.lock().expect("lock").extend(errors);
        stream(&sender, 600).await;
        assert!(sender.shown.lock().expect("lock").is_empty());
    }

    fn events(shown: &mut Shown, events: impl IntoIterator<Item = LiveEvent>) -> String {
        for event in events {
            shown.apply(event);
        }
        shown.markdown()
    }

    #[test]
    fn text_accumulates_and_a_new_model_call_replaces_it() {
        let mut shown = Shown::default();
        let text = events(
            &mut shown,
            [
                LiveEvent::Round { round: 1 },
                LiveEvent::Text("Let me ".into()),
                LiveEvent::Text("check.".into()),
            ],
        );
        assert_eq!(text, "Let me check.");
        let text = events(
            &mut shown,
            [LiveEvent::ToolCall {
                id: "c1".into(),
                name: "calculator".into(),
                arguments: "{}".into(),
            }],
        );
        assert_eq!(text, "Let me check.\n\n_running calculator…_");
        let text = events(
            &mut shown,
            [
                LiveEvent::ToolResult {
                    id: "c1".into(),
                    name: "calculator".into(),
                    is_error: false,
                },
                LiveEvent::Round { round: 2 },
            ],
        );
        // The last call's words stay until the next call writes.
        assert_eq!(text, "Let me check.");
        let text = events(&mut shown, [LiveEvent::Text("It is 4.".into())]);
        assert_eq!(text, "It is 4.");
    }

    #[test]
    fn a_restart_voids_the_text_and_a_lone_tool_shows_alone() {
        let mut shown = Shown::default();
        let text = events(
            &mut shown,
            [
                LiveEvent::Text("Hel".into()),
                LiveEvent::Restart,
                LiveEvent::ToolCall {
                    id: "c".into(),
                    name: "http_get".into(),
                    arguments: "{}".into(),
                },
            ],
        );
        assert_eq!(text, "_running http_get…_");
    }
}
