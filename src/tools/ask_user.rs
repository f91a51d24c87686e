//! The `ask_user` tool: a question the agent puts to the person it works
//! for, with optional answers to choose from. The agent loop never runs it
//! as a tool: a call parks the turn until the person answers (a button or
//! their next message in the chat), and the answer is the call's result
//! (see `agent::round`). Only its arguments are owned here: their schema,
//! and [`Question::parse`], which the loop reads them with.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::{Tool, ToolContext, ToolError, arguments_schema};

/// The tool's name as the model calls it.
pub const ASK_USER: &str = "ask_user";

/// Most answers offered as buttons (the fewest any platform shows under
/// one message, but WhatsApp's three, which its adapter lists instead).
pub const MAX_CHOICES: usize = 5;

const DESCRIPTION: &str = "Ask the user a question and wait for the answer. Use it when you \
need a decision or a fact only the user has (which option they prefer, what a term means to \
them, whether to go ahead with something large or risky) instead of guessing. `question`: what \
to ask, complete and short. Optional `choices`: up to 5 short answers to offer as buttons; the \
user may also answer in their own words. Returns `answer`, the user's reply. If nobody answers \
in time the call fails; then go on with what you know and say what you assumed.";

/// Puts a question to the person; see the module doc.
#[derive(Debug, Clone, Copy, Default)]
pub struct AskUser;

/// The arguments.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Question {
    /// The question, complete and short.
    pub question: String,
    /// Up to 5 short answers offered as buttons.
    #[serde(default)]
    pub choices: Vec<String>,
}

impl Question {
    /// Reads a call's arguments.
    ///
    /// # Errors
    /// Not the arguments' shape, an empty question, or too many choices:
    /// a message for the model.
    pub fn parse(arguments: &str) -> Result<Self, String> {
        let question: Self =
            serde_json::from_str(arguments).map_err(|err| format!("invalid arguments: {err}"))?;
        if question.question.trim().is_empty() {
            return Err("`question` must not be empty".to_owned());
        }
        if question.choices.len() > MAX_CHOICES {
            return Err(format!("at most {MAX_CHOICES} `choices`"));
        }
        if question
            .choices
            .iter()
            .any(|choice| choice.trim().is_empty())
        {
            return Err("a choice must not be empty".to_owned());
        }
        Ok(question)
    }
}

#[async_trait]
impl Tool for AskUser {
    fn name(&self) -> &'static str {
        ASK_USER
    }

    fn description(&self) -> &'static str {
        DESCRIPTION
    }

    fn parameters(&self) -> Value {
        arguments_schema::<Question>()
    }

    /// Reached only where nobody can be asked (a sub-agent's loop).
    async fn call(&self, _ctx: &ToolContext, _args: Value) -> Result<Value, ToolError> {
        Err(ToolError::Failed(
            "only the main agent of a conversation can ask the user; decide with what you know \
             and say what you assumed"
                .to_owned(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_question_needs_text_and_at_most_five_choices() {
        assert!(Question::parse(r#"{"question": "Which?", "choices": ["a", "b"]}"#).is_ok());
        assert!(Question::parse(r#"{"question": " "}"#).is_err());
        assert!(
            Question::parse(r#"{"question": "q", "choices": ["1","2","3","4","5","6"]}"#).is_err()
        );
        assert!(Question::parse(r#"{"question": "q", "colour": 1}"#).is_err());
        assert!(Question::parse("not json").is_err());
    }
}
