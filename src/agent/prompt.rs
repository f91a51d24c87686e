//! Building a session's system prompt, once, when the session starts.
//!
//! The prompt is persona, rules, guidance for each offered tool, and the
//! optional memory file's contents. It is stored on the session row and read
//! back verbatim on every later turn; it is never rebuilt, so an edit of the
//! memory file reaches new sessions only, and the provider's prompt cache
//! keeps hitting. Nothing time-dependent goes in.

use std::path::Path;

use crate::config::AgentSettings;
use crate::llm::ToolSpec;

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

    #[test]
    fn a_missing_memory_file_is_left_out() {
        let settings = AgentSettings {
            memory_file: Some("/nonexistent/memory.md".into()),
            ..AgentSettings::default()
        };
        assert!(!build_system_prompt(&settings, &[]).contains("# Memory"));
    }
}
