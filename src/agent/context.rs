//! Context management: keeping the wire view inside the model's window.
//!
//! When a session's wire view would pass a threshold of the model's context
//! window, older turns are summarised by the model into a summary that keeps
//! the user's goals, facts found, open items and options the user rejected.
//! The raw messages stay stored; a compaction row records the range its
//! summary replaces, and only the wire view changes: the session's first user
//! message stays pinned, the summary follows it (as an assistant message, so
//! roles keep alternating), then the most recent turns verbatim. Cuts fall on
//! turn boundaries, so a tool call and its result are never separated.
//! A task that outgrows the window on its own is compacted between its
//! iterations: the cut then falls between tool rounds, and the task's own
//! message is kept verbatim after the pinned one.
//! Between compactions the view is a pure function of the database, so the
//! prefix stays byte-stable.

use crate::domain::{ChatMessage, InboundId, PrincipalId, Scope, SessionId, ToolSpec};
use crate::metrics::Metrics;
use std::collections::BTreeMap;

use crate::agent::settings::ContextSettings;

use crate::llm::Provider;
use crate::store::{Batch, Compaction, Store, StoreError, WireEntry};
use crate::tools::settings::MemorySettings;
use crate::usage::Price;

use super::extract::extract_facts;
use super::prompt::refreshed_prompt;
use super::run::wire_bytes;
use super::shrink::shrink_tool_results;
use super::step::{self, OneShot};

/// The question of a summarisation call, asked after the conversation as
/// it is cached (the range to summarise is named after it).
pub const SUMMARY_REQUEST: &str = "[switchboard] Compaction: the conversation above is getting \
    long. Write a concise summary of part of it so the assistant can continue without the full \
    transcript; keep the user's goals and preferences, facts and results found (with exact \
    names, numbers and links), decisions made, open items and next steps, and options the user \
    rejected and why. Write in the conversation's language. Do not invent anything, do not call \
    tools, and answer with the summary only.";

/// How the summary appears in the wire view.
pub const SUMMARY_PREFIX: &str = "[Summary of the earlier conversation]\n";

/// How much of a message names it where a question points at it.
const QUOTE_CHARS: usize = 120;

/// Tokens per request byte assumed before the provider has reported any
/// usage.
const DEFAULT_TOKENS_PER_BYTE: f64 = 0.25;

/// When to compact.
#[derive(Debug, Clone)]
pub struct ContextPolicy {
    /// The model's context window, in tokens.
    pub window_tokens: u64,
    /// Compact when the estimated view passes this share of the window.
    pub threshold: f64,
    /// Turns kept verbatim after a compaction.
    pub keep_recent_turns: usize,
    /// For a direct-chat session offering the `memory` tool: a compaction
    /// also refreshes the facts about its person in its stored system
    /// prompt (the compaction changes the request's prefix anyway, so the
    /// refresh costs no extra cache miss), after extracting new ones from
    /// the summarised turns when `extract_at_compaction` is on.
    pub person_memory: Option<MemorySettings>,
}

/// Why a compaction did not happen or failed.
#[derive(Debug, thiserror::Error)]
pub enum CompactError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the summary could not be made: {0}")]
    Model(crate::llm::LlmError),
}

impl From<crate::llm::LlmError> for CompactError {
    fn from(err: crate::llm::LlmError) -> Self {
        Self::Model(err)
    }
}

/// What a summarisation call needs: the model to ask, and where the call is
/// recorded and whom it is charged to.
pub struct Summariser<'a> {
    pub store: &'a Store,
    pub metrics: &'a Metrics,
    /// What the prompt-cache report compares the call with.
    pub cache_watch: &'a super::cache_watch::CacheWatch,
    pub provider: &'a dyn Provider,
    pub model: &'a str,
    /// The conversation's stored system prompt and tools: a summary is
    /// asked as a continuation of the conversation as cached.
    pub system: &'a str,
    pub tools: &'a [ToolSpec],
    /// How long the conversation was idle (the cache TTL policy reads it).
    pub idle: std::time::Duration,
    pub session_id: &'a SessionId,
    pub task_id: Option<InboundId>,
    pub principal_id: Option<PrincipalId>,
    pub prices: &'a BTreeMap<String, Price>,
}

