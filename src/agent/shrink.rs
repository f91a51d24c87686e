//! What the loop does when the provider refuses a request as too long for
//! the model (OpenAI's `context_length_exceeded`, Anthropic's "prompt is too
//! long"): the largest tool results of the request are cut (each to
//! [`SHRUNK_RESULT_CHARS`] characters, largest first, until the tool results
//! are at most half of what they were), and the call is made once more. The
//! stored entries keep their text; only the request is smaller, so the
//! conversation never becomes one that can only fail. A compaction's
//! summary call does the same ([`crate::agent::context`]).

use std::collections::HashMap;

use crate::domain::ChatMessage;
use crate::store::WireEntry;
use crate::tools::Toolset;
use crate::tools::bound::bounded;

/// The stored view with each tool result cut to its tool's cap, as it was
/// when the result was made ([`Toolset::bounded_result`]): a result stored
/// before the cap existed (or under a larger one) reaches the model cut the
/// same way every turn, so the prefix stays byte-stable.
#[must_use]
pub fn bound_stored(view: Vec<WireEntry>, toolset: &Toolset) -> Vec<WireEntry> {
    let mut names: HashMap<String, String> = HashMap::new();
    view.into_iter()
        .map(|mut entry| {
            match &mut entry.message {
                ChatMessage::Assistant { tool_calls, .. } => {
                    for call in tool_calls.iter() {
                        names.insert(call.id.clone(), call.name.clone());
                    }
                }
                ChatMessage::Tool {
                    tool_call_id,
                    content,
                    ..
                } => {
                    let name = names.get(tool_call_id.as_str()).map_or("", String::as_str);
                    *content = toolset.bounded_result(name, std::mem::take(content));
                }
                ChatMessage::User { .. } => {}
            }
            entry
        })
        .collect()
}

/// What a cut tool result keeps, note included.
pub const SHRUNK_RESULT_CHARS: usize = 2_000;

/// Cuts the largest tool results of `history` (see the module's doc);
/// returns whether anything was cut (when not, a retry would be refused the
/// same way).
pub fn shrink_tool_results(history: &mut [ChatMessage]) -> bool {
    let mut sizes: Vec<(usize, usize)> = history
        .iter()
        .enumerate()
        .filter_map(|(index, message)| match message {
            ChatMessage::Tool { content, .. } if content.chars().count() > SHRUNK_RESULT_CHARS => {
                Some((index, content.chars().count()))
            }
            _ => None,
        })
        .collect();
    if sizes.is_empty() {
        return false;
    }
    let total: usize = history
        .iter()
        .map(|message| match message {
            ChatMessage::Tool { content, .. } => content.chars().count(),
            _ => 0,
        })
        .sum();
    let mut remaining = total;
    // Largest first; equal sizes oldest first.
    sizes.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    for (index, chars) in sizes {
        if remaining <= total / 2 {
            break;
        }
        if let ChatMessage::Tool { content, .. } = &mut history[index] {
            *content = bounded(std::mem::take(content), SHRUNK_RESULT_CHARS);
            remaining = remaining - chars + content.chars().count();
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(chars: usize) -> ChatMessage {
        ChatMessage::tool_result("c", "x".repeat(chars), false)
    }

    fn chars(message: &ChatMessage) -> usize {
        match message {
            ChatMessage::Tool { content, .. } => content.chars().count(),
            _ => 0,
        }
    }

    #[test]
    fn the_largest_results_are_cut_until_half_is_left() {
        let mut history = vec![tool(10_000), tool(100_000), tool(500), tool(60_000)];
        assert!(shrink_tool_results(&mut history));
        let sizes: Vec<usize> = history.iter().map(chars).collect();
        assert!(sizes[1] <= SHRUNK_RESULT_CHARS, "{sizes:?}");
        assert_eq!(sizes[3], 60_000, "half was reached after the largest");
        assert_eq!((sizes[0], sizes[2]), (10_000, 500));
    }

    #[test]
    fn nothing_to_cut_is_said() {
        let mut history = vec![tool(100), tool(SHRUNK_RESULT_CHARS)];
        assert!(!shrink_tool_results(&mut history));
    }
}
