//! The cap on what one tool result may put into the conversation
//! (`tools.max_result_chars`, per MCP server `max_result_chars`): a longer
//! result keeps its beginning and ends with a note saying how much was left
//! out, so that no tool (an MCP server, `http_get` of a big page, a
//! sub-agent's answer) can make a request the provider refuses as too long.
//! The cut is a pure function of the result and the cap: the same result is
//! cut to the same bytes, so the prompt prefix stays byte-stable.

/// `tools.max_result_chars` unless set.
pub const DEFAULT_MAX_RESULT_CHARS: usize = 100_000;

/// The smallest cap allowed: room for a useful beginning and the note.
pub const MIN_MAX_RESULT_CHARS: usize = 1_000;

/// Characters kept free for the note at the end of a cut result.
const NOTE_ROOM: usize = 200;

/// `content` when it has at most `max_chars` characters; otherwise its
/// beginning and a note, `max_chars` characters at most in all.
#[must_use]
pub fn bounded(content: String, max_chars: usize) -> String {
    let Some((cut_at, _)) = content.char_indices().nth(max_chars) else {
        return content;
    };
    let total = max_chars + content[cut_at..].chars().count();
    let keep = max_chars.saturating_sub(NOTE_ROOM);
    let end = content
        .char_indices()
        .nth(keep)
        .map_or(content.len(), |(at, _)| at);
    let left_out = total - keep;
    format!(
        "{}\n[result cut: {left_out} of its {total} characters left out; only the first {keep} \
         are shown (the limit is {max_chars}). Ask for a smaller part if you need more.]",
        &content[..end]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_within_the_cap_is_unchanged() {
        let text = "é".repeat(1_000);
        assert_eq!(bounded(text.clone(), 1_000), text);
    }

    #[test]
    fn a_longer_result_is_cut_to_the_cap_with_a_note_saying_how_much() {
        let text = "é".repeat(5_000);
        let cut = bounded(text.clone(), 1_000);
        assert!(cut.chars().count() <= 1_000, "{}", cut.chars().count());
        assert!(cut.starts_with(&"é".repeat(800)));
        assert!(
            cut.contains("4200 of its 5000 characters left out"),
            "{cut}"
        );
        assert_eq!(cut, bounded(text, 1_000), "the same cut every time");
    }

    #[test]
    fn a_cut_result_is_not_cut_again() {
        let cut = bounded("x".repeat(3_000), 1_000);
        assert_eq!(bounded(cut.clone(), 1_000), cut);
    }
}