/// The wire view of raw entries under the latest compaction: what precedes
/// the range, the kept task goal (if any), the summary, then what follows.
pub fn apply(entries: Vec<WireEntry>, compaction: Option<&Compaction>) -> Vec<WireEntry> {
    let Some(compaction) = compaction else {
        return entries;
    };
    let mut view = Vec::with_capacity(entries.len());
    let mut kept = None;
    let mut tail = Vec::new();
    for entry in entries {
        if entry.id <= compaction.pinned_id {
            view.push(entry);
        } else if entry.id > compaction.through_id {
            tail.push(entry);
        } else if Some(entry.id) == compaction.kept_id {
            kept = Some(entry);
        }
    }
    view.extend(kept);
    view.push(summary_entry(compaction));
    view.extend(tail);
    view
}

fn summary_entry(compaction: &Compaction) -> WireEntry {
    WireEntry {
        id: compaction.through_id,
        task_id: None,
        message: ChatMessage::Assistant {
            content: Some(format!("{SUMMARY_PREFIX}{}", compaction.summary)),
            tool_calls: Vec::new(),
        },
    }
}

impl ContextPolicy {
    /// The policy for a model under the configured settings.
    pub fn for_model(settings: &ContextSettings, model: &str) -> Self {
        Self {
            window_tokens: settings
                .windows
                .get(model)
                .copied()
                .unwrap_or(settings.window_tokens),
            threshold: settings.compact_threshold,
            keep_recent_turns: settings.keep_recent_turns,
            person_memory: None,
        }
    }

    /// Whether the view (with the system prompt) is past the threshold, by
    /// an estimate calibrated with the session's last reported usage.
    pub fn should_compact(
        &self,
        system: &str,
        view: &[WireEntry],
        tokens_per_byte: Option<f64>,
    ) -> bool {
        let messages = view.iter().map(|entry| &entry.message);
        self.over_threshold(wire_bytes(system, messages), tokens_per_byte)
    }

    /// Whether a request of `bytes` bytes (see [`wire_bytes`]) is past the
    /// threshold at `tokens_per_byte` (a default ratio when not yet
    /// calibrated).
    pub fn over_threshold(&self, bytes: i64, tokens_per_byte: Option<f64>) -> bool {
        let ratio = tokens_per_byte
            .unwrap_or(DEFAULT_TOKENS_PER_BYTE)
            .clamp(0.05, 2.0);
        let estimate = bytes as f64 * ratio;
        let limit = self.window_tokens as f64 * self.threshold;
        estimate > limit
    }

    /// Summarises the view's older turns and records the compaction;
    /// returns it (`None` when there is nothing old enough to summarise).
    /// Applying it to `view` gives the new view: the range it replaces
    /// covers whatever the view's earlier summary stood for.
    ///
    /// # Errors
    /// The summarisation call or the database failing; nothing is recorded
    /// then.
    pub async fn compact(
        &self,
        by: &Summariser<'_>,
        view: &[WireEntry],
    ) -> Result<Option<Compaction>, CompactError> {
        match split(view, self.keep_recent_turns.max(1)) {
            Some(split) => summarise(by, view, split, self.person_memory.as_ref())
                .await
                .map(Some),
            None => Ok(None),
        }
    }

    /// Summarises a long-running task's earlier rounds (and the turns before
    /// it) while it runs, keeping the task's own message verbatim and its
    /// latest rounds whole. Returns the compaction, `None` when there is
    /// nothing to summarise.
    ///
    /// # Errors
    /// The summarisation call or the database failing; nothing is recorded
    /// then.
    pub async fn compact_task(
        &self,
        by: &Summariser<'_>,
        view: &[WireEntry],
        task_id: InboundId,
    ) -> Result<Option<Compaction>, CompactError> {
        match split_task(view, task_id, self.keep_recent_turns.max(1)) {
            Some(split) => summarise(by, view, split, self.person_memory.as_ref())
                .await
                .map(Some),
            None => Ok(None),
        }
    }
}

/// Where to cut a view: indices into it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Split {
    /// The session's first user message, kept before the summary.
    pinned: usize,
    /// A task goal inside the range, kept verbatim after the pinned message.
    kept: Option<usize>,
    /// The first entry kept verbatim after the summary.
    cut: usize,
}

