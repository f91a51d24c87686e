//! Asking a person from inside the loop: which calls of a round wait for a
//! decision ([`Asker::gate`]), the approval written with each, and what
//! the model is told once a decision (or an answer, or the expiry) is in
//! ([`settled_result`]).
//!
//! Only the main agent of a conversation asks ([`LoopEnv::asker`] is
//! `None` in a sub-agent): an `ask` tool called by a sub-agent is refused
//! with a result that says why, never run unasked.
//!
//! [`LoopEnv::asker`]: super::run::LoopEnv

use std::time::Duration;

use serde_json::json;
use switchboard_contract::{AccountId, ChatId, PlatformName, ThreadId, UserId};

use super::Agent;
use super::run::LoopEnv;
use crate::domain::schedule::span_words;
use crate::domain::{ApprovalKind, ApprovalStatus, PrincipalId, ToolCall, canonical_json};
use crate::store::{ApprovalRow, NewApproval, StoreError};
use crate::tools::approval::Policy;
use crate::tools::ask_user::{ASK_USER, Question};

/// Who a turn's questions go to: the chat and sender of its message.
#[derive(Debug, Clone)]
pub struct Asker {
    pub platform: PlatformName,
    pub account: AccountId,
    pub chat_id: ChatId,
    pub thread_id: Option<ThreadId>,
    pub sender_id: UserId,
    pub principal_id: Option<PrincipalId>,
}

/// What one call of a round needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gate {
    /// It runs now.
    Run,
    /// It waits for a person: `kind`, with a question's `choices`.
    Ask {
        kind: ApprovalKind,
        choices: Vec<String>,
    },
    /// It is not run; `reason` is its error result.
    Refuse(String),
    /// A call of the API client's own tool: handed to the client.
    Client,
}

/// What each call of a round needs, in call order: `ask_user` with valid
/// arguments asks; an `ask` tool asks unless the conversation allowed it
/// for good; everything else runs. Where nobody can be asked (a
/// sub-agent), an `ask` tool is refused and `ask_user` runs, which refuses
/// itself.
///
/// # Errors
/// A database failure (reading the conversation's grants).
pub async fn gate(
    agent: &Agent,
    env: &LoopEnv,
    calls: &[ToolCall],
) -> Result<Vec<Gate>, StoreError> {
    let mut gates = Vec::with_capacity(calls.len());
    for call in calls {
        gates.push(gate_one(agent, env, call).await?);
    }
    Ok(gates)
}

async fn gate_one(agent: &Agent, env: &LoopEnv, call: &ToolCall) -> Result<Gate, StoreError> {
    let Some(tool) = agent.toolset.get(&call.name) else {
        // Not the agent's: the client's, or unknown (which runs, and says
        // so in its result).
        return Ok(if env.client_tools.has(&call.name) {
            Gate::Client
        } else {
            Gate::Run
        });
    };
    let asks = env.asker.is_some();
    if call.name == ASK_USER {
        // Invalid arguments run, and the tool's own check answers.
        return Ok(match Question::parse(&call.arguments) {
            Ok(question) if asks => Gate::Ask {
                kind: ApprovalKind::Question,
                choices: question.choices,
            },
            _ => Gate::Run,
        });
    }
    Ok(match env.policy.of(&call.name, &tool.source()) {
        Policy::Allow => Gate::Run,
        Policy::Deny => Gate::Refuse(format!(
            "`{}` is not allowed here; it was not run",
            call.name
        )),
        Policy::Ask if !asks => Gate::Refuse(format!(
            "`{}` needs a person's approval, which only the main agent can ask for; it was not \
             run (say so in your answer, so the main agent can call it)",
            call.name
        )),
        Policy::Ask
            if env
                .store
                .approvals()
                .granted(&env.session_id, &call.name)
                .await? =>
        {
            Gate::Run
        }
        Policy::Ask => Gate::Ask {
            kind: ApprovalKind::Tool,
            choices: Vec::new(),
        },
    })
}

impl Asker {
    /// The approval to write for `call`, by `policy`'s rules.
    #[must_use]
    pub fn approval<'a>(
        &'a self,
        env: &'a LoopEnv,
        call: &'a ToolCall,
        kind: ApprovalKind,
        choices: &'a [String],
        nonce: &'a str,
    ) -> NewApproval<'a> {
        NewApproval {
            nonce,
            session_id: &env.session_id,
            inbound_id: env.task_id,
            call_id: &call.id,
            kind,
            tool: &call.name,
            arguments: &call.arguments,
            choices,
            principal_id: self.principal_id,
            platform: &self.platform,
            account: &self.account,
            chat_id: &self.chat_id,
            thread_id: self.thread_id.as_ref(),
            sender_id: &self.sender_id,
            approver: env.policy.settings.approver.as_str(),
            expires_at: crate::domain::now_ms().saturating_add(env.policy.timeout_ms()),
        }
    }
}

/// A fresh nonce for an approval's buttons.
#[must_use]
pub fn nonce() -> String {
    let bytes = uuid::Uuid::new_v4();
    hex::encode(&bytes.as_bytes()[..5])
}

/// The result the model sees for a call whose approval is settled without
/// running it, and whether it is an error; `None` when the call is to run
/// (allowed, or in doubt and to be run again).
#[must_use]
pub fn settled_result(approval: &ApprovalRow, timeout: Duration) -> Option<(String, bool)> {
    let error = |message: String| {
        Some((
            canonical_json(&json!({"success": false, "error": message})),
            true,
        ))
    };
    match (approval.kind, approval.status) {
        (_, ApprovalStatus::Pending) => None,
        (ApprovalKind::Question, ApprovalStatus::Answered) => Some((
            canonical_json(&json!({
                "success": true,
                "answer": approval.answer.clone().unwrap_or_default(),
            })),
            false,
        )),
        (ApprovalKind::Question, ApprovalStatus::Expired) => error(format!(
            "the user did not answer within {}; go on with what you know and say what you \
             assumed",
            span_words(timeout)
        )),
        (_, status) if status.allows() => None,
        (ApprovalKind::InDoubt, ApprovalStatus::Denied) => error(
            "the gateway restarted while this tool was running, so its outcome is unknown; the \
             user chose not to run it again"
                .to_owned(),
        ),
        (_, ApprovalStatus::Denied) => {
            error("the user denied this call; it was not run".to_owned())
        }
        (_, ApprovalStatus::Expired) => error(format!(
            "nobody approved this call within {}; it was not run",
            span_words(timeout)
        )),
        (_, ApprovalStatus::Stopped) => {
            error("the task was stopped while this call waited; it was not run".to_owned())
        }
        (_, _) => error("this call was not run".to_owned()),
    }
}
