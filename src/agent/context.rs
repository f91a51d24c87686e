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
//! Between compactions the view is a pure function of the database, so the
//! prefix stays byte-stable.

use std::collections::BTreeMap;

use crate::llm::{ChatMessage, ModelRequest, Provider};
use crate::store::{Compaction, ModelCallStart, Store, StoreError, WireEntry};
use crate::usage::Price;

use super::run::wire_chars;
use super::step;

/// The system prompt of a summarisation call.
pub const SUMMARY_SYSTEM: &str = "You compress conversations between a user and an assistant so \
    the assistant can continue without the full transcript. Write a concise summary that keeps: \
    the user's goals and preferences, facts and results found (with exact names, numbers and \
    links), decisions made, open items and next steps, and options the user rejected and why. \
    Write in the conversation's language. Do not invent anything.";

/// How the summary appears in the wire view.
pub const SUMMARY_PREFIX: &str = "[Summary of the earlier conversation]\n";

/// Tool results longer than this are cut in the transcript sent for
/// summarisation.
const MAX_RESULT_CHARS: usize = 2000;

/// Tokens per character assumed before the provider has reported any usage.
const DEFAULT_TOKENS_PER_CHAR: f64 = 0.25;

/// When to compact.
#[derive(Debug, Clone)]
pub struct ContextPolicy {
    /// The model's context window, in tokens.
    pub window_tokens: u64,
    /// Compact when the estimated view passes this share of the window.
    pub threshold: f64,
    /// Turns kept verbatim after a compaction.
    pub keep_recent_turns: usize,
}

/// Why a compaction did not happen or failed.
#[derive(Debug, thiserror::Error)]
pub enum CompactError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the summary could not be made: {0}")]
    Model(#[from] crate::llm::LlmError),
}

/// What a summarisation call needs: the model to ask, and where the call is
/// recorded and whom it is charged to.
pub struct Summariser<'a> {
    pub store: &'a Store,
    pub provider: &'a dyn Provider,
    pub model: &'a str,
    pub session_id: &'a str,
    pub task_id: Option<i64>,
    pub principal_id: Option<i64>,
    pub prices: &'a BTreeMap<String, Price>,
}

/// The wire view of raw entries under the latest compaction.
pub fn apply(entries: Vec<WireEntry>, compaction: Option<&Compaction>) -> Vec<WireEntry> {
    let Some(compaction) = compaction else {
        return entries;
    };
    let mut view = Vec::with_capacity(entries.len());
    let mut summary_placed = false;
    for entry in entries {
        if entry.id <= compaction.pinned_id {
            view.push(entry);
        } else if entry.id <= compaction.through_id {
            if !summary_placed {
                view.push(summary_entry(compaction));
                summary_placed = true;
            }
        } else {
            if !summary_placed {
                view.push(summary_entry(compaction));
                summary_placed = true;
            }
            view.push(entry);
        }
    }
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
    /// Whether the view (with the system prompt) is past the threshold, by
    /// an estimate calibrated with the session's last reported usage.
    pub fn should_compact(
        &self,
        system: &str,
        view: &[WireEntry],
        tokens_per_char: Option<f64>,
    ) -> bool {
        let messages: Vec<ChatMessage> = view.iter().map(|entry| entry.message.clone()).collect();
        let chars = wire_chars(system, &messages);
        let ratio = tokens_per_char
            .unwrap_or(DEFAULT_TOKENS_PER_CHAR)
            .clamp(0.05, 2.0);
        #[allow(clippy::cast_precision_loss)] // sizes far below 2^52
        let estimate = chars as f64 * ratio;
        #[allow(clippy::cast_precision_loss)]
        let limit = self.window_tokens as f64 * self.threshold;
        estimate > limit
    }

    /// Summarises the view's older turns and records the compaction.
    /// Returns false when there is nothing old enough to summarise.
    ///
    /// # Errors
    /// The summarisation call or the database failing; nothing is recorded
    /// then.
    pub async fn compact(
        &self,
        by: &Summariser<'_>,
        view: &[WireEntry],
    ) -> Result<bool, CompactError> {
        let Some((pinned, cut)) = split(view, self.keep_recent_turns.max(1)) else {
            return Ok(false);
        };
        let transcript = render(&view[pinned + 1..cut]);
        let messages = [ChatMessage::User {
            content: format!(
                "Summarise this part of the conversation (it follows the user's first message: \
                 \"{}\"):\n\n{transcript}",
                first_text(&view[pinned].message)
            ),
        }];
        let request = ModelRequest {
            model: by.model,
            system: SUMMARY_SYSTEM,
            messages: &messages,
            tools: &[],
            cache_key: by.session_id,
            max_tokens: 2048,
        };
        let request_id = step::request_id();
        let start = ModelCallStart {
            request_id: &request_id,
            session_id: by.session_id,
            task_id: by.task_id,
            scope: "compaction",
            principal_id: by.principal_id,
            provider: by.provider.kind().as_str(),
            model: by.model,
            request_chars: None,
        };
        let call = async { Ok::<_, CompactError>(by.provider.complete(&request).await?) };
        let response = step::recorded(by.store, &start, by.prices, call)
            .await?
            .response;
        let summary = response.content.unwrap_or_default();
        let compaction = Compaction {
            pinned_id: view[pinned].id,
            through_id: view[cut - 1].id,
            summary: summary.trim().to_owned(),
        };
        by.store
            .record_compaction(by.session_id, &compaction)
            .await?;
        tracing::info!(
            session_id = by.session_id,
            replaced_from = compaction.pinned_id + 1,
            replaced_through = compaction.through_id,
            summary_chars = compaction.summary.len(),
            "history compacted"
        );
        Ok(true)
    }
}