/// Summarises `view[pinned + 1..cut]` (less the kept goal) and records the
/// compaction, with the person's facts extracted and the session's stored
/// system prompt refreshed as `person_memory` says (see
/// [`ContextPolicy::person_memory`]).
async fn summarise(
    by: &Summariser<'_>,
    view: &[WireEntry],
    split: Split,
    person_memory: Option<&MemorySettings>,
) -> Result<Compaction, CompactError> {
    let Split { pinned, kept, cut } = split;
    let history: Vec<ChatMessage> = view.iter().map(|entry| entry.message.clone()).collect();
    if let Some(memory) = person_memory
        && memory.extract_at_compaction
    {
        // Before the summary's call, whose outcome is written with the
        // compaction. The pinned first message is read too: it stays
        // verbatim, but it often says the most about the person.
        let before = format!("before {}", boundary(view, cut));
        extract_facts(by, &history, &before, memory).await?;
    }
    let prompt = format!("{SUMMARY_REQUEST} {}", summary_range(view, split));
    let scope = Scope::named("compaction");
    let question = |history| OneShot {
        scope: &scope,
        history,
        prompt: prompt.clone(),
        max_tokens: 2048,
    };
    let (summary, recorded) = match step::one_shot(by, question(&history)).await {
        // Refused as too long (the very thing to compact): asked once more
        // with the largest tool results cut.
        Err(CompactError::Model(err)) if err.is_too_long() => {
            let mut shorter = history.clone();
            if !shrink_tool_results(&mut shorter) {
                return Err(CompactError::Model(err));
            }
            tracing::warn!("summary request refused as too long; retrying with tool results cut");
            step::one_shot(by, question(&shorter)).await?
        }
        asked => asked?,
    };
    if summary.trim().is_empty() {
        // A model that answered with a tool call, or nothing: no summary
        // rather than an empty one (the call stays recorded).
        let mut batch = Batch::new();
        recorded.finish(&mut batch);
        by.store.write(batch).await?;
        return Err(CompactError::Model(crate::llm::LlmError::InvalidResponse(
            "the summary came back empty".to_owned(),
        )));
    }
    let compaction = Compaction {
        pinned_id: view[pinned].id,
        through_id: view[cut - 1].id,
        kept_id: kept.map(|index| view[index].id),
        summary: summary.trim().to_owned(),
    };
    // The call's outcome and the compaction it produced, in one write.
    let mut batch = Batch::new();
    recorded.finish(&mut batch);
    batch.record_compaction(by.session_id, &compaction);
    if let Some(prompt) = refreshed_prompt(by.store, by.session_id, person_memory.is_some()).await?
    {
        tracing::info!(
            session_id = by.session_id.as_str(),
            "remembered facts or the client's instructions refreshed in the system prompt"
        );
        batch.push(
            "UPDATE sessions SET system_prompt = $1 WHERE id = $2",
            vec![prompt.into(), by.session_id.into()],
        );
    }
    by.store.write(batch).await?;
    tracing::info!(
        session_id = by.session_id.as_str(),
        replaced_from = compaction.pinned_id + 1,
        replaced_through = compaction.through_id,
        summary_chars = compaction.summary.len(),
        "history compacted"
    );
    Ok(compaction)
}

/// The entry at `cut` named, or the end of the conversation.
fn boundary(view: &[WireEntry], cut: usize) -> String {
    view.get(cut).map_or_else(
        || "the end of the conversation".to_owned(),
        |entry| describe(&entry.message),
    )
}

/// The session's first user message: always kept, before the summary.
fn pinned(view: &[WireEntry]) -> Option<usize> {
    view.iter()
        .position(|entry| matches!(entry.message, ChatMessage::User { .. }))
}

/// Where to cut between turns: the pinned first user message, and the start
/// of the `keep`-th last turn.
fn split(view: &[WireEntry], keep: usize) -> Option<Split> {
    let pinned = pinned(view)?;
    let turn_starts: Vec<usize> = view
        .iter()
        .enumerate()
        .skip(pinned + 1)
        .filter(|(_, entry)| matches!(entry.message, ChatMessage::User { .. }))
        .map(|(index, _)| index)
        .collect();
    // Too few turns to keep `keep` of them verbatim: a short conversation
    // with tool results (whose entries may be large) is summarised whole
    // after the pinned message; one of plain chat is too short.
    let cut = match turn_starts.len().checked_sub(keep) {
        Some(first_kept) if first_kept > 0 => turn_starts[first_kept],
        _ if view[pinned + 1..]
            .iter()
            .any(|entry| matches!(entry.message, ChatMessage::Tool { .. })) =>
        {
            view.len()
        }
        _ => return None,
    };
    (cut > pinned + 1).then_some(Split {
        pinned,
        kept: None,
        cut,
    })
}

