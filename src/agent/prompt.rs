//! Building a session's system prompt, once, when the session starts.
//!
//! The prompt is persona, rules, guidance for each offered tool, the
//! optional memory file's contents, and — for a direct-chat session offering
//! the `memory` tool — the facts remembered about its person, as its last
//! section. It is stored on the session row and read back verbatim on every
//! later turn; it is never rebuilt, so an edit of the memory file reaches
//! new sessions only, and the provider's prompt cache keeps hitting. Nothing
//! time-dependent goes in. The one exception is the person's facts: a
//! compaction (which changes the history's prefix anyway) replaces that last
//! section with the facts as they are then ([`refreshed_prompt`]).
//!
//! An HTTP API client's own instructions (its system or developer message,
//! or `instructions`) join the prompt once, before its first model call,
//! as the stable text's last section, framed as the client's and after
//! the operator's ([`with_client_instructions`]); a change later is a note
//! in the history instead ([`client_instructions_note`], see
//! `session::instructions`).

use std::path::Path;

use crate::agent::settings::AgentSettings;
use crate::domain::{SessionId, ToolSpec};
use crate::store::{MemoryEntry, Store, StoreError};
use crate::tools::memory::MEMORY;

/// Largest memory file read into a prompt; the rest is cut off with a note.
const MAX_MEMORY_BYTES: usize = 64 * 1024;

/// Builds the system prompt for a new session.
///
/// A missing or unreadable memory file is logged and left out: a session must
/// still start.
pub fn build_system_prompt(settings: &AgentSettings, tools: &[ToolSpec]) -> String {
    let mut prompt = String::new();
    prompt.push_str(settings.persona.trim());
    if !settings.rules.trim().is_empty() {
        prompt.push_str("\n\n");
        prompt.push_str(settings.rules.trim());
    }
    if !tools.is_empty() {
        prompt.push_str("\n\n# Tools\nYou can call these tools:");
        for tool in tools {
            prompt.push_str("\n- ");
            prompt.push_str(&tool.name);
            prompt.push_str(": ");
            prompt.push_str(first_sentence(&tool.description));
        }
    }
    if let Some(path) = &settings.memory_file
        && let Some(memory) = read_memory(path)
    {
        prompt.push_str("\n\n# Memory\n");
        prompt.push_str(memory.trim());
    }
    prompt
}

/// Where the section of a person's remembered facts starts: always the
/// prompt's last section. Facts are single lines, so the heading (which
/// starts with a blank line) cannot occur inside the section.
pub const PERSON_MEMORY_HEADING: &str = "\n\n# What you remember about this person\n";

/// The line under [`PERSON_MEMORY_HEADING`], before the facts.
const PERSON_MEMORY_INTRO: &str = "Facts about this person from earlier conversations \
    (kept with the `memory` tool; #N is a fact's id). Use them where they help; do not recite \
    them.";

/// `base` (a prompt without a facts section) followed by the section of
/// `facts`; `base` alone when there are none.
pub fn with_person_memory(base: &str, facts: &[MemoryEntry]) -> String {
    let mut prompt = base.to_owned();
    if facts.is_empty() {
        return prompt;
    }
    prompt.push_str(PERSON_MEMORY_HEADING);
    prompt.push_str(PERSON_MEMORY_INTRO);
    for fact in facts {
        prompt.push_str(&format!("\n- #{}: {}", fact.id, fact.text));
    }
    prompt
}

/// The prompt without its section of a person's facts, if it has one: the
/// last heading followed by the section's own first line (an operator's
/// text with the same heading alone is left alone).
pub fn without_person_memory(prompt: &str) -> &str {
    match prompt.rfind(PERSON_MEMORY_HEADING) {
        Some(start)
            if prompt[start + PERSON_MEMORY_HEADING.len()..].starts_with(PERSON_MEMORY_INTRO) =>
        {
            &prompt[..start]
        }
        _ => prompt,
    }
}

/// A stored system prompt as a request sends it: the stable text, and the
/// remembered facts after it (empty when it has none), which a compaction
/// may refresh. Sent apart, a refresh keeps the stable text cached.
pub fn split_system(prompt: &str) -> (&str, &str) {
    prompt.split_at(without_person_memory(prompt).len())
}

/// Where the section of the HTTP API client's instructions starts (issue
/// 28, point 6): the last section of the stable text, after the
/// operator's own and before a person's facts.
pub const CLIENT_INSTRUCTIONS_HEADING: &str = "\n\n# The client's instructions\n";

