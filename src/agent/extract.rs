//! Automatic extraction of a person's facts at compaction time
//! (`memory.extract_at_compaction`): before older turns of a direct-chat
//! session are summarised away, the model is asked which facts about the
//! person they hold (facts, preferences, decisions, options rejected), and
//! each new one is kept in the person's memory like a `memory` tool call
//! would keep it, within the same limits.
//!
//! Only a session with an owner (a direct chat) is read: a group chat's
//! conversation is never written into anyone's memory this way. The call is
//! recorded and charged like the summary's (scope `memory`); when it fails
//! the compaction goes on without it.

use crate::domain::{ChatMessage, PrincipalId, Scope};
use crate::store::{Batch, Remembered, StoreError};
use crate::tools::memory::normalise_fact;
use crate::tools::settings::MemorySettings;

use super::context::{CompactError, Summariser};
use super::step::{self, OneShot};

/// The question of an extraction call, asked after the conversation as it
/// is cached (the part to read and the facts already kept are named after
/// it).
pub const EXTRACT_REQUEST: &str = "[switchboard] Memory: pick out what is worth remembering about \
    the user from the conversation above, for your later conversations with them. List only \
    lasting facts the user stated about themselves: facts about them and their circumstances, \
    their preferences, decisions they made, and options they rejected (with why). Leave out \
    what is already kept, passing details, guesses, and anything about other people. Do not \
    call tools. Answer with one fact per line, each line starting with \"- \", each one short \
    sentence about \"the user\"; answer NONE when there is nothing.";

/// Asks the model for the person's facts in `history` (the conversation as
/// cached; `part` names the turns about to be summarised, e.g. `before
/// the user's message "…"`) and keeps the new ones for the session's owner.
/// Returns how many were kept.
///
/// # Errors
/// A database failure. A failed model call is logged and keeps nothing.
pub async fn extract_facts(
    by: &Summariser<'_>,
    history: &[ChatMessage],
    part: &str,
    settings: &MemorySettings,
) -> Result<usize, StoreError> {
    let Some(owner) = by
        .store
        .sessions()
        .get(by.session_id)
        .await?
        .and_then(|session| session.principal)
    else {
        return Ok(0);
    };
    let known = by.store.memories().list(owner).await?;
    let known = if known.is_empty() {
        "(none)".to_owned()
    } else {
        known
            .iter()
            .map(|fact| format!("- {}", fact.text))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let question = OneShot {
        scope: &Scope::named("memory"),
        history,
        prompt: format!(
            "{EXTRACT_REQUEST} Read the conversation {part}. Facts already kept:\n{known}"
        ),
        max_tokens: 1024,
    };
    let (answer, recorded) = match step::one_shot(by, question).await {
        Ok(answered) => answered,
        Err(CompactError::Store(err)) => return Err(err),
        Err(CompactError::Model(err)) => {
            tracing::warn!(error = %err, "extracting facts failed; the compaction goes on");
            return Ok(0);
        }
    };
    let mut batch = Batch::new();
    recorded.finish(&mut batch);
    by.store.write(batch).await?;
    keep(
        by,
        owner,
        &facts_in(&answer, settings.max_entry_chars),
        settings,
    )
    .await
}

/// Keeps `facts` for `owner` until the memory is full; returns how many
/// were new.
async fn keep(
    by: &Summariser<'_>,
    owner: PrincipalId,
    facts: &[String],
    settings: &MemorySettings,
) -> Result<usize, StoreError> {
    let mut kept = 0;
    for fact in facts {
        let max_entries = u64::from(settings.max_entries.get());
        match by
            .store
            .memories()
            .remember(owner, fact, Some(by.session_id), max_entries)
            .await?
        {
            Remembered::Added { .. } => kept += 1,
            Remembered::Known { .. } => {}
            Remembered::Full { .. } => {
                tracing::info!(principal_id = %owner, "memory full; further extracted facts dropped");
                break;
            }
        }
    }
    if kept > 0 {
        tracing::info!(principal_id = %owner, kept, "facts extracted at compaction");
    }
    Ok(kept)
}

/// The facts of an extraction answer: its `- ` lines, each made one trimmed
/// line; empty ones, `NONE` and ones longer than `max_chars` left out.
fn facts_in(answer: &str, max_chars: u32) -> Vec<String> {
    answer
        .lines()
        .filter_map(|line| line.trim().strip_prefix("- "))
        .map(normalise_fact)
        .filter(|fact| {
            !fact.is_empty()
                && !fact.eq_ignore_ascii_case("none")
                && fact.chars().count() <= max_chars as usize
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_dash_lines_within_the_limit_are_facts() {
        let answer = "Here they are:\n- The user is vegetarian.\n  -   The user  likes\tjazz. \n\
                      * not a fact line\n- \n- NONE\n- The user has a very long fact here.";
        assert_eq!(
            facts_in(answer, 30),
            ["The user is vegetarian.", "The user likes jazz."]
        );
        assert!(facts_in("NONE", 100).is_empty());
    }
}