/// Where to cut inside a running task: the pinned first user message, the
/// task's own message (kept), and the start of the `keep`-th last round of
/// the task. A round starts with an assistant entry, so a tool call and its
/// results always stay on one side.
fn split_task(view: &[WireEntry], task_id: InboundId, keep: usize) -> Option<Split> {
    let pinned = pinned(view)?;
    let goal = view.iter().rposition(|entry| {
        entry.task_id == Some(task_id) && matches!(entry.message, ChatMessage::User { .. })
    })?;
    let round_starts: Vec<usize> = view
        .iter()
        .enumerate()
        .skip(goal + 1)
        .filter(|(_, entry)| matches!(entry.message, ChatMessage::Assistant { .. }))
        .map(|(index, _)| index)
        .collect();
    if round_starts.len() <= keep {
        return None;
    }
    let cut = round_starts[round_starts.len() - keep];
    let kept = (goal > pinned).then_some(goal);
    let replaced = cut - (pinned + 1) - usize::from(kept.is_some());
    (replaced > 0).then_some(Split { pinned, kept, cut })
}

/// Which part of the view a summary covers, in words the model can match
/// against the conversation above: after the first user message, up to
/// the first entry kept, less a task goal kept.
fn summary_range(view: &[WireEntry], split: Split) -> String {
    let mut range = format!(
        "Summarise only what comes after the user's first message ({}) and before {}; the \
         first message and everything from that point on stay verbatim",
        describe(&view[split.pinned].message),
        boundary(view, split.cut),
    );
    if let Some(kept) = split.kept {
        range.push_str(&format!(", as does {}", describe(&view[kept].message)));
    }
    range.push('.');
    range
}