/// The line under [`CLIENT_INSTRUCTIONS_HEADING`], before the client's text.
const CLIENT_INSTRUCTIONS_INTRO: &str = "The application that sends you this conversation \
    through the API adds these instructions. Everything above comes from the operator and \
    takes precedence; follow these where they do not conflict with it.\n\n";

/// `prompt` with the client's `instructions` as the last section of its
/// stable text (replacing a section of them it has), ahead of the person's
/// facts. Only for a prompt no model call has sent yet: it changes the
/// cached prefix.
pub fn with_client_instructions(prompt: &str, instructions: &str) -> String {
    let (stable, tail) = split_system(prompt);
    let operator = match stable.rfind(CLIENT_INSTRUCTIONS_HEADING) {
        Some(start)
            if stable[start + CLIENT_INSTRUCTIONS_HEADING.len()..]
                .starts_with(CLIENT_INSTRUCTIONS_INTRO) =>
        {
            &stable[..start]
        }
        _ => stable,
    };
    format!(
        "{operator}{CLIENT_INSTRUCTIONS_HEADING}{CLIENT_INSTRUCTIONS_INTRO}{}{tail}",
        instructions.trim()
    )
}

/// The note that starts the user message of a turn whose request changed
/// the client's instructions after the system prompt was sent: the prompt
/// (the cached prefix) stays as it is, and the change is part of the
/// history from that turn on.
pub fn client_instructions_note(instructions: &str) -> String {
    format!(
        "[switchboard] The client's instructions changed with this message. From now on they \
         replace the ones in the system prompt or in an earlier note (the operator's \
         instructions still come first):\n{}\n[end of the client's instructions]\n\n",
        instructions.trim()
    )
}

/// Whether a session's stored toolset offers the `memory` tool: then its
/// prompt carries its person's facts.
pub fn offers_memory<S: AsRef<str>>(toolset: &[S]) -> bool {
    toolset.iter().any(|name| name.as_ref() == MEMORY)
}

/// The session's stored prompt as a compaction (which changes the
/// history's prefix anyway) leaves it: with `facts`, its section of facts
/// replaced by its owner's facts as they are now (for a session with an
/// owner that offers the `memory` tool); and its section of the client's
/// instructions made those in effect (a change noted in the history may
/// have just been summarised away). `None` when that changes nothing.
///
/// # Errors
/// A database failure.
pub async fn refreshed_prompt(
    store: &Store,
    session_id: &SessionId,
    facts: bool,
) -> Result<Option<String>, StoreError> {
    let Some(session) = store.sessions().get(session_id).await? else {
        return Ok(None);
    };
    let mut prompt = session.system_prompt.clone();
    if let Some(owner) = session
        .principal
        .filter(|_| facts && offers_memory(&session.toolset))
    {
        let facts = store.memories().list(owner).await?;
        prompt = with_person_memory(without_person_memory(&prompt), &facts);
    }
    let (instructions, _) = store.sessions().client_instructions(session_id).await?;
    if let Some(instructions) = instructions {
        prompt = with_client_instructions(&prompt, &instructions);
    }
    Ok((prompt != session.system_prompt).then_some(prompt))
}

/// The system prompt of a sub-agent started by `delegate`.
pub fn sub_agent_prompt(tools: &[ToolSpec]) -> String {
    let mut prompt = String::from(
        "You are a sub-agent working on one task for another agent. Work on the task with the \
         tools you have, then answer with the result only: facts found, what you could not do, \
         and anything the other agent must know. You cannot ask questions.",
    );
    if !tools.is_empty() {
        prompt.push_str("\n\nTools:");
        for tool in tools {
            prompt.push_str("\n- ");
            prompt.push_str(&tool.name);
        }
    }
    prompt
}

fn read_memory(path: &Path) -> Option<String> {
    match std::fs::read(path) {
        Ok(bytes) => {
            let cut = bytes.len().min(MAX_MEMORY_BYTES);
            let mut text = String::from_utf8_lossy(&bytes[..cut]).into_owned();
            if bytes.len() > MAX_MEMORY_BYTES {
                text.push_str("\n[memory file truncated]");
            }
            Some(text)
        }
        Err(err) => {
            tracing::warn!(path = %path.display(), error = %err, "memory file not read");
            None
        }
    }
}