/// The pinned first user message's index and the index of the first entry
/// kept verbatim (the start of the `keep`-th last turn).
fn split(view: &[WireEntry], keep: usize) -> Option<(usize, usize)> {
    let pinned = view
        .iter()
        .position(|entry| matches!(entry.message, ChatMessage::User { .. }))?;
    let turn_starts: Vec<usize> = view
        .iter()
        .enumerate()
        .skip(pinned + 1)
        .filter(|(_, entry)| matches!(entry.message, ChatMessage::User { .. }))
        .map(|(index, _)| index)
        .collect();
    if turn_starts.len() <= keep {
        return None;
    }
    let cut = turn_starts[turn_starts.len() - keep];
    (cut > pinned + 1).then_some((pinned, cut))
}

fn first_text(message: &ChatMessage) -> &str {
    match message {
        ChatMessage::User { content } => content,
        _ => "",
    }
}

/// A plain-text transcript of entries for the summariser.
fn render(entries: &[WireEntry]) -> String {
    let mut out = String::new();
    for entry in entries {
        match &entry.message {
            ChatMessage::User { content } => {
                out.push_str("User: ");
                out.push_str(content);
            }
            ChatMessage::Assistant {
                content,
                tool_calls,
            } => {
                if let Some(content) = content {
                    out.push_str("Assistant: ");
                    out.push_str(content);
                }
                for call in tool_calls {
                    out.push_str(&format!(
                        "\nAssistant called {}({})",
                        call.name, call.arguments
                    ));
                }
            }
            ChatMessage::Tool { content, .. } => {
                out.push_str("Tool result: ");
                let cut = content
                    .char_indices()
                    .nth(MAX_RESULT_CHARS)
                    .map_or(content.len(), |(index, _)| index);
                out.push_str(&content[..cut]);
                if cut < content.len() {
                    out.push_str(" [...]");
                }
            }
        }
        out.push_str("\n\n");
    }
    out
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
                    tool_calls: vec![crate::llm::ToolCall {
                        id: "c".to_owned(),
                        name: "t".to_owned(),
                        arguments: "{}".to_owned(),
                    }],
                },
            ),
            entry(
                5,
                ChatMessage::Tool {
                    tool_call_id: "c".to_owned(),
                    content: "r".to_owned(),
                    is_error: false,
                },
            ),
            assistant(6, "d"),
            user(7, "e"),
            assistant(8, "f"),
        ];
        // The tool call (4) and its result (5) fall inside one turn.
        assert_eq!(split(&view, 1), Some((0, 6)));
        assert_eq!(split(&view, 2), None, "only two turns after the goal");
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
            summary: "s".to_owned(),
        };
        let view = apply(entries, Some(&compaction));
        let ids: Vec<i64> = view.iter().map(|e| e.id).collect();
        assert_eq!(ids, [1, 4, 5]);
        assert!(
            matches!(&view[1].message, ChatMessage::Assistant { content: Some(c), .. } if c.ends_with('s'))
        );
    }
}