/// A message named by its start: the user's message "…", the assistant's
/// step "…" (its text, else its first tool call).
fn describe(message: &ChatMessage) -> String {
    let (who, text) = match message {
        ChatMessage::User { content, .. } => ("the user's message", content.clone()),
        ChatMessage::Assistant {
            content,
            tool_calls,
        } => {
            let text = match (
                content.as_deref().filter(|text| !text.is_empty()),
                tool_calls.first(),
            ) {
                (Some(text), _) => text.to_owned(),
                (None, Some(call)) => format!("{}({})", call.name, call.arguments),
                (None, None) => String::new(),
            };
            ("the assistant's step", text)
        }
        ChatMessage::Tool { content, .. } => ("the tool result", content.clone()),
    };
    let quote: String = text.chars().take(QUOTE_CHARS).collect();
    let ellipsis = if quote.len() < text.len() { "…" } else { "" };
    format!("{who} \"{quote}{ellipsis}\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: i64, message: ChatMessage) -> WireEntry {
        WireEntry {
            id,
            task_id: None,
            message,
        }
    }

    fn user(id: i64, text: &str) -> WireEntry {
        entry(
            id,
            ChatMessage::User {
                content: text.to_owned(),
                media: Vec::new(),
            },
        )
    }

    fn assistant(id: i64, text: &str) -> WireEntry {
        entry(
            id,
            ChatMessage::Assistant {
                content: Some(text.to_owned()),
                tool_calls: Vec::new(),
            },
        )
    }

    #[test]
    fn the_split_keeps_the_pinned_goal_and_whole_recent_turns() {
        let view = vec![
            user(1, "goal"),
            assistant(2, "a"),
            user(3, "b"),
            entry(
                4,
                ChatMessage::Assistant {
                    content: None,
                    tool_calls: vec![crate::domain::ToolCall {
                        id: "c".to_owned(),
                        name: "t".to_owned(),
                        arguments: "{}".to_owned(),
                    }],
                },
            ),
            entry(5, ChatMessage::tool_result("c", "r", false)),
            assistant(6, "d"),
            user(7, "e"),
            assistant(8, "f"),
        ];
        // The tool call (4) and its result (5) fall inside one turn.
        assert_eq!(
            split(&view, 1),
            Some(Split {
                pinned: 0,
                kept: None,
                cut: 6
            })
        );
        assert_eq!(
            split(&view, 2),
            Some(Split {
                pinned: 0,
                kept: None,
                cut: 8
            }),
            "too few turns to keep two, with a tool result: all after the pinned one summarised"
        );
        assert_eq!(
            split(&view[..3], 2),
            None,
            "plain chat that short is too short"
        );
        assert_eq!(
            split(&view[..1], 1),
            None,
            "nothing after the pinned message"
        );
    }

    #[test]
    fn applying_a_compaction_replaces_the_range_with_one_summary() {
        let entries = vec![
            user(1, "goal"),
            assistant(2, "a"),
            user(3, "b"),
            assistant(4, "c"),
            user(5, "d"),
        ];
        let compaction = Compaction {
            pinned_id: 1,
            through_id: 4,
            kept_id: None,
            summary: "s".to_owned(),
        };
        let view = apply(entries, Some(&compaction));
        let ids: Vec<i64> = view.iter().map(|e| e.id).collect();
        assert_eq!(ids, [1, 4, 5]);
        assert!(
            matches!(&view[1].message, ChatMessage::Assistant { content: Some(c), .. } if c.ends_with('s'))
        );
    }

    fn round(id: i64, task: i64) -> [WireEntry; 2] {
        let call = crate::domain::ToolCall {
            id: format!("c{id}"),
            name: "t".to_owned(),
            arguments: "{}".to_owned(),
        };
        [
            WireEntry {
                id,
                task_id: Some(InboundId::new(task)),
                message: ChatMessage::Assistant {
                    content: None,
                    tool_calls: vec![call],
                },
            },
            WireEntry {
                id: id + 1,
                task_id: Some(InboundId::new(task)),
                message: ChatMessage::tool_result(format!("c{id}"), "r", false),
            },
        ]
    }

    #[test]
    fn a_running_task_is_cut_between_rounds_and_keeps_its_goal() {
        let mut view = vec![user(1, "first"), assistant(2, "hi")];
        view.push(WireEntry {
            task_id: Some(InboundId::new(3)),
            ..user(3, "the goal")
        });
        for id in [4, 6, 8, 10] {
            view.extend(round(id, 3));
        }
        let split = split_task(&view, InboundId::new(3), 2).expect("a cut");
        assert_eq!(
            split,
            Split {
                pinned: 0,
                kept: Some(2),
                cut: 7
            },
            "rounds 8 and 10 kept whole"
        );
        let compaction = Compaction {
            pinned_id: 1,
            through_id: 7,
            kept_id: Some(3),
            summary: "s".to_owned(),
        };
        let ids: Vec<i64> = apply(view.clone(), Some(&compaction))
            .iter()
            .map(|e| e.id)
            .collect();
        assert_eq!(
            ids,
            [1, 3, 7, 8, 9, 10, 11],
            "goal, then summary, then rounds"
        );
        assert_eq!(
            split_task(&view, InboundId::new(3), 4),
            None,
            "nothing older to summarise"
        );
    }

    #[test]
    fn a_new_compaction_applies_to_the_current_view_as_to_the_raw_entries() {
        let mut raw = vec![user(1, "first"), assistant(2, "a"), user(3, "b")];
        raw.push(assistant(4, "c"));
        raw.push(WireEntry {
            task_id: Some(InboundId::new(5)),
            ..user(5, "the goal")
        });
        for id in [6, 8, 10, 12] {
            raw.extend(round(id, 5));
        }
        let older = Compaction {
            pinned_id: 1,
            through_id: 4,
            kept_id: None,
            summary: "old".to_owned(),
        };
        let view = apply(raw.clone(), Some(&older));
        let split = split_task(&view, InboundId::new(5), 2).expect("a cut");
        let newer = Compaction {
            pinned_id: view[split.pinned].id,
            through_id: view[split.cut - 1].id,
            kept_id: split.kept.map(|index| view[index].id),
            summary: "new".to_owned(),
        };

        assert_eq!(apply(view, Some(&newer)), apply(raw, Some(&newer)));
    }
}