fn first_sentence(text: &str) -> &str {
    let line = text.lines().next().unwrap_or(text);
    match line.find(". ") {
        Some(end) => &line[..=end],
        None => line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prompt_has_persona_rules_tools_and_memory_and_no_clock() {
        let dir = tempfile::tempdir().expect("tempdir");
        let memory = dir.path().join("memory.md");
        std::fs::write(&memory, "The user likes tea.").expect("write");
        let settings = AgentSettings {
            persona: "You are P.".to_owned(),
            rules: "Be brief.".to_owned(),
            memory_file: Some(memory),
            ..AgentSettings::default()
        };
        let tools = [ToolSpec {
            name: "calculator".to_owned(),
            description: "Evaluates arithmetic. Use it for sums.".to_owned(),
            parameters: serde_json::json!({}),
        }];
        let prompt = build_system_prompt(&settings, &tools);
        assert_eq!(
            prompt,
            "You are P.\n\nBe brief.\n\n# Tools\nYou can call these tools:\n- calculator: \
             Evaluates arithmetic.\n\n# Memory\nThe user likes tea."
        );
        assert_eq!(
            prompt,
            build_system_prompt(&settings, &tools),
            "deterministic"
        );
    }

    fn fact(id: i64, text: &str) -> MemoryEntry {
        MemoryEntry {
            id,
            text: text.to_owned(),
            created_at: 0,
        }
    }

    #[test]
    fn a_persons_facts_are_the_last_section_and_can_be_swapped() {
        let base = "You are P.\n\n# Memory\nShared notes.";
        assert_eq!(with_person_memory(base, &[]), base, "no facts, no section");
        let prompt = with_person_memory(base, &[fact(3, "Likes tea."), fact(7, "Lives in Lyon.")]);
        assert_eq!(
            prompt,
            "You are P.\n\n# Memory\nShared notes.\n\n# What you remember about this person\n\
             Facts about this person from earlier conversations (kept with the `memory` tool; #N \
             is a fact's id). Use them where they help; do not recite them.\n\
             - #3: Likes tea.\n- #7: Lives in Lyon."
        );
        assert_eq!(without_person_memory(&prompt), base);
        assert_eq!(without_person_memory(base), base);
        let lookalike = "You are P.\n\n# What you remember about this person\nNothing yet.";
        assert_eq!(without_person_memory(lookalike), lookalike);
        let swapped = with_person_memory(without_person_memory(&prompt), &[fact(9, "Hates rain.")]);
        assert!(swapped.starts_with(base));
        assert!(swapped.ends_with("\n- #9: Hates rain."));
        assert!(!swapped.contains("Likes tea"));
        assert_eq!(
            with_person_memory(without_person_memory(&swapped), &[]),
            base
        );
    }

    #[test]
    fn only_a_toolset_with_the_memory_tool_offers_memory() {
        assert!(offers_memory(&["calculator", "memory"]));
        assert!(!offers_memory(&["calculator"]));
        assert!(!offers_memory::<&str>(&[]));
    }

    #[test]
    fn a_missing_memory_file_is_left_out() {
        let settings = AgentSettings {
            memory_file: Some("/nonexistent/memory.md".into()),
            ..AgentSettings::default()
        };
        assert!(!build_system_prompt(&settings, &[]).contains("# Memory"));
    }

    #[test]
    fn client_instructions_come_after_the_operator_and_before_the_facts() {
        let facts = [MemoryEntry {
            id: 1,
            text: "likes tea".to_owned(),
            created_at: 0,
        }];
        let prompt = with_person_memory("You are P.", &facts);
        let with = with_client_instructions(&prompt, "  Answer in French. ");
        let (stable, tail) = split_system(&with);
        assert!(stable.starts_with("You are P.\n\n# The client's instructions\n"));
        assert!(
            stable.ends_with("with it.\n\nAnswer in French."),
            "{stable}"
        );
        assert_eq!(tail, split_system(&prompt).1, "the facts stay last");
        let replaced = with_client_instructions(&with, "Answer in German.");
        assert!(replaced.contains("Answer in German.") && !replaced.contains("French"));
        assert_eq!(
            replaced.matches(CLIENT_INSTRUCTIONS_HEADING).count(),
            1,
            "{replaced}"
        );
        assert!(client_instructions_note("Be terse.").contains("\nBe terse.\n[end of"));
    }
}
